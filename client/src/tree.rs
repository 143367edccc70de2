//! A context as a tree (issue 37; `ctxstore tree CTX`): every turn the context owns, on every
//! branch, with the heads that point into it, drawn with box-drawing characters or written as
//! JSON (`nodes`, `edges`, `heads`).
//!
//! What it costs: the context's turn log without payloads (one TURN_LOG per `LOG_PAGE_MAX`
//! turns), one CTX_SHOW, a listing of the store's contexts (to find the other contexts whose
//! head is one of the tree's turns: the protocol has no index from a turn to the heads on it),
//! then one GET_BLOB per distinct payload of the turns that are *shown* and no larger than
//! `TreeOptions::preview_fetch_bytes_max`. A 100,000-turn context drawn with `--depth 3`
//! reads three levels' payloads, not 100,000.
//!
//! Layout: oldest at the top; a turn's only child goes straight below it (a chain of 100,000
//! turns does not drift right); at a branch point every child but the last opens a branch
//! with `├─` and the last continues with `└─`. Built without recursion, so no depth of tree
//! can exhaust the stack.

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::ContextRef;
use ctxstore_vocab::payloads::{
    CODEC_TEXT, PayloadKind, codec_name, human_bytes, one_line_preview,
};

use crate::client::{Client, LOG_PAGE_MAX};
use crate::error::ClientError;
use crate::types::{BlobHash, ContextInfo, ContextQuery, LogCursor, TurnInfo};

/// What part of the tree to show, and how much of each payload to read.
#[derive(Clone, Debug)]
pub struct TreeOptions {
    /// Show only this many levels from the top (`--depth N`; `None`: all).
    pub depth_max: Option<u32>,
    /// Show only this turn and the turns after it (`--since TURN`): its subtree.
    pub since: Option<u64>,
    /// Characters of a payload's one-line preview (60).
    pub preview_chars_max: usize,
    /// Payloads larger than this are not read for a preview: their codec and size are shown
    /// instead (64 KiB).
    pub preview_fetch_bytes_max: u32,
    /// GET_BLOB requests in flight at once while previews are read (32).
    pub previews_in_flight_max: usize,
}

impl Default for TreeOptions {
    fn default() -> Self {
        TreeOptions {
            depth_max: None,
            since: None,
            preview_chars_max: 60,
            preview_fetch_bytes_max: 64 * 1024,
            previews_in_flight_max: 32,
        }
    }
}

/// One shown turn.
#[derive(Clone, Debug)]
pub struct TreeNode {
    /// The turn with its key, labels and links (no payload).
    pub info: TurnInfo,
    /// Its children in the whole tree (shown or not), oldest first.
    pub children: Vec<u64>,
    /// The payload's kind (`json`, `text`, `image`, `binary`) when it was read.
    pub payload_kind: Option<&'static str>,
    /// One line: the payload's start, or its kind, codec and size.
    pub preview: String,
    /// Turns below it that `depth_max` hides.
    pub hidden_below: usize,
}

/// What fetching the tree cost, for callers that watch it (and the tests that bound it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeCost {
    /// TURN_LOG pages read.
    pub log_pages: usize,
    /// Payloads read for previews (distinct hashes).
    pub payloads_read: usize,
}

/// A context's tree: the shown turns in print order, and the heads pointing into it.
#[derive(Clone, Debug)]
pub struct Tree {
    pub context: ContextInfo,
    /// Turns the context owns (its whole tree, shown or not).
    pub turns_total: usize,
    /// The shown turns, in print order (each after its parent; siblings oldest first).
    pub nodes: Vec<TreeNode>,
    /// Contexts whose head is one of the tree's turns, this context first when it has one.
    pub heads: Vec<ContextInfo>,
    pub cost: TreeCost,
}

