//! The CLI contract of issue 13 §6 against a real `ctxstore-server`: contexts by `@NAME`
//! everywhere a command takes CTX, `ctx create/show/tag/name/list/clone` and
//! `kv put/get/rm/list`, their `--json` fields, and the exit codes of their failures (3 for
//! an unknown name or key, 4 for a tag change whose head moved, 7 for a taken name).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

use ctxstore_protocol::contexts;
use ctxstore_protocol::{
    ContextHeadWire, ContextsRequest, ContextsResponse, MessageType, Request, Response,
};
use serde_json::{Value, json};

mod common;

use common::{CLI, Cli, assert_show_fields};
use ctxstore_testsupport::{ScriptedServer, TestServer};

fn id(value: &Value) -> u64 {
    value["context_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no context_id in {value}"))
}

/// What `ctx show` prints without the two fields only it (and `ctx prune`, `ctx ttl`) adds:
/// the fields every other `ctx` command prints.
fn without_retention(mut shown: Value) -> Value {
    let object = shown.as_object_mut().unwrap();
    assert!(object.remove("floor_depth").unwrap().is_u64(), "{object:?}");
    let ttl_ms = object.remove("ttl_ms").unwrap();
    assert!(ttl_ms.is_u64() || ttl_ms.is_null(), "{ttl_ms}");
    shown
}

