//! Helpers shared by the load generator's end-to-end tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub use ctxstore_testsupport::server_binary;

pub const LOADGEN: &str = env!("CARGO_BIN_EXE_ctxstore-loadgen");
