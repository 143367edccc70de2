//! Remote retention (`--replica-retention`): deletes the objects that no restore point inside
//! the window (and not the latest state) can read.
//!
//! For each generation, the kept restore points are its segments uploaded within the window
//! (and, for the newest generation, always its latest segment). They are read from the newest
//! checkpoint at or before the oldest kept point (the anchor): so the anchor, every object its
//! state refers to (in this generation or in the ones it forked from), and every segment,
//! checkpoint, pack and base object after it are needed. Everything else is deleted — but
//! never an object uploaded inside the window, never a generation's seal (decision 0031 §2),
//! and nothing at all while a restore announced itself (`restore/…`, younger than
//! `RESTORE_LEASE`): a restore reading an old point keeps what it reads.

use std::collections::HashSet;
use std::time::Duration;

use crate::catalog;
use crate::error::ReplicaError;
use crate::layout::Key;
use crate::remote::{Listed, Remote};

/// A restore that started longer ago than this is taken for dead.
pub const RESTORE_LEASE: Duration = Duration::from_secs(24 * 3600);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetentionReport {
    pub deleted: u64,
    pub bytes: u64,
    /// Skipped because a restore is in progress.
    pub held_by_restore: bool,
}

pub async fn run(
    remote: &Remote,
    window: Duration,
    now_unix_ms: u64,
) -> Result<RetentionReport, ReplicaError> {
    let lease_ms = RESTORE_LEASE.as_millis() as u64;
    let restores = remote.list(&remote.layout.dir(None, 'r')).await?;
    if restores
        .iter()
        .flatten()
        .any(|listed| listed.modified_unix_ms + lease_ms > now_unix_ms)
    {
        return Ok(RetentionReport {
            held_by_restore: true,
            ..RetentionReport::default()
        });
    }
    let window_start = now_unix_ms.saturating_sub(window.as_millis() as u64);
    let generations = catalog::generations(remote).await?;
    let newest = generations.last().map(|record| record.generation);
    let mut needed: HashSet<Key> = HashSet::new();
    let mut candidates: Vec<Listed> = Vec::new();
    for record in &generations {
        let generation = record.generation;
        let objects = generation_objects(remote, generation).await?;
        if let Some(oldest_kept) = oldest_kept(&objects, window_start, Some(generation) == newest) {
            let checkpoints = catalog::checkpoints(remote, generation).await?;
            if let Some(&anchor) = checkpoints.iter().rev().find(|seq| **seq <= oldest_kept) {
                let state = catalog::checkpoint(remote, generation, anchor).await?.state;
                needed.extend(state.objects());
                needed.insert(Key::Checkpoint {
                    generation,
                    seq: anchor,
                });
                for listed in &objects {
                    let seq = match listed.key {
                        Key::Segment { seq, .. }
                        | Key::Checkpoint { seq, .. }
                        | Key::Pack { seq, .. }
                        | Key::Base { seq, .. } => seq,
                        _ => continue,
                    };
                    if seq > anchor {
                        needed.insert(listed.key);
                    }
                }
            }
        }
        if let Some(seal) = seal_of(remote, generation, &objects).await? {
            needed.insert(seal);
        }
        candidates.extend(objects);
    }
    let mut report = RetentionReport::default();
    for listed in candidates {
        if needed.contains(&listed.key) || listed.modified_unix_ms >= window_start {
            continue;
        }
        remote.delete(listed.key).await?;
        report.deleted += 1;
        report.bytes += listed.size;
    }
    Ok(report)
}

/// A generation's segments, checkpoints, packs and bases, as listed.
async fn generation_objects(remote: &Remote, generation: u32) -> Result<Vec<Listed>, ReplicaError> {
    let mut objects: Vec<Listed> = Vec::new();
    for kind in ['s', 'c', 'p', 'b'] {
        objects.extend(
            remote
                .list(&remote.layout.dir(Some(generation), kind))
                .await?
                .into_iter()
                .flatten(),
        );
    }
    Ok(objects)
}

/// The seal that ends a generation (decision 0031 §2), if its last segment is one: kept
/// forever (a header's worth of bytes), since the old primary it fences may wake from a pause
/// of any length and try to create that key.
async fn seal_of(
    remote: &Remote,
    generation: u32,
    objects: &[Listed],
) -> Result<Option<Key>, ReplicaError> {
    let last = objects
        .iter()
        .filter_map(|listed| match listed.key {
            Key::Segment { seq, .. } => Some(seq),
            _ => None,
        })
        .max();
    let Some(seq) = last else {
        return Ok(None);
    };
    let (header, _) = catalog::segment_header(remote, generation, seq).await?;
    Ok(header.seal.then_some(Key::Segment { generation, seq }))
}

/// The oldest segment of a generation inside the window; in the newest generation, its latest
/// segment when none is (a store always keeps a point to restore).
fn oldest_kept(objects: &[Listed], window_start: u64, newest: bool) -> Option<u64> {
    let segments: Vec<(u64, u64)> = objects
        .iter()
        .filter_map(|listed| match listed.key {
            Key::Segment { seq, .. } => Some((seq, listed.modified_unix_ms)),
            _ => None,
        })
        .collect();
    let latest = segments.iter().map(|(seq, _)| *seq).max().unwrap_or(0);
    segments
        .iter()
        .filter(|(_, modified)| *modified >= window_start)
        .map(|(seq, _)| *seq)
        .min()
        .or(newest.then_some(latest))
}
