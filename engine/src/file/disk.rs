//! The disk seam (decision 0026): every call by which the engine changes the disk — a
//! writable open or creation, a positional write, a length change, an allocation or hole
//! punch, an fdatasync/fsync (direct or through io_uring), a rename, hard link or removal, a
//! directory's creation or sync — and every read of the engine's files, each one function here.
//! The rest of the file layer (`actor.rs`, `background.rs`, `ops.rs`, `shared.rs`,
//! `read.rs`) calls these and never the operating system (`engine/tests/power_loss.rs`
//! checks it).
//!
//! Two backends, chosen at compile time: the operating system alone; or, with the
//! `simulated-disk` feature (tests only), the operating system observed by the simulated
//! disk (`file/sim.rs`), which refuses every call after a simulated power cut and remembers,
//! per file and directory, what the calls made durable, to write a crash image later. The
//! production build compiles the observer out: each function is the one system call it
//! wraps, inlined.

// The paths name the file for the simulated disk; the operating system's backend has the handle.
#![cfg_attr(not(feature = "simulated-disk"), allow(unused_variables))]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

#[cfg(feature = "simulated-disk")]
use super::sim;

/// How `open` opens a file for writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Open {
    /// An existing file, as it is.
    Existing,
    /// Created if absent, kept as it is if present.
    CreateOrKeep,
    /// Created if absent, emptied if present.
    CreateOrEmpty,
    /// Created; an existing file is an `AlreadyExists` error.
    CreateNew,
}

/// The bytes an unprivileged writer may still write to the file system holding `dir`
/// (`statvfs`: available blocks × fragment size). A question, not a change: the simulated
/// disk does not observe it.
#[inline]
pub(crate) fn available_bytes(dir: &Path) -> io::Result<u64> {
    let stats = rustix::fs::statvfs(dir)?;
    Ok(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// Opens `path` for writing (and reading), as `how` says.
#[inline]
pub(crate) fn open(path: &Path, how: Open) -> io::Result<File> {
    #[cfg(feature = "simulated-disk")]
    let existed = {
        sim::before(path)?;
        std::fs::symlink_metadata(path).is_ok()
    };
    let mut options = OpenOptions::new();
    options.read(true).write(true);
    match how {
        Open::Existing => {}
        Open::CreateOrKeep => {
            options.create(true).truncate(false);
        }
        Open::CreateOrEmpty => {
            options.create(true).truncate(true);
        }
        Open::CreateNew => {
            options.create_new(true);
        }
    }
    let file = options.open(path)?;
    #[cfg(feature = "simulated-disk")]
    sim::opened(path, &file, existed, how == Open::CreateOrEmpty)?;
    Ok(file)
}

/// Writes all of `bytes` at `offset` (into the page cache).
#[inline]
pub(crate) fn write_at(path: &Path, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    #[cfg(feature = "simulated-disk")]
    sim::before(path)?;
    let written = file.write_all_at(bytes, offset);
    // A write that failed part way may have changed the file: the simulated disk records it
    // whole, which is as adversarial as the kernel can be (it keeps or drops it at a cut).
    #[cfg(feature = "simulated-disk")]
    sim::wrote(path, file, bytes, offset)?;
    written
}

/// Sets the length (a cut, or a growth that reads as zeros), not yet durable.
#[inline]
pub(crate) fn set_len(path: &Path, file: &File, len: u64) -> io::Result<()> {
    #[cfg(feature = "simulated-disk")]
    sim::before(path)?;
    file.set_len(len)?;
    #[cfg(feature = "simulated-disk")]
    sim::set_len(path, file, len)?;
    Ok(())
}

/// `fdatasync`: every write and length change before it is durable when it returns `Ok`.
#[inline]
pub(crate) fn sync_data(path: &Path, file: &File) -> io::Result<()> {
    #[cfg(feature = "simulated-disk")]
    sim::before(path)?;
    file.sync_data()?;
    #[cfg(feature = "simulated-disk")]
    sim::synced(path, file)?;
    Ok(())
}

/// `fsync`: as `sync_data`, the file's metadata too (the simulated disk treats both alike:
/// neither makes the file's name durable, only its directory's sync does).
#[inline]
pub(crate) fn sync_all(path: &Path, file: &File) -> io::Result<()> {
    #[cfg(feature = "simulated-disk")]
    sim::before(path)?;
    file.sync_all()?;
    #[cfg(feature = "simulated-disk")]
    sim::synced(path, file)?;
    Ok(())
}

/// The io_uring handle on a file `open` opened: its syncs go through `sync_ring`.
pub(crate) async fn open_ring(path: &Path) -> io::Result<compio::fs::File> {
    compio::fs::OpenOptions::new().write(true).open(path).await
}

/// `fdatasync` (or `fsync` with `all`) through io_uring, for an actor sharing its thread:
/// the same durability point as `sync_data`, so the simulated disk sees the same sequence of
/// operations whichever way the actor waits. `file` is the same file's direct handle.
pub(crate) async fn sync_ring(
    path: &Path,
    file: &File,
    ring: &compio::fs::File,
    all: bool,
) -> io::Result<()> {
    #[cfg(feature = "simulated-disk")]
    sim::before(path)?;
    if all {
        ring.sync_all().await?;
    } else {
        ring.sync_data().await?;
    }
    #[cfg(feature = "simulated-disk")]
    sim::synced(path, file)?;
    Ok(())
}

/// Allocates `len` bytes from `offset` (`fallocate`; the file grows, reading as zeros).
#[inline]
pub(crate) fn allocate(path: &Path, file: &File, offset: u64, len: u64) -> io::Result<()> {
    use rustix::fs::{FallocateFlags, fallocate};
    #[cfg(feature = "simulated-disk")]
    sim::before(path)?;
    fallocate(file, FallocateFlags::empty(), offset, len)?;
    #[cfg(feature = "simulated-disk")]
    sim::zeroed(path, file, offset, len, true)?;
    Ok(())
}

/// Punches a hole over `len` bytes from `offset`: they read as zeros, the length stays.
#[inline]
pub(crate) fn punch_hole(path: &Path, file: &File, offset: u64, len: u64) -> io::Result<()> {
    use rustix::fs::{FallocateFlags, fallocate};
    #[cfg(feature = "simulated-disk")]
    sim::before(path)?;
    fallocate(
        file,
        FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
        offset,
        len,
    )?;
    #[cfg(feature = "simulated-disk")]
    sim::zeroed(path, file, offset, len, false)?;
    Ok(())
}

/// Renames `from` over `to`, not yet durable (the directory's sync makes it so).
#[inline]
pub(crate) fn rename(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(feature = "simulated-disk")]
    sim::before(from)?;
    std::fs::rename(from, to)?;
    #[cfg(feature = "simulated-disk")]
    sim::renamed(from, to)?;
    Ok(())
}

/// A second name `to` for `from`'s inode, not yet durable.
#[inline]
pub(crate) fn hard_link(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(feature = "simulated-disk")]
    sim::before(to)?;
    std::fs::hard_link(from, to)?;
    #[cfg(feature = "simulated-disk")]
    sim::linked(to)?;
    Ok(())
}

