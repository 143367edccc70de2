//! The replica's objects, byte for byte (docs/storage.md#the-remote-layout): one encode and one
//! strict decode each, every object ending in a BLAKE3 of what precedes it, so a damaged or
//! truncated object is an error naming it, never a wrong store.
//!
//! - `Segment`: what one ship cycle made durable: `turns.log` slots, bytes appended to packs,
//!   packs a collection rewrote and a new `turns.base` (both as objects of their own), and the
//!   store's state after it.
//! - `Checkpoint`: the whole state after a segment, by reference to bytes in earlier objects.
//! - `StoreState` (its own module, `state.rs`): that state in memory, where each byte of
//!   each file lives remotely.
//! - `Marker`, `EpochRecord`, `GenerationRecord`: the small control objects.

use crate::codec::{Reader, Writer};
use crate::error::FormatError;
use crate::layout::Key;
pub use crate::state::{PackFile, ShardFiles, StoreState};

/// Bytes of one `turns.log` slot (the engine's `LOG_RECORD_BYTES`).
pub const LOG_SLOT_BYTES: u64 = 128;
/// Bytes of the store's meta file.
pub const META_BYTES_MAX: usize = 4096;
/// Shards of a store (the engine's shard count is a u16; a store has a handful).
pub const SHARDS_MAX: usize = 1024;
/// Pieces of one file, or of one segment.
pub const PIECES_MAX: usize = 1 << 22;
/// Packs of one shard (the engine's `PACKS_PER_SHARD_MAX`).
pub const PACKS_MAX: usize = 65_536;
/// A holder's description (host and process).
pub const HOLDER_BYTES_MAX: usize = 512;
pub(crate) const HASH_BYTES: usize = 32;

const SEGMENT_MAGIC: &[u8; 8] = b"CTXRSEG1";
const CHECKPOINT_MAGIC: &[u8; 8] = b"CTXRCKP1";
const MARKER_MAGIC: &[u8; 8] = b"CTXRMRK1";
const EPOCH_MAGIC: &[u8; 8] = b"CTXREPO1";
const GENERATION_MAGIC: &[u8; 8] = b"CTXRGEN1";
const LEASE_MAGIC: &[u8; 8] = b"CTXRLSE1";
const FORMAT_VERSION: u16 = 1;

pub type ReplicaId = [u8; 16];

/// Which object holds bytes: a segment, a whole pack, or a whole `turns.base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjectRef {
    Segment {
        generation: u32,
        seq: u64,
    },
    Pack {
        generation: u32,
        seq: u64,
        shard: u16,
        pack_id: u32,
    },
    Base {
        generation: u32,
        seq: u64,
    },
}

impl ObjectRef {
    pub fn key(&self) -> Key {
        match *self {
            ObjectRef::Segment { generation, seq } => Key::Segment { generation, seq },
            ObjectRef::Pack {
                generation,
                seq,
                shard,
                pack_id,
            } => Key::Pack {
                generation,
                shard,
                pack_id,
                seq,
            },
            ObjectRef::Base { generation, seq } => Key::Base { generation, seq },
        }
    }

    pub fn generation(&self) -> u32 {
        match *self {
            ObjectRef::Segment { generation, .. }
            | ObjectRef::Pack { generation, .. }
            | ObjectRef::Base { generation, .. } => generation,
        }
    }

    fn encode(&self, writer: &mut Writer) {
        let (kind, generation, seq, shard, pack_id) = match *self {
            ObjectRef::Segment { generation, seq } => (1, generation, seq, 0, 0),
            ObjectRef::Pack {
                generation,
                seq,
                shard,
                pack_id,
            } => (2, generation, seq, shard, pack_id),
            ObjectRef::Base { generation, seq } => (3, generation, seq, 0, 0),
        };
        writer.u8(kind);
        writer.u32(generation);
        writer.u64(seq);
        writer.u16(shard);
        writer.u32(pack_id);
    }

    fn decode(reader: &mut Reader<'_>) -> Result<ObjectRef, FormatError> {
        let kind = reader.u8()?;
        let generation = reader.u32()?;
        let seq = reader.u64()?;
        let shard = reader.u16()?;
        let pack_id = reader.u32()?;
        let plain = shard == 0 && pack_id == 0;
        match kind {
            1 if plain => Ok(ObjectRef::Segment { generation, seq }),
            2 => Ok(ObjectRef::Pack {
                generation,
                seq,
                shard,
                pack_id,
            }),
            3 if plain => Ok(ObjectRef::Base { generation, seq }),
            _ => {
                reader.check(false, || {
                    format!("object reference of kind {kind} is not one")
                })?;
                unreachable!("check(false) is an error")
            }
        }
    }
}

const OBJECT_REF_BYTES: usize = 1 + 4 + 8 + 2 + 4;
pub(crate) const PIECE_BYTES: usize = OBJECT_REF_BYTES + 24;

/// Bytes `file_offset..file_offset + len` of a file are bytes `object_offset..` of `object`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub object: ObjectRef,
    pub object_offset: u64,
    pub file_offset: u64,
    pub len: u64,
}

