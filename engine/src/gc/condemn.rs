//! The round's verdict (decision 0011): which turns die (`Dying`), which blobs are
//! collectable — named only by the dead, or orphans old enough — with what indexed manifests
//! name kept whole (`Manifests`, decision 0013), and which packs are due for compaction
//! (`Collector::condemn`, which seals a due open pack). Then the condemned set in sweep order
//! (`Verdict`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::blob::condemned::Condemned;
use crate::error::EngineError;
use crate::gc::log_table::LogTable;
use crate::gc::mark::Marked;
use crate::gc::{Collector, ShardCut};
use crate::ids::{BlobHash, BlobHashBuildHasher, TurnId};
use crate::model::GcReport;
use crate::pipeline::{GcSnapshot, ShardRequest};
use crate::sequencer::dead::DeadTurns;
use crate::store_dir::pack_path;

type HashSetOf = HashSet<BlobHash, BlobHashBuildHasher>;

/// What this round lets go.
pub(super) struct Dying {
    /// Turns no live context reaches (and not collected before).
    pub dead: DeadTurns,
    /// Blobs a turn let go: named by a turn dying now (its payload and patches), or by a live
    /// redacted turn (decision 0012: no view reads them any more), or purged; what a dying
    /// manifest names too. Collectable unless something live names them.
    named_by_dead: HashSetOf,
    /// Of those, the bytes an erasure asked to remove (purged, or a redacted turn's payload and
    /// patches, and what their manifests name): their packs are compacted whatever their dead
    /// share, so that no file holds them once the round is over (issue 29 item 2).
    erased: HashSetOf,
    /// Tenants deleted (decision 0032 §6): nothing can name their blobs again, so every one
    /// not live is collectable at once (no orphan grace), and erased like a purge's.
    tenants: crate::sequencer::tenants::Tenants,
}

impl Dying {
    pub fn of(log: &LogTable, marked: &Marked, snapshot: &GcSnapshot) -> Dying {
        let overlays = &snapshot.contexts.overlays;
        let mut named_by_dead: HashSetOf = overlays.purged().copied().collect();
        let mut erased = named_by_dead.clone();
        let mut dead = DeadTurns::default();
        for record_id in 1..=snapshot.watermark {
            let turn_id = TurnId(record_id);
            if !log.is_turn(record_id) || snapshot.dead.contains(turn_id) {
                continue;
            }
            let live = marked.is_live(record_id);
            if !live {
                dead.insert(turn_id);
            }
            let redacted = overlays.is_redacted(turn_id);
            let vectors = log.vectors.get(&record_id).copied();
            if !live || redacted {
                named_by_dead.insert(log.hash[record_id as usize]);
                named_by_dead.extend(overlays.all_patch_blobs(turn_id));
                named_by_dead.extend(vectors);
            }
            if redacted {
                erased.insert(log.hash[record_id as usize]);
                erased.extend(overlays.all_patch_blobs(turn_id));
                erased.extend(vectors);
            }
        }
        Dying {
            dead,
            named_by_dead,
            erased,
            tenants: snapshot.contexts.tenants.clone(),
        }
    }
}

/// Every indexed manifest and what it names, and the reverse (decision 0013): what a manifest
/// names is collectable only with every manifest naming it, so a kept manifest stays whole.
/// Manifests indexed after this look are covered by their writers' pins (`gc/pins.rs`).
pub(super) struct Manifests {
    names: HashMap<BlobHash, Box<[BlobHash]>, BlobHashBuildHasher>,
    named_by: HashMap<BlobHash, Vec<BlobHash>, BlobHashBuildHasher>,
}

impl Manifests {
    pub fn read(collector: &Collector) -> Result<Manifests, EngineError> {
        let names = crate::chunks::manifest_references(&collector.published.shards)?;
        let mut named_by: HashMap<BlobHash, Vec<BlobHash>, BlobHashBuildHasher> =
            HashMap::default();
        for (manifest, chunks) in &names {
            for name in chunks.iter() {
                named_by.entry(*name).or_default().push(*manifest);
            }
        }
        Ok(Manifests { names, named_by })
    }

    /// What a dead manifest names was named by the dead too (no orphan grace for it): a
    /// redacted chunked payload leaves the disk at the first collection like any other. The
    /// same for erased manifests: their chunks hold the erased bytes.
    pub fn extend_dying(&self, dying: &mut Dying) {
        for set in [&mut dying.named_by_dead, &mut dying.erased] {
            let mut pending: Vec<BlobHash> = set
                .iter()
                .filter(|hash| self.names.contains_key(*hash))
                .copied()
                .collect();
            while let Some(manifest) = pending.pop() {
                for name in self.names.get(&manifest).into_iter().flatten() {
                    if set.insert(*name) && self.names.contains_key(name) {
                        pending.push(*name);
                    }
                }
            }
        }
    }

