//! The blocking client: the async client driven by a private tokio runtime (one worker
//! thread for the connection's reader and writer tasks). For scripts, CLIs, and code that is
//! not async. Calls from several threads at once are pipelined on the one connection.

use bytes::Bytes;
use ctxstore_protocol::{Request, Response, ServerLimits, StatsWire};

use crate::client::{Client as AsyncClient, ClientConfig};
use crate::error::ClientError;
use crate::types::{Appended, BlobHash, ContextHead, Page, Turn};

pub struct Client {
    runtime: tokio::runtime::Runtime,
    client: AsyncClient,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Client")
            .field("client", &self.client)
            .finish()
    }
}

impl Client {
    pub fn connect(config: ClientConfig) -> Result<Client, ClientError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ctxstore-client")
            .enable_all()
            .build()
            .map_err(|reason| ClientError::Connect {
                addr: config.addr.clone(),
                reason,
            })?;
        let client = runtime.block_on(AsyncClient::connect(config))?;
        Ok(Client { runtime, client })
    }

    /// The async client behind this one (for pipelining from async code).
    pub fn as_async(&self) -> &AsyncClient {
        &self.client
    }

    pub fn server_limits(&self) -> ServerLimits {
        self.client.server_limits()
    }

    pub fn request(&self, request: Request) -> Result<Response, ClientError> {
        self.runtime.block_on(self.client.request(request))
    }

    pub fn ping(&self, nonce: u64) -> Result<(), ClientError> {
        self.runtime.block_on(self.client.ping(nonce))
    }

    pub fn create_context(&self) -> Result<ContextHead, ClientError> {
        self.runtime.block_on(self.client.create_context())
    }

    pub fn create_context_from(&self, base: u64) -> Result<ContextHead, ClientError> {
        self.runtime.block_on(self.client.create_context_from(base))
    }

    pub fn fork(&self, turn: u64) -> Result<ContextHead, ClientError> {
        self.runtime.block_on(self.client.fork(turn))
    }

    pub fn head(&self, context: u64) -> Result<ContextHead, ClientError> {
        self.runtime.block_on(self.client.head(context))
    }

    pub fn append(
        &self,
        context: u64,
        expected_head: Option<u64>,
        type_tag: u64,
        codec: u32,
        payload: Bytes,
    ) -> Result<Appended, ClientError> {
        self.runtime.block_on(
            self.client
                .append(context, expected_head, type_tag, codec, payload),
        )
    }

    pub fn append_by_hash(
        &self,
        context: u64,
        expected_head: Option<u64>,
        type_tag: u64,
        codec: u32,
        hash: BlobHash,
    ) -> Result<Appended, ClientError> {
        self.runtime.block_on(self.client.append_by_hash(
            context,
            expected_head,
            type_tag,
            codec,
            hash,
        ))
    }

    pub fn turn(&self, turn: u64) -> Result<Turn, ClientError> {
        self.runtime.block_on(self.client.turn(turn))
    }

    pub fn last(&self, context: u64, limit: u32, payloads: bool) -> Result<Page, ClientError> {
        self.runtime
            .block_on(self.client.last(context, limit, payloads))
    }

    pub fn before(
        &self,
        context: u64,
        before: u64,
        limit: u32,
        payloads: bool,
    ) -> Result<Page, ClientError> {
        self.runtime
            .block_on(self.client.before(context, before, limit, payloads))
    }

    pub fn range(
        &self,
        context: u64,
        from_depth: u32,
        limit: u32,
        payloads: bool,
    ) -> Result<Page, ClientError> {
        self.runtime
            .block_on(self.client.range(context, from_depth, limit, payloads))
    }

    pub fn chain(
        &self,
        turn: u64,
        from_depth: u32,
        limit: u32,
        payloads: bool,
    ) -> Result<Page, ClientError> {
        self.runtime
            .block_on(self.client.chain(turn, from_depth, limit, payloads))
    }

    pub fn replay(&self, turn: u64, payloads: bool) -> Result<Vec<Turn>, ClientError> {
        self.runtime.block_on(self.client.replay(turn, payloads))
    }

    pub fn blob(&self, hash: BlobHash) -> Result<Bytes, ClientError> {
        self.runtime.block_on(self.client.blob(hash))
    }

    pub fn has_blobs(&self, hashes: &[BlobHash]) -> Result<Vec<bool>, ClientError> {
        self.runtime.block_on(self.client.has_blobs(hashes))
    }

    pub fn stats(&self) -> Result<StatsWire, ClientError> {
        self.runtime.block_on(self.client.stats())
    }
}
