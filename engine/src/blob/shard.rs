//! The blob shard actor: sole writer of its packs and index. Group commit (`group_commit.rs`):
//! it drains its queue, appends every new record with one write, hands the batch's appends on
//! to the sequencer in one message (which writes their turns while the pack syncs, decision
//! 0014), answers the puts that asked to know once written, issues ONE fdatasync for the
//! batch, publishes the index entries, and only then tells the sequencer the batch is durable
//! and answers the other puts (`pipeline.rs`).
//!
//! A put carries several blobs (a manifest after its chunks, an append's payloads); they all
//! join the batch it is admitted to, in their order, so that its appends are handed on with
//! one batch and a manifest is never durable without its chunks of this shard.
//!
//! Dedup is double-checked here: the caller looked the hash up before sending, but between
//! that look-up and this actor another put of the same hash may have been stored (answer:
//! already stored) or be waiting in this very batch (answer both once the one record is
//! durable).

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::blob::condemned::Condemned;
use crate::blob::recover::ShardCursor;
use crate::blob::view::ShardView;
use crate::config::{Limits, PACKS_PER_SHARD_MAX};
use crate::error::EngineError;
use crate::file::ops::{self, create_durable, sync_dir};
use crate::file::{ActorFile, ActorIo, ReadFile, open_actor_file};
use crate::format::blob_index::{BlobLocation, INDEX_ENTRY_BYTES, IndexEntry};
use crate::format::pack::EncodedBlob;
use crate::group_commit::{Admitted, GroupCommit};
use crate::ids::BlobHash;
use crate::ids::TenantId;
use crate::pipeline::{
    AfterPut, BatchReply, BlobNotices, BlobPut, BlobsDurable, CompactedPack, HandedAppend,
    HandedBlob, PutOutcome, PutReply, PutWritten, SequencerInbox, ShardBatch, ShardRequest,
    ShardSnapshot, SweptBlobs, TurnAppend, TurnBlob, WrittenReply,
};
use crate::published::Published;
use crate::quota::QuotaExceeded;
use crate::store_dir::{REINDEX_MARKER_FILE, pack_path};

mod ingest;

/// Index entries written since the last index fsync before one is started in the background.
const INDEX_SYNC_ENTRIES: u32 = 4096;

pub(crate) struct ShardActor {
    shard: u16,
    published: Arc<Published>,
    sequencer: SequencerInbox,
    /// Where `BlobsDurable` notices go (the sequencer waits for them).
    notices: BlobNotices,
    /// Batches whose appends were handed on before their fdatasync (`ShardBatch::batch`).
    batches_handed: u64,
    limits: Limits,
    shard_dir: PathBuf,
    pack: ActorFile,
    pack_id: u32,
    pack_path: PathBuf,
    /// Records end here.
    pack_end: u64,
    /// File length: prepared zeros lie between `pack_end` and here.
    pack_file_len: u64,
    /// A rotation began (the pack was cut to its last record) and has not finished: the next
    /// pack file may exist already, which makes this pack sealed for recovery, so nothing
    /// more goes into it — no records, no prepared zeros — and the next batch (or GC seal)
    /// finishes the rotation first.
    sealing: bool,
    io: ActorIo,
    /// Reused for each batch's records, written with one pwrite.
    write_buffer: Vec<u8>,
    index: ActorFile,
    index_path: PathBuf,
    index_end: u64,
    /// Set when an index write failed: the index stops growing for this run (recovery scans
    /// the packs past it), so that it never has a gap.
    index_frozen: bool,
    index_unsynced_entries: u32,
    batch: Batch,
    /// The condemned blobs of the last garbage-collection sweep: a fresh copy of a swept one
    /// is reported written again (`Condemned::rewritten`).
    condemned: Option<Arc<Condemned>>,
}

/// A put with at least one blob among the batch's records, waiting for the batch.
#[derive(Debug)]
struct WaitingPut {
    blobs: Vec<PutBlob>,
    then: AfterPut,
}

