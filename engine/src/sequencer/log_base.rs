//! `turns.base` at run time (issue 15, decision 0011): the compacted prefix of `turns.log`,
//! records `1..=through_record_id` minus those the garbage collector dropped (collected turns
//! no live history needs). A record id at or below `through_record_id` is looked up here, in
//! O(log n): a binary search over the first record id of every page of `PAGE_RECORDS` slots
//! (kept in memory, 8 bytes per 4 KiB of base), then one `pread` of that page. Records above
//! it are in `turns.log` at their usual offset.
//!
//! The file is written whole by `log_compaction.rs` (a `.compact` file, synced, renamed) and
//! never changed afterwards: a newer base replaces it, and readers holding this one keep their
//! file descriptor, so a read in flight completes.

use std::io::{self, BufReader, Read};
use std::path::Path;

use crate::error::{Corruption, EngineError, OpenError};
use crate::file::ReadFile;
use crate::format::log_base::{BASE_HEADER_BYTES, BaseHeader};
use crate::format::turn_log::{LOG_RECORD_BYTES, LogRecord};

/// Slots per page of the in-memory index: 4 KiB of base per index entry.
const PAGE_RECORDS: usize = 32;

#[derive(Debug)]
pub(crate) struct LogBase {
    file: ReadFile,
    pub header: BaseHeader,
    /// The record id of the first slot of every page, ascending.
    page_first: Vec<u64>,
}

impl LogBase {
    /// Reads and checks the base at `path` (every slot decodes and sits in ascending order
    /// within `1..=through_record_id`, the header's count matches the file): `None` when the
    /// store has none. Damage refuses the open: the file was complete and synced before it
    /// was renamed into place.
    pub fn load(path: &Path) -> Result<Option<LogBase>, OpenError> {
        let io = |source| OpenError::io(path, source);
        let file = match crate::file::ScanFile::open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(io(source)),
        };
        let file_len = file.len().map_err(io)?;
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let corrupt =
            |offset: u64, reason: String| OpenError::Corrupt(Corruption::new(path, offset, reason));
        let mut header_bytes = [0u8; BASE_HEADER_BYTES];
        reader
            .read_exact(&mut header_bytes)
            .map_err(|error| corrupt(0, format!("the header cannot be read ({error})")))?;
        let header =
            BaseHeader::decode(&header_bytes).map_err(|error| corrupt(0, error.to_string()))?;
        if header.file_bytes() != file_len {
            return Err(corrupt(
                0,
                format!(
                    "the header says {} records ({} bytes), the file has {file_len} bytes",
                    header.record_count,
                    header.file_bytes()
                ),
            ));
        }
        let mut page_first =
            Vec::with_capacity((header.record_count as usize).div_ceil(PAGE_RECORDS));
        let mut previous = 0u64;
        let mut slot = [0u8; LOG_RECORD_BYTES];
        for index in 0..header.record_count {
            let offset = slot_offset(index);
            reader.read_exact(&mut slot).map_err(io)?;
            let record_id = match LogRecord::decode(&slot) {
                Ok(Some(record)) => record.record_id(),
                Ok(None) => return Err(corrupt(offset, "a zero slot".into())),
                Err(error) => return Err(corrupt(offset, error.to_string())),
            };
            if record_id <= previous || record_id > header.through_record_id {
                return Err(corrupt(
                    offset,
                    format!(
                        "record {record_id} after record {previous} in a base through {}",
                        header.through_record_id
                    ),
                ));
            }
            if (index as usize).is_multiple_of(PAGE_RECORDS) {
                page_first.push(record_id);
            }
            previous = record_id;
        }
        let file = ReadFile::open(path.to_path_buf()).map_err(io)?;
        Ok(Some(LogBase {
            file,
            header,
            page_first,
        }))
    }

    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// The base stands for `turns.log` slots `1..=through()`.
    pub fn through(&self) -> u64 {
        self.header.through_record_id
    }

    pub fn covers(&self, record_id: u64) -> bool {
        record_id >= 1 && record_id <= self.through()
    }

    /// The slot of a covered record id and its offset in the file, `None` when compaction
    /// dropped it.
    pub fn slot(
        &self,
        record_id: u64,
    ) -> Result<Option<(u64, [u8; LOG_RECORD_BYTES])>, EngineError> {
        assert!(self.covers(record_id), "looked up outside the base");
        let page = self.page_first.partition_point(|&first| first <= record_id);
        if page == 0 {
            return Ok(None);
        }
        let page = page - 1;
        let first_index = page * PAGE_RECORDS;
        let count = (self.header.record_count as usize - first_index).min(PAGE_RECORDS);
        let mut bytes = [0u8; PAGE_RECORDS * LOG_RECORD_BYTES];
        let bytes = &mut bytes[..count * LOG_RECORD_BYTES];
        self.file
            .read_exact_at(bytes, slot_offset(first_index as u64))?;
        let slots: Vec<&[u8]> = bytes.chunks_exact(LOG_RECORD_BYTES).collect();
        let found = slots.binary_search_by_key(&record_id, |slot| slot_record_id(slot));
        Ok(found.ok().map(|at| {
            let mut slot = [0u8; LOG_RECORD_BYTES];
            slot.copy_from_slice(slots[at]);
            (slot_offset((first_index + at) as u64), slot)
        }))
    }

    /// A covered record, checked (its checksum, its id); `None` when compaction dropped it.
    pub fn record(&self, record_id: u64) -> Result<Option<LogRecord>, EngineError> {
        let Some((offset, slot)) = self.slot(record_id)? else {
            return Ok(None);
        };
        match LogRecord::decode(&slot) {
            Ok(Some(record)) if record.record_id() == record_id => Ok(Some(record)),
            Ok(_) => Err(EngineError::Corrupt(Corruption::new(
                &self.file.path,
                offset,
                format!("the slot found for record {record_id} does not decode to it"),
            ))),
            Err(error) => Err(EngineError::Corrupt(Corruption::new(
                &self.file.path,
                offset,
                format!("record {record_id}: {error}"),
            ))),
        }
    }

    /// Every slot in order, read sequentially (1 MiB at a time).
    pub fn for_each_slot<E>(
        &self,
        mut visit: impl FnMut(&[u8; LOG_RECORD_BYTES]) -> Result<(), E>,
        io_error: impl Fn(EngineError) -> E,
    ) -> Result<(), E> {
        read_slots(
            &self.file,
            slot_offset(0),
            self.header.record_count,
            |_, slot| visit(slot),
            io_error,
        )
    }
}

