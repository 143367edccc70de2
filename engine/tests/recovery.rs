//! Recovery: every file type cut at every record boundary and inside records, zero-filled
//! tails, flipped bytes in the middle. Torn tails are cut and the store keeps working;
//! damage is refused with the file and offset named, and `repair` gets past it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use common::*;
use ctxstore_engine::format::blob_index::{INDEX_ENTRY_BYTES, IndexEntry};
use ctxstore_engine::format::turn_log::{LOG_RECORD_BYTES, LogRecord};
use ctxstore_engine::{
    AppendPayload, AppendRequest, BlobHash, ContextId, Engine, EngineConfig, OpenError, TurnId,
    verify,
};

const RECORD: u64 = LOG_RECORD_BYTES as u64;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn cut(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x40;
    std::fs::write(path, bytes).unwrap();
}

/// Valid records at the start of `turns.log`; asserts that only zeros (prepared space) follow.
fn log_records(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    let records = bytes
        .chunks_exact(LOG_RECORD_BYTES)
        .take_while(|chunk| matches!(LogRecord::decode((*chunk).try_into().unwrap()), Ok(Some(_))))
        .count();
    let rest = &bytes[records * LOG_RECORD_BYTES..];
    assert!(
        rest.iter().all(|&byte| byte == 0),
        "only zeros follow the records"
    );
    records as u64
}

/// Store configuration of these tests: one shard, small steps of prepared space.
fn single_shard(dir: &Path) -> EngineConfig {
    let mut config = EngineConfig::new(dir).with_shards(1);
    config.limits.blob_bytes_max = 64 * 1024;
    config.limits.shard_batch_bytes_max = 256 * 1024;
    config.limits.pack_bytes_max = 1 << 20;
    config.limits.log_preallocate_bytes = 16 * 1024;
    config
}

/// What one record of `turns.log` did, to predict the state after a cut.
#[derive(Clone, Debug)]
enum Written {
    Context {
        base: TurnId,
    },
    Turn {
        context: ContextId,
        turn_id: TurnId,
        payload: Vec<u8>,
    },
}

/// Three contexts (one a fork), a dozen turns, some payloads repeated.
fn build_log_store(dir: &Path) -> Vec<Written> {
    let engine = Engine::open(single_shard(dir)).unwrap();
    let mut written = Vec::new();
    let a = block_on(engine.create_context()).unwrap().context_id;
    written.push(Written::Context { base: TurnId::NONE });
    let b = block_on(engine.create_context()).unwrap().context_id;
    written.push(Written::Context { base: TurnId::NONE });
    for index in 0..10u64 {
        let context = if index % 3 == 0 { b } else { a };
        let payload = chat_payload(index % 7, 500 + index as usize * 100);
        let turn = append(&engine, context, &payload, None).unwrap().turn;
        written.push(Written::Turn {
            context,
            turn_id: turn.turn_id,
            payload,
        });
        if index == 4 {
            let fork = block_on(engine.fork(turn.turn_id)).unwrap();
            assert_eq!(fork.context_id, ContextId(3));
            written.push(Written::Context { base: turn.turn_id });
        }
    }
    let payload = b"on the fork".to_vec();
    let turn = append(&engine, ContextId(3), &payload, None).unwrap().turn;
    written.push(Written::Turn {
        context: ContextId(3),
        turn_id: turn.turn_id,
        payload,
    });
    engine.shutdown();
    written
}

/// Heads and turns after replaying the first `records` records.
fn expected_state(written: &[Written], records: usize) -> (Vec<TurnId>, Vec<(TurnId, Vec<u8>)>) {
    let mut heads = Vec::new();
    let mut turns = Vec::new();
    for record in &written[..records] {
        match record {
            Written::Context { base } => heads.push(*base),
            Written::Turn {
                context,
                turn_id,
                payload,
            } => {
                heads[context.0 as usize - 1] = *turn_id;
                turns.push((*turn_id, payload.clone()));
            }
        }
    }
    (heads, turns)
}

