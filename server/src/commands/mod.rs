//! The binary's subcommands, one file each: `serve` (no subcommand: serve the store, with
//! `server_config` turning its flags into a `ServerConfig`), `print_config` (`--print-config`),
//! `verify`, `backup`, `restore` and `promote`.

pub(crate) mod backup;
pub(crate) mod print_config;
pub(crate) mod promote;
pub(crate) mod restore;
pub(crate) mod serve;
pub(crate) mod server_config;
pub(crate) mod verify;
