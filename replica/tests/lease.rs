//! The prefix's lease object (decision 0031 §4, build plan step 4), on a `file://` replica
//! (conditional writes under a lock, `local_cas.rs`) and on SeaweedFS (`If-None-Match` and
//! `If-Match`; `CTXSTORE_S3_TEST_ENDPOINT`, as `tests/s3.rs`):
//! - eight processes' worth of takers race to create a new prefix's lease, then to take one
//!   version of it: exactly one wins each race, the others are told who holds it;
//! - a holder renews (each renewal a new version); once a taker replaced its version, its next
//!   renewal is lost, naming the taker; a released lease is taken at once, and a store's own
//!   lease (a restart) is taken back, another's is left held;
//! - on S3, a renewal whose answer is lost after it landed is read back as the holder's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::Target;
use ctxstore_replica::Remote;
use ctxstore_replica::faulty::{Fault, FaultyStore};
use ctxstore_replica::format::{LeaseRecord, LeaseState};
use ctxstore_replica::lease::{self, Acquired, Renewal};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

fn me(name: &str, nonce: u128) -> LeaseRecord {
    LeaseRecord {
        state: LeaseState::Held,
        epoch: 1,
        replica_id: [7; 16],
        holder_nonce: nonce,
        renewal: 0,
        lease_ms: 10_000,
        margin_ms: 500,
        written_unix_ms: 0,
        failovers: 0,
        last_failover_ms: 0,
        generation: 1,
        holder: format!("{name}:1"),
        advertise: format!("{name}:7411"),
        store: format!("{name}:/data"),
    }
}

fn remote(target: &Target) -> Remote {
    ctxstore_replica::target::open(&target.url, &target.s3).unwrap()
}

#[test]
fn racing_takers_have_exactly_one_winner_per_version() {
    let root = tempfile::tempdir().unwrap();
    for target in Target::all(root.path(), "lease-race") {
        let remote = remote(&target);
        let runtime = runtime();
        // Eight takers create the lease of a new prefix at once.
        let created = runtime.block_on(async {
            let racers = (0..8u128).map(|racer| {
                let remote = remote.clone();
                tokio::spawn(async move {
                    lease::acquire(&remote, me(&format!("racer{racer}"), racer)).await
                })
            });
            futures_util::future::join_all(racers).await
        });
        let winners: Vec<_> = created
            .into_iter()
            .map(|joined| joined.unwrap().unwrap())
            .filter_map(|acquired| match acquired {
                Acquired::Ours(holder) => Some(holder),
                Acquired::Held(seen) => {
                    assert!(seen.record.holder.starts_with("racer"));
                    None
                }
            })
            .collect();
        assert_eq!(winners.len(), 1, "{} created the lease", winners.len());
        let current = runtime.block_on(lease::read(&remote)).unwrap().unwrap();
        assert_eq!(current, *winners[0].held());

        // Eight takers replace that one version at once.
        let taken = runtime.block_on(async {
            let racers = (0..8u128).map(|racer| {
                let remote = remote.clone();
                let current = current.clone();
                tokio::spawn(async move {
                    lease::take(&remote, &current, me(&format!("taker{racer}"), 100 + racer)).await
                })
            });
            futures_util::future::join_all(racers).await
        });
        let winners = taken
            .into_iter()
            .filter(|joined| matches!(joined, Ok(Ok(Acquired::Ours(_)))))
            .count();
        assert_eq!(winners, 1, "{winners} took one version");
    }
}

#[test]
fn a_renewal_after_a_takeover_is_lost_and_a_released_or_own_lease_is_taken_at_once() {
    let root = tempfile::tempdir().unwrap();
    for target in Target::all(root.path(), "lease-renew") {
        let remote = remote(&target);
        let runtime = runtime();
        runtime.block_on(async {
            let Acquired::Ours(mut primary) = lease::acquire(&remote, me("a", 1)).await.unwrap()
            else {
                panic!("a new prefix's lease was held");
            };
            let before = primary.held().version.clone();
            assert_eq!(primary.renew().await.unwrap(), Renewal::Renewed);
            assert_eq!(primary.renew().await.unwrap(), Renewal::Renewed);
            assert_ne!(primary.held().version, before, "a renewal is a new version");
            assert_eq!(primary.held().record.renewal, 2);

            // Another's held lease is not taken by acquire.
            let Acquired::Held(seen) = lease::acquire(&remote, me("b", 2)).await.unwrap() else {
                panic!("b took a's held lease");
            };
            assert_eq!(seen.record.holder, "a:1");
            // A taker that watched it lapse replaces the version it saw.
            let Acquired::Ours(taker) = lease::take(&remote, &seen, me("b", 2)).await.unwrap()
            else {
                panic!("the version b watched was replaced");
            };
            let Renewal::Lost(Some(now)) = primary.renew().await.unwrap() else {
                panic!("a renewed over b's lease");
            };
            assert_eq!(now.record.holder, "b:1");

            // b releases; a takes it at once. Then a restarts (a new process, its own store).
            assert_eq!(taker.release().await.unwrap(), Renewal::Renewed);
            let Acquired::Ours(_) = lease::acquire(&remote, me("a", 3)).await.unwrap() else {
                panic!("a released lease was not taken");
            };
            let Acquired::Ours(restarted) = lease::acquire(&remote, me("a", 4)).await.unwrap()
            else {
                panic!("a store's own lease was not taken back at its restart");
            };
            assert_eq!(restarted.held().record.holder_nonce, 4);
        });
    }
}

