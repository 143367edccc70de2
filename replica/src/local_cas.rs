//! Conditional writes of a `file://` replica's lease (decision 0031 §4): `object_store`'s local
//! store answers `PutMode::Update` with `NotImplemented`, so the lease key is written here, in
//! place, under an exclusive `flock` of the replica's directory: read the current bytes, compare
//! their version (the BLAKE3 of the bytes, which reads give as the version) with the expected
//! one, write a temporary file and rename it over the key, durably, through the file layer.
//!
//! It holds between processes of one host (the tests use it) and between hosts only as far as
//! the shared file system's locks do: a failover across machines uses S3.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use ctxstore_engine::files;

use crate::error::ReplicaError;
use crate::remote::{Swapped, Versioned};

/// The version of `bytes`: their BLAKE3, hex.
fn version_of(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

fn file_of(dir: &Path, key: &object_store::path::Path) -> PathBuf {
    dir.join(key.as_ref())
}

/// The key's bytes and version; `None` when it does not exist.
pub fn get_versioned(
    dir: &Path,
    key: &object_store::path::Path,
) -> Result<Option<Versioned>, ReplicaError> {
    let path = file_of(dir, key);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(Versioned {
            version: version_of(&bytes),
            bytes: Bytes::from(bytes),
        })),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ReplicaError::io(&path, source)),
    }
}

/// Writes `bytes` at the key if it holds `expected` (`None`: if it does not exist), under the
/// directory's lock.
pub fn swap(
    dir: &Path,
    key: &object_store::path::Path,
    expected: Option<&str>,
    bytes: &[u8],
) -> Result<Swapped, ReplicaError> {
    let path = file_of(dir, key);
    let parent = path.parent().unwrap_or(dir).to_path_buf();
    files::create_dir_all(&parent).map_err(|source| ReplicaError::io(&parent, source))?;
    // Opening a directory reads it; the lock is the kernel's, released when `locked` drops.
    let locked =
        std::fs::File::open(&parent).map_err(|source| ReplicaError::io(&parent, source))?;
    locked
        .lock()
        .map_err(|source| ReplicaError::io(&parent, source))?;
    let current = get_versioned(dir, key)?;
    let holds_expected = match (&current, expected) {
        (None, None) => true,
        (Some(current), Some(expected)) => current.version == expected,
        _ => false,
    };
    if !holds_expected {
        return Ok(match current {
            Some(found) if found.bytes == bytes => Swapped::Ours(found),
            found => Swapped::Theirs(found),
        });
    }
    // `KEY#DIGITS`: the name `object_store`'s local store gives its own staged uploads, which
    // its listings skip, so one left by a crash is never read as a key.
    let mut temporary = path.clone().into_os_string();
    temporary.push(format!("#{}", std::process::id()));
    let temporary = PathBuf::from(temporary);
    files::write_file_durably(&temporary, bytes)
        .map_err(|source| ReplicaError::io(&temporary, source))?;
    files::rename_durably(&temporary, &path).map_err(|source| ReplicaError::io(&path, source))?;
    drop(locked);
    Ok(Swapped::Ours(Versioned {
        version: version_of(bytes),
        bytes: Bytes::copy_from_slice(bytes),
    }))
}
