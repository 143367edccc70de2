//! Engine threads: one compio runtime per `ThreadPlacement`, running the actors placed on it.
//! Placement is configuration: the same actors run one per core or all on one thread. Each
//! actor runs `group_commit::run`; one that panics broke an invariant, and the process aborts
//! (fail-fast; the next open recovers).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::JoinHandle;

use crate::blob::recover::ShardCursor;
use crate::blob::shard::ShardActor;
use crate::config::{Actor, Limits, ThreadPlacement};
use crate::error::{EngineError, OpenError};
use crate::file::{ActorIo, SyncMode};
use crate::group_commit;
use crate::pipeline::{BlobNotices, BlobsDurable, SequencerInbox, SequencerRequest, ShardRequest};
use crate::published::Published;
use crate::sequencer::actor::SequencerActor;
use crate::sequencer::recover::RecoveredLog;

/// An actor's `run` future, on its thread's runtime.
type ActorTask = Pin<Box<dyn Future<Output = ()>>>;

/// What an actor needs to start on its thread.
pub(crate) enum ActorSeed {
    /// Boxed: the recovered state is large, and a seed moves through a few hands. With the
    /// inbox of the shards' `BlobsDurable` notices.
    Sequencer(
        Box<RecoveredLog>,
        flume::Receiver<SequencerRequest>,
        flume::Receiver<BlobsDurable>,
    ),
    /// A shard, its inbox, where it hands appends on to, and where it says they are durable.
    Shard(
        ShardCursor,
        flume::Receiver<ShardRequest>,
        SequencerInbox,
        BlobNotices,
    ),
}

impl ActorSeed {
    fn actor(&self) -> Actor {
        match self {
            ActorSeed::Sequencer(..) => Actor::Sequencer,
            ActorSeed::Shard(cursor, ..) => Actor::Shard(cursor.shard),
        }
    }
}

/// Starts one engine thread. Returns once its actors opened their files (or failed to).
pub(crate) fn start_thread(
    index: usize,
    placement: &ThreadPlacement,
    seeds: Vec<ActorSeed>,
    published: Arc<Published>,
    limits: Limits,
    preallocate: bool,
) -> Result<JoinHandle<()>, OpenError> {
    let (ready_sender, ready) = oneshot::channel::<Result<(), EngineError>>();
    let core = placement.core;
    let name = format!("ctxstore-engine-{index}");
    let thread_name = name.clone();
    let handle = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            run_thread(
                thread_name,
                core,
                seeds,
                published,
                limits,
                preallocate,
                ready_sender,
            )
        })
        .map_err(|error| OpenError::Thread(format!("{name}: {error}")))?;
    match ready.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(error)) => {
            let _ = handle.join();
            Err(OpenError::Thread(format!("{name}: {error}")))
        }
        Err(_) => {
            let _ = handle.join();
            Err(OpenError::Thread(format!(
                "{name} exited before its actors started"
            )))
        }
    }
}

fn run_thread(
    name: String,
    core: Option<usize>,
    seeds: Vec<ActorSeed>,
    published: Arc<Published>,
    limits: Limits,
    preallocate: bool,
    ready: oneshot::Sender<Result<(), EngineError>>,
) {
    let mut builder = compio::runtime::RuntimeBuilder::new();
    if let Some(core) = core {
        builder.thread_affinity(std::iter::once(core).collect());
    }
    let runtime = match builder.build() {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = ready.send(Err(EngineError::io("compio runtime", error)));
            return;
        }
    };
    let actors: Vec<String> = seeds.iter().map(|seed| seed.actor().to_string()).collect();
    tracing::info!(
        thread = %name, driver = ?runtime.driver_type(), ?core, actors = %actors.join(","),
        "engine thread started"
    );
    // An actor alone on its thread may block in fdatasync; actors sharing one may not.
    let sync_mode = if seeds.len() == 1 {
        SyncMode::Blocking
    } else {
        SyncMode::Ring
    };
    let io = ActorIo {
        sync_mode,
        preallocate,
    };
    runtime.block_on(async move {
        let mut running: Vec<(Actor, ActorTask)> = Vec::new();
        for seed in seeds {
            let actor = seed.actor();
            let started: Result<ActorTask, EngineError> = match seed {
                ActorSeed::Sequencer(recovered, inbox, notices) => {
                    SequencerActor::open(*recovered, published.clone(), notices, limits, io)
                        .await
                        .map(|sequencer| {
                            let run = group_commit::run(sequencer, inbox, limits.batch_wait_us_max);
                            Box::pin(run) as ActorTask
                        })
                }
                ActorSeed::Shard(cursor, inbox, sequencer, notices) => {
                    ShardActor::open(cursor, published.clone(), sequencer, notices, limits, io)
                        .await
                        .map(|shard| {
                            let run = group_commit::run(shard, inbox, limits.batch_wait_us_max);
                            Box::pin(run) as ActorTask
                        })
                }
            };
            match started {
                Ok(future) => running.push((actor, future)),
                Err(error) => {
                    let _ = ready.send(Err(error));
                    return;
                }
            }
        }
        let _ = ready.send(Ok(()));
        let handles = running
            .into_iter()
            .map(|(actor, future)| Some((actor, compio::runtime::spawn(future))))
            .collect();
        Supervise { handles }.await;
    });
    tracing::debug!(thread = %name, "engine thread stopped");
}

/// Waits for every actor of a thread. An actor that panicked broke an invariant: the process
/// stops at once (fail-fast), and recovery makes the restart safe.
struct Supervise {
    handles: Vec<Option<(Actor, compio::runtime::JoinHandle<()>)>>,
}

impl Future for Supervise {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        let mut pending = false;
        for slot in self.handles.iter_mut() {
            let Some((actor, handle)) = slot else {
                continue;
            };
            match Pin::new(handle).poll(context) {
                Poll::Pending => pending = true,
                Poll::Ready(Ok(())) => *slot = None,
                Poll::Ready(Err(error)) => {
                    tracing::error!(%actor, %error, "engine actor died; aborting the process");
                    eprintln!("ctxstore: engine actor {actor} died ({error}); aborting");
                    std::process::abort();
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }
}
