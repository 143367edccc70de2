//! `VectorOwners` (decision 0033, "The graph, next"): which key-value entries and turns name
//! each vectors blob of each index, what the graph must add and remove, and which additions it may
//! not hold yet. Kept by the sequencer at the one choke point that counts an index's vectors
//! (`VectorIndexes::reindex`), published with the contexts: an owners map of a snapshot
//! agrees with that snapshot's entries, so a search maps a graph label to the entries that
//! hold it in the state it reads, and no further.
//!
//! A graph label is its blob's address, shortened: the address's first word without its low
//! six bits (`base_of`), then the vector's row in the blob (0..64) in those six bits. Two
//! addresses of one index may share a base (about 1 in 10¹¹ pairs); the owners list of a base
//! names each entry with its full address, and the graph's writer keeps the second address out
//! of the graph and searched exactly (`vector_graph`), so a shared base costs time, never an
//! answer.

use std::sync::Arc;

use bytes::Bytes;
use ctxstore_vocab::le::u64_at;
use ctxstore_vocab::vectors::Metric;

use crate::ids::{BlobHash, ContextId, TenantId, TurnId};

/// Rows a label's low bits hold: `VECTORS_PER_ENTRY_MAX`.
pub(crate) const LABEL_ROW_BITS: u32 = 6;

const _: () =
    assert!(ctxstore_vocab::vectors::VECTORS_PER_ENTRY_MAX == 1 << LABEL_ROW_BITS as usize);

/// The graph labels of `address` share this: its first word, less the row bits.
pub(crate) fn base_of(address: &BlobHash) -> u64 {
    u64_at(&address.0, 0) >> LABEL_ROW_BITS
}

/// The graph label of row `row` of the blob whose base is `base`.
pub(crate) fn label_of(base: u64, row: usize) -> u64 {
    assert!(row < 1 << LABEL_ROW_BITS, "a blob holds at most 64 rows");
    (base << LABEL_ROW_BITS) | row as u64
}

/// The base a graph label belongs to.
pub(crate) fn base_of_label(label: u64) -> u64 {
    label >> LABEL_ROW_BITS
}

/// An entry or a turn holding a vectors blob: the blob's full address, the entry's context
/// and key (a turn: the context it was appended to, no key), the turn (`NONE`: an entry).
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct VectorOwner {
    pub address: BlobHash,
    pub context_id: ContextId,
    pub key: Bytes,
    pub turn_id: TurnId,
}

impl VectorOwner {
    /// A key-value entry's (searches of entries look at these only).
    pub fn is_entry(&self) -> bool {
        self.turn_id.is_none()
    }
}

/// What the graph of an index must do, in the order the sequencer made the changes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) enum GraphChange {
    Create {
        tenant_id: TenantId,
        index_id: u32,
        dims: u16,
        metric: Metric,
    },
    Drop {
        tenant_id: TenantId,
        index_id: u32,
    },
    /// `address` gained its first entry in the index: its `rows` vectors join the graph.
    Add {
        tenant_id: TenantId,
        index_id: u32,
        address: BlobHash,
        rows: u8,
    },
    /// `address` lost its last entry in the index: its rows leave the graph.
    Remove {
        tenant_id: TenantId,
        index_id: u32,
        address: BlobHash,
        rows: u8,
    },
}

/// An address added by the batch `seq`: a search scans it exactly while the graph's writer
/// has not applied that batch.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct RecentAddition {
    pub seq: u64,
    pub tenant_id: TenantId,
    pub index_id: u32,
    pub base: u64,
}

/// The owners of one index's vectors blobs, by base. A slice, not a persistent vector: nearly
/// every base has one owner, and `imbl::Vector` allocates a whole chunk (64 slots, 4.6 KB)
/// even for one (a million entries took gigabytes); a change copies the base's few owners.
pub(crate) type OwnersOfIndex = imbl::HashMap<u64, Arc<[VectorOwner]>>;

#[derive(Clone, Debug, Default)]
pub(crate) struct VectorOwners {
    by_index: imbl::HashMap<(TenantId, u32), OwnersOfIndex>,
    /// Additions of the batches the graph's writer may not have applied, oldest first.
    recent: imbl::Vector<RecentAddition>,
    /// The batches published with changes so far: the one being built is `seq + 1`.
    seq: u64,
    /// The changes of the batch being built (empty in a published snapshot). Collected only
    /// once the sequencer serves: replay leaves them, and the graph is built from the owners.
    changes: Vec<GraphChange>,
    feeding: bool,
}

impl VectorOwners {
    /// The owners of `(tenant_id, index_id)`'s blobs.
    pub fn of_index(&self, tenant_id: TenantId, index_id: u32) -> Option<&OwnersOfIndex> {
        self.by_index.get(&(tenant_id, index_id))
    }

