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

#[test]
fn a_full_disk_fails_appends_reads_go_on_and_nothing_acknowledged_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
        .arg(dir.path())
        .output();
    if !mounted.as_ref().is_ok_and(|output| output.status.success()) {
        eprintln!("skipping the tmpfs disk-full test: cannot mount a tmpfs here (not root?)");
        return;
    }
    let _mount = Mount(dir.path().to_path_buf());
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
