//! The vectors blob (decision 0033 §2): the vectors of one key-value entry, all of one index,
//! stored as a blob beside the entry's value, so that they are sealed, deduplicated,
//! replicated, backed up and collected as payloads are.
//!
//! Layout, little endian: `magic [4] = "CXV1"`, `dims u16` (1..=4,096), `count u16`
//! (1..=64), then `count × dims` f32 components, every one finite. Nothing follows.

use ctxstore_vocab::le::LeReader;
use ctxstore_vocab::vectors::{VECTOR_DIMS_MAX, VECTORS_PER_ENTRY_MAX, all_finite};

use crate::format::RecordError;

pub const VECTORS_MAGIC: [u8; 4] = *b"CXV1";
/// Bytes before the components.
pub const VECTORS_HEADER_BYTES: usize = 8;

/// The size of a blob of `count` vectors of `dims` components.
pub fn encoded_len(dims: usize, count: usize) -> usize {
    VECTORS_HEADER_BYTES + dims * count * 4
}

/// The blob of `vectors`, each of `dims` finite components: the caller checked them (pair
/// assertion with `decode`).
pub fn encode(dims: usize, vectors: &[Vec<f32>]) -> Vec<u8> {
    assert!(
        (1..=VECTOR_DIMS_MAX).contains(&dims),
        "dims checked on admission"
    );
    assert!(
        (1..=VECTORS_PER_ENTRY_MAX).contains(&vectors.len()),
        "vector count checked on admission"
    );
    let mut out = Vec::with_capacity(encoded_len(dims, vectors.len()));
    out.extend_from_slice(&VECTORS_MAGIC);
    out.extend_from_slice(&(dims as u16).to_le_bytes());
    out.extend_from_slice(&(vectors.len() as u16).to_le_bytes());
    for vector in vectors {
        assert!(
            vector.len() == dims && all_finite(vector),
            "vector checked on admission"
        );
        for component in vector {
            out.extend_from_slice(&component.to_le_bytes());
        }
    }
    out
}

/// Decoded vectors: `count` rows of `dims` components, one after another.
#[derive(Clone, PartialEq, Debug)]
pub struct Vectors {
    pub dims: usize,
    pub components: Vec<f32>,
}

impl Vectors {
    pub fn count(&self) -> usize {
        self.components.len() / self.dims
    }

    pub fn rows(&self) -> impl Iterator<Item = &[f32]> {
        self.components.chunks_exact(self.dims)
    }
}

/// Reads a vectors blob; never panics. A blob that is not one (another magic, a count or a
/// dimension out of range, a length that disagrees, a NaN or an infinity) is an error.
pub fn decode(bytes: &[u8]) -> Result<Vectors, RecordError> {
    let mut reader = LeReader::new(bytes);
    let short = |_| RecordError::Field("vectors blob ends early");
    let magic: [u8; 4] = reader.array().map_err(short)?;
    if magic != VECTORS_MAGIC {
        return Err(RecordError::Magic(ctxstore_vocab::le::u32_at(&magic, 0)));
    }
    let dims = reader.u16().map_err(short)? as usize;
    let count = reader.u16().map_err(short)? as usize;
    if !(1..=VECTOR_DIMS_MAX).contains(&dims) {
        return Err(RecordError::Field(
            "vectors blob's dimension is not 1..=4096",
        ));
    }
    if !(1..=VECTORS_PER_ENTRY_MAX).contains(&count) {
        return Err(RecordError::Field("vectors blob's count is not 1..=64"));
    }
    if reader.remaining() != dims * count * 4 {
        return Err(RecordError::Field(
            "vectors blob's length disagrees with its dimension and count",
        ));
    }
    let mut components = Vec::with_capacity(dims * count);
    for _ in 0..dims * count {
        components.push(reader.f32().map_err(short)?);
    }
    if !all_finite(&components) {
        return Err(RecordError::Field(
            "vectors blob holds a NaN or an infinity",
        ));
    }
    Ok(Vectors { dims, components })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let vectors = vec![vec![1.0, -2.5, 0.0], vec![3.0, 4.0, 5.0]];
        let bytes = encode(3, &vectors);
        assert_eq!(bytes.len(), encoded_len(3, 2));
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded.count(), 2);
        let rows: Vec<Vec<f32>> = decoded.rows().map(<[f32]>::to_vec).collect();
        assert_eq!(rows, vectors);
    }

    #[test]
    fn refuses_what_is_not_a_vectors_blob() {
        let good = encode(2, &[vec![1.0, 2.0]]);
        assert!(decode(&good[..good.len() - 1]).is_err());
        let mut nan = good.clone();
        nan[8..12].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(decode(&nan).is_err());
        let mut magic = good.clone();
        magic[0] = b'X';
        assert!(decode(&magic).is_err());
        let mut zero_dims = good;
        zero_dims[4] = 0;
        assert!(decode(&zero_dims).is_err());
        assert!(decode(b"").is_err());
    }
}
