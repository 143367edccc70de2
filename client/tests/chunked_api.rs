//! Sub-blob dedup on the wire (issue 16): an append by value of a large payload sends only the
//! chunks the server lacks (HAS_BLOBS → PUT_CHUNKED → an append by hash). Against a real
//! `ctxstore-server`: a growing agent state reads back exactly and its last 100 steps cost
//! under a tenth of their payload bytes on the wire; with chunking off the whole payloads
//! travel; bad PUT_CHUNKED input is refused with a typed error and stores nothing. Against
//! scripted fakes: the client's steps in order (HAS_BLOBS split at the server's limit, only
//! missing chunks sent, one retry with every chunk after NOT_FOUND), a server without
//! PUT_CHUNKED and a version-1 server getting whole payloads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};

use bytes::{Bytes, BytesMut};
use ctxstore_client::blocking::Client;
use ctxstore_client::{
    BlobHash, ChunkRef, ChunkingConfig, ClientConfig, ClientError, ContextRef, ErrorCode, NewTurn,
    split_into_chunks,
};
use ctxstore_protocol::{
    AdminRequest, AppendedWire, AppendsRequest, AppendsResponse, BlobsRequest, BlobsResponse,
    FrameHeader, FrameReader, HEADER_BYTES, MessageType, PayloadSpec, Request, Response,
    ServerLimits, TurnWire, decode_response, encode_request,
};
use ctxstore_protocol::{admin, appends, blobs};

use ctxstore_testsupport::TestServer;
use ctxstore_testsupport::{Seen, scripted_server};

/// Text-like bytes that do not repeat (a fixed xorshift stream): chunk boundaries fall as in
/// real JSON, and no two messages share chunks by accident.
fn words(len: usize, seed: u64) -> String {
    const WORDS: [&str; 16] = [
        "the", "agent", "calls", "a", "tool", "with", "result", "and", "then", "asks", "model",
        "for", "next", "step", "given", "context",
    ];
    let mut rng = ctxstore_testsupport::SeededRng::new(seed);
    let mut text = String::with_capacity(len + 16);
    while text.len() < len {
        let state = rng.next_u64();
        text.push_str(WORDS[(state % 16) as usize]);
        text.push(if state.is_multiple_of(7) { '.' } else { ' ' });
        if state.is_multiple_of(5) {
            text.push_str(&(state % 1000).to_string());
            text.push(' ');
        }
    }
    text
}

/// One ~1 KiB chat message of step `step`, as JSON.
fn message(step: usize) -> String {
    let role = if step.is_multiple_of(2) {
        "user"
    } else {
        "assistant"
    };
    format!(
        "{{\"role\":\"{role}\",\"step\":{step},\"content\":\"{}\"}}",
        words(1000, step as u64)
    )
}

/// The whole agent state of `thread` after `messages`, as LangGraph writes it at every step.
fn state(thread: &str, messages: &[String]) -> Bytes {
    Bytes::from(format!(
        "{{\"thread\":\"{thread}\",\"messages\":[{}]}}",
        messages.join(",")
    ))
}

fn connect(server: &TestServer, chunking: Option<ChunkingConfig>) -> Client {
    Client::connect(ClientConfig::new(server.addr.clone()).with_chunking(chunking)).unwrap()
}

/// What one appended step was: its turn, and the payload it carried.
struct Step {
    turn_id: u64,
    payload: Bytes,
}

