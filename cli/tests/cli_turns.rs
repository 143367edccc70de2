//! The CLI contract of issue 14 (item 9) against a real `ctxstore-server`: `append` with
//! `--parent`/`--root`/`--key`/`--label`/`--link`/`--summary` and its `existing` field; turn
//! lines of every read (`turn`, `last`, `page`, `range`, `replay`, `log`, `find`, `window`)
//! with `key, labels, links, summary, context_id`; `turn CTX --key K`; `log` across branches,
//! label filters and the server's pages; `find` across contexts; `window` from the latest
//! summary; bad command lines (exit 2, never a panic); and a version-1 server, which gets
//! none of the new requests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use ctxstore_client::{ClientConfig, ContextRef, NewTurn};
use ctxstore_protocol::{
    BlobHash, MessageType, PayloadWire, ReadsRequest, ReadsResponse, Request, Response, TurnEntry,
    TurnWire,
};
use serde_json::{Value, json};

mod common;

use common::{CLI, Cli, run_at};
use ctxstore_testsupport::{ScriptedServer, TestServer};

fn turn_id(value: &Value) -> u64 {
    value["turn_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no turn_id in {value}"))
}

fn ids(values: &[Value]) -> Vec<u64> {
    values.iter().map(turn_id).collect()
}

/// The fields of a turn line, with their types.
fn assert_turn_fields(value: &Value) {
    for name in [
        "turn_id",
        "parent_turn_id",
        "context_id",
        "depth",
        "type_tag",
        "payload_len",
        "created_at_unix_ms",
        "overlay_seq",
    ] {
        assert!(value[name].is_u64(), "{name} in {value}");
    }
    assert!(value["redacted"].is_boolean(), "{value}");
    assert!(value["codec"].is_string(), "{value}");
    assert_eq!(value["payload_hash"].as_str().map(str::len), Some(64));
    assert!(
        value["key"].is_string() || value["key"].is_null(),
        "{value}"
    );
    assert!(value["labels"].is_object(), "{value}");
    assert!(value["links"].is_array(), "{value}");
    assert!(value["summary"].is_boolean(), "{value}");
}

/// What `append` prints, exactly these fields.
fn assert_append_fields(value: &Value) {
    let names: BTreeSet<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let expected: BTreeSet<&str> = [
        "turn_id",
        "parent_turn_id",
        "depth",
        "payload_hash",
        "deduped",
        "existing",
    ]
    .into();
    assert_eq!(names, expected, "{value}");
}