#[test]
fn a_renewal_whose_answer_is_lost_after_it_landed_is_the_holders_own() {
    let root = tempfile::tempdir().unwrap();
    let Some(target) = Target::seaweedfs("lease-lost-answer") else {
        return;
    };
    let _ = root;
    let inner = remote(&target);
    let faulty = FaultyStore::new(inner.store.clone());
    let faults = faulty.faults.clone();
    let remote = Remote::new(Arc::new(faulty), inner.layout.prefix(), &target.url);
    runtime().block_on(async {
        let Acquired::Ours(mut holder) = lease::acquire(&remote, me("a", 9)).await.unwrap() else {
            panic!("a new prefix's lease was held");
        };
        faults.set(Fault::LandThenFail);
        assert_eq!(holder.renew().await.unwrap(), Renewal::Renewed);
        faults.set(Fault::None);
        assert_eq!(holder.held().record.renewal, 1);
        let stored = lease::read(&remote).await.unwrap().unwrap();
        assert_eq!(
            stored,
            *holder.held(),
            "the read-back version is the one renewals name"
        );
        assert_eq!(holder.renew().await.unwrap(), Renewal::Renewed);
    });
}

/// Boot-clock nanoseconds for the keeper test: the real monotonic clock is enough here.
fn now_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap() + 1
}

#[test]
fn the_keeper_extends_the_gate_at_each_renewal_and_closes_it_when_the_lease_is_taken() {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    let root = tempfile::tempdir().unwrap();
    for target in Target::all(root.path(), "lease-keeper") {
        let remote = remote(&target);
        let runtime = runtime();
        let timing = lease::LeaseTiming {
            lease: Duration::from_millis(600),
        };
        let Acquired::Ours(holder) = runtime
            .block_on(lease::acquire(&remote, me("keeper", 11)))
            .unwrap()
        else {
            panic!("a new prefix's lease was held");
        };
        let deadlines = Arc::new(Mutex::new(Vec::<u64>::new()));
        let lost = Arc::new(Mutex::new(None::<String>));
        let hooks = lease::KeeperHooks {
            now_ns,
            open_until: {
                let deadlines = deadlines.clone();
                Box::new(move |until| deadlines.lock().unwrap().push(until))
            },
            lost: {
                let lost = lost.clone();
                Box::new(move |who| *lost.lock().unwrap() = Some(who))
            },
        };
        let keeper = lease::LeaseKeeper::start(holder, timing, now_ns(), hooks).unwrap();
        // Renewals every 200 ms: the gate's deadline moves forward each time.
        let deadline = Instant::now() + Duration::from_secs(20);
        while deadlines.lock().unwrap().len() < 4 {
            assert!(Instant::now() < deadline, "the keeper did not renew");
            std::thread::sleep(Duration::from_millis(20));
        }
        {
            let deadlines = deadlines.lock().unwrap();
            assert!(
                deadlines.windows(2).all(|pair| pair[0] < pair[1]),
                "{deadlines:?}"
            );
            // Each is a send time plus L − m (570 ms), never more.
            assert!(*deadlines.last().unwrap() <= now_ns() + 570_000_000);
        }
        // A taker replaces the current version: the keeper's next renewal is lost.
        // (A renewal between the read and the take wins that version: read again.)
        loop {
            let current = runtime.block_on(lease::read(&remote)).unwrap().unwrap();
            let taken = runtime
                .block_on(lease::take(&remote, &current, me("taker", 12)))
                .unwrap();
            if let Acquired::Ours(_) = taken {
                break;
            }
            assert!(Instant::now() < deadline, "the taker never won a version");
        }
        while lost.lock().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "the keeper never saw the lease taken"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(lost.lock().unwrap().as_ref().unwrap().contains("taker:1"));
        let renewals = deadlines.lock().unwrap().len();
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(
            deadlines.lock().unwrap().len(),
            renewals,
            "no renewal after the loss"
        );
        assert!(
            keeper.stop().is_none(),
            "a lost lease is not the keeper's to release"
        );
    }
}
