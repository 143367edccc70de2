//! Vector search in the engine (decision 0033, build plan step 1): indexes per tenant in
//! durable records (ids never reused, replayed at open); key-value entries written with
//! their vectors (a vectors blob beside the value); the exact search ranks as a brute force
//! over the snapshot does, answers exactly `k` whenever `k + offset` entries pass the filter,
//! and never answers what a read would not (overwrite, delete, expiry, context and tenant
//! deletion, a dropped index); bad vectors are refused with nothing written; the collector
//! keeps live vectors blobs and takes replaced ones; verify passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::{block_on, config, gc_config, keys, new_context, random_payload, wait_until};
use ctxstore_engine::format::vectors as vectors_blob;
use ctxstore_engine::vectors::{Metric, VectorEntry, VectorSearch};
use ctxstore_engine::{BlobHash, ContextRef, Engine, ErrorKind, TenantId, verify};

const DIMS: u16 = 8;

/// A deterministic vector of `DIMS` components in [-1, 1).
fn vector(rng: &mut fastrand::Rng) -> Vec<f32> {
    (0..DIMS).map(|_| rng.f32() * 2.0 - 1.0).collect()
}

fn entry(key: &str, value: &str, vectors: Vec<Vec<f32>>) -> VectorEntry {
    VectorEntry {
        key: key.as_bytes().to_vec(),
        value: Bytes::copy_from_slice(value.as_bytes()),
        vectors,
    }
}

fn search(context: &ContextRef, index: &str, query: &[f32], k: u32) -> VectorSearch {
    VectorSearch {
        context: context.clone(),
        index: index.into(),
        vector: query.to_vec(),
        k,
        offset: 0,
        prefix: Vec::new(),
        exact: false,
        ef_search: 0,
    }
}

fn found(engine: &Engine, context: &ContextRef, query: &[f32]) -> Vec<String> {
    keys(
        &engine
            .vector_search(&search(context, "memories", query, 100), None)
            .unwrap(),
    )
}

#[test]
fn the_exact_search_ranks_as_a_brute_force_and_answers_exactly_k() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(config(dir.path())).unwrap();
    let mut rng = fastrand::Rng::with_seed(49);
    // One context per metric: an entry's vectors are of one index.
    let contexts: Vec<ContextRef> = Metric::ALL
        .iter()
        .map(|_| ContextRef::Id(new_context(&engine)))
        .collect();
    for metric in Metric::ALL {
        let name = metric.name();
        block_on(engine.vector_index_create(name, DIMS, metric, 0)).unwrap();
    }
    // 300 entries under two prefixes, a third with two vectors, values ending in a digit.
    let mut all: Vec<(String, String, Vec<Vec<f32>>)> = Vec::new();
    for i in 0..300 {
        let count = if i % 3 == 0 { 2 } else { 1 };
        let vectors = (0..count).map(|_| vector(&mut rng)).collect();
        let prefix = if i % 2 == 0 { "a/" } else { "b/" };
        all.push((format!("{prefix}{i:03}"), format!("value {i}"), vectors));
    }
    for (metric, context) in Metric::ALL.into_iter().zip(&contexts) {
        for batch in all.chunks(100) {
            let entries = batch
                .iter()
                .map(|(key, value, vectors)| entry(key, value, vectors.clone()))
                .collect();
            block_on(engine.kv_put_vectors(context, metric.name(), entries, false, 0)).unwrap();
        }
    }
    for (metric, context) in Metric::ALL.into_iter().zip(&contexts) {
        let query = vector(&mut rng);
        // The brute force: each entry's best vector, best first, ties in key order.
        let mut expected: Vec<(f32, &str, &str)> = all
            .iter()
            .map(|(key, value, vectors)| {
                let best = vectors
                    .iter()
                    .map(|v| metric.score(&query, v))
                    .fold(f32::NEG_INFINITY, f32::max);
                (best, key.as_str(), value.as_str())
            })
            .collect();
        expected.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap().then(a.1.cmp(b.1)));
        let mut asked = search(context, metric.name(), &query, 10);
        let hits = engine.vector_search(&asked, None).unwrap();
        assert!(hits.exact);
        assert_eq!(hits.candidates, 400, "every vector compared");
        let want: Vec<&str> = expected.iter().take(10).map(|e| e.1).collect();
        assert_eq!(keys(&hits), want, "{metric:?}");
        for (hit, (score, _, value)) in hits.hits.iter().zip(&expected) {
            assert_eq!(hit.score, *score);
            assert_eq!(hit.value_hash, BlobHash::of(value.as_bytes()));
            assert_eq!(hit.value_len as usize, value.len());
        }
        // A prefix, an offset, and a filter passing one entry in ten: still exactly k.
        asked.prefix = b"b/".to_vec();
        asked.offset = 5;
        let mut passes = |value: &[u8]| value.ends_with(b"7");
        let hits = engine.vector_search(&asked, Some(&mut passes)).unwrap();
        let want: Vec<&str> = expected
            .iter()
            .filter(|e| e.1.starts_with("b/") && e.2.ends_with('7'))
            .skip(5)
            .take(10)
            .map(|e| e.1)
            .collect();
        assert_eq!(want.len(), 10);
        assert_eq!(keys(&hits), want, "{metric:?} filtered");
        // Fewer pass than asked: all of them, no padding.
        asked.offset = 0;
        asked.k = 100;
        let mut rare = |value: &[u8]| value == b"value 7" || value == b"value 17";
        let hits = engine.vector_search(&asked, Some(&mut rare)).unwrap();
        assert_eq!(hits.hits.len(), 2);
    }
    engine.shutdown();
}

