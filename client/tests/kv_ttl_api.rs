//! The client's key-value calls with a time to live (protocol version 3, issue 34) against a
//! real `ctxstore-server`, through the async client and its blocking twin: `kv_put_ex`,
//! `kv_get_ex` (refresh), `kv_list_ex`, `kv_touch`, an expired entry `None`, TTLs refused
//! before sending, and `kv_get_many` across requests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::{ClientConfig, ClientError, ContextRef, ErrorCode, NewContext};
use ctxstore_testsupport::TestServer;

fn name(name: &str) -> ContextRef {
    ContextRef::Name(name.into())
}

fn entry(key: &'static str, value: &'static str) -> Vec<(Bytes, Bytes)> {
    vec![(
        Bytes::from_static(key.as_bytes()),
        Bytes::from_static(value.as_bytes()),
    )]
}

#[test]
fn entries_with_a_ttl_through_the_blocking_client() {
    let server = TestServer::start(None);
    let client =
        ctxstore_client::blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    assert_eq!(
        client.protocol_version(),
        ctxstore_protocol::PROTOCOL_VERSION
    );
    let new = NewContext {
        name: Some("mem".into()),
        ..NewContext::default()
    };
    client.open_context(new).unwrap();
    let hour = Duration::from_secs(3600);
    client
        .kv_put_ex(name("mem"), entry("fact", "blue"), false, Some(hour))
        .unwrap();
    client
        .kv_put_ex(
            name("mem"),
            entry("short", "s"),
            false,
            Some(Duration::from_millis(300)),
        )
        .unwrap();
    client
        .kv_put(name("mem"), entry("plain", "p"), false)
        .unwrap();
    // If absent: the live entry keeps its value and TTL.
    client
        .kv_put_ex(name("mem"), entry("fact", "red"), true, None)
        .unwrap();

    let fact = client
        .kv_get_ex(name("mem"), "fact", false)
        .unwrap()
        .unwrap();
    assert_eq!(
        (fact.value.as_ref(), fact.ttl_ms),
        (&b"blue"[..], 3_600_000)
    );
    std::thread::sleep(Duration::from_millis(20));
    let refreshed = client
        .kv_get_ex(name("mem"), "fact", true)
        .unwrap()
        .unwrap();
    assert!(refreshed.expires_at_unix_ms >= fact.expires_at_unix_ms + 20);

    let listed = client
        .kv_list_ex(name("mem"), b"", b"", 100, false)
        .unwrap();
    let ttls: Vec<(&[u8], u64)> = listed.iter().map(|i| (i.key.as_ref(), i.ttl_ms)).collect();
    assert_eq!(
        ttls,
        [(&b"fact"[..], 3_600_000), (b"plain", 0), (b"short", 300)]
    );
    assert_eq!(listed[0].expires_at_unix_ms, refreshed.expires_at_unix_ms);

    let touched = client
        .kv_touch(
            name("mem"),
            vec![Bytes::from_static(b"plain"), Bytes::from_static(b"absent")],
            Some(hour * 2),
        )
        .unwrap();
    assert_eq!(touched.len(), 1);
    assert_eq!(
        (touched[0].key.as_ref(), touched[0].ttl_ms),
        (&b"plain"[..], 7_200_000)
    );

    let deadline = Instant::now() + Duration::from_secs(10);
    while client
        .kv_get_ex(name("mem"), "short", false)
        .unwrap()
        .is_some()
    {
        assert!(Instant::now() < deadline, "the entry never expired");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(client.kv_get(name("mem"), "short").unwrap().is_none());
    // An unknown context stays NOT_FOUND, not a missing key.
    let error = client.kv_get_ex(name("nope"), "k", false).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::NotFound));

    // A TTL that is not whole milliseconds is refused before anything is sent.
    for ttl in [Duration::ZERO, Duration::from_micros(1500)] {
        let error = client
            .kv_put_ex(name("mem"), entry("k", "v"), false, Some(ttl))
            .unwrap_err();
        assert!(matches!(error, ClientError::InvalidArgument(_)), "{error}");
    }
}

#[test]
fn the_async_client_has_the_same_calls() {
    let server = TestServer::start(None);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = ctxstore_client::Client::connect(ClientConfig::new(server.addr.clone()))
            .await
            .unwrap();
        let new = NewContext {
            name: Some("mem".into()),
            ..NewContext::default()
        };
        client.open_context(new).await.unwrap();
        client
            .kv_put_ex(
                name("mem"),
                entry("k", "v"),
                false,
                Some(Duration::from_secs(60)),
            )
            .await
            .unwrap();
        let touched = client
            .kv_touch(name("mem"), vec![Bytes::from_static(b"k")], None)
            .await
            .unwrap();
        assert_eq!(touched[0].ttl_ms, 60_000);
        let value = client
            .kv_get_ex(name("mem"), "k", true)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(value.expires_at_unix_ms, {
            let listed = client
                .kv_list_ex(name("mem"), b"k", b"", 1, false)
                .await
                .unwrap();
            listed[0].expires_at_unix_ms
        });
    });
}

#[test]
fn kv_get_many_answers_every_key_in_order_across_requests() {
    let server = TestServer::start(None);
    let client =
        ctxstore_client::blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let new = NewContext {
        name: Some("many".into()),
        ..NewContext::default()
    };
    client.open_context(new).unwrap();
    let key = |i: usize| Bytes::from(format!("k{i:03}"));
    // 300 keys in puts of 100: KV_GET_MANY asks 128 at most, so three requests answer them.
    for start in [0, 100, 200] {
        let entries = (start..start + 100)
            .map(|i| (key(i), Bytes::from(i.to_string())))
            .collect();
        let ttl = (start == 200).then_some(Duration::from_secs(60));
        client.kv_put_ex(name("many"), entries, false, ttl).unwrap();
    }
    let mut keys: Vec<Bytes> = (0..300).map(key).collect();
    keys.insert(150, Bytes::from_static(b"absent"));
    let values = client.kv_get_many(name("many"), &keys).unwrap();
    assert_eq!(values.len(), 301);
    assert!(values[150].is_none());
    for (i, value) in values.iter().filter_map(Option::as_ref).enumerate() {
        assert_eq!(value.value, Bytes::from(i.to_string()));
        assert_eq!(value.ttl_ms, if i >= 200 { 60_000 } else { 0 });
    }
    assert!(client.kv_get_many(name("many"), &[]).unwrap().is_empty());
    let error = client.kv_get_many(name("nope"), &keys[..1]).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::NotFound));
}