/// One blob of a waiting put: durable already when admitted, or a record of the batch.
#[derive(Clone, Copy, Debug)]
struct PutBlob {
    hash: BlobHash,
    raw_len: u32,
    chunk: bool,
    /// `None`: durable when the put was admitted.
    record: Option<usize>,
}

impl AfterPut {
    fn fail(self, error: EngineError) {
        match self {
            AfterPut::Durable(reply) => drop(reply.send(Err(error))),
            AfterPut::Written(reply) => drop(reply.send(Err(error))),
            AfterPut::Append { reply, .. } => drop(reply.send(Err(error))),
        }
    }
}

/// Records of one group commit and the puts that wait for them.
#[derive(Default)]
struct Batch {
    records: Vec<EncodedBlob>,
    position_of: HashMap<BlobHash, usize>,
    /// In admission order: a record is `Stored` for the first put naming it, `AlreadyStored`
    /// for the others.
    puts: Vec<WaitingPut>,
    bytes: u64,
    /// Bytes its puts reserved per tenant (`quota::QuotaTable::reserve_bytes`).
    reserved: HashMap<TenantId, u64>,
}

impl Batch {
    fn is_full(&self, limits: &Limits) -> bool {
        let record_bytes_max = crate::format::pack::record_bytes(limits.blob_bytes_max);
        self.records.len() >= limits.shard_batch_records_max as usize
            || self.bytes + record_bytes_max > limits.shard_batch_bytes_max
    }
}

/// A written batch's puts sorted by what they wait for, each blob's outcome known: a record
/// is `Stored` for the first put naming it, `AlreadyStored` for the others.
struct BatchAnswers {
    /// The number the batch gets if anyone waits for its notice.
    batch: ShardBatch,
    appends: Vec<(Vec<TurnAppend>, BatchReply)>,
    written: Vec<(WrittenReply, Vec<PutOutcome>)>,
    durable: Vec<(PutReply, Vec<PutOutcome>)>,
    /// Every put's blobs and outcomes, for the chunk counters once durable.
    counted: Vec<(Vec<PutBlob>, Vec<PutOutcome>)>,
}

impl BatchAnswers {
    fn of(batch: Batch, number: ShardBatch) -> BatchAnswers {
        let mut answers = BatchAnswers {
            batch: number,
            appends: Vec::new(),
            written: Vec::new(),
            durable: Vec::new(),
            counted: Vec::new(),
        };
        let mut first_named = vec![true; batch.records.len()];
        for WaitingPut { blobs, then } in batch.puts {
            let outcomes: Vec<PutOutcome> = blobs
                .iter()
                .map(|blob| match blob.record {
                    Some(record) if std::mem::take(&mut first_named[record]) => PutOutcome::Stored,
                    _ => PutOutcome::AlreadyStored,
                })
                .collect();
            match then {
                AfterPut::Append { appends, reply } => {
                    let turns = handed_on(appends, &blobs, &outcomes, Some(number));
                    answers.appends.push((turns, reply));
                }
                AfterPut::Written(reply) => answers.written.push((reply, outcomes.clone())),
                AfterPut::Durable(reply) => answers.durable.push((reply, outcomes.clone())),
            }
            answers.counted.push((blobs, outcomes));
        }
        answers
    }
}

