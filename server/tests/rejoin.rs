//! An old primary rejoins as a standby of the new one (decision 0031 §8, build plan step 6),
//! through the binary on a `file://` replica, leases at 4 s as the other failover tests:
//!
//! - paused (SIGSTOP) past its lease while an `--auto-promote` standby takes over, then
//!   resumed: it refuses writes with NOT_PRIMARY naming the new primary, then (default
//!   `--rejoin standby`) sets its store aside under `DIR/.diverged/` — where `verify` passes
//!   on it — and follows the new primary on the same address: ROLE says standby and a write
//!   on the new primary reads back on it;
//! - killed (SIGKILL) after a failover and restarted with `--follow URL --auto-promote`: it
//!   starts as a standby (its directory set aside, not refused), follows the new primary and
//!   never takes an epoch; with `--rejoin off` the same start is refused, nothing moved;
//! - killed after a failover and restarted as it was (`--replicate-to`, as systemd would): it
//!   watches the lease, finds it renewed, and starts as a plain standby instead of refusing,
//!   without taking an epoch.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::{ClientConfig, ErrorCode, ServerRole, blocking};
use ctxstore_testsupport::{TestServer, verified};

use common::{blocking_client as client, spawn_binary as spawn};

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");
const LEASE: [&str; 4] = ["--replicate-interval", "100ms", "--replica-lease", "4s"];

fn flags<'a>(first: &[&'a str]) -> Vec<&'a str> {
    first.iter().copied().chain(LEASE).collect()
}