fn check_state(engine: &Engine, written: &[Written], records: usize) {
    let (heads, turns) = expected_state(written, records);
    let stats = engine.stats();
    assert_eq!(
        stats.turns,
        turns.len() as u64,
        "turns after keeping {records} records"
    );
    assert_eq!(stats.contexts, heads.len() as u64);
    for (index, head) in heads.iter().enumerate() {
        let context = ContextId(index as u64 + 1);
        assert_eq!(block_on(engine.head(context)).unwrap().head_turn_id, *head);
    }
    assert!(block_on(engine.head(ContextId(heads.len() as u64 + 1))).is_err());
    for (turn_id, payload) in &turns {
        let turn = block_on(engine.turn(*turn_id)).unwrap();
        assert_eq!(
            block_on(engine.blob(turn.payload_hash)).unwrap(),
            Bytes::from(payload.clone())
        );
    }
}

/// After recovery the store takes writes and verifies.
fn keeps_working(dir: &Path, config: EngineConfig) {
    let engine = Engine::open(config).unwrap();
    let context = match engine.stats().contexts {
        0 => block_on(engine.create_context()).unwrap().context_id,
        _ => ContextId(1),
    };
    let before = block_on(engine.head(context)).unwrap();
    let turn = append(
        &engine,
        context,
        b"written after recovery",
        Some(before.head_turn_id),
    )
    .unwrap()
    .turn;
    assert_eq!(turn.parent_turn_id, before.head_turn_id);
    engine.shutdown();
    let report = verify(dir).unwrap();
    assert!(report.is_ok(), "{report}");
}

#[test]
fn turns_log_cut_at_every_record_boundary_and_inside_records() {
    let pristine = tempfile::tempdir().unwrap();
    let written = build_log_store(pristine.path());
    let pristine_log = pristine.path().join("turns.log");
    assert_eq!(log_records(&pristine_log), written.len() as u64);
    // The cuts below are of the records; the prepared zeros after them go first.
    cut(&pristine_log, written.len() as u64 * RECORD);

    let mut cuts = Vec::new();
    for record in 0..=written.len() as u64 {
        cuts.push(record * RECORD);
        if record < written.len() as u64 {
            cuts.extend([1, 8, 64, RECORD - 1].map(|inside| record * RECORD + inside));
        }
    }
    for cut_at in cuts {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(pristine.path(), dir.path());
        cut(&dir.path().join("turns.log"), cut_at);
        let kept = (cut_at / RECORD) as usize;
        {
            let engine = Engine::open(single_shard(dir.path()))
                .unwrap_or_else(|error| panic!("open after cutting at {cut_at}: {error}"));
            check_state(&engine, &written, kept);
        }
        assert_eq!(log_records(&dir.path().join("turns.log")), kept as u64);
        keeps_working(dir.path(), single_shard(dir.path()));
    }
}

#[test]
fn turns_log_zero_filled_tail_is_an_unsynced_batch() {
    let pristine = tempfile::tempdir().unwrap();
    let written = build_log_store(pristine.path());
    let records = written.len() as u64;

    // Zeros after the last record (an extent allocated, its data never written).
    let dir = tempfile::tempdir().unwrap();
    copy_dir(pristine.path(), dir.path());
    let log = dir.path().join("turns.log");
    cut(&log, (records + 5) * RECORD + 17);
    check_state(
        &Engine::open(single_shard(dir.path())).unwrap(),
        &written,
        written.len(),
    );
    assert_eq!(log_records(&log), records);

    // A zeroed record followed by valid ones: the rest of a batch that reached the disk out of
    // order. The batch was never acknowledged; it is cut from the zero record on.
    let dir = tempfile::tempdir().unwrap();
    copy_dir(pristine.path(), dir.path());
    let log = dir.path().join("turns.log");
    let mut bytes = std::fs::read(&log).unwrap();
    let zeroed = records as usize - 3;
    bytes[zeroed * LOG_RECORD_BYTES..(zeroed + 1) * LOG_RECORD_BYTES].fill(0);
    std::fs::write(&log, bytes).unwrap();
    check_state(
        &Engine::open(single_shard(dir.path())).unwrap(),
        &written,
        zeroed,
    );
    keeps_working(dir.path(), single_shard(dir.path()));

    // A valid record further than any batch reaches beyond zeros: damage, not a torn batch.
    let dir = tempfile::tempdir().unwrap();
    copy_dir(pristine.path(), dir.path());
    let log = dir.path().join("turns.log");
    let mut bytes = std::fs::read(&log).unwrap();
    let last_record = (records as usize - 1) * LOG_RECORD_BYTES;
    let last = bytes[last_record..last_record + LOG_RECORD_BYTES].to_vec();
    bytes.resize(bytes.len() + 70_000 * LOG_RECORD_BYTES, 0);
    bytes.extend_from_slice(&last);
    std::fs::write(&log, bytes).unwrap();
    let error = Engine::open(single_shard(dir.path())).unwrap_err();
    assert!(
        matches!(error, OpenError::Corrupt(ref c) if c.file == log),
        "{error}"
    );
}

