//! The client's transport: one TCP connection, pipelined. Any number of tasks may send on it
//! at once; each request gets a req_id, the writer task sends the frames that are ready in one
//! vectored write (counting the bytes it writes, `bytes_sent`), the reader task matches
//! answers to their requests by req_id, in whatever order they come, and acknowledges a
//! half-received answer at once (`ack_now`, `TCP_QUICKACK`, decision 0016). A request waits
//! for its answer at most its timeout, then forgets it (a late answer is dropped); when the
//! connection goes, every waiting request fails with the reason. A STREAM_FOLLOW is answered
//! by several frames with its req_id (`follow`): its route takes each frame into a bounded
//! queue and ends at the frame without the flag MORE. What a request may carry and which
//! version it needs is the client's (`client.rs`), not the transport's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use ctxstore_protocol::{ErrorCode, FrameReader, Response, decode_response, frame_flags};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::error::ClientError;

type Pending = Mutex<PendingState>;

/// Frames of one follow the reader may hold that its caller has not taken: past them the
/// reader stops reading the connection (TCP then pushes back on the server, which stops
/// pushing, decision 0027) rather than hold an unbounded queue.
pub(crate) const FOLLOW_FRAMES_QUEUED_MAX: usize = 64;

/// Where the answers to a req_id go.
enum Route {
    /// One answer.
    Once(oneshot::Sender<Result<Response, ClientError>>),
    /// A follow's frames, until the one without MORE (or an ERROR). Dropped when the
    /// connection goes: the receiver then sees its end.
    Frames(mpsc::Sender<Result<Response, ClientError>>),
}

#[derive(Default)]
struct PendingState {
    waiting: HashMap<u64, Route>,
    /// Set when the connection is gone: new requests fail at once with it.
    closed: Option<String>,
}

/// One connection's socket tasks and the requests waiting on it.
pub(crate) struct Connection {
    outgoing: mpsc::UnboundedSender<Vec<Bytes>>,
    pending: Arc<Pending>,
    next_req_id: AtomicU64,
    /// Request bytes the writer task wrote to the socket (HELLO included).
    bytes_sent: Arc<AtomicU64>,
    /// The reader task: aborted on drop, so that a peer that never writes or closes does not
    /// keep it (and the socket) alive.
    reader: tokio::task::AbortHandle,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The writer task ends when `outgoing` is dropped and then closes the socket.
        self.reader.abort();
        fail_all(&self.pending, "client dropped".into());
    }
}

