//! The blocking client: the async client driven by a private tokio runtime (one worker thread
//! for the connection's reader and writer tasks). For scripts, CLIs, and code that is not
//! async. Calls from several threads at once are pipelined on the one connection.
//!
//! Its calls are not written here: each family's `impl Client` block of async calls
//! (`calls/`, and `request` in `client.rs`) carries `#[blocking_twin(blocking::Client)]`
//! (`client/macros`), which generates the blocking twin of every `pub async fn` there — same
//! name, arguments, documentation and result, run to completion on this client's runtime —
//! so the two shells cannot drift (decision 0004). What only the blocking client has is here:
//! `connect` (which builds its runtime), the async client behind it, its overlay view, its
//! writes' durability and the connection's figures; and `StreamReader`, a stream read to its end (an async value with a
//! `next`, which the twin macro does not make).

use ctxstore_protocol::ServerLimits;

use crate::client::Client as AsyncClient;
use crate::config::ClientConfig;
use crate::error::ClientError;

pub struct Client {
    /// Runs the calls (`block_on`) and the connection's reader and writer tasks.
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) client: AsyncClient,
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

    /// Sets (or clears) the overlay view this client's reads of turns ask for: see the async
    /// client's `as_of`.
    pub fn set_view(&mut self, as_of: Option<u64>) {
        self.client.set_view(as_of);
    }

    /// The overlay view this client's reads ask for (see `set_view`).
    pub fn view(&self) -> Option<u64> {
        self.client.view()
    }

    /// Sets when this client's appends, stream seals and KV puts are acknowledged (the frame
    /// flag `ACK_AFTER`, decision 0031): see the async client's `with_durability`. At connect
    /// it is `ClientConfig::durability`.
    pub fn set_durability(&mut self, durability: crate::Durability) {
        self.client.set_durability(durability);
    }

    /// When this client's writes are acknowledged (see `set_durability`).
    pub fn durability(&self) -> crate::Durability {
        self.client.durability()
    }
}

/// A stream read to its end (the async `StreamReader`: STREAM_FOLLOW, or long polls from an
/// older server), each `next` run on the client's runtime.
#[derive(Debug)]
pub struct StreamReader<'a> {
    client: &'a Client,
    reader: crate::calls::StreamReader,
}

impl Client {
    /// Reads a stream from `offset` to its end: see the async client's `stream_reader`.
    pub fn stream_reader(&self, stream_id: u64, offset: u64) -> StreamReader<'_> {
        StreamReader {
            client: self,
            reader: self.client.stream_reader(stream_id, offset),
        }
    }
}

/// The next bytes, or the stream's end, then `None`: see the async `StreamReader`. After an
/// error the next call follows again from the offset reached.
impl Iterator for StreamReader<'_> {
    type Item = Result<crate::StreamChunk, ClientError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.client.runtime.block_on(self.reader.next()).transpose()
    }
}

impl StreamReader<'_> {
    /// Where the next bytes start.
    pub fn offset(&self) -> u64 {
        self.reader.offset()
    }

    /// Whether it reads by STREAM_FOLLOW (else by long polls: the server is older).
    pub fn pushed(&self) -> bool {
        self.reader.pushed()
    }
}
