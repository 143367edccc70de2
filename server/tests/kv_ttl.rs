//! Protocol version 3's key-value TTL (issue 34, decision 0028) end to end: KV_PUT_EX with a
//! TTL, KV_GET_EX and KV_LIST_EX answering each entry's TTL and expiry and refreshing it on
//! request, KV_TOUCH, an expired entry NOT_FOUND at once, and a version-2 connection to which
//! the new messages are unknown; KV_GET_MANY's order, missing keys and paging at the response
//! budget.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use ctxstore_protocol::{
    AdminResponse, ContextRef, ContextsRequest, ErrorCode, KvItemExWire, KvRequest, KvResponse,
    MessageType, Request, Response, kv_put_flags, kv_read_flags,
};
use ctxstore_protocol::{admin, contexts, kv};

fn put(ttl_ms: u64, put_flags: u8, key: &'static [u8], value: &'static [u8]) -> Request {
    Request::Kv(KvRequest::KvPutEx(kv::KvPutEx {
        context: ContextRef::Name("mem".into()),
        put_flags,
        ttl_ms,
        entries: vec![(Bytes::from_static(key), Bytes::from_static(value))],
    }))
}

fn get(key: &'static [u8], kv_flags: u8) -> Request {
    Request::Kv(KvRequest::KvGetEx(kv::KvGetEx {
        context: ContextRef::Name("mem".into()),
        key: Bytes::from_static(key),
        read_flags: 0,
        kv_flags,
    }))
}

fn list(kv_flags: u8) -> Request {
    Request::Kv(KvRequest::KvListEx(kv::KvListEx {
        context: ContextRef::Name("mem".into()),
        prefix: Bytes::new(),
        after: Bytes::new(),
        limit: 100,
        kv_flags,
    }))
}

fn items(response: Response) -> Vec<KvItemExWire> {
    match response {
        Response::Kv(
            KvResponse::KvListedEx(kv::KvListedEx { items })
            | KvResponse::KvTouched(kv::KvTouched { items }),
        ) => items,
        other => panic!("{other:?}"),
    }
}

fn keys_and_ttls(items: &[KvItemExWire]) -> Vec<(&[u8], u64)> {
    items
        .iter()
        .map(|item| (item.key.as_ref(), item.ttl_ms))
        .collect()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn entries_with_a_ttl_through_the_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(config(dir.path()));
    let mut raw = Raw::connect(server.local_addr());
    match raw.hello(b"") {
        Response::Admin(AdminResponse::Negotiated(admin::Negotiated { version, .. })) => {
            // The newest version (TTLs came with version 3).
            assert_eq!(version, ctxstore_protocol::PROTOCOL_VERSION)
        }
        other => panic!("{other:?}"),
    }
    raw.call(
        2,
        &Request::Contexts(ContextsRequest::CtxOpen(contexts::CtxOpen {
            base_turn_id: 0,
            get_or_create: true,
            clone_from: None,
            name: Some("mem".into()),
            tags: Vec::new(),
        })),
    );
    let before_ms = now_ms();
    assert_eq!(
        raw.call(3, &put(400, 0, b"short", b"s")),
        Response::Kv(KvResponse::Done(kv::Done {
            message_type: MessageType::KvPutEx
        }))
    );
    raw.call(4, &put(3_600_000, 0, b"long", b"l"));
    raw.call(5, &put(0, 0, b"none", b"n"));
    // If absent: the live entry keeps its value and its TTL.
    raw.call(6, &put(0, kv_put_flags::IF_ABSENT, b"long", b"other"));
    match raw.call(7, &get(b"long", 0)) {
        Response::Kv(KvResponse::KvValueEx(kv::KvValueEx {
            ttl_ms,
            expires_at_unix_ms,
            payload,
            ..
        })) => {
            assert_eq!(ttl_ms, 3_600_000);
            assert!(expires_at_unix_ms >= before_ms + 3_600_000);
            assert_eq!(payload.data.as_ref(), b"l");
        }
        other => panic!("{other:?}"),
    }
    let listed = items(raw.call(8, &list(0)));
    assert_eq!(
        keys_and_ttls(&listed),
        [(&b"long"[..], 3_600_000), (b"none", 0), (b"short", 400)]
    );
    assert_eq!(listed[1].expires_at_unix_ms, 0);

    // A refresh on read restarts the TTL; the answer carries the new expiry.
    std::thread::sleep(Duration::from_millis(20));
    let refreshed = items(raw.call(9, &list(kv_read_flags::REFRESH)));
    assert!(refreshed[0].expires_at_unix_ms >= listed[0].expires_at_unix_ms + 20);
    assert_eq!(refreshed[1], listed[1], "no TTL, nothing to refresh");
    match raw.call(10, &get(b"short", kv_read_flags::REFRESH)) {
        Response::Kv(KvResponse::KvValueEx(kv::KvValueEx {
            expires_at_unix_ms, ..
        })) => assert!(expires_at_unix_ms >= refreshed[2].expires_at_unix_ms),
        other => panic!("{other:?}"),
    }

    // KV_TOUCH: a given TTL, absent keys left out.
    let touch = Request::Kv(KvRequest::KvTouch(kv::KvTouch {
        context: ContextRef::Name("mem".into()),
        ttl_ms: 300,
        keys: vec![Bytes::from_static(b"none"), Bytes::from_static(b"absent")],
    }));
    let touched = items(raw.call(11, &touch));
    assert_eq!(keys_and_ttls(&touched), [(&b"none"[..], 300)]);

    // Expired: NOT_FOUND (detail 1: the context exists) at once, and gone from listings.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match raw.call(12, &get(b"short", 0)) {
            Response::Error { code, detail, .. } => {
                assert_eq!((code, detail), (ErrorCode::NotFound, 1));
                break;
            }
            _ => assert!(Instant::now() < deadline, "the entry never expired"),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        keys_and_ttls(&items(raw.call(13, &list(0)))),
        [(&b"long"[..], 3_600_000)]
    );

    // Limits as typed errors: 129 keys, a TTL past 100 years.
    let many = Request::Kv(KvRequest::KvTouch(kv::KvTouch {
        context: ContextRef::Name("mem".into()),
        ttl_ms: 0,
        keys: (0..129)
            .map(|i| Bytes::from(format!("k{i}").into_bytes()))
            .collect(),
    }));
    assert_eq!(error_code(&raw.call(14, &many)), Some(ErrorCode::TooLarge));
    let error = raw.call(15, &put(u64::MAX, 0, b"x", b"x"));
    assert_eq!(error_code(&error), Some(ErrorCode::InvalidArgument));

    // A version-2 connection does not know the version-3 messages.
    let mut old = Raw::connect(server.local_addr());
    match old.hello_versions(b"", 1, 2) {
        Response::Admin(AdminResponse::Negotiated(admin::Negotiated { version, .. })) => {
            assert_eq!(version, 2)
        }
        other => panic!("{other:?}"),
    }
    let error = old.call(2, &get(b"long", 0));
    assert_eq!(error_code(&error), Some(ErrorCode::UnknownMessage));
}

