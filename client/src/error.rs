//! Client errors. A server's ERROR keeps its stable code; failures to reach a ctxstore server
//! (refused, timed out, something else answering) are their own variants, so that callers can
//! tell "the server said no" from "there is no server" ([`ClientError::is_connection_failure`]).
//! Two server errors of failover (decision 0031) have their own questions:
//! [`ClientError::is_unconfirmed`] (the write is durable on the server but not confirmed
//! off-host) and [`ClientError::is_not_primary`] (nothing was written).

use std::time::Duration;

use ctxstore_protocol::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Refused, unreachable, or an address that does not resolve. (`reason` is not the
    /// error's `source()`, so that a chain printed with `{:#}` names it once.)
    #[error("cannot connect to {addr}: {reason}")]
    Connect {
        addr: String,
        reason: std::io::Error,
    },
    #[error("timed out after {timeout:?} connecting to {addr} (ClientConfig::connect_timeout)")]
    ConnectTimeout { addr: String, timeout: Duration },
    /// The TCP connection was made but HELLO got no answer in time: a server that is busy,
    /// or something that is not ctxstore listening on the port.
    #[error(
        "{addr} accepted the connection but did not answer HELLO within {timeout:?}; \
         is it a ctxstore server? (ClientConfig::hello_timeout)"
    )]
    HandshakeTimeout { addr: String, timeout: Duration },
    /// HELLO was answered with something that is not a ctxstore HELLO (or the peer closed).
    #[error("{addr} did not complete the ctxstore handshake ({reason}); is it a ctxstore server?")]
    Handshake { addr: String, reason: String },
    /// A request got no response in time (ClientConfig::request_timeout; for BACKUP,
    /// ClientConfig::backup_timeout: `setting` names which). The connection stays open; a
    /// late response is dropped.
    #[error("{request} got no response within {timeout:?} ({setting})")]
    Timeout {
        request: &'static str,
        timeout: Duration,
        /// The `ClientConfig` field that set `timeout`.
        setting: &'static str,
    },
    /// The server answered with ERROR. Match `code` for the one you handle; two of them say
    /// something of a write's outcome (decision 0031):
    ///
    /// - `ErrorCode::Unconfirmed` (`is_unconfirmed`): a write asked `Durability::Remote` (or
    ///   under the server's `--ack-after remote`) is durable on the server but was not
    ///   confirmed off-host in time (the object store slow or failing, the primary fenced);
    ///   it may or may not survive a failover. Retry it with the same idempotency key (a
    ///   turn's key: the retry answers that turn, `existing`; the same KV value; the seal
    ///   again, whose `StreamEnded` then names the sealed turn). `detail` is its TurnID when
    ///   it has one (`unconfirmed_turn`).
    /// - `ErrorCode::NotPrimary` (`is_not_primary`): this server takes no writes now (a
    ///   standby, a fenced primary); nothing was written, so sending it to the primary is safe
    ///   without a key. `detail` is the newest epoch it knows.
    #[error("{code}: {message}")]
    Server {
        code: ErrorCode,
        detail: u64,
        message: String,
    },
    #[error("connection closed: {0}")]
    Closed(String),
    /// A write without an idempotency key whose connection was lost (or that was answered
    /// UNCONFIRMED, or got no answer in time) while the client follows the primary among
    /// several addresses (decision 0031 §11): it **may or may not have landed**. It is not
    /// sent again, which could write it twice; read back to see, or give the write a key (a
    /// turn's key with `append_turn`/`append_turns`: a retry then lands exactly once).
    #[error("outcome unknown: {request} may or may not have been written ({reason})")]
    OutcomeUnknown {
        request: &'static str,
        reason: String,
    },
    /// No listed address took writes within `ClientConfig::failover_timeout` (several
    /// addresses, decision 0031 §11). `last` says what the addresses answered last.
    #[error("no primary among {addrs} within {waited:?} (ClientConfig::failover_timeout): {last}")]
    NoPrimary {
        addrs: String,
        waited: Duration,
        last: String,
    },
    /// The server sent something this client does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A payload did not inflate, or did not match its hash.
    #[error("payload {hash} failed verification: {reason}")]
    Corrupt { hash: String, reason: String },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A call the negotiated protocol version does not have (a version-2 call such as
    /// `open_context`, or a context named by its name, on a server that speaks only version
    /// 1). Refused before anything is sent; the connection stays usable.
    #[error(
        "{request} needs protocol version {needed}, but the server speaks version {version}; \
         upgrade the server"
    )]
    Unsupported {
        request: &'static str,
        needed: u16,
        version: u16,
    },
}

