//! The offline invariant checker behind `ctxstore-server verify`. Reads everything, writes
//! nothing: every checksum, every blob's BLAKE3 hash, index against packs, and the DAG
//! (parent exists and is older, depth = parent depth + 1, every head and every turn's blob
//! exists) by replaying `turns.log` exactly as recovery does, and every skip pointer against
//! the ancestry (store format 2; format 1 has none until its next open migrates it).

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::blob::codec;
use crate::blob::scan::{self, ScannedRecord};
use crate::blob::view::{BlobIndex, ShardView};
use crate::error::OpenError;
use crate::format::blob_index::{BlobLocation, IndexEntry};
use crate::format::manifest::Manifest;
use crate::format::meta::{Meta, STORE_FORMAT_VERSION};
use crate::format::pack::{Compression, PackHeader};
use crate::format::turn_log::{LogRecord, SlotAssembly, TurnRecord};
use crate::ids::{BlobHash, BlobHashBuildHasher};
use crate::keys::{KeysFor, StoreKeys};
use crate::seal::MasterKey;
use crate::sequencer::heads::DELETED_HEAD;
use crate::sequencer::log_base::LogBase;
use crate::sequencer::recover::{RecoveredLog, Replay, pending_metadata_tail};
use crate::sequencer::scan::{LogScan, scan_log};
use crate::skip::Ancestry;
use crate::store_dir::StoreDir;
use crate::tail::Tail;

/// What `verify` found. `problems` empty means the store is sound.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub data_dir: PathBuf,
    pub shards: u16,
    pub turns: u64,
    /// Live contexts, as the server's STATS counts them.
    pub contexts: u64,
    /// Deleted contexts (their ContextIDs are never reused), not in `contexts`.
    pub contexts_deleted: u64,
    /// ContextIDs taken at replica generations' starts (never contexts), in neither.
    pub contexts_skipped: u64,
    pub blobs: u64,
    pub logical_bytes: u64,
    pub stored_bytes: u64,
    /// Blob bodies sealed under a tenant's data key (decision 0032 §4): opened and checked
    /// when verify was given the master key, their checksums only otherwise.
    pub sealed: u64,
    /// Of those, bodies of deleted tenants (decision 0032 §6): their keys are destroyed, so
    /// they are checked by their checksums only until a collection takes them.
    pub erased: u64,
    /// Vectors blobs of live key-value entries checked: each decodes, holds the count its
    /// entry's record says and has its index's dimension (decision 0033).
    pub vectors_blobs: u64,
    /// Damage and broken invariants, each naming file and offset where there is one.
    pub problems: Vec<String>,
    /// Harmless findings, such as a torn tail the next open will cut.
    pub notes: Vec<String>,
}

impl VerifyReport {
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "store     {}", self.data_dir.display())?;
        writeln!(f, "shards    {}", self.shards)?;
        writeln!(f, "turns     {}", self.turns)?;
        write!(
            f,
            "contexts  {} ({} deleted",
            self.contexts, self.contexts_deleted
        )?;
        if self.contexts_skipped > 0 {
            write!(
                f,
                "; {} ids skipped at replica generation starts",
                self.contexts_skipped
            )?;
        }
        writeln!(f, ")")?;
        writeln!(
            f,
            "blobs     {} ({} bytes in packs)",
            self.blobs, self.stored_bytes
        )?;
        writeln!(f, "logical   {} bytes", self.logical_bytes)?;
        if self.vectors_blobs > 0 {
            writeln!(f, "vectors   {} blobs checked", self.vectors_blobs)?;
        }
        if self.sealed > 0 {
            write!(f, "sealed    {} blob bodies", self.sealed)?;
            if self.erased > 0 {
                write!(
                    f,
                    " ({} of deleted tenants, awaiting collection)",
                    self.erased
                )?;
            }
            writeln!(f)?;
        }
        for note in &self.notes {
            writeln!(f, "note      {note}")?;
        }
        for problem in &self.problems {
            writeln!(f, "PROBLEM   {problem}")?;
        }
        if self.is_ok() {
            write!(f, "verdict   OK")
        } else {
            write!(f, "verdict   {} problem(s)", self.problems.len())
        }
    }
}