#[test]
fn append_with_options_and_turn_lines_everywhere() {
    let server = TestServer::start(None);
    let created = server.one(&["ctx", "create", "--name", "thread"], b"");
    let context_id = created["context_id"].as_u64().unwrap();

    // A plain append works as before and says existing: false.
    let plain = server.one(&["append", "@thread"], b"hello");
    assert_append_fields(&plain);
    assert_eq!(plain["existing"], json!(false));
    let callee = server.one(&["ctx", "create", "--name", "callee"], b"");
    let called = server.one(&["append", "@callee"], b"callee turn");

    let keyed = server.one(
        &[
            "append",
            "@thread",
            "--key",
            "cp-1",
            "--label",
            "step=1",
            "--label",
            "run_id=r1",
            "--link",
            &turn_id(&called).to_string(),
            "--codec",
            "json",
        ],
        b"{\"step\":1}",
    );
    assert_append_fields(&keyed);
    assert_eq!(keyed["existing"], json!(false));
    assert_eq!(keyed["parent_turn_id"], plain["turn_id"]);
    assert_eq!(keyed["depth"], json!(1));
    // The retry: the same turn, existing: true, nothing written.
    let retry = server.one(&["append", "@thread", "--key", "cp-1"], b"{\"step\":1}");
    assert_append_fields(&retry);
    assert_eq!(retry["existing"], json!(true));
    assert_eq!(retry["turn_id"], keyed["turn_id"]);
    assert_eq!(retry["payload_hash"], keyed["payload_hash"]);

    // The turn line, by id and by key: the extras, its context, its summary flag.
    let by_id = server.one(&["turn", &turn_id(&keyed).to_string()], b"");
    assert_turn_fields(&by_id);
    assert_eq!(by_id["key"], json!("cp-1"));
    assert_eq!(by_id["labels"], json!({"run_id": "r1", "step": "1"}));
    assert_eq!(by_id["links"], json!([turn_id(&called)]));
    assert_eq!(by_id["summary"], json!(false));
    assert_eq!(by_id["context_id"], json!(context_id));
    assert_eq!(by_id["codec"], json!("json"));
    let by_key = server.one(&["turn", "@thread", "--key", "cp-1"], b"");
    assert_eq!(by_key, by_id);
    assert_eq!(
        server.one(&["turn", &context_id.to_string(), "--key", "cp-1"], b""),
        by_id
    );
    let missing = server.fails(&["turn", "@thread", "--key", "nope"], b"", 3);
    assert_eq!(missing["code"], json!("NOT_FOUND"));
    assert!(missing["message"].as_str().unwrap().contains("nope"));
    server.fails(&["turn", "@nobody", "--key", "cp-1"], b"", 3);

    // A summary; every read's turn lines carry the fields.
    let summary = server.one(&["append", "@thread", "--summary"], b"summary");
    let summary_id = turn_id(&summary).to_string();
    let reads: Vec<Vec<&str>> = vec![
        vec!["last", "@thread", "-n", "5"],
        vec!["page", "@thread", "--before", &summary_id, "-n", "5"],
        vec!["range", "@thread", "--from-depth", "0"],
        vec!["replay", &summary_id, "--payloads"],
        vec!["log", "@thread"],
        vec!["window", "@thread"],
        vec!["find", "--label", "run_id=r1"],
    ];
    for args in reads {
        let lines = server.json(&args, b"");
        assert!(!lines.is_empty(), "{args:?}");
        lines.iter().for_each(assert_turn_fields);
    }
    let page = server.json(&["page", "@thread", "--before", &summary_id], b"");
    assert_eq!(ids(&page), [turn_id(&plain), turn_id(&keyed)]);
    assert_eq!(page[1]["key"], json!("cp-1"));
    assert_eq!(page[0]["key"], json!(null));
    let last = server.json(&["last", "@thread", "-n", "1"], b"");
    assert_eq!(last[0]["summary"], json!(true));

    // A branch from the first turn (time travel), then a new root: the head moves each time.
    let branch = server.one(
        &[
            "append",
            "@thread",
            "--parent",
            &turn_id(&plain).to_string(),
        ],
        b"branch",
    );
    assert_eq!(branch["parent_turn_id"], plain["turn_id"]);
    assert_eq!(branch["depth"], json!(1));
    let head = server.one(&["head", "@thread"], b"");
    assert_eq!(head["head_turn_id"], branch["turn_id"]);
    let root = server.one(&["append", "@thread", "--root", "--key", "r"], b"root");
    assert_eq!(
        (root["depth"].clone(), root["parent_turn_id"].clone()),
        (json!(0), json!(0))
    );
    let head = server.one(&["head", "@thread"], b"");
    assert_eq!(head["head_turn_id"], root["turn_id"]);
    // The summary's chain is no longer the head's: its replay still has every turn's extras.
    let replay = server.json(&["replay", &summary_id, "--payloads"], b"");
    assert_eq!(
        ids(&replay),
        [turn_id(&plain), turn_id(&keyed), turn_id(&summary)]
    );
    assert_eq!(replay[1]["labels"], by_id["labels"]);
    assert_eq!(replay[2]["summary"], json!(true));
    assert_eq!(replay[2]["payload_b64"], json!("c3VtbWFyeQ=="));
    assert_eq!(
        server.one(&["turn", &summary_id], b"")["summary"],
        json!(true)
    );
    // Text output names the extras too.
    let text = server.run(&["turn", &turn_id(&keyed).to_string()], b"");
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("key cp-1 labels run_id=r1 step=1 links"),
        "{text}"
    );
    assert_ne!(callee["context_id"], created["context_id"]);
}

