//! The streams family (version 3, issue 32): STREAM_OPEN, STREAM_APPEND, STREAM_SEAL,
//! STREAM_ABORT, STREAM_LIST, STREAM_READ, one match. STREAM_READ with `wait_ms` is a long
//! poll: the engine's `wait_stream` future races the deadline (the server's
//! `stream_wait_ms_max` or the request's, the shorter), and an empty answer at the deadline
//! tells the reader to ask again from the same offset. WATCH long-polls a target's events
//! the same way. A STREAM_FOLLOW's frames are the long poll's answers with MORE while they go
//! on (`follow.rs` makes them one after the other; the connection pumps them).

use std::time::Duration;

use bytes::Bytes;
use ctxstore_engine::streams::{StreamEnd, StreamInfo, StreamOwner, StreamRead};
use ctxstore_engine::watch::{WatchKind, WatchRead, WatchTarget};
use ctxstore_engine::{AppendRequest, Parent, TurnId, TurnOptions};
use ctxstore_protocol::{
    ContextRef as ContextRefWire, ExtrasWire, ParentWire, Response, StreamInfoWire,
    StreamStateWire, StreamsRequest, StreamsResponse, WATCH_FROM_NOW, WatchEventWire,
    WatchKindWire, WatchTargetWire,
};

use super::{Dispatcher, engine_error, turn_wire};

impl Dispatcher {
    /// `connection_id` owns the streams it opens and alone writes them while connected.
    pub(super) async fn answer_streams(
        &self,
        request: StreamsRequest,
        connection_id: u64,
    ) -> Result<StreamsResponse, Response> {
        let owner = StreamOwner {
            owner: connection_id,
            streams_max: self.limits.streams_per_connection_max,
        };
        match request {
            StreamsRequest::StreamOpen {
                context,
                expected_head,
                parent,
                type_tag,
                codec,
                summary,
                extras,
            } => {
                let request = AppendRequest {
                    context_id: self.context_id(context)?,
                    expected_head: expected_head.map(TurnId),
                    type_tag,
                    codec,
                    payload: (),
                    options: turn_options(parent, summary, extras),
                };
                self.open_stream(request, owner).await
            }
            StreamsRequest::StreamAppend {
                stream_id,
                offset,
                bytes,
            } => {
                self.append_delta(stream_id, offset, bytes, connection_id)
                    .await
            }
            StreamsRequest::StreamSeal { stream_id } => self.seal(stream_id, connection_id).await,
            StreamsRequest::StreamAbort { stream_id } => self.abort(stream_id, connection_id).await,
            StreamsRequest::StreamList {
                context,
                after_stream_id,
                limit,
            } => self.list_streams(context, after_stream_id, limit).await,
            // A follow's frame is the long poll's answer with MORE where it goes on.
            request @ (StreamsRequest::StreamRead {
                stream_id,
                offset,
                bytes_max,
                wait_ms,
            }
            | StreamsRequest::StreamFollow {
                stream_id,
                offset,
                bytes_max,
                wait_ms,
            }) => {
                let read = self.read_waiting(stream_id, offset, bytes_max, wait_ms);
                let read = read.await?;
                Ok(match request {
                    StreamsRequest::StreamFollow { .. } => pushed(stream_id, offset, read),
                    _ => read_wire(stream_id, offset, read),
                })
            }
            StreamsRequest::Watch {
                target,
                after_seq,
                max_events,
                wait_ms,
            } => self.watch(target, after_seq, max_events, wait_ms).await,
        }
    }

    /// STREAM_OPEN: a stream that `owner` writes, sealed into a turn of `request`'s context.
    async fn open_stream(
        &self,
        request: AppendRequest<()>,
        owner: StreamOwner,
    ) -> Result<StreamsResponse, Response> {
        let info = self
            .engine
            .open_stream(request, owner)
            .await
            .map_err(engine_error)?;
        Ok(StreamsResponse::Opened {
            info: info_wire(&info),
        })
    }

