//! Finds `ctxstore-server` for the end-to-end tests of packages that cannot depend on it
//! (the client and the load generator). Shared by `#[path]` so the rule lives in one place.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `ctxstore-server` beside `exe` in the target directory (`cargo test --workspace` builds
/// both); built on demand when only one package is tested.
pub fn server_binary_beside(exe: &str) -> PathBuf {
    let path = Path::new(exe).with_file_name("ctxstore-server");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "ctxstore-server", "--bin", "ctxstore-server"])
            .status()
            .expect("running cargo to build ctxstore-server");
        assert!(status.success(), "building ctxstore-server");
    }
    path
}
