//! Contexts as agent threads (issue 13), in the engine: names, tags, key-value entries,
//! clone, listing; each checked again after a reopen, and torn metadata records at the end of
//! the log cut like any unacknowledged tail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use bytes::Bytes;
use common::{append, block_on, open};
use ctxstore_engine::contexts::{ListCursor, ListQuery};
use ctxstore_engine::{
    ContextId, ContextRef, Engine, EngineError, ErrorKind, NewContext, TurnId, verify,
};

fn named(engine: &Engine, name: &str, tags: &[(&str, &str)]) -> ContextId {
    let new = NewContext {
        name: Some(name.into()),
        tags: tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..NewContext::default()
    };
    let created = block_on(engine.create(new)).unwrap();
    assert!(created.created);
    created.context.head.context_id
}

fn by_name(name: &str) -> ContextRef {
    ContextRef::Name(name.into())
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn names_are_unique_resolve_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let thread = named(&engine, "thread-1", &[]);
    assert_eq!(engine.resolve(&by_name("thread-1")).unwrap(), thread);

    let again = NewContext {
        name: Some("thread-1".into()),
        ..NewContext::default()
    };
    let error = block_on(engine.create(again.clone())).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::AlreadyExists, "{error}");
    let found = block_on(engine.create(NewContext {
        get_or_create: true,
        ..again
    }))
    .unwrap();
    assert!(!found.created);
    assert_eq!(found.context.head.context_id, thread);
    assert_eq!(engine.stats().contexts, 1, "get-or-create made nothing");

    let unnamed = block_on(engine.create_context()).unwrap().context_id;
    let view = block_on(engine.set_name(&unnamed.into(), "later".into())).unwrap();
    assert_eq!(view.name.as_deref(), Some("later"));
    let renamed = block_on(engine.set_name(&unnamed.into(), "other".into()));
    assert_eq!(renamed.unwrap_err().kind(), ErrorKind::InvalidArgument);

    let long = "x".repeat(257);
    let error = block_on(engine.set_name(&unnamed.into(), long)).unwrap_err();
    assert!(matches!(error, EngineError::Limit { .. }), "{error}");
    let missing = engine.resolve(&by_name("nobody")).unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);

    engine.shutdown();
    let engine = open(dir.path());
    assert_eq!(engine.resolve(&by_name("thread-1")).unwrap(), thread);
    assert_eq!(engine.resolve(&by_name("later")).unwrap(), unnamed);
    engine.shutdown();
    assert!(verify(dir.path()).unwrap().is_ok());
}

#[test]
fn tags_change_atomically_with_limits_and_a_head_compare_and_set() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let thread = named(&engine, "t", &[("status", "idle"), ("owner", "ann")]);
    let turn = append(&engine, thread, b"step", None).unwrap().turn.turn_id;

    let view = block_on(engine.update_tags(
        &thread.into(),
        vec![("status".into(), "running".into())],
        vec!["owner".into()],
        Some(turn),
    ))
    .unwrap();
    assert_eq!(view.tags, tags(&[("status", "running")]));
    assert_eq!(view.head.head_turn_id, turn);

    // A stale head refuses the whole change.
    let stale = block_on(engine.update_tags(
        &thread.into(),
        vec![("status".into(), "done".into())],
        vec![],
        Some(TurnId::NONE),
    ));
    assert_eq!(stale.unwrap_err().kind(), ErrorKind::Conflict);

    // Over a limit: a typed error, and nothing of the change is applied.
    let many: Vec<_> = (0..33)
        .map(|i| (format!("k{i}"), "v".to_string()))
        .collect();
    let error = block_on(engine.update_tags(&thread.into(), many, vec![], None)).unwrap_err();
    assert!(
        matches!(error, EngineError::Limit { limit: 32, .. }),
        "{error}"
    );
    for (key, value) in [("k".repeat(65), "v".into()), ("k".into(), "v".repeat(1025))] {
        let error = block_on(engine.update_tags(&thread.into(), vec![(key, value)], vec![], None))
            .unwrap_err();
        assert!(matches!(error, EngineError::Limit { .. }), "{error}");
    }
    assert_eq!(
        engine.context(&thread.into()).unwrap().tags,
        tags(&[("status", "running")])
    );

    engine.shutdown();
    let engine = open(dir.path());
    let view = engine.context(&by_name("t")).unwrap();
    assert_eq!(view.tags, tags(&[("status", "running")]));
    assert_eq!(view.head.head_turn_id, turn);
    assert!(view.updated_at_unix_ms >= view.created_at_unix_ms);
}

