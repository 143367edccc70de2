//! Remote acknowledgements through the binary (decision 0031 §3, issue 47 item 1):
//! - `--ack-after remote`: an append is answered only once the object store holds it. The
//!   server ships every hour only (`--replicate-interval 1h`), so only the waiter's wake can
//!   have shipped it; killed with SIGKILL right after the answer, a restore of the replica
//!   holds every answered turn;
//! - an object store that stops taking PUTs: the append is answered UNCONFIRMED after
//!   `--remote-ack-timeout`, never success, and it is durable here (read back);
//! - ROLE and `/metrics` count what was confirmed and what was not;
//! - `--ack-after remote` without a replica is refused at start, saying why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

use bytes::Bytes;
use ctxstore_client::{ClientConfig, ErrorCode, blocking};
use ctxstore_testsupport::TestServer;

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");

use common::spawn_binary as spawn;

/// The replica at `url` restored into `to`, and a server on it with its client.
fn restored(url: &str, to: &Path) -> (TestServer, blocking::Client) {
    let output = common::restore_cli(SERVER, url, to, &[], &[] as &[(&str, &str)]);
    assert!(output.status.success(), "{output:?}");
    let server = spawn(to, &[]);
    let client = blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    (server, client)
}

#[test]
fn a_remote_append_is_answered_once_the_object_store_holds_it() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    let mut server = spawn(
        &root.path().join("data"),
        &[
            "--replicate-to",
            &url,
            "--replicate-interval",
            "1h",
            // Cuts only when a remote acknowledgement asks: no lease (a lease needs a cut
            // within each of its periods).
            "--replica-lease",
            "off",
            "--ack-after",
            "remote",
        ],
    );
    let client = blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let context = client.create_context().unwrap().context_id;
    let mut answered = Vec::new();
    for i in 0..20u32 {
        let payload = Bytes::from(format!("remote {i}"));
        let appended = client.append(context, None, 0, 0, payload.clone()).unwrap();
        answered.push((appended.turn.turn_id, payload));
    }
    let role = client.role().unwrap();
    assert_eq!(role.ack_after, ctxstore_client::AckAfter::Remote);
    assert_eq!(
        role.remote_acks_total, 20,
        "the appends (a context's creation takes no ACK_AFTER): {role:?}"
    );
    assert!(role.remote_ack_us_p50 > 0 && role.remote_ack_us_p99 >= role.remote_ack_us_p50);
    assert_eq!(role.remote_unconfirmed_total, 0);
    server.kill();

    let (_restored_server, restored) = restored(&url, &root.path().join("restored"));
    for (turn_id, payload) in answered {
        let turn = restored.turn(turn_id).unwrap();
        assert_eq!(restored.blob(turn.payload_hash).unwrap(), payload);
    }
}

#[test]
fn an_object_store_that_takes_no_puts_gets_unconfirmed_never_success() {
    let root = tempfile::tempdir().unwrap();
    let replica = root.path().join("replica");
    let url = format!("file://{}", replica.display());
    let server = spawn(
        &root.path().join("data"),
        &[
            "--replicate-to",
            &url,
            "--replicate-interval",
            "1h",
            // Cuts only when a remote acknowledgement asks: no lease (a lease needs a cut
            // within each of its periods).
            "--replica-lease",
            "off",
            "--ack-after",
            "remote",
            "--remote-ack-timeout",
            "500ms",
        ],
    );
    let client = blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let context = client.create_context().unwrap().context_id;
    // The replica's directory becomes a file: every PUT under it fails (root included).
    std::fs::rename(&replica, root.path().join("replica.moved")).unwrap();
    std::fs::write(&replica, b"not a directory").unwrap();
    let refused = client
        .append(context, None, 0, 0, Bytes::from_static(b"stays here"))
        .expect_err("a remote acknowledgement without the object store");
    assert_eq!(refused.code(), Some(ErrorCode::Unconfirmed), "{refused}");
    assert!(
        refused.to_string().contains("durable on this server"),
        "{refused}"
    );
    let head = client.head(context).unwrap();
    assert_ne!(head.head_turn_id, 0, "the write is durable here");
    let turn = client.turn(head.head_turn_id).unwrap();
    assert_eq!(
        client.blob(turn.payload_hash).unwrap(),
        Bytes::from_static(b"stays here")
    );
    let role = client.role().unwrap();
    assert_eq!(role.remote_unconfirmed_total, 1, "{role:?}");
    assert_eq!(role.remote_waiting, 0);
}

#[test]
fn ack_after_remote_without_a_replica_is_refused_at_start() {
    let data = tempfile::tempdir().unwrap();
    let output = Command::new(SERVER)
        .arg("--data")
        .arg(data.path())
        .args(["--listen", "127.0.0.1:0", "--ack-after", "remote"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(!output.status.success(), "it started: {output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--ack-after remote needs --replicate-to"),
        "{stderr}"
    );
}
