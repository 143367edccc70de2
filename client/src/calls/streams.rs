//! The streams family's calls (protocol version 3, issue 32, decision 0027): a turn in the
//! making. `open_stream` → a StreamID; `append_delta` (each answered once durable, with the
//! stream's new length); `seal_stream` (one ordinary turn; CONFLICT on a stale expected head
//! keeps the stream open) or `abort_stream`; `open_streams` lists a context's open streams;
//! `read_stream` reads from an offset, with a wait a long poll: a reader that resumes with
//! its last offset gets every byte exactly once, in order.

use std::time::Duration;

use bytes::Bytes;
use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::{
    ContextRef, ExtrasWire, ParentWire, StreamInfoWire, StreamStateWire, StreamsRequest,
    StreamsResponse, WatchEventWire, WatchTargetWire,
};

use crate::client::{Client, unexpected};
use crate::error::ClientError;
use crate::types::{Appended, Parent, Turn};

/// What a stream's seal will append (everything an append takes but its payload).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewStream {
    pub type_tag: u64,
    pub codec: u32,
    /// The seal is a compare-and-set: the head must still be this turn (0: empty).
    pub expected_head: Option<u64>,
    pub parent: Parent,
    /// Without a key the sealed turn gets `stream:<StreamID>`.
    pub key: Option<Bytes>,
    pub labels: Vec<(String, String)>,
    pub links: Vec<u64>,
    pub summary: bool,
}

impl NewStream {
    pub fn new(type_tag: u64, codec: u32) -> NewStream {
        NewStream {
            type_tag,
            codec,
            ..NewStream::default()
        }
    }

    pub fn expect_head(mut self, turn: u64) -> NewStream {
        self.expected_head = Some(turn);
        self
    }

    pub fn parent(mut self, parent: Parent) -> NewStream {
        self.parent = parent;
        self
    }

    pub fn key(mut self, key: impl Into<Bytes>) -> NewStream {
        self.key = Some(key.into());
        self
    }

    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> NewStream {
        self.labels.push((key.into(), value.into()));
        self
    }
}

/// An open stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    pub stream_id: u64,
    pub context_id: u64,
    /// Bytes acknowledged so far.
    pub length: u64,
    pub type_tag: u64,
    pub codec: u32,
    pub opened_at_unix_ms: u64,
    pub updated_at_unix_ms: u64,
}

impl StreamInfo {
    fn from_wire(info: StreamInfoWire) -> StreamInfo {
        StreamInfo {
            stream_id: info.stream_id,
            context_id: info.context_id,
            length: info.length,
            type_tag: info.type_tag,
            codec: info.codec,
            opened_at_unix_ms: info.opened_at_unix_ms,
            updated_at_unix_ms: info.updated_at_unix_ms,
        }
    }
}

/// How a stream stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamState {
    Open,
    /// Sealed into this turn (read it with `turn`).
    Sealed(u64),
    Aborted,
}

/// What `read_stream` answers: `bytes` from `offset` (empty at the wait's deadline, or when
/// the stream ended).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamChunk {
    pub state: StreamState,
    pub offset: u64,
    /// The stream's length when open (0 once ended).
    pub length: u64,
    pub bytes: Bytes,
}

/// What a `watch` answered: the events (oldest first) and the sequence number to pass next
/// time; `lagged`: events after the one asked for are gone (re-read the state first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watched {
    pub lagged: bool,
    pub resume_after: u64,
    pub events: Vec<WatchEventWire>,
}

#[blocking_twin(crate::blocking::Client)]
impl Client {
    /// The events of a context, of the contexts whose name starts with a prefix, or of those
    /// with a tag (WATCH): those after `after_seq` (`WATCH_FROM_NOW`: none, only the current
    /// position), at most `max_events` (1..=1,024); with `wait` a long poll until one comes.
    /// Pass `resume_after` back to miss nothing: a reconnecting watcher resumes from it, or
    /// is told it lagged.
    pub async fn watch(
        &self,
        target: WatchTargetWire,
        after_seq: u64,
        max_events: u32,
        wait: Option<Duration>,
    ) -> Result<Watched, ClientError> {
        let wait_ms = wait.map_or(0, |wait| wait.as_millis().min(60_000) as u32);
        let request = StreamsRequest::Watch {
            target,
            after_seq,
            max_events,
            wait_ms,
        };
        match self.call_waiting(request, wait_ms).await? {
            StreamsResponse::Watched {
                lagged,
                resume_after,
                events,
            } => Ok(Watched {
                lagged,
                resume_after,
                events,
            }),
            other => Err(unexpected(other.message_type(), other)),
        }
    }

