//! `--addr A,B,C` (and `CTXSTORE_ADDR=A,B,C`) follows the primary (decision 0031 §11), against
//! the real binary on a `file://` replica: a primary and an `--auto-promote` standby, the
//! standby listed first; commands go to the primary; after the primary is killed (SIGKILL) a
//! keyed append waits for the standby's takeover and lands there, again with the same key it
//! answers that turn (`existing`), and a read is answered there. Of servers none of which
//! takes writes, `--failover-timeout` later: exit 8, `NO_PRIMARY`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use ctxstore_client::ErrorCode;
use ctxstore_protocol::{Request, Response};
use ctxstore_testsupport::{ScriptedServer, ServerLaunch, TestServer, server_binary};
use serde_json::json;

mod common;

use common::{At, Cli, ctxstore, json_lines, run};

fn spawn(data: &Path, flags: &[&str]) -> TestServer {
    ServerLaunch::new(server_binary())
        .data(data)
        .flags(flags)
        .keep_log()
        .start()
}

#[test]
fn addr_lists_follow_the_primary_through_a_kill() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    let common = ["--replicate-interval", "100ms", "--replica-lease", "4s"];
    let flags: Vec<&str> = ["--replicate-to", url.as_str()]
        .into_iter()
        .chain(common)
        .collect();
    let mut primary = spawn(&root.path().join("primary"), &flags);
    primary.one(&["ctx", "create", "--name", "run"], b"");
    let first = primary.one(
        &[
            "append",
            "@run",
            "--key",
            "step-1",
            "--durability",
            "remote",
        ],
        b"first",
    );
    let flags: Vec<&str> = ["--follow", url.as_str(), "--auto-promote"]
        .into_iter()
        .chain(common)
        .collect();
    let standby = spawn(&root.path().join("standby"), &flags);
    let addrs = format!("{},{}", standby.addr, primary.addr);
    let list = At(&addrs);
    let second = list.one(
        &[
            "append",
            "@run",
            "--key",
            "step-2",
            "--durability",
            "remote",
        ],
        b"second",
    );
    assert_eq!(second["existing"], json!(false));
    // CTXSTORE_ADDR carries the list too.
    let output = run(
        ctxstore()
            .env("CTXSTORE_ADDR", &addrs)
            .args(["--json", "head", "@run"]),
        b"",
    );
    let head = json_lines(&output, &["head"]);
    assert_eq!(head[0]["head_turn_id"], second["turn_id"]);

    primary.kill();
    let killed = Instant::now();
    let third = list.one(
        &[
            "append",
            "@run",
            "--key",
            "step-3",
            "--durability",
            "remote",
        ],
        b"third",
    );
    assert!(killed.elapsed() < Duration::from_secs(30));
    assert!(third["turn_id"].is_u64(), "{third}");
    let again = list.one(
        &[
            "append",
            "@run",
            "--key",
            "step-3",
            "--durability",
            "remote",
        ],
        b"third",
    );
    assert_eq!(again["existing"], json!(true));
    assert_eq!(again["turn_id"], third["turn_id"]);
    let head = list.one(&["head", "@run"], b"");
    assert_eq!(head["head_turn_id"], third["turn_id"]);
    assert_ne!(first["turn_id"], third["turn_id"]);
}

#[test]
fn no_primary_in_the_list_exits_8() {
    let refuse = |_: &Request| {
        Some(Response::Error {
            code: ErrorCode::NotPrimary,
            detail: 0,
            message: "scripted standby".into(),
        })
    };
    let (a, _) = ScriptedServer::new(4).serve(refuse);
    let (b, _) = ScriptedServer::new(4).serve(refuse);
    let addrs = format!("{a},{b}");
    let error = At(&addrs).fails(&["--failover-timeout", "300ms", "head", "7"], b"", 8);
    assert_eq!(error["code"], "NO_PRIMARY", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("--failover-timeout"),
        "{error}"
    );
}
