//! Garbage collection (issue 15, decision 0011), in the engine: a collection takes exactly
//! what no live context reaches (deleted contexts, history below a floor, replaced key-value
//! values) and gives its bytes back to the file system; everything reachable reads back the
//! same, before and after a reopen, and `verify` agrees. Appends racing a collection keep
//! their blobs; a compaction interrupted between its steps reopens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::path::Path;

use bytes::Bytes;
use common::{append, block_on, filled_context, gc_config, new_context, random_payload};
use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, ContextId, ContextRef, Engine, ErrorKind, TurnId,
    verify,
};

fn pack_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for shard in std::fs::read_dir(dir.join("blobs")).unwrap() {
        for file in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            let file = file.unwrap();
            if file.file_name().to_string_lossy().ends_with(".pack") {
                total += file.metadata().unwrap().len();
            }
        }
    }
    total
}

/// Every turn in `live` reads back with its payload; every turn in `dead` and its blob are
/// gone.
fn check(engine: &Engine, live: &HashMap<TurnId, Vec<u8>>, dead: &HashMap<TurnId, Vec<u8>>) {
    for (turn_id, payload) in live {
        let turn = block_on(engine.turn(*turn_id)).unwrap();
        let bytes = block_on(engine.blob(turn.payload_hash)).unwrap();
        assert_eq!(&bytes[..], &payload[..], "turn {turn_id}");
    }
    for (turn_id, payload) in dead {
        let error = block_on(engine.turn(*turn_id)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotFound, "turn {turn_id}: {error}");
        let hash = BlobHash(*blake3::hash(payload).as_bytes());
        let error = block_on(engine.blob(hash)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotFound, "blob of {turn_id}");
    }
}

#[test]
fn a_collection_takes_exactly_what_no_live_context_reaches_and_gives_the_bytes_back() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    const PAYLOAD: usize = 16 << 10;
    let mut live: HashMap<TurnId, Vec<u8>> = HashMap::new();
    let mut dead: HashMap<TurnId, Vec<u8>> = HashMap::new();
    let mut contexts = Vec::new();
    let mut turns: Vec<Vec<(TurnId, Vec<u8>)>> = Vec::new();
    for c in 0..8u64 {
        let context = new_context(&engine);
        let mut chain = Vec::new();
        for t in 0..20u64 {
            let payload = random_payload(c * 1000 + t, PAYLOAD);
            let turn = append(&engine, context, &payload, None)
                .unwrap()
                .turn
                .turn_id;
            chain.push((turn, payload));
        }
        contexts.push(context);
        turns.push(chain);
    }
    // A fork of context 0 at its 11th turn keeps that history alive after 0 is deleted.
    let fork = block_on(engine.fork(turns[0][10].0)).unwrap().context_id;
    let fork_payload = random_payload(9_000, PAYLOAD);
    let fork_turn = append(&engine, fork, &fork_payload, None)
        .unwrap()
        .turn
        .turn_id;
    // A key-value value replaced: the old one is an orphan (collected a round later).
    let kv = contexts[7];
    block_on(engine.kv_put(
        &ContextRef::Id(kv),
        vec![(
            b"state".to_vec(),
            Bytes::from(random_payload(8_000, PAYLOAD)),
        )],
        false,
    ))
    .unwrap();

    for context in &contexts[..5] {
        block_on(engine.delete_context(&ContextRef::Id(*context))).unwrap();
    }
    block_on(engine.prune_context(&ContextRef::Id(contexts[5]), 5)).unwrap();
    for (c, chain) in turns.iter().enumerate() {
        for (i, (turn, payload)) in chain.iter().enumerate() {
            let reached = match c {
                0 => i <= 10,
                1..=4 => false,
                5 => i >= 15,
                _ => true,
            };
            let target = if reached { &mut live } else { &mut dead };
            target.insert(*turn, payload.clone());
        }
    }
    live.insert(fork_turn, fork_payload);

    let before = pack_bytes(dir.path());
    let report = engine.gc().unwrap();
    assert_eq!(report.turns_dead, dead.len() as u64, "{report:?}");
    assert_eq!(report.blobs_dead, dead.len() as u64, "{report:?}");
    assert!(report.packs_compacted >= 1, "{report:?}");
    let after = pack_bytes(dir.path());
    let dead_bytes: u64 = dead.values().map(|p| p.len() as u64).sum();
    assert!(
        before - after >= dead_bytes,
        "packs shrank by {} bytes, the dead payloads hold {dead_bytes}",
        before - after
    );
    // The packs shrank by the compactions' share (and the sealed packs' prepared space).
    assert!(report.bytes_reclaimed >= dead_bytes && before - after >= report.bytes_reclaimed);
    check(&engine, &live, &dead);
    let stats = engine.stats();
    assert_eq!(stats.gc_runs, 1);
    assert_eq!(stats.bytes_reclaimed_total, report.bytes_reclaimed);
    // A dead turn cannot be made reachable again.
    let (some_dead, _) = dead.iter().next().unwrap();
    let error = block_on(engine.fork(*some_dead)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound);

    // Nothing more to take, apart from the replaced key-value value (an orphan blob: one
    // round of grace).
    let again = engine.gc().unwrap();
    assert_eq!(again.turns_dead, 0, "{again:?}");
    assert!(again.blobs_dead <= 1, "{again:?}");

    // The fork pruned above its base: the base's history goes too.
    block_on(engine.prune_context(&ContextRef::Id(fork), 1)).unwrap();
    let pruned = engine.gc().unwrap();
    assert_eq!(pruned.turns_dead, 11, "{pruned:?}");
    for (turn, payload) in &turns[0][..=10] {
        live.remove(turn);
        dead.insert(*turn, payload.clone());
    }
    check(&engine, &live, &dead);

    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    check(&engine, &live, &dead);
    let idle = engine.gc().unwrap();
    assert_eq!((idle.turns_dead, idle.blobs_dead), (0, 0), "{idle:?}");
    // New appends after all of it.
    let payload = random_payload(77, PAYLOAD);
    let turn = append(&engine, contexts[6], &payload, None)
        .unwrap()
        .turn
        .turn_id;
    live.insert(turn, payload);
    check(&engine, &live, &dead);
    engine.shutdown();
    assert!(verify(dir.path()).unwrap().is_ok());
}

