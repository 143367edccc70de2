//! Context metadata as the sequencer keeps it: per context its name, tags, key-value entries,
//! times, newest own turn and what it inherited, plus the indexes a listing needs (name →
//! context, tag → contexts), the store-wide label index (an indexed label → its turns, for
//! FIND_TURNS; rebuilt at open) and the turn keys ((context, key) → turn: one concurrent map
//! every snapshot shares, the batch's own pending until `publish_turn_keys`). The same
//! rules serve the live path (`check` before a record is written: typed errors) and replay
//! (`apply` while reading turns.log: a record that breaks them is damage).
//!
//! Every map is persistent (`imbl`): the sequencer changes its own copy, and publishing a
//! snapshot to readers is a clone that shares all unchanged nodes — O(1), then O(log n) per
//! later change — so readers never take a lock and never see a batch half-applied.

use std::sync::Arc;

use bytes::Bytes;

use crate::error::EngineError;
use crate::format::context_meta::{
    CONTEXT_NAME_BYTES_MAX, ContextMeta, KvEntry, KvExpiry, KvVectors, TAG_KEY_BYTES_MAX,
    TAG_VALUE_BYTES_MAX, TAGS_PER_CONTEXT_MAX,
};
use crate::format::turn_extras::TurnExtras;
use crate::ids::{BlobHash, BlobHashBuildHasher, ContextId, TenantId, TurnId};
use crate::model::{ContextHead, ContextView, Scope};
use crate::sequencer::overlays::Overlays;
use crate::sequencer::tenants::Tenants;
use crate::sequencer::vector_indexes::VectorIndexes;

/// A key-value entry's value: a blob, and its time to live (decision 0028).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct KvValue {
    pub hash: BlobHash,
    pub len: u32,
    /// Milliseconds it lives after its put or last refresh (0: for ever).
    pub ttl_ms: u64,
    /// When it expires (unix ms; 0: never). From that instant every read passes it by,
    /// whether or not the reaper has removed it yet.
    pub expires_at_unix_ms: u64,
    /// Its vectors (decision 0033): they live and die with the value.
    pub vectors: Option<KvVectors>,
}

impl KvValue {
    /// Whether a read at `now_unix_ms` sees the entry.
    pub fn live_at(&self, now_unix_ms: u64) -> bool {
        self.expires_at_unix_ms == 0 || now_unix_ms < self.expires_at_unix_ms
    }
}

/// An entry of the expiry index: (expiry, context, key), in expiry order.
pub(crate) type KvExpiryKey = (u64, ContextId, Bytes);

/// A context's tags: at most 32, sorted by key, shared until changed. A sorted slice, not a
/// persistent map: `imbl`'s maps allocate a whole node (64 slots) even for a few entries, and a
/// million contexts with 4 tags each would take ~2 KB apiece; strings are interned
/// (`Contexts::intern`), so equal keys and values of different contexts share one allocation.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Tags(Option<Arc<[TagPair]>>);

/// One tag: key and value, both interned.
pub type TagPair = (Arc<str>, Arc<str>);

impl Tags {
    pub fn get(&self, key: &str) -> Option<&Arc<str>> {
        let pairs = self.0.as_deref()?;
        let found = pairs.binary_search_by(|(k, _)| k.as_ref().cmp(key)).ok()?;
        pairs.get(found).map(|(_, value)| value)
    }

    pub fn iter(&self) -> impl Iterator<Item = &TagPair> {
        self.0.as_deref().unwrap_or_default().iter()
    }

    fn from_sorted(pairs: Vec<TagPair>) -> Tags {
        if pairs.is_empty() {
            Tags(None)
        } else {
            Tags(Some(pairs.into()))
        }
    }
}

/// What a context inherited when it was made: its turn log, key look-ups and parent choices
/// go on there (decision 0009).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Inherit {
    /// A fork at `base`: the turns of `base`'s chain.
    Fork { base: TurnId },
    /// A clone of `source`: the turns `source` owned up to `upto` (its newest turn then).
    Clone { source: ContextId, upto: TurnId },
}

