//! A primary whose store failed steps down (decision 0031 §7, "a primary whose disk failed"):
//! a failed fdatasync makes its store read-only until a restart, so it can never acknowledge
//! again; if its lease thread went on renewing, no standby could ever take over, and the
//! prefix would take no writes at all. The primary, holding a lease, with an `--auto-promote`
//! standby following it on the same replica: the next fdatasync of its `turns.log` fails
//! (the engine's fault injection, the one real fault a test can cause in a file system that
//! works). Then its gate is closed for good, its lease is released, the standby takes over at
//! once, holds every turn the primary acknowledged, and takes writes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use ctxstore_engine::faults::{Fault, FaultOp, inject};
use ctxstore_engine::{Engine, ErrorKind};
use ctxstore_replica::Replicator;

use common::{
    Target, append, block_on, engine_config, noise, start_standby_promoting, wait_shipped,
};

const EIO: i32 = 5;
/// The shortest lease the server takes (`--replica-lease 2s`).
const LEASE: Duration = Duration::from_secs(2);

#[test]
fn a_primary_whose_fdatasync_failed_releases_its_lease_and_a_standby_takes_over() {
    let root = tempfile::tempdir().unwrap();
    for target in Target::all(root.path(), "step-down") {
        let primary_dir = root.path().join(format!("primary-{}", target.url.len()));
        let standby_dir = root.path().join(format!("standby-{}", target.url.len()));
        let primary = Engine::open(engine_config(&primary_dir)).unwrap();
        let mut ship = target.ship_config();
        ship.lease = Some(LEASE);
        let replicator = Replicator::start(primary.clone(), ship).unwrap();
        let context = block_on(primary.create_context()).unwrap().context_id;
        let mut acknowledged = Vec::new();
        for i in 0..20 {
            acknowledged.push(append(&primary, context, &noise(i, 3_000)));
        }
        wait_shipped(&replicator);
        let mut standby_ship = target.ship_config();
        standby_ship.lease = Some(LEASE);
        let (standby, follower) =
            start_standby_promoting(&target, &standby_dir, standby_ship, true);

        // The disk fails: the batch whose fdatasync fails is refused, and so is every later
        // write.
        inject(
            &primary_dir,
            "turns.log",
            FaultOp::Sync,
            Fault::Fail(EIO),
            1,
        );
        let failed = block_on(primary.append(ctxstore_engine::AppendRequest {
            context_id: context,
            expected_head: None,
            type_tag: 1,
            codec: 0,
            payload: ctxstore_engine::AppendPayload::Bytes(bytes::Bytes::from_static(
                b"in the batch whose fdatasync fails",
            )),
            options: Default::default(),
        }))
        .unwrap_err();
        assert_eq!(failed.kind(), ErrorKind::ReadOnly, "{failed}");
        assert!(primary.store_failed().is_some());

        // The standby takes over without waiting out a lease that is renewed for ever.
        let deadline = Instant::now() + Duration::from_secs(30);
        let taken_over = loop {
            let role = follower
                .stats()
                .snapshot(ctxstore_replica::stats::now_unix_ms());
            if standby.stats().read_only {
                assert!(
                    Instant::now() < deadline,
                    "the standby never took over ({}): {role:?}; the primary: {:?}",
                    target.url,
                    replicator
                        .stats()
                        .snapshot(ctxstore_replica::stats::now_unix_ms()),
                );
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            break role;
        };
        // The primary acknowledges nothing more, and sends its writers to find the taker.
        assert!(!primary.gate_open());
        let refused = block_on(primary.create_context()).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::NotPrimary, "{refused}");
        let reason = replicator
            .stats()
            .snapshot(ctxstore_replica::stats::now_unix_ms())
            .reason;
        assert!(
            reason.contains("stepped down") || reason.contains("another primary took"),
            "{reason}"
        );
        // Every acknowledged turn is on the new primary, which takes writes.
        let head = block_on(standby.head(context)).unwrap().head_turn_id;
        assert_eq!(head, *acknowledged.last().unwrap(), "after {taken_over:?}");
        for turn_id in &acknowledged {
            block_on(standby.turn(*turn_id)).unwrap();
        }
        let after = append(&standby, context, b"on the new primary");
        assert!(after > *acknowledged.last().unwrap());

        replicator.stop();
        primary.shutdown();
        follower.stop().unwrap();
        standby.shutdown();
    }
}
