//! The compaction (decision 0011): each swept pack is rewritten with the records its shard's
//! index still points at (`pack-NNNNNN.pack.compact`), the index with it
//! (`blobs.idx.compact`), both through the file layer's `BackgroundWriter` (throttled, synced
//! every 512 KiB); the shard installs them under the `REINDEX` marker; the replaced pack's
//! blocks are freed 8 MiB at a time. The packs with the fewest live bytes go first: a wholly
//! dead pack costs no copy, and on a nearly full disk each frees room for the next.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::blob::scan::{self, ScannedRecord};
use crate::error::{EngineError, ErrorKind};
use crate::file::ops::{self, create_durable, sync_dir, sync_file};
use crate::file::{BackgroundWriter, Released, Throttle, open_replaced, release_replaced};
use crate::format::blob_index::{BlobLocation, INDEX_ENTRY_BYTES, IndexEntry};
use crate::format::pack::{PACK_HEADER_BYTES, PackHeader};
use crate::gc::Collector;
use crate::gc::condemn::{PackPlan, Verdict};
use crate::model::GcReport;
use crate::pipeline::{CompactedPack, ShardRequest};
use crate::store_dir::{REINDEX_MARKER_FILE, compact_path, pack_path};

/// A compaction syncs what it wrote every this many bytes: a multi-megabyte write-back at the
/// final fsync would stall every append's fdatasync behind it (the backup's lesson,
/// benches/results/HISTORY.md); smaller steps keep each stall short.
const SYNC_STEP_BYTES: u64 = 512 << 10;
/// Bytes a replaced pack gives back per step (`file::release_replaced`).
const RELEASE_STEP_BYTES: u64 = 8 << 20;

/// A pack's live records copied: where they now lie, and the copy's length.
struct Copied {
    path: PathBuf,
    relocated: Vec<IndexEntry>,
    len: u64,
}

impl Collector {
    /// Sweeps and compacts each due pack, the fewest live bytes first; a full disk gives up
    /// the reserve (`reserve.rs`) once and retries.
    pub(super) fn compact_packs(
        &self,
        verdict: Verdict,
        report: &mut GcReport,
    ) -> Result<(), EngineError> {
        let Verdict {
            condemned,
            mut plans,
            ..
        } = verdict;
        let mut throttle = Throttle::new(self.bytes_per_s_max);
        plans.sort_by_key(|plan| plan.live_bytes);
        for plan in plans {
            if self.stopping.load(Ordering::Acquire) {
                return Err(EngineError::ShutDown);
            }
            report.blobs_dead += self.sweep(&plan, plan.dead.clone(), &condemned)?.blobs;
            let compacted = match self.compact(&plan, &mut throttle) {
                Err(error) if error.kind() == ErrorKind::NoSpace && self.reserve.give_up() => {
                    self.compact(&plan, &mut throttle)?
                }
                other => other?,
            };
            report.bytes_reclaimed += plan.file_bytes.saturating_sub(compacted);
            report.bytes_rewritten += compacted;
            report.packs_compacted += 1;
        }
        Ok(())
    }

    /// Rewrites one swept pack with the records the index still points at, and the shard's
    /// index to match; the shard installs both. Returns the new pack's length. No `.compact`
    /// file outlives a failed compaction (on a full disk it would hold blocks until the next
    /// open); renamed-in ones are gone already.
    fn compact(&self, plan: &PackPlan, throttle: &mut Throttle) -> Result<u64, EngineError> {
        let result = self.compact_pack(plan, throttle);
        if result.is_err() {
            let dir = self.store.shard_dir(plan.shard);
            let pack = compact_path(&pack_path(&dir, plan.pack_id));
            let index = compact_path(&self.store.blob_index_path(plan.shard));
            let removed = [pack, index]
                .iter()
                .filter(|path| ops::remove(path).is_ok())
                .count();
            if removed > 0 {
                let _ = sync_dir(&dir);
            }
        }
        result
    }