/// Visits `count` consecutive 128-byte slots of `file` from byte `offset` with their index
/// (from 0), read 1 MiB at a time: the one sequential slot reader of the base and the log.
pub(crate) fn read_slots<E>(
    file: &ReadFile,
    offset: u64,
    count: u64,
    mut visit: impl FnMut(u64, &[u8; LOG_RECORD_BYTES]) -> Result<(), E>,
    io_error: impl Fn(EngineError) -> E,
) -> Result<(), E> {
    const STEP_RECORDS: u64 = 8192;
    let mut buffer = vec![0u8; STEP_RECORDS.min(count) as usize * LOG_RECORD_BYTES];
    let mut index = 0u64;
    while index < count {
        let step = (count - index).min(STEP_RECORDS);
        let bytes = &mut buffer[..step as usize * LOG_RECORD_BYTES];
        file.read_exact_at(bytes, offset + index * LOG_RECORD_BYTES as u64)
            .map_err(&io_error)?;
        for slot in bytes.chunks_exact(LOG_RECORD_BYTES) {
            let mut encoded = [0u8; LOG_RECORD_BYTES];
            encoded.copy_from_slice(slot);
            visit(index, &encoded)?;
            index += 1;
        }
    }
    Ok(())
}

/// Byte offset of the `index`-th slot after the header.
pub(crate) fn slot_offset(index: u64) -> u64 {
    BASE_HEADER_BYTES as u64 + index * LOG_RECORD_BYTES as u64
}

/// The record id a slot carries (its first 8 bytes), without decoding the rest.
pub(crate) fn slot_record_id(slot: &[u8]) -> u64 {
    ctxstore_vocab::le::u64_at(slot, 0)
}
