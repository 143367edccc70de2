//! The model of spec §3: immutable turns and context heads, as the engine hands them out —
//! `Turn`, `AppendRequest<P>` (generic over its payload as it travels the pipeline),
//! `PageQuery`, `PageOptions`, `Page`, the `PayloadCache` a caller lends to reads, and the
//! answers of every call.

use bytes::Bytes;

use crate::format::turn_extras::TurnExtras;
use crate::format::turn_log::TurnRecord;
use crate::ids::{BlobHash, CodecTag, ContextId, TenantId, TurnId, TypeTag};

/// One immutable turn of the parent-pointer DAG.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Turn {
    pub turn_id: TurnId,
    /// `TurnId::NONE` for a root turn.
    pub parent_turn_id: TurnId,
    /// The context the turn was appended to (provenance; forks share turns across contexts).
    pub context_id: ContextId,
    /// Root depth is 0; otherwise parent depth + 1.
    pub depth: u32,
    pub type_tag: TypeTag,
    pub codec: CodecTag,
    pub payload_hash: BlobHash,
    /// Raw (uncompressed) payload length.
    pub payload_len: u32,
    /// Bit 0 SUMMARY (`format::turn_log::TURN_FLAG_SUMMARY`): everything before this turn is
    /// summarised in its payload.
    pub flags: u32,
    pub created_at_unix_ms: u64,
    /// The nearest turn at or above this one on its chain flagged SUMMARY (`NONE`: none): a
    /// window read starts there.
    pub summary_turn_id: TurnId,
    /// Whether the turn carries extras (key, labels, links): read them with
    /// `Engine::turn_extras`; pages return them.
    pub has_extras: bool,
    /// Redacted (issue 15, decision 0012): the turn has no payload any more, in every view;
    /// it reads with `payload_hash` = `BlobHash::EMPTY` and `payload_len` 0. Its place in the
    /// DAG, its key, labels and links stay.
    pub redacted: bool,
    /// The sequence number of the overlay this view shows (the patch whose payload it
    /// carries, or the redaction); 0: the turn as appended.
    pub overlay_seq: u64,
}

impl Turn {
    pub fn is_summary(&self) -> bool {
        self.flags & crate::format::turn_log::TURN_FLAG_SUMMARY != 0
    }
}

impl From<TurnRecord> for Turn {
    fn from(record: TurnRecord) -> Turn {
        Turn {
            turn_id: record.turn_id,
            parent_turn_id: record.parent_turn_id,
            context_id: record.context_id,
            depth: record.depth,
            type_tag: record.type_tag,
            codec: record.codec,
            payload_hash: record.payload_hash,
            payload_len: record.payload_len,
            flags: record.flags,
            created_at_unix_ms: record.created_at_unix_ms,
            summary_turn_id: record.summary_turn_id,
            has_extras: record.extras_len > 0,
            redacted: false,
            overlay_seq: 0,
        }
    }
}

/// A context: a mutable pointer to its head turn.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ContextHead {
    pub context_id: ContextId,
    /// `TurnId::NONE` while the context is empty.
    pub head_turn_id: TurnId,
    /// Depth of the head turn; 0 for an empty context.
    pub head_depth: u32,
}

/// How a request names a context: by ContextID or by its unique name.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum ContextRef {
    Id(ContextId),
    Name(String),
}

impl From<ContextId> for ContextRef {
    fn from(context_id: ContextId) -> ContextRef {
        ContextRef::Id(context_id)
    }
}

/// A context as agent frameworks see a thread: its head, name, tags and times.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ContextView {
    pub head: ContextHead,
    pub name: Option<String>,
    pub tags: std::collections::BTreeMap<String, String>,
    pub created_at_unix_ms: u64,
    /// The newest head move, tag or key-value change.
    pub updated_at_unix_ms: u64,
    /// Turns below this depth are no longer reachable through the context (issue 15's prune;
    /// 0: all).
    pub floor_depth: u32,
    /// The context's own time to live (0: none; the server's default may still apply).
    pub ttl_ms: u64,
    /// The tenant that owns it (decision 0032; `TenantId::OPERATOR` in a store without
    /// tenants).
    pub tenant_id: TenantId,
}

