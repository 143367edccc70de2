//! Restore points are what they say while maintenance runs (issue 46, items 4 and 5), on a
//! `file://` replica: a throttled online backup no longer pauses shipping (the shipper's cut
//! waited for the backup's whole run: a kill meanwhile lost seconds of acknowledged turns), and
//! a point's time is the cut's own, so a restore at a time before an acknowledgement never
//! holds that turn (the time was read before the cut's wait: a point could hold turns
//! acknowledged seconds after its label). And `restore --at T` through generations (item 2): a
//! point that lies in an older generation is found there, never past the segment a later
//! generation forked from, also when the newest generation has shipped nothing yet. Each on
//! `file://` and on SeaweedFS when `.ci/run` names it (`CTXSTORE_S3_TEST_ENDPOINT`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Target, append, block_on, noise, shipped_within};
use ctxstore_engine::{ContextId, Engine, EngineConfig, ErrorKind, TurnId};
use ctxstore_replica::Replicator;
use ctxstore_replica::restore::{RestorePoint, RestoreReport};
use ctxstore_replica::stats::now_unix_ms;

fn engine_config(dir: &Path) -> EngineConfig {
    let mut config = EngineConfig::new(dir);
    config.limits.log_preallocate_bytes = 64 * 1024;
    config.gc_interval_ms = 0;
    config.disk_reserve_bytes = 0;
    // A backup copies the open pack (sealed ones it hard-links): the ~2 MiB below, all in the
    // one open pack of the default size, take it about 8 s, long enough that shipping has
    // either gone on beside it or visibly waited for it.
    config.backup_bytes_per_s_max = 256 * 1024;
    config
}

fn restore_to(replica: &Target, to: &Path, point: RestorePoint) -> RestoreReport {
    common::restore_point(replica, to, point).unwrap()
}

/// Whether the store restored at `point` holds `turn`.
fn restored_holds(replica: &Target, to: &Path, point: RestorePoint, turn: TurnId) -> bool {
    restore_to(replica, to, point);
    let engine = Engine::open(engine_config(to)).unwrap();
    let found = holds(&engine, turn);
    engine.shutdown();
    found
}

fn holds(engine: &Engine, turn: TurnId) -> bool {
    match block_on(engine.turn(turn)) {
        Ok(_) => true,
        Err(error) if error.kind() == ErrorKind::NotFound => false,
        Err(error) => panic!("reading turn {turn}: {error}"),
    }
}

#[test]
fn a_backup_does_not_pause_shipping_and_a_points_time_is_its_cuts_on_a_directory() {
    let root = tempfile::tempdir().unwrap();
    backup_beside_shipping(root.path(), &Target::file(root.path()));
}

#[test]
fn a_backup_does_not_pause_shipping_and_a_points_time_is_its_cuts_on_seaweedfs() {
    let Some(replica) = Target::seaweedfs("points-backup") else {
        return;
    };
    backup_beside_shipping(tempfile::tempdir().unwrap().path(), &replica);
}

fn backup_beside_shipping(root: &Path, replica: &Target) {
    let data = root.join("data");
    let engine = Engine::open(engine_config(&data)).unwrap();
    let replicator = Replicator::start(engine.clone(), replica.ship_config()).unwrap();
    let context = block_on(engine.create_context()).unwrap().context_id;
    for i in 0..256u64 {
        append(&engine, context, &noise(i, 8 * 1024));
    }
    assert!(shipped_within(&replicator, Duration::from_secs(60)));

    let backup_engine = engine.clone();
    let backup_dir = root.join("backup");
    let backup = std::thread::spawn(move || backup_engine.backup(&backup_dir).unwrap());
    // The backup holds the store's files; a shipper that waits for it is waiting by now.
    std::thread::sleep(Duration::from_millis(500));
    assert!(!backup.is_finished(), "the backup ended too soon to test");
    let turn = append(&engine, context, b"acknowledged during a backup");
    let acknowledged_ms = now_unix_ms();
    let shipped_beside_the_backup =
        shipped_within(&replicator, Duration::from_secs(30)) && !backup.is_finished();
    let report = backup.join().unwrap();
    assert_eq!(
        report.turns, 256,
        "the backup holds its cut, taken before the turn: {report:?}"
    );
    assert!(
        shipped_beside_the_backup,
        "turn {turn} was not shipped while the backup ran: shipping waited for the backup"
    );
    assert!(shipped_within(&replicator, Duration::from_secs(60)));
    replicator.stop();
    engine.shutdown();

    // A point labelled before the acknowledgement does not hold the turn; the latest does.
    assert!(
        !restored_holds(
            replica,
            &root.join("before"),
            RestorePoint::AtTime {
                unix_ms: acknowledged_ms - 5,
            },
            turn
        ),
        "a point labelled before turn {turn} was acknowledged holds it"
    );
    assert!(restored_holds(
        replica,
        &root.join("latest"),
        RestorePoint::Latest,
        turn
    ));
}

