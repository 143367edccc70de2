//! The read loop of one connection: bytes into the frame buffer, frames out of it, each handed
//! to `requests.rs`, with the connection's deadlines. HELLO within `hello_timeout` of the
//! accept; a frame within `frame_timeout` of its first byte; a connection with nothing arriving
//! and nothing in flight, or whose peer has read none of its pending responses, for
//! `idle_timeout` is closed. Framing errors (a frame over the limit, unknown flag bits) are
//! answered with an ERROR and close the connection: only that connection. While a frame is
//! half read, the reader acknowledges what arrived at once (`ack_now`, `TCP_QUICKACK`,
//! decision 0016).

use std::rc::Rc;
use std::time::{Duration, Instant};

use compio::buf::BufResult;
use compio::io::AsyncReadExt;
use compio::net::TcpStream;
use ctxstore_protocol::{ErrorCode, FrameError, FrameReader};

use super::hello::HelloState;
use super::requests::{Handled, Waiting, handle_frame, start};
use super::writer::ConnectionState;
use super::{CoreContext, sleep_until};
use crate::dispatch::error;
use crate::local::{Either, race};

/// Sends the ACK for what the socket received, now (`TCP_QUICKACK`). Not sticky: the kernel
/// goes back to delaying ACKs, so the reader asks again before each read of a partial frame.
/// Failure costs only latency.
pub(super) fn ack_now(stream: &TcpStream) {
    #[cfg(target_os = "linux")]
    {
        let _ = socket2::SockRef::from(stream).set_tcp_quickack(true);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = stream;
}

/// Why the read loop ended.
pub(super) type Ending = &'static str;

/// Reads frames and starts their requests until the connection must close; answers why.
pub(super) async fn read_requests(
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
pub(super) struct Reading<'a> {
    pub(super) core: &'a Rc<CoreContext>,
    pub(super) state: &'a Rc<ConnectionState>,
    pub(super) hello: &'a mut HelloState,
    pub(super) frames: FrameReader,
    /// When the first byte of the frame in progress arrived.
    pub(super) frame_started: Option<Instant>,
    /// A request read but not started: it waits for room in the server's budget (a request
    /// read at shutdown is not started, like those not read).
    pub(super) waiting: Option<Waiting>,
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
}
