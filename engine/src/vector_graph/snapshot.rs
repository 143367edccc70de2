//! Graph snapshots (decision 0033 §4): the graph writer saves each served graph with the
//! addresses it holds to `DIR/vectors/T{tenant}-I{index}.snap` (`format/graph_snapshot.rs`:
//! checksummed, the body sealed under the tenant's data key when the store seals), and loads
//! it at the next open instead of inserting every vectors blob again. The snapshot may be
//! older than the log (saved at shutdown, after a build, and every `SNAPSHOT_INTERVAL` with
//! enough changes; a crash loses what came after): the writer reconciles it with the
//! recovered owners, removing what they no longer hold and inserting what they gained. A
//! snapshot that fails a check (checksum, header, seal, usearch's load) is removed and the
//! graph rebuilt, logged; it is derived data, never the truth.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::format::graph_snapshot::{self, SnapshotHeader};
use crate::ids::BlobHash;
use crate::published::Published;
use crate::seal::{GraphPlace, open_graph, seal_graph};
use crate::sequencer::vector_owners::base_of;

use super::{GRAPH_THREADS, Graph, GraphKey};

/// A served graph is saved again once this long has passed since its last save ...
pub(crate) const SNAPSHOT_INTERVAL: Duration = Duration::from_secs(600);
/// ... and it has taken at least this many changes (additions and removals of addresses).
pub(crate) const SNAPSHOT_CHANGES_MIN: u64 = 10_000;

/// The addresses a graph holds, by base, with their rows.
pub(crate) type Held = HashMap<u64, (BlobHash, u8)>;

pub(crate) fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("vectors")
}

pub(crate) fn path(data_dir: &Path, key: GraphKey) -> PathBuf {
    dir(data_dir).join(format!("T{}-I{}.snap", key.0.0, key.1))
}

/// Saves `graph` (served: every address of `held` in it) durably: a temporary file, then a
/// rename. Answers the file's bytes.
pub(crate) fn save(
    published: &Published,
    data_dir: &Path,
    key: GraphKey,
    dims: u16,
    graph: &Graph,
    held: &Held,
) -> Result<u64, String> {
    let buffer = {
        let index = graph.index.read().unwrap_or_else(|p| p.into_inner());
        let mut buffer = vec![0u8; index.serialized_length()];
        index
            .save_to_buffer(&mut buffer)
            .map_err(|error| format!("usearch cannot save the graph: {error}"))?;
        buffer
    };
    let list: Vec<(BlobHash, u8)> = held.values().copied().collect();
    let graph_bytes = buffer.len() as u64;
    let plain = graph_snapshot::encode_body(&list, &buffer);
    drop(buffer);
    let place = GraphPlace {
        tenant_id: key.0,
        index_id: key.1,
    };
    let sealing_key = published
        .keys
        .sealing_key(key.0)
        .map_err(|error| error.to_string())?;
    let (sealed, key_version, body) = match sealing_key {
        Some(data_key) => {
            let body = seal_graph(&data_key, place, &plain).map_err(|error| error.to_string())?;
            (true, data_key.version, body)
        }
        None => (false, 0, plain),
    };
    let header = SnapshotHeader {
        tenant_id: key.0,
        index_id: key.1,
        dims,
        metric: graph.metric,
        sealed,
        key_version,
        held: list.len() as u64,
        graph_bytes,
        body_bytes: body.len() as u64,
    };
    let file = graph_snapshot::encode(&header, &body);
    drop(body);
    let target = path(data_dir, key);
    let temporary = target.with_extension("snap.tmp");
    let io = |what: &str, error: std::io::Error| format!("{what} {}: {error}", target.display());
    crate::file::ops::create_dir_all(&dir(data_dir))
        .map_err(|error| io("creating the directory of", error))?;
    crate::file::ops::write_durable(&temporary, &file).map_err(|error| io("writing", error))?;
    crate::file::ops::rename_durably(&temporary, &target)
        .map_err(|error| io("renaming into place", error))?;
    Ok(file.len() as u64)
}

/// Loads `key`'s snapshot into `graph` (just created, empty) when there is one that passes
/// every check: `Ok(None)` when there is none, an error naming the check that failed.
pub(crate) fn load(
    published: &Published,
    data_dir: &Path,
    key: GraphKey,
    dims: u16,
    graph: &Graph,
) -> Result<Option<Held>, String> {
    let path = path(data_dir, key);
    let bytes = match crate::file::read_whole(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("reading {}: {error}", path.display())),
    };
    let (header, body) = graph_snapshot::decode(&bytes).map_err(|error| error.to_string())?;
    if (header.tenant_id, header.index_id) != key || header.dims != dims {
        return Err(format!(
            "it is of tenant {} index {} with {} dimensions, not of this index",
            header.tenant_id, header.index_id, header.dims
        ));
    }
    if header.metric != graph.metric {
        return Err("its metric is not the index's".into());
    }
    let plain: Cow<'_, [u8]> = if header.sealed {
        let data_key = published.keys.data_key(key.0, header.key_version)?;
        let place = GraphPlace {
            tenant_id: key.0,
            index_id: key.1,
        };
        Cow::Owned(open_graph(&data_key, place, body).map_err(|error| error.to_string())?)
    } else if published.keys.seals() {
        return Err("it is plain and the store seals: not trusted".into());
    } else {
        Cow::Borrowed(body)
    };
    let (list, buffer) =
        graph_snapshot::decode_body(&header, &plain).map_err(|error| error.to_string())?;
    let mut held = Held::with_capacity(list.len());
    let mut rows_total = 0usize;
    for (address, rows) in list {
        rows_total += usize::from(rows);
        if held.insert(base_of(&address), (address, rows)).is_some() {
            return Err("it lists two addresses of one base".into());
        }
    }
    let index = graph.index.write().unwrap_or_else(|p| p.into_inner());
    index
        .load_from_buffer(buffer)
        .map_err(|error| format!("usearch cannot load it: {error}"))?;
    if index.dimensions() != usize::from(dims) || index.size() != rows_total {
        return Err(format!(
            "its graph holds {} vectors of {} dimensions, its list {rows_total} of {dims}",
            index.size(),
            index.dimensions()
        ));
    }
    let capacity = index
        .capacity()
        .max(index.size() + super::writer::GROWTH_SLACK);
    index
        .reserve_capacity_and_threads(capacity, GRAPH_THREADS)
        .map_err(|error| error.to_string())?;
    graph.memory_bytes.store(
        index.memory_usage() as u64,
        std::sync::atomic::Ordering::Release,
    );
    Ok(Some(held))
}

/// Removes `key`'s snapshot (its index dropped, or the snapshot failed a check); a missing
/// file is no error.
pub(crate) fn remove(data_dir: &Path, key: GraphKey) {
    let path = path(data_dir, key);
    match crate::file::ops::remove(&path) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot remove a graph snapshot")
        }
    }
}

/// Removes the snapshots of indexes not in `live` and temporary files left by a crash.
pub(crate) fn remove_stale(data_dir: &Path, live: &[GraphKey]) {
    let Ok(entries) = std::fs::read_dir(dir(data_dir)) else {
        return;
    };
    let wanted: Vec<PathBuf> = live.iter().map(|key| path(data_dir, *key)).collect();
    for entry in entries.flatten() {
        let path = entry.path();
        if !wanted.contains(&path) {
            match crate::file::ops::remove(&path) {
                Ok(()) => tracing::info!(path = %path.display(), "removed a stale graph snapshot"),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "cannot remove a stale graph snapshot");
                }
            }
        }
    }
}
