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
    let record = LeaseRecord {
        state: LeaseState::Held,
        renewal: 0,
        written_unix_ms: now_unix_ms(),
        ..me
    };
    let bytes = Bytes::from(record.encode());
    match remote.swap(Key::Lease, None, bytes).await? {
        Swapped::Ours(stored) => Ok(Acquired::Ours(LeaseHolder {
            remote: remote.clone(),
            held: Seen {
                record,
                version: stored.version,
            },
        })),
        Swapped::Theirs(Some(found)) => Ok(Acquired::Held(seen(remote, found)?)),
        Swapped::Theirs(None) => Err(ReplicaError::Invalid(format!(
            "{}: creating the lease was refused, yet no lease is there",
            remote.path(Key::Lease)
        ))),
    }
}

/// Replaces the version `current` with `me` (`If-Match`): exactly one taker of a version
/// wins. `Held` with what is there now when another wrote it first.
pub async fn take(
    remote: &Remote,
    current: &Seen,
    me: LeaseRecord,
) -> Result<Acquired, ReplicaError> {
    let record = LeaseRecord {
        state: LeaseState::Held,
        renewal: 0,
        written_unix_ms: now_unix_ms(),
        ..me
    };
    let bytes = Bytes::from(record.encode());
    match remote
        .swap(Key::Lease, Some(&current.version), bytes)
        .await?
    {
        Swapped::Ours(stored) => Ok(Acquired::Ours(LeaseHolder {
            remote: remote.clone(),
            held: Seen {
                record,
                version: stored.version,
            },
        })),
        Swapped::Theirs(Some(found)) => Ok(Acquired::Held(seen(remote, found)?)),
        Swapped::Theirs(None) => Err(ReplicaError::Invalid(format!(
            "{}: the lease went away while it was taken",
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
