//! Overlays and redaction, the caller's side (issue 15 items 4 and 5, decision 0012): patch a
//! turn's payload (the new payload stored as a blob first, durable before the record, exactly
//! like an append's), redact a turn, and purge a blob — redact every turn that names it, found
//! by a sequential scan of `turns.log` — each answered once its records are durable.
//!
//! What a redaction removes from disk is the garbage collector's part (`gc/mark.rs`): a
//! redacted turn's payload and patches are no roots, so the next collection takes them unless
//! a live, unredacted turn (or a key-value entry) still names the same bytes.

use bytes::Bytes;

use crate::engine::Engine;
use crate::engine::append::SWEPT_RETRIES_MAX;
use crate::error::EngineError;
use crate::format::context_meta::OverlayKind;
use crate::format::turn_log::LogRecord;
use crate::ids::{BlobHash, TurnId};
use crate::model::{Overlaid, Purged};
use crate::pipeline::SequencerRequest;
use crate::published::Published;

/// Redactions one purge request to the sequencer carries (one group commit): a blob named by
/// a million turns is purged in steps of this many records, appends going on in between.
pub const PURGE_TURNS_PER_REQUEST_MAX: usize = 4096;
/// A purge scans `turns.log` on the caller's thread until at most this many records are left
/// unscanned; the sequencer reads those itself (bounded work on its thread).
const PURGE_TAIL_RECORDS_MAX: u64 = 8192;
/// Where a turn record keeps its payload hash (docs/storage.md#turnslog).
const PAYLOAD_HASH_OFFSET: usize = 48;

impl Engine {
    /// Patches a turn's payload: from now on it reads with `payload` (its hash and length),
    /// while a read `as_of` an earlier overlay sequence still sees the payload it had then.
    /// NOT_FOUND for a turn that does not exist or was collected; a redacted turn is refused
    /// (`EngineError::Redacted`).
    pub async fn patch_turn(
        &self,
        turn_id: TurnId,
        payload: Bytes,
    ) -> Result<Overlaid, EngineError> {
        self.check_overlay(turn_id)?;
        self.check_blob_len(payload.len())?;
        let hash = BlobHash::of(&payload);
        let address = self.address(hash);
        let kind = OverlayKind::Patch {
            hash: address,
            len: payload.len() as u32,
        };
        // The patch's blob is durable before the record that names it; one a collection swept
        // in between is stored again (as for an append).
        let mut attempts = 0;
        let result = loop {
            self.store_blob(hash, payload.clone()).await?;
            match self.send_overlay(turn_id, kind).await {
                Err(EngineError::BlobNotFound(gone))
                    if gone == address && attempts < SWEPT_RETRIES_MAX =>
                {
                    attempts += 1;
                }
                result => break result,
            }
        };
        self.shown_overlaid(result)
    }

    /// An overlay's answer as the caller sees it: the turn with its payload's hash.
    fn shown_overlaid(
        &self,
        result: Result<Overlaid, EngineError>,
    ) -> Result<Overlaid, EngineError> {
        match result {
            Ok(overlaid) => Ok(Overlaid {
                turn: self.shown(overlaid.turn),
                ..overlaid
            }),
            Err(error) => Err(self.shown_error(error)),
        }
    }

    /// Redacts a turn: it reads without a payload in every view from now on (its parent,
    /// depth, key, labels and links stay), and the next collection removes its payload and
    /// patches from disk unless a live, unredacted turn names the same bytes. A redaction is
    /// final: redacting it again is refused (`EngineError::Redacted`).
    pub async fn redact_turn(&self, turn_id: TurnId) -> Result<Overlaid, EngineError> {
        self.check_overlay(turn_id)?;
        let result = self.send_overlay(turn_id, OverlayKind::Redact).await;
        self.shown_overlaid(result)
    }

    /// Purges a blob (the compliance path: "this content must be gone"): redacts every turn
    /// whose payload or a patch is `hash`, then records the purge; from its acknowledgement on,
    /// reads by hash (GET_BLOB, HAS_BLOBS, appends by hash) answer not found, and the next
    /// collection removes the bytes — unless a key-value entry holds the same bytes, or a
    /// turn appended after the purge sends them again (new content). NOT_FOUND when no turn
    /// ever named the blob and it is not stored.
    pub async fn purge_blob(&self, hash: BlobHash) -> Result<Purged, EngineError> {
        // Everything below works on the address: this handle's tenant's turns name it, no
        // other tenant's do.
        let purged = self.purge_address(self.address(hash)).await;
        match purged {
            Ok(purged) => Ok(Purged {
                payload_hash: hash,
                ..purged
            }),
            Err(error) => Err(self.shown_error(error)),
        }
    }

