//! Every read that answers TURNs: GET_TURN, GET_LAST, GET_BEFORE, GET_RANGE_BY_DEPTH,
//! GET_CHAIN (version 1); GET_TURN_BY_KEY, TURN_LOG, READ_PAGE, FIND_TURNS (version 2); each
//! of them in an overlay view (AS_OF, decision 0012). Synchronous: the payload cache is never
//! borrowed across an await.

use bytes::Bytes;
use ctxstore_engine::turns::{LogCursor, LogQuery};
use ctxstore_engine::{ContextRef, Page, PageOptions, PageQuery, PayloadMode, TurnId};
use ctxstore_protocol::{
    ContextRef as ContextRefWire, ErrorCode, LogCursorWire, MessageType, OverlayWire, PageKind,
    PayloadWire, Request, Response, TurnEntry, TurnEntryV2,
};

use super::{
    Dispatcher, context_ref, engine_error, error, extras_wire, overlay_wire, payload_mode,
    payload_wire, turn_wire,
};

impl Dispatcher {
    /// A read in an overlay view (decision 0012): the same answer, each TURN's overlay state
    /// after it.
    pub(super) fn read_as_of(&self, as_of: u64, read: Request) -> Result<Response, Response> {
        let (response, overlays) = self.read(read, (as_of > 0).then_some(as_of))?;
        Ok(Response::Overlaid {
            response: Box::new(response),
            overlays,
        })
    }

    /// Every read that answers TURNs, in the overlay view `as_of` (`None`: the latest), with
    /// each TURN's overlay state in wire order (dropped unless the request asked for them).
    /// Synchronous: the payload cache is never borrowed across an await.
    pub(super) fn read(
        &self,
        request: Request,
        as_of: Option<u64>,
    ) -> Result<(Response, Vec<OverlayWire>), Response> {
        match request {
            Request::GetTurn { turn_id } => {
                let turn = self.engine.turn_as_of(TurnId(turn_id), as_of);
                let turn = turn.map_err(engine_error)?;
                Ok((Response::Turn(turn_wire(&turn)), vec![overlay_wire(&turn)]))
            }
            Request::GetLast {
                context,
                limit,
                read_flags,
            } => {
                let context_id = self.context_id(context)?;
                self.page(PageQuery::Last { context_id, limit }, read_flags, as_of)
            }
            Request::GetBefore {
                context,
                before_turn_id,
                limit,
                read_flags,
            } => {
                let query = PageQuery::Before {
                    context_id: self.context_id(context)?,
                    before: TurnId(before_turn_id),
                    limit,
                };
                self.page(query, read_flags, as_of)
            }
            Request::GetRangeByDepth {
                context,
                from_depth,
                limit,
                read_flags,
            } => {
                let query = PageQuery::RangeByDepth {
                    context_id: self.context_id(context)?,
                    from_depth,
                    limit,
                };
                self.page(query, read_flags, as_of)
            }
            Request::GetChain {
                turn_id,
                from_depth,
                limit,
                read_flags,
            } => {
                let query = PageQuery::Chain {
                    turn_id: TurnId(turn_id),
                    from_depth,
                    limit,
                };
                self.page(query, read_flags, as_of)
            }
            Request::GetTurnByKey { context, key } => {
                let found = self
                    .engine
                    .turn_by_key_as_of(&context_ref(context), &key, as_of);
                match found.map_err(engine_error)? {
                    Some(turn) => Ok((
                        Response::TurnInfo {
                            turn: Box::new(turn_wire(&turn.turn)),
                            extras: extras_wire(turn.extras),
                        },
                        vec![overlay_wire(&turn.turn)],
                    )),
                    None => Err(error(
                        ErrorCode::NotFound,
                        format!("no turn has the key {:?}", String::from_utf8_lossy(&key)),
                    )),
                }
            }
            Request::TurnLog {
                context,
                labels,
                cursor,
                limit,
                read_flags,
            } => self.turn_log(
                context_ref(context),
                labels,
                cursor,
                limit,
                read_flags,
                as_of,
            ),
            Request::ReadPage {
                context,
                kind,
                limit,
                read_flags,
            } => self.read_page(context, kind, limit, read_flags, as_of),
            Request::FindTurns {
                key,
                value,
                before_turn_id,
                limit,
            } => {
                let found = self
                    .engine
                    .find_turns_as_of(&key, &value, TurnId(before_turn_id), limit, as_of)
                    .map_err(engine_error)?;
                let overlays = found
                    .turns
                    .iter()
                    .map(|turn| overlay_wire(&turn.turn))
                    .collect();
                Ok((
                    Response::FoundTurns {
                        next_before: found.next_before.0,
                        turns: found
                            .turns
                            .into_iter()
                            .map(|turn| (turn_wire(&turn.turn), extras_wire(turn.extras)))
                            .collect(),
                    },
                    overlays,
                ))
            }
            other => Err(error(
                ErrorCode::BadFrame,
                format!("{} returns no turns", other.message_type().name()),
            )),
        }
    }