#[test]
fn flipped_byte_in_turns_log_is_named_and_repair_gets_past_it() {
    let pristine = tempfile::tempdir().unwrap();
    let written = build_log_store(pristine.path());
    let middle = written.len() as u64 / 2;
    for byte in [0, 20, 50, 100, 127] {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(pristine.path(), dir.path());
        let log = dir.path().join("turns.log");
        flip_byte(&log, middle * RECORD + byte);
        match Engine::open(single_shard(dir.path())).unwrap_err() {
            OpenError::Corrupt(corruption) => {
                assert_eq!(corruption.file, log);
                assert_eq!(corruption.offset, middle * RECORD);
            }
            other => panic!("expected corruption, got {other}"),
        }
        let report = verify(dir.path()).unwrap();
        assert!(!report.is_ok());
        let named = format!("{} at offset {}", log.display(), middle * RECORD);
        assert!(
            report.problems.iter().any(|p| p.contains(&named)),
            "{report}"
        );

        let mut repair = single_shard(dir.path());
        repair.repair = true;
        check_state(
            &Engine::open(repair.clone()).unwrap(),
            &written,
            middle as usize,
        );
        keeps_working(dir.path(), single_shard(dir.path()));
    }
}

/// Without preallocation every blob lands in `pack-000000.pack`, at offsets these tests
/// compute; with it, the switch to a prepared pack depends on timing.
fn one_pack(dir: &Path) -> EngineConfig {
    let mut config = single_shard(dir);
    config.preallocate = false;
    config
}

/// A shard of blobs stored without turns (so that cutting a pack loses nothing a turn needs).
fn build_blob_store(dir: &Path) -> Vec<(BlobHash, Vec<u8>)> {
    let engine = Engine::open(one_pack(dir)).unwrap();
    let mut blobs = Vec::new();
    for index in 0..12u64 {
        let payload = if index % 4 == 0 {
            random_payload(index, 3000 + index as usize)
        } else {
            chat_payload(index, 200 + index as usize * 300)
        };
        let (hash, deduped) = block_on(engine.put_blob(Bytes::from(payload.clone()))).unwrap();
        assert!(!deduped);
        blobs.push((hash, payload));
    }
    engine.shutdown();
    blobs
}

fn shard_dir(dir: &Path) -> PathBuf {
    dir.join("blobs/shard-00")
}

fn index_entries(dir: &Path) -> Vec<IndexEntry> {
    let bytes = std::fs::read(shard_dir(dir).join("blobs.idx")).unwrap();
    bytes
        .chunks_exact(INDEX_ENTRY_BYTES)
        .map(|chunk| {
            IndexEntry::decode(chunk.try_into().unwrap())
                .unwrap()
                .unwrap()
        })
        .collect()
}

fn check_blobs(engine: &Engine, blobs: &[(BlobHash, Vec<u8>)], kept: usize) {
    assert_eq!(engine.stats().blobs, kept as u64);
    for (index, (hash, payload)) in blobs.iter().enumerate() {
        let read = block_on(engine.blob(*hash));
        if index < kept {
            assert_eq!(&read.unwrap()[..], &payload[..]);
        } else {
            assert!(read.is_err(), "blob {index} survived a cut before it");
        }
    }
}

