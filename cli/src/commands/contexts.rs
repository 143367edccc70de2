//! `head` and `ctx …`: create, fork, show (one CTX_TTL read: `floor_depth`, `ttl_ms`), tag,
//! name, list (page by page, as it goes), clone, and retention: delete, prune `--keep`, ttl
//! DURATION|none. CTX is a ContextID or `@NAME`.

use std::collections::BTreeMap;

use ctxstore_client::blocking::Client;
use ctxstore_client::{
    ContextHead, ContextInfo, ContextQuery, ContextRef, ContextRetention, ErrorCode, NewContext,
};
use serde_json::json;

use crate::args::CtxCommand;
use crate::args::Ttl;
use crate::exits::Usage;
use crate::output::Output;
use crate::output::readable;
use crate::output::unix_ms_text;

/// `ctx …`: contexts, and (protocol version 2) their names and tags.
pub(crate) fn ctx(client: &Client, out: &Output, command: &CtxCommand) -> anyhow::Result<()> {
    match command {
        CtxCommand::Create {
            from,
            name,
            tags,
            get_or_create,
        } => create(client, out, *from, name.as_ref(), tags, *get_or_create),
        CtxCommand::Fork { turn } => out.head(&client.fork(*turn)?),
        CtxCommand::Show { context } => show(client, out, context),
        CtxCommand::Tag {
            context,
            set,
            remove,
            expect_head,
        } => {
            let info =
                client.tag_context(context.clone(), set.clone(), remove.clone(), *expect_head)?;
            out.context(&info, None)
        }
        CtxCommand::Name { context, name } => {
            out.context(&client.name_context(context.clone(), name.clone())?, None)
        }
        CtxCommand::List {
            tags,
            name_prefix,
            updated_before,
            updated_after,
            limit,
        } => list(
            client,
            out,
            tags,
            name_prefix.as_ref(),
            *updated_before,
            *updated_after,
            *limit,
        ),
        CtxCommand::Clone { context, name } => {
            out.context(&client.clone_context(context.clone(), name.clone())?, None)
        }
        CtxCommand::Delete { context } => out.deleted(&client.delete_context(context.clone())?),
        CtxCommand::Prune { context, keep } => {
            out.retention(&client.prune_context(context.clone(), *keep)?)
        }
        CtxCommand::Ttl { context, ttl } => {
            let ttl = match ttl {
                Ttl::Set(ttl) => Some(*ttl),
                Ttl::Clear => None,
            };
            out.retention(&client.set_context_ttl(context.clone(), ttl)?)
        }
    }
}

/// `ctx create`: a new context, named and tagged (protocol version 2), or a plain one.
fn create(
    client: &Client,
    out: &Output,
    from: Option<u64>,
    name: Option<&String>,
    tags: &[(String, String)],
    get_or_create: bool,
) -> anyhow::Result<()> {
    // A plain create works with a version-1 server too (no name, no tags, no times).
    if client.protocol_version() < 2 && name.is_none() && tags.is_empty() {
        let head = match from {
            None => client.create_context()?,
            Some(turn) => client.create_context_from(turn)?,
        };
        return out.created_v1(&head);
    }
    let new = NewContext {
        base_turn_id: from.unwrap_or(0),
        name: name.cloned(),
        tags: tags.iter().cloned().collect(),
        get_or_create,
    };
    let opened = client.open_context(new)?;
    out.context(&opened.context, Some(opened.created))
}

/// `ctx list`: the query the flags make, then the listing.
fn list(
    client: &Client,
    out: &Output,
    tags: &[(String, String)],
    name_prefix: Option<&String>,
    updated_before: Option<u64>,
    updated_after: Option<u64>,
    limit: Option<u32>,
) -> anyhow::Result<()> {
    if updated_before == Some(0) {
        return Err(Usage("--updated-before 0 (1970) matches no context".into()).into());
    }
    let query = ContextQuery {
        tags: tags.iter().cloned().collect::<BTreeMap<_, _>>(),
        name_prefix: name_prefix.cloned(),
        // After 0 bounds nothing (every context was updated after 1970); on the wire
        // 0 means "no bound", so it is sent as none.
        updated_after_unix_ms: updated_after.filter(|at| *at != 0),
        updated_before_unix_ms: updated_before,
        ..ContextQuery::default()
    };
    list_contexts(client, out, &query, limit)
}

/// `ctx list`: page by page, printing as it goes: a long listing starts at once and stops
/// quietly when the reader does (`| head`).
pub(crate) fn list_contexts(
    client: &Client,
    out: &Output,
    query: &ContextQuery,
    limit: Option<u32>,
) -> anyhow::Result<()> {
    let mut printed = 0usize;
    let mut cursor = None;
    loop {
        let mut page_query = query.clone();
        if let Some(limit) = limit {
            let left = (limit as usize).saturating_sub(printed);
            page_query.page_limit = page_query
                .page_limit
                .min(u32::try_from(left).unwrap_or(u32::MAX));
        }
        let page = client.list_contexts(&page_query, cursor.as_ref())?;
        for info in &page.contexts {
            out.context(info, None)?;
        }
        printed += page.contexts.len();
        let done = limit.is_some_and(|limit| printed >= limit as usize);
        match page.next_cursor {
            Some(next) if !done => {
                if cursor.as_ref() == Some(&next) {
                    anyhow::bail!("the server answered the same listing cursor twice");
                }
                cursor = Some(next);
            }
            _ => return Ok(()),
        }
    }
}

