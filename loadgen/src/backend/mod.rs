//! The stores the load generator can drive, behind the same logical operations:
//! append (a turn with a parent pointer + move the context head, durably, at once), get_last
//! N with payloads, page before a turn, range by depth, fork, get one payload; and, where the
//! store has streams (ctxstore, Redis), the streaming workload's (`streams.rs`).

pub mod ctxstore;
pub mod postgres;
pub mod redis;
pub mod redis_streams;
pub mod sqlite;
pub mod streams;

use bytes::Bytes;
use ctxstore_client::{Durability, VerifyPayloads};

use crate::report::{DiskUsage, ServerReport};

/// Which store, and how to reach it.
#[derive(Clone, Debug)]
pub enum BackendKind {
    Ctxstore {
        addr: String,
        token: Option<String>,
        /// Let the client cut large payloads into chunks and send only the ones the server
        /// lacks (sub-blob dedup, issue 16); off: every payload whole.
        client_chunking: bool,
        /// Let the client compress payloads (zstd frames, issue 38); off: the server does.
        client_compression: bool,
        /// Which payloads the client hashes (decision 0015).
        verify_payloads: VerifyPayloads,
        /// When the server acknowledges the appends (and seals): `--durability`, decision
        /// 0031; `Default` sends no flag (the server's `--ack-after`).
        durability: Durability,
        /// A fresh idempotency key on every append (`--idempotency-keys`): the client retries
        /// an append whose answer a failover took on the next primary, and it lands once.
        idempotency_keys: bool,
    },
    /// `postgres://user@host:port/db` (run with `synchronous_commit = on`).
    Postgres { url: String },
    /// `redis://host:port` (run with `appendonly yes`, `appendfsync always`).
    Redis { url: String },
    /// A database file (WAL, `synchronous = FULL`), in this process.
    Sqlite { path: std::path::PathBuf },
    /// A store whose answers take a scripted time: for testing the load generator's own
    /// measurement (coordinated omission), never a stand-in for a real store.
    #[cfg(test)]
    Scripted(std::sync::Arc<scripted::Script>),
}

impl BackendKind {
    pub fn name(&self) -> &'static str {
        match self {
            BackendKind::Ctxstore { .. } => "ctxstore",
            BackendKind::Postgres { .. } => "postgres",
            BackendKind::Redis { .. } => "redis",
            BackendKind::Sqlite { .. } => "sqlite",
            #[cfg(test)]
            BackendKind::Scripted(_) => "scripted",
        }
    }

    /// When ctxstore acknowledges the appends (`--durability`): its name for the ack log and
    /// the report (`default`, `local`, `remote`); `None` for a peer, which has no such
    /// choice.
    pub fn durability(&self) -> Option<&'static str> {
        match self {
            BackendKind::Ctxstore { durability, .. } => Some(durability.name()),
            _ => None,
        }
    }

    /// Creates what the store needs before a run (tables), where it needs anything.
    pub async fn prepare(&self) -> anyhow::Result<()> {
        match self {
            BackendKind::Postgres { url } => postgres::prepare(url).await,
            BackendKind::Sqlite { path } => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || sqlite::prepare(&path)).await?
            }
            _ => Ok(()),
        }
    }

    pub async fn connect(&self) -> anyhow::Result<Connection> {
        Ok(match self {
            BackendKind::Ctxstore {
                addr,
                token,
                client_chunking,
                client_compression,
                verify_payloads,
                durability,
                idempotency_keys,
            } => Connection::Ctxstore(
                ctxstore::connect(
                    addr,
                    token.clone(),
                    *client_chunking,
                    *client_compression,
                    *verify_payloads,
                    *idempotency_keys,
                )
                .await?
                .with_durability(*durability),
            ),
            BackendKind::Postgres { url } => Connection::Postgres(postgres::connect(url).await?),
            BackendKind::Redis { url } => Connection::Redis(redis::connect(url).await?),
            BackendKind::Sqlite { path } => Connection::Sqlite(sqlite::connect(path).await?),
            #[cfg(test)]
            BackendKind::Scripted(script) => Connection::Scripted(script.clone()),
        })
    }
}

/// An acknowledged append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    pub turn_id: u64,
    pub parent_turn_id: u64,
    pub depth: u32,
    /// BLAKE3 of the payload, hex (what ctxstore names blobs by).
    pub payload_hash: String,
}

/// A payload to read back: by hash where the store is content-addressed, else by turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobRef {
    pub turn_id: u64,
    pub payload_hash: String,
}

/// One connection to a store.
#[derive(Debug)]
pub enum Connection {
    Ctxstore(ctxstore_client::Client),
    Postgres(tokio_postgres::Client),
    Redis(redis::RedisConnection),
    Sqlite(sqlite::SqliteConnection),
    #[cfg(test)]
    Scripted(std::sync::Arc<scripted::Script>),
}

impl Connection {
    pub async fn create_context(&self) -> anyhow::Result<u64> {
        match self {
            Connection::Ctxstore(client) => ctxstore::create_context(client).await,
            Connection::Postgres(client) => postgres::create_context(client).await,
            Connection::Redis(client) => redis::create_context(client).await,
            Connection::Sqlite(client) => sqlite::create_context(client).await,
            #[cfg(test)]
            Connection::Scripted(script) => script.answer(1).await,
        }
    }

    pub async fn append(&self, context: u64, payload: Bytes) -> anyhow::Result<Ack> {
        match self {
            Connection::Ctxstore(client) => ctxstore::append(client, context, payload).await,
            Connection::Postgres(client) => postgres::append(client, context, payload).await,
            Connection::Redis(client) => redis::append(client, context, payload).await,
            Connection::Sqlite(client) => sqlite::append(client, context, payload).await,
            #[cfg(test)]
            Connection::Scripted(script) => {
                let turn = script.answer(context).await?;
                let payload_hash = blake3::hash(&payload).to_hex().to_string();
                Ok(Ack {
                    turn_id: turn,
                    parent_turn_id: 0,
                    depth: (turn % 1000) as u32,
                    payload_hash,
                })
            }
        }
    }

