//! The streaming workload (issue 32) against a real server: what it counts is right — every
//! acknowledged delta delivered to its reader once, in order, byte for byte; every stream
//! sealed into one turn; the deltas gone from the log after the collection. Never speed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

mod common;

use common::{LOADGEN, report_of, server_binary};

#[test]
fn every_delta_reaches_its_reader_once_and_the_collection_drops_the_deltas() {
    every_delta_reaches_its_reader_once("push");
}

/// The same with readers that long-poll (STREAM_READ) instead of following (STREAM_FOLLOW).
#[test]
fn every_delta_reaches_its_polling_reader_once() {
    every_delta_reaches_its_reader_once("poll");
}

/// The run with readers that read as `--stream-read` says.
fn every_delta_reaches_its_reader_once(read: &str) {
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("report.json");
    let (streams, deltas_per_stream) = (12u64, 40u64);
    let output = Command::new(LOADGEN)
        .args(["--spawn-server", "--server-bin"])
        .arg(server_binary())
        // Compact the log whatever the dead records weigh: this run's are a few hundred KB.
        .arg("--server-arg=--gc-log-dead-bytes-min=0")
        .args(["--workload", "streaming", "--streams", &streams.to_string()])
        .args(["--stream-read", read])
        .args([
            "--stream-rate",
            "50",
            "--stream-deltas",
            &deltas_per_stream.to_string(),
        ])
        .args([
            "--connections",
            "2",
            "--duration",
            "3s",
            "--warmup",
            "1s",
            "--quiet",
        ])
        .args([
            "--slo",
            "delta.errors<=0,delivery.errors<=0,seal.errors<=0,stream_open.errors<=0",
        ])
        .arg("--json")
        .arg(&report_path)
        .output()
        .unwrap();
    let (report, stdout) = report_of(&output, &report_path);
    let streaming = &report["streaming"];
    let count = |key: &str| streaming[key].as_u64().unwrap();
    assert_eq!(report["config"]["streaming"]["stream_read"], read);

    // 12 streams × 50/s × 4 s (warm-up included) = 2,400 deltas scheduled; a loaded machine
    // may fall behind, never ahead.
    let acknowledged = count("deltas_acknowledged");
    assert!(
        (1000..=2400).contains(&acknowledged),
        "{acknowledged} deltas acknowledged\n{stdout}"
    );
    assert_eq!(count("deltas_delivered"), acknowledged, "{stdout}");
    assert_eq!(count("delivery_mismatches"), 0, "{stdout}");
    assert_eq!(count("streams_aborted"), 0, "{stdout}");
    // Each stream sealed after 40 deltas, but a slot's first one (shorter, to stagger the
    // seals) and its last one (at the end): per slot at most two more than its deltas / 40.
    let sealed = count("streams_sealed");
    assert!(
        sealed >= acknowledged / deltas_per_stream
            && sealed <= acknowledged / deltas_per_stream + 2 * streams,
        "{sealed} streams sealed for {acknowledged} deltas\n{stdout}"
    );
    assert_eq!(
        report["server"]["turns"].as_u64().unwrap(),
        sealed,
        "one turn per seal"
    );
    // What the histograms hold is what the counters say was measured (warm-up left out).
    let operations = &report["operations"];
    assert_eq!(
        operations["delta"]["count"].as_u64().unwrap(),
        count("deltas_measured")
    );
    let delivered_measured = operations["delivery"]["count"].as_u64().unwrap();
    assert_eq!(delivered_measured, count("deltas_measured"), "{stdout}");
    assert!(operations["seal"]["count"].as_u64().unwrap() > 0);

    // The deltas live in the log until the collection drops the sealed streams' records and
    // punches their blocks (the file keeps its length: count allocated blocks).
    let log_bytes = |key: &str| streaming[key]["allocated_bytes"].as_u64().unwrap();
    let record_bytes = acknowledged * 128;
    assert!(
        log_bytes("log_after_seal") >= record_bytes,
        "{} B of log for {record_bytes} B of delta records\n{stdout}",
        log_bytes("log_after_seal")
    );
    assert!(
        log_bytes("log_after_gc") + record_bytes / 2 <= log_bytes("log_after_seal"),
        "the collection left {} B of {} B\n{stdout}",
        log_bytes("log_after_gc"),
        log_bytes("log_after_seal")
    );
    assert!(streaming["gc_error"].is_null(), "{stdout}");
    assert!(streaming["server_cpu_us_per_delta"].as_f64().unwrap() > 0.0);
}

#[test]
fn streaming_flags_that_do_not_fit_are_refused() {
    for (args, expected) in [
        (
            vec!["--streams", "200", "--connections", "1"],
            "raise --connections",
        ),
        (vec!["--delta-bytes-min", "0"], "--delta-bytes-min"),
        (vec!["--rate", "100"], "--stream-rate per stream"),
    ] {
        let output = Command::new(LOADGEN)
            .args([
                "--addr",
                "127.0.0.1:1",
                "--workload",
                "streaming",
                "--quiet",
            ])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}
