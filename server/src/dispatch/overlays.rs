//! The overlays family (decision 0012): PATCH_TURN, REDACT_TURN, PURGE_BLOB. Reads in an overlay
//! view are `reads.rs`'s.

use ctxstore_engine::TurnId;
use ctxstore_protocol::overlays;
use ctxstore_protocol::{OverlaysRequest, OverlaysResponse, Response};

use super::{Dispatcher, engine_error};

impl Dispatcher {
    pub(super) async fn answer_overlays(
        &self,
        request: OverlaysRequest,
    ) -> Result<OverlaysResponse, Response> {
        match request {
            OverlaysRequest::PatchTurn(overlays::PatchTurn { turn_id, payload }) => {
                let patched = self.engine.patch_turn(TurnId(turn_id), payload.clone());
                let patched = patched.await.map_err(engine_error)?;
                // Like an append's: new bytes this core hashed, likely read again soon.
                self.payload_cache
                    .borrow_mut()
                    .insert(patched.turn.payload_hash, &payload);
                Ok(OverlaysResponse::Patched(overlays::Patched {
                    turn_id,
                    overlay_seq: patched.overlay_seq,
                    payload_hash: patched.turn.payload_hash,
                    payload_len: patched.turn.payload_len,
                }))
            }
            // Nothing to take out of the payload caches: reads look at the overlays (a
            // redacted turn has no payload to look up) and at the purged blobs before any
            // cache (the engine's `read.rs`).
            OverlaysRequest::RedactTurn(overlays::RedactTurn { turn_id }) => {
                let redacted = self.engine.redact_turn(TurnId(turn_id)).await;
                let redacted = redacted.map_err(engine_error)?;
                Ok(OverlaysResponse::Redacted(overlays::Redacted {
                    turn_id,
                    overlay_seq: redacted.overlay_seq,
                }))
            }
            OverlaysRequest::PurgeBlob(overlays::PurgeBlob { hash }) => {
                let purged = self.engine.purge_blob(hash).await;
                let purged = purged.map_err(engine_error)?;
                Ok(OverlaysResponse::Purged(overlays::Purged {
                    payload_hash: purged.payload_hash,
                    turns_redacted: purged.turns_redacted,
                    overlay_seq: purged.overlay_seq,
                }))
            }
        }
    }
}
