//! The CLI contract of issue 15 item 8 (retention) and issue 18 item 5 (backup) against a real
//! `ctxstore-server`: `ctx delete`, `ctx prune --keep`, `ctx ttl DURATION|none`, the
//! `floor_depth` and `ttl_ms` of `ctx show`, and `backup --to DIR` (a copy that
//! `ctxstore-server verify` accepts); their `--json` fields, their exit codes, usage errors
//! found before connecting, BACKUP's own timeout, and a version-1 server getting none of it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ctxstore_protocol::admin;
use ctxstore_protocol::{AdminRequest, AdminResponse, BackupWire, Request, Response};
use serde_json::{Value, json};

mod common;

use common::{Cli, json_error, json_lines};
use ctxstore_testsupport::{ScriptedServer, TestServer};

/// Runs the CLI against `addr` in `cwd`; `args` after the address.
fn run_at(addr: &str, cwd: &Path, args: &[&str], stdin: &[u8]) -> Output {
    common::run(
        common::ctxstore()
            .current_dir(cwd)
            .args(["--addr", addr])
            .args(args),
        stdin,
    )
}

/// An address where nothing listens: a command that connected would exit 5 there.
struct Nowhere(String);

impl Nowhere {
    fn new() -> Nowhere {
        // Outside the ephemeral range: no other test's listener is handed it.
        Nowhere(format!("127.0.0.1:{}", ctxstore_testsupport::fixed_port()))
    }
}

impl Cli for Nowhere {
    fn run(&self, args: &[&str], stdin: &[u8]) -> Output {
        run_at(&self.0, Path::new("/"), args, stdin)
    }
}

/// The fields `ctx show` prints, with their types, and the two of retention.
fn assert_show_fields(value: &Value) {
    common::assert_show_fields(value);
    assert!(value["floor_depth"].is_u64(), "floor_depth in {value}");
    assert!(
        value["ttl_ms"].is_u64() || value["ttl_ms"].is_null(),
        "{value}"
    );
}

/// A context named `name` with `turns` turns; its ContextID.
fn thread(server: &TestServer, name: &str, turns: u32) -> u64 {
    let created = server.one(&["ctx", "create", "--name", name], b"");
    for turn in 0..turns {
        let payload = format!("{name} turn {turn}");
        server.one(&["append", &format!("@{name}")], payload.as_bytes());
    }
    created["context_id"].as_u64().unwrap()
}

fn depths(server: &TestServer, context: &str) -> Vec<u64> {
    server
        .json(&["last", context], b"")
        .iter()
        .map(|turn| turn["depth"].as_u64().unwrap())
        .collect()
}

#[test]
fn ctx_delete_prints_the_context_gone() {
    let server = TestServer::start(None);
    let id = thread(&server, "doomed", 2);
    let head = server.one(&["head", "@doomed"], b"")["head_turn_id"]
        .as_u64()
        .unwrap();
    let fork = server.one(&["ctx", "fork", &head.to_string()], b"");

    let deleted = server.one(&["ctx", "delete", "@doomed"], b"");
    assert_eq!(
        deleted,
        json!({"context_id": id, "name": "doomed", "deleted": true})
    );
    // Gone for every command: exit 3, NOT_FOUND; deleting again too.
    for args in [
        vec!["ctx", "show", "@doomed"],
        vec!["ctx", "show", &id.to_string()],
        vec!["last", "@doomed"],
        vec!["ctx", "delete", "@doomed"],
        vec!["ctx", "delete", &id.to_string()],
        vec!["ctx", "prune", "@doomed", "--keep", "1"],
        vec!["ctx", "ttl", "@doomed", "1h"],
    ] {
        assert_eq!(server.fails(&args, b"", 3)["code"], "NOT_FOUND", "{args:?}");
    }
    // The fork keeps the history; the name is free again.
    let fork_id = fork["context_id"].to_string();
    assert_eq!(depths(&server, &fork_id), vec![0, 1]);
    let again = server.one(&["ctx", "create", "--name", "doomed"], b"");
    assert!(again["context_id"].as_u64() > fork["context_id"].as_u64());

    // By id, a context without a name: name null. Readable text without --json.
    let unnamed = server.one(&["ctx", "create"], b"")["context_id"]
        .as_u64()
        .unwrap();
    assert_eq!(
        server.one(&["ctx", "delete", &unnamed.to_string()], b""),
        json!({"context_id": unnamed, "name": null, "deleted": true})
    );
    let output = server.run(&["ctx", "delete", "@doomed"], b"");
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        text,
        format!("context {} @doomed deleted\n", again["context_id"])
    );
}

