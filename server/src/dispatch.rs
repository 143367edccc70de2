//! From a decoded request to a response: a thin translator between the wire (`protocol`) and
//! the engine. Every decision — read limits, page assembly, payload budget, which payload form
//! to send — is the engine's (`read.rs`); this module only maps types and errors.
//! Runs on the network core that owns the connection; the engine's futures only wait on
//! channels, so a core serves many requests at once.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use ctxstore_engine::contexts::{KvItem, ListCursor, ListQuery};
use ctxstore_engine::format::turn_extras::TurnExtras;
use ctxstore_engine::turns::{LogCursor, LogQuery};
use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, ChunkRef, Compression, ContextHead, ContextId,
    ContextRef, ContextView, Engine, EngineError, ErrorKind, NewContext, Page, PageOptions,
    PageQuery, Parent, Payload, PayloadMode, Turn, TurnId, TurnOptions,
};
use ctxstore_protocol::{
    AppendedWire, BackupWire, ChunkBaseWire, ChunkWire, ContextHeadWire, ContextInfoWire,
    ContextRef as ContextRefWire, ErrorCode, ExtrasWire, GcStatsWire, GcWire, Hash32, KvItemWire,
    ListCursorWire, LogCursorWire, MessageType, OverlayWire, PageKind, ParentWire, PayloadEncoding,
    PayloadSpec, PayloadWire, Request, Response, SentChunkWire, StatsWire, TurnEntry, TurnEntryV2,
    TurnSpec, TurnWire, read_flags,
};

use crate::config::ServerLimits;
use crate::counters::ServerCounters;
use crate::payload_cache::PayloadCache;

/// What every request handler needs; one per network core, shared by its connections.
#[derive(Debug)]
pub struct Dispatcher {
    pub engine: Engine,
    pub limits: ServerLimits,
    pub counters: Arc<ServerCounters>,
    /// This core's raw payloads (never borrowed across an await).
    pub payload_cache: RefCell<PayloadCache>,
}

impl Dispatcher {
    /// Answers one request (HELLO is handled by the connection before it gets here).
    pub async fn handle(&self, request: Request, version: u16) -> Response {
        let response = self
            .answer(request)
            .await
            .unwrap_or_else(|response| response);
        in_version(response, version)
    }

