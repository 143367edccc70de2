//! From a decoded request to a response: a thin translator between the wire (`protocol`) and
//! the engine. Every decision — read limits, page assembly, payload budget, which payload form
//! to send — is the engine's (`read.rs`); this module only maps types and errors.
//! Runs on the network core that owns the connection; the engine's futures only wait on
//! channels, so a core serves many requests at once.
//!
//! `Dispatcher::answer` is one match over the protocol's message families, each answered by
//! its own file with one match over its own requests: `admin.rs` (PING, STATS, BACKUP, GC),
//! `contexts.rs` (heads, contexts as agent threads), `retention.rs` (delete, prune, TTL),
//! `kv.rs` (a context's keys and values), `appends.rs`, `reads.rs` (every read that answers
//! TURNs, in an overlay view or not), `overlays.rs` (patch, redact, purge), `blobs.rs`
//! (blobs and chunked writes) and `streams.rs` (streams: open, deltas, seal, long-poll reads);
//! `follow.rs` makes a STREAM_FOLLOW's frames, which the connection pumps. Every request runs
//! in its connection's `Session` (the tenant of its HELLO token, decision 0032): `rights.rs`
//! checks what the message needs of it first, and the only engine handle a family's file
//! reaches (`Scoped::engine`) is the session's, scoped to its tenant. The wire forms
//! every family shares are here, and what depends on the connection's version: an answer as
//! an older version sees it (`in_version`: TURN flags, the ERROR codes of version 4), and a
//! write's ACK_AFTER (`acknowledgement`, version 4).

pub(crate) mod admin;
mod appends;
mod blobs;
mod contexts;
mod follow;
mod kv;
mod overlays;
mod reads;
mod retention;
pub mod rights;
mod streams;
mod vectors;

use std::cell::RefCell;
use std::sync::Arc;

use bytes::Bytes;
use ctxstore_engine::{
    Compression, ContextHead, ContextId, ContextRef, Engine, EngineError, ErrorKind, Payload,
    PayloadMode, TenantId, Turn, TurnId,
};
use ctxstore_protocol::{
    AppendsResponse, ContextHeadWire, ContextRef as ContextRefWire, ErrorCode, ExtrasWire,
    OverlayWire, PayloadEncoding, PayloadWire, ReadsResponse, Request, Response, TurnWire,
    read_flags,
};

use crate::config::ServerLimits;
use crate::counters::ServerCounters;
use crate::payload_cache::PayloadCache;
use crate::tenants_file::Rights;
pub use follow::{FollowFrame, FollowFrames};

/// What every request handler needs; one per network core, shared by its connections.
#[derive(Debug)]
pub struct Dispatcher {
    /// The store-wide handle: the store's own business (limits, releasing a closed
    /// connection's streams). Requests reach the engine only through their connection's
    /// `Session`, whose handle is scoped to its tenant.
    pub store: Engine,
    pub limits: ServerLimits,
    pub counters: Arc<ServerCounters>,
    /// Replication's figures (REPLICATION_STATS, ROLE): the replicator's or the standby's,
    /// the same ones `/metrics` reads (`None`: the server does not replicate).
    pub replication: Option<Arc<ctxstore_replica::ReplicationStats>>,
    /// The HOST:PORT this server gives the replica as its own when it replicates
    /// (`--replica-advertise`, else its bound address): ROLE's `primary` while it is the
    /// primary. Empty when it does not replicate.
    pub advertise: String,
    /// This core's raw payloads (never borrowed across an await).
    pub payload_cache: RefCell<PayloadCache>,
    /// Remote acknowledgements: what a write gets by default, and this core's waits.
    pub remote_acks: crate::remote_acks::CoreRemoteAcks,
    /// The tenants file in force (`--tenants-file`): HELLO maps tokens to tenants with it,
    /// TENANT_LIST reports them.
    pub tenants: Option<Arc<crate::tenancy::Tenants>>,
}

