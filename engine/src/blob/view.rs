//! A blob shard as readers see it: the index of durable blobs and read handles on its packs.
//! The shard actor is the only writer; it inserts an entry only after the pack bytes it points
//! to were fsynced, so a reader that finds a hash can always read the blob.
//!
//! Pack read handles are swappable: a compaction's switch-over installs the new file and
//! keeps the replaced one until its readers are done; a read that finds its record moved
//! looks the hash up once more at the new location. The table of handles is sized to the packs
//! that exist: an immutable snapshot the shard replaces when it adds a pack, which readers
//! load without a lock (an open or a `verify` allocates nothing for the packs a shard may
//! have one day: a table of `PACKS_PER_SHARD_MAX` slots was most of what an open cost).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::blob::codec;
use crate::config::PACKS_PER_SHARD_MAX;
use crate::error::{Corruption, EngineError};
use crate::file::ReadFile;
use crate::format::blob_index::BlobLocation;
use crate::format::pack::{PACK_HEADER_BYTES, PackHeader};
use crate::ids::{BlobHash, BlobHashBuildHasher, TenantId};
use crate::keys::StoreKeys;
use crate::model::StoredBlob;
use crate::seal::{self, BlobPlace};

pub(crate) type BlobIndex = papaya::HashMap<BlobHash, BlobLocation, BlobHashBuildHasher>;

#[derive(Debug)]
pub(crate) struct ShardView {
    pub shard: u16,
    pub dir: PathBuf,
    pub index: BlobIndex,
    packs: arc_swap::ArcSwap<PackSlots>,
    pub counters: ShardCounters,
    /// The store's keys: a sealed body is opened as it is read.
    pub keys: Arc<StoreKeys>,
}

/// Counters the shard owns (it is their only writer), and what chunked writes did to its
/// chunks since open (relaxed adds: by the shard for the chunks it was sent, by callers for
/// those they found stored before sending anything).
#[derive(Debug, Default)]
pub(crate) struct ShardCounters {
    pub blobs: AtomicU64,
    pub unique_bytes: AtomicU64,
    pub stored_bytes: AtomicU64,
    /// Chunked blobs (manifest records) and the payload bytes they stand for.
    pub manifests: AtomicU64,
    pub manifest_payload_bytes: AtomicU64,
    pub chunks_written: AtomicU64,
    pub chunk_dedup_hits: AtomicU64,
    /// Raw bytes of chunks a chunked write found stored already (what chunking saved).
    pub chunk_bytes_deduped: AtomicU64,
    /// Stored bytes (whole records) of the shard's blobs per tenant: what `quota_bytes`
    /// counts (decision 0032 §3).
    pub tenant_bytes: papaya::HashMap<TenantId, AtomicU64>,
}

impl ShardCounters {
    fn count(&self, location: &BlobLocation, sign: i8) {
        let add = |counter: &AtomicU64, value: u64| {
            if sign > 0 {
                counter.fetch_add(value, Ordering::Relaxed);
            } else {
                counter.fetch_sub(value, Ordering::Relaxed);
            }
        };
        add(&self.blobs, 1);
        add(&self.unique_bytes, u64::from(location.raw_len));
        add(&self.stored_bytes, location.record_bytes());
        let tenant_bytes = self.tenant_bytes.pin();
        let tenant = tenant_bytes.get_or_insert_with(location.tenant_id, || AtomicU64::new(0));
        add(tenant, location.record_bytes());
        if location.compression == crate::format::pack::Compression::Manifest {
            add(&self.manifests, 1);
            add(&self.manifest_payload_bytes, u64::from(location.raw_len));
        }
    }
}

impl ShardView {
    /// Stored bytes of `tenant_id`'s blobs in this shard.
    pub fn tenant_bytes(&self, tenant_id: TenantId) -> u64 {
        let tenant_bytes = self.counters.tenant_bytes.pin();
        tenant_bytes
            .get(&tenant_id)
            .map_or(0, |bytes| bytes.load(Ordering::Acquire))
    }

    pub fn new(shard: u16, dir: PathBuf, index: BlobIndex, keys: Arc<StoreKeys>) -> Self {
        ShardView {
            shard,
            dir,
            index,
            packs: arc_swap::ArcSwap::default(),
            counters: ShardCounters::default(),
            keys,
        }
    }

    /// Shard only: makes a pack readable before any index entry points into it.
    pub fn add_pack(&self, pack_id: u32, path: PathBuf) -> std::io::Result<()> {
        self.add_packs([(pack_id, path)])
            .map_err(|(_, error)| error)
    }

