//! Compression policy of the blob store (spec §4.3): zstd at the configured level, raw when
//! compression does not save bytes. Runs on the caller's thread (a network core in the
//! server), so shards spend their time on I/O, not on CPU. At level 1, small payloads (chat
//! turns, tool calls) get tuned parameters (`SMALL_PAYLOAD_BYTES_MAX`).

use std::cell::RefCell;

use bytes::Bytes;

use crate::error::EngineError;
use crate::format::pack::{Compression, EncodedBlob, PACK_HEADER_BYTES};
use crate::ids::{BlobHash, TenantId};
use crate::seal::{self, Addressing, BlobPlace, DataKey};

/// Payloads up to this size are "small" (chat turns, tool calls): at level 1 they are
/// compressed with a smaller hash table and a longer minimum match than zstd picks for them.
/// On 10 KiB chat-like JSON that costs 10–14% less CPU (35 → 30–32 µs on the 2-core VM of
/// benches/results/HISTORY.md) for a ~1% lower ratio (2.66 → 2.63), measured with
/// `cargo run --release -p ctxstore-benches --example zstd_params`. Compression is the
/// largest CPU cost of an append, so this is throughput on CPU-bound machines.
pub const SMALL_PAYLOAD_BYTES_MAX: usize = 16 * 1024;
const SMALL_HASH_LOG: u32 = 12;
const SMALL_MIN_MATCH: u32 = 6;

/// A thread's compressors for one level: zstd's own parameters, and at level 1 the tuned
/// one for small payloads (higher levels mean the operator asked for ratio: zstd decides).
struct Compressors {
    level: i32,
    small: Option<zstd::bulk::Compressor<'static>>,
    any: zstd::bulk::Compressor<'static>,
}

impl Compressors {
    fn new(level: i32) -> Option<Compressors> {
        let small = if level == 1 {
            use zstd::zstd_safe::CParameter;
            let mut small = zstd::bulk::Compressor::new(level).ok()?;
            small
                .set_parameter(CParameter::HashLog(SMALL_HASH_LOG))
                .ok()?;
            small
                .set_parameter(CParameter::MinMatch(SMALL_MIN_MATCH))
                .ok()?;
            Some(small)
        } else {
            None
        };
        let any = zstd::bulk::Compressor::new(level).ok()?;
        Some(Compressors { level, small, any })
    }

    fn for_len(&mut self, len: usize) -> &mut zstd::bulk::Compressor<'static> {
        match &mut self.small {
            Some(small) if len <= SMALL_PAYLOAD_BYTES_MAX => small,
            _ => &mut self.any,
        }
    }
}

thread_local! {
    static COMPRESSOR: RefCell<Option<Compressors>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
    /// Where `encode_compressed` inflates a client's frame to check it, reused: the check of
    /// every client-compressed append allocated (and freed) a buffer of the payload's size,
    /// ~5% of a network core's CPU in malloc and free at 6,000 appends/s (issue 38 item 4,
    /// benches/results/HISTORY.md). Zero-filled once, as it grows; freed past
    /// `INFLATE_SCRATCH_BYTES_MAX`.
    static INFLATE_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The most a thread keeps of `INFLATE_SCRATCH` between checks: a larger payload (up to the
/// chunking threshold) is checked in a buffer freed right after, so a thread holds at most
/// this much for it.
pub const INFLATE_SCRATCH_BYTES_MAX: usize = 256 * 1024;

/// Runs `with` on a decompressor of this thread.
fn with_decompressor<T>(
    with: impl FnOnce(&mut zstd::bulk::Decompressor<'static>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(
                zstd::bulk::Decompressor::new()
                    .map_err(|error| DecodeError::Decompress(error.to_string()))?,
            );
        }
        match slot.as_mut() {
            Some(decompressor) => with(decompressor),
            None => Err(DecodeError::Decompress("no decompressor".into())),
        }
    })
}

/// Whose blob a record holds: its tenant, and how that tenant's hashes become addresses.
#[derive(Clone, Copy, Debug)]
pub struct Owner<'a> {
    pub tenant_id: TenantId,
    pub addressing: &'a Addressing,
}

/// The operator's addressing: the address is the hash.
#[cfg(test)]
static PLAIN: Addressing = Addressing::Plain;

#[cfg(test)]
impl Owner<'static> {
    /// The operator's blobs (every blob of a store without tenants).
    pub fn operator() -> Owner<'static> {
        Owner {
            tenant_id: TenantId::OPERATOR,
            addressing: &PLAIN,
        }
    }
}

