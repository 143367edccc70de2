//! The sequencer actor: sole owner of `turns.log` and of the heads. It allocates TurnIDs
//! (linearizable: one writer, one counter), checks and applies head moves (per-context
//! compare-and-set, the DAG rule of `heads.rs`), and group-commits (`group_commit.rs`): decide
//! every request against the heads as the batch leaves them, one write, ONE fdatasync,
//! publish, then answer all.
//!
//! This file is the batch's mechanics: the records pushed, the write and fdatasync, the wait
//! for pending blobs, the publish order (caches filled → watermark → turn keys → heads →
//! contexts → dead turns), the rollback of a failed batch, the records as the batch leaves the
//! log. Each request kind's rules are apart, as `impl SequencerActor` blocks: `actor/append.rs`,
//! `actor/contexts.rs`, `actor/overlays.rs`, `actor/gc.rs`, `actor/ingest.rs` (a standby's
//! slots from its replica).
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

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::config::{HELD_RECORDS_MAX, Limits};
use crate::error::EngineError;
use crate::file::{ActorFile, ActorIo, open_actor_file};
use crate::format::context_meta::ContextMeta;
use crate::format::turn_extras::TurnExtras;
use crate::format::turn_log::turn_extras_body;
use crate::format::turn_log::{LOG_RECORD_BYTES, LogRecord, MetaRecord, TurnRecord, record_offset};
use crate::group_commit::{Admitted, GroupCommit};
use crate::ids::{BlobHash, ContextId, TenantId, TurnId};
use crate::model::{Appended, ContextView, Created, Overlaid, Purged};
use crate::pipeline::{
    BatchReply, BlobsDurable, ContextReply, GcFenced, MetaReply, OverlayReply, PurgeReply,
    SequencerRequest, ShardBatch, StreamAnswer,
};
use crate::published::Published;
use crate::sequencer::contexts::Contexts;
use crate::sequencer::heads::DELETED_HEAD;
use crate::sequencer::heads::{HeadState, Heads};
use crate::sequencer::recover::RecoveredLog;
use crate::sequencer::streams::{StreamId, Streams};
use crate::sequencer::vector_indexes::VectorIndexInfo;
use crate::sequencer::watch::{WatchEvent, WatchKind, WatchLog};

mod append;
mod contexts;
mod floors;
mod gc;
mod ingest;
mod overlays;
mod streams;
mod tenants;
mod vector_indexes;