impl Connection {
    /// The TCP connection, within `timeout` (`ClientConfig::connect_timeout`): a refusal or an
    /// unresolvable name is `ClientError::Connect`, the wait running out `ConnectTimeout`.
    pub(crate) async fn connect(addr: &str, timeout: Duration) -> Result<TcpStream, ClientError> {
        match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(reason)) => Err(ClientError::Connect {
                addr: addr.to_string(),
                reason,
            }),
            Err(_) => Err(ClientError::ConnectTimeout {
                addr: addr.to_string(),
                timeout,
            }),
        }
    }

    /// Starts the writer and reader tasks on a connected socket; answers over
    /// `response_bytes_max` close the connection.
    pub(crate) fn start(stream: TcpStream, response_bytes_max: u32) -> Connection {
        let _ = stream.set_nodelay(true);
        let (reader, writer) = stream.into_split();
        let (outgoing, queue) = mpsc::unbounded_channel();
        let pending: Arc<Pending> = Arc::default();
        let bytes_sent = Arc::new(AtomicU64::new(0));
        tokio::spawn(write_frames(
            writer,
            queue,
            pending.clone(),
            bytes_sent.clone(),
        ));
        let reader = tokio::spawn(read_frames(reader, pending.clone(), response_bytes_max));
        Connection {
            outgoing,
            pending,
            next_req_id: AtomicU64::new(1),
            bytes_sent,
            reader: reader.abort_handle(),
        }
    }

    /// The req_id of the next request.
    pub(crate) fn next_req_id(&self) -> u64 {
        self.next_req_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether the connection is known to be gone (a request sent now would fail at once,
    /// before anything is written).
    pub(crate) fn is_closed(&self) -> bool {
        self.pending
            .lock()
            .map_or(true, |state| state.closed.is_some())
    }

    /// Request bytes written to the socket since connect.
    pub(crate) fn bytes_sent(&self) -> u64 {
        self.bytes_sent.load(Ordering::Relaxed)
    }

    /// Sends the frame of request `req_id` and waits for its answer, at most `timeout`
    /// (`setting` names where it came from, `request` the request, for the error). An ERROR
    /// answer is `ClientError::Server`.
    pub(crate) async fn exchange(
        &self,
        req_id: u64,
        frame: Vec<Bytes>,
        request: &'static str,
        timeout: Option<Duration>,
        setting: &'static str,
    ) -> Result<Response, ClientError> {
        let answer = self.send(req_id, frame)?;
        let answer = match timeout {
            None => answer.await,
            Some(timeout) => match tokio::time::timeout(timeout, answer).await {
                Ok(answer) => answer,
                Err(_) => {
                    // Forget the waiter: a late response finds no one and is dropped.
                    self.forget(req_id);
                    return Err(ClientError::Timeout {
                        request,
                        timeout,
                        setting,
                    });
                }
            },
        };
        match answer {
            Ok(Ok(Response::Error {
                code,
                detail,
                message,
            })) => Err(ClientError::Server {
                code,
                detail,
                message,
            }),
            Ok(result) => result,
            Err(_) => Err(ClientError::Closed("connection lost".into())),
        }
    }

    /// Registers the request's waiter, then queues its frame for the writer task.
    fn send(
        &self,
        req_id: u64,
        frame: Vec<Bytes>,
    ) -> Result<oneshot::Receiver<Result<Response, ClientError>>, ClientError> {
        let (reply, answer) = oneshot::channel();
        self.route(req_id, Route::Once(reply), frame)?;
        Ok(answer)
    }

    /// Sends the frame of a STREAM_FOLLOW `req_id`: its frames come out of the receiver, the
    /// last one without MORE (or an ERROR); the receiver ends after it, or with the
    /// connection. Dropping the receiver forgets the route at the next frame.
    pub(crate) fn follow(
        &self,
        req_id: u64,
        frame: Vec<Bytes>,
    ) -> Result<mpsc::Receiver<Result<Response, ClientError>>, ClientError> {
        let (frames, receiver) = mpsc::channel(FOLLOW_FRAMES_QUEUED_MAX);
        self.route(req_id, Route::Frames(frames), frame)?;
        Ok(receiver)
    }

    /// Registers the route of `req_id`'s answers, then queues its frame for the writer task.
    fn route(&self, req_id: u64, route: Route, frame: Vec<Bytes>) -> Result<(), ClientError> {
        {
            let mut state = self
                .pending
                .lock()
                .map_err(|_| ClientError::Closed("poisoned".into()))?;
            if let Some(reason) = &state.closed {
                return Err(ClientError::Closed(reason.clone()));
            }
            state.waiting.insert(req_id, route);
        }
        if self.outgoing.send(frame).is_err() {
            self.forget(req_id);
            return Err(ClientError::Closed("writer stopped".into()));
        }
        Ok(())
    }

    pub(crate) fn forget(&self, req_id: u64) {
        if let Ok(mut state) = self.pending.lock() {
            state.waiting.remove(&req_id);
        }
    }
}

/// The connection is gone: every waiting request, and every later one, fails with `reason`.
fn fail_all(pending: &Pending, reason: String) {
    let waiting = match pending.lock() {
        Ok(mut state) => {
            state.closed.get_or_insert(reason.clone());
            std::mem::take(&mut state.waiting)
        }
        Err(poisoned) => std::mem::take(&mut poisoned.into_inner().waiting),
    };
    for (_, route) in waiting {
        match route {
            Route::Once(waiter) => {
                let _ = waiter.send(Err(ClientError::Closed(reason.clone())));
            }
            // A follow's queue may be full: its receiver learns the end from the drop.
            Route::Frames(frames) => {
                let _ = frames.try_send(Err(ClientError::Closed(reason.clone())));
            }
        }
    }
}

async fn write_frames(
    mut writer: tokio::net::tcp::OwnedWriteHalf,
    mut queue: mpsc::UnboundedReceiver<Vec<Bytes>>,
    pending: Arc<Pending>,
    bytes_sent: Arc<AtomicU64>,
) {
    // Below IOV_MAX (1024) buffers per writev.
    const CHUNKS_PER_WRITE_MAX: usize = 512;
    let mut chunks: Vec<Bytes> = Vec::new();
    while let Some(frame) = queue.recv().await {
        chunks.extend(frame);
        while chunks.len() < CHUNKS_PER_WRITE_MAX {
            match queue.try_recv() {
                Ok(frame) => chunks.extend(frame),
                Err(_) => break,
            }
        }
        // Every ready frame in one vectored write; payloads are written where they are.
        if let Err(error) = write_all_vectored(&mut writer, &chunks, &bytes_sent).await {
            fail_all(&pending, format!("write failed: {error}"));
            return;
        }
        chunks.clear();
    }
    let _ = writer.shutdown().await;
}

/// Writes every chunk, counting each write's bytes into `bytes_sent` as it happens.
async fn write_all_vectored(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    chunks: &[Bytes],
    bytes_sent: &AtomicU64,
) -> std::io::Result<()> {
    let mut slices: Vec<std::io::IoSlice<'_>> = chunks
        .iter()
        .map(|chunk| std::io::IoSlice::new(chunk))
        .collect();
    let mut remaining = &mut slices[..];
    while !remaining.is_empty() {
        let written = writer.write_vectored(remaining).await?;
        if written == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "connection wrote nothing",
            ));
        }
        bytes_sent.fetch_add(written as u64, Ordering::Relaxed);
        std::io::IoSlice::advance_slices(&mut remaining, written);
    }
    Ok(())
}

