//! Vectors on turns (decision 0033 §1–§3): an append carries up to 16 vectors of one index;
//! a search over turns answers the turns of one context's chain (a fork's inherited turns
//! included), of every context under a name prefix or carrying tags, filtered by labels and
//! type, exactly `k` whenever `k + offset` pass, ranked as a brute force over what reads
//! return; never a turn a read of those contexts would not return (pruned, redacted,
//! collected); the same after a restart; through the graph as exactly as without it; bad
//! vectors refused with nothing written; verify checks the blobs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;

use bytes::Bytes;
use common::{block_on, config, gc_config, new_context, wait_until};
use ctxstore_engine::turn_vectors::{TurnHits, TurnVectorSearch};
use ctxstore_engine::vectors::Metric;
use ctxstore_engine::{
    AppendPayload, AppendRequest, ContextId, ContextRef, Engine, EngineConfig, ErrorKind,
    NewContext, Parent, TurnId, TurnOptions, TurnVectors, verify,
};

const DIMS: u16 = 8;
const INDEX: &str = "recall";

fn vector(rng: &mut fastrand::Rng) -> Vec<f32> {
    (0..DIMS).map(|_| rng.f32() * 2.0 - 1.0).collect()
}

fn request(
    context_id: ContextId,
    type_tag: u64,
    label: &str,
    vectors: Vec<Vec<f32>>,
) -> AppendRequest {
    AppendRequest {
        context_id,
        expected_head: None,
        type_tag,
        codec: 1,
        payload: AppendPayload::Bytes(Bytes::from(format!("turn {label} {}", fastrand::u64(..)))),
        options: TurnOptions {
            labels: vec![("role".into(), label.into())],
            vectors: (!vectors.is_empty()).then(|| TurnVectors::Given {
                index: INDEX.into(),
                vectors,
            }),
            ..TurnOptions::default()
        },
    }
}

/// Appends `count` turns with one vector each to `context_id` (roles alternate user and
/// assistant, type 1 and 2); answers each TurnID with its vector.
fn fill(
    engine: &Engine,
    context_id: ContextId,
    rng: &mut fastrand::Rng,
    count: usize,
) -> Vec<(TurnId, Vec<f32>)> {
    (0..count)
        .map(|i| {
            let v = vector(rng);
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            let appended = block_on(engine.append(request(
                context_id,
                1 + (i % 2) as u64,
                role,
                vec![v.clone()],
            )))
            .unwrap();
            (appended.turn.turn_id, v)
        })
        .collect()
}

fn search(query: &[f32], k: u32) -> TurnVectorSearch {
    TurnVectorSearch {
        index: INDEX.into(),
        vector: query.to_vec(),
        k,
        ..TurnVectorSearch::default()
    }
}

fn ids(hits: &TurnHits) -> Vec<TurnId> {
    hits.hits.iter().map(|hit| hit.turn.turn_id).collect()
}

/// The brute force: every (turn, vector) ranked by cosine similarity, best first, ties by
/// TurnID.
fn brute(candidates: &[(TurnId, Vec<f32>)], query: &[f32], k: usize) -> Vec<TurnId> {
    let cosine = |a: &[f32], b: &[f32]| {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
        dot / (na * nb)
    };
    let mut scored: Vec<(f32, TurnId)> = candidates
        .iter()
        .map(|(id, v)| (cosine(query, v), *id))
        .collect();
    scored.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap().then(a.1.cmp(&b.1)));
    scored.into_iter().take(k).map(|(_, id)| id).collect()
}

fn named(engine: &Engine, name: &str, tags: &[(&str, &str)], base: TurnId) -> ContextId {
    block_on(
        engine.create(NewContext {
            base,
            name: Some(name.into()),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..NewContext::default()
        }),
    )
    .unwrap()
    .context
    .head
    .context_id
}

