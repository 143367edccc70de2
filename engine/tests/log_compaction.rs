//! `turns.log` compaction (issue 15, decision 0011, `engine/src/log_compaction.rs`): the
//! records of collected turns that no live history needs leave the log, everything live reads
//! back the same (before and after a reopen, in a backup), TurnIDs are never reused, and the
//! log's disk blocks come back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use bytes::Bytes;
use common::{append, block_on, filled_context, gc_config, new_context, random_payload};
use ctxstore_engine::turns::LogQuery;
use ctxstore_engine::{
    AppendPayload, AppendRequest, ContextId, ContextRef, Engine, EngineError, TurnId, TurnOptions,
    verify,
};

/// Appends a turn with a key and a label (so it has extras slots in the log).
fn append_keyed(engine: &Engine, context: ContextId, payload: &[u8], key: &str) -> TurnId {
    let request = AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 3,
        codec: 0,
        payload: AppendPayload::Bytes(Bytes::copy_from_slice(payload)),
        options: TurnOptions {
            key: Some(Bytes::copy_from_slice(key.as_bytes())),
            labels: vec![("step".into(), key.into())],
            ..TurnOptions::default()
        },
    };
    block_on(engine.append(request)).unwrap().turn.turn_id
}

fn turn_log(engine: &Engine, context: ContextId) -> Vec<TurnId> {
    let query = LogQuery {
        labels: Vec::new(),
        cursor: None,
        limit: 1000,
        as_of: None,
        payload_bytes_max: 0,
    };
    let page = engine.turn_log(&ContextRef::Id(context), &query).unwrap();
    assert!(page.next_cursor.is_none());
    let mut turns: Vec<TurnId> = page.turns.iter().map(|turn| turn.turn.turn_id).collect();
    turns.sort_unstable();
    turns
}

/// Bytes the file system allocated to `path`.
fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |metadata| metadata.blocks() * 512)
}

/// What must read back: every live turn's payload, the dead turns as not found.
struct Expected {
    live: HashMap<TurnId, Vec<u8>>,
    dead: Vec<TurnId>,
    /// (context, its turn log, sorted).
    logs: Vec<(ContextId, Vec<TurnId>)>,
    /// (context, chain from depth 0 → turn ids).
    chains: Vec<(ContextId, Vec<TurnId>)>,
}

fn check(engine: &Engine, expected: &Expected) {
    for (turn_id, payload) in &expected.live {
        let turn = block_on(engine.turn(*turn_id)).unwrap();
        let stored = block_on(engine.blob(turn.payload_hash)).unwrap();
        assert_eq!(&stored[..], &payload[..], "turn {turn_id}");
    }
    for turn_id in &expected.dead {
        assert!(
            matches!(
                block_on(engine.turn(*turn_id)),
                Err(EngineError::TurnNotFound(_))
            ),
            "turn {turn_id} was collected"
        );
    }
    for (context, log) in &expected.logs {
        assert_eq!(&turn_log(engine, *context), log, "turn log of {context}");
    }
    for (context, chain) in &expected.chains {
        let read: Vec<TurnId> = block_on(engine.range_by_depth(*context, 0, 1000, false))
            .unwrap()
            .iter()
            .map(|turn| turn.turn.turn_id)
            .collect();
        assert_eq!(&read, chain, "chain of {context}");
    }
}

