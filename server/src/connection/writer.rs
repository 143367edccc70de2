//! The writer side of one connection: responses queued (encoded, counted against the budget),
//! and the writer task that writes as many ready frames as it can in one vectored write,
//! counting partial writes as progress.

use crate::dispatch::Session;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use compio::buf::BufResult;
use compio::io::{AsyncWrite, AsyncWriteExt};
use compio::net::TcpStream;
use ctxstore_protocol::{ErrorCode, Response, encode_response};

use super::budget::Accounting;
use crate::dispatch::error;
use crate::local::LocalFlag;

/// A response frame on its way to the writer.
pub(super) enum Outgoing {
    Frame {
        chunks: Vec<Bytes>,
        /// Whether it answers a request counted in flight (HELLO and framing errors are not).
        request: bool,
    },
    /// Flush what is queued, then close the socket.
    Close,
}

pub(super) struct ConnectionState {
    pub(super) outgoing: flume::Sender<Outgoing>,
    pub(super) accounting: Rc<Accounting>,
    /// Unique in the server's life (from 1): the owner of the streams this connection opens
    /// (issue 32), released when it closes.
    pub(super) connection_id: u64,
    /// Raised when the read loop ends (the peer left, shutdown, a stall): follows
    /// (`follows.rs`) send their last frame now, so that the connection drains.
    pub(super) reading_ended: Rc<LocalFlag>,
    /// Who the connection is: set once, by a successful HELLO (no request runs before it).
    pub(super) session: std::cell::OnceCell<Rc<Session>>,
}

impl ConnectionState {
    /// Who the connection is. Set by HELLO, and no request runs before it (`handle_frame`
    /// refuses them).
    pub(super) fn session(&self) -> Option<Rc<Session>> {
        let session = self.session.get().cloned();
        assert!(session.is_some(), "a request runs only after HELLO");
        session
    }

    /// Queues a response for the writer. `request`: it answers a request counted in flight.
    /// `reserved`: what the request reserved of the budget (0 for HELLO and the ERROR that
    /// closes a connection), exchanged for the response's bytes.
    pub(super) fn send(&self, req_id: u64, response: &Response, request: bool, reserved: u64) {
        let accounting = &self.accounting;
        if matches!(response, Response::Error { .. }) {
            accounting
                .core
                .dispatcher
                .counters
                .errors
                .fetch_add(1, Ordering::Relaxed);
        }
        if accounting.closed.get() {
            // The connection is gone (and gave back what it held): nobody waits for this
            // answer.
            return;
        }
        let chunks = encode_response(req_id, response);
        let bytes: u64 = chunks.iter().map(|chunk| chunk.len() as u64).sum();
        if self
            .outgoing
            .send(Outgoing::Frame { chunks, request })
            .is_ok()
        {
            // The stall clock starts when there is something to write.
            if accounting.unwritten_bytes.get() == 0 {
                accounting.write_progress.set(Instant::now());
            }
            accounting.settle(reserved, bytes);
        } else {
            accounting.sub(&accounting.reserved_bytes, reserved);
            if request {
                // The writer is gone (the peer closed): the request is over all the same.
                accounting.in_flight.set(accounting.in_flight.get() - 1);
            }
        }
        accounting.changed.notify_all();
    }
}

/// Writes queued frames, as many as are ready in one vectored write, counting every byte that
/// reaches the socket and every response finished.
pub(super) async fn write_frames(
    writer: TcpStream,
    queue: flume::Receiver<Outgoing>,
    accounting: Rc<Accounting>,
) {
    write_queue(writer, queue, &accounting).await;
    accounting.writer_done.set(true);
    accounting.changed.notify_all();
}

pub(super) async fn write_queue(
    mut writer: TcpStream,
    queue: flume::Receiver<Outgoing>,
    accounting: &Accounting,
) {
    // Below IOV_MAX (1024) buffers per writev.
    const CHUNKS_PER_WRITE_MAX: usize = 512;
    loop {
        let Ok(first) = queue.recv_async().await else {
            break;
        };
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut requests = 0u32;
        let mut close = false;
        let mut next = Some(first);
        while let Some(outgoing) = next.take() {
            match outgoing {
                Outgoing::Frame {
                    chunks: frame,
                    request,
                } => {
                    chunks.extend(frame);
                    requests += u32::from(request);
                }
                Outgoing::Close => {
                    close = true;
                    break;
                }
            }
            if chunks.len() < CHUNKS_PER_WRITE_MAX {
                next = queue.try_recv().ok();
            }
        }
        // Partial writes count as progress: a peer that reads slowly is not a stalled one.
        accounting.write_progress.set(Instant::now());
        while !chunks.is_empty() {
            let BufResult(result, returned) = writer.write_vectored(chunks).await;
            chunks = returned;
            let written = match result {
                Ok(0) | Err(_) => return,
                Ok(written) => written,
            };
            accounting.wrote(written as u64);
            advance(&mut chunks, written);
        }
        accounting.answered(requests);
        if close {
            let _ = writer.shutdown().await;
            break;
        }
    }
}

/// Drops the first `written` bytes of `chunks`.
pub(super) fn advance(chunks: &mut Vec<Bytes>, mut written: usize) {
    let mut done = 0;
    for chunk in chunks.iter_mut() {
        if written < chunk.len() {
            *chunk = chunk.slice(written..);
            break;
        }
        written -= chunk.len();
        done += 1;
    }
    chunks.drain(..done);
}

/// Refuses a connection over the limit: one OVERLOADED error, then close.
pub async fn refuse(mut stream: TcpStream, message: String) {
    let frame = encode_response(0, &error(ErrorCode::Overloaded, message));
    let _ = stream.write_vectored_all(frame).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_drops_written_bytes_across_chunks() {
        let mut chunks = vec![
            Bytes::from_static(b"abc"),
            Bytes::from_static(b"de"),
            Bytes::from_static(b"fgh"),
        ];
        advance(&mut chunks, 4);
        assert_eq!(
            chunks,
            vec![Bytes::from_static(b"e"), Bytes::from_static(b"fgh")]
        );
        advance(&mut chunks, 1);
        assert_eq!(chunks, vec![Bytes::from_static(b"fgh")]);
        advance(&mut chunks, 3);
        assert!(chunks.is_empty());
    }
}
