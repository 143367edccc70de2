//! Opening `turns.log`: replay every record, checking the DAG as it goes, rebuild the heads,
//! cut a torn tail, refuse damage (or cut it, with `repair`).
//!
//! Replay checks, per turn (its record and extras slots): the context exists; its previous
//! own turn is the one it names; the parent is the context's head at that point, or (an
//! explicit parent) an older turn read back; depth = parent depth + 1 (root: 0); its extras
//! decode and its key is new in the context; the blob is in its shard's index with the same
//! length. Per context record: ids are dense; the base turn exists and its depth matches.
//!
//! A missing blob: since decision 0014 the sequencer writes (and syncs) a batch's turns while
//! their new blobs' pack batches sync, and publishes and answers the batch only once both are
//! durable, writing nothing after it before that. So turns naming blobs a crash lost can only
//! be the end of the log: the first such turn (not collected, not redacted) within
//! `HELD_RECORDS_MAX` records of the end starts an unacknowledged tail, cut with a warning.
//! Anywhere else a missing blob means a pack lost acknowledged data: the open is refused.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use crate::blob::view::ShardView;
use crate::config::HELD_RECORDS_MAX;
use crate::error::OpenError;
use crate::file::ScanFile;
use crate::format::context_meta::{ContextMeta, OverlayKind};
use crate::format::pack::SEALED_BODY_OVERHEAD_BYTES as SEAL_OVERHEAD_BYTES;
use crate::format::stream_meta::{StreamMeta, is_stream_op};
use crate::format::turn_extras::TurnExtras;
use crate::format::turn_log::{
    Assembled, ContextRecord, LOG_RECORD_BYTES, LogRecord, MetaRecord, SlotAssembly, SlotHead,
    TurnRecord, Whole, record_offset,
};
use crate::ids::{BlobHash, BlobHashBuildHasher, ContextId, TenantId, TurnId};
use crate::keys::StoreKeys;
use crate::seal::{self, DeltaPlace};
use crate::sequencer::contexts::Contexts;
use crate::sequencer::dead::DeadTurns;
use crate::sequencer::heads::{HeadState, Heads};
use crate::sequencer::log_base::LogBase;
use crate::sequencer::scan::scan_log;
use crate::sequencer::streams::Streams;
use crate::tail::Tail;

#[derive(Debug, Default)]
pub(crate) struct RecoveredLog {
    pub next_record_id: u64,
    /// Length of `turns.log` after recovery: records, then possibly prepared zeros.
    pub file_len: u64,
    pub heads: Heads,
    /// Names, tags, key-value entries and times of every context.
    pub contexts: Contexts,
    /// Open streams and the ended ones kept (stream records, issue 32).
    pub streams: Streams,
    pub turns: u64,
    pub logical_bytes: u64,
    pub dedup_hits: u64,
    /// Turns the garbage collector collected (gc-dead records).
    pub dead: DeadTurns,
    /// Turns whose blob (payload or a patch's) is not in its shard: fine for a collected or
    /// redacted turn, an unacknowledged tail at the end of the log, data loss for any other.
    /// Decided at the end of replay, when every gc-dead and overlay record has been read
    /// (they come after the turn).
    pub blobs_missing: Vec<MissingBlob>,
}

/// A blob a record names that is not in its shard.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MissingBlob {
    /// The turn whose payload or patch it is.
    pub turn_id: TurnId,
    pub hash: BlobHash,
    pub shard: u16,
    /// The record naming it: the turn itself (a payload) or an overlay record (a patch).
    pub record_id: u64,
}

impl MissingBlob {
    fn is_payload(&self) -> bool {
        self.record_id == self.turn_id.0
    }
}

/// Whether a turn may have lost its blobs: collected, or redacted (decision 0012: a
/// collection removes a redacted turn's payload and patches).
fn may_miss_blobs(state: &RecoveredLog, turn_id: TurnId) -> bool {
    state.dead.contains(turn_id) || state.contexts.overlays.is_redacted(turn_id)
}

impl RecoveredLog {
    /// The end of replay: every turn whose blob is missing was collected or redacted.
    pub fn check_blobs_missing(&self) -> Result<(), String> {
        self.check_blobs_missing_before(u64::MAX)
    }

