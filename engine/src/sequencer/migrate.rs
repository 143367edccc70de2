//! Store format 1 → 2, once, at open: `turns.log` is written anew with every turn record at
//! version 2 — its skip pointer (`skip.rs`) and its context's previous turn filled in — then
//! swapped in by rename; the meta file says format 2 last.
//!
//! Runs after recovery (the log is whole: torn tail cut, damage refused) and before anything
//! reads the log. Crash-safe by construction: the new log is complete and durable before the
//! rename (atomic), and a crash before the meta file says 2 runs the migration again, which
//! copies version-2 records as they are (idempotent). Memory: 24 bytes per record while it
//! runs (the ancestry table skip pointers are computed from), nothing after.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::OpenError;
use crate::file::{BackgroundWriter, Throttle, ops};
use crate::format::turn_log::{LOG_RECORD_BYTES, LogRecord, TurnRecord};
use crate::ids::TurnId;
use crate::skip::Ancestry;

/// The new log is synced every this many bytes while it is written (a store being opened
/// serves nothing yet, so this only bounds the page cache's backlog).
const SYNC_STEP_BYTES: u64 = 8 << 20;

/// The temporary file the new log is written to.
pub(crate) fn migrating_path(log: &Path) -> PathBuf {
    log.with_extension("log.migrating")
}

/// Rewrites the first `records` records of `log` at version 2; the file keeps its length
/// (prepared zeros after the records stay). Returns the turn records rewritten.
pub(crate) fn migrate_turn_log(log: &Path, records: u64) -> Result<u64, OpenError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| OpenError::io(path, source)
    };
    let temporary = migrating_path(log);
    // A migration interrupted before its rename left this; it is redone from the start.
    let _ = ops::remove(&temporary);
    let source = File::open(log).map_err(io(log))?;
    let file_len = source.metadata().map_err(io(log))?.len();
    assert!(records * LOG_RECORD_BYTES as u64 <= file_len);
    let mut reader = BufReader::with_capacity(1 << 20, source);
    // Unthrottled: nothing else uses the disk before the store is open.
    let mut throttle = Throttle::new(0);
    let mut writer = BackgroundWriter::create_new(&temporary, SYNC_STEP_BYTES, &mut throttle)
        .map_err(io(&temporary))?;

    let mut ancestry = Ancestry::default();
    // The newest turn of each context so far (ContextIDs are dense from 1).
    let mut last_turn: Vec<TurnId> = vec![TurnId::NONE];
    let mut rewritten = 0u64;
    let mut slot = [0u8; LOG_RECORD_BYTES];
    for record_id in 1..=records {
        reader.read_exact(&mut slot).map_err(io(log))?;
        let record = LogRecord::decode(&slot).ok().flatten();
        // Recovery replayed these records: each is valid and in its slot.
        assert_eq!(record.map(|record| record.record_id()), Some(record_id));
        match record {
            Some(LogRecord::Context(context)) => {
                assert_eq!(context.context_id.0, last_turn.len() as u64);
                last_turn.push(TurnId::NONE);
            }
            Some(LogRecord::Turn(mut turn)) => {
                let context = turn.context_id.0 as usize;
                let migrated = TurnRecord {
                    skip_turn_id: ancestry.skip_of(&turn),
                    context_prev_turn_id: last_turn[context],
                    ..turn
                };
                if turn.is_legacy() || (turn.depth == 0 && migrated != turn) {
                    turn = migrated;
                    LogRecord::Turn(turn).encode(&mut slot);
                    rewritten += 1;
                }
                // A version-2 record (a migration run before) already says the same.
                assert_eq!(turn, migrated, "record {record_id}");
                last_turn[context] = turn.turn_id;
                ancestry.push(&turn);
            }
            _ => {}
        }
        writer.write(&slot).map_err(io(&temporary))?;
    }
    // The prepared zeros after the records keep their place (a hole reads as zeros).
    writer.skip_to(file_len).map_err(io(&temporary))?;
    writer.finish_renamed(log).map_err(io(&temporary))?;
    Ok(rewritten)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_temporary_file_sits_beside_the_log() {
        assert_eq!(
            migrating_path(Path::new("/data/turns.log")),
            Path::new("/data/turns.log.migrating")
        );
    }
}
