//! KV_PUT, KV_GET, KV_DELETE and KV_LIST (version 2): a context's key-value entries; and
//! (version 3, issue 34) KV_PUT_EX, KV_GET_EX, KV_LIST_EX and KV_TOUCH: the same with a time
//! to live per entry, refresh on read, and each entry's TTL and expiry in the answers;
//! KV_GET_MANY: several keys' values in one round trip.
//! Layouts in docs/protocol.md.

use bytes::Bytes;

use super::answer::{AnswerLimits, FIXED_ANSWER_BYTES};
use super::check::{EncodeError, SHORT, context, within};
use super::cursor::Cursor;
use super::writer::{ChunkWriter, short_len};
use crate::error::DecodeError;
use crate::message::*;

/// The key-value messages (`Family::of` in codec/mod.rs maps message types to them).
// Named as the message types they stand for (`MessageType`), prefix included.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    KvPut,
    KvGet,
    KvDelete,
    KvList,
    KvPutEx,
    KvGetEx,
    KvListEx,
    KvTouch,
    KvGetMany,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvRequest {
    KvPut(KvPut),
    KvGet(KvGet),
    KvDelete(KvDelete),
    KvList(KvList),
    KvPutEx(KvPutEx),
    KvGetEx(KvGetEx),
    KvListEx(KvListEx),
    KvTouch(KvTouch),
    KvGetMany(KvGetMany),
}

/// Puts key-value entries in one group commit; with `if_absent`, existing keys keep theirs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvPut {
    pub context: ContextRef,
    pub if_absent: bool,
    pub entries: Vec<(Bytes, Bytes)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvGet {
    pub context: ContextRef,
    pub key: Bytes,
    pub read_flags: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvDelete {
    pub context: ContextRef,
    pub keys: Vec<Bytes>,
}

/// Entries whose keys start with `prefix`, in key order, after `after` (empty: from the
/// first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvList {
    pub context: ContextRef,
    pub prefix: Bytes,
    pub after: Bytes,
    pub limit: u32,
}

/// KV_PUT with a TTL (0: none) for every entry it writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvPutEx {
    pub context: ContextRef,
    /// `kv_put_flags`.
    pub put_flags: u8,
    pub ttl_ms: u64,
    pub entries: Vec<(Bytes, Bytes)>,
}

/// KV_GET answering the entry's TTL and expiry; `kv_read_flags::REFRESH` restarts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvGetEx {
    pub context: ContextRef,
    pub key: Bytes,
    pub read_flags: u32,
    /// `kv_read_flags`.
    pub kv_flags: u8,
}

/// KV_LIST answering each entry's TTL and expiry; `kv_read_flags::REFRESH` restarts
/// those of the entries returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvListEx {
    pub context: ContextRef,
    pub prefix: Bytes,
    pub after: Bytes,
    pub limit: u32,
    pub kv_flags: u8,
}

/// Restarts the TTL of each key from now: `ttl_ms` from now on, or (0) each entry's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvTouch {
    pub context: ContextRef,
    pub ttl_ms: u64,
    pub keys: Vec<Bytes>,
}

/// The values of several keys (1..=`KV_ENTRIES_PER_REQUEST_MAX`), each with its TTL and
/// expiry, read from one snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvGetMany {
    pub context: ContextRef,
    /// `read_flags::ACCEPT_ZSTD` only.
    pub read_flags: u32,
    pub keys: Vec<Bytes>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvResponse {
    Done(Done),
    KvValue(KvValue),
    KvListed(KvListed),
    KvValueEx(KvValueEx),
    KvListedEx(KvListedEx),
    KvTouched(KvTouched),
    KvValues(KvValues),
}

/// Answer without a body: KV_PUT and KV_DELETE (the type says which).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Done {
    pub message_type: MessageType,
}

/// Answer to KV_GET: the value's BlobHash and bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvValue {
    pub value_hash: BlobHash,
    pub payload: PayloadWire,
}

/// Answer to KV_LIST.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvListed {
    pub items: Vec<KvItemWire>,
}

/// Answer to KV_GET_EX: the value's BlobHash, TTL, expiry and bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvValueEx {
    pub value_hash: BlobHash,
    pub ttl_ms: u64,
    pub expires_at_unix_ms: u64,
    pub payload: PayloadWire,
}