    fn compact_pack(&self, plan: &PackPlan, throttle: &mut Throttle) -> Result<u64, EngineError> {
        let copied = self.copy_live_records(plan, throttle)?;
        let (index_path, index_prefix_end) = self.copy_index(plan, &copied, throttle)?;
        let dir = self.store.shard_dir(plan.shard);
        let old_path = pack_path(&dir, plan.pack_id);
        // Held past the rename, so that the old file's blocks are freed here, a step at a
        // time, rather than all at once by whichever thread closes it last: freeing a large
        // file in one go stalls the file system's journal, and every append's fdatasync with
        // it (benches/results/HISTORY.md).
        let old_file = open_replaced(&old_path).map_err(write_error(&old_path))?;
        let len = copied.len;
        self.switch_over(plan, copied, index_path, index_prefix_end)?;
        // Freed a step at a time (see `release_replaced`), paced by the throttle: 8 MiB, then
        // 2 ms. A hard link (a backup on this file system) keeps the old file whole.
        let released = release_replaced(old_file, RELEASE_STEP_BYTES, |bytes| {
            throttle.take(bytes / 8);
            std::thread::sleep(Duration::from_millis(2));
        });
        if released == Released::Shared {
            tracing::info!(
                pack = %old_path.display(),
                "the replaced pack has another name (a backup on this file system hard-linked \
                 it): its blocks stay until that name is removed"
            );
        }
        Ok(len)
    }

