//! Read paths (spec §7). They run on the caller's thread over published, durable state: no
//! actor is asked, no lock is taken. A page read is three steps, each a function below:
//!
//! 1. `tip`: the chain's tip — the context's head, loaded once (one atomic), or the named
//!    turn — read once; its depth is the page's `tip_depth`;
//! 2. `newest_first` / `depth_window`: a walk by parent pointer, one positional read of
//!    `turns.log` per turn (page-cache hits in the common case), every link checked; a depth
//!    window first jumps to its newest turn by skip pointers (`skip.rs`, O(log n)), and a
//!    GET_BEFORE cursor is checked to lie on the context's chain the same way;
//! 3. `assemble`: the payload budget (a page keeps at least one turn), then each payload
//!    through `payload` — the caller's cache first, else one index look-up and one pack read.
//!
//! Every read is in the handle's scope (decision 0032 §2): a context or a turn of another
//! tenant answers NOT_FOUND exactly as an absent one does. One check at the tip is enough,
//! because everything a walk from it reaches is the tip's tenant's: a fork's base and a
//! clone's source are always the new context's tenant's.

use bytes::Bytes;

use crate::error::EngineError;
use crate::format::pack::Compression;
use crate::format::turn_log::TurnRecord;
use crate::ids::{BlobHash, ContextId, TurnId};
use crate::model::{
    ContextHead, Page, PageEntry, PageOptions, PageQuery, Payload, PayloadCache, PayloadMode,
    Scope, StoredBlob, Turn,
};
use crate::published::Published;
use crate::seal::Addressing;

pub(crate) struct Reader<'a> {
    pub published: &'a Published,
    pub read_turns_max: u32,
    /// Whose data the reads see: the engine handle's.
    pub scope: Scope,
    /// The handle's addressing: turns are read with their payload's address and handed out
    /// with the caller's hash (`shown`).
    pub addressing: &'a Addressing,
}

/// A turn as a handle with `addressing` hands it out: its payload's hash, not its address (a
/// redacted turn keeps `BlobHash::EMPTY`, which names no blob).
pub(crate) fn shown(addressing: &Addressing, turn: Turn) -> Turn {
    if turn.redacted {
        return turn;
    }
    Turn {
        payload_hash: addressing.hash_of(turn.payload_hash),
        ..turn
    }
}

/// Which end of a page survives the payload budget.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Cursor pages: the newest turns (the caller follows `next_before` for older ones).
    Newest,
    /// Depth windows: the oldest turns (the caller continues from the last depth + 1).
    Oldest,
}

