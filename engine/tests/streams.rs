//! Streams (issue 32): open turns whose deltas are durable as they arrive, read from any
//! offset and waited for, sealed into one ordinary turn (the head's rules of an append) or
//! aborted; their limits and typed errors; a crash image mid-stream; reclamation after a seal
//! and a collection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use ctxstore_engine::streams::{NO_OWNER, StreamEnd, StreamOwner, StreamRead};
use ctxstore_engine::{
    AppendRequest, Appended, ContextId, Engine, EngineError, ErrorKind, Parent, TurnId, verify,
};

fn open_request(context_id: ContextId, expected_head: Option<TurnId>) -> AppendRequest<()> {
    AppendRequest {
        context_id,
        expected_head,
        type_tag: 9,
        codec: 2,
        payload: (),
        options: Default::default(),
    }
}

// In-process callers own no stream: any of them may write it.
async fn open_any(
    engine: &Engine,
    request: AppendRequest<()>,
) -> Result<ctxstore_engine::streams::StreamInfo, EngineError> {
    engine.open_stream(request, StreamOwner::NONE).await
}

async fn delta_any(
    engine: &Engine,
    stream_id: u64,
    offset: Option<u64>,
    bytes: Bytes,
) -> Result<u64, EngineError> {
    engine
        .append_delta(stream_id, offset, bytes, NO_OWNER)
        .await
}

async fn seal_any(engine: &Engine, stream_id: u64) -> Result<Appended, EngineError> {
    engine.seal_stream(stream_id, NO_OWNER).await
}

async fn abort_any(engine: &Engine, stream_id: u64) -> Result<(), EngineError> {
    engine.abort_stream(stream_id, NO_OWNER).await
}

fn bytes_of(read: StreamRead) -> Vec<u8> {
    match read {
        StreamRead::Open { bytes, .. } => bytes.to_vec(),
        StreamRead::Ended(end) => panic!("stream ended: {end:?}"),
    }
}

/// Deltas of 4–40 bytes, like a model's tokens, different for each `seed`.
fn deltas(seed: u64, count: usize) -> Vec<Vec<u8>> {
    let text = chat_payload(seed, count * 40);
    let mut out = Vec::new();
    let mut at = 0;
    for i in 0..count {
        let len = 4 + (i * 7 + seed as usize) % 37;
        out.push(text[at..at + len].to_vec());
        at += len;
    }
    out
}

