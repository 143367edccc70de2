//! A store's state as the replica sees it: where every byte of every file lives remotely
//! (`StoreState`, its packs and shards), and `apply`, which folds a segment into it. The
//! shipper and restore share it; a checkpoint carries it (its bytes are encoded here, beside
//! the state they describe; the objects around them are `format.rs`'s).

use crate::codec::{Reader, Writer};
use crate::error::FormatError;
use crate::format::*;
use crate::layout::Key;

/// One pack file as pieces.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PackFile {
    pub len: u64,
    pub pieces: Vec<Piece>,
    /// BLAKE3 of the whole pack object its first piece reads, when it starts with one (a
    /// pack uploaded whole): restore checks the object against it.
    pub object_hash: Option<[u8; HASH_BYTES]>,
}

/// A shard's files: its packs by id (contiguous from 0), the open one last.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ShardFiles {
    pub point: ShardPoint,
    pub packs: Vec<PackFile>,
}

/// Where every byte of a store's state lives remotely (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct StoreState {
    pub meta: Vec<u8>,
    pub log_records: u64,
    pub log_base: Option<BaseRef>,
    /// `turns.log` pieces, above the base.
    pub log_pieces: Vec<Piece>,
    pub shards: Vec<ShardFiles>,
}

impl StoreState {
    /// Bytes of `turns.log` the state describes (slots `1..=log_records`).
    pub fn log_bytes(&self) -> u64 {
        self.log_records * LOG_SLOT_BYTES
    }

    /// Folds `segment` (the object `object`, its body starting at `body_start`) into the state.
    /// A segment that does not follow on is an error naming it: pieces must extend their
    /// files exactly where they end, packs must exist in order.
    pub fn apply(
        &mut self,
        segment: &SegmentHeader,
        object: ObjectRef,
        body_start: u64,
        what: &str,
    ) -> Result<(), FormatError> {
        self.meta = segment.meta.clone();
        self.apply_log(segment, object, body_start, what)?;
        self.apply_packs(segment, object, body_start, what)
    }

    /// The segment's log: its base (the bytes below it become holes), its piece (extending
    /// the log exactly where it ends) and its record count (which the pieces must reach).
    fn apply_log(
        &mut self,
        segment: &SegmentHeader,
        object: ObjectRef,
        body_start: u64,
        what: &str,
    ) -> Result<(), FormatError> {
        let reader = Reader::new(&[], what);
        if let Some(base) = segment.log_base {
            reader.check(base.through <= segment.log_records, || {
                format!(
                    "base through {} passes the log's {}",
                    base.through, segment.log_records
                )
            })?;
            // The log's bytes below the base are holes from now on.
            let cut = base.through * LOG_SLOT_BYTES;
            self.log_pieces
                .retain(|piece| piece.file_offset + piece.len > cut);
            self.log_base = Some(base);
        }
        if let Some(log) = &segment.log_piece {
            let end = self.log_end();
            reader.check(log.file_offset == end, || {
                format!(
                    "log bytes start at {} where the shipped log ends at {end}",
                    log.file_offset
                )
            })?;
            self.log_pieces.push(Piece {
                object,
                object_offset: body_start + log.body_offset,
                file_offset: log.file_offset,
                len: log.len,
            });
        }
        reader.check(
            segment.log_records * LOG_SLOT_BYTES == self.log_end().max(self.base_end()),
            || {
                format!(
                    "says {} log records, its pieces reach byte {}",
                    segment.log_records,
                    self.log_end()
                )
            },
        )?;
        self.log_records = segment.log_records;
        Ok(())
    }

    /// The segment's packs: rewritten ones replaced whole, appended bytes extending their
    /// pack exactly where it ends, and each shard's point.
    fn apply_packs(
        &mut self,
        segment: &SegmentHeader,
        object: ObjectRef,
        body_start: u64,
        what: &str,
    ) -> Result<(), FormatError> {
        let reader = Reader::new(&[], what);
        if self.shards.len() < segment.shards.len() {
            self.shards
                .resize(segment.shards.len(), ShardFiles::default());
        }
        reader.check(self.shards.len() == segment.shards.len(), || {
            format!(
                "{} shards where the state had {}",
                segment.shards.len(),
                self.shards.len()
            )
        })?;
        for replaced in &segment.replaced {
            let pack = self.pack_mut(replaced.shard, replaced.pack_id, what)?;
            *pack = PackFile {
                len: replaced.len,
                pieces: vec![Piece {
                    object: replaced.object,
                    object_offset: 0,
                    file_offset: 0,
                    len: replaced.len,
                }],
                object_hash: Some(replaced.hash),
            };
            if replaced.len == 0 {
                pack.pieces.clear();
                pack.object_hash = None;
            }
        }
        for piece in &segment.pieces {
            let pack = self.pack_mut(piece.shard, piece.pack_id, what)?;
            reader.check(piece.file_offset == pack.len, || {
                format!(
                    "pack {}/{} bytes start at {} where the shipped pack ends at {}",
                    piece.shard, piece.pack_id, piece.file_offset, pack.len
                )
            })?;
            pack.pieces.push(Piece {
                object,
                object_offset: body_start + piece.body_offset,
                file_offset: piece.file_offset,
                len: piece.len,
            });
            pack.len += piece.len;
        }
        for (shard, point) in self.shards.iter_mut().zip(&segment.shards) {
            shard.point = *point;
        }
        Ok(())
    }

