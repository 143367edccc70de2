//! Remote acknowledgements on a network core (decision 0031 §3): a write asked `remote` (its
//! ACK_AFTER, else `--ack-after`) is answered once the object store holds a cut with it.
//!
//! The engine answers the write first (durable here, published); then the dispatcher takes a
//! cut ticket (`ctxstore_replica::RemoteAcks`) and waits on this core until the shipper
//! confirms it. The shipper wakes each core through a channel of one (`try_send`: a full
//! channel already holds a wake); the core's task turns it into a `LocalNotify::notify_all`,
//! and waiters, futures on this core's thread, re-check their ticket. No lock on the request
//! path. The request keeps its in-flight slot while it waits, so a slow object store pushes
//! back on the connection as any slow request does.
//!
//! Never early, never false: a write is answered success only when its ticket is confirmed;
//! a fenced primary (another took the prefix) or a wait past `--remote-ack-timeout` is
//! UNCONFIRMED, the write durable here, its fate off-host unknown.

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ctxstore_protocol::{AckAfter, ErrorCode, Request, Response};
use ctxstore_replica::{AckOutcome, RemoteAcks};

use crate::local::{Either, LocalNotify, race};

/// The server's remote acknowledgement settings, the same for every core.
#[derive(Clone, Debug)]
pub struct RemoteAckSettings {
    /// What a write that does not say gets (`--ack-after`).
    pub default: AckAfter,
    /// Past this, a wait is answered UNCONFIRMED (`--remote-ack-timeout`).
    pub timeout: Duration,
    /// The shipper's tickets; `None` when the server does not replicate (a remote
    /// acknowledgement is then refused before the write runs).
    pub acks: Option<Arc<RemoteAcks>>,
}

impl Default for RemoteAckSettings {
    fn default() -> Self {
        RemoteAckSettings {
            default: AckAfter::Local,
            timeout: Duration::from_secs(10),
            acks: None,
        }
    }
}

/// One core's side: the settings and the core's wake.
#[derive(Debug)]
pub struct CoreRemoteAcks {
    settings: RemoteAckSettings,
    shipped: Rc<LocalNotify>,
}

impl CoreRemoteAcks {
    /// Registers this core's wake with the shipper and starts the task that turns it into
    /// `notify_all` (on the calling core's runtime).
    pub fn start(settings: RemoteAckSettings) -> CoreRemoteAcks {
        let shipped = Rc::new(LocalNotify::default());
        if let Some(acks) = &settings.acks {
            let (wake, woken) = flume::bounded::<()>(1);
            acks.on_shipped(move || {
                let _ = wake.try_send(());
            });
            let notify = shipped.clone();
            compio::runtime::spawn(async move {
                while woken.recv_async().await.is_ok() {
                    notify.notify_all();
                }
            })
            .detach();
        }
        CoreRemoteAcks { settings, shipped }
    }

    /// What a write that does not say gets (`--ack-after`).
    pub fn default_ack_after(&self) -> AckAfter {
        self.settings.default
    }

    /// The shipper's tickets and figures, when the server replicates.
    pub fn acks(&self) -> Option<&Arc<RemoteAcks>> {
        self.settings.acks.as_ref()
    }

    /// How `request` is to be acknowledged, and the request itself (out of its ACK_AFTER
    /// wrapper): `true` for remote. Only the writes of `MessageType::takes_ack_after` take the
    /// server's default; the decoder refuses ACK_AFTER on any other.
    pub fn unwrap(&self, request: Request) -> (Request, bool) {
        match request {
            Request::AckAfter { request, after } => (*request, after == AckAfter::Remote),
            request => {
                let remote = self.settings.default == AckAfter::Remote
                    && request.message_type().takes_ack_after();
                (request, remote)
            }
        }
    }

    /// A remote acknowledgement asked of a server that cannot give one: refused before the
    /// write runs, nothing written.
    pub fn check_possible(&self) -> Result<(), Response> {
        if self.settings.acks.is_some() {
            return Ok(());
        }
        Err(crate::dispatch::error(
            ErrorCode::InvalidArgument,
            "ACK_AFTER remote: this server does not replicate (start it with --replicate-to \
             URL for remote acknowledgements); nothing was written (send the write with \
             ACK_AFTER local, or without ACK_AFTER)",
        ))
    }

    /// Waits until a cut holding what the engine just answered is stored in the object
    /// store: `Ok` then; UNCONFIRMED (its `detail` the write's TurnID, `turn_id`, when it has
    /// one) when the primary is fenced or the wait passes the timeout.
    pub async fn wait(&self, turn_id: u64) -> Result<(), Response> {
        let Some(acks) = &self.settings.acks else {
            // `check_possible` ran before the write.
            return Err(crate::dispatch::error(
                ErrorCode::Internal,
                "a remote acknowledgement without a replica",
            ));
        };
        let started = Instant::now();
        let ticket = acks.ticket();
        acks.waiting.fetch_add(1, Ordering::Relaxed);
        let outcome = self.wait_for(acks, ticket, started).await;
        acks.waiting.fetch_sub(1, Ordering::Relaxed);
        let why = match outcome {
            AckOutcome::Shipped => {
                let waited_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                acks.record_ack(waited_us);
                return Ok(());
            }
            AckOutcome::Fenced => "this primary was fenced (another primary took the replica)",
            AckOutcome::Waiting => "the object store did not store it within --remote-ack-timeout",
        };
        acks.unconfirmed_total.fetch_add(1, Ordering::Relaxed);
        Err(Response::Error {
            code: ErrorCode::Unconfirmed,
            detail: turn_id,
            message: format!(
                "the write is durable on this server but was not acknowledged off-host: {why}; \
                 it may or may not survive a failover: retry it with the same idempotency key"
            ),
        })
    }

    /// Until `ticket` is confirmed, fenced, or the timeout passed (`Waiting`).
    async fn wait_for(&self, acks: &RemoteAcks, ticket: u64, started: Instant) -> AckOutcome {
        let deadline = started + self.settings.timeout;
        loop {
            // Registered before the check, so a wake between the two is not missed.
            let shipped = self.shipped.notified();
            match acks.outcome(ticket) {
                AckOutcome::Waiting => {}
                done => return done,
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return AckOutcome::Waiting;
            }
            if let Either::Right(()) = race(shipped, compio::time::sleep(left)).await {
                return acks.outcome(ticket);
            }
        }
    }
}
