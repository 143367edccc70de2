//! Bodies of context metadata records (`turns.log` kind 3, carried by `turn_log::MetaRecord`):
//! a context's name, tag changes, key-value puts and deletes, and clone-from. Layout in
//! docs/storage.md#context-metadata-records; the limits below are the format's ceilings,
//! checked when a request is admitted (typed errors) and again when a body is decoded.
//!
//! ```text
//! op 1 name       the name's UTF-8 bytes (1..=256)
//! op 2 tags       u16 count, then count × (u16 key_len, key, u8 set, [u16 value_len, value])
//! op 3 kv put     u16 count, then count × (u16 key_len, key, hash[32], u32 value_len)
//! op 4 kv delete  u16 count, then count × (u16 key_len, key)
//! op 5 clone-from u64 source context id (tags and key-value entries as the source has them)
//! op 6 delete     empty: the context is gone (its name is free again; ids are never reused)
//! op 7 floor      u32 floor depth: turns below it are no longer reachable through the context
//! op 8 ttl        u64 ttl_ms (0: none): the context is deleted once idle that long
//! op 9 gc-dead    u64 first_turn_id (a multiple of 64), then u64 words: bit i of word w set =
//!                 TurnID first_turn_id + 64·w + i was collected (context_id 0: store-wide)
//! op 10 overlay   u64 turn_id, u8 kind: 1 patch (then hash[32], u32 len: the new payload's
//!                 blob), 2 redact (nothing more); context_id: the turn's own context
//! op 11 purge     hash[32]: the blob a purge removed (context_id 0: store-wide); the redact
//!                 overlays of its turns precede it
//! op 16 kv put ttl u16 count, then count × (u16 key_len, key, hash[32], u32 value_len,
//!                 u64 ttl_ms, u64 expires_at_unix_ms): a put of which some entry expires
//!                 (entries without a TTL carry 0, 0); op 3 when none does
//! op 17 kv touch  u16 count, then count × (u16 key_len, key, u64 ttl_ms,
//!                 u64 expires_at_unix_ms): each entry's TTL restarted (it must exist)
//! op 18 kv expire u16 count, then count × (u16 key_len, key, u64 expires_at_unix_ms): the
//!                 reaper removed each entry that still had exactly that expiry
//! op 19 skip      empty: the ContextIDs after the last one created, through the record's
//!                 context_id, are taken (a replica generation's start)
//! op 20 tenant    u32 tenant_id, then the name's bytes (1..=64 of [a-z0-9_-]): the tenant
//!                 registered under that id (context_id 0: store-wide; store format 3)
//! ```

use ctxstore_vocab::le::{self, LeReader, ShortRead};
use ctxstore_vocab::vectors::{
    Metric, VECTOR_DIMS_MAX, VECTOR_EF_SEARCH_MAX, VECTORS_PER_ENTRY_MAX, is_index_name,
};

use crate::format::RecordError;
use crate::ids::{BlobHash, ContextId, TenantId, TurnId};

pub use ctxstore_vocab::limits::{
    CONTEXT_NAME_BYTES_MAX, KV_ENTRIES_PER_REQUEST_MAX, KV_KEY_BYTES_MAX, KV_TOUCH_KEYS_MAX,
    TAG_KEY_BYTES_MAX, TAG_VALUE_BYTES_MAX, TAGS_PER_CONTEXT_MAX, TENANT_NAME_BYTES_MAX,
    TTL_MS_MAX, is_tenant_name,
};

const OP_NAME: u16 = 1;
const OP_TAGS: u16 = 2;
const OP_KV_PUT: u16 = 3;
const OP_KV_DELETE: u16 = 4;
const OP_CLONE_FROM: u16 = 5;
const OP_DELETE: u16 = 6;
const OP_FLOOR: u16 = 7;
const OP_TTL: u16 = 8;
/// The one op whose record names no context (`context_id` 0): turns the garbage collector
/// declared dead (decision 0011).
pub const OP_GC_DEAD: u16 = 9;
/// Bitmap words one gc-dead record carries: 8 + 8 × 8,191 = 65,536 bytes of body, so one
/// record covers 524,224 TurnIDs.
pub const GC_DEAD_WORDS_MAX: usize = 8191;
/// A turn's payload patched or redacted (issue 15, decision 0012); the record's id is the
/// overlay's sequence number.
pub const OP_OVERLAY: u16 = 10;
/// A blob purged: the redactions of every turn that named it come just before (store-wide).
pub const OP_PURGE: u16 = 11;
/// A key-value put of which some entry carries a time to live (issue 34, decision 0028).
const OP_KV_PUT_TTL: u16 = 16;
/// Key-value entries' TTLs restarted (a refresh on read, a KV_TOUCH).
const OP_KV_TOUCH: u16 = 17;
/// Key-value entries the reaper removed at their expiry.
const OP_KV_EXPIRE: u16 = 18;
/// ContextIDs skipped at the start of a replica generation (issue 46 item 8).
const OP_SKIP_CONTEXTS: u16 = 19;
/// A tenant registered: name → TenantId (decision 0032; store-wide).
pub const OP_TENANT: u16 = 20;
/// A tenant deleted (decision 0032 §6; store-wide): its contexts are deleted with it.
pub const OP_TENANT_DELETED: u16 = 21;
/// A key-value put of which some entry carries vectors (decision 0033): every entry with its
/// TTL and expiry, and its vectors blob when it has one.
const OP_KV_PUT_VECTORS: u16 = 22;
/// A vector index created (decision 0033; store-wide, like a tenant record).
pub const OP_VECTOR_INDEX: u16 = 23;
/// A vector index dropped (store-wide).
pub const OP_VECTOR_INDEX_DROPPED: u16 = 24;
const OVERLAY_PATCH: u8 = 1;
const OVERLAY_REDACT: u8 = 2;

