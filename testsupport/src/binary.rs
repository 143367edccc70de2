//! Finds `ctxstore-server` for the end-to-end tests of packages that cannot name it as a
//! binary of their own (the client, the CLI, the load generator).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::SystemTime;

/// `ctxstore-server` in the target directory of the running test: a test executable lives in
/// `target/<profile>/deps/`, the binaries one level up.
///
/// `cargo test -p <one package>` does not rebuild another package's binary, so a binary left
/// by an earlier build would be tested as if it were the code at hand (a failover campaign
/// once ran a server built before the fix it was meant to exercise). The first call in a
/// process therefore runs `cargo build` for it when it is missing or older than a file it is
/// made of (the server's crates, the vendored code, the console's assets, the manifests):
/// under `cargo test --workspace` it is fresh and nothing runs (a `cargo build -p` would
/// rebuild it with other features than the test build unified, which costs minutes).
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
    let built = std::fs::metadata(&path).and_then(|metadata| metadata.modified());
    if let Ok(built) = built
        && newest_source().is_some_and(|newest| newest <= built)
    {
        return path;
    }
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

/// The newest modification time of the files `ctxstore-server` is built from; `None` when the
/// workspace cannot be read (then it is built, to be sure).
fn newest_source() -> Option<SystemTime> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    let mut newest = SystemTime::UNIX_EPOCH;
    for file in ["Cargo.toml", "Cargo.lock"] {
        newest = newest.max(std::fs::metadata(root.join(file)).ok()?.modified().ok()?);
    }
    for dir in [
        "server",
        "engine",
        "replica",
        "protocol",
        "vocab",
        "vendor",
        "console/dist",
    ] {
        newest = newest.max(newest_under(&root.join(dir))?);
    }
    Some(newest)
}

/// The newest modification time under `dir`, a tree of a few hundred files.
fn newest_under(dir: &Path) -> Option<SystemTime> {
    let mut newest = std::fs::metadata(dir).ok()?.modified().ok()?;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).ok()? {
            let entry = entry.ok()?;
            let kind = entry.file_type().ok()?;
            if kind.is_dir() {
                // A nested crate's own build output is no source.
                if entry.file_name() != "target" {
                    pending.push(entry.path());
                }
            } else {
                newest = newest.max(entry.metadata().ok()?.modified().ok()?);
            }
        }
    }
    Some(newest)
}
