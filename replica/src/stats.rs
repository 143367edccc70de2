//! Replication's figures, the one source of the metrics (`/metrics`), the console and the
//! REPLICATION_STATS message (`ctxstore stats`): written by the replicator's (or the standby's)
//! one thread, read by anyone (relaxed atomics: each figure on its own; no reader needs two to
//! agree). The three texts (target, primary, reason) change only when the state does, so a
//! mutex around each costs nothing on any request path.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use ctxstore_engine::turns::LOG_RECORD_BYTES;

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
    /// A standby whose replica has no restore point yet (no replica at all, or a generation
    /// that shipped nothing): it looks again every interval and restores the first one that
    /// appears (`follow::prepare_waiting`; `reason` says which).
    Waiting = 7,
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
            ReplicationState::Waiting => "waiting",
        }
    }

    /// Its code on the wire (REPLICATION_STATS `state`; 0 is "off", a server that does not
    /// replicate).
    pub fn code(self) -> u8 {
        self as u8
    }

    fn from_code(code: u64) -> ReplicationState {
        match code {
            2 => ReplicationState::Failing,
            3 => ReplicationState::Fenced,
            4 => ReplicationState::Stopped,
            5 => ReplicationState::Following,
            6 => ReplicationState::Stalled,
            7 => ReplicationState::Waiting,
            _ => ReplicationState::Shipping,
        }
    }
}

/// Which side of a replica this server is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicationRole {
    /// Ships its store (`--replicate-to`, or a promoted standby).
    Primary = 1,
    /// Follows a replica (`--follow`).
    Standby = 2,
}

impl ReplicationRole {
    pub fn name(self) -> &'static str {
        match self {
            ReplicationRole::Primary => "primary",
            ReplicationRole::Standby => "standby",
        }
    }

    /// Its code on the wire (REPLICATION_STATS `role`; 0 is "off").
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// The longest text a figure keeps (target, primary, reason), in bytes: an error message of
/// the object store can be long, and the figures travel in one small answer.
pub const REPLICATION_TEXT_BYTES_MAX: usize = 1024;

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

/// Where the primary's durable log ends now (`Engine::durable_records`): the lag figures
/// compare it with what shipped at every read, not only at a cut (issue 46 item 6).
pub type DurableRecords = Box<dyn Fn() -> u64 + Send + Sync>;

#[derive(Default)]
pub struct ReplicationStats {
    state: AtomicU64,
    /// `ReplicationRole` as its code (0 until a replicator or a follower starts).
    role: AtomicU64,
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
    /// The record id of the last `turns.log` slot shipped (or applied, on a standby): every
    /// turn record up to it is in the replica (0: none yet).
    pub records: AtomicU64,
    /// Objects the backlog needs (files uploaded whole and segments), as of the last cut (on a
    /// standby: segments listed but not applied yet).
    pub backlog_objects: AtomicU64,
    /// The most bytes one segment carries (`--replica-segment-bytes-max`): the backlog has no
    /// bound of its own (it is the store's own files, decision 0019) and ships in segments of
    /// at most this many bytes.
    pub segment_bytes_max: AtomicU64,
    /// A standby found the promote request and is becoming the primary.
    pub promoting: AtomicBool,
    /// The lease this server holds, milliseconds (0: none; decision 0031 §4).
    pub lease_ms: AtomicU64,
    /// When it last renewed it (or took it), Unix milliseconds; on a standby watching the
    /// lease, when it first saw the version it holds now (the holder's renewal, as observed).
    pub lease_renewed_unix_ms: AtomicU64,
    /// Takeovers of this prefix so far, as the lease says (decision 0031 §4).
    pub failovers: AtomicU64,
    /// This server's own last takeover: from its first sight of the lapsed lease's version (a
    /// manual promotion: from its take) to taking writes, milliseconds (0: none).
    pub last_failover_ms: AtomicU64,
    /// A stalled standby restored its replica afresh (`fresh.rs`): the server restarts onto
    /// it.
    pub fresh_restore_ready: AtomicBool,
    /// Records this server's stores held that their new lineage lacked when they were set
    /// aside at a rejoin (`rejoin.rs`), summed over this process's rejoins (decision 0031 §8).
    pub diverged_records: AtomicU64,
    /// Rejoins of this process: a fenced primary that became a standby.
    pub rejoins: AtomicU64,
    /// A fenced primary is restoring the new primary's replica to rejoin as its standby
    /// (ROLE's `rejoining`, decision 0031 §8).
    pub rejoining: AtomicBool,
    /// The replica's URL, without credentials.
    target: Mutex<String>,
    /// The primary a standby names (its READ_ONLY answers send writes there), or the one that
    /// fenced this primary.
    primary: Mutex<String>,
    /// The lease's holder (`host:pid`), as last written or read; empty without a lease.
    lease_holder: Mutex<String>,
    /// Why the state is what it is when it is not healthy (failing, fenced, stalled): the
    /// last error; what a waiting standby waits for; empty while shipping or following.
    reason: Mutex<String>,
    /// A primary's durable watermark, read live (set once by the replicator).
    durable_records: OnceLock<DurableRecords>,
}

