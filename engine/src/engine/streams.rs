//! Streams, the caller's side (issue 32, decision 0027): a turn in the making. Open one on a
//! context with everything an append takes but the payload; append deltas (each answered
//! once its records are durable, batched across streams by the sequencer's group commit);
//! read it from any offset while it is open, or wait for more; seal it into one ordinary
//! turn (its bytes stored as one blob — deduplicated, chunked when large — then the turn and
//! the stream's end record in one batch, the head moved under an append's rules), or abort.
//! Every call is in the handle's scope (decision 0032 §2): another tenant's stream, open or
//! ended, answers STREAM_NOT_FOUND as an unknown one does.

use bytes::Bytes;

use crate::engine::Engine;
use crate::error::EngineError;
use crate::format::stream_meta::{OpenParent, StreamOpen};
use crate::format::turn_extras::TurnExtras;
use crate::ids::{BlobHash, ContextId};
use crate::model::{AppendRequest, Appended, Parent, Scope};
use crate::pipeline::{SequencerInbox, SequencerRequest, StreamAnswer, StreamChange, TurnBlob};
use crate::published::Published;

pub use crate::format::stream_meta::StreamEnd;
pub use crate::sequencer::streams::{
    ENDED_STREAMS_KEPT_MAX, NO_OWNER, StreamId, StreamInfo, StreamOwner,
};

/// Bytes one `append_delta` call takes at most: its records join one group commit, and a
/// caller with more sends more calls (the wire's frames are smaller still).
pub const STREAM_DELTA_CALL_BYTES_MAX: usize = 1024 * 1024;
/// Times a seal reads the stream again because deltas arrived while it stored the bytes.
const SEAL_RETRIES_MAX: u32 = 8;

/// A stream as a reader finds it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum StreamRead {
    /// Open: `bytes` from the offset asked (empty at or past its length).
    Open { info: StreamInfo, bytes: Bytes },
    /// Ended: sealed into a turn, or aborted.
    Ended(StreamEnd),
}

impl Engine {
    /// Opens a stream on `request.context_id`: the seal will append its bytes with this
    /// request's type, codec, expected head, parent, key, labels, links and summary flag.
    /// Without a key the sealed turn gets `stream:<StreamID>` (a seal retried after a crash
    /// finds its turn). Answered once the open record is durable.
    /// `owner` (a server's connection; `StreamOwner::NONE` in-process) alone may then write
    /// it, while it holds it (`release_streams`), at most `owner.streams_max` at once.
    pub async fn open_stream(
        &self,
        request: AppendRequest<()>,
        owner: StreamOwner,
    ) -> Result<StreamInfo, EngineError> {
        self.check_open()?;
        self.inner.published.status.check_writable()?;
        let AppendRequest {
            context_id,
            expected_head,
            type_tag,
            codec,
            payload: (),
            options,
        } = request;
        // In scope: another tenant's context, or a link to its turn, answers as absent.
        if !self.inner.published.sees(self.scope, context_id) {
            return Err(EngineError::ContextNotFound(context_id));
        }
        for link in &options.links {
            self.reader().scoped_turn(*link)?;
        }
        if options.vectors.is_some() {
            return Err(EngineError::InvalidArgument(
                "a stream's turn carries no vectors: append them with a turn of their own".into(),
            ));
        }
        // The extras' limits now, with typed errors, not at the seal.
        let extras = TurnExtras {
            key: options.key.map(|key| key.to_vec()).unwrap_or_default(),
            labels: options.labels,
            links: options.links,
            vectors: None,
        }
        .normalize()
        .map_err(|over| EngineError::Limit {
            what: over.what,
            limit: over.limit,
        })?;
        let open = StreamOpen {
            expected_head,
            type_tag,
            codec,
            parent: match options.parent {
                Parent::Head => OpenParent::Head,
                Parent::Root => OpenParent::Root,
                Parent::Turn(turn_id) => OpenParent::Turn(turn_id),
            },
            summary: options.summary,
            extras,
        };
        match self
            .send_stream(StreamChange::Open {
                context_id,
                open,
                owner,
            })
            .await?
        {
            StreamAnswer::Opened(info) => Ok(info),
            other => Err(unexpected(other)),
        }
    }

