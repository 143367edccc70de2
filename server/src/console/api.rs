//! The console's JSON API (docs/console-api.md): read-only, over the engine's public reads
//! (`Engine::stats`, `list_contexts`, `context`, `turn_log`, `turn_as_of`, `turn_extras`,
//! `read_payload`, `find_turns`). Every parameter is checked; a bad one is a typed error
//! naming it (`{"error":{"code","message"}}`), never a panic.

use std::collections::{BinaryHeap, HashSet};
use std::sync::atomic::Ordering;

use bytes::Bytes;
use ctxstore_engine::contexts::{LIST_PAGE_MAX, ListQuery};
use ctxstore_engine::turns::TurnExtras;
use ctxstore_engine::turns::{LOG_PAGE_MAX, LogQuery};
use ctxstore_engine::{
    ContextId, ContextRef, ContextView, EngineError, ErrorKind, NoPayloadCache, Payload,
    PayloadMode, Turn, TurnId,
};
use ctxstore_vocab::labels::is_indexed_label;
use ctxstore_vocab::payloads::{PayloadKind, codec_name};
use http_body_util::Full;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use ctxstore_engine::Engine;
use ctxstore_engine::quota::Quota;

use super::auth::Viewer;
use super::history::{self, Sample};
use super::{Console, ConsoleLimits, http};

/// Bytes of a binary payload's start a turn's view shows (as base64, for a hex dump).
const BINARY_SHOWN_BYTES_MAX: usize = 4096;
/// Contexts a listing page returns unless asked (`limit`).
const CONTEXTS_PAGE_DEFAULT: u32 = 50;
/// Turns a find page returns unless asked (`limit`).
const FIND_PAGE_DEFAULT: u32 = 100;
/// Turns one find call looks at when labels beyond the indexed one filter them (100,000).
const FIND_EXAMINED_MAX: usize = 100_000;