#[test]
fn a_search_never_answers_what_a_read_would_not() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = config(dir.path());
    settings.reaper_interval_ms = 10;
    let engine = Engine::open(settings).unwrap();
    let context = ContextRef::Id(new_context(&engine));
    block_on(engine.vector_index_create("memories", DIMS, Metric::Cosine, 0)).unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    let query = vector(&mut rng);
    let put = |key: &str, ttl_ms: u64, vectors: Vec<Vec<f32>>| {
        let entries = vec![entry(key, key, vectors)];
        block_on(engine.kv_put_vectors(&context, "memories", entries, false, ttl_ms)).unwrap();
    };
    put("kept", 0, vec![query.clone()]);
    put("overwritten", 0, vec![vector(&mut rng)]);
    put("deleted", 0, vec![vector(&mut rng)]);
    put("expiring", 300, vec![vector(&mut rng)]);
    put("plain", 0, vec![]);
    let count = || engine.vector_indexes()[0].vectors;
    assert_eq!(count(), 4);
    let mut now = found(&engine, &context, &query);
    now.sort();
    assert_eq!(now, ["deleted", "expiring", "kept", "overwritten"]);
    assert_eq!(
        found(&engine, &context, &query)[0],
        "kept",
        "the query itself is nearest"
    );
    // An overwrite without vectors drops them; a plain KV_PUT does too.
    put("overwritten", 0, vec![]);
    let entries = vec![(b"kept2".to_vec(), Bytes::from_static(b"x"))];
    block_on(engine.kv_put(&context, entries, false)).unwrap();
    block_on(engine.kv_delete(&context, vec![b"deleted".to_vec()])).unwrap();
    assert_eq!(count(), 2);
    let mut now = found(&engine, &context, &query);
    now.sort();
    assert_eq!(now, ["expiring", "kept"]);
    // An expired entry is gone from the search at its expiry, as from a read.
    wait_until("the entry to expire", || {
        engine.kv_get(&context, b"expiring").unwrap().is_none()
    });
    assert_eq!(found(&engine, &context, &query), ["kept"]);
    // The reaper's record takes its vectors out of the index's count.
    wait_until("the reaper to remove the entry", || count() == 1);
    // A clone's entries carry their vectors; the source's deletion leaves the clone's.
    let clone = block_on(engine.clone_context(context.clone(), "clone".into())).unwrap();
    let clone = ContextRef::Id(clone.head.context_id);
    assert_eq!(found(&engine, &clone, &query), ["kept"]);
    block_on(engine.delete_context(&context)).unwrap();
    let error = engine
        .vector_search(&search(&context, "memories", &query, 1), None)
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    assert_eq!(found(&engine, &clone, &query), ["kept"]);
    // A dropped index answers no search, and takes no put.
    let dropped = block_on(engine.vector_index_drop("memories")).unwrap();
    assert_eq!(dropped.vectors, 1);
    let error = engine
        .vector_search(&search(&clone, "memories", &query, 1), None)
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    // Created again, it is a new index: the old vectors are not in it.
    let again = block_on(engine.vector_index_create("memories", DIMS, Metric::Cosine, 0)).unwrap();
    assert_eq!((again.index_id, again.vectors), (2, 0));
    assert!(found(&engine, &clone, &query).is_empty());
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}

