//! Per-entry key-value TTL (issue 34, decision 0028), in the engine: an entry put with a TTL
//! is invisible to every read from its expiry on (before the reaper ran), a refresh or a
//! touch restarts it, the reaper removes expired entries with a durable record so that the
//! collector takes their blobs, and all of it survives a reopen and passes `verify`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{block_on, config, gc_config, new_context, random_payload};
use ctxstore_engine::{BlobHash, ContextRef, Engine, ErrorKind, verify};

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn put(engine: &Engine, context: &ContextRef, key: &str, value: &[u8], ttl_ms: u64) {
    let entries = vec![(key.as_bytes().to_vec(), Bytes::copy_from_slice(value))];
    block_on(engine.kv_put_ttl(context, entries, false, ttl_ms)).unwrap();
}

fn keys(engine: &Engine, context: &ContextRef) -> Vec<String> {
    let page = engine.kv_scan(context, b"", None, 1000).unwrap();
    page.iter()
        .map(|item| String::from_utf8(item.key.to_vec()).unwrap())
        .collect()
}

#[test]
fn expired_entries_are_invisible_at_once_and_the_reaper_removes_them_durably() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = config(dir.path());
    // The reaper never runs here: reads alone must hide what expired.
    settings.reaper_interval_ms = 3_600_000;
    let engine = Engine::open(settings.clone()).unwrap();
    let context = ContextRef::Id(new_context(&engine));
    let before_ms = now_ms();
    put(&engine, &context, "short", b"s", 300);
    put(&engine, &context, "long", b"l", 3_600_000);
    put(&engine, &context, "none", b"n", 0);
    let short = engine.kv_get(&context, b"short").unwrap().unwrap();
    assert_eq!(short.ttl_ms, 300);
    assert!(
        short.expires_at_unix_ms >= before_ms + 300 && short.expires_at_unix_ms <= now_ms() + 300
    );
    let none = engine.kv_get(&context, b"none").unwrap().unwrap();
    assert_eq!((none.ttl_ms, none.expires_at_unix_ms), (0, 0));
    assert_eq!(keys(&engine, &context), ["long", "none", "short"]);
    wait_for("the short entry to expire", || {
        engine.kv_get(&context, b"short").unwrap().is_none()
    });
    // Gone from listings too, and not counted against the page's limit.
    assert_eq!(keys(&engine, &context), ["long", "none"]);
    let page = engine.kv_scan(&context, b"", None, 1).unwrap();
    assert_eq!(page[0].key.as_ref(), b"long");
    let page = engine.kv_scan(&context, b"", Some(b"none"), 1).unwrap();
    assert!(page.is_empty(), "{page:?}");
    // A touch does not bring an expired entry back; an if-absent put takes its place.
    let touched = block_on(engine.kv_touch(&context, vec![b"short".to_vec()], None)).unwrap();
    assert!(touched.is_empty());
    let entries = vec![(b"short".to_vec(), Bytes::from_static(b"again"))];
    block_on(engine.kv_put_ttl(&context, entries, true, 0)).unwrap();
    let again = engine.kv_get(&context, b"short").unwrap().unwrap();
    assert_eq!((again.value_len, again.ttl_ms), (5, 0));
    engine.shutdown();
    drop(engine);

    // Replay keeps each entry's expiry as the records say.
    let engine = Engine::open(settings).unwrap();
    let long = engine.kv_get(&context, b"long").unwrap().unwrap();
    assert_eq!(long.ttl_ms, 3_600_000);
    assert_eq!(keys(&engine, &context), ["long", "none", "short"]);
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}

