//! One client connection on its network core: read frames, authenticate with HELLO, run up to
//! `requests_in_flight_max` requests at once, write their responses in completion order
//! (tagged with their req_id). `serve` is the connection's life: the read loop (`reader.rs`,
//! frames → `requests.rs`, decoded, gated by `hello.rs`, reserved against `budget.rs`, run;
//! a STREAM_FOLLOW runs in `follows.rs`, answered by a series of frames),
//! the writer task (`writer.rs`), then the drain. At shutdown the connection stops reading,
//! answers and writes what is in flight, and is closed hard when the core's drain deadline
//! passes. Whenever reading ends (shutdown, or the peer closed its side: a closed peer is not
//! a slow one), follows and long polls are answered with what is there now instead of
//! waiting for news, so that they hold neither the connection nor the drain.

mod budget;
mod follows;
mod hello;
mod reader;
mod requests;
mod writer;

pub use hello::{HelloTicket, PendingHellos, token_digest};
pub use writer::refuse;

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use compio::net::TcpStream;

use budget::Accounting;
use hello::HelloState;
use reader::read_requests;
use writer::{ConnectionState, Outgoing, write_frames};

use crate::config::ServerLimits;
use crate::dispatch::Dispatcher;
use crate::local::{Either, LocalFlag, race};

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

/// The next connection's id (`ConnectionState::connection_id`), shared by every core.
static NEXT_CONNECTION_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

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
    let connection_id = NEXT_CONNECTION_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let state = Rc::new(ConnectionState {
        outgoing,
        accounting: accounting.clone(),
        connection_id,
        reading_ended: LocalFlag::new(),
        session: std::cell::OnceCell::new(),
    });
    let mut hello = HelloState::new(ticket, &core.limits);
    let ending = read_requests(&mut reader, &core, &state, &mut hello).await;
    state.reading_ended.raise();
    if hello.deadline.is_some() {
        hello.leave_pending(&core);
    }
    tracing::debug!(%peer, reason = ending, "closing connection");

    // What was read is answered and written, unless the peer stops reading for idle_timeout
    // or the server's drain deadline passes (then the connection closes hard).
    let drained = drain_in_flight(&accounting, &core).await;
    // Its streams stay open, unowned: the writer may reconnect and continue them. (Failing
    // only when the engine is shutting down, when ownership ends anyway.)
    let _ = core.dispatcher.store.release_streams(connection_id).await;
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

/// Sleeps until `deadline`; without one, forever.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => compio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
