//! Push reads of streams (STREAM_FOLLOW, protocol version 3, issue 32) from the Rust client:
//! against a real `ctxstore-server`, `follow_stream`'s frames chained offset to offset until
//! the seal, and `stream_reader` reading every byte exactly once, in order, across a dropped
//! connection; against a scripted server that does not know STREAM_FOLLOW (it answers
//! UNKNOWN_MESSAGE), `stream_reader` falls back to STREAM_READ long polls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{ClientConfig, ClientError, ErrorCode, NewStream, StreamState};
use ctxstore_protocol::{
    BlobHash, BlobsRequest, BlobsResponse, OverlayWire, PayloadEncoding, PayloadWire, ReadsRequest,
    ReadsResponse, Request, Response, StreamStateWire, StreamsRequest, StreamsResponse, TurnWire,
};
use ctxstore_protocol::{reads, streams};
use ctxstore_testsupport::{ScriptedServer, TestServer};

fn connect(addr: &str) -> Client {
    Client::connect(ClientConfig::new(addr.to_string())).unwrap()
}

fn delta(index: usize) -> Bytes {
    Bytes::from(format!("tok{index}{} ", "~".repeat(index % 7)))
}

/// A new stream on a new context, written by `writer`.
fn open(writer: &Client) -> u64 {
    let context = writer.create_context().unwrap().context_id;
    writer
        .open_stream(context, NewStream::new(2, 0))
        .unwrap()
        .stream_id
}

#[test]
fn follow_stream_pushes_frames_chained_to_the_seal() {
    let server = TestServer::start(None);
    let writer = connect(&server.addr);
    let stream_id = open(&writer);
    writer.append_delta(stream_id, None, delta(0)).unwrap();
    let follower = connect(&server.addr);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut follow = follower
        .as_async()
        .follow_stream(stream_id, 0, 64 * 1024, Duration::from_secs(10))
        .unwrap();
    let writing = std::thread::spawn(move || {
        for index in 1..300 {
            writer.append_delta(stream_id, None, delta(index)).unwrap();
        }
        writer.seal_stream(stream_id).unwrap().turn.turn_id
    });
    let mut got = Vec::new();
    let mut chunks = Vec::new();
    while let Some(chunk) = runtime.block_on(follow.next()).unwrap() {
        assert_eq!(
            chunk.offset,
            got.len() as u64,
            "each frame starts where the last ended"
        );
        got.extend_from_slice(&chunk.bytes);
        chunks.push(chunk.state);
    }
    let turn_id = writing.join().unwrap();
    let whole: Vec<u8> = (0..300).flat_map(|index| delta(index).to_vec()).collect();
    assert!(got == whole, "every byte once, in order");
    assert_eq!(chunks.last(), Some(&StreamState::Sealed(turn_id)));
    assert!(
        chunks[..chunks.len() - 1]
            .iter()
            .all(|state| *state == StreamState::Open)
    );
    assert!(runtime.block_on(follow.next()).unwrap().is_none(), "ended");

    // An unknown stream: NOT_FOUND, the follow's only frame.
    let mut unknown = follower
        .as_async()
        .follow_stream(stream_id + 1000, 0, 1024, Duration::from_secs(1))
        .unwrap();
    match runtime.block_on(unknown.next()) {
        Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::NotFound),
        other => panic!("{other:?}"),
    }
    // The connection goes on.
    follower.stats().unwrap();
}

#[test]
fn stream_reader_reads_every_byte_once_across_a_reconnect() {
    let server = TestServer::start(None);
    let writer = connect(&server.addr);
    let stream_id = open(&writer);
    let addr = server.addr.clone();
    let reading = std::thread::spawn(move || {
        let mut client = connect(&addr);
        let mut got = Vec::new();
        let mut reconnected = false;
        let mut reader = client.stream_reader(stream_id, 0);
        loop {
            let Some(chunk) = reader.next() else {
                break;
            };
            let chunk = chunk.unwrap();
            assert!(
                reader.pushed(),
                "a server that knows STREAM_FOLLOW is followed"
            );
            got.extend_from_slice(&chunk.bytes);
            if chunk.state != StreamState::Open {
                return (got, chunk.state);
            }
            if !reconnected && got.len() > 1000 {
                // A new connection resumes from the offset the last one reached.
                reconnected = true;
                let offset = reader.offset();
                drop(reader);
                client = connect(&addr);
                reader = client.stream_reader(stream_id, offset);
            }
        }
        panic!("the reader ended without the stream's end");
    });
    let mut whole = Vec::new();
    for index in 0..400 {
        whole.extend_from_slice(&delta(index));
        writer.append_delta(stream_id, None, delta(index)).unwrap();
    }
    let turn_id = writer.seal_stream(stream_id).unwrap().turn.turn_id;
    let (got, state) = reading.join().unwrap();
    assert!(got == whole, "every byte once, in order");
    assert_eq!(state, StreamState::Sealed(turn_id));
}

