//! `Durability` (decision 0031 §11): when the server acknowledges a write.
//! - on the wire: a handle's `Durability::Remote` / `Local` is the frame flag `ACK_AFTER` (2 /
//!   1 in bits 3-4) on exactly the writes that take it — `append`, `append_by_hash`,
//!   `append_turns`, `seal_stream`, `kv_put`, `kv_put_ex` — and on nothing else (reads, a
//!   stream's deltas); `Default` sends no flag; a version-3 server is not sent one
//!   (`Unsupported`, nothing sent);
//! - UNCONFIRMED and NOT_PRIMARY are told apart by `is_unconfirmed` (with the TurnID of
//!   `unconfirmed_turn`) and `is_not_primary`;
//! - against a real `ctxstore-server --replicate-to file://…`: every remote write (each call,
//!   a chunked append, a stream's seal, KV puts) is answered and counted as a remote
//!   acknowledgement, and a restore of the replica holds it right after a SIGKILL; an object
//!   store that takes no PUTs answers UNCONFIRMED, the write durable on the server, and a
//!   retry with the same key lands once;
//! - against a server without a replica: remote is INVALID_ARGUMENT and nothing is written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::{
    AckAfter, ClientConfig, ClientError, ContextRef, Durability, ErrorCode, NewStream, NewTurn,
    blocking,
};
use ctxstore_protocol::{
    AppendsRequest, KvRequest, Request, Response, StreamsRequest, frame_flags,
};
use ctxstore_testsupport::{ScriptedServer, ServerLaunch, TestServer, noise, server_binary};

const REMOTE_WRITES: usize = 6;

/// The request a client with `durability` sends for each write that takes `ACK_AFTER`, and
/// for a read and a delta, seen by a fake version-4 server answering every one with ERROR.
fn seen_with(durability: Durability) -> Vec<Request> {
    let (addr, seen) = ScriptedServer::new(4).serve(|_| {
        Some(Response::Error {
            code: ErrorCode::NotFound,
            detail: 0,
            message: "scripted".into(),
        })
    });
    let config = ClientConfig::new(addr).with_durability(durability);
    let client = blocking::Client::connect(config).unwrap();
    assert_eq!(client.durability(), durability);
    let bytes = Bytes::from_static(b"small");
    let entries = vec![(Bytes::from_static(b"k"), bytes.clone())];
    let _ = client.append(7, None, 0, 0, bytes.clone());
    let _ = client.append_by_hash(7, None, 0, 0, ctxstore_client::BlobHash::of(b"small"));
    let _ = client.append_turn(7, None, NewTurn::bytes(bytes.clone()).key("k"));
    let _ = client.seal_stream(3);
    let _ = client.kv_put(7, entries.clone(), false);
    let _ = client.kv_put_ex(7, entries, false, Some(Duration::from_secs(60)));
    // Neither takes the flag: sent as they are.
    let _ = client.head(7);
    let _ = client.append_delta(3, None, bytes);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), REMOTE_WRITES + 2, "{seen:?}");
    seen
}

fn is_write(request: &Request) -> bool {
    matches!(
        request,
        Request::Appends(
            AppendsRequest::AppendTurn(_)
                | AppendsRequest::AppendTurnByHash(_)
                | AppendsRequest::AppendTurns(_)
        ) | Request::Streams(StreamsRequest::StreamSeal(_))
            | Request::Kv(KvRequest::KvPut(_) | KvRequest::KvPutEx(_))
    )
}

#[test]
fn each_durability_is_its_frame_flag_on_the_writes_that_take_it() {
    for (durability, after) in [
        (Durability::Remote, AckAfter::Remote),
        (Durability::Local, AckAfter::Local),
    ] {
        let seen = seen_with(durability);
        for request in &seen[..REMOTE_WRITES] {
            let Request::AckAfter {
                request,
                after: got,
            } = request
            else {
                panic!("{durability:?}: sent without ACK_AFTER: {request:?}");
            };
            assert_eq!(*got, after);
            assert!(is_write(request), "{request:?}");
            assert_eq!(request.frame_flags() & frame_flags::ACK_AFTER, 0);
        }
        for request in &seen[REMOTE_WRITES..] {
            assert!(
                !matches!(request, Request::AckAfter { .. }),
                "{durability:?}: a read or a delta with ACK_AFTER: {request:?}"
            );
        }
    }
    // The bits themselves: 2 and 1 in bits 3-4.
    assert_eq!(
        frame_flags::ack_after(Durability::Remote.ack_after().unwrap()),
        0b1_0000
    );
    assert_eq!(
        frame_flags::ack_after(Durability::Local.ack_after().unwrap()),
        0b0_1000
    );
    assert_eq!(Durability::Default.ack_after(), None);
    // Default: the server's --ack-after, no flag on any request.
    let seen = seen_with(Durability::Default);
    assert!(seen[..REMOTE_WRITES].iter().all(is_write), "{seen:?}");
}

