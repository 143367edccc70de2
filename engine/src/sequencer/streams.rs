//! `Streams` (issue 32, decision 0027): the open streams, each a turn in the making (its
//! open record's options, its acknowledged bytes as the deltas came), and the streams that
//! ended lately (sealed into a turn, or aborted). One set of rules for the live path
//! (`sequencer/actor/streams.rs`) and for replay (`sequencer/recover.rs`); readers use the
//! published snapshot (`StreamsView`), swapped in after each batch that changed it, and wait
//! on their stream's wake slot for bytes that are not there yet (a batch wakes the readers of
//! the streams it wrote, not every reader).
//!
//! Memory: an open stream holds its bytes (at most `blob_bytes_max`, at most
//! `streams_open_max` streams); an ended one 24 bytes in an ordered map of at most
//! `ENDED_STREAMS_KEPT_MAX` entries (the oldest forgotten first: asked about, it is unknown).

use std::sync::Arc;

use bytes::Bytes;

use crate::format::stream_meta::{StreamEnd, StreamMeta, StreamOpen};
use crate::ids::ContextId;

/// Ended streams remembered, so that a reader that comes late learns the turn a stream
/// became (or that it was aborted): 65,536 × ~40 bytes of map.
pub const ENDED_STREAMS_KEPT_MAX: usize = 65_536;

/// A stream's identity: the record id of its open record (unique, never reused once
/// acknowledged, like a TurnID).
pub type StreamId = u64;

/// An open stream as calls answer it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct StreamInfo {
    pub stream_id: StreamId,
    pub context_id: ContextId,
    /// Bytes acknowledged so far.
    pub length_bytes: u64,
    pub type_tag: crate::ids::TypeTag,
    pub codec: crate::ids::CodecTag,
    pub opened_at_unix_ms: u64,
    /// The last delta's time (the open's before any).
    pub updated_at_unix_ms: u64,
}

/// An open stream as the sequencer and its readers see it.
#[derive(Clone, Debug)]
pub(crate) struct OpenStream {
    pub context_id: ContextId,
    pub open: Arc<StreamOpen>,
    /// The stream's bytes so far (`length_bytes` of them).
    pub bytes: StreamBytes,
    pub length_bytes: u64,
    pub opened_at_unix_ms: u64,
    pub updated_at_unix_ms: u64,
    /// Who may append, seal and abort (a server's connection; `NO_OWNER`: anyone, and the
    /// next caller with an owner takes it). Memory only: after a restart every stream is
    /// unowned, so a writer that reconnects continues its stream.
    pub owner: u64,
}

/// Who opens a stream: an owner id (`NO_OWNER`: in-process, anyone may write) and how many
/// open streams that owner may hold at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamOwner {
    pub owner: u64,
    pub streams_max: u32,
}

impl StreamOwner {
    /// In-process callers: no owner, no limit but the store's.
    pub const NONE: StreamOwner = StreamOwner {
        owner: NO_OWNER,
        streams_max: u32::MAX,
    };
}

/// An open stream's owner when none holds it (replayed, released, or in-process callers).
pub const NO_OWNER: u64 = 0;

impl OpenStream {
    pub fn info(&self, stream_id: StreamId) -> StreamInfo {
        StreamInfo {
            stream_id,
            context_id: self.context_id,
            length_bytes: self.length_bytes,
            type_tag: self.open.type_tag,
            codec: self.open.codec,
            opened_at_unix_ms: self.opened_at_unix_ms,
            updated_at_unix_ms: self.updated_at_unix_ms,
        }
    }

    /// Up to `bytes_max` bytes from `offset` (an offset past the end reads nothing): a slice
    /// of the stream's bytes where they lie in one piece, else a copy of at most `bytes_max`
    /// bytes (readers page through long streams).
    pub fn read(&self, offset: u64, bytes_max: usize) -> Bytes {
        if offset >= self.length_bytes || bytes_max == 0 {
            return Bytes::new();
        }
        let want = ((self.length_bytes - offset) as usize).min(bytes_max);
        // Pair of `StreamBytes::push`'s: the bytes are the stream's length.
        assert_eq!(
            self.bytes.len(),
            self.length_bytes,
            "a stream holds its length"
        );
        self.bytes.read(offset, want)
    }
}

/// Deltas that a stream's tail holds at most, in bytes, before they become a block.
const TAIL_BYTES_MAX: usize = 1024;

