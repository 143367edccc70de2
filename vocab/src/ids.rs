//! Identifiers of the model (spec §3.1): TurnID, ContextID, BlobHash, TypeTag, CodecTag.
//!
//! Explicitly sized, because every one of them is written to disk and to the wire. BlobHash
//! is the one 32-byte hash type of the engine, the protocol and the clients.

use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};

/// Identifies one immutable turn. Allocated by the sequencer, strictly increasing, never reused.
/// `TurnId::NONE` (0) means "no turn": the parent of a root turn, the head of an empty context.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct TurnId(pub u64);

impl TurnId {
    pub const NONE: TurnId = TurnId(0);

    pub fn is_none(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for TurnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Identifies one context (a mutable head pointer). Allocated densely by the sequencer from 1.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct ContextId(pub u64);

impl fmt::Display for ContextId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Identifies one tenant (decision 0032): the store's id for a tenant name, given by the
/// sequencer in a tenant record the first time it sees the name, in increasing order from 1,
/// never given twice. `TenantId::OPERATOR` (0) is the operator's, and owns everything a store
/// held before it had tenants.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct TenantId(pub u32);

impl TenantId {
    /// The operator: the `--token-file` token's tenant, registered by no record.
    pub const OPERATOR: TenantId = TenantId(0);

    pub fn is_operator(self) -> bool {
        self == TenantId::OPERATOR
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Tenants a store registers at most: each holds a slot of the log for ever, and the tenants
/// file's tokens (`TENANT_TOKENS_MAX`) bound what a server may name anyway.
pub const TENANTS_MAX: u32 = 100_000;

/// Caller-defined type of a turn's payload (e.g. a hash of a fully qualified type name).
pub type TypeTag = u64;

/// Caller-defined serialisation of a turn's payload (protobuf, JSON, raw bytes, ...).
/// The store never interprets it; it is not the storage compression codec.
pub type CodecTag = u32;

/// ContextIDs are dense from 1 up to this many: the capacity of the published head table
/// (65,536 chunks of 65,536 slots, slot 0 unused).
pub const CONTEXTS_MAX: u64 = (1 << 32) - 1;

pub const BLOB_HASH_BYTES: usize = 32;

/// BLAKE3-256 of a payload's exact bytes: the payload's name in the content-addressed store.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BlobHash(pub [u8; BLOB_HASH_BYTES]);

impl BlobHash {
    /// BLAKE3 of no bytes: what a redacted turn reads with (length 0), so that every client
    /// that checks a payload against its hash accepts the empty payload it gets.
    pub const EMPTY: BlobHash = BlobHash([
        0xaf, 0x13, 0x49, 0xb9, 0xf5, 0xf9, 0xa1, 0xa6, 0xa0, 0x40, 0x4d, 0xea, 0x36, 0xdc, 0xc9,
        0x49, 0x9b, 0xcb, 0x25, 0xc9, 0xad, 0xc1, 0x12, 0xb7, 0xcc, 0x9a, 0x93, 0xca, 0xe4, 0x1f,
        0x32, 0x62,
    ]);

    pub fn of(payload: &[u8]) -> BlobHash {
        BlobHash(*blake3::hash(payload).as_bytes())
    }

    /// 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    /// Parses 64 hex digits (either case). Returns `None` for anything else.
    pub fn from_hex(text: &str) -> Option<BlobHash> {
        blake3::Hash::from_hex(text)
            .ok()
            .map(|hash| BlobHash(*hash.as_bytes()))
    }

    /// Which blob shard owns this hash: a partition by hash prefix (the first two bytes).
    pub fn shard(&self, shard_count: u16) -> u16 {
        assert!(shard_count > 0);
        let prefix = u16::from_be_bytes([self.0[0], self.0[1]]);
        prefix % shard_count
    }
}

impl fmt::Display for BlobHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for BlobHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlobHash({})", self.to_hex())
    }
}

/// A BLAKE3 hash is already uniformly distributed: hashing it again for a hash table is wasted
/// work. Bytes 8..16 are used because bytes 0..2 pick the shard (all keys of one shard share
/// them).
impl Hash for BlobHash {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut word = [0u8; 8];
        word.copy_from_slice(&self.0[8..16]);
        state.write_u64(u64::from_le_bytes(word));
    }
}

/// Hasher for maps keyed by `BlobHash`: passes the already-random 64-bit word through.
#[derive(Clone, Copy, Default, Debug)]
pub struct BlobHashHasher {
    state: u64,
}

impl Hasher for BlobHashHasher {
    fn finish(&self) -> u64 {
        self.state
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only reached if a key other than `BlobHash` is hashed; stay correct, if slow.
        for &byte in bytes {
            self.state = self.state.rotate_left(8) ^ u64::from(byte);
            self.state = self.state.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.state ^= word;
    }
}

#[derive(Clone, Copy, Default, Debug)]
pub struct BlobHashBuildHasher;

impl BuildHasher for BlobHashBuildHasher {
    type Hasher = BlobHashHasher;

    fn build_hasher(&self) -> BlobHashHasher {
        BlobHashHasher::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let hash = BlobHash::of(b"hello");
        let text = hash.to_hex();
        assert_eq!(text.len(), 64);
        assert_eq!(BlobHash::from_hex(&text), Some(hash));
        assert_eq!(BlobHash::from_hex(&text.to_uppercase()), Some(hash));
        assert_eq!(BlobHash::from_hex(&text[1..]), None);
        assert_eq!(BlobHash::from_hex(&format!("{}g", &text[1..])), None);
    }

    #[test]
    fn empty_is_the_hash_of_no_bytes() {
        assert_eq!(BlobHash::of(b""), BlobHash::EMPTY);
    }

    #[test]
    fn shard_is_stable_and_in_range() {
        let hash = BlobHash([0xff; 32]);
        assert_eq!(hash.shard(1), 0);
        assert_eq!(hash.shard(7), 0xffff % 7);
        for count in 1..20u16 {
            assert!(BlobHash::of(&[count as u8]).shard(count) < count);
        }
    }
}
