//! From a decoded request to a response: a thin translator between the wire (`protocol`) and
//! the engine. Every decision — read limits, page assembly, payload budget, which payload form
//! to send — is the engine's (`read.rs`); this module only maps types and errors.
//! Runs on the network core that owns the connection; the engine's futures only wait on
//! channels, so a core serves many requests at once.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, Compression, ContextHead, ContextId, Engine,
    EngineError, ErrorKind, Page, PageOptions, PageQuery, Payload, PayloadMode, Turn, TurnId,
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
                context(message_type, self.engine.create_context().await)
            }
            Request::CtxCreate { base_turn_id }
            | Request::CtxFork {
                turn_id: base_turn_id,
            } => context(message_type, self.engine.fork(TurnId(base_turn_id)).await),
            Request::GetHead { context_id } => {
                context(message_type, self.engine.head(ContextId(context_id)).await)
            }
            Request::AppendTurn {
                context_id,
                expected_head,
                type_tag,
                codec,
                payload,
            } => {
                let payload = AppendPayload::Bytes(payload);
                let append = append_request(context_id, expected_head, type_tag, codec, payload);
                self.append(message_type, append).await
            }
            Request::AppendTurnByHash {
                context_id,
                expected_head,
                type_tag,
                codec,
                payload_hash,
            } => {
                let payload = AppendPayload::StoredBlob(BlobHash(payload_hash.0));
                let append = append_request(context_id, expected_head, type_tag, codec, payload);
                self.append(message_type, append).await
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
            } => {
                let context_id = ContextId(context_id);
                self.page(PageQuery::Last { context_id, limit }, read_flags)
            }
            Request::GetBefore {
                context_id,
                before_turn_id,
                limit,
                read_flags,
            } => {
                let query = PageQuery::Before {
                    context_id: ContextId(context_id),
                    before: TurnId(before_turn_id),
                    limit,
                };
                self.page(query, read_flags)
            }
            Request::GetRangeByDepth {
                context_id,
                from_depth,
                limit,
                read_flags,
            } => {
                let query = PageQuery::RangeByDepth {
                    context_id: ContextId(context_id),
                    from_depth,
                    limit,
                };
                self.page(query, read_flags)
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
                self.page(query, read_flags)
            }
            Request::GetBlob { hash, read_flags } => self.blob(BlobHash(hash.0), read_flags),
            Request::HasBlobs { hashes } => self.has_blobs(hashes).await,
            Request::Stats => Ok(self.stats()),
        };
        result.unwrap_or_else(|response| response)
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
    fn page(&self, query: PageQuery, flags: u32) -> Result<Response, Response> {
        let options = PageOptions {
            payloads: payload_mode(flags),
            payload_bytes_max: self.limits.response_bytes_max,
        };
        let mut cache = self.payload_cache.borrow_mut();
        let page = self.engine.read_page(query, options, &mut *cache);
        page.map(|page| turns_response(query, page))
            .map_err(engine_error)
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

fn append_request(
    context_id: u64,
    expected_head: Option<u64>,
    type_tag: u64,
    codec: u32,
    payload: AppendPayload,
) -> AppendRequest {
    AppendRequest {
        context_id: ContextId(context_id),
        expected_head: expected_head.map(TurnId),
        type_tag,
        codec,
        payload,
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
                Compression::Raw => PayloadEncoding::Raw,
                Compression::Zstd => PayloadEncoding::Zstd,
            },
            raw_len: stored.raw_len,
            data: stored.bytes,
        },
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
        // Names arrive with protocol version 2 (issue 13); no version-1 request can raise it.
        ErrorKind::AlreadyExists => ErrorCode::InvalidArgument,
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