#[test]
fn log_compaction_drops_deleted_histories_and_keeps_every_live_turn() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let mut expected = Expected {
        live: HashMap::new(),
        dead: Vec::new(),
        logs: Vec::new(),
        chains: Vec::new(),
    };
    let mut seed = 0u64;
    let mut payload = || {
        seed += 1;
        random_payload(seed, 300)
    };

    // A live context whose turns carry keys and labels (extras slots).
    let keeper = new_context(&engine);
    let mut keeper_turns = Vec::new();
    for step in 0..40 {
        let bytes = payload();
        let turn = append_keyed(&engine, keeper, &bytes, &format!("k{step}"));
        expected.live.insert(turn, bytes);
        keeper_turns.push(turn);
    }
    // Contexts that finish and are deleted, interleaved with the live ones' appends; one of
    // their turns patched (an overlay record naming a turn that will be compacted away).
    let mut doomed = Vec::new();
    // Turns 0..=10 of doomed context 5: a live turn links to the last, so they stay live.
    let mut linked_history = Vec::new();
    for round in 0..30 {
        let context = new_context(&engine);
        for step in 0..20 {
            let bytes = payload();
            let turn = append_keyed(&engine, context, &bytes, &format!("d{step}"));
            if round == 5 && step <= 10 {
                expected.live.insert(turn, bytes);
                linked_history.push(turn);
            } else {
                expected.dead.push(turn);
            }
            if round == 3 && step == 5 {
                block_on(engine.patch_turn(turn, Bytes::from(payload()))).unwrap();
            }
        }
        doomed.push(context);
    }
    let linking = {
        let bytes = payload();
        let request = AppendRequest {
            context_id: keeper,
            expected_head: None,
            type_tag: 3,
            codec: 0,
            payload: AppendPayload::Bytes(Bytes::copy_from_slice(&bytes)),
            options: TurnOptions {
                links: vec![*linked_history.last().unwrap()],
                ..TurnOptions::default()
            },
        };
        let turn = block_on(engine.append(request)).unwrap().turn.turn_id;
        expected.live.insert(turn, bytes);
        turn
    };
    keeper_turns.push(linking);
    // A fork of a context that is then deleted: the source's turns below the fork point stay
    // (ancestors of live turns), those after it go.
    let fork_source = new_context(&engine);
    let mut source_turns = Vec::new();
    for _ in 0..20 {
        let bytes = payload();
        source_turns.push((
            append(&engine, fork_source, &bytes, None)
                .unwrap()
                .turn
                .turn_id,
            bytes,
        ));
    }
    let fork = block_on(engine.fork(source_turns[9].0)).unwrap().context_id;
    let mut fork_chain: Vec<TurnId> = source_turns[..10].iter().map(|(turn, _)| *turn).collect();
    for (turn, bytes) in &source_turns[..10] {
        expected.live.insert(*turn, bytes.clone());
    }
    for (turn, _) in &source_turns[10..] {
        expected.dead.push(*turn);
    }
    for _ in 0..5 {
        let bytes = payload();
        let turn = append(&engine, fork, &bytes, None).unwrap().turn.turn_id;
        expected.live.insert(turn, bytes);
        fork_chain.push(turn);
    }
    // A clone of a context that is then deleted: the clone owns the source's turns.
    let clone_source = new_context(&engine);
    let mut clone_log = Vec::new();
    for _ in 0..10 {
        let bytes = payload();
        let turn = append(&engine, clone_source, &bytes, None)
            .unwrap()
            .turn
            .turn_id;
        expected.live.insert(turn, bytes);
        clone_log.push(turn);
    }
    let clone = block_on(engine.clone_context(ContextRef::Id(clone_source), "the-clone".into()))
        .unwrap()
        .head
        .context_id;
    // A pruned context: its turns below the floor are collected but it owns them, so their
    // records stay (the context chain and new turns' skip pointers pass through them).
    let pruned = new_context(&engine);
    let mut pruned_turns = Vec::new();
    for _ in 0..40 {
        let bytes = payload();
        pruned_turns.push((
            append(&engine, pruned, &bytes, None).unwrap().turn.turn_id,
            bytes,
        ));
    }
    block_on(engine.prune_context(&ContextRef::Id(pruned), 5)).unwrap();
    for (turn, bytes) in &pruned_turns[35..] {
        expected.live.insert(*turn, bytes.clone());
    }

    for context in doomed.iter().chain([&fork_source, &clone_source]) {
        block_on(engine.delete_context(&ContextRef::Id(*context))).unwrap();
    }
    let log_path = dir.path().join("turns.log");
    let log_allocated_before = allocated(&log_path);
    let report = engine.gc().unwrap();
    assert!(report.log_bytes_reclaimed > 0, "{report:?}");
    assert!(dir.path().join("turns.base").exists());
    // 600 doomed turns with extras and 10 of the fork's source went; the log's blocks with
    // them (ext4, XFS, tmpfs and btrfs punch holes).
    assert!(
        allocated(&log_path) + allocated(&dir.path().join("turns.base")) < log_allocated_before,
        "turns.log {} B allocated before, {} B + base {} B after",
        log_allocated_before,
        allocated(&log_path),
        allocated(&dir.path().join("turns.base"))
    );
    expected.logs.push((keeper, keeper_turns.clone()));
    expected.logs.push((clone, clone_log.clone()));
    expected.chains.push((fork, fork_chain.clone()));
    check(&engine, &expected);
    // A fork made after the compaction of a live turn of a deleted context: its turn log walks
    // that context's turns before the fork point, which stayed.
    let late_fork = block_on(engine.fork(*linked_history.last().unwrap()))
        .unwrap()
        .context_id;
    expected.logs.push((late_fork, linked_history.clone()));
    expected.chains.push((late_fork, linked_history.clone()));
    check(&engine, &expected);
    let by_key = engine
        .turn_by_key(&ContextRef::Id(keeper), b"k7")
        .unwrap()
        .unwrap();
    assert_eq!(by_key.turn.turn_id, keeper_turns[7]);
    // A purge finds the turns naming a blob in the compacted base too.
    let purged_turn = keeper_turns[2];
    let purged_hash = block_on(engine.turn(purged_turn)).unwrap().payload_hash;
    let purged = block_on(engine.purge_blob(purged_hash)).unwrap();
    assert_eq!(purged.turns_redacted, 1);
    assert!(block_on(engine.turn(purged_turn)).unwrap().redacted);
    expected.live.remove(&purged_turn);
    let turns_before = engine.stats().turns;

    // Appends after the compaction: to the fork (its skip pointers reach into the source's
    // kept turns), to the pruned context (through its collected, kept records), the keeper.
    for context in [fork, pruned, keeper] {
        let bytes = payload();
        let turn = append(&engine, context, &bytes, None).unwrap().turn.turn_id;
        expected.live.insert(turn, bytes);
        if context == fork {
            fork_chain.push(turn);
        }
        if context == keeper {
            keeper_turns.push(turn);
        }
    }
    expected.logs[0].1 = keeper_turns.clone();
    expected.chains[0].1 = fork_chain.clone();
    check(&engine, &expected);

    // A second round: the fork goes too, and with it the source's history it kept.
    block_on(engine.delete_context(&ContextRef::Id(fork))).unwrap();
    for turn in &fork_chain {
        expected.live.remove(turn);
        expected.dead.push(*turn);
    }
    expected.chains.retain(|(context, _)| *context != fork);
    let report = engine.gc().unwrap();
    assert!(report.log_bytes_reclaimed > 0, "{report:?}");
    check(&engine, &expected);
    engine.shutdown();

    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert!(
        report
            .to_string()
            .contains("turns.log compacted through record"),
        "{report}"
    );
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    check(&engine, &expected);
    assert_eq!(
        engine.stats().turns,
        turns_before + 3,
        "turn totals survive the compaction"
    );
    // TurnIDs are never reused: a new turn comes after everything ever written.
    let highest = expected
        .live
        .keys()
        .chain(&expected.dead)
        .max()
        .copied()
        .unwrap();
    let bytes = payload();
    let turn = append(&engine, keeper, &bytes, None).unwrap().turn.turn_id;
    assert!(turn > highest, "{turn} after {highest}");
    expected.live.insert(turn, bytes);
    keeper_turns.push(turn);
    expected.logs[0].1 = keeper_turns.clone();

    // A backup of a compacted store is a store of its own.
    let backups = tempfile::tempdir().unwrap();
    let target = backups.path().join("copy");
    engine.backup(&target).unwrap();
    engine.shutdown();
    let report = verify(&target).unwrap();
    assert!(report.is_ok(), "{report}");
    let copy = Engine::open(gc_config(&target)).unwrap();
    check(&copy, &expected);
}

