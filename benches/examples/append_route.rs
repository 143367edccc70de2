//! The figures of issue 30 item 3 (one append route), in the engine, without the network: the
//! fdatasync floor, an agent step of 3 new turns as one batch append (what APPEND_TURNS calls),
//! and one agent thread's growing state (issue 16's workload: each step the previous JSON
//! state plus one ~1 KiB chat message) appended three ways — whole (chunking off), chunked by
//! the engine (`Engine::append` of the whole state), and as the wire does it (PUT_CHUNKED's
//! `put_chunked` of the chunks the store lacks, then an append by hash). Every workload runs
//! on a fresh store; `ROUNDS` repeats them all, and the medians of the rounds' p50s are
//! printed last. Built from two commits and run alternately, it compares them on one machine.
//!
//! ```text
//! cargo run --release -p ctxstore-benches --example append_route -- [ROUNDS] [STEPS]
//! ```
//!
//! `CTXSTORE_BENCH_DIR` puts the stores elsewhere than the system temp dir.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

use std::path::Path;
use std::time::Instant;

use bytes::Bytes;
use ctxstore_benches::text::ChatText;
use ctxstore_benches::{LatencyUs, floor, latency_histogram};
use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, ChunkRef, ChunkingConfig, ContextId, Engine,
    EngineConfig,
};
use ctxstore_loadgen::workload::growing::{GrowingConfig, GrowingThread};

fn request(context: ContextId, payload: AppendPayload) -> AppendRequest {
    AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload,
        options: Default::default(),
    }
}

/// Each actor's fdatasyncs so far, their mean and the records per batch: where an append's
/// time went (a second fdatasync in series shows as more of them per append).
fn fsyncs(engine: &Engine) -> String {
    engine
        .actor_metrics()
        .iter()
        .map(|actor| {
            let count = actor.fsync_us.cumulative.last().copied().unwrap_or(0);
            let batches = actor.batch_records.cumulative.last().copied().unwrap_or(0);
            format!(
                "{} {count} fdatasyncs (mean {:.0} µs), {batches} batches",
                actor.actor,
                actor.fsync_us.sum as f64 / count.max(1) as f64
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn open(dir: &Path, chunking: ChunkingConfig) -> (Engine, ContextId) {
    let mut config = EngineConfig::new(dir);
    config.chunking = chunking;
    config.gc_interval_ms = 0;
    let engine = Engine::open(config).unwrap();
    let context = pollster::block_on(engine.create_context())
        .unwrap()
        .context_id;
    (engine, context)
}

/// `steps` agent steps of 3 new ~1 KiB chat turns, each step one batch append.
fn batch_of_3(base: &Path, steps: usize) -> LatencyUs {
    let dir = tempfile::tempdir_in(base).unwrap();
    let (engine, context) = open(dir.path(), ChunkingConfig::DEFAULT);
    let mut text = ChatText::new(3);
    let mut histogram = latency_histogram();
    for step in 0..steps {
        let batch = (0..3)
            .map(|_| {
                request(
                    context,
                    AppendPayload::Bytes(Bytes::from(text.payload(1024))),
                )
            })
            .collect();
        let sent = Instant::now();
        pollster::block_on(engine.append_batch(batch)).unwrap();
        if step >= steps / 10 {
            let _ = histogram.record(sent.elapsed().as_nanos() as u64);
        }
    }
    println!("        batch of 3 turns: {}", fsyncs(&engine));
    engine.shutdown();
    LatencyUs::of(&histogram)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Growing {
    /// Chunking off: every state stored whole.
    Whole,
    /// `Engine::append` of the whole state; the engine chunks it.
    Chunked,
    /// The wire's way: `put_chunked` (the chunks the store lacks sent), then an append by
    /// hash (two engine calls, as PUT_CHUNKED then APPEND_TURN_BY_HASH).
    PutChunked,
}

/// One thread's growing state, `steps` appends; the latency of each append (both calls for
/// `PutChunked`).
fn growing(base: &Path, steps: u32, how: Growing) -> LatencyUs {
    let dir = tempfile::tempdir_in(base).unwrap();
    let chunking = match how {
        Growing::Whole => ChunkingConfig {
            threshold_bytes: 0,
            ..ChunkingConfig::DEFAULT
        },
        Growing::Chunked | Growing::PutChunked => ChunkingConfig::DEFAULT,
    };
    let (engine, context) = open(dir.path(), chunking);
    let mut thread = GrowingThread::new(
        GrowingConfig {
            message_bytes: 1024,
            steps,
        },
        1,
        0,
    );
    let mut histogram = latency_histogram();
    for step in 0..steps {
        let state = thread.next_state();
        let sent = Instant::now();
        if how == Growing::PutChunked && chunking.applies_to(state.len()) {
            let hash = BlobHash::of(&state);
            let mut chunks = Vec::new();
            let mut sent_chunks = Vec::new();
            for (index, range) in chunking.cut(&state).into_iter().enumerate() {
                let bytes = state.slice(range);
                let chunk = ChunkRef {
                    hash: BlobHash::of(&bytes),
                    len: bytes.len() as u32,
                };
                if engine.blob_len(chunk.hash).is_none() {
                    sent_chunks.push((index as u32, bytes));
                }
                chunks.push(chunk);
            }
            pollster::block_on(engine.put_chunked(hash, None, chunks, sent_chunks)).unwrap();
            let by_hash = request(context, AppendPayload::StoredBlob(hash));
            pollster::block_on(engine.append(by_hash)).unwrap();
        } else {
            let whole = request(context, AppendPayload::Bytes(state));
            pollster::block_on(engine.append(whole)).unwrap();
        }
        if step >= steps / 10 {
            let _ = histogram.record(sent.elapsed().as_nanos() as u64);
        }
    }
    println!("        growing ({}): {}", how.label(), fsyncs(&engine));
    engine.shutdown();
    LatencyUs::of(&histogram)
}

impl Growing {
    fn label(self) -> &'static str {
        match self {
            Growing::Whole => "whole",
            Growing::Chunked => "chunked",
            Growing::PutChunked => "put_chunked",
        }
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|arg| !arg.starts_with('-'));
    let rounds: usize = args.next().map_or(3, |v| v.parse().unwrap());
    let steps: u32 = args.next().map_or(300, |v| v.parse().unwrap());
    let base = std::env::var_os("CTXSTORE_BENCH_DIR")
        .map_or_else(std::env::temp_dir, std::path::PathBuf::from);
    let names = [
        "fdatasync floor (4 KiB)",
        "batch of 3 turns",
        "growing, whole",
        "growing, chunked by the engine",
        "growing, put_chunked + append by hash",
    ];
    let mut p50s: Vec<Vec<f64>> = names.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        let results = [
            LatencyUs::of(&floor::append_fdatasync(&base, 4096, 1000).unwrap()),
            batch_of_3(&base, steps as usize * 2),
            growing(&base, steps, Growing::Whole),
            growing(&base, steps, Growing::Chunked),
            growing(&base, steps, Growing::PutChunked),
        ];
        for (index, latency) in results.iter().enumerate() {
            println!("round {round} {:<38} {latency}", names[index]);
            p50s[index].push(latency.p50);
        }
    }
    for (name, values) in names.iter().zip(&mut p50s) {
        println!("median p50 {name:<38} {:.0} µs", median(values));
    }
}
