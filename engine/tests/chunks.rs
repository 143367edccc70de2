//! Chunked blobs (issue 16, decision 0013), in the engine: large payloads are stored as
//! chunks and a manifest and read back exactly, across reopens; a growing state costs O(Δ);
//! the wire's chunked put refuses what does not add up and writes nothing then; garbage
//! collection follows manifests to their chunks; `verify` rebuilds every chunked payload.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;

use bytes::Bytes;
use common::{append, block_on, chat_payload, config, gc_config, new_context, random_payload};
use ctxstore_engine::{
    BlobHash, ChunkRef, ContextRef, Engine, EngineConfig, EngineError, ErrorKind, TurnId, verify,
};

fn read_back(engine: &Engine, expected: &HashMap<TurnId, Vec<u8>>) {
    for (turn_id, payload) in expected {
        let turn = block_on(engine.turn(*turn_id)).unwrap();
        assert_eq!(turn.payload_hash, BlobHash::of(payload), "turn {turn_id}");
        let bytes = block_on(engine.blob(turn.payload_hash)).unwrap();
        assert!(bytes[..] == payload[..], "turn {turn_id}: payload differs");
        let stored = block_on(engine.blob_stored(turn.payload_hash)).unwrap();
        assert_eq!(stored.raw_len as usize, payload.len());
    }
}

/// A JSON state of `steps` chat messages, each about `message_bytes` long.
fn state(steps: usize, message_bytes: usize) -> Vec<u8> {
    let messages: Vec<String> = (0..steps)
        .map(|step| {
            let len = message_bytes / 2 + (step * 7919) % message_bytes;
            String::from_utf8(chat_payload(step as u64, len)).unwrap() + "\"}"
        })
        .collect();
    format!("{{\"messages\":[{}]}}", messages.join(",")).into_bytes()
}

#[test]
fn a_growing_state_costs_its_growth_and_reads_back_exactly_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = HashMap::new();
    let steps = 150;
    let final_state = state(steps, 1024);
    {
        let engine = Engine::open(config(dir.path())).unwrap();
        let context = new_context(&engine);
        for step in 1..=steps {
            let payload = state(step, 1024);
            let appended = append(&engine, context, &payload, None).unwrap();
            expected.insert(appended.turn.turn_id, payload);
        }
        read_back(&engine, &expected);
        let stats = engine.stats();
        assert!(stats.chunked_blobs > 100, "{stats:?}");
        assert!(stats.chunk_dedup_hits > stats.chunks_written, "{stats:?}");
        // Stored as whole blobs, the states would take about steps / 2 times the final one
        // (zstd aside); chunked, a small multiple of it.
        let logical: u64 = expected.values().map(|p| p.len() as u64).sum();
        assert!(
            stats.stored_bytes < 4 * final_state.len() as u64,
            "{} bytes stored for a final state of {} ({logical} logical)",
            stats.stored_bytes,
            final_state.len()
        );
        engine.shutdown();
    }
    let engine = Engine::open(config(dir.path())).unwrap();
    read_back(&engine, &expected);
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}

#[test]
fn small_payloads_keep_one_record_and_chunking_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut off = config(dir.path());
    off.chunking.threshold_bytes = 0;
    let engine = Engine::open(off).unwrap();
    let context = new_context(&engine);
    append(&engine, context, &chat_payload(1, 200_000), None).unwrap();
    assert_eq!(engine.stats().chunked_blobs, 0);
    engine.shutdown();

    let engine = Engine::open(config(dir.path())).unwrap();
    let context = new_context(&engine);
    append(&engine, context, &chat_payload(2, 16 * 1024), None).unwrap();
    assert_eq!(
        engine.stats().chunked_blobs,
        0,
        "at the threshold: one record"
    );
    append(&engine, context, &chat_payload(3, 16 * 1024 + 1), None).unwrap();
    assert_eq!(engine.stats().chunked_blobs, 1);
    engine.shutdown();
}

fn chunk_refs(payload: &[u8], engine_config: &EngineConfig) -> (Vec<ChunkRef>, Vec<Bytes>) {
    let bytes = Bytes::copy_from_slice(payload);
    let ranges = engine_config.chunking.cut(payload);
    let chunks = ranges
        .iter()
        .map(|range| ChunkRef {
            hash: BlobHash::of(&payload[range.clone()]),
            len: range.len() as u32,
        })
        .collect();
    (chunks, ranges.into_iter().map(|r| bytes.slice(r)).collect())
}