    /// The same, for the records before `record_id` (those an unacknowledged tail's cut
    /// keeps).
    pub fn check_blobs_missing_before(&self, record_id: u64) -> Result<(), String> {
        match self
            .blobs_missing
            .iter()
            .filter(|missing| missing.record_id < record_id)
            .find(|missing| !may_miss_blobs(self, missing.turn_id))
        {
            None => Ok(()),
            Some(missing) => Err(format!(
                "turn {} references blob {} which is not in shard {}: a pack lost acknowledged \
                 data",
                missing.turn_id, missing.hash, missing.shard
            )),
        }
    }

    /// The first turn whose payload blob is missing (neither collected nor redacted), if it
    /// lies within `HELD_RECORDS_MAX` of the end of the `records` valid records: the start of
    /// the last batch's unacknowledged tail (decision 0014), which the open cuts. A patch's
    /// missing blob never starts one (patches are stored and synced before their record).
    pub fn unacknowledged_tail(&self, records: u64) -> Option<TurnId> {
        let first = self
            .blobs_missing
            .iter()
            .filter(|missing| missing.is_payload() && !may_miss_blobs(self, missing.turn_id))
            .map(|missing| missing.turn_id)
            .min()?;
        assert!(first.0 >= 1 && first.0 <= records, "a replayed turn");
        (records - first.0 < HELD_RECORDS_MAX).then_some(first)
    }
}

/// Replays `base` (the compacted prefix, if any) and then `turns.log` after it.
pub(crate) fn recover_log(
    path: &Path,
    base: Option<&Arc<LogBase>>,
    shards: &[ShardView],
    repair: bool,
) -> Result<RecoveredLog, OpenError> {
    let mut recovered = recover_log_once(path, base, shards, repair, true)?;
    recovered.contexts.publish_turn_keys();
    Ok(recovered)
}

/// One replay of the log; `tail_cut`: an unacknowledged tail may be cut (then the log is
/// replayed again without it, so that nothing it held, a gc-dead record or a redaction,
/// excuses a missing blob before it; that second replay cuts nothing more).
fn recover_log_once(
    path: &Path,
    base: Option<&Arc<LogBase>>,
    shards: &[ShardView],
    repair: bool,
    tail_cut: bool,
) -> Result<RecoveredLog, OpenError> {
    let io = |source| OpenError::io(path, source);
    let mut replay = Replay::new(ScanFile::open(path).map_err(io)?, base.cloned(), shards);
    let scan = scan_log(path, base.map(|base| &**base), |record| {
        replay.record(record)
    })
    .map_err(io)?;
    let through = base.map_or(0, |base| base.through());
    let pending = replay.pending.as_ref().map(SlotAssembly::head_record_id);
    let mut state = replay.state;
    let damaged = matches!(scan.tail, Tail::Corrupt(_));
    // The base holds only what a collection saw durable and answered: a turn in it whose blob
    // is missing is lost data (refused below), never an unacknowledged tail.
    if let Some(first) = state.unacknowledged_tail(scan.records)
        && first.0 > through
        && tail_cut
        && !damaged
    {
        let offset = record_offset(first.0);
        tracing::warn!(
            log = %path.display(), offset, turn = %first, records = scan.records + 1 - first.0,
            "cutting turns.log at the first turn whose blob is missing: the unacknowledged \
             tail of the last batch before a crash (its turns were never answered)"
        );
        crate::file::ops::cut_durably(path, offset).map_err(io)?;
        return recover_log_once(path, base, shards, repair, false);
    }
    state
        .check_blobs_missing()
        .map_err(|reason| OpenError::Corrupt(crate::error::Corruption::new(path, 0, reason)))?;
    state.blobs_missing = Vec::new();
    let cut_at = match pending_metadata_tail(pending, scan.tail) {
        Tail::Clean | Tail::Preallocated { .. } => None,
        Tail::Torn { offset, reason } => {
            tracing::info!(log = %path.display(), offset, %reason, "cutting the torn tail of turns.log");
            Some(offset)
        }
        // The base was complete before it was renamed in: damage there is not a tail.
        Tail::Corrupt(corruption) if repair && corruption.file.as_path() == path => {
            tracing::warn!(%corruption, "repair: cutting turns.log at the damaged record");
            Some(corruption.offset)
        }
        Tail::Corrupt(corruption) => return Err(OpenError::Corrupt(corruption)),
    };
    if let Some(offset) = cut_at {
        assert!(
            offset >= record_offset(through + 1),
            "a cut inside the base"
        );
        crate::file::ops::cut_durably(path, offset).map_err(io)?;
    }
    let file_len = std::fs::metadata(path).map_err(io)?.len();
    // During replay `next_record_id` was the last record replayed; a base may end in
    // dropped slots, with no record after it yet.
    assert!(
        scan.records == state.next_record_id
            || (scan.records == through && state.next_record_id <= through),
        "replayed every valid record"
    );
    state.next_record_id = pending.unwrap_or(scan.records + 1);
    state.file_len = file_len;
    Ok(state)
}

