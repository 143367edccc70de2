//! Log planning (decision 0011): which collected turns' records leave `turns.log` — the keep
//! rules to a fixpoint — and the round's last step, the log compaction itself
//! (`log_compaction.rs`), once the dropped slots pass the thresholds.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use crate::error::EngineError;
use crate::file::Throttle;
use crate::format::turn_log::LOG_RECORD_BYTES;
use crate::gc::Collector;
use crate::gc::log_table::LogTable;
use crate::gc::mark::Marked;
use crate::ids::TurnId;
use crate::log_compaction::{LogCompacted, LogPlan, compact_log};
use crate::model::GcReport;

impl Collector {
    /// The round's last step (`log_compaction.rs`): the records of collected turns that no
    /// record that stays needs leave `turns.log`, once they pass the thresholds. Runs after
    /// the fence, so the durable dead set holds this round's turns too.
    pub(super) fn compact_log(
        &self,
        log: &LogTable,
        marked: &Marked,
        watermark: u64,
        report: &mut GcReport,
    ) -> Result<(), EngineError> {
        let Some(plan) = self.plan_log(log, marked, watermark) else {
            return Ok(());
        };
        let compacted = self.compact_log_by(&plan)?;
        tracing::info!(
            watermark,
            turns_dropped = plan.turns_dropped,
            slots_dropped = compacted.slots_dropped,
            bytes_reclaimed = compacted.bytes_reclaimed,
            punched = compacted.punched,
            "turns.log compacted"
        );
        report.log_bytes_reclaimed += compacted.bytes_reclaimed;
        report.bytes_reclaimed += compacted.bytes_reclaimed;
        Ok(())
    }

    /// Which turn records go: collected (durable gc-dead), not owned by a live context, no
    /// ancestor of a record that stays, and newer than every record of its context that
    /// stays (a fork made later of a turn walks its context's turns before it: the turn
    /// log, key look-ups). `None` below the thresholds.
    ///
    /// Only records up to the replicator's limit go (`log_compaction_limit`, a batch
    /// boundary: the end of a cut it shipped whole). A base covering records the replica
    /// does not hold as slots yet shipped them only inside the base, and a standby, which
    /// takes the log slot by slot, met slots that did not follow its log and stalled
    /// (issue 46). What the records above the limit need stays, as every record that stays
    /// does.
    fn plan_log(&self, log: &LogTable, marked: &Marked, watermark: u64) -> Option<LogPlan> {
        let through = self.published.turns.base().map_or(0, |base| base.through());
        let watermark = watermark.min(self.log_compaction_limit.load(Ordering::Acquire));
        if watermark <= through {
            return None;
        }
        let dead = self.published.turns.dead();
        let slots = log.context.len();
        // Every turn above the (limited) watermark stays in turns.log, dead or not: what it
        // names must stay too (issue 46: a dead turn above the replicator's limit kept its
        // record while its dropped parent left the base, and no store opened from there).
        let mut needed: Vec<bool> = (0..slots)
            .map(|id| {
                log.is_turn(id as u64)
                    && (id as u64 > watermark
                        || marked.owned[id]
                        || marked.is_live(id as u64)
                        || !dead.contains(TurnId(id as u64)))
            })
            .collect();
        close_needed(log, &mut needed);
        let mut plan = LogPlan {
            watermark,
            through: watermark,
            drop: vec![false; slots],
            turns_dropped: 0,
            logical_bytes_dropped: 0,
        };
        let mut slots_dropped = 0u64;
        for (id, needed) in needed.iter().enumerate().skip(1) {
            if id as u64 > watermark {
                break;
            }
            if log.is_turn(id as u64) && !needed {
                plan.drop[id] = true;
                plan.turns_dropped += 1;
                plan.logical_bytes_dropped += u64::from(log.payload_len[id]);
                slots_dropped += 1 + u64::from(log.extra_slots[id]);
            }
        }
        // An ended stream's records (issue 32): its bytes live on in its sealed turn's blob, or
        // nowhere (aborted). All of them or none: a stream whose last slot is above the
        // watermark keeps every record.
        let mut stream_ends: HashMap<u64, u64> = HashMap::new();
        for &(record_id, stream_id, slots) in &log.stream_records {
            let end = stream_ends.entry(stream_id).or_default();
            *end = (*end).max(record_id + u64::from(slots) - 1);
        }
        for &(record_id, stream_id, slots) in &log.stream_records {
            if log.streams_ended.contains(&stream_id)
                && stream_ends
                    .get(&stream_id)
                    .is_some_and(|&end| end <= watermark)
            {
                plan.drop[record_id as usize] = true;
                slots_dropped += u64::from(slots);
            }
        }
        let due = slots_dropped > 0
            && slots_dropped * LOG_RECORD_BYTES as u64 >= self.log_dead_bytes_min
            && slots_dropped * 100 >= u64::from(self.pack_dead_percent) * log.slots_present;
        due.then_some(plan)
    }
}

