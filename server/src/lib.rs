//! ctxstore-server: network cores that speak the binary protocol in front of the engine.
//!
//! - [`config`]: `ServerConfig`, limits and their defaults.
//! - `acceptor`: the one listening socket (bound exclusively) and the thread that accepts on
//!   it and hands connections to the network cores, round robin.
//! - [`network_core`]: a thread, a compio runtime, the connections handed to it.
//! - [`connection`]: one connection: frames, HELLO, in-flight requests, responses.
//! - [`dispatch`]: a request to engine calls to a response, one file per family of requests.
//! - `payload_cache`: a core's raw payloads, so that hot reads skip pack reads and zstd.
//! - `local`: single-threaded notify/flag/race helpers; `counters`: STATS counters.
//! - [`settings`]: the layers of the server's settings (flag > env > config file > default).
//! - [`tenants_file`]: the tenants file read and checked; [`tenancy`]: the one in force, what
//!   HELLO maps a token to a tenant with, replaced whole on SIGHUP (`Server::reload_tenants`).
//! - [`metrics`]: per-core request counters and the `GET /metrics` endpoint (Prometheus).
//! - [`console`]: the read-only web console (`--console-listen`): its JSON API, auth and
//!   the embedded front-end.
//!
//! [`Server::start`] binds the listener first (an address in use fails before any data
//! directory is touched), opens the engine, starts the cores, then the acceptor;
//! [`Server::stop`] closes the listener first, then drains the cores (`HurryHandle` cuts the
//! drain short), then shuts the engine down.
//!
//! A standby whose replica has no restore point yet (issue 44: started with its primary, before
//! the primary's first write shipped) waits for one, and answers meanwhile: an empty,
//! read-only store in a scratch directory, one network core, `/metrics`, replication state
//! `waiting` (`Server::start_waiting`). Once the point is there it is restored into the data
//! directory and served as usual; the listening socket is handed over (`Acceptor::route_to`),
//! never closed, and the connections made while it waited are closed (clients reconnect).

// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

mod acceptor;
pub mod config;
pub mod connection;
pub mod console;
mod counters;
pub mod dispatch;
mod http_server;
mod local;
pub mod metrics;
pub mod network_core;
mod payload_cache;
pub mod quota;
pub mod remote_acks;
pub mod settings;
pub mod tenancy;
pub mod tenants_file;
mod value_filter;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use ctxstore_engine::Engine;

pub use config::{ServerConfig, ServerLimits, parse_duration};
use counters::ServerCounters;

/// A running server: its engine, its network cores, the address it listens on.
#[derive(Debug)]
pub struct Server {
    local_addr: SocketAddr,
    engine: Engine,
    acceptor: Option<acceptor::Acceptor>,
    metrics: Option<metrics::MetricsEndpoint>,
    console: Option<console::ConsoleEndpoint>,
    cores: Vec<JoinHandle<()>>,
    stop_cores: Vec<flume::Sender<()>>,
    /// Ships the store to its replica (`--replicate-to`).
    replicator: Option<ctxstore_replica::Replicator>,
    /// Follows a replica as a standby (`--follow`), and ships once promoted.
    follower: Option<ctxstore_replica::Follower>,
    /// A standby waiting for its replica's first restore point: what it says (`waiting`).
    waiting: Option<Arc<ctxstore_replica::ReplicationStats>>,
    /// A waiting standby's empty store lives here; removed once it is shut down.
    scratch: Option<PathBuf>,
    /// The tenants file in force (`--tenants-file`), shared with the cores' HELLO.
    tenants: Option<Arc<tenancy::Tenants>>,
    stopped: bool,
}

/// Where the server's connections come from: a socket just bound, or the acceptor of the
/// server that answered while the standby waited (handed over, never closed).
enum Listening {
    Bound(TcpListener),
    Waited(Box<Server>),
}

/// What the acceptor and the metrics endpoint need of the network cores.
struct StartedCores {
    /// The channel the acceptor hands each core its connections on.
    incoming: Vec<flume::Sender<(TcpStream, SocketAddr)>>,
    metrics: Vec<Arc<metrics::CoreMetrics>>,
}