impl Piece {
    pub(crate) fn encode(&self, writer: &mut Writer) {
        self.object.encode(writer);
        writer.u64(self.object_offset);
        writer.u64(self.file_offset);
        writer.u64(self.len);
    }

    pub(crate) fn decode(reader: &mut Reader<'_>) -> Result<Piece, FormatError> {
        let piece = Piece {
            object: ObjectRef::decode(reader)?,
            object_offset: reader.u64()?,
            file_offset: reader.u64()?,
            len: reader.u64()?,
        };
        reader.check(
            piece.len > 0
                && piece.object_offset.checked_add(piece.len).is_some()
                && piece.file_offset.checked_add(piece.len).is_some(),
            || format!("piece {piece:?} is empty or overflows"),
        )?;
        Ok(piece)
    }
}

/// `turns.base` as one object: the log's records `1..=through`, `file_bytes` long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseRef {
    pub object: ObjectRef,
    pub through: u64,
    pub file_bytes: u64,
    pub hash: [u8; HASH_BYTES],
}

impl BaseRef {
    fn encode(&self, writer: &mut Writer) {
        self.object.encode(writer);
        writer.u64(self.through);
        writer.u64(self.file_bytes);
        writer.raw(&self.hash);
    }

    fn decode(reader: &mut Reader<'_>) -> Result<BaseRef, FormatError> {
        Ok(BaseRef {
            object: ObjectRef::decode(reader)?,
            through: reader.u64()?,
            file_bytes: reader.u64()?,
            hash: reader.array()?,
        })
    }
}

pub(crate) fn encode_optional_base(writer: &mut Writer, base: &Option<BaseRef>) {
    match base {
        None => writer.u8(0),
        Some(base) => {
            writer.u8(1);
            base.encode(writer);
        }
    }
}

pub(crate) fn decode_optional_base(
    reader: &mut Reader<'_>,
) -> Result<Option<BaseRef>, FormatError> {
    match reader.u8()? {
        0 => Ok(None),
        1 => BaseRef::decode(reader).map(Some),
        other => {
            reader.check(false, || format!("base flag {other} is neither 0 nor 1"))?;
            Ok(None)
        }
    }
}

/// One shard at a point: packs below `pack_id` sealed, `pack_id` open up to `pack_end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ShardPoint {
    pub pack_id: u32,
    pub pack_end: u64,
}

/// A pack whose file a collection rewrote: its new content, whole, in its own object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replaced {
    pub shard: u16,
    pub pack_id: u32,
    pub len: u64,
    pub object: ObjectRef,
    pub hash: [u8; HASH_BYTES],
}

/// Encoded size of a `SegmentPiece`.
const SEGMENT_PIECE_BYTES: usize = 2 + 4 + 8 + 8 + 8;

/// Bytes appended to a pack file, carried in the segment's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentPiece {
    pub shard: u16,
    pub pack_id: u32,
    pub file_offset: u64,
    pub len: u64,
    /// Where the bytes start in the segment's body.
    pub body_offset: u64,
}

/// A segment's description of itself and of the store after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub generation: u32,
    pub seq: u64,
    pub epoch: u64,
    pub replica_id: ReplicaId,
    /// When the cut this segment ships was taken.
    pub created_unix_ms: u64,
    /// The cut is shipped in more than one segment and this is not its last: not a point
    /// to restore to.
    pub continues: bool,
    /// A **seal** (decision 0031 §2): an empty segment a promoted standby created at the
    /// generation's next key, create-only, so that the generation ends there. No restore point
    /// (the generation's last point is the last segment before it not marked `continues`), no
    /// bytes; its `epoch` is the taker's, its `log_records`, `shards` and `created_unix_ms`
    /// those of that last point. The old primary's next create at this key finds it and is
    /// fenced. Flag bit 1; never with `continues`.
    pub seal: bool,
    /// The store's meta file (format version, shard count).
    pub meta: Vec<u8>,
    /// After this segment, records `1..=log_records` are shipped.
    pub log_records: u64,
    /// `turns.log` bytes in the body: file offset, length, body offset.
    pub log_piece: Option<SegmentPiece>,
    /// A new `turns.base`, uploaded before this segment.
    pub log_base: Option<BaseRef>,
    /// Every shard after this segment.
    pub shards: Vec<ShardPoint>,
    pub pieces: Vec<SegmentPiece>,
    pub replaced: Vec<Replaced>,
    pub body_bytes: u64,
    /// ContextIDs `1..=contexts` exist at the cut, or fewer (read just after it): what a new
    /// generation skips past (issue 46 item 8). Encoded after `body_bytes` only when not 0;
    /// segments written before it read 0 (unknown).
    pub contexts: u64,
}

/// Fixed part of a segment before its header's variable fields: magic, header length.
const SEGMENT_PREAMBLE_BYTES: usize = 12;
/// The longest segment header accepted (before reading it whole).
pub const SEGMENT_HEADER_BYTES_MAX: usize = 64 << 20;