#[test]
fn deltas_are_read_from_any_offset_and_the_seal_is_one_ordinary_turn() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let context = new_context(&engine);
    let first = append(&engine, context, b"the question", None).unwrap();
    let stream = block_on(open_any(&engine, open_request(context, None))).unwrap();
    assert_eq!(stream.context_id, context);
    assert_eq!(stream.length_bytes, 0);
    assert_eq!(engine.open_streams(Some(context), 0, 10), vec![stream]);
    let pieces = deltas(1, 60);
    let mut whole = Vec::new();
    for piece in &pieces {
        whole.extend_from_slice(piece);
        let length = block_on(delta_any(
            &engine,
            stream.stream_id,
            None,
            Bytes::from(piece.clone()),
        ))
        .unwrap();
        assert_eq!(length, whole.len() as u64);
    }
    for offset in [0, 1, 17, whole.len() - 1, whole.len()] {
        let read = engine.read_stream(stream.stream_id, offset as u64, usize::MAX);
        assert_eq!(bytes_of(read.unwrap()), &whole[offset..]);
    }
    assert_eq!(
        bytes_of(engine.read_stream(stream.stream_id, 5, 3).unwrap()),
        &whole[5..8]
    );
    let listed = engine.open_streams(Some(context), 0, 10);
    assert_eq!(listed[0].length_bytes, whole.len() as u64);
    assert!(engine.open_streams(Some(ContextId(99)), 0, 10).is_empty());
    // The head did not move while the stream was open.
    assert_eq!(
        block_on(engine.head(context)).unwrap().head_turn_id,
        first.turn.turn_id
    );

    let sealed = block_on(seal_any(&engine, stream.stream_id)).unwrap();
    assert!(!sealed.existing);
    assert_eq!(sealed.turn.parent_turn_id, first.turn.turn_id);
    assert_eq!(sealed.turn.depth, 1);
    assert_eq!((sealed.turn.type_tag, sealed.turn.codec), (9, 2));
    assert_eq!(sealed.turn.payload_len as usize, whole.len());
    assert_eq!(
        sealed.extras.key,
        format!("stream:{}", stream.stream_id).into_bytes()
    );
    let last = block_on(engine.last(context, 1, true)).unwrap();
    assert_eq!(last.turns[0].turn.turn_id, sealed.turn.turn_id);
    assert_eq!(last.turns[0].payload.as_deref(), Some(&whole[..]));
    // Sealed: read answers the turn; deltas, a second seal and an abort are refused.
    let end = StreamEnd::Sealed(sealed.turn.turn_id);
    assert_eq!(
        engine.read_stream(stream.stream_id, 0, 10).unwrap(),
        StreamRead::Ended(end)
    );
    let delta = block_on(delta_any(
        &engine,
        stream.stream_id,
        None,
        Bytes::from_static(b"x"),
    ));
    assert!(
        matches!(delta, Err(EngineError::StreamEnded { end: e, .. }) if e == end),
        "{delta:?}"
    );
    let again = block_on(seal_any(&engine, stream.stream_id)).unwrap_err();
    assert_eq!(again.kind(), ErrorKind::StreamEnded);
    let abort = block_on(abort_any(&engine, stream.stream_id)).unwrap_err();
    assert_eq!(abort.kind(), ErrorKind::StreamEnded);
    assert!(engine.open_streams(None, 0, 10).is_empty());

    // The same bytes again: stored once.
    let twin = block_on(open_any(&engine, open_request(context, None))).unwrap();
    block_on(delta_any(
        &engine,
        twin.stream_id,
        None,
        Bytes::from(whole.clone()),
    ))
    .unwrap();
    let twin_sealed = block_on(seal_any(&engine, twin.stream_id)).unwrap();
    assert!(twin_sealed.deduped);
    assert_eq!(twin_sealed.turn.payload_hash, sealed.turn.payload_hash);
    engine.shutdown();
    assert!(verify(dir.path()).unwrap().is_ok());
}

#[test]
fn a_stale_expected_head_keeps_the_stream_open_and_abort_ends_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let context = new_context(&engine);
    let stream = block_on(open_any(&engine, open_request(context, Some(TurnId::NONE)))).unwrap();
    block_on(delta_any(
        &engine,
        stream.stream_id,
        None,
        Bytes::from_static(b"partial"),
    ))
    .unwrap();
    // Someone else moves the head: the seal is a CONFLICT and the stream stays open.
    let other = append(&engine, context, b"another writer", None).unwrap();
    let conflict = block_on(seal_any(&engine, stream.stream_id)).unwrap_err();
    assert!(
        matches!(conflict, EngineError::Conflict { actual, .. } if actual == other.turn.turn_id),
        "{conflict:?}"
    );
    assert_eq!(
        block_on(engine.head(context)).unwrap().head_turn_id,
        other.turn.turn_id
    );
    assert_eq!(
        block_on(delta_any(
            &engine,
            stream.stream_id,
            None,
            Bytes::from_static(b" more")
        ))
        .unwrap(),
        12
    );
    block_on(abort_any(&engine, stream.stream_id)).unwrap();
    assert_eq!(
        engine.read_stream(stream.stream_id, 0, 10).unwrap(),
        StreamRead::Ended(StreamEnd::Aborted)
    );
    assert_eq!(
        block_on(engine.head(context)).unwrap().head_turn_id,
        other.turn.turn_id
    );
    // A stream with an explicit parent and key: the seal hangs there and carries the key.
    let keyed = block_on(open_any(
        &engine,
        AppendRequest {
            options: ctxstore_engine::TurnOptions {
                parent: Parent::Root,
                key: Some(Bytes::from_static(b"answer-7")),
                labels: vec![("role".into(), "assistant".into())],
                ..Default::default()
            },
            ..open_request(context, None)
        },
    ))
    .unwrap();
    block_on(delta_any(
        &engine,
        keyed.stream_id,
        None,
        Bytes::from_static(b"root answer"),
    ))
    .unwrap();
    let sealed = block_on(seal_any(&engine, keyed.stream_id)).unwrap();
    assert_eq!(sealed.turn.parent_turn_id, TurnId::NONE);
    assert_eq!(sealed.extras.key, b"answer-7");
    assert_eq!(
        sealed.extras.labels,
        vec![("role".to_string(), "assistant".to_string())]
    );
    engine.shutdown();
}