/// An open stream's bytes as snapshots share them: blocks of deltas (immutable, each at least
/// the tail's size but the last delta's own) and a tail holding the latest deltas (under
/// `TAIL_BYTES_MAX` but for one larger delta), replaced whole at each delta. Why a tail: a
/// delta pushed onto a persistent vector shared with the last published snapshot copies the
/// vector's last chunk (64 pieces, a refcount each) and the snapshot's drop frees it again —
/// per delta, and every batch publishes a snapshot; copying a tail of at most 1 KiB costs less,
/// and a reader near the end gets a slice of it, with no copy.
#[derive(Clone, Debug, Default)]
pub(crate) struct StreamBytes {
    blocks: imbl::Vector<Bytes>,
    /// `block_starts[i]`: where `blocks[i]` starts in the stream.
    block_starts: imbl::Vector<u64>,
    tail: Bytes,
    /// Where the tail starts: the blocks' length.
    tail_start: u64,
}

impl StreamBytes {
    pub fn len(&self) -> u64 {
        self.tail_start + self.tail.len() as u64
    }

    /// Appends a delta.
    fn push(&mut self, delta: &[u8]) {
        if !self.tail.is_empty() && self.tail.len() + delta.len() > TAIL_BYTES_MAX {
            let block = std::mem::take(&mut self.tail);
            self.block_starts.push_back(self.tail_start);
            self.tail_start += block.len() as u64;
            self.blocks.push_back(block);
        }
        let mut tail = Vec::with_capacity(self.tail.len() + delta.len());
        tail.extend_from_slice(&self.tail);
        tail.extend_from_slice(delta);
        self.tail = Bytes::from(tail);
    }

    /// `want` (≥ 1) bytes from `offset`, all within the stream: a slice where they lie in one
    /// block or in the tail (a reader near the end), else a copy.
    fn read(&self, offset: u64, want: usize) -> Bytes {
        assert!(
            want > 0 && offset + want as u64 <= self.len(),
            "a read of {want} bytes at {offset} within the stream's {}",
            self.len()
        );
        if offset >= self.tail_start {
            let skip = (offset - self.tail_start) as usize;
            return self.tail.slice(skip..skip + want);
        }
        // The block that holds `offset`: the last one starting at or before it.
        let first = match self.block_starts.binary_search(&offset) {
            Ok(index) => index,
            Err(index) => index - 1, // index ≥ 1: block_starts[0] is 0 and offset > 0 here
        };
        let mut out = Vec::with_capacity(want);
        let mut at = offset;
        // Focuses from `first` on: iterating with `skip(first)` would walk every block before
        // it, O(stream) for a reader at the end of a long stream.
        let (mut starts, mut blocks) = (self.block_starts.focus(), self.blocks.focus());
        for index in first..self.blocks.len() {
            let (Some(&start), Some(block)) = (starts.get(index), blocks.get(index)) else {
                break;
            };
            let skip = (at - start) as usize;
            let take = (block.len() - skip).min(want - out.len());
            if take == want {
                return block.slice(skip..skip + take);
            }
            out.extend_from_slice(&block[skip..skip + take]);
            at += take as u64;
            if out.len() == want {
                return Bytes::from(out);
            }
        }
        // The rest is in the tail, from its start.
        assert_eq!(at, self.tail_start, "the blocks end where the tail starts");
        let take = want - out.len();
        out.extend_from_slice(&self.tail[..take]);
        Bytes::from(out)
    }
}

/// An ended stream remembered: how it ended, and where (its end record, the last of its
/// records).
#[derive(Clone, Copy, Debug)]
struct EndedStream {
    end: StreamEnd,
    end_record_id: u64,
    /// Its context: whose tenant may still read how it ended (decision 0032 §2).
    context_id: ContextId,
}

/// Every open stream and the ended ones kept.
#[derive(Clone, Debug, Default)]
pub(crate) struct Streams {
    open: imbl::OrdMap<StreamId, OpenStream>,
    ended: imbl::OrdMap<StreamId, EndedStream>,
}

impl Streams {
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// How an ended stream ended; `None` for one not kept (too old, or never known) and for
    /// one whose records a log compaction dropped — every record of a stream ended at or
    /// below `compacted_through` (the log base's `through`, 0 without one) is gone from the
    /// log, so a restart would not know the stream either: it is unknown now, as it will be
    /// then (docs/storage.md#stream-records).
    pub fn ended(&self, stream_id: StreamId, compacted_through: u64) -> Option<StreamEnd> {
        self.ended
            .get(&stream_id)
            .filter(|ended| ended.end_record_id > compacted_through)
            .map(|ended| ended.end)
    }

