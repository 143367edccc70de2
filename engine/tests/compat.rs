//! Stores written by earlier releases open, verify and read back exactly (brief §11).
//!
//! `tests/fixtures/store-v1` was written by this file's `script` with the format-v1 code of
//! 2026-11-22 (`CTXSTORE_WRITE_FIXTURE=1 cargo test -p ctxstore-engine --test compat`);
//! `tests/fixtures/store-v2` by `script_v2` with the format-2 code of 2026-12-06, before
//! format 3 (`CTXSTORE_WRITE_FIXTURE_V2=1 cargo test -p ctxstore-engine --test compat --
//! v2`). Never rewrite one after a format change: each is the old layout that newer code must
//! keep reading. A later layout adds its own fixture beside them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use bytes::Bytes;
use common::{block_on, chat_payload, random_payload};
use ctxstore_engine::format::meta::{Meta, STORE_FORMAT_VERSION};
use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, ContextId, ContextRef, Engine, EngineConfig,
    NewContext, TenantId, TurnId, verify,
};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v1")
}

fn fixture_v2() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v2")
}

/// Two shards, no prepared space (the fixture stays a few dozen KiB).
fn config(dir: &Path) -> EngineConfig {
    let mut config = EngineConfig::new(dir).with_shards(2);
    config.preallocate = false;
    config
}

/// The payload of step `index`: compressible chat text, short text, incompressible bytes, and
/// a repeat of an earlier payload (dedup), in turn.
fn payload(index: u64) -> Vec<u8> {
    match index % 4 {
        0 => chat_payload(index, 10 * 1024),
        1 => format!("short message {index}").into_bytes(),
        2 => random_payload(index, 3 * 1024),
        _ => chat_payload(index - 3, 10 * 1024),
    }
}

fn append(engine: &Engine, context: ContextId, payload: AppendPayload) -> TurnId {
    let request = AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 0x5eed,
        codec: 2,
        payload,
        options: Default::default(),
    };
    block_on(engine.append(request)).unwrap().turn.turn_id
}

/// Every kind of record v1 has: contexts (empty and forked), turns with new, deduplicated
/// and by-hash payloads, in both shards. Returns the contexts it made.
fn script(engine: &Engine) -> Vec<ContextId> {
    let first = block_on(engine.create_context()).unwrap().context_id;
    let mut turns = Vec::new();
    for index in 0..8 {
        let bytes = Bytes::from(payload(index));
        turns.push(append(engine, first, AppendPayload::Bytes(bytes)));
    }
    let fork = block_on(engine.fork(turns[3])).unwrap().context_id;
    for index in 8..12 {
        append(
            engine,
            fork,
            AppendPayload::Bytes(Bytes::from(payload(index))),
        );
    }
    let empty = block_on(engine.create_context()).unwrap().context_id;
    let by_hash = block_on(engine.create_context()).unwrap().context_id;
    let stored = BlobHash::of(&payload(2));
    append(engine, by_hash, AppendPayload::StoredBlob(stored));
    vec![first, fork, empty, by_hash]
}

/// `script`, then what format 2's metadata records hold: a named, tagged context with
/// key-value entries. Returns the contexts it made, the named one last.
fn script_v2(engine: &Engine) -> Vec<ContextId> {
    let mut contexts = script(engine);
    let new = NewContext {
        name: Some("agent-main".into()),
        tags: vec![("status".into(), "running".into())],
        ..NewContext::default()
    };
    let named = block_on(engine.create(new))
        .unwrap()
        .context
        .head
        .context_id;
    append(
        engine,
        named,
        AppendPayload::Bytes(Bytes::from(payload(12))),
    );
    let entries = vec![
        (
            b"memory/user".to_vec(),
            Bytes::from_static(b"likes short answers"),
        ),
        (b"memory/plan".to_vec(), Bytes::from(payload(13))),
    ];
    block_on(engine.kv_put(&ContextRef::Id(named), entries, false)).unwrap();
    contexts.push(named);
    contexts
}

