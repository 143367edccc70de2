//! The `ctxstore-gc` thread: scheduled rounds, and early ones once enough was deleted.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::EngineError;
use crate::gc::Collector;

/// The `ctxstore-gc` thread: a round every `interval`, and early once contexts holding
/// `deleted_bytes_trigger` payload bytes were deleted since the last round (a round that finds
/// nothing costs one read of the log and the indexes).
#[derive(Debug)]
pub(crate) struct Scheduler {
    stop: Arc<(Mutex<bool>, std::sync::Condvar)>,
    thread: Option<JoinHandle<()>>,
}

/// When the scheduler looks at the trigger.
const TRIGGER_CHECK: Duration = Duration::from_secs(1);

impl Scheduler {
    pub fn start(
        collector: Arc<Collector>,
        interval: Duration,
        deleted_bytes_trigger: u64,
    ) -> std::io::Result<Scheduler> {
        let stop = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let thread = if interval.is_zero() && deleted_bytes_trigger == 0 {
            None
        } else {
            let stop = stop.clone();
            Some(
                std::thread::Builder::new()
                    .name("ctxstore-gc".into())
                    .spawn(move || schedule(&collector, interval, deleted_bytes_trigger, &stop))?,
            )
        };
        Ok(Scheduler { stop, thread })
    }

    pub fn stop(mut self) {
        let (stopped, wake) = &*self.stop;
        if let Ok(mut stopped) = stopped.lock() {
            *stopped = true;
        }
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn schedule(
    collector: &Collector,
    interval: Duration,
    deleted_bytes_trigger: u64,
    stop: &(Mutex<bool>, std::sync::Condvar),
) {
    let (stopped, wake) = stop;
    let tick = if interval.is_zero() {
        TRIGGER_CHECK
    } else {
        interval.min(TRIGGER_CHECK)
    };
    let deleted_bytes = || collector.published.contexts.load().deleted_payload_bytes;
    let mut last_round = Instant::now();
    let mut deleted_at_last_round = deleted_bytes();
    loop {
        let Ok(guard) = stopped.lock() else {
            return;
        };
        let Ok((guard, _)) = wake.wait_timeout_while(guard, tick, |stopped| !*stopped) else {
            return;
        };
        if *guard {
            return;
        }
        drop(guard);
        let deleted_now = deleted_bytes();
        let scheduled = !interval.is_zero() && last_round.elapsed() >= interval;
        let triggered = deleted_bytes_trigger > 0
            && deleted_now.saturating_sub(deleted_at_last_round) >= deleted_bytes_trigger;
        if !(scheduled || triggered) || collector.published.status.is_read_only() {
            continue;
        }
        last_round = Instant::now();
        deleted_at_last_round = deleted_now;
        if triggered {
            tracing::info!(
                deleted_now,
                "garbage collection: deleted contexts passed the trigger"
            );
        }
        match collector.run_if_free() {
            None => tracing::debug!(
                "scheduled garbage collection skipped: a backup or a collection is running"
            ),
            Some(Ok(_)) => {}
            Some(Err(EngineError::ShutDown)) => return,
            Some(Err(error)) => tracing::warn!(%error, "scheduled garbage collection failed"),
        }
    }
}
