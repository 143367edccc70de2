//! Long waits and the drain (issue 44 item 10): a closed peer is not a slow one. A long poll
//! (WATCH, STREAM_READ with a wait) or a STREAM_FOLLOW whose peer closed its side is answered
//! with what is there now, at once, instead of at its deadline: the connection closes (no
//! CLOSE-WAIT for a minute) and a stop does not wait the drain timeout for it. A live long
//! poll is answered at once at a stop too, while a live follower that is slow to read still
//! gets the drain to read every byte it was sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{Shutdown, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use ctxstore_client::{ClientConfig, NewStream, blocking};
use ctxstore_protocol::streams;
use ctxstore_protocol::{
    ContextRef, ErrorCode, Request, Response, StreamStateWire, StreamsRequest, StreamsResponse,
    WATCH_FROM_NOW, WatchTargetWire,
};

/// Far longer than the bounds the tests assert: whatever waits for it fails them.
const LONG: Duration = Duration::from_secs(60);
const LONG_MS: u32 = 60_000;
/// Generous for a shared machine, and half of `LONG`: "did not wait for the long wait".
const BOUND: Duration = Duration::from_secs(30);

/// A server whose long polls and drain both last `LONG`.
fn long_waits(dir: &std::path::Path) -> ctxstore_server::Server {
    let mut config = config(dir);
    config.drain_timeout = LONG;
    config.limits.stream_wait_ms_max = LONG_MS;
    start(config)
}

/// The writer (it keeps its stream open), its context and its open stream.
fn open(addr: SocketAddr) -> (blocking::Client, u64, u64) {
    let client = blocking::Client::connect(ClientConfig::new(addr.to_string())).unwrap();
    let context = client.create_context().unwrap().context_id;
    let stream_id = client
        .open_stream(context, NewStream::new(1, 1))
        .unwrap()
        .stream_id;
    (client, context, stream_id)
}

fn connected(addr: SocketAddr) -> Raw {
    let mut raw = Raw::connect(addr);
    raw.hello(b"");
    raw
}

fn watch(context: u64, after_seq: u64, wait_ms: u32) -> Request {
    Request::Streams(StreamsRequest::Watch(streams::Watch {
        target: WatchTargetWire::Context(ContextRef::Id(context)),
        after_seq,
        max_events: 16,
        wait_ms,
    }))
}

/// A long poll of the context's events from now on, sent (not answered: nothing happens).
fn start_watch(raw: &mut Raw, context: u64) -> u64 {
    let Response::Streams(StreamsResponse::Watched(streams::Watched { resume_after, .. })) =
        raw.call(2, &watch(context, WATCH_FROM_NOW, 0))
    else {
        panic!("WATCH from now")
    };
    raw.send(3, &watch(context, resume_after, LONG_MS));
    resume_after
}

fn stream_read(stream_id: u64, offset: u64) -> Request {
    Request::Streams(StreamsRequest::StreamRead(streams::StreamRead {
        stream_id,
        offset,
        bytes_max: 1024,
        wait_ms: LONG_MS,
    }))
}

fn follow(stream_id: u64, offset: u64, bytes_max: u32) -> Request {
    Request::Streams(StreamsRequest::StreamFollow(streams::StreamFollow {
        stream_id,
        offset,
        bytes_max,
        wait_ms: LONG_MS,
    }))
}

/// Waits until the server has started `count` requests since `before` (from STATS, which is
/// one itself): the long polls sent are in flight.
fn wait_started(client: &blocking::Client, before: u64, count: u64) {
    let deadline = Instant::now() + BOUND;
    // Each STATS counts too: the n-th call sees before + count + n.
    for calls in 1.. {
        if client.stats().unwrap().requests_total >= before + count + calls {
            return;
        }
        assert!(Instant::now() < deadline, "the long polls never started");
        thread::sleep(Duration::from_millis(20));
    }
}

/// The empty answer of a WATCH cut short: no event, resume where it asked.
fn assert_empty_watch(answer: Option<(u64, Response)>, after_seq: u64) {
    match answer {
        Some((
            3,
            Response::Streams(StreamsResponse::Watched(streams::Watched {
                lagged: false,
                resume_after,
                events,
            })),
        )) => {
            assert!(events.is_empty());
            assert_eq!(resume_after, after_seq);
        }
        other => panic!("the long poll was not answered at once: {other:?}"),
    }
}

