//! Helpers shared by the engine's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

pub mod doc_paths;

use bytes::Bytes;
use ctxstore_engine::{
    AppendPayload, AppendRequest, Appended, ContextId, Engine, EngineConfig, EngineError, TurnId,
};

/// Two shards, small packs and small steps of prepared space: rotation and preallocation
/// happen within a test's few megabytes.
pub fn config(dir: &Path) -> EngineConfig {
    let mut config = EngineConfig::new(dir).with_shards(2);
    config.limits.blob_bytes_max = 2 << 20;
    config.limits.shard_batch_bytes_max = 4 << 20;
    config.limits.pack_bytes_max = 4 << 20;
    config.limits.log_preallocate_bytes = 64 * 1024;
    config
}

pub fn open(dir: &Path) -> Engine {
    Engine::open(config(dir)).expect("open engine")
}

pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    pollster::block_on(future)
}

pub fn append(
    engine: &Engine,
    context: ContextId,
    payload: &[u8],
    expected_head: Option<TurnId>,
) -> Result<Appended, EngineError> {
    block_on(engine.append(AppendRequest {
        context_id: context,
        expected_head,
        type_tag: 7,
        codec: 1,
        payload: AppendPayload::Bytes(Bytes::copy_from_slice(payload)),
        options: Default::default(),
    }))
}

/// Chat-like text of about `len` bytes, different for each `seed`.
pub fn chat_payload(seed: u64, len: usize) -> Vec<u8> {
    let words = [
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
        "summary",
        "plan",
        "next",
    ];
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut text = format!("{{\"seed\":{seed},\"role\":\"assistant\",\"content\":\"");
    while text.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        text.push_str(words[(state % words.len() as u64) as usize]);
        text.push(' ');
    }
    text.truncate(len);
    text.into_bytes()
}

/// Incompressible bytes.
pub fn random_payload(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// `config` for garbage-collection tests: collections only when the test asks (no schedule,
/// no deleted-bytes trigger), every pack with anything dead compacted, no rate limit.
pub fn gc_config(dir: &Path) -> EngineConfig {
    let mut config = config(dir);
    config.gc_interval_ms = 0;
    config.gc_deleted_bytes_trigger = 0;
    config.gc_pack_dead_percent = 1;
    config.gc_bytes_per_s_max = 0;
    // Every round that drops a collected turn's record compacts the log.
    config.gc_log_dead_bytes_min = 0;
    config
}

/// A new empty context.
pub fn new_context(engine: &Engine) -> ContextId {
    block_on(engine.create(ctxstore_engine::NewContext::default()))
        .expect("create a context")
        .context
        .head
        .context_id
}

/// A new context filled with `turns` random payloads of `len` bytes (seeds `seed * 100 + i`):
/// one that a test is about to delete, so that a collection finds it dead.
pub fn filled_context(engine: &Engine, seed: u64, turns: u64, len: usize) -> ContextId {
    let context = new_context(engine);
    for i in 0..turns {
        append(engine, context, &random_payload(seed * 100 + i, len), None)
            .expect("append to a context being filled");
    }
    context
}

/// A store's `turns.log` records `1..next` as slots: what a standby ingests of its primary.
pub fn log_slots(dir: &Path, next: u64) -> Vec<u8> {
    use ctxstore_engine::format::turn_log::record_offset;
    let log =
        std::fs::read(ctxstore_engine::store_dir::StoreDir::new(dir).turns_log_path()).unwrap();
    log[record_offset(1) as usize..record_offset(next) as usize].to_vec()
}

/// Polls `done` every 5 ms until it holds; fails the test after 20 s, naming `what`.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A vector search's hit keys, as text, best first.
pub fn keys(hits: &ctxstore_engine::vectors::VectorHits) -> Vec<String> {
    hits.hits
        .iter()
        .map(|hit| String::from_utf8(hit.key.to_vec()).unwrap())
        .collect()
}
