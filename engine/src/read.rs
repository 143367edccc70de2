//! Read paths (spec §7). They run on the caller's thread over published, durable state:
//! no actor is asked, no lock is taken. Chains are walked by parent pointer, one positional
//! read of `turns.log` per turn (page-cache hits in the common case).

use crate::error::EngineError;
use crate::ids::{ContextId, TurnId};
use crate::model::{ContextHead, Turn, TurnPage, TurnWithPayload};
use crate::published::Published;

pub(crate) struct Reader<'a> {
    pub published: &'a Published,
    pub read_turns_max: u32,
}

impl Reader<'_> {
    pub fn head(&self, context_id: ContextId) -> Result<ContextHead, EngineError> {
        let head_turn_id = self.head_turn(context_id)?;
        let head_depth = if head_turn_id.is_none() {
            0
        } else {
            self.published.turns.turn(head_turn_id)?.depth
        };
        Ok(ContextHead {
            context_id,
            head_turn_id,
            head_depth,
        })
    }

    fn head_turn(&self, context_id: ContextId) -> Result<TurnId, EngineError> {
        self.published
            .heads
            .head(context_id)
            .ok_or(EngineError::ContextNotFound(context_id))
    }

    pub fn turn(&self, turn_id: TurnId) -> Result<Turn, EngineError> {
        self.published.turns.turn(turn_id)
    }

    /// The `limit` newest turns of a context, oldest first.
    pub fn last(
        &self,
        context_id: ContextId,
        limit: u32,
        payloads: bool,
    ) -> Result<TurnPage, EngineError> {
        self.check_limit(limit)?;
        let head = self.head_turn(context_id)?;
        self.page_from(head, limit, payloads)
    }

    /// The `limit` turns older than `before`, oldest first. The cursor turn names the chain;
    /// the context must exist.
    pub fn before(
        &self,
        context_id: ContextId,
        before: TurnId,
        limit: u32,
        payloads: bool,
    ) -> Result<TurnPage, EngineError> {
        self.check_limit(limit)?;
        self.head_turn(context_id)?;
        let cursor = self.turn(before)?;
        self.page_from(cursor.parent_turn_id, limit, payloads)
    }

    /// Turns of a context's chain with depth in `from_depth..from_depth + limit`, oldest first.
    pub fn range_by_depth(
        &self,
        context_id: ContextId,
        from_depth: u32,
        limit: u32,
        payloads: bool,
    ) -> Result<Vec<TurnWithPayload>, EngineError> {
        self.check_limit(limit)?;
        let head = self.head_turn(context_id)?;
        self.depth_window(head, from_depth, limit, payloads)
    }

    /// The chain root → `turn_id`, a window of `limit` turns from `from_depth`, oldest first.
    pub fn chain(
        &self,
        turn_id: TurnId,
        from_depth: u32,
        limit: u32,
        payloads: bool,
    ) -> Result<Vec<TurnWithPayload>, EngineError> {
        self.check_limit(limit)?;
        self.turn(turn_id)?;
        self.depth_window(turn_id, from_depth, limit, payloads)
    }

    fn check_limit(&self, limit: u32) -> Result<(), EngineError> {
        if limit > self.read_turns_max {
            return Err(EngineError::InvalidArgument(format!(
                "{limit} turns requested; read_turns_max is {}",
                self.read_turns_max
            )));
        }
        Ok(())
    }

    /// `start` and up to `limit - 1` of its ancestors, oldest first.
    fn page_from(
        &self,
        start: TurnId,
        limit: u32,
        payloads: bool,
    ) -> Result<TurnPage, EngineError> {
        let mut turns: Vec<Turn> = Vec::with_capacity(limit as usize);
        let mut cursor = start;
        while turns.len() < limit as usize && !cursor.is_none() {
            let turn = self.turn(cursor)?;
            check_link(turns.last(), &turn);
            cursor = turn.parent_turn_id;
            turns.push(turn);
        }
        // The oldest turn returned is the cursor of the next older page, unless it is a root.
        let next_before = match turns.last() {
            Some(oldest) if !oldest.parent_turn_id.is_none() => oldest.turn_id,
            _ => TurnId::NONE,
        };
        turns.reverse();
        Ok(TurnPage {
            turns: self.with_payloads(turns, payloads)?,
            next_before,
        })
    }

    fn depth_window(
        &self,
        tip: TurnId,
        from_depth: u32,
        limit: u32,
        payloads: bool,
    ) -> Result<Vec<TurnWithPayload>, EngineError> {
        if tip.is_none() || limit == 0 {
            return Ok(Vec::new());
        }
        let last_depth = from_depth.saturating_add(limit - 1);
        let mut turns = Vec::with_capacity(limit as usize);
        let mut child: Option<Turn> = None;
        let mut cursor = tip;
        while !cursor.is_none() {
            let turn = self.turn(cursor)?;
            check_link(child.as_ref(), &turn);
            if turn.depth < from_depth {
                break;
            }
            cursor = turn.parent_turn_id;
            if turn.depth <= last_depth {
                turns.push(turn);
            }
            child = Some(turn);
        }
        turns.reverse();
        self.with_payloads(turns, payloads)
    }

    fn with_payloads(
        &self,
        turns: Vec<Turn>,
        payloads: bool,
    ) -> Result<Vec<TurnWithPayload>, EngineError> {
        turns
            .into_iter()
            .map(|turn| {
                let payload = if payloads {
                    Some(
                        self.published
                            .shard_of(&turn.payload_hash)
                            .read_payload(&turn.payload_hash)?,
                    )
                } else {
                    None
                };
                Ok(TurnWithPayload { turn, payload })
            })
            .collect()
    }
}

/// Pair assertion of the append path's `depth = parent depth + 1`, checked on every walk.
fn check_link(child: Option<&Turn>, older: &Turn) {
    if let Some(child) = child {
        assert_eq!(child.parent_turn_id, older.turn_id);
        assert!(
            older.turn_id < child.turn_id,
            "turn {} older than parent",
            child.turn_id
        );
        assert_eq!(
            child.depth,
            older.depth + 1,
            "depth of turn {}",
            child.turn_id
        );
    }
}
