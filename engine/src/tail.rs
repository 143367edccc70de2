//! How a scanned file ends: the verdict that recovery acts on and `verify` reports.

use crate::error::Corruption;

/// How a scanned file ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Every byte belongs to a valid record.
    Clean,
    /// Valid records end at `offset`; zeros follow to the end of the file: space the writer
    /// prepared ahead of itself (so that fdatasync need not allocate). Kept as it is.
    Preallocated { offset: u64 },
    /// An unfinished write at the end (a crash during an unacknowledged batch): everything
    /// from `offset` on is to be cut.
    Torn { offset: u64, reason: String },
    /// Damage that a crash cannot explain.
    Corrupt(Corruption),
}

impl Tail {
    pub fn valid_end(&self, file_len: u64) -> u64 {
        match self {
            Tail::Clean => file_len,
            Tail::Preallocated { offset } => *offset,
            Tail::Torn { offset, .. } => *offset,
            Tail::Corrupt(corruption) => corruption.offset,
        }
    }
}