/// Checks the store in `data_dir`. Fails only when it cannot check (no store there, it is in
/// use, I/O errors); what it finds wrong goes into the report.
pub fn verify(data_dir: &Path) -> Result<VerifyReport, OpenError> {
    verify_sealed(data_dir, None)
}

/// `verify` of a store that seals its payloads, given its master key: every sealed body is
/// opened and checked against its address too. Without the key (or with `verify`), sealed
/// bodies are checked by their checksums only, and the report notes it; a wrong key fails.
pub fn verify_sealed(
    data_dir: &Path,
    master_key: Option<Arc<MasterKey>>,
) -> Result<VerifyReport, OpenError> {
    let store = StoreDir::new(data_dir);
    if !store.meta_path().exists() {
        return Err(OpenError::Inconsistent(format!(
            "{} holds no ctxstore store",
            data_dir.display()
        )));
    }
    let _lock = lock_for_reading(&store)?;
    let meta = read_meta(&store)?;
    let mut report = VerifyReport {
        data_dir: data_dir.to_path_buf(),
        shards: meta.shard_count,
        ..VerifyReport::default()
    };

    let views = verify_shards(&store, &meta, master_key, &mut report)?;
    verify_manifests(&views, &mut report);
    let log_path = store.turns_log_path();
    let io = |source| OpenError::io(&log_path, source);
    // The compacted prefix (`turns.base`): damage there is a problem, not a tail.
    let base = match LogBase::load(&store.turns_base_path()) {
        Ok(base) => base.map(Arc::new),
        Err(OpenError::Corrupt(corruption)) => {
            report.problems.push(corruption.to_string());
            return Ok(report);
        }
        Err(error) => return Err(error),
    };
    note_compaction(&mut report, &store, base.as_deref());
    let mut replay = Replay::new(
        crate::file::ScanFile::open(&log_path).map_err(io)?,
        base.clone(),
        &views,
    );
    let mut ancestry = Ancestry::default();
    let skips_expected = meta.format_version >= 2;
    let scan = scan_log(&log_path, base.as_deref(), |record| {
        replay.record(record)?;
        if let LogRecord::Turn(turn) = record {
            check_skip(&ancestry, turn, skips_expected)?;
            ancestry.push(turn);
        }
        Ok(())
    })
    .map_err(io)?;
    note_format(
        &mut report,
        &meta,
        &log_path,
        replay.state.contexts.tenants.count(),
    );
    let through = base.as_ref().map_or(0, |base| base.through());
    check_blobs(&mut report, &log_path, &replay.state, &scan, through);
    let pending = replay.pending.as_ref().map(SlotAssembly::head_record_id);
    report_tail(
        &mut report,
        &log_path,
        pending_metadata_tail(pending, scan.tail),
    );
    count_state(&mut report, &replay.state);
    verify_vectors(&mut report, &replay.state, &views);
    Ok(report)
}

/// Every live key-value entry's and live turn's vectors blob (decision 0033 §2): found,
/// decoded, of its record's count and its index's dimension. A sealed store's blobs open only with the master
/// key; without it their checksums were checked with the rest.
fn verify_vectors(report: &mut VerifyReport, state: &RecoveredLog, views: &[ShardView]) {
    let Some(first) = views.first() else {
        return;
    };
    if first.keys.checks_only() && report.sealed > 0 {
        return;
    }
    let contexts = &state.contexts;
    for context_id in 1..=contexts.count() {
        let context_id = crate::ids::ContextId(context_id);
        let Some(info) = contexts.get(context_id).filter(|info| !info.deleted) else {
            continue;
        };
        for (key, value) in info.kv.iter() {
            let Some(vectors) = value.vectors else {
                continue;
            };
            let Some(index) = contexts
                .vector_indexes
                .get(info.tenant_id, vectors.index_id)
            else {
                continue; // a dropped index's vectors: no search reads them
            };
            let problem = match check_vectors_blob(views, &vectors, usize::from(index.dims)) {
                Ok(()) => {
                    report.vectors_blobs += 1;
                    continue;
                }
                Err(problem) => problem,
            };
            report.problems.push(format!(
                "context {context_id}, key {:?}: vectors blob {}: {problem}",
                String::from_utf8_lossy(key),
                vectors.hash
            ));
        }
    }
    for (turn_id, held) in contexts.vector_indexes.turns_with_vectors() {
        let vectors = held.vectors;
        let Some(index) = contexts
            .vector_indexes
            .get(held.tenant_id, vectors.index_id)
        else {
            continue; // a dropped index's vectors: no search reads them
        };
        match check_vectors_blob(views, &vectors, usize::from(index.dims)) {
            Ok(()) => report.vectors_blobs += 1,
            Err(problem) => report.problems.push(format!(
                "turn {turn_id}: vectors blob {}: {problem}",
                vectors.hash
            )),
        }
    }
}

