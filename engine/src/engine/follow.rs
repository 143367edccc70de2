//! A standby's side of the engine (issue 31): the store opened with `EngineConfig::follower`
//! takes its history from a replica, through the actors that own it (single writer), and
//! refuses every write until it is promoted. `ctxstore-replica`'s follower drives it: per
//! segment, first the pack bytes (`ingest_pack`: written, synced, indexed and published by the
//! shard), then the `turns.log` slots naming them (`ingest_log`: written, synced, replayed and
//! published by the sequencer as one batch), so a reader never sees a turn whose blob it
//! cannot read.
//!
//! The primary's side of the same roles is here too: whether it takes writes, its fence, and
//! its ack gate (decision 0031 §6, `status.rs` `AckGate`): the lease thread's and the
//! shipper's deadlines on the boot clock (`crate::clock::boot_now_ns`), the gate closed for
//! good at a stop, and what ROLE and the server's last check before the socket read of it.

use crate::engine::Engine;
use crate::error::EngineError;
use crate::model::{IngestedLog, IngestedPack};
use crate::pipeline::{IngestPack, SequencerRequest, ShardRequest};

/// Where a standby's store ends: the next record and each shard's open pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowPosition {
    /// Records `1..=log_records` are durable (and published).
    pub log_records: u64,
    /// Per shard: the open pack and where its records end.
    pub shards: Vec<(u32, u64)>,
}

impl Engine {
    /// Whether the store is a standby that has not been promoted.
    pub fn is_following(&self) -> bool {
        self.inner.published.status.is_following()
    }

    /// Whether the store takes writes now: not a standby, not fenced, no failed fdatasync
    /// (ROLE's `accepts_writes`, decision 0031).
    pub fn accepts_writes(&self) -> bool {
        self.inner.published.status.accepts_writes()
    }

    /// The message every refused write carries from now on (where the primary is).
    pub fn set_follow_reason(&self, reason: String) {
        if self.is_following() {
            self.inner.published.status.set_following(reason);
        }
    }

    /// Promotion: the store accepts writes from now on. The caller (the server) first applied
    /// what it could of the replica and took the epoch that fences the old primary.
    pub fn promote(&self) {
        self.inner.published.status.leave_follower();
        self.inner.published.keys.lead();
        if self.inner.published.keys.seals() {
            // A primary's keys from now on: every tenant (the operator too) has its own, and
            // the meta file says the store seals. A failure here refuses those tenants' writes
            // (nothing is written in plain text); the log says why.
            let published = &self.inner.published;
            let store = crate::store_dir::StoreDir::new(&self.inner.config.data_dir);
            let given = crate::engine::give_registered_keys(&published.keys, published)
                .and_then(|()| crate::engine::mark_sealing(&store));
            if let Err(error) = given {
                tracing::error!(%error, "promoted, but the keys of its tenants are not all written");
            }
        }
        tracing::info!(data = %self.inner.config.data_dir.display(), "promoted: the store takes writes");
    }

    /// A standby's keys (decision 0032 §5): the replica's `keyring` object, its primary's,
    /// replaces this store's keyring once it opens under this store's master key (written
    /// durably first). The follower installs it after it lists segments and before it applies
    /// them: the primary replaces the object before it ships anything sealed under a new key,
    /// so every segment applied finds its keys. Answers whether the keyring changed.
    pub fn install_keyring(&self, bytes: &[u8]) -> Result<bool, EngineError> {
        self.inner.published.keys.install(bytes)
    }

    /// Fencing (issue 46): another primary took the replica's prefix with a later epoch, or
    /// this one stepped down for another to take it (its store failed), so this store refuses
    /// every write from now on with `reason` (which names the new holder, or says where to
    /// go) as NOT_PRIMARY; reads go on. Nothing lifts it but a restart, which the operator
    /// must not do with `--replicate-to` on the same prefix unless this server should take it
    /// back.
    pub fn fence(&self, reason: String) {
        self.inner.published.status.set_fenced(reason);
    }

    /// Why this store failed for good (a failed fdatasync: the kernel may have dropped dirty
    /// pages, so no later write can be trusted; read-only until restart), or `None`. A primary
    /// with a lease steps down on it (`ctxstore_replica`'s shipper): it can never acknowledge
    /// again, and holding the lease would keep every standby from taking over.
    pub fn store_failed(&self) -> Option<String> {
        self.inner.published.status.failed()
    }

    /// The lease thread's deadline (decision 0031 §5–6): acknowledgements close at `boot_ns`
    /// on the boot clock (`clock::boot_now_ns`): its last successful renewal's *send* time
    /// plus L − m. Stored as given, so a later call may move it back; 0 closes the gate until
    /// the next call (the lease not held yet, or lost), `u64::MAX` lifts the deadline (no
    /// lease: the default, today's behaviour). Cheap (one atomic store): call it after every
    /// renewal.
    pub fn set_lease_until(&self, boot_ns: u64) {
        self.inner.published.status.gate.set_lease_until(boot_ns);
    }

