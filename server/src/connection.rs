//! One client connection on its network core: read frames, authenticate with HELLO, run up to
//! `requests_in_flight_max` requests at once, write their responses in completion order
//! (tagged with their req_id).
//!
//! Backpressure: a request counts as in flight from the moment it is read until its response
//! is *written* to the socket, and the connection counts the response bytes it holds unwritten
//! (plus what its running requests hold and may still produce). At `requests_in_flight_max` or
//! at `unwritten_bytes_max` it stops reading; TCP pushes back on the client. A client that
//! never reads its responses therefore holds a bounded amount of the server's memory.
//!
//! Server-wide, every request reserves the largest answer it may produce (and its body)
//! against `unwritten_bytes_total_max` before it starts, and exchanges the reservation for its
//! answer's bytes once encoded: the bytes all connections hold never pass the budget. A request
//! that finds no room waits, and its connection stops reading. A connection that already holds
//! bytes may fill only a quarter of the budget, one that holds nothing all of it: clients that
//! read their answers keep being served while stuck ones wait.
//!
//! Framing errors (a frame over the limit, non-zero flags, a body that does not decode) are
//! answered with an ERROR and close the connection: only that connection. An unknown message
//! type is answered with UNKNOWN_MESSAGE and the connection stays open.
//!
//! Deadlines: HELLO within `hello_timeout` of the accept; a frame within `frame_timeout` of its
//! first byte; a connection with nothing arriving and nothing in flight, or whose peer has read
//! none of its pending responses, for `idle_timeout` is closed. At shutdown the connection
//! stops reading, answers and writes what is in flight, and is closed hard when the core's
//! drain deadline passes.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use compio::buf::BufResult;
use compio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use compio::net::TcpStream;
use ctxstore_protocol::{
    ErrorCode, FrameError, FrameHeader, FrameReader, MessageType, PROTOCOL_VERSION,
    PROTOCOL_VERSION_MIN, Request, Response, ServerLimits as WireLimits, TURN_WIRE_BYTES,
    decode_request_as, encode_response, read_flags,
};

use crate::config::ServerLimits;
use crate::dispatch::{Dispatcher, error};
use crate::local::{Either, LocalFlag, LocalNotify, race};

/// What the connections of one network core share.
#[derive(Debug)]
pub struct CoreContext {
    pub dispatcher: Dispatcher,
    /// This core's request counters and latencies (only this core writes them).
    pub metrics: Arc<crate::metrics::CoreMetrics>,
    /// BLAKE3 of the server's token: a presented token is hashed and the digests compared in
    /// constant time, so neither the token's bytes nor its length show in the timing.
    pub token_digest: Option<[u8; 32]>,
    pub limits: ServerLimits,
    /// Raised at shutdown: stop reading, answer and write what is in flight.
    pub shutdown: Rc<LocalFlag>,
    /// Raised when the drain deadline passes or a second signal came: close every connection
    /// now, written or not.
    pub hard_stop: Rc<LocalFlag>,
    pub server_name: String,
    /// This core's connections that have not completed HELLO, oldest first.
    pub pending_hellos: PendingHellos,
}

/// The digest tokens are compared by.
pub fn token_digest(token: &[u8]) -> [u8; 32] {
    *blake3::hash(token).as_bytes()
}

/// The connections of a core still waiting for HELLO, oldest first, so that a newcomer can
/// close the oldest when too many are waiting (a flood of silent connections then cycles
/// through its own slots instead of locking real clients out).
///
/// Each entry counts once in the server's `connections_unauthenticated` while it is here.
#[derive(Debug, Default)]
pub struct PendingHellos {
    next_id: Cell<u64>,
    queue: RefCell<VecDeque<(u64, Rc<LocalFlag>)>>,
}

impl PendingHellos {
    /// Enters a connection just accepted (already counted in `connections_unauthenticated`).
    pub fn register(&self) -> HelloTicket {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let evicted = LocalFlag::new();
        self.queue.borrow_mut().push_back((id, evicted.clone()));
        HelloTicket { id, evicted }
    }

    /// Removes the entry; `false` if it was gone already (evicted).
    fn remove(&self, id: u64) -> bool {
        let mut queue = self.queue.borrow_mut();
        match queue.iter().position(|(entry, _)| *entry == id) {
            Some(position) => {
                queue.remove(position);
                true
            }
            None => false,
        }
    }

    /// Tells the oldest connection still waiting for HELLO to close; `false` if there is none.
    /// The caller takes over its count in `connections_unauthenticated`.
    pub fn evict_oldest(&self) -> bool {
        let oldest = self.queue.borrow_mut().pop_front();
        match oldest {
            Some((_, evicted)) => {
                evicted.raise();
                true
            }
            None => false,
        }
    }
}

/// A connection's place among those waiting for HELLO.
#[derive(Debug)]
pub struct HelloTicket {
    id: u64,
    /// Raised when a newer connection needed the place.
    evicted: Rc<LocalFlag>,
}

/// A response frame on its way to the writer.
enum Outgoing {
    Frame {
        chunks: Vec<Bytes>,
        /// Whether it answers a request counted in flight (HELLO and framing errors are not).
        request: bool,
    },
    /// Flush what is queued, then close the socket.
    Close,
}

