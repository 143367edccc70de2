//! The bytes recovery and readers find on disk: every fixed-size record decoder of the engine
//! (turns.log record, pack header, blob index entry, meta), the keyring, and the variable-length bodies of
//! multi-slot records (context metadata, turn extras), a vectors blob (decision 0033), and a chunked blob's manifest body
//! (issue 16; it comes from a client's PUT_CHUNKED only as a list the server re-encodes, but a
//! pack on disk may hold anything). A damaged or hostile file may hold
//! anything; nothing may panic, and whatever decodes must re-encode to the very bytes it came
//! from (pair assertion: the decoder accepts only what the encoder writes).
#![no_main]

use ctxstore_engine::format::blob_index::{INDEX_ENTRY_BYTES, IndexEntry};
use ctxstore_engine::format::context_meta::ContextMeta;
use ctxstore_engine::format::keyring::KeyringFile;
use ctxstore_engine::format::stream_meta::StreamMeta;
use ctxstore_engine::format::log_base::{BASE_HEADER_BYTES, BaseHeader};
use ctxstore_engine::format::manifest::Manifest;
use ctxstore_engine::format::turn_extras::TurnExtras;
use ctxstore_engine::format::meta::{META_BYTES, Meta};
use ctxstore_engine::format::pack::{PACK_HEADER_BYTES, PackHeader};
use ctxstore_engine::format::turn_log::{LOG_RECORD_BYTES, LogRecord};
use ctxstore_engine::format::vectors as vectors_blob;
use libfuzzer_sys::fuzz_target;

/// The first `N` bytes of `data`, zero-padded.
fn record<const N: usize>(data: &[u8]) -> [u8; N] {
    let mut bytes = [0u8; N];
    let len = data.len().min(N);
    bytes[..len].copy_from_slice(&data[..len]);
    bytes
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks the decoder, so the corpus explores each one.
    let Some((&which, data)) = data.split_first() else { return };
    match which % 10 {
        0 => {
            let bytes: [u8; LOG_RECORD_BYTES] = record(data);
            // Version-1 turn records (store format 1) are read, never written: nothing to
            // re-encode them to.
            let legacy_turn = matches!(LogRecord::decode(&bytes), Ok(Some(LogRecord::Turn(_)))) && bytes[9] == 1;
            if let (Ok(Some(decoded)), false) = (LogRecord::decode(&bytes), legacy_turn) {
                let mut again = [0u8; LOG_RECORD_BYTES];
                decoded.encode(&mut again);
                assert_eq!(again, bytes, "turns.log record encoding is not canonical");
            }
        }
        1 => {
            let bytes: [u8; PACK_HEADER_BYTES] = record(data);
            if let Ok(header) = PackHeader::decode(&bytes) {
                let mut again = [0u8; PACK_HEADER_BYTES];
                header.encode(&mut again);
                assert_eq!(again, bytes, "pack header encoding is not canonical");
                let _ = header.check_body(&data[data.len().min(PACK_HEADER_BYTES)..]);
            }
        }
        2 => {
            let bytes: [u8; INDEX_ENTRY_BYTES] = record(data);
            if let Ok(Some(entry)) = IndexEntry::decode(&bytes) {
                let mut again = [0u8; INDEX_ENTRY_BYTES];
                entry.encode(&mut again);
                // An entry of the layout before entries named their tenant (flags 0) is
                // written in today's layout: the same entry, other bytes (decision 0032 §3).
                if IndexEntry::names_tenant(&bytes) {
                    assert_eq!(again, bytes, "index entry encoding is not canonical");
                }
                assert_eq!(IndexEntry::decode(&again), Ok(Some(entry)), "index entry round trip");
            }
        }
        3 => {
            if let Ok(extras) = TurnExtras::decode(data) {
                assert_eq!(extras.encode(), data, "turn extras encoding is not canonical");
            }
        }
        4 => {
            // The second byte picks the metadata op: every op (1..=23) and unknown ones.
            let Some((&op, body)) = data.split_first() else { return };
            if let Ok(meta) = ContextMeta::decode(u16::from(op % 32), body) {
                assert_eq!(meta.encode(), body, "context metadata encoding is not canonical");
            }
            // Stream records (ops 12..=15, issue 32; 15 a sealed delta): never both kinds.
            if let Ok(stream) = StreamMeta::decode(u16::from(op % 16), body) {
                assert!(ContextMeta::decode(u16::from(op % 16), body).is_err(), "op {op} is two kinds");
                assert_eq!(stream.encode(), body, "stream record encoding is not canonical");
            }
        }
        5 => {
            if let Ok(manifest) = Manifest::decode(data) {
                assert_eq!(manifest.encode(), data, "manifest encoding is not canonical");
            }
        }
        6 => {
            let bytes: [u8; BASE_HEADER_BYTES] = record(data);
            if let Ok(header) = BaseHeader::decode(&bytes) {
                assert_eq!(header.encode(), bytes, "turns.base header encoding is not canonical");
            }
        }
        7 => {
            // The keyring (decision 0032): its digest guards it, so a fuzzer mostly meets the
            // digest check; whatever passes must re-encode to the very bytes.
            if let Ok(keyring) = KeyringFile::decode(data) {
                assert_eq!(keyring.encode(), data, "keyring encoding is not canonical");
            }
        }
        8 => {
            // A vectors blob (decision 0033): checked dimension, count, length, finite values.
            if let Ok(vectors) = vectors_blob::decode(data) {
                let rows: Vec<Vec<f32>> = vectors.rows().map(<[f32]>::to_vec).collect();
                assert_eq!(vectors_blob::encode(vectors.dims, &rows), data, "vectors blob encoding is not canonical");
            }
        }
        _ => {
            // Meta is decoded from a slice of any length (a short file is damage, not a panic).
            if let Ok(meta) = Meta::decode(&data[..data.len().min(2 * META_BYTES)]) {
                assert_eq!(&meta.encode()[..], &data[..META_BYTES], "meta encoding is not canonical");
            }
        }
    }
});