    /// Shard only (or the open, before the view is shared): makes `packs` readable before any
    /// index entry points into them. Copies the table of handles once (one pointer per pack:
    /// packs are added once per `pack_bytes_max` written, and all at once at open) and
    /// publishes the copy. An error names the pack it is about.
    pub fn add_packs(
        &self,
        packs: impl IntoIterator<Item = (u32, PathBuf)>,
    ) -> Result<(), (PathBuf, std::io::Error)> {
        let mut grown: PackSlots = self.packs.load().iter().cloned().collect();
        for (pack_id, path) in packs {
            if pack_id >= PACKS_PER_SHARD_MAX {
                let error = std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "pack {pack_id} is past the limit of {PACKS_PER_SHARD_MAX} packs per shard"
                    ),
                );
                return Err((path, error));
            }
            let index = pack_id as usize;
            assert!(
                grown.get(index).is_none_or(Option::is_none),
                "pack {pack_id} registered twice"
            );
            let file = match ReadFile::open(path.clone()) {
                Ok(file) => file,
                Err(error) => return Err((path, error)),
            };
            if grown.len() <= index {
                grown.resize(index + 1, None);
            }
            grown[index] = Some(Arc::new(PackSlot {
                current: arc_swap::ArcSwapOption::from_pointee(file),
                previous: arc_swap::ArcSwapOption::empty(),
            }));
        }
        self.packs.store(Arc::new(grown));
        Ok(())
    }

    /// The read handles of pack `pack_id`, if it is open.
    fn pack(&self, pack_id: u32) -> Option<Arc<PackSlot>> {
        self.packs.load().get(pack_id as usize).cloned().flatten()
    }

    pub fn location(&self, hash: &BlobHash) -> Option<BlobLocation> {
        self.index.pin().get(hash).copied()
    }

    pub fn contains(&self, hash: &BlobHash) -> bool {
        self.index.pin().contains_key(hash)
    }

    /// Shard only, after the record is durable.
    pub fn publish(&self, hash: BlobHash, location: BlobLocation) {
        let previous = self.index.pin().insert(hash, location).copied();
        assert!(
            previous.is_none(),
            "blob {hash} stored twice in shard {}",
            self.shard
        );
        self.counters.count(&location, 1);
    }

    /// The stored form of a blob already looked up (one index look-up per read).
    pub fn read_stored_at(
        &self,
        hash: &BlobHash,
        location: BlobLocation,
    ) -> Result<StoredBlob, EngineError> {
        self.read_located(hash, location).map(|(stored, _)| stored)
    }

    /// The payload of a blob already looked up, inflated and verified against its hash. Not
    /// for chunked blobs (`chunks::read_payload` rebuilds those from several shards).
    pub fn read_payload_at(
        &self,
        hash: &BlobHash,
        location: BlobLocation,
    ) -> Result<Bytes, EngineError> {
        let (stored, corrupt) = self.read_located(hash, location)?;
        let addressing = self.keys.addressing(stored.tenant_id);
        codec::decode(
            &addressing,
            hash,
            stored.compression,
            stored.raw_len,
            stored.bytes,
        )
        .map_err(|error| EngineError::Corrupt(corrupt.at(error.to_string())))
    }

    /// The location of a durable blob, or `BlobNotFound`.
    pub fn find(&self, hash: &BlobHash) -> Result<BlobLocation, EngineError> {
        self.location(hash).ok_or(EngineError::BlobNotFound(*hash))
    }

    /// Reads a record at `location`, checked against its header and body checksums. A
    /// compaction may move the record while a reader holds its old location
    /// (`install_compacted`): then the pack's previous file (kept open until every entry
    /// points at the new one) still has it, or the index has its new location.
    fn read_located(
        &self,
        hash: &BlobHash,
        location: BlobLocation,
    ) -> Result<(StoredBlob, Corrupt), EngineError> {
        let slot = self.pack(location.pack_id);
        let Some(current) = slot.as_ref().and_then(|slot| slot.current.load_full()) else {
            return Err(EngineError::Corrupt(Corruption::new(
                &self.dir,
                location.pack_offset,
                format!(
                    "index points into pack {} which is not open",
                    location.pack_id
                ),
            )));
        };
        let first = read_record(&current, hash, location, &self.keys);
        if first.is_ok() {
            return first;
        }
        if let Some(previous) = slot.and_then(|slot| slot.previous.load_full())
            && let Ok(found) = read_record(&previous, hash, location, &self.keys)
        {
            return Ok(found);
        }
        // Moved by a compaction (or swept and written again): one more read at the place the
        // index names now.
        match self.location(hash) {
            Some(moved) if moved != location => {
                let pack = self
                    .pack(moved.pack_id)
                    .and_then(|slot| slot.current.load_full());
                match pack {
                    Some(pack) => read_record(&pack, hash, moved, &self.keys),
                    None => first,
                }
            }
            _ => first,
        }
    }

    /// Shard only: takes a swept blob out of the index (reads answer not found from now on).
    pub fn remove(&self, hash: &BlobHash) -> Option<BlobLocation> {
        let removed = self.index.pin().remove(hash).copied();
        if let Some(location) = removed {
            self.counters.count(&location, -1);
        }
        removed
    }

    /// Shard only: the compacted file of `pack_id` replaces the old one (renamed over it
    /// already), then every kept record's entry moves to its new offset, then the old file is
    /// let go (its bytes leave the disk once the last reader holding it drops it).
    pub fn install_compacted(
        &self,
        pack_id: u32,
        file: ReadFile,
        relocated: &[crate::format::blob_index::IndexEntry],
    ) {
        let Some(slot) = self.pack(pack_id) else {
            panic!("compacted pack {pack_id} was never registered");
        };
        let old = slot.current.swap(Some(Arc::new(file)));
        assert!(old.is_some(), "compacted pack {pack_id} was not open");
        slot.previous.store(old);
        let index = self.index.pin();
        for entry in relocated {
            assert_eq!(entry.location.pack_id, pack_id);
            let before = index.insert(entry.hash, entry.location).copied();
            assert!(
                before.is_some_and(|before| before.pack_id == pack_id
                    && before.raw_len == entry.location.raw_len
                    && before.stored_len == entry.location.stored_len),
                "compaction moved blob {} which was not in pack {pack_id}",
                entry.hash
            );
        }
        slot.previous.store(None);
    }
}