/// A new context: empty, forked from a turn, or cloned from another context.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct NewContext {
    /// The head: `TurnId::NONE` for an empty context, else a durable turn (a fork).
    pub base: TurnId,
    /// Copy this context's head, tags and key-value entries (O(its metadata); no payload is
    /// copied). `base` must then be `TurnId::NONE`.
    pub clone_from: Option<ContextRef>,
    pub name: Option<String>,
    pub tags: Vec<(String, String)>,
    /// With a name that exists: answer that context (created = false) instead of an error.
    pub get_or_create: bool,
}

/// Whose data an `Engine` handle sees (decision 0032 §2): the scope is the handle's, set once
/// (`Engine::scoped`), so no call through it can forget it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scope {
    /// The whole store: the handle `Engine::open` returns, for the store's own machinery
    /// (collection, the reaper, replication, backups, tools) and tests. Names resolve among
    /// the operator's; a context it creates is the operator's.
    Store,
    /// One tenant (the operator is `TenantId::OPERATOR`): another tenant's contexts, names
    /// and turns answer exactly as absent ones do.
    Tenant(TenantId),
}

impl Scope {
    /// The tenant whose names this scope resolves and whose contexts it creates.
    pub fn tenant_id(self) -> TenantId {
        match self {
            Scope::Store => TenantId::OPERATOR,
            Scope::Tenant(tenant_id) => tenant_id,
        }
    }

    /// Whether data owned by `owner` is visible in this scope.
    pub fn sees(self, owner: TenantId) -> bool {
        match self {
            Scope::Store => true,
            Scope::Tenant(tenant_id) => tenant_id == owner,
        }
    }
}

/// What creating a context produced.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Created {
    pub context: ContextView,
    /// False when `get_or_create` found the name taken and answered its context.
    pub created: bool,
}

/// A turn together with its payload bytes, when the read asked for them.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TurnWithPayload {
    pub turn: Turn,
    pub payload: Option<Bytes>,
}

/// The payload of an append: the bytes, the hash of a blob that is already stored, or the
/// bytes as a client compressed them.
#[derive(Clone, Debug)]
pub enum AppendPayload {
    Bytes(Bytes),
    StoredBlob(BlobHash),
    /// A zstd frame that inflates to `raw_len` bytes hashing to `hash` (issue 38, decision
    /// 0029): the client compressed where the bytes were made, so the server inflates and
    /// hashes (about a tenth of compressing's CPU) instead of compressing, and stores the
    /// frame as it came. Not trusted: a frame that does not inflate to exactly those bytes is
    /// refused (`HashMismatch`) before anything is stored. A blob already stored under
    /// `hash` is not inflated at all, as an append by hash would not be.
    Zstd {
        hash: BlobHash,
        raw_len: u32,
        frame: Bytes,
    },
}

/// Where a new turn hangs in the DAG.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Parent {
    /// The context's head (a chain grows).
    #[default]
    Head,
    /// No parent: a new root in the context.
    Root,
    /// A turn the context owns: appended to it, on its chain, or inherited by a fork or a
    /// clone (LangGraph's time travel: a new checkpoint after an old one).
    Turn(TurnId),
}

/// What a turn carries besides its payload (decision 0009). Limits in
/// `format::turn_extras`, each a typed error naming it.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct TurnOptions {
    pub parent: Parent,
    /// Unique within the context, inherited turns included (≤ 64 bytes): an append whose
    /// key exists answers that turn (`Appended::existing`) and stores nothing.
    pub key: Option<Bytes>,
    /// ≤ 16 pairs, ≤ 1 KiB together; the turn log filters by them.
    pub labels: Vec<(String, String)>,
    /// ≤ 8 turns of any context, each existing.
    pub links: Vec<TurnId>,
    /// Everything before this turn is summarised in its payload.
    pub summary: bool,
    /// The turn's vectors (decision 0033), searched by `Engine::vector_search_turns`.
    pub vectors: Option<TurnVectors>,
}

