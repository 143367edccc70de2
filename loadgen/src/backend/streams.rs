//! The streaming workload's operations (issue 32) on the stores that have streams: ctxstore
//! (STREAM_OPEN, STREAM_APPEND, STREAM_SEAL, STREAM_FOLLOW or STREAM_READ with a wait) and
//! Redis Streams
//! (`redis_streams.rs`). Each write is checked against what the writer knows (the stream's
//! length, the sealed turn's length and hash): a store that answers otherwise is an error.

use std::time::Duration;

use bytes::Bytes;
use ctxstore_client::{NewStream, StreamChunk, StreamFollow, StreamState};

use crate::backend::{Connection, redis_streams};

/// How a stream ended, as its reader learns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamEnd {
    Sealed,
    Aborted,
}

/// What one read of a stream answered: the bytes after the reader's position (empty at the
/// wait's deadline), whether the stream ended, and where a Redis reader resumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRead {
    pub bytes: Bytes,
    pub end: Option<StreamEnd>,
    /// Redis: the last entry read (the next XREAD's start); ctxstore: none (offsets).
    pub entry_id: Option<String>,
}

/// Where a reader stands in a stream: its byte offset, and for Redis the last entry id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadPosition {
    pub offset: u64,
    pub entry_id: String,
}

impl Default for ReadPosition {
    fn default() -> Self {
        ReadPosition {
            offset: 0,
            entry_id: "0-0".into(),
        }
    }
}

/// How a ctxstore reader reads (`--stream-read`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StreamReadMode {
    /// STREAM_FOLLOW: one request per stream (per wait without a delta); the server pushes
    /// each acknowledged delta.
    #[default]
    Push,
    /// STREAM_READ long polls: one request per delivery.
    Poll,
}

impl StreamReadMode {
    pub fn name(self) -> &'static str {
        match self {
            StreamReadMode::Push => "push",
            StreamReadMode::Poll => "poll",
        }
    }
}

/// One reader's reading of one stream: in push mode, the follow whose frames it takes (kept
/// between reads, sent again from the reader's offset after a frame that ends it open).
#[derive(Debug)]
pub struct StreamReading {
    mode: StreamReadMode,
    follow: Option<StreamFollow>,
}

impl StreamReading {
    pub fn new(mode: StreamReadMode) -> StreamReading {
        StreamReading { mode, follow: None }
    }
}

/// Bytes one STREAM_READ (or one STREAM_FOLLOW frame) asks for (a stream of 500 deltas of ≤ 40 bytes is 20 KB; the answer
/// budget reserves this much per waiting reader).
const READ_BYTES_MAX: u32 = 64 * 1024;

/// ctxstore's turn type for the sealed answers (an assistant message, as the other workloads).
const SEALED_TYPE_TAG: u64 = 1;

fn unsupported(connection: &Connection) -> anyhow::Error {
    let name = match connection {
        Connection::Postgres(_) => "postgres",
        Connection::Sqlite(_) => "sqlite",
        _ => "this store",
    };
    anyhow::anyhow!(
        "--workload streaming runs against ctxstore or redis (Redis Streams), not {name}"
    )
}

impl Connection {
    /// Opens a stream on `context`; its id.
    pub async fn stream_open(&self, context: u64) -> anyhow::Result<u64> {
        match self {
            Connection::Ctxstore(client) => Ok(client
                .open_stream(context, NewStream::new(SEALED_TYPE_TAG, 0))
                .await?
                .stream_id),
            Connection::Redis(redis) => redis_streams::open(redis).await,
            other => Err(unsupported(other)),
        }
    }

    /// Appends `delta` at the stream's `length` (what this writer has had acknowledged so
    /// far); answered once the store acknowledges it.
    pub async fn stream_append(
        &self,
        stream_id: u64,
        length: u64,
        delta: Bytes,
    ) -> anyhow::Result<()> {
        match self {
            Connection::Ctxstore(client) => {
                let delta_bytes = delta.len() as u64;
                let acknowledged = client.append_delta(stream_id, None, delta).await?;
                // One writer per stream: the server's length is ours plus this delta.
                anyhow::ensure!(
                    acknowledged == length + delta_bytes,
                    "stream {stream_id}: the delta at {length} (+{delta_bytes} B) was \
                     acknowledged at length {acknowledged}; the server lost or added bytes"
                );
                Ok(())
            }
            Connection::Redis(redis) => redis_streams::append(redis, stream_id, &delta).await,
            other => Err(unsupported(other)),
        }
    }

