//! Model-based property test: random sequences of create / fork / append (with and without
//! expected head, by bytes and by hash) and every read, checked against a plain in-memory
//! model, with close-and-reopen at random points; and the metadata of contexts (names, tags,
//! key-value entries, clone, get-or-create). TurnIDs are predicted exactly: every successful
//! create, fork or append takes the next record id, and every metadata record as many ids as
//! its body needs slots.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use std::collections::BTreeMap;

use ctxstore_engine::format::context_meta::{ContextMeta, KvEntry, KvExpiry};
use ctxstore_engine::format::turn_log::meta_slot_count;
use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, ContextId, ContextRef, Engine, EngineConfig,
    EngineError, ErrorKind, NewContext, Placement, TurnId, verify,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Expect {
    Nothing,
    Current,
    Stale,
}

#[derive(Clone, Debug)]
enum Op {
    Create,
    Fork {
        turn: usize,
    },
    Append {
        context: usize,
        payload: usize,
        expect: Expect,
    },
    AppendByHash {
        context: usize,
        payload: usize,
    },
    Last {
        context: usize,
        limit: u32,
        payloads: bool,
    },
    Before {
        context: usize,
        turn: usize,
        limit: u32,
    },
    Range {
        context: usize,
        from_depth: u32,
        limit: u32,
    },
    Chain {
        turn: usize,
        from_depth: u32,
        limit: u32,
    },
    Blob {
        payload: usize,
    },
    CreateNamed {
        name: usize,
        tag: Option<(usize, usize)>,
        get_or_create: bool,
    },
    SetTag {
        context: usize,
        key: usize,
        value: Option<usize>,
        expect: Expect,
    },
    KvPut {
        context: usize,
        key: usize,
        payload: usize,
        if_absent: bool,
        /// Index into `KV_TTLS_MS`; the 1 ms one has expired when the op ends.
        ttl: usize,
    },
    /// Issue 34: restart a key's TTL (the given one, else its own).
    KvTouch {
        context: usize,
        key: usize,
        ttl: Option<usize>,
    },
    KvDelete {
        context: usize,
        key: usize,
    },
    Clone {
        context: usize,
        name: usize,
    },
    /// Issue 15: the context is NOT_FOUND from then on, its name free.
    Delete {
        context: usize,
    },
    /// Issue 15: keep the newest `keep` depths (0: refused).
    Prune {
        context: usize,
        keep: u32,
    },
    Reopen,
}

const NAMES: [&str; 4] = ["alpha", "beta", "gamma", "alpha/2"];
const TAG_KEYS: [&str; 3] = ["status", "owner", "run_id"];
const TAG_VALUES: [&str; 3] = [
    "idle",
    "running",
    "a-much-longer-value-that-needs-more-than-one-slot-of-the-turns-log-to-be-stored-whole",
];
const KV_KEYS: [&[u8]; 4] = [b"a", b"ab", b"b", b"writes/0001/task"];
/// Key-value TTLs: none, two that outlive any run, and one expired when its op ends.
const KV_TTLS_MS: [u64; 4] = [0, 3_600_000, 7_200_000, KV_TTL_EXPIRING_MS];
const KV_TTL_EXPIRING_MS: u64 = 1;

