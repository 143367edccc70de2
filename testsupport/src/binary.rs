//! Finds `ctxstore-server` for the end-to-end tests of packages that cannot name it as a
//! binary of their own (the client, the CLI, the load generator).

use std::path::PathBuf;
use std::process::Command;

/// `ctxstore-server` in the target directory of the running test: a test executable lives in
/// `target/<profile>/deps/`, the binaries one level up (`cargo test --workspace` builds them
/// all). Built on demand when only one package is tested.
pub fn server_binary() -> PathBuf {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(error) => panic!("the running test's executable: {error}"),
    };
    let Some(profile_dir) = exe.parent().and_then(|deps| deps.parent()) else {
        panic!("{} is not in target/<profile>/deps/", exe.display());
    };
    let path = profile_dir.join("ctxstore-server");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "ctxstore-server", "--bin", "ctxstore-server"])
            .status();
        assert!(
            status.is_ok_and(|status| status.success()),
            "building ctxstore-server (cargo build -p ctxstore-server) for {}",
            exe.display()
        );
    }
    path
}
