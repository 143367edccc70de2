//! What the replica's integration tests share: payloads, appends, the replicas a test ships to
//! (a directory, and SeaweedFS when `.ci/run` names it in `CTXSTORE_S3_TEST_ENDPOINT`) and
//! the wait for a cut to ship whole. Each test file uses part of it.
#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_engine::{AppendPayload, AppendRequest, ContextId, Engine, EngineConfig, TurnId};
use ctxstore_replica::restore::{RestorePoint, RestoreReport, restore};
use ctxstore_replica::stats::now_unix_ms;
use ctxstore_replica::{ReplicaError, Replicator, S3Settings, ShipConfig};

pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    pollster::block_on(future)
}

/// Small packs (sealed every 256 KiB), collections only on request, every dead byte compacted.
pub fn engine_config(dir: &Path) -> EngineConfig {
    let mut config = EngineConfig::new(dir);
    config.limits.pack_bytes_max = 256 * 1024;
    config.limits.blob_bytes_max = 128 * 1024;
    config.limits.shard_batch_bytes_max = 256 * 1024;
    config.limits.log_preallocate_bytes = 64 * 1024;
    config.gc_interval_ms = 0;
    config.gc_deleted_bytes_trigger = 0;
    config.gc_pack_dead_percent = 1;
    config.gc_bytes_per_s_max = 0;
    config.gc_log_dead_bytes_min = 0;
    config.disk_reserve_bytes = 0;
    config
}

/// `len` incompressible bytes, the same for the same seed.
pub use ctxstore_testsupport::noise;

/// Appends `payload` after the context's head; its TurnID.
pub fn append(engine: &Engine, context: ContextId, payload: &[u8]) -> TurnId {
    block_on(engine.append(AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: AppendPayload::Bytes(Bytes::copy_from_slice(payload)),
        options: Default::default(),
    }))
    .unwrap()
    .turn
    .turn_id
}

/// Where a test's replica lives: under a directory, or under a fresh prefix on the S3 server.
#[derive(Clone, Debug)]
pub struct Target {
    pub url: String,
    pub s3: S3Settings,
}

impl Target {
    pub fn file(root: &Path) -> Target {
        Target {
            url: format!("file://{}", root.join("replica").display()),
            s3: S3Settings::default(),
        }
    }

    /// A fresh prefix on the S3 server `.ci/run` starts; `None` (the test says it skipped)
    /// without `CTXSTORE_S3_TEST_ENDPOINT`.
    pub fn seaweedfs(name: &str) -> Option<Target> {
        let Ok(endpoint) = std::env::var("CTXSTORE_S3_TEST_ENDPOINT") else {
            eprintln!(
                "{name} on S3 skipped: CTXSTORE_S3_TEST_ENDPOINT is not set (.ci/run sets it)"
            );
            return None;
        };
        let bucket =
            std::env::var("CTXSTORE_S3_TEST_BUCKET").unwrap_or_else(|_| "ctxstore-test".into());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        Some(Target {
            url: format!("s3://{bucket}/{name}-{}-{nanos}", std::process::id()),
            s3: S3Settings {
                endpoint: Some(endpoint),
                region: Some("us-east-1".into()),
                allow_http: Some(true),
                sign_payload: false,
            },
        })
    }

    /// The directory replica under `root`, and the S3 one when there is a server.
    pub fn all(root: &Path, name: &str) -> Vec<Target> {
        let mut targets = vec![Target::file(root)];
        targets.extend(Target::seaweedfs(name));
        targets
    }

    /// The replica of one run.
    pub fn at(&self, run: usize) -> Target {
        Target {
            url: format!("{}/run{run}", self.url),
            s3: self.s3.clone(),
        }
    }

    /// Ships every 25 ms; checkpoints only on the first cut.
    pub fn ship_config(&self) -> ShipConfig {
        let mut config = ShipConfig::new(&self.url);
        config.s3 = self.s3.clone();
        config.interval = Duration::from_millis(25);
        config.checkpoint_interval = Duration::from_secs(3600);
        config
    }
}

/// Restores `point` of the replica at `target` into `to` (a runtime of its own).
pub fn restore_point(
    target: &Target,
    to: &Path,
    point: RestorePoint,
) -> Result<RestoreReport, ReplicaError> {
    let remote = ctxstore_replica::target::open(&target.url, &target.s3).unwrap();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(restore(&remote, to, point, None, &mut |_| {}))
}

