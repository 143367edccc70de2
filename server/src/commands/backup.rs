//! `ctxstore-server backup`: an offline copy of a stopped store.

use std::process::ExitCode;

use anyhow::Context;

/// The offline backup: open the store (recovery runs as at a start), copy it, close it.
pub(crate) fn backup(
    data: &std::path::Path,
    to: &std::path::Path,
    umask: u32,
    master_key: Option<std::sync::Arc<ctxstore_engine::seal::MasterKey>>,
) -> anyhow::Result<ExitCode> {
    // Before anything is created, as for a server: the copy holds the same private payloads.
    rustix::process::umask(rustix::fs::Mode::from_bits_truncate(umask));
    if !data.join("ctxstore.meta").exists() {
        anyhow::bail!("{} is not a ctxstore data directory", data.display());
    }
    let to = std::path::absolute(to).with_context(|| format!("resolving {}", to.display()))?;
    // The store keeps the shard count it was created with.
    let shards = ctxstore_engine::store_dir::StoreDir::new(data)
        .existing_shard_count()
        .with_context(|| format!("reading {}", data.display()))?
        .unwrap_or(1);
    let mut config = ctxstore_engine::EngineConfig::new(data).with_shards(shards);
    // A store that seals opens only under its key; the copy holds no key (decision 0032 §5).
    config.master_key = master_key;
    let engine = ctxstore_engine::Engine::open(config)
        .with_context(|| format!("opening {}", data.display()))?;
    let report = engine.backup(&to);
    engine.shutdown();
    let report =
        report.with_context(|| format!("backing up {} to {}", data.display(), to.display()))?;
    println!(
        "backup_dir {}\nturns {}\nblobs {}\nbytes {} ({} hard-linked)\nduration_ms {}",
        report.dir.display(),
        report.turns,
        report.blobs,
        report.bytes,
        report.linked_bytes,
        report.duration_ms
    );
    Ok(ExitCode::SUCCESS)
}
