//! What the client hands out: turns with verified payloads, heads, pages, contexts with their
//! names, tags and key-value entries (protocol version 2), and the names of the caller codec
//! tags the CLI understands.

use std::collections::BTreeMap;

use bytes::Bytes;
use ctxstore_protocol::{
    BackupWire, ContextHeadWire, ContextInfoWire, ExtrasWire, GcStatsWire, GcWire, KvItemExWire,
    KvItemWire, ListCursorWire, LogCursorWire, OverlayWire, ParentWire, PayloadEncoding,
    PayloadSpec, PayloadWire, StatsWire, TurnSpec, TurnWire,
};

use crate::error::ClientError;

/// A BLAKE3-256 payload hash: the one hash type of the engine, the protocol and the clients
/// (`ctxstore-vocab`).
pub use ctxstore_protocol::BlobHash;

/// Parses 64 hex digits (either case) as a BlobHash, or says what is wrong.
pub fn blob_hash_from_hex(text: &str) -> Result<BlobHash, ClientError> {
    BlobHash::from_hex(text).ok_or_else(|| {
        ClientError::InvalidArgument(format!("{text:?} is not a hash of 64 hex digits"))
    })
}

/// A turn; `payload` is set when it was asked for, and then verified against its hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    pub turn_id: u64,
    pub parent_turn_id: u64,
    pub context_id: u64,
    pub depth: u32,
    pub type_tag: u64,
    pub codec: u32,
    pub payload_hash: BlobHash,
    pub payload_len: u32,
    pub flags: u32,
    pub created_at_unix_ms: u64,
    pub payload: Option<Bytes>,
    /// The turn's payload was taken away (`Client::redact_turn`, `Client::purge_blob`): its
    /// payload is empty, `payload_hash` is BLAKE3 of no bytes and `payload_len` 0, in every
    /// view. Known on reads through an overlay view (`Client::as_of`); `false` otherwise.
    pub redacted: bool,
    /// The sequence number of the overlay (patch or redaction) this turn shows; 0: the turn
    /// as appended, or a read without an overlay view (`Client::as_of`).
    pub overlay_seq: u64,
}

impl Turn {
    pub(crate) fn from_wire(turn: &TurnWire, payload: Option<Bytes>) -> Turn {
        Turn {
            turn_id: turn.turn_id,
            parent_turn_id: turn.parent_turn_id,
            context_id: turn.context_id,
            depth: turn.depth,
            type_tag: turn.type_tag,
            codec: turn.codec,
            payload_hash: turn.payload_hash,
            payload_len: turn.payload_len,
            flags: turn.flags,
            created_at_unix_ms: turn.created_at_unix_ms,
            payload,
            redacted: false,
            overlay_seq: 0,
        }
    }

    /// Sets the overlay state an overlaid answer gave this turn; a redacted turn must name
    /// no bytes (`Protocol` otherwise).
    pub(crate) fn set_overlay(&mut self, overlay: OverlayWire) -> Result<(), ClientError> {
        if overlay.redacted && (self.payload_len != 0 || self.payload_hash != BlobHash::of(&[])) {
            return Err(ClientError::Protocol(format!(
                "turn {} is redacted but names a payload of {} bytes",
                self.turn_id, self.payload_len
            )));
        }
        self.redacted = overlay.redacted;
        self.overlay_seq = overlay.overlay_seq;
        Ok(())
    }

    /// A summary turn: everything before it on its chain is summarised in its payload, and a
    /// window (`Client::window`) starts here (TURN flags bit 0, protocol version 2).
    pub fn summary(&self) -> bool {
        self.flags & TURN_FLAG_SUMMARY != 0
    }
}

/// Bit 0 of a turn's `flags`: a summary turn (decision 0009).
pub const TURN_FLAG_SUMMARY: u32 = 1 << 0;

/// A turn with its key, labels and links, as the version-2 calls return it (`append_turns`,
/// `turn_by_key`, `turn_info`, `read_page`, `window`, `turn_log`, `find_turns`, …). The
/// version-1 reads (`turn`, `last`, `before`, `range`, `chain`, `replay`) return a plain
/// [`Turn`]: their messages do not carry these fields, so their absence there says nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnInfo {
    /// The turn itself: ids, depth, tags, payload hash, `summary()`, `context_id` (the
    /// context it was appended to) and, when asked for, the verified payload.
    pub turn: Turn,
    /// Its key, unique within its context (`None`: it has none).
    pub key: Option<Bytes>,
    /// Its labels, by key.
    pub labels: BTreeMap<String, String>,
    /// The turns it refers to (in any context), in the order given at append.
    pub links: Vec<u64>,
}

