//! No store writes a byte another store reads (issue 29 item 1, decision 0017). A backup on
//! the data directory's file system hard-links the sealed packs, and an operator may copy a
//! store with `cp -al`: the two stores then share inodes. A garbage collection on either
//! side, a repair, and the appends of a store opened on such a copy must leave the other
//! side's files exactly as they were: it verifies clean and reads back every turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::{append, block_on, filled_context, gc_config, random_payload};
use ctxstore_engine::{ContextId, ContextRef, Engine, EngineConfig, TurnId, verify};

/// Small packs, so that a few hundred KiB of turns fill several sealed packs.
fn small_packs(dir: &Path) -> EngineConfig {
    let mut config = gc_config(dir);
    config.limits.pack_bytes_max = 128 * 1024;
    config.limits.blob_bytes_max = 64 * 1024;
    config.limits.shard_batch_bytes_max = 128 * 1024;
    config
}

/// Every turn of every context, by ContextID: (TurnID, payload) oldest first.
type Contents = BTreeMap<ContextId, Vec<(TurnId, Vec<u8>)>>;

/// Two contexts that stay and one that a collection will take, each over several packs.
fn fill(engine: &Engine) -> (Contents, ContextId) {
    let mut kept = Contents::new();
    for seed in 0..2u64 {
        let context = filled_context(engine, seed, 0, 0);
        let mut turns = Vec::new();
        for i in 0..40 {
            let payload = random_payload(seed * 1_000 + i, 6_000);
            let turn = append(engine, context, &payload, None)
                .unwrap()
                .turn
                .turn_id;
            turns.push((turn, payload));
        }
        kept.insert(context, turns);
    }
    let doomed = filled_context(engine, 7, 60, 6_000);
    (kept, doomed)
}

/// Every kept turn reads back with its payload.
fn check_contents(engine: &Engine, kept: &Contents) {
    for (context, turns) in kept {
        let page = block_on(engine.last(*context, turns.len() as u32, true)).unwrap();
        let read: Vec<(TurnId, Vec<u8>)> = page
            .turns
            .iter()
            .map(|turn| (turn.turn.turn_id, turn.payload.as_ref().unwrap().to_vec()))
            .collect();
        assert_eq!(&read, turns, "context {context}");
    }
}

/// Each pack file's path, length and inode number.
fn packs(dir: &Path) -> Vec<(PathBuf, u64, u64)> {
    let mut packs = Vec::new();
    for shard in std::fs::read_dir(dir.join("blobs")).unwrap() {
        for entry in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            let path = entry.unwrap().path();
            if path
                .extension()
                .is_some_and(|extension| extension == "pack")
            {
                let metadata = std::fs::metadata(&path).unwrap();
                packs.push((path, metadata.len(), metadata.ino()));
            }
        }
    }
    packs.sort();
    packs
}

fn assert_verifies(dir: &Path) {
    let report = verify(dir).unwrap();
    assert!(report.is_ok(), "verify {}: {report}", dir.display());
}

/// A store and its online backup beside it on one file system, sharing sealed packs.
fn store_and_backup(root: &Path) -> (PathBuf, PathBuf, Contents, ContextId) {
    let original = root.join("store");
    let copy = root.join("backup");
    let engine = Engine::open(small_packs(&original)).unwrap();
    let (kept, doomed) = fill(&engine);
    let report = engine.backup(&copy).unwrap();
    assert!(
        report.linked_bytes > 0,
        "sealed packs are hard-linked: {report:?}"
    );
    let shared = packs(&original)
        .iter()
        .filter(|(path, _, _)| std::fs::metadata(path).unwrap().nlink() > 1)
        .count();
    assert!(shared >= 2, "the backup shares sealed packs with the store");
    engine.shutdown();
    (original, copy, kept, doomed)
}

/// Deletes `doomed` and collects, compacting packs the backup shares.
fn delete_and_collect(dir: &Path, doomed: ContextId) {
    let engine = Engine::open(small_packs(dir)).unwrap();
    block_on(engine.delete_context(&ContextRef::Id(doomed))).unwrap();
    let report = engine.gc().unwrap();
    assert!(report.packs_compacted >= 1, "{report:?}");
    assert!(report.turns_dead >= 60, "{report:?}");
    engine.shutdown();
}

#[test]
fn a_collection_in_the_store_leaves_its_backup_on_the_same_file_system_whole() {
    let root = tempfile::tempdir().unwrap();
    let (original, copy, kept, doomed) = store_and_backup(root.path());
    let copy_packs = packs(&copy);
    delete_and_collect(&original, doomed);

    // The backup's packs are as they were, byte lengths and all, and it is a whole store.
    assert_eq!(packs(&copy), copy_packs);
    assert_verifies(&copy);
    assert_verifies(&original);
    let engine = Engine::open(small_packs(&copy)).unwrap();
    check_contents(&engine, &kept);
    engine.shutdown();
    let engine = Engine::open(small_packs(&original)).unwrap();
    check_contents(&engine, &kept);
    engine.shutdown();
}

#[test]
fn a_collection_in_a_served_backup_leaves_the_original_store_whole() {
    let root = tempfile::tempdir().unwrap();
    let (original, copy, kept, doomed) = store_and_backup(root.path());
    let original_packs = packs(&original);
    // The README's "serve the copy": a store opened on the backup, collected there.
    delete_and_collect(&copy, doomed);

    assert_eq!(packs(&original), original_packs);
    assert_verifies(&original);
    assert_verifies(&copy);
    let engine = Engine::open(small_packs(&original)).unwrap();
    check_contents(&engine, &kept);
    engine.shutdown();
}

/// `cp -al`: every file of the store hard-linked into a new directory.
fn link_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            link_tree(&entry.path(), &target);
        } else {
            std::fs::hard_link(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn a_store_opened_on_a_hard_linked_copy_writes_only_files_of_its_own() {
    let root = tempfile::tempdir().unwrap();
    let original = root.path().join("store");
    let copy = root.path().join("copy");
    let engine = Engine::open(small_packs(&original)).unwrap();
    let (kept, doomed) = fill(&engine);
    engine.shutdown();
    link_tree(&original, &copy);
    let before: Vec<(PathBuf, u64)> = std::fs::read_dir(&original)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .chain(packs(&original).into_iter().map(|(path, _, _)| path))
        .filter(|path| path.is_file())
        .map(|path| {
            let len = std::fs::metadata(&path).unwrap().len();
            (path, len)
        })
        .collect();
    let contents_before: Vec<Vec<u8>> = before
        .iter()
        .map(|(path, _)| std::fs::read(path).unwrap())
        .collect();

    // The copy takes appends (its log, index and open pack), a collection and a reopen,
    // while the original's server runs: the copy's lock is its own.
    let running = Engine::open(small_packs(&original)).unwrap();
    let engine = Engine::open(small_packs(&copy)).unwrap();
    let context = filled_context(&engine, 3, 30, 6_000);
    block_on(engine.delete_context(&ContextRef::Id(doomed))).unwrap();
    engine.gc().unwrap();
    append(&engine, context, b"after the collection", None).unwrap();
    engine.shutdown();
    running.shutdown();
    assert_verifies(&copy);

    // Every file of the original holds exactly the bytes it held.
    for ((path, len), bytes) in before.iter().zip(&contents_before) {
        let now = std::fs::read(path).unwrap();
        assert_eq!(now.len() as u64, *len, "{}", path.display());
        assert!(now == *bytes, "{} changed", path.display());
    }
    assert_verifies(&original);
    let engine = Engine::open(small_packs(&original)).unwrap();
    check_contents(&engine, &kept);
    engine.shutdown();
}
