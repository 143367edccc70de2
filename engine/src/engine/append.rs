//! The caller's side of every write that stores blobs: one route (issue 30 item 3) for one
//! turn (a batch of one), a batch of turns, a chunked payload, and the puts without a turn
//! (`put_blob`, key-value values, patches, PUT_CHUNKED). `pipeline.rs` draws the actors' side.
//!
//! A write becomes a `BlobPlan`: each new blob encoded for its shard (a chunked payload as its
//! new chunks, then its manifest record), in write order, once per hash. Then, in this order:
//!
//! 1. **Chunks first, only across shards.** A manifest is written only after each chunk it
//!    names is durable (decision 0013): a chunk in another shard than its manifest is put and
//!    awaited (`AfterPut::Durable`) before anything else goes out. This is the one second
//!    fsync wait left, and it happens only with more than one shard (the default is one). A
//!    chunk in the manifest's own shard goes with it instead: one put, one shard batch, the
//!    chunks written before the manifest by the same `pwrite` and made durable by the same
//!    fdatasync, and all indexed together after it. Recovery keeps a pack record only when
//!    every record before it in the pack is whole (it stops at the first bad one), so a crash
//!    never leaves that manifest without those chunks.
//! 2. **Other shards, answered once written.** With turns to append, one shard — the carrier,
//!    the shard of the last new blob — will hand the turns on; every other shard's blobs go
//!    first as one put each answered once *written* (`AfterPut::Written`), naming the shard
//!    batch whose fdatasync is running. Their turns carry that batch as pending.
//! 3. **The carrier hands the turns on.** The carrier's blobs and every turn go in one put
//!    (`AfterPut::Append`): the shard writes them, hands the turns to the sequencer before its
//!    fdatasync, and the sequencer writes, syncs and then waits for every shard batch named
//!    (decision 0014). So an append waits for one overlapped fsync. With no new blob the turns
//!    go straight to the sequencer. A put without turns waits for its blobs' fdatasyncs, all
//!    shards at once.
//!
//! A chunked payload's pin (`gc::ChunkPins`) lives in the plan until the answer: its manifest
//! is indexed by then. A by-value write refused because a collection swept its blob between the
//! look-up and the sequencer is sent again (`SWEPT_RETRIES_MAX`).

use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use crate::blob::codec;
use crate::config::Limits;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::format::pack::{Compression, EncodedBlob};
use crate::gc::ChunkPin;
use crate::ids::{BlobHash, BlobHashBuildHasher, ContextId};
use crate::model::{AppendPayload, AppendRequest, Appended, Scope, TurnOptions};
use crate::pipeline::{
    AfterPut, BlobPut, HandedAppend, HandedBlob, PutOutcome, PutWritten, ShardRequest, TurnAppend,
    TurnBlob,
};
use crate::seal::Addressing;

use ctxstore_vocab::limits::APPEND_BATCH_TURNS_MAX;

/// A by-value write whose blob a garbage collection swept between the caller's look-up and
/// the sequencer (decision 0011) is refused `BlobNotFound`; the caller has the bytes and
/// stores them again (a fresh copy). Twice more at most: each retry would need another
/// collection to condemn the very same bytes in between.
pub(crate) const SWEPT_RETRIES_MAX: u32 = 2;

/// Where a planned blob lies: its shard, and its place among the plan's blobs for that shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Planned {
    pub shard: u16,
    pub index: u32,
}

/// The new blobs of one write, by shard, in write order (a manifest after its chunks), each
/// hash once; and the pins of its chunked payloads, held until the write is answered.
pub(crate) struct BlobPlan<'e> {
    /// Per shard: chunks whose manifest lies in another shard, durable before the rest goes.
    chunks_first: Vec<Vec<BlobPut>>,
    chunks_first_placed: HashSet<BlobHash, BlobHashBuildHasher>,
    /// Per shard: the blobs, in write order.
    blobs: Vec<Vec<BlobPut>>,
    placed: HashMap<BlobHash, Planned, BlobHashBuildHasher>,
    pins: Vec<ChunkPin<'e>>,
}

impl<'e> BlobPlan<'e> {
    fn new(shards: usize) -> Self {
        BlobPlan {
            chunks_first: (0..shards).map(|_| Vec::new()).collect(),
            chunks_first_placed: HashSet::default(),
            blobs: (0..shards).map(|_| Vec::new()).collect(),
            placed: HashMap::default(),
            pins: Vec::new(),
        }
    }