/// Answer to KV_LIST_EX.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvListedEx {
    pub items: Vec<KvItemExWire>,
}

/// Answer to KV_TOUCH: the live entries among its keys, as they are now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvTouched {
    pub items: Vec<KvItemExWire>,
}

/// Answer to KV_GET_MANY: per key asked, in order, its value (`None`: no such key, or it
/// expired). Fewer values than keys when the rest would pass the response budget: the answer
/// covers the first keys, and the rest are asked again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvValues {
    pub values: Vec<Option<KvValueEx>>,
}

/// The family's enums under the names the message table uses (`message_table!`).
pub type Requests = KvRequest;
pub type Answers = KvResponse;

impl KvRequest {
    pub fn message_type(&self) -> MessageType {
        match self {
            KvRequest::KvPut(KvPut { .. }) => MessageType::KvPut,
            KvRequest::KvGet(KvGet { .. }) => MessageType::KvGet,
            KvRequest::KvDelete(KvDelete { .. }) => MessageType::KvDelete,
            KvRequest::KvList(KvList { .. }) => MessageType::KvList,
            KvRequest::KvPutEx(KvPutEx { .. }) => MessageType::KvPutEx,
            KvRequest::KvGetEx(KvGetEx { .. }) => MessageType::KvGetEx,
            KvRequest::KvListEx(KvListEx { .. }) => MessageType::KvListEx,
            KvRequest::KvTouch(KvTouch { .. }) => MessageType::KvTouch,
            KvRequest::KvGetMany(KvGetMany { .. }) => MessageType::KvGetMany,
        }
    }

    /// The largest answer (see `codec/answer.rs`).
    pub fn answer_bytes_max(&self, limits: &AnswerLimits) -> u64 {
        match self {
            KvRequest::KvPut(KvPut { .. })
            | KvRequest::KvDelete(KvDelete { .. })
            | KvRequest::KvPutEx(KvPutEx { .. }) => FIXED_ANSWER_BYTES,
            // A value with its payload; a page of keys.
            KvRequest::KvGet(KvGet { .. })
            | KvRequest::KvList(KvList { .. })
            | KvRequest::KvGetEx(KvGetEx { .. })
            | KvRequest::KvListEx(KvListEx { .. })
            | KvRequest::KvGetMany(KvGetMany { .. }) => limits.largest(),
            // At most one item (≤ 310 bytes) per key sent.
            KvRequest::KvTouch(KvTouch { keys, .. }) => {
                FIXED_ANSWER_BYTES + 4 + keys.len() as u64 * KV_ITEM_EX_BYTES_MAX
            }
        }
    }

