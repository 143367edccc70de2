//! The web console (issue 37, decision 0025): a read-only view of the store served over HTTP
//! at `--console-listen`: the store's figures, contexts, one context's branch tree, a turn's
//! payload, a diff of two turns, the store-wide find by label.
//!
//! - this file: `ConsoleEndpoint`, one thread running a current-thread tokio runtime with
//!   hyper's HTTP/1 server, under `ConsoleLimits` (connections, header size and time, a
//!   connection's lifetime, engine calls at once); the routes;
//! - `api`: the JSON API over the engine's public reads (docs/console-api.md);
//! - `auth`: who may look, and as whom (a token as a bearer or a session cookie after
//!   `/login`: the operator's sees the store, a tenant's its own data; without a token,
//!   loopback only, and only requests naming a loopback host);
//! - `limiter`: how many wrong tokens an address may send (then it waits, `429`);
//! - `assets`: the built front-end (`console/dist`, committed) embedded in the binary;
//! - `history`: the store's counters sampled every few seconds, for the charts of rates;
//! - `http`: responses and the headers every one carries (a strict Content-Security-Policy).
//!
//! Nothing here writes to the store. The console shares a socket with the metrics endpoint
//! when both are given the same address: it then answers `GET /metrics` too, unauthenticated
//! like the endpoint it replaces.

mod api;
mod assets;
mod auth;
mod history;
mod http;
mod limiter;

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use ctxstore_engine::Engine;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::Semaphore;

use crate::metrics::MetricsSource;
pub use assets::ASSETS;

/// A limit on everything a browser (or anyone who reaches the port) can make the console
/// hold or do, unit last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsoleLimits {
    /// Open connections; more are closed at once (64).
    pub connections_max: usize,
    /// A request's line and headers (16 KiB; larger: 431).
    pub request_head_bytes_max: usize,
    /// A request's body: only `POST /login` has one (4 KiB; larger: 413).
    pub request_body_bytes_max: usize,
    /// A request's line and headers must arrive within this long (10 s).
    pub request_head_timeout: Duration,
    /// A connection is closed after this long, whatever it does (5 min): slow readers and
    /// keep-alive connections cannot pin a slot.
    pub connection_lifetime_max: Duration,
    /// Engine reads running at once (on tokio's blocking threads); more wait (4).
    pub engine_calls_max: usize,
    /// Contexts one listing page may return (500).
    pub contexts_page_max: u32,
    /// Contexts one listing or tree looks at (100,000): listings are sorted by update time,
    /// which the engine does not index, so a listing reads its matches and sorts them.
    pub contexts_scan_max: usize,
    /// Turns one tree returns (100,000): past it, the newest are returned, marked truncated.
    pub tree_turns_max: usize,
    /// Payload bytes a turn's view carries (256 KiB): a larger payload is shown truncated,
    /// with its size.
    pub payload_shown_bytes_max: usize,
    /// Turns one find page may return (1,000, the engine's own limit).
    pub find_page_max: u32,
    /// Wrong tokens (`/login` or a bearer) an address may send before it must wait (5).
    pub login_failures_free_max: u32,
    /// The first wait after those (1 s); each further wrong token doubles it.
    pub login_wait_min: Duration,
    /// The longest wait (5 min).
    pub login_wait_max: Duration,
    /// An address's wrong tokens are forgotten this long after its last one (15 min).
    pub login_failures_forget_after: Duration,
    /// Addresses whose wrong tokens are counted apart (4,096); past it, new ones share one
    /// count.
    pub login_addresses_max: usize,
}

impl ConsoleLimits {
    /// What the HTTP server itself enforces of these.
    fn http(&self) -> crate::http_server::HttpLimits {
        crate::http_server::HttpLimits {
            connections_max: self.connections_max,
            request_head_bytes_max: self.request_head_bytes_max,
            request_head_timeout: self.request_head_timeout,
            connection_lifetime_max: self.connection_lifetime_max,
        }
    }
}

