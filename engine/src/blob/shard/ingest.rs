//! A standby's side of a blob shard (issue 31): pack bytes shipped from the primary, checked
//! record by record before a byte is written and then written with one fdatasync, and whole
//! new versions of packs that a collection rewrote on the primary. The write path of puts is
//! `shard.rs`'s; this is only what a standby adds to it.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use crate::error::EngineError;
use crate::file::ops::{self, create_durable, sync_dir};
use crate::file::{ReadFile, open_actor_file};
use crate::format::blob_index::{BlobLocation, INDEX_ENTRY_BYTES, IndexEntry};
use crate::format::pack::{PACK_HEADER_BYTES, PackHeader};
use crate::ids::BlobHash;
use crate::model::IngestedPack;
use crate::pipeline::IngestPack;
use crate::store_dir::{REINDEX_MARKER_FILE, pack_path};

use super::ShardActor;

impl ShardActor {
    /// A standby's pack bytes (`ShardRequest::Ingest`, issue 31): the open pack continued, or
    /// the next one begun (the primary rotated). Bytes the shard holds already must be the same
    /// bytes; the new ones are checked record by record (headers, checksums, padding) before a
    /// byte is written, then written with ONE fdatasync, then indexed and published, so that
    /// the log slots naming them (ingested after) find them.
    ///
    /// A whole new version of a sealed pack that differs from this shard's (a collection
    /// rewrote it on the primary) is installed when asked (`install`, after the cut's log
    /// slots: `install_rewritten`); otherwise the shard keeps its version, a superset, and
    /// says so (`kept_own_version`). A new version of this shard's OPEN pack (the primary
    /// sealed it, then rewrote it, before the rest of its records shipped) holds records this
    /// shard never had, which the cut's slots name: those are appended to the open pack
    /// first, then it is sealed, so that its version is a superset of the new one here too
    /// (issue 46: the standby stalled on "turn N references blob … which is not in shard").
    pub(super) async fn ingest(&mut self, pack: IngestPack) -> Result<IngestedPack, EngineError> {
        let IngestPack {
            pack_id,
            offset,
            bytes,
            whole,
            install,
        } = pack;
        let refused = refuser(self.shard, pack_id, offset);
        self.check_ingest(offset, whole, refused)?;
        if whole && pack_id == self.pack_id && self.pack_end > 0 {
            self.seal_rewritten_open(pack_id, &bytes, refused).await?;
        }
        if pack_id < self.pack_id {
            return self
                .ingest_sealed(pack_id, whole, install, bytes, refused)
                .await;
        }
        if pack_id > self.pack_id {
            if pack_id != self.pack_id + 1 || offset != 0 {
                return Err(refused(format!(
                    "the open pack is {}; only its successor may begin, at 0",
                    self.pack_id
                )));
            }
            self.rotate_pack().await?;
        }
        if offset > self.pack_end {
            return Err(refused(format!(
                "the pack ends at {}: the bytes would leave a gap",
                self.pack_end
            )));
        }
        let held = self.check_held(offset, &bytes, refused)?;
        let mut new = &bytes[held..];
        // A piece (never a whole pack) may end inside a record: its start is taken now, with
        // the rest when it comes.
        let bytes_left = if whole {
            0
        } else {
            let complete = whole_records_len(new);
            let left = (new.len() - complete) as u64;
            new = &new[..complete];
            left
        };
        if new.is_empty() {
            return Ok(IngestedPack {
                bytes_left,
                ..IngestedPack::default()
            });
        }
        let blobs = self
            .write_ingested(new)
            .await
            .map_err(|error| error.refused_by(refused))?;
        Ok(IngestedPack {
            blobs,
            bytes_written: new.len() as u64,
            kept_own_version: false,
            bytes_left,
        })
    }