/// Whether records of `op` name no context (`context_id` 0): gc-dead, purge, the tenant
/// and the vector index records.
pub fn is_store_wide(op: u16) -> bool {
    op == OP_GC_DEAD
        || op == OP_PURGE
        || op == OP_TENANT
        || op == OP_TENANT_DELETED
        || op == OP_VECTOR_INDEX
        || op == OP_VECTOR_INDEX_DROPPED
}

/// What an overlay does to its turn's payload.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OverlayKind {
    /// The turn reads with this payload from now on (a blob made durable before the record).
    Patch { hash: BlobHash, len: u32 },
    /// The turn reads without a payload, in every view; its bytes leave at the next
    /// collection unless a live, unredacted turn still names them.
    Redact,
}

/// A key-value entry: the key and the blob that holds the value, and its time to live.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct KvEntry {
    pub key: Vec<u8>,
    pub value_hash: BlobHash,
    pub value_len: u32,
    /// Milliseconds the entry lives after its put or last refresh (0: for ever).
    pub ttl_ms: u64,
    /// When it expires (unix ms; 0 with `ttl_ms` 0). The sequencer sets it from its clock:
    /// the record carries the instant, so replay needs no clock.
    pub expires_at_unix_ms: u64,
    /// Its vectors (decision 0033), if it has any.
    pub vectors: Option<KvVectors>,
}

/// A key-value entry's vectors: a blob (`format::vectors`) of `count` vectors of one index.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct KvVectors {
    pub hash: BlobHash,
    pub len: u32,
    /// The index (`VectorIndexRecord::index_id`) of the entry's tenant they belong to.
    pub index_id: u32,
    /// 1..=64.
    pub count: u8,
}

/// A vector index as its record creates it (decision 0033 §1).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct VectorIndexRecord {
    pub tenant_id: TenantId,
    /// The tenant's id of the index, from 1, never given twice within the tenant.
    pub index_id: u32,
    pub dims: u16,
    pub metric: Metric,
    pub ef_search: u16,
    pub name: String,
}

/// A key-value entry's TTL as a touch sets it, or its expiry as the reaper found it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct KvExpiry {
    pub key: Vec<u8>,
    /// The TTL from now on (a touch; 0 in an expire record).
    pub ttl_ms: u64,
    pub expires_at_unix_ms: u64,
}

/// What a metadata record does to its context.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ContextMeta {
    Name(String),
    /// Set (`Some`) or remove (`None`) each key, atomically.
    Tags(Vec<(String, Option<String>)>),
    KvPut(Vec<KvEntry>),
    KvDelete(Vec<Vec<u8>>),
    /// Each entry's TTL and expiry set anew (entries absent when applied stay absent).
    KvTouch(Vec<KvExpiry>),
    /// Each entry removed if its expiry is still exactly the one given (the reaper's
    /// compare-and-delete: an entry refreshed meanwhile stays).
    KvExpire(Vec<KvExpiry>),
    /// The context (created by the context record just before) takes the source's tags and
    /// key-value entries as they are at this point of the log.
    CloneFrom(ContextId),
    /// The context is deleted (issue 15): its head, name, tags and key-value entries are gone;
    /// its turns stay only while something else reaches them.
    Delete,
    /// Turns below this depth are no longer reachable through the context (a prune). Floors
    /// only rise.
    Floor(u32),
    /// Time to live in milliseconds since the context's last update (0: none).
    Ttl(u64),
    /// Turns the garbage collector collected (store-wide, `context_id` 0): bit `i` of
    /// `words[w]` stands for TurnID `first_turn_id + 64·w + i`. Never empty.
    GcDead {
        first_turn_id: u64,
        words: Vec<u64>,
    },
    /// A turn's payload patched or redacted (the record names the turn's own context).
    Overlay {
        turn_id: TurnId,
        kind: OverlayKind,
    },
    /// Every turn naming this blob was redacted just before (store-wide, `context_id` 0).
    Purge(BlobHash),
    /// A new replica generation starts here (a restore or a promotion, issue 46 item 8): the
    /// ContextIDs after the last one created, through the record's `context_id`, are taken
    /// and read as deleted contexts, so that none the old primary may have acknowledged
    /// without shipping it is handed out again. No body.
    SkipContexts,
    /// A tenant registered (store-wide, decision 0032): `name` is `tenant_id`'s from here
    /// on. Ids are given in increasing order from 1 and never twice.
    Tenant {
        tenant_id: TenantId,
        name: String,
    },
    /// A tenant deleted (store-wide, decision 0032 §6): every context of it still live is
    /// deleted here, and the tenant is gone for good (its id and name are never given again).
    TenantDeleted(TenantId),
    /// A vector index created (store-wide, decision 0033).
    VectorIndex(VectorIndexRecord),
    /// A vector index dropped (store-wide): its vectors answer no search from here on.
    VectorIndexDropped {
        tenant_id: TenantId,
        index_id: u32,
    },
}