impl Server {
    /// Binds the listener (exclusively), opens the store (recovery), starts the network cores
    /// and the acceptor. When it returns, the server accepts connections (and `ready_file`
    /// names its address).
    pub fn start(config: ServerConfig) -> anyhow::Result<Server> {
        config
            .validate()
            .map_err(anyhow::Error::msg)
            .context("invalid configuration")?;
        // The address first: a second server on a served address fails at once, before it
        // touches (or creates) a data directory or spends a recovery. Connections that arrive
        // while the store recovers wait in the backlog and are served once it is open.
        let listener = acceptor::bind(config.listen)?;
        let local_addr = listener
            .local_addr()
            .with_context(|| format!("listening on {}", config.listen))?;
        let mut listening = Listening::Bound(listener);
        let mut engine_config = config.engine.clone();
        if let Some(follow) = &config.follow {
            Server::prepare_standby(&config, follow, &mut engine_config, &mut listening)?;
        }
        let engine = Engine::open(engine_config.clone()).with_context(|| {
            format!("opening the store in {}", config.engine.data_dir.display())
        })?;
        let tenants = match &config.tenants_file {
            None => None,
            Some(path) => match tenancy::Tenants::load(path, &engine) {
                Ok(tenants) => Some(Arc::new(tenants)),
                Err(error) => {
                    engine.shutdown();
                    return Err(anyhow::Error::new(error).context("reading the tenants file"));
                }
            },
        };
        let mut server = Server {
            local_addr,
            engine,
            acceptor: None,
            metrics: None,
            console: None,
            cores: Vec::new(),
            stop_cores: Vec::new(),
            replicator: None,
            follower: None,
            waiting: None,
            scratch: None,
            tenants,
            stopped: false,
        };
        if let Err(error) = server.attach_replication(&config, local_addr) {
            server.stop();
            return Err(error);
        }
        if let Err(error) = server.start_serving(&config, listening) {
            server.stop();
            return Err(error);
        }
        tracing::info!(
            listen = %local_addr,
            network_cores = config.network_cores,
            placement = %config.engine.placement,
            token = config.token.is_some(),
            "ctxstore server ready"
        );
        if let Some(path) = &config.ready_file {
            std::fs::write(path, format!("{local_addr}\n"))
                .with_context(|| format!("writing the ready file {}", path.display()))?;
        }
        Ok(server)
    }

    /// A standby's store before it opens: an absolute data directory, a fresh restore put in
    /// place, and the replica's first restore point waited for (answering meanwhile through
    /// `listening`, which then holds the waiting server).
    fn prepare_standby(
        config: &ServerConfig,
        follow: &ctxstore_replica::FollowConfig,
        engine_config: &mut ctxstore_engine::EngineConfig,
        listening: &mut Listening,
    ) -> anyhow::Result<()> {
        // A standby's store comes from its replica: restored into an empty directory, or
        // the one it followed before (decision 0019).
        engine_config.follower = true;
        if engine_config.data_dir.is_relative() {
            let here = std::env::current_dir().context("reading the current directory")?;
            engine_config.data_dir = here.join(&engine_config.data_dir);
        }
        // A stalled standby's fresh restore, put in place of its store (or a swap a crash
        // cut short, finished) before the store opens (issue 46).
        if engine_config.data_dir.exists()
            && ctxstore_replica::fresh::swap_in(&engine_config.data_dir).with_context(|| {
                format!(
                    "putting the standby's fresh restore in place in {}",
                    engine_config.data_dir.display()
                )
            })?
        {
            tracing::info!("standby starts again from its fresh restore");
        }
        // A replica with no restore point yet is waited for (the standby may start before
        // its primary's first write ships), answering meanwhile; a signal ends the start.
        let waiting = Arc::new(ctxstore_replica::ReplicationStats::default());
        let prepared = ctxstore_replica::follow::prepare_waiting(
            &engine_config.data_dir,
            follow,
            &config.stop_waiting,
            &waiting,
            || {
                let Listening::Bound(bound) = &*listening else {
                    return;
                };
                let started = bound
                    .try_clone()
                    .context("a second descriptor of the listening socket")
                    .and_then(|copy| Server::start_waiting(config, copy, waiting.clone()));
                match started {
                    // The waiting server's acceptor holds the socket from here on.
                    Ok(server) => *listening = Listening::Waited(Box::new(server)),
                    Err(error) => tracing::warn!(
                        error = %format!("{error:#}"),
                        "the waiting standby cannot answer (connections wait in the \
                         backlog until it has restored)"
                    ),
                }
            },
        )
        .with_context(|| {
            format!(
                "preparing the standby of {} in {}",
                follow.url,
                engine_config.data_dir.display()
            )
        })?;
        tracing::info!(?prepared, url = %follow.url, "standby ready to open");
        Ok(())
    }