/// A crash between the steps of a log compaction: an unfinished `.compact` file is deleted at
/// the next open; a base renamed in while the log still holds its slots (the punch did not
/// happen) is loaded and the log punched again. Made by the files each step leaves.
#[test]
fn a_log_compaction_interrupted_between_its_steps_reopens_whole() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let live = new_context(&engine);
    let mut turns = Vec::new();
    for round in 0..10u64 {
        let doomed = filled_context(&engine, round, 10, 200);
        let bytes = random_payload(10_000 + round, 200);
        turns.push((
            append(&engine, live, &bytes, None).unwrap().turn.turn_id,
            bytes,
        ));
        block_on(engine.delete_context(&ContextRef::Id(doomed))).unwrap();
    }
    let log = dir.path().join("turns.log");
    let before = std::fs::read(&log).unwrap();
    engine.gc().unwrap();
    engine.shutdown();
    let base = std::fs::read(dir.path().join("turns.base")).unwrap();
    let mut through = [0u8; 8];
    through.copy_from_slice(&base[16..24]);
    let through_bytes = u64::from_le_bytes(through) as usize * 128;
    let after = std::fs::read(&log).unwrap();
    assert!(
        after[..through_bytes - through_bytes % 4096]
            .iter()
            .all(|&byte| byte == 0)
    );

    let reopen_check = || {
        let engine = Engine::open(gc_config(dir.path())).unwrap();
        for (turn, bytes) in &turns {
            let stored = block_on(engine.turn(*turn)).unwrap();
            assert_eq!(
                &block_on(engine.blob(stored.payload_hash)).unwrap()[..],
                &bytes[..]
            );
        }
        let turn = append(&engine, live, b"after", None).unwrap().turn.turn_id;
        assert!(turn.0 as usize > through_bytes / 128);
        engine.shutdown();
        assert!(!dir.path().join("turns.base.compact").exists());
        let report = verify(dir.path()).unwrap();
        assert!(report.is_ok(), "{report}");
    };
    reopen_check();

    // A crash before the rename: a garbled leftover next to the base.
    std::fs::write(dir.path().join("turns.base.compact"), b"half a base").unwrap();
    reopen_check();

    // Renamed but not punched: the log's prefix as it was before the round, the base in place,
    // and a new leftover from a later round that never finished.
    let mut unpunched = std::fs::read(&log).unwrap();
    unpunched[..through_bytes].copy_from_slice(&before[..through_bytes]);
    std::fs::write(&log, &unpunched).unwrap();
    std::fs::write(dir.path().join("turns.base.compact"), &base).unwrap();
    reopen_check();
    let punched = std::fs::read(&log).unwrap();
    assert!(
        punched[..through_bytes - through_bytes % 4096]
            .iter()
            .all(|&byte| byte == 0)
    );
}