    /// Only a standby takes pack bytes, with no batch of its own in flight; a whole pack
    /// starts at 0.
    fn check_ingest(
        &self,
        offset: u64,
        whole: bool,
        refused: impl Fn(String) -> EngineError,
    ) -> Result<(), EngineError> {
        if !self.published.status.is_following() {
            return Err(refused(
                "only a standby takes pack bytes from its replica".into(),
            ));
        }
        if !self.batch.records.is_empty() {
            return Err(refused("the shard has a batch of its own".into()));
        }
        if whole && offset != 0 {
            return Err(refused("a whole pack starts at 0".into()));
        }
        Ok(())
    }

    /// A whole version of the open pack that does not continue it: the primary sealed this
    /// pack and a collection rewrote it (its successor may still be empty, so no piece of it
    /// came first). Sealed here too, as there, after the records it lacks; then taken as a
    /// rewritten sealed pack.
    async fn seal_rewritten_open(
        &mut self,
        pack_id: u32,
        bytes: &[u8],
        refused: impl Fn(String) -> EngineError + Copy,
    ) -> Result<(), EngineError> {
        let mut ours = vec![0u8; self.pack_end as usize];
        std::fs::File::open(&self.pack_path)
            .and_then(|file| file.read_exact_at(&mut ours, 0))
            .map_err(|source| EngineError::io(&self.pack_path, source))?;
        if !bytes.starts_with(&ours) {
            let entries = pack_records(pack_id, 0, bytes).map_err(refused)?;
            let mut lacking = Vec::new();
            for entry in &entries {
                let held = self.view().location(&entry.hash);
                if held.is_none_or(|held| held.pack_id != pack_id) {
                    let start = entry.location.pack_offset as usize;
                    let end = start + entry.location.record_bytes() as usize;
                    lacking.extend_from_slice(&bytes[start..end]);
                }
            }
            if !lacking.is_empty() {
                self.write_ingested(&lacking)
                    .await
                    .map_err(|error| error.refused_by(refused))?;
            }
            self.rotate_pack().await?;
        }
        Ok(())
    }

    /// A whole version of sealed pack `pack_id`: the same bytes are nothing new; others are
    /// installed when asked, else the shard keeps its own version and says so.
    async fn ingest_sealed(
        &mut self,
        pack_id: u32,
        whole: bool,
        install: bool,
        bytes: Vec<u8>,
        refused: impl Fn(String) -> EngineError,
    ) -> Result<IngestedPack, EngineError> {
        if !whole {
            return Err(refused(format!("pack {} is the open one", self.pack_id)));
        }
        let path = pack_path(&self.shard_dir, pack_id);
        let same = std::fs::read(&path)
            .map(|held| held == bytes)
            .map_err(|source| EngineError::io(&path, source))?;
        if !same && install {
            return self.install_rewritten(pack_id, bytes).await;
        }
        Ok(IngestedPack {
            kept_own_version: !same,
            ..IngestedPack::default()
        })
    }

    /// Bytes from `offset` that the open pack holds already must be the same bytes. Answers
    /// how many of `bytes` it holds.
    fn check_held(
        &self,
        offset: u64,
        bytes: &[u8],
        refused: impl Fn(String) -> EngineError,
    ) -> Result<usize, EngineError> {
        let held = (self.pack_end - offset).min(bytes.len() as u64) as usize;
        if held > 0 {
            let mut ours = vec![0u8; held];
            std::fs::File::open(&self.pack_path)
                .and_then(|file| file.read_exact_at(&mut ours, offset))
                .map_err(|source| EngineError::io(&self.pack_path, source))?;
            if ours != bytes[..held] {
                return Err(refused(
                    "they differ from the bytes this shard holds there (the standby's store is \
                     not a copy of the primary's; restore it again)"
                        .into(),
                ));
            }
        }
        Ok(held)
    }

