//! ctxstore-testsupport: what the workspace's end-to-end tests share, defined once (a
//! dev-dependency of the engine, the client, the CLI, the server and the load generator, and the load
//! generator's `--spawn-server`).
//!
//! - [`ServerLaunch`] / [`TestServer`] (`launcher.rs`): the one server launcher, a real
//!   `ctxstore-server` on a temporary directory and a free port, found by [`wait_ready`].
//! - [`server_binary`] (`binary.rs`): `ctxstore-server` for packages that cannot name it as
//!   their own binary.
//! - [`scripted_server`] (`scripted.rs`): the one scripted fake server for client tests.
//! - [`SeededRng`] (`rng.rs`): the seeded generator of the randomized campaigns.
//! - [`files_holding`] (`grep.rs`): the at-rest tests' grep of a directory for a marker.
//! - [`fixed_port`] (`ports.rs`): a port outside the kernel's ephemeral range, for a test
//!   that binds an address again or asserts a closed one refused.

// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

mod binary;
mod grep;
mod launcher;
mod ports;
mod rng;
mod scripted;

pub use binary::server_binary;
pub use grep::files_holding;
pub use launcher::{LaunchError, ServerLaunch, TestServer, verified, wait_ready};
pub use ports::fixed_port;
pub use rng::{SeededRng, noise};
pub use scripted::{ScriptedServer, Seen, scripted_server};