#[test]
fn pack_cut_at_every_record_boundary_and_inside_records() {
    let pristine = tempfile::tempdir().unwrap();
    let blobs = build_blob_store(pristine.path());
    let entries = index_entries(pristine.path());
    assert_eq!(entries.len(), blobs.len());
    for (record, entry) in entries.iter().enumerate() {
        let start = entry.location.pack_offset;
        let length = entry.location.record_bytes();
        for cut_at in [
            start,
            start + 1,
            start + 63,
            start + 64,
            start + 65,
            start + length - 1,
        ] {
            // A crash image: the pack torn at `cut_at`, the index holding only what was
            // synced before (or nothing at all: it is rebuilt from the pack).
            for keep_index in [true, false] {
                let dir = tempfile::tempdir().unwrap();
                copy_dir(pristine.path(), dir.path());
                cut(&shard_dir(dir.path()).join("pack-000000.pack"), cut_at);
                let index = shard_dir(dir.path()).join("blobs.idx");
                cut(
                    &index,
                    if keep_index {
                        (record * INDEX_ENTRY_BYTES) as u64
                    } else {
                        0
                    },
                );
                {
                    let engine = Engine::open(single_shard(dir.path()))
                        .unwrap_or_else(|error| panic!("open after cutting at {cut_at}: {error}"));
                    check_blobs(&engine, &blobs, record);
                    // A lost blob can be stored again.
                    let (hash, deduped) =
                        block_on(engine.put_blob(Bytes::from(blobs[record].1.clone()))).unwrap();
                    assert_eq!((hash, deduped), (blobs[record].0, false));
                }
                assert_eq!(index_entries(dir.path()).len(), record + 1, "index rebuilt");
                keeps_working(dir.path(), single_shard(dir.path()));
            }
        }
    }
}

#[test]
fn blob_index_cut_anywhere_is_rebuilt_from_the_pack() {
    let pristine = tempfile::tempdir().unwrap();
    let blobs = build_blob_store(pristine.path());
    let index_len = (blobs.len() * INDEX_ENTRY_BYTES) as u64;
    for cut_at in (0..=index_len).step_by(INDEX_ENTRY_BYTES / 2) {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(pristine.path(), dir.path());
        cut(&shard_dir(dir.path()).join("blobs.idx"), cut_at);
        check_blobs(
            &Engine::open(single_shard(dir.path())).unwrap(),
            &blobs,
            blobs.len(),
        );
        assert_eq!(index_entries(dir.path()).len(), blobs.len());
    }
}

#[test]
fn damage_in_packs_and_index_is_named() {
    let pristine = tempfile::tempdir().unwrap();
    let blobs = build_blob_store(pristine.path());
    let entries = index_entries(pristine.path());
    let middle = &entries[entries.len() / 2];
    let pack = PathBuf::from("blobs/shard-00/pack-000000.pack");
    let index = PathBuf::from("blobs/shard-00/blobs.idx");
    let index_middle = (entries.len() / 2 * INDEX_ENTRY_BYTES) as u64;
    let cases = [
        // (file, byte to flip, offset the error must name)
        (
            pack.clone(),
            middle.location.pack_offset + 10,
            middle.location.pack_offset,
        ),
        (
            pack.clone(),
            middle.location.pack_offset + 70,
            middle.location.pack_offset,
        ),
        (index.clone(), index_middle + 3, index_middle),
    ];
    for (file, flip_at, named_offset) in cases {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(pristine.path(), dir.path());
        let path = dir.path().join(&file);
        flip_byte(&path, flip_at);
        match Engine::open(single_shard(dir.path())).unwrap_err() {
            OpenError::Corrupt(corruption) => {
                assert_eq!(
                    (corruption.file, corruption.offset),
                    (path.clone(), named_offset)
                );
            }
            other => panic!(
                "flip in {} at {flip_at}: expected corruption, got {other}",
                file.display()
            ),
        }
        let report = verify(dir.path()).unwrap();
        assert!(
            !report.is_ok(),
            "verify missed a flip in {}",
            file.display()
        );
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.contains(&format!("{} at offset {named_offset}", path.display()))),
            "{report}"
        );
        // Repair cuts at the damage; what lies before it is intact and the store works.
        let mut repair = single_shard(dir.path());
        repair.repair = true;
        let engine = Engine::open(repair).unwrap();
        let kept = engine.stats().blobs as usize;
        assert!(kept >= entries.len() / 2, "kept {kept}");
        for (hash, payload) in &blobs[..entries.len() / 2] {
            assert_eq!(&block_on(engine.blob(*hash)).unwrap()[..], &payload[..]);
        }
        drop(engine);
        keeps_working(dir.path(), single_shard(dir.path()));
    }

    // The meta file names itself too.
    let dir = tempfile::tempdir().unwrap();
    copy_dir(pristine.path(), dir.path());
    flip_byte(&dir.path().join("ctxstore.meta"), 13);
    let error = Engine::open(single_shard(dir.path())).unwrap_err();
    assert!(error.to_string().contains("ctxstore.meta"), "{error}");
}

