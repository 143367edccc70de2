//! A standby started before its primary has shipped anything waits for the replica instead of
//! exiting (issue 44: started together by compose, systemd or a pod, the standby died with
//! `… holds no replica`). While it waits it logs what it waits for (no replica at all, then a
//! generation that shipped nothing yet), answers as an empty read-only store whose
//! REPLICATION_STATS (`ctxstore stats`) and `/metrics` say `waiting`; once the primary's first
//! restore point ships it restores, serves it on the same address (and `/metrics` on the same
//! one) and follows; its scratch store is gone. A signal while it waits stops it cleanly
//! (exit 0). On a `file://` replica, and on SeaweedFS when `.ci/run` names it
//! (`CTXSTORE_S3_TEST_ENDPOINT`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::{
    ClientConfig, ErrorCode, ReplicationRole, ReplicationState, ReplicationStats, blocking,
};
use ctxstore_testsupport::{ServerLaunch, wait_ready};

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");
/// Generous for a shared machine; what the tests wait for comes in well under a second.
const LIMIT: Duration = Duration::from_secs(60);

fn free_addr() -> String {
    // Outside the ephemeral range: nothing else is handed it before the server binds it.
    format!("127.0.0.1:{}", ctxstore_testsupport::fixed_port())
}

/// A standby on `url` in `root/standby` listening on `listen` (and `/metrics` on `metrics`),
/// its log in `root/standby.log`, its temporary directory `root/tmp`; not waited for.
fn standby(root: &Path, url: &str, env: &[(String, String)], listen: &str, metrics: &str) -> Child {
    let log = std::fs::File::create(root.join("standby.log")).unwrap();
    std::fs::create_dir_all(root.join("tmp")).unwrap();
    Command::new(SERVER)
        .arg("--data")
        .arg(root.join("standby"))
        .args([
            "--listen",
            listen,
            "--metrics-listen",
            metrics,
            "--ready-file",
        ])
        .arg(root.join("standby.ready"))
        .args(["--follow", url, "--replicate-interval", "100ms"])
        .envs(env.iter().map(|(key, value)| (key, value)))
        .env("RUST_LOG", "info")
        .env("TMPDIR", root.join("tmp"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn log_of(root: &Path) -> String {
    std::fs::read_to_string(root.join("standby.log")).unwrap_or_default()
}

/// Until the standby's log says it waits for `what`.
fn waits_for(root: &Path, child: &mut Child, what: &str) {
    let started = Instant::now();
    loop {
        let log = log_of(root);
        if log.contains("standby waiting") && log.contains(what) {
            return;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the standby exited instead of waiting:\n{log}"
        );
        assert!(started.elapsed() < LIMIT, "never said it waits:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `GET /metrics` at `addr`.
fn metrics(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

/// The states `ctxstore_replication_state` sets to 1.
fn states_on(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("ctxstore_replication_state{state=\""))
        .filter_map(|rest| rest.split_once("\"} "))
        .filter(|(_, value)| value.trim() == "1")
        .map(|(state, _)| state.to_string())
        .collect()
}

/// Asks the waiting standby until its REPLICATION_STATS' reason holds `what`.
fn reason_says(client: &blocking::Client, what: &str, root: &Path) -> ReplicationStats {
    let started = Instant::now();
    loop {
        let stats = client.replication_stats().unwrap();
        if stats.reason.contains(what) {
            return stats;
        }
        assert!(
            started.elapsed() < LIMIT,
            "never said it waits for {what:?}: {stats:?}\n{}",
            log_of(root)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn a_standby_started_first_waits_then_restores_and_follows(url: &str, env: &[(String, String)]) {
    let root = tempfile::tempdir().unwrap();
    let (listen, metrics_listen) = (free_addr(), free_addr());
    let mut waiting = standby(root.path(), url, env, &listen, &metrics_listen);
    waits_for(root.path(), &mut waiting, "holds no replica");
    assert!(log_of(root.path()).contains(url), "{}", log_of(root.path()));

    // While it waits it answers: an empty, read-only store that says what it waits for.
    let early = blocking::Client::connect(ClientConfig::new(listen.clone())).unwrap();
    let stats = reason_says(&early, "holds no replica", root.path());
    assert_eq!(stats.role, ReplicationRole::Standby, "{stats:?}");
    assert_eq!(stats.state, ReplicationState::Waiting, "{stats:?}");
    assert_eq!(stats.state.name(), "waiting");
    assert_eq!(stats.target, url);
    assert_eq!(early.stats().unwrap().turns, 0);
    let refused = early.create_context().unwrap_err();
    // A version-4 client is told to write elsewhere (decision 0031); version 3 read READ_ONLY.
    assert_eq!(refused.code(), Some(ErrorCode::NotPrimary), "{refused:?}");
    assert_eq!(states_on(&metrics(&metrics_listen)), ["waiting"]);
    assert!(
        !root.path().join("standby.ready").exists(),
        "ready before it restored"
    );

    // The primary starts: a replica with a first generation that has shipped nothing yet.
    let primary = ServerLaunch::new(SERVER)
        .data(&root.path().join("primary"))
        .flags(&["--replicate-to", url, "--replicate-interval", "50ms"])
        .envs(env)
        .keep_log()
        .start();
    let stats = reason_says(&early, "has shipped nothing yet", root.path());
    assert_eq!(stats.state, ReplicationState::Waiting, "{stats:?}");
    waits_for(
        root.path(),
        &mut waiting,
        "generation 1 has shipped nothing yet",
    );

    // Its first write ships: the standby restores it, serves it, and follows what comes next.
    let writer = blocking::Client::connect(ClientConfig::new(primary.addr.clone())).unwrap();
    let context = writer.create_context().unwrap().context_id;
    let turn = writer
        .append(
            context,
            None,
            0,
            0,
            Bytes::from_static(b"shipped before the standby"),
        )
        .unwrap()
        .turn
        .turn_id;
    let addr = wait_ready(
        &root.path().join("standby.ready"),
        &mut waiting,
        LIMIT,
        Some(&root.path().join("standby.log")),
    )
    .unwrap();
    assert_eq!(addr, listen, "served on the address it waited on");
    let reader = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    let restored = reader.last(context, 10, true).unwrap();
    assert_eq!(restored.turns.len(), 1, "{restored:?}");
    assert_eq!(restored.turns[0].turn_id, turn);
    assert_eq!(
        restored.turns[0].payload.as_deref(),
        Some(&b"shipped before the standby"[..])
    );
    let next = writer
        .append(
            context,
            None,
            0,
            0,
            Bytes::from_static(b"shipped while it follows"),
        )
        .unwrap()
        .turn
        .turn_id;
    let started = Instant::now();
    while reader.turn(next).is_err() {
        assert!(
            started.elapsed() < LIMIT,
            "the standby never followed:\n{}",
            log_of(root.path())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = reader.replication_stats().unwrap();
    assert_eq!(stats.state, ReplicationState::Following, "{stats:?}");
    assert_eq!(stats.reason, "", "{stats:?}");
    assert_eq!(states_on(&metrics(&metrics_listen)), ["following"]);
    // The empty store it answered from while waiting is gone.
    let left: Vec<_> = std::fs::read_dir(root.path().join("tmp"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    drop((early, reader));
    waiting.kill().unwrap();
    waiting.wait().unwrap();
}

#[test]
fn a_standby_started_first_on_a_directory_waits_then_restores_and_follows() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    a_standby_started_first_waits_then_restores_and_follows(&url, &[]);
}

#[test]
fn a_standby_started_first_on_seaweedfs_waits_then_restores_and_follows() {
    let Some((url, env)) = common::seaweedfs("standby-waits") else {
        return;
    };
    a_standby_started_first_waits_then_restores_and_follows(&url, &env);
}

#[test]
fn a_waiting_standby_stops_cleanly_on_sigterm() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    let listen = free_addr();
    let mut waiting = standby(root.path(), &url, &[], &listen, &free_addr());
    waits_for(root.path(), &mut waiting, "holds no replica");
    let pid = rustix::process::Pid::from_raw(waiting.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = waiting.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < LIMIT,
            "a waiting standby ignored SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = log_of(root.path());
    assert!(status.success(), "{status:?}\n{log}");
    assert!(!root.path().join("standby").join("ctxstore.meta").exists());
    // Nothing listens any more, and the empty store it answered from is gone.
    assert!(std::net::TcpStream::connect(&listen).is_err(), "{log}");
    let left: Vec<_> = std::fs::read_dir(root.path().join("tmp"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