impl Default for ConsoleLimits {
    fn default() -> Self {
        ConsoleLimits {
            connections_max: 64,
            request_head_bytes_max: 16 * 1024,
            request_body_bytes_max: 4 * 1024,
            request_head_timeout: Duration::from_secs(10),
            connection_lifetime_max: Duration::from_secs(300),
            engine_calls_max: 4,
            contexts_page_max: 500,
            contexts_scan_max: 100_000,
            tree_turns_max: 100_000,
            payload_shown_bytes_max: 256 * 1024,
            find_page_max: ctxstore_engine::turns::FIND_PAGE_MAX,
            login_failures_free_max: 5,
            login_wait_min: Duration::from_secs(1),
            login_wait_max: Duration::from_secs(300),
            login_failures_forget_after: Duration::from_secs(15 * 60),
            login_addresses_max: 4096,
        }
    }
}

/// What the console needs to start.
#[derive(Clone, Debug)]
pub struct ConsoleSettings {
    pub listen: SocketAddr,
    pub engine: Engine,
    /// The server's token: when set, the console requires it (bearer or session cookie).
    pub token: Option<String>,
    /// The tenants file in force (`--tenants-file`): a tenant's token opens the console on
    /// its own data.
    pub tenants: Option<Arc<crate::tenancy::Tenants>>,
    pub limits: ConsoleLimits,
    /// Replication's figures, when the server replicates.
    pub replication: Option<Arc<ctxstore_replica::ReplicationStats>>,
    /// Remote acknowledgements' figures, when the server replicates (ROLE's `remote_*`);
    /// without them, those of `metrics` when it is served here; else none (`null` in
    /// `GET /api/store`).
    pub remote_acks: Option<Arc<ctxstore_replica::RemoteAcks>>,
    /// Serve `GET /metrics` on the console's socket too (both given the same address).
    pub metrics: Option<MetricsSource>,
    /// How often the store's counters are sampled for the charts (5 s).
    pub sample_interval: Duration,
}

impl ConsoleSettings {
    pub fn new(listen: SocketAddr, engine: Engine) -> ConsoleSettings {
        ConsoleSettings {
            listen,
            engine,
            token: None,
            tenants: None,
            limits: ConsoleLimits::default(),
            replication: None,
            remote_acks: None,
            metrics: None,
            sample_interval: Duration::from_secs(5),
        }
    }
}

/// Everything a request may use; shared by the connections of the console's thread.
struct Console {
    /// The store-wide handle; a tenant's requests read through `Engine::scoped`.
    engine: Engine,
    auth: auth::Auth,
    tenants: Option<Arc<crate::tenancy::Tenants>>,
    limits: ConsoleLimits,
    replication: Option<Arc<ctxstore_replica::ReplicationStats>>,
    remote_acks: Option<Arc<ctxstore_replica::RemoteAcks>>,
    metrics: Option<MetricsSource>,
    history: history::History,
    engine_calls: Semaphore,
    started: std::time::Instant,
}

