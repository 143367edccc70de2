//! Payloads the client compressed (issue 38, decision 0029) through a real server: APPEND_TURNS
//! with TURN_SPEC flag ZSTD on a version-3 connection is stored and reads back byte for byte; a
//! frame that does not inflate to the bytes its hash names is HASH_MISMATCH (and the
//! connection goes on); on a version-2 connection the flag is a bad frame; the Rust client
//! compresses by default and sends fewer bytes than the payload, and not with compression off.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::{Raw, config, error_code, runtime, start};
use ctxstore_client::{Client, ClientConfig, ContextRef};
use ctxstore_protocol::appends;
use ctxstore_protocol::{
    AppendsRequest, AppendsResponse, BlobHash, ContextRef as ContextRefWire, ErrorCode, ExtrasWire,
    ParentWire, PayloadSpec, Request, Response, TurnSpec,
};

fn chat(len: usize) -> Vec<u8> {
    "{\"role\":\"assistant\",\"content\":\"the tests pass; shipping the fix\"}\n"
        .bytes()
        .cycle()
        .take(len)
        .collect()
}

fn zstd_turns(context_id: u64, hash: BlobHash, raw_len: u32, frame: Vec<u8>) -> Request {
    Request::Appends(AppendsRequest::AppendTurns(appends::AppendTurns {
        context: ContextRefWire::Id(context_id),
        expected_head: None,
        turns: vec![TurnSpec {
            parent: ParentWire::Head,
            type_tag: 1,
            codec: 1,
            summary: false,
            extras: ExtrasWire::default(),
            payload: PayloadSpec::Zstd {
                hash,
                raw_len,
                frame: Bytes::from(frame),
            },
        }],
    }))
}

#[test]
fn zstd_payloads_on_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(config(dir.path()));
    let addr = server.local_addr();
    let rt = runtime();
    let client = rt.block_on(common::connect(addr));
    let context = rt.block_on(client.create_context()).unwrap().context_id;

    let payload = chat(10_240);
    let hash = BlobHash::of(&payload);
    let frame = zstd::bulk::compress(&payload, 3).unwrap();
    let mut raw = Raw::connect(addr);
    raw.hello(b"");

    // A frame that lies about its bytes: refused, nothing appended, the connection goes on.
    let mut changed = payload.clone();
    changed[0] = b'[';
    let other = zstd::bulk::compress(&changed, 3).unwrap();
    let lie = raw.call(2, &zstd_turns(context, hash, 10_240, other));
    assert_eq!(error_code(&lie), Some(ErrorCode::HashMismatch), "{lie:?}");
    let head = rt.block_on(client.head(context)).unwrap();
    assert_eq!(head.head_turn_id, 0);

    // The frame as it should be: stored, and read back as the payload.
    let answer = raw.call(3, &zstd_turns(context, hash, 10_240, frame.clone()));
    let Response::Appends(AppendsResponse::AppendedTurns(appends::AppendedTurns { turns })) =
        answer
    else {
        panic!("{answer:?}");
    };
    assert_eq!(turns[0].turn.payload_hash, hash);
    assert_eq!(turns[0].turn.payload_len, 10_240);
    let page = rt.block_on(client.last(context, 1, true)).unwrap();
    assert_eq!(page.turns[0].payload.as_deref(), Some(&payload[..]));

    // A version-2 connection does not know the flag.
    let mut old = Raw::connect(addr);
    old.hello_versions(b"", 2, 2);
    let refused = old.call(4, &zstd_turns(context, hash, 10_240, frame));
    assert_eq!(
        error_code(&refused),
        Some(ErrorCode::BadFrame),
        "{refused:?}"
    );
    server.stop();
}

#[test]
fn the_client_compresses_by_default_and_not_when_told() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(config(dir.path()));
    let addr = server.local_addr().to_string();
    let rt = runtime();
    let payload = Bytes::from(chat(12_000));
    let sent_for = |config: ClientConfig, seed: u8| {
        rt.block_on(async {
            let client = Client::connect(config).await.unwrap();
            let context = client.create_context().await.unwrap().context_id;
            let mut unique = payload.to_vec();
            unique[0] = seed;
            let unique = Bytes::from(unique);
            let before = client.bytes_sent();
            let appended = client
                .append(ContextRef::Id(context), None, 1, 1, unique.clone())
                .await
                .unwrap();
            let sent = client.bytes_sent() - before;
            assert!(!appended.deduped);
            let page = client.last(ContextRef::Id(context), 1, true).await.unwrap();
            assert_eq!(page.turns[0].payload.as_ref(), Some(&unique));
            sent
        })
    };
    let compressed = sent_for(ClientConfig::new(addr.clone()), b'a');
    let whole = sent_for(ClientConfig::new(addr).with_compress_level(None), b'b');
    assert!(
        compressed * 4 < payload.len() as u64,
        "{compressed} bytes sent"
    );
    assert!(whole > payload.len() as u64, "{whole} bytes sent");
    server.stop();
}