impl TurnInfo {
    pub(crate) fn new(turn: Turn, extras: ExtrasWire) -> TurnInfo {
        TurnInfo {
            turn,
            key: (!extras.key.is_empty()).then_some(extras.key),
            labels: extras.labels.into_iter().collect(),
            links: extras.links,
        }
    }

    pub(crate) fn from_wire(
        turn: &TurnWire,
        extras: ExtrasWire,
        payload: Option<Bytes>,
    ) -> TurnInfo {
        TurnInfo::new(Turn::from_wire(turn, payload), extras)
    }

    /// Whether the turn carries `key = value`.
    pub fn has_label(&self, key: &str, value: &str) -> bool {
        self.labels.get(key).is_some_and(|have| have == value)
    }
}

/// Where a new turn hangs (`NewTurn::parent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Parent {
    /// The context's head; for the second and later turns of a batch, the turn before it.
    #[default]
    Head,
    /// Nothing: the turn starts a new chain (depth 0) and becomes the head.
    Root,
    /// This turn, which the context must own (appended to it, on its chain, or inherited
    /// through a fork or a clone; else `ErrorCode::InvalidArgument`, and `NotFound` for no
    /// such turn): LangGraph's time travel. The head moves to the new turn.
    Turn(u64),
}

/// A new turn's payload: its bytes, or the hash of a blob already stored (nothing uploaded;
/// `ErrorCode::NotFound` when the store does not have it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NewPayload {
    Bytes(Bytes),
    Hash(BlobHash),
}

/// One turn for `append_turn` / `append_turns` (protocol version 2): a payload and options.
/// Defaults: type tag 0, codec 0 (raw), the head as parent, no key, labels or links, not a
/// summary. Limits (checked by the server: `ErrorCode::TooLarge` naming the limit, nothing
/// written): a key of 1..=64 bytes, at most 16 labels with keys of 1..=64 bytes and keys and
/// values 1,024 bytes together, at most 8 links (each an existing turn: `NotFound`).
///
/// ```
/// use ctxstore_client::{NewTurn, Parent};
/// let turn = NewTurn::bytes(&b"{\"role\":\"tool\"}"[..])
///     .codec(1)
///     .parent(Parent::Turn(42))
///     .key("checkpoint-7")
///     .label("run_id", "r-1")
///     .link(17)
///     .summary(false);
/// assert_eq!(turn.labels, [("run_id".to_string(), "r-1".to_string())]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTurn {
    pub payload: NewPayload,
    pub type_tag: u64,
    pub codec: u32,
    pub parent: Parent,
    /// Idempotency key: when the context already has a turn with this key (its own or one it
    /// inherited), nothing is written and that turn comes back with `existing = true`, so an
    /// append retried after a lost answer is stored once.
    pub key: Option<Bytes>,
    /// Label pairs; a key may appear once (the server sorts them).
    pub labels: Vec<(String, String)>,
    /// Turns this one refers to, in any context (a call stack's parent and child threads).
    pub links: Vec<u64>,
    /// Everything before this turn on its chain is summarised in its payload: windows start
    /// here.
    pub summary: bool,
}

impl NewTurn {
    /// A turn carrying these bytes.
    pub fn bytes(payload: impl Into<Bytes>) -> NewTurn {
        NewTurn::with_payload(NewPayload::Bytes(payload.into()))
    }

    /// A turn whose payload is a blob the store already has.
    pub fn by_hash(hash: BlobHash) -> NewTurn {
        NewTurn::with_payload(NewPayload::Hash(hash))
    }

    fn with_payload(payload: NewPayload) -> NewTurn {
        NewTurn {
            payload,
            type_tag: 0,
            codec: 0,
            parent: Parent::Head,
            key: None,
            labels: Vec::new(),
            links: Vec::new(),
            summary: false,
        }
    }

    pub fn type_tag(mut self, type_tag: u64) -> NewTurn {
        self.type_tag = type_tag;
        self
    }

    pub fn codec(mut self, codec: u32) -> NewTurn {
        self.codec = codec;
        self
    }

    pub fn parent(mut self, parent: Parent) -> NewTurn {
        self.parent = parent;
        self
    }

