//! The async client (tokio): `Client` connects and says HELLO (versions 1..=4; the negotiated
//! one is kept, and a request of a newer version than the connection's, or a frame flag of
//! one, fails before sending), keeps
//! the server's limits, sends requests over its connection (`transport.rs`) with their timeouts
//! (`request`, and `call`: a family's request, its family's answer), and hands out handles with
//! an overlay view (`as_of`) or a durability for their writes (`with_durability`, the frame
//! flag `ACK_AFTER`, decision 0031). Cheap to clone; clones share the connection. The typed calls are
//! in `calls/`, one file per message family. Given several addresses the client follows the
//! primary (decision 0031 §11): the connection is swapped for one to the new primary, and a
//! request is retried there when that is safe (`primary.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::admin;
use ctxstore_protocol::{
    Ask, HEADER_BYTES, MessageType, PROTOCOL_VERSION, PROTOCOL_VERSION_MIN, Request, Response,
    ServerLimits, check_request, encode_request_chunks, frame_flags,
};
use tokio::net::TcpStream;

use crate::config::ClientConfig;
use crate::error::ClientError;
use crate::transport::Connection;
use crate::types::{BlobHash, ChunkRef, Durability};

/// A payload this client stored as chunks: its hash and its chunk list.
type RecentChunked = (BlobHash, Arc<[ChunkRef]>);

/// The limits the server enforces too, defined once (`ctxstore-vocab`): turns per
/// `append_turns` call, per `turn_log` page and per `find_turns` page; which labels are
/// indexed store-wide.
pub use ctxstore_vocab::labels::is_indexed_label;
pub use ctxstore_vocab::limits::{
    APPEND_BATCH_TURNS_MAX, FIND_PAGE_MAX, KV_TOUCH_KEYS_MAX, LOG_PAGE_MAX, TTL_MS_MAX,
};

/// A connection to a ctxstore server. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct Client {
    pub(crate) shared: Arc<Shared>,
    /// The overlay view reads of turns ask for (`as_of`); `None`: none (no frame flag).
    pub(crate) view: Option<u64>,
    /// When this handle's writes are acknowledged (`with_durability`; from
    /// `ClientConfig::durability` at connect).
    pub(crate) durability: Durability,
}

pub(crate) struct Shared {
    pub(crate) config: ClientConfig,
    /// The connection (to the primary, with several addresses: swapped when it goes).
    connection: Mutex<Arc<Connection>>,
    /// Bumped at each swap of `connection`, so that of the calls that saw one connection go
    /// only the first looks for the primary (`primary.rs`).
    pub(crate) generation: AtomicU64,
    /// Held while the primary is looked for.
    pub(crate) rediscovery: tokio::sync::Mutex<()>,
    limits: Mutex<ServerLimits>,
    /// The protocol version HELLO negotiated (the oldest this client speaks until then).
    version: AtomicU16,
    /// Set once the server answered STATS_EX with UNKNOWN_MESSAGE (a version-2 server older
    /// than garbage collection): `stats` asks STATS from then on.
    pub(crate) no_stats_ex: AtomicBool,
    /// Set once the server answered PUT_CHUNKED with UNKNOWN_MESSAGE (a version-2 server older
    /// than sub-blob dedup): appends send whole payloads from then on.
    pub(crate) no_put_chunked: AtomicBool,
    /// Whether raw payloads are hashed here: `config.verify_payloads` applied to this
    /// connection's peer address (decision 0015).
    pub(crate) hash_raw: AtomicBool,
    /// The chunk lists of payloads this client stored as chunks lately, by first chunk: the
    /// next state of a growing thread starts like the last one, so its PUT_CHUNKED names that
    /// one as its base and lists only the chunks after the shared prefix. At most
    /// `RECENT_CHUNKED_MAX`, forgotten all at once (a hint, never needed for correctness).
    pub(crate) recent_chunked: Mutex<HashMap<BlobHash, RecentChunked>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("addr", &self.shared.config.addr)
            .finish()
    }
}

/// HELLO offering every version this client speaks, with the config's token and name.
fn hello_request(config: &ClientConfig) -> admin::Hello {
    admin::Hello {
        min_version: PROTOCOL_VERSION_MIN,
        max_version: PROTOCOL_VERSION,
        token: Bytes::from(
            config
                .token
                .as_deref()
                .map(str::trim)
                .unwrap_or_default()
                .to_string(),
        ),
        client_name: config.client_name.clone(),
    }
}

