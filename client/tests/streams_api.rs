//! Streams over the wire (protocol version 3, issue 32) against a real `ctxstore-server`:
//! deltas acknowledged with the stream's length, listed, read from any offset and followed
//! with a long poll by a reader on another connection that reconnects mid-stream (every byte
//! exactly once, in order), the seal into one turn, CONFLICT keeping the stream open, typed
//! errors for ended and unknown streams and for wrong offsets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{
    ClientConfig, ClientError, ContextRef, ErrorCode, NewContext, NewStream, StreamState,
};
use ctxstore_testsupport::TestServer;

fn connect(server: &TestServer) -> Client {
    Client::connect(ClientConfig::new(server.addr.clone())).unwrap()
}

fn name(name: &str) -> ContextRef {
    ContextRef::Name(name.into())
}

fn code(error: ClientError) -> (ErrorCode, u64) {
    match error {
        ClientError::Server { code, detail, .. } => (code, detail),
        other => panic!("not a server error: {other:?}"),
    }
}

#[test]
fn a_stream_is_written_followed_resumed_and_sealed_into_one_turn() {
    let server = TestServer::start(None);
    let writer = connect(&server);
    writer.open_context(NewContext::new().name("chat")).unwrap();
    let question = writer
        .append(name("chat"), None, 1, 0, Bytes::from_static(b"question"))
        .unwrap();
    let stream = writer
        .open_stream(
            name("chat"),
            NewStream::new(2, 0).label("role", "assistant"),
        )
        .unwrap();
    assert_eq!(stream.length, 0);
    let listed = writer.open_streams(name("chat"), 0, 10).unwrap();
    assert_eq!(listed, vec![stream]);

    // A reader on its own connection follows with long polls; it drops its connection after
    // a third of the bytes and resumes from its offset on a new one.
    let addr = server.addr.clone();
    let stream_id = stream.stream_id;
    let reader = std::thread::spawn(move || {
        let mut client = Client::connect(ClientConfig::new(addr.clone())).unwrap();
        let mut got = Vec::new();
        let mut reconnected = false;
        loop {
            let chunk = client
                .read_stream(
                    stream_id,
                    got.len() as u64,
                    100,
                    Some(Duration::from_secs(5)),
                )
                .unwrap();
            assert_eq!(chunk.offset, got.len() as u64);
            got.extend_from_slice(&chunk.bytes);
            if chunk.state != StreamState::Open {
                return (got, chunk.state);
            }
            if !reconnected && got.len() > 500 {
                reconnected = true;
                client = Client::connect(ClientConfig::new(addr.clone())).unwrap();
            }
        }
    });
    let mut whole = Vec::new();
    for i in 0..400u32 {
        let delta = format!("tok{i} ");
        whole.extend_from_slice(delta.as_bytes());
        let length = writer
            .append_delta(stream_id, None, Bytes::from(delta))
            .unwrap();
        assert_eq!(length, whole.len() as u64);
    }
    // Reads from any offset while open.
    let chunk = writer.read_stream(stream_id, 7, 10, None).unwrap();
    assert_eq!(
        (chunk.state, chunk.length),
        (StreamState::Open, whole.len() as u64)
    );
    assert_eq!(chunk.bytes.as_ref(), &whole[7..17]);
    // A wrong offset: CONFLICT with the stream's length; a retried delta answers again.
    let (error, detail) = code(
        writer
            .append_delta(stream_id, Some(3), Bytes::from_static(b"zz"))
            .unwrap_err(),
    );
    assert_eq!((error, detail), (ErrorCode::Conflict, whole.len() as u64));
    let last = Bytes::copy_from_slice(&whole[whole.len() - 5..]);
    assert_eq!(
        writer
            .append_delta(stream_id, Some(whole.len() as u64 - 5), last)
            .unwrap(),
        whole.len() as u64
    );

    let sealed = writer.seal_stream(stream_id).unwrap();
    assert_eq!(sealed.turn.parent_turn_id, question.turn.turn_id);
    assert_eq!(sealed.turn.payload_len as usize, whole.len());
    let (got, state) = reader.join().unwrap();
    assert_eq!(got, whole);
    assert_eq!(state, StreamState::Sealed(sealed.turn.turn_id));
    let page = writer.last(name("chat"), 1, true).unwrap();
    assert_eq!(page.turns[0].payload.as_deref(), Some(&whole[..]));
    // Ended: STREAM_ENDED with the turn; reading answers the turn.
    let (error, detail) = code(
        writer
            .append_delta(stream_id, None, Bytes::from_static(b"late"))
            .unwrap_err(),
    );
    assert_eq!(
        (error, detail),
        (ErrorCode::StreamEnded, sealed.turn.turn_id)
    );
    let chunk = writer.read_stream(stream_id, 0, 10, None).unwrap();
    assert_eq!(chunk.state, StreamState::Sealed(sealed.turn.turn_id));
    assert!(writer.open_streams(name("chat"), 0, 10).unwrap().is_empty());
}

