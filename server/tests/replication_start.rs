//! A primary whose object store cannot be used at start says so once, in one line: where it
//! asked, why it failed (no S3 response body), and which flags to check or start with (issue
//! 44: it printed the same error four or five times, S3's XML each time, and named no flag).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");

/// The server's stderr after it refused to start with `--replicate-to url` at `endpoint`.
fn refused(url: &str, endpoint: &str) -> String {
    let data = tempfile::tempdir().unwrap();
    let output = Command::new(SERVER)
        .args(["--data"])
        .arg(data.path())
        .args([
            "--listen",
            "127.0.0.1:0",
            "--replicate-to",
            url,
            "--replica-s3-endpoint",
            endpoint,
            "--replica-s3-allow-http",
        ])
        .env("AWS_ACCESS_KEY_ID", "ctxstore")
        .env("AWS_SECRET_ACCESS_KEY", "ctxstore")
        .env("AWS_REGION", "us-east-1")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(!output.status.success(), "it started: {output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn says_it_once(stderr: &str, endpoint: &str) {
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("ctxstore-server: "))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    let error = errors[0];
    for needed in [
        endpoint,
        "--replica-s3-endpoint",
        "--replicate-start-anyway",
        "s3://",
    ] {
        assert!(error.contains(needed), "no {needed:?} in {error}");
    }
    assert!(!stderr.contains('<'), "a response body in {stderr}");
    // The object store's own retries are not logged at the default level.
    assert!(!stderr.contains("backing off"), "{stderr}");
    assert!(error.len() < 800, "not one short line: {error}");
}

#[test]
fn an_unreachable_object_store_is_one_line_naming_the_flags() {
    // Nothing listens on a port the test bound and released.
    // (Outside the ephemeral range, so no other test's listener is handed it meanwhile.)
    let endpoint = format!("http://127.0.0.1:{}", ctxstore_testsupport::fixed_port());
    let stderr = refused("s3://ctxstore-test/unreachable", &endpoint);
    says_it_once(&stderr, &endpoint);
}

#[test]
fn a_missing_bucket_on_seaweedfs_is_one_line_without_its_xml() {
    let Ok(endpoint) = std::env::var("CTXSTORE_S3_TEST_ENDPOINT") else {
        eprintln!("skipped: CTXSTORE_S3_TEST_ENDPOINT is not set (.ci/run sets it)");
        return;
    };
    let stderr = refused("s3://no-such-bucket-ctxstore/prefix", &endpoint);
    says_it_once(&stderr, &endpoint);
}
