//! Sealing payloads per tenant (decision 0032 §4–§5): the master key, the keyring in memory,
//! XChaCha20-Poly1305 seals with random 192-bit nonces, and a tenant's blob addresses. No I/O:
//! the keyring's bytes are `format/keyring.rs`'s, and writing them is the file layer's.
//!
//! - A **sealed body** is `nonce (24) ‖ ciphertext ‖ tag (16)`, [`SEAL_OVERHEAD_BYTES`] more
//!   than the plaintext. Its associated data binds it to where it lives (the caller's: tenant,
//!   kind, address or record id, key version), so a body moved elsewhere fails its tag.
//!   Nonces are random, never counters: two stores forked from one restore point (a promoted
//!   standby and a fenced primary that wrote on) would repeat a counter under the same key.
//! - A tenant's **address** of a blob is a keyed permutation of the client's BLAKE3 (a 4-round
//!   Luby–Rackoff Feistel over two 16-byte halves, AES-128 as the round function): a
//!   function of the hash alone, so append by hash and dedup need no payload; invertible, so a
//!   read gives the client's hash back; meaningless without the key, so the disk does not
//!   confirm that a tenant stored a known payload.
//! - The **keyring** wraps each tenant's address key and data keys under the master key, and
//!   carries a master-key check, so a wrong master key is refused before anything is opened.

use std::collections::BTreeMap;

use aes::Aes128;
use aes::cipher::BlockEncrypt;
use aes::cipher::generic_array::GenericArray;
use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{Tag, XChaCha20Poly1305, XNonce};
use zeroize::Zeroize;

use crate::format::RecordError;
use crate::format::keyring::{
    DATA_KEYS_MAX, EntryKeys, KEYRING_ENTRIES_MAX, KeyringEntry, KeyringFile, OPERATOR_NAME,
    WRAPPED_CHECK_BYTES, WRAPPED_KEY_BYTES, WrappedKey, is_tenant_name,
};
use std::sync::Arc;

use crate::ids::{BlobHash, TenantId};

const NONCE_BYTES: usize = 24;
const TAG_BYTES: usize = 16;
/// Bytes a seal adds to its plaintext: the nonce and the tag.
pub const SEAL_OVERHEAD_BYTES: usize = NONCE_BYTES + TAG_BYTES;
const _: () = assert!(SEAL_OVERHEAD_BYTES == crate::format::pack::SEALED_BODY_OVERHEAD_BYTES);
/// The master-key check's plaintext and associated data (format version 1).
const CHECK_TEXT: &[u8; 16] = b"ctxstore keyring";
const CHECK_AD: &[u8] = b"ctxstore master-key check v1";
const FEISTEL_ROUNDS: u8 = 4;
/// The context of a tenant's address key without a master key (decision 0032 §4).
const DERIVED_ADDRESS_CONTEXT: &str = "ctxstore tenant address v1";
/// The context each Feistel round's AES key is derived in, from the address key and the
/// round's number.
const ROUND_KEY_CONTEXT: &str = "ctxstore address round key v1";

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("the master key is not 64 hex digits (32 random bytes, e.g. `openssl rand -hex 32`)")]
    MasterKeyText,
    #[error(
        "the keyring's master-key check failed: it was made under another master key; start \
         with the master key it was made with (a wrong key never opens a payload)"
    )]
    WrongMasterKey,
    #[error("the keyring is damaged: {0}")]
    Damaged(#[from] RecordError),
    #[error(
        "the keyring's {what} of tenant {tenant_id} does not open under the master key: the \
         keyring is damaged"
    )]
    KeyDamaged { tenant_id: u32, what: &'static str },
    #[error("a sealed body does not open: {0}")]
    Open(&'static str),
    #[error("the system's random source failed: {0}")]
    Random(String),
    #[error("keyring: {0}")]
    Keyring(String),
}

/// 32 secret bytes, wiped when dropped, never printed.
pub struct SecretKey([u8; 32]);

impl SecretKey {
    fn random() -> Result<SecretKey, SealError> {
        let mut bytes = [0_u8; 32];
        fill_random(&mut bytes)?;
        Ok(SecretKey(bytes))
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new((&self.0).into())
    }
}

impl Drop for SecretKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(…)")
    }
}

fn fill_random(bytes: &mut [u8]) -> Result<(), SealError> {
    getrandom::fill(bytes).map_err(|error| SealError::Random(error.to_string()))
}

/// The key every tenant's keys are wrapped by (`--master-key-file`), and, while it is being
/// rotated (decision 0032 §7), the one it replaces: a keyring that opens only under the
/// previous key is rewrapped under the current one (`Keyring::decode_opened` says which).
#[derive(Debug)]
pub struct MasterKey {
    current: SecretKey,
    previous: Option<SecretKey>,
}

impl MasterKey {
    /// From a key file's text: 64 hex digits; or two such lines, the new key first and the
    /// one it replaces second (a rotation). Surrounding whitespace and empty lines ignored.
    pub fn from_hex(text: &str) -> Result<MasterKey, SealError> {
        let mut lines = text.lines().map(str::trim).filter(|line| !line.is_empty());
        let current = lines.next().ok_or(SealError::MasterKeyText)?;
        let previous = lines.next();
        if lines.next().is_some() {
            return Err(SealError::MasterKeyText);
        }
        Ok(MasterKey {
            current: secret_of_hex(current)?,
            previous: previous.map(secret_of_hex).transpose()?,
        })
    }

