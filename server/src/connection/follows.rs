//! STREAM_FOLLOW on a connection (issue 32, docs/protocol.md#stream_follow-0x0038): one request
//! answered by a series of frames. The follow is one request in flight from its frame to its
//! last answer frame; each frame is the dispatcher's answer to the follow from the offset the
//! previous one ended at (the engine's `wait_stream`: durable bytes only), sent like an answer.
//! Before each next frame the follow reserves its largest size of the server's answer budget
//! and waits while its connection holds `unwritten_bytes_max` unwritten: a follower that does
//! not read gets nothing pushed, and nothing is dropped or skipped (the bytes wait in the
//! stream, and the next frame carries all of them, up to `bytes_max`). When the connection
//! stops reading (the peer left, shutdown, a stall) the follow ends with the stream as it is
//! now, so that the connection drains at once.

use std::rc::Rc;
use std::time::{Duration, Instant};

use ctxstore_protocol::{
    ErrorCode, FrameHeader, Request, Response, StreamsRequest, StreamsResponse,
};

use super::CoreContext;
use super::writer::ConnectionState;
use crate::dispatch::error;
use crate::local::{Either, race};

/// A STREAM_FOLLOW's fields: where the next frame starts.
pub(super) struct Follow {
    pub(super) stream_id: u64,
    pub(super) offset: u64,
    pub(super) bytes_max: u32,
    pub(super) wait_ms: u32,
}

impl Follow {
    /// The follow's request if the request is one.
    pub(super) fn of(request: &Request) -> Option<Follow> {
        match *request {
            Request::Streams(StreamsRequest::StreamFollow {
                stream_id,
                offset,
                bytes_max,
                wait_ms,
            }) => Some(Follow {
                stream_id,
                offset,
                bytes_max,
                wait_ms,
            }),
            _ => None,
        }
    }

    /// The request for the next frame: from the offset so far, waiting `wait_ms`.
    fn request(&self, wait_ms: u32) -> Request {
        Request::Streams(StreamsRequest::StreamFollow {
            stream_id: self.stream_id,
            offset: self.offset,
            bytes_max: self.bytes_max,
            wait_ms,
        })
    }
}

/// Runs a follow that was started (counted in flight, `reserved` of the budget held for its
/// first frame) until its last frame is sent.
pub(super) async fn follow(
    header: FrameHeader,
    mut follow: Follow,
    reserved: u64,
    version: u16,
    core: Rc<CoreContext>,
    state: Rc<ConnectionState>,
    started: Option<Instant>,
) {
    let dispatcher = &core.dispatcher;
    loop {
        // The frame: the stream from the offset, once it holds something past it; the stream
        // as it is now when the connection stops reading.
        let next = dispatcher.handle(follow.request(follow.wait_ms), version, state.connection_id);
        let (response, closing) = match race(next, state.reading_ended.wait()).await {
            Either::Left(response) => (response, state.reading_ended.is_raised()),
            Either::Right(()) => {
                let now = dispatcher.handle(follow.request(0), version, state.connection_id);
                (now.await, true)
            }
        };
        let response = if closing { last(response) } else { response };
        let pushed_bytes = match &response {
            Response::Streams(StreamsResponse::Pushed {
                more: true, bytes, ..
            }) => Some(bytes.len() as u64),
            _ => None,
        };
        let Some(pushed_bytes) = pushed_bytes else {
            core.metrics.answered(header.msg_type, &response, started);
            state.send(header.req_id, &response, true, reserved);
            return;
        };
        // Pair of the dispatcher's: a frame with MORE carries bytes, so the follow advances.
        assert!(
            pushed_bytes > 0,
            "a MORE frame without bytes would repeat itself"
        );
        state.send(header.req_id, &response, false, reserved);
        follow.offset += pushed_bytes;
        if !room_for_next_frame(&core, &state, reserved).await {
            // The connection stops reading before the follower read what it was sent: a
            // small last frame (reserving nothing, as the ERROR that closes a connection),
            // so that the request ends and the connection drains.
            let message = format!(
                "the server closes this connection; follow stream {} again from offset {}",
                follow.stream_id, follow.offset
            );
            let response = error(ErrorCode::Overloaded, message);
            core.metrics.answered(header.msg_type, &response, started);
            state.send(header.req_id, &response, true, 0);
            return;
        }
    }
}

/// The follow's last frame: MORE taken off (the follower follows again from its new offset).
fn last(response: Response) -> Response {
    match response {
        Response::Streams(StreamsResponse::Pushed {
            stream_id,
            state,
            offset,
            length,
            bytes,
            ..
        }) => Response::Streams(StreamsResponse::Pushed {
            more: false,
            stream_id,
            state,
            offset,
            length,
            bytes,
        }),
        other => other,
    }
}

/// Waits until the next frame may be read and sent: the connection holds less than
/// `unwritten_bytes_max` unwritten, and `reserved` of the server's budget is taken for it.
/// `false`: the connection stopped reading first.
async fn room_for_next_frame(core: &CoreContext, state: &ConnectionState, reserved: u64) -> bool {
    // Other connections' writers (on any core) free the server-wide budget without telling
    // this one: look again now and then, as a waiting request does.
    const RECHECK: Duration = Duration::from_millis(20);
    let accounting = &state.accounting;
    loop {
        if state.reading_ended.is_raised() || accounting.writer_done.get() {
            return false;
        }
        if accounting.unwritten_bytes.get() < core.limits.unwritten_bytes_max
            && accounting.try_reserve(reserved)
        {
            return true;
        }
        race(
            accounting.changed.notified(),
            race(compio::time::sleep(RECHECK), state.reading_ended.wait()),
        )
        .await;
    }
}