#[test]
fn appends_racing_collections_keep_their_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    const PAYLOAD: usize = 4 << 10;
    let seeds: Vec<u64> = (0..200).collect();
    let writer = {
        let engine = engine.clone();
        let seeds = seeds.clone();
        std::thread::spawn(move || {
            let mut acked: Vec<(TurnId, Vec<u8>)> = Vec::new();
            let keeper = new_context(&engine);
            for round in 0..8u64 {
                // Store the seeds' payloads in a context, delete it, and append the same
                // payloads to the keeper: every second one races a collection that found
                // them dead (dedup hits on condemned blobs).
                let doomed = new_context(&engine);
                for seed in &seeds {
                    append(&engine, doomed, &random_payload(*seed, PAYLOAD), None).unwrap();
                }
                block_on(engine.delete_context(&ContextRef::Id(doomed))).unwrap();
                for seed in seeds.iter().skip((round % 2) as usize).step_by(2) {
                    let payload = random_payload(*seed, PAYLOAD);
                    let request = AppendRequest {
                        context_id: keeper,
                        expected_head: None,
                        type_tag: 0,
                        codec: 0,
                        payload: AppendPayload::Bytes(Bytes::from(payload.clone())),
                        options: Default::default(),
                    };
                    let turn = block_on(engine.append(request)).unwrap().turn.turn_id;
                    acked.push((turn, payload));
                }
            }
            acked
        })
    };
    let mut collected = 0;
    while !writer.is_finished() {
        let report = engine.gc().unwrap();
        collected += report.turns_dead;
    }
    let acked = writer.join().unwrap();
    collected += engine.gc().unwrap().turns_dead;
    assert!(collected > 0, "the collections found nothing dead");
    let live: HashMap<TurnId, Vec<u8>> = acked.into_iter().collect();
    check(&engine, &live, &HashMap::new());
    engine.gc().unwrap();
    check(&engine, &live, &HashMap::new());
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    check(&engine, &live, &HashMap::new());
}

