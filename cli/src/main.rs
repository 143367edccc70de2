//! `ctxstore`: the command-line client. Every command prints its result; with `--json`, each
//! result is one JSON object on its own line (scripts depend on the field names), and an
//! error is one JSON object on stderr. Exit codes tell the failures apart (table in
//! `EXIT_CODES`, in `--help` and in the README). Every call has a connect, a handshake and a
//! request timeout, so a port that is not ctxstore is an error, never a hang.
//!
//! Code map: `args/` (the command line), `input.rs` (what is checked and read before
//! connecting), `exits.rs` (exit codes and errors), `output.rs` (JSON or readable lines), and
//! one file per command family in `commands/` (its command and its printing): `contexts`
//! (`head`, `ctx …`), `kv`, `appends`, `reads`, `overlays`, `blobs`, `admin` (`ping`, `stats`,
//! `gc`, `backup`). `main` parses, runs the local checks, connects, then hands the command to
//! its family.

// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

mod args;
mod commands;
mod exits;
mod input;
mod output;

use std::io::{Read, Write};
use std::process::ExitCode;

use anyhow::Context;
use ctxstore_client::ClientConfig;
use ctxstore_client::blocking::Client;
use serde_json::json;

use args::{Cli, Command};
use commands::{
    append, backup, blob, ctx, gc, index, kv, overlays, ping, read_turns, search_turns, stats,
    streams, tenant, tree, vector_search,
};
use exits::{EXIT_USAGE, StdoutClosed, classify};
use input::LocalInput;
use output::Output;

fn main() -> ExitCode {
    let cli = match Cli::parse_settled() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped early (`| head`) is not a failure.
        Err(error) if error.downcast_ref::<StdoutClosed>().is_some() => ExitCode::SUCCESS,
        Err(error) => {
            let (code, exit_code, detail) = classify(&error);
            let message = exits::message(&error);
            let mut stderr = std::io::stderr().lock();
            // Nothing is left to do when stderr is closed too.
            let _ = if cli.json {
                let mut value = json!({"error": {
                    "code": code,
                    "message": message,
                    "exit_code": exit_code,
                }});
                if let (Some(detail), Some(object)) = (detail, value["error"].as_object_mut()) {
                    object.insert("detail".into(), json!(detail));
                }
                writeln!(stderr, "{value}")
            } else {
                writeln!(stderr, "ctxstore: {message}")
            };
            ExitCode::from(exit_code)
        }
    }
}

/// A command line that does not parse: clap's message and exit code 2; with `--json`
/// anywhere on the line, as a JSON error. `--help` and `--version` print and exit 0.
fn usage_error(error: &clap::Error) -> ExitCode {
    let exit_code = u8::try_from(error.exit_code()).unwrap_or(EXIT_USAGE);
    let json_wanted = std::env::args_os().skip(1).any(|arg| arg == "--json");
    if error.use_stderr() && json_wanted {
        let value = json!({"error": {
            "code": "USAGE",
            "message": error.to_string().trim_end(),
            "exit_code": exit_code,
        }});
        let _ = writeln!(std::io::stderr().lock(), "{value}");
    } else {
        // A closed stdout under `--help | head` is not an error either.
        let _ = error.print();
    }
    ExitCode::from(exit_code)
}