#[test]
fn key_value_entries_put_get_scan_delete_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let thread: ContextRef = named(&engine, "kv", &[]).into();
    let entries = vec![
        (b"writes/1/a".to_vec(), Bytes::from_static(b"first")),
        (b"writes/1/b".to_vec(), Bytes::from_static(b"second")),
        (b"writes/2/a".to_vec(), Bytes::from_static(b"first")),
        (b"other".to_vec(), Bytes::from(vec![7u8; 10_000])),
    ];
    block_on(engine.kv_put(&thread, entries.clone(), false)).unwrap();
    let blobs_before = engine.stats().blobs;
    assert_eq!(blobs_before, 3, "equal values are stored once");

    // Insert-if-absent keeps the existing value and adds the new key.
    let second = vec![
        (b"writes/1/a".to_vec(), Bytes::from_static(b"replaced?")),
        (b"writes/3/a".to_vec(), Bytes::from_static(b"third")),
    ];
    block_on(engine.kv_put(&thread, second, true)).unwrap();
    let item = engine.kv_get(&thread, b"writes/1/a").unwrap().unwrap();
    assert_eq!(block_on(engine.blob(item.value_hash)).unwrap(), "first");

    let scan = |engine: &Engine, prefix: &[u8]| -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = engine
                .kv_scan(&by_name("kv"), prefix, after.as_deref(), 2)
                .unwrap();
            if page.is_empty() {
                return keys;
            }
            after = page.last().map(|item| item.key.to_vec());
            keys.extend(page.into_iter().map(|item| item.key.to_vec()));
        }
    };
    let expected: Vec<Vec<u8>> = vec![
        b"writes/1/a".to_vec(),
        b"writes/1/b".to_vec(),
        b"writes/2/a".to_vec(),
        b"writes/3/a".to_vec(),
    ];
    assert_eq!(scan(&engine, b"writes/"), expected);
    // A cursor before the prefix starts at the prefix; one past every key ends the scan.
    let from_before = engine
        .kv_scan(&thread, b"writes/2", Some(b"a"), 10)
        .unwrap();
    assert_eq!(from_before.len(), 1);
    assert_eq!(&from_before[0].key[..], b"writes/2/a");
    assert!(
        engine
            .kv_scan(&thread, b"writes/", Some(b"z"), 10)
            .unwrap()
            .is_empty()
    );

    block_on(engine.kv_delete(&thread, vec![b"writes/1/b".to_vec(), b"absent".to_vec()])).unwrap();
    assert!(engine.kv_get(&thread, b"writes/1/b").unwrap().is_none());
    let long_key = vec![b'k'; 257];
    let error = block_on(engine.kv_put(&thread, vec![(long_key, Bytes::new())], false));
    assert!(matches!(error.unwrap_err(), EngineError::Limit { .. }));

    engine.shutdown();
    let engine = open(dir.path());
    let mut expected = expected;
    expected.remove(1);
    assert_eq!(scan(&engine, b"writes/"), expected);
    let big = engine.kv_get(&by_name("kv"), b"other").unwrap().unwrap();
    assert_eq!(big.value_len, 10_000);
    assert_eq!(block_on(engine.blob(big.value_hash)).unwrap(), entries[3].1);
    engine.shutdown();
    assert!(verify(dir.path()).unwrap().is_ok());
}

