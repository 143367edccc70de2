//! The retention family (issue 15): CTX_DELETE, CTX_PRUNE, CTX_TTL, each answered with the
//! context's CONTEXT_INFO, its floor and its time to live.

use ctxstore_protocol::retention;
use ctxstore_protocol::{Response, RetentionRequest, RetentionResponse};

use super::contexts::context_info;
use super::{Dispatcher, context_ref, engine_error};

impl Dispatcher {
    /// CTX_DELETE, CTX_PRUNE and CTX_TTL: CONTEXT_INFO with the floor and the time to live.
    pub(super) async fn answer_retention(
        &self,
        request: RetentionRequest,
    ) -> Result<RetentionResponse, Response> {
        let message_type = request.message_type();
        let view = match request {
            RetentionRequest::CtxDelete(retention::CtxDelete { context }) => {
                self.engine.delete_context(&context_ref(context)).await
            }
            RetentionRequest::CtxPrune(retention::CtxPrune { context, keep }) => {
                self.engine.prune_context(&context_ref(context), keep).await
            }
            RetentionRequest::CtxTtl(retention::CtxTtl {
                context,
                set,
                ttl_ms,
            }) => {
                let context = context_ref(context);
                if set {
                    let ttl_ms = (ttl_ms > 0).then_some(ttl_ms);
                    self.engine.set_context_ttl(&context, ttl_ms).await
                } else {
                    self.engine.context(&context)
                }
            }
        };
        let view = view.map_err(engine_error)?;
        Ok(RetentionResponse::Retention(retention::Retention {
            message_type,
            floor_depth: view.floor_depth,
            ttl_ms: view.ttl_ms,
            info: context_info(view),
        }))
    }
}