    /// `blob` into its shard's list, once per hash: where it lies.
    pub(crate) fn add(&mut self, blob: EncodedBlob, chunk: bool) -> Planned {
        let hash = blob.header.hash;
        if let Some(&planned) = self.placed.get(&hash) {
            return planned;
        }
        let shard = hash.shard(self.blobs.len() as u16);
        let list = &mut self.blobs[usize::from(shard)];
        let planned = Planned {
            shard,
            index: list.len() as u32,
        };
        list.push(BlobPut { blob, chunk });
        self.placed.insert(hash, planned);
        planned
    }

    /// A chunk a manifest of `manifest_shard` names: in the manifest's put when they share a
    /// shard (planned before the manifest, so written before it), else durable first.
    pub(crate) fn add_chunk(&mut self, manifest_shard: u16, blob: EncodedBlob) {
        let hash = blob.header.hash;
        let shard = hash.shard(self.blobs.len() as u16);
        if shard == manifest_shard {
            self.add(blob, true);
        } else if self.chunks_first_placed.insert(hash) {
            self.chunks_first[usize::from(shard)].push(BlobPut { blob, chunk: true });
        }
    }

    /// Holds a chunked payload's pin until the plan is dropped (after the answer).
    pub(crate) fn hold(&mut self, pin: ChunkPin<'e>) {
        self.pins.push(pin);
    }
}

/// A shard's planned blobs as puts that each fit an empty shard batch
/// (`shard_batch_records_max`, `shard_batch_bytes_max`), in plan order, and where each put
/// starts in the plan's list. A shard admits puts in the order they were sent and never splits
/// one, so a manifest still follows its chunks: into the same batch, or one after theirs.
fn split_puts(blobs: Vec<BlobPut>, limits: &Limits) -> (Vec<Vec<BlobPut>>, Vec<u32>) {
    let mut puts: Vec<Vec<BlobPut>> = Vec::new();
    let mut starts = Vec::new();
    let mut bytes = 0u64;
    for (index, blob) in blobs.into_iter().enumerate() {
        let len = blob.blob.bytes.len() as u64;
        let fits = puts.last().is_some_and(|put| {
            put.len() < limits.shard_batch_records_max as usize
                && bytes + len <= limits.shard_batch_bytes_max
        });
        if !fits {
            puts.push(Vec::new());
            starts.push(index as u32);
            bytes = 0;
        }
        bytes += len;
        if let Some(put) = puts.last_mut() {
            put.push(blob);
        }
    }
    (puts, starts)
}

/// Which put of a shard's `starts` holds the plan's blob `index`, and its place in that put.
fn locate(starts: &[u32], index: u32) -> (usize, u32) {
    let put = starts.partition_point(|&start| start <= index);
    assert!(put > 0, "blob {index} lies in a put");
    (put - 1, index - starts[put - 1])
}

/// A turn of an append, its blob known (durable) or in the plan.
enum PlannedBlob {
    Ready(TurnBlob),
    Planned {
        planned: Planned,
        hash: BlobHash,
        raw_len: u32,
    },
}

/// Whether a by-value payload is the blob at `address` (only asked on the rare refusal path).
fn carries(addressing: &Addressing, payload: &AppendPayload, address: &BlobHash) -> bool {
    match payload {
        AppendPayload::Bytes(bytes) => addressing.address(BlobHash::of(bytes)) == *address,
        AppendPayload::Zstd { hash: claimed, .. } => addressing.address(*claimed) == *address,
        AppendPayload::StoredBlob(_) => false,
    }
}

/// A payload an append brings (not one it names by hash): as sent, or compressed by the
/// client (`AppendPayload::Zstd`, checked only if it must be stored).
enum Brought {
    Raw(Bytes),
    Zstd { raw_len: u32, frame: Bytes },
}

impl Brought {
    fn raw_len(&self) -> u32 {
        match self {
            Brought::Raw(bytes) => bytes.len() as u32,
            Brought::Zstd { raw_len, .. } => *raw_len,
        }
    }
}

impl Engine {
    /// Appends a turn to a context's head. Returns once blob, turn and head move are durable.
    /// A batch of one (`append_batch`): one route for every append.
    pub async fn append(&self, request: AppendRequest) -> Result<Appended, EngineError> {
        let mut appended = self.append_batch(vec![request]).await?;
        assert_eq!(appended.len(), 1, "a batch of one answers one turn");
        appended.pop().ok_or(EngineError::ShutDown)
    }

