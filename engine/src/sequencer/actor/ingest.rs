//! A standby's turns (issue 31, `engine/follow.rs`): the primary's `turns.log` slots, taken from
//! the replica, become this store's records through the one writer of the log. The slots are
//! checked (each decodes, in its place), written and synced where the log ends, then replayed
//! with recovery's rules (`Replay::resume`) against the live heads, contexts and dead turns, and
//! published as one batch exactly as a group commit publishes an append's: caches, watermark,
//! turn keys, heads, contexts, dead turns, counters. Readers cannot tell the two apart.
//!
//! Replay resumes from the state the live sequencer owns — heads, contexts (overlays and key
//! values among them), gc-dead turns and streams — so a record may continue what an earlier
//! batch began: a delta to a stream opened in an earlier segment (issue 46: without the open
//! streams every such delta was refused and the standby stalled). The batch's stream records
//! publish the new streams and wake their readers, and its stream and metadata records give
//! watchers the events the primary's gave.
//!
//! Slots that do not decode or do not replay (a context that does not exist, a blob not in its
//! shard, a broken DAG) are refused whole: the state is put back, the slots are cut off the log
//! again (a restart must not meet records the standby refused), and the error names the record.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Batch, HeadMove, SequencerActor};
use crate::error::{Corruption, EngineError};
use crate::format::context_meta::ContextMeta;
use crate::format::stream_meta::{StreamEnd, StreamMeta, is_stream_op};
use crate::format::turn_log::{
    Assembled, LOG_RECORD_BYTES, LogRecord, SlotAssembly, SlotHead, Whole, record_offset,
};
use crate::ids::TurnId;
use crate::model::IngestedLog;
use crate::sequencer::heads::Heads;
use crate::sequencer::recover::{RecoveredLog, Replay};
use crate::sequencer::streams::StreamId;
use crate::sequencer::watch::{WatchEvent, WatchKind};

impl SequencerActor {
    pub(super) async fn ingest(
        &mut self,
        first_record_id: u64,
        slots: Vec<u8>,
    ) -> Result<IngestedLog, EngineError> {
        self.check_ingest(first_record_id, &slots)?;
        let records =
            decode_slots(first_record_id, &slots).map_err(|(id, why)| self.damaged(id, why))?;
        let count = records.len() as u32;
        let offset = record_offset(first_record_id);
        self.file
            .append_durably(
                &slots,
                offset,
                count,
                &self.published.status,
                &self.published.sequencer_metrics,
            )
            .await?;

        let contexts_before = self.heads.count();
        // Every piece of replay state the live sequencer owns (cheap clones: persistent maps),
        // put back whole if the batch is refused.
        let saved = (
            self.heads.clone(),
            self.contexts.clone(),
            self.gc.dead.clone(),
            self.streams.clone(),
        );
        let state = match self.replay_ingested(first_record_id, &records) {
            Ok(state) => state,
            Err(error) => {
                (self.heads, self.contexts, self.gc.dead, self.streams) = saved;
                if let Err(source) = self.file.truncate(offset).await {
                    self.published.status.set_read_only(format!(
                        "cutting refused slots off {}: {source}",
                        self.path.display()
                    ));
                }
                return Err(error);
            }
        };

        let mut batch = Batch {
            contexts_before,
            records: count,
            ..Batch::default()
        };
        self.take_replayed(&records, state, &saved.0, &mut batch);
        self.next_record_id = first_record_id + u64::from(count);
        self.prepared_end = self.prepared_end.max(record_offset(self.next_record_id));
        // Pair of the replay's DAG checks: every head a reader will load exists.
        for head_move in &batch.moves {
            assert!(
                self.heads.raw(head_move.context_id).is_some(),
                "an ingested record moved context {} out of the head table",
                head_move.context_id
            );
        }
        self.publish(&batch);
        self.batch.contexts_before = self.heads.count();
        Ok(IngestedLog {
            records: u64::from(count),
            turns: batch.new_turns.len() as u64,
            log_records: self.next_record_id - 1,
        })
    }