/// Reads `context`'s tree through `client`: its turn log (no payloads), the contexts whose
/// heads point into it, and previews of the shown turns only.
pub async fn fetch(
    client: &Client,
    context: impl Into<ContextRef>,
    options: &TreeOptions,
) -> Result<Tree, ClientError> {
    let context = context.into();
    let info = client.context_info(context.clone()).await?;
    let mut cost = TreeCost::default();
    // In an overlay view (the caller's, else the latest: `as_of(0)`), so that each turn
    // carries its redaction and patch marks.
    let viewed = match client.view() {
        Some(_) => client.clone(),
        None => client.as_of(0),
    };
    let turns = turn_log(&viewed, info.context_id, &mut cost).await?;
    let turns_total = turns.len();
    let mut shape = Shape::new(turns);
    let top = match options.since {
        Some(since) if !shape.turns.contains_key(&since) => {
            return Err(ClientError::InvalidArgument(format!(
                "--since {since}: turn {since} is not in the tree of context {} (see `ctxstore \
                 log {}` for its turns)",
                info.context_id, info.context_id
            )));
        }
        Some(since) => vec![since],
        None => shape.roots(),
    };
    let shown = shape.shown(&top, options.depth_max);
    let previews = read_previews(client, &shape, &shown, options, &mut cost).await?;
    let heads = heads_into(client, &info, &shape).await?;
    let nodes = shown
        .into_iter()
        .map(|(turn_id, hidden_below)| {
            let (info, children) = shape.take(turn_id);
            let (payload_kind, preview) = previews
                .get(&info.turn.payload_hash)
                .map(|(kind, line)| (Some(*kind), line.clone()))
                .unwrap_or_else(|| (None, unread_preview(&info)));
            TreeNode {
                info,
                children,
                payload_kind,
                preview,
                hidden_below,
            }
        })
        .collect();
    Ok(Tree {
        context: info,
        turns_total,
        nodes,
        heads,
        cost,
    })
}

/// Every turn the context owns (its turn log, page after page), without payloads.
async fn turn_log(
    client: &Client,
    context_id: u64,
    cost: &mut TreeCost,
) -> Result<Vec<TurnInfo>, ClientError> {
    let mut turns = Vec::new();
    let mut cursor: Option<LogCursor> = None;
    loop {
        let page = client
            .turn_log(context_id, &[], cursor, LOG_PAGE_MAX, false)
            .await?;
        cost.log_pages += 1;
        turns.extend(page.turns);
        match page.next_cursor {
            None => return Ok(turns),
            Some(next) if Some(next) == cursor => {
                return Err(ClientError::Protocol(format!(
                    "TURN_LOG answered the same cursor again ({next:?})"
                )));
            }
            Some(next) => cursor = Some(next),
        }
    }
}

/// The tree's shape: turns by id and each turn's children, oldest first.
struct Shape {
    turns: HashMap<u64, TurnInfo>,
    children: HashMap<u64, Vec<u64>>,
}

impl Shape {
    fn new(turns: Vec<TurnInfo>) -> Shape {
        let turns: HashMap<u64, TurnInfo> = turns
            .into_iter()
            .map(|info| (info.turn.turn_id, info))
            .collect();
        let mut children: HashMap<u64, Vec<u64>> = HashMap::new();
        for info in turns.values() {
            // A parent is older than its child: the DAG rule the store keeps.
            assert!(
                info.turn.parent_turn_id < info.turn.turn_id,
                "turn {} is older than its parent {}",
                info.turn.turn_id,
                info.turn.parent_turn_id
            );
            if turns.contains_key(&info.turn.parent_turn_id) {
                children
                    .entry(info.turn.parent_turn_id)
                    .or_default()
                    .push(info.turn.turn_id);
            }
        }
        for list in children.values_mut() {
            list.sort_unstable();
        }
        Shape { turns, children }
    }

    /// Turns whose parent is not in the tree (roots, or the oldest turns left by a prune),
    /// oldest first.
    fn roots(&self) -> Vec<u64> {
        let mut roots: Vec<u64> = self
            .turns
            .values()
            .filter(|info| !self.turns.contains_key(&info.turn.parent_turn_id))
            .map(|info| info.turn.turn_id)
            .collect();
        roots.sort_unstable();
        roots
    }