/// A multi-slot record (metadata, or a turn with extras) whose slots did not all reach the
/// disk before the log ends is the unacknowledged end of a batch: the log is cut from its head slot. Damage stays damage.
pub(crate) fn pending_metadata_tail(pending: Option<u64>, tail: Tail) -> Tail {
    match (pending, tail) {
        (Some(head), Tail::Clean | Tail::Preallocated { .. } | Tail::Torn { .. }) => Tail::Torn {
            offset: record_offset(head),
            reason: format!("record {head} is missing slots at the end of the log"),
        },
        (_, tail) => tail,
    }
}

/// Rebuilds heads and counters from records in log order, checking the DAG on the way.
pub(crate) struct Replay<'a> {
    pub state: RecoveredLog,
    /// A multi-slot record whose continuation slots are still to come.
    pub pending: Option<SlotAssembly>,
    seen_blobs: HashSet<BlobHash, BlobHashBuildHasher>,
    shards: &'a [ShardView],
    reader: LogReader,
}

/// Reads back a record replay already passed: from the base when it covers it, else from
/// `turns.log`.
pub(crate) struct LogReader {
    log: ScanFile,
    base: Option<Arc<LogBase>>,
}

impl LogReader {
    /// Whether a log compaction dropped `record_id` (a collected turn no live history
    /// needed): records naming it may remain (decision 0011, *log compaction*).
    fn dropped(&self, record_id: TurnId) -> Result<bool, String> {
        match &self.base {
            Some(base) if base.covers(record_id.0) => base
                .slot(record_id.0)
                .map(|slot| slot.is_none())
                .map_err(|error| error.to_string()),
            _ => Ok(false),
        }
    }
}

impl<'a> Replay<'a> {
    pub fn new(log: ScanFile, base: Option<Arc<LogBase>>, shards: &'a [ShardView]) -> Self {
        let mut state = RecoveredLog::default();
        if let Some(base) = &base {
            // What the compactions dropped still counts (these are totals since creation).
            state.turns = base.header.turns_dropped;
            state.logical_bytes = base.header.logical_bytes_dropped;
        }
        Replay::resume(log, base, shards, state, 0)
    }

    /// Replay resumed from a live state (a standby's ingest, `sequencer/actor/ingest.rs`):
    /// the records after `last_record_id` are checked against `state` with the rules of an
    /// open. `state`'s counters count what this replay adds.
    pub fn resume(
        log: ScanFile,
        base: Option<Arc<LogBase>>,
        shards: &'a [ShardView],
        mut state: RecoveredLog,
        last_record_id: u64,
    ) -> Self {
        state.next_record_id = last_record_id;
        Replay {
            state,
            pending: None,
            seen_blobs: HashSet::default(),
            shards,
            reader: LogReader { log, base },
        }
    }

    pub fn record(&mut self, record: &LogRecord) -> Result<(), String> {
        let state = &mut self.state;
        let assembled = match (self.pending.take(), record) {
            (None, LogRecord::Context(context)) => {
                replay_context(state, &self.reader, context)?;
                None
            }
            (None, LogRecord::Turn(turn)) => Some(SlotAssembly::start(SlotHead::Turn(*turn))),
            (None, LogRecord::Meta(head)) => Some(SlotAssembly::start(SlotHead::Meta(*head))),
            (Some(assembly), LogRecord::Continuation(slot)) => Some(assembly.push(slot)?),
            (None, LogRecord::Continuation(slot)) => {
                return Err(format!(
                    "continuation {} of record {} without its head",
                    slot.record_id, slot.head_record_id
                ));
            }
            (Some(assembly), _) => {
                return Err(format!(
                    "record {} is missing slots before record {}",
                    assembly.head_record_id(),
                    record.record_id()
                ));
            }
        };
        match assembled {
            None => {}
            Some(Assembled::Partial(assembly)) => self.pending = Some(assembly),
            Some(Assembled::Complete(Whole::Meta(meta))) => {
                apply_meta(state, self.shards, &self.reader, &meta)?
            }
            Some(Assembled::Complete(Whole::Turn(turn, extras))) => {
                let turn = ReplayedTurn {
                    turn: &turn,
                    extras: &extras,
                };
                replay_turn(state, &mut self.seen_blobs, self.shards, &self.reader, turn)?;
            }
        }
        // During replay: the last record replayed (ids skip what a compaction dropped).
        assert!(
            record.record_id() > state.next_record_id,
            "records in id order"
        );
        state.next_record_id = record.record_id();
        Ok(())
    }
}