    /// A fresh random key (tests; `ctxstore-server` never makes one for an operator).
    pub fn random() -> Result<MasterKey, SealError> {
        Ok(MasterKey {
            current: SecretKey::random()?,
            previous: None,
        })
    }

    /// Whether it holds the key it replaces (a rotation under way).
    pub fn rotating(&self) -> bool {
        self.previous.is_some()
    }
}

/// 64 hex digits as a key.
fn secret_of_hex(text: &str) -> Result<SecretKey, SealError> {
    if text.len() != 64 || !text.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(SealError::MasterKeyText);
    }
    let mut bytes = [0_u8; 32];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[index * 2..index * 2 + 2], 16)
            .map_err(|_| SealError::MasterKeyText)?;
    }
    Ok(SecretKey(bytes))
}

/// Seals `plaintext` under `key`: `nonce ‖ ciphertext ‖ tag`.
pub fn seal(key: &SecretKey, ad: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, SealError> {
    let mut sealed = Vec::with_capacity(plaintext.len() + SEAL_OVERHEAD_BYTES);
    sealed.resize(NONCE_BYTES, 0);
    fill_random(&mut sealed)?;
    sealed.extend_from_slice(plaintext);
    let (nonce, body) = sealed.split_at_mut(NONCE_BYTES);
    let tag = key
        .cipher()
        .encrypt_in_place_detached(XNonce::from_slice(nonce), ad, body)
        .map_err(|_| SealError::Open("a body too long to seal"))?;
    sealed.extend_from_slice(&tag);
    Ok(sealed)
}

/// Opens what [`seal`] made under the same key and associated data; anything else fails.
pub fn open(key: &SecretKey, ad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, SealError> {
    if sealed.len() < SEAL_OVERHEAD_BYTES {
        return Err(SealError::Open("shorter than a nonce and a tag"));
    }
    let (nonce, rest) = sealed.split_at(NONCE_BYTES);
    let (body, tag) = rest.split_at(rest.len() - TAG_BYTES);
    let mut plaintext = body.to_vec();
    key.cipher()
        .decrypt_in_place_detached(
            XNonce::from_slice(nonce),
            ad,
            &mut plaintext,
            Tag::from_slice(tag),
        )
        .map_err(|_| {
            SealError::Open("its tag does not match (another key, another place, or damage)")
        })?;
    Ok(plaintext)
}

/// The associated data of a sealed pack record's body (format 1): the record's tenant, key
/// version, compression, payload length and address. A body moved to another record, tenant
/// or address, or opened under another key version, fails its tag.
fn blob_ad(
    tenant_id: TenantId,
    version: u16,
    compression: u16,
    raw_len: u32,
    address: &BlobHash,
) -> [u8; 60] {
    let mut ad = [0_u8; 60];
    ad[..16].copy_from_slice(b"ctxstore blob v1");
    ad[16..20].copy_from_slice(&tenant_id.0.to_le_bytes());
    ad[20..22].copy_from_slice(&version.to_le_bytes());
    ad[22..24].copy_from_slice(&compression.to_le_bytes());
    ad[24..28].copy_from_slice(&raw_len.to_le_bytes());
    ad[28..60].copy_from_slice(&address.0);
    ad
}

/// Where a sealed pack record body belongs: what its seal binds it to.
#[derive(Clone, Copy, Debug)]
pub struct BlobPlace<'a> {
    pub tenant_id: TenantId,
    pub compression: u16,
    pub raw_len: u32,
    pub address: &'a BlobHash,
}

impl BlobPlace<'_> {
    fn ad(&self, version: u16) -> [u8; 60] {
        blob_ad(
            self.tenant_id,
            version,
            self.compression,
            self.raw_len,
            self.address,
        )
    }
}

/// Seals a pack record's stored body (after compression) under `key`.
pub fn seal_blob(key: &DataKey, place: BlobPlace<'_>, body: &[u8]) -> Result<Vec<u8>, SealError> {
    seal(&key.key, &place.ad(key.version), body)
}

/// Opens a body [`seal_blob`] sealed for `place` under `key`.
pub fn open_blob(key: &DataKey, place: BlobPlace<'_>, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
    open(&key.key, &place.ad(key.version), sealed)
}

/// Where a sealed stream delta belongs (an op-15 record of `turns.log`): its tenant, its
/// stream and its offset in the stream. Bound by its associated data (format 1:
/// `"ctxstore delta v1" ‖ tenant_id ‖ key_version ‖ stream_id ‖ offset`), so a delta moved
/// to another stream or offset, or replayed under another key version, fails its tag.
#[derive(Clone, Copy, Debug)]
pub struct DeltaPlace {
    pub tenant_id: TenantId,
    pub stream_id: u64,
    pub offset: u64,
}

