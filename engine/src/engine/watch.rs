//! Watches, the caller's side (issue 32): the events of the contexts a watcher names — one
//! context, the contexts whose name starts with a prefix, or those with a tag — after its last
//! sequence number, at once or waited for. The sequencer writes the log (`sequencer/watch.rs`);
//! filters are read against the latest contexts snapshot (a context that lost its name or tag
//! since, a deleted one among them, no longer matches a prefix or tag watch), and only in the
//! handle's scope: a tenant's watch never sees another tenant's events.

use crate::engine::Engine;
use crate::ids::ContextId;
use crate::sequencer::watch::WatchEvent;

pub use crate::sequencer::watch::{WATCH_EVENTS_KEPT_MAX, WatchKind, WatchRead};

/// Which contexts a watch follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchTarget {
    Context(ContextId),
    /// Contexts whose name starts with this (the empty prefix: every named context).
    NamePrefix(String),
    /// Contexts with this tag (key, value).
    Tag(String, String),
}

impl Engine {
    /// The newest sequence number: a new watcher starts after it.
    pub fn watch_position(&self) -> u64 {
        self.inner.published.watch.load().last_seq()
    }

    /// The target's events after `after`, at most `max` (`Lagged` when some are no longer
    /// kept: re-read the state, then watch from `resume_after`).
    pub fn watch_events(&self, target: &WatchTarget, after: u64, max: usize) -> WatchRead {
        let contexts = self.inner.published.contexts.load();
        // Another tenant's events are left out before `max` (decision 0032 §2).
        let in_scope = |event: &WatchEvent| contexts.visible_in(self.scope, event.context_id);
        let wanted = |event: &WatchEvent| {
            in_scope(event)
                && match target {
                    WatchTarget::Context(context_id) => event.context_id == *context_id,
                    WatchTarget::NamePrefix(prefix) => contexts
                        .get(event.context_id)
                        .and_then(|info| info.name.as_ref())
                        .is_some_and(|name| name.starts_with(prefix.as_str())),
                    WatchTarget::Tag(key, value) => contexts
                        .get(event.context_id)
                        .and_then(|info| info.tags.get(key))
                        .is_some_and(|have| have.as_ref() == value),
                }
        };
        self.inner.published.watch.load().read(after, max, &wanted)
    }

    /// Like `watch_events`, but waits while there is none: answers with the first events
    /// that are durable, or `Lagged`. The caller bounds the wait (dropping the future).
    pub async fn wait_watch(&self, target: &WatchTarget, after: u64, max: usize) -> WatchRead {
        loop {
            // Listen first, then look: a publish in between wakes the listener.
            let listener = self.inner.published.watch.listen();
            match self.watch_events(target, after, max) {
                WatchRead::Events(events) if events.is_empty() && max > 0 => {}
                read => return read,
            }
            listener.await;
        }
    }
}