impl ShardActor {
    /// Opens the shard's files for writing on the current (actor) thread.
    pub async fn open(
        cursor: ShardCursor,
        published: Arc<Published>,
        sequencer: SequencerInbox,
        notices: BlobNotices,
        limits: Limits,
        io: ActorIo,
    ) -> Result<ShardActor, EngineError> {
        let pack = open_actor_file(&cursor.pack_path, io.sync_mode).await?;
        let index = open_actor_file(&cursor.index_path, io.sync_mode).await?;
        let shard_dir = published.shards[usize::from(cursor.shard)].dir.clone();
        let actor = ShardActor {
            shard: cursor.shard,
            published,
            sequencer,
            notices,
            batches_handed: 0,
            limits,
            shard_dir,
            pack,
            pack_id: cursor.pack_id,
            pack_path: cursor.pack_path,
            pack_end: cursor.pack_end,
            pack_file_len: cursor.pack_file_len,
            sealing: false,
            io,
            write_buffer: Vec::new(),
            index,
            index_path: cursor.index_path,
            index_end: cursor.index_end,
            index_frozen: false,
            index_unsynced_entries: 0,
            batch: Batch::default(),
            condemned: None,
        };
        Ok(actor)
    }

    /// Decides one put: answered (or handed on) at once when every blob is durable already
    /// or the store is read-only; else its new blobs become records of this batch, and those
    /// of the same hash as a record already in it join that record.
    async fn admit_put(&mut self, blobs: Vec<BlobPut>, then: AfterPut) {
        if let Err(error) = self.published.status.check_writable() {
            then.fail(error);
            return;
        }
        if let Err(refused) = self.reserve_bytes(&blobs) {
            then.fail(EngineError::QuotaExceeded(refused));
            return;
        }
        let mut waiting = Vec::with_capacity(blobs.len());
        for BlobPut { blob, chunk } in blobs {
            let (hash, raw_len) = (blob.header.hash, blob.header.raw_len);
            assert_eq!(
                hash.shard(self.published.shards.len() as u16),
                self.shard,
                "misrouted blob"
            );
            let record = if self.view().contains(&hash) {
                None
            } else if let Some(&position) = self.batch.position_of.get(&hash) {
                Some(position)
            } else {
                let position = self.batch.records.len();
                self.batch.position_of.insert(hash, position);
                self.batch.bytes += blob.bytes.len() as u64;
                self.batch.records.push(blob);
                Some(position)
            };
            waiting.push(PutBlob {
                hash,
                raw_len,
                chunk,
                record,
            });
        }
        if waiting.iter().any(|blob| blob.record.is_some()) {
            self.batch.puts.push(WaitingPut {
                blobs: waiting,
                then,
            });
            return;
        }
        // Every blob durable already: nothing to wait for.
        let outcomes = vec![PutOutcome::AlreadyStored; waiting.len()];
        self.count_chunks(&waiting, &outcomes);
        match then {
            AfterPut::Durable(reply) => drop(reply.send(Ok(outcomes))),
            AfterPut::Written(reply) => drop(reply.send(Ok(PutWritten {
                outcomes,
                pending: None,
            }))),
            AfterPut::Append { appends, reply } => {
                let appends = handed_on(appends, &waiting, &outcomes, None);
                self.sequencer.append(appends, reply).await;
            }
        }
    }

    /// Reserves the bytes a put adds to its tenant's (decision 0032 §3): its records neither
    /// stored nor in the batch already. A put refused here changes nothing: none of its blobs
    /// joins the batch. The batch lets the reservation go once published or failed.
    fn reserve_bytes(&mut self, blobs: &[BlobPut]) -> Result<(), QuotaExceeded> {
        // A store without limits reserves nothing: a put pays no look-up for quotas it has
        // not got (a batch releases only what it reserved).
        let quotas = &self.published.quotas;
        let Some(first) = blobs.first().filter(|_| !quotas.is_empty()) else {
            return Ok(());
        };
        let tenant_id = first.blob.header.tenant_id;
        let mut seen = std::collections::HashSet::with_capacity(blobs.len());
        let mut bytes = 0u64;
        for BlobPut { blob, .. } in blobs {
            assert_eq!(blob.header.tenant_id, tenant_id, "a put is one tenant's");
            let hash = blob.header.hash;
            let new = !self.view().contains(&hash)
                && !self.batch.position_of.contains_key(&hash)
                && seen.insert(hash);
            if new {
                bytes += blob.bytes.len() as u64;
            }
        }
        if bytes == 0 {
            return Ok(());
        }
        let published = &self.published;
        let contexts = published.contexts.load();
        let tenant = contexts
            .tenants
            .name(tenant_id)
            .map(|name| (name, quotas.of(name)));
        quotas.reserve_bytes(tenant_id, tenant, bytes, || {
            published.tenant_bytes(tenant_id)
        })?;
        *self.batch.reserved.entry(tenant_id).or_default() += bytes;
        Ok(())
    }