/// What a context carries besides its head.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ContextInfo {
    pub name: Option<Arc<str>>,
    pub tags: Tags,
    pub kv: imbl::OrdMap<Bytes, KvValue>,
    pub created_at_unix_ms: u64,
    /// The newest head move, tag or key-value change.
    pub updated_at_unix_ms: u64,
    /// The newest turn appended to this context (`NONE` before its first).
    pub last_turn_id: TurnId,
    pub inherits: Option<Inherit>,
    /// Deleted (issue 15): every request naming it answers NOT_FOUND; the id is not reused.
    pub deleted: bool,
    /// Turns below this depth are no longer reachable through this context (a prune).
    pub floor_depth: u32,
    /// Deleted once not updated for this long (0: the server's default, if any).
    pub ttl_ms: u64,
    /// Payload bytes (raw) of the turns appended to it: what a delete may give back, for the
    /// garbage collector's trigger (an estimate: forks and dedup may keep some).
    pub own_payload_bytes: u64,
    /// The tenant that owns it (decision 0032): set at creation, never changed.
    pub tenant_id: TenantId,
}

impl ContextInfo {
    /// The context as a read or a metadata answer returns it, at `head`.
    pub fn view(&self, head: ContextHead) -> ContextView {
        ContextView {
            head,
            name: self.name.as_deref().map(str::to_owned),
            tags: self
                .tags
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
            created_at_unix_ms: self.created_at_unix_ms,
            updated_at_unix_ms: self.updated_at_unix_ms,
            floor_depth: self.floor_depth,
            ttl_ms: self.ttl_ms,
            tenant_id: self.tenant_id,
        }
    }
}

/// A turn key as the turn-key index holds it: the BLAKE3 of its context and its bytes. Two
/// keys with one digest are as unthinkable as two payloads with one BlobHash, which the whole
/// store rests on; the digest's plain 32 bytes copy and compare without touching the heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TurnKeyDigest([u8; 32]);

impl TurnKeyDigest {
    fn of(context_id: ContextId, key: &[u8]) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&context_id.0.to_le_bytes());
        hasher.update(key);
        Self(*hasher.finalize().as_bytes())
    }
}

/// Already uniformly distributed: one word of it is the table hash (`BlobHashBuildHasher`).
impl std::hash::Hash for TurnKeyDigest {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(ctxstore_vocab::le::u64_at(&self.0, 0));
    }
}

/// The published turn keys: one concurrent map shared by every `Contexts` snapshot, written
/// only by the sequencer (`publish_turn_keys`, after the turns it names are published).
type PublishedTurnKeys = papaya::HashMap<TurnKeyDigest, TurnId, BlobHashBuildHasher>;

/// Every context's metadata and the indexes over it. Context `c` is at index `c - 1`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Contexts {
    infos: imbl::Vector<ContextInfo>,
    /// Names per tenant (decision 0032 §2: two tenants may each have `main`), each tenant's
    /// in name order.
    names: imbl::HashMap<TenantId, imbl::OrdMap<Arc<str>, ContextId>>,
    /// (key, value) → the contexts whose tag `key` has that value.
    tag_index: imbl::HashMap<TagPair, imbl::OrdSet<ContextId>>,
    /// Every tag key and value in use, once (see `Tags`).
    strings: imbl::HashMap<Arc<str>, Arc<str>>,
    /// (context, turn key) → the turn appended to that context with that key, for turns up
    /// to the last publish: a concurrent map every snapshot shares (an older snapshot may
    /// see a newer key; its turn is published, and owners' checks bound what a snapshot may
    /// use). Not a persistent map: one, copied path by path out of the published snapshot at
    /// each batch's inserts (random keys, a fresh path each), cost a keyed append ~4 µs of
    /// the sequencer's thread, which the group commit's cycle pays in series (issue 14).
    turn_keys: Arc<PublishedTurnKeys>,
    /// The keys of turns appended since the last publish: the sequencer's working copy only
    /// (a published snapshot has none), small, rolled back with the copy on a failed batch.
    turn_keys_pending: imbl::HashMap<TurnKeyDigest, TurnId>,
    /// Indexed label (`is_indexed_label`) → the turns carrying it, in TurnID order, across
    /// all contexts: the store-wide find.
    label_index: imbl::HashMap<TagPair, imbl::Vector<TurnId>>,
    /// Every key-value entry that expires, in expiry order: what the reaper removes next is at
    /// the front (decision 0028). O(log n) per put or refresh with a TTL.
    kv_expiries: imbl::OrdSet<KvExpiryKey>,
    /// Patches and redactions of turns, purged blobs (decision 0012): published with the rest.
    pub overlays: Overlays,
    /// Tenant names and their ids (decision 0032): published with the rest.
    pub tenants: Tenants,
    /// Each tenant's vector indexes and their live vectors (decision 0033).
    pub vector_indexes: VectorIndexes,
    /// Live contexts per tenant, in ContextID order (decision 0032 §2, §3): one more at each
    /// create, one less at each delete; replay rebuilds it as it rebuilds the rest. A
    /// tenant's listing walks its own set rather than every context of the store,
    /// `quota_contexts` counts it (`len`, O(1)), op 21 deletes what it holds.
    live_by_tenant: imbl::HashMap<TenantId, imbl::OrdSet<ContextId>>,
    /// Sum of `own_payload_bytes` over every context deleted so far (since open: replay
    /// counts the deletes it meets). The garbage collector runs early once this has grown by
    /// `gc_deleted_bytes_trigger` since its last round.
    pub deleted_payload_bytes: u64,
    /// Contexts deleted so far (since open: replay counts the deletes it meets). A deleted
    /// context keeps its ContextID slot, so the live count is the heads' count less this (and
    /// less `skipped_contexts`).
    pub deleted_contexts: u64,
    /// ContextIDs taken at replica generations' starts (`skip_through`): slots among the
    /// heads that never were contexts, not counted as live or deleted.
    pub skipped_contexts: u64,
}