#[test]
fn a_compaction_interrupted_between_its_steps_reopens_with_everything_live() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    let keep = new_context(&engine);
    let drop_ = new_context(&engine);
    let mut live = HashMap::new();
    for i in 0..40u64 {
        let payload = random_payload(i, 8 << 10);
        let context = if i % 2 == 0 { keep } else { drop_ };
        let turn = append(&engine, context, &payload, None)
            .unwrap()
            .turn
            .turn_id;
        if context == keep {
            live.insert(turn, payload);
        }
    }
    block_on(engine.delete_context(&ContextRef::Id(drop_))).unwrap();
    engine.gc().unwrap();
    engine.shutdown();

    // As if the process died while the next compaction switched its files: a half-written
    // compacted pack and index, and the marker.
    let shard = dir.path().join("blobs").join("shard-00");
    std::fs::write(shard.join("pack-000000.pack.compact"), b"half a pack").unwrap();
    std::fs::write(shard.join("blobs.idx.compact"), [0u8; 64]).unwrap();
    std::fs::write(shard.join("REINDEX"), b"").unwrap();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    let engine = Engine::open(gc_config(dir.path())).unwrap();
    assert!(!shard.join("REINDEX").exists());
    assert!(!shard.join("pack-000000.pack.compact").exists());
    check(&engine, &live, &HashMap::new());
    engine.shutdown();
    assert!(verify(dir.path()).unwrap().is_ok());
}

/// A random history: contexts, forks, branches (explicit parents), links, deletes and
/// prunes, each payload unique; collections in between.
#[derive(Clone, Debug)]
enum Op {
    Create,
    Fork {
        turn: usize,
    },
    Append {
        context: usize,
        parent: Option<usize>,
        link: Option<usize>,
    },
    Delete {
        context: usize,
    },
    Prune {
        context: usize,
        keep: u32,
    },
    /// Patch a turn (issue 15 item 4): a new payload, one more blob to keep.
    Patch {
        turn: usize,
    },
    /// Redact a turn (item 5): its payload and patches are no roots any more.
    Redact {
        turn: usize,
    },
    Gc,
    Reopen,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        2 => Just(Op::Create),
        1 => any::<usize>().prop_map(|turn| Op::Fork { turn }),
        8 => (any::<usize>(), proptest::option::of(any::<usize>()), proptest::option::weighted(0.15, any::<usize>()))
            .prop_map(|(context, parent, link)| Op::Append { context, parent, link }),
        1 => any::<usize>().prop_map(|context| Op::Delete { context }),
        1 => (any::<usize>(), 1..4u32).prop_map(|(context, keep)| Op::Prune { context, keep }),
        1 => any::<usize>().prop_map(|turn| Op::Patch { turn }),
        1 => any::<usize>().prop_map(|turn| Op::Redact { turn }),
        1 => Just(Op::Gc),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Clone, Debug)]
struct ModelTurn {
    id: TurnId,
    seed: u64,
    context: usize,
    parent: Option<usize>,
    depth: u32,
    links: Vec<usize>,
    payload: Vec<u8>,
    patches: Vec<Vec<u8>>,
    redacted: bool,
}

impl ModelTurn {
    /// The blobs a live turn keeps: its payload and every patch, none once redacted.
    fn blobs(&self) -> Vec<&Vec<u8>> {
        if self.redacted {
            return Vec::new();
        }
        std::iter::once(&self.payload)
            .chain(&self.patches)
            .collect()
    }
}

#[derive(Debug, Default)]
struct ModelContext {
    id: ContextId,
    head: Option<usize>,
    base: Option<usize>,
    floor: u32,
    deleted: bool,
}

#[derive(Debug, Default)]
struct Model {
    turns: Vec<ModelTurn>,
    contexts: Vec<ModelContext>,
    dead: std::collections::HashSet<usize>,
}