impl DeltaPlace {
    fn ad(&self, version: u16) -> [u8; 39] {
        let mut ad = [0_u8; 39];
        ad[..17].copy_from_slice(b"ctxstore delta v1");
        ad[17..21].copy_from_slice(&self.tenant_id.0.to_le_bytes());
        ad[21..23].copy_from_slice(&version.to_le_bytes());
        ad[23..31].copy_from_slice(&self.stream_id.to_le_bytes());
        ad[31..39].copy_from_slice(&self.offset.to_le_bytes());
        ad
    }
}

/// Seals a stream delta's bytes under `key`.
pub fn seal_delta(key: &DataKey, place: DeltaPlace, bytes: &[u8]) -> Result<Vec<u8>, SealError> {
    seal(&key.key, &place.ad(key.version), bytes)
}

/// Opens a delta [`seal_delta`] sealed at `place` under `key`.
pub fn open_delta(key: &DataKey, place: DeltaPlace, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
    open(&key.key, &place.ad(key.version), sealed)
}

/// Where a sealed vector graph snapshot belongs (decision 0033 §4): its tenant and index.
/// Bound by its associated data (format 1: `"ctxstore graph v1" ‖ tenant_id ‖ key_version ‖
/// index_id`), so a snapshot renamed to another index, or opened under another key version,
/// fails its tag.
#[derive(Clone, Copy, Debug)]
pub struct GraphPlace {
    pub tenant_id: TenantId,
    pub index_id: u32,
}

impl GraphPlace {
    fn ad(&self, version: u16) -> [u8; 27] {
        let mut ad = [0_u8; 27];
        ad[..17].copy_from_slice(b"ctxstore graph v1");
        ad[17..21].copy_from_slice(&self.tenant_id.0.to_le_bytes());
        ad[21..23].copy_from_slice(&version.to_le_bytes());
        ad[23..27].copy_from_slice(&self.index_id.to_le_bytes());
        ad
    }
}

/// Seals a graph snapshot's body under `key`: the graph holds the tenant's vectors, which are
/// payloads (decision 0033 §2).
pub fn seal_graph(key: &DataKey, place: GraphPlace, body: &[u8]) -> Result<Vec<u8>, SealError> {
    seal(&key.key, &place.ad(key.version), body)
}

/// Opens a body [`seal_graph`] sealed for `place` under `key`.
pub fn open_graph(key: &DataKey, place: GraphPlace, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
    open(&key.key, &place.ad(key.version), sealed)
}

/// A tenant's key for blob addresses: fixed for the tenant's life. The Feistel's round
/// function is AES-128 under a key of its own per round, each derived from the secret: 4
/// AES blocks per address (tens of nanoseconds with AES-NI) where keyed BLAKE3 took 359 ns,
/// which a 64-turn page paid 64 times (`benches` `scope/*`, decision 0032 *To verify first*).
pub struct AddressKey {
    /// What the keyring wraps.
    secret: SecretKey,
    /// The round keys, expanded once (wiped when dropped: the `aes` crate's `zeroize`).
    rounds: Box<[Aes128; FEISTEL_ROUNDS as usize]>,
}

impl std::fmt::Debug for AddressKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AddressKey(…)")
    }
}

impl AddressKey {
    fn new(secret: SecretKey) -> AddressKey {
        let rounds = std::array::from_fn(|round| {
            let mut material = [0_u8; 33];
            material[..32].copy_from_slice(&secret.0);
            material[32] = round as u8;
            let mut derived = blake3::derive_key(ROUND_KEY_CONTEXT, &material);
            material.zeroize();
            let key = Aes128::new(GenericArray::from_slice(&derived[..16]));
            derived.zeroize();
            key
        });
        AddressKey {
            secret,
            rounds: Box::new(rounds),
        }
    }

    /// A tenant's address key in a store without a master key: derived from its TenantId
    /// alone, so public. It keeps each tenant's lookups, appends by hash and dedup in its own
    /// address space (isolation), not its payloads secret (the disk holds them in plain text
    /// anyway until sealing is on).
    pub fn derived(tenant_id: TenantId) -> AddressKey {
        let key = blake3::derive_key(DERIVED_ADDRESS_CONTEXT, &tenant_id.0.to_le_bytes());
        AddressKey::new(SecretKey(key))
    }

    /// The tenant's address of the blob whose BLAKE3 is `hash`.
    pub fn address(&self, hash: &BlobHash) -> [u8; 32] {
        let (mut left, mut right) = halves(&hash.0);
        for round in 0..FEISTEL_ROUNDS {
            let next = xor(&left, &self.round(round, &right));
            left = right;
            right = next;
        }
        join(&left, &right)
    }

    /// The client's hash back from an address [`AddressKey::address`] gave.
    pub fn hash_of(&self, address: &[u8; 32]) -> BlobHash {
        let (mut left, mut right) = halves(address);
        for round in (0..FEISTEL_ROUNDS).rev() {
            let previous = xor(&right, &self.round(round, &left));
            right = left;
            left = previous;
        }
        BlobHash(join(&left, &right))
    }

    fn round(&self, round: u8, half: &[u8; 16]) -> [u8; 16] {
        let mut block = GenericArray::clone_from_slice(half);
        self.rounds[usize::from(round)].encrypt_block(&mut block);
        block.into()
    }
}

