//! The crate's one HTTP/1 server (issue 45: one HTTP server): hyper on the caller's
//! current-thread tokio runtime, under `HttpLimits` on connections, request heads and a
//! connection's life. The console (`console/`) and the metrics endpoint
//! (`metrics/endpoint.rs`) each run it on their own thread with their own routes and limits.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use tokio::sync::Semaphore;

/// What one endpoint lets anyone who reaches its port hold, unit last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Open connections; more are closed at once.
    pub connections_max: usize,
    /// A request's line and headers (larger: 431).
    pub request_head_bytes_max: usize,
    /// A request's line and headers must arrive within this long.
    pub request_head_timeout: Duration,
    /// A connection is closed after this long, whatever it does: slow readers and
    /// keep-alive connections cannot pin a slot.
    pub connection_lifetime_max: Duration,
}

/// The accept loop of `name`'s endpoint: a task per connection, at most `connections_max`,
/// each answered by `answer` and cut at `connection_lifetime_max`, until `stopped` fires (or
/// its sender is dropped). Then the listening socket is closed before the connections are
/// cut, so that a connect after this returns is refused.
pub async fn serve<A, F>(
    name: &'static str,
    listener: tokio::net::TcpListener,
    limits: HttpLimits,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
    answer: A,
) where
    A: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let answer = Arc::new(answer);
    let connections = Arc::new(Semaphore::new(limits.connections_max.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // EMFILE and the like: wait rather than spin.
                    tracing::warn!(%error, "{name}: accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = connections.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "{name}: connection limit reached; closed");
            continue;
        };
        let answer = answer.clone();
        tasks.spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let answered = answer(request, peer);
                async move { Ok::<_, Infallible>(answered.await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.request_head_timeout)
                .max_buf_size(limits.request_head_bytes_max.max(8192))
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            // Cut at the lifetime limit (Err) or ended by either side.
            if let Ok(Err(error)) =
                tokio::time::timeout(limits.connection_lifetime_max, connection).await
            {
                tracing::debug!(%error, %peer, "{name}: connection ended");
            }
            drop(slot);
        });
        // Reap finished connections so the set does not grow.
        while tasks.try_join_next().is_some() {}
    }
    // Dropping the listener closes the socket; then the connections are cut.
    drop(listener);
    tasks.shutdown().await;
}