/// Removes the pack records (and their index entries) from entry `keep` on, as if a crash
/// lost a pack batch whose fdatasync had not finished.
fn lose_pack_entries_from(dir: &Path, keep: usize) {
    let entries = index_entries(dir);
    cut(
        &shard_dir(dir).join("pack-000000.pack"),
        entries[keep].location.pack_offset,
    );
    cut(
        &shard_dir(dir).join("blobs.idx"),
        (keep * INDEX_ENTRY_BYTES) as u64,
    );
}

/// Decision 0014: the sequencer writes a batch's turns while their blobs' pack batch syncs, so
/// a crash may leave the last turns of `turns.log` naming blobs the pack never got. None of
/// them was acknowledged (publication waits for both): the open cuts the log at the first of
/// them, keeps everything before it, and may hand its TurnID out again.
#[test]
fn turns_whose_blobs_a_crash_lost_at_the_end_of_the_log_are_cut_as_an_unacknowledged_tail() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(one_pack(dir.path())).unwrap();
    let context = block_on(engine.create_context()).unwrap().context_id;
    let payloads: Vec<Vec<u8>> = (0..8).map(|seed| chat_payload(seed, 3000)).collect();
    let mut turns = Vec::new();
    for payload in &payloads[..6] {
        turns.push(append(&engine, context, payload, None).unwrap().turn);
    }
    // The tail: a new blob, a turn naming a durable one (deduped), another new blob.
    let lost_first = append(&engine, context, &payloads[6], None).unwrap().turn;
    let deduped = append(&engine, context, &payloads[1], None).unwrap();
    assert!(deduped.deduped);
    append(&engine, context, &payloads[7], None).unwrap();
    engine.shutdown();
    drop(engine);
    assert_eq!(index_entries(dir.path()).len(), 8);
    lose_pack_entries_from(dir.path(), 6);

    // Before the open, verify sees the tail the open will cut: a note, not a problem.
    let report = verify(dir.path()).unwrap();
    assert!(report.problems.is_empty(), "{report}");
    assert!(
        report
            .notes
            .iter()
            .any(|note| note.contains("unacknowledged tail")
                && note.contains(&lost_first.turn_id.to_string())),
        "{report}"
    );

    let engine = Engine::open(single_shard(dir.path())).unwrap();
    let head = block_on(engine.head(context)).unwrap();
    assert_eq!(head.head_turn_id, turns[5].turn_id);
    assert_eq!(head.head_depth, 5);
    for (turn, payload) in turns.iter().zip(&payloads) {
        let read = block_on(engine.turn(turn.turn_id)).unwrap();
        assert_eq!(read.payload_hash, BlobHash::of(payload));
        assert_eq!(
            &block_on(engine.blob(read.payload_hash)).unwrap()[..],
            &payload[..]
        );
    }
    for cut_turn in lost_first.turn_id.0..lost_first.turn_id.0 + 3 {
        assert!(block_on(engine.turn(TurnId(cut_turn))).is_err());
    }
    assert_eq!(engine.stats().turns, 6);
    // The first cut TurnID was never acknowledged: the next append may take it.
    let next = append(&engine, context, &payloads[6], None).unwrap().turn;
    assert_eq!(next.turn_id, lost_first.turn_id);
    assert_eq!(next.parent_turn_id, turns[5].turn_id);
    engine.shutdown();
    drop(engine);
    let report = verify(dir.path()).unwrap();
    assert!(report.problems.is_empty(), "{report}");
    assert!(
        !report
            .notes
            .iter()
            .any(|note| note.contains("unacknowledged")),
        "{report}"
    );
}