#[test]
fn conflict_keeps_the_stream_open_and_bad_requests_are_typed_errors() {
    let server = TestServer::start(None);
    let client = connect(&server);
    client.open_context(NewContext::new().name("c")).unwrap();
    let stream = client
        .open_stream(name("c"), NewStream::new(1, 0).expect_head(0))
        .unwrap();
    client
        .append_delta(stream.stream_id, None, Bytes::from_static(b"draft"))
        .unwrap();
    let other = client
        .append(name("c"), None, 1, 0, Bytes::from_static(b"someone else"))
        .unwrap();
    let (error, detail) = code(client.seal_stream(stream.stream_id).unwrap_err());
    assert_eq!((error, detail), (ErrorCode::Conflict, other.turn.turn_id));
    assert_eq!(client.open_streams(name("c"), 0, 10).unwrap().len(), 1);
    client.abort_stream(stream.stream_id).unwrap();
    let chunk = client.read_stream(stream.stream_id, 0, 10, None).unwrap();
    assert_eq!(chunk.state, StreamState::Aborted);
    let (error, detail) = code(client.seal_stream(stream.stream_id).unwrap_err());
    assert_eq!((error, detail), (ErrorCode::StreamEnded, 0));
    let (error, _) = code(client.read_stream(999_999, 0, 10, None).unwrap_err());
    assert_eq!(error, ErrorCode::NotFound);
    let (error, _) = code(
        client
            .open_stream(name("nope"), NewStream::new(1, 0))
            .unwrap_err(),
    );
    assert_eq!(error, ErrorCode::NotFound);
    let (error, _) = code(client.open_streams(ContextRef::Id(777), 0, 10).unwrap_err());
    assert_eq!(error, ErrorCode::NotFound);
    // A long poll on an open stream with nothing new answers empty at its deadline.
    let quiet = client.open_stream(name("c"), NewStream::new(1, 0)).unwrap();
    let started = std::time::Instant::now();
    let chunk = client
        .read_stream(quiet.stream_id, 0, 10, Some(Duration::from_millis(200)))
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!((chunk.state, chunk.bytes.len()), (StreamState::Open, 0));
}