/// Whether `payload` is the blob `hash` of `raw_len` bytes: a client's payload, checked
/// against the hash it claims.
fn check(hash: &BlobHash, raw_len: u32, payload: &[u8]) -> Result<(), DecodeError> {
    check_address(&Addressing::Plain, hash, raw_len, payload)
}

/// Whether `payload` is the blob at `address` of `raw_len` bytes (`decode`'s checks): its
/// BLAKE3 under its tenant's `addressing` (the record's header names the tenant, so any
/// reader can check any record; the operator's address is the hash itself) is the address.
fn check_address(
    addressing: &Addressing,
    address: &BlobHash,
    raw_len: u32,
    payload: &[u8],
) -> Result<(), DecodeError> {
    if payload.len() != raw_len as usize {
        return Err(DecodeError::Length {
            expected: raw_len,
            actual: payload.len(),
        });
    }
    let actual = addressing.address(BlobHash::of(payload));
    if actual != *address {
        return Err(DecodeError::Hash { actual });
    }
    Ok(())
}

/// Encodes `owner`'s payload whose BLAKE3 is `hash` into a complete pack record at its
/// address. The payload length was validated by the caller (`blob_bytes_max`).
pub fn encode(owner: Owner<'_>, hash: BlobHash, payload: &[u8], zstd_level: i32) -> EncodedBlob {
    encode_at(
        owner.tenant_id,
        owner.addressing.address(hash),
        payload,
        zstd_level,
    )
}

/// `encode` for a caller that has the address already (a chunk, addressed when it was cut).
pub fn encode_at(
    tenant_id: TenantId,
    address: BlobHash,
    payload: &[u8],
    zstd_level: i32,
) -> EncodedBlob {
    let raw_len = payload.len() as u32;
    assert_eq!(
        raw_len as usize,
        payload.len(),
        "payload length fits in u32"
    );
    match compress(payload, zstd_level) {
        Some(compressed) if compressed.len() < payload.len() => {
            EncodedBlob::new(tenant_id, address, raw_len, Compression::Zstd, &compressed)
        }
        _ => EncodedBlob::new(tenant_id, address, raw_len, Compression::Raw, payload),
    }
}

/// Encodes a payload a client compressed (issue 38): `frame` must inflate to `raw_len` bytes
/// that hash to `hash` (checked here, `decode`'s checks, so what is stored reads back as it
/// did). Stored as it came when it saves bytes, raw otherwise. `raw_len` was validated by
/// the caller (`blob_bytes_max`), which bounds the inflation.
pub fn encode_compressed(
    owner: Owner<'_>,
    hash: BlobHash,
    raw_len: u32,
    frame: Bytes,
) -> Result<EncodedBlob, DecodeError> {
    INFLATE_SCRATCH.with(|cell| {
        let mut scratch = cell.borrow_mut();
        let result = encode_checked(owner, hash, raw_len, &frame, &mut scratch);
        if scratch.len() > INFLATE_SCRATCH_BYTES_MAX {
            *scratch = Vec::new();
        }
        result
    })
}

/// `encode_compressed` with `scratch` to inflate into: the inflation is bounded by `raw_len`
/// (a frame that inflates to more is refused by zstd, no larger buffer is made for it).
fn encode_checked(
    owner: Owner<'_>,
    hash: BlobHash,
    raw_len: u32,
    frame: &[u8],
    scratch: &mut Vec<u8>,
) -> Result<EncodedBlob, DecodeError> {
    let wanted = raw_len as usize;
    if scratch.len() < wanted {
        scratch.resize(wanted, 0);
    }
    let target = &mut scratch[..wanted];
    let inflated_len = with_decompressor(|decompressor| {
        decompressor
            .decompress_to_buffer(frame, target)
            .map_err(|error| DecodeError::Decompress(error.to_string()))
    })?;
    let payload = &scratch[..inflated_len];
    check(&hash, raw_len, payload)?;
    let (tenant_id, address) = (owner.tenant_id, owner.addressing.address(hash));
    if frame.len() < payload.len() {
        Ok(EncodedBlob::new(
            tenant_id,
            address,
            raw_len,
            Compression::Zstd,
            frame,
        ))
    } else {
        Ok(EncodedBlob::new(
            tenant_id,
            address,
            raw_len,
            Compression::Raw,
            payload,
        ))
    }
}

