//! A replica generation's start (issue 46 item 8): the ids the new primary hands out begin
//! past every one the old primary may have acknowledged without shipping it. TurnIDs (record
//! ids) jump to `records_floor`, which a `turns.base` standing for the slots below it makes
//! durable (`Collector::raise_record_floor`, written first); ContextIDs up to
//! `contexts_floor - 1` are taken by one `SkipContexts` record and read as deleted contexts.
//! Both only rise; a floor already reached is left as it is, so a start retried after a crash
//! raises nothing twice.

use std::sync::atomic::Ordering;

use crate::error::EngineError;
use crate::format::context_meta::ContextMeta;
use crate::format::turn_log::record_offset;
use crate::ids::{CONTEXTS_MAX, ContextId};
use crate::sequencer::actor::SequencerActor;
use crate::status::{IDS_UNSHIPPED_CONTEXTS_MAX, IDS_UNSHIPPED_RECORDS_MAX};
use crate::store_dir::now_unix_ms;

impl SequencerActor {
    /// Whether a write may take new ids: the store is writable and, with a replica, the next
    /// record id (and, for `creates_context`, the next ContextID) is within the bound past
    /// the replica's newest point (`engine/id_floors.rs`).
    pub(super) fn check_takes_ids(&self, creates_context: bool) -> Result<(), EngineError> {
        self.published.status.check_writable()?;
        let shipped = &self.published.status.shipped;
        let records = shipped.records.load(Ordering::Acquire);
        let contexts = shipped.contexts.load(Ordering::Acquire);
        let records_over = self.next_record_id > records.saturating_add(IDS_UNSHIPPED_RECORDS_MAX);
        let contexts_over = creates_context
            && self.heads.count() >= contexts.saturating_add(IDS_UNSHIPPED_CONTEXTS_MAX);
        if records_over || contexts_over {
            let (what, next, shipped, max) = if records_over {
                (
                    "record ids",
                    self.next_record_id,
                    records,
                    IDS_UNSHIPPED_RECORDS_MAX,
                )
            } else {
                (
                    "ContextIDs",
                    self.heads.count() + 1,
                    contexts,
                    IDS_UNSHIPPED_CONTEXTS_MAX,
                )
            };
            return Err(EngineError::Unshipped(format!(
                "the replica holds {what} up to {shipped} and this primary hands out at most \
                 {max} past its newest point (the next is {next}), so that a new generation \
                 never hands one out again; retry once more has shipped (ctxstore stats: \
                 replication)"
            )));
        }
        Ok(())
    }

    pub(super) fn raise_floors(
        &mut self,
        records_floor: u64,
        contexts_floor: u64,
    ) -> Result<(), EngineError> {
        if self.batch.records > 0 {
            return Err(EngineError::InvalidArgument(
                "ids are raised only while the store takes no writes, and records are in \
                 flight"
                    .into(),
            ));
        }
        if records_floor > self.next_record_id {
            let through = self.published.turns.base().map_or(0, |base| base.through());
            if through + 1 < records_floor {
                return Err(EngineError::InvalidArgument(format!(
                    "turns.base stands for records up to {through}: the record floor \
                     {records_floor} needs one through {} first",
                    records_floor - 1
                )));
            }
            assert_eq!(
                self.published.turns.durable_record_id(),
                self.next_record_id - 1,
                "no batch in flight"
            );
            self.next_record_id = records_floor;
            // Zeros (a hole) up to the new end: the next batch is written there.
            self.prepared_end = self.prepared_end.max(record_offset(records_floor));
            self.published.turns.publish(records_floor - 1);
        }
        let skip_through = contexts_floor.saturating_sub(1);
        if skip_through > self.heads.count() {
            if skip_through >= CONTEXTS_MAX {
                return Err(EngineError::InvalidArgument(format!(
                    "a context floor of {contexts_floor} leaves no ContextID (at most \
                     {CONTEXTS_MAX})"
                )));
            }
            let now = now_unix_ms();
            let last = ContextId(skip_through);
            self.heads.skip_through(last);
            self.contexts.skip_through(last, now);
            self.push_meta(last, &ContextMeta::SkipContexts, now);
        }
        Ok(())
    }
}
