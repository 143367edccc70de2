//! Payloads by hash: GET_BLOB, HAS_BLOBS and PUT_CHUNKED (issue 16: a payload as its chunks,
//! sending only those the server lacks).
//! Layouts in docs/protocol.md; `Family::of` (codec/mod.rs) routes these messages here.

use super::check::{EncodeError, within};
use super::cursor::Cursor;
use super::writer::ChunkWriter;
use crate::error::DecodeError;
use crate::message::*;

/// Reads the body of a blob request.
pub(super) fn read_request(
    message_type: MessageType,
    cursor: &mut Cursor,
) -> Result<Request, DecodeError> {
    let request = match message_type {
        MessageType::GetBlob => {
            let hash = cursor.hash()?;
            let read_flags = cursor.flags(read_flags::ACCEPT_ZSTD, "read_flags")?;
            cursor.zero(4, "reserved")?;
            Request::GetBlob { hash, read_flags }
        }
        MessageType::HasBlobs => {
            let count = cursor.list_count()?;
            cursor.zero(4, "reserved")?;
            let mut hashes = Vec::with_capacity((count as usize).min(4096));
            for _ in 0..count {
                hashes.push(cursor.hash()?);
            }
            Request::HasBlobs { hashes }
        }
        MessageType::PutChunked => read_put_chunked(cursor)?,
        _ => return Err(DecodeError::UnknownMessage(message_type.code())),
    };
    Ok(request)
}

/// PUT_CHUNKED's body: `hash, base_hash, u32 base_kept, u32 chunk_count, chunk_count ×
/// (hash, u32 len), u32 sent_count, sent_count × (u32 index, u32 len, len bytes)`;
/// `base_kept` 0 with an all-zero `base_hash` means no base. Every rule `check_request`
/// applies is checked here too, so whatever decodes encodes back.
fn read_put_chunked(cursor: &mut Cursor) -> Result<Request, DecodeError> {
    let payload_hash = cursor.hash()?;
    let base = read_chunk_base(cursor)?;
    let chunks = read_chunks(cursor, base.map_or(0, |base| base.kept))?;
    let sent = read_sent_chunks(cursor, &chunks)?;
    Ok(Request::PutChunked {
        payload_hash,
        base,
        chunks,
        sent,
    })
}

/// `base_hash, u32 base_kept`: both zero for no base, both set for one.
fn read_chunk_base(cursor: &mut Cursor) -> Result<Option<ChunkBaseWire>, DecodeError> {
    let base_hash = cursor.hash()?;
    let base_kept = cursor.u32()?;
    match (base_kept, base_hash.0 == [0u8; 32]) {
        (0, true) => Ok(None),
        (0, false) => Err(cursor.invalid("base_hash", "a base that keeps no chunk")),
        (_, true) => Err(cursor.invalid("base_hash", "kept chunks of no base")),
        (kept, false) => Ok(Some(ChunkBaseWire {
            hash: base_hash,
            kept,
        })),
    }
}

/// `u32 chunk_count` (1 or more; with the base's `base_kept`, at most
/// `CHUNKS_PER_PAYLOAD_MAX`), then each chunk's `hash, u32 len` (1..=`CHUNK_BYTES_MAX`).
fn read_chunks(cursor: &mut Cursor, base_kept: u32) -> Result<Vec<ChunkWire>, DecodeError> {
    let chunk_count = cursor.u32()?;
    if chunk_count == 0 {
        return Err(cursor.invalid("chunk_count", "a payload of no chunks"));
    }
    let all_chunks = u64::from(chunk_count) + u64::from(base_kept);
    if all_chunks > u64::from(CHUNKS_PER_PAYLOAD_MAX) {
        return Err(cursor.too_large("chunk_count", all_chunks, u64::from(CHUNKS_PER_PAYLOAD_MAX)));
    }
    let count = chunk_count as usize;
    let mut chunks = Vec::with_capacity(cursor.list_capacity(count, CHUNK_ENTRY_BYTES));
    for _ in 0..count {
        let hash = cursor.hash()?;
        let len = cursor.u32()?;
        if len == 0 {
            return Err(cursor.invalid("chunk len", "an empty chunk"));
        }
        if len > CHUNK_BYTES_MAX {
            return Err(cursor.too_large("chunk len", u64::from(len), u64::from(CHUNK_BYTES_MAX)));
        }
        chunks.push(ChunkWire { hash, len });
    }
    Ok(chunks)
}

/// `u32 sent_count` (at most one per chunk), then each sent chunk's `u32 index` (strictly
/// increasing, into `chunks`), `u32 len` (its chunk's) and bytes (a slice of the frame).
fn read_sent_chunks(
    cursor: &mut Cursor,
    chunks: &[ChunkWire],
) -> Result<Vec<SentChunkWire>, DecodeError> {
    // `read_chunks` read at most `CHUNKS_PER_PAYLOAD_MAX` chunks.
    let chunk_count = chunks.len() as u32;
    let sent_count = cursor.u32()?;
    if sent_count > chunk_count {
        return Err(cursor.too_large("sent_count", u64::from(sent_count), u64::from(chunk_count)));
    }
    let mut sent = Vec::with_capacity(cursor.list_capacity(sent_count as usize, 9));
    // The lowest index the next sent chunk may have (indexes strictly increase).
    let mut index_min = 0u32;
    for _ in 0..sent_count {
        let index = cursor.u32()?;
        let Some(chunk) = chunks.get(index as usize) else {
            return Err(cursor.too_large(
                "sent index",
                u64::from(index),
                u64::from(chunk_count - 1),
            ));
        };
        if index < index_min {
            return Err(cursor.invalid("sent index", "indexes must strictly increase"));
        }
        let len = cursor.u32()?;
        if len != chunk.len {
            return Err(cursor.invalid("sent len", "differs from its chunk's len"));
        }
        sent.push(SentChunkWire {
            index,
            bytes: cursor.bytes(len as usize)?,
        });
        index_min = index.saturating_add(1);
    }
    Ok(sent)
}

