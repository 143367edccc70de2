//! Reading a shard's files record by record, for recovery and for `verify`. Pure with respect
//! to the files: scanning never writes; the caller decides whether to truncate or report.

use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::config::SHARD_BATCH_BYTES_LIMIT;
use crate::error::Corruption;
use crate::file::{ScanFile, read_whole};
use crate::format::blob_index::{INDEX_ENTRY_BYTES, IndexEntry};
use crate::format::is_all_zero;
use crate::format::pack::{PACK_HEADER_BYTES, PackHeader};
use crate::tail::Tail;

pub(crate) struct IndexScan {
    pub entries: Vec<IndexEntry>,
    pub file_len: u64,
    pub tail: Tail,
    /// Some entry was written before entries named their record's tenant: its `tenant_id`
    /// says nothing (`IndexEntry::names_tenant`).
    pub predates_tenants: bool,
}

/// Reads every entry of `blobs.idx`. The index is appended after pack fsyncs and synced
/// lazily, so its tail may be short or zero-filled after a crash; entries are sector-aligned,
/// so a non-zero entry with a bad checksum is damage, not a torn write.
pub(crate) fn scan_index(path: &Path) -> io::Result<IndexScan> {
    let bytes = read_whole(path)?;
    let file_len = bytes.len() as u64;
    let mut entries = Vec::with_capacity(bytes.len() / INDEX_ENTRY_BYTES);
    let mut tail = Tail::Clean;
    let mut predates_tenants = false;
    for (position, chunk) in bytes.chunks(INDEX_ENTRY_BYTES).enumerate() {
        let offset = (position * INDEX_ENTRY_BYTES) as u64;
        let Ok(entry_bytes) = <&[u8; INDEX_ENTRY_BYTES]>::try_from(chunk) else {
            tail = Tail::Torn {
                offset,
                reason: format!("partial entry of {} bytes", chunk.len()),
            };
            break;
        };
        match IndexEntry::decode(entry_bytes) {
            Ok(Some(entry)) => {
                predates_tenants |= !IndexEntry::names_tenant(entry_bytes);
                entries.push(entry);
            }
            Ok(None) => {
                tail = Tail::Torn {
                    offset,
                    reason: "zero-filled entries (unsynced tail)".into(),
                };
                break;
            }
            Err(error) => {
                tail = Tail::Corrupt(Corruption::record(path, offset, &error));
                break;
            }
        }
    }
    Ok(IndexScan {
        entries,
        file_len,
        tail,
        predates_tenants,
    })
}

/// One record met by `scan_pack`.
pub(crate) struct ScannedRecord<'a> {
    pub offset: u64,
    pub header: PackHeader,
    /// The stored body; its checksum was verified.
    pub body: &'a [u8],
}

pub(crate) struct PackScan {
    pub file_len: u64,
    pub tail: Tail,
}