/// A compaction that covers the whole log (a round that found nothing new to collect, so
/// wrote no record after its watermark), then a backup and appends: the copy's `turns.log`
/// holds no record at all after its base, and still opens, verifies and takes appends.
#[test]
fn a_base_covering_the_whole_log_backs_up_and_takes_appends() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = gc_config(dir.path());
    config.gc_log_dead_bytes_min = u64::MAX;
    let engine = Engine::open(config.clone()).unwrap();
    let live = new_context(&engine);
    let kept = append(&engine, live, b"kept", None).unwrap().turn.turn_id;
    for round in 0..5u64 {
        let doomed = filled_context(&engine, round, 10, 200);
        block_on(engine.delete_context(&ContextRef::Id(doomed))).unwrap();
    }
    // Collected, but the log is left alone (threshold).
    assert!(engine.gc().unwrap().turns_dead > 0);
    assert!(!dir.path().join("turns.base").exists());
    engine.shutdown();

    config.gc_log_dead_bytes_min = 0;
    let engine = Engine::open(config).unwrap();
    let report = engine.gc().unwrap();
    assert_eq!(report.turns_dead, 0);
    assert!(report.log_bytes_reclaimed > 0, "{report:?}");
    let backups = tempfile::tempdir().unwrap();
    let target = backups.path().join("copy");
    engine.backup(&target).unwrap();
    let after = append(&engine, live, b"after", None).unwrap().turn.turn_id;
    engine.shutdown();
    for store in [dir.path(), target.as_path()] {
        let report = verify(store).unwrap();
        assert!(report.is_ok(), "{report}");
        let engine = Engine::open(gc_config(store)).unwrap();
        assert_eq!(
            &block_on(engine.blob(block_on(engine.turn(kept)).unwrap().payload_hash)).unwrap()[..],
            b"kept"
        );
        let next = append(&engine, live, b"next", None).unwrap().turn.turn_id;
        assert!(next > kept && (store == target.as_path() || next > after));
        engine.shutdown();
        let report = verify(store).unwrap();
        assert!(report.is_ok(), "{report}");
    }
}

/// A log compaction held below the replicator's limit (`Engine::hold_log_after`: what the
/// replica holds as slots) keeps every turn above the limit in `turns.log`, dead ones too, so
/// what those name must stay as well (issue 46, found by the replica's randomized campaign):
/// a dead turn above the limit kept its record while its dead parent left for nothing, and the
/// store no longer opened ("turn N was compacted away, yet a later record names it").
#[test]
fn a_compaction_held_below_a_limit_keeps_what_the_turns_above_it_name() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let kept = new_context(&engine);
    let doomed = new_context(&engine);
    for i in 0..4u64 {
        append(&engine, kept, &random_payload(i, 300), None).unwrap();
    }
    let parent = append(&engine, doomed, &random_payload(10, 300), None)
        .unwrap()
        .turn
        .turn_id;
    engine.hold_log_after(engine.durable_records());
    let child = append(&engine, doomed, &random_payload(11, 300), None)
        .unwrap()
        .turn
        .turn_id;
    block_on(engine.delete_context(&ContextRef::Id(doomed))).unwrap();
    let report = engine.gc().unwrap();
    assert!(report.turns_dead >= 2, "{report:?}");
    assert!(child.0 > parent.0);
    engine.shutdown();

    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    assert_eq!(turn_log(&engine, kept).len(), 4);
    engine.shutdown();
}
