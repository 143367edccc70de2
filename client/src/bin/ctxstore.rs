//! `ctxstore`: the command-line client. Every command prints its result; with `--json`, each
//! result is one JSON object on its own line (scripts depend on the field names), and an
//! error is one JSON object on stderr. Exit codes tell the failures apart (table in
//! `EXIT_CODES`, in `--help` and in the README). Every call has a connect, a handshake and a
//! request timeout, so a port that is not ctxstore is an error, never a hang.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use base64::prelude::{BASE64_STANDARD, Engine as _};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use ctxstore_client::blocking::Client;
use ctxstore_client::{
    BlobHash, ClientConfig, ClientError, ContextHead, ErrorCode, Turn, codec_name, codec_tag,
};
use serde_json::json;

/// The exit codes, as `--help` and the README show them.
const EXIT_CODES: &str = "\
Exit codes:
  0  success (also when stdout is closed early, as in `ctxstore last 1 | head -1`)
  1  any other error (bad input, protocol error, server error other than those below)
  2  the command line does not parse (usage)
  3  NOT_FOUND: the context, turn or blob does not exist
  4  CONFLICT: --expect-head did not match the context's head
  5  connection failure: refused, unresolvable, timed out (connect, handshake or request),
     not a ctxstore server on that port, or the connection lost
  6  UNAUTHORIZED: the token is missing or wrong
With --json, an error is also one JSON object on stderr:
  {\"error\":{\"code\":\"NOT_FOUND\",\"message\":\"...\",\"exit_code\":3}}
(`detail` is added for server errors: for CONFLICT, the context's actual head).";

const EXIT_OTHER: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_NOT_FOUND: u8 = 3;
const EXIT_CONFLICT: u8 = 4;
const EXIT_CONNECTION: u8 = 5;
const EXIT_UNAUTHORIZED: u8 = 6;

/// Talk to a ctxstore server: create and fork contexts, append turns, read them back.
///
/// A tour (start a server first: `ctxstore-server`):
///   ctxstore ctx create                                   # → context 1
///   echo '{"role":"user","content":"hi"}' | ctxstore append 1 --codec json
///   ctxstore append 1 --file answer.json --codec json
///   ctxstore last 1 -n 10 --payloads
///   ctxstore ctx fork 3                                   # a new context whose head is turn 3
///   ctxstore --json turn 3                                # one JSON object per line
///   ctxstore blob <64-hex-hash> -o payload.bin
///   ctxstore ping                                         # is the server there? round trip
///
/// Exit codes: 0 ok, 1 other error, 2 usage, 3 NOT_FOUND, 4 CONFLICT, 5 connection failure
/// or timeout, 6 UNAUTHORIZED (details under --help).
#[derive(Parser, Debug)]
#[command(
    name = "ctxstore",
    version,
    verbatim_doc_comment,
    after_long_help = EXIT_CODES
)]
struct Cli {
    /// Server address: HOST:PORT (a host name or an IP address).
    #[arg(
        long,
        global = true,
        default_value = "127.0.0.1:7411",
        env = "CTXSTORE_ADDR"
    )]
    addr: String,
    /// Token for servers that require one.
    #[arg(long, global = true, env = "CTXSTORE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// One JSON object per result, on its own line; errors as one JSON object on stderr.
    #[arg(long, global = true)]
    json: bool,
    /// Longest wait for the TCP connection, and again for the server's answer to HELLO
    /// (like 500ms, 5s, 1m).
    #[arg(
        long,
        global = true,
        default_value = "5s",
        value_parser = parse_duration,
        env = "CTXSTORE_CONNECT_TIMEOUT"
    )]
    connect_timeout: Duration,
    /// Longest wait for each response (like 30s, 2m; 0s: no limit).
    #[arg(
        long,
        global = true,
        default_value = "30s",
        value_parser = parse_duration,
        env = "CTXSTORE_TIMEOUT"
    )]
    timeout: Duration,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create or fork contexts.
    #[command(subcommand)]
    Ctx(CtxCommand),
    /// Show a context's head.
    Head {
        /// Context id.
        context: u64,
    },
    /// Append a turn to a context, from --file or from stdin. Durable when it prints.
    Append {
        /// Context id.
        context: u64,
        /// Type tag: what the payload is (yours to define).
        #[arg(long = "type", default_value_t = 0)]
        type_tag: u64,
        /// How the payload is serialised: raw, json, protobuf, cbor, msgpack, text,
        /// flatbuffers, capnp, gob, or a number.
        #[arg(long, default_value = "raw")]
        codec: String,
        /// Append only if the context's head is still this turn (0: only if empty).
        #[arg(long)]
        expect_head: Option<u64>,
        /// Read the payload from this file instead of stdin.
        #[arg(long)]
        file: Option<PathBuf>,
        /// Append even when the payload is empty (refused otherwise: an empty stdin is
        /// usually a mistake in a pipeline).
        #[arg(long)]
        allow_empty: bool,
    },
    /// Show one turn.
    Turn {
        /// Turn id.
        turn: u64,
    },
    /// The newest turns of a context, oldest first.
    Last {
        /// Context id.
        context: u64,
        /// How many turns.
        #[arg(short = 'n', default_value_t = 20)]
        n: u32,
        /// Include each payload (base64 in JSON, text otherwise).
        #[arg(long)]
        payloads: bool,
    },
    /// The turns older than --before (a cursor from a previous page), oldest first.
    Page {
        /// Context id.
        context: u64,
        /// Turn id: the page holds the turns older than it.
        #[arg(long)]
        before: u64,
        /// How many turns.
        #[arg(short = 'n', default_value_t = 20)]
        n: u32,
        /// Include each payload (base64 in JSON, text otherwise).
        #[arg(long)]
        payloads: bool,
    },
    /// The turns of a context with depth from --from-depth, oldest first.
    Range {
        /// Context id.
        context: u64,
        /// Depth of the first turn (the root is depth 0).
        #[arg(long)]
        from_depth: u32,
        /// How many turns.
        #[arg(short = 'n', default_value_t = 20)]
        n: u32,
        /// Include each payload (base64 in JSON, text otherwise).
        #[arg(long)]
        payloads: bool,
    },
    /// The whole chain from the root to a turn.
    Replay {
        /// Turn id: the last turn of the chain.
        turn: u64,
        /// Include each payload (base64 in JSON, text otherwise).
        #[arg(long)]
        payloads: bool,
    },
    /// Write a payload's raw bytes to stdout or to -o PATH.
    Blob {
        /// The payload's hash: 64 hex digits.
        hash: String,
        /// Write the bytes to this file instead of stdout.
        #[arg(short = 'o')]
        output: Option<PathBuf>,
    },
    /// Server counters: turns, contexts, blobs, bytes, dedup hits.
    Stats,
    /// Check that a ctxstore server answers: one PING round trip, its time in microseconds.
    Ping,
}