#[test]
fn indexes_are_per_tenant_durable_and_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(config(dir.path())).unwrap();
    let acme = block_on(engine.register_tenant("acme")).unwrap();
    let globex = block_on(engine.register_tenant("globex")).unwrap();
    let (acme_handle, globex_handle) = (engine.scoped(acme), engine.scoped(globex));
    let created = block_on(acme_handle.vector_index_create("m", 3, Metric::L2, 64)).unwrap();
    assert_eq!((created.index_id, created.ef_search), (1, 64));
    // The same parameters answer the same index (an ef_search of 0 matches any); others are
    // refused, naming both.
    let same = block_on(acme_handle.vector_index_create("m", 3, Metric::L2, 0)).unwrap();
    assert_eq!(same, created);
    let error = block_on(acme_handle.vector_index_create("m", 4, Metric::L2, 0)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.to_string().contains("3 dimensions"), "{error}");
    // Another tenant's index of the same name is another index; each lists its own.
    let theirs = block_on(globex_handle.vector_index_create("m", 5, Metric::Cosine, 0)).unwrap();
    assert_eq!((theirs.index_id, theirs.ef_search), (1, 128));
    assert_eq!(acme_handle.vector_indexes(), std::slice::from_ref(&created));
    assert_eq!(
        globex_handle.vector_indexes(),
        std::slice::from_ref(&theirs)
    );
    assert!(engine.vector_indexes().is_empty(), "the operator has none");
    let new = ctxstore_engine::NewContext::default();
    let context = block_on(acme_handle.create(new))
        .unwrap()
        .context
        .head
        .context_id;
    let context = ContextRef::Id(context);
    let entries = vec![
        entry("x", "1", vec![vec![0.0, 0.0, 1.0]]),
        entry("y", "2", vec![vec![0.0, 0.0, 3.0], vec![1.0, 1.0, 1.0]]),
    ];
    block_on(acme_handle.kv_put_vectors(&context, "m", entries, false, 0)).unwrap();
    // globex sees neither acme's context nor its index.
    let error = globex_handle
        .vector_search(&search(&context, "m", &[0.0; 5], 1), None)
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound);
    let hits = acme_handle
        .vector_search(&search(&context, "m", &[0.0, 0.0, 2.9], 2), None)
        .unwrap();
    assert_eq!(keys(&hits), ["y", "x"]);
    assert!(
        (hits.hits[0].score + 0.1).abs() < 1e-5,
        "−L2: {}",
        hits.hits[0].score
    );
    engine.shutdown();
    drop(engine);

    // Reopened: the same indexes, counts and answers, from the log.
    let engine = Engine::open(config(dir.path())).unwrap();
    let acme_handle = engine.scoped(TenantId(acme.0));
    let listed = acme_handle.vector_indexes();
    assert_eq!(listed[0].vectors, 3);
    assert_eq!(listed[0].index_id, 1);
    let again = acme_handle
        .vector_search(&search(&context, "m", &[0.0, 0.0, 2.9], 2), None)
        .unwrap();
    assert_eq!(again, hits);
    // A tenant's deletion takes its indexes; globex keeps its own.
    block_on(engine.delete_tenant("acme")).unwrap();
    assert!(acme_handle.vector_indexes().is_empty());
    assert_eq!(engine.scoped(globex).vector_indexes().len(), 1);
    engine.shutdown();
    drop(engine);
    let engine = Engine::open(config(dir.path())).unwrap();
    assert!(engine.scoped(acme).vector_indexes().is_empty());
    assert_eq!(engine.scoped(globex).vector_indexes().len(), 1);
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.vectors_blobs, 0, "acme's were deleted with it");
}

