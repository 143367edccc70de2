//! The engine's operations, one by one, compared byte for byte and id for id.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, ContextId, Engine, EngineConfig, EngineError,
    ErrorKind, TurnId, verify,
};

#[test]
fn append_fork_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let context = block_on(engine.create_context()).unwrap();
    assert_eq!(context.context_id, ContextId(1));
    assert_eq!(context.head_turn_id, TurnId::NONE);

    let mut turns = Vec::new();
    for index in 0..10u64 {
        let payload = chat_payload(index, 10_240);
        let appended = append(&engine, context.context_id, &payload, None).unwrap();
        assert!(!appended.deduped);
        assert_eq!(appended.turn.depth, index as u32);
        assert_eq!(appended.turn.payload_hash, BlobHash::of(&payload));
        assert_eq!(appended.turn.payload_len, 10_240);
        turns.push(appended.turn);
    }
    for pair in turns.windows(2) {
        assert_eq!(pair[1].parent_turn_id, pair[0].turn_id);
        assert!(pair[1].turn_id > pair[0].turn_id);
    }
    let head = block_on(engine.head(context.context_id)).unwrap();
    assert_eq!(head.head_turn_id, turns[9].turn_id);
    assert_eq!(head.head_depth, 9);

    let last = block_on(engine.last(context.context_id, 4, true)).unwrap();
    let ids: Vec<_> = last.turns.iter().map(|t| t.turn.turn_id).collect();
    assert_eq!(
        ids,
        turns[6..].iter().map(|t| t.turn_id).collect::<Vec<_>>()
    );
    assert_eq!(last.next_before, turns[6].turn_id);
    assert_eq!(
        last.turns[0].payload.as_deref(),
        Some(&chat_payload(6, 10_240)[..])
    );

    let older = block_on(engine.before(context.context_id, last.next_before, 4, false)).unwrap();
    assert_eq!(
        older
            .turns
            .iter()
            .map(|t| t.turn.turn_id)
            .collect::<Vec<_>>(),
        turns[2..6].iter().map(|t| t.turn_id).collect::<Vec<_>>()
    );
    assert!(older.turns.iter().all(|t| t.payload.is_none()));
    let oldest = block_on(engine.before(context.context_id, older.next_before, 4, false)).unwrap();
    assert_eq!(oldest.turns.len(), 2);
    assert_eq!(oldest.next_before, TurnId::NONE);

    let window = block_on(engine.range_by_depth(context.context_id, 3, 3, false)).unwrap();
    assert_eq!(
        window.iter().map(|t| t.turn.depth).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    let chain = block_on(engine.chain(turns[4].turn_id, 0, 100, false)).unwrap();
    assert_eq!(chain.len(), 5);
    assert_eq!(chain[0].turn, turns[0]);

    // Fork at depth 4: the branches share history and diverge after it.
    let fork = block_on(engine.fork(turns[4].turn_id)).unwrap();
    assert_eq!(fork.head_turn_id, turns[4].turn_id);
    assert_eq!(fork.head_depth, 4);
    let branch = append(&engine, fork.context_id, b"a different future", None).unwrap();
    assert_eq!(branch.turn.parent_turn_id, turns[4].turn_id);
    assert_eq!(branch.turn.depth, 5);
    let fork_chain = block_on(engine.last(fork.context_id, 100, false)).unwrap();
    assert_eq!(fork_chain.turns.len(), 6);
    assert_eq!(
        fork_chain.turns[..5]
            .iter()
            .map(|t| t.turn)
            .collect::<Vec<_>>(),
        turns[..5].to_vec()
    );
    assert_eq!(
        block_on(engine.head(context.context_id))
            .unwrap()
            .head_turn_id,
        turns[9].turn_id
    );

    let stats = engine.stats();
    assert_eq!(stats.turns, 11);
    assert_eq!(stats.contexts, 2);
    assert_eq!(stats.blobs, 11);
    assert!(
        stats.stored_bytes < stats.logical_bytes,
        "chat text compresses"
    );

    // Everything survives a restart, and the store verifies.
    engine.shutdown();
    drop(engine);
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.turns, 11);
    let engine = open(dir.path());
    assert_eq!(
        block_on(engine.last(fork.context_id, 100, false)).unwrap(),
        fork_chain
    );
    assert_eq!(engine.stats().turns, 11);
    let next = append(&engine, context.context_id, b"after restart", None).unwrap();
    assert_eq!(next.turn.parent_turn_id, turns[9].turn_id);
    assert!(
        next.turn.turn_id > branch.turn.turn_id,
        "TurnIDs keep increasing across restarts"
    );
}

#[test]
fn expected_head_conflicts_name_the_actual_head() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let context = block_on(engine.create_context()).unwrap().context_id;
    let first = append(&engine, context, b"one", Some(TurnId::NONE))
        .unwrap()
        .turn;
    let stale = append(&engine, context, b"two", Some(TurnId::NONE)).unwrap_err();
    match stale {
        EngineError::Conflict {
            context_id,
            expected,
            actual,
        } => {
            assert_eq!(
                (context_id, expected, actual),
                (context, TurnId::NONE, first.turn_id)
            );
        }
        other => panic!("expected a conflict, got {other}"),
    }
    let second = append(&engine, context, b"two", Some(first.turn_id))
        .unwrap()
        .turn;
    assert_eq!(second.parent_turn_id, first.turn_id);
}

