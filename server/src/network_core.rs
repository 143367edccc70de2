//! A network core: one thread, one compio runtime, its own listening socket (SO_REUSEPORT:
//! the kernel spreads new connections over the cores), and the connections it accepted.
//! Cores share nothing mutable but the server counters; they reach the engine through its
//! handle.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use compio::net::TcpListener;
use ctxstore_engine::Engine;

use crate::config::ServerLimits;
use crate::connection::{self, CoreContext};
use crate::counters::ServerCounters;
use crate::dispatch::Dispatcher;
use crate::local::{Either, LocalFlag, LocalNotify, race};
use crate::payload_cache::PayloadCache;

#[derive(Debug)]
pub struct CoreSettings {
    pub index: usize,
    pub cpu: Option<usize>,
    pub listener: std::net::TcpListener,
    pub engine: Engine,
    pub counters: Arc<ServerCounters>,
    /// This core's payload cache budget (0: no cache).
    pub payload_cache_bytes: u64,
    pub token: Option<Arc<[u8]>>,
    pub limits: ServerLimits,
    /// Closed (all senders dropped) or sent to: stop accepting, finish, exit.
    pub shutdown: flume::Receiver<()>,
}

/// Starts the core's thread; returns once its runtime runs and its listener accepts.
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

async fn run(settings: CoreSettings, ready: std::sync::mpsc::Sender<Result<(), String>>) {
    let listener = match TcpListener::from_std(settings.listener) {
        Ok(listener) => listener,
        Err(error) => {
            let _ = ready.send(Err(format!("listener: {error}")));
            return;
        }
    };
    let shutdown = LocalFlag::new();
    let flag = shutdown.clone();
    let signal = settings.shutdown;
    compio::runtime::spawn(async move {
        let _ = signal.recv_async().await;
        flag.raise();
    })
    .detach();
    let core = Rc::new(CoreContext {
        dispatcher: Dispatcher {
            engine: settings.engine,
            limits: settings.limits,
            counters: settings.counters,
            payload_cache: RefCell::new(PayloadCache::new(settings.payload_cache_bytes)),
        },
        token: settings.token,
        limits: settings.limits,
        shutdown: shutdown.clone(),
        server_name: format!("ctxstore {}", env!("CARGO_PKG_VERSION")),
    });
    let open = Rc::new(Cell::new(0usize));
    let closed = Rc::new(LocalNotify::default());
    let _ = ready.send(Ok(()));

    loop {
        let accepted = match race(listener.accept(), shutdown.wait()).await {
            Either::Left(accepted) => accepted,
            Either::Right(()) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(core = settings.index, %error, "accept failed");
                compio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let counters = &core.dispatcher.counters;
        let open_now = counters.connections.fetch_add(1, Ordering::AcqRel) + 1;
        if open_now > u64::from(core.limits.connections_max) {
            counters.connections.fetch_sub(1, Ordering::AcqRel);
            let message = format!(
                "the server holds its maximum of {} connections",
                core.limits.connections_max
            );
            tracing::warn!(%peer, "refusing a connection: {message}");
            compio::runtime::spawn(connection::refuse(stream, message)).detach();
            continue;
        }
        open.set(open.get() + 1);
        let (core, open, closed) = (core.clone(), open.clone(), closed.clone());
        compio::runtime::spawn(async move {
            connection::serve(stream, peer, core.clone()).await;
            core.dispatcher
                .counters
                .connections
                .fetch_sub(1, Ordering::AcqRel);
            open.set(open.get() - 1);
            closed.notify_all();
        })
        .detach();
    }
    drop(listener);
    while open.get() > 0 {
        closed.notified().await;
    }
    let cache = core.dispatcher.payload_cache.borrow();
    tracing::info!(
        core = settings.index,
        payload_cache_hits = cache.hits,
        payload_cache_misses = cache.misses,
        payload_cache_bytes = cache.bytes(),
        "network core stopped"
    );
}
