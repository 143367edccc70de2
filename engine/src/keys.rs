//! The store's keys at run time (decision 0032 §4–§5): `DIR/keyring` opened under the master
//! key at open, the snapshot every writer seals with and every reader opens with, and the
//! keyring's rewrites when a tenant gets its keys.
//!
//! - **Without a master key** the store seals nothing (every store before decision 0032), and
//!   a tenant's addresses are derived from its TenantId (`seal::Addressing::of_tenant`). A
//!   store that holds a `keyring` refuses to open without the master key: it seals.
//! - **With a master key** every payload body a shard stores is sealed under its tenant's data
//!   key (the operator's too: keyring entry 0). A tenant registered while the store seals gets
//!   random keys before anything of it is written; a tenant registered before (or whose keys a
//!   crash kept from being written) gets the address key it had, derived, and a fresh data key
//!   at the next open (addresses never change).
//! - **A standby** makes no keys: its keyring is its primary's, installed from the replica
//!   (`install`), until it is promoted (`lead`), when it gives keys as a primary does.
//! - **The snapshot**: readers and writers load it without a lock (`ArcSwap`); only a rewrite
//!   takes the writer's mutex, and it replaces the file durably before it publishes the next
//!   snapshot, so no payload is ever sealed under a key the disk does not hold.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::error::{Corruption, EngineError, OpenError};
use crate::format::keyring::OPERATOR_NAME;
use crate::ids::TenantId;
use crate::seal::{Addressing, DataKey, Keyring, MasterKey, SealError};
use crate::store_dir::KEYRING_FILE;

/// What the keys are opened for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum KeysFor {
    /// A store that writes: a first start with a master key writes a new keyring.
    Serving,
    /// A standby: its keyring is its primary's, installed from the replica
    /// (`StoreKeys::install`); it never makes one.
    Following,
    /// `verify`: reads, never writes; without the master key, sealed bytes are left to their
    /// checksums.
    Verifying,
}

/// The store's keys: whether it seals, and the keyring it seals with.
#[derive(Debug)]
pub(crate) struct StoreKeys {
    /// `None`: the store seals nothing.
    master: Option<Arc<MasterKey>>,
    keyring: ArcSwap<Keyring>,
    path: PathBuf,
    /// Held by a rewrite (a tenant's new keys): rare, never on a read or an append.
    rewrite: Mutex<()>,
    /// `verify` without the master key: sealed bytes are checked as far as their checksums go
    /// and never opened (a replayed sealed delta counts by its length); never for serving.
    checks_only: bool,
    /// A standby's: its keys are its primary's (`install`), it gives none of its own, until
    /// it is promoted (`lead`).
    following: std::sync::atomic::AtomicBool,
}

/// A keyring that does not open: a wrong master key is the operator's to fix, anything else
/// is damage.
fn open_error(path: &Path, error: SealError) -> OpenError {
    match error {
        SealError::WrongMasterKey => OpenError::Config(format!(
            "{}: {error}; the store was not opened",
            path.display()
        )),
        other => OpenError::Corrupt(Corruption::new(path, 0, other.to_string())),
    }
}

