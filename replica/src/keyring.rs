//! A sealing store's keyring in its replica (decision 0032 §5): `PREFIX/keyring`, the store's
//! `DIR/keyring` as it was last changed (keys wrapped by the master key: the object store never
//! holds a key it could open). It is in no segment, checkpoint or restore point: every restore
//! and every standby reads the current one, whatever point it restores, so a key the store
//! forgot is forgotten at every point.
//!
//! - **The primary** replaces the object (conditional PUT: `If-Match` on the version it read,
//!   `If-None-Match` when there is none) before it ships a cut whose keyring changed: the
//!   keyring is read after the cut is held, and a key is in the local keyring before anything
//!   is sealed under it, so no segment names sealed bytes whose key the object lacks.
//! - **A restore** writes the object's bytes as the new store's `keyring` before its meta file.
//! - **A standby** installs the object after it lists segments and before it applies them
//!   (`Engine::install_keyring`).

use std::path::Path;

use bytes::Bytes;

use crate::error::ReplicaError;
use crate::layout::Key;
use crate::remote::{Remote, Swapped, Versioned};

/// The store's `keyring`, `None` when it seals nothing.
pub fn read_local(store_root: &Path) -> Result<Option<Vec<u8>>, ReplicaError> {
    let path = ctxstore_engine::store_dir::StoreDir::new(store_root).keyring_path();
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ReplicaError::io(&path, source)),
    }
}

/// The replica's keyring and its version, `None` when the store never sealed.
pub async fn fetch(remote: &Remote) -> Result<Option<Versioned>, ReplicaError> {
    remote.get_versioned(Key::Keyring).await
}

/// Makes the replica's keyring `bytes`: nothing when it holds them already, else a conditional
/// PUT on the version it holds. Another writer's version in between (a fenced primary racing
/// the new one) is an error; the next cycle reads again.
pub async fn ship(remote: &Remote, bytes: &[u8]) -> Result<(), ReplicaError> {
    let current = fetch(remote).await?;
    if current.as_ref().is_some_and(|found| found.bytes == bytes) {
        return Ok(());
    }
    let expected = current.as_ref().map(|found| found.version.as_str());
    match remote
        .swap(Key::Keyring, expected, Bytes::copy_from_slice(bytes))
        .await?
    {
        Swapped::Ours(_) => Ok(()),
        Swapped::Theirs(_) => Err(ReplicaError::Invalid(format!(
            "{}: another writer replaced the keyring while this primary replaced it; the next \
             cycle reads it again",
            remote.path(Key::Keyring)
        ))),
    }
}
