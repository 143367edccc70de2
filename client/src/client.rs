//! The async client (tokio). One TCP connection, pipelined: any number of tasks may call it at
//! once; each request gets a req_id, a writer task sends frames in batches, a reader task
//! matches responses to their requests by req_id (in whatever order they come).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Chunk lists a client remembers to name as bases (`recent_chunked`): one per growing thread
/// it writes; each about 36 bytes per chunk of the state.
const RECENT_CHUNKED_MAX: usize = 256;

/// A payload this client stored as chunks: its hash and its chunk list.
type RecentChunked = (BlobHash, Arc<[ChunkRef]>);

use bytes::Bytes;
use ctxstore_protocol::codec::{check_request, encode_request_chunks};
use ctxstore_protocol::{
    CHUNK_ENTRY_BYTES, CHUNKS_PER_PAYLOAD_MAX, ChunkBaseWire, ChunkWire, ContextRef, ErrorCode,
    FrameReader, HEADER_BYTES, LIST_ITEMS_LIMIT, MessageType, OverlayWire, PROTOCOL_VERSION,
    PROTOCOL_VERSION_MIN, PageKind, PayloadEncoding, PayloadSpec, Request, Response, SentChunkWire,
    ServerLimits, TurnEntry, TurnEntryV2, TurnSpec, decode_response, frame_flags, read_flags,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::chunking::ChunkingConfig;
use crate::error::ClientError;
use crate::types::{
    Appended, AppendedTurn, BackupReport, BlobHash, ChunkRef, ChunkedStored, ContextHead,
    ContextInfo, ContextListPage, ContextQuery, ContextRetention, FoundPage, GcReport, KvItem,
    ListCursor, LogCursor, LogPage, NewContext, NewTurn, Opened, Page, Patched, Purged, Redacted,
    Stats, Turn, TurnInfo, TurnPage, VerifyPayloads, verify_payload,
};

/// The limits the server enforces too, defined once (`ctxstore-vocab`): turns per
/// `append_turns` call, per `turn_log` page and per `find_turns` page; which labels are
/// indexed store-wide.
pub use ctxstore_vocab::labels::is_indexed_label;
pub use ctxstore_vocab::limits::{APPEND_BATCH_TURNS_MAX, FIND_PAGE_MAX, LOG_PAGE_MAX};

#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// `HOST:PORT` of the server.
    pub addr: String,
    /// Sent in HELLO; required by servers that listen beyond loopback.
    pub token: Option<String>,
    pub client_name: String,
    /// Longest wait for the TCP connection (default 5 s).
    pub connect_timeout: Duration,
    /// Longest wait for the answer to HELLO once connected (default 5 s): something that is
    /// not ctxstore on the port is an error after this, not a hang.
    pub hello_timeout: Duration,
    /// Longest wait for each response after HELLO (default 30 s); `None`: wait as long as the
    /// connection lives. A timed-out request is `ClientError::Timeout`; the connection stays.
    pub request_timeout: Option<Duration>,
    /// Longest wait for a BACKUP's answer (default 24 h), instead of `request_timeout`: the
    /// server answers when the copy is complete, which takes minutes on a large store. `None`:
    /// wait as long as the connection lives. A backup the client stops waiting for goes on
    /// on the server.
    pub backup_timeout: Option<Duration>,
    /// Longest wait for a GC's answer (default 1 h), instead of `request_timeout`: the server
    /// answers when the collection is done, which takes as long as rewriting the packs it
    /// compacts (throttled by its `--gc-rate-max`). `None`: wait as long as the connection
    /// lives. A collection the client stops waiting for goes on on the server.
    pub gc_timeout: Option<Duration>,
    /// Largest response frame accepted (a page of payloads can be large).
    pub response_bytes_max: u32,
    /// Let the server send stored (zstd) payloads, inflated here: less work for the server and
    /// fewer bytes on the wire for payloads it has not cached. Payloads are verified against
    /// their hashes either way.
    pub accept_zstd: bool,
    /// Sub-blob dedup on the wire (issue 16; default `Some(ChunkingConfig::DEFAULT)`): an
    /// append by value (`append`, `append_turn`, `append_turns`) of a payload larger than
    /// `threshold_bytes`, on a version-2 connection, sends only the chunks the server lacks
    /// (HAS_BLOBS → PUT_CHUNKED → APPEND_TURN_BY_HASH or APPEND_TURNS by hash), so a state
    /// that grows a little each step costs about what it grew by. `None` turns it off: every
    /// payload travels whole, as on a version-1 connection.
    pub chunking: Option<ChunkingConfig>,
    /// Which payloads are hashed here (decision 0015; default `VerifyPayloads::WhenRemote`):
    /// zstd ones always, raw ones — which the server hashed when it read them — only from a
    /// server that is not on loopback, where no network can corrupt them on the way.
    /// `VerifyPayloads::Always` hashes every payload.
    pub verify_payloads: VerifyPayloads,
}

impl ClientConfig {
    pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);
    pub const HELLO_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);
    pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
    pub const BACKUP_TIMEOUT_DEFAULT: Duration = Duration::from_secs(24 * 3600);
    pub const GC_TIMEOUT_DEFAULT: Duration = Duration::from_secs(3600);

    pub fn new(addr: impl Into<String>) -> Self {
        ClientConfig {
            addr: addr.into(),
            token: None,
            client_name: format!("ctxstore-client {}", env!("CARGO_PKG_VERSION")),
            connect_timeout: ClientConfig::CONNECT_TIMEOUT_DEFAULT,
            hello_timeout: ClientConfig::HELLO_TIMEOUT_DEFAULT,
            request_timeout: Some(ClientConfig::REQUEST_TIMEOUT_DEFAULT),
            backup_timeout: Some(ClientConfig::BACKUP_TIMEOUT_DEFAULT),
            gc_timeout: Some(ClientConfig::GC_TIMEOUT_DEFAULT),
            response_bytes_max: 1 << 30,
            accept_zstd: true,
            chunking: Some(ChunkingConfig::DEFAULT),
            verify_payloads: VerifyPayloads::WhenRemote,
        }
    }

    /// Sets `chunking` (`None`: payloads always travel whole).
    pub fn with_chunking(mut self, chunking: Option<ChunkingConfig>) -> Self {
        self.chunking = chunking;
        self
    }

    /// The token HELLO presents. Surrounding whitespace is removed, as the server trims its
    /// token file: a token read from a file with its newline still matches.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.map(|token| token.trim().to_string());
        self
    }

    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    pub fn with_hello_timeout(mut self, timeout: Duration) -> Self {
        self.hello_timeout = timeout;
        self
    }

    pub fn with_request_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.request_timeout = timeout;
        self
    }

    pub fn with_verify_payloads(mut self, verify_payloads: VerifyPayloads) -> Self {
        self.verify_payloads = verify_payloads;
        self
    }

    pub fn with_backup_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.backup_timeout = timeout;
        self
    }

    pub fn with_gc_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.gc_timeout = timeout;
        self
    }
}

type Pending = Mutex<PendingState>;

#[derive(Default)]
struct PendingState {
    waiting: HashMap<u64, oneshot::Sender<Result<Response, ClientError>>>,
    /// Set when the connection is gone: new requests fail at once with it.
    closed: Option<String>,
}

/// A connection to a ctxstore server. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
    /// The overlay view reads of turns ask for (`as_of`); `None`: none (no frame flag).
    view: Option<u64>,
}

struct Shared {
    config: ClientConfig,
    outgoing: mpsc::UnboundedSender<Vec<Bytes>>,
    pending: Arc<Pending>,
    next_req_id: AtomicU64,
    limits: Mutex<ServerLimits>,
    /// The protocol version HELLO negotiated (the oldest this client speaks until then).
    version: AtomicU16,
    /// Set once the server answered STATS_EX with UNKNOWN_MESSAGE (a version-2 server older
    /// than garbage collection): `stats` asks STATS from then on.
    no_stats_ex: AtomicBool,
    /// Set once the server answered PUT_CHUNKED with UNKNOWN_MESSAGE (a version-2 server older
    /// than sub-blob dedup): appends send whole payloads from then on.
    no_put_chunked: AtomicBool,
    /// Request bytes the writer task wrote to the socket (HELLO included).
    bytes_sent: Arc<AtomicU64>,
    /// Whether raw payloads are hashed here: `config.verify_payloads` applied to this
    /// connection's peer address (decision 0015).
    hash_raw: bool,
    /// The chunk lists of payloads this client stored as chunks lately, by first chunk: the
    /// next state of a growing thread starts like the last one, so its PUT_CHUNKED names that
    /// one as its base and lists only the chunks after the shared prefix. At most
    /// `RECENT_CHUNKED_MAX`, forgotten all at once (a hint, never needed for correctness).
    recent_chunked: Mutex<HashMap<BlobHash, RecentChunked>>,
    /// The reader task: aborted on drop, so that a peer that never writes or closes does not
    /// keep it (and the socket) alive.
    reader: tokio::task::AbortHandle,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The writer task ends when `outgoing` is dropped and then closes the socket.
        self.reader.abort();
        fail_all(&self.pending, "client dropped".into());
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("addr", &self.shared.config.addr)
            .finish()
    }
}

fn fail_all(pending: &Pending, reason: String) {
    let waiting = match pending.lock() {
        Ok(mut state) => {
            state.closed.get_or_insert(reason.clone());
            std::mem::take(&mut state.waiting)
        }
        Err(poisoned) => std::mem::take(&mut poisoned.into_inner().waiting),
    };
    for (_, waiter) in waiting {
        let _ = waiter.send(Err(ClientError::Closed(reason.clone())));
    }
}

/// HELLO offering every version this client speaks, with the config's token and name.
fn hello_request(config: &ClientConfig) -> Request {
    Request::Hello {
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

/// The TCP connection, within `timeout` (`ClientConfig::connect_timeout`): a refusal or an
/// unresolvable name is `ClientError::Connect`, the wait running out `ConnectTimeout`.
async fn connect_tcp(addr: &str, timeout: Duration) -> Result<TcpStream, ClientError> {
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(reason)) => Err(ClientError::Connect {
            addr: addr.to_string(),
            reason,
        }),
        Err(_) => Err(ClientError::ConnectTimeout {
            addr: addr.to_string(),
            timeout,
        }),
    }
}

impl Client {
    /// Connects and says HELLO (version negotiation and token). A token or client name longer
    /// than the protocol carries is `ClientError::InvalidArgument`, before anything is sent.
    pub async fn connect(config: ClientConfig) -> Result<Client, ClientError> {
        let hello = hello_request(&config);
        check_request(&hello)?;
        let stream = connect_tcp(&config.addr, config.connect_timeout).await?;
        let client = Client::start(config, stream);
        // On an error the client is dropped here, which stops its tasks and closes the socket.
        client.hello(hello).await?;
        Ok(client)
    }

