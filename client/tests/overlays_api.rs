//! The client library's overlay calls (protocol version 2, issue 15 items 4 and 5, decision
//! 0012) against a real `ctxstore-server`: `patch_turn`, `redact_turn` and `purge_blob` with
//! their typed results and errors; reads in an overlay view (`as_of` / `set_view`) carrying
//! `redacted` and `overlay_seq`; a redacted turn's empty payload passing verification.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{
    BlobHash, ClientConfig, ClientError, ContextRef, ErrorCode, NewContext, PageKind,
};

use ctxstore_testsupport::TestServer;

fn connect(server: &TestServer) -> Client {
    Client::connect(ClientConfig::new(server.addr.clone())).unwrap()
}

fn name(name: &str) -> ContextRef {
    ContextRef::Name(name.into())
}

fn code(error: ClientError) -> Option<ErrorCode> {
    error.code()
}

#[test]
fn patch_and_redact_show_in_every_read_of_an_overlay_view() {
    let server = TestServer::start(None);
    let mut client = connect(&server);
    client
        .open_context(NewContext::new().name("thread"))
        .unwrap();
    let append = |text: &'static str| {
        client
            .append(
                name("thread"),
                None,
                1,
                0,
                Bytes::from_static(text.as_bytes()),
            )
            .unwrap()
            .turn
    };
    let first = append("original one");
    let second = append("secret two");
    let third = append("three");

    let patched = client.patch_turn(first.turn_id, &b"fixed one"[..]).unwrap();
    assert_eq!(patched.turn_id, first.turn_id);
    assert_eq!(patched.payload_hash, BlobHash::of(b"fixed one"));
    assert_eq!(patched.payload_len, 9);
    assert!(patched.overlay_seq > 0);
    let redacted = client.redact_turn(second.turn_id).unwrap();
    assert_eq!(redacted.turn_id, second.turn_id);
    assert!(redacted.overlay_seq > patched.overlay_seq);

    // Without a view: the latest payloads (the redacted one empty, and it verifies), no
    // overlay state.
    assert_eq!(client.view(), None);
    let plain = client.last(name("thread"), 10, true).unwrap();
    let payloads: Vec<_> = plain.turns.iter().map(|t| t.payload.clone()).collect();
    let latest = [
        Some(Bytes::from_static(b"fixed one")),
        Some(Bytes::new()),
        Some(Bytes::from_static(b"three")),
    ];
    assert_eq!(payloads, latest);
    assert!(
        plain
            .turns
            .iter()
            .all(|t| !t.redacted && t.overlay_seq == 0)
    );

    // The latest view: every read carries the overlay states.
    client.set_view(Some(0));
    let seqs = [patched.overlay_seq, redacted.overlay_seq, 0];
    let flags = [false, true, false];
    let page = client.last(name("thread"), 10, true).unwrap();
    assert_eq!(
        page.turns
            .iter()
            .map(|t| t.payload.clone())
            .collect::<Vec<_>>(),
        latest
    );
    assert_eq!(
        page.turns.iter().map(|t| t.overlay_seq).collect::<Vec<_>>(),
        seqs
    );
    assert_eq!(
        page.turns.iter().map(|t| t.redacted).collect::<Vec<_>>(),
        flags
    );
    assert_eq!(page.turns[1].payload_hash, BlobHash::of(b""));
    assert_eq!(page.turns[1].payload_len, 0);
    let window = client.window(name("thread"), 10, true).unwrap();
    let window_seqs: Vec<_> = window.turns.iter().map(|t| t.turn.overlay_seq).collect();
    assert_eq!(window_seqs, seqs);
    let log = client
        .turn_log_all(name("thread"), &[], None, false)
        .unwrap();
    let second_in_log = log
        .iter()
        .find(|t| t.turn.turn_id == second.turn_id)
        .unwrap();
    assert!(second_in_log.turn.redacted);
    let chain = client.chain(third.turn_id, 0, 10, false).unwrap();
    assert_eq!(
        chain.turns.iter().map(|t| t.redacted).collect::<Vec<_>>(),
        flags
    );
    assert_eq!(
        client.turn(first.turn_id).unwrap().overlay_seq,
        patched.overlay_seq
    );

    // As of just before the patch: the original payload; the redaction holds in every view.
    client.set_view(Some(patched.overlay_seq - 1));
    let old = client
        .read_page(name("thread"), PageKind::Last, 10, true)
        .unwrap();
    let old_payloads: Vec<_> = old.turns.iter().map(|t| t.turn.payload.clone()).collect();
    assert_eq!(
        old_payloads,
        [
            Some(Bytes::from_static(b"original one")),
            Some(Bytes::new()),
            Some(Bytes::from_static(b"three")),
        ]
    );
    assert_eq!(old.turns[0].turn.overlay_seq, 0);
    assert!(old.turns[1].turn.redacted);
    let by_id = client.turn(first.turn_id).unwrap();
    assert_eq!(
        (by_id.payload_hash, by_id.overlay_seq),
        (first.payload_hash, 0)
    );
    client.set_view(None);

    // Bad input: no such turn; an overlay on a redacted turn (final, not idempotent).
    assert_eq!(
        code(client.redact_turn(9_999_999).unwrap_err()),
        Some(ErrorCode::NotFound)
    );
    let missing = client.patch_turn(9_999_999, &b"x"[..]).unwrap_err();
    assert_eq!(code(missing), Some(ErrorCode::NotFound));
    let again = client.redact_turn(second.turn_id).unwrap_err();
    assert_eq!(code(again), Some(ErrorCode::InvalidArgument));
    let patch_redacted = client.patch_turn(second.turn_id, &b"back"[..]).unwrap_err();
    assert_eq!(code(patch_redacted), Some(ErrorCode::InvalidArgument));
    client.ping(7).unwrap();
}