/// A turn's vectors: 1..=16, all of one index of the context's tenant.
#[derive(Clone, Debug)]
pub enum TurnVectors {
    /// As a caller gives them: the engine checks them against the index, stores them as one
    /// blob (durable before the turn that names it) and passes `Stored` on. None: the index
    /// is checked (NOT_FOUND when absent), and the turn has no vectors.
    Given {
        index: String,
        vectors: Vec<Vec<f32>>,
    },
    /// The stored blob: the engine's own form, refused from a caller.
    Stored(crate::format::context_meta::KvVectors),
}

/// Equal bit for bit (a NaN equals the same NaN), so that equality is an equivalence.
impl PartialEq for TurnVectors {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (
                TurnVectors::Given { index, vectors },
                TurnVectors::Given {
                    index: other_index,
                    vectors: other_vectors,
                },
            ) => {
                index == other_index
                    && vectors.len() == other_vectors.len()
                    && vectors.iter().zip(other_vectors).all(|(a, b)| {
                        a.len() == b.len()
                            && a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits())
                    })
            }
            (TurnVectors::Stored(a), TurnVectors::Stored(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for TurnVectors {}

/// Everything an append needs besides the engine. Callers send it with an `AppendPayload`;
/// inside the engine the same request travels on with its payload replaced by what the next
/// stage needs (see `pipeline`), so its fields are written once.
#[derive(Clone, Debug)]
pub struct AppendRequest<P = AppendPayload> {
    pub context_id: ContextId,
    /// Compare-and-set: append only if the head is still this turn (`TurnId::NONE` = empty).
    pub expected_head: Option<TurnId>,
    pub type_tag: TypeTag,
    pub codec: CodecTag,
    pub payload: P,
    pub options: TurnOptions,
}

impl<P> AppendRequest<P> {
    /// The request without its payload, and the payload.
    pub fn split(self) -> (AppendRequest<()>, P) {
        let AppendRequest {
            context_id,
            expected_head,
            type_tag,
            codec,
            payload,
            options,
        } = self;
        let request = AppendRequest {
            context_id,
            expected_head,
            type_tag,
            codec,
            payload: (),
            options,
        };
        (request, payload)
    }

    /// The same request with another payload.
    pub fn with_payload<Q>(self, payload: Q) -> AppendRequest<Q> {
        let (request, _) = self.split();
        AppendRequest {
            context_id: request.context_id,
            expected_head: request.expected_head,
            type_tag: request.type_tag,
            codec: request.codec,
            payload,
            options: request.options,
        }
    }
}

/// What an acknowledged (durable) append produced.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Appended {
    pub turn: Turn,
    /// True when the payload was already stored and no new blob was written for it.
    pub deduped: bool,
    /// True when the key was already there: `turn` is that earlier turn, nothing was written.
    pub existing: bool,
    /// The turn's key, labels and links.
    pub extras: TurnExtras,
}

/// A page of turns (oldest first) and the cursor for the next older page.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TurnPage {
    pub turns: Vec<TurnWithPayload>,
    /// Pass as `before` to read the next older page; `TurnId::NONE` when the root was reached.
    pub next_before: TurnId,
}

/// Which turns a page read returns, oldest first.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PageQuery {
    /// The `limit` newest turns of a context.
    Last { context_id: ContextId, limit: u32 },
    /// The `limit` turns of a context's chain older than `before` (a cursor from a page).
    Before {
        context_id: ContextId,
        before: TurnId,
        limit: u32,
    },
    /// The turns of a context's chain with depth in `from_depth..from_depth + limit`.
    RangeByDepth {
        context_id: ContextId,
        from_depth: u32,
        limit: u32,
    },
    /// The chain root → `turn_id`, the turns with depth in `from_depth..from_depth + limit`.
    Chain {
        turn_id: TurnId,
        from_depth: u32,
        limit: u32,
    },
}