fn check_vectors_blob(
    views: &[ShardView],
    vectors: &crate::format::context_meta::KvVectors,
    dims: usize,
) -> Result<(), String> {
    let shard = &views[usize::from(vectors.hash.shard(views.len() as u16))];
    let location = shard
        .find(&vectors.hash)
        .map_err(|error| error.to_string())?;
    let bytes = crate::chunks::read_payload(views, &vectors.hash, location)
        .map_err(|error| error.to_string())?;
    let decoded = crate::format::vectors::decode(&bytes).map_err(|error| error.to_string())?;
    if decoded.dims != dims || decoded.count() != usize::from(vectors.count) {
        return Err(format!(
            "holds {} vectors of {} dimensions; its record says {} of its index's {dims}",
            decoded.count(),
            decoded.dims,
            vectors.count
        ));
    }
    Ok(())
}

/// Every shard's records checked (sealed ones opened with the master key, when given), and
/// the views that read them.
fn verify_shards(
    store: &StoreDir,
    meta: &crate::format::meta::Meta,
    master_key: Option<Arc<MasterKey>>,
    report: &mut VerifyReport,
) -> Result<Vec<ShardView>, OpenError> {
    let keys = Arc::new(StoreKeys::open(
        &store.root,
        master_key,
        meta.seals,
        KeysFor::Verifying,
    )?);
    let mut views = Vec::new();
    for shard in 0..meta.shard_count {
        views.push(verify_shard(store, shard, &keys, report)?);
    }
    if report.sealed > 0 && !keys.seals() {
        report.notes.push(format!(
            "{} sealed blob bodies were checked by their checksums only: give verify the \
             master key (--master-key-file) to open them and check their payloads",
            report.sealed
        ));
    }
    Ok(views)
}

/// A turn's skip pointer is its ancestor at `skip_depth(depth)`, its summary the latest on its
/// chain (format 2; a format-1 record has neither).
fn check_skip(ancestry: &Ancestry, turn: &TurnRecord, expected: bool) -> Result<(), String> {
    if turn.is_legacy() {
        return if expected {
            Err(format!(
                "turn {} has no skip pointer in a store of format 2",
                turn.turn_id
            ))
        } else {
            Ok(())
        };
    }
    let summary = ancestry.summary_of(turn);
    if summary != turn.summary_turn_id {
        return Err(format!(
            "turn {} names summary {}, its chain's latest summary is {summary}",
            turn.turn_id, turn.summary_turn_id
        ));
    }
    let skip = ancestry.skip_of(turn);
    if skip != turn.skip_turn_id {
        return Err(format!(
            "turn {} has skip pointer {}, its ancestor at depth {} is {}",
            turn.turn_id,
            turn.skip_turn_id,
            crate::skip::skip_depth(turn.depth),
            skip
        ));
    }
    Ok(())
}

/// `verify` writes nothing, so it also runs on a read-only copy (a backup on read-only media):
/// a shared lock on LOCK, opened for reading, fails while a server holds the store and keeps
/// one from starting meanwhile. A store without LOCK never had a server.
fn lock_for_reading(store: &StoreDir) -> Result<Option<File>, OpenError> {
    let path = store.root.join(crate::store_dir::LOCK_FILE);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(OpenError::io(&path, source)),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Err(OpenError::Locked {
            path: store.root.clone(),
        }),
        Err(std::fs::TryLockError::Error(source)) => Err(OpenError::io(&path, source)),
    }
}