/// Why a call failed: each becomes a status and a stable code.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A parameter or path segment that cannot be read (400 INVALID_ARGUMENT).
    #[error("{0}")]
    InvalidArgument(String),
    /// A page larger than the console serves (400 TOO_LARGE).
    #[error("{0}")]
    TooLarge(String),
    /// No such API path (404 NOT_FOUND).
    #[error("{0}")]
    NoSuchPath(String),
    /// The operator's, asked with a tenant's session (403 FORBIDDEN).
    #[error("{0}")]
    Forbidden(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl ApiError {
    fn response(&self) -> Response<Full<Bytes>> {
        let (status, code) = match self {
            ApiError::InvalidArgument(_) => (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT"),
            ApiError::TooLarge(_) => (StatusCode::BAD_REQUEST, "TOO_LARGE"),
            ApiError::NoSuchPath(_) => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "FORBIDDEN"),
            ApiError::Engine(error) => match error.kind() {
                ErrorKind::NotFound => (StatusCode::NOT_FOUND, "NOT_FOUND"),
                ErrorKind::TooLarge => (StatusCode::BAD_REQUEST, "TOO_LARGE"),
                ErrorKind::InvalidArgument => (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT"),
                ErrorKind::ShutDown => (StatusCode::SERVICE_UNAVAILABLE, "SHUT_DOWN"),
                _ => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
            },
        };
        http::error(status, code, &self.to_string())
    }
}

type Answer = Result<Response<Full<Bytes>>, ApiError>;

/// `/api/...` → the call's answer, read as `viewer` (a tenant's reads go through its scoped
/// handle). Runs the engine's reads on a blocking thread.
pub async fn answer(
    console: &Console,
    viewer: &Viewer,
    path: &str,
    query: &str,
) -> Response<Full<Bytes>> {
    let segments: Vec<String> = path
        .trim_start_matches("/api")
        .trim_start_matches('/')
        .split('/')
        .map(str::to_string)
        .collect();
    let params = match Params::parse(query) {
        Ok(params) => params,
        Err(error) => return error.response(),
    };
    if let [only] = segments.as_slice() {
        let answered = match only.as_str() {
            "me" => me(viewer, &params),
            "store" => store(console, viewer, &params),
            "tenants" => tenants(console, viewer, &params),
            _ => Err(ApiError::NoSuchPath(String::new())),
        };
        match answered {
            Err(ApiError::NoSuchPath(_)) => {}
            Ok(response) => return response,
            Err(error) => return error.response(),
        }
    }
    let engine = console.engine_of(viewer);
    let limits = console.limits;
    let answered = console
        .blocking(move || read(&engine, &limits, &segments, &params))
        .await;
    match answered {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => error.response(),
        Err(refusal) => *refusal,
    }
}

/// The calls that read the store, on a blocking thread.
fn read(
    engine: &ctxstore_engine::Engine,
    limits: &ConsoleLimits,
    segments: &[String],
    params: &Params,
) -> Answer {
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    match segments.as_slice() {
        ["contexts"] => list_contexts(engine, limits, params),
        ["contexts", reference] => {
            params.only(&[])?;
            let view = engine.context(&context_ref(reference)?)?;
            Ok(http::json(StatusCode::OK, &context_json(&view)))
        }
        ["contexts", reference, "tree"] => tree(engine, limits, &context_ref(reference)?, params),
        ["turns", turn] => turn_view(engine, limits, turn_id(turn)?, params),
        ["turns", turn, "payload"] => raw_payload(engine, turn_id(turn)?, params),
        ["find"] => find(engine, limits, params),
        _ => Err(ApiError::NoSuchPath(format!(
            "no API call at /api/{}; the calls are listed in docs/console-api.md",
            segments.join("/")
        ))),
    }
}

/// A page path's context exists for `engine`'s viewer (`/contexts/REF` is a 404 page
/// otherwise).
pub fn context_exists(engine: &Engine, reference: &str) -> bool {
    context_ref(reference).is_ok_and(|reference| engine.context(&reference).is_ok())
}

/// A page path's turn exists for `engine`'s viewer (`/turns/N` is a 404 page otherwise).
pub fn turn_exists(engine: &Engine, turn: &str) -> bool {
    turn_id(turn).is_ok_and(|turn| engine.turn_as_of(turn, None).is_ok())
}

/// A query string's parameters, in order (a name may repeat: `tag`, `label`).
struct Params(Vec<(String, String)>);

impl Params {
    fn parse(query: &str) -> Result<Params, ApiError> {
        Ok(Params(
            form_urlencoded::parse(query.as_bytes())
                .map(|(name, value)| (name.into_owned(), value.into_owned()))
                .collect(),
        ))
    }

    /// Refuses a parameter the call does not take (a typo is an error, not ignored).
    fn only(&self, known: &[&str]) -> Result<(), ApiError> {
        match self
            .0
            .iter()
            .find(|(name, _)| !known.contains(&name.as_str()))
        {
            Some((name, _)) => Err(ApiError::InvalidArgument(format!(
                "unknown parameter {name:?}; this call takes {}",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))),
            None => Ok(()),
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(known, _)| known == name)
            .map(|(_, value)| value.as_str())
    }

    fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(known, _)| known == name)
            .map(|(_, value)| value.as_str())
            .collect()
    }

    fn number(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.get(name)
            .map(|text| {
                text.parse::<u64>().map_err(|_| {
                    ApiError::InvalidArgument(format!(
                        "parameter {name}={text:?} is not a whole number"
                    ))
                })
            })
            .transpose()
    }

    /// `limit`: default `default`, 1..=`max` (more: TOO_LARGE, naming the limit).
    fn limit(&self, default: u32, max: u32) -> Result<u32, ApiError> {
        match self.number("limit")? {
            None => Ok(default.min(max)),
            Some(0) => Err(ApiError::InvalidArgument("limit must be at least 1".into())),
            Some(limit) if limit > u64::from(max) => Err(ApiError::TooLarge(format!(
                "limit={limit} is over this call's page limit of {max}; page with the cursor"
            ))),
            Some(limit) => Ok(limit as u32),
        }
    }

    /// `KEY=VALUE` pairs of a repeated parameter.
    fn pairs(&self, name: &str) -> Result<Vec<(String, String)>, ApiError> {
        self.all(name)
            .into_iter()
            .map(|pair| match pair.split_once('=') {
                Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
                _ => Err(ApiError::InvalidArgument(format!(
                    "{name}={pair:?} is not KEY=VALUE"
                ))),
            })
            .collect()
    }
}

