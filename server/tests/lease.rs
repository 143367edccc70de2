//! The lease through the binary (decision 0031 §4–§7, build plan step 4), on `file://`
//! replicas:
//! - a primary with `--replica-lease 4s` whose object store stops taking requests stops
//!   acknowledging writes within the lease (NOT_PRIMARY naming the lease; nothing written),
//!   and acknowledges again once the store is back; ROLE says its lease and how long its
//!   acknowledgements stay open;
//! - a promotion takes the lease from a live primary: the promoted standby waits out the old
//!   lease before it takes writes, and the old primary's next renewal is lost, so it refuses
//!   writes from then on, naming the new holder;
//! - a lease shorter than three replication intervals is refused at start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::{ErrorCode, blocking};

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");

use common::{blocking_client as client, spawn_binary as spawn};

/// Appends until `done` says the outcome is the one awaited (20 s at most): the last outcome.
fn append_until(
    client: &blocking::Client,
    context: u64,
    done: impl Fn(&Result<u64, ctxstore_client::ClientError>) -> bool,
) -> Result<u64, ctxstore_client::ClientError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let outcome = client
            .append(context, None, 0, 0, Bytes::from_static(b"probe"))
            .map(|appended| appended.turn.turn_id);
        if done(&outcome) {
            return outcome;
        }
        assert!(Instant::now() < deadline, "never: {outcome:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_primary_cut_off_from_its_object_store_stops_acknowledging_within_the_lease() {
    let root = tempfile::tempdir().unwrap();
    let replica = root.path().join("replica");
    let url = format!("file://{}", replica.display());
    let server = spawn(
        &root.path().join("data"),
        &[
            "--replicate-to",
            &url,
            "--replicate-interval",
            "100ms",
            "--replica-lease",
            "4s",
        ],
    );
    let client = client(&server);
    let context = client.create_context().unwrap().context_id;
    client
        .append(context, None, 0, 0, Bytes::from_static(b"acknowledged"))
        .unwrap();
    let role = client.role().unwrap();
    assert_eq!(role.lease_ms, 4000, "{role:?}");
    assert!(role.ack_open_ms > 0 && role.ack_open_ms <= 3800, "{role:?}");

    // The object store goes away: renewals and cuts fail.
    let cut_at = Instant::now();
    std::fs::rename(&replica, root.path().join("replica.away")).unwrap();
    std::fs::write(&replica, b"not a directory").unwrap();
    let head = client.head(context).unwrap().head_turn_id;
    let refused = append_until(&client, context, Result::is_err).unwrap_err();
    assert!(
        cut_at.elapsed() < Duration::from_secs(8),
        "acknowledged for {:?} without the object store",
        cut_at.elapsed()
    );
    assert_eq!(refused.code(), Some(ErrorCode::NotPrimary), "{refused}");
    let head_now = client.head(context).unwrap().head_turn_id;
    assert!(head_now >= head, "reads go on");
    assert_eq!(client.role().unwrap().ack_open_ms, 0);

    // Back: renewals and cuts succeed again, and so do writes.
    std::fs::remove_file(&replica).unwrap();
    std::fs::rename(root.path().join("replica.away"), &replica).unwrap();
    append_until(&client, context, Result::is_ok).unwrap();
}

#[test]
fn a_promotion_takes_the_lease_and_the_old_primary_stops_acknowledging() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    let lease = ["--replicate-interval", "100ms", "--replica-lease", "4s"];
    let primary_flags: Vec<&str> = ["--replicate-to", url.as_str()]
        .into_iter()
        .chain(lease)
        .collect();
    let primary = spawn(&root.path().join("primary"), &primary_flags);
    let old = client(&primary);
    let context = old.create_context().unwrap().context_id;
    old.append(context, None, 0, 0, Bytes::from_static(b"before"))
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let standby_flags: Vec<&str> = ["--follow", url.as_str()]
        .into_iter()
        .chain(lease)
        .collect();
    let standby_data = root.path().join("standby");
    let standby = spawn(&standby_data, &standby_flags);
    let new = client(&standby);
    let deadline = Instant::now() + Duration::from_secs(20);
    while new.head(context).map(|head| head.head_turn_id).unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "the standby never applied");
        std::thread::sleep(Duration::from_millis(50));
    }

    let promoted_at = Instant::now();
    let output = Command::new(SERVER)
        .args(["promote", "--data"])
        .arg(&standby_data)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}\n{}", standby.log());
    assert!(
        promoted_at.elapsed() >= Duration::from_millis(4200),
        "promoted after {:?}, before the old lease (4 s + 200 ms) could lapse",
        promoted_at.elapsed()
    );
    new.append(
        context,
        None,
        0,
        0,
        Bytes::from_static(b"on the new primary"),
    )
    .unwrap();
    assert_eq!(new.role().unwrap().lease_ms, 4000);

    // The old primary lost its lease at its next renewal (and is fenced by the seal or the
    // epoch too): it refuses writes, naming the new holder.
    let refused = append_until(&old, context, Result::is_err).unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::NotPrimary), "{refused}");
}

#[test]
fn a_lease_shorter_than_three_intervals_is_refused_at_start() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    let output = Command::new(SERVER)
        .arg("--data")
        .arg(root.path().join("data"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--replicate-to",
            &url,
            "--replicate-interval",
            "1s",
            "--replica-lease",
            "2s",
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(!output.status.success(), "it started: {output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("three --replicate-interval"), "{stderr}");
}
