//! Off-host durability end to end (issue 31), on a `file://` replica (the same code runs on S3:
//! `tests/s3.rs` against SeaweedFS): a running engine ships; restores at the latest point and at
//! exact records hold exactly what was acknowledged by then, through collections that rewrite
//! packs and compact the log; two primaries on one prefix never both ship; a failing object
//! store never stops appends and loses nothing once it recovers; foreign prefixes and damaged
//! objects are refused by name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{append, block_on, engine_config, noise, wait_shipped};
use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, ContextId, ContextRef, Engine, ErrorKind, TurnId,
    verify,
};
use ctxstore_replica::faulty::Fault;
use ctxstore_replica::restore::{RestorePoint, restore};
use ctxstore_replica::stats::ReplicationState;
use ctxstore_replica::{Remote, ReplicaError, Replicator, S3Settings, ShipConfig, ShipPriority};

fn ship_config(url: &str) -> ShipConfig {
    let mut config = ShipConfig::new(url);
    config.interval = Duration::from_millis(25);
    config.checkpoint_interval = Duration::from_secs(3600);
    config.checkpoint_bytes = 200 * 1024;
    config
}

/// Failed cycles so far, all kinds.
fn failures(replicator: &Replicator) -> u64 {
    let stats = replicator.stats().snapshot(0);
    stats.failures.iter().map(|(_, count)| count).sum()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn file_remote(url: &str) -> Remote {
    ctxstore_replica::target::open(url, &S3Settings::default()).unwrap()
}

fn restore_at(url: &str, to: &Path, point: RestorePoint) -> Result<u64, ReplicaError> {
    let remote = file_remote(url);
    runtime()
        .block_on(restore(&remote, to, point, None, &mut |_| {}))
        .map(|report| report.log_records)
}

/// Every expected turn reads back with its payload; every turn id in `absent` is NOT_FOUND.
fn check_store(dir: &Path, expected: &BTreeMap<TurnId, Vec<u8>>, absent: &[TurnId]) {
    let report = verify(dir).unwrap();
    assert!(report.is_ok(), "{report}");
    let engine = Engine::open(engine_config(dir)).unwrap();
    for (turn_id, payload) in expected {
        let turn = block_on(engine.turn(*turn_id))
            .unwrap_or_else(|error| panic!("turn {turn_id} missing after restore: {error}"));
        let bytes = block_on(engine.blob(turn.payload_hash)).unwrap();
        assert!(bytes[..] == payload[..], "turn {turn_id} payload differs");
    }
    for turn_id in absent {
        let error = block_on(engine.turn(*turn_id)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotFound, "turn {turn_id}: {error}");
    }
    engine.shutdown();
}

/// The latest point of the replica restored into `root/name`: it verifies and holds
/// `expected`.
fn restore_latest_and_check(s: &Setup, name: &str, expected: &BTreeMap<TurnId, Vec<u8>>) {
    let to = s.root.join(name);
    restore_at(&s.url, &to, RestorePoint::Latest).unwrap();
    check_store(&to, expected, &[]);
}

struct Setup {
    _root: tempfile::TempDir,
    data: PathBuf,
    url: String,
    root: PathBuf,
}

fn setup() -> Setup {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let url = format!("file://{}", root.path().join("replica").display());
    Setup {
        root: root.path().to_path_buf(),
        _root: root,
        data,
        url,
    }
}

#[test]
fn restores_hold_exactly_what_was_acknowledged_by_their_point_through_collections() {
    let s = setup();
    let engine = Engine::open(engine_config(&s.data)).unwrap();
    let replicator = Replicator::start(engine.clone(), ship_config(&s.url)).unwrap();
    let mut contexts = Vec::new();
    let mut turns: BTreeMap<TurnId, (ContextId, Vec<u8>)> = BTreeMap::new();
    for c in 0..3u64 {
        let context = block_on(engine.create_context()).unwrap().context_id;
        contexts.push(context);
        for i in 0..30u64 {
            let payload = noise(c * 1000 + i, 8 * 1024);
            turns.insert(append(&engine, context, &payload), (context, payload));
        }
    }
    // A payload over the chunk threshold: a manifest and its chunks.
    let big = noise(7, 60 * 1024);
    turns.insert(append(&engine, contexts[1], &big), (contexts[1], big));
    wait_shipped(&replicator);
    let phase_one: BTreeMap<TurnId, Vec<u8>> = turns
        .iter()
        .map(|(turn, (_, payload))| (*turn, payload.clone()))
        .collect();
    let phase_one_last = *phase_one.keys().last().unwrap();

    // A collection rewrites packs (a deleted context's turns die) and compacts the log.
    block_on(engine.delete_context(&ContextRef::Id(contexts[0]))).unwrap();
    let report = engine.gc().unwrap();
    assert!(report.packs_compacted >= 1, "{report:?}");
    for i in 0..20u64 {
        let payload = noise(5000 + i, 8 * 1024);
        turns.insert(
            append(&engine, contexts[2], &payload),
            (contexts[2], payload),
        );
    }
    wait_shipped(&replicator);
    replicator.stop();
    engine.shutdown();
    // What went up: segments, the pack the collection rewrote (uploaded whole),
    // the compacted log base, checkpoints besides the generation's first.
    let objects = walk(&s.root.join("replica"));
    let count = |part: &str| {
        objects
            .iter()
            .filter(|path| path.to_string_lossy().contains(part))
            .count()
    };
    assert!(count("/s/") >= 2, "{objects:?}");
    assert!(
        count("/p/") >= 1,
        "the pack the collection rewrote: {objects:?}"
    );
    assert!(count("/b/") >= 1, "the compacted log base: {objects:?}");
    assert!(count("/c/") >= 2, "{objects:?}");

    // The latest point: everything live, the deleted context's turns gone.
    let latest = s.root.join("latest");
    restore_at(&s.url, &latest, RestorePoint::Latest).unwrap();
    let (dead, live): (Vec<_>, Vec<_>) = turns
        .iter()
        .partition(|(_, (context, _))| *context == contexts[0]);
    let live: BTreeMap<TurnId, Vec<u8>> = live
        .into_iter()
        .map(|(turn, (_, payload))| (*turn, payload.clone()))
        .collect();
    let dead: Vec<TurnId> = dead.into_iter().map(|(turn, _)| *turn).collect();
    check_store(&latest, &live, &dead);

    // The end of phase one, by record: every turn of it, the doomed context's included, and
    // nothing appended after.
    let earlier = s.root.join("earlier");
    let records = restore_at(
        &s.url,
        &earlier,
        RestorePoint::AtSeq {
            record_id: phase_one_last.0,
        },
    )
    .unwrap();
    assert_eq!(records, phase_one_last.0);
    let later: Vec<TurnId> = turns
        .keys()
        .filter(|turn| **turn > phase_one_last)
        .copied()
        .collect();
    check_store(&earlier, &phase_one, &later);

    // A record in the middle of phase one: exactly the turns up to it.
    let middle = *phase_one.keys().nth(40).unwrap();
    let mid = s.root.join("middle");
    restore_at(
        &s.url,
        &mid,
        RestorePoint::AtSeq {
            record_id: middle.0,
        },
    )
    .unwrap();
    let (kept, cut): (BTreeMap<_, _>, BTreeMap<_, _>) =
        phase_one.into_iter().partition(|(turn, _)| *turn <= middle);
    check_store(&mid, &kept, &cut.keys().copied().collect::<Vec<_>>());
}

#[test]
fn a_primary_restored_from_its_replica_ships_a_new_generation_that_restores_whole() {
    let s = setup();
    let engine = Engine::open(engine_config(&s.data)).unwrap();
    let replicator = Replicator::start(engine.clone(), ship_config(&s.url)).unwrap();
    let context = block_on(engine.create_context()).unwrap().context_id;
    let mut expected = BTreeMap::new();
    for i in 0..40u64 {
        let payload = noise(i, 8 * 1024);
        expected.insert(append(&engine, context, &payload), payload);
    }
    wait_shipped(&replicator);
    replicator.stop();
    engine.shutdown();
    std::fs::remove_dir_all(&s.data).unwrap();

    // The host is lost: restore, then serve and ship from the restored store.
    let restored = s.root.join("restored");
    restore_at(&s.url, &restored, RestorePoint::Latest).unwrap();
    let engine = Engine::open(engine_config(&restored)).unwrap();
    let replicator = Replicator::start(engine.clone(), ship_config(&s.url)).unwrap();
    assert_eq!(
        replicator.stats().snapshot(0).generation,
        2,
        "a new generation"
    );
    for i in 0..25u64 {
        let payload = noise(100 + i, 8 * 1024);
        expected.insert(append(&engine, context, &payload), payload);
    }
    wait_shipped(&replicator);
    replicator.stop();
    engine.shutdown();
    restore_latest_and_check(&s, "again", &expected);
}

#[test]
fn a_second_primary_on_the_prefix_fences_the_first_within_an_interval() {
    let s = setup();
    let engine = Engine::open(engine_config(&s.data)).unwrap();
    let first = Replicator::start(engine.clone(), ship_config(&s.url)).unwrap();
    let context = block_on(engine.create_context()).unwrap().context_id;
    for i in 0..10u64 {
        append(&engine, context, &noise(i, 4096));
    }
    wait_shipped(&first);
    // The same store, a second replicator (what a copy of the store on another host does).
    let second = Replicator::start(engine.clone(), ship_config(&s.url)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while first.stats().state() != ReplicationState::Fenced {
        assert!(Instant::now() < deadline, "the first primary kept shipping");
        std::thread::sleep(Duration::from_millis(10));
    }
    let fenced_at = first.stats().snapshot(0).seq;
    // The fenced store refuses writes (issue 46: they would reach no restore point), naming
    // the holder. Here both replicators ship one store, so it refuses them all.
    let refused = block_on(engine.append(AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: AppendPayload::Bytes(Bytes::from_static(b"after the fence")),
        options: Default::default(),
    }))
    .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::NotPrimary, "{refused}");
    assert!(refused.to_string().contains("fenced"), "{refused}");
    wait_shipped(&second);
    assert_eq!(
        first.stats().snapshot(0).seq,
        fenced_at,
        "a fenced primary ships nothing"
    );
    assert_eq!(second.stats().state(), ReplicationState::Shipping);
    second.stop();
    first.stop();
    engine.shutdown();
    let restored = s.root.join("restored");
    restore_at(&s.url, &restored, RestorePoint::Latest).unwrap();
    let report = verify(&restored).unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.turns, 10);
}

