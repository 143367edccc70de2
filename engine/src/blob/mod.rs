//! The content-addressed blob store: N shards, each owning a hash-prefix partition.
//!
//! - `codec`: compression policy (runs on the caller's thread).
//! - `view`: what readers see of a shard (index of durable blobs, pack read handles).
//! - `shard`: the actor, sole writer of a shard's packs and index (group commit).
//! - `condemned`: the blobs a garbage-collection round condemned, and who won each.
//! - `scan` / `recover`: reading a shard's files at open and for `verify`.

pub(crate) mod codec;
pub(crate) mod condemned;
pub(crate) mod recover;
pub(crate) mod scan;
pub(crate) mod shard;
pub(crate) mod view;
