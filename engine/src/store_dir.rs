//! The data directory: its layout, its lock, its meta file (written through the file layer,
//! `file/ops.rs`).
//!
//! ```text
//! DIR/LOCK                               advisory lock held while the store is open
//! DIR/RESERVE                            disk kept for garbage collection alone (reserve.rs)
//! DIR/ctxstore.meta                      format version and shard count (written once)
//! DIR/turns.log                          sequencer journal: turns and context creations
//! DIR/turns.base                         the compacted prefix of turns.log (after a collection)
//! DIR/turns.base.compact                 a log compaction's new base before its rename
//! DIR/blobs/shard-SS/pack-NNNNNN.pack    blob records of shard SS
//! DIR/blobs/shard-SS/blobs.idx           index entries of shard SS
//! DIR/blobs/shard-SS/*.compact           a compaction's new files before they are renamed in
//! DIR/blobs/shard-SS/REINDEX             a compaction is switching files: rebuild the index
//! ```

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use crate::error::OpenError;
use crate::file::ops::{
    create_dir_all, create_durable, open_lock, remove, rename_durably, sync_dir, write_durable,
};
use crate::format::meta::{Meta, STORE_FORMAT_VERSION};

pub const META_FILE: &str = "ctxstore.meta";
pub const LOCK_FILE: &str = "LOCK";
pub const KEYRING_FILE: &str = "keyring";
pub const TURNS_LOG_FILE: &str = "turns.log";
/// The compacted prefix of `turns.log` (`format/log_base.rs`).
pub const TURNS_BASE_FILE: &str = "turns.base";
pub const BLOBS_DIR: &str = "blobs";
pub const BLOB_INDEX_FILE: &str = "blobs.idx";
/// Present while a compaction renames its files into place (`blob/shard.rs`): the next open
/// rebuilds the shard's index from its packs.
pub const REINDEX_MARKER_FILE: &str = "REINDEX";
/// Suffix of a compaction's files before they are renamed into place.
pub const COMPACT_SUFFIX: &str = ".compact";

#[derive(Clone, Debug)]
pub struct StoreDir {
    pub root: PathBuf,
}

impl StoreDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        StoreDir { root: root.into() }
    }

    pub fn meta_path(&self) -> PathBuf {
        self.root.join(META_FILE)
    }

    /// `keyring`: a sealing store's keys, wrapped by its master key (decision 0032 §5).
    pub fn keyring_path(&self) -> PathBuf {
        self.root.join(KEYRING_FILE)
    }

    pub fn turns_log_path(&self) -> PathBuf {
        self.root.join(TURNS_LOG_FILE)
    }

    pub fn turns_base_path(&self) -> PathBuf {
        self.root.join(TURNS_BASE_FILE)
    }

    /// A log compaction's new base before its rename.
    pub fn turns_base_compact_path(&self) -> PathBuf {
        self.root.join(format!("{TURNS_BASE_FILE}.compact"))
    }

    pub fn shard_dir(&self, shard: u16) -> PathBuf {
        self.root.join(BLOBS_DIR).join(format!("shard-{shard:02}"))
    }

    pub fn blob_index_path(&self, shard: u16) -> PathBuf {
        self.shard_dir(shard).join(BLOB_INDEX_FILE)
    }

    pub fn pack_path(&self, shard: u16, pack_id: u32) -> PathBuf {
        pack_path(&self.shard_dir(shard), pack_id)
    }

    /// The files a store writes, cuts or punches in place: `turns.log`, and each shard's
    /// `blobs.idx` and newest pack (the open one), those that exist. Every other file is
    /// written once under a temporary name and renamed in (the meta file, `turns.base`, a
    /// compaction's files), or never changes again (sealed packs), so only these must be
    /// private to the store before it opens (decision 0017).
    pub fn files_written_in_place(&self, shard_count: u16) -> io::Result<Vec<PathBuf>> {
        let mut files = vec![self.turns_log_path()];
        for shard in 0..shard_count {
            files.push(self.blob_index_path(shard));
            let dir = self.shard_dir(shard);
            let newest = match fs::read_dir(&dir) {
                Ok(entries) => {
                    let mut newest = None;
                    for entry in entries {
                        let name = entry?.file_name();
                        let pack_id = name.to_str().and_then(parse_pack_name);
                        newest = newest.max(pack_id);
                    }
                    newest
                }
                Err(error) if error.kind() == io::ErrorKind::NotFound => None,
                Err(error) => return Err(error),
            };
            if let Some(pack_id) = newest {
                files.push(self.pack_path(shard, pack_id));
            }
        }
        files.retain(|path| path.exists());
        Ok(files)
    }

    /// The shard count of the store in this directory, if there is one.
    pub fn existing_shard_count(&self) -> Result<Option<u16>, OpenError> {
        let meta_path = self.meta_path();
        match crate::file::read_whole(&meta_path) {
            Ok(bytes) => Meta::decode(&bytes)
                .map(|meta| Some(meta.shard_count))
                .map_err(|error| {
                    OpenError::Corrupt(crate::error::Corruption::record(&meta_path, 0, &error))
                }),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(OpenError::io(&meta_path, source)),
        }
    }

    /// Takes the exclusive lock of the directory; held until the returned guard is dropped.
    pub fn lock(&self) -> Result<DirLock, OpenError> {
        let path = self.root.join(LOCK_FILE);
        // A copy of a store made with hard links (`cp -al`) shares its LOCK's inode, and a
        // lock is taken on the inode: the copy would find itself locked by the original's
        // server. The lock file holds no data, so a shared one is replaced by a new one.
        if fs::metadata(&path).is_ok_and(|metadata| {
            use std::os::unix::fs::MetadataExt;
            metadata.nlink() > 1
        }) {
            remove(&path).map_err(|source| OpenError::io(&path, source))?;
        }
        let file = open_lock(&path).map_err(|source| OpenError::io(&path, source))?;
        match file.try_lock() {
            Ok(()) => Ok(DirLock { file, path }),
            Err(fs::TryLockError::WouldBlock) => Err(OpenError::Locked {
                path: self.root.clone(),
            }),
            Err(fs::TryLockError::Error(source)) => Err(OpenError::io(&path, source)),
        }
    }

    /// Reads the meta file, or creates the store (directories, meta, empty files) when the
    /// directory holds no store yet.
    pub fn open_or_create(&self, shard_count: u16, now_unix_ms: u64) -> Result<Meta, OpenError> {
        let meta_path = self.meta_path();
        match crate::file::read_whole(&meta_path) {
            Ok(bytes) => {
                let meta = Meta::decode(&bytes).map_err(|error| {
                    OpenError::Corrupt(crate::error::Corruption::record(&meta_path, 0, &error))
                })?;
                assert!(meta.format_version <= STORE_FORMAT_VERSION);
                Ok(meta)
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                self.create(shard_count, now_unix_ms)
            }
            Err(source) => Err(OpenError::io(&meta_path, source)),
        }
    }

    fn create(&self, shard_count: u16, now_unix_ms: u64) -> Result<Meta, OpenError> {
        let turns_log = self.turns_log_path();
        // A creation interrupted before the meta file was written left only empty files,
        // which are taken over; anything with data is not a store being created.
        if std::fs::metadata(&turns_log).is_ok_and(|metadata| metadata.len() > 0) {
            return Err(OpenError::Inconsistent(format!(
                "{} holds records but {} is missing",
                turns_log.display(),
                self.meta_path().display()
            )));
        }
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| OpenError::io(path, source)
        };
        let blobs = self.root.join(BLOBS_DIR);
        create_dir_all(&blobs).map_err(io(&blobs))?;
        for shard in 0..shard_count {
            let dir = self.shard_dir(shard);
            create_dir_all(&dir).map_err(io(&dir))?;
            create_durable(&self.pack_path(shard, 0)).map_err(io(&dir))?;
            create_durable(&self.blob_index_path(shard)).map_err(io(&dir))?;
            sync_dir(&dir).map_err(io(&dir))?;
        }
        sync_dir(&blobs).map_err(io(&blobs))?;
        create_durable(&turns_log).map_err(io(&turns_log))?;
        // The meta file goes last: its presence says the store is complete.
        let meta = Meta {
            format_version: STORE_FORMAT_VERSION,
            shard_count,
            created_at_unix_ms: now_unix_ms,
            seals: false,
        };
        self.write_meta(&meta)?;
        Ok(meta)
    }

    /// Writes the meta file durably and atomically (temporary file, fsync, rename, directory
    /// fsync): at creation, and when a format migration completes.
    pub fn write_meta(&self, meta: &Meta) -> Result<(), OpenError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| OpenError::io(path, source)
        };
        let temporary = self.root.join(format!("{META_FILE}.tmp"));
        write_durable(&temporary, &meta.encode()).map_err(io(&temporary))?;
        rename_durably(&temporary, &self.meta_path()).map_err(io(&temporary))?;
        let check = crate::file::read_whole(&self.meta_path()).map_err(io(&self.meta_path()))?;
        assert_eq!(Meta::decode(&check).ok().as_ref(), Some(meta));
        Ok(())
    }
}