use gc::GcState;

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
    Stream(
        oneshot::Sender<Result<StreamAnswer, EngineError>>,
        Result<StreamAnswer, EngineError>,
    ),
    Floors(
        oneshot::Sender<Result<(), EngineError>>,
        Result<(), EngineError>,
    ),
    Tenant(
        oneshot::Sender<Result<TenantId, EngineError>>,
        Result<TenantId, EngineError>,
    ),
    VectorIndex(
        oneshot::Sender<Result<VectorIndexInfo, EngineError>>,
        Result<VectorIndexInfo, EngineError>,
    ),
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
    /// The streams the batch carries records of (repeats allowed): readers get the new
    /// streams once it is durable, and only these streams' readers are woken.
    streams_changed: Vec<StreamId>,
    /// Watch events of the batch's stream and metadata records (head moves are added at
    /// publish, from `moves`).
    events: Vec<WatchEvent>,
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
    /// Open and lately ended streams, as this batch leaves them; published like `contexts`.
    streams: Streams,
    /// Events for watchers (memory only), published after each batch.
    watch: WatchLog,
    batch: Batch,
    gc: GcState,
    /// The shards' `BlobsDurable` notices.
    notices: flume::Receiver<BlobsDurable>,
    /// Per shard, the last batch it said is durable (batches are numbered from 1).
    blobs_durable: Vec<u64>,
    /// A shard's fdatasync failed: no pending blob of a later batch will become durable.
    blobs_failed: Option<EngineError>,
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
            streams: recovered.streams,
            watch: WatchLog::starting_after(recovered.next_record_id - 1),
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

    fn push_meta(&mut self, context_id: ContextId, change: &ContextMeta, at_unix_ms: u64) {
        let kind = match change {
            ContextMeta::Tags(_) => Some(WatchKind::Tags),
            ContextMeta::Delete => Some(WatchKind::Deleted),
            _ => None,
        };
        if let Some(kind) = kind {
            self.batch.events.push(WatchEvent {
                seq: self.next_record_id,
                kind,
                context_id,
                turn_id: TurnId::NONE,
                stream_id: 0,
            });
        }
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

    /// Writes the batch and ONE fdatasync, waits for the shard batches its turns name
    /// (decision 0014), then publishes it; or, when any step fails, rolls it back (nothing of
    /// it published) and answers the error.
    async fn write_batch(&mut self, batch: &mut Batch) -> Result<(), EngineError> {
        let first_record_id = self.next_record_id - u64::from(batch.records);
        let offset = record_offset(first_record_id);
        let bytes = std::mem::take(&mut batch.bytes);
        let held = batch
            .first_pending_record
            .map_or(0, |first| self.next_record_id - first);
        // More turns after a pending blob than recovery may cut as a tail: the blobs first, as
        // before decision 0014 (a rare, oversized batch pays two fsyncs).
        let mut written = if held > HELD_RECORDS_MAX {
            self.wait_for_blobs(&batch.waits).await
        } else {
            Ok(())
        };
        if written.is_ok() {
            written = self
                .file
                .append_durably(
                    &bytes,
                    offset,
                    batch.records,
                    &self.published.status,
                    &self.published.sequencer_metrics,
                )
                .await;
        }
        // The log's fdatasync ran while the shards synced their packs: now every blob the
        // batch names must be durable before anyone sees or learns of its turns. (After a
        // wait before the write, this one finds them durable at once.)
        if written.is_ok() {
            written = self.wait_for_blobs(&batch.waits).await;
        }
        if let Err(error) = written {
            self.prepared_end = offset;
            self.roll_back(batch, first_record_id);
            self.contexts = Contexts::clone(&self.published.contexts.load());
            self.streams = Streams::clone(&self.published.streams.load());
            self.batch.contexts_before = self.heads.count();
            return Err(error);
        }
        for hash in &batch.pending_blobs {
            assert!(
                self.published.shard_of(hash).contains(hash),
                "blob {hash} is published with a turn but not durable"
            );
        }
        self.publish(batch);
        Ok(())
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
        // The batch's changes to the vector graphs leave with it (a failed batch's never do).
        let owners = &mut self.contexts.vector_indexes.owners;
        let (graph_seq, graph_changes) = owners.take_changes(published.vector_graphs.applied_seq());
        // Last: a reader that finds a name or a tag finds its context's head.
        published.contexts.publish(self.contexts.clone());
        if graph_seq > 0 {
            published.vector_graphs.feed(graph_seq, graph_changes);
        }
        if batch.dead_changed {
            published.turns.publish_dead(self.gc.dead.clone());
        }
        if !batch.streams_changed.is_empty() {
            published
                .streams
                .publish(self.streams.clone(), &batch.streams_changed);
        }
        let counters = &published.counters;
        counters
            .turns
            .fetch_add(batch.new_turns.len() as u64, Ordering::Relaxed);
        // Live contexts: a deleted one keeps its slot among the heads.
        counters.contexts.store(
            self.heads.count() - self.contexts.deleted_contexts - self.contexts.skipped_contexts,
            Ordering::Relaxed,
        );
        counters
            .logical_bytes
            .fetch_add(batch.logical_bytes, Ordering::Relaxed);
        counters
            .dedup_hits
            .fetch_add(batch.dedup_hits, Ordering::Relaxed);
        // Last: a watcher that learns of a head or a stream can read it.
        self.publish_events(batch);
    }
}

impl SequencerActor {
    /// The batch's watch events: its records' (`events`), and one head move per context whose
    /// head the batch moved (the last head; a deletion is its own event), by record id.
    fn publish_events(&mut self, batch: &Batch) {
        let mut events = batch.events.clone();
        let mut seen = std::collections::HashSet::new();
        for head_move in &batch.moves {
            let context_id = head_move.context_id;
            if !seen.insert(context_id) {
                continue;
            }
            let head = self.heads.raw(context_id).map(|head| head.head_turn_id);
            match head {
                Some(head) if head != DELETED_HEAD && !head.is_none() => events.push(WatchEvent {
                    seq: head.0,
                    kind: WatchKind::Head,
                    context_id,
                    turn_id: head,
                    stream_id: 0,
                }),
                _ => {}
            }
        }
        if events.is_empty() {
            return;
        }
        self.watch.extend(events);
        self.published.watch.publish(self.watch.clone());
    }
}

