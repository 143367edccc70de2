//! `append`: APPEND_TURN when no option needs more (any server), else the version-2 append
//! with `--parent/--root/--key/--label/--link/--summary`.

use anyhow::Context;
use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{NewTurn, Parent, Turn};
use serde_json::json;

use crate::args::Command;
use crate::output::Output;

/// `append`: APPEND_TURN when no option needs more (any server), else the version-2 append
/// with the turn's parent, key, labels, links and summary flag. `payload` is what was read
/// before connecting.
pub(crate) fn append(
    client: &Client,
    out: &Output,
    command: &Command,
    payload: Option<Vec<u8>>,
) -> anyhow::Result<()> {
    let Command::Append {
        context,
        type_tag,
        codec,
        expect_head,
        parent,
        root,
        key,
        labels,
        links,
        summary,
        index,
        vector,
        ..
    } = command
    else {
        anyhow::bail!("append: the command is not an append");
    };
    let codec = *codec;
    let payload = Bytes::from(payload.unwrap_or_default());
    let plain = parent.is_none()
        && !root
        && key.is_none()
        && labels.is_empty()
        && links.is_empty()
        && !summary
        && index.is_none();
    if plain {
        // APPEND_TURN: what version 1 has, so a plain append works with any server.
        let appended = client.append(context.clone(), *expect_head, *type_tag, codec, payload)?;
        return out.appended(&appended.turn, appended.deduped, false);
    }
    let mut turn = NewTurn::bytes(payload)
        .type_tag(*type_tag)
        .codec(codec)
        .parent(match (parent, root) {
            (Some(parent), _) => Parent::Turn(*parent),
            (None, true) => Parent::Root,
            (None, false) => Parent::Head,
        })
        .summary(*summary);
    turn.key = key.clone().map(Bytes::from);
    turn.labels = labels.clone();
    turn.links = links.clone();
    if let Some(index) = index {
        let vectors: Vec<Vec<f32>> = vector.iter().map(|vector| vector.0.clone()).collect();
        let dims = vectors.first().map_or(0, Vec::len);
        let dims = u16::try_from(dims).context("a vector has at most 4096 components")?;
        let mut appended = client.append_turns_vectors(
            context.clone(),
            *expect_head,
            index,
            dims,
            vec![(turn, vectors)],
        )?;
        let Some(appended) = appended.pop() else {
            anyhow::bail!("append: the server answered no turn");
        };
        return out.appended(&appended.turn.turn, appended.deduped, appended.existing);
    }
    let appended = client.append_turn(context.clone(), *expect_head, turn)?;
    out.appended(&appended.turn.turn, appended.deduped, appended.existing)
}

impl Output {
    /// What `append` prints: the turn appended (or, with `existing`, the turn that had the
    /// key).
    pub(crate) fn appended(
        &self,
        turn: &Turn,
        deduped: bool,
        existing: bool,
    ) -> anyhow::Result<()> {
        if self.json {
            return self.line(&json!({
                "turn_id": turn.turn_id,
                "parent_turn_id": turn.parent_turn_id,
                "depth": turn.depth,
                "payload_hash": turn.payload_hash.to_hex(),
                "deduped": deduped,
                "existing": existing,
            }));
        }
        let mut text = format!(
            "turn {} (parent {}, depth {}) payload {}",
            turn.turn_id, turn.parent_turn_id, turn.depth, turn.payload_hash
        );
        if existing {
            text.push_str(" (the key was there: nothing written)");
        } else if deduped {
            text.push_str(" (already stored)");
        }
        self.text(&text)
    }
}
