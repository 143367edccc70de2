//! Reads of turns: `turn` (by id, or `CTX --key K`), `last`, `page`, `range`, `replay`, `log`,
//! `find`, `window`; turn lines with `key, labels, links, summary, context_id` and, in the
//! overlay view every read asks for, `redacted, overlay_seq` (`--as-of SEQ`). READ_PAGE and
//! the extras look-ups on a version-2 server, the version-1 reads on a version-1 one.

use std::collections::BTreeMap;

use base64::prelude::{BASE64_STANDARD, Engine as _};
use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{
    ContextRef, FIND_PAGE_MAX, LOG_PAGE_MAX, LogCursor, PageKind, Turn, TurnInfo, codec_name,
    is_indexed_label,
};
use serde_json::json;

use crate::args::Command;
use crate::exits::NoSuchKey;
use crate::exits::Usage;
use crate::input::TurnTarget;
use crate::output::Output;
use crate::output::readable;

/// Reads of turns: `turn`, `last`, `page`, `range`, `replay`, `log`, `find`, `window`.
/// `turn_target` is what `turn`'s argument parsed to before connecting.
pub(crate) fn read_turns(
    client: &Client,
    out: &Output,
    command: &Command,
    turn_target: Option<TurnTarget>,
) -> anyhow::Result<()> {
    // Version 2 reads carry each turn's key, labels and links; a version-1 server has none.
    let v2 = client.protocol_version() >= 2;
    match command {
        Command::Turn { .. } => turn(client, out, turn_target, v2),
        Command::Last {
            context,
            n,
            payloads,
        } => out.page(client, context, PageKind::Last, *n, *payloads),
        Command::Page {
            context,
            before,
            n,
            payloads,
        } => {
            let kind = PageKind::Before {
                before_turn_id: *before,
            };
            out.page(client, context, kind, *n, *payloads)
        }
        Command::Range {
            context,
            from_depth,
            n,
            payloads,
        } => {
            let kind = PageKind::Range {
                from_depth: *from_depth,
            };
            out.page(client, context, kind, *n, *payloads)
        }
        Command::Replay { turn, payloads } if v2 => {
            out.turns(&client.replay_info(*turn, *payloads)?)
        }
        Command::Replay { turn, payloads } => out.turns(
            &client
                .replay(*turn, *payloads)?
                .into_iter()
                .map(plain_info)
                .collect::<Vec<_>>(),
        ),
        Command::Log {
            context,
            labels,
            n,
            payloads,
        } => log(client, out, context, labels, *n, *payloads),
        Command::Find { labels, n } => find(client, out, labels, *n),
        Command::Window {
            context,
            n,
            payloads,
        } => {
            let count_max = n.map(|n| n as usize);
            out.turns(&client.window_all(context.clone(), count_max, *payloads)?)
        }
        _ => anyhow::bail!("read_turns: the command reads no turns"),
    }
}

/// `turn TURN` (with its extras from a version-2 server) or `turn CTX --key K`.
pub(crate) fn turn(
    client: &Client,
    out: &Output,
    target: Option<TurnTarget>,
    v2: bool,
) -> anyhow::Result<()> {
    match target {
        Some(TurnTarget::Key(context, key)) => {
            match client.turn_by_key(context.clone(), Bytes::from(key.clone()))? {
                Some(info) => out.turns(&[info]),
                None => Err(NoSuchKey {
                    context,
                    what: "turn with the key",
                    key,
                }
                .into()),
            }
        }
        Some(TurnTarget::Id(turn)) if v2 => out.turns(&[client.turn_info(turn)?]),
        Some(TurnTarget::Id(turn)) => out.turns(&[plain_info(client.turn(turn)?)]),
        None => anyhow::bail!("turn: no target was parsed"),
    }
}

/// A version-1 read's turn with the extras it has: none (a server that speaks only version 1
/// cannot store keys, labels or links).
pub(crate) fn plain_info(turn: Turn) -> TurnInfo {
    TurnInfo {
        turn,
        key: None,
        labels: BTreeMap::new(),
        links: Vec::new(),
    }
}

/// `log`: the context's turn log, page by page, printing as it goes (a long log starts at once
/// and stops quietly when the reader does).
pub(crate) fn log(
    client: &Client,
    out: &Output,
    context: &ContextRef,
    labels: &[(String, String)],
    n: Option<u32>,
    payloads: bool,
) -> anyhow::Result<()> {
    let mut printed = 0usize;
    let mut cursor: Option<LogCursor> = None;
    loop {
        let left = n.map_or(usize::MAX, |n| (n as usize).saturating_sub(printed));
        let limit = u32::try_from(left).map_or(LOG_PAGE_MAX, |left| left.min(LOG_PAGE_MAX));
        let page = client.turn_log(context.clone(), labels, cursor, limit, payloads)?;
        let shown = page.turns.len().min(left);
        out.turns(&page.turns[..shown])?;
        printed += shown;
        if n.is_some_and(|n| printed >= n as usize) {
            return Ok(());
        }
        match page.next_cursor {
            None => return Ok(()),
            Some(next) if Some(next) == cursor => {
                anyhow::bail!("the server answered the same turn-log cursor twice")
            }
            Some(next) => cursor = Some(next),
        }
    }
}