impl SegmentHeader {
    /// The encoded header, BLAKE3 included: the body follows it, then the body's BLAKE3.
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::default();
        writer.raw(SEGMENT_MAGIC);
        writer.u32(0); // the header's length, patched below
        writer.u16(FORMAT_VERSION);
        writer.u16(u16::from(self.continues) | (u16::from(self.seal) << 1));
        writer.u32(self.generation);
        writer.u64(self.seq);
        writer.u64(self.epoch);
        writer.raw(&self.replica_id);
        writer.u64(self.created_unix_ms);
        writer.blob(&self.meta);
        writer.u64(self.log_records);
        match &self.log_piece {
            None => writer.u8(0),
            Some(piece) => {
                writer.u8(1);
                encode_segment_piece(&mut writer, piece);
            }
        }
        encode_optional_base(&mut writer, &self.log_base);
        writer.count(self.shards.len());
        for shard in &self.shards {
            writer.u32(shard.pack_id);
            writer.u64(shard.pack_end);
        }
        writer.count(self.pieces.len());
        for piece in &self.pieces {
            encode_segment_piece(&mut writer, piece);
        }
        writer.count(self.replaced.len());
        for replaced in &self.replaced {
            writer.u16(replaced.shard);
            writer.u32(replaced.pack_id);
            writer.u64(replaced.len);
            replaced.object.encode(&mut writer);
            writer.raw(&replaced.hash);
        }
        writer.u64(self.body_bytes);
        if self.contexts > 0 {
            writer.u64(self.contexts);
        }
        let len = (writer.bytes.len() + HASH_BYTES) as u32;
        writer.bytes[8..12].copy_from_slice(&len.to_le_bytes());
        let hash = blake3::hash(&writer.bytes);
        writer.raw(hash.as_bytes());
        writer.bytes
    }

    /// The seal of `generation` at `seq` (see `seal`): taken by the holder of `epoch`, after
    /// the generation's last restore point, cut at `point_unix_ms`, whose state is `point`.
    pub fn seal(
        generation: u32,
        seq: u64,
        epoch: u64,
        replica_id: ReplicaId,
        point_unix_ms: u64,
        point: &StoreState,
    ) -> SegmentHeader {
        SegmentHeader {
            generation,
            seq,
            epoch,
            replica_id,
            created_unix_ms: point_unix_ms,
            continues: false,
            seal: true,
            meta: point.meta.clone(),
            log_records: point.log_records,
            log_piece: None,
            log_base: None,
            shards: point.shards.iter().map(|shard| shard.point).collect(),
            pieces: Vec::new(),
            replaced: Vec::new(),
            body_bytes: 0,
            contexts: 0,
        }
    }

    /// The header's length, from the first 12 bytes of a segment.
    pub fn header_len(preamble: &[u8], what: &str) -> Result<usize, FormatError> {
        let mut reader = Reader::new(preamble, what);
        let magic: [u8; 8] = reader.array()?;
        reader.check(&magic == SEGMENT_MAGIC, || "not a ctxstore segment".into())?;
        let len = reader.u32()? as usize;
        reader.check(
            (SEGMENT_PREAMBLE_BYTES + HASH_BYTES..=SEGMENT_HEADER_BYTES_MAX).contains(&len),
            || format!("header length {len} is out of range"),
        )?;
        Ok(len)
    }

    /// Decodes a header (exactly `header_len` bytes) and checks its BLAKE3.
    pub fn decode(bytes: &[u8], what: &str) -> Result<SegmentHeader, FormatError> {
        let len =
            SegmentHeader::header_len(bytes.get(..SEGMENT_PREAMBLE_BYTES).unwrap_or(bytes), what)?;
        let mut reader = Reader::new(bytes, what);
        reader.check(bytes.len() == len, || {
            format!("header is {} bytes, says {len}", bytes.len())
        })?;
        check_hash(&mut Reader::new(bytes, what), bytes)?;
        reader.take(SEGMENT_PREAMBLE_BYTES)?;
        let version = reader.u16()?;
        reader.check(version == FORMAT_VERSION, || {
            format!("format version {version}, this server reads {FORMAT_VERSION}")
        })?;
        let flags = reader.u16()?;
        // Bit 0 `continues`, bit 1 `seal`; a seal ends a cut, never continues one.
        reader.check(flags <= 2, || format!("unknown flags {flags:#x}"))?;
        let generation = reader.u32()?;
        let seq = reader.u64()?;
        let epoch = reader.u64()?;
        let replica_id = reader.array()?;
        let created_unix_ms = reader.u64()?;
        let meta = reader.blob(META_BYTES_MAX)?.to_vec();
        let log_records = reader.u64()?;
        let log_piece = match reader.u8()? {
            0 => None,
            1 => Some(decode_segment_piece(&mut reader)?),
            other => {
                reader.check(false, || format!("log flag {other}"))?;
                None
            }
        };
        let log_base = decode_optional_base(&mut reader)?;
        let shards = decode_shard_points(&mut reader)?;
        let pieces = decode_segment_pieces(&mut reader)?;
        let replaced = decode_replaced(&mut reader)?;
        let body_bytes = reader.u64()?;
        let contexts = if reader.remaining() > HASH_BYTES {
            reader.u64()?
        } else {
            0
        };
        reader.take(HASH_BYTES)?;
        reader.finish()?;
        let header = SegmentHeader {
            generation,
            seq,
            epoch,
            replica_id,
            created_unix_ms,
            continues: flags & 1 == 1,
            seal: flags & 2 == 2,
            meta,
            log_records,
            log_piece,
            log_base,
            shards,
            pieces,
            replaced,
            body_bytes,
            contexts,
        };
        header.check_body_ranges(what)?;
        Ok(header)
    }

    /// Every piece lies inside the body (what `decode` promises a reader).
    fn check_body_ranges(&self, what: &str) -> Result<(), FormatError> {
        let reader = Reader::new(&[], what);
        for piece in self.pieces.iter().chain(&self.log_piece) {
            let end = piece.body_offset.checked_add(piece.len);
            reader.check(
                piece.len > 0 && end.is_some_and(|end| end <= self.body_bytes),
                || {
                    format!(
                        "piece {piece:?} lies outside the body of {} bytes",
                        self.body_bytes
                    )
                },
            )?;
        }
        Ok(())
    }
}

