//! Typed errors. Messages say what failed, where, and what to do.

use std::io;
use std::path::PathBuf;

use crate::format::RecordError;
use crate::ids::{BlobHash, ContextId, TurnId};

/// A damaged record: which file, which byte offset, what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "corrupt record in {} at offset {offset} ({reason}); run `ctxstore-server verify --data DIR` \
     for a full report",
    file.display()
)]
pub struct Corruption {
    pub file: PathBuf,
    pub offset: u64,
    pub reason: String,
}

impl Corruption {
    pub fn new(file: impl Into<PathBuf>, offset: u64, reason: impl ToString) -> Self {
        Corruption {
            file: file.into(),
            offset,
            reason: reason.to_string(),
        }
    }

    pub fn record(file: impl Into<PathBuf>, offset: u64, error: &RecordError) -> Self {
        Corruption::new(file, offset, error)
    }
}

/// The stable category of an engine error; the protocol maps each to one error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    NotFound,
    Conflict,
    TooLarge,
    InvalidArgument,
    ReadOnly,
    NoSpace,
    Corrupt,
    Io,
    ShutDown,
    AlreadyExists,
    /// Bytes sent do not hash to the BlobHash they claim (a chunk, or a chunked payload).
    HashMismatch,
    /// A stream was sealed or aborted (issue 32): it takes no more deltas.
    StreamEnded,
    /// Another connection owns the stream (issue 32).
    StreamNotOwned,
    /// This store takes no writes because another server is (or may be) the primary: a
    /// standby, a fenced primary, a primary whose ack gate is closed (decision 0031). Nothing
    /// was written; the writer goes there.
    NotPrimary,
    /// The write is durable on this server but its success was not confirmed: the ack gate
    /// closed (or a fence came) between its admission and its answer (decision 0031 §6). It
    /// may be missing from a server that takes over; the writer reads back before a retry.
    Unconfirmed,
    /// The write would take its tenant past a quota (decision 0032 §3); nothing was written.
    QuotaExceeded,
}

/// Why an engine operation failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("context {0} not found")]
    ContextNotFound(ContextId),
    #[error("turn {0} not found")]
    TurnNotFound(TurnId),
    #[error(
        "blob {0} not found: this store does not hold it (never stored, or collected or purged since)"
    )]
    BlobNotFound(BlobHash),
    /// An append named its payload by hash and the store does not hold it: the one case where
    /// sending the bytes is the way out.
    #[error("blob {0} not found; append the payload by value instead of referencing it by hash")]
    ReferencedBlobNotFound(BlobHash),
    #[error("head of context {context_id} is turn {actual}, not the expected turn {expected}")]
    Conflict {
        context_id: ContextId,
        expected: TurnId,
        actual: TurnId,
    },
    #[error("payload of {len} bytes exceeds blob_bytes_max ({max} bytes)")]
    TooLarge { len: u64, max: u64 },
    #[error(
        "turn {0} is redacted; a redacted turn takes no more patches or redactions (its \
         payload is gone for good)"
    )]
    Redacted(TurnId),
    #[error("{requested} turns requested; read_turns_max is {max} per read")]
    TooManyTurns { requested: u32, max: u32 },
    #[error("{0}")]
    InvalidArgument(String),
    #[error("over the limit of {what}: at most {limit}")]
    Limit { what: &'static str, limit: usize },
    #[error("the name {name:?} is taken by context {context_id}")]
    NameTaken { name: String, context_id: ContextId },
    #[error("no context is named {0:?}")]
    NameNotFound(String),
    /// No such vector index of the caller's tenant (decision 0033): the text names it.
    #[error("no {0}; create it first (VECTOR_INDEX_CREATE, `ctxstore index create`)")]
    VectorIndexNotFound(String),
    #[error("store is read-only: {0}")]
    ReadOnly(String),
    /// A write refused because this store is not the primary (a standby, a fenced primary):
    /// the text says which it is and, when known, where the primary is.
    #[error("not the primary: {0}")]
    NotPrimary(String),
    /// A batch written and synced while the ack gate closed (decision 0031 §6): durable here,
    /// as a batch whose answer a crash lost, but not acknowledged. The text says why the gate
    /// closed.
    #[error(
        "unconfirmed: the write is durable on this server, but its acknowledgements closed \
         before the answer ({0}); a server taking over may not hold it: read it back from the \
         primary before you retry (a keyed append retried with its key lands once)"
    )]
    Unconfirmed(String),
    #[error("no space left on the device holding {}; free space and retry", file.display())]
    NoSpace { file: PathBuf },
    #[error(transparent)]
    Corrupt(#[from] Corruption),
    #[error("I/O error on {}: {source}", file.display())]
    Io { file: PathBuf, source: io::Error },
    #[error("engine is shut down")]
    ShutDown,
    #[error(
        "{} of the chunks are not stored (first indexes {:?}); send their bytes with the \
         manifest", missing.len(), &missing[..missing.len().min(16)]
    )]
    MissingChunks { missing: Vec<u32> },
    #[error(
        "stream {0} not found: never opened, or ended long ago; list the context's open streams"
    )]
    StreamNotFound(u64),
    #[error("{}", stream_ended_message(*stream_id, *end))]
    StreamEnded {
        stream_id: u64,
        end: crate::format::stream_meta::StreamEnd,
    },
    #[error(
        "stream {0} is owned by another connection (the one that opened it, while it stays \
         connected); write it from that connection"
    )]
    StreamNotOwned(u64),
    #[error(
        "delta to stream {stream_id} at offset {offset}, but the stream holds {length} bytes; \
         read the stream and continue at its length"
    )]
    StreamOffset {
        stream_id: u64,
        offset: u64,
        length: u64,
    },
    /// A primary has handed out as many ids past its last shipped point as a new replica
    /// generation skips (issue 46 item 8): it takes new ids again once more has shipped.
    #[error("{0}")]
    Unshipped(String),
    /// The store's keys refused a seal (decision 0032 §4): a tenant without keys, the
    /// system's random source. Nothing was written in plain text instead.
    #[error("sealing: {0}")]
    Keys(String),
    #[error("{what} hashes to {actual}, not to the claimed {claimed}")]
    HashMismatch {
        what: String,
        claimed: BlobHash,
        actual: BlobHash,
    },
    #[error("{0}")]
    QuotaExceeded(crate::quota::QuotaExceeded),
}