#[test]
fn a_turn_search_answers_the_chains_it_names_ranked_as_a_brute_force() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(config(dir.path())).unwrap();
    block_on(engine.vector_index_create(INDEX, DIMS, Metric::Cosine, 0)).unwrap();
    let mut rng = fastrand::Rng::with_seed(5);
    let a = named(&engine, "user-42/a", &[("user", "42")], TurnId::NONE);
    let a_turns = fill(&engine, a, &mut rng, 40);
    // A fork at A's 20th turn inherits A's first 20 turns, then has its own.
    let b = named(&engine, "user-42/b", &[("user", "42")], a_turns[19].0);
    let b_turns = fill(&engine, b, &mut rng, 15);
    let c = named(&engine, "user-7/c", &[("user", "7")], TurnId::NONE);
    let c_turns = fill(&engine, c, &mut rng, 10);
    // A turn without vectors is no candidate.
    block_on(engine.append(request(c, 1, "user", Vec::new()))).unwrap();
    let query = vector(&mut rng);

    let mut one = search(&query, 10);
    one.context = Some(ContextRef::Id(b));
    let b_chain: Vec<_> = a_turns[..20].iter().chain(&b_turns).cloned().collect();
    let hits = engine.vector_search_turns(&one).unwrap();
    assert!(hits.exact);
    assert_eq!(
        ids(&hits),
        brute(&b_chain, &query, 10),
        "B's chain, inherited turns included"
    );
    assert!(
        hits.hits
            .windows(2)
            .all(|pair| pair[0].score >= pair[1].score),
        "best first, with scores"
    );
    assert!(
        hits.hits
            .iter()
            .all(|hit| [a, b].contains(&hit.turn.context_id))
    );

    let mut by_prefix = search(&query, 1000);
    by_prefix.name_prefix = Some("user-42/".into());
    let a_and_b: Vec<_> = a_turns.iter().chain(&b_turns).cloned().collect();
    let hits = engine.vector_search_turns(&by_prefix).unwrap();
    assert_eq!(hits.hits.len(), 55, "each shared turn once");
    assert_eq!(ids(&hits), brute(&a_and_b, &query, 1000));

    let mut by_tag = search(&query, 5);
    by_tag.tags = vec![("user".into(), "7".into())];
    assert_eq!(
        ids(&engine.vector_search_turns(&by_tag).unwrap()),
        brute(&c_turns, &query, 5)
    );

    let everything: Vec<_> = a_and_b.iter().chain(&c_turns).cloned().collect();
    let all = engine.vector_search_turns(&search(&query, 1000)).unwrap();
    assert_eq!(
        ids(&all),
        brute(&everything, &query, 1000),
        "the whole tenant"
    );

    // Labels and the type: exactly k while k pass; offset pages on.
    let mut assistants = search(&query, 7);
    assistants.labels = vec![("role".into(), "assistant".into())];
    assistants.offset = 3;
    let wanted: Vec<_> = everything
        .iter()
        .enumerate()
        .filter(|(_, (id, _))| {
            let extras = engine.turn_extras(*id).unwrap();
            extras.labels.contains(&("role".into(), "assistant".into()))
        })
        .map(|(_, turn)| turn.clone())
        .collect();
    let hits = engine.vector_search_turns(&assistants).unwrap();
    assert_eq!(ids(&hits), brute(&wanted, &query, 10)[3..].to_vec());
    let mut typed = search(&query, 1000);
    typed.type_tag = Some(2);
    let hits = engine.vector_search_turns(&typed).unwrap();
    assert!(hits.hits.iter().all(|hit| hit.turn.type_tag == 2));
    assert_eq!(hits.hits.len(), wanted.len());

    // Restarted: the same answers, replayed from the log.
    engine.shutdown();
    let engine = Engine::open(config(dir.path())).unwrap();
    assert_eq!(
        ids(&engine.vector_search_turns(&search(&query, 1000)).unwrap()),
        ids(&all)
    );
    assert_eq!(
        engine.vector_indexes()[0].vectors,
        (40 + 15 + 10) as u64,
        "the index counts every turn's vector"
    );
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.vectors_blobs, 65, "{report}");
}