#[test]
fn append_by_hash_and_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.limits.blob_bytes_max = 1024;
    config.limits.shard_batch_bytes_max = 64 * 1024;
    config.limits.pack_bytes_max = 64 * 1024;
    let engine = Engine::open(config).unwrap();
    let context = block_on(engine.create_context()).unwrap().context_id;
    let stored = append(&engine, context, b"shared system prompt", None)
        .unwrap()
        .turn;

    let by_hash = |hash| {
        block_on(engine.append(AppendRequest {
            context_id: context,
            expected_head: None,
            type_tag: 1,
            codec: 2,
            payload: AppendPayload::StoredBlob(hash),
            options: Default::default(),
        }))
    };
    let again = by_hash(stored.payload_hash).unwrap();
    assert!(again.deduped);
    assert_eq!(again.turn.payload_len, stored.payload_len);
    assert_eq!(again.turn.parent_turn_id, stored.turn_id);
    let missing = by_hash(BlobHash::of(b"never stored")).unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);

    let too_large = append(&engine, context, &[7u8; 1025], None).unwrap_err();
    assert_eq!(too_large.kind(), ErrorKind::TooLarge);
    assert_eq!(
        append(&engine, ContextId(99), b"x", None)
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        block_on(engine.fork(TurnId(12345))).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        block_on(engine.turn(TurnId(1))).unwrap_err().kind(),
        ErrorKind::NotFound,
        "record 1 is a context"
    );
    assert_eq!(
        block_on(engine.last(context, 1_000_000, false))
            .unwrap_err()
            .kind(),
        ErrorKind::TooLarge
    );
    assert_eq!(
        block_on(engine.blob(BlobHash::of(b"nope")))
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        block_on(engine.blob(stored.payload_hash)).unwrap(),
        Bytes::from_static(b"shared system prompt")
    );

    // Packs rotate at pack_bytes_max and stay readable.
    let mut hashes = Vec::new();
    for seed in 0..200 {
        let payload = random_payload(seed, 1000);
        hashes.push((
            append(&engine, context, &payload, None)
                .unwrap()
                .turn
                .payload_hash,
            payload,
        ));
    }
    for (hash, payload) in &hashes {
        assert_eq!(&block_on(engine.blob(*hash)).unwrap()[..], &payload[..]);
    }
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    let packs = std::fs::read_dir(dir.path().join("blobs/shard-00"))
        .unwrap()
        .count();
    assert!(packs > 2, "expected rotated packs, found {packs} files");
}

#[test]
fn shutdown_refuses_new_work_and_a_second_open_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let second = Engine::open(config(dir.path())).unwrap_err();
    assert!(second.to_string().contains("locked"), "{second}");
    engine.shutdown();
    assert_eq!(
        block_on(engine.create_context()).unwrap_err().kind(),
        ErrorKind::ShutDown
    );
    let wrong_shards = Engine::open(EngineConfig::new(dir.path()).with_shards(3)).unwrap_err();
    assert!(
        wrong_shards.to_string().contains("2 blob shards"),
        "{wrong_shards}"
    );
}

#[test]
fn an_engine_dropped_while_its_owner_panics_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let unwound = std::panic::catch_unwind(|| {
        let engine = open(dir.path());
        let context = block_on(engine.create_context()).unwrap().context_id;
        append(&engine, context, b"durable before the panic", None).unwrap();
        panic!("the owner fails");
    });
    assert!(unwound.is_err());
    let engine = open(dir.path());
    let page = block_on(engine.last(ContextId(1), 10, true)).unwrap();
    assert_eq!(page.turns.len(), 1);
    assert_eq!(
        page.turns[0].payload.as_deref(),
        Some(&b"durable before the panic"[..])
    );
}

#[test]
fn a_creation_interrupted_before_the_meta_file_is_redone() {
    let dir = tempfile::tempdir().unwrap();
    // What a creation that died before its last step (the meta file) leaves: empty files.
    std::fs::create_dir_all(dir.path().join("blobs/shard-00")).unwrap();
    std::fs::write(dir.path().join("blobs/shard-00/pack-000000.pack"), b"").unwrap();
    std::fs::write(dir.path().join("turns.log"), b"").unwrap();
    let engine = open(dir.path());
    let context = block_on(engine.create_context()).unwrap().context_id;
    append(&engine, context, b"works", None).unwrap();
    engine.shutdown();
    // With records in turns.log, a missing meta file is not a creation: refuse.
    std::fs::remove_file(dir.path().join("ctxstore.meta")).unwrap();
    let error = Engine::open(config(dir.path())).unwrap_err();
    assert!(error.to_string().contains("holds records"), "{error}");
}
