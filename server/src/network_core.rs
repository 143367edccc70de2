//! A network core: one thread, one compio runtime, and the connections the server's acceptor
//! handed to it (accepted `std::net::TcpStream`s over a channel, registered on this core's
//! runtime with `compio::net::TcpStream::from_std`). A connection lives on one core. Cores
//! share nothing mutable but the server counters; they reach the engine through its handle.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use std::net::SocketAddr;

use compio::net::TcpStream;
use ctxstore_engine::Engine;

use crate::config::ServerLimits;
use crate::connection::{self, CoreContext, PendingHellos};
use crate::counters::ServerCounters;
use crate::dispatch::Dispatcher;
use crate::local::{Either, LocalFlag, LocalNotify, race};
use crate::metrics::CoreMetrics;
use crate::payload_cache::{CacheFeed, PayloadCache};

#[derive(Debug)]
pub struct CoreSettings {
    pub index: usize,
    pub cpu: Option<usize>,
    /// Connections the acceptor accepted for this core; disconnected once the listener is
    /// closed.
    pub incoming: flume::Receiver<(std::net::TcpStream, SocketAddr)>,
    pub engine: Engine,
    pub counters: Arc<ServerCounters>,
    /// This core's request figures (its payload cache publishes into them too).
    pub metrics: Arc<CoreMetrics>,
    /// This core's payload cache budget (0: no cache).
    pub payload_cache_bytes: u64,
    /// This core's side of the feed between the cores' payload caches.
    pub cache_feed: CacheFeed,
    /// BLAKE3 of the token clients must present.
    pub token_digest: Option<[u8; 32]>,
    /// The tenants file in force (`--tenants-file`): HELLO maps other tokens to tenants.
    pub tenants: Option<Arc<crate::tenancy::Tenants>>,
    pub limits: ServerLimits,
    /// Replication's figures (REPLICATION_STATS), when the server replicates or follows.
    pub replication: Option<Arc<ctxstore_replica::ReplicationStats>>,
    /// The HOST:PORT the server gives its replica as its own (ROLE's `primary` while it is
    /// the primary); empty when it does not replicate.
    pub advertise: String,
    /// Remote acknowledgements (`--ack-after`, `--remote-ack-timeout`, the shipper's tickets).
    pub remote_acks: crate::remote_acks::RemoteAckSettings,
    /// How long connections get to answer and write what is in flight once shutdown began.
    pub drain_timeout: Duration,
    /// The first message (or all senders dropped): stop accepting, drain, exit. A second
    /// message: close every connection now.
    pub shutdown: flume::Receiver<()>,
}

/// Starts the core's thread; returns once its runtime runs and it takes connections.
pub fn start(settings: CoreSettings) -> anyhow::Result<JoinHandle<()>> {
    let (ready_sender, ready) = std::sync::mpsc::channel::<Result<(), String>>();
    let name = format!("ctxstore-net-{}", settings.index);
    let handle = std::thread::Builder::new().name(name.clone()).spawn(move || {
        let mut builder = compio::runtime::RuntimeBuilder::new();
        if let Some(cpu) = settings.cpu {
            builder.thread_affinity(std::iter::once(cpu).collect());
        }
        let runtime = match builder.build() {
            Ok(runtime) => runtime,
            Err(error) => {
                let _ = ready_sender.send(Err(format!("compio runtime: {error}")));
                return;
            }
        };
        tracing::info!(core = settings.index, driver = ?runtime.driver_type(), cpu = ?settings.cpu, "network core started");
        runtime.block_on(run(settings, ready_sender));
    })?;
    match ready.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(error)) => Err(anyhow::anyhow!("{name}: {error}")),
        Err(_) => Err(anyhow::anyhow!("{name} exited before it was ready")),
    }
}

/// The task that turns the server's stop messages into the core's flags: the first raises
/// `shutdown` (drain), the second, the drain timeout or the server handle gone raises
/// `hard_stop`.
fn watch_shutdown(
    signal: flume::Receiver<()>,
    drain_timeout: Duration,
    flag: Rc<LocalFlag>,
    hard_flag: Rc<LocalFlag>,
) {
    compio::runtime::spawn(async move {
        let first = signal.recv_async().await;
        flag.raise();
        // Connections get drain_timeout to write what is in flight; a second message (a second
        // signal), or the server handle gone, cuts it short.
        if first.is_ok() {
            let _ = race(signal.recv_async(), compio::time::sleep(drain_timeout)).await;
        }
        hard_flag.raise();
    })
    .detach();
}