pub use ctxstore_vocab::labels::is_indexed_label;

impl Contexts {
    pub fn get(&self, context_id: ContextId) -> Option<&ContextInfo> {
        self.infos.get((context_id.0 as usize).wrapping_sub(1))
    }

    pub fn count(&self) -> u64 {
        self.infos.len() as u64
    }

    /// Every tenant with live contexts, and how many.
    pub fn live_by_tenant(&self) -> impl Iterator<Item = (TenantId, u64)> + '_ {
        self.live_by_tenant
            .iter()
            .map(|(tenant_id, live)| (*tenant_id, live.len() as u64))
    }

    /// How many live contexts (created, not deleted) `tenant_id` has.
    pub fn live_of(&self, tenant_id: TenantId) -> u64 {
        self.live_contexts_of(tenant_id)
            .map_or(0, |live| live.len() as u64)
    }

    /// `tenant_id`'s live contexts, in ContextID order (`None`: it has none).
    pub fn live_contexts_of(&self, tenant_id: TenantId) -> Option<&imbl::OrdSet<ContextId>> {
        self.live_by_tenant.get(&tenant_id)
    }

    /// Whether `scope` sees `context_id` (decision 0032 §2): every context for the store-wide
    /// scope; for a tenant's, a context of that tenant (set at its creation, never changed),
    /// and none once the tenant is deleted (its ended streams, say, are gone with it).
    pub fn visible_in(&self, scope: Scope, context_id: ContextId) -> bool {
        match scope {
            Scope::Store => true,
            Scope::Tenant(tenant_id) => {
                !self.tenants.is_deleted(tenant_id)
                    && self
                        .get(context_id)
                        .is_some_and(|info| scope.sees(info.tenant_id))
            }
        }
    }

    /// The context `tenant_id` named `name`.
    pub fn by_name(&self, tenant_id: TenantId, name: &str) -> Option<ContextId> {
        self.names.get(&tenant_id)?.get(name).copied()
    }

    /// `tenant_id`'s contexts whose names start with `prefix`, in name order, from `after`
    /// (exclusive).
    pub fn names_from<'a>(
        &'a self,
        tenant_id: TenantId,
        prefix: &'a str,
        after: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a Arc<str>, ContextId)> + 'a {
        // From the prefix, or from the cursor when it lies past the prefix's start.
        let start: Arc<str> = Arc::from(after.filter(|after| *after > prefix).unwrap_or(prefix));
        self.names
            .get(&tenant_id)
            .into_iter()
            .flat_map(move |names| names.range(start.clone()..))
            .filter(move |(name, _)| Some(name.as_ref()) != after)
            .take_while(move |(name, _)| name.starts_with(prefix))
            .map(|(name, id)| (name, *id))
    }

    /// Key-value entries expired at `now_unix_ms`, oldest expiry first, at most `max`.
    pub fn kv_expired(&self, now_unix_ms: u64, max: usize) -> Vec<KvExpiryKey> {
        self.kv_expiries
            .iter()
            .take_while(|(expires, _, _)| *expires <= now_unix_ms)
            .take(max)
            .cloned()
            .collect()
    }

    /// Contexts whose tag `key` is `value`, in ContextID order.
    pub fn tagged(&self, key: &str, value: &str) -> Option<&imbl::OrdSet<ContextId>> {
        self.tag_index.get(&(Arc::from(key), Arc::from(value)))
    }

    /// A new context (its context record), empty or forked at `base`. A clone's metadata
    /// follows in its own record (and replaces the fork inheritance with the clone's).
    /// ContextIDs after the last one through `last`, taken as deleted contexts (a replica
    /// generation's start, `ContextMeta::SkipContexts`): each has an entry, as every id
    /// below the count does, and answers as a deleted context does.
    pub fn skip_through(&mut self, last: ContextId, at_unix_ms: u64) {
        assert!(last.0 > self.count(), "a skip takes new ContextIDs");
        self.skipped_contexts += last.0 - self.count();
        while self.count() < last.0 {
            self.infos.push_back(ContextInfo {
                created_at_unix_ms: at_unix_ms,
                updated_at_unix_ms: at_unix_ms,
                deleted: true,
                ..ContextInfo::default()
            });
        }
    }

    pub fn create(
        &mut self,
        context_id: ContextId,
        base: TurnId,
        tenant_id: TenantId,
        at_unix_ms: u64,
    ) {
        assert_eq!(context_id.0, self.count() + 1, "contexts are dense");
        assert!(
            self.tenants.exists(tenant_id),
            "a context's tenant is registered"
        );
        self.infos.push_back(ContextInfo {
            created_at_unix_ms: at_unix_ms,
            updated_at_unix_ms: at_unix_ms,
            inherits: (!base.is_none()).then_some(Inherit::Fork { base }),
            tenant_id,
            ..ContextInfo::default()
        });
        let fresh = self
            .live_by_tenant
            .entry(tenant_id)
            .or_default()
            .insert(context_id)
            .is_none();
        assert!(fresh, "a new context is not live yet");
    }

    /// A turn was appended to the context (its head moved to it), with `key` if it has one.
    pub fn appended(
        &mut self,
        context_id: ContextId,
        turn_id: TurnId,
        payload_len: u32,
        extras: &TurnExtras,
        at_unix_ms: u64,
    ) {
        let key = extras.key.as_slice();
        if let Some(vectors) = &extras.vectors
            && let Some(info) = self.get(context_id)
        {
            let tenant_id = info.tenant_id;
            // Given as bytes, so new content even after a purge of the same bytes.
            self.overlays.named(&vectors.hash);
            self.vector_indexes
                .turn_appended(tenant_id, context_id, turn_id, vectors);
        }
        for (label_key, value) in &extras.labels {
            if is_indexed_label(label_key) {
                let pair = (self.intern(label_key), self.intern(value));
                self.label_index.entry(pair).or_default().push_back(turn_id);
            }
        }
        if let Some(info) = self.infos.get_mut((context_id.0 as usize).wrapping_sub(1)) {
            assert!(
                info.last_turn_id < turn_id,
                "turns are appended in TurnID order"
            );
            info.last_turn_id = turn_id;
            info.updated_at_unix_ms = info.updated_at_unix_ms.max(at_unix_ms);
            info.own_payload_bytes += u64::from(payload_len);
        }
        if !key.is_empty() {
            // Unique in a context, except that a collected turn's key may be used again (the
            // sequencer and replay check which): the new turn replaces it.
            self.turn_keys_pending
                .insert(TurnKeyDigest::of(context_id, key), turn_id);
        }
    }

    /// The turns carrying the indexed label `key = value`, newest first, older than `before`
    /// (`NONE`: from the newest).
    pub fn labelled(
        &self,
        key: &str,
        value: &str,
        before: TurnId,
    ) -> impl Iterator<Item = TurnId> + '_ {
        let turns = self.label_index.get(&(Arc::from(key), Arc::from(value)));
        let end = match (turns, before) {
            (None, _) => 0,
            (Some(turns), TurnId::NONE) => turns.len(),
            (Some(turns), before) => turns.binary_search(&before).unwrap_or_else(|at| at),
        };
        turns
            .into_iter()
            .flat_map(move |turns| turns.iter().take(end).rev().copied())
    }

    /// The turn appended to `context_id` itself with `key` (not an inherited one).
    pub fn own_turn_key(&self, context_id: ContextId, key: &[u8]) -> Option<TurnId> {
        let digest = TurnKeyDigest::of(context_id, key);
        match self.turn_keys_pending.get(&digest) {
            Some(&turn_id) => Some(turn_id),
            None => self.turn_keys.pin().get(&digest).copied(),
        }
    }

    /// Moves the keys appended since the last publish into the shared map: the sequencer
    /// calls it after publishing the watermark that makes their turns readable and before
    /// answering them (so an acknowledged key is found); replay calls it at its end.
    pub fn publish_turn_keys(&mut self) {
        if self.turn_keys_pending.is_empty() {
            return;
        }
        let published = self.turn_keys.pin();
        for (&digest, &turn_id) in &self.turn_keys_pending {
            published.insert(digest, turn_id);
        }
        self.turn_keys_pending = imbl::HashMap::new();
    }

    /// Whether `meta` may be applied to `context_id`: the typed error a caller gets, before
    /// anything is written.
    pub fn check(&self, context_id: ContextId, meta: &ContextMeta) -> Result<(), EngineError> {
        let info = self
            .get(context_id)
            .filter(|info| !info.deleted)
            .ok_or(EngineError::ContextNotFound(context_id))?;
        match meta {
            ContextMeta::Name(name) => check_name(self, context_id, info, name),
            ContextMeta::Tags(changes) => check_tags(info, changes),
            ContextMeta::KvPut(entries) => {
                self.vector_indexes.check_entries(info.tenant_id, entries)
            }
            ContextMeta::KvDelete(_) | ContextMeta::KvTouch(_) | ContextMeta::KvExpire(_) => Ok(()),
            ContextMeta::CloneFrom(source) => {
                self.get(*source)
                    .filter(|source| !source.deleted)
                    .ok_or(EngineError::ContextNotFound(*source))?;
                Ok(())
            }
            ContextMeta::Delete | ContextMeta::Ttl(_) => Ok(()),
            // Floors only rise: a prune never brings back what an earlier one let go.
            ContextMeta::Floor(depth) if *depth < info.floor_depth => {
                Err(EngineError::InvalidArgument(format!(
                    "context {context_id} is pruned at depth {}; a floor does not move down \
                     (asked {depth})",
                    info.floor_depth
                )))
            }
            ContextMeta::Floor(_) => Ok(()),
            // Store-wide, or about a turn: the sequencer applies them, not a context.
            ContextMeta::GcDead { .. }
            | ContextMeta::Purge(_)
            | ContextMeta::Overlay { .. }
            | ContextMeta::SkipContexts
            | ContextMeta::Tenant { .. }
            | ContextMeta::TenantDeleted(_)
            | ContextMeta::VectorIndex(_)
            | ContextMeta::VectorIndexDropped { .. } => Err(EngineError::InvalidArgument(
                "gc-dead, overlay, purge, skip, tenant and vector index records are not context \
                 changes"
                    .into(),
            )),
        }
    }

    /// Tag changes: each key's old pair leaves the index, a set value enters it; tags stay sorted.
    fn apply_tags(
        &mut self,
        context_id: ContextId,
        info: &mut ContextInfo,
        changes: &[(String, Option<String>)],
    ) {
        let mut tags: Vec<TagPair> = info.tags.iter().cloned().collect();
        for (key, value) in changes {
            if let Ok(found) = tags.binary_search_by(|(k, _)| k.as_ref().cmp(key)) {
                let (old_key, old_value) = tags.remove(found);
                self.unindex(&old_key, &old_value, context_id);
            }
            if let Some(value) = value {
                let key = self.intern(key);
                let value = self.intern(value);
                self.index(&key, &value, context_id);
                let at = tags.partition_point(|(k, _)| k < &key);
                tags.insert(at, (key, value));
            }
        }
        info.tags = Tags::from_sorted(tags);
    }

    /// Key-value puts: each entry replaces its key's value, and the key-value index follows.
    fn apply_kv_put(&mut self, context_id: ContextId, info: &mut ContextInfo, entries: &[KvEntry]) {
        for KvEntry {
            key,
            value_hash,
            value_len,
            ttl_ms,
            expires_at_unix_ms,
            vectors,
        } in entries
        {
            let value = KvValue {
                hash: *value_hash,
                len: *value_len,
                ttl_ms: *ttl_ms,
                expires_at_unix_ms: *expires_at_unix_ms,
                vectors: *vectors,
            };
            self.overlays.named(value_hash);
            if let Some(vectors) = vectors {
                self.overlays.named(&vectors.hash);
            }
            let key = Bytes::copy_from_slice(key);
            let old = info.kv.insert(key.clone(), value);
            self.reindex_kv(context_id, &key, old.as_ref(), Some(&value));
        }
    }

    /// The reaper's compare-and-delete: each entry whose expiry is still the one given goes.
    fn apply_kv_expire(
        &mut self,
        context_id: ContextId,
        info: &mut ContextInfo,
        entries: &[KvExpiry],
    ) {
        for entry in entries {
            let key = Bytes::copy_from_slice(&entry.key);
            let expired = info
                .kv
                .get(&key)
                .is_some_and(|value| value.expires_at_unix_ms == entry.expires_at_unix_ms);
            if expired {
                let old = info.kv.remove(&key);
                self.reindex_kv(context_id, &key, old.as_ref(), None);
            }
        }
    }

    /// Touches: each live key's TTL and expiry restart (a key gone meanwhile is skipped).
    fn apply_kv_touch(
        &mut self,
        context_id: ContextId,
        info: &mut ContextInfo,
        entries: &[KvExpiry],
    ) {
        for KvExpiry {
            key,
            ttl_ms,
            expires_at_unix_ms,
        } in entries
        {
            let key = Bytes::copy_from_slice(key);
            let Some(old) = info.kv.get(&key).copied() else {
                continue;
            };
            let new = KvValue {
                ttl_ms: *ttl_ms,
                expires_at_unix_ms: *expires_at_unix_ms,
                ..old
            };
            info.kv.insert(key.clone(), new);
            self.reindex_kv(context_id, &key, Some(&old), Some(&new));
        }
    }

    /// A delete: the name, tags and entries leave their indexes; the context counts as deleted.
    fn apply_delete(&mut self, context_id: ContextId, info: &mut ContextInfo) {
        if let Some(name) = info.name.take() {
            let names = self.names.entry(info.tenant_id).or_default();
            names.remove(&name);
            if names.is_empty() {
                self.names.remove(&info.tenant_id);
            }
        }
        for (key, value) in info.tags.iter() {
            self.unindex(key, value, context_id);
        }
        info.tags = Tags::default();
        for (key, value) in info.kv.iter() {
            self.reindex_kv(context_id, key, Some(value), None);
        }
        info.kv = imbl::OrdMap::new();
        info.deleted = true;
        self.deleted_payload_bytes += info.own_payload_bytes;
        self.deleted_contexts += 1;
        let live = self.live_by_tenant.entry(info.tenant_id).or_default();
        let was_live = live.remove(&context_id).is_some();
        assert!(was_live, "a deleted context was live in its tenant");
        if live.is_empty() {
            self.live_by_tenant.remove(&info.tenant_id);
        }
        // Its turn keys and label-index entries stay until the garbage collector
        // drops its turns: every look-up through them checks the context first.
    }

    /// Deletes `tenant_id` (op 21, decision 0032 §6) and every context of it still live,
    /// each as a context's own delete would (`apply_delete`); answers those contexts, whose
    /// heads the caller deletes. The rules of `Tenants::check_delete` first: a refusal
    /// changes nothing.
    pub fn delete_tenant(
        &mut self,
        tenant_id: TenantId,
        at_unix_ms: u64,
    ) -> Result<Vec<ContextId>, String> {
        self.tenants.check_delete(tenant_id)?;
        self.tenants.delete(tenant_id);
        // Its contexts' vectors leave their indexes below; the indexes go first, so they are
        // counted nowhere.
        self.vector_indexes.drop_tenant(tenant_id);
        // Its live contexts, from its own set: the tenant's size, not the store's.
        let doomed: Vec<ContextId> = self
            .live_contexts_of(tenant_id)
            .map(|live| live.iter().copied().collect())
            .unwrap_or_default();
        for context_id in &doomed {
            let index = context_id.0 as usize - 1;
            let mut info = self.infos[index].clone();
            self.apply_delete(*context_id, &mut info);
            info.updated_at_unix_ms = info.updated_at_unix_ms.max(at_unix_ms);
            self.infos[index] = info;
        }
        assert_eq!(
            self.live_of(tenant_id),
            0,
            "a deleted tenant has no live context"
        );
        Ok(doomed)
    }

    /// Applies a metadata record (checked by `check`, or replayed from the log).
    pub fn apply(
        &mut self,
        context_id: ContextId,
        meta: &ContextMeta,
        at_unix_ms: u64,
    ) -> Result<(), EngineError> {
        self.check(context_id, meta)?;
        let index = context_id.0 as usize - 1;
        let source = match meta {
            ContextMeta::CloneFrom(source) => self.get(*source).cloned(),
            _ => None,
        };
        let mut info = self.infos[index].clone();
        match meta {
            ContextMeta::Name(name) => {
                let name: Arc<str> = Arc::from(name.as_str());
                let names = self.names.entry(info.tenant_id).or_default();
                names.insert(name.clone(), context_id);
                info.name = Some(name);
            }
            ContextMeta::Tags(changes) => self.apply_tags(context_id, &mut info, changes),
            ContextMeta::KvPut(entries) => self.apply_kv_put(context_id, &mut info, entries),
            ContextMeta::KvDelete(keys) => {
                for key in keys {
                    let key = Bytes::copy_from_slice(key);
                    let old = info.kv.remove(&key);
                    self.reindex_kv(context_id, &key, old.as_ref(), None);
                }
            }
            ContextMeta::KvTouch(entries) => self.apply_kv_touch(context_id, &mut info, entries),
            ContextMeta::KvExpire(entries) => self.apply_kv_expire(context_id, &mut info, entries),
            ContextMeta::CloneFrom(source_id) => {
                if let Some(source) = source {
                    for (key, value) in source.tags.iter() {
                        self.index(key, value, context_id);
                    }
                    info.tags = source.tags;
                    // A clone's entries expire when the source's do, each on its own after.
                    for (key, value) in source.kv.iter() {
                        self.reindex_kv(context_id, key, None, Some(value));
                    }
                    info.kv = source.kv;
                    info.inherits = Some(Inherit::Clone {
                        source: *source_id,
                        upto: source.last_turn_id,
                    });
                    // A clone sees no more of the source's history than the source did.
                    info.floor_depth = source.floor_depth;
                }
            }
            ContextMeta::Delete => self.apply_delete(context_id, &mut info),
            ContextMeta::Floor(depth) => info.floor_depth = *depth,
            ContextMeta::Ttl(ttl_ms) => info.ttl_ms = *ttl_ms,
            ContextMeta::GcDead { .. }
            | ContextMeta::Purge(_)
            | ContextMeta::Overlay { .. }
            | ContextMeta::SkipContexts
            | ContextMeta::Tenant { .. }
            | ContextMeta::TenantDeleted(_)
            | ContextMeta::VectorIndex(_)
            | ContextMeta::VectorIndexDropped { .. } => {
                unreachable!("`check` refuses records that are not context changes")
            }
        }
        info.updated_at_unix_ms = info.updated_at_unix_ms.max(at_unix_ms);
        self.infos[index] = info;
        Ok(())
    }

    /// Keeps the expiry index true as an entry goes from `old` to `new`.
    fn reindex_kv(
        &mut self,
        context_id: ContextId,
        key: &Bytes,
        old: Option<&KvValue>,
        new: Option<&KvValue>,
    ) {
        let Some(tenant_id) = self.get(context_id).map(|info| info.tenant_id) else {
            unreachable!("a key-value change names an existing context");
        };
        self.vector_indexes.reindex(
            tenant_id,
            context_id,
            key,
            old.and_then(|old| old.vectors.as_ref()),
            new.and_then(|new| new.vectors.as_ref()),
        );
        if let Some(old) = old.filter(|old| old.expires_at_unix_ms > 0) {
            let removed =
                self.kv_expiries
                    .remove(&(old.expires_at_unix_ms, context_id, key.clone()));
            assert!(
                removed.is_some(),
                "an expiring entry is in the expiry index"
            );
        }
        if let Some(new) = new.filter(|new| new.expires_at_unix_ms > 0) {
            self.kv_expiries
                .insert((new.expires_at_unix_ms, context_id, key.clone()));
        }
    }

    /// The shared allocation of a tag string.
    fn intern(&mut self, text: &str) -> Arc<str> {
        if let Some(shared) = self.strings.get(text) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(text);
        self.strings.insert(shared.clone(), shared.clone());
        shared
    }

    fn index(&mut self, key: &Arc<str>, value: &Arc<str>, context_id: ContextId) {
        self.tag_index
            .entry((key.clone(), value.clone()))
            .or_default()
            .insert(context_id);
    }

    fn unindex(&mut self, key: &Arc<str>, value: &Arc<str>, context_id: ContextId) {
        let pair = (key.clone(), value.clone());
        let now_empty = match self.tag_index.get_mut(&pair) {
            Some(set) => {
                set.remove(&context_id);
                set.is_empty()
            }
            None => false,
        };
        if now_empty {
            self.tag_index.remove(&pair);
        }
    }
}