/// Ids are dense; the base turn exists and its depth matches.
fn replay_context(
    state: &mut RecoveredLog,
    reader: &LogReader,
    context: &ContextRecord,
) -> Result<(), String> {
    let expected_id = state.heads.next_context_id();
    if expected_id != Some(context.context_id) {
        return Err(format!(
            "context record creates context {}, expected {}",
            context.context_id,
            expected_id.map_or("none (the head table is full)".into(), |id| id.to_string())
        ));
    }
    // A fork's base that a log compaction dropped (the fork was deleted, and nothing else
    // needed its history) has nothing left to check against.
    if context.head_turn_id.is_none() {
        if context.head_depth != 0 {
            return Err(format!(
                "empty context {} has depth {}",
                context.context_id, context.head_depth
            ));
        }
    } else if !reader.dropped(context.head_turn_id)? {
        let base = read_turn(reader, context.head_turn_id)?;
        if base.depth != context.head_depth {
            return Err(format!(
                "context {} starts at turn {} with depth {}, but that turn has depth {}",
                context.context_id, base.turn_id, context.head_depth, base.depth
            ));
        }
    }
    if state.contexts.tenants.is_deleted(context.tenant_id) {
        return Err(format!(
            "context record {} gives context {} to tenant {}, which a record before it deleted",
            context.record_id, context.context_id, context.tenant_id
        ));
    }
    if !state.contexts.tenants.exists(context.tenant_id) {
        return Err(format!(
            "context record {} gives context {} to tenant {}, which no tenant record before it \
             registered",
            context.record_id, context.context_id, context.tenant_id
        ));
    }
    let context_id = state.heads.create(HeadState {
        head_turn_id: context.head_turn_id,
        head_depth: context.head_depth,
    });
    state.contexts.create(
        context_id,
        context.head_turn_id,
        context.tenant_id,
        context.created_at_unix_ms,
    );
    Ok(())
}

/// A turn and its extras body, as replay reassembled them.
#[derive(Clone, Copy)]
struct ReplayedTurn<'a> {
    turn: &'a TurnRecord,
    extras: &'a [u8],
}

