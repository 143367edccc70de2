//! Replication through the binary (issue 31): `ctxstore-server --replicate-to` ships while it
//! serves and once more at SIGTERM; `ctxstore-server restore` builds a store that verifies and
//! serves every acknowledged turn; a prefix that is not a replica is refused at start, naming
//! what it found; the metrics endpoint and REPLICATION_STATS report replication (the same
//! figures), a server that does not replicate says `off`. On a `file://` replica here, and on
//! SeaweedFS when `.ci/run` names it (`CTXSTORE_S3_TEST_ENDPOINT`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use bytes::Bytes;
use ctxstore_client::{ClientConfig, ReplicationRole, ReplicationState, blocking};

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");

use ctxstore_testsupport::{ServerLaunch, TestServer};

/// A server on `data` with more `flags` (and `env`), its log kept; its address once it is
/// ready.
fn spawn(data: &Path, flags: &[&str], env: &[(String, String)]) -> (TestServer, String) {
    let server = ServerLaunch::new(SERVER)
        .data(data)
        .flags(flags)
        .envs(env)
        .keep_log()
        .start();
    let addr = server.addr.clone();
    (server, addr)
}

fn stop(mut server: TestServer) {
    server.signal("TERM");
    assert!(server.child.wait().unwrap().success(), "{}", server.log());
}

fn restore(url: &str, to: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    common::restore_cli(SERVER, url, to, extra, env)
}

use common::output_field as field;

