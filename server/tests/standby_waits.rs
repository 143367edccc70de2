//! A standby started before its primary has shipped anything waits for the replica instead of
//! exiting (issue 44: started together by compose, systemd or a pod, the standby died with
//! `… holds no replica`): it logs what it waits for, restores and follows once the primary's
//! first restore point ships, and a signal while it waits stops it cleanly (exit 0). On a
//! `file://` replica.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::{ClientConfig, blocking};
use ctxstore_testsupport::{ServerLaunch, wait_ready};

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");
/// Generous for a shared machine; what the tests wait for comes in well under a second.
const LIMIT: Duration = Duration::from_secs(60);

/// A standby on `url` in `root/standby`, its log in `root/standby.log`; not waited for.
fn standby(root: &Path, url: &str) -> Child {
    let log = std::fs::File::create(root.join("standby.log")).unwrap();
    Command::new(SERVER)
        .arg("--data")
        .arg(root.join("standby"))
        .args(["--listen", "127.0.0.1:0", "--ready-file"])
        .arg(root.join("standby.ready"))
        .args(["--follow", url, "--replicate-interval", "100ms"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Until the standby's log says it waits for `what`.
fn waits_for(root: &Path, child: &mut Child, what: &str) {
    let started = Instant::now();
    loop {
        let log = std::fs::read_to_string(root.join("standby.log")).unwrap_or_default();
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

#[test]
fn a_standby_started_first_waits_then_restores_and_follows() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    let mut waiting = standby(root.path(), &url);
    waits_for(root.path(), &mut waiting, "holds no replica");

    // The primary starts; its first write ships.
    let primary = ServerLaunch::new(SERVER)
        .data(&root.path().join("primary"))
        .flags(&[
            "--replicate-to",
            url.as_str(),
            "--replicate-interval",
            "50ms",
        ])
        .keep_log()
        .start();
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

    // The standby restores it, serves it, and follows what comes next.
    let addr = wait_ready(
        &root.path().join("standby.ready"),
        &mut waiting,
        LIMIT,
        Some(&root.path().join("standby.log")),
    )
    .unwrap();
    let reader = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
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
        assert!(started.elapsed() < LIMIT, "the standby never followed");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(reader.turn(turn).is_ok());
    drop(reader);
    waiting.kill().unwrap();
    waiting.wait().unwrap();
}

#[test]
fn a_waiting_standby_stops_cleanly_on_sigterm() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    let mut waiting = standby(root.path(), &url);
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
    let log = std::fs::read_to_string(root.path().join("standby.log")).unwrap();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(!root.path().join("standby").join("ctxstore.meta").exists());
}
