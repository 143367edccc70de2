//! The contexts family's calls: heads (CTX_CREATE, CTX_FORK, GET_HEAD) and contexts as agent
//! threads (protocol version 2: open, clone, show, tag, name, list). A context is named by its
//! ContextID (`u64`) or `ContextRef::Name`; an unknown one is `ErrorCode::NotFound`. The
//! version-2 calls are `ClientError::Unsupported` on a connection that negotiated version 1,
//! before sending.

use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::contexts;
use ctxstore_protocol::{Ask, ContextRef};

use crate::client::Client;
use crate::error::ClientError;
use crate::types::{
    ContextHead, ContextInfo, ContextListPage, ContextQuery, ListCursor, NewContext, Opened,
};

#[blocking_twin(crate::blocking::Client)]
impl Client {
    /// A new, empty context.
    pub async fn create_context(&self) -> Result<ContextHead, ClientError> {
        self.context(contexts::CtxCreate { base_turn_id: 0 }).await
    }

    /// A new context whose head is the turn `base` (CTX_CREATE from a base turn).
    pub async fn create_context_from(&self, base: u64) -> Result<ContextHead, ClientError> {
        self.context(contexts::CtxCreate { base_turn_id: base })
            .await
    }

    /// A new context whose head is the turn `turn` (CTX_FORK): copies nothing.
    pub async fn fork(&self, turn: u64) -> Result<ContextHead, ClientError> {
        self.context(contexts::CtxFork { turn_id: turn }).await
    }

    pub async fn head(&self, context: impl Into<ContextRef>) -> Result<ContextHead, ClientError> {
        self.context(contexts::GetHead {
            context: context.into(),
        })
        .await
    }

    async fn context<Q: Ask<Answer = contexts::Context>>(
        &self,
        request: Q,
    ) -> Result<ContextHead, ClientError> {
        let contexts::Context { head, .. } = self.ask(request).await?;
        Ok(head.into())
    }

    /// A new context (CTX_OPEN): empty or with its head at `new.base_turn_id`, optionally
    /// named and tagged. A taken name is `ErrorCode::AlreadyExists` with the owner's
    /// ContextID in `detail`, unless `new.get_or_create`: then the owner is answered with
    /// `created == false`.
    pub async fn open_context(&self, new: NewContext) -> Result<Opened, ClientError> {
        self.opened(contexts::CtxOpen {
            base_turn_id: new.base_turn_id,
            get_or_create: new.get_or_create,
            clone_from: None,
            name: new.name,
            tags: new.tags.into_iter().collect(),
        })
        .await
        .map(|(context, created)| Opened { context, created })
    }

    /// A copy of `source` named `name` (CTX_OPEN with CLONE): the same head, tags and
    /// key-value entries, sharing every turn and blob (nothing is copied but metadata). A
    /// taken name is `ErrorCode::AlreadyExists`.
    pub async fn clone_context(
        &self,
        source: impl Into<ContextRef>,
        name: impl Into<String>,
    ) -> Result<ContextInfo, ClientError> {
        self.opened(contexts::CtxOpen {
            base_turn_id: 0,
            get_or_create: false,
            clone_from: Some(source.into()),
            name: Some(name.into()),
            tags: Vec::new(),
        })
        .await
        .map(|(context, _)| context)
    }

    async fn opened(&self, request: contexts::CtxOpen) -> Result<(ContextInfo, bool), ClientError> {
        let contexts::Opened { info, created } = self.ask(request).await?;
        Ok((ContextInfo::from_wire(info), created))
    }

    /// A context's head, name, tags and times (CTX_SHOW).
    pub async fn context_info(
        &self,
        context: impl Into<ContextRef>,
    ) -> Result<ContextInfo, ClientError> {
        let request = contexts::CtxShow {
            context: context.into(),
        };
        self.info(request).await
    }