    /// Damage at record `record_id` of the log, as an ingest refuses it.
    fn damaged(&self, record_id: u64, reason: String) -> EngineError {
        EngineError::Corrupt(Corruption::new(
            &self.path,
            record_offset(record_id),
            reason,
        ))
    }

    /// Only a standby ingests, and only whole slots that continue its log where it ends, with
    /// no batch of its own in flight.
    fn check_ingest(&self, first_record_id: u64, slots: &[u8]) -> Result<(), EngineError> {
        if !self.published.status.is_following() {
            return Err(EngineError::InvalidArgument(
                "only a standby takes turns.log slots from its replica; this store takes writes"
                    .into(),
            ));
        }
        if first_record_id != self.next_record_id || self.batch.records > 0 {
            return Err(self.damaged(
                first_record_id,
                format!(
                    "slots from record {first_record_id} do not follow the log, which ends \
                     before record {}",
                    self.next_record_id
                ),
            ));
        }
        if slots.is_empty() || !slots.len().is_multiple_of(LOG_RECORD_BYTES) {
            return Err(self.damaged(
                first_record_id,
                format!("{} bytes are not whole slots", slots.len()),
            ));
        }
        Ok(())
    }

    /// Replays the ingested records with recovery's rules against the live state, which it
    /// takes (the caller puts its copy back when this fails). Answers the state after them.
    fn replay_ingested(
        &mut self,
        first_record_id: u64,
        records: &[LogRecord],
    ) -> Result<RecoveredLog, EngineError> {
        let state = RecoveredLog {
            heads: std::mem::take(&mut self.heads),
            contexts: std::mem::take(&mut self.contexts),
            dead: std::mem::take(&mut self.gc.dead),
            streams: std::mem::take(&mut self.streams),
            ..RecoveredLog::default()
        };
        let log = crate::file::ScanFile::open(&self.path)
            .map_err(|source| EngineError::io(&self.path, source))?;
        let published = Arc::clone(&self.published);
        let mut replay = Replay::resume(
            log,
            published.turns.base(),
            &published.shards,
            state,
            first_record_id - 1,
        );
        for record in records {
            replay
                .record(record)
                .map_err(|reason| self.damaged(record.record_id(), reason))?;
        }
        if let Some(pending) = &replay.pending {
            let head = pending.head_record_id();
            return Err(self.damaged(
                head,
                format!("record {head} is missing slots at the end of the ingested ones"),
            ));
        }
        replay
            .state
            .check_blobs_missing()
            .map_err(|reason| self.damaged(first_record_id, reason))?;
        Ok(replay.state)
    }

    /// The replayed state becomes the live one, and `batch` says what changed as a group
    /// commit's would: new turns, head moves (against `heads_before`), watch events, counters.
    fn take_replayed(
        &mut self,
        records: &[LogRecord],
        state: RecoveredLog,
        heads_before: &Heads,
        batch: &mut Batch,
    ) {
        let (events, streams_changed) = record_events(records);
        batch.logical_bytes = state.logical_bytes;
        batch.dedup_hits = state.dedup_hits;
        batch.events = events;
        batch.streams_changed = streams_changed;
        let mut touched = BTreeSet::new();
        for record in records {
            match record {
                LogRecord::Turn(turn) => {
                    batch.new_turns.push(*turn);
                    touched.insert(turn.context_id);
                }
                LogRecord::Meta(meta) => {
                    touched.insert(meta.context_id);
                    batch.dead_changed = true;
                }
                _ => {}
            }
        }
        let RecoveredLog {
            heads,
            contexts,
            dead,
            streams,
            ..
        } = state;
        self.heads = heads;
        self.contexts = contexts;
        self.gc.dead = dead;
        self.streams = streams;
        for context_id in touched {
            // Only heads that moved: a record that left its context's head where it was (a
            // purge, a redaction, a tag) is no head move, and its watch event would name an
            // older turn than the events before it (found replaying a purge on a standby).
            if let Some(previous) = heads_before.raw(context_id)
                && self.heads.raw(context_id) != Some(previous)
            {
                batch.moves.push(HeadMove {
                    context_id,
                    previous,
                });
            }
        }
    }
}

