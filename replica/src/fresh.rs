//! A standby that cannot apply what its primary shipped starts again from a fresh restore
//! rather than stopping for good (issue 46): the follower restores the replica's latest point
//! into `DIR/.fresh` while the stalled store goes on serving what it has, marks it complete,
//! and the server restarts onto it (`swap_in`). A standby holds nothing of its own (every
//! byte came from the replica), so its old store is dropped, never merged.
//!
//! The swap is a few renames inside the data directory (it may be a mount point: nothing is
//! renamed across it), in two phases, each marked durably so that a crash anywhere is
//! finished by the next start (`swap_in` runs before a standby opens its store):
//!
//! 1. `.fresh.complete` exists: every entry of DIR but the swap's own is renamed into
//!    `.stalled/`, then `.stalled.done` is written;
//! 2. `.stalled.done` exists: every entry of `.fresh/` is renamed into DIR, then `.fresh`,
//!    `.fresh.complete`, `.stalled` and `.stalled.done` are removed, in that order.
//!
//! A `.fresh/` without `.fresh.complete` is a fresh restore that did not finish: removed.
//!
//! A rejoining primary's set-aside store (`rejoin.rs`: `.diverged/`, `.rejoin`) is never
//! moved by the swap: `.stalled/` is removed at its end, and a diverged store is never deleted.

use std::path::{Path, PathBuf};

use ctxstore_engine::files;

use crate::error::ReplicaError;

/// Where the fresh restore is written.
pub fn fresh_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(".fresh")
}

/// Written once the fresh restore in `.fresh` is whole: from then on it replaces the store.
pub fn complete_path(data_dir: &Path) -> PathBuf {
    data_dir.join(".fresh.complete")
}

fn stalled_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(".stalled")
}

fn stalled_done_path(data_dir: &Path) -> PathBuf {
    data_dir.join(".stalled.done")
}

/// The swap's own names, never moved.
pub(crate) const SWAP_NAMES: [&str; 4] = [".fresh", ".fresh.complete", ".stalled", ".stalled.done"];

/// Marks the fresh restore whole (durably): the next `swap_in` puts it in place.
pub fn mark_complete(data_dir: &Path) -> Result<(), ReplicaError> {
    let path = complete_path(data_dir);
    files::write_file_durably(&path, b"complete\n")
        .map_err(|source| ReplicaError::io(&path, source))
}

/// Puts a completed fresh restore in place of the store, or finishes a swap a crash
/// interrupted; removes an unfinished fresh restore. The store must not be open. Answers
/// whether a fresh restore was put in place.
pub fn swap_in(data_dir: &Path) -> Result<bool, ReplicaError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReplicaError::io(&path, source)
    };
    let fresh = fresh_dir(data_dir);
    let complete = complete_path(data_dir);
    let stalled = stalled_dir(data_dir);
    let stalled_done = stalled_done_path(data_dir);
    if !complete.exists() {
        // Nothing to put in place: leftovers of an unfinished restore or of a finished swap.
        let mut removed = false;
        for dir in [&fresh, &stalled] {
            if dir.exists() {
                files::remove_dir_all(dir).map_err(io(dir))?;
                removed = true;
            }
        }
        if stalled_done.exists() {
            files::remove(&stalled_done).map_err(io(&stalled_done))?;
            removed = true;
        }
        if removed {
            files::sync_dir(data_dir).map_err(io(data_dir))?;
        }
        return Ok(false);
    }
    if !stalled_done.exists() {
        files::create_dir_all(&stalled).map_err(io(&stalled))?;
        for name in entries(data_dir)? {
            let kept = SWAP_NAMES.contains(&name.as_str())
                || crate::rejoin::KEPT_NAMES.contains(&name.as_str());
            if !kept {
                let from = data_dir.join(&name);
                files::rename_durably(&from, &stalled.join(&name)).map_err(io(&from))?;
            }
        }
        files::sync_dir(&stalled).map_err(io(&stalled))?;
        files::sync_dir(data_dir).map_err(io(data_dir))?;
        files::write_file_durably(&stalled_done, b"done\n").map_err(io(&stalled_done))?;
    }
    if fresh.exists() {
        for name in entries(&fresh)? {
            let from = fresh.join(&name);
            files::rename_durably(&from, &data_dir.join(&name)).map_err(io(&from))?;
        }
        files::sync_dir(data_dir).map_err(io(data_dir))?;
        files::remove_dir_all(&fresh).map_err(io(&fresh))?;
    }
    files::remove(&complete).map_err(io(&complete))?;
    files::sync_dir(data_dir).map_err(io(data_dir))?;
    if stalled.exists() {
        files::remove_dir_all(&stalled).map_err(io(&stalled))?;
    }
    files::remove(&stalled_done).map_err(io(&stalled_done))?;
    files::sync_dir(data_dir).map_err(io(data_dir))?;
    tracing::info!(
        data = %data_dir.display(),
        "the standby's fresh restore is in place of its stalled store"
    );
    Ok(true)
}

