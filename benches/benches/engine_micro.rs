//! Criterion micro-benchmarks of the engine, in-process:
//! `cargo bench -p ctxstore-benches --bench engine_micro`.
//!
//! - `floor/fdatasync_4k`: one 4 KiB append + fdatasync, the price of any durable write;
//! - `append/10k_one_appender`: one durable 10 KiB append (blob + turn + head), end to end;
//! - `read/get_last_64_payloads`: the 64 newest turns of a context with their payloads;
//! - `index/has_blob_hit`, `index/has_blob_miss`: a blob-index look-up (dedup check);
//! - `scope/*`: what a tenant's handle costs over the store-wide one on the same data
//!   (decision 0032): a head, 64 newest turns with payloads (each turn's address turned back
//!   into its hash), a blob look-up by hash (the hash turned into an address), a payload read
//!   (the record checked against its tenant's address); and the check of a tenant's deletion
//!   the server makes of every request of a tenant's connection;
//! - `vectors/graph_search_*`: the same through the index's graph (decision 0033 §4), past
//!   `vector_exact_max`: the walk with its predicate, the hits scored exactly (with a value
//!   filter the planner compares exactly up to ten times that, so no filtered walk here).
//! - `vectors/exact_search_*`: an exact vector search (decision 0033) of 10 hits among 10,000
//!   and 100,000 entries of 384 dimensions, unfiltered and through a filter passing 1%.
//! - `vectors/turn_search_*`: a search over turns (protocol version 7): one thread of 10,000
//!   turns (its chain walked, every vector scored), and 100 threads of 1,000 turns named by a
//!   tag, exactly and through the graph (100,000 candidates).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

use std::fs::OpenOptions;
use std::io::Write;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use ctxstore_benches::text::ChatText;
use ctxstore_engine::{AppendPayload, AppendRequest, BlobHash, ContextId, Engine, EngineConfig};

fn bench_dir() -> tempfile::TempDir {
    match std::env::var_os("CTXSTORE_BENCH_DIR") {
        Some(base) => tempfile::tempdir_in(base).unwrap(),
        None => tempfile::tempdir().unwrap(),
    }
}

fn append_request(context: ContextId, payload: Vec<u8>) -> AppendRequest {
    AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 1,
        codec: 1,
        payload: AppendPayload::Bytes(Bytes::from(payload)),
        options: Default::default(),
    }
}

fn floor(c: &mut Criterion) {
    let dir = bench_dir();
    let path = dir.path().join("floor.bin");
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .unwrap();
    let block = vec![0x5a_u8; 4096];
    c.bench_function("floor/fdatasync_4k", |b| {
        b.iter(|| {
            file.write_all(&block).unwrap();
            file.sync_data().unwrap();
        })
    });
}

fn engine_ops(c: &mut Criterion) {
    let dir = bench_dir();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let runtime = compio::runtime::Runtime::new().unwrap();
    let mut text = ChatText::new(5);

    let context = runtime
        .block_on(engine.create_context())
        .unwrap()
        .context_id;
    let payloads: Vec<Vec<u8>> = (0..64).map(|_| text.payload(10 * 1024)).collect();
    let mut counter = 0u64;
    c.bench_function("append/10k_one_appender", |b| {
        b.iter(|| {
            counter += 1;
            let mut payload = payloads[(counter % 64) as usize].clone();
            payload[..8].copy_from_slice(&counter.to_le_bytes());
            runtime
                .block_on(engine.append(append_request(context, payload)))
                .unwrap()
        })
    });

    let reads = runtime
        .block_on(engine.create_context())
        .unwrap()
        .context_id;
    for _ in 0..128 {
        runtime
            .block_on(engine.append(append_request(reads, text.payload(10 * 1024))))
            .unwrap();
    }
    c.bench_function("read/get_last_64_payloads", |b| {
        b.iter(|| runtime.block_on(engine.last(reads, 64, true)).unwrap())
    });

    let mut stored = Vec::new();
    for index in 0..20_000u64 {
        let mut payload = text.payload(256);
        payload[..8].copy_from_slice(&index.to_le_bytes());
        stored.push(
            runtime
                .block_on(engine.put_blob(Bytes::from(payload)))
                .unwrap()
                .0,
        );
    }
    let mut position = 0usize;
    c.bench_function("index/has_blob_hit", |b| {
        b.iter(|| {
            position = (position + 7919) % stored.len();
            assert!(runtime.block_on(engine.has_blob(stored[position])));
        })
    });
    let mut miss = 0u64;
    c.bench_function("index/has_blob_miss", |b| {
        b.iter(|| {
            miss += 1;
            assert!(!runtime.block_on(engine.has_blob(BlobHash::of(&miss.to_le_bytes()))));
        })
    });
    engine.shutdown();
}

