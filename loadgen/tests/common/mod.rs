//! Helpers shared by the load generator's end-to-end tests.
#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

pub use ctxstore_testsupport::server_binary;

pub const LOADGEN: &str = env!("CARGO_BIN_EXE_ctxstore-loadgen");

/// The report of a finished `ctxstore-loadgen --json REPORT` run and its stdout (for the
/// assertions' messages); fails the test, with both outputs, when the run exited non-zero.
pub fn report_of(
    output: &std::process::Output,
    report_path: &std::path::Path,
) -> (serde_json::Value, String) {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(report_path).unwrap();
    (serde_json::from_str(&text).unwrap(), stdout)
}