/// Removes the name `path`, not yet durable.
#[inline]
pub(crate) fn remove(path: &Path) -> io::Result<()> {
    #[cfg(feature = "simulated-disk")]
    sim::before(path)?;
    std::fs::remove_file(path)?;
    #[cfg(feature = "simulated-disk")]
    sim::removed(path)?;
    Ok(())
}

/// Removes the directory `dir` and everything under it, not yet durable.
#[inline]
pub(crate) fn remove_dir_all(dir: &Path) -> io::Result<()> {
    #[cfg(feature = "simulated-disk")]
    sim::before(dir)?;
    std::fs::remove_dir_all(dir)?;
    #[cfg(feature = "simulated-disk")]
    sim::removed(dir)?;
    Ok(())
}

/// Creates `dir` and its missing parents, not yet durable.
pub(crate) fn create_dir_all(dir: &Path) -> io::Result<()> {
    #[cfg(feature = "simulated-disk")]
    {
        sim::before(dir)?;
        // One directory at a time, so that the simulated disk sees each creation.
        let mut missing = Vec::new();
        let mut at = Some(dir);
        while let Some(path) = at.filter(|path| std::fs::symlink_metadata(path).is_err()) {
            missing.push(path);
            at = path.parent();
        }
        for path in missing.into_iter().rev() {
            match std::fs::create_dir(path) {
                Ok(()) => sim::linked(path)?,
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }
    #[cfg(not(feature = "simulated-disk"))]
    std::fs::create_dir_all(dir)
}

/// Makes the creations, removals and renames of entries in `dir` durable.
#[inline]
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(feature = "simulated-disk")]
    sim::before(dir)?;
    File::open(dir)?.sync_all()?;
    #[cfg(feature = "simulated-disk")]
    sim::dir_synced(dir)?;
    Ok(())
}

/// Reads into `target` from `offset` (a scan's read: as many bytes as the system gives, 0 at
/// the end of the file).
#[inline]
pub(crate) fn read_at(
    path: &Path,
    file: &File,
    target: &mut [u8],
    offset: u64,
) -> io::Result<usize> {
    #[cfg(feature = "simulated-disk")]
    sim::read(path, file, offset, target.len() as u64)?;
    file.read_at(target, offset)
}

/// Fills `target` from `offset` of a published file (a reader's read).
#[inline]
pub(crate) fn read_exact_at(
    path: &Path,
    file: &File,
    target: &mut [u8],
    offset: u64,
) -> io::Result<()> {
    #[cfg(feature = "simulated-disk")]
    sim::read(path, file, offset, target.len() as u64)?;
    file.read_exact_at(target, offset)
}