/// How one tenant's BlobHashes (the client's BLAKE3) become the store's blob addresses, and
/// back (decision 0032 §4). Every blob of the store lies at an address: the shards, the pack
/// headers, the index, turn records and manifests hold addresses; only a tenant's handle on the
/// engine turns a client's hash into its tenant's address and an address back into the hash.
#[derive(Clone, Debug)]
pub enum Addressing {
    /// The operator's blobs: the address is the hash (every store before tenants).
    Plain,
    /// A tenant's blobs: a keyed permutation of the hash.
    Keyed(Arc<AddressKey>),
}

impl Addressing {
    /// A tenant's addressing in a store without a master key. Its keys are derived once per
    /// thread and tenant (five key derivations and four AES key schedules, about a
    /// microsecond) and kept: every read of a tenant's record checks it against its address.
    pub fn of_tenant(tenant_id: TenantId) -> Addressing {
        /// Tenants whose derived keys a thread keeps; all forgotten at once when full.
        const DERIVED_KEPT_MAX: usize = 4096;
        thread_local! {
            static DERIVED: std::cell::RefCell<std::collections::HashMap<u32, Addressing>> =
                std::cell::RefCell::default();
        }
        if tenant_id == TenantId::OPERATOR {
            return Addressing::Plain;
        }
        DERIVED.with(|derived| {
            let mut derived = derived.borrow_mut();
            if let Some(addressing) = derived.get(&tenant_id.0) {
                return addressing.clone();
            }
            if derived.len() >= DERIVED_KEPT_MAX {
                derived.clear();
            }
            let addressing = Addressing::Keyed(Arc::new(AddressKey::derived(tenant_id)));
            derived.insert(tenant_id.0, addressing.clone());
            addressing
        })
    }

    /// The address of the blob whose BLAKE3 is `hash`.
    pub fn address(&self, hash: BlobHash) -> BlobHash {
        match self {
            Addressing::Plain => hash,
            Addressing::Keyed(key) => BlobHash(key.address(&hash)),
        }
    }

    /// The client's hash of the blob at `address`.
    pub fn hash_of(&self, address: BlobHash) -> BlobHash {
        match self {
            Addressing::Plain => address,
            Addressing::Keyed(key) => key.hash_of(&address.0),
        }
    }
}

fn halves(bytes: &[u8; 32]) -> ([u8; 16], [u8; 16]) {
    let (mut left, mut right) = ([0_u8; 16], [0_u8; 16]);
    left.copy_from_slice(&bytes[..16]);
    right.copy_from_slice(&bytes[16..]);
    (left, right)
}

fn join(left: &[u8; 16], right: &[u8; 16]) -> [u8; 32] {
    let mut out = [0_u8; 32];
    out[..16].copy_from_slice(left);
    out[16..].copy_from_slice(right);
    out
}

fn xor(a: &[u8; 16], b: &[u8; 16]) -> [u8; 16] {
    std::array::from_fn(|index| a[index] ^ b[index])
}

/// One version of a tenant's data key.
#[derive(Debug)]
pub struct DataKey {
    pub version: u16,
    pub key: SecretKey,
}

/// A tenant's keys, unwrapped (shared: a keyring's next snapshot keeps the keys it does not
/// change, and a reader keeps the key it opens with).
#[derive(Clone, Debug)]
pub enum TenantKeys {
    Live {
        name: String,
        address: Arc<AddressKey>,
        /// Versions increasing; the last seals new payloads.
        data: Vec<Arc<DataKey>>,
    },
    /// Deleted: its keys are gone; the entry keeps the id and name from being given again.
    Deleted { name: String },
}

impl TenantKeys {
    pub fn name(&self) -> &str {
        match self {
            TenantKeys::Live { name, .. } | TenantKeys::Deleted { name } => name,
        }
    }
}

/// Every tenant's keys, unwrapped: what `DIR/keyring` holds, in memory.
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    tenants: BTreeMap<u32, TenantKeys>,
}

/// The associated data of a wrapped key: it opens only as the key it was wrapped as.
fn wrap_ad(tenant_id: u32, kind: u8, version: u16) -> [u8; 20] {
    let mut ad = [0_u8; 20];
    ad[..13].copy_from_slice(b"ctxstore key\x01");
    ad[13..17].copy_from_slice(&tenant_id.to_le_bytes());
    ad[17] = kind;
    ad[18..20].copy_from_slice(&version.to_le_bytes());
    ad
}
const KIND_ADDRESS: u8 = 1;
const KIND_DATA: u8 = 2;

fn wrap(master: &MasterKey, key: &SecretKey, ad: &[u8]) -> Result<WrappedKey, SealError> {
    let sealed = seal(&master.current, ad, &key.0)?;
    let mut wrapped = [0_u8; WRAPPED_KEY_BYTES];
    assert_eq!(sealed.len(), WRAPPED_KEY_BYTES);
    wrapped.copy_from_slice(&sealed);
    Ok(wrapped)
}

