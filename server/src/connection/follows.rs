//! STREAM_FOLLOW on a connection (issue 32, docs/protocol.md#stream_follow-0x0038): one request
//! answered by a series of frames, which the dispatcher makes (`dispatch/follow.rs`,
//! `FollowFrames`) and this task pumps (issue 45). The follow is one request in flight from
//! its frame to its last answer frame. Before each next frame it reserves its largest size of
//! the server's answer budget and waits while its connection holds `unwritten_bytes_max`
//! unwritten: a follower that does not read gets nothing pushed, and nothing is dropped or
//! skipped (the bytes wait in the stream, and the next frame carries all of them, up to
//! `bytes_max`). When the connection stops reading (the peer left, shutdown, a stall) the
//! follow ends with the stream as it is now, so that the connection drains at once.

use crate::dispatch::Session;
use std::rc::Rc;
use std::time::{Duration, Instant};

use ctxstore_protocol::{ErrorCode, FrameHeader};

use super::CoreContext;
use super::writer::ConnectionState;
use crate::dispatch::{FollowFrames, error};
use crate::local::{Either, race};

/// Pumps a follow that was started (counted in flight, `reserved` of the budget held for its
/// first frame) until its last frame is sent.
pub(super) async fn follow(
    header: FrameHeader,
    mut frames: FollowFrames,
    reserved: u64,
    core: Rc<CoreContext>,
    state: Rc<ConnectionState>,
    session: Rc<Session>,
    started: Option<Instant>,
) {
    let dispatcher = &core.dispatcher.scoped(&session);
    loop {
        // The next frame; at once, as the last, when the connection stops reading.
        let frame = match race(frames.next(dispatcher, false), state.reading_ended.wait()).await {
            Either::Left(frame) if state.reading_ended.is_raised() => frames.close(frame),
            Either::Left(frame) => frame,
            Either::Right(()) => frames.next(dispatcher, true).await,
        };
        if frame.last {
            core.metrics
                .answered(header.msg_type, &frame.response, started);
            state.send(header.req_id, &frame.response, true, reserved);
            return;
        }
        state.send(header.req_id, &frame.response, false, reserved);
        if !room_for_next_frame(&core, &state, reserved).await {
            // The connection stops reading before the follower read what it was sent: a
            // small last frame (reserving nothing, as the ERROR that closes a connection),
            // so that the request ends and the connection drains.
            let message = format!(
                "the server closes this connection; follow stream {} again from offset {}",
                frames.stream_id(),
                frames.offset()
            );
            let response = error(ErrorCode::Overloaded, message);
            core.metrics.answered(header.msg_type, &response, started);
            state.send(header.req_id, &response, true, 0);
            return;
        }
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
