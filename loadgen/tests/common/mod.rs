//! Helpers shared by the load generator's end-to-end tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

#[path = "../../../testsupport/server_binary.rs"]
mod server_binary;

pub const LOADGEN: &str = env!("CARGO_BIN_EXE_ctxstore-loadgen");

pub fn server_binary() -> PathBuf {
    server_binary::server_binary_beside(LOADGEN)
}
