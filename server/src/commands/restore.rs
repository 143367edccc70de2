//! `ctxstore-server restore`: a new store built from a replica's point, checked and verified.

use std::process::ExitCode;

use anyhow::Context;

use crate::S3Args;

/// Which point: the last at or before a time, exactly a record, or the latest; of a
/// generation's lineage, or the newest's.
pub(crate) struct Point {
    pub at: Option<u64>,
    pub at_seq: Option<u64>,
    pub generation: Option<u32>,
}

/// `ctxstore-server restore`: the replica's point into a new store, opened and verified (with
/// `master_key`, when the store seals).
pub(crate) fn restore(
    from: &str,
    to: &std::path::Path,
    Point {
        at,
        at_seq,
        generation,
    }: Point,
    s3: &S3Args,
    umask: u32,
    master_key: Option<std::sync::Arc<ctxstore_engine::seal::MasterKey>>,
) -> anyhow::Result<ExitCode> {
    use ctxstore_replica::restore::RestorePoint;
    rustix::process::umask(rustix::fs::Mode::from_bits_truncate(umask));
    let to = std::path::absolute(to).with_context(|| format!("resolving {}", to.display()))?;
    let point = match (at, at_seq) {
        (Some(unix_ms), _) => RestorePoint::AtTime { unix_ms },
        (None, Some(record_id)) => RestorePoint::AtSeq { record_id },
        (None, None) => RestorePoint::Latest,
    };
    let remote = ctxstore_replica::target::open(from, &s3.settings())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .context("starting the restore's runtime")?;
    let started = std::time::Instant::now();
    let mut progress = restore_progress(started);
    let report = runtime
        .block_on(ctxstore_replica::restore::restore(
            &remote,
            &to,
            point,
            generation,
            &mut progress,
        ))
        .with_context(|| format!("restoring {from} into {}", to.display()))?;
    let (floors, verified) = check_restored(&to, &report, &remote, &runtime, master_key)?;
    println!(
        "restored_dir {}\ngeneration {}\nseq {}\npoint_unix_ms {}\nlog_records {}\nnext_turn_id {}\nnext_context_id {}\nturns {}\nblobs {}\nobjects {}\nbytes {}\nduration_ms {}",
        report.dir.display(),
        report.generation,
        report.seq,
        report.created_unix_ms,
        report.log_records,
        floors.records,
        floors.contexts,
        verified.turns,
        verified.blobs,
        report.objects,
        report.bytes,
        started.elapsed().as_millis()
    );
    Ok(ExitCode::SUCCESS)
}

/// A restore's progress on stderr: a line a second at most, and the last one.
fn restore_progress(
    started: std::time::Instant,
) -> impl FnMut(ctxstore_replica::restore::Progress) {
    let mut last_line = std::time::Instant::now() - std::time::Duration::from_secs(1);
    move |done: ctxstore_replica::restore::Progress| {
        let finished = done.objects_done == done.objects_total;
        if finished || last_line.elapsed() >= std::time::Duration::from_secs(1) {
            last_line = std::time::Instant::now();
            let seconds = started.elapsed().as_secs_f64().max(0.001);
            eprintln!(
                "restore: {}/{} objects, {:.1}/{:.1} MiB, {:.1} MiB/s",
                done.objects_done,
                done.objects_total,
                done.bytes_done as f64 / 1048576.0,
                done.bytes_total as f64 / 1048576.0,
                done.bytes_done as f64 / 1048576.0 / seconds
            );
        }
    }
}

/// The restored store opened (recovery checks it), every record of the point found in it,
/// its ids raised past the replica's, then verified.
fn check_restored(
    to: &std::path::Path,
    report: &ctxstore_replica::restore::RestoreReport,
    remote: &ctxstore_replica::Remote,
    runtime: &tokio::runtime::Runtime,
    master_key: Option<std::sync::Arc<ctxstore_engine::seal::MasterKey>>,
) -> anyhow::Result<(
    ctxstore_engine::id_floors::IdFloors,
    ctxstore_engine::VerifyReport,
)> {
    // The restored store is a store like any other: recovery checks it, then verify.
    let shards = ctxstore_engine::store_dir::StoreDir::new(to)
        .existing_shard_count()?
        .unwrap_or(1);
    let mut config = ctxstore_engine::EngineConfig::new(to).with_shards(shards);
    config.master_key = master_key.clone();
    let engine = ctxstore_engine::Engine::open(config)
        .with_context(|| format!("opening the restored store {}", to.display()))?;
    // Recovery keeps a turn only with its blob: a store that opens with fewer records than
    // the point holds lost some (issue 46: this exited 0 and verified). Never a silent loss.
    let held = engine.durable_records();
    if held < report.log_records {
        engine.shutdown();
        anyhow::bail!(
            "the store restored in {} opens with records up to {held}, not the point's {}: a \
             blob record {} names is in no object the point reads; restore an earlier point \
             (--at-seq {held} or before), and report this",
            to.display(),
            report.log_records,
            held + 1
        );
    }
    // A restored store is started to take writes: its ids start past every one the
    // replica's primaries may have handed out without shipping it (issue 46 item 8).
    let floors = runtime
        .block_on(ctxstore_replica::ids::start_past_replica(remote, &engine))
        .with_context(|| format!("raising the ids of {}", to.display()));
    engine.shutdown();
    let floors = floors?;
    let verified = ctxstore_engine::verify_sealed(to, master_key)?;
    if !verified.is_ok() {
        eprintln!("{verified}");
        anyhow::bail!("the restored store in {} does not verify", to.display());
    }
    Ok((floors, verified))
}
