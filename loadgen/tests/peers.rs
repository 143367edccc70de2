//! The peer backends of the side-by-side benchmark run the same mixed workload without an
//! error (and Redis Streams the streaming workload). SQLite runs in-process, always. PostgreSQL and Redis need their servers: with
//! `CTXSTORE_PEER_TESTS=1` (set by .ci/run, which installs them) they must be there and the
//! tests run; without it they are skipped with a notice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::report_of;

const LOADGEN: &str = env!("CARGO_BIN_EXE_ctxstore-loadgen");
const MIX: &str = "append=60,get_last=20,page=5,range=5,fork=5,get_blob=5";
const NO_ERRORS: &str = "append.errors<=0,get_last.errors<=0,page.errors<=0,range.errors<=0,fork.errors<=0,get_blob.errors<=0";

fn run_workload(backend: &str, peer: &str, dir: &Path) -> serde_json::Value {
    let report = dir.join(format!("{backend}.json"));
    let output = Command::new(LOADGEN)
        .args([
            "--backend",
            backend,
            "--peer",
            peer,
            "--duration",
            "2s",
            "--warmup",
            "0s",
        ])
        .args([
            "--connections",
            "4",
            "--contexts",
            "8",
            "--prefill",
            "8",
            "--read-turns",
            "8",
            "--quiet",
        ])
        .args([
            "--mix",
            MIX,
            "--dup-ratio",
            "0.2",
            "--payload-bytes",
            "2048",
            "--slo",
            NO_ERRORS,
            "--json",
        ])
        .arg(&report)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{backend}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    for op in ["append", "get_last", "page", "range", "fork", "get_blob"] {
        assert!(
            report["operations"][op]["count"].as_u64().unwrap() > 0,
            "{backend}: {op} did not run"
        );
    }
    let turns = report["server"]["turns"].as_u64().unwrap();
    assert!(turns >= 64, "{backend}: {turns} turns");
    report
}

fn peers_enabled(what: &str) -> bool {
    if std::env::var("CTXSTORE_PEER_TESTS").is_ok_and(|value| value == "1") {
        return true;
    }
    eprintln!(
        "skipping the {what} peer test: set CTXSTORE_PEER_TESTS=1 with {what} installed (.ci/run does)"
    );
    false
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A redis-server on `port` keeping its AOF in `dir` (`appendonly yes`, this `appendfsync`),
/// listening when this returns.
fn start_redis(dir: &Path, port: u16, appendfsync: &str) -> std::process::Child {
    let server = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--appendonly", "yes", "--appendfsync", appendfsync])
        .args(["--save", "", "--dir"])
        .arg(dir)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server (apt-get install redis-server)");
    wait_for_port(port);
    server
}

#[test]
fn sqlite_runs_the_mixed_workload() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_workload(
        "sqlite",
        dir.path().join("peer.sqlite").to_str().unwrap(),
        dir.path(),
    );
    assert!(report["server"]["disk_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn redis_runs_the_mixed_workload() {
    if !peers_enabled("redis-server") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = start_redis(dir.path(), port, "always");
    let report = run_workload("redis", &format!("redis://127.0.0.1:{port}"), dir.path());
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        report["server"]["disk_bytes"].as_u64().unwrap() > 0,
        "appendonly file grew"
    );
}

/// Redis Streams, the streaming workload's peer (issue 32): every delta XADDed is delivered
/// to its XREAD BLOCK reader once, byte for byte; each stream is sealed into its answer; the
/// collection (stream keys deleted, AOF rewritten) shrinks the AOF directory.
#[test]
fn redis_streams_run_the_streaming_workload() {
    if !peers_enabled("redis-server") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = start_redis(dir.path(), port, "everysec");
    let report_path = dir.path().join("streaming.json");
    let output = Command::new(LOADGEN)
        .args([
            "--backend",
            "redis",
            "--peer",
            &format!("redis://127.0.0.1:{port}"),
        ])
        .args([
            "--workload",
            "streaming",
            "--streams",
            "8",
            "--stream-rate",
            "50",
        ])
        .args([
            "--stream-deltas",
            "30",
            "--connections",
            "2",
            "--duration",
            "2s",
        ])
        .args(["--warmup", "0s", "--quiet", "--json"])
        .arg(&report_path)
        .args(["--slo", "delta.errors<=0,delivery.errors<=0,seal.errors<=0"])
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let (report, stdout) = report_of(&output, &report_path);
    let streaming = &report["streaming"];
    let count = |key: &str| streaming[key].as_u64().unwrap();
    let acknowledged = count("deltas_acknowledged");
    assert!((300..=800).contains(&acknowledged), "{stdout}");
    assert_eq!(count("deltas_delivered"), acknowledged, "{stdout}");
    assert_eq!(count("delivery_mismatches"), 0, "{stdout}");
    assert!(count("streams_sealed") >= acknowledged / 30, "{stdout}");
    assert_eq!(streaming["redis_appendfsync"], "everysec");
    let disk = |key: &str| streaming[key]["bytes"].as_u64().unwrap();
    assert!(
        disk("disk_after_gc") < disk("disk_after_seal"),
        "the AOF rewrite left {} B of {} B\n{stdout}",
        disk("disk_after_gc"),
        disk("disk_after_seal")
    );
}

#[test]
fn postgres_runs_the_mixed_workload() {
    if !peers_enabled("postgresql") {
        return;
    }
    let bin = std::fs::read_dir("/usr/lib/postgresql")
        .expect("postgresql (apt-get install postgresql)")
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .max()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("pg");
    std::fs::create_dir(&data).unwrap();
    // PostgreSQL refuses to run as root: as root, run it as the postgres user.
    let as_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.starts_with(b"0"));
    let run = |program: &str, args: &[&str]| {
        let mut command = if as_root {
            let mut command = Command::new("runuser");
            command
                .args(["-u", "postgres", "--"])
                .arg(bin.join(program));
            command
        } else {
            Command::new(bin.join(program))
        };
        let status = command.args(args).stdout(Stdio::null()).status().unwrap();
        assert!(status.success(), "{program} {args:?}");
    };
    if as_root {
        Command::new("chmod")
            .arg("755")
            .arg(dir.path())
            .status()
            .unwrap();
        Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&data)
            .status()
            .unwrap();
    }
    let port = free_port();
    let data_arg = data.join("data");
    let data_arg = data_arg.to_str().unwrap();
    run("initdb", &["-D", data_arg, "-A", "trust", "-U", "bench"]);
    let options = format!(
        "-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={}",
        data.display()
    );
    let log = data.join("log");
    run(
        "pg_ctl",
        &[
            "-D",
            data_arg,
            "-l",
            log.to_str().unwrap(),
            "-w",
            "-o",
            &options,
            "start",
        ],
    );
    let report = std::panic::catch_unwind(|| {
        run_workload(
            "postgres",
            &format!("postgres://bench@127.0.0.1:{port}/postgres"),
            dir.path(),
        )
    });
    run("pg_ctl", &["-D", data_arg, "-m", "fast", "stop"]);
    let report = report.unwrap();
    assert!(report["server"]["stored_bytes"].as_u64().unwrap() > 0);
}
