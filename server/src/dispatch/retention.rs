//! The retention family (issue 15): CTX_DELETE, CTX_PRUNE, CTX_TTL, each answered with the
//! context's CONTEXT_INFO, its floor and its time to live.

use ctxstore_engine::{ContextView, EngineError};
use ctxstore_protocol::retention;
use ctxstore_protocol::{MessageType, Response, RetentionRequest, RetentionResponse};

use super::contexts::context_info;
use super::{Scoped, context_ref, engine_error};

impl Scoped<'_> {
    /// CTX_DELETE, CTX_PRUNE and CTX_TTL: CONTEXT_INFO with the floor and the time to live.
    pub(super) async fn answer_retention(
        &self,
        request: RetentionRequest,
    ) -> Result<RetentionResponse, Response> {
        // Each message's function returns its own answer: the variant that wraps it is the
        // only one that type-checks.
        match request {
            RetentionRequest::CtxDelete(delete) => self
                .delete_context(delete)
                .await
                .map(RetentionResponse::Retention),
            RetentionRequest::CtxPrune(prune) => self
                .prune_context(prune)
                .await
                .map(RetentionResponse::Retention),
            RetentionRequest::CtxTtl(ttl) => self
                .context_ttl(ttl)
                .await
                .map(RetentionResponse::Retention),
        }
    }

    /// CTX_DELETE: later requests naming the context answer NOT_FOUND; the answer is the
    /// context as it was just before.
    async fn delete_context(
        &self,
        delete: retention::CtxDelete,
    ) -> Result<retention::Retention, Response> {
        let view = self
            .engine
            .delete_context(&context_ref(delete.context))
            .await;
        retention_answer(MessageType::CtxDelete, view)
    }

    /// CTX_PRUNE: the context reads only its chain's newest `keep` depths (its floor moves up).
    async fn prune_context(
        &self,
        prune: retention::CtxPrune,
    ) -> Result<retention::Retention, Response> {
        let retention::CtxPrune { context, keep } = prune;
        let view = self.engine.prune_context(&context_ref(context), keep).await;
        retention_answer(MessageType::CtxPrune, view)
    }

    /// CTX_TTL: sets the context's time to live (0: none), or only reads it.
    async fn context_ttl(&self, ttl: retention::CtxTtl) -> Result<retention::Retention, Response> {
        let retention::CtxTtl {
            context,
            set,
            ttl_ms,
        } = ttl;
        let context = context_ref(context);
        let view = if set {
            let ttl_ms = (ttl_ms > 0).then_some(ttl_ms);
            self.engine.set_context_ttl(&context, ttl_ms).await
        } else {
            self.engine.context(&context)
        };
        retention_answer(MessageType::CtxTtl, view)
    }
}

/// A retention message's answer: the context's CONTEXT_INFO, its floor and its time to live.
fn retention_answer(
    message_type: MessageType,
    view: Result<ContextView, EngineError>,
) -> Result<retention::Retention, Response> {
    let view = view.map_err(engine_error)?;
    Ok(retention::Retention {
        message_type,
        floor_depth: view.floor_depth,
        ttl_ms: view.ttl_ms,
        info: context_info(view),
    })
}
