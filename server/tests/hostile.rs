//! Bad input at the socket: each gets its documented ERROR or a closed connection, and a
//! well-behaved client on another connection keeps getting correct answers. The frame flag
//! ACK_AFTER (version 4) where it cannot be — on a read, at 3, on a version-3 connection — is
//! BAD_FRAME; `remote`, not built yet, is refused before anything is written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use ctxstore_protocol::{
    AckAfter, AdminRequest, AdminResponse, AppendsRequest, AppendsResponse, BlobsRequest,
    BlobsResponse, ContextRef, ContextsRequest, ContextsResponse, ErrorCode, FrameHeader,
    HEADER_BYTES, KvRequest, PROTOCOL_VERSION, Request, Response, encode_request, frame_flags,
};
use ctxstore_protocol::{admin, appends, blobs, contexts, kv};

/// A well-behaved client that must keep working while the others misbehave.
struct Witness {
    runtime: tokio::runtime::Runtime,
    client: ctxstore_client::Client,
    context: u64,
    turns: u32,
}

impl Witness {
    fn new(addr: std::net::SocketAddr) -> Witness {
        let runtime = runtime();
        let client = runtime.block_on(connect(addr));
        let context = runtime
            .block_on(client.create_context())
            .unwrap()
            .context_id;
        Witness {
            runtime,
            client,
            context,
            turns: 0,
        }
    }

    /// Appends `payload` to the witness's context, at the depth its count of turns says; its
    /// hash.
    fn append(&mut self, payload: &Bytes) -> ctxstore_client::BlobHash {
        let appended = self
            .runtime
            .block_on(
                self.client
                    .append(self.context, None, 0, 0, payload.clone()),
            )
            .unwrap();
        assert_eq!(appended.turn.depth, self.turns);
        self.turns += 1;
        appended.turn.payload_hash
    }

    fn still_works(&mut self) {
        let payload = Bytes::from(format!("witness turn {}", self.turns));
        self.append(&payload);
        let page = self
            .runtime
            .block_on(self.client.last(self.context, 1, true))
            .unwrap();
        assert_eq!(page.turns[0].payload.as_ref(), Some(&payload));
    }

    /// Requests the server took in all, once that count has stood still for 2 s (stuck
    /// clients are at their limits); each STATS this sends counts itself and is taken out.
    /// The 120 s deadline only keeps a broken server from hanging the test.
    fn requests_once_still(&self) -> u64 {
        let mut polls = 0u64;
        let mut taken = || {
            let stats = self.runtime.block_on(self.client.stats()).unwrap();
            polls += 1;
            stats.requests_total - polls
        };
        let started = std::time::Instant::now();
        let mut last = taken();
        let mut still_since = std::time::Instant::now();
        while still_since.elapsed() < Duration::from_secs(2) {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "the server kept taking requests"
            );
            std::thread::sleep(Duration::from_millis(100));
            let now = taken();
            if now != last {
                still_since = std::time::Instant::now();
            }
            last = now;
        }
        last
    }
}

