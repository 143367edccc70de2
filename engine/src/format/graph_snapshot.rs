//! A vector graph's snapshot (decision 0033 §4): `DIR/vectors/T{tenant}-I{index}.snap`, what
//! the graph writer saves so that an open loads a graph in seconds rather than rebuild it from
//! every vectors blob. Derived data: never shipped to a replica nor backed up; a snapshot
//! that fails any check here is set aside and the graph rebuilt (and logged).
//!
//! Layout, little endian: a header of `SNAPSHOT_HEADER_BYTES`: `magic [4] = "CXVG"`,
//! `format u16 = 1`, `metric u8` (`Metric::code`), `sealed u8` (0: the body is plain; 1:
//! sealed under the tenant's data key of `key_version`), `tenant_id u32`, `index_id u32`,
//! `dims u16`, `key_version u16` (0 when plain), `held u64` (addresses in the graph),
//! `graph_bytes u64` (usearch's buffer), `body_bytes u64`; then the body of `body_bytes`
//! (sealed or plain: `held` × (`address [32]`, `rows u8`), then the usearch buffer); then a
//! BLAKE3 of everything before it. A vectors blob's address is its tenant's, so the list names
//! blobs as the log does.

use ctxstore_vocab::le::LeReader;
use ctxstore_vocab::vectors::{Metric, VECTOR_DIMS_MAX, VECTORS_PER_ENTRY_MAX};

use crate::format::RecordError;
use crate::ids::{BlobHash, TenantId};

pub const SNAPSHOT_MAGIC: [u8; 4] = *b"CXVG";
pub const SNAPSHOT_FORMAT: u16 = 1;
pub const SNAPSHOT_HEADER_BYTES: usize = 44;
const CHECKSUM_BYTES: usize = 32;
/// One held address in the plain body: the address and its rows.
const HELD_ENTRY_BYTES: usize = 33;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SnapshotHeader {
    pub tenant_id: TenantId,
    pub index_id: u32,
    pub dims: u16,
    pub metric: Metric,
    /// The body is sealed under the tenant's data key of `key_version`.
    pub sealed: bool,
    pub key_version: u16,
    pub held: u64,
    pub graph_bytes: u64,
    pub body_bytes: u64,
}

/// The snapshot file: `header`, `body` (as the header describes it), the checksum.
pub fn encode(header: &SnapshotHeader, body: &[u8]) -> Vec<u8> {
    assert_eq!(
        body.len() as u64,
        header.body_bytes,
        "the header describes the body"
    );
    let mut out = Vec::with_capacity(SNAPSHOT_HEADER_BYTES + body.len() + CHECKSUM_BYTES);
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    out.extend_from_slice(&SNAPSHOT_FORMAT.to_le_bytes());
    out.push(header.metric.code());
    out.push(u8::from(header.sealed));
    out.extend_from_slice(&header.tenant_id.0.to_le_bytes());
    out.extend_from_slice(&header.index_id.to_le_bytes());
    out.extend_from_slice(&header.dims.to_le_bytes());
    out.extend_from_slice(&header.key_version.to_le_bytes());
    out.extend_from_slice(&header.held.to_le_bytes());
    out.extend_from_slice(&header.graph_bytes.to_le_bytes());
    out.extend_from_slice(&header.body_bytes.to_le_bytes());
    assert_eq!(out.len(), SNAPSHOT_HEADER_BYTES);
    out.extend_from_slice(body);
    let checksum = blake3::hash(&out);
    out.extend_from_slice(checksum.as_bytes());
    out
}

/// Reads a snapshot file; never panics. Answers its header and its body (still sealed when
/// the header says so), once the checksum, the lengths and the fields hold.
pub fn decode(bytes: &[u8]) -> Result<(SnapshotHeader, &[u8]), RecordError> {
    if bytes.len() < SNAPSHOT_HEADER_BYTES + CHECKSUM_BYTES {
        return Err(RecordError::Field("graph snapshot shorter than its header"));
    }
    let (covered, stored) = bytes.split_at(bytes.len() - CHECKSUM_BYTES);
    if blake3::hash(covered).as_bytes() != stored {
        return Err(RecordError::Field(
            "graph snapshot's checksum does not match",
        ));
    }
    let mut reader = LeReader::new(&covered[..SNAPSHOT_HEADER_BYTES]);
    let short = |_| RecordError::Field("graph snapshot header ends early");
    let magic: [u8; 4] = reader.array().map_err(short)?;
    if magic != SNAPSHOT_MAGIC {
        return Err(RecordError::Magic(ctxstore_vocab::le::u32_at(&magic, 0)));
    }
    let format = reader.u16().map_err(short)?;
    if format != SNAPSHOT_FORMAT {
        return Err(RecordError::Version(u32::from(format)));
    }
    let metric = Metric::from_code(reader.u8().map_err(short)?)
        .ok_or(RecordError::Field("graph snapshot's metric is unknown"))?;
    let sealed = match reader.u8().map_err(short)? {
        0 => false,
        1 => true,
        _ => {
            return Err(RecordError::Field(
                "graph snapshot's sealed flag is not 0 or 1",
            ));
        }
    };
    let header = SnapshotHeader {
        tenant_id: TenantId(reader.u32().map_err(short)?),
        index_id: reader.u32().map_err(short)?,
        dims: reader.u16().map_err(short)?,
        metric,
        sealed,
        key_version: reader.u16().map_err(short)?,
        held: reader.u64().map_err(short)?,
        graph_bytes: reader.u64().map_err(short)?,
        body_bytes: reader.u64().map_err(short)?,
    };
    if !(1..=VECTOR_DIMS_MAX).contains(&usize::from(header.dims)) {
        return Err(RecordError::Field(
            "graph snapshot's dimension is not 1..=4096",
        ));
    }
    let body = &covered[SNAPSHOT_HEADER_BYTES..];
    if body.len() as u64 != header.body_bytes {
        return Err(RecordError::Field(
            "graph snapshot's body length disagrees with its header",
        ));
    }
    Ok((header, body))
}

