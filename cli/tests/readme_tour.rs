//! The README's tour runs (issue 29 item 5): every ```` ```sh tour ```` block of README.md, in
//! order, against a fresh server, through the real `ctxstore` and `ctxstore-server` binaries.
//! Each command must exit 0, or the code its comment names (`# exit 7`), and print what its
//! comment shows after `→` (up to a `;`, after which the comment is prose):
//!
//! - `→ {"turn_id":25,…,"existing":true}`: a JSON object on stdout (stderr for a failing
//!   command) holding these fields with these values; `…` stands for fields left out, and a
//!   value `"…"` for any value;
//! - `→ turn 23 … key step-1`: text, where `…` stands for anything (newlines included), found in
//!   the output.
//!
//! A command continues on the next line after a trailing `|` or `\`, and until a `do` is closed
//! by its `done`. Commands run in a scratch directory with `ctxstore` on PATH and
//! `CTXSTORE_ADDR` naming the server, so ids in the README are those of a fresh store.
//! `CTXSTORE_TOUR_PRINT=1` prints every command and its output (to write the comments).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_ctxstore");

use ctxstore_testsupport::TestServer;

/// One command of the tour, with what its comment expects.
#[derive(Debug)]
struct Step {
    /// README line of the command's first line.
    line: usize,
    command: String,
    exit_code: i32,
    expected: Option<String>,
}

/// The `sh tour` blocks' commands, in README order.
fn tour_steps(readme: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut in_tour = false;
    let mut pending: Option<(usize, String)> = None;
    for (index, line) in readme.lines().enumerate() {
        let number = index + 1;
        if line.starts_with("```") {
            let info = line.trim_start_matches('`').trim();
            in_tour = !in_tour && info == "sh tour";
            assert!(
                pending.is_none(),
                "README:{number}: a tour block ends mid-command"
            );
            continue;
        }
        if !in_tour {
            continue;
        }
        let (code, comment) = split_comment(line);
        let code = code.trim_end();
        match &mut pending {
            None if code.trim().is_empty() => {
                // A comment on its own line says more about the command before it.
                if let (Some(comment), Some(step)) = (comment, steps.last_mut()) {
                    annotate(step, comment);
                }
                continue;
            }
            None => pending = Some((number, code.to_string())),
            Some((_, text)) => {
                text.push('\n');
                text.push_str(code);
            }
        }
        let (start, text) = pending.as_ref().unwrap();
        if continues(text) {
            continue;
        }
        let mut step = Step {
            line: *start,
            command: text.clone(),
            exit_code: 0,
            expected: None,
        };
        if let Some(comment) = comment {
            annotate(&mut step, comment);
        }
        steps.push(step);
        pending = None;
    }
    steps
}

/// The code of a line and its comment (from a `#` outside quotes that starts a word).
fn split_comment(line: &str) -> (&str, Option<&str>) {
    let mut quote: Option<char> = None;
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match quote {
            Some(open) if c == open => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '#' && previous.is_whitespace() => {
                return (&line[..at], Some(line[at + 1..].trim()));
            }
            None => {}
        }
        previous = c;
    }
    (line, None)
}

/// Whether a command goes on on the next line.
fn continues(text: &str) -> bool {
    let trimmed = text.trim_end();
    let words = |word: &str| {
        text.split(|c: char| c.is_whitespace() || c == ';')
            .filter(|w| *w == word)
            .count()
    };
    trimmed.ends_with('|') || trimmed.ends_with('\\') || words("do") > words("done")
}