#[test]
fn a_handle_carries_its_own_durability_on_one_connection() {
    let (addr, seen) = ScriptedServer::new(4).serve(|_| {
        Some(Response::Error {
            code: ErrorCode::NotFound,
            detail: 0,
            message: "scripted".into(),
        })
    });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = ctxstore_client::Client::connect(ClientConfig::new(addr))
            .await
            .unwrap();
        let remote = client.with_durability(Durability::Remote);
        assert_eq!(client.durability(), Durability::Default);
        assert_eq!(remote.durability(), Durability::Remote);
        // An overlay view keeps the durability, and the other way round.
        assert_eq!(remote.as_of(0).durability(), Durability::Remote);
        let _ = remote
            .kv_put(7, vec![(Bytes::from_static(b"k"), Bytes::new())], true)
            .await;
        let _ = client
            .kv_put(7, vec![(Bytes::from_static(b"k"), Bytes::new())], true)
            .await;
    });
    let seen = seen.lock().unwrap().clone();
    assert!(
        matches!(
            &seen[0],
            Request::AckAfter {
                after: AckAfter::Remote,
                ..
            }
        ),
        "{seen:?}"
    );
    assert!(
        matches!(&seen[1], Request::Kv(KvRequest::KvPut(_))),
        "{seen:?}"
    );
}