#[test]
fn a_clone_shares_history_and_copies_metadata_then_goes_its_own_way() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let source = named(&engine, "source", &[("status", "idle")]);
    let turn = append(&engine, source, b"history", None).unwrap().turn;
    block_on(engine.kv_put(
        &source.into(),
        vec![(b"k".to_vec(), Bytes::from_static(b"v"))],
        false,
    ))
    .unwrap();
    let blobs = engine.stats().blobs;

    let copy = block_on(engine.clone_context(by_name("source"), "copy".into())).unwrap();
    assert_eq!(copy.head.head_turn_id, turn.turn_id);
    assert_eq!(copy.head.head_depth, turn.depth);
    assert_eq!(copy.tags, tags(&[("status", "idle")]));
    assert_eq!(engine.stats().blobs, blobs, "no payload copied");
    let copy_ref = by_name("copy");
    assert!(engine.kv_get(&copy_ref, b"k").unwrap().is_some());

    // Their futures are separate.
    let copy_id = copy.head.context_id;
    append(&engine, copy_id, b"only in the copy", None).unwrap();
    block_on(engine.update_tags(
        &copy_ref,
        vec![("status".into(), "done".into())],
        vec![],
        None,
    ))
    .unwrap();
    let source_view = engine.context(&source.into()).unwrap();
    assert_eq!(source_view.head.head_turn_id, turn.turn_id);
    assert_eq!(source_view.tags, tags(&[("status", "idle")]));

    let taken = block_on(engine.clone_context(source.into(), "copy".into()));
    assert_eq!(taken.unwrap_err().kind(), ErrorKind::AlreadyExists);

    engine.shutdown();
    let engine = open(dir.path());
    let copy = engine.context(&by_name("copy")).unwrap();
    assert_eq!(copy.tags, tags(&[("status", "done")]));
    assert_eq!(copy.head.head_depth, turn.depth + 1);
    assert!(engine.kv_get(&by_name("copy"), b"k").unwrap().is_some());
    engine.shutdown();
    assert!(verify(dir.path()).unwrap().is_ok());
}

#[test]
fn listing_by_tag_name_prefix_and_time_pages_each_match_once() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let mut waiting = Vec::new();
    for index in 0..50 {
        let status = if index % 5 == 0 { "waiting" } else { "idle" };
        let id = named(
            &engine,
            &format!("run-{index:03}"),
            &[("status", status), ("team", "a")],
        );
        if status == "waiting" {
            waiting.push(id);
        }
    }
    let list_all = |query: ListQuery| -> Vec<ContextId> {
        let mut found = Vec::new();
        let mut query = ListQuery { limit: 3, ..query };
        loop {
            let page = engine.list_contexts(&query).unwrap();
            found.extend(page.contexts.iter().map(|view| view.head.context_id));
            match page.next_cursor {
                Some(cursor) => query.cursor = Some(cursor),
                None => return found,
            }
        }
    };
    let by_tags = ListQuery {
        tags: vec![
            ("status".into(), "waiting".into()),
            ("team".into(), "a".into()),
        ],
        ..ListQuery::default()
    };
    assert_eq!(list_all(by_tags.clone()), waiting);
    let by_prefix = ListQuery {
        name_prefix: Some("run-01".into()),
        ..ListQuery::default()
    };
    assert_eq!(list_all(by_prefix.clone()).len(), 10);
    let from_before = ListQuery {
        cursor: Some(ListCursor::Name("a".into())),
        ..by_prefix
    };
    assert_eq!(
        list_all(from_before).len(),
        10,
        "a cursor before the prefix starts at it"
    );
    let nobody = ListQuery {
        tags: vec![("status".into(), "gone".into())],
        ..ListQuery::default()
    };
    assert!(list_all(nobody).is_empty());
    let future = ListQuery {
        updated_after_unix_ms: Some(u64::MAX - 1),
        ..ListQuery::default()
    };
    assert!(list_all(future).is_empty());

    // Tags change while a listing pages through: no context comes twice.
    let mut query = ListQuery {
        limit: 2,
        ..by_tags
    };
    let mut seen = Vec::new();
    for round in 0.. {
        let page = engine.list_contexts(&query).unwrap();
        seen.extend(page.contexts.iter().map(|view| view.head.context_id));
        let flip = waiting[round % waiting.len()];
        block_on(engine.update_tags(
            &flip.into(),
            vec![("status".into(), "idle".into())],
            vec![],
            None,
        ))
        .unwrap();
        block_on(engine.update_tags(
            &flip.into(),
            vec![("status".into(), "waiting".into())],
            vec![],
            None,
        ))
        .unwrap();
        match page.next_cursor {
            Some(cursor @ ListCursor::Id(_)) => query.cursor = Some(cursor),
            Some(other) => panic!("tag listings page by id, got {other:?}"),
            None => break,
        }
    }
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(unique, seen, "a context came twice");
    let too_many = ListQuery {
        limit: 1001,
        ..ListQuery::default()
    };
    assert!(matches!(
        engine.list_contexts(&too_many).unwrap_err(),
        EngineError::Limit { .. }
    ));
}

