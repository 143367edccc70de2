//! The sequencer actor: sole owner of `turns.log` and of the heads. It allocates TurnIDs
//! (linearizable: one writer, one counter), checks and applies head moves (per-context
//! compare-and-set, the DAG rule of `heads.rs`), and group-commits (`group_commit.rs`): decide
//! every request against the heads as the batch leaves them, one write, ONE fdatasync,
//! publish, then answer all.
//!
//! Every answer of a batch, errors included, waits for the batch: a `Conflict` may name a
//! head that this very batch wrote, and no one may learn a TurnID before it is durable.
//!
//! A turn may name a blob whose shard batch is still syncing (`TurnBlob::pending`, decision
//! 0014): the turn is written and synced all the same, in parallel with the pack, but the
//! batch is published and answered only once the shard's `BlobsDurable` notice for every such
//! blob came, and the next batch is written only after that. So readers never see a turn whose
//! blob could be lost, and a crash leaves such turns only at the end of the log, within
//! `HELD_RECORDS_MAX` records (recovery cuts them: none was acknowledged).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::blob::condemned::Condemned;
use crate::config::{HELD_RECORDS_MAX, Limits};
use crate::error::EngineError;
use crate::file::{ActorFile, ActorIo, open_actor_file};
use crate::format::context_meta::{ContextMeta, KvEntry, OverlayKind};
use crate::format::turn_extras::TurnExtras;
use crate::format::turn_log::{
    ContextRecord, LOG_RECORD_BYTES, LogRecord, MetaRecord, TurnRecord, record_offset,
};
use crate::format::turn_log::{TURN_FLAG_SUMMARY, turn_extras_body};
use crate::group_commit::{Admitted, GroupCommit};
use crate::ids::{BlobHash, BlobHashBuildHasher, ContextId, TurnId};
use crate::model::{Appended, ContextHead, ContextView, Created, NewContext, Overlaid, Purged};
use crate::model::{Parent, TurnOptions};
use crate::pipeline::{
    BatchReply, BlobsDurable, ContextReply, GcFenced, GcSnapshot, MetaReply, OverlayReply,
    PurgeReply, Retention, SequencerRequest, ShardBatch, TurnAppend, TurnBlob,
};
use crate::published::Published;
use crate::sequencer::contexts::{Contexts, check_new};
use crate::sequencer::dead::DeadTurns;
use crate::sequencer::heads::{HeadState, Heads};
use crate::sequencer::owners;
use crate::sequencer::recover::RecoveredLog;
use crate::skip;
use crate::store_dir::now_unix_ms;

enum Answer {
    Gc(
        oneshot::Sender<Result<GcFenced, EngineError>>,
        Result<GcFenced, EngineError>,
    ),
    Context(ContextReply, Result<Created, EngineError>),
    Meta(MetaReply, Result<ContextView, EngineError>),
    Batch(BatchReply, Result<Vec<Appended>, EngineError>),
    Overlay(OverlayReply, Result<Overlaid, EngineError>),
    Purge(PurgeReply, Result<Purged, EngineError>),
}

/// Where a batch stood before a multi-turn request: what to restore when one of its turns is
/// refused (all or none).
struct Savepoint {
    bytes: usize,
    records: u32,
    next_record_id: u64,
    moves: usize,
    contexts: Contexts,
    turns: usize,
    logical_bytes: u64,
    dedup_hits: u64,
}

/// Undo entry for a batch that fails to reach the disk.
struct HeadMove {
    context_id: ContextId,
    previous: HeadState,
}

#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    answers: Vec<Answer>,
    moves: Vec<HeadMove>,
    /// Contexts that existed before the batch.
    contexts_before: u64,
    records: u32,
    /// The batch's turn records as written (pair-checked), in record order: counted in the
    /// sequencer's counters and put into the readers' caches at publish, without decoding the
    /// batch's bytes again.
    new_turns: Vec<TurnRecord>,
    logical_bytes: u64,
    dedup_hits: u64,
    /// The batch carries gc-dead records: readers get the new set once it is durable.
    dead_changed: bool,
    /// Shard batches whose appends (written turns and refusals alike) this batch answers:
    /// waited for before the batch is published or answered (decision 0014).
    waits: Vec<ShardBatch>,
    /// Their blobs, checked in the index after the wait (the pair of the append's check).
    pending_blobs: Vec<BlobHash>,
    /// The record of the first turn naming a pending blob.
    first_pending_record: Option<u64>,
}

