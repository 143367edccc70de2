//! PostgreSQL as agent builders use it: a `contexts` table of heads and a `turns` table with a
//! parent pointer and the payload inline (TOAST-compressed). An append inserts the turn and
//! moves the head in one statement (one transaction, durable at commit with
//! `synchronous_commit = on`). Reads walk parent pointers with a recursive CTE, so forks work.

use bytes::Bytes;
use tokio_postgres::{Client, NoTls};

use crate::backend::{Ack, BlobRef};
use crate::report::{DiskUsage, ServerReport};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS contexts (
    id BIGSERIAL PRIMARY KEY,
    head BIGINT NOT NULL DEFAULT 0,
    head_depth INT NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS turns (
    id BIGSERIAL PRIMARY KEY,
    parent BIGINT NOT NULL,
    context_id BIGINT NOT NULL,
    depth INT NOT NULL,
    payload_hash BYTEA NOT NULL,
    payload BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);";

const APPEND: &str = "
WITH head AS (SELECT head, head_depth FROM contexts WHERE id = $1 FOR UPDATE),
     turn AS (
        INSERT INTO turns (parent, context_id, depth, payload_hash, payload)
        SELECT head, $1, CASE WHEN head = 0 THEN 0 ELSE head_depth + 1 END, $2, $3 FROM head
        RETURNING id, depth, parent)
UPDATE contexts SET head = turn.id, head_depth = turn.depth FROM turn WHERE contexts.id = $1
RETURNING turn.id, turn.depth, turn.parent";

/// The `n` turns from `start` down its parent chain, oldest first.
const CHAIN_FROM: &str = "
WITH RECURSIVE chain(id, parent, depth, payload, n) AS (
    SELECT id, parent, depth, payload, 1 FROM turns WHERE id = $1
    UNION ALL
    SELECT t.id, t.parent, t.depth, t.payload, chain.n + 1
    FROM turns t JOIN chain ON t.id = chain.parent WHERE chain.n < $2)
SELECT id, depth, payload FROM chain ORDER BY depth";

const RANGE: &str = "
WITH RECURSIVE chain(id, parent, depth, payload) AS (
    SELECT t.id, t.parent, t.depth, t.payload FROM turns t JOIN contexts c ON t.id = c.head WHERE c.id = $1
    UNION ALL
    SELECT t.id, t.parent, t.depth, t.payload
    FROM turns t JOIN chain ON t.id = chain.parent WHERE chain.depth > $2)
SELECT id, depth, payload FROM chain WHERE depth >= $2 AND depth < $2 + $3 ORDER BY depth";

pub async fn connect(url: &str) -> anyhow::Result<Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, "postgres connection ended");
        }
    });
    Ok(client)
}

/// Creates the tables (idempotent).
pub async fn prepare(url: &str) -> anyhow::Result<()> {
    connect(url).await?.batch_execute(SCHEMA).await?;
    Ok(())
}

pub async fn create_context(client: &Client) -> anyhow::Result<u64> {
    let row = client
        .query_one("INSERT INTO contexts DEFAULT VALUES RETURNING id", &[])
        .await?;
    Ok(row.get::<_, i64>(0) as u64)
}

pub async fn append(client: &Client, context: u64, payload: Bytes) -> anyhow::Result<Ack> {
    let hash = blake3::hash(&payload);
    let row = client
        .query_one(
            APPEND,
            &[&(context as i64), &&hash.as_bytes()[..], &&payload[..]],
        )
        .await?;
    Ok(Ack {
        turn_id: row.get::<_, i64>(0) as u64,
        parent_turn_id: row.get::<_, i64>(2) as u64,
        depth: row.get::<_, i32>(1) as u32,
        payload_hash: hash.to_hex().to_string(),
    })
}

pub async fn get_last(client: &Client, context: u64, limit: u32) -> anyhow::Result<usize> {
    let head = client
        .query_one(
            "SELECT head FROM contexts WHERE id = $1",
            &[&(context as i64)],
        )
        .await?;
    let rows = client
        .query(CHAIN_FROM, &[&head.get::<_, i64>(0), &(limit as i32)])
        .await?;
    Ok(rows.len())
}

pub async fn page(client: &Client, before: u64, limit: u32) -> anyhow::Result<usize> {
    let cursor = client
        .query_one(
            "SELECT parent FROM turns WHERE id = $1",
            &[&(before as i64)],
        )
        .await?;
    let rows = client
        .query(CHAIN_FROM, &[&cursor.get::<_, i64>(0), &(limit as i32)])
        .await?;
    Ok(rows.len())
}

pub async fn range(
    client: &Client,
    context: u64,
    from_depth: u32,
    limit: u32,
) -> anyhow::Result<usize> {
    let rows = client
        .query(
            RANGE,
            &[&(context as i64), &(from_depth as i32), &(limit as i32)],
        )
        .await?;
    Ok(rows.len())
}

pub async fn fork(client: &Client, turn: u64) -> anyhow::Result<u64> {
    let row = client
        .query_one(
            "INSERT INTO contexts (head, head_depth) SELECT id, depth FROM turns WHERE id = $1 RETURNING id",
            &[&(turn as i64)],
        )
        .await?;
    Ok(row.get::<_, i64>(0) as u64)
}

pub async fn get_blob(client: &Client, blob: &BlobRef) -> anyhow::Result<usize> {
    let row = client
        .query_one(
            "SELECT payload FROM turns WHERE id = $1",
            &[&(blob.turn_id as i64)],
        )
        .await?;
    Ok(row.get::<_, &[u8]>(0).len())
}

pub async fn server_report(client: &Client) -> anyhow::Result<ServerReport> {
    let row = client
        .query_one(
            "SELECT count(*), coalesce(sum(length(payload)), 0)::BIGINT, pg_total_relation_size('turns') \
             + pg_total_relation_size('contexts'), pg_database_size(current_database()) FROM turns",
            &[],
        )
        .await?;
    Ok(ServerReport {
        turns: Some(row.get::<_, i64>(0) as u64),
        blobs: None,
        logical_bytes: Some(row.get::<_, i64>(1) as u64),
        stored_bytes: Some(row.get::<_, i64>(2) as u64),
        disk_bytes: Some(row.get::<_, i64>(3) as u64),
        dedup_hits: None,
    })
}

/// The tables this backend writes, as `pg_total_relation_size` counts them (heap, TOAST,
/// indexes, free-space maps). The WAL is not counted: it belongs to the whole server and is
/// recycled at checkpoints, so it does not grow with the data kept.
pub async fn disk_usage(client: &Client) -> anyhow::Result<DiskUsage> {
    let row = client
        .query_one(
            "SELECT pg_total_relation_size('turns') + pg_total_relation_size('contexts')",
            &[],
        )
        .await?;
    Ok(DiskUsage {
        allocated_bytes: None,
        file_bytes: Some(row.get::<_, i64>(0) as u64),
        measured: "pg_total_relation_size of turns and contexts; WAL not counted".into(),
    })
}
