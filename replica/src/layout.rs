//! The replica's keys: fixed-width numbers, so that a plain listing returns them in order, and
//! no key is ever written twice (every PUT is create-only). Each kind of key has a "directory"
//! of its own, because `object_store` lists by path segment (and S3-compatible servers differ on
//! delimiter listings, which are never used): a generation's segments are listed from an offset
//! (`list_with_offset`), never all at once.
//!
//! ```text
//! PREFIX/ctxstore-replica                 the marker: this prefix is a ctxstore replica (its id)
//! PREFIX/epoch/EEEEEEEEEE                 one per primary that took the prefix (fencing)
//! PREFIX/generation/GGGGGG                a generation: a lineage of segments (its parent)
//! PREFIX/gGGGGGG/c/SSSSSSSSSSSS           checkpoint: the whole state after segment S, by reference
//! PREFIX/gGGGGGG/s/SSSSSSSSSSSS           segment S: what the store made durable since S − 1
//! PREFIX/gGGGGGG/p/HH-PPPPPP-SSSSSSSSSSSS pack P of shard HH, whole, as of segment S
//! PREFIX/gGGGGGG/b/SSSSSSSSSSSS           turns.base, whole, as of segment S
//! PREFIX/restore/NNNN…(32 hex)            a restore in progress: retention keeps what it reads
//! PREFIX/lease                            the primary's lease (replaced by conditional PUT)
//! PREFIX/keyring                          a sealing store's keyring (replaced by conditional PUT)
//! ```

use object_store::path::Path;
pub const MARKER: &str = "ctxstore-replica";
const LEASE: &str = "lease";
const KEYRING: &str = "keyring";

/// Where a replica lives: its object store's prefix (no leading or trailing slash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    prefix: String,
}

/// What a key names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    Marker,
    Epoch(u64),
    Generation(u32),
    Checkpoint {
        generation: u32,
        seq: u64,
    },
    Segment {
        generation: u32,
        seq: u64,
    },
    Pack {
        generation: u32,
        shard: u16,
        pack_id: u32,
        seq: u64,
    },
    Base {
        generation: u32,
        seq: u64,
    },
    Restore(u128),
    /// The prefix's lease (decision 0031 §4): written more than once, only by conditional PUT.
    Lease,
    /// A sealing store's keyring (decision 0032 §5): its keys wrapped by the master key,
    /// replaced by conditional PUT whenever the store's own changes; in no segment, checkpoint
    /// or restore point, so every restore reads the current one.
    Keyring,
}

