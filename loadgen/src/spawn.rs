//! `--spawn-server`: a fresh `ctxstore-server` on a temporary directory and a free port, for
//! the length of the run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use ctxstore_testsupport::{ServerLaunch, TestServer};

use crate::report::DiskUsage;

/// A server spawned for the length of the run (the workspace's one server launcher,
/// `ctxstore-testsupport`, with the server's log kept beside its store).
#[derive(Debug)]
pub struct SpawnedServer {
    server: TestServer,
    pub addr: String,
    pub data_dir: PathBuf,
}

/// `ctxstore-server` next to this executable, else on PATH.
pub fn default_server_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name("ctxstore-server"))
        .filter(|path| path.exists())
        .unwrap_or_else(|| PathBuf::from("ctxstore-server"))
}

impl SpawnedServer {
    pub fn start(binary: &Path, extra_args: &[String]) -> anyhow::Result<SpawnedServer> {
        let server = ServerLaunch::new(binary)
            .flags(extra_args)
            .keep_log()
            .ready_timeout(Duration::from_secs(60))
            .temp_prefix("ctxstore-loadgen-")
            .try_start()
            .with_context(|| format!("starting {}", binary.display()))?;
        tracing::info!(addr = %server.addr, data = %server.data.display(), "spawned ctxstore-server");
        Ok(SpawnedServer {
            addr: server.addr.clone(),
            data_dir: server.data.clone(),
            server,
        })
    }

    /// The server's process id (its CPU time, for the streaming workload).
    pub fn pid(&self) -> u32 {
        self.server.pid()
    }

    /// SIGTERM, then wait (up to 30 s) for the graceful stop.
    pub fn stop(mut self) -> anyhow::Result<()> {
        Ok(self.server.stop(Duration::from_secs(30))?)
    }
}

/// Total size of the files under `path`.
pub fn directory_bytes(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(metadata) if metadata.is_dir() => directory_bytes(&entry.path()),
            Ok(metadata) => metadata.len(),
            Err(_) => 0,
        })
        .sum()
}

/// What the files under `path` occupy: their allocated blocks (st_blocks × 512, which counts
/// the zeros a ctxstore server prepares ahead of its writes) and their lengths. Files that
/// vanish while they are counted count as nothing.
pub fn directory_usage(path: &Path) -> DiskUsage {
    let (allocated_bytes, file_bytes) = usage_under(path);
    DiskUsage {
        allocated_bytes: Some(allocated_bytes),
        file_bytes: Some(file_bytes),
        measured: format!("the files under {}", path.display()),
    }
}

/// What the named files of `dir` occupy (a missing file counts as nothing), like
/// `directory_usage`: e.g. a ctxstore store's log, `turns.log` and `turns.base`.
pub fn files_usage(dir: &Path, names: &[&str]) -> DiskUsage {
    use std::os::unix::fs::MetadataExt;
    let (mut allocated_bytes, mut file_bytes) = (0, 0);
    for name in names {
        if let Ok(metadata) = std::fs::metadata(dir.join(name)) {
            allocated_bytes += metadata.blocks() * 512;
            file_bytes += metadata.len();
        }
    }
    DiskUsage {
        allocated_bytes: Some(allocated_bytes),
        file_bytes: Some(file_bytes),
        measured: format!("{} in {}", names.join(" + "), dir.display()),
    }
}

fn usage_under(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(path) else {
        return (0, 0);
    };
    let mut total = (0, 0);
    // A ctxstore store's disk reserve (`RESERVE`, `--disk-reserve`) is space kept free for
    // its garbage collector, not data: a peer's free space is not counted either.
    for entry in entries
        .flatten()
        .filter(|entry| entry.file_name() != "RESERVE")
    {
        let (allocated, length) = match entry.metadata() {
            Ok(metadata) if metadata.is_dir() => usage_under(&entry.path()),
            Ok(metadata) => (metadata.blocks() * 512, metadata.len()),
            Err(_) => (0, 0),
        };
        total.0 += allocated;
        total.1 += length;
    }
    total
}