#[test]
fn a_version_3_server_is_sent_no_durability() {
    let (addr, seen) = ScriptedServer::new(3).serve(|_| {
        Some(Response::Error {
            code: ErrorCode::NotFound,
            detail: 0,
            message: "scripted".into(),
        })
    });
    let mut client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    client.set_durability(Durability::Remote);
    let refused = client
        .kv_put(7, vec![(Bytes::from_static(b"k"), Bytes::new())], false)
        .unwrap_err();
    assert!(
        matches!(
            refused,
            ClientError::Unsupported {
                request: "KV_PUT",
                needed: 4,
                version: 3
            }
        ),
        "{refused}"
    );
    let refused = client
        .append(7, None, 0, 0, Bytes::from_static(b"x"))
        .unwrap_err();
    assert_eq!(refused.name(), "UNSUPPORTED_BY_SERVER", "{refused}");
    // A stream whose seal could not be sent as asked is not opened either.
    let refused = client.open_stream(7, NewStream::new(0, 0)).unwrap_err();
    assert!(
        matches!(
            refused,
            ClientError::Unsupported {
                request: "STREAM_SEAL",
                ..
            }
        ),
        "{refused}"
    );
    assert!(seen.lock().unwrap().is_empty(), "nothing was sent");
    // A read on the same handle is no write: sent, and answered.
    client.set_durability(Durability::Default);
    let _ = client.head(7).unwrap_err();
    let _ = client.append(7, None, 0, 0, Bytes::from_static(b"x"));
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[test]
fn unconfirmed_and_not_primary_are_told_apart() {
    let (addr, _) = ScriptedServer::new(4).serve(|request| {
        let (code, detail) = match request {
            Request::AckAfter { .. } => (ErrorCode::Unconfirmed, 42),
            _ => (ErrorCode::NotPrimary, 9),
        };
        Some(Response::Error {
            code,
            detail,
            message: "scripted".into(),
        })
    });
    let mut client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    let not_primary = client
        .append(7, None, 0, 0, Bytes::from_static(b"x"))
        .unwrap_err();
    assert!(not_primary.is_not_primary() && !not_primary.is_unconfirmed());
    assert_eq!(not_primary.unconfirmed_turn(), None);
    client.set_durability(Durability::Remote);
    let unconfirmed = client
        .append(7, None, 0, 0, Bytes::from_static(b"x"))
        .unwrap_err();
    assert!(unconfirmed.is_unconfirmed() && !unconfirmed.is_not_primary());
    assert_eq!(unconfirmed.unconfirmed_turn(), Some(42));
    assert_eq!(unconfirmed.name(), "UNCONFIRMED");
    assert!(matches!(
        unconfirmed,
        ClientError::Server {
            code: ErrorCode::Unconfirmed,
            detail: 42,
            ..
        }
    ));
    assert!(!unconfirmed.is_connection_failure());
}

fn spawn(data: &Path, flags: &[&str]) -> TestServer {
    ServerLaunch::new(server_binary())
        .data(data)
        .flags(flags)
        .keep_log()
        .start()
}

/// A server replicating to `ROOT/replica`, cycling every `interval` (a failing object store
/// is tried again only then).
fn replicating(root: &Path, interval: &str, flags: &[&str]) -> (String, TestServer) {
    let url = format!("file://{}", root.join("replica").display());
    // No lease: these tests break the object store on purpose, and a lease would close
    // every acknowledgement, local ones too (decision 0031 §6; tested in server/tests/lease.rs).
    let mut all = vec![
        "--replicate-to",
        &url,
        "--replicate-interval",
        interval,
        "--replica-lease",
        "off",
    ];
    all.extend_from_slice(flags);
    let server = spawn(&root.join("data"), &all);
    (url, server)
}

fn name(name: &str) -> ContextRef {
    ContextRef::Name(name.into())
}

#[test]
fn remote_writes_are_in_a_restore_of_the_replica() {
    let root = tempfile::tempdir().unwrap();
    // Shipping every hour: only a remote acknowledgement's wake ships these writes.
    let (url, mut server) = replicating(root.path(), "1h", &[]);
    let mut client = blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let context = client.create_context().unwrap().context_id;
    client
        .open_context(ctxstore_client::NewContext::new().name("mem"))
        .unwrap();
    client.set_durability(Durability::Remote);
    let first = client
        .append(context, None, 0, 0, Bytes::from_static(b"remote one"))
        .unwrap();
    let by_hash = client
        .append_by_hash(context, None, 0, 0, first.turn.payload_hash)
        .unwrap();
    let keyed = client
        .append_turn(context, None, NewTurn::bytes(&b"keyed"[..]).key("k-1"))
        .unwrap();
    // Over the chunking threshold: chunks first, the flag on the final append.
    let large = Bytes::from(noise(7, 1 << 20));
    let chunked = client.append(context, None, 0, 0, large.clone()).unwrap();
    client
        .kv_put(
            name("mem"),
            vec![(Bytes::from_static(b"a"), Bytes::from_static(b"1"))],
            false,
        )
        .unwrap();
    let hour = Some(Duration::from_secs(3600));
    let entry = vec![(Bytes::from_static(b"b"), Bytes::from_static(b"2"))];
    client.kv_put_ex(name("mem"), entry, false, hour).unwrap();
    let stream = client
        .open_stream(context, NewStream::new(0, 0).key("s-1"))
        .unwrap();
    client
        .append_delta(stream.stream_id, None, Bytes::from_static(b"streamed"))
        .unwrap();
    let sealed = client.seal_stream(stream.stream_id).unwrap();
    let role = client.role().unwrap();
    assert_eq!(role.ack_after, AckAfter::Local, "the server's default");
    assert_eq!(role.remote_acks_total, 7, "one per remote write: {role:?}");
    assert_eq!(role.remote_unconfirmed_total, 0, "{role:?}");
    server.kill();

    let restored_dir = root.path().join("restored");
    let output = std::process::Command::new(server_binary())
        .args(["restore", "--from", &url, "--to"])
        .arg(&restored_dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let restored_server = spawn(&restored_dir, &[]);
    let restored =
        blocking::Client::connect(ClientConfig::new(restored_server.addr.clone())).unwrap();
    for (turn, payload) in [
        (&first.turn, &b"remote one"[..]),
        (&by_hash.turn, &b"remote one"[..]),
        (&keyed.turn.turn, &b"keyed"[..]),
        (&chunked.turn, &large[..]),
        (&sealed.turn, &b"streamed"[..]),
    ] {
        let got = restored.turn(turn.turn_id).unwrap();
        assert_eq!(restored.blob(got.payload_hash).unwrap(), payload);
    }
    let values = restored.kv_get(name("mem"), "a").unwrap().unwrap();
    assert_eq!(values.1, Bytes::from_static(b"1"));
    let values = restored.kv_get(name("mem"), "b").unwrap().unwrap();
    assert_eq!(values.1, Bytes::from_static(b"2"));
}

#[test]
fn remote_without_a_replica_is_invalid_argument_and_writes_nothing() {
    let server = TestServer::start(None);
    let client = ctxstore_client::blocking::Client::connect(
        ClientConfig::new(server.addr.clone()).with_durability(Durability::Remote),
    )
    .unwrap();
    let context = client.create_context().unwrap().context_id;
    client
        .open_context(ctxstore_client::NewContext::new().name("mem"))
        .unwrap();
    let refused = client
        .append(context, None, 0, 0, Bytes::from_static(b"nowhere"))
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::InvalidArgument),
        "{refused}"
    );
    let refused = client
        .kv_put(
            name("mem"),
            vec![(Bytes::from_static(b"a"), Bytes::from_static(b"1"))],
            false,
        )
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::InvalidArgument),
        "{refused}"
    );
    assert_eq!(
        client.head(context).unwrap().head_turn_id,
        0,
        "nothing written"
    );
    assert_eq!(client.kv_get(name("mem"), "a").unwrap(), None);

    // Local is what this server does anyway.
    let mut client = client;
    client.set_durability(Durability::Local);
    let appended = client
        .append(context, None, 0, 0, Bytes::from_static(b"here"))
        .unwrap();
    assert_eq!(
        client.head(context).unwrap().head_turn_id,
        appended.turn.turn_id
    );
}