/// A connection that holds unwritten or reserved bytes may fill the server's budget up to
/// this fraction of it (1/4); one that holds nothing, up to all of it.
const HOLDERS_SHARE_DIVISOR: u64 = 4;

/// What a connection holds, shared by its reader, its request tasks and its writer.
struct Accounting {
    core: Rc<CoreContext>,
    /// Requests read and not yet answered *and written*.
    in_flight: Cell<u32>,
    /// Response bytes queued or being written.
    unwritten_bytes: Cell<u64>,
    /// What running requests (answered later) hold (their bodies) and may still produce,
    /// reserved when they start.
    reserved_bytes: Cell<u64>,
    /// When the writer last got bytes into the socket, or when it last had nothing to write.
    write_progress: Cell<Instant>,
    /// Set when the connection is gone: late answers are dropped, not counted.
    closed: Cell<bool>,
    /// Set when the writer stopped (the socket failed, or it closed it): nothing more will
    /// be written.
    writer_done: Cell<bool>,
    /// Something above changed: a response was queued or written.
    changed: LocalNotify,
}

impl Accounting {
    fn new(core: Rc<CoreContext>) -> Self {
        Accounting {
            core,
            in_flight: Cell::new(0),
            unwritten_bytes: Cell::new(0),
            reserved_bytes: Cell::new(0),
            write_progress: Cell::new(Instant::now()),
            closed: Cell::new(false),
            writer_done: Cell::new(false),
            changed: LocalNotify::default(),
        }
    }

    fn global(&self) -> &std::sync::atomic::AtomicU64 {
        &self.core.dispatcher.counters.unwritten_bytes
    }

    fn held_bytes(&self) -> u64 {
        self.unwritten_bytes.get() + self.reserved_bytes.get()
    }

    /// Whether the connection may take one more frame now: below its own limits (requests in
    /// flight, bytes held). The server's budget is checked per request, by `try_reserve`.
    fn may_start(&self) -> bool {
        let limits = &self.core.limits;
        self.in_flight.get() < limits.requests_in_flight_max
            && self.held_bytes() < limits.unwritten_bytes_max
    }

    /// How far the server's budget may be filled by a reservation of this connection: all of
    /// it when the connection holds nothing (a client that reads its answers always gets its
    /// next one, once there is room), a quarter of it otherwise (connections that let answers
    /// pile up, stuck or pipelining, leave the rest to those that read).
    fn budget_ceiling(&self) -> u64 {
        let total = self.core.limits.unwritten_bytes_total_max;
        if self.held_bytes() == 0 {
            total
        } else {
            total / HOLDERS_SHARE_DIVISOR
        }
    }

    /// What a request whose largest answer (with its body) is `bytes` reserves of the server's
    /// budget: never more than the whole budget, so that it can start once the server holds
    /// nothing else.
    fn reservation(&self, bytes: u64) -> u64 {
        bytes.min(self.core.limits.unwritten_bytes_total_max)
    }

    /// Whether a reservation of `bytes` would fit now (a hint: other cores may take the room
    /// first; `try_reserve` decides).
    fn could_reserve(&self, bytes: u64) -> bool {
        self.global().load(Ordering::Relaxed) + bytes <= self.budget_ceiling()
    }