impl Layout {
    pub fn new(prefix: &str) -> Layout {
        Layout {
            prefix: prefix.trim_matches('/').to_string(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn join(&self, name: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(name)
        } else {
            Path::from(format!("{}/{name}", self.prefix))
        }
    }

    pub fn path(&self, key: Key) -> Path {
        self.join(&name(key))
    }

    /// The directory of one kind of key: `'e'` epochs, `'g'` generation records, `'r'`
    /// restores, or of a generation's `'s'` segments, `'c'` checkpoints, `'p'` packs, `'b'`
    /// bases.
    pub fn dir(&self, generation: Option<u32>, kind: char) -> Path {
        match (generation, kind) {
            (None, 'e') => self.join("epoch"),
            (None, 'r') => self.join("restore"),
            (None, _) => self.join("generation"),
            (Some(generation), kind) => self.join(&format!("g{generation:06}/{kind}")),
        }
    }

    /// The key a path names, if it is one of the replica's.
    pub fn parse(&self, path: &Path) -> Option<Key> {
        let text = path.as_ref();
        let name = if self.prefix.is_empty() {
            text
        } else {
            text.strip_prefix(&self.prefix)?.strip_prefix('/')?
        };
        parse_name(name)
    }
}

fn name(key: Key) -> String {
    match key {
        Key::Marker => MARKER.to_string(),
        Key::Epoch(epoch) => format!("epoch/{epoch:010}"),
        Key::Generation(generation) => format!("generation/{generation:06}"),
        Key::Checkpoint { generation, seq } => format!("g{generation:06}/c/{seq:012}"),
        Key::Segment { generation, seq } => format!("g{generation:06}/s/{seq:012}"),
        Key::Pack {
            generation,
            shard,
            pack_id,
            seq,
        } => format!("g{generation:06}/p/{shard:02}-{pack_id:06}-{seq:012}"),
        Key::Base { generation, seq } => format!("g{generation:06}/b/{seq:012}"),
        Key::Restore(id) => format!("restore/{id:032x}"),
        Key::Lease => LEASE.to_string(),
        Key::Keyring => KEYRING.to_string(),
    }
}

fn digits<T: std::str::FromStr>(text: &str, width: usize) -> Option<T> {
    (text.len() == width && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

fn parse_name(name: &str) -> Option<Key> {
    if name == MARKER {
        return Some(Key::Marker);
    }
    if name == LEASE {
        return Some(Key::Lease);
    }
    if name == KEYRING {
        return Some(Key::Keyring);
    }
    if let Some(epoch) = name.strip_prefix("epoch/") {
        return digits(epoch, 10).map(Key::Epoch);
    }
    if let Some(generation) = name.strip_prefix("generation/") {
        return digits(generation, 6).map(Key::Generation);
    }
    if let Some(id) = name.strip_prefix("restore/") {
        return (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u128::from_str_radix(id, 16).ok())
            .flatten()
            .map(Key::Restore);
    }
    let rest = name.strip_prefix('g')?;
    let generation: u32 = digits(rest.get(..6)?, 6)?;
    let rest = rest.get(6..)?.strip_prefix('/')?;
    let (kind, rest) = rest.split_once('/')?;
    match kind {
        "c" => digits(rest, 12).map(|seq| Key::Checkpoint { generation, seq }),
        "s" => digits(rest, 12).map(|seq| Key::Segment { generation, seq }),
        "b" => digits(rest, 12).map(|seq| Key::Base { generation, seq }),
        "p" => {
            let mut parts = rest.split('-');
            let shard = digits(parts.next()?, 2)?;
            let pack_id = digits(parts.next()?, 6)?;
            let seq = digits(parts.next()?, 12)?;
            parts.next().is_none().then_some(Key::Pack {
                generation,
                shard,
                pack_id,
                seq,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_round_trips_and_sorts_in_numeric_order() {
        let layout = Layout::new("/bucket-prefix/store-1/");
        let keys = [
            Key::Marker,
            Key::Epoch(1),
            Key::Epoch(12),
            Key::Generation(3),
            Key::Checkpoint {
                generation: 3,
                seq: 0,
            },
            Key::Segment {
                generation: 3,
                seq: 9,
            },
            Key::Segment {
                generation: 3,
                seq: 10,
            },
            Key::Pack {
                generation: 3,
                shard: 1,
                pack_id: 42,
                seq: 10,
            },
            Key::Base {
                generation: 3,
                seq: 10,
            },
            Key::Restore(0xabc),
            Key::Lease,
            Key::Keyring,
        ];
        for key in keys {
            let path = layout.path(key);
            assert!(
                path.as_ref().starts_with("bucket-prefix/store-1/"),
                "{path}"
            );
            assert_eq!(layout.parse(&path), Some(key), "{path}");
        }
        let nine = layout.path(keys[5]).to_string();
        let ten = layout.path(keys[6]).to_string();
        assert!(nine < ten, "fixed width keeps numeric order");
        assert!(
            layout
                .path(keys[6])
                .as_ref()
                .starts_with(layout.dir(Some(3), 's').as_ref())
        );
        for junk in [
            "x",
            "g1/s/1",
            "g000001/s/1",
            "epoch/1",
            "g000001/p/xx-000001-000000000001",
        ] {
            assert_eq!(layout.parse(&layout.join(junk)), None, "{junk}");
        }
        assert_eq!(Layout::new("").path(Key::Marker).as_ref(), MARKER);
    }
}