#[test]
fn hostile_input_gets_errors_or_closes_and_others_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.frame_bytes_max = 1 << 20;
    config.engine.limits.blob_bytes_max = (1 << 20) - 64;
    let server = start(config);
    let addr = server.local_addr();
    let mut witness = Witness::new(addr);
    witness.still_works();

    // Random bytes: whatever they decode as, the connection ends (no HELLO first, or a bad
    // frame), and the server lives on.
    for round in 0..20 {
        let mut raw = Raw::connect(addr);
        let bytes = ctxstore_testsupport::noise(0x1234_5678 + round, 100 + round as usize * 50);
        raw.send_bytes(&bytes);
        assert!(
            raw.closed(),
            "round {round}: connection left open after random bytes"
        );
    }
    witness.still_works();

    // A truncated frame, then the client closes.
    let mut raw = Raw::connect(addr);
    assert!(matches!(
        raw.hello(b""),
        Response::Admin(AdminResponse::Negotiated(admin::Negotiated { .. }))
    ));
    let header = FrameHeader {
        len: 1000,
        msg_type: 0x0006,
        flags: 0,
        req_id: 9,
    };
    raw.send_bytes(&header.encode());
    raw.send_bytes(&[0u8; 100]);
    drop(raw);
    witness.still_works();

    // A length over the limit: TOO_LARGE, then close (framing is lost).
    let mut raw = Raw::connect(addr);
    raw.hello(b"");
    raw.send_bytes(
        &FrameHeader {
            len: (1 << 20) + 1,
            msg_type: 0x0006,
            flags: 0,
            req_id: 10,
        }
        .encode(),
    );
    let (req_id, response) = raw.receive().expect("an error before the close");
    assert_eq!(
        (req_id, error_code(&response)),
        (10, Some(ErrorCode::TooLarge))
    );
    assert!(raw.closed());
    witness.still_works();

    // Non-zero header flags: BAD_FRAME, then close.
    let mut raw = Raw::connect(addr);
    raw.hello(b"");
    raw.send_bytes(
        &FrameHeader {
            len: 0,
            msg_type: 0x0002,
            flags: 1,
            req_id: 11,
        }
        .encode(),
    );
    assert_eq!(
        error_code(&raw.receive().unwrap().1),
        Some(ErrorCode::BadFrame)
    );
    assert!(raw.closed());

    // An unknown msg_type: UNKNOWN_MESSAGE, and the connection stays usable.
    let mut raw = Raw::connect(addr);
    raw.hello(b"");
    raw.send_bytes(
        &FrameHeader {
            len: 3,
            msg_type: 0x0077,
            flags: 0,
            req_id: 12,
        }
        .encode(),
    );
    raw.send_bytes(b"abc");
    let (req_id, response) = raw.receive().unwrap();
    assert_eq!(
        (req_id, error_code(&response)),
        (12, Some(ErrorCode::UnknownMessage))
    );
    raw.send(
        13,
        &Request::Admin(AdminRequest::Ping(admin::Ping { nonce: 5 })),
    );
    assert_eq!(
        raw.receive().unwrap(),
        (
            13,
            Response::Admin(AdminResponse::Pong(admin::Pong { nonce: 5 }))
        )
    );

    // A malformed body (a PING one byte short): BAD_FRAME, then close.
    raw.send_bytes(
        &FrameHeader {
            len: 7,
            msg_type: 0x0002,
            flags: 0,
            req_id: 14,
        }
        .encode(),
    );
    raw.send_bytes(&[0u8; 7]);
    assert_eq!(
        error_code(&raw.receive().unwrap().1),
        Some(ErrorCode::BadFrame)
    );
    assert!(raw.closed());
    witness.still_works();

    // Requests before HELLO: UNAUTHORIZED, then close.
    let mut raw = Raw::connect(addr);
    raw.send(3, &Request::Admin(AdminRequest::Stats(admin::Stats)));
    let (req_id, response) = raw.receive().unwrap();
    assert_eq!(
        (req_id, error_code(&response)),
        (3, Some(ErrorCode::Unauthorized))
    );
    assert!(raw.closed());

    // A wrong version: UNSUPPORTED_VERSION naming the server's, then close.
    let mut raw = Raw::connect(addr);
    raw.send(
        1,
        &Request::Admin(AdminRequest::Hello(admin::Hello {
            min_version: PROTOCOL_VERSION + 1,
            max_version: PROTOCOL_VERSION + 3,
            token: Bytes::new(),
            client_name: "future".into(),
        })),
    );
    match raw.receive().unwrap().1 {
        Response::Error {
            code: ErrorCode::UnsupportedVersion,
            detail,
            ..
        } => assert_eq!(detail, u64::from(PROTOCOL_VERSION)),
        other => panic!("expected UNSUPPORTED_VERSION, got {other:?}"),
    }
    assert!(raw.closed());

    // HELLO twice: BAD_FRAME, then close.
    let mut raw = Raw::connect(addr);
    raw.hello(b"");
    assert_eq!(error_code(&raw.hello(b"")), Some(ErrorCode::BadFrame));
    assert!(raw.closed());
    witness.still_works();
}

#[test]
fn a_wrong_token_is_unauthorized() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.token = Some("correct horse".into());
    let server = start(config);
    let addr = server.local_addr();
    for token in [&b""[..], b"correct hors", b"correct horse!", b"wrong"] {
        let mut raw = Raw::connect(addr);
        assert_eq!(
            error_code(&raw.hello(token)),
            Some(ErrorCode::Unauthorized),
            "token {token:?}"
        );
        assert!(raw.closed());
    }
    let mut raw = Raw::connect(addr);
    assert!(matches!(
        raw.hello(b"correct horse"),
        Response::Admin(AdminResponse::Negotiated(admin::Negotiated { .. }))
    ));
    let runtime = runtime();
    let config = ctxstore_client::ClientConfig::new(addr.to_string());
    let refused = runtime
        .block_on(ctxstore_client::Client::connect(config.clone()))
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::Unauthorized));
    let client = runtime
        .block_on(ctxstore_client::Client::connect(
            config.with_token(Some("correct horse".into())),
        ))
        .unwrap();
    runtime.block_on(client.ping(1)).unwrap();
}