    /// Appends `bytes` at the stream's end; with `offset`, only if the stream holds exactly
    /// that many bytes (a retry of a delta that was written answers its length again, any
    /// other mismatch is `StreamOffset`). Returns the stream's new length, once durable.
    /// TOO_LARGE (nothing written) past `blob_bytes_max` or `STREAM_DELTA_CALL_BYTES_MAX`;
    /// `StreamNotOwned` when another owner holds the stream (`NO_OWNER`: any caller).
    pub async fn append_delta(
        &self,
        stream_id: StreamId,
        offset: Option<u64>,
        bytes: Bytes,
        owner: u64,
    ) -> Result<u64, EngineError> {
        self.check_open()?;
        self.check_stream_scope(stream_id)?;
        if bytes.len() > STREAM_DELTA_CALL_BYTES_MAX {
            return Err(EngineError::TooLarge {
                len: bytes.len() as u64,
                max: STREAM_DELTA_CALL_BYTES_MAX as u64,
            });
        }
        let change = StreamChange::Delta {
            stream_id,
            offset,
            bytes,
            owner,
        };
        match self.send_stream(change).await? {
            StreamAnswer::Length(length) => Ok(length),
            other => Err(unexpected(other)),
        }
    }

    /// Seals the stream: its bytes become one turn (CONFLICT on a stale expected head, and
    /// the stream stays open). Answers the turn as an append does.
    pub async fn seal_stream(
        &self,
        stream_id: StreamId,
        owner: u64,
    ) -> Result<Appended, EngineError> {
        self.check_open()?;
        for _ in 0..SEAL_RETRIES_MAX {
            let bytes = match self.read_stream(stream_id, 0, usize::MAX)? {
                StreamRead::Open { bytes, .. } => bytes,
                StreamRead::Ended(end) => return Err(EngineError::StreamEnded { stream_id, end }),
            };
            let length_bytes = bytes.len() as u64;
            let hash = BlobHash::of(&bytes);
            let deduped = self.store_blob(hash, bytes).await?;
            let blob = TurnBlob {
                hash: self.address(hash),
                raw_len: length_bytes as u32,
                deduped,
                by_hash: false,
                pending: None,
            };
            let change = StreamChange::Seal {
                stream_id,
                length_bytes,
                blob,
                owner,
            };
            match self.send_stream(change).await? {
                StreamAnswer::Sealed(appended) => {
                    let turn = self.shown(appended.turn);
                    return Ok(Appended { turn, ..appended });
                }
                StreamAnswer::Moved => continue,
                other => return Err(unexpected(other)),
            }
        }
        Err(EngineError::InvalidArgument(format!(
            "stream {stream_id} kept growing while it was sealed ({SEAL_RETRIES_MAX} tries); \
             stop appending deltas before sealing"
        )))
    }

