//! The overlays family's calls (protocol version 2, decision 0012): patch, redact, purge, each
//! answer checked against what was asked. Reads in an overlay view are `reads.rs`'s.

use bytes::Bytes;
use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::{MessageType, OverlaysRequest, OverlaysResponse};

use crate::client::{Client, unexpected};
use crate::error::ClientError;
use crate::types::{BlobHash, Patched, Purged, Redacted};

#[blocking_twin(crate::blocking::Client)]
impl Client {
    /// Gives a turn a new payload (PATCH_TURN, protocol version 2): reads show it from now
    /// on; reads in an older view (`as_of`) see the payload it had then. The turn keeps its
    /// id, parent, depth, key, labels and links. `ErrorCode::NotFound` for no such turn,
    /// `ErrorCode::InvalidArgument` for a redacted one.
    pub async fn patch_turn(
        &self,
        turn: u64,
        payload: impl Into<Bytes>,
    ) -> Result<Patched, ClientError> {
        let payload = payload.into();
        let hash = BlobHash::of(&payload);
        let len = payload.len();
        let request = OverlaysRequest::PatchTurn {
            turn_id: turn,
            payload,
        };
        match self.call(request).await? {
            OverlaysResponse::Patched {
                turn_id,
                overlay_seq,
                payload_hash,
                payload_len,
            } if turn_id == turn && payload_hash.0 == hash.0 && payload_len as usize == len => {
                Ok(Patched {
                    turn_id,
                    overlay_seq,
                    payload_hash: hash,
                    payload_len,
                })
            }
            other => Err(unexpected(MessageType::PatchTurn, other)),
        }
    }

    /// Takes a turn's payload away in every view (REDACT_TURN, protocol version 2): reads
    /// return it `redacted`, with an empty payload; its bytes leave the disk at the next
    /// garbage collection. Final: a second redaction (or a patch) is
    /// `ErrorCode::InvalidArgument`; no such turn is `ErrorCode::NotFound`.
    pub async fn redact_turn(&self, turn: u64) -> Result<Redacted, ClientError> {
        match self
            .call(OverlaysRequest::RedactTurn { turn_id: turn })
            .await?
        {
            OverlaysResponse::Redacted {
                turn_id,
                overlay_seq,
            } if turn_id == turn => Ok(Redacted {
                turn_id,
                overlay_seq,
            }),
            other => Err(unexpected(MessageType::RedactTurn, other)),
        }
    }

    /// Redacts every turn naming the blob and makes reads of it by hash `NotFound`
    /// (PURGE_BLOB, protocol version 2; the compliance path): its bytes leave the disk at the
    /// next garbage collection (`gc`). A hash the store never had is `ErrorCode::NotFound`.
    pub async fn purge_blob(&self, hash: BlobHash) -> Result<Purged, ClientError> {
        let request = OverlaysRequest::PurgeBlob { hash };
        match self.call(request).await? {
            OverlaysResponse::Purged {
                payload_hash,
                turns_redacted,
                overlay_seq,
            } if payload_hash.0 == hash.0 => Ok(Purged {
                payload_hash: hash,
                turns_redacted,
                overlay_seq,
            }),
            other => Err(unexpected(MessageType::PurgeBlob, other)),
        }
    }
}