    /// STREAM_APPEND: a delta at the stream's end (or exactly at `offset`).
    async fn append_delta(
        &self,
        stream_id: u64,
        offset: Option<u64>,
        bytes: Bytes,
        connection_id: u64,
    ) -> Result<StreamsResponse, Response> {
        let length = self
            .engine
            .append_delta(stream_id, offset, bytes, connection_id)
            .await
            .map_err(engine_error)?;
        Ok(StreamsResponse::Appended { stream_id, length })
    }

    /// STREAM_SEAL: the stream's bytes become a turn.
    async fn seal(&self, stream_id: u64, connection_id: u64) -> Result<StreamsResponse, Response> {
        let appended = self
            .engine
            .seal_stream(stream_id, connection_id)
            .await
            .map_err(engine_error)?;
        Ok(StreamsResponse::Sealed {
            turn: turn_wire(&appended.turn),
            deduped: appended.deduped,
        })
    }

    /// STREAM_ABORT: the stream is dropped; the head does not move.
    async fn abort(&self, stream_id: u64, connection_id: u64) -> Result<StreamsResponse, Response> {
        self.engine
            .abort_stream(stream_id, connection_id)
            .await
            .map_err(engine_error)?;
        Ok(StreamsResponse::Aborted { stream_id })
    }

    /// STREAM_LIST: a context's open streams, after `after_stream_id`.
    async fn list_streams(
        &self,
        context: ContextRefWire,
        after_stream_id: u64,
        limit: u32,
    ) -> Result<StreamsResponse, Response> {
        let context_id = self.context_id(context)?;
        // An unknown context is NOT_FOUND, not an empty list.
        self.engine.head(context_id).await.map_err(engine_error)?;
        let streams = self
            .engine
            .open_streams(Some(context_id), after_stream_id, limit as usize)
            .iter()
            .map(info_wire)
            .collect();
        Ok(StreamsResponse::Listed { streams })
    }

    /// WATCH: a target's events after `after_seq`, long-polled like STREAM_READ.
    async fn watch(
        &self,
        target: WatchTargetWire,
        after_seq: u64,
        max_events: u32,
        wait_ms: u32,
    ) -> Result<StreamsResponse, Response> {
        let target = match target {
            WatchTargetWire::Context(context) => WatchTarget::Context(self.context_id(context)?),
            WatchTargetWire::NamePrefix(prefix) => WatchTarget::NamePrefix(prefix),
            WatchTargetWire::Tag(key, value) => WatchTarget::Tag(key, value),
        };
        if after_seq == WATCH_FROM_NOW {
            return Ok(StreamsResponse::Watched {
                lagged: false,
                resume_after: self.engine.watch_position(),
                events: Vec::new(),
            });
        }
        let max = max_events as usize;
        let wait_ms = wait_ms.min(self.limits.stream_wait_ms_max);
        let read = if wait_ms == 0 {
            self.engine.watch_events(&target, after_seq, max)
        } else {
            let deadline = Duration::from_millis(u64::from(wait_ms));
            let wait = self.engine.wait_watch(&target, after_seq, max);
            match compio::time::timeout(deadline, wait).await {
                Ok(read) => read,
                Err(_) => self.engine.watch_events(&target, after_seq, max),
            }
        };
        Ok(watched(after_seq, read))
    }
}

impl Dispatcher {
    /// The stream from `offset`, waiting up to `wait_ms` (cut to `stream_wait_ms_max`; 0: no
    /// wait) while it is open and holds nothing past `offset`: STREAM_READ's answer, and each
    /// STREAM_FOLLOW frame's.
    pub(super) async fn read_waiting(
        &self,
        stream_id: u64,
        offset: u64,
        bytes_max: u32,
        wait_ms: u32,
    ) -> Result<StreamRead, Response> {
        let bytes_max = (bytes_max as usize).min(self.limits.response_bytes_max as usize);
        let wait_ms = wait_ms.min(self.limits.stream_wait_ms_max);
        let read = if wait_ms == 0 {
            self.engine.read_stream(stream_id, offset, bytes_max)
        } else {
            let deadline = Duration::from_millis(u64::from(wait_ms));
            let wait = self.engine.wait_stream(stream_id, offset, bytes_max);
            match compio::time::timeout(deadline, wait).await {
                Ok(read) => read,
                // The deadline: the stream as it is now (nothing new, or ended).
                Err(_) => self.engine.read_stream(stream_id, offset, bytes_max),
            }
        };
        read.map_err(engine_error)
    }
}

