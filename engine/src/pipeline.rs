//! The append pipeline: the messages that carry a write from the caller (a network core, a
//! test, a benchmark) through the actors, and the replies that come back. Read this module to
//! see an append's journey; the actors only implement its steps, and the caller's side of it is
//! one route for every append (`engine/append.rs`: one turn is a batch of one).
//!
//! ```text
//!  caller (engine/append.rs)          blob shard (blob/shard.rs)        sequencer (sequencer/actor.rs)
//!  ─────────────────────────          ──────────────────────────        ──────────────────────────────
//!  validate, BLAKE3, index look-ups,
//!  a plan: each shard's new blobs
//!  (a manifest after its chunks)
//!   ├─ other shards' blobs ─────────► ShardRequest::Put, AfterPut::Written
//!   │  ◄──────────── PutWritten ────── pwrite; answered with its batch
//!   ├─ the carrier's blobs + turns ─► ShardRequest::Put, AfterPut::Append
//!   │                                 dedup again, group commit:
//!   │                                 pwrite the batch ──────────────► SequencerRequest::AppendPending
//!   │                                 fdatasync (pack)                  head CAS, TurnIDs, group commit:
//!   │                                 publish index                     pwrite, fdatasync (turns.log)
//!   │                                  └─ BlobsDurable(shard, batch) ─► wait for every batch named, then
//!   └─ every blob known ─────────────────────────────────────────────► SequencerRequest::Append
//!                                                                      head CAS, TurnIDs, group commit,
//!  ◄─────────────────────────────────────────────────────── BatchReply  fdatasync, publish, answer
//! ```
//!
//! The shard hands the turns on itself, so an append with new blobs costs one hop less than a
//! round trip through the caller. It hands a batch's appends on as soon as the pack write is
//! in the page cache, before its fdatasync, so that the pack's and the log's fdatasyncs
//! overlap (decision 0014): an append waits for one fsync, not two in series. The blobs of one
//! request that lie in other shards than the carrier's are put first and answered once
//! *written* (`AfterPut::Written`), naming their shard batch; their fdatasyncs overlap too.
//! The sequencer then publishes and answers a batch only once every blob its turns name is
//! durable (the shards' `BlobsDurable` notices), so "a published turn never points at a lost
//! blob" still holds; and it writes the next batch only after that, so a crash can leave turns
//! naming missing blobs only in the last batch of `turns.log` (at most `HELD_RECORDS_MAX`
//! records from the first such turn to the end), which recovery cuts as an unacknowledged tail.
//!
//! Why the sequencer never waits for a shard that waits for it: a shard hands a batch's
//! appends on in one message before it syncs, and answers `Written` puts only after that
//! message is in the sequencer's inbox. So whenever the sequencer waits for (shard S, batch N)
//! — learnt from S's own message or from a turn whose caller learnt it from S's answer — S
//! is past its only send to the sequencer for N and owes nothing but its fdatasync and the
//! notice (sent on an unbounded channel).
//!
//! Every reply is sent after the group commit that made its request durable (or failed it);
//! a `Written` answer is a step of the caller's route, never an acknowledgement.

use std::path::PathBuf;
use std::sync::Arc;

use crate::blob::condemned::Condemned;
use crate::error::EngineError;
use crate::format::blob_index::IndexEntry;
use crate::format::context_meta::ContextMeta;
use crate::format::context_meta::{OverlayKind, VectorIndexRecord};
use crate::format::pack::EncodedBlob;
use crate::format::stream_meta::StreamOpen;
use crate::ids::{BlobHash, ContextId, TenantId, TurnId};
use crate::model::{
    AppendRequest, Appended, ContextView, Created, IngestedLog, IngestedPack, NewContext, Overlaid,
    Purged, Scope,
};
use crate::sequencer::contexts::Contexts;
use crate::sequencer::dead::DeadTurns;
use crate::sequencer::streams::{StreamId, StreamInfo, StreamOwner};
use crate::sequencer::vector_indexes::VectorIndexInfo;

/// The blob a turn names: what the sequencer needs to write a turn record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TurnBlob {
    pub hash: BlobHash,
    pub raw_len: u32,
    /// It was stored before this append (for the dedup counter and the reply).
    pub deduped: bool,
    /// The caller named the blob by its hash (APPEND_TURN_BY_HASH) instead of sending its
    /// bytes: refused for a purged blob, which only new bytes bring back (decision 0012).
    pub by_hash: bool,
    /// `None`: durable and indexed. `Some`: written by that shard batch, whose fdatasync may
    /// still be running; the turn may be written, but not published or answered before the
    /// shard's `BlobsDurable` notice for the batch (decision 0014).
    pub pending: Option<ShardBatch>,
}