fn expect() -> impl Strategy<Value = Expect> {
    prop_oneof![
        Just(Expect::Nothing),
        Just(Expect::Current),
        Just(Expect::Stale)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let pick = 0..1000usize;
    prop_oneof![
        2 => Just(Op::Create),
        1 => pick.clone().prop_map(|turn| Op::Fork { turn }),
        8 => (pick.clone(), 0..PAYLOADS, prop_oneof![Just(Expect::Nothing), Just(Expect::Current), Just(Expect::Stale)])
            .prop_map(|(context, payload, expect)| Op::Append { context, payload, expect }),
        1 => (pick.clone(), 0..PAYLOADS).prop_map(|(context, payload)| Op::AppendByHash { context, payload }),
        2 => (pick.clone(), 0..6u32, any::<bool>()).prop_map(|(context, limit, payloads)| Op::Last { context, limit, payloads }),
        1 => (pick.clone(), pick.clone(), 0..5u32).prop_map(|(context, turn, limit)| Op::Before { context, turn, limit }),
        1 => (pick.clone(), 0..8u32, 0..5u32).prop_map(|(context, from_depth, limit)| Op::Range { context, from_depth, limit }),
        1 => (pick.clone(), 0..8u32, 0..12u32).prop_map(|(turn, from_depth, limit)| Op::Chain { turn, from_depth, limit }),
        1 => (0..PAYLOADS).prop_map(|payload| Op::Blob { payload }),
        2 => (0..NAMES.len(), proptest::option::of((0..TAG_KEYS.len(), 0..TAG_VALUES.len())), any::<bool>())
            .prop_map(|(name, tag, get_or_create)| Op::CreateNamed { name, tag, get_or_create }),
        2 => (pick.clone(), 0..TAG_KEYS.len(), proptest::option::of(0..TAG_VALUES.len()), expect())
            .prop_map(|(context, key, value, expect)| Op::SetTag { context, key, value, expect }),
        2 => (pick.clone(), 0..KV_KEYS.len(), 0..PAYLOADS, any::<bool>(), 0..KV_TTLS_MS.len())
            .prop_map(|(context, key, payload, if_absent, ttl)| Op::KvPut { context, key, payload, if_absent, ttl }),
        1 => (pick.clone(), 0..KV_KEYS.len(), proptest::option::of(1..KV_TTLS_MS.len() - 1))
            .prop_map(|(context, key, ttl)| Op::KvTouch { context, key, ttl }),
        1 => (pick.clone(), 0..KV_KEYS.len()).prop_map(|(context, key)| Op::KvDelete { context, key }),
        1 => (pick.clone(), 0..NAMES.len()).prop_map(|(context, name)| Op::Clone { context, name }),
        1 => pick.clone().prop_map(|context| Op::Delete { context }),
        1 => (pick.clone(), 0..4u32).prop_map(|(context, keep)| Op::Prune { context, keep }),
        1 => Just(Op::Reopen),
    ]
}

const PAYLOADS: usize = 6;

fn payload(index: usize) -> Vec<u8> {
    match index {
        0 => Vec::new(),
        1 => b"system prompt".to_vec(),
        2 => chat_payload(2, 10_240),
        3 => chat_payload(3, 300),
        4 => random_payload(4, 70_000),
        _ => chat_payload(index as u64, 2_000),
    }
}

/// Blob records a payload takes: one, or (over the chunk threshold, issue 16) a manifest and
/// each distinct chunk.
fn records_of(index: usize) -> u64 {
    let bytes = payload(index);
    let chunking = ctxstore_engine::ChunkingConfig::default();
    if !chunking.applies_to(bytes.len()) {
        return 1;
    }
    let chunks: std::collections::HashSet<BlobHash> = chunking
        .cut(&bytes)
        .into_iter()
        .map(|range| BlobHash::of(&bytes[range]))
        .collect();
    1 + chunks.len() as u64
}

#[derive(Clone, Debug, PartialEq)]
struct ModelTurn {
    id: TurnId,
    parent: TurnId,
    depth: u32,
    context: ContextId,
    payload: usize,
}

/// A context's metadata in the model.
#[derive(Clone, Debug, Default, PartialEq)]
struct ModelMeta {
    name: Option<String>,
    tags: BTreeMap<String, String>,
    /// Key → (payload index, TTL in ms): the live entries (an expired one is gone).
    kv: BTreeMap<Vec<u8>, (usize, u64)>,
    deleted: bool,
    floor: u32,
}

#[derive(Default)]
struct Model {
    next_record_id: u64,
    turns: Vec<ModelTurn>,
    heads: Vec<TurnId>,
    metas: Vec<ModelMeta>,
    stored: [bool; PAYLOADS],
}

impl Model {
    fn turn(&self, id: TurnId) -> Option<&ModelTurn> {
        self.turns.iter().find(|turn| turn.id == id)
    }

    fn depth_of(&self, head: TurnId) -> u32 {
        self.turn(head).map_or(0, |turn| turn.depth)
    }

    /// `start` and its ancestors down to `floor`, newest first.
    fn floored(&self, start: TurnId, floor: u32) -> Vec<ModelTurn> {
        let mut out = self.ancestry(start);
        out.retain(|turn| turn.depth >= floor);
        out
    }

    /// `start` and its ancestors, newest first.
    fn ancestry(&self, start: TurnId) -> Vec<ModelTurn> {
        let mut out = Vec::new();
        let mut cursor = start;
        while let Some(turn) = self.turn(cursor) {
            out.push(turn.clone());
            cursor = turn.parent;
        }
        out
    }

    /// The turns of `tip`'s chain with depth in `from_depth..from_depth + limit`, oldest first.
    fn depth_window(&self, tip: TurnId, from_depth: u32, limit: u32) -> Vec<ModelTurn> {
        let end = u64::from(from_depth) + u64::from(limit);
        let mut window: Vec<_> = self
            .ancestry(tip)
            .into_iter()
            .filter(|turn| turn.depth >= from_depth && u64::from(turn.depth) < end)
            .collect();
        window.reverse();
        window
    }

    fn take_record_id(&mut self) -> u64 {
        self.next_record_id += 1;
        self.next_record_id
    }

    /// A metadata record takes as many record ids as its body needs slots.
    fn take_meta(&mut self, meta: &ContextMeta) {
        self.next_record_id += u64::from(meta_slot_count(meta.encode().len()));
    }

    fn by_name(&self, name: &str) -> Option<usize> {
        self.metas
            .iter()
            .position(|meta| meta.name.as_deref() == Some(name))
    }

    fn new_context(&mut self, head: TurnId, meta: ModelMeta) -> ContextId {
        self.take_record_id();
        self.heads.push(head);
        self.metas.push(meta);
        ContextId(self.heads.len() as u64)
    }
}

/// The engine's view of every context agrees with the model: head, name, tags, key-value
/// entries (keys, value hashes and lengths).
fn check_metadata(engine: &Engine, model: &Model) {
    for (index, meta) in model.metas.iter().enumerate() {
        let context = ContextRef::Id(ContextId(index as u64 + 1));
        if meta.deleted {
            assert_eq!(
                engine.context(&context).unwrap_err().kind(),
                ErrorKind::NotFound
            );
            continue;
        }
        let view = engine.context(&context).unwrap();
        assert_eq!(view.floor_depth, meta.floor);
        assert_eq!(view.head.head_turn_id, model.heads[index]);
        assert_eq!(view.name, meta.name);
        assert_eq!(view.tags, meta.tags);
        if let Some(name) = &meta.name {
            assert_eq!(
                engine.resolve(&ContextRef::Name(name.clone())).unwrap(),
                ContextId(index as u64 + 1)
            );
        }
        let items = engine.kv_scan(&context, b"", None, 100).unwrap();
        let got: Vec<(Vec<u8>, BlobHash, u32, u64)> = items
            .into_iter()
            .map(|item| {
                assert_eq!(item.ttl_ms > 0, item.expires_at_unix_ms > 0, "{item:?}");
                (
                    item.key.to_vec(),
                    item.value_hash,
                    item.value_len,
                    item.ttl_ms,
                )
            })
            .collect();
        let want: Vec<(Vec<u8>, BlobHash, u32, u64)> = meta
            .kv
            .iter()
            .map(|(key, &(index, ttl_ms))| {
                let value = payload(index);
                (
                    key.clone(),
                    BlobHash::of(&value),
                    value.len() as u32,
                    ttl_ms,
                )
            })
            .collect();
        assert_eq!(got, want);
    }
}

fn check_turns(
    actual: &[ctxstore_engine::TurnWithPayload],
    expected: &[ModelTurn],
    payloads: bool,
) {
    assert_eq!(actual.len(), expected.len(), "number of turns");
    for (got, want) in actual.iter().zip(expected) {
        assert_eq!(got.turn.turn_id, want.id);
        assert_eq!(got.turn.parent_turn_id, want.parent);
        assert_eq!(got.turn.depth, want.depth);
        assert_eq!(got.turn.payload_hash, BlobHash::of(&payload(want.payload)));
        assert_eq!(got.turn.payload_len as usize, payload(want.payload).len());
        if payloads {
            assert_eq!(got.payload.as_deref(), Some(&payload(want.payload)[..]));
        } else {
            assert!(got.payload.is_none());
        }
    }
}

fn engine_config(dir: &std::path::Path) -> EngineConfig {
    let mut config = common::config(dir);
    config.shard_count = 3;
    // Exercise a multi-thread placement too.
    config.placement = "seq,s0|s1,s2".parse::<Placement>().unwrap();
    // The model counts record ids: the reaper's removals of expired entries would write
    // records it does not know of (reads hide expired entries without it).
    config.reaper_interval_ms = 3_600_000;
    config
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::open(engine_config(dir.path())).unwrap();
    let mut model = Model::default();
    for op in ops {
        apply(&mut engine, &mut model, dir.path(), op);
    }
    check_metadata(&engine, &model);
    engine.shutdown();
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.turns, model.turns.len() as u64);
    let deleted = model.metas.iter().filter(|meta| meta.deleted).count() as u64;
    assert_eq!(report.contexts, model.heads.len() as u64 - deleted);
    assert_eq!(report.contexts_deleted, deleted);
}