    /// Starts the writer and reader tasks on a connected socket: a client that has not said
    /// HELLO yet (version `PROTOCOL_VERSION_MIN`, default limits until it has).
    fn start(config: ClientConfig, stream: TcpStream) -> Client {
        let _ = stream.set_nodelay(true);
        // A peer address the socket cannot tell is treated as remote: hashing is the safe side.
        let hash_raw = stream.peer_addr().map_or(true, |peer| {
            config.verify_payloads.hashes_raw_from(peer.ip())
        });
        let (reader, writer) = stream.into_split();
        let (outgoing, queue) = mpsc::unbounded_channel();
        let pending: Arc<Pending> = Arc::default();
        let bytes_sent = Arc::new(AtomicU64::new(0));
        tokio::spawn(write_frames(
            writer,
            queue,
            pending.clone(),
            bytes_sent.clone(),
        ));
        let reader = tokio::spawn(read_frames(
            reader,
            pending.clone(),
            config.response_bytes_max,
        ))
        .abort_handle();
        Client {
            view: None,
            shared: Arc::new(Shared {
                config,
                outgoing,
                pending,
                next_req_id: AtomicU64::new(1),
                limits: Mutex::new(ServerLimits::default()),
                version: AtomicU16::new(PROTOCOL_VERSION_MIN),
                no_stats_ex: AtomicBool::new(false),
                no_put_chunked: AtomicBool::new(false),
                bytes_sent,
                hash_raw,
                recent_chunked: Mutex::new(HashMap::new()),
                reader,
            }),
        }
    }

