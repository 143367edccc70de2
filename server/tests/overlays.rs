//! Overlays and redaction through the protocol (issue 15 items 4 and 5, decision 0012):
//! PATCH_TURN, REDACT_TURN and PURGE_BLOB with their typed errors, reads in an overlay view
//! (frame flag OVERLAYS) with each TURN's overlay state, a redacted payload that no core's
//! payload cache serves once the redaction is acknowledged, a purged blob gone by hash, what
//! a restart keeps, and a version-1 connection that knows none of it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use ctxstore_protocol::{
    AppendsRequest, AppendsResponse, BlobHash, BlobsRequest, BlobsResponse, ContextRef,
    ContextsRequest, ContextsResponse, ErrorCode, OverlayWire, OverlaysRequest, OverlaysResponse,
    PageKind, ReadsRequest, ReadsResponse, Request, Response, read_flags,
};
use ctxstore_protocol::{appends, blobs, contexts, overlays, reads};

fn append(raw: &mut Raw, req_id: u64, context: u64, payload: Bytes) -> u64 {
    let request = Request::Appends(AppendsRequest::AppendTurn(appends::AppendTurn {
        context: ContextRef::Id(context),
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload,
    }));
    match raw.call(req_id, &request) {
        Response::Appends(AppendsResponse::Appended(appends::Appended { turn, .. })) => {
            turn.turn_id
        }
        other => panic!("{other:?}"),
    }
}

fn as_of(as_of: u64, read: ReadsRequest) -> Request {
    Request::AsOf { as_of, read }
}

fn code(response: &Response) -> ErrorCode {
    error_code(response).unwrap_or_else(|| panic!("expected an ERROR, got {response:?}"))
}

