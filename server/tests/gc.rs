//! Garbage collection through the protocol (issue 15 item 6): GC answered GC_DONE with what
//! the round collected, what a collected turn and blob answer afterwards (NOT_FOUND), what a
//! fork keeps, STATS_EX and the metrics agreeing with the reply, a restart, a version-1
//! connection that knows neither message, and the binary's `--gc-*` settings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use ctxstore_protocol::{
    AdminRequest, AdminResponse, AppendsRequest, AppendsResponse, BlobHash, BlobsRequest,
    BlobsResponse, ContextRef, ContextsRequest, ContextsResponse, ErrorCode, GcStatsWire, GcWire,
    ReadsRequest, ReadsResponse, Request, Response, RetentionRequest, RetentionResponse, StatsWire,
    TurnWire, read_flags,
};
use ctxstore_protocol::{admin, appends, blobs, contexts, reads, retention};

/// Payload bytes of each turn: incompressible, so a collected blob frees about this much.
const PAYLOAD_BYTES: usize = 64 * 1024;

/// The `n`th payload: `incompressible` seeds `seed | 1`, so only odd seeds differ.
fn unique(n: u64) -> Bytes {
    incompressible(PAYLOAD_BYTES, 2 * n + 1)
}

/// Blob records a payload takes: over the chunk threshold a manifest and each distinct chunk
/// (issue 16), else one.
fn records_of(payload: &[u8]) -> u64 {
    let chunking = ctxstore_engine::ChunkingConfig::default();
    if !chunking.applies_to(payload.len()) {
        return 1;
    }
    let chunks: std::collections::HashSet<ctxstore_engine::BlobHash> = chunking
        .cut(payload)
        .into_iter()
        .map(|range| ctxstore_engine::BlobHash::of(&payload[range]))
        .collect();
    1 + chunks.len() as u64
}

fn named(name: &str) -> ContextRef {
    ContextRef::Name(name.into())
}

fn open(raw: &mut Raw, req_id: u64, name: &str) {
    let response = raw.call(
        req_id,
        &Request::Contexts(ContextsRequest::CtxOpen(contexts::CtxOpen {
            base_turn_id: 0,
            get_or_create: false,
            clone_from: None,
            name: Some(name.into()),
            tags: vec![],
        })),
    );
    assert!(
        matches!(
            response,
            Response::Contexts(ContextsResponse::Opened(contexts::Opened { .. }))
        ),
        "{response:?}"
    );
}

fn append(raw: &mut Raw, req_id: u64, context: ContextRef, payload: Bytes) -> TurnWire {
    match raw.call(
        req_id,
        &Request::Appends(AppendsRequest::AppendTurn(appends::AppendTurn {
            context,
            expected_head: None,
            type_tag: 1,
            codec: 0,
            payload,
        })),
    ) {
        Response::Appends(AppendsResponse::Appended(appends::Appended { turn, .. })) => turn,
        other => panic!("append: {other:?}"),
    }
}

fn gc(raw: &mut Raw, req_id: u64) -> GcWire {
    match raw.call(req_id, &Request::Admin(AdminRequest::Gc(admin::Gc))) {
        Response::Admin(AdminResponse::GcDone(report)) => report,
        other => panic!("GC: {other:?}"),
    }
}

fn stats_ex(raw: &mut Raw, req_id: u64) -> (StatsWire, GcStatsWire) {
    match raw.call(
        req_id,
        &Request::Admin(AdminRequest::StatsEx(admin::StatsEx)),
    ) {
        Response::Admin(AdminResponse::ExtendedStats(admin::ExtendedStats { stats, gc })) => {
            (*stats, gc)
        }
        other => panic!("STATS_EX: {other:?}"),
    }
}

fn get_turn(raw: &mut Raw, req_id: u64, turn_id: u64) -> Response {
    raw.call(
        req_id,
        &Request::Reads(ReadsRequest::GetTurn(reads::GetTurn { turn_id })),
    )
}

/// The payloads of a context's newest turns, oldest first.
fn payloads(raw: &mut Raw, req_id: u64, context: ContextRef) -> Vec<Bytes> {
    match raw.call(
        req_id,
        &Request::Reads(ReadsRequest::GetLast(reads::GetLast {
            context,
            limit: 100,
            read_flags: read_flags::WITH_PAYLOADS,
        })),
    ) {
        Response::Reads(ReadsResponse::Turns(reads::Turns { entries, .. })) => {
            entries.into_iter().map(|e| e.payload.data).collect()
        }
        other => panic!("GET_LAST: {other:?}"),
    }
}

fn has_blob(raw: &mut Raw, req_id: u64, hash: BlobHash) -> bool {
    match raw.call(
        req_id,
        &Request::Blobs(BlobsRequest::HasBlobs(blobs::HasBlobs {
            hashes: vec![hash],
        })),
    ) {
        Response::Blobs(BlobsResponse::BlobsHeld(blobs::BlobsHeld { present })) => present[0],
        other => panic!("HAS_BLOBS: {other:?}"),
    }
}

