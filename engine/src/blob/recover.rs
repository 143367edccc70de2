//! Opening one blob shard: load its index, scan what the index does not cover, cut a torn
//! tail, refuse mid-file damage (or cut it, with `repair`), and hand the actor its state.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::blob::scan::{self, ScannedRecord};
use crate::blob::view::{BlobIndex, ShardView};
use crate::config::{OpenCheck, PACKS_PER_SHARD_MAX};
use crate::error::{Corruption, OpenError};
use crate::file::ops::{self, create_durable, sync_dir};
use crate::format::blob_index::{BlobLocation, INDEX_ENTRY_BYTES, IndexEntry};
use crate::format::pack::PackHeader;
use crate::ids::BlobHashBuildHasher;
use crate::keys::StoreKeys;
use crate::store_dir::StoreDir;
use crate::tail::Tail;

/// A recovered shard: its published view and where the actor continues writing.
#[derive(Debug)]
pub(crate) struct RecoveredShard {
    pub view: ShardView,
    pub cursor: ShardCursor,
}

/// Where the shard actor continues writing.
#[derive(Debug)]
pub(crate) struct ShardCursor {
    pub shard: u16,
    pub pack_id: u32,
    pub pack_path: PathBuf,
    /// Records end here; prepared zeros may follow up to `pack_file_len`.
    pub pack_end: u64,
    pub pack_file_len: u64,
    pub index_path: PathBuf,
    pub index_end: u64,
}

/// Deletes a compaction's leftover `.compact` files; with the REINDEX marker present, deletes
/// the index too (the scan of every pack rebuilds it), then the marker. Each step is durable
/// before the next, so a crash here redoes it.
fn finish_compaction(dir: &Path, index_path: &Path) -> std::io::Result<()> {
    let mut removed = false;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.ends_with(crate::store_dir::COMPACT_SUFFIX))
        {
            tracing::info!(file = %entry.path().display(), "removing an unfinished compaction's file");
            ops::remove(&entry.path())?;
            removed = true;
        }
    }
    let marker = dir.join(crate::store_dir::REINDEX_MARKER_FILE);
    if marker.exists() {
        tracing::warn!(
            shard = %dir.display(),
            "a compaction was switching files when the store stopped: rebuilding the blob index \
             from the packs"
        );
        if index_path.exists() {
            ops::remove(index_path)?;
        }
        sync_dir(dir)?;
        ops::remove(&marker)?;
        removed = true;
    }
    if removed {
        sync_dir(dir)?;
    }
    Ok(())
}

pub(crate) fn recover_shard(
    store: &StoreDir,
    shard: u16,
    open_check: OpenCheck,
    repair: bool,
    keys: &Arc<StoreKeys>,
) -> Result<RecoveredShard, OpenError> {
    let dir = store.shard_dir(shard);
    let index_path = store.blob_index_path(shard);

    // 0. A compaction interrupted by a crash (`blob/shard.rs`, `gc/compact.rs`): its `.compact` files
    //    go (renamed into place already, or never to be); with the REINDEX marker the pack
    //    and the index may disagree, so the index is rebuilt from the packs.
    finish_compaction(&dir, &index_path).map_err(io(&dir))?;

    // 1. Packs present, contiguous from 0.
    let packs = present_packs(store, shard, &dir)?;
    let newest_pack = (packs.len() - 1) as u32;
    // 2. The index: entries must tile the packs from the start, in order.
    let (mut entries, mut index_end, index_file_len) =
        load_index(shard, &dir, &index_path, &packs, repair)?;

    // 3. Scan the packs: all of them (full check), or from where the index coverage ends.
    let (scan_from_pack, scan_from_offset) = match (open_check, entries.last()) {
        (OpenCheck::Full, _) | (_, None) => (0u32, 0u64),
        (OpenCheck::Tail, Some(last)) => {
            let end = last.location.pack_offset + last.location.record_bytes();
            check_last_entry(&packs[last.location.pack_id as usize].1, last)?;
            (last.location.pack_id, end)
        }
    };
    let (found, pack_end) = scan_packs(
        shard,
        &packs,
        &entries,
        (scan_from_pack, scan_from_offset),
        repair,
    )?;

    // 4. Reconcile: in a full check the scan re-found the indexed records, which must agree.
    let mut new_entries = found;
    if open_check == OpenCheck::Full {
        reconcile(
            &index_path,
            &mut entries,
            &mut index_end,
            &mut new_entries,
            repair,
        )?;
    }
    assert!(
        new_entries
            .iter()
            .all(|entry| entry.location.pack_id >= scan_from_pack)
    );

    // 5. Index what the scan found beyond the index, durably, then build the in-memory index.
    if index_end < index_file_len || !new_entries.is_empty() {
        rewrite_index_tail(&index_path, index_end, &new_entries)?;
        index_end += (new_entries.len() * INDEX_ENTRY_BYTES) as u64;
    }
    entries.extend(new_entries);
    let view = publish(shard, &dir, &packs, &entries, keys.clone())?;
    let pack_path = packs[newest_pack as usize].1.clone();
    let pack_file_len = std::fs::metadata(&pack_path).map_err(io(&pack_path))?.len();
    let cursor = ShardCursor {
        shard,
        pack_id: newest_pack,
        pack_path,
        pack_end,
        pack_file_len,
        index_path,
        index_end,
    };
    Ok(RecoveredShard { view, cursor })
}

