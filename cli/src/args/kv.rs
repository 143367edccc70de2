//! `kv …`: the key-value commands as clap parses them, with the parser of an entry's time
//! to live.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use ctxstore_client::{ContextRef, Durability};

use super::parse_context;

#[derive(Subcommand, Debug)]
pub(crate) enum KvCommand {
    /// Store a value under KEY (replacing what is there), from --file or from stdin. Durable
    /// when it prints the entry: key, value_hash, value_len.
    Put {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// The key (1..=256 bytes).
        key: OsString,
        /// Read the value from this file instead of stdin.
        #[arg(long)]
        file: Option<PathBuf>,
        /// Keep the value that is there, if the key exists (no error; the entry printed is
        /// then the kept one).
        #[arg(long)]
        if_absent: bool,
        /// Store an empty value (refused otherwise: an empty stdin is usually a mistake in a
        /// pipeline).
        #[arg(long)]
        allow_empty: bool,
        /// The entry expires this long after the put or its last refresh (`30s`, `7d`; whole
        /// milliseconds, 1ms..100 years): then no read sees it and the server removes it.
        #[arg(long, value_name = "DURATION", value_parser = parse_kv_ttl)]
        ttl: Option<Duration>,
        /// When the server answers: local or remote, as for `append` (UNCONFIRMED exits 9:
        /// run it again). Protocol version 4.
        #[arg(long, value_name = "local|remote", value_parser = super::parse_durability)]
        durability: Option<Durability>,
        /// The vector index the --vector ones belong to (protocol version 6): the entry is
        /// put with them (none: with no vectors, which drops any it had).
        #[arg(long, value_name = "NAME")]
        index: Option<String>,
        /// A vector of the entry, comma-separated numbers (repeat it for several, ≤ 64).
        #[arg(long, requires = "index", allow_hyphen_values = true,
            value_parser = super::vectors::parse_vector)]
        vector: Vec<super::vectors::VectorArg>,
    },
    /// Write the value of KEY (raw bytes, checked against its hash) to stdout or to -o PATH;
    /// a key that is not there (or expired) exits 3 (NOT_FOUND).
    Get {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// The key.
        key: OsString,
        /// Write the value to this file instead of stdout.
        #[arg(short = 'o')]
        output: Option<PathBuf>,
        /// Restart the entry's time to live from now (a durable write when it has one).
        #[arg(long)]
        refresh: bool,
        /// Print the entry (key, value_hash, value_len, ttl_ms, expires_at_unix_ms) instead
        /// of the value.
        #[arg(long, conflicts_with = "output")]
        entry: bool,
    },
    /// Delete KEY. Prints the entry removed (key, value_hash, value_len); a key that is not
    /// there exits 3 (NOT_FOUND), as for `kv get`.
    Rm {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// The key.
        key: OsString,
    },
    /// The entries of a context in key order, one per line: key, value_hash, value_len,
    /// ttl_ms, expires_at_unix_ms (`key_b64` too, for a key that is not UTF-8). Follows the
    /// server's pages; expired entries are not listed.
    List {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// Only keys starting with this.
        #[arg(long)]
        prefix: Option<OsString>,
        /// Restart the time to live of every entry listed from now.
        #[arg(long)]
        refresh: bool,
    },
    /// Restart the time to live of each KEY (1..=128) from now: --ttl's, else each entry's
    /// own. Prints the live entries among them as they are now; absent keys are no error.
    Touch {
        /// Context: a ContextID, or @NAME.
        #[arg(value_parser = parse_context)]
        context: ContextRef,
        /// The keys.
        #[arg(required = true, num_args = 1..=128)]
        keys: Vec<OsString>,
        /// This time to live from now on (also for entries that had none).
        #[arg(long, value_name = "DURATION", value_parser = parse_kv_ttl)]
        ttl: Option<Duration>,
    },
}

/// A key-value entry's time to live: a duration of whole milliseconds, 1ms to 100 years.
pub(crate) fn parse_kv_ttl(text: &str) -> Result<Duration, String> {
    let ttl = humantime::parse_duration(text.trim())
        .map_err(|error| format!("{text:?} is not a duration like 30s, 12h, 7d: {error}"))?;
    let whole_ms = Duration::from_millis(ttl.as_millis().min(u128::from(u64::MAX)) as u64);
    if ttl.is_zero() || whole_ms != ttl {
        return Err(format!(
            "a key-value time to live is a whole number of milliseconds, at least 1ms; got {text:?}"
        ));
    }
    if ttl > Duration::from_millis(ctxstore_client::TTL_MS_MAX) {
        return Err(format!(
            "a time to live of {text:?} is too long (the server takes at most 100 years)"
        ));
    }
    Ok(ttl)
}
