//! Contexts: version 1's heads (CTX_CREATE, CTX_FORK, GET_HEAD), version 2's contexts as agent
//! threads (CTX_OPEN, CTX_SHOW, CTX_TAG, CTX_LIST, CTX_NAME; decision 0007) and their retention
//! (CTX_DELETE, CTX_PRUNE, CTX_TTL; issue 15).

use ctxstore_engine::contexts::{ListCursor, ListQuery};
use ctxstore_engine::{ContextHead, ContextId, ContextView, EngineError, NewContext, TurnId};
use ctxstore_protocol::{ContextInfoWire, ListCursorWire, MessageType, Request, Response};

use super::{Dispatcher, context_ref, engine_error, head_wire, misrouted};

impl Dispatcher {
    /// A context's head, its creation, or its name and tags.
    pub(super) async fn answer_context(&self, request: Request) -> Result<Response, Response> {
        let message_type = request.message_type();
        match request {
            Request::CtxCreate { base_turn_id: 0 } => {
                head_response(message_type, self.engine.create_context().await)
            }
            Request::CtxCreate { base_turn_id }
            | Request::CtxFork {
                turn_id: base_turn_id,
            } => head_response(message_type, self.engine.fork(TurnId(base_turn_id)).await),
            Request::GetHead { context } => {
                let context_id = self.context_id(context)?;
                head_response(message_type, self.engine.head(context_id).await)
            }
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
            } => self.list(&ListQuery {
                tags,
                name_prefix,
                updated_after_unix_ms,
                updated_before_unix_ms,
                cursor: cursor.map(list_cursor),
                limit,
            }),
            Request::CtxName { context, name } => {
                let view = self.engine.set_name(&context_ref(context), name).await;
                info_response(message_type, view)
            }
            other => Err(misrouted(&other)),
        }
    }

    /// CTX_DELETE, CTX_PRUNE and CTX_TTL: CONTEXT_INFO with the floor and the time to live.
    pub(super) async fn answer_retention(&self, request: Request) -> Result<Response, Response> {
        let message_type = request.message_type();
        let view = match request {
            Request::CtxDelete { context } => {
                self.engine.delete_context(&context_ref(context)).await
            }
            Request::CtxPrune { context, keep } => {
                self.engine.prune_context(&context_ref(context), keep).await
            }
            Request::CtxTtl {
                context,
                set,
                ttl_ms,
            } => {
                let context = context_ref(context);
                if set {
                    let ttl_ms = (ttl_ms > 0).then_some(ttl_ms);
                    self.engine.set_context_ttl(&context, ttl_ms).await
                } else {
                    self.engine.context(&context)
                }
            }
            other => return Err(misrouted(&other)),
        };
        let view = view.map_err(engine_error)?;
        Ok(Response::Retention {
            message_type,
            floor_depth: view.floor_depth,
            ttl_ms: view.ttl_ms,
            info: context_info(view),
        })
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
) -> Result<Response, Response> {
    let head = head.map_err(engine_error)?;
    Ok(Response::Context {
        message_type,
        head: head_wire(&head),
    })
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