    /// Reserves `bytes` (from `reservation`) of the server's budget for a request about to
    /// start, or `false`: the request waits and the connection stops reading. A hard bound:
    /// what is reserved and unwritten never passes `unwritten_bytes_total_max` (a request never
    /// produces more than it reserved, except one whose largest answer is over the whole
    /// budget, which reserves the whole budget and thus runs alone).
    fn try_reserve(&self, bytes: u64) -> bool {
        let ceiling = self.budget_ceiling();
        let global = self.global();
        let mut current = global.load(Ordering::Relaxed);
        loop {
            if current.saturating_add(bytes) > ceiling {
                return false;
            }
            match global.compare_exchange_weak(
                current,
                current + bytes,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        self.reserved_bytes.set(self.reserved_bytes.get() + bytes);
        true
    }

    /// Turns a reservation into the `bytes` of its encoded answer: the difference goes back to
    /// the server's budget now, the rest as the writer gets it into the socket.
    fn settle(&self, reserved: u64, bytes: u64) {
        assert!(
            self.reserved_bytes.get() >= reserved,
            "connection accounting went negative"
        );
        self.reserved_bytes
            .set(self.reserved_bytes.get() - reserved);
        self.unwritten_bytes.set(self.unwritten_bytes.get() + bytes);
        if reserved >= bytes {
            self.global().fetch_sub(reserved - bytes, Ordering::Relaxed);
        } else {
            self.global().fetch_add(bytes - reserved, Ordering::Relaxed);
        }
    }

    fn sub(&self, cell: &Cell<u64>, bytes: u64) {
        assert!(cell.get() >= bytes, "connection accounting went negative");
        cell.set(cell.get() - bytes);
        self.global().fetch_sub(bytes, Ordering::Relaxed);
    }

    /// The writer got `bytes` into the socket.
    fn wrote(&self, bytes: u64) {
        if !self.closed.get() {
            self.sub(&self.unwritten_bytes, bytes);
        }
        self.write_progress.set(Instant::now());
        self.changed.notify_all();
    }

    /// The writer finished `requests` responses to counted requests.
    fn answered(&self, requests: u32) {
        if requests > 0 && !self.closed.get() {
            self.in_flight.set(self.in_flight.get() - requests);
            self.changed.notify_all();
        }
    }

    /// Whether responses wait to be written and the peer has read none of them for
    /// `idle_timeout`.
    fn write_stalled_until(&self) -> Option<Instant> {
        (self.unwritten_bytes.get() > 0)
            .then(|| self.write_progress.get() + self.core.limits.idle_timeout)
    }

    /// Whether, at `now`, responses have waited `idle_timeout` for the peer to read any.
    fn write_stalled(&self, now: Instant) -> bool {
        self.write_stalled_until().is_some_and(|at| at <= now)
    }

    /// The connection ends: give back what it still holds to the server's budget.
    fn close(&self) {
        if !self.closed.replace(true) {
            self.global()
                .fetch_sub(self.held_bytes(), Ordering::Relaxed);
            self.unwritten_bytes.set(0);
            self.reserved_bytes.set(0);
        }
    }
}

struct ConnectionState {
    outgoing: flume::Sender<Outgoing>,
    accounting: Rc<Accounting>,
}

impl ConnectionState {
    /// Queues a response for the writer. `request`: it answers a request counted in flight.
    /// `reserved`: what the request reserved of the budget (0 for HELLO and the ERROR that
    /// closes a connection), exchanged for the response's bytes.
    fn send(&self, req_id: u64, response: &Response, request: bool, reserved: u64) {
        let accounting = &self.accounting;
        if matches!(response, Response::Error { .. }) {
            accounting
                .core
                .dispatcher
                .counters
                .errors
                .fetch_add(1, Ordering::Relaxed);
        }
        if accounting.closed.get() {
            // The connection is gone (and gave back what it held): nobody waits for this
            // answer.
            return;
        }
        let chunks = encode_response(req_id, response);
        let bytes: u64 = chunks.iter().map(|chunk| chunk.len() as u64).sum();
        if self
            .outgoing
            .send(Outgoing::Frame { chunks, request })
            .is_ok()
        {
            // The stall clock starts when there is something to write.
            if accounting.unwritten_bytes.get() == 0 {
                accounting.write_progress.set(Instant::now());
            }
            accounting.settle(reserved, bytes);
        } else {
            accounting.sub(&accounting.reserved_bytes, reserved);
            if request {
                // The writer is gone (the peer closed): the request is over all the same.
                accounting.in_flight.set(accounting.in_flight.get() - 1);
            }
        }
        accounting.changed.notify_all();
    }
}

/// Serves one connection until the peer leaves, a framing error, a timeout or shutdown.
pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    core: Rc<CoreContext>,
    ticket: HelloTicket,
) {
    let _ = stream.set_nodelay(true);
    // Kept to close the socket hard at the drain deadline (both halves share one socket).
    let socket = stream.clone();
    let (mut reader, writer) = stream.into_split();
    let (outgoing, queue) = flume::unbounded();
    let accounting = Rc::new(Accounting::new(core.clone()));
    let mut writer_task = compio::runtime::spawn(write_frames(writer, queue, accounting.clone()));
    let state = Rc::new(ConnectionState {
        outgoing,
        accounting: accounting.clone(),
    });
    let mut hello = HelloState::new(ticket, &core.limits);
    let ending = read_requests(&mut reader, &core, &state, &mut hello).await;
    if hello.deadline.is_some() {
        hello.leave_pending(&core);
    }
    tracing::debug!(%peer, reason = ending, "closing connection");

    // What was read is answered and written, unless the peer stops reading for idle_timeout
    // or the server's drain deadline passes (then the connection closes hard).
    let drained = drain_in_flight(&accounting, &core).await;
    let _ = state.outgoing.send(Outgoing::Close);
    drop(state);
    let written = drained && finish_writing(&mut writer_task, &accounting, &core).await;
    if !written {
        close_hard(peer, &socket, &accounting, writer_task);
    }
    accounting.close();
}

/// Waits until every request read is answered and its response written: `false` when the
/// writer stopped, the peer read none of its responses for `idle_timeout`, or the core's
/// drain deadline passed first.
async fn drain_in_flight(accounting: &Accounting, core: &CoreContext) -> bool {
    loop {
        if accounting.in_flight.get() == 0 {
            return true;
        }
        if accounting.writer_done.get() {
            return false;
        }
        match race(
            accounting.changed.notified(),
            race(
                sleep_until(accounting.write_stalled_until()),
                core.hard_stop.wait(),
            ),
        )
        .await
        {
            Either::Left(()) => {}
            Either::Right(Either::Left(())) => {
                if accounting.write_stalled(Instant::now()) {
                    return false;
                }
            }
            Either::Right(Either::Right(())) => return false,
        }
    }
}

/// Waits for the writer to write what is queued and close the socket (it was sent `Close`):
/// `false` when the peer read none of it for `idle_timeout` or the core's drain deadline
/// passed first.
async fn finish_writing(
    writer_task: &mut compio::runtime::JoinHandle<()>,
    accounting: &Accounting,
    core: &CoreContext,
) -> bool {
    loop {
        match race(
            &mut *writer_task,
            race(
                accounting.changed.notified(),
                race(
                    sleep_until(accounting.write_stalled_until()),
                    core.hard_stop.wait(),
                ),
            ),
        )
        .await
        {
            Either::Left(_) => return true,
            Either::Right(Either::Left(())) => {}
            Either::Right(Either::Right(Either::Left(()))) => {
                if accounting.write_stalled(Instant::now()) {
                    return false;
                }
            }
            Either::Right(Either::Right(Either::Right(()))) => return false,
        }
    }
}

/// Closes a connection whose responses were not all written: the kernel's copy is dropped
/// and the writer task cancelled.
fn close_hard(
    peer: SocketAddr,
    socket: &TcpStream,
    accounting: &Accounting,
    writer_task: compio::runtime::JoinHandle<()>,
) {
    if accounting.writer_done.get() {
        tracing::debug!(%peer, "the peer went away before its responses were written");
    } else {
        tracing::warn!(
            %peer,
            in_flight = accounting.in_flight.get(),
            unwritten_bytes = accounting.unwritten_bytes.get(),
            "closing a connection with responses unwritten (drain deadline, or its peer \
             reads nothing)"
        );
    }
    // Discard what the kernel holds for this peer (RST, no FIN_WAIT with a full buffer) and
    // wake any operation still pending on the socket; dropping the writer task cancels it.
    let socket = socket2::SockRef::from(socket);
    let _ = socket.set_linger(Some(Duration::ZERO));
    let _ = socket.shutdown(std::net::Shutdown::Both);
    drop(writer_task);
}

/// Sends the ACK for what the socket received, now (`TCP_QUICKACK`). Not sticky: the kernel
/// goes back to delaying ACKs, so the reader asks again before each read of a partial frame.
/// Failure costs only latency.
fn ack_now(stream: &TcpStream) {
    #[cfg(target_os = "linux")]
    {
        let _ = socket2::SockRef::from(stream).set_tcp_quickack(true);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = stream;
}

/// Sleeps until `deadline`; without one, forever.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => compio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Takes one connection off the server's count of connections without HELLO.
fn uncount_unauthenticated(core: &CoreContext) {
    core.dispatcher
        .counters
        .connections_unauthenticated
        .fetch_sub(1, Ordering::AcqRel);
}

/// A connection's progress towards HELLO.
struct HelloState {
    /// Its entry in the core's `pending_hellos`.
    id: u64,
    /// `None` once HELLO succeeded.
    deadline: Option<Instant>,
    /// Raised when a newer connection needed its place.
    evicted: Rc<LocalFlag>,
    /// The protocol version HELLO negotiated (HELLO itself has the version-1 layout).
    version: u16,
}

impl HelloState {
    fn new(ticket: HelloTicket, limits: &ServerLimits) -> Self {
        HelloState {
            id: ticket.id,
            deadline: Some(Instant::now() + limits.hello_timeout),
            evicted: ticket.evicted,
            version: PROTOCOL_VERSION_MIN,
        }
    }

    /// Takes the connection off the core's list of those waiting for HELLO, and off the
    /// server's count, unless a newer connection evicted it (and took over its count).
    fn leave_pending(&self, core: &CoreContext) {
        if core.pending_hellos.remove(self.id) {
            uncount_unauthenticated(core);
        }
    }
}

/// Why the read loop ended.
type Ending = &'static str;

/// Reads frames and starts their requests until the connection must close; answers why.
async fn read_requests(
    reader: &mut TcpStream,
    core: &Rc<CoreContext>,
    state: &Rc<ConnectionState>,
    hello: &mut HelloState,
) -> Ending {
    let mut reading = Reading {
        core,
        state,
        hello,
        frames: FrameReader::new(core.limits.frame_bytes_max),
        frame_started: None,
        waiting: None,
    };
    loop {
        if let Err(ending) = reading.next_turn(reader).await {
            return ending;
        }
    }
}

/// The read loop of one connection.
struct Reading<'a> {
    core: &'a Rc<CoreContext>,
    state: &'a Rc<ConnectionState>,
    hello: &'a mut HelloState,
    frames: FrameReader,
    /// When the first byte of the frame in progress arrived.
    frame_started: Option<Instant>,
    /// A request read but not started: it waits for room in the server's budget (a request
    /// read at shutdown is not started, like those not read).
    waiting: Option<Waiting>,
}

impl Reading<'_> {
    /// One turn of the loop: start the requests the buffer holds, then wait for room to
    /// start more, or read more bytes. `Err`: the connection closes.
    async fn next_turn(&mut self, reader: &mut TcpStream) -> Result<(), Ending> {
        let blocked = self.start_buffered()?;
        if self.frames.pending_bytes() > 0 && self.frame_started.is_none() {
            self.frame_started = Some(Instant::now());
        }

        // Backpressure: no reading while the connection holds its maximum in flight or in
        // unwritten bytes, or while a request it read waits for room in the server's budget.
        if blocked {
            // Frames may be waiting in the buffer: the next turn takes them before reading
            // more.
            return self.wait_for_room().await;
        }
        if self.core.shutdown.is_raised() {
            return Err("shutdown");
        }
        self.read_more(reader).await
    }