#[test]
fn slow_senders_and_idle_connections_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.frame_timeout = Duration::from_millis(300);
    config.limits.idle_timeout = Duration::from_secs(2);
    let server = start(config);
    let addr = server.local_addr();
    let mut witness = Witness::new(addr);

    // Slowloris: a frame dribbled byte by byte is cut off at the frame timeout.
    let mut raw = Raw::connect(addr);
    raw.hello(b"");
    let started = std::time::Instant::now();
    let header = FrameHeader {
        len: 8,
        msg_type: 0x0002,
        flags: 0,
        req_id: 2,
    }
    .encode();
    for byte in header.iter().take(10) {
        raw.send_bytes(&[*byte]);
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_, response) = raw.receive().expect("an error before the close");
    assert_eq!(error_code(&response), Some(ErrorCode::BadFrame));
    assert!(raw.closed());
    assert!(started.elapsed() < Duration::from_secs(2));
    witness.still_works();

    // Half-open: a connection that never says anything is closed at the idle timeout, while
    // the witness, active meanwhile, stays.
    let started = std::time::Instant::now();
    let silent = std::thread::spawn(move || Raw::connect(addr).closed());
    while !silent.is_finished() {
        witness.still_works();
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(silent.join().unwrap());
    assert!(started.elapsed() >= Duration::from_millis(1900));
    witness.still_works();
}

#[test]
fn connections_beyond_the_limit_are_overloaded() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.connections_max = 8;
    let server = start(config);
    let addr = server.local_addr();
    let mut witness = Witness::new(addr);
    let mut held = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..12 {
        let mut raw = Raw::connect(addr);
        match raw.hello(b"") {
            Response::Admin(AdminResponse::Negotiated(admin::Negotiated { .. })) => {
                accepted += 1;
                held.push(raw);
            }
            response => {
                assert_eq!(error_code(&response), Some(ErrorCode::Overloaded));
                assert!(raw.closed());
                refused += 1;
            }
        }
    }
    assert_eq!(
        (accepted, refused),
        (7, 5),
        "8 connections with the witness"
    );
    witness.still_works();
    drop(held);
    // Closed connections free their places.
    std::thread::sleep(Duration::from_millis(200));
    let mut raw = Raw::connect(addr);
    assert!(matches!(
        raw.hello(b""),
        Response::Admin(AdminResponse::Negotiated(admin::Negotiated { .. }))
    ));
}

