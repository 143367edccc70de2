//! One append route (issue 30 item 3): batches whose new payloads — whole and chunked — lie in
//! several shards, appended by concurrent writers through small inboxes (the route's
//! `Written` puts and the carrier's hand-on must never wait for each other), read back
//! exactly, after a reopen too, and the store verifies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::{block_on, chat_payload, config};
use ctxstore_engine::{AppendPayload, AppendRequest, ContextId, Engine, verify};

const WRITERS: u64 = 6;
const STEPS: u64 = 15;

fn request(context: ContextId, payload: AppendPayload) -> AppendRequest {
    AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 3,
        codec: 1,
        payload,
        options: Default::default(),
    }
}

/// Every context's payloads, oldest first, as the engine reads them.
fn stored(engine: &Engine, context: ContextId) -> Vec<Bytes> {
    let page = block_on(engine.last(context, 1000, true)).unwrap();
    page.turns
        .into_iter()
        .map(|turn| turn.payload.expect("payloads asked"))
        .collect()
}

#[test]
fn batches_across_shards_with_chunked_payloads_keep_every_turn() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path()).with_shards(4);
    config.limits.queue_depth_max = 2;
    config.limits.blob_bytes_max = 2 << 20;
    let engine = Engine::open(config.clone()).unwrap();
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let context = block_on(engine.create_context()).unwrap().context_id;
                let shared = Bytes::from(chat_payload(1_000 + writer, 2_000));
                let (shared_hash, _) = block_on(engine.put_blob(shared.clone())).unwrap();
                let mut expected = Vec::new();
                let mut state = chat_payload(writer, 20_000);
                for step in 0..STEPS {
                    // A growing state over the chunk threshold (its chunks in every shard), a
                    // new small payload twice (one blob, both turns told it is new), and a
                    // stored blob by hash.
                    state.extend_from_slice(&chat_payload(writer * 100 + step, 700));
                    let small = Bytes::from(format!("writer {writer} step {step}"));
                    let state_bytes = Bytes::from(state.clone());
                    let batch = vec![
                        request(context, AppendPayload::Bytes(small.clone())),
                        request(context, AppendPayload::Bytes(state_bytes.clone())),
                        request(context, AppendPayload::Bytes(small.clone())),
                        request(context, AppendPayload::StoredBlob(shared_hash)),
                    ];
                    let appended = block_on(engine.append_batch(batch)).unwrap();
                    assert_eq!(appended.len(), 4);
                    assert!(!appended[0].deduped && !appended[2].deduped, "{appended:?}");
                    assert!(appended[3].deduped);
                    assert_eq!(appended[0].turn.payload_hash, appended[2].turn.payload_hash);
                    let depths: Vec<u32> = appended.iter().map(|a| a.turn.depth).collect();
                    let first = u32::try_from(step * 4).unwrap();
                    assert_eq!(depths, [first, first + 1, first + 2, first + 3]);
                    expected.extend([small.clone(), state_bytes, small, shared.clone()]);
                }
                (context, expected)
            })
        })
        .collect();
    let expected: Vec<(ContextId, Vec<Bytes>)> =
        writers.into_iter().map(|w| w.join().unwrap()).collect();
    for (context, payloads) in &expected {
        assert_eq!(&stored(&engine, *context), payloads);
    }
    let stats = engine.stats();
    assert_eq!(stats.turns, WRITERS * STEPS * 4);
    assert!(stats.chunked_blobs >= WRITERS * STEPS, "{stats:?}");
    assert!(
        stats.chunks_written > 0 && stats.chunk_dedup_hits > 0,
        "{stats:?}"
    );
    engine.shutdown();
    drop(engine);

    let engine = Engine::open(config).unwrap();
    for (context, payloads) in &expected {
        assert_eq!(&stored(&engine, *context), payloads);
    }
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}

/// A write larger than one shard batch goes as several puts (each fitting an empty batch), so
/// that no batch passes `shard_batch_records_max` — the torn-tail window recovery relies on —
/// and a manifest still follows its chunks; with one shard and with three.
#[test]
fn a_write_larger_than_a_shard_batch_goes_as_several_puts() {
    for shards in [1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(dir.path()).with_shards(shards);
        config.limits.shard_batch_records_max = 4;
        let engine = Engine::open(config.clone()).unwrap();
        let context = block_on(engine.create_context()).unwrap().context_id;
        let payloads: Vec<Bytes> = (0..3)
            .map(|seed| Bytes::from(chat_payload(seed, 40_000)))
            .chain([Bytes::from_static(b"small")])
            .collect();
        let batch = payloads
            .iter()
            .map(|payload| request(context, AppendPayload::Bytes(payload.clone())))
            .collect();
        let appended = block_on(engine.append_batch(batch)).unwrap();
        assert_eq!(appended.len(), payloads.len());
        assert_eq!(stored(&engine, context), payloads);
        // A value without a turn goes the same way.
        let (hash, deduped) =
            block_on(engine.put_blob(Bytes::from(chat_payload(9, 50_000)))).unwrap();
        assert!(!deduped);
        assert_eq!(
            block_on(engine.blob(hash)).unwrap(),
            Bytes::from(chat_payload(9, 50_000))
        );
        for actor in engine.actor_metrics().iter().skip(1) {
            let records = &actor.batch_records;
            let total = records.cumulative.last().copied().unwrap_or(0);
            assert!(total > 1, "{}: {total} batches", actor.actor);
            assert_eq!(records.bounds[2], 4);
            assert_eq!(
                records.cumulative[2], total,
                "{}: a batch over 4",
                actor.actor
            );
        }
        engine.shutdown();
        drop(engine);
        let engine = Engine::open(config).unwrap();
        assert_eq!(stored(&engine, context), payloads);
        engine.shutdown();
        let report = verify(dir.path()).unwrap();
        assert!(report.is_ok(), "{report}");
    }
}
