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

    /// The score of `candidate` against `query` (same length, finite components: the callers
    /// checked both). Accumulates in f64 so that the exact path ranks as a reference would.
    pub fn score(self, query: &[f32], candidate: &[f32]) -> f32 {
        assert_eq!(query.len(), candidate.len(), "vectors of one index");
        match self {
            Metric::Cosine => {
                let (mut dot, mut query_norm, mut candidate_norm) = (0.0f64, 0.0f64, 0.0f64);
                for (&a, &b) in query.iter().zip(candidate) {
                    let (a, b) = (f64::from(a), f64::from(b));
                    dot += a * b;
                    query_norm += a * a;
                    candidate_norm += b * b;
                }
                if query_norm == 0.0 || candidate_norm == 0.0 {
                    0.0
                } else {
                    (dot / (query_norm.sqrt() * candidate_norm.sqrt())) as f32
                }
            }
            Metric::InnerProduct => query
                .iter()
                .zip(candidate)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum::<f64>() as f32,
            Metric::L2 => {
                -(query
                    .iter()
                    .zip(candidate)
                    .map(|(&a, &b)| {
                        let d = f64::from(a) - f64::from(b);
                        d * d
                    })
                    .sum::<f64>()
                    .sqrt() as f32)
            }
        }
    }
}

/// Dimensions of an index's vectors: 1..=4,096.
pub const VECTOR_DIMS_MAX: usize = 4096;
/// Vectors one key-value entry carries (LangGraph embeds several fields of one item).
pub const VECTORS_PER_ENTRY_MAX: usize = 64;
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
