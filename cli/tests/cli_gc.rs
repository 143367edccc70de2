//! The CLI contract of issue 15 item 8 for garbage collection against a real
//! `ctxstore-server`: `gc` prints `turns_dead, blobs_dead, bytes_reclaimed, duration_ms` (and
//! `packs_compacted, live_bytes, dead_bytes`), a collected turn is NOT_FOUND (exit 3), `stats`
//! gains `live_bytes, dead_bytes, gc_runs, bytes_reclaimed_total`; GC's own timeout; and
//! servers without them: a version-1 server gets no GC and its stats say null, a version-2
//! server older than STATS_EX is asked STATS instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ctxstore_protocol::admin;
use ctxstore_protocol::{
    AdminRequest, AdminResponse, ErrorCode, GcWire, Request, Response, StatsWire,
};
use serde_json::{Value, json};

mod common;

use common::{At, Cli, keys, run_at};
use ctxstore_testsupport::{ScriptedServer, TestServer};

/// The fields `gc --json` prints.
const GC_FIELDS: [&str; 7] = [
    "blobs_dead",
    "bytes_reclaimed",
    "dead_bytes",
    "duration_ms",
    "live_bytes",
    "packs_compacted",
    "turns_dead",
];

/// The garbage collector's fields of `stats --json`.
const STATS_GC_FIELDS: [&str; 4] = [
    "live_bytes",
    "dead_bytes",
    "gc_runs",
    "bytes_reclaimed_total",
];

/// The one `--json` line of a command that must succeed.
fn one(addr: &str, args: &[&str], stdin: &[u8]) -> Value {
    At(addr).one(args, stdin)
}

/// The JSON error of a command that must exit `code` with nothing on stdout.
fn fails(addr: &str, args: &[&str], code: i32) -> Value {
    At(addr).fails(args, b"", code)
}

#[test]
fn gc_collects_a_deleted_contexts_turns_and_stats_count_it() {
    // Only on request; every pack with a dead record is compacted.
    let server = TestServer::start_with(
        None,
        &["--gc-interval", "off", "--gc-pack-dead-percent", "1"],
    );
    let addr = server.addr.as_str();
    let mut doomed = Vec::new();
    one(addr, &["ctx", "create", "--name", "doomed"], b"");
    one(addr, &["ctx", "create", "--name", "kept"], b"");
    for turn in 0..2 {
        let appended = one(
            addr,
            &["append", "@doomed"],
            format!("doomed turn {turn}").as_bytes(),
        );
        doomed.push(appended["turn_id"].as_u64().unwrap());
        one(
            addr,
            &["append", "@kept"],
            format!("kept turn {turn}").as_bytes(),
        );
    }
    let stats = one(addr, &["stats"], b"");
    for name in STATS_GC_FIELDS {
        assert_eq!(
            stats[name],
            json!(0),
            "{name} before any collection: {stats}"
        );
    }

    one(addr, &["ctx", "delete", "@doomed"], b"");
    let report = one(addr, &["gc"], b"");
    assert_eq!(keys(&report), GC_FIELDS, "{report}");
    assert_eq!(report["turns_dead"], json!(2), "{report}");
    assert_eq!(report["blobs_dead"], json!(2), "{report}");
    for name in GC_FIELDS {
        assert!(report[name].is_u64(), "{name}: {report}");
    }
    assert!(report["bytes_reclaimed"].as_u64().unwrap() > 0, "{report}");
    assert!(report["live_bytes"].as_u64().unwrap() > 0, "{report}");

    // The collected turns are gone (exit 3); the kept context reads as before.
    for turn_id in &doomed {
        let error = fails(addr, &["turn", &turn_id.to_string()], 3);
        assert_eq!(error["code"], "NOT_FOUND", "turn {turn_id}: {error}");
    }
    let output = run_at(addr, &["last", "@kept", "--payloads"], b"");
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.contains("kept turn 0") && text.contains("kept turn 1"),
        "{text}"
    );

    // stats: the collection counted, as the reply said.
    let stats = one(addr, &["stats"], b"");
    assert_eq!(stats["gc_runs"], json!(1));
    assert_eq!(stats["bytes_reclaimed_total"], report["bytes_reclaimed"]);
    assert_eq!(stats["live_bytes"], report["live_bytes"]);
    assert_eq!(stats["dead_bytes"], report["dead_bytes"]);

    // Readable text without --json; nothing left to collect the second time.
    let output = run_at(addr, &["gc"], b"");
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.starts_with("garbage collection: 0 turns and 0 blobs collected, "),
        "{text}"
    );
    let output = run_at(addr, &["stats"], b"");
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.lines()
            .any(|line| line.split_whitespace().collect::<Vec<_>>() == ["gc_runs", "2"]),
        "{text}"
    );
}