#[test]
fn create_show_tag_name_and_get_or_create() {
    let server = TestServer::start(None);
    let created = server.one(
        &[
            "ctx",
            "create",
            "--name",
            "thread-1",
            "--tag",
            "status=idle",
            "--tag",
            "user=ann",
        ],
        b"",
    );
    assert_show_fields(&created);
    assert_eq!(created["name"], "thread-1");
    assert_eq!(created["tags"], json!({"status": "idle", "user": "ann"}));
    assert_eq!(created["created"], json!(true));
    assert_eq!(
        (
            created["head_turn_id"].as_u64(),
            created["head_depth"].as_u64()
        ),
        (Some(0), Some(0))
    );
    let context = id(&created);
    assert!(created["created_at_unix_ms"].as_u64().unwrap() > 0);

    // A plain create still prints what it did before (a superset), with no name and no tags.
    let plain = server.one(&["ctx", "create"], b"");
    assert_eq!(plain["name"], Value::Null);
    assert_eq!(plain["tags"], json!({}));
    assert_ne!(id(&plain), context);

    // get-or-create: the same context, created false, nothing applied.
    let again = server.one(
        &[
            "ctx",
            "create",
            "--name",
            "thread-1",
            "--tag",
            "status=other",
            "--get-or-create",
        ],
        b"",
    );
    assert_eq!(id(&again), context);
    assert_eq!(again["created"], json!(false));
    assert_eq!(again["tags"], created["tags"]);
    // Without it: ALREADY_EXISTS, exit 7, the owner in `detail`.
    let error = server.fails(&["ctx", "create", "--name", "thread-1"], b"", 7);
    assert_eq!(error["code"], "ALREADY_EXISTS");
    assert_eq!(error["detail"], json!(context));
    let output = server.run(&["ctx", "create", "--name", "thread-1"], b"");
    assert_eq!(output.status.code(), Some(7));
    assert!(String::from_utf8_lossy(&output.stderr).starts_with("ctxstore: "));
    // --get-or-create needs --name: usage.
    server.fails(&["ctx", "create", "--get-or-create"], b"", 2);

    // show, by id and by name: the same fields.
    let shown = server.one(&["ctx", "show", "@thread-1"], b"");
    assert_show_fields(&shown);
    assert_eq!(
        shown,
        server.one(&["ctx", "show", &context.to_string()], b"")
    );
    assert_eq!(shown["tags"], created["tags"]);
    assert!(shown.get("created").is_none(), "{shown}");

    // Turns by name; the head moves.
    let appended = server.one(&["append", "@thread-1"], b"first turn");
    let head = appended["turn_id"].as_u64().unwrap();
    let shown = server.one(&["ctx", "show", "@thread-1"], b"");
    assert_eq!(shown["head_turn_id"], json!(head));
    assert!(shown["updated_at_unix_ms"].as_u64() >= created["updated_at_unix_ms"].as_u64());

    // tag: set and remove at once, with the head as it is; prints what show prints.
    let tagged = server.one(
        &[
            "ctx",
            "tag",
            "@thread-1",
            "status=running",
            "step=a=b",
            "--remove",
            "user",
            "--expect-head",
            &head.to_string(),
        ],
        b"",
    );
    assert_show_fields(&tagged);
    assert_eq!(tagged["tags"], json!({"status": "running", "step": "a=b"}));
    let shown = server.one(&["ctx", "show", "@thread-1"], b"");
    assert_eq!(tagged, without_retention(shown));
    // A head that moved: CONFLICT, exit 4, the actual head in `detail`; nothing changed.
    let error = server.fails(
        &[
            "ctx",
            "tag",
            "@thread-1",
            "status=done",
            "--expect-head",
            "0",
        ],
        b"",
        4,
    );
    assert_eq!(error["code"], "CONFLICT");
    assert_eq!(error["detail"], json!(head));
    assert_eq!(
        server.one(&["ctx", "show", "@thread-1"], b"")["tags"],
        tagged["tags"]
    );
    // Only removals.
    let removed = server.one(
        &["ctx", "tag", &context.to_string(), "--remove", "step"],
        b"",
    );
    assert_eq!(removed["tags"], json!({"status": "running"}));

    // name: a context without one gets one; a taken one is 7.
    let named = server.one(&["ctx", "name", &id(&plain).to_string(), "thread-2"], b"");
    assert_eq!(named["name"], "thread-2");
    assert_eq!(id(&server.one(&["head", "@thread-2"], b"")), id(&plain));
    let error = server.fails(
        &[
            "ctx",
            "create",
            "--name",
            "thread-2",
            "--from",
            &head.to_string(),
        ],
        b"",
        7,
    );
    assert_eq!(error["detail"], json!(id(&plain)));

    // Readable output without --json.
    let output = server.run(&["ctx", "show", "@thread-1"], b"");
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.starts_with(&format!(
            "context {context} @thread-1 head {head} depth 0 tags status=running"
        )),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1);

    // Local mistakes are usage errors, before any request.
    for args in [
        vec!["ctx", "show", "@"],
        vec!["ctx", "show", "thread-1"],
        vec!["ctx", "tag", "@thread-1", "novalue"],
        vec!["ctx", "tag", "@thread-1", "=v"],
        vec!["ctx", "create", "--tag", "x"],
        vec!["ctx", "list", "--updated-before", "0"],
        vec!["ctx", "list", "--updated-after", "yesterday-ish"],
        vec!["ctx", "list", "--limit", "0"],
        vec!["append", "@thread-1", "--codec", "yaml"],
        vec!["ctx", "clone", "@thread-1"],
    ] {
        assert_eq!(server.fails(&args, b"", 2)["code"], "USAGE", "{args:?}");
    }
    // Over a limit the server enforces: TOO_LARGE, exit 1.
    let long_name = "n".repeat(257);
    let error = server.fails(&["ctx", "create", "--name", &long_name], b"", 1);
    assert_eq!(error["code"], "TOO_LARGE");
}

