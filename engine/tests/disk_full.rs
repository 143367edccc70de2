//! A real full disk: a 4 MiB tmpfs. Appends fail with NoSpace while reads go on; once space
//! returns, appends work again; after a restart everything acknowledged is there. Needs root
//! to mount (CI runs as root); elsewhere it says so and does nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::*;
use ctxstore_engine::{Engine, EngineConfig, ErrorKind, verify};

struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A tmpfs of `size` mounted on a new temporary directory; `None` where mounting is not
/// allowed (not root), which the test says before it returns.
fn tmpfs(size: &str) -> Option<(tempfile::TempDir, Mount)> {
    let dir = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir.path())
        .output();
    if !mounted.as_ref().is_ok_and(|output| output.status.success()) {
        eprintln!("skipping a tmpfs disk-full test: cannot mount a tmpfs here (not root?)");
        return None;
    }
    let mount = Mount(dir.path().to_path_buf());
    Some((dir, mount))
}

#[test]
fn a_full_disk_fails_appends_reads_go_on_and_nothing_acknowledged_is_lost() {
    let Some((dir, _mount)) = tmpfs("4m") else {
        return;
    };
    // Room to give back later.
    let filler = dir.path().join("filler");
    std::fs::write(&filler, vec![1u8; 1 << 20]).unwrap();

    let store = dir.path().join("store");
    let mut config = EngineConfig::new(&store).with_shards(1);
    config.limits.blob_bytes_max = 256 * 1024;
    config.limits.shard_batch_bytes_max = 512 * 1024;
    config.limits.pack_bytes_max = 1 << 20;
    config.limits.log_preallocate_bytes = 16 * 1024;
    let engine = Engine::open(config.clone()).unwrap();
    let context = block_on(engine.create_context()).unwrap().context_id;
    let mut acknowledged = Vec::new();
    let mut no_space = 0;
    for seed in 0..200u64 {
        match append(&engine, context, &random_payload(seed, 100_000), None) {
            Ok(appended) => acknowledged.push(appended.turn),
            Err(error) => {
                assert_eq!(error.kind(), ErrorKind::NoSpace, "{error}");
                no_space += 1;
                if no_space == 3 {
                    break;
                }
            }
        }
    }
    assert_eq!(no_space, 3, "the disk never filled");
    assert!(
        acknowledged.len() >= 10,
        "{} appends fit",
        acknowledged.len()
    );
    assert!(!engine.stats().read_only);

    // Reads go on.
    let page = block_on(engine.last(context, 1000, false)).unwrap();
    assert_eq!(page.turns.len(), acknowledged.len());
    let last = acknowledged.last().unwrap();
    assert_eq!(
        block_on(engine.blob(last.payload_hash)).unwrap().len(),
        100_000
    );

    // Space returns: appends work again.
    std::fs::remove_file(&filler).unwrap();
    let after = append(&engine, context, &random_payload(999, 100_000), None).unwrap();
    assert_eq!(after.turn.parent_turn_id, last.turn_id);
    acknowledged.push(after.turn);
    engine.shutdown();
    drop(engine);

    let engine = Engine::open(config).unwrap();
    let page = block_on(engine.last(context, 1000, true)).unwrap();
    let stored: Vec<_> = page.turns.iter().map(|turn| turn.turn).collect();
    assert_eq!(stored, acknowledged);
    engine.shutdown();
    let report = verify(&store).unwrap();
    assert!(report.is_ok(), "{report}");
}

/// Issue 29 item 3: a store that filled its file system can still collect. Appends fill a
/// 16 MiB tmpfs until NO_SPACE; a context is deleted; a collection then compacts (wholly dead
/// packs go without a copy; the store's disk reserve is given up for the copies), leaves no
/// `.compact` file behind, and appends succeed again. After a restart on the still nearly
/// full disk the store opens, collects again and takes appends; it verifies.
#[test]
fn a_full_disk_can_collect_and_take_appends_again() {
    let Some((dir, _mount)) = tmpfs("16m") else {
        return;
    };
    let store = dir.path().join("store");
    let mut config = gc_config(&store).with_shards(1);
    config.limits.blob_bytes_max = 256 * 1024;
    config.limits.shard_batch_bytes_max = 512 * 1024;
    config.limits.pack_bytes_max = 1 << 20;
    config.limits.log_preallocate_bytes = 16 * 1024;
    config.disk_reserve_bytes = 2 << 20;
    let engine = Engine::open(config.clone()).unwrap();
    let kept = block_on(engine.create_context()).unwrap().context_id;
    let doomed = block_on(engine.create_context()).unwrap().context_id;
    let mut acknowledged = Vec::new();
    let mut no_space = 0;
    for seed in 0..1_000u64 {
        // Two turns of the doomed context for one kept: most of each pack dies below.
        let context = if seed % 3 == 0 { kept } else { doomed };
        match append(&engine, context, &random_payload(seed, 100_000), None) {
            Ok(appended) if context == kept => acknowledged.push(appended.turn),
            Ok(_) => {}
            Err(error) => {
                assert_eq!(error.kind(), ErrorKind::NoSpace, "{error}");
                no_space += 1;
                if no_space == 3 {
                    break;
                }
            }
        }
    }
    assert_eq!(no_space, 3, "the disk never filled");
    block_on(engine.delete_context(&ctxstore_engine::ContextRef::Id(doomed))).unwrap();
    let report = engine.gc().unwrap();
    assert!(report.packs_compacted >= 1, "{report:?}");
    assert!(report.bytes_reclaimed >= 4 << 20, "{report:?}");
    let leftovers = compact_files(&store);
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
    for seed in 0..5u64 {
        let appended = append(&engine, kept, &random_payload(10_000 + seed, 100_000), None)
            .expect("appends succeed after the collection");
        acknowledged.push(appended.turn);
    }
    engine.shutdown();
    drop(engine);

    // A restart on the still nearly full disk opens, collects and appends.
    let engine = Engine::open(config).unwrap();
    engine.gc().unwrap();
    let appended = append(&engine, kept, &random_payload(20_000, 100_000), None).unwrap();
    acknowledged.push(appended.turn);
    let page = block_on(engine.last(kept, 1_000, true)).unwrap();
    let stored: Vec<_> = page.turns.iter().map(|turn| turn.turn).collect();
    assert_eq!(stored, acknowledged);
    engine.shutdown();
    assert!(compact_files(&store).is_empty());
    let report = verify(&store).unwrap();
    assert!(report.is_ok(), "{report}");
}

/// Every `.compact` file under `dir`.
fn compact_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.to_string_lossy().ends_with(".compact") {
                found.push(path);
            }
        }
    }
    found
}