/// Waits (30 s at most) until `done`, saying `what` and the logs otherwise.
fn wait_until(what: &str, servers: &[&TestServer], mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what}:\n{}",
            servers
                .iter()
                .map(|server| server.log())
                .collect::<Vec<_>>()
                .join("\n---\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A new connection each time: a rejoining server restarts, closing the ones it had.
fn connect(server: &TestServer) -> Option<blocking::Client> {
    blocking::Client::connect(ClientConfig::new(server.addr.clone())).ok()
}

/// `server` is a standby whose head of `context` is `turn`.
fn follows(server: &TestServer, context: u64, turn: u64) -> bool {
    connect(server).is_some_and(|standby| {
        standby
            .role()
            .is_ok_and(|role| role.role == ServerRole::Standby && !role.accepts_writes)
            && standby
                .head(context)
                .is_ok_and(|head| head.head_turn_id == turn)
    })
}

fn takes_writes(server: &blocking::Client) -> bool {
    server
        .role()
        .is_ok_and(|role| role.role == ServerRole::Primary && role.accepts_writes)
}

fn append(client: &blocking::Client, context: u64, text: &'static str) -> u64 {
    client
        .append(context, None, 0, 0, Bytes::from_static(text.as_bytes()))
        .unwrap()
        .turn
        .turn_id
}

/// A loopback address free now.
fn free_addr() -> String {
    // Outside the ephemeral range: nothing else is handed it before the server binds it.
    format!("127.0.0.1:{}", ctxstore_testsupport::fixed_port())
}

/// One scrape of `GET /metrics` at `addr`.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// The stores set aside in `data`.
fn set_aside(data: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(data.join(".diverged")) {
        Ok(entries) => entries.map(|entry| entry.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// The epoch objects of the `file://` replica in `replica`.
fn epochs(replica: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(replica.join("epoch"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_primary_paused_past_its_lease_rejoins_as_a_standby_of_the_new_one() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    let old_data = root.path().join("primary");
    let metrics_addr = free_addr();
    // Shipping every second (the most a 4 s lease allows), so that the write just before the
    // pause is likely acknowledged `local` and not shipped: a diverged record.
    let primary = spawn(
        &old_data,
        &[
            "--replicate-to",
            url.as_str(),
            "--metrics-listen",
            metrics_addr.as_str(),
            "--replicate-interval",
            "1s",
            "--replica-lease",
            "4s",
        ],
    );
    let old = client(&primary);
    let context = old.create_context().unwrap().context_id;
    let before = append(&old, context, "before the pause");
    let standby = spawn(
        &root.path().join("standby"),
        &flags(&["--follow", url.as_str(), "--auto-promote"]),
    );
    let new = client(&standby);
    wait_until("the standby never caught up", &[&standby], || {
        new.head(context)
            .is_ok_and(|head| head.head_turn_id == before)
    });

    let last_old = append(&old, context, LAST_ON_THE_OLD_PRIMARY);
    primary.pause();
    wait_until("no takeover", &[&standby], || takes_writes(&new));
    let taken = append(&new, context, "on the new primary");
    primary.signal("CONT");

    // Fenced first: writes refused, naming the new primary.
    wait_until(
        "the old primary never refused a write naming the new one",
        &[&primary],
        || match old.append(context, None, 0, 0, Bytes::from_static(b"refused")) {
            Ok(appended) => panic!("the resumed primary acknowledged {appended:?}"),
            Err(error) => {
                error.code() == Some(ErrorCode::NotPrimary)
                    && error.to_string().contains(&standby.addr)
            }
        },
    );
    // Then a standby of the new primary, on the same address.
    wait_until(
        "the old primary never followed the new one",
        &[&primary, &standby],
        || follows(&primary, context, taken),
    );
    let after = append(&new, context, "after the rejoin");
    wait_until(
        "the rejoined standby does not apply the new primary's writes",
        &[&primary],
        || follows(&primary, context, after),
    );
    let rejoined = connect(&primary).unwrap();
    let role = rejoined.role().unwrap();
    assert_eq!(role.epoch, new.role().unwrap().epoch, "{role:?}");
    let refused = rejoined
        .append(context, None, 0, 0, Bytes::from_static(b"on the standby"))
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::NotPrimary), "{refused}");
    assert!(refused.to_string().contains(&standby.addr), "{refused}");
    assert!(takes_writes(&new), "the new primary still takes writes");

    // Its old store is set aside, whole, never deleted, and counted (on the same metrics
    // address as before).
    let aside = set_aside(&old_data);
    assert_eq!(aside.len(), 1, "{aside:?}\n{}", primary.log());
    let metrics = scrape(&metrics_addr);
    assert!(
        metrics.contains("ctxstore_replication_rejoins_total 1")
            && metrics.contains("ctxstore_replication_diverged_records "),
        "{metrics}"
    );
    verified(Path::new(SERVER), &aside[0]);
    assert!(primary.log().contains("set aside"), "{}", primary.log());
    // The write acknowledged just before the pause is in the new lineage, or it is only in the
    // set-aside store (which a server started on it reads) and counted as diverged.
    let shipped = new.turn(last_old).is_ok_and(|turn| {
        new.blob(turn.payload_hash)
            .is_ok_and(|payload| payload == LAST_ON_THE_OLD_PRIMARY.as_bytes())
    });
    if !shipped {
        assert!(
            !metrics.contains("ctxstore_replication_diverged_records 0"),
            "{metrics}"
        );
        let reader = spawn(&aside[0], &[]);
        let inspect = client(&reader);
        let turn = inspect.turn(last_old).unwrap();
        assert_eq!(
            inspect.blob(turn.payload_hash).unwrap(),
            LAST_ON_THE_OLD_PRIMARY.as_bytes()
        );
    }
}

const LAST_ON_THE_OLD_PRIMARY: &str = "acknowledged local just before the pause";

#[test]
fn a_killed_primary_restarted_as_a_standby_follows_and_never_takes_an_epoch() {
    let root = tempfile::tempdir().unwrap();
    let replica = root.path().join("replica");
    let url = format!("file://{}", replica.display());
    let old_data = root.path().join("primary");
    let mut primary = spawn(&old_data, &flags(&["--replicate-to", url.as_str()]));
    let old = client(&primary);
    let context = old.create_context().unwrap().context_id;
    let before = append(&old, context, "before the kill");
    let standby_flags = flags(&["--follow", url.as_str(), "--auto-promote"]);
    let standby = spawn(&root.path().join("standby"), &standby_flags);
    let new = client(&standby);
    wait_until("the standby never caught up", &[&standby], || {
        new.head(context)
            .is_ok_and(|head| head.head_turn_id == before)
    });

    drop(old);
    primary.kill();
    wait_until("no takeover", &[&standby], || takes_writes(&new));
    let taken = append(&new, context, "on the new primary");
    let epochs_after_failover = epochs(&replica);

    // `--rejoin off` keeps the refusal: the directory is left as it is for an operator.
    let refused = std::process::Command::new(SERVER)
        .arg("--data")
        .arg(&old_data)
        .args(["--listen", "127.0.0.1:0", "--rejoin", "off"])
        .args(&standby_flags)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("shipped to this replica itself"),
        "{refused:?}"
    );
    assert!(set_aside(&old_data).is_empty());

    // Restarted as systemd would, but as a standby: its directory shipped itself.
    let restarted = spawn(&old_data, &standby_flags);
    wait_until(
        "the restarted old primary never followed the new one",
        &[&restarted, &standby],
        || follows(&restarted, context, taken),
    );
    let after = append(&new, context, "after the restart");
    wait_until(
        "the restarted standby does not apply the new primary's writes",
        &[&restarted],
        || follows(&restarted, context, after),
    );
    // Longer than a lease renewal period: an --auto-promote standby of a live primary waits.
    std::thread::sleep(Duration::from_secs(2));
    assert!(takes_writes(&new), "the new primary still takes writes");
    assert!(follows(&restarted, context, after), "{}", restarted.log());
    assert_eq!(
        epochs(&replica),
        epochs_after_failover,
        "the restarted standby took an epoch:\n{}",
        restarted.log()
    );

    let aside = set_aside(&old_data);
    assert_eq!(aside.len(), 1, "{aside:?}\n{}", restarted.log());
    verified(Path::new(SERVER), &aside[0]);
}

#[test]
fn a_killed_primary_restarted_as_it_was_on_a_held_prefix_starts_as_a_standby() {
    let root = tempfile::tempdir().unwrap();
    let replica = root.path().join("replica");
    let url = format!("file://{}", replica.display());
    let old_data = root.path().join("primary");
    let primary_flags = flags(&["--replicate-to", url.as_str()]);
    let mut primary = spawn(&old_data, &primary_flags);
    let old = client(&primary);
    let context = old.create_context().unwrap().context_id;
    let before = append(&old, context, "before the kill");
    let standby = spawn(
        &root.path().join("standby"),
        &flags(&["--follow", url.as_str(), "--auto-promote"]),
    );
    let new = client(&standby);
    wait_until("the standby never caught up", &[&standby], || {
        new.head(context)
            .is_ok_and(|head| head.head_turn_id == before)
    });
    drop(old);
    primary.kill();
    wait_until("no takeover", &[&standby], || takes_writes(&new));
    let taken = append(&new, context, "on the new primary");
    let epochs_after_failover = epochs(&replica);

    // The same command line: it watches the lease for L + m, sees it renewed, and follows.
    let restarted = spawn(&old_data, &primary_flags);
    wait_until(
        "the restarted old primary never followed the new one",
        &[&restarted, &standby],
        || follows(&restarted, context, taken),
    );
    let after = append(&new, context, "after the restart");
    wait_until(
        "the restarted standby does not apply the new primary's writes",
        &[&restarted],
        || follows(&restarted, context, after),
    );
    assert!(takes_writes(&new), "the new primary still takes writes");
    assert_eq!(
        epochs(&replica),
        epochs_after_failover,
        "the restarted server took an epoch:\n{}",
        restarted.log()
    );
    let aside = set_aside(&old_data);
    assert_eq!(aside.len(), 1, "{aside:?}\n{}", restarted.log());
    verified(Path::new(SERVER), &aside[0]);
}
