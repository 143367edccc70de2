//! What each message needs of its connection's session (decision 0032 §1–§2): a tenant's
//! rights (`read`, `write`, `admin` of its own data) or the operator's token. Checked before
//! the engine is asked, so a refused request changes nothing. The match over the message
//! table has no wildcard: a message added to the table does not compile until it is given a
//! need here.

use ctxstore_protocol::{ErrorCode, MessageType, Response};

use super::{Session, error};

/// What a message needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Any connection: it names no tenant's data (PING, ROLE: failover clients ask every
    /// server, whatever their token).
    Nothing,
    Read,
    Write,
    /// The tenant's own contexts' retention and purges.
    Admin,
    /// Store-wide figures and operations: the operator's token only.
    Operator,
}

pub fn need(message: MessageType) -> Need {
    use MessageType as M;
    match message {
        M::Hello | M::Ping | M::Role => Need::Nothing,
        M::GetHead
        | M::GetTurn
        | M::GetLast
        | M::GetBefore
        | M::GetRangeByDepth
        | M::GetChain
        | M::GetBlob
        | M::HasBlobs
        | M::CtxShow
        | M::CtxList
        | M::KvGet
        | M::KvList
        | M::GetTurnByKey
        | M::TurnLog
        | M::ReadPage
        | M::FindTurns
        | M::KvGetEx
        | M::KvListEx
        | M::KvGetMany
        | M::StreamList
        | M::StreamRead
        | M::Watch
        | M::StreamFollow
        | M::VectorIndexList
        | M::VectorSearch
        | M::VectorSearchTurns => Need::Read,
        M::CtxCreate
        | M::CtxFork
        | M::AppendTurn
        | M::AppendTurnByHash
        | M::CtxOpen
        | M::CtxTag
        | M::CtxName
        | M::KvPut
        | M::KvDelete
        | M::AppendTurns
        | M::PatchTurn
        | M::RedactTurn
        | M::PutChunked
        | M::KvPutEx
        | M::KvTouch
        | M::StreamOpen
        | M::StreamAppend
        | M::StreamSeal
        | M::StreamAbort
        | M::VectorIndexCreate
        | M::KvPutVectors
        | M::AppendTurnsVectors => Need::Write,
        M::CtxDelete | M::CtxPrune | M::CtxTtl | M::PurgeBlob | M::VectorIndexDrop => Need::Admin,
        // A tenant's TENANT_LIST answers its own entry only (its usage, quotas and refusals:
        // its STATS); the operator's, every tenant.
        M::TenantList => Need::Nothing,
        // STATS and STATS_EX count the whole store (a tenant's own figures: TENANT_LIST).
        M::Stats
        | M::StatsEx
        | M::Backup
        | M::Gc
        | M::ReplicationStats
        | M::TenantDelete
        | M::TenantRotateKey => Need::Operator,
    }
}

/// `Ok` when `session` may send `message`; else UNAUTHORIZED naming what it lacks.
pub fn check(session: &Session, message: MessageType) -> Result<(), Response> {
    // A tenant deleted since this connection's HELLO (decision 0032 §6): its tokens are
    // refused, and so is every request of a connection it still holds open.
    if !session.is_operator() && session.engine.tenant_deleted(session.tenant_id) {
        let message = format!(
            "tenant {} was deleted: its tokens are refused from now on",
            session.tenant_name
        );
        return Err(error(ErrorCode::Unauthorized, message));
    }
    let rights = session.rights;
    let (granted, what) = match need(message) {
        Need::Nothing => (true, ""),
        Need::Read => (rights.read, "read"),
        Need::Write => (rights.write, "write"),
        Need::Admin => (rights.admin, "admin"),
        Need::Operator => (session.is_operator(), "operator"),
    };
    if granted {
        return Ok(());
    }
    let message = if what == "operator" {
        let own = if matches!(message, MessageType::Stats | MessageType::StatsEx) {
            " (a tenant's own usage and quotas: TENANT_LIST, `ctxstore tenant show`)"
        } else {
            ""
        };
        format!(
            "{} is the operator's (the --token-file token): it concerns the whole store, not \
             tenant {}'s data{own}",
            message.name(),
            session.tenant_name
        )
    } else {
        format!(
            "{} needs the `{what}` right, which tenant {}'s token does not have (rights come \
             from the tenants file)",
            message.name(),
            session.tenant_name
        )
    };
    Err(error(ErrorCode::Unauthorized, message))
}