impl Model {
    /// The turns a live context reaches (decision 0011's roots), by index.
    fn reachable(&self) -> std::collections::HashSet<usize> {
        let mut floor_of: HashMap<usize, u32> = HashMap::new();
        let mark = |start: usize, floor: u32, floor_of: &mut HashMap<usize, u32>| {
            let mut at = Some(start);
            while let Some(index) = at {
                let turn = &self.turns[index];
                // Collected history stays collected: a fork or a link reaches what is left.
                if turn.depth < floor
                    || floor_of.get(&index).is_some_and(|&f| f <= floor)
                    || self.dead.contains(&index)
                {
                    break;
                }
                floor_of.insert(index, floor);
                at = turn.parent;
            }
        };
        for (c, context) in self.contexts.iter().enumerate() {
            if context.deleted {
                continue;
            }
            if let Some(head) = context.head {
                mark(head, context.floor, &mut floor_of);
            }
            for (index, turn) in self.turns.iter().enumerate() {
                if turn.context == c {
                    mark(index, context.floor, &mut floor_of);
                }
            }
            if let Some(base) = context.base {
                mark(base, context.floor, &mut floor_of);
            }
        }
        loop {
            let before = floor_of.len();
            let live: Vec<usize> = floor_of.keys().copied().collect();
            for index in live {
                for &link in &self.turns[index].links {
                    mark(link, 0, &mut floor_of);
                }
            }
            if floor_of.len() == before {
                break;
            }
        }
        floor_of.into_keys().collect()
    }
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::open(gc_config(dir.path())).unwrap();
    let mut model = Model::default();
    let mut seed = 0u64;
    // The blobs on disk as of the last collection, plus every payload and patch since.
    let mut stored: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
    for op in ops {
        match op.clone() {
            Op::Create => {
                let id = new_context(&engine);
                model.contexts.push(ModelContext {
                    id,
                    ..ModelContext::default()
                });
            }
            Op::Fork { turn } => {
                let alive: Vec<usize> = (0..model.turns.len())
                    .filter(|t| !model.dead.contains(t))
                    .collect();
                let Some(&base) = alive.get(turn % alive.len().max(1)) else {
                    continue;
                };
                let id = block_on(engine.fork(model.turns[base].id))
                    .unwrap()
                    .context_id;
                model.contexts.push(ModelContext {
                    id,
                    head: Some(base),
                    base: Some(base),
                    ..ModelContext::default()
                });
            }
            Op::Append {
                context,
                parent,
                link,
            } => {
                let live: Vec<usize> = (0..model.contexts.len())
                    .filter(|&c| !model.contexts[c].deleted)
                    .collect();
                let Some(&c) = live.get(context % live.len().max(1)) else {
                    continue;
                };
                // An explicit parent: one of the context's own turns at or above its floor.
                let own: Vec<usize> = (0..model.turns.len())
                    .filter(|&t| {
                        model.turns[t].context == c
                            && model.turns[t].depth >= model.contexts[c].floor
                            && !model.dead.contains(&t)
                    })
                    .collect();
                let parent = parent.and_then(|p| own.get(p % own.len().max(1)).copied());
                let reachable = model.reachable();
                let mut linkable: Vec<usize> = reachable.into_iter().collect();
                linkable.sort_unstable();
                let link = link.and_then(|l| linkable.get(l % linkable.len().max(1)).copied());
                seed += 1;
                let payload = random_payload(seed, 1024 + (seed as usize * 37) % 3000);
                let options = ctxstore_engine::TurnOptions {
                    key: Some(Bytes::from(format!("k{seed}"))),
                    labels: vec![("run_id".into(), format!("c{c}"))],
                    parent: match parent {
                        Some(p) => ctxstore_engine::Parent::Turn(model.turns[p].id),
                        None => ctxstore_engine::Parent::Head,
                    },
                    links: link.iter().map(|&l| model.turns[l].id).collect(),
                    ..Default::default()
                };
                let request = AppendRequest {
                    context_id: model.contexts[c].id,
                    expected_head: None,
                    type_tag: 0,
                    codec: 0,
                    payload: AppendPayload::Bytes(Bytes::from(payload.clone())),
                    options,
                };
                let from = parent.or(model.contexts[c].head);
                let depth = from.map_or(0, |p| model.turns[p].depth + 1);
                match block_on(engine.append(request)) {
                    Ok(appended) => {
                        stored.insert(payload.clone());
                        model.turns.push(ModelTurn {
                            id: appended.turn.turn_id,
                            seed,
                            context: c,
                            parent: from,
                            depth,
                            links: link.into_iter().collect(),
                            payload,
                            patches: Vec::new(),
                            redacted: false,
                        });
                        model.contexts[c].head = Some(model.turns.len() - 1);
                    }
                    Err(error) => {
                        // Only a head below the floor can refuse: the new turn would be
                        // invisible.
                        assert!(depth < model.contexts[c].floor, "{error}");
                    }
                }
            }
            Op::Delete { context } => {
                let Some(c) = (!model.contexts.is_empty()).then(|| context % model.contexts.len())
                else {
                    continue;
                };
                let result = block_on(engine.delete_context(&ContextRef::Id(model.contexts[c].id)));
                assert_eq!(result.is_ok(), !model.contexts[c].deleted);
                model.contexts[c].deleted = true;
            }
            Op::Prune { context, keep } => {
                let Some(c) = (!model.contexts.is_empty()).then(|| context % model.contexts.len())
                else {
                    continue;
                };
                let view =
                    block_on(engine.prune_context(&ContextRef::Id(model.contexts[c].id), keep));
                if let Ok(view) = view {
                    model.contexts[c].floor = view.floor_depth;
                }
            }
            Op::Patch { turn } | Op::Redact { turn } => {
                let alive: Vec<usize> = (0..model.turns.len())
                    .filter(|t| !model.dead.contains(t))
                    .collect();
                let Some(&t) = alive.get(turn % alive.len().max(1)) else {
                    continue;
                };
                let turn_id = model.turns[t].id;
                let result = if matches!(op, Op::Patch { .. }) {
                    seed += 1;
                    let payload = random_payload(seed, 512 + (seed as usize * 53) % 2000);
                    let result = block_on(engine.patch_turn(turn_id, Bytes::from(payload.clone())));
                    if result.is_ok() {
                        stored.insert(payload.clone());
                        model.turns[t].patches.push(payload);
                    }
                    result
                } else {
                    let result = block_on(engine.redact_turn(turn_id));
                    if result.is_ok() {
                        model.turns[t].redacted = true;
                    }
                    result
                };
                // A redacted turn takes no more overlays; any other (collected or not yet,
                // reachable or not) takes them.
                match result {
                    Ok(overlaid) => assert_eq!(overlaid.turn.redacted, model.turns[t].redacted),
                    Err(error) => {
                        assert!(model.turns[t].redacted, "{error}");
                        assert!(matches!(error, ctxstore_engine::EngineError::Redacted(_)));
                    }
                }
            }
            Op::Gc => {
                let reachable = model.reachable();
                let newly: Vec<usize> = (0..model.turns.len())
                    .filter(|t| !reachable.contains(t) && !model.dead.contains(t))
                    .collect();
                // Every payload and patch is unique: the blobs that go are those no live,
                // unredacted turn keeps and that a turn (now dead, or redacted) let go.
                let kept_before: std::collections::HashSet<Vec<u8>> = stored.clone();
                let report = engine.gc().unwrap();
                model.dead.extend(newly.iter().copied());
                stored = model
                    .turns
                    .iter()
                    .enumerate()
                    .filter(|(index, _)| !model.dead.contains(index))
                    .flat_map(|(_, turn)| turn.blobs())
                    .cloned()
                    .collect();
                assert_eq!(report.turns_dead, newly.len() as u64, "{report:?}");
                let gone = kept_before.difference(&stored).count();
                assert_eq!(report.blobs_dead, gone as u64, "{report:?}");
                check_model(&engine, &model);
            }
            Op::Reopen => {
                engine.shutdown();
                let report = verify(dir.path()).unwrap();
                assert!(report.is_ok(), "{report}");
                engine = Engine::open(gc_config(dir.path())).unwrap();
                check_model(&engine, &model);
            }
        }
    }
    engine.gc().unwrap();
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}