    fn children_of(&self, turn_id: u64) -> &[u64] {
        self.children.get(&turn_id).map_or(&[], Vec::as_slice)
    }

    /// The shown turns in print order (pre-order, children oldest first), each with how many
    /// turns below it `depth_max` hides. Iterative: trees may be 100,000 deep.
    fn shown(&self, top: &[u64], depth_max: Option<u32>) -> Vec<(u64, usize)> {
        let mut shown = Vec::new();
        let mut stack: Vec<(u64, u32)> = top.iter().rev().map(|&turn_id| (turn_id, 1)).collect();
        while let Some((turn_id, level)) = stack.pop() {
            let children = self.children_of(turn_id);
            if depth_max.is_some_and(|max| level >= max) {
                shown.push((turn_id, self.descendants(children)));
                continue;
            }
            shown.push((turn_id, 0));
            stack.extend(children.iter().rev().map(|&child| (child, level + 1)));
        }
        shown
    }

    /// How many turns lie at or below `children`.
    fn descendants(&self, children: &[u64]) -> usize {
        let mut count = 0;
        let mut stack: Vec<u64> = children.to_vec();
        while let Some(turn_id) = stack.pop() {
            count += 1;
            stack.extend_from_slice(self.children_of(turn_id));
        }
        count
    }

    /// A shown turn and its children, moved out (each turn is shown once).
    fn take(&mut self, turn_id: u64) -> (TurnInfo, Vec<u64>) {
        let info = self
            .turns
            .remove(&turn_id)
            .unwrap_or_else(|| panic!("turn {turn_id} shown twice or not in the tree"));
        (info, self.children.remove(&turn_id).unwrap_or_default())
    }
}

/// Reads the payloads of the shown turns that are small enough (each distinct hash once,
/// `previews_in_flight_max` at a time) and makes their previews: hash → (kind, line).
async fn read_previews(
    client: &Client,
    shape: &Shape,
    shown: &[(u64, usize)],
    options: &TreeOptions,
    cost: &mut TreeCost,
) -> Result<HashMap<BlobHash, (&'static str, String)>, ClientError> {
    let mut wanted: Vec<(BlobHash, u32)> = Vec::new();
    let mut seen = HashSet::new();
    for (turn_id, _) in shown {
        let turn = &shape.turns[turn_id].turn;
        let readable = !turn.redacted
            && turn.payload_len > 0
            && turn.payload_len <= options.preview_fetch_bytes_max;
        if readable && seen.insert(turn.payload_hash) {
            wanted.push((turn.payload_hash, turn.codec));
        }
    }
    let mut previews = HashMap::with_capacity(wanted.len());
    let mut in_flight = tokio::task::JoinSet::new();
    let mut queue = wanted.into_iter();
    loop {
        while in_flight.len() < options.previews_in_flight_max.max(1) {
            let Some((hash, codec)) = queue.next() else {
                break;
            };
            let client = client.clone();
            in_flight.spawn(async move { (hash, codec, client.blob(hash).await) });
        }
        let Some(joined) = in_flight.join_next().await else {
            break;
        };
        let (hash, codec, payload) = joined
            .map_err(|error| ClientError::Protocol(format!("a preview read failed: {error}")))?;
        let payload: Bytes = match payload {
            Ok(payload) => payload,
            // Purged or collected since the log was read: shown without a preview.
            Err(error) if error.code() == Some(ctxstore_protocol::ErrorCode::NotFound) => continue,
            Err(error) => return Err(error),
        };
        cost.payloads_read += 1;
        let kind = PayloadKind::of(codec, &payload);
        let line = one_line_preview(
            codec,
            &payload,
            payload.len() as u64,
            options.preview_chars_max,
        );
        previews.insert(hash, (kind.name(), line));
    }
    Ok(previews)
}

