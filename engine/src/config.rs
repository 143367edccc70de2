//! Engine configuration: where the data lives, how many blob shards, which thread runs which
//! actor, and a limit on everything. Defaults are documented in README.md#configuration.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Hard ceiling of `Limits::sequencer_batch_records_max`. Recovery relies on it: a torn
/// group-commit batch of `turns.log` can only span this many records.
pub const SEQUENCER_BATCH_RECORDS_LIMIT: u32 = 65_536;
/// Records of `turns.log`, from the first turn whose blob is not durable yet (its shard batch
/// was handed on before its fdatasync, decision 0014) to the end of the sequencer's batch, that
/// the sequencer writes before it waits for those blobs; a batch that would hold more waits for
/// them first (the two fdatasyncs in series, as before). Recovery relies on it: a turn whose
/// blob is missing within this many records of the end of the log is the unacknowledged tail of
/// the last batch (cut); further back it is damage (a pack lost acknowledged data).
pub const HELD_RECORDS_MAX: u64 = 4096;
/// Hard ceiling of `Limits::shard_batch_bytes_max`; the torn-tail window of a pack.
pub const SHARD_BATCH_BYTES_LIMIT: u64 = 256 * 1024 * 1024;
/// Hard ceiling of `Limits::shard_batch_records_max`: a batch's records are copied into one
/// buffer for one pwrite, and a shard batch bounds how long its first request waits.
pub const SHARD_BATCH_RECORDS_LIMIT: u32 = 1024;
/// Hard ceiling of `Limits::blob_bytes_max` (the pack header stores lengths as u32).
pub const BLOB_BYTES_LIMIT: u32 = 1 << 30;
/// Packs per shard the engine can address.
pub const PACKS_PER_SHARD_MAX: u32 = 65_536;
/// Time-to-live values above this (100 years) are refused: a caller's unit mistake.
pub use ctxstore_vocab::limits::TTL_MS_MAX;

use crate::format::turn_log::LOG_RECORD_BYTES;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    /// Blob shards of a *new* store (default 1: on a small machine one pack stream syncs
    /// fastest, see benches/results/HISTORY.md). An existing store keeps the count it was created with;
    /// a different value here is an error, since the hash → shard mapping depends on it.
    pub shard_count: u16,
    /// zstd level for new blobs (1..=19; 1–3 is the useful range for 10 KiB payloads).
    pub zstd_level: i32,
    pub placement: Placement,
    pub limits: Limits,
    pub open_check: OpenCheck,
    /// On mid-file corruption: truncate the file at the damaged record (losing what follows)
    /// instead of refusing to open. For operators who have a backup plan; off by default.
    pub repair: bool,
    /// Write zeros ahead of the writers (turns.log in `log_preallocate_bytes` steps between
    /// batches; packs in small steps while their shard is idle), so that a group commit's
    /// fdatasync overwrites allocated blocks instead of growing the file: roughly half the
    /// cost per fsync on ext4. Turn off on file systems that never overwrite in place (btrfs,
    /// ZFS), where it only costs.
    pub preallocate: bool,
    /// Time to live of contexts without one of their own (issue 15), in milliseconds since
    /// their last update; 0 (default): none.
    pub context_ttl_default_ms: u64,
    /// How often the TTL reaper looks at (a bounded share of) the contexts.
    pub reaper_interval_ms: u64,
    /// A stream without a delta for this long (milliseconds) is aborted by the reaper
    /// (decision 0027: the head moves only when a writer seals; an abandoned answer is no
    /// turn). 0: never.
    pub stream_idle_timeout_ms: u64,
    /// Bytes per second an online backup copies at most (0: no limit); hard-linked packs do
    /// not count. The copy shares the disk with every append's fdatasync.
    pub backup_bytes_per_s_max: u64,
    /// Garbage collection runs this often (milliseconds; 0: only on request). A round that
    /// finds nothing to do costs one read of `turns.log` and of each shard's index.
    pub gc_interval_ms: u64,
    /// A sealed pack is compacted (rewritten with only its live records) when at least this
    /// share of its bytes, in percent, is unreachable (1..=100).
    pub gc_pack_dead_percent: u8,
    /// A collection runs early (checked every second) once contexts holding this many payload
    /// bytes (raw, appended to them) were deleted since the last one (0: on the schedule
    /// only). An estimate: forks and dedup may keep some of those bytes alive.
    pub gc_deleted_bytes_trigger: u64,
    /// Bytes per second a compaction reads and writes at most (0: no limit). It shares the
    /// disk with every append's fdatasync.
    pub gc_bytes_per_s_max: u64,
    /// `turns.log` is compacted at the end of a round (collected turns' records that no live
    /// history needs leave it) once those records hold at least this many bytes and
    /// `gc_pack_dead_percent` of the log's slots (0: whenever there is one).
    pub gc_log_dead_bytes_min: u64,
    /// Content-defined chunking of large payloads (issue 16, decision 0013).
    pub chunking: ChunkingConfig,
    /// Bytes of disk the store keeps allocated in `RESERVE` for garbage collection alone
    /// (`reserve.rs`): on a full disk a collection gives them up to compact, so that deleting
    /// contexts can always give space back. 0: none. At most `DISK_RESERVE_BYTES_MAX`.
    pub disk_reserve_bytes: u64,
    /// A standby (issue 31): the store takes its turns from a replica (`Engine::ingest_*`,
    /// driven by `ctxstore-replica`'s follower) and refuses every write with READ_ONLY until
    /// `Engine::promote`; nothing in the background writes meanwhile. Off by default.
    pub follower: bool,
    /// The master key (decision 0032 §4, `--master-key-file`): with one, the store seals every
    /// payload body under its tenant's data key, kept in `DIR/keyring` wrapped by it (`keys.rs`);
    /// without one, it seals nothing, and a store that holds a keyring refuses to open.
    pub master_key: Option<std::sync::Arc<crate::seal::MasterKey>>,
}

