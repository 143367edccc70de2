//! The CLI contract of issue 15 items 4 and 5 (decision 0012) against a real
//! `ctxstore-server`: `patch TURN [--file PATH]` prints `turn_id, overlay_seq, payload_hash`
//! (and `payload_len`); `redact TURN` prints `turn_id, overlay_seq, redacted`; `purge HASH`
//! prints `payload_hash, turns_redacted, overlay_seq` and with `--gc` the collection's figures
//! on a second line; turn lines carry `redacted` and `overlay_seq`; reads take `--as-of SEQ`;
//! bad input exits with the README's codes (unknown turn 3, an overlay on a redacted turn 1,
//! `--as-of` on a command that reads no turns 2).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use serde_json::{Value, json};

mod common;

use common::{Cli, run_at};
use ctxstore_testsupport::TestServer;

/// Runs with `--json`; expects success; one value per output line.
fn json_lines(server: &TestServer, args: &[&str], stdin: &[u8]) -> Vec<Value> {
    server.json(args, stdin)
}

/// The one result line of a `--json` command.
fn one(server: &TestServer, args: &[&str], stdin: &[u8]) -> Value {
    server.one(args, stdin)
}

/// Runs with `--json`, expects exit `code` and one JSON error on stderr; returns it.
fn fails(server: &TestServer, args: &[&str], stdin: &[u8], code: i32) -> Value {
    server.fails(args, stdin, code)
}

fn fields(value: &Value) -> BTreeSet<&str> {
    common::keys(value).into_iter().collect()
}