impl ContextMeta {
    pub fn op(&self) -> u16 {
        match self {
            ContextMeta::Name(_) => OP_NAME,
            ContextMeta::Tags(_) => OP_TAGS,
            // Stores written before TTLs keep their op: a put without one is op 3 still.
            ContextMeta::KvPut(entries) if entries.iter().any(|entry| entry.vectors.is_some()) => {
                OP_KV_PUT_VECTORS
            }
            ContextMeta::KvPut(entries) if entries.iter().any(|entry| entry.ttl_ms > 0) => {
                OP_KV_PUT_TTL
            }
            ContextMeta::KvPut(_) => OP_KV_PUT,
            ContextMeta::KvDelete(_) => OP_KV_DELETE,
            ContextMeta::KvTouch(_) => OP_KV_TOUCH,
            ContextMeta::KvExpire(_) => OP_KV_EXPIRE,
            ContextMeta::CloneFrom(_) => OP_CLONE_FROM,
            ContextMeta::Delete => OP_DELETE,
            ContextMeta::Floor(_) => OP_FLOOR,
            ContextMeta::Ttl(_) => OP_TTL,
            ContextMeta::GcDead { .. } => OP_GC_DEAD,
            ContextMeta::Overlay { .. } => OP_OVERLAY,
            ContextMeta::Purge(_) => OP_PURGE,
            ContextMeta::SkipContexts => OP_SKIP_CONTEXTS,
            ContextMeta::Tenant { .. } => OP_TENANT,
            ContextMeta::TenantDeleted(_) => OP_TENANT_DELETED,
            ContextMeta::VectorIndex(_) => OP_VECTOR_INDEX,
            ContextMeta::VectorIndexDropped { .. } => OP_VECTOR_INDEX_DROPPED,
        }
    }

    /// The body bytes. The caller validated the limits; encoding asserts them (pair assertion
    /// with `decode`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            ContextMeta::Name(name) => {
                assert!(
                    check_name(name.as_bytes()).is_ok(),
                    "name checked on admission"
                );
                out.extend_from_slice(name.as_bytes());
            }
            ContextMeta::Tags(changes) => encode_tags(&mut out, changes),
            ContextMeta::KvPut(entries) => {
                encode_kv_put(&mut out, entries, self.op());
            }
            ContextMeta::KvTouch(entries) => encode_kv_expiries(&mut out, entries, true),
            ContextMeta::KvExpire(entries) => encode_kv_expiries(&mut out, entries, false),
            ContextMeta::KvDelete(keys) => {
                assert!(keys.len() <= KV_ENTRIES_PER_REQUEST_MAX);
                out.extend_from_slice(&(keys.len() as u16).to_le_bytes());
                for key in keys {
                    assert!(key.len() <= KV_KEY_BYTES_MAX && !key.is_empty());
                    put_bytes(&mut out, key);
                }
            }
            ContextMeta::CloneFrom(source) => out.extend_from_slice(&source.0.to_le_bytes()),
            ContextMeta::Delete | ContextMeta::SkipContexts => {}
            ContextMeta::Floor(depth) => out.extend_from_slice(&depth.to_le_bytes()),
            ContextMeta::Ttl(ttl_ms) => out.extend_from_slice(&ttl_ms.to_le_bytes()),
            ContextMeta::GcDead {
                first_turn_id,
                words,
            } => {
                assert!(
                    check_gc_dead(*first_turn_id, words).is_ok(),
                    "{first_turn_id}"
                );
                out.extend_from_slice(&first_turn_id.to_le_bytes());
                for word in words {
                    out.extend_from_slice(&word.to_le_bytes());
                }
            }
            ContextMeta::Overlay { turn_id, kind } => {
                assert!(!turn_id.is_none(), "an overlay names a turn");
                out.extend_from_slice(&turn_id.0.to_le_bytes());
                match kind {
                    OverlayKind::Patch { hash, len } => {
                        out.push(OVERLAY_PATCH);
                        out.extend_from_slice(&hash.0);
                        out.extend_from_slice(&len.to_le_bytes());
                    }
                    OverlayKind::Redact => out.push(OVERLAY_REDACT),
                }
            }
            ContextMeta::Purge(hash) => out.extend_from_slice(&hash.0),
            ContextMeta::Tenant { tenant_id, name } => encode_tenant(&mut out, *tenant_id, name),
            ContextMeta::TenantDeleted(tenant_id) => {
                assert!(!tenant_id.is_operator(), "the operator is never deleted");
                out.extend_from_slice(&tenant_id.0.to_le_bytes());
            }
            ContextMeta::VectorIndex(index) => encode_vector_index(&mut out, index),
            ContextMeta::VectorIndexDropped {
                tenant_id,
                index_id,
            } => {
                assert!(*index_id > 0, "index ids start at 1");
                out.extend_from_slice(&tenant_id.0.to_le_bytes());
                out.extend_from_slice(&index_id.to_le_bytes());
            }
        }
        out
    }

    /// Decodes a body; never panics. Checks the same limits as admission.
    pub fn decode(op: u16, body: &[u8]) -> Result<ContextMeta, RecordError> {
        let mut reader = Reader {
            le: LeReader::new(body),
        };
        let meta = match op {
            OP_NAME => {
                check_name(body)?;
                reader.take_rest();
                let name = std::str::from_utf8(body)
                    .map_err(|_| RecordError::Field("context name is not UTF-8"))?;
                ContextMeta::Name(name.to_owned())
            }
            OP_TAGS => decode_tags(&mut reader)?,
            OP_KV_PUT | OP_KV_PUT_TTL | OP_KV_PUT_VECTORS => decode_kv_put(&mut reader, op)?,
            OP_KV_TOUCH | OP_KV_EXPIRE => decode_kv_expiries(&mut reader, op)?,
            OP_KV_DELETE => {
                let count = reader.count()?;
                let mut keys = Vec::with_capacity(count);
                for _ in 0..count {
                    keys.push(reader.key()?);
                }
                ContextMeta::KvDelete(keys)
            }
            OP_CLONE_FROM => {
                let source = reader.u64()?;
                if source == 0 {
                    return Err(RecordError::Field("clone from context 0"));
                }
                ContextMeta::CloneFrom(ContextId(source))
            }
            OP_DELETE => ContextMeta::Delete,
            OP_FLOOR => ContextMeta::Floor(reader.u32()?),
            OP_TTL => ContextMeta::Ttl(reader.u64()?),
            OP_GC_DEAD => decode_gc_dead(&mut reader)?,
            OP_OVERLAY => decode_overlay(&mut reader)?,
            OP_PURGE => ContextMeta::Purge(BlobHash(reader.array()?)),
            OP_SKIP_CONTEXTS => ContextMeta::SkipContexts,
            OP_TENANT => decode_tenant(&mut reader)?,
            OP_TENANT_DELETED => match TenantId(reader.u32()?) {
                tenant_id if tenant_id.is_operator() => {
                    return Err(RecordError::Field(
                        "tenant-deleted record names the operator",
                    ));
                }
                tenant_id => ContextMeta::TenantDeleted(tenant_id),
            },
            OP_VECTOR_INDEX => decode_vector_index(&mut reader)?,
            OP_VECTOR_INDEX_DROPPED => {
                let tenant_id = TenantId(reader.u32()?);
                let index_id = reader.u32()?;
                if index_id == 0 {
                    return Err(RecordError::Field("vector index dropped names index 0"));
                }
                ContextMeta::VectorIndexDropped {
                    tenant_id,
                    index_id,
                }
            }
            _ => return Err(RecordError::Field("unknown context metadata op")),
        };
        if reader.le.remaining() != 0 {
            return Err(RecordError::Field("bytes after the metadata body"));
        }
        Ok(meta)
    }
}

