//! Bodies of stream records (issue 32, decision 0027): metadata records of `turns.log` (kind 3,
//! carried by `turn_log::MetaRecord`) with ops 12–14, beside `context_meta`'s ops. A stream is
//! a turn in the making: its deltas ride the sequencer's group commit like every other record,
//! and its seal is an ordinary append. Layout in docs/storage.md#stream-records.
//!
//! ```text
//! op 12 stream open   context_id: the stream's context; record id: the StreamID
//!                     u8 flags (bit 0 expected head given, bit 1 summary), u8 parent
//!                     (0 head, 1 root, 2 turn), u16 reserved 0, u32 codec, u64 type_tag,
//!                     u64 expected_head, u64 parent_turn_id, then the extras body
//!                     (format::turn_extras: key, labels, links; empty when none)
//! op 13 stream delta  u64 stream_id, u64 offset (the stream's length before it), then the
//!                     bytes (1..=STREAM_DELTA_BYTES_MAX)
//! op 14 stream end    u64 stream_id, u8 how (1 sealed, 2 aborted), u64 turn_id (sealed: the
//!                     turn it became; aborted: 0)
//! op 15 sealed delta  u64 stream_id, u64 offset, u16 key_version, u16 reserved 0, then the
//!                     delta's bytes sealed under its tenant's data key `key_version`
//!                     (`nonce ‖ ciphertext ‖ tag`, 41..; decision 0032 §4): a store that
//!                     seals writes its deltas so
//! ```
//!
//! "Sealed" in op 14 (a stream that became a turn) and op 15 (bytes under a key) are two
//! different words that share a spelling; the code says `StreamEnd::Sealed` for the first and
//! `key_version` for the second. `context_meta::ContextMeta::decode` refuses these ops
//! (tested below), so a body is never read as the wrong kind.

use ctxstore_vocab::le::{u16_at, u32_at, u64_at};

use crate::format::RecordError;
use crate::format::turn_extras::{TURN_EXTRAS_BYTES_MAX, TurnExtras};
use crate::format::turn_log::META_BODY_BYTES_MAX;
use crate::ids::{CodecTag, TurnId, TypeTag};

pub const OP_STREAM_OPEN: u16 = 12;
pub const OP_STREAM_DELTA: u16 = 13;
pub const OP_STREAM_END: u16 = 14;
pub const OP_STREAM_DELTA_SEALED: u16 = 15;

/// Fixed bytes of an open body before the extras.
const OPEN_FIXED_BYTES: usize = 1 + 1 + 2 + 4 + 8 + 8 + 8;
/// Fixed bytes of a delta body before its bytes.
const DELTA_FIXED_BYTES: usize = 16;
/// Bytes one delta record carries at most: a longer delta is written as several records of
/// one batch (`sequencer/streams.rs`), each at its own offset.
pub const STREAM_DELTA_BYTES_MAX: usize = META_BODY_BYTES_MAX - DELTA_FIXED_BYTES;
/// Fixed bytes of a sealed delta body before its sealed bytes.
const SEALED_DELTA_FIXED_BYTES: usize = 20;
/// What a seal adds to the bytes it seals (`seal::SEAL_OVERHEAD_BYTES`).
const SEAL_OVERHEAD_BYTES: usize = crate::format::pack::SEALED_BODY_OVERHEAD_BYTES;
/// Plain bytes one sealed delta record carries at most.
pub const STREAM_DELTA_SEALED_BYTES_MAX: usize =
    META_BODY_BYTES_MAX - SEALED_DELTA_FIXED_BYTES - SEAL_OVERHEAD_BYTES;
const END_BODY_BYTES: usize = 17;
const _: () = assert!(OPEN_FIXED_BYTES + TURN_EXTRAS_BYTES_MAX <= META_BODY_BYTES_MAX);

const FLAG_EXPECTED_HEAD: u8 = 1 << 0;
const FLAG_SUMMARY: u8 = 1 << 1;
const FLAGS_KNOWN: u8 = FLAG_EXPECTED_HEAD | FLAG_SUMMARY;
const PARENT_HEAD: u8 = 0;
const PARENT_ROOT: u8 = 1;
const PARENT_TURN: u8 = 2;
const END_SEALED: u8 = 1;
const END_ABORTED: u8 = 2;

