//! Concurrency: many appenders on one context with compare-and-set, many on their own
//! contexts, and concurrent puts of one new blob. Tasks run on a compio runtime (the server's
//! runtime) and on plain threads (any caller).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Barrier};

use bytes::Bytes;
use common::*;
use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, Compression, ContextId, EngineError, TurnId, verify,
};

const TASKS: usize = 32;

#[test]
fn one_context_with_expected_head_exactly_one_wins_each_step() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let context = block_on(engine.create_context()).unwrap().context_id;
    const WINS_PER_TASK: usize = 8;

    let runtime = compio::runtime::Runtime::new().unwrap();
    let outcomes: Vec<(Vec<TurnId>, usize)> = runtime.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let engine = engine.clone();
                compio::runtime::spawn(async move {
                    let mut wins = Vec::new();
                    let mut conflicts = 0;
                    while wins.len() < WINS_PER_TASK {
                        let head = engine.head(context).await.unwrap().head_turn_id;
                        let payload = format!("task {task} attempt {}", wins.len() + conflicts);
                        let result = engine
                            .append(AppendRequest {
                                context_id: context,
                                expected_head: Some(head),
                                type_tag: task as u64,
                                codec: 0,
                                payload: AppendPayload::Bytes(Bytes::from(payload)),
                                options: Default::default(),
                            })
                            .await;
                        match result {
                            Ok(appended) => {
                                assert_eq!(appended.turn.parent_turn_id, head);
                                wins.push(appended.turn.turn_id);
                            }
                            Err(EngineError::Conflict {
                                actual, expected, ..
                            }) => {
                                assert_eq!(expected, head);
                                assert_ne!(actual, head);
                                conflicts += 1;
                            }
                            Err(other) => panic!("task {task}: {other}"),
                        }
                    }
                    (wins, conflicts)
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        outcomes
    });

    // The chain is linear: one turn per depth, each a win of exactly one task.
    let total = TASKS * WINS_PER_TASK;
    let chain = block_on(engine.last(context, total as u32 + 1, false))
        .unwrap()
        .turns;
    assert_eq!(chain.len(), total);
    for (depth, turn) in chain.iter().enumerate() {
        assert_eq!(turn.turn.depth as usize, depth);
    }
    let chain_ids: HashSet<TurnId> = chain.iter().map(|t| t.turn.turn_id).collect();
    let won: Vec<TurnId> = outcomes.iter().flat_map(|(wins, _)| wins.clone()).collect();
    assert_eq!(won.len(), total);
    assert_eq!(
        won.iter().copied().collect::<HashSet<_>>(),
        chain_ids,
        "no lost or duplicated turn"
    );
    // Each task's wins appear in the chain under its own type tag.
    for turn in &chain {
        let task = turn.turn.type_tag as usize;
        assert!(outcomes[task].0.contains(&turn.turn.turn_id));
    }
    let conflicts: usize = outcomes.iter().map(|(_, conflicts)| conflicts).sum();
    eprintln!("{total} wins, {conflicts} conflicts");
    engine.shutdown();
    assert!(verify(dir.path()).unwrap().is_ok());
}