#[test]
fn offsets_limits_and_unknown_streams_are_typed_errors_that_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.streams_open_max = 2;
    config.limits.blob_bytes_max = 1000;
    let engine = ctxstore_engine::Engine::open(config).unwrap();
    let context = new_context(&engine);
    let missing = block_on(open_any(&engine, open_request(ContextId(42), None))).unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    let a = block_on(open_any(&engine, open_request(context, None))).unwrap();
    let _b = block_on(open_any(&engine, open_request(context, None))).unwrap();
    let third = block_on(open_any(&engine, open_request(context, None))).unwrap_err();
    assert!(
        matches!(third, EngineError::Limit { limit: 2, .. }),
        "{third:?}"
    );

    block_on(delta_any(
        &engine,
        a.stream_id,
        Some(0),
        Bytes::from_static(b"hello "),
    ))
    .unwrap();
    // A retried delta (same offset, same bytes) answers its length again; a wrong offset is
    // refused with the stream's length.
    assert_eq!(
        block_on(delta_any(
            &engine,
            a.stream_id,
            Some(0),
            Bytes::from_static(b"hello ")
        ))
        .unwrap(),
        6
    );
    let gap = block_on(delta_any(
        &engine,
        a.stream_id,
        Some(9),
        Bytes::from_static(b"x"),
    ));
    assert!(
        matches!(gap, Err(EngineError::StreamOffset { length: 6, .. })),
        "{gap:?}"
    );
    let other = block_on(delta_any(
        &engine,
        a.stream_id,
        Some(0),
        Bytes::from_static(b"HELLO "),
    ));
    assert_eq!(other.unwrap_err().kind(), ErrorKind::Conflict);
    // Past the blob limit: TOO_LARGE, nothing written.
    let large = block_on(delta_any(
        &engine,
        a.stream_id,
        None,
        Bytes::from(vec![b'x'; 995]),
    ));
    assert_eq!(large.unwrap_err().kind(), ErrorKind::TooLarge);
    let empty = block_on(delta_any(&engine, a.stream_id, None, Bytes::new()));
    assert_eq!(empty.unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        bytes_of(engine.read_stream(a.stream_id, 0, 100).unwrap()),
        b"hello "
    );
    let unknown = block_on(delta_any(&engine, 7777, None, Bytes::from_static(b"x")));
    assert!(matches!(unknown, Err(EngineError::StreamNotFound(7777))));
    assert!(matches!(
        engine.read_stream(7777, 0, 1),
        Err(EngineError::StreamNotFound(7777))
    ));
    // Once one ends, another may open.
    block_on(abort_any(&engine, a.stream_id)).unwrap();
    block_on(open_any(&engine, open_request(context, None))).unwrap();
    engine.shutdown();
}