fn verify_shard(
    store: &StoreDir,
    shard: u16,
    keys: &Arc<StoreKeys>,
    report: &mut VerifyReport,
) -> Result<ShardView, OpenError> {
    let dir = store.shard_dir(shard);
    let index_path = store.blob_index_path(shard);
    let index_scan =
        scan::scan_index(&index_path).map_err(|source| OpenError::io(&index_path, source))?;
    report_tail(report, &index_path, index_scan.tail);

    let packs = scan::list_packs(&dir).map_err(|source| OpenError::io(&dir, source))?;
    let mut found: Vec<IndexEntry> = Vec::new();
    for (position, (pack_id, path)) in packs.iter().enumerate() {
        if *pack_id as usize != position {
            report
                .problems
                .push(format!("{}: pack {position} is missing", dir.display()));
            break;
        }
        let is_newest = position + 1 == packs.len();
        let mut bad_blobs = Vec::new();
        let (mut sealed, mut erased) = (0_u64, 0_u64);
        let visit = |record: ScannedRecord<'_>| {
            let header = record.header;
            sealed += u64::from(header.sealed.is_some());
            erased += u64::from(header.sealed.is_some() && keys.erased(header.tenant_id));
            let checked = check_body(&header, record.body, keys);
            if let Err(error) = checked {
                bad_blobs.push(format!(
                    "{} at offset {}: blob {}: {error}",
                    path.display(),
                    record.offset,
                    header.hash
                ));
            }
            found.push(IndexEntry {
                hash: header.hash,
                location: BlobLocation::of(*pack_id, record.offset, &header),
            });
        };
        let durable_end = scan::indexed_end(&index_scan.entries, *pack_id);
        let pack_scan = scan::scan_pack(path, 0, is_newest, durable_end, visit)
            .map_err(|source| OpenError::io(path, source))?;
        report.problems.extend(bad_blobs);
        report.sealed += sealed;
        report.erased += erased;
        report.stored_bytes += pack_scan.tail.valid_end(pack_scan.file_len);
        report_tail(report, path, pack_scan.tail);
    }

    if index_scan.predates_tenants {
        report.notes.push(format!(
            "{}: the blob index predates tenant fields; the next open rebuilds it from the packs",
            index_path.display()
        ));
    }
    let index = IndexScanned {
        path: &index_path,
        entries: &index_scan.entries,
        predates_tenants: index_scan.predates_tenants,
    };
    check_index(report, &dir, &index, &found);

    shard_view(report, shard, &dir, &packs, found, keys.clone())
}

/// A record's body against its header: a manifest's decoded (its payload is checked once
/// every shard is read, `verify_manifests`); a payload's inflated and hashed against its
/// address, a sealed one opened first (the tag, then the hash) when verify has the key, and
/// left to its checksum without.
fn check_body(header: &PackHeader, body: &[u8], keys: &StoreKeys) -> Result<(), String> {
    let body = match (header.compression, header.sealed) {
        (Compression::Manifest, _) => {
            return Manifest::decode(body)
                .map(drop)
                .map_err(|error| error.to_string());
        }
        (_, Some(_)) if !keys.seals() || keys.erased(header.tenant_id) => return Ok(()),
        (_, Some(version)) => {
            bytes::Bytes::from(crate::blob::view::open_body(header, version, body, keys)?)
        }
        (_, None) => bytes::Bytes::copy_from_slice(body),
    };
    let addressing = keys.addressing(header.tenant_id);
    let (compression, raw_len) = (header.compression, header.raw_len);
    codec::decode(&addressing, &header.hash, compression, raw_len, body)
        .map(drop)
        .map_err(|error| error.to_string())
}