/// Where each shard's open pack ended after the cycle.
fn decode_shard_points(reader: &mut Reader<'_>) -> Result<Vec<ShardPoint>, FormatError> {
    let shard_count = reader.count(SHARDS_MAX, 12)?;
    let mut shards = Vec::with_capacity(shard_count);
    for _ in 0..shard_count {
        shards.push(ShardPoint {
            pack_id: reader.u32()?,
            pack_end: reader.u64()?,
        });
    }
    Ok(shards)
}

/// The bytes appended to packs, as pieces of the body.
fn decode_segment_pieces(reader: &mut Reader<'_>) -> Result<Vec<SegmentPiece>, FormatError> {
    let piece_count = reader.count(PIECES_MAX, SEGMENT_PIECE_BYTES)?;
    let mut pieces = Vec::with_capacity(piece_count);
    for _ in 0..piece_count {
        pieces.push(decode_segment_piece(reader)?);
    }
    Ok(pieces)
}

/// The packs a collection rewrote, each an object of its own.
fn decode_replaced(reader: &mut Reader<'_>) -> Result<Vec<Replaced>, FormatError> {
    let replaced_count = reader.count(PIECES_MAX, 14 + OBJECT_REF_BYTES + HASH_BYTES)?;
    let mut replaced = Vec::with_capacity(replaced_count);
    for _ in 0..replaced_count {
        replaced.push(Replaced {
            shard: reader.u16()?,
            pack_id: reader.u32()?,
            len: reader.u64()?,
            object: ObjectRef::decode(reader)?,
            hash: reader.array()?,
        });
    }
    Ok(replaced)
}

fn encode_segment_piece(writer: &mut Writer, piece: &SegmentPiece) {
    writer.u16(piece.shard);
    writer.u32(piece.pack_id);
    writer.u64(piece.file_offset);
    writer.u64(piece.len);
    writer.u64(piece.body_offset);
}

fn decode_segment_piece(reader: &mut Reader<'_>) -> Result<SegmentPiece, FormatError> {
    Ok(SegmentPiece {
        shard: reader.u16()?,
        pack_id: reader.u32()?,
        file_offset: reader.u64()?,
        len: reader.u64()?,
        body_offset: reader.u64()?,
    })
}

/// Checks the BLAKE3 at the end of `bytes` against what precedes it.
fn check_hash(reader: &mut Reader<'_>, bytes: &[u8]) -> Result<(), FormatError> {
    reader.check(bytes.len() >= HASH_BYTES, || {
        "shorter than its checksum".into()
    })?;
    let (content, hash) = bytes.split_at(bytes.len() - HASH_BYTES);
    reader.check(blake3::hash(content).as_bytes() == hash, || {
        "checksum mismatch (damaged or truncated)".into()
    })
}

/// A whole segment: the header, the body, the body's BLAKE3.
pub fn encode_segment(header: &SegmentHeader, body: &[u8]) -> Vec<u8> {
    let [header, body, hash] = encode_segment_parts(header, bytes::Bytes::copy_from_slice(body));
    [header, body, hash].concat()
}

/// `encode_segment` as its three parts (header, body, body checksum), in that order: the
/// shipper sends them as one object without copying the body into it.
pub fn encode_segment_parts(header: &SegmentHeader, body: bytes::Bytes) -> [bytes::Bytes; 3] {
    assert_eq!(
        header.body_bytes,
        body.len() as u64,
        "the header describes its body"
    );
    let hash = bytes::Bytes::copy_from_slice(blake3::hash(&body).as_bytes());
    [bytes::Bytes::from(header.encode()), body, hash]
}