pub(crate) struct SequencerActor {
    published: Arc<Published>,
    limits: Limits,
    preallocate: bool,
    path: PathBuf,
    file: ActorFile,
    /// File length: records end at `record_offset(next_record_id)`, zeros follow up to here.
    prepared_end: u64,
    next_record_id: u64,
    heads: Heads,
    /// Names, tags, key-value entries and times, as this batch leaves them; published after
    /// the batch is durable, restored from the published snapshot when it fails.
    contexts: Contexts,
    batch: Batch,
    gc: GcState,
    /// The shards' `BlobsDurable` notices.
    notices: flume::Receiver<BlobsDurable>,
    /// Per shard, the last batch it said is durable (batches are numbered from 1).
    blobs_durable: Vec<u64>,
    /// A shard's fdatasync failed: no pending blob of a later batch will become durable.
    blobs_failed: Option<EngineError>,
}

/// The sequencer's part in garbage collection (decision 0011).
#[derive(Default)]
struct GcState {
    /// Turns collected so far (the durable gc-dead records, and those of this batch): nothing
    /// may name them again.
    dead: DeadTurns,
    /// The last fence's condemned blobs: a record naming a swept one is refused.
    condemned: Option<Arc<Condemned>>,
    /// Between `GcStart` and its fence: what new records named.
    noted: Option<Noted>,
    /// `GcStart` requests answered once the batch they joined is durable.
    starting: Vec<oneshot::Sender<GcSnapshot>>,
}

/// Turns and blobs records named since a round's `GcStart`.
#[derive(Default)]
struct Noted {
    turns: HashSet<TurnId>,
    blobs: HashSet<BlobHash, BlobHashBuildHasher>,
}

impl GcState {
    fn note_turn(&mut self, turn_id: TurnId) {
        if let Some(noted) = &mut self.noted
            && !turn_id.is_none()
        {
            noted.turns.insert(turn_id);
        }
    }

