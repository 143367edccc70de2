//! The mark (decision 0011): what the live contexts reach, from their roots.

use std::collections::HashSet;

use crate::error::EngineError;
use crate::format::turn_log::LogRecord;
use crate::gc::log_table::LogTable;
use crate::ids::{BlobHash, BlobHashBuildHasher, ContextId, TurnId};
use crate::published::Published;
use crate::sequencer::contexts::Contexts;
use crate::sequencer::dead::DeadTurns;
use crate::sequencer::owners;

/// What the live contexts reach.
pub(super) struct Marked {
    /// Per record id: the lowest floor it was reached with (`u32::MAX`: not reached). A turn
    /// reached with floor f has every ancestor at depth ≥ f reached too.
    pub floor: Vec<u32>,
    /// Per record id: a live context owns the turn (its own turns, a clone's inherited ones, a
    /// fork's base), reached or not (below its floor): its record must stay for the context's
    /// turn log and for replay (log compaction).
    pub owned: Vec<bool>,
    pub live_blobs: HashSet<BlobHash, BlobHashBuildHasher>,
}

impl Marked {
    pub fn is_live(&self, record_id: u64) -> bool {
        self.floor[record_id as usize] != u32::MAX
    }
}

/// Marks from the roots (decision 0011): each live context's head chain and every turn it
/// owns (`sequencer/owners.rs`: its own turns on every branch, what it inherited through
/// clones and forks) at or above its floor, with their ancestors down to that floor; every
/// link of a live turn with the linked turn's whole history; live contexts' key-value values;
/// the payloads, patches and vectors of live turns that are not redacted (decision 0012).
/// What a live context's key-value entries name: each value and its vectors.
fn kv_blobs(info: &crate::sequencer::contexts::ContextInfo) -> impl Iterator<Item = BlobHash> + '_ {
    info.kv.values().flat_map(|value| {
        std::iter::once(value.hash).chain(value.vectors.map(|vectors| vectors.hash))
    })
}

pub(super) fn mark(
    log: &LogTable,
    contexts: &Contexts,
    dead: &DeadTurns,
    published: &Published,
) -> Result<Marked, EngineError> {
    let mut floors = vec![u32::MAX; log.context.len()];
    let mut owned = vec![false; log.context.len()];
    let mut own = |turn: u64| {
        if let Some(slot) = owned.get_mut(turn as usize) {
            *slot = true;
        }
    };
    let chain =
        |start: u64, floor: u32, floors: &mut Vec<u32>| mark_chain(log, dead, start, floor, floors);
    let mut live_blobs: HashSet<BlobHash, BlobHashBuildHasher> = HashSet::default();
    // Fork bases are read as records: a base below its fork's floor may be collected, and
    // the walk only needs where it sits.
    let lookup = |id: TurnId| match published.turns.record(id.0)? {
        Some(LogRecord::Turn(turn)) => Ok(turn),
        _ => Err(EngineError::TurnNotFound(id)),
    };
    for context_id in 1..=contexts.count() {
        let Some(info) = contexts.get(ContextId(context_id)) else {
            continue;
        };
        if info.deleted {
            continue;
        }
        live_blobs.extend(kv_blobs(info));
        let floor = info.floor_depth;
        if let Some(&head) = log.heads.get(&context_id) {
            own(head);
            chain(head, floor, &mut floors);
        }
        // Past a fork, what is inherited is the base's chain only (marked from its tip);
        // the owners further on are still walked by readers (the turn log goes through each
        // owner's own turns up to its bound, key look-ups try them), so their records stay.
        let mut past_fork = false;
        owners::walk_owners(contexts, ContextId(context_id), &lookup, |step| {
            let own_turns = log.by_context.get(&step.owner.0).map_or(&[][..], |turns| {
                let end = turns.partition_point(|&turn| turn <= step.upto.0);
                &turns[..end]
            });
            for &turn in own_turns {
                own(turn);
            }
            if let Some(tip) = step.chain {
                own(tip.turn_id.0);
            }
            if past_fork {
                return Ok(false);
            }
            if let Some(tip) = step.chain {
                chain(tip.turn_id.0, floor, &mut floors);
                past_fork = true;
                return Ok(false);
            }
            for &turn in own_turns {
                chain(turn, floor, &mut floors);
            }
            Ok(false)
        })?;
    }
    mark_links(log, dead, &mut floors);
    // A live turn's payload and every patch (a read `as_of` an older overlay reads them);
    // nothing of a redacted one (decision 0012: its bytes go unless another turn names them).
    for (id, floor) in floors.iter().enumerate() {
        if *floor == u32::MAX {
            continue;
        }
        if let Some(patches) = contexts.overlays.patch_blobs(TurnId(id as u64)) {
            live_blobs.insert(log.hash[id]);
            live_blobs.extend(patches);
            live_blobs.extend(log.vectors.get(&(id as u64)).copied());
        }
    }
    Ok(Marked {
        floor: floors,
        owned,
        live_blobs,
    })
}

/// Marks `start` and its ancestors down to `floor` (a turn's mark is the lowest floor it was
/// reached with); whether it marked any turn.
fn mark_chain(
    log: &LogTable,
    dead: &DeadTurns,
    start: u64,
    floor: u32,
    floors: &mut [u32],
) -> bool {
    let mut turn = start;
    let mut marked = false;
    while turn != 0 && (turn as usize) < floors.len() {
        let id = turn as usize;
        // A collected turn ends the history (a fork or link made after a collection
        // reaches only what is left of it).
        if log.context[id] == 0
            || log.depth[id] < floor
            || floors[id] <= floor
            || dead.contains(TurnId(turn))
        {
            break;
        }
        floors[id] = floor;
        marked = true;
        turn = log.parent[id];
    }
    marked
}

/// Links reach another history whole; a newly live turn may link further: to a fixpoint.
fn mark_links(log: &LogTable, dead: &DeadTurns, floors: &mut [u32]) {
    loop {
        let mut more = false;
        for (turn, targets) in &log.links {
            if floors[*turn as usize] == u32::MAX {
                continue;
            }
            for target in targets {
                more |= mark_chain(log, dead, target.0, 0, floors);
            }
        }
        if !more {
            break;
        }
    }
}
