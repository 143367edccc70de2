//! `ctxstore-loadgen --durability remote` (decision 0031 §11) against a real server replicating
//! to `file://`: every append is sent with the frame flag (the server, whose own default is
//! `local`, counts each as a remote acknowledgement), every ack log line says
//! `"durability":"remote"`, and a restore of the replica taken right after a SIGKILL holds
//! every acknowledged append with its payload hash, parent and depth. Without the flag the
//! lines say `default`; `--durability` with a peer backend is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use ctxstore_client::{ClientConfig, blocking};
use ctxstore_testsupport::{ServerLaunch, TestServer};

mod common;

use common::{LOADGEN, server_binary};

fn spawn(data: &Path, flags: &[&str]) -> TestServer {
    ServerLaunch::new(server_binary())
        .data(data)
        .flags(flags)
        .keep_log()
        .start()
}

/// Runs a second of appends against `addr` with `extra` flags; the ack log's lines.
fn appends(addr: &str, log: &Path, extra: &[&str]) -> Vec<serde_json::Value> {
    let output = Command::new(LOADGEN)
        .args(["--addr", addr, "--duration", "1s", "--warmup", "0s"])
        .args([
            "--connections",
            "2",
            "--contexts",
            "4",
            "--mix",
            "append=100",
        ])
        .args(["--payload-bytes", "512", "--quiet", "--ack-log"])
        .arg(log)
        .args(extra)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = std::fs::read_to_string(log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(!lines.is_empty(), "no append was acknowledged");
    lines
}

#[test]
fn remote_appends_are_logged_as_remote_and_in_a_restore_of_the_replica() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    let mut server = spawn(
        &root.path().join("data"),
        &[
            "--replicate-to",
            &url,
            "--replicate-interval",
            "1h",
            "--replica-lease",
            "off",
        ],
    );
    let log = root.path().join("acks.jsonl");
    let acked = appends(&server.addr, &log, &["--durability", "remote"]);
    assert!(
        acked.iter().all(|line| line["durability"] == "remote"),
        "{acked:?}"
    );
    let client = blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let role = client.role().unwrap();
    assert!(
        role.remote_acks_total >= acked.len() as u64,
        "{} acknowledged, {role:?}",
        acked.len()
    );
    assert_eq!(role.remote_unconfirmed_total, 0, "{role:?}");
    server.kill();

    let restored_dir = root.path().join("restored");
    let output = Command::new(server_binary())
        .args(["restore", "--from", &url, "--to"])
        .arg(&restored_dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let restored = spawn(&restored_dir, &[]);
    let client = blocking::Client::connect(ClientConfig::new(restored.addr.clone())).unwrap();
    for line in &acked {
        let turn = client.turn(line["turn_id"].as_u64().unwrap()).unwrap();
        assert_eq!(turn.payload_hash.to_hex(), line["payload_hash"], "{line}");
        assert_eq!(turn.parent_turn_id, line["parent_turn_id"], "{line}");
        assert_eq!(u64::from(turn.depth), line["depth"], "{line}");
        assert_eq!(turn.context_id, line["context_id"], "{line}");
    }
}

#[test]
fn without_the_flag_the_log_says_default_and_a_peer_is_refused() {
    let server = TestServer::start(None);
    let dir = tempfile::tempdir().unwrap();
    let acked = appends(&server.addr, &dir.path().join("acks.jsonl"), &[]);
    assert!(acked.iter().all(|line| line["durability"] == "default"));

    let output = Command::new(LOADGEN)
        .args(["--backend", "sqlite", "--peer"])
        .arg(dir.path().join("peer.db"))
        .args(["--duration", "1s", "--durability", "remote", "--quiet"])
        .output()
        .unwrap();
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--durability is ctxstore's"), "{stderr}");
}