#[test]
fn a_failing_object_store_never_stops_appends_and_everything_ships_once_it_recovers() {
    let s = setup();
    let engine = Engine::open(engine_config(&s.data)).unwrap();
    let (replicator, faults) =
        common::faulty_replicator(&engine, &s.url, &S3Settings::default(), ship_config(&s.url));
    let context = block_on(engine.create_context()).unwrap().context_id;
    let mut expected = BTreeMap::new();
    for (round, fault) in [
        Fault::RefusePuts,
        Fault::LandThenFail,
        Fault::Unreachable,
        Fault::Slow(Duration::from_millis(200)),
    ]
    .into_iter()
    .enumerate()
    {
        let failures_before = failures(&replicator);
        let injected_before = faults.injected.load(std::sync::atomic::Ordering::Relaxed);
        faults.set(fault);
        // Appends are acknowledged while the store fails.
        for i in 0..15u64 {
            let payload = noise(round as u64 * 100 + i, 8 * 1024);
            expected.insert(append(&engine, context, &payload), payload);
        }
        // Until the shipper met the fault (it runs at a lower priority: on a loaded machine a
        // fixed pause may pass before its next cycle), at least 120 ms.
        std::thread::sleep(Duration::from_millis(120));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let met = match fault {
                // Refused and unreachable: a failed cycle. Landed-then-failed: the read back
                // finds our bytes, so the cycle succeeds. Slow: only late.
                Fault::RefusePuts | Fault::Unreachable => failures(&replicator) > failures_before,
                _ => faults.injected.load(std::sync::atomic::Ordering::Relaxed) > injected_before,
            };
            if met {
                break;
            }
            assert!(Instant::now() < deadline, "the shipper never met {fault:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    faults.set(Fault::None);
    wait_shipped(&replicator);
    let stats = replicator.stats().snapshot(0);
    assert!(
        failures(&replicator) >= 2,
        "the faults were seen: {stats:?}"
    );
    assert!(faults.injected.load(std::sync::atomic::Ordering::Relaxed) > 0);
    replicator.stop();
    engine.shutdown();
    restore_latest_and_check(&s, "restored", &expected);
}

#[test]
fn foreign_prefixes_and_damaged_objects_are_refused_by_name() {
    let s = setup();
    // Not a replica.
    let replica_dir = s.root.join("replica");
    std::fs::create_dir_all(&replica_dir).unwrap();
    std::fs::write(replica_dir.join("notes.txt"), b"not ours").unwrap();
    let engine = Engine::open(engine_config(&s.data)).unwrap();
    let error = Replicator::start(engine.clone(), ship_config(&s.url)).unwrap_err();
    assert!(matches!(error, ReplicaError::NotAReplica { .. }), "{error}");
    assert!(error.to_string().contains("notes.txt"), "{error}");
    std::fs::remove_file(replica_dir.join("notes.txt")).unwrap();

    // Ours: ship something.
    let replicator = Replicator::start(engine.clone(), ship_config(&s.url)).unwrap();
    let context = block_on(engine.create_context()).unwrap().context_id;
    for i in 0..10u64 {
        append(&engine, context, &noise(i, 8 * 1024));
    }
    wait_shipped(&replicator);
    replicator.stop();
    engine.shutdown();

    // Another store on the same prefix is refused, naming both replicas.
    let other = Engine::open(engine_config(&s.root.join("other"))).unwrap();
    let error = Replicator::start(other.clone(), ship_config(&s.url)).unwrap_err();
    assert!(matches!(error, ReplicaError::OtherStore { .. }), "{error}");
    other.shutdown();

    // A damaged segment: the restore fails naming it, and leaves no store.
    let segment = walk(&replica_dir)
        .into_iter()
        .find(|path| path.to_string_lossy().contains("/s/"))
        .unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&segment, &bytes).unwrap();
    let target = s.root.join("restored");
    let error = restore_at(&s.url, &target, RestorePoint::Latest).unwrap_err();
    let name = segment
        .strip_prefix(&replica_dir)
        .unwrap()
        .display()
        .to_string();
    assert!(error.to_string().contains(&name), "{error} names {name}");
    assert!(
        !target.join("ctxstore.meta").exists(),
        "no store from a damaged replica"
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

#[allow(dead_code)]
fn hash(payload: &[u8]) -> BlobHash {
    BlobHash::of(payload)
}

#[test]
fn retention_deletes_what_no_kept_point_reads_and_the_latest_point_still_restores() {
    let s = setup();
    let engine = Engine::open(engine_config(&s.data)).unwrap();
    let mut config = ship_config(&s.url);
    config.checkpoint_bytes = 64 * 1024;
    let replicator = Replicator::start(engine.clone(), config).unwrap();
    let keep = block_on(engine.create_context()).unwrap().context_id;
    let doomed = block_on(engine.create_context()).unwrap().context_id;
    let mut expected = BTreeMap::new();
    for i in 0..40u64 {
        let payload = noise(i, 8 * 1024);
        expected.insert(append(&engine, keep, &payload), payload);
        append(&engine, doomed, &noise(10_000 + i, 8 * 1024));
        if i % 10 == 9 {
            wait_shipped(&replicator);
        }
    }
    block_on(engine.delete_context(&ContextRef::Id(doomed))).unwrap();
    engine.gc().unwrap();
    for i in 40..50u64 {
        let payload = noise(i, 8 * 1024);
        expected.insert(append(&engine, keep, &payload), payload);
    }
    wait_shipped(&replicator);
    replicator.stop();
    engine.shutdown();
    let replica_dir = s.root.join("replica");
    let before = walk(&replica_dir).len();
    let remote = file_remote(&s.url);
    let window = Duration::from_secs(24 * 3600);
    // Two days on: every object is older than the window, only the latest point is kept.
    let later = ctxstore_replica::stats::now_unix_ms() + 2 * 24 * 3600 * 1000;

    // A restore in progress holds everything.
    let lease = ctxstore_replica::layout::Key::Restore(7);
    runtime()
        .block_on(remote.create(lease, Bytes::from_static(b"restore")))
        .unwrap();
    let held = runtime()
        .block_on(ctxstore_replica::retention::run(
            &remote,
            window,
            later - 2 * 24 * 3600 * 1000,
        ))
        .unwrap();
    assert!(held.held_by_restore && held.deleted == 0, "{held:?}");
    runtime().block_on(remote.delete(lease)).unwrap();

    let report = runtime()
        .block_on(ctxstore_replica::retention::run(&remote, window, later))
        .unwrap();
    assert!(report.deleted > 0, "{report:?}");
    assert!(walk(&replica_dir).len() < before);
    restore_latest_and_check(&s, "restored", &expected);
    // A point retention let go (here: records compacted away before the oldest kept
    // checkpoint) is refused, never half restored.
    let gone = s.root.join("gone");
    let first = *expected.keys().next().unwrap();
    let error = restore_at(&s.url, &gone, RestorePoint::AtSeq { record_id: first.0 });
    assert!(error.is_err(), "{error:?}");
    assert!(!gone.join("ctxstore.meta").exists());
}

/// Field `field` (numbered as in proc(5)'s /proc/pid/stat) of each thread of this process
/// named `name` (Linux keeps 15 bytes of it).
fn thread_stat_fields(name: &str, field: usize) -> Vec<i32> {
    let mut values = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        // A thread that ended since the listing (another test's, in this process) is gone.
        let Ok(stat) = std::fs::read_to_string(task.unwrap().path().join("stat")) else {
            continue;
        };
        let open = stat.find('(').unwrap();
        let close = stat.rfind(')').unwrap();
        // The fields after the name start at field 3.
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        if &stat[open + 1..close] == name {
            values.push(fields[field - 3].parse().unwrap());
        }
    }
    values
}

/// The nice value (field 19) of each thread named `name`.
fn thread_nices(name: &str) -> Vec<i32> {
    thread_stat_fields(name, 19)
}

/// Linux's scheduling policy (field 41; 5 is SCHED_IDLE) of each thread named `name`.
fn thread_policies(name: &str) -> Vec<i32> {
    thread_stat_fields(name, 41)
}

const SCHED_IDLE: i32 = 5;

#[test]
fn the_shippers_threads_run_the_configured_steps_below_the_server() {
    let s = setup();
    let engine = Engine::open(engine_config(&s.data)).unwrap();
    let me = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
    let own = thread_nices(me.trim_end()).into_iter().min().unwrap();
    let mut config = ship_config(&s.url);
    config.priority = ShipPriority::Nice(7);
    let replicator = Replicator::start(engine.clone(), config).unwrap();
    let context = block_on(engine.create_context()).unwrap().context_id;
    append(&engine, context, &noise(1, 4096));
    // A file:// target does its I/O on the runtime's blocking threads: they ship too.
    wait_shipped(&replicator);
    // Other tests of this binary run replicators at the same time (at the default 10 steps):
    // this one's threads are those at 7 steps, and no shipper thread runs at the server's.
    let expected = (own + 7).min(19);
    let shippers = thread_nices("ctxstore-replic");
    assert!(
        shippers.contains(&expected),
        "{shippers:?} lacks {expected}"
    );
    let io = thread_nices("ctxstore-rep-io");
    assert!(
        io.contains(&expected),
        "a file:// target's blocking threads run at {expected}: {io:?}"
    );
    for nice in shippers.iter().chain(&io) {
        assert!(
            *nice > own,
            "a replication thread at nice {nice}, not below {own}"
        );
    }
    replicator.stop();
    engine.shutdown();
}

#[test]
fn idle_puts_the_shippers_threads_under_sched_idle() {
    let s = setup();
    let engine = Engine::open(engine_config(&s.data)).unwrap();
    let mut config = ship_config(&s.url);
    config.priority = ShipPriority::Idle;
    let replicator = Replicator::start(engine.clone(), config).unwrap();
    let context = block_on(engine.create_context()).unwrap().context_id;
    append(&engine, context, &noise(1, 4096));
    // Shipping goes on under SCHED_IDLE (this test's machine has idle time between tests).
    wait_shipped(&replicator);
    // Other tests of this binary run replicators at the same time (at nice steps, policy 0):
    // this one's are the SCHED_IDLE ones, its blocking threads (a file:// target's I/O) too.
    let shippers = thread_policies("ctxstore-replic");
    assert!(shippers.contains(&SCHED_IDLE), "{shippers:?}");
    let io = thread_policies("ctxstore-rep-io");
    assert!(io.contains(&SCHED_IDLE), "{io:?}");
    let me = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
    assert!(
        !thread_policies(me.trim_end()).contains(&SCHED_IDLE),
        "only the replicator's threads change policy"
    );
    replicator.stop();
    engine.shutdown();
}

/// A segment PUT that lands while its answer is lost, and the endpoint gone before the read-back
/// could find it: once the store is back the shipper ships that same segment again (found as
/// its own), never a new cut under the same key, which read as another writer's and fenced the
/// primary for good (found by a flaky run of the test above: a reset, then an outage).
#[test]
fn a_segment_that_landed_unanswered_before_an_outage_is_shipped_again_not_fenced() {
    let s = setup();
    let engine = Engine::open(engine_config(&s.data)).unwrap();
    let (replicator, faults) =
        common::faulty_replicator(&engine, &s.url, &S3Settings::default(), ship_config(&s.url));
    let context = block_on(engine.create_context()).unwrap().context_id;
    let mut expected = BTreeMap::new();
    let payload = noise(1, 4096);
    expected.insert(append(&engine, context, &payload), payload);
    wait_shipped(&replicator);
    faults.set(Fault::LandThenGone);
    let payload = noise(2, 4096);
    expected.insert(append(&engine, context, &payload), payload);
    let deadline = Instant::now() + Duration::from_secs(30);
    while failures(&replicator) == 0 {
        assert!(Instant::now() < deadline, "the shipper never met the fault");
        std::thread::sleep(Duration::from_millis(5));
    }
    // More acknowledged during the outage: a new cut would differ from the segment that landed.
    for i in 3..10 {
        let payload = noise(i, 4096);
        expected.insert(append(&engine, context, &payload), payload);
    }
    std::thread::sleep(Duration::from_millis(100));
    faults.set(Fault::None);
    wait_shipped(&replicator);
    let stats = replicator.stats().snapshot(0);
    assert_eq!(stats.state, ReplicationState::Shipping, "{stats:?}");
    replicator.stop();
    engine.shutdown();
    restore_latest_and_check(&s, "restored", &expected);
}
