//! What a store knows of its replica, on its own disk: `DIR/replica/state`, rewritten
//! atomically (temporary file, fsync, rename, directory fsync) after each shipped segment.
//!
//! It holds the replica's id (so the store refuses another store's prefix), the generation,
//! epoch and last segment, and the identity of every file version shipped (device, inode,
//! birth time): a collection replaces a pack by renaming a new file over it, so a pack whose
//! identity changed since it was shipped is uploaded whole, never continued from the old
//! version's shipped length. A restore or a promotion writes `fork` (the next primary starts a
//! new generation) and `DIR/replica/inherited` (the state it starts from, as a checkpoint).

use std::fs::File;
use std::path::{Path, PathBuf};

use ctxstore_engine::files;

use crate::codec::{Reader, Writer};
use crate::error::{FormatError, ReplicaError};
use crate::format::{Checkpoint, ReplicaId, SHARDS_MAX};

const MAGIC: &[u8; 8] = b"CTXRLOC1";
const VERSION: u16 = 1;
const URL_BYTES_MAX: usize = 4096;

/// Which version of a file was shipped: a file replaced by a rename has another identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FileIdentity {
    pub device: u64,
    pub inode: u64,
    /// Birth time in nanoseconds (0 where the file system does not keep one).
    pub born_ns: u64,
}

impl FileIdentity {
    pub fn of(file: &File) -> std::io::Result<FileIdentity> {
        use std::os::unix::fs::MetadataExt;
        let metadata = file.metadata()?;
        let born_ns = metadata
            .created()
            .ok()
            .and_then(|born| born.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |since| since.as_nanos() as u64);
        Ok(FileIdentity {
            device: metadata.dev(),
            inode: metadata.ino(),
            born_ns,
        })
    }

    fn encode(&self, writer: &mut Writer) {
        writer.u64(self.device);
        writer.u64(self.inode);
        writer.u64(self.born_ns);
    }

    fn decode(reader: &mut Reader<'_>) -> Result<FileIdentity, FormatError> {
        Ok(FileIdentity {
            device: reader.u64()?,
            inode: reader.u64()?,
            born_ns: reader.u64()?,
        })
    }
}

/// The local record of the replica (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LocalState {
    pub replica_id: ReplicaId,
    pub url: String,
    pub generation: u32,
    pub epoch: u64,
    /// The last segment shipped (0: none yet in this generation).
    pub seq: u64,
    /// The next primary must start a new generation (after a restore or a promotion).
    pub fork: bool,
    /// The shipped `turns.base`'s identity.
    pub base: Option<FileIdentity>,
    /// Per shard, per pack: the identity of the version whose bytes were shipped.
    pub packs: Vec<Vec<Option<FileIdentity>>>,
}

/// Where the local record lives.
pub fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("replica")
}

fn state_path(data_dir: &Path) -> PathBuf {
    dir(data_dir).join("state")
}

fn inherited_path(data_dir: &Path) -> PathBuf {
    dir(data_dir).join("inherited")
}

/// Where a cycle keeps hard links to the file versions it uploads whole.
pub fn staging_dir(data_dir: &Path) -> PathBuf {
    dir(data_dir).join("staging")
}

