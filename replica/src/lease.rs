//! The prefix's lease (decision 0031 §4): `PREFIX/lease`, the one object written more than
//! once, and only by conditional write (`Remote::swap`: `If-Match` on S3, a compare under a
//! lock on `file://`). Who holds it may write to the prefix; it renews every third of its
//! lease time; a taker replaces the version it watched lapse.
//!
//! Built so far (build plan step 4, its object): creating or taking the lease, renewing it,
//! releasing it, each decided by the object store, and every outcome known — a write whose
//! answer was lost is read back and recognised by its holder's nonce (`LeaseRecord`), so a
//! renewal that landed late is the holder's own, never another's. The lease thread (its
//! timing on the boot clock, the ack gate) and the standbys' watch come next.

use bytes::Bytes;

use crate::error::ReplicaError;
use crate::format::{LeaseRecord, LeaseState};
use crate::layout::Key;
use crate::remote::{Remote, Swapped, Versioned};
use crate::stats::now_unix_ms;

/// The lease as last read: its record and the version a conditional write names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub record: LeaseRecord,
    pub version: String,
}

/// What `acquire` found.
#[derive(Debug)]
pub enum Acquired {
    /// This process holds the lease now.
    Ours(LeaseHolder),
    /// Another holds it: the caller watches it lapse before it may take it (decision 0031 §7).
    Held(Seen),
}

/// What a renewal came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Renewed: the new version is stored.
    Renewed,
    /// Not renewed this time, the lease still ours as far as the store shows (an earlier
    /// renewal of ours landed late, and is now the version renewals name): try again.
    Retry,
    /// Another wrote the lease (a taker): this holder holds it no more.
    Lost(Option<Box<Seen>>),
}

/// The lease this process holds, as it last wrote it.
#[derive(Debug)]
pub struct LeaseHolder {
    remote: Remote,
    held: Seen,
}

/// Reads the lease; `None` when the prefix has none.
pub async fn read(remote: &Remote) -> Result<Option<Seen>, ReplicaError> {
    let Some(found) = remote.get_versioned(Key::Lease).await? else {
        return Ok(None);
    };
    Ok(Some(seen(remote, found)?))
}

fn seen(remote: &Remote, found: Versioned) -> Result<Seen, ReplicaError> {
    let what = remote.path(Key::Lease).to_string();
    Ok(Seen {
        record: LeaseRecord::decode(&found.bytes, &what)?,
        version: found.version,
    })
}

/// Takes the prefix's lease for `me` (its nonce, holder, store, lease time; `renewal` is set
/// here) where no one else may hold it: none exists (created, `If-None-Match`), it was
/// released, or it is this store's own (`me.store`: the store's directory is locked by this
/// process, so the previous holder of that store is gone). Another's held lease is `Held`.
pub async fn acquire(remote: &Remote, me: LeaseRecord) -> Result<Acquired, ReplicaError> {
    match read(remote).await? {
        None => create(remote, me).await,
        Some(current)
            if current.record.state == LeaseState::Released || current.record.store == me.store =>
        {
            take(remote, &current, me).await
        }
        Some(current) => Ok(Acquired::Held(current)),
    }
}

async fn create(remote: &Remote, me: LeaseRecord) -> Result<Acquired, ReplicaError> {
    write_taken(remote, None, me).await
}

/// Replaces the version `current` with `me` (`If-Match`): exactly one taker of a version
/// wins. `Held` with what is there now when another wrote it first.
pub async fn take(
    remote: &Remote,
    current: &Seen,
    me: LeaseRecord,
) -> Result<Acquired, ReplicaError> {
    write_taken(remote, Some(&current.version), me).await
}

/// `me` written as a lease just taken (held, renewal 0) where the key holds `expected` (none:
/// where there is no lease yet).
async fn write_taken(
    remote: &Remote,
    expected: Option<&str>,
    me: LeaseRecord,
) -> Result<Acquired, ReplicaError> {
    let record = LeaseRecord {
        state: LeaseState::Held,
        renewal: 0,
        written_unix_ms: now_unix_ms(),
        ..me
    };
    let bytes = Bytes::from(record.encode());
    match remote.swap(Key::Lease, expected, bytes).await? {
        Swapped::Ours(stored) => Ok(Acquired::Ours(LeaseHolder {
            remote: remote.clone(),
            held: Seen {
                record,
                version: stored.version,
            },
        })),
        Swapped::Theirs(Some(found)) => Ok(Acquired::Held(seen(remote, found)?)),
        Swapped::Theirs(None) => Err(ReplicaError::Invalid(format!(
            "{}: the lease was refused, yet no lease is there (it went away meanwhile)",
            remote.path(Key::Lease)
        ))),
    }
}

impl LeaseHolder {
    /// The lease as this holder last wrote it.
    pub fn held(&self) -> &Seen {
        &self.held
    }

