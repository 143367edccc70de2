//! `cargo run --example readme` (client/examples/readme.rs, the README's Rust snippets) runs
//! against the server `CTXSTORE_ADDR` names (issue 44), as the CLI does: here a fresh server on
//! a port of its own, not 127.0.0.1:7411.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use ctxstore_testsupport::TestServer;

/// The example, built now (cargo builds nothing when it is up to date): a test executable lives
/// in `target/<profile>/deps/`, examples in `target/<profile>/examples/`.
fn readme_example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "ctxstore-client", "--example", "readme"])
        .status()
        .unwrap();
    assert!(
        status.success(),
        "cargo build -p ctxstore-client --example readme"
    );
    profile_dir.join("examples").join("readme")
}

#[test]
fn the_readme_example_runs_against_ctxstore_addr() {
    let example = readme_example();
    let server = TestServer::start(None);
    assert!(!server.addr.ends_with(":7411"), "{}", server.addr);
    let output = Command::new(&example)
        .env("CTXSTORE_ADDR", &server.addr)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}: {stdout}{}",
        example.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout.trim(), "every README snippet ran");
    // Its contexts are in this server.
    let client = ctxstore_client::blocking::Client::connect(ctxstore_client::ClientConfig::new(
        server.addr.clone(),
    ))
    .unwrap();
    let run = ctxstore_client::ContextRef::Name("run-42".into());
    assert!(client.head(run).unwrap().head_turn_id > 0);
}
