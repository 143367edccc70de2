//! The overlays family's calls (protocol version 2, decision 0012): patch, redact, purge, each
//! answer checked against what was asked. Reads in an overlay view are `reads.rs`'s.

use bytes::Bytes;
use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::MessageType;
use ctxstore_protocol::overlays::{PatchTurn, PurgeBlob, RedactTurn};

use crate::client::{Client, check_pair};
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
        let answer = self
            .ask(PatchTurn {
                turn_id: turn,
                payload,
            })
            .await?;
        check_pair(
            MessageType::PatchTurn,
            answer.turn_id == turn
                && answer.payload_hash.0 == hash.0
                && answer.payload_len as usize == len,
        )?;
        Ok(Patched {
            turn_id: answer.turn_id,
            overlay_seq: answer.overlay_seq,
            payload_hash: hash,
            payload_len: answer.payload_len,
        })
    }

    /// Takes a turn's payload away in every view (REDACT_TURN, protocol version 2): reads
    /// return it `redacted`, with an empty payload; its bytes leave the disk at the next
    /// garbage collection. Final: a second redaction (or a patch) is
    /// `ErrorCode::InvalidArgument`; no such turn is `ErrorCode::NotFound`.
    pub async fn redact_turn(&self, turn: u64) -> Result<Redacted, ClientError> {
        let answer = self.ask(RedactTurn { turn_id: turn }).await?;
        check_pair(MessageType::RedactTurn, answer.turn_id == turn)?;
        Ok(Redacted {
            turn_id: answer.turn_id,
            overlay_seq: answer.overlay_seq,
        })
    }

    /// Redacts every turn naming the blob and makes reads of it by hash `NotFound`
    /// (PURGE_BLOB, protocol version 2; the compliance path): its bytes leave the disk at the
    /// next garbage collection (`gc`). A hash the store never had is `ErrorCode::NotFound`.
    pub async fn purge_blob(&self, hash: BlobHash) -> Result<Purged, ClientError> {
        let answer = self.ask(PurgeBlob { hash }).await?;
        check_pair(MessageType::PurgeBlob, answer.payload_hash.0 == hash.0)?;
        Ok(Purged {
            payload_hash: hash,
            turns_redacted: answer.turns_redacted,
            overlay_seq: answer.overlay_seq,
        })
    }
}