impl Reader<'_> {
    pub fn head(&self, context_id: ContextId) -> Result<ContextHead, EngineError> {
        let (tip, _) = self.context_tip(context_id)?;
        Ok(ContextHead {
            context_id,
            head_turn_id: tip.map_or(TurnId::NONE, |turn| turn.turn_id),
            head_depth: tip.map_or(0, |turn| turn.depth),
        })
    }

    /// A turn by id, in the overlay view `as_of` (`None`: the latest).
    pub fn turn(&self, turn_id: TurnId, as_of: Option<u64>) -> Result<Turn, EngineError> {
        let record = self.published.turns.turn(turn_id)?;
        let contexts = self.published.contexts.load();
        if !contexts.visible_in(self.scope, record.context_id) {
            return Err(EngineError::TurnNotFound(turn_id));
        }
        Ok(shown(
            self.addressing,
            contexts.overlays.view(&record, as_of),
        ))
    }

    /// A turn's record, if its context is in scope; else NOT_FOUND, as an absent turn.
    pub(crate) fn scoped_turn(&self, turn_id: TurnId) -> Result<TurnRecord, EngineError> {
        let record = self.published.turns.turn(turn_id)?;
        if !self.published.sees(self.scope, record.context_id) {
            return Err(EngineError::TurnNotFound(turn_id));
        }
        Ok(record)
    }

    /// A page of turns, oldest first, with payloads as `options` ask.
    pub fn page(
        &self,
        query: PageQuery,
        options: PageOptions,
        cache: &mut dyn PayloadCache,
    ) -> Result<Page, EngineError> {
        let limit = query.limit();
        if limit > self.read_turns_max {
            return Err(EngineError::TooManyTurns {
                requested: limit,
                max: self.read_turns_max,
            });
        }
        // `floor`: the context's floor depth (a prune); nothing below it is read through it.
        let (tip, turns, keep, floor) = match query {
            PageQuery::Last { context_id, .. } => {
                let (tip, floor) = self.context_tip(context_id)?;
                (
                    tip,
                    self.newest_first(tip, limit, floor)?,
                    Keep::Newest,
                    floor,
                )
            }
            PageQuery::Before {
                context_id, before, ..
            } => {
                let (tip, floor) = self.context_tip(context_id)?;
                let cursor = self.published.turns.turn(before)?;
                self.check_on_chain(context_id, tip, &cursor)?;
                let start = self.parent_of(&cursor)?;
                (
                    tip,
                    self.newest_first(start, limit, floor)?,
                    Keep::Newest,
                    floor,
                )
            }
            PageQuery::RangeByDepth {
                context_id,
                from_depth,
                ..
            } => {
                let (tip, floor) = self.context_tip(context_id)?;
                (
                    tip,
                    self.depth_window(tip, from_depth.max(floor), limit)?,
                    Keep::Oldest,
                    floor,
                )
            }
            PageQuery::Chain {
                turn_id,
                from_depth,
                ..
            } => {
                let tip = Some(self.scoped_turn(turn_id)?);
                (
                    tip,
                    self.depth_window(tip, from_depth, limit)?,
                    Keep::Oldest,
                    0,
                )
            }
        };
        let tip_depth = tip.map_or(0, |turn| turn.depth);
        self.assemble(turns, keep, tip_depth, floor, options, cache)
    }

    /// The context's window (decision 0009): from the latest summary turn on its chain
    /// (inclusive; the root when there is none) to the head, oldest first, at most `limit`
    /// turns (the newest of them). One tip read; the summary is found in O(1) through the
    /// tip's `summary_turn_id`.
    pub fn window(
        &self,
        context_id: ContextId,
        limit: u32,
        options: PageOptions,
        cache: &mut dyn PayloadCache,
    ) -> Result<Page, EngineError> {
        if limit > self.read_turns_max {
            return Err(EngineError::TooManyTurns {
                requested: limit,
                max: self.read_turns_max,
            });
        }
        let (tip, floor) = self.context_tip(context_id)?;
        let turns = match tip {
            Some(tip) if limit > 0 => {
                let summary_depth = match tip.summary_turn_id {
                    TurnId::NONE => 0,
                    // Only its depth: a summary below the floor may be collected.
                    summary => self.published.turns.turn_record(summary)?.depth,
                };
                let newest_first = tip.depth.saturating_sub(limit - 1);
                let from_depth = summary_depth.max(newest_first).max(floor);
                self.depth_window(Some(tip), from_depth, tip.depth - from_depth + 1)?
            }
            _ => Vec::new(),
        };
        let tip_depth = tip.map_or(0, |turn| turn.depth);
        self.assemble(turns, Keep::Newest, tip_depth, floor, options, cache)
    }

    /// The payload at `hash` (an address) as `mode` asks (`None` is taken as `Raw`).
    pub fn payload(
        &self,
        hash: BlobHash,
        mode: PayloadMode,
        cache: &mut dyn PayloadCache,
    ) -> Result<Payload, EngineError> {
        // A purged blob is gone from the moment the purge is acknowledged, wherever its bytes
        // still are (decision 0012).
        if self.published.contexts.load().overlays.is_purged(&hash) {
            return Err(EngineError::BlobNotFound(hash));
        }
        // The index first: a blob garbage collection took may linger in a cache, and must not
        // be served from there (one hash-table probe).
        let shard = self.published.shard_of(&hash);
        let location = shard.find(&hash)?;
        if let Some(bytes) = cache.get(&hash) {
            return Ok(Payload::Raw(bytes));
        }
        let fits_cache = u64::from(location.raw_len) <= cache.entry_bytes_max();
        let chunked = location.compression == Compression::Manifest;
        if !fits_cache && mode == PayloadMode::RawOrStored && !chunked {
            let stored = shard.read_stored_at(&hash, location)?;
            let hash = self.addressing.hash_of(stored.hash);
            return Ok(Payload::Stored(StoredBlob { hash, ..stored }));
        }
        let bytes: Bytes = crate::chunks::read_payload(&self.published.shards, &hash, location)?;
        if fits_cache {
            cache.insert(hash, &bytes);
        }
        Ok(Payload::Raw(bytes))
    }

    /// The head turn of a context (`None` while it is empty) and its floor depth (issue 15:
    /// turns below it are not read through the context). The floor comes from the metadata
    /// snapshot, published after the heads: a reader may see a new head with the floor before
    /// it, never the reverse that would hide a turn the head still reaches.
    pub(crate) fn context_tip(
        &self,
        context_id: ContextId,
    ) -> Result<(Option<TurnRecord>, u32), EngineError> {
        let head = self
            .published
            .heads
            .head(context_id)
            .ok_or(EngineError::ContextNotFound(context_id))?;
        let contexts = self.published.contexts.load();
        if !contexts.visible_in(self.scope, context_id) {
            return Err(EngineError::ContextNotFound(context_id));
        }
        let floor = contexts.get(context_id).map_or(0, |info| info.floor_depth);
        Ok((self.turn_or_none(head)?, floor))
    }

    /// Calls `visit` on the context's chain as a read sees it: its head and the ancestors not
    /// below its floor, newest first, while `visit` returns true.
    pub(crate) fn chain(
        &self,
        context_id: ContextId,
        mut visit: impl FnMut(&TurnRecord) -> bool,
    ) -> Result<(), EngineError> {
        let (tip, floor) = self.context_tip(context_id)?;
        let start = tip.filter(|tip| tip.depth >= floor);
        self.walk(start, |turn| visit(turn) && turn.depth > floor)
    }

    fn turn_or_none(&self, turn_id: TurnId) -> Result<Option<TurnRecord>, EngineError> {
        if turn_id.is_none() {
            return Ok(None);
        }
        self.published.turns.turn(turn_id).map(Some)
    }

    fn parent_of(&self, turn: &TurnRecord) -> Result<Option<TurnRecord>, EngineError> {
        // History a garbage collection took ends the walk, as a root would (decision 0011).
        if self.published.turns.is_dead(turn.parent_turn_id) {
            return Ok(None);
        }
        let parent = self.turn_or_none(turn.parent_turn_id)?;
        if let Some(parent) = &parent {
            check_link(turn, parent);
        }
        Ok(parent)
    }

    /// Calls `visit` on `start` and its ancestors, newest first, while it returns true.
    fn walk(
        &self,
        start: Option<TurnRecord>,
        mut visit: impl FnMut(&TurnRecord) -> bool,
    ) -> Result<(), EngineError> {
        let mut cursor = start;
        while let Some(turn) = cursor {
            if !visit(&turn) {
                break;
            }
            cursor = self.parent_of(&turn)?;
        }
        Ok(())
    }

    /// `start` and up to `limit - 1` of its ancestors not below `floor`, oldest first.
    fn newest_first(
        &self,
        start: Option<TurnRecord>,
        limit: u32,
        floor: u32,
    ) -> Result<Vec<TurnRecord>, EngineError> {
        let mut turns = Vec::with_capacity(limit as usize);
        if limit > 0 && start.is_some_and(|start| start.depth >= floor) {
            self.walk(start, |turn| {
                turns.push(*turn);
                turns.len() < limit as usize && turn.depth > floor
            })?;
        }
        turns.reverse();
        Ok(turns)
    }

    /// The tip's ancestors (and the tip) with depth in `from_depth..from_depth + limit`,
    /// oldest first: skip pointers to the window's newest turn (O(log n)), then its parents.
    fn depth_window(
        &self,
        tip: Option<TurnRecord>,
        from_depth: u32,
        limit: u32,
    ) -> Result<Vec<TurnRecord>, EngineError> {
        let Some(tip) = tip.filter(|tip| limit > 0 && from_depth <= tip.depth) else {
            return Ok(Vec::new());
        };
        let last_depth = from_depth.saturating_add(limit - 1).min(tip.depth);
        let newest = self.ancestor(tip, last_depth)?;
        let mut turns = Vec::with_capacity((last_depth - from_depth) as usize + 1);
        self.walk(Some(newest), |turn| {
            turns.push(*turn);
            turn.depth > from_depth
        })?;
        turns.reverse();
        Ok(turns)
    }

    /// The ancestor of `start` at `depth`, in O(log n) reads.
    fn ancestor(&self, start: TurnRecord, depth: u32) -> Result<TurnRecord, EngineError> {
        self.published.turns.ancestor(start, depth)
    }

    /// A GET_BEFORE cursor must be a turn of the context's chain: a turn of another chain
    /// would page through that chain's history instead.
    fn check_on_chain(
        &self,
        context_id: ContextId,
        tip: Option<TurnRecord>,
        cursor: &TurnRecord,
    ) -> Result<(), EngineError> {
        let on_chain = match tip {
            Some(tip) if cursor.depth <= tip.depth => {
                self.ancestor(tip, cursor.depth)?.turn_id == cursor.turn_id
            }
            _ => false,
        };
        if on_chain {
            Ok(())
        } else {
            Err(EngineError::InvalidArgument(format!(
                "turn {} is not on the chain of context {context_id}; page with a cursor \
                 from this context's own pages",
                cursor.turn_id
            )))
        }
    }

    /// Applies the overlay view and the payload budget, reads the payloads, and sets the
    /// cursor.
    fn assemble(
        &self,
        records: Vec<TurnRecord>,
        keep: Keep,
        tip_depth: u32,
        floor: u32,
        options: PageOptions,
        cache: &mut dyn PayloadCache,
    ) -> Result<Page, EngineError> {
        // One snapshot for the page: every turn of it in the same overlay view.
        let snapshot = self.published.contexts.load();
        let mut turns: Vec<(TurnRecord, Turn)> = records
            .into_iter()
            .map(|record| (record, snapshot.overlays.view(&record, options.as_of)))
            .collect();
        if options.payloads != PayloadMode::None {
            let fit = match keep {
                Keep::Newest => within_budget(
                    turns.iter().rev().map(|(_, turn)| turn),
                    options.payload_bytes_max,
                ),
                Keep::Oldest => within_budget(
                    turns.iter().map(|(_, turn)| turn),
                    options.payload_bytes_max,
                ),
            };
            match keep {
                Keep::Newest => drop(turns.drain(..turns.len() - fit)),
                Keep::Oldest => turns.truncate(fit),
            }
        }
        // The oldest turn returned is the cursor of the next older page, unless it is a root
        // or at the floor.
        let next_before = match (keep, turns.first()) {
            (Keep::Newest, Some((oldest, _)))
                if !oldest.parent_turn_id.is_none() && oldest.depth > floor =>
            {
                oldest.turn_id
            }
            _ => TurnId::NONE,
        };
        let entries = turns
            .into_iter()
            .map(|(record, turn)| {
                let payload = match options.payloads {
                    PayloadMode::None => None,
                    // Redacted: no bytes to look up anywhere, cache included.
                    _ if turn.redacted => Some(Payload::Raw(Bytes::new())),
                    mode => Some(self.payload(turn.payload_hash, mode, cache)?),
                };
                Ok(PageEntry {
                    extras: self.published.turns.extras(&record)?,
                    turn: shown(self.addressing, turn),
                    payload,
                })
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        Ok(Page {
            entries,
            next_before,
            tip_depth,
        })
    }
}

/// How many of `turns`, in order, fit in `payload_bytes_max` (at least one).
fn within_budget<'a>(turns: impl Iterator<Item = &'a Turn>, payload_bytes_max: u64) -> usize {
    let mut bytes = 0u64;
    let mut count = 0;
    for turn in turns {
        bytes += u64::from(turn.payload_len);
        if count > 0 && bytes > payload_bytes_max {
            break;
        }
        count += 1;
    }
    count
}

/// Pair assertion of the append path's DAG rule (`sequencer/heads.rs`), checked on every walk.
fn check_link(child: &TurnRecord, parent: &TurnRecord) {
    assert_eq!(child.parent_turn_id, parent.turn_id);
    assert!(
        parent.turn_id < child.turn_id,
        "turn {} older than parent",
        child.turn_id
    );
    assert_eq!(
        child.depth,
        parent.depth + 1,
        "depth of turn {}",
        child.turn_id
    );
}