#[test]
fn a_turn_search_never_answers_what_a_read_would_not() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    block_on(engine.vector_index_create(INDEX, DIMS, Metric::Cosine, 0)).unwrap();
    let mut rng = fastrand::Rng::with_seed(9);
    let context = new_context(&engine);
    let turns = fill(&engine, context, &mut rng, 30);
    let query = vector(&mut rng);
    let mut in_context = search(&query, 1000);
    in_context.context = Some(ContextRef::Id(context));
    let found = |engine: &Engine| -> HashSet<TurnId> {
        ids(&engine.vector_search_turns(&in_context).unwrap())
            .into_iter()
            .collect()
    };
    assert_eq!(found(&engine).len(), 30);

    // Pruned: the ten oldest are no longer read through the context.
    block_on(engine.prune_context(&ContextRef::Id(context), 20)).unwrap();
    let kept: HashSet<TurnId> = turns[10..].iter().map(|(id, _)| *id).collect();
    assert_eq!(found(&engine), kept);

    // Redacted: gone from the answer and from the index's count.
    let redacted = turns[25].0;
    block_on(engine.redact_turn(redacted)).unwrap();
    assert!(!found(&engine).contains(&redacted));
    assert_eq!(engine.vector_indexes()[0].vectors, 29);

    // Deleted and collected: no search finds them, the index counts none.
    let doomed = new_context(&engine);
    fill(&engine, doomed, &mut rng, 5);
    assert_eq!(
        engine
            .vector_search_turns(&search(&query, 1000))
            .unwrap()
            .hits
            .len(),
        20 - 1 + 5
    );
    block_on(engine.delete_context(&ContextRef::Id(doomed))).unwrap();
    assert_eq!(
        engine
            .vector_search_turns(&search(&query, 1000))
            .unwrap()
            .hits
            .len(),
        19
    );
    wait_until("the collector to take the deleted and pruned turns", || {
        engine.gc().unwrap();
        engine.vector_indexes()[0].vectors == 19
    });
    engine.shutdown();
    // Replay agrees: the gc-dead and redaction records take the vectors out again.
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    assert_eq!(engine.vector_indexes()[0].vectors, 19);
    assert_eq!(
        found(&engine),
        kept.iter().copied().filter(|id| *id != redacted).collect()
    );
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}