impl PageQuery {
    pub fn limit(&self) -> u32 {
        match *self {
            PageQuery::Last { limit, .. }
            | PageQuery::Before { limit, .. }
            | PageQuery::RangeByDepth { limit, .. }
            | PageQuery::Chain { limit, .. } => limit,
        }
    }
}

/// Whether a read returns payloads, and in which form.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PayloadMode {
    /// Turns only.
    None,
    /// Raw payload bytes, verified against their hash.
    Raw,
    /// Raw bytes when cached or small enough to cache; larger ones as stored (possibly zstd),
    /// checksum-verified, for a caller that inflates and verifies them itself.
    RawOrStored,
}

/// How a page read returns its turns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PageOptions {
    pub payloads: PayloadMode,
    /// Payload bytes one page may carry. A page keeps at least one turn; cursor pages
    /// (`Last`, `Before`) keep their newest turns, depth windows their oldest.
    pub payload_bytes_max: u64,
    /// Which overlay view (decision 0012): `None` the latest; `Some(seq)` each turn as the
    /// overlays with sequence numbers up to `seq` leave it (a redaction applies to every
    /// view).
    pub as_of: Option<u64>,
}

impl PageOptions {
    /// Turns only.
    pub const TURNS: PageOptions = PageOptions {
        payloads: PayloadMode::None,
        payload_bytes_max: u64::MAX,
        as_of: None,
    };

    /// Turns with their raw payloads, however large the page.
    pub const RAW_PAYLOADS: PageOptions = PageOptions {
        payloads: PayloadMode::Raw,
        payload_bytes_max: u64::MAX,
        as_of: None,
    };
}

/// A payload as a read returns it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Payload {
    /// The payload's bytes, verified against its hash.
    Raw(Bytes),
    /// The stored form (`PayloadMode::RawOrStored` only).
    Stored(StoredBlob),
}

/// One turn of a page, with its payload when asked for.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PageEntry {
    pub turn: Turn,
    pub payload: Option<Payload>,
    /// The turn's key, labels and links (empty when it has none).
    pub extras: TurnExtras,
}

/// A page of turns, oldest first.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Page {
    pub entries: Vec<PageEntry>,
    /// Cursor pages: pass as `before` to read the next older page; `TurnId::NONE` when the
    /// root was reached, and for depth windows.
    pub next_before: TurnId,
    /// Depth of the chain's tip: the context's head (read once, with the walk), or the turn
    /// named by `Chain`. 0 for an empty context.
    pub tip_depth: u32,
}

/// Recently read or written payloads that a caller keeps (the server keeps one per network
/// core). Reads look payloads up here first and put what they inflated and verified here, so
/// only verified bytes enter it.
pub trait PayloadCache {
    fn get(&mut self, hash: &BlobHash) -> Option<Bytes>;
    /// Payloads larger than this are not cached (and go as stored with `RawOrStored`).
    fn entry_bytes_max(&self) -> u64;
    fn insert(&mut self, hash: BlobHash, payload: &Bytes);
}

/// No cache: every payload is read from its pack.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoPayloadCache;

impl PayloadCache for NoPayloadCache {
    fn get(&mut self, _hash: &BlobHash) -> Option<Bytes> {
        None
    }

    fn entry_bytes_max(&self) -> u64 {
        0
    }

    fn insert(&mut self, _hash: BlobHash, _payload: &Bytes) {}
}

/// A blob as it sits in its pack: possibly compressed. Lets a server ship the stored bytes and
/// leave decompression (and hash verification) to the client.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StoredBlob {
    /// The client's hash (through a tenant's handle; the address in the store's records).
    pub hash: BlobHash,
    pub compression: crate::format::pack::Compression,
    pub raw_len: u32,
    pub bytes: Bytes,
    /// Whose blob it is (its pack header's).
    pub tenant_id: TenantId,
}