/// Everything at once: random bytes, slow partial frames, half-open connections and a flood of
/// connections, from several threads, while a well-behaved client appends and reads without a
/// single failure.
#[test]
fn a_storm_of_bad_clients_does_not_disturb_a_good_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.connections_max = 64;
    config.limits.frame_timeout = Duration::from_millis(500);
    config.limits.idle_timeout = Duration::from_secs(2);
    let server = start(config);
    let addr = server.local_addr();
    // Connected before the storm: a flood may fill every connection slot for a moment.
    let mut witness = Witness::new(addr);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let attacks = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut attackers = Vec::new();
    for kind in 0..8u64 {
        let stop = stop.clone();
        let attacks = attacks.clone();
        attackers.push(std::thread::spawn(move || {
            let mut rng = ctxstore_testsupport::SeededRng::new(kind);
            let mut random = |bound: u64| rng.below(bound);
            let mut held = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(stream) = std::net::TcpStream::connect(addr) else {
                    continue;
                };
                let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
                let mut stream = stream;
                use std::io::Write;
                match kind {
                    // Random bytes.
                    0 | 4 => {
                        let bytes: Vec<u8> =
                            (0..1 + random(4096)).map(|_| random(256) as u8).collect();
                        let _ = stream.write_all(&bytes);
                    }
                    // A frame started, never finished.
                    1 | 5 => {
                        let header = FrameHeader {
                            len: 1 << 16,
                            msg_type: 0x0006,
                            flags: 0,
                            req_id: 1,
                        }
                        .encode();
                        let _ = stream.write_all(&header[..1 + random(15) as usize]);
                        held.push(stream);
                    }
                    // Connected, silent (half-open).
                    2 | 6 => held.push(stream),
                    // More connections than the limit at once (the excess is OVERLOADED).
                    7 => {
                        let burst: Vec<_> = (0..80)
                            .filter_map(|_| std::net::TcpStream::connect(addr).ok())
                            .collect();
                        std::thread::sleep(Duration::from_millis(20));
                        drop(burst);
                    }
                    // A valid HELLO, then an oversized frame.
                    _ => {
                        let mut bytes = bytes::BytesMut::new();
                        ctxstore_protocol::encode_request(
                            1,
                            &Request::Admin(AdminRequest::Hello(admin::Hello {
                                min_version: 1,
                                max_version: 1,
                                token: Bytes::new(),
                                client_name: "storm".into(),
                            })),
                            &mut bytes,
                        )
                        .unwrap();
                        bytes.extend_from_slice(
                            &FrameHeader {
                                len: u32::MAX,
                                msg_type: 0x0006,
                                flags: 0,
                                req_id: 2,
                            }
                            .encode(),
                        );
                        let _ = stream.write_all(&bytes);
                    }
                }
                if held.len() > 12 {
                    held.remove(0);
                }
                attacks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        }));
    }
    // The storm lasts at least 4 s and until both sides did real work, however slow the
    // machine: the test asserts behaviour (every witness answer right), not speed.
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(4)
        || witness.turns < 50
        || attacks.load(std::sync::atomic::Ordering::Relaxed) < 200
    {
        witness.still_works();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for attacker in attackers {
        attacker.join().unwrap();
    }
    witness.still_works();
    // The bad connections go away (timeouts and closes); the server is back to the witness.
    // The deadline only keeps a broken server from hanging the test.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let stats = witness.runtime.block_on(witness.client.stats()).unwrap();
        if stats.connections <= 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} connections linger",
            stats.connections
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A client stores a 3 MiB payload, then pipelines thousands of GET_BLOB of it through a 4 KiB
/// receive buffer and never reads. The server answers until the connection holds
/// `--unwritten-bytes-max` (64 MiB) unwritten, then stops reading it: its peak RSS stays
/// bounded (before, it grew by 3 MiB per request, to gigabytes), and other clients are served.
#[test]
fn a_client_that_never_reads_holds_bounded_memory() {
    const PAYLOAD_BYTES: usize = 3 << 20;
    const REQUESTS: u64 = 10_000;
    let server = server_process(&["--network-cores", "2"]);
    let addr = server.socket_addr();
    let mut witness = Witness::new(addr);
    witness.still_works();
    let payload = incompressible(PAYLOAD_BYTES, 7);
    let hash = witness.append(&payload);
    let baseline_kib = proc_status_kib(server.pid(), "VmHWM");

    let stream = connect_with_small_receive_buffer(addr);
    let mut raw = Raw::from_stream(stream.try_clone().unwrap());
    assert!(matches!(
        raw.hello(b""),
        Response::Admin(AdminResponse::Negotiated(admin::Negotiated { .. }))
    ));
    let frames = get_blob_frames(hash.0, 2, REQUESTS);
    let requests_before = witness
        .runtime
        .block_on(witness.client.stats())
        .unwrap()
        .requests_total;
    let (_written, writer) = write_from_thread(stream, frames);
    // The server stops taking requests once the connection holds its limit: the count of
    // requests it has taken stops moving.
    let taken = witness.requests_once_still() - requests_before;
    assert!(
        taken < REQUESTS / 10,
        "the server took {taken} of {REQUESTS} requests from a client that reads nothing"
    );
    let peak_kib = proc_status_kib(server.pid(), "VmHWM");
    let grown_mib = (peak_kib.saturating_sub(baseline_kib)) / 1024;
    eprintln!(
        "unread pipeline: baseline peak RSS {} MiB, peak RSS {} MiB (+{grown_mib} MiB); the \
         server took {taken} of {REQUESTS} requests, then stopped reading",
        baseline_kib / 1024,
        peak_kib / 1024,
    );
    // 64 MiB of unwritten responses plus one in the making, the read buffer and allocator
    // slack; without the bound this is gigabytes.
    assert!(
        grown_mib < 192,
        "server peak RSS grew by {grown_mib} MiB under an unread pipeline"
    );
    // Other clients are served meanwhile.
    witness.still_works();

    // The responses are all there when the client reads at last, in full and correct.
    for _ in 0..3 {
        let (req_id, response) = raw.receive().expect("a queued response");
        assert!((2..2 + REQUESTS).contains(&req_id));
        match response {
            Response::Blobs(BlobsResponse::Blob(blob)) => assert_eq!(blob.data, payload),
            other => panic!("expected BLOB, got {other:?}"),
        }
    }
    drop(raw);
    let _ = writer.join();
    witness.still_works();
}