/// A path segment naming a context: its ContextID, or `@NAME` (percent-encoded).
fn context_ref(segment: &str) -> Result<ContextRef, ApiError> {
    let decoded = percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .map_err(|_| ApiError::InvalidArgument("a context name is UTF-8".into()))?;
    if let Some(name) = decoded.strip_prefix('@') {
        return Ok(ContextRef::Name(name.to_string()));
    }
    match decoded.parse::<u64>() {
        Ok(id) if id > 0 => Ok(ContextRef::Id(ContextId(id))),
        _ => Err(ApiError::InvalidArgument(format!(
            "{decoded:?} names no context: use its ContextID (1, 2, …) or @NAME"
        ))),
    }
}

fn turn_id(segment: &str) -> Result<TurnId, ApiError> {
    match segment.parse::<u64>() {
        Ok(id) if id > 0 => Ok(TurnId(id)),
        _ => Err(ApiError::InvalidArgument(format!(
            "{segment:?} is not a TurnID (1, 2, …)"
        ))),
    }
}

fn context_json(view: &ContextView) -> Value {
    json!({
        "context_id": view.head.context_id.0,
        "name": view.name,
        "tags": view.tags,
        "head_turn_id": view.head.head_turn_id.0,
        "head_depth": view.head.head_depth,
        "created_at_unix_ms": view.created_at_unix_ms,
        "updated_at_unix_ms": view.updated_at_unix_ms,
        "floor_depth": view.floor_depth,
        "ttl_ms": view.ttl_ms,
    })
}

/// A turn with its key, labels and links; fields that are empty are left out (a tree has
/// many turns).
fn turn_json(turn: &Turn, extras: &TurnExtras) -> Value {
    let mut value = json!({
        "turn_id": turn.turn_id.0,
        "parent_turn_id": turn.parent_turn_id.0,
        "context_id": turn.context_id.0,
        "depth": turn.depth,
        "type_tag": turn.type_tag,
        "codec": codec_name(turn.codec),
        "payload_len": turn.payload_len,
        "created_at_unix_ms": turn.created_at_unix_ms,
    });
    let Some(fields) = value.as_object_mut() else {
        return value;
    };
    if turn.is_summary() {
        fields.insert("summary".into(), true.into());
    }
    if turn.redacted {
        fields.insert("redacted".into(), true.into());
    }
    if turn.overlay_seq > 0 {
        fields.insert("overlay_seq".into(), turn.overlay_seq.into());
    }
    if !extras.key.is_empty() {
        fields.insert(
            "key".into(),
            String::from_utf8_lossy(&extras.key).into_owned().into(),
        );
    }
    if !extras.labels.is_empty() {
        let labels: serde_json::Map<String, Value> = extras
            .labels
            .iter()
            .map(|(key, value)| (key.clone(), Value::from(value.clone())))
            .collect();
        fields.insert("labels".into(), labels.into());
    }
    if !extras.links.is_empty() {
        let links: Vec<u64> = extras.links.iter().map(|link| link.0).collect();
        fields.insert("links".into(), links.into());
    }
    value
}

/// `GET /api/me`: whose console this is (the front-end shows the store or the tenant's usage).
fn me(viewer: &Viewer, params: &Params) -> Answer {
    params.only(&[])?;
    let who = match viewer {
        Viewer::Operator => json!({ "viewer": "operator" }),
        Viewer::Tenant { tenant_id, name } => {
            json!({ "viewer": "tenant", "tenant": name, "tenant_id": tenant_id.0 })
        }
    };
    Ok(http::json(StatusCode::OK, &who))
}

/// `GET /api/tenants`: each tenant's usage, quotas and refusals (TENANT_LIST's, from
/// `Tenants::reports`), in name order: every tenant for the operator, its own entry for a
/// tenant; none without a tenants file.
fn tenants(console: &Console, viewer: &Viewer, params: &Params) -> Answer {
    params.only(&[])?;
    let reports = match (&console.tenants, viewer) {
        (None, _) => Vec::new(),
        (Some(tenants), Viewer::Operator) => tenants.reports(&console.engine),
        (Some(tenants), Viewer::Tenant { name, .. }) => tenants
            .report_of(&console.engine, name)
            .into_iter()
            .collect(),
    };
    let listed: Vec<Value> = reports.iter().map(tenant_json).collect();
    Ok(http::json(StatusCode::OK, &json!({ "tenants": listed })))
}

