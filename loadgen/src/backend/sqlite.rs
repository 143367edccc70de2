//! SQLite as agent builders use it, in-process: the same tables as PostgreSQL in WAL mode
//! with `synchronous = FULL` (every commit fsynced). An append is one `BEGIN IMMEDIATE`
//! transaction; each load-generator connection is its own SQLite connection, run on tokio's
//! blocking pool. Writers queue on SQLite's lock (busy timeout 30 s).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, params};

use crate::backend::{Ack, BlobRef};
use crate::report::{DiskUsage, ServerReport};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS contexts (id INTEGER PRIMARY KEY, head INTEGER NOT NULL DEFAULT 0, head_depth INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY, parent INTEGER NOT NULL, context_id INTEGER NOT NULL, depth INTEGER NOT NULL,
    payload_hash BLOB NOT NULL, payload BLOB NOT NULL, created_at INTEGER NOT NULL DEFAULT (unixepoch()));";

const CHAIN_FROM: &str = "
WITH RECURSIVE chain(id, parent, depth, payload, n) AS (
    SELECT id, parent, depth, payload, 1 FROM turns WHERE id = ?1
    UNION ALL
    SELECT t.id, t.parent, t.depth, t.payload, chain.n + 1 FROM turns t JOIN chain ON t.id = chain.parent WHERE chain.n < ?2)
SELECT id, depth, payload FROM chain ORDER BY depth";

const RANGE: &str = "
WITH RECURSIVE chain(id, parent, depth, payload) AS (
    SELECT t.id, t.parent, t.depth, t.payload FROM turns t JOIN contexts c ON t.id = c.head WHERE c.id = ?1
    UNION ALL
    SELECT t.id, t.parent, t.depth, t.payload FROM turns t JOIN chain ON t.id = chain.parent WHERE chain.depth > ?2)
SELECT id, depth, payload FROM chain WHERE depth >= ?2 AND depth < ?2 + ?3 ORDER BY depth";

#[derive(Clone, Debug)]
pub struct SqliteConnection {
    path: PathBuf,
    connection: Arc<Mutex<Connection>>,
}

fn open(path: &Path) -> anyhow::Result<Connection> {
    let connection = Connection::open(path)?;
    connection.busy_timeout(std::time::Duration::from_secs(30))?;
    connection.pragma_update(None, "journal_mode", "WAL")?;
    connection.pragma_update(None, "synchronous", "FULL")?;
    Ok(connection)
}

pub fn prepare(path: &Path) -> anyhow::Result<()> {
    open(path)?.execute_batch(SCHEMA)?;
    Ok(())
}

pub async fn connect(path: &Path) -> anyhow::Result<SqliteConnection> {
    let path = path.to_path_buf();
    let opened = path.clone();
    let connection = tokio::task::spawn_blocking(move || open(&opened)).await??;
    Ok(SqliteConnection {
        path,
        connection: Arc::new(Mutex::new(connection)),
    })
}

async fn with<T: Send + 'static>(
    sqlite: &SqliteConnection,
    work: impl FnOnce(&mut Connection) -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    let connection = sqlite.connection.clone();
    tokio::task::spawn_blocking(move || {
        let mut connection = connection
            .lock()
            .map_err(|_| anyhow::anyhow!("sqlite connection poisoned"))?;
        work(&mut connection)
    })
    .await?
}

pub async fn create_context(sqlite: &SqliteConnection) -> anyhow::Result<u64> {
    with(sqlite, |connection| {
        connection.execute("INSERT INTO contexts DEFAULT VALUES", [])?;
        Ok(connection.last_insert_rowid() as u64)
    })
    .await
}

