//! The sequencer's rules for streams (issue 32, decision 0027): open, deltas, the seal, the
//! abort. Every change is a record of `turns.log` (`format::stream_meta`), so deltas ride the
//! same group commit as turns and are acknowledged after the same fdatasync. The seal appends
//! an ordinary turn (`SequencerActor::append`: the head's rules, CONFLICT on a stale expected
//! head) and writes the stream's end record right after it, in the same batch.

use bytes::Bytes;

use super::SequencerActor;
use crate::error::EngineError;
use crate::format::stream_meta::{OpenParent, StreamOpen};
use crate::format::stream_meta::{
    STREAM_DELTA_BYTES_MAX, STREAM_DELTA_SEALED_BYTES_MAX, StreamEnd, StreamMeta,
};
use crate::format::turn_log::MetaRecord;
use crate::ids::{ContextId, TurnId};
use crate::model::{AppendRequest, Parent, TurnOptions};
use crate::pipeline::{StreamAnswer, StreamChange, TurnBlob};
use crate::quota::Quota;
use crate::seal::{self, DeltaPlace};
use crate::sequencer::streams::{NO_OWNER, OpenStream, StreamId, StreamOwner};
use crate::sequencer::watch::{WatchEvent, WatchKind};
use crate::store_dir::now_unix_ms;

/// The key a sealed stream's turn carries when its open named none: a seal retried after a
/// crash that kept its turn but not its end record finds that turn instead of appending a
/// second one.
pub(crate) fn seal_key(stream_id: StreamId) -> Bytes {
    Bytes::from(format!("stream:{stream_id}"))
}

impl SequencerActor {
    pub(super) fn stream(&mut self, change: StreamChange) -> Result<StreamAnswer, EngineError> {
        self.check_takes_ids(false)?;
        match change {
            StreamChange::Open {
                context_id,
                open,
                owner,
            } => self.open_new_stream(context_id, open, owner),
            StreamChange::Delta {
                stream_id,
                offset,
                bytes,
                owner,
            } => self.append_delta(stream_id, offset, &bytes, owner),
            StreamChange::Seal {
                stream_id,
                length_bytes,
                blob,
                owner,
            } => {
                self.owned_stream(stream_id, owner)?;
                self.seal(stream_id, length_bytes, blob)
            }
            StreamChange::Release { owner } => {
                Ok(StreamAnswer::Released(self.streams.release(owner)))
            }
            StreamChange::Abort { stream_id, owner } => {
                let context_id = self.owned_stream(stream_id, owner)?.context_id;
                let end = StreamMeta::End {
                    stream_id,
                    end: StreamEnd::Aborted,
                };
                self.push_stream(context_id, end);
                Ok(StreamAnswer::Aborted)
            }
        }
    }

    /// Opens a stream on a live context, within the store's and the connection's limits.
    fn open_new_stream(
        &mut self,
        context_id: ContextId,
        open: StreamOpen,
        owner: StreamOwner,
    ) -> Result<StreamAnswer, EngineError> {
        if self.heads.get(context_id).is_none() {
            return Err(EngineError::ContextNotFound(context_id));
        }
        let tenant_id = self.contexts.get(context_id).map(|info| info.tenant_id);
        assert!(tenant_id.is_some(), "a context with a head has metadata");
        if let Some(tenant_id) = tenant_id {
            self.check_quota(Quota::Streams, tenant_id)?;
        }
        let limit = self.limits.streams_open_max as usize;
        if self.streams.open_count() >= limit {
            return Err(EngineError::Limit {
                what: "open streams in the store (streams_open_max); seal or abort one",
                limit,
            });
        }
        if owner.owner != NO_OWNER
            && self.streams.owned_by(owner.owner) >= owner.streams_max as usize
        {
            return Err(EngineError::Limit {
                what: "open streams of one connection (--streams-per-connection-max); \
                       seal or abort one",
                limit: owner.streams_max as usize,
            });
        }
        let stream_id = self.next_record_id;
        self.push_stream(context_id, StreamMeta::Open(open));
        self.streams.set_owner(stream_id, owner.owner);
        let info = self
            .streams
            .open_stream(stream_id)
            .map(|open| open.info(stream_id));
        assert!(info.is_some(), "an applied open record is an open stream");
        info.map(StreamAnswer::Opened)
            .ok_or(EngineError::StreamNotFound(stream_id))
    }