    /// Every complete frame in the buffer, while the connection may start requests. `Ok(true)`:
    /// it may not start more now (blocked); `Ok(false)`: no complete frame is left.
    fn start_buffered(&mut self) -> Result<bool, Ending> {
        let accounting = &self.state.accounting;
        loop {
            if !accounting.may_start() {
                return Ok(true);
            }
            // A request read earlier that waits for room in the server's budget goes first.
            if let Some(next) = self.waiting.take() {
                match start(next, self.hello.version, self.core, self.state) {
                    None => continue,
                    Some(waiting_still) => {
                        self.waiting = Some(waiting_still);
                        return Ok(true);
                    }
                }
            }
            let frame = match self.frames.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => return Ok(false),
                Err(frame_error) => return Err(self.framing_error(frame_error)),
            };
            self.frame_started = None;
            match handle_frame(frame, self.hello, self.core, self.state) {
                Handled::Done => {}
                Handled::Close(ending) => return Err(ending),
                Handled::Wait(request) => {
                    self.waiting = Some(request);
                    return Ok(true);
                }
            }
        }
    }

    /// A frame over the limit or with flags set: answered with an ERROR, then the connection
    /// closes (the stream cannot be trusted past it).
    fn framing_error(&self, frame_error: FrameError) -> Ending {
        let code = match frame_error {
            FrameError::TooLarge { .. } => ErrorCode::TooLarge,
            FrameError::BadFlags { .. } => ErrorCode::BadFrame,
        };
        let response = error(code, frame_error.to_string());
        self.state.send(frame_error.req_id(), &response, false, 0);
        "framing error"
    }

    /// Whether the connection may start a request again: below its own limits, and the
    /// request that waits (if any) fits the server's budget now.
    fn ready_to_start(&self) -> bool {
        let accounting = &self.state.accounting;
        accounting.may_start()
            && self
                .waiting
                .as_ref()
                .is_none_or(|waiting| accounting.could_reserve(waiting.reserved))
    }

    /// Waits, not reading, until `ready_to_start`; `Err` at shutdown or when the peer has read
    /// none of its responses for `idle_timeout`.
    async fn wait_for_room(&self) -> Result<(), Ending> {
        let accounting = &self.state.accounting;
        while !self.ready_to_start() {
            // Other connections' writers (on any core) free the server-wide budget without
            // telling this one: then look again now and then.
            let recheck = (accounting.may_start() && self.waiting.is_some())
                .then(|| Instant::now() + Duration::from_millis(20));
            let wake = match (accounting.write_stalled_until(), recheck) {
                (Some(stalled), Some(recheck)) => Some(stalled.min(recheck)),
                (stalled, recheck) => stalled.or(recheck),
            };
            match race(
                accounting.changed.notified(),
                race(sleep_until(wake), self.core.shutdown.wait()),
            )
            .await
            {
                Either::Right(Either::Right(())) => return Err("shutdown"),
                Either::Left(()) | Either::Right(Either::Left(())) => {
                    if accounting.write_stalled(Instant::now()) {
                        return Err("peer reads no responses");
                    }
                }
            }
        }
        Ok(())
    }

    /// Reads more bytes into the frame buffer. A frame in progress must finish within
    /// frame_timeout of its first byte; HELLO within hello_timeout of the accept; an idle
    /// connection (nothing pending, nothing in flight) is closed after idle_timeout. The read
    /// stays the same across timer checks: cancelling a read could lose bytes.
    async fn read_more(&mut self, reader: &mut TcpStream) -> Result<(), Ending> {
        let limits = self.core.limits;
        // Part of a request is in and the rest is on its way (a large append): acknowledge
        // what arrived now, or the kernel delays that ACK (up to 40 ms: nothing goes back to
        // the client meanwhile) and a client whose congestion window the request outgrew
        // waits for it (docs/decisions/0016-quick-acks.md).
        if self.frames.pending_bytes() > 0 {
            ack_now(reader);
        }
        let wanted = self.frames.wanted_capacity();
        let mut buffer = self.frames.take_buffer();
        buffer.reserve(wanted);
        let mut read = Box::pin(reader.append(buffer));
        let mut deadline = match self.frame_started {
            Some(started) => started + limits.frame_timeout,
            None => Instant::now() + limits.idle_timeout,
        };
        let BufResult(result, buffer) = loop {
            // The stall deadline only moves later (with write progress): recomputed each turn.
            let read_deadline = [
                self.hello.deadline,
                self.state.accounting.write_stalled_until(),
            ]
            .into_iter()
            .flatten()
            .fold(deadline, Instant::min);
            let timer = compio::time::sleep_until(read_deadline);
            let stop = race(self.core.shutdown.wait(), self.hello.evicted.wait());
            match race(&mut read, race(timer, stop)).await {
                Either::Left(done) => break done,
                Either::Right(Either::Right(Either::Left(()))) => return Err("shutdown"),
                Either::Right(Either::Right(Either::Right(()))) => return Err(self.evicted()),
                Either::Right(Either::Left(())) => self.check_deadlines(&mut deadline)?,
            }
        };
        self.frames.restore(buffer);
        match result {
            Ok(0) if self.frames.pending_bytes() > 0 => Err("truncated frame"),
            Ok(0) => Err("peer closed"),
            Ok(_) => Ok(()),
            Err(_) => Err("read error"),
        }
    }

    /// The read's timer fired: `Err` when a deadline passed (HELLO, the peer reading none of
    /// its responses, a frame in progress, an idle connection); else the read goes on until
    /// `deadline`, moved later when the connection is not idle.
    fn check_deadlines(&self, deadline: &mut Instant) -> Result<(), Ending> {
        let limits = &self.core.limits;
        let now = Instant::now();
        if self.hello.deadline.is_some_and(|at| at <= now) {
            let message = format!(
                "HELLO not completed within the HELLO timeout ({:?})",
                limits.hello_timeout
            );
            self.state
                .send(0, &error(ErrorCode::Unauthorized, message), false, 0);
            return Err("no HELLO in time");
        }
        if self.state.accounting.write_stalled(now) {
            return Err("peer reads no responses");
        }
        if *deadline > now {
            return Ok(());
        }
        if self.frame_started.is_some() {
            let message = "frame not completed within the frame timeout";
            self.state
                .send(0, &error(ErrorCode::BadFrame, message), false, 0);
            return Err("slow frame");
        }
        if self.state.accounting.in_flight.get() == 0 {
            return Err("idle");
        }
        // Not idle: it waits for answers, or reads them.
        *deadline = now + limits.idle_timeout;
        Ok(())
    }

    /// A newer connection needed this one's place among those waiting for HELLO.
    fn evicted(&self) -> Ending {
        let message = "closed to make room: too many connections are waiting for HELLO";
        self.state
            .send(0, &error(ErrorCode::Overloaded, message), false, 0);
        "evicted before HELLO"
    }
}