#[blocking_twin(crate::blocking::Client)]
impl Client {
    /// Connects and says HELLO (version negotiation and token). A token or client name longer
    /// than the protocol carries is `ClientError::InvalidArgument`, before anything is sent.
    ///
    /// With several addresses (`ClientConfig::addr` = `A,B,C`) it connects to the primary
    /// among them (`primary.rs`), waiting up to `ClientConfig::failover_timeout` for one.
    pub async fn connect(config: ClientConfig) -> Result<Client, ClientError> {
        if config.follows_primary() {
            return crate::primary::connect(config).await;
        }
        Client::connect_one(config).await
    }

    /// Connects to `config.addr`, one address, and says HELLO.
    pub(crate) async fn connect_one(config: ClientConfig) -> Result<Client, ClientError> {
        let hello = hello_request(&config);
        check_request(&hello.clone().into())?;
        let stream = Connection::connect(&config.addr, config.connect_timeout).await?;
        let client = Client::start(config, stream);
        // On an error the client is dropped here, which stops its tasks and closes the socket.
        client.hello(hello).await?;
        Ok(client)
    }

    /// Starts the writer and reader tasks on a connected socket: a client that has not said
    /// HELLO yet (version `PROTOCOL_VERSION_MIN`, default limits until it has).
    fn start(config: ClientConfig, stream: TcpStream) -> Client {
        // A peer address the socket cannot tell is treated as remote: hashing is the safe side.
        let hash_raw = stream.peer_addr().map_or(true, |peer| {
            config.verify_payloads.hashes_raw_from(peer.ip())
        });
        let connection = Connection::start(stream, config.response_bytes_max);
        Client::on(config, Arc::new(connection), hash_raw)
    }

    /// A client over several addresses whose connection is the one `found` (the primary)
    /// has, with what its HELLO negotiated.
    pub(crate) fn connect_shell(config: ClientConfig, found: &Client) -> Client {
        let client = Client::on(config, found.shared.connection(), false);
        client.shared.adopt(found);
        client
    }