/// A tenant body: a TenantId other than the operator's, then a tenant name (the rest).
fn encode_tenant(out: &mut Vec<u8>, tenant_id: TenantId, name: &str) {
    assert!(
        !tenant_id.is_operator(),
        "the operator is registered by no record"
    );
    assert!(is_tenant_name(name), "tenant name checked on admission");
    out.extend_from_slice(&tenant_id.0.to_le_bytes());
    out.extend_from_slice(name.as_bytes());
}

/// The pair of `encode_tenant`.
fn decode_tenant(reader: &mut Reader<'_>) -> Result<ContextMeta, RecordError> {
    let tenant_id = TenantId(reader.u32()?);
    if tenant_id.is_operator() {
        return Err(RecordError::Field(
            "tenant record registers the operator (id 0)",
        ));
    }
    let name = reader.take_rest();
    let name = std::str::from_utf8(name)
        .ok()
        .filter(|name| is_tenant_name(name))
        .ok_or(RecordError::Field(
            "tenant name is not 1..=64 bytes of [a-z0-9_-]",
        ))?;
    Ok(ContextMeta::Tenant {
        tenant_id,
        name: name.to_owned(),
    })
}

/// A gc-dead body: a first TurnID that is a multiple of 64 (TurnIDs start at 1, so bit 0 of
/// the first word may stand for no turn and is never set then), 1..=`GC_DEAD_WORDS_MAX`
/// words, the first and last not zero (no padding), no TurnID 0, no overflow.
pub fn check_gc_dead(first_turn_id: u64, words: &[u64]) -> Result<(), RecordError> {
    if !first_turn_id.is_multiple_of(64) {
        return Err(RecordError::Field(
            "gc-dead first turn is not a multiple of 64",
        ));
    }
    if words.is_empty() || words.len() > GC_DEAD_WORDS_MAX {
        return Err(RecordError::Field("gc-dead bitmap is not 1..=8191 words"));
    }
    if words[0] == 0 || words[words.len() - 1] == 0 {
        return Err(RecordError::Field("gc-dead bitmap has padding words"));
    }
    if first_turn_id == 0 && words[0] & 1 != 0 {
        return Err(RecordError::Field("gc-dead names TurnID 0"));
    }
    if first_turn_id.checked_add(64 * words.len() as u64).is_none() {
        return Err(RecordError::Field("gc-dead bitmap passes the last TurnID"));
    }
    Ok(())
}

/// A key-value entry's TTL and expiry: both 0 (none), or a TTL of 1..=`TTL_MS_MAX` and an
/// expiry at least that far from the epoch.
pub fn check_expiry(ttl_ms: u64, expires_at_unix_ms: u64) -> Result<(), RecordError> {
    match (ttl_ms, expires_at_unix_ms) {
        (0, 0) => Ok(()),
        (1..=TTL_MS_MAX, expires) if expires >= ttl_ms => Ok(()),
        _ => Err(RecordError::Field(
            "key-value TTL out of 1..=100 years, or an expiry before its TTL",
        )),
    }
}

/// A context name: 1..=256 bytes of UTF-8.
pub fn check_name(name: &[u8]) -> Result<(), RecordError> {
    if name.is_empty() || name.len() > CONTEXT_NAME_BYTES_MAX {
        return Err(RecordError::Field("context name is not 1..=256 bytes"));
    }
    Ok(())
}