/// One tenant's entry, with the names of `ctxstore tenant list --json` (a quota of `null`:
/// none).
fn tenant_json(report: &crate::tenancy::TenantReport) -> Value {
    let mut value = json!({
        "name": report.name,
        "tenant_id": report.tenant_id.map(|tenant_id| tenant_id.0),
        "in_tenants_file": report.in_file,
        "deleted": report.deleted,
        "rights": report.rights.names(),
        "contexts": report.contexts,
        "streams_open": report.streams_open,
        "stored_bytes": report.stored_bytes,
        "connections": report.connections,
        "quota_refusals": report.refused.iter().sum::<u64>(),
    });
    for quota in Quota::ALL {
        value[quota.key()] = json!(report.limits[quota.index()]);
    }
    value
}

/// `GET /api/store`: the store's figures now and the samples of the last hour; the
/// operator's (they count every tenant's data).
fn store(console: &Console, viewer: &Viewer, params: &Params) -> Answer {
    params.only(&[])?;
    if let Viewer::Tenant { name, .. } = viewer {
        return Err(ApiError::Forbidden(format!(
            "the store's figures count every tenant's data: they are the operator's; tenant \
             {name}'s own usage is /api/tenants"
        )));
    }
    let stats = console.engine.stats();
    let now = history::now_unix_ms();
    let replication = console
        .replication
        .as_ref()
        .map(|stats| replication_json(console, stats, now));
    let sample_json = |sample: &Sample| {
        json!([
            sample.at_unix_ms,
            sample.stats.turns,
            sample.stats.logical_bytes,
            sample.stats.stored_bytes,
            sample.stats.dedup_hits,
            sample.stats.bytes_reclaimed_total,
        ])
    };
    let mut samples: Vec<Sample> = console.history.samples();
    samples.push(Sample {
        at_unix_ms: now,
        stats,
    });
    Ok(http::json(
        StatusCode::OK,
        &json!({
            "version": env!("CARGO_PKG_VERSION"),
            "now_unix_ms": now,
            "uptime_s": console.started.elapsed().as_secs(),
            "turns": stats.turns,
            "contexts": stats.contexts,
            "blobs": stats.blobs,
            "logical_bytes": stats.logical_bytes,
            "unique_bytes": stats.unique_bytes,
            "stored_bytes": stats.stored_bytes,
            "dedup_hits": stats.dedup_hits,
            // Payload bytes written per byte stored: what dedup and compression saved.
            "dedup_ratio": if stats.stored_bytes == 0 {
                Value::Null
            } else {
                json!(stats.logical_bytes as f64 / stats.stored_bytes as f64)
            },
            "chunked_blobs": stats.chunked_blobs,
            "read_only": stats.read_only,
            "gc_runs": stats.gc_runs,
            "bytes_reclaimed_total": stats.bytes_reclaimed_total,
            "live_bytes": stats.live_bytes,
            "dead_bytes": stats.dead_bytes,
            "replication": replication,
            "history": {
                "columns": ["at_unix_ms", "turns", "logical_bytes", "stored_bytes",
                            "dedup_hits", "bytes_reclaimed_total"],
                "samples": samples.iter().map(sample_json).collect::<Vec<_>>(),
            },
        }),
    ))
}

/// `GET /api/store`'s `replication`: the shipper's figures and ROLE's (decision 0031 §10; as
/// the ROLE handler reads them): the role, the epoch, the lease, the acknowledgement gate,
/// failovers and remote acknowledgements (`null` when the console was given no figures of
/// them).
fn replication_json(
    console: &Console,
    stats: &ctxstore_replica::ReplicationStats,
    now: u64,
) -> Value {
    let snapshot = stats.snapshot(now);
    let role =
        crate::dispatch::admin::server_role(stats, &snapshot, now, console.engine.accepts_writes());
    let lease_ms = stats.lease_ms.load(Ordering::Relaxed);
    let renewed = stats.lease_renewed_unix_ms.load(Ordering::Relaxed);
    let lease_age_ms = if lease_ms == 0 || renewed == 0 {
        0
    } else {
        now.saturating_sub(renewed)
    };
    let remote_acks = console.remote_acks.as_ref().map(|acks| {
        json!({
            "waiting": acks.waiting.load(Ordering::Relaxed),
            "total": acks.acks_total.load(Ordering::Relaxed),
            "unconfirmed": acks.unconfirmed_total.load(Ordering::Relaxed),
            "p50_us": acks.latency_quantile_us(0.5),
            "p99_us": acks.latency_quantile_us(0.99),
        })
    });
    json!({
        "state": snapshot.state.name(),
        "lag_ms": snapshot.lag_ms,
        "lag_bytes": snapshot.lag_bytes,
        "last_success_unix_ms": snapshot.last_success_unix_ms,
        "generation": snapshot.generation,
        "objects_total": snapshot.objects_total,
        "bytes_total": snapshot.bytes_total,
        "role": role.name(),
        "accepts_writes": console.engine.accepts_writes(),
        "epoch": snapshot.epoch,
        "lease_holder": stats.lease_holder(),
        "lease_ms": lease_ms,
        "lease_age_ms": lease_age_ms,
        "ack_open_ms": console.engine.ack_open_ms_left().unwrap_or(0),
        "failovers": stats.failovers.load(Ordering::Relaxed),
        "last_failover_ms": stats.last_failover_ms.load(Ordering::Relaxed),
        "remote_acks": remote_acks,
    })
}

