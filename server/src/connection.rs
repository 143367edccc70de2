//! One client connection on its network core: read frames, authenticate with HELLO, run up to
//! `requests_in_flight_max` requests at once, write their responses in completion order
//! (tagged with their req_id).
//!
//! Backpressure: at the in-flight limit the connection stops reading; TCP pushes back on the
//! client. Framing errors (a frame over the limit, non-zero flags, a body that does not
//! decode) are answered with an ERROR and close the connection: only that connection.
//! An unknown message type is answered with UNKNOWN_MESSAGE and the connection stays open.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use compio::buf::BufResult;
use compio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use compio::net::TcpStream;
use ctxstore_protocol::{
    ErrorCode, FrameError, FrameHeader, FrameReader, MessageType, PROTOCOL_VERSION, Request,
    Response, ServerLimits as WireLimits, decode_request, encode_response,
};

use crate::config::ServerLimits;
use crate::dispatch::{Dispatcher, error};
use crate::local::{Either, LocalFlag, LocalNotify, race};

/// What the connections of one network core share.
#[derive(Debug)]
pub struct CoreContext {
    pub dispatcher: Dispatcher,
    pub token: Option<Arc<[u8]>>,
    pub limits: ServerLimits,
    pub shutdown: Rc<LocalFlag>,
    pub server_name: String,
}

enum Outgoing {
    Frame(Vec<Bytes>),
    /// Flush what is queued, then close the socket.
    Close,
}

struct ConnectionState {
    outgoing: flume::Sender<Outgoing>,
    in_flight: Cell<u32>,
    in_flight_changed: LocalNotify,
}

impl ConnectionState {
    fn send(&self, req_id: u64, response: &Response, core: &CoreContext) {
        if matches!(response, Response::Error { .. }) {
            core.dispatcher
                .counters
                .errors
                .fetch_add(1, Ordering::Relaxed);
        }
        // The writer may be gone (the peer closed): then nobody waits for this answer.
        let _ = self
            .outgoing
            .send(Outgoing::Frame(encode_response(req_id, response)));
    }
}

/// Serves one connection until the peer leaves, a framing error, a timeout or shutdown.
pub async fn serve(stream: TcpStream, peer: SocketAddr, core: Rc<CoreContext>) {
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let (outgoing, queue) = flume::unbounded();
    let writer_task = compio::runtime::spawn(write_frames(writer, queue));
    let state = Rc::new(ConnectionState {
        outgoing,
        in_flight: Cell::new(0),
        in_flight_changed: LocalNotify::default(),
    });
    let ending = read_requests(&mut reader, &core, &state).await;
    tracing::debug!(%peer, reason = ending, "closing connection");
    // Requests already running finish and are answered (bounded at shutdown).
    let drained = async {
        while state.in_flight.get() > 0 {
            state.in_flight_changed.notified().await;
        }
    };
    let drain_deadline = core.limits.idle_timeout.max(core.limits.frame_timeout);
    if compio::time::timeout(drain_deadline, drained)
        .await
        .is_err()
    {
        tracing::warn!(%peer, "requests still running after the drain deadline; closing anyway");
    }
    let _ = state.outgoing.send(Outgoing::Close);
    drop(state);
    let _ = writer_task.await;
}

/// Why the read loop ended.
type Ending = &'static str;

async fn read_requests(
    reader: &mut TcpStream,
    core: &Rc<CoreContext>,
    state: &Rc<ConnectionState>,
) -> Ending {
    let limits = core.limits;
    let mut frames = FrameReader::new(limits.frame_bytes_max);
    let mut authenticated = false;
    let mut frame_started: Option<Instant> = None;
    loop {
        // Every complete frame in the buffer first.
        loop {
            let frame = match frames.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(frame_error) => {
                    let code = match frame_error {
                        FrameError::TooLarge { .. } => ErrorCode::TooLarge,
                        FrameError::BadFlags { .. } => ErrorCode::BadFrame,
                    };
                    state.send(
                        frame_error.req_id(),
                        &error(code, frame_error.to_string()),
                        core,
                    );
                    return "framing error";
                }
            };
            frame_started = None;
            if let Some(ending) = handle_frame(frame, &mut authenticated, core, state) {
                return ending;
            }
        }
        if frames.pending_bytes() > 0 && frame_started.is_none() {
            frame_started = Some(Instant::now());
        }

        // Backpressure: no reading while the connection has its maximum in flight.
        while state.in_flight.get() >= limits.requests_in_flight_max {
            if let Either::Right(()) =
                race(state.in_flight_changed.notified(), core.shutdown.wait()).await
            {
                return "shutdown";
            }
        }
        if core.shutdown.is_raised() {
            return "shutdown";
        }

        // A frame in progress must finish within frame_timeout of its first byte; an idle
        // connection (nothing pending, nothing in flight) is closed after idle_timeout. The
        // read stays the same across timer checks: cancelling a read could lose bytes.
        let wanted = frames.wanted_capacity();
        let mut buffer = frames.take_buffer();
        buffer.reserve(wanted);
        let mut read = Box::pin(reader.append(buffer));
        let mut deadline = match frame_started {
            Some(started) => started + limits.frame_timeout,
            None => Instant::now() + limits.idle_timeout,
        };
        let BufResult(result, buffer) = loop {
            let timer = compio::time::sleep_until(deadline);
            match race(&mut read, race(timer, core.shutdown.wait())).await {
                Either::Left(done) => break done,
                Either::Right(Either::Right(())) => return "shutdown",
                Either::Right(Either::Left(())) if frame_started.is_some() => {
                    let message = "frame not completed within the frame timeout";
                    state.send(0, &error(ErrorCode::BadFrame, message), core);
                    return "slow frame";
                }
                Either::Right(Either::Left(())) if state.in_flight.get() > 0 => {
                    // Not idle: it waits for answers.
                    deadline = Instant::now() + limits.idle_timeout;
                }
                Either::Right(Either::Left(())) => return "idle",
            }
        };
        frames.restore(buffer);
        match result {
            Ok(0) if frames.pending_bytes() > 0 => return "truncated frame",
            Ok(0) => return "peer closed",
            Ok(_) => {}
            Err(_) => return "read error",
        }
    }
}

