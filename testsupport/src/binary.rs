//! Finds `ctxstore-server` for the end-to-end tests of packages that cannot name it as a
//! binary of their own (the client, the CLI, the load generator).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// `ctxstore-server` in the target directory of the running test: a test executable lives in
/// `target/<profile>/deps/`, the binaries one level up.
///
/// `cargo test -p <one package>` does not rebuild another package's binary, so a binary left
/// by an earlier build would be tested as if it were the code at hand (a failover campaign
/// once ran a server built before the fix it was meant to exercise). The first call in a
/// process therefore runs `cargo build` for it, which is a no-op (a fraction of a second) when
/// it is fresh, as it is under `cargo test --workspace`.
pub fn server_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(build_server).clone()
}

fn build_server() -> PathBuf {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(error) => panic!("the running test's executable: {error}"),
    };
    let Some(profile_dir) = exe.parent().and_then(|deps| deps.parent()) else {
        panic!("{} is not in target/<profile>/deps/", exe.display());
    };
    let path = profile_dir.join("ctxstore-server");
    // Only a test run by cargo knows its cargo (and its profile by the directory name); an
    // executable run by hand uses the binary that is there.
    let Ok(cargo) = std::env::var("CARGO") else {
        assert!(path.exists(), "{} is missing: build it", path.display());
        return path;
    };
    let mut build = Command::new(cargo);
    build.args([
        "build",
        "-q",
        "-p",
        "ctxstore-server",
        "--bin",
        "ctxstore-server",
    ]);
    match profile_dir.file_name().and_then(|name| name.to_str()) {
        Some("debug") => {}
        Some("release") => {
            build.arg("--release");
        }
        Some(profile) => {
            build.args(["--profile", profile]);
        }
        None => {}
    }
    if let Some(target_dir) = profile_dir.parent() {
        build.arg("--target-dir").arg(target_dir);
    }
    let status = build.status();
    assert!(
        status.is_ok_and(|status| status.success()),
        "building ctxstore-server (cargo build -p ctxstore-server) for {}",
        exe.display()
    );
    path
}