impl GroupCommit for SequencerActor {
    type Request = SequencerRequest;

    // One arm per request, each handing it to the method that owns it: the router of every
    // message the sequencer takes, read best as one match (rustfmt spreads each variant's
    // fields over lines).
    #[allow(clippy::too_many_lines)]
    async fn admit(&mut self, request: SequencerRequest) -> Admitted {
        match request {
            SequencerRequest::CreateContext { new, scope, reply } => {
                let result = self.create_context(new, scope);
                self.batch.answers.push(Answer::Context(reply, result));
            }
            SequencerRequest::Meta {
                context_id,
                changes,
                expected_head,
                kv_if_absent,
                reply,
            } => self.admit_meta(context_id, changes, expected_head, kv_if_absent, reply),
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
                self.admit_pending(batch, appends);
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
            SequencerRequest::Stream { change, reply } => {
                let result = self.stream(change);
                self.batch.answers.push(Answer::Stream(reply, result));
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
            SequencerRequest::RaiseFloors {
                records_floor,
                contexts_floor,
                reply,
            } => {
                let result = self.raise_floors(records_floor, contexts_floor);
                self.batch.answers.push(Answer::Floors(reply, result));
            }
            SequencerRequest::RegisterTenant { name, reply } => {
                let result = self.register_tenant(name);
                self.batch.answers.push(Answer::Tenant(reply, result));
            }
            SequencerRequest::DeleteTenant { tenant_id, reply } => {
                let result = self.delete_tenant(tenant_id);
                self.batch.answers.push(Answer::Tenant(reply, result));
            }
            SequencerRequest::VectorIndex { change, reply } => {
                let result = self.change_vector_index(change);
                self.batch.answers.push(Answer::VectorIndex(reply, result));
            }
            SequencerRequest::Ingest {
                first_record_id,
                slots,
                reply,
            } => drop(reply.send(self.ingest(first_record_id, slots).await)),
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
        let durable = if batch.records > 0 {
            self.write_batch(&mut batch).await
        } else {
            // Only refusals to answer: they too wait for their blobs.
            self.wait_for_blobs(&batch.waits).await
        };
        match durable {
            Err(error) => fail_all(&mut batch.answers, &error),
            // The ack gate (decision 0031 §6), once per batch, after the fdatasync: a batch
            // that became durable while the gate closed is not acknowledged.
            Ok(()) => {
                if let Some(reason) = self.published.status.acks_closed() {
                    unconfirm_all(&mut batch.answers, &reason);
                }
            }
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
                Answer::Stream(reply, result) => drop(reply.send(result)),
                Answer::Floors(reply, result) => drop(reply.send(result)),
                Answer::Tenant(reply, result) => drop(reply.send(result)),
                Answer::VectorIndex(reply, result) => drop(reply.send(result)),
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

/// A batch durable here while the ack gate closed (or a fence came): every success a writer
/// would take as an acknowledgement becomes `Unconfirmed`; refusals stay (they wrote nothing),
/// and so do the collector's and the floors' answers (internal steps, no acknowledgement; the
/// collector's next step checks the gate itself).
fn unconfirm_all(answers: &mut [Answer], reason: &str) {
    let unconfirmed = || EngineError::Unconfirmed(reason.to_string());
    for answer in answers {
        match answer {
            Answer::Context(_, result @ Ok(_)) => *result = Err(unconfirmed()),
            Answer::Meta(_, result @ Ok(_)) => *result = Err(unconfirmed()),
            Answer::Batch(_, result @ Ok(_)) => *result = Err(unconfirmed()),
            Answer::Overlay(_, result @ Ok(_)) => *result = Err(unconfirmed()),
            Answer::Purge(_, result @ Ok(_)) => *result = Err(unconfirmed()),
            Answer::Stream(_, result @ Ok(_)) => *result = Err(unconfirmed()),
            Answer::Tenant(_, result @ Ok(_)) => *result = Err(unconfirmed()),
            Answer::VectorIndex(_, result @ Ok(_)) => *result = Err(unconfirmed()),
            _ => {}
        }
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
            Answer::Stream(_, result) => *result = Err(error.duplicate()),
            Answer::Floors(_, result) => *result = Err(error.duplicate()),
            Answer::Tenant(_, result) => *result = Err(error.duplicate()),
            Answer::VectorIndex(_, result) => *result = Err(error.duplicate()),
        }
    }
}
