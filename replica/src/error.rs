//! What fails in replication, shipping and restore, and where.

use std::path::PathBuf;

/// A replica object that does not decode: which object, at which byte, why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object} at byte {offset}: {reason}")]
pub struct FormatError {
    pub object: String,
    pub offset: u64,
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error("replication target {url:?}: {reason}")]
    Target { url: String, reason: String },
    #[error(
        "{location} holds objects that are not a ctxstore replica (first found: {found}); give \
         an empty prefix or one a ctxstore store replicated to"
    )]
    NotAReplica { location: String, found: String },
    #[error(
        "{location} holds the replica of another store (replica {remote}, this store's is \
         {local}); give another prefix, or restore from this one first (ctxstore-server restore)"
    )]
    OtherStore {
        location: String,
        remote: String,
        local: String,
    },
    #[error(
        "another primary took epoch {epoch} on {location} ({holder}): this server ships \
         nothing more and refuses writes. Stop it; do not restart it with --replicate-to on \
         this prefix (that would fence {holder}); to make it a standby, start it on an empty \
         directory with --follow (docs/operations.md, A standby)"
    )]
    Fenced {
        location: String,
        epoch: u64,
        holder: String,
    },
    /// Another live primary holds the prefix's lease (it renewed it while this one watched).
    #[error(
        "{holder} holds the lease of {location} and renews it: another primary serves this \
         prefix; start this server as its standby (--follow), or stop that one first"
    )]
    LeaseHeld { location: String, holder: String },
    /// The replica has no restore point yet (no replica at all, or a first generation that
    /// shipped nothing): a standby waits for one (`follow::prepare_waiting`).
    #[error("{location} {what}: there is no restore point yet")]
    NotYet { location: String, what: String },
    #[error("object {key} of the replica is missing; the replica cannot provide this point")]
    MissingObject { key: String },
    #[error("object {key} of the replica is damaged: {reason}")]
    Damaged { key: String, reason: String },
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("object store, {operation} {key}: {source}")]
    Store {
        operation: &'static str,
        key: String,
        #[source]
        source: object_store::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("local disk full while {doing} ({path}); replication retries once there is room")]
    NoSpace { doing: &'static str, path: PathBuf },
    /// Checked before a restore fetches a byte (`restore.rs`), so that a full disk never
    /// leaves a half-restored directory (or a rejoining primary's second copy) behind.
    #[error(
        "restoring into {dir} needs {needed_bytes} bytes and its file system has \
         {available_bytes} free; free space there or restore into another file system"
    )]
    NoRoomToRestore {
        dir: PathBuf,
        needed_bytes: u64,
        available_bytes: u64,
    },
    #[error(transparent)]
    Engine(#[from] ctxstore_engine::EngineError),
    #[error("{0}")]
    Invalid(String),
    #[error("replication stopped: the server is shutting down")]
    Stopped,
}

impl ReplicaError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> ReplicaError {
        let path = path.into();
        if source.raw_os_error() == Some(28) {
            ReplicaError::NoSpace {
                doing: "staging",
                path,
            }
        } else {
            ReplicaError::Io { path, source }
        }
    }

    /// Failures a later retry may get past (the object store, the network, a full disk);
    /// the rest need an operator (a damaged or foreign replica, fencing).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ReplicaError::Store { .. }
                | ReplicaError::NoSpace { .. }
                | ReplicaError::NoRoomToRestore { .. }
                | ReplicaError::Io { .. }
        )
    }

    /// A short stable name for metrics (`ctxstore_replication_failures_total{kind=…}`).
    pub fn kind(&self) -> &'static str {
        match self {
            ReplicaError::Target { .. } => "target",
            ReplicaError::NotAReplica { .. } | ReplicaError::OtherStore { .. } => "foreign",
            ReplicaError::Fenced { .. } | ReplicaError::LeaseHeld { .. } => "fenced",
            ReplicaError::NotYet { .. } => "not_yet",
            ReplicaError::MissingObject { .. } => "missing",
            ReplicaError::Damaged { .. } | ReplicaError::Format(_) => "damaged",
            ReplicaError::Store { source, .. } => match source {
                object_store::Error::NotFound { .. } => "not_found",
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. } => "precondition",
                _ => "store",
            },
            ReplicaError::Io { .. } => "io",
            ReplicaError::NoSpace { .. } | ReplicaError::NoRoomToRestore { .. } => "no_space",
            ReplicaError::Engine(_) => "engine",
            ReplicaError::Invalid(_) => "invalid",
            ReplicaError::Stopped => "stopped",
        }
    }
}
