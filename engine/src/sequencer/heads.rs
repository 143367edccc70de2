//! The heads of every context, as the sequencer tracks them, and the DAG rule that both the
//! live append path (`actor.rs`) and replay at open (`recover.rs`) apply: a turn appended to a
//! context has the context's head as its parent and depth = parent depth + 1 (a root, on an
//! empty context, has depth 0). With an explicit parent (decision 0009) depth = that parent's
//! + 1. Its skip pointer and ownership checks need reads, so the callers do them (`skip.rs`).

use crate::format::turn_log::TurnRecord;
use crate::ids::{CONTEXTS_MAX, ContextId, TurnId};

/// The head of a deleted context (issue 15), in `Heads` and in the published head table: no
/// turn has this id (TurnIDs are record ids, far below it), and every look-up of such a
/// context answers "not found". ContextIDs are never reused, so the slot keeps it for good.
pub(crate) const DELETED_HEAD: TurnId = TurnId(u64::MAX);

/// A context's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct HeadState {
    pub head_turn_id: TurnId,
    pub head_depth: u32,
}

/// Where the next turn appended after a head goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChildPosition {
    pub parent_turn_id: TurnId,
    pub depth: u32,
}

impl HeadState {
    /// The DAG rule. `None` when the chain is at the maximum depth.
    pub fn child(self) -> Option<ChildPosition> {
        let depth = if self.head_turn_id.is_none() {
            0
        } else {
            self.head_depth.checked_add(1)?
        };
        Some(ChildPosition {
            parent_turn_id: self.head_turn_id,
            depth,
        })
    }

    /// The head once `turn` is appended: the turn itself.
    pub fn of(turn: &TurnRecord) -> HeadState {
        HeadState {
            head_turn_id: turn.turn_id,
            head_depth: turn.depth,
        }
    }

    /// Replay's side of the rule for a turn appended after the head: `turn` is what `child`
    /// would have made of it. (A turn with another parent is checked against that parent.)
    pub fn check_child(self, turn: &TurnRecord) -> Result<(), String> {
        if turn.parent_turn_id != self.head_turn_id {
            return Err(format!(
                "turn {} has parent {} but context {} had head {}",
                turn.turn_id, turn.parent_turn_id, turn.context_id, self.head_turn_id
            ));
        }
        match self.child() {
            Some(child) if child.depth == turn.depth => Ok(()),
            Some(child) => Err(format!(
                "turn {} has depth {}, expected {}",
                turn.turn_id, turn.depth, child.depth
            )),
            None => Err(format!(
                "turn {} extends a chain at the maximum depth",
                turn.turn_id
            )),
        }
    }
}

/// Every context's head; ContextIDs are dense from 1 (index `c - 1` holds context `c`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Heads {
    heads: Vec<HeadState>,
}

impl Heads {
    /// A live context's head (`None`: no such context, or deleted).
    pub fn get(&self, context_id: ContextId) -> Option<HeadState> {
        self.raw(context_id)
            .filter(|head| head.head_turn_id != DELETED_HEAD)
    }

    /// The slot as it is, a deleted context's `DELETED_HEAD` included (publishing, undo).
    pub fn raw(&self, context_id: ContextId) -> Option<HeadState> {
        let index = (context_id.0 as usize).wrapping_sub(1);
        self.heads.get(index).copied()
    }

    /// Deletes a live context; returns its head before.
    pub fn delete(&mut self, context_id: ContextId) -> HeadState {
        assert!(
            self.get(context_id).is_some(),
            "delete of a context that is not live"
        );
        self.set(
            context_id,
            HeadState {
                head_turn_id: DELETED_HEAD,
                head_depth: 0,
            },
        )
    }

    pub fn count(&self) -> u64 {
        self.heads.len() as u64
    }

    /// The ContextID the next `create` allocates, or `None` when the store is full.
    pub fn next_context_id(&self) -> Option<ContextId> {
        let next = self.count() + 1;
        (next <= CONTEXTS_MAX).then_some(ContextId(next))
    }

    /// Adds a context. The caller checked `next_context_id`.
    pub fn create(&mut self, head: HeadState) -> ContextId {
        let context_id = self.next_context_id();
        assert!(
            context_id.is_some(),
            "more contexts than the head table holds"
        );
        self.heads.push(head);
        ContextId(self.count())
    }

    /// Takes every ContextID after the last one through `last` as a deleted context (a
    /// replica generation's start, `ContextMeta::SkipContexts`). The caller checked that
    /// `last` is past the last context and within `CONTEXTS_MAX`.
    pub fn skip_through(&mut self, last: ContextId) {
        assert!(
            last.0 > self.count() && last.0 < CONTEXTS_MAX,
            "a skip takes new ContextIDs within the head table"
        );
        self.heads.resize(
            last.0 as usize,
            HeadState {
                head_turn_id: DELETED_HEAD,
                head_depth: 0,
            },
        );
    }

    /// Moves an existing context's head; returns the previous one.
    pub fn set(&mut self, context_id: ContextId, head: HeadState) -> HeadState {
        assert!(
            context_id.0 > 0 && context_id.0 <= self.count(),
            "head of unknown context {context_id}"
        );
        std::mem::replace(&mut self.heads[context_id.0 as usize - 1], head)
    }

    /// Forgets the contexts created after the first `count` (a batch rolled back).
    pub fn truncate(&mut self, count: u64) {
        self.heads.truncate(count as usize);
    }

    /// Every context with its head, by ContextID.
    pub fn iter(&self) -> impl Iterator<Item = (ContextId, HeadState)> + '_ {
        self.iter_from(0)
    }

    /// The contexts after the first `count` (those a batch created), with their heads: O(new
    /// contexts), not O(all contexts).
    pub fn iter_from(&self, count: u64) -> impl Iterator<Item = (ContextId, HeadState)> + '_ {
        let first = (count as usize).min(self.heads.len());
        (count + 1..)
            .map(ContextId)
            .zip(self.heads[first..].iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_for_roots_and_children() {
        let empty = HeadState::default();
        assert_eq!(
            empty.child(),
            Some(ChildPosition {
                parent_turn_id: TurnId::NONE,
                depth: 0
            })
        );
        let head = HeadState {
            head_turn_id: TurnId(7),
            head_depth: 3,
        };
        assert_eq!(head.child().map(|child| child.depth), Some(4));
        let deepest = HeadState {
            head_turn_id: TurnId(7),
            head_depth: u32::MAX,
        };
        assert_eq!(deepest.child(), None);
    }

    #[test]
    fn iter_from_yields_only_the_newer_contexts_with_their_ids() {
        let mut heads = Heads::default();
        for depth in 0..5 {
            heads.create(HeadState {
                head_turn_id: TurnId(u64::from(depth) + 10),
                head_depth: depth,
            });
        }
        let newer: Vec<_> = heads.iter_from(3).collect();
        assert_eq!(newer.len(), 2);
        assert_eq!(newer[0].0, ContextId(4));
        assert_eq!(newer[0].1.head_depth, 3);
        assert_eq!(newer[1].0, ContextId(5));
        assert_eq!(heads.iter_from(5).count(), 0);
        assert_eq!(heads.iter().count(), 5);
    }
}