    pub fn key(mut self, key: impl Into<Bytes>) -> NewTurn {
        self.key = Some(key.into());
        self
    }

    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> NewTurn {
        self.labels.push((key.into(), value.into()));
        self
    }

    pub fn link(mut self, turn: u64) -> NewTurn {
        self.links.push(turn);
        self
    }

    pub fn summary(mut self, summary: bool) -> NewTurn {
        self.summary = summary;
        self
    }

    /// The extras the server stores for this turn: an empty key is no key, labels sorted.
    pub(crate) fn extras(&self) -> ExtrasWire {
        let mut labels = self.labels.clone();
        labels.sort();
        ExtrasWire {
            key: self.key.clone().unwrap_or_default(),
            labels,
            links: self.links.clone(),
        }
    }

    pub(crate) fn into_wire(self) -> TurnSpec {
        TurnSpec {
            parent: match self.parent {
                Parent::Head => ParentWire::Head,
                Parent::Root => ParentWire::Root,
                Parent::Turn(turn) => ParentWire::Turn(turn),
            },
            type_tag: self.type_tag,
            codec: self.codec,
            summary: self.summary,
            extras: ExtrasWire {
                key: self.key.unwrap_or_default(),
                labels: self.labels,
                links: self.links,
            },
            payload: match self.payload {
                NewPayload::Bytes(bytes) => PayloadSpec::Bytes(bytes),
                NewPayload::Hash(hash) => PayloadSpec::Hash(hash),
            },
        }
    }
}

/// What `append_turn` / `append_turns` produced for one turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendedTurn {
    /// The new turn with its key, labels and links; with `existing`, the earlier turn that has
    /// the key, as it was stored then.
    pub turn: TurnInfo,
    /// The payload was already stored; no new blob was written.
    pub deduped: bool,
    /// The key was already in the context: nothing was written for this turn.
    pub existing: bool,
}

/// Where a `turn_log` page ended: pass it back as it is for the next page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogCursor(pub(crate) LogCursorWire);

/// A page of a context's turn log, newest first across its branches, then what it inherited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogPage {
    pub turns: Vec<TurnInfo>,
    /// `None` when the log is done. A page may hold fewer turns than asked, even none, while
    /// more match (the server looks at a bounded number of turns per page): follow the cursor,
    /// not the count.
    pub next_cursor: Option<LogCursor>,
}

/// A page of turns with their extras, oldest first (`read_page`, `window`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnPage {
    pub turns: Vec<TurnInfo>,
    /// For LAST, BEFORE and WINDOW: the oldest turn returned, to pass as `before` for the next
    /// older page (`PageKind::Before`); 0 when the page reached a root (and for RANGE).
    pub next_before: u64,
    /// Depth of the context's head when the page was read.
    pub tip_depth: u32,
}

/// A page of `find_turns`, newest first, without payloads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundPage {
    pub turns: Vec<TurnInfo>,
    /// Pass as `before` for the next older page; 0 when there are no more.
    pub next_before: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextHead {
    pub context_id: u64,
    /// 0 while the context is empty.
    pub head_turn_id: u64,
    pub head_depth: u32,
}

impl From<ContextHeadWire> for ContextHead {
    fn from(head: ContextHeadWire) -> Self {
        ContextHead {
            context_id: head.context_id,
            head_turn_id: head.head_turn_id,
            head_depth: head.head_depth,
        }
    }
}

/// A context as an agent thread sees it: its head, its unique name (if it has one), its tags
/// and its times (protocol version 2: CTX_OPEN, CTX_SHOW, CTX_TAG, CTX_NAME, CTX_LIST).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextInfo {
    pub context_id: u64,
    /// 0 while the context is empty.
    pub head_turn_id: u64,
    pub head_depth: u32,
    /// `None` until the context is named (at creation or with `name_context`).
    pub name: Option<String>,
    pub tags: BTreeMap<String, String>,
    pub created_at_unix_ms: u64,
    /// The last head move, tag or key-value change.
    pub updated_at_unix_ms: u64,
}

impl ContextInfo {
    /// The head part alone (what GET_HEAD answers).
    pub fn head(&self) -> ContextHead {
        ContextHead {
            context_id: self.context_id,
            head_turn_id: self.head_turn_id,
            head_depth: self.head_depth,
        }
    }

    pub(crate) fn from_wire(info: ContextInfoWire) -> ContextInfo {
        ContextInfo {
            context_id: info.head.context_id,
            head_turn_id: info.head.head_turn_id,
            head_depth: info.head.head_depth,
            name: info.name,
            tags: info.tags.into_iter().collect(),
            created_at_unix_ms: info.created_at_unix_ms,
            updated_at_unix_ms: info.updated_at_unix_ms,
        }
    }
}

