//! `ctxstore stats` and replication (issue 31 item 7) against a real `ctxstore-server`: a
//! replicating server's `--json` line holds a `replication` object with every field
//! docs/operations.md#replication documents (role, state, what shipped, the lag, the backlog,
//! failures by kind); the text output shows them as `replication.…` lines; a server that does
//! not replicate says `off`; a server older than protocol version 3 is not asked (`null`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ctxstore_protocol::admin;
use ctxstore_protocol::{AdminRequest, AdminResponse, Request, Response, StatsWire};
use ctxstore_testsupport::{ScriptedServer, TestServer};
use serde_json::{Value, json};

mod common;

use common::{At, Cli, keys};

/// The fields of `stats --json`'s `replication` object (docs/operations.md#replication):
/// REPLICATION_STATS' and, from a version-4 server, ROLE's.
const REPLICATION_FIELDS: [&str; 27] = [
    "accepts_writes",
    "ack_after",
    "lease_holder",
    "lease_ms",
    "lease_age_ms",
    "ack_open_ms",
    "failovers",
    "last_failover_ms",
    "remote_acks",
    "role",
    "state",
    "reason",
    "promoting",
    "target",
    "primary",
    "epoch",
    "generation",
    "seq",
    "records",
    "records_unix_ms",
    "lag_ms",
    "lag_bytes",
    "objects_total",
    "bytes_total",
    "last_success_unix_ms",
    "failures",
    "backlog",
];

fn sorted(mut names: Vec<&str>) -> Vec<&str> {
    names.sort_unstable();
    names
}

#[test]
fn stats_of_a_replicating_server_say_what_shipped() {
    let replica = tempfile::tempdir().unwrap();
    let url = format!("file://{}", replica.path().display());
    let server = TestServer::start_with(
        None,
        &[
            "--replicate-to",
            &url,
            "--replicate-interval",
            "50ms",
            "--replica-lease",
            "4s",
        ],
    );
    let context = server.one(&["ctx", "create"], b"")["context_id"].clone();
    let context = context.to_string();
    server.one(&["append", &context], b"a turn worth shipping");

    // Shipped within a few intervals: the creation's record and the append's.
    let started = Instant::now();
    let replication = loop {
        let stats = server.one(&["stats"], b"");
        let replication = stats["replication"].clone();
        if replication["records"] == json!(2) && replication["lag_bytes"] == json!(0) {
            break replication;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never shipped: {stats}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        sorted(keys(&replication)),
        sorted(REPLICATION_FIELDS.to_vec()),
        "{replication}"
    );
    assert_eq!(replication["role"], "primary");
    assert_eq!(replication["state"], "shipping");
    assert_eq!(replication["reason"], "");
    assert_eq!(replication["promoting"], false);
    assert_eq!(replication["target"], json!(url));
    assert_eq!(replication["epoch"], 1);
    assert_eq!(replication["generation"], 1);
    assert!(replication["seq"].as_u64().unwrap() >= 1, "{replication}");
    assert!(replication["records_unix_ms"].as_u64().unwrap() > 0);
    assert!(replication["last_success_unix_ms"].as_u64().unwrap() > 0);
    assert!(replication["objects_total"].as_u64().unwrap() >= 1);
    assert!(replication["bytes_total"].as_u64().unwrap() >= 2 * 128);
    assert_eq!(replication["lag_ms"], 0);
    assert_eq!(
        replication["failures"]["store"], 0,
        "every kind: {replication}"
    );
    assert_eq!(replication["failures"]["fenced"], 0, "{replication}");
    assert_eq!(
        replication["backlog"],
        json!({ "objects": 0, "bytes": 0, "segment_bytes_max": 64 << 20 })
    );
    // ROLE's: the lease this primary holds, its gate open, no failover yet.
    assert_eq!(replication["accepts_writes"], true, "{replication}");
    assert_eq!(replication["ack_after"], "local");
    assert_eq!(replication["lease_ms"], 4000);
    assert!(
        replication["lease_holder"]
            .as_str()
            .is_some_and(|holder| holder.contains(':')),
        "{replication}"
    );
    assert!(
        replication["lease_age_ms"].as_u64().unwrap() < 4000,
        "{replication}"
    );
    assert!(
        replication["ack_open_ms"].as_u64().unwrap() > 0,
        "{replication}"
    );
    assert_eq!(replication["failovers"], 0);
    assert_eq!(replication["remote_acks"]["total"], 0);

    // The text output: one aligned line per figure, nested ones by their dotted path, the
    // failure kinds that never happened left out.
    let output = server.run(&["stats"], b"");
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let line = |name: &str| {
        text.lines()
            .find_map(|line| {
                let (field, value) = line.split_once(' ')?;
                (field == name).then(|| value.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no {name} line in\n{text}"))
    };
    assert_eq!(line("replication.role"), "primary");
    assert_eq!(line("replication.state"), "shipping");
    assert_eq!(line("replication.target"), url);
    assert_eq!(line("replication.records"), "2");
    assert_eq!(line("replication.backlog.segment_bytes_max"), "67108864");
    assert_eq!(line("turns"), "1");
    assert!(!text.contains("replication.failures."), "{text}");
}

#[test]
fn stats_of_a_server_that_does_not_replicate_say_off() {
    let server = TestServer::start(None);
    let replication = server.one(&["stats"], b"")["replication"].clone();
    assert_eq!(replication["role"], "off", "{replication}");
    assert_eq!(replication["state"], "off", "{replication}");
    assert_eq!(replication["target"], "", "{replication}");
    assert_eq!(replication["records"], 0, "{replication}");
}

#[test]
fn a_server_older_than_version_3_is_not_asked_and_its_replication_is_null() {
    let (addr, _) = ScriptedServer::new(2).serve(|request| match request {
        Request::Admin(AdminRequest::StatsEx(admin::StatsEx)) => Some(Response::Admin(
            AdminResponse::ExtendedStats(admin::ExtendedStats {
                stats: Box::new(StatsWire {
                    turns: 7,
                    ..StatsWire::default()
                }),
                gc: Default::default(),
            }),
        )),
        // Anything else (REPLICATION_STATS included) would go unanswered: the test would
        // time out instead of passing.
        _ => None,
    });
    let stats = At(&addr).one(&["--timeout", "5s", "stats"], b"");
    assert_eq!(stats["turns"], json!(7));
    assert_eq!(stats["replication"], Value::Null, "{stats}");
}
