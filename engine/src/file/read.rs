//! A reader's positional read handle on a published file (`ReadFile`), from any thread,
//! without a lock; its test-only fault hook.

use std::fs::File;
use std::io;
use std::path::PathBuf;

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
        #[cfg(test)]
        if let Some(crate::faults::Fault::Fail(errno)) =
            crate::faults::check(&self.path, crate::faults::FaultOp::Read)
        {
            return Err(EngineError::io(&self.path, crate::faults::error(errno)));
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
