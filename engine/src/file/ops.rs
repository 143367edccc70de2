//! The store's file-system operations outside a file's records: creating, renaming and
//! removing entries durably (the directory synced), the cuts recovery makes at open, the
//! disk reserve's allocation, the directory lock. Each is one function here, so that the
//! engine's every change to the disk passes the file layer.

use std::fs::File;
use std::io;
use std::path::Path;

use super::disk::{self, Open};

/// Makes the creation, removal or renaming of entries in `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    disk::sync_dir(dir)
}

/// Makes an existing file's data and length durable (one written by another handle).
pub fn sync_file(path: &Path) -> io::Result<()> {
    let file = disk::open(path, Open::Existing)?;
    disk::sync_all(path, &file)
}

/// Creates `dir` and its missing parents, durably: each new directory's entry is synced in
/// its parent. Without that a power cut may undo the creation of a new store's directory
/// (or a backup's) after its files were synced, and everything acknowledged in it with it
/// (the power-loss campaign's first finding, docs/reliability.md). An existing `dir` costs
/// one `stat`.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    let mut created = Vec::new();
    let mut at = Some(dir);
    while let Some(path) = at.filter(|path| std::fs::symlink_metadata(path).is_err()) {
        created.push(path);
        at = path.parent();
    }
    disk::create_dir_all(dir)?;
    for path in created.into_iter().rev() {
        if let Some(parent) = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
        {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

/// Creates an empty file and makes it durable (the caller syncs the directory). An existing
/// empty file is accepted, so that a step interrupted by a crash or an error can be redone;
/// an existing file with data is an `AlreadyExists` error.
pub fn create_durable(path: &Path) -> io::Result<()> {
    let file = disk::open(path, Open::CreateOrKeep)?;
    if file.metadata()?.len() != 0 {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} already exists and is not empty", path.display()),
        ));
    }
    disk::sync_all(path, &file)
}

/// Writes `bytes` as the whole of `path` (created or emptied) and makes it durable (the
/// caller renames it into place: `rename_durably`).
pub fn write_durable(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let file = disk::open(path, Open::CreateOrEmpty)?;
    disk::write_at(path, &file, bytes, 0)?;
    disk::sync_all(path, &file)
}

/// Renames `from` over `to`, not yet durable: the caller syncs the directory (a compaction's
/// switch-over, made durable by the collector under its marker).
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    disk::rename(from, to)
}

/// Renames `from` over `to` and syncs the directory: after a crash, the old `to` or the new.
pub fn rename_durably(from: &Path, to: &Path) -> io::Result<()> {
    disk::rename(from, to)?;
    sync_dir(to.parent().unwrap_or(Path::new(".")))
}

/// Removes a file (the caller syncs the directory when the removal must be durable).
pub fn remove(path: &Path) -> io::Result<()> {
    disk::remove(path)
}

/// A second name for `from`'s blocks (a backup's sealed packs, which never change again).
pub fn hard_link(from: &Path, to: &Path) -> io::Result<()> {
    disk::hard_link(from, to)
}

/// Cuts `path` to `len` bytes, durably: a torn tail or a recovery's cut at open. The caller
/// made a shared file private first (decision 0017).
pub fn cut_durably(path: &Path, len: u64) -> io::Result<()> {
    let file = disk::open(path, Open::Existing)?;
    disk::set_len(path, &file, len)?;
    disk::sync_all(path, &file)
}

/// Cuts `path` at `offset` and writes `bytes` there, durably (an index's tail rebuilt).
pub fn rewrite_tail(path: &Path, offset: u64, bytes: &[u8]) -> io::Result<()> {
    let file = disk::open(path, Open::Existing)?;
    disk::set_len(path, &file, offset)?;
    disk::write_at(path, &file, bytes, offset)?;
    disk::sync_all(path, &file)
}

/// Appends `bytes` to `path`, not yet durable (the caller syncs it). Answers its new length.
pub fn append(path: &Path, bytes: &[u8]) -> io::Result<u64> {
    let file = disk::open(path, Open::Existing)?;
    let offset = file.metadata()?.len();
    disk::write_at(path, &file, bytes, offset)?;
    Ok(offset + bytes.len() as u64)
}

/// A new file of `bytes` allocated (not just sized) bytes, synced with its directory: the disk
/// reserve (`reserve.rs`).
pub fn allocate_durably(path: &Path, bytes: u64) -> io::Result<()> {
    let file = disk::open(path, Open::CreateOrEmpty)?;
    match disk::allocate(path, &file, 0, bytes) {
        Ok(()) => {}
        // A file system without fallocate: zeros written are as good (and as costly).
        Err(error) if error.raw_os_error() == Some(rustix::io::Errno::OPNOTSUPP.raw_os_error()) => {
            let zeros = vec![0u8; 1 << 20];
            let mut offset = 0;
            while offset < bytes {
                let step = (bytes - offset).min(zeros.len() as u64);
                disk::write_at(path, &file, &zeros[..step as usize], offset)?;
                offset += step;
            }
        }
        Err(error) => return Err(error),
    }
    disk::sync_all(path, &file)?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// The directory lock's file, created if absent, opened for `try_lock` (it holds no data).
pub fn open_lock(path: &Path) -> io::Result<File> {
    disk::open(path, Open::CreateOrKeep)
}
