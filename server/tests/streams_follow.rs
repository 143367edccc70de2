//! STREAM_FOLLOW end to end (issue 32, docs/protocol.md#stream_follow-0x0038), frame by frame
//! on a raw connection: every byte exactly once and in order while deltas race the follow,
//! frames chained offset to offset with MORE on all but the last; the last frames (sealed,
//! aborted, the idle deadline, NOT_FOUND); a follower that never reads holds bounded memory
//! while a writer on another connection keeps getting its acknowledgements, then gets
//! everything in fewer, larger frames; a follow resumed from its offset after a server
//! restart; and a version-2 connection, to which STREAM_FOLLOW is unknown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use ctxstore_client::{NewStream, blocking};
use ctxstore_protocol::{
    ErrorCode, Request, Response, StreamStateWire, StreamsRequest, StreamsResponse,
};
use ctxstore_protocol::{admin, streams};

fn writer(addr: SocketAddr) -> blocking::Client {
    blocking::Client::connect(ctxstore_client::ClientConfig::new(addr.to_string())).unwrap()
}

/// A new stream on a new context: (the writer, its stream).
fn open(addr: SocketAddr) -> (blocking::Client, u64) {
    let client = writer(addr);
    let context = client.create_context().unwrap().context_id;
    let stream_id = client
        .open_stream(context, NewStream::new(1, 1))
        .unwrap()
        .stream_id;
    (client, stream_id)
}

/// Delta `index`: 4 to 40 bytes that name their place.
fn delta(index: usize) -> Bytes {
    Bytes::from(format!("<{index}{}>", "~".repeat(index % 30)))
}

fn follow(stream_id: u64, offset: u64, bytes_max: u32, wait_ms: u32) -> Request {
    Request::Streams(StreamsRequest::StreamFollow(streams::StreamFollow {
        stream_id,
        offset,
        bytes_max,
        wait_ms,
    }))
}

/// What a follow answered: the bytes of its frames in order, how many frames, and its last
/// frame (no MORE, or an ERROR).
struct Followed {
    bytes: Vec<u8>,
    frames: usize,
    last: Response,
}

/// Takes the frames of the follow `req_id` until the last: each must start where the previous
/// ended (from `offset`), carry MORE and bytes but the last, and answer `req_id`.
fn take_frames(raw: &mut Raw, req_id: u64, offset: u64) -> Followed {
    let mut bytes = Vec::new();
    let mut frames = 0;
    loop {
        let (answered, response) = raw.receive().expect("a frame of the follow");
        assert_eq!(answered, req_id);
        frames += 1;
        let Response::Streams(StreamsResponse::Pushed(streams::Pushed {
            more,
            offset: at,
            bytes: pushed,
            ..
        })) = &response
        else {
            return Followed {
                bytes,
                frames,
                last: response,
            };
        };
        assert_eq!(*at, offset + bytes.len() as u64, "frames are chained");
        bytes.extend_from_slice(pushed);
        if !*more {
            return Followed {
                bytes,
                frames,
                last: response,
            };
        }
        assert!(!pushed.is_empty(), "a MORE frame carries bytes");
    }
}

/// The state of a follow's last frame.
fn end_state(last: &Response) -> StreamStateWire {
    match last {
        Response::Streams(StreamsResponse::Pushed(streams::Pushed {
            more: false, state, ..
        })) => *state,
        other => panic!("the follow ended with {other:?}"),
    }
}

/// A raw connection that said HELLO in version 3.
fn follower(addr: SocketAddr) -> Raw {
    let mut raw = Raw::connect(addr);
    raw.hello(b"");
    raw
}

#[test]
fn a_follow_pushes_every_byte_once_in_order_while_deltas_race_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(config(dir.path()));
    let addr = server.local_addr();
    let (client, stream_id) = open(addr);
    const DELTAS: usize = 400;
    // Some bytes are there before the follow starts: its first frame holds them at once.
    for index in 0..10 {
        client.append_delta(stream_id, None, delta(index)).unwrap();
    }
    let mut raw = follower(addr);
    raw.send(7, &follow(stream_id, 0, 64 * 1024, 10_000));
    let writing = thread::spawn(move || {
        for index in 10..DELTAS {
            client.append_delta(stream_id, None, delta(index)).unwrap();
            if index % 50 == 0 {
                thread::sleep(Duration::from_millis(5));
            }
        }
        client.seal_stream(stream_id).unwrap().turn.turn_id
    });
    let followed = take_frames(&mut raw, 7, 0);
    let turn_id = writing.join().unwrap();
    let expected: Vec<u8> = (0..DELTAS)
        .flat_map(|index| delta(index).to_vec())
        .collect();
    assert_eq!(followed.bytes.len(), expected.len());
    assert!(followed.bytes == expected, "every byte once, in order");
    assert_eq!(end_state(&followed.last), StreamStateWire::Sealed(turn_id));
    assert!(followed.frames > 1, "frames were pushed as the deltas came");

    // The connection goes on: a follow of the sealed stream answers its end at once.
    raw.send(8, &follow(stream_id, 0, 1024, 10_000));
    let again = take_frames(&mut raw, 8, 0);
    assert_eq!((again.frames, again.bytes.len()), (1, 0));
    assert_eq!(end_state(&again.last), StreamStateWire::Sealed(turn_id));
}