    pub(super) fn read(kind: Kind, cursor: &mut Cursor) -> Result<KvRequest, DecodeError> {
        Ok(match kind {
            Kind::KvPut => {
                let context = cursor.context_ref()?;
                let if_absent = match cursor.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(cursor.invalid("mode", "not 0 (replace) or 1 (if absent)")),
                };
                KvRequest::KvPut(KvPut {
                    context,
                    if_absent,
                    entries: read_entries(cursor)?,
                })
            }
            Kind::KvPutEx => {
                let context = cursor.context_ref()?;
                let put_flags = cursor.flags_u8(kv_put_flags::KNOWN, "put_flags")?;
                KvRequest::KvPutEx(KvPutEx {
                    context,
                    put_flags,
                    ttl_ms: cursor.u64()?,
                    entries: read_entries(cursor)?,
                })
            }
            Kind::KvGetEx => KvRequest::KvGetEx(KvGetEx {
                context: cursor.context_ref()?,
                key: cursor.short_bytes()?,
                read_flags: cursor.flags(read_flags::ACCEPT_ZSTD, "read_flags")?,
                kv_flags: read_kv_flags(cursor)?,
            }),
            Kind::KvListEx => KvRequest::KvListEx(KvListEx {
                context: cursor.context_ref()?,
                prefix: cursor.short_bytes()?,
                after: cursor.short_bytes()?,
                limit: cursor.u32()?,
                kv_flags: read_kv_flags(cursor)?,
            }),
            Kind::KvTouch => KvRequest::KvTouch(KvTouch {
                context: cursor.context_ref()?,
                ttl_ms: cursor.u64()?,
                keys: read_keys(cursor)?,
            }),
            Kind::KvGetMany => KvRequest::KvGetMany(KvGetMany {
                context: cursor.context_ref()?,
                read_flags: cursor.flags(read_flags::ACCEPT_ZSTD, "read_flags")?,
                keys: read_keys(cursor)?,
            }),
            Kind::KvGet => KvRequest::KvGet(KvGet {
                context: cursor.context_ref()?,
                key: cursor.short_bytes()?,
                read_flags: cursor.flags(read_flags::ACCEPT_ZSTD, "read_flags")?,
            }),
            Kind::KvDelete => KvRequest::KvDelete(KvDelete {
                context: cursor.context_ref()?,
                keys: read_keys(cursor)?,
            }),
            Kind::KvList => KvRequest::KvList(KvList {
                context: cursor.context_ref()?,
                prefix: cursor.short_bytes()?,
                after: cursor.short_bytes()?,
                limit: cursor.u32()?,
            }),
        })
    }

    /// What the wire cannot carry (`check_request`).
    pub(super) fn check(&self) -> Result<(), EncodeError> {
        match self {
            KvRequest::KvPut(KvPut {
                context: target,
                entries,
                ..
            })
            | KvRequest::KvPutEx(KvPutEx {
                context: target,
                entries,
                ..
            }) => {
                context(target)?;
                within("entries", entries.len(), 0, SHORT, "entries")?;
                entries.iter().try_for_each(|(key, value)| {
                    within("key", key.len(), 0, SHORT, "bytes")?;
                    within("value", value.len(), 0, u64::from(u32::MAX), "bytes")
                })
            }
            KvRequest::KvGet(KvGet {
                context: target,
                key,
                ..
            })
            | KvRequest::KvGetEx(KvGetEx {
                context: target,
                key,
                ..
            }) => {
                context(target)?;
                within("key", key.len(), 0, SHORT, "bytes")
            }
            KvRequest::KvDelete(KvDelete {
                context: target,
                keys,
            })
            | KvRequest::KvTouch(KvTouch {
                context: target,
                keys,
                ..
            })
            | KvRequest::KvGetMany(KvGetMany {
                context: target,
                keys,
                ..
            }) => {
                context(target)?;
                within("keys", keys.len(), 0, SHORT, "keys")?;
                keys.iter()
                    .try_for_each(|key| within("key", key.len(), 0, SHORT, "bytes"))
            }
            KvRequest::KvList(KvList {
                context: target,
                prefix,
                after,
                ..
            })
            | KvRequest::KvListEx(KvListEx {
                context: target,
                prefix,
                after,
                ..
            }) => {
                context(target)?;
                within("prefix", prefix.len(), 0, SHORT, "bytes")?;
                within("after", after.len(), 0, SHORT, "bytes")
            }
        }
    }

    /// The body (`check` passed).
    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            KvRequest::KvPut(put) => {
                w.context_ref(&put.context);
                w.u8(u8::from(put.if_absent));
                write_entries(w, &put.entries);
            }
            KvRequest::KvPutEx(put) => {
                write_kv_put_ex(w, &put.context, put.put_flags, put.ttl_ms, &put.entries)
            }
            KvRequest::KvGetEx(get) => {
                w.context_ref(&get.context);
                w.short(&get.key);
                w.u32(get.read_flags);
                w.u8(get.kv_flags);
            }
            KvRequest::KvListEx(list) => write_kv_list_ex(
                w,
                &list.context,
                &list.prefix,
                &list.after,
                list.limit,
                list.kv_flags,
            ),
            KvRequest::KvTouch(touch) => {
                w.context_ref(&touch.context);
                w.u64(touch.ttl_ms);
                write_keys(w, &touch.keys);
            }
            KvRequest::KvGet(get) => {
                w.context_ref(&get.context);
                w.short(&get.key);
                w.u32(get.read_flags);
            }
            KvRequest::KvGetMany(get) => {
                w.context_ref(&get.context);
                w.u32(get.read_flags);
                write_keys(w, &get.keys);
            }
            KvRequest::KvDelete(delete) => {
                w.context_ref(&delete.context);
                write_keys(w, &delete.keys);
            }
            KvRequest::KvList(list) => {
                w.context_ref(&list.context);
                w.short(&list.prefix);
                w.short(&list.after);
                w.u32(list.limit);
            }
        }
    }
}