/// What became of a frame.
enum Handled {
    /// Answered, or started.
    Done,
    /// Close the connection.
    Close(Ending),
    /// A request that must wait for room in the server's budget.
    Wait(Waiting),
}

/// A request read and decoded, not started: the server's budget has no room for what it
/// reserves.
struct Waiting {
    header: FrameHeader,
    work: Work,
    /// What it reserves (from `Accounting::reservation`).
    reserved: u64,
}

enum Work {
    Request(Request),
    /// An answer known at once (UNKNOWN_MESSAGE): it reserves its bytes like a request.
    Answer(Response),
}

/// Handles one frame.
fn handle_frame(
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
    let accounting = &state.accounting;
    let request = match decode_request_as(hello.version, &header, body) {
        Ok(request) => request,
        Err(decode_error) => {
            let code = decode_error.code();
            let response = error(code, decode_error.to_string());
            if code == ErrorCode::UnknownMessage && authenticated {
                // An unknown message still had a well-formed frame: the stream is intact, and
                // the connection may send many: each answer counts in the budget.
                let waiting = Waiting {
                    header,
                    work: Work::Answer(response),
                    reserved: accounting.reservation(SMALL_RESPONSE_BYTES),
                };
                return start_or_wait(waiting, hello.version, core, state);
            }
            answer_at_once(&header, &response, core, state);
            return if code == ErrorCode::UnknownMessage {
                Handled::Done
            } else {
                Handled::Close("malformed body")
            };
        }
    };
    if let Request::Hello {
        min_version,
        max_version,
        token,
        client_name,
    } = &request
    {
        if authenticated {
            let response = error(ErrorCode::BadFrame, "HELLO twice");
            answer_at_once(&header, &response, core, state);
            return Handled::Close("second HELLO");
        }
        return match self::hello(core, *min_version, *max_version, token, client_name) {
            Ok((response, version)) => {
                hello.deadline = None;
                hello.version = version;
                hello.leave_pending(core);
                answer_at_once(&header, &response, core, state);
                Handled::Done
            }
            Err((response, ending)) => {
                answer_at_once(&header, &response, core, state);
                Handled::Close(ending)
            }
        };
    }
    let reserved = accounting.reservation(response_bytes_reserved(&request, core) + body_bytes);
    let waiting = Waiting {
        header,
        work: Work::Request(request),
        reserved,
    };
    start_or_wait(waiting, hello.version, core, state)
}