    /// Lets go of what a batch reserved, once it is published (its bytes count in the shard
    /// now) or failed.
    fn release_bytes(&self, reserved: HashMap<TenantId, u64>) {
        for (tenant_id, bytes) in reserved {
            self.published.quotas.release_bytes(tenant_id, bytes);
        }
    }

    /// The chunk counters of a put's blobs, once their outcomes are known and durable.
    fn count_chunks(&self, blobs: &[PutBlob], outcomes: &[PutOutcome]) {
        let counters = &self.view().counters;
        for (blob, outcome) in blobs.iter().zip(outcomes) {
            if !blob.chunk {
                continue;
            }
            if *outcome == PutOutcome::Stored {
                counters.chunks_written.fetch_add(1, Ordering::Relaxed);
            } else {
                counters.chunk_dedup_hits.fetch_add(1, Ordering::Relaxed);
                counters
                    .chunk_bytes_deduped
                    .fetch_add(u64::from(blob.raw_len), Ordering::Relaxed);
            }
        }
    }

    /// Before the fdatasync: the batch's appends go to the sequencer in one message, then the
    /// `Written` puts are answered, so that whoever names this batch to the sequencer does so
    /// after that message. The batch gets its number only when someone will wait for its
    /// notice; answers that number.
    async fn hand_on(&mut self, answers: &mut BatchAnswers) -> Option<ShardBatch> {
        let appends = std::mem::take(&mut answers.appends);
        let written = std::mem::take(&mut answers.written);
        if appends.is_empty() && written.is_empty() {
            return None;
        }
        let handed = answers.batch;
        self.batches_handed = handed.batch;
        if !appends.is_empty() {
            self.sequencer.append_pending(handed, appends).await;
        }
        for (reply, outcomes) in written {
            let answer = PutWritten {
                outcomes,
                pending: Some(handed),
            };
            drop(reply.send(Ok(answer)));
        }
        Some(handed)
    }

    fn view(&self) -> &ShardView {
        &self.published.shards[usize::from(self.shard)]
    }

    /// Appends the batch's records to the pack with one write (not synced yet: `sync_batch`),
    /// returning their index entries and where they end; rotating to a new pack first when this one would pass `pack_bytes_max`.
    async fn write_batch(
        &mut self,
        records: &[EncodedBlob],
        bytes: u64,
    ) -> Result<(Vec<IndexEntry>, u64), EngineError> {
        if self.sealing || (self.pack_end > 0 && self.pack_end + bytes > self.limits.pack_bytes_max)
        {
            self.rotate_pack().await?;
        }
        let start = self.pack_end;
        let mut entries = Vec::with_capacity(records.len());
        let mut offset = start;
        let mut buffer = std::mem::take(&mut self.write_buffer);
        buffer.clear();
        for record in records {
            entries.push(IndexEntry {
                hash: record.header.hash,
                location: BlobLocation::of(self.pack_id, offset, &record.header),
            });
            offset += record.bytes.len() as u64;
            buffer.extend_from_slice(&record.bytes);
        }
        assert_eq!(offset - start, bytes);
        let written = self.pack.append_unsynced(
            &buffer,
            start,
            records.len() as u32,
            &self.published.status,
            &self.published.shard_metrics[usize::from(self.shard)],
        );
        self.write_buffer = buffer;
        if let Err(error) = written {
            self.pack_file_len = start;
            return Err(error);
        }
        self.pack_file_len = self.pack_file_len.max(offset);
        Ok((entries, offset))
    }

