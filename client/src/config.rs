//! `ClientConfig`: where the server is, the token, what the client accepts (response size,
//! zstd payloads, which payloads it hashes, decision 0015), chunking of appends by value
//! (issue 16), compression where payloads are made (issue 38) and the timeouts that keep every call from waiting forever on a peer that is
//! not ctxstore: connect (5 s), HELLO (5 s), each request (30 s), BACKUP (24 h) and GC (1 h)
//! instead of the per-request one; when writes are acknowledged (`durability`, decision 0031);
//! several addresses, of which the client follows the primary (`addrs`, `failover_timeout`,
//! decision 0031 §11, `primary.rs`) and whether appends get keys made here (`idempotency`).

use std::time::Duration;

use crate::chunking::ChunkingConfig;
use crate::types::{Durability, VerifyPayloads};

#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// `HOST:PORT` of the server, or several separated by commas (`A,B,C`: a primary and its
    /// standbys, decision 0031 §11). With several the client connects to the one that takes
    /// writes (the highest epoch among those whose ROLE says so) and finds it again when it
    /// goes (`failover_timeout`); it never connects to an address outside this list.
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
    /// Compress payloads here, where they are made (issue 38, decision 0029; default
    /// `Some(1)`, zstd's level): on a version-3 connection an append by value of at least
    /// `COMPRESS_BYTES_MIN` bytes that zstd shrinks travels as its zstd frame with its BLAKE3
    /// (APPEND_TURNS, TURN_SPEC flag ZSTD). The server checks the frame (it inflates to those
    /// bytes) and stores it as it came, instead of compressing: the most CPU an append costs
    /// the server moves to the many clients. `None`: payloads travel as they are and the
    /// server compresses them, as on older versions.
    pub compress_level: Option<i32>,
    /// When the server acknowledges this client's writes that take the frame flag `ACK_AFTER`
    /// (decision 0031; default `Durability::Default`: no flag, the server's `--ack-after`).
    /// A handle may ask otherwise (`Client::with_durability`). Anything but `Default` needs
    /// protocol version 4: on an older server those writes are `ClientError::Unsupported`.
    pub durability: Durability,
    /// With several addresses: how long a call looks for the primary again after a lost
    /// connection, NOT_PRIMARY or SHUTTING_DOWN (default 30 s, more than a lease, its margin
    /// and a promotion), trying every address with a backoff from 100 ms to 1 s; connecting
    /// waits as long for a primary. Past it: `ClientError::NoPrimary`. Unused with one address.
    pub failover_timeout: Duration,
    /// Whether appends without a key get one made here (default `Idempotency::Off`; decision
    /// 0031 §11): with `Idempotency::Auto`, `append`, `append_turn` and `append_turns` give
    /// every turn without a key a unique one (`ctxstore-auto:` and 32 hex digits) and send it
    /// as APPEND_TURNS (protocol version 2), so that a client of several addresses sends it
    /// again after a failover and it lands once, instead of `ClientError::OutcomeUnknown`.
    /// The key is part of the turn: stored, visible, unique in its context.
    /// `append_by_hash` is sent as it is.
    pub idempotency: Idempotency,
}

/// Whether appends without a key get one (`ClientConfig::idempotency`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Idempotency {
    /// A turn has the key its caller gave, or none.
    #[default]
    Off,
    /// A turn without a key gets a unique one (`Idempotency::auto_key`).
    Auto,
}

impl Idempotency {
    /// The prefix of the keys `Auto` makes.
    pub const AUTO_KEY_PREFIX: &'static str = "ctxstore-auto:";

    /// A new key, unique across processes and calls: the prefix, then 32 hex digits of a
    /// BLAKE3 of this process, the time and a counter.
    pub fn auto_key() -> bytes::Bytes {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let count = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let mut hasher = blake3::Hasher::new();
        hasher.update(&std::process::id().to_le_bytes());
        hasher.update(&nanos.to_le_bytes());
        hasher.update(&count.to_le_bytes());
        let digest = hasher.finalize().to_hex();
        let key = format!("{}{}", Idempotency::AUTO_KEY_PREFIX, &digest.as_str()[..32]);
        bytes::Bytes::from(key)
    }
}

impl ClientConfig {
    pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);
    pub const HELLO_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);
    pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
    pub const BACKUP_TIMEOUT_DEFAULT: Duration = Duration::from_secs(24 * 3600);
    pub const GC_TIMEOUT_DEFAULT: Duration = Duration::from_secs(3600);
    pub const FAILOVER_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

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
            compress_level: Some(1),
            durability: Durability::Default,
            failover_timeout: ClientConfig::FAILOVER_TIMEOUT_DEFAULT,
            idempotency: Idempotency::Off,
        }
    }

    /// A config over several addresses (a primary and its standbys): `new` with them joined
    /// by commas.
    pub fn from_addrs<I, S>(addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let joined: Vec<String> = addrs
            .into_iter()
            .map(|addr| addr.as_ref().trim().to_string())
            .collect();
        ClientConfig::new(joined.join(","))
    }

    /// The addresses `addr` lists (split at commas, trimmed, empty ones left out).
    pub fn addrs(&self) -> Vec<String> {
        self.addr
            .split(',')
            .map(str::trim)
            .filter(|addr| !addr.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Whether the client follows the primary among several addresses (`addr` lists more
    /// than one).
    pub fn follows_primary(&self) -> bool {
        self.addrs().len() > 1
    }

    /// Sets `idempotency` (`Idempotency::Auto`: every append gets a key).
    pub fn with_idempotency(mut self, idempotency: Idempotency) -> Self {
        self.idempotency = idempotency;
        self
    }

    /// Sets `failover_timeout`.
    pub fn with_failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// Sets `compress_level` (`None`: the server compresses).
    pub fn with_compress_level(mut self, level: Option<i32>) -> Self {
        self.compress_level = level;
        self
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

    /// Sets `durability` (`Durability::Remote`: every append, stream seal and KV put waits
    /// for the object store).
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    pub fn with_gc_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.gc_timeout = timeout;
        self
    }
}
