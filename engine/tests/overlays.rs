//! Overlays and redaction (issue 15 items 4 and 5, decision 0012), in the engine: patches read
//! by overlay sequence (`as_of`), redactions in every view, both replayed after a reopen and
//! accepted by `verify`; a collection removes a redacted payload's bytes from every file of
//! the data directory while a blob shared with a live, unredacted turn stays; a purge redacts
//! every turn naming a blob; bad input gets typed errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use bytes::Bytes;
use common::{append, block_on, gc_config, new_context, random_payload};
use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, ContextId, ContextRef, Engine, EngineError, ErrorKind,
    NoPayloadCache, PageOptions, PageQuery, Payload, PayloadMode, TurnId, verify,
};

fn turn_of(engine: &Engine, context: ContextId, payload: &[u8]) -> TurnId {
    append(engine, context, payload, None).unwrap().turn.turn_id
}

/// The context's chain with payloads, oldest first, in the overlay view `as_of`.
fn read(engine: &Engine, context: ContextId, as_of: Option<u64>) -> Vec<(TurnId, bool, Vec<u8>)> {
    let options = PageOptions {
        payloads: PayloadMode::Raw,
        payload_bytes_max: u64::MAX,
        as_of,
    };
    let query = PageQuery::Last {
        context_id: context,
        limit: 100,
    };
    let page = engine
        .read_page(query, options, &mut NoPayloadCache)
        .unwrap();
    page.entries
        .into_iter()
        .map(|entry| {
            let Some(Payload::Raw(bytes)) = entry.payload else {
                panic!("raw payloads asked");
            };
            // Every view's payload matches its hash and length (a redacted one: no bytes).
            assert_eq!(BlobHash::of(&bytes), entry.turn.payload_hash);
            assert_eq!(bytes.len() as u32, entry.turn.payload_len);
            (entry.turn.turn_id, entry.turn.redacted, bytes.to_vec())
        })
        .collect()
}

#[test]
fn patches_read_by_sequence_redactions_in_every_view_and_both_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let context = new_context(&engine);
    let a = turn_of(&engine, context, b"first answer");
    let b = turn_of(&engine, context, b"second answer");
    let c = turn_of(&engine, context, b"third answer");

    let patch_1 = block_on(engine.patch_turn(a, Bytes::from_static(b"first, corrected"))).unwrap();
    assert_eq!(patch_1.turn.turn_id, a);
    assert!(!patch_1.turn.redacted);
    assert_eq!(patch_1.turn.payload_hash, BlobHash::of(b"first, corrected"));
    assert_eq!(patch_1.turn.overlay_seq, patch_1.overlay_seq);
    let patch_2 = block_on(engine.patch_turn(a, Bytes::from_static(b"first, again"))).unwrap();
    assert!(
        patch_2.overlay_seq > patch_1.overlay_seq,
        "overlay sequence is monotonic"
    );
    let redact = block_on(engine.redact_turn(b)).unwrap();
    assert!(redact.overlay_seq > patch_2.overlay_seq);
    assert!(redact.turn.redacted);
    assert_eq!(
        (redact.turn.payload_hash, redact.turn.payload_len),
        (BlobHash::EMPTY, 0)
    );

    let expect = |engine: &Engine| {
        let latest = read(engine, context, None);
        assert_eq!(
            latest,
            vec![
                (a, false, b"first, again".to_vec()),
                (b, true, Vec::new()),
                (c, false, b"third answer".to_vec()),
            ]
        );
        // As of the first patch: that patch's payload; the redaction holds in every view.
        let then = read(engine, context, Some(patch_1.overlay_seq));
        assert_eq!(then[0], (a, false, b"first, corrected".to_vec()));
        assert_eq!(then[1], (b, true, Vec::new()));
        // Before any overlay: the turn as appended.
        let original = read(engine, context, Some(1));
        assert_eq!(original[0], (a, false, b"first answer".to_vec()));
        assert_eq!(original[1], (b, true, Vec::new()));
        let turn = block_on(engine.turn(a)).unwrap();
        assert_eq!(turn.overlay_seq, patch_2.overlay_seq);
        let turn = engine.turn_as_of(a, Some(1)).unwrap();
        assert_eq!((turn.overlay_seq, turn.payload_len), (0, 12));
        // The chain stays whole around the redacted turn.
        let redacted = block_on(engine.turn(b)).unwrap();
        assert_eq!((redacted.parent_turn_id, redacted.depth), (a, 1));
        assert!(redacted.redacted);
    };
    expect(&engine);
    engine.shutdown();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    expect(&engine);
    // New overlays after a reopen keep counting up.
    let later = block_on(engine.patch_turn(c, Bytes::from_static(b"third, fixed"))).unwrap();
    assert!(later.overlay_seq > redact.overlay_seq);
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}