#[test]
fn gc_usage_errors_come_before_connecting_and_the_help_says_what_it_does() {
    // Nothing listens there (outside the ephemeral range, so nothing is handed it).
    let nowhere = format!("127.0.0.1:{}", ctxstore_testsupport::fixed_port());
    for args in [
        vec!["gc", "--gc-timeout", "soon"],
        vec!["gc", "--gc-timeout"],
        vec!["gc", "now"],
    ] {
        assert_eq!(fails(&nowhere, &args, 2)["code"], "USAGE", "{args:?}");
    }
    assert_eq!(fails(&nowhere, &["gc"], 5)["code"], "CONNECT_FAILED");
    let help = |args: &[&str]| {
        let output = run_at(&nowhere, args, b"");
        assert!(output.status.success(), "{args:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let gc = help(&["gc", "--help"]);
    for says in [
        "--gc-timeout",
        "--gc-interval",
        "--gc-pack-dead-percent",
        "turns_dead",
    ] {
        assert!(gc.contains(says), "gc --help lacks {says}: {gc}");
    }
    assert!(help(&["--help"]).contains("ctxstore gc"));
}

/// A fake server of protocol `version`: HELLO at once; GC after `delay`; STATS answered;
/// STATS_EX answered UNKNOWN_MESSAGE (a server older than garbage collection). Counts every
/// request but HELLO and STATS.
fn fake_server(version: u16, delay: Duration) -> (String, Arc<AtomicU64>) {
    let others = Arc::new(AtomicU64::new(0));
    let counted = others.clone();
    let (addr, _) = ScriptedServer::new(version).serve(move |request| match request {
        Request::Admin(AdminRequest::Stats(admin::Stats)) => {
            Some(Response::Admin(AdminResponse::Stats(StatsWire {
                turns: 7,
                ..StatsWire::default()
            })))
        }
        Request::Admin(AdminRequest::StatsEx(admin::StatsEx)) => {
            counted.fetch_add(1, Ordering::Relaxed);
            Some(Response::error(
                ErrorCode::UnknownMessage,
                "unknown message",
            ))
        }
        Request::Admin(AdminRequest::Gc(admin::Gc)) => {
            counted.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(delay);
            Some(Response::Admin(AdminResponse::GcDone(GcWire {
                turns_dead: 3,
                ..GcWire::default()
            })))
        }
        _ => {
            counted.fetch_add(1, Ordering::Relaxed);
            None
        }
    });
    (addr, others)
}

/// `--timeout` (per request) does not cut a collection; `--gc-timeout` does, with exit 5 and
/// a message saying the collection may go on.
#[test]
fn gc_waits_on_gc_timeout_not_timeout() {
    let (addr, requests) = fake_server(2, Duration::from_millis(600));
    let report = one(&addr, &["--timeout", "100ms", "gc"], b"");
    assert_eq!(report["turns_dead"], json!(3));

    let error = fails(&addr, &["gc", "--gc-timeout", "100ms"], 5);
    assert_eq!(error["code"], "TIMEOUT");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("may still be running") && message.contains("--gc-timeout"),
        "{message}"
    );
    assert_eq!(requests.load(Ordering::Relaxed), 2);
}

#[test]
fn servers_without_gc_get_no_gc_and_their_stats_say_null() {
    // Version 1: GC is refused before sending; STATS has no garbage collector's fields.
    let (addr, others) = fake_server(1, Duration::ZERO);
    let error = fails(&addr, &["--timeout", "30s", "gc"], 1);
    assert_eq!(error["code"], "UNSUPPORTED_BY_SERVER");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("needs protocol version 2"),
        "{error}"
    );
    let stats = one(&addr, &["stats"], b"");
    assert_eq!(stats["turns"], json!(7));
    for name in STATS_GC_FIELDS {
        assert_eq!(stats[name], Value::Null, "{name}: {stats}");
    }
    assert_eq!(
        others.load(Ordering::Relaxed),
        0,
        "nothing but HELLO and STATS"
    );

    // A version-2 server older than STATS_EX answers it UNKNOWN_MESSAGE: STATS instead.
    let (addr, others) = fake_server(2, Duration::ZERO);
    let stats = one(&addr, &["stats"], b"");
    assert_eq!(stats["turns"], json!(7));
    for name in STATS_GC_FIELDS {
        assert_eq!(stats[name], Value::Null, "{name}: {stats}");
    }
    assert_eq!(
        others.load(Ordering::Relaxed),
        1,
        "one STATS_EX, then STATS"
    );
}
