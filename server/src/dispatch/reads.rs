//! Every read that answers TURNs: GET_TURN, GET_LAST, GET_BEFORE, GET_RANGE_BY_DEPTH,
//! GET_CHAIN (version 1); GET_TURN_BY_KEY, TURN_LOG, READ_PAGE, FIND_TURNS (version 2); each
//! of them in an overlay view (AS_OF, decision 0012). Synchronous: the payload cache is never
//! borrowed across an await.
//!
//! A page read goes in four steps: the query (`page_query`, `page_options`), the engine's
//! page assembly with this core's payload cache lent to it (`assemble_page`), each TURN's
//! overlay state (`page_overlays`), the answer (`turns_answer`, `page_answer`).

use bytes::Bytes;
use ctxstore_engine::turns::{LogCursor, LogQuery, TurnWithExtras};
use ctxstore_engine::{ContextRef, Page, PageOptions, PageQuery, PayloadMode, TurnId};
use ctxstore_protocol::reads;
use ctxstore_protocol::{
    ErrorCode, LogCursorWire, MessageType, OverlayWire, PageKind, PayloadWire, ReadsRequest,
    ReadsResponse, Response, TurnEntry, TurnEntryV2, TurnWire,
};

use super::{
    Scoped, context_ref, engine_error, error, extras_wire, overlay_wire, payload_mode,
    payload_wire, turn_wire,
};

/// An answer that carries TURNs (a message's own, or the family's `ReadsResponse`), with each
/// TURN's overlay state in wire order.
type Read<T> = Result<(T, Vec<OverlayWire>), Response>;

