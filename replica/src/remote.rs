//! The replica's one door to the object store: create-only PUTs whose outcome is always
//! known (read back when the answer was lost), checked GETs, listings of one kind of key.
//!
//! A PUT that times out or fails after the object landed (an S3 gateway can answer 5xx for a
//! write it made) is not retried blindly: the object is read back, and if it holds exactly the
//! bytes we sent, the PUT succeeded; other bytes mean another writer got there first.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::error::ReplicaError;
use crate::layout::{Key, Layout};

/// How often a PUT is tried before its failure is returned (the caller's next cycle tries
/// again), and the pause before the next try.
const PUT_TRIES: u32 = 3;
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Whether `found` holds exactly `payload`'s parts, concatenated.
fn holds(found: &[u8], payload: &PutPayload) -> bool {
    if found.len() != payload.content_length() {
        return false;
    }
    let mut rest = found;
    for part in payload {
        let (head, tail) = rest.split_at(part.len());
        if head != &part[..] {
            return false;
        }
        rest = tail;
    }
    true
}

/// One listed object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listed {
    pub key: Key,
    pub size: u64,
    pub modified_unix_ms: u64,
}

/// What a create-only PUT found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Created {
    /// The object now holds our bytes (this PUT, or an earlier one whose answer was lost).
    Ours,
    /// Another writer created the key with other bytes.
    Theirs(Bytes),
}

/// A replica location: an object store and the prefix under it.
#[derive(Clone, Debug)]
pub struct Remote {
    pub store: Arc<dyn ObjectStore>,
    pub layout: Layout,
    /// For messages: the URL the operator gave.
    pub location: String,
    /// A `file://` replica's directory: the lease's conditional writes are made there under
    /// a lock (`local_cas.rs`), since `object_store`'s local store has no `If-Match`.
    pub local_dir: Option<std::path::PathBuf>,
}

/// A version of the one object written in place (the lease): its bytes, and the version a
/// conditional write names (its ETag on S3; on `file://`, the BLAKE3 of its bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned {
    pub bytes: Bytes,
    pub version: String,
}

/// What a conditional write (`Remote::swap`) came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Swapped {
    /// The object now holds our bytes (this write, or an earlier try whose answer was lost).
    Ours(Versioned),
    /// Another version was there (or none was, for a write that expected one): not written.
    Theirs(Option<Versioned>),
}