    /// ONE fdatasync for the batch `write_batch` wrote, which ends at `end`; only then does
    /// `pack_end` (what a backup's cut and the next batch see) move past it.
    async fn sync_batch(&mut self, end: u64) -> Result<(), EngineError> {
        self.pack
            .sync_appended(
                &self.published.status,
                &self.published.shard_metrics[usize::from(self.shard)],
            )
            .await?;
        assert!(end >= self.pack_end, "a pack only grows");
        self.pack_end = end;
        Ok(())
    }

    /// Seals the current pack (cut to its last record, synced) and starts the next one. The
    /// new file and its directory entry are durable before any record goes into it.
    async fn rotate_pack(&mut self) -> Result<(), EngineError> {
        let next = self.pack_id + 1;
        if next >= PACKS_PER_SHARD_MAX {
            return Err(EngineError::NoSpace {
                file: self.shard_dir.clone(),
            });
        }
        // From here until the new pack is in place, a failure may leave the next pack file on
        // disk (created, then its fsync, the directory's, or opening it failed): this one is
        // sealed for recovery then, and must stay as the cut below leaves it (`sealing`).
        self.sealing = true;
        // A sealed pack ends at its last record, and recovery reads anything after it as
        // damage — zeros included, on purpose: in a sealed pack, zeros where records could be
        // are what a disk losing synced records looks like, and the blob index (synced lazily)
        // need not vouch for them, so the log would cut the turns naming them as an
        // unacknowledged tail. Accepting them is never provably safe; cutting them here is.
        //
        // So the seal cuts the file to `pack_end` always, not only when `pack_file_len` says
        // zeros follow: the file may be longer than that bookkeeping believes. (It was: a
        // zero-fill that a full disk cut short grew the file unrecorded, a batch ended inside
        // those zeros, the seal trusted `pack_file_len == pack_end`, and the store no longer
        // opened — `tests/disk_full.rs`. `fill_zeros` now cuts back a failed fill too.) The cut
        // is durable (set_len + fsync) before the next pack exists; with nothing to cut it is
        // one cheap fsync per `pack_bytes_max` bytes.
        // Each step below syncs. A full disk is retried by the next batch (`sealing` finishes
        // the rotation first); any other failure leaves the seal's durability unknown, and a
        // failed fsync makes the store read-only, as in every group commit.
        let status = &self.published.status;
        let failed = |file: &std::path::Path, source: std::io::Error| {
            if crate::error::is_no_space(&source) {
                return EngineError::NoSpace {
                    file: file.to_path_buf(),
                };
            }
            let reason = format!(
                "sealing pack {} of shard {} failed at {}: {source}",
                self.pack_id,
                self.shard,
                file.display()
            );
            status.set_read_only(reason.clone());
            EngineError::ReadOnly(reason)
        };
        self.pack
            .truncate(self.pack_end)
            .await
            .map_err(|source| failed(&self.pack_path, source))?;
        self.pack_file_len = self.pack_end;
        let path = pack_path(&self.shard_dir, next);
        create_durable(&path).map_err(|source| failed(&path, source))?;
        sync_dir(&self.shard_dir).map_err(|source| failed(&self.shard_dir, source))?;
        let file = open_actor_file(&path, self.io.sync_mode).await?;
        self.view()
            .add_pack(next, path.clone())
            .map_err(|source| EngineError::io(&path, source))?;
        tracing::info!(shard = self.shard, pack = %path.display(), "started a new pack");
        self.pack = file;
        self.pack_id = next;
        self.pack_path = path;
        self.pack_end = 0;
        self.pack_file_len = 0;
        self.sealing = false;
        Ok(())
    }