/// The exclusive lock on a data directory, taken by [`StoreDir::lock`]: released when dropped.
#[derive(Debug)]
pub struct DirLock {
    file: File,
    path: PathBuf,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Unlock, not just close: the lock belongs to the open file description, and a child
        // process forked meanwhile by any thread of this process (a `Command::spawn` anywhere
        // in a program that embeds the engine) holds a copy of it until its exec closes it.
        // A close alone would leave the store locked for that while, and an open right after
        // `Engine::shutdown` returned would be refused as "locked by another process". The
        // unlock releases it for every copy at once.
        if let Err(error) = self.file.unlock() {
            tracing::warn!(
                path = %self.path.display(),
                %error,
                "unlocking the data directory failed; the lock goes when its file closes, \
                 which a child process forked meanwhile can delay until it runs its program"
            );
        }
    }
}

pub fn pack_path(shard_dir: &Path, pack_id: u32) -> PathBuf {
    shard_dir.join(format!("pack-{pack_id:06}.pack"))
}

/// Where a compaction writes the new version of `path` before renaming it over `path`.
pub fn compact_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(COMPACT_SUFFIX);
    path.with_file_name(name)
}

/// Parses `pack-NNNNNN.pack`.
pub fn parse_pack_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("pack-")?.strip_suffix(".pack")?;
    if digits.len() != 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// A child process forked while the store is open (any `Command::spawn` in the program)
    /// holds a copy of the LOCK file's description until its exec: `try_clone` (a `dup`)
    /// makes the same copy here, without a fork. Dropping the lock must still release it, or a
    /// restart in this process is refused (the flaky `in_process_stop_…` server test).
    #[test]
    fn a_dropped_lock_is_released_while_a_copy_of_its_file_lives_on() {
        let dir = tempfile::tempdir().unwrap();
        let store = StoreDir::new(dir.path());
        let lock = store.lock().unwrap();
        let copy = lock.file.try_clone().unwrap();
        assert!(matches!(store.lock(), Err(OpenError::Locked { .. })));
        drop(lock);
        let relocked = store.lock();
        assert!(relocked.is_ok(), "{:?}", relocked.err());
        drop(copy);
        drop(relocked);
        assert!(store.lock().is_ok());
    }
}