/// 1,100 connections that never send HELLO: the oldest make room for newcomers (only a
/// quarter of --connections-max may wait for HELLO), so a real client is still admitted and
/// served; and the HELLO deadline closes the silent ones.
#[test]
fn a_flood_of_silent_connections_does_not_lock_out_a_real_client() {
    const SILENT: usize = 1_100;
    // The test process holds both ends of every connection.
    let open_files = rlimit::increase_nofile_limit(u64::MAX).unwrap();
    assert!(
        open_files >= 3 * SILENT as u64,
        "RLIMIT_NOFILE hard limit {open_files} is too low for this test"
    );
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.hello_timeout = Duration::from_secs(3);
    assert_eq!(config.limits.connections_max, 1024);
    let server = start(config);
    let addr = server.local_addr();

    let mut silent: Vec<std::net::TcpStream> = Vec::with_capacity(SILENT);
    for _ in 0..SILENT {
        silent.push(std::net::TcpStream::connect(addr).unwrap());
    }
    let started = std::time::Instant::now();
    let runtime = runtime();
    let client = runtime.block_on(connect(addr));
    let context = runtime
        .block_on(client.create_context())
        .unwrap()
        .context_id;
    runtime
        .block_on(client.append(context, None, 0, 0, Bytes::from_static(b"served")))
        .unwrap();
    let page = runtime.block_on(client.last(context, 1, true)).unwrap();
    assert_eq!(page.turns[0].payload.as_deref(), Some(&b"served"[..]));
    eprintln!(
        "HELLO flood: a real client connected and was served {:?} after {SILENT} silent \
         connections were opened",
        started.elapsed()
    );

    // The first silent connections were closed to make room: OVERLOADED, then EOF.
    let mut oldest = Raw::from_stream(silent.remove(0));
    oldest
        .stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let (req_id, response) = oldest.receive().expect("an error before the close");
    assert_eq!(
        (req_id, error_code(&response)),
        (0, Some(ErrorCode::Overloaded))
    );
    assert!(oldest.closed());

    // The newest were not evicted: the HELLO deadline closes them (UNAUTHORIZED).
    let mut newest = Raw::from_stream(silent.pop().unwrap());
    newest
        .stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let (_, response) = newest.receive().expect("an error before the close");
    assert_eq!(error_code(&response), Some(ErrorCode::Unauthorized));
    assert!(newest.closed());

    // Every silent connection goes; the real client stays. The deadline only keeps a broken
    // server from hanging the test.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let stats = runtime.block_on(client.stats()).unwrap();
        if stats.connections == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} connections linger",
            stats.connections
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    runtime.block_on(client.ping(9)).unwrap();
}

/// HAS_BLOBS over the server's has_blobs_max is a well-formed frame: TOO_LARGE, and the
/// connection stays open (protocol.md, error codes).
#[test]
fn has_blobs_over_the_limit_is_too_large_and_the_connection_stays() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.has_blobs_max = 4;
    let server = start(config);
    let mut raw = Raw::connect(server.local_addr());
    raw.hello(b"");
    let hashes = vec![ctxstore_protocol::BlobHash([1; 32]); 5];
    raw.send(
        2,
        &Request::Blobs(BlobsRequest::HasBlobs(blobs::HasBlobs { hashes })),
    );
    let (req_id, response) = raw.receive().unwrap();
    assert_eq!(
        (req_id, error_code(&response)),
        (2, Some(ErrorCode::TooLarge))
    );
    let hashes = vec![ctxstore_protocol::BlobHash([1; 32]); 4];
    raw.send(
        3,
        &Request::Blobs(BlobsRequest::HasBlobs(blobs::HasBlobs { hashes })),
    );
    assert_eq!(
        raw.receive().unwrap(),
        (
            3,
            Response::Blobs(BlobsResponse::BlobsHeld(blobs::BlobsHeld {
                present: vec![false; 4]
            }))
        )
    );
}

