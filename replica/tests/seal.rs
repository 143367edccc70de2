//! A promotion seals the old primary's generation (decision 0031 §2, build plan step 1), on a
//! `file://` replica and on SeaweedFS (`CTXSTORE_S3_TEST_ENDPOINT`, as `tests/s3.rs`):
//! - a PUT the old primary had in flight when the standby sealed (it had passed its fencing
//!   check) loses to the seal, and the old primary is fenced, naming the new one;
//! - segments created before the seal that the standby had not listed yet are applied by the
//!   seal's loop, so the new lineage holds them;
//! - a cut the old primary shipped only in part before the seal is dropped: its records are
//!   in no restore point, the new primary forks from the point before it, and a second standby
//!   follows the seal into the new generation and ends equal to the new primary;
//! - restores: the latest point, generation 1's latest (the point before the seal, never the
//!   seal), and a record of the dropped cut (never shipped whole).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{
    Target, append, block_on, engine_config, faulty_replicator, faulty_standby, noise, promote,
    restore_point, start_standby, wait_shipped,
};
use ctxstore_engine::{ContextId, ContextRef, Engine, TurnId, verify};
use ctxstore_replica::faulty::Fault;
use ctxstore_replica::follow::PromotionAnswer;
use ctxstore_replica::layout::Key;
use ctxstore_replica::restore::{RestorePoint, restore};
use ctxstore_replica::stats::now_unix_ms;
use ctxstore_replica::{ReplicationState, Replicator, ShipConfig, catalog};