/// Where a listing sorted by update time is: (updated_at_unix_ms, ContextID), newest first.
type UpdatedKey = (u64, u64);

fn parse_updated_cursor(text: &str) -> Result<UpdatedKey, ApiError> {
    let parsed = text
        .split_once('.')
        .and_then(|(updated, id)| Some((updated.parse().ok()?, id.parse().ok()?)));
    parsed.ok_or_else(|| {
        ApiError::InvalidArgument(format!(
            "cursor={text:?} is not one this API returned (UPDATED.CONTEXT_ID)"
        ))
    })
}

/// `GET /api/contexts`: contexts by name prefix and tags, newest update first, paged.
fn list_contexts(
    engine: &ctxstore_engine::Engine,
    limits: &ConsoleLimits,
    params: &Params,
) -> Answer {
    params.only(&["name_prefix", "tag", "limit", "cursor"])?;
    let limit = params.limit(CONTEXTS_PAGE_DEFAULT, limits.contexts_page_max)? as usize;
    let cursor = params.get("cursor").map(parse_updated_cursor).transpose()?;
    let mut query = ListQuery {
        tags: params.pairs("tag")?,
        name_prefix: params
            .get("name_prefix")
            .filter(|p| !p.is_empty())
            .map(str::to_string),
        limit: LIST_PAGE_MAX,
        ..ListQuery::default()
    };
    // The newest `limit + 1` contexts older than the cursor, in a min-heap by key (the engine
    // has no index by update time, so the matches are read and the page selected here).
    let mut newest: BinaryHeap<std::cmp::Reverse<(UpdatedKey, usize)>> = BinaryHeap::new();
    let mut kept: Vec<Option<ContextView>> = Vec::new();
    let mut scanned = 0usize;
    let mut truncated = false;
    'pages: loop {
        let page = engine.list_contexts(&query)?;
        for view in page.contexts {
            if scanned == limits.contexts_scan_max {
                truncated = true;
                break 'pages;
            }
            scanned += 1;
            let key = (view.updated_at_unix_ms, view.head.context_id.0);
            if cursor.is_some_and(|cursor| key >= cursor) {
                continue;
            }
            newest.push(std::cmp::Reverse((key, kept.len())));
            kept.push(Some(view));
            if newest.len() > limit + 1
                && let Some(std::cmp::Reverse((_, dropped))) = newest.pop()
            {
                kept[dropped] = None;
            }
        }
        match page.next_cursor {
            Some(next) => query.cursor = Some(next),
            None => break,
        }
    }
    let mut page: Vec<(UpdatedKey, usize)> = newest.into_iter().map(|entry| entry.0).collect();
    page.sort_unstable_by(|a, b| b.cmp(a));
    let more = page.len() > limit;
    page.truncate(limit);
    let next_cursor = more
        .then(|| {
            page.last()
                .map(|((updated, id), _)| format!("{updated}.{id}"))
        })
        .flatten();
    let contexts: Vec<Value> = page
        .iter()
        .filter_map(|(_, index)| kept[*index].as_ref().map(context_json))
        .collect();
    Ok(http::json(
        StatusCode::OK,
        &json!({
            "contexts": contexts,
            "next_cursor": next_cursor,
            "scanned": scanned,
            "truncated": truncated,
        }),
    ))
}

