//! Reading `turns.log` record by record, for recovery and for `verify`. Never writes.
//!
//! Torn tail or damage? Records are 128 bytes and sector-aligned, so a crash leaves each one
//! either whole or zero (an extent the file system allocated but never got the data for). Hence:
//! - a partial record at the very end is a torn tail (a cut file);
//! - a zero record is where the log ends. Zeros up to the end of the file are space the
//!   sequencer prepared (kept). Valid records may still follow it, but only within one
//!   group-commit batch (`SEQUENCER_BATCH_RECORDS_LIMIT`): the rest of a batch whose pages
//!   reached the disk out of order. They were never acknowledged and are cut with it;
//! - a non-zero record that fails its checksum, or that sits in the wrong slot, is damage.

use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use crate::config::SEQUENCER_BATCH_RECORDS_LIMIT;
use crate::error::Corruption;
use crate::file::ScanFile;
use crate::format::is_all_zero;
use crate::format::turn_log::{LOG_RECORD_BYTES, LogRecord};
use crate::sequencer::log_base::{LogBase, slot_offset};
use crate::tail::Tail;

pub(crate) struct LogScan {
    /// The id of the last valid record before the tail verdict (0: none).
    pub records: u64,
    pub tail: Tail,
}

/// Visits every valid record in order: the base's (`turns.base`, the compacted prefix), then
/// `turns.log`'s after it. The visitor may reject a record (an invariant of the DAG does not
/// hold); that ends the scan with `Tail::Corrupt` at the record (in the base's file when it is
/// one of the base's: no repair cuts that).
pub(crate) fn scan_log(
    path: &Path,
    base: Option<&LogBase>,
    mut visit: impl FnMut(&LogRecord) -> Result<(), String>,
) -> io::Result<LogScan> {
    let mut first_slot = 0;
    if let Some(base) = base {
        if let Some(rejected) = scan_base(base, &mut visit)? {
            return Ok(rejected);
        }
        first_slot = base.through();
    }
    let file = ScanFile::open(path)?;
    let file_len = file.len()?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    reader.seek(SeekFrom::Start(first_slot * LOG_RECORD_BYTES as u64))?;
    let whole_records = file_len / LOG_RECORD_BYTES as u64;
    if whole_records < first_slot {
        // The base covers the whole log: nothing written after it yet.
        return Ok(LogScan {
            records: first_slot,
            tail: Tail::Clean,
        });
    }
    let mut bytes = [0u8; LOG_RECORD_BYTES];
    for slot in first_slot..whole_records {
        let record_id = slot + 1;
        let offset = slot * LOG_RECORD_BYTES as u64;
        reader.read_exact(&mut bytes)?;
        let corrupt = |reason: String| Tail::Corrupt(Corruption::new(path, offset, reason));
        match LogRecord::decode(&bytes) {
            Ok(Some(record)) if record.record_id() == record_id => {
                if let Err(reason) = visit(&record) {
                    return Ok(LogScan {
                        records: slot,
                        tail: corrupt(reason),
                    });
                }
            }
            Ok(Some(record)) => {
                let reason = format!("slot {record_id} holds record {}", record.record_id());
                return Ok(LogScan {
                    records: slot,
                    tail: corrupt(reason),
                });
            }
            Ok(None) => {
                let tail = classify_zero_record(path, slot, whole_records, &mut reader)?;
                return Ok(LogScan {
                    records: slot,
                    tail,
                });
            }
            Err(error) => {
                return Ok(LogScan {
                    records: slot,
                    tail: corrupt(error.to_string()),
                });
            }
        }
    }
    let end = whole_records * LOG_RECORD_BYTES as u64;
    // Only reached when every whole record was valid.
    let tail = if end == file_len {
        Tail::Clean
    } else {
        Tail::Torn {
            offset: end,
            reason: format!("partial record of {} bytes", file_len - end),
        }
    };
    Ok(LogScan {
        records: whole_records,
        tail,
    })
}

/// The log ends at zero record `zero_slot`. What follows may be the rest of a torn batch, or
/// zeros; anything else is damage.
/// Visits the base's records (`turns.base`, the compacted prefix); a scan ending there (a
/// record rejected or damaged, in the base's file) when the visit stops early.
fn scan_base(
    base: &LogBase,
    visit: &mut impl FnMut(&LogRecord) -> Result<(), String>,
) -> io::Result<Option<LogScan>> {
    let mut index = 0u64;
    let mut rejected: Option<Tail> = None;
    let mut last = 0u64;
    let visited = base.for_each_slot(
        |slot| {
            let offset = slot_offset(index);
            index += 1;
            let corrupt =
                |reason: String| Some(Tail::Corrupt(Corruption::new(base.path(), offset, reason)));
            match LogRecord::decode(slot) {
                Ok(Some(record)) => match visit(&record) {
                    Ok(()) => last = record.record_id(),
                    Err(reason) => rejected = corrupt(reason),
                },
                Ok(None) => rejected = corrupt("a zero slot".into()),
                Err(error) => rejected = corrupt(error.to_string()),
            }
            if rejected.is_some() {
                Err(None)
            } else {
                Ok(())
            }
        },
        |error| Some(error.to_string()),
    );
    if let Some(tail) = rejected {
        return Ok(Some(LogScan {
            records: last,
            tail,
        }));
    }
    if let Err(Some(error)) = visited {
        return Err(io::Error::other(error));
    }
    Ok(None)
}

fn classify_zero_record(
    path: &Path,
    zero_slot: u64,
    whole_records: u64,
    reader: &mut BufReader<ScanFile>,
) -> io::Result<Tail> {
    let offset = zero_slot * LOG_RECORD_BYTES as u64;
    let window_end = zero_slot + u64::from(SEQUENCER_BATCH_RECORDS_LIMIT);
    let mut bytes = [0u8; LOG_RECORD_BYTES];
    let mut only_zeros = true;
    for slot in zero_slot + 1..whole_records {
        reader.read_exact(&mut bytes)?;
        let at = slot * LOG_RECORD_BYTES as u64;
        match LogRecord::decode(&bytes) {
            Ok(None) => {}
            Ok(Some(_)) if slot < window_end => only_zeros = false,
            Ok(Some(record)) => {
                let reason = format!(
                    "record {} follows zero-filled record slot {} by more than one batch",
                    record.record_id(),
                    zero_slot + 1
                );
                return Ok(Tail::Corrupt(Corruption::new(path, at, reason)));
            }
            Err(error) => return Ok(Tail::Corrupt(Corruption::record(path, at, &error))),
        }
    }
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest)?;
    if only_zeros && is_all_zero(&rest) {
        return Ok(Tail::Preallocated { offset });
    }
    Ok(Tail::Torn {
        offset,
        reason: "valid records after a zero-filled one (unsynced batch)".into(),
    })
}
