//! The sequencer's part in garbage collection (decision 0011): answering `GcStart` after a
//! durable batch, noting what new records name until the fence, and the fence itself (the
//! gc-dead records; from then on a dead turn or a swept blob is refused).

use std::collections::HashSet;
use std::sync::Arc;

use crate::blob::condemned::Condemned;
use crate::error::EngineError;
use crate::ids::{BlobHash, BlobHashBuildHasher, ContextId, TurnId};
use crate::pipeline::{GcFenced, GcSnapshot};
use crate::sequencer::actor::SequencerActor;
use crate::sequencer::dead::DeadTurns;
use crate::store_dir::now_unix_ms;

/// The sequencer's part in garbage collection (decision 0011).
#[derive(Default)]
pub(super) struct GcState {
    /// Turns collected so far (the durable gc-dead records, and those of this batch): nothing
    /// may name them again.
    pub(super) dead: DeadTurns,
    /// The last fence's condemned blobs: a record naming a swept one is refused.
    pub(super) condemned: Option<Arc<Condemned>>,
    /// Between `GcStart` and its fence: what new records named.
    pub(super) noted: Option<Noted>,
    /// `GcStart` requests answered once the batch they joined is durable.
    pub(super) starting: Vec<oneshot::Sender<GcSnapshot>>,
}

/// Turns and blobs records named since a round's `GcStart`.
#[derive(Default)]
pub(super) struct Noted {
    pub(super) turns: HashSet<TurnId>,
    pub(super) blobs: HashSet<BlobHash, BlobHashBuildHasher>,
}

impl GcState {
    pub(super) fn note_turn(&mut self, turn_id: TurnId) {
        if let Some(noted) = &mut self.noted
            && !turn_id.is_none()
        {
            noted.turns.insert(turn_id);
        }
    }

    /// A record is about to name `hash`: noted for a round in progress; refused (not found)
    /// if the last fence's sweep took its bytes (the caller stores it again).
    pub(super) fn name_blob(&mut self, hash: &BlobHash) -> Result<(), EngineError> {
        if let Some(noted) = &mut self.noted {
            noted.blobs.insert(*hash);
        }
        match &self.condemned {
            Some(condemned) if !condemned.resurrect(hash) => Err(EngineError::BlobNotFound(*hash)),
            _ => Ok(()),
        }
    }
}

impl SequencerActor {
    /// A garbage-collection fence (`SequencerRequest::GcFence`): decided here, between the
    /// records before it and after it.
    pub(super) fn gc_fence(
        &mut self,
        dead: DeadTurns,
        condemned: Arc<Condemned>,
    ) -> Result<GcFenced, EngineError> {
        self.published.status.check_writable()?;
        let Some(noted) = self.gc.noted.take() else {
            return Err(EngineError::InvalidArgument(
                "a garbage-collection fence without a round in progress".into(),
            ));
        };
        // Someone forked, linked or appended after a turn the marker found unreachable: it is
        // reachable again, and so may be its history. The next round sees it live.
        if let Some(&turn_id) = noted.turns.iter().find(|&&id| dead.contains(id)) {
            return Ok(GcFenced::Aborted(turn_id));
        }
        for hash in &noted.blobs {
            condemned.resurrect(hash);
        }
        let now = now_unix_ms();
        for record in dead.records() {
            self.push_meta(ContextId(0), &record, now);
        }
        self.gc.dead.extend(&dead);
        self.contexts.overlays.forget_dead(&dead);
        self.contexts.vector_indexes.turns_died(&dead);
        self.gc.condemned = Some(condemned);
        self.batch.dead_changed = true;
        Ok(GcFenced::Fenced)
    }

    /// Answers the `GcStart`s of the batch just committed with the durable state, and starts
    /// noting: every record admitted from now on lies after the watermark they got.
    pub(super) fn start_gc_rounds(&mut self) {
        let snapshot = || GcSnapshot {
            watermark: self.published.turns.durable_record_id(),
            contexts: self.published.contexts.load(),
            dead: self.published.turns.dead(),
        };
        for reply in std::mem::take(&mut self.gc.starting) {
            drop(reply.send(snapshot()));
        }
        self.gc.noted = Some(Noted::default());
    }
}