/// What of a blob request the wire cannot carry (`check_request`).
pub(super) fn check_request(request: &Request) -> Result<(), EncodeError> {
    match request {
        Request::HasBlobs { hashes } => within(
            "hashes",
            hashes.len(),
            0,
            u64::from(LIST_ITEMS_LIMIT),
            "hashes",
        ),
        Request::PutChunked {
            base, chunks, sent, ..
        } => {
            let kept = base.map_or(0, |base| u64::from(base.kept));
            if base.is_some_and(|base| base.kept == 0 || base.hash.0 == [0u8; 32]) {
                return Err(EncodeError {
                    field: "base (a stored blob's hash, keeping 1 or more chunks)",
                    len: 0,
                    min: 1,
                    max: u64::from(CHUNKS_PER_PAYLOAD_MAX),
                    unit: "chunks",
                });
            }
            let chunk_count = u64::from(CHUNKS_PER_PAYLOAD_MAX).saturating_sub(kept);
            // A base's kept chunks count against the limit too.
            within("chunks", chunks.len(), 1, chunk_count, "chunks")?;
            chunks.iter().try_for_each(|chunk| {
                let len = chunk.len as usize;
                within("chunk len", len, 1, u64::from(CHUNK_BYTES_MAX), "bytes")
            })?;
            within("sent chunks", sent.len(), 0, chunks.len() as u64, "chunks")?;
            // Strictly increasing indexes into `chunks`, each with exactly its chunk's bytes.
            let mut index_min = 0u64;
            let index_max = chunks.len() as u64 - 1;
            sent.iter().try_for_each(|chunk| {
                let index = chunk.index as usize;
                let field = "sent index (strictly increasing, into chunks)";
                within(field, index, index_min, index_max, "index")?;
                index_min = u64::from(chunk.index) + 1;
                let len = chunks.get(index).map_or(0, |entry| u64::from(entry.len));
                let field = "sent chunk bytes (its chunk's len)";
                within(field, chunk.bytes.len(), len, len, "bytes")
            })
        }
        _ => Ok(()),
    }
}

/// Writes the body of a blob request (`check_request` passed).
pub(super) fn write_request(w: &mut ChunkWriter, request: &Request) {
    match request {
        Request::GetBlob { hash, read_flags } => {
            w.slice(&hash.0);
            w.u32(*read_flags);
            w.zero(4);
        }
        Request::HasBlobs { hashes } => {
            w.u32(hashes.len() as u32);
            w.zero(4);
            for hash in hashes {
                w.slice(&hash.0);
            }
        }
        Request::PutChunked {
            payload_hash,
            base,
            chunks,
            sent,
        } => {
            w.slice(&payload_hash.0);
            match base {
                Some(base) => {
                    w.slice(&base.hash.0);
                    w.u32(base.kept);
                }
                None => {
                    w.zero(32);
                    w.u32(0);
                }
            }
            w.u32(chunks.len() as u32);
            for chunk in chunks {
                w.slice(&chunk.hash.0);
                w.u32(chunk.len);
            }
            w.u32(sent.len() as u32);
            for chunk in sent {
                w.u32(chunk.index);
                w.u32(chunk.bytes.len() as u32);
                w.data(&chunk.bytes);
            }
        }
        _ => unreachable!("Family::of routes only blob requests here"),
    }
}

/// Reads the body of the answer to a blob request.
pub(super) fn read_response(
    message_type: MessageType,
    cursor: &mut Cursor,
) -> Result<Response, DecodeError> {
    let response = match message_type {
        MessageType::GetBlob => Response::Blob(cursor.payload()?),
        MessageType::HasBlobs => {
            let count = cursor.list_count()?;
            cursor.zero(4, "reserved")?;
            let mut present = Vec::with_capacity((count as usize).min(4096));
            for _ in 0..count {
                present.push(match cursor.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(cursor.invalid("present", "not 0 or 1")),
                });
            }
            Response::HasBlobs { present }
        }
        MessageType::PutChunked => {
            let response = Response::ChunkedStored {
                payload_hash: cursor.hash()?,
                payload_len: cursor.u64()?,
                already_stored: cursor.bool("already_stored")?,
            };
            cursor.zero(7, "reserved")?;
            response
        }
        _ => return Err(DecodeError::UnknownMessage(message_type.response_code())),
    };
    Ok(response)
}

/// Writes the body of the answer to a blob request.
pub(super) fn write_response(w: &mut ChunkWriter, response: &Response) {
    match response {
        Response::Blob(payload) => w.payload(payload),
        Response::HasBlobs { present } => {
            w.u32(present.len() as u32);
            w.zero(4);
            for flag in present {
                w.u8(u8::from(*flag));
            }
        }
        Response::ChunkedStored {
            payload_hash,
            payload_len,
            already_stored,
        } => {
            w.slice(&payload_hash.0);
            w.u64(*payload_len);
            w.u8(u8::from(*already_stored));
            w.zero(7);
        }
        _ => unreachable!("response_body routes only blob answers here"),
    }
}