impl Scoped<'_> {
    /// A read in an overlay view (decision 0012): the same answer, each TURN's overlay state
    /// after it.
    pub(super) fn read_as_of(&self, as_of: u64, read: ReadsRequest) -> Result<Response, Response> {
        let (response, overlays) = self.answer_read(read, (as_of > 0).then_some(as_of))?;
        Ok(Response::Overlaid {
            response: Box::new(response),
            overlays,
        })
    }

    /// Every read that answers TURNs, in the overlay view `as_of` (`None`: the latest), with
    /// each TURN's overlay state in wire order (dropped unless the request asked for them).
    /// Synchronous: the payload cache is never borrowed across an await.
    pub(super) fn answer_read(
        &self,
        request: ReadsRequest,
        as_of: Option<u64>,
    ) -> Read<ReadsResponse> {
        // Each message's function returns its own answer: the variant that wraps it is the
        // only one that type-checks.
        match request {
            ReadsRequest::GetTurn(get) => self.turn(get, as_of).map(answered(ReadsResponse::Turn)),
            ReadsRequest::GetLast(get) => self.last(get, as_of).map(answered(ReadsResponse::Turns)),
            ReadsRequest::GetBefore(get) => {
                let read = self.before(get, as_of);
                read.map(answered(ReadsResponse::Turns))
            }
            ReadsRequest::GetRangeByDepth(get) => {
                let read = self.range_by_depth(get, as_of);
                read.map(answered(ReadsResponse::Turns))
            }
            ReadsRequest::GetChain(get) => {
                let read = self.chain(get, as_of);
                read.map(answered(ReadsResponse::Turns))
            }
            ReadsRequest::GetTurnByKey(get) => {
                let read = self.turn_by_key(get, as_of);
                read.map(answered(ReadsResponse::TurnInfo))
            }
            ReadsRequest::TurnLog(log) => {
                let read = self.turn_log(log, as_of);
                read.map(answered(ReadsResponse::TurnLogPage))
            }
            ReadsRequest::ReadPage(read) => {
                let read = self.read_page(read, as_of);
                read.map(answered(ReadsResponse::Page))
            }
            ReadsRequest::FindTurns(find) => {
                let read = self.find_turns(find, as_of);
                read.map(answered(ReadsResponse::FoundTurns))
            }
        }
    }

    /// GET_LAST: the `limit` newest turns of the context's chain.
    fn last(&self, get: reads::GetLast, as_of: Option<u64>) -> Read<reads::Turns> {
        let reads::GetLast {
            context,
            limit,
            read_flags,
        } = get;
        let context_id = self.context_id(context)?;
        self.page(PageQuery::Last { context_id, limit }, read_flags, as_of)
    }

    /// GET_BEFORE: the `limit` turns of the context's chain older than `before_turn_id`.
    fn before(&self, get: reads::GetBefore, as_of: Option<u64>) -> Read<reads::Turns> {
        let reads::GetBefore {
            context,
            before_turn_id,
            limit,
            read_flags,
        } = get;
        let before = TurnId(before_turn_id);
        let context_id = self.context_id(context)?;
        let query = PageQuery::Before {
            context_id,
            before,
            limit,
        };
        self.page(query, read_flags, as_of)
    }

    /// GET_RANGE_BY_DEPTH: the turns of the context's chain from `from_depth`.
    fn range_by_depth(
        &self,
        get: reads::GetRangeByDepth,
        as_of: Option<u64>,
    ) -> Read<reads::Turns> {
        let reads::GetRangeByDepth {
            context,
            from_depth,
            limit,
            read_flags,
        } = get;
        let context_id = self.context_id(context)?;
        let query = PageQuery::RangeByDepth {
            context_id,
            from_depth,
            limit,
        };
        self.page(query, read_flags, as_of)
    }

    /// GET_CHAIN: the chain from the root to `turn_id`, a window of it from `from_depth`.
    fn chain(&self, get: reads::GetChain, as_of: Option<u64>) -> Read<reads::Turns> {
        let reads::GetChain {
            turn_id,
            from_depth,
            limit,
            read_flags,
        } = get;
        let query = PageQuery::Chain {
            turn_id: TurnId(turn_id),
            from_depth,
            limit,
        };
        self.page(query, read_flags, as_of)
    }

    /// GET_TURN: the turn in the overlay view `as_of`.
    fn turn(&self, get: reads::GetTurn, as_of: Option<u64>) -> Read<TurnWire> {
        let turn = self.engine.turn_as_of(TurnId(get.turn_id), as_of);
        let turn = turn.map_err(engine_error)?;
        Ok((turn_wire(&turn), vec![overlay_wire(&turn)]))
    }

    /// GET_LAST, GET_BEFORE, GET_RANGE_BY_DEPTH, GET_CHAIN: one engine read (synchronous, so
    /// the cache is not borrowed across an await), then the TURNS answer.
    fn page(&self, query: PageQuery, flags: u32, as_of: Option<u64>) -> Read<reads::Turns> {
        let options = self.page_options(flags, as_of);
        let page = self.assemble_page(query, options)?;
        let overlays = page_overlays(&page);
        Ok((turns_answer(query, page), overlays))
    }

    /// READ_PAGE: GET_LAST / GET_BEFORE / GET_RANGE_BY_DEPTH, or the window, with extras.
    fn read_page(&self, read: reads::ReadPage, as_of: Option<u64>) -> Read<reads::Page> {
        let reads::ReadPage {
            context,
            kind,
            limit,
            read_flags: flags,
        } = read;
        let context_id = self.context_id(context)?;
        let options = self.page_options(flags, as_of);
        let page = match kind {
            PageKind::Window => {
                let context = ContextRef::Id(context_id);
                let mut cache = self.cache_for_read();
                let window = self.engine.window(&context, limit, options, &mut *cache);
                window.map_err(engine_error)?
            }
            PageKind::Last => self.assemble_page(PageQuery::Last { context_id, limit }, options)?,
            PageKind::Before { before_turn_id } => {
                let query = PageQuery::Before {
                    context_id,
                    before: TurnId(before_turn_id),
                    limit,
                };
                self.assemble_page(query, options)?
            }
            PageKind::Range { from_depth } => {
                let query = PageQuery::RangeByDepth {
                    context_id,
                    from_depth,
                    limit,
                };
                self.assemble_page(query, options)?
            }
        };
        let overlays = page_overlays(&page);
        Ok((page_answer(page), overlays))
    }

    /// What the engine may put in a page: payloads as the read flags ask, at most
    /// `response_bytes_max` of them, in the overlay view `as_of`.
    fn page_options(&self, flags: u32, as_of: Option<u64>) -> PageOptions {
        PageOptions {
            payloads: payload_mode(flags),
            payload_bytes_max: self.limits.response_bytes_max,
            as_of,
        }
    }

    /// The engine's page assembly (limits, budget, payloads), with this core's payload cache
    /// lent to it: the call never awaits.
    fn assemble_page(&self, query: PageQuery, options: PageOptions) -> Result<Page, Response> {
        let mut cache = self.cache_for_read();
        let page = self.engine.read_page(query, options, &mut *cache);
        page.map_err(engine_error)
    }

    /// GET_TURN_BY_KEY: the turn with its extras, or NOT_FOUND naming the key.
    fn turn_by_key(&self, get: reads::GetTurnByKey, as_of: Option<u64>) -> Read<reads::TurnInfo> {
        let reads::GetTurnByKey { context, key } = get;
        let found = self
            .engine
            .turn_by_key_as_of(&context_ref(context), &key, as_of);
        match found.map_err(engine_error)? {
            Some(turn) => Ok((
                reads::TurnInfo {
                    turn: Box::new(turn_wire(&turn.turn)),
                    extras: extras_wire(turn.extras.key, turn.extras.labels, turn.extras.links),
                },
                vec![overlay_wire(&turn.turn)],
            )),
            None => Err(error(
                ErrorCode::NotFound,
                format!("no turn has the key {:?}", String::from_utf8_lossy(&key)),
            )),
        }
    }

    /// TURN_LOG's query: the payload budget applies only when payloads go too.
    fn log_query(
        &self,
        labels: Vec<(String, String)>,
        cursor: Option<LogCursorWire>,
        limit: u32,
        mode: PayloadMode,
        as_of: Option<u64>,
    ) -> LogQuery {
        LogQuery {
            labels,
            cursor: cursor.map(|cursor| LogCursor {
                phase: cursor.phase,
                next: TurnId(cursor.next),
            }),
            limit,
            payload_bytes_max: match mode {
                PayloadMode::None => 0,
                _ => self.limits.response_bytes_max,
            },
            as_of,
        }
    }

    /// TURN_LOG: one engine page (cut to the payload budget when payloads go too), then the
    /// payloads through the core's cache.
    fn turn_log(&self, log: reads::TurnLog, as_of: Option<u64>) -> Read<reads::TurnLogPage> {
        let reads::TurnLog {
            context,
            labels,
            cursor,
            limit,
            read_flags,
        } = log;
        let mode = payload_mode(read_flags);
        let query = self.log_query(labels, cursor, limit, mode, as_of);
        let page = self
            .engine
            .turn_log(&context_ref(context), &query)
            .map_err(engine_error)?;
        let (entries, overlays) = self.log_entries(page.turns, mode)?;
        let answer = reads::TurnLogPage {
            next_cursor: page.next_cursor.map(|cursor| LogCursorWire {
                phase: cursor.phase,
                next: cursor.next.0,
            }),
            entries,
        };
        Ok((answer, overlays))
    }

    /// A turn-log page's entries, their payloads read through the core's cache, and their
    /// overlay states.
    fn log_entries(
        &self,
        turns: Vec<TurnWithExtras>,
        mode: PayloadMode,
    ) -> Result<(Vec<TurnEntryV2>, Vec<OverlayWire>), Response> {
        let mut cache = self.cache_for_read();
        let mut entries = Vec::with_capacity(turns.len());
        let mut overlays = Vec::with_capacity(turns.len());
        for turn in turns {
            overlays.push(overlay_wire(&turn.turn));
            let payload = match mode {
                PayloadMode::None => PayloadWire::absent(),
                // Redacted: no bytes to look up anywhere, cache included.
                _ if turn.turn.redacted => PayloadWire::raw(Bytes::new()),
                mode => {
                    let payload =
                        self.engine
                            .read_payload(turn.turn.payload_hash, mode, &mut *cache);
                    payload_wire(payload.map_err(engine_error)?)
                }
            };
            entries.push(TurnEntryV2 {
                turn: turn_wire(&turn.turn),
                extras: extras_wire(turn.extras.key, turn.extras.labels, turn.extras.links),
                payload,
            });
        }
        Ok((entries, overlays))
    }

    /// FIND_TURNS: one store-wide page of the turns with a label, newest first.
    fn find_turns(&self, find: reads::FindTurns, as_of: Option<u64>) -> Read<reads::FoundTurns> {
        let reads::FindTurns {
            key,
            value,
            before_turn_id,
            limit,
        } = find;
        let before = TurnId(before_turn_id);
        let found = self
            .engine
            .find_turns_as_of(&key, &value, before, limit, as_of)
            .map_err(engine_error)?;
        let overlays = found
            .turns
            .iter()
            .map(|turn| overlay_wire(&turn.turn))
            .collect();
        let answer = reads::FoundTurns {
            next_before: found.next_before.0,
            turns: found
                .turns
                .into_iter()
                .map(|turn| {
                    let extras = turn.extras;
                    let extras = extras_wire(extras.key, extras.labels, extras.links);
                    (turn_wire(&turn.turn), extras)
                })
                .collect(),
        };
        Ok((answer, overlays))
    }
}