/// `blob` with its stored body sealed under its tenant's data key `key` (decision 0032 §4),
/// after compression (sealed bytes do not compress); as it is without a key. Manifests are
/// never sealed: they hold chunk addresses and lengths, which the index and the turn records
/// hold in plain text anyway, and recovery, collection and `verify` walk them without keys.
pub fn sealed(blob: EncodedBlob, key: Option<&DataKey>) -> Result<EncodedBlob, EngineError> {
    let header = blob.header;
    let Some(key) = key else {
        return Ok(blob);
    };
    assert!(header.sealed.is_none(), "a record is sealed once");
    if header.compression == Compression::Manifest {
        return Ok(blob);
    }
    let body = &blob.bytes[PACK_HEADER_BYTES..PACK_HEADER_BYTES + header.stored_len as usize];
    let place = BlobPlace {
        tenant_id: header.tenant_id,
        compression: header.compression.code(),
        raw_len: header.raw_len,
        address: &header.hash,
    };
    let sealed = seal::seal_blob(key, place, body)
        .map_err(|error| EngineError::Keys(format!("sealing blob {}: {error}", header.hash)))?;
    Ok(EncodedBlob::with_seal(
        header.tenant_id,
        header.hash,
        header.raw_len,
        header.compression,
        &sealed,
        Some(key.version),
    ))
}

fn compress(payload: &[u8], zstd_level: i32) -> Option<Vec<u8>> {
    // Below this, a zstd frame's own overhead eats any saving.
    const COMPRESS_BYTES_MIN: usize = 64;
    if payload.len() < COMPRESS_BYTES_MIN {
        return None;
    }
    COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|c| c.level != zstd_level) {
            *slot = Compressors::new(zstd_level);
        }
        // A compressor that cannot be built or fails leaves the blob raw: always correct.
        slot.as_mut()
            .and_then(|compressors| compressors.for_len(payload.len()).compress(payload).ok())
    })
}

/// Why stored bytes did not turn back into the payload they claim to be.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    Decompress(String),
    Length { expected: u32, actual: usize },
    Hash { actual: BlobHash },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Decompress(reason) => write!(f, "zstd body does not decompress: {reason}"),
            DecodeError::Length { expected, actual } => {
                write!(f, "body inflates to {actual} bytes, header says {expected}")
            }
            DecodeError::Hash { actual } => write!(f, "payload hashes to {actual}"),
        }
    }
}

