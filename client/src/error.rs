//! Client errors. A server's ERROR keeps its stable code.

use ctxstore_protocol::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("timed out connecting to {addr}")]
    ConnectTimeout { addr: String },
    /// The server answered with ERROR.
    #[error("{code}: {message}")]
    Server {
        code: ErrorCode,
        detail: u64,
        message: String,
    },
    #[error("connection closed: {0}")]
    Closed(String),
    /// The server sent something this client does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A payload did not inflate, or did not match its hash.
    #[error("payload {hash} failed verification: {reason}")]
    Corrupt { hash: String, reason: String },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
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
}
