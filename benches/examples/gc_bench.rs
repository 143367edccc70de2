//! Garbage collection benchmarks (issue 15), on the engine in-process:
//!
//! - `day`: a day-like run — agents start, append, finish; 90% of finished agents are deleted;
//!   a collection every few ticks. Prints (and writes as CSV + SVG) disk use against live
//!   bytes over time.
//! - `compaction`: a store of incompressible payloads with every second context deleted (each
//!   pack half dead), then append latency at a steady rate without a collection and while one
//!   rewrites the packs; the collection's throughput and CPU time.
//!
//! ```text
//! cargo run --release -p ctxstore-benches --example gc_bench -- day --dir /tmp/gcday --out benches/results/gc [--log-compaction off]
//! cargo run --release -p ctxstore-benches --example gc_bench -- compaction --dir /tmp/gccomp --fill-mib 2048 [--gc-rate-mib 32] [--rate 500] [--dead-percent 40]
//! ```
//!
//! Disk use is what the file system allocated (`du`: blocks, holes not counted), so a
//! `turns.log` whose compacted prefix was punched out counts only what it holds.
//! The directory is created fresh (it must not exist). Figures in docs/benchmarks.md.
// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]
// A benchmark: a failed step ends the run with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_engine::{
    AppendPayload, AppendRequest, ContextId, ContextRef, Engine, EngineConfig, NewContext,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| -> Option<String> {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let number = |name: &str, default: u64| -> u64 {
        flag(name).map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| fail(&format!("{name} takes a number, not {v}")))
        })
    };
    let Some(mode) = args.first().cloned() else {
        fail("usage: gc_bench day|compaction --dir DIR [options]; see the source's doc");
    };
    let dir = PathBuf::from(flag("--dir").unwrap_or_else(|| fail("--dir DIR is required")));
    if dir.exists() {
        fail(&format!("{} exists; give a new directory", dir.display()));
    }
    match mode.as_str() {
        "day" => day(
            &dir,
            Day {
                ticks: number("--ticks", 48),
                agents_per_tick: number("--agents-per-tick", 40),
                turns_per_agent: number("--turns", 30),
                payload_bytes: number("--payload-bytes", 6000) as usize,
                keep_percent: number("--keep-percent", 10),
                gc_every: number("--gc-every", 4),
                out: flag("--out").map(PathBuf::from),
                log_compaction: flag("--log-compaction").as_deref() != Some("off"),
            },
        ),
        "compaction" => compaction(
            &dir,
            number("--fill-mib", 2048),
            number("--rate", 500),
            number("--gc-rate-mib", 32),
            number("--dead-percent", 40) as u8,
        ),
        other => fail(&format!("unknown mode {other}: day or compaction")),
    }
}

fn fail(message: &str) -> ! {
    eprintln!("gc_bench: {message}");
    std::process::exit(2);
}

fn config(dir: &Path) -> EngineConfig {
    let mut config = EngineConfig::new(dir).with_shards(2);
    // Collections run when this program says, not on the schedule or the deleted-bytes
    // trigger.
    config.gc_interval_ms = 0;
    config.gc_deleted_bytes_trigger = 0;
    config
}

/// Engine futures only wait on channels: any executor does.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    pollster::block_on(future)
}

fn new_context(engine: &Engine) -> ContextId {
    block_on(engine.create(NewContext::default()))
        .expect("create")
        .context
        .head
        .context_id
}

fn append(engine: &Engine, context: ContextId, payload: Vec<u8>) -> Duration {
    let started = Instant::now();
    block_on(engine.append(AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 1,
        codec: 1,
        payload: AppendPayload::Bytes(Bytes::from(payload)),
        options: Default::default(),
    }))
    .expect("append");
    started.elapsed()
}

