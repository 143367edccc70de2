//! The blocking client: the async client driven by a private tokio runtime (one worker
//! thread for the connection's reader and writer tasks). For scripts, CLIs, and code that is
//! not async. Calls from several threads at once are pipelined on the one connection.

use std::time::Duration;

use bytes::Bytes;
use ctxstore_protocol::{ContextRef, PageKind, Request, Response, ServerLimits};

use crate::client::{Client as AsyncClient, ClientConfig};
use crate::error::ClientError;
use crate::types::{
    Appended, AppendedTurn, BackupReport, BlobHash, ChunkRef, ChunkedStored, ContextHead,
    ContextInfo, ContextListPage, ContextQuery, ContextRetention, FoundPage, GcReport, KvItem,
    ListCursor, LogCursor, LogPage, NewContext, NewTurn, Opened, Page, Patched, Purged, Redacted,
    Stats, Turn, TurnInfo, TurnPage,
};

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

    /// Request bytes written to the socket since connect (see the async client's
    /// `bytes_sent`).
    pub fn bytes_sent(&self) -> u64 {
        self.client.bytes_sent()
    }

    /// Whether raw payloads are hashed on this connection (see the async client's
    /// `verifies_raw_payloads`, decision 0015).
    pub fn verifies_raw_payloads(&self) -> bool {
        self.client.verifies_raw_payloads()
    }

    /// The protocol version HELLO negotiated (see the async client's `protocol_version`).
    pub fn protocol_version(&self) -> u16 {
        self.client.protocol_version()
    }

    pub fn request(&self, request: Request) -> Result<Response, ClientError> {
        self.runtime.block_on(self.client.request(request))
    }

    /// Sets (or clears) the overlay view this client's reads of turns ask for: see the async
    /// client's `as_of`.
    pub fn set_view(&mut self, as_of: Option<u64>) {
        self.client.set_view(as_of);
    }

    /// The overlay view this client's reads ask for (see `set_view`).
    pub fn view(&self) -> Option<u64> {
        self.client.view()
    }

    pub fn patch_turn(&self, turn: u64, payload: impl Into<Bytes>) -> Result<Patched, ClientError> {
        self.runtime.block_on(self.client.patch_turn(turn, payload))
    }

    pub fn redact_turn(&self, turn: u64) -> Result<Redacted, ClientError> {
        self.runtime.block_on(self.client.redact_turn(turn))
    }

    pub fn purge_blob(&self, hash: BlobHash) -> Result<Purged, ClientError> {
        self.runtime.block_on(self.client.purge_blob(hash))
    }

    pub fn ping(&self, nonce: u64) -> Result<(), ClientError> {
        self.runtime.block_on(self.client.ping(nonce))
    }

    /// A context as a tree (`crate::tree::fetch`; `ctxstore tree`).
    pub fn tree(
        &self,
        context: impl Into<ContextRef>,
        options: &crate::tree::TreeOptions,
    ) -> Result<crate::tree::Tree, ClientError> {
        self.runtime
            .block_on(crate::tree::fetch(&self.client, context, options))
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

    pub fn head(&self, context: impl Into<ContextRef>) -> Result<ContextHead, ClientError> {
        self.runtime.block_on(self.client.head(context))
    }

    pub fn append(
        &self,
        context: impl Into<ContextRef>,
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
        context: impl Into<ContextRef>,
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

    /// Stores a payload given as its chunks, sending the bytes of `sent` only (see the async
    /// client's `put_chunked`).
    pub fn put_chunked(
        &self,
        hash: BlobHash,
        chunks: Vec<ChunkRef>,
        sent: Vec<(u32, Bytes)>,
    ) -> Result<ChunkedStored, ClientError> {
        self.runtime
            .block_on(self.client.put_chunked(hash, chunks, sent))
    }

    /// `put_chunked` after a base's first `kept` chunks (see the async client's
    /// `put_chunked_after`).
    pub fn put_chunked_after(
        &self,
        hash: BlobHash,
        base: Option<(BlobHash, u32)>,
        chunks: Vec<ChunkRef>,
        sent: Vec<(u32, Bytes)>,
    ) -> Result<ChunkedStored, ClientError> {
        self.runtime
            .block_on(self.client.put_chunked_after(hash, base, chunks, sent))
    }

    pub fn turn(&self, turn: u64) -> Result<Turn, ClientError> {
        self.runtime.block_on(self.client.turn(turn))
    }

    pub fn last(
        &self,
        context: impl Into<ContextRef>,
        limit: u32,
        payloads: bool,
    ) -> Result<Page, ClientError> {
        self.runtime
            .block_on(self.client.last(context, limit, payloads))
    }

    pub fn before(
        &self,
        context: impl Into<ContextRef>,
        before: u64,
        limit: u32,
        payloads: bool,
    ) -> Result<Page, ClientError> {
        self.runtime
            .block_on(self.client.before(context, before, limit, payloads))
    }

    pub fn range(
        &self,
        context: impl Into<ContextRef>,
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

    /// See the async client's `stats`: the garbage collector's figures are `None` from a
    /// server that does not report them.
    pub fn stats(&self) -> Result<Stats, ClientError> {
        self.runtime.block_on(self.client.stats())
    }

    /// See the async client's `gc`: the wait is `ClientConfig::gc_timeout` (default 1 h),
    /// not `request_timeout`.
    pub fn gc(&self) -> Result<GcReport, ClientError> {
        self.runtime.block_on(self.client.gc())
    }

    pub fn open_context(&self, new: NewContext) -> Result<Opened, ClientError> {
        self.runtime.block_on(self.client.open_context(new))
    }

    pub fn clone_context(
        &self,
        source: impl Into<ContextRef>,
        name: impl Into<String>,
    ) -> Result<ContextInfo, ClientError> {
        self.runtime
            .block_on(self.client.clone_context(source, name))
    }

    pub fn context_info(&self, context: impl Into<ContextRef>) -> Result<ContextInfo, ClientError> {
        self.runtime.block_on(self.client.context_info(context))
    }

    pub fn tag_context<K, V, R>(
        &self,
        context: impl Into<ContextRef>,
        set: impl IntoIterator<Item = (K, V)>,
        remove: impl IntoIterator<Item = R>,
        expected_head: Option<u64>,
    ) -> Result<ContextInfo, ClientError>
    where
        K: Into<String>,
        V: Into<String>,
        R: Into<String>,
    {
        self.runtime
            .block_on(self.client.tag_context(context, set, remove, expected_head))
    }

    pub fn name_context(
        &self,
        context: impl Into<ContextRef>,
        name: impl Into<String>,
    ) -> Result<ContextInfo, ClientError> {
        self.runtime
            .block_on(self.client.name_context(context, name))
    }

    /// See the async client's `delete_context`.
    pub fn delete_context(
        &self,
        context: impl Into<ContextRef>,
    ) -> Result<ContextRetention, ClientError> {
        self.runtime.block_on(self.client.delete_context(context))
    }

    /// See the async client's `prune_context`.
    pub fn prune_context(
        &self,
        context: impl Into<ContextRef>,
        keep: u32,
    ) -> Result<ContextRetention, ClientError> {
        self.runtime
            .block_on(self.client.prune_context(context, keep))
    }

    /// See the async client's `set_context_ttl`.
    pub fn set_context_ttl(
        &self,
        context: impl Into<ContextRef>,
        ttl: Option<Duration>,
    ) -> Result<ContextRetention, ClientError> {
        self.runtime
            .block_on(self.client.set_context_ttl(context, ttl))
    }

    /// See the async client's `context_retention`.
    pub fn context_retention(
        &self,
        context: impl Into<ContextRef>,
    ) -> Result<ContextRetention, ClientError> {
        self.runtime
            .block_on(self.client.context_retention(context))
    }

    /// See the async client's `backup`: `dir` is on the server's host, and the wait is
    /// `ClientConfig::backup_timeout` (default 24 h), not `request_timeout`.
    pub fn backup(&self, dir: impl Into<String>) -> Result<BackupReport, ClientError> {
        self.runtime.block_on(self.client.backup(dir))
    }

    pub fn list_contexts(
        &self,
        query: &ContextQuery,
        cursor: Option<&ListCursor>,
    ) -> Result<ContextListPage, ClientError> {
        self.runtime
            .block_on(self.client.list_contexts(query, cursor))
    }

    pub fn list_all_contexts(
        &self,
        query: &ContextQuery,
        count_max: Option<usize>,
    ) -> Result<Vec<ContextInfo>, ClientError> {
        self.runtime
            .block_on(self.client.list_all_contexts(query, count_max))
    }

    pub fn kv_put(
        &self,
        context: impl Into<ContextRef>,
        entries: Vec<(Bytes, Bytes)>,
        if_absent: bool,
    ) -> Result<(), ClientError> {
        self.runtime
            .block_on(self.client.kv_put(context, entries, if_absent))
    }

    pub fn kv_get(
        &self,
        context: impl Into<ContextRef>,
        key: impl Into<Bytes>,
    ) -> Result<Option<(BlobHash, Bytes)>, ClientError> {
        self.runtime.block_on(self.client.kv_get(context, key))
    }

    pub fn kv_delete(
        &self,
        context: impl Into<ContextRef>,
        keys: Vec<Bytes>,
    ) -> Result<(), ClientError> {
        self.runtime.block_on(self.client.kv_delete(context, keys))
    }

    pub fn kv_list(
        &self,
        context: impl Into<ContextRef>,
        prefix: &[u8],
        after: &[u8],
        limit: u32,
    ) -> Result<Vec<KvItem>, ClientError> {
        self.runtime
            .block_on(self.client.kv_list(context, prefix, after, limit))
    }

    pub fn kv_list_all(
        &self,
        context: impl Into<ContextRef>,
        prefix: &[u8],
    ) -> Result<Vec<KvItem>, ClientError> {
        self.runtime
            .block_on(self.client.kv_list_all(context, prefix))
    }

    /// See the async client's `append_turns`.
    pub fn append_turns(
        &self,
        context: impl Into<ContextRef>,
        expected_head: Option<u64>,
        turns: Vec<NewTurn>,
    ) -> Result<Vec<AppendedTurn>, ClientError> {
        self.runtime
            .block_on(self.client.append_turns(context, expected_head, turns))
    }

    /// See the async client's `append_turn`.
    pub fn append_turn(
        &self,
        context: impl Into<ContextRef>,
        expected_head: Option<u64>,
        turn: NewTurn,
    ) -> Result<AppendedTurn, ClientError> {
        self.runtime
            .block_on(self.client.append_turn(context, expected_head, turn))
    }

    /// See the async client's `turn_by_key`.
    pub fn turn_by_key(
        &self,
        context: impl Into<ContextRef>,
        key: impl Into<Bytes>,
    ) -> Result<Option<TurnInfo>, ClientError> {
        self.runtime.block_on(self.client.turn_by_key(context, key))
    }

    /// See the async client's `turn_info`.
    pub fn turn_info(&self, turn: u64) -> Result<TurnInfo, ClientError> {
        self.runtime.block_on(self.client.turn_info(turn))
    }

    /// See the async client's `replay_info`.
    pub fn replay_info(&self, turn: u64, payloads: bool) -> Result<Vec<TurnInfo>, ClientError> {
        self.runtime
            .block_on(self.client.replay_info(turn, payloads))
    }

    /// See the async client's `turn_log` (and its cursor loop).
    pub fn turn_log(
        &self,
        context: impl Into<ContextRef>,
        labels: &[(String, String)],
        cursor: Option<LogCursor>,
        limit: u32,
        payloads: bool,
    ) -> Result<LogPage, ClientError> {
        self.runtime.block_on(
            self.client
                .turn_log(context, labels, cursor, limit, payloads),
        )
    }

    /// See the async client's `turn_log_all`.
    pub fn turn_log_all(
        &self,
        context: impl Into<ContextRef>,
        labels: &[(String, String)],
        count_max: Option<usize>,
        payloads: bool,
    ) -> Result<Vec<TurnInfo>, ClientError> {
        self.runtime.block_on(
            self.client
                .turn_log_all(context, labels, count_max, payloads),
        )
    }

    /// See the async client's `read_page`.
    pub fn read_page(
        &self,
        context: impl Into<ContextRef>,
        kind: PageKind,
        limit: u32,
        payloads: bool,
    ) -> Result<TurnPage, ClientError> {
        self.runtime
            .block_on(self.client.read_page(context, kind, limit, payloads))
    }

    /// See the async client's `window`.
    pub fn window(
        &self,
        context: impl Into<ContextRef>,
        limit: u32,
        payloads: bool,
    ) -> Result<TurnPage, ClientError> {
        self.runtime
            .block_on(self.client.window(context, limit, payloads))
    }

    /// See the async client's `window_all`.
    pub fn window_all(
        &self,
        context: impl Into<ContextRef>,
        count_max: Option<usize>,
        payloads: bool,
    ) -> Result<Vec<TurnInfo>, ClientError> {
        self.runtime
            .block_on(self.client.window_all(context, count_max, payloads))
    }

    /// See the async client's `find_turns`.
    pub fn find_turns(
        &self,
        key: impl Into<String>,
        value: impl Into<String>,
        before: u64,
        limit: u32,
    ) -> Result<FoundPage, ClientError> {
        self.runtime
            .block_on(self.client.find_turns(key, value, before, limit))
    }

    /// See the async client's `find_all_turns`.
    pub fn find_all_turns(
        &self,
        labels: &[(String, String)],
        count_max: Option<usize>,
    ) -> Result<Vec<TurnInfo>, ClientError> {
        self.runtime
            .block_on(self.client.find_all_turns(labels, count_max))
    }
}
