//! A standby keeps applying what its primary ships (issue 46 item 1), on a `file://` replica and
//! on SeaweedFS (`CTXSTORE_S3_TEST_ENDPOINT`, as `tests/s3.rs`; without it the S3 half says it
//! was skipped): a stream whose records span two shipped segments, and a collection on the
//! primary that rewrites the pack the standby was restored with while appends go on. Each run
//! ends with the standby equal to the primary on every view: contexts, turns, payloads,
//! streams. Then the randomized differential campaign (`mixed_writes`): seeded and
//! reproducible, 3 seeds of 150 operations by default; `STANDBY_APPLY_SEEDS`,
//! `STANDBY_APPLY_OPS` for a long one, `STANDBY_APPLY_SEED=N` to run one seed again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Target, append, block_on, engine_config, noise, restore_point, wait_shipped};
use ctxstore_engine::streams::{StreamEnd, StreamId, StreamOwner, StreamRead};
use ctxstore_engine::{AppendRequest, ContextId, ContextRef, Engine, TurnId, verify};
use ctxstore_replica::faulty::Fault;
use ctxstore_replica::restore::RestorePoint;
use ctxstore_replica::stats::now_unix_ms;
use ctxstore_replica::{Follower, ReplicationState, Replicator, ShipConfig, follow};
use ctxstore_testsupport::SeededRng;

fn ship_config(target: &Target) -> ShipConfig {
    let mut config = target.ship_config();
    config.checkpoint_bytes = 1 << 30;
    config
}

fn create(engine: &Engine) -> ContextId {
    block_on(engine.create_context()).unwrap().context_id
}

/// A standby of `target` in `dir`: restored from the newest point, then following.
fn start_standby(target: &Target, dir: &Path) -> (Engine, Follower) {
    common::start_standby(target, dir, ship_config(target))
}