    /// A restore inside a cut (`restore --at-seq` below the cut's end) took the log up to
    /// its point but the packs as at the cut's end, where a collection in the cut may have
    /// dropped blobs that records up to the point still name: the restored store then lost
    /// those turns (issue 46 item 3). Each pack sealed at `before` (the whole point before
    /// the cut) that the cut rewrote is taken as it was there instead: a compaction only drops
    /// records, so the older file holds every blob the newer one does (the dead ones too, as
    /// a crash before the compaction would have left them). The same for the log: a base the
    /// cut wrote may have dropped turns that died only after the point, so the log below
    /// `before`'s end is taken as it was there. Answers how many files it took from `before`.
    pub fn as_sealed_at(&mut self, before: &StoreState) -> usize {
        let mut taken = 0;
        if self.log_base != before.log_base {
            let before_end = before.log_end();
            let shipped_since = self
                .log_pieces
                .iter()
                .filter(|piece| piece.file_offset >= before_end);
            self.log_pieces = before
                .log_pieces
                .iter()
                .chain(shipped_since)
                .copied()
                .collect();
            self.log_base = before.log_base;
            taken += 1;
        }
        for (shard, earlier) in self.shards.iter_mut().zip(&before.shards) {
            let sealed = earlier.point.pack_id as usize;
            for (pack, old) in shard.packs.iter_mut().zip(&earlier.packs).take(sealed) {
                if pack != old {
                    *pack = old.clone();
                    taken += 1;
                }
            }
        }
        taken
    }

    fn log_end(&self) -> u64 {
        self.log_pieces
            .last()
            .map_or(self.base_end(), |piece| piece.file_offset + piece.len)
    }

    fn base_end(&self) -> u64 {
        self.log_base
            .map_or(0, |base| base.through * LOG_SLOT_BYTES)
    }

    /// The pack, made (with every pack before it) if it is new.
    fn pack_mut(
        &mut self,
        shard: u16,
        pack_id: u32,
        what: &str,
    ) -> Result<&mut PackFile, FormatError> {
        let reader = Reader::new(&[], what);
        let files = self.shards.get_mut(usize::from(shard));
        reader.check(files.is_some(), || format!("shard {shard} does not exist"))?;
        let Some(files) = files else {
            unreachable!("checked")
        };
        reader.check((pack_id as usize) < PACKS_MAX, || {
            format!("pack {pack_id} is out of range")
        })?;
        if files.packs.len() <= pack_id as usize {
            files
                .packs
                .resize(pack_id as usize + 1, PackFile::default());
        }
        Ok(&mut files.packs[pack_id as usize])
    }

    /// Every object the state reads from.
    pub fn objects(&self) -> std::collections::BTreeSet<Key> {
        let mut keys = std::collections::BTreeSet::new();
        if let Some(base) = &self.log_base {
            keys.insert(base.object.key());
        }
        let pieces = self.log_pieces.iter().chain(
            self.shards
                .iter()
                .flat_map(|shard| shard.packs.iter().flat_map(|pack| &pack.pieces)),
        );
        for piece in pieces {
            keys.insert(piece.object.key());
        }
        keys
    }

    pub(crate) fn encode(&self, writer: &mut Writer) {
        writer.blob(&self.meta);
        writer.u64(self.log_records);
        encode_optional_base(writer, &self.log_base);
        encode_pieces(writer, &self.log_pieces);
        writer.count(self.shards.len());
        for shard in &self.shards {
            writer.u32(shard.point.pack_id);
            writer.u64(shard.point.pack_end);
            writer.count(shard.packs.len());
            for pack in &shard.packs {
                writer.u64(pack.len);
                encode_pieces(writer, &pack.pieces);
                match &pack.object_hash {
                    None => writer.u8(0),
                    Some(hash) => {
                        writer.u8(1);
                        writer.raw(hash);
                    }
                }
            }
        }
    }

    pub(crate) fn decode(reader: &mut Reader<'_>) -> Result<StoreState, FormatError> {
        let meta = reader.blob(META_BYTES_MAX)?.to_vec();
        let log_records = reader.u64()?;
        let log_base = decode_optional_base(reader)?;
        let log_pieces = decode_pieces(reader)?;
        let shard_count = reader.count(SHARDS_MAX, 16)?;
        let mut shards = Vec::with_capacity(shard_count);
        for _ in 0..shard_count {
            let point = ShardPoint {
                pack_id: reader.u32()?,
                pack_end: reader.u64()?,
            };
            let pack_count = reader.count(PACKS_MAX, 12)?;
            let mut packs = Vec::with_capacity(pack_count);
            for _ in 0..pack_count {
                let len = reader.u64()?;
                let pieces = decode_pieces(reader)?;
                let covered: u64 = pieces.iter().map(|piece| piece.len).sum();
                reader.check(covered == len && contiguous(&pieces), || {
                    format!("a pack of {len} bytes whose pieces do not tile it")
                })?;
                let object_hash = match reader.u8()? {
                    0 => None,
                    _ => Some(reader.array()?),
                };
                packs.push(PackFile {
                    len,
                    pieces,
                    object_hash,
                });
            }
            shards.push(ShardFiles { point, packs });
        }
        Ok(StoreState {
            meta,
            log_records,
            log_base,
            log_pieces,
            shards,
        })
    }
}

fn contiguous(pieces: &[Piece]) -> bool {
    pieces
        .windows(2)
        .all(|pair| pair[0].file_offset + pair[0].len == pair[1].file_offset)
        && pieces.first().is_none_or(|first| first.file_offset == 0)
}

fn encode_pieces(writer: &mut Writer, pieces: &[Piece]) {
    writer.count(pieces.len());
    for piece in pieces {
        piece.encode(writer);
    }
}

fn decode_pieces(reader: &mut Reader<'_>) -> Result<Vec<Piece>, FormatError> {
    let count = reader.count(PIECES_MAX, PIECE_BYTES)?;
    let mut pieces = Vec::with_capacity(count);
    for _ in 0..count {
        pieces.push(Piece::decode(reader)?);
    }
    Ok(pieces)
}