    /// Sets the tags of `set` and removes the keys of `remove`, atomically (CTX_TAG); with
    /// `expected_head`, only if the head is still that turn (0: still empty), else
    /// `ErrorCode::Conflict` with the actual head in `detail` and nothing changed. Answers the
    /// context as it is after the change. Limits: ≤ 32 tags per context, keys 1..=64 bytes,
    /// values 1..=1024 bytes (TOO_LARGE).
    pub async fn tag_context<K, V, R>(
        &self,
        context: impl Into<ContextRef>,
        set: impl IntoIterator<Item = (K, V)>,
        remove: impl IntoIterator<Item = R>,
        expected_head: Option<u64>,
    ) -> Result<ContextInfo, ClientError>
    where
        K: Into<String>,
        V: Into<String>,
        R: Into<String>,
    {
        let request = contexts::CtxTag {
            context: context.into(),
            expected_head,
            set: set
                .into_iter()
                .map(|(key, value)| (key.into(), value.into()))
                .collect(),
            remove: remove.into_iter().map(Into::into).collect(),
        };
        self.info(request).await
    }

    /// Names a context that has no name yet (CTX_NAME). A taken name is
    /// `ErrorCode::AlreadyExists` (owner in `detail`).
    pub async fn name_context(
        &self,
        context: impl Into<ContextRef>,
        name: impl Into<String>,
    ) -> Result<ContextInfo, ClientError> {
        let request = contexts::CtxName {
            context: context.into(),
            name: name.into(),
        };
        self.info(request).await
    }

    async fn info<Q: Ask<Answer = contexts::ContextInfo>>(
        &self,
        request: Q,
    ) -> Result<ContextInfo, ClientError> {
        Ok(ContextInfo::from_wire(self.ask(request).await?.info))
    }

    /// One page of the contexts matching `query` (CTX_LIST), from the start (`cursor`
    /// `None`) or after a previous page's `next_cursor`. Each context that matches
    /// throughout is returned at most once across pages, whatever changes in between;
    /// one that starts or stops matching meanwhile may or may not be.
    pub async fn list_contexts(
        &self,
        query: &ContextQuery,
        cursor: Option<&ListCursor>,
    ) -> Result<ContextListPage, ClientError> {
        let request = contexts::CtxList {
            tags: query
                .tags
                .iter()
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
            name_prefix: query.name_prefix.clone(),
            updated_after_unix_ms: query.updated_after_unix_ms,
            updated_before_unix_ms: query.updated_before_unix_ms,
            cursor: cursor.map(|cursor| cursor.0.clone()),
            limit: query.page_limit,
        };
        let contexts::ContextList {
            next_cursor,
            contexts,
        } = self.ask(request).await?;
        Ok(ContextListPage {
            contexts: contexts.into_iter().map(ContextInfo::from_wire).collect(),
            next_cursor: next_cursor.map(ListCursor),
        })
    }

    /// Every context matching `query` (or the first `count_max`), following the cursor page
    /// by page (`query.page_limit` each). Not a snapshot: see `list_contexts`.
    pub async fn list_all_contexts(
        &self,
        query: &ContextQuery,
        count_max: Option<usize>,
    ) -> Result<Vec<ContextInfo>, ClientError> {
        let mut contexts = Vec::new();
        let mut cursor: Option<ListCursor> = None;
        loop {
            let mut page_query = query.clone();
            if let Some(count_max) = count_max {
                let left = count_max.saturating_sub(contexts.len());
                if left == 0 {
                    return Ok(contexts);
                }
                let left = u32::try_from(left).unwrap_or(u32::MAX);
                page_query.page_limit = page_query.page_limit.min(left);
            }
            let page = self.list_contexts(&page_query, cursor.as_ref()).await?;
            contexts.extend(page.contexts);
            match page.next_cursor {
                None => return Ok(contexts),
                // A cursor that does not move would make this loop forever.
                Some(next) if Some(&next) == cursor.as_ref() => {
                    return Err(ClientError::Protocol(format!(
                        "CTX_LIST answered the same cursor again ({next:?})"
                    )));
                }
                Some(next) => cursor = Some(next),
            }
        }
    }
}
