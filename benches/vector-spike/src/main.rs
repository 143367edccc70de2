//! Decision 0033's measurements (issue 49): one candidate index crate on N clustered synthetic
//! vectors of 384 dimensions (cosine), generated from a fixed seed, against exact search.
//!
//!   cargo run --release -- usearch|hnsw_rs N [QUERIES]
//!
//! Prints one `name value` line per figure: build time and memory, recall@10 and query
//! latency (p50, p99; one thread) at two search breadths, the same for a filter that passes 1%
//! of the vectors (results returned, recall against the exact filtered answer), and the time
//! to save the index to a file and load it back.

use std::time::{Duration, Instant};

const DIMS: usize = 384;
const CLUSTERS: usize = 1_000;
const K: usize = 10;
/// Vector `i` carries tag `i % TAGS`; the filter passes tag 7 (1%).
const TAGS: u64 = 100;
const TAG_PASSING: u64 = 7;

/// xorshift64*, with Box–Muller for normal draws: the same vectors on every machine.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f32 {
        let (u, v) = (self.unit(), self.unit());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}

fn normalize(vector: &mut [f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
}

/// `count` vectors around `CLUSTERS` random centres (noise of norm ~0.7 around a unit centre),
/// unit length, as one flat array.
fn clustered(rng: &mut Rng, centres: &[Vec<f32>], count: usize) -> Vec<f32> {
    let sigma = 0.7 / (DIMS as f32).sqrt();
    let mut flat = Vec::with_capacity(count * DIMS);
    for _ in 0..count {
        let centre = &centres[(rng.next_u64() % centres.len() as u64) as usize];
        let start = flat.len();
        flat.extend(centre.iter().map(|c| c + sigma * rng.normal()));
        normalize(&mut flat[start..]);
    }
    flat
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The exact top `K` of each query among the vectors `passes` lets through, by cosine (the
/// vectors are unit length: the dot product), on every CPU.
fn exact(data: &[f32], queries: &[f32], passes: impl Fn(u64) -> bool + Sync) -> Vec<Vec<u64>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let query_count = queries.len() / DIMS;
    let per_thread = query_count.div_ceil(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                let passes = &passes;
                scope.spawn(move || {
                    let mut answers = Vec::new();
                    for q in thread * per_thread..((thread + 1) * per_thread).min(query_count) {
                        let query = &queries[q * DIMS..(q + 1) * DIMS];
                        let mut scored: Vec<(f32, u64)> = data
                            .chunks_exact(DIMS)
                            .enumerate()
                            .filter(|(i, _)| passes(*i as u64))
                            .map(|(i, v)| (dot(query, v), i as u64))
                            .collect();
                        scored.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
                        answers.push(scored.iter().take(K).map(|(_, i)| *i).collect());
                    }
                    answers
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    })
}

/// What one search gives back: keys, best first.
type Search<'a> = dyn Fn(&[f32], usize, Option<&dyn Fn(u64) -> bool>) -> Vec<u64> + 'a;

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Recall@K and latency over `queries` at breadth `ef`, with or without the filter.
fn measure(name: &str, search: &Search<'_>, queries: &[f32], truth: &[Vec<u64>], filtered: bool) {
    let passes = |key: u64| key % TAGS == TAG_PASSING;
    let mut latencies = Vec::new();
    let (mut found, mut hits, mut short) = (0usize, 0usize, 0usize);
    for (query, truth) in queries.chunks_exact(DIMS).zip(truth) {
        let started = Instant::now();
        let keys = search(
            query,
            K,
            filtered.then_some(&passes as &dyn Fn(u64) -> bool),
        );
        latencies.push(started.elapsed());
        assert!(
            !filtered || keys.iter().all(|&key| passes(key)),
            "the filter held"
        );
        found += keys.len();
        short += usize::from(keys.len() < K);
        hits += keys.iter().filter(|key| truth.contains(key)).count();
    }
    latencies.sort();
    let count = truth.len();
    println!(
        "{name}.recall_at_10 {:.4}",
        hits as f64 / (count * K) as f64
    );
    println!("{name}.results_mean {:.2}", found as f64 / count as f64);
    println!("{name}.queries_short_of_k {short}");
    println!(
        "{name}.latency_us_p50 {}",
        quantile(&latencies, 0.5).as_micros()
    );
    println!(
        "{name}.latency_us_p99 {}",
        quantile(&latencies, 0.99).as_micros()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(candidate), Some(count)) = (args.get(1), args.get(2).and_then(|n| n.parse().ok()))
    else {
        eprintln!("usage: ctxstore-vector-spike usearch|hnsw_rs N [QUERIES]");
        std::process::exit(2);
    };
    let count: usize = count;
    let query_count: usize = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(1_000);
    let mut rng = Rng(0x5eed_0033);
    let centres: Vec<Vec<f32>> = (0..CLUSTERS)
        .map(|_| {
            let mut centre: Vec<f32> = (0..DIMS).map(|_| rng.normal()).collect();
            normalize(&mut centre);
            centre
        })
        .collect();
    let data = clustered(&mut rng, &centres, count);
    let queries = clustered(&mut rng, &centres, query_count);
    let started = Instant::now();
    let truth = exact(&data, &queries, |_| true);
    let truth_filtered = exact(&data, &queries, |key| key % TAGS == TAG_PASSING);
    eprintln!("exact answers in {:?}", started.elapsed());
    // The exact scan of the filtered candidates alone (what a planner does when few pass).
    let candidates: Vec<u64> = (0..count as u64)
        .filter(|k| k % TAGS == TAG_PASSING)
        .collect();
    let mut scan = Vec::new();
    for query in queries.chunks_exact(DIMS).take(200) {
        let started = Instant::now();
        let mut scored: Vec<(f32, u64)> = candidates
            .iter()
            .map(|&k| {
                (
                    dot(query, &data[k as usize * DIMS..(k as usize + 1) * DIMS]),
                    k,
                )
            })
            .collect();
        let nth = K.min(scored.len()) - 1;
        scored.select_nth_unstable_by(nth, |a, b| b.0.total_cmp(&a.0));
        std::hint::black_box(&scored);
        scan.push(started.elapsed());
    }
    scan.sort();
    println!("exact_filtered_scan.candidates {}", candidates.len());
    println!(
        "exact_filtered_scan.latency_us_p50 {}",
        quantile(&scan, 0.5).as_micros()
    );
    println!("vectors {count}");
    println!("dims {DIMS}");
    let dir = std::env::temp_dir().join(format!("ctxstore-vector-spike-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    match candidate.as_str() {
        "usearch" => run_usearch(&data, &queries, &truth, &truth_filtered, &dir),
        "hnsw_rs" => run_hnsw_rs(&data, &queries, &truth, &truth_filtered, &dir),
        other => panic!("unknown candidate {other}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn report_build(started: Instant, rss_before: u64, count: usize) {
    let seconds = started.elapsed().as_secs_f64();
    println!("build.seconds {seconds:.1}");
    println!("build.inserts_per_s {:.0}", count as f64 / seconds);
    let grown = rss_bytes().saturating_sub(rss_before);
    println!("build.rss_bytes_per_vector {}", grown / count as u64);
}

fn run_usearch(
    data: &[f32],
    queries: &[f32],
    truth: &[Vec<u64>],
    filtered: &[Vec<u64>],
    dir: &std::path::Path,
) {
    use usearch::{Index, IndexOptions, MetricKind, ScalarKind};
    let count = data.len() / DIMS;
    let options = IndexOptions {
        dimensions: DIMS,
        metric: MetricKind::Cos,
        quantization: ScalarKind::F32,
        connectivity: 16,
        expansion_add: 128,
        expansion_search: 64,
        multi: false,
    };
    let rss_before = rss_bytes();
    let started = Instant::now();
    let index = Index::new(&options).unwrap();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    index.reserve_capacity_and_threads(count, threads).unwrap();
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let index = &index;
            scope.spawn(move || {
                for key in (thread..count).step_by(threads) {
                    index
                        .add(key as u64, &data[key * DIMS..(key + 1) * DIMS])
                        .unwrap();
                }
            });
        }
    });
    report_build(started, rss_before, count);
    println!(
        "build.index_memory_bytes_per_vector {}",
        index.memory_usage() / count
    );
    println!("build.simd {}", index.hardware_acceleration());
    for ef in [64, 128] {
        index.change_expansion_search(ef);
        let search = |query: &[f32], k: usize, filter: Option<&dyn Fn(u64) -> bool>| -> Vec<u64> {
            match filter {
                None => index.search(query, k).unwrap().keys,
                Some(passes) => index.filtered_search(query, k, passes).unwrap().keys,
            }
        };
        measure(&format!("search_ef{ef}"), &search, queries, truth, false);
        measure(
            &format!("filtered_1pct_ef{ef}"),
            &search,
            queries,
            filtered,
            true,
        );
    }
    let path = dir.join("usearch.index");
    let started = Instant::now();
    index.save(path.to_str().unwrap()).unwrap();
    println!("save.seconds {:.2}", started.elapsed().as_secs_f64());
    println!(
        "save.file_bytes_per_vector {}",
        std::fs::metadata(&path).unwrap().len() / count as u64
    );
    drop(index);
    let started = Instant::now();
    let loaded = Index::new(&options).unwrap();
    loaded.load(path.to_str().unwrap()).unwrap();
    println!("load.seconds {:.2}", started.elapsed().as_secs_f64());
    assert_eq!(loaded.size(), count);
}

fn run_hnsw_rs(
    data: &[f32],
    queries: &[f32],
    truth: &[Vec<u64>],
    filtered: &[Vec<u64>],
    dir: &std::path::Path,
) {
    use hnsw_rs::prelude::*;
    let count = data.len() / DIMS;
    let vectors: Vec<Vec<f32>> = data.chunks_exact(DIMS).map(<[f32]>::to_vec).collect();
    let rss_before = rss_bytes();
    let started = Instant::now();
    let mut hnsw = Hnsw::<f32, DistCosine>::new(16, count, 16, 128, DistCosine {});
    let with_ids: Vec<(&Vec<f32>, usize)> = vectors.iter().zip(0..).collect();
    hnsw.parallel_insert(&with_ids);
    hnsw.set_searching_mode(true);
    report_build(started, rss_before, count);
    for ef in [64, 128] {
        let search = |query: &[f32], k: usize, filter: Option<&dyn Fn(u64) -> bool>| -> Vec<u64> {
            let found = match filter {
                None => hnsw.search(query, k, ef),
                Some(passes) => {
                    let passes = |id: &usize| passes(*id as u64);
                    hnsw.search_filter(query, k, ef, Some(&passes))
                }
            };
            found.iter().map(|n| n.d_id as u64).collect()
        };
        measure(&format!("search_ef{ef}"), &search, queries, truth, false);
        measure(
            &format!("filtered_1pct_ef{ef}"),
            &search,
            queries,
            filtered,
            true,
        );
    }
    let started = Instant::now();
    let basename = hnsw.file_dump(dir, "hnsw").unwrap();
    println!("save.seconds {:.2}", started.elapsed().as_secs_f64());
    let bytes: u64 = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| entry.ok()?.metadata().ok())
        .map(|meta| meta.len())
        .sum();
    println!("save.file_bytes_per_vector {}", bytes / count as u64);
    drop(hnsw);
    let started = Instant::now();
    let mut io = HnswIo::new(dir, &basename);
    let loaded: Hnsw<f32, DistCosine> = io.load_hnsw().unwrap();
    println!("load.seconds {:.2}", started.elapsed().as_secs_f64());
    assert_eq!(loaded.get_nb_point(), count);
}