/// Appends `steps` growing states of `thread` to a new context; returns the context, the
/// steps, and the bytes the client sent and the payload bytes appended from step
/// `measured_from` on.
fn grow(
    client: &Client,
    thread: &str,
    steps: usize,
    measured_from: usize,
) -> (u64, Vec<Step>, u64, u64) {
    let context = client.create_context().unwrap().context_id;
    let mut messages = Vec::new();
    let mut appended = Vec::new();
    let (mut sent_before, mut payload_bytes) = (0, 0);
    for step in 0..steps {
        messages.push(message(step));
        let payload = state(thread, &messages);
        if step == measured_from {
            sent_before = client.bytes_sent();
        }
        if step >= measured_from {
            payload_bytes += payload.len() as u64;
        }
        let answer = client.append(context, None, 1, 0, payload.clone()).unwrap();
        assert_eq!(answer.turn.payload_hash, BlobHash::of(&payload));
        assert_eq!(answer.turn.payload_len as usize, payload.len());
        assert_eq!(answer.turn.depth as usize, step);
        assert!(
            !answer.deduped,
            "step {step}: a new state is not a dedup hit"
        );
        appended.push(Step {
            turn_id: answer.turn.turn_id,
            payload,
        });
    }
    let sent = client.bytes_sent() - sent_before;
    (context, appended, sent, payload_bytes)
}

/// Every turn of the context reads back exactly: its ids in order, its payload through
/// GET_LAST (paged with GET_BEFORE) and through GET_BLOB.
fn reads_back(client: &Client, context: u64, steps: &[Step]) {
    let mut turns = Vec::new();
    let mut page = client.last(context, 40, true).unwrap();
    loop {
        let next_before = page.next_before;
        let mut older = std::mem::take(&mut page.turns);
        older.append(&mut turns);
        turns = older;
        if next_before == 0 {
            break;
        }
        page = client.before(context, next_before, 40, true).unwrap();
    }
    assert_eq!(turns.len(), steps.len());
    for (turn, step) in turns.iter().zip(steps) {
        assert_eq!(turn.turn_id, step.turn_id);
        assert_eq!(
            turn.payload.as_ref(),
            Some(&step.payload),
            "turn {}",
            turn.turn_id
        );
        let blob = client.blob(BlobHash::of(&step.payload)).unwrap();
        assert_eq!(blob, step.payload, "GET_BLOB of turn {}", turn.turn_id);
    }
}

/// The O(Δ) wire path: 300 steps of a state growing by one ~1 KiB message (chunked from about
/// step 16 on); over the last 100 steps the client writes under a tenth of their payload
/// bytes (every request counted: HAS_BLOBS, PUT_CHUNKED and the appends by hash), and every
/// turn reads back byte for byte.
#[test]
fn a_growing_state_costs_its_growth_on_the_wire() {
    let server = TestServer::start(None);
    let client = connect(&server, Some(ChunkingConfig::default()));
    assert_eq!(
        client.protocol_version(),
        ctxstore_protocol::PROTOCOL_VERSION
    );
    let (context, steps, sent, payload_bytes) = grow(&client, "t-1", 300, 200);
    eprintln!("last 100 steps: {sent} bytes sent for {payload_bytes} payload bytes");
    assert!(
        sent * 10 < payload_bytes,
        "the last 100 steps sent {sent} bytes for {payload_bytes} payload bytes"
    );
    // O(Δ): a step names the previous state as its base and sends what follows their shared
    // prefix (the new message, the re-cut tail, a few chunk entries) — bounded by the growth,
    // not by the state (~260 KB by then).
    assert!(
        sent / 100 < 8 * 1024,
        "{} bytes per step for ~1 KiB of growth",
        sent / 100
    );
    reads_back(&client, context, &steps);
    // The same state again is a dedup hit: the first HAS_BLOBS (the payload's hash, then the
    // chunks after the prefix it shares with the state stored last — itself, so one) finds
    // it, and the append by hash follows; no chunk travels.
    let last = steps.last().unwrap().payload.clone();
    let chunk_count = 1;
    let before = client.bytes_sent();
    let again = client.append(context, None, 1, 0, last.clone()).unwrap();
    assert!(again.deduped);
    assert_eq!(again.turn.payload_hash, BlobHash::of(&last));
    let has_blobs_bytes = 16 + 8 + 32 * (1 + chunk_count);
    let by_hash_bytes = 16 + 32 + 32;
    assert_eq!(
        client.bytes_sent() - before,
        has_blobs_bytes + by_hash_bytes
    );
}

