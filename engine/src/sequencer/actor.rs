//! The sequencer actor: sole owner of `turns.log` and of the heads. It allocates TurnIDs
//! (linearizable: one writer, one counter), checks and applies head moves (per-context
//! compare-and-set), and group-commits: drain the queue, decide every request against the
//! heads as the batch leaves them, one write, ONE fdatasync, publish, then answer all.
//!
//! Every answer of a batch, errors included, waits for the batch: a `Conflict` may name a
//! head that this very batch wrote, and no one may learn a TurnID before it is durable.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::config::Limits;
use crate::error::EngineError;
use crate::file::{ActorFile, ActorIo, open_actor_file};
use crate::format::turn_log::{ContextRecord, LOG_RECORD_BYTES, LogRecord, record_offset};
use crate::ids::{BlobHash, CodecTag, ContextId, TurnId, TypeTag};
use crate::model::{Appended, ContextHead, Turn};
use crate::published::{CONTEXTS_MAX, Published};
use crate::sequencer::recover::{HeadState, RecoveredLog};
use crate::store_dir::now_unix_ms;

pub(crate) type ContextReply = oneshot::Sender<Result<ContextHead, EngineError>>;
pub(crate) type TurnReply = oneshot::Sender<Result<Appended, EngineError>>;

#[derive(Debug)]
pub(crate) struct AppendTurn {
    pub context_id: ContextId,
    pub expected_head: Option<TurnId>,
    pub type_tag: TypeTag,
    pub codec: CodecTag,
    /// Durable in its shard before this request was sent.
    pub payload_hash: BlobHash,
    pub payload_len: u32,
    /// The payload was already stored (for the dedup counter).
    pub deduped: bool,
}

#[derive(Debug)]
pub(crate) enum SequencerRequest {
    /// A new context, empty (`base == TurnId::NONE`) or with its head at a durable turn.
    CreateContext { base: TurnId, reply: ContextReply },
    Append {
        append: AppendTurn,
        reply: TurnReply,
    },
    /// Finish the queue and stop.
    Shutdown { done: oneshot::Sender<()> },
}

enum Answer {
    Context(ContextReply, Result<ContextHead, EngineError>),
    Turn(TurnReply, Result<Appended, EngineError>),
}

/// Undo entry for a batch that fails to reach the disk.
struct HeadMove {
    context_index: usize,
    previous: HeadState,
}

#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    answers: Vec<Answer>,
    moves: Vec<HeadMove>,
    records: u32,
    turns: u64,
    logical_bytes: u64,
    dedup_hits: u64,
}

pub(crate) struct SequencerActor {
    published: Arc<Published>,
    limits: Limits,
    preallocate: bool,
    path: std::path::PathBuf,
    file: ActorFile,
    /// File length: records end at `record_offset(next_record_id)`, zeros follow up to here.
    prepared_end: u64,
    next_record_id: u64,
    heads: Vec<HeadState>,
    batch: Batch,
}

impl SequencerActor {
    pub async fn open(
        recovered: RecoveredLog,
        published: Arc<Published>,
        limits: Limits,
        io: ActorIo,
    ) -> Result<SequencerActor, EngineError> {
        let path = published.turns.path.clone();
        let file = open_actor_file(&path, io.sync_mode).await?;
        assert_eq!(
            recovered.next_record_id,
            published.turns.durable_record_id() + 1
        );
        let mut actor = SequencerActor {
            published,
            limits,
            preallocate: io.preallocate,
            path,
            file,
            prepared_end: recovered.file_len,
            next_record_id: recovered.next_record_id,
            heads: recovered.heads,
            batch: Batch::default(),
        };
        actor.prepare_space().await;
        Ok(actor)
    }

    pub async fn run(mut self, inbox: flume::Receiver<SequencerRequest>) {
        let mut shutdown: Option<oneshot::Sender<()>> = None;
        while shutdown.is_none() {
            let Ok(first) = inbox.recv_async().await else {
                break;
            };
            self.admit(first, &mut shutdown);
            self.fill_batch(&inbox, &mut shutdown).await;
            self.commit().await;
            self.prepare_space().await;
        }
        while let Ok(request) = inbox.try_recv() {
            self.admit(request, &mut shutdown);
            if self.is_full() {
                self.commit().await;
            }
        }
        self.commit().await;
        tracing::debug!("sequencer stopped");
        if let Some(done) = shutdown {
            let _ = done.send(());
        }
    }

    fn is_full(&self) -> bool {
        self.batch.records >= self.limits.sequencer_batch_records_max
    }