impl Dispatcher {
    /// This core's payload cache for a read, with the other cores' offers taken in first (the
    /// turns an agent appended through another core). Never held across an await.
    fn cache_for_read(&self) -> std::cell::RefMut<'_, PayloadCache> {
        let mut cache = self.payload_cache.borrow_mut();
        cache.take_offers();
        cache
    }

    /// Answers one request of `session`'s connection (HELLO is handled by the connection
    /// before it gets here). `connection_id` owns the streams the connection opens (issue 32).
    pub async fn handle(
        &self,
        session: &Session,
        request: Request,
        version: u16,
        connection_id: u64,
    ) -> Response {
        let scoped = self.scoped(session);
        let response = scoped
            .answer(request, connection_id)
            .await
            .unwrap_or_else(|response| response);
        if let Some(meter) = &session.meter {
            meter.note(&response);
        }
        in_version(self.with_epoch(response), version)
    }

    /// This core's view for one request of `session`'s connection.
    pub fn scoped<'a>(&'a self, session: &'a Session) -> Scoped<'a> {
        Scoped {
            engine: &session.engine,
            session,
            core: self,
        }
    }

    /// NOT_PRIMARY's `detail`: the newest epoch this server knows (0 without a replica).
    fn with_epoch(&self, mut response: Response) -> Response {
        if let Response::Error {
            code: ErrorCode::NotPrimary,
            detail,
            ..
        } = &mut response
            && let Some(stats) = &self.replication
        {
            *detail = stats.epoch.load(std::sync::atomic::Ordering::Relaxed);
        }
        response
    }
}

/// Who a connection is (decision 0032 §1–§2): the tenant of the token it presented in HELLO,
/// its rights, and the engine handle scoped to that tenant. The only engine a request's
/// handler holds is this one, so no handler can reach another tenant's data.
#[derive(Debug)]
pub struct Session {
    pub tenant_id: TenantId,
    /// The tenant's name (`operator` for TenantId 0), for logs and messages.
    pub tenant_name: String,
    pub rights: Rights,
    /// `Engine::scoped(tenant_id)`.
    pub engine: Engine,
    /// The tenant's connections and appends (`None`: the operator's, unlimited).
    pub meter: Option<Arc<crate::quota::Meter>>,
    /// This connection, counted against `quota_connections` while the session lives.
    pub connection: Option<crate::quota::ConnectionSlot>,
}

impl Session {
    /// The operator's connection (the `--token-file` token, or any connection of a server
    /// without one): every right, its own data, and the store-wide messages.
    pub fn operator(store: &Engine) -> Session {
        Session {
            tenant_id: TenantId::OPERATOR,
            tenant_name: crate::tenants_file::OPERATOR_NAME.to_string(),
            rights: Rights {
                read: true,
                write: true,
                admin: true,
            },
            engine: store.scoped(TenantId::OPERATOR),
            meter: None,
            connection: None,
        }
    }

    pub fn is_operator(&self) -> bool {
        self.tenant_id == TenantId::OPERATOR
    }
}

/// A core's dispatcher as one request of one connection sees it: `engine` is the session's
/// scoped handle (it shadows nothing: the dispatcher's own handle is `store`), the rest is the
/// core's (through `Deref`).
#[derive(Debug)]
pub struct Scoped<'a> {
    pub engine: &'a Engine,
    pub session: &'a Session,
    core: &'a Dispatcher,
}

impl std::ops::Deref for Scoped<'_> {
    type Target = Dispatcher;

    fn deref(&self) -> &Dispatcher {
        self.core
    }
}