    /// One renewal: the next renewal number, `If-Match` the version last written.
    pub async fn renew(&mut self) -> Result<Renewal, ReplicaError> {
        let record = LeaseRecord {
            renewal: self.held.record.renewal + 1,
            written_unix_ms: now_unix_ms(),
            ..self.held.record.clone()
        };
        self.write(record).await
    }

    /// Gives the lease up (`released`): a taker need not wait out the lease. The holder must
    /// have stopped acknowledging first.
    pub async fn release(mut self) -> Result<Renewal, ReplicaError> {
        let record = LeaseRecord {
            state: LeaseState::Released,
            renewal: self.held.record.renewal + 1,
            written_unix_ms: now_unix_ms(),
            ..self.held.record.clone()
        };
        self.write(record).await
    }

    async fn write(&mut self, record: LeaseRecord) -> Result<Renewal, ReplicaError> {
        let bytes = Bytes::from(record.encode());
        let swapped = self
            .remote
            .swap(Key::Lease, Some(&self.held.version), bytes)
            .await?;
        match swapped {
            Swapped::Ours(stored) => {
                self.held = Seen {
                    record,
                    version: stored.version,
                };
                Ok(Renewal::Renewed)
            }
            Swapped::Theirs(None) => Ok(Renewal::Lost(None)),
            Swapped::Theirs(Some(found)) => {
                let found = seen(&self.remote, found)?;
                if found.record.holder_nonce == self.held.record.holder_nonce
                    && found.record.renewal > self.held.record.renewal
                {
                    // A renewal of ours whose answer was lost landed after it was read back.
                    self.held = found;
                    return Ok(Renewal::Retry);
                }
                Ok(Renewal::Lost(Some(Box::new(found))))
            }
        }
    }
}

/// What the lease thread tells the store it guards (the engine's ack gate, wired by the
/// shipper), and the clock it decides by.
pub struct KeeperHooks {
    /// Boot-clock now, nanoseconds (`ctxstore_engine::clock`: CLOCK_BOOTTIME, which counts
    /// suspended time and never jumps with the wall clock).
    pub now_ns: fn() -> u64,
    /// The holder may acknowledge until this boot time, nanoseconds (its last renewal's send
    /// time plus L − m, decision 0031 §5).
    pub open_until: Box<dyn Fn(u64) + Send>,
    /// The lease was lost (`who` holds it now): close for good.
    pub lost: Box<dyn Fn(String) + Send>,
}

impl std::fmt::Debug for KeeperHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeeperHooks").finish_non_exhaustive()
    }
}

/// The lease's timing, from its lease time L (decision 0031 §4–§5): renewals every L/3, a
/// failed one retried every L/12, each request bounded by L/6, and the margin m = L/20 both
/// sides keep (it covers clock rates off by up to 5 %).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    pub lease: std::time::Duration,
}

impl LeaseTiming {
    pub fn margin(self) -> std::time::Duration {
        self.lease / 20
    }
    pub fn renew_every(self) -> std::time::Duration {
        self.lease / 3
    }
    pub fn retry_every(self) -> std::time::Duration {
        self.lease / 12
    }
    pub fn request_timeout(self) -> std::time::Duration {
        self.lease / 6
    }
    /// How long after a renewal was sent its holder may still acknowledge: L − m.
    pub fn open_for(self) -> std::time::Duration {
        self.lease - self.margin()
    }
    /// How long a taker waits, after it first saw a version, before it may take it: L + m.
    pub fn lapse_after(self) -> std::time::Duration {
        self.lease + self.margin()
    }
}

/// The primary's lease thread (`ctxstore-lease`, not niced: a starved renewer would fence a
/// healthy primary): renews on its own runtime and client, so a slow segment upload never
/// delays a renewal; tells the gate how long it may acknowledge; on a lost lease, closes it.
#[derive(Debug)]
pub struct LeaseKeeper {
    stopping: std::sync::Arc<std::sync::atomic::AtomicBool>,
    wake: std::sync::Arc<tokio::sync::Notify>,
    thread: Option<std::thread::JoinHandle<Option<LeaseHolder>>>,
}

impl LeaseKeeper {
    /// Starts renewing `holder`'s lease, taken (or last renewed) at boot time `taken_ns`.
    pub fn start(
        holder: LeaseHolder,
        timing: LeaseTiming,
        taken_ns: u64,
        hooks: KeeperHooks,
    ) -> Result<LeaseKeeper, ReplicaError> {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        let stopping = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(tokio::sync::Notify::new());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| ReplicaError::io("tokio runtime", source))?;
        (hooks.open_until)(taken_ns.saturating_add(nanos(timing.open_for())));
        let thread = {
            let stopping = stopping.clone();
            let wake = wake.clone();
            std::thread::Builder::new()
                .name("ctxstore-lease".into())
                .spawn(move || runtime.block_on(renew_loop(holder, timing, hooks, stopping, wake)))
                .map_err(|source| ReplicaError::io("ctxstore-lease thread", source))?
        };
        Ok(LeaseKeeper {
            stopping,
            wake,
            thread: Some(thread),
        })
    }

    /// Stops renewing; answers the holder while it still holds the lease (to release it once
    /// the store stopped acknowledging).
    pub fn stop(mut self) -> Option<LeaseHolder> {
        self.stop_thread()
    }

    fn stop_thread(&mut self) -> Option<LeaseHolder> {
        self.stopping
            .store(true, std::sync::atomic::Ordering::Release);
        self.wake.notify_one();
        self.thread
            .take()
            .and_then(|thread| thread.join().ok().flatten())
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        let _ = self.stop_thread();
    }
}

