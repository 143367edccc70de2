//! The answer budget: what a connection holds, and what every request reserves.
//!
//! Backpressure: a request counts as in flight from the moment it is read until its response
//! is *written* to the socket, and the connection counts the response bytes it holds unwritten
//! (plus what its running requests hold and may still produce). At `requests_in_flight_max` or
//! at `unwritten_bytes_max` it stops reading; TCP pushes back on the client. A client that
//! never reads its responses therefore holds a bounded amount of the server's memory.
//!
//! Server-wide, every request reserves the largest answer it may produce
//! (`Request::answer_bytes_max`, defined beside each message in the protocol) and its body
//! against `unwritten_bytes_total_max` before it starts, and exchanges the reservation for its
//! answer's bytes once encoded: the bytes all connections hold never pass the budget. A request
//! that finds no room waits, and its connection stops reading. A connection that already holds
//! bytes may fill only a quarter of the budget, one that holds nothing all of it: clients that
//! read their answers keep being served while stuck ones wait.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use ctxstore_protocol::AnswerLimits;

use super::CoreContext;
use crate::local::LocalNotify;

/// A connection that holds unwritten or reserved bytes may fill the server's budget up to
/// this fraction of it (1/4); one that holds nothing, up to all of it.
pub(super) const HOLDERS_SHARE_DIVISOR: u64 = 4;

/// What a connection holds, shared by its reader, its request tasks and its writer.
pub(super) struct Accounting {
    pub(super) core: Rc<CoreContext>,
    /// Requests read and not yet answered *and written*.
    pub(super) in_flight: Cell<u32>,
    /// Response bytes queued or being written.
    pub(super) unwritten_bytes: Cell<u64>,
    /// What running requests (answered later) hold (their bodies) and may still produce,
    /// reserved when they start.
    pub(super) reserved_bytes: Cell<u64>,
    /// When the writer last got bytes into the socket, or when it last had nothing to write.
    pub(super) write_progress: Cell<Instant>,
    /// Set when the connection is gone: late answers are dropped, not counted.
    pub(super) closed: Cell<bool>,
    /// Set when the writer stopped (the socket failed, or it closed it): nothing more will
    /// be written.
    pub(super) writer_done: Cell<bool>,
    /// Something above changed: a response was queued or written.
    pub(super) changed: LocalNotify,
}

impl Accounting {
    pub(super) fn new(core: Rc<CoreContext>) -> Self {
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
    pub(super) fn may_start(&self) -> bool {
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
    pub(super) fn reservation(&self, bytes: u64) -> u64 {
        bytes.min(self.core.limits.unwritten_bytes_total_max)
    }

    /// Whether a reservation of `bytes` would fit now (a hint: other cores may take the room
    /// first; `try_reserve` decides).
    pub(super) fn could_reserve(&self, bytes: u64) -> bool {
        self.global().load(Ordering::Relaxed) + bytes <= self.budget_ceiling()
    }

    /// Reserves `bytes` (from `reservation`) of the server's budget for a request about to
    /// start, or `false`: the request waits and the connection stops reading. A hard bound:
    /// what is reserved and unwritten never passes `unwritten_bytes_total_max` (a request never
    /// produces more than it reserved, except one whose largest answer is over the whole
    /// budget, which reserves the whole budget and thus runs alone).
    pub(super) fn try_reserve(&self, bytes: u64) -> bool {
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
    pub(super) fn settle(&self, reserved: u64, bytes: u64) {
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

    pub(super) fn sub(&self, cell: &Cell<u64>, bytes: u64) {
        assert!(cell.get() >= bytes, "connection accounting went negative");
        cell.set(cell.get() - bytes);
        self.global().fetch_sub(bytes, Ordering::Relaxed);
    }

    /// The writer got `bytes` into the socket.
    pub(super) fn wrote(&self, bytes: u64) {
        if !self.closed.get() {
            self.sub(&self.unwritten_bytes, bytes);
        }
        self.write_progress.set(Instant::now());
        self.changed.notify_all();
    }

    /// The writer finished `requests` responses to counted requests.
    pub(super) fn answered(&self, requests: u32) {
        if requests > 0 && !self.closed.get() {
            self.in_flight.set(self.in_flight.get() - requests);
            self.changed.notify_all();
        }
    }

    /// Whether responses wait to be written and the peer has read none of them for
    /// `idle_timeout`.
    pub(super) fn write_stalled_until(&self) -> Option<Instant> {
        (self.unwritten_bytes.get() > 0)
            .then(|| self.write_progress.get() + self.core.limits.idle_timeout)
    }

    /// Whether, at `now`, responses have waited `idle_timeout` for the peer to read any.
    pub(super) fn write_stalled(&self, now: Instant) -> bool {
        self.write_stalled_until().is_some_and(|at| at <= now)
    }

    /// The connection ends: give back what it still holds to the server's budget.
    pub(super) fn close(&self) {
        if !self.closed.replace(true) {
            self.global()
                .fetch_sub(self.held_bytes(), Ordering::Relaxed);
            self.unwritten_bytes.set(0);
            self.reserved_bytes.set(0);
        }
    }
}

/// What the answers of this core's requests may hold: the engine's and the server's limits.
pub(super) fn answer_limits(core: &CoreContext) -> AnswerLimits {
    let engine_limits = core.dispatcher.store.config().limits;
    AnswerLimits {
        blob_bytes_max: engine_limits.blob_bytes_max,
        read_turns_max: engine_limits.read_turns_max,
        response_bytes_max: core.limits.response_bytes_max,
    }
}