impl Scoped<'_> {
    /// The answer to a request; `Err` holds an ERROR response. One arm per message family;
    /// each family's file answers its own requests.
    async fn answer(&self, request: Request, connection_id: u64) -> Result<Response, Response> {
        // Before anything else: a refused request changes nothing.
        rights::check(self.session, request.message_type())?;
        if let Some(meter) = &self.session.meter {
            let appends = crate::quota::appends_in(&request);
            meter
                .charge_appends(appends)
                .map_err(crate::quota::answer)?;
        }
        let (request, remote) = self.remote_acks.unwrap(request);
        let acknowledged = request.message_type().takes_ack_after();
        if remote {
            self.remote_acks.check_possible()?;
        }
        let answer = self.answer_family(request, connection_id).await?;
        if remote {
            self.remote_acks.wait(turn_id_of(&answer)).await?;
        }
        if acknowledged {
            // The last decision before the socket (decision 0031 §6): a primary whose lease
            // lapsed meanwhile (during a remote wait too) answers UNCONFIRMED, not success.
            self.engine.check_acks_open().map_err(|error| {
                let mut response = engine_error(error);
                if let Response::Error { detail, .. } = &mut response {
                    *detail = turn_id_of(&answer);
                }
                response
            })?;
        }
        Ok(answer)
    }

    /// `answer`'s match over the families.
    async fn answer_family(
        &self,
        request: Request,
        connection_id: u64,
    ) -> Result<Response, Response> {
        match request {
            Request::Admin(request) => self.answer_admin(request).await.map(Response::Admin),
            Request::Contexts(request) => {
                self.answer_contexts(request).await.map(Response::Contexts)
            }
            Request::Retention(request) => self
                .answer_retention(request)
                .await
                .map(Response::Retention),
            Request::Kv(request) => self.answer_kv(request).await.map(Response::Kv),
            Request::Appends(request) => self.answer_appends(request).await.map(Response::Appends),
            Request::Reads(request) => self
                .answer_read(request, None)
                .map(|(read, _)| Response::Reads(read)),
            Request::AsOf { as_of, read } => self.read_as_of(as_of, read),
            Request::Overlays(request) => {
                self.answer_overlays(request).await.map(Response::Overlays)
            }
            Request::Blobs(request) => self.answer_blobs(request).await.map(Response::Blobs),
            Request::Streams(request) => self
                .answer_streams(request, connection_id)
                .await
                .map(Response::Streams),
            Request::Vectors(request) => self.answer_vectors(request).await.map(Response::Vectors),
            // The decoder never wraps a write twice.
            Request::AckAfter { .. } => Err(error(
                ErrorCode::BadFrame,
                "ACK_AFTER on a request that already carries it",
            )),
        }
    }

    /// The ContextID a request names: an id as it is (the engine checks it where it is used,
    /// as in version 1), a name through the published names.
    fn context_id(&self, context: ContextRefWire) -> Result<ContextId, Response> {
        match context {
            ContextRefWire::Id(context_id) => Ok(ContextId(context_id)),
            ContextRefWire::Name(name) => self
                .engine
                .resolve(&ContextRef::Name(name))
                .map_err(engine_error),
        }
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

fn payload_wire(payload: Payload) -> PayloadWire {
    match payload {
        Payload::Raw(bytes) => PayloadWire::raw(bytes),
        Payload::Stored(stored) => PayloadWire {
            encoding: match stored.compression {
                // The engine hands chunked blobs over rebuilt (raw), never as a manifest.
                Compression::Raw | Compression::Manifest => PayloadEncoding::Raw,
                Compression::Zstd => PayloadEncoding::Zstd,
            },
            raw_len: stored.raw_len,
            data: stored.bytes,
        },
    }
}

/// A response as a connection of `version` may see it: version 1 defines no TURN flags (a
/// SUMMARY turn appended by a version-2 client reads as flags 0 there); before version 4, an
/// ERROR NOT_PRIMARY is READ_ONLY and UNCONFIRMED is INTERNAL (decision 0031), with the
/// message READ_ONLY had (`store is read-only: …`), byte for byte.
pub(crate) fn in_version(mut response: Response, version: u16) -> Response {
    if let Response::Error {
        code,
        detail,
        message,
    } = &mut response
    {
        let sent = code.in_version(version);
        if *code == ErrorCode::NotPrimary && sent == ErrorCode::ReadOnly {
            // READ_ONLY's detail is 0.
            *detail = 0;
            if let Some(reason) = message.strip_prefix(NOT_PRIMARY_PREFIX) {
                *message = format!("{READ_ONLY_PREFIX}{reason}");
            }
        }
        *code = sent;
        return response;
    }
    if version >= 2 {
        return response;
    }
    match &mut response {
        Response::Appends(AppendsResponse::Appended(ctxstore_protocol::appends::Appended {
            turn,
            ..
        }))
        | Response::Reads(ReadsResponse::Turn(turn)) => turn.flags = 0,
        Response::Reads(ReadsResponse::Turns(ctxstore_protocol::reads::Turns {
            entries, ..
        })) => {
            for entry in entries {
                entry.turn.flags = 0;
            }
        }
        _ => {}
    }
    response
}

/// The TurnID a single append's answer names, for UNCONFIRMED's `detail`; 0 for the others
/// (a batch names several, a seal's answer its stream).
fn turn_id_of(answer: &Response) -> u64 {
    match answer {
        Response::Appends(AppendsResponse::Appended(appended)) => appended.turn.turn_id,
        _ => 0,
    }
}

fn context_ref(context: ContextRefWire) -> ContextRef {
    match context {
        ContextRefWire::Id(context_id) => ContextRef::Id(ContextId(context_id)),
        ContextRefWire::Name(name) => ContextRef::Name(name),
    }
}

/// A turn's key, labels and links on the wire, from the fields of the engine's extras (taken
/// apart by the caller: the engine's extras type lives with its on-disk format, which the
/// server does not import).
fn extras_wire(key: Vec<u8>, labels: Vec<(String, String)>, links: Vec<TurnId>) -> ExtrasWire {
    ExtrasWire {
        key: Bytes::from(key),
        labels,
        links: links.into_iter().map(|link| link.0).collect(),
    }
}

/// How the engine's `NotPrimary` and `ReadOnly` errors begin (`EngineError`'s messages): a
/// version-3 connection gets a standby's refusal with the second, as before version 4.
const NOT_PRIMARY_PREFIX: &str = "not the primary: ";
const READ_ONLY_PREFIX: &str = "store is read-only: ";

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
        // Only version-2 requests name contexts, so a version-1 connection never sees it.
        ErrorKind::AlreadyExists => ErrorCode::AlreadyExists,
        // Only PUT_CHUNKED (version 2) checks sent bytes against claimed hashes.
        ErrorKind::HashMismatch => ErrorCode::HashMismatch,
        // Only stream requests (version 3) name streams.
        ErrorKind::StreamEnded => ErrorCode::StreamEnded,
        ErrorKind::StreamNotOwned => ErrorCode::StreamNotOwned,
        // A version-3 connection gets READ_ONLY (`in_version`); `detail` is the epoch
        // (`Dispatcher::with_epoch`).
        ErrorKind::NotPrimary => ErrorCode::NotPrimary,
        ErrorKind::Unconfirmed => ErrorCode::Unconfirmed,
        // A version-4 connection gets OVERLOADED (`in_version`).
        ErrorKind::QuotaExceeded => ErrorCode::QuotaExceeded,
    };
    let detail = match &error {
        EngineError::Conflict { actual, .. } => actual.0,
        EngineError::NameTaken { context_id, .. } => context_id.0,
        // A delta at the wrong offset: the stream's length, where to continue.
        EngineError::StreamOffset { length, .. } => *length,
        EngineError::StreamEnded {
            end: ctxstore_engine::streams::StreamEnd::Sealed(turn_id),
            ..
        } => turn_id.0,
        EngineError::QuotaExceeded(refused) => refused.limit,
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
        payload_hash: turn.payload_hash,
        payload_len: turn.payload_len,
        flags: turn.flags,
        created_at_unix_ms: turn.created_at_unix_ms,
    }
}

