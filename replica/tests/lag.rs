//! Shipping goes on through a garbage collection, and the lag figures say when it does not
//! (issue 46, items 5 and 6). A collection round held the maintenance lock for its whole run,
//! so the shipper's cut waited seconds and what was acknowledged meanwhile was at risk; and the
//! lag figures were set only at a cut, with `lag_ms` 0 whenever `lag_bytes` was, so a stalled
//! shipper (a collection, a paused or unreachable object store) looked healthy. The collection
//! test runs on `file://` and on SeaweedFS when `.ci/run` names it; the fault tests put the
//! fault-injecting store in front of a directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    Target, append, block_on, engine_config, noise, restore_point, shipped_within, wait_shipped,
};
use ctxstore_engine::{ContextRef, Engine, ErrorKind, TurnId};
use ctxstore_replica::Replicator;
use ctxstore_replica::faulty::{Fault, FaultyStore};
use ctxstore_replica::remote::Remote;
use ctxstore_replica::restore::RestorePoint;
use ctxstore_replica::stats::{ReplicationSnapshot, ReplicationState, now_unix_ms};

fn figures(replicator: &Replicator) -> ReplicationSnapshot {
    replicator.stats().snapshot(now_unix_ms())
}

#[test]
fn shipping_goes_on_through_a_collection_on_a_directory() {
    let root = tempfile::tempdir().unwrap();
    shipping_beside_a_collection(root.path(), &Target::file(root.path()));
}

#[test]
fn shipping_goes_on_through_a_collection_on_seaweedfs() {
    let Some(replica) = Target::seaweedfs("lag-gc") else {
        return;
    };
    shipping_beside_a_collection(tempfile::tempdir().unwrap().path(), &replica);
}

fn shipping_beside_a_collection(root: &Path, replica: &Target) {
    let data = root.join("data");
    let mut config = engine_config(&data);
    // Half of every pack dies below; the round copies the other half (~1 MiB) at 256 KiB/s:
    // seconds, in which shipping either goes on or visibly waits.
    config.gc_bytes_per_s_max = 256 * 1024;
    let engine = Engine::open(config.clone()).unwrap();
    let replicator = Replicator::start(engine.clone(), replica.ship_config()).unwrap();
    let kept = block_on(engine.create_context()).unwrap().context_id;
    let doomed = block_on(engine.create_context()).unwrap().context_id;
    let mut turns: Vec<TurnId> = Vec::new();
    for i in 0..128u64 {
        turns.push(append(&engine, kept, &noise(i, 8 * 1024)));
        append(&engine, doomed, &noise(1_000 + i, 8 * 1024));
    }
    block_on(engine.delete_context(&ContextRef::Id(doomed))).unwrap();
    wait_shipped(&replicator);

    let collector = engine.clone();
    let round = std::thread::spawn(move || collector.gc().unwrap());
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !round.is_finished(),
        "the collection ended too soon to test"
    );
    let turn = append(&engine, kept, b"acknowledged during a collection");
    turns.push(turn);
    let shipped_beside_the_round =
        shipped_within(&replicator, Duration::from_secs(30)) && !round.is_finished();
    let report = round.join().unwrap();
    assert!(
        report.packs_compacted > 0,
        "the round compacted nothing: {report:?}"
    );
    assert!(
        shipped_beside_the_round,
        "turn {turn} was not shipped while the collection ran: shipping waited for it \
         ({report:?})"
    );
    // What the round rewrote ships too, and the latest point is the primary's state.
    wait_shipped(&replicator);
    replicator.stop();
    engine.shutdown();
    let restored = root.join("restored");
    restore_point(replica, &restored, RestorePoint::Latest).unwrap();
    let engine = Engine::open(engine_config(&restored)).unwrap();
    for (i, turn_id) in turns.iter().enumerate() {
        let turn = block_on(engine.turn(*turn_id)).unwrap();
        let payload = block_on(engine.blob(turn.payload_hash)).unwrap();
        let expected = if i < 128 {
            noise(i as u64, 8 * 1024)
        } else {
            b"acknowledged during a collection".to_vec()
        };
        assert_eq!(&payload[..], &expected[..], "turn {turn_id}");
    }
    let gone = engine.context(&ContextRef::Id(doomed));
    assert_eq!(gone.unwrap_err().kind(), ErrorKind::NotFound);
    engine.shutdown();
}