/// A whole segment decoded: its header and where its body starts in `bytes`, the body's
/// checksum checked.
pub fn decode_segment(bytes: &[u8], what: &str) -> Result<(SegmentHeader, usize), FormatError> {
    let header_len =
        SegmentHeader::header_len(bytes.get(..SEGMENT_PREAMBLE_BYTES).unwrap_or(bytes), what)?;
    let reader = Reader::new(bytes, what);
    reader.check(bytes.len() >= header_len, || {
        "shorter than its header".into()
    })?;
    let header = SegmentHeader::decode(&bytes[..header_len], what)?;
    let total = header_len as u64 + header.body_bytes + HASH_BYTES as u64;
    reader.check(bytes.len() as u64 == total, || {
        format!("{} bytes, its header says {total}", bytes.len())
    })?;
    check_hash(&mut Reader::new(bytes, what), &bytes[header_len..])?;
    Ok((header, header_len))
}

/// The whole state after segment `seq` of `generation`, by reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub generation: u32,
    pub seq: u64,
    pub epoch: u64,
    pub replica_id: ReplicaId,
    pub created_unix_ms: u64,
    pub state: StoreState,
}

impl Checkpoint {
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::default();
        writer.raw(CHECKPOINT_MAGIC);
        writer.u16(FORMAT_VERSION);
        writer.u32(self.generation);
        writer.u64(self.seq);
        writer.u64(self.epoch);
        writer.raw(&self.replica_id);
        writer.u64(self.created_unix_ms);
        self.state.encode(&mut writer);
        seal(writer)
    }

    pub fn decode(bytes: &[u8], what: &str) -> Result<Checkpoint, FormatError> {
        let mut reader = open(bytes, CHECKPOINT_MAGIC, what)?;
        let checkpoint = Checkpoint {
            generation: reader.u32()?,
            seq: reader.u64()?,
            epoch: reader.u64()?,
            replica_id: reader.array()?,
            created_unix_ms: reader.u64()?,
            state: StoreState::decode(&mut reader)?,
        };
        reader.take(HASH_BYTES)?;
        reader.finish()?;
        Ok(checkpoint)
    }
}

/// Appends the BLAKE3 of everything written.
fn seal(mut writer: Writer) -> Vec<u8> {
    let hash = blake3::hash(&writer.bytes);
    writer.raw(hash.as_bytes());
    writer.bytes
}

/// Checks the magic, the format version and the trailing BLAKE3; a reader after the version.
fn open<'a>(bytes: &'a [u8], magic: &[u8; 8], what: &'a str) -> Result<Reader<'a>, FormatError> {
    let mut reader = Reader::new(bytes, what);
    check_hash(&mut Reader::new(bytes, what), bytes)?;
    let found: [u8; 8] = reader.array()?;
    reader.check(&found == magic, || {
        format!("not a {} object", String::from_utf8_lossy(magic))
    })?;
    let version = reader.u16()?;
    reader.check(version == FORMAT_VERSION, || {
        format!("format version {version}, this server reads {FORMAT_VERSION}")
    })?;
    Ok(reader)
}

/// `PREFIX/ctxstore-replica`: the prefix is the replica of the store with this id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marker {
    pub replica_id: ReplicaId,
    pub created_unix_ms: u64,
}

impl Marker {
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::default();
        writer.raw(MARKER_MAGIC);
        writer.u16(FORMAT_VERSION);
        writer.raw(&self.replica_id);
        writer.u64(self.created_unix_ms);
        seal(writer)
    }

    pub fn decode(bytes: &[u8], what: &str) -> Result<Marker, FormatError> {
        let mut reader = open(bytes, MARKER_MAGIC, what)?;
        let marker = Marker {
            replica_id: reader.array()?,
            created_unix_ms: reader.u64()?,
        };
        reader.take(HASH_BYTES)?;
        reader.finish()?;
        Ok(marker)
    }
}

/// `PREFIX/epoch-E`: a primary took the prefix; every primary of an older epoch stops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochRecord {
    pub epoch: u64,
    pub replica_id: ReplicaId,
    pub generation: u32,
    /// A random number of this taking, to recognise it after an unknown outcome.
    pub nonce: u128,
    pub taken_unix_ms: u64,
    /// Host and process, for the log of whoever is fenced.
    pub holder: String,
    /// Where clients reach this primary (`--replica-advertise`, else its `--listen`): a
    /// standby's READ_ONLY answers name it. Empty: not said. Encoded after `holder` only when
    /// not empty, so records without it keep their bytes.
    pub advertise: String,
}

impl EpochRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::default();
        writer.raw(EPOCH_MAGIC);
        writer.u16(FORMAT_VERSION);
        writer.u64(self.epoch);
        writer.raw(&self.replica_id);
        writer.u32(self.generation);
        writer.raw(&self.nonce.to_le_bytes());
        writer.u64(self.taken_unix_ms);
        writer.blob(self.holder.as_bytes());
        if !self.advertise.is_empty() {
            writer.blob(self.advertise.as_bytes());
        }
        seal(writer)
    }

    pub fn decode(bytes: &[u8], what: &str) -> Result<EpochRecord, FormatError> {
        let mut reader = open(bytes, EPOCH_MAGIC, what)?;
        let mut record = EpochRecord {
            epoch: reader.u64()?,
            replica_id: reader.array()?,
            generation: reader.u32()?,
            nonce: u128::from_le_bytes(reader.array()?),
            taken_unix_ms: reader.u64()?,
            holder: String::from_utf8_lossy(reader.blob(HOLDER_BYTES_MAX)?).into_owned(),
            advertise: String::new(),
        };
        if reader.remaining() > HASH_BYTES {
            record.advertise = String::from_utf8_lossy(reader.blob(HOLDER_BYTES_MAX)?).into_owned();
        }
        reader.take(HASH_BYTES)?;
        reader.finish()?;
        Ok(record)
    }
}