/// Chat-like text (compresses ≈ 2.6× like the loadgen's), unique per seed.
fn chat(seed: u64, len: usize) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "the",
        "agent",
        "calls",
        "tool",
        "result",
        "context",
        "assistant",
        "user",
        "file",
        "search",
        "returns",
        "error",
        "line",
        "function",
        "value",
        "plan",
    ];
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut text = format!("{{\"seed\":{seed},\"content\":\"");
    while text.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        text.push_str(WORDS[(state % 16) as usize]);
        text.push(' ');
    }
    text.truncate(len);
    text.into_bytes()
}

fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Bytes the file system allocated to the files under `dir` whose name satisfies `keep`.
fn bytes_under(dir: &Path, keep: &dyn Fn(&str) -> bool) -> u64 {
    let mut total = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            total += bytes_under(&path, keep);
        } else if keep(&entry.file_name().to_string_lossy()) {
            total += std::os::unix::fs::MetadataExt::blocks(&meta) * 512;
        }
    }
    total
}

struct Day {
    ticks: u64,
    agents_per_tick: u64,
    turns_per_agent: u64,
    payload_bytes: usize,
    keep_percent: u64,
    gc_every: u64,
    out: Option<PathBuf>,
    /// `--log-compaction off`: turns.log keeps collected turns' records (the A/B).
    log_compaction: bool,
}

/// One row of the day's time series.
struct Sample {
    tick: u64,
    disk_bytes: u64,
    pack_bytes: u64,
    log_bytes: u64,
    live_bytes: u64,
}