/// The largest disk reserve: 64 GiB.
pub const DISK_RESERVE_BYTES_MAX: u64 = 64 << 30;

/// How payloads are cut into chunks: one definition for the engine and every client
/// (`ctxstore-vocab`, decision 0013).
pub use ctxstore_vocab::ChunkingConfig;

impl EngineConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        EngineConfig {
            data_dir: data_dir.into(),
            shard_count: 1,
            zstd_level: 1,
            placement: Placement::thread_per_actor(1),
            limits: Limits::default(),
            open_check: OpenCheck::Full,
            repair: false,
            preallocate: true,
            context_ttl_default_ms: 0,
            reaper_interval_ms: 1000,
            stream_idle_timeout_ms: 600_000,
            backup_bytes_per_s_max: 0,
            gc_interval_ms: 600_000,
            gc_pack_dead_percent: 50,
            gc_bytes_per_s_max: 32 << 20,
            gc_deleted_bytes_trigger: 1 << 30,
            gc_log_dead_bytes_min: 1 << 20,
            chunking: ChunkingConfig::DEFAULT,
            disk_reserve_bytes: 64 << 20,
            follower: false,
            master_key: None,
        }
    }

    /// Sets the shard count and the default placement for it (a thread per actor).
    pub fn with_shards(mut self, shard_count: u16) -> Self {
        self.shard_count = shard_count;
        self.placement = Placement::thread_per_actor(shard_count);
        self
    }

    pub fn validate(&self) -> Result<(), String> {
        let limits = &self.limits;
        if self.shard_count == 0 {
            return Err("shard_count must be at least 1".into());
        }
        if self.context_ttl_default_ms > TTL_MS_MAX {
            return Err("context_ttl_default_ms must be at most 100 years".into());
        }
        if !(1..=3_600_000).contains(&self.reaper_interval_ms) {
            return Err(format!(
                "reaper_interval_ms {} is outside 1..=3600000",
                self.reaper_interval_ms
            ));
        }
        if !(1..=100).contains(&self.gc_pack_dead_percent) {
            return Err(format!(
                "gc_pack_dead_percent {} is outside 1..=100",
                self.gc_pack_dead_percent
            ));
        }
        if self.gc_interval_ms > 30 * 24 * 3_600_000 {
            return Err("gc_interval_ms must be at most 30 days".into());
        }
        self.chunking.validate()?;
        if self.disk_reserve_bytes > DISK_RESERVE_BYTES_MAX {
            return Err(format!(
                "disk_reserve_bytes {} is over {DISK_RESERVE_BYTES_MAX} (64 GiB)",
                self.disk_reserve_bytes
            ));
        }
        if !(1..=19).contains(&self.zstd_level) {
            return Err(format!("zstd_level {} is outside 1..=19", self.zstd_level));
        }
        limits.validate()?;
        self.placement.validate(self.shard_count)
    }
}