    /// Replication (`--replicate-to`) or the standby (`--follow`) attached to the open engine.
    /// On an error the caller stops the server.
    fn attach_replication(
        &mut self,
        config: &ServerConfig,
        local_addr: SocketAddr,
    ) -> anyhow::Result<()> {
        // Replication attaches before anything is served: a foreign prefix or a store that
        // cannot be reached (without --replicate-start-anyway) stops the start.
        // The address clients reach this server at, for the replica's epoch object (a
        // standby's READ_ONLY names it): `--replica-advertise`, else the bound address.
        let advertise = |ship: &ctxstore_replica::ShipConfig| {
            let mut ship = ship.clone();
            if ship.advertise.is_empty() {
                ship.advertise = local_addr.to_string();
            }
            ship
        };
        if let Some(replication) = &config.replication {
            match ctxstore_replica::Replicator::start(self.engine.clone(), advertise(replication)) {
                Ok(replicator) => self.replicator = Some(replicator),
                Err(error) => return Err(replication_start_error(error, replication)),
            }
        }
        if let Some(follow) = &config.follow {
            let follow = ctxstore_replica::FollowConfig {
                ship: advertise(&follow.ship),
                ..follow.clone()
            };
            match ctxstore_replica::Follower::start(self.engine.clone(), follow) {
                Ok(follower) => self.follower = Some(follower),
                Err(error) => return Err(anyhow::Error::new(error).context("starting the standby")),
            }
        }
        Ok(())
    }