/// Answers a frame that starts no request (HELLO, and the ERRORs of frames refused before
/// they could be one): it is not in flight and reserves nothing of the budget.
fn answer_at_once(
    header: &FrameHeader,
    response: &Response,
    core: &CoreContext,
    state: &ConnectionState,
) {
    core.metrics.answered(header.msg_type, response, None);
    state.send(header.req_id, response, false, 0);
}

/// Starts a request (`start`), or hands it back to wait for room in the server's budget.
fn start_or_wait(
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
fn start(
    waiting: Waiting,
    version: u16,
    core: &Rc<CoreContext>,
    state: &Rc<ConnectionState>,
) -> Option<Waiting> {
    let accounting = &state.accounting;
    if !accounting.try_reserve(waiting.reserved) {
        return Some(waiting);
    }
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
    let mut task: Pin<Box<dyn Future<Output = Response>>> = {
        let core = core.clone();
        Box::pin(async move { core.dispatcher.handle(request, version).await })
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
            let (state, metrics) = (state.clone(), core.metrics.clone());
            compio::runtime::spawn(async move {
                let response = task.await;
                metrics.answered(header.msg_type, &response, started);
                state.send(header.req_id, &response, true, reserved);
            })
            .detach();
        }
    }
    None
}

/// The largest CONTEXT_INFO: a name and every tag at their limits.
const CONTEXT_INFO_BYTES_MAX: u64 = {
    use ctxstore_vocab::limits;
    let tag = 4 + limits::TAG_KEY_BYTES_MAX + limits::TAG_VALUE_BYTES_MAX;
    (ctxstore_protocol::CONTEXT_HEAD_BYTES
        + 8
        + 8
        + 2
        + limits::CONTEXT_NAME_BYTES_MAX
        + 2
        + limits::TAGS_PER_CONTEXT_MAX * tag) as u64
};