/// A watch's answer: the events and where to resume (after the last one, or where it asked
/// when there is none).
fn watched(after_seq: u64, read: WatchRead) -> StreamsResponse {
    match read {
        WatchRead::Lagged { resume_after } => StreamsResponse::Watched {
            lagged: true,
            resume_after,
            events: Vec::new(),
        },
        WatchRead::Events(events) => StreamsResponse::Watched {
            lagged: false,
            resume_after: events.last().map_or(after_seq, |event| event.seq),
            events: events
                .iter()
                .map(|event| WatchEventWire {
                    seq: event.seq,
                    kind: match event.kind {
                        WatchKind::Head => WatchKindWire::Head,
                        WatchKind::StreamOpened => WatchKindWire::StreamOpened,
                        WatchKind::StreamSealed => WatchKindWire::StreamSealed,
                        WatchKind::StreamAborted => WatchKindWire::StreamAborted,
                        WatchKind::Tags => WatchKindWire::Tags,
                        WatchKind::Deleted => WatchKindWire::Deleted,
                    },
                    context_id: event.context_id.0,
                    turn_id: event.turn_id.0,
                    stream_id: event.stream_id,
                })
                .collect(),
        },
    }
}

fn info_wire(info: &StreamInfo) -> StreamInfoWire {
    StreamInfoWire {
        stream_id: info.stream_id,
        context_id: info.context_id.0,
        length: info.length_bytes,
        type_tag: info.type_tag,
        codec: info.codec,
        opened_at_unix_ms: info.opened_at_unix_ms,
        updated_at_unix_ms: info.updated_at_unix_ms,
    }
}

/// A STREAM_READ answer.
fn read_wire(stream_id: u64, offset: u64, read: StreamRead) -> StreamsResponse {
    let (state, length, bytes) = read_fields(read);
    StreamsResponse::Read {
        stream_id,
        state,
        offset,
        length,
        bytes,
    }
}

/// A STREAM_FOLLOW frame: STREAM_READ's answer, with MORE when it holds bytes of an open
/// stream (the follow goes on from where they end); else it is the follow's last frame (the
/// end, or nothing new for `wait_ms`).
pub(super) fn pushed(stream_id: u64, offset: u64, read: StreamRead) -> StreamsResponse {
    let (state, length, bytes) = read_fields(read);
    StreamsResponse::Pushed {
        more: super::follow::goes_on(&state, &bytes),
        stream_id,
        state,
        offset,
        length,
        bytes,
    }
}

/// A read's state, length and bytes as STREAM_READ's answer carries them.
fn read_fields(read: StreamRead) -> (StreamStateWire, u64, bytes::Bytes) {
    match read {
        StreamRead::Open { info, bytes } => (StreamStateWire::Open, info.length_bytes, bytes),
        StreamRead::Ended(end) => {
            let state = match end {
                StreamEnd::Sealed(turn_id) => StreamStateWire::Sealed(turn_id.0),
                StreamEnd::Aborted => StreamStateWire::Aborted,
            };
            (state, 0, bytes::Bytes::new())
        }
    }
}

/// STREAM_OPEN's parent, key, labels, links and summary flag as the engine's turn options.
fn turn_options(parent: ParentWire, summary: bool, extras: ExtrasWire) -> TurnOptions {
    TurnOptions {
        parent: match parent {
            ParentWire::Head => Parent::Head,
            ParentWire::Root => Parent::Root,
            ParentWire::Turn(turn_id) => Parent::Turn(TurnId(turn_id)),
        },
        key: (!extras.key.is_empty()).then_some(extras.key),
        labels: extras.labels,
        links: extras.links.into_iter().map(TurnId).collect(),
        summary,
    }
}
