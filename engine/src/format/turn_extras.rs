//! The extras of a turn (`turns.log` continuation slots after a version-2 turn record): its
//! key, labels, links and vectors. Layout in docs/storage.md#turn-extras and decision 0009; the limits
//! are the format's ceilings, checked when an append is admitted (typed errors) and again
//! when a body is decoded.
//!
//! ```text
//! u8 key_len (≤ 64), key
//! u8 label_count (≤ 16), label_count × (u8 key_len (1..=64), key, u16 value_len, value)
//!                        (UTF-8; keys unique, sorted; keys and values ≤ 1,024 bytes together)
//! u8 link_count (≤ 8), link_count × u64 turn_id (non-zero)
//! then, only when the turn has vectors (decision 0033 §2; absent from older logs):
//! u32 index_id (≥ 1), u8 count (1..=16), u32 blob_len, [32]u8 vectors blob address
//! ```

use ctxstore_vocab::le::{LeReader, ShortRead};

use crate::format::RecordError;
use crate::format::context_meta::KvVectors;
use crate::ids::{BlobHash, TurnId};

pub use ctxstore_vocab::limits::{
    LABEL_KEY_BYTES_MAX, LABELS_BYTES_MAX, LABELS_PER_TURN_MAX, LINKS_PER_TURN_MAX,
    TURN_KEY_BYTES_MAX,
};
pub use ctxstore_vocab::vectors::VECTORS_PER_TURN_MAX;
/// The vectors trailer: index id, count, blob length, address.
const VECTORS_TRAILER_BYTES: usize = 4 + 1 + 4 + 32;
/// The longest extras body the limits allow.
pub const TURN_EXTRAS_BYTES_MAX: usize = 1
    + TURN_KEY_BYTES_MAX
    + 1
    + LABELS_PER_TURN_MAX * 3
    + LABELS_BYTES_MAX
    + 1
    + LINKS_PER_TURN_MAX * 8
    + VECTORS_TRAILER_BYTES;

/// A turn's key (unique within its context; empty: none), labels, links and vectors.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct TurnExtras {
    pub key: Vec<u8>,
    /// Sorted by key, keys unique.
    pub labels: Vec<(String, String)>,
    pub links: Vec<TurnId>,
    /// The turn's vectors: one blob (`format::vectors`) of 1..=16 vectors of one index, named
    /// as a key-value entry names its own.
    pub vectors: Option<KvVectors>,
}

/// Which limit a turn's extras break (the caller turns it into a typed error).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ExtrasLimit {
    pub what: &'static str,
    pub limit: usize,
}