/// One group commit of one shard, numbered from 1 in the order the shard wrote them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShardBatch {
    pub shard: u16,
    pub batch: u64,
}

/// A shard's word to the sequencer that a batch whose appends it handed on is durable (and
/// its index entries published), or that its fdatasync failed (the store is read-only then).
/// Sent on an unbounded channel of its own, so that a shard never waits for the sequencer
/// between its fdatasync and this notice: the sequencer may be waiting for it.
#[derive(Debug)]
pub(crate) struct BlobsDurable {
    pub batch: ShardBatch,
    pub result: Result<(), EngineError>,
}

/// The shards' side of the notices channel.
pub(crate) type BlobNotices = flume::Sender<BlobsDurable>;

/// An append as the sequencer takes it: its blob durable, or pending in a shard batch.
pub(crate) type TurnAppend = AppendRequest<TurnBlob>;

/// The blob of a turn a shard hands on: ready (durable, or pending in a shard batch the caller
/// learnt of), or the put's own blob number `i`, which the shard resolves when it writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandedBlob {
    Ready(TurnBlob),
    InPut(u32),
}

/// An append waiting in a shard for the blobs of its put to be written (then handed on,
/// decision 0014).
pub(crate) type HandedAppend = AppendRequest<HandedBlob>;

/// Every append is a batch (one turn: a batch of one), all or none, answered together.
pub(crate) type BatchReply = oneshot::Sender<Result<Vec<Appended>, EngineError>>;
pub(crate) type ContextReply = oneshot::Sender<Result<Created, EngineError>>;
pub(crate) type MetaReply = oneshot::Sender<Result<ContextView, EngineError>>;
pub(crate) type OverlayReply = oneshot::Sender<Result<Overlaid, EngineError>>;
pub(crate) type PurgeReply = oneshot::Sender<Result<Purged, EngineError>>;
pub(crate) type PutReply = oneshot::Sender<Result<Vec<PutOutcome>, EngineError>>;
pub(crate) type WrittenReply = oneshot::Sender<Result<PutWritten, EngineError>>;
pub(crate) type StopReply = oneshot::Sender<()>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PutOutcome {
    /// This put wrote the record.
    Stored,
    /// The blob was already durable, or another put in the same batch wrote it.
    AlreadyStored,
}

/// A put answered once written (`AfterPut::Written`): each blob's outcome, and the shard
/// batch whose `BlobsDurable` notice tells when they are durable (`None`: every one was
/// durable already).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PutWritten {
    pub outcomes: Vec<PutOutcome>,
    pub pending: Option<ShardBatch>,
}

/// One blob of a put, and whether it is a chunk of a chunked payload (counted apart in the
/// shard's `ShardCounters`).
#[derive(Debug)]
pub(crate) struct BlobPut {
    pub blob: EncodedBlob,
    pub chunk: bool,
}

/// What a shard does once a put's blobs are written.
#[derive(Debug)]
pub(crate) enum AfterPut {
    /// Answer once every blob is durable (a put without a turn; chunks a manifest in another
    /// shard will name).
    Durable(PutReply),
    /// Answer once every blob is written, before the fdatasync, naming the batch (the blobs of
    /// an append that lie outside its carrier shard). Answered only after the batch's appends
    /// reached the sequencer's inbox (see the module's doc).
    Written(WrittenReply),
    /// Hand the appends on to the sequencer once the blobs are written (before the fdatasync,
    /// decision 0014); the sequencer answers `reply` once every blob and turn is durable.
    Append {
        appends: Vec<HandedAppend>,
        reply: BatchReply,
    },
}