/// A replicator shipping `engine` to a directory through the fault-injecting store.
fn faulty_replicator(
    engine: &Engine,
    root: &Path,
    start_anyway: bool,
) -> (Replicator, Arc<ctxstore_replica::faulty::Faults>) {
    let target = Target::file(root);
    std::fs::create_dir_all(root.join("replica")).unwrap();
    let inner = ctxstore_replica::target::open(&target.url, &target.s3).unwrap();
    let faulty = FaultyStore::new(inner.store.clone());
    let faults = faulty.faults.clone();
    if start_anyway {
        faults.set(Fault::Unreachable);
    }
    let remote = Remote::new(Arc::new(faulty), "", &target.url);
    let mut config = target.ship_config();
    config.start_anyway = start_anyway;
    let replicator = Replicator::start_with(engine.clone(), config, remote).unwrap();
    (replicator, faults)
}

/// Waits (20 s at most) until `check` holds of the figures; the last figures either way.
fn figures_until(
    replicator: &Replicator,
    check: impl Fn(&ReplicationSnapshot) -> bool,
) -> ReplicationSnapshot {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = figures(replicator);
        if check(&now) || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_lag_grows_while_the_object_store_is_gone_and_falls_to_zero_once_it_is_back() {
    let root = tempfile::tempdir().unwrap();
    let engine = Engine::open(engine_config(&root.path().join("data"))).unwrap();
    let (replicator, faults) = faulty_replicator(&engine, root.path(), false);
    let context = block_on(engine.create_context()).unwrap().context_id;
    append(&engine, context, b"shipped");
    wait_shipped(&replicator);
    let healthy = figures(&replicator);
    assert_eq!((healthy.lag_ms, healthy.lag_bytes), (0, 0), "{healthy:?}");

    // Slow: a paused object store (each request waits, as one under SIGSTOP would).
    for fault in [Fault::Unreachable, Fault::Slow(Duration::from_millis(1500))] {
        faults.set(fault);
        // Let a cycle start against the fault (a slow one hangs in its first request).
        std::thread::sleep(Duration::from_millis(100));
        append(
            &engine,
            context,
            b"acknowledged while the object store is away",
        );
        // At once, before any cut: the write is seen, and its age grows.
        let first = figures(&replicator);
        assert!(
            first.lag_bytes > 0,
            "{fault:?}: an unshipped write shows no lag bytes: {first:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
        let later = figures(&replicator);
        assert!(
            later.lag_ms >= 300 && later.lag_ms > first.lag_ms,
            "{fault:?}: the lag does not grow while nothing ships: {first:?} then {later:?}"
        );
        faults.set(Fault::None);
        let back = figures_until(&replicator, |now| now.lag_ms == 0 && now.lag_bytes == 0);
        assert_eq!(
            (back.lag_ms, back.lag_bytes, back.state),
            (0, 0, ReplicationState::Shipping),
            "{fault:?}: the lag stays once the object store is back: {back:?}"
        );
    }
    replicator.stop();
    engine.shutdown();
}

#[test]
fn a_primary_started_anyway_without_its_object_store_shows_its_writes_as_lag() {
    let root = tempfile::tempdir().unwrap();
    let engine = Engine::open(engine_config(&root.path().join("data"))).unwrap();
    let (replicator, faults) = faulty_replicator(&engine, root.path(), true);
    let context = block_on(engine.create_context()).unwrap().context_id;
    append(&engine, context, b"acknowledged, never shipped");
    let failing = figures_until(&replicator, |now| now.lag_ms >= 200);
    assert_eq!(failing.state, ReplicationState::Failing, "{failing:?}");
    assert!(
        failing.lag_ms >= 200 && failing.lag_bytes > 0,
        "a primary that has shipped nothing says it lags nothing: {failing:?}"
    );
    faults.set(Fault::None);
    let back = figures_until(&replicator, |now| {
        now.state == ReplicationState::Shipping && now.lag_bytes == 0
    });
    assert_eq!(
        (back.state, back.lag_ms, back.lag_bytes),
        (ReplicationState::Shipping, 0, 0),
        "{back:?}"
    );
    replicator.stop();
    engine.shutdown();
}