/// A context with its retention settings (protocol version 2, issue 15): what
/// `delete_context` (the context as it was just before), `prune_context`, `set_context_ttl`
/// (after the change) and `context_retention` return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextRetention {
    pub context: ContextInfo,
    /// Turns of depth below this are no longer read through the context (0: none pruned).
    pub floor_depth: u32,
    /// The context's own time to live in milliseconds: once it has not been updated (head
    /// move, tag or key-value change) for this long, the server deletes it. `None` when the
    /// context has none of its own (the server's `--context-ttl` may still apply).
    pub ttl_ms: Option<u64>,
}

impl ContextRetention {
    /// `ttl_ms` as a `Duration`.
    pub fn ttl(&self) -> Option<std::time::Duration> {
        self.ttl_ms.map(std::time::Duration::from_millis)
    }

    pub(crate) fn from_wire(info: ContextInfoWire, floor_depth: u32, ttl_ms: u64) -> Self {
        ContextRetention {
            context: ContextInfo::from_wire(info),
            floor_depth,
            ttl_ms: (ttl_ms > 0).then_some(ttl_ms),
        }
    }
}

/// What `backup` wrote: a consistent copy of the store, on the server's host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupReport {
    /// Where the copy is (a path on the server's host).
    pub backup_dir: String,
    /// Turn records in the copy: everything acknowledged before the backup started, and
    /// possibly more.
    pub turns: u64,
    /// Blob records in the copy.
    pub blobs: u64,
    /// Bytes of the copy: written plus hard-linked.
    pub bytes: u64,
    /// Of `bytes`, those hard-linked (sealed packs on the same file system as the store).
    pub linked_bytes: u64,
    /// How long the server took.
    pub duration_ms: u64,
}

impl From<BackupWire> for BackupReport {
    fn from(wire: BackupWire) -> Self {
        BackupReport {
            backup_dir: wire.dir,
            turns: wire.turns,
            blobs: wire.blobs,
            bytes: wire.bytes,
            linked_bytes: wire.linked_bytes,
            duration_ms: wire.duration_ms,
        }
    }
}

/// What `Client::patch_turn` did: the turn reads the new payload from `overlay_seq` on;
/// reads in an older view (`Client::as_of`) still see the payload it had then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patched {
    pub turn_id: u64,
    /// The patch's sequence number (monotonic across the store).
    pub overlay_seq: u64,
    /// BLAKE3 of the new payload.
    pub payload_hash: BlobHash,
    pub payload_len: u32,
}

/// What `Client::redact_turn` did: the turn has no payload any more, in every view; its
/// bytes leave the disk at the next garbage collection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Redacted {
    pub turn_id: u64,
    /// The redaction's sequence number.
    pub overlay_seq: u64,
}

/// What `Client::purge_blob` did: every turn naming the blob is redacted and reads of the
/// blob by hash are `NotFound`; its bytes leave the disk at the next garbage collection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Purged {
    pub payload_hash: BlobHash,
    /// Turns this purge redacted (those redacted before are not counted).
    pub turns_redacted: u64,
    /// The purge record's sequence number.
    pub overlay_seq: u64,
}

/// One chunk of a payload stored as chunks (`Client::put_chunked`): BLAKE3 of its bytes and
/// their length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkRef {
    pub hash: BlobHash,
    pub len: u32,
}

/// What `Client::put_chunked` stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkedStored {
    /// BLAKE3 of the whole payload (as for any blob): append it with `append_by_hash`.
    pub payload_hash: BlobHash,
    pub payload_len: u64,
    /// The payload was stored before this call (nothing new was written).
    pub already_stored: bool,
}

/// What `gc` did: one garbage collection on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GcReport {
    /// Turns found unreachable and collected in this round (`NotFound` from then on).
    pub turns_dead: u64,
    /// Blobs removed from the store in this round.
    pub blobs_dead: u64,
    /// Bytes the pack files shrank by.
    pub bytes_reclaimed: u64,
    /// Packs rewritten with only their live records.
    pub packs_compacted: u32,
    /// Pack bytes (records with headers) of reachable blobs after the round.
    pub live_bytes: u64,
    /// Pack bytes of unreachable blobs still on disk (in packs below the server's
    /// `--gc-pack-dead-percent`).
    pub dead_bytes: u64,
    /// How long the server took.
    pub duration_ms: u64,
}