    /// Appends turns to one context in one request and one group commit, in order, all or
    /// none: an agent step that produced a tool call, its result and a message. Each turn's
    /// parent is the one before it unless its options say otherwise; `expected_head` may be
    /// set on the first only. Blobs and turns go together: one overlapped fsync wait.
    pub async fn append_batch(
        &self,
        requests: Vec<AppendRequest>,
    ) -> Result<Vec<Appended>, EngineError> {
        let mut attempts = 0;
        let result = loop {
            let result = self.append_once(requests.clone()).await;
            match result {
                // A turn's vectors blob swept in between is stored again too.
                Err(EngineError::BlobNotFound(gone))
                    if attempts < SWEPT_RETRIES_MAX
                        && requests.iter().any(|request| {
                            request.options.vectors.is_some()
                                || carries(&self.addressing, &request.payload, &gone)
                        }) =>
                {
                    attempts += 1;
                }
                result => break result,
            }
        };
        // Answered with the caller's hashes, not the addresses the turns were written with.
        match result {
            Ok(appended) => Ok(appended
                .into_iter()
                .map(|appended| Appended {
                    turn: self.shown(appended.turn),
                    ..appended
                })
                .collect()),
            Err(error) => Err(self.shown_error(error)),
        }
    }

    async fn append_once(
        &self,
        requests: Vec<AppendRequest>,
    ) -> Result<Vec<Appended>, EngineError> {
        let context_id = self.check_append(&requests)?;
        let requests = self.store_turn_vectors(context_id, requests).await?;
        let mut hashed = Vec::with_capacity(requests.len());
        for request in requests {
            let (append, payload) = request.split();
            let (hash, bytes) = match payload {
                AppendPayload::Bytes(bytes) => {
                    self.check_blob_len(bytes.len())?;
                    (BlobHash::of(&bytes), Some(Brought::Raw(bytes)))
                }
                AppendPayload::Zstd {
                    hash,
                    raw_len,
                    frame,
                } => {
                    self.check_blob_len(raw_len as usize)?;
                    (hash, Some(Brought::Zstd { raw_len, frame }))
                }
                AppendPayload::StoredBlob(hash) => (hash, None),
            };
            hashed.push((append, hash, bytes));
        }
        // A retry whose keys are all published already is answered here, without storing its
        // payloads again (the sequencer checks keys anyway, for appends racing each other).
        if let Some(existing) = self.published_turns_by_key(context_id, &hashed)? {
            return Ok(existing);
        }
        let published = &self.inner.published;
        let mut plan = BlobPlan::new(published.shards.len());
        let mut turns = Vec::with_capacity(hashed.len());
        for (append, hash, bytes) in hashed {
            // The turn names its payload by address (the hash itself for the operator's).
            let address = self.address(hash);
            let blob = match (published.shard_of(&address).location(&address), bytes) {
                (Some(location), bytes) => PlannedBlob::Ready(TurnBlob {
                    hash: address,
                    raw_len: location.raw_len,
                    deduped: true,
                    by_hash: bytes.is_none(),
                    pending: None,
                }),
                (None, Some(bytes)) => PlannedBlob::Planned {
                    raw_len: bytes.raw_len(),
                    planned: self.plan_payload(&mut plan, hash, bytes)?,
                    hash: address,
                },
                // By address, like every error of this route (`append_batch` shows the hash).
                (None, None) => return Err(EngineError::ReferencedBlobNotFound(address)),
            };
            turns.push(append.with_payload(blob));
        }
        let answer = self.send_append(&mut plan, turns).await;
        // The pins end only now: every manifest the write stored is indexed.
        drop(plan);
        answer
    }

    /// The checks every append request passes before anything is hashed: the store open and
    /// writable, 1..=64 turns to one existing context, `expected_head` on the first only.
    fn check_append(&self, requests: &[AppendRequest]) -> Result<ContextId, EngineError> {
        self.check_open()?;
        let published = &self.inner.published;
        published.status.check_writable()?;
        let Some(first) = requests.first() else {
            return Err(too_many_turns());
        };
        if requests.len() > APPEND_BATCH_TURNS_MAX {
            return Err(too_many_turns());
        }
        let context_id = first.context_id;
        // Another tenant's context answers as an absent one (its tenant never changes, so a
        // check here, on the caller's side, holds when the sequencer appends).
        let visible = || published.sees(self.scope, context_id);
        if published.heads.head(context_id).is_none() || !visible() {
            return Err(EngineError::ContextNotFound(context_id));
        }
        let mixed = requests
            .iter()
            .any(|request| request.context_id != context_id);
        let late_expectation = requests[1..].iter().any(|r| r.expected_head.is_some());
        if mixed || late_expectation {
            return Err(EngineError::InvalidArgument(
                "a batch append goes to one context, with expected_head on its first turn only"
                    .into(),
            ));
        }
        if self.scope != Scope::Store {
            // A link may name a turn of any context, but only of the caller's tenant: another
            // tenant's answers as an absent one (the sequencer checks that it exists).
            let reader = self.reader();
            for link in requests.iter().flat_map(|request| &request.options.links) {
                reader.scoped_turn(*link)?;
            }
        }
        Ok(context_id)
    }

