//! The streams family's calls (protocol version 3, issue 32, decision 0027): a turn in the
//! making. `open_stream` → a StreamID; `append_delta` (each answered once durable, with the
//! stream's new length); `seal_stream` (one ordinary turn; CONFLICT on a stale expected head
//! keeps the stream open) or `abort_stream`; `open_streams` lists a context's open streams;
//! `read_stream` reads from an offset, with a wait a long poll: a reader that resumes with
//! its last offset gets every byte exactly once, in order; `sealed_stream_rest` reads what a
//! stream sealed meanwhile holds past an offset (its turn's payload). `follow_stream`
//! (STREAM_FOLLOW) has the server push the bytes as they become durable, frame by frame
//! (`StreamFollow`); `stream_reader` reads to the end by follows, or by long polls from an
//! older server, and the rest of a sealed stream from its turn. `seal_stream` carries its
//! handle's durability (`Client::with_durability`, decision 0031); the deltas do not.

use std::time::Duration;

use bytes::Bytes;
use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::streams;
use ctxstore_protocol::{
    Ask, ContextRef, ErrorCode, ExtrasWire, MessageType, ParentWire, Response, StreamInfoWire,
    StreamStateWire, WatchEventWire, WatchTargetWire,
};

use crate::client::{Client, answer_of};
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
        let request = streams::Watch {
            target,
            after_seq,
            max_events,
            wait_ms,
        };
        let streams::Watched {
            lagged,
            resume_after,
            events,
        } = self.ask_waiting(request, wait_ms).await?;
        Ok(Watched {
            lagged,
            resume_after,
            events,
        })
    }

    /// Opens a stream on a context (STREAM_OPEN): answered once its record is durable. A
    /// handle with a durability (`with_durability`) on a connection below version 4 is
    /// refused here, before the stream exists, rather than at its seal.
    pub async fn open_stream(
        &self,
        context: impl Into<ContextRef>,
        stream: NewStream,
    ) -> Result<StreamInfo, ClientError> {
        let version = self.protocol_version();
        if self.durability.ack_after().is_some()
            && version < ctxstore_protocol::ACK_AFTER_SINCE_VERSION
        {
            return Err(ClientError::Unsupported {
                request: "STREAM_SEAL",
                needed: ctxstore_protocol::ACK_AFTER_SINCE_VERSION,
                version,
            });
        }
        let mut labels = stream.labels;
        labels.sort();
        let request = streams::StreamOpen {
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
        let streams::Opened { info } = self.ask(request).await?;
        Ok(StreamInfo::from_wire(info))
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
        let request = streams::StreamAppend {
            stream_id,
            offset,
            bytes,
        };
        let streams::Appended { length, .. } = self.ask(request).await?;
        Ok(length)
    }

    /// Seals the stream into one turn (STREAM_SEAL); `ErrorCode::Conflict` on a stale expected
    /// head (the stream stays open), `ErrorCode::StreamEnded` once sealed or aborted.
    pub async fn seal_stream(&self, stream_id: u64) -> Result<Appended, ClientError> {
        let streams::Sealed { turn, deduped } = self.ask(streams::StreamSeal { stream_id }).await?;
        Ok(Appended {
            turn: Turn::from_wire(&turn, None),
            deduped,
        })
    }

    /// Aborts the stream (STREAM_ABORT): it never becomes a turn.
    pub async fn abort_stream(&self, stream_id: u64) -> Result<(), ClientError> {
        let streams::Aborted { .. } = self.ask(streams::StreamAbort { stream_id }).await?;
        Ok(())
    }

    /// The context's open streams by StreamID after `after` (0: from the first), at most
    /// `limit` (1..=1,024).
    pub async fn open_streams(
        &self,
        context: impl Into<ContextRef>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StreamInfo>, ClientError> {
        let request = streams::StreamList {
            context: context.into(),
            after_stream_id: after,
            limit,
        };
        let streams::Listed { streams } = self.ask(request).await?;
        Ok(streams.into_iter().map(StreamInfo::from_wire).collect())
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
        let request = streams::StreamRead {
            stream_id,
            offset,
            bytes_max,
            wait_ms,
        };
        let streams::Read {
            state,
            offset,
            length,
            bytes,
            ..
        } = self.ask_waiting(request, wait_ms).await?;
        Ok(chunk(state, offset, length, bytes))
    }

    /// The bytes of a stream sealed into `turn_id`, from `offset` to its end: what STREAM_READ
    /// and STREAM_FOLLOW leave to a reader once the stream is sealed (they answer `sealed`
    /// with no bytes). They are the sealed turn's payload as appended, from `offset`: GET_TURN
    /// as of the turn itself (a view no patch of it precedes, so a later patch does not splice
    /// other bytes onto those read), then GET_BLOB when any are left. `StreamReader` does this
    /// at the seal. A turn redacted since has no bytes left, and an offset past the payload
    /// names none: `ClientError::InvalidArgument`, saying which.
    pub async fn sealed_stream_rest(
        &self,
        stream_id: u64,
        turn_id: u64,
        offset: u64,
    ) -> Result<Bytes, ClientError> {
        let turn = self.as_of(turn_id).turn(turn_id).await?;
        if turn.redacted {
            return Err(ClientError::InvalidArgument(format!(
                "stream {stream_id} was sealed into turn {turn_id}, whose payload was redacted \
                 since: its bytes from offset {offset} are gone"
            )));
        }
        // Overlay sequence numbers are record ids: every patch of a turn comes after it.
        if turn.overlay_seq != 0 {
            return Err(ClientError::Protocol(format!(
                "turn {turn_id} read as of {turn_id} shows overlay {}, which came after it",
                turn.overlay_seq
            )));
        }
        let payload_len = u64::from(turn.payload_len);
        if offset > payload_len {
            return Err(ClientError::InvalidArgument(format!(
                "stream {stream_id} was sealed into turn {turn_id} of {payload_len} bytes: \
                 offset {offset} is past its end"
            )));
        }
        if offset == payload_len {
            return Ok(Bytes::new());
        }
        let payload = self.blob(turn.payload_hash).await?;
        if payload.len() as u64 != payload_len {
            return Err(ClientError::Protocol(format!(
                "GET_BLOB of turn {turn_id}'s payload answered {} bytes, the turn says \
                 {payload_len}",
                payload.len()
            )));
        }
        // offset < payload_len ≤ u32::MAX: fits.
        Ok(payload.slice(offset as usize..))
    }
}

impl Client {
    /// A long poll (STREAM_READ, WATCH): the answer may take the wait itself, so the request's
    /// timeout comes on top of it.
    async fn ask_waiting<Q: Ask>(
        &self,
        request: Q,
        wait_ms: u32,
    ) -> Result<Q::Answer, ClientError> {
        let timeout = self
            .shared
            .config
            .request_timeout
            .map(|timeout| timeout + Duration::from_millis(u64::from(wait_ms)));
        self.ask_within(request, timeout, "ClientConfig::request_timeout")
            .await
    }
}

/// Bytes one frame of a `StreamReader`'s follow (or one of its long polls) asks for at most.
pub const STREAM_READER_BYTES_MAX: u32 = 1024 * 1024;

/// The chunk of a STREAM_READ answer or a STREAM_FOLLOW frame.
fn chunk(state: StreamStateWire, offset: u64, length: u64, bytes: Bytes) -> StreamChunk {
    StreamChunk {
        state: match state {
            StreamStateWire::Open => StreamState::Open,
            StreamStateWire::Sealed(turn) => StreamState::Sealed(turn),
            StreamStateWire::Aborted => StreamState::Aborted,
        },
        offset,
        length,
        bytes,
    }
}

/// One STREAM_FOLLOW (protocol version 3, docs/protocol.md#stream_follow-0x0038): its frames
/// as the server pushes them (`next`), each starting where the previous ended. The last one
/// is the stream's end (sealed, aborted), or an open chunk (nothing new for the wait, or the
/// server closed the connection): follow again from its end. `StreamReader` does that.
/// Dropping it forgets the follow here; the protocol has no cancel, so the server goes on
/// pushing (frames this client then drops) until the stream ends or `wait` passes without a
/// delta, or the connection closes.
#[derive(Debug)]
pub struct StreamFollow {
    client: Client,
    req_id: u64,
    frames: tokio::sync::mpsc::Receiver<Result<Response, ClientError>>,
    /// How long one frame may take: the wait, plus the request timeout.
    frame_timeout: Option<Duration>,
    /// Where the next frame starts.
    offset: u64,
    done: bool,
}

impl Drop for StreamFollow {
    fn drop(&mut self) {
        if !self.done {
            self.client.forget(self.req_id);
        }
    }
}

impl StreamFollow {
    /// The next frame, `Ok(None)` after the last one. An ERROR is the last frame too
    /// (`ClientError::Server`: NOT_FOUND for an unknown stream, UNKNOWN_MESSAGE from a server
    /// older than STREAM_FOLLOW).
    pub async fn next(&mut self) -> Result<Option<StreamChunk>, ClientError> {
        if self.done {
            return Ok(None);
        }
        let frame = match self.frame_timeout {
            None => self.frames.recv().await,
            Some(timeout) => match tokio::time::timeout(timeout, self.frames.recv()).await {
                Ok(frame) => frame,
                Err(_) => {
                    self.done = true;
                    self.client.forget(self.req_id);
                    return Err(ClientError::Timeout {
                        request: MessageType::StreamFollow.name(),
                        timeout,
                        setting: "ClientConfig::request_timeout",
                    });
                }
            },
        };
        let frame = frame.unwrap_or_else(|| Err(ClientError::Closed("connection lost".into())));
        // An ERROR frame ends the follow with the server's error; any frame but a PUSHED one
        // is a protocol error (`answer_of`).
        let pushed = frame.and_then(answer_of::<streams::StreamFollow>);
        let (more, chunk) = match pushed {
            Ok(streams::Pushed {
                more,
                state,
                offset,
                length,
                bytes,
                ..
            }) => (more, chunk(state, offset, length, bytes)),
            Err(error) => {
                self.done = true;
                return Err(error);
            }
        };
        if chunk.offset != self.offset {
            self.done = true;
            return Err(ClientError::Protocol(format!(
                "STREAM_FOLLOW frame at offset {} where {} was due",
                chunk.offset, self.offset
            )));
        }
        self.offset += chunk.bytes.len() as u64;
        self.done = !more;
        Ok(Some(chunk))
    }
}

impl Client {
    /// Follows a stream from `offset` (STREAM_FOLLOW, protocol version 3): the server pushes
    /// its bytes as they become durable, up to `bytes_max` a frame, until the stream ends or
    /// nothing new came for `wait` (at most 60 s; the server may cut it shorter). One request
    /// per stream where a long-polling reader (`read_stream`) sends one per delta.
    pub fn follow_stream(
        &self,
        stream_id: u64,
        offset: u64,
        bytes_max: u32,
        wait: Duration,
    ) -> Result<StreamFollow, ClientError> {
        let wait_ms = wait.as_millis().min(60_000) as u32;
        let request = streams::StreamFollow {
            stream_id,
            offset,
            bytes_max,
            wait_ms,
        };
        let (req_id, frames) = self.send_follow(request.into())?;
        Ok(StreamFollow {
            client: self.clone(),
            req_id,
            frames,
            frame_timeout: self
                .shared
                .config
                .request_timeout
                .map(|timeout| timeout + Duration::from_millis(u64::from(wait_ms))),
            offset,
            done: false,
        })
    }

    /// Reads a stream from `offset` to its end (`StreamReader`): pushed (STREAM_FOLLOW), or
    /// with long polls (STREAM_READ) from a server that does not know STREAM_FOLLOW.
    pub fn stream_reader(&self, stream_id: u64, offset: u64) -> StreamReader {
        StreamReader {
            client: self.clone(),
            stream_id,
            offset,
            wait: STREAM_READER_WAIT,
            push: true,
            follow: None,
            ended: false,
        }
    }
}

/// How long one follow (or long poll) of a `StreamReader` waits for a delta before asking
/// again.
pub const STREAM_READER_WAIT: Duration = Duration::from_secs(30);

/// A stream read from an offset until it ends: STREAM_FOLLOW followed again after each
/// frame that ends it open; a server that answers UNKNOWN_MESSAGE (older than STREAM_FOLLOW)
/// is long-polled with STREAM_READ instead; at the seal, the rest comes from the sealed turn's
/// payload. Every byte exactly once, in order: the offset moves only with a chunk.
#[derive(Debug)]
pub struct StreamReader {
    client: Client,
    stream_id: u64,
    offset: u64,
    wait: Duration,
    /// STREAM_FOLLOW until the server says it does not know it.
    push: bool,
    follow: Option<StreamFollow>,
    ended: bool,
}

impl StreamReader {
    /// Where the next bytes start.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Whether it reads by STREAM_FOLLOW (else by long polls: the server is older).
    pub fn pushed(&self) -> bool {
        self.push
    }

    /// The next chunk of a follow (opened from the offset reached when there is none); `None`
    /// when there is none to give yet: the follow ended open (follow again from here) or the
    /// server does not know STREAM_FOLLOW (long-poll with STREAM_READ from now on).
    async fn next_pushed(&mut self) -> Result<Option<StreamChunk>, ClientError> {
        let follow = match &mut self.follow {
            Some(follow) => follow,
            None => self.follow.insert(self.client.follow_stream(
                self.stream_id,
                self.offset,
                STREAM_READER_BYTES_MAX,
                self.wait,
            )?),
        };
        match follow.next().await {
            Ok(Some(chunk)) => Ok(Some(chunk)),
            Ok(None) => {
                self.follow = None;
                Ok(None)
            }
            Err(ClientError::Server {
                code: ErrorCode::UnknownMessage,
                ..
            }) => {
                self.push = false;
                self.follow = None;
                Ok(None)
            }
            Err(error) => {
                self.follow = None;
                Err(error)
            }
        }
    }

    /// The next chunk by a long-poll (STREAM_READ), which must answer the offset asked.
    async fn next_polled(&mut self) -> Result<StreamChunk, ClientError> {
        let (stream_id, offset) = (self.stream_id, self.offset);
        let chunk = self
            .client
            .read_stream(stream_id, offset, STREAM_READER_BYTES_MAX, Some(self.wait))
            .await?;
        if chunk.offset != offset {
            return Err(ClientError::Protocol(format!(
                "STREAM_READ answered offset {} for {offset}",
                chunk.offset
            )));
        }
        Ok(chunk)
    }

    /// The next bytes (a chunk that holds some), or the stream's end, then `Ok(None)`. The end
    /// is a sealed chunk holding the rest of the stream's bytes from the offset reached, read
    /// from the sealed turn's payload (`Client::sealed_stream_rest`: a reader that was away at
    /// the seal, or that starts after it, still gets every byte once, in order), or an aborted
    /// chunk with no bytes (the stream never became a turn).
    pub async fn next(&mut self) -> Result<Option<StreamChunk>, ClientError> {
        while !self.ended {
            let chunk = if self.push {
                match self.next_pushed().await? {
                    Some(chunk) => chunk,
                    // The follow ended, or the server has no push reads: ask again.
                    None => continue,
                }
            } else {
                self.next_polled().await?
            };
            if let StreamState::Sealed(turn_id) = chunk.state {
                // The rest is the sealed turn's payload. The offset moves only once it is
                // read: after an error the next call reads the stream's end again.
                let end = self.offset + chunk.bytes.len() as u64;
                let rest = self
                    .client
                    .sealed_stream_rest(self.stream_id, turn_id, end)
                    .await?;
                self.follow = None;
                self.ended = true;
                let bytes = if chunk.bytes.is_empty() {
                    rest
                } else {
                    Bytes::from([chunk.bytes.as_ref(), rest.as_ref()].concat())
                };
                self.offset += bytes.len() as u64;
                return Ok(Some(StreamChunk { bytes, ..chunk }));
            }
            self.offset += chunk.bytes.len() as u64;
            if chunk.state != StreamState::Open {
                self.ended = true;
                self.follow = None;
                return Ok(Some(chunk));
            }
            if !chunk.bytes.is_empty() {
                return Ok(Some(chunk));
            }
        }
        Ok(None)
    }
}