impl TurnExtras {
    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
            && self.labels.is_empty()
            && self.links.is_empty()
            && self.vectors.is_none()
    }

    /// Sorts the labels and checks every limit.
    pub fn normalize(mut self) -> Result<TurnExtras, ExtrasLimit> {
        let over = |what, limit| Err(ExtrasLimit { what, limit });
        if self.key.len() > TURN_KEY_BYTES_MAX {
            return over("bytes of a turn key", TURN_KEY_BYTES_MAX);
        }
        if self.labels.len() > LABELS_PER_TURN_MAX {
            return over("labels per turn", LABELS_PER_TURN_MAX);
        }
        if self
            .labels
            .iter()
            .any(|(key, _)| key.is_empty() || key.len() > LABEL_KEY_BYTES_MAX)
        {
            return over("bytes of a label key (1..=64)", LABEL_KEY_BYTES_MAX);
        }
        let label_bytes: usize = self.labels.iter().map(|(k, v)| k.len() + v.len()).sum();
        if label_bytes > LABELS_BYTES_MAX {
            return over(
                "bytes of a turn's labels, keys and values",
                LABELS_BYTES_MAX,
            );
        }
        self.labels.sort();
        if self.labels.windows(2).any(|pair| pair[0].0 == pair[1].0) {
            return over("occurrences of one label key", 1);
        }
        if self.links.len() > LINKS_PER_TURN_MAX {
            return over("links per turn", LINKS_PER_TURN_MAX);
        }
        if let Some(vectors) = &self.vectors
            && (vectors.count == 0 || usize::from(vectors.count) > VECTORS_PER_TURN_MAX)
        {
            return over("vectors per turn (1..=16)", VECTORS_PER_TURN_MAX);
        }
        Ok(self)
    }

    /// The body; empty for no extras (a turn without extras has no continuation slots).
    pub fn encode(&self) -> Vec<u8> {
        if self.is_empty() {
            return Vec::new();
        }
        assert!(self.key.len() <= TURN_KEY_BYTES_MAX);
        assert!(self.labels.len() <= LABELS_PER_TURN_MAX && self.links.len() <= LINKS_PER_TURN_MAX);
        let mut out = Vec::with_capacity(64);
        out.push(self.key.len() as u8);
        out.extend_from_slice(&self.key);
        out.push(self.labels.len() as u8);
        for (key, value) in &self.labels {
            assert!(!key.is_empty() && key.len() <= LABEL_KEY_BYTES_MAX);
            out.push(key.len() as u8);
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(&(value.len() as u16).to_le_bytes());
            out.extend_from_slice(value.as_bytes());
        }
        out.push(self.links.len() as u8);
        for link in &self.links {
            assert!(!link.is_none());
            out.extend_from_slice(&link.0.to_le_bytes());
        }
        if let Some(vectors) = &self.vectors {
            assert!(vectors.index_id != 0 && vectors.count != 0);
            out.extend_from_slice(&vectors.index_id.to_le_bytes());
            out.push(vectors.count);
            out.extend_from_slice(&vectors.len.to_le_bytes());
            out.extend_from_slice(&vectors.hash.0);
        }
        assert!(out.len() <= TURN_EXTRAS_BYTES_MAX);
        out
    }

    pub fn decode(body: &[u8]) -> Result<TurnExtras, RecordError> {
        if body.is_empty() {
            return Ok(TurnExtras::default());
        }
        let mut reader = Reader {
            le: LeReader::new(body),
        };
        let key_len = usize::from(reader.u8()?);
        if key_len > TURN_KEY_BYTES_MAX {
            return Err(RecordError::Field("turn key over 64 bytes"));
        }
        let key = reader.take(key_len)?.to_vec();
        let label_count = usize::from(reader.u8()?);
        if label_count > LABELS_PER_TURN_MAX {
            return Err(RecordError::Field("more than 16 labels"));
        }
        let mut labels = Vec::with_capacity(label_count);
        for _ in 0..label_count {
            let key_len = usize::from(reader.u8()?);
            let key = reader.utf8(key_len)?;
            let value_len = usize::from(reader.u16()?);
            let value = reader.utf8(value_len)?;
            labels.push((key, value));
        }
        let link_count = usize::from(reader.u8()?);
        if link_count > LINKS_PER_TURN_MAX {
            return Err(RecordError::Field("more than 8 links"));
        }
        let mut links = Vec::with_capacity(link_count);
        for _ in 0..link_count {
            links.push(TurnId(reader.u64()?));
        }
        let vectors = match reader.le.remaining() {
            0 => None,
            VECTORS_TRAILER_BYTES => {
                let index_id = reader.u32()?;
                let count = reader.u8()?;
                let len = reader.u32()?;
                let mut hash = [0u8; 32];
                hash.copy_from_slice(reader.take(32)?);
                if index_id == 0 {
                    return Err(RecordError::Field("turn vectors of index 0"));
                }
                Some(KvVectors {
                    hash: BlobHash(hash),
                    len,
                    index_id,
                    count,
                })
            }
            _ => return Err(RecordError::Field("bytes after the turn extras")),
        };
        let extras = TurnExtras {
            key,
            labels,
            links,
            vectors,
        };
        // Only what `normalize` leaves is ever written, and never an empty body: anything
        // else is damage.
        let canonical = extras.clone().normalize().ok();
        if canonical.as_ref() != Some(&extras)
            || extras.is_empty()
            || extras.links.iter().any(|l| l.is_none())
        {
            return Err(RecordError::Field(
                "turn extras over a limit or not canonical",
            ));
        }
        Ok(extras)
    }
}

/// Bounds-checked reading of a body (`ctxstore_vocab::le`).
struct Reader<'a> {
    le: LeReader<'a>,
}

