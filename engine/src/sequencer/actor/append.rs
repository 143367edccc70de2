//! The sequencer's rules for an append (one turn is a batch of one): what a turn names is
//! checked and noted for a running collection, a key the context has answers its turn, the
//! expected head is compared, the parent chosen (head, root, or an owned turn) and the DAG
//! rule applied (`sequencer/heads.rs`), the record built (TurnID, skip pointer, summary,
//! context chain) and pushed with its head move. A batch of turns is all or none.

use crate::error::EngineError;
use crate::format::turn_extras::TurnExtras;
use crate::format::turn_log::{LogRecord, TURN_FLAG_SUMMARY, TurnRecord};
use crate::ids::{ContextId, TurnId};
use crate::model::{Appended, Parent, TurnOptions, TurnVectors};
use crate::pipeline::{BatchReply, ShardBatch, TurnAppend, TurnBlob};
use crate::sequencer::actor::{Answer, HeadMove, Savepoint, SequencerActor};
use crate::sequencer::heads::HeadState;
use crate::sequencer::owners;
use crate::skip;
use crate::store_dir::now_unix_ms;

impl SequencerActor {
    /// Appends handed on by a shard with its batch (a put's chunks): the carrier shard's batch
    /// is waited for even when no turn names a blob of it, so the answer follows everything
    /// the put wrote.
    pub(super) fn admit_pending(
        &mut self,
        batch: ShardBatch,
        appends: Vec<(Vec<TurnAppend>, BatchReply)>,
    ) {
        self.batch.waits.push(batch);
        for (appends, reply) in appends {
            self.admit_append(appends, reply);
        }
    }

    /// One append request: every shard batch its blobs are pending in is waited for before
    /// the batch is published or answered — a refusal too: a caller that learns of a CONFLICT
    /// finds its blobs stored, as it did when blobs came first (decision 0014).
    pub(super) fn admit_append(&mut self, appends: Vec<TurnAppend>, reply: BatchReply) {
        for append in &appends {
            if let Some(pending) = append.payload.pending {
                self.batch.waits.push(pending);
                self.batch.pending_blobs.push(append.payload.hash);
            }
        }
        let result = self.append_batch(appends);
        self.batch.answers.push(Answer::Batch(reply, result));
    }

    /// Turns to one context, in order, all or none (a refused turn undoes the ones before it
    /// in this request). One turn needs no savepoint: a refused append changes nothing.
    fn append_batch(&mut self, mut appends: Vec<TurnAppend>) -> Result<Vec<Appended>, EngineError> {
        if let [_] = appends.as_slice()
            && let Some(append) = appends.pop()
        {
            return self.append(append).map(|appended| vec![appended]);
        }
        let savepoint = Savepoint {
            bytes: self.batch.bytes.len(),
            records: self.batch.records,
            next_record_id: self.next_record_id,
            moves: self.batch.moves.len(),
            contexts: self.contexts.clone(),
            turns: self.batch.new_turns.len(),
            logical_bytes: self.batch.logical_bytes,
            dedup_hits: self.batch.dedup_hits,
        };
        let mut appended: Vec<Appended> = Vec::with_capacity(appends.len());
        for mut append in appends {
            // "Each turn's parent is the one before it" holds after a turn answered by its
            // key too: the next one hangs from that existing turn, not from the head.
            if let Some(previous) = appended.last()
                && previous.existing
                && append.options.parent == Parent::Head
            {
                append.options.parent = Parent::Turn(previous.turn.turn_id);
            }
            match self.append(append) {
                Ok(turn) => appended.push(turn),
                Err(error) => {
                    self.restore(savepoint);
                    return Err(error);
                }
            }
        }
        Ok(appended)
    }

    pub(super) fn append(&mut self, mut append: TurnAppend) -> Result<Appended, EngineError> {
        self.check_takes_ids(false)?;
        let context_id = append.context_id;
        let head = self
            .heads
            .get(context_id)
            .ok_or(EngineError::ContextNotFound(context_id))?;
        // The request's key, labels and links move into the turn (no copies).
        let extras = normalized_extras(&mut append.options)?;
        self.check_named(&append, &extras)?;
        // A key the context has answers its turn: a retried append stores nothing twice.
        if let Some(existing) = self.turn_by_key(context_id, &extras.key)? {
            let turn = self.turn(existing)?;
            return Ok(Appended {
                extras: self.extras(&turn)?,
                turn: self.contexts.overlays.view(&turn, None),
                deduped: append.payload.deduped,
                existing: true,
            });
        }
        if let Some(expected) = append.expected_head
            && expected != head.head_turn_id
        {
            return Err(EngineError::Conflict {
                context_id,
                expected,
                actual: head.head_turn_id,
            });
        }
        let parent = self.parent_of(context_id, head, append.options.parent)?;
        let depth = self.depth_of_child(context_id, parent.as_ref())?;
        for link in &extras.links {
            self.turn(*link)?;
        }
        let body = extras.encode();
        let turn = self.new_turn(&append, parent, depth, body.len() as u32)?;
        self.push_turn(&turn, &body, &append.payload, &extras);
        Ok(Appended {
            turn: turn.into(),
            deduped: append.payload.deduped,
            existing: false,
            extras,
        })
    }

