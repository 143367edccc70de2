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

/// Protocol version 7: `append --index --vector` and `search-turns` over one context, a name
/// prefix, a tag, labels and a type.
#[test]
fn turns_are_appended_with_vectors_and_found_by_meaning() {
    let server = TestServer::start(None);
    server.one(&["index", "create", "recall", "--dims", "2"], b"");
    server.one(
        &["ctx", "create", "--name", "u42/a", "--tag", "user=42"],
        b"",
    );
    server.one(&["ctx", "create", "--name", "u7/b", "--tag", "user=7"], b"");
    let mut turn_ids = std::collections::HashMap::new();
    for (context, name, vector, role, type_tag) in [
        ("@u42/a", "east", "1,0", "user", "1"),
        ("@u42/a", "north", "0,1", "assistant", "2"),
        ("@u42/a", "northeast", "0.7,0.7", "user", "1"),
        ("@u7/b", "west", "-1,0", "user", "1"),
        ("@u7/b", "east-b", "1,0.05", "assistant", "2"),
    ] {
        let appended = server.one(
            &[
                "append",
                context,
                "--index",
                "recall",
                "--vector",
                vector,
                "--label",
                &format!("role={role}"),
                "--type",
                type_tag,
            ],
            name.as_bytes(),
        );
        turn_ids.insert(appended["turn_id"].as_u64().unwrap(), name);
    }
    assert_eq!(server.one(&["index", "list"], b"")["vectors"], 5);
    let names = |hits: &[Value]| -> Vec<&str> {
        hits.iter()
            .map(|hit| turn_ids[&hit["turn_id"].as_u64().unwrap()])
            .collect()
    };
    let all = server.json(
        &["search-turns", "recall", "--vector", "1,0", "-k", "3"],
        b"",
    );
    assert_eq!(names(&all), ["east", "east-b", "northeast"]);
    let in_a = server.json(
        &[
            "search-turns",
            "recall",
            "--vector",
            "1,0",
            "-k",
            "2",
            "--context",
            "@u42/a",
        ],
        b"",
    );
    assert_eq!(names(&in_a), ["east", "northeast"]);
    let tagged = server.json(
        &[
            "search-turns",
            "recall",
            "--vector",
            "1,0",
            "--tag",
            "user=7",
        ],
        b"",
    );
    assert_eq!(
        names(&tagged),
        ["east-b", "west"],
        "exactly the two that pass"
    );
    let labelled = server.json(
        &[
            "search-turns",
            "recall",
            "--vector",
            "1,0",
            "--name-prefix",
            "u42/",
            "--label",
            "role=assistant",
        ],
        b"",
    );
    assert_eq!(names(&labelled), ["north"]);
    let typed = server.json(
        &[
            "search-turns",
            "recall",
            "--vector",
            "1,0",
            "--type",
            "2",
            "-k",
            "1",
        ],
        b"",
    );
    assert_eq!(names(&typed), ["east-b"]);
    // Readable: turn, context, depth, type, score.
    let text = server.run(
        &["search-turns", "recall", "--vector", "0,1", "-k", "1"],
        b"",
    );
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.starts_with("turn ") && text.contains(" 1.000000 "),
        "{text}"
    );
    // Refusals: another dimension (INVALID_ARGUMENT), an unknown index (NOT_FOUND), nothing
    // appended.
    server.fails(
        &["append", "@u42/a", "--index", "recall", "--vector", "1,0,0"],
        b"x",
        1,
    );
    server.fails(
        &["append", "@u42/a", "--index", "absent", "--vector", "1,0"],
        b"x",
        3,
    );
    assert_eq!(server.one(&["index", "list"], b"")["vectors"], 5);
    server.fails(&["search-turns", "absent", "--vector", "1,0"], b"", 3);
}