#[test]
fn ctx_prune_keeps_the_newest_depths() {
    let server = TestServer::start(None);
    let id = thread(&server, "long", 5);

    let pruned = server.one(&["ctx", "prune", "@long", "--keep", "2"], b"");
    assert_show_fields(&pruned);
    assert_eq!(pruned["context_id"], json!(id));
    assert_eq!(pruned["head_depth"], json!(4));
    assert_eq!(pruned["floor_depth"], json!(3));
    assert_eq!(pruned["ttl_ms"], Value::Null);
    assert_eq!(depths(&server, "@long"), vec![3, 4]);
    // ctx show has the floor too, and the same fields.
    let shown = server.one(&["ctx", "show", "@long"], b"");
    assert_eq!(shown, pruned);
    // Keeping more never lowers the floor; by id as well.
    let wider = server.one(&["ctx", "prune", &id.to_string(), "--keep", "50"], b"");
    assert_eq!(wider["floor_depth"], json!(3));

    // 0 is the server's INVALID_ARGUMENT: exit 1, the floor unchanged.
    let error = server.fails(&["ctx", "prune", "@long", "--keep", "0"], b"", 1);
    assert_eq!(error["code"], "INVALID_ARGUMENT");
    assert!(
        error["message"].as_str().unwrap().contains("delete"),
        "{error}"
    );
    assert_eq!(
        server.one(&["ctx", "show", "@long"], b"")["floor_depth"],
        json!(3)
    );
    let output = server.run(&["ctx", "prune", "@long", "--keep", "1"], b"");
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains(" floor 4 "), "{text}");
    assert_eq!(
        server.fails(&["ctx", "prune", "@nobody", "--keep", "1"], b"", 3)["code"],
        "NOT_FOUND"
    );
}

#[test]
fn ctx_ttl_sets_reads_and_clears() {
    let server = TestServer::start(None);
    let id = thread(&server, "kept", 1);
    let shown = server.one(&["ctx", "show", "@kept"], b"");
    assert_show_fields(&shown);
    assert_eq!(
        (&shown["floor_depth"], &shown["ttl_ms"]),
        (&json!(0), &Value::Null)
    );

    for (ttl, ttl_ms) in [
        ("7d", 604_800_000u64),
        ("12h", 43_200_000),
        ("30m", 1_800_000),
        ("1h30m", 5_400_000),
    ] {
        let set = server.one(&["ctx", "ttl", "@kept", ttl], b"");
        assert_show_fields(&set);
        assert_eq!(set["context_id"], json!(id));
        assert_eq!(set["ttl_ms"], json!(ttl_ms), "{ttl}");
        assert_eq!(
            server.one(&["ctx", "show", "@kept"], b"")["ttl_ms"],
            json!(ttl_ms)
        );
    }
    let output = server.run(&["ctx", "ttl", &id.to_string(), "7d"], b"");
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains(" ttl 7days "), "{text}");
    let cleared = server.one(&["ctx", "ttl", "@kept", "none"], b"");
    assert_eq!(cleared["ttl_ms"], Value::Null);
    assert_eq!(
        server.one(&["ctx", "show", "@kept"], b"")["ttl_ms"],
        Value::Null
    );
    // Over 100 years: the server's INVALID_ARGUMENT; an unknown context: 3.
    assert_eq!(
        server.fails(&["ctx", "ttl", "@kept", "101years"], b"", 1)["code"],
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        server.fails(&["ctx", "ttl", "@nobody", "1h"], b"", 3)["code"],
        "NOT_FOUND"
    );
}

