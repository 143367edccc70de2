//! Every series the metrics endpoint serves is in docs/operations.md's table of series (issue
//! 44: five `ctxstore_replication_*` series were served and documented nowhere). A server that
//! ships to a `file://` replica serves them all; the test reads each `# TYPE` line of one scrape
//! and fails naming every series the table lacks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use ctxstore_testsupport::ServerLaunch;

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");
const OPERATIONS_MD: &str = include_str!("../../docs/operations.md");

/// One scrape; `None` while the endpoint is not up yet.
fn scrape(addr: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response)
}

#[test]
fn every_served_series_is_in_the_operations_table() {
    let root = tempfile::tempdir().unwrap();
    let replica = root.path().join("replica");
    std::fs::create_dir_all(&replica).unwrap();
    let url = format!("file://{}", replica.display());
    // Outside the ephemeral range: nothing else is handed it before the server binds it.
    let metrics_addr = format!("127.0.0.1:{}", ctxstore_testsupport::fixed_port());
    let mut server = ServerLaunch::new(SERVER)
        .data(&root.path().join("data"))
        .flags(&[
            "--replicate-to",
            url.as_str(),
            "--replicate-interval",
            "50ms",
            "--metrics-listen",
            metrics_addr.as_str(),
        ])
        .keep_log()
        .start();

    // The endpoint may come up a moment after the protocol listener.
    let started = Instant::now();
    let text = loop {
        let text = scrape(&metrics_addr).unwrap_or_default();
        if text.contains("ctxstore_replication_state") {
            break text;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no replication series served:\n{text}\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let served: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split(' ').next())
        .collect();
    assert!(served.len() > 30, "too few series served:\n{text}");
    let undocumented: Vec<&&str> = served
        .iter()
        .filter(|name| !OPERATIONS_MD.contains(&format!("`{name}`")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "served but not in docs/operations.md's table of series: {undocumented:?}"
    );
    server.stop(Duration::from_secs(30)).unwrap();
}