fn ship_config(target: &Target) -> ShipConfig {
    let mut config = target.ship_config();
    // Cuts of more than 16 KiB ship as several segments (`continues`).
    config.segment_bytes_max = 16 * 1024;
    config
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Waits (30 s at most) until `what` holds.
fn wait_until(what: &str, mut holds: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !holds() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn records(engine: &Engine) -> u64 {
    engine.follow_position().unwrap().log_records
}

fn head(engine: &Engine, context: ContextId) -> TurnId {
    engine
        .context(&ContextRef::Id(context))
        .unwrap()
        .head
        .head_turn_id
}

/// The newest segment of `generation` in the replica, and its header.
fn newest_segment(
    target: &Target,
    generation: u32,
) -> (u64, ctxstore_replica::format::SegmentHeader) {
    let remote = ctxstore_replica::target::open(&target.url, &target.s3).unwrap();
    runtime().block_on(async {
        let listed = catalog::segments_after(&remote, generation, 0)
            .await
            .unwrap();
        let seq = listed
            .iter()
            .filter_map(|listed| match listed.key {
                Key::Segment { seq, .. } => Some(seq),
                _ => None,
            })
            .max()
            .unwrap();
        (
            seq,
            catalog::segment_header(&remote, generation, seq)
                .await
                .unwrap()
                .0,
        )
    })
}

/// The old primary's replicator ends fenced by the seal, naming the promoted standby's epoch,
/// and the old primary refuses writes from then on.
fn wait_fenced_by_seal(primary: &Engine, replicator: &Replicator, context: ContextId) {
    wait_until("the old primary is fenced", || {
        replicator.stats().state() == ReplicationState::Fenced
    });
    let stats = replicator.stats().snapshot(now_unix_ms());
    assert!(stats.reason.contains("epoch 2"), "{}", stats.reason);
    let refused = block_on(primary.append(ctxstore_engine::AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: ctxstore_engine::AppendPayload::Bytes(bytes::Bytes::from_static(b"late")),
        options: Default::default(),
    }));
    let error = refused.expect_err("a fenced primary took a write");
    assert!(error.to_string().contains("fenced"), "{error}");
}

/// The replica's latest point of `generation` (else of the newest lineage) restored into
/// `to`, checked by `verify`, opened to read.
fn restored(target: &Target, to: &Path, generation: Option<u32>) -> Engine {
    let remote = ctxstore_replica::target::open(&target.url, &target.s3).unwrap();
    runtime()
        .block_on(restore(
            &remote,
            to,
            RestorePoint::Latest,
            generation,
            &mut |_| {},
        ))
        .unwrap();
    let report = verify(to).unwrap();
    assert!(report.is_ok(), "{report}");
    Engine::open(engine_config(to)).unwrap()
}

struct Dirs {
    primary: PathBuf,
    taker: PathBuf,
    other: PathBuf,
    restored: PathBuf,
    restored_g1: PathBuf,
}

fn dirs(root: &Path, index: usize) -> Dirs {
    let dir = root.join(format!("run{index}"));
    Dirs {
        primary: dir.join("primary"),
        taker: dir.join("taker"),
        other: dir.join("other"),
        restored: dir.join("restored"),
        restored_g1: dir.join("restored-g1"),
    }
}

#[test]
fn a_late_put_of_the_old_primary_loses_to_the_seal_and_fences_it() {
    let root = tempfile::tempdir().unwrap();
    for (index, target) in Target::all(root.path(), "seal-late-put").iter().enumerate() {
        late_put_loses(target, &dirs(root.path(), index));
    }
}

fn late_put_loses(target: &Target, dirs: &Dirs) {
    let primary = Engine::open(engine_config(&dirs.primary)).unwrap();
    let (replicator, faults) =
        faulty_replicator(&primary, &target.url, &target.s3, ship_config(target));
    let context = block_on(primary.create_context()).unwrap().context_id;
    let before = append(&primary, context, b"before");
    wait_shipped(&replicator);
    let shipped = records(&primary);
    let (taker, taker_follower) = start_standby(target, &dirs.taker, ship_config(target));
    wait_until("the standby applied", || records(&taker) >= shipped);

    // The old primary passed its fencing check and its segment's PUT is in flight.
    faults.set(Fault::HoldPutsAfter(0));
    let held = append(&primary, context, b"held: acknowledged here only");
    wait_until("the segment's PUT is held", || {
        faults.held.load(Ordering::Relaxed) >= 1
    });
    assert_eq!(promote(&dirs.taker), PromotionAnswer::Promoted);
    let (seq, seal) = newest_segment(target, 1);
    assert!(seal.seal && seal.epoch == 2, "{seal:?}");
    assert_eq!(seal.log_records, shipped, "the last point's records");

    // The held PUT goes on: the key holds the seal, and the old primary is fenced.
    faults.set(Fault::None);
    wait_fenced_by_seal(&primary, &replicator, context);
    assert_eq!(newest_segment(target, 1).0, seq, "nothing after the seal");
    assert_eq!(
        head(&taker, context),
        before,
        "the held write is not in the lineage"
    );
    assert!(block_on(taker.turn(held)).is_err());
    let after = append(&taker, context, b"after, on the new primary");
    replicator.stop();
    primary.shutdown();
    wait_until("the new primary shipped its write", || {
        let engine = restored_quietly(target, &dirs.restored);
        let found = block_on(engine.turn(after)).is_ok();
        engine.shutdown();
        found
    });
    taker_follower.stop().unwrap();
    taker.shutdown();
}

/// The replica's latest point, restored afresh into `to` (a previous restore there removed)
/// and checked by `verify`, opened to read.
fn restored_quietly(target: &Target, to: &Path) -> Engine {
    let _ = std::fs::remove_dir_all(to);
    restore_point(target, to, RestorePoint::Latest).unwrap();
    let report = verify(to).unwrap();
    assert!(report.is_ok(), "{report}");
    Engine::open(engine_config(to)).unwrap()
}

#[test]
fn segments_the_standby_had_not_listed_are_applied_before_the_seal() {
    let root = tempfile::tempdir().unwrap();
    for (index, target) in Target::all(root.path(), "seal-unlisted").iter().enumerate() {
        unlisted_applied(target, &dirs(root.path(), index));
    }
}

fn unlisted_applied(target: &Target, dirs: &Dirs) {
    let primary = Engine::open(engine_config(&dirs.primary)).unwrap();
    let replicator = Replicator::start(primary.clone(), ship_config(target)).unwrap();
    let context = block_on(primary.create_context()).unwrap().context_id;
    append(&primary, context, b"one");
    wait_shipped(&replicator);
    let (taker, follower, faults) = faulty_standby(target, &dirs.taker, ship_config(target));
    wait_until("the standby applied", || {
        records(&taker) >= records(&primary)
    });

    // Two more points ship, which the standby's listings lag behind.
    faults.set(Fault::HideSegmentListings);
    append(&primary, context, b"two");
    wait_shipped(&replicator);
    let three = append(&primary, context, b"three");
    wait_shipped(&replicator);
    std::thread::sleep(Duration::from_millis(200));
    assert!(records(&taker) < records(&primary), "the listing hid them");

    assert_eq!(promote(&dirs.taker), PromotionAnswer::Promoted);
    assert_eq!(head(&taker, context), three, "the seal's loop applied them");
    let turn = block_on(taker.turn(three)).unwrap();
    assert_eq!(
        block_on(taker.blob(turn.payload_hash)).unwrap().as_ref(),
        b"three"
    );
    // The old primary's next cycle finds the newer epoch (or its next segment the seal).
    wait_until("the old primary is fenced", || {
        replicator.stats().state() == ReplicationState::Fenced
    });
    replicator.stop();
    primary.shutdown();
    follower.stop().unwrap();
    taker.shutdown();
}

#[test]
fn a_cut_shipped_in_part_before_the_seal_is_dropped_and_another_standby_follows_the_new_primary() {
    let root = tempfile::tempdir().unwrap();
    for (index, target) in Target::all(root.path(), "seal-partial-cut")
        .iter()
        .enumerate()
    {
        partial_cut_dropped(target, &dirs(root.path(), index));
    }
}

fn partial_cut_dropped(target: &Target, dirs: &Dirs) {
    let primary = Engine::open(engine_config(&dirs.primary)).unwrap();
    let (replicator, faults) =
        faulty_replicator(&primary, &target.url, &target.s3, ship_config(target));
    let context = block_on(primary.create_context()).unwrap().context_id;
    let before = append(&primary, context, b"before");
    wait_shipped(&replicator);
    let (taker, taker_follower) = start_standby(target, &dirs.taker, ship_config(target));
    let (other, other_follower) = start_standby(target, &dirs.other, ship_config(target));
    wait_until("the standbys applied", || {
        records(&taker) >= records(&primary) && records(&other) >= records(&primary)
    });

    // A 40 KiB cut ships as three segments; the first lands (`continues`), the second is held.
    faults.set(Fault::HoldPutsAfter(1));
    let big = append(&primary, context, &noise(7, 40 * 1024));
    wait_until("the cut's second segment is held", || {
        faults.held.load(Ordering::Relaxed) >= 1
    });
    let (first_of_cut, header) = newest_segment(target, 1);
    assert!(header.continues, "{header:?}");

    assert_eq!(promote(&dirs.taker), PromotionAnswer::Promoted);
    let (seal_seq, seal) = newest_segment(target, 1);
    assert_eq!(
        seal_seq,
        first_of_cut + 1,
        "sealed at the held segment's key"
    );
    assert!(seal.seal);
    faults.set(Fault::None);
    wait_fenced_by_seal(&primary, &replicator, context);
    assert_eq!(
        head(&taker, context),
        before,
        "the cut shipped in part is dropped"
    );
    assert!(block_on(taker.turn(big)).is_err());

    // The new primary writes (a payload that shares the dropped cut's pack bytes' place);
    // the other standby follows the seal into generation 2 and ends equal to it.
    let after = append(&taker, context, &noise(8, 20 * 1024));
    wait_until("the other standby followed the new primary", || {
        records(&other) >= records(&taker)
    });
    assert_eq!(head(&other, context), after);
    for id in 1..=records(&taker) {
        let want = block_on(taker.turn(TurnId(id))).map_err(|error| error.kind());
        let got = block_on(other.turn(TurnId(id))).map_err(|error| error.kind());
        assert_eq!(got, want, "turn {id}");
    }
    let turn = block_on(other.turn(after)).unwrap();
    assert_eq!(
        block_on(other.blob(turn.payload_hash)).unwrap(),
        block_on(taker.blob(turn.payload_hash)).unwrap()
    );
    replicator.stop();
    primary.shutdown();
    other_follower.stop().unwrap();
    other.shutdown();
    let report = verify(&dirs.other).unwrap();
    assert!(report.is_ok(), "{report}");

    // Generation 1's latest point is the one before the seal and the dropped cut.
    let g1 = restored(target, &dirs.restored_g1, Some(1));
    assert_eq!(head(&g1, context), before);
    g1.shutdown();
    let remote = ctxstore_replica::target::open(&target.url, &target.s3).unwrap();
    let at_big = runtime().block_on(restore(
        &remote,
        &dirs.restored_g1.with_extension("at-big"),
        RestorePoint::AtSeq { record_id: big.0 },
        Some(1),
        &mut |_| {},
    ));
    let error = at_big.expect_err("a record of the dropped cut was restored");
    assert!(
        error.to_string().contains("not been shipped whole"),
        "{error}"
    );
    let at_now = dirs.restored_g1.with_extension("at-now");
    runtime()
        .block_on(restore(
            &remote,
            &at_now,
            RestorePoint::AtTime {
                unix_ms: now_unix_ms(),
            },
            Some(1),
            &mut |_| {},
        ))
        .unwrap();
    let g1 = Engine::open(engine_config(&at_now)).unwrap();
    assert_eq!(
        head(&g1, context),
        before,
        "the newest point by time is before the seal"
    );
    g1.shutdown();
    wait_until("the new primary shipped its write", || {
        let engine = restored_quietly(target, &dirs.restored);
        let found = block_on(engine.turn(after)).is_ok() && block_on(engine.turn(big)).is_err();
        engine.shutdown();
        found
    });
    taker_follower.stop().unwrap();
    taker.shutdown();
}

/// A taker killed after its fork leaves an empty generation (the failover campaign found it:
/// `loadgen/tests/failover.rs`, a taker killed mid-promotion). The next taker seals it at its
/// first key and forks from the point before it; a standby that followed into the empty
/// generation must follow on to the new one, never back into the sealed one (it looped
/// there: its point is still the previous generation's).
#[test]
fn a_standby_follows_past_an_empty_generation_that_a_killed_taker_left() {
    let root = tempfile::tempdir().unwrap();
    for (index, target) in Target::all(root.path(), "seal-empty-generation")
        .iter()
        .enumerate()
    {
        empty_generation_followed(target, &dirs(root.path(), index));
    }
}

fn empty_generation_followed(target: &Target, dirs: &Dirs) {
    let primary = Engine::open(engine_config(&dirs.primary)).unwrap();
    let (replicator, _faults) =
        faulty_replicator(&primary, &target.url, &target.s3, ship_config(target));
    let context = block_on(primary.create_context()).unwrap().context_id;
    let before = append(&primary, context, b"before the primary died");
    wait_shipped(&replicator);
    let (taker, taker_follower) = start_standby(target, &dirs.taker, ship_config(target));
    let (other, other_follower) = start_standby(target, &dirs.other, ship_config(target));
    wait_until("the standbys applied", || {
        records(&taker) >= records(&primary) && records(&other) >= records(&primary)
    });
    replicator.stop();
    primary.shutdown();

    // The killed taker's fork: generation 2, forked at generation 1's newest point, empty.
    let remote = ctxstore_replica::target::open(&target.url, &target.s3).unwrap();
    let (newest_seq, _) = newest_segment(target, 1);
    runtime().block_on(async {
        let first = catalog::generations(&remote).await.unwrap().remove(0);
        let orphan = ctxstore_replica::format::GenerationRecord {
            generation: 2,
            parent: Some((1, newest_seq)),
            holder: "a taker killed after its fork".into(),
            ..first
        };
        remote
            .create(Key::Generation(2), orphan.encode().into())
            .await
            .unwrap();
    });
    wait_until("both standbys follow generation 2", || {
        [&taker_follower, &other_follower]
            .iter()
            .all(|follower| follower.stats().generation.load(Ordering::Relaxed) == 2)
    });

    // The next taker seals generation 2 and forks generation 3 from generation 1's point.
    assert_eq!(promote(&dirs.taker), PromotionAnswer::Promoted);
    let (seal_seq, seal) = newest_segment(target, 2);
    assert!(seal.seal && seal_seq == 1, "{seal:?}");
    let after = append(&taker, context, b"on the new primary");
    wait_until("the other standby followed the new primary", || {
        records(&other) >= records(&taker)
    });
    assert_eq!(head(&other, context), after);
    assert!(block_on(other.turn(before)).is_ok());
    other_follower.stop().unwrap();
    other.shutdown();
    let report = verify(&dirs.other).unwrap();
    assert!(report.is_ok(), "{report}");
    taker_follower.stop().unwrap();
    taker.shutdown();
}