fn id(value: &Value, name: &str) -> u64 {
    value[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in {value}"))
}

fn payload(value: &Value) -> String {
    use base64::prelude::{BASE64_STANDARD, Engine as _};
    let encoded = value["payload_b64"].as_str().unwrap();
    String::from_utf8(BASE64_STANDARD.decode(encoded).unwrap()).unwrap()
}

const EMPTY_HASH: &str = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262";

#[test]
fn patch_redact_and_as_of_reads() {
    let server = TestServer::start(None);
    one(&server, &["ctx", "create", "--name", "t"], b"");
    let first = id(&one(&server, &["append", "@t"], b"draft answer"), "turn_id");
    let second = id(
        &one(&server, &["append", "@t"], b"user's secret"),
        "turn_id",
    );

    // patch from stdin, then from a file.
    let patched = one(&server, &["patch", &first.to_string()], b"final answer");
    assert_eq!(
        fields(&patched),
        BTreeSet::from(["turn_id", "overlay_seq", "payload_hash", "payload_len"])
    );
    assert_eq!(id(&patched, "turn_id"), first);
    let patch_seq = id(&patched, "overlay_seq");
    assert!(patch_seq > 0);
    assert_eq!(
        patched["payload_hash"],
        json!(blake3::hash(b"final answer").to_hex().to_string())
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fixed.txt");
    std::fs::write(&path, b"final answer, v2").unwrap();
    let path_text = path.to_str().unwrap();
    let again = one(
        &server,
        &["patch", &first.to_string(), "--file", path_text],
        b"",
    );
    let patch2_seq = id(&again, "overlay_seq");
    assert!(patch2_seq > patch_seq);

    let redacted = one(&server, &["redact", &second.to_string()], b"");
    assert_eq!(
        redacted,
        json!({
            "turn_id": second,
            "overlay_seq": id(&redacted, "overlay_seq"),
            "redacted": true,
        })
    );
    let redact_seq = id(&redacted, "overlay_seq");
    assert!(redact_seq > patch2_seq);

    // Turn lines: the latest view by default, with redacted and overlay_seq.
    let last = json_lines(&server, &["last", "@t", "--payloads"], b"");
    assert_eq!(last.len(), 2);
    assert_eq!(payload(&last[0]), "final answer, v2");
    assert_eq!(
        (&last[0]["redacted"], &last[0]["overlay_seq"]),
        (&json!(false), &json!(patch2_seq))
    );
    assert_eq!(payload(&last[1]), "");
    assert_eq!(
        (&last[1]["redacted"], &last[1]["overlay_seq"]),
        (&json!(true), &json!(redact_seq))
    );
    assert_eq!(last[1]["payload_hash"], json!(EMPTY_HASH));
    assert_eq!(last[1]["payload_len"], json!(0));

    // --as-of: each turn as of a sequence number; the redaction holds in every view.
    let as_of_first = one(
        &server,
        &[
            "--as-of",
            &patch_seq.to_string(),
            "turn",
            &first.to_string(),
        ],
        b"",
    );
    assert_eq!(as_of_first["overlay_seq"], json!(patch_seq));
    assert_eq!(
        as_of_first["payload_hash"],
        json!(blake3::hash(b"final answer").to_hex().to_string())
    );
    let before_any = json_lines(
        &server,
        &[
            "--as-of",
            &(patch_seq - 1).to_string(),
            "window",
            "@t",
            "--payloads",
        ],
        b"",
    );
    assert_eq!(payload(&before_any[0]), "draft answer");
    assert_eq!(before_any[0]["overlay_seq"], json!(0));
    assert_eq!(before_any[1]["redacted"], json!(true));
    assert_eq!(payload(&before_any[1]), "");
    let log = json_lines(&server, &["--as-of", "0", "log", "@t"], b"");
    let redacted_in_log: Vec<bool> = log
        .iter()
        .map(|line| line["redacted"].as_bool().unwrap())
        .collect();
    assert_eq!(redacted_in_log, [true, false]); // newest first

    // Readable output says it too.
    let text = run_at(&server.addr, &["last", "@t"], b"");
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains(&format!("patched (overlay {patch2_seq})")),
        "{text}"
    );
    assert!(
        text.contains(&format!("redacted (overlay {redact_seq})")),
        "{text}"
    );

    // Bad input.
    let missing = fails(&server, &["redact", "999999"], b"", 3);
    assert_eq!(missing["code"], json!("NOT_FOUND"));
    let missing = fails(&server, &["patch", "999999"], b"x", 3);
    assert_eq!(missing["code"], json!("NOT_FOUND"));
    let twice = fails(&server, &["redact", &second.to_string()], b"", 1);
    assert_eq!(twice["code"], json!("INVALID_ARGUMENT"));
    let patch_redacted = fails(&server, &["patch", &second.to_string()], b"back", 1);
    assert_eq!(patch_redacted["code"], json!("INVALID_ARGUMENT"));
    let empty = fails(&server, &["patch", &first.to_string()], b"", 1);
    assert_eq!(empty["code"], json!("EMPTY_PAYLOAD"));
    let usage = fails(&server, &["--as-of", "3", "ctx", "show", "@t"], b"", 2);
    assert_eq!(usage["code"], json!("USAGE"));
    let usage = fails(&server, &["redact", "not-a-turn"], b"", 2);
    assert_eq!(usage["code"], json!("USAGE"));
}

#[test]
fn purge_redacts_every_turn_and_gc_takes_the_bytes() {
    let server = TestServer::start(None);
    for name in ["a", "b"] {
        one(&server, &["ctx", "create", "--name", name], b"");
    }
    let document = b"an uploaded document, quoted in two threads";
    let one_turn = one(&server, &["append", "@a"], document);
    let two_turn = one(&server, &["append", "@b"], document);
    one(&server, &["append", "@b"], b"kept");
    let hash = one_turn["payload_hash"].as_str().unwrap().to_string();
    assert_eq!(two_turn["payload_hash"], json!(hash));

    let lines = json_lines(&server, &["purge", &hash, "--gc"], b"");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(
        fields(&lines[0]),
        BTreeSet::from(["payload_hash", "turns_redacted", "overlay_seq"])
    );
    assert_eq!(lines[0]["payload_hash"], json!(hash));
    assert_eq!(lines[0]["turns_redacted"], json!(2));
    assert!(lines[1]["bytes_reclaimed"].is_u64(), "{lines:?}");
    assert!(lines[1]["turns_dead"].is_u64(), "{lines:?}");

    let b = json_lines(&server, &["last", "@b", "--payloads"], b"");
    assert_eq!(b[0]["redacted"], json!(true));
    assert_eq!(payload(&b[0]), "");
    assert_eq!(
        (b[1]["redacted"].as_bool(), payload(&b[1])),
        (Some(false), "kept".into())
    );
    let gone = fails(&server, &["blob", &hash], b"", 3);
    assert_eq!(gone["code"], json!("NOT_FOUND"));
    // Again: nothing left to redact. A hash the store never had: NOT_FOUND.
    let again = one(&server, &["purge", &hash], b"");
    assert_eq!(again["turns_redacted"], json!(0));
    let never = blake3::hash(b"never stored").to_hex().to_string();
    let never = fails(&server, &["purge", &never], b"", 3);
    assert_eq!(never["code"], json!("NOT_FOUND"));
    let bad = fails(&server, &["purge", "xyz"], b"", 1);
    assert!(bad["message"].as_str().unwrap().contains("hex"), "{bad}");
}

/// Issue 29 item 2 through the CLI, with the server's default `--gc-pack-dead-percent`: after
/// `purge HASH --gc` returns, no file of the data directory holds the purged bytes, though
/// they were a small share of the open pack (which the collection seals and rewrites).
#[test]
fn purge_gc_leaves_no_file_holding_the_bytes() {
    let server = TestServer::start(None);
    one(&server, &["ctx", "create", "--name", "doc"], b"");
    let mut seed = 0x5eed_u64;
    let mut noise = |len: usize| -> Vec<u8> {
        seed += 1;
        ctxstore_testsupport::noise(seed, len)
    };
    for _ in 0..20 {
        one(&server, &["append", "@doc"], &noise(8 << 10));
    }
    let secret = noise(4 << 10);
    let appended = one(&server, &["append", "@doc"], &secret);
    one(&server, &["append", "@doc"], &noise(8 << 10));
    let hash = appended["payload_hash"].as_str().unwrap().to_string();
    let data = server.dir.path().join("data");
    let needle = &secret[1000..1064];
    let holding = || -> Vec<std::path::PathBuf> {
        let mut found = Vec::new();
        let mut pending = vec![data.clone()];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    pending.push(path);
                } else if std::fs::read(&path)
                    .unwrap()
                    .windows(needle.len())
                    .any(|window| window == needle)
                {
                    found.push(path);
                }
            }
        }
        found
    };
    assert!(
        !holding().is_empty(),
        "the payload is on disk before the purge"
    );
    let lines = json_lines(&server, &["purge", &hash, "--gc"], b"");
    assert_eq!(lines[0]["turns_redacted"], json!(1), "{lines:?}");
    assert!(
        lines[1]["packs_compacted"].as_u64().unwrap() >= 1,
        "{lines:?}"
    );
    let left = holding();
    assert!(left.is_empty(), "purged bytes still in {left:?}");
    // Reading it by hash is NOT_FOUND, without advice meant for appends by hash, and without
    // a detail that says nothing (issue 29 item 4).
    let gone = fails(&server, &["blob", &hash], b"", 3);
    let message = gone["message"].as_str().unwrap();
    assert!(!message.contains("instead"), "{message}");
    assert!(gone.get("detail").is_none(), "{gone}");
    assert_eq!(
        json_lines(&server, &["last", "@doc", "-n", "30"], b"").len(),
        22
    );
}