#[test]
fn at_names_work_wherever_a_context_is_taken() {
    let server = TestServer::start(None);
    let created = server.one(&["ctx", "create", "--name", "agent/α β"], b"");
    let context = id(&created);
    let name = "@agent/α β";

    let first = server.one(&["append", name, "--codec", "json"], b"{\"n\":1}");
    let first_id = first["turn_id"].as_u64().unwrap();
    let second = server.one(
        &["append", name, "--expect-head", &first_id.to_string()],
        b"two",
    );
    let second_id = second["turn_id"].as_u64().unwrap();
    let head = server.one(&["head", name], b"");
    assert_eq!(
        head,
        json!({"context_id": context, "head_turn_id": second_id, "head_depth": 1})
    );
    let turn_ids = |values: Vec<Value>| -> Vec<u64> {
        values
            .iter()
            .map(|v| v["turn_id"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(
        turn_ids(server.json(&["last", name], b"")),
        vec![first_id, second_id]
    );
    assert_eq!(
        turn_ids(server.json(&["page", name, "--before", &second_id.to_string()], b"")),
        vec![first_id]
    );
    assert_eq!(
        turn_ids(server.json(&["range", name, "--from-depth", "1"], b"")),
        vec![second_id]
    );
    // By id and by name: the same turns.
    assert_eq!(
        server.json(&["last", name, "--payloads"], b""),
        server.json(&["last", &context.to_string(), "--payloads"], b"")
    );
    // append --expect-head by name: CONFLICT as by id.
    let error = server.fails(&["append", name, "--expect-head", "0"], b"x", 4);
    assert_eq!(error["detail"], json!(second_id));

    // An unknown name: NOT_FOUND, exit 3, for every command that takes CTX.
    for args in [
        vec!["head", "@nope"],
        vec!["append", "@nope"],
        vec!["last", "@nope"],
        vec!["page", "@nope", "--before", "1"],
        vec!["range", "@nope", "--from-depth", "0"],
        vec!["ctx", "show", "@nope"],
        vec!["ctx", "tag", "@nope", "a=b"],
        vec!["ctx", "name", "@nope", "other"],
        vec!["ctx", "clone", "@nope", "--name", "copy"],
        vec!["kv", "put", "@nope", "key"],
        vec!["kv", "get", "@nope", "key"],
        vec!["kv", "rm", "@nope", "key"],
        vec!["kv", "list", "@nope"],
    ] {
        let error = server.fails(&args, b"payload", 3);
        assert_eq!(error["code"], "NOT_FOUND", "{args:?}");
        let output = server.run(&args, b"payload");
        assert_eq!(output.status.code(), Some(3), "{args:?} without --json");
    }
    // Nothing was created or appended by any of it.
    assert_eq!(
        server.one(&["head", name], b"")["head_turn_id"],
        json!(second_id)
    );
    assert_eq!(server.json(&["ctx", "list"], b"").len(), 1);
}

#[test]
fn list_filters_by_tags_name_prefix_and_time() {
    let server = TestServer::start(None);
    let mut ids = Vec::new();
    for (name, status) in [
        ("thread-c", "idle"),
        ("thread-a", "idle"),
        ("other-1", "idle"),
        ("thread-b", "done"),
    ] {
        let created = server.one(
            &[
                "ctx",
                "create",
                "--name",
                name,
                "--tag",
                &format!("status={status}"),
                "--tag",
                "team=x",
            ],
            b"",
        );
        ids.push(id(&created));
    }
    let unnamed = id(&server.one(&["ctx", "create", "--tag", "status=idle"], b""));

    let ids_of = |values: &[Value]| -> Vec<u64> { values.iter().map(id).collect() };
    let names_of = |values: &[Value]| -> Vec<String> {
        values
            .iter()
            .map(|v| v["name"].as_str().unwrap_or("-").to_string())
            .collect()
    };
    // Everything, in ContextID order, each with the `ctx show` fields.
    let all = server.json(&["ctx", "list"], b"");
    let mut expected = ids.clone();
    expected.push(unnamed);
    assert_eq!(ids_of(&all), expected);
    all.iter().for_each(assert_show_fields);
    for value in &all {
        let shown = server.one(&["ctx", "show", &id(value).to_string()], b"");
        assert_eq!(value, &without_retention(shown));
    }
    // A tag: ContextID order.
    let idle = server.json(&["ctx", "list", "--tag", "status=idle"], b"");
    assert_eq!(ids_of(&idle), vec![ids[0], ids[1], ids[2], unnamed]);
    // Tags are a conjunction.
    let both = server.json(
        &["ctx", "list", "--tag", "status=idle", "--tag", "team=x"],
        b"",
    );
    assert_eq!(ids_of(&both), vec![ids[0], ids[1], ids[2]]);
    assert!(
        server
            .json(&["ctx", "list", "--tag", "status=gone"], b"")
            .is_empty()
    );
    // A name prefix: name order.
    let threads = server.json(&["ctx", "list", "--name-prefix", "thread-"], b"");
    assert_eq!(names_of(&threads), ["thread-a", "thread-b", "thread-c"]);
    let idle_threads = server.json(
        &[
            "ctx",
            "list",
            "--name-prefix",
            "thread-",
            "--tag",
            "status=idle",
        ],
        b"",
    );
    assert_eq!(names_of(&idle_threads), ["thread-a", "thread-c"]);
    // --limit: the first N.
    let first_two = server.json(
        &["ctx", "list", "--name-prefix", "thread-", "--limit", "2"],
        b"",
    );
    assert_eq!(names_of(&first_two), ["thread-a", "thread-b"]);
    assert_eq!(server.json(&["ctx", "list", "--limit", "1"], b"").len(), 1);
    // Times: every context was updated before now + 1 h, none after it.
    let later = (all
        .iter()
        .map(|v| v["updated_at_unix_ms"].as_u64().unwrap())
        .max()
        .unwrap()
        + 3_600_000)
        .to_string();
    assert_eq!(
        server
            .json(&["ctx", "list", "--updated-before", &later], b"")
            .len(),
        5
    );
    assert!(
        server
            .json(&["ctx", "list", "--updated-after", &later], b"")
            .is_empty()
    );
    assert!(
        server
            .json(&["ctx", "list", "--updated-before", "1"], b"")
            .is_empty()
    );
    // After 0 is no bound; ages and RFC 3339 times count from now (issue 29 item 4).
    assert_eq!(
        server
            .json(&["ctx", "list", "--updated-after", "0"], b"")
            .len(),
        5
    );
    assert_eq!(
        server
            .json(&["ctx", "list", "--updated-after", "1h"], b"")
            .len(),
        5
    );
    assert!(
        server
            .json(&["ctx", "list", "--updated-before", "1h"], b"")
            .is_empty()
    );
    assert_eq!(
        server
            .json(
                &["ctx", "list", "--updated-after", "2020-01-01T00:00:00Z"],
                b""
            )
            .len(),
        5
    );
    // The newest update bounds the others.
    let newest = all
        .iter()
        .max_by_key(|v| v["updated_at_unix_ms"].as_u64())
        .unwrap();
    let newest_ms = newest["updated_at_unix_ms"].as_u64().unwrap();
    let before_newest = server.json(
        &["ctx", "list", "--updated-before", &newest_ms.to_string()],
        b"",
    );
    assert!(
        before_newest
            .iter()
            .all(|v| v["updated_at_unix_ms"].as_u64().unwrap() < newest_ms)
    );
    // Readable: one line per context.
    let output = server.run(&["ctx", "list", "--name-prefix", "thread-"], b"");
    let text = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].contains("@thread-a") && lines[0].contains("status=idle"),
        "{text}"
    );
}

#[test]
fn clone_shares_the_head_and_copies_tags_and_entries() {
    let server = TestServer::start(None);
    server.one(
        &["ctx", "create", "--name", "source", "--tag", "status=idle"],
        b"",
    );
    let turn = server.one(&["append", "@source"], b"the only turn")["turn_id"]
        .as_u64()
        .unwrap();
    server.one(&["kv", "put", "@source", "checkpoint/1"], b"one");
    server.one(&["kv", "put", "@source", "checkpoint/2"], b"two");

    let copy = server.one(&["ctx", "clone", "@source", "--name", "copy"], b"");
    assert_show_fields(&copy);
    let source = server.one(&["ctx", "show", "@source"], b"");
    assert_ne!(id(&copy), id(&source));
    assert_eq!(copy["name"], "copy");
    assert_eq!(copy["head_turn_id"], json!(turn));
    assert_eq!(copy["head_depth"], source["head_depth"]);
    assert_eq!(copy["tags"], source["tags"]);
    assert_eq!(
        server.json(&["kv", "list", "@copy"], b""),
        server.json(&["kv", "list", "@source"], b"")
    );
    // The same turns, by reference: the payload was not stored again.
    assert_eq!(
        server.json(&["last", "@copy", "--payloads"], b""),
        server.json(&["last", "@source", "--payloads"], b"")
    );
    // They go their own ways.
    server.one(&["append", "@copy"], b"only in the copy");
    assert!(
        server
            .run(&["kv", "rm", "@copy", "checkpoint/1"], b"")
            .status
            .success()
    );
    server.one(&["ctx", "tag", "@copy", "status=forked"], b"");
    let source_now = server.one(&["ctx", "show", "@source"], b"");
    assert_eq!(source_now["head_turn_id"], json!(turn));
    assert_eq!(source_now["tags"], json!({"status": "idle"}));
    assert_eq!(server.json(&["kv", "list", "@source"], b"").len(), 2);
    assert_eq!(server.json(&["kv", "list", "@copy"], b"").len(), 1);
    // A taken name: 7.
    let error = server.fails(&["ctx", "clone", "@source", "--name", "copy"], b"", 7);
    assert_eq!(error["detail"], json!(id(&copy)));
    // By id too.
    let by_id = server.one(
        &["ctx", "clone", &id(&source).to_string(), "--name", "copy-2"],
        b"",
    );
    assert_eq!(by_id["head_turn_id"], json!(turn));
}

#[test]
fn kv_round_trips_binary_values() {
    let server = TestServer::start(None);
    let context = id(&server.one(&["ctx", "create", "--name", "kv"], b""));
    let binary: Vec<u8> = (0..=255u8).rev().chain(0..=255).collect();
    let hash = blake3::hash(&binary).to_hex().to_string();

    // From stdin; prints the entry.
    let put = server.one(&["kv", "put", "@kv", "pending/b"], &binary);
    assert_eq!(
        put,
        json!({"key": "pending/b", "value_hash": hash, "value_len": binary.len()})
    );
    // From a file, by id.
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), b"from a file").unwrap();
    let path = file.path().to_str().unwrap();
    server.one(
        &[
            "kv",
            "put",
            &context.to_string(),
            "pending/a",
            "--file",
            path,
        ],
        b"",
    );
    server.one(&["kv", "put", "@kv", "other"], b"x");

    // get: the raw bytes, to stdout or to a file.
    let output = server.run(&["kv", "get", "@kv", "pending/b"], b"");
    assert!(output.status.success());
    assert_eq!(output.stdout, binary);
    let target = tempfile::NamedTempFile::new().unwrap();
    let target_path = target.path().to_str().unwrap();
    let output = server.run(&["kv", "get", "@kv", "pending/a", "-o", target_path], b"");
    assert!(output.status.success() && output.stdout.is_empty());
    assert_eq!(std::fs::read(target.path()).unwrap(), b"from a file");

    // list: key order, following pages; --prefix.
    let keys = |values: &[Value]| -> Vec<String> {
        values
            .iter()
            .map(|v| v["key"].as_str().unwrap().to_string())
            .collect()
    };
    let all = server.json(&["kv", "list", "@kv"], b"");
    assert_eq!(keys(&all), ["other", "pending/a", "pending/b"]);
    assert_eq!(all[2], put);
    assert_eq!(
        all[1]["value_hash"],
        blake3::hash(b"from a file").to_hex().as_str()
    );
    assert_eq!(
        keys(&server.json(&["kv", "list", "@kv", "--prefix", "pending/"], b"")),
        ["pending/a", "pending/b"]
    );
    assert!(
        server
            .json(&["kv", "list", "@kv", "--prefix", "zzz"], b"")
            .is_empty()
    );

    // replace, and --if-absent (keeps what is there, prints it).
    let replaced = server.one(&["kv", "put", "@kv", "other"], b"y");
    assert_eq!(replaced["value_hash"], blake3::hash(b"y").to_hex().as_str());
    let kept = server.one(&["kv", "put", "@kv", "other", "--if-absent"], b"zzz");
    assert_eq!(kept, replaced);
    assert_eq!(server.run(&["kv", "get", "@kv", "other"], b"").stdout, b"y");
    let fresh = server.one(&["kv", "put", "@kv", "new", "--if-absent"], b"zzz");
    assert_eq!(fresh["value_len"], json!(3));

    // An empty value needs --allow-empty, like an empty turn.
    let error = server.fails(&["kv", "put", "@kv", "empty"], b"", 1);
    assert_eq!(error["code"], "EMPTY_PAYLOAD");
    let empty = server.one(&["kv", "put", "@kv", "empty", "--allow-empty"], b"");
    assert_eq!(empty["value_len"], json!(0));
    assert!(
        server
            .run(&["kv", "get", "@kv", "empty"], b"")
            .stdout
            .is_empty()
    );

    // rm: prints the entry it removed; get then exits 3; rm again is NOT_FOUND too (issue 29:
    // it printed nothing, even for a missing key).
    let removed = server.one(&["kv", "rm", "@kv", "pending/b"], b"");
    assert_eq!(removed["key"], json!("pending/b"), "{removed}");
    assert!(removed["value_hash"].is_string() && removed["value_len"].is_u64());
    let error = server.fails(&["kv", "get", "@kv", "pending/b"], b"", 3);
    assert_eq!(error["code"], "NOT_FOUND");
    assert!(
        error["message"].as_str().unwrap().contains("pending/b"),
        "{error}"
    );
    let again = server.fails(&["kv", "rm", "@kv", "pending/b"], b"", 3);
    assert_eq!(again["code"], "NOT_FOUND");
    assert!(
        again["message"].as_str().unwrap().contains("pending/b"),
        "{again}"
    );
    assert_eq!(
        keys(&server.json(&["kv", "list", "@kv"], b"")),
        ["empty", "new", "other", "pending/a"]
    );

    // Over the key limit: TOO_LARGE, exit 1; nothing stored.
    let long_key = "k".repeat(257);
    assert_eq!(
        server.fails(&["kv", "put", "@kv", &long_key], b"v", 1)["code"],
        "TOO_LARGE"
    );
    assert_eq!(server.json(&["kv", "list", "@kv"], b"").len(), 4);

    // Readable list: key, length, hash.
    let output = server.run(&["kv", "list", "@kv", "--prefix", "pending/"], b"");
    let text = String::from_utf8(output.stdout).unwrap();
    let expected = format!(
        "pending/a 11 bytes {}\n",
        blake3::hash(b"from a file").to_hex()
    );
    assert_eq!(text, expected);
}

