//! `ctxstore`: the command-line client. Every command prints its result; with `--json`, each
//! result is one JSON object on its own line (scripts depend on the field names). Errors go
//! to stderr and the exit code is 1 (2 for a command line that does not parse).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use base64::prelude::{BASE64_STANDARD, Engine as _};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use ctxstore_client::blocking::Client;
use ctxstore_client::{BlobHash, ClientConfig, ContextHead, Turn, codec_name, codec_tag};
use serde_json::json;

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
#[derive(Parser, Debug)]
#[command(name = "ctxstore", version, verbatim_doc_comment)]
struct Cli {
    /// Server address.
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
    /// One JSON object per result, on its own line.
    #[arg(long, global = true)]
    json: bool,
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
    },
    /// Show one turn.
    Turn { turn: u64 },
    /// The newest turns of a context, oldest first.
    Last {
        context: u64,
        #[arg(short = 'n', default_value_t = 20)]
        n: u32,
        /// Include each payload (base64 in JSON, text otherwise).
        #[arg(long)]
        payloads: bool,
    },
    /// The turns older than --before (a cursor from a previous page), oldest first.
    Page {
        context: u64,
        #[arg(long)]
        before: u64,
        #[arg(short = 'n', default_value_t = 20)]
        n: u32,
        #[arg(long)]
        payloads: bool,
    },
    /// The turns of a context with depth from --from-depth, oldest first.
    Range {
        context: u64,
        #[arg(long)]
        from_depth: u32,
        #[arg(short = 'n', default_value_t = 20)]
        n: u32,
        #[arg(long)]
        payloads: bool,
    },
    /// The whole chain from the root to a turn.
    Replay {
        turn: u64,
        #[arg(long)]
        payloads: bool,
    },
    /// Write a payload's raw bytes to stdout or to -o PATH.
    Blob {
        /// 64 hex digits.
        hash: String,
        #[arg(short = 'o')]
        output: Option<PathBuf>,
    },
    /// Server counters: turns, contexts, blobs, bytes, dedup hits.
    Stats,
}

#[derive(Subcommand, Debug)]
enum CtxCommand {
    /// A new context: empty, or with its head at --from TURN.
    Create {
        #[arg(long)]
        from: Option<u64>,
    },
    /// A new context whose head is TURN (copies nothing).
    Fork { turn: u64 },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("ctxstore: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    let config = ClientConfig::new(cli.addr.clone()).with_token(cli.token.clone());
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
            file,
        } => {
            let codec = codec_tag(codec)?;
            let payload = match file {
                Some(path) => {
                    std::fs::read(path).with_context(|| format!("reading {}", path.display()))?
                }
                None => {
                    let mut bytes = Vec::new();
                    std::io::stdin()
                        .read_to_end(&mut bytes)
                        .context("reading the payload from stdin")?;
                    bytes
                }
            };
            let appended = client.append(
                *context,
                *expect_head,
                *type_tag,
                codec,
                Bytes::from(payload),
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
                None => {
                    let mut stdout = std::io::stdout().lock();
                    stdout.write_all(&bytes)?;
                    stdout.flush().context("writing to stdout")
                }
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
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{value}")?;
        Ok(())
    }

    fn text(&self, text: &str) -> anyhow::Result<()> {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{text}")?;
        Ok(())
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