    /// Appends index entries for durable records. Not synced per batch: the pack is the
    /// truth, the index only saves recovery from scanning it.
    async fn append_index(&mut self, entries: &[IndexEntry]) {
        if self.index_frozen {
            return;
        }
        let mut bytes = vec![0u8; entries.len() * INDEX_ENTRY_BYTES];
        for (entry, target) in entries
            .iter()
            .zip(bytes.chunks_exact_mut(INDEX_ENTRY_BYTES))
        {
            let mut encoded = [0u8; INDEX_ENTRY_BYTES];
            entry.encode(&mut encoded);
            target.copy_from_slice(&encoded);
        }
        let length = bytes.len() as u64;
        if let Err(error) = self.index.write_all_at(&bytes, self.index_end) {
            tracing::warn!(
                index = %self.index_path.display(), %error,
                "blob index write failed; the index stops here and the next open rescans the pack"
            );
            self.index_frozen = true;
            let _ = self.index.set_len(self.index_end);
            return;
        }
        self.index_end += length;
        self.index_unsynced_entries += entries.len() as u32;
        if self.index_unsynced_entries >= INDEX_SYNC_ENTRIES {
            self.index_unsynced_entries = 0;
            // Off the acknowledgement path: nothing waits for this fsync.
            self.index.sync_data_in_background();
        }
    }

    /// Takes the condemned blobs of `pack_id` that no one named since (compare-and-set) out of
    /// the index: reads answer not found from now on, and a put of the same bytes writes a
    /// fresh copy. Their bytes stay in the pack until its compaction is installed; an open
    /// before that finds them in the index file again (harmless: their turns are dead).
    fn sweep(&self, pack_id: u32, hashes: &[BlobHash], condemned: &Condemned) -> SweptBlobs {
        assert!(pack_id < self.pack_id, "only a sealed pack is swept");
        let mut swept = SweptBlobs::default();
        for hash in hashes {
            let here = self
                .view()
                .location(hash)
                .is_some_and(|location| location.pack_id == pack_id);
            if here
                && condemned.sweep(hash)
                && let Some(location) = self.view().remove(hash)
            {
                swept.blobs += 1;
                swept.record_bytes += location.record_bytes();
            }
        }
        swept
    }

    /// Puts a compacted pack and its index in place. The collector wrote and synced both and
    /// created the `REINDEX` marker (durable) before asking; it syncs the directory and removes
    /// the marker after. So nothing here waits for the disk: from the marker's creation to its
    /// removal the pack and the index may disagree, and an open that finds the marker rebuilds
    /// the index from the packs (`blob/recover.rs`), whichever file each rename left.
    async fn install_compacted(&mut self, install: CompactedPack) -> Result<(), EngineError> {
        let CompactedPack {
            pack_id,
            pack_path: compact_pack,
            relocated,
            index_path: compact_index,
            index_prefix_end,
        } = install;
        assert!(pack_id < self.pack_id, "only a sealed pack is compacted");
        assert!(
            self.shard_dir.join(REINDEX_MARKER_FILE).exists(),
            "a compaction is installed under its marker"
        );
        if self.index_frozen {
            let refusal = std::io::Error::other(
                "the blob index stopped growing after a write error; compaction waits for a \
                 restart",
            );
            return Err(EngineError::io(&self.index_path, refusal));
        }
        let write = |path: &PathBuf| {
            let path = path.clone();
            move |source| EngineError::from_write(&path, source)
        };
        // The entries indexed since the collector copied the index: appended to the copy.
        let tail_len = (self.index_end - index_prefix_end) as usize;
        let mut tail = vec![0u8; tail_len];
        std::fs::File::open(&self.index_path)
            .and_then(|file| file.read_exact_at(&mut tail, index_prefix_end))
            .map_err(write(&self.index_path))?;
        let new_index_len = ops::append(&compact_index, &tail).map_err(write(&compact_index))?;
        let pack = pack_path(&self.shard_dir, pack_id);
        ops::rename(&compact_pack, &pack).map_err(write(&pack))?;
        ops::rename(&compact_index, &self.index_path).map_err(write(&self.index_path))?;
        self.index = open_actor_file(&self.index_path, self.io.sync_mode).await?;
        self.index_end = new_index_len;
        self.index_unsynced_entries = 0;
        let file = ReadFile::open(pack.clone()).map_err(|source| EngineError::io(&pack, source))?;
        self.view().install_compacted(pack_id, file, &relocated);
        Ok(())
    }

