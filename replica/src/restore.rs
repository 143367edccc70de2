//! `ctxstore-server restore --from URL --to DIR [--at TIME | --at-seq N]`: a store built from
//! its replica, exactly as it was at a shipped point, that opens and passes `verify`.
//!
//! 1. **Resolve the point** on the newest generation's lineage (or `--generation G`'s): the
//!    latest restore point (a segment not marked `continues`, nor a `seal`), the last one cut
//!    at or before a time, or the first one holding record N (then the log is cut right after
//!    record N: every turn with an id up to N, nothing after). A point before a generation's first segment is
//!    looked for in the generation it forked from, up to the fork.
//! 2. **Announce** the restore (`restore/…`): retention deletes nothing while it runs.
//! 3. **State**: the newest checkpoint at or before the point, later segments' headers folded.
//! 4. **Fetch** every object the state reads, a few at a time, each checked (a segment against
//!    its own BLAKE3s, a whole pack or base against the hash the state names) before its
//!    pieces are written into place; each object done is journaled in `DIR/.restore/done`, so
//!    an interrupted restore, run again with the same arguments, fetches only the rest.
//! 5. **Finish**: the meta file, empty blob indexes (the open rebuilds them from the packs),
//!    the log cut; then the store is opened (recovery checks every record) and verified, and
//!    `DIR/replica/` records where it came from: a primary started on it begins a new
//!    generation, referring to the objects it was restored from.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use bytes::Bytes;
use ctxstore_engine::store_dir::StoreDir;
use ctxstore_engine::{EngineError, files};
use futures_util::StreamExt;

use crate::catalog;
use crate::error::ReplicaError;
use crate::format::{Checkpoint, LOG_SLOT_BYTES, ObjectRef, Piece, StoreState, decode_segment};
use crate::layout::Key;
use crate::local::{self, FileIdentity, LocalState};
use crate::remote::Remote;
use crate::ship::hex;
use crate::stats::now_unix_ms;

/// Which point to restore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestorePoint {
    Latest,
    /// The last point cut at or before this time.
    AtTime {
        unix_ms: u64,
    },
    /// Every record with an id up to this one (TurnIDs are record ids), nothing after.
    AtSeq {
        record_id: u64,
    },
}

/// Objects fetched at once.
const FETCHES_IN_FLIGHT: usize = 6;

/// How far a restore is (for a progress line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Progress {
    pub objects_done: u64,
    pub objects_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
}

/// What a restore built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreReport {
    pub dir: PathBuf,
    pub generation: u32,
    pub seq: u64,
    /// The point's cut time.
    pub created_unix_ms: u64,
    pub log_records: u64,
    pub objects: u64,
    pub bytes: u64,
    pub duration_ms: u64,
}

/// The point resolved: generation, segment, and the log cut (`None`: the segment's whole log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Resolved {
    generation: u32,
    seq: u64,
    log_records: Option<u64>,
    created_unix_ms: u64,
    /// With `log_records`: the whole point before the cut (a segment not `continues`, or the
    /// oldest checkpoint), whose sealed packs the cut's collections had not rewritten yet.
    before: Option<u64>,
}

