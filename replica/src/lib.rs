//! ctxstore-replica: off-host durability (issue 31). A store's history lives in an object
//! store (S3 or anything S3-compatible, or a directory), shipped continuously and
//! asynchronously, restorable to any shipped point, followed by a standby.
//!
//! Code map (each module owns one concept):
//! - `target`: replica URLs (`s3://`, `file://`) → an object store and a prefix;
//! - `layout`: the keys, fixed-width, never written twice;
//! - `format`: the objects, byte for byte (segments, checkpoints, control objects), and
//!   `StoreState` (where each byte of the store lives remotely);
//! - `remote`: create-only PUTs with known outcomes, checked GETs, listings; the lease's
//!   conditional writes (`local_cas` on `file://`);
//! - `catalog`: reading what a replica holds (epochs, generations, the state at a segment);
//! - `local`: what the store keeps of its replica on its own disk (`DIR/replica/`);
//! - `ship`: the primary's replicator thread (cut, upload, commit, checkpoint);
//! - `acks`: remote acknowledgements, the cut tickets the shipper confirms and the network
//!   cores wait on;
//! - `follow`: the standby's poller (restore or resume, segments applied through the actors);
//! - `keyring`: a sealing store's keyring object, replaced by the primary before a cut that
//!   needs it, written by a restore, installed by a standby (decision 0032 §5);
//! - `lease`: the prefix's lease object: created, taken, renewed, released by conditional
//!   writes, every outcome known;
//! - `takeover`: a standby taking the prefix over (the epoch, the seal that ends the old
//!   primary's generation);
//! - `rejoin`: a fenced primary's store set aside (`DIR/.diverged/`), never deleted, and a
//!   fresh restore in its place, so that it follows the new primary (decision 0031 §8);
//! - `restore`: a store rebuilt from its replica at a shipped point;
//! - `retention`: deleting what no kept restore point reads;
//! - `stats`: the figures for metrics and `ctxstore stats`;
//! - `codec`, `error`: bounds-checked binary fields; what fails, where;
//! - `faulty`: an object store that fails on command, for tests only (feature
//!   `fault-injection`, which this crate's own tests turn on; never in a release build).
//!
//! The object store is the distributed system (decision 0019): ctxstore writes no consensus of
//! its own; a primary proves it is the one writer with create-only epoch objects.

// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

pub mod acks;
pub mod catalog;
mod codec;
pub mod error;
#[cfg(feature = "fault-injection")]
pub mod faulty;
pub mod follow;
pub mod format;
pub mod fresh;
pub mod ids;
pub mod keyring;
pub mod layout;
pub mod lease;
pub mod local;
mod local_cas;
pub mod rejoin;
pub mod remote;
pub mod restore;
pub mod retention;
pub mod ship;
pub mod state;
pub mod stats;
pub mod takeover;
pub mod target;

pub use acks::{AckOutcome, RemoteAcks};
pub use error::{FormatError, ReplicaError};
pub use follow::{FollowConfig, Follower};
pub use remote::Remote;
pub use ship::{Replicator, ShipConfig, ShipPriority};
pub use stats::{ReplicationRole, ReplicationSnapshot, ReplicationState, ReplicationStats};
pub use target::S3Settings;