/// `find`: the first indexed label through the server's index, the others checked here; page
/// by page, printing as it goes.
pub(crate) fn find(
    client: &Client,
    out: &Output,
    labels: &[(String, String)],
    n: Option<u32>,
) -> anyhow::Result<()> {
    // The first indexed label; else the first, which the server refuses saying which keys are.
    let Some((key, value)) = labels
        .iter()
        .find(|(key, _)| is_indexed_label(key))
        .or(labels.first())
    else {
        return Err(Usage("find needs at least one --label KEY=VALUE".into()).into());
    };
    let mut printed = 0usize;
    let mut before = 0u64;
    loop {
        let left = n.map_or(usize::MAX, |n| (n as usize).saturating_sub(printed));
        if left == 0 {
            return Ok(());
        }
        let limit = match labels.len() {
            // Other labels are checked here: how many of a page match is unknown.
            1 => u32::try_from(left).map_or(FIND_PAGE_MAX, |left| left.min(FIND_PAGE_MAX)),
            _ => FIND_PAGE_MAX,
        };
        let page = client.find_turns(key.clone(), value.clone(), before, limit)?;
        let matching: Vec<TurnInfo> = page
            .turns
            .into_iter()
            .filter(|info| labels.iter().all(|(key, value)| info.has_label(key, value)))
            .take(left)
            .collect();
        out.turns(&matching)?;
        printed += matching.len();
        if page.next_before == 0 {
            return Ok(());
        }
        if before != 0 && page.next_before >= before {
            anyhow::bail!("the server's find cursor did not move to older turns");
        }
        before = page.next_before;
    }
}

impl Output {
    /// `last`, `page`, `range`: READ_PAGE with each turn's extras; the version-1 reads on a
    /// server that speaks only version 1.
    pub(crate) fn page(
        &self,
        client: &Client,
        context: &ContextRef,
        kind: PageKind,
        n: u32,
        payloads: bool,
    ) -> anyhow::Result<()> {
        if client.protocol_version() >= 2 {
            return self.turns(&client.read_page(context.clone(), kind, n, payloads)?.turns);
        }
        let context = context.clone();
        let page = match kind {
            PageKind::Last => client.last(context, n, payloads)?,
            PageKind::Before { before_turn_id } => {
                client.before(context, before_turn_id, n, payloads)?
            }
            PageKind::Range { from_depth } => client.range(context, from_depth, n, payloads)?,
            PageKind::Window => anyhow::bail!("a window needs protocol version 2"),
        };
        let turns: Vec<TurnInfo> = page.turns.into_iter().map(plain_info).collect();
        self.turns(&turns)
    }

    /// Turn lines, one per turn: the turn, its key, labels, links and summary flag.
    pub(crate) fn turns(&self, turns: &[TurnInfo]) -> anyhow::Result<()> {
        for info in turns {
            if self.json {
                self.line(&turn_json(info))?;
            } else {
                self.text(&turn_text(info))?;
            }
        }
        Ok(())
    }
}

/// A turn line with `--json`: the turn, its extras, its overlay state, and its payload
/// (base64) when read with `--payloads`.
fn turn_json(info: &TurnInfo) -> serde_json::Value {
    let turn = &info.turn;
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
        "key": info.key.as_ref().map(|key| String::from_utf8_lossy(key)),
        "labels": info.labels,
        "links": info.links,
        "summary": turn.summary(),
        "redacted": turn.redacted,
        "overlay_seq": turn.overlay_seq,
    });
    if let Some(object) = value.as_object_mut() {
        if let Some(key) = &info.key
            && std::str::from_utf8(key).is_err()
        {
            object.insert("key_b64".into(), json!(BASE64_STANDARD.encode(key)));
        }
        if let Some(payload) = &turn.payload {
            object.insert("payload_b64".into(), json!(BASE64_STANDARD.encode(payload)));
        }
    }
    value
}

/// A readable turn line, its payload (when read) on the next line.
fn turn_text(info: &TurnInfo) -> String {
    let turn = &info.turn;
    let mut text = format!(
        "turn {} parent {} depth {} context {} type {} codec {} {} bytes {}",
        turn.turn_id,
        turn.parent_turn_id,
        turn.depth,
        turn.context_id,
        turn.type_tag,
        codec_name(turn.codec),
        turn.payload_len,
        turn.payload_hash
    );
    if let Some(key) = &info.key {
        text.push_str(&format!(" key {}", readable(&String::from_utf8_lossy(key))));
    }
    if !info.labels.is_empty() {
        let labels: Vec<String> = info
            .labels
            .iter()
            .map(|(key, value)| format!("{}={}", readable(key), readable(value)))
            .collect();
        text.push_str(&format!(" labels {}", labels.join(" ")));
    }
    if !info.links.is_empty() {
        let links: Vec<String> = info.links.iter().map(u64::to_string).collect();
        text.push_str(&format!(" links {}", links.join(",")));
    }
    if turn.summary() {
        text.push_str(" summary");
    }
    if turn.redacted {
        text.push_str(&format!(" redacted (overlay {})", turn.overlay_seq));
    } else if turn.overlay_seq > 0 {
        text.push_str(&format!(" patched (overlay {})", turn.overlay_seq));
    }
    if let Some(payload) = &turn.payload {
        text.push_str("\n  ");
        text.push_str(&String::from_utf8_lossy(payload));
    }
    text
}