#[test]
fn a_waiting_reader_gets_every_byte_exactly_once_in_order_then_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let context = new_context(&engine);
    let stream = block_on(open_any(&engine, open_request(context, None))).unwrap();
    let pieces = deltas(3, 200);
    let expected: Vec<u8> = pieces.concat();
    let reader = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            loop {
                let read = block_on(engine.wait_stream(stream.stream_id, got.len() as u64, 64));
                match read.unwrap() {
                    StreamRead::Open { bytes, .. } => got.extend_from_slice(&bytes),
                    StreamRead::Ended(end) => return (got, end),
                }
            }
        })
    };
    for piece in pieces {
        block_on(delta_any(
            &engine,
            stream.stream_id,
            None,
            Bytes::from(piece),
        ))
        .unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
    let sealed = block_on(seal_any(&engine, stream.stream_id)).unwrap();
    let (got, end) = reader.join().unwrap();
    assert_eq!(got, expected);
    assert_eq!(end, StreamEnd::Sealed(sealed.turn.turn_id));
    engine.shutdown();
}

/// Copies a store's files as they are now, as a crash would leave them: every acknowledged
/// record was fdatasync'ed before its answer, so the copy holds it.
fn crash_image(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            crash_image(&entry.path(), &target);
        } else if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn after_a_crash_every_acknowledged_delta_is_there_and_the_stream_continues() {
    let dir = tempfile::tempdir().unwrap();
    let image = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let context = new_context(&engine);
    let open_stream = block_on(open_any(&engine, open_request(context, None))).unwrap();
    let ended = block_on(open_any(&engine, open_request(context, None))).unwrap();
    block_on(delta_any(
        &engine,
        ended.stream_id,
        None,
        Bytes::from_static(b"gone"),
    ))
    .unwrap();
    block_on(abort_any(&engine, ended.stream_id)).unwrap();
    let pieces = deltas(5, 120);
    let mut acknowledged = Vec::new();
    for piece in &pieces {
        block_on(delta_any(
            &engine,
            open_stream.stream_id,
            None,
            Bytes::from(piece.clone()),
        ))
        .unwrap();
        acknowledged.extend_from_slice(piece);
    }
    crash_image(dir.path(), image.path());
    engine.shutdown();

    let engine = open(image.path());
    let listed = engine.open_streams(Some(context), 0, 10);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].stream_id, open_stream.stream_id);
    assert_eq!(listed[0].length_bytes, acknowledged.len() as u64);
    assert_eq!(
        bytes_of(
            engine
                .read_stream(open_stream.stream_id, 0, usize::MAX)
                .unwrap()
        ),
        acknowledged
    );
    assert_eq!(
        engine.read_stream(ended.stream_id, 0, 1).unwrap(),
        StreamRead::Ended(StreamEnd::Aborted)
    );
    // Continued at its length, then sealed: the turn holds every byte.
    let offset = acknowledged.len() as u64;
    block_on(delta_any(
        &engine,
        open_stream.stream_id,
        Some(offset),
        Bytes::from_static(b" [continued]"),
    ))
    .unwrap();
    acknowledged.extend_from_slice(b" [continued]");
    let sealed = block_on(seal_any(&engine, open_stream.stream_id)).unwrap();
    let last = block_on(engine.last(context, 1, true)).unwrap();
    assert_eq!(last.turns[0].turn.turn_id, sealed.turn.turn_id);
    assert_eq!(last.turns[0].payload.as_deref(), Some(&acknowledged[..]));
    engine.shutdown();
    // And once more after a clean reopen: sealed, listed nowhere, the store verifies.
    let engine = open(image.path());
    assert!(engine.open_streams(None, 0, 10).is_empty());
    assert_eq!(
        engine.read_stream(open_stream.stream_id, 0, 1).unwrap(),
        StreamRead::Ended(StreamEnd::Sealed(sealed.turn.turn_id))
    );
    engine.shutdown();
    assert!(verify(image.path()).unwrap().is_ok());
}