/// Where the sealed turn will hang (the model's `Parent`, which `format` does not import).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum OpenParent {
    #[default]
    Head,
    Root,
    Turn(TurnId),
}

/// What the seal will append: everything an append takes but its payload.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct StreamOpen {
    pub expected_head: Option<TurnId>,
    pub type_tag: TypeTag,
    pub codec: CodecTag,
    pub parent: OpenParent,
    pub summary: bool,
    /// Key, labels and links, normalized (within `TurnExtras`'s limits).
    pub extras: TurnExtras,
}

/// How a stream ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StreamEnd {
    /// Its bytes became this turn.
    Sealed(TurnId),
    Aborted,
}

/// A stream record's body.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum StreamMeta {
    Open(StreamOpen),
    /// `bytes` as the record holds them: the delta's own bytes, or, with `key_version`, the
    /// delta's bytes sealed under its tenant's data key of that version (op 15). The streams'
    /// state only ever applies plain deltas.
    Delta {
        stream_id: u64,
        offset: u64,
        bytes: Vec<u8>,
        key_version: Option<u16>,
    },
    End {
        stream_id: u64,
        end: StreamEnd,
    },
}

/// Whether `op` is a stream record's.
pub fn is_stream_op(op: u16) -> bool {
    (OP_STREAM_OPEN..=OP_STREAM_DELTA_SEALED).contains(&op)
}

impl StreamMeta {
    pub fn op(&self) -> u16 {
        match self {
            StreamMeta::Open(_) => OP_STREAM_OPEN,
            StreamMeta::Delta {
                key_version: None, ..
            } => OP_STREAM_DELTA,
            StreamMeta::Delta {
                key_version: Some(_),
                ..
            } => OP_STREAM_DELTA_SEALED,
            StreamMeta::End { .. } => OP_STREAM_END,
        }
    }