    /// Bytes at the owned stream's end (with `offset`, only there: a retry of a delta already
    /// written answers as the first time did), in records of at most `STREAM_DELTA_BYTES_MAX`.
    fn append_delta(
        &mut self,
        stream_id: StreamId,
        offset: Option<u64>,
        bytes: &Bytes,
        owner: u64,
    ) -> Result<StreamAnswer, EngineError> {
        let stream = self.owned_stream(stream_id, owner)?;
        if self.heads.get(stream.context_id).is_none() {
            // Deleted since the open: only an abort ends the stream now.
            return Err(EngineError::ContextNotFound(stream.context_id));
        }
        let length = stream.length_bytes;
        if let Some(offset) = offset
            && offset != length
        {
            // A retry of a delta already written answers as the first time did.
            let end = offset.saturating_add(bytes.len() as u64);
            if !bytes.is_empty() && end <= length && stream.read(offset, bytes.len()) == bytes {
                return Ok(StreamAnswer::Length(end));
            }
            return Err(EngineError::StreamOffset {
                stream_id,
                offset,
                length,
            });
        }
        if bytes.is_empty() {
            return Err(EngineError::InvalidArgument(format!(
                "empty delta to stream {stream_id}; send at least one byte"
            )));
        }
        let max = u64::from(self.limits.blob_bytes_max);
        let new_length = length + bytes.len() as u64;
        if new_length > max {
            return Err(EngineError::TooLarge {
                len: new_length,
                max,
            });
        }
        let context_id = stream.context_id;
        let pieces = self.delta_records(context_id, stream_id, length, bytes)?;
        for (plain, stored) in pieces {
            self.push_stream_stored(context_id, plain, stored);
        }
        Ok(StreamAnswer::Length(new_length))
    }

    /// The records of a delta of `bytes` at `length`, cut to size: each piece's plain record
    /// (for the streams' state) and, when the store seals, its sealed one (for the log). Every
    /// piece is sealed before any is written, so a seal that fails writes nothing.
    fn delta_records(
        &self,
        context_id: ContextId,
        stream_id: StreamId,
        length: u64,
        bytes: &Bytes,
    ) -> Result<Vec<(StreamMeta, Option<StreamMeta>)>, EngineError> {
        let tenant_id = self.contexts.get(context_id).map(|info| info.tenant_id);
        let key = match tenant_id {
            Some(tenant_id) => self
                .published
                .keys
                .sealing_key(tenant_id)?
                .zip(tenant_id.into()),
            None => None,
        };
        let piece_max = match key {
            Some(_) => STREAM_DELTA_SEALED_BYTES_MAX,
            None => STREAM_DELTA_BYTES_MAX,
        };
        let mut pieces = Vec::with_capacity(bytes.len().div_ceil(piece_max));
        let mut at = length;
        for piece in bytes.chunks(piece_max) {
            let plain = StreamMeta::Delta {
                stream_id,
                offset: at,
                bytes: piece.to_vec(),
                key_version: None,
            };
            let stored = match &key {
                Some((key, tenant_id)) => {
                    let place = DeltaPlace {
                        tenant_id: *tenant_id,
                        stream_id,
                        offset: at,
                    };
                    let sealed = seal::seal_delta(key, place, piece).map_err(|error| {
                        EngineError::Keys(format!("sealing a delta of stream {stream_id}: {error}"))
                    })?;
                    Some(StreamMeta::Delta {
                        stream_id,
                        offset: at,
                        bytes: sealed,
                        key_version: Some(key.version),
                    })
                }
                None => None,
            };
            at += piece.len() as u64;
            pieces.push((plain, stored));
        }
        Ok(pieces)
    }

    fn seal(
        &mut self,
        stream_id: StreamId,
        length_bytes: u64,
        blob: TurnBlob,
    ) -> Result<StreamAnswer, EngineError> {
        let stream = self.open_stream(stream_id)?.clone();
        if stream.length_bytes != length_bytes {
            return Ok(StreamAnswer::Moved);
        }
        assert_eq!(
            u64::from(blob.raw_len),
            length_bytes,
            "the caller stored the stream's bytes"
        );
        let open = &stream.open;
        let extras = &open.extras;
        let options = TurnOptions {
            parent: match open.parent {
                OpenParent::Head => Parent::Head,
                OpenParent::Root => Parent::Root,
                OpenParent::Turn(turn_id) => Parent::Turn(turn_id),
            },
            key: Some(if extras.key.is_empty() {
                seal_key(stream_id)
            } else {
                Bytes::copy_from_slice(&extras.key)
            }),
            labels: extras.labels.clone(),
            links: extras.links.clone(),
            summary: open.summary,
            vectors: None,
        };
        let append = AppendRequest {
            context_id: stream.context_id,
            expected_head: stream.open.expected_head,
            type_tag: stream.open.type_tag,
            codec: stream.open.codec,
            payload: blob,
            options,
        };
        // A refused append (CONFLICT, a parent gone) changed nothing: the stream stays open.
        let appended = self.append(append)?;
        if appended.existing && appended.turn.payload_hash != blob.hash {
            return Err(EngineError::InvalidArgument(format!(
                "the key of stream {stream_id} already names turn {} of context {} with other \
                 bytes; abort the stream, or open one with another key",
                appended.turn.turn_id, stream.context_id
            )));
        }
        let end = StreamMeta::End {
            stream_id,
            end: StreamEnd::Sealed(appended.turn.turn_id),
        };
        self.push_stream(stream.context_id, end);
        Ok(StreamAnswer::Sealed(appended))
    }