/// The names in `dir`, in order (also the rejoin's, `rejoin.rs`).
pub(crate) fn entries(dir: &Path) -> Result<Vec<String>, ReplicaError> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|source| ReplicaError::io(dir, source))? {
        let entry = entry.map_err(|source| ReplicaError::io(dir, source))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Err(ReplicaError::Invalid(format!(
                "{} holds an entry whose name is not UTF-8: {name:?}",
                dir.display()
            )));
        };
        names.push(name.to_string());
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &Path, tag: &str) {
        std::fs::create_dir_all(dir.join("shards/0")).unwrap();
        std::fs::write(dir.join("meta"), tag).unwrap();
        std::fs::write(dir.join("shards/0/pack"), tag).unwrap();
    }

    fn tag(dir: &Path) -> String {
        assert_eq!(
            std::fs::read_to_string(dir.join("meta")).unwrap(),
            std::fs::read_to_string(dir.join("shards/0/pack")).unwrap()
        );
        std::fs::read_to_string(dir.join("meta")).unwrap()
    }

    #[test]
    fn a_complete_fresh_restore_replaces_the_store_and_an_unfinished_one_goes() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        store(dir, "old");
        store(&fresh_dir(dir), "new");
        assert!(!swap_in(dir).unwrap(), "unfinished: not put in place");
        assert_eq!(tag(dir), "old");
        assert!(!fresh_dir(dir).exists());

        store(&fresh_dir(dir), "new");
        mark_complete(dir).unwrap();
        assert!(swap_in(dir).unwrap());
        assert_eq!(tag(dir), "new");
        assert_eq!(entries(dir).unwrap(), ["meta", "shards"]);
    }

    #[test]
    fn a_swap_cut_short_after_either_phase_is_finished_by_the_next() {
        for cut_after in 1..=3 {
            let root = tempfile::tempdir().unwrap();
            let dir = root.path();
            store(dir, "old");
            store(&fresh_dir(dir), "new");
            mark_complete(dir).unwrap();
            // Phase 1 by hand, then (2, 3) part of phase 2, as a crash would leave them.
            std::fs::create_dir(stalled_dir(dir)).unwrap();
            for name in ["meta", "shards"] {
                std::fs::rename(dir.join(name), stalled_dir(dir).join(name)).unwrap();
            }
            std::fs::write(stalled_done_path(dir), "done\n").unwrap();
            if cut_after >= 2 {
                std::fs::rename(fresh_dir(dir).join("meta"), dir.join("meta")).unwrap();
            }
            if cut_after >= 3 {
                std::fs::rename(fresh_dir(dir).join("shards"), dir.join("shards")).unwrap();
            }
            assert!(swap_in(dir).unwrap(), "cut after step {cut_after}");
            assert_eq!(tag(dir), "new", "cut after step {cut_after}");
            assert_eq!(entries(dir).unwrap(), ["meta", "shards"]);
        }
    }
}