#[test]
fn only_the_owner_writes_its_stream_until_it_releases_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let context = new_context(&engine);
    let alice = StreamOwner {
        owner: 1,
        streams_max: 2,
    };
    let stream = block_on(engine.open_stream(open_request(context, None), alice)).unwrap();
    block_on(engine.open_stream(open_request(context, None), alice)).unwrap();
    let third = block_on(engine.open_stream(open_request(context, None), alice)).unwrap_err();
    assert!(
        matches!(third, EngineError::Limit { limit: 2, .. }),
        "{third:?}"
    );
    let id = stream.stream_id;
    block_on(engine.append_delta(id, None, Bytes::from_static(b"a"), 1)).unwrap();
    for refused in [
        block_on(engine.append_delta(id, None, Bytes::from_static(b"b"), 2)).map(|_| ()),
        block_on(engine.seal_stream(id, 2)).map(|_| ()),
        block_on(engine.abort_stream(id, 2)),
    ] {
        let error = refused.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::StreamNotOwned, "{error:?}");
    }
    // Released (its connection closed): the next writer takes it over, the first is refused.
    assert_eq!(block_on(engine.release_streams(1)).unwrap(), 2);
    assert_eq!(
        block_on(engine.append_delta(id, None, Bytes::from_static(b"b"), 2)).unwrap(),
        2
    );
    let error = block_on(engine.append_delta(id, None, Bytes::from_static(b"c"), 1)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::StreamNotOwned);
    assert_eq!(
        block_on(engine.seal_stream(id, 2))
            .unwrap()
            .turn
            .payload_len,
        2
    );
    engine.shutdown();
}

#[test]
fn an_idle_stream_is_aborted_by_the_reaper() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.stream_idle_timeout_ms = 50;
    config.reaper_interval_ms = 10;
    let engine = ctxstore_engine::Engine::open(config).unwrap();
    let context = new_context(&engine);
    let stream = block_on(open_any(&engine, open_request(context, None))).unwrap();
    block_on(delta_any(
        &engine,
        stream.stream_id,
        None,
        Bytes::from_static(b"tok"),
    ))
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while engine.read_stream(stream.stream_id, 0, 1).unwrap()
        != StreamRead::Ended(StreamEnd::Aborted)
    {
        assert!(std::time::Instant::now() < deadline, "never aborted");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(engine.open_streams(None, 0, 10).is_empty());
    engine.shutdown();
}

/// Which of `pieces` (each at least `PREFIX_BYTES` long) some file of the store whose name
/// `names` accepts holds, by their first `PREFIX_BYTES` (random bytes: no false match). One
/// pass over each file.
fn held(dir: &Path, pieces: &[Vec<u8>], names: &dyn Fn(&str) -> bool) -> Vec<bool> {
    const PREFIX_BYTES: usize = 24;
    let prefixes: std::collections::HashMap<&[u8], usize> = pieces
        .iter()
        .enumerate()
        .map(|(i, piece)| (&piece[..PREFIX_BYTES], i))
        .collect();
    let mut found = vec![false; pieces.len()];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
                continue;
            }
            if !names(&entry.file_name().to_string_lossy()) {
                continue;
            }
            let bytes = std::fs::read(entry.path()).unwrap();
            for window in bytes.windows(PREFIX_BYTES) {
                if let Some(&i) = prefixes.get(window) {
                    found[i] = true;
                }
            }
        }
    }
    found
}