/// Reads `exit N` and `→ EXPECTED` out of a comment.
fn annotate(step: &mut Step, comment: &str) {
    if let Some(at) = comment.find("exit ") {
        let digits: String = comment[at + 5..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if let Ok(code) = digits.parse() {
            step.exit_code = code;
        }
    }
    if let Some((_, expected)) = comment.split_once('→') {
        let expected = expected.split(';').next().unwrap_or("").trim();
        if !expected.is_empty() {
            step.expected = Some(expected.to_string());
        }
    }
}

/// Whether `text` holds `pattern`, where `…` in the pattern stands for anything.
fn glob_found(pattern: &str, text: &str) -> bool {
    let mut parts = pattern
        .split('…')
        .map(str::trim)
        .filter(|part| !part.is_empty());
    let Some(first) = parts.next() else {
        return true;
    };
    let Some(start) = text.find(first) else {
        return false;
    };
    let mut rest = &text[start + first.len()..];
    for part in parts {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// The fields an expected `{…}` names, as a JSON object (`…` entries dropped).
fn expected_fields(expected: &str) -> serde_json::Map<String, Value> {
    let cleaned = expected
        .replace(",…,", ",")
        .replace(",…}", "}")
        .replace("{…,", "{");
    match serde_json::from_str::<Value>(&cleaned) {
        Ok(Value::Object(fields)) => fields,
        other => panic!("expected output {expected:?} is not a JSON object with …: {other:?}"),
    }
}

/// Whether one JSON line of `output` holds every expected field (`"…"` matches any value; an
/// error object is looked at inside `{"error":…}`).
fn json_found(fields: &serde_json::Map<String, Value>, output: &str) -> bool {
    output.lines().any(|line| {
        let Ok(Value::Object(mut actual)) = serde_json::from_str::<Value>(line) else {
            return false;
        };
        if let Some(Value::Object(error)) = actual.remove("error") {
            actual = error;
        }
        fields
            .iter()
            .all(|(key, want)| match (actual.get(key), want.as_str()) {
                // A string with `…` in it matches as text (`"a971fabb…"`, `"…"` for any value).
                (Some(Value::String(got)), Some(want)) if want.contains('\u{2026}') => {
                    glob_found(want, got)
                }
                (Some(_), Some("\u{2026}")) => true,
                (Some(got), _) => got == want,
                (None, _) => false,
            })
    })
}

fn readme() -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

#[test]
fn the_readme_tour_runs_as_written() {
    let (path, text) = readme();
    let steps = tour_steps(&text);
    assert!(
        steps.len() >= 40,
        "{} tour commands in {}",
        steps.len(),
        path.display()
    );
    let server = TestServer::start(None);
    let scratch = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(CLI).parent().unwrap();
    let path_var = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let print = std::env::var_os("CTXSTORE_TOUR_PRINT").is_some();
    let mut checked = 0;
    for step in &steps {
        let output = Command::new("bash")
            .args(["-o", "pipefail", "-c", &step.command])
            .current_dir(scratch.path())
            .env("PATH", &path_var)
            .env("CTXSTORE_ADDR", &server.addr)
            .env_remove("CTXSTORE_TOKEN")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        if print {
            println!(
                "README:{} $ {}\n{stdout}{stderr}-- exit {:?}",
                step.line,
                step.command,
                output.status.code()
            );
        }
        let context = || {
            format!(
                "README.md:{}: `{}`\nstdout:\n{stdout}\nstderr:\n{stderr}",
                step.line, step.command
            )
        };
        let exited_as_said = output.status.code() == Some(step.exit_code);
        let found = step.expected.as_ref().map(|expected| {
            let seen = if step.exit_code == 0 {
                &stdout
            } else {
                &stderr
            };
            if expected.starts_with('{') {
                json_found(&expected_fields(expected), seen)
            } else {
                glob_found(expected, seen)
            }
        });
        if print {
            // Writing the comments: report every miss, stop at none.
            if !exited_as_said || found == Some(false) {
                println!(
                    "!! README:{} does not hold (exit {}, → {:?})",
                    step.line, step.exit_code, step.expected
                );
            }
            continue;
        }
        assert!(
            exited_as_said,
            "exit {} expected\n{}",
            step.exit_code,
            context()
        );
        if let Some(found) = found {
            assert!(found, "expected → {:?}\n{}", step.expected, context());
            checked += 1;
        }
    }
    if !print {
        assert!(
            checked >= 25,
            "only {checked} commands have their output checked"
        );
    }
}

#[test]
fn the_tour_parser_reads_commands_and_their_comments() {
    let readme = "```sh tour\n\
        ctxstore ctx create                     # → context 1\n\
        echo '{\"a\":\"# not a comment\"}' |\n  ctxstore append 1\n\
        # → {\"turn_id\":1,…}; prose\n\
        for i in 1 2; do echo $i |\n  ctxstore append 1; done\n\
        ctxstore ctx create --name x            # exit 7: ALREADY_EXISTS\n\
        ```\n\
        ```sh\nnot run\n```\n";
    let steps = tour_steps(readme);
    assert_eq!(steps.len(), 4, "{steps:?}");
    assert_eq!(steps[0].expected.as_deref(), Some("context 1"));
    assert!(steps[1].command.ends_with("ctxstore append 1"), "{steps:?}");
    assert_eq!(steps[1].expected.as_deref(), Some("{\"turn_id\":1,…}"));
    assert!(steps[2].command.contains("done"));
    assert_eq!(steps[3].exit_code, 7);
    assert!(glob_found("turn 2 … key k", "x\nturn 2 parent 1\nkey k"));
    assert!(!glob_found("turn 3", "turn 2"));
    let fields = expected_fields("{\"turn_id\":25,…,\"existing\":true,\"h\":\"…\"}");
    assert!(json_found(
        &fields,
        "{\"existing\":true,\"h\":\"ab\",\"turn_id\":25,\"x\":1}"
    ));
    assert!(!json_found(
        &fields,
        "{\"existing\":false,\"h\":\"ab\",\"turn_id\":25}"
    ));
}

/// The README's ```rust blocks (issue 29 item 5): each is the `// README:begin` …
/// `// README:end` span of an example that `cargo test` compiles (`client/examples/readme.rs`,
/// `engine/examples/readme_engine.rs`), verbatim once the span's indentation is taken off, in order.
#[test]
fn the_readme_rust_blocks_are_compiled_examples() {
    let (_, text) = readme();
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in text.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```rust") => current = Some(Vec::new()),
            (Some(block), "```") => {
                blocks.push(block.join("\n"));
                current = None;
            }
            (Some(block), _) => block.push(line),
            (None, _) => {}
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut spans = Vec::new();
    for example in [
        "client/examples/readme.rs",
        "engine/examples/readme_engine.rs",
    ] {
        let source = std::fs::read_to_string(root.join(example)).unwrap();
        let mut span: Option<Vec<&str>> = None;
        for line in source.lines() {
            match (&mut span, line.trim()) {
                (None, "// README:begin") => span = Some(Vec::new()),
                (Some(lines), "// README:end") => {
                    let indent = lines
                        .iter()
                        .filter(|line| !line.trim().is_empty())
                        .map(|line| line.len() - line.trim_start().len())
                        .min()
                        .unwrap_or(0);
                    let text: Vec<&str> = lines
                        .iter()
                        .map(|line| line.get(indent..).unwrap_or("").trim_end())
                        .collect();
                    spans.push((example, text.join("\n")));
                    span = None;
                }
                (Some(lines), _) => lines.push(line),
                (None, _) => {}
            }
        }
    }
    assert_eq!(
        blocks.len(),
        spans.len(),
        "README has {} rust blocks, the examples {} spans",
        blocks.len(),
        spans.len()
    );
    for (block, (example, span)) in blocks.iter().zip(&spans) {
        assert_eq!(
            block, span,
            "README's rust block differs from its span in {example}"
        );
    }
}
