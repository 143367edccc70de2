//! From a decoded request to a response: call the engine, translate its types and errors.
//! Runs on the network core that owns the connection; the engine's futures only wait on
//! channels, so a core serves many requests at once.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, Compression, ContextHead, ContextId, Engine,
    EngineError, ErrorKind, Turn, TurnId,
};
use ctxstore_protocol::{
    ContextHeadWire, ErrorCode, Hash32, MessageType, PayloadEncoding, PayloadWire, Request,
    Response, StatsWire, TurnEntry, TurnWire, read_flags,
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
    pub async fn handle(&self, request: Request) -> Response {
        let message_type = request.message_type();
        let result = match request {
            Request::Hello { .. } => Err(error(
                ErrorCode::BadFrame,
                "HELLO may only be sent once, first",
            )),
            Request::Ping { nonce } => Ok(Response::Pong { nonce }),
            Request::CtxCreate { base_turn_id: 0 } => {
                self.context(message_type, self.engine.create_context().await)
            }
            Request::CtxCreate { base_turn_id }
            | Request::CtxFork {
                turn_id: base_turn_id,
            } => self.context(message_type, self.engine.fork(TurnId(base_turn_id)).await),
            Request::GetHead { context_id } => {
                self.context(message_type, self.engine.head(ContextId(context_id)).await)
            }
            Request::AppendTurn {
                context_id,
                expected_head,
                type_tag,
                codec,
                payload,
            } => {
                let payload = AppendPayload::Bytes(payload);
                self.append(
                    message_type,
                    context_id,
                    expected_head,
                    type_tag,
                    codec,
                    payload,
                )
                .await
            }
            Request::AppendTurnByHash {
                context_id,
                expected_head,
                type_tag,
                codec,
                payload_hash,
            } => {
                let payload = AppendPayload::StoredBlob(BlobHash(payload_hash.0));
                self.append(
                    message_type,
                    context_id,
                    expected_head,
                    type_tag,
                    codec,
                    payload,
                )
                .await
            }
            Request::GetTurn { turn_id } => self
                .engine
                .turn(TurnId(turn_id))
                .await
                .map(|turn| Response::Turn(turn_wire(&turn)))
                .map_err(engine_error),
            Request::GetLast {
                context_id,
                limit,
                read_flags,
            } => self.get_last(context_id, limit, read_flags).await,
            Request::GetBefore {
                context_id,
                before_turn_id,
                limit,
                read_flags,
            } => {
                self.get_before(context_id, before_turn_id, limit, read_flags)
                    .await
            }
            Request::GetRangeByDepth {
                context_id,
                from_depth,
                limit,
                read_flags,
            } => {
                self.get_range(context_id, from_depth, limit, read_flags)
                    .await
            }
            Request::GetChain {
                turn_id,
                from_depth,
                limit,
                read_flags,
            } => self.get_chain(turn_id, from_depth, limit, read_flags).await,
            Request::GetBlob { hash, read_flags } => self
                .payload(BlobHash(hash.0), read_flags | read_flags::WITH_PAYLOADS)
                .await
                .map(Response::Blob),
            Request::HasBlobs { hashes } => self.has_blobs(hashes).await,
            Request::Stats => Ok(self.stats()),
        };
        result.unwrap_or_else(|response| response)
    }

    fn context(
        &self,
        message_type: MessageType,
        head: Result<ContextHead, EngineError>,
    ) -> Result<Response, Response> {
        let head = head.map_err(engine_error)?;
        Ok(Response::Context {
            message_type,
            head: head_wire(&head),
        })
    }

    async fn append(
        &self,
        message_type: MessageType,
        context_id: u64,
        expected_head: Option<u64>,
        type_tag: u64,
        codec: u32,
        payload: AppendPayload,
    ) -> Result<Response, Response> {
        // The agent reads its context again before its next model call: keep new bytes (this
        // core hashed them, so they are verified) for the payload cache.
        let bytes = match &payload {
            AppendPayload::Bytes(bytes) => Some(bytes.clone()),
            AppendPayload::StoredBlob(_) => None,
        };
        let request = AppendRequest {
            context_id: ContextId(context_id),
            expected_head: expected_head.map(TurnId),
            type_tag,
            codec,
            payload,
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

    fn check_limit(&self, limit: u32) -> Result<(), Response> {
        let max = self.engine.config().limits.read_turns_max;
        if limit > max {
            return Err(error(
                ErrorCode::TooLarge,
                format!("{limit} turns requested; the limit is {max} per read"),
            ));
        }
        Ok(())
    }

    async fn get_last(
        &self,
        context_id: u64,
        limit: u32,
        flags: u32,
    ) -> Result<Response, Response> {
        self.check_limit(limit)?;
        let page = self
            .engine
            .last(ContextId(context_id), limit, false)
            .await
            .map_err(engine_error)?;
        let tip_depth = page.turns.last().map_or(0, |turn| turn.turn.depth);
        let turns: Vec<Turn> = page.turns.into_iter().map(|entry| entry.turn).collect();
        self.cursor_page(
            MessageType::GetLast,
            turns,
            page.next_before,
            tip_depth,
            flags,
        )
        .await
    }

    async fn get_before(
        &self,
        context_id: u64,
        before: u64,
        limit: u32,
        flags: u32,
    ) -> Result<Response, Response> {
        self.check_limit(limit)?;
        let context = ContextId(context_id);
        let page = self
            .engine
            .before(context, TurnId(before), limit, false)
            .await
            .map_err(engine_error)?;
        let tip_depth = self
            .engine
            .head(context)
            .await
            .map_err(engine_error)?
            .head_depth;
        let turns: Vec<Turn> = page.turns.into_iter().map(|entry| entry.turn).collect();
        self.cursor_page(
            MessageType::GetBefore,
            turns,
            page.next_before,
            tip_depth,
            flags,
        )
        .await
    }

    async fn get_range(
        &self,
        context_id: u64,
        from_depth: u32,
        limit: u32,
        flags: u32,
    ) -> Result<Response, Response> {
        self.check_limit(limit)?;
        let context = ContextId(context_id);
        let turns = self
            .engine
            .range_by_depth(context, from_depth, limit, false)
            .await
            .map_err(engine_error)?;
        let tip_depth = self
            .engine
            .head(context)
            .await
            .map_err(engine_error)?
            .head_depth;
        let turns = turns.into_iter().map(|entry| entry.turn).collect();
        self.window_page(MessageType::GetRangeByDepth, turns, tip_depth, flags)
            .await
    }

    async fn get_chain(
        &self,
        turn_id: u64,
        from_depth: u32,
        limit: u32,
        flags: u32,
    ) -> Result<Response, Response> {
        self.check_limit(limit)?;
        let tip_depth = self
            .engine
            .turn(TurnId(turn_id))
            .await
            .map_err(engine_error)?
            .depth;
        let turns = self
            .engine
            .chain(TurnId(turn_id), from_depth, limit, false)
            .await
            .map_err(engine_error)?;
        let turns = turns.into_iter().map(|entry| entry.turn).collect();
        self.window_page(MessageType::GetChain, turns, tip_depth, flags)
            .await
    }

    /// A cursor page (oldest first) keeps its newest turns when their payloads would pass
    /// `response_bytes_max`; the cursor then points at the oldest turn kept.
    async fn cursor_page(
        &self,
        message_type: MessageType,
        mut turns: Vec<Turn>,
        mut next_before: TurnId,
        tip_depth: u32,
        flags: u32,
    ) -> Result<Response, Response> {
        if flags & read_flags::WITH_PAYLOADS != 0 {
            let keep = self.turns_within_budget(turns.iter().rev());
            if keep < turns.len() {
                turns.drain(..turns.len() - keep);
                next_before = turns.first().map_or(TurnId::NONE, |oldest| oldest.turn_id);
            }
        }
        let entries = self.entries(turns, flags).await?;
        Ok(Response::Turns {
            message_type,
            next_before: next_before.0,
            tip_depth,
            entries,
        })
    }

    /// A depth window (oldest first) keeps its oldest turns within the budget; the client
    /// continues from the depth after the last one.
    async fn window_page(
        &self,
        message_type: MessageType,
        mut turns: Vec<Turn>,
        tip_depth: u32,
        flags: u32,
    ) -> Result<Response, Response> {
        if flags & read_flags::WITH_PAYLOADS != 0 {
            let keep = self.turns_within_budget(turns.iter());
            turns.truncate(keep);
        }
        let entries = self.entries(turns, flags).await?;
        Ok(Response::Turns {
            message_type,
            next_before: 0,
            tip_depth,
            entries,
        })
    }

    /// How many of `turns`, in order, fit in `response_bytes_max` of payload (at least one).
    fn turns_within_budget<'a>(&self, turns: impl Iterator<Item = &'a Turn>) -> usize {
        let mut bytes = 0u64;
        let mut count = 0;
        for turn in turns {
            bytes += u64::from(turn.payload_len);
            if count > 0 && bytes > self.limits.response_bytes_max {
                break;
            }
            count += 1;
        }
        count
    }

    async fn entries(&self, turns: Vec<Turn>, flags: u32) -> Result<Vec<TurnEntry>, Response> {
        let mut entries = Vec::with_capacity(turns.len());
        for turn in turns {
            let payload = if flags & read_flags::WITH_PAYLOADS != 0 {
                self.payload(turn.payload_hash, flags).await?
            } else {
                PayloadWire::absent()
            };
            entries.push(TurnEntry {
                turn: turn_wire(&turn),
                payload,
            });
        }
        Ok(entries)
    }

    /// A payload as the client asked. Hot payloads come raw from this core's cache (the
    /// cheapest for both sides on a fast link). A payload that fits the cache is read,
    /// inflated and verified here once, cached, and sent raw. One too large for it goes as
    /// stored (possibly zstd; checksum-verified) to a client that inflates (ACCEPT_ZSTD), else
    /// raw, verified against its hash.
    async fn payload(&self, hash: BlobHash, flags: u32) -> Result<PayloadWire, Response> {
        if let Some(data) = self.payload_cache.borrow_mut().get(&hash) {
            return Ok(PayloadWire::raw(data));
        }
        let raw_len = self
            .engine
            .blob_len(hash)
            .ok_or_else(|| engine_error(EngineError::BlobNotFound(hash)))?;
        let fits_cache = u64::from(raw_len) <= self.payload_cache.borrow().entry_bytes_max();
        if !fits_cache && flags & read_flags::ACCEPT_ZSTD != 0 {
            let stored = self.engine.blob_stored(hash).await.map_err(engine_error)?;
            let encoding = match stored.compression {
                Compression::Raw => PayloadEncoding::Raw,
                Compression::Zstd => PayloadEncoding::Zstd,
            };
            return Ok(PayloadWire {
                encoding,
                raw_len: stored.raw_len,
                data: stored.bytes,
            });
        }
        let data: Bytes = self.engine.blob(hash).await.map_err(engine_error)?;
        if fits_cache {
            self.payload_cache.borrow_mut().insert(hash, &data);
        }
        Ok(PayloadWire::raw(data))
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

    fn stats(&self) -> Response {
        let store = self.engine.stats();
        let counters = &self.counters;
        Response::Stats(StatsWire {
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
        })
    }
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
    };
    let detail = match &error {
        EngineError::Conflict { actual, .. } => actual.0,
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

pub fn head_wire(head: &ContextHead) -> ContextHeadWire {
    ContextHeadWire {
        context_id: head.context_id.0,
        head_turn_id: head.head_turn_id.0,
        head_depth: head.head_depth,
    }
}