/// Peers that closed their side (a half close: they still read, or a full close) while a
/// WATCH, a STREAM_READ and a STREAM_FOLLOW wait for a minute: each is answered at once with
/// what is there (the half-closed ones read that answer, then the end of the connection), and
/// the server closes their connections, long before any wait would have ended.
#[test]
fn a_closed_peer_is_not_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let server = long_waits(dir.path());
    let addr = server.local_addr();
    let (client, context, stream_id) = open(addr);
    client
        .append_delta(stream_id, None, Bytes::from_static(b"first"))
        .unwrap();

    let mut watcher = connected(addr);
    let mut reader = connected(addr);
    let mut follower = connected(addr);
    let before = client.stats().unwrap().requests_total;
    let after_seq = start_watch(&mut watcher, context);
    reader.send(2, &stream_read(stream_id, 5));
    follower.send(2, &follow(stream_id, 5, 1024));
    // The WATCH from now, the long WATCH, the STREAM_READ and the follow.
    wait_started(&client, before, 4);
    assert_eq!(client.stats().unwrap().connections, 4);

    let closed = Instant::now();
    watcher.stream.shutdown(Shutdown::Write).unwrap();
    follower.stream.shutdown(Shutdown::Write).unwrap();
    drop(reader);

    assert_empty_watch(watcher.receive(), after_seq);
    assert!(watcher.closed(), "the connection ends after the answer");
    match follower.receive() {
        Some((
            2,
            Response::Streams(StreamsResponse::Pushed(streams::Pushed {
                more: false,
                state: StreamStateWire::Open,
                offset: 5,
                bytes,
                ..
            })),
        )) => assert!(bytes.is_empty()),
        other => panic!("the follow did not end at once: {other:?}"),
    }
    assert!(
        follower.closed(),
        "the connection ends after the last frame"
    );
    // The fully closed reader's connection is gone too: only the writer's is left.
    while client.stats().unwrap().connections > 1 {
        assert!(
            closed.elapsed() < BOUND,
            "a closed peer's long poll held its connection"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// A stop (SIGTERM's path) with a drain timeout of a minute: a live long poll is answered at
/// once with what is there, a follower that closed its socket is not waited for, and a live
/// follower that has not read what it was sent gets the drain to read every byte of it, in
/// order, up to a last frame that says where to follow again. The stop ends once it has read
/// them, long before the drain timeout.
#[test]
fn a_stop_answers_long_polls_at_once_and_gives_slow_followers_their_drain() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = long_waits(dir.path());
    let addr = server.local_addr();
    let (client, context, stream_id) = open(addr);

    let mut watcher = connected(addr);
    let mut gone = connected(addr);
    let mut slow = Raw::from_stream(connect_with_small_receive_buffer(addr));
    slow.hello(b"");
    let before = client.stats().unwrap().requests_total;
    let after_seq = start_watch(&mut watcher, context);
    gone.send(2, &follow(stream_id, 0, 1024));
    const FRAME_BYTES_MAX: u32 = 16 * 1024;
    slow.send(2, &follow(stream_id, 0, FRAME_BYTES_MAX));
    wait_started(&client, before, 4);
    drop(gone);

    // 12 MiB the slow follower does not read yet: far more than the kernel's buffers hold
    // (4 MiB at most for the server's side), so that the server holds some unwritten.
    const DELTA_BYTES: usize = 64 * 1024;
    const DELTAS: usize = 192;
    let payload = incompressible(DELTA_BYTES * DELTAS, 44);
    for index in 0..DELTAS {
        let bytes = payload.slice(index * DELTA_BYTES..(index + 1) * DELTA_BYTES);
        client.append_delta(stream_id, None, bytes).unwrap();
    }
    drop(client);

    let started = Instant::now();
    let stopping = thread::spawn(move || {
        server.stop();
        Instant::now()
    });
    assert_empty_watch(watcher.receive(), after_seq);
    assert!(watcher.closed(), "the connection ends after the answer");
    // The slow follower holds the drain open while it does not read.
    thread::sleep(Duration::from_secs(1));
    assert!(
        !stopping.is_finished(),
        "the stop did not wait for a live follower's unwritten frames"
    );

    // Every byte it was sent, once and in order, then the last frame.
    let mut bytes = Vec::new();
    let last = loop {
        let (req_id, response) = slow.receive().expect("a frame of the follow");
        assert_eq!(req_id, 2);
        match response {
            Response::Streams(StreamsResponse::Pushed(streams::Pushed {
                more,
                offset,
                bytes: pushed,
                ..
            })) => {
                assert_eq!(offset, bytes.len() as u64, "frames chain offset to offset");
                bytes.extend_from_slice(&pushed);
                if !more {
                    break None;
                }
            }
            other => break Some(other),
        }
    };
    assert!(!bytes.is_empty(), "the follower got what it was sent");
    assert!(bytes == payload[..bytes.len()], "every byte once, in order");
    if let Some(last) = last {
        // It had room for no further frame: an ERROR naming where to follow again.
        assert_eq!(error_code(&last), Some(ErrorCode::Overloaded), "{last:?}");
        let Response::Error { message, .. } = &last else {
            unreachable!("error_code checked it")
        };
        let again = format!(
            "follow stream {stream_id} again from offset {}",
            bytes.len()
        );
        assert!(message.contains(&again), "{message}");
    }
    assert!(slow.closed(), "the connection ends after the last frame");
    let stopped = stopping.join().unwrap();
    assert!(
        stopped - started < BOUND,
        "the stop took {:?}: it waited for a long wait",
        stopped - started
    );
}
