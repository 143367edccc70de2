//! `VectorIndexes` (decision 0033 §1): each tenant's vector indexes, as the vector index
//! records (ops 23 and 24, store-wide) of `turns.log` build them, and how many live vectors
//! each holds. The sequencer checks a record before it writes one; replay and a standby's
//! ingest apply the same rules (`check_create`, `check_drop`), so every replica of the log
//! holds the same ids. An index id is the tenant's, dense from 1, never given twice: a name
//! dropped and created again is a new index, so vectors written for the old one (still named
//! by entries not yet overwritten) never answer for the new one.
//!
//! Persistent maps (`imbl`), published with the contexts: a search resolves an index without
//! a lock, and a snapshot never shows a change its batch has not made durable.

use std::sync::Arc;

use ctxstore_vocab::vectors::{Metric, VECTOR_INDEXES_PER_TENANT_MAX};

use bytes::Bytes;

use crate::error::EngineError;
use crate::format::context_meta::{KvEntry, KvVectors, VectorIndexRecord};
use crate::ids::{ContextId, TenantId, TurnId};
use crate::sequencer::dead::DeadTurns;
use crate::sequencer::vector_owners::{VectorOwner, VectorOwners};

/// A live vector index, as a listing answers it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct VectorIndexInfo {
    pub tenant_id: TenantId,
    pub index_id: u32,
    pub name: Arc<str>,
    pub dims: u16,
    pub metric: Metric,
    pub ef_search: u16,
    /// Live vectors: those of live entries (an expired entry counts until the reaper's record).
    pub vectors: u64,
}

#[derive(Clone, Debug, Default)]
pub struct VectorIndexes {
    live: imbl::HashMap<(TenantId, u32), VectorIndexInfo>,
    /// Each tenant's live indexes in name order.
    by_name: imbl::HashMap<TenantId, imbl::OrdMap<Arc<str>, u32>>,
    /// Each tenant's newest index id, dropped ones included.
    last_id: imbl::HashMap<TenantId, u32>,
    /// Which entries hold each vectors blob of each live index, and what its graph must
    /// change (`vector_owners.rs`).
    pub owners: VectorOwners,
    /// Each live turn's vectors, with its tenant and context: set at its append (a turn's
    /// vectors never change), gone when the garbage collector collects it.
    turns: imbl::HashMap<TurnId, TurnVectorsHeld>,
}

/// A turn's vectors as `VectorIndexes` holds them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct TurnVectorsHeld {
    pub tenant_id: TenantId,
    pub context_id: ContextId,
    pub vectors: KvVectors,
}

impl VectorIndexes {
    pub fn get(&self, tenant_id: TenantId, index_id: u32) -> Option<&VectorIndexInfo> {
        self.live.get(&(tenant_id, index_id))
    }

    pub fn by_name(&self, tenant_id: TenantId, name: &str) -> Option<&VectorIndexInfo> {
        let index_id = self.by_name.get(&tenant_id)?.get(name)?;
        self.get(tenant_id, *index_id)
    }

    /// Every live index of every tenant.
    pub fn all(&self) -> impl Iterator<Item = &VectorIndexInfo> {
        self.live.values()
    }

    /// `tenant_id`'s live indexes, in name order.
    pub fn of_tenant(&self, tenant_id: TenantId) -> Vec<VectorIndexInfo> {
        let Some(names) = self.by_name.get(&tenant_id) else {
            return Vec::new();
        };
        names
            .values()
            .filter_map(|index_id| self.get(tenant_id, *index_id).cloned())
            .collect()
    }

    /// The id `tenant_id`'s next index takes.
    pub fn next_id(&self, tenant_id: TenantId) -> u32 {
        self.last_id.get(&tenant_id).copied().unwrap_or(0) + 1
    }

    /// Whether a record creating `record` follows the rules: the tenant's next id, a name it
    /// has no live index of, fewer than 64 live indexes.
    pub fn check_create(&self, record: &VectorIndexRecord) -> Result<(), String> {
        let tenant_id = record.tenant_id;
        if record.index_id != self.next_id(tenant_id) {
            return Err(format!(
                "vector index record creates index {} of tenant {tenant_id}, expected {}",
                record.index_id,
                self.next_id(tenant_id)
            ));
        }
        if self.by_name(tenant_id, &record.name).is_some() {
            return Err(format!(
                "vector index record creates {:?} of tenant {tenant_id} again",
                record.name
            ));
        }
        let held = self.by_name.get(&tenant_id).map_or(0, imbl::OrdMap::len);
        if held >= VECTOR_INDEXES_PER_TENANT_MAX {
            return Err(format!(
                "tenant {tenant_id} holds the maximum of {VECTOR_INDEXES_PER_TENANT_MAX} vector \
                 indexes; drop one first"
            ));
        }
        Ok(())
    }

