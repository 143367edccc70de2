//! Automatic promotion through the binary (decision 0031 §7, build plan step 5), on a
//! `file://` replica: one primary (`--ack-after remote --replica-lease 4s`) and two standbys
//! (`--follow --auto-promote --replica-lease 4s`; 4 s rather than the shortest, 2 s, so that a
//! loaded CI machine never lets a renewal slip past the lease while the test writes). The primary is killed with SIGKILL; within
//! the lease and a few polls exactly one standby takes writes, every append the old primary
//! acknowledged (remote) is on it, and the other standby follows the new primary (it applies
//! a turn appended there). Nothing is done by hand.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::{ClientConfig, ServerRole, blocking};

use common::{blocking_client as client, spawn_binary as spawn};

#[test]
fn a_killed_primary_is_replaced_by_exactly_one_standby_and_the_other_follows_it() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    let common = ["--replicate-interval", "100ms", "--replica-lease", "4s"];
    let primary_flags: Vec<&str> = ["--replicate-to", url.as_str(), "--ack-after", "remote"]
        .into_iter()
        .chain(common)
        .collect();
    let mut primary = spawn(&root.path().join("primary"), &primary_flags);
    let writer = client(&primary);
    let context = writer.create_context().unwrap().context_id;
    let mut acknowledged = Vec::new();
    for i in 0..10u32 {
        let payload = Bytes::from(format!("acknowledged remote {i}"));
        let turn = writer
            .append(context, None, 0, 0, payload.clone())
            .unwrap()
            .turn
            .turn_id;
        acknowledged.push((turn, payload));
    }
    let standby_flags: Vec<&str> = ["--follow", url.as_str(), "--auto-promote"]
        .into_iter()
        .chain(common)
        .collect();
    let standbys = [
        spawn(&root.path().join("standby-a"), &standby_flags),
        spawn(&root.path().join("standby-b"), &standby_flags),
    ];
    let clients: Vec<blocking::Client> = standbys.iter().map(client).collect();
    let last = acknowledged.last().unwrap().0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !clients.iter().all(|standby| {
        standby
            .head(context)
            .is_ok_and(|head| head.head_turn_id == last)
    }) {
        assert!(Instant::now() < deadline, "the standbys never caught up");
        std::thread::sleep(Duration::from_millis(50));
    }
    for standby in &clients {
        let role = standby.role().unwrap();
        assert_eq!(role.role, ServerRole::Standby, "{role:?}");
    }

    let killed = Instant::now();
    primary.kill();
    // Exactly one takes writes; the other stays a standby.
    let deadline = Instant::now() + Duration::from_secs(30);
    let winner = loop {
        let primaries: Vec<usize> = clients
            .iter()
            .enumerate()
            .filter(|(_, standby)| {
                standby
                    .role()
                    .is_ok_and(|role| role.role == ServerRole::Primary && role.accepts_writes)
            })
            .map(|(index, _)| index)
            .collect();
        assert!(primaries.len() <= 1, "two primaries: {primaries:?}");
        if let [winner] = primaries[..] {
            break winner;
        }
        assert!(
            Instant::now() < deadline,
            "no standby took over:\n{}\n{}",
            standbys[0].log(),
            standbys[1].log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // The taker waits L + m (4.2 s) from its first sight of the primary's last renewal,
    // which may have been written up to a renewal period (L/3) before the kill.
    let took = killed.elapsed();
    assert!(
        took >= Duration::from_millis(4200 - 1334),
        "taken over after {took:?}, before the last renewal's lease could lapse"
    );
    let new_primary = &clients[winner];
    let role = new_primary.role().unwrap();
    assert_eq!(role.failovers, 1, "{role:?}");
    assert!(
        role.last_failover_ms > 0 && role.last_failover_ms <= took.as_millis() as u64 + 1000,
        "{role:?}"
    );
    assert!(!role.holder.is_empty() && role.lease_ms == 4000, "{role:?}");
    for (turn_id, payload) in &acknowledged {
        let turn = new_primary.turn(*turn_id).unwrap();
        assert_eq!(new_primary.blob(turn.payload_hash).unwrap(), *payload);
    }
    let after = new_primary
        .append(
            context,
            None,
            0,
            0,
            Bytes::from_static(b"on the new primary"),
        )
        .unwrap()
        .turn
        .turn_id;
    let loser = &clients[1 - winner];
    let deadline = Instant::now() + Duration::from_secs(30);
    while loser
        .head(context)
        .map(|head| head.head_turn_id)
        .unwrap_or(0)
        != after
    {
        assert!(
            Instant::now() < deadline,
            "the other standby never followed the new primary:\n{}",
            standbys[1 - winner].log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let role = loser.role().unwrap();
    assert_eq!(role.role, ServerRole::Standby, "{role:?}");
    assert!(!role.accepts_writes);
    let deadline = Instant::now() + Duration::from_secs(10);
    while loser.role().unwrap().failovers != 1 {
        assert!(
            Instant::now() < deadline,
            "the standby never read the new lease"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The partitioned primary (issue 47 item 2): paused (SIGSTOP) for longer than its lease, a
/// standby takes over; resumed (SIGCONT), the old primary never acknowledges a write again —
/// its gate closed while it slept (the boot clock ran), its next renewal is lost — and the
/// writes a client sent it meanwhile are refused, never answered success.
#[test]
fn a_primary_paused_past_its_lease_never_acknowledges_again() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    let common = ["--replicate-interval", "100ms", "--replica-lease", "4s"];
    let primary_flags: Vec<&str> = ["--replicate-to", url.as_str()]
        .into_iter()
        .chain(common)
        .collect();
    let primary = spawn(&root.path().join("primary"), &primary_flags);
    let old = client(&primary);
    let context = old.create_context().unwrap().context_id;
    let before = old
        .append(context, None, 0, 0, Bytes::from_static(b"before the pause"))
        .unwrap()
        .turn
        .turn_id;
    let standby_flags: Vec<&str> = ["--follow", url.as_str(), "--auto-promote"]
        .into_iter()
        .chain(common)
        .collect();
    let standby = spawn(&root.path().join("standby"), &standby_flags);
    let new = client(&standby);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !new
        .head(context)
        .is_ok_and(|head| head.head_turn_id == before)
    {
        assert!(Instant::now() < deadline, "the standby never caught up");
        std::thread::sleep(Duration::from_millis(50));
    }

    primary.pause();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !new
        .role()
        .is_ok_and(|role| role.role == ServerRole::Primary && role.accepts_writes)
    {
        assert!(Instant::now() < deadline, "no takeover:\n{}", standby.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let taken = new
        .append(
            context,
            None,
            0,
            0,
            Bytes::from_static(b"on the new primary"),
        )
        .unwrap()
        .turn
        .turn_id;

    // A write sent to the paused primary, answered only once it runs again.
    let sent = std::thread::spawn({
        let addr = primary.addr.clone();
        move || {
            let paused = blocking::Client::connect(ClientConfig::new(addr));
            paused.map(|paused| {
                paused
                    .append(
                        context,
                        None,
                        0,
                        0,
                        Bytes::from_static(b"sent while paused"),
                    )
                    .map(|appended| appended.turn.turn_id)
            })
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    primary.signal("CONT");
    if let Ok(answer) = sent.join().unwrap() {
        assert!(
            answer.is_err(),
            "the resumed primary acknowledged {answer:?}"
        );
    }
    for _ in 0..20 {
        let refused = old.append(context, None, 0, 0, Bytes::from_static(b"after resuming"));
        assert!(
            refused.is_err(),
            "the resumed primary acknowledged {refused:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let role = old.role().unwrap();
    assert!(!role.accepts_writes, "{role:?}");
    assert_eq!(new.head(context).unwrap().head_turn_id, taken);
}
