//! The streams family (version 3, issue 32): STREAM_OPEN, STREAM_APPEND, STREAM_SEAL,
//! STREAM_ABORT, STREAM_LIST, STREAM_READ, one match. STREAM_READ with `wait_ms` is a long
//! poll: the engine's `wait_stream` future races the deadline (the server's
//! `stream_wait_ms_max` or the request's, the shorter), and an empty answer at the deadline
//! tells the reader to ask again from the same offset. WATCH long-polls a target's events
//! the same way. A STREAM_FOLLOW's frames are the long poll's answers with MORE while they go
//! on (`follow.rs` makes them one after the other; the connection pumps them).

use std::time::Duration;

use ctxstore_engine::streams::{StreamEnd, StreamInfo, StreamOwner, StreamRead};
use ctxstore_engine::watch::{WatchKind, WatchRead, WatchTarget};
use ctxstore_engine::{AppendRequest, Parent, TurnId, TurnOptions};
use ctxstore_protocol::streams;
use ctxstore_protocol::{
    ExtrasWire, ParentWire, Response, StreamInfoWire, StreamStateWire, StreamsRequest,
    StreamsResponse, WATCH_FROM_NOW, WatchEventWire, WatchKindWire, WatchTargetWire,
};

use super::{Scoped, engine_error, turn_wire};

impl Scoped<'_> {
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
        // Each message's function returns its own answer: the variant that wraps it is the
        // only one that type-checks.
        match request {
            StreamsRequest::StreamOpen(open) => {
                let opened = self.open_stream(open, owner).await;
                opened.map(StreamsResponse::Opened)
            }
            StreamsRequest::StreamAppend(append) => {
                let appended = self.append_delta(append, connection_id).await;
                appended.map(StreamsResponse::Appended)
            }
            StreamsRequest::StreamSeal(seal) => {
                let sealed = self.seal(seal.stream_id, connection_id).await;
                sealed.map(StreamsResponse::Sealed)
            }
            StreamsRequest::StreamAbort(abort) => {
                let aborted = self.abort(abort.stream_id, connection_id).await;
                aborted.map(StreamsResponse::Aborted)
            }
            StreamsRequest::StreamList(list) => {
                self.list_streams(list).await.map(StreamsResponse::Listed)
            }
            StreamsRequest::StreamRead(streams::StreamRead {
                stream_id,
                offset,
                bytes_max,
                wait_ms,
            }) => {
                let read = self.read_waiting(stream_id, offset, bytes_max, wait_ms);
                Ok(StreamsResponse::Read(read_wire(
                    stream_id,
                    offset,
                    read.await?,
                )))
            }
            // A follow's frame is the long poll's answer with MORE where it goes on.
            StreamsRequest::StreamFollow(streams::StreamFollow {
                stream_id,
                offset,
                bytes_max,
                wait_ms,
            }) => {
                let read = self.read_waiting(stream_id, offset, bytes_max, wait_ms);
                Ok(StreamsResponse::Pushed(pushed(
                    stream_id,
                    offset,
                    read.await?,
                )))
            }
            StreamsRequest::Watch(watch) => self.watch(watch).await.map(StreamsResponse::Watched),
        }
    }

    /// STREAM_OPEN: a stream that `owner` writes, sealed into a turn of `request`'s context.
    async fn open_stream(
        &self,
        open: streams::StreamOpen,
        owner: StreamOwner,
    ) -> Result<streams::Opened, Response> {
        let request = AppendRequest {
            context_id: self.context_id(open.context)?,
            expected_head: open.expected_head.map(TurnId),
            type_tag: open.type_tag,
            codec: open.codec,
            payload: (),
            options: turn_options(open.parent, open.summary, open.extras),
        };
        let info = self
            .engine
            .open_stream(request, owner)
            .await
            .map_err(engine_error)?;
        Ok(streams::Opened {
            info: info_wire(&info),
        })
    }

    /// STREAM_APPEND: a delta at the stream's end (or exactly at `offset`).
    async fn append_delta(
        &self,
        append: streams::StreamAppend,
        connection_id: u64,
    ) -> Result<streams::Appended, Response> {
        let streams::StreamAppend {
            stream_id,
            offset,
            bytes,
        } = append;
        let length = self
            .engine
            .append_delta(stream_id, offset, bytes, connection_id)
            .await
            .map_err(engine_error)?;
        Ok(streams::Appended { stream_id, length })
    }

    /// STREAM_SEAL: the stream's bytes become a turn.
    async fn seal(&self, stream_id: u64, connection_id: u64) -> Result<streams::Sealed, Response> {
        let appended = self
            .engine
            .seal_stream(stream_id, connection_id)
            .await
            .map_err(engine_error)?;
        Ok(streams::Sealed {
            turn: turn_wire(&appended.turn),
            deduped: appended.deduped,
        })
    }

    /// STREAM_ABORT: the stream is dropped; the head does not move.
    async fn abort(
        &self,
        stream_id: u64,
        connection_id: u64,
    ) -> Result<streams::Aborted, Response> {
        self.engine
            .abort_stream(stream_id, connection_id)
            .await
            .map_err(engine_error)?;
        Ok(streams::Aborted { stream_id })
    }

    /// STREAM_LIST: a context's open streams, after `after_stream_id`.
    async fn list_streams(&self, list: streams::StreamList) -> Result<streams::Listed, Response> {
        let streams::StreamList {
            context,
            after_stream_id,
            limit,
        } = list;
        let context_id = self.context_id(context)?;
        // An unknown context is NOT_FOUND, not an empty list.
        self.engine.head(context_id).await.map_err(engine_error)?;
        let streams = self
            .engine
            .open_streams(Some(context_id), after_stream_id, limit as usize)
            .iter()
            .map(info_wire)
            .collect();
        Ok(streams::Listed { streams })
    }

    /// WATCH: a target's events after `after_seq`, long-polled like STREAM_READ.
    async fn watch(&self, watch: streams::Watch) -> Result<streams::Watched, Response> {
        let streams::Watch {
            target,
            after_seq,
            max_events,
            wait_ms,
        } = watch;
        let target = match target {
            WatchTargetWire::Context(context) => WatchTarget::Context(self.context_id(context)?),
            WatchTargetWire::NamePrefix(prefix) => WatchTarget::NamePrefix(prefix),
            WatchTargetWire::Tag(key, value) => WatchTarget::Tag(key, value),
        };
        if after_seq == WATCH_FROM_NOW {
            return Ok(streams::Watched {
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

impl Scoped<'_> {
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
fn watched(after_seq: u64, read: WatchRead) -> streams::Watched {
    match read {
        WatchRead::Lagged { resume_after } => streams::Watched {
            lagged: true,
            resume_after,
            events: Vec::new(),
        },
        WatchRead::Events(events) => streams::Watched {
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
fn read_wire(stream_id: u64, offset: u64, read: StreamRead) -> streams::Read {
    let (state, length, bytes) = read_fields(read);
    streams::Read {
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
pub(super) fn pushed(stream_id: u64, offset: u64, read: StreamRead) -> streams::Pushed {
    let (state, length, bytes) = read_fields(read);
    streams::Pushed {
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
        vectors: None,
    }
}