#[test]
fn a_chunked_put_sends_only_missing_chunks_and_refuses_what_does_not_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let engine_config = config(dir.path());
    let engine = Engine::open(engine_config.clone()).unwrap();
    let first = state(60, 1024);
    let (chunks, bytes) = chunk_refs(&first, &engine_config);
    let hash = BlobHash::of(&first);
    let everything: Vec<(u32, Bytes)> = bytes
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, b)| (i as u32, b))
        .collect();

    // Missing chunks: named, and nothing written.
    let error = block_on(engine.put_chunked(hash, None, chunks.clone(), everything[1..].to_vec()))
        .unwrap_err();
    match &error {
        EngineError::MissingChunks { missing } => assert_eq!(missing, &vec![0]),
        other => panic!("{other}"),
    }
    assert_eq!(error.kind(), ErrorKind::NotFound);
    assert!(!block_on(engine.has_blob(hash)));
    // A sent chunk that is not what it claims.
    let mut lying = everything.clone();
    let mut wrong = lying[2].1.to_vec();
    wrong[0] ^= 1;
    lying[2].1 = Bytes::from(wrong);
    let error = block_on(engine.put_chunked(hash, None, chunks.clone(), lying)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::HashMismatch, "{error}");
    // A whole-payload hash the chunks do not rebuild.
    let error = block_on(engine.put_chunked(
        BlobHash::of(b"other"),
        None,
        chunks.clone(),
        everything.clone(),
    ))
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::HashMismatch, "{error}");
    assert!(!block_on(engine.has_blob(hash)));
    // Lengths that do not match the bytes, and a chunk of length 0.
    let mut short = chunks.clone();
    short[0].len += 1;
    let error = block_on(engine.put_chunked(hash, None, short, everything.clone())).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    // Over the payload limit.
    let huge = vec![ChunkRef { hash, len: 1 << 20 }; 3];
    let error = block_on(engine.put_chunked(hash, None, huge, Vec::new())).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TooLarge, "{error}");

    // The real thing, then the next state with only its new chunks.
    assert!(!block_on(engine.put_chunked(hash, None, chunks.clone(), everything)).unwrap());
    let second = state(61, 1024);
    let (next_chunks, next_bytes) = chunk_refs(&second, &engine_config);
    let sent: Vec<(u32, Bytes)> = next_chunks
        .iter()
        .enumerate()
        .filter(|(_, chunk)| !chunks.contains(chunk))
        .map(|(i, _)| (i as u32, next_bytes[i].clone()))
        .collect();
    assert!(
        sent.len() <= 3,
        "{} of {} chunks new",
        sent.len(),
        next_chunks.len()
    );
    let second_hash = BlobHash::of(&second);
    assert!(!block_on(engine.put_chunked(second_hash, None, next_chunks.clone(), sent)).unwrap());
    assert!(
        block_on(engine.put_chunked(second_hash, None, next_chunks.clone(), Vec::new())).unwrap()
    );
    assert_eq!(
        &block_on(engine.blob(second_hash)).unwrap()[..],
        &second[..]
    );
    // The third state names the second as its base: only the chunks after their shared
    // prefix are listed, and only the new ones sent.
    let third = state(62, 1024);
    let (third_chunks, third_bytes) = chunk_refs(&third, &engine_config);
    let kept = next_chunks
        .iter()
        .zip(&third_chunks)
        .take_while(|(a, b)| a == b)
        .count();
    assert!(kept > 0 && kept < third_chunks.len());
    let listed = third_chunks[kept..].to_vec();
    let sent: Vec<(u32, Bytes)> = (kept..third_chunks.len())
        .map(|i| ((i - kept) as u32, third_bytes[i].clone()))
        .collect();
    let third_hash = BlobHash::of(&third);
    let missing_base = BlobHash::of(b"no such base");
    let error = block_on(engine.put_chunked(
        third_hash,
        Some((missing_base, kept as u32)),
        listed.clone(),
        sent.clone(),
    ))
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    let error = block_on(engine.put_chunked(
        third_hash,
        Some((second_hash, next_chunks.len() as u32 + 1)),
        listed.clone(),
        sent.clone(),
    ))
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    assert!(
        !block_on(engine.put_chunked(third_hash, Some((second_hash, kept as u32)), listed, sent))
            .unwrap()
    );
    assert_eq!(&block_on(engine.blob(third_hash)).unwrap()[..], &third[..]);
    let context = new_context(&engine);
    let appended = block_on(engine.append(ctxstore_engine::AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: ctxstore_engine::AppendPayload::StoredBlob(second_hash),
        options: Default::default(),
    }))
    .unwrap();
    assert_eq!(appended.turn.payload_hash, second_hash);
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}

