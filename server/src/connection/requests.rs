//! From a frame to a running request: decode it in the connection's version (a body that does
//! not decode is answered with an ERROR and closes the connection; an unknown message type is
//! answered UNKNOWN_MESSAGE and the connection stays open), keep everything but HELLO out until
//! HELLO is done, reserve the request's largest answer of the server's budget (`budget.rs`),
//! then run it: inline when it completes without waiting (most reads), else as a task; a
//! STREAM_FOLLOW as a task of `follows.rs`, which answers it frame by frame. A long poll
//! (STREAM_READ or WATCH with a wait) is answered with what is there now as soon as its
//! connection stops reading (the peer closed its side, shutdown), never at its deadline.

use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::Bytes;
use ctxstore_protocol::{
    AdminRequest, Ask, DecodeError, ERROR_ANSWER_BYTES_MAX, ErrorCode, FrameHeader, MessageType,
    Request, Response, StreamsRequest, decode_request_as,
};
use ctxstore_protocol::{admin, streams};

use super::CoreContext;
use super::budget::answer_limits;
use super::follows;
use super::hello::{HelloState, Refused, hello};
use super::reader::Ending;
use super::writer::ConnectionState;
use crate::dispatch::error;
use crate::dispatch::{FollowFrames, Session, rights};
use crate::local::{Either, race};

/// What became of a frame.
pub(super) enum Handled {
    /// Answered, or started.
    Done,
    /// Close the connection.
    Close(Ending),
    /// A request that must wait for room in the server's budget.
    Wait(Waiting),
}

/// A request read and decoded, not started: the server's budget has no room for what it
/// reserves.
pub(super) struct Waiting {
    pub(super) header: FrameHeader,
    pub(super) work: Work,
    /// What it reserves (from `Accounting::reservation`).
    pub(super) reserved: u64,
}

pub(super) enum Work {
    Request(Request),
    /// An answer known at once (UNKNOWN_MESSAGE): it reserves its bytes like a request.
    Answer(Response),
}

/// Handles one frame.
pub(super) fn handle_frame(
    (header, body): (FrameHeader, Bytes),
    hello: &mut HelloState,
    core: &Rc<CoreContext>,
    state: &Rc<ConnectionState>,
) -> Handled {
    let authenticated = hello.deadline.is_none();
    let is_hello = header.msg_type == MessageType::Hello.code();
    if !authenticated && !is_hello {
        let response = error(ErrorCode::Unauthorized, "send HELLO first");
        answer_at_once(&header, &response, core, state);
        return Handled::Close("request before HELLO");
    }
    // A payload is a slice of the read buffer: a request holds its frame's memory until it
    // is answered.
    let body_bytes = body.len() as u64;
    let request = match decode_request_as(hello.version, &header, body) {
        Ok(request) => request,
        Err(decode_error) => return undecodable(header, decode_error, hello, core, state),
    };
    if let Request::Admin(AdminRequest::Hello(admin::Hello {
        min_version,
        max_version,
        token,
        client_name,
    })) = &request
    {
        if authenticated {
            let response = error(ErrorCode::BadFrame, "HELLO twice");
            answer_at_once(&header, &response, core, state);
            return Handled::Close("second HELLO");
        }
        let negotiated = self::hello(core, *min_version, *max_version, token, client_name);
        return said_hello(&header, negotiated, hello, core, state);
    }
    let answer_bytes_max = request.answer_bytes_max(&answer_limits(core));
    let reserved = state.accounting.reservation(answer_bytes_max + body_bytes);
    let waiting = Waiting {
        header,
        work: Work::Request(request),
        reserved,
    };
    start_or_wait(waiting, hello.version, core, state)
}

/// A frame whose body does not decode: an unknown message on an authenticated connection is
/// answered UNKNOWN_MESSAGE like a request (the stream is intact); anything else is answered
/// and closes the connection.
fn undecodable(
    header: FrameHeader,
    decode_error: DecodeError,
    hello: &HelloState,
    core: &Rc<CoreContext>,
    state: &Rc<ConnectionState>,
) -> Handled {
    let authenticated = hello.deadline.is_none();
    let code = decode_error.code();
    let response = error(code, decode_error.to_string());
    if code == ErrorCode::UnknownMessage && authenticated {
        // An unknown message still had a well-formed frame: the stream is intact, and the
        // connection may send many: each answer counts in the budget.
        let waiting = Waiting {
            header,
            work: Work::Answer(response),
            reserved: state.accounting.reservation(ERROR_ANSWER_BYTES_MAX),
        };
        return start_or_wait(waiting, hello.version, core, state);
    }
    answer_at_once(&header, &response, core, state);
    if code == ErrorCode::UnknownMessage {
        Handled::Done
    } else {
        Handled::Close("malformed body")
    }
}

/// HELLO answered: the connection speaks `version` from now on, or closes.
fn said_hello(
    header: &FrameHeader,
    negotiated: Result<(admin::Negotiated, Session), Refused>,
    hello: &mut HelloState,
    core: &CoreContext,
    state: &ConnectionState,
) -> Handled {
    match negotiated {
        Ok((negotiated, session)) => {
            // HELLO comes once: the session is set once.
            let first = state.session.set(Rc::new(session)).is_ok();
            assert!(first, "one HELLO per connection");
            hello.deadline = None;
            hello.version = negotiated.version;
            let response = admin::Hello::respond(negotiated);
            hello.leave_pending(core);
            answer_at_once(header, &response, core, state);
            Handled::Done
        }
        Err(refused) => {
            let (response, ending) = *refused;
            answer_at_once(header, &response, core, state);
            Handled::Close(ending)
        }
    }
}