/// With chunking off, every payload travels whole: without compression the client writes at
/// least the payload bytes; compressed (the default on version 3), a whole zstd frame per
/// step, more than the growth chunking sends but less than the payloads; the turns read back
/// the same either way.
#[test]
fn with_chunking_off_whole_payloads_travel() {
    let server = TestServer::start(None);
    let raw = ClientConfig::new(server.addr.clone())
        .with_chunking(None)
        .with_compress_level(None);
    let client = Client::connect(raw).unwrap();
    let (context, steps, sent, payload_bytes) = grow(&client, "t-1", 60, 30);
    assert!(
        sent >= payload_bytes,
        "sent {sent} bytes for {payload_bytes} payload bytes"
    );
    reads_back(&client, context, &steps);

    let compressing = connect(&server, None);
    let (context, steps, sent_compressed, payload_bytes) = grow(&compressing, "t-2", 60, 30);
    assert!(
        sent_compressed < payload_bytes,
        "{sent_compressed} bytes sent"
    );
    let chunking = connect(&server, Some(ChunkingConfig::default()));
    let (_, _, sent_chunked, _) = grow(&chunking, "t-3", 60, 30);
    assert!(
        sent_chunked < sent_compressed,
        "chunked {sent_chunked}, whole frames {sent_compressed}"
    );
    reads_back(&compressing, context, &steps);
}

/// Chunk sizes are the server's settings (`--chunk-*`) and the client's `ChunkingConfig`;
/// they need not match to be correct: a client cutting otherwise than the server still reads
/// back every state exactly and still sends only what grew (its own chunks dedup), and
/// payloads the server cut itself (whole appends) read back beside them.
#[test]
fn chunk_sizes_that_differ_from_the_servers_are_still_correct() {
    let server = TestServer::start_with(
        None,
        &[
            "--chunk-threshold",
            "8KiB",
            "--chunk-min",
            "2KiB",
            "--chunk-avg",
            "8KiB",
            "--chunk-max",
            "64KiB",
        ],
    );
    let odd = ChunkingConfig {
        threshold_bytes: 20_000,
        chunk_bytes_min: 512,
        chunk_bytes_avg: 1024,
        chunk_bytes_max: 4096,
    };
    let client = connect(&server, Some(odd));
    let (context, steps, sent, payload_bytes) = grow(&client, "t-1", 80, 60);
    assert!(
        sent * 5 < payload_bytes,
        "sent {sent} bytes for {payload_bytes} payload bytes"
    );
    reads_back(&client, context, &steps);
    let whole = connect(&server, None);
    let (context, steps, _, _) = grow(&whole, "t-2", 30, 0);
    reads_back(&whole, context, &steps);
}

/// APPEND_TURNS takes the chunked path too: a large payload goes by hash, small ones as they
/// are, in one group commit; a second batch sends only what grew.
#[test]
fn append_turns_sends_large_payloads_by_hash() {
    let server = TestServer::start(None);
    let client = connect(&server, Some(ChunkingConfig::default()));
    let context = ContextRef::Name("thread-1".into());
    client
        .open_context(ctxstore_client::NewContext::new().name("thread-1"))
        .unwrap();
    let mut messages: Vec<String> = (0..60).map(message).collect();
    let big = state("t-1", &messages);
    let batch = |big: &Bytes| {
        vec![
            NewTurn::bytes(&b"tool call"[..]).key(format!("k-{}", big.len())),
            NewTurn::bytes(big.clone()).label("run_id", "r-1"),
            NewTurn::bytes(&b"tool result"[..]),
        ]
    };
    let first = client
        .append_turns(context.clone(), None, batch(&big))
        .unwrap();
    assert_eq!(first.len(), 3);
    assert!(first.iter().all(|turn| !turn.existing));
    assert!(!first[1].deduped, "a new payload is not a dedup hit");
    assert_eq!(first[1].turn.turn.payload_hash, BlobHash::of(&big));
    assert_eq!(
        first[1].turn.labels.get("run_id").map(String::as_str),
        Some("r-1")
    );
    messages.push(message(60));
    let grown = state("t-1", &messages);
    let before = client.bytes_sent();
    let second = client
        .append_turns(context.clone(), None, batch(&grown))
        .unwrap();
    assert!(client.bytes_sent() - before < grown.len() as u64 / 4);
    let page = client.last(context, 6, true).unwrap();
    let payloads: Vec<Bytes> = page
        .turns
        .iter()
        .map(|t| t.payload.clone().unwrap())
        .collect();
    let expected: Vec<Bytes> = [&big, &grown]
        .iter()
        .flat_map(|big| {
            [
                Bytes::from_static(b"tool call"),
                (*big).clone(),
                Bytes::from_static(b"tool result"),
            ]
        })
        .collect();
    assert_eq!(payloads, expected);
    assert_eq!(page.turns[4].turn_id, second[1].turn.turn.turn_id);
}