    fn on(config: ClientConfig, connection: Arc<Connection>, hash_raw: bool) -> Client {
        Client {
            view: None,
            durability: config.durability,
            shared: Arc::new(Shared {
                config,
                connection: Mutex::new(connection),
                generation: AtomicU64::new(0),
                rediscovery: tokio::sync::Mutex::new(()),
                limits: Mutex::new(ServerLimits::default()),
                version: AtomicU16::new(PROTOCOL_VERSION_MIN),
                no_stats_ex: AtomicBool::new(false),
                no_put_chunked: AtomicBool::new(false),
                hash_raw: AtomicBool::new(hash_raw),
                recent_chunked: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Sends HELLO within `ClientConfig::hello_timeout` and keeps what the server chose: the
    /// protocol version (one this client offered, else a handshake error) and its limits. A
    /// peer that closes, answers garbage or something else is a handshake error; the
    /// server's ERROR (UNAUTHORIZED, UNSUPPORTED_VERSION, OVERLOADED, …) is returned as it is.
    async fn hello(&self, hello: admin::Hello) -> Result<(), ClientError> {
        let addr = &self.shared.config.addr;
        let hello_timeout = self.shared.config.hello_timeout;
        let handshake = |reason: String| ClientError::Handshake {
            addr: addr.clone(),
            reason,
        };
        let hello = self.ask_once(hello, Some(hello_timeout), "ClientConfig::hello_timeout");
        match hello.await {
            Ok(admin::Negotiated {
                limits, version, ..
            }) => {
                if !(PROTOCOL_VERSION_MIN..=PROTOCOL_VERSION).contains(&version) {
                    return Err(handshake(format!(
                        "the server chose protocol version {version}, outside the \
                         {PROTOCOL_VERSION_MIN}..={PROTOCOL_VERSION} offered"
                    )));
                }
                self.shared.version.store(version, Ordering::Relaxed);
                if let Ok(mut slot) = self.shared.limits.lock() {
                    *slot = limits;
                }
                Ok(())
            }
            Err(ClientError::Timeout { .. }) => Err(ClientError::HandshakeTimeout {
                addr: addr.clone(),
                timeout: hello_timeout,
            }),
            Err(ClientError::Closed(reason) | ClientError::Protocol(reason)) => {
                Err(handshake(reason))
            }
            // The server's ERROR (UNAUTHORIZED, UNSUPPORTED_VERSION, OVERLOADED, …) as it is.
            Err(other) => Err(other),
        }
    }

    /// What the server said it limits (frame size, requests in flight, …).
    pub fn server_limits(&self) -> ServerLimits {
        self.shared
            .limits
            .lock()
            .map(|limits| *limits)
            .unwrap_or_default()
    }

    /// Request bytes written to the socket since connect (frame headers and HELLO included),
    /// counted where they are written: what this connection's calls cost on the wire.
    pub fn bytes_sent(&self) -> u64 {
        self.shared.connection().bytes_sent()
    }

    /// Whether this connection hashes raw payloads: `ClientConfig::verify_payloads` applied to
    /// the server's address (decision 0015). Zstd payloads are hashed either way.
    pub fn verifies_raw_payloads(&self) -> bool {
        self.shared.hash_raw.load(Ordering::Relaxed)
    }

    /// The protocol version HELLO negotiated: the highest both sides speak (4 with a server
    /// that has ROLE, 3 with one that has streams, 2 with one that has contexts by name, tags,
    /// listing and key-value, 1 with an older one). A call of a newer version is
    /// `ClientError::Unsupported`, refused before sending.
    pub fn protocol_version(&self) -> u16 {
        self.shared.version.load(Ordering::Relaxed)
    }

    /// Sends any request and waits for its response (a write that takes `ACK_AFTER` with this
    /// handle's durability, `with_durability`). ERROR responses become
    /// `ClientError::Server`; a request the protocol cannot carry (a field over its limit)
    /// is `ClientError::InvalidArgument`, and one the negotiated version does not have (see
    /// `protocol_version`) is `ClientError::Unsupported`; neither is sent.
    pub async fn request(&self, request: Request) -> Result<Response, ClientError> {
        let timeout = self.shared.config.request_timeout;
        self.request_within(request, timeout, "ClientConfig::request_timeout")
            .await
    }

    /// `request` with its own timeout; `setting` names where it came from (for the error).
    pub(crate) async fn request_within(
        &self,
        request: Request,
        timeout: Option<Duration>,
        setting: &'static str,
    ) -> Result<Response, ClientError> {
        let request = self.with_ack_after(request);
        if self.shared.config.follows_primary() {
            return self.request_following(request, timeout, setting).await;
        }
        self.send_once(&request, timeout, setting).await
    }

    /// Sends the request once on the connection as it is now and waits for its answer.
    pub(crate) async fn send_once(
        &self,
        request: &Request,
        timeout: Option<Duration>,
        setting: &'static str,
    ) -> Result<Response, ClientError> {
        let connection = self.shared.connection();
        let (req_id, frame) = self.frame_on(&connection, request)?;
        let request_name = request.message_type().name();
        connection
            .exchange(req_id, frame, request_name, timeout, setting)
            .await
    }

    /// Sends a STREAM_FOLLOW: its req_id, and the receiver of its frames (`transport.rs`).
    pub(crate) fn send_follow(
        &self,
        request: Request,
    ) -> Result<
        (
            u64,
            tokio::sync::mpsc::Receiver<Result<Response, ClientError>>,
        ),
        ClientError,
    > {
        let connection = self.shared.connection();
        let (req_id, frame) = self.frame_on(&connection, &request)?;
        Ok((req_id, connection.follow(req_id, frame)?))
    }

    /// A follow's frames will not be taken any more: later ones find no route.
    pub(crate) fn forget(&self, req_id: u64) {
        self.shared.connection().forget(req_id);
    }

    /// The request's req_id and frame, or why it is not sent: a version this connection does
    /// not speak, a field the wire cannot carry, a frame over the server's limit.
    fn frame_on(
        &self,
        connection: &Connection,
        request: &Request,
    ) -> Result<(u64, Vec<Bytes>), ClientError> {
        self.check_version(request)?;
        let request_name = request.message_type().name();
        let req_id = connection.next_req_id();
        // Before a waiter is registered: a request refused here leaves nothing behind.
        let frame = encode_request_chunks(req_id, request)?;
        // A frame over the server's limit would be answered with TOO_LARGE and a closed
        // connection, racing our write of the rest of it (a broken pipe): refuse it here.
        let frame_bytes_max = self.server_limits().frame_bytes_max;
        let body_bytes = (frame.iter().map(Bytes::len).sum::<usize>()).saturating_sub(HEADER_BYTES);
        if frame_bytes_max > 0 && body_bytes > frame_bytes_max as usize {
            return Err(ClientError::InvalidArgument(format!(
                "{request_name} of {body_bytes} bytes is over the server's frame limit of \
                 {frame_bytes_max} bytes (its --frame-bytes-max)"
            )));
        }
        Ok((req_id, frame))
    }

    /// A request the negotiated version does not have (a newer message, or a frame flag of
    /// version 2) is `ClientError::Unsupported`: a version-1 server would answer
    /// UNKNOWN_MESSAGE, or BAD_FRAME and a closed connection for a frame flag it does not
    /// know; say why here instead.
    fn check_version(&self, request: &Request) -> Result<(), ClientError> {
        let version = self.protocol_version();
        let since = request.message_type().since_version();
        let flags = request.frame_flags();
        let mut needed = since;
        if flags & (frame_flags::CTX_BY_NAME | frame_flags::OVERLAYS) != 0 {
            needed = needed.max(2);
        }
        // A write that says when it is acknowledged (decision 0031).
        if flags & frame_flags::ACK_AFTER != 0 {
            needed = needed.max(ctxstore_protocol::ACK_AFTER_SINCE_VERSION);
        }
        if needed > version {
            return Err(ClientError::Unsupported {
                request: request.message_type().name(),
                needed,
                version,
            });
        }
        Ok(())
    }

    /// Sends a request and takes its answer out of the response (`Ask`, from the message
    /// table's answer column): a response holding another message's answer is a protocol
    /// error, here and nowhere else.
    pub(crate) async fn ask<Q: Ask>(&self, request: Q) -> Result<Q::Answer, ClientError> {
        let timeout = self.shared.config.request_timeout;
        self.ask_within(request, timeout, "ClientConfig::request_timeout")
            .await
    }

    /// `ask` with its own timeout; `setting` names where it came from (for the error).
    pub(crate) async fn ask_within<Q: Ask>(
        &self,
        request: Q,
        timeout: Option<Duration>,
        setting: &'static str,
    ) -> Result<Q::Answer, ClientError> {
        let response = self
            .request_within(request.into(), timeout, setting)
            .await?;
        answer_of::<Q>(response)
    }

    /// `ask_within` on the connection of the moment only, never looking for the primary
    /// (HELLO, and the questions that look for it).
    pub(crate) async fn ask_once<Q: Ask>(
        &self,
        request: Q,
        timeout: Option<Duration>,
        setting: &'static str,
    ) -> Result<Q::Answer, ClientError> {
        let response = self.send_once(&request.into(), timeout, setting).await?;
        answer_of::<Q>(response)
    }

    /// A handle on the same connection whose reads of turns show the overlay view `as_of`
    /// (protocol version 2, decision 0012): 0 the latest view, else each turn as of that
    /// overlay sequence number (its latest patch up to it; a redaction holds in every view).
    /// Every turn those reads return carries its `redacted` and `overlay_seq`. The reads:
    /// `turn`, `last`, `before`, `range`, `chain`, `replay`, `turn_by_key`, `turn_info`,
    /// `replay_info`, `turn_log(_all)`, `read_page`, `window(_all)`, `find_turns`,
    /// `find_all_turns`. On a version-1 connection they are `ClientError::Unsupported`.
    /// Without a view (a plain `Client`) reads return the latest payloads with `redacted`
    /// false and `overlay_seq` 0.
    pub fn as_of(&self, as_of: u64) -> Client {
        Client {
            shared: Arc::clone(&self.shared),
            view: Some(as_of),
            durability: self.durability,
        }
    }

    /// Sets (or clears) this handle's overlay view (see `as_of`).
    pub fn set_view(&mut self, as_of: Option<u64>) {
        self.view = as_of;
    }

    /// This handle's overlay view (see `as_of`).
    pub fn view(&self) -> Option<u64> {
        self.view
    }

    /// A handle on the same connection whose writes are acknowledged as `durability` says
    /// (decision 0031): the appends (`append`, `append_by_hash`, `append_turn`,
    /// `append_turns`), `seal_stream`, `kv_put` and `kv_put_ex` carry the frame flag
    /// `ACK_AFTER` (protocol version 4; a version-1..3 connection refuses them before
    /// sending, `ClientError::Unsupported`); other requests are sent as they are.
    /// `Durability::Default` sends no flag (the server's `--ack-after`).
    ///
    /// `Durability::Remote` answers once the object store holds the write. When it cannot
    /// confirm that in time the call fails with UNCONFIRMED (`ClientError::is_unconfirmed`):
    /// the write is durable on the server but not confirmed off-host; retry it with the same
    /// idempotency key (a turn's key, the same KV value, the seal again).
    pub fn with_durability(&self, durability: Durability) -> Client {
        Client {
            shared: Arc::clone(&self.shared),
            view: self.view,
            durability,
        }
    }

    /// Sets this handle's durability (see `with_durability`).
    pub fn set_durability(&mut self, durability: Durability) {
        self.durability = durability;
    }

    /// This handle's durability (see `with_durability`).
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The request as this handle sends it: a write that takes `ACK_AFTER` carries this
    /// handle's durability (none for `Durability::Default`, nor where the caller put one).
    pub(crate) fn with_ack_after(&self, request: Request) -> Request {
        let Some(after) = self.durability.ack_after() else {
            return request;
        };
        if matches!(request, Request::AckAfter { .. } | Request::AsOf { .. })
            || !request.message_type().takes_ack_after()
        {
            return request;
        }
        Request::AckAfter {
            request: Box::new(request),
            after,
        }
    }
}

impl Shared {
    /// How many times the connection was swapped (see `generation`).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The connection as it is now (with several addresses, swapped at a failover).
    pub(crate) fn connection(&self) -> Arc<Connection> {
        match self.connection.lock() {
            Ok(connection) => Arc::clone(&connection),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Takes over `other`'s connection and what its HELLO negotiated (a new primary found
    /// by `primary.rs`); later requests go there.
    pub(crate) fn adopt(&self, other: &Client) {
        let theirs = &other.shared;
        self.version
            .store(theirs.version.load(Ordering::Relaxed), Ordering::Relaxed);
        if let Ok(mut slot) = self.limits.lock() {
            *slot = other.server_limits();
        }
        self.hash_raw
            .store(theirs.hash_raw.load(Ordering::Relaxed), Ordering::Relaxed);
        self.no_stats_ex.store(false, Ordering::Relaxed);
        self.no_put_chunked.store(false, Ordering::Relaxed);
        let connection = theirs.connection();
        match self.connection.lock() {
            Ok(mut slot) => *slot = connection,
            Err(poisoned) => *poisoned.into_inner() = connection,
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// A request answered with another message than its own (a response or a family's answer).
/// The answer to `Q` in a response: the server's error for an ERROR, a protocol error when
/// the response holds another message's answer (answers several messages share,
/// `reads::Turns`, carry their type).
pub(crate) fn answer_of<Q: Ask>(response: Response) -> Result<Q::Answer, ClientError> {
    if let Response::Error {
        code,
        detail,
        message,
    } = response
    {
        return Err(ClientError::Server {
            code,
            detail,
            message,
        });
    }
    if response.msg_type() != Q::MESSAGE_TYPE.response_code() {
        return Err(unexpected(Q::MESSAGE_TYPE, response));
    }
    Q::answer(response).map_err(|other| unexpected(Q::MESSAGE_TYPE, other))
}

pub(crate) fn unexpected(asked: MessageType, answer: impl Into<Response>) -> ClientError {
    ClientError::Protocol(format!(
        "{} answered with message type {:#06x}",
        asked.name(),
        answer.into().msg_type()
    ))
}

/// A call's check that its answer is the answer to what it asked (the same turn, hash, key,
/// nonce or page): `holds` false is a protocol error naming the message.
pub(crate) fn check_pair(asked: MessageType, holds: bool) -> Result<(), ClientError> {
    if holds {
        return Ok(());
    }
    Err(ClientError::Protocol(format!(
        "{} was answered for another request than the one asked (the turn, hash, key or page \
         differs)",
        asked.name()
    )))
}