    /// The newest `limit` turns with payloads; returns how many came back.
    pub async fn get_last(&self, context: u64, limit: u32) -> anyhow::Result<usize> {
        match self {
            Connection::Ctxstore(client) => {
                Ok(client.last(context, limit, true).await?.turns.len())
            }
            Connection::Postgres(client) => postgres::get_last(client, context, limit).await,
            Connection::Redis(client) => redis::get_last(client, context, limit).await,
            Connection::Sqlite(client) => sqlite::get_last(client, context, limit).await,
            #[cfg(test)]
            Connection::Scripted(script) => script.answer(0).await.map(|_| 0),
        }
    }

    /// The `limit` turns older than `before`, with payloads.
    pub async fn page(&self, context: u64, before: u64, limit: u32) -> anyhow::Result<usize> {
        match self {
            Connection::Ctxstore(client) => Ok(client
                .before(context, before, limit, true)
                .await?
                .turns
                .len()),
            Connection::Postgres(client) => postgres::page(client, before, limit).await,
            Connection::Redis(client) => redis::page(client, before, limit).await,
            Connection::Sqlite(client) => sqlite::page(client, before, limit).await,
            #[cfg(test)]
            Connection::Scripted(script) => script.answer(0).await.map(|_| 0),
        }
    }

    /// The turns with depth in `from_depth..from_depth + limit`, with payloads.
    pub async fn range(&self, context: u64, from_depth: u32, limit: u32) -> anyhow::Result<usize> {
        match self {
            Connection::Ctxstore(client) => Ok(client
                .range(context, from_depth, limit, true)
                .await?
                .turns
                .len()),
            Connection::Postgres(client) => {
                postgres::range(client, context, from_depth, limit).await
            }
            Connection::Redis(client) => redis::range(client, context, from_depth, limit).await,
            Connection::Sqlite(client) => sqlite::range(client, context, from_depth, limit).await,
            #[cfg(test)]
            Connection::Scripted(script) => script.answer(0).await.map(|_| 0),
        }
    }

    pub async fn fork(&self, turn: u64) -> anyhow::Result<u64> {
        match self {
            Connection::Ctxstore(client) => Ok(client.fork(turn).await?.context_id),
            Connection::Postgres(client) => postgres::fork(client, turn).await,
            Connection::Redis(client) => redis::fork(client, turn).await,
            Connection::Sqlite(client) => sqlite::fork(client, turn).await,
            #[cfg(test)]
            Connection::Scripted(script) => script.answer(turn).await,
        }
    }

    pub async fn get_blob(&self, blob: &BlobRef) -> anyhow::Result<usize> {
        match self {
            Connection::Ctxstore(client) => ctxstore::get_blob(client, blob).await,
            Connection::Postgres(client) => postgres::get_blob(client, blob).await,
            Connection::Redis(client) => redis::get_blob(client, blob).await,
            Connection::Sqlite(client) => sqlite::get_blob(client, blob).await,
            #[cfg(test)]
            Connection::Scripted(script) => script.answer(0).await.map(|_| 0),
        }
    }

    /// Request bytes written to the store on this connection, where the client counts them.
    pub fn bytes_sent(&self) -> Option<u64> {
        match self {
            Connection::Ctxstore(client) => ctxstore::bytes_sent(client),
            _ => None,
        }
    }

    /// What the store's data occupies on disk, where the store can tell over its connection
    /// (PostgreSQL: its tables; SQLite: its files). ctxstore's data directory is on the
    /// server's side: the caller measures it (`spawn::directory_usage`) when it knows where.
    pub async fn disk_usage(&self) -> anyhow::Result<Option<DiskUsage>> {
        match self {
            Connection::Postgres(client) => postgres::disk_usage(client).await.map(Some),
            Connection::Sqlite(client) => sqlite::disk_usage(client).await.map(Some),
            _ => Ok(None),
        }
    }

    /// What the store says about itself (counts, bytes).
    pub async fn server_report(&self) -> anyhow::Result<ServerReport> {
        match self {
            Connection::Ctxstore(client) => ctxstore::server_report(client).await,
            Connection::Postgres(client) => postgres::server_report(client).await,
            Connection::Redis(client) => redis::server_report(client).await,
            Connection::Sqlite(client) => sqlite::server_report(client).await,
            #[cfg(test)]
            Connection::Scripted(_) => Ok(ServerReport::default()),
        }
    }
}

#[cfg(test)]
pub mod scripted {
    //! Answers after `latency`, except during a stall, when every answer waits until it ends.

    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    #[derive(Debug)]
    pub struct Script {
        pub latency: Duration,
        pub stall: std::sync::Mutex<Option<(Instant, Instant)>>,
        pub answers: AtomicU64,
    }

    impl Script {
        pub fn new(latency: Duration) -> Self {
            Script {
                latency,
                stall: std::sync::Mutex::new(None),
                answers: AtomicU64::new(0),
            }
        }

        pub async fn answer(&self, value: u64) -> anyhow::Result<u64> {
            tokio::time::sleep(self.latency).await;
            let stall = self.stall.lock().ok().and_then(|stall| *stall);
            if let Some((from, until)) = stall {
                let now = Instant::now();
                if now >= from && now < until {
                    tokio::time::sleep_until(until.into()).await;
                }
            }
            let count = self.answers.fetch_add(1, Ordering::Relaxed) + 1;
            Ok(value.max(1) * 1000 + count % 1000)
        }
    }
}