    /// Aborts the stream: it takes no more deltas and never becomes a turn.
    pub async fn abort_stream(&self, stream_id: StreamId, owner: u64) -> Result<(), EngineError> {
        self.check_open()?;
        self.check_stream_scope(stream_id)?;
        match self
            .send_stream(StreamChange::Abort { stream_id, owner })
            .await?
        {
            StreamAnswer::Aborted => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Every stream `owner` holds becomes unowned (its connection closed): the next writer
    /// with an owner takes it. Returns how many it held.
    pub async fn release_streams(&self, owner: u64) -> Result<usize, EngineError> {
        self.check_open()?;
        match self.send_stream(StreamChange::Release { owner }).await? {
            StreamAnswer::Released(count) => Ok(count),
            other => Err(unexpected(other)),
        }
    }

    /// The open streams (of one context, or of every context), by StreamID after `after`, at
    /// most `limit`.
    pub fn open_streams(
        &self,
        context_id: Option<ContextId>,
        after: StreamId,
        limit: usize,
    ) -> Vec<StreamInfo> {
        let streams = self.inner.published.streams.load();
        let contexts = self.inner.published.contexts.load();
        streams
            .list(context_id, after)
            // Another tenant's streams are left out before the limit.
            .filter(|(_, open)| contexts.visible_in(self.scope, open.context_id))
            .take(limit)
            .map(|(stream_id, open)| open.info(stream_id))
            .collect()
    }

    /// A stream of another tenant's context answers STREAM_NOT_FOUND, as an unknown one does
    /// (decision 0032 §2). A stream not known passes: its call answers that itself.
    fn check_stream_scope(&self, stream_id: StreamId) -> Result<(), EngineError> {
        if self.scope == Scope::Store {
            return Ok(());
        }
        let published = &self.inner.published;
        match published.streams.load().context_of(stream_id) {
            Some(context_id) if !published.sees(self.scope, context_id) => {
                Err(EngineError::StreamNotFound(stream_id))
            }
            _ => Ok(()),
        }
    }

    /// Up to `bytes_max` durable bytes of the stream from `offset`, or how it ended.
    pub fn read_stream(
        &self,
        stream_id: StreamId,
        offset: u64,
        bytes_max: usize,
    ) -> Result<StreamRead, EngineError> {
        self.check_stream_scope(stream_id)?;
        let published = &self.inner.published;
        let streams = published.streams.load();
        if let Some(open) = streams.open_stream(stream_id) {
            return Ok(StreamRead::Open {
                info: open.info(stream_id),
                bytes: open.read(offset, bytes_max),
            });
        }
        let compacted_through = published.turns.base().map_or(0, |base| base.through());
        match streams.ended(stream_id, compacted_through) {
            Some(end) => Ok(StreamRead::Ended(end)),
            None => Err(EngineError::StreamNotFound(stream_id)),
        }
    }

    /// Like `read_stream`, but waits while the stream is open and holds no byte past
    /// `offset`: answers as soon as a delta past it is durable, or the stream ended. The
    /// caller bounds the wait (its own deadline drops the future).
    pub async fn wait_stream(
        &self,
        stream_id: StreamId,
        offset: u64,
        bytes_max: usize,
    ) -> Result<StreamRead, EngineError> {
        loop {
            // Listen first, then look: a publish in between wakes the listener.
            let listener = self.inner.published.streams.listen(stream_id);
            match self.read_stream(stream_id, offset, bytes_max)? {
                StreamRead::Open { bytes, .. } if bytes.is_empty() && bytes_max > 0 => {}
                read => return Ok(read),
            }
            self.check_open()?;
            listener.await;
        }
    }

    async fn send_stream(&self, change: StreamChange) -> Result<StreamAnswer, EngineError> {
        let (reply, answer) = oneshot::channel();
        let request = SequencerRequest::Stream { change, reply };
        (self.inner.sequencer.0.send_async(request).await).map_err(|_| EngineError::ShutDown)?;
        answer.await.map_err(|_| EngineError::ShutDown)?
    }
}

/// The reaper's step for streams (decision 0027): aborts every open stream without a delta
/// for `idle_timeout_ms` (0: none), one request each (a delta in between makes the abort
/// land on a stream that is busy again only if it raced the reaper's look, a window of one
/// tick; the writer then learns STREAM_ENDED).
pub(crate) fn abort_idle_streams(
    published: &Published,
    sequencer: &SequencerInbox,
    idle_timeout_ms: u64,
    now_unix_ms: u64,
) {
    if idle_timeout_ms == 0 {
        return;
    }
    let idle = published
        .streams
        .load()
        .idle(now_unix_ms.saturating_sub(idle_timeout_ms));
    for stream_id in idle {
        let (reply, answer) = oneshot::channel();
        let change = StreamChange::Abort {
            stream_id,
            owner: NO_OWNER,
        };
        if sequencer
            .0
            .send(SequencerRequest::Stream { change, reply })
            .is_err()
        {
            return;
        }
        match answer.recv() {
            Ok(Ok(_)) => tracing::info!(stream_id, idle_timeout_ms, "aborted an idle stream"),
            Ok(Err(error)) => tracing::debug!(stream_id, %error, "the reaper left a stream"),
            Err(_) => return,
        }
    }
}

/// The sequencer answers each change with that change's answer (`actor/streams.rs`): any
/// other is a broken invariant, and the process stops (fail-fast).
fn unexpected(answer: StreamAnswer) -> EngineError {
    panic!("the sequencer answered a stream change with {answer:?}")
}
