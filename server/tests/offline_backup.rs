//! The offline backup through the real binary (issue 18 item 5): `ctxstore-server backup
//! --data SRC --to DIR` copies a stopped store into a store of its own that passes `verify` and
//! serves every acknowledged turn; a store a server is running on is refused (its lock).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use bytes::Bytes;
use ctxstore_client::{ClientConfig, blocking};

mod common;
use common::{incompressible, server_process};

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");

use ctxstore_testsupport::{ServerLaunch, TestServer};

/// A server on `data`, its address once it is ready.
fn spawn_on(data: &Path) -> (TestServer, String) {
    spawn_with(data, &[])
}

/// `spawn_on` with more flags.
fn spawn_with(data: &Path, flags: &[&str]) -> (TestServer, String) {
    let server = ServerLaunch::new(SERVER).data(data).flags(flags).start();
    let addr = server.addr.clone();
    (server, addr)
}

fn offline_backup(data: &Path, to: &Path) -> Output {
    Command::new(SERVER)
        .arg("backup")
        .arg("--data")
        .arg(data)
        .arg("--to")
        .arg(to)
        .output()
        .unwrap()
}

/// The value of `field` in the backup's `field value` lines.
fn field<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} line in\n{stdout}"))
}

#[test]
fn an_offline_backup_of_a_stopped_store_verifies_and_serves_every_turn() {
    let mut server = server_process(&[]);
    let client = blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let context = client.create_context().unwrap().context_id;
    // Small payloads, a repeat (deduplicated) and one over the chunk threshold (a manifest and
    // its chunks), so that the copy holds every kind of record.
    let payloads: Vec<Bytes> = vec![
        Bytes::from_static(b"first turn"),
        Bytes::from_static(b"second turn"),
        Bytes::from_static(b"first turn"),
        incompressible(64 * 1024, 7),
        Bytes::from_static(b"last turn"),
    ];
    let mut acked = Vec::new();
    for payload in &payloads {
        let appended = client.append(context, None, 0, 0, payload.clone()).unwrap();
        acked.push(appended.turn.turn_id);
    }
    drop(client);
    server.signal("TERM");
    let status = server
        .wait_exit(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("still running 60 s after SIGTERM\n{}", server.log()));
    assert!(status.success(), "{status:?}\n{}", server.log());

    let data = server.dir.path().join("data");
    let target = tempfile::tempdir().unwrap();
    let copy = target.path().join("copy");
    let output = offline_backup(&data, &copy);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(Path::new(field(&stdout, "backup_dir")), copy, "{stdout}");
    assert_eq!(field(&stdout, "turns"), acked.len().to_string(), "{stdout}");
    let blobs: u64 = field(&stdout, "blobs").parse().unwrap();
    // Four distinct payloads; the large one adds its chunks.
    assert!(blobs >= 4, "{stdout}");
    let bytes: u64 = field(&stdout, "bytes")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(bytes > 0, "{stdout}");
    field(&stdout, "duration_ms").parse::<u64>().unwrap();

    // The copy is a store of its own: verify accepts it ...
    let verified = Command::new(SERVER)
        .arg("verify")
        .arg("--data")
        .arg(&copy)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&verified.stdout);
    assert!(verified.status.success(), "{report}");
    assert!(report.contains("verdict   OK"), "{report}");

    // ... and a server on it serves every acknowledged turn, byte for byte.
    let (server, addr) = spawn_on(&copy);
    let client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    let page = client.last(context, 100, true).unwrap();
    // Oldest first, as a page lists them.
    let stored: Vec<u64> = page.turns.iter().map(|turn| turn.turn_id).collect();
    assert_eq!(stored, acked);
    for (turn, payload) in page.turns.iter().zip(&payloads) {
        assert!(
            turn.payload.as_ref() == Some(payload),
            "turn {} read back other bytes ({} expected)",
            turn.turn_id,
            payload.len()
        );
    }
    drop(client);
    stop(server);
}