/// Collected turns and their blobs are gone, everything else reads back in its latest view
/// (the last patch, or redacted), and the store holds exactly the bytes live, unredacted
/// turns keep (every pack with anything dead was compacted).
fn check_model(engine: &Engine, model: &Model) {
    let mut dead = HashMap::new();
    let mut live_bytes = 0u64;
    let mut kept = std::collections::HashSet::new();
    for (index, turn) in model.turns.iter().enumerate() {
        if model.dead.contains(&index) {
            dead.insert(turn.id, turn.payload.clone());
            continue;
        }
        let read = block_on(engine.turn(turn.id)).unwrap();
        assert_eq!(read.redacted, turn.redacted, "turn {}", turn.id);
        if turn.redacted {
            assert_eq!(read.payload_hash, BlobHash::EMPTY);
            continue;
        }
        let latest = turn.patches.last().unwrap_or(&turn.payload);
        let bytes = block_on(engine.blob(read.payload_hash)).unwrap();
        assert_eq!(&bytes[..], &latest[..], "turn {}", turn.id);
        for blob in turn.blobs() {
            if kept.insert(blob.clone()) {
                live_bytes += blob.len() as u64;
            }
        }
    }
    check(engine, &HashMap::new(), &dead);
    // Through each live context: its turn log (every branch), its keys and the store-wide
    // label index list exactly its own turns at or above its floor, none collected.
    for (c, context) in model.contexts.iter().enumerate() {
        if context.deleted {
            continue;
        }
        let mut own: Vec<TurnId> = model
            .turns
            .iter()
            .filter(|turn| turn.context == c && turn.depth >= context.floor)
            .map(|turn| turn.id)
            .collect();
        own.sort_unstable();
        let query = ctxstore_engine::turns::LogQuery {
            labels: vec![("run_id".into(), format!("c{c}"))],
            cursor: None,
            limit: 1000,
            payload_bytes_max: 0,
            as_of: None,
        };
        let page = engine
            .turn_log(&ContextRef::Id(context.id), &query)
            .unwrap();
        let mut logged: Vec<TurnId> = page.turns.iter().map(|t| t.turn.turn_id).collect();
        logged.sort_unstable();
        assert_eq!(logged, own, "turn log of context {c}");
        let found = engine
            .find_turns("run_id", &format!("c{c}"), TurnId::NONE, 1000)
            .unwrap();
        let mut found: Vec<TurnId> = found.turns.iter().map(|t| t.turn.turn_id).collect();
        found.sort_unstable();
        assert_eq!(found, own, "label index of context {c}");
        for turn in model.turns.iter().filter(|turn| turn.context == c) {
            let key = format!("k{}", seed_of(model, turn.id));
            let by_key = engine
                .turn_by_key(&ContextRef::Id(context.id), key.as_bytes())
                .unwrap();
            let expected = turn.depth >= context.floor;
            assert_eq!(by_key.is_some(), expected, "key of turn {}", turn.id);
        }
    }
    check(engine, &HashMap::new(), &dead);
    if engine.stats().gc_runs == 0 {
        return;
    }
    let released = model.turns.iter().any(|turn| turn.redacted);
    if model.dead.is_empty() && !released {
        return;
    }
    assert_eq!(engine.stats().unique_bytes, live_bytes);
}

