//! A reader's positional read handle on a published file (`ReadFile`), from any thread,
//! without a lock; its test-only fault hook. And every other read of the engine's files
//! (`ScanFile`, `read_whole`): recovery's scans, `verify`, the meta file, a collection's and a
//! backup's copies. All go through the seam (`disk::read_at`), so that a sector the
//! simulated disk fails reads as EIO there too, and each failed read names its offset (the
//! caller's error names the file).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::disk;

use crate::error::EngineError;

/// A reader's handle on a published file: positional reads from any thread, no lock.
#[derive(Debug)]
pub(crate) struct ReadFile {
    pub path: PathBuf,
    file: File,
}

impl ReadFile {
    pub fn open(path: PathBuf) -> io::Result<ReadFile> {
        let file = File::open(&path)?;
        Ok(ReadFile { path, file })
    }

    /// Fills `target` from `offset`, with an engine error naming the file and the offset (a
    /// sector that no longer reads is found by both; the error's kind stays the system's).
    pub fn read_exact_at(&self, target: &mut [u8], offset: u64) -> Result<(), EngineError> {
        // A test's failing or slow disk.
        #[cfg(any(test, feature = "fault-injection"))]
        match crate::faults::check(&self.path, crate::faults::FaultOp::Read) {
            Some(crate::faults::Fault::Fail(errno)) => {
                return Err(EngineError::io(&self.path, crate::faults::error(errno)));
            }
            other => crate::faults::delay(other),
        }
        let len = target.len();
        disk::read_exact_at(&self.path, &self.file, target, offset).map_err(|source| {
            let located = io::Error::new(
                source.kind(),
                format!("reading {len} bytes at offset {offset}: {source}"),
            );
            EngineError::io(&self.path, located)
        })
    }
}

/// `error` of a read of `len` bytes at `offset`, its kind kept, naming where it read.
fn located(error: io::Error, len: usize, offset: u64) -> io::Error {
    io::Error::new(
        error.kind(),
        format!("reading {len} bytes at offset {offset}: {error}"),
    )
}

/// A scan's or a copy's read handle on one file: sequential (`Read`, `Seek`, under a
/// `BufReader`) or positional, every read through the seam. A failed read's error names its
/// offset; the caller's names the file.
#[derive(Debug)]
pub(crate) struct ScanFile {
    path: PathBuf,
    file: File,
    position: u64,
}

impl ScanFile {
    pub fn open(path: &Path) -> io::Result<ScanFile> {
        Ok(ScanFile {
            path: path.to_path_buf(),
            file: File::open(path)?,
            position: 0,
        })
    }

    pub fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    /// Fills `target` from `offset` (an early end of file is `UnexpectedEof`).
    pub fn read_exact_at(&self, target: &mut [u8], offset: u64) -> io::Result<()> {
        disk::read_exact_at(&self.path, &self.file, target, offset)
            .map_err(|error| located(error, target.len(), offset))
    }
}

impl io::Read for ScanFile {
    fn read(&mut self, target: &mut [u8]) -> io::Result<usize> {
        let offset = self.position;
        let read = disk::read_at(&self.path, &self.file, target, offset)
            .map_err(|error| located(error, target.len(), offset))?;
        self.position += read as u64;
        Ok(read)
    }
}

impl io::Seek for ScanFile {
    fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
        let position = match to {
            io::SeekFrom::Start(offset) => Some(offset),
            io::SeekFrom::Current(delta) => self.position.checked_add_signed(delta),
            io::SeekFrom::End(delta) => self.len()?.checked_add_signed(delta),
        };
        let Some(position) = position else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("seeking {} before its start", self.path.display()),
            ));
        };
        self.position = position;
        Ok(position)
    }
}

/// The whole file at `path` (a small one: the meta file, a blob index), read through the seam.
pub(crate) fn read_whole(path: &Path) -> io::Result<Vec<u8>> {
    use io::Read;
    let mut file = ScanFile::open(path)?;
    let mut bytes = Vec::with_capacity(usize::try_from(file.len()?).unwrap_or(0));
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}
