//! A short run of the real binaries: `ctxstore-loadgen --spawn-server` with a mixed workload.
//! Checks zero errors, a well-formed report, and an ack log with one line per stored turn. It
//! never gates on speed (CI machines are noisy).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

mod common;

use common::{LOADGEN, server_binary};

#[test]
fn a_mixed_workload_against_a_spawned_server() {
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("report.json");
    let ack_log = dir.path().join("acks.jsonl");
    let output = Command::new(LOADGEN)
        .args(["--spawn-server", "--server-bin"])
        .arg(server_binary())
        .args(["--duration", "5s", "--warmup", "1s", "--connections", "8", "--contexts", "16", "--prefill", "8"])
        .args(["--mix", "append=60,get_last=20,page=5,range=5,fork=5,get_blob=5"])
        .args(["--dup-ratio", "0.3", "--large-every", "50", "--read-turns", "16", "--quiet"])
        .args(["--slo", "append.errors<=0,get_last.errors<=0,fork.errors<=0,page.errors<=0,range.errors<=0,get_blob.errors<=0"])
        .arg("--json")
        .arg(&report_path)
        .arg("--ack-log")
        .arg(&ack_log)
        .output()
        .unwrap();
    let (report, stdout) = common::report_of(&output, &report_path);
    assert!(
        stdout.contains("append") && stdout.contains("slo met"),
        "{stdout}"
    );

    for op in ["append", "get_last", "page", "range", "fork", "get_blob"] {
        let entry = &report["operations"][op];
        assert!(entry["count"].as_u64().unwrap() > 0, "{op} did not run");
        assert_eq!(entry["errors"], 0, "{op}");
        assert!(entry["throughput_per_s"].as_f64().unwrap() > 0.0);
        let latency = &entry["latency_us"];
        let order: Vec<u64> = ["p50", "p90", "p99", "p999", "max"]
            .iter()
            .map(|key| latency[key].as_u64().unwrap())
            .collect();
        assert!(
            order.windows(2).all(|pair| pair[0] <= pair[1]),
            "{op}: {order:?}"
        );
    }
    let server = &report["server"];
    let turns = server["turns"].as_u64().unwrap();
    assert!(
        server["dedup_hits"].as_u64().unwrap() > 0,
        "duplicates were stored once"
    );
    assert!(server["stored_bytes"].as_u64().unwrap() < server["logical_bytes"].as_u64().unwrap());
    assert!(server["disk_bytes"].as_u64().unwrap() > 0);
    assert_eq!(
        report["config"]["mix"],
        "append=60,get_last=20,page=5,range=5,fork=5,get_blob=5"
    );

    // One ack line per acknowledged append, and every append was acknowledged.
    let acks = std::fs::read_to_string(&ack_log).unwrap();
    let lines: Vec<serde_json::Value> = acks
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len() as u64, turns);
    for line in &lines {
        assert!(line["context_id"].as_u64().unwrap() > 0);
        assert!(line["turn_id"].as_u64().unwrap() > 0);
        assert_eq!(line["payload_hash"].as_str().unwrap().len(), 64);
    }
}

#[test]
fn a_missed_objective_exits_3() {
    let output = Command::new(LOADGEN)
        .args(["--spawn-server", "--server-bin"])
        .arg(server_binary())
        .args([
            "--duration",
            "1s",
            "--warmup",
            "0s",
            "--connections",
            "2",
            "--contexts",
            "2",
            "--quiet",
        ])
        .args(["--slo", "append.p50<=1us"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("slo MISSED append.p50<=1us"));
}

/// `--version` prints the name and the crate's version and exits 0 (issue 18 item 7: every
/// binary answers it).
#[test]
fn version_is_printed() {
    let output = Command::new(LOADGEN).arg("--version").output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.starts_with("ctxstore-loadgen ") && text.contains(env!("CARGO_PKG_VERSION")),
        "{text}"
    );
}
