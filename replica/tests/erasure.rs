//! Purged bytes leave the replica with the retention window (issue 46 item 9): segments a
//! later checkpoint still named (for the log's slots, or a pack shipped in pieces) were kept
//! forever, and the purged bytes inside them with them. The shipper now refreshes every half
//! window (packs still in segments uploaded whole, the log's prefix rebased into a new
//! `turns.base`), so no restore point needs the old segments once the points that did leave
//! the window. On a directory replica: every object is searched for the purged bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Target, append, block_on, engine_config, noise, restore_point, wait_shipped};
use ctxstore_engine::{BlobHash, Engine};
use ctxstore_replica::restore::RestorePoint;
use ctxstore_replica::{FollowConfig, Follower, ReplicationState, Replicator, follow};

/// Whether any file under `dir` holds `needle`.
fn holds(dir: &Path, needle: &[u8]) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if let Some(found) = holds(&path, needle) {
                return Some(found);
            }
        } else if std::fs::read(&path)
            .unwrap()
            .windows(needle.len())
            .any(|window| window == needle)
        {
            return Some(path);
        }
    }
    None
}

#[test]
fn purged_bytes_leave_the_replica_with_the_retention_window() {
    let root = tempfile::tempdir().unwrap();
    let target = Target::file(root.path());
    let engine = Engine::open(engine_config(&root.path().join("data"))).unwrap();
    let mut config = target.ship_config();
    config.retention = Some(Duration::from_secs(2));
    config.checkpoint_interval = Duration::from_millis(300);
    let replicator = Replicator::start(engine.clone(), config).unwrap();
    let context = block_on(engine.create_context()).unwrap().context_id;
    let secret = noise(777, 8 * 1024);
    let mut kept = Vec::new();
    for i in 0..48u64 {
        let payload = if i == 3 {
            secret.clone()
        } else {
            noise(i, 8 * 1024)
        };
        kept.push((append(&engine, context, &payload), payload));
    }
    wait_shipped(&replicator);
    // A standby follows through the refreshes (whole packs it holds already, the open pack
    // shipped again from 0, a new log base) and ends equal to the primary.
    let follow = FollowConfig {
        url: target.url.clone(),
        s3: target.s3.clone(),
        interval: Duration::from_millis(25),
        ship: target.ship_config(),
        auto_promote: false,
    };
    let standby_dir = root.path().join("standby");
    follow::prepare(&standby_dir, &follow).unwrap();
    let mut standby_config = engine_config(&standby_dir);
    standby_config.follower = true;
    let standby = Engine::open(standby_config).unwrap();
    let follower = Follower::start(standby.clone(), follow).unwrap();
    let replica = root.path().join("replica");
    let probe = &secret[4096..4160];
    assert!(holds(&replica, probe).is_some(), "the secret never shipped");

    let hash = BlobHash(*blake3::hash(&secret).as_bytes());
    block_on(engine.purge_blob(hash)).unwrap();
    engine.gc().unwrap();
    assert!(
        holds(&root.path().join("data"), probe).is_none(),
        "purged locally"
    );
    let started = Instant::now();
    let mut left = holds(&replica, probe);
    while left.is_some() && started.elapsed() < Duration::from_secs(30) {
        append(&engine, context, b"the store goes on");
        std::thread::sleep(Duration::from_millis(200));
        left = holds(&replica, probe);
    }
    assert!(
        left.is_none(),
        "purged bytes are still in {left:?} {:?} after the purge, with a 2 s retention window",
        started.elapsed()
    );
    wait_shipped(&replicator);
    let records = engine.durable_records();
    let deadline = Instant::now() + Duration::from_secs(30);
    while standby.durable_records() < records {
        let figures = follower
            .stats()
            .snapshot(ctxstore_replica::stats::now_unix_ms());
        assert_ne!(
            figures.state,
            ReplicationState::Stalled,
            "{}",
            figures.reason
        );
        assert!(
            Instant::now() < deadline,
            "the standby never caught up: {figures:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for (turn_id, payload) in kept.iter().filter(|(_, payload)| *payload != secret) {
        let turn = block_on(standby.turn(*turn_id)).unwrap();
        assert_eq!(
            &block_on(standby.blob(turn.payload_hash)).unwrap()[..],
            &payload[..]
        );
    }
    follower.stop().unwrap();
    standby.shutdown();
    assert!(
        holds(&standby_dir, probe).is_none(),
        "purged on the standby"
    );
    replicator.stop();
    engine.shutdown();

    // The latest point is whole without them.
    let restored = root.path().join("restored");
    restore_point(&target, &restored, RestorePoint::Latest).unwrap();
    let engine = Engine::open(engine_config(&restored)).unwrap();
    for (turn_id, payload) in kept.iter().filter(|(_, payload)| *payload != secret) {
        let turn = block_on(engine.turn(*turn_id)).unwrap();
        assert_eq!(
            &block_on(engine.blob(turn.payload_hash)).unwrap()[..],
            &payload[..]
        );
    }
    engine.shutdown();
    let report = ctxstore_engine::verify(&restored).unwrap();
    assert!(report.is_ok(), "{report}");
}