/// A blob missing for a turn further from the end of the log than the sequencer ever writes
/// before its blobs are durable (`HELD_RECORDS_MAX` records) was acknowledged: the open is
/// refused, naming the loss, and verify reports it.
#[test]
fn a_pack_that_lost_a_blob_an_acknowledged_turn_needs_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(one_pack(dir.path())).unwrap();
    let context = block_on(engine.create_context()).unwrap().context_id;
    let kept = chat_payload(1, 3000);
    append(&engine, context, &kept, None).unwrap();
    let lost = append(&engine, context, &chat_payload(2, 3000), None)
        .unwrap()
        .turn;
    // More than HELD_RECORDS_MAX (4,096) records after it, all naming the kept blob.
    let request = || AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: AppendPayload::Bytes(Bytes::from(kept.clone())),
        options: Default::default(),
    };
    for _ in 0..65 {
        block_on(engine.append_batch((0..64).map(|_| request()).collect())).unwrap();
    }
    engine.shutdown();
    drop(engine);
    assert_eq!(index_entries(dir.path()).len(), 2);
    lose_pack_entries_from(dir.path(), 1);
    let error = Engine::open(single_shard(dir.path())).unwrap_err();
    assert!(
        error.to_string().contains("lost acknowledged data")
            && error.to_string().contains(&lost.turn_id.to_string()),
        "{error}"
    );
    let report = verify(dir.path()).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("lost acknowledged data")),
        "{report}"
    );
}

/// The same loss just inside the window, but followed by damage: damage is never cut with a
/// tail, it is named.
#[test]
fn a_lost_tail_blob_before_a_damaged_record_is_refused_as_damage() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(one_pack(dir.path())).unwrap();
    let context = block_on(engine.create_context()).unwrap().context_id;
    append(&engine, context, &chat_payload(1, 3000), None).unwrap();
    append(&engine, context, &chat_payload(2, 3000), None).unwrap();
    append(&engine, context, &chat_payload(1, 3000), None).unwrap();
    engine.shutdown();
    drop(engine);
    lose_pack_entries_from(dir.path(), 1);
    // Record 4 (the last turn) rots: a non-zero record with a bad checksum.
    let log = dir.path().join("turns.log");
    flip_byte(&log, 3 * RECORD + 40);
    let log_len = std::fs::metadata(&log).unwrap().len();
    let error = Engine::open(single_shard(dir.path())).unwrap_err();
    assert!(matches!(error, OpenError::Corrupt(_)), "{error}");
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        log_len,
        "nothing was cut"
    );
}

#[test]
fn prepared_space_is_kept_and_sealed_packs_end_at_their_last_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = single_shard(dir.path());
    config.limits.blob_bytes_max = 16 * 1024;
    config.limits.shard_batch_bytes_max = 64 * 1024;
    config.limits.pack_bytes_max = 256 * 1024;
    let engine = Engine::open(config.clone()).unwrap();
    let mut blobs = Vec::new();
    for seed in 0..120u64 {
        let payload = random_payload(seed, 10_000);
        blobs.push((
            block_on(engine.put_blob(Bytes::from(payload.clone())))
                .unwrap()
                .0,
            payload,
        ));
        if seed % 10 == 0 {
            // Idle moments, in which the shard prefills its pack.
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    engine.shutdown();
    drop(engine);
    let mut packs: Vec<_> = std::fs::read_dir(shard_dir(dir.path()))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "pack"))
        .collect();
    packs.sort();
    assert!(packs.len() >= 4, "{} packs", packs.len());
    // Sealed packs hold records only; verify would call anything after them damage.
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
    let sealed_bytes: u64 = packs[..packs.len() - 1]
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    let newest = std::fs::metadata(packs.last().unwrap()).unwrap().len();
    assert!(sealed_bytes + newest >= report.stored_bytes);
    assert!(newest > 0);

    let engine = Engine::open(config).unwrap();
    for (hash, payload) in &blobs {
        assert_eq!(&block_on(engine.blob(*hash)).unwrap()[..], &payload[..]);
    }
    assert_eq!(engine.stats().blobs, blobs.len() as u64);
}

