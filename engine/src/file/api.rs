//! The file layer's public calls (`ctxstore_engine::files`), for crates beside the engine
//! that write into a store's directory or next to it — the replica's local state, its
//! upload staging and its restore — so that their every write, sync, rename and removal
//! passes the same disk seam (`disk.rs`) as the engine's: the fault hooks and the simulated
//! disk reach them too (issue 36, decision 0026).
//!
//! Each call says what it makes durable; "not durable" means the caller syncs (the file,
//! its directory, or both) before it relies on it.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::disk::{self, Open};
use super::ops;

/// Suffix of `write_file_durably`'s temporary file before its rename.
const TEMPORARY_SUFFIX: &str = ".tmp";

/// Writes `bytes` as the whole of `path`, durably and atomically: written under a temporary
/// name beside it, synced, renamed over `path`, the directory synced. After a crash, `path`
/// holds the old bytes or the new ones, never a mix; a leftover temporary file is replaced by
/// the next call.
pub fn write_file_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(TEMPORARY_SUFFIX);
    let temporary = path.with_file_name(name);
    ops::write_durable(&temporary, bytes)?;
    ops::rename_durably(&temporary, path)
}

/// The bytes that may still be written to the file system holding `dir` (a restore checks
/// that it fits before it fetches a byte).
pub fn available_bytes(dir: &Path) -> io::Result<u64> {
    disk::available_bytes(dir)
}

/// Creates `dir` and its missing parents, durably (each new directory synced in its parent).
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    ops::create_dir_all(dir)
}

/// Makes the creations, renames and removals of entries in `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    ops::sync_dir(dir)
}

/// Makes an existing file's bytes and length durable (not its name: `sync_dir`).
pub fn sync_file(path: &Path) -> io::Result<()> {
    ops::sync_file(path)
}

/// Renames `from` over `to` and syncs `to`'s directory.
pub fn rename_durably(from: &Path, to: &Path) -> io::Result<()> {
    ops::rename_durably(from, to)
}

/// Removes the file `path`; not durable (`remove_durably` syncs its directory).
pub fn remove(path: &Path) -> io::Result<()> {
    ops::remove(path)
}

/// Removes the file `path` and syncs its directory.
pub fn remove_durably(path: &Path) -> io::Result<()> {
    ops::remove(path)?;
    match path.parent() {
        Some(dir) => ops::sync_dir(dir),
        None => Ok(()),
    }
}

/// Removes the directory `dir` and everything under it, and syncs its parent.
pub fn remove_dir_all(dir: &Path) -> io::Result<()> {
    disk::remove_dir_all(dir)?;
    match dir.parent() {
        Some(parent) => ops::sync_dir(parent),
        None => Ok(()),
    }
}

/// A second name `to` for the file `from` (a hard link), else, on another file system, a
/// copy of its bytes; not durable. Answers whether it linked. For staging a file that never
/// changes again (a sealed pack): a link costs nothing, and the store's own writes never
/// reach a file with two names (decision 0017).
pub fn hard_link_or_copy(from: &Path, to: &Path) -> io::Result<bool> {
    if ops::hard_link(from, to).is_ok() {
        return Ok(true);
    }
    const STEP_BYTES: usize = 1 << 20;
    let source = File::open(from)?;
    let len = source.metadata()?.len();
    let copy = WriteFile::create(to)?;
    let mut buffer = vec![0u8; STEP_BYTES.min(len as usize)];
    let mut offset = 0u64;
    while offset < len {
        let step = (len - offset).min(buffer.len() as u64) as usize;
        disk::read_exact_at(from, &source, &mut buffer[..step], offset)?;
        copy.write_at(&buffer[..step], offset)?;
        offset += step as u64;
    }
    Ok(false)
}

/// A file written through the file layer: positional writes or appends, then a sync.
#[derive(Debug)]
pub struct WriteFile {
    path: PathBuf,
    file: File,
}

impl WriteFile {
    /// Creates `path`, emptied if it exists; its name is not durable until its directory is
    /// synced.
    pub fn create(path: &Path) -> io::Result<WriteFile> {
        Self::open_as(path, Open::CreateOrEmpty)
    }

    /// Creates `path`, which must not exist (`AlreadyExists`).
    pub fn create_new(path: &Path) -> io::Result<WriteFile> {
        Self::open_as(path, Open::CreateNew)
    }

    /// Opens an existing file, as it is, to write more of it.
    pub fn open(path: &Path) -> io::Result<WriteFile> {
        Self::open_as(path, Open::Existing)
    }

    fn open_as(path: &Path, how: Open) -> io::Result<WriteFile> {
        let file = disk::open(path, how)?;
        Ok(WriteFile {
            path: path.to_path_buf(),
            file,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's length now (what the page cache holds).
    pub fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    pub fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Writes all of `bytes` at `offset`; not durable.
    pub fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        disk::write_at(&self.path, &self.file, bytes, offset)
    }

    /// Writes `bytes` at the file's end; not durable. Answers the offset they went to.
    pub fn append(&self, bytes: &[u8]) -> io::Result<u64> {
        let offset = self.len()?;
        self.write_at(bytes, offset)?;
        Ok(offset)
    }

    /// Sets the length; not durable.
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        disk::set_len(&self.path, &self.file, len)
    }

    /// fdatasync: the bytes written and the length are durable when it returns `Ok`. A
    /// failure is final: the kernel may have dropped the dirty pages, so a retry that
    /// succeeds proves nothing about them.
    pub fn sync_data(&self) -> io::Result<()> {
        disk::sync_data(&self.path, &self.file)
    }

    /// fsync: as `sync_data`, the file's metadata too.
    pub fn sync_all(&self) -> io::Result<()> {
        disk::sync_all(&self.path, &self.file)
    }
}