impl KvResponse {
    /// The request type this answers.
    pub fn message_type(&self) -> MessageType {
        match self {
            KvResponse::Done(Done { message_type }) => *message_type,
            KvResponse::KvValue(KvValue { .. }) => MessageType::KvGet,
            KvResponse::KvListed(KvListed { .. }) => MessageType::KvList,
            KvResponse::KvValueEx(KvValueEx { .. }) => MessageType::KvGetEx,
            KvResponse::KvListedEx(KvListedEx { .. }) => MessageType::KvListEx,
            KvResponse::KvTouched(KvTouched { .. }) => MessageType::KvTouch,
            KvResponse::KvValues(KvValues { .. }) => MessageType::KvGetMany,
        }
    }

    pub(super) fn read(
        kind: Kind,
        message_type: MessageType,
        cursor: &mut Cursor,
    ) -> Result<KvResponse, DecodeError> {
        Ok(match kind {
            Kind::KvPut | Kind::KvDelete | Kind::KvPutEx => KvResponse::Done(Done { message_type }),
            Kind::KvGetEx => KvResponse::KvValueEx(read_value_ex(cursor)?),
            Kind::KvGetMany => KvResponse::KvValues(read_values(cursor)?),
            Kind::KvListEx => KvResponse::KvListedEx(KvListedEx {
                items: read_items_ex(cursor)?,
            }),
            Kind::KvTouch => KvResponse::KvTouched(KvTouched {
                items: read_items_ex(cursor)?,
            }),
            Kind::KvGet => KvResponse::KvValue(KvValue {
                value_hash: cursor.hash()?,
                payload: cursor.payload()?,
            }),
            Kind::KvList => {
                let count = cursor.list_count()?;
                let mut items = Vec::with_capacity(cursor.list_capacity(count as usize, 38));
                for _ in 0..count {
                    items.push(KvItemWire {
                        key: cursor.short_bytes()?,
                        value_hash: cursor.hash()?,
                        value_len: cursor.u32()?,
                    });
                }
                KvResponse::KvListed(KvListed { items })
            }
        })
    }

    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            KvResponse::Done(Done { .. }) => {}
            KvResponse::KvValue(KvValue {
                value_hash,
                payload,
            }) => {
                w.slice(&value_hash.0);
                w.payload(payload);
            }
            KvResponse::KvListed(KvListed { items }) => {
                w.u32(items.len() as u32);
                for item in items {
                    w.short(&item.key);
                    w.slice(&item.value_hash.0);
                    w.u32(item.value_len);
                }
            }
            KvResponse::KvValueEx(value) => write_value_ex(w, value),
            KvResponse::KvValues(KvValues { values }) => {
                w.u16(short_len(values.len()));
                for value in values {
                    match value {
                        None => w.u8(0),
                        Some(value) => {
                            w.u8(1);
                            write_value_ex(w, value);
                        }
                    }
                }
            }
            KvResponse::KvListedEx(KvListedEx { items })
            | KvResponse::KvTouched(KvTouched { items }) => {
                w.u32(items.len() as u32);
                for item in items {
                    w.short(&item.key);
                    w.slice(&item.value_hash.0);
                    w.u32(item.value_len);
                    w.u64(item.ttl_ms);
                    w.u64(item.expires_at_unix_ms);
                }
            }
        }
    }
}

/// KV_VALUE_EX: `value_hash [32], u64 ttl_ms, u64 expires_at_unix_ms`, PAYLOAD.
fn read_value_ex(cursor: &mut Cursor) -> Result<KvValueEx, DecodeError> {
    Ok(KvValueEx {
        value_hash: cursor.hash()?,
        ttl_ms: cursor.u64()?,
        expires_at_unix_ms: cursor.u64()?,
        payload: cursor.payload()?,
    })
}

fn write_value_ex(w: &mut ChunkWriter, value: &KvValueEx) {
    w.slice(&value.value_hash.0);
    w.u64(value.ttl_ms);
    w.u64(value.expires_at_unix_ms);
    w.payload(&value.payload);
}