    pub fn open_stream(&self, stream_id: StreamId) -> Option<&OpenStream> {
        self.open.get(&stream_id)
    }

    /// The context of a stream open or ended and kept; `None` for one not known.
    pub fn context_of(&self, stream_id: StreamId) -> Option<ContextId> {
        self.open
            .get(&stream_id)
            .map(|open| open.context_id)
            .or_else(|| self.ended.get(&stream_id).map(|ended| ended.context_id))
    }

    /// The open streams of a context (or of every context), by StreamID, from `after`.
    pub fn list(
        &self,
        context_id: Option<ContextId>,
        after: StreamId,
    ) -> impl Iterator<Item = (StreamId, &OpenStream)> {
        self.open
            .range(after.saturating_add(1)..)
            .filter(move |(_, open)| context_id.is_none_or(|id| open.context_id == id))
            .map(|(id, open)| (*id, open))
    }

    /// Open streams `owner` holds.
    pub fn owned_by(&self, owner: u64) -> usize {
        self.open
            .values()
            .filter(|open| open.owner == owner)
            .count()
    }

    /// Sets the owner of an open stream (the live path's, never a record).
    pub fn set_owner(&mut self, stream_id: StreamId, owner: u64) {
        if let Some(open) = self.open.get_mut(&stream_id) {
            open.owner = owner;
        }
    }

    /// Every stream `owner` holds becomes unowned (its connection closed).
    pub fn release(&mut self, owner: u64) -> usize {
        let owned: Vec<StreamId> = self
            .open
            .iter()
            .filter(|(_, open)| open.owner == owner)
            .map(|(id, _)| *id)
            .collect();
        for stream_id in &owned {
            self.set_owner(*stream_id, NO_OWNER);
        }
        owned.len()
    }

    /// The open streams whose last delta (or open) is older than `before_unix_ms`.
    pub fn idle(&self, before_unix_ms: u64) -> Vec<StreamId> {
        self.open
            .iter()
            .filter(|(_, open)| open.updated_at_unix_ms < before_unix_ms)
            .map(|(id, _)| *id)
            .collect()
    }

    /// A delta continues its open stream, of its context, exactly at the stream's length.
    fn apply_delta(
        &mut self,
        context_id: ContextId,
        stream_id: u64,
        offset: u64,
        bytes: &[u8],
        at_unix_ms: u64,
    ) -> Result<(), String> {
        let stream = self
            .open
            .get_mut(&stream_id)
            .ok_or_else(|| format!("delta to stream {stream_id}, which is not open"))?;
        if stream.context_id != context_id {
            return Err(format!(
                "delta to stream {stream_id} names context {context_id}, not its {}",
                stream.context_id
            ));
        }
        if offset != stream.length_bytes {
            return Err(format!(
                "delta to stream {stream_id} at offset {offset}, not at its length {}",
                stream.length_bytes
            ));
        }
        stream.bytes.push(bytes);
        stream.length_bytes += bytes.len() as u64;
        stream.updated_at_unix_ms = at_unix_ms;
        Ok(())
    }