/// Ships `batches` batches of 8 turns to `replicator`, each shipped before the next; answers
/// each batch's turns and the time after it shipped.
fn ship_batches(
    engine: &Engine,
    replicator: &Replicator,
    context: ContextId,
    seed: u64,
    batches: u64,
) -> Vec<(Vec<TurnId>, u64)> {
    (0..batches)
        .map(|batch| {
            let turns = (0..8u64)
                .map(|i| append(engine, context, &noise(seed + batch * 100 + i, 2048)))
                .collect();
            assert!(shipped_within(replicator, Duration::from_secs(60)));
            let shipped_ms = now_unix_ms();
            std::thread::sleep(Duration::from_millis(20));
            (turns, shipped_ms)
        })
        .collect()
}

/// Restores the latest point of the replica into `to` and starts shipping from it (a new
/// generation forked from that point, as a restored or promoted store does).
fn restore_and_ship(replica: &Target, to: &Path) -> (Engine, Replicator) {
    restore_to(replica, to, RestorePoint::Latest);
    let engine = Engine::open(engine_config(to)).unwrap();
    let replicator = Replicator::start(engine.clone(), replica.ship_config()).unwrap();
    (engine, replicator)
}

#[test]
fn a_point_in_an_older_generation_is_found_through_a_newest_one_that_shipped_nothing() {
    let root = tempfile::tempdir().unwrap();
    point_through_generations(root.path(), &Target::file(root.path()));
}

#[test]
fn a_point_in_an_older_generation_is_found_on_seaweedfs() {
    let Some(replica) = Target::seaweedfs("points-generations") else {
        return;
    };
    point_through_generations(tempfile::tempdir().unwrap().path(), &replica);
}

fn point_through_generations(root: &Path, replica: &Target) {
    // Generation 1: six batches, each its own segment.
    let engine = Engine::open(engine_config(&root.join("g1"))).unwrap();
    let replicator = Replicator::start(engine.clone(), replica.ship_config()).unwrap();
    let context = block_on(engine.create_context()).unwrap().context_id;
    let first = ship_batches(&engine, &replicator, context, 0, 6);
    replicator.stop();
    engine.shutdown();
    // Generation 2, restored from it, ships two batches; generation 3, restored from that,
    // ships nothing.
    let (engine, replicator) = restore_and_ship(replica, &root.join("g2"));
    ship_batches(&engine, &replicator, context, 10_000, 2);
    replicator.stop();
    engine.shutdown();
    let (engine, replicator) = restore_and_ship(replica, &root.join("g3"));
    std::thread::sleep(Duration::from_millis(300));
    replicator.stop();
    engine.shutdown();

    // A point after generation 1's fourth batch shipped holds its first four batches and not
    // the fifth.
    let (_, fourth_shipped_ms) = first[3];
    let to = root.join("at");
    let report = restore_to(
        replica,
        &to,
        RestorePoint::AtTime {
            unix_ms: fourth_shipped_ms,
        },
    );
    assert!(
        report.created_unix_ms <= fourth_shipped_ms,
        "the point is labelled after the time asked: {report:?}"
    );
    let engine = Engine::open(engine_config(&to)).unwrap();
    for (batch, (turns, _)) in first.iter().enumerate() {
        for turn in turns {
            assert_eq!(
                holds(&engine, *turn),
                batch < 4,
                "turn {turn} of batch {batch} at the point after batch 3: {report:?}"
            );
        }
    }
    engine.shutdown();
}