/// Counters of the whole store, as of the last durable batch of each actor.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct StoreStats {
    pub turns: u64,
    pub contexts: u64,
    pub blobs: u64,
    /// Sum of payload lengths over all turns (what the store would hold without dedup).
    pub logical_bytes: u64,
    /// Sum of raw lengths of distinct blobs.
    pub unique_bytes: u64,
    /// Bytes of pack records on disk (headers, compressed bodies, padding).
    pub stored_bytes: u64,
    /// Appends whose payload was already stored.
    pub dedup_hits: u64,
    /// Whether the store refuses writes: a failed fsync, a standby, a fenced primary, or a
    /// primary whose ack gate is closed (decision 0031 §6; it may open again).
    pub read_only: bool,
    /// Pack bytes (records with headers) of blobs the last garbage collection found
    /// reachable; 0 before the first collection since open.
    pub live_bytes: u64,
    /// Pack bytes of unreachable blobs still on disk, as of the last collection (in packs
    /// below the compaction threshold, or swept but not yet compacted); 0 before it.
    pub dead_bytes: u64,
    /// Garbage collections completed since open.
    pub gc_runs: u64,
    /// Bytes garbage collection gave back to the file system since open (pack files shrunk).
    pub bytes_reclaimed_total: u64,
    /// Blobs stored as chunks and a manifest (issue 16), and the payload bytes they stand for.
    pub chunked_blobs: u64,
    pub chunked_payload_bytes: u64,
    /// Chunks chunked writes stored since open, and those they found stored already (dedup
    /// hits) with their raw bytes: what chunking saved.
    pub chunks_written: u64,
    pub chunk_dedup_hits: u64,
    pub chunk_bytes_saved: u64,
}

/// What a patch or a redaction produced (`Engine::patch_turn`, `Engine::redact_turn`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Overlaid {
    /// The turn as it reads now (the patch's payload, or redacted).
    pub turn: Turn,
    /// The overlay's sequence number: pass it as `as_of` to read this view later.
    pub overlay_seq: u64,
}

/// What a purge did (`Engine::purge_blob`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Purged {
    pub payload_hash: BlobHash,
    /// Turns this purge redacted (turns redacted before are not counted again).
    pub turns_redacted: u64,
    /// The purge record's sequence number (after every redaction it wrote).
    pub overlay_seq: u64,
}

/// What one garbage collection did (`Engine::gc`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct GcReport {
    /// Turns found unreachable and recorded as collected in this round.
    pub turns_dead: u64,
    /// Blobs removed from the store (their bytes leave the disk with their pack's compaction).
    pub blobs_dead: u64,
    /// Bytes the pack files and `turns.log` (with its compacted base) shrank by.
    pub bytes_reclaimed: u64,
    /// Of those, the log's: collected turns' records a log compaction dropped.
    pub log_bytes_reclaimed: u64,
    /// Bytes of live records the compactions copied (the collector's write volume).
    pub bytes_rewritten: u64,
    /// Packs rewritten with only their live records.
    pub packs_compacted: u32,
    /// Pack bytes of reachable blobs after the round.
    pub live_bytes: u64,
    /// Pack bytes of unreachable blobs left on disk (packs under the compaction threshold).
    pub dead_bytes: u64,
    pub duration_ms: u64,
}

/// What a shard made of ingested pack bytes (a standby, issue 31).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IngestedPack {
    /// Records indexed (new blobs readable).
    pub blobs: u64,
    /// Bytes written (bytes the shard held already, byte for byte, are skipped).
    pub bytes_written: u64,
    /// A whole new version of a sealed pack (a collection rewrote it on the primary) differs
    /// from the shard's and was not installed (not asked to: `Engine::install_pack` does,
    /// once the cut's log slots are applied); the shard's version is a superset meanwhile.
    pub kept_own_version: bool,
    /// Bytes at the end of a piece that begin a record they do not hold whole, not taken: a
    /// cut shipped in several segments may split a record between two of them. The caller
    /// sends them again, followed by the rest (issue 47; a standby stalled on them before).
    pub bytes_left: u64,
}

/// What a sequencer made of ingested `turns.log` slots (a standby, issue 31).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IngestedLog {
    pub records: u64,
    pub turns: u64,
    /// The durable watermark after them (the last record id).
    pub log_records: u64,
}