    /// Sends HELLO within `ClientConfig::hello_timeout` and keeps what the server chose: the
    /// protocol version (one this client offered, else a handshake error) and its limits. A
    /// peer that closes, answers garbage or something else is a handshake error; the
    /// server's ERROR (UNAUTHORIZED, UNSUPPORTED_VERSION, OVERLOADED, …) is returned as it is.
    async fn hello(&self, hello: Request) -> Result<(), ClientError> {
        let addr = &self.shared.config.addr;
        let hello_timeout = self.shared.config.hello_timeout;
        let handshake = |reason: String| ClientError::Handshake {
            addr: addr.clone(),
            reason,
        };
        let hello = self.request_within(hello, Some(hello_timeout), "ClientConfig::hello_timeout");
        match hello.await {
            Ok(Response::Hello {
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
            Ok(other) => Err(handshake(
                unexpected(MessageType::Hello, &other).to_string(),
            )),
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
        self.shared.bytes_sent.load(Ordering::Relaxed)
    }

    /// Whether this connection hashes raw payloads: `ClientConfig::verify_payloads` applied to
    /// the server's address (decision 0015). Zstd payloads are hashed either way.
    pub fn verifies_raw_payloads(&self) -> bool {
        self.shared.hash_raw
    }

    /// The protocol version HELLO negotiated: 2 with a server that has contexts by name, tags,
    /// listing and key-value; 1 with an older one (those calls are then
    /// `ClientError::Unsupported`, refused before sending).
    pub fn protocol_version(&self) -> u16 {
        self.shared.version.load(Ordering::Relaxed)
    }

    /// Sends any request and waits for its response. ERROR responses become
    /// `ClientError::Server`; a request the protocol cannot carry (a field over its limit)
    /// is `ClientError::InvalidArgument`, and one the negotiated version does not have (see
    /// `protocol_version`) is `ClientError::Unsupported`; neither is sent.
    pub async fn request(&self, request: Request) -> Result<Response, ClientError> {
        let timeout = self.shared.config.request_timeout;
        self.request_within(request, timeout, "ClientConfig::request_timeout")
            .await
    }

    /// `request` with its own timeout; `setting` names where it came from (for the error).
    async fn request_within(
        &self,
        request: Request,
        timeout: Option<Duration>,
        setting: &'static str,
    ) -> Result<Response, ClientError> {
        let request_name = request.message_type().name();
        let version = self.protocol_version();
        let needed =
            if request.frame_flags() & (frame_flags::CTX_BY_NAME | frame_flags::OVERLAYS) != 0 {
                request.message_type().since_version().max(2)
            } else {
                request.message_type().since_version()
            };
        // A version-1 server would answer UNKNOWN_MESSAGE, or BAD_FRAME and a closed
        // connection for a frame flag it does not know: say why here instead.
        if needed > version {
            return Err(ClientError::Unsupported {
                request: request_name,
                needed,
                version,
            });
        }
        let req_id = self.shared.next_req_id.fetch_add(1, Ordering::Relaxed);
        // Before a waiter is registered: a request refused here leaves nothing behind.
        let frame = encode_request_chunks(req_id, &request)?;
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
        let (reply, answer) = oneshot::channel();
        {
            let mut state = self
                .shared
                .pending
                .lock()
                .map_err(|_| ClientError::Closed("poisoned".into()))?;
            if let Some(reason) = &state.closed {
                return Err(ClientError::Closed(reason.clone()));
            }
            state.waiting.insert(req_id, reply);
        }
        if self.shared.outgoing.send(frame).is_err() {
            if let Ok(mut state) = self.shared.pending.lock() {
                state.waiting.remove(&req_id);
            }
            return Err(ClientError::Closed("writer stopped".into()));
        }
        let answer = match timeout {
            None => answer.await,
            Some(timeout) => match tokio::time::timeout(timeout, answer).await {
                Ok(answer) => answer,
                Err(_) => {
                    // Forget the waiter: a late response finds no one and is dropped.
                    if let Ok(mut state) = self.shared.pending.lock() {
                        state.waiting.remove(&req_id);
                    }
                    return Err(ClientError::Timeout {
                        request: request_name,
                        timeout,
                        setting,
                    });
                }
            },
        };
        match answer {
            Ok(Ok(Response::Error {
                code,
                detail,
                message,
            })) => Err(ClientError::Server {
                code,
                detail,
                message,
            }),
            Ok(result) => result,
            Err(_) => Err(ClientError::Closed("connection lost".into())),
        }
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

    /// A read of turns, in this handle's overlay view when it has one: the answer, and one
    /// overlay state per turn of it (`None` without a view).
    async fn read(
        &self,
        request: Request,
    ) -> Result<(Response, Option<Vec<OverlayWire>>), ClientError> {
        let Some(as_of) = self.view else {
            return Ok((self.request(request).await?, None));
        };
        let message_type = request.message_type();
        let request = Request::AsOf {
            as_of,
            read: Box::new(request),
        };
        match self.request(request).await? {
            Response::Overlaid { response, overlays } => Ok((*response, Some(overlays))),
            other => Err(ClientError::Protocol(format!(
                "{} in an overlay view was answered without overlay states ({:#06x})",
                message_type.name(),
                other.msg_type()
            ))),
        }
    }

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
        let request = Request::PatchTurn {
            turn_id: turn,
            payload,
        };
        match self.request(request).await? {
            Response::Patched {
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
            other => Err(unexpected(MessageType::PatchTurn, &other)),
        }
    }

    /// Takes a turn's payload away in every view (REDACT_TURN, protocol version 2): reads
    /// return it `redacted`, with an empty payload; its bytes leave the disk at the next
    /// garbage collection. Final: a second redaction (or a patch) is
    /// `ErrorCode::InvalidArgument`; no such turn is `ErrorCode::NotFound`.
    pub async fn redact_turn(&self, turn: u64) -> Result<Redacted, ClientError> {
        match self.request(Request::RedactTurn { turn_id: turn }).await? {
            Response::Redacted {
                turn_id,
                overlay_seq,
            } if turn_id == turn => Ok(Redacted {
                turn_id,
                overlay_seq,
            }),
            other => Err(unexpected(MessageType::RedactTurn, &other)),
        }
    }

    /// Redacts every turn naming the blob and makes reads of it by hash `NotFound`
    /// (PURGE_BLOB, protocol version 2; the compliance path): its bytes leave the disk at the
    /// next garbage collection (`gc`). A hash the store never had is `ErrorCode::NotFound`.
    pub async fn purge_blob(&self, hash: BlobHash) -> Result<Purged, ClientError> {
        let request = Request::PurgeBlob { hash };
        match self.request(request).await? {
            Response::Purged {
                payload_hash,
                turns_redacted,
                overlay_seq,
            } if payload_hash.0 == hash.0 => Ok(Purged {
                payload_hash: hash,
                turns_redacted,
                overlay_seq,
            }),
            other => Err(unexpected(MessageType::PurgeBlob, &other)),
        }
    }

    pub async fn ping(&self, nonce: u64) -> Result<(), ClientError> {
        match self.request(Request::Ping { nonce }).await? {
            Response::Pong { nonce: echoed } if echoed == nonce => Ok(()),
            other => Err(unexpected(MessageType::Ping, &other)),
        }
    }

    /// A new, empty context.
    pub async fn create_context(&self) -> Result<ContextHead, ClientError> {
        self.context(Request::CtxCreate { base_turn_id: 0 }).await
    }

    /// A new context whose head is the turn `base` (CTX_CREATE from a base turn).
    pub async fn create_context_from(&self, base: u64) -> Result<ContextHead, ClientError> {
        self.context(Request::CtxCreate { base_turn_id: base })
            .await
    }

    /// A new context whose head is the turn `turn` (CTX_FORK): copies nothing.
    pub async fn fork(&self, turn: u64) -> Result<ContextHead, ClientError> {
        self.context(Request::CtxFork { turn_id: turn }).await
    }

    pub async fn head(&self, context: impl Into<ContextRef>) -> Result<ContextHead, ClientError> {
        self.context(Request::GetHead {
            context: context.into(),
        })
        .await
    }

    async fn context(&self, request: Request) -> Result<ContextHead, ClientError> {
        let message_type = request.message_type();
        match self.request(request).await? {
            Response::Context { head, .. } => Ok(head.into()),
            other => Err(unexpected(message_type, &other)),
        }
    }

    /// Appends a turn; durable when it returns. `expected_head`: compare-and-set on the head
    /// (0 = the context must be empty); a moved head is `ErrorCode::Conflict` with the actual
    /// head in `detail`.
    ///
    /// A payload larger than `ClientConfig::chunking`'s threshold, on a version-2 connection,
    /// is stored as chunks first, sending only those the server lacks (see `store_chunked`),
    /// then appended by hash (APPEND_TURN_BY_HASH): three round trips instead of one, and the
    /// bytes the payload grew by instead of all of it. `deduped` says whether the whole
    /// payload was stored before this call, as for an append by value.
    pub async fn append(
        &self,
        context: impl Into<ContextRef>,
        expected_head: Option<u64>,
        type_tag: u64,
        codec: u32,
        payload: Bytes,
    ) -> Result<Appended, ClientError> {
        let context = context.into();
        let request = Request::AppendTurn {
            context: context.clone(),
            expected_head,
            type_tag,
            codec,
            payload: payload.clone(),
        };
        if self.chunking_for(payload.len()).is_none() {
            return self.appended(request).await;
        }
        // What the wire cannot carry is refused before any chunk is sent.
        check_request(&request)?;
        if let Some(stored) = self.store_chunked(&payload).await? {
            let by_hash = Request::AppendTurnByHash {
                context,
                expected_head,
                type_tag,
                codec,
                payload_hash: stored.payload_hash,
            };
            let mut appended = self.appended(by_hash).await?;
            // The server answers an append by hash deduped (the blob was there): say instead
            // whether it was there before this call.
            appended.deduped = stored.already_stored;
            return Ok(appended);
        }
        self.appended(request).await
    }

    /// Stores a payload given as its chunks, in order (PUT_CHUNKED, protocol version 2):
    /// `sent` carries `(index into chunks, bytes)` for the chunks the server does not have
    /// (strictly increasing indexes; any subset; each checked against its hash there); the
    /// server must have every other one already. The chunks rebuild the payload, which must
    /// hash to `hash`. Append it then with `append_by_hash`. Errors: `ErrorCode::NotFound`
    /// when a chunk not sent is not stored (nothing is written; the message names the
    /// missing indexes), `ErrorCode::HashMismatch` when a sent chunk or the rebuilt payload
    /// does not hash to what it claims, `ErrorCode::TooLarge` above the server's blob limit,
    /// `ClientError::InvalidArgument` for what the protocol cannot carry (no chunks, more
    /// than 65,536, a chunk of 0 B or over 1 MiB, bytes of another length than their chunk).
    /// `ClientConfig::chunking` does all this by itself for appends by value.
    pub async fn put_chunked(
        &self,
        hash: BlobHash,
        chunks: Vec<ChunkRef>,
        sent: Vec<(u32, Bytes)>,
    ) -> Result<ChunkedStored, ClientError> {
        let payload_len: u64 = chunks.iter().map(|chunk| u64::from(chunk.len)).sum();
        self.put_chunked_after(hash, None, chunks, sent)
            .await
            .and_then(|stored| {
                if stored.payload_len == payload_len {
                    Ok(stored)
                } else {
                    Err(ClientError::Protocol(format!(
                        "CHUNKED_STORED says {} bytes for {payload_len} bytes of chunks",
                        stored.payload_len
                    )))
                }
            })
    }

    /// `put_chunked` with a base: the payload's first `kept` chunks are the first `kept`
    /// chunks of the chunked blob `base` the server stores, `chunks` (and the indexes of
    /// `sent`) follow them — a grown state names the previous one and sends only what comes
    /// after the shared prefix. A base the server no longer has is `ErrorCode::NotFound`.
    pub async fn put_chunked_after(
        &self,
        hash: BlobHash,
        base: Option<(BlobHash, u32)>,
        chunks: Vec<ChunkRef>,
        sent: Vec<(u32, Bytes)>,
    ) -> Result<ChunkedStored, ClientError> {
        let request = Request::PutChunked {
            payload_hash: hash,
            base: base.map(|(hash, kept)| ChunkBaseWire { hash, kept }),
            chunks: chunks
                .into_iter()
                .map(|chunk| ChunkWire {
                    hash: chunk.hash,
                    len: chunk.len,
                })
                .collect(),
            sent: sent
                .into_iter()
                .map(|(index, bytes)| SentChunkWire { index, bytes })
                .collect(),
        };
        match self.request(request).await? {
            Response::ChunkedStored {
                payload_hash,
                payload_len,
                already_stored,
            } if payload_hash.0 == hash.0 => Ok(ChunkedStored {
                payload_hash: hash,
                payload_len,
                already_stored,
            }),
            other => Err(unexpected(MessageType::PutChunked, &other)),
        }
    }

    /// The automatic path of an append by value (issue 16): cuts `payload` into chunks as
    /// `ClientConfig::chunking` says, asks HAS_BLOBS for the whole payload's hash and every
    /// distinct chunk hash (in requests of at most the server's `has_blobs_max`; the first
    /// one holds the whole payload's hash: if it is stored, nothing else is sent), then sends
    /// PUT_CHUNKED with the bytes of the chunks the server lacks (at every index where such a
    /// chunk occurs: the server takes a chunk it is not sent only if it has it stored). A
    /// PUT_CHUNKED answered NOT_FOUND (a chunk collected between HAS_BLOBS and the put) is
    /// sent once more with every chunk.
    ///
    /// The chunks are sent even when the server has none of them (rather than the payload
    /// whole): a unique payload cannot be told from one the server cut otherwise (other
    /// `--chunk-*` sizes than this client's), and the chunks stored now are what the next,
    /// grown state finds. A unique large payload (an image) thus costs
    /// about 4 % more bytes and two round trips more than a whole append; raise the threshold
    /// or turn chunking off for such traffic.
    ///
    /// `None` when the payload travels whole instead: a version-1 connection, chunking off, a
    /// payload at or below the threshold, a server that does not know PUT_CHUNKED (it
    /// answered UNKNOWN_MESSAGE once; remembered), more chunks than one PUT_CHUNKED names,
    /// or a PUT_CHUNKED over the server's frame limit.
    async fn store_chunked(&self, payload: &Bytes) -> Result<Option<ChunkedStored>, ClientError> {
        let Some(config) = self.chunking_for(payload.len()) else {
            return Ok(None);
        };
        let pieces = crate::chunking::split_into_chunks(&config, payload);
        if pieces.is_empty() || pieces.len() > CHUNKS_PER_PAYLOAD_MAX as usize {
            return Ok(None);
        }
        let payload_hash = BlobHash::of(payload);
        // The previous state of the same thread, if this client stored it: its chunks up to
        // where the two differ are named, not listed (at least one chunk stays listed).
        let base = self.recent_base(&pieces);
        let kept = base.map_or(0, |(_, kept)| kept as usize);
        let mut asked = vec![payload_hash];
        let mut distinct = HashSet::with_capacity(pieces.len());
        for (chunk, _) in &pieces[kept..] {
            if distinct.insert(chunk.hash) {
                asked.push(chunk.hash);
            }
        }
        let per_request = self
            .server_limits()
            .has_blobs_max
            .clamp(1, LIST_ITEMS_LIMIT) as usize;
        let mut present = HashSet::with_capacity(asked.len());
        for (part, hashes) in asked.chunks(per_request).enumerate() {
            let answer = self.has_blobs(hashes).await?;
            if part == 0 && answer.first() == Some(&true) {
                return Ok(Some(ChunkedStored {
                    payload_hash,
                    payload_len: payload.len() as u64,
                    already_stored: true,
                }));
            }
            for (hash, stored) in hashes.iter().zip(answer) {
                if stored {
                    present.insert(*hash);
                }
            }
        }
        let first = self
            .put_missing(payload_hash, base, &pieces[kept..], &present)
            .await;
        let outcome = match first {
            // A chunk or the base collected between HAS_BLOBS and the put: all of it again.
            Err(ClientError::Server {
                code: ErrorCode::NotFound,
                ..
            }) => {
                let every = self
                    .put_missing(payload_hash, None, &pieces, &HashSet::new())
                    .await;
                self.put_outcome(every)
            }
            other => self.put_outcome(other),
        };
        if let Ok(Some(_)) = &outcome {
            self.remember_chunked(payload_hash, &pieces);
        }
        outcome
    }

    /// A recently stored payload that starts like `pieces` and how many chunks they share
    /// (fewer than `pieces` has: a PUT_CHUNKED lists one chunk at least).
    fn recent_base(&self, pieces: &[(ChunkRef, Bytes)]) -> Option<(BlobHash, u32)> {
        let first = pieces.first()?.0.hash;
        let recent = self
            .shared
            .recent_chunked
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (base, chunks) = recent.get(&first)?;
        let shared = chunks
            .iter()
            .zip(pieces)
            .take_while(|(old, (new, _))| *old == new)
            .count()
            .min(pieces.len() - 1);
        (shared > 0).then_some((*base, shared as u32))
    }

    fn remember_chunked(&self, payload_hash: BlobHash, pieces: &[(ChunkRef, Bytes)]) {
        let Some((first, _)) = pieces.first() else {
            return;
        };
        let mut recent = self
            .shared
            .recent_chunked
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if recent.len() >= RECENT_CHUNKED_MAX {
            recent.clear();
        }
        let chunks: Arc<[ChunkRef]> = pieces.iter().map(|(chunk, _)| *chunk).collect();
        recent.insert(first.hash, (payload_hash, chunks));
    }

    /// The chunking a payload of `len` bytes gets: `None` on a version-1 connection, with
    /// chunking off, at or below the threshold, or once the server proved not to know
    /// PUT_CHUNKED.
    fn chunking_for(&self, len: usize) -> Option<ChunkingConfig> {
        let config = self.shared.config.chunking?;
        let chunked = self.protocol_version() >= 2
            && config.applies_to(len)
            && !self.shared.no_put_chunked.load(Ordering::Relaxed);
        chunked.then_some(config)
    }

    /// One PUT_CHUNKED listing `pieces` (after `base`'s kept chunks) and sending those not in
    /// `present`; `None` when that frame would be over the server's frame limit (the payload
    /// then goes whole).
    async fn put_missing(
        &self,
        payload_hash: BlobHash,
        base: Option<(BlobHash, u32)>,
        pieces: &[(ChunkRef, Bytes)],
        present: &HashSet<BlobHash>,
    ) -> Result<Option<ChunkedStored>, ClientError> {
        let sent: Vec<(u32, Bytes)> = pieces
            .iter()
            .enumerate()
            .filter(|(_, (chunk, _))| !present.contains(&chunk.hash))
            .map(|(index, (_, bytes))| (index as u32, bytes.clone()))
            .collect();
        // hash, base hash and kept, chunk count, the chunks, sent count, then index, len and
        // bytes per sent chunk.
        let body_bytes = 32
            + 36
            + 4
            + pieces.len() * CHUNK_ENTRY_BYTES
            + 4
            + sent.iter().map(|(_, bytes)| 8 + bytes.len()).sum::<usize>();
        let frame_bytes_max = self.server_limits().frame_bytes_max as usize;
        if frame_bytes_max > 0 && body_bytes > frame_bytes_max {
            return Ok(None);
        }
        let chunks = pieces.iter().map(|(chunk, _)| *chunk).collect();
        self.put_chunked_after(payload_hash, base, chunks, sent)
            .await
            .map(Some)
    }

    /// A PUT_CHUNKED's answer as `store_chunked` returns it: UNKNOWN_MESSAGE means a server
    /// without the message, remembered, and the payload goes whole.
    fn put_outcome(
        &self,
        outcome: Result<Option<ChunkedStored>, ClientError>,
    ) -> Result<Option<ChunkedStored>, ClientError> {
        match outcome {
            Err(ClientError::Server {
                code: ErrorCode::UnknownMessage,
                ..
            }) => {
                self.shared.no_put_chunked.store(true, Ordering::Relaxed);
                Ok(None)
            }
            other => other,
        }
    }

    /// Appends a turn whose payload is already stored, by its hash (no upload).
    pub async fn append_by_hash(
        &self,
        context: impl Into<ContextRef>,
        expected_head: Option<u64>,
        type_tag: u64,
        codec: u32,
        hash: BlobHash,
    ) -> Result<Appended, ClientError> {
        let payload_hash = hash;
        let request = Request::AppendTurnByHash {
            context: context.into(),
            expected_head,
            type_tag,
            codec,
            payload_hash,
        };
        self.appended(request).await
    }

    async fn appended(&self, request: Request) -> Result<Appended, ClientError> {
        let message_type = request.message_type();
        match self.request(request).await? {
            Response::Appended { turn, deduped, .. } => Ok(Appended {
                turn: Turn::from_wire(&turn, None),
                deduped,
            }),
            other => Err(unexpected(message_type, &other)),
        }
    }

    pub async fn turn(&self, turn: u64) -> Result<Turn, ClientError> {
        match self.read(Request::GetTurn { turn_id: turn }).await? {
            (Response::Turn(turn), overlays) => {
                let mut turns = vec![Turn::from_wire(&turn, None)];
                set_overlays(turns.iter_mut(), overlays)?;
                Ok(turns.remove(0))
            }
            (other, _) => Err(unexpected(MessageType::GetTurn, &other)),
        }
    }

    fn read_flags(&self, payloads: bool) -> u32 {
        match (payloads, self.shared.config.accept_zstd) {
            (false, _) => 0,
            (true, false) => read_flags::WITH_PAYLOADS,
            (true, true) => read_flags::WITH_PAYLOADS | read_flags::ACCEPT_ZSTD,
        }
    }

    /// The `limit` newest turns of a context, oldest first.
    pub async fn last(
        &self,
        context: impl Into<ContextRef>,
        limit: u32,
        payloads: bool,
    ) -> Result<Page, ClientError> {
        let read_flags = self.read_flags(payloads);
        self.page(Request::GetLast {
            context: context.into(),
            limit,
            read_flags,
        })
        .await
    }

    /// The `limit` turns older than `before` (a page's `next_before`), oldest first.
    pub async fn before(
        &self,
        context: impl Into<ContextRef>,
        before: u64,
        limit: u32,
        payloads: bool,
    ) -> Result<Page, ClientError> {
        let read_flags = self.read_flags(payloads);
        self.page(Request::GetBefore {
            context: context.into(),
            before_turn_id: before,
            limit,
            read_flags,
        })
        .await
    }

    /// Turns of the context's chain with depth in `from_depth..from_depth + limit`.
    pub async fn range(
        &self,
        context: impl Into<ContextRef>,
        from_depth: u32,
        limit: u32,
        payloads: bool,
    ) -> Result<Page, ClientError> {
        let read_flags = self.read_flags(payloads);
        self.page(Request::GetRangeByDepth {
            context: context.into(),
            from_depth,
            limit,
            read_flags,
        })
        .await
    }

    /// The chain root → `turn`, a window of `limit` turns from `from_depth`.
    pub async fn chain(
        &self,
        turn: u64,
        from_depth: u32,
        limit: u32,
        payloads: bool,
    ) -> Result<Page, ClientError> {
        let read_flags = self.read_flags(payloads);
        self.page(Request::GetChain {
            turn_id: turn,
            from_depth,
            limit,
            read_flags,
        })
        .await
    }

    /// The whole chain root → `turn`, fetched in pages.
    pub async fn replay(&self, turn: u64, payloads: bool) -> Result<Vec<Turn>, ClientError> {
        let limit = self.server_limits().read_turns_max.clamp(1, 10_000);
        let mut turns: Vec<Turn> = Vec::new();
        loop {
            let from_depth = turns.last().map_or(0, |last| last.depth + 1);
            let page = self.chain(turn, from_depth, limit, payloads).await?;
            let done = page
                .turns
                .last()
                .is_none_or(|last| last.depth >= page.tip_depth);
            turns.extend(page.turns);
            if done {
                return Ok(turns);
            }
        }
    }

    async fn page(&self, request: Request) -> Result<Page, ClientError> {
        let message_type = request.message_type();
        match self.read(request).await? {
            (
                Response::Turns {
                    next_before,
                    tip_depth,
                    entries,
                    ..
                },
                overlays,
            ) => {
                let mut turns = verify_entries(entries, self.shared.hash_raw).await?;
                set_overlays(turns.iter_mut(), overlays)?;
                Ok(Page {
                    turns,
                    next_before,
                    tip_depth,
                })
            }
            (other, _) => Err(unexpected(message_type, &other)),
        }
    }

    /// A payload by hash, verified.
    pub async fn blob(&self, hash: BlobHash) -> Result<Bytes, ClientError> {
        let read_flags = if self.shared.config.accept_zstd {
            read_flags::ACCEPT_ZSTD
        } else {
            0
        };
        match self.request(Request::GetBlob { hash, read_flags }).await? {
            Response::Blob(payload) => verify_payload(&hash, None, payload, self.shared.hash_raw)?
                .ok_or_else(|| ClientError::Protocol("GET_BLOB answered without bytes".into())),
            other => Err(unexpected(MessageType::GetBlob, &other)),
        }
    }

    /// Which of `hashes` are stored.
    pub async fn has_blobs(&self, hashes: &[BlobHash]) -> Result<Vec<bool>, ClientError> {
        let request = Request::HasBlobs {
            hashes: hashes.to_vec(),
        };
        match self.request(request).await? {
            Response::HasBlobs { present } if present.len() == hashes.len() => Ok(present),
            other => Err(unexpected(MessageType::HasBlobs, &other)),
        }
    }

    /// The store's and the server's figures. On a version-2 server (STATS_EX) with the
    /// garbage collector's: `live_bytes`, `dead_bytes`, `gc_runs`, `bytes_reclaimed_total`;
    /// `None` on a server that does not have them (version 1, or older than garbage
    /// collection: then one STATS_EX answered UNKNOWN_MESSAGE, and STATS is asked instead).
    pub async fn stats(&self) -> Result<Stats, ClientError> {
        if self.protocol_version() >= 2 && !self.shared.no_stats_ex.load(Ordering::Relaxed) {
            match self.request(Request::StatsEx).await {
                Ok(Response::StatsEx { stats, gc }) => {
                    return Ok(Stats::from_wire(*stats, Some(gc)));
                }
                Ok(other) => return Err(unexpected(MessageType::StatsEx, &other)),
                Err(ClientError::Server {
                    code: ErrorCode::UnknownMessage,
                    ..
                }) => self.shared.no_stats_ex.store(true, Ordering::Relaxed),
                Err(error) => return Err(error),
            }
        }
        match self.request(Request::Stats).await? {
            Response::Stats(stats) => Ok(Stats::from_wire(stats, None)),
            other => Err(unexpected(MessageType::Stats, &other)),
        }
    }

    /// Runs a garbage collection on the server now (GC, protocol version 2) and returns what
    /// it did: the turns and blobs nothing live reaches any more are collected (a collected
    /// turn is `ErrorCode::NotFound` from then on), and packs whose dead share passes the
    /// server's `--gc-pack-dead-percent` are rewritten. One collection or backup at a time:
    /// while one runs (the server's schedule included) this is `ErrorCode::InvalidArgument`.
    ///
    /// Waits up to `ClientConfig::gc_timeout` (default 1 h), not `request_timeout`. A
    /// collection the client stops waiting for goes on on the server.
    pub async fn gc(&self) -> Result<GcReport, ClientError> {
        let timeout = self.shared.config.gc_timeout;
        match self
            .request_within(Request::Gc, timeout, "ClientConfig::gc_timeout")
            .await?
        {
            Response::GcDone(report) => Ok(report.into()),
            other => Err(unexpected(MessageType::Gc, &other)),
        }
    }

    // Contexts as agent threads (protocol version 2). Every call below is
    // `ClientError::Unsupported` on a connection that negotiated version 1, before sending.
    // A context is named by its ContextID (`u64`) or `ContextRef::Name`; an unknown one is
    // `ErrorCode::NotFound`.

    /// A new context (CTX_OPEN): empty or with its head at `new.base_turn_id`, optionally
    /// named and tagged. A taken name is `ErrorCode::AlreadyExists` with the owner's
    /// ContextID in `detail`, unless `new.get_or_create`: then the owner is answered with
    /// `created == false`.
    pub async fn open_context(&self, new: NewContext) -> Result<Opened, ClientError> {
        self.opened(Request::CtxOpen {
            base_turn_id: new.base_turn_id,
            get_or_create: new.get_or_create,
            clone_from: None,
            name: new.name,
            tags: new.tags.into_iter().collect(),
        })
        .await
        .map(|(context, created)| Opened { context, created })
    }

    /// A copy of `source` named `name` (CTX_OPEN with CLONE): the same head, tags and
    /// key-value entries, sharing every turn and blob (nothing is copied but metadata). A
    /// taken name is `ErrorCode::AlreadyExists`.
    pub async fn clone_context(
        &self,
        source: impl Into<ContextRef>,
        name: impl Into<String>,
    ) -> Result<ContextInfo, ClientError> {
        self.opened(Request::CtxOpen {
            base_turn_id: 0,
            get_or_create: false,
            clone_from: Some(source.into()),
            name: Some(name.into()),
            tags: Vec::new(),
        })
        .await
        .map(|(context, _)| context)
    }

    async fn opened(&self, request: Request) -> Result<(ContextInfo, bool), ClientError> {
        match self.request(request).await? {
            Response::Opened { info, created } => Ok((ContextInfo::from_wire(info), created)),
            other => Err(unexpected(MessageType::CtxOpen, &other)),
        }
    }

    /// A context's head, name, tags and times (CTX_SHOW).
    pub async fn context_info(
        &self,
        context: impl Into<ContextRef>,
    ) -> Result<ContextInfo, ClientError> {
        let request = Request::CtxShow {
            context: context.into(),
        };
        self.info(request).await
    }

    /// Sets the tags of `set` and removes the keys of `remove`, atomically (CTX_TAG); with
    /// `expected_head`, only if the head is still that turn (0: still empty), else
    /// `ErrorCode::Conflict` with the actual head in `detail` and nothing changed. Answers the
    /// context as it is after the change. Limits: ≤ 32 tags per context, keys 1..=64 bytes,
    /// values 1..=1024 bytes (TOO_LARGE).
    pub async fn tag_context<K, V, R>(
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
        let request = Request::CtxTag {
            context: context.into(),
            expected_head,
            set: set
                .into_iter()
                .map(|(key, value)| (key.into(), value.into()))
                .collect(),
            remove: remove.into_iter().map(Into::into).collect(),
        };
        self.info(request).await
    }

    /// Names a context that has no name yet (CTX_NAME). A taken name is
    /// `ErrorCode::AlreadyExists` (owner in `detail`).
    pub async fn name_context(
        &self,
        context: impl Into<ContextRef>,
        name: impl Into<String>,
    ) -> Result<ContextInfo, ClientError> {
        let request = Request::CtxName {
            context: context.into(),
            name: name.into(),
        };
        self.info(request).await
    }

    async fn info(&self, request: Request) -> Result<ContextInfo, ClientError> {
        let message_type = request.message_type();
        match self.request(request).await? {
            Response::ContextInfo { info, .. } => Ok(ContextInfo::from_wire(info)),
            other => Err(unexpected(message_type, &other)),
        }
    }

    // Retention (protocol version 2, issue 15). Each names the context by its ContextID or
    // `ContextRef::Name`; an unknown (or deleted) one is `ErrorCode::NotFound`.

    /// Deletes a context (CTX_DELETE): from then on every request naming it is
    /// `ErrorCode::NotFound`, its name may be taken by a new context, and its ContextID is
    /// never reused. Its turns and blobs stay while another context (a fork, a clone) or a
    /// link reaches them. Returns the context as it was just before.
    pub async fn delete_context(
        &self,
        context: impl Into<ContextRef>,
    ) -> Result<ContextRetention, ClientError> {
        let request = Request::CtxDelete {
            context: context.into(),
        };
        self.retention(request).await
    }

    /// Keeps the newest `keep` depths of the context's chain reachable through it
    /// (CTX_PRUNE): the floor becomes head depth + 1 − `keep`, never lower than it was. Reads
    /// through the context stop at the floor, on every branch; an append whose parent lies
    /// below it is `ErrorCode::InvalidArgument`. `keep` 0 is `ErrorCode::InvalidArgument`
    /// (that is `delete_context`). Returns the context after the change.
    pub async fn prune_context(
        &self,
        context: impl Into<ContextRef>,
        keep: u32,
    ) -> Result<ContextRetention, ClientError> {
        let request = Request::CtxPrune {
            context: context.into(),
            keep,
        };
        self.retention(request).await
    }

    /// Sets (`Some`) or clears (`None`) the context's own time to live (CTX_TTL with SET):
    /// once it has not been updated for that long, the server deletes it. Whole milliseconds
    /// (a finer remainder is dropped); under 1 ms is `ClientError::InvalidArgument` (clear
    /// with `None`), over 100 years the server's `ErrorCode::InvalidArgument`. Returns the
    /// context after the change.
    pub async fn set_context_ttl(
        &self,
        context: impl Into<ContextRef>,
        ttl: Option<Duration>,
    ) -> Result<ContextRetention, ClientError> {
        let ttl_ms = match ttl {
            None => 0,
            Some(ttl) => ttl_millis(ttl)?,
        };
        let request = Request::CtxTtl {
            context: context.into(),
            set: true,
            ttl_ms,
        };
        self.retention(request).await
    }

    /// The context with its floor and time to live, changing nothing (CTX_TTL without SET):
    /// what `context_info` answers, plus the retention settings.
    pub async fn context_retention(
        &self,
        context: impl Into<ContextRef>,
    ) -> Result<ContextRetention, ClientError> {
        let request = Request::CtxTtl {
            context: context.into(),
            set: false,
            ttl_ms: 0,
        };
        self.retention(request).await
    }

    async fn retention(&self, request: Request) -> Result<ContextRetention, ClientError> {
        let message_type = request.message_type();
        match self.request(request).await? {
            Response::Retention {
                message_type: answered,
                info,
                floor_depth,
                ttl_ms,
            } if answered == message_type => {
                Ok(ContextRetention::from_wire(info, floor_depth, ttl_ms))
            }
            other => Err(unexpected(message_type, &other)),
        }
    }

    /// Has the server write a consistent copy of its store into `dir` while it goes on
    /// serving (BACKUP, protocol version 2): everything acknowledged before the backup
    /// started is in it; the copy opens with `ctxstore-server --data DIR` and passes
    /// `ctxstore-server verify`. `dir` is a path **on the server's host**: absolute (else
    /// `ClientError::InvalidArgument`, before sending), and absent or an empty directory
    /// outside the store (else the server's `ErrorCode::InvalidArgument`). Sealed packs are
    /// hard-linked when the copy is on the store's file system.
    ///
    /// Waits up to `ClientConfig::backup_timeout` (default 24 h), not `request_timeout`: the
    /// server answers when the copy is complete. A backup the client stops waiting for goes on
    /// on the server.
    pub async fn backup(&self, dir: impl Into<String>) -> Result<BackupReport, ClientError> {
        let dir = dir.into();
        if !std::path::Path::new(&dir).is_absolute() {
            return Err(ClientError::InvalidArgument(format!(
                "backup directory {dir:?} is not an absolute path (a path on the server's host)"
            )));
        }
        let timeout = self.shared.config.backup_timeout;
        let request = Request::Backup { dir };
        match self
            .request_within(request, timeout, "ClientConfig::backup_timeout")
            .await?
        {
            Response::BackedUp(report) => Ok(report.into()),
            other => Err(unexpected(MessageType::Backup, &other)),
        }
    }

    /// One page of the contexts matching `query` (CTX_LIST), from the start (`cursor`
    /// `None`) or after a previous page's `next_cursor`. Each context that matches
    /// throughout is returned at most once across pages, whatever changes in between;
    /// one that starts or stops matching meanwhile may or may not be.
    pub async fn list_contexts(
        &self,
        query: &ContextQuery,
        cursor: Option<&ListCursor>,
    ) -> Result<ContextListPage, ClientError> {
        let request = Request::CtxList {
            tags: query
                .tags
                .iter()
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
            name_prefix: query.name_prefix.clone(),
            updated_after_unix_ms: query.updated_after_unix_ms,
            updated_before_unix_ms: query.updated_before_unix_ms,
            cursor: cursor.map(|cursor| cursor.0.clone()),
            limit: query.page_limit,
        };
        match self.request(request).await? {
            Response::ContextList {
                next_cursor,
                contexts,
            } => Ok(ContextListPage {
                contexts: contexts.into_iter().map(ContextInfo::from_wire).collect(),
                next_cursor: next_cursor.map(ListCursor),
            }),
            other => Err(unexpected(MessageType::CtxList, &other)),
        }
    }

    /// Every context matching `query` (or the first `count_max`), following the cursor page
    /// by page (`query.page_limit` each). Not a snapshot: see `list_contexts`.
    pub async fn list_all_contexts(
        &self,
        query: &ContextQuery,
        count_max: Option<usize>,
    ) -> Result<Vec<ContextInfo>, ClientError> {
        let mut contexts = Vec::new();
        let mut cursor: Option<ListCursor> = None;
        loop {
            let mut page_query = query.clone();
            if let Some(count_max) = count_max {
                let left = count_max.saturating_sub(contexts.len());
                if left == 0 {
                    return Ok(contexts);
                }
                let left = u32::try_from(left).unwrap_or(u32::MAX);
                page_query.page_limit = page_query.page_limit.min(left);
            }
            let page = self.list_contexts(&page_query, cursor.as_ref()).await?;
            contexts.extend(page.contexts);
            match page.next_cursor {
                None => return Ok(contexts),
                // A cursor that does not move would make this loop forever.
                Some(next) if Some(&next) == cursor.as_ref() => {
                    return Err(ClientError::Protocol(format!(
                        "CTX_LIST answered the same cursor again ({next:?})"
                    )));
                }
                Some(next) => cursor = Some(next),
            }
        }
    }

    /// Puts key-value entries into a context in one request and one group commit (KV_PUT):
    /// each value is stored as a blob (equal values once), then every entry at once. With
    /// `if_absent`, keys the context has keep their values (no error). Limits: ≤ 128 entries,
    /// keys 1..=256 bytes, values within the server's `blob_bytes_max` (TOO_LARGE).
    pub async fn kv_put(
        &self,
        context: impl Into<ContextRef>,
        entries: Vec<(Bytes, Bytes)>,
        if_absent: bool,
    ) -> Result<(), ClientError> {
        let request = Request::KvPut {
            context: context.into(),
            if_absent,
            entries,
        };
        self.done(request).await
    }

    /// A key's value and its hash (KV_GET), verified against the hash like every payload
    /// (inflated first when the server sent it compressed). `None` when the context exists
    /// but has no such key; an unknown context stays `ErrorCode::NotFound`. (The server
    /// answers both with NOT_FOUND; on a NOT_FOUND this asks CTX_SHOW which it was: one
    /// more round trip, on a miss only.)
    pub async fn kv_get(
        &self,
        context: impl Into<ContextRef>,
        key: impl Into<Bytes>,
    ) -> Result<Option<(BlobHash, Bytes)>, ClientError> {
        let context = context.into();
        let read_flags = if self.shared.config.accept_zstd {
            read_flags::ACCEPT_ZSTD
        } else {
            0
        };
        let request = Request::KvGet {
            context: context.clone(),
            key: key.into(),
            read_flags,
        };
        match self.request(request).await {
            Ok(Response::KvValue {
                value_hash,
                payload,
            }) => {
                let value = verify_payload(&value_hash, None, payload, self.shared.hash_raw)?
                    .ok_or_else(|| {
                        ClientError::Protocol("KV_GET answered without the value's bytes".into())
                    })?;
                Ok(Some((value_hash, value)))
            }
            Ok(other) => Err(unexpected(MessageType::KvGet, &other)),
            Err(missing) if missing.code() == Some(ErrorCode::NotFound) => {
                // The context's own NOT_FOUND if it is the context that is missing.
                self.context_info(context).await?;
                Ok(None)
            }
            Err(other) => Err(other),
        }
    }

    /// Deletes key-value entries (KV_DELETE), in one group commit; keys that are not there
    /// are no error. Limits: ≤ 128 keys, each 1..=256 bytes.
    pub async fn kv_delete(
        &self,
        context: impl Into<ContextRef>,
        keys: Vec<Bytes>,
    ) -> Result<(), ClientError> {
        let request = Request::KvDelete {
            context: context.into(),
            keys,
        };
        self.done(request).await
    }

    async fn done(&self, request: Request) -> Result<(), ClientError> {
        let message_type = request.message_type();
        match self.request(request).await? {
            Response::Done { message_type: done } if done == message_type => Ok(()),
            other => Err(unexpected(message_type, &other)),
        }
    }

    /// One page of a context's key-value entries whose keys start with `prefix`, in key
    /// order, after the key `after` (empty: from the first), at most `limit` (≤ 1000)
    /// (KV_LIST). The next page starts after the last key of a full page; a page shorter than
    /// `limit` is the last.
    pub async fn kv_list(
        &self,
        context: impl Into<ContextRef>,
        prefix: &[u8],
        after: &[u8],
        limit: u32,
    ) -> Result<Vec<KvItem>, ClientError> {
        let request = Request::KvList {
            context: context.into(),
            prefix: Bytes::copy_from_slice(prefix),
            after: Bytes::copy_from_slice(after),
            limit,
        };
        match self.request(request).await? {
            Response::KvList { items } => {
                let items: Vec<KvItem> = items.into_iter().map(KvItem::from_wire).collect();
                // Pages are cut by key: keys out of order or outside the prefix would make
                // the next page skip or repeat entries.
                let in_order = items.windows(2).all(|pair| pair[0].key < pair[1].key);
                let after_cursor = items.first().is_none_or(|first| &first.key[..] > after);
                let prefixed = items.iter().all(|item| item.key.starts_with(prefix));
                if items.len() > limit as usize || !in_order || !after_cursor || !prefixed {
                    return Err(ClientError::Protocol(format!(
                        "KV_LIST answered {} entries not in key order after the cursor, within \
                         the prefix and the limit of {limit}",
                        items.len()
                    )));
                }
                Ok(items)
            }
            other => Err(unexpected(MessageType::KvList, &other)),
        }
    }

    /// Every key-value entry of a context whose key starts with `prefix`, in key order,
    /// following `kv_list` page by page (1000 each). Not a snapshot: a key added meanwhile
    /// after the page being read is seen, one before it is not.
    pub async fn kv_list_all(
        &self,
        context: impl Into<ContextRef>,
        prefix: &[u8],
    ) -> Result<Vec<KvItem>, ClientError> {
        const PAGE: u32 = 1000;
        let context = context.into();
        let mut items: Vec<KvItem> = Vec::new();
        loop {
            let after = items
                .last()
                .map(|item| item.key.clone())
                .unwrap_or_default();
            let page = self.kv_list(context.clone(), prefix, &after, PAGE).await?;
            let full = page.len() == PAGE as usize;
            items.extend(page);
            if !full {
                return Ok(items);
            }
        }
    }

    // Turns for agent frameworks (protocol version 2, decision 0009). Every call below is
    // `ClientError::Unsupported` on a connection that negotiated version 1, before sending.
    // Turns come back as `TurnInfo`: the turn with its key, labels and links.

    fn require_version_2(&self, request: &'static str) -> Result<(), ClientError> {
        let version = self.protocol_version();
        if version < 2 {
            return Err(ClientError::Unsupported {
                request,
                needed: 2,
                version,
            });
        }
        Ok(())
    }

    /// Appends turns to one context, in order, all or none, in one request and one group
    /// commit (APPEND_TURNS; 1..=[`APPEND_BATCH_TURNS_MAX`] turns): e.g. an agent step's tool call,
    /// its result and a message. Durable when it returns. Each turn hangs on its `parent`
    /// (the head — for the second and later turns, the turn before it —, a new root, or a
    /// turn the context owns); the head moves to the last turn. `expected_head`: the
    /// compare-and-set of `append`, checked before the first turn.
    ///
    /// A turn whose key the context already has is not written: it comes back as that earlier
    /// turn (with the extras it was stored with) and `existing = true`, so an append retried
    /// after a lost answer is stored once. One `AppendedTurn` per turn, in order.
    ///
    /// Each payload given by value and larger than `ClientConfig::chunking`'s threshold is
    /// stored as chunks first, sending only those the server lacks (as `append` does), and
    /// goes in APPEND_TURNS by hash; `deduped` then says whether it was stored before this
    /// call. A payload stored so for a turn whose key turns out to exist stays unnamed until
    /// garbage collection takes it.
    pub async fn append_turns(
        &self,
        context: impl Into<ContextRef>,
        expected_head: Option<u64>,
        turns: Vec<NewTurn>,
    ) -> Result<Vec<AppendedTurn>, ClientError> {
        let context = context.into();
        let asked: Vec<_> = turns.iter().map(NewTurn::extras).collect();
        let mut specs: Vec<TurnSpec> = turns.into_iter().map(NewTurn::into_wire).collect();
        let mut stored_before = vec![None; specs.len()];
        let chunked = |spec: &TurnSpec| match &spec.payload {
            PayloadSpec::Bytes(payload) => self.chunking_for(payload.len()).is_some(),
            PayloadSpec::Hash(_) => false,
        };
        if specs.iter().any(chunked) {
            // What the wire cannot carry is refused before any chunk is sent.
            check_request(&Request::AppendTurns {
                context: context.clone(),
                expected_head,
                turns: specs.clone(),
            })?;
            for (spec, before) in specs.iter_mut().zip(&mut stored_before) {
                let PayloadSpec::Bytes(payload) = &spec.payload else {
                    continue;
                };
                if let Some(stored) = self.store_chunked(payload).await? {
                    spec.payload = PayloadSpec::Hash(stored.payload_hash);
                    *before = Some(stored.already_stored);
                }
            }
        }
        let request = Request::AppendTurns {
            context: context.clone(),
            expected_head,
            turns: specs,
        };
        let answered = match self.request(request).await? {
            Response::AppendedTurns { turns } => turns,
            other => return Err(unexpected(MessageType::AppendTurns, &other)),
        };
        if answered.len() != asked.len() {
            return Err(ClientError::Protocol(format!(
                "APPEND_TURNS of {} turns answered {}",
                asked.len(),
                answered.len()
            )));
        }
        let mut appended = Vec::with_capacity(answered.len());
        for (answer, extras) in answered.into_iter().zip(asked) {
            let turn = if answer.existing {
                // The answer is the earlier turn without its extras (they may differ from
                // what this call asked): read them by the key, one round trip per retry.
                let key = extras.key;
                match self.turn_by_key(context.clone(), key.clone()).await? {
                    Some(info) if info.turn.turn_id == answer.turn.turn_id => info,
                    found => {
                        return Err(ClientError::Protocol(format!(
                            "APPEND_TURNS answered turn {} as the one with the key {:?}, \
                             GET_TURN_BY_KEY answered {:?}",
                            answer.turn.turn_id,
                            String::from_utf8_lossy(&key),
                            found.map(|info| info.turn.turn_id)
                        )));
                    }
                }
            } else {
                // Written now: its extras are the ones asked for (labels sorted, as stored).
                TurnInfo::from_wire(&answer.turn, extras, None)
            };
            appended.push(AppendedTurn {
                turn,
                deduped: answer.deduped,
                existing: answer.existing,
            });
        }
        // Sent by hash after a chunked put: the server answers deduped (the blob was there by
        // then); say instead whether it was there before this call.
        for (appended, before) in appended.iter_mut().zip(stored_before) {
            if let Some(before) = before {
                appended.deduped = before;
            }
        }
        Ok(appended)
    }

    /// Appends one turn with its options (parent, key, labels, links, summary): `append_turns`
    /// with one turn.
    pub async fn append_turn(
        &self,
        context: impl Into<ContextRef>,
        expected_head: Option<u64>,
        turn: NewTurn,
    ) -> Result<AppendedTurn, ClientError> {
        let mut appended = self
            .append_turns(context, expected_head, vec![turn])
            .await?;
        appended
            .pop()
            .ok_or_else(|| ClientError::Protocol("APPEND_TURNS answered no turn".into()))
    }

    /// The context's turn with this key, with its extras (GET_TURN_BY_KEY): its own, or one it
    /// inherited through a fork or a clone. `None` when the context has no such key; an
    /// unknown context stays `ErrorCode::NotFound`. (The server answers both with NOT_FOUND;
    /// on a NOT_FOUND this asks CTX_SHOW which it was: one more round trip, on a miss only.)
    pub async fn turn_by_key(
        &self,
        context: impl Into<ContextRef>,
        key: impl Into<Bytes>,
    ) -> Result<Option<TurnInfo>, ClientError> {
        let context = context.into();
        let request = Request::GetTurnByKey {
            context: context.clone(),
            key: key.into(),
        };
        match self.read(request).await {
            Ok((Response::TurnInfo { turn, extras }, overlays)) => {
                let mut info = TurnInfo::from_wire(&turn, extras, None);
                set_overlays(std::iter::once(&mut info.turn), overlays)?;
                Ok(Some(info))
            }
            Ok((other, _)) => Err(unexpected(MessageType::GetTurnByKey, &other)),
            Err(missing) if missing.code() == Some(ErrorCode::NotFound) => {
                // The context's own NOT_FOUND if it is the context that is missing.
                self.context_info(context).await?;
                Ok(None)
            }
            Err(other) => Err(other),
        }
    }

    /// One turn by its id with its key, labels and links (`turn` returns it without them:
    /// GET_TURN does not carry them). Reads the turn, then its extras from the context it was
    /// appended to: one READ_PAGE when the turn is on that context's chain, else that
    /// context's turn log, page by page until the turn is found.
    pub async fn turn_info(&self, turn: u64) -> Result<TurnInfo, ClientError> {
        self.require_version_2("READ_PAGE")?;
        let turn = self.turn(turn).await?;
        let context_id = turn.context_id;
        let mut infos = self.with_extras(context_id, vec![turn]).await?;
        infos
            .pop()
            .ok_or_else(|| ClientError::Protocol("a turn without its extras".into()))
    }

    /// `replay` with each turn's key, labels and links: the chain root → `turn`, oldest
    /// first. The extras come from the context `turn` was appended to (its chain, else its
    /// turn log: every ancestor of a turn is a turn that context owns).
    pub async fn replay_info(
        &self,
        turn: u64,
        payloads: bool,
    ) -> Result<Vec<TurnInfo>, ClientError> {
        self.require_version_2("READ_PAGE")?;
        let turns = self.replay(turn, payloads).await?;
        let Some(context_id) = turns.last().map(|tip| tip.context_id) else {
            return Ok(Vec::new());
        };
        self.with_extras(context_id, turns).await
    }

    /// The extras of `turns`, all owned by `context_id`: from the context's chain when the
    /// deepest of them is on it (a page per `read_turns_max` depths), the rest from its turn
    /// log. Matched by TurnID, so a head that moves meanwhile costs requests, never a wrong
    /// answer (a turn's extras never change).
    async fn with_extras(
        &self,
        context_id: u64,
        turns: Vec<Turn>,
    ) -> Result<Vec<TurnInfo>, ClientError> {
        let wanted: HashSet<u64> = turns.iter().map(|turn| turn.turn_id).collect();
        let mut found: HashMap<u64, TurnInfo> = HashMap::new();
        let keep = |infos: Vec<TurnInfo>, found: &mut HashMap<u64, TurnInfo>| {
            for info in infos {
                if wanted.contains(&info.turn.turn_id) {
                    found.insert(info.turn.turn_id, info);
                }
            }
        };
        let (Some(low), Some(tip)) = (
            turns.iter().map(|turn| turn.depth).min(),
            turns.iter().max_by_key(|turn| turn.depth),
        ) else {
            return Ok(Vec::new());
        };
        let tip_depth = tip.depth;
        let probe = self
            .read_page(
                context_id,
                PageKind::Range {
                    from_depth: tip_depth,
                },
                1,
                false,
            )
            .await?;
        let on_chain = probe
            .turns
            .first()
            .is_some_and(|first| first.turn.turn_id == tip.turn_id);
        keep(probe.turns, &mut found);
        if on_chain {
            let page_max = self.server_limits().read_turns_max.clamp(1, 10_000);
            let mut depth = low;
            while depth < tip_depth && found.len() < wanted.len() {
                let limit = (tip_depth - depth).min(page_max);
                let page = self
                    .read_page(
                        context_id,
                        PageKind::Range { from_depth: depth },
                        limit,
                        false,
                    )
                    .await?;
                let next = page.turns.last().map(|last| last.turn.depth + 1);
                keep(page.turns, &mut found);
                match next {
                    Some(next) if next > depth => depth = next,
                    _ => break,
                }
            }
        }
        let mut cursor: Option<LogCursor> = None;
        while found.len() < wanted.len() {
            let page = self
                .turn_log(context_id, &[], cursor, LOG_PAGE_MAX, false)
                .await?;
            keep(page.turns, &mut found);
            match page.next_cursor {
                None => break,
                Some(next) if Some(next) == cursor => {
                    return Err(ClientError::Protocol(format!(
                        "TURN_LOG answered the same cursor again ({next:?})"
                    )));
                }
                Some(next) => cursor = Some(next),
            }
        }
        turns
            .into_iter()
            .map(|turn| match found.get(&turn.turn_id) {
                Some(info) => Ok(TurnInfo {
                    turn,
                    key: info.key.clone(),
                    labels: info.labels.clone(),
                    links: info.links.clone(),
                }),
                None => Err(ClientError::Protocol(format!(
                    "turn {} is not in the turn log of context {context_id}, which owns it",
                    turn.turn_id
                ))),
            })
            .collect()
    }

    /// One page of the context's turn log (TURN_LOG): every turn it owns, newest first
    /// across all its branches, then the turns it inherited (a clone: its source's up to the
    /// clone; a fork: its base's chain); only those carrying every label of `labels`
    /// (filtered on the server). `cursor`: `None` for the newest, else the previous page's
    /// `next_cursor`; `limit` 1..=[`LOG_PAGE_MAX`]. A page may be short, even empty, while
    /// more match: follow the cursor until it is `None` (or use `turn_log_all`):
    ///
    /// ```no_run
    /// # async fn run(client: ctxstore_client::Client) -> Result<(), ctxstore_client::ClientError> {
    /// let labels = [("run_id".to_string(), "r-1".to_string())];
    /// let mut cursor = None;
    /// loop {
    ///     let page = client.turn_log(7, &labels, cursor, 100, false).await?;
    ///     for info in &page.turns {
    ///         println!("{} {:?}", info.turn.turn_id, info.labels);
    ///     }
    ///     match page.next_cursor {
    ///         Some(next) => cursor = Some(next),
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn turn_log(
        &self,
        context: impl Into<ContextRef>,
        labels: &[(String, String)],
        cursor: Option<LogCursor>,
        limit: u32,
        payloads: bool,
    ) -> Result<LogPage, ClientError> {
        let read_flags = self.read_flags(payloads);
        let request = Request::TurnLog {
            context: context.into(),
            labels: labels.to_vec(),
            cursor: cursor.map(|cursor| cursor.0),
            limit,
            read_flags,
        };
        match self.read(request).await? {
            (
                Response::TurnLog {
                    next_cursor,
                    entries,
                },
                overlays,
            ) => {
                let mut turns = verify_entries_v2(entries, self.shared.hash_raw).await?;
                set_overlays(turns.iter_mut().map(|info| &mut info.turn), overlays)?;
                Ok(LogPage {
                    turns,
                    next_cursor: next_cursor.map(LogCursor),
                })
            }
            (other, _) => Err(unexpected(MessageType::TurnLog, &other)),
        }
    }

    /// The context's turn log (`turn_log`, followed page after page), newest first; the first
    /// `count_max` turns when given. Not a snapshot: turns appended meanwhile may or may not
    /// be seen.
    pub async fn turn_log_all(
        &self,
        context: impl Into<ContextRef>,
        labels: &[(String, String)],
        count_max: Option<usize>,
        payloads: bool,
    ) -> Result<Vec<TurnInfo>, ClientError> {
        let context = context.into();
        let mut turns = Vec::new();
        let mut cursor: Option<LogCursor> = None;
        loop {
            let left = count_max.map_or(usize::MAX, |max| max.saturating_sub(turns.len()));
            if left == 0 {
                return Ok(turns);
            }
            let limit = LOG_PAGE_MAX.min(u32::try_from(left).unwrap_or(u32::MAX));
            let page = self
                .turn_log(context.clone(), labels, cursor, limit, payloads)
                .await?;
            turns.extend(page.turns);
            match page.next_cursor {
                None => {
                    if let Some(max) = count_max {
                        turns.truncate(max);
                    }
                    return Ok(turns);
                }
                Some(next) if Some(next) == cursor => {
                    return Err(ClientError::Protocol(format!(
                        "TURN_LOG answered the same cursor again ({next:?})"
                    )));
                }
                Some(next) => cursor = Some(next),
            }
        }
    }

    /// A page of the context's chain with each turn's key, labels and links (READ_PAGE),
    /// oldest first: `PageKind::Last` reads what `last` reads, `Before` what `before` reads,
    /// `Range` what `range` reads, `Window` what `window` reads.
    pub async fn read_page(
        &self,
        context: impl Into<ContextRef>,
        kind: PageKind,
        limit: u32,
        payloads: bool,
    ) -> Result<TurnPage, ClientError> {
        let read_flags = self.read_flags(payloads);
        let request = Request::ReadPage {
            context: context.into(),
            kind,
            limit,
            read_flags,
        };
        match self.read(request).await? {
            (
                Response::Page {
                    next_before,
                    tip_depth,
                    entries,
                },
                overlays,
            ) => {
                let mut turns = verify_entries_v2(entries, self.shared.hash_raw).await?;
                set_overlays(turns.iter_mut().map(|info| &mut info.turn), overlays)?;
                Ok(TurnPage {
                    turns,
                    next_before,
                    tip_depth,
                })
            }
            (other, _) => Err(unexpected(MessageType::ReadPage, &other)),
        }
    }

    /// What an agent sends its model: the context's chain from its latest summary turn
    /// (inclusive; from the root when there is none) to the head, oldest first; its newest
    /// `limit` turns when it is longer (continue with `PageKind::Before` and `next_before`, or
    /// use `window_all`). READ_PAGE WINDOW.
    pub async fn window(
        &self,
        context: impl Into<ContextRef>,
        limit: u32,
        payloads: bool,
    ) -> Result<TurnPage, ClientError> {
        self.read_page(context, PageKind::Window, limit, payloads)
            .await
    }

    /// The whole window (`window`, then older pages down to the latest summary turn or the
    /// root), oldest first; its newest `count_max` turns when given. A head that moves to
    /// another branch between pages makes the next page `ErrorCode::InvalidArgument`; a
    /// window that fits one page (`read_turns_max` turns and the server's response budget) is
    /// read in one request.
    pub async fn window_all(
        &self,
        context: impl Into<ContextRef>,
        count_max: Option<usize>,
        payloads: bool,
    ) -> Result<Vec<TurnInfo>, ClientError> {
        let context = context.into();
        let page_max = self.server_limits().read_turns_max.clamp(1, 10_000) as usize;
        if count_max == Some(0) {
            return Ok(Vec::new());
        }
        let first_limit = count_max.map_or(page_max, |max| max.min(page_max));
        let page = self
            .window(context.clone(), first_limit as u32, payloads)
            .await?;
        let mut turns = page.turns;
        let mut before = page.next_before;
        loop {
            let at_start = turns
                .first()
                .is_none_or(|oldest| oldest.turn.summary() || oldest.turn.parent_turn_id == 0);
            let left = count_max.map_or(usize::MAX, |max| max.saturating_sub(turns.len()));
            if at_start || before == 0 || left == 0 {
                return Ok(turns);
            }
            let kind = PageKind::Before {
                before_turn_id: before,
            };
            let limit = left.min(page_max) as u32;
            let page = self
                .read_page(context.clone(), kind, limit, payloads)
                .await?;
            let mut older = page.turns;
            // The window starts at the latest summary turn: drop what lies before it.
            if let Some(summary) = older.iter().rposition(|info| info.turn.summary()) {
                older.drain(..summary);
            }
            if older.is_empty() {
                return Ok(turns);
            }
            before = page.next_before;
            older.append(&mut turns);
            turns = older;
        }
    }

    /// One page of the turns of every context carrying the label `key = value`, newest
    /// first, older than the turn `before` (0: from the newest), without payloads
    /// (FIND_TURNS; `limit` 1..=[`FIND_PAGE_MAX`]). Answered from the store-wide label index,
    /// which covers the keys `is_indexed_label` names; another key is
    /// `ErrorCode::InvalidArgument` (filter a context's `turn_log` by it instead).
    pub async fn find_turns(
        &self,
        key: impl Into<String>,
        value: impl Into<String>,
        before: u64,
        limit: u32,
    ) -> Result<FoundPage, ClientError> {
        let request = Request::FindTurns {
            key: key.into(),
            value: value.into(),
            before_turn_id: before,
            limit,
        };
        match self.read(request).await? {
            (Response::FoundTurns { next_before, turns }, overlays) => {
                let mut turns: Vec<TurnInfo> = turns
                    .into_iter()
                    .map(|(turn, extras)| TurnInfo::from_wire(&turn, extras, None))
                    .collect();
                set_overlays(turns.iter_mut().map(|info| &mut info.turn), overlays)?;
                Ok(FoundPage { turns, next_before })
            }
            (other, _) => Err(unexpected(MessageType::FindTurns, &other)),
        }
    }

    /// Every turn, in any context, carrying all of `labels` (at least one), newest first; the
    /// first `count_max` when given. The server finds the turns of the first indexed label
    /// (`is_indexed_label`; the first label when none is, which the server refuses with a
    /// message saying which keys are indexed); the other labels are checked here, page by
    /// page (`find_turns`).
    pub async fn find_all_turns(
        &self,
        labels: &[(String, String)],
        count_max: Option<usize>,
    ) -> Result<Vec<TurnInfo>, ClientError> {
        let Some((key, value)) = labels
            .iter()
            .find(|(key, _)| is_indexed_label(key))
            .or(labels.first())
        else {
            return Err(ClientError::InvalidArgument(
                "finding turns needs at least one label".into(),
            ));
        };
        let mut turns = Vec::new();
        let mut before = 0;
        loop {
            let left = count_max.map_or(usize::MAX, |max| max.saturating_sub(turns.len()));
            if left == 0 {
                return Ok(turns);
            }
            // With labels checked here, a page's matches are unknown: full pages.
            let limit = match labels.len() {
                1 => FIND_PAGE_MAX.min(u32::try_from(left).unwrap_or(u32::MAX)),
                _ => FIND_PAGE_MAX,
            };
            let page = self.find_turns(key, value, before, limit).await?;
            let matching = page
                .turns
                .into_iter()
                .filter(|info| labels.iter().all(|(key, value)| info.has_label(key, value)));
            turns.extend(matching.take(left));
            if page.next_before == 0 {
                return Ok(turns);
            }
            // Newest first: each page's cursor is older than the last.
            if before != 0 && page.next_before >= before {
                return Err(ClientError::Protocol(format!(
                    "FIND_TURNS answered cursor {} after {before}",
                    page.next_before
                )));
            }
            before = page.next_before;
        }
    }
}

/// A time to live in whole milliseconds: at least 1.
fn ttl_millis(ttl: Duration) -> Result<u64, ClientError> {
    match u64::try_from(ttl.as_millis()) {
        Ok(0) => Err(ClientError::InvalidArgument(format!(
            "a time to live of {ttl:?} is under 1 ms; to clear it, pass None"
        ))),
        Ok(ttl_ms) => Ok(ttl_ms),
        Err(_) => Err(ClientError::InvalidArgument(format!(
            "a time to live of {ttl:?} does not fit in u64 milliseconds"
        ))),
    }
}

async fn verify_entries_v2(
    entries: Vec<TurnEntryV2>,
    hash_raw: bool,
) -> Result<Vec<TurnInfo>, ClientError> {
    // Payloads through the version-1 path (on two threads when large), extras beside.
    let mut extras = Vec::with_capacity(entries.len());
    let plain: Vec<TurnEntry> = entries
        .into_iter()
        .map(|entry| {
            extras.push(entry.extras);
            TurnEntry {
                turn: entry.turn,
                payload: entry.payload,
            }
        })
        .collect();
    let turns = verify_entries(plain, hash_raw).await?;
    Ok(turns
        .into_iter()
        .zip(extras)
        .map(|(turn, extras)| TurnInfo::new(turn, extras))
        .collect())
}

/// Payload bytes of a page to inflate or hash above which the work runs on two threads: a
/// page of 64 × 10 KiB costs ~0.7 ms of CPU to verify, half of it can run beside.
const PARALLEL_VERIFY_BYTES_MIN: usize = 128 * 1024;

async fn verify_entries(
    mut entries: Vec<TurnEntry>,
    hash_raw: bool,
) -> Result<Vec<Turn>, ClientError> {
    let work_bytes: usize = entries
        .iter()
        .filter(|entry| hash_raw || entry.payload.encoding == PayloadEncoding::Zstd)
        .map(|entry| entry.payload.raw_len as usize)
        .sum();
    if work_bytes < PARALLEL_VERIFY_BYTES_MIN || entries.len() < 2 {
        return verify_all(entries, hash_raw);
    }
    let second = entries.split_off(entries.len() / 2);
    let beside = tokio::task::spawn_blocking(move || verify_all(second, hash_raw));
    let mut turns = verify_all(entries, hash_raw)?;
    let rest = beside
        .await
        .map_err(|error| ClientError::Protocol(format!("verifying payloads: {error}")))??;
    turns.extend(rest);
    Ok(turns)
}

fn verify_all(entries: Vec<TurnEntry>, hash_raw: bool) -> Result<Vec<Turn>, ClientError> {
    entries
        .into_iter()
        .map(|entry| {
            let payload = verify_payload(
                &entry.turn.payload_hash,
                Some(entry.turn.payload_len),
                entry.payload,
                hash_raw,
            )?;
            Ok(Turn::from_wire(&entry.turn, payload))
        })
        .collect()
}

/// Gives each turn of an answer its overlay state (the decoder checked there is one per turn).
fn set_overlays<'a>(
    turns: impl Iterator<Item = &'a mut Turn>,
    overlays: Option<Vec<OverlayWire>>,
) -> Result<(), ClientError> {
    let Some(overlays) = overlays else {
        return Ok(());
    };
    let mut states = overlays.into_iter();
    for turn in turns {
        let state = states.next().ok_or_else(|| {
            ClientError::Protocol("an overlaid answer with fewer overlay states than turns".into())
        })?;
        turn.set_overlay(state)?;
    }
    Ok(())
}

fn unexpected(asked: MessageType, response: &Response) -> ClientError {
    ClientError::Protocol(format!(
        "{} answered with message type {:#06x}",
        asked.name(),
        response.msg_type()
    ))
}

async fn write_frames(
    mut writer: tokio::net::tcp::OwnedWriteHalf,
    mut queue: mpsc::UnboundedReceiver<Vec<Bytes>>,
    pending: Arc<Pending>,
    bytes_sent: Arc<AtomicU64>,
) {
    // Below IOV_MAX (1024) buffers per writev.
    const CHUNKS_PER_WRITE_MAX: usize = 512;
    let mut chunks: Vec<Bytes> = Vec::new();
    while let Some(frame) = queue.recv().await {
        chunks.extend(frame);
        while chunks.len() < CHUNKS_PER_WRITE_MAX {
            match queue.try_recv() {
                Ok(frame) => chunks.extend(frame),
                Err(_) => break,
            }
        }
        // Every ready frame in one vectored write; payloads are written where they are.
        if let Err(error) = write_all_vectored(&mut writer, &chunks, &bytes_sent).await {
            fail_all(&pending, format!("write failed: {error}"));
            return;
        }
        chunks.clear();
    }
    let _ = writer.shutdown().await;
}

/// Writes every chunk, counting each write's bytes into `bytes_sent` as it happens.
async fn write_all_vectored(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    chunks: &[Bytes],
    bytes_sent: &AtomicU64,
) -> std::io::Result<()> {
    let mut slices: Vec<std::io::IoSlice<'_>> = chunks
        .iter()
        .map(|chunk| std::io::IoSlice::new(chunk))
        .collect();
    let mut remaining = &mut slices[..];
    while !remaining.is_empty() {
        let written = writer.write_vectored(remaining).await?;
        if written == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "connection wrote nothing",
            ));
        }
        bytes_sent.fetch_add(written as u64, Ordering::Relaxed);
        std::io::IoSlice::advance_slices(&mut remaining, written);
    }
    Ok(())
}