/// What a turn whose payload was not read shows.
fn unread_preview(info: &TurnInfo) -> String {
    let turn = &info.turn;
    if turn.redacted {
        return "(redacted)".into();
    }
    if turn.payload_len == 0 {
        return "(empty)".into();
    }
    format!(
        "{}, {} (not previewed)",
        codec_name(turn.codec),
        human_bytes(u64::from(turn.payload_len))
    )
}

/// `context` and every other context whose head is a turn of the tree.
async fn heads_into(
    client: &Client,
    context: &ContextInfo,
    shape: &Shape,
) -> Result<Vec<ContextInfo>, ClientError> {
    let in_tree = |turn_id: u64| shape.turns.contains_key(&turn_id);
    let mut heads: Vec<ContextInfo> = Vec::new();
    if in_tree(context.head_turn_id) {
        heads.push(context.clone());
    }
    let everyone = client.list_all_contexts(&ContextQuery::new(), None).await?;
    heads.extend(
        everyone
            .into_iter()
            .filter(|other| other.context_id != context.context_id && in_tree(other.head_turn_id)),
    );
    Ok(heads)
}

/// A key or label as one safe line (control characters escaped).
fn safe(bytes: &[u8]) -> String {
    one_line_preview(CODEC_TEXT, bytes, bytes.len() as u64, 64)
}

fn context_name(context: &ContextInfo) -> String {
    match &context.name {
        Some(name) => format!("{} @{}", context.context_id, safe(name.as_bytes())),
        None => context.context_id.to_string(),
    }
}

