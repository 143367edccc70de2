//! `--durability local|remote` on `append`, `kv put` and `stream` (decision 0031 §11) and
//! the exit codes of failover: against a real `ctxstore-server --replicate-to file://…`, the
//! remote writes are answered, counted by the server as remote acknowledgements, and in a
//! restore of the replica right after a SIGKILL; an object store that takes no PUTs exits 9
//! (UNCONFIRMED, the turn in `detail`, "run it again with the same --key"), and running it
//! again with the same `--key` once the store is back answers that turn (`existing`); a server
//! without a replica refuses remote (INVALID_ARGUMENT, exit 1) and writes nothing;
//! NOT_PRIMARY exits 8; a version-3 server is sent nothing (UNSUPPORTED_BY_SERVER, exit 1); a
//! bad value is a usage error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use ctxstore_client::{ClientConfig, ErrorCode, blocking};
use ctxstore_protocol::{Request, Response};
use ctxstore_testsupport::{ScriptedServer, ServerLaunch, TestServer, server_binary};
use serde_json::json;

mod common;

use common::{At, Cli};

fn spawn(data: &Path, flags: &[&str]) -> TestServer {
    ServerLaunch::new(server_binary())
        .data(data)
        .flags(flags)
        .keep_log()
        .start()
}

/// A server replicating to `ROOT/replica` every `interval` (a failing store is tried again
/// only then); the replica's URL.
fn replicating(root: &Path, interval: &str, flags: &[&str]) -> (String, TestServer) {
    let url = format!("file://{}", root.join("replica").display());
    // No lease: these tests break the object store on purpose, and a lease would close
    // every acknowledgement, local ones too (decision 0031 §6; tested in server/tests/lease.rs).
    let mut all = vec![
        "--replicate-to",
        &url,
        "--replicate-interval",
        interval,
        "--replica-lease",
        "off",
    ];
    all.extend_from_slice(flags);
    (url.clone(), spawn(&root.join("data"), &all))
}