/// Stores a payload through `witness` and opens a connection that pipelines GET_BLOB of it
/// without ever reading.
fn unread_pipeline(
    witness: &mut Witness,
    addr: std::net::SocketAddr,
    payload: &Bytes,
    requests: u64,
) -> (std::net::TcpStream, std::thread::JoinHandle<()>) {
    let hash = witness.append(payload);
    let stream = connect_with_small_receive_buffer(addr);
    let mut raw = Raw::from_stream(stream.try_clone().unwrap());
    assert!(matches!(
        raw.hello(b""),
        Response::Admin(AdminResponse::Negotiated(admin::Negotiated { .. }))
    ));
    let (_, writer) = write_from_thread(
        stream.try_clone().unwrap(),
        get_blob_frames(hash.0, 2, requests),
    );
    (stream, writer)
}

/// Past the server-wide budget of unwritten bytes, connections that hold unwritten responses
/// wait, and a client that reads its responses is still served.
#[test]
fn past_the_server_budget_clients_that_read_are_still_served() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.unwritten_bytes_max = 1 << 20;
    config.limits.unwritten_bytes_total_max = 4 << 20;
    // Requests reserve their largest answer: blobs and pages to the size used here.
    config.engine.limits.blob_bytes_max = 256 << 10;
    config.limits.response_bytes_max = 256 << 10;
    let server = start(config);
    let addr = server.local_addr();
    let mut witness = Witness::new(addr);
    let payload = incompressible(256 << 10, 3);
    // Enough stuck clients to fill the budget well past what the kernel's socket buffers
    // absorb.
    let stuck: Vec<_> = (0..6)
        .map(|_| unread_pipeline(&mut witness, addr, &payload, 400))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..20 {
        witness.still_works();
        let blob = witness
            .runtime
            .block_on(witness.client.blob(ctxstore_client::BlobHash::of(&payload)))
            .unwrap();
        assert_eq!(blob, payload);
    }
    drop(stuck);
}

/// A connection whose peer reads none of its pending responses for idle_timeout is closed,
/// and gives its memory back.
#[test]
fn a_peer_that_reads_nothing_is_closed_after_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.idle_timeout = Duration::from_secs(1);
    let server = start(config);
    let addr = server.local_addr();
    let mut witness = Witness::new(addr);
    let payload = incompressible(1 << 20, 5);
    let (stuck, _writer) = unread_pipeline(&mut witness, addr, &payload, 200);
    // The deadline only keeps a broken server from hanging the test.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let stats = witness.runtime.block_on(witness.client.stats()).unwrap();
        if stats.connections == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the stuck connection was never closed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    witness.still_works();
    drop(stuck);
}

/// Requests that wait count their bodies too: appends of large payloads pipelined faster than
/// the disk takes them hold at most `unwritten_bytes_max` of the server's memory per
/// connection, not `requests_in_flight_max` payloads.
#[test]
fn waiting_appends_count_their_payloads() {
    const PAYLOAD_BYTES: usize = 256 << 10;
    let dir = tempfile::tempdir().unwrap();
    let context = {
        let server = start(config(dir.path()));
        let runtime = runtime();
        let client = runtime.block_on(connect(server.local_addr()));
        runtime
            .block_on(client.create_context())
            .unwrap()
            .context_id
    };
    // The same store, with group commits that wait a minute for more records: appends stay
    // in flight for the whole test.
    let mut config = config(dir.path());
    config.limits.unwritten_bytes_max = 1 << 20;
    config.engine.limits.batch_wait_us_max = 60_000_000;
    config.drain_timeout = Duration::from_millis(500);
    let server = start(config);
    let addr = server.local_addr();
    let runtime = runtime();
    let observer = runtime.block_on(connect(addr));

    let mut raw = Raw::connect(addr);
    raw.hello(b"");
    let mut frames = bytes::BytesMut::new();
    for req_id in 2..52u64 {
        let request = Request::Appends(AppendsRequest::AppendTurn(appends::AppendTurn {
            context: context.into(),
            expected_head: None,
            type_tag: 0,
            codec: 0,
            payload: incompressible(PAYLOAD_BYTES, req_id),
        }));
        ctxstore_protocol::encode_request(req_id, &request, &mut frames).unwrap();
    }
    let (_, writer) = write_from_thread(raw.stream.try_clone().unwrap(), frames.to_vec());
    // Until the server stops taking requests. Each STATS counts itself: take them out. The
    // deadline only keeps a broken server from hanging the test.
    let polls = std::cell::Cell::new(0u64);
    let taken = || {
        let total = runtime.block_on(observer.stats()).unwrap().requests_total;
        polls.set(polls.get() + 1);
        total - polls.get()
    };
    let mut last = taken();
    let mut still_since = std::time::Instant::now();
    let started = std::time::Instant::now();
    while still_since.elapsed() < Duration::from_secs(1) {
        assert!(started.elapsed() < Duration::from_secs(30), "never settled");
        std::thread::sleep(Duration::from_millis(100));
        let now = taken();
        if now != last {
            still_since = std::time::Instant::now();
        }
        last = now;
    }
    // 1 MiB holds four appends of 256 KiB (each with its largest answer); without counting
    // the bodies the server would take all 50.
    assert!(
        (1..=5).contains(&last),
        "the server took {last} appends of 256 KiB into 1 MiB"
    );
    drop(raw);
    drop(server);
    let _ = writer.join();
}

