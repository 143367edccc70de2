//! `GET /metrics` served on its own thread, from a [`MetricsSource`]: the crate's one HTTP
//! server (`http_server.rs`, the console's too) on a current-thread tokio runtime, under
//! `LIMITS`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::MetricsSource;
use crate::http_server::{self, HttpLimits};

/// What a scraper (or anyone who reaches the port) may hold: a few connections, small
/// request heads sent at once, a connection's life of a minute (scrapers reconnect).
const LIMITS: HttpLimits = HttpLimits {
    connections_max: 16,
    request_head_bytes_max: 8 * 1024,
    request_head_timeout: Duration::from_secs(10),
    connection_lifetime_max: Duration::from_secs(60),
};

/// The media type of every answer but a scrape's.
const TEXT_PLAIN: &str = "text/plain; charset=UTF-8";

/// `GET /metrics` on its own thread. Any other path is 404, any other method 405. Scrapes
/// are answered one at a time (the thread renders each in turn); each costs a walk over the
/// counters and a `stat` of the data directory's files.
pub struct MetricsEndpoint {
    addr: SocketAddr,
    /// Sent (or dropped) to stop: the accept loop ends and closes the socket.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MetricsEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsEndpoint")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MetricsEndpoint {
    pub fn start(listen: SocketAddr, source: MetricsSource) -> anyhow::Result<MetricsEndpoint> {
        let listener = std::net::TcpListener::bind(listen).with_context(|| {
            format!(
                "serving metrics on {listen} (is another process using it? choose another \
                 --metrics-listen)"
            )
        })?;
        let addr = listener
            .local_addr()
            .with_context(|| format!("the metrics listener on {listen} has no address"))?;
        listener
            .set_nonblocking(true)
            .with_context(|| format!("the metrics listener on {addr}"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .with_context(|| format!("serving metrics on {addr}"))?;
        let listener = {
            // The socket joins the runtime here, so that a failure is the start's.
            let _runtime = runtime.enter();
            tokio::net::TcpListener::from_std(listener)
                .with_context(|| format!("serving metrics on {addr}"))?
        };
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("ctxstore-metrics".into())
            .spawn(move || {
                let source = Arc::new(source);
                let route = move |request: Request<Incoming>, _peer: SocketAddr| {
                    // Rendered on the runtime's one thread: scrapes are answered one at a time.
                    std::future::ready(answer(&source, &request))
                };
                runtime.block_on(http_server::serve(
                    "metrics endpoint",
                    listener,
                    LIMITS,
                    stopped,
                    route,
                ));
            })
            .context("starting the metrics thread")?;
        tracing::info!(metrics = %addr, "serving Prometheus metrics at /metrics");
        Ok(MetricsEndpoint {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops answering and joins the thread. The thread closes the listening socket before
    /// it ends, so from the moment `stop` returns connections are refused.
    pub fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One request, one answer: the request target must be `/metrics` (a query allowed), then
/// the method GET.
fn answer(source: &MetricsSource, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let target = request.uri().to_string();
    if target != "/metrics" && !target.starts_with("/metrics?") {
        return text(StatusCode::NOT_FOUND, "not found: scrape /metrics\n".into());
    }
    if request.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into());
    }
    match source.render() {
        Ok(rendered) => {
            let mut response = text(StatusCode::OK, rendered);
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(prometheus::TEXT_FORMAT),
            );
            response
        }
        Err(error) => {
            tracing::error!(%error, "metrics endpoint: encoding failed");
            let body = format!("encoding metrics failed: {error}\n");
            text(StatusCode::INTERNAL_SERVER_ERROR, body)
        }
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(TEXT_PLAIN));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::ServerCounters;
    use ctxstore_engine::Engine;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    fn engine(dir: &std::path::Path) -> Engine {
        let mut config = ctxstore_engine::EngineConfig::new(dir.join("data"));
        config.limits.log_preallocate_bytes = 64 * 1024;
        Engine::open(config).unwrap()
    }

    fn endpoint(engine: &Engine, dir: &std::path::Path) -> MetricsEndpoint {
        let source = MetricsSource {
            engine: engine.clone(),
            counters: Arc::new(ServerCounters::default()),
            cores: Vec::new(),
            data_dir: dir.join("data"),
            payload_cache_bytes_per_core: 0,
            replication: None,
            remote_acks: None,
            tenants: None,
        };
        // Outside the ephemeral range: a port the kernel picked could be handed to another
        // test's listener between `stop` and the refused connect.
        let listen = format!("127.0.0.1:{}", ctxstore_testsupport::fixed_port());
        MetricsEndpoint::start(listen.parse().unwrap(), source).unwrap()
    }

    /// A scrape's answer over a new connection (HTTP/1.0: the server closes after it); empty
    /// when the server closed it unanswered.
    fn scrape(addr: SocketAddr) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        let mut response = String::new();
        // A connection the server closed unanswered may refuse the write or the read.
        if write!(stream, "GET /metrics HTTP/1.0\r\n\r\n").is_ok() {
            let _ = stream.read_to_string(&mut response);
        }
        response
    }

    /// `stop` takes the listening socket away before it returns: the very next connect is
    /// refused (not accepted by the kernel and then reset).
    #[test]
    fn stop_refuses_connections_before_it_returns() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(dir.path());
        for _ in 0..5 {
            let endpoint = endpoint(&engine, dir.path());
            let addr = endpoint.local_addr();
            let response = scrape(addr);
            assert!(response.starts_with("HTTP/1.0 200"), "{response}");
            endpoint.stop();
            let error = TcpStream::connect(addr)
                .map(|_| ())
                .expect_err("connected after stop");
            assert_eq!(
                error.kind(),
                std::io::ErrorKind::ConnectionRefused,
                "{error}"
            );
        }
        engine.shutdown();
    }

    /// Idle connections hold at most `LIMITS.connections_max` slots: one more is closed
    /// unanswered, and a slot given back serves the next scrape.
    #[test]
    fn idle_connections_cannot_take_more_than_their_slots() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(dir.path());
        let endpoint = endpoint(&engine, dir.path());
        let addr = endpoint.local_addr();
        let mut idle: Vec<TcpStream> = (0..LIMITS.connections_max)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        // Each idle connection is accepted and holds its slot once the server has read it.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            scrape(addr),
            "",
            "a connection past the limit is closed unanswered"
        );
        drop(idle.pop());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let response = scrape(addr);
            if response.starts_with("HTTP/1.0 200") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no slot came back: {response:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(idle);
        endpoint.stop();
        engine.shutdown();
    }
}
