//! The power-loss campaign (issue 36): the real engine on the simulated disk
//! (`ctxstore_engine::simulated_disk`), random workloads, a power cut before a random call
//! of the file layer — during the workload or during the recovery after the last cut — then
//! the crash image, a reopen, and a check against a model of what was acknowledged.
//!
//! Shared by `tests/power_loss.rs` (CI size) and `examples/power_loss_campaign.rs` (the
//! release run).
//!
//! The model: every call the engine answered `Ok` is acknowledged and must be there after
//! the cut; the one call in flight at the cut (answered with an error) is either wholly there
//! or not at all; a call answered with an error while the power was on left nothing. Checked:
//! each live context's id, name, tags, key-value entries (and the vector each was put with:
//! an exact search under its key finds it, or nothing), head and newest turns (ids,
//! parents, depths, keys, payload bytes by hash, patches and redactions), deleted contexts
//! gone, every acknowledged backup verifiable, `verify` clean, and the store takes an
//! append again, with a TurnID above every one it ever answered.

#![allow(clippy::expect_used, clippy::unwrap_used, dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use ctxstore_engine::simulated_disk::{CrashReport, SimulatedDisk};
use ctxstore_engine::turn_vectors::TurnVectorSearch;
use ctxstore_engine::vectors::{Metric, VectorEntry, VectorSearch};
use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, ContextId, ContextRef, Engine, EngineConfig,
    EngineError, NewContext, Placement, TurnId, TurnOptions, TurnVectors,
};

