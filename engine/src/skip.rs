//! Skip pointers: depth access in O(log n) on parent-pointer chains (Bitcoin Core's `pskip`,
//! `chain.cpp` `GetSkipHeight` / `GetAncestor`).
//!
//! Every turn at depth ≥ 1 records `skip_turn_id`: its ancestor at depth `skip_depth(depth)`.
//! The depths are chosen so that any ancestor is reached in O(log n) steps (simulated: at most
//! 97 steps anywhere in a chain of 2^18, 6–20 typically; computing a new turn's skip pointer
//! from its parent takes 3 steps on average, 18 at most). No I/O here: callers bring the
//! look-up (the sequencer reads its batch and the durable log; readers the durable log;
//! migration and verify an in-memory table).

use crate::format::turn_log::TurnRecord;
use crate::ids::TurnId;

/// `n` with its lowest set bit cleared.
fn clear_lowest_one(n: u32) -> u32 {
    n & n.wrapping_sub(1)
}

/// The depth a turn at `depth` skips back to (always below `depth`; 0 for depths 0 and 1).
pub fn skip_depth(depth: u32) -> u32 {
    if depth < 2 {
        return 0;
    }
    if depth & 1 == 1 {
        clear_lowest_one(clear_lowest_one(depth - 1)) + 1
    } else {
        clear_lowest_one(depth)
    }
}

/// The ancestor of `start` at `depth` (`start` itself at its own depth), following skip
/// pointers where they do not overshoot and parents otherwise. `lookup` reads a turn by id.
/// Every step is checked against the DAG rule (a pair assertion of the append path): a
/// parent is one shallower, a skip target at exactly `skip_depth`.
///
/// A turn without a skip pointer (a record of store format 1 read by `verify` before
/// migration) is walked by its parent.
pub fn ancestor<E>(
    start: Links,
    depth: u32,
    mut lookup: impl FnMut(TurnId) -> Result<Links, E>,
) -> Result<Links, E> {
    assert!(
        depth <= start.depth,
        "ancestor at depth {depth} of turn {} at depth {}",
        start.turn_id,
        start.depth
    );
    let mut walk = start;
    while walk.depth > depth {
        let skip = skip_depth(walk.depth);
        let skip_of_parent = skip_depth(walk.depth - 1);
        // Bitcoin Core's rule: take the skip pointer unless the parent's skip pointer gets
        // to the target in fewer steps.
        let take_skip = !walk.skip_turn_id.is_none()
            && (skip == depth
                || (skip > depth && !(skip_of_parent + 2 < skip && skip_of_parent >= depth)));
        if take_skip {
            let target = lookup(walk.skip_turn_id)?;
            assert_eq!(
                target.depth, skip,
                "turn {}: skip target {} is at depth {}, expected {skip}",
                walk.turn_id, target.turn_id, target.depth
            );
            walk = target;
        } else {
            let parent = lookup(walk.parent_turn_id)?;
            assert_eq!(
                parent.depth + 1,
                walk.depth,
                "turn {}: parent {} is not one shallower",
                walk.turn_id,
                parent.turn_id
            );
            walk = parent;
        }
    }
    Ok(walk)
}

/// What a walk down skip pointers reads of a turn (readers keep these in their skip cache,
/// `sequencer/view.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Links {
    pub turn_id: TurnId,
    pub parent_turn_id: TurnId,
    pub skip_turn_id: TurnId,
    pub depth: u32,
}

impl Links {
    pub fn of(turn: &TurnRecord) -> Self {
        Links {
            turn_id: turn.turn_id,
            parent_turn_id: turn.parent_turn_id,
            skip_turn_id: turn.skip_turn_id,
            depth: turn.depth,
        }
    }
}

/// `ancestor` over a look-up of whole records: the ancestor's TurnID.
pub fn ancestor_id<E>(
    start: &TurnRecord,
    depth: u32,
    mut lookup: impl FnMut(TurnId) -> Result<TurnRecord, E>,
) -> Result<TurnId, E> {
    let found = ancestor(Links::of(start), depth, |turn_id| {
        lookup(turn_id).map(|turn| Links::of(&turn))
    })?;
    Ok(found.turn_id)
}

/// The skip pointer of a new turn at `depth` whose parent is `parent` (`None` for a root).
pub fn skip_of_child<E>(
    parent: Option<TurnRecord>,
    depth: u32,
    lookup: impl FnMut(TurnId) -> Result<TurnRecord, E>,
) -> Result<TurnId, E> {
    match parent {
        None => Ok(TurnId::NONE),
        Some(parent) => {
            assert_eq!(parent.depth + 1, depth);
            ancestor_id(&parent, skip_depth(depth), lookup)
        }
    }
}

/// The ancestry of every turn of a log in memory — 32 bytes per record — to compute or check
/// skip pointers while reading a log front to back (store migration, `verify`).
#[derive(Default)]
pub struct Ancestry {
    /// By record id (index 0 unused): parent, skip pointer, depth. Zero for other records.
    links: Vec<(TurnId, TurnId, u32)>,
    /// By record id: the turn's `summary_turn_id`.
    summaries: Vec<TurnId>,
}

impl Ancestry {
    /// Records `turn` (after its earlier records).
    pub fn push(&mut self, turn: &TurnRecord) {
        let index = turn.turn_id.0 as usize;
        if self.links.len() <= index {
            self.links
                .resize(index + 1, (TurnId::NONE, TurnId::NONE, 0));
            self.summaries.resize(index + 1, TurnId::NONE);
        }
        self.links[index] = (turn.parent_turn_id, turn.skip_turn_id, turn.depth);
        self.summaries[index] = turn.summary_turn_id;
    }