impl Tree {
    /// The tree as text, one turn per line, with box-drawing characters.
    pub fn render_text(&self) -> String {
        let mut heads_at: BTreeMap<u64, Vec<&ContextInfo>> = BTreeMap::new();
        for head in &self.heads {
            heads_at.entry(head.head_turn_id).or_default().push(head);
        }
        let mut out = format!(
            "context {} · head {} · {} turns{}\n",
            context_name(&self.context),
            self.context.head_turn_id,
            self.turns_total,
            if self.nodes.len() < self.turns_total {
                format!(" ({} shown)", self.nodes.len())
            } else {
                String::new()
            }
        );
        if self.nodes.is_empty() {
            out.push_str("(no turns)\n");
            return out;
        }
        let position: HashMap<u64, usize> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(index, node)| (node.info.turn.turn_id, index))
            .collect();
        let shown_children = |node: &TreeNode| -> Vec<usize> {
            node.children
                .iter()
                .filter_map(|child| position.get(child).copied())
                .collect()
        };
        // The tops: shown turns whose parent is not shown.
        let tops: Vec<usize> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, node)| !position.contains_key(&node.info.turn.parent_turn_id))
            .map(|(index, _)| index)
            .collect();
        // (node, the characters before its marker, the prefix of the lines below it)
        let mut stack: Vec<(usize, String, String)> = Vec::new();
        push_children(&mut stack, &tops, "");
        while let Some((index, lead, below)) = stack.pop() {
            let node = &self.nodes[index];
            out.push_str(&lead);
            out.push_str(&self.node_line(node, heads_at.get(&node.info.turn.turn_id)));
            out.push('\n');
            push_children(&mut stack, &shown_children(node), &below);
        }
        out
    }

    fn node_line(&self, node: &TreeNode, heads: Option<&Vec<&ContextInfo>>) -> String {
        let turn = &node.info.turn;
        let mut line = format!("● {}", turn.turn_id);
        if let Some(key) = &node.info.key {
            line.push_str(&format!("  key={}", safe(key)));
        }
        if !node.info.labels.is_empty() {
            let labels: Vec<String> = node
                .info
                .labels
                .iter()
                .map(|(key, value)| format!("{}={}", safe(key.as_bytes()), safe(value.as_bytes())))
                .collect();
            line.push_str(&format!("  {}", labels.join(" ")));
        }
        if !node.info.links.is_empty() {
            let links: Vec<String> = node.info.links.iter().map(u64::to_string).collect();
            line.push_str(&format!("  → {}", links.join(",")));
        }
        if turn.summary() {
            line.push_str("  [summary]");
        }
        if turn.redacted {
            line.push_str("  [redacted]");
        } else if turn.overlay_seq > 0 {
            line.push_str(&format!("  [patched @{}]", turn.overlay_seq));
        }
        for head in heads.into_iter().flatten() {
            if head.context_id == self.context.context_id {
                line.push_str("  ◀ head");
            } else {
                line.push_str(&format!("  ◀ head of {}", context_name(head)));
            }
        }
        line.push_str("  ");
        line.push_str(&node.preview);
        if node.hidden_below > 0 {
            line.push_str(&format!("  (+{} below)", node.hidden_below));
        }
        line
    }

    /// The tree as one JSON object: `context`, `nodes` (print order, each with `turn_id` and
    /// `parent_turn_id`), `edges` (`parent_turn_id` → `turn_id`, between shown turns),
    /// `heads`, `turns_total`.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let shown: HashSet<u64> = self
            .nodes
            .iter()
            .map(|node| node.info.turn.turn_id)
            .collect();
        let context_json = |context: &ContextInfo| {
            json!({
                "context_id": context.context_id,
                "name": context.name,
                "head_turn_id": context.head_turn_id,
                "head_depth": context.head_depth,
            })
        };
        let nodes: Vec<serde_json::Value> = self
            .nodes
            .iter()
            .map(|node| {
                let turn = &node.info.turn;
                let key = node
                    .info
                    .key
                    .as_ref()
                    .map(|key| String::from_utf8_lossy(key).into_owned());
                json!({
                    "turn_id": turn.turn_id,
                    "parent_turn_id": turn.parent_turn_id,
                    "context_id": turn.context_id,
                    "depth": turn.depth,
                    "type_tag": turn.type_tag,
                    "codec": codec_name(turn.codec),
                    "payload_hash": turn.payload_hash.to_string(),
                    "payload_len": turn.payload_len,
                    "created_at_unix_ms": turn.created_at_unix_ms,
                    "key": key,
                    "labels": node.info.labels,
                    "links": node.info.links,
                    "summary": turn.summary(),
                    "redacted": turn.redacted,
                    "overlay_seq": turn.overlay_seq,
                    "payload_kind": node.payload_kind,
                    "preview": node.preview,
                    "children": node.children,
                    "hidden_below": node.hidden_below,
                })
            })
            .collect();
        let edges: Vec<serde_json::Value> = self
            .nodes
            .iter()
            .filter(|node| shown.contains(&node.info.turn.parent_turn_id))
            .map(|node| {
                json!({
                    "parent_turn_id": node.info.turn.parent_turn_id,
                    "turn_id": node.info.turn.turn_id,
                })
            })
            .collect();
        json!({
            "context": context_json(&self.context),
            "turns_total": self.turns_total,
            "nodes": nodes,
            "edges": edges,
            "heads": self.heads.iter().map(context_json).collect::<Vec<_>>(),
        })
    }
}

/// Pushes `children` (oldest first) so that they pop oldest first: an only child straight
/// below its parent, several as branches.
fn push_children(stack: &mut Vec<(usize, String, String)>, children: &[usize], below: &str) {
    match children {
        [] => {}
        [only] => stack.push((*only, below.to_string(), below.to_string())),
        [branches @ .., last] => {
            stack.push((*last, format!("{below}└─ "), format!("{below}   ")));
            for branch in branches.iter().rev() {
                stack.push((*branch, format!("{below}├─ "), format!("{below}│  ")));
            }
        }
    }
}

#[blocking_twin(crate::blocking::Client)]
impl Client {
    /// A context as a tree: its turns, the forks and clones that share them, names, tags and
    /// overlays, bounded by `options` (see [`fetch`]; `ctxstore tree`).
    pub async fn tree(
        &self,
        context: impl Into<ContextRef>,
        options: &TreeOptions,
    ) -> Result<Tree, ClientError> {
        fetch(self, context, options).await
    }
}
