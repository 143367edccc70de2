//! The engine's file layer: the one place where the engine's bytes reach the disk, where the
//! page cache reaches the disk, and where readers read published files. Every write, sync,
//! cut, rename and removal the engine makes passes through one of its parts
//! (`engine/tests/code_map.rs` checks that no module outside `file/` calls the standard
//! library's write operations), and the test-only fault hooks (`crate::faults`) sit here and
//! nowhere else:
//!
//! - `actor.rs`: `ActorFile`, an actor's records — the write half of every group commit;
//! - `background.rs`: `BackgroundWriter` and `Throttle`, every copy off the acknowledgement
//!   path (a collection's pack and index copies, a log compaction's base, a backup, a format
//!   migration): throttled, synced every step, finished durably and renamed in;
//! - `ops.rs`: durable creation, renaming and removal, the cuts recovery makes at open, the
//!   disk reserve's allocation, the directory lock;
//! - `shared.rs`: files shared with another name (decision 0017);
//! - `read.rs`: `ReadFile`, readers' positional reads; `ScanFile` and `read_whole`, every
//!   other read (recovery's scans, `verify`, the meta file, copies);
//! - `api.rs`: the calls other crates use to write beside the engine (`ctxstore_engine::files`:
//!   the replica's state, staging and restore), through the same seam;
//! - `disk.rs`: the disk seam, one function per system call the parts above make (decision
//!   0026); `sim.rs`: the simulated disk that observes it, with the `simulated-disk` feature
//!   only (tests).

mod actor;
pub mod api;
pub(crate) mod background;
mod disk;
pub(crate) mod ops;
mod read;
mod shared;
#[cfg(feature = "simulated-disk")]
pub mod sim;

pub(crate) use actor::{ActorFile, ActorIo, SyncMode, open_actor_file};
pub(crate) use background::{BackgroundWriter, Throttle};
pub(crate) use read::{ReadFile, ScanFile, read_whole};
pub(crate) use shared::{Released, make_private, open_replaced, punch_prefix, release_replaced};