/// Every chunked blob rebuilt from its chunks and checked against its BlobHash. One that lacks
/// a chunk is taken out of the index like at open: a note (a backup's cut may copy such an
/// unreferenced manifest), and a problem through replay if a live turn names it.
fn verify_manifests(views: &[ShardView], report: &mut VerifyReport) {
    // Sealed chunks open only under the master key: without it, a manifest is checked as a
    // record and against its chunks' presence, not rebuilt.
    let rebuild = report.sealed == 0 || views.first().is_none_or(|view| view.keys.seals());
    for incomplete in crate::chunks::drop_incomplete_manifests(views) {
        report.notes.push(format!(
            "chunked blob {} is incomplete ({}); it is not used (a live turn naming it is a \
             problem below)",
            incomplete.hash, incomplete.reason
        ));
    }
    for view in views.iter().filter(|_| rebuild) {
        let manifests = crate::chunks::indexed_manifests(view);
        // A deleted tenant's chunks open no more (decision 0032 §6).
        let openable = manifests
            .into_iter()
            .filter(|(_, location)| !view.keys.erased(location.tenant_id));
        for (hash, location) in openable {
            if let Err(error) = crate::chunks::read_payload(views, &hash, location) {
                report
                    .problems
                    .push(format!("chunked blob {hash}: {error}"));
            }
        }
    }
}

fn report_tail(report: &mut VerifyReport, path: &Path, tail: Tail) {
    match tail {
        Tail::Clean | Tail::Preallocated { .. } => {}
        Tail::Torn { offset, reason } => report.notes.push(format!(
            "{}: torn tail at offset {offset} ({reason}); the next open cuts it",
            path.display()
        )),
        Tail::Corrupt(corruption) => report.problems.push(format!(
            "{} at offset {}: {}",
            corruption.file.display(),
            corruption.offset,
            corruption.reason
        )),
    }
}

/// The shard's view of what its packs hold (a later copy of a blob counts, as at open), with
/// read handles so that chunked blobs can be rebuilt across shards (`verify_manifests`).
fn shard_view(
    report: &mut VerifyReport,
    shard: u16,
    dir: &Path,
    packs: &[(u32, PathBuf)],
    found: Vec<IndexEntry>,
    keys: Arc<StoreKeys>,
) -> Result<ShardView, OpenError> {
    let index = BlobIndex::with_capacity_and_hasher(found.len().max(16), BlobHashBuildHasher);
    let view = ShardView::new(shard, dir.to_path_buf(), index, keys);
    view.add_packs(packs.iter().cloned())
        .map_err(|(path, source)| OpenError::io(path, source))?;
    let mut first_seen: HashMap<BlobHash, BlobLocation, BlobHashBuildHasher> = HashMap::default();
    for entry in found {
        if entry.hash.shard(report.shards) != shard {
            report.problems.push(format!(
                "blob {} is stored in shard {shard}, not its own",
                entry.hash
            ));
        }
        // Twice: a garbage collection swept the blob, a put stored it again, and the old
        // copy waits for its pack's compaction. The later copy counts, like at open.
        if first_seen.insert(entry.hash, entry.location).is_some() {
            view.remove(&entry.hash);
            report.blobs -= 1;
        }
        view.publish(entry.hash, entry.location);
        report.blobs += 1;
    }
    Ok(view)
}

/// The index must describe the packs record for record; it may be shorter (lazy sync). Not
/// while a compaction was switching files when the store stopped: the next open rebuilds the
/// index then (and drops `.compact` files).
/// A shard's index as `verify_shard` read it.
struct IndexScanned<'a> {
    path: &'a Path,
    entries: &'a [IndexEntry],
    /// Its entries say nothing of their records' tenants: compared without them.
    predates_tenants: bool,
}

fn check_index(
    report: &mut VerifyReport,
    dir: &Path,
    index: &IndexScanned<'_>,
    found: &[IndexEntry],
) {
    let (index_path, entries) = (index.path, index.entries);
    let switching = dir.join(crate::store_dir::REINDEX_MARKER_FILE).exists();
    if switching {
        report.notes.push(format!(
            "{}: a compaction was switching files; the next open rebuilds the blob index",
            dir.display()
        ));
    }
    for (position, entry) in entries.iter().enumerate() {
        if switching {
            break;
        }
        let matches = found.get(position).is_some_and(|record| {
            let mut record = *record;
            if index.predates_tenants {
                record.location.tenant_id = entry.location.tenant_id;
            }
            record == *entry
        });
        if !matches {
            report.problems.push(format!(
                "{} at offset {}: entry for blob {} does not match the pack record it points to",
                index_path.display(),
                position * crate::format::blob_index::INDEX_ENTRY_BYTES,
                entry.hash
            ));
            break;
        }
    }
}