#[test]
fn bad_overlays_get_typed_errors_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let context = new_context(&engine);
    let turn = turn_of(&engine, context, b"payload");
    let patch = |turn_id: TurnId| block_on(engine.patch_turn(turn_id, Bytes::from_static(b"x")));

    // No such turn: not found (a context record's id is no turn either).
    for missing in [TurnId(9_999), TurnId(1)] {
        let error = patch(missing).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
        let error = block_on(engine.redact_turn(missing)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    }
    // Too large a patch: the append's limit.
    let big = Bytes::from(vec![0u8; (2 << 20) + 1]);
    let error = block_on(engine.patch_turn(turn, big)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::TooLarge, "{error}");

    block_on(engine.redact_turn(turn)).unwrap();
    // A redacted turn takes nothing more: neither a patch nor a second redaction.
    let error = patch(turn).unwrap_err();
    assert!(
        matches!(error, EngineError::Redacted(t) if t == turn),
        "{error}"
    );
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    let error = block_on(engine.redact_turn(turn)).unwrap_err();
    assert!(matches!(error, EngineError::Redacted(_)), "{error}");

    // Purging a blob nothing names and no shard holds.
    let error = block_on(engine.purge_blob(BlobHash::of(b"never stored"))).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");

    // A collected turn is not found either.
    let doomed_context = new_context(&engine);
    let doomed = turn_of(&engine, doomed_context, b"soon gone");
    block_on(engine.delete_context(&ContextRef::Id(doomed_context))).unwrap();
    engine.gc().unwrap();
    let error = patch(doomed).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    let error = block_on(engine.redact_turn(doomed)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}

/// Every regular file under `dir` (packs, indexes, turns.log, leftovers of any step).
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// Whether any file under `dir` holds `needle` anywhere in its raw bytes.
fn found_on_disk(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    files(dir)
        .into_iter()
        .filter(|path| {
            let bytes = std::fs::read(path).unwrap();
            bytes.windows(needle.len()).any(|window| window == needle)
        })
        .collect()
}

/// The redaction test of issue 15: a redacted incompressible payload's bytes are found in no
/// file of the data directory after a collection, while a blob shared with a live, unredacted
/// turn stays readable; the store reopens and verifies.
#[test]
fn a_collection_removes_a_redacted_payload_from_every_file_but_keeps_a_shared_one() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let context = new_context(&engine);
    let other = new_context(&engine);
    let secret = random_payload(1, 64 << 10);
    let shared = random_payload(2, 64 << 10);
    let patched_secret = random_payload(3, 32 << 10);
    let neighbour = random_payload(4, 64 << 10);
    turn_of(&engine, context, b"before");
    let secret_turn = turn_of(&engine, context, &secret);
    let shared_turn = turn_of(&engine, context, &shared);
    let keeper = turn_of(&engine, other, &shared);
    turn_of(&engine, context, &neighbour);
    // The secret was patched once before its redaction: the patch must go too.
    block_on(engine.patch_turn(secret_turn, Bytes::from(patched_secret.clone()))).unwrap();
    block_on(engine.redact_turn(secret_turn)).unwrap();
    block_on(engine.redact_turn(shared_turn)).unwrap();
    let slice = |bytes: &[u8]| bytes[1000..1064].to_vec();
    assert!(!found_on_disk(dir.path(), &slice(&secret)).is_empty());

    let report = engine.gc().unwrap();
    assert!(report.blobs_dead >= 2, "{report:?}");
    for needle in [slice(&secret), slice(&patched_secret)] {
        let left = found_on_disk(dir.path(), &needle);
        assert!(left.is_empty(), "redacted bytes still in {left:?}");
    }
    // The shared blob stays: a live, unredacted turn of another context names it.
    let kept = block_on(engine.turn(keeper)).unwrap();
    assert_eq!(
        &block_on(engine.blob(kept.payload_hash)).unwrap()[..],
        &shared[..]
    );
    assert!(block_on(engine.turn(shared_turn)).unwrap().redacted);
    assert_eq!(read(&engine, context, None)[3].2, neighbour);
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let chain = read(&engine, context, Some(1));
    assert_eq!(chain.len(), 4);
    assert!(
        chain[1].1 && chain[1].2.is_empty(),
        "redacted after a reopen"
    );
    assert_eq!(chain[3].2, neighbour);
    assert_eq!(
        &block_on(engine.blob(kept.payload_hash)).unwrap()[..],
        &shared[..]
    );
    engine.shutdown();
}

