//! Protocol version 2 end to end: contexts by name in the version-1 messages (frame flag
//! CTX_BY_NAME), CTX_OPEN/SHOW/TAG/LIST/NAME, KV_PUT/GET/DELETE/LIST, ALREADY_EXISTS, the
//! limits as typed errors on an open connection, what survives a restart, and a version-1
//! connection that sees none of it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use ctxstore_protocol::{
    AdminRequest, AdminResponse, AppendsRequest, AppendsResponse, ContextInfoWire, ContextRef,
    ContextsRequest, ContextsResponse, ErrorCode, FrameHeader, KvItemWire, KvRequest, KvResponse,
    ListCursorWire, MessageType, PayloadEncoding, ReadsRequest, ReadsResponse, Request, Response,
    frame_flags,
};
use ctxstore_protocol::{admin, appends, contexts, kv, reads};

fn named(name: &str) -> ContextRef {
    ContextRef::Name(name.into())
}

fn open(name: &str, tags: &[(&str, &str)], get_or_create: bool) -> Request {
    Request::Contexts(ContextsRequest::CtxOpen(contexts::CtxOpen {
        base_turn_id: 0,
        get_or_create,
        clone_from: None,
        name: Some(name.into()),
        tags: tags
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect(),
    }))
}

fn opened(response: Response) -> (ContextInfoWire, bool) {
    match response {
        Response::Contexts(ContextsResponse::Opened(contexts::Opened { info, created })) => {
            (info, created)
        }
        other => panic!("expected CTX_OPEN's answer, got {other:?}"),
    }
}

fn info(response: Response) -> ContextInfoWire {
    match response {
        Response::Contexts(ContextsResponse::ContextInfo(contexts::ContextInfo {
            info, ..
        })) => info,
        other => panic!("expected CONTEXT_INFO, got {other:?}"),
    }
}

fn error(response: &Response) -> (ErrorCode, u64, String) {
    match response {
        Response::Error {
            code,
            detail,
            message,
        } => (*code, *detail, message.clone()),
        other => panic!("expected an ERROR, got {other:?}"),
    }
}

fn tags(info: &ContextInfoWire) -> Vec<(&str, &str)> {
    info.tags
        .iter()
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect()
}

fn list(raw: &mut Raw, req_id: u64, request: Request) -> (Vec<u64>, Option<ListCursorWire>) {
    match raw.call(req_id, &request) {
        Response::Contexts(ContextsResponse::ContextList(contexts::ContextList {
            next_cursor,
            contexts,
        })) => (
            contexts.iter().map(|info| info.head.context_id).collect(),
            next_cursor,
        ),
        other => panic!("expected CTX_LIST's answer, got {other:?}"),
    }
}

fn append(context: ContextRef, payload: &'static [u8]) -> Request {
    Request::Appends(AppendsRequest::AppendTurn(appends::AppendTurn {
        context,
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: Bytes::from_static(payload),
    }))
}

