//! Reading what a replica holds: its marker, epochs, generations, checkpoints and segments, and
//! the store's state at a segment (the newest checkpoint at or before it, then the segments after
//! it folded in, from their headers alone). Used at a primary's start, by restore, by the standby
//! and by retention; never on the shipping path (listings cost money and time).

use bytes::Bytes;
use object_store::ObjectStoreExt;

use crate::error::ReplicaError;
use crate::format::{
    Checkpoint, EpochRecord, GenerationRecord, Marker, ObjectRef, SegmentHeader, StoreState,
};
use crate::layout::Key;
use crate::remote::{Listed, Remote};

/// The prefix's marker; `None` for an empty prefix; an error for a prefix holding other things.
pub async fn marker(remote: &Remote) -> Result<Option<Marker>, ReplicaError> {
    if let Some(bytes) = remote.get(Key::Marker).await? {
        let what = remote.path(Key::Marker).to_string();
        return Ok(Some(Marker::decode(&bytes, &what)?));
    }
    let prefix = object_store::path::Path::from(remote.layout.prefix());
    let found = remote.list(&prefix).await?;
    if let Some(first) = found.first() {
        let name = match first {
            Ok(listed) => remote.path(listed.key).to_string(),
            Err(path) => path.clone(),
        };
        return Err(ReplicaError::NotAReplica {
            location: remote.location.clone(),
            found: name,
        });
    }
    Ok(None)
}

/// Every epoch taken on the prefix, ascending.
pub async fn epochs(remote: &Remote) -> Result<Vec<u64>, ReplicaError> {
    let mut epochs: Vec<u64> = remote
        .list(&remote.layout.dir(None, 'e'))
        .await?
        .into_iter()
        .filter_map(|item| match item {
            Ok(listed) => match listed.key {
                Key::Epoch(epoch) => Some(epoch),
                _ => None,
            },
            Err(_) => None,
        })
        .collect();
    epochs.sort_unstable();
    Ok(epochs)
}

pub async fn epoch_record(
    remote: &Remote,
    epoch: u64,
) -> Result<Option<EpochRecord>, ReplicaError> {
    let key = Key::Epoch(epoch);
    match remote.get(key).await? {
        Some(bytes) => Ok(Some(EpochRecord::decode(
            &bytes,
            remote.path(key).as_ref(),
        )?)),
        None => Ok(None),
    }
}

/// Every generation, ascending, with its record.
pub async fn generations(remote: &Remote) -> Result<Vec<GenerationRecord>, ReplicaError> {
    let mut numbers: Vec<u32> = remote
        .list(&remote.layout.dir(None, 'g'))
        .await?
        .into_iter()
        .filter_map(|item| match item {
            Ok(listed) => match listed.key {
                Key::Generation(generation) => Some(generation),
                _ => None,
            },
            Err(_) => None,
        })
        .collect();
    numbers.sort_unstable();
    let mut records = Vec::with_capacity(numbers.len());
    for generation in numbers {
        let key = Key::Generation(generation);
        let bytes = remote.get_required(key).await?;
        records.push(GenerationRecord::decode(&bytes, remote.path(key).as_ref())?);
    }
    Ok(records)
}

/// The checkpoints of a generation, ascending by segment.
pub async fn checkpoints(remote: &Remote, generation: u32) -> Result<Vec<u64>, ReplicaError> {
    let mut seqs: Vec<u64> = remote
        .list(&remote.layout.dir(Some(generation), 'c'))
        .await?
        .into_iter()
        .filter_map(|item| match item {
            Ok(listed) => match listed.key {
                Key::Checkpoint { seq, .. } => Some(seq),
                _ => None,
            },
            Err(_) => None,
        })
        .collect();
    seqs.sort_unstable();
    Ok(seqs)
}