    /// Applies a durable (or about to be written) stream record. The rules every record
    /// obeys, on the live path (which checked them first, with typed errors) and in replay
    /// (where a break is damage): an open names a new StreamID; a delta continues an open
    /// stream exactly at its length; an end ends an open stream.
    pub fn apply(
        &mut self,
        record_id: u64,
        context_id: ContextId,
        meta: &StreamMeta,
        at_unix_ms: u64,
    ) -> Result<(), String> {
        match meta {
            StreamMeta::Open(open) => {
                if self.open.contains_key(&record_id) || self.ended.contains_key(&record_id) {
                    return Err(format!("stream {record_id} is opened twice"));
                }
                self.open.insert(
                    record_id,
                    OpenStream {
                        context_id,
                        open: Arc::new(open.clone()),
                        bytes: StreamBytes::default(),
                        length_bytes: 0,
                        opened_at_unix_ms: at_unix_ms,
                        updated_at_unix_ms: at_unix_ms,
                        owner: NO_OWNER,
                    },
                );
            }
            StreamMeta::Delta {
                stream_id,
                offset,
                bytes,
                key_version: None,
            } => self.apply_delta(context_id, *stream_id, *offset, bytes, at_unix_ms)?,
            StreamMeta::Delta {
                stream_id,
                key_version: Some(_),
                ..
            } => {
                // The caller opens a sealed delta first: the state holds plain bytes only.
                return Err(format!(
                    "a delta of stream {stream_id} reached the state sealed"
                ));
            }
            StreamMeta::End { stream_id, end } => {
                let stream = self
                    .open
                    .remove(stream_id)
                    .ok_or_else(|| format!("end of stream {stream_id}, which is not open"))?;
                if stream.context_id != context_id {
                    return Err(format!(
                        "end of stream {stream_id} names context {context_id}, not its {}",
                        stream.context_id
                    ));
                }
                // Pair of `ended`'s rule: the end is the stream's last record.
                assert!(
                    record_id > *stream_id,
                    "a stream ends after its open record"
                );
                self.ended.insert(
                    *stream_id,
                    EndedStream {
                        end: *end,
                        end_record_id: record_id,
                        context_id,
                    },
                );
                while self.ended.len() > ENDED_STREAMS_KEPT_MAX {
                    let oldest = self.ended.get_min().map(|(id, _)| *id);
                    if let Some(oldest) = oldest {
                        self.ended.remove(&oldest);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Wake-up slots of `StreamsView`: a reader waits on its stream's slot (`stream_id` modulo
/// this), so a publish wakes the readers of the streams its batch changed (and the few that
/// share their slots), not every reader of every stream. One event each (a pointer until a
/// reader listens): 8 KiB. Slots ≥ the usual open streams keep shared slots rare: with 500
/// streams and 20 changed per batch, a batch wakes ~20 readers where one event woke 500.
pub const STREAM_WAKE_SLOTS: usize = 1024;

/// The streams as of the last durable batch, for readers; `changed[slot]` wakes those
/// waiting for more bytes or an end of a stream in that slot.
#[derive(Debug)]
pub(crate) struct StreamsView {
    snapshot: arc_swap::ArcSwap<Streams>,
    changed: Box<[event_listener::Event]>,
}

impl Default for StreamsView {
    fn default() -> Self {
        StreamsView::new(Streams::default())
    }
}

impl StreamsView {
    pub fn new(streams: Streams) -> Self {
        StreamsView {
            snapshot: arc_swap::ArcSwap::from_pointee(streams),
            changed: (0..STREAM_WAKE_SLOTS)
                .map(|_| event_listener::Event::new())
                .collect(),
        }
    }

    pub fn load(&self) -> Arc<Streams> {
        self.snapshot.load_full()
    }

    fn slot(stream_id: StreamId) -> usize {
        (stream_id % STREAM_WAKE_SLOTS as u64) as usize
    }

    /// A listener for `stream_id`'s changes, registered *before* the caller looks at the
    /// snapshot again: a publish in between that changes the stream wakes it, so no change
    /// is missed.
    pub fn listen(&self, stream_id: StreamId) -> event_listener::EventListener {
        self.changed[Self::slot(stream_id)].listen()
    }

    /// Sequencer only, after the batch that made `streams` is durable: swaps the snapshot in,
    /// then wakes the readers of `changed` (the streams the batch wrote a record of; in any
    /// order, repeats allowed).
    pub fn publish(&self, streams: Streams, changed: &[StreamId]) {
        self.snapshot.store(Arc::new(streams));
        let mut slots: Vec<usize> = changed.iter().map(|&id| Self::slot(id)).collect();
        slots.sort_unstable();
        slots.dedup();
        for slot in slots {
            self.changed[slot].notify(usize::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::stream_meta::StreamOpen;
    use crate::ids::TurnId;

    fn open() -> StreamMeta {
        StreamMeta::Open(StreamOpen {
            type_tag: 1,
            ..StreamOpen::default()
        })
    }

    fn delta(stream_id: u64, offset: u64, bytes: &[u8]) -> StreamMeta {
        StreamMeta::Delta {
            stream_id,
            offset,
            bytes: bytes.to_vec(),
            key_version: None,
        }
    }

    #[test]
    fn a_publish_wakes_the_readers_of_the_streams_it_changed_only() {
        use std::future::Future;
        use std::task::{Context, Poll, Waker};
        let view = StreamsView::new(Streams::default());
        let mut context = Context::from_waker(Waker::noop());
        let mut woken = |listener: &mut event_listener::EventListener| {
            std::pin::Pin::new(listener).poll(&mut context) == Poll::Ready(())
        };
        let mut five = view.listen(5);
        let mut six = view.listen(6);
        // Another stream of five's slot: woken with it (it looks, finds nothing, waits again).
        let mut five_slot = view.listen(5 + STREAM_WAKE_SLOTS as u64);
        assert!(!woken(&mut five) && !woken(&mut six) && !woken(&mut five_slot));
        view.publish(Streams::default(), &[5, 5, 9]);
        assert!(woken(&mut five));
        assert!(woken(&mut five_slot));
        assert!(
            !woken(&mut six),
            "a batch without stream 6 leaves its reader asleep"
        );
        view.publish(Streams::default(), &[6]);
        assert!(woken(&mut six));
    }

    #[test]
    fn reads_from_every_offset_and_the_rules_hold() {
        let context = ContextId(1);
        let mut streams = Streams::default();
        streams.apply(5, context, &open(), 10).unwrap();
        let text = b"the quick brown fox jumps";
        let mut at = 0;
        for piece in [&text[..3], &text[3..4], &text[4..15], &text[15..]] {
            streams.apply(6, context, &delta(5, at, piece), 11).unwrap();
            at += piece.len() as u64;
        }
        let Some(stream) = streams.open_stream(5).cloned() else {
            panic!("stream 5 is open");
        };
        assert_eq!(stream.read(0, usize::MAX).as_ref(), text);
        for offset in 0..=text.len() {
            for bytes_max in [1, 2, 7, 100] {
                let end = (offset + bytes_max).min(text.len());
                assert_eq!(
                    stream.read(offset as u64, bytes_max).as_ref(),
                    &text[offset..end]
                );
            }
        }
        assert!(stream.read(99, 10).is_empty());
        // A gap, another context, an unknown stream, a second open: refused.
        assert!(streams.apply(9, context, &delta(5, 99, b"x"), 12).is_err());
        assert!(
            streams
                .apply(9, ContextId(2), &delta(5, at, b"x"), 12)
                .is_err()
        );
        assert!(streams.apply(9, context, &delta(7, 0, b"x"), 12).is_err());
        assert!(streams.apply(5, context, &open(), 12).is_err());
        let end = StreamMeta::End {
            stream_id: 5,
            end: StreamEnd::Sealed(TurnId(20)),
        };
        streams.apply(21, context, &end, 13).unwrap();
        assert_eq!(streams.ended(5, 0), Some(StreamEnd::Sealed(TurnId(20))));
        assert!(streams.open_stream(5).is_none());
        // A compaction through its end record dropped its records: unknown from then on.
        assert_eq!(streams.ended(5, 20), Some(StreamEnd::Sealed(TurnId(20))));
        assert_eq!(streams.ended(5, 21), None);
        assert!(streams.apply(22, context, &end, 13).is_err());
        assert!(streams.apply(23, context, &delta(5, at, b"x"), 14).is_err());
        assert_eq!(streams.open_count(), 0);
    }

    /// Deltas of 1 byte to 3 KiB (past the tail's size), blocks and tail: every read, from
    /// every offset and of every size around the pieces' edges, is the stream's bytes; a
    /// snapshot taken midway still reads its own length.
    #[test]
    fn blocks_and_tail_read_as_one_stream() {
        let context = ContextId(1);
        let mut streams = Streams::default();
        streams.apply(5, context, &open(), 10).unwrap();
        let mut model = Vec::new();
        let mut midway = None;
        for index in 0..120u64 {
            let len = match index % 11 {
                0 => 3 * 1024,
                1 => TAIL_BYTES_MAX,
                n => (n * 7 + index) as usize % 90 + 1,
            };
            let piece: Vec<u8> = (0..len).map(|at| (index * 31 + at as u64) as u8).collect();
            let meta = delta(5, model.len() as u64, &piece);
            streams.apply(6 + index, context, &meta, 11).unwrap();
            model.extend_from_slice(&piece);
            if index == 60 {
                midway = streams
                    .open_stream(5)
                    .cloned()
                    .map(|stream| (stream, model.len()));
            }
        }
        let Some(stream) = streams.open_stream(5).cloned() else {
            panic!("stream 5 is open");
        };
        assert_eq!(stream.bytes.len(), model.len() as u64);
        assert!(!stream.bytes.blocks.is_empty(), "the deltas made blocks");
        for offset in (0..model.len())
            .step_by(37)
            .chain(model.len() - 5..model.len())
        {
            for bytes_max in [1, 40, 1023, 1024, 1025, 5000, usize::MAX] {
                let end = offset.saturating_add(bytes_max).min(model.len());
                assert_eq!(
                    stream.read(offset as u64, bytes_max).as_ref(),
                    &model[offset..end],
                    "{bytes_max} bytes at {offset}"
                );
            }
        }
        let Some((midway, length)) = midway else {
            panic!("a snapshot midway");
        };
        assert_eq!(midway.read(0, usize::MAX).as_ref(), &model[..length]);
        assert!(midway.read(length as u64, 10).is_empty());
    }
}