/// The plain body: the held addresses with their rows, then usearch's buffer.
pub fn encode_body(held: &[(BlobHash, u8)], graph: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(held.len() * HELD_ENTRY_BYTES + graph.len());
    for (address, rows) in held {
        assert!(
            (1..=VECTORS_PER_ENTRY_MAX).contains(&usize::from(*rows)),
            "a held address has 1..=64 rows"
        );
        out.extend_from_slice(&address.0);
        out.push(*rows);
    }
    out.extend_from_slice(graph);
    out
}

/// The addresses a graph holds, each with its rows.
pub type HeldList = Vec<(BlobHash, u8)>;

/// Splits a plain body as `header` describes it: the held addresses and usearch's buffer.
pub fn decode_body<'a>(
    header: &SnapshotHeader,
    body: &'a [u8],
) -> Result<(HeldList, &'a [u8]), RecordError> {
    let held_bytes = usize::try_from(header.held)
        .ok()
        .and_then(|held| held.checked_mul(HELD_ENTRY_BYTES))
        .ok_or(RecordError::Field(
            "graph snapshot's held count is too large",
        ))?;
    let expected = (held_bytes as u64).checked_add(header.graph_bytes);
    if expected != Some(body.len() as u64) {
        return Err(RecordError::Field(
            "graph snapshot's body disagrees with its held count and graph length",
        ));
    }
    let (list, graph) = body.split_at(held_bytes);
    let mut held = Vec::with_capacity(list.len() / HELD_ENTRY_BYTES);
    for entry in list.chunks_exact(HELD_ENTRY_BYTES) {
        let mut address = [0u8; 32];
        address.copy_from_slice(&entry[..32]);
        let rows = entry[32];
        if !(1..=VECTORS_PER_ENTRY_MAX).contains(&usize::from(rows)) {
            return Err(RecordError::Field(
                "graph snapshot holds an address of 0 or 65+ rows",
            ));
        }
        held.push((BlobHash(address), rows));
    }
    Ok((held, graph))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(body: &[u8], held: u64, graph_bytes: u64) -> SnapshotHeader {
        SnapshotHeader {
            tenant_id: TenantId(3),
            index_id: 7,
            dims: 384,
            metric: Metric::Cosine,
            sealed: false,
            key_version: 0,
            held,
            graph_bytes,
            body_bytes: body.len() as u64,
        }
    }

    #[test]
    fn round_trips_and_refuses_damage() {
        let held = vec![(BlobHash([1; 32]), 2), (BlobHash([9; 32]), 64)];
        let body = encode_body(&held, b"graph bytes");
        let header = header(&body, 2, 11);
        let file = encode(&header, &body);
        let (read, read_body) = decode(&file).unwrap();
        assert_eq!(read, header);
        let (read_held, graph) = decode_body(&read, read_body).unwrap();
        assert_eq!(read_held, held);
        assert_eq!(graph, b"graph bytes");
        for at in [0, 5, SNAPSHOT_HEADER_BYTES + 3, file.len() - 1] {
            let mut damaged = file.clone();
            damaged[at] ^= 0x40;
            assert!(decode(&damaged).is_err(), "a flip at {at} is caught");
        }
        assert!(decode(&file[..file.len() - 1]).is_err());
        assert!(decode(b"").is_err());
        // A header whose counts disagree with the body.
        let lying = SnapshotHeader { held: 3, ..header };
        assert!(decode_body(&lying, &body).is_err());
        let huge = SnapshotHeader {
            held: u64::MAX,
            ..header
        };
        assert!(decode_body(&huge, &body).is_err());
    }
}