/// The console's thread and its socket.
pub struct ConsoleEndpoint {
    addr: SocketAddr,
    serves_metrics: bool,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ConsoleEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleEndpoint")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl ConsoleEndpoint {
    /// Binds `settings.listen` and starts the console's thread. When it returns, the
    /// console accepts connections.
    pub fn start(settings: ConsoleSettings) -> anyhow::Result<ConsoleEndpoint> {
        let serves_metrics = settings.metrics.is_some();
        let listener = std::net::TcpListener::bind(settings.listen).with_context(|| {
            format!(
                "serving the console on {} (is another process using it? choose another \
                 --console-listen)",
                settings.listen
            )
        })?;
        let addr = listener.local_addr().with_context(|| {
            format!("the console listener on {} has no address", settings.listen)
        })?;
        listener
            .set_nonblocking(true)
            .with_context(|| format!("the console listener on {addr}"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(settings.limits.engine_calls_max.max(1))
            .thread_name("ctxstore-console-read")
            .build()
            .context("starting the console's runtime")?;
        let mut auth = auth::Auth::new(settings.token.clone(), settings.limits)
            .context("making the console's session key")?;
        if let Some(tenants) = &settings.tenants {
            anyhow::ensure!(
                settings.token.is_some(),
                "a console with tenants needs the server's token (--token-file)"
            );
            auth = auth.with_tenants(tenants.clone(), settings.engine.clone());
        }
        let console = Arc::new(Console {
            auth,
            tenants: settings.tenants,
            engine: settings.engine,
            limits: settings.limits,
            replication: settings.replication,
            remote_acks: settings.remote_acks.or_else(|| {
                settings
                    .metrics
                    .as_ref()
                    .and_then(|metrics| metrics.remote_acks.clone())
            }),
            metrics: settings.metrics,
            history: history::History::new(),
            engine_calls: Semaphore::new(settings.limits.engine_calls_max.max(1)),
            started: std::time::Instant::now(),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let interval = settings.sample_interval;
        let thread = std::thread::Builder::new()
            .name("ctxstore-console".into())
            .spawn(move || {
                runtime.block_on(serve(console, listener, interval, stopped));
                // Reads still running finish on their own; the thread does not wait long.
                runtime.shutdown_timeout(Duration::from_secs(2));
            })
            .context("starting the console thread")?;
        tracing::info!(console = %addr, "serving the web console");
        Ok(ConsoleEndpoint {
            addr,
            serves_metrics,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether it answers `GET /metrics` too (the metrics endpoint shares its socket).
    pub fn serves_metrics(&self) -> bool {
        self.serves_metrics
    }

    /// Closes the socket and every connection, and joins the thread: when it returns, a
    /// connect is refused.
    pub fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ConsoleEndpoint {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The console's HTTP server (`http_server.rs`) under its limits, the sampler beside it.
async fn serve(
    console: Arc<Console>,
    listener: std::net::TcpListener,
    sample_interval: Duration,
    stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%error, "console: the listener cannot join the runtime; no console");
            return;
        }
    };
    let sampler = tokio::spawn(history::sample(console.clone(), sample_interval));
    let limits = console.limits.http();
    crate::http_server::serve(
        "console",
        listener,
        limits,
        stopped,
        move |request, peer| {
            let console = console.clone();
            async move { answer(&console, request, peer).await }
        },
    )
    .await;
    sampler.abort();
}

/// Whether `path` is one of the front-end's pages, and which object it shows.
enum Page {
    /// `/`, `/store`, `/find`, `/compare/A/B`: nothing to look up first.
    Plain,
    Context(String),
    Turn(String),
    Unknown,
}

fn page_of(path: &str) -> Page {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        [""] | ["store"] | ["find"] | ["compare", _, _] => Page::Plain,
        ["contexts", reference] if !reference.is_empty() => Page::Context(reference.to_string()),
        ["turns", turn] if !turn.is_empty() => Page::Turn(turn.to_string()),
        _ => Page::Unknown,
    }
}

/// One request → one response. Every response carries the console's security headers.
async fn answer(
    console: &Console,
    request: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    let mut response = route(console, request, peer).await;
    http::secure(&mut response);
    response
}

async fn route(
    console: &Console,
    request: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_string();
    if path.len() + request.uri().query().map_or(0, str::len) > http::URI_BYTES_MAX {
        return http::error(
            StatusCode::URI_TOO_LONG,
            "TOO_LARGE",
            &format!("the URI is longer than {} bytes", http::URI_BYTES_MAX),
        );
    }
    if let Err(refusal) = console.auth.check_host(request.headers(), peer) {
        return *refusal;
    }
    let method = request.method().clone();
    let readable = method == Method::GET || method == Method::HEAD;
    // The metrics endpoint shares this socket: unauthenticated, as it is on its own.
    if let Some(metrics) = &console.metrics
        && (path == "/metrics")
    {
        if !readable {
            return http::error(StatusCode::METHOD_NOT_ALLOWED, "METHOD", "use GET");
        }
        return serve_metrics(console, metrics).await;
    }
    if let Some(asset) = assets::public(&path) {
        if !readable {
            return http::error(StatusCode::METHOD_NOT_ALLOWED, "METHOD", "use GET");
        }
        return http::asset(asset);
    }
    if path == "/login" || path == "/logout" {
        return session(console, request, peer).await;
    }
    let api = path == "/api" || path.starts_with("/api/");
    let viewer = match console.auth.allows(request.headers(), peer) {
        auth::Access::Allowed(viewer) => viewer,
        auth::Access::Wait(wait) => return auth::wait_error(wait),
        auth::Access::Denied => {
            return if api {
                http::error(
                    StatusCode::UNAUTHORIZED,
                    "UNAUTHORIZED",
                    "this console needs the server's token: send Authorization: Bearer \
                     TOKEN, or log in at /login",
                )
            } else {
                http::redirect("/login")
            };
        }
    };
    if !readable {
        return http::error(
            StatusCode::METHOD_NOT_ALLOWED,
            "METHOD",
            "the console is read-only: use GET",
        );
    }
    if api {
        let query = request.uri().query().unwrap_or("").to_string();
        return api::answer(console, &viewer, &path, &query).await;
    }
    page(console, &viewer, &path)
}

/// `/login` and `/logout`: the pages that open and close a session, before any access check.
async fn session(
    console: &Console,
    request: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    match (request.uri().path(), request.method()) {
        ("/login", &Method::GET) => console.auth.login_page(),
        ("/login", &Method::POST) => {
            let https = auth::reached_over_https(request.headers());
            let body = read_body(console, request).await;
            match body {
                Ok(body) => console.auth.login(&body, peer, https).await,
                Err(refusal) => *refusal,
            }
        }
        ("/logout", &Method::POST) => console
            .auth
            .logout(auth::reached_over_https(request.headers())),
        _ => http::error(StatusCode::METHOD_NOT_ALLOWED, "METHOD", "use GET or POST"),
    }
}

/// A front-end page: the index page, 404 when the path or the object it shows is unknown.
fn page(console: &Console, viewer: &auth::Viewer, path: &str) -> Response<Full<Bytes>> {
    let engine = console.engine_of(viewer);
    let found = match page_of(path) {
        Page::Plain => true,
        Page::Unknown => false,
        Page::Context(reference) => api::context_exists(&engine, &reference),
        Page::Turn(turn) => api::turn_exists(&engine, &turn),
    };
    http::index(if found {
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    })
}

/// The body of a request, at most `request_body_bytes_max`, within the head timeout.
async fn read_body(
    console: &Console,
    request: Request<Incoming>,
) -> Result<Bytes, Box<Response<Full<Bytes>>>> {
    use hyper::body::Body as _;
    let limit = console.limits.request_body_bytes_max;
    let too_large = || {
        http::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "TOO_LARGE",
            &format!("a request body is at most {limit} bytes"),
        )
    };
    // A declared length over the limit is refused before a byte of the body is read.
    if request.body().size_hint().lower() > limit as u64 {
        return Err(Box::new(too_large()));
    }
    let reading = Limited::new(request.into_body(), limit).collect();
    match tokio::time::timeout(console.limits.request_head_timeout, reading).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(_)) => Err(Box::new(too_large())),
        Err(_) => Err(Box::new(http::error(
            StatusCode::REQUEST_TIMEOUT,
            "TIMEOUT",
            "the request body did not arrive in time",
        ))),
    }
}

async fn serve_metrics(console: &Console, metrics: &MetricsSource) -> Response<Full<Bytes>> {
    let metrics = metrics.clone();
    // A scrape stats the data directory's files: off the runtime's thread.
    let rendered = console.blocking(move || metrics.render()).await;
    match rendered {
        Ok(Ok(text)) => http::text(StatusCode::OK, prometheus::TEXT_FORMAT, text),
        Ok(Err(error)) => http::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            &format!("encoding metrics failed: {error}"),
        ),
        Err(refusal) => *refusal,
    }
}

impl Console {
    /// The handle `viewer` reads through, as its protocol session would: a tenant's sees its
    /// own data only, the operator's its own (TenantId 0: what the store held before it had
    /// tenants), and another tenant's ids answer as absent ones (decision 0032 §2).
    fn engine_of(&self, viewer: &auth::Viewer) -> Engine {
        let tenant_id = match viewer {
            auth::Viewer::Operator => ctxstore_engine::TenantId::OPERATOR,
            auth::Viewer::Tenant { tenant_id, .. } => *tenant_id,
        };
        self.engine.scoped(tenant_id)
    }

    /// Runs an engine read on a blocking thread, at most `engine_calls_max` at once.
    async fn blocking<T: Send + 'static>(
        &self,
        read: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Box<Response<Full<Bytes>>>> {
        let unavailable = |what: &str| {
            Box::new(http::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "UNAVAILABLE",
                &format!("the console is stopping ({what}); retry"),
            ))
        };
        let _permit = self
            .engine_calls
            .acquire()
            .await
            .map_err(|_| unavailable("no reads are taken"))?;
        match tokio::task::spawn_blocking(read).await {
            Ok(value) => Ok(value),
            // A broken invariant in a read: fail fast, as the engine's threads do (the
            // restart recovers); never an answer from a half-checked state.
            Err(error) if error.is_panic() => {
                tracing::error!(%error, "console: a read panicked; aborting");
                std::process::abort();
            }
            Err(_) => Err(unavailable("a read was cut short")),
        }
    }
}