#[test]
fn the_last_frames_abort_idle_deadline_and_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(config(dir.path()));
    let addr = server.local_addr();
    let (client, stream_id) = open(addr);
    client.append_delta(stream_id, None, delta(0)).unwrap();
    let mut raw = follower(addr);

    // No delta for wait_ms: an empty open last frame after the bytes there were.
    let started = Instant::now();
    raw.send(2, &follow(stream_id, 0, 1024, 300));
    let idle = take_frames(&mut raw, 2, 0);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(idle.bytes, delta(0).to_vec());
    assert_eq!(end_state(&idle.last), StreamStateWire::Open);
    let Response::Streams(StreamsResponse::Pushed(streams::Pushed { bytes, .. })) = &idle.last
    else {
        unreachable!("end_state checked it")
    };
    assert!(bytes.is_empty(), "the idle deadline's frame is empty");

    // Aborted while followed: the delta reaches the follower first (a frame with MORE),
    // whenever the server took the follow up; only then the abort, which ends the follow.
    // (Aborting before that frame arrived raced a loaded server's taking the follow up: an
    // aborted stream's bytes are not served.)
    let offset = delta(0).len() as u64;
    raw.send(3, &follow(stream_id, offset, 1024, 10_000));
    client.append_delta(stream_id, None, delta(1)).unwrap();
    let (answered, first) = raw.receive().expect("the delta's frame");
    assert_eq!(answered, 3);
    let Response::Streams(StreamsResponse::Pushed(streams::Pushed {
        more: true,
        offset: at,
        bytes: pushed,
        ..
    })) = &first
    else {
        panic!("the delta's frame, with MORE: {first:?}")
    };
    assert_eq!((*at, pushed.to_vec()), (offset, delta(1).to_vec()));
    client.abort_stream(stream_id).unwrap();
    let aborted = take_frames(&mut raw, 3, offset + delta(1).len() as u64);
    assert!(aborted.bytes.is_empty());
    assert_eq!(end_state(&aborted.last), StreamStateWire::Aborted);

    // An unknown stream: NOT_FOUND, the follow's only answer.
    raw.send(4, &follow(stream_id + 1000, 0, 1024, 10_000));
    let unknown = take_frames(&mut raw, 4, 0);
    assert_eq!(unknown.frames, 1);
    assert_eq!(error_code(&unknown.last), Some(ErrorCode::NotFound));

    // The connection still answers requests after all of that.
    let pong = raw.call(
        5,
        &Request::Admin(ctxstore_protocol::AdminRequest::Ping(admin::Ping {
            nonce: 9,
        })),
    );
    assert!(matches!(
        pong,
        Response::Admin(ctxstore_protocol::AdminResponse::Pong(admin::Pong {
            nonce: 9
        }))
    ));
}

/// `ctxstore_unwritten_bytes` of the metrics endpoint: what every connection holds unwritten
/// or reserved.
fn unwritten_bytes(metrics: SocketAddr) -> u64 {
    let mut socket = TcpStream::connect(metrics).unwrap();
    socket
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    socket.read_to_string(&mut text).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix("ctxstore_unwritten_bytes "))
        .and_then(|value| value.trim().parse().ok())
        .expect("ctxstore_unwritten_bytes in the scrape")
}