/// Answers a frame that starts no request (HELLO, and the ERRORs of frames refused before
/// they could be one): it is not in flight and reserves nothing of the budget.
pub(super) fn answer_at_once(
    header: &FrameHeader,
    response: &Response,
    core: &CoreContext,
    state: &ConnectionState,
) {
    core.metrics.answered(header.msg_type, response, None);
    state.send(header.req_id, response, false, 0);
}

/// Starts a request (`start`), or hands it back to wait for room in the server's budget.
pub(super) fn start_or_wait(
    waiting: Waiting,
    version: u16,
    core: &Rc<CoreContext>,
    state: &Rc<ConnectionState>,
) -> Handled {
    match start(waiting, version, core, state) {
        None => Handled::Done,
        Some(waiting) => Handled::Wait(waiting),
    }
}

/// Reserves what the request may hold of the server's budget and starts it; gives it back
/// (`Some`) when the budget has no room.
pub(super) fn start(
    waiting: Waiting,
    version: u16,
    core: &Rc<CoreContext>,
    state: &Rc<ConnectionState>,
) -> Option<Waiting> {
    let accounting = &state.accounting;
    if !accounting.try_reserve(waiting.reserved) {
        return Some(waiting);
    }
    let session = state.session()?;
    let Waiting {
        header,
        work,
        reserved,
    } = waiting;
    let request = match work {
        Work::Request(request) => request,
        Work::Answer(response) => {
            core.metrics.answered(header.msg_type, &response, None);
            state.send(header.req_id, &response, false, reserved);
            return None;
        }
    };
    core.dispatcher
        .counters
        .requests
        .fetch_add(1, Ordering::Relaxed);
    accounting.in_flight.set(accounting.in_flight.get() + 1);
    let started = core.metrics.clock();
    if let Some(frames) = FollowFrames::of(&request, version) {
        let follow = (header, reserved, started);
        start_follow(follow, frames, request.message_type(), core, state, session);
        return None;
    }
    // A long poll is cut short when the connection stops reading (the peer closed, shutdown):
    // it is answered with what is there now, as a follow's last frame is.
    let now = answered_now(&request);
    let mut task: Pin<Box<dyn Future<Output = Response>>> = {
        let core = core.clone();
        let connection_id = state.connection_id;
        let session = session.clone();
        Box::pin(async move {
            core.dispatcher
                .handle(&session, request, version, connection_id)
                .await
        })
    };
    // Most reads complete without waiting (they run on this thread over published state):
    // answer them here, so that their bytes are counted before the next frame is taken. A
    // request that waits (for the engine's actors) keeps its reservation (its body and the
    // largest response it may produce) until it is answered; together they keep the
    // connection within unwritten_bytes_max plus one request, and the server within
    // unwritten_bytes_total_max. (Appends of large payloads waiting on a slow disk are thus
    // bounded too, not only responses.)
    let mut context = Context::from_waker(Waker::noop());
    match task.as_mut().poll(&mut context) {
        Poll::Ready(response) => {
            core.metrics.answered(header.msg_type, &response, started);
            state.send(header.req_id, &response, true, reserved);
        }
        Poll::Pending => {
            let (core, state) = (core.clone(), state.clone());
            compio::runtime::spawn(async move {
                let response = match now {
                    None => task.await,
                    Some(now) => match race(&mut task, state.reading_ended.wait()).await {
                        Either::Left(response) => response,
                        Either::Right(()) => {
                            drop(task);
                            let connection_id = state.connection_id;
                            let dispatcher = &core.dispatcher;
                            dispatcher
                                .handle(&session, now, version, connection_id)
                                .await
                        }
                    },
                };
                core.metrics.answered(header.msg_type, &response, started);
                state.send(header.req_id, &response, true, reserved);
            })
            .detach();
        }
    }
    None
}

/// Pumps a STREAM_FOLLOW counted in flight (`follows.rs`): its frame header, what it
/// reserved, when it started. It is not answered by the dispatcher, so its right is checked
/// here.
fn start_follow(
    (header, reserved, started): (FrameHeader, u64, Option<Instant>),
    frames: FollowFrames,
    message: MessageType,
    core: &Rc<CoreContext>,
    state: &Rc<ConnectionState>,
    session: Rc<Session>,
) {
    if let Err(refused) = rights::check(&session, message) {
        core.metrics.answered(header.msg_type, &refused, started);
        state.send(header.req_id, &refused, true, reserved);
        return;
    }
    let (core, state) = (core.clone(), state.clone());
    let follow = follows::follow(header, frames, reserved, core, state, session, started);
    compio::runtime::spawn(follow).detach();
}

/// A long poll's request without its wait (STREAM_READ or WATCH with `wait_ms`): what answers
/// it at once with what is there now, when its connection stops reading before the wait ends.
/// A closed peer is not a slow one: its long polls must not hold the connection, nor the
/// server's drain, until their deadline. `None`: the request does not wait for news (it runs
/// to its end: an append is answered once durable).
fn answered_now(request: &Request) -> Option<Request> {
    let now = match request {
        Request::Streams(StreamsRequest::StreamRead(streams::StreamRead {
            stream_id,
            offset,
            bytes_max,
            wait_ms,
        })) if *wait_ms > 0 => StreamsRequest::StreamRead(streams::StreamRead {
            stream_id: *stream_id,
            offset: *offset,
            bytes_max: *bytes_max,
            wait_ms: 0,
        }),
        Request::Streams(StreamsRequest::Watch(streams::Watch {
            target,
            after_seq,
            max_events,
            wait_ms,
        })) if *wait_ms > 0 => StreamsRequest::Watch(streams::Watch {
            target: target.clone(),
            after_seq: *after_seq,
            max_events: *max_events,
            wait_ms: 0,
        }),
        _ => return None,
    };
    Some(Request::Streams(now))
}
