//! Payloads compressed where they are made (issue 38, decision 0029): an append by value on a
//! version-3 connection sends a payload zstd shrinks as its frame, with the BLAKE3 of its
//! bytes, and the server stores the frame as it came after checking it. Small payloads go as
//! they are: under `COMPRESS_BYTES_MIN` a frame's own overhead eats any saving (the engine's
//! `blob/codec.rs` draws the same line).

use std::cell::RefCell;

use bytes::Bytes;
use ctxstore_protocol::{PayloadSpec, ZSTD_PAYLOADS_SINCE_VERSION};

use crate::client::Client;
use crate::types::BlobHash;

/// Payloads shorter than this travel as they are.
pub const COMPRESS_BYTES_MIN: usize = 64;

thread_local! {
    /// One compressor per thread and level: zstd's context is reused, not allocated per call.
    static COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(None) };
}

/// `payload` as a zstd frame at `level`, when that is smaller; `None` otherwise (or when zstd
/// fails: the payload then goes as it is, which is always correct).
fn compressed(payload: &[u8], level: i32) -> Option<Vec<u8>> {
    if payload.len() < COMPRESS_BYTES_MIN {
        return None;
    }
    let frame = COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|(built, _)| *built != level) {
            *slot = zstd::bulk::Compressor::new(level)
                .ok()
                .map(|compressor| (level, compressor));
        }
        slot.as_mut()
            .and_then(|(_, compressor)| compressor.compress(payload).ok())
    })?;
    (frame.len() < payload.len()).then_some(frame)
}

impl Client {
    /// The level payloads are compressed at on this connection, if they are.
    pub(crate) fn compress_level(&self) -> Option<i32> {
        let level = self.shared.config.compress_level?;
        (self.protocol_version() >= ZSTD_PAYLOADS_SINCE_VERSION).then_some(level)
    }

    /// A payload by value as it should travel: its zstd frame with its hash when this
    /// connection compresses and the frame is smaller, else as it is.
    pub(crate) fn payload_spec(&self, payload: Bytes) -> PayloadSpec {
        let Some(level) = self.compress_level() else {
            return PayloadSpec::Bytes(payload);
        };
        match compressed(&payload, level) {
            Some(frame) => PayloadSpec::Zstd {
                hash: BlobHash::of(&payload),
                raw_len: payload.len() as u32,
                frame: Bytes::from(frame),
            },
            None => PayloadSpec::Bytes(payload),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_compressed_and_inflates_back() {
        let payload = "{\"role\":\"user\",\"content\":\"hello\"}\n".repeat(50);
        let frame = compressed(payload.as_bytes(), 1).unwrap();
        assert!(frame.len() < payload.len());
        let back = zstd::bulk::decompress(&frame, payload.len()).unwrap();
        assert_eq!(back, payload.as_bytes());
        // Another level rebuilds the thread's compressor; the frame still inflates.
        let frame = compressed(payload.as_bytes(), 3).unwrap();
        assert_eq!(
            zstd::bulk::decompress(&frame, payload.len()).unwrap(),
            payload.as_bytes()
        );
    }

    #[test]
    fn small_and_incompressible_payloads_go_as_they_are() {
        assert!(compressed(&[b'a'; COMPRESS_BYTES_MIN - 1], 1).is_none());
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        assert!(compressed(&noise, 1).is_none());
    }
}