#[derive(Subcommand, Debug)]
enum CtxCommand {
    /// A new context: empty, or with its head at --from TURN.
    Create {
        /// Turn id: the new context's head (omit for an empty context).
        #[arg(long)]
        from: Option<u64>,
    },
    /// A new context whose head is TURN (copies nothing).
    Fork {
        /// Turn id: the new context's head.
        turn: u64,
    },
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|error| format!("{text:?} is not a duration like 500ms, 5s, 1m: {error}"))
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped early (`| head`) is not a failure.
        Err(error) if error.downcast_ref::<StdoutClosed>().is_some() => ExitCode::SUCCESS,
        Err(error) => {
            let (code, exit_code, detail) = classify(&error);
            let message = format!("{error:#}");
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

/// The error's stable name, exit code and (for server errors) detail.
fn classify(error: &anyhow::Error) -> (&'static str, u8, Option<u64>) {
    for cause in error.chain() {
        if let Some(client) = cause.downcast_ref::<ClientError>() {
            let exit_code = match client.code() {
                Some(ErrorCode::NotFound) => EXIT_NOT_FOUND,
                Some(ErrorCode::Conflict) => EXIT_CONFLICT,
                Some(ErrorCode::Unauthorized) => EXIT_UNAUTHORIZED,
                _ if client.is_connection_failure() => EXIT_CONNECTION,
                _ => EXIT_OTHER,
            };
            let detail = match client {
                ClientError::Server { detail, .. } => Some(*detail),
                _ => None,
            };
            return (client.name(), exit_code, detail);
        }
        if let Some(refused) = cause.downcast_ref::<NoPayload>() {
            return (refused.code(), EXIT_OTHER, None);
        }
        if cause.downcast_ref::<std::io::Error>().is_some() {
            return ("IO", EXIT_OTHER, None);
        }
    }
    ("ERROR", EXIT_OTHER, None)
}

/// Stdout was closed by its reader: stop quietly.
#[derive(Debug, thiserror::Error)]
#[error("stdout closed")]
struct StdoutClosed;

/// `append` refused to send an empty (or absent) payload.
#[derive(Debug, thiserror::Error)]
enum NoPayload {
    #[error("the payload is empty ({0} gave 0 bytes); pass --allow-empty to append an empty turn")]
    Empty(String),
    #[error("no payload: stdin is a terminal; pipe the payload in or pass --file PATH")]
    Terminal,
}

impl NoPayload {
    fn code(&self) -> &'static str {
        match self {
            NoPayload::Empty(_) => "EMPTY_PAYLOAD",
            NoPayload::Terminal => "NO_PAYLOAD",
        }
    }
}