/// Sends the ACK for what the socket received, now (`TCP_QUICKACK`). Not sticky: the kernel
/// goes back to delaying ACKs, so the reader asks again before each read of a partial frame.
/// Failure costs only latency.
fn ack_now(stream: &TcpStream) {
    #[cfg(target_os = "linux")]
    {
        let _ = stream.set_quickack(true);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = stream;
}

async fn read_frames(
    mut reader: tokio::net::tcp::OwnedReadHalf,
    pending: Arc<Pending>,
    response_bytes_max: u32,
) {
    let mut frames = FrameReader::new(response_bytes_max);
    let reason = loop {
        loop {
            let (header, body) = match frames.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => {
                    fail_all(&pending, format!("bad frame from the server: {error}"));
                    return;
                }
            };
            let response = decode_response(&header, body)
                .map_err(|error| ClientError::Protocol(error.to_string()));
            let waiter = pending
                .lock()
                .ok()
                .and_then(|mut state| state.waiting.remove(&header.req_id));
            match (waiter, response) {
                (Some(waiter), response) => {
                    let _ = waiter.send(response);
                }
                // An ERROR for no request (req_id 0): the server closes; tell everyone why.
                (None, Ok(Response::Error { code, message, .. })) => {
                    let reason = format!("{code}: {message}");
                    fail_all(&pending, reason);
                    if code != ErrorCode::UnknownMessage {
                        return;
                    }
                }
                (None, _) => {}
            }
        }
        // Part of an answer is in and the rest is on its way: acknowledge what arrived now.
        // Otherwise the kernel delays that ACK (up to 40 ms, since this side sends nothing
        // back), and a server whose congestion window the answer outgrew waits for it
        // (docs/decisions/0016-quick-acks.md).
        if frames.pending_bytes() > 0 {
            ack_now(reader.as_ref());
        }
        let wanted = frames.wanted_capacity();
        let buffer = frames.buffer();
        buffer.reserve(wanted);
        match reader.read_buf(buffer).await {
            Ok(0) => break "server closed the connection".to_string(),
            Ok(_) => {}
            Err(error) => break format!("read failed: {error}"),
        }
    };
    fail_all(&pending, reason);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ack_now` takes the socket out of delayed-ACK ("pingpong") mode: TCP_QUICKACK reads 0
    /// after the socket is put there, 1 after `ack_now`.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn ack_now_turns_delayed_acks_off_for_the_moment() -> std::io::Result<()> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let stream = TcpStream::connect(listener.local_addr()?).await?;
        let _accepted = listener.accept().await?;
        stream.set_quickack(false)?;
        assert!(!stream.quickack()?, "the socket delays its ACKs");
        ack_now(&stream);
        assert!(stream.quickack()?, "ack_now sends ACKs at once");
        Ok(())
    }
}
