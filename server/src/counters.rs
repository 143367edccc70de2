//! Server-wide counters for STATS. Written with relaxed atomics by every network core; read
//! only for reporting.

use std::sync::atomic::AtomicU64;
use std::time::Instant;

#[derive(Debug)]
pub struct ServerCounters {
    /// Open connections (also enforces `connections_max`).
    pub connections: AtomicU64,
    /// Open connections that have not completed HELLO (enforces
    /// `connections_unauthenticated_max`).
    pub connections_unauthenticated: AtomicU64,
    /// Response bytes not yet written, with what running requests hold and may produce, over
    /// every connection (enforces `unwritten_bytes_total_max`).
    pub unwritten_bytes: AtomicU64,
    /// Connections handed to a network core.
    pub connections_accepted: AtomicU64,
    /// Connections refused at a connection limit (OVERLOADED).
    pub connections_refused: AtomicU64,
    /// Requests received after HELLO.
    pub requests: AtomicU64,
    /// ERROR responses sent.
    pub errors: AtomicU64,
    pub started: Instant,
}

impl Default for ServerCounters {
    fn default() -> Self {
        ServerCounters {
            connections: AtomicU64::new(0),
            connections_unauthenticated: AtomicU64::new(0),
            unwritten_bytes: AtomicU64::new(0),
            connections_accepted: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            started: Instant::now(),
        }
    }
}