/// Handles one frame; `Some(ending)` closes the connection.
fn handle_frame(
    (header, body): (FrameHeader, Bytes),
    authenticated: &mut bool,
    core: &Rc<CoreContext>,
    state: &Rc<ConnectionState>,
) -> Option<Ending> {
    let is_hello = header.msg_type == MessageType::Hello.code();
    if !*authenticated && !is_hello {
        state.send(
            header.req_id,
            &error(ErrorCode::Unauthorized, "send HELLO first"),
            core,
        );
        return Some("request before HELLO");
    }
    let request = match decode_request(&header, body) {
        Ok(request) => request,
        Err(decode_error) => {
            let code = decode_error.code();
            state.send(header.req_id, &error(code, decode_error.to_string()), core);
            // An unknown message still had a well-formed frame: the stream is intact.
            return (code != ErrorCode::UnknownMessage).then_some("malformed body");
        }
    };
    if let Request::Hello {
        min_version,
        max_version,
        token,
        client_name,
    } = &request
    {
        if *authenticated {
            state.send(
                header.req_id,
                &error(ErrorCode::BadFrame, "HELLO twice"),
                core,
            );
            return Some("second HELLO");
        }
        return match hello(core, *min_version, *max_version, token, client_name) {
            Ok(response) => {
                *authenticated = true;
                state.send(header.req_id, &response, core);
                None
            }
            Err((response, ending)) => {
                state.send(header.req_id, &response, core);
                Some(ending)
            }
        };
    }
    core.dispatcher
        .counters
        .requests
        .fetch_add(1, Ordering::Relaxed);
    state.in_flight.set(state.in_flight.get() + 1);
    let core = core.clone();
    let state = state.clone();
    compio::runtime::spawn(async move {
        let response = core.dispatcher.handle(request).await;
        state.send(header.req_id, &response, &core);
        state.in_flight.set(state.in_flight.get() - 1);
        state.in_flight_changed.notify_all();
    })
    .detach();
    None
}

/// Version negotiation and the token check (constant time).
fn hello(
    core: &CoreContext,
    min_version: u16,
    max_version: u16,
    token: &[u8],
    client_name: &str,
) -> Result<Response, (Response, Ending)> {
    if !(min_version..=max_version).contains(&PROTOCOL_VERSION) {
        let message = format!(
            "this server speaks protocol version {PROTOCOL_VERSION}, not {min_version}..={max_version}"
        );
        let response = Response::Error {
            code: ErrorCode::UnsupportedVersion,
            detail: u64::from(PROTOCOL_VERSION),
            message,
        };
        return Err((response, "unsupported version"));
    }
    if let Some(expected) = &core.token
        && !constant_time_eq::constant_time_eq(token, expected)
    {
        return Err((error(ErrorCode::Unauthorized, "wrong token"), "wrong token"));
    }
    tracing::debug!(client = client_name, "client said hello");
    let limits = &core.limits;
    let engine_limits = core.dispatcher.engine.config().limits;
    Ok(Response::Hello {
        version: PROTOCOL_VERSION,
        limits: WireLimits {
            frame_bytes_max: limits.frame_bytes_max,
            requests_in_flight_max: limits.requests_in_flight_max,
            blob_bytes_max: engine_limits.blob_bytes_max,
            read_turns_max: engine_limits.read_turns_max,
            has_blobs_max: limits.has_blobs_max,
        },
        server_name: core.server_name.clone(),
    })
}

/// Writes queued frames, as many as are ready in one vectored write.
async fn write_frames(mut writer: TcpStream, queue: flume::Receiver<Outgoing>) {
    // Below IOV_MAX (1024) buffers per writev.
    const CHUNKS_PER_WRITE_MAX: usize = 512;
    loop {
        let Ok(first) = queue.recv_async().await else {
            break;
        };
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut close = false;
        let mut next = Some(first);
        while let Some(outgoing) = next.take() {
            match outgoing {
                Outgoing::Frame(frame) => chunks.extend(frame),
                Outgoing::Close => {
                    close = true;
                    break;
                }
            }
            if chunks.len() < CHUNKS_PER_WRITE_MAX {
                next = queue.try_recv().ok();
            }
        }
        if !chunks.is_empty() && writer.write_vectored_all(chunks).await.0.is_err() {
            break;
        }
        if close {
            let _ = writer.shutdown().await;
            break;
        }
    }
}

/// Refuses a connection over the limit: one OVERLOADED error, then close.
pub async fn refuse(mut stream: TcpStream, message: String) {
    let frame = encode_response(0, &error(ErrorCode::Overloaded, message));
    let _ = stream.write_vectored_all(frame).await;
    let _ = stream.shutdown().await;
}