    /// The bases `(tenant_id, index_id)`'s graph may lack: added by batches after
    /// `applied_seq`, the last its writer applied.
    pub fn unapplied(
        &self,
        tenant_id: TenantId,
        index_id: u32,
        applied_seq: u64,
    ) -> impl Iterator<Item = u64> + '_ {
        self.recent
            .iter()
            .filter(move |recent| {
                recent.seq > applied_seq
                    && recent.tenant_id == tenant_id
                    && recent.index_id == index_id
            })
            .map(|recent| recent.base)
    }

    /// From now on changes are collected for the graph's writer (the sequencer, once it
    /// serves).
    pub fn start_feeding(&mut self) {
        self.feeding = true;
    }

    pub fn create_index(&mut self, tenant_id: TenantId, index_id: u32, dims: u16, metric: Metric) {
        self.by_index
            .insert((tenant_id, index_id), OwnersOfIndex::new());
        self.change(GraphChange::Create {
            tenant_id,
            index_id,
            dims,
            metric,
        });
    }

    pub fn drop_index(&mut self, tenant_id: TenantId, index_id: u32) {
        self.by_index.remove(&(tenant_id, index_id));
        self.change(GraphChange::Drop {
            tenant_id,
            index_id,
        });
    }

    /// `owner` now holds its address in the index (a live one: the caller checked).
    pub fn add(&mut self, tenant_id: TenantId, index_id: u32, owner: VectorOwner, rows: u8) {
        let base = base_of(&owner.address);
        let address = owner.address;
        let owners = self.by_index.entry((tenant_id, index_id)).or_default();
        let held: &[VectorOwner] = owners.get(&base).map_or(&[], |list| list);
        let first = !held.iter().any(|held| held.address == address);
        let list: Arc<[VectorOwner]> = held.iter().cloned().chain([owner]).collect();
        owners.insert(base, list);
        if first && self.feeding {
            self.recent.push_back(RecentAddition {
                seq: self.seq + 1,
                tenant_id,
                index_id,
                base,
            });
            self.change(GraphChange::Add {
                tenant_id,
                index_id,
                address,
                rows,
            });
        }
    }

    /// `owner` no longer holds its address in the index.
    pub fn remove(&mut self, tenant_id: TenantId, index_id: u32, owner: &VectorOwner, rows: u8) {
        let base = base_of(&owner.address);
        let Some(owners) = self.by_index.get_mut(&(tenant_id, index_id)) else {
            unreachable!("the owners of a live index exist from its creation");
        };
        let Some(list) = owners.get(&base) else {
            unreachable!("a removed owner was added");
        };
        let Some(at) = list.iter().position(|held| held == owner) else {
            unreachable!("a removed owner was added");
        };
        let rest: Arc<[VectorOwner]> = list
            .iter()
            .enumerate()
            .filter(|(index, _)| *index != at)
            .map(|(_, held)| held.clone())
            .collect();
        let last = !rest.iter().any(|held| held.address == owner.address);
        if rest.is_empty() {
            owners.remove(&base);
        } else {
            owners.insert(base, rest);
        }
        if last {
            self.change(GraphChange::Remove {
                tenant_id,
                index_id,
                address: owner.address,
                rows,
            });
        }
    }

    fn change(&mut self, change: GraphChange) {
        if self.feeding {
            self.changes.push(change);
        }
    }

    /// The batch's changes, as it is published: numbered `seq` (0: none), and the additions
    /// the graph's writer has applied (through `applied_seq`) no longer listed as recent.
    pub fn take_changes(&mut self, applied_seq: u64) -> (u64, Vec<GraphChange>) {
        while self
            .recent
            .front()
            .is_some_and(|recent| recent.seq <= applied_seq)
        {
            self.recent.pop_front();
        }
        if self.changes.is_empty() {
            return (0, Vec::new());
        }
        self.seq += 1;
        (self.seq, std::mem::take(&mut self.changes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(address: u8, context: u64, key: &str) -> VectorOwner {
        VectorOwner {
            address: BlobHash([address; 32]),
            context_id: ContextId(context),
            key: Bytes::copy_from_slice(key.as_bytes()),
            turn_id: TurnId::NONE,
        }
    }

    #[test]
    fn the_graph_hears_of_an_address_at_its_first_and_last_owner() {
        let tenant = TenantId(0);
        let mut owners = VectorOwners::default();
        owners.start_feeding();
        owners.create_index(tenant, 1, 3, Metric::Cosine);
        owners.add(tenant, 1, owner(7, 1, "a"), 2);
        owners.add(tenant, 1, owner(7, 2, "b"), 2);
        let (seq, changes) = owners.take_changes(0);
        assert_eq!(seq, 1);
        assert_eq!(
            changes.len(),
            2,
            "the creation and one addition: {changes:?}"
        );
        assert_eq!(owners.unapplied(tenant, 1, 0).count(), 1);
        owners.remove(tenant, 1, &owner(7, 1, "a"), 2);
        assert_eq!(owners.take_changes(0), (0, Vec::new()), "b still holds it");
        owners.remove(tenant, 1, &owner(7, 2, "b"), 2);
        let (seq, changes) = owners.take_changes(1);
        assert_eq!(seq, 2);
        assert!(matches!(changes[..], [GraphChange::Remove { rows: 2, .. }]));
        assert!(owners.recent.is_empty(), "batch 1 is applied");
        assert!(owners.of_index(tenant, 1).is_some_and(|o| o.is_empty()));
        owners.drop_index(tenant, 1);
        assert!(owners.of_index(tenant, 1).is_none());
    }

    #[test]
    fn labels_keep_the_base_and_the_row() {
        let address = BlobHash([0xAB; 32]);
        let base = base_of(&address);
        for row in [0, 1, 63] {
            assert_eq!(base_of_label(label_of(base, row)), base);
            assert_eq!(label_of(base, row) & 63, row as u64);
        }
    }
}