    /// Whole pack records appended where the open pack ends: checked record by record before
    /// a byte is written, then written with ONE fdatasync, then indexed and published.
    /// Answers how many.
    async fn write_ingested(&mut self, new: &[u8]) -> Result<u64, Refusal> {
        let start = self.pack_end;
        let entries = pack_records(self.pack_id, start, new).map_err(Refusal::Invalid)?;
        // A blob the primary's collection swept (out of its index; the record waits for its
        // pack's compaction) and a put then stored again: this shard never swept it, so it
        // still holds the old copy. The later copy is the one the index keeps, as an open
        // finds it (`blob/recover.rs`); the old one leaves with its pack's new version.
        for entry in &entries {
            if let Some(old) = self.view().location(&entry.hash)
                && (old.pack_id, old.pack_offset)
                    >= (entry.location.pack_id, entry.location.pack_offset)
            {
                return Err(Refusal::Invalid(format!(
                    "blob {} comes at pack {} offset {}, but this shard holds it at pack {} \
                     offset {}, later (the standby's store is not a copy of the primary's; \
                     restore it again)",
                    entry.hash,
                    entry.location.pack_id,
                    entry.location.pack_offset,
                    old.pack_id,
                    old.pack_offset
                )));
            }
        }
        self.pack.append_unsynced(
            new,
            start,
            entries.len() as u32,
            &self.published.status,
            &self.published.shard_metrics[usize::from(self.shard)],
        )?;
        let end = start + new.len() as u64;
        self.pack_file_len = self.pack_file_len.max(end);
        self.sync_batch(end).await?;
        for entry in &entries {
            if self.view().contains(&entry.hash) {
                self.view().remove(&entry.hash);
            }
            self.view().publish(entry.hash, entry.location);
        }
        self.append_index(&entries).await;
        Ok(entries.len() as u64)
    }

    /// A standby's copy of a sealed pack the primary's collection rewrote (issue 31, decision
    /// 0019), installed as a compaction is (`install_compacted`): every record of the new
    /// version must be one this shard holds in pack `pack_id` (a compaction only drops
    /// records); the new pack and the new index (this pack's entries replaced) are written and
    /// synced under temporary names, then, under the REINDEX marker (an open that finds it
    /// rebuilds the index from the packs, whichever file each rename left), renamed in; the
    /// blobs the new version dropped leave the view, the rest move, and the marker goes. So
    /// the bytes a purge or a collection removed on the primary leave the standby's disk too.
    async fn install_rewritten(
        &mut self,
        pack_id: u32,
        bytes: Vec<u8>,
    ) -> Result<IngestedPack, EngineError> {
        let shard = self.shard;
        let refused = move |reason: String| {
            EngineError::InvalidArgument(format!(
                "shard {shard} refuses the new version of pack {pack_id}: {reason}"
            ))
        };
        let entries = pack_records(pack_id, 0, &bytes).map_err(refused)?;
        self.check_rewritten(pack_id, &entries, refused)?;
        let write = |path: &PathBuf| {
            let path = path.clone();
            move |source| EngineError::from_write(&path, source)
        };
        let (new_index, dropped) = self.rewritten_index(pack_id, &entries)?;
        let pack = pack_path(&self.shard_dir, pack_id);
        let new_pack = crate::store_dir::compact_path(&pack);
        let new_index_path = crate::store_dir::compact_path(&self.index_path);
        ops::write_durable(&new_pack, &bytes).map_err(write(&new_pack))?;
        ops::write_durable(&new_index_path, &new_index).map_err(write(&new_index_path))?;
        let marker = self.shard_dir.join(REINDEX_MARKER_FILE);
        create_durable(&marker).map_err(write(&marker))?;
        sync_dir(&self.shard_dir).map_err(write(&self.shard_dir))?;
        ops::rename(&new_pack, &pack).map_err(write(&pack))?;
        let index_path = self.index_path.clone();
        ops::rename(&new_index_path, &index_path).map_err(write(&index_path))?;
        self.index = open_actor_file(&self.index_path, self.io.sync_mode).await?;
        self.index_end = new_index.len() as u64;
        self.index_unsynced_entries = 0;
        // Readers: the dropped blobs leave the view before the file that lacks them is read.
        self.forget_dropped(pack_id, &dropped);
        let file = ReadFile::open(pack.clone()).map_err(|source| EngineError::io(&pack, source))?;
        self.view().install_compacted(pack_id, file, &entries);
        sync_dir(&self.shard_dir).map_err(write(&self.shard_dir))?;
        ops::remove(&marker).map_err(write(&marker))?;
        sync_dir(&self.shard_dir).map_err(write(&self.shard_dir))?;
        tracing::info!(
            shard = self.shard,
            pack = pack_id,
            dropped = dropped.len(),
            "installed the primary's rewritten pack"
        );
        Ok(IngestedPack {
            blobs: entries.len() as u64,
            bytes_written: bytes.len() as u64,
            ..IngestedPack::default()
        })
    }