#[test]
fn purge_redacts_every_turn_naming_the_blob_and_hides_it_by_hash() {
    let server = TestServer::start(None);
    let client = connect(&server);
    for context in ["a", "b"] {
        client
            .open_context(NewContext::new().name(context))
            .unwrap();
    }
    let shared = Bytes::from_static(b"a document both threads quoted");
    let one = client
        .append(name("a"), None, 1, 0, shared.clone())
        .unwrap()
        .turn;
    let two = client.append(name("b"), None, 1, 0, shared).unwrap().turn;
    let kept = client
        .append(name("b"), None, 1, 0, Bytes::from_static(b"kept"))
        .unwrap()
        .turn;

    let purged = client.purge_blob(one.payload_hash).unwrap();
    assert_eq!(purged.payload_hash, one.payload_hash);
    assert_eq!(purged.turns_redacted, 2);
    let view = client.as_async().as_of(0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for turn in [&one, &two] {
        let seen = runtime.block_on(view.turn(turn.turn_id)).unwrap();
        assert!(seen.redacted, "turn {} is redacted", turn.turn_id);
        assert_eq!(seen.payload_hash, BlobHash::of(b""));
    }
    assert!(!runtime.block_on(view.turn(kept.turn_id)).unwrap().redacted);
    let by_hash = client.blob(one.payload_hash).unwrap_err();
    assert_eq!(code(by_hash), Some(ErrorCode::NotFound));
    assert_eq!(client.has_blobs(&[one.payload_hash]).unwrap(), [false]);
    // Turns redacted before are not counted again; a hash the store never had is NOT_FOUND.
    assert_eq!(
        client.purge_blob(one.payload_hash).unwrap().turns_redacted,
        0
    );
    let never = client
        .purge_blob(BlobHash::of(b"never stored"))
        .unwrap_err();
    assert_eq!(code(never), Some(ErrorCode::NotFound));
    let payloads: Vec<_> = client
        .last(name("b"), 10, true)
        .unwrap()
        .turns
        .into_iter()
        .map(|t| t.payload)
        .collect();
    assert_eq!(
        payloads,
        [Some(Bytes::new()), Some(Bytes::from_static(b"kept"))]
    );
}