/// `restore --at-seq N` inside a cut that also holds a collection (issue 46 item 3): the
/// cut's packs lack what a delete and a collection after N removed, and the restore lost the
/// turns up to N that named it (recovery cuts the log at the first turn whose blob is
/// missing: live contexts' turns after it too), exit 0. Now the packs sealed before the cut
/// are taken as they were then, and a point the replica cannot hold exactly (a pack open
/// before the cut, rewritten inside it) is refused, naming the nearest points that it holds.
/// The cut is made to hold it all by refusing the object store's PUTs meanwhile.
#[test]
fn a_point_inside_a_cut_holding_a_collection_keeps_every_turn_up_to_it() {
    use ctxstore_engine::ContextRef;

    // The doomed context's blobs all in packs sealed before the cut: restored exactly.
    let root = tempfile::tempdir().unwrap();
    let (replica, expected, point, doomed) = cut_with_a_collection(root.path(), 512 * 1024);
    let to = root.path().join("at-seq");
    let restored = restore_to(&replica, &to, RestorePoint::AtSeq { record_id: point });
    assert_eq!(restored.log_records, point, "{restored:?}");
    let engine = Engine::open(engine_config(&to)).unwrap();
    assert!(
        engine.context(&ContextRef::Id(doomed)).is_ok(),
        "the context deleted after the point is gone"
    );
    for (turn_id, payload) in &expected {
        let turn = block_on(engine.turn(*turn_id)).unwrap_or_else(|error| {
            panic!("turn {turn_id}, acknowledged before the point: {error}")
        });
        let bytes = block_on(engine.blob(turn.payload_hash)).unwrap();
        assert!(
            bytes[..] == payload[..],
            "turn {turn_id}: its payload differs"
        );
    }
    engine.shutdown();
    let report = ctxstore_engine::verify(&to).unwrap();
    assert!(report.is_ok(), "{report}");

    // Some in the pack open before the cut, which the collection rewrote: refused.
    let root = tempfile::tempdir().unwrap();
    let (replica, _, point, _) = cut_with_a_collection(root.path(), 0);
    let refused = common::restore_point(
        &replica,
        &root.path().join("refused"),
        RestorePoint::AtSeq { record_id: point },
    )
    .expect_err("a point the replica cannot hold exactly was restored");
    let message = refused.to_string();
    assert!(
        message.contains("cannot be restored exactly") && message.contains("--at-seq"),
        "{message}"
    );
}

/// A store with a kept and a doomed context (interleaved 8 KiB turns, then `kept_after`
/// bytes of the kept one's), shipped; then, in one cut: eight more turns, the point, the
/// doomed context deleted, a collection, one more turn. Answers the replica, the turns up
/// to the point, the point and the doomed context.
fn cut_with_a_collection(
    root: &Path,
    kept_after: usize,
) -> (Target, Vec<(TurnId, Vec<u8>)>, u64, ContextId) {
    use ctxstore_engine::ContextRef;
    use ctxstore_replica::faulty::{Fault, FaultyStore};

    let replica = Target::file(root);
    std::fs::create_dir_all(root.join("replica")).unwrap();
    let engine = Engine::open(common::engine_config(&root.join("data"))).unwrap();
    let inner = ctxstore_replica::target::open(&replica.url, &replica.s3).unwrap();
    let faulty = FaultyStore::new(inner.store.clone());
    let faults = faulty.faults.clone();
    let remote = ctxstore_replica::Remote::new(std::sync::Arc::new(faulty), "", &replica.url);
    let replicator = Replicator::start_with(engine.clone(), replica.ship_config(), remote).unwrap();
    let kept = block_on(engine.create_context()).unwrap().context_id;
    let doomed = block_on(engine.create_context()).unwrap().context_id;
    // Interleaved in the same packs (sealed every 256 KiB): a collection rewrites them.
    let mut expected: Vec<(TurnId, Vec<u8>)> = Vec::new();
    for i in 0..96u64 {
        for (context, seed) in [(kept, i), (doomed, 10_000 + i)] {
            let payload = noise(seed, 8 * 1024);
            expected.push((append(&engine, context, &payload), payload));
        }
    }
    for i in 0..(kept_after / (8 * 1024)) as u64 {
        let payload = noise(30_000 + i, 8 * 1024);
        expected.push((append(&engine, kept, &payload), payload));
    }
    assert!(shipped_within(&replicator, Duration::from_secs(60)));

    faults.set(Fault::RefusePuts);
    for i in 0..8u64 {
        let payload = noise(20_000 + i, 8 * 1024);
        expected.push((append(&engine, kept, &payload), payload));
    }
    let point = engine.durable_records();
    block_on(engine.delete_context(&ContextRef::Id(doomed))).unwrap();
    let report = engine.gc().unwrap();
    assert!(report.packs_compacted > 0, "nothing compacted: {report:?}");
    append(&engine, kept, b"after the point");
    faults.set(Fault::None);
    assert!(shipped_within(&replicator, Duration::from_secs(60)));
    replicator.stop();
    engine.shutdown();
    (replica, expected, point, doomed)
}