/// Whether a new context may carry `name` and `tags`: the checks of `check`, for a context
/// that does not exist yet.
pub(crate) fn check_new(
    contexts: &Contexts,
    tenant_id: TenantId,
    name: Option<&str>,
    tags: &[(String, String)],
) -> Result<(), EngineError> {
    let empty = ContextInfo {
        tenant_id,
        ..ContextInfo::default()
    };
    if let Some(name) = name {
        check_name(contexts, ContextId(0), &empty, name)?;
    }
    let changes: Vec<_> = tags
        .iter()
        .map(|(key, value)| (key.clone(), Some(value.clone())))
        .collect();
    check_tags(&empty, &changes)
}

fn check_name(
    contexts: &Contexts,
    context_id: ContextId,
    info: &ContextInfo,
    name: &str,
) -> Result<(), EngineError> {
    if name.is_empty() {
        return Err(EngineError::InvalidArgument(
            "a context name is 1 to 256 bytes of UTF-8; this one is empty".into(),
        ));
    }
    if name.len() > CONTEXT_NAME_BYTES_MAX {
        return Err(EngineError::Limit {
            what: "a context name's bytes (1..=256)",
            limit: CONTEXT_NAME_BYTES_MAX,
        });
    }
    // Names do not change: said first, also when the new name is the context's own.
    if let Some(current) = &info.name {
        return Err(EngineError::InvalidArgument(format!(
            "context {context_id} is already named {current:?}; names do not change"
        )));
    }
    if let Some(owner) = contexts.by_name(info.tenant_id, name) {
        return Err(EngineError::NameTaken {
            name: name.to_owned(),
            context_id: owner,
        });
    }
    Ok(())
}