/// GET_LAST with payloads, in the overlay view `seq`: (payload, overlay state) per turn.
fn last(raw: &mut Raw, req_id: u64, context: u64, seq: u64) -> Vec<(Bytes, OverlayWire)> {
    let read = ReadsRequest::GetLast(reads::GetLast {
        context: ContextRef::Id(context),
        limit: 10,
        read_flags: read_flags::WITH_PAYLOADS,
    });
    match raw.call(req_id, &as_of(seq, read)) {
        Response::Overlaid { response, overlays } => match *response {
            ReadsResponse::Turns(reads::Turns { entries, .. }) => entries
                .into_iter()
                .zip(overlays)
                .map(|(entry, overlay)| {
                    // Every payload matches the hash its TURN names.
                    assert_eq!(
                        blake3::hash(&entry.payload.data).as_bytes(),
                        &entry.turn.payload_hash.0
                    );
                    (entry.payload.data, overlay)
                })
                .collect(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn patch_redact_and_purge_through_the_protocol_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(config(dir.path()));
    let mut raw = Raw::connect(server.local_addr());
    raw.hello(b"");
    let context = match raw.call(
        2,
        &Request::Contexts(ContextsRequest::CtxCreate(contexts::CtxCreate {
            base_turn_id: 0,
        })),
    ) {
        Response::Contexts(ContextsResponse::Context(contexts::Context { head, .. })) => {
            head.context_id
        }
        other => panic!("{other:?}"),
    };
    let secret = incompressible(8 << 10, 1);
    let first = append(&mut raw, 3, context, Bytes::from_static(b"draft"));
    let second = append(&mut raw, 4, context, secret.clone());
    // Read once with payloads: the core's payload cache now holds the secret.
    let before = last(&mut raw, 5, context, 0);
    assert_eq!(before[1].0, secret);
    assert_eq!(before[1].1, OverlayWire::default());

    let patch = Request::Overlays(OverlaysRequest::PatchTurn(overlays::PatchTurn {
        turn_id: first,
        payload: Bytes::from_static(b"final"),
    }));
    let patch_seq = match raw.call(6, &patch) {
        Response::Overlays(OverlaysResponse::Patched(overlays::Patched {
            turn_id,
            overlay_seq,
            payload_hash,
            payload_len,
        })) => {
            assert_eq!(turn_id, first);
            assert_eq!(payload_hash.0, *blake3::hash(b"final").as_bytes());
            assert_eq!(payload_len, 5);
            overlay_seq
        }
        other => panic!("{other:?}"),
    };
    let redact_seq = match raw.call(
        7,
        &Request::Overlays(OverlaysRequest::RedactTurn(overlays::RedactTurn {
            turn_id: second,
        })),
    ) {
        Response::Overlays(OverlaysResponse::Redacted(overlays::Redacted {
            turn_id,
            overlay_seq,
        })) => {
            assert_eq!(turn_id, second);
            overlay_seq
        }
        other => panic!("{other:?}"),
    };
    assert!(redact_seq > patch_seq);

    let check = |raw: &mut Raw, req_id: u64| {
        let latest = last(raw, req_id, context, 0);
        assert_eq!(&latest[0].0[..], b"final");
        assert_eq!(latest[0].1.overlay_seq, patch_seq);
        // Redacted: an empty payload (never the cached bytes), in every view.
        assert!(latest[1].0.is_empty());
        assert_eq!(
            latest[1].1,
            OverlayWire {
                overlay_seq: redact_seq,
                redacted: true
            }
        );
        let original = last(raw, req_id + 1, context, 1);
        assert_eq!(&original[0].0[..], b"draft");
        assert_eq!(original[0].1.overlay_seq, 0);
        assert!(original[1].1.redacted && original[1].0.is_empty());
        // READ_PAGE and GET_TURN carry the states too; a plain read its latest view.
        let page = ReadsRequest::ReadPage(reads::ReadPage {
            context: ContextRef::Id(context),
            kind: PageKind::Last,
            limit: 10,
            read_flags: read_flags::WITH_PAYLOADS,
        });
        match raw.call(req_id + 2, &as_of(patch_seq, page)) {
            Response::Overlaid { response, overlays } => {
                assert!(overlays.len() >= 2, "{overlays:?}");
                assert!(overlays[1].redacted);
                assert!(matches!(*response, ReadsResponse::Page(reads::Page { .. })));
            }
            other => panic!("{other:?}"),
        }
        match raw.call(
            req_id + 3,
            &Request::Reads(ReadsRequest::GetTurn(reads::GetTurn { turn_id: second })),
        ) {
            Response::Reads(ReadsResponse::Turn(turn)) => {
                assert_eq!(turn.payload_len, 0);
                assert_eq!(turn.payload_hash.0, *blake3::hash(b"").as_bytes());
            }
            other => panic!("{other:?}"),
        }
    };
    check(&mut raw, 10);

    // Bad input: no such turn; an overlay on a redacted turn.
    let missing = Request::Overlays(OverlaysRequest::RedactTurn(overlays::RedactTurn {
        turn_id: 9_999,
    }));
    assert_eq!(code(&raw.call(20, &missing)), ErrorCode::NotFound);
    let again = Request::Overlays(OverlaysRequest::RedactTurn(overlays::RedactTurn {
        turn_id: second,
    }));
    assert_eq!(code(&raw.call(21, &again)), ErrorCode::InvalidArgument);
    let patch_redacted = Request::Overlays(OverlaysRequest::PatchTurn(overlays::PatchTurn {
        turn_id: second,
        payload: Bytes::from_static(b"x"),
    }));
    assert_eq!(
        code(&raw.call(22, &patch_redacted)),
        ErrorCode::InvalidArgument
    );
    let nothing = Request::Overlays(OverlaysRequest::PurgeBlob(overlays::PurgeBlob {
        hash: BlobHash(*blake3::hash(b"never stored").as_bytes()),
    }));
    assert_eq!(code(&raw.call(23, &nothing)), ErrorCode::NotFound);

    // Purge: a blob two more turns name; GET_BLOB answers NOT_FOUND at once, though the
    // bytes were in this core's cache.
    let shared = incompressible(4 << 10, 2);
    let hash = BlobHash(*blake3::hash(&shared).as_bytes());
    append(&mut raw, 24, context, shared.clone());
    append(&mut raw, 25, context, shared.clone());
    let get_blob = Request::Blobs(BlobsRequest::GetBlob(blobs::GetBlob {
        hash,
        read_flags: 0,
    }));
    assert!(matches!(
        raw.call(26, &get_blob),
        Response::Blobs(BlobsResponse::Blob(_))
    ));
    match raw.call(
        27,
        &Request::Overlays(OverlaysRequest::PurgeBlob(overlays::PurgeBlob { hash })),
    ) {
        Response::Overlays(OverlaysResponse::Purged(overlays::Purged {
            payload_hash,
            turns_redacted,
            ..
        })) => {
            assert_eq!(payload_hash, hash);
            assert_eq!(turns_redacted, 2);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(code(&raw.call(28, &get_blob)), ErrorCode::NotFound);
    let has = Request::Blobs(BlobsRequest::HasBlobs(blobs::HasBlobs {
        hashes: vec![hash],
    }));
    assert!(
        matches!(raw.call(29, &has), Response::Blobs(BlobsResponse::BlobsHeld(blobs::BlobsHeld { present })) if present == [false])
    );

    server.stop();
    let mut server = start(config(dir.path()));
    let mut raw = Raw::connect(server.local_addr());
    raw.hello(b"");
    check(&mut raw, 40);
    assert_eq!(code(&raw.call(50, &get_blob)), ErrorCode::NotFound);
    server.stop();
}

#[test]
fn a_version_1_connection_knows_no_overlays() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(config(dir.path()));
    let mut raw = Raw::connect(server.local_addr());
    raw.hello_versions(b"", 1, 1);
    let redact = Request::Overlays(OverlaysRequest::RedactTurn(overlays::RedactTurn {
        turn_id: 1,
    }));
    assert_eq!(code(&raw.call(2, &redact)), ErrorCode::UnknownMessage);
    // A read with the OVERLAYS flag is a bad frame in version 1.
    raw.send(
        3,
        &as_of(0, ReadsRequest::GetTurn(reads::GetTurn { turn_id: 1 })),
    );
    let (_, response) = raw.receive().expect("an answer");
    assert_eq!(code(&response), ErrorCode::BadFrame);
    server.stop();
}
