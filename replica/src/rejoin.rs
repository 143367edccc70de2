//! An old primary rejoins as a standby of the new one (decision 0031 §8, `--rejoin standby`).
//!
//! A primary that was fenced (another took the lease and the next epoch) may hold records the
//! new lineage lacks: local acknowledgements not shipped, unacknowledged writes, a partial cut.
//! They are never deleted: the whole store is **set aside** as `DIR/.diverged/E-<unix ms>/`
//! (E, the epoch it shipped under), where an operator can `verify` it or start a server on it.
//! Then a fresh restore of the replica's latest point (`fresh.rs`, as a stalled standby does)
//! becomes the store, and the server follows the replica.
//!
//! The store is set aside even when it holds nothing the lineage lacks: telling "equal" apart
//! needs every record compared with the fork point, and a wrong "equal" would delete writes;
//! the count below is only for the log and the figures.
//!
//! Crash safety: the set-aside is a few renames inside DIR (it may be a mount point: nothing is
//! renamed across it). Its intent is written durably first (`DIR/.rejoin` names the target),
//! and `finish` — run at every start before the store opens — completes a set-aside a crash
//! cut short. The fresh restore is marked complete (`fresh::mark_complete`) only once the store
//! is set aside, so `fresh::swap_in` never puts it in place over a primary's store; and
//! `swap_in` never moves `.diverged` or `.rejoin`.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use ctxstore_engine::files;

use crate::catalog;
use crate::error::ReplicaError;
use crate::follow::FollowConfig;
use crate::fresh::entries;
use crate::local::{self, LocalState};
use crate::remote::Remote;
use crate::restore::{self, RestorePoint, RestoreReport};
use crate::stats::now_unix_ms;
use crate::target;

/// Where set-aside stores live, one directory each.
pub const DIVERGED_DIR: &str = ".diverged";

/// A set-aside in progress: the name of its directory under `.diverged/`.
const INTENT_FILE: &str = ".rejoin";

/// Names in DIR that neither a set-aside nor a fresh restore's swap ever moves.
pub const KEPT_NAMES: [&str; 2] = [DIVERGED_DIR, INTENT_FILE];

/// `DIR/.diverged`.
pub fn diverged_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(DIVERGED_DIR)
}

/// A store set aside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetAside {
    /// `DIR/.diverged/E-<unix ms>`.
    pub dir: PathBuf,
}

/// The epoch a store in `data_dir` shipped under to `url` itself (a primary's, or a promoted
/// standby's), or `None` when it holds no store, a follower's store, or one of another
/// replica (those are left to `follow::prepare`, which follows or refuses them).
pub fn shipped_itself(data_dir: &Path, url: &str) -> Result<Option<u64>, ReplicaError> {
    if !data_dir
        .join(ctxstore_engine::store_dir::META_FILE)
        .exists()
    {
        return Ok(None);
    }
    let Some(state) = LocalState::load(data_dir)? else {
        return Ok(None);
    };
    if state.url != url {
        return Ok(None);
    }
    let follower = state.fork && local::load_inherited(data_dir)?.is_some();
    Ok((!follower).then_some(state.epoch))
}

/// The epoch the store in `data_dir` last shipped or followed under (0: none recorded).
pub fn store_epoch(data_dir: &Path) -> Result<u64, ReplicaError> {
    Ok(LocalState::load(data_dir)?.map_or(0, |state| state.epoch))
}

/// Sets the (closed) store in `data_dir` aside as `.diverged/E-<unix ms>/`, `E` being
/// `epoch`: every entry of DIR but `KEPT_NAMES` and a fresh restore's own is renamed there.
/// Never deletes anything.
pub fn set_aside(data_dir: &Path, epoch: u64) -> Result<SetAside, ReplicaError> {
    let name = format!("{epoch}-{}", now_unix_ms());
    let intent = data_dir.join(INTENT_FILE);
    files::write_file_durably(&intent, name.as_bytes())
        .map_err(|source| ReplicaError::io(&intent, source))?;
    finish(data_dir)?.ok_or_else(|| {
        ReplicaError::Invalid(format!(
            "{} vanished before the store was set aside",
            intent.display()
        ))
    })
}