impl Limits {
    /// Each limit within its range, and the ones that bound each other in order.
    pub fn validate(&self) -> Result<(), String> {
        if self.blob_bytes_max == 0 || self.blob_bytes_max > BLOB_BYTES_LIMIT {
            return Err(format!("blob_bytes_max must be in 1..={BLOB_BYTES_LIMIT}"));
        }
        if self.sequencer_batch_records_max == 0
            || self.sequencer_batch_records_max > SEQUENCER_BATCH_RECORDS_LIMIT
        {
            return Err(format!(
                "sequencer_batch_records_max must be in 1..={SEQUENCER_BATCH_RECORDS_LIMIT}"
            ));
        }
        if self.shard_batch_records_max == 0
            || self.shard_batch_records_max > SHARD_BATCH_RECORDS_LIMIT
        {
            return Err(format!(
                "shard_batch_records_max must be in 1..={SHARD_BATCH_RECORDS_LIMIT}"
            ));
        }
        // One record of the largest blob must fit in a batch.
        let record_bytes_max = crate::format::pack::record_bytes(self.blob_bytes_max);
        if self.shard_batch_bytes_max < record_bytes_max
            || self.shard_batch_bytes_max > SHARD_BATCH_BYTES_LIMIT
        {
            return Err(format!(
                "shard_batch_bytes_max must be in {record_bytes_max}..={SHARD_BATCH_BYTES_LIMIT} \
                 (at least one record of blob_bytes_max)"
            ));
        }
        if self.pack_bytes_max < self.shard_batch_bytes_max {
            return Err("pack_bytes_max must be at least shard_batch_bytes_max".into());
        }
        if self.log_preallocate_bytes == 0
            || !self
                .log_preallocate_bytes
                .is_multiple_of(LOG_RECORD_BYTES as u32)
        {
            return Err(format!(
                "log_preallocate_bytes must be a positive multiple of {LOG_RECORD_BYTES}"
            ));
        }
        if self.queue_depth_max == 0 {
            return Err("queue_depth_max must be at least 1".into());
        }
        if self.read_turns_max == 0 {
            return Err("read_turns_max must be at least 1".into());
        }
        if self.streams_open_max == 0 {
            return Err("streams_open_max must be at least 1".into());
        }
        Ok(())
    }
}

/// A limit on everything, unit last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest payload of one turn.
    pub blob_bytes_max: u32,
    /// A pack is sealed and a new one started when the next batch would pass this size.
    /// Large (1 GiB) because every pack holds one open file descriptor for reads.
    pub pack_bytes_max: u64,
    /// Zeros written ahead of the sequencer in `turns.log`, per step (with `preallocate`).
    pub log_preallocate_bytes: u32,
    /// Records (turns and context creations) in one sequencer group commit.
    pub sequencer_batch_records_max: u32,
    /// Blob records in one shard group commit.
    pub shard_batch_records_max: u32,
    /// Bytes of blob records in one shard group commit.
    pub shard_batch_bytes_max: u64,
    /// After draining its queue, how long an actor may wait for more work before it writes.
    /// 0 (default): never wait; requests that arrive during an fsync form the next batch.
    pub batch_wait_us_max: u32,
    /// Requests queued per actor; callers wait (backpressure) when it is full.
    pub queue_depth_max: u32,
    /// Turns one read (last, page, range, chain) may return.
    pub read_turns_max: u32,
    /// Streams open at once in the store (issue 32): each holds its bytes in memory until
    /// it is sealed or aborted.
    pub streams_open_max: u32,
    /// Decoded vectors kept in memory for searches (decision 0033), in bytes: past it the
    /// cache is emptied and refilled from the blobs.
    pub vector_cache_bytes_max: u64,
    /// Vectors one exact search may compare (decision 0033 §3): an exact search over more
    /// (asked for, or with the index's graph not ready) is refused with TOO_LARGE naming it.
    pub vector_scan_max: u64,
    /// Candidates (entries under the search's prefix) up to which a search compares every
    /// one exactly rather than walk the graph (decision 0033 §3).
    pub vector_exact_max: u64,
    /// Memory one index's graph may take (decision 0033 §4): a graph that would grow past it
    /// is dropped, and its index's searches are exact until the next start.
    pub vector_graph_bytes_max: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            blob_bytes_max: 16 * 1024 * 1024,
            pack_bytes_max: 1024 * 1024 * 1024,
            log_preallocate_bytes: 256 * 1024,
            sequencer_batch_records_max: 4096,
            shard_batch_records_max: 256,
            shard_batch_bytes_max: 64 * 1024 * 1024,
            batch_wait_us_max: 0,
            queue_depth_max: 4096,
            read_turns_max: 10_000,
            streams_open_max: 4096,
            vector_cache_bytes_max: 1024 * 1024 * 1024,
            vector_scan_max: 2_000_000,
            vector_exact_max: 10_000,
            vector_graph_bytes_max: 8 * 1024 * 1024 * 1024,
        }
    }
}

/// How much `Engine::open` reads to prove the files sound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenCheck {
    /// Every record of every file, blob bodies included (checksums, not BLAKE3).
    Full,
    /// `turns.log` and the blob indexes in full; of the packs, only what the index does not
    /// cover yet (the tail written since the index was last extended). Pack bodies are still
    /// checked on every read and by `verify`.
    Tail,
}