    /// Takes out of `set` every blob a manifest outside `set` names, until none is left: a
    /// kept manifest (or base) keeps its chunks. Chains of deltas are at most 32 deep, so this
    /// ends within 33 passes.
    fn keep_what_kept_manifests_name(&self, set: &mut HashSetOf) {
        loop {
            let kept: Vec<BlobHash> = set
                .iter()
                .filter(|hash| {
                    self.named_by
                        .get(*hash)
                        .is_some_and(|by| by.iter().any(|manifest| !set.contains(manifest)))
                })
                .copied()
                .collect();
            if kept.is_empty() {
                return;
            }
            for hash in kept {
                set.remove(&hash);
            }
        }
    }

    /// Condemned manifests in sweep order, level by level: level 0 holds those no condemned
    /// manifest names, level n those named by one at level n − 1 at most. Chains are at most
    /// `MANIFEST_DEPTH_MAX` deep; a cycle (impossible: a manifest names older ones) would stop
    /// at that bound.
    fn sweep_levels(
        &self,
        dependencies: &[(BlobHash, Box<[BlobHash]>)],
        condemned: &HashSetOf,
    ) -> Vec<HashSetOf> {
        let mut level: HashMap<BlobHash, usize, BlobHashBuildHasher> =
            dependencies.iter().map(|(hash, _)| (*hash, 0)).collect();
        let rounds = crate::format::manifest::MANIFEST_DEPTH_MAX as usize + 1;
        for _ in 0..rounds {
            let mut changed = false;
            for (hash, _) in dependencies {
                let deepest_namer = self
                    .named_by
                    .get(hash)
                    .into_iter()
                    .flatten()
                    .filter(|namer| condemned.contains(*namer))
                    .filter_map(|namer| level.get(namer).copied())
                    .max();
                if let Some(namer_level) = deepest_namer
                    && level.get(hash).copied().unwrap_or(0) <= namer_level
                {
                    level.insert(*hash, namer_level + 1);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let depth = level.values().copied().max().map_or(0, |max| max + 1);
        let mut levels = vec![HashSet::default(); depth];
        for (hash, at) in level {
            levels[at].insert(hash);
        }
        levels
    }
}

/// One sealed pack of one shard, as the condemn step sees it.
#[derive(Debug, Default)]
pub(super) struct PackPlan {
    pub shard: u16,
    pub pack_id: u32,
    /// Condemned blobs located here.
    pub dead: Vec<BlobHash>,
    /// Record bytes of the blobs that stay.
    pub live_bytes: u64,
    /// Record bytes of the condemned blobs.
    pub dead_bytes: u64,
    pub file_bytes: u64,
}

/// The round's condemned blobs, final: the map the fence and the sweeps share, the sweep
/// order of condemned manifests, and the packs to sweep and compact.
pub(super) struct Verdict {
    pub condemned: Arc<Condemned>,
    pub sweep_first: Vec<HashSetOf>,
    pub plans: Vec<PackPlan>,
}

impl Verdict {
    /// A manifest in a pack below the threshold stays, and so does what it names; then the
    /// sweep order: a condemned manifest after every condemned manifest naming it (the newest
    /// delta of a chain first, its full manifest last), then every other blob, so a swept
    /// dependency implies a swept manifest (`Condemned::resurrect`).
    pub fn of(mut plans: Vec<PackPlan>, manifests: &Manifests) -> Verdict {
        let mut condemned: HashSetOf = plans
            .iter()
            .flat_map(|plan| plan.dead.iter().copied())
            .collect();
        manifests.keep_what_kept_manifests_name(&mut condemned);
        for plan in &mut plans {
            plan.dead.retain(|hash| condemned.contains(hash));
        }
        let dependencies: Vec<(BlobHash, Box<[BlobHash]>)> = manifests
            .names
            .iter()
            .filter(|(manifest, _)| condemned.contains(*manifest))
            .map(|(manifest, names)| (*manifest, names.clone()))
            .collect();
        let sweep_first = manifests.sweep_levels(&dependencies, &condemned);
        Verdict {
            condemned: Arc::new(Condemned::with_dependencies(condemned, dependencies)),
            sweep_first,
            plans,
        }
    }
}

impl Collector {
    /// Condemn: the collectable blobs — unreachable, and named by the dead or an orphan in a
    /// pack sealed before the last round began (`orphans_before`) — then, per pack, whether
    /// its dead share passes `pack_dead_percent` (or it holds erased bytes): those are the
    /// round's plans, the open pack sealed first when it is one (`seal`). Adds every pack's
    /// live and dead bytes to `report`.
    pub(super) fn condemn(
        &self,
        dying: &Dying,
        marked: &Marked,
        manifests: &Manifests,
        cut: &ShardCut,
        report: &mut GcReport,
    ) -> Result<Vec<PackPlan>, EngineError> {
        let mut collectable: HashSetOf = HashSet::default();
        let mut of_deleted_tenants: HashSetOf = HashSet::default();
        for (shard, view) in self.published.shards.iter().enumerate() {
            let orphans_before = cut.orphans_before.get(shard).copied().unwrap_or(0);
            for (hash, location) in view.index.pin().iter() {
                if location.pack_id > cut.open_packs[shard] || marked.live_blobs.contains(hash) {
                    continue;
                }
                let deleted = dying.tenants.is_deleted(location.tenant_id);
                if deleted {
                    of_deleted_tenants.insert(*hash);
                }
                if deleted
                    || dying.named_by_dead.contains(hash)
                    || location.pack_id < orphans_before
                {
                    collectable.insert(*hash);
                }
            }
        }
        manifests.keep_what_kept_manifests_name(&mut collectable);

        let mut plans = Vec::new();
        for shard in 0..self.published.shards.len() {
            for plan in self.shard_plans(shard, &collectable, cut) {
                report.live_bytes += plan.live_bytes;
                let garbage = plan.file_bytes.saturating_sub(plan.live_bytes);
                report.dead_bytes += garbage;
                // Due past the dead share, or at once when it holds erased bytes.
                let due = garbage > 0
                    && (garbage * 100 >= u64::from(self.pack_dead_percent) * plan.file_bytes
                        || (plan.dead.iter()).any(|hash| {
                            dying.erased.contains(hash) || of_deleted_tenants.contains(hash)
                        }));
                if !due {
                    continue;
                }
                if plan.pack_id == cut.open_packs[shard] {
                    self.seal(shard, plan.pack_id)?;
                }
                let path = pack_path(&self.published.shards[shard].dir, plan.pack_id);
                let file_bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                plans.push(PackPlan { file_bytes, ..plan });
            }
        }
        Ok(plans)
    }

    /// Every pack of `shard` up to its open one: its collectable blobs, live and dead bytes,
    /// and its length (the open pack's: where its durable records end).
    fn shard_plans(&self, shard: usize, collectable: &HashSetOf, cut: &ShardCut) -> Vec<PackPlan> {
        let view = &self.published.shards[shard];
        let open = cut.open_packs[shard];
        let mut packs: HashMap<u32, PackPlan> = HashMap::new();
        for (hash, location) in view.index.pin().iter() {
            if location.pack_id > open {
                continue;
            }
            let plan = packs.entry(location.pack_id).or_insert_with(|| PackPlan {
                shard: shard as u16,
                pack_id: location.pack_id,
                ..PackPlan::default()
            });
            if collectable.contains(hash) {
                plan.dead.push(*hash);
                plan.dead_bytes += location.record_bytes();
            } else {
                plan.live_bytes += location.record_bytes();
            }
        }
        (0..=open)
            .map(|pack_id| {
                let file_bytes = if pack_id == open {
                    cut.snapshots[shard].pack_end
                } else {
                    let path = pack_path(&view.dir, pack_id);
                    std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0)
                };
                let plan = packs.remove(&pack_id).unwrap_or(PackPlan {
                    shard: shard as u16,
                    pack_id,
                    ..PackPlan::default()
                });
                PackPlan { file_bytes, ..plan }
            })
            .collect()
    }

    /// Seal: the open pack `pack_id` of `shard` becomes a sealed pack a compaction may
    /// rewrite (the shard starts the next one). Only for a pack due for compaction: a round
    /// every few minutes would otherwise leave a trail of small packs.
    fn seal(&self, shard: usize, pack_id: u32) -> Result<(), EngineError> {
        let (reply, answer) = oneshot::channel();
        self.shards[shard]
            .send(ShardRequest::GcSeal { reply })
            .map_err(|_| EngineError::ShutDown)?;
        let now_open = answer.recv().map_err(|_| EngineError::ShutDown)??;
        assert!(now_open > pack_id, "a sealed pack has a successor");
        Ok(())
    }
}