/// Completes a set-aside whose intent `DIR/.rejoin` records (one a crash cut short, or the
/// one `set_aside` just began); nothing when there is none. Run before the store opens.
pub fn finish(data_dir: &Path) -> Result<Option<SetAside>, ReplicaError> {
    let intent = data_dir.join(INTENT_FILE);
    let name = match std::fs::read_to_string(&intent) {
        Ok(name) => name.trim().to_string(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ReplicaError::io(&intent, source)),
    };
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(ReplicaError::Invalid(format!(
            "{} names {name:?}, not a directory of {DIVERGED_DIR}/; remove it once the store \
             is checked",
            intent.display()
        )));
    }
    let diverged = diverged_dir(data_dir);
    let target = diverged.join(&name);
    files::create_dir_all(&target).map_err(|source| ReplicaError::io(&target, source))?;
    let mut moved = 0usize;
    for entry_name in entries(data_dir)? {
        let keep = KEPT_NAMES.contains(&entry_name.as_str())
            || crate::fresh::SWAP_NAMES.contains(&entry_name.as_str());
        if keep {
            continue;
        }
        let from = data_dir.join(&entry_name);
        files::rename_durably(&from, &target.join(&entry_name))
            .map_err(|source| ReplicaError::io(&from, source))?;
        moved += 1;
    }
    for dir in [&target, &diverged, data_dir] {
        files::sync_dir(dir).map_err(|source| ReplicaError::io(dir, source))?;
    }
    files::remove(&intent).map_err(|source| ReplicaError::io(&intent, source))?;
    files::sync_dir(data_dir).map_err(|source| ReplicaError::io(data_dir, source))?;
    tracing::warn!(
        set_aside = %target.display(),
        entries = moved,
        "the store that shipped to the replica itself is set aside, never deleted: inspect \
         it with `ctxstore-server verify --data` or a server started on it"
    );
    Ok(Some(SetAside { dir: target }))
}

/// Whether `data_dir` holds a set-aside store and nothing in its place yet (no store, no
/// completed fresh restore): the standby's store is then restored afresh before it starts.
pub fn needs_restore(data_dir: &Path) -> bool {
    diverged_dir(data_dir).exists()
        && !data_dir
            .join(ctxstore_engine::store_dir::META_FILE)
            .exists()
        && !crate::fresh::complete_path(data_dir).exists()
}

/// The replica's latest point restored into `DIR/.fresh` (an unfinished one there is dropped
/// first), not yet marked complete: the caller marks it (`fresh::mark_complete`) once the old
/// store is set aside. Blocking; the store may be open meanwhile (a fenced primary goes on
/// serving reads while it restores).
pub fn restore_fresh(
    data_dir: &Path,
    follow: &FollowConfig,
) -> Result<RestoreReport, ReplicaError> {
    let data_dir = absolute(data_dir)?;
    let fresh = crate::fresh::fresh_dir(&data_dir);
    let remote = target::open(&follow.url, &follow.s3)?;
    runtime()?.block_on(async {
        if fresh.exists() {
            files::remove_dir_all(&fresh).map_err(|source| ReplicaError::io(&fresh, source))?;
        }
        let report = restore::restore(&remote, &fresh, RestorePoint::Latest, None, &mut |p| {
            tracing::debug!(?p, "rejoining store restoring its replica afresh");
        })
        .await?;
        tracing::info!(
            generation = report.generation,
            seq = report.seq,
            records = report.log_records,
            "restored the replica's latest point afresh for the rejoin"
        );
        Ok(report)
    })
}

/// The record ids the store holds past the point the new lineage forked from (`durable`: its
/// durable watermark, `Engine::durable_records`): the records the new primary lacks. `None`
/// when the replica names no generation forked from the store's (nothing to compare with).
/// Reads the generations and the fork point's state; blocking.
pub fn diverged_records(
    data_dir: &Path,
    follow: &FollowConfig,
    durable: u64,
) -> Result<Option<RangeInclusive<u64>>, ReplicaError> {
    let Some(state) = LocalState::load(data_dir)? else {
        return Ok(None);
    };
    let remote = target::open(&follow.url, &follow.s3)?;
    runtime()?
        .block_on(fork_point_records(&remote, state.generation))
        .map(|forked_at| forked_at.map(|records| records.saturating_add(1)..=durable.max(records)))
}