    /// The server that answers while a standby waits for its replica's first restore point
    /// (issue 44): an empty read-only store in a scratch directory (reads find nothing, writes
    /// are refused with READ_ONLY), one network core, `/metrics`; STATS and
    /// REPLICATION_STATS say `waiting` and what it waits for. No console (it would show an
    /// empty store as the standby's). `Server::start` takes its acceptor over once restored.
    fn start_waiting(
        config: &ServerConfig,
        listener: TcpListener,
        waiting: Arc<ctxstore_replica::ReplicationStats>,
    ) -> anyhow::Result<Server> {
        let local_addr = listener
            .local_addr()
            .context("the listening socket has no address")?;
        let scratch = std::env::temp_dir().join(format!(
            "ctxstore-standby-waiting-{}-{}",
            std::process::id(),
            ctxstore_replica::stats::now_unix_ms()
        ));
        // A new directory (never one left over): the empty store is created in it.
        std::fs::create_dir(&scratch)
            .with_context(|| format!("creating the scratch directory {}", scratch.display()))?;
        let mut engine_config = ctxstore_engine::EngineConfig::new(&scratch);
        engine_config.follower = true;
        engine_config.preallocate = false;
        engine_config.disk_reserve_bytes = 0;
        let engine = match Engine::open(engine_config) {
            Ok(engine) => engine,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&scratch);
                return Err(anyhow::Error::new(error)
                    .context(format!("opening an empty store in {}", scratch.display())));
            }
        };
        let mut server = Server {
            local_addr,
            engine,
            acceptor: None,
            metrics: None,
            console: None,
            cores: Vec::new(),
            stop_cores: Vec::new(),
            replicator: None,
            follower: None,
            waiting: Some(waiting),
            scratch: Some(scratch.clone()),
            // The empty store knows no tenant: only the operator's token is let in until the
            // restore point is there and the store is served with its tenants.
            tenants: None,
            stopped: false,
        };
        let mut answering = config.clone();
        answering.network_cores = 1;
        answering.network_core_cpus = None;
        answering.console_listen = None;
        answering.engine.data_dir = scratch;
        // On an error, dropping `server` stops what started and removes the scratch directory.
        server.start_serving(&answering, Listening::Bound(listener))?;
        tracing::info!(
            listen = %local_addr,
            metrics = ?server.metrics_addr(),
            "standby answering while it waits: an empty read-only store, replication state \
             waiting; once it has restored, it serves the replica and closes these connections"
        );
        Ok(server)
    }

    /// Starts the network cores, the metrics endpoint (when one is configured), then the
    /// acceptor (or takes over the waiting standby's). On an error the caller stops what
    /// started.
    fn start_serving(&mut self, config: &ServerConfig, listening: Listening) -> anyhow::Result<()> {
        let counters = Arc::new(ServerCounters::default());
        let cores = self.start_cores(config, &counters)?;
        // One socket for both when they are given the same address: the console serves
        // /metrics too.
        let shared =
            config.console_listen.is_some() && config.console_listen == config.metrics_listen;
        let (mut metrics_listen, mut console_listen) =
            (config.metrics_listen, config.console_listen);
        let (listener, waited) = match listening {
            Listening::Bound(listener) => (Some(listener), None),
            Listening::Waited(waited) => (None, Some(waited)),
        };
        let mut waited = waited;
        // The waiting standby's /metrics: stopped, then served again on the very address it
        // had (an ephemeral port stays the same).
        if let Some(endpoint) = waited.as_mut().and_then(|waited| waited.metrics.take()) {
            let addr = endpoint.local_addr();
            endpoint.stop();
            metrics_listen = Some(addr);
            if shared {
                console_listen = Some(addr);
            }
        }
        if let Some(listen) = metrics_listen {
            let source = metrics::MetricsSource {
                engine: self.engine.clone(),
                counters: counters.clone(),
                cores: cores.metrics,
                data_dir: config.engine.data_dir.clone(),
                payload_cache_bytes_per_core: config.payload_cache_bytes_per_core,
                replication: self.replication().cloned(),
                remote_acks: remote_ack_settings(config).acks,
                tenants: self.tenants.clone(),
            };
            if shared {
                self.start_console(config, console_listen, Some(source))?;
            } else {
                self.metrics = Some(metrics::MetricsEndpoint::start(listen, source)?);
            }
        }
        if !shared {
            self.start_console(config, console_listen, None)?;
        }
        // The listener queued connections since it was bound; from here on they reach the cores.
        match (listener, waited) {
            (Some(listener), _) => {
                self.acceptor = Some(acceptor::Acceptor::start(listener, cores.incoming)?);
            }
            (None, Some(mut waited)) => {
                let acceptor = waited
                    .acceptor
                    .take()
                    .context("the waiting standby has no listening socket to hand over")?;
                acceptor.route_to(cores.incoming);
                self.acceptor = Some(acceptor);
                // Its connections are closed (after what is in flight is answered), its empty
                // store shut down and removed.
                waited.stop();
            }
            (None, None) => anyhow::bail!("no listening socket"),
        }
        Ok(())
    }

    fn start_console(
        &mut self,
        config: &ServerConfig,
        listen: Option<SocketAddr>,
        metrics: Option<metrics::MetricsSource>,
    ) -> anyhow::Result<()> {
        let Some(listen) = listen else {
            return Ok(());
        };
        let mut settings = console::ConsoleSettings::new(listen, self.engine.clone());
        settings.token = config.token.clone();
        settings.tenants = self.tenants.clone();
        settings.metrics = metrics;
        // A standby's figures too (its role, the lease it watches), not only a primary's.
        settings.replication = self.replication().cloned();
        settings.remote_acks = remote_ack_settings(config).acks;
        self.console = Some(console::ConsoleEndpoint::start(settings)?);
        Ok(())
    }

    /// Starts `network_cores` cores. On an error the caller stops what started.
    fn start_cores(
        &mut self,
        config: &ServerConfig,
        counters: &Arc<ServerCounters>,
    ) -> anyhow::Result<StartedCores> {
        let token_digest = config
            .token
            .as_ref()
            .map(|token| connection::token_digest(token.as_bytes()));
        let mut core_metrics = Vec::with_capacity(config.network_cores);
        let mut incoming = Vec::with_capacity(config.network_cores);
        let cache_feeds = payload_cache::CacheFeed::for_cores(config.network_cores);
        for (index, cache_feed) in cache_feeds.into_iter().enumerate() {
            let (handed, taken) = flume::unbounded();
            incoming.push(handed);
            // Two messages: stop (drain), then hurry (close now).
            let (stop, shutdown) = flume::bounded(2);
            let metrics = Arc::new(metrics::CoreMetrics::new(
                Arc::default(),
                config.metrics_listen.is_some(),
            ));
            core_metrics.push(metrics.clone());
            let settings = network_core::CoreSettings {
                index,
                cpu: config.network_core_cpus.as_ref().map(|cpus| cpus[index]),
                incoming: taken,
                engine: self.engine.clone(),
                counters: counters.clone(),
                metrics,
                payload_cache_bytes: config.payload_cache_bytes_per_core,
                cache_feed,
                token_digest,
                tenants: self.tenants.clone(),
                limits: config.limits,
                replication: self.replication().cloned(),
                advertise: advertised(config, self.local_addr),
                remote_acks: remote_ack_settings(config),
                drain_timeout: config.drain_timeout,
                shutdown,
            };
            self.stop_cores.push(stop);
            self.cores.push(network_core::start(settings)?);
        }
        Ok(StartedCores {
            incoming,
            metrics: core_metrics,
        })
    }

    /// Reads the tenants file again (SIGHUP): new tenants are registered and their tokens
    /// let in from the next HELLO on, removed tokens refused from then on; connections already
    /// open keep what HELLO gave them. A file that fails a check changes nothing: the old one
    /// stays in force and the log says why. Nothing to do without `--tenants-file`.
    pub fn reload_tenants(&self) {
        let Some(tenants) = &self.tenants else {
            tracing::info!("SIGHUP: no --tenants-file to read again");
            return;
        };
        match tenants.reload(&self.engine) {
            Ok(count) => {
                tracing::info!(path = %tenants.path().display(), tenants = count, "tenants file read again");
            }
            Err(error) => tracing::error!(
                %error,
                "the tenants file was not taken: the one read before is kept in force; fix \
                 the file and send SIGHUP again"
            ),
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Where `GET /metrics` is served, when `metrics_listen` was set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
            .as_ref()
            .map(metrics::MetricsEndpoint::local_addr)
            .or_else(|| {
                let console = self.console.as_ref()?;
                console.serves_metrics().then(|| console.local_addr())
            })
    }

    /// Where the web console is served, when `console_listen` was set.
    pub fn console_addr(&self) -> Option<SocketAddr> {
        self.console
            .as_ref()
            .map(console::ConsoleEndpoint::local_addr)
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// A stalled standby restored its replica afresh: stop this server and start it again
    /// (on the same addresses), which puts the fresh restore in place (issue 46).
    pub fn fresh_restore_ready(&self) -> bool {
        self.follower
            .as_ref()
            .is_some_and(ctxstore_replica::Follower::fresh_restore_ready)
    }

    /// This server shipped as the primary and another took its prefix over (a lease renewal
    /// refused, a seal or a newer epoch found): it refuses writes and ships nothing more
    /// (decision 0031 §8; `--rejoin standby` then makes it a standby).
    pub fn fenced(&self) -> bool {
        self.replication().is_some_and(|stats| {
            stats.role() == Some(ctxstore_replica::ReplicationRole::Primary)
                && stats.state() == ctxstore_replica::ReplicationState::Fenced
        })
    }

    /// Replication's figures, when the server replicates.
    pub fn replication(&self) -> Option<&std::sync::Arc<ctxstore_replica::ReplicationStats>> {
        self.replicator
            .as_ref()
            .map(|replicator| replicator.stats())
            .or_else(|| self.follower.as_ref().map(|follower| follower.stats()))
            .or(self.waiting.as_ref())
    }

    /// A handle that cuts a graceful stop short from another thread (a second signal).
    pub fn hurry_handle(&self) -> HurryHandle {
        HurryHandle {
            cores: self.stop_cores.clone(),
        }
    }

    /// Graceful stop: the listening socket is closed first (from then on a connect is
    /// refused), then cores stop reading, answer and write what is in flight for at most
    /// `drain_timeout`, then close their connections hard; then the engine finishes its
    /// queues, syncs and closes. When it returns, no socket of the server exists any more.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        if let Some(acceptor) = self.acceptor.take() {
            acceptor.stop();
        }
        if let Some(metrics) = self.metrics.take() {
            metrics.stop();
        }
        if let Some(console) = self.console.take() {
            console.stop();
        }
        for stop in &self.stop_cores {
            let _ = stop.try_send(());
        }
        for core in self.cores.drain(..) {
            let _ = core.join();
        }
        self.stop_cores.clear();
        // No write is in flight any more: ship what is durable once more, then close.
        if let Some(replicator) = self.replicator.take() {
            replicator.stop();
        }
        if let Some(follower) = self.follower.take()
            && let Err(error) = follower.stop()
        {
            tracing::warn!(%error, "the standby's last poll failed");
        }
        self.engine.shutdown();
        if let Some(scratch) = self.scratch.take() {
            if let Err(error) = std::fs::remove_dir_all(&scratch) {
                tracing::warn!(%error, dir = %scratch.display(), "removing the waiting standby's empty store");
            }
            tracing::info!("the waiting standby's empty store is closed");
            return;
        }
        tracing::info!("ctxstore server stopped");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.stop();
            return;
        }
        // compio aborts the process when a panicking thread wakes one of its tasks; stop
        // from a thread that is not unwinding.
        let mut server = Server {
            local_addr: self.local_addr,
            engine: self.engine.clone(),
            acceptor: self.acceptor.take(),
            metrics: self.metrics.take(),
            console: self.console.take(),
            cores: std::mem::take(&mut self.cores),
            stop_cores: std::mem::take(&mut self.stop_cores),
            replicator: self.replicator.take(),
            follower: self.follower.take(),
            waiting: self.waiting.take(),
            scratch: self.scratch.take(),
            tenants: self.tenants.take(),
            stopped: std::mem::replace(&mut self.stopped, true),
        };
        let _ = std::thread::spawn(move || server.stop()).join();
    }
}