#[test]
fn after_the_seal_and_a_collection_the_log_holds_no_delta_and_the_pack_the_turn() {
    let dir = tempfile::tempdir().unwrap();
    let engine = ctxstore_engine::Engine::open(gc_config(dir.path())).unwrap();
    let context = new_context(&engine);
    // Incompressible deltas of 24–40 bytes: each in one slot of turns.log, and stored raw in
    // the sealed turn's blob.
    let pieces: Vec<Vec<u8>> = (0..300)
        .map(|i| random_payload(900 + i, 24 + (i as usize % 17)))
        .collect();
    let sealed = block_on(open_any(&engine, open_request(context, None))).unwrap();
    let aborted = block_on(open_any(&engine, open_request(context, None))).unwrap();
    let open = block_on(open_any(&engine, open_request(context, None))).unwrap();
    let parts = [
        (sealed.stream_id, &pieces[..200]),
        (aborted.stream_id, &pieces[200..250]),
        (open.stream_id, &pieces[250..]),
    ];
    for (stream_id, part) in parts {
        for piece in part {
            block_on(delta_any(
                &engine,
                stream_id,
                None,
                Bytes::from(piece.clone()),
            ))
            .unwrap();
        }
    }
    let log = |name: &str| name.starts_with("turns.");
    let packs = |name: &str| !name.starts_with("turns.");
    assert!(held(dir.path(), &pieces, &log).iter().all(|&in_log| in_log));
    let turn = block_on(seal_any(&engine, sealed.stream_id)).unwrap();
    block_on(abort_any(&engine, aborted.stream_id)).unwrap();
    let report = engine.gc().unwrap();
    assert!(report.log_bytes_reclaimed > 0, "{report:?}");
    let in_logs = held(dir.path(), &pieces, &log);
    let in_packs = held(dir.path(), &pieces, &packs);
    for (i, (&in_log, &in_packs)) in in_logs.iter().zip(&in_packs).enumerate() {
        match i {
            // Sealed: the turn's blob holds the bytes, the log no delta.
            0..200 => assert!(
                !in_log && in_packs,
                "piece {i}: log {in_log} packs {in_packs}"
            ),
            // Aborted: gone from the log, never in a pack.
            200..250 => assert!(!in_log && !in_packs, "piece {i}: log {in_log}"),
            // Still open: its deltas stay.
            _ => assert!(in_log, "piece {i} of the open stream left the log"),
        }
    }
    // The compaction dropped the ended streams' records: they are unknown now, as they are
    // after a restart (below), to readers and writers alike.
    let forgotten = |engine: &Engine| {
        for stream_id in [sealed.stream_id, aborted.stream_id] {
            assert!(matches!(
                engine.read_stream(stream_id, 0, 1),
                Err(EngineError::StreamNotFound(id)) if id == stream_id
            ));
            assert!(matches!(
                block_on(delta_any(engine, stream_id, None, Bytes::from_static(b"x"))),
                Err(EngineError::StreamNotFound(id)) if id == stream_id
            ));
        }
    };
    forgotten(&engine);
    let whole: Vec<u8> = pieces[..200].concat();
    let last = block_on(engine.last(context, 1, true)).unwrap();
    assert_eq!(last.turns[0].turn.turn_id, turn.turn.turn_id);
    assert_eq!(last.turns[0].payload.as_deref(), Some(&whole[..]));
    engine.shutdown();
    // Reopened over the compacted log: the open stream is whole and continues; the ended
    // ones are forgotten (their records are gone), the sealed turn reads back.
    let engine = ctxstore_engine::Engine::open(gc_config(dir.path())).unwrap();
    let listed = engine.open_streams(None, 0, 10);
    assert_eq!(listed.len(), 1);
    assert_eq!(
        bytes_of(engine.read_stream(open.stream_id, 0, usize::MAX).unwrap()),
        pieces[250..].concat()
    );
    forgotten(&engine);
    let last = block_on(engine.last(context, 1, true)).unwrap();
    assert_eq!(last.turns[0].payload.as_deref(), Some(&whole[..]));
    engine.shutdown();
    assert!(verify(dir.path()).unwrap().is_ok());
}

