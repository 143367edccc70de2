//! Online backup (issue 18 item 5), in the engine: a copy taken while writers append holds
//! every turn acknowledged before it started, with its payload, and passes `verify`; the
//! copy opens as a store; bad targets are typed errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use bytes::Bytes;
use common::{append, block_on, config, random_payload};
use ctxstore_engine::contexts::ListQuery;
use ctxstore_engine::{ContextRef, Engine, ErrorKind, NewContext, TurnId, verify};

#[test]
fn a_backup_under_appends_holds_everything_acknowledged_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = config(dir.path());
    // Small packs: the copy has sealed packs (hard-linked) and an open one (copied).
    settings.limits.pack_bytes_max = 256 * 1024;
    settings.limits.blob_bytes_max = 64 * 1024;
    settings.limits.shard_batch_bytes_max = 256 * 1024;
    let engine = Engine::open(settings).unwrap();
    let named = block_on(engine.create(NewContext {
        name: Some("thread".into()),
        tags: vec![("status".into(), "idle".into())],
        ..NewContext::default()
    }))
    .unwrap()
    .context
    .head
    .context_id;
    block_on(engine.kv_put(
        &ContextRef::Id(named),
        vec![(b"k".to_vec(), Bytes::from("v"))],
        false,
    ))
    .unwrap();

    // Writers on three contexts keep appending during the backup.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3u64)
        .map(|writer| {
            let engine = engine.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let context = block_on(engine.create_context()).unwrap().context_id;
                let mut acked = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Acquire) || i < 50 {
                    let payload = random_payload(writer * 1_000_000 + i, 3000);
                    let appended = append(&engine, context, &payload, None).unwrap();
                    acked.push((appended.turn.turn_id, payload, Instant::now()));
                    i += 1;
                }
                acked
            })
        })
        .collect();
    while engine.stats().turns < 400 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let before = engine.stats();
    let copy_dir = tempfile::tempdir().unwrap();
    let target = copy_dir.path().join("copy");
    let backup_started = Instant::now();
    let report = engine.backup(&target).unwrap();
    stop.store(true, Ordering::Release);
    let acked: Vec<Vec<(TurnId, Vec<u8>, Instant)>> =
        writers.into_iter().map(|w| w.join().unwrap()).collect();
    assert!(report.turns >= before.turns, "{report:?} vs {before:?}");
    assert!(report.blobs >= before.blobs);
    assert!(report.linked_bytes > 0, "sealed packs are hard-linked");

    // A second backup into the same (now non-empty) directory, a relative path, and a
    // directory inside the store are refused.
    for bad in [
        target.clone(),
        std::path::PathBuf::from("relative/dir"),
        dir.path().join("inside"),
    ] {
        let error = engine.backup(&bad).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    }
    assert!(
        !dir.path().join("inside").exists(),
        "a refused target leaves nothing in the store"
    );
    engine.shutdown();

    let report_check = verify(&target).unwrap();
    assert!(report_check.is_ok(), "{report_check}");
    assert_eq!(report_check.turns, report.turns);
    let copy = Engine::open(config(&target)).unwrap();
    // Every turn the copy has reads back with the payload the writer appended; at least
    // everything acknowledged before the backup began is there.
    let mut present = 0u64;
    for (turn_id, payload, acked_at) in acked.iter().flatten() {
        match block_on(copy.turn(*turn_id)) {
            Ok(turn) => {
                assert_eq!(
                    block_on(copy.blob(turn.payload_hash)).unwrap(),
                    Bytes::from(payload.clone())
                );
                present += 1;
            }
            Err(error) => {
                assert_eq!(error.kind(), ErrorKind::NotFound);
                assert!(
                    *acked_at > backup_started,
                    "turn {turn_id} was acknowledged before the backup began and is missing"
                );
            }
        }
    }
    assert!(present >= before.turns, "{present} of {}", before.turns);
    let meta = copy.context(&ContextRef::Name("thread".into())).unwrap();
    assert_eq!(meta.head.context_id, named);
    assert_eq!(
        copy.kv_get(&ContextRef::Id(named), b"k")
            .unwrap()
            .unwrap()
            .value_len,
        1
    );
    let listed = copy
        .list_contexts(&ListQuery {
            tags: vec![("status".into(), "idle".into())],
            limit: 10,
            ..ListQuery::default()
        })
        .unwrap();
    assert_eq!(listed.contexts.len(), 1);
    // The copy is a store of its own: it takes appends.
    append(&copy, named, b"after the backup", None).unwrap();
    copy.shutdown();
}