/// Cuts a graceful stop short: every connection is closed now, written or not; the engine
/// still finishes its queues and syncs.
#[derive(Clone, Debug)]
pub struct HurryHandle {
    cores: Vec<flume::Sender<()>>,
}

impl HurryHandle {
    pub fn hurry(&self) {
        for core in &self.cores {
            // A core that has not been told to stop yet gets both messages: stop, then hurry.
            let _ = core.try_send(());
            let _ = core.try_send(());
        }
    }
}

/// The HOST:PORT this server gives its replica as its own, as `attach_replication` does:
/// `--replica-advertise`, else the bound address; empty when it neither replicates nor
/// follows.
/// Remote acknowledgements as the cores see them: the server's default and timeout, and the
/// replicator's tickets (a standby's, once promoted) when it replicates.
fn remote_ack_settings(config: &ServerConfig) -> remote_acks::RemoteAckSettings {
    let ship = config
        .replication
        .as_ref()
        .or(config.follow.as_ref().map(|follow| &follow.ship));
    remote_acks::RemoteAckSettings {
        default: config.ack_after,
        timeout: config.remote_ack_timeout,
        acks: ship.map(|ship| ship.remote_acks.clone()),
    }
}

fn advertised(config: &ServerConfig, local_addr: SocketAddr) -> String {
    let ship = config
        .replication
        .as_ref()
        .or(config.follow.as_ref().map(|follow| &follow.ship));
    match ship {
        None => String::new(),
        Some(ship) if ship.advertise.is_empty() => local_addr.to_string(),
        Some(ship) => ship.advertise.clone(),
    }
}

