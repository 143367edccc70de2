//! The master key (decision 0032 §4): read from `--master-key-file`, or from the standard
//! output of `--master-key-command` (a secret manager's client), for `serve`, `verify` and
//! `backup`. The key itself is never logged or printed.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use ctxstore_engine::seal::MasterKey;

/// The most a key command may print: a key is 64 hex digits and a line end; anything far
/// longer is not a key.
const COMMAND_OUTPUT_BYTES_MAX: usize = 4096;

/// The master key the flags name, if any (`file` and `command` exclude each other; clap
/// refuses both).
pub(crate) fn read(
    file: Option<&Path>,
    command: Option<&str>,
) -> anyhow::Result<Option<Arc<MasterKey>>> {
    let text = match (file, command) {
        (Some(path), _) => {
            crate::commands::server_config::warn_if_readable_by_others(path);
            std::fs::read_to_string(path)
                .with_context(|| format!("reading the master key file {}", path.display()))?
        }
        (None, Some(command)) => run(command)?,
        (None, None) => return Ok(None),
    };
    let key = MasterKey::from_hex(&text).map_err(|error| {
        let from = file.map_or_else(
            || format!("--master-key-command {command:?}"),
            |path| path.display().to_string(),
        );
        anyhow::anyhow!("{from}: {error}")
    })?;
    Ok(Some(Arc::new(key)))
}

/// Runs `command` with `sh -c`; its standard output is the key. Its standard error goes to
/// ours; a failure names the command and its exit status.
fn run(command: &str) -> anyhow::Result<String> {
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running --master-key-command {command:?}"))?;
    anyhow::ensure!(
        output.status.success(),
        "--master-key-command {command:?} failed ({}); the server was not started",
        output.status
    );
    anyhow::ensure!(
        output.stdout.len() <= COMMAND_OUTPUT_BYTES_MAX,
        "--master-key-command {command:?} printed {} bytes; a master key is 64 hex digits",
        output.stdout.len()
    );
    String::from_utf8(output.stdout)
        .map_err(|_| anyhow::anyhow!("--master-key-command {command:?} printed no text"))
}