    /// The answer to a request; `Err` holds an ERROR response.
    async fn answer(&self, request: Request) -> Result<Response, Response> {
        let message_type = request.message_type();
        match request {
            Request::Hello { .. } => Err(error(
                ErrorCode::BadFrame,
                "HELLO may only be sent once, first",
            )),
            Request::Ping { nonce } => Ok(Response::Pong { nonce }),
            Request::CtxCreate { base_turn_id: 0 } => {
                context(message_type, self.engine.create_context().await)
            }
            Request::CtxCreate { base_turn_id }
            | Request::CtxFork {
                turn_id: base_turn_id,
            } => context(message_type, self.engine.fork(TurnId(base_turn_id)).await),
            Request::GetHead { context } => {
                let context_id = self.context_id(context)?;
                self::context(message_type, self.engine.head(context_id).await)
            }
            Request::AppendTurn {
                context,
                expected_head,
                type_tag,
                codec,
                payload,
            } => {
                let context_id = self.context_id(context)?;
                let payload = AppendPayload::Bytes(payload);
                let append = append_request(context_id, expected_head, type_tag, codec, payload);
                self.append(message_type, append).await
            }
            Request::AppendTurnByHash {
                context,
                expected_head,
                type_tag,
                codec,
                payload_hash,
            } => {
                let context_id = self.context_id(context)?;
                let payload = AppendPayload::StoredBlob(BlobHash(payload_hash.0));
                let append = append_request(context_id, expected_head, type_tag, codec, payload);
                self.append(message_type, append).await
            }
            Request::GetTurn { .. }
            | Request::GetLast { .. }
            | Request::GetBefore { .. }
            | Request::GetRangeByDepth { .. }
            | Request::GetChain { .. }
            | Request::GetTurnByKey { .. }
            | Request::TurnLog { .. }
            | Request::ReadPage { .. }
            | Request::FindTurns { .. } => self.read(request, None).map(|(response, _)| response),
            // A read in an overlay view (decision 0012): the same answer, each TURN's overlay
            // state after it.
            Request::AsOf { as_of, read } => {
                let (response, overlays) = self.read(*read, (as_of > 0).then_some(as_of))?;
                Ok(Response::Overlaid {
                    response: Box::new(response),
                    overlays,
                })
            }
            Request::PatchTurn { turn_id, payload } => {
                let patched = self.engine.patch_turn(TurnId(turn_id), payload.clone());
                let patched = patched.await.map_err(engine_error)?;
                // Like an append's: new bytes this core hashed, likely read again soon.
                self.payload_cache
                    .borrow_mut()
                    .insert(patched.turn.payload_hash, &payload);
                Ok(Response::Patched {
                    turn_id,
                    overlay_seq: patched.overlay_seq,
                    payload_hash: Hash32(patched.turn.payload_hash.0),
                    payload_len: patched.turn.payload_len,
                })
            }
            // Nothing to take out of the payload caches: reads look at the overlays (a
            // redacted turn has no payload to look up) and at the purged blobs before any
            // cache (`read.rs`).
            Request::RedactTurn { turn_id } => {
                let redacted = self.engine.redact_turn(TurnId(turn_id)).await;
                let redacted = redacted.map_err(engine_error)?;
                Ok(Response::Redacted {
                    turn_id,
                    overlay_seq: redacted.overlay_seq,
                })
            }
            Request::PurgeBlob { hash } => {
                let purged = self.engine.purge_blob(BlobHash(hash.0)).await;
                let purged = purged.map_err(engine_error)?;
                Ok(Response::Purged {
                    payload_hash: Hash32(purged.payload_hash.0),
                    turns_redacted: purged.turns_redacted,
                    overlay_seq: purged.overlay_seq,
                })
            }
            Request::GetBlob { hash, read_flags } => self.blob(BlobHash(hash.0), read_flags),
            Request::HasBlobs { hashes } => self.has_blobs(hashes).await,
            Request::Stats => Ok(Response::Stats(self.stats().0)),
            Request::StatsEx => {
                let (stats, gc) = self.stats();
                let stats = Box::new(stats);
                Ok(Response::StatsEx { stats, gc })
            }
            Request::Gc => self.gc().await,
            Request::CtxOpen {
                base_turn_id,
                get_or_create,
                clone_from,
                name,
                tags,
            } => {
                let new = NewContext {
                    base: TurnId(base_turn_id),
                    clone_from: clone_from.map(context_ref),
                    name,
                    tags,
                    get_or_create,
                };
                let created = self.engine.create(new).await.map_err(engine_error)?;
                Ok(Response::Opened {
                    info: context_info(created.context),
                    created: created.created,
                })
            }
            Request::CtxShow { context } => {
                let view = self.engine.context(&context_ref(context));
                info_response(message_type, view)
            }
            Request::CtxTag {
                context,
                expected_head,
                set,
                remove,
            } => {
                let context = context_ref(context);
                let expected_head = expected_head.map(TurnId);
                let view = self
                    .engine
                    .update_tags(&context, set, remove, expected_head)
                    .await;
                info_response(message_type, view)
            }
            Request::CtxList {
                tags,
                name_prefix,
                updated_after_unix_ms,
                updated_before_unix_ms,
                cursor,
                limit,
            } => {
                let query = ListQuery {
                    tags,
                    name_prefix,
                    updated_after_unix_ms,
                    updated_before_unix_ms,
                    cursor: cursor.map(|cursor| match cursor {
                        ListCursorWire::Id(context_id) => ListCursor::Id(ContextId(context_id)),
                        ListCursorWire::Name(name) => ListCursor::Name(name),
                    }),
                    limit,
                };
                self.list(&query)
            }
            Request::CtxName { context, name } => {
                let view = self.engine.set_name(&context_ref(context), name).await;
                info_response(message_type, view)
            }
            Request::Backup { dir } => self.backup(dir).await,
            Request::CtxDelete { context } => {
                let view = self.engine.delete_context(&context_ref(context)).await;
                retention_response(message_type, view)
            }
            Request::CtxPrune { context, keep } => {
                let view = self.engine.prune_context(&context_ref(context), keep).await;
                retention_response(message_type, view)
            }
            Request::CtxTtl {
                context,
                set,
                ttl_ms,
            } => {
                let context = context_ref(context);
                let view = if set {
                    let ttl_ms = (ttl_ms > 0).then_some(ttl_ms);
                    self.engine.set_context_ttl(&context, ttl_ms).await
                } else {
                    self.engine.context(&context)
                };
                retention_response(message_type, view)
            }
            Request::KvPut {
                context,
                if_absent,
                entries,
            } => {
                let entries = entries
                    .into_iter()
                    .map(|(key, value)| (key.to_vec(), value))
                    .collect();
                let context = context_ref(context);
                let put = self.engine.kv_put(&context, entries, if_absent);
                put.await.map_err(engine_error)?;
                Ok(Response::Done { message_type })
            }
            Request::KvGet {
                context,
                key,
                read_flags,
            } => self.kv_get(context_ref(context), &key, read_flags),
            Request::KvDelete { context, keys } => {
                let keys = keys.into_iter().map(|key| key.to_vec()).collect();
                let context = context_ref(context);
                let delete = self.engine.kv_delete(&context, keys);
                delete.await.map_err(engine_error)?;
                Ok(Response::Done { message_type })
            }
            Request::KvList {
                context,
                prefix,
                after,
                limit,
            } => {
                let after = (!after.is_empty()).then_some(&after[..]);
                let items = self
                    .engine
                    .kv_scan(&context_ref(context), &prefix, after, limit)
                    .map_err(engine_error)?;
                Ok(Response::KvList {
                    items: items.into_iter().map(kv_item_wire).collect(),
                })
            }
            Request::AppendTurns {
                context,
                expected_head,
                turns,
            } => self.append_turns(context, expected_head, turns).await,
            Request::PutChunked {
                payload_hash,
                base,
                chunks,
                sent,
            } => self.put_chunked(payload_hash, base, chunks, sent).await,
        }
    }