/// splitmix64, for the workload's choices (the disk has its own, from the same seed).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x005E_ED0F_C0FF_EE00)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(len + 8);
        while bytes.len() < len {
            bytes.extend_from_slice(&self.next().to_le_bytes());
        }
        bytes.truncate(len);
        bytes
    }
    /// 1 to `max` random bytes.
    fn bytes_below(&mut self, max: u64) -> Vec<u8> {
        let len = 1 + self.below(max) as usize;
        self.bytes(len)
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> Option<T> {
        if items.is_empty() {
            None
        } else {
            Some(items[self.below(items.len() as u64) as usize])
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct TurnModel {
    parent: TurnId,
    depth: u32,
    /// The payload as appended, then as the newest patch left it.
    hash: BlobHash,
    redacted: bool,
    key: Vec<u8>,
    labels: Vec<(String, String)>,
    /// Its vector of index `pl`: a turn search of its context finds it while it is visible
    /// and not redacted.
    vector: Option<Vec<u16>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ContextModel {
    name: String,
    tags: BTreeMap<String, String>,
    kv: BTreeMap<Vec<u8>, BlobHash>,
    /// The entries put with a vector (index `pl`, decision 0033): a search finds each.
    vectors: BTreeMap<Vec<u8>, Vec<u16>>,
    /// Root first.
    chain: Vec<TurnId>,
    floor_depth: u32,
    /// A time to live was set: the reaper may delete it any time, so it is only checked to
    /// be absent or as acknowledged, and the workload leaves it alone.
    expiring: bool,
}

/// What was acknowledged.
#[derive(Clone, Debug, Default)]
pub struct Model {
    contexts: BTreeMap<ContextId, ContextModel>,
    deleted: Vec<(ContextId, String)>,
    turns: BTreeMap<TurnId, TurnModel>,
    payloads: BTreeMap<BlobHash, Vec<u8>>,
    /// The newest TurnID the engine answered: TurnIDs are never reused.
    turn_id_max: u64,
    backups: Vec<PathBuf>,
    /// Turns a prune or a delete left out of some context: a collection may take them even
    /// where a fork made since reaches them again (decision 0011: it took them first).
    collectable: std::collections::BTreeSet<TurnId>,
    names_made: u64,
    /// The newest growing state's bytes (chunked when long).
    growing: Vec<u8>,
}

/// One call of the workload.
#[derive(Clone, Debug)]
enum Op {
    Create {
        name: String,
        tags: Vec<(String, String)>,
    },
    Fork {
        base: TurnId,
        from: ContextId,
        name: String,
    },
    Clone {
        from: ContextId,
        name: String,
    },
    Append {
        context: ContextId,
        payload: Vec<u8>,
        key: Vec<u8>,
        labels: Vec<(String, String)>,
        /// Appended with this vector of index `pl` (created first, if need be).
        vector: Option<Vec<u16>>,
    },
    Tags {
        context: ContextId,
        set: Vec<(String, String)>,
        remove: Vec<String>,
    },
    KvPut {
        context: ContextId,
        key: Vec<u8>,
        value: Vec<u8>,
        /// Put with this vector of index `pl` (created first, if need be); whole numbers, so
        /// that the model compares exactly.
        vector: Option<Vec<u16>>,
    },
    KvDelete {
        context: ContextId,
        key: Vec<u8>,
    },
    Delete {
        context: ContextId,
    },
    Prune {
        context: ContextId,
        keep: u32,
    },
    Ttl {
        context: ContextId,
        ttl_ms: u64,
    },
    Patch {
        turn: TurnId,
        payload: Vec<u8>,
    },
    Redact {
        turn: TurnId,
    },
    Gc,
    Backup {
        dir: PathBuf,
    },
}

/// `op` in a line: payloads by length and hash.
fn describe(op: &Op) -> String {
    let short = |bytes: &[u8]| {
        format!(
            "{} B {}",
            bytes.len(),
            &BlobHash::of(bytes).to_string()[..12]
        )
    };
    match op {
        Op::Append {
            context,
            payload,
            key,
            labels,
            vector,
        } => format!(
            "Append {{ context: {context:?}, payload: {}, key: {:?}, labels: {labels:?}, \
             vector: {vector:?} }}",
            short(payload),
            String::from_utf8_lossy(key)
        ),
        Op::KvPut {
            context,
            key,
            value,
            vector,
        } => format!(
            "KvPut {{ context: {context:?}, key: {:?}, value: {}, vector: {vector:?} }}",
            String::from_utf8_lossy(key),
            short(value)
        ),
        Op::Patch { turn, payload } => {
            format!("Patch {{ turn: {turn:?}, payload: {} }}", short(payload))
        }
        other => format!("{other:?}"),
    }
}

/// The campaign's figures.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub cuts: u64,
    pub cuts_in_recovery: u64,
    pub ops_acknowledged: u64,
    pub ops_in_flight_at_cut: u64,
    pub in_flight_found_done: u64,
    pub file_changes_dropped: u64,
    pub dir_changes_undone: u64,
}

impl Figures {
    fn add(&mut self, other: &Figures) {
        self.cuts += other.cuts;
        self.cuts_in_recovery += other.cuts_in_recovery;
        self.ops_acknowledged += other.ops_acknowledged;
        self.ops_in_flight_at_cut += other.ops_in_flight_at_cut;
        self.in_flight_found_done += other.in_flight_found_done;
        self.file_changes_dropped += other.file_changes_dropped;
        self.dir_changes_undone += other.dir_changes_undone;
    }
}

/// A failing seed: what went wrong, and the cut that led there.
#[derive(Debug)]
pub struct Failure {
    pub seed: u64,
    pub cut: u64,
    pub problem: String,
    pub crash: Option<Box<CrashReport>>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "seed {} cut {}: {}", self.seed, self.cut, self.problem)?;
        if let Some(crash) = &self.crash {
            writeln!(
                f,
                "  the cut: before call {}, unsynced {:?}, sectors of {} B, file changes kept {} dropped {}, directory changes kept {} undone {}",
                crash.cut_before_op,
                crash.unsynced,
                crash.sector_bytes,
                crash.file_changes_kept,
                crash.file_changes_dropped,
                crash.dir_changes_kept,
                crash.dir_changes_undone
            )?;
            for op in &crash.last_ops {
                writeln!(f, "    {op}")?;
            }
        }
        Ok(())
    }
}

/// The engine's configuration on the simulated disk: small packs and logs so that a short
/// workload seals, compacts and chunks; the seed picks the placement (one thread for every
/// actor: the io_uring fdatasync path; a thread each: the direct one) and one or two shards.
pub fn config(store: &Path, seed: u64) -> EngineConfig {
    // Seeds 2 and 3 of every 4 spread the blobs over two shards: an append then waits for
    // the notices of both (decision 0014), and a cut may fall between their syncs.
    let shard_count = if seed % 4 >= 2 { 2 } else { 1 };
    let mut config = EngineConfig::new(store).with_shards(shard_count);
    config.placement = if seed.is_multiple_of(2) {
        Placement::single_thread(shard_count)
    } else {
        Placement::thread_per_actor(shard_count)
    };
    config.limits.pack_bytes_max = 160 * 1024;
    config.limits.blob_bytes_max = 64 * 1024;
    config.limits.shard_batch_bytes_max = 96 * 1024;
    config.limits.log_preallocate_bytes = 4096;
    config.chunking.threshold_bytes = 8 * 1024;
    config.gc_interval_ms = 0;
    config.gc_pack_dead_percent = 1;
    config.gc_log_dead_bytes_min = 0;
    config.gc_bytes_per_s_max = 0;
    config.gc_deleted_bytes_trigger = 0;
    config.disk_reserve_bytes = 16 * 1024;
    config.reaper_interval_ms = 5;
    // Every vector search may walk the graph (`check_vector` compares it with the exact one).
    config.limits.vector_exact_max = 0;
    config
}

fn ctx_ref(id: ContextId) -> ContextRef {
    ContextRef::Id(id)
}

impl Model {
    fn live(&self) -> Vec<ContextId> {
        self.contexts
            .iter()
            .filter(|(_, c)| !c.expiring)
            .map(|(id, _)| *id)
            .collect()
    }

    fn fresh_name(&mut self, rng: &mut Rng) -> String {
        self.names_made += 1;
        format!("c{}-{}", self.names_made, rng.below(1000))
    }

    /// A random call that the model expects to succeed on a store whose power is on.
    fn next_op(&mut self, rng: &mut Rng, root: &Path) -> Op {
        let live = self.live();
        let Some(context) = rng.pick(&live) else {
            let name = self.fresh_name(rng);
            return Op::Create {
                name,
                tags: vec![("kind".into(), "agent".into())],
            };
        };
        let model = &self.contexts[&context];
        let head = model.chain.last().copied();
        let visible: Vec<TurnId> = model
            .chain
            .iter()
            .copied()
            .filter(|turn| self.turns[turn].depth >= model.floor_depth)
            .collect();
        match rng.below(100) {
            0..=7 => {
                let name = self.fresh_name(rng);
                Op::Create {
                    name,
                    tags: vec![("kind".into(), format!("k{}", rng.below(3)))],
                }
            }
            8..=45 => {
                let payload = match rng.below(5) {
                    0 => self
                        .payloads
                        .values()
                        .nth(rng.below(self.payloads.len() as u64) as usize)
                        .cloned()
                        .unwrap_or_else(|| rng.bytes(100)),
                    1 => {
                        // A growing state: the last one and some more (chunked past 8 KiB).
                        let mut grown = self.growing.clone();
                        if grown.len() > 48 * 1024 {
                            grown.clear();
                        }
                        let more = 1024 + rng.below(12 * 1024) as usize;
                        grown.extend(rng.bytes(more));
                        self.growing = grown.clone();
                        grown
                    }
                    2 => vec![b'a'; 2000 + rng.below(4000) as usize],
                    _ => rng.bytes_below(6000),
                };
                let key = if rng.below(3) == 0 {
                    format!("k{}", rng.next()).into_bytes()
                } else {
                    Vec::new()
                };
                let labels = if rng.below(3) == 0 {
                    vec![("step".into(), format!("{}", rng.below(4)))]
                } else {
                    Vec::new()
                };
                Op::Append {
                    context,
                    payload,
                    key,
                    labels,
                    vector: (rng.below(3) == 0).then(|| {
                        (0..VECTOR_DIMS)
                            .map(|_| rng.below(1000) as u16 + 1)
                            .collect()
                    }),
                }
            }
            46..=51 => match rng.pick(&visible) {
                Some(base) => {
                    let name = self.fresh_name(rng);
                    Op::Fork {
                        base,
                        from: context,
                        name,
                    }
                }
                None => Op::Gc,
            },
            52..=55 => {
                let name = self.fresh_name(rng);
                Op::Clone {
                    from: context,
                    name,
                }
            }
            // Names do not change once given (every context here has one): no renames.
            56..=63 => Op::Tags {
                context,
                set: vec![(format!("t{}", rng.below(3)), format!("v{}", rng.below(100)))],
                remove: if rng.below(2) == 0 {
                    vec![format!("t{}", rng.below(3))]
                } else {
                    vec![]
                },
            },
            64..=71 => Op::KvPut {
                context,
                key: format!("key{}", rng.below(6)).into_bytes(),
                value: rng.bytes_below(3000),
                vector: (rng.below(2) == 0).then(|| {
                    (0..VECTOR_DIMS)
                        .map(|_| rng.below(1000) as u16 + 1)
                        .collect()
                }),
            },
            72..=74 => Op::KvDelete {
                context,
                key: format!("key{}", rng.below(6)).into_bytes(),
            },
            75..=78 => Op::Delete { context },
            79..=81 => match head {
                Some(_) => Op::Prune {
                    context,
                    keep: 1 + rng.below(3) as u32,
                },
                None => Op::Gc,
            },
            82..=83 => Op::Ttl {
                context,
                ttl_ms: 1 + rng.below(30),
            },
            84..=87 => match rng.pick(&visible) {
                Some(turn) if !self.turns[&turn].redacted => Op::Patch {
                    turn,
                    payload: rng.bytes_below(3000),
                },
                _ => Op::Gc,
            },
            88..=89 => match rng.pick(&visible) {
                Some(turn) if !self.turns[&turn].redacted => Op::Redact { turn },
                _ => Op::Gc,
            },
            90..=96 => Op::Gc,
            _ => {
                let dir = root.join(format!("backups/b{}", rng.next()));
                Op::Backup { dir }
            }
        }
    }

    fn new_context(&mut self, id: ContextId, name: String, base: Option<ContextId>, head: TurnId) {
        let mut context = match base.and_then(|base| self.contexts.get(&base)) {
            Some(base) => base.clone(),
            None => ContextModel {
                name: String::new(),
                tags: BTreeMap::new(),
                kv: BTreeMap::new(),
                vectors: BTreeMap::new(),
                chain: Vec::new(),
                floor_depth: 0,
                expiring: false,
            },
        };
        context.name = name;
        context.expiring = false;
        if head == TurnId::NONE {
            context.chain.clear();
        } else if let Some(at) = context.chain.iter().position(|turn| *turn == head) {
            context.chain.truncate(at + 1);
        } else {
            context.chain = self.chain_to(head);
        }
        self.contexts.insert(id, context);
    }

    /// The model after `op` (a Create, Fork or Clone) made the context `id`.
    fn created(&mut self, op: &Op, id: ContextId) {
        match op {
            Op::Create { name, tags } => {
                self.new_context(id, name.clone(), None, TurnId::NONE);
                self.contexts.get_mut(&id).unwrap().tags = tags.iter().cloned().collect();
            }
            Op::Fork { base, from, name } => {
                self.new_context(id, name.clone(), Some(*from), *base);
                let context = self.contexts.get_mut(&id).unwrap();
                context.tags.clear();
                context.kv.clear();
                context.vectors.clear();
                context.floor_depth = 0;
            }
            Op::Clone { from, name } => {
                let head = self.contexts[from].chain.last().copied();
                self.new_context(id, name.clone(), Some(*from), head.unwrap_or(TurnId::NONE));
            }
            other => panic!("{} creates no context", describe(other)),
        }
    }

    /// The model after the Append `op` made `turn`.
    fn appended(&mut self, op: &Op, turn: &ctxstore_engine::Turn) {
        let Op::Append {
            context,
            payload,
            key,
            labels,
            vector,
        } = op
        else {
            panic!("{} appends nothing", describe(op));
        };
        self.turn_id_max = self.turn_id_max.max(turn.turn_id.0);
        let hash = BlobHash::of(payload);
        self.payloads.insert(hash, payload.clone());
        let mut labels = labels.clone();
        labels.sort();
        let model = TurnModel {
            parent: turn.parent_turn_id,
            depth: turn.depth,
            hash,
            redacted: false,
            key: key.clone(),
            labels,
            vector: vector.clone(),
        };
        self.turns.insert(turn.turn_id, model);
        self.contexts
            .get_mut(context)
            .unwrap()
            .chain
            .push(turn.turn_id);
    }

    fn delete(&mut self, context: ContextId) {
        if let Some(gone) = self.contexts.remove(&context) {
            self.collectable.extend(gone.chain.iter().copied());
            self.deleted.push((context, gone.name));
        }
    }

    fn prune(&mut self, context: ContextId, floor_depth: u32) {
        let Some(model) = self.contexts.get_mut(&context) else {
            return;
        };
        model.floor_depth = floor_depth;
        for turn in &model.chain {
            if self.turns[turn].depth < floor_depth {
                self.collectable.insert(*turn);
            }
        }
    }

    fn chain_to(&self, head: TurnId) -> Vec<TurnId> {
        let mut chain = Vec::new();
        let mut at = head;
        while at != TurnId::NONE {
            chain.push(at);
            at = self.turns.get(&at).map_or(TurnId::NONE, |turn| turn.parent);
        }
        chain.reverse();
        chain
    }
}

/// Dimensions of the workload's vectors (index `pl`).
const VECTOR_DIMS: usize = 4;

fn as_f32(vector: &[u16]) -> Vec<f32> {
    vector.iter().map(|&x| f32::from(x)).collect()
}

/// A search under `key` finds it, nearest, when it was acknowledged with `vector`, and finds
/// nothing when it was acknowledged without one (or absent).
fn check_vector(
    engine: &Engine,
    id: ContextId,
    key: &[u8],
    vector: Option<&Vec<u16>>,
) -> Result<(), String> {
    let search = VectorSearch {
        context: ctx_ref(id),
        index: "pl".into(),
        vector: vector.map_or_else(|| vec![1.0; VECTOR_DIMS], |v| as_f32(v)),
        k: 1,
        offset: 0,
        prefix: key.to_vec(),
        exact: true,
        ef_search: 0,
    };
    let hits = match engine.vector_search(&search, None) {
        Ok(found) => found.hits,
        // No index: no vector was ever acknowledged.
        Err(EngineError::VectorIndexNotFound(_)) if vector.is_none() => Vec::new(),
        Err(error) => return Err(format!("search under {key:?} in {id:?}: {error}")),
    };
    let found: Vec<&[u8]> = hits.iter().map(|hit| hit.key.as_ref()).collect();
    let expected: Vec<&[u8]> = vector.map(|_| key).into_iter().collect();
    if found != expected || hits.iter().any(|hit| hit.score < 0.999) {
        return Err(format!(
            "context {id:?}: a search under {} finds {hits:?}, acknowledged vector {vector:?}",
            String::from_utf8_lossy(key)
        ));
    }
    // The same through the graph (`vector_exact_max` is 0 here: every search walks it),
    // built, loaded or caught up after the cut.
    let walked = VectorSearch {
        exact: false,
        ..search
    };
    let walked = match engine.vector_search(&walked, None) {
        Ok(found) => found.hits,
        Err(EngineError::VectorIndexNotFound(_)) if vector.is_none() => Vec::new(),
        Err(error) => return Err(format!("graph search under {key:?} in {id:?}: {error}")),
    };
    if walked != hits {
        return Err(format!(
            "context {id:?}: the graph under {} finds {walked:?}, the exact search {hits:?}",
            String::from_utf8_lossy(key)
        ));
    }
    Ok(())
}

fn block<T>(future: impl std::future::Future<Output = T>) -> T {
    pollster::block_on(future)
}

/// Runs `op` on `engine`; on success, applies it to `model`.
fn run(engine: &Engine, model: &mut Model, op: &Op) -> Result<(), EngineError> {
    match op {
        Op::Create { name, tags } => {
            let created = block(engine.create(NewContext {
                name: Some(name.clone()),
                tags: tags.clone(),
                ..NewContext::default()
            }))?;
            model.created(op, created.context.head.context_id);
        }
        Op::Fork { base, name, .. } => {
            let created = block(engine.create(NewContext {
                base: *base,
                name: Some(name.clone()),
                ..NewContext::default()
            }))?;
            model.created(op, created.context.head.context_id);
        }
        Op::Clone { from, name } => {
            let view = block(engine.clone_context(ctx_ref(*from), name.clone()))?;
            model.created(op, view.head.context_id);
        }
        Op::Append {
            context,
            payload,
            key,
            labels,
            vector,
        } => {
            if vector.is_some() {
                block(engine.vector_index_create("pl", VECTOR_DIMS as u16, Metric::Cosine, 0))?;
            }
            let appended = block(engine.append(AppendRequest {
                context_id: *context,
                expected_head: None,
                type_tag: 1,
                codec: 0,
                payload: AppendPayload::Bytes(Bytes::from(payload.clone())),
                options: TurnOptions {
                    key: (!key.is_empty()).then(|| Bytes::from(key.clone())),
                    labels: labels.clone(),
                    vectors: vector.as_ref().map(|vector| TurnVectors::Given {
                        index: "pl".into(),
                        vectors: vec![as_f32(vector)],
                    }),
                    ..TurnOptions::default()
                },
            }))?;
            model.appended(op, &appended.turn);
        }
        Op::Tags {
            context,
            set,
            remove,
        } => {
            block(engine.update_tags(&ctx_ref(*context), set.clone(), remove.clone(), None))?;
        }
        Op::KvPut {
            context,
            key,
            value,
            vector: None,
        } => {
            block(engine.kv_put(
                &ctx_ref(*context),
                vec![(key.clone(), Bytes::from(value.clone()))],
                false,
            ))?;
        }
        Op::KvPut {
            context,
            key,
            value,
            vector: Some(vector),
        } => {
            block(engine.vector_index_create("pl", VECTOR_DIMS as u16, Metric::Cosine, 0))?;
            let entry = VectorEntry {
                key: key.clone(),
                value: Bytes::from(value.clone()),
                vectors: vec![as_f32(vector)],
            };
            block(engine.kv_put_vectors(&ctx_ref(*context), "pl", vec![entry], false, 0))?;
        }
        Op::KvDelete { context, key } => {
            block(engine.kv_delete(&ctx_ref(*context), vec![key.clone()]))?;
        }
        Op::Delete { context } => {
            block(engine.delete_context(&ctx_ref(*context)))?;
        }
        Op::Prune { context, keep } => {
            let view = block(engine.prune_context(&ctx_ref(*context), *keep))?;
            model.prune(*context, view.floor_depth);
        }
        Op::Ttl { context, ttl_ms } => {
            block(engine.set_context_ttl(&ctx_ref(*context), Some(*ttl_ms)))?;
        }
        Op::Patch { turn, payload } => {
            block(engine.patch_turn(*turn, Bytes::from(payload.clone())))?;
        }
        Op::Redact { turn } => {
            block(engine.redact_turn(*turn))?;
        }
        Op::Gc => {
            engine.gc()?;
        }
        Op::Backup { dir } => {
            engine.backup(dir)?;
            model.backups.push(dir.clone());
        }
    }
    // The calls whose effect needs nothing from the engine's answer.
    apply_known(model, op);
    Ok(())
}

/// A turn search of the context finds exactly the visible turns appended with a vector and
/// not redacted (a collectable one may be gone), exactly and through the graph alike
/// (`vector_exact_max` is 0 here: the second walks it).
fn check_turn_vectors(
    engine: &Engine,
    id: ContextId,
    visible: &[TurnId],
    model: &Model,
) -> Result<(), String> {
    let expected: std::collections::BTreeSet<TurnId> = visible
        .iter()
        .copied()
        .filter(|turn| {
            let turn = &model.turns[turn];
            turn.vector.is_some() && !turn.redacted
        })
        .collect();
    for exact in [true, false] {
        let search = TurnVectorSearch {
            index: "pl".into(),
            vector: vec![1.0; VECTOR_DIMS],
            k: expected.len().clamp(1, 1000) as u32,
            context: Some(ctx_ref(id)),
            exact,
            ..TurnVectorSearch::default()
        };
        let found: std::collections::BTreeSet<TurnId> = match engine.vector_search_turns(&search) {
            Ok(hits) => hits.hits.iter().map(|hit| hit.turn.turn_id).collect(),
            // No index: no vector was ever acknowledged.
            Err(EngineError::VectorIndexNotFound(_)) => std::collections::BTreeSet::new(),
            Err(error) => return Err(format!("turn search of {id:?}: {error}")),
        };
        let extra: Vec<_> = found.difference(&expected).collect();
        let missing: Vec<_> = expected
            .difference(&found)
            .filter(|turn| !model.collectable.contains(turn))
            .collect();
        if !extra.is_empty() || !missing.is_empty() || expected.len() > 1000 {
            return Err(format!(
                "turn search of {id:?} (exact {exact}) found {extra:?} it should not and \
                 missed {missing:?}"
            ));
        }
    }
    Ok(())
}

/// Waits until the graph of index `pl` (when there is one) holds every acknowledged vector:
/// built or loaded at the open, then caught up with the log.
fn wait_for_graph(engine: &Engine) -> Result<(), String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while let Some(info) = engine.vector_graph_info("pl") {
        if info.ready && info.pending == 0 {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("the graph of index pl never caught up: {info:?}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    Ok(())
}

/// The model's state, read back from the engine, as text (to compare and to show).
fn observe(engine: &Engine, model: &Model) -> Result<(), String> {
    wait_for_graph(engine)?;
    for (id, context) in &model.contexts {
        let view = match engine.context(&ctx_ref(*id)) {
            Ok(view) => view,
            Err(_) if context.expiring => continue,
            Err(error) => return Err(format!("context {id:?} ({}) lost: {error}", context.name)),
        };
        if (view.ttl_ms != 0) != context.expiring {
            return Err(format!(
                "context {id:?} ({}): time to live {} ms, acknowledged {}",
                context.name,
                view.ttl_ms,
                if context.expiring { "one" } else { "none" }
            ));
        }
        if context.expiring {
            // The reaper may delete it between any two reads of this check (seeds 100355,
            // 100391: a key's lookup found it gone): only its view, read at once, is checked.
            if view.name.as_deref() != Some(context.name.as_str()) {
                return Err(format!("expiring context {id:?}: name {:?}", view.name));
            }
            continue;
        }
        let head = context.chain.last().copied().unwrap_or(TurnId::NONE);
        if view.head.head_turn_id != head {
            return Err(format!(
                "context {id:?} ({}): head {:?}, acknowledged {:?}",
                context.name, view.head.head_turn_id, head
            ));
        }
        if view.name.as_deref() != Some(context.name.as_str()) {
            return Err(format!(
                "context {id:?}: name {:?}, acknowledged {:?}",
                view.name, context.name
            ));
        }
        if view.tags != context.tags {
            return Err(format!(
                "context {id:?} ({}): tags {:?}, acknowledged {:?}",
                context.name, view.tags, context.tags
            ));
        }
        if view.floor_depth != context.floor_depth {
            return Err(format!(
                "context {id:?} ({}): floor {}, acknowledged {}",
                context.name, view.floor_depth, context.floor_depth
            ));
        }
        match engine.resolve(&ContextRef::Name(context.name.clone())) {
            Ok(named) if named == *id => {}
            other => {
                return Err(format!(
                    "name {} resolves to {other:?}, not {id:?}",
                    context.name
                ));
            }
        }
        for key in 0..6 {
            let key = format!("key{key}").into_bytes();
            let stored = engine
                .kv_get(&ctx_ref(*id), &key)
                .map_err(|error| format!("kv_get on {id:?}: {error}"))?
                .map(|item| item.value_hash);
            if stored != context.kv.get(&key).copied() {
                return Err(format!(
                    "context {id:?} ({}): key {} holds {stored:?}, acknowledged {:?}",
                    context.name,
                    String::from_utf8_lossy(&key),
                    context.kv.get(&key)
                ));
            }
            if let Some(hash) = stored {
                let bytes = block(engine.blob(hash))
                    .map_err(|error| format!("value {hash} of {id:?}: {error}"))?;
                if BlobHash::of(&bytes) != hash {
                    return Err(format!("value {hash} reads other bytes"));
                }
            }
            check_vector(engine, *id, &key, context.vectors.get(&key))?;
        }
        let visible: Vec<TurnId> = context
            .chain
            .iter()
            .copied()
            .filter(|turn| model.turns[turn].depth >= context.floor_depth)
            .collect();
        // Every acknowledged turn the context reaches, as it reads now (its overlays
        // applied): an in-flight patch or redaction settles on the turn itself.
        for turn_id in &visible {
            let turn = &model.turns[turn_id];
            let read = match block(engine.turn(*turn_id)) {
                Ok(read) => read,
                Err(_) if model.collectable.contains(turn_id) => continue,
                Err(error) => return Err(format!("turn {turn_id:?} of {id:?} lost: {error}")),
            };
            let hash = if turn.redacted {
                BlobHash::EMPTY
            } else {
                turn.hash
            };
            if read.parent_turn_id != turn.parent
                || read.depth != turn.depth
                || read.payload_hash != hash
            {
                return Err(format!(
                    "turn {turn_id:?} of {id:?}: parent {:?} depth {} payload {}, acknowledged parent {:?} depth {} payload {hash}",
                    read.parent_turn_id, read.depth, read.payload_hash, turn.parent, turn.depth
                ));
            }
        }
        check_turn_vectors(engine, *id, &visible, model)?;
        let newest = &visible[visible.len().saturating_sub(8)..];
        let page = block(engine.last(*id, newest.len().max(1) as u32, true))
            .map_err(|error| format!("last of {id:?}: {error}"))?;
        let ids: Vec<TurnId> = page.turns.iter().map(|turn| turn.turn.turn_id).collect();
        let missing = newest.len().saturating_sub(ids.len());
        let collected = newest[..missing]
            .iter()
            .all(|turn| model.collectable.contains(turn));
        if ids != newest[missing..] || !collected {
            return Err(format!(
                "context {id:?} ({}): newest turns {ids:?}, acknowledged {newest:?}",
                context.name
            ));
        }
        for read in &page.turns {
            let turn = &model.turns[&read.turn.turn_id];
            if read.turn.parent_turn_id != turn.parent || read.turn.depth != turn.depth {
                return Err(format!(
                    "turn {:?}: parent or depth changed",
                    read.turn.turn_id
                ));
            }
            match (&read.payload, turn.redacted) {
                (None, true) => {}
                // A redacted turn reads with no bytes.
                (Some(bytes), true) if bytes.is_empty() => {}
                (Some(bytes), false) if BlobHash::of(bytes) == turn.hash => {}
                (payload, redacted) => {
                    return Err(format!(
                        "turn {:?}: payload {:?} (redacted {redacted}), acknowledged {}",
                        read.turn.turn_id,
                        payload.as_ref().map(|bytes| BlobHash::of(bytes)),
                        turn.hash
                    ));
                }
            }
            if !turn.key.is_empty() {
                let by_key = engine
                    .turn_by_key(&ctx_ref(*id), &turn.key)
                    .map_err(|error| format!("turn_by_key: {error}"))?;
                match by_key {
                    Some(found) if found.turn.turn_id == read.turn.turn_id => {
                        if found.extras.labels != turn.labels {
                            return Err(format!(
                                "turn {:?}: labels {:?}, acknowledged {:?}",
                                read.turn.turn_id, found.extras.labels, turn.labels
                            ));
                        }
                    }
                    other => {
                        return Err(format!(
                            "key of turn {:?} finds {:?}",
                            read.turn.turn_id,
                            other.map(|found| found.turn.turn_id)
                        ));
                    }
                }
            }
        }
    }
    for (id, name) in &model.deleted {
        if engine.context(&ctx_ref(*id)).is_ok() {
            return Err(format!("deleted context {id:?} ({name}) is back"));
        }
    }
    Ok(())
}

/// Checks the reopened store against the model; with a call in flight at the cut, against
/// the model without it or with it (answered from what the store shows), and adopts the one
/// that holds.
fn check(engine: &Engine, model: &mut Model, in_flight: Option<&Op>) -> Result<bool, String> {
    let without = observe(engine, model);
    let Some(op) = in_flight else {
        return without.map(|()| false);
    };
    if without.is_ok() {
        return Ok(false);
    }
    let mut with = model.clone();
    if let Err(problem) = adopt(engine, &mut with, op) {
        return Err(format!(
            "{} (without the call in flight, {}); with it: {problem}",
            without.unwrap_err(),
            describe(op)
        ));
    }
    match observe(engine, &with) {
        Ok(()) => {
            *model = with;
            Ok(true)
        }
        Err(problem) => Err(format!(
            "without the call in flight ({}): {}; with it: {problem}",
            describe(op),
            without.unwrap_err()
        )),
    }
}

/// Applies `op` to `model` as if it had been answered, with what only the engine knows (a
/// new TurnID or ContextID) read from the store.
fn adopt(engine: &Engine, model: &mut Model, op: &Op) -> Result<(), String> {
    match op {
        Op::Create { name, .. } | Op::Fork { name, .. } | Op::Clone { name, .. } => {
            let id = engine
                .resolve(&ContextRef::Name(name.clone()))
                .map_err(|error| format!("{name}: {error}"))?;
            model.created(op, id);
        }
        Op::Append { context, .. } => {
            let head = engine
                .context(&ctx_ref(*context))
                .map_err(|error| error.to_string())?
                .head
                .head_turn_id;
            let turn = block(engine.turn(head)).map_err(|error| error.to_string())?;
            let previous = model.contexts[context].chain.last().copied();
            if turn.parent_turn_id != previous.unwrap_or(TurnId::NONE) || Some(head) == previous {
                return Err(format!(
                    "head {head:?} (parent {:?}) is not an append after {previous:?}",
                    turn.parent_turn_id
                ));
            }
            model.appended(op, &turn);
        }
        Op::Prune { context, .. } => {
            let view = engine
                .context(&ctx_ref(*context))
                .map_err(|error| error.to_string())?;
            model.prune(*context, view.floor_depth);
        }
        other => {
            // The rest change nothing only the engine knows: the model applies them itself
            // against a store whose answers it does not need.
            apply_known(model, other);
        }
    }
    Ok(())
}

fn apply_known(model: &mut Model, op: &Op) {
    match op {
        Op::Tags {
            context,
            set,
            remove,
        } => {
            let tags = &mut model.contexts.get_mut(context).unwrap().tags;
            for (key, value) in set {
                tags.insert(key.clone(), value.clone());
            }
            for key in remove {
                tags.remove(key);
            }
        }
        Op::KvPut {
            context,
            key,
            value,
            vector,
        } => {
            let hash = BlobHash::of(value);
            model.payloads.insert(hash, value.clone());
            let context = model.contexts.get_mut(context).unwrap();
            context.kv.insert(key.clone(), hash);
            match vector {
                Some(vector) => context.vectors.insert(key.clone(), vector.clone()),
                None => context.vectors.remove(key),
            };
        }
        Op::KvDelete { context, key } => {
            let context = model.contexts.get_mut(context).unwrap();
            context.kv.remove(key);
            context.vectors.remove(key);
        }
        Op::Delete { context } => model.delete(*context),
        Op::Ttl { context, .. } => {
            model.contexts.get_mut(context).unwrap().expiring = true;
        }
        Op::Patch { turn, payload } => {
            let hash = BlobHash::of(payload);
            model.payloads.insert(hash, payload.clone());
            model.turns.get_mut(turn).unwrap().hash = hash;
        }
        Op::Redact { turn } => {
            model.turns.get_mut(turn).unwrap().redacted = true;
        }
        _ => {}
    }
}

/// The checks beyond the model: every acknowledged backup verifies, the store verifies, and
/// takes an append whose TurnID is above every one it answered.
fn check_store(engine: &Engine, store: &Path, model: &mut Model) -> Result<(), String> {
    let context = match model.live().first() {
        Some(context) => *context,
        None => {
            let created = block(engine.create(NewContext {
                name: Some(format!("probe{}", model.names_made)),
                ..NewContext::default()
            }))
            .map_err(|error| format!("the store takes no new context: {error}"))?;
            model.names_made += 1;
            let id = created.context.head.context_id;
            model.new_context(
                id,
                format!("probe{}", model.names_made - 1),
                None,
                TurnId::NONE,
            );
            id
        }
    };
    let payload = format!("probe after a cut {}", model.turn_id_max).into_bytes();
    let op = Op::Append {
        context,
        payload,
        key: Vec::new(),
        labels: Vec::new(),
        vector: None,
    };
    let before = model.turn_id_max;
    run(engine, model, &op).map_err(|error| format!("the store takes no append: {error}"))?;
    if model.turn_id_max <= before {
        return Err(format!(
            "TurnID {} reused (the store answered {before} before)",
            model.turn_id_max
        ));
    }
    let _ = store;
    Ok(())
}

fn verify_dir(dir: &Path, what: &str) -> Result<(), String> {
    match ctxstore_engine::verify(dir) {
        Ok(report) if report.is_ok() => Ok(()),
        Ok(report) => Err(format!("verify of {what}: {report}")),
        Err(error) => Err(format!("verify of {what}: {error}")),
    }
}

/// One seed's run: `cuts` power cuts, each followed by a recovery and the checks.
pub fn run_seed(seed: u64, cuts: u64, figures: &mut Figures) -> Result<(), Failure> {
    let scratch = tempfile::Builder::new()
        .prefix("power-loss")
        .tempdir_in(scratch_root())
        .expect("a scratch directory");
    let disk = SimulatedDisk::attach(scratch.path(), seed).expect("the simulated disk attaches");
    let root = disk.root().to_path_buf();
    let store = root.join("store");
    let mut rng = Rng::new(seed);
    let mut model = Model::default();
    let mut in_flight: Option<Op> = None;
    let mut crash: Option<CrashReport> = None;
    let fail = |cut: u64, problem: String, crash: &Option<CrashReport>| Failure {
        seed,
        cut,
        problem,
        crash: crash.clone().map(Box::new),
    };
    for cut in 0..cuts {
        if std::env::var_os("CTXSTORE_SIM_TRACE").is_some() {
            eprintln!("workload: cut {cut}");
        }
        // Open: the recovery after the last cut, itself cut now and then (one cut in five).
        let engine = loop {
            let cut_in_recovery = cut > 0 && rng.below(5) == 0;
            if cut_in_recovery {
                disk.cut_before(1 + rng.below(40));
            }
            match Engine::open(config(&store, seed)) {
                Ok(engine) if !disk.is_cut() => break engine,
                Ok(engine) => {
                    engine.shutdown();
                    drop(engine);
                }
                Err(error) if !disk.is_cut() => {
                    return Err(fail(
                        cut,
                        format!("the store does not open: {error}"),
                        &crash,
                    ));
                }
                Err(_) => {}
            }
            figures.cuts += 1;
            figures.cuts_in_recovery += 1;
            crash = Some(disk.restore().expect("the crash image is written"));
        };
        disk.disarm();
        let checked = check(&engine, &mut model, in_flight.as_ref())
            .and_then(|done| {
                if done {
                    figures.in_flight_found_done += 1;
                }
                check_store(&engine, &store, &mut model)
            })
            .and_then(|()| {
                // A backup is checked after the first cut that follows its acknowledgement:
                // it never changes again.
                for backup in std::mem::take(&mut model.backups) {
                    verify_dir(&backup, &format!("the backup {}", backup.display()))?;
                }
                Ok(())
            });
        in_flight = None;
        // Every fourth recovery is also verified offline (the engine closed, then opened
        // again for the workload); the others go on with the recovered engine, since an open
        // is most of a cut's cost.
        let engine = if cut % 4 == 3 {
            engine.shutdown();
            drop(engine);
            checked
                .and_then(|()| verify_dir(&store, "the store after its recovery"))
                .map_err(|problem| fail(cut, problem, &crash))?;
            Engine::open(config(&store, seed))
                .map_err(|error| fail(cut, format!("the store does not reopen: {error}"), &crash))?
        } else {
            if let Err(problem) = checked {
                engine.shutdown();
                return Err(fail(cut, problem, &crash));
            }
            engine
        };
        // The workload, with the power cut before a random call to come.
        disk.cut_before(disk.ops() + 1 + rng.below(120));
        let steps = 1 + rng.below(30);
        for _ in 0..steps {
            let op = model.next_op(&mut rng, &root);
            let before = model.clone();
            let result = run(&engine, &mut model, &op);
            if std::env::var_os("CTXSTORE_SIM_TRACE").is_some() {
                eprintln!("workload: {} -> {:?}", describe(&op), result.as_ref().err());
            }
            match result {
                Ok(()) => figures.ops_acknowledged += 1,
                Err(_) if disk.is_cut() => {
                    model = before;
                    in_flight = Some(op);
                    figures.ops_in_flight_at_cut += 1;
                    break;
                }
                Err(error) => {
                    // Answered with an error while the power was on: it must leave nothing.
                    model = before;
                    if let Op::Fork { .. } | Op::Patch { .. } | Op::Redact { .. } = op {
                        // A fork of, or an overlay on, a turn a collection took (a pruned
                        // turn) may be refused; nothing else the model chose may be.
                        continue;
                    }
                    if matches!(error.kind(), ctxstore_engine::ErrorKind::NotFound) {
                        continue; // a context the reaper took (it had a time to live)
                    }
                    engine.shutdown();
                    return Err(fail(
                        cut,
                        format!("{} refused with the power on: {error}", describe(&op)),
                        &crash,
                    ));
                }
            }
            if disk.is_cut() {
                break;
            }
        }
        engine.shutdown();
        drop(engine);
        figures.cuts += 1;
        let report = disk.restore().expect("the crash image is written");
        figures.file_changes_dropped += report.file_changes_dropped;
        figures.dir_changes_undone += report.dir_changes_undone;
        crash = Some(report);
    }
    // The last recovery, checked like every other.
    let engine = Engine::open(config(&store, seed))
        .map_err(|error| fail(cuts, format!("the store does not open: {error}"), &crash))?;
    let result = check(&engine, &mut model, in_flight.as_ref())
        .and_then(|_| check_store(&engine, &store, &mut model));
    engine.shutdown();
    drop(engine);
    result.map_err(|problem| fail(cuts, problem, &crash))?;
    verify_dir(&store, "the store").map_err(|problem| fail(cuts, problem, &crash))?;
    drop(disk);
    Ok(())
}

/// `run_seed` on its own thread, `hung_after` at most: a seed that hangs (an open or a
/// call that never returns) is a failure, not a stuck run. Its threads are left behind.
pub fn run_seed_watched(
    seed: u64,
    cuts: u64,
    figures: &mut Figures,
    hung_after: std::time::Duration,
) -> Result<(), Failure> {
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut figures = Figures::default();
        let outcome = run_seed(seed, cuts, &mut figures);
        let _ = done.send((outcome, figures));
    });
    match result.recv_timeout(hung_after) {
        Ok((outcome, seed_figures)) => {
            figures.add(&seed_figures);
            outcome
        }
        Err(_) => Err(Failure {
            seed,
            cut: 0,
            problem: format!(
                "hung: no answer within {} s (replay with CTXSTORE_POWER_LOSS_SEED={seed} \
                 CTXSTORE_SIM_TRACE=1)",
                hung_after.as_secs()
            ),
            crash: None,
        }),
    }
}

/// Where the scratch stores go: tmpfs when there is one (its fsyncs cost nothing; the
/// simulated disk decides what survives), else the temporary directory.
pub fn scratch_root() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}
