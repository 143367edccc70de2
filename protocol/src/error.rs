//! Error codes carried by the ERROR message, and why a body failed to decode.

/// Stable numeric codes of the ERROR message. Never renumbered; new codes are appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ErrorCode {
    /// The frame or its body is malformed. The server closes the connection after it.
    BadFrame = 1,
    /// The message type is not known to this server. The connection stays open.
    UnknownMessage = 2,
    /// A frame, payload or list is larger than the server's limit.
    TooLarge = 3,
    /// No HELLO yet, or a wrong token. The server closes the connection after it.
    Unauthorized = 4,
    /// The context, turn or blob does not exist.
    NotFound = 5,
    /// The context's head is not the expected one; `detail` holds the actual head.
    Conflict = 6,
    /// The store refuses writes (a failed fsync, a standby, a fenced primary, or for now a
    /// primary too far ahead of its replica); reads go on.
    ReadOnly = 7,
    /// The disk is full; reads go on.
    NoSpace = 8,
    /// Too many connections or requests; retry later.
    Overloaded = 9,
    /// A bug or an I/O error in the server.
    Internal = 10,
    /// A well-formed request with a value the server cannot accept (a depth overflow …).
    InvalidArgument = 11,
    /// HELLO offered no protocol version this server speaks; `detail` holds the server's.
    UnsupportedVersion = 12,
    /// The server is shutting down and takes no new work.
    ShuttingDown = 13,
    /// Stored data failed its checksum; the message names file and offset.
    Corrupt = 14,
    /// (Version 2.) The name is taken by another context; `detail` holds its ContextID.
    AlreadyExists = 15,
    /// (Version 2.) Bytes sent do not hash to the BlobHash they claim (a chunk of PUT_CHUNKED,
    /// or the payload its chunks rebuild).
    HashMismatch = 16,
    /// (Version 3.) The stream was sealed or aborted and takes no more deltas; `detail` holds
    /// the turn it was sealed into (0: aborted).
    StreamEnded = 17,
    /// (Version 3.) Another connection owns the stream (it opened it, or took it over after
    /// its owner's connection closed); only the owner appends, seals or aborts.
    StreamNotOwned = 18,
    /// (Version 4.) This server takes no writes now: a standby, or a primary that another
    /// took the replica from (fenced). Nothing was written; the message names the primary's
    /// HOST:PORT when it is known. Send the write to the primary (ROLE says which server is).
    /// A connection of version 1–3 gets READ_ONLY instead (`ErrorCode::in_version`).
    NotPrimary = 19,
    /// (Version 4.) The write is durable on this server but was not acknowledged as it asked
    /// (`ACK_AFTER remote`: the object store did not store it in time); it may or may not
    /// survive a failover; `detail` holds its TurnID when it has one. Retry with the same
    /// idempotency key. A connection of version 1–3 gets INTERNAL instead.
    Unconfirmed = 20,
    /// (Version 5.) The write would take the connection's tenant past one of its quotas (decision
    /// 0032 §3); nothing of it was written. The message names the quota, its limit and the
    /// usage; `detail` holds the limit. A connection of version 1–4 gets OVERLOADED instead.
    QuotaExceeded = 21,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 21] = [
        ErrorCode::BadFrame,
        ErrorCode::UnknownMessage,
        ErrorCode::TooLarge,
        ErrorCode::Unauthorized,
        ErrorCode::NotFound,
        ErrorCode::Conflict,
        ErrorCode::ReadOnly,
        ErrorCode::NoSpace,
        ErrorCode::Overloaded,
        ErrorCode::Internal,
        ErrorCode::InvalidArgument,
        ErrorCode::UnsupportedVersion,
        ErrorCode::ShuttingDown,
        ErrorCode::Corrupt,
        ErrorCode::AlreadyExists,
        ErrorCode::HashMismatch,
        ErrorCode::StreamEnded,
        ErrorCode::StreamNotOwned,
        ErrorCode::NotPrimary,
        ErrorCode::Unconfirmed,
        ErrorCode::QuotaExceeded,
    ];

    pub fn code(self) -> u16 {
        self as u16
    }

    /// The protocol version that introduced this code.
    pub fn since_version(self) -> u16 {
        match self {
            ErrorCode::AlreadyExists | ErrorCode::HashMismatch => 2,
            ErrorCode::StreamEnded | ErrorCode::StreamNotOwned => 3,
            ErrorCode::NotPrimary | ErrorCode::Unconfirmed => 4,
            ErrorCode::QuotaExceeded => 5,
            _ => 1,
        }
    }

    /// The code a connection that negotiated `version` is sent instead of this one: itself,
    /// or for a code newer than the connection the older code that said the same before it
    /// (NOT_PRIMARY was READ_ONLY, UNCONFIRMED was INTERNAL, decision 0031; QUOTA_EXCEEDED is
    /// OVERLOADED, a refusal that names no fault of the request). The codes of
    /// versions 2 and 3 answer only requests of their versions, so they stay.
    pub fn in_version(self, version: u16) -> ErrorCode {
        match self {
            ErrorCode::NotPrimary if version < 4 => ErrorCode::ReadOnly,
            ErrorCode::Unconfirmed if version < 4 => ErrorCode::Internal,
            ErrorCode::QuotaExceeded if version < 5 => ErrorCode::Overloaded,
            code => code,
        }
    }

    pub fn from_code(code: u16) -> Option<ErrorCode> {
        ErrorCode::ALL
            .into_iter()
            .find(|candidate| candidate.code() == code)
    }

    /// The name used in docs/protocol.md.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::BadFrame => "BAD_FRAME",
            ErrorCode::UnknownMessage => "UNKNOWN_MESSAGE",
            ErrorCode::TooLarge => "TOO_LARGE",
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::Conflict => "CONFLICT",
            ErrorCode::ReadOnly => "READ_ONLY",
            ErrorCode::NoSpace => "NO_SPACE",
            ErrorCode::Overloaded => "OVERLOADED",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::UnsupportedVersion => "UNSUPPORTED_VERSION",
            ErrorCode::ShuttingDown => "SHUTTING_DOWN",
            ErrorCode::Corrupt => "CORRUPT",
            ErrorCode::AlreadyExists => "ALREADY_EXISTS",
            ErrorCode::HashMismatch => "HASH_MISMATCH",
            ErrorCode::StreamEnded => "STREAM_ENDED",
            ErrorCode::StreamNotOwned => "STREAM_NOT_OWNED",
            ErrorCode::NotPrimary => "NOT_PRIMARY",
            ErrorCode::Unconfirmed => "UNCONFIRMED",
            ErrorCode::QuotaExceeded => "QUOTA_EXCEEDED",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a message body did not decode. Always answered with BAD_FRAME (or UNKNOWN_MESSAGE).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unknown message type {0:#06x}")]
    UnknownMessage(u16),
    #[error("body of {actual} bytes is too short for {message} (needs {needed})")]
    Truncated {
        message: &'static str,
        needed: usize,
        actual: usize,
    },
    #[error("{message} body has {extra} bytes after its end")]
    TrailingBytes { message: &'static str, extra: usize },
    #[error("{message}: {field} is invalid ({reason})")]
    Invalid {
        message: &'static str,
        field: &'static str,
        reason: &'static str,
    },
    #[error("{message}: {field} is {value}, above the limit of {limit}")]
    TooLarge {
        message: &'static str,
        field: &'static str,
        value: u64,
        limit: u64,
    },
}

impl DecodeError {
    /// The error code a server answers this with.
    pub fn code(&self) -> ErrorCode {
        match self {
            DecodeError::UnknownMessage(_) => ErrorCode::UnknownMessage,
            DecodeError::TooLarge { .. } => ErrorCode::TooLarge,
            _ => ErrorCode::BadFrame,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_stable() {
        for (index, code) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(code.code() as usize, index + 1);
            assert_eq!(ErrorCode::from_code(code.code()), Some(*code));
        }
        assert_eq!(ErrorCode::from_code(0), None);
        assert_eq!(ErrorCode::from_code(22), None);
    }

    #[test]
    fn a_newer_code_reaches_an_older_connection_as_the_code_it_replaced() {
        for code in ErrorCode::ALL {
            for version in crate::PROTOCOL_VERSION_MIN..=crate::PROTOCOL_VERSION {
                let sent = code.in_version(version);
                if version >= code.since_version() || code.since_version() < 4 {
                    assert_eq!(sent, code, "{code} to version {version}");
                } else {
                    assert!(
                        sent.since_version() <= version,
                        "{code} to version {version}"
                    );
                }
            }
        }
        assert_eq!(ErrorCode::NotPrimary.in_version(3), ErrorCode::ReadOnly);
        assert_eq!(ErrorCode::Unconfirmed.in_version(3), ErrorCode::Internal);
        assert_eq!(ErrorCode::NotPrimary.in_version(4), ErrorCode::NotPrimary);
        assert_eq!(
            ErrorCode::QuotaExceeded.in_version(4),
            ErrorCode::Overloaded
        );
        assert_eq!(
            ErrorCode::QuotaExceeded.in_version(5),
            ErrorCode::QuotaExceeded
        );
    }
}
