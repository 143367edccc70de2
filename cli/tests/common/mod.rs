//! What the CLI's tests share: running `ctxstore` (`ctxstore` builds the command, `run` feeds
//! it and waits), reading what it printed with `--json` (`json_lines`, `json_error`), and the
//! `Cli` trait: something to run the CLI against (a real server, a fake, an address where
//! nothing listens), with `one`, `json` and `fails` on top of its `run`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

pub const CLI: &str = env!("CARGO_BIN_EXE_ctxstore");

/// `ctxstore` with piped stdio and none of the settings a developer's shell may hold
/// (`CTXSTORE_TOKEN`, `CTXSTORE_TOKEN_FILE`, `CTXSTORE_TIMEOUT`, `CTXSTORE_CONNECT_TIMEOUT`,
/// `CTXSTORE_FAILOVER_TIMEOUT`): a
/// test says what it sets.
pub fn ctxstore() -> Command {
    let mut command = Command::new(CLI);
    command
        .env_remove("CTXSTORE_TOKEN")
        .env_remove("CTXSTORE_TOKEN_FILE")
        .env_remove("CTXSTORE_TIMEOUT")
        .env_remove("CTXSTORE_CONNECT_TIMEOUT")
        .env_remove("CTXSTORE_FAILOVER_TIMEOUT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs `command` with `stdin` written to it (the CLI may exit without reading its input) and
/// waits for its output.
pub fn run(command: &mut Command, stdin: &[u8]) -> Output {
    let mut child = command.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().unwrap()
}

/// `ctxstore --addr ADDR ARGS…`.
pub fn run_at(addr: &str, args: &[&str], stdin: &[u8]) -> Output {
    run(ctxstore().args(["--addr", addr]).args(args), stdin)
}

/// `--json` output lines of a command that must succeed.
pub fn json_lines(output: &Output, args: &[&str]) -> Vec<Value> {
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The one JSON error on stderr of a command that must exit `code` with nothing on stdout
/// (and no panic).
pub fn json_error(output: &Output, args: &[&str], code: i32) -> Value {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(output.stdout.is_empty(), "{args:?} wrote to stdout");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{args:?}: one JSON line on stderr: {stderr}"
    );
    let error: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(error["error"]["exit_code"], json!(code), "{stderr}");
    error["error"].clone()
}

/// Something to run the CLI against.
pub trait Cli {
    /// `ctxstore ARGS…` against it, with `stdin`.
    fn run(&self, args: &[&str], stdin: &[u8]) -> Output;

    /// Runs with `--json`; expects success; every result line.
    fn json(&self, args: &[&str], stdin: &[u8]) -> Vec<Value> {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        json_lines(&self.run(&all, stdin), args)
    }

    /// Runs with `--json`; expects success and one result line.
    fn one(&self, args: &[&str], stdin: &[u8]) -> Value {
        let mut values = self.json(args, stdin);
        assert_eq!(values.len(), 1, "{args:?}: {values:?}");
        values.remove(0)
    }

    /// Runs with `--json`, expects exit `code` and one JSON error on stderr; the error.
    fn fails(&self, args: &[&str], stdin: &[u8], code: i32) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        json_error(&self.run(&all, stdin), args, code)
    }
}

/// In the server's temporary directory: a relative path a command writes stays there.
impl Cli for ctxstore_testsupport::TestServer {
    fn run(&self, args: &[&str], stdin: &[u8]) -> Output {
        let mut command = ctxstore();
        command.current_dir(self.dir.path());
        run(command.args(["--addr", &self.addr]).args(args), stdin)
    }
}

/// A server's address, to run the CLI against.
pub struct At<'a>(pub &'a str);

impl Cli for At<'_> {
    fn run(&self, args: &[&str], stdin: &[u8]) -> Output {
        run_at(self.0, args, stdin)
    }
}

/// A JSON object's keys, in order.
pub fn keys(value: &Value) -> Vec<&str> {
    value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

/// The fields `ctx show` prints, with their types.
pub fn assert_show_fields(value: &Value) {
    for name in [
        "context_id",
        "head_turn_id",
        "head_depth",
        "created_at_unix_ms",
        "updated_at_unix_ms",
    ] {
        assert!(value[name].is_u64(), "{name} in {value}");
    }
    assert!(
        value["name"].is_string() || value["name"].is_null(),
        "{value}"
    );
    assert!(value["tags"].is_object(), "{value}");
}