/// The metrics endpoint's samples, `name` → value (unlabelled series only).
fn scrape(addr: SocketAddr) -> HashMap<String, f64> {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (_, body) = response.split_once("\r\n\r\n").unwrap();
    body.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[test]
fn gc_collects_what_only_deleted_contexts_reached_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    // Only on request, and every pack with any dead record is compacted.
    config.engine.gc_interval_ms = 0;
    config.engine.gc_pack_dead_percent = 1;
    config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let mut server = start(config.clone());
    let metrics = server.metrics_addr().expect("metrics endpoint");
    let mut raw = Raw::connect(server.local_addr());
    raw.hello(b"");
    let mut req_id = 1;
    let mut next = || {
        req_id += 1;
        req_id
    };

    // Before any collection: nothing counted.
    let (_, before) = stats_ex(&mut raw, next());
    assert_eq!(before, GcStatsWire::default());

    // Three contexts of two turns each, to be deleted; one kept; a fork of gone-0's first
    // turn, which keeps that turn (and only that one) alive. Every payload is unique.
    let mut seed = 0;
    let mut payload = || {
        seed += 1;
        unique(seed)
    };
    let mut gone_turns = Vec::new();
    for index in 0..3 {
        let name = format!("gone-{index}");
        open(&mut raw, next(), &name);
        for _ in 0..2 {
            gone_turns.push(append(&mut raw, next(), named(&name), payload()));
        }
    }
    open(&mut raw, next(), "kept");
    let kept_payloads = [payload(), payload()];
    let mut kept_turns = Vec::new();
    for bytes in &kept_payloads {
        kept_turns.push(append(&mut raw, next(), named("kept"), bytes.clone()));
    }
    let forked = gone_turns[0];
    let fork = match raw.call(
        next(),
        &Request::Contexts(ContextsRequest::CtxFork(contexts::CtxFork {
            turn_id: forked.turn_id,
        })),
    ) {
        Response::Contexts(ContextsResponse::Context(contexts::Context { head, .. })) => {
            head.context_id
        }
        other => panic!("fork: {other:?}"),
    };
    for index in 0..3 {
        let deleted = raw.call(
            next(),
            &Request::Retention(RetentionRequest::CtxDelete(retention::CtxDelete {
                context: named(&format!("gone-{index}")),
            })),
        );
        assert!(
            matches!(
                deleted,
                Response::Retention(RetentionResponse::Retention(retention::Retention { .. }))
            ),
            "{deleted:?}"
        );
    }
    let dead: Vec<TurnWire> = gone_turns[1..].to_vec();

    let report = gc(&mut raw, next());
    assert!(report.turns_dead > 0 && report.blobs_dead > 0, "{report:?}");
    // Exactly what nothing live reaches: five turns, their five unique blobs (seeds 2..=6),
    // each a manifest and its chunks (issue 16).
    assert_eq!(report.turns_dead, dead.len() as u64, "{report:?}");
    let dead_records: u64 = (2..=6).map(|seed| records_of(&unique(seed))).sum();
    assert_eq!(report.blobs_dead, dead_records, "{report:?}");
    // A dead share far above 1 %: the packs holding them were rewritten.
    assert!(report.packs_compacted >= 1, "{report:?}");
    assert!(
        report.bytes_reclaimed >= (dead.len() * PAYLOAD_BYTES) as u64,
        "{report:?}"
    );
    assert!(
        report.live_bytes >= (3 * PAYLOAD_BYTES) as u64,
        "three live payloads: {report:?}"
    );
    assert_eq!(
        report.dead_bytes, 0,
        "every dead record compacted: {report:?}"
    );

    // Collected turns and blobs are gone; the rest reads back exactly.
    for turn in &dead {
        let response = get_turn(&mut raw, next(), turn.turn_id);
        assert_eq!(
            error_code(&response),
            Some(ErrorCode::NotFound),
            "turn {} of a deleted context after GC: {response:?}",
            turn.turn_id
        );
        assert!(!has_blob(&mut raw, next(), turn.payload_hash));
    }
    assert!(matches!(
        get_turn(&mut raw, next(), forked.turn_id),
        Response::Reads(ReadsResponse::Turn(turn)) if turn == forked
    ));
    assert!(has_blob(&mut raw, next(), forked.payload_hash));
    assert_eq!(payloads(&mut raw, next(), named("kept")), kept_payloads);
    assert_eq!(
        payloads(&mut raw, next(), ContextRef::Id(fork)),
        vec![unique(1)]
    );

    // STATS_EX and the metrics say what the reply said.
    let (_, after) = stats_ex(&mut raw, next());
    assert_eq!(
        after,
        GcStatsWire {
            live_bytes: report.live_bytes,
            dead_bytes: report.dead_bytes,
            gc_runs: 1,
            bytes_reclaimed_total: report.bytes_reclaimed,
        }
    );
    let samples = scrape(metrics);
    assert_eq!(samples["ctxstore_gc_runs_total"], 1.0);
    assert_eq!(
        samples["ctxstore_gc_bytes_reclaimed_total"],
        report.bytes_reclaimed as f64
    );
    assert_eq!(samples["ctxstore_live_bytes"], report.live_bytes as f64);
    assert_eq!(samples["ctxstore_dead_bytes"], report.dead_bytes as f64);

    // A second round finds nothing new.
    let again = gc(&mut raw, next());
    assert_eq!((again.turns_dead, again.blobs_dead), (0, 0), "{again:?}");
    assert_eq!(stats_ex(&mut raw, next()).1.gc_runs, 2);

    // A restart keeps collected turns collected and live ones readable.
    drop(raw);
    server.stop();
    let mut server = start(config);
    let mut raw = Raw::connect(server.local_addr());
    raw.hello(b"");
    for turn in &dead {
        let response = get_turn(&mut raw, 2, turn.turn_id);
        assert_eq!(
            error_code(&response),
            Some(ErrorCode::NotFound),
            "{response:?}"
        );
    }
    assert_eq!(payloads(&mut raw, 3, named("kept")), kept_payloads);
    assert!(matches!(
        get_turn(&mut raw, 4, kept_turns[1].turn_id),
        Response::Reads(ReadsResponse::Turn(turn)) if turn == kept_turns[1]
    ));
    server.stop();
}