/// One command: its local checks and input, then the connection, then its family's function.
fn run(cli: &Cli) -> anyhow::Result<()> {
    // Local checks first: a refusal needs no server.
    let local = LocalInput::check(&cli.command, cli.as_of)?;
    let out = Output { json: cli.json };
    // Edits of the server's tenants file, on its host: no connection.
    if let Command::Tenant(command) = &cli.command
        && let Some(edited) = commands::edit_tenants_file(&out, command)
    {
        return edited;
    }
    let client = connect(cli)?;
    match &cli.command {
        Command::Ctx(command) => ctx(&client, &out, command),
        Command::Kv(command) => kv(&client, &out, command, local.payload),
        Command::Index(command) => index(&client, &out, command),
        Command::Search(search) => vector_search(&client, &out, search),
        Command::SearchTurns(search) => search_turns(&client, &out, search),
        Command::Tenant(command) => tenant(&client, &out, command),
        Command::Head { context } => out.head(&client.head(context.clone())?),
        Command::Append { .. } => append(&client, &out, &cli.command, local.payload),
        Command::Turn { .. }
        | Command::Last { .. }
        | Command::Page { .. }
        | Command::Range { .. }
        | Command::Replay { .. }
        | Command::Log { .. }
        | Command::Find { .. }
        | Command::Window { .. } => read_turns(&client, &out, &cli.command, local.turn_target),
        Command::Backup { backup_timeout, .. } => {
            let Some(dir) = local.backup_dir else {
                anyhow::bail!("backup: no directory was resolved");
            };
            backup(&client, &out, dir, *backup_timeout)
        }
        Command::Blob { hash, output } => blob(&client, hash, output.as_ref()),
        Command::Ping => ping(&client, &out, &cli.addr),
        Command::Gc { gc_timeout } => gc(&client, &out, *gc_timeout),
        Command::Patch { .. } | Command::Redact { .. } | Command::Purge { .. } => {
            overlays(&client, &out, &cli.command, local.payload, local.purge_hash)
        }
        Command::Stats => stats(&client, &out),
        Command::Stream { .. }
        | Command::Streams { .. }
        | Command::StreamRead { .. }
        | Command::Follow { .. } => streams(&client, &out, &cli.command),
        Command::Tree {
            context,
            depth,
            since,
        } => tree(&client, &out, context, *depth, *since),
    }
}

/// Bytes of a token file read at most: far above any token (HELLO carries 1,024), far below
/// what a wrong path (a log, a device) would make this read.
const TOKEN_FILE_BYTES_MAX: u64 = 64 * 1024;

/// The token HELLO presents: `--token`, or the contents of `--token-file` trimmed of
/// surrounding white space (its trailing newline), as the server trims its own.
fn token(cli: &Cli) -> anyhow::Result<Option<String>> {
    let Some(path) = &cli.token_file else {
        return Ok(cli.token.clone());
    };
    let reading = || format!("reading the token file {} (--token-file)", path.display());
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| {
            file.take(TOKEN_FILE_BYTES_MAX + 1)
                .read_to_string(&mut text)
        })
        .with_context(reading)?;
    anyhow::ensure!(
        text.len() as u64 <= TOKEN_FILE_BYTES_MAX,
        "the token file {} (--token-file) holds more than {TOKEN_FILE_BYTES_MAX} bytes: not a \
         token",
        path.display()
    );
    let token = text.trim();
    anyhow::ensure!(
        !token.is_empty(),
        "the token file {} (--token-file) is empty: it should hold the server's token",
        path.display()
    );
    Ok(Some(token.to_string()))
}

/// Connects with the command line's timeouts: `--timeout` for each request (0s: none), the
/// command's own for a backup or a collection, `--connect-timeout` for the TCP connection and
/// again for HELLO.
fn connect(cli: &Cli) -> anyhow::Result<Client> {
    let request_timeout = Some(cli.timeout).filter(|timeout| !timeout.is_zero());
    let backup_timeout = match &cli.command {
        Command::Backup { backup_timeout, .. } => {
            Some(*backup_timeout).filter(|timeout| !timeout.is_zero())
        }
        _ => Some(ClientConfig::BACKUP_TIMEOUT_DEFAULT),
    };
    let gc_timeout = match &cli.command {
        Command::Gc { gc_timeout } | Command::Purge { gc_timeout, .. } => {
            Some(*gc_timeout).filter(|timeout| !timeout.is_zero())
        }
        _ => Some(ClientConfig::GC_TIMEOUT_DEFAULT),
    };
    let config = ClientConfig::new(cli.addr.clone())
        .with_backup_timeout(backup_timeout)
        .with_gc_timeout(gc_timeout)
        .with_token(token(cli)?)
        .with_connect_timeout(cli.connect_timeout)
        .with_hello_timeout(cli.connect_timeout)
        .with_request_timeout(request_timeout)
        .with_verify_payloads(cli.verify_payloads)
        .with_failover_timeout(cli.failover_timeout)
        // `--durability` of `append`, `kv put` and `stream`: only their writes carry it; on a
        // server older than protocol version 4 they are refused before sending.
        .with_durability(cli.command.durability());
    let mut client =
        Client::connect(config).with_context(|| format!("connecting to {}", cli.addr))?;
    // Reads of turns ask for the overlay view (the latest unless --as-of), so that turn lines
    // say which turns are redacted or patched; --as-of on a version-1 server is refused.
    if client.protocol_version() >= 2 || cli.as_of.is_some() {
        client.set_view(Some(cli.as_of.unwrap_or(0)));
    }
    Ok(client)
}