/// An I/O error at `path`, as opening reports it.
fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OpenError + use<> {
    let path = path.to_path_buf();
    move |source| OpenError::io(path, source)
}

/// Step 1: packs present, contiguous from 0 (an empty shard gets its first, durably).
fn present_packs(
    store: &StoreDir,
    shard: u16,
    dir: &Path,
) -> Result<Vec<(u32, PathBuf)>, OpenError> {
    let mut packs = scan::list_packs(dir).map_err(io(dir))?;
    if packs.is_empty() {
        let path = store.pack_path(shard, 0);
        create_durable(&path).map_err(io(&path))?;
        sync_dir(dir).map_err(io(dir))?;
        packs.push((0, path));
    }
    for (position, (pack_id, path)) in packs.iter().enumerate() {
        if *pack_id as usize != position {
            return Err(OpenError::Inconsistent(format!(
                "pack {} exists but pack {position} is missing in {}",
                path.display(),
                dir.display()
            )));
        }
    }
    if packs.len() > PACKS_PER_SHARD_MAX as usize {
        return Err(OpenError::Inconsistent(format!(
            "{} holds too many packs",
            dir.display()
        )));
    }
    Ok(packs)
}

/// Step 2, the index: entries must tile the packs from the start, in order. Answers its
/// entries (those to keep), where they end, and the index file's length.
fn load_index(
    shard: u16,
    dir: &Path,
    index_path: &Path,
    packs: &[(u32, PathBuf)],
    repair: bool,
) -> Result<(Vec<IndexEntry>, u64, u64), OpenError> {
    let mut pack_lens = Vec::with_capacity(packs.len());
    for (_, path) in packs {
        pack_lens.push(std::fs::metadata(path).map_err(io(path))?.len());
    }
    let index_scan = if index_path.exists() {
        scan::scan_index(index_path).map_err(io(index_path))?
    } else {
        create_durable(index_path).map_err(io(index_path))?;
        sync_dir(dir).map_err(io(dir))?;
        scan::scan_index(index_path).map_err(io(index_path))?
    };
    if index_scan.predates_tenants {
        // Its entries say nothing of their records' tenants, whose quotas count their bytes
        // (decision 0032 §3): the scan of every pack rebuilds it, once.
        tracing::info!(
            shard,
            "the blob index predates tenant fields: rebuilding it from the packs (once)"
        );
        return Ok((Vec::new(), 0, index_scan.file_len));
    }
    let mut entries = index_scan.entries;
    let mut index_end = (entries.len() * INDEX_ENTRY_BYTES) as u64;
    match index_scan.tail {
        Tail::Clean | Tail::Preallocated { .. } => {}
        Tail::Torn { offset, reason } => {
            tracing::info!(shard, offset, %reason, "cutting the torn tail of the blob index");
        }
        Tail::Corrupt(corruption) if repair => {
            tracing::warn!(%corruption, "repair: dropping the blob index from the damaged entry on");
        }
        Tail::Corrupt(corruption) => return Err(OpenError::Corrupt(corruption)),
    }
    let pack_paths: Vec<PathBuf> = packs.iter().map(|(_, path)| path.clone()).collect();
    if let Err((keep, corruption)) = check_tiling(index_path, &pack_paths, &entries, &pack_lens) {
        if !repair {
            return Err(OpenError::Corrupt(corruption));
        }
        tracing::warn!(%corruption, "repair: dropping blob index entries from the damaged one on");
        entries.truncate(keep);
        index_end = (keep * INDEX_ENTRY_BYTES) as u64;
    }
    Ok((entries, index_end, index_scan.file_len))
}

