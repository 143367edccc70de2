//! Turns for agent frameworks, the caller's side (decision 0009): a turn's extras, a turn by
//! its key, the context's turn log across branches (with a label filter), and the window
//! since the latest summary. Reads only: answered from the published snapshot and the durable
//! log, like every read; appends with options go through `engine/append.rs`.

use crate::engine::Engine;
use crate::error::EngineError;
use crate::format::turn_log::{LogRecord, TurnRecord};
use crate::ids::{ContextId, TurnId};
use crate::model::{ContextRef, Page, PageOptions, PayloadCache, Turn};
use crate::sequencer::contexts::{Contexts, is_indexed_label};
use crate::sequencer::owners::{self, Owner};
use crate::sequencer::view::TurnsView;

pub use crate::format::turn_extras::TurnExtras;
pub use crate::format::turn_log::LOG_RECORD_BYTES;
pub use ctxstore_vocab::limits::{
    APPEND_BATCH_TURNS_MAX, FIND_PAGE_MAX, LOG_PAGE_MAX, LOG_SCAN_MAX,
};

/// The last slot of the `turns.log` record that holds slot `record_id`, read from `log` (a
/// restored copy's): a restore cut there keeps that record whole (a turn with its extras
/// slots, a multi-slot metadata record). Damage is `Corrupt`, naming the slot.
pub fn log_record_end(log: &std::fs::File, record_id: u64) -> Result<u64, EngineError> {
    use std::os::unix::fs::FileExt;
    assert!(record_id > 0, "record ids start at 1");
    let read_slot = |id: u64| -> Result<Option<LogRecord>, EngineError> {
        let mut slot = [0u8; LOG_RECORD_BYTES];
        let offset = crate::format::turn_log::record_offset(id);
        log.read_exact_at(&mut slot, offset)
            .map_err(|source| EngineError::io("turns.log", source))?;
        LogRecord::decode(&slot).map_err(|error| {
            EngineError::Corrupt(crate::error::Corruption::new(
                "turns.log",
                offset,
                format!("slot {id}: {error}"),
            ))
        })
    };
    let head = match read_slot(record_id)? {
        Some(LogRecord::Continuation(continuation)) => continuation.head_record_id,
        _ => record_id,
    };
    let slots = match read_slot(head)? {
        Some(LogRecord::Turn(turn)) => turn.slot_count(),
        Some(LogRecord::Meta(meta)) => u64::from(meta.slot_count),
        _ => 1,
    };
    Ok((head + slots - 1).max(record_id))
}

/// Which turns of a context's log a page returns, newest first.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct LogQuery {
    /// Label equalities, all of which a turn must carry.
    pub labels: Vec<(String, String)>,
    /// Where the previous page ended.
    pub cursor: Option<LogCursor>,
    /// 1..=`LOG_PAGE_MAX`.
    pub limit: u32,
    /// The overlay view (decision 0012): `None` the latest.
    pub as_of: Option<u64>,
    /// When the caller will send the payloads too: the page ends before the payload bytes
    /// of its turns pass this (it keeps at least one turn). 0: no budget.
    pub payload_bytes_max: u64,
}

/// Where a turn-log page ended: the next turn to look at, in the `phase`-th owner of the
/// context's turns (itself, then what it inherited).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LogCursor {
    pub phase: u32,
    pub next: TurnId,
}

/// A page of a store-wide find, newest first.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FoundTurns {
    pub turns: Vec<TurnWithExtras>,
    /// Pass as `before` for the next page; `NONE` when there are no more.
    pub next_before: TurnId,
}

/// A turn with its key, labels and links.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TurnWithExtras {
    pub turn: Turn,
    pub extras: TurnExtras,
}

/// A page of a context's turn log, newest first.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TurnLogPage {
    pub turns: Vec<TurnWithExtras>,
    /// `None` when the log is exhausted. A page may hold fewer than `limit` turns while more
    /// match (`LOG_SCAN_MAX`): follow the cursor.
    pub next_cursor: Option<LogCursor>,
}

impl Engine {
    /// Turns of every context carrying the label `key = value`, newest first, from the
    /// store-wide index (only indexed label keys: `run_id`, `thread_id`, `idx.*`).
    pub fn find_turns(
        &self,
        key: &str,
        value: &str,
        before: TurnId,
        limit: u32,
    ) -> Result<FoundTurns, EngineError> {
        self.find_turns_as_of(key, value, before, limit, None)
    }