    async fn sync_index(&mut self) {
        if let Err(error) = self.index.fdatasync().await {
            tracing::warn!(index = %self.index_path.display(), %error, "blob index fsync failed");
        }
    }
}

impl GroupCommit for ShardActor {
    type Request = ShardRequest;

    async fn admit(&mut self, request: ShardRequest) -> Admitted {
        match request {
            ShardRequest::Put { blobs, then } => self.admit_put(blobs, then).await,
            ShardRequest::Snapshot { reply } => {
                // Between batches: `pack_end` and `index_end` are what committed batches wrote.
                let snapshot = ShardSnapshot {
                    pack_id: self.pack_id,
                    pack_end: self.pack_end,
                    index_end: self.index_end,
                    blobs: self.view().counters.blobs.load(Ordering::Acquire),
                };
                drop(reply.send(snapshot));
            }
            ShardRequest::GcSeal { reply } => {
                let sealed = if self.pack_end > 0 {
                    self.rotate_pack().await.map(|()| self.pack_id)
                } else {
                    Ok(self.pack_id)
                };
                drop(reply.send(sealed));
            }
            ShardRequest::GcSweep {
                pack_id,
                hashes,
                condemned,
                reply,
            } => {
                let swept = self.sweep(pack_id, &hashes, &condemned);
                self.condemned = Some(condemned);
                drop(reply.send(swept));
            }
            ShardRequest::GcInstall { install, reply } => {
                drop(reply.send(self.install_compacted(install).await));
            }
            ShardRequest::Ingest { pack, reply } => drop(reply.send(self.ingest(pack).await)),
            ShardRequest::Stop { done } => return Admitted::Stop(done),
        }
        Admitted::Continue
    }

    fn has_records(&self) -> bool {
        !self.batch.records.is_empty()
    }

    fn is_full(&self) -> bool {
        self.batch.is_full(&self.limits)
    }

    /// A put joins the batch only if all its blobs fit (callers make each put fit an empty
    /// one, `engine/append.rs`): so a batch stays within `shard_batch_records_max` and
    /// `shard_batch_bytes_max`, the torn-tail window recovery relies on.
    fn fits(&self, request: &ShardRequest) -> bool {
        let ShardRequest::Put { blobs, .. } = request else {
            return true;
        };
        let bytes: u64 = blobs.iter().map(|put| put.blob.bytes.len() as u64).sum();
        self.batch.records.is_empty()
            || (self.batch.records.len() + blobs.len()
                <= self.limits.shard_batch_records_max as usize
                && self.batch.bytes + bytes <= self.limits.shard_batch_bytes_max)
    }

