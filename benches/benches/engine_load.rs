//! In-process load benchmark of the engine: the figures of benches/results/HISTORY.md#engine-in-process.
//!
//! `cargo bench -p ctxstore-benches --bench engine_load` runs everything; set
//! `CTXSTORE_BENCH_DIR` to put the stores elsewhere than the system temp dir, and
//! `CTXSTORE_BENCH_RECOVERY_TURNS` / `_BLOBS` to size the recovery store (1M / 100k).
//!
//! Measured in one run, on the same disk: the fdatasync floor, 10 KiB chat-like appends at 1
//! and 32 concurrent appenders (closed loop), get-last-64 with payloads, open/recovery time of
//! a store with 1M turns and 100k blobs, and contexts as agent threads (`contexts`: 1M named
//! contexts with 4 tags, listing by a tag that 1% carry, key-value puts next to appends, and
//! appends with and without those contexts present; `CTXSTORE_BENCH_CONTEXTS` sizes it), and
//! depth access on one deep chain (`depth`: a range at depth 0 against one next to the head,
//! skip pointers; `CTXSTORE_BENCH_DEPTH` sizes it, 200k by default).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_benches::text::ChatText;
use ctxstore_benches::{LatencyUs, floor, latency_histogram};
use ctxstore_engine::contexts::ListQuery;
use ctxstore_engine::turns::LogQuery;
use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, ContextRef, Engine, EngineConfig, NewContext,
    OpenCheck, TurnOptions,
};
use hdrhistogram::Histogram;

const PAYLOAD_BYTES: usize = 10 * 1024;

fn main() {
    // `cargo bench` passes `--bench`; with a filter argument (comma-separated section names,
    // e.g. `floor,append`), run only matching sections.
    let filter: Option<String> = std::env::args().skip(1).find(|arg| !arg.starts_with('-'));
    let wants = |name: &str| {
        filter
            .as_deref()
            .is_none_or(|f| f.split(',').any(|part| name.contains(part)))
    };
    let base =
        std::env::var_os("CTXSTORE_BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    std::fs::create_dir_all(&base).unwrap();
    print_machine(&base);

    if wants("floor") {
        let append = LatencyUs::of(&floor::append_fdatasync(&base, 4096, 2000).unwrap());
        let overwrite = LatencyUs::of(&floor::overwrite_fdatasync(&base, 4096, 2000).unwrap());
        println!("floor   4 KiB append + fdatasync:            {append}");
        println!("floor   4 KiB overwrite (prefilled) + fdatasync: {overwrite}");
    }
    if wants("append") {
        for appenders in [1usize, 32] {
            let dir = tempfile::tempdir_in(&base).unwrap();
            let engine = Engine::open(bench_config(dir.path())).unwrap();
            let duration = Duration::from_secs(if appenders == 1 { 5 } else { 8 });
            let result = append_load(&engine, appenders, duration);
            println!(
                "append  10 KiB, {appenders:>2} appenders: {:>7.0} appends/s, {}",
                result.0, result.1
            );
            engine.shutdown();
        }
    }
    if wants("get_last") {
        let dir = tempfile::tempdir_in(&base).unwrap();
        let engine = Engine::open(bench_config(dir.path())).unwrap();
        let latency = get_last_64(&engine);
        println!("read    get-last-64 with payloads:          {latency}");
        engine.shutdown();
    }
    if wants("contexts") {
        contexts(&base, env_u64("CTXSTORE_BENCH_CONTEXTS", 1_000_000));
    }
    if wants("turns") {
        turns(&base);
    }
    if wants("depth") {
        depth(&base, env_u64("CTXSTORE_BENCH_DEPTH", 200_000));
    }
    if wants("recovery") {
        let turns = env_u64("CTXSTORE_BENCH_RECOVERY_TURNS", 1_000_000);
        let blobs = env_u64("CTXSTORE_BENCH_RECOVERY_BLOBS", 100_000);
        recovery(&base, turns, blobs);
    }
}

/// Engine configuration of the benchmarks: defaults, with `CTXSTORE_BENCH_SHARDS`,
/// `CTXSTORE_BENCH_PLACEMENT`, `CTXSTORE_BENCH_PREALLOCATE=0` and
/// `CTXSTORE_BENCH_BATCH_WAIT_US` to compare variants.
fn bench_config(dir: &Path) -> EngineConfig {
    let mut config = EngineConfig::new(dir);
    if let Ok(shards) = std::env::var("CTXSTORE_BENCH_SHARDS") {
        config = config.with_shards(shards.parse().unwrap());
    }
    if let Ok(placement) = std::env::var("CTXSTORE_BENCH_PLACEMENT") {
        config.placement = placement.parse().unwrap();
    }
    if std::env::var("CTXSTORE_BENCH_PREALLOCATE").is_ok_and(|v| v == "0") {
        config.preallocate = false;
    }
    if let Ok(wait) = std::env::var("CTXSTORE_BENCH_BATCH_WAIT_US") {
        config.limits.batch_wait_us_max = wait.parse().unwrap();
    }
    config
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn print_machine(dir: &Path) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|line| line.starts_with("model name"))
        .map(|line| line.split(':').nth(1).unwrap_or("").trim().to_string())
        .unwrap_or_default();
    println!(
        "machine {cores} cores ({model}), Linux {}, data in {}",
        kernel.trim(),
        dir.display()
    );
}

