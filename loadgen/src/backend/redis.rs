//! Redis as agent builders use it: a hash per turn (parent, context, depth, payload hash,
//! payload) and a hash per context (head, depth). An append is one Lua script (atomic: read
//! the head, allocate the id, store the turn, move the head); with `appendonly yes` and
//! `appendfsync always` it is on disk before the reply. Reads walk parents in a script.

use bytes::Bytes;
use redis::Script;
use redis::aio::MultiplexedConnection;

use crate::backend::{Ack, BlobRef};
use crate::report::ServerReport;

const APPEND: &str = r"
local context = ARGV[1]
local key = 'ctx:' .. context
local head = redis.call('HGET', key, 'head')
if not head then return redis.error_reply('context ' .. context .. ' not found') end
local depth = 0
if tonumber(head) ~= 0 then depth = tonumber(redis.call('HGET', key, 'depth')) + 1 end
local id = redis.call('INCR', 'turn:next')
redis.call('HSET', 'turn:' .. id, 'parent', head, 'context', context, 'depth', depth, 'hash', ARGV[2], 'payload', ARGV[3])
redis.call('HSET', key, 'head', id, 'depth', depth)
return {id, depth, tonumber(head)}
";

/// The `n` turns from `start` down its parent chain: returns {count, total payload bytes}.
const CHAIN_FROM: &str = r"
local id = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local payloads = {}
while id ~= 0 and #payloads < n do
  local turn = redis.call('HMGET', 'turn:' .. id, 'parent', 'payload')
  if not turn[1] then break end
  table.insert(payloads, turn[2])
  id = tonumber(turn[1])
end
return payloads
";

const RANGE: &str = r"
local id = tonumber(redis.call('HGET', 'ctx:' .. ARGV[1], 'head') or 0)
local from = tonumber(ARGV[2])
local last = from + tonumber(ARGV[3]) - 1
local payloads = {}
while id ~= 0 do
  local turn = redis.call('HMGET', 'turn:' .. id, 'parent', 'depth', 'payload')
  if not turn[1] then break end
  local depth = tonumber(turn[2])
  if depth < from then break end
  if depth <= last then table.insert(payloads, turn[3]) end
  id = tonumber(turn[1])
end
return payloads
";

const FORK: &str = r"
local depth = redis.call('HGET', 'turn:' .. ARGV[1], 'depth')
if not depth then return redis.error_reply('turn ' .. ARGV[1] .. ' not found') end
local id = redis.call('INCR', 'ctx:next')
redis.call('HSET', 'ctx:' .. id, 'head', ARGV[1], 'depth', depth)
return id
";

/// A multiplexed connection and the scripts (their SHA1 computed once).
#[derive(Clone)]
pub struct RedisConnection {
    pub(crate) connection: MultiplexedConnection,
    append: Script,
    chain: Script,
    range: Script,
    fork: Script,
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisConnection")
    }
}

pub async fn connect(url: &str) -> anyhow::Result<RedisConnection> {
    let client = redis::Client::open(url)?;
    Ok(RedisConnection {
        connection: client.get_multiplexed_async_connection().await?,
        append: Script::new(APPEND),
        chain: Script::new(CHAIN_FROM),
        range: Script::new(RANGE),
        fork: Script::new(FORK),
    })
}

pub async fn create_context(redis: &RedisConnection) -> anyhow::Result<u64> {
    let mut connection = redis.connection.clone();
    let id: u64 = redis::cmd("INCR")
        .arg("ctx:next")
        .query_async(&mut connection)
        .await?;
    let () = redis::cmd("HSET")
        .arg(format!("ctx:{id}"))
        .arg("head")
        .arg(0)
        .arg("depth")
        .arg(0)
        .query_async(&mut connection)
        .await?;
    Ok(id)
}

pub async fn append(redis: &RedisConnection, context: u64, payload: Bytes) -> anyhow::Result<Ack> {
    let mut connection = redis.connection.clone();
    let hash = blake3::hash(&payload).to_hex().to_string();
    let (turn_id, depth, parent_turn_id): (u64, u32, u64) = redis
        .append
        .arg(context)
        .arg(&hash)
        .arg(&payload[..])
        .invoke_async(&mut connection)
        .await?;
    Ok(Ack {
        turn_id,
        parent_turn_id,
        depth,
        payload_hash: hash,
    })
}

async fn chain_from(redis: &RedisConnection, start: u64, limit: u32) -> anyhow::Result<usize> {
    let mut connection = redis.connection.clone();
    let payloads: Vec<Vec<u8>> = redis
        .chain
        .arg(start)
        .arg(limit)
        .invoke_async(&mut connection)
        .await?;
    Ok(payloads.len())
}

pub async fn get_last(redis: &RedisConnection, context: u64, limit: u32) -> anyhow::Result<usize> {
    let mut connection = redis.connection.clone();
    let head: u64 = redis::cmd("HGET")
        .arg(format!("ctx:{context}"))
        .arg("head")
        .query_async(&mut connection)
        .await?;
    chain_from(redis, head, limit).await
}

pub async fn page(redis: &RedisConnection, before: u64, limit: u32) -> anyhow::Result<usize> {
    let mut connection = redis.connection.clone();
    let parent: u64 = redis::cmd("HGET")
        .arg(format!("turn:{before}"))
        .arg("parent")
        .query_async(&mut connection)
        .await?;
    chain_from(redis, parent, limit).await
}

pub async fn range(
    redis: &RedisConnection,
    context: u64,
    from_depth: u32,
    limit: u32,
) -> anyhow::Result<usize> {
    let mut connection = redis.connection.clone();
    let payloads: Vec<Vec<u8>> = redis
        .range
        .arg(context)
        .arg(from_depth)
        .arg(limit)
        .invoke_async(&mut connection)
        .await?;
    Ok(payloads.len())
}

pub async fn fork(redis: &RedisConnection, turn: u64) -> anyhow::Result<u64> {
    let mut connection = redis.connection.clone();
    Ok(redis.fork.arg(turn).invoke_async(&mut connection).await?)
}

pub async fn get_blob(redis: &RedisConnection, blob: &BlobRef) -> anyhow::Result<usize> {
    let mut connection = redis.connection.clone();
    let payload: Vec<u8> = redis::cmd("HGET")
        .arg(format!("turn:{}", blob.turn_id))
        .arg("payload")
        .query_async(&mut connection)
        .await?;
    Ok(payload.len())
}

pub async fn server_report(redis: &RedisConnection) -> anyhow::Result<ServerReport> {
    let mut connection = redis.connection.clone();
    let turns: Option<u64> = redis::cmd("GET")
        .arg("turn:next")
        .query_async(&mut connection)
        .await?;
    let info: String = redis::cmd("INFO")
        .arg("persistence")
        .query_async(&mut connection)
        .await?;
    let aof_bytes = info
        .lines()
        .find_map(|line| line.strip_prefix("aof_current_size:"))
        .and_then(|value| value.trim().parse::<u64>().ok());
    let memory: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut connection)
        .await?;
    let used_memory = memory
        .lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|value| value.trim().parse::<u64>().ok());
    Ok(ServerReport {
        turns: Some(turns.unwrap_or(0)),
        blobs: None,
        logical_bytes: None,
        stored_bytes: used_memory,
        disk_bytes: aof_bytes,
        dedup_hits: None,
    })
}