    /// Opens a stream on a context (STREAM_OPEN): answered once its record is durable.
    pub async fn open_stream(
        &self,
        context: impl Into<ContextRef>,
        stream: NewStream,
    ) -> Result<StreamInfo, ClientError> {
        let mut labels = stream.labels;
        labels.sort();
        let request = StreamsRequest::StreamOpen {
            context: context.into(),
            expected_head: stream.expected_head,
            parent: match stream.parent {
                Parent::Head => ParentWire::Head,
                Parent::Root => ParentWire::Root,
                Parent::Turn(turn) => ParentWire::Turn(turn),
            },
            type_tag: stream.type_tag,
            codec: stream.codec,
            summary: stream.summary,
            extras: ExtrasWire {
                key: stream.key.unwrap_or_default(),
                labels,
                links: stream.links,
            },
        };
        match self.call(request).await? {
            StreamsResponse::Opened { info } => Ok(StreamInfo::from_wire(info)),
            other => Err(unexpected(other.message_type(), other)),
        }
    }

    /// Appends a delta (STREAM_APPEND; 1 byte to 1 MiB): the stream's length once it is
    /// durable. With `offset`, only there: a retry of a delta already written answers its
    /// length again, any other offset is `ErrorCode::Conflict` (the stream's length in the
    /// error's detail).
    pub async fn append_delta(
        &self,
        stream_id: u64,
        offset: Option<u64>,
        bytes: Bytes,
    ) -> Result<u64, ClientError> {
        let request = StreamsRequest::StreamAppend {
            stream_id,
            offset,
            bytes,
        };
        match self.call(request).await? {
            StreamsResponse::Appended { length, .. } => Ok(length),
            other => Err(unexpected(other.message_type(), other)),
        }
    }

    /// Seals the stream into one turn (STREAM_SEAL); `ErrorCode::Conflict` on a stale expected
    /// head (the stream stays open), `ErrorCode::StreamEnded` once sealed or aborted.
    pub async fn seal_stream(&self, stream_id: u64) -> Result<Appended, ClientError> {
        match self.call(StreamsRequest::StreamSeal { stream_id }).await? {
            StreamsResponse::Sealed { turn, deduped } => Ok(Appended {
                turn: Turn::from_wire(&turn, None),
                deduped,
            }),
            other => Err(unexpected(other.message_type(), other)),
        }
    }

    /// Aborts the stream (STREAM_ABORT): it never becomes a turn.
    pub async fn abort_stream(&self, stream_id: u64) -> Result<(), ClientError> {
        match self.call(StreamsRequest::StreamAbort { stream_id }).await? {
            StreamsResponse::Aborted { .. } => Ok(()),
            other => Err(unexpected(other.message_type(), other)),
        }
    }

    /// The context's open streams by StreamID after `after` (0: from the first), at most
    /// `limit` (1..=1,024).
    pub async fn open_streams(
        &self,
        context: impl Into<ContextRef>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StreamInfo>, ClientError> {
        let request = StreamsRequest::StreamList {
            context: context.into(),
            after_stream_id: after,
            limit,
        };
        match self.call(request).await? {
            StreamsResponse::Listed { streams } => {
                Ok(streams.into_iter().map(StreamInfo::from_wire).collect())
            }
            other => Err(unexpected(other.message_type(), other)),
        }
    }

    /// Up to `bytes_max` bytes of the stream from `offset` (STREAM_READ). With `wait`, a long
    /// poll: an open stream with nothing past `offset` is answered when a delta past it is
    /// durable, when it ends, or after `wait` (at most 60 s; the server may cut it shorter)
    /// with no bytes. Resuming at `offset + bytes.len()` reads every byte exactly once.
    pub async fn read_stream(
        &self,
        stream_id: u64,
        offset: u64,
        bytes_max: u32,
        wait: Option<Duration>,
    ) -> Result<StreamChunk, ClientError> {
        let wait_ms = wait.map_or(0, |wait| wait.as_millis().min(60_000) as u32);
        let request = StreamsRequest::StreamRead {
            stream_id,
            offset,
            bytes_max,
            wait_ms,
        };
        match self.call_waiting(request, wait_ms).await? {
            StreamsResponse::Read {
                state,
                offset,
                length,
                bytes,
                ..
            } => Ok(StreamChunk {
                state: match state {
                    StreamStateWire::Open => StreamState::Open,
                    StreamStateWire::Sealed(turn) => StreamState::Sealed(turn),
                    StreamStateWire::Aborted => StreamState::Aborted,
                },
                offset,
                length,
                bytes,
            }),
            other => Err(unexpected(other.message_type(), other)),
        }
    }
}

impl Client {
    /// A long poll (STREAM_READ, WATCH): the answer may take the wait itself, so the request's
    /// timeout comes on top of it.
    async fn call_waiting(
        &self,
        request: StreamsRequest,
        wait_ms: u32,
    ) -> Result<StreamsResponse, ClientError> {
        let timeout = self
            .shared
            .config
            .request_timeout
            .map(|timeout| timeout + Duration::from_millis(u64::from(wait_ms)));
        self.call_within(request, timeout, "ClientConfig::request_timeout")
            .await
    }
}