/// A store a server is running on is refused (the data directory's lock), non-zero and naming
/// the lock, and nothing is written to the destination.
#[test]
fn an_offline_backup_of_a_store_a_server_is_running_on_is_refused() {
    let server = server_process(&[]);
    let client = blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let context = client.create_context().unwrap().context_id;
    client
        .append(context, None, 0, 0, Bytes::from_static(b"a turn"))
        .unwrap();
    let target = tempfile::tempdir().unwrap();
    let copy = target.path().join("copy");
    let output = offline_backup(&server.dir.path().join("data"), &copy);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("locked"), "{stderr}");
    assert!(!copy.exists(), "{stderr}");
    // The server still serves.
    assert_eq!(client.last(context, 10, false).unwrap().turns.len(), 1);
}

/// Stops a server with SIGTERM and checks it exited cleanly.
fn stop(mut server: TestServer) {
    server.signal("TERM");
    assert!(server.child.wait().unwrap().success());
}

fn verify_ok(data: &Path) {
    let verified = Command::new(SERVER)
        .arg("verify")
        .arg("--data")
        .arg(data)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&verified.stdout);
    assert!(
        verified.status.success(),
        "verify {}: {report}",
        data.display()
    );
}

/// Small packs (several sealed ones from a few hundred KiB), collections only on request, and
/// every pack with anything dead compacted.
const SMALL_PACKS: &[&str] = &[
    "--pack-bytes-max",
    "131072",
    "--shard-batch-bytes-max",
    "131072",
    "--blob-bytes-max",
    "65536",
    "--frame-bytes-max",
    "262144",
    "--gc-interval",
    "off",
    "--gc-pack-dead-percent",
    "1",
];

/// Deletes `doomed` on a server on `data` and collects; the collection rewrites packs.
fn delete_and_collect(data: &Path, doomed: u64) {
    let (server, addr) = spawn_with(data, SMALL_PACKS);
    let client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    client.delete_context(doomed).unwrap();
    let report = client.gc().unwrap();
    assert!(report.packs_compacted >= 1, "{report:?}");
    drop(client);
    stop(server);
}

/// Every turn of `context` reads back from a server on `data` as `payloads`.
fn check_turns(data: &Path, context: u64, payloads: &[Bytes]) {
    let (server, addr) = spawn_with(data, SMALL_PACKS);
    let client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    let page = client.last(context, 1_000, true).unwrap();
    let read: Vec<&Bytes> = page
        .turns
        .iter()
        .filter_map(|t| t.payload.as_ref())
        .collect();
    assert_eq!(read.len(), payloads.len());
    assert!(
        read.iter().zip(payloads).all(|(a, b)| *a == b),
        "payloads differ"
    );
    drop(client);
    stop(server);
}

/// Issue 29 item 1 through the binary: the offline backup, on the store's own file system,
/// hard-links sealed packs; a collection on either side leaves the other whole (decision
/// 0017). The copy is private: 0700 directories and 0600 files, as the store's (item 4).
#[test]
fn an_offline_backup_on_the_same_file_system_survives_collections_on_either_side() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let copy = root.path().join("copy");
    let (server, addr) = spawn_with(&data, SMALL_PACKS);
    let client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    let kept = client.create_context().unwrap().context_id;
    let doomed = client.create_context().unwrap().context_id;
    let mut payloads = Vec::new();
    for i in 0..40u64 {
        let payload = incompressible(8 * 1024, i + 1);
        client.append(kept, None, 0, 0, payload.clone()).unwrap();
        payloads.push(payload);
        client
            .append(doomed, None, 0, 0, incompressible(8 * 1024, 1_000 + i))
            .unwrap();
    }
    drop(client);
    stop(server);

    let output = offline_backup(&data, &copy);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{stdout}");
    // "bytes N (M hard-linked)"
    let linked: u64 = field(&stdout, "bytes")
        .split_once('(')
        .and_then(|(_, linked)| linked.split(' ').next()?.parse().ok())
        .unwrap();
    assert!(
        linked > 0,
        "sealed packs are hard-linked on one file system: {stdout}"
    );
    let mut pending = vec![copy.clone()];
    while let Some(dir) = pending.pop() {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
                // A hard-linked pack keeps the store's own mode, 0600 too.
                assert_eq!(mode, 0o600, "{}", path.display());
            }
        }
    }

    // A server on the copy collects: the store's packs stay whole.
    delete_and_collect(&copy, doomed);
    verify_ok(&data);
    check_turns(&data, kept, &payloads);
    // And the other way round.
    delete_and_collect(&data, doomed);
    verify_ok(&copy);
    check_turns(&copy, kept, &payloads);
}
