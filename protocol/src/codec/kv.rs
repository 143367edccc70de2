//! KV_PUT, KV_GET, KV_DELETE and KV_LIST (version 2): a context's key-value entries.
//! Layouts in docs/protocol.md; `Family::of` (codec/mod.rs) routes these messages here.

use super::check::{EncodeError, SHORT, context, within};
use super::cursor::Cursor;
use super::writer::{ChunkWriter, short_len};
use crate::error::DecodeError;
use crate::message::*;

/// Reads the body of a key-value request.
pub(super) fn read_request(
    message_type: MessageType,
    cursor: &mut Cursor,
) -> Result<Request, DecodeError> {
    let request = match message_type {
        MessageType::KvPut => {
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
            Request::KvPut {
                context,
                if_absent,
                entries,
            }
        }
        MessageType::KvGet => Request::KvGet {
            context: cursor.context_ref()?,
            key: cursor.short_bytes()?,
            read_flags: cursor.flags(read_flags::ACCEPT_ZSTD, "read_flags")?,
        },
        MessageType::KvDelete => {
            let context = cursor.context_ref()?;
            let count = usize::from(cursor.u16()?);
            let mut keys = Vec::with_capacity(cursor.list_capacity(count, 2));
            for _ in 0..count {
                keys.push(cursor.short_bytes()?);
            }
            Request::KvDelete { context, keys }
        }
        MessageType::KvList => Request::KvList {
            context: cursor.context_ref()?,
            prefix: cursor.short_bytes()?,
            after: cursor.short_bytes()?,
            limit: cursor.u32()?,
        },
        _ => return Err(DecodeError::UnknownMessage(message_type.code())),
    };
    Ok(request)
}

/// What of a key-value request the wire cannot carry (`check_request`).
pub(super) fn check_request(request: &Request) -> Result<(), EncodeError> {
    match request {
        Request::KvPut {
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
        Request::KvGet {
            context: target,
            key,
            ..
        } => {
            context(target)?;
            within("key", key.len(), 0, SHORT, "bytes")
        }
        Request::KvDelete {
            context: target,
            keys,
        } => {
            context(target)?;
            within("keys", keys.len(), 0, SHORT, "keys")?;
            keys.iter()
                .try_for_each(|key| within("key", key.len(), 0, SHORT, "bytes"))
        }
        Request::KvList {
            context: target,
            prefix,
            after,
            ..
        } => {
            context(target)?;
            within("prefix", prefix.len(), 0, SHORT, "bytes")?;
            within("after", after.len(), 0, SHORT, "bytes")
        }
        _ => Ok(()),
    }
}

/// Writes the body of a key-value request (`check_request` passed).
pub(super) fn write_request(w: &mut ChunkWriter, request: &Request) {
    match request {
        Request::KvPut {
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
        Request::KvGet {
            context,
            key,
            read_flags,
        } => {
            w.context_ref(context);
            w.short(key);
            w.u32(*read_flags);
        }
        Request::KvDelete { context, keys } => {
            w.context_ref(context);
            w.u16(short_len(keys.len()));
            for key in keys {
                w.short(key);
            }
        }
        Request::KvList {
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
        _ => unreachable!("Family::of routes only key-value requests here"),
    }
}

/// Reads the body of the answer to a key-value request.
pub(super) fn read_response(
    message_type: MessageType,
    cursor: &mut Cursor,
) -> Result<Response, DecodeError> {
    let response = match message_type {
        MessageType::KvPut | MessageType::KvDelete => Response::Done { message_type },
        MessageType::KvGet => Response::KvValue {
            value_hash: cursor.hash()?,
            payload: cursor.payload()?,
        },
        MessageType::KvList => {
            let count = cursor.list_count()?;
            let mut items = Vec::with_capacity(cursor.list_capacity(count as usize, 38));
            for _ in 0..count {
                items.push(KvItemWire {
                    key: cursor.short_bytes()?,
                    value_hash: cursor.hash()?,
                    value_len: cursor.u32()?,
                });
            }
            Response::KvList { items }
        }
        _ => return Err(DecodeError::UnknownMessage(message_type.response_code())),
    };
    Ok(response)
}

/// Writes the body of the answer to a key-value request.
pub(super) fn write_response(w: &mut ChunkWriter, response: &Response) {
    match response {
        Response::Done { .. } => {}
        Response::KvValue {
            value_hash,
            payload,
        } => {
            w.slice(&value_hash.0);
            w.payload(payload);
        }
        Response::KvList { items } => {
            w.u32(items.len() as u32);
            for item in items {
                w.short(&item.key);
                w.slice(&item.value_hash.0);
                w.u32(item.value_len);
            }
        }
        _ => unreachable!("response_body routes only key-value answers here"),
    }
}