/// To a blob shard: the sole writer of its packs and index.
#[derive(Debug)]
pub(crate) enum ShardRequest {
    /// Store `blobs`, in this order and in one group commit (so a manifest follows its chunks
    /// into the same write and fdatasync), then do `then`.
    Put { blobs: Vec<BlobPut>, then: AfterPut },
    /// Where the shard's durable data ends now (an online backup's consistent cut).
    Snapshot {
        reply: oneshot::Sender<ShardSnapshot>,
    },
    /// Garbage collection: seal the open pack if it holds records, so that every blob stored
    /// so far lies in a sealed pack a compaction may rewrite. Answers the new open pack's id.
    GcSeal {
        reply: oneshot::Sender<Result<u32, EngineError>>,
    },
    /// Garbage collection: sweep the condemned blobs located in `pack_id` (compare-and-set,
    /// then out of the index: reads answer not found, a new put writes a fresh copy).
    GcSweep {
        pack_id: u32,
        /// The condemned blobs the collector found in this pack.
        hashes: Vec<BlobHash>,
        condemned: Arc<Condemned>,
        reply: oneshot::Sender<SweptBlobs>,
    },
    /// Garbage collection: put a compacted pack in place of `pack_id` (the collector wrote
    /// and synced it, and the index to go with it up to `index_prefix_end`).
    GcInstall {
        install: CompactedPack,
        reply: oneshot::Sender<Result<(), EngineError>>,
    },
    /// A standby (issue 31, `engine/follow.rs`): the primary's pack bytes at `offset` of
    /// `pack_id` (the open pack, or the next one: a rotation), or a whole new version of a
    /// sealed pack a collection rewrote (`whole`). Written, synced, indexed and published
    /// before the answer, so that the log slots naming them may follow.
    Ingest {
        pack: IngestPack,
        reply: oneshot::Sender<Result<IngestedPack, EngineError>>,
    },
    /// Finish the queue, sync, and stop.
    Stop { done: StopReply },
}

/// Pack bytes a standby takes from its replica (`ShardRequest::Ingest`).
#[derive(Debug)]
pub(crate) struct IngestPack {
    pub pack_id: u32,
    pub offset: u64,
    pub bytes: Vec<u8>,
    /// The bytes are the whole new content of `pack_id` (offset 0).
    pub whole: bool,
    /// A whole sealed pack that differs from this shard's version (a collection rewrote it on
    /// the primary) is installed over it; without it, the shard keeps its version and says so
    /// (`IngestedPack::kept_own_version`). The standby asks after the log slots of the same
    /// cut were applied, so the turns naming the blobs the new version drops are dead by then.
    pub install: bool,
}

/// What a sweep took out of a pack's index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SweptBlobs {
    pub blobs: u64,
    /// Pack bytes (headers included) of the swept records.
    pub record_bytes: u64,
}

/// A pack the collector rewrote with only its live records, and the shard's index rewritten
/// to match, both synced; the shard installs them (`blob/shard.rs`).
#[derive(Debug)]
pub(crate) struct CompactedPack {
    pub pack_id: u32,
    /// `pack-NNNNNN.pack.compact`: renamed over the pack.
    pub pack_path: PathBuf,
    /// The kept records at their new offsets, in pack order.
    pub relocated: Vec<IndexEntry>,
    /// `blobs.idx.compact`: the index up to `index_prefix_end` of the old one, with this pack's
    /// entries replaced by `relocated`; the shard appends what it indexed since.
    pub index_path: PathBuf,
    pub index_prefix_end: u64,
}

/// A shard's durable extent between two batches: every blob published so far lies in packs
/// `0..pack_id` (sealed, whole files) or in `pack_id` before `pack_end`; `blobs.idx` holds
/// `index_end` bytes of whole entries, all describing records before that cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShardSnapshot {
    pub pack_id: u32,
    pub pack_end: u64,
    pub index_end: u64,
    pub blobs: u64,
}

