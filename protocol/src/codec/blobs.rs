//! Payloads by hash: GET_BLOB, HAS_BLOBS and PUT_CHUNKED (issue 16: a payload as its chunks,
//! sending only those the server lacks). Layouts in docs/protocol.md.

use super::answer::{AnswerLimits, ERROR_ANSWER_BYTES_MAX, FIXED_ANSWER_BYTES};
use super::check::{EncodeError, within};
use super::cursor::Cursor;
use super::writer::ChunkWriter;
use crate::error::DecodeError;
use crate::message::*;

/// The blob messages (`Family::of` in codec/mod.rs maps message types to them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    GetBlob,
    HasBlobs,
    PutChunked,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlobsRequest {
    GetBlob(GetBlob),
    HasBlobs(HasBlobs),
    PutChunked(PutChunked),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetBlob {
    pub hash: BlobHash,
    pub read_flags: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HasBlobs {
    pub hashes: Vec<BlobHash>,
}

/// Stores a payload given as its content-defined chunks, in order (issue 16): the first
/// `base.kept` chunks of a stored chunked blob (if `base`), then `chunks`; `sent` carries
/// the bytes of some of `chunks` (strictly increasing indexes into `chunks`), the server
/// has every other one already. The chunks rebuild the payload, which must hash to
/// `payload_hash`. Then APPEND_TURN_BY_HASH names it: a growing state costs the bytes it
/// grew by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutChunked {
    pub payload_hash: BlobHash,
    pub base: Option<ChunkBaseWire>,
    pub chunks: Vec<ChunkWire>,
    pub sent: Vec<SentChunkWire>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlobsResponse {
    Blob(PayloadWire),
    BlobsHeld(BlobsHeld),
    ChunkedStored(ChunkedStored),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobsHeld {
    pub present: Vec<bool>,
}

/// Answer to PUT_CHUNKED (CHUNKED_STORED, 48 bytes): the payload's hash and length, and
/// whether it was stored before this request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkedStored {
    pub payload_hash: BlobHash,
    pub payload_len: u64,
    pub already_stored: bool,
}

/// The family's enums under the names the message table uses (`message_table!`).
pub type Requests = BlobsRequest;
pub type Answers = BlobsResponse;

impl BlobsRequest {
    pub fn message_type(&self) -> MessageType {
        match self {
            BlobsRequest::GetBlob(GetBlob { .. }) => MessageType::GetBlob,
            BlobsRequest::HasBlobs(HasBlobs { .. }) => MessageType::HasBlobs,
            BlobsRequest::PutChunked(PutChunked { .. }) => MessageType::PutChunked,
        }
    }

    /// The largest answer (see `codec/answer.rs`).
    pub fn answer_bytes_max(&self, limits: &AnswerLimits) -> u64 {
        match self {
            BlobsRequest::GetBlob(GetBlob { .. }) => limits.blob(),
            BlobsRequest::HasBlobs(HasBlobs { hashes }) => {
                hashes.len() as u64 + ERROR_ANSWER_BYTES_MAX
            }
            BlobsRequest::PutChunked(PutChunked { .. }) => FIXED_ANSWER_BYTES,
        }
    }

    pub(super) fn read(kind: Kind, cursor: &mut Cursor) -> Result<BlobsRequest, DecodeError> {
        Ok(match kind {
            Kind::GetBlob => {
                let hash = cursor.hash()?;
                let read_flags = cursor.flags(read_flags::ACCEPT_ZSTD, "read_flags")?;
                cursor.zero(4, "reserved")?;
                BlobsRequest::GetBlob(GetBlob { hash, read_flags })
            }
            Kind::HasBlobs => {
                let count = cursor.list_count()?;
                cursor.zero(4, "reserved")?;
                let mut hashes = Vec::with_capacity((count as usize).min(4096));
                for _ in 0..count {
                    hashes.push(cursor.hash()?);
                }
                BlobsRequest::HasBlobs(HasBlobs { hashes })
            }
            Kind::PutChunked => read_put_chunked(cursor)?,
        })
    }

    /// What the wire cannot carry (`check_request`).
    pub(super) fn check(&self) -> Result<(), EncodeError> {
        match self {
            BlobsRequest::GetBlob(GetBlob { .. }) => Ok(()),
            BlobsRequest::HasBlobs(HasBlobs { hashes }) => within(
                "hashes",
                hashes.len(),
                0,
                u64::from(LIST_ITEMS_LIMIT),
                "hashes",
            ),
            BlobsRequest::PutChunked(PutChunked {
                base, chunks, sent, ..
            }) => check_put_chunked(base.as_ref(), chunks, sent),
        }
    }

    /// The body (`check` passed).
    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            BlobsRequest::GetBlob(GetBlob { hash, read_flags }) => {
                w.slice(&hash.0);
                w.u32(*read_flags);
                w.zero(4);
            }
            BlobsRequest::HasBlobs(HasBlobs { hashes }) => {
                w.u32(hashes.len() as u32);
                w.zero(4);
                for hash in hashes {
                    w.slice(&hash.0);
                }
            }
            BlobsRequest::PutChunked(PutChunked {
                payload_hash,
                base,
                chunks,
                sent,
            }) => {
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
        }
    }
}

/// PUT_CHUNKED's body: `hash, base_hash, u32 base_kept, u32 chunk_count, chunk_count ×
/// (hash, u32 len), u32 sent_count, sent_count × (u32 index, u32 len, len bytes)`;
/// `base_kept` 0 with an all-zero `base_hash` means no base. Every rule `check_request`
/// applies is checked here too, so whatever decodes encodes back.
fn read_put_chunked(cursor: &mut Cursor) -> Result<BlobsRequest, DecodeError> {
    let payload_hash = cursor.hash()?;
    let base = read_chunk_base(cursor)?;
    let chunks = read_chunks(cursor, base.map_or(0, |base| base.kept))?;
    let sent = read_sent_chunks(cursor, &chunks)?;
    Ok(BlobsRequest::PutChunked(PutChunked {
        payload_hash,
        base,
        chunks,
        sent,
    }))
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

/// PUT_CHUNKED: a base keeps 1 or more chunks of a stored blob; 1 or more chunks follow, all
/// of them together at most `CHUNKS_PER_PAYLOAD_MAX`; sent chunks at strictly increasing
/// indexes, each exactly as long as its chunk.
fn check_put_chunked(
    base: Option<&ChunkBaseWire>,
    chunks: &[ChunkWire],
    sent: &[SentChunkWire],
) -> Result<(), EncodeError> {
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

impl BlobsResponse {
    /// The request type this answers.
    pub fn message_type(&self) -> MessageType {
        match self {
            BlobsResponse::Blob(_) => MessageType::GetBlob,
            BlobsResponse::BlobsHeld(BlobsHeld { .. }) => MessageType::HasBlobs,
            BlobsResponse::ChunkedStored(ChunkedStored { .. }) => MessageType::PutChunked,
        }
    }

    pub(super) fn read(kind: Kind, cursor: &mut Cursor) -> Result<BlobsResponse, DecodeError> {
        Ok(match kind {
            Kind::GetBlob => BlobsResponse::Blob(cursor.payload()?),
            Kind::HasBlobs => {
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
                BlobsResponse::BlobsHeld(BlobsHeld { present })
            }
            Kind::PutChunked => {
                let response = BlobsResponse::ChunkedStored(ChunkedStored {
                    payload_hash: cursor.hash()?,
                    payload_len: cursor.u64()?,
                    already_stored: cursor.bool("already_stored")?,
                });
                cursor.zero(7, "reserved")?;
                response
            }
        })
    }

    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            BlobsResponse::Blob(payload) => w.payload(payload),
            BlobsResponse::BlobsHeld(BlobsHeld { present }) => {
                w.u32(present.len() as u32);
                w.zero(4);
                for flag in present {
                    w.u8(u8::from(*flag));
                }
            }
            BlobsResponse::ChunkedStored(ChunkedStored {
                payload_hash,
                payload_len,
                already_stored,
            }) => {
                w.slice(&payload_hash.0);
                w.u64(*payload_len);
                w.u8(u8::from(*already_stored));
                w.zero(7);
            }
        }
    }
}
