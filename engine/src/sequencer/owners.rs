//! Which turns a context owns (decision 0009): the turns appended to it, the turns of its
//! current chain, and what it inherited — a fork the turns of its base's chain, a clone the
//! turns its source owned up to the clone point, recursively. One set of rules for the
//! sequencer (explicit parents, key look-ups before an append) and for readers (look-up by
//! key, the turn log), over a `Contexts` snapshot and a caller's turn look-up; no I/O here.

use crate::error::EngineError;
use crate::format::turn_log::TurnRecord;
use crate::ids::{ContextId, TurnId};
use crate::sequencer::contexts::{Contexts, Inherit};
use crate::skip;

/// Guard on the inheritance walk (clones of clones of forks …): each step goes to an older
/// context or turn, so it ends anyway; a walk longer than this is a bug.
const INHERITANCE_STEPS_MAX: usize = 1 << 16;

/// One owner of a context's turns: `owner`'s own turns up to `upto`, restricted to the chain
/// ending at `chain` when there is one (inherited through a fork).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    pub owner: ContextId,
    pub upto: TurnId,
    pub chain: Option<TurnRecord>,
}

/// Visits the owners of `context_id`'s turns — itself first, then what it inherited — until
/// `visit` answers true.
pub(crate) fn walk_owners(
    contexts: &Contexts,
    context_id: ContextId,
    turn: &impl Fn(TurnId) -> Result<TurnRecord, EngineError>,
    mut visit: impl FnMut(Owner) -> Result<bool, EngineError>,
) -> Result<(), EngineError> {
    let mut step = Owner {
        owner: context_id,
        upto: TurnId(u64::MAX),
        chain: None,
    };
    for _ in 0..INHERITANCE_STEPS_MAX {
        if visit(step)? {
            return Ok(());
        }
        match contexts.get(step.owner).and_then(|info| info.inherits) {
            None => return Ok(()),
            // The bound is the clone point of *this* step: it limits the source's own turns;
            // what the source inherited was fixed when the source was made, before it.
            Some(Inherit::Clone { source, upto }) => {
                step.owner = source;
                step.upto = upto;
            }
            Some(Inherit::Fork { base }) => {
                let base = turn(base)?;
                // Everything a fork inherits lies on its base's chain; through a fork of a
                // fork, on the outermost base's chain.
                step = Owner {
                    owner: base.context_id,
                    upto: base.turn_id,
                    chain: step.chain.or(Some(base)),
                };
            }
        }
    }
    Ok(())
}

/// Whether `candidate` lies on the chain ending at `tip` (any turn when there is no tip).
pub(crate) fn on_chain(
    tip: Option<TurnRecord>,
    candidate: &TurnRecord,
    turn: &impl Fn(TurnId) -> Result<TurnRecord, EngineError>,
) -> Result<bool, EngineError> {
    let Some(tip) = tip else {
        return Ok(true);
    };
    if candidate.depth > tip.depth {
        return Ok(false);
    }
    Ok(skip::ancestor_id(&tip, candidate.depth, turn)? == candidate.turn_id)
}

/// The turn `context_id` has under `key`: its own, or an inherited one.
pub(crate) fn turn_by_key(
    contexts: &Contexts,
    context_id: ContextId,
    key: &[u8],
    turn: &impl Fn(TurnId) -> Result<TurnRecord, EngineError>,
) -> Result<Option<TurnRecord>, EngineError> {
    if key.is_empty() {
        return Ok(None);
    }
    let mut found = None;
    walk_owners(contexts, context_id, turn, |step| {
        let Some(turn_id) = contexts.own_turn_key(step.owner, key) else {
            return Ok(false);
        };
        if turn_id > step.upto {
            return Ok(false);
        }
        let candidate = turn(turn_id)?;
        if !on_chain(step.chain, &candidate, turn)? {
            return Ok(false);
        }
        found = Some(candidate);
        Ok(true)
    })?;
    Ok(found)
}

/// Whether `context_id` (whose head is `head`) owns `candidate`.
pub(crate) fn owns(
    contexts: &Contexts,
    context_id: ContextId,
    head: Option<TurnRecord>,
    candidate: &TurnRecord,
    turn: &impl Fn(TurnId) -> Result<TurnRecord, EngineError>,
) -> Result<bool, EngineError> {
    if head.is_some() && on_chain(head, candidate, turn)? {
        return Ok(true);
    }
    let mut owned = false;
    walk_owners(contexts, context_id, turn, |step| {
        owned = match step.chain {
            // Inherited through a fork: every turn of the base's chain, whoever appended it.
            Some(chain) => on_chain(Some(chain), candidate, turn)?,
            None => candidate.context_id == step.owner && candidate.turn_id <= step.upto,
        };
        Ok(owned || step.chain.is_some())
    })?;
    Ok(owned)
}