/// Any request may be answered by an ERROR: header, fields and the longest message.
const SMALL_RESPONSE_BYTES: u64 = 16 + 16 + ctxstore_protocol::MESSAGE_BYTES_MAX as u64;

/// The largest response `request` may produce: what a request reserves, until it is answered,
/// of its connection's `unwritten_bytes_max` and of the server's `unwritten_bytes_total_max`.
fn response_bytes_reserved(request: &Request, core: &CoreContext) -> u64 {
    // One turn of a TURNS response, without its payload bytes.
    const TURN_ENTRY_BYTES: u64 = TURN_WIRE_BYTES as u64 + 16;
    let engine_limits = core.dispatcher.engine.config().limits;
    let page = |limit: u32, flags: u32| {
        let payloads = if flags & read_flags::WITH_PAYLOADS != 0 {
            core.limits.response_bytes_max
        } else {
            0
        };
        u64::from(limit) * TURN_ENTRY_BYTES + payloads + SMALL_RESPONSE_BYTES
    };
    match request {
        Request::GetBlob { .. } => u64::from(engine_limits.blob_bytes_max) + SMALL_RESPONSE_BYTES,
        Request::GetLast {
            limit, read_flags, ..
        }
        | Request::GetBefore {
            limit, read_flags, ..
        }
        | Request::GetRangeByDepth {
            limit, read_flags, ..
        }
        | Request::GetChain {
            limit, read_flags, ..
        } => page(*limit, *read_flags),
        Request::HasBlobs { hashes } => hashes.len() as u64 + SMALL_RESPONSE_BYTES,
        Request::CtxOpen { .. }
        | Request::CtxTag { .. }
        | Request::CtxName { .. }
        | Request::CtxDelete { .. }
        | Request::CtxPrune { .. }
        | Request::CtxTtl { .. } => CONTEXT_INFO_BYTES_MAX + SMALL_RESPONSE_BYTES,
        // An acknowledgement, a head, a turn without its payload, fixed statistics.
        Request::Hello { .. }
        | Request::Ping { .. }
        | Request::CtxCreate { .. }
        | Request::CtxFork { .. }
        | Request::GetHead { .. }
        | Request::AppendTurn { .. }
        | Request::AppendTurnByHash { .. }
        | Request::Stats
        | Request::KvPut { .. }
        | Request::KvDelete { .. }
        | Request::Backup { .. }
        | Request::Gc
        | Request::PatchTurn { .. }
        | Request::RedactTurn { .. }
        | Request::PurgeBlob { .. }
        | Request::PutChunked { .. } => TURN_ENTRY_BYTES + SMALL_RESPONSE_BYTES,
        Request::AppendTurns { turns, .. } => {
            turns.len() as u64 * (TURN_ENTRY_BYTES + 16) + SMALL_RESPONSE_BYTES
        }
        // Everything else (a turn or a value with its payload, pages of turns, of contexts,
        // of keys, whatever is added later): the largest answer the limits allow. Reads answer
        // at once and give back the difference before the next frame is taken; this only
        // makes them wait when the budget is nearly spent.
        _ => {
            u64::from(engine_limits.blob_bytes_max).max(core.limits.response_bytes_max)
                + u64::from(engine_limits.read_turns_max) * TURN_ENTRY_BYTES
                + CONTEXT_INFO_BYTES_MAX
                + SMALL_RESPONSE_BYTES
        }
    }
}

/// Version negotiation (the highest version both sides speak) and the token check (constant
/// time). Answers the HELLO response and the negotiated version.
fn hello(
    core: &CoreContext,
    min_version: u16,
    max_version: u16,
    token: &[u8],
    client_name: &str,
) -> Result<(Response, u16), (Response, Ending)> {
    let version = max_version.min(PROTOCOL_VERSION);
    if version < min_version || version < PROTOCOL_VERSION_MIN {
        let message = format!(
            "this server speaks protocol versions {PROTOCOL_VERSION_MIN}..={PROTOCOL_VERSION}, \
             not {min_version}..={max_version}"
        );
        let response = Response::Error {
            code: ErrorCode::UnsupportedVersion,
            detail: u64::from(PROTOCOL_VERSION),
            message,
        };
        return Err((response, "unsupported version"));
    }
    if let Some(expected) = &core.token_digest {
        // Whether a token was given at all is no secret (its bytes and length stay so).
        if token.is_empty() {
            let message = "this server requires a token and none was given (the clients' \
                           --token or CTXSTORE_TOKEN)";
            return Err((error(ErrorCode::Unauthorized, message), "no token"));
        }
        if !constant_time_eq::constant_time_eq_32(&token_digest(token), expected) {
            return Err((error(ErrorCode::Unauthorized, "wrong token"), "wrong token"));
        }
    }
    tracing::debug!(client = client_name, version, "client said hello");
    let limits = &core.limits;
    let engine_limits = core.dispatcher.engine.config().limits;
    let response = Response::Hello {
        version,
        limits: WireLimits {
            frame_bytes_max: limits.frame_bytes_max,
            requests_in_flight_max: limits.requests_in_flight_max,
            blob_bytes_max: engine_limits.blob_bytes_max,
            read_turns_max: engine_limits.read_turns_max,
            has_blobs_max: limits.has_blobs_max,
        },
        server_name: core.server_name.clone(),
    };
    Ok((response, version))
}

