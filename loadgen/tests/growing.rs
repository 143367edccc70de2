//! The growing-state workload (issue 16) through the real binaries: every context appends its
//! states in order, the store acknowledges exactly the states the workload generates (checked
//! by regenerating them and comparing hashes), and the report carries the bytes figures. No
//! timing and no ratio is asserted: those are benchmarks (benches/growing.sh).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use ctxstore_loadgen::workload::growing::{GrowingConfig, GrowingThread};

mod common;

use common::{LOADGEN, server_binary};

const SEED: u64 = 7;
const CONTEXTS: u64 = 2;
const GROWING: GrowingConfig = GrowingConfig {
    message_bytes: 600,
    steps: 40,
};

/// The states of each context, as the workload generates them: (BLAKE3 hex, length).
fn expected_states() -> Vec<Vec<(String, u64)>> {
    (0..CONTEXTS)
        .map(|index| {
            let mut thread = GrowingThread::new(GROWING, SEED, index);
            (0..GROWING.steps)
                .map(|_| {
                    let state = thread.next_state();
                    (
                        blake3::hash(&state).to_hex().to_string(),
                        state.len() as u64,
                    )
                })
                .collect()
        })
        .collect()
}

fn run_growing(target: &[&str], dir: &Path) -> serde_json::Value {
    let report_path = dir.join("report.json");
    let ack_log = dir.join("acks.jsonl");
    let output = Command::new(LOADGEN)
        .args(target)
        .args(["--workload", "growing", "--growing-steps", "40"])
        .args(["--growing-message-bytes", "600", "--contexts", "2"])
        .args(["--connections", "2", "--seed", "7", "--quiet"])
        .args(["--slo", "append.errors<=0", "--json"])
        .arg(&report_path)
        .arg("--ack-log")
        .arg(&ack_log)
        .output()
        .unwrap();
    let (report, stdout) = common::report_of(&output, &report_path);
    assert!(
        stdout.contains("growing: 2 contexts × 40 steps") && stdout.contains("slo met"),
        "{stdout}"
    );
    check_report(&report, &std::fs::read_to_string(&ack_log).unwrap());
    report
}

