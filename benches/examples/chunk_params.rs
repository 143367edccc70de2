//! The sweep behind decision 0013: chunk sizes against the growing-state workload of issue 16
//! (each append the previous JSON state plus one ~1 KiB chat message), through the real
//! engine, and the chunker's CPU cost per MB.
//!
//! ```text
//! cargo run --release -p ctxstore-benches --example chunk_params -- [STEPS] [--default-only]
//! ```
//!
//! Bytes on disk = pack records (headers, bodies, padding) + blob index entries (64 B each) +
//! turn records (128 B each); the files' preallocated tails are not data and not counted.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

use std::time::Instant;

use bytes::Bytes;
use ctxstore_engine::{
    AppendPayload, AppendRequest, ChunkingConfig, Engine, EngineConfig, NewContext,
};
use ctxstore_loadgen::workload::text::{ChatText, Rng};

/// The states of one agent thread: state k holds messages 1..=k.
fn growing_states(steps: usize, message_bytes: usize) -> Vec<Vec<u8>> {
    let mut text = ChatText::new(7);
    let mut rng = Rng::new(11);
    let mut messages: Vec<u8> = Vec::new();
    let mut states = Vec::with_capacity(steps);
    for step in 0..steps {
        let len = message_bytes / 2 + rng.below(message_bytes as u64) as usize;
        if step > 0 {
            messages.push(b',');
        }
        messages.extend_from_slice(&text.payload(len));
        let mut state = b"{\"messages\":[".to_vec();
        state.extend_from_slice(&messages);
        state.extend_from_slice(b"]}");
        states.push(state);
    }
    states
}

struct Row {
    disk_bytes: u64,
    chunks_written: u64,
    append_us_mean: f64,
}

fn run(chunking: ChunkingConfig, states: &[Vec<u8>]) -> Row {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = EngineConfig::new(dir.path());
    config.chunking = chunking;
    config.gc_interval_ms = 0;
    let engine = Engine::open(config).expect("open");
    let context = pollster::block_on(engine.create(NewContext::default()))
        .expect("context")
        .context
        .head
        .context_id;
    let started = Instant::now();
    for state in states {
        pollster::block_on(engine.append(AppendRequest {
            context_id: context,
            expected_head: None,
            type_tag: 1,
            codec: 0,
            payload: AppendPayload::Bytes(Bytes::copy_from_slice(state)),
            options: Default::default(),
        }))
        .expect("append");
    }
    let elapsed = started.elapsed();
    let stats = engine.stats();
    engine.shutdown();
    Row {
        disk_bytes: stats.stored_bytes + stats.blobs * 64 + stats.turns * 128,
        chunks_written: stats.chunks_written,
        append_us_mean: elapsed.as_secs_f64() * 1e6 / states.len() as f64,
    }
}

fn main() {
    let steps: usize = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(300);
    let states = growing_states(steps, 1024);
    let final_bytes = states.last().map_or(0, Vec::len) as f64;
    let logical: usize = states.iter().map(Vec::len).sum();
    println!("growing state: {steps} steps, final state {final_bytes} B, {logical} B logical\n");
    println!(
        "| min / avg / max | threshold | disk | ÷ final state | chunks written | append mean |"
    );
    println!("|---|---|---|---|---|---|");
    let default_only = std::env::args().any(|arg| arg == "--default-only");
    for chunking in chunking_sets(default_only) {
        let row = run(chunking, &states);
        print_row(chunking, &row, final_bytes);
    }
    println!();
    chunker_cpu();
}

/// The settings swept: whole payloads, then each size set at each threshold (only the
/// defaults with `default_only`).
fn chunking_sets(default_only: bool) -> Vec<ChunkingConfig> {
    let whole = ChunkingConfig {
        threshold_bytes: 0,
        ..ChunkingConfig::default()
    };
    let mut sets = vec![whole];
    if default_only {
        sets = vec![ChunkingConfig::default()];
    }
    for (min, avg, max) in [
        (512, 1024, 8192),
        (1024, 2048, 16384),
        (2048, 4096, 32768),
        (2048, 8192, 65536),
        (4096, 16384, 65536),
    ] {
        for threshold in [16 * 1024, 64 * 1024] {
            if default_only {
                break;
            }
            sets.push(ChunkingConfig {
                threshold_bytes: threshold,
                chunk_bytes_min: min,
                chunk_bytes_avg: avg,
                chunk_bytes_max: max,
            });
        }
    }
    sets
}

/// One row of the sweep's table.
fn print_row(chunking: ChunkingConfig, row: &Row, final_bytes: f64) {
    let sizes = if chunking.threshold_bytes == 0 {
        "not chunked".to_string()
    } else {
        format!(
            "{} / {} / {}",
            chunking.chunk_bytes_min, chunking.chunk_bytes_avg, chunking.chunk_bytes_max
        )
    };
    println!(
        "| {sizes} | {} KiB | {:.0} KB | {:.2}× | {} | {:.0} µs |",
        chunking.threshold_bytes / 1024,
        row.disk_bytes as f64 / 1000.0,
        row.disk_bytes as f64 / final_bytes,
        row.chunks_written,
        row.append_us_mean
    );
}

/// CPU: the cut and the chunks' BLAKE3 over a 4 MB chat-like payload, against BLAKE3 and
/// zstd-1 of the whole payload (what every append pays anyway).
fn chunker_cpu() {
    let mut text = ChatText::new(3);
    let payload: Vec<u8> = (0..4096).flat_map(|_| text.payload(1024)).collect();
    let mb = payload.len() as f64 / 1e6;
    let rounds = 20;
    let time = |f: &dyn Fn()| {
        let started = Instant::now();
        for _ in 0..rounds {
            f();
        }
        started.elapsed().as_secs_f64() * 1e3 / rounds as f64 / mb
    };
    let default = ChunkingConfig::default();
    let cut_ms = time(&|| {
        std::hint::black_box(default.cut(&payload));
    });
    let cut_hash_ms = time(&|| {
        for range in default.cut(&payload) {
            std::hint::black_box(blake3::hash(&payload[range]));
        }
    });
    let hash_ms = time(&|| {
        std::hint::black_box(blake3::hash(&payload));
    });
    let zstd_ms = time(&|| {
        std::hint::black_box(zstd::bulk::compress(&payload, 1).ok());
    });
    println!("CPU per MB (one core, {mb:.1} MB chat-like payload, mean of {rounds}):");
    println!("| step | ms per MB |\n|---|---|");
    println!("| FastCDC cut (default sizes) | {cut_ms:.2} |");
    println!("| cut + BLAKE3 of each chunk | {cut_hash_ms:.2} |");
    println!("| BLAKE3 of the whole payload | {hash_ms:.2} |");
    println!("| zstd-1 of the whole payload | {zstd_ms:.2} |");
}
