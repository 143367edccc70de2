//! The one group-commit loop every actor runs: wait for work, admit what is queued (bounded by
//! count, bytes and a short wait), commit the batch with ONE fdatasync, answer, repeat; do
//! idle work (preparing space) only between batches. Actors differ only in what admitting and
//! committing mean, which is what `GroupCommit` lets them say.
//!
//! Why batch: an fdatasync costs ~0.2 ms however much it covers, so a batch of 64 appends costs
//! little more than one. Why bound it: every request of a batch waits for its last admission.

use std::time::{Duration, Instant};

use crate::pipeline::StopReply;

/// What an admitted request asks of the loop.
pub(crate) enum Admitted {
    /// Keep going.
    Continue,
    /// Finish what is queued, then stop and signal `done`.
    Stop(StopReply),
}

/// One actor's side of group commit.
pub(crate) trait GroupCommit {
    type Request;

    /// Adds one request to the batch being formed, or answers it at once when it needs no
    /// write (a failed check, a blob that is already durable).
    async fn admit(&mut self, request: Self::Request) -> Admitted;

    /// The batch holds records to write.
    fn has_records(&self) -> bool;

    /// The batch may not take another request.
    fn is_full(&self) -> bool;

    /// Whether `request` fits the batch being formed; one that does not starts the next batch
    /// (an empty batch takes any request). A shard's put of several blobs is never split.
    fn fits(&self, request: &Self::Request) -> bool;

    /// Writes the batch, ONE fdatasync, publishes it, answers every request in it.
    async fn commit(&mut self);

    /// Work for the moments between batches. Returns true if it did some and should be asked
    /// again before the actor sleeps. `queue_empty` tells whether requests are waiting.
    async fn between_batches(&mut self, queue_empty: bool) -> bool;

    /// Last words once the final batch is committed (syncing lazily-synced files).
    async fn stopped(&mut self);
}

/// Runs `actor` until it is asked to stop or every sender is gone; then commits what is
/// queued and signals the stopper.
pub(crate) async fn run<A: GroupCommit>(
    mut actor: A,
    inbox: flume::Receiver<A::Request>,
    batch_wait_us_max: u32,
) {
    let mut stop: Option<StopReply> = None;
    // A request that did not fit the last batch: the first of the next.
    let mut next: Option<A::Request> = None;
    while stop.is_none() {
        if next.is_none() && actor.between_batches(inbox.is_empty()).await {
            continue;
        }
        let first = match next.take() {
            Some(request) => request,
            None => match inbox.recv_async().await {
                Ok(request) => request,
                Err(_) => break,
            },
        };
        admit(&mut actor, first, &mut stop).await;
        next = fill(&mut actor, &inbox, batch_wait_us_max, &mut stop).await;
        actor.commit().await;
    }
    // Stopping (or every sender is gone): finish what is queued.
    for request in next
        .into_iter()
        .chain(std::iter::from_fn(|| inbox.try_recv().ok()))
    {
        if !actor.fits(&request) {
            actor.commit().await;
        }
        admit(&mut actor, request, &mut stop).await;
        if actor.is_full() {
            actor.commit().await;
        }
    }
    actor.commit().await;
    actor.stopped().await;
    if let Some(done) = stop {
        let _ = done.send(());
    }
}

async fn admit<A: GroupCommit>(actor: &mut A, request: A::Request, stop: &mut Option<StopReply>) {
    if let Admitted::Stop(done) = actor.admit(request).await {
        *stop = Some(done);
    }
}

/// Takes what is queued until the batch is full; then, if the batch has records and a wait is
/// configured, what arrives within `batch_wait_us_max`. Returns a request that does not fit
/// the batch, for the next one.
async fn fill<A: GroupCommit>(
    actor: &mut A,
    inbox: &flume::Receiver<A::Request>,
    batch_wait_us_max: u32,
    stop: &mut Option<StopReply>,
) -> Option<A::Request> {
    while stop.is_none() && !actor.is_full() {
        match inbox.try_recv() {
            Ok(request) if !actor.fits(&request) => return Some(request),
            Ok(request) => admit(actor, request, stop).await,
            Err(_) => break,
        }
    }
    if batch_wait_us_max == 0 || !actor.has_records() {
        return None;
    }
    let deadline = Instant::now() + Duration::from_micros(u64::from(batch_wait_us_max));
    while stop.is_none() && !actor.is_full() {
        match compio::time::timeout_at(deadline, inbox.recv_async()).await {
            Ok(Ok(request)) if !actor.fits(&request) => return Some(request),
            Ok(Ok(request)) => admit(actor, request, stop).await,
            _ => break,
        }
    }
    None
}