pub async fn restore(
    remote: &Remote,
    to: &Path,
    point: RestorePoint,
    generation: Option<u32>,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<RestoreReport, ReplicaError> {
    let started = Instant::now();
    let marker = catalog::marker(remote)
        .await?
        .ok_or_else(|| ReplicaError::NotYet {
            location: remote.location.clone(),
            what: "holds no replica".into(),
        })?;
    check_target(to)?;
    let generations = catalog::generations(remote).await?;
    let newest = generations
        .last()
        .map(|record| record.generation)
        .ok_or_else(|| ReplicaError::NotYet {
            location: remote.location.clone(),
            what: "holds no generation".into(),
        })?;
    let resolved = resolve(
        remote,
        &generations,
        generation.unwrap_or(newest),
        point,
        u64::MAX,
    )
    .await?;
    tracing::info!(?resolved, "restoring");

    let lease = Key::Restore(u128::from(now_unix_ms()) << 32 | u128::from(std::process::id()));
    remote.create(lease, Bytes::from_static(b"restore")).await?;
    // The current keyring, whatever the point (decision 0032 §5): written before the meta file.
    let result = match crate::keyring::fetch(remote).await {
        Ok(keyring) => {
            let keyring = keyring.map(|found| found.bytes);
            restore_at(remote, to, resolved, marker.replica_id, keyring, progress).await
        }
        Err(error) => Err(error),
    };
    let _ = remote.delete(lease).await;
    let (state, objects, bytes) = result?;
    let report = RestoreReport {
        dir: to.to_path_buf(),
        generation: resolved.generation,
        seq: resolved.seq,
        created_unix_ms: resolved.created_unix_ms,
        log_records: state.log_records,
        objects,
        bytes,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    Ok(report)
}

/// Absent, empty, or holding only an interrupted restore's journal.
fn check_target(to: &Path) -> Result<(), ReplicaError> {
    if !to.is_absolute() {
        return Err(ReplicaError::Invalid(format!(
            "restore directory {} is not absolute",
            to.display()
        )));
    }
    match std::fs::read_dir(to) {
        Ok(entries) => {
            let meta = to.join(ctxstore_engine::store_dir::META_FILE);
            if meta.exists() {
                return Err(ReplicaError::Invalid(format!(
                    "{} already holds a store; restore into a new or empty directory",
                    to.display()
                )));
            }
            let journal = to.join(".restore");
            if !journal.exists() && entries.count() > 0 {
                return Err(ReplicaError::Invalid(format!(
                    "{} is not empty; restore into a new or empty directory",
                    to.display()
                )));
            }
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            files::create_dir_all(to).map_err(|source| ReplicaError::io(to, source))
        }
        Err(source) => Err(ReplicaError::io(to, source)),
    }
}

/// Finds the point (see the module doc) among the segments of `generation` numbered at most
/// `seq_max`. A point earlier than a generation's first restore point lies in its parent, at
/// or before the segment it forked from (issue 46: with no bound, a point resolved in the
/// parent could be one the parent shipped after the fork, outside this lineage, and a
/// generation with no segment yet compared its parent's segment number with its
/// grandparent's).
async fn resolve(
    remote: &Remote,
    generations: &[crate::format::GenerationRecord],
    generation: u32,
    point: RestorePoint,
    seq_max: u64,
) -> Result<Resolved, ReplicaError> {
    let record = generations
        .iter()
        .find(|record| record.generation == generation)
        .ok_or_else(|| ReplicaError::Invalid(format!("generation {generation} does not exist")))?;
    let segments = catalog::segments_after(remote, generation, 0).await?;
    // Restore points start at the oldest checkpoint: retention deletes older checkpoints but
    // may keep older segments whose bytes a checkpoint still refers to.
    let oldest_checkpoint = catalog::checkpoints(remote, generation)
        .await?
        .first()
        .copied()
        .unwrap_or(u64::MAX);
    let mut seqs: Vec<u64> = segments
        .iter()
        .filter_map(|listed| match listed.key {
            Key::Segment { seq, .. } if seq >= oldest_checkpoint && seq <= seq_max => Some(seq),
            _ => None,
        })
        .collect();
    // A seal (decision 0031 §2) is always a generation's last segment, and no point: its
    // records and time are those of the last point before it, which the searches below find.
    if let Some(&last) = seqs.last()
        && catalog::segment_header(remote, generation, last)
            .await?
            .0
            .seal
    {
        seqs.pop();
    }
    let lineage = Lineage {
        remote,
        generations,
        generation,
        fork: record.parent,
        seqs,
        oldest_checkpoint,
    };
    if lineage.seqs.is_empty() {
        return match lineage.fork {
            // Every point of a generation that has shipped nothing yet is its fork point or
            // earlier: the parent's, up to the segment it forked from.
            Some(_) => lineage.parent(point).await,
            None => Err(ReplicaError::NotYet {
                location: remote.location.clone(),
                what: format!("generation {generation} has shipped nothing yet"),
            }),
        };
    }
    match point {
        RestorePoint::Latest => lineage.last_whole(lineage.seqs.len(), point).await,
        RestorePoint::AtTime { unix_ms } => {
            // The last segment cut at or before the time (cut times ascend with seq).
            let (mut low, mut high) = (0usize, lineage.seqs.len());
            while low < high {
                let middle = (low + high) / 2;
                if lineage.header(lineage.seqs[middle]).await?.created_unix_ms <= unix_ms {
                    low = middle + 1;
                } else {
                    high = middle;
                }
            }
            lineage.last_whole(low, point).await
        }
        RestorePoint::AtSeq { record_id } => lineage.at_record(record_id, point).await,
    }
}

/// One generation's segments, as `resolve` searches them for a point.
struct Lineage<'a> {
    remote: &'a Remote,
    generations: &'a [crate::format::GenerationRecord],
    generation: u32,
    /// The parent generation and the segment this one forked from (`None`: no parent).
    fork: Option<(u32, u64)>,
    /// Its segments from the oldest checkpoint up to the bound, ascending.
    seqs: Vec<u64>,
    oldest_checkpoint: u64,
}

impl Lineage<'_> {
    /// A segment's header (binary searches read O(log n) of them).
    async fn header(&self, seq: u64) -> Result<crate::format::SegmentHeader, ReplicaError> {
        catalog::segment_header(self.remote, self.generation, seq)
            .await
            .map(|(header, _)| header)
    }

    /// The point in the parent generation, up to the segment this one forked from.
    async fn parent(&self, point: RestorePoint) -> Result<Resolved, ReplicaError> {
        match self.fork {
            Some((parent, parent_seq)) => {
                Box::pin(resolve(
                    self.remote,
                    self.generations,
                    parent,
                    point,
                    parent_seq,
                ))
                .await
            }
            None => Err(ReplicaError::Invalid(
                "no shipped point is that early in this replica".into(),
            )),
        }
    }

    /// The last restore point (a segment that ends its cut) among the first `end` segments,
    /// else the parent's.
    async fn last_whole(&self, end: usize, point: RestorePoint) -> Result<Resolved, ReplicaError> {
        for &seq in self.seqs[..end].iter().rev() {
            let h = self.header(seq).await?;
            if !h.continues {
                return Ok(Resolved {
                    generation: self.generation,
                    seq,
                    log_records: None,
                    created_unix_ms: h.created_unix_ms,
                    before: None,
                });
            }
        }
        self.parent(point).await
    }

    /// The first complete segment holding record `record_id`; a point inside its cut names
    /// the whole point before it.
    async fn at_record(
        &self,
        record_id: u64,
        point: RestorePoint,
    ) -> Result<Resolved, ReplicaError> {
        let seqs = &self.seqs;
        let (mut low, mut high) = (0usize, seqs.len());
        while low < high {
            let middle = (low + high) / 2;
            if self.header(seqs[middle]).await?.log_records < record_id {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        let first = self.header(seqs[0]).await?;
        if low == 0 && first.log_records > record_id && self.fork.is_some() {
            // Shipped before this generation began, perhaps.
            return self.parent(point).await;
        }
        let start = low.min(seqs.len() - 1);
        for &seq in &seqs[start..] {
            let h = self.header(seq).await?;
            if !h.continues {
                let cut = (h.log_records > record_id).then_some(record_id);
                let mut before = None;
                if cut.is_some() {
                    for &earlier in seqs[..start].iter().rev() {
                        if !self.header(earlier).await?.continues {
                            before = Some(earlier);
                            break;
                        }
                    }
                    before = before.or(Some(self.oldest_checkpoint.min(seq)));
                }
                return Ok(Resolved {
                    generation: self.generation,
                    seq,
                    log_records: cut,
                    created_unix_ms: h.created_unix_ms,
                    before,
                });
            }
        }
        Err(ReplicaError::Invalid(format!(
            "record {record_id} has not been shipped whole yet"
        )))
    }
}

type Written = (StoreState, u64, u64);

/// One object to fetch: what it is, the pieces it fills (file, piece), and the BLAKE3 it must
/// have when the state names one.
type ObjectWork = (ObjectRef, Vec<(PathBuf, Piece)>, Option<[u8; 32]>);

async fn restore_at(
    remote: &Remote,
    to: &Path,
    resolved: Resolved,
    replica_id: [u8; 16],
    keyring: Option<Bytes>,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Written, ReplicaError> {
    let (mut state, around) = state_for_point(remote, &resolved).await?;
    let store = StoreDir::new(to);
    let journal_dir = to.join(".restore");
    files::create_dir_all(&journal_dir).map_err(|source| ReplicaError::io(&journal_dir, source))?;
    let done_path = journal_dir.join("done");
    let done: HashSet<String> = std::fs::read_to_string(&done_path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    let by_object = lay_out_files(&store, &state)?;
    let total = fetch_objects(remote, by_object, &journal_dir, &done, progress).await?;

    let log_path = store.turns_log_path();
    if let Some(record_id) = resolved.log_records {
        cut_log(&log_path, &mut state, record_id)?;
    }
    finish(to, &store, &state, keyring.as_deref())?;
    if let Some(record_id) = resolved.log_records {
        // A collection inside the cut may have rewritten a pack that was open or new there,
        // dropping blobs appended after the cut began that records up to the point name:
        // those are in no object of the replica. Recovery would then hold fewer records than
        // the point: refused, never a silent loss (issue 46 item 3).
        let held = records_held(to);
        if !held.as_ref().is_ok_and(|held| *held >= record_id) {
            let _ = files::remove_dir_all(to);
            return Err(inexact(record_id, held, around.0, around.1));
        }
    }
    record_restored(remote, to, &store, &state, &resolved, replica_id)?;
    files::remove_dir_all(&journal_dir).map_err(|source| ReplicaError::io(&journal_dir, source))?;
    tracing::info!(replica = %hex(&replica_id), dir = %to.display(), "restored");
    Ok((state, total.objects_total, total.bytes_total))
}

/// The state at the resolved point, and the whole points around it (the log's records at the
/// point before and at the cut's end), named if a point inside a cut is refused.
async fn state_for_point(
    remote: &Remote,
    resolved: &Resolved,
) -> Result<(StoreState, (u64, u64)), ReplicaError> {
    let (mut state, _) = catalog::state_at(remote, resolved.generation, resolved.seq).await?;
    // For a point inside a cut: the whole points on either side, named if it is refused.
    let mut around = (0, state.log_records);
    if let Some(record_id) = resolved.log_records {
        if let Some(before) = resolved.before {
            let (earlier, _) = catalog::state_at(remote, resolved.generation, before).await?;
            around.0 = earlier.log_records;
            let taken = state.as_sealed_at(&earlier);
            if taken > 0 {
                tracing::info!(
                    record_id,
                    files = taken,
                    segment = before,
                    "the point lies inside a cut that rewrote packs or the log's base: those \
                     are restored as they were before the cut, holding every record and blob \
                     up to the point"
                );
            }
        }
        check_log_cut(&state, record_id)?;
    }
    Ok((state, around))
}

/// Creates the store's files at their sizes and answers every piece, grouped by the object
/// it reads, with the file it lands in.
fn lay_out_files(
    store: &StoreDir,
    state: &StoreState,
) -> Result<BTreeMap<Key, ObjectWork>, ReplicaError> {
    let mut by_object: BTreeMap<Key, ObjectWork> = BTreeMap::new();
    let log_path = store.turns_log_path();
    for piece in &state.log_pieces {
        let entry = by_object
            .entry(piece.object.key())
            .or_insert((piece.object, Vec::new(), None));
        entry.1.push((log_path.clone(), *piece));
    }
    if let Some(base) = &state.log_base {
        let piece = Piece {
            object: base.object,
            object_offset: 0,
            file_offset: 0,
            len: base.file_bytes,
        };
        by_object.insert(
            base.object.key(),
            (
                base.object,
                vec![(store.turns_base_path(), piece)],
                Some(base.hash),
            ),
        );
    }
    for (shard, files) in state.shards.iter().enumerate() {
        let dir = store.shard_dir(shard as u16);
        files::create_dir_all(&dir).map_err(|source| ReplicaError::io(&dir, source))?;
        for (pack_id, pack) in files.packs.iter().enumerate() {
            let path = store.pack_path(shard as u16, pack_id as u32);
            create_sized(&path, pack.len)?;
            for (index, piece) in pack.pieces.iter().enumerate() {
                let hash = if index == 0 { pack.object_hash } else { None };
                let entry =
                    by_object
                        .entry(piece.object.key())
                        .or_insert((piece.object, Vec::new(), None));
                entry.1.push((path.clone(), *piece));
                if hash.is_some() {
                    entry.2 = hash;
                }
            }
        }
    }
    create_sized(&log_path, state.log_bytes())?;
    if let Some(base) = &state.log_base {
        create_sized(&store.turns_base_path(), base.file_bytes)?;
    }
    Ok(by_object)
}

/// Fetches every object not in the journal's `done` list into its files, a few at a time,
/// appending each to the journal (synced) once its pieces are written. Answers the totals.
async fn fetch_objects(
    remote: &Remote,
    by_object: BTreeMap<Key, ObjectWork>,
    journal_dir: &Path,
    done: &HashSet<String>,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Progress, ReplicaError> {
    let done_path = journal_dir.join("done");
    let mut total = Progress {
        objects_total: by_object.len() as u64,
        ..Progress::default()
    };
    for (_, pieces, _) in by_object.values() {
        total.bytes_total += pieces.iter().map(|(_, piece)| piece.len).sum::<u64>();
    }
    progress(total);
    // The journal of an interrupted restore goes on where it stopped.
    let journal = match files::WriteFile::open(&done_path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            files::WriteFile::create(&done_path)
        }
        opened => opened,
    }
    .map_err(|source| ReplicaError::io(&done_path, source))?;
    let work: Vec<_> = by_object
        .into_iter()
        .filter(|(key, _)| !done.contains(&remote.path(*key).to_string()))
        .collect();
    check_room(
        journal_dir.parent().unwrap_or(journal_dir),
        work.iter()
            .map(|(_, (_, pieces, _))| pieces.iter().map(|(_, piece)| piece.len).sum::<u64>()),
    )?;
    let skipped = total.objects_total - work.len() as u64;
    total.objects_done = skipped;
    let mut fetches =
        futures_util::stream::iter(work.into_iter().map(|(key, (object, pieces, hash))| {
            let scratch = journal_dir.join(format!(
                "object-{}",
                remote.path(key).to_string().replace('/', "_")
            ));
            async move {
                fetch_object(remote, key, object, &pieces, hash, &scratch)
                    .await
                    .map(|bytes| (key, bytes))
            }
        }))
        .buffer_unordered(FETCHES_IN_FLIGHT);
    while let Some(result) = fetches.next().await {
        let (key, bytes) = result?;
        journal
            .append(format!("{}\n", remote.path(key)).as_bytes())
            .and_then(|_| journal.sync_data())
            .map_err(|source| ReplicaError::io(&done_path, source))?;
        total.objects_done += 1;
        total.bytes_done += bytes;
        progress(total);
    }
    drop(fetches);
    Ok(total)
}

/// Refuses a restore that its file system cannot hold, before a byte is fetched: a full disk
/// halfway would leave a half-restored directory behind (and, for a rejoining primary, a second
/// copy of the store beside the one it set aside). `objects`: the bytes each object still to
/// fetch writes into the store's files.
fn check_room(dir: &Path, objects: impl Iterator<Item = u64>) -> Result<(), ReplicaError> {
    let needed_bytes = room_needed(objects);
    let available_bytes = match files::available_bytes(dir) {
        Ok(available) => available,
        Err(error) => {
            // No figure to compare with: the restore goes on, and a full disk fails it as before.
            tracing::warn!(%error, dir = %dir.display(), "the free space of the restore's file system is unknown");
            return Ok(());
        }
    };
    if needed_bytes > available_bytes {
        return Err(ReplicaError::NoRoomToRestore {
            dir: dir.to_path_buf(),
            needed_bytes,
            available_bytes,
        });
    }
    Ok(())
}

/// The bytes a restore writes: every object's share of the store's files, plus the scratch
/// copies of the `FETCHES_IN_FLIGHT` largest (each object is downloaded whole before its pieces
/// are written; an object is at least the bytes taken from it).
fn room_needed(objects: impl Iterator<Item = u64>) -> u64 {
    let mut sizes: Vec<u64> = objects.collect();
    let sum = |sizes: &[u64]| {
        sizes
            .iter()
            .fold(0_u64, |sum, size| sum.saturating_add(*size))
    };
    let files = sum(&sizes);
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    files.saturating_add(sum(&sizes[..sizes.len().min(FETCHES_IN_FLIGHT)]))
}

/// Records in the restored store where it came from: the inherited checkpoint (the state it
/// was restored at, which its next generation forks from) and its own replica record.
fn record_restored(
    remote: &Remote,
    to: &Path,
    store: &StoreDir,
    state: &StoreState,
    resolved: &Resolved,
    replica_id: [u8; 16],
) -> Result<(), ReplicaError> {
    let mut inherited_state = state.clone();
    inherited_state.meta = std::fs::read(store.meta_path())
        .map_err(|source| ReplicaError::io(store.meta_path(), source))?;
    let inherited = Checkpoint {
        generation: resolved.generation,
        seq: resolved.seq,
        epoch: 0,
        replica_id,
        created_unix_ms: resolved.created_unix_ms,
        state: inherited_state,
    };
    local::save_inherited(to, &inherited)?;
    let identities = identities_of(store, state)?;
    LocalState {
        replica_id,
        url: remote.location.clone(),
        generation: resolved.generation,
        epoch: 0,
        seq: resolved.seq,
        fork: true,
        base: identities.0,
        packs: identities.1,
    }
    .save(to)
}

/// The refusal of a point inside a cut that the replica does not hold exactly: the restored
/// store opened with fewer records (`held`), or not at all (a turn's blob missing where
/// recovery calls it lost data).
fn inexact(record_id: u64, held: Result<u64, ReplicaError>, before: u64, end: u64) -> ReplicaError {
    let found = match held {
        Ok(held) => format!("it opens with records up to {held} only"),
        Err(error) => error.to_string(),
    };
    ReplicaError::Invalid(format!(
        "record {record_id} lies inside a shipped cut in which a garbage collection rewrote a \
         pack that was open or new there: a blob named by a record up to it is in no object of \
         the replica ({found}), so that point cannot be restored exactly; the nearest points \
         that can are --at-seq {before} (before the cut) and --at-seq {end} (its end)"
    ))
}

/// How many records the store restored in `to` holds once opened: recovery keeps a turn only
/// with its blob, so fewer than the point means one is missing.
fn records_held(to: &Path) -> Result<u64, ReplicaError> {
    let opened = |error: ctxstore_engine::OpenError| {
        ReplicaError::Invalid(format!(
            "the store restored in {} does not open: {error}",
            to.display()
        ))
    };
    let shards = StoreDir::new(to)
        .existing_shard_count()
        .map_err(opened)?
        .unwrap_or(1);
    let mut config = ctxstore_engine::EngineConfig::new(to).with_shards(shards);
    config.preallocate = false;
    let engine = ctxstore_engine::Engine::open(config).map_err(opened)?;
    let held = engine.durable_records();
    engine.shutdown();
    Ok(held)
}

/// Refuses a cut below the compacted base (those records' slots are gone from the log).
fn check_log_cut(state: &StoreState, record_id: u64) -> Result<(), ReplicaError> {
    if let Some(base) = &state.log_base
        && record_id < base.through
    {
        return Err(ReplicaError::Invalid(format!(
            "records up to {} were compacted into turns.base by then; the earliest record to \
             restore to at this point is {}",
            base.through, base.through
        )));
    }
    Ok(())
}

/// Cuts `turns.log` right after the record holding slot `record_id` (all its slots kept), and
/// the state with it. Answers the records kept.
fn cut_log(log_path: &Path, state: &mut StoreState, record_id: u64) -> Result<u64, ReplicaError> {
    let log = File::open(log_path).map_err(|source| ReplicaError::io(log_path, source))?;
    let record_end =
        ctxstore_engine::turns::log_record_end(&log, record_id).map_err(|error| match error {
            EngineError::Io { source, .. } => ReplicaError::io(log_path, source),
            other => ReplicaError::Damaged {
                key: log_path.display().to_string(),
                reason: other.to_string(),
            },
        })?;
    let end = record_end.min(state.log_records);
    let cut =
        files::WriteFile::open(log_path).map_err(|source| ReplicaError::io(log_path, source))?;
    cut.set_len(end * LOG_SLOT_BYTES)
        .and_then(|()| cut.sync_all())
        .map_err(|source| ReplicaError::io(log_path, source))?;
    let bytes = end * LOG_SLOT_BYTES;
    state.log_records = end;
    state.log_pieces.retain(|piece| piece.file_offset < bytes);
    if let Some(last) = state.log_pieces.last_mut() {
        last.len = last.len.min(bytes - last.file_offset);
    }
    Ok(end)
}

/// Fetches one object, checks it, writes its pieces into place; answers the bytes written.
async fn fetch_object(
    remote: &Remote,
    key: Key,
    object: ObjectRef,
    pieces: &[(PathBuf, Piece)],
    hash: Option<[u8; 32]>,
    scratch: &Path,
) -> Result<u64, ReplicaError> {
    let what = remote.path(key).to_string();
    remote.download(key, scratch).await?;
    let bytes = std::fs::read(scratch).map_err(|source| ReplicaError::io(scratch, source))?;
    let damaged = |reason: String| ReplicaError::Damaged {
        key: what.clone(),
        reason,
    };
    match object {
        ObjectRef::Segment { .. } => {
            decode_segment(&bytes, &what)?;
        }
        ObjectRef::Pack { .. } | ObjectRef::Base { .. } => {
            if let Some(hash) = hash
                && blake3::hash(&bytes).as_bytes() != &hash
            {
                return Err(damaged(
                    "its BLAKE3 differs from the one the replica recorded".into(),
                ));
            }
        }
    }
    let mut written = 0;
    for (path, piece) in pieces {
        let start = piece.object_offset as usize;
        let end = start + piece.len as usize;
        let slice = bytes.get(start..end).ok_or_else(|| {
            damaged(format!(
                "piece {start}..{end} is past its {} bytes",
                bytes.len()
            ))
        })?;
        let file = files::WriteFile::open(path).map_err(|source| ReplicaError::io(path, source))?;
        file.write_at(slice, piece.file_offset)
            .map_err(|source| ReplicaError::io(path, source))?;
        file.sync_data()
            .map_err(|source| ReplicaError::io(path, source))?;
        written += piece.len;
    }
    let _ = files::remove(scratch);
    Ok(written)
}

fn create_sized(path: &Path, len: u64) -> Result<(), ReplicaError> {
    // Kept as it is when it exists: an interrupted restore already wrote some of it.
    let file = match files::WriteFile::open(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            files::WriteFile::create_new(path)
        }
        opened => opened,
    }
    .map_err(|source| ReplicaError::io(path, source))?;
    file.set_len(len)
        .map_err(|source| ReplicaError::io(path, source))
}

/// The meta file, empty indexes, the log's last record whole, a sealing store's keyring;
/// everything synced.
fn finish(
    to: &Path,
    store: &StoreDir,
    state: &StoreState,
    keyring: Option<&[u8]>,
) -> Result<(), ReplicaError> {
    let log_path = store.turns_log_path();
    files::sync_file(&log_path).map_err(|source| ReplicaError::io(&log_path, source))?;
    for shard in 0..state.shards.len() {
        let index = store.blob_index_path(shard as u16);
        files::WriteFile::create(&index)
            .and_then(|file| file.sync_all())
            .map_err(|source| ReplicaError::io(&index, source))?;
        let dir = store.shard_dir(shard as u16);
        files::sync_dir(&dir).map_err(|source| ReplicaError::io(&dir, source))?;
    }
    if let Some(keyring) = keyring {
        let path = store.keyring_path();
        files::write_file_durably(&path, keyring)
            .map_err(|source| ReplicaError::io(&path, source))?;
    }
    files::sync_dir(to).map_err(|source| ReplicaError::io(to, source))?;
    // The meta file last: its presence makes the directory a store (written under a
    // temporary name, synced, renamed in, the directory synced).
    let meta = store.meta_path();
    files::write_file_durably(&meta, &state.meta).map_err(|source| ReplicaError::io(&meta, source))
}

/// The identities of the restored files, so that a primary started on them ships only what
/// comes after.
type Identities = (Option<FileIdentity>, Vec<Vec<Option<FileIdentity>>>);

fn identities_of(store: &StoreDir, state: &StoreState) -> Result<Identities, ReplicaError> {
    let identity = |path: &Path| {
        File::open(path)
            .and_then(|file| FileIdentity::of(&file))
            .map_err(|source| ReplicaError::io(path, source))
    };
    let base = match &state.log_base {
        Some(_) => Some(identity(&store.turns_base_path())?),
        None => None,
    };
    let mut packs = Vec::new();
    for (shard, files) in state.shards.iter().enumerate() {
        let mut shard_packs = Vec::new();
        for pack_id in 0..files.packs.len() {
            shard_packs.push(Some(identity(
                &store.pack_path(shard as u16, pack_id as u32),
            )?));
        }
        packs.push(shard_packs);
    }
    Ok((base, packs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_room_needed_is_the_files_and_the_largest_objects_in_flight() {
        assert_eq!(room_needed(std::iter::empty()), 0);
        assert_eq!(room_needed([5].into_iter()), 10);
        // Nine objects, six fetched at once: the files, and the six largest as scratch.
        let objects = [1, 9, 2, 8, 3, 7, 4, 6, 5];
        assert_eq!(
            room_needed(objects.into_iter()),
            45 + (9 + 8 + 7 + 6 + 5 + 4)
        );
        assert_eq!(room_needed([u64::MAX, 1].into_iter()), u64::MAX);
    }

    #[test]
    fn a_restore_larger_than_the_free_space_is_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        check_room(dir.path(), [4096].into_iter()).unwrap();
        let error = check_room(dir.path(), [u64::MAX / 4].into_iter()).unwrap_err();
        let ReplicaError::NoRoomToRestore {
            dir: named,
            needed_bytes,
            available_bytes,
        } = &error
        else {
            panic!("{error}")
        };
        assert_eq!(named, dir.path());
        assert_eq!(*needed_bytes, 2 * (u64::MAX / 4));
        assert!(available_bytes < needed_bytes);
        assert!(error.is_transient());
        assert_eq!(error.kind(), "no_space");
        assert!(error.to_string().contains("free space there"), "{error}");
    }
}
