//! The sequencer: the one actor that owns turns and heads.
//!
//! - `view`: what readers see (turns.log up to the durable watermark, the head table, counters).
//! - `heads`: the heads as the sequencer tracks them, and the DAG rule.
//! - `actor`: TurnID allocation, head compare-and-set, group commit of `turns.log`.
//! - `dead`: the turns the garbage collector collected (a bitmap by TurnID).
//! - `overlays`: patches and redactions of turns, purged blobs (decision 0012).
//! - `watch`: the bounded log of events watchers read (head moves, streams, tags, deletes).
//! - `streams`: open streams (turns in the making) and the ended ones kept (issue 32).
//! - `tenants`: tenant names and their TenantIds (decision 0032).
//! - `scan` / `recover`: reading `turns.log` at open (replay, DAG checks) and for `verify`.

pub(crate) mod actor;
pub(crate) mod contexts;
pub(crate) mod dead;
pub(crate) mod heads;
pub(crate) mod log_base;
pub(crate) mod migrate;
pub(crate) mod overlays;
pub(crate) mod owners;
pub(crate) mod recover;
pub(crate) mod scan;
pub(crate) mod streams;
pub(crate) mod tenants;
pub(crate) mod vector_indexes;
pub(crate) mod vector_owners;
pub(crate) mod view;
pub(crate) mod watch;