#[test]
fn collections_follow_manifests_to_their_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let kept = new_context(&engine);
    let doomed = new_context(&engine);
    let mut live = HashMap::new();
    let mut gone = Vec::new();
    for step in 1..=40 {
        let shared = state(step + 20, 900);
        let appended = append(&engine, kept, &shared, None).unwrap();
        live.insert(appended.turn.turn_id, shared);
        // The doomed context's states share nothing with the kept one's, and grow (a chain
        // of delta manifests down to full ones, all of which must go).
        let own = random_payload(99, 20_000 + step * 1000);
        append(&engine, doomed, &own, None).unwrap();
        gone.push(own);
    }
    let before = engine.stats();
    block_on(engine.delete_context(&ContextRef::Id(doomed))).unwrap();
    // One round takes the dead manifests and every chunk only they name.
    let report = engine.gc().unwrap();
    assert!(report.blobs_dead > 40, "{report:?}");
    let after = engine.stats();
    assert!(
        after.stored_bytes < before.stored_bytes / 2,
        "{} → {} bytes",
        before.stored_bytes,
        after.stored_bytes
    );
    read_back(&engine, &live);
    for payload in &gone {
        let hash = BlobHash::of(payload);
        assert!(!block_on(engine.has_blob(hash)));
        // Every chunk of it is gone too (they were incompressible and unshared).
        for range in engine.config().chunking.cut(payload) {
            assert!(!block_on(engine.has_blob(BlobHash::of(&payload[range]))));
        }
    }
    engine.shutdown();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    read_back(&engine, &live);
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}

#[test]
fn chunked_appends_racing_collections_keep_every_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let churn = new_context(&engine);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let live = std::thread::scope(|scope| {
        // Collections back to back while the same states are deleted and appended again, so
        // that chunks are condemned while new manifests dedup against them.
        let collector = scope.spawn(|| {
            let mut rounds = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || rounds < 3 {
                engine.gc().unwrap();
                rounds += 1;
            }
        });
        let mut live = HashMap::new();
        for round in 0..12 {
            let doomed = new_context(&engine);
            for step in 1..=10 {
                append(&engine, doomed, &state(step + 20, 700), None).unwrap();
            }
            block_on(engine.delete_context(&ContextRef::Id(doomed))).unwrap();
            let payload = state(round + 25, 700);
            let appended = append(&engine, churn, &payload, None).unwrap();
            live.insert(appended.turn.turn_id, payload);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        collector.join().unwrap();
        live
    });
    read_back(&engine, &live);
    engine.gc().unwrap();
    read_back(&engine, &live);
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    read_back(&engine, &live);
    engine.shutdown();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]

    /// Payloads built from shared and shifted regions of a few sources round-trip exactly
    /// through chunked storage, before and after a reopen, and `verify` agrees.
    #[test]
    fn shared_and_shifted_regions_round_trip(
        pieces in proptest::collection::vec(
            proptest::collection::vec((0u8..3, 0usize..60_000, 1usize..30_000), 1..6),
            1..8,
        ),
    ) {
        let sources = [chat_payload(1, 100_000), random_payload(2, 100_000), state(80, 1000)];
        let dir = tempfile::tempdir().unwrap();
        let mut expected = HashMap::new();
        {
            let engine = Engine::open(config(dir.path())).unwrap();
            let context = new_context(&engine);
            for parts in &pieces {
                let mut payload = Vec::new();
                for (source, start, len) in parts {
                    let source = &sources[*source as usize];
                    let start = (*start).min(source.len() - 1);
                    let end = (start + len).min(source.len());
                    payload.extend_from_slice(&source[start..end]);
                }
                let appended = append(&engine, context, &payload, None).unwrap();
                expected.insert(appended.turn.turn_id, payload);
            }
            read_back(&engine, &expected);
            engine.shutdown();
        }
        let engine = Engine::open(config(dir.path())).unwrap();
        read_back(&engine, &expected);
        engine.shutdown();
        let report = verify(dir.path()).unwrap();
        proptest::prop_assert!(report.is_ok(), "{}", report);
    }
}