/// Names a damaged record: the pack file and the record's offset.
pub(crate) struct Corrupt {
    pub path: PathBuf,
    pub offset: u64,
}

impl Corrupt {
    pub fn at(&self, reason: String) -> Corruption {
        Corruption::new(&self.path, self.offset, reason)
    }
}

/// The read handles of a shard's packs by pack id (`None` where no pack of that id is open),
/// as long as the highest open id plus one.
type PackSlots = Vec<Option<Arc<PackSlot>>>;

/// One pack's read handles: the file, and during a compaction's switch-over the file it
/// replaced.
#[derive(Debug)]
struct PackSlot {
    current: arc_swap::ArcSwapOption<ReadFile>,
    previous: arc_swap::ArcSwapOption<ReadFile>,
}

fn read_record(
    pack: &ReadFile,
    hash: &BlobHash,
    location: BlobLocation,
    keys: &StoreKeys,
) -> Result<(StoredBlob, Corrupt), EngineError> {
    let corrupt = Corrupt {
        path: pack.path.clone(),
        offset: location.pack_offset,
    };
    let mut bytes = vec![0u8; PACK_HEADER_BYTES + location.stored_len as usize];
    pack.read_exact_at(&mut bytes, location.pack_offset)?;
    let mut header_bytes = [0u8; PACK_HEADER_BYTES];
    header_bytes.copy_from_slice(&bytes[..PACK_HEADER_BYTES]);
    let header = PackHeader::decode(&header_bytes)
        .map_err(|error| EngineError::Corrupt(corrupt.at(error.to_string())))?;
    if header.hash != *hash
        || header.stored_len != location.stored_len
        || header.raw_len != location.raw_len
        || header.compression != location.compression
    {
        let reason = format!("record does not match the index entry of blob {hash}");
        return Err(EngineError::Corrupt(corrupt.at(reason)));
    }
    let body = Bytes::from(bytes).slice(PACK_HEADER_BYTES..);
    header
        .check_body(&body)
        .map_err(|error| EngineError::Corrupt(corrupt.at(error.to_string())))?;
    let body = match header.sealed {
        None => body,
        Some(version) => Bytes::from(
            open_body(&header, version, &body, keys)
                .map_err(|reason| EngineError::Corrupt(corrupt.at(reason)))?,
        ),
    };
    let stored = StoredBlob {
        hash: *hash,
        compression: header.compression,
        raw_len: header.raw_len,
        bytes: body,
        tenant_id: header.tenant_id,
    };
    Ok((stored, corrupt))
}

/// A sealed body opened under its tenant's data key `version`: the tag is checked here, the
/// payload's hash by the caller's decode (the check order of decision 0032 §4: CRC, tag,
/// BLAKE3).
pub(crate) fn open_body(
    header: &PackHeader,
    version: u16,
    sealed: &[u8],
    keys: &StoreKeys,
) -> Result<Vec<u8>, String> {
    let key = keys.data_key(header.tenant_id, version)?;
    let place = BlobPlace {
        tenant_id: header.tenant_id,
        compression: header.compression.code(),
        raw_len: header.raw_len,
        address: &header.hash,
    };
    seal::open_blob(&key, place, sealed).map_err(|error| error.to_string())
}