/// To the sequencer: the sole writer of `turns.log`, TurnIDs and heads.
#[derive(Debug)]
pub(crate) enum SequencerRequest {
    /// A new context: empty, at a durable turn (a fork), or a clone; with a name and tags.
    /// The caller resolved `clone_from` to an id.
    CreateContext {
        new: NewContext,
        /// The caller's scope: the new context is its tenant's, and a fork's base or a
        /// clone's source must be visible in it.
        scope: Scope,
        reply: ContextReply,
    },
    /// Changes to one context's metadata (a name, tags, key-value entries whose value blobs
    /// are durable), applied together in one record each and one group commit; refused as a
    /// whole when the head is not `expected_head`.
    Meta {
        context_id: ContextId,
        changes: Vec<ContextMeta>,
        expected_head: Option<TurnId>,
        /// Key-value puts skip keys the context already has (insert-if-absent).
        kv_if_absent: bool,
        reply: MetaReply,
    },
    /// Delete a context or raise its floor (issue 15), decided against the sequencer's own
    /// state: a prune keeps the newest turns as of its place in the log, a delete by the TTL
    /// reaper happens only if the context is still idle. Answers the context as the change
    /// leaves it (a deleted one: as it was just before).
    Retain {
        context_id: ContextId,
        change: Retention,
        reply: MetaReply,
    },
    /// Append turns to one context, in order, all or none, in one group commit (one turn: a
    /// batch of one). Each blob is durable, or pending in a shard batch (`TurnBlob::pending`)
    /// whose notice the sequencer waits for before it publishes or answers.
    Append {
        appends: Vec<TurnAppend>,
        reply: BatchReply,
    },
    /// The appends one shard batch carries, its blobs written but maybe not yet durable: in one
    /// message, so that the sequencer, once it waits for the batch, holds every append the
    /// batch carries (a shard never blocks on a full inbox in the middle of a batch the
    /// sequencer waits for). Each entry is one `Append`'s turns and reply.
    AppendPending {
        batch: ShardBatch,
        appends: Vec<(Vec<TurnAppend>, BatchReply)>,
    },
    /// Patch or redact a durable turn (decision 0012): one overlay record naming the turn's
    /// context; a patch's blob is durable. Answers the turn as it reads afterwards.
    Overlay {
        turn_id: TurnId,
        kind: OverlayKind,
        reply: OverlayReply,
    },
    /// Part of a purge of `hash` (decision 0012): redact `turns` (those the caller found
    /// naming the blob; redacted or collected ones are skipped). The last part
    /// (`scanned_upto: Some(w)`) also redacts what names the blob after record `w` — turns
    /// past the caller's scan, patches — and writes the purge record, after them all.
    Purge {
        hash: BlobHash,
        turns: Vec<TurnId>,
        scanned_upto: Option<u64>,
        reply: PurgeReply,
    },
    /// A stream's change (issue 32, `sequencer/actor/streams.rs`): open, a delta, the seal
    /// (its turn and the end record in one batch) or an abort; answered once durable.
    Stream {
        change: StreamChange,
        reply: oneshot::Sender<Result<StreamAnswer, EngineError>>,
    },
    /// A garbage-collection round begins (`gc/`): answered after the batch it joins is
    /// durable, with the durable state the marker reads; from then on the sequencer notes every
    /// TurnID and BlobHash a new record names, until `GcFence` or `GcAbort`.
    GcStart { reply: oneshot::Sender<GcSnapshot> },
    /// The marker's verdict: `dead` turns and `condemned` blobs. Refused (`Aborted`) if a record
    /// since `GcStart` named a dead turn; else every noted blob is kept, the dead turns are
    /// written as gc-dead records and refused from now on. Answered once the records are
    /// durable.
    GcFence {
        dead: DeadTurns,
        condemned: Arc<Condemned>,
        reply: oneshot::Sender<Result<GcFenced, EngineError>>,
    },
    /// The round ends without a fence: stop noting.
    GcAbort,
    /// A standby (issue 31, `engine/follow.rs`): the primary's `turns.log` slots from record
    /// `first_record_id` on, whole records only; written and synced, replayed against the
    /// live state with recovery's rules, published as one batch.
    Ingest {
        first_record_id: u64,
        slots: Vec<u8>,
        reply: oneshot::Sender<Result<IngestedLog, EngineError>>,
    },
    /// A replica generation starts (issue 46 item 8, `sequencer/actor/floors.rs`): the next
    /// record id becomes at least `records_floor` (the base stands for the slots below it) and
    /// ContextIDs below `contexts_floor` are taken. Only while nothing is written.
    RaiseFloors {
        records_floor: u64,
        contexts_floor: u64,
        reply: oneshot::Sender<Result<(), EngineError>>,
    },
    /// Gives a tenant name its TenantId (decision 0032, `sequencer/actor/tenants.rs`): the
    /// one it has, or the next in a tenant record. Answered once that record is durable.
    RegisterTenant {
        name: String,
        reply: oneshot::Sender<Result<TenantId, EngineError>>,
    },
    /// Deletes a tenant and its contexts (decision 0032 §6, `sequencer/actor/tenants.rs`).
    /// Answered once the tenant-deleted record is durable.
    DeleteTenant {
        tenant_id: TenantId,
        reply: oneshot::Sender<Result<TenantId, EngineError>>,
    },
    /// Creates or drops a vector index (decision 0033, `sequencer/actor/vector_indexes.rs`).
    /// Answered once its record is durable.
    VectorIndex {
        change: VectorIndexChange,
        reply: oneshot::Sender<Result<VectorIndexInfo, EngineError>>,
    },
    /// Finish the queue and stop.
    Stop { done: StopReply },
}

