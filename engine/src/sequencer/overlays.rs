//! Overlays (issue 15 item 4, decision 0012) as the sequencer keeps them: per turn, its patches
//! and its redaction in sequence order, plus the blobs a purge removed. Turns are immutable;
//! an overlay changes how a turn *reads*: a patch gives it another payload from its sequence
//! number on, a redaction takes its payload away in every view (a compliance delete must not
//! come back through an old view). The same rules serve the live path (`check`: typed errors)
//! and replay (a record that breaks them is damage).
//!
//! The maps are persistent (`imbl`) and live inside `Contexts`, so they are published with
//! the contexts snapshot after each durable batch, rolled back with it, and handed to the
//! garbage collector's mark with it.

use std::sync::Arc;

use crate::error::EngineError;
use crate::format::context_meta::OverlayKind;
use crate::format::turn_log::TurnRecord;
use crate::ids::{BlobHash, TurnId};
use crate::model::Turn;
use crate::sequencer::dead::DeadTurns;

/// Overlays one turn may carry (patches and its redaction): bounds the memory a turn costs
/// (~48 bytes per overlay) and the work a read of it does.
pub const OVERLAYS_PER_TURN_MAX: usize = 1000;

/// One overlay of a turn.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Overlay {
    /// The record id of its overlay record in `turns.log`: monotonic, durable, unique.
    pub seq: u64,
    pub kind: OverlayKind,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Overlays {
    /// Per turn, oldest first; a redaction, when there is one, is last (nothing follows it).
    by_turn: imbl::HashMap<TurnId, Arc<[Overlay]>>,
    /// Blobs purged and not named by any record since: GET_BLOB, HAS_BLOBS and appends by
    /// hash treat them as absent.
    purged: imbl::HashSet<BlobHash>,
}

impl Overlays {
    /// A turn's overlays, oldest first (empty when it has none).
    pub fn of(&self, turn_id: TurnId) -> &[Overlay] {
        self.by_turn.get(&turn_id).map_or(&[], |overlays| overlays)
    }

    pub fn is_redacted(&self, turn_id: TurnId) -> bool {
        self.of(turn_id)
            .last()
            .is_some_and(|overlay| overlay.kind == OverlayKind::Redact)
    }

    /// Every turn with overlays, and them.
    pub fn iter(&self) -> impl Iterator<Item = (TurnId, &[Overlay])> + '_ {
        self.by_turn
            .iter()
            .map(|(turn_id, overlays)| (*turn_id, &overlays[..]))
    }

    /// Whether `turn_id` may take another overlay: not once redacted (a redaction is final:
    /// a second one, or a patch after it, is refused), and not past the per-turn limit.
    pub fn check(&self, turn_id: TurnId) -> Result<(), EngineError> {
        if self.is_redacted(turn_id) {
            return Err(EngineError::Redacted(turn_id));
        }
        if self.of(turn_id).len() >= OVERLAYS_PER_TURN_MAX {
            return Err(EngineError::Limit {
                what: "overlays per turn",
                limit: OVERLAYS_PER_TURN_MAX,
            });
        }
        Ok(())
    }

    /// Adds an overlay (checked by `check`, or replayed). A patch names its blob: a purge of
    /// those bytes no longer hides them.
    pub fn apply(
        &mut self,
        seq: u64,
        turn_id: TurnId,
        kind: OverlayKind,
    ) -> Result<(), EngineError> {
        self.check(turn_id)?;
        let mut overlays: Vec<Overlay> = self.of(turn_id).to_vec();
        assert!(
            overlays.last().is_none_or(|last| last.seq < seq),
            "overlays of turn {turn_id} in sequence order"
        );
        overlays.push(Overlay { seq, kind });
        self.by_turn.insert(turn_id, overlays.into());
        if let OverlayKind::Patch { hash, .. } = kind {
            self.named(&hash);
        }
        Ok(())
    }

    /// A purge removed `hash`: reads of it by hash answer not found until a record names it
    /// again.
    pub fn purge(&mut self, hash: BlobHash) {
        self.purged.insert(hash);
    }

    pub fn is_purged(&self, hash: &BlobHash) -> bool {
        !self.purged.is_empty() && self.purged.contains(hash)
    }

    /// A record names `hash` (a turn's payload, a patch, a key-value value): content written
    /// after a purge is new content, readable again.
    pub fn named(&mut self, hash: &BlobHash) {
        if self.is_purged(hash) {
            self.purged.remove(hash);
        }
    }

    /// Collected turns take their overlays with them (memory; the records stay in the log).
    pub fn forget_dead(&mut self, dead: &DeadTurns) {
        let gone: Vec<TurnId> = self
            .by_turn
            .keys()
            .filter(|turn_id| dead.contains(**turn_id))
            .copied()
            .collect();
        for turn_id in gone {
            self.by_turn.remove(&turn_id);
        }
    }

    /// The turn as a read returns it: as appended, with the latest patch up to `as_of`
    /// (`None`: the latest of all), or redacted — in every view, whatever `as_of`.
    pub fn view(&self, record: &TurnRecord, as_of: Option<u64>) -> Turn {
        let mut turn = Turn::from(*record);
        let overlays = self.of(record.turn_id);
        if let Some(last) = overlays.last()
            && last.kind == OverlayKind::Redact
        {
            turn.redacted = true;
            turn.overlay_seq = last.seq;
            turn.payload_hash = BlobHash::EMPTY;
            turn.payload_len = 0;
            return turn;
        }
        let shown = overlays
            .iter()
            .rev()
            .find(|overlay| as_of.is_none_or(|as_of| overlay.seq <= as_of));
        if let Some(Overlay {
            seq,
            kind: OverlayKind::Patch { hash, len },
        }) = shown
        {
            turn.overlay_seq = *seq;
            turn.payload_hash = *hash;
            turn.payload_len = *len;
        }
        turn
    }

    /// Every blob an overlay view may read for `turn_id` besides its original payload (its
    /// patches), or `None` when it is redacted (no view reads any of them).
    pub fn patch_blobs(&self, turn_id: TurnId) -> Option<impl Iterator<Item = BlobHash> + '_> {
        if self.is_redacted(turn_id) {
            return None;
        }
        Some(patches(self.of(turn_id)))
    }

    /// The blobs of every patch of `turn_id`, redacted or not (what a collected or redacted
    /// turn lets go).
    pub fn all_patch_blobs(&self, turn_id: TurnId) -> impl Iterator<Item = BlobHash> + '_ {
        patches(self.of(turn_id))
    }

    /// The purged blobs not named again.
    pub fn purged(&self) -> impl Iterator<Item = &BlobHash> + '_ {
        self.purged.iter()
    }
}

