//! Taking a replica's prefix over from its primary (decision 0031 §7): the steps a standby
//! takes to become the primary, each a create-only write the object store decides.
//!
//! Built so far (build plan step 1), for `ctxstore-server promote`:
//! 1. **Take the epoch**: `epoch/E+1`, create-only (`take_epoch`). Another's bytes there:
//!    someone else took the prefix first, and this taker stays a standby.
//! 2. **Seal** the followed generation (`try_seal`, driven by `follow.rs`, which applies what
//!    it finds): an empty segment marked `seal` at the generation's next key, create-only.
//!    When the create succeeds, the generation ends there: the old primary's next create at
//!    that key finds the seal and is fenced, whatever its timing, and every segment it created
//!    before is one the taker applied. A segment found there instead is applied, and the next
//!    key tried.
//! 3. **Fork** (`ship.rs` `attach`, told the epoch): the next generation, its parent the last
//!    restore point before the seal.
//!
//! The lease, the watch and the wait (§4–§7) come with `--auto-promote`.

use bytes::Bytes;

use crate::error::ReplicaError;
use crate::format::{EpochRecord, ReplicaId, SegmentHeader, decode_segment, encode_segment};
use crate::layout::Key;
use crate::remote::{Created, Remote};
use crate::stats::now_unix_ms;

/// Who takes an epoch: written into its record, so that standbys' NOT_PRIMARY answers and a
/// fenced primary's log name the primary.
#[derive(Clone, Debug)]
pub struct Taker {
    pub replica_id: ReplicaId,
    /// `host:pid`.
    pub holder: String,
    /// Where clients reach it (empty: not said).
    pub advertise: String,
}

/// Takes the next epoch with a create-only PUT (`generation`: the one the taker continues or
/// forks from, recorded for operators). Another primary's epoch object at the same number
/// means it won the race, and this taker is fenced.
pub async fn take_epoch(
    remote: &Remote,
    taker: &Taker,
    generation: u32,
) -> Result<u64, ReplicaError> {
    let epoch = crate::catalog::epochs(remote)
        .await?
        .last()
        .copied()
        .unwrap_or(0)
        + 1;
    let record = EpochRecord {
        epoch,
        replica_id: taker.replica_id,
        generation,
        nonce: random_nonce(),
        taken_unix_ms: now_unix_ms(),
        holder: taker.holder.clone(),
        advertise: taker.advertise.clone(),
    };
    match remote
        .create(Key::Epoch(epoch), Bytes::from(record.encode()))
        .await?
    {
        Created::Ours => Ok(epoch),
        Created::Theirs(found) => {
            let what = remote.path(Key::Epoch(epoch)).to_string();
            let theirs = EpochRecord::decode(&found, &what)?;
            Err(ReplicaError::Fenced {
                location: remote.location.clone(),
                epoch,
                holder: theirs.holder,
            })
        }
    }
}

/// What a try to seal at one key found.
#[derive(Debug)]
pub enum SealTry {
    /// The seal is ours: the generation ends at this key.
    Sealed,
    /// The old primary created a segment there first: apply it, then try the next key.
    Segment,
    /// Another taker's seal is there already (its header): the generation ended at this key.
    SealedBefore(Box<SegmentHeader>),
}

/// Creates `seal` (a header from `SegmentHeader::seal`) at its key, create-only.
pub async fn try_seal(remote: &Remote, seal: &SegmentHeader) -> Result<SealTry, ReplicaError> {
    assert!(seal.seal && !seal.continues && seal.body_bytes == 0);
    let key = Key::Segment {
        generation: seal.generation,
        seq: seal.seq,
    };
    let bytes = Bytes::from(encode_segment(seal, &[]));
    match remote.create(key, bytes).await? {
        Created::Ours => Ok(SealTry::Sealed),
        Created::Theirs(found) => {
            let what = remote.path(key).to_string();
            let (header, _) = decode_segment(&found, &what)?;
            crate::catalog::check_segment_key(&header, seal.generation, seal.seq, what)?;
            if header.seal {
                Ok(SealTry::SealedBefore(Box::new(header)))
            } else {
                Ok(SealTry::Segment)
            }
        }
    }
}

/// The error of a primary of `epoch` that found `found` at its next segment key `key`: a seal
/// names the standby promoted over it (its epoch record's holder), anything else the writer.
pub async fn fenced_by(remote: &Remote, epoch: u64, key: Key, found: &[u8]) -> ReplicaError {
    let what = remote.path(key).to_string();
    let (epoch, holder) = match decode_segment(found, &what) {
        Ok((header, _)) if header.seal => {
            tracing::error!(
                key = %what,
                epoch = header.epoch,
                "a standby was promoted: its seal ends this primary's generation"
            );
            let holder = match crate::catalog::epoch_record(remote, header.epoch).await {
                Ok(Some(record)) => primary_named(&record),
                _ => format!("the standby that sealed {what}"),
            };
            (header.epoch, holder)
        }
        Ok((header, _)) => (
            header.epoch.max(epoch),
            format!(
                "another writer of {what}, a primary of epoch {}",
                header.epoch
            ),
        ),
        Err(_) => (epoch, format!("another writer of {what}")),
    };
    ReplicaError::Fenced {
        location: remote.location.clone(),
        epoch,
        holder,
    }
}

/// The primary an epoch record names, as a fenced primary's NOT_PRIMARY says it: where
/// clients reach it, then its process (decision 0031 §8).
pub(crate) fn primary_named(record: &crate::format::EpochRecord) -> String {
    if record.advertise.is_empty() {
        record.holder.clone()
    } else {
        format!("{} ({})", record.advertise, record.holder)
    }
}

/// A 128-bit value no other taker writes (an epoch record's nonce): the time and the process,
/// spread by BLAKE3.
pub(crate) fn random_nonce() -> u128 {
    let seed = format!("{:?}:{}", std::time::Instant::now(), std::process::id());
    let hash = blake3::hash(seed.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&hash.as_bytes()[..16]);
    u128::from_le_bytes(bytes)
}

/// This process, as an epoch's holder: `host:pid`.
pub(crate) fn holder() -> String {
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    format!("{host}:{}", std::process::id())
}