impl From<GcWire> for GcReport {
    fn from(wire: GcWire) -> Self {
        GcReport {
            turns_dead: wire.turns_dead,
            blobs_dead: wire.blobs_dead,
            bytes_reclaimed: wire.bytes_reclaimed,
            packs_compacted: wire.packs_compacted,
            live_bytes: wire.live_bytes,
            dead_bytes: wire.dead_bytes,
            duration_ms: wire.duration_ms,
        }
    }
}

/// The store's and the server's figures (`stats`). The garbage collector's four are `None`
/// from a server that does not report them (protocol version 1, or a version-2 server older
/// than garbage collection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Stats {
    pub turns: u64,
    pub contexts: u64,
    /// Distinct blobs.
    pub blobs: u64,
    /// Sum of payload lengths over all turns (the size without dedup).
    pub logical_bytes: u64,
    /// Sum of raw lengths of distinct blobs.
    pub unique_bytes: u64,
    /// Pack bytes on disk.
    pub stored_bytes: u64,
    /// Appends whose payload was already stored.
    pub dedup_hits: u64,
    /// The store refuses writes (a failed fsync).
    pub read_only: bool,
    /// Open connections.
    pub connections: u64,
    pub requests_total: u64,
    pub errors_total: u64,
    pub uptime_ms: u64,
    /// Pack bytes of blobs the last garbage collection found reachable (0 before the first
    /// since the server started).
    pub live_bytes: Option<u64>,
    /// Pack bytes of unreachable blobs still on disk, as of the last collection.
    pub dead_bytes: Option<u64>,
    /// Garbage collections completed since the server started.
    pub gc_runs: Option<u64>,
    /// Bytes garbage collection gave back to the file system since the server started.
    pub bytes_reclaimed_total: Option<u64>,
}

impl Stats {
    pub(crate) fn from_wire(wire: StatsWire, gc: Option<GcStatsWire>) -> Self {
        Stats {
            turns: wire.turns,
            contexts: wire.contexts,
            blobs: wire.blobs,
            logical_bytes: wire.logical_bytes,
            unique_bytes: wire.unique_bytes,
            stored_bytes: wire.stored_bytes,
            dedup_hits: wire.dedup_hits,
            read_only: wire.read_only,
            connections: wire.connections,
            requests_total: wire.requests_total,
            errors_total: wire.errors_total,
            uptime_ms: wire.uptime_ms,
            live_bytes: gc.map(|gc| gc.live_bytes),
            dead_bytes: gc.map(|gc| gc.dead_bytes),
            gc_runs: gc.map(|gc| gc.gc_runs),
            bytes_reclaimed_total: gc.map(|gc| gc.bytes_reclaimed_total),
        }
    }
}

/// What `open_context` produced: the context, and whether this call created it (`false`
/// when `get_or_create` found the name taken and answered the context that has it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    pub context: ContextInfo,
    pub created: bool,
}

/// The options of `open_context`: a new context, empty or with its head at `base_turn_id`,
/// optionally named and tagged. Limits (the server answers TOO_LARGE naming the one passed):
/// a name of 1..=256 bytes, at most 32 tags, tag keys of 1..=64 bytes, values of 1..=1024 bytes.
///
/// ```
/// use ctxstore_client::NewContext;
/// let new = NewContext::new().name("thread-42").tag("status", "idle").get_or_create(true);
/// assert_eq!(new.name.as_deref(), Some("thread-42"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewContext {
    /// The head: 0 for an empty context, else an existing turn (like `create_context_from`).
    pub base_turn_id: u64,
    /// A unique name; a taken name is `ErrorCode::AlreadyExists` (its owner's ContextID in
    /// the error's `detail`) unless `get_or_create`.
    pub name: Option<String>,
    pub tags: BTreeMap<String, String>,
    /// With a name that is taken: answer that context (`Opened::created == false`, its
    /// tags and head as they are: `base_turn_id` and `tags` are not applied) instead of
    /// ALREADY_EXISTS.
    pub get_or_create: bool,
}

impl NewContext {
    pub fn new() -> NewContext {
        NewContext::default()
    }

    /// Head at this turn instead of empty.
    pub fn from_turn(mut self, turn: u64) -> NewContext {
        self.base_turn_id = turn;
        self
    }

    pub fn name(mut self, name: impl Into<String>) -> NewContext {
        self.name = Some(name.into());
        self
    }

