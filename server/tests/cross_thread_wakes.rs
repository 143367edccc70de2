//! A burst of wakes from another thread runs every woken task on a compio runtime.
//!
//! This is how every answer reaches a network core: an engine actor's thread completes a
//! group commit's requests at once, and each completion wakes a request task on the core's
//! runtime. compio-executor 0.1.4 stranded one task of such a burst when the burst overfilled
//! its sync queue (64 ids) while the runtime slept: the late push was never followed by a
//! wake, so the task ran only when something else happened on that thread. The copy in
//! vendor/compio-executor wakes after every push (PATCHED.md); this test fails on 0.1.4 as
//! published.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

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