    /// A record is about to name `hash`: noted for a round in progress; refused (not found)
    /// if the last fence's sweep took its bytes (the caller stores it again).
    fn name_blob(&mut self, hash: &BlobHash) -> Result<(), EngineError> {
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
    pub async fn open(
        recovered: RecoveredLog,
        published: Arc<Published>,
        notices: flume::Receiver<BlobsDurable>,
        limits: Limits,
        io: ActorIo,
    ) -> Result<SequencerActor, EngineError> {
        let path = published.turns.path().clone();
        let file = open_actor_file(&path, io.sync_mode).await?;
        assert_eq!(
            recovered.next_record_id,
            published.turns.durable_record_id() + 1
        );
        let batch = Batch {
            contexts_before: recovered.heads.count(),
            ..Batch::default()
        };
        Ok(SequencerActor {
            limits,
            preallocate: io.preallocate,
            path,
            file,
            prepared_end: recovered.file_len,
            next_record_id: recovered.next_record_id,
            heads: recovered.heads,
            contexts: recovered.contexts,
            batch,
            gc: GcState {
                dead: recovered.dead,
                ..GcState::default()
            },
            notices,
            blobs_durable: vec![0; published.shards.len()],
            blobs_failed: None,
            published,
        })
    }

    fn create_context(&mut self, new: NewContext) -> Result<Created, EngineError> {
        self.published.status.check_writable()?;
        if let Some(owner) = new
            .name
            .as_deref()
            .and_then(|name| self.contexts.by_name(name))
            && new.get_or_create
        {
            let context = self.view(owner);
            assert!(context.is_some(), "a named context exists");
            return context
                .map(|context| Created {
                    context,
                    created: false,
                })
                .ok_or(EngineError::ContextNotFound(owner));
        }
        check_new(&self.contexts, new.name.as_deref(), &new.tags)?;
        let clone_from = match new.clone_from {
            Some(crate::model::ContextRef::Id(source)) => Some(source),
            Some(crate::model::ContextRef::Name(name)) => Some(
                self.contexts
                    .by_name(&name)
                    .ok_or(EngineError::NameNotFound(name))?,
            ),
            None => None,
        };
        let head = match clone_from {
            Some(_) if !new.base.is_none() => {
                return Err(EngineError::InvalidArgument(
                    "a clone takes its source's head; give no base turn".into(),
                ));
            }
            // A clone shares its source's head; its own turns start with its first append.
            Some(source) => self
                .heads
                .get(source)
                .ok_or(EngineError::ContextNotFound(source))?,
            // Only a durable turn can be a base: no one can know of any other.
            None if !new.base.is_none() => {
                self.gc.note_turn(new.base);
                if self.gc.dead.contains(new.base) {
                    return Err(EngineError::TurnNotFound(new.base));
                }
                HeadState {
                    head_turn_id: new.base,
                    head_depth: self.published.turns.turn(new.base)?.depth,
                }
            }
            None => HeadState::default(),
        };
        let Some(context_id) = self.heads.next_context_id() else {
            return Err(EngineError::InvalidArgument(format!(
                "the store holds the maximum of {} contexts",
                crate::ids::CONTEXTS_MAX
            )));
        };
        let now = now_unix_ms();
        self.push_record(&LogRecord::Context(ContextRecord {
            record_id: self.next_record_id,
            context_id,
            head_turn_id: head.head_turn_id,
            head_depth: head.head_depth,
            created_at_unix_ms: now,
        }));
        let created = self.heads.create(head);
        assert_eq!(created, context_id);
        self.contexts.create(context_id, head.head_turn_id, now);
        let mut changes = Vec::new();
        changes.extend(clone_from.map(ContextMeta::CloneFrom));
        changes.extend(new.name.map(ContextMeta::Name));
        if !new.tags.is_empty() {
            let tags = new.tags.into_iter().map(|(k, v)| (k, Some(v))).collect();
            changes.push(ContextMeta::Tags(tags));
        }
        for change in &changes {
            // Checked above: a refusal here is a broken invariant, not bad input.
            let applied = self.contexts.apply(context_id, change, now);
            assert!(applied.is_ok(), "checked metadata refused: {applied:?}");
            self.push_meta(context_id, change, now);
        }
        let context = self
            .view(context_id)
            .ok_or(EngineError::ContextNotFound(context_id))?;
        Ok(Created {
            context,
            created: true,
        })
    }

    /// Applies metadata changes to one context, all or none.
    fn change_meta(
        &mut self,
        context_id: ContextId,
        changes: Vec<ContextMeta>,
        expected_head: Option<TurnId>,
    ) -> Result<ContextView, EngineError> {
        self.published.status.check_writable()?;
        let head = self
            .heads
            .get(context_id)
            .ok_or(EngineError::ContextNotFound(context_id))?;
        if let Some(expected) = expected_head
            && expected != head.head_turn_id
        {
            return Err(EngineError::Conflict {
                context_id,
                expected,
                actual: head.head_turn_id,
            });
        }
        for change in &changes {
            if let ContextMeta::KvPut(entries) = change {
                for entry in entries {
                    self.gc.name_blob(&entry.value_hash)?;
                }
            }
        }
        // Try them on a copy (O(1) with persistent maps), so that a refusal changes nothing.
        let now = now_unix_ms();
        let mut scratch = self.contexts.clone();
        for change in &changes {
            scratch.apply(context_id, change, now)?;
        }
        for change in &changes {
            self.push_meta(context_id, change, now);
        }
        self.contexts = scratch;
        self.view(context_id)
            .ok_or(EngineError::ContextNotFound(context_id))
    }

    /// Deletes a context or raises its floor (`Retention`), one metadata record.
    fn retain(
        &mut self,
        context_id: ContextId,
        change: Retention,
    ) -> Result<ContextView, EngineError> {
        self.published.status.check_writable()?;
        let before = self
            .view(context_id)
            .ok_or(EngineError::ContextNotFound(context_id))?;
        let meta = match change {
            Retention::Delete { updated_at_max } => {
                if updated_at_max.is_some_and(|max| before.updated_at_unix_ms > max) {
                    // Touched since the reaper looked: not idle any more.
                    return Err(EngineError::Conflict {
                        context_id,
                        expected: before.head.head_turn_id,
                        actual: before.head.head_turn_id,
                    });
                }
                ContextMeta::Delete
            }
            Retention::Prune { keep } => {
                assert!(keep >= 1, "the caller refuses keep = 0");
                let head = before.head;
                let floor = if head.head_turn_id.is_none() {
                    0
                } else {
                    (head.head_depth + 1).saturating_sub(keep)
                };
                ContextMeta::Floor(floor.max(before.floor_depth))
            }
        };
        let now = now_unix_ms();
        self.contexts.apply(context_id, &meta, now)?;
        self.push_meta(context_id, &meta, now);
        if meta == ContextMeta::Delete {
            let previous = self.heads.delete(context_id);
            self.batch.moves.push(HeadMove {
                context_id,
                previous,
            });
            return Ok(before);
        }
        self.view(context_id)
            .ok_or(EngineError::ContextNotFound(context_id))
    }

    /// Key-value puts that keep existing keys: only the absent ones are written.
    fn absent_only(&self, context_id: ContextId, changes: Vec<ContextMeta>) -> Vec<ContextMeta> {
        let Some(info) = self.contexts.get(context_id) else {
            return changes;
        };
        changes
            .into_iter()
            .filter_map(|change| match change {
                ContextMeta::KvPut(entries) => {
                    let absent: Vec<KvEntry> = entries
                        .into_iter()
                        .filter(|entry| !info.kv.contains_key(entry.key.as_slice()))
                        .collect();
                    (!absent.is_empty()).then_some(ContextMeta::KvPut(absent))
                }
                other => Some(other),
            })
            .collect()
    }

    /// A context's head and metadata as this batch leaves them.
    fn view(&self, context_id: ContextId) -> Option<ContextView> {
        let head = self.heads.get(context_id)?;
        let info = self.contexts.get(context_id)?;
        Some(info.view(ContextHead {
            context_id,
            head_turn_id: head.head_turn_id,
            head_depth: head.head_depth,
        }))
    }

    /// A garbage-collection fence (`SequencerRequest::GcFence`): decided here, between the
    /// records before it and after it.
    fn gc_fence(
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
        self.gc.condemned = Some(condemned);
        self.batch.dead_changed = true;
        Ok(GcFenced::Fenced)
    }

    /// Patches or redacts a durable turn (decision 0012): one overlay record whose id is the
    /// overlay's sequence number, naming the turn's own context (deleted or not: overlays
    /// are about turns, which outlive their context while something reaches them).
    fn overlay(&mut self, turn_id: TurnId, kind: OverlayKind) -> Result<Overlaid, EngineError> {
        self.published.status.check_writable()?;
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
        seq
    }

    /// One part of a purge (`SequencerRequest::Purge`): redacts `turns` — and, in the last
    /// part, every turn that names `hash` past the caller's scan or through a patch — then
    /// writes the purge record. All in this batch: acknowledged together.
    fn purge(
        &mut self,
        hash: BlobHash,
        mut turns: Vec<TurnId>,
        scanned_upto: Option<u64>,
    ) -> Result<Purged, EngineError> {
        self.published.status.check_writable()?;
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

    fn push_meta(&mut self, context_id: ContextId, change: &ContextMeta, at_unix_ms: u64) {
        let record = MetaRecord {
            record_id: self.next_record_id,
            op: change.op(),
            context_id,
            created_at_unix_ms: at_unix_ms,
            body: change.encode(),
        };
        for slot in record.slots() {
            self.push_record(&slot);
        }
    }

    fn append(&mut self, mut append: TurnAppend) -> Result<Appended, EngineError> {
        self.published.status.check_writable()?;
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

    /// One append request: every shard batch its blobs are pending in is waited for before
    /// the batch is published or answered — a refusal too: a caller that learns of a CONFLICT
    /// finds its blobs stored, as it did when blobs came first (decision 0014).
    fn admit_append(&mut self, appends: Vec<TurnAppend>, reply: BatchReply) {
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

    /// Answers the `GcStart`s of the batch just committed with the durable state, and starts
    /// noting: every record admitted from now on lies after the watermark they got.
    fn start_gc_rounds(&mut self) {
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

    fn restore(&mut self, savepoint: Savepoint) {
        for head_move in self.batch.moves.drain(savepoint.moves..).rev() {
            self.heads.set(head_move.context_id, head_move.previous);
        }
        self.batch.bytes.truncate(savepoint.bytes);
        self.batch.records = savepoint.records;
        self.next_record_id = savepoint.next_record_id;
        self.contexts = savepoint.contexts;
        self.batch.new_turns.truncate(savepoint.turns);
        self.batch.logical_bytes = savepoint.logical_bytes;
        self.batch.dedup_hits = savepoint.dedup_hits;
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

    fn turn_or_none(&self, turn_id: TurnId) -> Result<Option<TurnRecord>, EngineError> {
        match turn_id {
            TurnId::NONE => Ok(None),
            turn_id => self.turn(turn_id).map(Some),
        }
    }

    /// A turn's extras, from this batch or the durable log.
    fn extras(&self, turn: &TurnRecord) -> Result<TurnExtras, EngineError> {
        if turn.turn_id.0 <= self.published.turns.durable_record_id() {
            return self.published.turns.extras(turn);
        }
        let body = turn_extras_body(turn, |record_id| self.batch_record(record_id))
            .map_err(EngineError::InvalidArgument)?;
        TurnExtras::decode(&body).map_err(|error| EngineError::InvalidArgument(error.to_string()))
    }

    /// A turn as this batch leaves the log: from the batch's own records when it is one of
    /// them (not durable yet), else from the durable log. For skip pointers: O(log n) reads,
    /// 3 on average, of turns near the head (page-cache hits).
    fn turn(&self, turn_id: TurnId) -> Result<TurnRecord, EngineError> {
        if self.gc.dead.contains(turn_id) {
            return Err(EngineError::TurnNotFound(turn_id));
        }
        self.turn_record(turn_id)
    }

    /// A turn record as `turn` finds it, collected or not.
    fn turn_record(&self, turn_id: TurnId) -> Result<TurnRecord, EngineError> {
        let first_in_batch = self.published.turns.durable_record_id() + 1;
        assert_eq!(
            first_in_batch + u64::from(self.batch.records),
            self.next_record_id,
            "the batch starts right after the durable log"
        );
        if turn_id.0 < first_in_batch {
            return match self.published.turns.record(turn_id.0)? {
                Some(LogRecord::Turn(turn)) => Ok(turn),
                _ => Err(EngineError::TurnNotFound(turn_id)),
            };
        }
        match self.batch_record(turn_id.0) {
            Some(LogRecord::Turn(turn)) => Ok(turn),
            _ => Err(EngineError::TurnNotFound(turn_id)),
        }
    }

    /// A record of this batch (not durable yet), decoded from the batch's bytes.
    fn batch_record(&self, record_id: u64) -> Option<LogRecord> {
        let first_in_batch = self.published.turns.durable_record_id() + 1;
        let index = record_id.checked_sub(first_in_batch)? as usize;
        let offset = index.checked_mul(LOG_RECORD_BYTES)?;
        let bytes = self.batch.bytes.get(offset..offset + LOG_RECORD_BYTES)?;
        let mut slot = [0u8; LOG_RECORD_BYTES];
        slot.copy_from_slice(bytes);
        LogRecord::decode(&slot).ok().flatten()
    }

    fn push_record(&mut self, record: &LogRecord) {
        assert_eq!(record.record_id(), self.next_record_id);
        let mut encoded = [0u8; LOG_RECORD_BYTES];
        record.encode(&mut encoded);
        // Pair assertion: what goes to disk decodes to what was meant.
        assert_eq!(
            LogRecord::decode(&encoded).ok().flatten().as_ref(),
            Some(record)
        );
        self.batch.bytes.extend_from_slice(&encoded);
        self.batch.records += 1;
        self.next_record_id += 1;
    }

    /// Puts the heads and the record counter back as they were before a batch that did not
    /// reach the disk.
    fn roll_back(&mut self, batch: &Batch, first_record_id: u64) {
        for head_move in batch.moves.iter().rev() {
            self.heads.set(head_move.context_id, head_move.previous);
        }
        self.heads.truncate(batch.contexts_before);
        self.next_record_id = first_record_id;
    }

    /// Waits until every shard batch in `waits` is durable (the shards' `BlobsDurable`
    /// notices). A failed pack fdatasync (the store is read-only) or shards that are gone fail
    /// the batch: its turns may be in `turns.log` while their blobs are not, so nothing more
    /// may be written after them (recovery cuts them as the log's tail).
    async fn wait_for_blobs(&mut self, waits: &[ShardBatch]) -> Result<(), EngineError> {
        while let Ok(notice) = self.notices.try_recv() {
            self.note_durable(notice);
        }
        for wait in waits {
            while self.blobs_durable[usize::from(wait.shard)] < wait.batch {
                if let Some(error) = &self.blobs_failed {
                    // Pair of the shard's side: a failed pack fdatasync turned the store
                    // read-only before its notice, so nothing is written after these turns.
                    assert!(
                        self.published.status.is_read_only(),
                        "a failed blob batch leaves the store read-only"
                    );
                    return Err(error.duplicate());
                }
                match self.notices.recv_async().await {
                    Ok(notice) => self.note_durable(notice),
                    Err(flume::RecvError::Disconnected) => {
                        let reason = "the blob shards stopped while turns waited for their \
                                      blobs"
                            .to_string();
                        self.published.status.set_read_only(reason.clone());
                        self.blobs_failed = Some(EngineError::ReadOnly(reason));
                    }
                }
            }
        }
        Ok(())
    }

    fn note_durable(&mut self, notice: BlobsDurable) {
        let BlobsDurable { batch, result } = notice;
        match result {
            Ok(()) => {
                let durable = &mut self.blobs_durable[usize::from(batch.shard)];
                // Pair of the shard's numbering: one notice per handed batch, in order.
                assert!(batch.batch > *durable, "shard batches are durable in order");
                *durable = batch.batch;
            }
            Err(error) => {
                // The shard set the store read-only; keep the first reason.
                self.blobs_failed.get_or_insert(error);
            }
        }
    }

    /// Makes the batch visible: turns first, then heads, then new contexts, so a reader that
    /// sees a head can always read its turn.
    fn publish(&mut self, batch: &Batch) {
        let published = &self.published;
        published.turns.fill_caches(&batch.new_turns);
        published.turns.publish(self.next_record_id - 1);
        // The batch's turn keys, once their turns are readable (before any answer).
        self.contexts.publish_turn_keys();
        let published = &self.published;
        for head_move in &batch.moves {
            // `raw`: a deleted context publishes its `DELETED_HEAD`.
            let head = self.heads.raw(head_move.context_id);
            assert!(head.is_some(), "a moved head exists");
            if let Some(head) = head {
                published
                    .heads
                    .set_head(head_move.context_id, head.head_turn_id);
            }
        }
        for (context_id, head) in self.heads.iter_from(batch.contexts_before) {
            published.heads.set_head(context_id, head.head_turn_id);
        }
        published.heads.publish_contexts(self.heads.count());
        // Last: a reader that finds a name or a tag finds its context's head.
        published.contexts.publish(self.contexts.clone());
        if batch.dead_changed {
            published.turns.publish_dead(self.gc.dead.clone());
        }
        let counters = &published.counters;
        counters
            .turns
            .fetch_add(batch.new_turns.len() as u64, Ordering::Relaxed);
        // Live contexts: a deleted one keeps its slot among the heads.
        counters.contexts.store(
            self.heads.count() - self.contexts.deleted_contexts,
            Ordering::Relaxed,
        );
        counters
            .logical_bytes
            .fetch_add(batch.logical_bytes, Ordering::Relaxed);
        counters
            .dedup_hits
            .fetch_add(batch.dedup_hits, Ordering::Relaxed);
    }
}

impl GroupCommit for SequencerActor {
    type Request = SequencerRequest;

    async fn admit(&mut self, request: SequencerRequest) -> Admitted {
        match request {
            SequencerRequest::CreateContext { new, reply } => {
                let result = self.create_context(new);
                self.batch.answers.push(Answer::Context(reply, result));
            }
            SequencerRequest::Meta {
                context_id,
                changes,
                expected_head,
                kv_if_absent,
                reply,
            } => {
                let changes = if kv_if_absent {
                    self.absent_only(context_id, changes)
                } else {
                    changes
                };
                let result = self.change_meta(context_id, changes, expected_head);
                self.batch.answers.push(Answer::Meta(reply, result));
            }
            SequencerRequest::Retain {
                context_id,
                change,
                reply,
            } => {
                let result = self.retain(context_id, change);
                self.batch.answers.push(Answer::Meta(reply, result));
            }
            SequencerRequest::Append { appends, reply } => self.admit_append(appends, reply),
            SequencerRequest::AppendPending { batch, appends } => {
                // The carrier shard's batch is waited for even when no turn names a blob of
                // it (a put's chunks only): the answer follows everything the put wrote.
                self.batch.waits.push(batch);
                for (appends, reply) in appends {
                    self.admit_append(appends, reply);
                }
            }
            SequencerRequest::Overlay {
                turn_id,
                kind,
                reply,
            } => {
                let result = self.overlay(turn_id, kind);
                self.batch.answers.push(Answer::Overlay(reply, result));
            }
            SequencerRequest::Purge {
                hash,
                turns,
                scanned_upto,
                reply,
            } => {
                let result = self.purge(hash, turns, scanned_upto);
                self.batch.answers.push(Answer::Purge(reply, result));
            }
            SequencerRequest::GcStart { reply } => self.gc.starting.push(reply),
            SequencerRequest::GcFence {
                dead,
                condemned,
                reply,
            } => {
                let result = self.gc_fence(dead, condemned);
                self.batch.answers.push(Answer::Gc(reply, result));
            }
            SequencerRequest::GcAbort => self.gc.noted = None,
            SequencerRequest::Stop { done } => return Admitted::Stop(done),
        }
        Admitted::Continue
    }

    fn has_records(&self) -> bool {
        self.batch.records > 0
    }

    fn is_full(&self) -> bool {
        self.batch.records >= self.limits.sequencer_batch_records_max
    }

    /// Any request: a batch ends once full (`is_full`), whatever the last one wrote.
    fn fits(&self, _request: &SequencerRequest) -> bool {
        true
    }

    async fn commit(&mut self) {
        let next = Batch {
            contexts_before: self.heads.count(),
            ..Batch::default()
        };
        let mut batch = std::mem::replace(&mut self.batch, next);
        if batch.records > 0 {
            let first_record_id = self.next_record_id - u64::from(batch.records);
            let offset = record_offset(first_record_id);
            let bytes = std::mem::take(&mut batch.bytes);
            let held = batch
                .first_pending_record
                .map_or(0, |first| self.next_record_id - first);
            // More turns after a pending blob than recovery may cut as a tail: the blobs
            // first, as before decision 0014 (a rare, oversized batch pays two fsyncs).
            let blobs_first = if held > HELD_RECORDS_MAX {
                self.wait_for_blobs(&batch.waits).await
            } else {
                Ok(())
            };
            let written = match blobs_first {
                Ok(()) => {
                    self.file
                        .append_durably(
                            &bytes,
                            offset,
                            batch.records,
                            &self.published.status,
                            &self.published.sequencer_metrics,
                        )
                        .await
                }
                Err(error) => Err(error),
            };
            // The log's fdatasync ran while the shards synced their packs: now every blob the
            // batch names must be durable before anyone sees or learns of its turns.
            let durable = match written {
                Ok(()) => self.wait_for_blobs(&batch.waits).await,
                Err(error) => Err(error),
            };
            match durable {
                Ok(()) => {
                    for hash in &batch.pending_blobs {
                        assert!(
                            self.published.shard_of(hash).contains(hash),
                            "blob {hash} is published with a turn but not durable"
                        );
                    }
                    self.publish(&batch)
                }
                Err(error) => {
                    self.prepared_end = offset;
                    self.roll_back(&batch, first_record_id);
                    self.contexts = Contexts::clone(&self.published.contexts.load());
                    self.batch.contexts_before = self.heads.count();
                    fail_all(&mut batch.answers, &error);
                }
            }
        } else if let Err(error) = self.wait_for_blobs(&batch.waits).await {
            // Only refusals to answer: they too wait for their blobs.
            fail_all(&mut batch.answers, &error);
        }
        if !self.gc.starting.is_empty() {
            self.start_gc_rounds();
        }
        for answer in batch.answers {
            match answer {
                Answer::Gc(reply, result) => drop(reply.send(result)),
                Answer::Context(reply, result) => drop(reply.send(result)),
                Answer::Meta(reply, result) => drop(reply.send(result)),
                Answer::Batch(reply, result) => drop(reply.send(result)),
                Answer::Overlay(reply, result) => drop(reply.send(result)),
                Answer::Purge(reply, result) => drop(reply.send(result)),
            }
        }
    }

    /// Keeps zero-filled space ahead of the records (`ActorFile::fill_zeros`), after every
    /// batch: under sustained load too, because `turns.log` records are small and a log that
    /// grows at each batch pays a metadata sync every time. A failure only costs speed.
    async fn between_batches(&mut self, _queue_empty: bool) -> bool {
        let data_end = record_offset(self.next_record_id);
        let step = u64::from(self.limits.log_preallocate_bytes);
        let enough = self.prepared_end >= data_end + step / 2;
        if !self.preallocate || enough || self.published.status.is_read_only() {
            return false;
        }
        let start = self.prepared_end.max(data_end);
        let target = data_end + step;
        match self
            .file
            .fill_zeros(start, target - start, &self.published.status)
            .await
        {
            Ok(true) => self.prepared_end = target,
            // The failed fill was cut back: the file ends at `start` again.
            Ok(false) => self.prepared_end = start,
            Err(_) => {} // read-only now; nothing more is written
        }
        false
    }

    async fn stopped(&mut self) {
        tracing::debug!(log = %self.path.display(), "sequencer stopped");
    }
}

/// A batch that did not reach the disk: every answer becomes the error, conflicts included
/// (they may name a head that was rolled back).
fn fail_all(answers: &mut [Answer], error: &EngineError) {
    for answer in answers {
        match answer {
            Answer::Gc(_, result) => *result = Err(error.duplicate()),
            Answer::Context(_, result) => *result = Err(error.duplicate()),
            Answer::Meta(_, result) => *result = Err(error.duplicate()),
            Answer::Batch(_, result) => *result = Err(error.duplicate()),
            Answer::Overlay(_, result) => *result = Err(error.duplicate()),
            Answer::Purge(_, result) => *result = Err(error.duplicate()),
        }
    }
}

/// A turn's key, labels and links in their stored order, refused past their limits.
fn normalized_extras(options: &mut TurnOptions) -> Result<TurnExtras, EngineError> {
    TurnExtras {
        key: options.key.take().map(Vec::from).unwrap_or_default(),
        labels: std::mem::take(&mut options.labels),
        links: std::mem::take(&mut options.links),
    }
    .normalize()
    .map_err(|over| EngineError::Limit {
        what: over.what,
        limit: over.limit,
    })
}