/// A turn's overlay state on the wire (decision 0012).
pub fn overlay_wire(turn: &Turn) -> OverlayWire {
    OverlayWire {
        overlay_seq: turn.overlay_seq,
        redacted: turn.redacted,
    }
}

pub fn head_wire(head: &ContextHead) -> ContextHeadWire {
    ContextHeadWire {
        context_id: head.context_id.0,
        head_turn_id: head.head_turn_id.0,
        head_depth: head.head_depth,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `in_version` rewrites a NOT_PRIMARY for a version-3 connection by the messages'
    /// beginnings: they are the engine's.
    #[test]
    fn the_prefixes_are_the_engines() {
        let not_primary = EngineError::NotPrimary("a standby".into()).to_string();
        let read_only = EngineError::ReadOnly("a standby".into()).to_string();
        assert_eq!(not_primary, format!("{NOT_PRIMARY_PREFIX}a standby"));
        assert_eq!(read_only, format!("{READ_ONLY_PREFIX}a standby"));
        let refused = || engine_error(EngineError::NotPrimary("a standby".into()));
        let Response::Error { code, message, .. } = in_version(refused(), 3) else {
            panic!("an error stays an error");
        };
        assert_eq!((code, message), (ErrorCode::ReadOnly, read_only));
        let Response::Error { code, message, .. } = in_version(refused(), 4) else {
            panic!("an error stays an error");
        };
        assert_eq!((code, message), (ErrorCode::NotPrimary, not_primary));
    }
}