#[test]
fn stream_reader_long_polls_a_server_that_does_not_know_stream_follow() {
    const WHOLE: &[u8] = b"an answer streamed token by token";
    // The stream was sealed while the reader was away: STREAM_READ answers its first 15 bytes
    // open, then `sealed` with no bytes; the rest is turn 42's payload.
    const READABLE: usize = 15;
    let (addr, seen) = ScriptedServer::new(3).serve(|request| {
        Some(match request {
            Request::Streams(StreamsRequest::StreamFollow(streams::StreamFollow { .. })) => {
                Response::error(
                    ErrorCode::UnknownMessage,
                    "unknown message type 0x0038 (an older server)",
                )
            }
            // Five bytes an answer, then the seal.
            Request::Streams(StreamsRequest::StreamRead(streams::StreamRead {
                stream_id,
                offset,
                ..
            })) => {
                let start = (*offset as usize).min(READABLE);
                let end = (start + 5).min(READABLE);
                let sealed = start == READABLE;
                Response::Streams(StreamsResponse::Read(streams::Read {
                    stream_id: *stream_id,
                    state: if sealed {
                        StreamStateWire::Sealed(42)
                    } else {
                        StreamStateWire::Open
                    },
                    offset: *offset,
                    length: if sealed { 0 } else { READABLE as u64 },
                    bytes: Bytes::from_static(&WHOLE[start..end]),
                }))
            }
            Request::AsOf {
                as_of: 42,
                read: ReadsRequest::GetTurn(reads::GetTurn { turn_id: 42 }),
            } => Response::Overlaid {
                response: Box::new(ReadsResponse::Turn(sealed_turn(WHOLE))),
                overlays: vec![OverlayWire {
                    overlay_seq: 0,
                    redacted: false,
                }],
            },
            Request::Blobs(BlobsRequest::GetBlob(ctxstore_protocol::blobs::GetBlob {
                hash,
                ..
            })) if *hash == BlobHash::of(WHOLE) => {
                Response::Blobs(BlobsResponse::Blob(PayloadWire {
                    encoding: PayloadEncoding::Raw,
                    raw_len: WHOLE.len() as u32,
                    data: Bytes::from_static(WHOLE),
                }))
            }
            _ => Response::error(ErrorCode::Internal, "not scripted"),
        })
    });
    let client = connect(&addr);
    let mut reader = client.stream_reader(7, 0);
    let mut got = Vec::new();
    let mut end = None;
    while let Some(chunk) = reader.next() {
        let chunk = chunk.unwrap();
        assert!(
            !reader.pushed(),
            "UNKNOWN_MESSAGE turns the reader to long polls"
        );
        assert_eq!(chunk.offset, got.len() as u64);
        got.extend_from_slice(&chunk.bytes);
        end = Some(chunk.state);
    }
    assert!(got == WHOLE, "every byte once, in order: {got:?}");
    assert_eq!(end, Some(StreamState::Sealed(42)));
    assert_eq!(reader.offset(), WHOLE.len() as u64);
    let seen = seen.lock().unwrap();
    let follows = seen
        .iter()
        .filter(|request| {
            matches!(
                request,
                Request::Streams(StreamsRequest::StreamFollow(streams::StreamFollow { .. }))
            )
        })
        .count();
    assert_eq!(follows, 1, "one STREAM_FOLLOW, then long polls");
    let blobs = seen
        .iter()
        .filter(|request| matches!(request, Request::Blobs(_)))
        .count();
    assert_eq!(blobs, 1, "the sealed turn's payload, once");
}

/// Turn 42, the seal of a stream whose bytes are `payload`.
fn sealed_turn(payload: &[u8]) -> TurnWire {
    TurnWire {
        turn_id: 42,
        parent_turn_id: 0,
        context_id: 1,
        depth: 0,
        codec: 0,
        type_tag: 2,
        payload_hash: BlobHash::of(payload),
        payload_len: payload.len() as u32,
        flags: 0,
        created_at_unix_ms: 1,
    }
}

#[test]
fn stream_reader_after_the_seal_reads_the_rest_from_the_turn() {
    const WHOLE: &[u8] = b"sealed before anyone read it";
    let server = TestServer::start(None);
    let client = connect(&server.addr);
    let stream_id = open(&client);
    client
        .append_delta(stream_id, None, Bytes::from_static(&WHOLE[..10]))
        .unwrap();
    client
        .append_delta(stream_id, None, Bytes::from_static(&WHOLE[10..]))
        .unwrap();
    let turn_id = client.seal_stream(stream_id).unwrap().turn.turn_id;
    let read_from = |offset: usize| {
        let mut reader = client.stream_reader(stream_id, offset as u64);
        let chunks: Vec<_> = reader.by_ref().map(Result::unwrap).collect();
        assert_eq!(reader.offset(), WHOLE.len() as u64);
        chunks
    };
    for offset in [0, 3, WHOLE.len()] {
        let chunks = read_from(offset);
        assert_eq!(
            chunks.len(),
            1,
            "one chunk: the stream's end, with the rest"
        );
        assert_eq!(chunks[0].state, StreamState::Sealed(turn_id));
        assert_eq!(chunks[0].offset, offset as u64);
        assert_eq!(chunks[0].bytes.as_ref(), &WHOLE[offset..]);
    }
    // Past the payload: an error naming the turn, not an empty end.
    let mut past = client.stream_reader(stream_id, WHOLE.len() as u64 + 1);
    match past.next() {
        Some(Err(ClientError::InvalidArgument(message))) => {
            assert!(message.contains(&format!("turn {turn_id}")), "{message}")
        }
        other => panic!("{other:?}"),
    }

    // A patch of the turn later: the rest is still the bytes as sealed.
    client
        .patch_turn(turn_id, Bytes::from_static(b"something else entirely"))
        .unwrap();
    assert_eq!(
        client.sealed_stream_rest(stream_id, turn_id, 3).unwrap(),
        &WHOLE[3..]
    );
    assert_eq!(read_from(3)[0].bytes.as_ref(), &WHOLE[3..]);
    // Redacted: gone, and said so.
    client.redact_turn(turn_id).unwrap();
    match client.sealed_stream_rest(stream_id, turn_id, 3) {
        Err(ClientError::InvalidArgument(message)) => {
            assert!(message.contains("redacted"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}
