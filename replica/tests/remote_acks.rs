//! Remote acknowledgements at the replicator (decision 0031 §3, build plan step 3), on a
//! `file://` replica and on SeaweedFS (`CTXSTORE_S3_TEST_ENDPOINT`, as `tests/s3.rs`):
//! - a ticket is confirmed only once a segment holding the write is stored: with the object
//!   store's PUTs held, it waits (and the replica holds no such segment), and once they go on
//!   it is confirmed and a restore of the replica holds the write;
//! - waiters share cuts: 64 writes waiting behind one held PUT ship in at most three segments,
//!   and a waiter wakes the shipper at once (a long interval does not delay it);
//! - a fenced primary confirms nothing more: its waiters, now and later, are told `Fenced`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Target, append, block_on, engine_config, faulty_replicator, restore_point};
use ctxstore_engine::Engine;
use ctxstore_replica::faulty::Fault;
use ctxstore_replica::layout::Key;
use ctxstore_replica::restore::RestorePoint;
use ctxstore_replica::{AckOutcome, RemoteAcks, Replicator, ShipConfig, catalog};

/// Ships every 10 minutes: only a waiter's wake makes a cut.
fn ship_config(target: &Target) -> ShipConfig {
    let mut config = target.ship_config();
    config.interval = Duration::from_secs(600);
    config
}

fn wait_until(what: &str, mut holds: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !holds() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Segments of generation 1 in the replica.
fn segments(target: &Target) -> u64 {
    let remote = ctxstore_replica::target::open(&target.url, &target.s3).unwrap();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(catalog::segments_after(&remote, 1, 0))
        .unwrap()
        .iter()
        .filter(|listed| matches!(listed.key, Key::Segment { .. }))
        .count() as u64
}

/// The replica's latest point restored into `dir`: its records.
fn restored_records(target: &Target, dir: &Path) -> u64 {
    let _ = std::fs::remove_dir_all(dir);
    restore_point(target, dir, RestorePoint::Latest).unwrap();
    let engine = Engine::open(engine_config(dir)).unwrap();
    let records = engine.follow_position().unwrap().log_records;
    engine.shutdown();
    records
}

#[test]
fn a_ticket_is_confirmed_only_once_its_segment_is_stored() {
    let root = tempfile::tempdir().unwrap();
    for (index, target) in Target::all(root.path(), "remote-acks").iter().enumerate() {
        let dir = root.path().join(format!("run{index}"));
        confirmed_once_stored(target, &dir);
    }
}

fn confirmed_once_stored(target: &Target, dir: &Path) {
    let primary = Engine::open(engine_config(&dir.join("primary"))).unwrap();
    let config = ship_config(target);
    let acks: Arc<RemoteAcks> = config.remote_acks.clone();
    let (replicator, faults) = faulty_replicator(&primary, &target.url, &target.s3, config);
    let context = block_on(primary.create_context()).unwrap().context_id;
    append(&primary, context, b"first");
    let first = acks.ticket();
    wait_until("the first write is confirmed", || {
        acks.outcome(first) == AckOutcome::Shipped
    });
    let shipped = segments(target);
    assert_eq!(
        restored_records(target, &dir.join("restored")),
        primary.follow_position().unwrap().log_records,
        "a confirmed write is in the replica"
    );

    faults.set(Fault::HoldPutsAfter(0));
    append(&primary, context, b"second");
    let second = acks.ticket();
    wait_until("the segment's PUT is held", || {
        faults.held.load(Ordering::Relaxed) >= 1
    });
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(acks.outcome(second), AckOutcome::Waiting);
    assert_eq!(segments(target), shipped, "nothing stored yet");

    faults.set(Fault::None);
    wait_until("the second write is confirmed", || {
        acks.outcome(second) == AckOutcome::Shipped
    });
    assert_eq!(
        restored_records(target, &dir.join("restored")),
        primary.follow_position().unwrap().log_records
    );
    replicator.stop();
    primary.shutdown();
}

#[test]
fn sixty_four_waiters_behind_a_held_put_share_at_most_three_segments() {
    let root = tempfile::tempdir().unwrap();
    for (index, target) in Target::all(root.path(), "remote-acks-share")
        .iter()
        .enumerate()
    {
        let dir = root.path().join(format!("run{index}"));
        let primary = Engine::open(engine_config(&dir.join("primary"))).unwrap();
        let config = ship_config(target);
        let acks = config.remote_acks.clone();
        let wakes = Arc::new(AtomicU64::new(0));
        let counted = wakes.clone();
        acks.on_shipped(move || {
            counted.fetch_add(1, Ordering::Relaxed);
        });
        let (replicator, faults) = faulty_replicator(&primary, &target.url, &target.s3, config);
        let context = block_on(primary.create_context()).unwrap().context_id;
        let created = acks.ticket();
        wait_until("the context is confirmed", || {
            acks.outcome(created) == AckOutcome::Shipped
        });
        let before = segments(target);
        wakes.store(0, Ordering::Relaxed);

        faults.set(Fault::HoldPutsAfter(0));
        append(&primary, context, b"opens the held cut");
        let mut tickets = vec![acks.ticket()];
        wait_until("a PUT is held", || faults.held.load(Ordering::Relaxed) >= 1);
        for i in 0..63u64 {
            append(&primary, context, format!("waiter {i}").as_bytes());
            tickets.push(acks.ticket());
        }
        faults.set(Fault::None);
        wait_until("every waiter is confirmed", || {
            tickets
                .iter()
                .all(|ticket| acks.outcome(*ticket) == AckOutcome::Shipped)
        });
        let shipped = segments(target) - before;
        assert!(
            (1..=3).contains(&shipped),
            "64 waiters took {shipped} segments"
        );
        assert!(
            wakes.load(Ordering::Relaxed) <= 4,
            "a wake per cut, not per waiter"
        );
        assert_eq!(
            restored_records(target, &dir.join("restored")),
            primary.follow_position().unwrap().log_records,
            "every confirmed write is in the replica"
        );
        replicator.stop();
        primary.shutdown();
    }
}

#[test]
fn a_fenced_primary_confirms_nothing_more() {
    let root = tempfile::tempdir().unwrap();
    let target = Target::file(root.path());
    let primary = Engine::open(engine_config(&root.path().join("primary"))).unwrap();
    let config = ship_config(&target);
    let acks = config.remote_acks.clone();
    let (first, faults) = faulty_replicator(&primary, &target.url, &target.s3, config);
    let context = block_on(primary.create_context()).unwrap().context_id;
    faults.set(Fault::HoldPutsAfter(0));
    append(&primary, context, b"held, then fenced");
    let ticket = acks.ticket();
    wait_until("the PUT is held", || {
        faults.held.load(Ordering::Relaxed) >= 1
    });
    // Another primary takes the prefix (the same store, as a copy on another host would).
    let second = Replicator::start(primary.clone(), ship_config(&target)).unwrap();
    wait_until("the second primary shipped", || {
        second.stats().snapshot(0).seq >= 1
    });
    faults.set(Fault::None);
    wait_until("the waiter is told", || {
        acks.outcome(ticket) != AckOutcome::Waiting
    });
    assert_eq!(acks.outcome(ticket), AckOutcome::Fenced);
    assert_eq!(acks.outcome(acks.ticket()), AckOutcome::Fenced);
    second.stop();
    first.stop();
    primary.shutdown();
}