fn nanos(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Renews until stopped or lost (see `LeaseKeeper`). Answers the holder when stopped.
async fn renew_loop(
    mut holder: LeaseHolder,
    timing: LeaseTiming,
    hooks: KeeperHooks,
    stopping: std::sync::Arc<std::sync::atomic::AtomicBool>,
    wake: std::sync::Arc<tokio::sync::Notify>,
) -> Option<LeaseHolder> {
    use std::sync::atomic::Ordering;
    let mut pause = timing.renew_every();
    loop {
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = wake.notified() => {}
        }
        if stopping.load(Ordering::Acquire) {
            return Some(holder);
        }
        // Sent now: the deadline counts from before the request (and its retries).
        let sent_ns = (hooks.now_ns)();
        let renewed = tokio::time::timeout(timing.request_timeout(), holder.renew()).await;
        pause = match renewed {
            Ok(Ok(Renewal::Renewed)) => {
                (hooks.open_until)(sent_ns.saturating_add(nanos(timing.open_for())));
                timing.renew_every()
            }
            Ok(Ok(Renewal::Retry)) => timing.retry_every(),
            Ok(Ok(Renewal::Lost(seen))) => {
                // Named by the address clients reach it at (decision 0031 §8: NOT_PRIMARY
                // sends writes there), with its process for the log.
                let who = seen.map_or_else(
                    || "no one (the lease object was deleted)".to_string(),
                    |seen| {
                        let record = &seen.record;
                        match (record.advertise.is_empty(), record.epoch) {
                            (true, 0) => record.holder.clone(),
                            (true, epoch) => format!("{} (epoch {epoch})", record.holder),
                            (false, 0) => format!("{} ({})", record.advertise, record.holder),
                            (false, epoch) => {
                                format!("{} ({}, epoch {epoch})", record.advertise, record.holder)
                            }
                        }
                    },
                );
                tracing::error!(holder = %who, "the lease was taken: this primary acknowledges nothing more");
                (hooks.lost)(who);
                return None;
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, retry_in = ?timing.retry_every(), "renewing the lease failed");
                timing.retry_every()
            }
            Err(_) => {
                tracing::warn!(timeout = ?timing.request_timeout(), "renewing the lease timed out");
                timing.retry_every()
            }
        };
    }
}

/// The lease for a primary starting on the prefix (decision 0031 §7): none, released, or its
/// own store's is taken at once; another's is watched for its own L + m (on this process's
/// boot clock, from the answer that showed the version): renewed meanwhile, the prefix is
/// held and the start is refused, naming the holder; unchanged, it lapsed and is taken.
/// Answers the holder and the boot time the take was sent (its deadline counts from it).
pub async fn acquire_watching(
    remote: &Remote,
    me: LeaseRecord,
    now_ns: fn() -> u64,
) -> Result<(LeaseHolder, u64), ReplicaError> {
    let sent_ns = now_ns();
    let seen = match acquire(remote, me.clone()).await? {
        Acquired::Ours(holder) => return Ok((holder, sent_ns)),
        Acquired::Held(seen) => seen,
    };
    let seen_ns = now_ns();
    let timing = LeaseTiming {
        lease: std::time::Duration::from_millis(u64::from(seen.record.lease_ms)),
    };
    tracing::warn!(
        holder = %seen.record.holder,
        wait = ?timing.lapse_after(),
        "the replica's lease is another's: waiting to see whether it is renewed"
    );
    let lapse_ns = seen_ns.saturating_add(nanos(timing.lapse_after()));
    loop {
        let left = lapse_ns.saturating_sub(now_ns());
        if left == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_nanos(left).min(timing.request_timeout()))
            .await;
        match read(remote).await? {
            Some(now) if now.version == seen.version => {}
            Some(now) if now.record.state == LeaseState::Released => {
                return Box::pin(acquire_watching(remote, me, now_ns)).await;
            }
            now => {
                let holder = now.map_or_else(|| "no one".into(), |now| now.record.holder);
                return Err(ReplicaError::LeaseHeld {
                    location: remote.location.clone(),
                    holder,
                });
            }
        }
    }
    let sent_ns = now_ns();
    match take(remote, &seen, me).await? {
        Acquired::Ours(holder) => Ok((holder, sent_ns)),
        Acquired::Held(now) => Err(ReplicaError::LeaseHeld {
            location: remote.location.clone(),
            holder: now.record.holder,
        }),
    }
}
