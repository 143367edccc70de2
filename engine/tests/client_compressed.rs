//! Appends whose payload a client compressed (issue 38, `AppendPayload::Zstd`): stored and
//! read back byte for byte, across a reopen and `verify`; a frame that does not inflate to the
//! bytes its hash names is refused with nothing stored; a blob already stored is not inflated
//! again (a frame that would not inflate is not even looked at); a frame over the chunk
//! threshold is chunked like the same payload sent raw, and deduplicates against it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use ctxstore_engine::{
    AppendPayload, AppendRequest, Appended, BlobHash, ContextId, Engine, EngineError, ErrorKind,
    verify,
};

fn zstd_append(
    engine: &Engine,
    context: ContextId,
    hash: BlobHash,
    raw_len: usize,
    frame: Vec<u8>,
) -> Result<Appended, EngineError> {
    block_on(engine.append(AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 7,
        codec: 1,
        payload: AppendPayload::Zstd {
            hash,
            raw_len: raw_len as u32,
            frame: Bytes::from(frame),
        },
        options: Default::default(),
    }))
}

fn compressed(payload: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(payload, 3).unwrap()
}

fn newest_payload(engine: &Engine, context: ContextId) -> Vec<u8> {
    let last = block_on(engine.last(context, 1, true)).unwrap();
    last.turns[0].payload.clone().unwrap().to_vec()
}

#[test]
fn a_client_frame_is_stored_read_back_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let context;
    let mut expected = Vec::new();
    {
        let engine = open(dir.path());
        context = new_context(&engine);
        for seed in 0..8 {
            let payload = chat_payload(seed, 10_240);
            let hash = BlobHash::of(&payload);
            let appended =
                zstd_append(&engine, context, hash, payload.len(), compressed(&payload)).unwrap();
            assert!(!appended.deduped);
            assert_eq!(appended.turn.payload_hash, hash);
            assert_eq!(appended.turn.payload_len, 10_240);
            assert_eq!(newest_payload(&engine, context), payload);
            expected.push(payload);
        }
        // The same payload sent raw afterwards is a dedup hit on the client's frame.
        let again = append(&engine, context, &expected[3], None).unwrap();
        assert!(again.deduped);
        engine.shutdown();
    }
    let engine = open(dir.path());
    let page = block_on(engine.last(context, 16, true)).unwrap();
    let payloads: Vec<Vec<u8>> = page
        .turns
        .iter()
        .map(|turn| turn.payload.clone().unwrap().to_vec())
        .collect();
    let mut want = expected.clone();
    want.push(expected[3].clone());
    assert_eq!(payloads, want, "oldest first, byte for byte");
    engine.shutdown();
    drop(engine);
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}

#[test]
fn a_frame_that_lies_is_refused_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let context = new_context(&engine);
    let first = append(&engine, context, b"the head before", None).unwrap();
    let payload = chat_payload(1, 4_096);
    let hash = BlobHash::of(&payload);

    // Another payload's frame under this hash.
    let other = chat_payload(2, 4_096);
    let error = zstd_append(&engine, context, hash, other.len(), compressed(&other)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::HashMismatch, "{error}");
    // A length that is not what the frame inflates to; bytes that are no zstd frame.
    let short = zstd_append(&engine, context, hash, 4_000, compressed(&payload)).unwrap_err();
    assert_eq!(short.kind(), ErrorKind::InvalidArgument, "{short}");
    let garbage = zstd_append(&engine, context, hash, 4_096, b"no frame".to_vec()).unwrap_err();
    assert_eq!(garbage.kind(), ErrorKind::InvalidArgument, "{garbage}");
    // A claimed length over the blob limit is refused before anything is inflated.
    let huge = zstd_append(
        &engine,
        context,
        hash,
        usize::MAX >> 33,
        compressed(&payload),
    );
    assert_eq!(huge.unwrap_err().kind(), ErrorKind::TooLarge);

    let head = block_on(engine.head(context)).unwrap();
    assert_eq!(head.head_turn_id, first.turn.turn_id, "nothing appended");
    let by_hash = block_on(engine.append(AppendRequest {
        context_id: context,
        expected_head: None,
        type_tag: 7,
        codec: 1,
        payload: AppendPayload::StoredBlob(hash),
        options: Default::default(),
    }));
    assert!(by_hash.is_err(), "the refused payload was not stored");
}

#[test]
fn a_stored_blob_is_not_inflated_again() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let context = new_context(&engine);
    let payload = chat_payload(9, 8_000);
    append(&engine, context, &payload, None).unwrap();
    // As an append by hash would: the stored blob is the payload, the frame is not read.
    let appended = zstd_append(
        &engine,
        context,
        BlobHash::of(&payload),
        payload.len(),
        b"not inflated".to_vec(),
    )
    .unwrap();
    assert!(appended.deduped);
    assert_eq!(newest_payload(&engine, context), payload);
}

#[test]
fn a_frame_over_the_chunk_threshold_is_chunked_like_the_raw_payload() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let context = new_context(&engine);
    // A growing state: the second is the first with more after it.
    let first = chat_payload(4, 64 * 1024);
    let mut second = first.clone();
    second.extend_from_slice(&chat_payload(5, 8 * 1024));
    append(&engine, context, &first, None).unwrap();
    let before = engine.stats();
    let hash = BlobHash::of(&second);
    let appended = zstd_append(&engine, context, hash, second.len(), compressed(&second)).unwrap();
    assert!(!appended.deduped);
    assert_eq!(newest_payload(&engine, context), second);
    let after = engine.stats();
    // Chunked: the first payload's chunks were found stored, only the tail's are new.
    assert_eq!(after.chunked_blobs, before.chunked_blobs + 1);
    assert!(after.chunk_dedup_hits > before.chunk_dedup_hits);
    assert!(after.chunk_bytes_saved - before.chunk_bytes_saved >= 48 * 1024);
    engine.shutdown();
    drop(engine);
    let report = verify(dir.path()).unwrap();
    assert!(report.is_ok(), "{report}");
}