fn unwrap(
    master: &SecretKey,
    wrapped: &WrappedKey,
    tenant_id: u32,
    kind: u8,
    version: u16,
) -> Result<SecretKey, SealError> {
    let what = if kind == KIND_ADDRESS {
        "address key"
    } else {
        "data key"
    };
    let damaged = || SealError::KeyDamaged { tenant_id, what };
    let mut opened =
        open(master, &wrap_ad(tenant_id, kind, version), wrapped).map_err(|_| damaged())?;
    let mut key = [0_u8; 32];
    if opened.len() != 32 {
        opened.zeroize();
        return Err(damaged());
    }
    key.copy_from_slice(&opened);
    opened.zeroize();
    Ok(SecretKey(key))
}

impl Keyring {
    pub fn new() -> Keyring {
        Keyring::default()
    }

    /// The keyring file's bytes opened under `master`: the check first (a wrong master key
    /// fails there, naming it), then every key.
    pub fn decode(bytes: &[u8], master: &MasterKey) -> Result<Keyring, SealError> {
        Keyring::decode_opened(bytes, master).map(|(keyring, _)| keyring)
    }

    /// `decode`, and whether the keyring opened under the previous master key only (a
    /// rotation: the caller rewraps it under the current one, `encode`).
    pub fn decode_opened(bytes: &[u8], master: &MasterKey) -> Result<(Keyring, bool), SealError> {
        let file = KeyringFile::decode(bytes)?;
        match (
            Keyring::decode_under(&file, &master.current),
            &master.previous,
        ) {
            (Err(SealError::WrongMasterKey), Some(previous)) => {
                Keyring::decode_under(&file, previous).map(|keyring| (keyring, true))
            }
            (decoded, _) => decoded.map(|keyring| (keyring, false)),
        }
    }

