//! The metrics endpoint end to end: a real server with `metrics_listen`, a known number of
//! requests from the Rust client (some failing with known codes), scrapes before and after:
//! the counters move by exactly those numbers, and `promtool check metrics` accepts the text.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};

use bytes::Bytes;
use common::*;
use ctxstore_client::{ClientError, ErrorCode};

/// `GET path` over HTTP/1.0; the status code and the body.
fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

/// Every sample of the exposition: `name{labels}` → value.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            (series.to_string(), value.parse().unwrap())
        })
        .collect()
}

fn value(samples: &HashMap<String, f64>, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or(0.0)
}

/// `promtool check metrics` on `text`; `None` when promtool is not installed.
fn promtool_check(text: &str) -> Option<(bool, String)> {
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => panic!("running promtool: {error}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Some((output.status.success() && report.trim().is_empty(), report))
}

#[test]
fn counters_move_by_exactly_the_requests_sent_and_promtool_accepts_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let server = start(config);
    let metrics = server.metrics_addr().expect("metrics endpoint");
    let runtime = runtime();

    let client = runtime.block_on(connect(server.local_addr()));
    let before = samples(&http_get(metrics, "/metrics").1);

    const APPENDS: u64 = 7;
    const CONFLICTS: u64 = 2;
    const HEADS: u64 = 5;
    const MISSING_HEADS: u64 = 3;
    runtime.block_on(async {
        let context = client.create_context().await.unwrap().context_id;
        let mut head = 0;
        for index in 0..APPENDS {
            let payload = Bytes::from(format!("turn {index}"));
            head = client
                .append(context, Some(head), 1, 0, payload)
                .await
                .unwrap()
                .turn
                .turn_id;
        }
        for _ in 0..CONFLICTS {
            let stale = client
                .append(context, Some(0), 1, 0, Bytes::from_static(b"stale"))
                .await;
            assert!(
                matches!(
                    stale,
                    Err(ClientError::Server {
                        code: ErrorCode::Conflict,
                        ..
                    })
                ),
                "{stale:?}"
            );
        }
        for _ in 0..HEADS {
            assert_eq!(client.head(context).await.unwrap().head_turn_id, head);
        }
        for missing in 0..MISSING_HEADS {
            let result = client.head(1_000_000 + missing).await;
            assert!(
                matches!(
                    result,
                    Err(ClientError::Server {
                        code: ErrorCode::NotFound,
                        ..
                    })
                ),
                "{result:?}"
            );
        }
    });

    let (status, text) = http_get(metrics, "/metrics");
    assert_eq!(status, 200);
    let after = samples(&text);
    let moved = |series: &str| value(&after, series) - value(&before, series);

    assert_eq!(moved(r#"ctxstore_requests_total{type="CTX_CREATE"}"#), 1.0);
    assert_eq!(
        moved(r#"ctxstore_requests_total{type="APPEND_TURN"}"#),
        (APPENDS + CONFLICTS) as f64
    );
    assert_eq!(
        moved(r#"ctxstore_requests_total{type="GET_HEAD"}"#),
        (HEADS + MISSING_HEADS) as f64
    );
    assert_eq!(moved(r#"ctxstore_requests_total{type="STATS"}"#), 0.0);
    assert_eq!(
        moved(r#"ctxstore_request_errors_total{type="APPEND_TURN",code="CONFLICT"}"#),
        CONFLICTS as f64
    );
    assert_eq!(
        moved(r#"ctxstore_request_errors_total{type="GET_HEAD",code="NOT_FOUND"}"#),
        MISSING_HEADS as f64
    );
    // Every answered request has one latency observation, in the +Inf bucket at least.
    assert_eq!(
        moved(r#"ctxstore_request_duration_seconds_count{type="APPEND_TURN"}"#),
        (APPENDS + CONFLICTS) as f64
    );
    assert_eq!(
        moved(r#"ctxstore_request_duration_seconds_bucket{type="GET_HEAD",le="+Inf"}"#),
        (HEADS + MISSING_HEADS) as f64
    );
    // The store's figures: exactly what was written.
    assert_eq!(value(&after, "ctxstore_turns"), APPENDS as f64);
    assert_eq!(value(&after, "ctxstore_contexts"), 1.0);
    // The stale appends' payload is stored before the head check refuses them (once: the
    // second is a dedup hit).
    assert_eq!(value(&after, "ctxstore_blobs"), (APPENDS + 1) as f64);
    assert_eq!(value(&after, "ctxstore_read_only"), 0.0);
    assert_eq!(value(&after, "ctxstore_connections_open"), 1.0);
    assert!(value(&after, "ctxstore_disk_bytes") > 0.0);
    // Group commit: each append's turn went through the sequencer's append_durably and its blob
    // through shard 0's; batches hold at least one record, one fdatasync each.
    let sequencer_syncs = moved(r#"ctxstore_fsync_duration_seconds_count{actor="sequencer"}"#);
    assert!((1.0..=(APPENDS + 1) as f64).contains(&sequencer_syncs));
    assert_eq!(
        moved(r#"ctxstore_group_commit_records_count{actor="sequencer"}"#),
        sequencer_syncs
    );
    assert_eq!(
        moved(r#"ctxstore_group_commit_records_sum{actor="shard0"}"#),
        (APPENDS + 1) as f64
    );
    assert_eq!(
        value(&after, r#"ctxstore_actor_queue_depth{actor="shard0"}"#),
        0.0
    );

    // Other paths and methods are refused.
    assert_eq!(http_get(metrics, "/").0, 404);

    match promtool_check(&text) {
        Some((valid, report)) => assert!(valid, "promtool check metrics:\n{report}\n{text}"),
        None => println!(
            "SKIPPED the promtool check: promtool is not installed (Debian: apt-get install \
             prometheus); the counter checks above ran"
        ),
    }
}

#[test]
fn the_endpoint_is_off_by_default_and_closes_with_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(config(dir.path()));
    assert_eq!(server.metrics_addr(), None);
    drop(server);

    let mut config = config(dir.path());
    // Outside the ephemeral range: a port the kernel picked could be handed to the other
    // test's server between stop and the refused connect (seen once in CI).
    let listen = format!("127.0.0.1:{}", ctxstore_testsupport::fixed_port());
    config.metrics_listen = Some(listen.parse().unwrap());
    let mut server = start(config);
    let metrics = server.metrics_addr().unwrap();
    assert_eq!(http_get(metrics, "/metrics").0, 200);
    server.stop();
    // Stopped: the listening socket is gone when stop returns, so a connection is refused
    // (not accepted and then closed without an answer).
    match TcpStream::connect(metrics) {
        Err(error) => assert_eq!(
            error.kind(),
            std::io::ErrorKind::ConnectionRefused,
            "{error}"
        ),
        Ok(mut stream) => {
            stream
                .set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            let _ = write!(stream, "GET /metrics HTTP/1.0\r\n\r\n");
            let mut response = String::new();
            let _ = stream.read_to_string(&mut response);
            panic!("connected to the metrics port after stop; answered {response:?}");
        }
    }
}

/// Per-tenant series (decision 0032 §3): a tenant's usage, its limits and its refusals, each
/// labelled `tenant`; past the 100 most used tenants the rest sum into `tenant="other"`, so
/// the label's cardinality stays bounded whatever the tenants file holds.
#[test]
fn tenant_series_show_usage_limits_and_refusals_with_a_bounded_label() {
    use ctxstore_protocol::{Response, contexts};
    const ACME: &str = "acme-token-0123456789abcdef";
    let dir = tempfile::tempdir().unwrap();
    let mut file = format!(
        "[[tenant]]\nname = \"acme\"\ntokens = [\"{ACME}\"]\nrights = [\"read\", \"write\"]\n\
         quota_contexts = 2\nquota_connections = 8\n"
    );
    for idle in 0..105 {
        file.push_str(&format!(
            "\n[[tenant]]\nname = \"idle-{idle:03}\"\ntokens = [\"idle-token-{idle:03}-0123456789\"]\n\
             rights = [\"read\"]\n"
        ));
    }
    let path = dir.path().join("tenants.toml");
    std::fs::write(&path, file).unwrap();
    let mut config = config(dir.path());
    config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    config.token = Some("operator-token-0123456789".into());
    config.tenants_file = Some(path);
    let server = start(config);
    let metrics = server.metrics_addr().expect("metrics endpoint");

    let mut acme = Raw::connect(server.local_addr());
    assert!(error_code(&acme.hello(ACME.as_bytes())).is_none());
    let create = contexts::CtxCreate { base_turn_id: 0 };
    let mut created = Vec::new();
    for _ in 0..3 {
        created.push(acme.call(1, &create.clone().into()));
    }
    assert_eq!(error_code(&created[2]), Some(ErrorCode::QuotaExceeded));
    let Response::Contexts(ctxstore_protocol::ContextsResponse::Context(first)) = &created[0]
    else {
        panic!("{:?}", created[0])
    };
    let open = stream_open(first.head.context_id);
    assert!(error_code(&acme.call(2, &open.into())).is_none());

    let text = http_get(metrics, "/metrics").1;
    let samples = samples(&text);
    let acme_series = |name: &str| value(&samples, &format!("{name}{{tenant=\"acme\"}}"));
    assert_eq!(acme_series("ctxstore_tenant_contexts"), 2.0);
    assert_eq!(acme_series("ctxstore_tenant_streams_open"), 1.0);
    assert_eq!(acme_series("ctxstore_tenant_connections"), 1.0);
    assert!(samples.contains_key("ctxstore_tenant_stored_bytes{tenant=\"acme\"}"));
    let acme_quota = |name: &str, quota: &str| {
        let series = format!("{name}{{tenant=\"acme\",quota=\"{quota}\"}}");
        value(&samples, &series)
    };
    assert_eq!(
        acme_quota("ctxstore_tenant_quota_limit", "quota_contexts"),
        2.0
    );
    assert_eq!(
        acme_quota("ctxstore_tenant_quota_limit", "quota_connections"),
        8.0
    );
    assert_eq!(
        acme_quota("ctxstore_tenant_quota_refusals_total", "quota_contexts"),
        1.0
    );
    // 106 tenants: acme and 99 idle ones by name, the other 6 as one series.
    let contexts_series: Vec<&String> = samples
        .keys()
        .filter(|series| series.starts_with("ctxstore_tenant_contexts{"))
        .collect();
    assert_eq!(contexts_series.len(), 101, "{contexts_series:?}");
    assert!(samples.contains_key("ctxstore_tenant_contexts{tenant=\"other\"}"));
    if let Some((valid, report)) = promtool_check(&text) {
        assert!(valid, "promtool check metrics:\n{report}\n{text}");
    }
}