#[test]
fn a_refresh_or_a_touch_restarts_the_ttl_and_a_touch_may_set_one() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(config(dir.path())).unwrap();
    let context = ContextRef::Id(new_context(&engine));
    put(&engine, &context, "a", b"a", 60_000);
    put(&engine, &context, "b", b"b", 0);
    let first = engine.kv_get(&context, b"a").unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let refreshed = block_on(engine.kv_get_refresh(&context, b"a"))
        .unwrap()
        .unwrap();
    assert_eq!(refreshed.ttl_ms, 60_000);
    assert!(refreshed.expires_at_unix_ms >= first.expires_at_unix_ms + 20);
    assert_eq!(
        engine.kv_get(&context, b"a").unwrap().unwrap(),
        refreshed,
        "the refresh is what later reads see"
    );
    // No TTL, nothing to refresh: the entry as it is, and no record.
    let plain = block_on(engine.kv_get_refresh(&context, b"b"))
        .unwrap()
        .unwrap();
    assert_eq!((plain.ttl_ms, plain.expires_at_unix_ms), (0, 0));
    assert!(
        block_on(engine.kv_get_refresh(&context, b"absent"))
            .unwrap()
            .is_none()
    );

    // A touch with its own TTL: entries without one get it; absent keys are left out.
    let touched = block_on(engine.kv_touch(
        &context,
        vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()],
        Some(200),
    ))
    .unwrap();
    let touched: Vec<(&[u8], u64)> = touched
        .iter()
        .map(|item| (item.key.as_ref(), item.ttl_ms))
        .collect();
    assert_eq!(touched, [(&b"a"[..], 200), (&b"b"[..], 200)]);
    // A touch without a TTL restarts each entry's own.
    let own = block_on(engine.kv_touch(&context, vec![b"a".to_vec()], None)).unwrap();
    assert_eq!(own[0].ttl_ms, 200);
    wait_for("the touched entries to expire", || {
        keys(&engine, &context).is_empty()
    });

    // Limits: 1..=128 keys, a TTL of 1 ms..100 years.
    let many: Vec<Vec<u8>> = (0..129).map(|i| format!("k{i}").into_bytes()).collect();
    let error = block_on(engine.kv_touch(&context, many, None)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TooLarge, "{error}");
    let error = block_on(engine.kv_touch(&context, Vec::new(), None)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TooLarge, "{error}");
    let error = block_on(engine.kv_touch(&context, vec![b"a".to_vec()], Some(0))).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    let entries = vec![(b"x".to_vec(), Bytes::from_static(b"x"))];
    let error = block_on(engine.kv_put_ttl(&context, entries, false, u64::MAX)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    engine.shutdown();
}

#[test]
fn the_reaper_removes_expired_entries_and_the_collector_takes_their_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = gc_config(dir.path());
    settings.reaper_interval_ms = 10;
    // Small packs: an orphan is collected once its pack is sealed (decision 0011).
    settings.limits.blob_bytes_max = 32 << 10;
    settings.limits.shard_batch_bytes_max = 64 << 10;
    settings.limits.pack_bytes_max = 64 << 10;
    let engine = Engine::open(settings.clone()).unwrap();
    let context = ContextRef::Id(new_context(&engine));
    let doomed = random_payload(1, 16 << 10);
    let kept = random_payload(2, 16 << 10);
    put(&engine, &context, "doomed", &doomed, 500);
    put(&engine, &context, "kept", &kept, 0);
    // A clone's entry expires with the source's, and goes with it.
    let clone = block_on(engine.clone_context(context.clone(), "clone".into()))
        .unwrap()
        .head
        .context_id;
    let clone = ContextRef::Id(clone);
    assert_eq!(keys(&engine, &clone), ["doomed", "kept"]);
    let doomed_hash = BlobHash::of(&doomed);
    assert!(engine.blob_len(doomed_hash).is_some());
    wait_for("the reaper to remove the entries", || {
        keys(&engine, &context) == ["kept"] && keys(&engine, &clone) == ["kept"]
    });
    // Later values seal the expired value's pack, in whichever shard it is.
    for i in 0..24 {
        put(
            &engine,
            &context,
            &format!("fill/{i}"),
            &random_payload(10 + i, 16 << 10),
            0,
        );
    }
    // The first round finds the blob an orphan; the next takes it (one round of grace).
    wait_for("the collector to take the expired value", || {
        engine.gc().unwrap();
        engine.blob_len(doomed_hash).is_none()
    });
    assert!(engine.blob_len(BlobHash::of(&kept)).is_some());
    engine.shutdown();
    drop(engine);
    // The removals are durable records: the reopened store has no expired entry to hide.
    settings.reaper_interval_ms = 3_600_000;
    let engine = Engine::open(settings).unwrap();
    assert!(engine.kv_get(&context, b"doomed").unwrap().is_none());
    assert!(engine.kv_get(&context, b"kept").unwrap().is_some());
    assert_eq!(keys(&engine, &clone), ["kept"]);
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