/// Everything a reader can see of a context: its chain with payloads (creation times aside).
fn contents(engine: &Engine, context: ContextId) -> Vec<(u64, u64, u32, u64, u32, Bytes)> {
    let page = block_on(engine.last(context, 1000, true)).unwrap();
    page.turns
        .into_iter()
        .map(|entry| {
            let turn = entry.turn;
            let payload = entry.payload.unwrap();
            assert_eq!(BlobHash::of(&payload), turn.payload_hash);
            let turn_id = turn.turn_id.0;
            let parent = turn.parent_turn_id.0;
            (
                turn_id,
                parent,
                turn.depth,
                turn.type_tag,
                turn.codec,
                payload,
            )
        })
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A fixture as an upgrade meets it. With `write_env` set, `script` first writes it anew (by
/// the code of its format's day, never today's). Then a copy (opening may write: prepared
/// space, cut tails), checked: of store format `format`, `verify` clean with a note that the
/// next open migrates it, holding `(contexts, turns)`.
fn old_store(
    fixture: &Path,
    write_env: &str,
    script: fn(&Engine) -> Vec<ContextId>,
    format: u32,
    counts: (u64, u64),
) -> tempfile::TempDir {
    if std::env::var_os(write_env).is_some() {
        let _ = std::fs::remove_dir_all(fixture);
        let engine = Engine::open(config(fixture)).unwrap();
        script(&engine);
        engine.shutdown();
        let _ = std::fs::remove_file(fixture.join("LOCK"));
        // The disk reserve is made again at open; a fixture stays a few dozen KiB.
        let _ = std::fs::remove_file(fixture.join("RESERVE"));
    }
    assert!(
        fixture.join("ctxstore.meta").exists(),
        "the fixture is missing from {}",
        fixture.display()
    );
    let old = tempfile::tempdir().unwrap();
    copy_dir(fixture, old.path());
    assert_eq!(store_format(old.path()), format);
    let report = verify(old.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!((report.contexts, report.turns), counts);
    let note = format!("format {format}");
    assert!(
        report.notes.iter().any(|said| said.contains(&note)),
        "{report}"
    );
    old
}

/// The old store opened (migrated) beside a fresh one where today's code ran the same
/// script; `fresh` keeps the fresh store's directory.
struct Upgrade {
    upgraded: Engine,
    today: Engine,
    contexts: Vec<ContextId>,
    _fresh: tempfile::TempDir,
}

/// Opens `old` beside a fresh store that today's code wrote with `script`: each context reads
/// back the same in both, and the old store is of today's format.
fn upgrade_beside_today(old: &Path, script: fn(&Engine) -> Vec<ContextId>) -> Upgrade {
    let fresh = tempfile::tempdir().unwrap();
    let today = Engine::open(config(fresh.path())).unwrap();
    let contexts = script(&today);
    let upgraded = Engine::open(config(old)).unwrap();
    for &context in &contexts {
        assert_eq!(
            contents(&upgraded, context),
            contents(&today, context),
            "context {context}"
        );
    }
    assert_eq!(store_format(old), STORE_FORMAT_VERSION);
    Upgrade {
        upgraded,
        today,
        contexts,
        _fresh: fresh,
    }
}

#[test]
fn the_v1_fixture_opens_verifies_and_reads_back_exactly() {
    let old = old_store(&fixture(), "CTXSTORE_WRITE_FIXTURE", script, 1, (4, 13));
    let Upgrade {
        upgraded,
        today,
        contexts,
        _fresh,
    } = upgrade_beside_today(old.path(), script);
    assert_eq!(upgraded.stats().dedup_hits, today.stats().dedup_hits);
    assert_eq!(upgraded.stats().blobs, today.stats().blobs);
    // Opening migrated it: skip pointers answer depth windows.
    for &context in &contexts {
        let all = contents(&upgraded, context);
        for from_depth in 0..all.len() as u32 {
            let window = block_on(upgraded.range_by_depth(context, from_depth, 2, false)).unwrap();
            let depths: Vec<u32> = window.iter().map(|t| t.turn.depth).collect();
            let expected: Vec<u32> = all
                .iter()
                .map(|turn| turn.2)
                .filter(|depth| (from_depth..from_depth + 2).contains(depth))
                .collect();
            assert_eq!(
                depths, expected,
                "context {context} from depth {from_depth}"
            );
        }
    }

    // The upgraded store takes new writes and opens again.
    let extra = Bytes::from_static(b"written after the upgrade");
    let turn = append(&upgraded, contexts[0], AppendPayload::Bytes(extra.clone()));
    upgraded.shutdown();
    let reopened = Engine::open(config(old.path())).unwrap();
    let last = block_on(reopened.last(contexts[0], 1, true)).unwrap();
    assert_eq!(last.turns[0].turn.turn_id, turn);
    assert_eq!(last.turns[0].payload.as_ref(), Some(&extra));
    reopened.shutdown();
    let report = verify(old.path()).unwrap();
    assert!(report.is_ok() && report.notes.is_empty(), "{report}");

    // A migration cut short by a crash — the new log renamed in, the meta file not yet
    // rewritten, a stale temporary file left — is redone at the next open, to the same log.
    let log = std::fs::read(old.path().join("turns.log")).unwrap();
    set_store_format(old.path(), 1);
    std::fs::write(old.path().join("turns.log.migrating"), b"partial").unwrap();
    let again = Engine::open(config(old.path())).unwrap();
    again.shutdown();
    assert_eq!(store_format(old.path()), STORE_FORMAT_VERSION);
    assert!(!old.path().join("turns.log.migrating").exists());
    assert_eq!(std::fs::read(old.path().join("turns.log")).unwrap(), log);
    assert!(verify(old.path()).unwrap().is_ok());
}

fn store_format(dir: &Path) -> u32 {
    let bytes = std::fs::read(dir.join("ctxstore.meta")).unwrap();
    Meta::decode(&bytes).unwrap().format_version
}

fn set_store_format(dir: &Path, format_version: u32) {
    let path = dir.join("ctxstore.meta");
    let meta = Meta::decode(&std::fs::read(&path).unwrap()).unwrap();
    let meta = Meta {
        format_version,
        ..meta
    };
    std::fs::write(path, meta.encode()).unwrap();
}

/// What format 2 added to a context beyond its chain: name, tags, key-value entries.
fn metadata(
    engine: &Engine,
    context: ContextId,
) -> (Option<String>, Vec<(String, String)>, Vec<BlobHash>) {
    let view = engine.context(&ContextRef::Id(context)).unwrap();
    let values = [b"memory/plan".as_slice(), b"memory/user".as_slice()]
        .iter()
        .filter_map(|key| engine.kv_get(&ContextRef::Id(context), key).unwrap())
        .map(|item| item.value_hash)
        .collect();
    (view.name, view.tags.into_iter().collect(), values)
}

#[test]
fn the_v2_fixture_opens_verifies_and_reads_back_exactly() {
    let old = old_store(
        &fixture_v2(),
        "CTXSTORE_WRITE_FIXTURE_V2",
        script_v2,
        2,
        (5, 14),
    );
    let Upgrade {
        upgraded,
        today,
        contexts,
        _fresh,
    } = upgrade_beside_today(old.path(), script_v2);
    for &context in &contexts {
        assert_eq!(
            metadata(&upgraded, context),
            metadata(&today, context),
            "context {context}"
        );
    }
    let named = *contexts.last().unwrap();
    let (name, tags, values) = metadata(&upgraded, named);
    assert_eq!(name.as_deref(), Some("agent-main"));
    assert_eq!(tags, vec![("status".to_string(), "running".to_string())]);
    assert_eq!(values.len(), 2);
    // Format 3 (tenants): the log is unchanged, every context is the operator's.
    for &context in &contexts {
        let view = upgraded.context(&ContextRef::Id(context)).unwrap();
        assert_eq!(view.tenant_id, TenantId::OPERATOR, "context {context}");
    }
    assert!(upgraded.tenants().is_empty());
    upgraded.shutdown();
    today.shutdown();
    let log = std::fs::read(fixture_v2().join("turns.log")).unwrap();
    let upgraded_log = std::fs::read(old.path().join("turns.log")).unwrap();
    assert_eq!(
        &upgraded_log[..log.len()],
        &log[..],
        "format 3 rewrites no record"
    );
    let report = verify(old.path()).unwrap();
    assert!(report.is_ok() && report.notes.is_empty(), "{report}");
}