    /// The records of `plan`'s pack the index points at, copied to `pack.compact`: swept
    /// blobs, and older copies of blobs stored again elsewhere, are left behind.
    fn copy_live_records(
        &self,
        plan: &PackPlan,
        throttle: &mut Throttle,
    ) -> Result<Copied, EngineError> {
        let view = &self.published.shards[usize::from(plan.shard)];
        let old_path = pack_path(&view.dir, plan.pack_id);
        let new_path = compact_path(&old_path);
        let mut out = BackgroundWriter::create(&new_path, SYNC_STEP_BYTES, throttle)
            .map_err(write_error(&new_path))?;
        let mut relocated: Vec<IndexEntry> = Vec::new();
        let mut failure: Option<std::io::Error> = None;
        let mut header_bytes = [0u8; PACK_HEADER_BYTES];
        let stopping = &self.stopping;
        let visit = |record: ScannedRecord<'_>| {
            if failure.is_some() {
                return;
            }
            if stopping.load(Ordering::Relaxed) {
                failure = Some(std::io::Error::other("the engine is stopping"));
                return;
            }
            let header: PackHeader = record.header;
            let here = BlobLocation::of(plan.pack_id, record.offset, &header);
            if view.location(&header.hash) != Some(here) {
                return;
            }
            header.encode(&mut header_bytes);
            // Records keep their alignment: the padding after a body is zeros.
            let padding = header.record_bytes() as usize - PACK_HEADER_BYTES - record.body.len();
            let at = out.position();
            out.count_read(header.record_bytes());
            let written = out
                .write(&header_bytes)
                .and_then(|()| out.write(record.body))
                .and_then(|()| out.write(&[0u8; 64][..padding]));
            if let Err(error) = written {
                failure = Some(error);
                return;
            }
            relocated.push(IndexEntry {
                hash: header.hash,
                location: BlobLocation {
                    pack_offset: at,
                    ..here
                },
            });
        };
        let durable_end = u64::MAX;
        let scanned = scan::scan_pack(&old_path, 0, false, durable_end, visit)
            .map_err(|source| EngineError::io(&old_path, source))?;
        if let Some(error) = failure {
            return Err(EngineError::from_write(&new_path, error));
        }
        if let crate::tail::Tail::Corrupt(corruption) = scanned.tail {
            drop(out);
            let _ = ops::remove(&new_path);
            return Err(EngineError::Corrupt(corruption));
        }
        let len = out.finish().map_err(write_error(&new_path))?;
        Ok(Copied {
            path: new_path,
            relocated,
            len,
        })
    }

    /// The shard's index up to now (its `Snapshot` cut), this pack's entries replaced by the
    /// relocated ones, written to `blobs.idx.compact`. Answers that path and the cut.
    fn copy_index(
        &self,
        plan: &PackPlan,
        copied: &Copied,
        throttle: &mut Throttle,
    ) -> Result<(PathBuf, u64), EngineError> {
        let cut = self.shard_snapshot(usize::from(plan.shard))?;
        let index_path = self.store.blob_index_path(plan.shard);
        let new_index = compact_path(&index_path);
        let mut old_index = vec![0u8; cut.index_end as usize];
        crate::file::ScanFile::open(&index_path)
            .and_then(|file| file.read_exact_at(&mut old_index, 0))
            .map_err(|source| EngineError::io(&index_path, source))?;
        let mut out = BackgroundWriter::create(&new_index, SYNC_STEP_BYTES, throttle)
            .map_err(write_error(&new_index))?;
        let mut placed = false;
        for (position, chunk) in old_index.chunks_exact(INDEX_ENTRY_BYTES).enumerate() {
            let mut bytes = [0u8; INDEX_ENTRY_BYTES];
            bytes.copy_from_slice(chunk);
            let Ok(Some(entry)) = IndexEntry::decode(&bytes) else {
                return Err(EngineError::Corrupt(crate::error::Corruption::new(
                    &index_path,
                    (position * INDEX_ENTRY_BYTES) as u64,
                    "blob index entry does not decode".to_string(),
                )));
            };
            if entry.location.pack_id != plan.pack_id {
                out.write(&bytes).map_err(write_error(&new_index))?;
                continue;
            }
            if !placed {
                placed = true;
                for kept in &copied.relocated {
                    kept.encode(&mut bytes);
                    out.write(&bytes).map_err(write_error(&new_index))?;
                }
            }
        }
        assert!(
            placed || copied.relocated.is_empty(),
            "pack {} has live records but no index entries",
            plan.pack_id
        );
        out.finish().map_err(write_error(&new_index))?;
        Ok((new_index, cut.index_end))
    }

    /// The switch-over: under the marker, the shard renames and points its readers at the new
    /// files without waiting for the disk; this thread makes it durable, then removes the
    /// marker.
    fn switch_over(
        &self,
        plan: &PackPlan,
        copied: Copied,
        index_path: PathBuf,
        index_prefix_end: u64,
    ) -> Result<(), EngineError> {
        let dir = self.store.shard_dir(plan.shard);
        sync_dir(&dir).map_err(write_error(&dir))?;
        let marker = dir.join(REINDEX_MARKER_FILE);
        create_durable(&marker).map_err(write_error(&marker))?;
        sync_dir(&dir).map_err(write_error(&dir))?;
        let (new_pack, new_index) = (copied.path.clone(), index_path.clone());
        // The pack's file is replaced: no backup or cut may be reading it (module doc of gc).
        let _exclusive = self.exclusive()?;
        let (reply, answer) = oneshot::channel();
        self.shards[usize::from(plan.shard)]
            .send(ShardRequest::GcInstall {
                install: CompactedPack {
                    pack_id: plan.pack_id,
                    pack_path: copied.path,
                    relocated: copied.relocated,
                    index_path,
                    index_prefix_end,
                },
                reply,
            })
            .map_err(|_| EngineError::ShutDown)?;
        let installed = answer.recv().map_err(|_| EngineError::ShutDown)?;
        if let Err(error) = installed {
            // Not installed: the old files stand; the next open would only rebuild the index.
            let _ = ops::remove(&new_pack);
            let _ = ops::remove(&new_index);
            let _ = ops::remove(&marker);
            let _ = sync_dir(&dir);
            return Err(error);
        }
        let index = self.store.blob_index_path(plan.shard);
        sync_file(&index).map_err(write_error(&index))?;
        sync_dir(&dir).map_err(write_error(&dir))?;
        ops::remove(&marker).map_err(write_error(&marker))?;
        sync_dir(&dir).map_err(write_error(&dir))
    }
}

fn write_error(path: &Path) -> impl FnOnce(std::io::Error) -> EngineError + use<> {
    let path = path.to_path_buf();
    move |source| EngineError::from_write(&path, source)
}