/// Step 3: scans the packs from `(pack, offset)` to the newest, cutting a torn tail (or,
/// with `repair`, the newest pack's damaged one). Answers the records found and where the
/// newest pack's records end.
fn scan_packs(
    shard: u16,
    packs: &[(u32, PathBuf)],
    entries: &[IndexEntry],
    (scan_from_pack, scan_from_offset): (u32, u64),
    repair: bool,
) -> Result<(Vec<IndexEntry>, u64), OpenError> {
    let newest_pack = (packs.len() - 1) as u32;
    let mut found: Vec<IndexEntry> = Vec::new();
    let mut pack_end = 0;
    for pack_id in scan_from_pack..=newest_pack {
        let path = &packs[pack_id as usize].1;
        let start = if pack_id == scan_from_pack {
            scan_from_offset
        } else {
            0
        };
        let is_newest = pack_id == newest_pack;
        let durable_end = scan::indexed_end(entries, pack_id);
        let visit = |record: ScannedRecord<'_>| {
            found.push(entry_of(pack_id, record.offset, &record.header));
        };
        let pack_scan =
            scan::scan_pack(path, start, is_newest, durable_end, visit).map_err(io(path))?;
        let valid_end = pack_scan.tail.valid_end(pack_scan.file_len);
        match pack_scan.tail {
            Tail::Clean | Tail::Preallocated { .. } => {}
            Tail::Torn { offset, reason } => {
                tracing::info!(shard, pack = %path.display(), offset, %reason, "cutting a torn pack tail");
                truncate(path, offset)?;
            }
            Tail::Corrupt(corruption) if repair && is_newest => {
                tracing::warn!(%corruption, "repair: cutting the pack at the damaged record");
                truncate(path, corruption.offset)?;
            }
            Tail::Corrupt(corruption) => return Err(OpenError::Corrupt(corruption)),
        }
        if is_newest {
            pack_end = valid_end;
        }
    }
    Ok((found, pack_end))
}

/// Step 4, a full check's reconciliation: the scan re-found the indexed records
/// (`new_entries` starts with them), which must agree with `entries`; with `repair`, the
/// index is cut at the first that does not. Leaves in `new_entries` only what lies beyond
/// the index.
fn reconcile(
    index_path: &Path,
    entries: &mut Vec<IndexEntry>,
    index_end: &mut u64,
    new_entries: &mut Vec<IndexEntry>,
    repair: bool,
) -> Result<(), OpenError> {
    let agreeing = entries
        .iter()
        .zip(new_entries.iter())
        .take_while(|(a, b)| a == b)
        .count();
    if agreeing < entries.len() {
        let offset = (agreeing * INDEX_ENTRY_BYTES) as u64;
        let reason = if agreeing < new_entries.len() {
            "entry does not match the pack record it points to"
        } else {
            "entry points past the valid end of the packs"
        };
        let corruption = Corruption::new(index_path, offset, reason);
        if !repair {
            return Err(OpenError::Corrupt(corruption));
        }
        tracing::warn!(%corruption, "repair: dropping blob index entries from the damaged one on");
        entries.truncate(agreeing);
        *index_end = offset;
    }
    new_entries.drain(..entries.len());
    Ok(())
}

/// Step 5: the shard's in-memory index, built from `entries`, and its view, published.
fn publish(
    shard: u16,
    dir: &Path,
    packs: &[(u32, PathBuf)],
    entries: &[IndexEntry],
    keys: Arc<StoreKeys>,
) -> Result<ShardView, OpenError> {
    let index = BlobIndex::with_capacity_and_hasher(entries.len().max(1024), BlobHashBuildHasher);
    let view = ShardView::new(shard, dir.to_path_buf(), index, keys);
    view.add_packs(packs.iter().cloned())
        .map_err(|(path, source)| OpenError::io(path, source))?;
    for entry in entries {
        if view.contains(&entry.hash) {
            // A garbage collection swept the blob, a put stored it again, and its old copy
            // waits for its pack's compaction: the later copy is the one the index keeps.
            view.remove(&entry.hash);
        }
        view.publish(entry.hash, entry.location);
    }
    Ok(view)
}

