//! The ack gate (decision 0031 §6, `engine/src/status.rs` `AckGate`) through the `Engine` API
//! the lease thread, the shipper and the server call: a primary whose lease deadline or
//! shipping deadline passed on the boot clock refuses every write with NotPrimary and writes
//! nothing (heads, log records, blobs and stats unchanged), reports it (ROLE's
//! `ack_open_ms`, `accepts_writes`, stats' `read_only`, the server's last check); a later
//! deadline takes writes again; a gate closed for good stays closed; without a lease nothing
//! changes; a standby's ingest goes on whatever its gate says. (A batch in flight when the
//! gate closes is answered Unconfirmed and kept: `engine/src/faults.rs`, where an fdatasync
//! can be held open.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::{append, block_on, config, new_context, open};
use ctxstore_engine::clock::boot_now_ns;
use ctxstore_engine::store_dir::StoreDir;
use ctxstore_engine::{ContextId, ContextRef, Engine, EngineConfig, ErrorKind, TurnId};
use ctxstore_engine::{format::turn_log::record_offset, verify};

const HOUR_NS: u64 = 3_600_000_000_000;

/// What a refused write must leave as it was.
#[derive(Debug, PartialEq)]
struct Footprint {
    head: TurnId,
    next_ids: ctxstore_engine::id_floors::IdFloors,
    turns: u64,
    blobs: u64,
    log_bytes: Vec<u8>,
}

fn footprint(engine: &Engine, dir: &std::path::Path, context: ContextId) -> Footprint {
    let next_ids = engine.id_floors();
    let log = std::fs::read(StoreDir::new(dir).turns_log_path()).unwrap();
    let end = record_offset(next_ids.records) as usize;
    Footprint {
        head: block_on(engine.head(context)).unwrap().head_turn_id,
        next_ids,
        turns: engine.stats().turns,
        blobs: engine.stats().blobs,
        log_bytes: log[..end.min(log.len())].to_vec(),
    }
}

/// Every kind of write the gate refuses at admission, each with NotPrimary naming `why`.
fn every_write_is_refused(engine: &Engine, context: ContextId, why: &str) {
    let refusals = [
        append(engine, context, b"refused", None).map(drop),
        block_on(engine.create_context()).map(drop),
        block_on(engine.update_tags(
            &ContextRef::Id(context),
            vec![("k".into(), "v".into())],
            vec![],
            None,
        ))
        .map(drop),
        block_on(engine.kv_put(
            &ContextRef::Id(context),
            vec![(b"key".to_vec(), Bytes::from_static(b"value"))],
            false,
        )),
        block_on(engine.put_blob(Bytes::from_static(b"a lone blob"))).map(drop),
        block_on(engine.delete_context(&ContextRef::Id(context))).map(drop),
    ];
    for (index, refusal) in refusals.into_iter().enumerate() {
        let error = refusal.expect_err("a closed gate refuses the write");
        assert_eq!(
            error.kind(),
            ErrorKind::NotPrimary,
            "write {index}: {error}"
        );
        assert!(error.to_string().contains(why), "write {index}: {error}");
    }
}

fn closed(engine: &Engine) {
    assert!(!engine.gate_open());
    assert!(!engine.accepts_writes());
    assert!(engine.stats().read_only);
    assert_eq!(engine.ack_open_ms_left(), Some(0));
    let last_check = engine.check_acks_open().unwrap_err();
    assert_eq!(last_check.kind(), ErrorKind::Unconfirmed, "{last_check}");
}

fn open_for_an_hour(engine: &Engine) {
    assert!(engine.gate_open());
    assert!(engine.accepts_writes());
    assert!(!engine.stats().read_only);
    assert!(engine.check_acks_open().is_ok());
    let left = engine.ack_open_ms_left().expect("a deadline");
    assert!((3_000_000..=3_600_000).contains(&left), "{left} ms");
}

#[test]
fn without_a_lease_the_gate_is_open_and_reports_no_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    assert!(engine.gate_open());
    assert_eq!(engine.ack_open_ms_left(), None);
    assert!(engine.check_acks_open().is_ok());
    let context = new_context(&engine);
    append(&engine, context, b"as before the lease", None).unwrap();
    // A lifted deadline is no lease again.
    engine.set_lease_until(0);
    assert!(!engine.gate_open());
    engine.set_lease_until(u64::MAX);
    assert!(engine.gate_open());
    assert_eq!(engine.ack_open_ms_left(), None);
    append(&engine, context, b"open again", None).unwrap();
    engine.shutdown();
}

