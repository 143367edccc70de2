//! What a command takes from this side, checked and read before connecting, so that a
//! refusal needs no server: `turn`'s target, the labels, `--as-of`, `backup`'s directory made
//! absolute, the payload of `append`, `kv put` or `patch` (stdin or `--file`; an empty one
//! refused without `--allow-empty`), `purge`'s hash.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;

use anyhow::Context;
use ctxstore_client::{BlobHash, ContextRef, blob_hash_from_hex};

use crate::args::Command;
use crate::args::KvCommand;
use crate::args::parse_context;
use crate::exits::NoPayload;
use crate::exits::Usage;

/// What `turn` shows: a turn by id, or a context's turn by key.
pub(crate) enum TurnTarget {
    Id(u64),
    Key(ContextRef, String),
}

impl TurnTarget {
    pub(crate) fn parse(target: &str, key: Option<&String>) -> Result<TurnTarget, Usage> {
        match key {
            Some(key) => parse_context(target)
                .map(|context| TurnTarget::Key(context, key.clone()))
                .map_err(|reason| Usage(format!("turn CTX --key K: {reason}"))),
            None => target.parse::<u64>().map(TurnTarget::Id).map_err(|_| {
                Usage(format!(
                    "turn TURN: {target:?} is not a turn id (a number); to look a turn up by \
                     its key in a context: ctxstore turn CTX --key K"
                ))
            }),
        }
    }
}

/// Each label key once: a turn carries one value per key.
pub(crate) fn check_labels(labels: &[(String, String)]) -> Result<(), Usage> {
    let mut seen = std::collections::BTreeSet::new();
    match labels.iter().find(|(key, _)| !seen.insert(key)) {
        Some((key, _)) => Err(Usage(format!(
            "--label {key}=… is given twice: a turn has one value per label key"
        ))),
        None => Ok(()),
    }
}

/// The payload of `append` or the value of `kv put`, read before connecting, so that a refusal
/// needs no server. `purpose` completes "pass --allow-empty to …".
pub(crate) fn read_payload(
    file: Option<&PathBuf>,
    allow_empty: bool,
    purpose: &'static str,
) -> anyhow::Result<Vec<u8>> {
    let (payload, source) = match file {
        Some(path) => (
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
            path.display().to_string(),
        ),
        None => {
            let mut stdin = std::io::stdin().lock();
            if stdin.is_terminal() {
                return Err(NoPayload::Terminal.into());
            }
            let mut bytes = Vec::new();
            stdin
                .read_to_end(&mut bytes)
                .context("reading the payload from stdin")?;
            (bytes, "stdin".to_string())
        }
    };
    if payload.is_empty() && !allow_empty {
        return Err(NoPayload::Empty(source, purpose).into());
    }
    Ok(payload)
}

/// What a command takes from this side, checked and read before connecting so that a refusal
/// needs no server: `turn`'s target, `backup`'s directory, the payload of `append`, `kv put`
/// or `patch`, `purge`'s hash.
pub(crate) struct LocalInput {
    pub(crate) turn_target: Option<TurnTarget>,
    pub(crate) backup_dir: Option<String>,
    pub(crate) payload: Option<Vec<u8>>,
    pub(crate) purge_hash: Option<BlobHash>,
}

impl LocalInput {
    /// The checks in a fixed order (scripts see the first refusal): the turn target, the
    /// labels, `--as-of`, the backup directory, the payload (read from stdin or a file), the
    /// purge hash.
    pub(crate) fn check(command: &Command, as_of: Option<u64>) -> anyhow::Result<LocalInput> {
        let turn_target = match command {
            Command::Turn { target, key } => Some(TurnTarget::parse(target, key.as_ref())?),
            _ => None,
        };
        if let Command::Append { labels, .. } = command {
            check_labels(labels)?;
        }
        if as_of.is_some() && !command.reads_turns() {
            return Err(Usage(
                "--as-of applies to reads of turns (turn, last, page, range, replay, log, find, \
                 window)"
                    .into(),
            )
            .into());
        }
        let backup_dir = match command {
            Command::Backup { to, .. } => Some(backup_dir(to)?),
            _ => None,
        };
        let payload = command_payload(command)?;
        let purge_hash = match command {
            Command::Purge { hash, .. } => Some(blob_hash_from_hex(hash)?),
            _ => None,
        };
        Ok(LocalInput {
            turn_target,
            backup_dir,
            payload,
            purge_hash,
        })
    }
}

/// The payload of `append`, the value of `kv put`, the new payload of `patch`; `None` for
/// the commands that send none.
pub(crate) fn command_payload(command: &Command) -> anyhow::Result<Option<Vec<u8>>> {
    Ok(match command {
        Command::Append {
            file, allow_empty, ..
        } => Some(read_payload(
            file.as_ref(),
            *allow_empty,
            "append an empty turn",
        )?),
        Command::Kv(KvCommand::Put {
            file, allow_empty, ..
        }) => Some(read_payload(
            file.as_ref(),
            *allow_empty,
            "store an empty value",
        )?),
        Command::Patch {
            file, allow_empty, ..
        } => Some(read_payload(
            file.as_ref(),
            *allow_empty,
            "patch a turn to an empty payload",
        )?),
        _ => None,
    })
}

/// `backup --to DIR`: DIR made absolute here (it is sent as text, and the server refuses a
/// relative path), before connecting.
pub(crate) fn backup_dir(to: &std::path::Path) -> Result<String, Usage> {
    let absolute = std::path::absolute(to)
        .map_err(|error| Usage(format!("backup --to {}: {error}", to.display())))?;
    absolute.into_os_string().into_string().map_err(|dir| {
        Usage(format!(
            "backup --to {}: the directory must be UTF-8 to be sent to the server",
            std::path::Path::new(&dir).display()
        ))
    })
}