/// Waits until the standby applied everything the primary shipped up to now: the primary's
/// durable records shipped, and the standby's log holds as many. A standby that stalls fails
/// the test at once, with its reason.
fn wait_applied(primary: &Engine, replicator: &Replicator, standby: &Engine, follower: &Follower) {
    wait_shipped(replicator);
    let records = primary.follow_position().unwrap().log_records;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = follower.stats().snapshot(now_unix_ms());
        assert_ne!(
            stats.state,
            ReplicationState::Stalled,
            "the standby stalled: {}",
            stats.reason
        );
        if standby.follow_position().unwrap().log_records >= records {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the standby never applied record {records}: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The standby answers every read as the primary does: each context (ids `1..=contexts`, those
/// the test created), each turn (by id, up to the primary's last record) and its
/// payload, each open stream and its bytes.
fn assert_same_views(primary: &Engine, standby: &Engine, contexts: u64) {
    for id in 1..=contexts {
        let context = ContextRef::Id(ContextId(id));
        let want = primary.context(&context).map_err(|error| error.kind());
        let got = standby.context(&context).map_err(|error| error.kind());
        assert_eq!(got, want, "context {id}");
    }
    let records = primary.follow_position().unwrap().log_records;
    assert_eq!(standby.follow_position().unwrap().log_records, records);
    for id in 1..=records {
        let want = block_on(primary.turn(TurnId(id))).map_err(|error| error.kind());
        let got = block_on(standby.turn(TurnId(id))).map_err(|error| error.kind());
        assert_eq!(got, want, "turn {id}");
        if let Ok(turn) = want
            && turn.payload_len > 0
        {
            let want = block_on(primary.blob(turn.payload_hash)).unwrap();
            let got = block_on(standby.blob(turn.payload_hash))
                .unwrap_or_else(|error| panic!("turn {id}'s payload on the standby: {error}"));
            assert!(got == want, "turn {id}'s payload differs");
        }
    }
    let streams = primary.open_streams(None, 0, usize::MAX);
    assert_eq!(standby.open_streams(None, 0, usize::MAX), streams);
    for stream in streams {
        assert_eq!(
            standby
                .read_stream(stream.stream_id, 0, usize::MAX)
                .unwrap(),
            primary
                .read_stream(stream.stream_id, 0, usize::MAX)
                .unwrap(),
            "stream {}",
            stream.stream_id
        );
    }
}

/// The standby stops cleanly (no last poll failed) and its store verifies.
fn stop_standby(standby: Engine, follower: Follower, dir: &Path) {
    follower.stop().unwrap();
    standby.shutdown();
    let report = verify(dir).unwrap();
    assert!(report.is_ok(), "{report}");
}

/// A primary's and a standby's data directories, one pair per target.
struct Run {
    primary_dir: PathBuf,
    standby_dir: PathBuf,
}

fn run(root: &tempfile::TempDir, index: usize) -> Run {
    let dir = root.path().join(format!("run{index}"));
    Run {
        primary_dir: dir.join("primary"),
        standby_dir: dir.join("standby"),
    }
}

#[test]
fn a_stream_whose_records_span_shipped_segments_applies_on_the_standby() {
    let root = tempfile::tempdir().unwrap();
    for (index, target) in Target::all(root.path(), "standby-stream")
        .iter()
        .enumerate()
    {
        let run = run(&root, index);
        stream_across_segments(&target.at(index), &run);
    }
}

/// A cut larger than a segment ships as several (`continues`), split at any byte: a pack
/// record split between two segments is taken whole when its rest arrives (issue 47: the
/// standby refused the first part, "the record runs past the bytes", and stalled).
#[test]
fn a_record_split_between_two_segments_of_a_cut_applies_on_the_standby() {
    let root = tempfile::tempdir().unwrap();
    for (index, target) in Target::all(root.path(), "standby-split").iter().enumerate() {
        let run = run(&root, index);
        let target = target.at(index);
        let mut config = ship_config(&target);
        config.segment_bytes_max = 16 * 1024;
        let primary = Engine::open(engine_config(&run.primary_dir)).unwrap();
        let replicator = Replicator::start(primary.clone(), config.clone()).unwrap();
        let context = create(&primary);
        append(&primary, context, b"first");
        wait_shipped(&replicator);
        let (standby, follower) = common::start_standby(&target, &run.standby_dir, config);
        // One cut of about 100 KiB: records of 40 KiB and a few small ones around them.
        for round in 0..2u64 {
            append(&primary, context, &noise(round, 40 * 1024));
            append(&primary, context, b"small");
        }
        wait_applied(&primary, &replicator, &standby, &follower);
        assert_same_views(&primary, &standby, 1);
        replicator.stop();
        primary.shutdown();
        stop_standby(standby, follower, &run.standby_dir);
    }
}

fn stream_across_segments(target: &Target, run: &Run) {
    let primary = Engine::open(engine_config(&run.primary_dir)).unwrap();
    let replicator = Replicator::start(primary.clone(), ship_config(target)).unwrap();
    let context = create(&primary);
    append(&primary, context, b"before the stream");
    wait_shipped(&replicator);
    let (standby, follower) = start_standby(target, &run.standby_dir);

    // Opened and a first delta in one segment, the second delta in the next.
    let stream = block_on(primary.open_stream(
        AppendRequest {
            context_id: context,
            expected_head: None,
            type_tag: 7,
            codec: 0,
            payload: (),
            options: Default::default(),
        },
        StreamOwner::NONE,
    ))
    .unwrap()
    .stream_id;
    block_on(primary.append_delta(stream, Some(0), Bytes::from_static(b"a"), 0)).unwrap();
    wait_applied(&primary, &replicator, &standby, &follower);
    assert_same_views(&primary, &standby, 1);
    block_on(primary.append_delta(stream, Some(1), Bytes::from_static(b"b"), 0)).unwrap();
    wait_applied(&primary, &replicator, &standby, &follower);
    // Still open on the standby, and readable there as on the primary.
    match standby.read_stream(stream, 0, usize::MAX).unwrap() {
        StreamRead::Open { info, bytes } => {
            assert_eq!(&bytes[..], b"ab");
            assert_eq!(info.length_bytes, 2);
        }
        other => panic!("stream {stream} on the standby: {other:?}"),
    }
    assert_same_views(&primary, &standby, 1);

    // A third delta and the seal in a later segment: the sealed turn's bytes are served.
    block_on(primary.append_delta(stream, Some(2), Bytes::from_static(b"c"), 0)).unwrap();
    let sealed = block_on(primary.seal_stream(stream, 0))
        .unwrap()
        .turn
        .turn_id;
    wait_applied(&primary, &replicator, &standby, &follower);
    assert_eq!(
        standby.read_stream(stream, 0, usize::MAX).unwrap(),
        StreamRead::Ended(StreamEnd::Sealed(sealed))
    );
    let turn = block_on(standby.turn(sealed)).unwrap();
    assert_eq!(
        &block_on(standby.blob(turn.payload_hash)).unwrap()[..],
        b"abc"
    );
    assert_same_views(&primary, &standby, 1);

    // And a stream left open across a segment while others come and go.
    let open = block_on(primary.open_stream(
        AppendRequest {
            context_id: context,
            expected_head: None,
            type_tag: 8,
            codec: 0,
            payload: (),
            options: Default::default(),
        },
        StreamOwner::NONE,
    ))
    .unwrap()
    .stream_id;
    for (offset, delta) in [b"x", b"y", b"z"].iter().enumerate() {
        block_on(primary.append_delta(open, Some(offset as u64), Bytes::from_static(*delta), 0))
            .unwrap();
        append(&primary, context, &noise(offset as u64, 300));
        wait_applied(&primary, &replicator, &standby, &follower);
        assert_same_views(&primary, &standby, 1);
    }
    replicator.stop();
    primary.shutdown();
    stop_standby(standby, follower, &run.standby_dir);
}

fn hash(payload: &[u8]) -> ctxstore_engine::BlobHash {
    ctxstore_engine::BlobHash::of(payload)
}

#[test]
fn a_collection_rewriting_the_pack_the_standby_was_restored_with_applies_on_the_standby() {
    let root = tempfile::tempdir().unwrap();
    for (index, target) in Target::all(root.path(), "standby-rewrite")
        .iter()
        .enumerate()
    {
        let run = run(&root, index);
        rewritten_under_the_standby(&target.at(index), &run);
    }
}

/// The standby restored with the open pack half full; then, before anything more ships, the
/// primary fills and seals that pack, deletes a context and purges a blob whose records lie
/// in it, and collects: the pack is rewritten (its dead records dropped), and ships whole,
/// with the turns whose blobs lie in the part the standby never had. A payload the collection
/// removed is appended again (a fresh copy of a swept blob), and appends go on.
fn rewritten_under_the_standby(target: &Target, run: &Run) {
    let primary = Engine::open(engine_config(&run.primary_dir)).unwrap();
    let replicator = Replicator::start(primary.clone(), ship_config(target)).unwrap();
    let doomed = create(&primary);
    let kept = create(&primary);
    let mut doomed_payloads = Vec::new();
    for i in 0..20u64 {
        let payload = noise(i, 4000);
        append(&primary, doomed, &payload);
        doomed_payloads.push(payload);
        append(&primary, kept, &noise(1000 + i, 4000));
    }
    wait_shipped(&replicator);
    let (standby, follower) = start_standby(target, &run.standby_dir);
    wait_applied(&primary, &replicator, &standby, &follower);
    assert_same_views(&primary, &standby, 2);

    // Nothing ships while the primary seals and rewrites the pack.
    replicator.stop();
    let purged = noise(1000, 4000);
    for i in 20..60u64 {
        append(&primary, kept, &noise(1000 + i, 4000));
    }
    block_on(primary.delete_context(&ContextRef::Id(doomed))).unwrap();
    block_on(primary.purge_blob(hash(&purged))).unwrap();
    let report = primary.gc().unwrap();
    assert!(report.packs_compacted >= 1, "{report:?}");
    // A swept blob stored again: a fresh copy in the open pack.
    append(&primary, kept, &doomed_payloads[3]);
    append(&primary, kept, &noise(5000, 4000));

    let replicator = Replicator::start(primary.clone(), ship_config(target)).unwrap();
    wait_applied(&primary, &replicator, &standby, &follower);
    assert_same_views(&primary, &standby, 2);

    // And collections while appends ship and the standby follows; every other round after
    // the appends shipped, so that its log compaction drops what they left dead.
    let third = create(&primary);
    let mut log_bytes_reclaimed = 0;
    for round in 0..6u64 {
        let mut purged = Vec::new();
        for i in 0..12u64 {
            let seed = 10_000 + round * 100 + i;
            let payload = noise(seed, 3000 + (seed % 7) as usize * 500);
            append(&primary, third, &payload);
            purged = payload;
            append(&primary, kept, &noise(seed + 50, 2000));
        }
        let doomed = create(&primary);
        for i in 0..8u64 {
            append(&primary, doomed, &noise(20_000 + round * 100 + i, 5000));
        }
        block_on(primary.delete_context(&ContextRef::Id(doomed))).unwrap();
        block_on(primary.purge_blob(hash(&purged))).unwrap();
        if round % 2 == 1 {
            wait_shipped(&replicator);
        }
        log_bytes_reclaimed += primary.gc().unwrap().log_bytes_reclaimed;
        // Bytes a collection removed, sent again.
        append(&primary, third, &noise(20_000 + round * 100, 5000));
    }
    assert!(log_bytes_reclaimed > 0, "no log compaction ran");
    let contexts = 3 + 6;
    wait_applied(&primary, &replicator, &standby, &follower);
    assert_same_views(&primary, &standby, contexts);
    replicator.stop();
    primary.shutdown();
    stop_standby(standby, follower, &run.standby_dir);
}

#[test]
fn a_standby_follows_mixed_writes_with_collections_and_ends_equal_to_its_primary() {
    let root = tempfile::tempdir().unwrap();
    let seeds: u64 = std::env::var("STANDBY_APPLY_SEEDS")
        .ok()
        .and_then(|seeds| seeds.parse().ok())
        .unwrap_or(3);
    let ops: u64 = std::env::var("STANDBY_APPLY_OPS")
        .ok()
        .and_then(|ops| ops.parse().ok())
        .unwrap_or(150);
    // One seed again (STANDBY_APPLY_SEED=N): what a failing campaign names.
    let only: Option<u64> = std::env::var("STANDBY_APPLY_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok());
    let mut totals = Campaign::default();
    for (index, target) in Target::all(root.path(), "standby-mixed").iter().enumerate() {
        // Every seed on the directory, one on the S3 server.
        let seeds = if index == 0 { seeds } else { 1 };
        for seed in only.map_or(1..=seeds, |seed| seed..=seed) {
            let at = index * 1000 + seed as usize;
            let done = mixed_writes(&target.at(at), &run(&root, at), seed, ops);
            totals.add(&done);
            // Each seed's directories go once checked: a long campaign would fill the disk.
            let _ = std::fs::remove_dir_all(root.path().join(format!("run{at}")));
        }
    }
    eprintln!(
        "campaign: {} operations over {} seed runs: {totals:?}",
        totals.operations,
        totals.operations / ops.max(1)
    );
}

/// What a campaign checked, summed over its seeds (printed: the figures of a long run).
#[derive(Debug, Default)]
struct Campaign {
    operations: u64,
    /// Object-store faults set until the next wait: refused PUTs, answers lost (then the
    /// endpoint gone), pauses (unreachable), slow requests.
    faults: u64,
    lag_samples_behind: u64,
    restores_at_seq: u64,
    restores_refused_inexact: u64,
    restores_at_time: u64,
    at_time_compared_whole: u64,
    /// Restores started as primaries whose new ids were checked against the primary's.
    id_restores: u64,
}

impl Campaign {
    fn add(&mut self, other: &Campaign) {
        self.operations += other.operations;
        self.faults += other.faults;
        self.lag_samples_behind += other.lag_samples_behind;
        self.restores_at_seq += other.restores_at_seq;
        self.restores_refused_inexact += other.restores_refused_inexact;
        self.restores_at_time += other.restores_at_time;
        self.at_time_compared_whole += other.at_time_compared_whole;
        self.id_restores += other.id_restores;
    }
}

/// A turn as a reader gets it, with its payload (or why it cannot be read).
type TurnSeen = Result<
    (
        ctxstore_engine::model::Turn,
        Result<Bytes, ctxstore_engine::ErrorKind>,
    ),
    ctxstore_engine::ErrorKind,
>;

/// Everything a reader sees of a store at a point: each context (ids `1..=contexts`), each
/// turn (ids `1..=records`) with its payload (or why it cannot be read).
#[derive(Debug, PartialEq)]
struct Views {
    contexts: Vec<Result<ctxstore_engine::model::ContextView, ctxstore_engine::ErrorKind>>,
    turns: Vec<TurnSeen>,
}

fn views(engine: &Engine, contexts: u64, records: u64) -> Views {
    Views {
        contexts: (1..=contexts)
            .map(|id| {
                engine
                    .context(&ContextRef::Id(ContextId(id)))
                    .map_err(|error| error.kind())
            })
            .collect(),
        turns: (1..=records)
            .map(|id| {
                block_on(engine.turn(TurnId(id)))
                    .map(|turn| {
                        // As a reader of the turn gets it (a restore inside a cut also holds
                        // blobs stored after its point, which no turn up to it names).
                        let payload = if turn.payload_len > 0 {
                            block_on(engine.blob(turn.payload_hash)).map_err(|error| error.kind())
                        } else {
                            Ok(Bytes::new())
                        };
                        (turn, payload)
                    })
                    .map_err(|error| error.kind())
            })
            .collect(),
    }
}

/// A point an operation ended at, with what the primary showed there (sampled ops only).
struct Point {
    records: u64,
    contexts: u64,
    views: Views,
}

/// The randomized differential campaign (issue 46): appends (new bytes, and bytes appended
/// before: deduplicated, or stored again after a collection removed them), contexts created
/// and deleted, tags and key-value entries, redactions and purges, streams opened, written
/// across segments, sealed and aborted, and collections (pack and log compaction) — while the
/// primary ships and the standby follows. Checked: after every operation the lag figures
/// against the truth (an unshipped record shows as lag); at the end the standby against the
/// primary on every view, then restores at sampled operations' points (`--at-seq`) against
/// what the primary showed there (or refused as inexact, naming the nearest points), and at
/// operations' times (`--at`) against what was acknowledged before the point's time and
/// nothing started after it.
fn mixed_writes(target: &Target, run: &Run, seed: u64, ops: u64) -> Campaign {
    let mut done = Campaign {
        operations: ops,
        ..Campaign::default()
    };
    let mut points: Vec<Point> = Vec::new();
    // Per operation that wrote: (records after it, when it started, when it was answered).
    let mut acknowledged: Vec<(u64, u64, u64)> = Vec::new();
    let mut rng = SeededRng::new(seed);
    let primary = Engine::open(engine_config(&run.primary_dir)).unwrap();
    // On a directory the primary ships through the fault-injecting store: the campaign
    // pauses and breaks the object store between operations.
    let (replicator, faults) = if target.url.starts_with("file://") {
        let (replicator, faults) =
            common::faulty_replicator(&primary, &target.url, &target.s3, ship_config(target));
        (replicator, Some(faults))
    } else {
        (
            Replicator::start(primary.clone(), ship_config(target)).unwrap(),
            None,
        )
    };
    let set_fault = |fault: Fault| {
        if let Some(faults) = &faults {
            faults.set(fault);
        }
    };
    let mut contexts = vec![create(&primary)];
    let mut created = 1u64;
    let mut payloads: Vec<Vec<u8>> = Vec::new();
    let mut turns: Vec<TurnId> = Vec::new();
    for i in 0..10u64 {
        let payload = noise(seed * 1_000_000 + i, 2000);
        turns.push(append(&primary, contexts[0], &payload));
        payloads.push(payload);
    }
    wait_shipped(&replicator);
    let (standby, follower) = start_standby(target, &run.standby_dir);
    let mut streams: Vec<(StreamId, u64)> = Vec::new();
    let mut durable = primary.durable_records();
    for op in 0..ops {
        let started_ms = now_unix_ms();
        let pick = |rng: &mut SeededRng, len: usize| rng.below(len as u64) as usize;
        let context = contexts[pick(&mut rng, contexts.len())];
        match rng.below(20) {
            0..=6 => {
                let payload = if rng.below(4) == 0 && !payloads.is_empty() {
                    payloads[pick(&mut rng, payloads.len())].clone()
                } else {
                    let len = 500 + rng.below(9000) as usize;
                    noise(seed * 1_000_000 + 1000 + op, len)
                };
                turns.push(append(&primary, context, &payload));
                payloads.push(payload);
            }
            7 => {
                contexts.push(create(&primary));
                created += 1;
            }
            8 if contexts.len() > 1 => {
                let index = pick(&mut rng, contexts.len());
                let doomed = contexts.swap_remove(index);
                block_on(primary.delete_context(&ContextRef::Id(doomed))).unwrap();
            }
            9 => {
                let tag = format!("t{}", rng.below(3));
                block_on(primary.update_tags(
                    &ContextRef::Id(context),
                    vec![(tag, format!("v{op}"))],
                    Vec::new(),
                    None,
                ))
                .unwrap();
            }
            10 => {
                let key = format!("k{}", rng.below(4)).into_bytes();
                let value = Bytes::from(noise(op, 100 + rng.below(3000) as usize));
                block_on(primary.kv_put(&ContextRef::Id(context), vec![(key, value)], false))
                    .unwrap();
            }
            11 if !turns.is_empty() => {
                // A turn collected or redacted already answers an error: fine.
                let _ = block_on(primary.redact_turn(turns[pick(&mut rng, turns.len())]));
            }
            12 if !payloads.is_empty() => {
                let _ =
                    block_on(primary.purge_blob(hash(&payloads[pick(&mut rng, payloads.len())])));
            }
            13 | 14 => {
                if streams.is_empty() || rng.below(3) == 0 {
                    let opened = block_on(primary.open_stream(
                        AppendRequest {
                            context_id: context,
                            expected_head: None,
                            type_tag: 9,
                            codec: 0,
                            payload: (),
                            options: Default::default(),
                        },
                        StreamOwner::NONE,
                    ));
                    // Its context deleted meanwhile: refused.
                    if let Ok(opened) = opened {
                        streams.push((opened.stream_id, 0));
                    }
                } else {
                    let index = pick(&mut rng, streams.len());
                    let (stream, length) = streams[index];
                    let delta = Bytes::from(noise(op, 1 + rng.below(700) as usize));
                    match block_on(primary.append_delta(stream, Some(length), delta.clone(), 0)) {
                        Ok(new_length) => streams[index].1 = new_length,
                        Err(_) => {
                            streams.swap_remove(index);
                        }
                    }
                }
            }
            15 if !streams.is_empty() => {
                let (stream, _) = streams.swap_remove(pick(&mut rng, streams.len()));
                if rng.below(3) == 0 {
                    let _ = block_on(primary.abort_stream(stream, 0));
                } else if let Ok(sealed) = block_on(primary.seal_stream(stream, 0)) {
                    turns.push(sealed.turn.turn_id);
                }
            }
            16 | 17 => {
                primary.gc().unwrap();
            }
            18 => {
                done.faults += 1;
                // Until the next wait: refused PUTs, an answer lost (then the endpoint gone
                // before the read-back), the object store paused (unreachable), or slow.
                set_fault(match rng.below(5) {
                    0 => Fault::RefusePuts,
                    1 => Fault::LandThenFail,
                    2 => Fault::LandThenGone,
                    3 => Fault::Unreachable,
                    _ => Fault::Slow(Duration::from_millis(30)),
                });
            }
            _ => {
                set_fault(Fault::None);
                wait_shipped(&replicator);
            }
        }
        let answered_ms = now_unix_ms();
        let now = primary.durable_records();
        if now > durable {
            acknowledged.push((now, started_ms, answered_ms));
        }
        durable = now;
        // The lag figures against the truth: a record durable here and not shipped is lag.
        let figures = replicator.stats().snapshot(now_unix_ms());
        if durable > figures.records {
            done.lag_samples_behind += 1;
            assert!(
                figures.lag_bytes > 0,
                "seed {seed} op {op}: record {durable} is not shipped ({} are) and the \
                 figures say no lag: {figures:?}",
                figures.records
            );
        }
        if rng.below(8) == 0 {
            points.push(Point {
                records: durable,
                contexts: created,
                views: views(&primary, created, durable),
            });
        }
    }
    set_fault(Fault::None);
    wait_applied(&primary, &replicator, &standby, &follower);
    assert_same_views(&primary, &standby, created);
    replicator.stop();
    // Every id the primary handed out, shipped or not (item 8).
    let handed_out = primary.id_floors();
    primary.shutdown();
    stop_standby(standby, follower, &run.standby_dir);

    // Restores at the sampled points: each what the primary showed there, exactly.
    for (index, point) in points.iter().enumerate() {
        let to = run.primary_dir.with_file_name(format!("at-seq-{index}"));
        let record_id = point.records;
        match restore_point(target, &to, RestorePoint::AtSeq { record_id }) {
            Ok(report) => {
                assert_eq!(report.log_records, record_id, "seed {seed}: {report:?}");
                let engine = match Engine::open(engine_config(&to)) {
                    Ok(engine) => engine,
                    Err(error) => {
                        panic!("seed {seed}: the restore at {record_id} does not open: {error}")
                    }
                };
                let got = views(&engine, point.contexts, point.records);
                engine.shutdown();
                if got != point.views {
                    let first = (0..got.turns.len())
                        .find(|&i| got.turns.get(i) != point.views.turns.get(i))
                        .map(|i| (i + 1, &got.turns[i], point.views.turns.get(i)));
                    panic!(
                        "seed {seed}: the restore at record {record_id} differs from the \
                         primary there; first differing turn: {first:?}; contexts equal: {}",
                        got.contexts == point.views.contexts
                    );
                }
                let report = verify(&to).unwrap();
                assert!(report.is_ok(), "seed {seed} at {record_id}: {report}");
                done.restores_at_seq += 1;
            }
            Err(error) => {
                let message = error.to_string();
                assert!(
                    message.contains("cannot be restored exactly"),
                    "seed {seed}: the restore at record {record_id} failed: {message}"
                );
                done.restores_refused_inexact += 1;
            }
        }
        let _ = std::fs::remove_dir_all(&to);
    }
    // Restores at operations' times: a point's time is its cut's (item 4): every operation
    // answered before it is in it, none that started after it.
    for index in 0..3 {
        if acknowledged.is_empty() {
            break;
        }
        let (_, _, answered_ms) = acknowledged[rng.below(acknowledged.len() as u64) as usize];
        let to = run.primary_dir.with_file_name(format!("at-time-{index}"));
        let Ok(report) = restore_point(
            target,
            &to,
            RestorePoint::AtTime {
                unix_ms: answered_ms,
            },
        ) else {
            continue; // before the first point
        };
        done.restores_at_time += 1;
        assert!(
            report.created_unix_ms <= answered_ms,
            "seed {seed}: {report:?}"
        );
        for &(records, started_ms, answered) in &acknowledged {
            if answered < report.created_unix_ms {
                assert!(
                    records <= report.log_records,
                    "seed {seed}: records to {records}, answered at {answered}, are not in the \
                     point of {}: {report:?}",
                    report.created_unix_ms
                );
            }
            if records <= report.log_records {
                assert!(
                    started_ms <= report.created_unix_ms,
                    "seed {seed}: records to {records}, sent at {started_ms}, are in the point \
                     labelled {}: {report:?}",
                    report.created_unix_ms
                );
            }
        }
        if let Some(point) = points
            .iter()
            .find(|point| point.records == report.log_records)
        {
            let engine = Engine::open(engine_config(&to)).unwrap();
            assert!(
                views(&engine, point.contexts, point.records) == point.views,
                "seed {seed}: the restore at {} differs from the primary there",
                report.created_unix_ms
            );
            engine.shutdown();
            done.at_time_compared_whole += 1;
        }
        let _ = std::fs::remove_dir_all(&to);
    }
    // Ids across restores (item 8): a store restored to take writes, at the newest point or
    // an older one, hands out no TurnID or ContextID the primary handed out.
    let mut as_primary = vec![RestorePoint::Latest];
    if !points.is_empty() {
        let record_id = points[rng.below(points.len() as u64) as usize].records;
        as_primary.push(RestorePoint::AtSeq { record_id });
    }
    for (index, point) in as_primary.into_iter().enumerate() {
        let to = run
            .primary_dir
            .with_file_name(format!("as-primary-{index}"));
        if restore_point(target, &to, point).is_err() {
            continue; // an older point that cannot be restored exactly (counted above)
        }
        let engine = Engine::open(engine_config(&to)).unwrap();
        let remote = ctxstore_replica::target::open(&target.url, &target.s3).unwrap();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(ctxstore_replica::ids::start_past_replica(&remote, &engine))
            .unwrap();
        let context = create(&engine);
        let turn = common::append(&engine, context, b"after a restore");
        assert!(
            context.0 >= handed_out.contexts && turn.0 >= handed_out.records,
            "seed {seed}: the store restored at {point:?} handed out context {context} and \
             turn {turn}; the primary had handed out up to {handed_out:?} (exclusive)"
        );
        engine.shutdown();
        done.id_restores += 1;
        let _ = std::fs::remove_dir_all(&to);
    }
    done
}

/// A standby that cannot apply what its primary shipped (here a damaged segment) refuses a
/// promotion and says why, rather than staying silent and read-only (issue 46: `promote` on a
/// stalled standby printed "promotion requested" and nothing happened).
#[test]
fn a_standby_that_cannot_apply_refuses_promotion_saying_why() {
    let root = tempfile::tempdir().unwrap();
    let target = Target::file(root.path());
    let run = run(&root, 0);
    let primary = Engine::open(engine_config(&run.primary_dir)).unwrap();
    let replicator = Replicator::start(primary.clone(), ship_config(&target)).unwrap();
    let context = create(&primary);
    append(&primary, context, b"applied");
    wait_shipped(&replicator);
    let (standby, follower) = start_standby(&target, &run.standby_dir);
    wait_applied(&primary, &replicator, &standby, &follower);
    stop_standby(standby, follower, &run.standby_dir);

    // The next segment reaches the replica damaged (one byte flipped).
    append(&primary, context, b"never applied");
    wait_shipped(&replicator);
    replicator.stop();
    primary.shutdown();
    let segments = root.path().join("replica/g000001/s");
    let newest = std::fs::read_dir(&segments)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .max()
        .unwrap();
    let mut bytes = std::fs::read(&newest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x5a;
    std::fs::write(&newest, bytes).unwrap();

    let (standby, follower) = start_standby(&target, &run.standby_dir);
    let deadline = Instant::now() + Duration::from_secs(30);
    while follower.stats().state() != ReplicationState::Stalled {
        assert!(Instant::now() < deadline, "the damaged segment was applied");
        std::thread::sleep(Duration::from_millis(10));
    }
    follow::request_promotion(&run.standby_dir).unwrap();
    let answer = loop {
        if let Some(answer) = follow::promotion_answer(&run.standby_dir).unwrap() {
            break answer;
        }
        assert!(
            Instant::now() < deadline,
            "the promotion was never answered"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let follow::PromotionAnswer::Refused(why) = answer else {
        panic!("a stalled standby was promoted");
    };
    assert!(
        why.contains("has not applied everything its primary shipped") && why.contains("stalled"),
        "{why}"
    );
    assert!(!follow::promote_request_path(&run.standby_dir).exists());
    let refused = block_on(standby.append(AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: ctxstore_engine::AppendPayload::Bytes(Bytes::from_static(b"write")),
        options: Default::default(),
    }))
    .expect_err("the refused standby took a write");
    assert_eq!(refused.kind(), ctxstore_engine::ErrorKind::NotPrimary);
    assert!(
        follower.stop().is_err(),
        "its last poll failed, as it stalled"
    );
    standby.shutdown();
}