/// Closed loop: `appenders` tasks, each on its own context, each appending 10 KiB chat text
/// and waiting for the acknowledgement before the next. Tasks run on two compio runtimes
/// (the machine's two cores), as network cores would.
fn append_load(engine: &Engine, appenders: usize, duration: Duration) -> (f64, LatencyUs) {
    append_load_with(engine, appenders, duration, |_| TurnOptions::default())
}

/// `append_load` with each append's options made by `options(index)`.
fn append_load_with(
    engine: &Engine,
    appenders: usize,
    duration: Duration,
    options: fn(u64) -> TurnOptions,
) -> (f64, LatencyUs) {
    // Every call appends payloads no earlier call stored: a round that repeated the last
    // round's payloads would be mostly dedup hits and not comparable with it.
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let runtimes = appenders.min(2);
    let window = AppendWindow {
        run,
        start: Instant::now() + Duration::from_millis(50),
        warmup: Duration::from_millis(500),
        duration,
        options,
    };
    let threads: Vec<_> = (0..runtimes)
        .map(|runtime_index| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let runtime = compio::runtime::Runtime::new().unwrap();
                runtime.block_on(async move {
                    let tasks: Vec<_> = (runtime_index..appenders)
                        .step_by(runtimes)
                        .map(|task| {
                            let engine = engine.clone();
                            compio::runtime::spawn(append_task(engine, task, window))
                        })
                        .collect();
                    let mut merged = latency_histogram();
                    let mut total = 0;
                    for task in tasks {
                        let (histogram, count) = task.await.unwrap();
                        merged.add(&histogram).unwrap();
                        total += count;
                    }
                    (merged, total)
                })
            })
        })
        .collect();
    let mut merged = latency_histogram();
    let mut total = 0;
    for thread in threads {
        let (histogram, count) = thread.join().unwrap();
        merged.add(&histogram).unwrap();
        total += count;
    }
    (
        total as f64 / duration.as_secs_f64(),
        LatencyUs::of(&merged),
    )
}

/// When the appenders of one `append_load_with` call append and what: the call's number
/// (its payloads differ from every other call's), the start, the warm-up not measured, the
/// measured time and each append's options.
#[derive(Clone, Copy)]
struct AppendWindow {
    run: u64,
    start: Instant,
    warmup: Duration,
    duration: Duration,
    options: fn(u64) -> TurnOptions,
}