/// The same reads through the operator's store-wide handle and through a tenant's, each on
/// data of its own scope, so the difference is the tenant check and the address translation.
fn scope(c: &mut Criterion) {
    let dir = bench_dir();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let runtime = compio::runtime::Runtime::new().unwrap();
    let mut text = ChatText::new(11);
    let tenant = runtime.block_on(engine.register_tenant("acme")).unwrap();
    let handles = [("store", engine.clone()), ("tenant", engine.scoped(tenant))];
    for (name, handle) in &handles {
        let context = runtime
            .block_on(handle.create_context())
            .unwrap()
            .context_id;
        let mut hashes = Vec::new();
        for _ in 0..128 {
            let request = append_request(context, text.payload(10 * 1024));
            let appended = runtime.block_on(handle.append(request)).unwrap();
            hashes.push(appended.turn.payload_hash);
        }
        c.bench_function(&format!("scope/head_{name}"), |b| {
            b.iter(|| runtime.block_on(handle.head(context)).unwrap())
        });
        c.bench_function(&format!("scope/get_last_64_{name}"), |b| {
            b.iter(|| runtime.block_on(handle.last(context, 64, false)).unwrap())
        });
        let mut position = 0usize;
        c.bench_function(&format!("scope/has_blob_{name}"), |b| {
            b.iter(|| {
                position = (position + 7) % hashes.len();
                assert!(runtime.block_on(handle.has_blob(hashes[position])));
            })
        });
        c.bench_function(&format!("scope/blob_10k_{name}"), |b| {
            b.iter(|| {
                position = (position + 7) % hashes.len();
                runtime.block_on(handle.blob(hashes[position])).unwrap()
            })
        });
    }
    // The check the server makes of every request of a tenant's connection (decision 0032
    // §6: a tenant deleted since its HELLO is refused).
    c.bench_function("scope/tenant_deleted_check", |b| {
        b.iter(|| assert!(!engine.tenant_deleted(std::hint::black_box(tenant))))
    });
    engine.shutdown();
}

/// A tenant's listing page in a store whose other contexts are another tenant's (decision
/// 0032 §2): it walks the tenant's own live contexts, not every ContextID of the store.
fn tenant_listing(c: &mut Criterion) {
    let dir = bench_dir();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let runtime = compio::runtime::Runtime::new().unwrap();
    let tenant = runtime.block_on(engine.register_tenant("acme")).unwrap();
    let operator = engine.scoped(ctxstore_engine::TenantId::OPERATOR);
    // 100,000 of the operator's contexts, created 1,000 at a time (one group commit each).
    for _ in 0..100 {
        runtime.block_on(async {
            let creates: Vec<_> = (0..1_000)
                .map(|_| {
                    let operator = operator.clone();
                    compio::runtime::spawn(async move { operator.create_context().await.unwrap() })
                })
                .collect();
            for create in creates {
                let _ = create.await;
            }
        });
    }
    let scoped = engine.scoped(tenant);
    for _ in 0..10 {
        runtime.block_on(scoped.create_context()).unwrap();
    }
    let query = ctxstore_engine::contexts::ListQuery {
        limit: 50,
        ..Default::default()
    };
    c.bench_function("scope/list_page_tenant_among_100k", |b| {
        b.iter(|| assert_eq!(scoped.list_contexts(&query).unwrap().contexts.len(), 10))
    });
    engine.shutdown();
}