#[test]
fn kv_keys_that_are_not_utf8() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let server = TestServer::start(None);
    server.one(&["ctx", "create", "--name", "bytes"], b"");
    let key = OsStr::from_bytes(&[0xff, b'k', 0x01]);
    let output = Command::new(CLI)
        .args(["--addr", &server.addr, "--json", "kv", "put", "@bytes"])
        .arg(key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child.stdin.take().unwrap().write_all(b"value")?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listed = server.json(&["kv", "list", "@bytes"], b"");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["key_b64"], "/2sB");
    let output = Command::new(CLI)
        .args(["--addr", &server.addr, "kv", "get", "@bytes"])
        .arg(key)
        .output()
        .unwrap();
    assert_eq!(output.stdout, b"value");
}

#[test]
fn list_prints_each_context_once() {
    let server = TestServer::start(None);
    let mut expected = BTreeSet::new();
    for index in 0..25 {
        let name = format!("many-{index:02}");
        expected.insert(id(&server.one(
            &["ctx", "create", "--name", &name, "--tag", "kind=many"],
            b"",
        )));
    }
    let listed = server.json(&["ctx", "list", "--tag", "kind=many"], b"");
    let ids: Vec<u64> = listed.iter().map(id).collect();
    assert_eq!(ids.iter().copied().collect::<BTreeSet<_>>(), expected);
    assert_eq!(ids.len(), expected.len());
    // --limit stops early even when more match.
    assert_eq!(
        server
            .json(&["ctx", "list", "--tag", "kind=many", "--limit", "7"], b"")
            .len(),
        7
    );
}