#[test]
fn remote_writes_are_answered_and_in_a_restore_of_the_replica() {
    let root = tempfile::tempdir().unwrap();
    let (url, mut server) = replicating(root.path(), "1h", &[]);
    server.one(&["ctx", "create", "--name", "run"], b"");
    let remote = ["--durability", "remote"];
    let appended = server.one(
        &["append", "@run", "--key", "step-1", remote[0], remote[1]],
        b"remote turn",
    );
    assert_eq!(appended["existing"], json!(false));
    let plain = server.one(&["append", "@run", remote[0], remote[1]], b"plain remote");
    server.one(
        &["kv", "put", "@run", "fact", remote[0], remote[1]],
        b"blue",
    );
    let streamed = server.json(&["stream", "@run", remote[0], remote[1]], b"streamed");
    let sealed = streamed.last().unwrap().clone();
    // Local: the server's own default, not counted.
    server.one(&["append", "@run", "--durability", "local"], b"local turn");
    let client = blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let role = client.role().unwrap();
    assert_eq!(role.remote_acks_total, 4, "{role:?}");
    server.kill();

    let restored_dir = root.path().join("restored");
    let output = std::process::Command::new(server_binary())
        .args(["restore", "--from", &url, "--to"])
        .arg(&restored_dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let restored = spawn(&restored_dir, &[]);
    for (turn, payload) in [
        (&appended, &b"remote turn"[..]),
        (&plain, &b"plain remote"[..]),
        (&sealed, &b"streamed"[..]),
    ] {
        let turn_id = turn["turn_id"].to_string();
        let shown = restored.one(&["turn", &turn_id], b"");
        let hash = shown["payload_hash"].as_str().unwrap();
        let output = restored.run(&["blob", hash], b"");
        assert_eq!(output.stdout, payload, "turn {turn_id}: {output:?}");
    }
    let value = restored.run(&["kv", "get", "@run", "fact"], b"");
    assert_eq!(value.stdout, b"blue");
}

#[test]
fn unconfirmed_exits_9_and_the_same_key_again_answers_that_turn() {
    let root = tempfile::tempdir().unwrap();
    let (_, server) = replicating(root.path(), "300ms", &["--remote-ack-timeout", "500ms"]);
    server.one(&["ctx", "create", "--name", "run"], b"");
    let replica = root.path().join("replica");
    let moved = root.path().join("replica.moved");
    std::fs::rename(&replica, &moved).unwrap();
    std::fs::write(&replica, b"not a directory").unwrap();
    let args = [
        "append",
        "@run",
        "--key",
        "step-1",
        "--durability",
        "remote",
    ];
    let error = server.fails(&args, b"once", 9);
    assert_eq!(error["code"], "UNCONFIRMED", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("run it again with the same --key"),
        "{message}"
    );
    let head = server.one(&["head", "@run"], b"")["head_turn_id"].clone();
    assert_ne!(head, json!(0), "durable on the server");
    // Without --json: the sentence and the code.
    let output = server.run(&args, b"once");
    assert_eq!(output.status.code(), Some(9));
    assert!(String::from_utf8_lossy(&output.stderr).contains("outcome unknown"));

    std::fs::remove_file(&replica).unwrap();
    std::fs::rename(&moved, &replica).unwrap();
    let started = Instant::now();
    let retried = loop {
        let output = server.run(&[&["--json"][..], &args[..]].concat(), b"once");
        if output.status.success() {
            break common::json_lines(&output, &args).remove(0);
        }
        assert_eq!(output.status.code(), Some(9), "{output:?}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{}",
            server.log()
        );
    };
    assert_eq!(retried["existing"], json!(true), "{retried}");
    assert_eq!(retried["turn_id"], head);
}

#[test]
fn remote_without_a_replica_is_refused_and_writes_nothing() {
    let server = TestServer::start(None);
    server.one(&["ctx", "create", "--name", "run"], b"");
    let error = server.fails(&["append", "@run", "--durability", "remote"], b"nowhere", 1);
    assert_eq!(error["code"], "INVALID_ARGUMENT", "{error}");
    let error = server.fails(
        &["kv", "put", "@run", "k", "--durability", "remote"],
        b"v",
        1,
    );
    assert_eq!(error["code"], "INVALID_ARGUMENT", "{error}");
    assert_eq!(server.one(&["head", "@run"], b"")["head_turn_id"], json!(0));
    server.fails(&["kv", "get", "@run", "k"], b"", 3);
    // Local: what this server does anyway.
    let appended = server.one(&["append", "@run", "--durability", "local"], b"here");
    assert_eq!(
        server.one(&["head", "@run"], b"")["head_turn_id"],
        appended["turn_id"]
    );
}

#[test]
fn not_primary_exits_8_and_a_version_3_server_is_sent_nothing() {
    let (addr, _) = ScriptedServer::new(4).serve(|_| {
        Some(Response::Error {
            code: ErrorCode::NotPrimary,
            detail: 3,
            message: "this server is a standby".into(),
        })
    });
    let error = At(&addr).fails(&["append", "7", "--durability", "remote"], b"x", 8);
    assert_eq!(error["code"], "NOT_PRIMARY");
    assert_eq!(error["detail"], json!(3));

    let (addr, seen) = ScriptedServer::new(3).serve(|_: &Request| None);
    for args in [
        &["append", "7", "--durability", "remote"][..],
        &["kv", "put", "7", "k", "--durability", "local"][..],
        &["stream", "7", "--durability", "remote"][..],
    ] {
        let error = At(&addr).fails(args, b"x", 1);
        assert_eq!(error["code"], "UNSUPPORTED_BY_SERVER", "{args:?}: {error}");
    }
    assert!(seen.lock().unwrap().is_empty(), "nothing was sent");

    let error = At(&addr).fails(&["append", "7", "--durability", "everywhere"], b"x", 2);
    assert_eq!(error["code"], "USAGE");
}
