//! The `ctxstore` CLI against a real `ctxstore-server`: every command with `--json`, the field
//! names scripts depend on, and a non-zero exit on errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

mod common;

use common::{CLI, Cli};
use ctxstore_testsupport::TestServer;
use std::process::Command;

fn field(value: &Value, name: &str) -> u64 {
    value[name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} missing in {value}"))
}

#[test]
fn every_command_with_json() {
    let server = TestServer::start(None);

    let created = &server.json(&["ctx", "create"], b"")[0];
    let context = field(created, "context_id");
    assert_eq!(
        (field(created, "head_turn_id"), field(created, "head_depth")),
        (0, 0)
    );

    let first = &server.json(
        &[
            "append",
            &context.to_string(),
            "--codec",
            "json",
            "--type",
            "7",
        ],
        b"{\"role\":\"user\"}",
    )[0];
    assert_eq!(field(first, "depth"), 0);
    assert_eq!(field(first, "parent_turn_id"), 0);
    assert_eq!(first["deduped"], Value::Bool(false));
    let hash = first["payload_hash"].as_str().unwrap().to_string();
    assert_eq!(hash.len(), 64);
    let first_id = field(first, "turn_id");

    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), b"second turn, from a file").unwrap();
    let second = &server.json(
        &[
            "append",
            &context.to_string(),
            "--file",
            file.path().to_str().unwrap(),
            "--expect-head",
            &first_id.to_string(),
        ],
        b"",
    )[0];
    let second_id = field(second, "turn_id");
    assert_eq!(field(second, "parent_turn_id"), first_id);

    let head = &server.json(&["head", &context.to_string()], b"")[0];
    assert_eq!(
        (field(head, "head_turn_id"), field(head, "head_depth")),
        (second_id, 1)
    );

    let turn = &server.json(&["turn", &first_id.to_string()], b"")[0];
    for name in [
        "turn_id",
        "parent_turn_id",
        "depth",
        "type_tag",
        "payload_len",
    ] {
        assert!(turn[name].is_u64(), "{name} in {turn}");
    }
    assert_eq!(turn["codec"], "json");
    assert_eq!(field(turn, "type_tag"), 7);
    assert_eq!(turn["payload_hash"].as_str(), Some(hash.as_str()));
    assert_eq!(field(turn, "payload_len"), 15);

    let last = server.json(
        &["last", &context.to_string(), "-n", "5", "--payloads"],
        b"",
    );
    assert_eq!(
        last.iter().map(|t| field(t, "turn_id")).collect::<Vec<_>>(),
        vec![first_id, second_id]
    );
    assert_eq!(last[0]["payload_b64"], "eyJyb2xlIjoidXNlciJ9");
    let last_plain = server.json(&["last", &context.to_string()], b"");
    assert!(last_plain[0].get("payload_b64").is_none());

    let page = server.json(
        &[
            "page",
            &context.to_string(),
            "--before",
            &second_id.to_string(),
        ],
        b"",
    );
    assert_eq!(
        page.iter().map(|t| field(t, "turn_id")).collect::<Vec<_>>(),
        vec![first_id]
    );
    let range = server.json(
        &[
            "range",
            &context.to_string(),
            "--from-depth",
            "1",
            "-n",
            "1",
        ],
        b"",
    );
    assert_eq!(
        range
            .iter()
            .map(|t| field(t, "turn_id"))
            .collect::<Vec<_>>(),
        vec![second_id]
    );
    let replay = server.json(&["replay", &second_id.to_string()], b"");
    assert_eq!(replay.len(), 2);

    let fork = &server.json(&["ctx", "fork", &first_id.to_string()], b"")[0];
    assert_eq!(field(fork, "head_turn_id"), first_id);
    let from = &server.json(&["ctx", "create", "--from", &second_id.to_string()], b"")[0];
    assert_eq!(field(from, "head_depth"), 1);
    let dup = &server.json(
        &["append", &field(fork, "context_id").to_string()],
        b"{\"role\":\"user\"}",
    )[0];
    assert_eq!(dup["deduped"], Value::Bool(true));

    let output = server.run(&["blob", &hash], b"");
    assert!(output.status.success());
    assert_eq!(output.stdout, b"{\"role\":\"user\"}");
    let target = tempfile::NamedTempFile::new().unwrap();
    assert!(
        server
            .run(&["blob", &hash, "-o", target.path().to_str().unwrap()], b"")
            .status
            .success()
    );
    assert_eq!(
        std::fs::read(target.path()).unwrap(),
        b"{\"role\":\"user\"}"
    );

    let stats = &server.json(&["stats"], b"")[0];
    for name in [
        "turns",
        "contexts",
        "blobs",
        "logical_bytes",
        "stored_bytes",
        "dedup_hits",
    ] {
        assert!(stats[name].is_u64(), "{name} in {stats}");
    }
    assert_eq!(field(stats, "turns"), 3);
    assert_eq!(field(stats, "contexts"), 3);
    assert_eq!(field(stats, "dedup_hits"), 1);

    // Human-readable output without --json.
    let output = server.run(&["last", &context.to_string(), "--payloads"], b"");
    assert!(String::from_utf8_lossy(&output.stdout).contains("{\"role\":\"user\"}"));
}

#[test]
fn errors_exit_non_zero_with_a_message() {
    let server = TestServer::start(None);
    let context = field(&server.json(&["ctx", "create"], b"")[0], "context_id");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["head".into(), "999".into()], "NOT_FOUND"),
        (vec!["turn".into(), "999".into()], "NOT_FOUND"),
        (
            vec![
                "append".into(),
                context.to_string(),
                "--expect-head".into(),
                "77".into(),
            ],
            "CONFLICT",
        ),
        (vec!["blob".into(), "00".repeat(32)], "NOT_FOUND"),
        (vec!["blob".into(), "not-hex".into()], "64 hex digits"),
        (
            vec![
                "append".into(),
                context.to_string(),
                "--codec".into(),
                "klingon".into(),
            ],
            "codec",
        ),
        (vec!["ctx".into(), "fork".into(), "999".into()], "NOT_FOUND"),
    ];
    for (args, expected) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut with_json = vec!["--json"];
        with_json.extend(&args);
        let output = server.run(&with_json, b"payload");
        assert!(!output.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?} wrote to stdout");
    }
    // No server there.
    let output = Command::new(CLI)
        .args(["--addr", "127.0.0.1:1", "stats"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("connect"));
    // A command line that does not parse: exit 2 from clap, with usage.
    let output = Command::new(CLI).args(["append"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
}