    /// The `summary_turn_id` `turn` must have: itself when flagged, else its parent's.
    pub fn summary_of(&self, turn: &TurnRecord) -> TurnId {
        if turn.is_summary() {
            return turn.turn_id;
        }
        self.summaries
            .get(turn.parent_turn_id.0 as usize)
            .copied()
            .unwrap_or_default()
    }

    /// The skip pointer `turn` must have, from the turns recorded before it.
    pub fn skip_of(&self, turn: &TurnRecord) -> TurnId {
        // Only the ancestry fields are real; the rest is `turn`'s, unused by the search.
        let record = |turn_id: TurnId| -> Result<TurnRecord, std::convert::Infallible> {
            let (parent_turn_id, skip_turn_id, depth) = self
                .links
                .get(turn_id.0 as usize)
                .copied()
                .unwrap_or_default();
            Ok(TurnRecord {
                turn_id,
                parent_turn_id,
                skip_turn_id,
                depth,
                ..*turn
            })
        };
        let parent = match turn.parent_turn_id {
            TurnId::NONE => None,
            parent_turn_id => record(parent_turn_id).ok(),
        };
        match skip_of_child(parent, turn.depth, record) {
            Ok(skip) => skip,
            Err(never) => match never {},
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::ids::{BlobHash, ContextId};

    fn record(turn_id: u64, parent: Option<&TurnRecord>, skip: TurnId) -> TurnRecord {
        TurnRecord {
            turn_id: TurnId(turn_id),
            parent_turn_id: parent.map_or(TurnId::NONE, |parent| parent.turn_id),
            context_id: ContextId(1),
            depth: parent.map_or(0, |parent| parent.depth + 1),
            type_tag: 0,
            codec: 0,
            payload_hash: BlobHash([0; 32]),
            payload_len: 0,
            flags: 0,
            created_at_unix_ms: 0,
            skip_turn_id: skip,
            context_prev_turn_id: TurnId::NONE,
            summary_turn_id: TurnId::NONE,
            extras_len: 0,
        }
    }

    /// A DAG built like the sequencer builds it: each new turn's parent a random earlier turn
    /// (forks everywhere), its skip pointer from `skip_of_child`.
    fn random_dag(seed: u64, turns: u64) -> HashMap<TurnId, TurnRecord> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut dag: HashMap<TurnId, TurnRecord> = HashMap::new();
        for turn_id in 1..=turns {
            // Mostly extend the newest turn (long chains), sometimes fork from anywhere.
            let parent = match rng.u8(..10) {
                _ if turn_id == 1 => None,
                0 => None,
                1 | 2 => Some(dag[&TurnId(rng.u64(1..turn_id))]),
                _ => Some(dag[&TurnId(turn_id - 1)]),
            };
            let depth = parent.map_or(0, |parent| parent.depth + 1);
            let skip = skip_of_child(parent, depth, |id| Ok::<_, ()>(dag[&id])).unwrap();
            dag.insert(TurnId(turn_id), record(turn_id, parent.as_ref(), skip));
        }
        dag
    }

    #[test]
    fn skip_depths_are_below_and_match_bitcoin_core() {
        assert_eq!(skip_depth(0), 0);
        assert_eq!(skip_depth(1), 0);
        for depth in 2..100_000 {
            assert!(skip_depth(depth) < depth);
        }
        // Values of Bitcoin Core's GetSkipHeight for the same heights.
        assert_eq!(skip_depth(2), 0);
        assert_eq!(skip_depth(3), 1);
        assert_eq!(skip_depth(12), 8);
        assert_eq!(skip_depth(13), 1);
        assert_eq!(skip_depth(1 << 20), 0);
    }

    #[test]
    fn the_ancestor_at_any_depth_is_the_parent_walks() {
        for seed in 0..20 {
            let dag = random_dag(seed, 3000);
            let mut rng = fastrand::Rng::with_seed(seed);
            for _ in 0..500 {
                let start = dag[&TurnId(rng.u64(1..=3000))];
                let depth = rng.u32(0..=start.depth);
                let mut walked = start;
                while walked.depth > depth {
                    walked = dag[&walked.parent_turn_id];
                }
                let found = ancestor_id(&start, depth, |id| Ok::<_, ()>(dag[&id])).unwrap();
                assert_eq!(found, walked.turn_id, "seed {seed}");
            }
        }
    }

    #[test]
    fn a_deep_chain_is_crossed_in_few_steps() {
        let mut dag: HashMap<TurnId, TurnRecord> = HashMap::new();
        let mut parent: Option<TurnRecord> = None;
        for turn_id in 1..=200_000u64 {
            let depth = parent.map_or(0, |parent| parent.depth + 1);
            let skip = skip_of_child(parent, depth, |id| Ok::<_, ()>(dag[&id])).unwrap();
            let turn = record(turn_id, parent.as_ref(), skip);
            dag.insert(turn.turn_id, turn);
            parent = Some(turn);
        }
        let tip = parent.unwrap();
        for depth in [0, 1, 777, 100_000, 199_998] {
            let mut steps = 0;
            let found = ancestor_id(&tip, depth, |id| {
                steps += 1;
                Ok::<_, ()>(dag[&id])
            })
            .unwrap();
            assert_eq!(dag[&found].depth, depth);
            assert!(steps <= 120, "{steps} steps to depth {depth}");
        }
    }
}
