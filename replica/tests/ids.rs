//! Ids unique across generations (issue 46 item 8): a primary dies with ids acknowledged but
//! not shipped; the store restored from its replica (and the next one, restored from the
//! generation that one started) hands out none of them again, and says in its generation
//! record where its ids start. Against `file://` and, with CI's server, SeaweedFS.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Target, append, block_on, engine_config, restore_point, wait_shipped};
use ctxstore_engine::id_floors::IdFloors;
use ctxstore_engine::{ContextId, Engine, TurnId};
use ctxstore_replica::Replicator;
use ctxstore_replica::faulty::Fault;
use ctxstore_replica::restore::RestorePoint;

/// Every id a primary acknowledged.
#[derive(Default)]
struct Acknowledged {
    turns: Vec<TurnId>,
    contexts: Vec<ContextId>,
}

impl Acknowledged {
    fn write(&mut self, engine: &Engine, contexts: usize, turns: usize, seed: u64) {
        for c in 0..contexts {
            let context = block_on(engine.create_context()).unwrap().context_id;
            self.contexts.push(context);
            for t in 0..turns {
                let payload = common::noise(seed * 1000 + (c * 100 + t) as u64, 64);
                self.turns.push(append(engine, context, &payload));
            }
        }
    }

    /// None of `turns`' or `contexts`' ids is one of these.
    fn assert_none_reused(&self, turns: &[TurnId], contexts: &[ContextId], what: &str) {
        for turn in turns {
            assert!(
                !self.turns.contains(turn),
                "{what}: TurnID {turn} handed out again"
            );
        }
        for context in contexts {
            assert!(
                !self.contexts.contains(context),
                "{what}: ContextID {context} handed out again"
            );
        }
    }
}