/// `GET /api/contexts/REF/tree`: every turn the context owns (its turn log, newest first,
/// at most `tree_turns_max`) and the contexts whose head is one of them.
fn tree(
    engine: &ctxstore_engine::Engine,
    limits: &ConsoleLimits,
    reference: &ContextRef,
    params: &Params,
) -> Answer {
    params.only(&[])?;
    let view = engine.context(reference)?;
    let context = ContextRef::Id(view.head.context_id);
    let mut query = LogQuery {
        limit: LOG_PAGE_MAX,
        ..LogQuery::default()
    };
    let mut nodes = Vec::new();
    let mut ids = HashSet::new();
    let mut truncated = false;
    loop {
        let page = engine.turn_log(&context, &query)?;
        for entry in page.turns {
            if nodes.len() == limits.tree_turns_max {
                truncated = true;
                break;
            }
            ids.insert(entry.turn.turn_id);
            nodes.push(turn_json(&entry.turn, &entry.extras));
        }
        match page.next_cursor {
            Some(next) if !truncated => query.cursor = Some(next),
            _ => break,
        }
    }
    let heads = heads_into(engine, limits, &ids)?;
    Ok(http::json(
        StatusCode::OK,
        &json!({
            "context": context_json(&view),
            "nodes": nodes,
            "truncated": truncated,
            "heads": heads,
        }),
    ))
}

/// The contexts (at most `contexts_scan_max` looked at) whose head is one of `turns`.
fn heads_into(
    engine: &ctxstore_engine::Engine,
    limits: &ConsoleLimits,
    turns: &HashSet<TurnId>,
) -> Result<Vec<Value>, ApiError> {
    let mut query = ListQuery {
        limit: LIST_PAGE_MAX,
        ..ListQuery::default()
    };
    let mut heads = Vec::new();
    let mut scanned = 0;
    loop {
        let page = engine.list_contexts(&query)?;
        scanned += page.contexts.len();
        heads.extend(
            page.contexts
                .iter()
                .filter(|view| turns.contains(&view.head.head_turn_id))
                .map(|view| {
                    json!({
                        "context_id": view.head.context_id.0,
                        "name": view.name,
                        "head_turn_id": view.head.head_turn_id.0,
                    })
                }),
        );
        match page.next_cursor {
            Some(next) if scanned < limits.contexts_scan_max => query.cursor = Some(next),
            _ => return Ok(heads),
        }
    }
}

fn as_of(params: &Params) -> Result<Option<u64>, ApiError> {
    params.number("as_of")
}

/// `GET /api/turns/N`: one turn, its context, its links (with their contexts), its overlay
/// state and its payload (at most `payload_shown_bytes_max` of it).
fn turn_view(
    engine: &ctxstore_engine::Engine,
    limits: &ConsoleLimits,
    turn_id: TurnId,
    params: &Params,
) -> Answer {
    params.only(&["as_of"])?;
    let as_of = as_of(params)?;
    let turn = engine.turn_as_of(turn_id, as_of)?;
    let extras = engine.turn_extras(turn_id)?;
    let context = engine
        .context(&ContextRef::Id(turn.context_id))
        .ok()
        .map(|view| context_json(&view));
    let links: Vec<Value> = extras
        .links
        .iter()
        .map(|&link| match engine.turn_as_of(link, None) {
            Ok(linked) => json!({
                "turn_id": link.0,
                "context_id": linked.context_id.0,
                "context_name": engine
                    .context(&ContextRef::Id(linked.context_id))
                    .ok()
                    .and_then(|view| view.name),
            }),
            // Collected or pruned since: the link stays, its turn is gone.
            Err(_) => json!({"turn_id": link.0, "missing": true}),
        })
        .collect();
    let payload = payload_json(engine, limits, &turn)?;
    Ok(http::json(
        StatusCode::OK,
        &json!({
            "turn": turn_json(&turn, &extras),
            "payload_hash": turn.payload_hash.to_string(),
            "context": context,
            "links": links,
            "overlay": {
                "redacted": turn.redacted,
                "patched": turn.overlay_seq > 0 && !turn.redacted,
                "overlay_seq": turn.overlay_seq,
                "as_of": as_of,
            },
            "payload": payload,
        }),
    ))
}