/// Sends the ACK for what the socket received, now (`TCP_QUICKACK`). Not sticky: the kernel
/// goes back to delaying ACKs, so the reader asks again before each read of a partial frame.
/// Failure costs only latency.
fn ack_now(stream: &TcpStream) {
    #[cfg(target_os = "linux")]
    {
        let _ = stream.set_quickack(true);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = stream;
}

async fn read_frames(
    mut reader: tokio::net::tcp::OwnedReadHalf,
    pending: Arc<Pending>,
    response_bytes_max: u32,
) {
    let mut frames = FrameReader::for_answers(response_bytes_max);
    let reason = loop {
        loop {
            let (header, body) = match frames.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => {
                    fail_all(&pending, format!("bad frame from the server: {error}"));
                    return;
                }
            };
            let response = decode_response(&header, body)
                .map_err(|error| ClientError::Protocol(error.to_string()));
            // MORE (checked by the decoder: only on a follow's frames) keeps the route.
            let more = response.is_ok() && header.flags & frame_flags::MORE != 0;
            let route = pending.lock().ok().and_then(|mut state| {
                match state.waiting.remove(&header.req_id) {
                    Some(Route::Frames(frames)) if more => {
                        let kept = frames.clone();
                        state.waiting.insert(header.req_id, Route::Frames(frames));
                        Some(Route::Frames(kept))
                    }
                    route => route,
                }
            });
            match (route, response) {
                (Some(Route::Once(waiter)), response) => {
                    let _ = waiter.send(response);
                }
                (Some(Route::Frames(frames)), response) => {
                    // Waits while the caller has FOLLOW_FRAMES_QUEUED_MAX frames untaken.
                    if frames.send(response).await.is_err() && more {
                        // The caller dropped the follow: later frames find no route.
                        if let Ok(mut state) = pending.lock() {
                            state.waiting.remove(&header.req_id);
                        }
                    }
                }
                // An ERROR for no request (req_id 0): the server closes; tell everyone why.
                (None, Ok(Response::Error { code, message, .. })) => {
                    let reason = format!("{code}: {message}");
                    fail_all(&pending, reason);
                    if code != ErrorCode::UnknownMessage {
                        return;
                    }
                }
                (None, _) => {}
            }
        }
        // Part of an answer is in and the rest is on its way: acknowledge what arrived now.
        // Otherwise the kernel delays that ACK (up to 40 ms, since this side sends nothing
        // back), and a server whose congestion window the answer outgrew waits for it
        // (docs/decisions/0016-quick-acks.md).
        if frames.pending_bytes() > 0 {
            ack_now(reader.as_ref());
        }
        let wanted = frames.wanted_capacity();
        let buffer = frames.buffer();
        buffer.reserve(wanted);
        match reader.read_buf(buffer).await {
            Ok(0) => break "server closed the connection".to_string(),
            Ok(_) => {}
            Err(error) => break format!("read failed: {error}"),
        }
    };
    fail_all(&pending, reason);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ack_now` takes the socket out of delayed-ACK ("pingpong") mode: TCP_QUICKACK reads 0
    /// after the socket is put there, 1 after `ack_now`.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn ack_now_turns_delayed_acks_off_for_the_moment() -> std::io::Result<()> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let stream = TcpStream::connect(listener.local_addr()?).await?;
        let _accepted = listener.accept().await?;
        stream.set_quickack(false)?;
        assert!(!stream.quickack()?, "the socket delays its ACKs");
        ack_now(&stream);
        assert!(stream.quickack()?, "ack_now sends ACKs at once");
        Ok(())
    }
}