/// The server-wide budget is a hard bound: 64 connections that pipeline GET_BLOB of 512 KiB
/// and never read, under a 64 MiB budget, make the server hold at most the budget (not the
/// budget plus one answer per connection, 96 MiB here), and a client that reads is served
/// meanwhile.
#[test]
fn the_server_budget_is_a_hard_bound_across_many_stuck_connections() {
    const CONNECTIONS: usize = 64;
    const PAYLOAD_BYTES: usize = 512 << 10;
    const BUDGET_MIB: u64 = 64;
    let budget = (BUDGET_MIB << 20).to_string();
    let blob_max = PAYLOAD_BYTES.to_string();
    let server = server_process(&[
        "--network-cores",
        "2",
        "--unwritten-bytes-total-max",
        &budget,
        "--unwritten-bytes-max",
        &budget,
        "--blob-bytes-max",
        &blob_max,
        "--response-bytes-max",
        &blob_max,
        // Answers of the same cached payload would share its memory.
        "--payload-cache-bytes",
        "0",
    ]);
    let addr = server.socket_addr();
    let mut witness = Witness::new(addr);
    witness.still_works();
    let payload = incompressible(PAYLOAD_BYTES, 11);
    let baseline_kib = proc_status_kib(server.pid(), "VmHWM");

    let stuck: Vec<_> = (0..CONNECTIONS)
        .map(|_| unread_pipeline(&mut witness, addr, &payload, 200))
        .collect();
    // Until the server stops taking requests.
    let last = witness.requests_once_still();

    // A client that reads is served meanwhile, blobs as large as the stuck ones' included.
    let serving = std::time::Instant::now();
    for _ in 0..10 {
        witness.still_works();
        let blob = witness
            .runtime
            .block_on(witness.client.blob(ctxstore_client::BlobHash::of(&payload)))
            .unwrap();
        assert_eq!(blob, payload);
    }
    let served_ms = serving.elapsed().as_millis();

    let peak_kib = proc_status_kib(server.pid(), "VmHWM");
    let grown_mib = peak_kib.saturating_sub(baseline_kib) / 1024;
    eprintln!(
        "{CONNECTIONS} stuck connections, budget {BUDGET_MIB} MiB: baseline peak RSS {} MiB, \
         peak RSS {} MiB (+{grown_mib} MiB); {last} requests taken; 10 rounds of a reading \
         client served in {served_ms} ms",
        baseline_kib / 1024,
        peak_kib / 1024,
    );
    // The budget, plus read buffers, a response being encoded and allocator slack. Without
    // the hard bound, each connection held one answer past the budget: 96 MiB of answers.
    assert!(
        grown_mib < BUDGET_MIB + 24,
        "server peak RSS grew by {grown_mib} MiB under a {BUDGET_MIB} MiB budget"
    );
    drop(stuck);
}

/// `request` framed with ACK_AFTER's bits set to `code` (0..=3), whatever the encoder allows.
fn with_ack_after(req_id: u64, request: &Request, code: u16) -> Vec<u8> {
    let mut bytes = bytes::BytesMut::new();
    encode_request(req_id, request, &mut bytes).unwrap();
    let mut header = [0u8; HEADER_BYTES];
    header.copy_from_slice(&bytes[..HEADER_BYTES]);
    let header = FrameHeader {
        flags: FrameHeader::decode(&header).flags | code << frame_flags::ACK_AFTER_SHIFT,
        ..FrameHeader::decode(&header)
    };
    bytes[..HEADER_BYTES].copy_from_slice(&header.encode());
    bytes.to_vec()
}