/// The context exists; its context chain; the DAG rule (`heads.rs`) or an explicit parent's
/// depth; its extras and key; the blob is durable.
fn replay_turn(
    state: &mut RecoveredLog,
    seen_blobs: &mut HashSet<BlobHash, BlobHashBuildHasher>,
    shards: &[ShardView],
    reader: &LogReader,
    ReplayedTurn { turn, extras }: ReplayedTurn<'_>,
) -> Result<(), String> {
    let (Some(head), Some(info)) = (
        state.heads.get(turn.context_id),
        state.contexts.get(turn.context_id),
    ) else {
        return Err(format!(
            "turn {} names context {} which does not exist",
            turn.turn_id, turn.context_id
        ));
    };
    // Records of store format 1 carry no context chain (migration adds it).
    // A log compaction may have dropped the previous turn (collected, in a deleted context's
    // history that this turn outlives as an ancestor of a live one).
    if !turn.is_legacy()
        && turn.context_prev_turn_id != info.last_turn_id
        && !reader.dropped(turn.context_prev_turn_id)?
    {
        return Err(format!(
            "turn {} names {} as its context's previous turn, but context {} had {}",
            turn.turn_id, turn.context_prev_turn_id, turn.context_id, info.last_turn_id
        ));
    }
    if turn.parent_turn_id == head.head_turn_id {
        head.check_child(turn)?;
    } else {
        // An explicit parent (decision 0009): read it back for its depth.
        let parent_depth = match turn.parent_turn_id {
            TurnId::NONE => None,
            parent => Some(read_turn(reader, parent)?.depth),
        };
        let expected = parent_depth.map_or(Some(0), |depth| depth.checked_add(1));
        if expected != Some(turn.depth) {
            return Err(format!(
                "turn {} has depth {}, its parent {} is at {parent_depth:?}",
                turn.turn_id, turn.depth, turn.parent_turn_id
            ));
        }
    }
    let extras =
        TurnExtras::decode(extras).map_err(|error| format!("turn {}: {error}", turn.turn_id))?;
    // A key may be used again once its turn was collected (its gc-dead record comes before
    // any turn that could reuse it: the sequencer answered the key with the old turn until
    // its fence).
    if let Some(owner) = state.contexts.own_turn_key(turn.context_id, &extras.key)
        && !extras.key.is_empty()
        && !state.dead.contains(owner)
    {
        return Err(format!(
            "turn {} repeats the key of turn {owner} in context {}",
            turn.turn_id, turn.context_id
        ));
    }
    if let Some(shard) = check_blob(shards, turn)? {
        state.blobs_missing.push(MissingBlob {
            turn_id: turn.turn_id,
            hash: turn.payload_hash,
            shard,
            record_id: turn.turn_id.0,
        });
    }
    state.heads.set(turn.context_id, HeadState::of(turn));
    state.contexts.appended(
        turn.context_id,
        turn.turn_id,
        turn.payload_len,
        &extras,
        turn.created_at_unix_ms,
    );
    // Content written after a purge is new content (the live path refused it by hash).
    state.contexts.overlays.named(&turn.payload_hash);
    state.turns += 1;
    state.logical_bytes += u64::from(turn.payload_len);
    if !seen_blobs.insert(turn.payload_hash) {
        state.dedup_hits += 1;
    }
    Ok(())
}

/// A whole metadata record: its body decodes and its change obeys the rules of the live path
/// (`Contexts::check`).
fn apply_meta(
    state: &mut RecoveredLog,
    shards: &[ShardView],
    reader: &LogReader,
    record: &MetaRecord,
) -> Result<(), String> {
    if is_stream_op(record.op) {
        let keys = shards.first().map(|shard| &*shard.keys);
        return replay_stream(state, keys, record);
    }
    let meta = ContextMeta::decode(record.op, &record.body)
        .map_err(|error| format!("metadata record {}: {error}", record.record_id))?;
    match &meta {
        ContextMeta::Overlay { turn_id, kind } => {
            return replay_overlay(state, shards, reader, record, *turn_id, *kind);
        }
        ContextMeta::Purge(hash) => {
            state.contexts.overlays.purge(*hash);
            return Ok(());
        }
        ContextMeta::Tenant { tenant_id, name } => {
            // The live path's rule (`actor/tenants.rs`): the next id, a name not registered.
            let tenants = &mut state.contexts.tenants;
            tenants
                .check_register(*tenant_id, name)
                .map_err(|error| format!("metadata record {}: {error}", record.record_id))?;
            tenants.register(*tenant_id, name);
            return Ok(());
        }
        ContextMeta::TenantDeleted(tenant_id) => {
            return replay_tenant_deleted(state, record, *tenant_id);
        }
        ContextMeta::VectorIndex(_) | ContextMeta::VectorIndexDropped { .. } => {
            return replay_vector_index(state, record, &meta);
        }
        ContextMeta::SkipContexts => {
            // The live path's rule (`actor/floors.rs`): only ids past the last context.
            let last = record.context_id;
            if last.0 <= state.heads.count() || last.0 >= crate::ids::CONTEXTS_MAX {
                return Err(format!(
                    "skip record {} takes ContextIDs through {last}, but {} exist",
                    record.record_id,
                    state.heads.count()
                ));
            }
            state.heads.skip_through(last);
            state.contexts.skip_through(last, record.created_at_unix_ms);
            return Ok(());
        }
        _ => {}
    }
    if let ContextMeta::GcDead {
        first_turn_id,
        words,
    } = &meta
    {
        let last_word = words.last().copied().unwrap_or(0);
        let highest = first_turn_id + 64 * (words.len() as u64 - 1) + 63
            - u64::from(last_word.leading_zeros());
        if highest >= record.record_id {
            return Err(format!(
                "gc-dead record {} names turns after itself",
                record.record_id
            ));
        }
        state.dead.apply(*first_turn_id, words);
        state.contexts.overlays.forget_dead(&state.dead);
        state.contexts.vector_indexes.turns_died(&state.dead);
        return Ok(());
    }
    state
        .contexts
        .apply(record.context_id, &meta, record.created_at_unix_ms)
        .map_err(|error| format!("metadata record {}: {error}", record.record_id))?;
    if meta == ContextMeta::Delete {
        // `apply` refused a context that is not live, so the head is there to delete.
        state.heads.delete(record.context_id);
    }
    Ok(())
}