    /// The body bytes. The caller checked the limits; encoding asserts them (pair of
    /// `decode`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            StreamMeta::Open(open) => {
                let mut flags = 0;
                if open.expected_head.is_some() {
                    flags |= FLAG_EXPECTED_HEAD;
                }
                if open.summary {
                    flags |= FLAG_SUMMARY;
                }
                let (parent, parent_turn_id) = match open.parent {
                    OpenParent::Head => (PARENT_HEAD, 0),
                    OpenParent::Root => (PARENT_ROOT, 0),
                    OpenParent::Turn(turn_id) => (PARENT_TURN, turn_id.0),
                };
                out.push(flags);
                out.push(parent);
                out.extend_from_slice(&0u16.to_le_bytes());
                out.extend_from_slice(&open.codec.to_le_bytes());
                out.extend_from_slice(&open.type_tag.to_le_bytes());
                out.extend_from_slice(&open.expected_head.unwrap_or(TurnId::NONE).0.to_le_bytes());
                out.extend_from_slice(&parent_turn_id.to_le_bytes());
                if !open.extras.is_empty() {
                    out.extend_from_slice(&open.extras.encode());
                }
                assert!(
                    out.len() <= META_BODY_BYTES_MAX,
                    "extras checked on admission"
                );
            }
            StreamMeta::Delta {
                stream_id,
                offset,
                bytes,
                key_version,
            } => {
                let plain_len = match key_version {
                    None => bytes.len(),
                    Some(_) => bytes.len().saturating_sub(SEAL_OVERHEAD_BYTES),
                };
                let plain_max = match key_version {
                    None => STREAM_DELTA_BYTES_MAX,
                    Some(_) => STREAM_DELTA_SEALED_BYTES_MAX,
                };
                assert!(
                    plain_len > 0 && plain_len <= plain_max,
                    "delta records are cut to size by the sequencer"
                );
                out.extend_from_slice(&stream_id.to_le_bytes());
                out.extend_from_slice(&offset.to_le_bytes());
                if let Some(version) = key_version {
                    out.extend_from_slice(&version.to_le_bytes());
                    out.extend_from_slice(&0u16.to_le_bytes());
                }
                out.extend_from_slice(bytes);
            }
            StreamMeta::End { stream_id, end } => {
                let (how, turn_id) = match end {
                    StreamEnd::Sealed(turn_id) => (END_SEALED, turn_id.0),
                    StreamEnd::Aborted => (END_ABORTED, 0),
                };
                out.extend_from_slice(&stream_id.to_le_bytes());
                out.push(how);
                out.extend_from_slice(&turn_id.to_le_bytes());
            }
        }
        out
    }

    /// Decodes a body of a stream op; never panics.
    pub fn decode(op: u16, body: &[u8]) -> Result<StreamMeta, RecordError> {
        match op {
            OP_STREAM_OPEN => decode_open(body),
            OP_STREAM_DELTA => {
                if body.len() <= DELTA_FIXED_BYTES || body.len() > META_BODY_BYTES_MAX {
                    return Err(RecordError::Field("stream delta has no bytes or too many"));
                }
                Ok(StreamMeta::Delta {
                    stream_id: u64_at(body, 0),
                    offset: u64_at(body, 8),
                    bytes: body[DELTA_FIXED_BYTES..].to_vec(),
                    key_version: None,
                })
            }
            OP_STREAM_DELTA_SEALED => {
                if body.len() <= SEALED_DELTA_FIXED_BYTES + SEAL_OVERHEAD_BYTES
                    || body.len() > META_BODY_BYTES_MAX
                {
                    return Err(RecordError::Field(
                        "sealed stream delta has no bytes or too many",
                    ));
                }
                if u16_at(body, 18) != 0 {
                    return Err(RecordError::Field("sealed stream delta reserved bytes"));
                }
                Ok(StreamMeta::Delta {
                    stream_id: u64_at(body, 0),
                    offset: u64_at(body, 8),
                    bytes: body[SEALED_DELTA_FIXED_BYTES..].to_vec(),
                    key_version: Some(u16_at(body, 16)),
                })
            }
            OP_STREAM_END => {
                if body.len() != END_BODY_BYTES {
                    return Err(RecordError::Field("stream end body is not 17 bytes"));
                }
                let stream_id = u64_at(body, 0);
                let turn_id = u64_at(body, 9);
                let end = match (body[8], turn_id) {
                    (END_SEALED, id) if id != 0 => StreamEnd::Sealed(TurnId(id)),
                    (END_ABORTED, 0) => StreamEnd::Aborted,
                    _ => {
                        return Err(RecordError::Field(
                            "stream end is neither sealed nor aborted",
                        ));
                    }
                };
                Ok(StreamMeta::End { stream_id, end })
            }
            _ => Err(RecordError::Field("not a stream record op")),
        }
    }
}