fn entry_of(pack_id: u32, pack_offset: u64, header: &PackHeader) -> IndexEntry {
    IndexEntry {
        hash: header.hash,
        location: BlobLocation::of(pack_id, pack_offset, header),
    }
}

/// Index entries must describe the packs record after record from pack 0, offset 0, and stay
/// inside the files. Returns the position of the first entry that does not, and the damage:
/// the index itself when it is out of order, the pack when it ends before a record the index
/// vouches for (the pack lost synced data).
fn check_tiling(
    index_path: &Path,
    pack_paths: &[PathBuf],
    entries: &[IndexEntry],
    pack_lens: &[u64],
) -> Result<(), (usize, Corruption)> {
    let mut expected_pack = 0u32;
    let mut expected_offset = 0u64;
    for (position, entry) in entries.iter().enumerate() {
        let at = (position * INDEX_ENTRY_BYTES) as u64;
        let location = entry.location;
        // The next pack with records: packs in between are empty (a compaction found every
        // record in them dead).
        let next_pack = location.pack_id > expected_pack
            && location.pack_offset == 0
            && pack_lens.get(expected_pack as usize) == Some(&expected_offset)
            && (expected_pack + 1..location.pack_id)
                .all(|between| pack_lens.get(between as usize) == Some(&0));
        let same_pack =
            location.pack_id == expected_pack && location.pack_offset == expected_offset;
        if !same_pack && !next_pack {
            let reason = format!(
                "entry points to pack {} offset {}, expected pack {expected_pack} offset \
                 {expected_offset}",
                location.pack_id, location.pack_offset
            );
            return Err((position, Corruption::new(index_path, at, reason)));
        }
        let end = location.pack_offset + location.record_bytes();
        match (
            pack_lens.get(location.pack_id as usize),
            pack_paths.get(location.pack_id as usize),
        ) {
            (Some(&len), _) if end <= len => {}
            (Some(&len), Some(pack)) => {
                let reason = format!(
                    "the pack ends at {len}, before the record of blob {} that entry {position} of \
                     the blob index lists as durable: the pack lost synced data",
                    entry.hash
                );
                return Err((
                    position,
                    Corruption::new(pack, location.pack_offset.min(len), reason),
                ));
            }
            _ => {
                let reason = format!(
                    "entry points into pack {}, which does not exist",
                    location.pack_id
                );
                return Err((position, Corruption::new(index_path, at, reason)));
            }
        }
        expected_pack = location.pack_id;
        expected_offset = end;
    }
    Ok(())
}

/// Cheap evidence that the index and the pack agree where the index ends.
fn check_last_entry(pack_path: &Path, entry: &IndexEntry) -> Result<(), OpenError> {
    let file = crate::file::ScanFile::open(pack_path)
        .map_err(|source| OpenError::io(pack_path, source))?;
    let mut header_bytes = [0u8; crate::format::pack::PACK_HEADER_BYTES];
    file.read_exact_at(&mut header_bytes, entry.location.pack_offset)
        .map_err(|source| OpenError::io(pack_path, source))?;
    let corrupt = |reason: String| {
        OpenError::Corrupt(Corruption::new(
            pack_path,
            entry.location.pack_offset,
            reason,
        ))
    };
    let header = PackHeader::decode(&header_bytes).map_err(|error| corrupt(error.to_string()))?;
    if entry_of(entry.location.pack_id, entry.location.pack_offset, &header) != *entry {
        return Err(corrupt("record differs from its index entry".into()));
    }
    Ok(())
}

fn truncate(path: &Path, len: u64) -> Result<(), OpenError> {
    // A sealed pack may be shared with a backup (a hard link): cut a copy of our own.
    crate::file::make_private(path).map_err(|source| OpenError::io(path, source))?;
    ops::cut_durably(path, len).map_err(|source| OpenError::io(path, source))
}

/// Cuts the index at `index_end` and appends `entries`, durably.
fn rewrite_index_tail(
    path: &Path,
    index_end: u64,
    entries: &[IndexEntry],
) -> Result<(), OpenError> {
    let mut bytes = Vec::with_capacity(entries.len() * INDEX_ENTRY_BYTES);
    for entry in entries {
        let mut encoded = [0u8; INDEX_ENTRY_BYTES];
        entry.encode(&mut encoded);
        bytes.extend_from_slice(&encoded);
    }
    ops::rewrite_tail(path, index_end, &bytes).map_err(|source| OpenError::io(path, source))
}
