//! A client given several addresses follows the primary across a failover (decision 0031
//! §11, build plan step 7), against the real binary on a `file://` replica: one primary
//! (`--replicate-to --replica-lease 4s --replicate-interval 100ms`) and two `--follow
//! --auto-promote` standbys, every one advertising a decoy address (`--replica-advertise`,
//! ROLE's `primary`). A client given the three addresses connects to the primary; the primary
//! is paused with writes in flight, then killed (SIGKILL). Then:
//! - keyed appends (a turn's key, `Durability::Remote`) are retried on the new primary and
//!   land exactly once: read back, each key is in the context once, in order;
//! - the unkeyed append in flight at the kill answers `ClientError::OutcomeUnknown`, never a
//!   silent retry (its payload is in the context at most once); the same append from a
//!   client with `Idempotency::Auto` carries a key made here, is sent again, lands once;
//! - a read sent after the kill is answered by the new primary;
//! - the decoy, named by ROLE but in no list, is never connected to.
//!
//! Also: a single address connects as before (no ROLE asked of a scripted version-4 server
//! that answers nothing else), and a list with no primary is `ClientError::NoPrimary` within
//! the failover timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::{
    ClientConfig, ClientError, Durability, ErrorCode, Idempotency, NewTurn, ServerRole, TurnInfo,
    blocking,
};
use ctxstore_protocol::{AdminRequest, Request, Response};
use ctxstore_testsupport::{ScriptedServer, ServerLaunch, TestServer, server_binary};

const KEYED: usize = 30;

fn spawn(data: &Path, flags: &[&str]) -> TestServer {
    ServerLaunch::new(server_binary())
        .data(data)
        .flags(flags)
        .keep_log()
        .start()
}

fn one(server: &TestServer) -> blocking::Client {
    blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap()
}