#[test]
fn bad_turn_vectors_are_refused_with_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(config(dir.path())).unwrap();
    block_on(engine.vector_index_create(INDEX, DIMS, Metric::Cosine, 0)).unwrap();
    let context = new_context(&engine);
    let good = vec![0.5; DIMS as usize];
    let refused = |options: Option<TurnVectors>, kind: ErrorKind, says: &str| {
        let mut append = request(context, 1, "user", Vec::new());
        append.options.vectors = options;
        let error = block_on(engine.append(append)).unwrap_err();
        assert_eq!(error.kind(), kind, "{error}");
        assert!(
            error.to_string().contains(says),
            "{error} does not say {says:?}"
        );
    };
    let given = |index: &str, vectors: Vec<Vec<f32>>| {
        Some(TurnVectors::Given {
            index: index.into(),
            vectors,
        })
    };
    refused(
        given(INDEX, vec![vec![0.5; 3]]),
        ErrorKind::InvalidArgument,
        "dimensions",
    );
    let mut nan = good.clone();
    nan[2] = f32::NAN;
    refused(given(INDEX, vec![nan]), ErrorKind::InvalidArgument, "NaN");
    refused(
        given(INDEX, vec![good.clone(); 17]),
        ErrorKind::TooLarge,
        "vectors per turn",
    );
    refused(
        given("absent", vec![good.clone()]),
        ErrorKind::NotFound,
        "absent",
    );
    let stored = ctxstore_engine::format::context_meta::KvVectors {
        hash: ctxstore_engine::BlobHash([1; 32]),
        len: 36,
        index_id: 1,
        count: 1,
    };
    refused(
        Some(TurnVectors::Stored(stored)),
        ErrorKind::InvalidArgument,
        "stored blob",
    );
    let head = engine.context(&ContextRef::Id(context)).unwrap().head;
    assert_eq!(head.head_turn_id, TurnId::NONE, "nothing was appended");
    // A search with bad input: typed errors.
    let mut wrong = search(&[0.5; 3], 1);
    assert_eq!(
        engine.vector_search_turns(&wrong).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    wrong = search(&good, 0);
    assert_eq!(
        engine.vector_search_turns(&wrong).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    wrong = search(&good, 1001);
    assert_eq!(
        engine.vector_search_turns(&wrong).unwrap_err().kind(),
        ErrorKind::TooLarge
    );
    wrong = search(&good, 1);
    wrong.context = Some(ContextRef::Id(ContextId(999)));
    assert_eq!(
        engine.vector_search_turns(&wrong).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // A stream's turn carries none.
    let mut append = request(context, 1, "user", vec![good.clone()]);
    append.options.parent = Parent::Head;
    let (open, _) = append.split();
    let owner = ctxstore_engine::streams::StreamOwner::NONE;
    let error = block_on(engine.open_stream(open, owner)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    engine.shutdown();
}

fn graph_settings(dir: &std::path::Path) -> EngineConfig {
    let mut settings = config(dir);
    settings.limits.vector_exact_max = 50;
    settings
}

#[test]
fn past_exact_max_a_turn_search_walks_the_graph_and_still_answers_k() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(graph_settings(dir.path())).unwrap();
    block_on(engine.vector_index_create(INDEX, DIMS, Metric::Cosine, 0)).unwrap();
    let mut rng = fastrand::Rng::with_seed(21);
    let a = named(&engine, "a", &[], TurnId::NONE);
    let b = named(&engine, "b", &[], TurnId::NONE);
    let a_turns = fill(&engine, a, &mut rng, 400);
    fill(&engine, b, &mut rng, 400);
    wait_until("the graph to be built", || {
        engine
            .vector_graph_info(INDEX)
            .is_some_and(|graph| graph.ready && graph.pending == 0)
    });
    let mut recall = 0.0;
    let queries = 20;
    for _ in 0..queries {
        let query = vector(&mut rng);
        let mut walked = search(&query, 10);
        walked.context = Some(ContextRef::Id(a));
        let hits = engine.vector_search_turns(&walked).unwrap();
        assert!(!hits.exact, "400 candidates > 50 walk the graph");
        assert_eq!(hits.hits.len(), 10, "exactly k");
        let a_ids: HashSet<TurnId> = a_turns.iter().map(|(id, _)| *id).collect();
        assert!(
            ids(&hits).iter().all(|id| a_ids.contains(id)),
            "only A's turns"
        );
        walked.exact = true;
        let exact = engine.vector_search_turns(&walked).unwrap();
        assert!(exact.exact);
        let exact: HashSet<TurnId> = ids(&exact).into_iter().collect();
        recall += ids(&hits).iter().filter(|id| exact.contains(id)).count() as f64 / 10.0;
    }
    let recall = recall / f64::from(queries);
    assert!(recall >= 0.9, "recall@10 through the graph: {recall}");
    // An append is found at once, whatever the graph's writer has applied.
    let fresh = vector(&mut rng);
    let appended = block_on(engine.append(request(a, 1, "user", vec![fresh.clone()]))).unwrap();
    let mut at_once = search(&fresh, 1);
    at_once.context = Some(ContextRef::Id(a));
    assert_eq!(
        ids(&engine.vector_search_turns(&at_once).unwrap()),
        [appended.turn.turn_id]
    );
    engine.shutdown();
}