/// The segments of a generation after `after` (exclusive), ascending by seq.
pub async fn segments_after(
    remote: &Remote,
    generation: u32,
    after: u64,
) -> Result<Vec<Listed>, ReplicaError> {
    let dir = remote.layout.dir(Some(generation), 's');
    let found = if after == 0 {
        remote.list(&dir).await?
    } else {
        remote
            .list_after(
                &dir,
                Key::Segment {
                    generation,
                    seq: after,
                },
            )
            .await?
    };
    let mut segments: Vec<Listed> = found
        .into_iter()
        .filter_map(Result::ok)
        .filter(|listed| matches!(listed.key, Key::Segment { seq, .. } if seq > after))
        .collect();
    segments.sort_unstable_by_key(|listed| listed.key);
    Ok(segments)
}

pub async fn checkpoint(
    remote: &Remote,
    generation: u32,
    seq: u64,
) -> Result<Checkpoint, ReplicaError> {
    let key = Key::Checkpoint { generation, seq };
    let bytes = remote.get_required(key).await?;
    Ok(Checkpoint::decode(&bytes, remote.path(key).as_ref())?)
}

/// A segment's header, read with two ranged GETs (its length, then the header), and where
/// its body starts.
pub async fn segment_header(
    remote: &Remote,
    generation: u32,
    seq: u64,
) -> Result<(SegmentHeader, u64), ReplicaError> {
    let key = Key::Segment { generation, seq };
    let path = remote.path(key);
    let what = path.to_string();
    let range = |start: u64, end: u64| {
        let path = path.clone();
        async move {
            match remote.store.get_range(&path, start..end).await {
                Ok(bytes) => Ok(bytes),
                Err(object_store::Error::NotFound { .. }) => Err(ReplicaError::MissingObject {
                    key: path.to_string(),
                }),
                Err(source) => Err(ReplicaError::Store {
                    operation: "GET",
                    key: path.to_string(),
                    source,
                }),
            }
        }
    };
    let preamble: Bytes = range(0, 12).await?;
    let len = SegmentHeader::header_len(&preamble, &what)?;
    let bytes: Bytes = range(0, len as u64).await?;
    let header = SegmentHeader::decode(&bytes, &what)?;
    check_segment_key(&header, generation, seq, what)?;
    Ok((header, len as u64))
}

/// A segment is the one its key names (an object copied under another key is damage).
pub fn check_segment_key(
    header: &SegmentHeader,
    generation: u32,
    seq: u64,
    what: String,
) -> Result<(), ReplicaError> {
    if header.generation != generation || header.seq != seq {
        return Err(ReplicaError::Damaged {
            key: what,
            reason: format!(
                "it says it is segment {} of generation {}",
                header.seq, header.generation
            ),
        });
    }
    Ok(())
}

/// The store's state after segment `upto` of `generation`: the newest checkpoint at or before
/// it, then each later segment's header folded in. Answers the state and the headers folded.
/// A seal on the way is an error: it is no point.
pub async fn state_at(
    remote: &Remote,
    generation: u32,
    upto: u64,
) -> Result<(StoreState, Vec<SegmentHeader>), ReplicaError> {
    let checkpoints = checkpoints(remote, generation).await?;
    let Some(&from) = checkpoints.iter().rev().find(|seq| **seq <= upto) else {
        return Err(ReplicaError::MissingObject {
            key: remote
                .path(Key::Checkpoint { generation, seq: 0 })
                .to_string(),
        });
    };
    let mut state = checkpoint(remote, generation, from).await?.state;
    let mut headers = Vec::new();
    for seq in from + 1..=upto {
        let (header, body_start) = segment_header(remote, generation, seq).await?;
        let what = remote.path(Key::Segment { generation, seq }).to_string();
        if header.seal {
            // Only points are asked for, and a seal ends its generation after the last one.
            return Err(ReplicaError::Invalid(format!(
                "{what} is a seal (generation {generation} ended there when a standby was \
                 promoted), not a restore point; restore from the generation that forked"
            )));
        }
        state.apply(
            &header,
            ObjectRef::Segment { generation, seq },
            body_start,
            &what,
        )?;
        headers.push(header);
    }
    Ok((state, headers))
}
