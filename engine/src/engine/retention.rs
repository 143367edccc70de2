//! Retention, the caller's side (issue 15): deleting a context, pruning it to its newest turns
//! (a floor depth), its time to live, and the reaper that deletes contexts idle past their
//! TTL. Each change is one metadata record the sequencer writes (`ContextMeta::Delete`,
//! `Floor`, `Ttl`), so it is durable, ordered with appends (an append either precedes a
//! delete and goes with it, or fails NOT_FOUND) and replayed at open like every other record.
//!
//! What these change is *reachability*: a deleted context's turns, or turns below a floor,
//! are no longer read through that context. Their bytes leave the disk when the garbage
//! collector finds nothing else reaching them (decision 0011).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::config::TTL_MS_MAX;
use crate::engine::Engine;
use crate::engine::streams::abort_idle_streams;
use crate::error::EngineError;
use crate::format::context_meta::{ContextMeta, KV_TOUCH_KEYS_MAX, KvExpiry};
use crate::ids::ContextId;
use crate::model::{ContextRef, ContextView};
use crate::pipeline::{Retention, SequencerInbox, SequencerRequest};
use crate::published::Published;

/// Contexts the reaper looks at per tick: bounds the CPU of one tick (a snapshot look-up
/// each, ~100 ns) whatever the store's size; a million contexts take 16 ticks to go round.
pub const REAPER_SCAN_CONTEXTS_MAX: u64 = 65_536;
/// Expired key-value entries the reaper removes per tick (in records of at most
/// `KV_TOUCH_KEYS_MAX`): bounds one tick's writes; more wait for the next tick (reads pass
/// them by meanwhile).
pub const REAPER_KV_ENTRIES_MAX: usize = 16_384;

impl Engine {
    /// Deletes a context: every later request naming it answers NOT_FOUND, its name is free
    /// again, and its turns and blobs stay only while another context or a link reaches
    /// them. Returns the context as it was just before.
    pub async fn delete_context(&self, context: &ContextRef) -> Result<ContextView, EngineError> {
        let context_id = self.resolve(context)?;
        let change = Retention::Delete {
            updated_at_max: None,
        };
        self.retain(context_id, change).await
    }

    /// Keeps only the newest `keep` depths of the context's chain reachable through it: the
    /// floor becomes head depth + 1 − keep (it never moves down). Turns below it — on the
    /// chain and on every branch of the context's turn log — are no longer read through this
    /// context. `keep = 0` is refused: that is a delete.
    pub async fn prune_context(
        &self,
        context: &ContextRef,
        keep: u32,
    ) -> Result<ContextView, EngineError> {
        if keep == 0 {
            return Err(EngineError::InvalidArgument(
                "prune keeps at least 1 turn; to drop a context whole, delete it".into(),
            ));
        }
        let context_id = self.resolve(context)?;
        self.retain(context_id, Retention::Prune { keep }).await
    }

    /// Sets (`Some`) or clears (`None`) the context's own time to live: once it has not been
    /// updated for that long, the server deletes it.
    pub async fn set_context_ttl(
        &self,
        context: &ContextRef,
        ttl_ms: Option<u64>,
    ) -> Result<ContextView, EngineError> {
        let ttl_ms = ttl_ms.unwrap_or(0);
        if ttl_ms > TTL_MS_MAX {
            return Err(EngineError::InvalidArgument(format!(
                "a time to live is at most 100 years ({TTL_MS_MAX} ms); asked {ttl_ms} ms"
            )));
        }
        let context_id = self.resolve(context)?;
        self.change_meta(context_id, vec![ContextMeta::Ttl(ttl_ms)], None, false)
            .await
    }

    async fn retain(
        &self,
        context_id: ContextId,
        change: Retention,
    ) -> Result<ContextView, EngineError> {
        self.check_open()?;
        self.inner.published.status.check_writable()?;
        let (reply, answer) = oneshot::channel();
        let request = SequencerRequest::Retain {
            context_id,
            change,
            reply,
        };
        (self.inner.sequencer.0.send_async(request).await).map_err(|_| EngineError::ShutDown)?;
        answer.await.map_err(|_| EngineError::ShutDown)?
    }
}

/// The TTL reaper: a thread that, every `interval`, looks at the next
/// `REAPER_SCAN_CONTEXTS_MAX` contexts of the published snapshot and asks the sequencer to
/// delete those idle past their TTL (their own, else `default_ttl_ms`; 0 = none). The
/// sequencer deletes only if the context was not updated since the reaper looked, so a
/// context touched in between lives on.
#[derive(Debug)]
pub(crate) struct Reaper {
    stop: flume::Sender<()>,
    handle: JoinHandle<()>,
}

