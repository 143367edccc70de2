//! Vector search's shared words (decision 0033): the metrics, their scores, and the limits a
//! client must respect and the store enforces. Scores are the ones LangGraph's PostgresStore
//! answers, so that higher is nearer whatever the metric.

/// How an index compares vectors. The wire's `metric u8` and the log's index record hold
/// `code()`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum Metric {
    /// Score: the cosine similarity (1 − cosine distance); 0 when either vector is zero.
    Cosine,
    /// Score: the dot product.
    InnerProduct,
    /// Score: −the Euclidean distance.
    L2,
}

impl Metric {
    pub const ALL: [Metric; 3] = [Metric::Cosine, Metric::InnerProduct, Metric::L2];

    pub fn code(self) -> u8 {
        match self {
            Metric::Cosine => 1,
            Metric::InnerProduct => 2,
            Metric::L2 => 3,
        }
    }

    pub fn from_code(code: u8) -> Option<Metric> {
        Metric::ALL.into_iter().find(|metric| metric.code() == code)
    }

    /// The name the CLI, the console and the clients use.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Cosine => "cosine",
            Metric::InnerProduct => "inner_product",
            Metric::L2 => "l2",
        }
    }

    pub fn from_name(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|metric| metric.name() == name)
    }

    /// `score` with both vectors' Euclidean norms known (`norm`): cosine then costs one sum,
    /// not three. The exact scan keeps each stored vector's norm beside it.
    pub fn score_normed(self, query: &[f32], query_norm: f32, candidate: &[f32], norm: f32) -> f32 {
        match self {
            Metric::Cosine => {
                if query_norm == 0.0 || norm == 0.0 {
                    return 0.0;
                }
                let [dot, _, _] = sums(query, candidate, |a, b| [a * b, 0.0, 0.0]);
                // f32 rounding may take a vector's score against itself past 1.
                (dot / (query_norm * norm)).clamp(-1.0, 1.0)
            }
            Metric::InnerProduct | Metric::L2 => self.score(query, candidate),
        }
    }

    /// The score of `candidate` against `query` (same length, finite components: the callers
    /// checked both). Eight running sums per quantity, so that the compiler vectorises the
    /// loop (the exact scan's whole cost); a sum of products is exact to f32 rounding.
    pub fn score(self, query: &[f32], candidate: &[f32]) -> f32 {
        assert_eq!(query.len(), candidate.len(), "vectors of one index");
        match self {
            Metric::Cosine => {
                let [dot, query_norm, candidate_norm] =
                    sums(query, candidate, |a, b| [a * b, a * a, b * b]);
                if query_norm == 0.0 || candidate_norm == 0.0 {
                    0.0
                } else {
                    (dot / (query_norm.sqrt() * candidate_norm.sqrt())).clamp(-1.0, 1.0)
                }
            }
            Metric::InnerProduct => sums(query, candidate, |a, b| [a * b, 0.0, 0.0])[0],
            Metric::L2 => {
                let squared = sums(query, candidate, |a, b| {
                    let d = a - b;
                    [d * d, 0.0, 0.0]
                })[0];
                -squared.sqrt()
            }
        }
    }
}

/// A vector's Euclidean norm (for `Metric::score_normed`).
pub fn norm(vector: &[f32]) -> f32 {
    sums(vector, vector, |a, _| [a * a, 0.0, 0.0])[0].sqrt()
}

/// Up to three sums over the pairs of `a` and `b`, each kept in eight lanes.
#[inline(always)]
fn sums(a: &[f32], b: &[f32], terms: impl Fn(f32, f32) -> [f32; 3]) -> [f32; 3] {
    const LANES: usize = 8;
    let mut lanes = [[0.0f32; LANES]; 3];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (a_rest, b_rest) = (a_chunks.remainder(), b_chunks.remainder());
    for (a, b) in a_chunks.zip(b_chunks) {
        for lane in 0..LANES {
            let [x, y, z] = terms(a[lane], b[lane]);
            lanes[0][lane] += x;
            lanes[1][lane] += y;
            lanes[2][lane] += z;
        }
    }
    let mut total = lanes.map(|lane| lane.iter().sum::<f32>());
    for (&a, &b) in a_rest.iter().zip(b_rest) {
        let [x, y, z] = terms(a, b);
        total[0] += x;
        total[1] += y;
        total[2] += z;
    }
    total
}

/// Dimensions of an index's vectors: 1..=4,096.
pub const VECTOR_DIMS_MAX: usize = 4096;
/// Vectors one key-value entry carries (LangGraph embeds several fields of one item).
pub const VECTORS_PER_ENTRY_MAX: usize = 64;
/// Vectors one turn carries (decision 0033 §1).
pub const VECTORS_PER_TURN_MAX: usize = 16;
/// Indexes one tenant holds.
pub const VECTOR_INDEXES_PER_TENANT_MAX: usize = 64;
/// An index's name: 1..=64 bytes of UTF-8.
pub const VECTOR_INDEX_NAME_BYTES_MAX: usize = 64;
/// Hits a search answers (`k`), and `k + offset`.
pub const VECTOR_K_MAX: usize = 1000;
/// A search's filter over the values (JSON).
pub const VECTOR_FILTER_BYTES_MAX: usize = 65_536;
/// The graph's search breadth, per index or per search.
pub const VECTOR_EF_SEARCH_MAX: u16 = 4096;
/// The breadth an index gets when its creation names none (decision 0033: 64 falls to 0.888
/// recall at a million vectors, 128 gives 0.965).
pub const VECTOR_EF_SEARCH_DEFAULT: u16 = 128;

/// Whether every component is finite (no NaN, no infinity): what the store takes.
pub fn all_finite(vector: &[f32]) -> bool {
    vector.iter().all(|component| component.is_finite())
}

/// Whether `name` may name an index: 1..=64 bytes (UTF-8 by its type).
pub fn is_index_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= VECTOR_INDEX_NAME_BYTES_MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_postgres_stores() {
        let a = [1.0, 0.0];
        let b = [0.0, 2.0];
        assert_eq!(Metric::Cosine.score(&a, &a), 1.0);
        assert_eq!(Metric::Cosine.score(&a, &b), 0.0);
        assert_eq!(Metric::Cosine.score(&a, &[0.0, 0.0]), 0.0);
        assert_eq!(Metric::InnerProduct.score(&[1.0, 2.0], &[3.0, 4.0]), 11.0);
        assert_eq!(Metric::L2.score(&[0.0, 0.0], &[3.0, 4.0]), -5.0);
        let (q, c) = ([1.0, 2.0, 3.0], [-2.0, 0.5, 4.0]);
        for metric in Metric::ALL {
            let normed = metric.score_normed(&q, norm(&q), &c, norm(&c));
            assert!((normed - metric.score(&q, &c)).abs() < 1e-6, "{metric:?}");
        }
        assert_eq!(norm(&[3.0, 4.0]), 5.0);
    }

    #[test]
    fn codes_and_names_round_trip() {
        for metric in Metric::ALL {
            assert_eq!(Metric::from_code(metric.code()), Some(metric));
            assert_eq!(Metric::from_name(metric.name()), Some(metric));
        }
        assert_eq!(Metric::from_code(0), None);
        assert_eq!(Metric::from_code(4), None);
    }
}
