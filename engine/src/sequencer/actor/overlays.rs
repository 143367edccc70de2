//! The sequencer's rules for overlays (decision 0012): a patch or a redaction of a durable
//! turn is one overlay record; a purge redacts every turn naming the blob, the part past the
//! caller's scan included, then writes the purge record.

use crate::error::EngineError;
use crate::format::context_meta::{ContextMeta, OverlayKind};
use crate::format::turn_log::TurnRecord;
use crate::ids::{BlobHash, ContextId, TurnId};
use crate::model::{Overlaid, Purged};
use crate::sequencer::actor::SequencerActor;
use crate::store_dir::now_unix_ms;

impl SequencerActor {
    /// Patches or redacts a durable turn (decision 0012): one overlay record whose id is the
    /// overlay's sequence number, naming the turn's own context (deleted or not: overlays
    /// are about turns, which outlive their context while something reaches them).
    pub(super) fn overlay(
        &mut self,
        turn_id: TurnId,
        kind: OverlayKind,
    ) -> Result<Overlaid, EngineError> {
        self.check_takes_ids(false)?;
        if turn_id.0 > self.published.turns.durable_record_id() {
            // Only a durable turn can be named: no one can know of any other.
            return Err(EngineError::TurnNotFound(turn_id));
        }
        let turn = self.turn(turn_id)?;
        self.contexts.overlays.check(turn_id)?;
        if let OverlayKind::Patch { hash, .. } = kind {
            self.gc.name_blob(&hash)?;
            // The pipeline made the patch's blob durable before it got here.
            assert!(
                self.published.shard_of(&hash).contains(&hash),
                "blob {hash} of a patch is not durable"
            );
        }
        let seq = self.push_overlay(&turn, kind);
        Ok(Overlaid {
            turn: self.contexts.overlays.view(&turn, None),
            overlay_seq: seq,
        })
    }

    /// Writes and applies one overlay record; returns its sequence number.
    fn push_overlay(&mut self, turn: &TurnRecord, kind: OverlayKind) -> u64 {
        let seq = self.next_record_id;
        let change = ContextMeta::Overlay {
            turn_id: turn.turn_id,
            kind,
        };
        let now = now_unix_ms();
        self.push_meta(turn.context_id, &change, now);
        let applied = self.contexts.overlays.apply(seq, turn.turn_id, kind);
        assert!(applied.is_ok(), "checked overlay refused: {applied:?}");
        // A redacted turn's vectors go with its bytes: out of every search and the graph.
        if kind == OverlayKind::Redact {
            self.contexts.vector_indexes.turn_redacted(turn.turn_id);
        }
        seq
    }

    /// One part of a purge (`SequencerRequest::Purge`): redacts `turns` — and, in the last
    /// part, every turn that names `hash` past the caller's scan or through a patch — then
    /// writes the purge record. All in this batch: acknowledged together.
    pub(super) fn purge(
        &mut self,
        hash: BlobHash,
        mut turns: Vec<TurnId>,
        scanned_upto: Option<u64>,
    ) -> Result<Purged, EngineError> {
        self.check_takes_ids(false)?;
        if let Some(scanned_upto) = scanned_upto {
            // Records the caller did not scan: few (it scans until the gap is small), read
            // from the durable log (page-cache hits) and this batch.
            for record_id in scanned_upto + 1..self.next_record_id {
                if let Ok(turn) = self.turn_record(TurnId(record_id))
                    && turn.payload_hash == hash
                {
                    turns.push(turn.turn_id);
                }
            }
            for (turn_id, overlays) in self.contexts.overlays.iter() {
                let patched = overlays.iter().any(|overlay| {
                    matches!(overlay.kind, OverlayKind::Patch { hash: patch, .. } if patch == hash)
                });
                if patched {
                    turns.push(turn_id);
                }
            }
        }
        turns.sort_unstable();
        turns.dedup();
        let mut redacted = 0;
        for turn_id in turns {
            // Collected (its bytes go anyway), redacted already, or not a turn at all: no
            // redaction to write.
            let Ok(turn) = self.turn(turn_id) else {
                continue;
            };
            if self.contexts.overlays.is_redacted(turn_id) {
                continue;
            }
            self.push_overlay(&turn, OverlayKind::Redact);
            redacted += 1;
        }
        let mut overlay_seq = self.next_record_id;
        if scanned_upto.is_some() {
            self.push_meta(ContextId(0), &ContextMeta::Purge(hash), now_unix_ms());
            self.contexts.overlays.purge(hash);
        } else {
            overlay_seq -= 1;
        }
        Ok(Purged {
            payload_hash: hash,
            turns_redacted: redacted,
            overlay_seq,
        })
    }
}