    /// Checks what an append names (its blob, its parent and links) and notes them for a
    /// running garbage collection, before anything is decided.
    fn check_named(&mut self, append: &TurnAppend, extras: &TurnExtras) -> Result<(), EngineError> {
        let blob = append.payload;
        // A purged blob comes back only as new bytes: by hash, it is gone (decision 0012).
        if blob.by_hash && self.contexts.overlays.is_purged(&blob.hash) {
            return Err(EngineError::BlobNotFound(blob.hash));
        }
        self.gc.name_blob(&blob.hash)?;
        if let Parent::Turn(parent) = append.options.parent {
            self.gc.note_turn(parent);
        }
        for link in &extras.links {
            self.gc.note_turn(*link);
        }
        if let Some(vectors) = &extras.vectors {
            // The engine stored the blob durably before it sent the append; the index may
            // have been dropped since it looked it up.
            let tenant_id = self
                .contexts
                .get(append.context_id)
                .map(|info| info.tenant_id)
                .ok_or(EngineError::ContextNotFound(append.context_id))?;
            if self
                .contexts
                .vector_indexes
                .get(tenant_id, vectors.index_id)
                .is_none()
            {
                return Err(EngineError::VectorIndexNotFound(format!(
                    "vector index {} (dropped while the append was on its way)",
                    vectors.index_id
                )));
            }
            self.gc.name_blob(&vectors.hash)?;
            assert!(
                self.published
                    .shard_of(&vectors.hash)
                    .contains(&vectors.hash),
                "the vectors blob {} of an append is not durable",
                vectors.hash
            );
        }
        // The pipeline made the blob durable before the append got here, or it is pending in
        // a shard batch this batch waits for before it publishes: a published turn never
        // points at a blob that a crash could lose (nor one a collection swept: refused above).
        assert!(
            blob.pending.is_some() || self.published.shard_of(&blob.hash).contains(&blob.hash),
            "blob {} of an append is not durable",
            blob.hash
        );
        Ok(())
    }

    /// The parent a new turn of `context_id` gets: the head, none (a root), or a turn the
    /// context owns (decision 0009).
    fn parent_of(
        &self,
        context_id: ContextId,
        head: HeadState,
        parent: Parent,
    ) -> Result<Option<TurnRecord>, EngineError> {
        match parent {
            Parent::Head => head
                .child()
                .ok_or_else(|| {
                    EngineError::InvalidArgument(format!(
                        "context {context_id} is at the maximum depth {}",
                        u32::MAX
                    ))
                })
                .and_then(|child| self.turn_or_none(child.parent_turn_id)),
            Parent::Root => Ok(None),
            Parent::Turn(parent) => {
                let parent = self.turn(parent)?;
                self.check_owned(context_id, head, &parent)?;
                Ok(Some(parent))
            }
        }
    }

    /// The depth of a child of `parent` (0 for a root), refused at the maximum depth and
    /// below the context's floor.
    fn depth_of_child(
        &self,
        context_id: ContextId,
        parent: Option<&TurnRecord>,
    ) -> Result<u32, EngineError> {
        let depth = match parent {
            None => 0,
            Some(parent) => parent.depth.checked_add(1).ok_or_else(|| {
                EngineError::InvalidArgument(format!(
                    "turn {} is at the maximum depth {}",
                    parent.turn_id,
                    u32::MAX
                ))
            })?,
        };
        let floor_depth = self
            .contexts
            .get(context_id)
            .map_or(0, |info| info.floor_depth);
        if depth < floor_depth {
            // Below the floor the context no longer reaches: the new turn would be invisible.
            return Err(EngineError::InvalidArgument(format!(
                "context {context_id} is pruned at depth {floor_depth}; a new turn at depth \
                 {depth} would lie below it (choose a parent at depth {} or deeper)",
                floor_depth.saturating_sub(1)
            )));
        }
        Ok(depth)
    }

