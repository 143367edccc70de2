//! Watches (issue 32): what happened to contexts, as a bounded log of events in memory. The
//! sequencer appends each durable batch's events (a head moved, a stream opened, sealed or
//! aborted, tags changed, a context deleted) and publishes the log; watchers read it from
//! their last sequence number and wait on its event for more.
//!
//! An event's sequence number is the record id of the `turns.log` record that caused it (a
//! head move: its new head turn; the others: their metadata record), so sequence numbers
//! strictly increase across batches and restarts. The log keeps the newest
//! `WATCH_EVENTS_KEPT_MAX` events and nothing from before the process started: a watcher
//! whose last sequence number is older than what is kept is told it lagged and re-reads.

use std::sync::Arc;

use crate::ids::{ContextId, TurnId};

/// Events kept for watchers: 65,536 × 40 bytes.
pub const WATCH_EVENTS_KEPT_MAX: usize = 65_536;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchKind {
    /// The head moved to `turn_id` (appends of one batch to one context: the last head).
    Head,
    /// Stream `stream_id` opened.
    StreamOpened,
    /// Stream `stream_id` became turn `turn_id`.
    StreamSealed,
    StreamAborted,
    /// The context's tags changed (read them with the context).
    Tags,
    /// The context was deleted.
    Deleted,
}

/// One event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    pub seq: u64,
    pub kind: WatchKind,
    pub context_id: ContextId,
    /// The head (`Head`), the sealed turn (`StreamSealed`), else `TurnId::NONE`.
    pub turn_id: TurnId,
    /// The stream of a stream event, else 0.
    pub stream_id: u64,
}

/// The events kept, oldest first.
#[derive(Clone, Debug, Default)]
pub(crate) struct WatchLog {
    events: imbl::Vector<WatchEvent>,
    /// Events with a sequence number at or below this may be gone (the log's start at open,
    /// then the last one dropped to keep the bound).
    forgotten_through: u64,
}

/// What a watcher reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchRead {
    /// Every event after the asked sequence number, oldest first (at most the asked count).
    Events(Vec<WatchEvent>),
    /// Events after the asked sequence number are no longer kept: re-read the state, then
    /// watch from `resume_after`.
    Lagged { resume_after: u64 },
}

impl WatchLog {
    /// A log that starts after record `through` (the durable log at open).
    pub fn starting_after(through: u64) -> WatchLog {
        WatchLog {
            events: imbl::Vector::new(),
            forgotten_through: through,
        }
    }

    /// The newest sequence number (what a new watcher starts after).
    pub fn last_seq(&self) -> u64 {
        self.events
            .back()
            .map_or(self.forgotten_through, |event| event.seq)
    }

    /// Appends one batch's events, in sequence order (pair of `read`'s order).
    pub fn extend(&mut self, mut events: Vec<WatchEvent>) {
        events.sort_by_key(|event| event.seq);
        for event in events {
            assert!(event.seq > self.last_seq(), "watch events in record order");
            self.events.push_back(event);
        }
        while self.events.len() > WATCH_EVENTS_KEPT_MAX {
            if let Some(dropped) = self.events.pop_front() {
                self.forgotten_through = dropped.seq;
            }
        }
    }

    /// The events after `after` that `wanted` accepts, at most `max`.
    pub fn read(&self, after: u64, max: usize, wanted: &dyn Fn(&WatchEvent) -> bool) -> WatchRead {
        if after < self.forgotten_through {
            return WatchRead::Lagged {
                resume_after: self.last_seq(),
            };
        }
        // The first event after `after`: events are sorted by seq.
        let start = self
            .events
            .binary_search_by(|event| event.seq.cmp(&(after + 1)));
        let start = start.unwrap_or_else(|index| index);
        WatchRead::Events(
            self.events
                .iter()
                .skip(start)
                .filter(|event| wanted(event))
                .take(max)
                .copied()
                .collect(),
        )
    }
}

/// The log as of the last durable batch, for watchers; `changed` wakes the waiting ones.
#[derive(Debug, Default)]
pub(crate) struct WatchView {
    snapshot: arc_swap::ArcSwap<WatchLog>,
    changed: event_listener::Event,
}

impl WatchView {
    pub fn new(log: WatchLog) -> Self {
        WatchView {
            snapshot: arc_swap::ArcSwap::from_pointee(log),
            changed: event_listener::Event::new(),
        }
    }

    pub fn load(&self) -> Arc<WatchLog> {
        self.snapshot.load_full()
    }

    /// Registered before looking again: a publish in between wakes it.
    pub fn listen(&self) -> event_listener::EventListener {
        self.changed.listen()
    }

    /// Sequencer only, after the batch whose events `log` ends with is durable and published.
    pub fn publish(&self, log: WatchLog) {
        self.snapshot.store(Arc::new(log));
        self.changed.notify(usize::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, context: u64) -> WatchEvent {
        WatchEvent {
            seq,
            kind: WatchKind::Head,
            context_id: ContextId(context),
            turn_id: TurnId(seq),
            stream_id: 0,
        }
    }

    #[test]
    fn reads_after_a_sequence_number_filtered_and_lags_past_the_bound() {
        let mut log = WatchLog::starting_after(10);
        assert_eq!(
            log.read(5, 10, &|_| true),
            WatchRead::Lagged { resume_after: 10 }
        );
        assert_eq!(log.read(10, 10, &|_| true), WatchRead::Events(vec![]));
        log.extend(vec![event(13, 2), event(11, 1), event(12, 1)]);
        assert_eq!(
            log.read(10, 10, &|_| true),
            WatchRead::Events(vec![event(11, 1), event(12, 1), event(13, 2)])
        );
        assert_eq!(
            log.read(11, 10, &|e| e.context_id == ContextId(1)),
            WatchRead::Events(vec![event(12, 1)])
        );
        assert_eq!(
            log.read(10, 1, &|_| true),
            WatchRead::Events(vec![event(11, 1)])
        );
        let many: Vec<WatchEvent> = (0..WATCH_EVENTS_KEPT_MAX as u64)
            .map(|i| event(100 + i, 3))
            .collect();
        log.extend(many);
        assert_eq!(
            log.read(12, 1, &|_| true),
            WatchRead::Lagged {
                resume_after: 100 + WATCH_EVENTS_KEPT_MAX as u64 - 1
            }
        );
        assert!(matches!(log.read(13, 1, &|_| true), WatchRead::Events(_)));
    }
}