#[test]
fn a_purge_redacts_every_turn_naming_the_blob_and_hides_it_by_hash() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let secret = random_payload(7, 40 << 10);
    let hash = BlobHash::of(&secret);
    let mut named = Vec::new();
    let mut contexts = Vec::new();
    for _ in 0..3 {
        let context = new_context(&engine);
        turn_of(&engine, context, b"hello");
        named.push(turn_of(&engine, context, &secret));
        contexts.push(context);
    }
    // A fork shares the turn (one turn, one redaction); a patch names the blob too.
    let fork = block_on(engine.fork(named[0])).unwrap().context_id;
    let patched = turn_of(&engine, fork, b"to be patched with the secret");
    block_on(engine.patch_turn(patched, Bytes::from(secret.clone()))).unwrap();
    named.push(patched);
    // Already redacted: not counted again.
    block_on(engine.redact_turn(named[2])).unwrap();
    let innocent = turn_of(&engine, contexts[0], b"unrelated");

    let purged = block_on(engine.purge_blob(hash)).unwrap();
    assert_eq!(purged.payload_hash, hash);
    assert_eq!(purged.turns_redacted, 3, "{purged:?}");
    for turn in &named {
        assert!(
            block_on(engine.turn(*turn)).unwrap().redacted,
            "turn {turn}"
        );
    }
    assert!(!block_on(engine.turn(innocent)).unwrap().redacted);
    // Gone by hash at once, before any collection: GET_BLOB, HAS_BLOBS, appends by hash.
    assert_eq!(
        block_on(engine.blob(hash)).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(!block_on(engine.has_blob(hash)));
    let mut cache = Cache::default();
    cache.0.insert(hash, Bytes::from(secret.clone()));
    let error = engine
        .read_payload(hash, PayloadMode::Raw, &mut cache)
        .unwrap_err();
    assert_eq!(
        error.kind(),
        ErrorKind::NotFound,
        "a cache must not serve it"
    );
    let by_hash = block_on(engine.append(AppendRequest {
        context_id: contexts[1],
        expected_head: None,
        type_tag: 0,
        codec: 0,
        payload: AppendPayload::StoredBlob(hash),
        options: Default::default(),
    }));
    assert_eq!(by_hash.unwrap_err().kind(), ErrorKind::NotFound);
    // Purging again redacts nothing more.
    assert_eq!(block_on(engine.purge_blob(hash)).unwrap().turns_redacted, 0);

    engine.gc().unwrap();
    let left = found_on_disk(dir.path(), &secret[5000..5064]);
    assert!(left.is_empty(), "purged bytes still in {left:?}");
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");

    // After a reopen the purge holds; the same bytes appended again are new content.
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    assert!(!block_on(engine.has_blob(hash)));
    let again = turn_of(&engine, contexts[1], &secret);
    assert!(!block_on(engine.turn(again)).unwrap().redacted);
    assert_eq!(&block_on(engine.blob(hash)).unwrap()[..], &secret[..]);
    engine.shutdown();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    assert_eq!(&block_on(engine.blob(hash)).unwrap()[..], &secret[..]);
    engine.shutdown();
}

/// A payload cache holding whatever it was given (the server's per-core caches behave so).
#[derive(Default)]
struct Cache(std::collections::HashMap<BlobHash, Bytes>);

impl ctxstore_engine::PayloadCache for Cache {
    fn get(&mut self, hash: &BlobHash) -> Option<Bytes> {
        self.0.get(hash).cloned()
    }

    fn entry_bytes_max(&self) -> u64 {
        u64::MAX
    }

    fn insert(&mut self, hash: BlobHash, payload: &Bytes) {
        self.0.insert(hash, payload.clone());
    }
}

