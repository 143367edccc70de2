//! What the client hands out: turns with verified payloads, heads, pages, and the names of
//! the caller codec tags the CLI understands.

use bytes::Bytes;
use ctxstore_protocol::{ContextHeadWire, Hash32, PayloadEncoding, PayloadWire, TurnWire};

use crate::error::ClientError;

/// A BLAKE3-256 payload hash.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlobHash(pub [u8; 32]);

impl BlobHash {
    pub fn of(payload: &[u8]) -> BlobHash {
        BlobHash(*blake3::hash(payload).as_bytes())
    }

    /// 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    /// Parses 64 hex digits (either case).
    pub fn from_hex(text: &str) -> Result<BlobHash, ClientError> {
        blake3::Hash::from_hex(text)
            .map(|hash| BlobHash(*hash.as_bytes()))
            .map_err(|_| {
                ClientError::InvalidArgument(format!("{text:?} is not a hash of 64 hex digits"))
            })
    }
}

impl std::fmt::Display for BlobHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl std::fmt::Debug for BlobHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlobHash({})", self.to_hex())
    }
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
            payload_hash: BlobHash(turn.payload_hash.0),
            payload_len: turn.payload_len,
            flags: turn.flags,
            created_at_unix_ms: turn.created_at_unix_ms,
            payload,
        }
    }
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

/// Turns a payload off the wire into the payload bytes, checked against the hash.
pub(crate) fn verify_payload(
    hash: &Hash32,
    payload: PayloadWire,
) -> Result<Option<Bytes>, ClientError> {
    let corrupt = |reason: String| ClientError::Corrupt {
        hash: BlobHash(hash.0).to_hex(),
        reason,
    };
    let bytes = match payload.encoding {
        PayloadEncoding::Absent => return Ok(None),
        PayloadEncoding::Raw => payload.data,
        PayloadEncoding::Zstd => {
            let inflated = inflate(&payload.data, payload.raw_len as usize)
                .map_err(|error| corrupt(format!("zstd: {error}")))?;
            Bytes::from(inflated)
        }
    };
    if bytes.len() != payload.raw_len as usize {
        return Err(corrupt(format!(
            "{} bytes, expected {}",
            bytes.len(),
            payload.raw_len
        )));
    }
    if blake3::hash(&bytes).as_bytes() != &hash.0 {
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

/// Names of the caller codec tags, for humans (the store never interprets them).
pub const CODEC_NAMES: [(&str, u32); 9] = [
    ("raw", 0),
    ("json", 1),
    ("protobuf", 2),
    ("cbor", 3),
    ("msgpack", 4),
    ("text", 5),
    ("flatbuffers", 6),
    ("capnp", 7),
    ("gob", 8),
];

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

/// A codec tag → its name (or the number as text).
pub fn codec_name(tag: u32) -> String {
    CODEC_NAMES
        .iter()
        .find(|(_, known)| *known == tag)
        .map_or_else(|| tag.to_string(), |(name, _)| name.to_string())
}