impl FromStr for OpenCheck {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "full" => Ok(OpenCheck::Full),
            "tail" => Ok(OpenCheck::Tail),
            other => Err(format!(
                "open check {other:?} is neither \"full\" nor \"tail\""
            )),
        }
    }
}

/// One actor of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Actor {
    Sequencer,
    Shard(u16),
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Sequencer => write!(f, "seq"),
            Actor::Shard(index) => write!(f, "s{index}"),
        }
    }
}

/// One engine thread: a compio runtime running some actors, optionally pinned to a core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadPlacement {
    pub actors: Vec<Actor>,
    pub core: Option<usize>,
}

/// Which thread runs which actor. Configuration, not code. The default is a thread per actor:
/// an actor alone on its thread waits for fdatasync with a direct system call, the cheapest
/// way (see `file/actor.rs`); threads are not cores, and on a 2-core machine they share them.
/// Actors placed on one thread submit fdatasync through io_uring instead, so that they do not
/// stall each other.
///
/// Text form (for flags): threads separated by `|`, actors by `,`, an optional `@core`:
/// `seq,s0@0|s1@1` runs the sequencer and shard 0 on a thread pinned to core 0, shard 1 on core 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub threads: Vec<ThreadPlacement>,
}

impl Placement {
    /// Every actor on one unpinned thread.
    pub fn single_thread(shard_count: u16) -> Placement {
        let mut actors = vec![Actor::Sequencer];
        actors.extend((0..shard_count).map(Actor::Shard));
        Placement {
            threads: vec![ThreadPlacement { actors, core: None }],
        }
    }

    /// One unpinned thread per actor.
    pub fn thread_per_actor(shard_count: u16) -> Placement {
        let mut threads = vec![ThreadPlacement {
            actors: vec![Actor::Sequencer],
            core: None,
        }];
        threads.extend((0..shard_count).map(|index| ThreadPlacement {
            actors: vec![Actor::Shard(index)],
            core: None,
        }));
        Placement { threads }
    }

    /// Every actor runs exactly once.
    pub fn validate(&self, shard_count: u16) -> Result<(), String> {
        let mut seen: Vec<Actor> = self.threads.iter().flat_map(|t| t.actors.clone()).collect();
        seen.sort();
        let mut expected = vec![Actor::Sequencer];
        expected.extend((0..shard_count).map(Actor::Shard));
        if seen != expected {
            return Err(format!(
                "placement {self} must name the sequencer and shards 0..{shard_count} exactly once"
            ));
        }
        Ok(())
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, thread) in self.threads.iter().enumerate() {
            if index > 0 {
                f.write_str("|")?;
            }
            for (position, actor) in thread.actors.iter().enumerate() {
                if position > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{actor}")?;
            }
            if let Some(core) = thread.core {
                write!(f, "@{core}")?;
            }
        }
        Ok(())
    }
}

impl FromStr for Placement {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let mut threads = Vec::new();
        for thread_text in text.split('|') {
            let (actors_text, core) = match thread_text.split_once('@') {
                Some((actors, core)) => {
                    let core = core
                        .trim()
                        .parse::<usize>()
                        .map_err(|_| format!("core {core:?} in placement is not a number"))?;
                    (actors, Some(core))
                }
                None => (thread_text, None),
            };
            let mut actors = Vec::new();
            for actor in actors_text.split(',') {
                let actor = actor.trim();
                if actor == "seq" {
                    actors.push(Actor::Sequencer);
                } else if let Some(index) = actor.strip_prefix('s') {
                    let index = index
                        .parse::<u16>()
                        .map_err(|_| format!("actor {actor:?} is neither seq nor sN"))?;
                    actors.push(Actor::Shard(index));
                } else {
                    return Err(format!("actor {actor:?} is neither seq nor sN"));
                }
            }
            threads.push(ThreadPlacement { actors, core });
        }
        Ok(Placement { threads })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_text_round_trip() {
        let placement: Placement = "seq,s0@0|s1@1".parse().unwrap();
        assert_eq!(placement.threads.len(), 2);
        assert_eq!(
            placement.threads[0].actors,
            vec![Actor::Sequencer, Actor::Shard(0)]
        );
        assert_eq!(placement.threads[1].core, Some(1));
        assert_eq!(placement.to_string(), "seq,s0@0|s1@1");
        placement.validate(2).unwrap();
        assert!(placement.validate(3).is_err());
        assert!(
            "seq,s0,s0"
                .parse::<Placement>()
                .unwrap()
                .validate(1)
                .is_err()
        );
        assert!("seq,x1".parse::<Placement>().is_err());
    }

    #[test]
    fn default_config_is_valid() {
        EngineConfig::new("/tmp/x").validate().unwrap();
        EngineConfig::new("/tmp/x")
            .with_shards(5)
            .validate()
            .unwrap();
    }
}