    /// TURN_LOG: one engine page (cut to the payload budget when payloads go too), then the
    /// payloads through the core's cache.
    fn turn_log(
        &self,
        context: ContextRef,
        labels: Vec<(String, String)>,
        cursor: Option<LogCursorWire>,
        limit: u32,
        flags: u32,
        as_of: Option<u64>,
    ) -> Result<(Response, Vec<OverlayWire>), Response> {
        let mode = payload_mode(flags);
        let query = LogQuery {
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
        };
        let page = self
            .engine
            .turn_log(&context, &query)
            .map_err(engine_error)?;
        let mut cache = self.payload_cache.borrow_mut();
        let mut entries = Vec::with_capacity(page.turns.len());
        let mut overlays = Vec::with_capacity(page.turns.len());
        for turn in page.turns {
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
                extras: extras_wire(turn.extras),
                payload,
            });
        }
        let response = Response::TurnLog {
            next_cursor: page.next_cursor.map(|cursor| LogCursorWire {
                phase: cursor.phase,
                next: cursor.next.0,
            }),
            entries,
        };
        Ok((response, overlays))
    }

    /// READ_PAGE: GET_LAST / GET_BEFORE / GET_RANGE_BY_DEPTH, or the window, with extras.
    fn read_page(
        &self,
        context: ContextRefWire,
        kind: PageKind,
        limit: u32,
        flags: u32,
        as_of: Option<u64>,
    ) -> Result<(Response, Vec<OverlayWire>), Response> {
        let context_id = self.context_id(context)?;
        let options = PageOptions {
            payloads: payload_mode(flags),
            payload_bytes_max: self.limits.response_bytes_max,
            as_of,
        };
        let mut cache = self.payload_cache.borrow_mut();
        let page = match kind {
            PageKind::Window => {
                let context = ContextRef::Id(context_id);
                self.engine.window(&context, limit, options, &mut *cache)
            }
            PageKind::Last => {
                let query = PageQuery::Last { context_id, limit };
                self.engine.read_page(query, options, &mut *cache)
            }
            PageKind::Before { before_turn_id } => {
                let query = PageQuery::Before {
                    context_id,
                    before: TurnId(before_turn_id),
                    limit,
                };
                self.engine.read_page(query, options, &mut *cache)
            }
            PageKind::Range { from_depth } => {
                let query = PageQuery::RangeByDepth {
                    context_id,
                    from_depth,
                    limit,
                };
                self.engine.read_page(query, options, &mut *cache)
            }
        };
        let page = page.map_err(engine_error)?;
        let overlays = page
            .entries
            .iter()
            .map(|entry| overlay_wire(&entry.turn))
            .collect();
        let response = Response::Page {
            next_before: page.next_before.0,
            tip_depth: page.tip_depth,
            entries: page
                .entries
                .into_iter()
                .map(|entry| TurnEntryV2 {
                    turn: turn_wire(&entry.turn),
                    extras: extras_wire(entry.extras),
                    payload: entry.payload.map_or_else(PayloadWire::absent, payload_wire),
                })
                .collect(),
        };
        Ok((response, overlays))
    }

    /// GET_LAST, GET_BEFORE, GET_RANGE_BY_DEPTH, GET_CHAIN: one engine read (synchronous, so
    /// the cache is not borrowed across an await), then the TURNS response.
    fn page(
        &self,
        query: PageQuery,
        flags: u32,
        as_of: Option<u64>,
    ) -> Result<(Response, Vec<OverlayWire>), Response> {
        let options = PageOptions {
            payloads: payload_mode(flags),
            payload_bytes_max: self.limits.response_bytes_max,
            as_of,
        };
        let mut cache = self.payload_cache.borrow_mut();
        let page = self.engine.read_page(query, options, &mut *cache);
        let page = page.map_err(engine_error)?;
        let overlays = page
            .entries
            .iter()
            .map(|entry| overlay_wire(&entry.turn))
            .collect();
        Ok((turns_response(query, page), overlays))
    }
}

fn turns_response(query: PageQuery, page: Page) -> Response {
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
    Response::Turns {
        message_type,
        next_before: page.next_before.0,
        tip_depth: page.tip_depth,
        entries,
    }
}
