//! The master key (decision 0032 §4): read from `--master-key-file`, or from the standard
//! output of `--master-key-command` (a secret manager's client), for `serve`, `verify` and
//! `backup`. The key itself is never logged or printed. And `--keyring-from`: a backup's
//! keyring put back beside it.

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

/// `--keyring-from FILE`: the keyring of the store a backup was made from, written into `data`
/// (durably, owner-only) once it opens under `master`, before the store opens. Nothing to do
/// when `data` holds the same bytes; refused when it holds another keyring (it would replace
/// keys the store may need) or when there is no master key.
pub(crate) fn keyring_from(
    data: &Path,
    from: &Path,
    master: Option<&MasterKey>,
) -> anyhow::Result<()> {
    let Some(master) = master else {
        anyhow::bail!("--keyring-from needs the master key it was made under (--master-key-file)");
    };
    let bytes =
        std::fs::read(from).with_context(|| format!("reading the keyring {}", from.display()))?;
    ctxstore_engine::seal::Keyring::decode(&bytes, master)
        .map_err(|error| anyhow::anyhow!("{}: {error}; nothing was copied", from.display()))?;
    let to = data.join(ctxstore_engine::store_dir::KEYRING_FILE);
    match std::fs::read(&to) {
        Ok(current) if current == bytes => return Ok(()),
        Ok(_) => anyhow::bail!(
            "{} already holds a keyring other than {}; --keyring-from is for a backup restored \
             without one (nothing was copied)",
            data.display(),
            from.display()
        ),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error).with_context(|| format!("reading {}", to.display())),
    }
    anyhow::ensure!(
        data.join("ctxstore.meta").exists(),
        "{} is not a ctxstore data directory (a backup's copy has ctxstore.meta)",
        data.display()
    );
    ctxstore_engine::files::write_file_durably(&to, &bytes)
        .with_context(|| format!("writing {}", to.display()))?;
    tracing::info!(from = %from.display(), to = %to.display(), "keyring copied beside the backup");
    Ok(())
}