fn cut_short(_: ShortRead) -> RecordError {
    RecordError::Field("turn extras cut short")
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], RecordError> {
        self.le.take(count).map_err(cut_short)
    }

    fn u8(&mut self) -> Result<u8, RecordError> {
        self.le.u8().map_err(cut_short)
    }

    fn u16(&mut self) -> Result<u16, RecordError> {
        self.le.u16().map_err(cut_short)
    }

    fn u32(&mut self) -> Result<u32, RecordError> {
        self.le.u32().map_err(cut_short)
    }

    fn u64(&mut self) -> Result<u64, RecordError> {
        self.le.u64().map_err(cut_short)
    }

    fn utf8(&mut self, count: usize) -> Result<String, RecordError> {
        let bytes = self.take(count)?.to_vec();
        String::from_utf8(bytes).map_err(|_| RecordError::Field("a label is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> TurnExtras {
        TurnExtras {
            key: vec![b'k'; TURN_KEY_BYTES_MAX],
            labels: (0..LABELS_PER_TURN_MAX)
                .map(|i| (format!("key{i:02}"), "v".repeat(50)))
                .collect(),
            links: (1..=LINKS_PER_TURN_MAX as u64).map(TurnId).collect(),
            vectors: Some(KvVectors {
                hash: BlobHash([7; 32]),
                len: 4 + 16 * 4 * 8,
                index_id: 3,
                count: VECTORS_PER_TURN_MAX as u8,
            }),
        }
    }

    #[test]
    fn extras_round_trip_at_their_limits() {
        let extras = full().normalize().unwrap();
        let body = extras.encode();
        assert!(body.len() <= TURN_EXTRAS_BYTES_MAX);
        assert_eq!(TurnExtras::decode(&body), Ok(extras));
        let empty = TurnExtras::default();
        assert!(empty.encode().is_empty());
        assert_eq!(TurnExtras::decode(&[]), Ok(empty));
        assert!(
            TurnExtras::decode(&[0, 0, 0]).is_err(),
            "an empty body is written empty"
        );
    }

    #[test]
    fn limits_are_named_and_damage_is_refused() {
        let mut long_key = full();
        long_key.key.push(b'k');
        assert_eq!(long_key.normalize().unwrap_err().limit, TURN_KEY_BYTES_MAX);
        let mut many = full();
        many.links.push(TurnId(99));
        assert_eq!(many.normalize().unwrap_err().limit, LINKS_PER_TURN_MAX);
        let mut heavy = TurnExtras::default();
        heavy
            .labels
            .push(("big".into(), "x".repeat(LABELS_BYTES_MAX)));
        assert_eq!(heavy.normalize().unwrap_err().limit, LABELS_BYTES_MAX);
        let mut crowded = full();
        if let Some(vectors) = crowded.vectors.as_mut() {
            vectors.count = VECTORS_PER_TURN_MAX as u8 + 1;
        }
        assert_eq!(crowded.normalize().unwrap_err().limit, VECTORS_PER_TURN_MAX);
        // An older log's extras (no vectors trailer) still decode.
        let older = TurnExtras {
            vectors: None,
            ..full()
        };
        assert_eq!(TurnExtras::decode(&older.encode()), Ok(older.clone()));
        let mut trailing = older.encode();
        trailing.push(0);
        assert!(
            TurnExtras::decode(&trailing).is_err(),
            "a stray byte is damage"
        );
        let body = full().normalize().unwrap().encode();
        // Cut anywhere, it is damage, except exactly before the vectors trailer: that is the
        // same turn without vectors, as an older log wrote it.
        let without_vectors = body.len() - VECTORS_TRAILER_BYTES;
        for cut in (1..body.len()).filter(|cut| *cut != without_vectors) {
            assert!(TurnExtras::decode(&body[..cut]).is_err(), "cut at {cut}");
        }
        let unsorted = TurnExtras {
            labels: vec![("b".into(), "1".into()), ("a".into(), "2".into())],
            ..TurnExtras::default()
        };
        assert!(TurnExtras::decode(&unsorted.encode()).is_err());
    }
}