#[test]
fn contexts_by_name_tags_listing_and_key_value_through_the_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(config(dir.path()));
    let mut raw = Raw::connect(server.local_addr());
    match raw.hello(b"") {
        Response::Admin(AdminResponse::Negotiated(admin::Negotiated { version, .. })) => {
            assert_eq!(version, ctxstore_protocol::PROTOCOL_VERSION)
        }
        other => panic!("{other:?}"),
    }

    // Names: create, a taken name is ALREADY_EXISTS naming its owner, get-or-create finds it.
    let (thread, created) = opened(raw.call(2, &open("t-1", &[("status", "idle")], false)));
    assert!(created);
    let id = thread.head.context_id;
    assert_eq!(thread.name.as_deref(), Some("t-1"));
    assert_eq!(tags(&thread), [("status", "idle")]);
    assert!(thread.created_at_unix_ms > 0);
    assert_eq!(thread.created_at_unix_ms, thread.updated_at_unix_ms);
    let (code, detail, message) = error(&raw.call(3, &open("t-1", &[], false)));
    assert_eq!((code, detail), (ErrorCode::AlreadyExists, id));
    assert!(message.contains("t-1"), "{message}");
    let (again, created) = opened(raw.call(4, &open("t-1", &[], true)));
    assert!(!created);
    assert_eq!(again.head.context_id, id);

    // The version-1 messages take the name (frame flag CTX_BY_NAME).
    let first = match raw.call(5, &append(named("t-1"), b"hello")) {
        Response::Appends(AppendsResponse::Appended(appends::Appended { turn, .. })) => turn,
        other => panic!("{other:?}"),
    };
    assert_eq!((first.context_id, first.depth), (id, 0));
    match raw.call(6, &append(ContextRef::Id(id), b"again")) {
        Response::Appends(AppendsResponse::Appended(appends::Appended { turn, .. })) => {
            assert_eq!(turn.parent_turn_id, first.turn_id)
        }
        other => panic!("{other:?}"),
    }
    let head = match raw.call(
        7,
        &Request::Contexts(ContextsRequest::GetHead(contexts::GetHead {
            context: named("t-1"),
        })),
    ) {
        Response::Contexts(ContextsResponse::Context(contexts::Context { head, .. })) => head,
        other => panic!("{other:?}"),
    };
    assert_eq!((head.context_id, head.head_depth), (id, 1));
    let last = raw.call(
        8,
        &Request::Reads(ReadsRequest::GetLast(reads::GetLast {
            context: named("t-1"),
            limit: 10,
            read_flags: ctxstore_protocol::read_flags::WITH_PAYLOADS,
        })),
    );
    match last {
        Response::Reads(ReadsResponse::Turns(reads::Turns { entries, .. })) => {
            let payloads: Vec<&[u8]> = entries.iter().map(|e| &e.payload.data[..]).collect();
            assert_eq!(payloads, [&b"hello"[..], &b"again"[..]]);
        }
        other => panic!("{other:?}"),
    }
    let (code, _, message) = error(&raw.call(
        9,
        &Request::Contexts(ContextsRequest::GetHead(contexts::GetHead {
            context: named("nobody"),
        })),
    ));
    assert_eq!(code, ErrorCode::NotFound);
    assert!(message.contains("nobody"), "{message}");

    // Tags: a compare-and-set on the head, then the change; times move.
    let tag = |expected_head| {
        Request::Contexts(ContextsRequest::CtxTag(contexts::CtxTag {
            context: named("t-1"),
            expected_head,
            set: vec![
                ("status".into(), "done".into()),
                ("team".into(), "a".into()),
            ],
            remove: vec![],
        }))
    };
    let (code, detail, _) = error(&raw.call(10, &tag(Some(first.turn_id))));
    assert_eq!((code, detail), (ErrorCode::Conflict, head.head_turn_id));
    let tagged = info(raw.call(11, &tag(Some(head.head_turn_id))));
    assert_eq!(tags(&tagged), [("status", "done"), ("team", "a")]);
    assert!(tagged.updated_at_unix_ms >= thread.updated_at_unix_ms);
    let removed = info(raw.call(
        12,
        &Request::Contexts(ContextsRequest::CtxTag(contexts::CtxTag {
            context: ContextRef::Id(id),
            expected_head: None,
            set: vec![],
            remove: vec!["team".into()],
        })),
    ));
    assert_eq!(tags(&removed), [("status", "done")]);

    // A context without a name gets one; a named one keeps its own.
    let (plain, _) = opened(raw.call(
        13,
        &Request::Contexts(ContextsRequest::CtxOpen(contexts::CtxOpen {
            base_turn_id: first.turn_id,
            get_or_create: false,
            clone_from: None,
            name: None,
            tags: vec![("status".into(), "done".into())],
        })),
    ));
    assert_eq!((plain.name.as_deref(), plain.head.head_depth), (None, 0));
    let renamed = info(raw.call(
        14,
        &Request::Contexts(ContextsRequest::CtxName(contexts::CtxName {
            context: ContextRef::Id(plain.head.context_id),
            name: "t-2".into(),
        })),
    ));
    assert_eq!(renamed.name.as_deref(), Some("t-2"));
    let rename = |name: &str| {
        Request::Contexts(ContextsRequest::CtxName(contexts::CtxName {
            context: named("t-2"),
            name: name.into(),
        }))
    };
    let (code, _, message) = error(&raw.call(15, &rename("t-9")));
    assert_eq!(code, ErrorCode::InvalidArgument, "{message}");
    let (code, _, message) = error(&raw.call(15, &rename("t-1")));
    assert_eq!(
        code,
        ErrorCode::InvalidArgument,
        "names do not change: {message}"
    );
    let (unnamed, _) = opened(raw.call(
        16,
        &Request::Contexts(ContextsRequest::CtxOpen(contexts::CtxOpen {
            base_turn_id: 0,
            get_or_create: false,
            clone_from: None,
            name: None,
            tags: vec![],
        })),
    ));
    let taken = Request::Contexts(ContextsRequest::CtxName(contexts::CtxName {
        context: ContextRef::Id(unnamed.head.context_id),
        name: "t-1".into(),
    }));
    let (code, detail, _) = error(&raw.call(17, &taken));
    assert_eq!((code, detail), (ErrorCode::AlreadyExists, id));

    // Listing: by tag, by name prefix with paging (each match once, in name order).
    let by_tag = |cursor, limit| {
        Request::Contexts(ContextsRequest::CtxList(contexts::CtxList {
            tags: vec![("status".into(), "done".into())],
            name_prefix: None,
            updated_after_unix_ms: None,
            updated_before_unix_ms: None,
            cursor,
            limit,
        }))
    };
    let (ids, cursor) = list(&mut raw, 16, by_tag(None, 10));
    assert_eq!((ids, cursor), (vec![id, plain.head.context_id], None));
    let (ids, cursor) = list(&mut raw, 17, by_tag(None, 1));
    assert_eq!(ids, [id]);
    assert_eq!(cursor, Some(ListCursorWire::Id(id)));
    let (ids, cursor) = list(&mut raw, 18, by_tag(cursor, 1));
    assert_eq!((ids, cursor), (vec![plain.head.context_id], None));
    let by_prefix = Request::Contexts(ContextsRequest::CtxList(contexts::CtxList {
        tags: vec![],
        name_prefix: Some("t-".into()),
        updated_after_unix_ms: Some(1),
        updated_before_unix_ms: None,
        cursor: Some(ListCursorWire::Name("t-1".into())),
        limit: 10,
    }));
    let (ids, _) = list(&mut raw, 19, by_prefix);
    assert_eq!(ids, [plain.head.context_id]);

    // Key-value: a batch in one request, get, if-absent keeps, list, delete.
    let put = |if_absent, entries: &[(&'static [u8], &'static [u8])]| {
        Request::Kv(KvRequest::KvPut(kv::KvPut {
            context: named("t-1"),
            if_absent,
            entries: entries
                .iter()
                .map(|(key, value)| (Bytes::from_static(key), Bytes::from_static(value)))
                .collect(),
        }))
    };
    let done = raw.call(20, &put(false, &[(b"w:1", b"one"), (b"w:2", b"\x00\xff")]));
    assert_eq!(
        done,
        Response::Kv(KvResponse::Done(kv::Done {
            message_type: MessageType::KvPut
        }))
    );
    raw.call(21, &put(true, &[(b"w:1", b"not this")]));
    let get = |key: &'static [u8]| {
        Request::Kv(KvRequest::KvGet(kv::KvGet {
            context: ContextRef::Id(id),
            key: Bytes::from_static(key),
            read_flags: 0,
        }))
    };
    match raw.call(22, &get(b"w:1")) {
        Response::Kv(KvResponse::KvValue(kv::KvValue {
            value_hash,
            payload,
        })) => {
            assert_eq!(payload.encoding, PayloadEncoding::Raw);
            assert_eq!(&payload.data[..], b"one");
            assert_eq!(value_hash.0, *blake3::hash(b"one").as_bytes());
        }
        other => panic!("{other:?}"),
    }
    let (code, _, _) = error(&raw.call(23, &get(b"w:3")));
    assert_eq!(code, ErrorCode::NotFound);
    let kv_list = |req_id, raw: &mut Raw, after: &'static [u8]| match raw.call(
        req_id,
        &Request::Kv(KvRequest::KvList(kv::KvList {
            context: named("t-1"),
            prefix: Bytes::from_static(b"w:"),
            after: Bytes::from_static(after),
            limit: 100,
        })),
    ) {
        Response::Kv(KvResponse::KvListed(kv::KvListed { items })) => items,
        other => panic!("{other:?}"),
    };
    let items = kv_list(24, &mut raw, b"");
    let keys: Vec<&[u8]> = items.iter().map(|item| &item.key[..]).collect();
    assert_eq!(keys, [&b"w:1"[..], &b"w:2"[..]]);
    assert_eq!(
        items[1],
        KvItemWire {
            key: Bytes::from_static(b"w:2"),
            value_hash: ctxstore_protocol::BlobHash(*blake3::hash(b"\x00\xff").as_bytes()),
            value_len: 2,
        }
    );
    assert_eq!(kv_list(25, &mut raw, b"w:1").len(), 1);

    // Clone: head, tags and key-value entries, under a new name; then its own way.
    let (clone, created) = opened(raw.call(
        26,
        &Request::Contexts(ContextsRequest::CtxOpen(contexts::CtxOpen {
            base_turn_id: 0,
            get_or_create: false,
            clone_from: Some(named("t-1")),
            name: Some("t-1-copy".into()),
            tags: vec![],
        })),
    ));
    assert!(created);
    assert_ne!(clone.head.context_id, id);
    assert_eq!(clone.head.head_turn_id, head.head_turn_id);
    assert_eq!(tags(&clone), [("status", "done")]);
    raw.call(
        27,
        &Request::Kv(KvRequest::KvDelete(kv::KvDelete {
            context: named("t-1"),
            keys: vec![Bytes::from_static(b"w:1")],
        })),
    );
    assert_eq!(kv_list(28, &mut raw, b"").len(), 1);
    let clone_items = match raw.call(
        29,
        &Request::Kv(KvRequest::KvList(kv::KvList {
            context: named("t-1-copy"),
            prefix: Bytes::new(),
            after: Bytes::new(),
            limit: 100,
        })),
    ) {
        Response::Kv(KvResponse::KvListed(kv::KvListed { items })) => items,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        clone_items.len(),
        2,
        "the clone keeps what the source deleted later"
    );

    // Limits: typed errors naming the limit, the connection stays open, nothing half-done.
    let long = "n".repeat(257);
    let over_limit = [
        open(&long, &[], false),
        Request::Contexts(ContextsRequest::CtxShow(contexts::CtxShow {
            context: ContextRef::Name(long.clone()),
        })),
        Request::Contexts(ContextsRequest::CtxOpen(contexts::CtxOpen {
            base_turn_id: 0,
            get_or_create: false,
            clone_from: None,
            name: Some("t-many-tags".into()),
            tags: (0..33).map(|i| (format!("k{i}"), "v".into())).collect(),
        })),
        Request::Contexts(ContextsRequest::CtxTag(contexts::CtxTag {
            context: named("t-1"),
            expected_head: None,
            set: vec![("k".repeat(65), "v".into())],
            remove: vec![],
        })),
        Request::Kv(KvRequest::KvPut(kv::KvPut {
            context: named("t-1"),
            if_absent: false,
            entries: vec![(Bytes::from(vec![b'k'; 257]), Bytes::from_static(b"v"))],
        })),
        Request::Kv(KvRequest::KvPut(kv::KvPut {
            context: named("t-1"),
            if_absent: false,
            entries: (0..129u32)
                .map(|i| (Bytes::from(i.to_string()), Bytes::from_static(b"v")))
                .collect(),
        })),
        Request::Contexts(ContextsRequest::CtxList(contexts::CtxList {
            tags: vec![],
            name_prefix: None,
            updated_after_unix_ms: None,
            updated_before_unix_ms: None,
            cursor: None,
            limit: 1001,
        })),
    ];
    for (index, request) in over_limit.iter().enumerate() {
        let response = raw.call(100 + index as u64, request);
        let (code, _, message) = error(&response);
        assert_eq!(code, ErrorCode::TooLarge, "{request:?}: {message}");
        assert!(message.contains("limit"), "{message}");
    }
    let (code, _, _) = error(&raw.call(
        120,
        &Request::Contexts(ContextsRequest::CtxShow(contexts::CtxShow {
            context: named("t-many-tags"),
        })),
    ));
    assert_eq!(
        code,
        ErrorCode::NotFound,
        "a refused CTX_OPEN created nothing"
    );
    assert_eq!(
        kv_list(121, &mut raw, b"").len(),
        1,
        "a refused KV_PUT put nothing"
    );
    drop(raw);

    // Names, tags and key-value entries survive a restart.
    let config = config(dir.path());
    server.stop();
    let server = start(config);
    let mut raw = Raw::connect(server.local_addr());
    raw.hello(b"");
    let shown = info(raw.call(
        2,
        &Request::Contexts(ContextsRequest::CtxShow(contexts::CtxShow {
            context: named("t-1"),
        })),
    ));
    assert_eq!(shown.head.context_id, id);
    assert_eq!(shown.head.head_turn_id, head.head_turn_id);
    assert_eq!(tags(&shown), [("status", "done")]);
    assert_eq!(shown.created_at_unix_ms, thread.created_at_unix_ms);
    assert!(shown.updated_at_unix_ms >= tagged.updated_at_unix_ms);
    assert_eq!(kv_list(3, &mut raw, b"").len(), 1);
    let copy = info(raw.call(
        4,
        &Request::Contexts(ContextsRequest::CtxShow(contexts::CtxShow {
            context: named("t-1-copy"),
        })),
    ));
    assert_eq!(copy.head.context_id, clone.head.context_id);
}