/// Until a cut taken after this call has shipped whole, or `limit` passes: whether it shipped.
pub fn shipped_within(replicator: &Replicator, limit: Duration) -> bool {
    std::thread::sleep(Duration::from_millis(2));
    let since = now_unix_ms();
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let stats = replicator.stats();
        let shipped_cut = stats
            .shipped_cut_unix_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        if shipped_cut > since && stats.snapshot(now_unix_ms()).lag_bytes == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Waits (30 s at most) until a cut taken after this call shipped whole.
pub fn wait_shipped(replicator: &Replicator) {
    assert!(
        shipped_within(replicator, Duration::from_secs(30)),
        "never shipped: {:?}",
        replicator.stats().snapshot(now_unix_ms())
    );
}

/// A replicator of `engine` shipping to `url` through the fault-injecting store, and the
/// switch that sets its faults.
pub fn faulty_replicator(
    engine: &Engine,
    url: &str,
    s3: &S3Settings,
    config: ShipConfig,
) -> (Replicator, std::sync::Arc<ctxstore_replica::faulty::Faults>) {
    let inner = ctxstore_replica::target::open(url, s3).unwrap();
    let faulty = ctxstore_replica::faulty::FaultyStore::new(inner.store.clone());
    let faults = faulty.faults.clone();
    let remote =
        ctxstore_replica::Remote::new(std::sync::Arc::new(faulty), inner.layout.prefix(), url);
    let replicator = Replicator::start_with(engine.clone(), config, remote).unwrap();
    (replicator, faults)
}

/// A standby of `target` in `dir` (restored from the newest point, then following every
/// 25 ms), shipping with `ship` once promoted.
pub fn start_standby(
    target: &Target,
    dir: &Path,
    ship: ShipConfig,
) -> (Engine, ctxstore_replica::Follower) {
    start_standby_promoting(target, dir, ship, false)
}

/// `start_standby`, with `--auto-promote` when `auto_promote` (`ship.lease` must be set).
pub fn start_standby_promoting(
    target: &Target,
    dir: &Path,
    ship: ShipConfig,
    auto_promote: bool,
) -> (Engine, ctxstore_replica::Follower) {
    let (config, engine) = prepared_standby(target, dir, ship, auto_promote);
    let follower = ctxstore_replica::Follower::start(engine.clone(), config).unwrap();
    (engine, follower)
}

/// A standby's configuration (a poll every 25 ms) and its engine, `dir` prepared (restored
/// from the newest point, or resumed).
fn prepared_standby(
    target: &Target,
    dir: &Path,
    ship: ShipConfig,
    auto_promote: bool,
) -> (ctxstore_replica::FollowConfig, Engine) {
    let config = ctxstore_replica::FollowConfig {
        url: target.url.clone(),
        s3: target.s3.clone(),
        interval: Duration::from_millis(25),
        ship,
        auto_promote,
    };
    ctxstore_replica::follow::prepare(dir, &config).unwrap();
    let mut engine_config = engine_config(dir);
    engine_config.follower = true;
    (config, Engine::open(engine_config).unwrap())
}

/// `start_standby`, its poller reading through the fault-injecting store (the switch
/// returned); once promoted it ships through a store of its own, without faults.
pub fn faulty_standby(
    target: &Target,
    dir: &Path,
    ship: ShipConfig,
) -> (
    Engine,
    ctxstore_replica::Follower,
    std::sync::Arc<ctxstore_replica::faulty::Faults>,
) {
    let (config, engine) = prepared_standby(target, dir, ship, false);
    let inner = ctxstore_replica::target::open(&target.url, &target.s3).unwrap();
    let faulty = ctxstore_replica::faulty::FaultyStore::new(inner.store.clone());
    let faults = faulty.faults.clone();
    let remote = ctxstore_replica::Remote::new(
        std::sync::Arc::new(faulty),
        inner.layout.prefix(),
        &target.url,
    );
    let follower = ctxstore_replica::Follower::start_with(engine.clone(), config, remote).unwrap();
    (engine, follower, faults)
}

/// Asks the standby in `dir` to promote itself and waits (30 s at most) for its answer.
pub fn promote(dir: &Path) -> ctxstore_replica::follow::PromotionAnswer {
    ctxstore_replica::follow::request_promotion(dir).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(answer) = ctxstore_replica::follow::promotion_answer(dir).unwrap() {
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "the promotion was never answered"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
