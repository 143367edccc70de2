//! The appends family: APPEND_TURN and APPEND_TURN_BY_HASH (version 1), APPEND_TURNS (version 2,
//! turns with a parent, a key, labels, links, a summary flag).

use ctxstore_engine::{AppendPayload, AppendRequest, ContextId, Parent, TurnId, TurnOptions};
use ctxstore_protocol::appends;
use ctxstore_protocol::{
    AppendedWire, AppendsRequest, AppendsResponse, MessageType, ParentWire, PayloadSpec, Response,
    TurnSpec,
};

use super::{Scoped, engine_error, turn_wire};

impl Scoped<'_> {
    pub(super) async fn answer_appends(
        &self,
        request: AppendsRequest,
    ) -> Result<AppendsResponse, Response> {
        // Each message's function returns its own answer: the variant that wraps it is the
        // only one that type-checks.
        match request {
            AppendsRequest::AppendTurn(append) => self
                .append_turn(append)
                .await
                .map(AppendsResponse::Appended),
            AppendsRequest::AppendTurnByHash(append) => {
                let appended = self.append_turn_by_hash(append).await;
                appended.map(AppendsResponse::Appended)
            }
            AppendsRequest::AppendTurns(append) => {
                let appended = self.append_turns(append).await;
                appended.map(AppendsResponse::AppendedTurns)
            }
        }
    }

    /// APPEND_TURN: a turn with the payload's bytes.
    async fn append_turn(
        &self,
        append: appends::AppendTurn,
    ) -> Result<appends::Appended, Response> {
        let appends::AppendTurn {
            context,
            expected_head,
            type_tag,
            codec,
            payload,
        } = append;
        let context_id = self.context_id(context)?;
        let payload = AppendPayload::Bytes(payload);
        let append = append_request(context_id, expected_head, type_tag, codec, payload);
        self.append(MessageType::AppendTurn, append).await
    }

    /// APPEND_TURN_BY_HASH: a turn whose payload is a blob already stored.
    async fn append_turn_by_hash(
        &self,
        append: appends::AppendTurnByHash,
    ) -> Result<appends::Appended, Response> {
        let appends::AppendTurnByHash {
            context,
            expected_head,
            type_tag,
            codec,
            payload_hash,
        } = append;
        let context_id = self.context_id(context)?;
        let payload = AppendPayload::StoredBlob(payload_hash);
        let append = append_request(context_id, expected_head, type_tag, codec, payload);
        self.append(MessageType::AppendTurnByHash, append).await
    }

    /// APPEND_TURN, APPEND_TURN_BY_HASH: one turn through the append pipeline.
    async fn append(
        &self,
        message_type: MessageType,
        request: AppendRequest,
    ) -> Result<appends::Appended, Response> {
        // The agent reads its context again before its next model call: keep new bytes (this
        // core hashed them, so they are verified) for the payload cache, this core's and,
        // offered, the others' (the read may come through another connection).
        let bytes = match &request.payload {
            AppendPayload::Bytes(bytes) => Some(bytes.clone()),
            AppendPayload::StoredBlob(_) | AppendPayload::Zstd { .. } => None,
        };
        let appended = self.engine.append(request).await.map_err(engine_error)?;
        if let Some(bytes) = bytes {
            self.payload_cache
                .borrow_mut()
                .insert_appended(self.engine.cache_key(appended.turn.payload_hash), &bytes);
        }
        Ok(appends::Appended {
            message_type,
            turn: turn_wire(&appended.turn),
            deduped: appended.deduped,
        })
    }

    /// APPEND_TURNS: the turns as one batch append (one group commit, all or none).
    async fn append_turns(
        &self,
        append: appends::AppendTurns,
    ) -> Result<appends::AppendedTurns, Response> {
        let appends::AppendTurns {
            context,
            expected_head,
            turns: specs,
        } = append;
        let context_id = self.context_id(context)?;
        let requests: Vec<AppendRequest> = specs
            .into_iter()
            .enumerate()
            .map(|(index, spec)| {
                let expected_head = expected_head.filter(|_| index == 0);
                turn_request(context_id, expected_head, spec)
            })
            .collect();
        self.append_batch(requests).await
    }

    /// A batch of turns through the engine (one group commit, all or none), answered turn by
    /// turn.
    pub(super) async fn append_batch(
        &self,
        requests: Vec<AppendRequest>,
    ) -> Result<appends::AppendedTurns, Response> {
        // One route for every length: a batch of one is what `Engine::append` sends too.
        let appended = self
            .engine
            .append_batch(requests)
            .await
            .map_err(engine_error)?;
        Ok(appends::AppendedTurns {
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

/// One turn of APPEND_TURNS (and of APPEND_TURNS_VECTORS) as the engine's append
/// (`expected_head` is the first turn's only).
pub(super) fn turn_request(
    context_id: ContextId,
    expected_head: Option<u64>,
    spec: TurnSpec,
) -> AppendRequest {
    AppendRequest {
        context_id,
        expected_head: expected_head.map(TurnId),
        type_tag: spec.type_tag,
        codec: spec.codec,
        payload: match spec.payload {
            PayloadSpec::Bytes(bytes) => AppendPayload::Bytes(bytes),
            PayloadSpec::Hash(hash) => AppendPayload::StoredBlob(hash),
            PayloadSpec::Zstd {
                hash,
                raw_len,
                frame,
            } => AppendPayload::Zstd {
                hash,
                raw_len,
                frame,
            },
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
            vectors: None,
        },
    }
}
