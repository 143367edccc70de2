//! `patch TURN [--file]`, `redact TURN`, `purge HASH [--gc]` (decision 0012).

use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{BlobHash, Patched, Purged, Redacted};
use serde_json::json;

use crate::args::Command;
use crate::gc;
use crate::output::Output;

/// Overlays (decision 0012): `patch`, `redact`, `purge [--gc]`. `payload` (`patch`'s) and
/// `purge_hash` were read before connecting.
pub(crate) fn overlays(
    client: &Client,
    out: &Output,
    command: &Command,
    payload: Option<Vec<u8>>,
    purge_hash: Option<BlobHash>,
) -> anyhow::Result<()> {
    match command {
        Command::Patch { turn, .. } => {
            let payload = Bytes::from(payload.unwrap_or_default());
            out.patched(&client.patch_turn(*turn, payload)?)
        }
        Command::Redact { turn } => out.redacted(&client.redact_turn(*turn)?),
        Command::Purge {
            gc: collect,
            gc_timeout,
            ..
        } => {
            let Some(hash) = purge_hash else {
                anyhow::bail!("purge: no hash was parsed");
            };
            out.purged(&client.purge_blob(hash)?)?;
            if *collect {
                gc(client, out, *gc_timeout)?;
            }
            Ok(())
        }
        _ => anyhow::bail!("overlays: the command changes no overlay"),
    }
}

impl Output {
    /// What `patch` prints: the turn, its overlay sequence number, the new payload's hash and length.
    pub(crate) fn patched(&self, patched: &Patched) -> anyhow::Result<()> {
        if self.json {
            return self.line(&json!({
                "turn_id": patched.turn_id,
                "overlay_seq": patched.overlay_seq,
                "payload_hash": patched.payload_hash.to_hex(),
                "payload_len": patched.payload_len,
            }));
        }
        self.text(&format!(
            "turn {} patched (overlay {}): payload {} of {} bytes",
            patched.turn_id, patched.overlay_seq, patched.payload_hash, patched.payload_len
        ))
    }

    pub(crate) fn redacted(&self, redacted: &Redacted) -> anyhow::Result<()> {
        if self.json {
            return self.line(&json!({
                "turn_id": redacted.turn_id,
                "overlay_seq": redacted.overlay_seq,
                "redacted": true,
            }));
        }
        self.text(&format!(
            "turn {} redacted (overlay {}); its bytes leave the disk at the next gc",
            redacted.turn_id, redacted.overlay_seq
        ))
    }

    pub(crate) fn purged(&self, purged: &Purged) -> anyhow::Result<()> {
        if self.json {
            return self.line(&json!({
                "payload_hash": purged.payload_hash.to_hex(),
                "turns_redacted": purged.turns_redacted,
                "overlay_seq": purged.overlay_seq,
            }));
        }
        self.text(&format!(
            "blob {} purged (overlay {}): {} turns redacted",
            purged.payload_hash, purged.overlay_seq, purged.turns_redacted
        ))
    }
}