/// The body of a stream's open: its fixed fields, checked, then its extras (none: no bytes).
fn decode_open(body: &[u8]) -> Result<StreamMeta, RecordError> {
    let fixed = body
        .get(..OPEN_FIXED_BYTES)
        .ok_or(RecordError::Field("stream open body ends early"))?;
    let flags = fixed[0];
    if flags & !FLAGS_KNOWN != 0 {
        return Err(RecordError::Field("stream open has unknown flags"));
    }
    if u16_at(fixed, 2) != 0 {
        return Err(RecordError::Field("stream open reserved bytes are not 0"));
    }
    let codec = u32_at(fixed, 4);
    let type_tag = u64_at(fixed, 8);
    let expected_head = u64_at(fixed, 16);
    let parent_turn_id = u64_at(fixed, 24);
    let parent = match (fixed[1], parent_turn_id) {
        (PARENT_HEAD, 0) => OpenParent::Head,
        (PARENT_ROOT, 0) => OpenParent::Root,
        (PARENT_TURN, id) if id != 0 => OpenParent::Turn(TurnId(id)),
        _ => return Err(RecordError::Field("stream open has a bad parent")),
    };
    let expected_head = if flags & FLAG_EXPECTED_HEAD != 0 {
        Some(TurnId(expected_head))
    } else if expected_head != 0 {
        return Err(RecordError::Field("stream open has a stray expected head"));
    } else {
        None
    };
    let rest = &body[OPEN_FIXED_BYTES..];
    let extras = if rest.is_empty() {
        TurnExtras::default()
    } else {
        let extras = TurnExtras::decode(rest)?;
        // No extras are written as no bytes: one encoding for each value.
        if extras.is_empty() {
            return Err(RecordError::Field("stream open has an empty extras body"));
        }
        if extras.vectors.is_some() {
            return Err(RecordError::Field("stream open carries vectors"));
        }
        extras
    };
    Ok(StreamMeta::Open(StreamOpen {
        expected_head,
        type_tag,
        codec,
        parent,
        summary: flags & FLAG_SUMMARY != 0,
        extras,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::context_meta::ContextMeta;

    fn samples() -> Vec<StreamMeta> {
        vec![
            StreamMeta::Open(StreamOpen {
                type_tag: 7,
                codec: 1,
                ..StreamOpen::default()
            }),
            StreamMeta::Open(StreamOpen {
                expected_head: Some(TurnId::NONE),
                type_tag: u64::MAX,
                codec: 3,
                parent: OpenParent::Turn(TurnId(9)),
                summary: true,
                extras: TurnExtras {
                    key: b"answer-1".to_vec(),
                    labels: vec![("role".into(), "assistant".into())],
                    links: vec![TurnId(4)],
                    vectors: None,
                },
            }),
            StreamMeta::Delta {
                stream_id: 12,
                offset: 40,
                bytes: b"hello".to_vec(),
                key_version: None,
            },
            StreamMeta::Delta {
                stream_id: 12,
                offset: 45,
                bytes: vec![7; 41],
                key_version: Some(3),
            },
            StreamMeta::End {
                stream_id: 12,
                end: StreamEnd::Sealed(TurnId(99)),
            },
            StreamMeta::End {
                stream_id: 12,
                end: StreamEnd::Aborted,
            },
        ]
    }

    #[test]
    fn every_body_round_trips_and_every_cut_is_refused() {
        for meta in samples() {
            let body = meta.encode();
            assert_eq!(StreamMeta::decode(meta.op(), &body), Ok(meta.clone()));
            for cut in 0..body.len() {
                let decoded = StreamMeta::decode(meta.op(), &body[..cut]);
                // A cut open body may still be a whole one without extras; then it differs.
                assert_ne!(decoded, Ok(meta.clone()), "cut at {cut} of {meta:?}");
            }
        }
    }

    #[test]
    fn stream_ops_are_no_context_ops_and_damage_is_refused() {
        for op in OP_STREAM_OPEN..=OP_STREAM_DELTA_SEALED {
            assert!(is_stream_op(op));
            assert!(ContextMeta::decode(op, &[0; 64]).is_err(), "op {op}");
        }
        assert!(!is_stream_op(11) && !is_stream_op(16));
        // A sealed delta: shorter than a seal, or reserved bytes set.
        let short = vec![0u8; SEALED_DELTA_FIXED_BYTES + SEAL_OVERHEAD_BYTES];
        assert!(StreamMeta::decode(OP_STREAM_DELTA_SEALED, &short).is_err());
        let mut reserved = vec![0u8; SEALED_DELTA_FIXED_BYTES + SEAL_OVERHEAD_BYTES + 1];
        reserved[18] = 1;
        assert!(StreamMeta::decode(OP_STREAM_DELTA_SEALED, &reserved).is_err());
        // End: unknown how, a sealed stream without a turn, an aborted one with a turn.
        let mut end = vec![0u8; END_BODY_BYTES];
        end[8] = 3;
        assert!(StreamMeta::decode(OP_STREAM_END, &end).is_err());
        end[8] = END_SEALED;
        assert!(StreamMeta::decode(OP_STREAM_END, &end).is_err());
        end[8] = END_ABORTED;
        end[9] = 1;
        assert!(StreamMeta::decode(OP_STREAM_END, &end).is_err());
        // A delta without bytes.
        assert!(StreamMeta::decode(OP_STREAM_DELTA, &[0; DELTA_FIXED_BYTES]).is_err());
        // Open: unknown flags, a parent turn 0, a stray expected head.
        let mut open = vec![0u8; OPEN_FIXED_BYTES];
        open[0] = 0x80;
        assert!(StreamMeta::decode(OP_STREAM_OPEN, &open).is_err());
        open[0] = 0;
        open[1] = PARENT_TURN;
        assert!(StreamMeta::decode(OP_STREAM_OPEN, &open).is_err());
        open[1] = PARENT_HEAD;
        open[16] = 5;
        assert!(StreamMeta::decode(OP_STREAM_OPEN, &open).is_err());
    }
}