    /// Every record of a rewritten pack's new version must be one this shard holds in pack
    /// `pack_id` (a compaction only drops records); and the install rewrites the blob index,
    /// which must still take writes.
    fn check_rewritten(
        &self,
        pack_id: u32,
        entries: &[IndexEntry],
        refused: impl Fn(String) -> EngineError,
    ) -> Result<(), EngineError> {
        for entry in entries {
            let held = self.view().location(&entry.hash);
            let same_record = held.is_some_and(|held| {
                held.pack_id == pack_id
                    && held.raw_len == entry.location.raw_len
                    && held.stored_len == entry.location.stored_len
            });
            if !same_record {
                return Err(refused(format!(
                    "it holds blob {} which this shard's version does not (a collection only \
                     drops records; restore the standby again)",
                    entry.hash
                )));
            }
        }
        if self.index_frozen {
            let refusal = std::io::Error::other(
                "the blob index stopped growing after a write error; the install waits for a \
                 restart",
            );
            return Err(EngineError::io(&self.index_path, refusal));
        }
        Ok(())
    }

    /// The blob index's bytes with pack `pack_id`'s entries replaced by `entries` (its new
    /// version's), and the blobs the new version dropped.
    fn rewritten_index(
        &self,
        pack_id: u32,
        entries: &[IndexEntry],
    ) -> Result<(Vec<u8>, Vec<BlobHash>), EngineError> {
        // The index with this pack's entries replaced by the new version's, in their place:
        // entries tile the packs in order (an open checks it), so the new version's go before
        // the first entry of a later pack, as a compaction's do (`gc/compact.rs`). Appended
        // at the end they made every later pack's entries out of order, and the standby's
        // store no longer verified or opened.
        let mut old_index = vec![0u8; self.index_end as usize];
        std::fs::File::open(&self.index_path)
            .and_then(|file| file.read_exact_at(&mut old_index, 0))
            .map_err(|source| EngineError::io(&self.index_path, source))?;
        let mut new_index = Vec::with_capacity(old_index.len());
        let mut dropped = Vec::new();
        let kept: std::collections::HashSet<BlobHash> =
            entries.iter().map(|entry| entry.hash).collect();
        let place = |new_index: &mut Vec<u8>| {
            for entry in entries {
                let mut encoded = [0u8; INDEX_ENTRY_BYTES];
                entry.encode(&mut encoded);
                new_index.extend_from_slice(&encoded);
            }
        };
        let mut placed = false;
        for (position, chunk) in old_index.chunks_exact(INDEX_ENTRY_BYTES).enumerate() {
            let mut encoded = [0u8; INDEX_ENTRY_BYTES];
            encoded.copy_from_slice(chunk);
            let Ok(Some(entry)) = IndexEntry::decode(&encoded) else {
                return Err(EngineError::Corrupt(crate::error::Corruption::new(
                    &self.index_path,
                    (position * INDEX_ENTRY_BYTES) as u64,
                    "blob index entry does not decode".to_string(),
                )));
            };
            if !placed && entry.location.pack_id >= pack_id {
                place(&mut new_index);
                placed = true;
            }
            if entry.location.pack_id != pack_id {
                new_index.extend_from_slice(&encoded);
            } else if !kept.contains(&entry.hash) {
                dropped.push(entry.hash);
            }
        }
        if !placed {
            place(&mut new_index);
        }
        Ok((new_index, dropped))
    }