/// One appender of `append_load_with`, on its own context: answers the latencies it measured
/// and how many appends they are.
async fn append_task(engine: Engine, task: usize, window: AppendWindow) -> (Histogram<u64>, u64) {
    let context = engine.create_context().await.unwrap().context_id;
    let mut text = ChatText::new(task as u64);
    // Payloads are made before timing: the generator is not the engine.
    let payloads: Vec<Bytes> = (0..64)
        .map(|_| Bytes::from(text.payload(PAYLOAD_BYTES)))
        .collect();
    let mut histogram = latency_histogram();
    let mut count = 0u64;
    while Instant::now() < window.start {
        compio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut index = 0;
    loop {
        let now = Instant::now();
        if now >= window.start + window.warmup + window.duration {
            break;
        }
        let payload = payloads[index % payloads.len()].clone();
        // Every payload distinct: vary its first bytes by counter.
        let mut unique = payload.to_vec();
        unique[..8].copy_from_slice(&(index as u64).to_le_bytes());
        unique[8..16].copy_from_slice(&window.run.to_le_bytes());
        index += 1;
        let sent = Instant::now();
        engine
            .append(AppendRequest {
                context_id: context,
                expected_head: None,
                type_tag: 1,
                codec: 1,
                payload: AppendPayload::Bytes(Bytes::from(unique)),
                options: (window.options)((task as u64) << 32 | index as u64),
            })
            .await
            .unwrap();
        if sent >= window.start + window.warmup {
            let _ = histogram.record(sent.elapsed().as_nanos() as u64);
            count += 1;
        }
    }
    (histogram, count)
}

/// One context of 256 turns of 10 KiB; read the last 64 with payloads, one reader.
fn get_last_64(engine: &Engine) -> LatencyUs {
    let run = async {
        let context = engine.create_context().await.unwrap().context_id;
        let mut text = ChatText::new(99);
        for _ in 0..256 {
            let payload = AppendPayload::Bytes(Bytes::from(text.payload(PAYLOAD_BYTES)));
            let request = AppendRequest {
                context_id: context,
                expected_head: None,
                type_tag: 1,
                codec: 1,
                payload,
                options: Default::default(),
            };
            engine.append(request).await.unwrap();
        }
        let mut histogram = latency_histogram();
        for round in 0..3000 {
            let started = Instant::now();
            let page = engine.last(context, 64, true).await.unwrap();
            let elapsed = started.elapsed();
            assert_eq!(page.turns.len(), 64);
            if round >= 200 {
                let _ = histogram.record(elapsed.as_nanos() as u64);
            }
        }
        histogram
    };
    LatencyUs::of(&compio::runtime::Runtime::new().unwrap().block_on(run))
}

/// Builds a store of `turns` turns over `blobs` distinct 10 KiB payloads (each referenced
/// turns/blobs times, as shared prompts and tool results are), then times `Engine::open`:
/// full check and tail check, with the page cache warm and dropped.
fn recovery(base: &Path, turns: u64, blobs: u64) {
    const WRITERS: u64 = 32;
    let dir = tempfile::tempdir_in(base).unwrap();
    let built = Instant::now();
    let engine = Engine::open(bench_config(dir.path())).unwrap();
    // Phase 1: the distinct payloads. Phase 2: the turns, referencing them by hash.
    let shared = engine.clone();
    let hashes: Vec<Vec<BlobHash>> = run_writers(WRITERS, move |writer| {
        let engine = shared.clone();
        async move {
            let mut text = ChatText::new(1_000 + writer);
            let mut hashes = Vec::new();
            for blob in (writer..blobs).step_by(WRITERS as usize) {
                let mut bytes = text.payload(PAYLOAD_BYTES);
                bytes[..8].copy_from_slice(&blob.to_le_bytes());
                hashes.push(engine.put_blob(Bytes::from(bytes)).await.unwrap().0);
            }
            hashes
        }
    });
    let hashes: Arc<Vec<BlobHash>> = Arc::new(hashes.into_iter().flatten().collect());
    let shared = engine.clone();
    run_writers(WRITERS, move |writer| {
        let engine = shared.clone();
        let hashes = hashes.clone();
        async move {
            let context = engine.create_context().await.unwrap().context_id;
            for turn in (writer..turns).step_by(WRITERS as usize) {
                let hash = hashes[(turn % hashes.len() as u64) as usize];
                let request = AppendRequest {
                    context_id: context,
                    expected_head: None,
                    type_tag: 1,
                    codec: 1,
                    payload: AppendPayload::StoredBlob(hash),
                    options: Default::default(),
                };
                engine.append(request).await.unwrap();
            }
        }
    });
    let stats = engine.stats();
    assert_eq!((stats.turns, stats.blobs), (turns, blobs));
    engine.shutdown();
    drop(engine);
    println!(
        "store   {turns} turns, {blobs} blobs, {:.0} MiB on disk, built in {:.0} s",
        walk_bytes(dir.path()) as f64 / (1 << 20) as f64,
        built.elapsed().as_secs_f64()
    );
    time_opens(dir.path(), turns);
}

/// Times `Engine::open` of the store in `dir` (`turns` turns): full check and tail check,
/// with the page cache warm and dropped.
fn time_opens(dir: &Path, turns: u64) {
    for (check, label) in [(OpenCheck::Full, "full"), (OpenCheck::Tail, "tail")] {
        let config = || {
            let mut config = bench_config(dir);
            config.open_check = check;
            config
        };
        for cold in [false, true] {
            if cold && !drop_page_cache() {
                println!("open    {label} check, cold cache: skipped (cannot drop the page cache)");
                continue;
            }
            if !cold {
                drop(Engine::open(config()).unwrap()); // warm the cache
            }
            let started = Instant::now();
            let engine = Engine::open(config()).unwrap();
            let elapsed = started.elapsed();
            assert_eq!(engine.stats().turns, turns);
            engine.shutdown();
            let cache = if cold { "cold" } else { "warm" };
            println!(
                "open    {label} check, {cache} cache: {:.0} ms",
                elapsed.as_secs_f64() * 1000.0
            );
        }
    }
}

/// Runs `writers` tasks on two compio runtimes (the machine's two cores); returns their
/// results in writer order.
fn run_writers<T, F, Fut>(writers: u64, make: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(u64) -> Fut + Send + Sync + 'static + Clone,
    Fut: std::future::Future<Output = T> + 'static,
{
    let threads: Vec<_> = (0..2u64)
        .map(|runtime_index| {
            let make = make.clone();
            std::thread::spawn(move || {
                compio::runtime::Runtime::new()
                    .unwrap()
                    .block_on(async move {
                        let tasks: Vec<_> = (runtime_index..writers)
                            .step_by(2)
                            .map(|writer| (writer, compio::runtime::spawn(make(writer))))
                            .collect();
                        let mut results = Vec::new();
                        for (writer, task) in tasks {
                            results.push((writer, task.await.unwrap()));
                        }
                        results
                    })
            })
        })
        .collect();
    let mut results: Vec<(u64, T)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    results.sort_by_key(|(writer, _)| *writer);
    results.into_iter().map(|(_, result)| result).collect()
}

fn walk_bytes(path: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(path).unwrap() {
        let entry = entry.unwrap();
        let metadata = entry.metadata().unwrap();
        total += if metadata.is_dir() {
            walk_bytes(&entry.path())
        } else {
            metadata.len()
        };
    }
    total
}

/// Drops clean pages, dentries and inodes (needs root). Returns whether it worked.
fn drop_page_cache() -> bool {
    std::process::Command::new("sync")
        .status()
        .is_ok_and(|s| s.success())
        && std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// Resident memory of this process, from /proc (kB → bytes).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Runs `tasks` closures concurrently on two compio runtimes and waits for all of them.
fn on_two_runtimes<F, Fut>(tasks: usize, task: F)
where
    F: Fn(usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let threads: Vec<_> = (0..2)
        .map(|runtime_index| {
            let task = task.clone();
            std::thread::spawn(move || {
                let runtime = compio::runtime::Runtime::new().unwrap();
                runtime.block_on(async move {
                    let handles: Vec<_> = (runtime_index..tasks)
                        .step_by(2)
                        .map(|index| compio::runtime::spawn(task(index)))
                        .collect();
                    for handle in handles {
                        handle.await.unwrap();
                    }
                })
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

/// A LangGraph-like checkpoint's options: its id as the key, three metadata labels.
fn checkpoint_options(index: u64) -> TurnOptions {
    TurnOptions {
        key: Some(Bytes::from(format!("1ef4f797-8335-6428-8001-{index:012x}"))),
        labels: vec![
            ("run_id".into(), format!("run-{}", index % 10)),
            ("source".into(), "loop".into()),
            ("step".into(), (index % 1000).to_string()),
        ],
        ..TurnOptions::default()
    }
}

/// Issue 14's figures: appends with a key and labels against plain ones (alternating, same
/// run), a batch of 3 turns against 3 appends, and a turn-log listing with a label filter
/// over a 10k-turn context.
fn turns(base: &Path) {
    let dir = tempfile::tempdir_in(base).unwrap();
    let engine = Engine::open(bench_config(dir.path())).unwrap();
    turns_append_rates(&engine);
    let runtime = compio::runtime::Runtime::new().unwrap();
    turns_batch(&engine, &runtime);
    turns_log(&engine, &runtime);
    engine.shutdown();
}

/// Appends with a key and labels against plain ones, alternating in the same run.
fn turns_append_rates(engine: &Engine) {
    // Alternating rounds after a warm-up (the first seconds of a store run slower: its files
    // grow), medians of three; the order flips each round (ABBA…), so that neither side
    // always runs on the slightly larger store.
    append_load(engine, 32, Duration::from_secs(3));
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    type Side = (&'static str, fn(u64) -> TurnOptions);
    let sides: [Side; 2] = [
        ("plain", |_| TurnOptions::default()),
        ("key + 3 labels", checkpoint_options),
    ];
    for round in 0..3 {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let (label, options) = sides[which];
            let (rate, latency) = append_load_with(engine, 32, Duration::from_secs(4), options);
            rates[which].push(rate);
            println!(
                "turns   round {round} append 10 KiB, 32 appenders, {label:<15} {rate:>7.0}/s, {latency}"
            );
        }
    }
    let median = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let (plain, keyed) = (median(&mut rates[0]), median(&mut rates[1]));
    println!(
        "turns   median appends/s: plain {plain:.0}, key + 3 labels {keyed:.0} ({:+.1}%)",
        (keyed / plain - 1.0) * 100.0
    );
}

/// A batch of 3 turns against 3 appends, on a context of its own.
fn turns_batch(engine: &Engine, runtime: &compio::runtime::Runtime) {
    let context = runtime
        .block_on(engine.create_context())
        .unwrap()
        .context_id;
    let request = |text: String| AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: AppendPayload::Bytes(Bytes::from(text)),
        options: TurnOptions::default(),
    };
    let mut single = latency_histogram();
    let mut batched = latency_histogram();
    for step in 0..1000 {
        let sent = Instant::now();
        for part in 0..3 {
            runtime
                .block_on(engine.append(request(format!("step {step} part {part} single"))))
                .unwrap();
        }
        let _ = single.record(sent.elapsed().as_nanos() as u64);
        let batch = (0..3)
            .map(|part| request(format!("step {step} part {part} batch")))
            .collect();
        let sent = Instant::now();
        runtime.block_on(engine.append_batch(batch)).unwrap();
        let _ = batched.record(sent.elapsed().as_nanos() as u64);
    }
    println!("turns   3 turns as 3 appends:  {}", LatencyUs::of(&single));
    println!("turns   3 turns as one batch:  {}", LatencyUs::of(&batched));
}

/// A turn-log listing, all turns and with a label filter, over a 10k-turn context.
fn turns_log(engine: &Engine, runtime: &compio::runtime::Runtime) {
    // A 10k-turn context whose turns carry checkpoint labels; list one run (10%) 100 a page.
    let thread = runtime
        .block_on(engine.create_context())
        .unwrap()
        .context_id;
    let filler = engine.clone();
    on_two_runtimes(32, move |task| {
        let engine = filler.clone();
        async move {
            for index in (task as u64..10_000).step_by(32) {
                let request = AppendRequest {
                    context_id: thread,
                    expected_head: None,
                    type_tag: 1,
                    codec: 0,
                    payload: AppendPayload::Bytes(Bytes::from(format!("checkpoint {index}"))),
                    options: checkpoint_options(index),
                };
                engine.append(request).await.unwrap();
            }
        }
    });
    for (label, labels) in [
        ("all turns", vec![]),
        (
            "run_id=run-3 (10%)",
            vec![("run_id".to_string(), "run-3".to_string())],
        ),
    ] {
        let mut pages = latency_histogram();
        let mut listed = 0;
        for _ in 0..5 {
            let mut query = LogQuery {
                labels: labels.clone(),
                cursor: None,
                limit: 100,
                payload_bytes_max: 0,
                as_of: None,
            };
            loop {
                let sent = Instant::now();
                let page = engine.turn_log(&ContextRef::Id(thread), &query).unwrap();
                let _ = pages.record(sent.elapsed().as_nanos() as u64);
                listed += page.turns.len();
                match page.next_cursor {
                    Some(cursor) => query.cursor = Some(cursor),
                    None => break,
                }
            }
        }
        println!(
            "turns   turn log of 10k turns, {label:<20} {} turns listed (5 passes), per page of 100: {}",
            listed,
            LatencyUs::of(&pages)
        );
    }
}

/// Issue 14's depth figure: one chain `turns` deep (small payloads, 64 appenders on the one
/// context), then 64-turn range reads without payloads at depth 0 and next to the head.
fn depth(base: &Path, turns: u64) {
    let dir = tempfile::tempdir_in(base).unwrap();
    let engine = Engine::open(bench_config(dir.path())).unwrap();
    let runtime = compio::runtime::Runtime::new().unwrap();
    let context = runtime
        .block_on(engine.create_context())
        .unwrap()
        .context_id;
    let started = Instant::now();
    let appenders = 64usize;
    let filler = engine.clone();
    on_two_runtimes(appenders, move |task| {
        let engine = filler.clone();
        async move {
            for index in (task as u64..turns).step_by(appenders) {
                let request = AppendRequest {
                    context_id: context,
                    expected_head: None,
                    type_tag: 1,
                    codec: 0,
                    payload: AppendPayload::Bytes(Bytes::from(format!("turn {index}"))),
                    options: Default::default(),
                };
                engine.append(request).await.unwrap();
            }
        }
    });
    println!(
        "depth   chain of {turns} turns built in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let tip = runtime.block_on(engine.head(context)).unwrap().head_depth;
    let mut results = Vec::new();
    for (label, from_depth) in [("depth 0", 0), ("at the head", tip.saturating_sub(63))] {
        let mut histogram = latency_histogram();
        for _ in 0..2000 {
            let sent = Instant::now();
            let page = runtime.block_on(engine.range_by_depth(context, from_depth, 64, false));
            let _ = histogram.record(sent.elapsed().as_nanos() as u64);
            assert_eq!(page.unwrap().len(), 64);
        }
        let latency = LatencyUs::of(&histogram);
        println!("depth   range of 64 turns {label:<12} {latency}");
        results.push(latency.p50);
    }
    println!(
        "depth   depth 0 / next to the head, p50: {:.2}x",
        results[0] / results[1]
    );
    engine.shutdown();
}

/// Issue 13's figures: `count` named contexts with 4 tags each (one of them, `team`, shared by
/// 1% of the contexts), the memory they take, listing one team page by page, key-value puts
/// next to appends, and append throughput with those contexts present against a fresh store.
fn contexts(base: &Path, count: u64) {
    let dir = tempfile::tempdir_in(base).unwrap();
    let engine = Engine::open(bench_config(dir.path())).unwrap();
    create_contexts(&engine, count);
    list_team(&engine);
    // Key-value puts (a batch of 4 entries of 1 KiB) and appends (10 KiB), closed loop, one
    // task each, in the same run on contexts of this store.
    let duration = Duration::from_secs(5);
    let kv = kv_put_load(&engine, duration);
    println!("contexts kv put, 4 × 1 KiB per request, 1 task: {kv}");
    let (rate, latency) = append_load(&engine, 1, duration);
    println!("contexts append 10 KiB, 1 appender, same store: {rate:.0} appends/s, {latency}");

    against_a_fresh_store(base, &engine, count);
    engine.shutdown();
}

/// `count` named contexts with 4 tags each, created by 64 tasks; says how fast and the
/// memory they take.
fn create_contexts(engine: &Engine, count: u64) {
    let rss_before = rss_bytes();
    let started = Instant::now();
    let creators = 64usize;
    let per_task = count.div_ceil(creators as u64);
    let filler = engine.clone();
    on_two_runtimes(creators, move |task| {
        let engine = filler.clone();
        async move {
            let first = task as u64 * per_task;
            for index in first..(first + per_task).min(count) {
                let new = NewContext {
                    name: Some(format!("thread-{index:08}")),
                    tags: vec![
                        (
                            "status".into(),
                            ["idle", "running", "done"][index as usize % 3].into(),
                        ),
                        ("team".into(), format!("team-{:02}", index % 100)),
                        ("owner".into(), format!("user-{}", index % 5000)),
                        ("graph".into(), "support-agent-v2".into()),
                    ],
                    ..NewContext::default()
                };
                engine.create(new).await.unwrap();
            }
        }
    });
    let created_in = started.elapsed();
    let rss_per_context = rss_bytes().saturating_sub(rss_before) as f64 / count as f64;
    println!(
        "contexts {count} named, 4 tags each: created in {:.1} s ({:.0}/s), RSS +{:.0} B per context",
        created_in.as_secs_f64(),
        count as f64 / created_in.as_secs_f64(),
        rss_per_context
    );
}

/// Lists one team (1% of the contexts), 100 per page, ten times over.
fn list_team(engine: &Engine) {
    let mut pages = latency_histogram();
    let mut listed = 0usize;
    for _ in 0..10 {
        let mut query = ListQuery {
            tags: vec![("team".into(), "team-07".into())],
            limit: 100,
            ..ListQuery::default()
        };
        loop {
            let sent = Instant::now();
            let page = engine.list_contexts(&query).unwrap();
            let _ = pages.record(sent.elapsed().as_nanos() as u64);
            listed += page.contexts.len();
            match page.next_cursor {
                Some(cursor) => query.cursor = Some(cursor),
                None => break,
            }
        }
    }
    println!(
        "contexts list by a tag 1% carry, 100 per page ({} per pass): {}",
        listed / 10,
        LatencyUs::of(&pages)
    );
}

/// Appends with `count` named contexts present (in `engine`) against a fresh store under
/// `base`.
fn against_a_fresh_store(base: &Path, engine: &Engine, count: u64) {
    // Appends with a million named, tagged contexts present, against a fresh store: both
    // open, in alternating order (with → fresh, fresh → with, …) so that neither always runs
    // second on a disk the other has just filled; the median ratio of the rounds.
    let fresh_dir = tempfile::tempdir_in(base).unwrap();
    let fresh = Engine::open(bench_config(fresh_dir.path())).unwrap();
    let mut ratios = Vec::new();
    for round in 0..4 {
        let run = |store: &Engine| append_load(store, 32, Duration::from_secs(6)).0;
        let (with_contexts, without) = if round % 2 == 0 {
            let with_contexts = run(engine);
            (with_contexts, run(&fresh))
        } else {
            let without = run(&fresh);
            (run(engine), without)
        };
        println!(
            "contexts append 10 KiB, 32 appenders, round {round}: {with_contexts:.0}/s with {count} named contexts, {without:.0}/s in a fresh store ({:+.1}%)",
            (with_contexts / without - 1.0) * 100.0
        );
        ratios.push(with_contexts / without);
    }
    ratios.sort_by(f64::total_cmp);
    let median = (ratios[1] + ratios[2]) / 2.0;
    println!(
        "contexts append 10 KiB, 32 appenders: with {count} named contexts / fresh store, median of 4 alternating rounds {:+.1}%",
        (median - 1.0) * 100.0
    );
    fresh.shutdown();
}

fn kv_put_load(engine: &Engine, duration: Duration) -> LatencyUs {
    let engine = engine.clone();
    let runtime = compio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let context = ContextRef::Name("thread-00000001".into());
        let mut text = ChatText::new(99);
        let mut histogram = latency_histogram();
        let end = Instant::now() + duration;
        let mut step = 0u64;
        while Instant::now() < end {
            let entries: Vec<(Vec<u8>, Bytes)> = (0..4)
                .map(|index| {
                    let key = format!("writes/{step:08}/{index}").into_bytes();
                    (key, Bytes::from(text.payload(1024)))
                })
                .collect();
            step += 1;
            let sent = Instant::now();
            engine.kv_put(&context, entries, false).await.unwrap();
            let _ = histogram.record(sent.elapsed().as_nanos() as u64);
        }
        LatencyUs::of(&histogram)
    })
}