    async fn fill_batch(
        &mut self,
        inbox: &flume::Receiver<SequencerRequest>,
        shutdown: &mut Option<oneshot::Sender<()>>,
    ) {
        while shutdown.is_none() && !self.is_full() {
            match inbox.try_recv() {
                Ok(request) => self.admit(request, shutdown),
                Err(_) => break,
            }
        }
        if self.limits.batch_wait_us_max == 0 || self.batch.records == 0 {
            return;
        }
        let deadline = std::time::Instant::now()
            + std::time::Duration::from_micros(u64::from(self.limits.batch_wait_us_max));
        while shutdown.is_none() && !self.is_full() {
            match compio::time::timeout_at(deadline, inbox.recv_async()).await {
                Ok(Ok(request)) => self.admit(request, shutdown),
                _ => break,
            }
        }
    }

    fn admit(&mut self, request: SequencerRequest, shutdown: &mut Option<oneshot::Sender<()>>) {
        match request {
            SequencerRequest::CreateContext { base, reply } => {
                let result = self.create_context(base);
                self.batch.answers.push(Answer::Context(reply, result));
            }
            SequencerRequest::Append { append, reply } => {
                let result = self.append(&append);
                self.batch.answers.push(Answer::Turn(reply, result));
            }
            SequencerRequest::Shutdown { done } => *shutdown = Some(done),
        }
    }

    fn create_context(&mut self, base: TurnId) -> Result<ContextHead, EngineError> {
        self.published.status.check_writable()?;
        let head_depth = if base.is_none() {
            0
        } else {
            // Only a durable turn can be a base: no one can know of any other.
            self.published.turns.turn(base)?.depth
        };
        if self.heads.len() as u64 >= CONTEXTS_MAX {
            return Err(EngineError::InvalidArgument(format!(
                "the store holds the maximum of {CONTEXTS_MAX} contexts"
            )));
        }
        let context_id = ContextId(self.heads.len() as u64 + 1);
        let record = LogRecord::Context(ContextRecord {
            record_id: self.next_record_id,
            context_id,
            head_turn_id: base,
            head_depth,
            created_at_unix_ms: now_unix_ms(),
        });
        self.push_record(&record);
        self.heads.push(HeadState {
            head_turn_id: base,
            head_depth,
        });
        Ok(ContextHead {
            context_id,
            head_turn_id: base,
            head_depth,
        })
    }