/// What every backend's report must say about the run.
fn check_report(report: &serde_json::Value, acks: &str) {
    let expected = expected_states();
    let appends = CONTEXTS * u64::from(GROWING.steps);
    let append = &report["operations"]["append"];
    assert_eq!(append["count"], appends);
    assert_eq!(append["errors"], 0);
    assert_eq!(report["config"]["workload"], "growing");
    assert_eq!(report["config"]["growing_steps"], 40);

    let growing = &report["growing"];
    let field = |name: &str| {
        growing[name]
            .as_u64()
            .unwrap_or_else(|| panic!("growing.{name} missing in {growing}"))
    };
    let logical: u64 = expected.iter().flatten().map(|(_, len)| len).sum();
    let finals: u64 = expected.iter().map(|states| states.last().unwrap().1).sum();
    assert_eq!(field("contexts"), CONTEXTS);
    assert_eq!(field("steps"), 40);
    assert_eq!(field("message_bytes"), 600);
    assert_eq!(field("appends"), appends);
    assert_eq!(
        field("logical_bytes"),
        logical,
        "the states the workload generated"
    );
    assert_eq!(field("final_state_bytes_total"), finals);
    assert!(finals > 0);
    let mean = growing["final_state_bytes_mean"].as_f64().unwrap();
    assert!((mean - finals as f64 / CONTEXTS as f64).abs() < 1e-6);
    // Each state is the previous plus a message of 300..=900 bytes and a comma.
    for states in &expected {
        for pair in states.windows(2) {
            assert!((301..=901).contains(&(pair[1].1 - pair[0].1)), "{pair:?}");
        }
    }

    let disk = field("disk_bytes");
    assert!(disk > 0);
    assert!(field("disk_file_bytes") > 0);
    let ratio = growing["disk_per_final_state"].as_f64().unwrap();
    assert!((ratio - disk as f64 / finals as f64).abs() < 1e-9);
    assert!(!growing["disk_measured"].as_str().unwrap().is_empty());

    let sent = field("bytes_sent");
    let per_append = growing["bytes_sent_per_append"].as_f64().unwrap();
    assert!((per_append - sent as f64 / appends as f64).abs() < 1e-9);
    match growing["bytes_sent_counted"].as_str().unwrap() {
        "payload" => assert_eq!(sent, logical, "payload bytes are the states"),
        "wire" => assert!(sent > 0),
        other => panic!("bytes_sent_counted {other:?}"),
    }

    // The acknowledged states, per context in order, are exactly the generated ones.
    let mut by_context: BTreeMap<u64, Vec<(String, u64)>> = BTreeMap::new();
    for line in acks.lines() {
        let ack: serde_json::Value = serde_json::from_str(line).unwrap();
        by_context
            .entry(ack["context_id"].as_u64().unwrap())
            .or_default()
            .push((
                ack["payload_hash"].as_str().unwrap().to_string(),
                ack["depth"].as_u64().unwrap(),
            ));
    }
    assert_eq!(by_context.len() as u64, CONTEXTS);
    let mut matched: Vec<usize> = Vec::new();
    for (context, acked) in &by_context {
        let index = expected
            .iter()
            .position(|states| states[0].0 == acked[0].0)
            .unwrap_or_else(|| panic!("context {context} starts with an unknown state"));
        let hashes: Vec<&str> = acked.iter().map(|(hash, _)| hash.as_str()).collect();
        let generated: Vec<&str> = expected[index].iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(hashes, generated, "context {context}");
        let depths: Vec<u64> = acked.iter().map(|(_, depth)| *depth).collect();
        assert_eq!(depths, (0..u64::from(GROWING.steps)).collect::<Vec<_>>());
        matched.push(index);
    }
    matched.sort_unstable();
    assert_eq!(matched, vec![0, 1], "each context ran its own thread");
}

#[test]
fn a_growing_run_against_a_spawned_server_reports_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_binary();
    let report = run_growing(
        &["--spawn-server", "--server-bin", server.to_str().unwrap()],
        dir.path(),
    );
    let growing = &report["growing"];
    // The client counts what it writes: chunked appends are measured on the wire.
    assert_eq!(growing["bytes_sent_counted"], "wire");
    // The data directory, both ways: allocated blocks and file lengths.
    assert!(growing["disk_allocated_bytes"].as_u64().unwrap() > 0);
    assert!(
        growing["disk_measured"]
            .as_str()
            .unwrap()
            .ends_with("/data")
    );
    // The server counted every state once.
    assert_eq!(report["server"]["turns"], CONTEXTS * 40);
    assert_eq!(report["server"]["logical_bytes"], growing["logical_bytes"]);
}

#[test]
fn without_client_chunking_every_state_goes_whole_on_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_binary();
    let report = run_growing(
        &[
            "--spawn-server",
            "--server-bin",
            server.to_str().unwrap(),
            "--no-client-chunking",
            "--no-client-compression",
        ],
        dir.path(),
    );
    let growing = &report["growing"];
    assert_eq!(growing["bytes_sent_counted"], "wire");
    // Whole payloads (not compressed either) plus a frame header and the append's fields
    // each: the wire counter sees at least every state's bytes.
    let sent = growing["bytes_sent"].as_u64().unwrap();
    let logical = growing["logical_bytes"].as_u64().unwrap();
    assert!(sent > logical, "sent {sent} < states {logical}");
}

#[test]
fn a_growing_run_on_sqlite_measures_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("peer.sqlite");
    let report = run_growing(
        &["--backend", "sqlite", "--peer", database.to_str().unwrap()],
        dir.path(),
    );
    let growing = &report["growing"];
    assert_eq!(growing["bytes_sent_counted"], "payload");
    assert!(growing["disk_allocated_bytes"].as_u64().unwrap() > 0);
    assert_eq!(report["server"]["logical_bytes"], growing["logical_bytes"]);
}
