//! `blob HASH [-o PATH]`: a payload's raw bytes.

use std::path::PathBuf;

use anyhow::Context;
use ctxstore_client::blob_hash_from_hex;
use ctxstore_client::blocking::Client;

use crate::output::write_stdout;

/// `blob HASH`: the payload's raw bytes, to stdout or to -o PATH.
pub(crate) fn blob(client: &Client, hash: &str, output: Option<&PathBuf>) -> anyhow::Result<()> {
    let bytes = client.blob(blob_hash_from_hex(hash)?)?;
    match output {
        Some(path) => {
            std::fs::write(path, &bytes).with_context(|| format!("writing {}", path.display()))
        }
        None => write_stdout(&bytes),
    }
}