impl Collector {
    /// Moves every slot of `turns.log` up to `through` (at most the replicator's limit and the
    /// durable watermark, a batch boundary) into a new `turns.base`, dropping nothing: the
    /// replicator asks for it so that its next checkpoint names one new object for the log's
    /// prefix instead of the old segments that shipped it, which retention may then delete
    /// with whatever else they hold (purged bytes among them; issue 46 item 9). Waits for a
    /// running round. Answers whether it wrote a base (`false`: the base reaches that far).
    pub fn rebase_log(&self, through: u64) -> Result<bool, EngineError> {
        let _round = self.one_round()?;
        // Not the ack gate: the shipper rebases while a lapsed shipping deadline keeps the
        // gate closed, and its next cut is what opens it again.
        self.published.status.check_store_writable()?;
        let base_through = self.published.turns.base().map_or(0, |base| base.through());
        let watermark = through
            .min(self.published.turns.durable_record_id())
            .min(self.log_compaction_limit.load(Ordering::Acquire));
        if watermark <= base_through {
            return Ok(false);
        }
        let plan = LogPlan {
            watermark,
            through: watermark,
            drop: vec![false; watermark as usize + 1],
            turns_dropped: 0,
            logical_bytes_dropped: 0,
        };
        self.compact_log_by(&plan)?;
        tracing::info!(watermark, "turns.log rebased for the replica");
        Ok(true)
    }

    /// A replica generation starts (issue 46 item 8): every slot of `turns.log` moves into a
    /// new `turns.base` that stands for slots `1..=through`, so that the next record's id is
    /// `through + 1` (the sequencer jumps there next, `SequencerActor::raise_floors`) and no
    /// TurnID the old primary may have acknowledged without shipping it is handed out again.
    /// Dropping nothing. Called while the store takes no writes (a standby being promoted, a
    /// restored store before its first primary); a standby's copy of its primary's jump too.
    /// Answers whether it wrote a base (`false`: the base reaches that far already).
    pub fn raise_record_floor(&self, through: u64) -> Result<bool, EngineError> {
        let _round = self.one_round()?;
        let base_through = self.published.turns.base().map_or(0, |base| base.through());
        let watermark = self.published.turns.durable_record_id();
        if through <= base_through.max(watermark) {
            return Ok(false);
        }
        let plan = LogPlan {
            watermark: watermark.max(base_through),
            through,
            drop: Vec::new(),
            turns_dropped: 0,
            logical_bytes_dropped: 0,
        };
        self.compact_log_by(&plan)?;
        tracing::info!(
            watermark,
            through,
            "turns.log rebased past its end: TurnIDs of this generation start after it"
        );
        Ok(true)
    }

    /// `plan` carried out (`log_compaction.rs`), throttled as a round's copies are; its
    /// switch-over under the maintenance lock alone.
    fn compact_log_by(&self, plan: &LogPlan) -> Result<LogCompacted, EngineError> {
        let mut throttle = Throttle::new(self.bytes_per_s_max);
        compact_log(
            &self.store,
            &self.published.turns,
            plan,
            &mut throttle,
            &self.stopping,
            || self.exclusive(),
        )
    }
}

/// Grows `needed` to a fixpoint: ancestors, then each context's turns before its newest that
/// stays (which may name further ancestors). Each pass only adds.
fn close_needed(log: &LogTable, needed: &mut [bool]) {
    let slots = needed.len();
    let mut newest_needed: HashMap<u64, u64> = HashMap::new();
    loop {
        // Children before parents (a parent's id is lower).
        for id in (1..slots).rev() {
            if needed[id] {
                let parent = log.parent[id] as usize;
                assert!(parent < id, "a parent precedes its child");
                needed[parent] = log.is_turn(parent as u64) || needed[parent];
            }
        }
        let mut grown = false;
        for (context, turns) in &log.by_context {
            let newest = turns
                .iter()
                .rev()
                .find(|&&turn| needed[turn as usize])
                .copied()
                .unwrap_or(0);
            if newest_needed.get(context).copied().unwrap_or(0) >= newest {
                continue;
            }
            newest_needed.insert(*context, newest);
            for &turn in turns.iter().take_while(|&&turn| turn <= newest) {
                grown |= !needed[turn as usize];
                needed[turn as usize] = true;
            }
        }
        if !grown {
            break;
        }
    }
}