fn pick<T>(items: &[T], index: usize) -> Option<&T> {
    if items.is_empty() {
        None
    } else {
        items.get(index % items.len())
    }
}

/// The context an op targets, when it names one.
fn target(op: &Op) -> Option<usize> {
    match op {
        Op::Append { context, .. }
        | Op::AppendByHash { context, .. }
        | Op::Last { context, .. }
        | Op::Before { context, .. }
        | Op::Range { context, .. }
        | Op::SetTag { context, .. }
        | Op::KvPut { context, .. }
        | Op::KvDelete { context, .. }
        | Op::KvTouch { context, .. }
        | Op::Clone { context, .. }
        | Op::Delete { context }
        | Op::Prune { context, .. } => Some(*context),
        _ => None,
    }
}

fn apply(engine: &mut Engine, model: &mut Model, dir: &std::path::Path, op: Op) {
    // Every request naming a deleted context is NOT_FOUND, whatever it is.
    if let Some(context) = target(&op)
        && !model.heads.is_empty()
        && model.metas[context % model.heads.len()].deleted
    {
        let context_id = ContextId((context % model.heads.len()) as u64 + 1);
        let not_found = |error: EngineError| assert_eq!(error.kind(), ErrorKind::NotFound);
        not_found(block_on(engine.head(context_id)).unwrap_err());
        not_found(append(engine, context_id, b"late", None).unwrap_err());
        not_found(block_on(engine.delete_context(&context_id.into())).unwrap_err());
        not_found(block_on(engine.last(context_id, 3, false)).unwrap_err());
        return;
    }
    match op {
        Op::Create => {
            let head = block_on(engine.create_context()).unwrap();
            let id = model.new_context(TurnId::NONE, ModelMeta::default());
            assert_eq!(head.context_id, id);
            assert_eq!((head.head_turn_id, head.head_depth), (TurnId::NONE, 0));
        }
        Op::Fork { turn } => {
            let Some(base) = pick(&model.turns, turn).cloned() else {
                return;
            };
            let head = block_on(engine.fork(base.id)).unwrap();
            let id = model.new_context(base.id, ModelMeta::default());
            assert_eq!(head.context_id, id);
            assert_eq!((head.head_turn_id, head.head_depth), (base.id, base.depth));
        }
        Op::Append {
            context,
            payload: index,
            expect,
        } => {
            let Some(&head) = pick(&model.heads, context) else {
                return;
            };
            let context_id = ContextId((context % model.heads.len()) as u64 + 1);
            let expected_head = match expect {
                Expect::Nothing => None,
                Expect::Current => Some(head),
                Expect::Stale => Some(TurnId(head.0 + 1_000_000)),
            };
            let result = append(engine, context_id, &payload(index), expected_head);
            if let Expect::Stale = expect {
                // The blob is made durable before the sequencer sees the stale head.
                model.stored[index] = true;
                match result {
                    Err(EngineError::Conflict { actual, .. }) => assert_eq!(actual, head),
                    other => panic!("stale expected head gave {other:?}"),
                }
                return;
            }
            let appended = result.unwrap();
            assert_eq!(appended.deduped, model.stored[index]);
            model.stored[index] = true;
            let id = TurnId(model.take_record_id());
            let depth = if head.is_none() {
                0
            } else {
                model.depth_of(head) + 1
            };
            let turn = ModelTurn {
                id,
                parent: head,
                depth,
                context: context_id,
                payload: index,
            };
            assert_eq!(appended.turn.turn_id, turn.id);
            assert_eq!(appended.turn.parent_turn_id, turn.parent);
            assert_eq!(appended.turn.depth, turn.depth);
            assert_eq!(appended.turn.context_id, turn.context);
            model.turns.push(turn);
            let slot = context % model.heads.len();
            model.heads[slot] = id;
        }
        Op::AppendByHash {
            context,
            payload: index,
        } => {
            let Some(&head) = pick(&model.heads, context) else {
                return;
            };
            let context_id = ContextId((context % model.heads.len()) as u64 + 1);
            let result = block_on(engine.append(AppendRequest {
                context_id,
                expected_head: None,
                type_tag: 3,
                codec: 4,
                payload: AppendPayload::StoredBlob(BlobHash::of(&payload(index))),
                options: Default::default(),
            }));
            if !model.stored[index] {
                assert_eq!(result.unwrap_err().kind(), ErrorKind::NotFound);
                return;
            }
            let appended = result.unwrap();
            assert!(appended.deduped);
            let id = TurnId(model.take_record_id());
            assert_eq!(appended.turn.turn_id, id);
            let depth = if head.is_none() {
                0
            } else {
                model.depth_of(head) + 1
            };
            model.turns.push(ModelTurn {
                id,
                parent: head,
                depth,
                context: context_id,
                payload: index,
            });
            let slot = context % model.heads.len();
            model.heads[slot] = id;
        }
        Op::Last {
            context,
            limit,
            payloads,
        } => {
            let Some(&head) = pick(&model.heads, context) else {
                assert_eq!(
                    block_on(engine.last(ContextId(1), limit, payloads))
                        .unwrap_err()
                        .kind(),
                    ErrorKind::NotFound
                );
                return;
            };
            let context_id = ContextId((context % model.heads.len()) as u64 + 1);
            let floor = model.metas[context % model.heads.len()].floor;
            let page = block_on(engine.last(context_id, limit, payloads)).unwrap();
            let mut expected = model.floored(head, floor);
            expected.truncate(limit as usize);
            let next = match expected.last() {
                Some(oldest) if !oldest.parent.is_none() && oldest.depth > floor => oldest.id,
                _ => TurnId::NONE,
            };
            expected.reverse();
            check_turns(&page.turns, &expected, payloads);
            assert_eq!(page.next_before, next);
            let head_now = block_on(engine.head(context_id)).unwrap();
            assert_eq!(
                (head_now.head_turn_id, head_now.head_depth),
                (head, model.depth_of(head))
            );
        }
        Op::Before {
            context,
            turn,
            limit,
        } => {
            let (Some(&head), Some(cursor)) = (
                pick(&model.heads, context),
                pick(&model.turns, turn).cloned(),
            ) else {
                return;
            };
            let context_id = ContextId((context % model.heads.len()) as u64 + 1);
            let page = block_on(engine.before(context_id, cursor.id, limit, false));
            // A cursor off the context's chain is refused (it would page another chain).
            let on_chain = model.ancestry(head).iter().any(|turn| turn.id == cursor.id);
            if !on_chain {
                let error = page.unwrap_err();
                assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
                return;
            }
            let page = page.unwrap();
            let floor = model.metas[context % model.heads.len()].floor;
            let mut expected = model.floored(cursor.parent, floor);
            expected.truncate(limit as usize);
            expected.reverse();
            check_turns(&page.turns, &expected, false);
        }
        Op::Range {
            context,
            from_depth,
            limit,
        } => {
            let Some(&head) = pick(&model.heads, context) else {
                return;
            };
            let context_id = ContextId((context % model.heads.len()) as u64 + 1);
            let floor = model.metas[context % model.heads.len()].floor;
            let turns =
                block_on(engine.range_by_depth(context_id, from_depth, limit, true)).unwrap();
            let from_depth = from_depth.max(floor);
            check_turns(&turns, &model.depth_window(head, from_depth, limit), true);
        }
        Op::Chain {
            turn,
            from_depth,
            limit,
        } => {
            let Some(tip) = pick(&model.turns, turn).cloned() else {
                return;
            };
            let turns = block_on(engine.chain(tip.id, from_depth, limit, false)).unwrap();
            check_turns(
                &turns,
                &model.depth_window(tip.id, from_depth, limit),
                false,
            );
        }
        Op::Blob { payload: index } => {
            let hash = BlobHash::of(&payload(index));
            match block_on(engine.blob(hash)) {
                Ok(bytes) => {
                    assert!(model.stored[index]);
                    assert_eq!(bytes, Bytes::from(payload(index)));
                }
                Err(error) => {
                    assert!(!model.stored[index]);
                    assert_eq!(error.kind(), ErrorKind::NotFound);
                }
            }
        }
        Op::CreateNamed {
            name,
            tag,
            get_or_create,
        } => create_named(engine, model, name, tag, get_or_create),
        Op::SetTag {
            context,
            key,
            value,
            expect,
        } => set_tag(engine, model, context, key, value, expect),
        Op::KvPut {
            context,
            key,
            payload: index,
            if_absent,
            ttl,
        } => {
            if model.heads.is_empty() {
                return;
            }
            let slot = context % model.heads.len();
            let key = KV_KEYS[key].to_vec();
            let value = Bytes::from(payload(index));
            let ttl_ms = KV_TTLS_MS[ttl];
            block_on(engine.kv_put_ttl(
                &ContextId(slot as u64 + 1).into(),
                vec![(key.clone(), value.clone())],
                if_absent,
                ttl_ms,
            ))
            .unwrap();
            model.stored[index] = true;
            if if_absent && model.metas[slot].kv.contains_key(&key) {
                return;
            }
            model.take_meta(&ContextMeta::KvPut(vec![KvEntry {
                key: key.clone(),
                value_hash: BlobHash::of(&value),
                value_len: value.len() as u32,
                ttl_ms,
                expires_at_unix_ms: ttl_ms,
                vectors: None,
            }]));
            if ttl_ms == KV_TTL_EXPIRING_MS {
                // Past its expiry before the next op reads: gone from every read.
                std::thread::sleep(std::time::Duration::from_millis(3));
                model.metas[slot].kv.remove(&key);
            } else {
                model.metas[slot].kv.insert(key, (index, ttl_ms));
            }
        }
        Op::KvTouch { context, key, ttl } => {
            if model.heads.is_empty() {
                return;
            }
            let slot = context % model.heads.len();
            let key = KV_KEYS[key].to_vec();
            let given = ttl.map(|ttl| KV_TTLS_MS[ttl]);
            let touched = block_on(engine.kv_touch(
                &ContextId(slot as u64 + 1).into(),
                vec![key.clone()],
                given,
            ))
            .unwrap();
            // The entry's TTL from now on; 0 leaves it untouched (no TTL given or had).
            let new_ttl_ms = match model.metas[slot].kv.get_mut(&key) {
                Some(entry) => {
                    let new_ttl_ms = given.unwrap_or(entry.1);
                    entry.1 = new_ttl_ms;
                    new_ttl_ms
                }
                None => 0,
            };
            // Every live key comes back as it is now; absent ones do not.
            let want: Vec<(Vec<u8>, u64)> = model.metas[slot]
                .kv
                .get(&key)
                .map(|(_, ttl_ms)| (key.clone(), *ttl_ms))
                .into_iter()
                .collect();
            let got: Vec<(Vec<u8>, u64)> = touched
                .iter()
                .map(|item| (item.key.to_vec(), item.ttl_ms))
                .collect();
            assert_eq!(got, want);
            if new_ttl_ms > 0 {
                model.take_meta(&ContextMeta::KvTouch(vec![KvExpiry {
                    key,
                    ttl_ms: new_ttl_ms,
                    expires_at_unix_ms: new_ttl_ms,
                }]));
            }
        }
        Op::KvDelete { context, key } => {
            if model.heads.is_empty() {
                return;
            }
            let slot = context % model.heads.len();
            let key = KV_KEYS[key].to_vec();
            block_on(engine.kv_delete(&ContextId(slot as u64 + 1).into(), vec![key.clone()]))
                .unwrap();
            model.take_meta(&ContextMeta::KvDelete(vec![key.clone()]));
            model.metas[slot].kv.remove(&key);
        }
        Op::Clone { context, name } => {
            if model.heads.is_empty() {
                return;
            }
            let slot = context % model.heads.len();
            let name = NAMES[name].to_string();
            let source = ContextId(slot as u64 + 1);
            let result = block_on(engine.clone_context(source.into(), name.clone()));
            if model.by_name(&name).is_some() {
                assert_eq!(result.unwrap_err().kind(), ErrorKind::AlreadyExists);
                return;
            }
            let view = result.unwrap();
            let meta = ModelMeta {
                name: Some(name.clone()),
                ..model.metas[slot].clone()
            };
            let head = model.heads[slot];
            let id = model.new_context(head, meta);
            model.take_meta(&ContextMeta::CloneFrom(source));
            model.take_meta(&ContextMeta::Name(name));
            assert_eq!(view.head.context_id, id);
            assert_eq!(view.head.head_turn_id, head);
        }
        Op::Delete { context } => {
            if model.heads.is_empty() {
                return;
            }
            let slot = context % model.heads.len();
            let context_id = ContextId(slot as u64 + 1);
            let before = block_on(engine.delete_context(&context_id.into())).unwrap();
            assert_eq!(before.head.head_turn_id, model.heads[slot]);
            model.take_meta(&ContextMeta::Delete);
            let meta = &mut model.metas[slot];
            // The name is free again; tags and key-value entries went with the context.
            *meta = ModelMeta {
                deleted: true,
                ..ModelMeta::default()
            };
        }
        Op::Prune { context, keep } => {
            if model.heads.is_empty() {
                return;
            }
            let slot = context % model.heads.len();
            let context_id = ContextId(slot as u64 + 1);
            let result = block_on(engine.prune_context(&context_id.into(), keep));
            if keep == 0 {
                assert_eq!(result.unwrap_err().kind(), ErrorKind::InvalidArgument);
                return;
            }
            let head = model.heads[slot];
            let floor = if head.is_none() {
                0
            } else {
                (model.depth_of(head) + 1).saturating_sub(keep)
            };
            let floor = floor.max(model.metas[slot].floor);
            assert_eq!(result.unwrap().floor_depth, floor);
            model.take_meta(&ContextMeta::Floor(floor));
            model.metas[slot].floor = floor;
        }
        Op::Reopen => {
            engine.shutdown();
            *engine = Engine::open(engine_config(dir)).unwrap();
            let stats = engine.stats();
            assert_eq!(stats.turns, model.turns.len() as u64);
            // Live contexts: a deleted one keeps its slot but no longer counts.
            let live = model.metas.iter().filter(|meta| !meta.deleted).count();
            assert_eq!(stats.contexts, live as u64);
            let records: u64 = (0..PAYLOADS)
                .filter(|index| model.stored[*index])
                .map(records_of)
                .sum();
            assert_eq!(stats.blobs, records);
            check_metadata(engine, model);
        }
    }
}

