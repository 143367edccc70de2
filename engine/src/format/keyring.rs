//! `DIR/keyring` (decision 0032 §5): each tenant's keys, wrapped by the master key, and the
//! master-key check. The one file of a store that is rewritten whole rather than appended to:
//! a key that must be forgettable cannot live in an append-only log. This module only lays the
//! bytes out; wrapping and unwrapping are `seal.rs`'s, and a wrapped key is opaque here.
//!
//! ```text
//! header, 80 bytes
//! offset size field
//!      0    4 magic          0x524B5843 ("CXKR" read as little-endian bytes)
//!      4    2 version        1
//!      6    2 reserved       0
//!      8    4 entry_count    ≤ KEYRING_ENTRIES_MAX
//!     12    4 reserved       0
//!     16   56 master_check   a fixed text sealed by the master key (WRAPPED_CHECK_BYTES)
//!     72    8 reserved       0
//! then entry_count entries, in increasing tenant_id
//!      0    4 tenant_id      0 is the operator's entry, named `operator` and never deleted:
//!                            its data key seals the operator's payloads; its address key is
//!                            unused (the operator's addresses are its hashes)
//!      4    1 state          1 live, 2 deleted
//!      5    1 name_len       1..=64
//!      6    2 data_key_count live: 1..=DATA_KEYS_MAX; deleted: 0
//!      8   64 name           name_len bytes of [a-z0-9_-], zeros after
//!     72   72 address_key    wrapped (live); zeros (deleted)
//!    144   76 × data_key_count: version u16 (increasing), reserved u16 = 0, wrapped key 72
//! then 32 bytes: BLAKE3 of every byte before
//! ```

use ctxstore_vocab::le::LeReader;

use crate::format::RecordError;

pub const KEYRING_MAGIC: u32 = 0x524B_5843;
pub const KEYRING_VERSION: u16 = 1;
pub const KEYRING_HEADER_BYTES: usize = 80;
pub const KEYRING_ENTRY_BYTES: usize = 144;
pub const KEYRING_DATA_KEY_BYTES: usize = 76;
/// A 32-byte key sealed: nonce 24, ciphertext 32, tag 16.
pub const WRAPPED_KEY_BYTES: usize = 72;
/// The master-key check sealed: nonce 24, ciphertext 16, tag 16.
pub const WRAPPED_CHECK_BYTES: usize = 56;
pub use ctxstore_vocab::limits::{TENANT_NAME_BYTES_MAX, is_tenant_name};
/// Tenants a keyring holds, deleted ones included (each stays as a tombstone of 144 bytes, so
/// that its id is never given again): at most 100,000 × (144 + 76 × a few) bytes, a file of
/// a few tens of MB rewritten on a tenant's change.
pub const KEYRING_ENTRIES_MAX: u32 = 100_000;
/// Data key versions one tenant holds (`tenant rotate-key` adds one).
pub const DATA_KEYS_MAX: u16 = 64;
/// The name of entry 0, the operator's (a name the tenants file refuses).
pub const OPERATOR_NAME: &str = "operator";

const STATE_LIVE: u8 = 1;
const STATE_DELETED: u8 = 2;

pub type WrappedKey = [u8; WRAPPED_KEY_BYTES];