/// A new store with the cosine index `bench` of 384 dimensions, and uniformly random vectors
/// for it (seeded).
fn vector_bench(
    seed: u64,
) -> (
    tempfile::TempDir,
    Engine,
    compio::runtime::Runtime,
    impl FnMut() -> Vec<f32>,
) {
    use ctxstore_engine::vectors::Metric;
    const DIMS: usize = 384;
    let dir = bench_dir();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let runtime = compio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(engine.vector_index_create("bench", DIMS as u16, Metric::Cosine, 0))
        .unwrap();
    let mut rng = fastrand::Rng::with_seed(seed);
    let vector = move || -> Vec<f32> { (0..DIMS).map(|_| rng.f32() - 0.5).collect() };
    (dir, engine, runtime, vector)
}

/// The exact search of decision 0033 over one context's entries: every candidate scored
/// (decoded vectors kept in the engine's cache after the first search), ranked, and the value
/// filter asked in rank order.
fn vector_search(c: &mut Criterion) {
    use ctxstore_engine::vectors::VectorSearch;
    let (_dir, engine, runtime, mut vector) = vector_bench(33);
    let mut stored = 0usize;
    for count in [10_000usize, 100_000] {
        let context = runtime
            .block_on(engine.create_context())
            .unwrap()
            .context_id;
        let context = ctxstore_engine::ContextRef::Id(context);
        put_vectors(&engine, &runtime, &context, count, &mut vector);
        stored += count;
        wait_for_graph(&engine, stored as u64);
        let search = VectorSearch {
            context,
            index: "bench".into(),
            vector: vector(),
            k: 10,
            offset: 0,
            prefix: Vec::new(),
            exact: true,
            ef_search: 0,
        };
        let thousands = count / 1000;
        c.bench_function(&format!("vectors/exact_search_{thousands}k_384"), |b| {
            b.iter(|| assert_eq!(engine.vector_search(&search, None).unwrap().hits.len(), 10))
        });
        let mut one_percent = |value: &[u8]| value == b"{\"bucket\":7}";
        c.bench_function(
            &format!("vectors/exact_search_{thousands}k_384_filter_1pct"),
            |b| {
                b.iter(|| {
                    let found = engine
                        .vector_search(&search, Some(&mut one_percent))
                        .unwrap();
                    assert_eq!(found.hits.len(), 10)
                })
            },
        );
        // Past `vector_exact_max` (10,000): the graph's walk, every hit scored exactly.
        let walk = VectorSearch {
            exact: false,
            ..search.clone()
        };
        if count > 10_000 {
            c.bench_function(&format!("vectors/graph_search_{thousands}k_384"), |b| {
                b.iter(|| {
                    engine
                        .vector_search(&walk, None)
                        .map(|f| assert!(f.hits.len() == 10 && !f.exact))
                })
            });
        }
    }
    assert_eq!(engine.vector_indexes()[0].vectors, stored as u64);
    engine.shutdown();
}