    fn decode_under(file: &KeyringFile, master: &SecretKey) -> Result<Keyring, SealError> {
        let check =
            open(master, CHECK_AD, &file.master_check).map_err(|_| SealError::WrongMasterKey)?;
        if check != CHECK_TEXT {
            return Err(SealError::WrongMasterKey);
        }
        let mut tenants = BTreeMap::new();
        for entry in file.entries.iter().cloned() {
            let keys = match entry.keys {
                EntryKeys::Deleted => TenantKeys::Deleted { name: entry.name },
                EntryKeys::Live {
                    address_key,
                    data_keys,
                } => {
                    let id = entry.tenant_id;
                    let address = unwrap(master, &address_key, id, KIND_ADDRESS, 0)?;
                    let data = data_keys
                        .iter()
                        .map(|(version, wrapped)| {
                            unwrap(master, wrapped, id, KIND_DATA, *version).map(|key| {
                                Arc::new(DataKey {
                                    version: *version,
                                    key,
                                })
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    TenantKeys::Live {
                        name: entry.name,
                        address: Arc::new(AddressKey::new(address)),
                        data,
                    }
                }
            };
            tenants.insert(entry.tenant_id, keys);
        }
        Ok(Keyring { tenants })
    }

    /// The keyring file's bytes under `master`, every key wrapped afresh (new nonces): the
    /// same call rewraps them all under a new master key (decision 0032 §7).
    pub fn encode(&self, master: &MasterKey) -> Result<Vec<u8>, SealError> {
        let check = seal(&master.current, CHECK_AD, CHECK_TEXT)?;
        let mut master_check = [0_u8; WRAPPED_CHECK_BYTES];
        master_check.copy_from_slice(&check);
        let mut entries = Vec::with_capacity(self.tenants.len());
        for (&tenant_id, keys) in &self.tenants {
            let name = keys.name().to_string();
            let keys = match keys {
                TenantKeys::Deleted { .. } => EntryKeys::Deleted,
                TenantKeys::Live { address, data, .. } => EntryKeys::Live {
                    address_key: wrap(
                        master,
                        &address.secret,
                        &wrap_ad(tenant_id, KIND_ADDRESS, 0),
                    )?,
                    data_keys: data
                        .iter()
                        .map(|data| {
                            let ad = wrap_ad(tenant_id, KIND_DATA, data.version);
                            wrap(master, &data.key, &ad).map(|wrapped| (data.version, wrapped))
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                },
            };
            entries.push(KeyringEntry {
                tenant_id,
                name,
                keys,
            });
        }
        Ok(KeyringFile {
            master_check,
            entries,
        }
        .encode())
    }

    pub fn tenant(&self, tenant_id: u32) -> Option<&TenantKeys> {
        self.tenants.get(&tenant_id)
    }

    pub fn tenants(&self) -> impl Iterator<Item = (u32, &TenantKeys)> {
        self.tenants.iter().map(|(id, keys)| (*id, keys))
    }

    /// A new tenant with fresh keys (data key version 0). Its id and name must be new, deleted
    /// ones included. Tenant 0 is the operator, named `operator`: its data key seals the
    /// operator's payloads, its address key is never used (its addresses are its hashes).
    pub fn add_tenant(&mut self, tenant_id: u32, name: &str) -> Result<(), SealError> {
        let address = AddressKey::new(SecretKey::random()?);
        self.add(tenant_id, name, address)
    }

    /// A tenant that stored blobs before the store sealed anything (or before its keys were
    /// made): its address key is the one it had, derived from its TenantId (decision 0032
    /// §4: addresses never change), with a fresh data key.
    pub fn add_tenant_derived(&mut self, tenant_id: u32, name: &str) -> Result<(), SealError> {
        self.add(tenant_id, name, AddressKey::derived(TenantId(tenant_id)))
    }

    fn add(&mut self, tenant_id: u32, name: &str, address: AddressKey) -> Result<(), SealError> {
        if tenant_id == 0 && name != OPERATOR_NAME {
            return Err(SealError::Keyring(format!(
                "tenant 0 is the operator's, named {OPERATOR_NAME:?}"
            )));
        }
        if !is_tenant_name(name) {
            return Err(SealError::Keyring(format!("{name:?} is not a tenant name")));
        }
        if self.tenants.len() >= KEYRING_ENTRIES_MAX as usize {
            return Err(SealError::Keyring(format!(
                "the keyring holds {KEYRING_ENTRIES_MAX} tenants, deleted ones included"
            )));
        }
        if self.tenants.contains_key(&tenant_id) {
            return Err(SealError::Keyring(format!(
                "tenant {tenant_id} has keys already"
            )));
        }
        if self.tenants.values().any(|keys| keys.name() == name) {
            return Err(SealError::Keyring(format!(
                "a tenant named {name:?} has keys already"
            )));
        }
        let keys = TenantKeys::Live {
            name: name.to_string(),
            address: Arc::new(address),
            data: vec![Arc::new(DataKey {
                version: 0,
                key: SecretKey::random()?,
            })],
        };
        self.tenants.insert(tenant_id, keys);
        Ok(())
    }

    /// A new data key version for a live tenant; new seals use it, old payloads keep theirs.
    pub fn rotate(&mut self, tenant_id: u32) -> Result<u16, SealError> {
        let Some(TenantKeys::Live { data, .. }) = self.tenants.get_mut(&tenant_id) else {
            return Err(SealError::Keyring(format!("no live tenant {tenant_id}")));
        };
        let last = data.last().map_or(0, |key| key.version);
        let version = last
            .checked_add(1)
            .filter(|_| data.len() < usize::from(DATA_KEYS_MAX))
            .ok_or_else(|| {
                SealError::Keyring(format!(
                    "tenant {tenant_id} holds {DATA_KEYS_MAX} data key versions"
                ))
            })?;
        data.push(Arc::new(DataKey {
            version,
            key: SecretKey::random()?,
        }));
        Ok(version)
    }

    /// How `tenant_id`'s hashes become addresses under this keyring: the operator's are the
    /// hashes; a live tenant's are keyed by its address key; `None` for a tenant without
    /// live keys.
    pub fn addressing(&self, tenant_id: TenantId) -> Option<Addressing> {
        if tenant_id == TenantId::OPERATOR {
            return Some(Addressing::Plain);
        }
        match self.tenants.get(&tenant_id.0)? {
            TenantKeys::Live { address, .. } => Some(Addressing::Keyed(address.clone())),
            TenantKeys::Deleted { .. } => None,
        }
    }

    /// The data key that seals `tenant_id`'s new payloads: its newest version.
    pub fn sealing_key(&self, tenant_id: TenantId) -> Option<Arc<DataKey>> {
        match self.tenants.get(&tenant_id.0)? {
            TenantKeys::Live { data, .. } => data.last().cloned(),
            TenantKeys::Deleted { .. } => None,
        }
    }

    /// Version `version` of `tenant_id`'s data key, which opens what it sealed.
    pub fn data_key(&self, tenant_id: TenantId, version: u16) -> Option<Arc<DataKey>> {
        match self.tenants.get(&tenant_id.0)? {
            TenantKeys::Live { data, .. } => {
                data.iter().find(|key| key.version == version).cloned()
            }
            TenantKeys::Deleted { .. } => None,
        }
    }

    /// Forgets a tenant's keys (they are wiped as they drop); the entry stays as a tombstone.
    pub fn delete(&mut self, tenant_id: u32) -> Result<(), SealError> {
        if tenant_id == 0 {
            return Err(SealError::Keyring(
                "the operator's keys are never deleted".into(),
            ));
        }
        let Some(keys) = self.tenants.get_mut(&tenant_id) else {
            return Err(SealError::Keyring(format!("no tenant {tenant_id}")));
        };
        let name = keys.name().to_string();
        *keys = TenantKeys::Deleted { name };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_key(keyring: &Keyring, tenant_id: u32) -> &DataKey {
        match keyring.tenant(tenant_id) {
            Some(TenantKeys::Live { data, .. }) => data.last().unwrap(),
            other => panic!("{other:?}"),
        }
    }

    fn address_key(keyring: &Keyring, tenant_id: u32) -> &AddressKey {
        match keyring.tenant(tenant_id) {
            Some(TenantKeys::Live { address, .. }) => address,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_seal_opens_only_under_its_key_and_associated_data() {
        let key = SecretKey::random().unwrap();
        let other = SecretKey::random().unwrap();
        for len in [0, 1, 100, 10 * 1024] {
            let plaintext: Vec<u8> = (0..len).map(|index| index as u8).collect();
            let sealed = seal(&key, b"blob 1", &plaintext).unwrap();
            assert_eq!(sealed.len(), len + SEAL_OVERHEAD_BYTES);
            assert_eq!(open(&key, b"blob 1", &sealed).unwrap(), plaintext);
            assert!(open(&key, b"blob 2", &sealed).is_err());
            assert!(open(&other, b"blob 1", &sealed).is_err());
            for at in [0, NONCE_BYTES, sealed.len() - 1] {
                let mut damaged = sealed.clone();
                damaged[at] ^= 1;
                assert!(open(&key, b"blob 1", &damaged).is_err(), "byte {at}");
            }
            if len >= 16 {
                // The same plaintext seals to other bytes each time (random nonces), and no
                // 16 plaintext bytes show in the sealed body.
                let again = seal(&key, b"blob 1", &plaintext).unwrap();
                assert_ne!(again, sealed);
                assert!(!sealed.windows(16).any(|window| window == &plaintext[..16]));
            }
        }
        assert!(open(&key, b"", &[0; SEAL_OVERHEAD_BYTES - 1]).is_err());
    }

    #[test]
    fn an_address_is_a_permutation_of_the_hash_under_its_tenants_key() {
        let mut keyring = Keyring::new();
        keyring.add_tenant(1, "acme").unwrap();
        keyring.add_tenant(2, "globex").unwrap();
        let (acme, globex) = (address_key(&keyring, 1), address_key(&keyring, 2));
        let mut seen = std::collections::HashSet::new();
        for index in 0..2_000_u32 {
            let hash = BlobHash(*blake3::hash(&index.to_le_bytes()).as_bytes());
            let address = acme.address(&hash);
            assert_ne!(address, hash.0);
            assert_ne!(address, globex.address(&hash), "two tenants, one address");
            assert_eq!(acme.hash_of(&address), hash);
            assert!(seen.insert(address), "two hashes, one address");
        }
        // The same hash, the same address: dedup within a tenant works on the hash alone.
        let hash = BlobHash([9; 32]);
        assert_eq!(acme.address(&hash), acme.address(&hash));
    }

    #[test]
    fn without_a_master_key_each_tenant_has_its_own_derived_addresses() {
        let operator = Addressing::of_tenant(TenantId::OPERATOR);
        let (acme, globex) = (
            Addressing::of_tenant(TenantId(1)),
            Addressing::of_tenant(TenantId(2)),
        );
        let hash = BlobHash::of(b"the same payload");
        assert_eq!(
            operator.address(hash),
            hash,
            "the operator's layout is today's"
        );
        assert_ne!(acme.address(hash), hash);
        assert_ne!(acme.address(hash), globex.address(hash));
        assert_eq!(acme.hash_of(acme.address(hash)), hash);
        // Derived again (another handle, a restart): the same address.
        assert_eq!(
            Addressing::of_tenant(TenantId(1)).address(hash),
            acme.address(hash)
        );
    }

    /// Addresses are on disk (pack headers, indexes, turn records): the permutation may never
    /// change under a store. A known answer pins it, and the key derivation with it.
    #[test]
    fn a_derived_address_is_a_known_answer() {
        let hash = BlobHash::of(b"ctxstore");
        let address = Addressing::of_tenant(TenantId(1)).address(hash);
        let hex: String = address.0.iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(
            hex,
            "c42344ad26fd1d0cf6ba44dbd755360208d76bfff4dea9e67a6fba4e695d630c"
        );
    }

    #[test]
    fn a_keyring_reopens_under_its_master_key_and_refuses_another() {
        let master = MasterKey::random().unwrap();
        let mut keyring = Keyring::new();
        keyring.add_tenant(1, "acme").unwrap();
        keyring.add_tenant(7, "globex").unwrap();
        assert_eq!(keyring.rotate(7).unwrap(), 1);
        keyring.add_tenant(9, "initech").unwrap();
        keyring.delete(9).unwrap();
        let sealed = seal(&data_key(&keyring, 7).key, b"ad", b"payload").unwrap();
        let hash = BlobHash([3; 32]);
        let address = address_key(&keyring, 1).address(&hash);

        let bytes = keyring.encode(&master).unwrap();
        let reopened = Keyring::decode(&bytes, &master).unwrap();
        assert_eq!(
            open(&data_key(&reopened, 7).key, b"ad", &sealed).unwrap(),
            b"payload"
        );
        assert_eq!(data_key(&reopened, 7).version, 1);
        assert_eq!(address_key(&reopened, 1).hash_of(&address), hash);
        assert!(matches!(
            reopened.tenant(9),
            Some(TenantKeys::Deleted { name }) if name == "initech"
        ));
        // Keys never lie in the file in plain text.
        let raw = &data_key(&keyring, 7).key.0;
        assert!(!bytes.windows(32).any(|window| window == raw));

        let wrong = MasterKey::random().unwrap();
        assert!(matches!(
            Keyring::decode(&bytes, &wrong),
            Err(SealError::WrongMasterKey)
        ));
        // Rewrapped under a new master key: the old one no longer opens it.
        let rewrapped = reopened.encode(&wrong).unwrap();
        assert!(Keyring::decode(&rewrapped, &wrong).is_ok());
        assert!(matches!(
            Keyring::decode(&rewrapped, &master),
            Err(SealError::WrongMasterKey)
        ));
    }

    #[test]
    fn a_wrapped_key_opens_only_as_the_key_it_was_wrapped_as() {
        let master = MasterKey::random().unwrap();
        let mut keyring = Keyring::new();
        keyring.add_tenant(1, "acme").unwrap();
        keyring.add_tenant(2, "globex").unwrap();
        let file = KeyringFile::decode(&keyring.encode(&master).unwrap()).unwrap();
        // Tenant 1's data key put in tenant 2's entry: its associated data names tenant 1.
        let mut swapped = file.clone();
        let EntryKeys::Live { data_keys, .. } = &file.entries[0].keys else {
            panic!()
        };
        let stolen = data_keys[0];
        let EntryKeys::Live { data_keys, .. } = &mut swapped.entries[1].keys else {
            panic!()
        };
        data_keys[0] = stolen;
        let error = Keyring::decode(&swapped.encode(), &master).unwrap_err();
        assert!(
            matches!(
                error,
                SealError::KeyDamaged {
                    tenant_id: 2,
                    what: "data key"
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn a_deleted_tenants_keys_are_gone_and_its_id_and_name_stay_taken() {
        let master = MasterKey::random().unwrap();
        let mut keyring = Keyring::new();
        keyring.add_tenant(1, "acme").unwrap();
        let old = keyring.encode(&master).unwrap();
        keyring.delete(1).unwrap();
        let bytes = keyring.encode(&master).unwrap();
        let file = KeyringFile::decode(&bytes).unwrap();
        assert_eq!(file.entries[0].keys, EntryKeys::Deleted);
        assert!(bytes.len() < old.len());
        assert!(keyring.add_tenant(1, "other").is_err());
        assert!(keyring.add_tenant(2, "acme").is_err());
        assert!(keyring.rotate(1).is_err());
        // Entry 0 is the operator's, by that name only, and never deleted.
        assert!(keyring.add_tenant(0, "initech").is_err());
        keyring.add_tenant(0, "operator").unwrap();
        assert!(keyring.delete(0).is_err());
        assert!(matches!(
            keyring.addressing(TenantId::OPERATOR),
            Some(Addressing::Plain)
        ));
        assert!(keyring.sealing_key(TenantId::OPERATOR).is_some());
        assert!(keyring.sealing_key(TenantId(1)).is_none());
        let file = KeyringFile::decode(&keyring.encode(&master).unwrap()).unwrap();
        assert_eq!(file.entries[0].name, "operator");
    }

    #[test]
    fn data_key_versions_stop_at_their_limit() {
        let mut keyring = Keyring::new();
        keyring.add_tenant(1, "acme").unwrap();
        for expected in 1..DATA_KEYS_MAX {
            assert_eq!(keyring.rotate(1).unwrap(), expected);
        }
        assert!(keyring.rotate(1).is_err());
        let master = MasterKey::random().unwrap();
        let reopened = Keyring::decode(&keyring.encode(&master).unwrap(), &master).unwrap();
        assert_eq!(data_key(&reopened, 1).version, DATA_KEYS_MAX - 1);
    }

    #[test]
    fn a_master_key_is_64_hex_digits() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        assert!(MasterKey::from_hex(&format!("  {hex}\n")).is_ok());
        for bad in ["", &hex[..62], &format!("{hex}00"), &hex.replace('0', "g")] {
            assert!(matches!(
                MasterKey::from_hex(bad),
                Err(SealError::MasterKeyText)
            ));
        }
        assert!(!format!("{:?}", MasterKey::from_hex(hex).unwrap()).contains("00112233"));
        // A rotation: the new key, then the old one; never three.
        let two = format!("{hex}\n\n{}\n", hex.to_lowercase().replace('0', "1"));
        assert!(MasterKey::from_hex(&two).unwrap().rotating());
        assert!(!MasterKey::from_hex(hex).unwrap().rotating());
        assert!(MasterKey::from_hex(&format!("{two}{hex}")).is_err());
        assert!(MasterKey::from_hex(&format!("{hex}\nnot-a-key")).is_err());
    }

    #[test]
    fn a_keyring_under_the_previous_master_key_opens_and_rewraps_under_the_new_one() {
        let old = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        let new = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
        let mut keyring = Keyring::new();
        keyring.add_tenant(0, OPERATOR_NAME).unwrap();
        keyring.add_tenant(1, "acme").unwrap();
        let under_old = keyring.encode(&MasterKey::from_hex(old).unwrap()).unwrap();
        let rotating = MasterKey::from_hex(&format!("{new}\n{old}")).unwrap();
        let (opened, previous) = Keyring::decode_opened(&under_old, &rotating).unwrap();
        assert!(previous);
        assert_eq!(data_key(&opened, 1).key.0, data_key(&keyring, 1).key.0);
        let under_new = opened.encode(&rotating).unwrap();
        let (reopened, previous) = Keyring::decode_opened(&under_new, &rotating).unwrap();
        assert!(!previous);
        assert_eq!(data_key(&reopened, 1).key.0, data_key(&keyring, 1).key.0);
        // The new key alone opens the rewrapped keyring, and the old one no longer does.
        assert!(Keyring::decode(&under_new, &MasterKey::from_hex(new).unwrap()).is_ok());
        assert!(matches!(
            Keyring::decode(&under_new, &MasterKey::from_hex(old).unwrap()),
            Err(SealError::WrongMasterKey)
        ));
    }
}