/// A gc-dead record's body: its first turn, then its bitmap in whole words, checked.
fn decode_gc_dead(reader: &mut Reader<'_>) -> Result<ContextMeta, RecordError> {
    let first_turn_id = reader.u64()?;
    if !reader.le.remaining().is_multiple_of(8) {
        return Err(RecordError::Field("gc-dead bitmap is not whole words"));
    }
    let words: Vec<u64> = reader
        .take_rest()
        .chunks_exact(8)
        .map(|word| le::u64_at(word, 0))
        .collect();
    check_gc_dead(first_turn_id, &words)?;
    Ok(ContextMeta::GcDead {
        first_turn_id,
        words,
    })
}

/// An overlay's body: the turn it covers, then a patch (blob and length) or a redaction.
fn decode_overlay(reader: &mut Reader<'_>) -> Result<ContextMeta, RecordError> {
    let turn_id = TurnId(reader.u64()?);
    if turn_id.is_none() {
        return Err(RecordError::Field("overlay of TurnID 0"));
    }
    let kind = match reader.u8()? {
        OVERLAY_PATCH => OverlayKind::Patch {
            hash: BlobHash(reader.array()?),
            len: reader.u32()?,
        },
        OVERLAY_REDACT => OverlayKind::Redact,
        _ => return Err(RecordError::Field("overlay is neither patch nor redact")),
    };
    Ok(ContextMeta::Overlay { turn_id, kind })
}

/// The pair of `encode_tags`: each change checked as admission checks it.
fn decode_tags(reader: &mut Reader<'_>) -> Result<ContextMeta, RecordError> {
    let count = reader.u16()? as usize;
    let mut changes = Vec::with_capacity(count.min(TAGS_PER_CONTEXT_MAX * 2));
    for _ in 0..count {
        let key = reader.text(TAG_KEY_BYTES_MAX)?;
        let value = match reader.u8()? {
            0 => None,
            1 => Some(reader.text(TAG_VALUE_BYTES_MAX)?),
            _ => {
                return Err(RecordError::Field("tag change is neither set nor remove"));
            }
        };
        changes.push((key, value));
    }
    Ok(ContextMeta::Tags(changes))
}

/// The pair of `encode_kv_put`; a TTL put must carry a TTL.
fn decode_kv_put(reader: &mut Reader<'_>, op: u16) -> Result<ContextMeta, RecordError> {
    let count = reader.count()?;
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let key = reader.key()?;
        let value_hash = BlobHash(reader.array()?);
        let value_len = reader.u32()?;
        let (ttl_ms, expires_at_unix_ms) = if op == OP_KV_PUT_TTL || op == OP_KV_PUT_VECTORS {
            let ttl_ms = reader.u64()?;
            let expires_at_unix_ms = reader.u64()?;
            check_expiry(ttl_ms, expires_at_unix_ms)?;
            (ttl_ms, expires_at_unix_ms)
        } else {
            (0, 0)
        };
        let vectors = if op == OP_KV_PUT_VECTORS {
            decode_kv_vectors(reader)?
        } else {
            None
        };
        entries.push(KvEntry {
            key,
            value_hash,
            value_len,
            ttl_ms,
            expires_at_unix_ms,
            vectors,
        });
    }
    if op == OP_KV_PUT_TTL && entries.iter().all(|entry| entry.ttl_ms == 0) {
        return Err(RecordError::Field("kv put ttl record without a TTL"));
    }
    if op == OP_KV_PUT_VECTORS && entries.iter().all(|entry| entry.vectors.is_none()) {
        return Err(RecordError::Field("kv put vectors record without vectors"));
    }
    Ok(ContextMeta::KvPut(entries))
}

/// An entry's vectors in a vectors put: `u8` 0 (none) or 1, then the blob's hash and length,
/// the index id (≥ 1) and the count (1..=64).
fn decode_kv_vectors(reader: &mut Reader<'_>) -> Result<Option<KvVectors>, RecordError> {
    match reader.u8()? {
        0 => Ok(None),
        1 => {
            let hash = BlobHash(reader.array()?);
            let len = reader.u32()?;
            let index_id = reader.u32()?;
            let count = reader.u8()?;
            if index_id == 0 {
                return Err(RecordError::Field("kv vectors name index 0"));
            }
            if count == 0 || count as usize > VECTORS_PER_ENTRY_MAX {
                return Err(RecordError::Field("kv vectors count is not 1..=64"));
            }
            Ok(Some(KvVectors {
                hash,
                len,
                index_id,
                count,
            }))
        }
        _ => Err(RecordError::Field("kv vectors flag is not 0 or 1")),
    }
}

/// A vector index body: tenant, index id (≥ 1), dims (1..=4,096), metric, reserved 0,
/// `ef_search` (1..=4,096), then the name (the rest, 1..=64 bytes of UTF-8).
fn encode_vector_index(out: &mut Vec<u8>, index: &VectorIndexRecord) {
    assert!(index.index_id > 0, "index ids start at 1");
    assert!((1..=VECTOR_DIMS_MAX).contains(&(index.dims as usize)));
    assert!((1..=VECTOR_EF_SEARCH_MAX).contains(&index.ef_search));
    assert!(
        is_index_name(&index.name),
        "index name checked on admission"
    );
    out.extend_from_slice(&index.tenant_id.0.to_le_bytes());
    out.extend_from_slice(&index.index_id.to_le_bytes());
    out.extend_from_slice(&index.dims.to_le_bytes());
    out.push(index.metric.code());
    out.push(0);
    out.extend_from_slice(&index.ef_search.to_le_bytes());
    out.extend_from_slice(index.name.as_bytes());
}

