//! Replication's figures (metrics, `ctxstore stats`): written by the replicator's one thread,
//! read by anyone (relaxed atomics: each figure on its own; no reader needs two to agree).

use std::sync::atomic::{AtomicU64, Ordering};

/// What the replicator is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicationState {
    /// Shipping every interval; the last cycle succeeded.
    Shipping = 1,
    /// The last cycle failed; the next one retries (see `failures`).
    Failing = 2,
    /// Another primary took the prefix: this one ships nothing more.
    Fenced = 3,
    /// Stopped (shutdown).
    Stopped = 4,
    /// A standby applying what the primary shipped.
    Following = 5,
    /// A standby that met a segment it cannot apply: it serves what it has and applies
    /// nothing more (the log says why; restore a new standby).
    Stalled = 6,
}

impl ReplicationState {
    pub fn name(self) -> &'static str {
        match self {
            ReplicationState::Shipping => "shipping",
            ReplicationState::Failing => "failing",
            ReplicationState::Fenced => "fenced",
            ReplicationState::Stopped => "stopped",
            ReplicationState::Following => "following",
            ReplicationState::Stalled => "stalled",
        }
    }

    fn from_code(code: u64) -> ReplicationState {
        match code {
            2 => ReplicationState::Failing,
            3 => ReplicationState::Fenced,
            4 => ReplicationState::Stopped,
            5 => ReplicationState::Following,
            6 => ReplicationState::Stalled,
            _ => ReplicationState::Shipping,
        }
    }
}

/// Kinds of failure counted apart (`ReplicaError::kind`).
pub const FAILURE_KINDS: [&str; 12] = [
    "target",
    "foreign",
    "fenced",
    "missing",
    "damaged",
    "not_found",
    "precondition",
    "store",
    "io",
    "no_space",
    "engine",
    "invalid",
];

#[derive(Debug, Default)]
pub struct ReplicationStats {
    state: AtomicU64,
    pub generation: AtomicU64,
    pub epoch: AtomicU64,
    /// The last segment shipped (or applied, on a standby).
    pub seq: AtomicU64,
    /// When the last cycle that shipped (or found nothing to ship) ended.
    pub last_success_unix_ms: AtomicU64,
    /// When the newest shipped cut was taken: what it holds was acknowledged before then.
    pub shipped_cut_unix_ms: AtomicU64,
    /// Bytes durable locally but not yet shipped, as of the last cut.
    pub lag_bytes: AtomicU64,
    pub objects_total: AtomicU64,
    pub bytes_total: AtomicU64,
    pub failures: [AtomicU64; FAILURE_KINDS.len()],
}

/// The figures at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationSnapshot {
    pub state: ReplicationState,
    pub generation: u64,
    pub epoch: u64,
    pub seq: u64,
    pub last_success_unix_ms: u64,
    pub lag_bytes: u64,
    /// How old the newest acknowledged-but-unshipped data may be: 0 when everything durable
    /// has shipped, else the time since the newest shipped cut.
    pub lag_ms: u64,
    pub objects_total: u64,
    pub bytes_total: u64,
    pub failures: Vec<(&'static str, u64)>,
}

impl ReplicationStats {
    pub fn set_state(&self, state: ReplicationState) {
        self.state.store(state as u64, Ordering::Relaxed);
    }

    pub fn state(&self) -> ReplicationState {
        ReplicationState::from_code(self.state.load(Ordering::Relaxed))
    }

    pub fn count_failure(&self, kind: &str) {
        let index = FAILURE_KINDS
            .iter()
            .position(|known| *known == kind)
            .unwrap_or(FAILURE_KINDS.len() - 1);
        self.failures[index].fetch_add(1, Ordering::Relaxed);
    }

    pub fn add_shipped(&self, objects: u64, bytes: u64) {
        self.objects_total.fetch_add(objects, Ordering::Relaxed);
        self.bytes_total.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn snapshot(&self, now_unix_ms: u64) -> ReplicationSnapshot {
        let load = |value: &AtomicU64| value.load(Ordering::Relaxed);
        let lag_bytes = load(&self.lag_bytes);
        let shipped_cut = load(&self.shipped_cut_unix_ms);
        ReplicationSnapshot {
            state: self.state(),
            generation: load(&self.generation),
            epoch: load(&self.epoch),
            seq: load(&self.seq),
            last_success_unix_ms: load(&self.last_success_unix_ms),
            lag_bytes,
            lag_ms: if lag_bytes == 0 {
                0
            } else {
                now_unix_ms.saturating_sub(shipped_cut)
            },
            objects_total: load(&self.objects_total),
            bytes_total: load(&self.bytes_total),
            failures: FAILURE_KINDS
                .iter()
                .zip(&self.failures)
                .map(|(kind, count)| (*kind, load(count)))
                .collect(),
        }
    }
}

pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}