impl LocalState {
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::default();
        writer.raw(MAGIC);
        writer.u16(VERSION);
        writer.raw(&self.replica_id);
        writer.blob(self.url.as_bytes());
        writer.u32(self.generation);
        writer.u64(self.epoch);
        writer.u64(self.seq);
        writer.u8(u8::from(self.fork));
        match &self.base {
            None => writer.u8(0),
            Some(identity) => {
                writer.u8(1);
                identity.encode(&mut writer);
            }
        }
        writer.count(self.packs.len());
        for shard in &self.packs {
            writer.count(shard.len());
            for pack in shard {
                match pack {
                    None => writer.u8(0),
                    Some(identity) => {
                        writer.u8(1);
                        identity.encode(&mut writer);
                    }
                }
            }
        }
        let hash = blake3::hash(&writer.bytes);
        writer.raw(hash.as_bytes());
        writer.bytes
    }

    pub fn decode(bytes: &[u8], what: &str) -> Result<LocalState, FormatError> {
        let mut reader = Reader::new(bytes, what);
        reader.check(bytes.len() > 32, || "too short".into())?;
        let (content, hash) = bytes.split_at(bytes.len() - 32);
        reader.check(blake3::hash(content).as_bytes() == hash, || {
            "checksum mismatch".into()
        })?;
        let magic: [u8; 8] = reader.array()?;
        reader.check(&magic == MAGIC, || "not a replica state file".into())?;
        let version = reader.u16()?;
        reader.check(version == VERSION, || format!("version {version}"))?;
        let replica_id = reader.array()?;
        let url = String::from_utf8_lossy(reader.blob(URL_BYTES_MAX)?).into_owned();
        let generation = reader.u32()?;
        let epoch = reader.u64()?;
        let seq = reader.u64()?;
        let fork = reader.u8()? != 0;
        let base = match reader.u8()? {
            0 => None,
            _ => Some(FileIdentity::decode(&mut reader)?),
        };
        let shard_count = reader.count(SHARDS_MAX, 4)?;
        let mut packs = Vec::with_capacity(shard_count);
        for _ in 0..shard_count {
            let count = reader.count(crate::format::PACKS_MAX, 1)?;
            let mut shard = Vec::with_capacity(count);
            for _ in 0..count {
                shard.push(match reader.u8()? {
                    0 => None,
                    _ => Some(FileIdentity::decode(&mut reader)?),
                });
            }
            packs.push(shard);
        }
        reader.take(32)?;
        reader.finish()?;
        Ok(LocalState {
            replica_id,
            url,
            generation,
            epoch,
            seq,
            fork,
            base,
            packs,
        })
    }

    /// The store's record, if it ever replicated or was restored.
    pub fn load(data_dir: &Path) -> Result<Option<LocalState>, ReplicaError> {
        let path = state_path(data_dir);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(LocalState::decode(
                &bytes,
                &path.display().to_string(),
            )?)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(ReplicaError::io(path, source)),
        }
    }

    /// Writes the record durably and atomically.
    pub fn save(&self, data_dir: &Path) -> Result<(), ReplicaError> {
        write_atomically(&state_path(data_dir), &self.encode())
    }
}

/// The state a forked generation starts from (written by restore and promotion).
pub fn load_inherited(data_dir: &Path) -> Result<Option<Checkpoint>, ReplicaError> {
    let path = inherited_path(data_dir);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(Checkpoint::decode(
            &bytes,
            &path.display().to_string(),
        )?)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ReplicaError::io(path, source)),
    }
}

pub fn save_inherited(data_dir: &Path, checkpoint: &Checkpoint) -> Result<(), ReplicaError> {
    write_atomically(&inherited_path(data_dir), &checkpoint.encode())
}

pub fn remove_inherited(data_dir: &Path) -> Result<(), ReplicaError> {
    let path = inherited_path(data_dir);
    match files::remove_durably(&path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(ReplicaError::io(path, source)),
    }
}

/// Temporary file, fsync, rename, directory fsync: through the file layer, so its faults
/// (and the simulated disk) reach the replica's record too.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ReplicaError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    files::create_dir_all(dir).map_err(|source| ReplicaError::io(dir, source))?;
    files::write_file_durably(path, bytes).map_err(|source| ReplicaError::io(path, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_round_trips_on_disk_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(LocalState::load(dir.path()).unwrap(), None);
        let state = LocalState {
            replica_id: [3; 16],
            url: "s3://bucket/prefix".into(),
            generation: 2,
            epoch: 5,
            seq: 77,
            fork: true,
            base: Some(FileIdentity {
                device: 1,
                inode: 2,
                born_ns: 3,
            }),
            packs: vec![vec![
                None,
                Some(FileIdentity {
                    device: 1,
                    inode: 9,
                    born_ns: 4,
                }),
            ]],
        };
        state.save(dir.path()).unwrap();
        assert_eq!(LocalState::load(dir.path()).unwrap(), Some(state.clone()));
        let mut bytes = state.encode();
        bytes[20] ^= 1;
        assert!(LocalState::decode(&bytes, "state").is_err());
    }
}