impl Reaper {
    pub fn start(
        published: Arc<Published>,
        sequencer: SequencerInbox,
        default_ttl_ms: u64,
        stream_idle_timeout_ms: u64,
        interval: Duration,
    ) -> std::io::Result<Reaper> {
        let (stop, stopped) = flume::bounded::<()>(1);
        let handle = std::thread::Builder::new()
            .name("ctxstore-reaper".into())
            .spawn(move || {
                let mut cursor = 0u64;
                // Disconnected (the engine stops) ends the loop; a timeout is a tick.
                while let Err(flume::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    cursor = reap_some(&published, &sequencer, default_ttl_ms, cursor, now_ms());
                    reap_kv(&published, &sequencer, now_ms());
                    abort_idle_streams(&published, &sequencer, stream_idle_timeout_ms, now_ms());
                }
            })?;
        Ok(Reaper { stop, handle })
    }

    /// Stops the thread (a tick in progress finishes its current request) and joins it.
    pub fn stop(self) {
        drop(self.stop);
        let _ = self.handle.join();
    }
}

/// One tick: the contexts after `cursor` (wrapping round), at most `REAPER_SCAN_CONTEXTS_MAX`
/// of them; returns where the next tick starts.
fn reap_some(
    published: &Published,
    sequencer: &SequencerInbox,
    default_ttl_ms: u64,
    cursor: u64,
    now_unix_ms: u64,
) -> u64 {
    let snapshot = published.contexts.load();
    let count = snapshot.count();
    if count == 0 {
        return 0;
    }
    let mut next = cursor;
    let mut deleted = 0u64;
    for _ in 0..REAPER_SCAN_CONTEXTS_MAX.min(count) {
        next = if next >= count { 1 } else { next + 1 };
        let context_id = ContextId(next);
        let Some(info) = snapshot.get(context_id) else {
            continue;
        };
        let ttl_ms = if info.ttl_ms > 0 {
            info.ttl_ms
        } else {
            default_ttl_ms
        };
        let idle_ms = now_unix_ms.saturating_sub(info.updated_at_unix_ms);
        if info.deleted || ttl_ms == 0 || idle_ms < ttl_ms {
            continue;
        }
        let (reply, answer) = oneshot::channel();
        let request = SequencerRequest::Retain {
            context_id,
            change: Retention::Delete {
                updated_at_max: Some(info.updated_at_unix_ms),
            },
            reply,
        };
        if sequencer.0.send(request).is_err() {
            break;
        }
        match answer.recv() {
            Ok(Ok(_)) => deleted += 1,
            // Touched since (CONFLICT), deleted by a caller meanwhile, a read-only store:
            // the next round looks again.
            Ok(Err(error)) => {
                tracing::debug!(context = %context_id, %error, "the reaper left a context")
            }
            Err(_) => break,
        }
    }
    if deleted > 0 {
        tracing::info!(deleted, "deleted contexts idle past their time to live");
    }
    next
}

/// Removes expired key-value entries (decision 0028), oldest expiry first: one `KvExpire`
/// record per context and 128 entries, each a compare-and-delete in the sequencer (an entry
/// refreshed since the reaper looked stays). Once removed, nothing names their blobs, and the
/// next collection takes them.
fn reap_kv(published: &Published, sequencer: &SequencerInbox, now_unix_ms: u64) {
    let expired = published
        .contexts
        .load()
        .kv_expired(now_unix_ms, REAPER_KV_ENTRIES_MAX);
    let mut by_context: std::collections::BTreeMap<ContextId, Vec<KvExpiry>> =
        std::collections::BTreeMap::new();
    for (expires_at_unix_ms, context_id, key) in expired {
        by_context.entry(context_id).or_default().push(KvExpiry {
            key: key.to_vec(),
            ttl_ms: 0,
            expires_at_unix_ms,
        });
    }
    // Entries sent for removal: the sequencer drops from a record those refreshed meanwhile.
    let mut sent = 0usize;
    for (context_id, entries) in by_context {
        for chunk in entries.chunks(KV_TOUCH_KEYS_MAX) {
            let (reply, answer) = oneshot::channel();
            let request = SequencerRequest::Meta {
                context_id,
                changes: vec![ContextMeta::KvExpire(chunk.to_vec())],
                expected_head: None,
                kv_if_absent: false,
                reply,
            };
            if sequencer.0.send(request).is_err() {
                return;
            }
            match answer.recv() {
                Ok(Ok(_)) => sent += chunk.len(),
                // A read-only store, a context deleted meanwhile: the next tick looks again.
                Ok(Err(error)) => {
                    tracing::debug!(context = %context_id, %error, "the reaper left expired entries")
                }
                Err(_) => return,
            }
        }
    }
    if sent > 0 {
        tracing::info!(sent, "removed key-value entries past their time to live");
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}