    /// Steps 1–3 of the module's route for a planned append.
    async fn send_append(
        &self,
        plan: &mut BlobPlan<'_>,
        turns: Vec<AppendRequest<PlannedBlob>>,
    ) -> Result<Vec<Appended>, EngineError> {
        self.put_chunks_first(plan).await?;
        let carrier = turns.iter().rev().find_map(|turn| match turn.payload {
            PlannedBlob::Planned { planned, .. } => Some(planned.shard),
            PlannedBlob::Ready(_) => None,
        });
        // Every put goes out now, answered once written, except the carrier's last: it takes
        // the turns (a carrier's blobs past one batch go ahead like another shard's).
        let limits = &self.inner.config.limits;
        let mut layout = Layout::default();
        let mut carrier_put = None;
        let mut answers = Vec::new();
        for (shard, blobs) in plan.blobs.iter_mut().enumerate() {
            let (mut puts, starts) = split_puts(std::mem::take(blobs), limits);
            if Some(shard as u16) == carrier {
                carrier_put = puts.pop();
            }
            for (put, blobs) in puts.into_iter().enumerate() {
                let (reply, answer) = oneshot::channel();
                self.send_put(shard, blobs, AfterPut::Written(reply))
                    .await?;
                answers.push(((shard, put), answer));
            }
            layout.starts.push(starts);
        }
        for (put, answer) in answers {
            let written = answer.await.map_err(|_| EngineError::ShutDown)??;
            layout.written.insert(put, written);
        }
        let appends: Vec<HandedAppend> = turns
            .into_iter()
            .map(|turn| {
                let (append, blob) = turn.split();
                append.with_payload(layout.handed_blob(blob, carrier))
            })
            .collect();
        let (reply, answer) = oneshot::channel();
        match (carrier, carrier_put) {
            (Some(shard), Some(blobs)) => {
                let then = AfterPut::Append { appends, reply };
                self.send_put(usize::from(shard), blobs, then).await?;
            }
            (carrier, _) => {
                assert!(carrier.is_none(), "the carrier holds a blob of the plan");
                // No new blob: every turn's blob is known, and durable.
                let count = appends.len();
                let appends: Vec<TurnAppend> = appends
                    .into_iter()
                    .filter_map(|append| {
                        let (append, blob) = append.split();
                        match blob {
                            HandedBlob::Ready(blob) => Some(append.with_payload(blob)),
                            HandedBlob::InPut(_) => None,
                        }
                    })
                    .collect();
                assert_eq!(appends.len(), count, "no carrier, so no blob in a put");
                self.inner.sequencer.append(appends, reply).await;
            }
        }
        answer.await.map_err(|_| EngineError::ShutDown)?
    }

    /// Step 1: chunks whose manifest lies in another shard, durable before the plan's blobs go
    /// out (only with more than one shard).
    async fn put_chunks_first(&self, plan: &mut BlobPlan<'_>) -> Result<(), EngineError> {
        self.put_durably(&mut plan.chunks_first).await.map(drop)
    }

    /// Every shard's list as puts answered once durable, all sent before any is awaited.
    /// Returns the outcomes per shard in list order (a shard answers its puts in the order
    /// they were sent, so their outcomes, concatenated, are its list's).
    async fn put_durably(
        &self,
        lists: &mut [Vec<BlobPut>],
    ) -> Result<Vec<Vec<PutOutcome>>, EngineError> {
        let limits = &self.inner.config.limits;
        let mut answers = Vec::new();
        for (shard, blobs) in lists.iter_mut().enumerate() {
            let (puts, _) = split_puts(std::mem::take(blobs), limits);
            for blobs in puts {
                let (reply, answer) = oneshot::channel();
                self.send_put(shard, blobs, AfterPut::Durable(reply))
                    .await?;
                answers.push((shard, answer));
            }
        }
        let mut outcomes: Vec<Vec<PutOutcome>> = lists.iter().map(|_| Vec::new()).collect();
        for (shard, answer) in answers {
            outcomes[shard].extend(answer.await.map_err(|_| EngineError::ShutDown)??);
        }
        Ok(outcomes)
    }