/// A payload for a turn's view: its kind, size and what is shown of it.
fn payload_json(
    engine: &ctxstore_engine::Engine,
    limits: &ConsoleLimits,
    turn: &Turn,
) -> Result<Value, ApiError> {
    if turn.redacted || turn.payload_len == 0 {
        return Ok(json!({"kind": "empty", "bytes": 0, "shown_bytes": 0, "truncated": false}));
    }
    let bytes = payload_bytes(engine, turn)?;
    let kind = PayloadKind::of(
        turn.codec,
        &bytes[..bytes.len().min(limits.payload_shown_bytes_max)],
    );
    let mut value = json!({
        "kind": kind.name(),
        "bytes": bytes.len(),
    });
    let (shown, extra) = match kind {
        PayloadKind::Json | PayloadKind::Text => {
            let text = shown_text(&bytes, limits.payload_shown_bytes_max);
            (text.len(), json!({"text": text}))
        }
        PayloadKind::Image(media_type) => (0, json!({"media_type": media_type})),
        PayloadKind::Binary => {
            use base64::Engine as _;
            let shown = bytes.len().min(BINARY_SHOWN_BYTES_MAX);
            let encoded = base64::engine::general_purpose::STANDARD.encode(&bytes[..shown]);
            (shown, json!({"base64": encoded}))
        }
    };
    if let (Some(fields), Value::Object(extra)) = (value.as_object_mut(), extra) {
        fields.extend(extra);
        fields.insert("shown_bytes".into(), shown.into());
        let truncated = !matches!(kind, PayloadKind::Image(_)) && shown < bytes.len();
        fields.insert("truncated".into(), truncated.into());
    }
    Ok(value)
}

/// The start of a text payload, at most `bytes_max` bytes, cut at a character boundary.
fn shown_text(bytes: &[u8], bytes_max: usize) -> String {
    let mut end = bytes.len().min(bytes_max);
    while end > 0 && end < bytes.len() && (bytes[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn payload_bytes(engine: &ctxstore_engine::Engine, turn: &Turn) -> Result<Bytes, ApiError> {
    match engine.read_payload(turn.payload_hash, PayloadMode::Raw, &mut NoPayloadCache)? {
        Payload::Raw(bytes) => Ok(bytes),
        // Raw mode returns raw bytes; a stored form here would be the engine breaking it.
        Payload::Stored(_) => Err(ApiError::Engine(EngineError::InvalidArgument(
            "the engine answered a raw read with stored bytes".into(),
        ))),
    }
}

/// `GET /api/turns/N/payload`: the payload's bytes (an image as itself, else a download).
fn raw_payload(engine: &ctxstore_engine::Engine, turn_id: TurnId, params: &Params) -> Answer {
    params.only(&["as_of"])?;
    let turn = engine.turn_as_of(turn_id, as_of(params)?)?;
    let bytes = if turn.redacted || turn.payload_len == 0 {
        Bytes::new()
    } else {
        payload_bytes(engine, &turn)?
    };
    let image = ctxstore_vocab::payloads::image_media_type(&bytes);
    Ok(http::payload(bytes, image))
}

/// `GET /api/find?label=K=V…`: turns of every context carrying every label, newest first.
fn find(engine: &ctxstore_engine::Engine, limits: &ConsoleLimits, params: &Params) -> Answer {
    params.only(&["label", "before", "limit"])?;
    let labels = params.pairs("label")?;
    let limit = params.limit(FIND_PAGE_DEFAULT, limits.find_page_max)?;
    let Some((key, value)) = labels
        .iter()
        .find(|(key, _)| is_indexed_label(key))
        .or(labels.first())
    else {
        return Err(ApiError::InvalidArgument(
            "find needs at least one label=KEY=VALUE".into(),
        ));
    };
    let mut before = TurnId(params.number("before")?.unwrap_or(0));
    let mut turns = Vec::new();
    let mut examined = 0usize;
    // The other labels are checked here: index pages are read until the page is full, the
    // index ends, or FIND_EXAMINED_MAX turns were looked at (then the cursor says where to
    // go on).
    loop {
        let found = engine.find_turns(key, value, before, limit)?;
        let mut cut = false;
        for entry in found.turns {
            if turns.len() == limit as usize || examined == FIND_EXAMINED_MAX {
                cut = true;
                break;
            }
            examined += 1;
            before = entry.turn.turn_id;
            if labels
                .iter()
                .all(|wanted| entry.extras.labels.contains(wanted))
            {
                turns.push(turn_json(&entry.turn, &entry.extras));
            }
        }
        let next_before = if cut {
            Some(before.0)
        } else if found.next_before.is_none() {
            None
        } else if turns.len() == limit as usize || examined == FIND_EXAMINED_MAX {
            Some(found.next_before.0)
        } else {
            before = found.next_before;
            continue;
        };
        return Ok(http::json(
            StatusCode::OK,
            &json!({"turns": turns, "next_before": next_before}),
        ));
    }
}