fn code(result: Result<impl std::fmt::Debug, ClientError>) -> (ErrorCode, String) {
    match result.unwrap_err() {
        ClientError::Server { code, message, .. } => (code, message),
        other => panic!("expected a server error, got {other}"),
    }
}

/// Bad PUT_CHUNKED input over the wire: each refusal is typed and stores nothing (neither the
/// payload nor any chunk it sent).
#[test]
fn bad_chunked_puts_are_refused_and_store_nothing() {
    let server = TestServer::start(None);
    let client = connect(&server, Some(ChunkingConfig::default()));
    let payload = Bytes::from(words(60_000, 77));
    let hash = BlobHash::of(&payload);
    let pieces = split_into_chunks(&ChunkingConfig::default(), &payload);
    assert!(pieces.len() > 4);
    let chunks: Vec<ChunkRef> = pieces.iter().map(|(chunk, _)| *chunk).collect();
    let all: Vec<(u32, Bytes)> = pieces
        .iter()
        .enumerate()
        .map(|(index, (_, bytes))| (index as u32, bytes.clone()))
        .collect();
    let stored = |hashes: &[BlobHash]| client.has_blobs(hashes).unwrap();
    let chunk_hashes: Vec<BlobHash> = chunks.iter().map(|chunk| chunk.hash).collect();
    let nothing_stored = || {
        assert_eq!(stored(&[hash]), [false], "the payload was stored");
        assert!(
            stored(&chunk_hashes).iter().all(|present| !present),
            "a chunk was stored"
        );
    };

    // A chunk the server lacks and the request does not send: NOT_FOUND naming it.
    let (error, message) = code(client.put_chunked(hash, chunks.clone(), all[1..].to_vec()));
    assert_eq!(error, ErrorCode::NotFound, "{message}");
    assert!(message.contains("indexes [0]"), "{message}");
    nothing_stored();

    // A sent chunk whose bytes do not hash to its entry (same length, one byte changed).
    let mut bad = all.clone();
    let mut flipped = BytesMut::from(&bad[1].1[..]);
    flipped[0] ^= 1;
    bad[1].1 = flipped.freeze();
    let (error, message) = code(client.put_chunked(hash, chunks.clone(), bad));
    assert_eq!(error, ErrorCode::HashMismatch, "{message}");
    nothing_stored();

    // Chunks that rebuild another payload than the hash claims.
    let wrong = BlobHash::of(b"another payload");
    let (error, message) = code(client.put_chunked(wrong, chunks.clone(), all.clone()));
    assert_eq!(error, ErrorCode::HashMismatch, "{message}");
    assert_eq!(stored(&[wrong]), [false]);
    nothing_stored();

    // More chunks than one PUT_CHUNKED names: the client refuses before sending…
    let many = vec![chunks[0]; 65_537];
    let refused = client.put_chunked(hash, many, Vec::new()).unwrap_err();
    assert!(
        matches!(refused, ClientError::InvalidArgument(_)),
        "{refused}"
    );
    // …and a client that sends it anyway gets TOO_LARGE.
    assert_eq!(
        raw_put_chunked_count(&server.addr, 65_537),
        ErrorCode::TooLarge
    );

    // The good request stores it; a second one finds it stored; it appends by hash.
    let put = client
        .put_chunked(hash, chunks.clone(), all.clone())
        .unwrap();
    assert_eq!(
        (put.payload_hash, put.payload_len),
        (hash, payload.len() as u64)
    );
    assert!(!put.already_stored);
    assert_eq!(stored(&[hash]), [true]);
    let again = client.put_chunked(hash, chunks, Vec::new()).unwrap();
    assert!(again.already_stored);
    let context = client.create_context().unwrap().context_id;
    client.append_by_hash(context, None, 1, 0, hash).unwrap();
    assert_eq!(client.blob(hash).unwrap(), payload);
    let page = client.last(context, 1, true).unwrap();
    assert_eq!(page.turns[0].payload.as_ref(), Some(&payload));
}