impl EngineError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::ContextNotFound(_)
            | EngineError::TurnNotFound(_)
            | EngineError::BlobNotFound(_)
            | EngineError::ReferencedBlobNotFound(_)
            | EngineError::NameNotFound(_)
            | EngineError::VectorIndexNotFound(_)
            | EngineError::MissingChunks { .. }
            | EngineError::StreamNotFound(_) => ErrorKind::NotFound,
            EngineError::StreamEnded { .. } => ErrorKind::StreamEnded,
            EngineError::StreamNotOwned(_) => ErrorKind::StreamNotOwned,
            EngineError::StreamOffset { .. } => ErrorKind::Conflict,
            EngineError::HashMismatch { .. } => ErrorKind::HashMismatch,
            EngineError::Limit { .. } => ErrorKind::TooLarge,
            EngineError::NameTaken { .. } => ErrorKind::AlreadyExists,
            EngineError::Conflict { .. } => ErrorKind::Conflict,
            EngineError::TooLarge { .. } | EngineError::TooManyTurns { .. } => ErrorKind::TooLarge,
            EngineError::InvalidArgument(_) | EngineError::Redacted(_) => {
                ErrorKind::InvalidArgument
            }
            EngineError::ReadOnly(_) => ErrorKind::ReadOnly,
            EngineError::NotPrimary(_) => ErrorKind::NotPrimary,
            EngineError::Unconfirmed(_) => ErrorKind::Unconfirmed,
            EngineError::QuotaExceeded(_) => ErrorKind::QuotaExceeded,
            EngineError::NoSpace { .. } => ErrorKind::NoSpace,
            EngineError::Corrupt(_) => ErrorKind::Corrupt,
            EngineError::Io { .. } | EngineError::Keys(_) => ErrorKind::Io,
            EngineError::ShutDown => ErrorKind::ShutDown,
            // Writes refused for now, reads go on: READ_ONLY, the message says until when.
            EngineError::Unshipped(_) => ErrorKind::ReadOnly,
        }
    }

    /// An I/O error on a write path: ENOSPC becomes `NoSpace`, the rest `Io`.
    pub(crate) fn from_write(file: impl Into<PathBuf>, source: io::Error) -> EngineError {
        let file = file.into();
        if is_no_space(&source) {
            EngineError::NoSpace { file }
        } else {
            EngineError::Io { file, source }
        }
    }

    pub(crate) fn io(file: impl Into<PathBuf>, source: io::Error) -> EngineError {
        EngineError::Io {
            file: file.into(),
            source,
        }
    }

    /// A copy for answering every request of a failed batch with the same error.
    // One arm per variant, each a copy: it grows with the enum, and splitting it would only
    // move arms apart.
    #[allow(clippy::too_many_lines)]
    pub(crate) fn duplicate(&self) -> EngineError {
        match self {
            EngineError::ContextNotFound(id) => EngineError::ContextNotFound(*id),
            EngineError::TurnNotFound(id) => EngineError::TurnNotFound(*id),
            EngineError::BlobNotFound(hash) => EngineError::BlobNotFound(*hash),
            EngineError::ReferencedBlobNotFound(hash) => EngineError::ReferencedBlobNotFound(*hash),
            EngineError::Conflict {
                context_id,
                expected,
                actual,
            } => EngineError::Conflict {
                context_id: *context_id,
                expected: *expected,
                actual: *actual,
            },
            EngineError::TooLarge { len, max } => EngineError::TooLarge {
                len: *len,
                max: *max,
            },
            EngineError::TooManyTurns { requested, max } => EngineError::TooManyTurns {
                requested: *requested,
                max: *max,
            },
            EngineError::InvalidArgument(text) => EngineError::InvalidArgument(text.clone()),
            EngineError::VectorIndexNotFound(text) => {
                EngineError::VectorIndexNotFound(text.clone())
            }
            EngineError::Redacted(turn_id) => EngineError::Redacted(*turn_id),
            EngineError::Limit { what, limit } => EngineError::Limit {
                what,
                limit: *limit,
            },
            EngineError::NameTaken { name, context_id } => EngineError::NameTaken {
                name: name.clone(),
                context_id: *context_id,
            },
            EngineError::NameNotFound(name) => EngineError::NameNotFound(name.clone()),
            EngineError::ReadOnly(text) => EngineError::ReadOnly(text.clone()),
            EngineError::NotPrimary(text) => EngineError::NotPrimary(text.clone()),
            EngineError::Unconfirmed(text) => EngineError::Unconfirmed(text.clone()),
            EngineError::QuotaExceeded(refused) => EngineError::QuotaExceeded(refused.clone()),
            EngineError::NoSpace { file } => EngineError::NoSpace { file: file.clone() },
            EngineError::Corrupt(corruption) => EngineError::Corrupt(corruption.clone()),
            EngineError::Io { file, source } => EngineError::Io {
                file: file.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
            EngineError::ShutDown => EngineError::ShutDown,
            EngineError::Unshipped(text) => EngineError::Unshipped(text.clone()),
            EngineError::Keys(text) => EngineError::Keys(text.clone()),
            EngineError::StreamNotFound(id) => EngineError::StreamNotFound(*id),
            EngineError::StreamNotOwned(id) => EngineError::StreamNotOwned(*id),
            EngineError::StreamEnded { stream_id, end } => EngineError::StreamEnded {
                stream_id: *stream_id,
                end: *end,
            },
            EngineError::StreamOffset {
                stream_id,
                offset,
                length,
            } => EngineError::StreamOffset {
                stream_id: *stream_id,
                offset: *offset,
                length: *length,
            },
            EngineError::MissingChunks { missing } => EngineError::MissingChunks {
                missing: missing.clone(),
            },
            EngineError::HashMismatch {
                what,
                claimed,
                actual,
            } => EngineError::HashMismatch {
                what: what.clone(),
                claimed: *claimed,
                actual: *actual,
            },
        }
    }
}

pub(crate) fn is_no_space(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::StorageFull || error.raw_os_error() == Some(28)
}

/// Why `Engine::open` (or `verify`) could not make the store available.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(
        "data directory {} is locked by another process (a running ctxstore-server?); stop it \
         first",
        path.display()
    )]
    Locked { path: PathBuf },
    #[error("I/O error on {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Corrupt(#[from] Corruption),
    #[error("inconsistent store: {0}; run `ctxstore-server verify --data DIR` for a full report")]
    Inconsistent(String),
    #[error("could not start engine thread: {0}")]
    Thread(String),
}

impl OpenError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> OpenError {
        OpenError::Io {
            path: path.into(),
            source,
        }
    }
}

fn stream_ended_message(stream_id: u64, end: crate::format::stream_meta::StreamEnd) -> String {
    match end {
        crate::format::stream_meta::StreamEnd::Sealed(turn_id) => format!(
            "stream {stream_id} was sealed into turn {turn_id}; read that turn instead of the stream"
        ),
        crate::format::stream_meta::StreamEnd::Aborted => {
            format!("stream {stream_id} was aborted; open a new stream")
        }
    }
}