/// A tenant's keys as they lie in the file.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum EntryKeys {
    Live {
        address_key: WrappedKey,
        /// `(version, wrapped key)`, versions increasing.
        data_keys: Vec<(u16, WrappedKey)>,
    },
    /// Deleted: the keys are gone, the id and name stay so that neither is given again.
    Deleted,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct KeyringEntry {
    pub tenant_id: u32,
    pub name: String,
    pub keys: EntryKeys,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct KeyringFile {
    pub master_check: [u8; WRAPPED_CHECK_BYTES],
    pub entries: Vec<KeyringEntry>,
}

impl KeyringFile {
    pub fn encoded_len(&self) -> usize {
        let entries: usize = self
            .entries
            .iter()
            .map(|entry| {
                KEYRING_ENTRY_BYTES
                    + match &entry.keys {
                        EntryKeys::Live { data_keys, .. } => {
                            data_keys.len() * KEYRING_DATA_KEY_BYTES
                        }
                        EntryKeys::Deleted => 0,
                    }
            })
            .sum();
        KEYRING_HEADER_BYTES + entries + 32
    }

    /// The file's bytes. Panics on what `decode` would refuse (the caller's invariants).
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.entries.len() <= KEYRING_ENTRIES_MAX as usize);
        let mut bytes = Vec::with_capacity(self.encoded_len());
        bytes.extend_from_slice(&KEYRING_MAGIC.to_le_bytes());
        bytes.extend_from_slice(&KEYRING_VERSION.to_le_bytes());
        bytes.extend_from_slice(&[0; 2]);
        bytes.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        bytes.extend_from_slice(&self.master_check);
        bytes.extend_from_slice(&[0; 8]);
        let mut previous = None;
        for entry in &self.entries {
            assert!(
                Some(entry.tenant_id) > previous,
                "keyring entries in increasing tenant_id"
            );
            assert!(entry.tenant_id != 0 || entry.name == OPERATOR_NAME);
            previous = Some(entry.tenant_id);
            assert!(is_tenant_name(&entry.name), "{:?}", entry.name);
            bytes.extend_from_slice(&entry.tenant_id.to_le_bytes());
            let (state, address_key, data_keys): (u8, WrappedKey, &[(u16, WrappedKey)]) =
                match &entry.keys {
                    EntryKeys::Live {
                        address_key,
                        data_keys,
                    } => (STATE_LIVE, *address_key, data_keys),
                    EntryKeys::Deleted => (STATE_DELETED, [0; WRAPPED_KEY_BYTES], &[]),
                };
            assert!(state == STATE_DELETED || !data_keys.is_empty());
            assert!(data_keys.len() <= usize::from(DATA_KEYS_MAX));
            bytes.push(state);
            bytes.push(entry.name.len() as u8);
            bytes.extend_from_slice(&(data_keys.len() as u16).to_le_bytes());
            let mut name = [0_u8; TENANT_NAME_BYTES_MAX];
            name[..entry.name.len()].copy_from_slice(entry.name.as_bytes());
            bytes.extend_from_slice(&name);
            bytes.extend_from_slice(&address_key);
            let mut previous_version = None;
            for (version, wrapped) in data_keys {
                assert!(
                    previous_version < Some(*version),
                    "data key versions increasing"
                );
                previous_version = Some(*version);
                bytes.extend_from_slice(&version.to_le_bytes());
                bytes.extend_from_slice(&[0; 2]);
                bytes.extend_from_slice(wrapped);
            }
        }
        let digest = blake3::hash(&bytes);
        bytes.extend_from_slice(digest.as_bytes());
        debug_assert_eq!(bytes.len(), self.encoded_len());
        debug_assert_eq!(KeyringFile::decode(&bytes).as_ref(), Ok(self));
        bytes
    }

    /// The file, checked whole: its digest first, then every field. Never panics.
    pub fn decode(bytes: &[u8]) -> Result<KeyringFile, RecordError> {
        let Some(covered_len) = bytes.len().checked_sub(32) else {
            return Err(RecordError::Field("keyring shorter than its digest"));
        };
        let (covered, digest) = bytes.split_at(covered_len);
        if blake3::hash(covered).as_bytes() != digest {
            return Err(RecordError::Field(
                "keyring digest mismatch (a torn or damaged file)",
            ));
        }
        let short = |_| RecordError::Field("keyring shorter than its entries");
        let mut reader = LeReader::new(covered);
        let magic = reader.u32().map_err(short)?;
        if magic != KEYRING_MAGIC {
            return Err(RecordError::Magic(magic));
        }
        let version = reader.u16().map_err(short)?;
        if version != KEYRING_VERSION {
            return Err(RecordError::Version(u32::from(version)));
        }
        let reserved = reader.u16().map_err(short)?;
        let count = reader.u32().map_err(short)?;
        let reserved_2 = reader.u32().map_err(short)?;
        let master_check = reader.array::<WRAPPED_CHECK_BYTES>().map_err(short)?;
        let reserved_3 = reader.u64().map_err(short)?;
        if reserved != 0 || reserved_2 != 0 || reserved_3 != 0 {
            return Err(RecordError::Field("keyring header reserved bytes not zero"));
        }
        if count > KEYRING_ENTRIES_MAX {
            return Err(RecordError::Field("keyring entry count over its limit"));
        }
        let mut entries = Vec::with_capacity(count.min(1024) as usize);
        let mut previous = None;
        for _ in 0..count {
            let entry = decode_entry(&mut reader)?;
            if Some(entry.tenant_id) <= previous {
                return Err(RecordError::Field("keyring tenant ids not increasing"));
            }
            previous = Some(entry.tenant_id);
            entries.push(entry);
        }
        if reader.remaining() != 0 {
            return Err(RecordError::Field("keyring bytes after its last entry"));
        }
        Ok(KeyringFile {
            master_check,
            entries,
        })
    }
}