#[test]
fn a_redacted_turn_is_never_served_from_a_cache() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let context = new_context(&engine);
    let payload = random_payload(11, 4096);
    let turn = turn_of(&engine, context, &payload);
    let mut cache = Cache::default();
    let options = PageOptions {
        payloads: PayloadMode::Raw,
        payload_bytes_max: u64::MAX,
        as_of: None,
    };
    let query = PageQuery::Last {
        context_id: context,
        limit: 10,
    };
    let page = engine.read_page(query, options, &mut cache).unwrap();
    assert_eq!(
        page.entries[0].payload,
        Some(Payload::Raw(payload.clone().into()))
    );
    assert!(
        cache.0.contains_key(&BlobHash::of(&payload)),
        "cached by the read"
    );
    block_on(engine.redact_turn(turn)).unwrap();
    for as_of in [None, Some(1)] {
        let options = PageOptions { as_of, ..options };
        let page = engine.read_page(query, options, &mut cache).unwrap();
        assert!(page.entries[0].turn.redacted);
        assert_eq!(page.entries[0].payload, Some(Payload::Raw(Bytes::new())));
    }
    engine.shutdown();
}

/// Issue 29 item 2: `purge` then one collection leaves no file of the store holding the
/// purged bytes, whatever the dead share of their pack (the default 50 % here, where each
/// purged payload is a few percent of its pack): raw in a sealed pack and in the open one,
/// zstd-compressed, and chunked (its manifest and chunks). The record of each (its hash in a
/// pack header) is gone too, also after a reopen; everything else reads back.
#[test]
fn a_purge_then_one_collection_leaves_no_file_holding_the_bytes_whatever_the_dead_share() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = gc_config(dir.path());
    config.gc_pack_dead_percent = 50;
    config.limits.pack_bytes_max = 512 * 1024;
    config.limits.blob_bytes_max = 256 * 1024;
    config.limits.shard_batch_bytes_max = 512 * 1024;
    let engine = Engine::open(config.clone()).unwrap();
    let context = new_context(&engine);
    let mut kept = Vec::new();
    let mut keep = |engine: &Engine, seed: u64| {
        let payload = random_payload(seed, 8 << 10);
        kept.push((turn_of(engine, context, &payload), payload));
    };
    // The first secret ends up in a sealed pack: ~60 × 8 KiB of neighbours follow it.
    let in_sealed = random_payload(100, 4 << 10);
    turn_of(&engine, context, &in_sealed);
    for seed in 0..60 {
        keep(&engine, seed);
    }
    let in_open = random_payload(101, 4 << 10);
    turn_of(&engine, context, &in_open);
    let compressible = common::chat_payload(102, 4 << 10);
    turn_of(&engine, context, &compressible);
    let chunked = random_payload(103, 96 << 10);
    turn_of(&engine, context, &chunked);
    for seed in 60..70 {
        keep(&engine, seed);
    }
    let secrets = [&in_sealed, &in_open, &compressible, &chunked];
    let slice = |bytes: &[u8]| bytes[1000..1064].to_vec();
    for secret in [&in_sealed, &in_open, &chunked] {
        assert!(!found_on_disk(dir.path(), &slice(secret)).is_empty());
    }
    let pack_holds = |hash: &BlobHash| {
        files(dir.path())
            .into_iter()
            .filter(|path| path.extension().is_some_and(|e| e == "pack" || e == "idx"))
            .any(|path| {
                let bytes = std::fs::read(path).unwrap();
                bytes.windows(32).any(|window| window == hash.0)
            })
    };
    let hashes: Vec<BlobHash> = secrets.iter().map(|secret| BlobHash::of(secret)).collect();
    assert!(hashes.iter().all(pack_holds), "each secret has its record");

    for hash in &hashes {
        block_on(engine.purge_blob(*hash)).unwrap();
    }
    let report = engine.gc().unwrap();
    assert!(
        report.packs_compacted >= 2,
        "the sealed pack and the open one: {report:?}"
    );
    let check = |when: &str| {
        for secret in [&in_sealed, &in_open, &chunked] {
            let left = found_on_disk(dir.path(), &slice(secret));
            assert!(left.is_empty(), "{when}: purged bytes still in {left:?}");
        }
        for hash in &hashes {
            assert!(
                !pack_holds(hash),
                "{when}: a pack or index still names {hash}"
            );
        }
    };
    check("after the collection");
    let chain = read(&engine, context, None);
    let readable: Vec<(TurnId, Vec<u8>)> = chain
        .iter()
        .filter(|(_, redacted, _)| !redacted)
        .map(|(turn, _, payload)| (*turn, payload.clone()))
        .collect();
    assert_eq!(readable, kept);
    engine.shutdown();
    let engine = Engine::open(config).unwrap();
    check("after a reopen");
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}