fn head_of(raw: &mut Raw, context: u64) -> u64 {
    let request = Request::Contexts(ContextsRequest::GetHead(contexts::GetHead {
        context: ContextRef::Id(context),
    }));
    match raw.call(50, &request) {
        Response::Contexts(ContextsResponse::Context(contexts::Context { head, .. })) => {
            head.head_turn_id
        }
        other => panic!("GET_HEAD answered {other:?}"),
    }
}

#[test]
fn ack_after_is_a_bad_frame_where_it_cannot_be_and_remote_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(config(dir.path()));
    let addr = server.local_addr();
    let mut raw = Raw::connect(addr);
    raw.hello(b"");
    let created = raw.call(
        2,
        &Request::Contexts(ContextsRequest::CtxCreate(contexts::CtxCreate {
            base_turn_id: 0,
        })),
    );
    let Response::Contexts(ContextsResponse::Context(contexts::Context { head, .. })) = created
    else {
        panic!("CTX_CREATE answered {created:?}");
    };
    let context = head.context_id;
    let append = Request::Appends(AppendsRequest::AppendTurn(appends::AppendTurn {
        context: ContextRef::Id(context),
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: Bytes::from_static(b"acknowledged"),
    }));
    let acked = |after| Request::AckAfter {
        request: Box::new(append.clone()),
        after,
    };

    // `local`: durable on this disk.
    let appended = raw.call(3, &acked(AckAfter::Local));
    let Response::Appends(AppendsResponse::Appended(appends::Appended { turn, .. })) = appended
    else {
        panic!("an append acknowledged local answered {appended:?}");
    };
    assert_eq!(head_of(&mut raw, context), turn.turn_id);

    // `remote` on a server that does not replicate is refused before it runs:
    // INVALID_ARGUMENT, nothing written, the connection stays.
    let refused = raw.call(4, &acked(AckAfter::Remote));
    let Response::Error {
        code: ErrorCode::InvalidArgument,
        message,
        ..
    } = &refused
    else {
        panic!("an append acknowledged remote answered {refused:?}");
    };
    assert!(
        message.contains("--replicate-to") && message.contains("does not replicate"),
        "{message}"
    );
    assert_eq!(head_of(&mut raw, context), turn.turn_id, "nothing appended");
    let put = Request::AckAfter {
        request: Box::new(Request::Kv(KvRequest::KvPut(kv::KvPut {
            context: ContextRef::Id(context),
            if_absent: false,
            entries: vec![(Bytes::from_static(b"k"), Bytes::from_static(b"v"))],
        }))),
        after: AckAfter::Remote,
    };
    assert_eq!(
        error_code(&raw.call(5, &put)),
        Some(ErrorCode::InvalidArgument)
    );
    let get = Request::Kv(KvRequest::KvGet(kv::KvGet {
        context: ContextRef::Id(context),
        key: Bytes::from_static(b"k"),
        read_flags: 0,
    }));
    let got = raw.call(6, &get);
    assert_eq!(
        error_code(&got),
        Some(ErrorCode::NotFound),
        "a refused put stored its value: {got:?}"
    );

    // On a read, or at 3: BAD_FRAME, then close.
    let get_head = Request::Contexts(ContextsRequest::GetHead(contexts::GetHead {
        context: ContextRef::Id(context),
    }));
    for (request, code) in [(&get_head, 1), (&get_head, 2), (&append, 3)] {
        let mut raw = Raw::connect(addr);
        raw.hello(b"");
        raw.send_bytes(&with_ack_after(7, request, code));
        let (req_id, response) = raw.receive().expect("an error before the close");
        assert_eq!(
            (req_id, error_code(&response)),
            (7, Some(ErrorCode::BadFrame))
        );
        assert!(raw.closed());
    }

    // A connection of version 3 does not know the flag, even on an append.
    let mut old = Raw::connect(addr);
    old.hello_versions(b"", 3, 3);
    old.send_bytes(&with_ack_after(8, &append, 1));
    let (req_id, response) = old.receive().expect("an error before the close");
    assert_eq!(
        (req_id, error_code(&response)),
        (8, Some(ErrorCode::BadFrame))
    );
    assert!(old.closed());
    assert_eq!(head_of(&mut raw, context), turn.turn_id, "nothing appended");
}