/// Writes to stdout; a closed stdout becomes `StdoutClosed`.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(error) => Err(anyhow::Error::new(error).context("writing to stdout")),
    }
}

/// The payload of `append`, read before connecting, so that a refusal needs no server.
fn read_payload(file: Option<&PathBuf>, allow_empty: bool) -> anyhow::Result<Vec<u8>> {
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
        return Err(NoPayload::Empty(source).into());
    }
    Ok(payload)
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    // Local checks first: a refusal needs no server.
    let payload = match &cli.command {
        Command::Append {
            file, allow_empty, ..
        } => Some(read_payload(file.as_ref(), *allow_empty)?),
        _ => None,
    };
    let request_timeout = Some(cli.timeout).filter(|timeout| !timeout.is_zero());
    let config = ClientConfig::new(cli.addr.clone())
        .with_token(cli.token.clone())
        .with_connect_timeout(cli.connect_timeout)
        .with_hello_timeout(cli.connect_timeout)
        .with_request_timeout(request_timeout);
    let client = Client::connect(config).with_context(|| format!("connecting to {}", cli.addr))?;
    let out = Output { json: cli.json };
    match &cli.command {
        Command::Ctx(CtxCommand::Create { from: None }) => out.head(&client.create_context()?),
        Command::Ctx(CtxCommand::Create { from: Some(turn) }) => {
            out.head(&client.create_context_from(*turn)?)
        }
        Command::Ctx(CtxCommand::Fork { turn }) => out.head(&client.fork(*turn)?),
        Command::Head { context } => out.head(&client.head(*context)?),
        Command::Append {
            context,
            type_tag,
            codec,
            expect_head,
            ..
        } => {
            let codec = codec_tag(codec)?;
            let appended = client.append(
                *context,
                *expect_head,
                *type_tag,
                codec,
                Bytes::from(payload.unwrap_or_default()),
            )?;
            let turn = &appended.turn;
            if out.json {
                out.line(&json!({
                    "turn_id": turn.turn_id,
                    "parent_turn_id": turn.parent_turn_id,
                    "depth": turn.depth,
                    "payload_hash": turn.payload_hash.to_hex(),
                    "deduped": appended.deduped,
                }))
            } else {
                out.text(&format!(
                    "turn {} (parent {}, depth {}) payload {}{}",
                    turn.turn_id,
                    turn.parent_turn_id,
                    turn.depth,
                    turn.payload_hash,
                    if appended.deduped {
                        " (already stored)"
                    } else {
                        ""
                    }
                ))
            }
        }
        Command::Turn { turn } => out.turns(&[client.turn(*turn)?]),
        Command::Last {
            context,
            n,
            payloads,
        } => out.turns(&client.last(*context, *n, *payloads)?.turns),
        Command::Page {
            context,
            before,
            n,
            payloads,
        } => out.turns(&client.before(*context, *before, *n, *payloads)?.turns),
        Command::Range {
            context,
            from_depth,
            n,
            payloads,
        } => out.turns(&client.range(*context, *from_depth, *n, *payloads)?.turns),
        Command::Replay { turn, payloads } => out.turns(&client.replay(*turn, *payloads)?),
        Command::Blob { hash, output } => {
            let bytes = client.blob(BlobHash::from_hex(hash)?)?;
            match output {
                Some(path) => std::fs::write(path, &bytes)
                    .with_context(|| format!("writing {}", path.display())),
                None => write_stdout(&bytes),
            }
        }
        Command::Ping => {
            let nonce = u64::from(std::process::id());
            let started = Instant::now();
            client.ping(nonce)?;
            let rtt_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            if out.json {
                out.line(&json!({ "rtt_us": rtt_us }))
            } else {
                out.text(&format!("pong from {}: {rtt_us} µs", cli.addr))
            }
        }
        Command::Stats => {
            let stats = client.stats()?;
            let value = json!({
                "turns": stats.turns,
                "contexts": stats.contexts,
                "blobs": stats.blobs,
                "logical_bytes": stats.logical_bytes,
                "unique_bytes": stats.unique_bytes,
                "stored_bytes": stats.stored_bytes,
                "dedup_hits": stats.dedup_hits,
                "read_only": stats.read_only,
                "connections": stats.connections,
                "requests_total": stats.requests_total,
                "errors_total": stats.errors_total,
                "uptime_ms": stats.uptime_ms,
            });
            if out.json {
                out.line(&value)
            } else {
                let mut text = String::new();
                if let Some(fields) = value.as_object() {
                    for (name, value) in fields {
                        text.push_str(&format!("{name:<15} {value}\n"));
                    }
                }
                out.text(text.trim_end())
            }
        }
    }
}