    fn append(&mut self, append: &AppendTurn) -> Result<Appended, EngineError> {
        self.published.status.check_writable()?;
        let context_index = (append.context_id.0 as usize).wrapping_sub(1);
        let Some(&head) = self.heads.get(context_index) else {
            return Err(EngineError::ContextNotFound(append.context_id));
        };
        if let Some(expected) = append.expected_head
            && expected != head.head_turn_id
        {
            return Err(EngineError::Conflict {
                context_id: append.context_id,
                expected,
                actual: head.head_turn_id,
            });
        }
        let depth = if head.head_turn_id.is_none() {
            0
        } else {
            head.head_depth.checked_add(1).ok_or_else(|| {
                EngineError::InvalidArgument(format!(
                    "context {} is at the maximum depth {}",
                    append.context_id,
                    u32::MAX
                ))
            })?
        };
        // The caller made the blob durable before sending: a turn never points at a blob
        // that a crash could lose.
        assert!(
            self.published
                .shard_of(&append.payload_hash)
                .contains(&append.payload_hash),
            "blob {} of an append is not durable",
            append.payload_hash
        );
        let turn = Turn {
            turn_id: TurnId(self.next_record_id),
            parent_turn_id: head.head_turn_id,
            context_id: append.context_id,
            depth,
            type_tag: append.type_tag,
            codec: append.codec,
            payload_hash: append.payload_hash,
            payload_len: append.payload_len,
            flags: 0,
            created_at_unix_ms: now_unix_ms(),
        };
        self.push_record(&LogRecord::Turn(turn));
        self.batch.moves.push(HeadMove {
            context_index,
            previous: head,
        });
        self.heads[context_index] = HeadState {
            head_turn_id: turn.turn_id,
            head_depth: depth,
        };
        self.batch.turns += 1;
        self.batch.logical_bytes += u64::from(append.payload_len);
        self.batch.dedup_hits += u64::from(append.deduped);
        Ok(Appended {
            turn,
            deduped: append.deduped,
        })
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

    async fn commit(&mut self) {
        let mut batch = std::mem::take(&mut self.batch);
        if batch.records > 0 {
            let first_record_id = self.next_record_id - u64::from(batch.records);
            let contexts_before =
                self.heads.len() - batch.answers.iter().filter(|a| is_new_context(a)).count();
            let bytes = std::mem::take(&mut batch.bytes);
            if let Err(error) = self.write_and_sync(bytes, first_record_id).await {
                self.roll_back(&batch, first_record_id, contexts_before);
                fail_all(&mut batch.answers, &error);
            } else {
                self.publish(&batch, contexts_before);
            }
        }
        for answer in batch.answers {
            match answer {
                Answer::Context(reply, result) => drop(reply.send(result)),
                Answer::Turn(reply, result) => drop(reply.send(result)),
            }
        }
    }

    async fn write_and_sync(
        &mut self,
        bytes: Vec<u8>,
        first_record_id: u64,
    ) -> Result<(), EngineError> {
        let offset = record_offset(first_record_id);
        if let Err(source) = self.file.write_all_at(&bytes, offset) {
            // Cut off whatever part of the batch reached the file: recovery must not find
            // turns whose appends were answered with an error.
            if let Err(cut) = self.file.set_len(offset) {
                self.published.status.set_read_only(format!(
                    "cutting {} after a failed write: {cut}",
                    self.path.display()
                ));
            }
            self.prepared_end = offset;
            return Err(EngineError::from_write(&self.path, source));
        }
        if let Err(source) = self.file.sync_data().await {
            let reason = format!("fdatasync of {} failed: {source}", self.path.display());
            self.published.status.set_read_only(reason.clone());
            return Err(EngineError::ReadOnly(reason));
        }
        Ok(())
    }

    /// Keeps zero-filled space ahead of the records, so that a batch's fdatasync overwrites
    /// allocated blocks instead of growing the file. Runs between batches, after the answers
    /// went out; a failure only costs speed (the next batches grow the file themselves).
    async fn prepare_space(&mut self) {
        let data_end = record_offset(self.next_record_id);
        let step = u64::from(self.limits.log_preallocate_bytes);
        if !self.preallocate || self.prepared_end >= data_end + step / 2 {
            return;
        }
        if self.published.status.is_read_only() {
            return;
        }
        let target = data_end + step;
        let start = self.prepared_end.max(data_end);
        let zeros = vec![0u8; (target - start) as usize];
        if let Err(error) = self.file.write_all_at(&zeros, start) {
            tracing::warn!(log = %self.path.display(), %error, "could not prepare space in turns.log");
            self.prepared_end = data_end;
            return;
        }
        if let Err(source) = self.file.sync_data().await {
            let reason = format!("fdatasync of {} failed: {source}", self.path.display());
            self.published.status.set_read_only(reason);
            return;
        }
        self.prepared_end = target;
    }

    fn roll_back(&mut self, batch: &Batch, first_record_id: u64, contexts_before: usize) {
        for head_move in batch.moves.iter().rev() {
            self.heads[head_move.context_index] = head_move.previous;
        }
        self.heads.truncate(contexts_before);
        self.next_record_id = first_record_id;
    }

    /// Makes the batch visible: turns first, then heads, then new contexts, so a reader that
    /// sees a head can always read its turn.
    fn publish(&self, batch: &Batch, contexts_before: usize) {
        let published = &self.published;
        published.turns.publish(self.next_record_id - 1);
        for head_move in &batch.moves {
            let context_id = ContextId(head_move.context_index as u64 + 1);
            published
                .heads
                .set_head(context_id, self.heads[head_move.context_index].head_turn_id);
        }
        for context_index in contexts_before..self.heads.len() {
            let context_id = ContextId(context_index as u64 + 1);
            published
                .heads
                .set_head(context_id, self.heads[context_index].head_turn_id);
        }
        published.heads.publish_contexts(self.heads.len() as u64);
        let counters = &published.counters;
        counters.turns.fetch_add(batch.turns, Ordering::Relaxed);
        counters
            .contexts
            .store(self.heads.len() as u64, Ordering::Relaxed);
        counters
            .logical_bytes
            .fetch_add(batch.logical_bytes, Ordering::Relaxed);
        counters
            .dedup_hits
            .fetch_add(batch.dedup_hits, Ordering::Relaxed);
    }
}

fn is_new_context(answer: &Answer) -> bool {
    matches!(answer, Answer::Context(_, Ok(_)))
}

/// A batch that did not reach the disk: every answer becomes the error, conflicts included
/// (they may name a head that was rolled back).
fn fail_all(answers: &mut [Answer], error: &EngineError) {
    for answer in answers {
        match answer {
            Answer::Context(_, result) => *result = Err(error.duplicate()),
            Answer::Turn(_, result) => *result = Err(error.duplicate()),
        }
    }
}