fn seed_of(model: &Model, turn_id: TurnId) -> u64 {
    model
        .turns
        .iter()
        .find(|turn| turn.id == turn_id)
        .map_or(0, |turn| turn.seed)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    #[test]
    fn collections_take_exactly_the_unreachable_turns_and_their_bytes(
        ops in proptest::collection::vec(op(), 1..80)
    ) {
        run(ops);
    }
}

/// A requested collection or backup while another one runs (the scheduler's included) waits
/// for it and then runs, instead of failing: a user's `ctxstore gc` must not depend on whether
/// the schedule happened to be collecting.
#[test]
fn requested_collections_and_backups_wait_for_the_running_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = gc_config(dir.path());
    // A scheduled round every millisecond: nearly always one running.
    config.gc_interval_ms = 1;
    let engine = Engine::open(config).unwrap();
    let kept = new_context(&engine);
    for round in 0..4u64 {
        let doomed = filled_context(&engine, round, 16, 8 << 10);
        append(&engine, kept, &random_payload(9_000 + round, 8 << 10), None).unwrap();
        block_on(engine.delete_context(&ContextRef::Id(doomed))).unwrap();
    }
    let backups = tempfile::tempdir().unwrap();
    let workers: Vec<_> = (0..3)
        .map(|worker| {
            let engine = engine.clone();
            let target = backups.path().join(format!("backup-{worker}"));
            std::thread::spawn(move || {
                for _ in 0..5 {
                    engine
                        .gc()
                        .expect("a requested collection waits, never fails");
                }
                engine.backup(&target).expect("a backup waits, never fails");
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert!(engine.stats().gc_runs >= 15);
    assert_eq!(engine.stats().unique_bytes, 4 * (8 << 10));
    engine.shutdown();
    for worker in 0..3 {
        let report = verify(&backups.path().join(format!("backup-{worker}"))).unwrap();
        assert!(report.is_ok(), "{report}");
    }
}

#[test]
fn deleting_past_the_trigger_starts_a_collection_without_waiting_for_the_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = gc_config(dir.path());
    config.gc_deleted_bytes_trigger = 64 << 10;
    let engine = Engine::open(config).unwrap();
    let doomed = new_context(&engine);
    let kept = new_context(&engine);
    for i in 0..8 {
        append(&engine, doomed, &random_payload(i, 16 << 10), None).unwrap();
        append(&engine, kept, &random_payload(100 + i, 1 << 10), None).unwrap();
    }
    assert_eq!(engine.stats().gc_runs, 0, "the schedule is off");
    block_on(engine.delete_context(&ContextRef::Id(doomed))).unwrap();
    // The scheduler looks every second; allow it a generous while on a loaded machine.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while engine.stats().gc_runs == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no collection started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The collection took the deleted context's bytes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while engine.stats().unique_bytes != 8 << 10 {
        assert!(std::time::Instant::now() < deadline, "{:?}", engine.stats());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
