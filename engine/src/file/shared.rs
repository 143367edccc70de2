//! Files a store shares with another name (decision 0017): a backup on the same file system
//! hard-links sealed packs, and an operator may `cp -al` a store. No store changes a byte
//! another name reads: `make_private` gives a file written in place its own inode (at open),
//! `release_replaced` frees a replaced pack's blocks only when no name holds it,
//! `punch_prefix` punches only a file with one name.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::disk::{self, Open};

/// Gives the disk blocks of the bytes `0..len` of the file at `path` back to the file system
/// (a hole reads as zeros; the file's length stays). `Ok(false)` when the file system cannot
/// punch holes, or another name shares the file (the bytes then stay allocated: a loss of
/// space, not of data).
pub(crate) fn punch_prefix(path: &Path, len: u64) -> io::Result<bool> {
    if len == 0 {
        return Ok(true);
    }
    let file = &disk::open(path, Open::Existing)?;
    // A shared inode's bytes are another name's data too (decision 0017). The store made its
    // files private at open; a link made since (by hand, while it runs) keeps its bytes.
    if link_count(file)? > 1 {
        return Ok(false);
    }
    match disk::punch_hole(path, file, 0, len) {
        Ok(()) => Ok(true),
        Err(error) if error.raw_os_error() == Some(rustix::io::Errno::OPNOTSUPP.raw_os_error()) => {
            Ok(false)
        }
        Err(error) => Err(error),
    }
}

/// Names (hard links) the inode of `file` has: 0 once its last name is gone (a replaced file
/// still held open), more than 1 while another name shares it — a backup on the same file
/// system hard-links sealed packs (`engine/backup.rs`), and an operator may `cp -al` a store.
fn link_count(file: &File) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(file.metadata()?.nlink())
}

/// Suffix of `make_private`'s copy before its rename.
const PRIVATE_SUFFIX: &str = ".private";

/// Bytes `make_private` copies per read and write.
const COPY_STEP_BYTES: u64 = 1 << 20;

/// Gives `path` an inode of its own when another name shares it: its bytes are copied under a
/// temporary name (same permissions, fsynced), renamed over `path`, and the directory synced.
/// Answers whether a copy was made. Every file a store writes, cuts or punches in place goes
/// through this before the first such change (at open, and before a repair cuts a pack), so
/// that no store ever changes a byte another store or backup reads (decision 0017). A crash
/// mid-copy leaves only the temporary file, which the next call replaces.
pub(crate) fn make_private(path: &Path) -> io::Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    let source = File::open(path)?;
    if link_count(&source)? <= 1 {
        return Ok(false);
    }
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(PRIVATE_SUFFIX);
    let temporary = path.with_file_name(name);
    let mode = source.metadata()?.permissions().mode();
    let copy = disk::open(&temporary, Open::CreateOrEmpty)?;
    // Setting a new file's permissions changes no data: not a call the disk seam models.
    copy.set_permissions(std::fs::Permissions::from_mode(mode))?;
    let expected = source.metadata()?.len();
    let mut buffer = vec![0u8; COPY_STEP_BYTES.min(expected) as usize];
    let mut copied = 0u64;
    while copied < expected {
        let step = (expected - copied).min(buffer.len() as u64) as usize;
        disk::read_exact_at(path, &source, &mut buffer[..step], copied)?;
        disk::write_at(&temporary, &copy, &buffer[..step], copied)?;
        copied += step as u64;
    }
    disk::sync_all(&temporary, &copy)?;
    drop(copy);
    disk::rename(&temporary, path)?;
    if let Some(dir) = path.parent() {
        disk::sync_dir(dir)?;
    }
    tracing::info!(
        file = %path.display(),
        bytes = copied,
        "the file had another name (a hard link: a backup or a copy of the store); \
         it was copied so that this store's writes never reach the other"
    );
    Ok(true)
}

/// A file about to be replaced (a pack a compaction rewrites): a handle held past the rename
/// so that `release_replaced` frees its blocks gradually, and the name it had.
#[derive(Debug)]
pub(crate) struct Replaced {
    path: PathBuf,
    file: File,
}

/// Opens the file at `path`, about to be replaced (see `Replaced`).
pub(crate) fn open_replaced(path: &Path) -> io::Result<Replaced> {
    let file = disk::open(path, Open::Existing)?;
    Ok(Replaced {
        path: path.to_path_buf(),
        file,
    })
}

/// What `release_replaced` did with a replaced file's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// Every block given back, a step at a time.
    Freed,
    /// Another name still holds the inode (a backup's hard link): its bytes are that name's
    /// data, so the file was only closed.
    Shared,
    /// A step failed; the last close frees the rest.
    Failed,
}

/// Gives back the blocks of a file whose name was replaced (a compaction renamed the new
/// version over it), `step_bytes` at a time with `pace(step_bytes)` after each step. Freeing
/// a large file in one go stalls the file system's journal, and every append's fdatasync
/// with it (benches/results/HISTORY.md), so the shrinking is gradual; a reader still holding the
/// file reads short and retries at the record's new location. Only a file no name holds any
/// more is shrunk: with another name, the bytes belong to it (decision 0017).
pub(crate) fn release_replaced(
    replaced: Replaced,
    step_bytes: u64,
    mut pace: impl FnMut(u64),
) -> Released {
    assert!(step_bytes > 0);
    let Replaced { path, file } = replaced;
    match link_count(&file) {
        Ok(0) => {}
        Ok(_) => return Released::Shared,
        Err(_) => return Released::Failed,
    }
    let Ok(mut len) = file.metadata().map(|meta| meta.len()) else {
        return Released::Failed;
    };
    while len > 0 {
        len = len.saturating_sub(step_bytes);
        if disk::set_len(&path, &file, len).is_err() {
            return Released::Failed;
        }
        pace(step_bytes);
    }
    Released::Freed
}