/// Writes queued frames, as many as are ready in one vectored write, counting every byte that
/// reaches the socket and every response finished.
async fn write_frames(
    writer: TcpStream,
    queue: flume::Receiver<Outgoing>,
    accounting: Rc<Accounting>,
) {
    write_queue(writer, queue, &accounting).await;
    accounting.writer_done.set(true);
    accounting.changed.notify_all();
}

async fn write_queue(
    mut writer: TcpStream,
    queue: flume::Receiver<Outgoing>,
    accounting: &Accounting,
) {
    // Below IOV_MAX (1024) buffers per writev.
    const CHUNKS_PER_WRITE_MAX: usize = 512;
    loop {
        let Ok(first) = queue.recv_async().await else {
            break;
        };
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut requests = 0u32;
        let mut close = false;
        let mut next = Some(first);
        while let Some(outgoing) = next.take() {
            match outgoing {
                Outgoing::Frame {
                    chunks: frame,
                    request,
                } => {
                    chunks.extend(frame);
                    requests += u32::from(request);
                }
                Outgoing::Close => {
                    close = true;
                    break;
                }
            }
            if chunks.len() < CHUNKS_PER_WRITE_MAX {
                next = queue.try_recv().ok();
            }
        }
        // Partial writes count as progress: a peer that reads slowly is not a stalled one.
        accounting.write_progress.set(Instant::now());
        while !chunks.is_empty() {
            let BufResult(result, returned) = writer.write_vectored(chunks).await;
            chunks = returned;
            let written = match result {
                Ok(0) | Err(_) => return,
                Ok(written) => written,
            };
            accounting.wrote(written as u64);
            advance(&mut chunks, written);
        }
        accounting.answered(requests);
        if close {
            let _ = writer.shutdown().await;
            break;
        }
    }
}

/// Drops the first `written` bytes of `chunks`.
fn advance(chunks: &mut Vec<Bytes>, mut written: usize) {
    let mut done = 0;
    for chunk in chunks.iter_mut() {
        if written < chunk.len() {
            *chunk = chunk.slice(written..);
            break;
        }
        written -= chunk.len();
        done += 1;
    }
    chunks.drain(..done);
}

/// Refuses a connection over the limit: one OVERLOADED error, then close.
pub async fn refuse(mut stream: TcpStream, message: String) {
    let frame = encode_response(0, &error(ErrorCode::Overloaded, message));
    let _ = stream.write_vectored_all(frame).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ack_now` takes the socket out of delayed-ACK ("pingpong") mode: TCP_QUICKACK reads 0
    /// after the socket is put there, 1 after `ack_now`.
    #[cfg(target_os = "linux")]
    #[test]
    fn ack_now_turns_delayed_acks_off_for_the_moment() -> std::io::Result<()> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let client = std::net::TcpStream::connect(listener.local_addr()?)?;
        let (accepted, _) = listener.accept()?;
        compio::runtime::Runtime::new()?.block_on(async move {
            let stream = TcpStream::from_std(accepted)?;
            let socket = socket2::SockRef::from(&stream);
            socket.set_tcp_quickack(false)?;
            assert!(!socket.tcp_quickack()?, "the socket delays its ACKs");
            ack_now(&stream);
            assert!(socket.tcp_quickack()?, "ack_now sends ACKs at once");
            drop(client);
            Ok(())
        })
    }

    #[test]
    fn advance_drops_written_bytes_across_chunks() {
        let mut chunks = vec![
            Bytes::from_static(b"abc"),
            Bytes::from_static(b"de"),
            Bytes::from_static(b"fgh"),
        ];
        advance(&mut chunks, 4);
        assert_eq!(
            chunks,
            vec![Bytes::from_static(b"e"), Bytes::from_static(b"fgh")]
        );
        advance(&mut chunks, 1);
        assert_eq!(chunks, vec![Bytes::from_static(b"fgh")]);
        advance(&mut chunks, 3);
        assert!(chunks.is_empty());
    }

    #[test]
    fn pending_hellos_evict_the_oldest_once() {
        let pending = PendingHellos::default();
        let first = pending.register();
        let second = pending.register();
        assert!(pending.evict_oldest());
        assert!(first.evicted.is_raised() && !second.evicted.is_raised());
        assert!(!pending.remove(first.id), "evicted entries are gone");
        assert!(pending.remove(second.id));
        assert!(!pending.evict_oldest());
    }
}