fn patches(overlays: &[Overlay]) -> impl Iterator<Item = BlobHash> + '_ {
    overlays.iter().filter_map(|overlay| match overlay.kind {
        OverlayKind::Patch { hash, .. } => Some(hash),
        OverlayKind::Redact => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ContextId;

    fn record(turn_id: u64) -> TurnRecord {
        TurnRecord {
            turn_id: TurnId(turn_id),
            parent_turn_id: TurnId::NONE,
            context_id: ContextId(1),
            depth: 0,
            type_tag: 0,
            codec: 0,
            payload_hash: BlobHash::of(b"original"),
            payload_len: 8,
            flags: 0,
            created_at_unix_ms: 0,
            skip_turn_id: TurnId::NONE,
            context_prev_turn_id: TurnId::NONE,
            summary_turn_id: TurnId::NONE,
            extras_len: 0,
        }
    }

    #[test]
    fn views_by_sequence_and_redaction_in_every_view() {
        let turn = record(5);
        let mut overlays = Overlays::default();
        let first = BlobHash::of(b"first");
        let second = BlobHash::of(b"second!");
        overlays
            .apply(
                10,
                turn.turn_id,
                OverlayKind::Patch {
                    hash: first,
                    len: 5,
                },
            )
            .expect("patch");
        overlays
            .apply(
                20,
                turn.turn_id,
                OverlayKind::Patch {
                    hash: second,
                    len: 7,
                },
            )
            .expect("patch");
        let latest = overlays.view(&turn, None);
        assert_eq!((latest.payload_hash, latest.overlay_seq), (second, 20));
        let at_15 = overlays.view(&turn, Some(15));
        assert_eq!((at_15.payload_hash, at_15.overlay_seq), (first, 10));
        let original = overlays.view(&turn, Some(9));
        assert_eq!(
            (
                original.payload_hash,
                original.overlay_seq,
                original.payload_len
            ),
            (turn.payload_hash, 0, 8)
        );
        overlays
            .apply(30, turn.turn_id, OverlayKind::Redact)
            .expect("redact");
        for as_of in [None, Some(1), Some(15), Some(30)] {
            let view = overlays.view(&turn, as_of);
            assert!(view.redacted);
            assert_eq!(
                (view.payload_hash, view.payload_len, view.overlay_seq),
                (BlobHash::EMPTY, 0, 30)
            );
        }
        assert!(matches!(
            overlays.check(turn.turn_id),
            Err(EngineError::Redacted(_))
        ));
        assert!(overlays.patch_blobs(turn.turn_id).is_none());
        assert_eq!(
            overlays.all_patch_blobs(turn.turn_id).collect::<Vec<_>>(),
            vec![first, second]
        );
    }

    #[test]
    fn a_purge_hides_a_blob_until_named_again() {
        let mut overlays = Overlays::default();
        let hash = BlobHash::of(b"secret");
        overlays.purge(hash);
        assert!(overlays.is_purged(&hash));
        overlays
            .apply(3, TurnId(2), OverlayKind::Patch { hash, len: 6 })
            .expect("patch");
        assert!(!overlays.is_purged(&hash));
    }
}