    /// Creates the index `check_create` accepted; answers it.
    pub fn create(&mut self, record: &VectorIndexRecord) -> VectorIndexInfo {
        assert!(self.check_create(record).is_ok(), "checked before applied");
        let name: Arc<str> = Arc::from(record.name.as_str());
        let info = VectorIndexInfo {
            tenant_id: record.tenant_id,
            index_id: record.index_id,
            name: name.clone(),
            dims: record.dims,
            metric: record.metric,
            ef_search: record.ef_search,
            vectors: 0,
        };
        self.live
            .insert((record.tenant_id, record.index_id), info.clone());
        let names = self.by_name.entry(record.tenant_id).or_default();
        names.insert(name, record.index_id);
        self.last_id.insert(record.tenant_id, record.index_id);
        self.owners.create_index(
            record.tenant_id,
            record.index_id,
            record.dims,
            record.metric,
        );
        info
    }

    pub fn check_drop(&self, tenant_id: TenantId, index_id: u32) -> Result<(), String> {
        match self.get(tenant_id, index_id) {
            Some(_) => Ok(()),
            None => Err(format!(
                "vector index record drops index {index_id} of tenant {tenant_id}, which is \
                 not live"
            )),
        }
    }

    /// Drops the index `check_drop` accepted; answers it as it was.
    pub fn drop_index(&mut self, tenant_id: TenantId, index_id: u32) -> VectorIndexInfo {
        assert!(
            self.check_drop(tenant_id, index_id).is_ok(),
            "checked before applied"
        );
        let Some(info) = self.live.remove(&(tenant_id, index_id)) else {
            unreachable!("checked live just above");
        };
        let names = self.by_name.entry(tenant_id).or_default();
        names.remove(&info.name);
        if names.is_empty() {
            self.by_name.remove(&tenant_id);
        }
        self.owners.drop_index(tenant_id, index_id);
        info
    }

    /// A tenant's deletion (op 21) takes its indexes with it; its ids stay taken.
    pub fn drop_tenant(&mut self, tenant_id: TenantId) {
        let doomed: Vec<u32> = self
            .by_name
            .get(&tenant_id)
            .map(|names| names.values().copied().collect())
            .unwrap_or_default();
        for index_id in doomed {
            self.drop_index(tenant_id, index_id);
        }
    }

    /// Every live turn with vectors (verify).
    pub(crate) fn turns_with_vectors(&self) -> impl Iterator<Item = (TurnId, &TurnVectorsHeld)> {
        self.turns.iter().map(|(turn_id, held)| (*turn_id, held))
    }

    /// The vectors of a live turn (`None`: it has none).
    pub(crate) fn of_turn(&self, turn_id: TurnId) -> Option<&TurnVectorsHeld> {
        self.turns.get(&turn_id)
    }

    /// A turn with vectors was appended (the live path and replay alike): they count in their
    /// index, and the turn joins the owners of their blob. Vectors of an index dropped since
    /// count nowhere.
    pub fn turn_appended(
        &mut self,
        tenant_id: TenantId,
        context_id: ContextId,
        turn_id: TurnId,
        vectors: &KvVectors,
    ) {
        let held = TurnVectorsHeld {
            tenant_id,
            context_id,
            vectors: *vectors,
        };
        let fresh = self.turns.insert(turn_id, held).is_none();
        assert!(fresh, "a turn is appended once");
        if let Some(info) = self.live.get_mut(&(tenant_id, vectors.index_id)) {
            info.vectors += u64::from(vectors.count);
            self.owners.add(
                tenant_id,
                vectors.index_id,
                turn_owner(&held, turn_id),
                vectors.count,
            );
        }
    }

    /// The garbage collector collected `dead` (a gc-dead record, live or replayed): their
    /// vectors leave their indexes. Passes every turn with vectors once per record.
    pub fn turns_died(&mut self, dead: &DeadTurns) {
        if dead.is_empty() || self.turns.is_empty() {
            return;
        }
        // The redacted ones left already (`turn_redacted`).
        let gone: Vec<TurnId> = self
            .turns
            .keys()
            .filter(|turn_id| dead.contains(**turn_id))
            .copied()
            .collect();
        for turn_id in gone {
            self.forget_turn(turn_id);
        }
    }

    /// A turn was redacted: its vectors leave their index with its bytes.
    pub fn turn_redacted(&mut self, turn_id: TurnId) {
        self.forget_turn(turn_id);
    }

    fn forget_turn(&mut self, turn_id: TurnId) {
        let Some(held) = self.turns.remove(&turn_id) else {
            return;
        };
        let vectors = held.vectors;
        if let Some(info) = self.live.get_mut(&(held.tenant_id, vectors.index_id)) {
            let count = u64::from(vectors.count);
            assert!(info.vectors >= count, "an index counts the vectors it lost");
            info.vectors -= count;
            self.owners.remove(
                held.tenant_id,
                vectors.index_id,
                &turn_owner(&held, turn_id),
                vectors.count,
            );
        }
    }