#[test]
fn contexts_of_their_own_all_durable_turn_ids_unique() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    const APPENDS_PER_TASK: usize = 25;
    let barrier = Arc::new(Barrier::new(TASKS));
    let threads: Vec<_> = (0..TASKS)
        .map(|task| {
            let engine = engine.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let context = block_on(engine.create_context()).unwrap().context_id;
                barrier.wait();
                let mut turns = Vec::new();
                for index in 0..APPENDS_PER_TASK {
                    let payload = chat_payload((task * 1000 + index) as u64, 2048);
                    turns.push(append(&engine, context, &payload, None).unwrap().turn);
                }
                (context, turns)
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    engine.shutdown();
    drop(engine);

    let engine = open(dir.path());
    let mut ids = HashSet::new();
    for (task, (context, turns)) in results.iter().enumerate() {
        let page = block_on(engine.last(*context, APPENDS_PER_TASK as u32, true)).unwrap();
        assert_eq!(
            page.turns.iter().map(|t| t.turn).collect::<Vec<_>>(),
            *turns
        );
        for (index, turn) in page.turns.iter().enumerate() {
            let expected = chat_payload((task * 1000 + index) as u64, 2048);
            assert_eq!(turn.payload.as_deref(), Some(&expected[..]));
            assert!(
                ids.insert(turn.turn.turn_id),
                "TurnID {} twice",
                turn.turn.turn_id
            );
        }
    }
    assert_eq!(ids.len(), TASKS * APPENDS_PER_TASK);
}

#[test]
fn one_payload_in_100_contexts_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let prompt = chat_payload(42, 10_240);
    let mut hashes = HashSet::new();
    for index in 0..100 {
        let context = block_on(engine.create_context()).unwrap().context_id;
        let appended = append(&engine, context, &prompt, None).unwrap();
        assert_eq!(appended.deduped, index > 0);
        hashes.insert(appended.turn.payload_hash);
    }
    assert_eq!(hashes.len(), 1);
    let stats = engine.stats();
    assert_eq!((stats.turns, stats.blobs, stats.dedup_hits), (100, 1, 99));
    assert_eq!(stats.logical_bytes, 100 * 10_240);
    assert_eq!(stats.unique_bytes, 10_240);
    engine.shutdown();
    drop(engine);
    // On disk: one record (packs may carry prepared zeros after their records).
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!((report.blobs, report.stored_bytes), (1, stats.stored_bytes));
    assert!(report.stored_bytes < 10_240, "and compressed");
    let reopened = open(dir.path()).stats();
    assert_eq!((reopened.blobs, reopened.dedup_hits), (1, 99));
}

#[test]
fn concurrent_puts_of_one_new_blob_write_one_record() {
    for round in 0..5u64 {
        let dir = tempfile::tempdir().unwrap();
        let engine = open(dir.path());
        let payload = Bytes::from(chat_payload(round, 50_000));
        let barrier = Arc::new(Barrier::new(TASKS));
        let threads: Vec<_> = (0..TASKS)
            .map(|_| {
                let engine = engine.clone();
                let payload = payload.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    block_on(engine.put_blob(payload)).unwrap()
                })
            })
            .collect();
        let results: Vec<(BlobHash, bool)> =
            threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert!(
            results
                .iter()
                .all(|(hash, _)| *hash == BlobHash::of(&payload))
        );
        assert_eq!(
            results.iter().filter(|(_, deduped)| !deduped).count(),
            1,
            "exactly one stored it"
        );
        // One manifest record and each distinct chunk once (50 KB is chunked, issue 16).
        let stats = engine.stats();
        let chunks: std::collections::HashSet<BlobHash> = engine
            .config()
            .chunking
            .cut(&payload)
            .into_iter()
            .map(|range| BlobHash::of(&payload[range]))
            .collect();
        assert_eq!(stats.chunked_blobs, 1);
        assert_eq!(stats.blobs, 1 + chunks.len() as u64);
        engine.shutdown();
        let report = verify(dir.path()).unwrap();
        assert_eq!(
            (report.blobs, report.stored_bytes),
            (stats.blobs, stats.stored_bytes)
        );
    }
}

#[test]
fn a_one_mib_random_payload_is_stored_raw_and_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let payload = random_payload(7, 1 << 20);
    let context = block_on(engine.create_context()).unwrap().context_id;
    let turn = append(&engine, context, &payload, None).unwrap().turn;
    let stored = block_on(engine.blob_stored(turn.payload_hash)).unwrap();
    assert_eq!(stored.compression, Compression::Raw);
    assert_eq!(stored.bytes.len(), 1 << 20);
    assert_eq!(
        &block_on(engine.blob(turn.payload_hash)).unwrap()[..],
        &payload[..]
    );
    engine.shutdown();
    drop(engine);
    let engine = open(dir.path());
    let page = block_on(engine.last(ContextId(1), 1, true)).unwrap();
    assert_eq!(page.turns[0].payload.as_deref(), Some(&payload[..]));
}

