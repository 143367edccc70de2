//! The contexts family: version 1's heads (CTX_CREATE, CTX_FORK, GET_HEAD) and version 2's
//! contexts as agent threads (CTX_OPEN, CTX_SHOW, CTX_TAG, CTX_LIST, CTX_NAME; decision 0007).

use ctxstore_engine::contexts::{ListCursor, ListQuery};
use ctxstore_engine::{ContextHead, ContextId, ContextView, EngineError, NewContext, TurnId};
use ctxstore_protocol::contexts;
use ctxstore_protocol::{
    ContextInfoWire, ContextsRequest, ContextsResponse, ListCursorWire, MessageType, Response,
};

use super::{Scoped, context_ref, engine_error, head_wire};

impl Scoped<'_> {
    /// A context's head, its creation, or its name and tags.
    pub(super) async fn answer_contexts(
        &self,
        request: ContextsRequest,
    ) -> Result<ContextsResponse, Response> {
        // Each message's function returns its own answer: the variant that wraps it is the
        // only one that type-checks.
        match request {
            ContextsRequest::CtxCreate(create) => self
                .create_context(create)
                .await
                .map(ContextsResponse::Context),
            ContextsRequest::CtxFork(fork) => {
                self.fork_context(fork).await.map(ContextsResponse::Context)
            }
            ContextsRequest::GetHead(get) => {
                self.get_head(get).await.map(ContextsResponse::Context)
            }
            ContextsRequest::CtxOpen(open) => {
                self.open_context(open).await.map(ContextsResponse::Opened)
            }
            ContextsRequest::CtxShow(show) => {
                self.show_context(show).map(ContextsResponse::ContextInfo)
            }
            ContextsRequest::CtxTag(tag) => self
                .tag_context(tag)
                .await
                .map(ContextsResponse::ContextInfo),
            ContextsRequest::CtxList(list) => {
                self.list_contexts(list).map(ContextsResponse::ContextList)
            }
            ContextsRequest::CtxName(name) => self
                .name_context(name)
                .await
                .map(ContextsResponse::ContextInfo),
        }
    }

    /// CTX_CREATE: a new empty context, or (a base turn) a fork of that turn.
    async fn create_context(
        &self,
        create: contexts::CtxCreate,
    ) -> Result<contexts::Context, Response> {
        let head = match create.base_turn_id {
            0 => self.engine.create_context().await,
            base_turn_id => self.engine.fork(TurnId(base_turn_id)).await,
        };
        head_answer(MessageType::CtxCreate, head)
    }

    /// CTX_FORK: a new context whose head is the turn.
    async fn fork_context(&self, fork: contexts::CtxFork) -> Result<contexts::Context, Response> {
        let head = self.engine.fork(TurnId(fork.turn_id)).await;
        head_answer(MessageType::CtxFork, head)
    }

    /// GET_HEAD: the context's head.
    async fn get_head(&self, get: contexts::GetHead) -> Result<contexts::Context, Response> {
        let context_id = self.context_id(get.context)?;
        head_answer(MessageType::GetHead, self.engine.head(context_id).await)
    }

    /// CTX_OPEN: a new context (or, with get-or-create, the one of that name), and whether it
    /// was created.
    async fn open_context(&self, open: contexts::CtxOpen) -> Result<contexts::Opened, Response> {
        let contexts::CtxOpen {
            base_turn_id,
            get_or_create,
            clone_from,
            name,
            tags,
        } = open;
        let new = NewContext {
            base: TurnId(base_turn_id),
            clone_from: clone_from.map(context_ref),
            name,
            tags,
            get_or_create,
        };
        let created = self.engine.create(new).await.map_err(engine_error)?;
        Ok(contexts::Opened {
            info: context_info(created.context),
            created: created.created,
        })
    }

    /// CTX_SHOW: the context's CONTEXT_INFO.
    fn show_context(&self, show: contexts::CtxShow) -> Result<contexts::ContextInfo, Response> {
        let view = self.engine.context(&context_ref(show.context));
        info_answer(MessageType::CtxShow, view)
    }

    /// CTX_TAG: tags set and removed (when the head is still `expected_head`).
    async fn tag_context(&self, tag: contexts::CtxTag) -> Result<contexts::ContextInfo, Response> {
        let contexts::CtxTag {
            context,
            expected_head,
            set,
            remove,
        } = tag;
        let context = context_ref(context);
        let expected_head = expected_head.map(TurnId);
        let view = self
            .engine
            .update_tags(&context, set, remove, expected_head)
            .await;
        info_answer(MessageType::CtxTag, view)
    }

    /// CTX_NAME: a name for a context that has none yet.
    async fn name_context(
        &self,
        name: contexts::CtxName,
    ) -> Result<contexts::ContextInfo, Response> {
        let contexts::CtxName { context, name } = name;
        let view = self.engine.set_name(&context_ref(context), name).await;
        info_answer(MessageType::CtxName, view)
    }

    /// CTX_LIST: one engine page, cut shorter when its CONTEXT_INFOs would pass the response
    /// byte budget (1,000 contexts with 32 tags of 1 KiB each could); the cursor then points
    /// after the last one sent.
    fn list_contexts(&self, list: contexts::CtxList) -> Result<contexts::ContextList, Response> {
        let query = &list_query(list);
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
        Ok(contexts::ContextList {
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

/// CTX_LIST's query as the engine's.
fn list_query(list: contexts::CtxList) -> ListQuery {
    let contexts::CtxList {
        tags,
        name_prefix,
        updated_after_unix_ms,
        updated_before_unix_ms,
        cursor,
        limit,
    } = list;
    ListQuery {
        tags,
        name_prefix,
        updated_after_unix_ms,
        updated_before_unix_ms,
        cursor: cursor.map(list_cursor),
        limit,
    }
}

/// CTX_CREATE's, CTX_FORK's and GET_HEAD's answer: the context's head.
fn head_answer(
    message_type: MessageType,
    head: Result<ContextHead, EngineError>,
) -> Result<contexts::Context, Response> {
    let head = head.map_err(engine_error)?;
    Ok(contexts::Context {
        message_type,
        head: head_wire(&head),
    })
}

/// CTX_SHOW's, CTX_TAG's and CTX_NAME's answer: the context's CONTEXT_INFO.
fn info_answer(
    message_type: MessageType,
    view: Result<ContextView, EngineError>,
) -> Result<contexts::ContextInfo, Response> {
    Ok(contexts::ContextInfo {
        message_type,
        info: context_info(view.map_err(engine_error)?),
    })
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