    /// The open stream, or the typed error of a stream that is not (unknown — never known,
    /// forgotten, or compacted away —, sealed, aborted).
    fn open_stream(&self, stream_id: StreamId) -> Result<&OpenStream, EngineError> {
        if let Some(open) = self.streams.open_stream(stream_id) {
            return Ok(open);
        }
        let compacted_through = self.published.turns.base().map_or(0, |base| base.through());
        match self.streams.ended(stream_id, compacted_through) {
            Some(end) => Err(EngineError::StreamEnded { stream_id, end }),
            None => Err(EngineError::StreamNotFound(stream_id)),
        }
    }

    /// The open stream if `owner` may write it: its owner, or any caller while it has none
    /// (then `owner` takes it: a writer reconnected, or the server restarted).
    fn owned_stream(&mut self, stream_id: StreamId, owner: u64) -> Result<OpenStream, EngineError> {
        let holder = self.open_stream(stream_id)?.owner;
        if holder != NO_OWNER && owner != NO_OWNER && holder != owner {
            return Err(EngineError::StreamNotOwned(stream_id));
        }
        if holder == NO_OWNER && owner != NO_OWNER {
            self.streams.set_owner(stream_id, owner);
        }
        // A copy (its bytes are shared, `imbl`): the caller goes on to change the batch.
        self.open_stream(stream_id).cloned()
    }

    /// An end record of a stream whose end the caller decided (a tenant's deletion aborts
    /// its streams).
    pub(super) fn push_stream_end(&mut self, context_id: ContextId, end: StreamMeta) {
        assert!(matches!(end, StreamMeta::End { .. }), "an end record");
        self.push_stream(context_id, end);
    }

    /// Writes a stream record into the batch and applies it (the rules were checked).
    fn push_stream(&mut self, context_id: ContextId, meta: StreamMeta) {
        self.push_stream_stored(context_id, meta, None);
    }

    /// `push_stream` of `meta` whose record holds `stored` instead when given (a sealed delta:
    /// the log holds its sealed bytes, the streams' state its plain ones).
    fn push_stream_stored(
        &mut self,
        context_id: ContextId,
        meta: StreamMeta,
        stored: Option<StreamMeta>,
    ) {
        let at_unix_ms = now_unix_ms();
        let written = stored.as_ref().unwrap_or(&meta);
        let record = MetaRecord {
            record_id: self.next_record_id,
            op: written.op(),
            context_id,
            created_at_unix_ms: at_unix_ms,
            body: written.encode(),
        };
        let (kind, stream_id, turn_id) = match &meta {
            StreamMeta::Open(_) => (
                Some(WatchKind::StreamOpened),
                record.record_id,
                TurnId::NONE,
            ),
            StreamMeta::Delta { .. } => (None, 0, TurnId::NONE),
            StreamMeta::End {
                stream_id,
                end: StreamEnd::Sealed(turn_id),
            } => (Some(WatchKind::StreamSealed), *stream_id, *turn_id),
            StreamMeta::End {
                stream_id,
                end: StreamEnd::Aborted,
            } => (Some(WatchKind::StreamAborted), *stream_id, TurnId::NONE),
        };
        if let Some(kind) = kind {
            self.batch.events.push(WatchEvent {
                seq: record.record_id,
                kind,
                context_id,
                turn_id,
                stream_id,
            });
        }
        // Pair of replay: the record obeys the rules replay checks.
        let applied = self
            .streams
            .apply(record.record_id, context_id, &meta, at_unix_ms);
        assert!(applied.is_ok(), "stream record refused: {applied:?}");
        for slot in record.slots() {
            self.push_record(&slot);
        }
        self.batch.streams_changed.push(match &meta {
            StreamMeta::Open(_) => record.record_id,
            StreamMeta::Delta { stream_id, .. } | StreamMeta::End { stream_id, .. } => *stream_id,
        });
    }
}
