//! The sequencer: the one actor that owns turns and heads.
//!
//! - `actor`: TurnID allocation, head compare-and-set, group commit of `turns.log`.
//! - `scan` / `recover`: reading `turns.log` at open (replay, DAG checks) and for `verify`.

pub(crate) mod actor;
pub(crate) mod recover;
pub(crate) mod scan;