    /// The blobs a rewritten pack `pack_id` dropped leave the view (those it still places
    /// there).
    fn forget_dropped(&self, pack_id: u32, dropped: &[BlobHash]) {
        for hash in dropped {
            let here = self
                .view()
                .location(hash)
                .is_some_and(|location| location.pack_id == pack_id);
            if here {
                self.view().remove(hash);
            }
        }
    }
}

/// Why ingested pack bytes were not taken: they are not what the shard can take (refused,
/// naming the pack), or the disk failed.
enum Refusal {
    Invalid(String),
    Engine(EngineError),
}

impl Refusal {
    /// The error an ingest answers: an invalid one refused by `refused`, naming the pack.
    fn refused_by(self, refused: impl Fn(String) -> EngineError) -> EngineError {
        match self {
            Refusal::Invalid(reason) => refused(reason),
            Refusal::Engine(error) => error,
        }
    }
}

/// How an ingest of shard `shard`'s pack `pack_id` bytes at `offset` refuses them.
fn refuser(shard: u16, pack_id: u32, offset: u64) -> impl Fn(String) -> EngineError + Copy {
    move |reason: String| {
        EngineError::InvalidArgument(format!(
            "shard {shard} refuses pack {pack_id} bytes at {offset}: {reason}"
        ))
    }
}

impl From<EngineError> for Refusal {
    fn from(error: EngineError) -> Self {
        Refusal::Engine(error)
    }
}

/// How many bytes at the start of `bytes` are whole pack records laid end to end: the rest
/// begins a record it does not hold whole (a header cut short, or a record running past the
/// end). A header that does not decode is counted in, for `pack_records` to name.
fn whole_records_len(bytes: &[u8]) -> usize {
    let mut at = 0usize;
    while at < bytes.len() {
        let Some(header_bytes) = bytes
            .get(at..at + PACK_HEADER_BYTES)
            .and_then(|slice| <&[u8; PACK_HEADER_BYTES]>::try_from(slice).ok())
        else {
            return at;
        };
        let Ok(header) = PackHeader::decode(header_bytes) else {
            return bytes.len();
        };
        let end = at.saturating_add(header.record_bytes() as usize);
        if end > bytes.len() {
            return at;
        }
        at = end;
    }
    at
}

/// The index entries of whole pack records laid end to end in `bytes` (which start at
/// `start` of pack `pack_id`), each header, checksum and padding checked; the first bad one
/// is an error naming its offset.
fn pack_records(pack_id: u32, start: u64, bytes: &[u8]) -> Result<Vec<IndexEntry>, String> {
    let mut entries = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let offset = start + at as u64;
        let header_bytes: &[u8; PACK_HEADER_BYTES] = bytes
            .get(at..at + PACK_HEADER_BYTES)
            .and_then(|slice| slice.try_into().ok())
            .ok_or_else(|| format!("a partial record header at {offset}"))?;
        let header = PackHeader::decode(header_bytes)
            .map_err(|error| format!("record header at {offset}: {error}"))?;
        let record_bytes = header.record_bytes() as usize;
        let record = bytes
            .get(at..at + record_bytes)
            .ok_or_else(|| format!("the record at {offset} runs past the bytes"))?;
        let body = &record[PACK_HEADER_BYTES..];
        let stored_len = header.stored_len as usize;
        header
            .check_body(&body[..stored_len])
            .map_err(|error| format!("record body at {offset}: {error}"))?;
        if body[stored_len..].iter().any(|byte| *byte != 0) {
            return Err(format!("non-zero padding in the record at {offset}"));
        }
        entries.push(IndexEntry {
            hash: header.hash,
            location: BlobLocation::of(pack_id, offset, &header),
        });
        at += record_bytes;
    }
    Ok(entries)
}
