//! `--spawn-server`: a fresh `ctxstore-server` on a temporary directory and a free port, for
//! the length of the run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::report::DiskUsage;

#[derive(Debug)]
pub struct SpawnedServer {
    child: Child,
    pub addr: String,
    pub data_dir: PathBuf,
    dir: tempfile::TempDir,
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
        let dir = tempfile::Builder::new()
            .prefix("ctxstore-loadgen-")
            .tempdir()?;
        let data_dir = dir.path().join("data");
        let ready = dir.path().join("ready");
        let log = std::fs::File::create(dir.path().join("server.log"))?;
        let mut child = Command::new(binary)
            .arg("--data")
            .arg(&data_dir)
            .args(["--listen", "127.0.0.1:0", "--ready-file"])
            .arg(&ready)
            .args(extra_args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(addr) = std::fs::read_to_string(&ready)
                && addr.ends_with('\n')
            {
                tracing::info!(addr = addr.trim(), data = %data_dir.display(), "spawned ctxstore-server");
                return Ok(SpawnedServer {
                    child,
                    addr: addr.trim().to_string(),
                    data_dir,
                    dir,
                });
            }
            if let Some(status) = child.try_wait()? {
                let log =
                    std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
                anyhow::bail!("ctxstore-server exited ({status}) before it was ready:\n{log}");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!("ctxstore-server did not become ready within 60 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then wait (up to 30 s) for the graceful stop.
    pub fn stop(mut self) -> anyhow::Result<()> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait()? {
                anyhow::ensure!(
                    status.success(),
                    "ctxstore-server stopped with {status}; log in {}",
                    self.dir.path().display()
                );
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                anyhow::bail!("ctxstore-server did not stop within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for SpawnedServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
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
