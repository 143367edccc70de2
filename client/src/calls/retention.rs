//! The retention family's calls (protocol version 2, issue 15): delete a context, prune it,
//! set or read its time to live. Each names the context by its ContextID or
//! `ContextRef::Name`; an unknown (or deleted) one is `ErrorCode::NotFound`.

use std::time::Duration;

use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::retention::{CtxDelete, CtxPrune, CtxTtl, Retention};
use ctxstore_protocol::{Ask, ContextRef};

use crate::client::Client;
use crate::error::ClientError;
use crate::types::ContextRetention;

#[blocking_twin(crate::blocking::Client)]
impl Client {
    /// Deletes a context (CTX_DELETE): from then on every request naming it is
    /// `ErrorCode::NotFound`, its name may be taken by a new context, and its ContextID is
    /// never reused. Its turns and blobs stay while another context (a fork, a clone) or a
    /// link reaches them. Returns the context as it was just before.
    pub async fn delete_context(
        &self,
        context: impl Into<ContextRef>,
    ) -> Result<ContextRetention, ClientError> {
        let request = CtxDelete {
            context: context.into(),
        };
        self.retention(request).await
    }

    /// Keeps the newest `keep` depths of the context's chain reachable through it
    /// (CTX_PRUNE): the floor becomes head depth + 1 − `keep`, never lower than it was. Reads
    /// through the context stop at the floor, on every branch; an append whose parent lies
    /// below it is `ErrorCode::InvalidArgument`. `keep` 0 is `ErrorCode::InvalidArgument`
    /// (that is `delete_context`). Returns the context after the change.
    pub async fn prune_context(
        &self,
        context: impl Into<ContextRef>,
        keep: u32,
    ) -> Result<ContextRetention, ClientError> {
        let request = CtxPrune {
            context: context.into(),
            keep,
        };
        self.retention(request).await
    }

    /// Sets (`Some`) or clears (`None`) the context's own time to live (CTX_TTL with SET):
    /// once it has not been updated for that long, the server deletes it. Whole milliseconds
    /// (a finer remainder is dropped); under 1 ms is `ClientError::InvalidArgument` (clear
    /// with `None`), over 100 years the server's `ErrorCode::InvalidArgument`. Returns the
    /// context after the change.
    pub async fn set_context_ttl(
        &self,
        context: impl Into<ContextRef>,
        ttl: Option<Duration>,
    ) -> Result<ContextRetention, ClientError> {
        let ttl_ms = match ttl {
            None => 0,
            Some(ttl) => ttl_millis(ttl)?,
        };
        let request = CtxTtl {
            context: context.into(),
            set: true,
            ttl_ms,
        };
        self.retention(request).await
    }

    /// The context with its floor and time to live, changing nothing (CTX_TTL without SET):
    /// what `context_info` answers, plus the retention settings.
    pub async fn context_retention(
        &self,
        context: impl Into<ContextRef>,
    ) -> Result<ContextRetention, ClientError> {
        let request = CtxTtl {
            context: context.into(),
            set: false,
            ttl_ms: 0,
        };
        self.retention(request).await
    }

    async fn retention<Q: Ask<Answer = Retention>>(
        &self,
        request: Q,
    ) -> Result<ContextRetention, ClientError> {
        let answer = self.ask(request).await?;
        Ok(ContextRetention::from_wire(
            answer.info,
            answer.floor_depth,
            answer.ttl_ms,
        ))
    }
}

/// A time to live in whole milliseconds: at least 1.
fn ttl_millis(ttl: Duration) -> Result<u64, ClientError> {
    match u64::try_from(ttl.as_millis()) {
        Ok(0) => Err(ClientError::InvalidArgument(format!(
            "a time to live of {ttl:?} is under 1 ms; to clear it, pass None"
        ))),
        Ok(ttl_ms) => Ok(ttl_ms),
        Err(_) => Err(ClientError::InvalidArgument(format!(
            "a time to live of {ttl:?} does not fit in u64 milliseconds"
        ))),
    }
}
