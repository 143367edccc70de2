//! The store's consistent cut, for tools that read its files while it serves (issue 31: the
//! replicator ships what the cut names; the online backup copies the same cut).
//!
//! Every file of a store only grows (turns.log, the open pack) or never changes (sealed packs,
//! the compacted log base) between two maintenance jobs, so a consistent state is a set of
//! prefixes taken in the right order: first the durable watermark W of `turns.log`, then each
//! shard's extent (answered between two of its batches): every blob a turn ≤ W names was
//! durable before W was published, so it lies inside those extents. While the cut is held no
//! collection replaces a file (its switch-overs take the maintenance lock alone), so no pack
//! or log base is replaced or shrunk under a reader: the files hold at least the cut's bytes
//! until it is dropped. Backups and other cuts share the lock (they only read), so a long
//! backup does not hold a cut up, and a collection holds it only for a switch-over, so a cut
//! waits milliseconds, not a round (issue 46). A cut taken inside a round holds what a crash
//! there would leave, which recovery (and a standby's ingest) takes as it takes that.
//!
//! A cut's time (`taken_unix_ms`) is read once the lock is held, just before the watermark:
//! every append acknowledged before that time was published before it and is in the cut, and
//! the cut holds nothing acknowledged later than the watermark's read. A time read before
//! waiting for the lock would be earlier than the cut's content (issue 46: by seconds, behind
//! a collection).

use std::path::PathBuf;
use std::sync::RwLockReadGuard;

use crate::engine::Engine;
use crate::error::EngineError;
use crate::pipeline::{ShardRequest, ShardSnapshot};
use crate::store_dir::StoreDir;

/// A consistent state of the store's files (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreCut {
    pub data_dir: PathBuf,
    /// Records of `turns.log` with ids `1..=log_records` are durable (W).
    pub log_records: u64,
    /// The compacted prefix of the log, if a collection wrote one: records `1..=through`
    /// live in `turns.base` (whole file), the log's slots below it are holes.
    pub log_base: Option<LogBaseCut>,
    /// Per shard, in shard order.
    pub shards: Vec<ShardCut>,
    /// When the cut was taken (Unix ms), read just before the watermark (module doc).
    pub taken_unix_ms: u64,
}

/// `turns.base` at the cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogBaseCut {
    pub path: PathBuf,
    pub through: u64,
    pub file_bytes: u64,
}

/// One shard at the cut: packs `0..pack_id` are sealed (whole files), pack `pack_id` is open
/// and holds durable records up to `pack_end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardCut {
    pub pack_id: u32,
    pub pack_end: u64,
}

/// A cut held: no collection replaces a file until it is dropped.
#[derive(Debug)]
pub struct HeldCut<'a> {
    pub cut: StoreCut,
    _maintenance: RwLockReadGuard<'a, ()>,
}

impl StoreCut {
    /// The paths of the cut's files, by the store's layout.
    pub fn store_dir(&self) -> StoreDir {
        StoreDir::new(&self.data_dir)
    }
}

impl Engine {
    /// Takes the store's consistent cut and holds it (no collection replaces a file) until
    /// the returned guard is dropped: read the files it names, then drop it. Waits for a
    /// collection's switch-over, not for a round or a backup. Keep the hold short: a
    /// collection's switch-over waits while it lasts.
    pub fn hold_cut(&self) -> Result<HeldCut<'_>, EngineError> {
        self.check_open()?;
        let guard = self.inner.collector.maintenance_shared()?;
        let cut = self.cut_now()?;
        Ok(HeldCut {
            cut,
            _maintenance: guard,
        })
    }

    /// Moves `turns.log`'s slots up to `through` into a new `turns.base`, dropping nothing
    /// (`Collector::rebase_log`): the replicator's way to stop naming old segments for the
    /// log's prefix. Blocking file I/O on the caller's thread; waits for a running round.
    pub fn rebase_log(&self, through: u64) -> Result<bool, EngineError> {
        self.check_open()?;
        self.inner.collector.rebase_log(through)
    }

    /// The durable watermark now: records of `turns.log` with ids `1..=` it are durable (and
    /// acknowledged). The replicator compares it with what it shipped, between cuts, so that
    /// its lag figures see writes it has not cut yet (issue 46). One atomic load.
    pub fn durable_records(&self) -> u64 {
        self.inner.published.turns.durable_record_id()
    }

    /// A log compaction leaves every record after `log_records` in `turns.log` from now on
    /// (`u64::MAX`: no limit, the default): the replicator says how far its replica holds
    /// the log as slots, at the end of each cut it shipped whole (a batch boundary; 0 until
    /// its first). A standby takes the log slot by slot and cannot apply records that
    /// reached the replica only inside a compacted base (issue 46).
    pub fn hold_log_after(&self, log_records: u64) {
        self.inner
            .collector
            .log_compaction_limit
            .store(log_records, std::sync::atomic::Ordering::Release);
    }

    /// Each shard's extent, asked of its actor: the packs a cut (and a backup) reaches to.
    pub(super) fn shard_snapshots(&self) -> Result<Vec<ShardSnapshot>, EngineError> {
        let mut shards = Vec::with_capacity(self.inner.shards.len());
        for sender in self.inner.shards.iter() {
            let (reply, answer) = oneshot::channel();
            sender
                .send(ShardRequest::Snapshot { reply })
                .map_err(|_| EngineError::ShutDown)?;
            shards.push(answer.recv().map_err(|_| EngineError::ShutDown)?);
        }
        Ok(shards)
    }

    /// The cut, for a caller holding the maintenance lock.
    pub(crate) fn cut_now(&self) -> Result<StoreCut, EngineError> {
        let published = &self.inner.published;
        // The time, then the watermark, then the extents (the module doc says why).
        let taken_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        let log_records = published.turns.durable_record_id();
        let shards = self
            .shard_snapshots()?
            .into_iter()
            .map(|snapshot| ShardCut {
                pack_id: snapshot.pack_id,
                pack_end: snapshot.pack_end,
            })
            .collect();
        let log_base = published.turns.base().map(|base| LogBaseCut {
            path: base.path().to_path_buf(),
            through: base.through(),
            file_bytes: base.header.file_bytes(),
        });
        Ok(StoreCut {
            data_dir: self.inner.config.data_dir.clone(),
            log_records,
            log_base,
            shards,
            taken_unix_ms,
        })
    }
}
