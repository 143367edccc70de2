//! The commands, one file per family (as the protocol groups its messages): each holds its
//! commands and the `impl Output` block that prints their results.

mod admin;
mod appends;
mod blobs;
mod contexts;
mod kv;
mod overlays;
mod reads;
mod streams;
mod tenants;
mod tenants_file;
mod tree;
mod vectors;

pub(crate) use admin::{backup, gc, ping, stats};
pub(crate) use appends::append;
pub(crate) use blobs::blob;
pub(crate) use contexts::ctx;
pub(crate) use kv::kv;
pub(crate) use overlays::overlays;
pub(crate) use reads::read_turns;
pub(crate) use streams::streams;
pub(crate) use tenants::tenant;
pub(crate) use tenants_file::edit as edit_tenants_file;
pub(crate) use tree::tree;
pub(crate) use vectors::{index, search as vector_search, search_turns};