    /// Writes the batch, hands its appends on, answers the `Written` puts, syncs it,
    /// publishes it, tells the sequencer, answers the `Durable` puts; then indexes it
    /// (decision 0014).
    async fn commit(&mut self) {
        if self.batch.records.is_empty() {
            return;
        }
        let mut batch = std::mem::take(&mut self.batch);
        let reserved = std::mem::take(&mut batch.reserved);
        let (locations, end) = match self.write_batch(&batch.records, batch.bytes).await {
            Ok(written) => written,
            Err(error) => {
                // Nothing was handed on: the write was cut back, every put learns why.
                for put in batch.puts {
                    put.then.fail(error.duplicate());
                }
                self.release_bytes(reserved);
                return;
            }
        };
        // A fresh copy of a swept blob is in the page cache: the sequencer may name it from
        // now on (it answers nothing before the copy is durable, below).
        if let Some(condemned) = &self.condemned {
            for entry in &locations {
                condemned.rewritten(&entry.hash);
            }
        }
        let mut answers = BatchAnswers::of(
            batch,
            ShardBatch {
                shard: self.shard,
                batch: self.batches_handed + 1,
            },
        );
        let handed = self.hand_on(&mut answers).await;
        let synced = self.sync_batch(end).await;
        if synced.is_ok() {
            // Index entries only for durable records; published before the notice, so that a
            // reader of a turn the sequencer publishes after it finds the blob.
            for entry in &locations {
                self.view().publish(entry.hash, entry.location);
            }
        }
        // Published (the bytes count in the shard now), or failed: the store is read-only.
        self.release_bytes(reserved);
        if let Some(batch) = handed {
            let result = synced.as_ref().map(|_| ()).map_err(EngineError::duplicate);
            // The sequencer gone (stopping): nobody waits for the notice.
            drop(self.notices.send(BlobsDurable { batch, result }));
        }
        match synced {
            Ok(()) => {
                for (blobs, outcomes) in &answers.counted {
                    self.count_chunks(blobs, outcomes);
                }
                for (reply, outcomes) in answers.durable {
                    drop(reply.send(Ok(outcomes)));
                }
                self.append_index(&locations).await;
            }
            Err(error) => {
                for (reply, _) in answers.durable {
                    drop(reply.send(Err(error.duplicate())));
                }
            }
        }
    }

    /// Zero-fills one step of the pack ahead of its records (`ActorFile::fill_zeros`), only
    /// while the shard has nothing else to do: under sustained load the queue is never empty
    /// and the shard simply grows the file, because filling would double the bytes written
    /// when the disk is busiest.
    async fn between_batches(&mut self, queue_empty: bool) -> bool {
        const AHEAD_BYTES: u64 = 1 << 20;
        const STEP_BYTES: u64 = 128 << 10;
        let ahead = self.pack_file_len.saturating_sub(self.pack_end);
        let room = self
            .limits
            .pack_bytes_max
            .saturating_sub(self.pack_file_len);
        if !queue_empty || !self.io.preallocate || self.sealing || ahead >= AHEAD_BYTES || room == 0
        {
            return false;
        }
        if self.published.status.is_read_only() {
            return false;
        }
        let start = self.pack_file_len.max(self.pack_end);
        let step = STEP_BYTES.min(room);
        match self
            .pack
            .fill_zeros(start, step, &self.published.status)
            .await
        {
            Ok(true) => {
                self.pack_file_len = start + step;
                true
            }
            Ok(false) => {
                // The failed fill was cut back: the file ends at `start` again.
                self.pack_file_len = start;
                self.io.preallocate = false;
                false
            }
            Err(_) => false,
        }
    }

    async fn stopped(&mut self) {
        self.sync_index().await;
        tracing::debug!(shard = self.shard, "blob shard stopped");
    }
}

/// The turns a shard hands on for a put whose blobs have these outcomes: each turn's blob
/// resolved (`pending`: the batch that wrote the put's blobs, not yet synced; `None` when every
/// blob was durable at admission, or for the blob that was).
fn handed_on(
    appends: Vec<HandedAppend>,
    blobs: &[PutBlob],
    outcomes: &[PutOutcome],
    pending: Option<ShardBatch>,
) -> Vec<TurnAppend> {
    appends
        .into_iter()
        .map(|append| {
            let blob = match append.payload {
                HandedBlob::Ready(blob) => blob,
                HandedBlob::InPut(index) => {
                    let index = index as usize;
                    assert!(index < blobs.len(), "a turn names blob {index} of its put");
                    let put = &blobs[index];
                    TurnBlob {
                        hash: put.hash,
                        raw_len: put.raw_len,
                        deduped: outcomes[index] == PutOutcome::AlreadyStored,
                        by_hash: false,
                        pending: put.record.and(pending),
                    }
                }
            };
            append.with_payload(blob)
        })
        .collect()
}