#[test]
fn unconfirmed_is_durable_on_the_server_and_a_keyed_retry_lands_once() {
    let root = tempfile::tempdir().unwrap();
    let (_, server) = replicating(root.path(), "300ms", &["--remote-ack-timeout", "500ms"]);
    let mut client = blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let context = client.create_context().unwrap().context_id;
    client.set_durability(Durability::Remote);
    // The replica's directory becomes a file: every PUT under it fails.
    let replica = root.path().join("replica");
    let moved = root.path().join("replica.moved");
    std::fs::rename(&replica, &moved).unwrap();
    std::fs::write(&replica, b"not a directory").unwrap();
    let refused = client
        .append(context, None, 0, 0, Bytes::from_static(b"unkeyed"))
        .unwrap_err();
    assert!(refused.is_unconfirmed(), "{refused}");
    let unkeyed = client.head(context).unwrap().head_turn_id;
    assert_ne!(unkeyed, 0, "durable on the server");
    assert_eq!(refused.unconfirmed_turn(), Some(unkeyed), "{refused}");
    let turn = NewTurn::bytes(&b"once"[..]).key("step-1");
    let refused = client.append_turn(context, None, turn.clone()).unwrap_err();
    assert!(refused.is_unconfirmed(), "{refused}");
    let head = client.head(context).unwrap().head_turn_id;
    assert!(head > unkeyed, "durable on the server");
    // APPEND_TURNS' UNCONFIRMED may name no turn (a batch has several).
    assert!(
        refused.unconfirmed_turn().is_none_or(|turn| turn == head),
        "{refused}"
    );

    // The object store back: the same key again until it is confirmed, always that turn.
    std::fs::remove_file(&replica).unwrap();
    std::fs::rename(&moved, &replica).unwrap();
    let started = Instant::now();
    let retried = loop {
        match client.append_turn(context, None, turn.clone()) {
            Ok(retried) => break retried,
            Err(error) if error.is_unconfirmed() => {
                assert!(error.unconfirmed_turn().is_none_or(|turn| turn == head));
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "{}",
                    server.log()
                );
            }
            Err(error) => panic!("{error}"),
        }
    };
    assert!(retried.existing);
    assert_eq!(retried.turn.turn.turn_id, head);
    assert_eq!(
        client.head(context).unwrap().head_turn_id,
        head,
        "stored once"
    );
}
