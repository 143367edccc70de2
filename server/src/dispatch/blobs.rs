//! The blobs family: GET_BLOB, HAS_BLOBS (version 1) and PUT_CHUNKED (version 2, sub-blob
//! dedup, issue 16).

use ctxstore_engine::ChunkRef;
use ctxstore_protocol::blobs;
use ctxstore_protocol::{
    BlobsRequest, BlobsResponse, ErrorCode, PayloadWire, Response, read_flags,
};

use super::{Scoped, engine_error, error, payload_mode, payload_wire};

impl Scoped<'_> {
    pub(super) async fn answer_blobs(
        &self,
        request: BlobsRequest,
    ) -> Result<BlobsResponse, Response> {
        // Each message's function returns its own answer: the variant that wraps it is the
        // only one that type-checks.
        match request {
            BlobsRequest::GetBlob(get) => self.blob(get).map(BlobsResponse::Blob),
            BlobsRequest::HasBlobs(has) => self.has_blobs(has).await.map(BlobsResponse::BlobsHeld),
            BlobsRequest::PutChunked(put) => {
                let stored = self.put_chunked(put).await;
                stored.map(BlobsResponse::ChunkedStored)
            }
        }
    }

    /// GET_BLOB: the blob's bytes, raw or (ACCEPT_ZSTD) as stored.
    fn blob(&self, get: blobs::GetBlob) -> Result<PayloadWire, Response> {
        let mode = payload_mode(get.read_flags | read_flags::WITH_PAYLOADS);
        let mut cache = self.cache_for_read();
        let payload = self.engine.read_payload(get.hash, mode, &mut *cache);
        payload.map(payload_wire).map_err(engine_error)
    }

    /// HAS_BLOBS: whether each blob is stored, in the request's order.
    async fn has_blobs(&self, has: blobs::HasBlobs) -> Result<blobs::BlobsHeld, Response> {
        let hashes = has.hashes;
        if hashes.len() > self.limits.has_blobs_max as usize {
            return Err(error(
                ErrorCode::TooLarge,
                format!(
                    "{} hashes; the limit is {} per HAS_BLOBS",
                    hashes.len(),
                    self.limits.has_blobs_max
                ),
            ));
        }
        let mut present = Vec::with_capacity(hashes.len());
        for hash in hashes {
            present.push(self.engine.has_blob(hash).await);
        }
        Ok(blobs::BlobsHeld { present })
    }

    /// PUT_CHUNKED (issue 16): the engine checks every sent chunk against its hash and the
    /// rebuilt payload against `payload_hash`; a chunk neither sent nor stored is NOT_FOUND
    /// naming the first 16 missing indexes, and nothing is written. The payload's bytes are
    /// not kept for the payload cache: the engine rebuilds and verifies them on a read, and
    /// most of them were never on this connection.
    async fn put_chunked(&self, put: blobs::PutChunked) -> Result<blobs::ChunkedStored, Response> {
        let blobs::PutChunked {
            payload_hash,
            base,
            chunks,
            sent,
        } = put;
        let base = base.map(|base| (base.hash, base.kept));
        let chunks = chunks
            .into_iter()
            .map(|chunk| ChunkRef {
                hash: chunk.hash,
                len: chunk.len,
            })
            .collect();
        let sent = sent
            .into_iter()
            .map(|chunk| (chunk.index, chunk.bytes))
            .collect();
        let hash = payload_hash;
        let stored = self.engine.put_chunked(hash, base, chunks, sent).await;
        let already_stored = stored.map_err(engine_error)?;
        // Stored now (a collection could only take it after a grace interval).
        let payload_len = self.engine.blob_len(hash).map_or(0, u64::from);
        Ok(blobs::ChunkedStored {
            payload_hash,
            payload_len,
            already_stored,
        })
    }
}