/// What a lease says of its holder (decision 0031 §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Held: the holder renews it every third of `lease_ms`.
    Held = 1,
    /// Released: the holder stopped acknowledging, then wrote this; a taker need not wait.
    Released = 2,
}

/// `PREFIX/lease`: who may write to the prefix, renewed by conditional PUT (decision 0031 §4).
/// Every renewal changes `renewal`, so its bytes, and an MD5 ETag, never repeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    pub state: LeaseState,
    /// The holder's epoch (`epoch/E` it created, or creates next).
    pub epoch: u64,
    pub replica_id: ReplicaId,
    /// Random per process start: the holder recognises its own write after a lost answer.
    pub holder_nonce: u128,
    /// 0 when taken, one more per renewal.
    pub renewal: u64,
    /// L, the holder's `--replica-lease`.
    pub lease_ms: u32,
    /// m, the margin both sides keep (L / 20, decision 0031 §5).
    pub margin_ms: u32,
    /// The holder's wall clock, for people only: never compared with another clock.
    pub written_unix_ms: u64,
    /// Takeovers of this prefix so far (a taker adds one).
    pub failovers: u64,
    /// The taker's measured failover, milliseconds.
    pub last_failover_ms: u64,
    /// The generation it ships (0 while taking over).
    pub generation: u32,
    /// `host:pid`.
    pub holder: String,
    /// Where clients reach it.
    pub advertise: String,
    /// Its host and canonical data directory: "is this lease my own store's?" at a restart.
    pub store: String,
}

impl LeaseRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::default();
        writer.raw(LEASE_MAGIC);
        writer.u16(FORMAT_VERSION);
        writer.u8(self.state as u8);
        writer.u8(0);
        writer.u64(self.epoch);
        writer.raw(&self.replica_id);
        writer.raw(&self.holder_nonce.to_le_bytes());
        writer.u64(self.renewal);
        writer.u32(self.lease_ms);
        writer.u32(self.margin_ms);
        writer.u64(self.written_unix_ms);
        writer.u64(self.failovers);
        writer.u64(self.last_failover_ms);
        writer.u32(self.generation);
        writer.blob(self.holder.as_bytes());
        writer.blob(self.advertise.as_bytes());
        writer.blob(self.store.as_bytes());
        seal(writer)
    }

    pub fn decode(bytes: &[u8], what: &str) -> Result<LeaseRecord, FormatError> {
        let mut reader = open(bytes, LEASE_MAGIC, what)?;
        let state = match reader.u8()? {
            1 => LeaseState::Held,
            2 => LeaseState::Released,
            other => {
                reader.check(false, || format!("lease state {other}"))?;
                LeaseState::Held
            }
        };
        let reserved = reader.u8()?;
        reader.check(reserved == 0, || format!("reserved byte {reserved}"))?;
        let record = LeaseRecord {
            state,
            epoch: reader.u64()?,
            replica_id: reader.array()?,
            holder_nonce: u128::from_le_bytes(reader.array()?),
            renewal: reader.u64()?,
            lease_ms: reader.u32()?,
            margin_ms: reader.u32()?,
            written_unix_ms: reader.u64()?,
            failovers: reader.u64()?,
            last_failover_ms: reader.u64()?,
            generation: reader.u32()?,
            holder: String::from_utf8_lossy(reader.blob(HOLDER_BYTES_MAX)?).into_owned(),
            advertise: String::from_utf8_lossy(reader.blob(HOLDER_BYTES_MAX)?).into_owned(),
            store: String::from_utf8_lossy(reader.blob(HOLDER_BYTES_MAX)?).into_owned(),
        };
        reader.check(
            record.lease_ms > 0 && record.margin_ms < record.lease_ms,
            || {
                format!(
                    "lease of {} ms with a margin of {} ms",
                    record.lease_ms, record.margin_ms
                )
            },
        )?;
        reader.take(HASH_BYTES)?;
        reader.finish()?;
        Ok(record)
    }
}

/// `PREFIX/gG-generation`: a lineage begins; `parent` is where it forked (a restore, a
/// promoted standby, a primary that found the replica ahead of it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerationRecord {
    pub generation: u32,
    pub replica_id: ReplicaId,
    pub parent: Option<(u32, u64)>,
    pub created_unix_ms: u64,
    pub holder: String,
    /// The first record id and ContextID this generation's primary handed out (issue 46 item
    /// 8): a later generation starts past them even if this one shipped nothing. Encoded after
    /// `holder` only when not 0; records written before them read 0 (unknown).
    pub floors: ctxstore_engine::id_floors::IdFloors,
}