/// KV_VALUES: `u16 count`, then per key `u8 found` (0 or 1) and, when found, a KV_VALUE_EX.
fn read_values(cursor: &mut Cursor) -> Result<KvValues, DecodeError> {
    let count = usize::from(cursor.u16()?);
    let mut values = Vec::with_capacity(cursor.list_capacity(count, 1));
    for _ in 0..count {
        values.push(match cursor.u8()? {
            0 => None,
            1 => Some(read_value_ex(cursor)?),
            _ => return Err(cursor.invalid("found", "not 0 (no such key) or 1")),
        });
    }
    Ok(KvValues { values })
}

/// The most bytes one KV_LIST_EX / KV_TOUCH item takes: a 256-byte key (the engine's limit)
/// with its length, hash, length, TTL and expiry.
const KV_ITEM_EX_BYTES_MAX: u64 = 2 + 256 + 32 + 4 + 8 + 8;

/// `u16 count`, then per entry `u16 key_len, key, u32 value_len, value` (KV_PUT, KV_PUT_EX).
fn read_entries(cursor: &mut Cursor) -> Result<Vec<(Bytes, Bytes)>, DecodeError> {
    let count = usize::from(cursor.u16()?);
    let mut entries = Vec::with_capacity(cursor.list_capacity(count, 6));
    for _ in 0..count {
        let key = cursor.short_bytes()?;
        let value_len = cursor.u32()? as usize;
        entries.push((key, cursor.bytes(value_len)?));
    }
    Ok(entries)
}

/// KV_PUT_EX: `CONTEXT_REF, u8 put_flags, u64 ttl_ms`, then the entries.
fn write_kv_put_ex(
    w: &mut ChunkWriter,
    context: &ContextRef,
    put_flags: u8,
    ttl_ms: u64,
    entries: &[(Bytes, Bytes)],
) {
    w.context_ref(context);
    w.u8(put_flags);
    w.u64(ttl_ms);
    write_entries(w, entries);
}

/// KV_LIST_EX: `CONTEXT_REF, u16 len prefix, u16 len after, u32 limit, u8 kv_flags`.
fn write_kv_list_ex(
    w: &mut ChunkWriter,
    context: &ContextRef,
    prefix: &[u8],
    after: &[u8],
    limit: u32,
    kv_flags: u8,
) {
    w.context_ref(context);
    w.short(prefix);
    w.short(after);
    w.u32(limit);
    w.u8(kv_flags);
}

fn write_entries(w: &mut ChunkWriter, entries: &[(Bytes, Bytes)]) {
    w.u16(short_len(entries.len()));
    for (key, value) in entries {
        w.short(key);
        w.u32(value.len() as u32);
        w.data(value);
    }
}

/// `u16 count`, then per key `u16 key_len, key` (KV_DELETE, KV_TOUCH).
fn read_keys(cursor: &mut Cursor) -> Result<Vec<Bytes>, DecodeError> {
    let count = usize::from(cursor.u16()?);
    let mut keys = Vec::with_capacity(cursor.list_capacity(count, 2));
    for _ in 0..count {
        keys.push(cursor.short_bytes()?);
    }
    Ok(keys)
}

fn write_keys(w: &mut ChunkWriter, keys: &[Bytes]) {
    w.u16(short_len(keys.len()));
    for key in keys {
        w.short(key);
    }
}

fn read_kv_flags(cursor: &mut Cursor) -> Result<u8, DecodeError> {
    let kv_flags = cursor.flags_u8(kv_read_flags::KNOWN, "kv_flags")?;
    Ok(kv_flags)
}

/// `u32 count`, then per item `u16 key_len, key, hash[32], u32 value_len, u64 ttl_ms,
/// u64 expires_at_unix_ms` (KV_LIST_EX and KV_TOUCH answers).
fn read_items_ex(cursor: &mut Cursor) -> Result<Vec<KvItemExWire>, DecodeError> {
    let count = cursor.list_count()?;
    let mut items = Vec::with_capacity(cursor.list_capacity(count as usize, 54));
    for _ in 0..count {
        items.push(KvItemExWire {
            key: cursor.short_bytes()?,
            value_hash: cursor.hash()?,
            value_len: cursor.u32()?,
            ttl_ms: cursor.u64()?,
            expires_at_unix_ms: cursor.u64()?,
        });
    }
    Ok(items)
}