impl std::fmt::Debug for ReplicationStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicationStats")
            .field("snapshot", &self.snapshot(now_unix_ms()))
            .finish()
    }
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
    /// How old the oldest acknowledged-but-unshipped data may be: 0 when everything durable
    /// has shipped, else the time since the newest cut shipped whole (or since the
    /// replicator started, before its first). On a primary it counts from the first write
    /// after that cut, seen live, not at the next cut: a stalled shipper (a collection, a
    /// paused or unreachable object store) shows as a growing lag.
    pub lag_ms: u64,
    pub objects_total: u64,
    pub bytes_total: u64,
    pub failures: Vec<(&'static str, u64)>,
    pub role: Option<ReplicationRole>,
    /// See `ReplicationStats::records`.
    pub records: u64,
    /// When the cut holding `records` was taken on the primary (unix ms; 0: none yet).
    pub records_unix_ms: u64,
    pub backlog_objects: u64,
    pub segment_bytes_max: u64,
    pub promoting: bool,
    pub rejoining: bool,
    pub target: String,
    pub primary: String,
    pub reason: String,
}

impl ReplicationStats {
    pub fn set_state(&self, state: ReplicationState) {
        self.state.store(state as u64, Ordering::Relaxed);
    }

    pub fn state(&self) -> ReplicationState {
        ReplicationState::from_code(self.state.load(Ordering::Relaxed))
    }

    pub fn set_role(&self, role: ReplicationRole) {
        self.role.store(role as u64, Ordering::Relaxed);
    }

    pub fn role(&self) -> Option<ReplicationRole> {
        match self.role.load(Ordering::Relaxed) {
            1 => Some(ReplicationRole::Primary),
            2 => Some(ReplicationRole::Standby),
            _ => None,
        }
    }

    /// The replica's URL, with any credentials (`user:password@`) and query left out.
    pub fn set_target(&self, url: &str) {
        set_text(&self.target, &without_credentials(url));
    }

    pub fn set_primary(&self, primary: &str) {
        set_text(&self.primary, primary);
    }

    /// Who holds the lease (ROLE's `holder`).
    pub fn set_lease_holder(&self, holder: &str) {
        set_text(&self.lease_holder, holder);
    }

    pub fn lease_holder(&self) -> String {
        get_text(&self.lease_holder)
    }

    /// Why the state is not healthy (the last error); `""` when it is again.
    pub fn set_reason(&self, reason: &str) {
        set_text(&self.reason, reason);
    }

    pub fn count_failure(&self, kind: &str) {
        let index = FAILURE_KINDS
            .iter()
            .position(|known| *known == kind)
            .unwrap_or(FAILURE_KINDS.len() - 1);
        self.failures[index].fetch_add(1, Ordering::Relaxed);
    }

    /// The primary's live durable watermark (`Engine::durable_records`); set once, by the
    /// replicator at start (a later call keeps the first).
    pub fn watch_durable_records(&self, durable_records: DurableRecords) {
        let _ = self.durable_records.set(durable_records);
    }

    pub fn add_shipped(&self, objects: u64, bytes: u64) {
        self.objects_total.fetch_add(objects, Ordering::Relaxed);
        self.bytes_total.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn snapshot(&self, now_unix_ms: u64) -> ReplicationSnapshot {
        let load = |value: &AtomicU64| value.load(Ordering::Relaxed);
        let shipped_cut = load(&self.shipped_cut_unix_ms);
        let records = load(&self.records);
        // As of the last cut, and at least the log records made durable since what shipped
        // (their payloads' bytes are counted at the next cut). A standby has no probe: its
        // backlog is what is listed and not applied.
        let unshipped_records = self
            .durable_records
            .get()
            .map_or(0, |durable| durable().saturating_sub(records));
        let lag_bytes = load(&self.lag_bytes).max(unshipped_records * LOG_RECORD_BYTES as u64);
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
            role: self.role(),
            records,
            records_unix_ms: shipped_cut,
            backlog_objects: load(&self.backlog_objects),
            segment_bytes_max: load(&self.segment_bytes_max),
            promoting: self.promoting.load(Ordering::Relaxed),
            rejoining: self.rejoining.load(Ordering::Relaxed),
            target: get_text(&self.target),
            primary: get_text(&self.primary),
            reason: get_text(&self.reason),
        }
    }
}

fn set_text(cell: &Mutex<String>, text: &str) {
    let mut end = text.len().min(REPLICATION_TEXT_BYTES_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    // A writer that panicked left a whole String behind: the text is still usable.
    let mut guard = cell
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    guard.clear();
    guard.push_str(&text[..end]);
}

fn get_text(cell: &Mutex<String>) -> String {
    cell.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// `url` without `user:password@` after its scheme and without a query (`?…`): what may be
/// shown to anyone who can read the figures.
pub fn without_credentials(url: &str) -> String {
    let url = url.split_once('?').map_or(url, |(before, _)| before);
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
}

pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_queries_never_reach_the_figures() {
        assert_eq!(
            without_credentials("s3://key:secret@bucket/prefix?region=x"),
            "s3://bucket/prefix"
        );
        assert_eq!(without_credentials("s3://bucket/a@b"), "s3://bucket/a@b");
        assert_eq!(
            without_credentials("file:///srv/replica"),
            "file:///srv/replica"
        );
        let stats = ReplicationStats::default();
        stats.set_target("s3://AKIA:wJalr@bucket/p");
        assert_eq!(stats.snapshot(0).target, "s3://bucket/p");
    }

    #[test]
    fn a_long_reason_is_cut_at_a_character_boundary() {
        let stats = ReplicationStats::default();
        stats.set_reason(&"é".repeat(REPLICATION_TEXT_BYTES_MAX));
        let reason = stats.snapshot(0).reason;
        assert_eq!(reason.len(), REPLICATION_TEXT_BYTES_MAX);
        assert!(reason.chars().all(|c| c == 'é'));
    }
}
