//! The contexts family: version 1's heads (CTX_CREATE, CTX_FORK, GET_HEAD) and version 2's
//! contexts as agent threads (CTX_OPEN, CTX_SHOW, CTX_TAG, CTX_LIST, CTX_NAME; decision 0007).

use ctxstore_engine::contexts::{ListCursor, ListQuery};
use ctxstore_engine::{ContextHead, ContextId, ContextView, EngineError, NewContext, TurnId};
use ctxstore_protocol::{
    ContextInfoWire, ContextsRequest, ContextsResponse, ListCursorWire, MessageType, Response,
};

use super::{Dispatcher, context_ref, engine_error, head_wire};

impl Dispatcher {
    /// A context's head, its creation, or its name and tags.
    pub(super) async fn answer_contexts(
        &self,
        request: ContextsRequest,
    ) -> Result<ContextsResponse, Response> {
        let message_type = request.message_type();
        match request {
            ContextsRequest::CtxCreate(ctxstore_protocol::contexts::CtxCreate {
                base_turn_id: 0,
            }) => head_response(message_type, self.engine.create_context().await),
            ContextsRequest::CtxCreate(ctxstore_protocol::contexts::CtxCreate { base_turn_id })
            | ContextsRequest::CtxFork(ctxstore_protocol::contexts::CtxFork {
                turn_id: base_turn_id,
            }) => head_response(message_type, self.engine.fork(TurnId(base_turn_id)).await),
            ContextsRequest::GetHead(ctxstore_protocol::contexts::GetHead { context }) => {
                let context_id = self.context_id(context)?;
                head_response(message_type, self.engine.head(context_id).await)
            }
            ContextsRequest::CtxOpen(ctxstore_protocol::contexts::CtxOpen {
                base_turn_id,
                get_or_create,
                clone_from,
                name,
                tags,
            }) => {
                let new = NewContext {
                    base: TurnId(base_turn_id),
                    clone_from: clone_from.map(context_ref),
                    name,
                    tags,
                    get_or_create,
                };
                self.open(new).await
            }
            ContextsRequest::CtxShow(ctxstore_protocol::contexts::CtxShow { context }) => {
                let view = self.engine.context(&context_ref(context));
                info_response(message_type, view)
            }
            ContextsRequest::CtxTag(ctxstore_protocol::contexts::CtxTag {
                context,
                expected_head,
                set,
                remove,
            }) => {
                let context = context_ref(context);
                let expected_head = expected_head.map(TurnId);
                let view = self
                    .engine
                    .update_tags(&context, set, remove, expected_head)
                    .await;
                info_response(message_type, view)
            }
            ContextsRequest::CtxList(ctxstore_protocol::contexts::CtxList {
                tags,
                name_prefix,
                updated_after_unix_ms,
                updated_before_unix_ms,
                cursor,
                limit,
            }) => self.list(&ListQuery {
                tags,
                name_prefix,
                updated_after_unix_ms,
                updated_before_unix_ms,
                cursor: cursor.map(list_cursor),
                limit,
            }),
            ContextsRequest::CtxName(ctxstore_protocol::contexts::CtxName { context, name }) => {
                let view = self.engine.set_name(&context_ref(context), name).await;
                info_response(message_type, view)
            }
        }
    }

    /// CTX_OPEN: a new context (or, with get-or-create, the one of that name), and whether it
    /// was created.
    async fn open(&self, new: NewContext) -> Result<ContextsResponse, Response> {
        let created = self.engine.create(new).await.map_err(engine_error)?;
        Ok(ContextsResponse::Opened(
            ctxstore_protocol::contexts::Opened {
                info: context_info(created.context),
                created: created.created,
            },
        ))
    }

    /// CTX_LIST: one engine page, cut shorter when its CONTEXT_INFOs would pass the response
    /// byte budget (1,000 contexts with 32 tags of 1 KiB each could); the cursor then points
    /// after the last one sent.
    fn list(&self, query: &ListQuery) -> Result<ContextsResponse, Response> {
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
        Ok(ContextsResponse::ContextList(
            ctxstore_protocol::contexts::ContextList {
                next_cursor: next_cursor.map(|cursor| match cursor {
                    ListCursor::Id(context_id) => ListCursorWire::Id(context_id.0),
                    ListCursor::Name(name) => ListCursorWire::Name(name),
                }),
                contexts: contexts.into_iter().map(|(_, info)| info).collect(),
            },
        ))
    }
}

fn list_cursor(cursor: ListCursorWire) -> ListCursor {
    match cursor {
        ListCursorWire::Id(context_id) => ListCursor::Id(ContextId(context_id)),
        ListCursorWire::Name(name) => ListCursor::Name(name),
    }
}

fn head_response(
    message_type: MessageType,
    head: Result<ContextHead, EngineError>,
) -> Result<ContextsResponse, Response> {
    let head = head.map_err(engine_error)?;
    Ok(ContextsResponse::Context(
        ctxstore_protocol::contexts::Context {
            message_type,
            head: head_wire(&head),
        },
    ))
}

fn info_response(
    message_type: MessageType,
    view: Result<ContextView, EngineError>,
) -> Result<ContextsResponse, Response> {
    Ok(ContextsResponse::ContextInfo(
        ctxstore_protocol::contexts::ContextInfo {
            message_type,
            info: context_info(view.map_err(engine_error)?),
        },
    ))
}

/// CONTEXT_INFO: the engine's view, tags sorted by key (the engine keeps them so).
pub(super) fn context_info(view: ContextView) -> ContextInfoWire {
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