impl From<ctxstore_protocol::EncodeError> for ClientError {
    fn from(error: ctxstore_protocol::EncodeError) -> Self {
        ClientError::InvalidArgument(error.to_string())
    }
}

impl ClientError {
    /// The server's error code, when the server answered with ERROR.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// UNCONFIRMED (protocol version 4, decision 0031): the write is durable on the server but
    /// not confirmed off-host (its `Durability::Remote` wait ended without the object store
    /// holding it); retry it with the same idempotency key. Without a key its outcome is
    /// unknown.
    pub fn is_unconfirmed(&self) -> bool {
        self.code() == Some(ErrorCode::Unconfirmed)
    }

    /// The TurnID an UNCONFIRMED answer names (the write's turn, durable on the server);
    /// `None` for any other error, or a write with no turn of its own (a KV put).
    pub fn unconfirmed_turn(&self) -> Option<u64> {
        match self {
            ClientError::Server {
                code: ErrorCode::Unconfirmed,
                detail,
                ..
            } if *detail != 0 => Some(*detail),
            _ => None,
        }
    }

    /// NOT_PRIMARY (protocol version 4, decision 0031): the server takes no writes now (a
    /// standby, a fenced primary); nothing was written.
    pub fn is_not_primary(&self) -> bool {
        self.code() == Some(ErrorCode::NotPrimary)
    }

    /// A write's outcome is unknown (`ClientError::OutcomeUnknown`): it may have landed.
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, ClientError::OutcomeUnknown { .. })
    }

    /// No ctxstore server could be reached or kept: refused, timed out (connecting, in HELLO
    /// or waiting for a response), something else on the port, or the connection lost.
    pub fn is_connection_failure(&self) -> bool {
        // (`NoPrimary` is not one: servers answered, none of them took writes.)
        matches!(
            self,
            ClientError::Connect { .. }
                | ClientError::ConnectTimeout { .. }
                | ClientError::HandshakeTimeout { .. }
                | ClientError::Handshake { .. }
                | ClientError::Timeout { .. }
                | ClientError::Closed(_)
        )
    }

    /// A stable upper-case name for this error: the server's code name (`NOT_FOUND`,
    /// `CONFLICT`, …) for a server ERROR, otherwise the client-side kind (`CONNECT_FAILED`,
    /// `CONNECT_TIMEOUT`, `HANDSHAKE_TIMEOUT`, `NOT_CTXSTORE`, `TIMEOUT`,
    /// `CONNECTION_CLOSED`, `PROTOCOL`, `CORRUPT_PAYLOAD`, `INVALID_ARGUMENT`,
    /// `UNSUPPORTED_BY_SERVER`, `OUTCOME_UNKNOWN`, `NO_PRIMARY`).
    pub fn name(&self) -> &'static str {
        match self {
            ClientError::Server { code, .. } => code.name(),
            ClientError::Connect { .. } => "CONNECT_FAILED",
            ClientError::ConnectTimeout { .. } => "CONNECT_TIMEOUT",
            ClientError::HandshakeTimeout { .. } => "HANDSHAKE_TIMEOUT",
            ClientError::Handshake { .. } => "NOT_CTXSTORE",
            ClientError::Timeout { .. } => "TIMEOUT",
            ClientError::Closed(_) => "CONNECTION_CLOSED",
            ClientError::Protocol(_) => "PROTOCOL",
            ClientError::Corrupt { .. } => "CORRUPT_PAYLOAD",
            ClientError::InvalidArgument(_) => "INVALID_ARGUMENT",
            ClientError::Unsupported { .. } => "UNSUPPORTED_BY_SERVER",
            ClientError::OutcomeUnknown { .. } => "OUTCOME_UNKNOWN",
            ClientError::NoPrimary { .. } => "NO_PRIMARY",
        }
    }
}