    pub fn tag(mut self, key: impl Into<String>, value: impl Into<String>) -> NewContext {
        self.tags.insert(key.into(), value.into());
        self
    }

    pub fn get_or_create(mut self, get_or_create: bool) -> NewContext {
        self.get_or_create = get_or_create;
        self
    }
}

/// Which contexts `list_contexts` returns: every condition holds (tag equalities, a name
/// prefix, bounds on `updated_at_unix_ms`, exclusive). With a tag or a name prefix the server
/// answers from its indexes; with time bounds alone it walks every context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextQuery {
    pub tags: BTreeMap<String, String>,
    /// Names starting with this; pages then go in name order (else in ContextID order).
    pub name_prefix: Option<String>,
    /// Only contexts updated after this time (exclusive; must be > 0 when set).
    pub updated_after_unix_ms: Option<u64>,
    /// Only contexts updated before this time (exclusive; must be > 0 when set).
    pub updated_before_unix_ms: Option<u64>,
    /// Contexts per page, 1..=`ContextQuery::PAGE_LIMIT_MAX` (default: the maximum).
    pub page_limit: u32,
}

impl Default for ContextQuery {
    fn default() -> Self {
        ContextQuery {
            tags: BTreeMap::new(),
            name_prefix: None,
            updated_after_unix_ms: None,
            updated_before_unix_ms: None,
            page_limit: ContextQuery::PAGE_LIMIT_MAX,
        }
    }
}

impl ContextQuery {
    /// The server's most contexts per CTX_LIST page.
    pub const PAGE_LIMIT_MAX: u32 = 1000;

    pub fn new() -> ContextQuery {
        ContextQuery::default()
    }

    pub fn tag(mut self, key: impl Into<String>, value: impl Into<String>) -> ContextQuery {
        self.tags.insert(key.into(), value.into());
        self
    }

    pub fn name_prefix(mut self, prefix: impl Into<String>) -> ContextQuery {
        self.name_prefix = Some(prefix.into());
        self
    }

    pub fn updated_after(mut self, unix_ms: u64) -> ContextQuery {
        self.updated_after_unix_ms = Some(unix_ms);
        self
    }

    pub fn updated_before(mut self, unix_ms: u64) -> ContextQuery {
        self.updated_before_unix_ms = Some(unix_ms);
        self
    }

    pub fn page_limit(mut self, page_limit: u32) -> ContextQuery {
        self.page_limit = page_limit;
        self
    }
}

/// Where a page of `list_contexts` ended: pass it back as it is for the next page. (By
/// ContextID, or by name when the query has a name prefix; either way each context that
/// matches throughout is returned once, whatever changes between pages.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListCursor(pub(crate) ListCursorWire);

/// A page of contexts, and where the next begins (`None`: no more match).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextListPage {
    pub contexts: Vec<ContextInfo>,
    pub next_cursor: Option<ListCursor>,
}

/// A key-value entry of a context, without its value (read that with `kv_get`, or with
/// `blob(value_hash)`: values are blobs, equal values stored once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvItem {
    pub key: Bytes,
    pub value_hash: BlobHash,
    pub value_len: u32,
    /// Milliseconds the entry lives after its put or last refresh (0: for ever, or read with
    /// a version-2 KV_LIST, which does not say).
    pub ttl_ms: u64,
    /// When it expires (unix ms; 0: never, or not said).
    pub expires_at_unix_ms: u64,
}

impl KvItem {
    pub(crate) fn from_wire(item: KvItemWire) -> KvItem {
        KvItem {
            key: item.key,
            value_hash: item.value_hash,
            value_len: item.value_len,
            ttl_ms: 0,
            expires_at_unix_ms: 0,
        }
    }

    pub(crate) fn from_wire_ex(item: KvItemExWire) -> KvItem {
        KvItem {
            key: item.key,
            value_hash: item.value_hash,
            value_len: item.value_len,
            ttl_ms: item.ttl_ms,
            expires_at_unix_ms: item.expires_at_unix_ms,
        }
    }
}

/// A key-value entry read with its value (`kv_get_ex`), verified against its hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvValue {
    pub value_hash: BlobHash,
    pub value: Bytes,
    /// Milliseconds the entry lives after its put or last refresh (0: for ever).
    pub ttl_ms: u64,
    /// When it expires (unix ms; 0: never), after the refresh if one was asked.
    pub expires_at_unix_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appended {
    pub turn: Turn,
    /// The payload was already stored; no new blob was written.
    pub deduped: bool,
}

