//! The `ctxstore-server` binary: graceful stop on SIGTERM, `verify`, refusing to listen in
//! public without a token.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::{ClientConfig, blocking};

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");

// The child is returned to the caller, which waits for it (clippy cannot see across that).
#[allow(clippy::zombie_processes)]
fn spawn_server(dir: &Path, flags: &[&str]) -> (Child, String) {
    let ready = dir.join("ready");
    let _ = std::fs::remove_file(&ready);
    let mut child = Command::new(SERVER)
        .args([
            "--data",
            dir.join("data").to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--ready-file",
        ])
        .arg(&ready)
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(addr) = std::fs::read_to_string(&ready)
            && addr.ends_with('\n')
        {
            return (child, addr.trim().to_string());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("server did not become ready");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn sigterm_finishes_in_flight_work_and_exits_zero_then_verify_passes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = spawn_server(dir.path(), &[]);
    let client = blocking::Client::connect(ClientConfig::new(addr.clone())).unwrap();
    let context = client.create_context().unwrap().context_id;
    // Appends in flight from another thread while the signal arrives: each either completes
    // (and is then durable) or fails; none is lost after an acknowledgement.
    let pipelined = std::thread::spawn(move || {
        let mut acked = Vec::new();
        for index in 0..200u64 {
            match client.append(context, None, 0, 0, Bytes::from(format!("turn {index}"))) {
                Ok(appended) => acked.push(appended.turn.turn_id),
                Err(_) => break,
            }
        }
        acked
    });
    std::thread::sleep(Duration::from_millis(30));
    signal(&child, "TERM");
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
    let acked = pipelined.join().unwrap();
    assert!(!acked.is_empty());

    let output = Command::new(SERVER)
        .args([
            "verify",
            "--data",
            dir.path().join("data").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("verdict   OK"), "{stdout}");

    // Every acknowledged append is there after a restart.
    let (mut child, addr) = spawn_server(dir.path(), &[]);
    let client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    let page = client.last(context, 1000, false).unwrap();
    let stored: Vec<u64> = page.turns.iter().map(|turn| turn.turn_id).collect();
    assert!(stored.len() >= acked.len());
    assert_eq!(&stored[..acked.len()], &acked[..]);
    signal(&child, "INT");
    assert!(child.wait().unwrap().success());
}

#[test]
fn verify_names_damage_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = spawn_server(dir.path(), &[]);
    let client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    let context = client.create_context().unwrap().context_id;
    for index in 0..10 {
        client
            .append(context, None, 0, 0, Bytes::from(format!("turn {index}")))
            .unwrap();
    }
    drop(client);
    signal(&child, "TERM");
    assert!(child.wait().unwrap().success());
    let log = dir.path().join("data/turns.log");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[5 * 128 + 40] ^= 0x10;
    std::fs::write(&log, bytes).unwrap();
    let output = Command::new(SERVER)
        .args([
            "verify",
            "--data",
            dir.path().join("data").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success());
    assert!(
        stdout.contains("PROBLEM") && stdout.contains("at offset 640"),
        "{stdout}"
    );
    // And the server refuses to start on it, naming file and offset.
    let output = Command::new(SERVER)
        .args([
            "--data",
            dir.path().join("data").to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("turns.log at offset 640"), "{stderr}");
}

#[test]
fn refuses_a_public_listen_without_a_token_and_teaches_with_help() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(SERVER)
        .args([
            "--data",
            dir.path().to_str().unwrap(),
            "--listen",
            "0.0.0.0:0",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("without a token"));

    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let ready = dir.path().join("ready");
    let mut child = Command::new(SERVER)
        .args([
            "--data",
            dir.path().join("data").to_str().unwrap(),
            "--listen",
            "0.0.0.0:0",
            "--token-file",
        ])
        .arg(&token)
        .arg("--ready-file")
        .arg(&ready)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&ready).is_ok_and(|addr| addr.ends_with('\n')) {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let port = std::fs::read_to_string(&ready)
        .unwrap()
        .trim()
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    let config = ClientConfig::new(format!("127.0.0.1:{port}")).with_token(Some("s3cret".into()));
    blocking::Client::connect(config).unwrap().ping(3).unwrap();
    signal(&child, "TERM");
    assert!(child.wait().unwrap().success());

    let help = Command::new(SERVER).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for expected in [
        "--data",
        "--listen",
        "--token-file",
        "--network-cores",
        "--placement",
        "verify",
        "Examples",
    ] {
        assert!(help.contains(expected), "--help lacks {expected}");
    }
}

#[test]
fn an_existing_store_keeps_its_shard_count_without_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let start = |extra: &[&str]| {
        let ready = dir.path().join("ready");
        let _ = std::fs::remove_file(&ready);
        let mut child = Command::new(SERVER)
            .args([
                "--data",
                data.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
                "--ready-file",
            ])
            .arg(&ready)
            .args(extra)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(&ready).is_ok_and(|addr| addr.ends_with('\n')) {
            if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
                let _ = child.kill();
                let _ = child.wait();
                panic!("server did not start with {extra:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        signal(&child, "TERM");
        assert!(child.wait().unwrap().success());
    };
    start(&["--shards", "3"]);
    assert!(data.join("blobs/shard-02").exists());
    start(&[]);
    let output = Command::new(SERVER)
        .args([
            "--data",
            data.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--shards",
            "2",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("3 blob shards"));
}

/// Every limit an operator may need to change is a flag: the server starts with non-default
/// values, serves, and refuses values outside their documented range, naming the limit.
#[test]
fn limits_and_group_commit_settings_are_flags() {
    let dir = tempfile::tempdir().unwrap();
    let limits = [
        "--frame-bytes-max=1048576",
        "--blob-bytes-max=1048512",
        "--requests-in-flight-max=16",
        "--connections-max=8",
        "--read-turns-max=100",
        "--has-blobs-max=10",
        "--idle-timeout=30s",
        "--frame-timeout=2s",
        "--response-bytes-max=2097152",
        "--payload-cache-bytes=1048576",
        "--queue-depth-max=64",
        "--sequencer-batch-records-max=32",
        "--shard-batch-records-max=8",
        "--shard-batch-bytes-max=4194304",
        "--batch-wait-us-max=50",
    ];
    let (mut child, addr) = spawn_server(dir.path(), &limits);
    let client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    assert_eq!(client.server_limits().read_turns_max, 100);
    assert_eq!(client.server_limits().has_blobs_max, 10);
    let context = client.create_context().unwrap().context_id;
    for index in 0..20u8 {
        let payload = Bytes::from(vec![index; 150_000]);
        client.append(context, None, 1, 0, payload).unwrap();
    }
    // 20 payloads of 150 kB against 2 MiB per page: one page cannot hold them all.
    let page = client.last(context, 20, true).unwrap();
    assert!(page.turns.len() < 20 && !page.turns.is_empty());
    signal(&child, "TERM");
    assert!(child.wait().unwrap().success());

    for (bad, named) in [
        ("--response-bytes-max=1", "response_bytes_max"),
        ("--shard-batch-records-max=0", "shard_batch_records_max"),
        ("--queue-depth-max=0", "queue_depth_max"),
        (
            "--sequencer-batch-records-max=0",
            "sequencer_batch_records_max",
        ),
    ] {
        let output = Command::new(SERVER)
            .args(["--data", dir.path().join("data").to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0", bad])
            .output()
            .unwrap();
        assert!(!output.status.success(), "{bad} was accepted");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(named), "{bad}: {stderr}");
    }
}