#[test]
fn tiny_batches_and_batch_waits_keep_every_append() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.limits.sequencer_batch_records_max = 2;
    config.limits.shard_batch_records_max = 1;
    config.limits.batch_wait_us_max = 300;
    config.limits.queue_depth_max = 4;
    let engine = ctxstore_engine::Engine::open(config.clone()).unwrap();
    let threads: Vec<_> = (0..16)
        .map(|task| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let context = block_on(engine.create_context()).unwrap().context_id;
                let turns: Vec<_> = (0..10)
                    .map(|index| {
                        let payload = chat_payload(task * 100 + index, 700);
                        append(&engine, context, &payload, None).unwrap().turn
                    })
                    .collect();
                (context, turns)
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    engine.shutdown();
    drop(engine);
    let engine = ctxstore_engine::Engine::open(config).unwrap();
    for (context, turns) in results {
        let page = block_on(engine.last(context, 10, false)).unwrap();
        assert_eq!(page.turns.iter().map(|t| t.turn).collect::<Vec<_>>(), turns);
    }
    assert_eq!(engine.stats().turns, 160);
}

/// Decision 0014: a sequencer batch holding more than `HELD_RECORDS_MAX` (4,096) records after
/// a turn whose blob is still syncing waits for its blobs before it is written (so that a
/// crash never leaves a longer tail of turns naming lost blobs). Made here by 480 appends of
/// new blobs, each with a kilobyte of labels (about ten log slots), that one shard batch gathers
/// (a long batch wait) and hands on in one message: every append succeeds, in one context
/// whose chain and labels read back, and the store reopens and verifies.
#[test]
fn an_oversized_batch_of_turns_naming_syncing_blobs_waits_for_them_first() {
    const APPENDS: usize = 480;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config = config.with_shards(1);
    config.limits.batch_wait_us_max = 300_000;
    config.limits.shard_batch_records_max = 1024;
    config.limits.sequencer_batch_records_max = 65_536;
    let engine = ctxstore_engine::Engine::open(config.clone()).unwrap();
    let context = block_on(engine.create_context()).unwrap().context_id;
    let labels: Vec<(String, String)> = (0..15)
        .map(|index| (format!("k{index:02}"), "v".repeat(60)))
        .collect();
    let runtime = compio::runtime::Runtime::new().unwrap();
    let appended: Vec<TurnId> = runtime.block_on(async {
        let tasks: Vec<_> = (0..APPENDS)
            .map(|index| {
                let engine = engine.clone();
                let labels = labels.clone();
                compio::runtime::spawn(async move {
                    let request = AppendRequest {
                        context_id: context,
                        expected_head: None,
                        type_tag: 3,
                        codec: 0,
                        payload: AppendPayload::Bytes(Bytes::from(format!("payload {index}"))),
                        options: ctxstore_engine::TurnOptions {
                            labels,
                            ..Default::default()
                        },
                    };
                    engine.append(request).await.unwrap().turn.turn_id
                })
            })
            .collect();
        let mut appended = Vec::new();
        for task in tasks {
            appended.push(task.await.unwrap());
        }
        appended
    });
    let first = appended.iter().min().copied().unwrap();
    let last = appended.iter().max().copied().unwrap();
    assert!(
        last.0 - first.0 + 1 > 4096,
        "the turns span more records than the held bound: {first}..={last}"
    );
    let chain = block_on(engine.last(context, APPENDS as u32 + 1, false)).unwrap();
    assert_eq!(chain.turns.len(), APPENDS);
    let ids: HashSet<TurnId> = chain.turns.iter().map(|turn| turn.turn.turn_id).collect();
    assert_eq!(ids, appended.iter().copied().collect());
    engine.shutdown();
    drop(engine);
    let engine = ctxstore_engine::Engine::open(config).unwrap();
    let reopened = block_on(engine.last(context, APPENDS as u32 + 1, false)).unwrap();
    assert_eq!(reopened.turns.len(), APPENDS);
    let extras = engine.turn_extras(last).unwrap();
    assert_eq!(extras.labels, labels);
    engine.shutdown();
    drop(engine);
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}
