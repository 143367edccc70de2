//! Ids that stay unique across replica generations (issue 46 item 8). A primary acknowledges
//! writes before they ship, so when its host dies and a restore or a promotion starts a new
//! generation from the replica's newest point, the ids it handed out after that point are
//! lost with it, and the new primary would hand them out again: a client's next append to
//! "its" context 2 would land in someone else's. Two halves close it:
//!
//! - **A bound.** A primary with a replica hands out no TurnID (record id) more than
//!   `IDS_UNSHIPPED_RECORDS_MAX` past the last point the replica holds, and no ContextID more
//!   than `IDS_UNSHIPPED_CONTEXTS_MAX` past it (`set_shipped_ids`, told by the replicator after
//!   each stored segment); past either, writes that take new ids answer READ_ONLY (reads go
//!   on) until more has shipped.
//! - **A skip.** A new generation raises its floors (`raise_id_floors`) to twice the bound
//!   past the newest point of every generation of the replica (the second half covers the
//!   requests admitted while the bound was reached): TurnIDs through a `turns.base` that
//!   stands for the slots below the floor, ContextIDs through one `SkipContexts` record.
//!
//! The price: a generation's start costs `IDS_GENERATION_SKIP_RECORDS` record ids (a hole in
//! `turns.log`, no bytes) and `IDS_GENERATION_SKIP_CONTEXTS` ContextIDs (deleted contexts:
//! about 200 bytes of memory each), and the collector's per-record arrays span the skipped
//! ids too.

use std::sync::atomic::Ordering;

use crate::engine::Engine;
use crate::error::EngineError;
use crate::pipeline::SequencerRequest;

pub use crate::status::{
    IDS_GENERATION_SKIP_CONTEXTS, IDS_GENERATION_SKIP_RECORDS, IDS_UNSHIPPED_CONTEXTS_MAX,
    IDS_UNSHIPPED_RECORDS_MAX,
};

/// The next ids a store hands out: record (TurnID) `records` and ContextID `contexts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IdFloors {
    pub records: u64,
    pub contexts: u64,
}

impl IdFloors {
    /// The floors of a generation that starts after a point holding records `1..=records`
    /// and contexts `1..=contexts`, of which a primary may have handed out up to the bound
    /// more without shipping them.
    pub fn past(records: u64, contexts: u64) -> IdFloors {
        IdFloors {
            records: records.saturating_add(IDS_GENERATION_SKIP_RECORDS + 1),
            contexts: contexts.saturating_add(IDS_GENERATION_SKIP_CONTEXTS + 1),
        }
    }

    pub fn max(self, other: IdFloors) -> IdFloors {
        IdFloors {
            records: self.records.max(other.records),
            contexts: self.contexts.max(other.contexts),
        }
    }
}

impl Engine {
    /// The next record id and ContextID this store hands out (as of the last published batch).
    pub fn id_floors(&self) -> IdFloors {
        let published = &self.inner.published;
        IdFloors {
            records: published.turns.durable_record_id() + 1,
            contexts: published.heads.contexts_published() + 1,
        }
    }

    /// The replica holds records `1..=records` and contexts `1..=contexts` of this store: the
    /// sequencer hands out ids up to the bound past them (see the module doc).
    pub fn set_shipped_ids(&self, records: u64, contexts: u64) {
        let shipped = &self.inner.published.status.shipped;
        shipped.records.store(records, Ordering::Release);
        shipped.contexts.store(contexts, Ordering::Release);
    }

    /// A new generation starts: the next ids are at least `floors` (see the module doc). Only
    /// while the store takes no writes: a standby about to be promoted, a restored store
    /// before it serves. Blocking file I/O (the log's prefix becomes a new `turns.base`)
    /// before the sequencer's durable record.
    pub async fn raise_id_floors(&self, floors: IdFloors) -> Result<(), EngineError> {
        self.check_open()?;
        if floors.records > 1 {
            self.inner
                .collector
                .raise_record_floor(floors.records - 1)?;
        }
        let (reply, answer) = oneshot::channel();
        let request = SequencerRequest::RaiseFloors {
            records_floor: floors.records,
            contexts_floor: floors.contexts,
            reply,
        };
        (self.inner.sequencer.0.send_async(request).await).map_err(|_| EngineError::ShutDown)?;
        answer.await.map_err(|_| EngineError::ShutDown)??;
        let now = self.id_floors();
        assert!(
            now.records >= floors.records && now.contexts >= floors.contexts,
            "the floors were raised: {now:?} for {floors:?}"
        );
        tracing::info!(
            records = now.records,
            contexts = now.contexts,
            "ids of this generation start past every one the replica's points may have led to"
        );
        Ok(())
    }
}