impl GenerationRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::default();
        writer.raw(GENERATION_MAGIC);
        writer.u16(FORMAT_VERSION);
        writer.u32(self.generation);
        writer.raw(&self.replica_id);
        match self.parent {
            None => writer.u8(0),
            Some((generation, seq)) => {
                writer.u8(1);
                writer.u32(generation);
                writer.u64(seq);
            }
        }
        writer.u64(self.created_unix_ms);
        writer.blob(self.holder.as_bytes());
        if self.floors != ctxstore_engine::id_floors::IdFloors::default() {
            writer.u64(self.floors.records);
            writer.u64(self.floors.contexts);
        }
        seal(writer)
    }

    pub fn decode(bytes: &[u8], what: &str) -> Result<GenerationRecord, FormatError> {
        let mut reader = open(bytes, GENERATION_MAGIC, what)?;
        let generation = reader.u32()?;
        let replica_id = reader.array()?;
        let parent = match reader.u8()? {
            0 => None,
            _ => Some((reader.u32()?, reader.u64()?)),
        };
        let mut record = GenerationRecord {
            generation,
            replica_id,
            parent,
            created_unix_ms: reader.u64()?,
            holder: String::from_utf8_lossy(reader.blob(HOLDER_BYTES_MAX)?).into_owned(),
            floors: ctxstore_engine::id_floors::IdFloors::default(),
        };
        if reader.remaining() > HASH_BYTES {
            record.floors.records = reader.u64()?;
            record.floors.contexts = reader.u64()?;
        }
        reader.take(HASH_BYTES)?;
        reader.finish()?;
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> SegmentHeader {
        SegmentHeader {
            generation: 2,
            seq: 7,
            epoch: 3,
            replica_id: [9; 16],
            created_unix_ms: 1_700_000_000_000,
            continues: false,
            seal: false,
            meta: vec![1; 64],
            log_records: 10,
            log_piece: Some(SegmentPiece {
                shard: 0,
                pack_id: 0,
                file_offset: 0,
                len: 10 * LOG_SLOT_BYTES,
                body_offset: 0,
            }),
            log_base: None,
            shards: vec![ShardPoint {
                pack_id: 1,
                pack_end: 100,
            }],
            pieces: vec![
                SegmentPiece {
                    shard: 0,
                    pack_id: 0,
                    file_offset: 0,
                    len: 300,
                    body_offset: 1280,
                },
                SegmentPiece {
                    shard: 0,
                    pack_id: 1,
                    file_offset: 0,
                    len: 100,
                    body_offset: 1580,
                },
            ],
            replaced: vec![],
            body_bytes: 1680,
            contexts: 0,
        }
    }

    #[test]
    fn a_segment_says_its_contexts_after_the_body_length_and_older_ones_read_zero() {
        let mut header = header();
        let body = vec![7u8; 1680];
        let without = encode_segment(&header, &body);
        header.contexts = 70_000;
        let with = encode_segment(&header, &body);
        assert_eq!(with.len(), without.len() + 8);
        assert_eq!(decode_segment(&with, "s7").unwrap().0, header);
        assert_eq!(decode_segment(&without, "s7").unwrap().0.contexts, 0);
    }

    #[test]
    fn a_segment_round_trips_and_a_flipped_byte_anywhere_is_an_error() {
        let header = header();
        let body = vec![7u8; 1680];
        let bytes = encode_segment(&header, &body);
        let (decoded, body_start) = decode_segment(&bytes, "s7").unwrap();
        assert_eq!(decoded, header);
        assert_eq!(&bytes[body_start..body_start + 1680], &body[..]);
        for at in (0..bytes.len()).step_by(7) {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            assert!(decode_segment(&damaged, "s7").is_err(), "flip at {at}");
        }
        for len in [0, 5, 12, 40, bytes.len() - 1] {
            assert!(decode_segment(&bytes[..len], "s7").is_err(), "cut at {len}");
        }
    }

    #[test]
    fn a_seal_round_trips_as_flag_bit_1_and_a_seal_that_continues_is_refused() {
        let mut state = StoreState::default();
        let segment = ObjectRef::Segment {
            generation: 2,
            seq: 7,
        };
        state.apply(&header(), segment, 500, "s7").unwrap();
        let seal = SegmentHeader::seal(2, 8, 4, [9; 16], 1_700_000_000_000, &state);
        let bytes = encode_segment(&seal, &[]);
        let (decoded, _) = decode_segment(&bytes, "s8").unwrap();
        assert_eq!(decoded, seal);
        assert!(decoded.seal && !decoded.continues);
        assert_eq!(decoded.log_records, 10, "the last point's records");
        assert_eq!(decoded.shards, header().shards, "the last point's shards");
        // Flags at byte 14 (after the magic, the header's length and the format version).
        assert_eq!(u16::from_le_bytes([bytes[14], bytes[15]]), 2);
        let both = SegmentHeader {
            continues: true,
            ..seal
        };
        let error = decode_segment(&encode_segment(&both, &[]), "s8").unwrap_err();
        assert!(error.to_string().contains("unknown flags 0x3"), "{error}");
    }

    #[test]
    fn a_segment_with_many_pieces_round_trips() {
        let mut header = header();
        header.pieces = (0..500u32)
            .map(|pack_id| SegmentPiece {
                shard: 0,
                pack_id,
                file_offset: 0,
                len: 1,
                body_offset: u64::from(pack_id),
            })
            .collect();
        header.log_piece = None;
        header.body_bytes = 500;
        let bytes = encode_segment(&header, &[1u8; 500]);
        assert_eq!(decode_segment(&bytes, "s").unwrap().0, header);
    }

    #[test]
    fn state_follows_segments_and_round_trips_as_a_checkpoint() {
        let mut state = StoreState::default();
        let segment = ObjectRef::Segment {
            generation: 2,
            seq: 7,
        };
        state.apply(&header(), segment, 500, "s7").unwrap();
        assert_eq!(state.log_records, 10);
        assert_eq!(state.shards[0].packs.len(), 2);
        assert_eq!(state.shards[0].packs[0].len, 300);
        assert_eq!(state.shards[0].packs[0].pieces[0].object_offset, 500 + 1280);
        // The same segment again does not follow on.
        assert!(state.clone().apply(&header(), segment, 500, "s7").is_err());
        let checkpoint = Checkpoint {
            generation: 2,
            seq: 7,
            epoch: 3,
            replica_id: [9; 16],
            created_unix_ms: 5,
            state: state.clone(),
        };
        let bytes = checkpoint.encode();
        assert_eq!(Checkpoint::decode(&bytes, "c7").unwrap(), checkpoint);
        let mut damaged = bytes.clone();
        damaged[40] ^= 1;
        assert!(Checkpoint::decode(&damaged, "c7").is_err());
        assert_eq!(state.objects().len(), 1);
    }

    #[test]
    fn a_lease_round_trips_and_every_renewal_changes_its_bytes() {
        let lease = LeaseRecord {
            state: LeaseState::Held,
            epoch: 7,
            replica_id: [3; 16],
            holder_nonce: 0xfeed,
            renewal: 0,
            lease_ms: 10_000,
            margin_ms: 500,
            written_unix_ms: 1_700_000_000_000,
            failovers: 2,
            last_failover_ms: 11_800,
            generation: 4,
            holder: "host-a:123".into(),
            advertise: "10.0.0.7:7411".into(),
            store: "host-a:/var/lib/ctxstore".into(),
        };
        let bytes = lease.encode();
        assert_eq!(LeaseRecord::decode(&bytes, "lease").unwrap(), lease);
        let renewed = LeaseRecord {
            renewal: 1,
            ..lease.clone()
        };
        assert_ne!(renewed.encode(), bytes);
        let released = LeaseRecord {
            state: LeaseState::Released,
            ..lease.clone()
        };
        assert_eq!(
            LeaseRecord::decode(&released.encode(), "lease")
                .unwrap()
                .state,
            LeaseState::Released
        );
        for at in (0..bytes.len()).step_by(5) {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert!(
                LeaseRecord::decode(&damaged, "lease").is_err(),
                "flip at {at}"
            );
        }
    }

    #[test]
    fn control_objects_round_trip() {
        let marker = Marker {
            replica_id: [1; 16],
            created_unix_ms: 2,
        };
        assert_eq!(Marker::decode(&marker.encode(), "m").unwrap(), marker);
        let epoch = EpochRecord {
            epoch: 4,
            replica_id: [1; 16],
            generation: 2,
            nonce: 99,
            taken_unix_ms: 3,
            holder: "host:123".into(),
            advertise: String::new(),
        };
        assert_eq!(EpochRecord::decode(&epoch.encode(), "e").unwrap(), epoch);
        let advertised = EpochRecord {
            advertise: "10.0.0.7:7411".into(),
            ..epoch.clone()
        };
        let bytes = advertised.encode();
        assert_eq!(EpochRecord::decode(&bytes, "e").unwrap(), advertised);
        assert_eq!(
            bytes.len(),
            epoch.encode().len() + 4 + "10.0.0.7:7411".len(),
            "the address is one more blob after the holder"
        );
        let generation = GenerationRecord {
            generation: 2,
            replica_id: [1; 16],
            parent: Some((1, 40)),
            created_unix_ms: 3,
            holder: "h".into(),
            floors: Default::default(),
        };
        let floored = GenerationRecord {
            floors: ctxstore_engine::id_floors::IdFloors {
                records: 524_300,
                contexts: 65_540,
            },
            ..generation.clone()
        };
        assert_eq!(
            GenerationRecord::decode(&floored.encode(), "g").unwrap(),
            floored,
            "floors round-trip after the holder"
        );
        assert_eq!(
            GenerationRecord::decode(&generation.encode(), "g").unwrap(),
            generation
        );
        assert!(
            Marker::decode(&epoch.encode(), "m").is_err(),
            "a magic each"
        );
    }
}