/// A listing longer than one page (the server answers at most 1,000 contexts per CTX_LIST):
/// `ctx list` follows the cursor and prints every context exactly once; `--limit` past the
/// first page stops where it says.
#[test]
fn list_follows_the_cursor_past_one_page() {
    let server = TestServer::start(None);
    let client = ctxstore_client::blocking::Client::connect(ctxstore_client::ClientConfig::new(
        server.addr.clone(),
    ))
    .unwrap();
    let mut expected = BTreeSet::new();
    for _ in 0..1_234 {
        let mut new = ctxstore_client::NewContext::new();
        new.tags.insert("kind".into(), "bulk".into());
        expected.insert(client.open_context(new).unwrap().context.context_id);
    }
    let listed = server.json(&["ctx", "list", "--tag", "kind=bulk"], b"");
    let ids: Vec<u64> = listed.iter().map(id).collect();
    assert_eq!(ids.len(), expected.len(), "each context once");
    assert_eq!(ids.iter().copied().collect::<BTreeSet<_>>(), expected);
    let limited = server.json(
        &["ctx", "list", "--tag", "kind=bulk", "--limit", "1100"],
        b"",
    );
    assert_eq!(limited.len(), 1_100);
}

/// A fake server of protocol version 1 that answers HELLO and CTX_CREATE (context 7) and
/// counts every other request it gets.
fn version_1_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let others = std::sync::Arc::new(AtomicU64::new(0));
    let counted = others.clone();
    let (addr, _) = ScriptedServer::new(1).serve(move |request| match request {
        Request::Contexts(ContextsRequest::CtxCreate(contexts::CtxCreate { base_turn_id: 0 })) => {
            Some(Response::Contexts(ContextsResponse::Context(
                contexts::Context {
                    message_type: MessageType::CtxCreate,
                    head: ContextHeadWire {
                        context_id: 7,
                        head_turn_id: 0,
                        head_depth: 0,
                    },
                },
            )))
        }
        _ => {
            counted.fetch_add(1, Ordering::Relaxed);
            None
        }
    });
    (addr, others)
}

#[test]
fn a_version_1_server_still_creates_and_refuses_names_up_front() {
    let (addr, others) = version_1_server();
    let run = |args: &[&str]| {
        Command::new(CLI)
            .env_remove("CTXSTORE_TOKEN")
            .args(["--addr", &addr, "--timeout", "2s", "--json"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // A plain create: the same fields, no name, no tags.
    let output = run(&["ctx", "create"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let created: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        created,
        json!({"context_id": 7, "head_turn_id": 0, "head_depth": 0, "name": null, "tags": {},
               "created": true})
    );
    // Anything that needs version 2: exit 1, said before sending (no timeout).
    for args in [
        vec!["ctx", "create", "--name", "x"],
        vec!["ctx", "show", "7"],
        vec!["head", "@x"],
        vec!["kv", "list", "7"],
        vec!["ctx", "list"],
    ] {
        let output = run(&args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let error: Value = serde_json::from_str(stderr.trim()).unwrap();
        assert_eq!(error["error"]["code"], "UNSUPPORTED_BY_SERVER", "{args:?}");
        assert!(stderr.contains("needs protocol version 2"), "{stderr}");
    }
    assert_eq!(others.load(std::sync::atomic::Ordering::Relaxed), 0);
}
