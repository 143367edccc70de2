//! ctxstore-replica: off-host durability (issue 31). A store's history lives in an object
//! store (S3 or anything S3-compatible, or a directory), shipped continuously and
//! asynchronously, restorable to any shipped point, followed by a standby.
//!
//! Code map (each module owns one concept):
//! - `target`: replica URLs (`s3://`, `file://`) → an object store and a prefix;
//! - `layout`: the keys, fixed-width, never written twice;
//! - `format`: the objects, byte for byte (segments, checkpoints, control objects), and
//!   `StoreState` (where each byte of the store lives remotely);
//! - `remote`: create-only PUTs with known outcomes, checked GETs, listings;
//! - `codec`, `error`: bounds-checked binary fields; what fails, where.
//!
//! The object store is the distributed system (decision 0019): ctxstore writes no consensus of
//! its own; a primary proves it is the one writer with create-only epoch objects.

mod codec;
pub mod error;
pub mod format;
pub mod layout;
pub mod remote;
pub mod target;

pub use error::{FormatError, ReplicaError};
pub use remote::Remote;
pub use target::S3Settings;
