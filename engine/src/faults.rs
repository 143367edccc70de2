//! Fault injection into the engine's file layer, for tests only: compiled with `cfg(test)` and
//! with the `fault-injection` feature (the replica's tests: a primary whose store failed), never
//! into a release build. A rule names a store directory, a file (by a part of its name), an
//! operation and a fault, and how many times it fires. Nothing outside the process can set one.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOp {
    Write,
    Sync,
    Read,
    /// The write of prepared zeros (`ActorFile::fill_zeros`), apart from record writes, so
    /// that a test can fail a fill without failing the batches around it.
    FillZeros,
    /// The durable cut of `ActorFile::truncate` (a pack's seal).
    Truncate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The operation fails with this errno (5 EIO, 28 ENOSPC).
    Fail(i32),
    /// A write of which only the first `keep` bytes reach the file, then EIO: a short write
    /// followed by an error.
    Short { keep: usize },
    /// A slow disk: the operation succeeds after `ms` milliseconds (a test watches what the
    /// other actors do meanwhile).
    Delay { ms: u64 },
}

/// Sleeps for a `Delay` fault: on the actor's own thread, as a slow disk would block it.
pub(crate) fn delay(fault: Option<Fault>) {
    if let Some(Fault::Delay { ms }) = fault {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

struct Rule {
    dir: PathBuf,
    file: &'static str,
    op: FaultOp,
    fault: Fault,
    remaining: u32,
}

static RULES: Mutex<Vec<Rule>> = Mutex::new(Vec::new());
/// Whether any rule was ever set: every file operation of a build with the feature asks
/// `check`, and a process that sets none (a server binary built alongside the tests) pays one
/// atomic load, not a lock.
static ANY_RULE: AtomicBool = AtomicBool::new(false);

/// From now on, the next `times` operations `op` on files under `dir` whose name contains
/// `file` suffer `fault`.
pub fn inject(dir: &Path, file: &'static str, op: FaultOp, fault: Fault, times: u32) {
    ANY_RULE.store(true, Ordering::Release);
    if let Ok(mut rules) = RULES.lock() {
        rules.push(Rule {
            dir: dir.to_path_buf(),
            file,
            op,
            fault,
            remaining: times,
        });
    }
}

/// Removes the rules of `dir`.
pub fn clear(dir: &Path) {
    if let Ok(mut rules) = RULES.lock() {
        rules.retain(|rule| rule.dir != dir);
    }
}

/// Whether a fault fires for `op` on `path` (consuming one of its times).
pub(crate) fn check(path: &Path, op: FaultOp) -> Option<Fault> {
    if !ANY_RULE.load(Ordering::Acquire) {
        return None;
    }
    let mut rules = RULES.lock().ok()?;
    let name = path.file_name()?.to_str()?;
    let rule = rules.iter_mut().find(|rule| {
        rule.remaining > 0
            && rule.op == op
            && path.starts_with(&rule.dir)
            && name.contains(rule.file)
    })?;
    rule.remaining -= 1;
    Some(rule.fault)
}

/// How many more times the rules of `dir` fire: a test waits for 0 to know that an actor
/// reached the faulted operation (the actor finishes it before it takes its next request).
pub fn remaining(dir: &Path) -> u32 {
    RULES.lock().map_or(0, |rules| {
        rules
            .iter()
            .filter(|rule| rule.dir == dir)
            .map(|rule| rule.remaining)
            .sum()
    })
}

pub(crate) fn error(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

#[cfg(test)]
mod tests {
    //! The engine under failing disks: a failed fdatasync turns the store read-only, a full
    //! disk fails writes with NoSpace while reads go on, short writes leave nothing behind,
    //! read errors are typed. After a restart, everything acknowledged is there. A slow
    //! fdatasync during which the ack gate closes (decision 0031 §6) answers its batch
    //! `Unconfirmed`, and the batch is durable all the same.

    use bytes::Bytes;

    use super::*;
    use crate::{
        AppendPayload, AppendRequest, ContextId, Engine, EngineConfig, EngineError, ErrorKind,
        TurnId, verify,
    };

    const EIO: i32 = 5;
    const ENOSPC: i32 = 28;

    fn config(dir: &Path) -> EngineConfig {
        let mut config = EngineConfig::new(dir).with_shards(1);
        config.limits.blob_bytes_max = 1 << 20;
        config.limits.shard_batch_bytes_max = 4 << 20;
        config.limits.pack_bytes_max = 8 << 20;
        config.limits.log_preallocate_bytes = 64 * 1024;
        // Without prepared space every batch grows its file, as on a disk filling up.
        config.preallocate = false;
        config
    }

    fn append(
        engine: &Engine,
        context: ContextId,
        payload: &[u8],
    ) -> Result<crate::Appended, EngineError> {
        pollster::block_on(engine.append(AppendRequest {
            context_id: context,
            expected_head: None,
            type_tag: 0,
            codec: 0,
            payload: AppendPayload::Bytes(Bytes::copy_from_slice(payload)),
            options: Default::default(),
        }))
    }

    fn chain(engine: &Engine, context: ContextId) -> Vec<TurnId> {
        let page = pollster::block_on(engine.last(context, 1000, true)).unwrap();
        page.turns.iter().map(|turn| turn.turn.turn_id).collect()
    }

    /// Reopens after the faults are gone and checks the acknowledged turns, in order.
    fn after_restart(dir: &Path, context: ContextId, acknowledged: &[TurnId]) {
        clear(dir);
        let engine = Engine::open(config(dir)).unwrap();
        let stored = chain(&engine, context);
        let positions: Vec<usize> = acknowledged
            .iter()
            .map(|turn| {
                stored
                    .iter()
                    .position(|stored| stored == turn)
                    .unwrap_or_else(|| panic!("turn {turn} lost"))
            })
            .collect();
        assert!(
            positions.windows(2).all(|pair| pair[0] < pair[1]),
            "acknowledged turns out of order"
        );
        engine.shutdown();
        let report = verify(dir).unwrap();
        assert!(report.is_ok(), "{report}");
    }

    #[test]
    fn a_failed_fdatasync_turns_the_store_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(config(dir.path())).unwrap();
        let context = pollster::block_on(engine.create_context())
            .unwrap()
            .context_id;
        let first = append(&engine, context, b"durable before the failure")
            .unwrap()
            .turn
            .turn_id;

        assert_eq!(engine.store_failed(), None);
        inject(dir.path(), "turns.log", FaultOp::Sync, Fault::Fail(EIO), 1);
        let failed = append(&engine, context, b"in the batch whose fsync fails").unwrap_err();
        assert_eq!(failed.kind(), ErrorKind::ReadOnly, "{failed}");
        assert!(failed.to_string().contains("fdatasync"), "{failed}");
        // Never retried as if it had succeeded: every later write is refused, the fault is gone.
        assert_eq!(
            append(&engine, context, b"later").unwrap_err().kind(),
            ErrorKind::ReadOnly
        );
        assert_eq!(
            pollster::block_on(engine.create_context())
                .unwrap_err()
                .kind(),
            ErrorKind::ReadOnly
        );
        assert!(engine.stats().read_only);
        // What a primary with a lease steps down on (not a role: the disk failed).
        let reason = engine.store_failed().expect("the store failed");
        assert!(reason.contains("fdatasync"), "{reason}");
        // Reads go on, and show only what was durable.
        assert_eq!(chain(&engine, context), vec![first]);
        engine.shutdown();
        after_restart(dir.path(), context, &[first]);
    }

    #[test]
    fn a_failed_pack_fdatasync_turns_the_store_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(config(dir.path())).unwrap();
        let context = pollster::block_on(engine.create_context())
            .unwrap()
            .context_id;
        let first = append(&engine, context, b"first").unwrap().turn.turn_id;
        inject(dir.path(), "pack-", FaultOp::Sync, Fault::Fail(EIO), 1);
        assert_eq!(
            append(&engine, context, b"second").unwrap_err().kind(),
            ErrorKind::ReadOnly
        );
        assert_eq!(
            append(&engine, context, b"third").unwrap_err().kind(),
            ErrorKind::ReadOnly
        );
        assert_eq!(chain(&engine, context), vec![first]);
        // The sequencer may have written (and synced) the second turn while the pack synced
        // (decision 0014): it was answered with the error and never published.
        assert_eq!(engine.stats().turns, 1);
        assert!(pollster::block_on(engine.turn(TurnId(first.0 + 1))).is_err());
        engine.shutdown();
        after_restart(dir.path(), context, &[first]);
    }

    /// The fdatasyncs each actor finished so far (its `fsync_us` count), the sequencer first.
    fn syncs(engine: &Engine) -> Vec<u64> {
        engine
            .actor_metrics()
            .iter()
            .map(|actor| actor.fsync_us.cumulative.last().copied().unwrap_or(0))
            .collect()
    }

    /// One overlapped fsync wait (decision 0014, issue 30): while a slow pack fdatasync runs,
    /// the append's turns are written and synced, and nothing is answered before both. For a
    /// batch of new payloads, and for a chunked payload, whose chunks share their manifest's
    /// shard batch. Before, both waited for the blobs first: the log's fdatasync came after.
    #[test]
    fn an_append_syncs_its_turns_while_its_blobs_sync() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(config(dir.path())).unwrap();
        let context = pollster::block_on(engine.create_context())
            .unwrap()
            .context_id;
        let request = |payload: Vec<u8>| AppendRequest {
            context_id: context,
            expected_head: None,
            type_tag: 0,
            codec: 0,
            payload: AppendPayload::Bytes(Bytes::from(payload)),
            options: Default::default(),
        };
        let growing: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
        let cases = [
            (
                "a batch of 3",
                (0..3u8).map(|i| request(vec![i; 100])).collect::<Vec<_>>(),
            ),
            ("a chunked payload", vec![request(growing.clone())]),
        ];
        for (label, requests) in cases {
            let payloads: Vec<AppendPayload> = requests.iter().map(|r| r.payload.clone()).collect();
            let before = syncs(&engine);
            inject(
                dir.path(),
                "pack-",
                FaultOp::Sync,
                Fault::Delay { ms: 2000 },
                1,
            );
            let appending = {
                let engine = engine.clone();
                std::thread::spawn(move || pollster::block_on(engine.append_batch(requests)))
            };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while syncs(&engine)[0] == before[0] {
                assert!(
                    !appending.is_finished(),
                    "{label}: answered before its turns synced"
                );
                assert!(
                    std::time::Instant::now() < deadline,
                    "{label}: no log fdatasync"
                );
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            let during = syncs(&engine);
            assert_eq!(
                during[1], before[1],
                "{label}: the pack's fdatasync finished before the log's: two waits in series"
            );
            assert!(
                !appending.is_finished(),
                "{label}: answered before its blobs synced"
            );
            let appended = appending.join().unwrap().unwrap();
            assert_eq!(syncs(&engine)[1], before[1] + 1, "{label}: one pack batch");
            for (turn, payload) in appended.iter().zip(payloads) {
                let AppendPayload::Bytes(bytes) = payload else {
                    panic!("by value")
                };
                let hash = turn.turn.payload_hash;
                assert_eq!(pollster::block_on(engine.blob(hash)).unwrap(), bytes);
            }
        }
        assert_eq!(remaining(dir.path()), 0);
        engine.shutdown();
        let report = verify(dir.path()).unwrap();
        assert!(report.is_ok(), "{report}");
    }

    #[test]
    fn a_full_disk_fails_writes_with_no_space_and_reads_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(config(dir.path())).unwrap();
        let context = pollster::block_on(engine.create_context())
            .unwrap()
            .context_id;
        let mut acknowledged = vec![
            append(&engine, context, b"before the disk filled")
                .unwrap()
                .turn
                .turn_id,
        ];

        // The pack cannot grow: the blob's append fails, nothing else changes.
        inject(dir.path(), "pack-", FaultOp::Write, Fault::Fail(ENOSPC), 2);
        for payload in [&b"blob that does not fit"[..], b"another"] {
            assert_eq!(
                append(&engine, context, payload).unwrap_err().kind(),
                ErrorKind::NoSpace
            );
        }
        // The log cannot grow: the turn's append fails; its blob, already durable, stays.
        inject(
            dir.path(),
            "turns.log",
            FaultOp::Write,
            Fault::Fail(ENOSPC),
            1,
        );
        assert_eq!(
            append(&engine, context, b"turn that does not fit")
                .unwrap_err()
                .kind(),
            ErrorKind::NoSpace
        );
        assert!(
            !engine.stats().read_only,
            "a full disk is not a failed fsync"
        );
        assert_eq!(chain(&engine, context), acknowledged);

        // Space is back: writes work again, parents chain on from the last durable turn.
        let next = append(&engine, context, b"after space returned")
            .unwrap()
            .turn;
        assert_eq!(next.parent_turn_id, acknowledged[0]);
        acknowledged.push(next.turn_id);
        assert_eq!(chain(&engine, context), acknowledged);
        engine.shutdown();
        after_restart(dir.path(), context, &acknowledged);
    }

    #[test]
    fn short_writes_leave_nothing_half_written() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(config(dir.path())).unwrap();
        let context = pollster::block_on(engine.create_context())
            .unwrap()
            .context_id;
        let mut acknowledged = vec![append(&engine, context, b"whole").unwrap().turn.turn_id];
        // Half a turn record reaches turns.log; half a blob record reaches the pack.
        inject(
            dir.path(),
            "turns.log",
            FaultOp::Write,
            Fault::Short { keep: 64 },
            1,
        );
        assert_eq!(
            append(&engine, context, b"torn turn").unwrap_err().kind(),
            ErrorKind::Io
        );
        inject(
            dir.path(),
            "pack-",
            FaultOp::Write,
            Fault::Short { keep: 40 },
            1,
        );
        assert_eq!(
            append(&engine, context, &[9u8; 5000]).unwrap_err().kind(),
            ErrorKind::Io
        );
        let next = append(&engine, context, b"after the short writes")
            .unwrap()
            .turn;
        assert_eq!(next.parent_turn_id, acknowledged[0]);
        acknowledged.push(next.turn_id);
        // Again with the torn blob's payload: it was cut off, so it is stored anew.
        let again = append(&engine, context, &[9u8; 5000]).unwrap();
        assert!(!again.deduped);
        acknowledged.push(again.turn.turn_id);
        engine.shutdown();
        after_restart(dir.path(), context, &acknowledged);
    }

    #[test]
    fn read_errors_are_typed_and_pass() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(config(dir.path())).unwrap();
        let context = pollster::block_on(engine.create_context())
            .unwrap()
            .context_id;
        let turn = append(&engine, context, b"read me").unwrap().turn;
        // Reopened, so that the turn is read from the file: the sequencer put it in the
        // readers' record cache when it published it.
        engine.shutdown();
        let engine = Engine::open(config(dir.path())).unwrap();
        inject(dir.path(), "turns.log", FaultOp::Read, Fault::Fail(EIO), 1);
        let error = pollster::block_on(engine.turn(turn.turn_id)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Io);
        assert!(error.to_string().contains("turns.log"), "{error}");
        assert_eq!(pollster::block_on(engine.turn(turn.turn_id)).unwrap(), turn);
        inject(dir.path(), "pack-", FaultOp::Read, Fault::Fail(EIO), 1);
        assert_eq!(
            pollster::block_on(engine.blob(turn.payload_hash))
                .unwrap_err()
                .kind(),
            ErrorKind::Io
        );
        assert_eq!(
            &pollster::block_on(engine.blob(turn.payload_hash)).unwrap()[..],
            b"read me"
        );
        engine.shutdown();
        clear(dir.path());
    }

    /// Incompressible bytes (xorshift), so that a payload's record has a known size.
    fn noise(len: usize, mut state: u64) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(len);
        while bytes.len() < len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            bytes.extend_from_slice(&state.to_le_bytes());
        }
        bytes.truncate(len);
        bytes
    }

    /// A zero-fill ahead that a full disk cuts short grows the pack past what the shard
    /// believed its length was; a batch then ends inside those zeros, and the next batch
    /// seals the pack. The sealed pack must still end at its last record: recovery refuses a
    /// sealed pack with anything after it ("zero-filled header in a sealed pack"), so a
    /// store whose disk once filled up would not open again. (The flaky half of
    /// `tests/disk_full.rs`, made deterministic.)
    #[test]
    fn a_pack_sealed_after_a_failed_zero_fill_ends_at_its_last_record() {
        let dir = tempfile::tempdir().unwrap();
        let blob_bytes_max = 64 * 1024;
        let record_bytes_max = crate::format::pack::record_bytes(blob_bytes_max);
        let mut config = config(dir.path());
        config.preallocate = true;
        config.chunking.threshold_bytes = 0;
        config.limits.blob_bytes_max = blob_bytes_max;
        config.limits.shard_batch_bytes_max = record_bytes_max;
        config.limits.pack_bytes_max = record_bytes_max;
        // The shard's first fill of pack 0 (at its end, 0 or after the first record) writes
        // 32 KiB of its 64 KiB step and fails, as on a disk that filled up.
        inject(
            dir.path(),
            "pack-",
            FaultOp::FillZeros,
            Fault::Short { keep: 32 * 1024 },
            1,
        );
        let engine = Engine::open(config.clone()).unwrap();
        let context = pollster::block_on(engine.create_context())
            .unwrap()
            .context_id;
        // 8 KiB: its record ends inside the 32 KiB of zeros the failed fill left.
        let first = append(&engine, context, &noise(8 * 1024, 1)).unwrap().turn;
        let waited = std::time::Instant::now();
        while remaining(dir.path()) > 0 {
            assert!(
                waited.elapsed() < std::time::Duration::from_secs(30),
                "the shard never prepared space"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Does not fit after the first record: pack 0 is sealed, the record goes to pack 1.
        let second = append(&engine, context, &noise(60_000, 2)).unwrap().turn;
        engine.shutdown();
        drop(engine);
        clear(dir.path());

        let sealed = dir.path().join("blobs/shard-00/pack-000000.pack");
        assert_eq!(
            std::fs::metadata(&sealed).unwrap().len(),
            crate::format::pack::record_bytes(8 * 1024),
            "the sealed pack ends at its only record"
        );
        let engine = Engine::open(config).unwrap();
        assert_eq!(chain(&engine, context), vec![first.turn_id, second.turn_id]);
        engine.shutdown();
        let report = verify(dir.path()).unwrap();
        assert!(report.is_ok(), "{report}");
    }

    /// A pack's seal whose durable cut fails (EIO) makes the store read-only, like any failed
    /// fsync: nothing more is acknowledged, and what was is there after a restart.
    #[test]
    fn a_failed_seal_makes_the_store_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let blob_bytes_max = 64 * 1024;
        let record_bytes_max = crate::format::pack::record_bytes(blob_bytes_max);
        let mut config = config(dir.path());
        config.chunking.threshold_bytes = 0;
        config.limits.blob_bytes_max = blob_bytes_max;
        config.limits.shard_batch_bytes_max = record_bytes_max;
        config.limits.pack_bytes_max = record_bytes_max;
        let engine = Engine::open(config.clone()).unwrap();
        let context = pollster::block_on(engine.create_context())
            .unwrap()
            .context_id;
        let first = append(&engine, context, &noise(8 * 1024, 1)).unwrap().turn;
        inject(dir.path(), "pack-", FaultOp::Truncate, Fault::Fail(5), 1);
        // Does not fit after the first record: the seal of pack 0 fails.
        let error = append(&engine, context, &noise(60_000, 2)).unwrap_err();
        assert_eq!(error.kind(), crate::ErrorKind::ReadOnly, "{error}");
        assert!(engine.stats().read_only);
        let again = append(&engine, context, &noise(100, 3)).unwrap_err();
        assert_eq!(again.kind(), crate::ErrorKind::ReadOnly, "{again}");
        engine.shutdown();
        drop(engine);
        clear(dir.path());
        let engine = Engine::open(config).unwrap();
        assert_eq!(chain(&engine, context), vec![first.turn_id]);
        engine.shutdown();
        let report = verify(dir.path()).unwrap();
        assert!(report.is_ok(), "{report}");
    }

    /// A metadata batch that fails to reach `turns.log` (a full disk, then a short write in
    /// the middle of a multi-slot record) is answered with the error and leaves names and
    /// tags exactly as the last durable batch left them, live and after a restart.
    #[test]
    fn a_failed_metadata_batch_changes_nothing() {
        use crate::{ContextRef, NewContext};
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(config(dir.path())).unwrap();
        let new = NewContext {
            name: Some("a".into()),
            tags: vec![("status".into(), "idle".into())],
            ..NewContext::default()
        };
        let context = pollster::block_on(engine.create(new)).unwrap();
        let context = ContextRef::Id(context.context.head.context_id);
        let status = |engine: &Engine| {
            engine
                .context(&context)
                .unwrap()
                .tags
                .get("status")
                .cloned()
        };
        let set = |engine: &Engine, value: &str| {
            pollster::block_on(engine.update_tags(
                &context,
                vec![("status".into(), value.into())],
                vec![],
                None,
            ))
        };

        inject(
            dir.path(),
            "turns.log",
            FaultOp::Write,
            Fault::Fail(ENOSPC),
            1,
        );
        assert_eq!(
            set(&engine, "running").unwrap_err().kind(),
            ErrorKind::NoSpace
        );
        assert_eq!(status(&engine).as_deref(), Some("idle"));

        // 1 KiB of value: an 11-slot record, of which only the first 300 bytes reach the file.
        inject(
            dir.path(),
            "turns.log",
            FaultOp::Write,
            Fault::Short { keep: 300 },
            1,
        );
        let long = "x".repeat(1024);
        assert!(set(&engine, &long).is_err());
        assert_eq!(status(&engine).as_deref(), Some("idle"));
        let named = pollster::block_on(engine.set_name(&context, "b".into()));
        assert!(named.is_err(), "a is named already");

        // The store goes on once the faults are gone.
        set(&engine, "done").unwrap();
        let other = NewContext {
            name: Some("c".into()),
            ..NewContext::default()
        };
        pollster::block_on(engine.create(other)).unwrap();
        engine.shutdown();
        clear(dir.path());
        let engine = Engine::open(config(dir.path())).unwrap();
        assert_eq!(status(&engine).as_deref(), Some("done"));
        assert!(engine.resolve(&ContextRef::Name("c".into())).is_ok());
        assert!(engine.resolve(&ContextRef::Name("b".into())).is_err());
        engine.shutdown();
        let report = verify(dir.path()).unwrap();
        assert!(report.is_ok(), "{report}");
    }

    /// The sequencer's check of the ack gate, once per batch after its fdatasync: a batch
    /// admitted while the gate was open, whose fdatasync ends after the gate closed, is
    /// answered `Unconfirmed`, never success; it is durable here (published, and there after
    /// a reopen), like a batch whose answer a crash lost. (`engine/tests/ack_gate.rs` has the
    /// rest of the gate; only a unit test can hold an fdatasync open.)
    #[test]
    fn a_batch_synced_after_the_ack_gate_closed_is_unconfirmed_and_durable() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(config(dir.path())).unwrap();
        let context = pollster::block_on(engine.create_context())
            .unwrap()
            .context_id;
        let hour_ns = 3_600_000_000_000;
        engine.set_lease_until(crate::clock::boot_now_ns() + hour_ns);
        engine.set_shipped_until(crate::clock::boot_now_ns() + hour_ns);
        let first = append(&engine, context, b"acknowledged")
            .unwrap()
            .turn
            .turn_id;

        inject(
            dir.path(),
            "turns.log",
            FaultOp::Sync,
            Fault::Delay { ms: 1500 },
            1,
        );
        let appending = {
            let engine = engine.clone();
            std::thread::spawn(move || append(&engine, context, b"in flight"))
        };
        // The rule fires as the sequencer starts the batch's fdatasync: admitted by then.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while remaining(dir.path()) > 0 {
            assert!(std::time::Instant::now() < deadline, "no log fdatasync");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        engine.set_lease_until(0);
        assert!(!appending.is_finished(), "answered before its fdatasync");
        let unconfirmed = appending.join().unwrap().unwrap_err();
        assert_eq!(unconfirmed.kind(), ErrorKind::Unconfirmed, "{unconfirmed}");
        assert!(
            unconfirmed.to_string().contains("no lease"),
            "{unconfirmed}"
        );
        // Durable and published: readers see it, as after a crash that lost its answer.
        let second = TurnId(first.0 + 1);
        assert_eq!(chain(&engine, context), vec![first, second]);
        // Admission refuses from now on, and nothing more is written.
        let refused = append(&engine, context, b"refused").unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::NotPrimary, "{refused}");
        assert_eq!(chain(&engine, context), vec![first, second]);
        engine.shutdown();

        clear(dir.path());
        let engine = Engine::open(config(dir.path())).unwrap();
        assert!(
            engine.gate_open(),
            "a reopened store starts without a lease"
        );
        assert_eq!(chain(&engine, context), vec![first, second]);
        let turn = pollster::block_on(engine.turn(second)).unwrap();
        assert_eq!(
            pollster::block_on(engine.blob(turn.payload_hash)).unwrap(),
            &b"in flight"[..]
        );
        engine.shutdown();
        let report = verify(dir.path()).unwrap();
        assert!(report.is_ok(), "{report}");
    }
}
