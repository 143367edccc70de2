//! The overlays family (decision 0012): PATCH_TURN, REDACT_TURN, PURGE_BLOB. Reads in an overlay
//! view are `reads.rs`'s.

use ctxstore_engine::TurnId;
use ctxstore_protocol::overlays;
use ctxstore_protocol::{OverlaysRequest, OverlaysResponse, Response};

use super::{Scoped, engine_error};

impl Scoped<'_> {
    pub(super) async fn answer_overlays(
        &self,
        request: OverlaysRequest,
    ) -> Result<OverlaysResponse, Response> {
        // Each message's function returns its own answer: the variant that wraps it is the
        // only one that type-checks.
        match request {
            OverlaysRequest::PatchTurn(patch) => {
                self.patch_turn(patch).await.map(OverlaysResponse::Patched)
            }
            OverlaysRequest::RedactTurn(redact) => self
                .redact_turn(redact)
                .await
                .map(OverlaysResponse::Redacted),
            OverlaysRequest::PurgeBlob(purge) => {
                self.purge_blob(purge).await.map(OverlaysResponse::Purged)
            }
        }
    }

    /// PATCH_TURN: the turn reads with the new payload from now on.
    async fn patch_turn(&self, patch: overlays::PatchTurn) -> Result<overlays::Patched, Response> {
        let overlays::PatchTurn { turn_id, payload } = patch;
        let patched = self.engine.patch_turn(TurnId(turn_id), payload.clone());
        let patched = patched.await.map_err(engine_error)?;
        // Like an append's: new bytes this core hashed, likely read again soon.
        self.payload_cache
            .borrow_mut()
            .insert(self.engine.cache_key(patched.turn.payload_hash), &payload);
        Ok(overlays::Patched {
            turn_id,
            overlay_seq: patched.overlay_seq,
            payload_hash: patched.turn.payload_hash,
            payload_len: patched.turn.payload_len,
        })
    }

    /// REDACT_TURN: the turn reads without a payload in every view from now on.
    ///
    /// Nothing to take out of the payload caches: reads look at the overlays (a redacted turn
    /// has no payload to look up) and at the purged blobs before any cache (the engine's
    /// `read.rs`).
    async fn redact_turn(
        &self,
        redact: overlays::RedactTurn,
    ) -> Result<overlays::Redacted, Response> {
        let overlays::RedactTurn { turn_id } = redact;
        let redacted = self.engine.redact_turn(TurnId(turn_id)).await;
        let redacted = redacted.map_err(engine_error)?;
        Ok(overlays::Redacted {
            turn_id,
            overlay_seq: redacted.overlay_seq,
        })
    }

    /// PURGE_BLOB: every turn naming the blob redacted; reads by its hash answer NOT_FOUND.
    async fn purge_blob(&self, purge: overlays::PurgeBlob) -> Result<overlays::Purged, Response> {
        // Nothing to take out of the payload caches either (see `redact_turn`).
        let purged = self.engine.purge_blob(purge.hash).await;
        let purged = purged.map_err(engine_error)?;
        Ok(overlays::Purged {
            payload_hash: purged.payload_hash,
            turns_redacted: purged.turns_redacted,
            overlay_seq: purged.overlay_seq,
        })
    }
}