/// The log records at the point the first generation forked from `generation` started.
async fn fork_point_records(remote: &Remote, generation: u32) -> Result<Option<u64>, ReplicaError> {
    let parent = catalog::generations(remote)
        .await?
        .into_iter()
        .filter_map(|record| record.parent)
        .find(|(parent, _)| *parent == generation);
    let Some((parent, seq)) = parent else {
        return Ok(None);
    };
    let (state, _) = catalog::state_at(remote, parent, seq).await?;
    Ok(Some(state.log_records))
}

/// How many records a range from `diverged_records` holds.
pub fn count(range: &RangeInclusive<u64>) -> u64 {
    (range.end() + 1).saturating_sub(*range.start())
}

fn absolute(dir: &Path) -> Result<PathBuf, ReplicaError> {
    if dir.is_absolute() {
        return Ok(dir.to_path_buf());
    }
    let here = std::env::current_dir().map_err(|source| ReplicaError::io(dir, source))?;
    Ok(here.join(dir))
}

fn runtime() -> Result<tokio::runtime::Runtime, ReplicaError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| ReplicaError::io("tokio runtime", source))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &Path, tag: &str) {
        std::fs::create_dir_all(dir.join("shards/0")).unwrap();
        std::fs::write(dir.join("meta"), tag).unwrap();
        std::fs::write(dir.join("shards/0/pack"), tag).unwrap();
    }

    #[test]
    fn a_set_aside_moves_the_whole_store_and_keeps_the_earlier_ones() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        store(dir, "first");
        let first = set_aside(dir, 3).unwrap();
        assert!(first.dir.starts_with(diverged_dir(dir)));
        assert!(
            first
                .dir
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("3-")
        );
        assert_eq!(
            std::fs::read_to_string(first.dir.join("meta")).unwrap(),
            "first"
        );
        assert_eq!(entries(dir).unwrap(), [DIVERGED_DIR]);
        assert!(needs_restore(dir));

        std::thread::sleep(std::time::Duration::from_millis(2));
        store(dir, "second");
        let second = set_aside(dir, 5).unwrap();
        assert_ne!(first.dir, second.dir);
        assert_eq!(
            std::fs::read_to_string(first.dir.join("meta")).unwrap(),
            "first"
        );
        assert_eq!(
            std::fs::read_to_string(second.dir.join("meta")).unwrap(),
            "second"
        );
    }

    #[test]
    fn a_set_aside_cut_short_is_finished_at_the_next_start() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        store(dir, "old");
        // The intent written and one entry moved, as a crash would leave them.
        std::fs::write(dir.join(INTENT_FILE), "7-1").unwrap();
        let target = diverged_dir(dir).join("7-1");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::rename(dir.join("meta"), target.join("meta")).unwrap();
        let finished = finish(dir).unwrap().unwrap();
        assert_eq!(finished.dir, target);
        assert_eq!(entries(&target).unwrap(), ["meta", "shards"]);
        assert_eq!(entries(dir).unwrap(), [DIVERGED_DIR]);
        assert_eq!(finish(dir).unwrap(), None, "nothing left to finish");
    }

    #[test]
    fn a_fresh_restore_swapped_in_leaves_the_set_aside_store_alone() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        store(dir, "old");
        let aside = set_aside(dir, 1).unwrap();
        store(&crate::fresh::fresh_dir(dir), "new");
        crate::fresh::mark_complete(dir).unwrap();
        assert!(crate::fresh::swap_in(dir).unwrap());
        assert_eq!(std::fs::read_to_string(dir.join("meta")).unwrap(), "new");
        assert_eq!(
            std::fs::read_to_string(aside.dir.join("meta")).unwrap(),
            "old"
        );
    }
}