#[test]
fn a_version_1_connection_knows_neither_gc_nor_stats_ex() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(config(dir.path()));
    let mut raw = Raw::connect(server.local_addr());
    raw.hello_versions(b"", 1, 1);
    for (req_id, request) in [
        (2, Request::Admin(AdminRequest::Gc(admin::Gc))),
        (3, Request::Admin(AdminRequest::StatsEx(admin::StatsEx))),
    ] {
        let response = raw.call(req_id, &request);
        assert_eq!(
            error_code(&response),
            Some(ErrorCode::UnknownMessage),
            "{response:?}"
        );
    }
    // STATS stays version 1's 96 bytes, and the connection is still open.
    assert!(matches!(
        raw.call(4, &Request::Admin(AdminRequest::Stats(admin::Stats))),
        Response::Admin(AdminResponse::Stats(_))
    ));
    server.stop();
}

#[test]
fn the_binarys_gc_interval_runs_collections_on_its_own() {
    let server = server_process(&["--gc-interval", "100ms", "--gc-rate-max", "off"]);
    let mut raw = Raw::connect(server.socket_addr());
    raw.hello(b"");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut req_id = 2;
    loop {
        let (_, gc) = stats_ex(&mut raw, req_id);
        if gc.gc_runs >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no scheduled collection: {gc:?}\n{}",
            server.log()
        );
        req_id += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `--print-config`'s line for `key`.
fn config_line<'a>(printed: &'a str, key: &str) -> &'a str {
    printed
        .lines()
        .find(|line| line.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in\n{printed}"))
}

fn server_command() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ctxstore-server"));
    for (name, _) in std::env::vars() {
        if name.starts_with("CTXSTORE_") {
            command.env_remove(name);
        }
    }
    command
}

#[test]
fn gc_settings_come_from_flags_environment_file_and_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let output = server_command()
        .arg("--data")
        .arg(dir.path().join("data"))
        .arg("--print-config")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{printed}");
    assert!(config_line(&printed, "gc-interval").starts_with("gc-interval = \"10m\" "));
    assert!(
        config_line(&printed, "gc-pack-dead-percent").starts_with("gc-pack-dead-percent = 50 ")
    );
    assert!(config_line(&printed, "gc-rate-max").starts_with("gc-rate-max = \"32MiB\" "));
    assert!(config_line(&printed, "gc-rate-max").ends_with("# default"));

    let file = dir.path().join("server.toml");
    std::fs::write(&file, "gc-rate-max = \"64MiB\"\ngc-interval = \"1h\"\n").unwrap();
    let output = server_command()
        .arg("--data")
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&file)
        .args(["--gc-interval", "off", "--print-config"])
        .env("CTXSTORE_GC_PACK_DEAD_PERCENT", "30")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{printed}");
    assert!(config_line(&printed, "gc-interval").starts_with("gc-interval = \"off\" "));
    assert!(config_line(&printed, "gc-interval").ends_with("# command line"));
    assert!(
        config_line(&printed, "gc-pack-dead-percent").starts_with("gc-pack-dead-percent = 30 ")
    );
    assert!(config_line(&printed, "gc-rate-max").starts_with("gc-rate-max = \"64MiB\" "));

    for bad in [
        ["--gc-pack-dead-percent", "0"],
        ["--gc-pack-dead-percent", "101"],
        ["--gc-interval", "31d"],
        ["--gc-rate-max", "fast"],
    ] {
        let output = server_command()
            .arg("--data")
            .arg(dir.path().join("data"))
            .args(bad)
            .arg("--print-config")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(stderr.contains(bad[0]), "{bad:?}: {stderr}");
    }
}