    /// `find_turns` in the overlay view `as_of` (decision 0012).
    pub fn find_turns_as_of(
        &self,
        key: &str,
        value: &str,
        before: TurnId,
        limit: u32,
        as_of: Option<u64>,
    ) -> Result<FoundTurns, EngineError> {
        if !is_indexed_label(key) {
            return Err(EngineError::InvalidArgument(format!(
                "label key {key:?} is not indexed store-wide (indexed: run_id, thread_id and \
                 keys starting \"idx.\"); filter a context's turn log by it instead"
            )));
        }
        if limit == 0 || limit > FIND_PAGE_MAX {
            return Err(EngineError::Limit {
                what: "turns per find page (1..=1000)",
                limit: FIND_PAGE_MAX as usize,
            });
        }
        let snapshot = self.inner.published.contexts.load();
        let turns = &self.inner.published.turns;
        let mut found = FoundTurns {
            turns: Vec::new(),
            next_before: TurnId::NONE,
        };
        let mut ids = snapshot.labelled(key, value, before).peekable();
        while let Some(turn_id) = ids.next() {
            // Collected: the index keeps its entries (their contexts are deleted or pruned).
            if turns.is_dead(turn_id) {
                continue;
            }
            let turn = turns.turn(turn_id)?;
            // A deleted context's turns, and turns below their context's floor, are no longer
            // found through it (the index keeps them until the garbage collector drops them);
            // another tenant's are left out before the limit, so a page says nothing of them.
            let reachable = snapshot.get(turn.context_id).is_some_and(|info| {
                !info.deleted && turn.depth >= info.floor_depth && self.scope.sees(info.tenant_id)
            });
            if !reachable {
                continue;
            }
            found.turns.push(TurnWithExtras {
                extras: turns.extras(&turn)?,
                turn: self.shown(snapshot.overlays.view(&turn, as_of)),
            });
            if found.turns.len() as u32 == limit {
                if ids.peek().is_some() {
                    found.next_before = turn_id;
                }
                break;
            }
        }
        Ok(found)
    }

    /// A durable turn's key, labels and links.
    pub fn turn_extras(&self, turn_id: TurnId) -> Result<TurnExtras, EngineError> {
        let turn = self.reader().scoped_turn(turn_id)?;
        self.inner.published.turns.extras(&turn)
    }

    /// The turn a context has under `key`: appended to it, or inherited (a fork's base chain,
    /// a clone's source up to the clone).
    pub fn turn_by_key(
        &self,
        context: &ContextRef,
        key: &[u8],
    ) -> Result<Option<TurnWithExtras>, EngineError> {
        self.turn_by_key_as_of(context, key, None)
    }

    /// `turn_by_key` in the overlay view `as_of` (decision 0012).
    pub fn turn_by_key_as_of(
        &self,
        context: &ContextRef,
        key: &[u8],
        as_of: Option<u64>,
    ) -> Result<Option<TurnWithExtras>, EngineError> {
        let context_id = self.resolve(context)?;
        let snapshot = self.inner.published.contexts.load();
        let turns = &self.inner.published.turns;
        let found = owners::turn_by_key(&snapshot, context_id, key, &|id| turns.turn_record(id))?;
        let floor = snapshot.get(context_id).map_or(0, |info| info.floor_depth);
        found
            .filter(|turn| turn.depth >= floor && !turns.is_dead(turn.turn_id))
            .map(|turn| {
                Ok(TurnWithExtras {
                    extras: turns.extras(&turn)?,
                    turn: self.shown(snapshot.overlays.view(&turn, as_of)),
                })
            })
            .transpose()
    }

    /// The context's window: from the latest summary turn of its chain to the head.
    pub fn window(
        &self,
        context: &ContextRef,
        limit: u32,
        options: PageOptions,
        cache: &mut dyn PayloadCache,
    ) -> Result<Page, EngineError> {
        let context_id = self.resolve(context)?;
        let page = self.reader().window(context_id, limit, options, cache);
        page.map_err(|error| self.shown_error(error))
    }

    /// Every turn the context owns, newest first across all its branches, then what it
    /// inherited (a clone: its source's turns up to the clone; a fork: its base's chain).
    pub fn turn_log(
        &self,
        context: &ContextRef,
        query: &LogQuery,
    ) -> Result<TurnLogPage, EngineError> {
        if query.limit == 0 || query.limit > LOG_PAGE_MAX {
            return Err(EngineError::Limit {
                what: "turns per turn-log page (1..=1000)",
                limit: LOG_PAGE_MAX as usize,
            });
        }
        let context_id = self.resolve(context)?;
        let snapshot = self.inner.published.contexts.load();
        let turns = &self.inner.published.turns;
        // Records, collected or not: a context chain passes below the floor (and a fork's
        // base may lie there) on its way to the turns above it.
        let lookup = |id| turns.turn_record(id);
        let phases = log_phases(&snapshot, context_id, &lookup)?;
        let floor = snapshot.get(context_id).map_or(0, |info| info.floor_depth);
        let page = TurnLogPage {
            turns: Vec::new(),
            next_cursor: None,
        };
        let start = query.cursor.unwrap_or(LogCursor {
            phase: 0,
            next: phases.first().map_or(TurnId::NONE, |phase| phase.start),
        });
        if query.cursor.is_some() {
            check_log_cursor(&phases, start, context_id, &lookup)?;
        }
        let mut walk = LogWalk {
            query,
            floor,
            snapshot: &snapshot,
            turns,
            page,
            scanned: 0,
            payload_bytes: 0,
        };
        for (index, phase) in phases.iter().enumerate().skip(start.phase as usize) {
            let next = if index == start.phase as usize {
                start.next
            } else {
                phase.start
            };
            if let Some(next) = walk.phase(phase, next, &lookup)? {
                walk.page.next_cursor = Some(LogCursor {
                    phase: index as u32,
                    next,
                });
                break;
            }
        }
        let mut page = walk.page;
        for found in &mut page.turns {
            found.turn = self.shown(found.turn);
        }
        Ok(page)
    }
}

