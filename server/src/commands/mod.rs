//! The binary's subcommands, one file each: `serve` (no subcommand: serve the store, with
//! `server_config` turning its flags into a `ServerConfig`), `print_config` (`--print-config`),
//! `verify`, `backup`, `restore` and `promote`; `master_key` reads the master key their
//! `--master-key-file` or `--master-key-command` names.

pub(crate) mod backup;
pub(crate) mod master_key;
pub(crate) mod print_config;
pub(crate) mod promote;
pub(crate) mod restore;
pub(crate) mod serve;
pub(crate) mod server_config;
pub(crate) mod verify;
