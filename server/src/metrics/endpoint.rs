//! `GET /metrics` served on its own thread, from a [`MetricsSource`]: hyper's HTTP/1 server
//! on a current-thread tokio runtime, as the console's (`console/mod.rs`).

use std::convert::Infallible;
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
            .spawn(move || runtime.block_on(serve(listener, source, stopped)))
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

/// The accept loop: a task per connection, until the endpoint stops (or is dropped); then
/// the socket is closed and the connections are cut.
async fn serve(
    listener: tokio::net::TcpListener,
    source: MetricsSource,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let source = Arc::new(source);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // EMFILE and the like: wait rather than spin.
                    tracing::warn!(%error, "metrics endpoint: accepting a request failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let source = source.clone();
        tasks.spawn(async move {
            // Rendered on the runtime's one thread: scrapes are answered one at a time.
            let service = hyper::service::service_fn(move |request| {
                let response = answer(&source, &request);
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(error) = connection.await {
                tracing::debug!(%error, %peer, "metrics endpoint: writing a response failed");
            }
        });
        // Reap finished connections so the set does not grow.
        while tasks.try_join_next().is_some() {}
    }
    // The socket closes here, before the thread ends and `stop` returns.
    drop(listener);
    tasks.shutdown().await;
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

    /// `stop` takes the listening socket away before it returns: the very next connect is
    /// refused (not accepted by the kernel and then reset).
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