/// Random damage anywhere, many times: a cut or a flipped byte in any file. The store either
/// opens with every turn the damage did not touch (a torn tail is cut; garbage in prepared
/// space is harmless), or refuses to open naming the damaged file. Never a panic, never a
/// silent loss.
#[test]
fn random_cuts_and_flips_are_recovered_or_named() {
    let pristine = tempfile::tempdir().unwrap();
    let written = build_log_store(pristine.path());
    // Blobs stored without turns too, so that packs hold records turns do not need.
    {
        let engine = Engine::open(single_shard(pristine.path())).unwrap();
        for seed in 0..20 {
            block_on(engine.put_blob(Bytes::from(random_payload(100 + seed, 700)))).unwrap();
        }
        engine.shutdown();
    }
    let files = [
        "turns.log",
        "blobs/shard-00/pack-000000.pack",
        "blobs/shard-00/blobs.idx",
    ];
    // Damage lands among the records (files also hold prepared zeros after them).
    let pack_data = verify(pristine.path()).unwrap().stored_bytes;
    let data_len = |file: &str, file_len: u64| match file {
        "turns.log" => written.len() as u64 * RECORD,
        "blobs/shard-00/pack-000000.pack" => pack_data,
        _ => file_len,
    };
    let mut state = 0x00c0_ffee_u64;
    let mut next = |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound.max(1)
    };
    let (mut opened, mut refused) = (0, 0);
    for round in 0..90 {
        let file = files[round % files.len()];
        let dir = tempfile::tempdir().unwrap();
        copy_dir(pristine.path(), dir.path());
        let path = dir.path().join(file);
        let len = std::fs::metadata(&path).unwrap().len();
        let at = next(data_len(file, len));
        let flip = round % 2 == 1;
        if flip {
            flip_byte(&path, at);
        } else {
            cut(&path, at);
        }
        match Engine::open(single_shard(dir.path())) {
            Ok(engine) => {
                opened += 1;
                // What the damage did not touch is all there.
                let (heads, turns) = expected_state(&written, written.len());
                let present = turns
                    .iter()
                    .filter(|(turn_id, _)| block_on(engine.turn(*turn_id)).is_ok())
                    .count();
                if file == "turns.log" && !flip {
                    let kept = (at / RECORD) as usize;
                    check_state(&engine, &written, kept.min(written.len()));
                } else {
                    assert_eq!(
                        present,
                        turns.len(),
                        "round {round}: {file} damaged at {at} lost turns silently"
                    );
                    assert_eq!(engine.stats().contexts, heads.len() as u64);
                }
                drop(engine);
                let report = verify(dir.path()).unwrap();
                assert!(report.is_ok(), "round {round}: {report}");
            }
            Err(error) => {
                refused += 1;
                let named = match &error {
                    OpenError::Corrupt(corruption) => {
                        corruption.file == path && corruption.offset <= at
                    }
                    OpenError::Inconsistent(message) => message.contains("lost acknowledged data"),
                    _ => false,
                };
                assert!(
                    named,
                    "round {round}: {file} damaged at {at} ({}): {error}",
                    if flip { "flip" } else { "cut" }
                );
                // And verify finds it too.
                assert!(
                    !verify(dir.path()).unwrap().is_ok(),
                    "round {round}: verify missed it"
                );
            }
        }
    }
    eprintln!("random damage: {opened} opened intact, {refused} refused with the damage named");
    assert!(opened > 0 && refused > 0);
}