fn check_tags(info: &ContextInfo, changes: &[(String, Option<String>)]) -> Result<(), EngineError> {
    let mut tags: std::collections::BTreeMap<&str, &str> = info
        .tags
        .iter()
        .map(|(key, value)| (key.as_ref(), value.as_ref()))
        .collect();
    for (key, value) in changes {
        if key.is_empty() {
            return Err(EngineError::InvalidArgument(
                "a tag key is 1 to 64 bytes; this one is empty".into(),
            ));
        }
        if key.len() > TAG_KEY_BYTES_MAX {
            return Err(EngineError::Limit {
                what: "a tag key's bytes (1..=64)",
                limit: TAG_KEY_BYTES_MAX,
            });
        }
        match value {
            Some(value) if value.is_empty() => {
                return Err(EngineError::InvalidArgument(format!(
                    "a tag value is 1 to 1,024 bytes; the value of {key:?} is empty (remove \
                     the tag instead)"
                )));
            }
            Some(value) if value.len() > TAG_VALUE_BYTES_MAX => {
                return Err(EngineError::Limit {
                    what: "a tag value's bytes (1..=1024)",
                    limit: TAG_VALUE_BYTES_MAX,
                });
            }
            Some(value) => drop(tags.insert(key.as_str(), value.as_str())),
            None => drop(tags.remove(key.as_str())),
        }
    }
    if tags.len() > TAGS_PER_CONTEXT_MAX {
        return Err(EngineError::Limit {
            what: "tags per context",
            limit: TAGS_PER_CONTEXT_MAX,
        });
    }
    Ok(())
}