impl StoreKeys {
    /// A store that seals nothing (verify without a master key reads a sealing store so).
    pub fn none(root: &Path) -> StoreKeys {
        StoreKeys {
            master: None,
            keyring: ArcSwap::from_pointee(Keyring::new()),
            path: root.join(KEYRING_FILE),
            rewrite: Mutex::new(()),
            checks_only: false,
            following: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The keys of the store in `root`: its keyring opened under `master` (the check first: a
    /// wrong master key is refused, naming the check), or, serving, a new keyring holding the
    /// operator's keys when the store seals from now on. `sealed_before`: the store's meta
    /// file says it seals, so its keyring must be there.
    pub fn open(
        root: &Path,
        master: Option<Arc<MasterKey>>,
        sealed_before: bool,
        purpose: KeysFor,
    ) -> Result<StoreKeys, OpenError> {
        let write = purpose != KeysFor::Verifying;
        let path = root.join(KEYRING_FILE);
        let exists = std::fs::symlink_metadata(&path).is_ok();
        if sealed_before && !exists && write {
            return Err(OpenError::Config(format!(
                "{} sealed its payloads, but its keyring {} is missing: a backup or a restore \
                 does not carry the keyring (decision 0032 §5); copy the keyring of the store \
                 it was made from there, then start it with that store's master key",
                root.display(),
                path.display()
            )));
        }
        let keyring = match (&master, exists) {
            (None, _) if !write => {
                return Ok(StoreKeys {
                    checks_only: true,
                    ..StoreKeys::none(root)
                });
            }
            (None, false) => return Ok(StoreKeys::none(root)),
            (None, true) => {
                return Err(OpenError::Config(format!(
                    "{} exists: this store seals its payloads; start it with \
                     --master-key-file (the master key it was made with)",
                    path.display()
                )));
            }
            (Some(master), true) => {
                let bytes = crate::file::read_whole(&path)
                    .map_err(|source| OpenError::io(&path, source))?;
                let (keyring, under_previous) = Keyring::decode_opened(&bytes, master)
                    .map_err(|error| open_error(&path, error))?;
                // A master key rotation (decision 0032 §7): every key rewrapped under the new
                // master key, no payload rewritten. A standby's keyring is its primary's,
                // which rewraps its own and ships it.
                if under_previous && purpose == KeysFor::Serving {
                    write_keyring(&path, &keyring, master)?;
                    tracing::warn!(
                        path = %path.display(),
                        "the keyring opened under the previous master key and is rewrapped under \
                         the new one: remove the previous key from the master key file"
                    );
                }
                keyring
            }
            (Some(_), false) if purpose == KeysFor::Following => Keyring::new(),
            (Some(master), false) => {
                let mut keyring = Keyring::new();
                keyring
                    .add_tenant(0, OPERATOR_NAME)
                    .map_err(|error| open_error(&path, error))?;
                if write {
                    write_keyring(&path, &keyring, master)?;
                    tracing::info!(path = %path.display(), "new keyring: the store seals payloads from now on");
                }
                keyring
            }
        };
        Ok(StoreKeys {
            master,
            keyring: ArcSwap::from_pointee(keyring),
            path,
            rewrite: Mutex::new(()),
            checks_only: false,
            following: std::sync::atomic::AtomicBool::new(purpose == KeysFor::Following),
        })
    }

    /// A promoted standby's keys are its own from now on: `give_keys` gives keys again.
    pub fn lead(&self) {
        self.following
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// Whether the store seals its payloads.
    pub fn seals(&self) -> bool {
        self.master.is_some()
    }

    /// Whether these are `verify`'s keys without the master key: sealed bytes are left to
    /// their checksums.
    pub fn checks_only(&self) -> bool {
        self.checks_only
    }

    /// How `tenant_id`'s hashes become addresses: its address key's permutation (the
    /// keyring's, or derived without one), the hash itself for the operator.
    pub fn addressing(&self, tenant_id: TenantId) -> Addressing {
        if self.master.is_some()
            && let Some(addressing) = self.keyring.load().addressing(tenant_id)
        {
            return addressing;
        }
        Addressing::of_tenant(tenant_id)
    }

    /// Whether `tenant_id`'s addresses are known: always without a master key (derived) and
    /// for the operator (its hashes); with one, once the keyring holds the tenant's keys (a
    /// standby's arrive with its primary's keyring, after the tenant's record may have).
    pub fn knows(&self, tenant_id: TenantId) -> bool {
        self.master.is_none()
            || tenant_id == TenantId::OPERATOR
            || self.keyring.load().addressing(tenant_id).is_some()
    }

    /// Whether `tenant_id`'s keys were destroyed (decision 0032 §6): its keyring entry is a
    /// tombstone. What it sealed opens no more, anywhere.
    pub fn erased(&self, tenant_id: TenantId) -> bool {
        self.master.is_some()
            && matches!(
                self.keyring.load().tenant(tenant_id.0),
                Some(crate::seal::TenantKeys::Deleted { .. })
            )
    }

    /// The tenants whose keys were destroyed.
    pub fn erased_tenants(&self) -> Vec<TenantId> {
        let keyring = self.keyring.load();
        (keyring.tenants())
            .filter(|(_, keys)| matches!(keys, crate::seal::TenantKeys::Deleted { .. }))
            .map(|(tenant_id, _)| TenantId(tenant_id))
            .collect()
    }

    /// Destroys `tenant_id`'s keys (decision 0032 §6): the keyring is rewritten with its
    /// entry a tombstone (id and name, no key), durably, before this returns; the keys in
    /// memory are wiped as the last reader drops them. Answers whether anything changed: not
    /// when the store seals nothing, when the tenant has no entry, or when it is a tombstone
    /// already. A standby forgets nothing of its own: its primary's keyring brings the
    /// tombstone.
    pub fn forget(&self, tenant_id: TenantId) -> Result<bool, EngineError> {
        let Some(master) = &self.master else {
            return Ok(false);
        };
        if self.following.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(false);
        }
        let _rewrite = self
            .rewrite
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = self.keyring.load_full();
        if !matches!(
            current.tenant(tenant_id.0),
            Some(crate::seal::TenantKeys::Live { .. })
        ) {
            return Ok(false);
        }
        let mut next = Keyring::clone(&current);
        drop(current);
        next.delete(tenant_id.0)
            .map_err(|error| EngineError::Keys(format!("tenant {tenant_id}: {error}")))?;
        self.publish(next, master)?;
        Ok(true)
    }

    /// A new version of `tenant_id`'s data key (decision 0032 §7), written durably before
    /// this returns: new seals use it from then on; what older versions sealed keeps its
    /// version (the pack header and op 15 name it) and opens as before. The address key never
    /// rotates. Answers the new version; an error when the store seals nothing, the tenant
    /// has no live keys (deleted, or not registered), or it already holds the most versions.
    pub fn rotate(&self, tenant_id: TenantId) -> Result<u16, EngineError> {
        let Some(master) = &self.master else {
            return Err(EngineError::InvalidArgument(
                "this store seals nothing (started without --master-key-file): there is no \
                 data key to rotate"
                    .into(),
            ));
        };
        let _rewrite = self
            .rewrite
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = Keyring::clone(&self.keyring.load_full());
        let version = next.rotate(tenant_id.0).map_err(|error| {
            EngineError::InvalidArgument(format!("rotating tenant {tenant_id}'s data key: {error}"))
        })?;
        self.publish(next, master)?;
        Ok(version)
    }

    /// The key that seals `tenant_id`'s new payloads: `None` when the store seals nothing; an
    /// error when it seals and the tenant has no live keys (nothing is written in plain text
    /// instead).
    pub fn sealing_key(&self, tenant_id: TenantId) -> Result<Option<Arc<DataKey>>, EngineError> {
        if self.master.is_none() {
            return Ok(None);
        }
        match self.keyring.load().sealing_key(tenant_id) {
            Some(key) => Ok(Some(key)),
            None => Err(EngineError::Keys(format!(
                "tenant {} has no keys in {}; nothing was written (restart the server: the \
                 open gives every registered tenant its keys)",
                tenant_id.0,
                self.path.display()
            ))),
        }
    }

    /// Version `version` of `tenant_id`'s data key, to open what it sealed.
    pub fn data_key(&self, tenant_id: TenantId, version: u16) -> Result<Arc<DataKey>, String> {
        if self.master.is_none() {
            return Err(format!(
                "the body is sealed (tenant {}, key version {version}) and the store was \
                 opened without its master key",
                tenant_id.0
            ));
        }
        if self.erased(tenant_id) {
            return Err(format!(
                "tenant {} was deleted: its keys are destroyed and what it stored is erased",
                tenant_id.0
            ));
        }
        self.keyring
            .load()
            .data_key(tenant_id, version)
            .ok_or_else(|| {
                format!(
                    "the keyring holds no data key version {version} of tenant {}",
                    tenant_id.0
                )
            })
    }

    /// Gives each of `tenants` that has no keys yet its keys, and writes the keyring durably
    /// before the next snapshot is published. `fresh`: random keys (a tenant registered while
    /// the store seals, before anything of it is written); otherwise its derived address key
    /// (one that may hold blobs already, at their derived addresses) and a fresh data key.
    /// A standby gives none: its keys are its primary's, and keys of its own for a tenant its
    /// primary registered would address that tenant's blobs where they are not.
    pub fn give_keys(&self, tenants: &[(TenantId, &str)], fresh: bool) -> Result<(), EngineError> {
        let Some(master) = &self.master else {
            return Ok(());
        };
        if self.following.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        let _rewrite = self
            .rewrite
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = self.keyring.load_full();
        let missing: Vec<_> = tenants
            .iter()
            .filter(|(tenant_id, _)| current.tenant(tenant_id.0).is_none())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut next = Keyring::clone(&current);
        for (tenant_id, name) in missing {
            let added = if fresh {
                next.add_tenant(tenant_id.0, name)
            } else {
                next.add_tenant_derived(tenant_id.0, name)
            };
            added.map_err(|error| EngineError::Keys(format!("tenant {name}: {error}")))?;
        }
        self.publish(next, master)?;
        Ok(())
    }
}

impl StoreKeys {
    /// A standby's: replaces the keyring with its primary's `bytes` (the replica's `keyring`
    /// object), opened under this store's master key first (one that does not open changes
    /// nothing: the error names the check), then written durably, then published. Answers
    /// whether anything changed.
    pub fn install(&self, bytes: &[u8]) -> Result<bool, EngineError> {
        let Some(master) = &self.master else {
            return Err(EngineError::Keys(
                "the primary seals its payloads and this store has no master key: start it \
                 with the primary's --master-key-file"
                    .into(),
            ));
        };
        let _rewrite = self
            .rewrite
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = crate::file::read_whole(&self.path).ok();
        if current.as_deref() == Some(bytes) {
            return Ok(false);
        }
        let keyring = Keyring::decode(bytes, master).map_err(|error| {
            EngineError::Keys(format!("the primary's keyring does not open here: {error}"))
        })?;
        crate::file::api::write_file_durably(&self.path, bytes)
            .map_err(|source| EngineError::from_write(&self.path, source))?;
        self.keyring.store(Arc::new(keyring));
        Ok(true)
    }
}

impl StoreKeys {
    /// `next` made the keyring: written durably first, then published to readers (the caller
    /// holds `rewrite`, so two changes never race to the file).
    fn publish(&self, next: Keyring, master: &MasterKey) -> Result<(), EngineError> {
        write_keyring(&self.path, &next, master).map_err(|error| match error {
            OpenError::Io { path, source } => EngineError::Io { file: path, source },
            other => EngineError::Keys(other.to_string()),
        })?;
        self.keyring.store(Arc::new(next));
        Ok(())
    }
}

/// `keyring`'s bytes under `master`, written whole and durably (temporary file, fsync,
/// rename, directory fsync): after a crash the old keyring or the new one.
fn write_keyring(path: &Path, keyring: &Keyring, master: &MasterKey) -> Result<(), OpenError> {
    let bytes = keyring
        .encode(master)
        .map_err(|error| OpenError::Config(format!("{}: {error}", path.display())))?;
    crate::file::api::write_file_durably(path, &bytes).map_err(|source| OpenError::io(path, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A standby's keys are its primary's: it gives a tenant none of its own (they would
    /// address the tenant's blobs where they are not) until it is promoted; what it installs
    /// must open under its master key.
    #[test]
    fn a_standby_gives_no_keys_until_it_leads_and_installs_only_what_opens() {
        let dir = tempfile::tempdir().unwrap();
        let master = Arc::new(MasterKey::random().unwrap());
        let keys =
            StoreKeys::open(dir.path(), Some(master.clone()), false, KeysFor::Following).unwrap();
        assert!(
            !dir.path().join(KEYRING_FILE).exists(),
            "a standby makes no keyring"
        );
        keys.give_keys(&[(TenantId(1), "acme")], true).unwrap();
        assert!(!keys.knows(TenantId(1)));
        assert!(!dir.path().join(KEYRING_FILE).exists());

        // The primary's keyring, installed: acme is known, at the primary's addresses.
        let mut primary = Keyring::new();
        primary.add_tenant(0, OPERATOR_NAME).unwrap();
        primary.add_tenant(1, "acme").unwrap();
        let bytes = primary.encode(&master).unwrap();
        assert!(keys.install(&bytes).unwrap());
        assert!(
            !keys.install(&bytes).unwrap(),
            "the same bytes change nothing"
        );
        assert!(keys.knows(TenantId(1)));
        let hash = crate::ids::BlobHash::of(b"x");
        let expected = primary.addressing(TenantId(1)).unwrap().address(hash);
        assert_eq!(keys.addressing(TenantId(1)).address(hash), expected);

        // Another master key's keyring does not open: nothing changes.
        let other = MasterKey::random().unwrap();
        let foreign = primary.encode(&other).unwrap();
        assert!(keys.install(&foreign).is_err());
        assert_eq!(std::fs::read(dir.path().join(KEYRING_FILE)).unwrap(), bytes);

        keys.lead();
        keys.give_keys(&[(TenantId(2), "globex")], true).unwrap();
        assert!(keys.knows(TenantId(2)));
    }
}