#[test]
fn log_lists_every_branch_newest_first_through_the_servers_pages() {
    let server = TestServer::start(None);
    server.one(&["ctx", "create", "--name", "thread"], b"");
    // 1,100 turns (more than a server page of 1,000) in batches through the library, half
    // labelled even=yes; then a branch.
    let client =
        ctxstore_client::blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let thread = ContextRef::Name("thread".into());
    let mut appended = Vec::new();
    for batch in 0..22 {
        let turns: Vec<NewTurn> = (0..50)
            .map(|index| {
                let step = batch * 50 + index;
                NewTurn::bytes(Bytes::from(format!("turn {step}")))
                    .label("even", if step % 2 == 0 { "yes" } else { "no" })
                    .label("run_id", "bulk")
            })
            .collect();
        let done = client.append_turns(thread.clone(), None, turns).unwrap();
        appended.extend(done.into_iter().map(|a| a.turn.turn.turn_id));
    }
    let fork_point = appended[10].to_string();
    let branch = server.one(
        &[
            "append",
            "@thread",
            "--parent",
            &fork_point,
            "--label",
            "even=yes",
        ],
        b"branch",
    );
    appended.push(turn_id(&branch));
    let newest_first: Vec<u64> = appended.iter().rev().copied().collect();

    let log = server.json(&["log", "@thread"], b"");
    assert_eq!(ids(&log), newest_first, "all 1,101 turns, each once");
    // -n stops early; labels filter on the server (a conjunction).
    assert_eq!(
        ids(&server.json(&["log", "@thread", "-n", "3"], b"")),
        newest_first[..3]
    );
    let even = server.json(
        &["log", "@thread", "--label", "even=yes", "-n", "1000"],
        b"",
    );
    assert_eq!(even.len(), 551);
    assert!(
        even.iter()
            .all(|line| line["labels"]["even"] == json!("yes"))
    );
    assert_eq!(turn_id(&even[0]), turn_id(&branch));
    let both = server.json(
        &[
            "log",
            "@thread",
            "--label",
            "even=no",
            "--label",
            "run_id=bulk",
        ],
        b"",
    );
    assert_eq!(both.len(), 550);
    assert!(
        server
            .json(&["log", "@thread", "--label", "even=maybe"], b"")
            .is_empty()
    );
    // With payloads, and in text.
    let newest = server.one(&["log", "@thread", "-n", "1", "--payloads"], b"");
    assert_eq!(newest["payload_b64"], json!("YnJhbmNo"));
    let text = server.run(&["log", "@thread", "-n", "2"], b"");
    assert_eq!(String::from_utf8(text.stdout).unwrap().lines().count(), 2);
    // A closed stdout mid-log is no error.
    let mut child = Command::new(CLI)
        .env_remove("CTXSTORE_TOKEN")
        .args(["--addr", &server.addr, "--json", "log", "@thread"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    assert!(child.wait().unwrap().success());
    server.fails(&["log", "@nobody"], b"", 3);
}

#[test]
fn find_across_contexts_and_windows_from_the_latest_summary() {
    let server = TestServer::start(None);
    let mut expected = Vec::new();
    for context in ["a", "b"] {
        server.one(&["ctx", "create", "--name", context], b"");
        let at = format!("@{context}");
        for step in ["1", "2"] {
            let label = format!("step={step}");
            let line = server.one(
                &["append", &at, "--label", "run_id=r9", "--label", &label],
                b"x",
            );
            expected.push(turn_id(&line));
        }
        server.one(&["append", &at, "--label", "run_id=other"], b"y");
    }
    expected.reverse();
    let found = server.json(&["find", "--label", "run_id=r9"], b"");
    assert_eq!(ids(&found), expected, "newest first, across contexts");
    let contexts: BTreeSet<u64> = found
        .iter()
        .map(|l| l["context_id"].as_u64().unwrap())
        .collect();
    assert_eq!(contexts.len(), 2);
    // More labels: the non-indexed one checked on what the index finds, in any order.
    let step_2 = server.json(&["find", "--label", "step=2", "--label", "run_id=r9"], b"");
    assert_eq!(ids(&step_2), [expected[0], expected[2]]);
    assert_eq!(
        server
            .json(&["find", "--label", "run_id=r9", "-n", "3"], b"")
            .len(),
        3
    );
    assert!(
        server
            .json(&["find", "--label", "idx.none=x"], b"")
            .is_empty()
    );
    // No indexed key: the server's refusal says which keys are.
    let error = server.fails(&["find", "--label", "step=2"], b"", 1);
    assert_eq!(error["code"], json!("INVALID_ARGUMENT"));
    assert!(
        error["message"].as_str().unwrap().contains("run_id"),
        "{error}"
    );

    // Windows: the whole chain without a summary, then from the latest summary.
    server.one(&["ctx", "create", "--name", "w"], b"");
    let mut chain = Vec::new();
    for step in 0..3 {
        chain.push(turn_id(
            &server.one(&["append", "@w"], format!("t{step}").as_bytes()),
        ));
    }
    assert_eq!(ids(&server.json(&["window", "@w"], b"")), chain);
    let summary = server.one(&["append", "@w", "--summary"], b"so far");
    let after = server.one(&["append", "@w"], b"after");
    let window = server.json(&["window", "@w", "--payloads"], b"");
    assert_eq!(ids(&window), [turn_id(&summary), turn_id(&after)]);
    assert_eq!(window[0]["summary"], json!(true));
    assert_eq!(window[0]["payload_b64"], json!("c28gZmFy"));
    assert_eq!(
        ids(&server.json(&["window", "@w", "-n", "1"], b"")),
        [turn_id(&after)]
    );
    server.one(&["ctx", "create", "--name", "empty"], b"");
    assert!(server.json(&["window", "@empty"], b"").is_empty());
    server.fails(&["window", "@nobody"], b"", 3);
}

#[test]
fn bad_command_lines_exit_2_before_connecting() {
    // Nothing listens on this address: each refusal must come before connecting (a
    // connection failure would be exit 5).
    let addr = "127.0.0.1:1";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["append", "1", "--label", "novalue"], "KEY=VALUE"),
        (vec!["append", "1", "--label", "=v"], "KEY=VALUE"),
        (
            vec!["append", "1", "--parent", "3", "--root"],
            "cannot be used with",
        ),
        (vec!["append", "1", "--parent", "0"], "0"),
        (vec!["append", "1", "--parent", "x"], "invalid value"),
        (vec!["append", "1", "--link", "0"], "0"),
        (vec!["append", "1", "--key", ""], "empty"),
        (
            vec!["append", "1", "--label", "a=1", "--label", "a=2"],
            "twice",
        ),
        (vec!["turn", "@thread"], "--key"),
        (vec!["turn", "thread"], "not a turn id"),
        (vec!["turn", "thread", "--key", "k"], "ContextID"),
        (vec!["turn", "@", "--key", "k"], "@"),
        (vec!["log"], "CONTEXT"),
        (vec!["log", "@t", "-n", "0"], "0"),
        (vec!["log", "@t", "--label", "x"], "KEY=VALUE"),
        (vec!["find"], "--label"),
        (vec!["find", "--label", "novalue"], "KEY=VALUE"),
        (vec!["window", "@t", "-n", "-1"], ""),
    ];
    for (args, says) in cases {
        let mut all = vec!["--json"];
        all.extend_from_slice(&args);
        let output = run_at(addr, &all, b"payload");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        let error: Value = serde_json::from_str(stderr.trim()).unwrap();
        assert_eq!(error["error"]["code"], json!("USAGE"), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // --help names the new commands and options.
    let help = run_at(addr, &["--help"], b"");
    let help = String::from_utf8(help.stdout).unwrap();
    for word in ["log", "find", "window", "--parent", "--summary"] {
        assert!(help.contains(word), "{word}: {help}");
    }
    let help = run_at(addr, &["append", "--help"], b"");
    let help = String::from_utf8(help.stdout).unwrap();
    for word in [
        "--parent",
        "--root",
        "--key",
        "--label",
        "--link",
        "--summary",
        "existing",
    ] {
        assert!(help.contains(word), "{word}: {help}");
    }
}

/// A fake server of protocol version 1 that answers HELLO, GET_TURN and GET_CHAIN (turn 3 of
/// context 7) and counts every request after HELLO.
fn version_1_server() -> (String, Arc<AtomicU64>) {
    let others = Arc::new(AtomicU64::new(0));
    let counted = others.clone();
    let (addr, _) = ScriptedServer::new(1).serve(move |request| {
        counted.fetch_add(1, Ordering::Relaxed);
        match request {
            Request::Reads(ReadsRequest::GetTurn(ctxstore_protocol::reads::GetTurn {
                turn_id: 3,
            })) => Some(Response::Reads(ReadsResponse::Turn(OLD_TURN))),
            Request::Reads(ReadsRequest::GetChain(ctxstore_protocol::reads::GetChain {
                turn_id: 3,
                ..
            })) => Some(Response::Reads(ReadsResponse::Turns(
                ctxstore_protocol::reads::Turns {
                    message_type: MessageType::GetChain,
                    next_before: 0,
                    tip_depth: 0,
                    entries: vec![TurnEntry {
                        turn: OLD_TURN,
                        payload: PayloadWire::absent(),
                    }],
                },
            ))),
            _ => None,
        }
    });
    (addr, others)
}

const OLD_TURN: TurnWire = TurnWire {
    turn_id: 3,
    parent_turn_id: 0,
    context_id: 7,
    depth: 0,
    codec: 0,
    type_tag: 0,
    payload_hash: BlobHash([9; 32]),
    payload_len: 1,
    flags: 0,
    created_at_unix_ms: 1,
};

const PURGED_HASH: &str = "0909090909090909090909090909090909090909090909090909090909090909";

#[test]
fn a_version_1_server_gets_none_of_the_new_requests() {
    let (addr, others) = version_1_server();
    for args in [
        vec!["append", "7", "--key", "k"],
        vec!["append", "7", "--parent", "3"],
        vec!["append", "7", "--root"],
        vec!["append", "7", "--label", "a=b"],
        vec!["append", "7", "--link", "3"],
        vec!["append", "7", "--summary"],
        vec!["turn", "7", "--key", "k"],
        vec!["log", "7"],
        vec!["find", "--label", "run_id=r"],
        vec!["window", "7"],
        // Overlays (decision 0012).
        vec!["patch", "3"],
        vec!["redact", "3"],
        vec!["purge", PURGED_HASH],
        vec!["--as-of", "5", "turn", "3"],
        vec!["--as-of", "0", "last", "7"],
    ] {
        let mut all = vec!["--json", "--timeout", "5s"];
        all.extend_from_slice(&args);
        let output = run_at(&addr, &all, b"payload");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        let error: Value = serde_json::from_str(stderr.trim()).unwrap();
        assert_eq!(error["error"]["code"], "UNSUPPORTED_BY_SERVER", "{args:?}");
        assert!(stderr.contains("needs protocol version 2"), "{stderr}");
    }
    assert_eq!(others.load(Ordering::Relaxed), 0, "nothing was sent");
    // A turn by id and a replay are version-1 reads: their lines have the new fields, empty
    // (a version-1 server stores no keys, labels or links).
    for args in [vec!["turn", "3"], vec!["replay", "3"]] {
        let mut all = vec!["--json", "--timeout", "5s"];
        all.extend_from_slice(&args);
        let output = run_at(&addr, &all, b"");
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let line: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_turn_fields(&line);
        assert_eq!(line["context_id"], json!(7));
        assert_eq!(
            (
                &line["key"],
                &line["labels"],
                &line["links"],
                &line["summary"]
            ),
            (&json!(null), &json!({}), &json!([]), &json!(false))
        );
    }
    assert_eq!(others.load(Ordering::Relaxed), 2);
}