impl Remote {
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str, location: &str) -> Remote {
        Remote {
            store,
            layout: Layout::new(prefix),
            location: location.to_string(),
            local_dir: None,
        }
    }

    /// The object's bytes and version, `None` when it does not exist.
    pub async fn get_versioned(&self, key: Key) -> Result<Option<Versioned>, ReplicaError> {
        if let Some(dir) = &self.local_dir {
            return crate::local_cas::get_versioned(dir, &self.path(key));
        }
        let path = self.path(key);
        let result = match self.store.get(&path).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(source) => return Err(Self::store_error("GET", &path, source)),
        };
        let version = result.meta.e_tag.clone().unwrap_or_default();
        let bytes = result
            .bytes()
            .await
            .map_err(|source| Self::store_error("GET", &path, source))?;
        Ok(Some(Versioned { bytes, version }))
    }

    /// Writes `bytes` at `key` only if the object is still `expected` (`None`: only if it does
    /// not exist): `If-Match` / `If-None-Match` on S3, a compare under a lock on `file://`. A
    /// write whose outcome is unknown (an error, or a refusal after `object_store`'s own retry
    /// of a write that had landed) is read back: our bytes there (they never repeat: a lease
    /// carries its holder's nonce and a renewal count) mean it landed.
    pub async fn swap(
        &self,
        key: Key,
        expected: Option<&str>,
        bytes: Bytes,
    ) -> Result<Swapped, ReplicaError> {
        if let Some(dir) = &self.local_dir {
            return crate::local_cas::swap(dir, &self.path(key), expected, &bytes);
        }
        let path = self.path(key);
        let mode = match expected {
            None => PutMode::Create,
            Some(version) => PutMode::Update(object_store::UpdateVersion {
                e_tag: Some(version.to_string()),
                version: None,
            }),
        };
        let options = PutOptions {
            mode,
            ..PutOptions::default()
        };
        let put = self
            .store
            .put_opts(&path, PutPayload::from_bytes(bytes.clone()), options)
            .await;
        let refused = match put {
            Ok(result) if result.e_tag.is_some() => {
                let version = result.e_tag.unwrap_or_default();
                return Ok(Swapped::Ours(Versioned { bytes, version }));
            }
            Ok(_) => None,
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. },
            ) => None,
            Err(error) => Some(error),
        };
        match self.get_versioned(key).await {
            Ok(Some(found)) if found.bytes == bytes => Ok(Swapped::Ours(found)),
            // Refused, or failed and not there now. A failed write may still land later: the
            // lease recognises its own bytes by their nonce when it reads them then.
            Ok(found) => Ok(Swapped::Theirs(found)),
            Err(read) => Err(match refused {
                Some(source) => Self::store_error("PUT", &path, source),
                None => read,
            }),
        }
    }

    pub fn path(&self, key: Key) -> Path {
        self.layout.path(key)
    }

    fn store_error(
        operation: &'static str,
        path: &Path,
        source: object_store::Error,
    ) -> ReplicaError {
        ReplicaError::Store {
            operation,
            key: path.to_string(),
            source,
        }
    }

    /// Creates `key` with `bytes`, never overwriting: see the module doc.
    pub async fn create(&self, key: Key, bytes: Bytes) -> Result<Created, ReplicaError> {
        self.create_parts(key, PutPayload::from_bytes(bytes)).await
    }

    /// `create` of an object sent as the concatenation of `payload`'s parts (none copied).
    pub async fn create_parts(
        &self,
        key: Key,
        payload: PutPayload,
    ) -> Result<Created, ReplicaError> {
        let path = self.path(key);
        let mut last_error = None;
        for attempt in 0..PUT_TRIES {
            if attempt > 0 {
                tokio::time::sleep(RETRY_PAUSE * attempt).await;
            }
            let options = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            let put = self.store.put_opts(&path, payload.clone(), options).await;
            match put {
                Ok(_) => return Ok(Created::Ours),
                Err(
                    object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. },
                ) => {
                    // Ours from an earlier try whose answer was lost, or another writer's.
                    return match self.get(key).await? {
                        Some(found) if holds(&found, &payload) => Ok(Created::Ours),
                        Some(found) => Ok(Created::Theirs(found)),
                        // Created, then deleted before we looked: not ours.
                        None => Err(ReplicaError::Damaged {
                            key: path.to_string(),
                            reason: "refused as existing, then absent".into(),
                        }),
                    };
                }
                Err(error) => {
                    // The outcome is unknown: it may have landed.
                    tracing::debug!(key = %path, %error, attempt, "PUT failed; reading it back");
                    match self.get(key).await {
                        Ok(Some(found)) if holds(&found, &payload) => return Ok(Created::Ours),
                        Ok(Some(found)) => return Ok(Created::Theirs(found)),
                        Ok(None) | Err(_) => {}
                    }
                    last_error = Some(error);
                }
            }
        }
        let source = last_error.unwrap_or_else(|| object_store::Error::Generic {
            store: "replica",
            source: "no attempt was made".into(),
        });
        Err(Self::store_error("PUT", &path, source))
    }

    /// The object's bytes, `None` when it does not exist.
    pub async fn get(&self, key: Key) -> Result<Option<Bytes>, ReplicaError> {
        let path = self.path(key);
        match self.store.get(&path).await {
            Ok(result) => result
                .bytes()
                .await
                .map(Some)
                .map_err(|source| Self::store_error("GET", &path, source)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(Self::store_error("GET", &path, source)),
        }
    }

    /// The object's bytes; a missing object is an error naming it.
    pub async fn get_required(&self, key: Key) -> Result<Bytes, ReplicaError> {
        self.get(key)
            .await?
            .ok_or_else(|| ReplicaError::MissingObject {
                key: self.path(key).to_string(),
            })
    }

    /// Whether the object exists (a HEAD).
    pub async fn exists(&self, key: Key) -> Result<bool, ReplicaError> {
        let path = self.path(key);
        match self.store.head(&path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(source) => Err(Self::store_error("HEAD", &path, source)),
        }
    }

    /// Streams the object into `file` (created), returning its length.
    pub async fn download(&self, key: Key, file: &std::path::Path) -> Result<u64, ReplicaError> {
        let path = self.path(key);
        let result = match self.store.get(&path).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(ReplicaError::MissingObject {
                    key: path.to_string(),
                });
            }
            Err(source) => return Err(Self::store_error("GET", &path, source)),
        };
        let out = ctxstore_engine::files::WriteFile::create(file)
            .map_err(|source| ReplicaError::io(file, source))?;
        let mut stream = result.into_stream();
        let mut len = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|source| Self::store_error("GET", &path, source))?;
            out.write_at(&chunk, len)
                .map_err(|source| ReplicaError::io(file, source))?;
            len += chunk.len() as u64;
        }
        out.sync_data()
            .map_err(|source| ReplicaError::io(file, source))?;
        Ok(len)
    }

    /// Every key of the replica under `prefix` (a plain listing, no delimiter); paths that are
    /// not the replica's keys come back as `Err(path)` so callers can refuse them.
    pub async fn list(&self, prefix: &Path) -> Result<Vec<Result<Listed, String>>, ReplicaError> {
        let stream = self.store.list(Some(prefix));
        self.collect(prefix, stream).await
    }

    /// `list` of the keys after `after` (exclusive) only: S3's `start-after`, so a reader that
    /// knows where it was lists only what is newer.
    pub async fn list_after(
        &self,
        prefix: &Path,
        after: Key,
    ) -> Result<Vec<Result<Listed, String>>, ReplicaError> {
        let offset = self.path(after);
        let stream = self.store.list_with_offset(Some(prefix), &offset);
        self.collect(prefix, stream).await
    }

    async fn collect(
        &self,
        prefix: &Path,
        mut stream: futures_util::stream::BoxStream<
            'static,
            object_store::Result<object_store::ObjectMeta>,
        >,
    ) -> Result<Vec<Result<Listed, String>>, ReplicaError> {
        let mut found = Vec::new();
        while let Some(item) = stream.next().await {
            let meta = item.map_err(|source| Self::store_error("LIST", prefix, source))?;
            match self.layout.parse(&meta.location) {
                Some(key) => found.push(Ok(Listed {
                    key,
                    size: meta.size,
                    modified_unix_ms: meta.last_modified.timestamp_millis().max(0) as u64,
                })),
                None => found.push(Err(meta.location.to_string())),
            }
        }
        Ok(found)
    }

    pub async fn delete(&self, key: Key) -> Result<(), ReplicaError> {
        let path = self.path(key);
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(source) => Err(Self::store_error("DELETE", &path, source)),
        }
    }
}