    /// Seals the stream; `length` and `hash` are what the writer sent, checked against the
    /// sealed turn (ctxstore) or answer (Redis, its length).
    pub async fn stream_seal(
        &self,
        stream_id: u64,
        length: u64,
        hash: blake3::Hash,
    ) -> anyhow::Result<()> {
        match self {
            Connection::Ctxstore(client) => {
                let sealed = client.seal_stream(stream_id).await?;
                let turn = sealed.turn;
                anyhow::ensure!(
                    u64::from(turn.payload_len) == length
                        && turn.payload_hash.0 == *hash.as_bytes(),
                    "stream {stream_id}: sealed into turn {} of {} B, hash {}; the writer sent \
                     {length} B, hash {}",
                    turn.turn_id,
                    turn.payload_len,
                    turn.payload_hash.to_hex(),
                    hash.to_hex()
                );
                Ok(())
            }
            Connection::Redis(redis) => {
                let sealed = redis_streams::seal(redis, stream_id).await?;
                anyhow::ensure!(
                    sealed == length,
                    "stream:{stream_id}: sealed {sealed} B; the writer sent {length} B"
                );
                Ok(())
            }
            other => Err(unsupported(other)),
        }
    }

    pub async fn stream_abort(&self, stream_id: u64) -> anyhow::Result<()> {
        match self {
            Connection::Ctxstore(client) => Ok(client.abort_stream(stream_id).await?),
            Connection::Redis(redis) => redis_streams::abort(redis, stream_id).await,
            other => Err(unsupported(other)),
        }
    }

    /// The stream's bytes after `position`, waiting up to `wait` for some: the next frame of
    /// the reading's follow, or a long poll. A ctxstore stream sealed before its reader caught
    /// up answers the rest from the sealed turn's blob.
    pub async fn stream_read(
        &self,
        reading: &mut StreamReading,
        stream_id: u64,
        position: &ReadPosition,
        wait: Duration,
    ) -> anyhow::Result<StreamRead> {
        match self {
            Connection::Ctxstore(client) => {
                let chunk = match reading.mode {
                    StreamReadMode::Poll => {
                        let offset = position.offset;
                        client
                            .read_stream(stream_id, offset, READ_BYTES_MAX, Some(wait))
                            .await?
                    }
                    StreamReadMode::Push => loop {
                        let follow = match &mut reading.follow {
                            Some(follow) => follow,
                            None => reading.follow.insert(client.follow_stream(
                                stream_id,
                                position.offset,
                                READ_BYTES_MAX,
                                wait,
                            )?),
                        };
                        match follow.next().await {
                            Ok(Some(chunk)) => break chunk,
                            // The follow ended open (no delta for `wait`): again from here.
                            Ok(None) => reading.follow = None,
                            Err(error) => {
                                reading.follow = None;
                                return Err(error.into());
                            }
                        }
                    },
                };
                ctxstore_read(client, stream_id, position, chunk).await
            }
            Connection::Redis(redis) => {
                redis_streams::read(redis, stream_id, &position.entry_id, wait).await
            }
            other => Err(unsupported(other)),
        }
    }

    /// The store's collection of ended streams: ctxstore's GC (its log compaction drops the
    /// sealed streams' records), Redis's stream keys deleted and its AOF rewritten.
    pub async fn stream_collect(&self) -> anyhow::Result<()> {
        match self {
            Connection::Ctxstore(client) => client.gc().await.map(|_| ()).map_err(Into::into),
            Connection::Redis(redis) => redis_streams::collect(redis).await,
            other => Err(unsupported(other)),
        }
    }
}

/// A ctxstore chunk as a read of the workload: checked to start at the reader's offset; a
/// sealed stream's rest read from its turn's blob.
async fn ctxstore_read(
    client: &ctxstore_client::Client,
    stream_id: u64,
    position: &ReadPosition,
    chunk: StreamChunk,
) -> anyhow::Result<StreamRead> {
    anyhow::ensure!(
        chunk.offset == position.offset,
        "stream {stream_id}: asked from offset {}, answered from {}",
        position.offset,
        chunk.offset
    );
    let (bytes, end) = match chunk.state {
        StreamState::Open => (chunk.bytes, None),
        StreamState::Aborted => (Bytes::new(), Some(StreamEnd::Aborted)),
        StreamState::Sealed(turn_id) => {
            let turn = client.turn(turn_id).await?;
            let payload = client.blob(turn.payload_hash).await?;
            let from = usize::try_from(position.offset)
                .ok()
                .filter(|from| *from <= payload.len())
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "stream {stream_id}: read up to {} B, but its sealed turn \
                         {turn_id} holds {} B",
                        position.offset,
                        payload.len()
                    )
                })?;
            (payload.slice(from..), Some(StreamEnd::Sealed))
        }
    };
    Ok(StreamRead {
        bytes,
        end,
        entry_id: None,
    })
}