/// The watch events of the batch's stream and metadata records, as the primary's live path
/// made them (`push_stream`, `push_meta`), and the streams the batch wrote records of. The
/// records replayed already: a record that does not reassemble or decode here cannot occur.
fn record_events(records: &[LogRecord]) -> (Vec<WatchEvent>, Vec<StreamId>) {
    let mut events = Vec::new();
    let mut streams = Vec::new();
    let mut pending: Option<SlotAssembly> = None;
    for record in records {
        let assembled = match (pending.take(), record) {
            (None, LogRecord::Turn(turn)) => SlotAssembly::start(SlotHead::Turn(*turn)),
            (None, LogRecord::Meta(head)) => SlotAssembly::start(SlotHead::Meta(*head)),
            (Some(assembly), LogRecord::Continuation(slot)) => match assembly.push(slot) {
                Ok(assembled) => assembled,
                Err(_) => continue,
            },
            _ => continue,
        };
        let meta = match assembled {
            Assembled::Partial(assembly) => {
                pending = Some(assembly);
                continue;
            }
            Assembled::Complete(Whole::Meta(meta)) => meta,
            Assembled::Complete(Whole::Turn(..)) => continue,
        };
        let event = |kind, turn_id, stream_id| WatchEvent {
            seq: meta.record_id,
            kind,
            context_id: meta.context_id,
            turn_id,
            stream_id,
        };
        if is_stream_op(meta.op) {
            let Ok(change) = StreamMeta::decode(meta.op, &meta.body) else {
                continue;
            };
            match change {
                StreamMeta::Open(_) => {
                    events.push(event(WatchKind::StreamOpened, TurnId::NONE, meta.record_id));
                    streams.push(meta.record_id);
                }
                StreamMeta::Delta { stream_id, .. } => streams.push(stream_id),
                StreamMeta::End { stream_id, end } => {
                    events.push(match end {
                        StreamEnd::Sealed(turn_id) => {
                            event(WatchKind::StreamSealed, turn_id, stream_id)
                        }
                        StreamEnd::Aborted => {
                            event(WatchKind::StreamAborted, TurnId::NONE, stream_id)
                        }
                    });
                    streams.push(stream_id);
                }
            }
        } else {
            match ContextMeta::decode(meta.op, &meta.body) {
                Ok(ContextMeta::Tags(_)) => {
                    events.push(event(WatchKind::Tags, TurnId::NONE, 0));
                }
                Ok(ContextMeta::Delete) => {
                    events.push(event(WatchKind::Deleted, TurnId::NONE, 0));
                }
                _ => {}
            }
        }
    }
    (events, streams)
}

/// Every slot decoded, each in its place; a zero or damaged slot is `(record id, why)`.
fn decode_slots(first_record_id: u64, slots: &[u8]) -> Result<Vec<LogRecord>, (u64, String)> {
    let mut records = Vec::with_capacity(slots.len() / LOG_RECORD_BYTES);
    for (index, chunk) in slots.chunks_exact(LOG_RECORD_BYTES).enumerate() {
        let record_id = first_record_id + index as u64;
        let mut slot = [0u8; LOG_RECORD_BYTES];
        slot.copy_from_slice(chunk);
        match LogRecord::decode(&slot) {
            Ok(Some(record)) if record.record_id() == record_id => records.push(record),
            Ok(Some(record)) => {
                return Err((
                    record_id,
                    format!("slot {record_id} holds record {}", record.record_id()),
                ));
            }
            Ok(None) => return Err((record_id, "a zero slot among the ingested ones".into())),
            Err(error) => return Err((record_id, error.to_string())),
        }
    }
    Ok(records)
}
