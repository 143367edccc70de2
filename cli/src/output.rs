//! What the CLI prints: `Output` writes one JSON object per line with `--json`, readable
//! lines without; a closed stdout stops quietly. Each command family prints its results
//! through its own `impl Output` block beside its command (`commands/`).

use std::io::Write;
use std::time::{Duration, SystemTime};

use crate::StdoutClosed;

/// Writes to stdout; a closed stdout becomes `StdoutClosed`.
pub(crate) fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(error) => Err(anyhow::Error::new(error).context("writing to stdout")),
    }
}

pub(crate) struct Output {
    pub(crate) json: bool,
}

/// Text as it is when it has no spaces, quotes or control characters; quoted otherwise (so
/// that a line of readable output stays one line with its fields apart).
pub(crate) fn readable(text: &str) -> String {
    let plain = !text.is_empty()
        && !text
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\\');
    if plain {
        text.to_string()
    } else {
        format!("{text:?}")
    }
}

/// Unix milliseconds as RFC 3339 (UTC), for humans.
pub(crate) fn unix_ms_text(unix_ms: u64) -> String {
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(unix_ms);
    humantime::format_rfc3339_millis(at).to_string()
}

impl Output {
    pub(crate) fn line(&self, value: &serde_json::Value) -> anyhow::Result<()> {
        write_stdout(format!("{value}\n").as_bytes())
    }

    pub(crate) fn text(&self, text: &str) -> anyhow::Result<()> {
        write_stdout(format!("{text}\n").as_bytes())
    }
}