/// A stream record (issue 32) with the rules of the live path: an open is new and names a
/// live context, a delta continues its stream at its length, an end ends an open stream.
fn replay_stream(
    state: &mut RecoveredLog,
    keys: Option<&StoreKeys>,
    record: &MetaRecord,
) -> Result<(), String> {
    let damage = |reason: String| format!("stream record {}: {reason}", record.record_id);
    let meta = StreamMeta::decode(record.op, &record.body).map_err(|e| damage(e.to_string()))?;
    let meta = match meta {
        StreamMeta::Delta {
            stream_id,
            offset,
            bytes,
            key_version: Some(version),
        } => {
            let place = (record.context_id, stream_id, offset, version);
            StreamMeta::Delta {
                stream_id,
                offset,
                bytes: open_delta(state, keys, place, &bytes).map_err(damage)?,
                key_version: None,
            }
        }
        other => other,
    };
    if matches!(meta, StreamMeta::Open(_)) && state.heads.get(record.context_id).is_none() {
        return Err(damage(format!(
            "names context {}, which does not exist",
            record.context_id
        )));
    }
    state
        .streams
        .apply(
            record.record_id,
            record.context_id,
            &meta,
            record.created_at_unix_ms,
        )
        .map_err(damage)
}

/// A vector index record (ops 23, 24) with the live path's rules (`actor/vector_indexes.rs`):
/// a creation takes its tenant's next id and a name it has no live index of; a drop names a
/// live index.
fn replay_vector_index(
    state: &mut RecoveredLog,
    record: &MetaRecord,
    meta: &ContextMeta,
) -> Result<(), String> {
    let indexes = &mut state.contexts.vector_indexes;
    let damage = |error: String| format!("metadata record {}: {error}", record.record_id);
    match meta {
        ContextMeta::VectorIndex(index) => {
            indexes.check_create(index).map_err(damage)?;
            indexes.create(index);
        }
        ContextMeta::VectorIndexDropped {
            tenant_id,
            index_id,
        } => {
            indexes.check_drop(*tenant_id, *index_id).map_err(damage)?;
            indexes.drop_index(*tenant_id, *index_id);
        }
        _ => unreachable!("called for vector index records only"),
    }
    Ok(())
}

/// A tenant-deleted record (op 21) with the live path's rule (`actor/tenants.rs`): a
/// registered tenant, once; its live contexts are deleted with it.
fn replay_tenant_deleted(
    state: &mut RecoveredLog,
    record: &MetaRecord,
    tenant_id: TenantId,
) -> Result<(), String> {
    let at = record.created_at_unix_ms;
    let deleted = (state.contexts.delete_tenant(tenant_id, at))
        .map_err(|error| format!("metadata record {}: {error}", record.record_id))?;
    for context_id in deleted {
        state.heads.delete(context_id);
    }
    Ok(())
}

/// A replayed sealed delta's plain bytes (decision 0032 §4): opened under its context's
/// tenant's data key `version`; `verify` without the master key counts it by its length.
fn open_delta(
    state: &RecoveredLog,
    keys: Option<&StoreKeys>,
    (context_id, stream_id, offset, version): (ContextId, u64, u64, u16),
    sealed: &[u8],
) -> Result<Vec<u8>, String> {
    let keys = keys.ok_or("a sealed delta in a store without shards")?;
    let tenant_id = state
        .contexts
        .get(context_id)
        .map(|info| info.tenant_id)
        .ok_or_else(|| format!("names context {context_id}, which does not exist"))?;
    // A deleted tenant's delta opens no more (its stream is aborted further on, its context
    // deleted): it is counted by its length, as verify without the key counts every delta.
    if keys.checks_only() || keys.erased(tenant_id) {
        return Ok(vec![0; sealed.len().saturating_sub(SEAL_OVERHEAD_BYTES)]);
    }
    let key = keys.data_key(tenant_id, version)?;
    let place = DeltaPlace {
        tenant_id,
        stream_id,
        offset,
    };
    seal::open_delta(&key, place, sealed)
        .map_err(|error| format!("its sealed delta of stream {stream_id}: {error}"))
}