/// Searches over turns (protocol version 7): the chains of the contexts named walked, their
/// turns' vectors scored exactly, or past `vector_exact_max` the graph walked with them.
fn turn_vector_search(c: &mut Criterion) {
    use ctxstore_engine::turn_vectors::TurnVectorSearch;
    let (_dir, engine, runtime, mut vector) = vector_bench(34);
    let thread = new_tagged(&engine, &runtime, "alone");
    append_with_vectors(&engine, &runtime, thread, 10_000, &mut vector);
    for _ in 0..100 {
        let context = new_tagged(&engine, &runtime, "many");
        append_with_vectors(&engine, &runtime, context, 1_000, &mut vector);
    }
    wait_for_graph(&engine, 110_000);
    let one = TurnVectorSearch {
        index: "bench".into(),
        vector: vector(),
        k: 10,
        context: Some(ctxstore_engine::ContextRef::Id(thread)),
        ..TurnVectorSearch::default()
    };
    c.bench_function("vectors/turn_search_thread_10k_384", |b| {
        b.iter(|| assert_eq!(engine.vector_search_turns(&one).unwrap().hits.len(), 10))
    });
    let tagged = TurnVectorSearch {
        context: None,
        tags: vec![("set".into(), "many".into())],
        ..one.clone()
    };
    c.bench_function("vectors/turn_search_tagged_100k_384_graph", |b| {
        b.iter(|| {
            let found = engine.vector_search_turns(&tagged).unwrap();
            assert!(found.hits.len() == 10 && !found.exact)
        })
    });
    let exact = TurnVectorSearch {
        exact: true,
        ..tagged.clone()
    };
    c.bench_function("vectors/turn_search_tagged_100k_384_exact", |b| {
        b.iter(|| assert_eq!(engine.vector_search_turns(&exact).unwrap().hits.len(), 10))
    });
    engine.shutdown();
}

fn new_tagged(engine: &Engine, runtime: &compio::runtime::Runtime, set: &str) -> ContextId {
    let new = ctxstore_engine::NewContext {
        tags: vec![("set".into(), set.into())],
        ..ctxstore_engine::NewContext::default()
    };
    runtime
        .block_on(engine.create(new))
        .unwrap()
        .context
        .head
        .context_id
}

/// `count` turns appended to `context`, each with one vector of index `bench`, 64 a batch.
fn append_with_vectors(
    engine: &Engine,
    runtime: &compio::runtime::Runtime,
    context: ContextId,
    count: usize,
    vector: &mut impl FnMut() -> Vec<f32>,
) {
    for start in (0..count).step_by(64) {
        let batch = (start..(start + 64).min(count))
            .map(|i| AppendRequest {
                context_id: context,
                expected_head: None,
                type_tag: 1,
                codec: 0,
                payload: AppendPayload::Bytes(Bytes::from(format!("turn {i} of {context}"))),
                options: ctxstore_engine::TurnOptions {
                    vectors: Some(ctxstore_engine::TurnVectors::Given {
                        index: "bench".into(),
                        vectors: vec![vector()],
                    }),
                    ..Default::default()
                },
            })
            .collect();
        runtime.block_on(engine.append_batch(batch)).unwrap();
    }
}

/// `count` entries `i/0000000`… of index `bench`, each with one vector, 128 a put.
fn put_vectors(
    engine: &Engine,
    runtime: &compio::runtime::Runtime,
    context: &ctxstore_engine::ContextRef,
    count: usize,
    vector: &mut impl FnMut() -> Vec<f32>,
) {
    use ctxstore_engine::vectors::VectorEntry;
    for start in (0..count).step_by(128) {
        let entries = (start..(start + 128).min(count))
            .map(|i| VectorEntry {
                key: format!("i/{i:07}").into_bytes(),
                value: Bytes::from(format!("{{\"bucket\":{}}}", i % 100)),
                vectors: vec![vector()],
            })
            .collect();
        let put = engine.kv_put_vectors(context, "bench", entries, false, 0);
        runtime.block_on(put).unwrap();
    }
}

/// Until the graph holds every vector (its writer trails the puts), so that a walk is timed.
fn wait_for_graph(engine: &Engine, vectors: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    while !engine
        .vector_graph_info("bench")
        .is_some_and(|info| info.ready && info.pending == 0 && info.vectors == vectors)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the graph never caught up"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(std::time::Duration::from_secs(4));
    targets = floor, engine_ops, scope, tenant_listing, vector_search, turn_vector_search
}
criterion_main!(benches);