    async fn purge_address(&self, hash: BlobHash) -> Result<Purged, EngineError> {
        self.check_open()?;
        let published = &self.inner.published;
        published.status.check_writable()?;
        // Scan on this thread until what is left is small; the sequencer scans the rest.
        let mut turns = Vec::new();
        let mut scanned = 0;
        loop {
            let watermark = published.turns.durable_record_id();
            turns.extend(scan_turns_naming(published, &hash, scanned + 1, watermark)?);
            scanned = watermark;
            if published.turns.durable_record_id() - scanned <= PURGE_TAIL_RECORDS_MAX {
                break;
            }
        }
        let patched = published
            .contexts
            .load()
            .overlays
            .iter()
            .any(|(_, overlays)| {
                overlays.iter().any(|overlay| {
                    matches!(overlay.kind, OverlayKind::Patch { hash: patch, .. } if patch == hash)
                })
            });
        if turns.is_empty() && !patched && !published.shard_of(&hash).contains(&hash) {
            return Err(EngineError::BlobNotFound(hash));
        }
        let mut parts: Vec<Vec<TurnId>> = turns
            .chunks(PURGE_TURNS_PER_REQUEST_MAX)
            .map(<[TurnId]>::to_vec)
            .collect();
        let last = parts.pop().unwrap_or_default();
        let mut turns_redacted = 0;
        for part in parts {
            turns_redacted += self.send_purge(hash, part, None).await?.turns_redacted;
        }
        let done = self.send_purge(hash, last, Some(scanned)).await?;
        Ok(Purged {
            turns_redacted: turns_redacted + done.turns_redacted,
            ..done
        })
    }

    /// What the published state can refuse before anything is stored (the sequencer checks
    /// again, against its own state).
    fn check_overlay(&self, turn_id: TurnId) -> Result<(), EngineError> {
        self.check_open()?;
        let published = &self.inner.published;
        published.status.check_writable()?;
        // In scope: another tenant's turn answers as an absent one.
        self.reader().scoped_turn(turn_id)?;
        if published.contexts.load().overlays.is_redacted(turn_id) {
            return Err(EngineError::Redacted(turn_id));
        }
        Ok(())
    }

    async fn send_overlay(
        &self,
        turn_id: TurnId,
        kind: OverlayKind,
    ) -> Result<Overlaid, EngineError> {
        let (reply, answer) = oneshot::channel();
        let request = SequencerRequest::Overlay {
            turn_id,
            kind,
            reply,
        };
        (self.inner.sequencer.0.send_async(request).await).map_err(|_| EngineError::ShutDown)?;
        answer.await.map_err(|_| EngineError::ShutDown)?
    }

    async fn send_purge(
        &self,
        hash: BlobHash,
        turns: Vec<TurnId>,
        scanned_upto: Option<u64>,
    ) -> Result<Purged, EngineError> {
        let (reply, answer) = oneshot::channel();
        let request = SequencerRequest::Purge {
            hash,
            turns,
            scanned_upto,
            reply,
        };
        (self.inner.sequencer.0.send_async(request).await).map_err(|_| EngineError::ShutDown)?;
        answer.await.map_err(|_| EngineError::ShutDown)?
    }
}

/// The turns among records `first..=last` (durable) whose payload is `hash`: one sequential
/// read of 128-byte slots; a slot is decoded (checksum and all) only when its hash field
/// matches, so the scan costs a memory compare per record.
fn scan_turns_naming(
    published: &Published,
    hash: &BlobHash,
    first: u64,
    last: u64,
) -> Result<Vec<TurnId>, EngineError> {
    let mut found = Vec::new();
    if first > last {
        return Ok(found);
    }
    // The base's slots (a log compaction's) and the log's after it.
    published.turns.scan_range(first, last, |record_id, slot| {
        if slot[PAYLOAD_HASH_OFFSET..PAYLOAD_HASH_OFFSET + 32] != hash.0 {
            return Ok(());
        }
        // A turn naming the hash, or another record whose bytes happen to hold it there:
        // the decoded record says which (and a damaged one is not skipped silently).
        if let Some(LogRecord::Turn(turn)) = published.turns.record(record_id)?
            && turn.payload_hash == *hash
        {
            found.push(turn.turn_id);
        }
        Ok(())
    })?;
    Ok(found)
}