struct Output {
    json: bool,
}

impl Output {
    fn line(&self, value: &serde_json::Value) -> anyhow::Result<()> {
        write_stdout(format!("{value}\n").as_bytes())
    }

    fn text(&self, text: &str) -> anyhow::Result<()> {
        write_stdout(format!("{text}\n").as_bytes())
    }

    fn head(&self, head: &ContextHead) -> anyhow::Result<()> {
        if self.json {
            self.line(&json!({
                "context_id": head.context_id,
                "head_turn_id": head.head_turn_id,
                "head_depth": head.head_depth,
            }))
        } else if head.head_turn_id == 0 {
            self.text(&format!("context {} (empty)", head.context_id))
        } else {
            self.text(&format!(
                "context {} head {} depth {}",
                head.context_id, head.head_turn_id, head.head_depth
            ))
        }
    }

    fn turns(&self, turns: &[Turn]) -> anyhow::Result<()> {
        for turn in turns {
            if self.json {
                let mut value = json!({
                    "turn_id": turn.turn_id,
                    "parent_turn_id": turn.parent_turn_id,
                    "context_id": turn.context_id,
                    "depth": turn.depth,
                    "type_tag": turn.type_tag,
                    "codec": codec_name(turn.codec),
                    "payload_hash": turn.payload_hash.to_hex(),
                    "payload_len": turn.payload_len,
                    "created_at_unix_ms": turn.created_at_unix_ms,
                });
                if let (Some(payload), Some(object)) = (&turn.payload, value.as_object_mut()) {
                    object.insert("payload_b64".into(), json!(BASE64_STANDARD.encode(payload)));
                }
                self.line(&value)?;
            } else {
                let mut text = format!(
                    "turn {} parent {} depth {} type {} codec {} {} bytes {}",
                    turn.turn_id,
                    turn.parent_turn_id,
                    turn.depth,
                    turn.type_tag,
                    codec_name(turn.codec),
                    turn.payload_len,
                    turn.payload_hash
                );
                if let Some(payload) = &turn.payload {
                    text.push_str("\n  ");
                    text.push_str(&String::from_utf8_lossy(payload));
                }
                self.text(&text)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every subcommand and every argument says what it is in `--help`.
    #[test]
    fn every_command_and_argument_has_help() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let name = arg.get_id().as_str();
                if name != "help" && name != "version" && arg.get_help().is_none() {
                    missing.push(format!("{path} {name}"));
                }
            }
            for sub in command.get_subcommands() {
                let sub_path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() {
                    missing.push(sub_path.clone());
                }
                walk(sub, &sub_path, missing);
            }
        }
        let command = Cli::command();
        command.clone().debug_assert();
        let mut missing = Vec::new();
        walk(&command, "ctxstore", &mut missing);
        assert_eq!(missing, Vec::<String>::new(), "without help text");
        // The walk saw the commands (a renamed getter would make it vacuous).
        assert!(
            command
                .get_subcommands()
                .any(|sub| sub.get_name() == "ping")
        );
        assert!(command.get_subcommands().count() >= 11);
    }

    #[test]
    fn durations_name_their_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5").is_err());
    }
}