fn create_named(
    engine: &Engine,
    model: &mut Model,
    name: usize,
    tag: Option<(usize, usize)>,
    get_or_create: bool,
) {
    let name = NAMES[name].to_string();
    let tags: Vec<(String, String)> = tag
        .map(|(k, v)| (TAG_KEYS[k].to_string(), TAG_VALUES[v].to_string()))
        .into_iter()
        .collect();
    let new = NewContext {
        name: Some(name.clone()),
        tags: tags.clone(),
        get_or_create,
        ..NewContext::default()
    };
    let result = block_on(engine.create(new));
    match (model.by_name(&name), get_or_create) {
        (Some(owner), true) => {
            let found = result.unwrap();
            assert!(!found.created);
            assert_eq!(found.context.head.context_id, ContextId(owner as u64 + 1));
        }
        (Some(_), false) => assert_eq!(result.unwrap_err().kind(), ErrorKind::AlreadyExists),
        (None, _) => {
            let created = result.unwrap();
            let meta = ModelMeta {
                name: Some(name.clone()),
                tags: tags.iter().cloned().collect(),
                ..ModelMeta::default()
            };
            let id = model.new_context(TurnId::NONE, meta);
            model.take_meta(&ContextMeta::Name(name));
            if !tags.is_empty() {
                let changes = tags.into_iter().map(|(k, v)| (k, Some(v))).collect();
                model.take_meta(&ContextMeta::Tags(changes));
            }
            assert!(created.created);
            assert_eq!(created.context.head.context_id, id);
        }
    }
}