#[test]
fn a_version_1_connection_sees_version_1_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(config(dir.path()));
    let mut raw = Raw::connect(server.local_addr());
    match raw.hello_versions(b"", 1, 1) {
        Response::Admin(AdminResponse::Negotiated(admin::Negotiated { version, .. })) => {
            assert_eq!(version, 1)
        }
        other => panic!("{other:?}"),
    }
    // A version-2 message is unknown; the connection stays open.
    let (code, _, _) = error(&raw.call(
        2,
        &Request::Contexts(ContextsRequest::CtxShow(contexts::CtxShow {
            context: ContextRef::Id(1),
        })),
    ));
    assert_eq!(code, ErrorCode::UnknownMessage);
    assert_eq!(
        raw.call(
            3,
            &Request::Admin(AdminRequest::Ping(admin::Ping { nonce: 9 }))
        ),
        Response::Admin(AdminResponse::Pong(admin::Pong { nonce: 9 }))
    );
    // A context by name needs a frame flag version 1 does not have: a bad frame, closed.
    raw.send(4, &append(named("t-1"), b"x"));
    let (req_id, response) = raw.receive().expect("an error");
    assert_eq!(req_id, 4);
    assert_eq!(error(&response).0, ErrorCode::BadFrame);
    assert!(raw.closed());

    // A flag the protocol does not define is a bad frame in version 2 too.
    let mut raw = Raw::connect(server.local_addr());
    raw.hello(b"");
    let header = FrameHeader {
        len: 8,
        msg_type: MessageType::Ping.code(),
        flags: frame_flags::CTX_BY_NAME,
        req_id: 5,
    };
    let mut frame = header.encode().to_vec();
    frame.extend_from_slice(&7u64.to_le_bytes());
    raw.send_bytes(&frame);
    let (_, response) = raw.receive().expect("an error");
    assert_eq!(error(&response).0, ErrorCode::BadFrame);
    assert!(raw.closed());
}