/// Waits until `server` has the context's head at `turn`.
fn caught_up(server: &TestServer, context: u64, turn: u64) {
    let client = one(server);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !client
        .head(context)
        .is_ok_and(|head| head.head_turn_id == turn)
    {
        assert!(
            Instant::now() < deadline,
            "never caught up:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_client_of_three_addresses_follows_the_primary_through_a_kill() {
    let decoy = TcpListener::bind("127.0.0.1:0").unwrap();
    decoy.set_nonblocking(true).unwrap();
    let decoy_addr = decoy.local_addr().unwrap().to_string();
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    let common = [
        "--replicate-interval",
        "100ms",
        "--replica-lease",
        "4s",
        "--replica-advertise",
        decoy_addr.as_str(),
    ];
    let primary_flags: Vec<&str> = ["--replicate-to", url.as_str()]
        .into_iter()
        .chain(common)
        .collect();
    let mut primary = spawn(&root.path().join("primary"), &primary_flags);
    // A standby is ready once it restored the replica: give the primary something to ship.
    let first = blocking::Client::connect(
        ClientConfig::new(primary.addr.clone()).with_durability(Durability::Remote),
    )
    .unwrap();
    let context = first.create_context().unwrap().context_id;
    first
        .append(context, None, 0, 0, Bytes::from_static(b"before the list"))
        .unwrap();
    drop(first);
    let standby_flags: Vec<&str> = ["--follow", url.as_str(), "--auto-promote"]
        .into_iter()
        .chain(common)
        .collect();
    let standbys = [
        spawn(&root.path().join("standby-a"), &standby_flags),
        spawn(&root.path().join("standby-b"), &standby_flags),
    ];
    // The standbys first in the list: the client still finds the primary.
    let addrs = [&standbys[0].addr, &standbys[1].addr, &primary.addr];
    let config = ClientConfig::from_addrs(addrs)
        .with_durability(Durability::Remote)
        .with_failover_timeout(Duration::from_secs(30));
    let client = blocking::Client::connect(config.clone()).unwrap();
    // `Idempotency::Auto`: its plain appends carry keys made here.
    let auto = blocking::Client::connect(config.with_idempotency(Idempotency::Auto)).unwrap();
    let role = client.role().unwrap();
    assert_eq!(role.role, ServerRole::Primary, "{role:?}");
    assert_eq!(role.primary, decoy_addr, "ROLE names the decoy");
    let keyed = |i: usize| {
        NewTurn::bytes(Bytes::from(format!("keyed {i}"))).key(Bytes::from(format!("key-{i:03}")))
    };
    let mut last = 0;
    for i in 0..KEYED / 3 {
        last = client
            .append_turn(context, None, keyed(i))
            .unwrap()
            .turn
            .turn
            .turn_id;
    }
    for standby in &standbys {
        caught_up(standby, context, last);
    }

    let next = AtomicUsize::new(KEYED / 3);
    let (unkeyed, read) = std::thread::scope(|scope| {
        primary.pause();
        let writer = scope.spawn(|| {
            while next.load(Ordering::SeqCst) < KEYED {
                let i = next.fetch_add(1, Ordering::SeqCst);
                client.append_turn(context, None, keyed(i)).unwrap();
            }
        });
        let unkeyed = scope.spawn(|| {
            client.append(
                context,
                None,
                0,
                0,
                Bytes::from_static(b"unkeyed in flight"),
            )
        });
        let auto_keyed = scope.spawn(|| {
            auto.append(
                context,
                None,
                0,
                0,
                Bytes::from_static(b"auto-keyed in flight"),
            )
        });
        std::thread::sleep(Duration::from_millis(300));
        primary.kill();
        let read = client.head(context);
        writer.join().unwrap();
        let auto_keyed = auto_keyed.join().unwrap();
        assert!(
            auto_keyed.is_ok(),
            "an auto-keyed append is sent again: {auto_keyed:?}"
        );
        (unkeyed.join().unwrap(), read)
    });
    let unkeyed = unkeyed.unwrap_err();
    assert!(
        matches!(unkeyed, ClientError::OutcomeUnknown { .. }),
        "{unkeyed:?}"
    );
    assert_eq!(unkeyed.name(), "OUTCOME_UNKNOWN");
    assert!(read.is_ok(), "the read after the kill: {read:?}");
    let role = client.role().unwrap();
    assert_eq!(role.role, ServerRole::Primary, "{role:?}");
    assert!(role.epoch > 1, "a new primary: {role:?}");

    let mut turns = client.turn_log_all(context, &[], None, true).unwrap();
    turns.reverse();
    let keys: Vec<String> = turns
        .iter()
        .filter_map(|turn| turn.key.as_ref())
        .map(|key| String::from_utf8_lossy(key).into_owned())
        .filter(|key| !key.starts_with(Idempotency::AUTO_KEY_PREFIX))
        .collect();
    let expected: Vec<String> = (0..KEYED).map(|i| format!("key-{i:03}")).collect();
    assert_eq!(keys, expected, "each key once, in order");
    let unkeyed_copies = turns
        .iter()
        .filter(|turn| turn.key.is_none())
        .filter(|turn| turn.turn.payload.as_deref() == Some(b"unkeyed in flight".as_slice()))
        .count();
    assert!(
        unkeyed_copies <= 1,
        "the unkeyed append landed {unkeyed_copies} times"
    );
    let auto_copies: Vec<&TurnInfo> = turns
        .iter()
        .filter(|turn| turn.turn.payload.as_deref() == Some(b"auto-keyed in flight".as_slice()))
        .collect();
    assert_eq!(
        auto_copies.len(),
        1,
        "the auto-keyed append lands exactly once"
    );
    let auto_key = auto_copies[0].key.as_ref().unwrap();
    assert!(auto_key.starts_with(Idempotency::AUTO_KEY_PREFIX.as_bytes()));
    assert_eq!(auto_key.len(), Idempotency::AUTO_KEY_PREFIX.len() + 32);
    assert!(
        matches!(decoy.accept(), Err(error) if error.kind() == std::io::ErrorKind::WouldBlock),
        "the decoy named by ROLE was connected to"
    );
}

#[test]
fn one_address_asks_no_role_and_a_list_without_a_primary_is_no_primary() {
    // A version-4 server that answers only HELLO: one address connects without ROLE.
    let (addr, seen) = ScriptedServer::new(4).serve(|_| None);
    let client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    assert_eq!(client.protocol_version(), 4);
    let seen = seen.lock().unwrap().clone();
    assert!(
        !seen
            .iter()
            .any(|request| matches!(request, Request::Admin(AdminRequest::Role(_)))),
        "{seen:?}"
    );

    // Two standbys-to-be that answer ROLE with NOT_PRIMARY: no primary, within the timeout.
    let refuse = |_: &Request| {
        Some(Response::Error {
            code: ErrorCode::NotPrimary,
            detail: 0,
            message: "scripted standby".into(),
        })
    };
    let (a, _) = ScriptedServer::new(4).serve(refuse);
    let (b, _) = ScriptedServer::new(4).serve(refuse);
    let started = Instant::now();
    let config =
        ClientConfig::new(format!("{a}, {b}")).with_failover_timeout(Duration::from_millis(500));
    assert_eq!(config.addrs(), vec![a.clone(), b.clone()]);
    let error = blocking::Client::connect(config).unwrap_err();
    assert!(matches!(error, ClientError::NoPrimary { .. }), "{error:?}");
    assert_eq!(error.name(), "NO_PRIMARY");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// TENANT_LIST is version 5's: a version-4 server is never sent it, and the client says what
/// version it needs (the table's check every request goes through).
#[test]
fn tenants_on_a_version_4_server_is_unsupported_and_nothing_is_sent() {
    let (addr, seen) = ScriptedServer::new(4).serve(|_| None);
    let client = blocking::Client::connect(ClientConfig::new(addr)).unwrap();
    let refused = client.tenants().unwrap_err();
    assert!(
        matches!(
            refused,
            ClientError::Unsupported {
                request: "TENANT_LIST",
                needed: 5,
                version: 4
            }
        ),
        "{refused}"
    );
    let seen = seen.lock().unwrap().clone();
    assert!(
        !seen
            .iter()
            .any(|request| matches!(request, Request::Admin(AdminRequest::TenantList(_)))),
        "TENANT_LIST was sent to a version-4 server"
    );
}