/// Says HELLO (version 2) on a raw socket, then sends a PUT_CHUNKED body that claims `count`
/// chunks and holds none: the server's answer's code.
fn raw_put_chunked_count(addr: &str, count: u32) -> ErrorCode {
    let mut stream = TcpStream::connect(addr).unwrap();
    let hello = Request::Admin(AdminRequest::Hello(admin::Hello {
        min_version: 2,
        max_version: 2,
        token: Bytes::new(),
        client_name: "raw".into(),
    }));
    let mut frame = BytesMut::new();
    encode_request(1, &hello, &mut frame).unwrap();
    let mut body = vec![1u8; 32];
    body.extend_from_slice(&[0u8; 36]); // no base
    body.extend_from_slice(&count.to_le_bytes());
    let header = FrameHeader {
        len: body.len() as u32,
        msg_type: MessageType::PutChunked.code(),
        flags: 0,
        req_id: 2,
    };
    frame.extend_from_slice(&header.encode());
    frame.extend_from_slice(&body);
    stream.write_all(&frame).unwrap();
    let mut reader = FrameReader::new(1 << 20);
    let mut answers = Vec::new();
    while answers.len() < 2 {
        while let Some((header, body)) = reader.next_frame().unwrap() {
            answers.push((header.req_id, decode_response(&header, body).unwrap()));
        }
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk).unwrap();
        assert!(read > 0 || answers.len() >= 2, "closed before answering");
        reader.buffer().extend_from_slice(&chunk[..read]);
    }
    match &answers[1] {
        (2, Response::Error { code, .. }) => *code,
        other => panic!("PUT_CHUNKED answered {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Scripted fakes: the client's steps, request by request.

/// A server on loopback speaking `version` with `limits` that answers each request with
/// `answer` and records every request after HELLO.
fn fake_server(
    version: u16,
    limits: ServerLimits,
    answer: impl FnMut(&Request) -> Response + Send + 'static,
) -> (String, Seen) {
    scripted_server(Ipv4Addr::LOCALHOST.into(), version, limits, answer)
}

fn limits(has_blobs_max: u32) -> ServerLimits {
    ServerLimits {
        frame_bytes_max: 16 << 20,
        requests_in_flight_max: 64,
        blob_bytes_max: 16 << 20,
        read_turns_max: 1000,
        has_blobs_max,
    }
}

fn turn_wire(hash: BlobHash, len: usize) -> TurnWire {
    TurnWire {
        turn_id: 7,
        parent_turn_id: 6,
        context_id: 1,
        depth: 3,
        codec: 0,
        type_tag: 1,
        payload_hash: hash,
        payload_len: len as u32,
        flags: 0,
        created_at_unix_ms: 1,
    }
}

/// The answer a fake gives an append (by value or by hash), or `None` for other requests.
fn appended(request: &Request) -> Option<Response> {
    let (message_type, hash, len) = match request {
        Request::Appends(AppendsRequest::AppendTurn(appends::AppendTurn { payload, .. })) => (
            MessageType::AppendTurn,
            BlobHash(BlobHash::of(payload).0),
            payload.len(),
        ),
        Request::Appends(AppendsRequest::AppendTurnByHash(appends::AppendTurnByHash {
            payload_hash,
            ..
        })) => (MessageType::AppendTurnByHash, *payload_hash, 0),
        _ => return None,
    };
    Some(Response::Appends(AppendsResponse::Appended(
        appends::Appended {
            message_type,
            turn: turn_wire(hash, len),
            deduped: message_type == MessageType::AppendTurnByHash,
        },
    )))
}

fn big_payload() -> Bytes {
    Bytes::from(words(100_000, 5))
}

/// The steps in order: HAS_BLOBS in parts of the server's `has_blobs_max` (the whole payload's
/// hash first, each distinct chunk hash once), PUT_CHUNKED with only the chunks answered
/// missing (at each index they occur), once more with every chunk after NOT_FOUND, then
/// APPEND_TURN_BY_HASH; `deduped` false (the payload was not stored before).
#[test]
fn the_automatic_path_runs_its_steps_in_order() {
    let payload = big_payload();
    let pieces = split_into_chunks(&ChunkingConfig::default(), &payload);
    let chunk_count = pieces.len();
    let distinct: HashSet<BlobHash> = pieces.iter().map(|(chunk, _)| chunk.hash).collect();
    // The server has about every third chunk, not the payload; the first PUT_CHUNKED is told
    // one went missing.
    let whole = BlobHash(BlobHash::of(&payload).0);
    let has = move |hash: &BlobHash| *hash != whole && hash.0[0].is_multiple_of(3);
    let mut puts = 0;
    let (addr, seen) = fake_server(2, limits(10), move |request| match request {
        Request::Blobs(BlobsRequest::HasBlobs(blobs::HasBlobs { hashes })) => {
            Response::Blobs(BlobsResponse::BlobsHeld(blobs::BlobsHeld {
                present: hashes.iter().map(has).collect(),
            }))
        }
        Request::Blobs(BlobsRequest::PutChunked(blobs::PutChunked {
            payload_hash,
            chunks,
            ..
        })) => {
            puts += 1;
            if puts == 1 {
                Response::error(ErrorCode::NotFound, "chunk 3 is not stored")
            } else {
                Response::Blobs(BlobsResponse::ChunkedStored(blobs::ChunkedStored {
                    payload_hash: *payload_hash,
                    payload_len: chunks.iter().map(|chunk| u64::from(chunk.len)).sum(),
                    already_stored: false,
                }))
            }
        }
        other => appended(other).unwrap(),
    });
    let client = Client::connect(ClientConfig::new(addr)).unwrap();
    let answer = client.append(1, None, 1, 0, payload.clone()).unwrap();
    assert!(!answer.deduped, "stored by this call");
    let seen = seen.lock().unwrap();
    let asked: Vec<BlobHash> = seen
        .iter()
        .take_while(|request| {
            matches!(
                request,
                Request::Blobs(BlobsRequest::HasBlobs(blobs::HasBlobs { .. }))
            )
        })
        .flat_map(|request| match request {
            Request::Blobs(BlobsRequest::HasBlobs(blobs::HasBlobs { hashes })) => {
                assert!(hashes.len() <= 10, "over the server's has_blobs_max");
                hashes.clone()
            }
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(asked[0], BlobHash(BlobHash::of(&payload).0));
    assert_eq!(asked.len(), 1 + distinct.len());
    let has_blobs = seen.len() - 3;
    assert_eq!(has_blobs, (asked.len()).div_ceil(10));
    let sent_indexes = |request: &Request| match request {
        Request::Blobs(BlobsRequest::PutChunked(blobs::PutChunked { chunks, sent, .. })) => {
            assert_eq!(chunks.len(), chunk_count);
            for chunk in sent {
                let (entry, bytes) = &pieces[chunk.index as usize];
                assert_eq!(chunk.bytes, bytes);
                assert_eq!(entry.len as usize, bytes.len());
            }
            sent.iter().map(|chunk| chunk.index).collect::<Vec<_>>()
        }
        other => panic!("expected PUT_CHUNKED, got {other:?}"),
    };
    let first = sent_indexes(&seen[has_blobs]);
    let missing: Vec<u32> = pieces
        .iter()
        .enumerate()
        .filter(|(_, (chunk, _))| !has(&chunk.hash))
        .map(|(index, _)| index as u32)
        .collect();
    assert!(!missing.is_empty() && missing.len() < chunk_count);
    assert_eq!(first, missing, "only the chunks the server lacks");
    let retry = sent_indexes(&seen[has_blobs + 1]);
    assert_eq!(retry.len(), chunk_count, "every chunk after NOT_FOUND");
    match &seen[has_blobs + 2] {
        Request::Appends(AppendsRequest::AppendTurnByHash(appends::AppendTurnByHash {
            payload_hash,
            ..
        })) => {
            assert_eq!(*payload_hash, BlobHash(BlobHash::of(&payload).0));
        }
        other => panic!("expected APPEND_TURN_BY_HASH, got {other:?}"),
    }
}

/// A payload the server has whole costs one HAS_BLOBS and an append by hash; `deduped`.
#[test]
fn a_stored_payload_is_appended_by_hash_after_one_has_blobs() {
    let (addr, seen) = fake_server(2, limits(4096), |request| match request {
        Request::Blobs(BlobsRequest::HasBlobs(blobs::HasBlobs { hashes })) => {
            Response::Blobs(BlobsResponse::BlobsHeld(blobs::BlobsHeld {
                present: vec![true; hashes.len()],
            }))
        }
        other => appended(other).unwrap(),
    });
    let client = Client::connect(ClientConfig::new(addr)).unwrap();
    let answer = client.append(1, None, 1, 0, big_payload()).unwrap();
    assert!(answer.deduped);
    let types: Vec<MessageType> = seen
        .lock()
        .unwrap()
        .iter()
        .map(Request::message_type)
        .collect();
    assert_eq!(
        types,
        [MessageType::HasBlobs, MessageType::AppendTurnByHash]
    );
}

/// A payload the server has none of is sent as every chunk: the client cannot tell a unique
/// payload from one the server cut otherwise (other `--chunk-*` sizes, or a batch it stored
/// whole), and its own chunks stored now are what the next, grown state will find.
#[test]
fn a_payload_the_server_lacks_entirely_is_sent_as_every_chunk() {
    let payload = big_payload();
    let chunk_count = split_into_chunks(&ChunkingConfig::default(), &payload).len();
    let (addr, seen) = fake_server(2, limits(4096), |request| match request {
        Request::Blobs(BlobsRequest::HasBlobs(blobs::HasBlobs { hashes })) => {
            Response::Blobs(BlobsResponse::BlobsHeld(blobs::BlobsHeld {
                present: vec![false; hashes.len()],
            }))
        }
        Request::Blobs(BlobsRequest::PutChunked(blobs::PutChunked {
            payload_hash,
            chunks,
            ..
        })) => Response::Blobs(BlobsResponse::ChunkedStored(blobs::ChunkedStored {
            payload_hash: *payload_hash,
            payload_len: chunks.iter().map(|chunk| u64::from(chunk.len)).sum(),
            already_stored: false,
        })),
        other => appended(other).unwrap(),
    });
    let client = Client::connect(ClientConfig::new(addr)).unwrap();
    let answer = client.append(1, None, 1, 0, payload).unwrap();
    assert!(!answer.deduped);
    let seen = seen.lock().unwrap();
    let types: Vec<MessageType> = seen.iter().map(Request::message_type).collect();
    assert_eq!(
        types,
        [
            MessageType::HasBlobs,
            MessageType::PutChunked,
            MessageType::AppendTurnByHash
        ]
    );
    match &seen[1] {
        Request::Blobs(BlobsRequest::PutChunked(blobs::PutChunked { sent, .. })) => {
            assert_eq!(sent.len(), chunk_count)
        }
        _ => unreachable!(),
    }
}

/// A version-2 server older than PUT_CHUNKED answers it UNKNOWN_MESSAGE: the payload goes
/// whole, and from then on large payloads go whole at once (no HAS_BLOBS). Small payloads and
/// APPEND_TURNS turns at or below the threshold never take the chunked path.
#[test]
fn a_server_without_put_chunked_gets_whole_payloads() {
    let big = big_payload();
    let whole = BlobHash(BlobHash::of(&big).0);
    // Every chunk stored, not the payload: PUT_CHUNKED would send no chunk bytes.
    let (addr, seen) = fake_server(2, limits(4096), move |request| match request {
        Request::Blobs(BlobsRequest::HasBlobs(blobs::HasBlobs { hashes })) => {
            Response::Blobs(BlobsResponse::BlobsHeld(blobs::BlobsHeld {
                present: hashes.iter().map(|hash| *hash != whole).collect(),
            }))
        }
        Request::Blobs(BlobsRequest::PutChunked(blobs::PutChunked { .. })) => {
            Response::error(ErrorCode::UnknownMessage, "unknown message type 0x0027")
        }
        Request::Appends(AppendsRequest::AppendTurns(appends::AppendTurns { turns, .. })) => {
            Response::Appends(AppendsResponse::AppendedTurns(appends::AppendedTurns {
                turns: turns
                    .iter()
                    .map(|spec| AppendedWire {
                        turn: match &spec.payload {
                            PayloadSpec::Bytes(bytes) => {
                                turn_wire(BlobHash(BlobHash::of(bytes).0), bytes.len())
                            }
                            PayloadSpec::Hash(hash) => turn_wire(*hash, 0),
                            PayloadSpec::Zstd { hash, raw_len, .. } => {
                                turn_wire(*hash, *raw_len as usize)
                            }
                        },
                        deduped: false,
                        existing: false,
                    })
                    .collect(),
            }))
        }
        other => appended(other).unwrap(),
    });
    let client = Client::connect(ClientConfig::new(addr)).unwrap();
    client.append(1, None, 1, 0, big_payload()).unwrap();
    client.append(1, None, 1, 0, big_payload()).unwrap();
    let small = Bytes::from(vec![b'x'; 16_384]);
    client.append(1, None, 1, 0, small.clone()).unwrap();
    client
        .append_turns(
            1,
            None,
            vec![NewTurn::bytes(big_payload()), NewTurn::bytes(small)],
        )
        .unwrap();
    let seen = seen.lock().unwrap();
    let types: Vec<MessageType> = seen.iter().map(Request::message_type).collect();
    assert_eq!(
        types,
        [
            MessageType::HasBlobs,
            MessageType::PutChunked,
            MessageType::AppendTurn,
            MessageType::AppendTurn,
            MessageType::AppendTurn,
            MessageType::AppendTurns,
        ]
    );
    match &seen[5] {
        Request::Appends(AppendsRequest::AppendTurns(appends::AppendTurns { turns, .. })) => {
            assert!(
                turns
                    .iter()
                    .all(|spec| matches!(spec.payload, PayloadSpec::Bytes(_)))
            )
        }
        _ => unreachable!(),
    }
}

/// A version-1 connection keeps today's path exactly: a large payload is one APPEND_TURN.
#[test]
fn a_version_1_server_gets_whole_payloads() {
    let (addr, seen) = fake_server(1, limits(4096), |request| appended(request).unwrap());
    let client = Client::connect(ClientConfig::new(addr)).unwrap();
    assert_eq!(client.protocol_version(), 1);
    let before = client.bytes_sent();
    let payload = big_payload();
    client.append(1, None, 1, 0, payload.clone()).unwrap();
    let types: Vec<MessageType> = seen
        .lock()
        .unwrap()
        .iter()
        .map(Request::message_type)
        .collect();
    assert_eq!(types, [MessageType::AppendTurn]);
    // The frame: header, 40 bytes of fields, the payload.
    let sent = client.bytes_sent() - before;
    assert_eq!(sent, (HEADER_BYTES + 40 + payload.len()) as u64);
    // PUT_CHUNKED by hand is refused before sending.
    let pieces = split_into_chunks(&ChunkingConfig::default(), &payload);
    let chunks = pieces.iter().map(|(chunk, _)| *chunk).collect();
    let refused = client
        .put_chunked(BlobHash::of(&payload), chunks, Vec::new())
        .unwrap_err();
    assert!(
        matches!(refused, ClientError::Unsupported { needed: 2, .. }),
        "{refused}"
    );
}