/// Walks the records of one pack from `start`, reading every body and verifying its checksum.
///
/// A bad record is corruption when the blob index vouches for it (`durable_end`: index entries
/// are written only after their records were fsynced), or when it lies in a sealed pack
/// (`is_newest == false`: sealed packs were synced and cut to their last record). Past the
/// index, in the newest pack: zeros to the end are prepared space; other data within
/// `SHARD_BATCH_BYTES_LIMIT` bytes is a torn tail (a batch being written when the process
/// died); data further out is corruption.
pub(crate) fn scan_pack(
    path: &Path,
    start: u64,
    is_newest: bool,
    durable_end: u64,
    mut visit: impl FnMut(ScannedRecord<'_>),
) -> io::Result<PackScan> {
    let file = ScanFile::open(path)?;
    let file_len = file.len()?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    reader.seek(SeekFrom::Start(start))?;
    let mut offset = start;
    let mut body = Vec::new();
    let bad = |offset: u64, reason: String, reader: &mut BufReader<ScanFile>| -> io::Result<Tail> {
        classify_bad_record(path, offset, is_newest, durable_end, reason, reader)
    };
    while offset < file_len {
        let remaining = file_len - offset;
        if remaining < PACK_HEADER_BYTES as u64 {
            let tail = bad(
                offset,
                format!("partial header of {remaining} bytes"),
                &mut reader,
            )?;
            return Ok(PackScan { file_len, tail });
        }
        let mut header_bytes = [0u8; PACK_HEADER_BYTES];
        reader.read_exact(&mut header_bytes)?;
        if is_all_zero(&header_bytes) {
            let tail = bad(offset, "zero-filled header".into(), &mut reader)?;
            return Ok(PackScan { file_len, tail });
        }
        let header = match PackHeader::decode(&header_bytes) {
            Ok(header) => header,
            Err(error) => {
                let tail = bad(offset, format!("header: {error}"), &mut reader)?;
                return Ok(PackScan { file_len, tail });
            }
        };
        let record_bytes = header.record_bytes();
        if record_bytes > remaining {
            let reason = format!("record of {record_bytes} bytes runs past the end");
            let tail = bad(offset, reason, &mut reader)?;
            return Ok(PackScan { file_len, tail });
        }
        let padded = (record_bytes - PACK_HEADER_BYTES as u64) as usize;
        body.resize(padded, 0);
        reader.read_exact(&mut body)?;
        let stored = &body[..header.stored_len as usize];
        if let Err(error) = header.check_body(stored) {
            let tail = bad(offset, format!("body: {error}"), &mut reader)?;
            return Ok(PackScan { file_len, tail });
        }
        if !is_all_zero(&body[header.stored_len as usize..]) {
            let tail = bad(offset, "non-zero padding".into(), &mut reader)?;
            return Ok(PackScan { file_len, tail });
        }
        visit(ScannedRecord {
            offset,
            header,
            body: stored,
        });
        offset += record_bytes;
    }
    Ok(PackScan {
        file_len,
        tail: Tail::Clean,
    })
}

fn classify_bad_record(
    path: &Path,
    offset: u64,
    is_newest: bool,
    durable_end: u64,
    reason: String,
    reader: &mut BufReader<ScanFile>,
) -> io::Result<Tail> {
    let corrupt = |reason: String| Tail::Corrupt(Corruption::new(path, offset, reason));
    if !is_newest {
        return Ok(corrupt(format!("{reason} in a sealed pack")));
    }
    if offset < durable_end {
        return Ok(corrupt(format!(
            "{reason} in a record the blob index lists as durable"
        )));
    }
    // Zeros to the end: prepared space. Data within one batch: a torn batch. Data further
    // out: damage in the middle of the pack.
    reader.seek(SeekFrom::Start(offset))?;
    let mut chunk = vec![0u8; 1 << 20];
    let mut position = offset;
    let mut data_end = None;
    loop {
        let read = reader.read(&mut chunk)?;
        if read == 0 {
            break;
        }
        if let Some(last) = chunk[..read].iter().rposition(|&byte| byte != 0) {
            data_end = Some(position + last as u64 + 1);
        }
        position += read as u64;
    }
    Ok(match data_end {
        None => Tail::Preallocated { offset },
        Some(end) if end - offset <= SHARD_BATCH_BYTES_LIMIT => Tail::Torn { offset, reason },
        Some(_) => corrupt(format!("{reason}, followed by more than one batch of data")),
    })
}

/// Pack files of a shard directory, by pack id. Ids must be contiguous from 0.
pub(crate) fn list_packs(shard_dir: &Path) -> io::Result<Vec<(u32, PathBuf)>> {
    let mut packs = Vec::new();
    for entry in std::fs::read_dir(shard_dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Some(pack_id) = name.to_str().and_then(crate::store_dir::parse_pack_name) {
            packs.push((pack_id, entry.path()));
        }
    }
    packs.sort();
    Ok(packs)
}

/// Where the index coverage of `pack_id` ends: records before it are known durable.
pub(crate) fn indexed_end(entries: &[IndexEntry], pack_id: u32) -> u64 {
    entries
        .iter()
        .rev()
        .find(|entry| entry.location.pack_id == pack_id)
        .map_or(0, |entry| {
            entry.location.pack_offset + entry.location.record_bytes()
        })
}