#[test]
fn only_the_connection_that_opened_a_stream_writes_it_until_it_closes() {
    let server = TestServer::start(None);
    let owner = connect(&server);
    let other = connect(&server);
    owner.open_context(NewContext::new().name("o")).unwrap();
    let stream = owner.open_stream(name("o"), NewStream::new(1, 0)).unwrap();
    owner
        .append_delta(stream.stream_id, None, Bytes::from_static(b"mine "))
        .unwrap();
    for error in [
        other
            .append_delta(stream.stream_id, None, Bytes::from_static(b"x"))
            .map(|_| ())
            .unwrap_err(),
        other.seal_stream(stream.stream_id).map(|_| ()).unwrap_err(),
        other.abort_stream(stream.stream_id).unwrap_err(),
    ] {
        assert_eq!(code(error).0, ErrorCode::StreamNotOwned);
    }
    // Anyone reads it.
    let chunk = other.read_stream(stream.stream_id, 0, 100, None).unwrap();
    assert_eq!(chunk.bytes.as_ref(), b"mine ");
    // The owner's connection closes: the stream stays open and the next writer continues it.
    drop(owner);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let length = loop {
        match other.append_delta(stream.stream_id, Some(5), Bytes::from_static(b"now yours")) {
            Ok(length) => break length,
            Err(error) => {
                assert_eq!(code(error).0, ErrorCode::StreamNotOwned);
                assert!(std::time::Instant::now() < deadline, "never released");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    assert_eq!(length, 14);
    let sealed = other.seal_stream(stream.stream_id).unwrap();
    assert_eq!(sealed.turn.payload_len, 14);
}

#[test]
fn a_watcher_long_polls_events_and_resumes_after_reconnecting_without_a_gap() {
    use ctxstore_client::{WATCH_FROM_NOW, WatchKindWire, WatchTargetWire};

    let server = TestServer::start(None);
    let writer = connect(&server);
    let ctx = writer
        .open_context(NewContext::new().name("agent-7").tag("team", "a"))
        .unwrap()
        .context
        .context_id;
    let watcher = connect(&server);
    let target = WatchTargetWire::Tag("team".into(), "a".into());
    let start = watcher
        .watch(target.clone(), WATCH_FROM_NOW, 10, None)
        .unwrap()
        .resume_after;
    // A long poll wakes with the first event.
    let addr = server.addr.clone();
    let polled = {
        let target = target.clone();
        std::thread::spawn(move || {
            let client = Client::connect(ClientConfig::new(addr)).unwrap();
            client
                .watch(target, start, 10, Some(Duration::from_secs(10)))
                .unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let first = writer
        .append(name("agent-7"), None, 1, 0, Bytes::from_static(b"one"))
        .unwrap();
    let woke = polled.join().unwrap();
    assert!(!woke.lagged);
    assert_eq!(woke.events[0].kind, WatchKindWire::Head);
    assert_eq!(woke.events[0].turn_id, first.turn.turn_id);
    assert_eq!(woke.events[0].context_id, ctx);
    // More happens while the watcher is away; it reconnects and resumes where it was.
    drop(watcher);
    let stream = writer
        .open_stream(name("agent-7"), NewStream::new(1, 0))
        .unwrap();
    writer
        .append_delta(stream.stream_id, None, Bytes::from_static(b"tok"))
        .unwrap();
    let sealed = writer.seal_stream(stream.stream_id).unwrap();
    let watcher = connect(&server);
    let rest = watcher
        .watch(target, woke.resume_after, 100, Some(Duration::from_secs(1)))
        .unwrap();
    let kinds: Vec<(WatchKindWire, u64, u64)> = rest
        .events
        .iter()
        .map(|event| (event.kind, event.turn_id, event.stream_id))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (WatchKindWire::StreamOpened, 0, stream.stream_id),
            (WatchKindWire::Head, sealed.turn.turn_id, 0),
            (
                WatchKindWire::StreamSealed,
                sealed.turn.turn_id,
                stream.stream_id
            ),
        ]
    );
    assert_eq!(rest.resume_after, rest.events[2].seq);
    // Nothing more: an empty answer at the deadline, resuming from the same place.
    let quiet = watcher
        .watch(
            WatchTargetWire::Context(name("agent-7")),
            rest.resume_after,
            10,
            Some(Duration::from_millis(100)),
        )
        .unwrap();
    assert!(quiet.events.is_empty() && !quiet.lagged);
    assert_eq!(quiet.resume_after, rest.resume_after);
}