#[test]
fn a_metadata_record_cut_anywhere_at_the_end_of_the_log_is_dropped_whole() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let thread = named(&engine, "torn", &[]);
    engine.shutdown();
    let log = dir.path().join("turns.log");
    let durable_len = {
        // The end of the records (the engine prepares zeros after them).
        let bytes = std::fs::read(&log).unwrap();
        let records = bytes
            .chunks(128)
            .take_while(|slot| slot.iter().any(|&b| b != 0))
            .count();
        records as u64 * 128
    };
    // A multi-slot tag record (a 1 KiB value: 11 slots), then cut inside it at every slot.
    let engine = open(dir.path());
    block_on(engine.update_tags(
        &thread.into(),
        vec![("note".into(), "n".repeat(1024))],
        vec![],
        None,
    ))
    .unwrap();
    engine.shutdown();
    let full = std::fs::read(&log).unwrap();
    for slots in 1..11u64 {
        let copy = tempfile::tempdir().unwrap();
        for entry in walk(dir.path()) {
            let target = copy.path().join(entry.strip_prefix(dir.path()).unwrap());
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::copy(&entry, &target).unwrap();
        }
        let cut = durable_len + slots * 128;
        std::fs::write(copy.path().join("turns.log"), &full[..cut as usize]).unwrap();
        let report = verify(copy.path()).unwrap();
        assert!(report.is_ok(), "{report}");
        assert!(
            report
                .notes
                .iter()
                .any(|note| note.contains("missing slots")),
            "{report}"
        );
        let engine = open(copy.path());
        let view = engine.context(&by_name("torn")).unwrap();
        assert!(
            view.tags.is_empty(),
            "a partial record was applied (cut at {slots})"
        );
        // The store goes on: the next record takes the place of the torn one.
        block_on(engine.update_tags(&thread.into(), vec![("a".into(), "b".into())], vec![], None))
            .unwrap();
        engine.shutdown();
        let engine = open(copy.path());
        assert_eq!(
            engine.context(&thread.into()).unwrap().tags,
            tags(&[("a", "b")])
        );
        engine.shutdown();
        assert!(verify(copy.path()).unwrap().is_ok());
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// `updated_at_unix_ms` moves with every change of a context — a tag, a key-value put and
/// delete, an append — and `created_at_unix_ms` never does; a key-value value over the blob
/// limit is refused TOO_LARGE and changes nothing.
#[test]
fn updated_at_moves_with_every_change_and_an_oversized_value_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let id = named(&engine, "times", &[]);
    let thread: ContextRef = id.into();
    let created = engine.context(&thread).unwrap();
    let mut last = created.updated_at_unix_ms;
    // Each step waits past the millisecond clock, then checks the time moved.
    let mut step = |engine: &Engine, what: &str| {
        let view = engine.context(&thread).unwrap();
        assert!(
            view.updated_at_unix_ms > last,
            "{what}: updated_at {} after {last}",
            view.updated_at_unix_ms
        );
        assert_eq!(
            view.created_at_unix_ms, created.created_at_unix_ms,
            "{what}"
        );
        last = view.updated_at_unix_ms;
        std::thread::sleep(std::time::Duration::from_millis(3));
    };
    std::thread::sleep(std::time::Duration::from_millis(3));
    block_on(engine.update_tags(
        &thread,
        vec![("status".into(), "busy".into())],
        vec![],
        None,
    ))
    .unwrap();
    step(&engine, "a tag");
    block_on(engine.kv_put(
        &thread,
        vec![(b"k".to_vec(), Bytes::from_static(b"v"))],
        false,
    ))
    .unwrap();
    step(&engine, "a key-value put");
    block_on(engine.kv_delete(&thread, vec![b"k".to_vec()])).unwrap();
    step(&engine, "a key-value delete");
    append(&engine, id, b"a turn", None).unwrap();
    step(&engine, "an append");

    let limit = engine.config().limits.blob_bytes_max as usize;
    let error = block_on(engine.kv_put(
        &thread,
        vec![(b"big".to_vec(), Bytes::from(vec![1u8; limit + 1]))],
        false,
    ))
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TooLarge, "{error}");
    assert!(engine.kv_get(&thread, b"big").unwrap().is_none());
    assert_eq!(engine.context(&thread).unwrap().updated_at_unix_ms, last);
    engine.shutdown();
    let engine = open(dir.path());
    let reopened = engine.context(&ContextRef::Id(id)).unwrap();
    assert_eq!(reopened.updated_at_unix_ms, last, "times survive a reopen");
    assert_eq!(reopened.created_at_unix_ms, created.created_at_unix_ms);
}