#[test]
fn a_follower_that_never_reads_holds_bounded_memory_and_slows_no_writer() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.unwritten_bytes_max = 256 * 1024;
    config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let server = start(config);
    let addr = server.local_addr();
    let metrics = server.metrics_addr().unwrap();
    let (client, stream_id) = open(addr);
    let mut stuck = Raw::from_stream(connect_with_small_receive_buffer(addr));
    stuck.hello(b"");
    const FRAME_BYTES_MAX: u32 = 16 * 1024;
    // It ends 2 s after the last delta (the stream stays open: a sealed stream's rest would
    // be its turn's payload, not frames).
    stuck.send(2, &follow(stream_id, 0, FRAME_BYTES_MAX, 2_000));

    // 12 MiB in 8 KiB deltas, far more than the kernel's socket buffers take: the follow
    // must stop pushing, and the writer must not notice.
    const DELTA_BYTES: usize = 8 * 1024;
    const DELTAS: usize = 1536;
    let payload = incompressible(DELTA_BYTES * DELTAS, 11);
    let mut slowest = Duration::ZERO;
    let mut peak_unwritten = 0;
    for index in 0..DELTAS {
        let started = Instant::now();
        let bytes = payload.slice(index * DELTA_BYTES..(index + 1) * DELTA_BYTES);
        let length = client.append_delta(stream_id, None, bytes).unwrap();
        assert_eq!(length, ((index + 1) * DELTA_BYTES) as u64);
        slowest = slowest.max(started.elapsed());
        if index % 64 == 0 {
            peak_unwritten = peak_unwritten.max(unwritten_bytes(metrics));
        }
    }
    // Generous for a shared machine: an acknowledgement waits for an fdatasync, never for
    // the follower.
    assert!(
        slowest < Duration::from_secs(5),
        "a delta waited {slowest:?}"
    );
    // The connection's limit, one frame past it (the follow looks before it pushes), the next
    // frame's reservation (with room for an ERROR), and the writer's delta in flight.
    let frame_reserved = u64::from(FRAME_BYTES_MAX) + 8 * 1024;
    let bound = 256 * 1024 + 2 * frame_reserved + 2 * DELTA_BYTES as u64;
    assert!(
        peak_unwritten <= bound,
        "the stuck follower held {peak_unwritten} bytes of the server's memory (bound {bound})"
    );

    // It reads at last: everything, once, in order, in fewer and larger frames than deltas.
    let followed = take_frames(&mut stuck, 2, 0);
    assert_eq!(followed.bytes.len(), payload.len());
    assert!(
        followed.bytes == payload.as_ref(),
        "every byte once, in order"
    );
    assert_eq!(end_state(&followed.last), StreamStateWire::Open);
    assert!(
        followed.frames < DELTAS,
        "{} frames for {DELTAS} deltas: a follower behind gets larger frames",
        followed.frames
    );
}

#[test]
fn a_follow_resumes_from_its_offset_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(config(dir.path()));
    let (client, stream_id) = open(server.local_addr());
    for index in 0..20 {
        client.append_delta(stream_id, None, delta(index)).unwrap();
    }
    let mut raw = follower(server.local_addr());
    raw.send(2, &follow(stream_id, 0, 1024 * 1024, 10_000));
    let mut seen = Vec::new();
    // The first frame holds what is there; then the server goes away mid-follow.
    let (_, first) = raw.receive().unwrap();
    let Response::Streams(StreamsResponse::Pushed(streams::Pushed { more, bytes, .. })) = first
    else {
        panic!("{first:?}")
    };
    assert!(more);
    seen.extend_from_slice(&bytes);
    drop(client);
    server.stop();
    // Whatever else came before the close is a frame like any (and then the connection ends).
    while let Some((_, response)) = raw.receive() {
        if let Response::Streams(StreamsResponse::Pushed(streams::Pushed { bytes, .. })) = response
        {
            seen.extend_from_slice(&bytes);
        }
    }

    let server = start(config(dir.path()));
    let client = writer(server.local_addr());
    let mut raw = follower(server.local_addr());
    let offset = seen.len() as u64;
    raw.send(3, &follow(stream_id, offset, 1024 * 1024, 10_000));
    let writing = thread::spawn(move || {
        // A new connection takes the stream over and goes on writing it.
        for index in 20..60 {
            client.append_delta(stream_id, None, delta(index)).unwrap();
        }
        client.seal_stream(stream_id).unwrap().turn.turn_id
    });
    let followed = take_frames(&mut raw, 3, offset);
    let turn_id = writing.join().unwrap();
    seen.extend_from_slice(&followed.bytes);
    let expected: Vec<u8> = (0..60).flat_map(|index| delta(index).to_vec()).collect();
    assert!(
        seen == expected,
        "every byte once, in order, across the restart"
    );
    assert_eq!(end_state(&followed.last), StreamStateWire::Sealed(turn_id));
}

#[test]
fn a_version_2_connection_does_not_know_stream_follow() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(config(dir.path()));
    let (_client, stream_id) = open(server.local_addr());
    let mut raw = Raw::connect(server.local_addr());
    raw.hello_versions(b"", 2, 2);
    let answer = raw.call(2, &follow(stream_id, 0, 1024, 1000));
    assert_eq!(error_code(&answer), Some(ErrorCode::UnknownMessage));
    // The connection stays open.
    let pong = raw.call(
        3,
        &Request::Admin(ctxstore_protocol::AdminRequest::Ping(admin::Ping {
            nonce: 4,
        })),
    );
    assert!(matches!(
        pong,
        Response::Admin(ctxstore_protocol::AdminResponse::Pong(admin::Pong {
            nonce: 4
        }))
    ));
}
