//! KV_PUT, KV_GET, KV_DELETE and KV_LIST (version 2): a context's key-value entries. Layouts
//! in docs/protocol.md.

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
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvRequest {
    /// Puts key-value entries in one group commit; with `if_absent`, existing keys keep theirs.
    KvPut {
        context: ContextRef,
        if_absent: bool,
        entries: Vec<(Bytes, Bytes)>,
    },
    KvGet {
        context: ContextRef,
        key: Bytes,
        read_flags: u32,
    },
    KvDelete {
        context: ContextRef,
        keys: Vec<Bytes>,
    },
    /// Entries whose keys start with `prefix`, in key order, after `after` (empty: from the
    /// first).
    KvList {
        context: ContextRef,
        prefix: Bytes,
        after: Bytes,
        limit: u32,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvResponse {
    /// Answer without a body: KV_PUT and KV_DELETE (the type says which).
    Done { message_type: MessageType },
    /// Answer to KV_GET: the value's BlobHash and bytes.
    KvValue {
        value_hash: BlobHash,
        payload: PayloadWire,
    },
    /// Answer to KV_LIST.
    KvList { items: Vec<KvItemWire> },
}

impl KvRequest {
    pub fn message_type(&self) -> MessageType {
        match self {
            KvRequest::KvPut { .. } => MessageType::KvPut,
            KvRequest::KvGet { .. } => MessageType::KvGet,
            KvRequest::KvDelete { .. } => MessageType::KvDelete,
            KvRequest::KvList { .. } => MessageType::KvList,
        }
    }

    /// The largest answer (see `codec/answer.rs`).
    pub fn answer_bytes_max(&self, limits: &AnswerLimits) -> u64 {
        match self {
            KvRequest::KvPut { .. } | KvRequest::KvDelete { .. } => FIXED_ANSWER_BYTES,
            // A value with its payload; a page of keys.
            KvRequest::KvGet { .. } | KvRequest::KvList { .. } => limits.largest(),
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
                let count = usize::from(cursor.u16()?);
                let mut entries = Vec::with_capacity(cursor.list_capacity(count, 6));
                for _ in 0..count {
                    let key = cursor.short_bytes()?;
                    let value_len = cursor.u32()? as usize;
                    entries.push((key, cursor.bytes(value_len)?));
                }
                KvRequest::KvPut {
                    context,
                    if_absent,
                    entries,
                }
            }
            Kind::KvGet => KvRequest::KvGet {
                context: cursor.context_ref()?,
                key: cursor.short_bytes()?,
                read_flags: cursor.flags(read_flags::ACCEPT_ZSTD, "read_flags")?,
            },
            Kind::KvDelete => {
                let context = cursor.context_ref()?;
                let count = usize::from(cursor.u16()?);
                let mut keys = Vec::with_capacity(cursor.list_capacity(count, 2));
                for _ in 0..count {
                    keys.push(cursor.short_bytes()?);
                }
                KvRequest::KvDelete { context, keys }
            }
            Kind::KvList => KvRequest::KvList {
                context: cursor.context_ref()?,
                prefix: cursor.short_bytes()?,
                after: cursor.short_bytes()?,
                limit: cursor.u32()?,
            },
        })
    }

    /// What the wire cannot carry (`check_request`).
    pub(super) fn check(&self) -> Result<(), EncodeError> {
        match self {
            KvRequest::KvPut {
                context: target,
                entries,
                ..
            } => {
                context(target)?;
                within("entries", entries.len(), 0, SHORT, "entries")?;
                entries.iter().try_for_each(|(key, value)| {
                    within("key", key.len(), 0, SHORT, "bytes")?;
                    within("value", value.len(), 0, u64::from(u32::MAX), "bytes")
                })
            }
            KvRequest::KvGet {
                context: target,
                key,
                ..
            } => {
                context(target)?;
                within("key", key.len(), 0, SHORT, "bytes")
            }
            KvRequest::KvDelete {
                context: target,
                keys,
            } => {
                context(target)?;
                within("keys", keys.len(), 0, SHORT, "keys")?;
                keys.iter()
                    .try_for_each(|key| within("key", key.len(), 0, SHORT, "bytes"))
            }
            KvRequest::KvList {
                context: target,
                prefix,
                after,
                ..
            } => {
                context(target)?;
                within("prefix", prefix.len(), 0, SHORT, "bytes")?;
                within("after", after.len(), 0, SHORT, "bytes")
            }
        }
    }

    /// The body (`check` passed).
    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            KvRequest::KvPut {
                context,
                if_absent,
                entries,
            } => {
                w.context_ref(context);
                w.u8(u8::from(*if_absent));
                w.u16(short_len(entries.len()));
                for (key, value) in entries {
                    w.short(key);
                    w.u32(value.len() as u32);
                    w.data(value);
                }
            }
            KvRequest::KvGet {
                context,
                key,
                read_flags,
            } => {
                w.context_ref(context);
                w.short(key);
                w.u32(*read_flags);
            }
            KvRequest::KvDelete { context, keys } => {
                w.context_ref(context);
                w.u16(short_len(keys.len()));
                for key in keys {
                    w.short(key);
                }
            }
            KvRequest::KvList {
                context,
                prefix,
                after,
                limit,
            } => {
                w.context_ref(context);
                w.short(prefix);
                w.short(after);
                w.u32(*limit);
            }
        }
    }
}

impl KvResponse {
    /// The request type this answers.
    pub fn message_type(&self) -> MessageType {
        match self {
            KvResponse::Done { message_type } => *message_type,
            KvResponse::KvValue { .. } => MessageType::KvGet,
            KvResponse::KvList { .. } => MessageType::KvList,
        }
    }

    pub(super) fn read(
        kind: Kind,
        message_type: MessageType,
        cursor: &mut Cursor,
    ) -> Result<KvResponse, DecodeError> {
        Ok(match kind {
            Kind::KvPut | Kind::KvDelete => KvResponse::Done { message_type },
            Kind::KvGet => KvResponse::KvValue {
                value_hash: cursor.hash()?,
                payload: cursor.payload()?,
            },
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
                KvResponse::KvList { items }
            }
        })
    }

    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            KvResponse::Done { .. } => {}
            KvResponse::KvValue {
                value_hash,
                payload,
            } => {
                w.slice(&value_hash.0);
                w.payload(payload);
            }
            KvResponse::KvList { items } => {
                w.u32(items.len() as u32);
                for item in items {
                    w.short(&item.key);
                    w.slice(&item.value_hash.0);
                    w.u32(item.value_len);
                }
            }
        }
    }
}