/// Every turn's blob is in its shard. What the next open cuts as the unacknowledged tail of a
/// crash (decision 0014) is a note; a missing blob before it is a problem. (Never inside the
/// compacted base, through `through`: what it holds was durable and answered.)
fn check_blobs(
    report: &mut VerifyReport,
    log_path: &Path,
    state: &RecoveredLog,
    scan: &LogScan,
    through: u64,
) {
    let tail = (!matches!(scan.tail, Tail::Corrupt(_)))
        .then(|| state.unacknowledged_tail(scan.records))
        .flatten()
        .filter(|first| first.0 > through);
    let missing = match tail {
        Some(first) => {
            report.notes.push(format!(
                "{}: turns {first}..={} name blobs missing from their shards: the \
                 unacknowledged tail of a crash; the next open cuts it",
                log_path.display(),
                scan.records
            ));
            state.check_blobs_missing_before(first.0)
        }
        None => state.check_blobs_missing(),
    };
    if let Err(problem) = missing {
        report
            .problems
            .push(format!("{}: {problem}", log_path.display()));
    }
}

/// The store's meta file, decoded (damage there is corruption: nothing else can be read).
fn read_meta(store: &StoreDir) -> Result<Meta, OpenError> {
    let meta_path = store.meta_path();
    let meta_bytes =
        crate::file::read_whole(&meta_path).map_err(|source| OpenError::io(&meta_path, source))?;
    Meta::decode(&meta_bytes).map_err(|error| {
        OpenError::Corrupt(crate::error::Corruption::record(&meta_path, 0, &error))
    })
}

/// An older store format: a note (the next open migrates it), or a problem when the log holds
/// what only a later format writes (tenant records).
fn note_format(report: &mut VerifyReport, meta: &Meta, log_path: &Path, tenants: u32) {
    let format = meta.format_version;
    if format < 2 {
        report.notes.push(format!(
            "store format {format}: the next open migrates it to format \
             {STORE_FORMAT_VERSION} (skip pointers)"
        ));
    } else if format < STORE_FORMAT_VERSION {
        report.notes.push(format!(
            "store format {format}: the next open marks it format {STORE_FORMAT_VERSION} \
             (tenants; no record changes)"
        ));
    }
    if format < STORE_FORMAT_VERSION && tenants > 0 {
        report.problems.push(format!(
            "{}: store format {format} with {tenants} tenant records, which only format \
             {STORE_FORMAT_VERSION} writes",
            log_path.display()
        ));
    }
}

/// Notes on the log's compaction: one left unfinished, and the base the log stands on.
fn note_compaction(report: &mut VerifyReport, store: &StoreDir, base: Option<&LogBase>) {
    let compact = store.turns_base_compact_path();
    if compact.exists() {
        report.notes.push(format!(
            "{}: an unfinished log compaction; the next open deletes it",
            compact.display()
        ));
    }
    if let Some(base) = base {
        report.notes.push(format!(
            "{}: turns.log compacted through record {} ({} records kept, {} collected turns \
             dropped)",
            base.path().display(),
            base.through(),
            base.header.record_count,
            base.header.turns_dropped
        ));
    }
}

/// The figures of the replayed state: turns, contexts live, deleted and skipped, bytes.
fn count_state(report: &mut VerifyReport, state: &RecoveredLog) {
    report.turns = state.turns;
    let heads = &state.heads;
    report.contexts_skipped = state.contexts.skipped_contexts;
    report.contexts_deleted = heads
        .iter()
        .filter(|(_, head)| head.head_turn_id == DELETED_HEAD)
        .count() as u64
        - report.contexts_skipped;
    report.contexts = heads.count() - report.contexts_deleted - report.contexts_skipped;
    report.logical_bytes = state.logical_bytes;
}