/// Each TURN's overlay state, in the page's order.
fn page_overlays(page: &Page) -> Vec<OverlayWire> {
    page.entries
        .iter()
        .map(|entry| overlay_wire(&entry.turn))
        .collect()
}

/// A version-1 page read's TURNS answer.
fn turns_answer(query: PageQuery, page: Page) -> reads::Turns {
    let message_type = match query {
        PageQuery::Last { .. } => MessageType::GetLast,
        PageQuery::Before { .. } => MessageType::GetBefore,
        PageQuery::RangeByDepth { .. } => MessageType::GetRangeByDepth,
        PageQuery::Chain { .. } => MessageType::GetChain,
    };
    let entries = page
        .entries
        .into_iter()
        .map(|entry| TurnEntry {
            turn: turn_wire(&entry.turn),
            payload: entry.payload.map_or_else(PayloadWire::absent, payload_wire),
        })
        .collect();
    reads::Turns {
        message_type,
        next_before: page.next_before.0,
        tip_depth: page.tip_depth,
        entries,
    }
}

/// READ_PAGE's PAGE answer: the turns with their extras.
fn page_answer(page: Page) -> reads::Page {
    reads::Page {
        next_before: page.next_before.0,
        tip_depth: page.tip_depth,
        entries: page
            .entries
            .into_iter()
            .map(|entry| TurnEntryV2 {
                turn: turn_wire(&entry.turn),
                extras: extras_wire(entry.extras.key, entry.extras.labels, entry.extras.links),
                payload: entry.payload.map_or_else(PayloadWire::absent, payload_wire),
            })
            .collect(),
    }
}

/// A message's answer in its `ReadsResponse` variant, the overlay states kept.
fn answered<T>(
    variant: impl FnOnce(T) -> ReadsResponse,
) -> impl FnOnce((T, Vec<OverlayWire>)) -> (ReadsResponse, Vec<OverlayWire>) {
    move |(answer, overlays)| (variant(answer), overlays)
}
