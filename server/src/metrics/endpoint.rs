//! `GET /metrics` served on its own thread, from a [`MetricsSource`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use anyhow::Context;

use super::MetricsSource;

/// `GET /metrics` on its own thread (tiny_http). Any other path is 404, any other method 405.
/// Scrapes are answered one at a time; each costs a walk over the counters and a `stat` of
/// the data directory's files.
pub struct MetricsEndpoint {
    http: Arc<tiny_http::Server>,
    /// The listening socket tiny_http accepts on (a second descriptor of it): `stop` shuts it
    /// down, since tiny_http's own accept thread, which holds the socket, is not joinable and
    /// closes it only moments after the server is dropped.
    listener: std::net::TcpListener,
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
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
        let control = listener
            .try_clone()
            .with_context(|| format!("the metrics listener on {addr}"))?;
        let http = tiny_http::Server::from_listener(listener, None)
            .map_err(|error| anyhow::anyhow!("{error}"))
            .with_context(|| format!("serving metrics on {addr}"))?;
        let http = Arc::new(http);
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let (http, stopping) = (http.clone(), stopping.clone());
            std::thread::Builder::new()
                .name("ctxstore-metrics".into())
                .spawn(move || serve(&http, &stopping, &source))
                .context("starting the metrics thread")?
        };
        tracing::info!(metrics = %addr, "serving Prometheus metrics at /metrics");
        Ok(MetricsEndpoint {
            http,
            listener: control,
            addr,
            stopping,
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops answering and joins the thread. The listening socket is shut down first, so
    /// from the moment `stop` is called connections are refused (the kernel takes the socket
    /// out of the listening state at once; tiny_http's accept thread then fails its `accept`
    /// and exits, closing the last descriptor).
    pub fn stop(mut self) {
        self.stopping.store(true, Ordering::Release);
        if let Err(error) =
            socket2::SockRef::from(&self.listener).shutdown(std::net::Shutdown::Both)
        {
            tracing::warn!(%error, addr = %self.addr, "metrics endpoint: shutting the listener down failed");
        }
        self.http.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(http: &tiny_http::Server, stopping: &AtomicBool, source: &MetricsSource) {
    loop {
        let request = match http.recv() {
            Ok(request) => request,
            Err(_) if stopping.load(Ordering::Acquire) => return,
            Err(error) => {
                tracing::warn!(%error, "metrics endpoint: accepting a request failed");
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        let response = if request.url() != "/metrics" && !request.url().starts_with("/metrics?") {
            tiny_http::Response::from_string("not found: scrape /metrics\n").with_status_code(404)
        } else if *request.method() != tiny_http::Method::Get {
            tiny_http::Response::from_string("use GET\n").with_status_code(405)
        } else {
            match source.render() {
                Ok(text) => {
                    let response = tiny_http::Response::from_string(text);
                    match tiny_http::Header::from_bytes(
                        &b"Content-Type"[..],
                        prometheus::TEXT_FORMAT.as_bytes(),
                    ) {
                        Ok(header) => response.with_header(header),
                        Err(()) => response,
                    }
                }
                Err(error) => {
                    tracing::error!(%error, "metrics endpoint: encoding failed");
                    tiny_http::Response::from_string(format!("encoding metrics failed: {error}\n"))
                        .with_status_code(500)
                }
            }
        };
        if let Err(error) = request.respond(response) {
            tracing::debug!(%error, "metrics endpoint: writing a response failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::ServerCounters;
    use ctxstore_engine::Engine;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    /// `stop` takes the listening socket away before it returns: the very next connect is
    /// refused (tiny_http alone closes it from its accept thread a moment after it is dropped,
    /// so a connect right after would be accepted by the kernel and then reset).
    #[test]
    fn stop_refuses_connections_before_it_returns() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = ctxstore_engine::EngineConfig::new(dir.path().join("data"));
        config.limits.log_preallocate_bytes = 64 * 1024;
        let engine = Engine::open(config).unwrap();
        for _ in 0..5 {
            let source = MetricsSource {
                engine: engine.clone(),
                counters: Arc::new(ServerCounters::default()),
                cores: Vec::new(),
                data_dir: dir.path().join("data"),
                payload_cache_bytes_per_core: 0,
                replication: None,
            };
            let endpoint = MetricsEndpoint::start("127.0.0.1:0".parse().unwrap(), source).unwrap();
            let addr = endpoint.local_addr();
            let mut stream = TcpStream::connect(addr).unwrap();
            write!(stream, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).unwrap();
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
}