/// An overlay record (decision 0012), with the rules of the live path: it names an older,
/// durable turn of its context that is neither collected nor redacted; a patch's blob is in
/// its shard with the length the record says (or gone because the turn was later redacted or
/// collected: decided at the end of replay).
fn replay_overlay(
    state: &mut RecoveredLog,
    shards: &[ShardView],
    reader: &LogReader,
    record: &MetaRecord,
    turn_id: TurnId,
    kind: OverlayKind,
) -> Result<(), String> {
    let damage = |reason: String| format!("overlay record {}: {reason}", record.record_id);
    if turn_id.0 >= record.record_id {
        return Err(damage(format!("names turn {turn_id}, which is not older")));
    }
    if reader.dropped(turn_id)? {
        // Its turn was collected (a later gc-dead record says so) and compacted away: the
        // overlay reads nothing any more and its patch is no root.
        return Ok(());
    }
    let turn = read_turn(reader, turn_id).map_err(damage)?;
    if turn.context_id != record.context_id {
        return Err(damage(format!(
            "names context {}, turn {turn_id} belongs to context {}",
            record.context_id, turn.context_id
        )));
    }
    if state.dead.contains(turn_id) {
        return Err(damage(format!("names turn {turn_id}, which was collected")));
    }
    state
        .contexts
        .overlays
        .apply(record.record_id, turn_id, kind)
        .map_err(|error| damage(error.to_string()))?;
    if kind == OverlayKind::Redact {
        state.contexts.vector_indexes.turn_redacted(turn_id);
    }
    if let OverlayKind::Patch { hash, len } = kind {
        let shard = &shards[usize::from(hash.shard(shards.len() as u16))];
        match shard.location(&hash) {
            Some(location) if location.raw_len == len => {}
            Some(location) => {
                return Err(damage(format!(
                    "says its patch has {len} bytes, blob {hash} has {}",
                    location.raw_len
                )));
            }
            None => state.blobs_missing.push(MissingBlob {
                turn_id,
                hash,
                shard: shard.shard,
                record_id: record.record_id,
            }),
        }
    }
    Ok(())
}

/// The turn's blob is in its shard's index with the same length. A missing one
/// (`Some(shard)`) is decided at the end of replay: collected, redacted, the unacknowledged
/// tail, or lost acknowledged data.
fn check_blob(shards: &[ShardView], turn: &TurnRecord) -> Result<Option<u16>, String> {
    let shard = &shards[usize::from(turn.payload_hash.shard(shards.len() as u16))];
    match shard.location(&turn.payload_hash) {
        Some(location) if location.raw_len == turn.payload_len => Ok(None),
        Some(location) => Err(format!(
            "turn {} says its payload has {} bytes, blob {} has {}",
            turn.turn_id, turn.payload_len, turn.payload_hash, location.raw_len
        )),
        None => Ok(Some(shard.shard)),
    }
}

/// A turn that replay already passed (it is older than the record being replayed).
fn read_turn(reader: &LogReader, turn_id: TurnId) -> Result<TurnRecord, String> {
    let bytes = match &reader.base {
        Some(base) if base.covers(turn_id.0) => base
            .slot(turn_id.0)
            .map_err(|error| format!("reading turn {turn_id}: {error}"))?
            .map(|(_, slot)| slot)
            .ok_or_else(|| {
                format!("turn {turn_id} was compacted away, yet a later record names it")
            })?,
        _ => {
            let mut bytes = [0u8; LOG_RECORD_BYTES];
            reader
                .log
                .read_exact_at(&mut bytes, record_offset(turn_id.0))
                .map_err(|error| format!("reading turn {turn_id}: {error}"))?;
            bytes
        }
    };
    match LogRecord::decode(&bytes) {
        Ok(Some(LogRecord::Turn(turn))) if turn.turn_id == turn_id => Ok(turn),
        _ => Err(format!("record {turn_id} is not a turn")),
    }
}