fn decode_entry(reader: &mut LeReader<'_>) -> Result<KeyringEntry, RecordError> {
    let short = |_| RecordError::Field("keyring shorter than its entries");
    let tenant_id = reader.u32().map_err(short)?;
    let state = reader.u8().map_err(short)?;
    let name_len = usize::from(reader.u8().map_err(short)?);
    let data_key_count = reader.u16().map_err(short)?;
    let name_field = reader.array::<TENANT_NAME_BYTES_MAX>().map_err(short)?;
    let address_key = reader.array::<WRAPPED_KEY_BYTES>().map_err(short)?;
    if name_len == 0 || name_len > TENANT_NAME_BYTES_MAX {
        return Err(RecordError::Field("keyring tenant name length"));
    }
    let (name, padding) = name_field.split_at(name_len);
    let name = std::str::from_utf8(name)
        .ok()
        .filter(|name| is_tenant_name(name))
        .ok_or(RecordError::Field("keyring tenant name"))?;
    if padding.iter().any(|&byte| byte != 0) {
        return Err(RecordError::Field("keyring tenant name padding not zero"));
    }
    if tenant_id == 0 && (name != OPERATOR_NAME || state != STATE_LIVE) {
        return Err(RecordError::Field(
            "keyring entry 0 is not the operator's live entry",
        ));
    }
    let keys = match state {
        STATE_LIVE => {
            if data_key_count == 0 || data_key_count > DATA_KEYS_MAX {
                return Err(RecordError::Field("keyring data key count"));
            }
            let mut data_keys = Vec::with_capacity(usize::from(data_key_count));
            for _ in 0..data_key_count {
                let version = reader.u16().map_err(short)?;
                let reserved = reader.u16().map_err(short)?;
                let wrapped = reader.array::<WRAPPED_KEY_BYTES>().map_err(short)?;
                if reserved != 0 {
                    return Err(RecordError::Field(
                        "keyring data key reserved bytes not zero",
                    ));
                }
                if data_keys
                    .last()
                    .is_some_and(|(last, _): &(u16, WrappedKey)| *last >= version)
                {
                    return Err(RecordError::Field(
                        "keyring data key versions not increasing",
                    ));
                }
                data_keys.push((version, wrapped));
            }
            EntryKeys::Live {
                address_key,
                data_keys,
            }
        }
        STATE_DELETED => {
            if data_key_count != 0 || address_key.iter().any(|&byte| byte != 0) {
                return Err(RecordError::Field(
                    "a deleted tenant's keyring entry holds keys",
                ));
            }
            EntryKeys::Deleted
        }
        _ => return Err(RecordError::Field("keyring entry state")),
    };
    Ok(KeyringEntry {
        tenant_id,
        name: name.to_string(),
        keys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> KeyringFile {
        KeyringFile {
            master_check: [7; WRAPPED_CHECK_BYTES],
            entries: vec![
                KeyringEntry {
                    tenant_id: 1,
                    name: "acme".into(),
                    keys: EntryKeys::Live {
                        address_key: [1; WRAPPED_KEY_BYTES],
                        data_keys: vec![(0, [2; WRAPPED_KEY_BYTES]), (3, [3; WRAPPED_KEY_BYTES])],
                    },
                },
                KeyringEntry {
                    tenant_id: 9,
                    name: "gone-tenant_2".into(),
                    keys: EntryKeys::Deleted,
                },
            ],
        }
    }

    #[test]
    fn a_keyring_reads_back_as_written_and_its_length_is_the_layout() {
        let file = sample();
        let bytes = file.encode();
        assert_eq!(
            bytes.len(),
            KEYRING_HEADER_BYTES + 2 * KEYRING_ENTRY_BYTES + 2 * KEYRING_DATA_KEY_BYTES + 32
        );
        assert_eq!(&bytes[..4], b"CXKR");
        assert_eq!(KeyringFile::decode(&bytes).unwrap(), file);
        let empty = KeyringFile {
            master_check: [0; WRAPPED_CHECK_BYTES],
            entries: Vec::new(),
        };
        assert_eq!(KeyringFile::decode(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_refused() {
        let bytes = sample().encode();
        for at in 0..bytes.len() {
            for bit in [0x01_u8, 0x80] {
                let mut damaged = bytes.clone();
                damaged[at] ^= bit;
                assert!(
                    KeyringFile::decode(&damaged).is_err(),
                    "byte {at} bit {bit}"
                );
            }
        }
        for len in 0..bytes.len() {
            assert!(KeyringFile::decode(&bytes[..len]).is_err(), "cut at {len}");
        }
    }

    /// The digest is right but a field is not: each rule of the layout is checked on its own.
    #[test]
    fn fields_against_the_layout_are_refused_even_under_a_good_digest() {
        let redigest = |mut bytes: Vec<u8>| {
            let len = bytes.len() - 32;
            let digest = blake3::hash(&bytes[..len]);
            bytes[len..].copy_from_slice(digest.as_bytes());
            bytes
        };
        let good = sample().encode();
        let entry = KEYRING_HEADER_BYTES;
        let cases: [(usize, u8, &str); 8] = [
            (6, 1, "reserved"),
            (entry, 0, "not the operator's"),
            (entry + 4, 3, "state"),
            (entry + 5, 0, "name length"),
            (entry + 8, b'A', "tenant name"),
            (entry + 8 + 10, b'x', "padding"),
            (entry + KEYRING_ENTRY_BYTES + 2, 1, "reserved"),
            (entry + KEYRING_ENTRY_BYTES, 3, "not increasing"),
        ];
        for (at, value, expected) in cases {
            let mut bytes = good.clone();
            if expected == "not the operator's" {
                bytes[at..at + 4].copy_from_slice(&0_u32.to_le_bytes());
            } else {
                bytes[at] = value;
            }
            let error = KeyringFile::decode(&redigest(bytes))
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "byte {at}: {error}");
        }
        // A deleted entry that holds a key.
        let deleted = KEYRING_HEADER_BYTES + KEYRING_ENTRY_BYTES + 2 * KEYRING_DATA_KEY_BYTES + 72;
        let mut bytes = good.clone();
        bytes[deleted] = 1;
        let error = KeyringFile::decode(&redigest(bytes))
            .unwrap_err()
            .to_string();
        assert!(error.contains("holds keys"), "{error}");
    }

    #[test]
    fn tenant_names_are_lowercase_digits_dash_and_underscore() {
        for name in ["a", "acme", "acme-2_x", &"a".repeat(64)] {
            assert!(is_tenant_name(name), "{name}");
        }
        for name in ["", "Acme", "a b", "é", &"a".repeat(65), "a/b"] {
            assert!(!is_tenant_name(name), "{name}");
        }
    }
}