/// The pair of `encode_vector_index`.
fn decode_vector_index(reader: &mut Reader<'_>) -> Result<ContextMeta, RecordError> {
    let tenant_id = TenantId(reader.u32()?);
    let index_id = reader.u32()?;
    let dims = reader.u16()?;
    let metric = Metric::from_code(reader.u8()?)
        .ok_or(RecordError::Field("vector index of an unknown metric"))?;
    if reader.u8()? != 0 {
        return Err(RecordError::Field("vector index reserved byte is not 0"));
    }
    let ef_search = reader.u16()?;
    let name = std::str::from_utf8(reader.take_rest())
        .ok()
        .filter(|name| is_index_name(name))
        .ok_or(RecordError::Field(
            "vector index name is not 1..=64 bytes of UTF-8",
        ))?;
    if index_id == 0
        || !(1..=VECTOR_DIMS_MAX).contains(&(dims as usize))
        || !(1..=VECTOR_EF_SEARCH_MAX).contains(&ef_search)
    {
        return Err(RecordError::Field(
            "vector index id, dimension or breadth out of range",
        ));
    }
    Ok(ContextMeta::VectorIndex(VectorIndexRecord {
        tenant_id,
        index_id,
        dims,
        metric,
        ef_search,
        name: name.to_owned(),
    }))
}

/// The pair of `encode_kv_expiries`: a touch (`OP_KV_TOUCH`) or an expiry.
fn decode_kv_expiries(reader: &mut Reader<'_>, op: u16) -> Result<ContextMeta, RecordError> {
    let count = reader.count()?;
    if count == 0 {
        return Err(RecordError::Field("kv touch or expire record of no entry"));
    }
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let key = reader.key()?;
        let ttl_ms = if op == OP_KV_TOUCH { reader.u64()? } else { 0 };
        let expires_at_unix_ms = reader.u64()?;
        if op == OP_KV_TOUCH {
            check_expiry(ttl_ms, expires_at_unix_ms)?;
        }
        if ttl_ms == 0 && op == OP_KV_TOUCH || expires_at_unix_ms == 0 {
            return Err(RecordError::Field("kv touch or expire of no instant"));
        }
        entries.push(KvExpiry {
            key,
            ttl_ms,
            expires_at_unix_ms,
        });
    }
    Ok(if op == OP_KV_TOUCH {
        ContextMeta::KvTouch(entries)
    } else {
        ContextMeta::KvExpire(entries)
    })
}

/// TAGS: `u16 count`, then each change: its key, and `1` with the value or `0` (removed).
fn encode_tags(out: &mut Vec<u8>, changes: &[(String, Option<String>)]) {
    assert!(changes.len() <= TAGS_PER_CONTEXT_MAX * 2);
    out.extend_from_slice(&(changes.len() as u16).to_le_bytes());
    for (key, value) in changes {
        assert!(key.len() <= TAG_KEY_BYTES_MAX && !key.is_empty());
        put_bytes(out, key.as_bytes());
        match value {
            Some(value) => {
                assert!(value.len() <= TAG_VALUE_BYTES_MAX);
                out.push(1);
                put_bytes(out, value.as_bytes());
            }
            None => out.push(0),
        }
    }
}

/// A key-value put: `u16 count`, then each entry's key, value hash and length, (with a TTL,
/// op `OP_KV_PUT_TTL`, and always in `OP_KV_PUT_VECTORS`) its TTL and expiry, and (op
/// `OP_KV_PUT_VECTORS`) its vectors (`decode_kv_vectors`).
fn encode_kv_put(out: &mut Vec<u8>, entries: &[KvEntry], op: u16) {
    let with_ttl = op == OP_KV_PUT_TTL || op == OP_KV_PUT_VECTORS;
    assert!(entries.len() <= KV_ENTRIES_PER_REQUEST_MAX);
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for entry in entries {
        assert!(entry.key.len() <= KV_KEY_BYTES_MAX && !entry.key.is_empty());
        assert!(
            check_expiry(entry.ttl_ms, entry.expires_at_unix_ms).is_ok(),
            "a put's TTL is checked on admission and its expiry set by the sequencer"
        );
        put_bytes(out, &entry.key);
        out.extend_from_slice(&entry.value_hash.0);
        out.extend_from_slice(&entry.value_len.to_le_bytes());
        if with_ttl {
            out.extend_from_slice(&entry.ttl_ms.to_le_bytes());
            out.extend_from_slice(&entry.expires_at_unix_ms.to_le_bytes());
        }
        if op == OP_KV_PUT_VECTORS {
            match &entry.vectors {
                None => out.push(0),
                Some(vectors) => {
                    assert!(vectors.index_id > 0);
                    assert!((1..=VECTORS_PER_ENTRY_MAX).contains(&(vectors.count as usize)));
                    out.push(1);
                    out.extend_from_slice(&vectors.hash.0);
                    out.extend_from_slice(&vectors.len.to_le_bytes());
                    out.extend_from_slice(&vectors.index_id.to_le_bytes());
                    out.push(vectors.count);
                }
            }
        } else {
            assert!(entry.vectors.is_none(), "vectors only in a vectors put");
        }
    }
}

