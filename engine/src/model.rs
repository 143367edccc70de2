//! The model of spec §3: immutable turns and context heads, as the engine hands them out.

use bytes::Bytes;

use crate::ids::{BlobHash, CodecTag, ContextId, TurnId, TypeTag};

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
    /// Reserved for tombstones, summary markers and link flags; always 0 in format v1.
    pub flags: u32,
    pub created_at_unix_ms: u64,
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

/// A turn together with its payload bytes, when the read asked for them.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TurnWithPayload {
    pub turn: Turn,
    pub payload: Option<Bytes>,
}

/// The payload of an append: the bytes, or the hash of a blob that is already stored.
#[derive(Clone, Debug)]
pub enum AppendPayload {
    Bytes(Bytes),
    StoredBlob(BlobHash),
}

/// Everything an append needs besides the engine.
#[derive(Clone, Debug)]
pub struct AppendRequest {
    pub context_id: ContextId,
    /// Compare-and-set: append only if the head is still this turn (`TurnId::NONE` = empty).
    pub expected_head: Option<TurnId>,
    pub type_tag: TypeTag,
    pub codec: CodecTag,
    pub payload: AppendPayload,
}

/// What an acknowledged (durable) append produced.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Appended {
    pub turn: Turn,
    /// True when the payload was already stored and no new blob was written for it.
    pub deduped: bool,
}

/// A page of turns (oldest first) and the cursor for the next older page.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TurnPage {
    pub turns: Vec<TurnWithPayload>,
    /// Pass as `before` to read the next older page; `TurnId::NONE` when the root was reached.
    pub next_before: TurnId,
}

/// A blob as it sits in its pack: possibly compressed. Lets a server ship the stored bytes and
/// leave decompression (and hash verification) to the client.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StoredBlob {
    pub hash: BlobHash,
    pub compression: crate::format::pack::Compression,
    pub raw_len: u32,
    pub bytes: Bytes,
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
    /// Whether the store refuses writes (a failed fsync, or an operator's choice).
    pub read_only: bool,
}
