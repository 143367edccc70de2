//! `kv put --ttl`, `kv get --refresh/--entry`, `kv list` with each entry's TTL and expiry
//! (text and `--json`), and `kv touch` (issue 34, decision 0028), against a real
//! `ctxstore-server`: an expired entry exits 3 like a missing one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

use common::Cli;
use ctxstore_testsupport::TestServer;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn keys_and_ttls(values: &[Value]) -> Vec<(String, Option<u64>)> {
    values
        .iter()
        .map(|v| (v["key"].as_str().unwrap().into(), v["ttl_ms"].as_u64()))
        .collect()
}

#[test]
fn kv_entries_with_a_time_to_live() {
    let server = TestServer::start(None);
    server.one(&["ctx", "create", "--name", "mem"], b"");
    let before_ms = now_ms();
    let put = server.one(&["kv", "put", "@mem", "fact", "--ttl", "1h"], b"blue");
    assert_eq!(put["ttl_ms"], 3_600_000);
    let expires = put["expires_at_unix_ms"].as_u64().unwrap();
    assert!(expires >= before_ms + 3_600_000 && expires <= now_ms() + 3_600_000);
    // Without --ttl: no TTL fields, as before TTLs existed.
    let plain = server.one(&["kv", "put", "@mem", "plain"], b"x");
    assert!(plain.get("ttl_ms").is_none(), "{plain}");
    server.one(&["kv", "put", "@mem", "short", "--ttl", "400ms"], b"s");

    let listed = server.json(&["kv", "list", "@mem"], b"");
    assert_eq!(
        keys_and_ttls(&listed),
        [
            ("fact".into(), Some(3_600_000)),
            ("plain".into(), None),
            ("short".into(), Some(400))
        ]
    );
    // Readable: the TTL and the expiry as a time.
    let text = String::from_utf8(
        server
            .run(&["kv", "list", "@mem", "--prefix", "fact"], b"")
            .stdout,
    )
    .unwrap();
    assert!(
        text.starts_with("fact 4 bytes ") && text.contains(" ttl 1h expires 20"),
        "{text}"
    );

    // get: the value as before; --entry prints the entry; --refresh restarts the TTL.
    let output = server.run(&["kv", "get", "@mem", "fact"], b"");
    assert_eq!(output.stdout, b"blue");
    std::thread::sleep(Duration::from_millis(20));
    let output = server.run(&["kv", "get", "@mem", "fact", "--refresh"], b"");
    assert_eq!(output.stdout, b"blue");
    let entry = server.one(&["kv", "get", "@mem", "fact", "--entry"], b"");
    assert!(
        entry["expires_at_unix_ms"].as_u64().unwrap() >= expires + 20,
        "{entry}"
    );
    let refreshed = server.one(&["kv", "get", "@mem", "fact", "--entry", "--refresh"], b"");
    assert!(refreshed["expires_at_unix_ms"].as_u64() >= entry["expires_at_unix_ms"].as_u64());

    // touch: a given TTL, also for an entry that had none; absent keys left out.
    let touched = server.json(
        &["kv", "touch", "@mem", "plain", "absent", "--ttl", "2h"],
        b"",
    );
    assert_eq!(keys_and_ttls(&touched), [("plain".into(), Some(7_200_000))]);
    let own = server.json(&["kv", "touch", "@mem", "fact"], b"");
    assert_eq!(keys_and_ttls(&own), [("fact".into(), Some(3_600_000))]);

    // Expired: NOT_FOUND, exit 3, like a missing key; gone from the list.
    let deadline = Instant::now() + Duration::from_secs(10);
    while server
        .run(&["kv", "get", "@mem", "short"], b"")
        .status
        .success()
    {
        assert!(Instant::now() < deadline, "the entry never expired");
        std::thread::sleep(Duration::from_millis(20));
    }
    let error = server.fails(&["kv", "get", "@mem", "short"], b"", 3);
    assert_eq!(error["code"], "NOT_FOUND");
    assert_eq!(
        keys_and_ttls(&server.json(&["kv", "list", "@mem"], b"")),
        [
            ("fact".into(), Some(3_600_000)),
            ("plain".into(), Some(7_200_000))
        ]
    );

    // A TTL that is no whole number of milliseconds, or none at all: a usage error.
    for ttl in ["0s", "1us", "soon"] {
        let error = server.fails(&["kv", "put", "@mem", "k", "--ttl", ttl], b"v", 2);
        assert_eq!(error["code"], "USAGE", "{ttl}: {error}");
    }
}