async fn run(settings: CoreSettings, ready: std::sync::mpsc::Sender<Result<(), String>>) {
    let shutdown = LocalFlag::new();
    let hard_stop = LocalFlag::new();
    watch_shutdown(
        settings.shutdown,
        settings.drain_timeout,
        shutdown.clone(),
        hard_stop.clone(),
    );
    let core = Rc::new(CoreContext {
        dispatcher: Dispatcher {
            store: settings.engine,
            limits: settings.limits,
            counters: settings.counters,
            replication: settings.replication,
            advertise: settings.advertise,
            payload_cache: RefCell::new(
                PayloadCache::with_counters(
                    settings.payload_cache_bytes,
                    settings.metrics.cache_counters(),
                )
                .with_feed(settings.cache_feed),
            ),
            remote_acks: crate::remote_acks::CoreRemoteAcks::start(settings.remote_acks),
            tenants: settings.tenants,
        },
        metrics: settings.metrics,
        token_digest: settings.token_digest,
        limits: settings.limits,
        shutdown: shutdown.clone(),
        hard_stop,
        server_name: format!("ctxstore {}", env!("CARGO_PKG_VERSION")),
        pending_hellos: PendingHellos::default(),
    });
    let open = Rc::new(Cell::new(0usize));
    let closed = Rc::new(LocalNotify::default());
    let _ = ready.send(Ok(()));

    let incoming = settings.incoming;
    let admission = Admission {
        index: settings.index,
        core: core.clone(),
        open: open.clone(),
        closed: closed.clone(),
    };
    loop {
        match race(incoming.recv_async(), shutdown.wait()).await {
            Either::Left(Ok((stream, peer))) => admission.admit(stream, peer),
            // The listener is closed (the server is stopping): wait for the stop itself.
            Either::Left(Err(_)) => {
                shutdown.wait().await;
                break;
            }
            Either::Right(()) => break,
        }
    }
    // Connections accepted before the listener closed but not taken yet: they were accepted,
    // so they get the drain like every other connection, never a reset.
    while let Ok((stream, peer)) = incoming.try_recv() {
        admission.admit(stream, peer);
    }
    drop(admission);
    while open.get() > 0 {
        closed.notified().await;
    }
    let cache = core.dispatcher.payload_cache.borrow();
    tracing::info!(
        core = settings.index,
        payload_cache_hits = cache.hits(),
        payload_cache_misses = cache.misses(),
        payload_cache_bytes = cache.bytes(),
        "network core stopped"
    );
}

/// Takes an accepted connection onto this core: `connections_max` and the share waiting for
/// HELLO, then a task that serves it.
struct Admission {
    index: usize,
    core: Rc<CoreContext>,
    open: Rc<Cell<usize>>,
    closed: Rc<LocalNotify>,
}

impl Admission {
    fn admit(&self, stream: std::net::TcpStream, peer: SocketAddr) {
        let core = &self.core;
        let stream = match TcpStream::from_std(stream) {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(core = self.index, %peer, %error, "could not register an accepted connection");
                return;
            }
        };
        let counters = &core.dispatcher.counters;
        counters
            .connections_accepted
            .fetch_add(1, Ordering::Relaxed);
        let limits = &core.limits;
        let open_now = counters.connections.fetch_add(1, Ordering::AcqRel) + 1;
        let unauthenticated_now = counters
            .connections_unauthenticated
            .fetch_add(1, Ordering::AcqRel)
            + 1;
        if open_now > u64::from(limits.connections_max)
            || unauthenticated_now
                > u64::from(
                    limits
                        .connections_unauthenticated_max
                        .min(limits.connections_max),
                )
        {
            // Connections still without HELLO are the cheapest to lose: the oldest of this
            // core's makes room (and hands its unauthenticated count to the newcomer), so
            // that a flood of silent connections cannot lock real clients out.
            if core.pending_hellos.evict_oldest() {
                counters
                    .connections_unauthenticated
                    .fetch_sub(1, Ordering::AcqRel);
                tracing::debug!(%peer, "too many connections without HELLO: closed the oldest");
            } else {
                counters.connections.fetch_sub(1, Ordering::AcqRel);
                counters
                    .connections_unauthenticated
                    .fetch_sub(1, Ordering::AcqRel);
                let message = if open_now > u64::from(limits.connections_max) {
                    format!(
                        "the server holds its maximum of {} connections",
                        limits.connections_max
                    )
                } else {
                    format!(
                        "the server holds its maximum of {} connections waiting for HELLO",
                        limits.connections_unauthenticated_max
                    )
                };
                counters.connections_refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%peer, "refusing a connection: {message}");
                compio::runtime::spawn(connection::refuse(stream, message)).detach();
                return;
            }
        }
        let ticket = core.pending_hellos.register();
        self.open.set(self.open.get() + 1);
        let (core, open, closed) = (core.clone(), self.open.clone(), self.closed.clone());
        compio::runtime::spawn(async move {
            connection::serve(stream, peer, core.clone(), ticket).await;
            core.dispatcher
                .counters
                .connections
                .fetch_sub(1, Ordering::AcqRel);
            open.set(open.get() - 1);
            closed.notify_all();
        })
        .detach();
    }
}
