//! STREAM_FOLLOW's frames (issue 32, docs/protocol.md#stream_follow-0x0038), handed to the
//! connection as a stream it pumps (issue 45): `FollowFrames` makes each frame — the stream
//! from where the last one ended, once it holds something past it (the engine's
//! `wait_stream`: durable bytes only), with MORE while the follow goes on — and knows which
//! frame is the last. The connection (`connection/follows.rs`) only reserves room for each
//! frame, sends it, and asks for the last one at once when it stops reading; it builds no
//! request and reads no flag.

use ctxstore_protocol::streams::{Pushed, StreamFollow};
use ctxstore_protocol::{Request, Response, StreamStateWire, StreamsRequest, StreamsResponse};

use super::{Scoped, in_version};

/// One follow's frames, one after the other, until its last.
#[derive(Debug)]
pub struct FollowFrames {
    stream_id: u64,
    /// Where the next frame starts: the end of the bytes sent so far.
    offset: u64,
    bytes_max: u32,
    wait_ms: u32,
    version: u16,
    ended: bool,
}

/// A frame of a follow, and whether it is the follow's last.
#[derive(Debug)]
pub struct FollowFrame {
    pub response: Response,
    pub last: bool,
}

impl FollowFrames {
    /// A follow's frames, if `request` is a STREAM_FOLLOW.
    pub fn of(request: &Request, version: u16) -> Option<FollowFrames> {
        match *request {
            Request::Streams(StreamsRequest::StreamFollow(StreamFollow {
                stream_id,
                offset,
                bytes_max,
                wait_ms,
            })) => Some(FollowFrames {
                stream_id,
                offset,
                bytes_max,
                wait_ms,
                version,
                ended: false,
            }),
            _ => None,
        }
    }

    pub fn stream_id(&self) -> u64 {
        self.stream_id
    }

    /// Where the follower follows again from, were the follow cut now.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next frame: the stream from the offset once it holds something past it (or at the
    /// follow's `wait_ms`, the last frame); with `now`, the stream as it is now, as the last
    /// frame (the connection stops reading). Safe to drop while it waits: nothing moves until
    /// the frame is made.
    pub async fn next(&mut self, dispatcher: &Scoped<'_>, now: bool) -> FollowFrame {
        assert!(!self.ended, "a follow's frames end at its last");
        let wait_ms = if now { 0 } else { self.wait_ms };
        let (stream_id, offset) = (self.stream_id, self.offset);
        let read = dispatcher
            .read_waiting(stream_id, offset, self.bytes_max, wait_ms)
            .await;
        let frame = match read {
            Ok(read) => {
                let pushed = super::streams::pushed(stream_id, offset, read);
                let frame = Response::Streams(StreamsResponse::Pushed(pushed));
                if now { last(frame) } else { frame }
            }
            Err(error) => error,
        };
        self.advance(in_version(frame, self.version))
    }

    /// `frame` made the follow's last: the connection stopped reading while it was made.
    /// The follower follows again from where it ends.
    pub fn close(&mut self, frame: FollowFrame) -> FollowFrame {
        if frame.last {
            return frame;
        }
        let response = last(frame.response);
        self.ended = true;
        FollowFrame {
            response,
            last: true,
        }
    }

    /// The follow moves past a frame with MORE (which carries bytes); any other frame is its
    /// last.
    fn advance(&mut self, response: Response) -> FollowFrame {
        let pushed_bytes = match &response {
            Response::Streams(StreamsResponse::Pushed(Pushed {
                more: true, bytes, ..
            })) => Some(bytes.len() as u64),
            _ => None,
        };
        let Some(pushed_bytes) = pushed_bytes else {
            self.ended = true;
            return FollowFrame {
                response,
                last: true,
            };
        };
        // Pair of `pushed`: a frame with MORE carries bytes, so the follow advances.
        assert!(
            pushed_bytes > 0,
            "a MORE frame without bytes would repeat itself"
        );
        self.offset += pushed_bytes;
        FollowFrame {
            response,
            last: false,
        }
    }
}

/// A follow's last frame: MORE taken off (the follower follows again from its new offset).
fn last(response: Response) -> Response {
    match response {
        Response::Streams(StreamsResponse::Pushed(pushed)) => {
            let pushed = Pushed {
                more: false,
                ..pushed
            };
            Response::Streams(StreamsResponse::Pushed(pushed))
        }
        other => other,
    }
}

/// Whether a frame of `state` holding `bytes` lets the follow go on: only an open stream's
/// frame with bytes (an ended stream, or nothing new within the wait, ends it).
pub(super) fn goes_on(state: &StreamStateWire, bytes: &[u8]) -> bool {
    *state == StreamStateWire::Open && !bytes.is_empty()
}
