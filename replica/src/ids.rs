//! Ids unique across generations (issue 46 item 8), the replica's side of
//! `ctxstore_engine::id_floors`: where a new generation's ids start (past the newest point of
//! every generation of the prefix, by twice the bound a primary keeps on ids it has not
//! shipped), and what the replica holds of a continuing primary's ids (the bound counts from
//! it).

use ctxstore_engine::Engine;
use ctxstore_engine::id_floors::IdFloors;

use crate::catalog;
use crate::error::ReplicaError;
use crate::format::GenerationRecord;
use crate::remote::Remote;

/// The ids a point of the replica holds: records `1..=records`, contexts `1..=contexts`
/// (`None`: not recorded, a segment written before issue 46).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointIds {
    pub records: u64,
    pub contexts: Option<u64>,
}

/// What segment `seq` of `generation` (its checkpoint when `seq` is 0) holds: `log_records`
/// (the state the caller folded), the contexts its header says; at a generation's start, the
/// floors its record names.
pub async fn shipped_ids(
    remote: &Remote,
    generations: &[GenerationRecord],
    generation: u32,
    seq: u64,
    log_records: u64,
) -> Result<PointIds, ReplicaError> {
    let floors = generations
        .iter()
        .find(|record| record.generation == generation)
        .map(|record| record.floors)
        .filter(|floors| *floors != IdFloors::default());
    let start = PointIds {
        records: floors.map_or(log_records, |floors| {
            log_records.max(floors.records.saturating_sub(1))
        }),
        contexts: floors.map(|floors| floors.contexts.saturating_sub(1)),
    };
    if seq == 0 {
        return Ok(start);
    }
    let (header, _) = catalog::segment_header(remote, generation, seq).await?;
    Ok(PointIds {
        records: log_records.max(header.log_records),
        contexts: (header.contexts > 0).then_some(header.contexts),
    })
}

/// The newest point of one generation, as ids: the last segment listed after its newest
/// checkpoint, then the ones a lagging listing left out (read directly until one is missing),
/// and its record's floors. A point that does not say its contexts (written before issue 46,
/// when no generation skipped any) holds at most as many contexts as records.
async fn newest_ids(remote: &Remote, record: &GenerationRecord) -> Result<PointIds, ReplicaError> {
    let generation = record.generation;
    let checkpoint = catalog::checkpoints(remote, generation)
        .await?
        .last()
        .copied();
    let mut newest = PointIds {
        records: 0,
        contexts: None,
    };
    let mut seq = checkpoint.unwrap_or(0);
    if let Some(at) = checkpoint {
        let state = catalog::checkpoint(remote, generation, at).await?.state;
        newest.records = state.log_records;
    }
    if let Some(last) = catalog::segments_after(remote, generation, seq)
        .await?
        .last()
        .map(|listed| listed.key)
        && let crate::layout::Key::Segment { seq: last, .. } = last
    {
        seq = last;
    }
    let mut probe = seq.max(1);
    loop {
        match catalog::segment_header(remote, generation, probe).await {
            Ok((header, _)) => {
                newest.records = newest.records.max(header.log_records);
                if header.contexts > 0 {
                    newest.contexts = Some(newest.contexts.unwrap_or(0).max(header.contexts));
                }
            }
            Err(ReplicaError::MissingObject { .. }) if probe > seq => break,
            // Segment `seq` itself gone (retention, or a generation with none): the
            // checkpoint said it.
            Err(ReplicaError::MissingObject { .. }) => {}
            Err(error) => return Err(error),
        }
        probe += 1;
    }
    if record.floors != IdFloors::default() {
        newest.records = newest.records.max(record.floors.records - 1);
        newest.contexts = Some(newest.contexts.unwrap_or(0).max(record.floors.contexts - 1));
    }
    Ok(newest)
}

/// Where a new generation's ids start: past the newest point of every generation of the
/// replica by twice the bound a primary keeps (`IdFloors::past`).
pub async fn new_generation_floors(remote: &Remote) -> Result<IdFloors, ReplicaError> {
    let mut floors = IdFloors::default();
    for record in catalog::generations(remote).await? {
        let newest = newest_ids(remote, &record).await?;
        let contexts = newest.contexts.unwrap_or(newest.records);
        let past = IdFloors::past(newest.records, contexts);
        tracing::debug!(
            generation = record.generation,
            records = newest.records,
            contexts,
            "a generation's newest point, as ids"
        );
        floors = floors.max(past);
    }
    Ok(floors)
}

/// A store about to start a new generation (restored to become a primary, or a standby being
/// promoted) raises its ids past everything the replica's primaries may have handed out.
/// Answers the floors raised to.
pub async fn start_past_replica(
    remote: &Remote,
    engine: &Engine,
) -> Result<IdFloors, ReplicaError> {
    let floors = new_generation_floors(remote).await?.max(engine.id_floors());
    engine.raise_id_floors(floors).await?;
    Ok(engine.id_floors())
}