pub async fn append(
    sqlite: &SqliteConnection,
    context: u64,
    payload: Bytes,
) -> anyhow::Result<Ack> {
    with(sqlite, move |connection| {
        let hash = blake3::hash(&payload);
        let transaction = connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let (head, head_depth): (i64, i64) =
            transaction.query_row("SELECT head, head_depth FROM contexts WHERE id = ?1", [context as i64], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?;
        let depth = if head == 0 { 0 } else { head_depth + 1 };
        transaction.execute(
            "INSERT INTO turns (parent, context_id, depth, payload_hash, payload) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![head, context as i64, depth, &hash.as_bytes()[..], &payload[..]],
        )?;
        let turn = transaction.last_insert_rowid();
        transaction.execute("UPDATE contexts SET head = ?1, head_depth = ?2 WHERE id = ?3", params![turn, depth, context as i64])?;
        transaction.commit()?;
        Ok(Ack {
            turn_id: turn as u64,
            parent_turn_id: head as u64, depth: depth as u32, payload_hash: hash.to_hex().to_string() })
    })
    .await
}

fn chain_from(connection: &Connection, start: i64, limit: u32) -> anyhow::Result<usize> {
    let mut statement = connection.prepare_cached(CHAIN_FROM)?;
    let rows = statement.query_map(params![start, limit], |row| row.get::<_, Vec<u8>>(2))?;
    Ok(rows.count())
}

pub async fn get_last(
    sqlite: &SqliteConnection,
    context: u64,
    limit: u32,
) -> anyhow::Result<usize> {
    with(sqlite, move |connection| {
        let head: i64 = connection.query_row(
            "SELECT head FROM contexts WHERE id = ?1",
            [context as i64],
            |row| row.get(0),
        )?;
        chain_from(connection, head, limit)
    })
    .await
}

pub async fn page(sqlite: &SqliteConnection, before: u64, limit: u32) -> anyhow::Result<usize> {
    with(sqlite, move |connection| {
        let parent: i64 = connection.query_row(
            "SELECT parent FROM turns WHERE id = ?1",
            [before as i64],
            |row| row.get(0),
        )?;
        chain_from(connection, parent, limit)
    })
    .await
}

pub async fn range(
    sqlite: &SqliteConnection,
    context: u64,
    from_depth: u32,
    limit: u32,
) -> anyhow::Result<usize> {
    with(sqlite, move |connection| {
        let mut statement = connection.prepare_cached(RANGE)?;
        let rows = statement.query_map(params![context as i64, from_depth, limit], |row| {
            row.get::<_, Vec<u8>>(2)
        })?;
        Ok(rows.count())
    })
    .await
}

pub async fn fork(sqlite: &SqliteConnection, turn: u64) -> anyhow::Result<u64> {
    with(sqlite, move |connection| {
        let changed = connection.execute(
            "INSERT INTO contexts (head, head_depth) SELECT id, depth FROM turns WHERE id = ?1",
            [turn as i64],
        )?;
        anyhow::ensure!(changed == 1, "turn {turn} not found");
        Ok(connection.last_insert_rowid() as u64)
    })
    .await
}

pub async fn get_blob(sqlite: &SqliteConnection, blob: &BlobRef) -> anyhow::Result<usize> {
    let turn = blob.turn_id as i64;
    with(sqlite, move |connection| {
        let payload: Option<Vec<u8>> = connection
            .query_row("SELECT payload FROM turns WHERE id = ?1", [turn], |row| {
                row.get(0)
            })
            .optional()?;
        payload
            .map(|payload| payload.len())
            .ok_or_else(|| anyhow::anyhow!("turn {turn} not found"))
    })
    .await
}

pub async fn server_report(sqlite: &SqliteConnection) -> anyhow::Result<ServerReport> {
    let path = sqlite.path.clone();
    with(sqlite, move |connection| {
        let (turns, logical): (i64, i64) = connection.query_row(
            "SELECT count(*), coalesce(sum(length(payload)), 0) FROM turns",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        let file_bytes = |suffix: &str| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::fs::metadata(PathBuf::from(name)).map_or(0, |metadata| metadata.len())
        };
        let disk = file_bytes("") + file_bytes("-wal") + file_bytes("-shm");
        Ok(ServerReport {
            turns: Some(turns as u64),
            blobs: None,
            logical_bytes: Some(logical as u64),
            stored_bytes: Some(file_bytes("")),
            disk_bytes: Some(disk),
            dedup_hits: None,
        })
    })
    .await
}

/// The database file and its WAL, both ways (allocated blocks and lengths). Measured while
/// connections are open: the last one to close checkpoints the WAL into the file and removes
/// it, so the sum is what the data occupies either way, give or take the pages that exist in
/// both. The `-shm` index is memory the connections map, not data.
pub async fn disk_usage(sqlite: &SqliteConnection) -> anyhow::Result<DiskUsage> {
    use std::os::unix::fs::MetadataExt;
    let mut usage = DiskUsage {
        allocated_bytes: Some(0),
        file_bytes: Some(0),
        measured: "the database file and its -wal".into(),
    };
    for suffix in ["", "-wal"] {
        let mut name = sqlite.path.as_os_str().to_owned();
        name.push(suffix);
        let metadata = match std::fs::metadata(PathBuf::from(&name)) {
            Ok(metadata) => metadata,
            // No WAL (yet, or checkpointed away): nothing to count.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && !suffix.is_empty() => {
                continue;
            }
            Err(error) => {
                return Err(anyhow::Error::new(error)
                    .context(format!("measuring {}", PathBuf::from(name).display())));
            }
        };
        usage.allocated_bytes = usage
            .allocated_bytes
            .map(|sum| sum + metadata.blocks() * 512);
        usage.file_bytes = usage.file_bytes.map(|sum| sum + metadata.len());
    }
    Ok(usage)
}