#[test]
fn a_lapsed_lease_refuses_every_write_and_writes_nothing_until_a_later_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let context = new_context(&engine);
    engine.set_lease_until(boot_now_ns() + HOUR_NS);
    engine.set_shipped_until(boot_now_ns() + HOUR_NS);
    open_for_an_hour(&engine);
    let first = append(&engine, context, b"acknowledged", None).unwrap();

    // The lease thread's last renewal was sent long enough ago: its deadline has passed.
    engine.set_lease_until(boot_now_ns());
    closed(&engine);
    let before = footprint(&engine, dir.path(), context);
    every_write_is_refused(&engine, context, "lease");
    assert_eq!(footprint(&engine, dir.path(), context), before);
    // Reads go on.
    assert_eq!(
        block_on(engine.turn(first.turn.turn_id)).unwrap().turn_id,
        first.turn.turn_id
    );

    // A renewal: the next deadline an hour ahead takes writes again.
    engine.set_lease_until(boot_now_ns() + HOUR_NS);
    open_for_an_hour(&engine);
    let second = append(&engine, context, b"after the renewal", None).unwrap();
    assert_eq!(second.turn.parent_turn_id, first.turn.turn_id);
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}

#[test]
fn a_shipper_behind_its_deadline_closes_the_gate_until_a_later_cut_ships() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let context = new_context(&engine);
    engine.set_lease_until(boot_now_ns() + HOUR_NS);
    // The newest cut shipped whole is too old: its deadline is past, the lease renews.
    engine.set_shipped_until(boot_now_ns());
    closed(&engine);
    let before = footprint(&engine, dir.path(), context);
    every_write_is_refused(&engine, context, "could not ship");
    assert_eq!(footprint(&engine, dir.path(), context), before);
    // Forward only: an older cut's deadline changes nothing.
    engine.set_shipped_until(1);
    closed(&engine);
    // The next cut ships.
    engine.set_shipped_until(boot_now_ns() + HOUR_NS);
    open_for_an_hour(&engine);
    append(&engine, context, b"after the cut shipped", None).unwrap();
    // The earlier of both deadlines counts.
    engine.set_lease_until(boot_now_ns() + HOUR_NS / 2);
    let left = engine.ack_open_ms_left().unwrap();
    assert!((1_500_000..=1_800_000).contains(&left), "{left} ms");
    engine.shutdown();
}

#[test]
fn a_gate_closed_for_good_stays_closed_whatever_the_deadlines() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let context = new_context(&engine);
    engine.close_gate("this server is stopping; its lease is being released".into());
    closed(&engine);
    engine.set_lease_until(boot_now_ns() + HOUR_NS);
    engine.set_shipped_until(boot_now_ns() + HOUR_NS);
    engine.set_lease_until(u64::MAX);
    closed(&engine);
    let before = footprint(&engine, dir.path(), context);
    every_write_is_refused(&engine, context, "stopping");
    assert_eq!(footprint(&engine, dir.path(), context), before);
    engine.shutdown();
    // A restart starts without a lease.
    let engine = open(dir.path());
    assert!(engine.gate_open());
    append(&engine, context, b"after a restart", None).unwrap();
    engine.shutdown();
}

#[test]
fn a_fenced_primary_reports_its_acknowledgements_closed() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine.set_lease_until(boot_now_ns() + HOUR_NS);
    engine.fence("epoch 2 holds the prefix now".into());
    closed(&engine);
    let last_check = engine.check_acks_open().unwrap_err();
    assert!(last_check.to_string().contains("epoch 2"), "{last_check}");
    engine.shutdown();
}

#[test]
fn a_standbys_ingest_goes_on_whatever_its_gate_says() {
    let primary_dir = tempfile::tempdir().unwrap();
    let primary = open(primary_dir.path());
    let contexts: Vec<ContextId> = (0..3).map(|_| new_context(&primary)).collect();
    block_on(primary.update_tags(
        &ContextRef::Id(contexts[1]),
        vec![("stage".into(), "shipped".into())],
        vec![],
        None,
    ))
    .unwrap();
    let next = primary.id_floors().records;
    primary.shutdown();

    let standby_dir = tempfile::tempdir().unwrap();
    let standby = Engine::open(EngineConfig {
        follower: true,
        ..config(standby_dir.path())
    })
    .unwrap();
    // Whatever a lease thread might have left on it: closed by both deadlines, for good too.
    standby.set_lease_until(0);
    standby.set_shipped_until(1);
    standby.close_gate("closed on a standby".into());
    let ingested =
        block_on(standby.ingest_log(1, common::log_slots(primary_dir.path(), next))).unwrap();
    assert_eq!(ingested.log_records, next - 1);
    for context in &contexts {
        block_on(standby.head(*context)).unwrap();
    }
    let tagged = standby.context(&ContextRef::Id(contexts[1])).unwrap();
    assert_eq!(
        tagged.tags.get("stage").map(String::as_str),
        Some("shipped")
    );
    // Its own writes are refused as a standby's.
    let refused = append(&standby, contexts[0], b"to the standby", None).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::NotPrimary, "{refused}");
    standby.shutdown();
}