fn get_many(keys: &[&'static [u8]]) -> Request {
    Request::Kv(KvRequest::KvGetMany(kv::KvGetMany {
        context: ContextRef::Name("mem".into()),
        read_flags: 0,
        keys: keys.iter().map(|key| Bytes::from_static(key)).collect(),
    }))
}

fn values(response: Response) -> Vec<Option<kv::KvValueEx>> {
    match response {
        Response::Kv(KvResponse::KvValues(kv::KvValues { values })) => values,
        other => panic!("{other:?}"),
    }
}

#[test]
fn kv_get_many_answers_in_order_and_pages_at_the_response_budget() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.engine.limits.blob_bytes_max = 4096;
    config.limits.response_bytes_max = 4096;
    let server = start(config);
    let mut raw = Raw::connect(server.local_addr());
    raw.hello(b"");
    let open = kv::KvPutEx {
        context: ContextRef::Name("mem".into()),
        put_flags: 0,
        ttl_ms: 0,
        entries: Vec::new(),
    };
    let created = Request::Contexts(ContextsRequest::CtxOpen(contexts::CtxOpen {
        base_turn_id: 0,
        get_or_create: true,
        clone_from: None,
        name: Some("mem".into()),
        tags: Vec::new(),
    }));
    raw.call(2, &created);
    let big = Bytes::from(vec![7u8; 3000]);
    let entries = vec![
        (Bytes::from_static(b"a"), big.clone()),
        (Bytes::from_static(b"b"), big.clone()),
    ];
    raw.call(
        3,
        &Request::Kv(KvRequest::KvPutEx(kv::KvPutEx { entries, ..open })),
    );
    raw.call(4, &put(3_600_000, 0, b"small", b"s"));

    // In the keys' order, a missing key None, the TTL with each value.
    let answered = values(raw.call(5, &get_many(&[b"small", b"absent", b"a"])));
    assert_eq!(answered.len(), 3);
    let small = answered[0].as_ref().unwrap();
    assert_eq!(
        (small.payload.data.as_ref(), small.ttl_ms),
        (&b"s"[..], 3_600_000)
    );
    assert!(answered[1].is_none());
    assert_eq!(answered[2].as_ref().unwrap().payload.data, big);

    // Two 3,000-byte values pass a 4,096-byte budget: the answer covers the first key only.
    let answered = values(raw.call(6, &get_many(&[b"a", b"b"])));
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].as_ref().unwrap().payload.data, big);

    // No keys, too many keys, an unknown context: typed errors.
    let refused = |response: Response| error_code(&response).unwrap();
    assert_eq!(
        refused(raw.call(7, &get_many(&[]))),
        ErrorCode::InvalidArgument
    );
    let many: Vec<&'static [u8]> = vec![b"k"; 129];
    assert_eq!(refused(raw.call(8, &get_many(&many))), ErrorCode::TooLarge);
    let unknown = Request::Kv(KvRequest::KvGetMany(kv::KvGetMany {
        context: ContextRef::Name("nobody".into()),
        read_flags: 0,
        keys: vec![Bytes::from_static(b"a")],
    }));
    assert_eq!(refused(raw.call(9, &unknown)), ErrorCode::NotFound);
}