/// A turn-log page being filled, newest first, within its limits.
struct LogWalk<'a> {
    query: &'a LogQuery,
    floor: u32,
    snapshot: &'a Contexts,
    turns: &'a TurnsView,
    page: TurnLogPage,
    /// Turns looked at (`LOG_SCAN_MAX`).
    scanned: u32,
    payload_bytes: u64,
}

impl LogWalk<'_> {
    /// Walks one phase back along its context chain from `next`; answers where the page
    /// ended (the next turn to look at) when it is full, else `None`.
    fn phase(
        &mut self,
        phase: &LogPhase,
        mut next: TurnId,
        lookup: &impl Fn(TurnId) -> Result<TurnRecord, EngineError>,
    ) -> Result<Option<TurnId>, EngineError> {
        let (query, turns) = (self.query, self.turns);
        while !next.is_none() {
            if self.page.turns.len() as u32 >= query.limit || self.scanned >= LOG_SCAN_MAX {
                return Ok(Some(next));
            }
            self.scanned += 1;
            let current = next;
            let turn = turns.turn_record(current)?;
            assert_eq!(
                turn.context_id, phase.owner.owner,
                "a context chain of another"
            );
            next = turn.context_prev_turn_id;
            // Below the floor (a prune), on whichever branch: no longer the context's (and
            // possibly collected).
            if turn.depth < self.floor
                || turns.is_dead(current)
                || !owners::on_chain(phase.owner.chain, &turn, lookup)?
            {
                continue;
            }
            let extras = turns.extras(&turn)?;
            let matches = query
                .labels
                .iter()
                .all(|wanted| extras.labels.contains(wanted));
            if !matches {
                continue;
            }
            let view = self.snapshot.overlays.view(&turn, query.as_of);
            self.payload_bytes += u64::from(view.payload_len);
            let over_budget =
                query.payload_bytes_max > 0 && self.payload_bytes > query.payload_bytes_max;
            if over_budget && !self.page.turns.is_empty() {
                return Ok(Some(current));
            }
            self.page.turns.push(TurnWithExtras { turn: view, extras });
        }
        Ok(None)
    }
}

/// One stretch of a context's turn log: `owner`'s own turns from `start` back along their
/// context chain (restricted to a fork's base chain when inherited through one).
struct LogPhase {
    owner: Owner,
    start: TurnId,
}

fn log_phases(
    contexts: &Contexts,
    context_id: ContextId,
    turn: &impl Fn(TurnId) -> Result<TurnRecord, EngineError>,
) -> Result<Vec<LogPhase>, EngineError> {
    let mut phases = Vec::new();
    owners::walk_owners(contexts, context_id, turn, |owner| {
        let last = contexts
            .get(owner.owner)
            .map_or(TurnId::NONE, |info| info.last_turn_id);
        // The owner's newest own turn that counts: all of them for the context itself, up to
        // the clone point or the fork base for an inherited one (that turn is the owner's).
        let start = if owner.upto >= last {
            last
        } else {
            newest_own_at_or_before(owner.owner, owner.upto, turn)?
        };
        phases.push(LogPhase { owner, start });
        Ok(false)
    })?;
    Ok(phases)
}

/// `owner`'s newest own turn at or before `upto` (the clone point or fork base is the owner's
/// own turn whenever it is not `NONE`; this checks it).
fn newest_own_at_or_before(
    owner: ContextId,
    upto: TurnId,
    turn: &impl Fn(TurnId) -> Result<TurnRecord, EngineError>,
) -> Result<TurnId, EngineError> {
    if upto.is_none() {
        return Ok(TurnId::NONE);
    }
    let record = turn(upto)?;
    if record.context_id == owner {
        Ok(upto)
    } else {
        // A fork base appended to another context than the owner walked to: nothing of the
        // owner's own turns is at or before it on this stretch.
        Ok(TurnId::NONE)
    }
}

/// A cursor comes from the caller: it must name a turn of its phase's owner, at or before
/// where that phase starts (the turn log's walk asserts it stays in that context).
fn check_log_cursor(
    phases: &[LogPhase],
    cursor: LogCursor,
    context_id: ContextId,
    lookup: &impl Fn(TurnId) -> Result<TurnRecord, EngineError>,
) -> Result<(), EngineError> {
    if cursor.next.is_none() {
        return Ok(());
    }
    let fits = match (phases.get(cursor.phase as usize), lookup(cursor.next)) {
        (Some(phase), Ok(turn)) => {
            turn.context_id == phase.owner.owner && turn.turn_id <= phase.start
        }
        _ => false,
    };
    if fits {
        return Ok(());
    }
    Err(EngineError::InvalidArgument(format!(
        "turn-log cursor (phase {}, turn {}) is not one of context {context_id}'s pages; page \
         with the cursor its previous page returned",
        cursor.phase, cursor.next
    )))
}