/// A primary on `target`: ships some, then acknowledges more while its object store is
/// unreachable, and dies (its disk is lost with it).
fn primary_that_dies(target: &Target, dir: &std::path::Path, seed: u64) -> Acknowledged {
    let engine = Engine::open(engine_config(dir)).unwrap();
    let (replicator, faults) =
        common::faulty_replicator(&engine, &target.url, &target.s3, target.ship_config());
    let mut acknowledged = Acknowledged::default();
    acknowledged.write(&engine, 3, 4, seed);
    wait_shipped(&replicator);
    faults.set(Fault::Unreachable);
    acknowledged.write(&engine, 5, 3, seed + 1);
    replicator.stop();
    engine.shutdown();
    acknowledged
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Restores the replica's latest point into `to` and starts it the way `ctxstore-server
/// restore` does (ids raised past the replica's); answers the new store's first ids.
fn restore_as_primary(target: &Target, to: &std::path::Path) -> (Engine, IdFloors) {
    restore_point(target, to, RestorePoint::Latest).unwrap();
    let engine = Engine::open(engine_config(to)).unwrap();
    let remote = ctxstore_replica::target::open(&target.url, &target.s3).unwrap();
    let floors = runtime()
        .block_on(ctxstore_replica::ids::start_past_replica(&remote, &engine))
        .unwrap();
    (engine, floors)
}

fn run(target: &Target) {
    let root = tempfile::tempdir().unwrap();
    let mut acknowledged = primary_that_dies(target, &root.path().join("primary"), 1);

    // Generation 2: restored, it ships; then it dies too, with ids of its own unshipped.
    let (engine, floors) = restore_as_primary(target, &root.path().join("second"));
    let highest_turn = acknowledged.turns.iter().max().copied().unwrap();
    assert!(
        floors.records > highest_turn.0,
        "{floors:?} vs {highest_turn}"
    );
    let mut second = Acknowledged::default();
    let replicator = Replicator::start(engine.clone(), target.ship_config()).unwrap();
    second.write(&engine, 2, 3, 7);
    acknowledged.assert_none_reused(&second.turns, &second.contexts, "generation 2");
    wait_shipped(&replicator);
    let remote = ctxstore_replica::target::open(&target.url, &target.s3).unwrap();
    let generations = runtime()
        .block_on(ctxstore_replica::catalog::generations(&remote))
        .unwrap();
    let record = generations.last().unwrap();
    assert_eq!(record.floors.contexts, floors.contexts, "{record:?}");
    assert!(record.floors.records >= floors.records, "{record:?}");
    replicator.stop();
    engine.shutdown();
    acknowledged.turns.extend(&second.turns);
    acknowledged.contexts.extend(&second.contexts);

    // Generation 3, from generation 2's newest point: past both.
    let (engine, _) = restore_as_primary(target, &root.path().join("third"));
    let mut third = Acknowledged::default();
    third.write(&engine, 2, 2, 9);
    acknowledged.assert_none_reused(&third.turns, &third.contexts, "generation 3");
    // The skipped ids read as ids that never were; the shipped ones read back.
    assert!(block_on(engine.head(acknowledged.contexts[0])).is_ok());
    assert!(block_on(engine.head(*acknowledged.contexts.last().unwrap())).is_ok());
    engine.shutdown();
    let report = ctxstore_engine::verify(&root.path().join("third")).unwrap();
    assert!(report.is_ok(), "{report}");
}

#[test]
fn ids_acknowledged_but_not_shipped_are_never_handed_out_again() {
    let root = tempfile::tempdir().unwrap();
    for target in Target::all(root.path(), "ids") {
        run(&target);
    }
}

/// A standby promoted after its primary died with ids acknowledged but not shipped hands out
/// none of them; a second standby, following the same replica, follows the promoted one across
/// its ids' jump (it does not stall).
#[test]
fn a_promoted_standby_hands_out_none_of_the_ids_its_primary_did_not_ship() {
    use ctxstore_replica::follow::{self, PromotionAnswer};
    use ctxstore_replica::stats::ReplicationState;
    use std::time::{Duration, Instant};

    let root = tempfile::tempdir().unwrap();
    let target = Target::file(root.path());
    let standby_of =
        |dir: &std::path::Path| common::start_standby(&target, dir, target.ship_config());
    // The primary ships a first part, the standbys start from it.
    let primary_dir = root.path().join("primary");
    let engine = Engine::open(engine_config(&primary_dir)).unwrap();
    let (replicator, faults) =
        common::faulty_replicator(&engine, &target.url, &target.s3, target.ship_config());
    let mut acknowledged = Acknowledged::default();
    acknowledged.write(&engine, 3, 3, 21);
    wait_shipped(&replicator);
    let promoted_dir = root.path().join("promoted");
    let (promoted, follower) = standby_of(&promoted_dir);
    let (second, second_follower) = standby_of(&root.path().join("second"));
    let shipped = engine.durable_records();
    let deadline = Instant::now() + Duration::from_secs(30);
    while promoted.durable_records() < shipped || second.durable_records() < shipped {
        assert!(Instant::now() < deadline, "the standbys never caught up");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Then it acknowledges more that never ships, and dies.
    faults.set(Fault::Unreachable);
    acknowledged.write(&engine, 4, 2, 22);
    replicator.stop();
    engine.shutdown();

    follow::request_promotion(&promoted_dir).unwrap();
    let answer = loop {
        if let Some(answer) = follow::promotion_answer(&promoted_dir).unwrap() {
            break answer;
        }
        assert!(
            Instant::now() < deadline,
            "the promotion was never answered"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(answer, PromotionAnswer::Promoted);
    let mut after = Acknowledged::default();
    after.write(&promoted, 2, 2, 23);
    acknowledged.assert_none_reused(&after.turns, &after.contexts, "the promoted standby");

    // The other standby follows the promoted primary past the jump and applies its writes.
    let newest = *after.turns.last().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while second.durable_records() < newest.0 {
        let stats = second_follower.stats().snapshot(0);
        assert_ne!(stats.state, ReplicationState::Stalled, "{}", stats.reason);
        assert!(
            Instant::now() < deadline,
            "the second standby never applied {newest}: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let turn = block_on(second.turn(newest)).unwrap();
    assert_eq!(turn.turn_id, newest);
    second_follower.stop().unwrap();
    second.shutdown();
    follower.stop().unwrap();
    promoted.shutdown();
}
