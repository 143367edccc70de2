//! Redis Streams as builders keep a model's answer today (issue 32): one stream per answer,
//! XADD per delta (with `appendonly yes` it is in the AOF before the reply; on disk before it
//! with `appendfsync always`, within a second with `everysec`), readers XREAD BLOCK from their
//! last entry id, and the finished answer copied into a string key when it is done (what
//! ctxstore's seal makes a turn). Keys: `stream:<id>` (fields `d` = a delta, `end` = sealed),
//! `answer:<id>` (the sealed bytes), `stream:next` (the id counter).

use std::sync::LazyLock;
use std::time::Duration;

use bytes::Bytes;
use redis::Script;

use crate::backend::redis::RedisConnection;
use crate::backend::streams::{StreamEnd, StreamRead};

/// The seal: the deltas concatenated into `answer:<id>` and the end marker appended to the
/// stream, atomically (a reader sees the end only after every delta). Returns the answer's
/// length.
const SEAL: &str = r"
local entries = redis.call('XRANGE', KEYS[1], '-', '+')
local parts = {}
for _, entry in ipairs(entries) do
  local fields = entry[2]
  if fields[1] == 'd' then parts[#parts + 1] = fields[2] end
end
local answer = table.concat(parts)
redis.call('SET', KEYS[2], answer)
redis.call('XADD', KEYS[1], '*', 'end', '1')
return #answer
";

static SEAL_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SEAL));

/// Entries one XREAD returns at most.
const READ_ENTRIES_MAX: u32 = 1024;

/// Keys the collection deletes per DEL.
const DELETE_KEYS_MAX: usize = 512;

fn stream_key(stream_id: u64) -> String {
    format!("stream:{stream_id}")
}

pub async fn open(redis: &RedisConnection) -> anyhow::Result<u64> {
    let mut connection = redis.connection.clone();
    Ok(redis::cmd("INCR")
        .arg("stream:next")
        .query_async(&mut connection)
        .await?)
}

pub async fn append(redis: &RedisConnection, stream_id: u64, delta: &[u8]) -> anyhow::Result<()> {
    let mut connection = redis.connection.clone();
    let _entry_id: String = redis::cmd("XADD")
        .arg(stream_key(stream_id))
        .arg("*")
        .arg("d")
        .arg(delta)
        .query_async(&mut connection)
        .await?;
    Ok(())
}

/// Seals the stream; returns the sealed answer's length.
pub async fn seal(redis: &RedisConnection, stream_id: u64) -> anyhow::Result<u64> {
    let mut connection = redis.connection.clone();
    Ok(SEAL_SCRIPT
        .key(stream_key(stream_id))
        .key(format!("answer:{stream_id}"))
        .invoke_async(&mut connection)
        .await?)
}

pub async fn abort(redis: &RedisConnection, stream_id: u64) -> anyhow::Result<()> {
    let mut connection = redis.connection.clone();
    let _entry_id: String = redis::cmd("XADD")
        .arg(stream_key(stream_id))
        .arg("*")
        .arg("end")
        .arg("0")
        .query_async(&mut connection)
        .await?;
    Ok(())
}

/// XREAD BLOCK after `entry_id` (`0-0`: from the start). The connection is held for the wait:
/// a reader needs a connection of its own.
pub async fn read(
    redis: &RedisConnection,
    stream_id: u64,
    entry_id: &str,
    wait: Duration,
) -> anyhow::Result<StreamRead> {
    let mut connection = redis.connection.clone();
    type Entries = Vec<(String, Vec<Vec<u8>>)>;
    let reply: Option<Vec<(String, Entries)>> = redis::cmd("XREAD")
        .arg("COUNT")
        .arg(READ_ENTRIES_MAX)
        .arg("BLOCK")
        .arg(wait.as_millis().max(1) as u64)
        .arg("STREAMS")
        .arg(stream_key(stream_id))
        .arg(entry_id)
        .query_async(&mut connection)
        .await?;
    let mut read = StreamRead {
        bytes: Bytes::new(),
        end: None,
        entry_id: None,
    };
    let mut bytes = Vec::new();
    for (_key, entries) in reply.unwrap_or_default() {
        for (id, fields) in entries {
            read.entry_id = Some(id);
            match fields.as_slice() {
                [field, value] if field == b"d" => bytes.extend_from_slice(value),
                [field, value] if field == b"end" => {
                    read.end = Some(if value == b"1" {
                        StreamEnd::Sealed
                    } else {
                        StreamEnd::Aborted
                    });
                }
                other => anyhow::bail!(
                    "stream:{stream_id}: unexpected entry with {} fields (this workload writes `d` or `end`)",
                    other.len()
                ),
            }
        }
    }
    read.bytes = Bytes::from(bytes);
    Ok(read)
}

/// What a ctxstore collection does to sealed streams, done the Redis way: every stream key
/// deleted (their answers stay in `answer:<id>`), then the AOF rewritten (BGREWRITEAOF), and
/// waited for, so that the deleted entries leave the disk.
pub async fn collect(redis: &RedisConnection) -> anyhow::Result<()> {
    let mut connection = redis.connection.clone();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("stream:*")
            .arg("COUNT")
            .arg(DELETE_KEYS_MAX)
            .query_async(&mut connection)
            .await?;
        let streams: Vec<&String> = keys.iter().filter(|key| *key != "stream:next").collect();
        if !streams.is_empty() {
            let _deleted: u64 = redis::cmd("DEL")
                .arg(&streams)
                .query_async(&mut connection)
                .await?;
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    let _started: String = redis::cmd("BGREWRITEAOF")
        .query_async(&mut connection)
        .await?;
    // The rewrite runs in a child; done when neither in progress nor scheduled.
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query_async(&mut connection)
            .await?;
        let busy = ["aof_rewrite_in_progress:1", "aof_rewrite_scheduled:1"]
            .iter()
            .any(|flag| info.lines().any(|line| line.trim() == *flag));
        if !busy {
            return Ok(());
        }
    }
    anyhow::bail!("Redis's AOF rewrite (BGREWRITEAOF) did not finish within 60 s; see its log")
}

/// The Redis server's process id (INFO server), for its CPU time.
pub async fn server_pid(redis: &RedisConnection) -> anyhow::Result<u32> {
    let mut connection = redis.connection.clone();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut connection)
        .await?;
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("Redis's INFO server has no process_id"))
}

/// The directory Redis keeps its files in (CONFIG GET dir), and its `appendfsync`.
pub async fn data_dir_and_fsync(
    redis: &RedisConnection,
) -> anyhow::Result<(std::path::PathBuf, String)> {
    let mut connection = redis.connection.clone();
    let dir: (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dir")
        .query_async(&mut connection)
        .await?;
    let fsync: (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendfsync")
        .query_async(&mut connection)
        .await?;
    Ok((std::path::PathBuf::from(dir.1), fsync.1))
}