/// Turns oldest first, and where to continue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    pub turns: Vec<Turn>,
    /// For GET_LAST / GET_BEFORE: pass as `before` for the next older page; 0 at the root.
    pub next_before: u64,
    /// Depth of the chain's tip (the context's head, or the chain's turn).
    pub tip_depth: u32,
}

/// When the server acknowledges a write (decision 0031 §3, §11): the frame flag `ACK_AFTER`
/// (protocol version 4) on the writes that take it — the appends (`append`, `append_by_hash`,
/// `append_turn`, `append_turns`; a chunked append's flag is on its final append, whose cut
/// holds the chunks too), `seal_stream`, `kv_put` and `kv_put_ex`. Set per handle
/// (`Client::with_durability`) or for a whole client (`ClientConfig::durability`).
///
/// Anything but `Default` on a version-1..3 connection is `ClientError::Unsupported`,
/// refused before sending.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// No flag: the server's `--ack-after` (`local` unless its operator chose `remote`).
    #[default]
    Default,
    /// Once the write is durable on the server's disk (fdatasync): what every older write gets.
    Local,
    /// Once the object store holds it too (the server's `--replicate-to`): it survives the
    /// loss of the server's host. A server without a replica refuses it (INVALID_ARGUMENT,
    /// nothing written); one whose object store does not confirm in time (its
    /// `--remote-ack-timeout`) answers UNCONFIRMED (`ClientError::is_unconfirmed`): the write
    /// is durable there but not confirmed off-host.
    Remote,
}

impl Durability {
    /// The frame flag's value: `None` for `Default` (no flag).
    pub fn ack_after(self) -> Option<ctxstore_protocol::AckAfter> {
        match self {
            Durability::Default => None,
            Durability::Local => Some(ctxstore_protocol::AckAfter::Local),
            Durability::Remote => Some(ctxstore_protocol::AckAfter::Remote),
        }
    }

    /// As the CLI and the load generator name it (`--durability`): `default`, `local`,
    /// `remote`.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Default => "default",
            Durability::Local => "local",
            Durability::Remote => "remote",
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = ClientError;

    /// `local` or `remote` (`default` too: no flag).
    fn from_str(text: &str) -> Result<Durability, ClientError> {
        match text {
            "default" => Ok(Durability::Default),
            "local" => Ok(Durability::Local),
            "remote" => Ok(Durability::Remote),
            other => Err(ClientError::InvalidArgument(format!(
                "durability {other:?}: local or remote"
            ))),
        }
    }
}

/// Which payloads a client checks against their BLAKE3 hash (decision 0015). Every payload's
/// length is checked, and every zstd payload is inflated and hashed here whatever this says:
/// the server never hashed those bytes. A raw payload was hashed by the server when it read it
/// (its cache holds only checked bytes), so hashing it again pays only where the bytes cross
/// something that can corrupt them unnoticed: a network (TCP's 16-bit checksum).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VerifyPayloads {
    /// Raw payloads are hashed only when the connected server is not on a loopback address.
    #[default]
    WhenRemote,
    /// Every payload is hashed, on loopback too.
    Always,
}

impl VerifyPayloads {
    /// Whether raw payloads from a server at `peer` are hashed.
    pub fn hashes_raw_from(self, peer: std::net::IpAddr) -> bool {
        let loopback = match peer {
            std::net::IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map_or(v6.is_loopback(), |v4| v4.is_loopback()),
            std::net::IpAddr::V4(v4) => v4.is_loopback(),
        };
        self == VerifyPayloads::Always || !loopback
    }
}

impl std::str::FromStr for VerifyPayloads {
    type Err = String;

    /// `when-remote` or `always`, as command lines and environment variables spell them.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "when-remote" => Ok(VerifyPayloads::WhenRemote),
            "always" => Ok(VerifyPayloads::Always),
            other => Err(format!(
                "{other:?} is not a payload check: use when-remote or always"
            )),
        }
    }
}