    async fn send_put(
        &self,
        shard: usize,
        blobs: Vec<BlobPut>,
        then: AfterPut,
    ) -> Result<(), EngineError> {
        let request = ShardRequest::Put { blobs, then };
        (self.inner.shards[shard].send_async(request).await).map_err(|_| EngineError::ShutDown)
    }

    /// A new payload whose BLAKE3 is `hash` into `plan`, at its address in this handle's
    /// tenant: one record, or its new chunks and its manifest record. A
    /// client's frame is checked first (it inflates to the bytes its hash names) and kept as
    /// it came; over the chunk threshold its inflated bytes are chunked like any payload.
    fn plan_payload<'e>(
        &'e self,
        plan: &mut BlobPlan<'e>,
        hash: BlobHash,
        brought: Brought,
    ) -> Result<Planned, EngineError> {
        let refused = |error| match error {
            codec::DecodeError::Hash { actual } => EngineError::HashMismatch {
                what: "the payload inflated from the client's zstd frame".into(),
                claimed: hash,
                actual,
            },
            other => EngineError::InvalidArgument(format!(
                "the client's zstd frame for blob {hash}: {other}; send the payload \
                 uncompressed or as one zstd frame of exactly its bytes"
            )),
        };
        let blob = match brought {
            Brought::Raw(bytes) if self.is_chunked_len(bytes.len()) => {
                return self.plan_chunked(plan, hash, &bytes);
            }
            Brought::Raw(bytes) => {
                codec::encode(self.owner(), hash, &bytes, self.inner.config.zstd_level)
            }
            Brought::Zstd { raw_len, frame } if self.is_chunked_len(raw_len as usize) => {
                // The client's frame, checked against the hash it claims (not yet an address).
                let plain = Addressing::Plain;
                let bytes = codec::decode(&plain, &hash, Compression::Zstd, raw_len, frame);
                return self.plan_chunked(plan, hash, &bytes.map_err(refused)?);
            }
            Brought::Zstd { raw_len, frame } => {
                codec::encode_compressed(self.owner(), hash, raw_len, frame).map_err(refused)?
            }
        };
        Ok(plan.add(self.sealed(blob)?, false))
    }

    /// Stores a plan without turns: chunks first across shards, then every shard's blobs at
    /// once, each answered once durable. Returns the outcomes per shard, in plan order.
    pub(crate) async fn store_plan(
        &self,
        plan: &mut BlobPlan<'_>,
    ) -> Result<Vec<Vec<PutOutcome>>, EngineError> {
        self.put_chunks_first(plan).await?;
        self.put_durably(&mut plan.blobs).await
    }

    /// A new plan for this store's shards.
    pub(crate) fn blob_plan(&self) -> BlobPlan<'_> {
        BlobPlan::new(self.inner.published.shards.len())
    }

    /// Stores a payload without appending a turn (so that turns can reference it by hash).
    /// Returns its hash and whether it was already stored.
    pub async fn put_blob(&self, payload: Bytes) -> Result<(BlobHash, bool), EngineError> {
        self.check_open()?;
        self.inner.published.status.check_writable()?;
        let hash = BlobHash::of(&payload);
        let deduped = self.store_blob(hash, payload).await?;
        Ok((hash, deduped))
    }

    /// Makes the blob durable in its shard. Returns true if it was already stored.
    pub(crate) async fn store_blob(
        &self,
        hash: BlobHash,
        payload: Bytes,
    ) -> Result<bool, EngineError> {
        let stored = self.store_blobs(vec![(hash, payload)]).await?;
        Ok(stored.first().copied().unwrap_or(true))
    }

    /// Makes several blobs durable, one put per shard (the blobs of one shard join one group
    /// commit: one fdatasync, not one each). Returns, per blob, whether it was already stored.
    pub(crate) async fn store_blobs(
        &self,
        blobs: Vec<(BlobHash, Bytes)>,
    ) -> Result<Vec<bool>, EngineError> {
        let published = &self.inner.published;
        let mut plan = self.blob_plan();
        let mut places = Vec::with_capacity(blobs.len());
        for (hash, payload) in blobs {
            self.check_blob_len(payload.len())?;
            let address = self.address(hash);
            if published.shard_of(&address).contains(&address) {
                places.push(None);
                continue;
            }
            places.push(Some(self.plan_payload(
                &mut plan,
                hash,
                Brought::Raw(payload),
            )?));
        }
        let outcomes = self.store_plan(&mut plan).await?;
        drop(plan);
        Ok(places
            .into_iter()
            .map(|place| {
                place.is_none_or(|planned| {
                    outcomes[usize::from(planned.shard)][planned.index as usize]
                        == PutOutcome::AlreadyStored
                })
            })
            .collect())
    }

    pub(crate) fn check_blob_len(&self, len: usize) -> Result<(), EngineError> {
        let max = u64::from(self.inner.config.limits.blob_bytes_max);
        if len as u64 > max {
            return Err(EngineError::TooLarge {
                len: len as u64,
                max,
            });
        }
        Ok(())
    }

    /// The turns a context already has under every key of an append, from the published
    /// snapshot; `None` unless each turn has a key and each key a published turn.
    fn published_turns_by_key(
        &self,
        context_id: ContextId,
        hashed: &[(AppendRequest<()>, BlobHash, Option<Brought>)],
    ) -> Result<Option<Vec<Appended>>, EngineError> {
        let mut existing = Vec::with_capacity(hashed.len());
        for (append, hash, _) in hashed {
            match self.published_turn_by_key(context_id, &append.options)? {
                Some(turn) => existing.push(Appended {
                    deduped: {
                        let address = self.address(*hash);
                        self.inner.published.shard_of(&address).contains(&address)
                    },
                    ..turn
                }),
                None => return Ok(None),
            }
        }
        Ok(Some(existing))
    }

    /// The turn a context already has under an append's key, from the published snapshot.
    fn published_turn_by_key(
        &self,
        context_id: ContextId,
        options: &TurnOptions,
    ) -> Result<Option<Appended>, EngineError> {
        let Some(key) = options.key.as_deref().filter(|key| !key.is_empty()) else {
            return Ok(None);
        };
        let published = &self.inner.published;
        let snapshot = published.contexts.load();
        let turns = &published.turns;
        let found = crate::sequencer::owners::turn_by_key(&snapshot, context_id, key, &|id| {
            turns.turn_record(id)
        })?;
        // A collected turn's key answers nothing: the append stores a new turn.
        found
            .filter(|turn| !turns.is_dead(turn.turn_id))
            .map(|turn| {
                Ok(Appended {
                    extras: turns.extras(&turn)?,
                    turn: snapshot.overlays.view(&turn, None),
                    deduped: true,
                    existing: true,
                })
            })
            .transpose()
    }
}

