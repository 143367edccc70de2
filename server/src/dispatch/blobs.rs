//! Blobs: GET_BLOB, HAS_BLOBS (version 1) and PUT_CHUNKED (version 2, sub-blob dedup, issue
//! 16).

use ctxstore_engine::{BlobHash, ChunkRef};
use ctxstore_protocol::{
    ChunkBaseWire, ChunkWire, ErrorCode, Request, Response, SentChunkWire, read_flags,
};

use super::{Dispatcher, engine_error, error, misrouted, payload_mode, payload_wire};

impl Dispatcher {
    pub(super) async fn answer_blob(&self, request: Request) -> Result<Response, Response> {
        match request {
            Request::GetBlob { hash, read_flags } => self.blob(hash, read_flags),
            Request::HasBlobs { hashes } => self.has_blobs(hashes).await,
            Request::PutChunked {
                payload_hash,
                base,
                chunks,
                sent,
            } => self.put_chunked(payload_hash, base, chunks, sent).await,
            other => Err(misrouted(&other)),
        }
    }

    fn blob(&self, hash: BlobHash, flags: u32) -> Result<Response, Response> {
        let mode = payload_mode(flags | read_flags::WITH_PAYLOADS);
        let mut cache = self.cache_for_read();
        let payload = self.engine.read_payload(hash, mode, &mut *cache);
        payload
            .map(|payload| Response::Blob(payload_wire(payload)))
            .map_err(engine_error)
    }

    async fn has_blobs(&self, hashes: Vec<BlobHash>) -> Result<Response, Response> {
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
        Ok(Response::HasBlobs { present })
    }

    /// PUT_CHUNKED (issue 16): the engine checks every sent chunk against its hash and the
    /// rebuilt payload against `payload_hash`; a chunk neither sent nor stored is NOT_FOUND
    /// naming the first 16 missing indexes, and nothing is written. The payload's bytes are
    /// not kept for the payload cache: the engine rebuilds and verifies them on a read, and
    /// most of them were never on this connection.
    async fn put_chunked(
        &self,
        payload_hash: BlobHash,
        base: Option<ChunkBaseWire>,
        chunks: Vec<ChunkWire>,
        sent: Vec<SentChunkWire>,
    ) -> Result<Response, Response> {
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
        Ok(Response::ChunkedStored {
            payload_hash,
            payload_len,
            already_stored,
        })
    }
}