/// Turns a payload off the wire into the payload bytes: length checked (against the wire's
/// and, for a turn's payload, the turn's `payload_len`); zstd inflated and hashed; raw hashed
/// when `hash_raw` (decision 0015).
pub(crate) fn verify_payload(
    hash: &BlobHash,
    turn_len: Option<u32>,
    payload: PayloadWire,
    hash_raw: bool,
) -> Result<Option<Bytes>, ClientError> {
    let corrupt = |reason: String| ClientError::Corrupt {
        hash: hash.to_hex(),
        reason,
    };
    let (bytes, hashed) = match payload.encoding {
        PayloadEncoding::Absent => return Ok(None),
        PayloadEncoding::Raw => (payload.data, hash_raw),
        PayloadEncoding::Zstd => {
            let inflated = inflate(&payload.data, payload.raw_len as usize)
                .map_err(|error| corrupt(format!("zstd: {error}")))?;
            (Bytes::from(inflated), true)
        }
    };
    if let Some(turn_len) = turn_len.filter(|&len| len != payload.raw_len) {
        return Err(corrupt(format!(
            "a payload of {} bytes, the turn says {turn_len}",
            payload.raw_len
        )));
    }
    if bytes.len() != payload.raw_len as usize {
        return Err(corrupt(format!(
            "{} bytes, expected {}",
            bytes.len(),
            payload.raw_len
        )));
    }
    if hashed && blake3::hash(&bytes).as_bytes() != &hash.0 {
        return Err(corrupt("hash mismatch".into()));
    }
    Ok(Some(bytes))
}

thread_local! {
    /// Creating a zstd decompression context costs more than inflating a 10 KiB payload:
    /// one per thread, reused.
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

fn inflate(data: &[u8], raw_len: usize) -> std::io::Result<Vec<u8>> {
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new()?);
        }
        match slot.as_mut() {
            Some(decompressor) => decompressor.decompress(data, raw_len),
            None => Err(std::io::Error::other("no zstd decompressor")),
        }
    })
}

/// Names of the caller codec tags, for humans (defined in `ctxstore_vocab::payloads`).
pub use ctxstore_vocab::payloads::{CODEC_NAMES, codec_name};

/// A codec name or number → its tag.
pub fn codec_tag(name: &str) -> Result<u32, ClientError> {
    if let Some((_, tag)) = CODEC_NAMES
        .iter()
        .find(|(known, _)| known.eq_ignore_ascii_case(name))
    {
        return Ok(*tag);
    }
    name.parse::<u32>().map_err(|_| {
        let known: Vec<&str> = CODEC_NAMES.iter().map(|(name, _)| *name).collect();
        ClientError::InvalidArgument(format!(
            "codec {name:?} is neither a number nor one of {}",
            known.join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_durability_is_its_name_and_its_ack_after_bits() {
        use ctxstore_protocol::frame_flags;
        for (durability, bits) in [
            (Durability::Default, 0),
            (Durability::Local, 0b0_1000),
            (Durability::Remote, 0b1_0000),
        ] {
            let flag = durability.ack_after().map_or(0, frame_flags::ack_after);
            assert_eq!(flag, bits, "{durability:?}");
            assert_eq!(flag & !frame_flags::ACK_AFTER, 0);
            assert_eq!(
                durability.name().parse::<Durability>().ok(),
                Some(durability)
            );
        }
        assert!("everywhere".parse::<Durability>().is_err());
    }

    fn turn(payload: &[u8]) -> Turn {
        let wire = TurnWire {
            turn_id: 42,
            parent_turn_id: 41,
            context_id: 3,
            depth: 7,
            codec: 0,
            type_tag: 0,
            payload_hash: BlobHash(*blake3::hash(payload).as_bytes()),
            payload_len: payload.len() as u32,
            flags: 0,
            created_at_unix_ms: 1,
        };
        Turn::from_wire(&wire, None)
    }

    #[test]
    fn an_overlay_state_is_taken_only_when_a_redacted_turn_names_no_bytes() {
        let mut patched = turn(b"fixed");
        let state = OverlayWire {
            overlay_seq: 9,
            redacted: false,
        };
        patched.set_overlay(state).unwrap();
        assert_eq!((patched.redacted, patched.overlay_seq), (false, 9));

        let mut redacted = turn(b"");
        let state = OverlayWire {
            overlay_seq: 10,
            redacted: true,
        };
        redacted.set_overlay(state).unwrap();
        assert_eq!((redacted.redacted, redacted.overlay_seq), (true, 10));

        // A redacted turn whose TURN still names bytes: a broken promise, nothing set.
        let mut liar = turn(b"secret");
        assert!(matches!(
            liar.set_overlay(state),
            Err(ClientError::Protocol(_))
        ));
        assert_eq!((liar.redacted, liar.overlay_seq), (false, 0));
    }
}