/// Where an append's planned blobs went: each shard's puts (`split_puts` starts), and the
/// answers of those sent ahead of the carrier's last put, by (shard, put).
#[derive(Default)]
struct Layout {
    starts: Vec<Vec<u32>>,
    written: HashMap<(usize, usize), PutWritten>,
}

impl Layout {
    /// A turn's blob as the carrier hands it on: ready, in the carrier's last put, or written
    /// by a put sent ahead (pending in that put's shard batch).
    fn handed_blob(&self, blob: PlannedBlob, carrier: Option<u16>) -> HandedBlob {
        let (planned, hash, raw_len) = match blob {
            PlannedBlob::Ready(blob) => return HandedBlob::Ready(blob),
            PlannedBlob::Planned {
                planned,
                hash,
                raw_len,
            } => (planned, hash, raw_len),
        };
        let shard = usize::from(planned.shard);
        let (put, index) = locate(&self.starts[shard], planned.index);
        let Some(written) = self.written.get(&(shard, put)) else {
            // Not sent ahead: the carrier's last put.
            assert_eq!(
                Some(planned.shard),
                carrier,
                "a put not sent ahead is the carrier's"
            );
            return HandedBlob::InPut(index);
        };
        let outcome = written.outcomes.get(index as usize);
        assert!(outcome.is_some(), "a put answers each of its blobs");
        HandedBlob::Ready(TurnBlob {
            hash,
            raw_len,
            deduped: outcome == Some(&PutOutcome::AlreadyStored),
            by_hash: false,
            pending: written.pending,
        })
    }
}

fn too_many_turns() -> EngineError {
    EngineError::Limit {
        what: "turns per batch append (1..=64)",
        limit: APPEND_BATCH_TURNS_MAX,
    }
}