    /// Every read that answers TURNs, in the overlay view `as_of` (`None`: the latest), with
    /// each TURN's overlay state in wire order (dropped unless the request asked for them).
    /// Synchronous: the payload cache is never borrowed across an await.
    fn read(
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

    /// APPEND_TURNS: one turn through the append pipeline, several as one batch append (one
    /// group commit, all or none).
    async fn append_turns(
        &self,
        context: ContextRefWire,
        expected_head: Option<u64>,
        specs: Vec<TurnSpec>,
    ) -> Result<Response, Response> {
        let context_id = self.context_id(context)?;
        let requests: Vec<AppendRequest> = specs
            .into_iter()
            .enumerate()
            .map(|(index, spec)| AppendRequest {
                context_id,
                expected_head: expected_head.filter(|_| index == 0).map(TurnId),
                type_tag: spec.type_tag,
                codec: spec.codec,
                payload: match spec.payload {
                    PayloadSpec::Bytes(bytes) => AppendPayload::Bytes(bytes),
                    PayloadSpec::Hash(hash) => AppendPayload::StoredBlob(BlobHash(hash.0)),
                },
                options: TurnOptions {
                    parent: match spec.parent {
                        ParentWire::Head => Parent::Head,
                        ParentWire::Root => Parent::Root,
                        ParentWire::Turn(turn_id) => Parent::Turn(TurnId(turn_id)),
                    },
                    key: (!spec.extras.key.is_empty()).then_some(spec.extras.key),
                    labels: spec.extras.labels,
                    links: spec.extras.links.into_iter().map(TurnId).collect(),
                    summary: spec.summary,
                },
            })
            .collect();
        let appended = if requests.len() == 1 {
            let request = requests
                .into_iter()
                .next()
                .map(|request| self.engine.append(request));
            match request {
                Some(append) => vec![append.await.map_err(engine_error)?],
                None => Vec::new(),
            }
        } else {
            let batch = self.engine.append_batch(requests).await;
            batch.map_err(engine_error)?
        };
        Ok(Response::AppendedTurns {
            turns: appended
                .iter()
                .map(|appended| AppendedWire {
                    turn: turn_wire(&appended.turn),
                    deduped: appended.deduped,
                    existing: appended.existing,
                })
                .collect(),
        })
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

    /// The ContextID a request names: an id as it is (the engine checks it where it is used,
    /// as in version 1), a name through the published names.
    fn context_id(&self, context: ContextRefWire) -> Result<ContextId, Response> {
        match context {
            ContextRefWire::Id(context_id) => Ok(ContextId(context_id)),
            ContextRefWire::Name(name) => self
                .engine
                .resolve(&ContextRef::Name(name))
                .map_err(engine_error),
        }
    }

    /// CTX_LIST: one engine page, cut shorter when its CONTEXT_INFOs would pass the response
    /// byte budget (1,000 contexts with 32 tags of 1 KiB each could); the cursor then points
    /// after the last one sent.
    fn list(&self, query: &ListQuery) -> Result<Response, Response> {
        let page = self.engine.list_contexts(query).map_err(engine_error)?;
        let mut next_cursor = page.next_cursor;
        let mut contexts = Vec::with_capacity(page.contexts.len());
        let mut bytes = 0u64;
        let total = page.contexts.len();
        for (index, view) in page.contexts.into_iter().enumerate() {
            bytes += context_info_bytes(&view);
            if bytes > self.limits.response_bytes_max && !contexts.is_empty() {
                let last = contexts.last().map(|(view, _)| view);
                next_cursor = last.map(|last| ListCursor::after(last, query));
                debug_assert!(index < total);
                break;
            }
            let info = context_info(view.clone());
            contexts.push((view, info));
        }
        Ok(Response::ContextList {
            next_cursor: next_cursor.map(|cursor| match cursor {
                ListCursor::Id(context_id) => ListCursorWire::Id(context_id.0),
                ListCursor::Name(name) => ListCursorWire::Name(name),
            }),
            contexts: contexts.into_iter().map(|(_, info)| info).collect(),
        })
    }

    /// KV_GET: the entry from the published snapshot, its value through the payload cache
    /// like any payload.
    fn kv_get(&self, context: ContextRef, key: &Bytes, flags: u32) -> Result<Response, Response> {
        let item = self.engine.kv_get(&context, key).map_err(engine_error)?;
        let Some(item) = item else {
            let key = String::from_utf8_lossy(key);
            let context = match &context {
                ContextRef::Id(context_id) => context_id.to_string(),
                ContextRef::Name(name) => format!("@{name}"),
            };
            // detail 1: the context exists, the key does not (0: no such context).
            return Err(Response::Error {
                code: ErrorCode::NotFound,
                detail: KV_KEY_MISSING,
                message: format!("context {context} has no key {key:?}"),
            });
        };
        let mode = payload_mode(flags | read_flags::WITH_PAYLOADS);
        let mut cache = self.payload_cache.borrow_mut();
        let payload = self.engine.read_payload(item.value_hash, mode, &mut *cache);
        let payload = payload.map_err(engine_error)?;
        Ok(Response::KvValue {
            value_hash: Hash32(item.value_hash.0),
            payload: payload_wire(payload),
        })
    }

    async fn append(
        &self,
        message_type: MessageType,
        request: AppendRequest,
    ) -> Result<Response, Response> {
        // The agent reads its context again before its next model call: keep new bytes (this
        // core hashed them, so they are verified) for the payload cache.
        let bytes = match &request.payload {
            AppendPayload::Bytes(bytes) => Some(bytes.clone()),
            AppendPayload::StoredBlob(_) => None,
        };
        let appended = self.engine.append(request).await.map_err(engine_error)?;
        if let Some(bytes) = bytes {
            self.payload_cache
                .borrow_mut()
                .insert(appended.turn.payload_hash, &bytes);
        }
        Ok(Response::Appended {
            message_type,
            turn: turn_wire(&appended.turn),
            deduped: appended.deduped,
        })
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

    fn blob(&self, hash: BlobHash, flags: u32) -> Result<Response, Response> {
        let mode = payload_mode(flags | read_flags::WITH_PAYLOADS);
        let mut cache = self.payload_cache.borrow_mut();
        let payload = self.engine.read_payload(hash, mode, &mut *cache);
        payload
            .map(|payload| Response::Blob(payload_wire(payload)))
            .map_err(engine_error)
    }

    async fn has_blobs(&self, hashes: Vec<Hash32>) -> Result<Response, Response> {
        if hashes.len() > self.limits.has_blobs_max as usize {
            return Err(error(
                ErrorCode::TooLarge,
                format!(
                    "{} hashes; the limit is {} per HAS_BLOBS",
                    hashes.len(),
                    self.limits.has_blobs_max
                ),
            ));
        }
        let mut present = Vec::with_capacity(hashes.len());
        for hash in hashes {
            present.push(self.engine.has_blob(BlobHash(hash.0)).await);
        }
        Ok(Response::HasBlobs { present })
    }

    /// PUT_CHUNKED (issue 16): the engine checks every sent chunk against its hash and the
    /// rebuilt payload against `payload_hash`; a chunk neither sent nor stored is NOT_FOUND
    /// naming the first 16 missing indexes, and nothing is written. The payload's bytes are
    /// not kept for the payload cache: the engine rebuilds and verifies them on a read, and
    /// most of them were never on this connection.
    async fn put_chunked(
        &self,
        payload_hash: Hash32,
        base: Option<ChunkBaseWire>,
        chunks: Vec<ChunkWire>,
        sent: Vec<SentChunkWire>,
    ) -> Result<Response, Response> {
        let base = base.map(|base| (BlobHash(base.hash.0), base.kept));
        let chunks = chunks
            .into_iter()
            .map(|chunk| ChunkRef {
                hash: BlobHash(chunk.hash.0),
                len: chunk.len,
            })
            .collect();
        let sent = sent
            .into_iter()
            .map(|chunk| (chunk.index, chunk.bytes))
            .collect();
        let hash = BlobHash(payload_hash.0);
        let stored = self.engine.put_chunked(hash, base, chunks, sent).await;
        let already_stored = stored.map_err(engine_error)?;
        // Stored now (a collection could only take it after a grace interval).
        let payload_len = self.engine.blob_len(hash).map_or(0, u64::from);
        Ok(Response::ChunkedStored {
            payload_hash,
            payload_len,
            already_stored,
        })
    }

    /// STATS' fields and the garbage collector's (STATS_EX), from one look at the engine.
    fn stats(&self) -> (StatsWire, GcStatsWire) {
        let store = self.engine.stats();
        let counters = &self.counters;
        let gc = GcStatsWire {
            live_bytes: store.live_bytes,
            dead_bytes: store.dead_bytes,
            gc_runs: store.gc_runs,
            bytes_reclaimed_total: store.bytes_reclaimed_total,
        };
        let stats = StatsWire {
            turns: store.turns,
            contexts: store.contexts,
            blobs: store.blobs,
            logical_bytes: store.logical_bytes,
            unique_bytes: store.unique_bytes,
            stored_bytes: store.stored_bytes,
            dedup_hits: store.dedup_hits,
            read_only: store.read_only,
            connections: counters.connections.load(Ordering::Relaxed),
            requests_total: counters.requests.load(Ordering::Relaxed),
            errors_total: counters.errors.load(Ordering::Relaxed),
            uptime_ms: counters.started.elapsed().as_millis() as u64,
        };
        (stats, gc)
    }
}

fn append_request(
    context_id: ContextId,
    expected_head: Option<u64>,
    type_tag: u64,
    codec: u32,
    payload: AppendPayload,
) -> AppendRequest {
    AppendRequest {
        context_id,
        expected_head: expected_head.map(TurnId),
        type_tag,
        codec,
        payload,
        options: Default::default(),
    }
}

/// The read flags as the engine's payload mode: ACCEPT_ZSTD lets the engine send payloads too
/// large for the cache as stored, for the client to inflate and verify.
fn payload_mode(flags: u32) -> PayloadMode {
    if flags & read_flags::WITH_PAYLOADS == 0 {
        PayloadMode::None
    } else if flags & read_flags::ACCEPT_ZSTD != 0 {
        PayloadMode::RawOrStored
    } else {
        PayloadMode::Raw
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

fn payload_wire(payload: Payload) -> PayloadWire {
    match payload {
        Payload::Raw(bytes) => PayloadWire::raw(bytes),
        Payload::Stored(stored) => PayloadWire {
            encoding: match stored.compression {
                // The engine hands chunked blobs over rebuilt (raw), never as a manifest.
                Compression::Raw | Compression::Manifest => PayloadEncoding::Raw,
                Compression::Zstd => PayloadEncoding::Zstd,
            },
            raw_len: stored.raw_len,
            data: stored.bytes,
        },
    }
}

/// `detail` of KV_GET's NOT_FOUND when the context exists but the key does not.
const KV_KEY_MISSING: u64 = 1;

/// A response as a connection of `version` may see it: version 1 defines no TURN flags (a
/// SUMMARY turn appended by a version-2 client reads as flags 0 there).
fn in_version(mut response: Response, version: u16) -> Response {
    if version >= 2 {
        return response;
    }
    match &mut response {
        Response::Appended { turn, .. } | Response::Turn(turn) => turn.flags = 0,
        Response::Turns { entries, .. } => {
            for entry in entries {
                entry.turn.flags = 0;
            }
        }
        _ => {}
    }
    response
}

fn context_ref(context: ContextRefWire) -> ContextRef {
    match context {
        ContextRefWire::Id(context_id) => ContextRef::Id(ContextId(context_id)),
        ContextRefWire::Name(name) => ContextRef::Name(name),
    }
}

fn info_response(
    message_type: MessageType,
    view: Result<ContextView, EngineError>,
) -> Result<Response, Response> {
    Ok(Response::ContextInfo {
        message_type,
        info: context_info(view.map_err(engine_error)?),
    })
}

impl Dispatcher {
    /// BACKUP: the engine copies files for as long as the store is large, so it runs on a
    /// thread of its own; this core only awaits its answer.
    async fn backup(&self, dir: String) -> Result<Response, Response> {
        let engine = self.engine.clone();
        let (done, answer) = flume::bounded(1);
        let spawned = std::thread::Builder::new()
            .name("ctxstore-backup".into())
            .spawn(move || {
                let _ = done.send(engine.backup(std::path::Path::new(&dir)));
            });
        if let Err(error) = spawned {
            return Err(Response::Error {
                code: ErrorCode::Internal,
                detail: 0,
                message: format!("could not start the backup thread: {error}"),
            });
        }
        let report = answer
            .recv_async()
            .await
            .map_err(|_| engine_error(EngineError::ShutDown))?
            .map_err(engine_error)?;
        Ok(Response::BackedUp(BackupWire {
            turns: report.turns,
            blobs: report.blobs,
            bytes: report.bytes,
            linked_bytes: report.linked_bytes,
            duration_ms: report.duration_ms,
            dir: report.dir.display().to_string(),
        }))
    }
}

impl Dispatcher {
    /// GC: a collection reads the log and the indexes and rewrites packs (blocking file I/O),
    /// so it runs on a thread of its own, like BACKUP; this core only awaits its answer.
    async fn gc(&self) -> Result<Response, Response> {
        let engine = self.engine.clone();
        let (done, answer) = flume::bounded(1);
        let spawned = std::thread::Builder::new()
            .name("ctxstore-gc-req".into())
            .spawn(move || {
                let _ = done.send(engine.gc());
            });
        if let Err(error) = spawned {
            return Err(Response::Error {
                code: ErrorCode::Internal,
                detail: 0,
                message: format!("could not start the garbage collection thread: {error}"),
            });
        }
        let report = answer
            .recv_async()
            .await
            .map_err(|_| engine_error(EngineError::ShutDown))?
            .map_err(engine_error)?;
        Ok(Response::GcDone(GcWire {
            turns_dead: report.turns_dead,
            blobs_dead: report.blobs_dead,
            bytes_reclaimed: report.bytes_reclaimed,
            packs_compacted: report.packs_compacted,
            live_bytes: report.live_bytes,
            dead_bytes: report.dead_bytes,
            duration_ms: report.duration_ms,
        }))
    }
}

/// CTX_DELETE, CTX_PRUNE and CTX_TTL: CONTEXT_INFO with the floor and the time to live.
fn retention_response(
    message_type: MessageType,
    view: Result<ContextView, EngineError>,
) -> Result<Response, Response> {
    let view = view.map_err(engine_error)?;
    Ok(Response::Retention {
        message_type,
        floor_depth: view.floor_depth,
        ttl_ms: view.ttl_ms,
        info: context_info(view),
    })
}

/// CONTEXT_INFO: the engine's view, tags sorted by key (the engine keeps them so).
fn context_info(view: ContextView) -> ContextInfoWire {
    ContextInfoWire {
        head: head_wire(&view.head),
        created_at_unix_ms: view.created_at_unix_ms,
        updated_at_unix_ms: view.updated_at_unix_ms,
        name: view.name,
        tags: view.tags.into_iter().collect(),
    }
}

/// Bytes of a view's CONTEXT_INFO on the wire (docs/protocol.md).
fn context_info_bytes(view: &ContextView) -> u64 {
    const FIXED_BYTES: usize = ctxstore_protocol::CONTEXT_HEAD_BYTES + 8 + 8 + 2 + 2;
    let name = view.name.as_ref().map_or(0, String::len);
    let tags: usize = view
        .tags
        .iter()
        .map(|(key, value)| 4 + key.len() + value.len())
        .sum();
    (FIXED_BYTES + name + tags) as u64
}

fn extras_wire(extras: TurnExtras) -> ExtrasWire {
    ExtrasWire {
        key: Bytes::from(extras.key),
        labels: extras.labels,
        links: extras.links.into_iter().map(|link| link.0).collect(),
    }
}

fn kv_item_wire(item: KvItem) -> KvItemWire {
    KvItemWire {
        key: item.key,
        value_hash: Hash32(item.value_hash.0),
        value_len: item.value_len,
    }
}

fn context(
    message_type: MessageType,
    head: Result<ContextHead, EngineError>,
) -> Result<Response, Response> {
    let head = head.map_err(engine_error)?;
    Ok(Response::Context {
        message_type,
        head: head_wire(&head),
    })
}

pub fn error(code: ErrorCode, message: impl Into<String>) -> Response {
    Response::Error {
        code,
        detail: 0,
        message: message.into(),
    }
}

/// The protocol's answer to an engine error. CONFLICT carries the actual head in `detail`.
pub fn engine_error(error: EngineError) -> Response {
    let code = match error.kind() {
        ErrorKind::NotFound => ErrorCode::NotFound,
        ErrorKind::Conflict => ErrorCode::Conflict,
        ErrorKind::TooLarge => ErrorCode::TooLarge,
        ErrorKind::InvalidArgument => ErrorCode::InvalidArgument,
        ErrorKind::ReadOnly => ErrorCode::ReadOnly,
        ErrorKind::NoSpace => ErrorCode::NoSpace,
        ErrorKind::Corrupt => ErrorCode::Corrupt,
        ErrorKind::Io => ErrorCode::Internal,
        ErrorKind::ShutDown => ErrorCode::ShuttingDown,
        // Only version-2 requests name contexts, so a version-1 connection never sees it.
        ErrorKind::AlreadyExists => ErrorCode::AlreadyExists,
        // Only PUT_CHUNKED (version 2) checks sent bytes against claimed hashes.
        ErrorKind::HashMismatch => ErrorCode::HashMismatch,
    };
    let detail = match &error {
        EngineError::Conflict { actual, .. } => actual.0,
        EngineError::NameTaken { context_id, .. } => context_id.0,
        _ => 0,
    };
    if matches!(code, ErrorCode::Internal | ErrorCode::Corrupt) {
        tracing::error!(%error, "request failed");
    }
    Response::Error {
        code,
        detail,
        message: error.to_string(),
    }
}

pub fn turn_wire(turn: &Turn) -> TurnWire {
    TurnWire {
        turn_id: turn.turn_id.0,
        parent_turn_id: turn.parent_turn_id.0,
        context_id: turn.context_id.0,
        depth: turn.depth,
        codec: turn.codec,
        type_tag: turn.type_tag,
        payload_hash: Hash32(turn.payload_hash.0),
        payload_len: turn.payload_len,
        flags: turn.flags,
        created_at_unix_ms: turn.created_at_unix_ms,
    }
}

/// A turn's overlay state on the wire (decision 0012).
pub fn overlay_wire(turn: &Turn) -> OverlayWire {
    OverlayWire {
        overlay_seq: turn.overlay_seq,
        redacted: turn.redacted,
    }
}

pub fn head_wire(head: &ContextHead) -> ContextHeadWire {
    ContextHeadWire {
        context_id: head.context_id.0,
        head_turn_id: head.head_turn_id.0,
        head_depth: head.head_depth,
    }
}
