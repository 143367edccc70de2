//! A blob shard as readers see it: the index of durable blobs and read handles on its packs.
//! The shard actor is the only writer; it inserts an entry only after the pack bytes it points
//! to were fsynced, so a reader that finds a hash can always read the blob.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::blob::codec;
use crate::config::PACKS_PER_SHARD_MAX;
use crate::error::{Corruption, EngineError};
use crate::file::ReadFile;
use crate::format::blob_index::BlobLocation;
use crate::format::pack::{PACK_HEADER_BYTES, PackHeader};
use crate::ids::{BlobHash, BlobHashBuildHasher};
use crate::model::StoredBlob;

pub(crate) type BlobIndex = papaya::HashMap<BlobHash, BlobLocation, BlobHashBuildHasher>;

#[derive(Debug)]
pub(crate) struct ShardView {
    pub shard: u16,
    pub dir: PathBuf,
    pub index: BlobIndex,
    packs: Box<[OnceLock<ReadFile>]>,
    pub counters: ShardCounters,
}

/// Counters the shard owns (it is their only writer).
#[derive(Debug, Default)]
pub(crate) struct ShardCounters {
    pub blobs: AtomicU64,
    pub unique_bytes: AtomicU64,
    pub stored_bytes: AtomicU64,
}

impl ShardView {
    pub fn new(shard: u16, dir: PathBuf, index: BlobIndex) -> Self {
        ShardView {
            shard,
            dir,
            index,
            packs: (0..PACKS_PER_SHARD_MAX).map(|_| OnceLock::new()).collect(),
            counters: ShardCounters::default(),
        }
    }

    /// Shard only: makes a pack readable before any index entry points into it.
    pub fn add_pack(&self, pack_id: u32, path: PathBuf) -> std::io::Result<()> {
        let file = ReadFile::open(path)?;
        let slot = &self.packs[pack_id as usize];
        let result = slot.set(file);
        assert!(result.is_ok(), "pack {pack_id} registered twice");
        Ok(())
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
        self.counters.blobs.fetch_add(1, Ordering::Relaxed);
        self.counters
            .unique_bytes
            .fetch_add(u64::from(location.raw_len), Ordering::Relaxed);
        self.counters
            .stored_bytes
            .fetch_add(location.record_bytes(), Ordering::Relaxed);
    }

    /// The stored form of a blob, checked against its header and body checksums.
    pub fn read_stored(&self, hash: &BlobHash) -> Result<StoredBlob, EngineError> {
        let location = self.find(hash)?;
        self.read_stored_at(hash, location)
    }

    /// The stored form of a blob already looked up (one index look-up per read).
    pub fn read_stored_at(
        &self,
        hash: &BlobHash,
        location: BlobLocation,
    ) -> Result<StoredBlob, EngineError> {
        self.read_located(hash, location).map(|(stored, _)| stored)
    }

    /// The payload, inflated and verified against its BLAKE3 hash.
    pub fn read_payload(&self, hash: &BlobHash) -> Result<Bytes, EngineError> {
        let location = self.find(hash)?;
        self.read_payload_at(hash, location)
    }

    /// The payload of a blob already looked up, inflated and verified against its hash.
    pub fn read_payload_at(
        &self,
        hash: &BlobHash,
        location: BlobLocation,
    ) -> Result<Bytes, EngineError> {
        let (stored, corrupt) = self.read_located(hash, location)?;
        codec::decode(hash, stored.compression, stored.raw_len, stored.bytes)
            .map_err(|error| EngineError::Corrupt(corrupt(error.to_string())))
    }

    /// The location of a durable blob, or `BlobNotFound`.
    pub fn find(&self, hash: &BlobHash) -> Result<BlobLocation, EngineError> {
        self.location(hash).ok_or(EngineError::BlobNotFound(*hash))
    }

    /// Reads a record and returns it with a maker of `Corruption` errors naming its position.
    fn read_located(
        &self,
        hash: &BlobHash,
        location: BlobLocation,
    ) -> Result<(StoredBlob, impl Fn(String) -> Corruption + '_), EngineError> {
        let Some(pack) = self
            .packs
            .get(location.pack_id as usize)
            .and_then(OnceLock::get)
        else {
            return Err(EngineError::Corrupt(Corruption::new(
                &self.dir,
                location.pack_offset,
                format!(
                    "index points into pack {} which is not open",
                    location.pack_id
                ),
            )));
        };
        let corrupt =
            move |reason: String| Corruption::new(&pack.path, location.pack_offset, reason);
        let mut bytes = vec![0u8; PACK_HEADER_BYTES + location.stored_len as usize];
        pack.read_exact_at(&mut bytes, location.pack_offset)?;
        let mut header_bytes = [0u8; PACK_HEADER_BYTES];
        header_bytes.copy_from_slice(&bytes[..PACK_HEADER_BYTES]);
        let header = PackHeader::decode(&header_bytes)
            .map_err(|error| EngineError::Corrupt(corrupt(error.to_string())))?;
        if header.hash != *hash
            || header.stored_len != location.stored_len
            || header.raw_len != location.raw_len
            || header.compression != location.compression
        {
            let reason = format!("record does not match the index entry of blob {hash}");
            return Err(EngineError::Corrupt(corrupt(reason)));
        }
        let body = Bytes::from(bytes).slice(PACK_HEADER_BYTES..);
        header
            .check_body(&body)
            .map_err(|error| EngineError::Corrupt(corrupt(error.to_string())))?;
        let stored = StoredBlob {
            hash: *hash,
            compression: header.compression,
            raw_len: header.raw_len,
            bytes: body,
        };
        Ok((stored, corrupt))
    }
}