/// Why replication could not start, in one line (issue 44: an unreachable object store printed
/// the same error four or five times, S3's XML body each time, and named no flag to check).
/// An object store that did not answer names where it was asked and what to do; any other
/// failure (a foreign prefix, a damaged object) keeps its own message, which says what it found.
fn replication_start_error(
    error: ctxstore_replica::ReplicaError,
    replication: &ctxstore_replica::ShipConfig,
) -> anyhow::Error {
    let ctxstore_replica::ReplicaError::Store { operation, key, .. } = &error else {
        return anyhow::Error::new(error).context("starting replication");
    };
    let endpoint = replication
        .s3
        .endpoint
        .clone()
        .or_else(|| std::env::var("AWS_ENDPOINT").ok())
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
        .unwrap_or_else(|| "AWS's default endpoint (no --replica-s3-endpoint)".into());
    anyhow::anyhow!(
        "starting replication: the object store at {endpoint} failed {operation} {key} of \
         {url}: {cause}. Check --replica-s3-endpoint (and --replica-s3-allow-http for \
         http://), the AWS_* credentials and that the bucket exists; or start with \
         --replicate-start-anyway to serve now and ship once it answers",
        url = replication.url,
        cause = innermost_cause(&error),
    )
}

/// The deepest source of `error`, on one line and without a response body (S3 answers with
/// XML): what the operator needs of it, short.
fn innermost_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut deepest = error;
    while let Some(source) = deepest.source() {
        deepest = source;
    }
    let text = deepest.to_string();
    let line = text
        .split(['<', '\n'])
        .next()
        .unwrap_or_default()
        .trim()
        .trim_end_matches(':')
        .to_string();
    let mut short: String = line.chars().take(240).collect();
    if short.len() < line.len() {
        short.push('…');
    }
    if short.is_empty() {
        "no reason given".into()
    } else {
        short
    }
}