#[test]
fn bad_vectors_and_searches_are_refused_with_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(config(dir.path())).unwrap();
    let context = ContextRef::Id(new_context(&engine));
    for (dims, ef) in [(0, 0), (4097, 0), (3, 4097)] {
        let error =
            block_on(engine.vector_index_create("m", dims, Metric::Cosine, ef)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    }
    for name in ["", &"n".repeat(65)] {
        let error = block_on(engine.vector_index_create(name, 3, Metric::Cosine, 0)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    }
    block_on(engine.vector_index_create("m", 3, Metric::Cosine, 0)).unwrap();
    let refused = |entries: Vec<VectorEntry>, index: &str, kind: ErrorKind, says: &str| {
        let error =
            block_on(engine.kv_put_vectors(&context, index, entries, false, 0)).unwrap_err();
        assert_eq!(error.kind(), kind, "{error}");
        assert!(
            error.to_string().contains(says),
            "{error} should say {says}"
        );
    };
    let good = || entry("good", "g", vec![vec![1.0, 2.0, 3.0]]);
    refused(
        vec![good(), entry("bad", "b", vec![vec![1.0, 2.0]])],
        "m",
        ErrorKind::InvalidArgument,
        "entry 1's vector 0 has 2 dimensions",
    );
    refused(
        vec![good(), entry("bad", "b", vec![vec![1.0, f32::NAN, 3.0]])],
        "m",
        ErrorKind::InvalidArgument,
        "NaN",
    );
    refused(
        vec![entry("bad", "b", vec![vec![f32::INFINITY, 0.0, 0.0]])],
        "m",
        ErrorKind::InvalidArgument,
        "infinite",
    );
    refused(
        vec![entry("bad", "b", vec![vec![1.0, 2.0, 3.0]; 65])],
        "m",
        ErrorKind::TooLarge,
        "vectors per key-value entry",
    );
    refused(vec![good()], "absent", ErrorKind::NotFound, "\"absent\"");
    // Nothing of the refused puts was written: not the good entry beside a bad one either.
    assert!(engine.kv_get(&context, b"good").unwrap().is_none());
    assert_eq!(engine.vector_indexes()[0].vectors, 0);
    let query = [1.0, 0.0, 0.0];
    let asked = |k: u32, offset: u32, vector: &[f32]| {
        let mut asked = search(&context, "m", vector, k);
        asked.offset = offset;
        engine
            .vector_search(&asked, None)
            .map(|hits| hits.hits.len())
    };
    assert_eq!(
        asked(0, 0, &query).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        asked(1000, 1, &query).unwrap_err().kind(),
        ErrorKind::TooLarge
    );
    assert_eq!(
        asked(1, 0, &[1.0, 0.0]).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        asked(1, 0, &[f32::NAN, 0.0, 0.0]).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(asked(1000, 0, &query).unwrap(), 0);
    engine.shutdown();
}

#[test]
fn the_collector_keeps_live_vectors_and_takes_replaced_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = gc_config(dir.path());
    // Small packs: an orphan is collected once its pack is sealed (decision 0011).
    settings.limits.blob_bytes_max = 32 << 10;
    settings.limits.shard_batch_bytes_max = 64 << 10;
    settings.limits.pack_bytes_max = 64 << 10;
    let engine = Engine::open(settings).unwrap();
    let context = ContextRef::Id(new_context(&engine));
    // Vectors of 4,096 dimensions: a blob of 16 KiB, enough of a pack that its pack is
    // compacted once it is dead.
    const BIG: u16 = 4096;
    block_on(engine.vector_index_create("big", BIG, Metric::Cosine, 0)).unwrap();
    let mut rng = fastrand::Rng::with_seed(11);
    let mut big = || -> Vec<f32> { (0..BIG).map(|_| rng.f32()).collect() };
    let (old, new) = (big(), big());
    let blob_hash = |v: &Vec<f32>| {
        BlobHash::of(&vectors_blob::encode(
            usize::from(BIG),
            std::slice::from_ref(v),
        ))
    };
    for v in [&old, &new] {
        let entries = vec![entry("item", "value", vec![v.clone()])];
        block_on(engine.kv_put_vectors(&context, "big", entries, false, 0)).unwrap();
    }
    assert!(engine.blob_len(blob_hash(&old)).is_some());
    // Later values seal the replaced vectors' pack, in whichever shard it is.
    for i in 0..24 {
        let entries = vec![(
            format!("fill/{i}").into_bytes(),
            Bytes::from(random_payload(i, 16 << 10)),
        )];
        block_on(engine.kv_put(&context, entries, false)).unwrap();
    }
    wait_until("the collector to take the replaced vectors", || {
        engine.gc().unwrap();
        engine.blob_len(blob_hash(&old)).is_none()
    });
    assert!(engine.blob_len(blob_hash(&new)).is_some());
    let hits = engine
        .vector_search(&search(&context, "big", &new, 1), None)
        .unwrap();
    assert_eq!(keys(&hits), ["item"]);
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.vectors_blobs, 1, "{report}");
}