    /// The shipper's deadline (decision 0031 §6, §9): acknowledgements close at `boot_ns` on
    /// the boot clock: the boot time of the newest cut shipped whole (taken when the cut was
    /// held) plus L − m. Forward only: a deadline earlier than the one set is ignored. The
    /// default (no deadline) lasts until the first call, so a shipper with a lease arms it at
    /// its start (its start time plus L − m) lest a shipper that never ships keep the gate
    /// open on the lease alone.
    pub fn set_shipped_until(&self, boot_ns: u64) {
        self.inner.published.status.gate.set_shipped_until(boot_ns);
    }

    /// Closes the ack gate for good (a stopping server, before its last cut ships and its
    /// lease is released): every write is refused with `NotPrimary(reason)` from now on, and
    /// a batch in flight is answered `Unconfirmed`; reads go on. No later deadline opens it;
    /// only a restart does. The first reason stays.
    pub fn close_gate(&self, reason: String) {
        self.inner.published.status.gate.close(reason);
    }

    /// Whether acknowledgements are open now: the ack gate open (both deadlines ahead on the
    /// boot clock, not closed for good) and no fence. Without a lease, always but for a fence;
    /// one vDSO clock read and a few atomic loads with one. Not whether a write would be
    /// admitted (`accepts_writes` also counts a standby and a failed fdatasync).
    pub fn gate_open(&self) -> bool {
        self.inner.published.status.acks_open()
    }

    /// The server's last check before it sends a write's success (decision 0031 §6, after a
    /// remote wait too): `Ok` while acknowledgements are open, else `EngineError::Unconfirmed`
    /// saying why (the write is durable here, but not acknowledged).
    pub fn check_acks_open(&self) -> Result<(), EngineError> {
        match self.inner.published.status.acks_closed() {
            Some(reason) => Err(EngineError::Unconfirmed(reason)),
            None => Ok(()),
        }
    }

    /// Milliseconds acknowledgements stay open without another renewal or cut shipped (ROLE's
    /// `ack_open_ms`, rounded up): `None` without a deadline (no lease; ROLE sends 0),
    /// `Some(0)` once the gate is closed or the primary fenced.
    pub fn ack_open_ms_left(&self) -> Option<u64> {
        self.inner.published.status.ack_open_ms_left()
    }

    /// Where the store ends (between two batches of every actor).
    pub fn follow_position(&self) -> Result<FollowPosition, EngineError> {
        let cut = self.cut_now()?;
        Ok(FollowPosition {
            log_records: cut.log_records,
            shards: cut
                .shards
                .iter()
                .map(|shard| (shard.pack_id, shard.pack_end))
                .collect(),
        })
    }

    /// The primary's bytes of pack `pack_id` of `shard` at `offset` (see `ShardRequest::Ingest`).
    pub async fn ingest_pack(
        &self,
        shard: u16,
        pack_id: u32,
        offset: u64,
        bytes: Vec<u8>,
        whole: bool,
    ) -> Result<IngestedPack, EngineError> {
        self.send_ingest(
            shard,
            IngestPack {
                pack_id,
                offset,
                bytes,
                whole,
                install: false,
            },
        )
        .await
    }

    /// A sealed pack's new version that a collection on the primary produced (`bytes`, whole),
    /// installed over this standby's version by its shard, the way a compaction is: the new
    /// file renamed in under the REINDEX marker, the index rewritten, the blobs it dropped out
    /// of the view (decision 0019). Call it after the log slots of the cut that shipped it were
    /// ingested, so that every turn naming a dropped blob is dead (or redacted) by then.
    pub async fn install_pack(
        &self,
        shard: u16,
        pack_id: u32,
        bytes: Vec<u8>,
    ) -> Result<IngestedPack, EngineError> {
        self.send_ingest(
            shard,
            IngestPack {
                pack_id,
                offset: 0,
                bytes,
                whole: true,
                install: true,
            },
        )
        .await
    }

    async fn send_ingest(&self, shard: u16, pack: IngestPack) -> Result<IngestedPack, EngineError> {
        let sender = self.inner.shards.get(usize::from(shard)).ok_or_else(|| {
            EngineError::InvalidArgument(format!(
                "shard {shard} does not exist (the store has {})",
                self.inner.shards.len()
            ))
        })?;
        let (reply, answer) = oneshot::channel();
        sender
            .send_async(ShardRequest::Ingest { pack, reply })
            .await
            .map_err(|_| EngineError::ShutDown)?;
        answer.await.map_err(|_| EngineError::ShutDown)?
    }

    /// The primary's `turns.log` slots from record `first_record_id` on, whole records (see
    /// `SequencerRequest::Ingest`).
    pub async fn ingest_log(
        &self,
        first_record_id: u64,
        slots: Vec<u8>,
    ) -> Result<IngestedLog, EngineError> {
        let (reply, answer) = oneshot::channel();
        let request = SequencerRequest::Ingest {
            first_record_id,
            slots,
            reply,
        };
        self.inner
            .sequencer
            .0
            .send_async(request)
            .await
            .map_err(|_| EngineError::ShutDown)?;
        answer.await.map_err(|_| EngineError::ShutDown)?
    }
}