/// What a `SequencerRequest::VectorIndex` asks.
#[derive(Debug)]
pub(crate) enum VectorIndexChange {
    /// The index as asked (`index_id` 0: the sequencer gives it; `ef_search` 0: the default).
    Create(VectorIndexRecord),
    Drop {
        tenant_id: TenantId,
        name: String,
    },
}

/// What a `SequencerRequest::Stream` asks (issue 32).
#[derive(Debug)]
pub(crate) enum StreamChange {
    /// Open a stream on a context (its extras normalized by the caller).
    Open {
        context_id: ContextId,
        open: StreamOpen,
        owner: StreamOwner,
    },
    /// Bytes at the stream's end; with `offset`, only there (a retried delta whose bytes are
    /// already there at that offset is answered as if written again).
    Delta {
        stream_id: StreamId,
        offset: Option<u64>,
        bytes: bytes::Bytes,
        owner: u64,
    },
    /// Seal: the stream's `length_bytes` bytes, stored durably as `blob`, become a turn, and
    /// the stream's end record follows it in the same batch. Answered `Moved` when the stream
    /// grew since the caller read it.
    Seal {
        stream_id: StreamId,
        length_bytes: u64,
        blob: TurnBlob,
        owner: u64,
    },
    Abort {
        stream_id: StreamId,
        owner: u64,
    },
    /// Every stream `owner` holds becomes unowned (its connection closed); writes nothing.
    Release {
        owner: u64,
    },
}

/// What a stream change did.
#[derive(Debug)]
pub(crate) enum StreamAnswer {
    Opened(StreamInfo),
    /// The stream's length after the delta.
    Length(u64),
    Sealed(Appended),
    /// The stream grew since the caller read it for the seal: read again and retry.
    Moved,
    Aborted,
    Released(usize),
}

/// The durable state a garbage-collection round marks from.
#[derive(Debug)]
pub(crate) struct GcSnapshot {
    /// Records `1..=watermark` of `turns.log` are durable; every later one is noted.
    pub watermark: u64,
    pub contexts: Arc<Contexts>,
    pub dead: Arc<DeadTurns>,
}

/// How a fence ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GcFenced {
    /// The dead turns are durable gc-dead records; sweeping may start.
    Fenced,
    /// A record since `GcStart` named this turn, which the marker found dead: nothing changed.
    Aborted(TurnId),
}

/// A retention change the sequencer decides (see `SequencerRequest::Retain`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Retention {
    /// Delete; with `updated_at_max`, only if the context was not updated after it (the TTL
    /// reaper's compare-and-set: a context touched since it looked lives on).
    Delete { updated_at_max: Option<u64> },
    /// Keep the newest `keep` (≥ 1) depths of the context's chain: floor = head depth + 1 −
    /// keep, never lower than the floor it has.
    Prune { keep: u32 },
}

/// The sequencer's inbox, as the other pipeline stages hold it.
#[derive(Clone, Debug)]
pub(crate) struct SequencerInbox(pub flume::Sender<SequencerRequest>);

impl SequencerInbox {
    /// Passes an append on to the sequencer; if it is gone, the caller learns it at once.
    pub async fn append(&self, appends: Vec<TurnAppend>, reply: BatchReply) {
        let request = SequencerRequest::Append { appends, reply };
        if let Err(flume::SendError(request)) = self.0.send_async(request).await
            && let SequencerRequest::Append { reply, .. } = request
        {
            let _ = reply.send(Err(EngineError::ShutDown));
        }
    }

    /// Passes a shard batch's appends on (`SequencerRequest::AppendPending`); if the
    /// sequencer is gone, every caller learns it at once.
    pub async fn append_pending(
        &self,
        batch: ShardBatch,
        appends: Vec<(Vec<TurnAppend>, BatchReply)>,
    ) {
        let request = SequencerRequest::AppendPending { batch, appends };
        if let Err(flume::SendError(request)) = self.0.send_async(request).await
            && let SequencerRequest::AppendPending { appends, .. } = request
        {
            for (_, reply) in appends {
                let _ = reply.send(Err(EngineError::ShutDown));
            }
        }
    }
}