    /// Whether every entry's vectors name a live index of `tenant_id` (the typed error a
    /// writer gets: the index may have been dropped since it looked it up).
    pub fn check_entries(
        &self,
        tenant_id: TenantId,
        entries: &[KvEntry],
    ) -> Result<(), EngineError> {
        for vectors in entries.iter().filter_map(|entry| entry.vectors.as_ref()) {
            if self.get(tenant_id, vectors.index_id).is_none() {
                return Err(EngineError::VectorIndexNotFound(format!(
                    "vector index {} (dropped while the put was on its way)",
                    vectors.index_id
                )));
            }
        }
        Ok(())
    }

    /// The choke point of an entry's vectors: its value changed from `old` to `new` (either
    /// may have none). Counts them out of and into their indexes and moves the entry among
    /// the blobs' owners; vectors of a dropped index count nowhere. A refresh that keeps the
    /// same blob in the same index changes nothing.
    pub fn reindex(
        &mut self,
        tenant_id: TenantId,
        context_id: ContextId,
        key: &Bytes,
        old: Option<&KvVectors>,
        new: Option<&KvVectors>,
    ) {
        let same = |a: &KvVectors, b: &KvVectors| a.index_id == b.index_id && a.hash == b.hash;
        if let (Some(old), Some(new)) = (old, new)
            && same(old, new)
        {
            return;
        }
        let owner = |vectors: &KvVectors| VectorOwner {
            address: vectors.hash,
            context_id,
            key: key.clone(),
            turn_id: TurnId::NONE,
        };
        if let Some(vectors) = old
            && let Some(info) = self.live.get_mut(&(tenant_id, vectors.index_id))
        {
            let count = u64::from(vectors.count);
            assert!(info.vectors >= count, "an index counts the vectors it lost");
            info.vectors -= count;
            self.owners
                .remove(tenant_id, vectors.index_id, &owner(vectors), vectors.count);
        }
        if let Some(vectors) = new
            && let Some(info) = self.live.get_mut(&(tenant_id, vectors.index_id))
        {
            info.vectors += u64::from(vectors.count);
            self.owners
                .add(tenant_id, vectors.index_id, owner(vectors), vectors.count);
        }
    }
}

/// A turn as the owner of its vectors blob.
fn turn_owner(held: &TurnVectorsHeld, turn_id: TurnId) -> VectorOwner {
    VectorOwner {
        address: held.vectors.hash,
        context_id: held.context_id,
        key: Bytes::new(),
        turn_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tenant: u32, index_id: u32, name: &str) -> VectorIndexRecord {
        VectorIndexRecord {
            tenant_id: TenantId(tenant),
            index_id,
            dims: 3,
            metric: Metric::Cosine,
            ef_search: 128,
            name: name.into(),
        }
    }

    #[test]
    fn ids_are_per_tenant_and_never_reused() {
        let mut indexes = VectorIndexes::default();
        indexes.create(&record(0, 1, "a"));
        indexes.create(&record(1, 1, "a"));
        assert!(
            indexes.check_create(&record(0, 2, "a")).is_err(),
            "name taken"
        );
        assert!(
            indexes.check_create(&record(0, 3, "b")).is_err(),
            "not the next id"
        );
        indexes.drop_index(TenantId(0), 1);
        assert!(indexes.by_name(TenantId(0), "a").is_none());
        assert!(indexes.by_name(TenantId(1), "a").is_some());
        assert!(
            indexes.check_create(&record(0, 1, "a")).is_err(),
            "id 1 was given"
        );
        indexes.create(&record(0, 2, "a"));
        assert_eq!(
            indexes.by_name(TenantId(0), "a").map(|i| i.index_id),
            Some(2)
        );
        let old = KvVectors {
            hash: crate::ids::BlobHash([0; 32]),
            len: 20,
            index_id: 1,
            count: 2,
        };
        let key = Bytes::from_static(b"k");
        // The dropped index's vectors count nowhere.
        indexes.reindex(TenantId(0), ContextId(1), &key, None, Some(&old));
        assert_eq!(
            indexes.by_name(TenantId(0), "a").map(|i| i.vectors),
            Some(0)
        );
        let new = KvVectors { index_id: 2, ..old };
        indexes.reindex(TenantId(0), ContextId(1), &key, None, Some(&new));
        assert_eq!(
            indexes.by_name(TenantId(0), "a").map(|i| i.vectors),
            Some(2)
        );
        indexes.drop_tenant(TenantId(0));
        assert!(indexes.of_tenant(TenantId(0)).is_empty());
        assert_eq!(indexes.next_id(TenantId(0)), 3);
    }
}
