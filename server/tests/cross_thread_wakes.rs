//! A burst of wakes from another thread runs every woken task on a compio runtime, and never
//! waits for that runtime's thread.
//!
//! This is how every answer reaches a network core: an engine actor's thread completes a
//! group commit's requests at once, and each completion wakes a request task on the core's
//! runtime. compio-executor 0.1.4 stranded one task of such a burst when the burst overfilled
//! its sync queue (64 ids) while the runtime slept: the late push was never followed by a
//! wake, so the task ran only when something else happened on that thread; and a waker that
//! found the queue full spun until the runtime drained it, which deadlocked when the runtime's
//! thread waited for a lock the waker held (the sequencer notifies stream readers through
//! event-listener, under its list's lock, while network cores register new readers on it). The
//! copy in vendor/compio-executor has an unbounded queue and wakes after every push
//! (PATCHED.md); both tests fail on 0.1.4 as published.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

/// Tasks woken at once per round: well past the executor's 64-id sync queue.
const TASKS_PER_ROUND: usize = 300;
const ROUNDS: usize = 200;
/// Nothing else wakes the runtime meanwhile: a round that ends only at this deadline (a
/// timer) had a task whose wake was lost. A round takes well under a millisecond.
const ROUND_DEADLINE: Duration = Duration::from_secs(10);

#[test]
fn every_task_of_a_burst_of_remote_wakes_runs() {
    let (bursts, burst_inbox) = std::sync::mpsc::channel::<Vec<flume::Sender<()>>>();
    // The other thread: waits until the runtime is asleep (its tasks parked), then completes
    // every task's channel back to back.
    let waker_thread = std::thread::spawn(move || {
        for senders in burst_inbox {
            std::thread::sleep(Duration::from_millis(2));
            for sender in senders {
                sender.send(()).unwrap();
            }
        }
    });
    let runtime = compio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        for round in 0..ROUNDS {
            let mut senders = Vec::with_capacity(TASKS_PER_ROUND);
            let mut tasks = Vec::with_capacity(TASKS_PER_ROUND);
            for _ in 0..TASKS_PER_ROUND {
                let (sender, receiver) = flume::bounded::<()>(1);
                senders.push(sender);
                tasks.push(compio::runtime::spawn(async move {
                    receiver.recv_async().await.unwrap();
                }));
            }
            bursts.send(senders).unwrap();
            let all_ran = async {
                for task in tasks {
                    task.await.unwrap();
                }
            };
            compio::time::timeout(ROUND_DEADLINE, all_ran)
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "round {round}: a task woken from another thread did not run within \
                         {ROUND_DEADLINE:?} (a lost wake)"
                    )
                });
        }
    });
    drop(bursts);
    waker_thread.join().unwrap();
}

/// Readers parked on one `event_listener::Event`, as stream readers wait on the sequencer's.
const READERS: usize = 300;
/// How long the runtime's thread keeps registering new listeners (taking the event's lock)
/// while the other thread notifies them all.
const REGISTERING_FOR: Duration = Duration::from_millis(500);
/// A notify that has not returned by then is stuck behind the runtime's thread (a deadlock).
const NOTIFY_DEADLINE: Duration = Duration::from_secs(20);

#[test]
fn a_notify_of_many_parked_tasks_never_waits_for_their_runtime() {
    let event = Arc::new(event_listener::Event::new());
    let (parked, parked_inbox) = std::sync::mpsc::channel::<()>();
    let runtime_thread = {
        let event = event.clone();
        std::thread::spawn(move || {
            let runtime = compio::runtime::Runtime::new().unwrap();
            runtime.block_on(async {
                let mut readers = Vec::with_capacity(READERS);
                for _ in 0..READERS {
                    let listener = event.listen();
                    readers.push(compio::runtime::spawn(listener));
                }
                // Let every reader park (poll its listener once) before the notify.
                compio::time::sleep(Duration::from_millis(20)).await;
                parked.send(()).unwrap();
                // Meanwhile this thread registers listeners without returning to its
                // executor: each takes the event's lock, as a network core registering a
                // reader does while the sequencer notifies.
                let started = Instant::now();
                while started.elapsed() < REGISTERING_FOR {
                    drop(event.listen());
                }
                for reader in readers {
                    reader.await.unwrap();
                }
            });
        })
    };
    parked_inbox.recv().unwrap();
    let (notified, notified_inbox) = std::sync::mpsc::channel::<()>();
    let notifier = {
        let event = event.clone();
        std::thread::spawn(move || {
            event.notify(usize::MAX);
            notified.send(()).unwrap();
        })
    };
    notified_inbox
        .recv_timeout(NOTIFY_DEADLINE)
        .unwrap_or_else(|_| {
            panic!(
                "notifying {READERS} parked tasks did not return within {NOTIFY_DEADLINE:?}: \
                 the waker waits for the runtime, which waits for the event's lock"
            )
        });
    notifier.join().unwrap();
    runtime_thread.join().unwrap();
}