/// A command line that cannot be right exits 2 (USAGE) before connecting: against an
/// address where nothing listens, a connection attempt would exit 5.
#[test]
fn bad_retention_and_backup_input_is_a_usage_error_before_connecting() {
    let nowhere = Nowhere::new();
    for args in [
        vec!["ctx", "prune", "@x"],
        vec!["ctx", "prune", "@x", "--keep"],
        vec!["ctx", "prune", "@x", "--keep", "-1"],
        vec!["ctx", "prune", "@x", "--keep", "two"],
        vec!["ctx", "prune", "@x", "--keep", "4294967296"],
        vec!["ctx", "prune", "@", "--keep", "1"],
        vec!["ctx", "ttl", "@x"],
        vec!["ctx", "ttl", "@x", "7"],
        vec!["ctx", "ttl", "@x", "7x"],
        vec!["ctx", "ttl", "@x", "-1d"],
        vec!["ctx", "ttl", "@x", "0s"],
        vec!["ctx", "ttl", "@x", "500us"],
        vec!["ctx", "ttl", "@x", ""],
        vec!["ctx", "ttl", "@x", "None"],
        vec!["ctx", "ttl", "@x", "18446744073709551615s"],
        vec!["ctx", "delete"],
        vec!["ctx", "delete", "x"],
        vec!["backup"],
        vec!["backup", "--to"],
        vec!["backup", "--to", ""],
        vec!["backup", "--to", "/tmp/x", "--backup-timeout", "soon"],
    ] {
        let error = nowhere.fails(&args, b"", 2);
        assert_eq!(error["code"], "USAGE", "{args:?}: {error}");
    }
    // The control: a command line that parses does try to connect (exit 5).
    assert_eq!(
        nowhere.fails(&["ctx", "prune", "@x", "--keep", "1"], b"", 5)["code"],
        "CONNECT_FAILED"
    );
    // What the help says a new user needs: durations, none, where DIR is.
    let help = |args: &[&str]| {
        let output = nowhere.run(args, b"");
        assert!(output.status.success(), "{args:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let ttl = help(&["ctx", "ttl", "--help"]);
    for says in ["7d", "12h", "none", "--context-ttl"] {
        assert!(ttl.contains(says), "ctx ttl --help lacks {says}: {ttl}");
    }
    let prune = help(&["ctx", "prune", "--help"]);
    assert!(prune.contains("--keep <N>"), "{prune}");
    let backup = help(&["backup", "--help"]);
    for says in [
        "server's host",
        "verify",
        "--backup-timeout",
        "ctxstore-server backup",
    ] {
        assert!(
            backup.contains(says),
            "backup --help lacks {says}: {backup}"
        );
    }
    let top = help(&["--help"]);
    for says in ["ctx prune", "ctx ttl", "ctx delete", "backup --to"] {
        assert!(top.contains(says), "--help lacks {says}");
    }
}

#[test]
fn backup_writes_a_copy_that_verifies() {
    let server = TestServer::start(None);
    thread(&server, "a", 3);
    thread(&server, "b", 2);
    let target = tempfile::tempdir().unwrap();
    let dir = target.path().join("copy");
    let dir_text = dir.to_str().unwrap();

    let report = server.one(&["backup", "--to", dir_text], b"");
    let fields: Vec<&String> = report.as_object().unwrap().keys().collect();
    assert_eq!(
        fields,
        [
            "backup_dir",
            "blobs",
            "bytes",
            "duration_ms",
            "linked_bytes",
            "turns"
        ]
    );
    assert_eq!(report["backup_dir"], json!(dir_text));
    assert_eq!(report["turns"], json!(5));
    assert_eq!(report["blobs"], json!(5));
    assert!(report["bytes"].as_u64().unwrap() > 0);
    assert!(report["linked_bytes"].as_u64() <= report["bytes"].as_u64());
    assert!(report["duration_ms"].is_u64());

    ctxstore_testsupport::verified(&ctxstore_testsupport::server_binary(), &dir);

    // Not empty any more: the server's INVALID_ARGUMENT, exit 1, naming the directory.
    let error = server.fails(&["backup", "--to", dir_text], b"", 1);
    assert_eq!(error["code"], "INVALID_ARGUMENT");
    assert!(
        error["message"].as_str().unwrap().contains(dir_text),
        "{error}"
    );

    // A relative DIR is made absolute against the working directory (the server is on this
    // host here); readable text without --json.
    let output = run_at(
        &server.addr,
        target.path(),
        &["backup", "--to", "rel/copy"],
        b"",
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let relative = target.path().join("rel/copy");
    assert!(
        text.starts_with(&format!(
            "backup in {}: 5 turns, 5 blobs",
            relative.display()
        )),
        "{text}"
    );
    assert!(relative.join("ctxstore.meta").exists());
}

/// A fake version-2 server: HELLO at once, BACKUP after `delay`; counts the BACKUPs it got.
fn slow_backup_server(delay: Duration) -> (String, Arc<AtomicU64>) {
    let backups = Arc::new(AtomicU64::new(0));
    let counted = backups.clone();
    let (addr, _) = ScriptedServer::new(2).serve(move |request| match request {
        Request::Admin(AdminRequest::Backup(admin::Backup { dir })) => {
            counted.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(delay);
            Some(Response::Admin(AdminResponse::BackedUp(BackupWire {
                turns: 3,
                dir: dir.clone(),
                ..BackupWire::default()
            })))
        }
        _ => None,
    });
    (addr, backups)
}

/// `--timeout` (per request) does not cut a backup; `--backup-timeout` does, with exit 5 and
/// a message saying the backup may go on.
#[test]
fn backup_waits_on_backup_timeout_not_timeout() {
    let (addr, backups) = slow_backup_server(Duration::from_millis(600));
    let root = Path::new("/");
    let args = [
        "--json",
        "--timeout",
        "100ms",
        "backup",
        "--to",
        "/srv/copy",
    ];
    let report = json_lines(&run_at(&addr, root, &args, b""), &args);
    assert_eq!(report[0]["backup_dir"], "/srv/copy");
    assert_eq!(report[0]["turns"], json!(3));

    let args = [
        "--json",
        "backup",
        "--to",
        "/srv/copy-2",
        "--backup-timeout",
        "100ms",
    ];
    let error = json_error(&run_at(&addr, root, &args, b""), &args, 5);
    assert_eq!(error["code"], "TIMEOUT");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("may still be writing") && message.contains("--backup-timeout"),
        "{message}"
    );
    assert_eq!(backups.load(Ordering::Relaxed), 2);
}

/// A fake server of protocol version 1 that answers HELLO and counts every other request.
fn version_1_server() -> (String, Arc<AtomicU64>) {
    let others = Arc::new(AtomicU64::new(0));
    let counted = others.clone();
    let (addr, _) = ScriptedServer::new(1).serve(move |_| {
        counted.fetch_add(1, Ordering::Relaxed);
        None
    });
    (addr, others)
}

#[test]
fn a_version_1_server_gets_no_retention_or_backup_requests() {
    let (addr, others) = version_1_server();
    for args in [
        vec!["ctx", "delete", "7"],
        vec!["ctx", "prune", "7", "--keep", "1"],
        vec!["ctx", "ttl", "7", "1h"],
        vec!["ctx", "ttl", "7", "none"],
        vec!["ctx", "show", "7"],
        vec!["backup", "--to", "/srv/copy"],
    ] {
        let mut all = vec!["--json", "--timeout", "30s"];
        all.extend_from_slice(&args);
        let output = run_at(&addr, Path::new("/"), &all, b"");
        let error = json_error(&output, &args, 1);
        assert_eq!(error["code"], "UNSUPPORTED_BY_SERVER", "{args:?}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("needs protocol version 2"),
            "{error}"
        );
    }
    assert_eq!(others.load(Ordering::Relaxed), 0);
}