    /// The record of the next turn: its TurnID, skip pointer, summary and context chain.
    fn new_turn(
        &self,
        append: &TurnAppend,
        parent: Option<TurnRecord>,
        depth: u32,
        extras_len: u32,
    ) -> Result<TurnRecord, EngineError> {
        let context_id = append.context_id;
        let summary = append.options.summary;
        // The skip target may lie in history a collection took (below a floor): the pointer
        // names it all the same (the record is still in the log; verify checks every pointer
        // against the ancestry), and no read through a context ever follows it that deep.
        let skip_turn_id = skip::skip_of_child(parent, depth, |id| self.turn_record(id))?;
        let turn_id = TurnId(self.next_record_id);
        let summary_turn_id = match (summary, &parent) {
            (true, _) => turn_id,
            (false, Some(parent)) => parent.summary_turn_id,
            (false, None) => TurnId::NONE,
        };
        Ok(TurnRecord {
            turn_id,
            parent_turn_id: parent.map_or(TurnId::NONE, |parent| parent.turn_id),
            context_id,
            depth,
            type_tag: append.type_tag,
            codec: append.codec,
            payload_hash: append.payload.hash,
            payload_len: append.payload.raw_len,
            flags: if summary { TURN_FLAG_SUMMARY } else { 0 },
            created_at_unix_ms: now_unix_ms(),
            skip_turn_id,
            context_prev_turn_id: self
                .contexts
                .get(context_id)
                .map_or(TurnId::NONE, |info| info.last_turn_id),
            summary_turn_id,
            extras_len,
        })
    }

    /// Puts a new turn's slots into the batch and moves its context's head and metadata (the
    /// batch's rollback undoes both if the write fails).
    fn push_turn(&mut self, turn: &TurnRecord, body: &[u8], blob: &TurnBlob, extras: &TurnExtras) {
        for slot in turn.slots(body) {
            self.push_record(&slot);
            if let LogRecord::Turn(written) = slot {
                self.batch.new_turns.push(written);
            }
        }
        if blob.pending.is_some() {
            self.batch
                .first_pending_record
                .get_or_insert(turn.turn_id.0);
        }
        let context_id = turn.context_id;
        let previous = self.heads.set(context_id, HeadState::of(turn));
        self.contexts.appended(
            context_id,
            turn.turn_id,
            turn.payload_len,
            extras,
            turn.created_at_unix_ms,
        );
        self.contexts.overlays.named(&blob.hash);
        self.batch.moves.push(HeadMove {
            context_id,
            previous,
        });
        self.batch.logical_bytes += u64::from(blob.raw_len);
        self.batch.dedup_hits += u64::from(blob.deduped);
    }

    /// The turn a context has under `key` (its own or inherited), as this batch leaves it.
    fn turn_by_key(
        &self,
        context_id: ContextId,
        key: &[u8],
    ) -> Result<Option<TurnId>, EngineError> {
        let lookup = |id| self.turn_record(id);
        let found = owners::turn_by_key(&self.contexts, context_id, key, &lookup)?;
        // A collected turn's key answers nothing: the append stores a new turn.
        Ok(found
            .map(|turn| turn.turn_id)
            .filter(|&turn_id| !self.gc.dead.contains(turn_id)))
    }

    /// A parent chosen by the caller must be the context's: appended to it, on its chain, or
    /// inherited.
    fn check_owned(
        &self,
        context_id: ContextId,
        head: HeadState,
        parent: &TurnRecord,
    ) -> Result<(), EngineError> {
        let head_turn = self.turn_or_none(head.head_turn_id)?;
        // Records, collected or not: ownership walks may pass a fork base below the floor.
        let lookup = |id| self.turn_record(id);
        if owners::owns(&self.contexts, context_id, head_turn, parent, &lookup)? {
            return Ok(());
        }
        Err(EngineError::InvalidArgument(format!(
            "turn {} is not a turn of context {context_id} (not appended to it, not on its \
             chain, not inherited); a parent must be one of its own turns",
            parent.turn_id
        )))
    }
}

/// A turn's key, labels, links and vectors in their stored order, refused past their limits.
fn normalized_extras(options: &mut TurnOptions) -> Result<TurnExtras, EngineError> {
    let vectors = match options.vectors.take() {
        None => None,
        Some(TurnVectors::Stored(vectors)) => Some(vectors),
        Some(TurnVectors::Given { .. }) => {
            unreachable!("the engine stores a turn's vectors before the append reaches here")
        }
    };
    TurnExtras {
        key: options.key.take().map(Vec::from).unwrap_or_default(),
        labels: std::mem::take(&mut options.labels),
        links: std::mem::take(&mut options.links),
        vectors,
    }
    .normalize()
    .map_err(|over| EngineError::Limit {
        what: over.what,
        limit: over.limit,
    })
}