fn set_tag(
    engine: &Engine,
    model: &mut Model,
    context: usize,
    key: usize,
    value: Option<usize>,
    expect: Expect,
) {
    let Some(&head) = pick(&model.heads, context) else {
        return;
    };
    let slot = context % model.heads.len();
    let expected_head = match expect {
        Expect::Nothing => None,
        Expect::Current => Some(head),
        Expect::Stale => Some(TurnId(head.0 + 1_000_000)),
    };
    let key = TAG_KEYS[key].to_string();
    let change = (
        key.clone(),
        value.map(|value| TAG_VALUES[value].to_string()),
    );
    let (set, remove) = match &change.1 {
        Some(value) => (vec![(key.clone(), value.clone())], vec![]),
        None => (vec![], vec![key.clone()]),
    };
    let context_ref = ContextId(slot as u64 + 1).into();
    let result = block_on(engine.update_tags(&context_ref, set, remove, expected_head));
    if let Expect::Stale = expect {
        assert_eq!(result.unwrap_err().kind(), ErrorKind::Conflict);
        return;
    }
    let view = result.unwrap();
    model.take_meta(&ContextMeta::Tags(vec![change.clone()]));
    let meta = &mut model.metas[slot];
    match change.1 {
        Some(value) => drop(meta.tags.insert(key, value)),
        None => drop(meta.tags.remove(&key)),
    }
    assert_eq!(view.tags, meta.tags);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn engine_matches_the_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops);
    }
}
