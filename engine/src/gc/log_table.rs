//! `turns.log` up to a round's watermark as the collector reads it: one sequential pass over
//! the durable slots (the base's, then the log's), into arrays by record id.

use std::collections::{HashMap, HashSet};

use crate::error::EngineError;
use crate::format::stream_meta::{StreamMeta, is_stream_op};
use crate::format::turn_extras::TurnExtras;
use crate::format::turn_log::{
    Assembled, LOG_RECORD_BYTES, LogRecord, MetaRecord, SlotAssembly, SlotHead, TurnRecord, Whole,
    turn_extra_slots,
};
use crate::ids::{BlobHash, TurnId};
use crate::published::Published;

/// `turns.log` up to the watermark, in arrays by record id: what marking needs of each turn.
pub(super) struct LogTable {
    /// 0: not a turn record (a context, metadata or continuation slot).
    pub context: Vec<u64>,
    pub parent: Vec<u64>,
    pub depth: Vec<u32>,
    pub hash: Vec<BlobHash>,
    pub payload_len: Vec<u32>,
    /// Continuation slots after each turn record (its extras).
    pub extra_slots: Vec<u16>,
    /// Slots present up to the watermark: the base's and `turns.log`'s after it.
    pub slots_present: u64,
    /// Heads as of the watermark (a turn moves its context's head to itself; a context record
    /// sets its first head).
    pub heads: HashMap<u64, u64>,
    /// Turns of each context, ascending.
    pub by_context: HashMap<u64, Vec<u64>>,
    pub links: Vec<(u64, Vec<TurnId>)>,
    /// Per turn with vectors (decision 0033): its vectors blob, which lives as the turn does.
    pub vectors: HashMap<u64, BlobHash>,
    /// Stream records (issue 32): record id, its stream, its slots.
    pub stream_records: Vec<(u64, u64, u32)>,
    /// Streams whose end record is durable: their records may leave the log.
    pub streams_ended: HashSet<u64>,
}

impl LogTable {
    pub fn is_turn(&self, record_id: u64) -> bool {
        self.context[record_id as usize] != 0
    }

    /// A table of `slots` records, none read yet.
    fn empty(slots: usize) -> LogTable {
        LogTable {
            context: vec![0; slots],
            parent: vec![0; slots],
            depth: vec![0; slots],
            hash: vec![BlobHash([0; 32]); slots],
            payload_len: vec![0; slots],
            extra_slots: vec![0; slots],
            slots_present: 0,
            heads: HashMap::new(),
            by_context: HashMap::new(),
            links: Vec::new(),
            vectors: HashMap::new(),
            stream_records: Vec::new(),
            streams_ended: HashSet::new(),
        }
    }

    /// A stream record: which stream it belongs to (an open is its own), and whether it ends it.
    fn add_stream_record(&mut self, meta: &MetaRecord) -> Result<(), String> {
        let stream = StreamMeta::decode(meta.op, &meta.body).map_err(|error| error.to_string())?;
        let stream_id = match stream {
            StreamMeta::Open(_) => meta.record_id,
            StreamMeta::Delta { stream_id, .. } => stream_id,
            StreamMeta::End { stream_id, .. } => {
                self.streams_ended.insert(stream_id);
                stream_id
            }
        };
        self.stream_records
            .push((meta.record_id, stream_id, meta.slot_count()));
        Ok(())
    }

    /// A turn: its place in the arrays, its context's head and turns, and its links.
    fn add_turn(&mut self, turn: &TurnRecord, extras: &[u8]) -> Result<(), String> {
        let id = turn.turn_id.0 as usize;
        self.context[id] = turn.context_id.0;
        self.parent[id] = turn.parent_turn_id.0;
        self.depth[id] = turn.depth;
        self.hash[id] = turn.payload_hash;
        self.payload_len[id] = turn.payload_len;
        self.extra_slots[id] = turn_extra_slots(turn.extras_len as usize);
        self.heads.insert(turn.context_id.0, turn.turn_id.0);
        self.by_context
            .entry(turn.context_id.0)
            .or_default()
            .push(turn.turn_id.0);
        if !extras.is_empty() {
            let extras = TurnExtras::decode(extras).map_err(|error| error.to_string())?;
            if let Some(vectors) = extras.vectors {
                self.vectors.insert(turn.turn_id.0, vectors.hash);
            }
            if !extras.links.is_empty() {
                self.links.push((turn.turn_id.0, extras.links));
            }
        }
        Ok(())
    }

    /// One sequential read of records `1..=watermark` (all durable): the base's (a log
    /// compaction's), then `turns.log`'s after it.
    pub fn read(published: &Published, watermark: u64) -> Result<LogTable, EngineError> {
        let path = published.turns.path().clone();
        let mut table = LogTable::empty(watermark as usize + 1);
        let corrupt = |record_id: u64, reason: String| {
            EngineError::Corrupt(crate::error::Corruption::new(
                &path,
                record_id.saturating_sub(1) * LOG_RECORD_BYTES as u64,
                reason,
            ))
        };
        let mut pending: Option<SlotAssembly> = None;
        let mut previous = 0u64;
        published.turns.for_each_slot(watermark, |encoded| {
            {
                let record = match LogRecord::decode(encoded) {
                    Ok(Some(record)) if record.record_id() > previous => record,
                    _ => {
                        return Err(corrupt(
                            previous + 1,
                            "durable record does not decode".into(),
                        ));
                    }
                };
                let record_id = record.record_id();
                previous = record_id;
                table.slots_present += 1;
                let assembled = match (pending.take(), record) {
                    (None, LogRecord::Context(context)) => {
                        table
                            .heads
                            .insert(context.context_id.0, context.head_turn_id.0);
                        None
                    }
                    (None, LogRecord::Turn(turn)) => {
                        Some(SlotAssembly::start(SlotHead::Turn(turn)))
                    }
                    (None, LogRecord::Meta(head)) => {
                        Some(SlotAssembly::start(SlotHead::Meta(head)))
                    }
                    (Some(assembly), LogRecord::Continuation(slot)) => Some(
                        assembly
                            .push(&slot)
                            .map_err(|reason| corrupt(record_id, reason))?,
                    ),
                    _ => return Err(corrupt(record_id, "slots out of order".into())),
                };
                match assembled {
                    None => {}
                    Some(Assembled::Complete(Whole::Meta(meta))) if is_stream_op(meta.op) => table
                        .add_stream_record(&meta)
                        .map_err(|reason| corrupt(meta.record_id, reason))?,
                    Some(Assembled::Complete(Whole::Meta(_))) => {}
                    Some(Assembled::Partial(assembly)) => pending = Some(assembly),
                    Some(Assembled::Complete(Whole::Turn(turn, extras))) => table
                        .add_turn(&turn, &extras)
                        .map_err(|reason| corrupt(turn.turn_id.0, reason))?,
                }
            }
            Ok(())
        })?;
        // The watermark is a batch boundary: no record is half-read.
        assert!(pending.is_none(), "the durable watermark splits a record");
        Ok(table)
    }
}