/// A touch (`touch`: each key's new TTL too) or an expiry: `u16 count`, then each key and
/// its expiry.
fn encode_kv_expiries(out: &mut Vec<u8>, entries: &[KvExpiry], touch: bool) {
    assert!(!entries.is_empty() && entries.len() <= KV_TOUCH_KEYS_MAX);
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for entry in entries {
        assert!(entry.key.len() <= KV_KEY_BYTES_MAX && !entry.key.is_empty());
        assert!(entry.expires_at_unix_ms > 0, "an expiry is an instant");
        put_bytes(out, &entry.key);
        if touch {
            assert!(entry.ttl_ms > 0 && entry.ttl_ms <= TTL_MS_MAX);
            out.extend_from_slice(&entry.ttl_ms.to_le_bytes());
        }
        out.extend_from_slice(&entry.expires_at_unix_ms.to_le_bytes());
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn ends_early(_: ShortRead) -> RecordError {
    RecordError::Field("metadata body ends early")
}

/// Bounds-checked reading of a body (`ctxstore_vocab::le`).
struct Reader<'a> {
    le: LeReader<'a>,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], RecordError> {
        self.le.take(len).map_err(ends_early)
    }

    fn u8(&mut self) -> Result<u8, RecordError> {
        self.le.u8().map_err(ends_early)
    }

    fn u16(&mut self) -> Result<u16, RecordError> {
        self.le.u16().map_err(ends_early)
    }

    fn u32(&mut self) -> Result<u32, RecordError> {
        self.le.u32().map_err(ends_early)
    }

    fn u64(&mut self) -> Result<u64, RecordError> {
        self.le.u64().map_err(ends_early)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], RecordError> {
        self.le.array().map_err(ends_early)
    }

    /// The rest of the body, all of it read.
    fn take_rest(&mut self) -> &'a [u8] {
        let rest = self.le.rest();
        self.le = LeReader::new(&[]);
        rest
    }

    fn count(&mut self) -> Result<usize, RecordError> {
        let count = self.u16()? as usize;
        if count > KV_ENTRIES_PER_REQUEST_MAX {
            return Err(RecordError::Field(
                "too many key-value entries in one record",
            ));
        }
        Ok(count)
    }

    fn bytes(&mut self, max: usize) -> Result<&'a [u8], RecordError> {
        let len = self.u16()? as usize;
        if len == 0 || len > max {
            return Err(RecordError::Field(
                "metadata key or value length out of range",
            ));
        }
        self.take(len)
    }

    fn text(&mut self, max: usize) -> Result<String, RecordError> {
        let bytes = self.bytes(max)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| RecordError::Field("tag is not UTF-8"))
    }

    fn key(&mut self) -> Result<Vec<u8>, RecordError> {
        self.bytes(KV_KEY_BYTES_MAX).map(<[u8]>::to_vec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records of decision 0033: a put with vectors, an index created and dropped.
    fn vector_samples() -> Vec<ContextMeta> {
        vec![
            ContextMeta::KvPut(vec![
                KvEntry {
                    key: b"mem/v".to_vec(),
                    value_hash: BlobHash::of(b"v"),
                    value_len: 1,
                    ttl_ms: 0,
                    expires_at_unix_ms: 0,
                    vectors: Some(KvVectors {
                        hash: BlobHash::of(b"vectors"),
                        len: 20,
                        index_id: 3,
                        count: 2,
                    }),
                },
                KvEntry {
                    key: b"mem/w".to_vec(),
                    value_hash: BlobHash::of(b"w"),
                    value_len: 1,
                    ttl_ms: 30_000,
                    expires_at_unix_ms: 1_800_000_030_000,
                    vectors: None,
                },
            ]),
            ContextMeta::VectorIndex(VectorIndexRecord {
                tenant_id: TenantId(2),
                index_id: 1,
                dims: 384,
                metric: Metric::InnerProduct,
                ef_search: 128,
                name: "lgs:memories".into(),
            }),
            ContextMeta::VectorIndexDropped {
                tenant_id: TenantId::OPERATOR,
                index_id: 9,
            },
        ]
    }

    fn samples() -> Vec<ContextMeta> {
        let mut samples = vec![
            ContextMeta::Name("thread-42/ns".into()),
            ContextMeta::Tags(vec![
                ("status".into(), Some("suspended".into())),
                ("owner".into(), None),
            ]),
            ContextMeta::KvPut(vec![KvEntry {
                key: b"pending/0001".to_vec(),
                value_hash: BlobHash::of(b"value"),
                value_len: 5,
                ttl_ms: 0,
                expires_at_unix_ms: 0,
                vectors: None,
            }]),
            ContextMeta::KvPut(vec![
                KvEntry {
                    key: b"mem/a".to_vec(),
                    value_hash: BlobHash::of(b"a"),
                    value_len: 1,
                    ttl_ms: 30_000,
                    expires_at_unix_ms: 1_800_000_030_000,
                    vectors: None,
                },
                KvEntry {
                    key: b"mem/b".to_vec(),
                    value_hash: BlobHash::of(b"b"),
                    value_len: 1,
                    ttl_ms: 0,
                    expires_at_unix_ms: 0,
                    vectors: None,
                },
            ]),
            ContextMeta::KvTouch(vec![KvExpiry {
                key: b"mem/a".to_vec(),
                ttl_ms: 60_000,
                expires_at_unix_ms: 1_800_000_090_000,
            }]),
            ContextMeta::KvExpire(vec![KvExpiry {
                key: b"mem/a".to_vec(),
                ttl_ms: 0,
                expires_at_unix_ms: 1_800_000_090_000,
            }]),
            ContextMeta::KvDelete(vec![b"pending/0001".to_vec(), b"x".to_vec()]),
            ContextMeta::CloneFrom(ContextId(7)),
            ContextMeta::Delete,
            ContextMeta::Floor(1234),
            ContextMeta::Ttl(7 * 24 * 3600 * 1000),
            ContextMeta::Overlay {
                turn_id: TurnId(77),
                kind: OverlayKind::Patch {
                    hash: BlobHash::of(b"patched"),
                    len: 7,
                },
            },
            ContextMeta::Overlay {
                turn_id: TurnId(u64::MAX - 1),
                kind: OverlayKind::Redact,
            },
            ContextMeta::Purge(BlobHash::of(b"gone")),
            ContextMeta::SkipContexts,
            ContextMeta::Tenant {
                tenant_id: TenantId(3),
                name: "acme-corp_2".into(),
            },
            ContextMeta::TenantDeleted(TenantId(3)),
        ];
        samples.extend(vector_samples());
        samples
    }

    #[test]
    fn bodies_round_trip() {
        for meta in samples() {
            assert_eq!(ContextMeta::decode(meta.op(), &meta.encode()), Ok(meta));
        }
    }

    #[test]
    fn truncated_or_extended_bodies_are_errors_not_panics() {
        for meta in samples() {
            let body = meta.encode();
            for cut in 0..body.len() {
                let decoded = ContextMeta::decode(meta.op(), &body[..cut]);
                // A name cut short is still a name (a tenant's after its id, an index's after
                // its 14 fixed bytes); every other body cut short is an error.
                let still_named = match meta {
                    ContextMeta::Name(_) => cut > 0,
                    ContextMeta::Tenant { .. } => cut > 4,
                    ContextMeta::VectorIndex(_) => cut > 14,
                    _ => false,
                };
                if !still_named {
                    assert!(decoded.is_err(), "{meta:?} cut at {cut}");
                }
            }
            let mut longer = body.clone();
            longer.push(0);
            // A context's and an index's names take any UTF-8, a NUL too.
            if !matches!(meta, ContextMeta::Name(_) | ContextMeta::VectorIndex(_)) {
                assert!(ContextMeta::decode(meta.op(), &longer).is_err());
            }
        }
        assert!(ContextMeta::decode(99, &[]).is_err());
        // An overlay of no turn, or of an unknown kind.
        assert!(ContextMeta::decode(OP_OVERLAY, &[0, 0, 0, 0, 0, 0, 0, 0, 2]).is_err());
        assert!(ContextMeta::decode(OP_OVERLAY, &[1, 0, 0, 0, 0, 0, 0, 0, 3]).is_err());
        assert!(ContextMeta::decode(1, &[b'x'; CONTEXT_NAME_BYTES_MAX + 1]).is_err());
        // A tenant record of the operator, or with a name outside [a-z0-9_-] or too long.
        assert!(ContextMeta::decode(OP_TENANT, b"\0\0\0\0acme").is_err());
        assert!(ContextMeta::decode(OP_TENANT, b"\x01\0\0\0Acme").is_err());
        let mut long = 1u32.to_le_bytes().to_vec();
        long.extend_from_slice(&[b'a'; 65]);
        assert!(ContextMeta::decode(OP_TENANT, &long).is_err());
        assert!(is_store_wide(OP_TENANT));
        assert!(ContextMeta::decode(OP_TENANT_DELETED, b"\0\0\0\0").is_err());
        assert!(is_store_wide(OP_TENANT_DELETED));
    }

    #[test]
    fn ttl_records_keep_old_puts_and_refuse_bad_expiries() {
        // A put without TTL is the op 3 of stores written before TTLs, byte for byte.
        let plain = ContextMeta::KvPut(vec![KvEntry {
            key: b"k".to_vec(),
            value_hash: BlobHash::of(b"v"),
            value_len: 1,
            ttl_ms: 0,
            expires_at_unix_ms: 0,
            vectors: None,
        }]);
        assert_eq!(plain.op(), OP_KV_PUT);
        assert_eq!(plain.encode().len(), 2 + 2 + 1 + 32 + 4);
        // An op 16 body whose only entry has no TTL, a TTL past 100 years, an expiry before
        // its TTL: damage, not a put.
        let mut body = plain.encode();
        body.extend_from_slice(&0u64.to_le_bytes());
        body.extend_from_slice(&0u64.to_le_bytes());
        assert!(ContextMeta::decode(OP_KV_PUT_TTL, &body).is_err());
        for (ttl_ms, expires) in [(TTL_MS_MAX + 1, u64::MAX), (1000, 999), (0, 5)] {
            let mut body = plain.encode();
            body.extend_from_slice(&u64::to_le_bytes(ttl_ms));
            body.extend_from_slice(&u64::to_le_bytes(expires));
            assert!(
                ContextMeta::decode(OP_KV_PUT_TTL, &body).is_err(),
                "{ttl_ms} {expires}"
            );
        }
        // A touch or expire of nothing.
        assert!(ContextMeta::decode(OP_KV_TOUCH, &[0, 0]).is_err());
        assert!(ContextMeta::decode(OP_KV_EXPIRE, &[0, 0]).is_err());
    }
}
