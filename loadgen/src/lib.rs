//! ctxstore-loadgen: drive a ctxstore server (or a peer store) with a realistic agent
//! workload and report latency per operation.
//!
//! - [`workload`]: chat-like payloads, duplicates, large incompressible payloads.
//! - [`ops`]: the operations and their mix.
//! - [`driver`]: closed and open loops (coordinated omission corrected).
//! - [`report`]: HdrHistograms, the table and the JSON report.
//! - [`slo`]: objectives and their verdicts.
//! - [`backend`]: the stores behind the logical operations.
//! - [`check`]: ack logs against a store after failovers (`ctxstore-loadgen check`).
//! - [`spawn`]: starting a server for the run (`--spawn-server`).
//! - [`streaming`]: the streaming workload (deltas, their readers, their figures).

// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

pub mod backend;
pub mod check;
pub mod driver;
pub mod ops;
pub mod report;
pub mod slo;
pub mod spawn;
pub mod streaming;
pub mod workload;