/// Ships a store to `url` through the binary, restores it, and checks every turn.
fn ships_and_restores(url: &str, env: &[(&str, &str)]) {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    // Outside the ephemeral range: nothing else is handed it before the server binds it.
    let metrics_addr = format!("127.0.0.1:{}", ctxstore_testsupport::fixed_port());
    let mut flags = vec![
        "--replicate-to",
        url,
        "--replicate-interval",
        "50ms",
        "--metrics-listen",
        metrics_addr.as_str(),
    ];
    if env.is_empty() {
        flags.push("--gc-interval");
        flags.push("off");
    }
    let mut command_env: Vec<(String, String)> = env
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    command_env.push(("RUST_LOG".into(), "info".into()));
    let (child, addr) = spawn(&data, &flags, &command_env);
    let client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    let context = client.create_context().unwrap().context_id;
    let mut acked = Vec::new();
    for i in 0..60u32 {
        let payload: Vec<u8> = (0..9000u32).map(|j| (i * 131 + j * 7) as u8).collect();
        let appended = client
            .append(context, None, 0, 0, Bytes::from(payload.clone()))
            .unwrap();
        acked.push((appended.turn.turn_id, payload));
    }
    // The metrics endpoint reports replication.
    std::thread::sleep(Duration::from_millis(300));
    let mut stream = std::net::TcpStream::connect(&metrics_addr).unwrap();
    use std::io::{Read, Write};
    write!(stream, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut metrics = String::new();
    stream.read_to_string(&mut metrics).unwrap();
    assert!(
        metrics.contains("ctxstore_replication_state{state=\"shipping\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ctxstore_replication_objects_total"),
        "{metrics}"
    );
    // REPLICATION_STATS: the same figures, once everything acknowledged has shipped.
    let started = std::time::Instant::now();
    let stats = loop {
        let stats = client.replication_stats().unwrap();
        if stats.lag_bytes == 0 && stats.records >= 61 {
            break stats;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never shipped everything: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(stats.role, ReplicationRole::Primary, "{stats:?}");
    assert_eq!(stats.state, ReplicationState::Shipping, "{stats:?}");
    assert_eq!(stats.target, url, "{stats:?}");
    assert!(stats.epoch >= 1 && stats.generation >= 1, "{stats:?}");
    assert!(
        stats.seq >= 1 && stats.objects_total >= stats.seq,
        "{stats:?}"
    );
    // At least every turn record's 128-byte slot went up (the payloads compress well).
    assert!(stats.bytes_total > 61 * 128, "{stats:?}");
    assert!(stats.records_unix_ms > 0 && stats.last_success_unix_ms > 0);
    assert_eq!((stats.lag_ms, stats.backlog_objects), (0, 0), "{stats:?}");
    assert_eq!(stats.segment_bytes_max, 64 << 20, "the default, {stats:?}");
    assert!(stats.reason.is_empty() && !stats.promoting, "{stats:?}");
    assert!(
        stats.failures.iter().any(|(kind, _)| kind == "store"),
        "every kind is reported: {stats:?}"
    );
    // One creation and 60 appends: one record each.
    assert_eq!(stats.records, 61, "{stats:?}");
    drop(client);
    // SIGTERM ships what is durable once more before the server exits.
    stop(child);

    let target = root.path().join("restored");
    let output = restore(url, &target, &[], env);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("objects"), "progress on stderr: {stderr}");
    assert_eq!(field(&stdout, "turns"), "60", "{stdout}");
    field(&stdout, "generation").parse::<u32>().unwrap();
    let (child, addr) = spawn(&target, &[], &[]);
    let client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    // A server that does not replicate says so.
    let off = client.replication_stats().unwrap();
    assert_eq!(
        (off.role, off.state, off.records, off.target.as_str()),
        (ReplicationRole::Off, ReplicationState::Off, 0, ""),
        "{off:?}"
    );
    let page = client.last(context, 100, true).unwrap();
    let read: Vec<(u64, Vec<u8>)> = page
        .turns
        .iter()
        .map(|turn| (turn.turn_id, turn.payload.as_ref().unwrap().to_vec()))
        .collect();
    assert_eq!(read, acked);
    drop(client);
    stop(child);
}

#[test]
fn a_server_ships_to_a_directory_and_restore_serves_every_acknowledged_turn() {
    let replica = tempfile::tempdir().unwrap();
    let url = format!("file://{}", replica.path().display());
    ships_and_restores(&url, &[]);
}

#[test]
fn a_server_ships_to_seaweedfs_and_restore_serves_every_acknowledged_turn() {
    let Some((url, env)) = common::seaweedfs("server") else {
        return;
    };
    let env: Vec<(&str, &str)> = env
        .iter()
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect();
    ships_and_restores(&url, &env);
}

#[test]
fn a_prefix_that_is_not_a_replica_is_refused_at_start_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let replica = root.path().join("replica");
    std::fs::create_dir_all(&replica).unwrap();
    std::fs::write(replica.join("holiday-photos.tar"), b"not ours").unwrap();
    let url = format!("file://{}", replica.display());
    let output = Command::new(SERVER)
        .arg("--data")
        .arg(root.path().join("data"))
        .args(["--listen", "127.0.0.1:0", "--replicate-to", &url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("holiday-photos.tar"), "{stderr}");
    assert!(stderr.contains("not a ctxstore replica"), "{stderr}");
    // A restore from it is refused too, and writes no store.
    let target = root.path().join("restored");
    let output = restore(&url, &target, &[], &[]);
    assert!(!output.status.success());
    assert!(!target.join("ctxstore.meta").exists());
}

/// kill -9 of a primary whose last acknowledged writes had not shipped (issue 46 item 8): the
/// store `ctxstore-server restore` builds from its replica says where its ids start, and hands
/// out no TurnID or ContextID the dead primary acknowledged.
fn killed_primary_ids(url: &str, env: &[(&str, &str)]) {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let spawn_env: Vec<(String, String)> = env
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    let (mut child, addr) = spawn(&data, &["--replicate-to", url], &spawn_env);
    let client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    let mut contexts = Vec::new();
    let mut turns = Vec::new();
    let mut write = |client: &blocking::Client, count: u32| {
        for i in 0..count {
            let context = client.create_context().unwrap().context_id;
            contexts.push(context);
            for j in 0..3u32 {
                let payload = Bytes::from(format!("context {i} turn {j}").into_bytes());
                turns.push(
                    client
                        .append(context, None, 0, 0, payload)
                        .unwrap()
                        .turn
                        .turn_id,
                );
            }
        }
    };
    write(&client, 3);
    // Shipped (the default interval is a second), then more that will not be.
    let started = std::time::Instant::now();
    while client.replication_stats().unwrap().records < 12 {
        assert!(started.elapsed() < Duration::from_secs(30), "never shipped");
        std::thread::sleep(Duration::from_millis(20));
    }
    write(&client, 4);
    drop(client);
    child.signal("KILL");
    let _ = child.child.wait();

    let target = root.path().join("restored");
    let output = restore(url, &target, &[], env);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let next_turn: u64 = field(&stdout, "next_turn_id").parse().unwrap();
    let next_context: u64 = field(&stdout, "next_context_id").parse().unwrap();
    assert!(
        turns.iter().all(|turn| *turn < next_turn),
        "{stdout}\nacknowledged {turns:?}"
    );
    assert!(
        contexts.iter().all(|context| *context < next_context),
        "{stdout}"
    );
    let (child, addr) = spawn(&target, &[], &[]);
    let client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    let context = client.create_context().unwrap().context_id;
    let turn = client
        .append(
            context,
            None,
            0,
            0,
            Bytes::from_static(b"after the restore"),
        )
        .unwrap()
        .turn
        .turn_id;
    assert!(!contexts.contains(&context) && context >= next_context);
    assert!(!turns.contains(&turn) && turn >= next_turn);
    drop(client);
    stop(child);
}

#[test]
fn a_killed_primary_restores_to_a_store_that_hands_out_none_of_its_ids() {
    let replica = tempfile::tempdir().unwrap();
    let url = format!("file://{}", replica.path().display());
    killed_primary_ids(&url, &[]);
    if let Some((url, env)) = common::seaweedfs("server-ids") {
        let env: Vec<(&str, &str)> = env
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect();
        killed_primary_ids(&url, &env);
    }
}