/// Turns a stored body (opened, when it was sealed) of the blob at address `hash` back into
/// the payload and checks it against its address under its tenant's `addressing` (for the
/// operator's blobs, the address is the hash).
pub fn decode(
    addressing: &Addressing,
    hash: &BlobHash,
    compression: Compression,
    raw_len: u32,
    stored: Bytes,
) -> Result<Bytes, DecodeError> {
    let payload = match compression {
        Compression::Manifest => {
            // Chunked blobs are read through `chunks::read_payload`, never here.
            return Err(DecodeError::Decompress(
                "a manifest is not a payload body".into(),
            ));
        }
        Compression::Raw => stored,
        Compression::Zstd => {
            let inflated = with_decompressor(|decompressor| {
                decompressor
                    .decompress(&stored, raw_len as usize)
                    .map_err(|error| DecodeError::Decompress(error.to_string()))
            })?;
            Bytes::from(inflated)
        }
    };
    check_address(addressing, hash, raw_len, &payload)?;
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(blob: &EncodedBlob) -> Bytes {
        let end = PACK_HEADER_BYTES + blob.header.stored_len as usize;
        Bytes::copy_from_slice(&blob.bytes[PACK_HEADER_BYTES..end])
    }

    /// The operator's record `blob` read back as the blob `hash`.
    fn read_back(hash: &BlobHash, blob: &EncodedBlob) -> Result<Bytes, DecodeError> {
        let header = &blob.header;
        decode(
            &Addressing::Plain,
            hash,
            header.compression,
            header.raw_len,
            body(blob),
        )
    }

    #[test]
    fn text_is_compressed_and_round_trips() {
        let payload = "{\"role\":\"user\",\"content\":\"hello there\"}\n".repeat(200);
        let hash = BlobHash::of(payload.as_bytes());
        let blob = encode(Owner::operator(), hash, payload.as_bytes(), 1);
        assert_eq!(blob.header.compression, Compression::Zstd);
        assert!(blob.header.stored_len < payload.len() as u32 / 4);
        let back = read_back(&hash, &blob).unwrap();
        assert_eq!(&back[..], payload.as_bytes());
    }

    #[test]
    fn small_and_large_text_round_trips_at_tuned_and_default_levels() {
        let line = "{\"role\":\"assistant\",\"content\":\"the build passed; 3 warnings\"}\n";
        for len in [
            SMALL_PAYLOAD_BYTES_MAX,
            SMALL_PAYLOAD_BYTES_MAX + 1,
            300_000,
        ] {
            let payload: Vec<u8> = line.bytes().cycle().take(len).collect();
            let hash = BlobHash::of(&payload);
            for level in [1, 3] {
                let blob = encode(Owner::operator(), hash, &payload, level);
                assert_eq!(blob.header.compression, Compression::Zstd, "len {len}");
                let back = read_back(&hash, &blob);
                assert_eq!(&back.unwrap()[..], &payload[..], "len {len} level {level}");
            }
        }
    }

    /// xorshift64 bytes from `seed`: what zstd cannot shrink.
    fn noise(mut state: u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    }

    #[test]
    fn incompressible_and_tiny_payloads_stay_raw() {
        let random = noise(0x1234_5678_9abc_def0, 100_000);
        for payload in [&random[..], b"tiny"] {
            let hash = BlobHash::of(payload);
            let blob = encode(Owner::operator(), hash, payload, 3);
            assert_eq!(blob.header.compression, Compression::Raw);
            let back = read_back(&hash, &blob).unwrap();
            assert_eq!(&back[..], payload);
        }
    }

    #[test]
    fn a_tenants_record_lies_at_its_address_and_checks_against_it() {
        let payload = "{\"role\":\"user\",\"content\":\"tenant\"}".repeat(20);
        let hash = BlobHash::of(payload.as_bytes());
        let addressing = Addressing::of_tenant(TenantId(4));
        let owner = Owner {
            tenant_id: TenantId(4),
            addressing: &addressing,
        };
        let blob = encode(owner, hash, payload.as_bytes(), 1);
        let address = addressing.address(hash);
        assert_eq!(
            (blob.header.hash, blob.header.tenant_id),
            (address, TenantId(4))
        );
        let (compression, raw_len) = (blob.header.compression, blob.header.raw_len);
        let back = decode(&addressing, &address, compression, raw_len, body(&blob)).unwrap();
        assert_eq!(&back[..], payload.as_bytes());
        // Read as another tenant's, or at the hash itself, the record does not check.
        for tenant_id in [TenantId(5), TenantId::OPERATOR] {
            let other = Addressing::of_tenant(tenant_id);
            let read = decode(&other, &address, compression, raw_len, body(&blob));
            assert!(
                matches!(read, Err(DecodeError::Hash { .. })),
                "{tenant_id:?}"
            );
        }
        let read = decode(&addressing, &hash, compression, raw_len, body(&blob));
        assert!(matches!(read, Err(DecodeError::Hash { .. })));
    }

    /// A sealed record: its header names the key version, its body is the seal's (40 bytes
    /// more), and it opens only at its own place, to what the unsealed record held.
    #[test]
    fn a_sealed_record_opens_only_at_its_place() {
        let mut keyring = crate::seal::Keyring::new();
        keyring.add_tenant(0, "operator").unwrap();
        let key = keyring.sealing_key(TenantId::OPERATOR).unwrap();
        let payload = "{\"role\":\"user\",\"content\":\"sealed\"}".repeat(40);
        let hash = BlobHash::of(payload.as_bytes());
        let plain = encode(Owner::operator(), hash, payload.as_bytes(), 1);
        let record = sealed(plain.clone(), Some(&key)).unwrap();
        assert_eq!(record.header.sealed, Some(0));
        assert_eq!(record.header.stored_len, plain.header.stored_len + 40);
        let mut header_bytes = [0_u8; PACK_HEADER_BYTES];
        header_bytes.copy_from_slice(&record.bytes[..PACK_HEADER_BYTES]);
        let header = crate::format::pack::PackHeader::decode(&header_bytes).unwrap();
        assert_eq!(header, record.header);
        assert!(!record.bytes.windows(6).any(|window| window == b"sealed"));
        let place = |address| BlobPlace {
            tenant_id: TenantId::OPERATOR,
            compression: header.compression.code(),
            raw_len: header.raw_len,
            address,
        };
        let opened = Bytes::from(seal::open_blob(&key, place(&hash), &body(&record)).unwrap());
        assert_eq!(opened, body(&plain));
        let back = decode(
            &Addressing::Plain,
            &hash,
            header.compression,
            header.raw_len,
            opened,
        );
        assert_eq!(&back.unwrap()[..], payload.as_bytes());
        let elsewhere = BlobHash::of(b"another blob");
        assert!(seal::open_blob(&key, place(&elsewhere), &body(&record)).is_err());
        // Without a key, or for a manifest, the record stays as it was.
        let unsealed = sealed(plain.clone(), None).unwrap();
        assert_eq!(unsealed.bytes, plain.bytes);
    }

    #[test]
    fn a_wrong_hash_is_reported() {
        let payload = b"some payload bytes";
        let blob = encode(Owner::operator(), BlobHash::of(payload), payload, 1);
        let other = BlobHash::of(b"other");
        assert!(matches!(
            read_back(&other, &blob),
            Err(DecodeError::Hash { .. })
        ));
    }

    #[test]
    fn a_client_frame_is_stored_as_it_came_and_a_lying_one_is_refused() {
        let payload = "{\"role\":\"tool\",\"content\":\"42 files changed\"}\n".repeat(100);
        let hash = BlobHash::of(payload.as_bytes());
        let frame = Bytes::from(zstd::bulk::compress(payload.as_bytes(), 3).unwrap());
        let raw_len = payload.len() as u32;
        let blob = encode_compressed(Owner::operator(), hash, raw_len, frame.clone()).unwrap();
        assert_eq!(blob.header.compression, Compression::Zstd);
        assert_eq!(body(&blob), frame, "the frame as the client sent it");
        let back = read_back(&hash, &blob).unwrap();
        assert_eq!(&back[..], payload.as_bytes());

        // Another payload's frame under this hash; a length that lies; not zstd at all.
        let other = Bytes::from(zstd::bulk::compress(b"something else entirely", 1).unwrap());
        assert!(matches!(
            encode_compressed(Owner::operator(), hash, 23, other),
            Err(DecodeError::Hash { .. })
        ));
        assert!(encode_compressed(Owner::operator(), hash, raw_len - 1, frame.clone()).is_err());
        assert!(matches!(
            encode_compressed(Owner::operator(), hash, raw_len + 1, frame),
            Err(DecodeError::Length { .. })
        ));
        assert!(matches!(
            encode_compressed(
                Owner::operator(),
                hash,
                raw_len,
                Bytes::from_static(b"not a zstd frame")
            ),
            Err(DecodeError::Decompress(_))
        ));
    }

    /// The reused scratch buffer (issue 38 item 4): checks of frames of other sizes in a row
    /// on one thread each see only their own bytes; a frame inflating past its claimed length
    /// is refused even when the scratch is larger; a buffer grown past the cap is freed.
    #[test]
    fn client_frames_checked_in_the_reused_scratch_stay_apart() {
        let line = "{\"role\":\"user\",\"content\":\"scratch\"}\n";
        let texts: Vec<Vec<u8>> = [40_000, 300, 12_000, 1]
            .iter()
            .map(|&len| line.bytes().cycle().skip(len % 7).take(len).collect())
            .collect();
        for text in &texts {
            let hash = BlobHash::of(text);
            let frame = Bytes::from(zstd::bulk::compress(text, 1).unwrap());
            let blob =
                encode_compressed(Owner::operator(), hash, text.len() as u32, frame).unwrap();
            let stored = read_back(&hash, &blob);
            assert_eq!(&stored.unwrap()[..], &text[..], "len {}", text.len());
        }
        // 300 bytes claimed, 40,000 in the frame: the scratch holds 40,000 now, the check
        // still inflates no more than the claim.
        let frame = Bytes::from(zstd::bulk::compress(&texts[0], 1).unwrap());
        let refused = encode_compressed(
            Owner::operator(),
            BlobHash::of(&texts[0][..300]),
            300,
            frame,
        );
        assert!(
            matches!(refused, Err(DecodeError::Decompress(_))),
            "{refused:?}"
        );

        let large = noise(7, INFLATE_SCRATCH_BYTES_MAX + 1);
        let frame = Bytes::from(zstd::bulk::compress(&large, 1).unwrap());
        let blob = encode_compressed(
            Owner::operator(),
            BlobHash::of(&large),
            large.len() as u32,
            frame,
        )
        .unwrap();
        assert_eq!(&body(&blob)[..], &large[..], "incompressible: stored raw");
        assert_eq!(INFLATE_SCRATCH.with(|cell| cell.borrow().capacity()), 0);
    }

    #[test]
    fn a_client_frame_that_saves_nothing_is_stored_raw() {
        let payload = noise(0x9E37_79B9_7F4A_7C15, 4096);
        let hash = BlobHash::of(&payload);
        let frame = Bytes::from(zstd::bulk::compress(&payload, 1).unwrap());
        assert!(frame.len() >= payload.len());
        let blob = encode_compressed(Owner::operator(), hash, payload.len() as u32, frame).unwrap();
        assert_eq!(blob.header.compression, Compression::Raw);
        assert_eq!(&body(&blob)[..], &payload[..]);
    }
}
