//! `index create/list/drop`, `kv put --index --vector` and `search` (protocol version 6,
//! decision 0033) against a real `ctxstore-server`: hits best first, exactly k through a
//! filter, text and `--json`; a bad vector or metric refused before connecting, the server's
//! refusals with their exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

mod common;

use common::Cli;
use ctxstore_testsupport::TestServer;

fn hit_keys(values: &[Value]) -> Vec<&str> {
    values.iter().map(|v| v["key"].as_str().unwrap()).collect()
}

#[test]
fn entries_are_put_with_vectors_and_found_by_meaning() {
    let server = TestServer::start(None);
    let created = server.one(&["index", "create", "notes", "--dims", "2"], b"");
    assert_eq!(created["metric"], "cosine");
    assert_eq!(created["ef_search"], 128);
    assert_eq!(created["vectors"], 0);
    server.one(&["ctx", "create", "--name", "mem"], b"");
    for (key, vector, value) in [
        ("east", "1,0", r#"{"kind":"place","rank":1}"#),
        ("north", "0,1", r#"{"kind":"place","rank":2}"#),
        ("northeast", "0.7,0.7", r#"{"kind":"note","rank":3}"#),
        ("west", "-1,0", r#"{"kind":"note","rank":4}"#),
    ] {
        let put = server.one(
            &[
                "kv", "put", "@mem", key, "--index", "notes", "--vector", vector,
            ],
            value.as_bytes(),
        );
        assert_eq!(put["key"], key);
    }
    let listed = server.one(&["index", "list"], b"");
    assert_eq!(listed["vectors"], 4);
    let hits = server.json(
        &["search", "@mem", "notes", "--vector", "1,0.1", "-k", "3"],
        b"",
    );
    assert_eq!(hit_keys(&hits), ["east", "northeast", "north"]);
    assert!(hits[0]["score"].as_f64().unwrap() > 0.99);
    let hits = server.json(
        &[
            "search",
            "@mem",
            "notes",
            "--vector",
            "1,0",
            "--filter",
            r#"{"kind": "note"}"#,
        ],
        b"",
    );
    assert_eq!(
        hit_keys(&hits),
        ["northeast", "west"],
        "every note, nearest first"
    );
    // Readable: key, score, length, hash.
    let text = server.run(
        &["search", "@mem", "notes", "--vector", "0,1", "-k", "1"],
        b"",
    );
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.starts_with("north 1.000000 "), "{text}");

    // Refused before connecting: not a vector, not a metric.
    server.fails(&["search", "@mem", "notes", "--vector", "1,x"], b"", 2);
    server.fails(
        &["index", "create", "m", "--dims", "2", "--metric", "dot"],
        b"",
        2,
    );
    // The server's refusals: another dimension, an unknown operator (INVALID_ARGUMENT), an
    // unknown index (NOT_FOUND).
    let error = server.fails(&["search", "@mem", "notes", "--vector", "1,0,0"], b"", 1);
    assert!(
        error["message"].as_str().unwrap().contains("dimensions"),
        "{error}"
    );
    let error = server.fails(
        &[
            "search",
            "@mem",
            "notes",
            "--vector",
            "1,0",
            "--filter",
            r#"{"kind":{"$in":[1]}}"#,
        ],
        b"",
        1,
    );
    assert!(
        error["message"].as_str().unwrap().contains("$in"),
        "{error}"
    );
    server.fails(&["search", "@mem", "absent", "--vector", "1,0"], b"", 3);
    let dropped = server.one(&["index", "drop", "notes"], b"");
    assert_eq!(dropped["vectors"], 4);
    server.fails(&["index", "drop", "notes"], b"", 3);
}