/// `ctx show`: the context with its floor and time to live (CTX_TTL without SET, which
/// answers what CTX_SHOW does plus those); without them from a server that does not know
/// CTX_TTL.
pub(crate) fn show(client: &Client, out: &Output, context: &ContextRef) -> anyhow::Result<()> {
    if client.protocol_version() >= 2 {
        match client.context_retention(context.clone()) {
            Ok(retention) => return out.retention(&retention),
            Err(error) if error.code() == Some(ErrorCode::UnknownMessage) => {}
            Err(error) => return Err(error.into()),
        }
    }
    out.context(&client.context_info(context.clone())?, None)
}

impl Output {
    pub(crate) fn head(&self, head: &ContextHead) -> anyhow::Result<()> {
        if self.json {
            self.line(&json!({
                "context_id": head.context_id,
                "head_turn_id": head.head_turn_id,
                "head_depth": head.head_depth,
            }))
        } else if head.head_turn_id == 0 {
            self.text(&format!("context {} (empty)", head.context_id))
        } else {
            self.text(&format!(
                "context {} head {} depth {}",
                head.context_id, head.head_turn_id, head.head_depth
            ))
        }
    }

    /// A context as `ctx show` prints it; `created` (from `ctx create`) adds whether this call
    /// created it.
    pub(crate) fn context(&self, info: &ContextInfo, created: Option<bool>) -> anyhow::Result<()> {
        self.context_with(info, created, None)
    }

    /// `ctx show`, `ctx prune`, `ctx ttl`: the context with its floor and time to live.
    pub(crate) fn retention(&self, retention: &ContextRetention) -> anyhow::Result<()> {
        self.context_with(&retention.context, None, Some(retention))
    }

    /// `ctx delete`: which context is gone.
    pub(crate) fn deleted(&self, retention: &ContextRetention) -> anyhow::Result<()> {
        let info = &retention.context;
        if self.json {
            return self.line(&json!({
                "context_id": info.context_id,
                "name": info.name,
                "deleted": true,
            }));
        }
        let mut text = format!("context {}", info.context_id);
        if let Some(name) = &info.name {
            text.push_str(&format!(" @{}", readable(name)));
        }
        text.push_str(" deleted");
        self.text(&text)
    }

    pub(crate) fn context_with(
        &self,
        info: &ContextInfo,
        created: Option<bool>,
        retention: Option<&ContextRetention>,
    ) -> anyhow::Result<()> {
        if self.json {
            let mut value = json!({
                "context_id": info.context_id,
                "head_turn_id": info.head_turn_id,
                "head_depth": info.head_depth,
                "name": info.name,
                "tags": info.tags,
                "created_at_unix_ms": info.created_at_unix_ms,
                "updated_at_unix_ms": info.updated_at_unix_ms,
            });
            if let Some(object) = value.as_object_mut() {
                if let Some(created) = created {
                    object.insert("created".into(), json!(created));
                }
                if let Some(retention) = retention {
                    object.insert("floor_depth".into(), json!(retention.floor_depth));
                    object.insert("ttl_ms".into(), json!(retention.ttl_ms));
                }
            }
            return self.line(&value);
        }
        let mut text = format!("context {}", info.context_id);
        if let Some(name) = &info.name {
            text.push_str(&format!(" @{}", readable(name)));
        }
        if info.head_turn_id == 0 {
            text.push_str(" (empty)");
        } else {
            text.push_str(&format!(
                " head {} depth {}",
                info.head_turn_id, info.head_depth
            ));
        }
        if !info.tags.is_empty() {
            let tags: Vec<String> = info
                .tags
                .iter()
                .map(|(key, value)| format!("{}={}", readable(key), readable(value)))
                .collect();
            text.push_str(&format!(" tags {}", tags.join(" ")));
        }
        if let Some(retention) = retention {
            if retention.floor_depth > 0 {
                text.push_str(&format!(" floor {}", retention.floor_depth));
            }
            if let Some(ttl) = retention.ttl() {
                text.push_str(&format!(" ttl {}", humantime::format_duration(ttl)));
            }
        }
        text.push_str(&format!(
            " created {} updated {}",
            unix_ms_text(info.created_at_unix_ms),
            unix_ms_text(info.updated_at_unix_ms)
        ));
        if created == Some(false) {
            text.push_str(" (already existed)");
        }
        self.text(&text)
    }

    /// `ctx create` against a version-1 server: the same fields, no name, tags or times.
    pub(crate) fn created_v1(&self, head: &ContextHead) -> anyhow::Result<()> {
        if !self.json {
            return self.head(head);
        }
        self.line(&json!({
            "context_id": head.context_id,
            "head_turn_id": head.head_turn_id,
            "head_depth": head.head_depth,
            "name": null,
            "tags": {},
            "created": true,
        }))
    }
}