fn day(dir: &Path, day: Day) {
    let mut config = config(dir);
    if !day.log_compaction {
        config.gc_log_dead_bytes_min = u64::MAX;
    }
    let engine = Engine::open(config).expect("open");
    let mut seed = 0u64;
    let mut running: Vec<ContextId> = Vec::new();
    let mut kept: Vec<ContextId> = Vec::new();
    let mut samples = Vec::new();
    let mut live_turns = 0u64;
    println!("tick  disk_MiB  packs_MiB  log_MiB  live_MiB  disk/live");
    for tick in 1..=day.ticks {
        // The agents of the last tick finish: most are deleted, a few kept for good.
        for (index, context) in std::mem::take(&mut running).into_iter().enumerate() {
            if (index as u64 * 100) / day.agents_per_tick.max(1) < day.keep_percent {
                kept.push(context);
            } else {
                block_on(engine.delete_context(&ContextRef::Id(context))).expect("delete");
                live_turns -= day.turns_per_agent;
            }
        }
        for _ in 0..day.agents_per_tick {
            let context = new_context(&engine);
            for _ in 0..day.turns_per_agent {
                seed += 1;
                append(&engine, context, chat(seed, day.payload_bytes));
            }
            live_turns += day.turns_per_agent;
            running.push(context);
        }
        if tick % day.gc_every == 0 {
            let report = engine.gc().expect("gc");
            let pack_bytes = bytes_under(dir, &|name| name.ends_with(".pack"));
            let log_bytes = bytes_under(dir, &|name| name == "turns.log" || name == "turns.base");
            let disk_bytes = bytes_under(dir, &|_| true);
            // What the live data needs in these formats: its pack records and its turn
            // records (the running agents' turns are live too).
            let live_bytes = report.live_bytes + 128 * live_turns;
            println!(
                "{tick:>4}  {:>8.1}  {:>9.1}  {:>7.1}  {:>8.1}  {:>9.2}",
                mib(disk_bytes),
                mib(pack_bytes),
                mib(log_bytes),
                mib(live_bytes),
                disk_bytes as f64 / live_bytes.max(1) as f64
            );
            samples.push(Sample {
                tick,
                disk_bytes,
                pack_bytes,
                log_bytes,
                live_bytes,
            });
        }
    }
    let stats = engine.stats();
    println!(
        "collections {}, reclaimed {:.1} MiB in total, turns {}, contexts kept {}",
        stats.gc_runs,
        mib(stats.bytes_reclaimed_total),
        stats.turns,
        kept.len()
    );
    engine.shutdown();
    if let Some(out) = day.out {
        write_day(&out, &samples);
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn write_day(out: &Path, samples: &[Sample]) {
    std::fs::create_dir_all(out).expect("create the output directory");
    let mut csv = std::fs::File::create(out.join("gc-day.csv")).expect("csv");
    writeln!(csv, "tick,disk_bytes,pack_bytes,log_bytes,live_bytes").expect("csv");
    for s in samples {
        writeln!(
            csv,
            "{},{},{},{},{}",
            s.tick, s.disk_bytes, s.pack_bytes, s.log_bytes, s.live_bytes
        )
        .expect("csv");
    }
    let (width, height, margin) = (640.0, 320.0, 50.0);
    let ticks = samples.last().map_or(1, |s| s.tick) as f64;
    let top = samples
        .iter()
        .map(|s| s.disk_bytes.max(s.live_bytes))
        .max()
        .unwrap_or(1) as f64
        * 1.1;
    let x = |tick: u64| margin + (width - 2.0 * margin) * tick as f64 / ticks;
    let y = |bytes: u64| height - margin - (height - 2.0 * margin) * bytes as f64 / top;
    let line = |pick: &dyn Fn(&Sample) -> u64| {
        samples
            .iter()
            .map(|s| format!("{:.1},{:.1}", x(s.tick), y(pick(s))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<text x=\"{}\" y=\"20\" \
         text-anchor=\"middle\" font-weight=\"bold\">disk use vs live bytes (MiB) over a \
         day-like run</text>\n",
        width / 2.0
    );
    for step in 0..=4 {
        let bytes = (top * f64::from(step) / 4.0) as u64;
        svg.push_str(&format!(
            "<line x1=\"{margin}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{:.0}</text>\n",
            width - margin,
            y(bytes),
            y(bytes),
            margin - 6.0,
            y(bytes) + 4.0,
            mib(bytes)
        ));
    }
    svg.push_str(&format!(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"#c0392b\" stroke-width=\"2\"/>\
         <text x=\"{}\" y=\"40\" fill=\"#c0392b\">disk (all files)</text>\n",
        line(&|s| s.disk_bytes),
        margin + 6.0
    ));
    svg.push_str(&format!(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"#2471a3\" stroke-width=\"2\"/>\
         <text x=\"{}\" y=\"54\" fill=\"#2471a3\">live (pack records + turn records)</text>\n",
        line(&|s| s.live_bytes),
        margin + 6.0
    ));
    svg.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">tick</text>\n</svg>\n",
        width / 2.0,
        height - 12.0
    ));
    std::fs::write(out.join("gc-day.svg"), svg).expect("svg");
    println!("wrote {0}/gc-day.csv and {0}/gc-day.svg", out.display());
}

fn compaction(dir: &Path, fill_mib: u64, rate: u64, gc_rate_mib: u64, dead_percent: u8) {
    let mut config = config(dir);
    config.gc_bytes_per_s_max = gc_rate_mib << 20;
    // Half of the fill dies; the baseline's appends (live) dilute that a little.
    config.gc_pack_dead_percent = dead_percent;
    let engine = Engine::open(config).expect("open");
    let writer_context = fill_half_dead(&engine, fill_mib);
    let measure = move |engine: &Engine, running: &AtomicBool, seed: u64| {
        measure_appends(engine, running, seed, writer_context, rate)
    };
    // Baseline: 15 s without a collection.
    let running = Arc::new(AtomicBool::new(true));
    let baseline = {
        let engine = engine.clone();
        let running = running.clone();
        std::thread::spawn(move || measure(&engine, &running, 1 << 40))
    };
    std::thread::sleep(Duration::from_secs(15));
    running.store(false, Ordering::Release);
    let baseline = baseline.join().expect("baseline");

    // The same load while a collection rewrites the packs.
    let running = Arc::new(AtomicBool::new(true));
    let during = {
        let engine = engine.clone();
        let running = running.clone();
        std::thread::spawn(move || measure(&engine, &running, 2 << 40))
    };
    std::thread::sleep(Duration::from_secs(1));
    let before = bytes_under(dir, &|name| name.ends_with(".pack"));
    let cpu_before = thread_cpu();
    let started = Instant::now();
    let report = engine.gc().expect("gc");
    let elapsed = started.elapsed();
    let cpu = thread_cpu() - cpu_before;
    running.store(false, Ordering::Release);
    let during = during.join().expect("during");
    let after = bytes_under(dir, &|name| name.ends_with(".pack"));
    let rewritten = report.bytes_rewritten;
    println!(
        "collection: {} packs compacted, {:.0} MiB reclaimed, packs {:.0} → {:.0} MiB, live \
         {:.0} MiB rewritten in {:.1} s = {:.0} MiB/s, collector CPU {:.1} s ({:.0}% of one \
         core); gc rate limit {gc_rate_mib} MiB/s (read + write counted)",
        report.packs_compacted,
        mib(report.bytes_reclaimed),
        mib(before),
        mib(after),
        mib(rewritten),
        elapsed.as_secs_f64(),
        mib(rewritten) / elapsed.as_secs_f64(),
        cpu.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / elapsed.as_secs_f64()
    );
    print_latencies(rate, &baseline, &during);
    engine.shutdown();
}

/// Fills the store with `fill_mib` MiB of incompressible payloads over 64 contexts, then
/// deletes every second context: each pack is about half dead. Answers a live context for
/// the measured appends.
fn fill_half_dead(engine: &Engine, fill_mib: u64) -> ContextId {
    const PAYLOAD: usize = 64 << 10;
    let payloads = (fill_mib << 20) / PAYLOAD as u64;
    let contexts: Vec<ContextId> = (0..64).map(|_| new_context(engine)).collect();
    println!("filling {fill_mib} MiB ({payloads} incompressible 64 KiB payloads, 64 contexts)");
    for i in 0..payloads {
        append(engine, contexts[(i % 64) as usize], noise(i, PAYLOAD));
    }
    // Every second context goes: each pack is about half dead.
    for context in contexts.iter().step_by(2) {
        block_on(engine.delete_context(&ContextRef::Id(*context))).expect("delete");
    }
    contexts[1]
}

/// Appends 4 KiB chat text to `context` at `rate` per second (open loop) while `running`;
/// answers their latencies in µs.
fn measure_appends(
    engine: &Engine,
    running: &AtomicBool,
    seed: u64,
    context: ContextId,
    rate: u64,
) -> hdrhistogram::Histogram<u64> {
    let mut histogram = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let mut next = Instant::now();
    let mut seed = seed;
    while running.load(Ordering::Acquire) {
        next += interval;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        seed += 1;
        // Latency from the intended send time (open loop: a stall counts for everyone
        // who should have been sent during it).
        let intended = next;
        append(engine, context, chat(seed, 4096));
        let latency = Instant::now().saturating_duration_since(intended);
        histogram
            .record(latency.as_micros().max(1) as u64)
            .expect("record");
    }
    histogram
}

/// The appends' latencies without and during a collection, and the ratio of their p99s.
fn print_latencies(
    rate: u64,
    baseline: &hdrhistogram::Histogram<u64>,
    during: &hdrhistogram::Histogram<u64>,
) {
    for (name, histogram) in [("without", baseline), ("during", during)] {
        println!(
            "append at {rate}/s {name:>8} a collection: n {:>6}  p50 {:>6} µs  p99 {:>6} µs  p99.9 {:>6} µs  max {:>7} µs",
            histogram.len(),
            histogram.value_at_quantile(0.5),
            histogram.value_at_quantile(0.99),
            histogram.value_at_quantile(0.999),
            histogram.max()
        );
    }
    println!(
        "p99 during / without: {:.2}",
        during.value_at_quantile(0.99) as f64 / baseline.value_at_quantile(0.99).max(1) as f64
    );
}

/// CPU time of the calling thread (the collection runs on it), from
/// `/proc/thread-self/stat` (user + system, in clock ticks of 10 ms).
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    // Fields after the command name (which ends with the last ')'): state is field 3, utime
    // and stime are fields 14 and 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks =
        |index: usize| -> u64 { fields.get(index).and_then(|f| f.parse().ok()).unwrap_or(0) };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}