#[test]
fn watchers_see_head_moves_streams_tags_and_deletes_in_order_and_lag_after_a_restart() {
    use ctxstore_engine::watch::{WatchKind, WatchRead, WatchTarget};
    use ctxstore_engine::{ContextRef, NewContext};

    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let named = |name: &str| {
        block_on(engine.create(NewContext {
            name: Some(name.into()),
            tags: vec![("team".into(), "a".into())],
            ..NewContext::default()
        }))
        .unwrap()
        .context
        .head
        .context_id
    };
    let agent = named("agent-1");
    let other = named("other");
    let start = engine.watch_position();
    let by_id = WatchTarget::Context(agent);
    let by_prefix = WatchTarget::NamePrefix("agent-".into());
    let by_tag = WatchTarget::Tag("team".into(), "a".into());
    // A waiting watcher wakes with the first event.
    let waiter = {
        let engine = engine.clone();
        let by_id = by_id.clone();
        std::thread::spawn(move || block_on(engine.wait_watch(&by_id, start, 100)))
    };
    std::thread::sleep(Duration::from_millis(20));
    let first = append(&engine, agent, b"turn", None).unwrap();
    let WatchRead::Events(woke) = waiter.join().unwrap() else {
        panic!("lagged")
    };
    assert_eq!(woke[0].kind, WatchKind::Head);
    assert_eq!(woke[0].turn_id, first.turn.turn_id);
    append(&engine, other, b"elsewhere", None).unwrap();
    let stream = block_on(open_any(&engine, open_request(agent, None))).unwrap();
    block_on(delta_any(
        &engine,
        stream.stream_id,
        None,
        Bytes::from_static(b"tok"),
    ))
    .unwrap();
    let sealed = block_on(seal_any(&engine, stream.stream_id)).unwrap();
    block_on(engine.update_tags(
        &ContextRef::Id(agent),
        vec![("k".into(), "v".into())],
        vec![],
        None,
    ))
    .unwrap();

    let kinds = |target: &WatchTarget| match engine.watch_events(target, start, 100) {
        WatchRead::Events(events) => events,
        WatchRead::Lagged { .. } => panic!("lagged"),
    };
    let events = kinds(&by_id);
    let summary: Vec<(WatchKind, u64, u64)> = events
        .iter()
        .map(|event| (event.kind, event.turn_id.0, event.stream_id))
        .collect();
    assert_eq!(
        summary,
        vec![
            (WatchKind::Head, first.turn.turn_id.0, 0),
            (WatchKind::StreamOpened, 0, stream.stream_id),
            (WatchKind::Head, sealed.turn.turn_id.0, 0),
            (
                WatchKind::StreamSealed,
                sealed.turn.turn_id.0,
                stream.stream_id
            ),
            (WatchKind::Tags, 0, 0),
        ]
    );
    assert!(events.windows(2).all(|pair| pair[0].seq < pair[1].seq));
    assert_eq!(
        kinds(&by_prefix),
        events,
        "only agent-1's name starts with agent-"
    );
    assert_eq!(
        kinds(&by_tag).len(),
        events.len() + 1,
        "both contexts carry team=a"
    );
    // Resuming after the third event reads the rest, exactly.
    let WatchRead::Events(rest) = engine.watch_events(&by_id, events[2].seq, 100) else {
        panic!("lagged")
    };
    assert_eq!(rest, events[3..]);
    block_on(engine.delete_context(&ContextRef::Id(agent))).unwrap();
    let WatchRead::Events(deleted) = engine.watch_events(&by_id, events[4].seq, 100) else {
        panic!("lagged")
    };
    assert_eq!(deleted.len(), 1);
    assert_eq!(deleted[0].kind, WatchKind::Deleted);
    let last = deleted[0].seq;
    engine.shutdown();
    // Events live in memory: after a restart a watcher that had seen everything goes on, one
    // that had not is told it lagged; sequence numbers go on rising.
    let engine = open(dir.path());
    assert_eq!(
        engine.watch_events(&by_tag, last, 100),
        WatchRead::Events(vec![])
    );
    assert!(matches!(
        engine.watch_events(&by_tag, start, 100),
        WatchRead::Lagged { .. }
    ));
    assert!(engine.watch_position() >= last);
    engine.shutdown();
}
