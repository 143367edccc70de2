//! Server configuration: where to listen, who may connect, how many network cores and where
//! they run, and a limit on everything a client can make the server hold. Defaults are in
//! README.md#configuration and `ctxstore-server --help`. `validate` refuses, before anything is
//! opened, a public listen address without a token and protocol limits that contradict each
//! other, its errors naming the flag.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ctxstore_engine::EngineConfig;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// Required to listen anywhere but on loopback. Compared in constant time. The operator's
    /// token (TenantId 0) when the server has tenants.
    pub token: Option<String>,
    /// The tenants file (`--tenants-file`, decision 0032 §1): each tenant's tokens, rights
    /// and quotas; read at start and on SIGHUP. `None`: every connection is the operator's.
    pub tenants_file: Option<PathBuf>,
    /// Threads that own connections: decode frames, hash and compress payloads, call the
    /// engine, encode responses.
    pub network_cores: usize,
    /// CPU for each network core (pinning); `None`: unpinned.
    pub network_core_cpus: Option<Vec<usize>>,
    pub limits: ServerLimits,
    pub engine: EngineConfig,
    /// When listening, write the bound address (`HOST:PORT\n`) here (for tests and scripts
    /// that start the server on port 0).
    pub ready_file: Option<PathBuf>,
    /// How long shutdown waits for in-flight requests to be answered and their responses
    /// written before it closes the connections hard (10 s).
    pub drain_timeout: Duration,
    /// Raw payload bytes each network core keeps for hot reads (32 MiB; 0 disables). A
    /// payload larger than 1/16 of it is never cached.
    pub payload_cache_bytes_per_core: u64,
    /// Serve Prometheus metrics (`GET /metrics`) here; `None`: no metrics endpoint.
    pub metrics_listen: Option<SocketAddr>,
    /// Allow `metrics_listen` off loopback. The endpoint has no authentication: whoever
    /// reaches it reads the figures (never data), so it must be asked for explicitly.
    pub metrics_allow_non_loopback: bool,
    /// Ship the store to an object store (`--replicate-to`); `None`: no replication.
    pub replication: Option<ctxstore_replica::ShipConfig>,
    /// Run as a standby of a replica (`--follow`); `None`: a primary (or no replica).
    pub follow: Option<ctxstore_replica::FollowConfig>,
    /// When a write that does not say is acknowledged (`--ack-after`, decision 0031 §3):
    /// `Local`, once durable on this disk; `Remote`, once the object store holds it too
    /// (needs `replication` or `follow`).
    pub ack_after: ctxstore_protocol::AckAfter,
    /// A remote acknowledgement not confirmed within this is answered UNCONFIRMED
    /// (`--remote-ack-timeout`, 10 s): the write is durable here, its fate off-host unknown.
    pub remote_ack_timeout: Duration,
    /// Serve the read-only web console here (`--console-listen`; issue 37); `None`: none.
    /// Loopback only unless the server has a token, which the console then requires.
    pub console_listen: Option<SocketAddr>,
    /// Set by a signal while the start waits (a standby whose replica has no restore point
    /// yet waits for one): the start then gives up with `ReplicaError::Stopped`.
    pub stop_waiting: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// A limit on everything a client controls, unit last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Largest frame body a client may send (16 MiB).
    pub frame_bytes_max: u32,
    /// Requests of one connection in flight: read and not yet answered *and written*; at the
    /// limit the server stops reading that connection until a response is written (1,024).
    pub requests_in_flight_max: u32,
    /// Open connections; one more gets OVERLOADED and is closed, unless a connection that has
    /// not completed HELLO can make room for it (1,024).
    pub connections_max: u32,
    /// Connections that have not completed HELLO yet (256, a quarter of the default
    /// `connections_max`; never more than `connections_max`). Past it, or at
    /// `connections_max`, a new connection closes the oldest of them on its network core
    /// (OVERLOADED): a flood of silent connections cannot keep real clients out.
    pub connections_unauthenticated_max: u32,
    /// A connection must complete HELLO within this long of being accepted (5 s).
    pub hello_timeout: Duration,
    /// A connection with no frame in progress and no request in flight for this long is
    /// closed (5 min); so is one whose responses wait to be written and whose peer has read
    /// none of them for this long.
    pub idle_timeout: Duration,
    /// A frame must arrive completely within this long of its first byte (10 s): slow
    /// senders cannot hold a connection open byte by byte.
    pub frame_timeout: Duration,
    /// Hashes in one HAS_BLOBS (4,096).
    pub has_blobs_max: u32,
    /// Payload bytes in one TURNS or KV_VALUES response; a page holds fewer turns (values)
    /// than asked rather than more bytes (64 MiB). Follow the cursor (ask again) for the rest.
    pub response_bytes_max: u64,
    /// Response bytes one connection may hold not yet written to its socket, with what its
    /// running requests hold (their bodies) and may still produce (64 MiB). At the limit the connection stops reading
    /// requests until its peer reads; a request counts as in flight until its response is
    /// written.
    pub unwritten_bytes_max: u64,
    /// Response bytes all connections together may hold not yet written, with what running
    /// requests reserve (1 GiB): a hard bound. Each request reserves its largest answer before
    /// it starts and waits (its connection unread) while that does not fit; a connection that
    /// already holds bytes may fill only a quarter of the budget, so clients that read their
    /// responses are still served while the others wait.
    pub unwritten_bytes_total_max: u64,
    /// Longest wait of one STREAM_READ (a long poll, issue 32), in milliseconds (30 s).
    pub stream_wait_ms_max: u32,
    /// Streams one connection may hold open at once (64).
    pub streams_per_connection_max: u32,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            frame_bytes_max: 16 * 1024 * 1024,
            requests_in_flight_max: 1024,
            connections_max: 1024,
            connections_unauthenticated_max: 256,
            hello_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(300),
            frame_timeout: Duration::from_secs(10),
            has_blobs_max: 4096,
            response_bytes_max: 64 * 1024 * 1024,
            unwritten_bytes_max: 64 * 1024 * 1024,
            unwritten_bytes_total_max: 1024 * 1024 * 1024,
            stream_wait_ms_max: 30_000,
            streams_per_connection_max: 64,
        }
    }
}

/// Ceiling of `response_bytes_max`: half the protocol's frame limit leaves room for the
/// per-turn headers of the largest page.
pub const RESPONSE_BYTES_LIMIT: u64 = 512 * 1024 * 1024;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:7411";
pub const DEFAULT_DATA_DIR: &str = "./ctxstore-data";

impl ServerConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7411)),
            token: None,
            tenants_file: None,
            network_cores: std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(64),
            network_core_cpus: None,
            limits: ServerLimits::default(),
            engine: {
                let mut engine = EngineConfig::new(data_dir);
                engine.limits.blob_bytes_max = 16 * 1024 * 1024 - 64;
                engine
            },
            ready_file: None,
            drain_timeout: Duration::from_secs(10),
            payload_cache_bytes_per_core: 32 * 1024 * 1024,
            metrics_listen: None,
            metrics_allow_non_loopback: false,
            replication: None,
            follow: None,
            ack_after: ctxstore_protocol::AckAfter::Local,
            remote_ack_timeout: Duration::from_secs(10),
            console_listen: None,
            stop_waiting: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    /// Checks every limit against the others and against what the protocol can carry, so that
    /// a server that starts can serve: each error names the flag to change.
    pub fn validate(&self) -> Result<(), String> {
        self.check_exposure()?;
        self.check_cores()?;
        self.check_counts()?;
        self.check_timeouts()?;
        self.check_bytes()?;
        self.engine.validate()
    }

    /// Who can reach the server and its metrics, and whether a client could log in.
    fn check_exposure(&self) -> Result<(), String> {
        use ctxstore_protocol::TOKEN_BYTES_MAX;
        if !self.listen.ip().is_loopback() && self.token.as_deref().is_none_or(str::is_empty) {
            return Err(format!(
                "refusing to listen on {} without a token: anyone who can reach it could read \
                 and write every context. Pass --token-file, or listen on 127.0.0.1",
                self.listen
            ));
        }
        if let Some(file) = &self.tenants_file
            && self.token.as_deref().is_none_or(str::is_empty)
        {
            return Err(format!(
                "refusing to serve the tenants in {} without --token-file: the operator's \
                 token administers tenants, and without one every connection would be the \
                 operator's, whatever token it presents",
                file.display()
            ));
        }
        if let Some(metrics) = self.metrics_listen
            && !metrics.ip().is_loopback()
            && !self.metrics_allow_non_loopback
        {
            return Err(format!(
                "refusing to serve metrics on {metrics}: the endpoint has no authentication. \
                 Pass --metrics-allow-non-loopback if the network is trusted (or a firewall \
                 guards the port), or use a loopback address"
            ));
        }
        if let Some(console) = self.console_listen
            && !console.ip().is_loopback()
            && self.token.as_deref().is_none_or(str::is_empty)
        {
            return Err(format!(
                "refusing to serve the console on {console} without a token: anyone who can \
                 reach it could read every context. Pass --token-file (the console then asks \
                 for the token), or use a loopback address"
            ));
        }
        if let Some(token) = &self.token
            && token.len() > TOKEN_BYTES_MAX
        {
            return Err(format!(
                "--token-file: the token is {} bytes; HELLO carries at most {TOKEN_BYTES_MAX}, so \
                 no client could log in. Use a shorter token",
                token.len()
            ));
        }
        Ok(())
    }

    /// Network cores: 1..=256, and one CPU each when they are pinned.
    fn check_cores(&self) -> Result<(), String> {
        if self.network_cores == 0 || self.network_cores > 256 {
            return Err("--network-cores must be in 1..=256".into());
        }
        if let Some(cpus) = &self.network_core_cpus
            && cpus.len() != self.network_cores
        {
            return Err(format!(
                "--network-core-cpus: {} CPUs given for {} network cores; give one per core",
                cpus.len(),
                self.network_cores
            ));
        }
        Ok(())
    }

    /// Frames and the counts a client controls, each at least 1 and within what the protocol
    /// carries.
    fn check_counts(&self) -> Result<(), String> {
        use ctxstore_protocol::{LIST_ITEMS_LIMIT, frame::FRAME_BYTES_LIMIT};
        let limits = &self.limits;
        if limits.frame_bytes_max < 1024 || limits.frame_bytes_max > FRAME_BYTES_LIMIT {
            return Err(format!(
                "--frame-bytes-max must be in 1024..={FRAME_BYTES_LIMIT} (1 KiB..=1 GiB)"
            ));
        }
        for (flag, value) in [
            ("--requests-in-flight-max", limits.requests_in_flight_max),
            ("--connections-max", limits.connections_max),
            (
                "--connections-unauthenticated-max",
                limits.connections_unauthenticated_max,
            ),
            ("--has-blobs-max", limits.has_blobs_max),
        ] {
            if value == 0 {
                return Err(format!("{flag} must be at least 1"));
            }
        }
        if limits.has_blobs_max > LIST_ITEMS_LIMIT {
            return Err(format!(
                "--has-blobs-max must be at most {LIST_ITEMS_LIMIT} (the protocol's list limit)"
            ));
        }
        // A HAS_BLOBS of has_blobs_max hashes must fit one frame, or clients could never send
        // the number the server announces in HELLO.
        let has_blobs_frame_bytes = 8 + 32 * u64::from(limits.has_blobs_max);
        if has_blobs_frame_bytes > u64::from(limits.frame_bytes_max) {
            return Err(format!(
                "--has-blobs-max ({}) needs frames of {has_blobs_frame_bytes} bytes; raise \
                 --frame-bytes-max ({}) or lower --has-blobs-max",
                limits.has_blobs_max, limits.frame_bytes_max
            ));
        }
        Ok(())
    }

    /// The connections' timeouts and the drain deadline, each positive.
    fn check_timeouts(&self) -> Result<(), String> {
        let limits = &self.limits;
        for (flag, value) in [
            ("--idle-timeout", limits.idle_timeout),
            ("--frame-timeout", limits.frame_timeout),
            ("--hello-timeout", limits.hello_timeout),
            ("--drain-timeout", self.drain_timeout),
        ] {
            if value.is_zero() {
                return Err(format!("{flag} must be positive"));
            }
        }
        Ok(())
    }

    /// Blobs, responses and unwritten bytes against the frame and against each other.
    fn check_bytes(&self) -> Result<(), String> {
        let limits = &self.limits;
        // APPEND_TURN carries 40 bytes of fields before the payload.
        if u64::from(self.engine.limits.blob_bytes_max) + 64 > u64::from(limits.frame_bytes_max) {
            return Err(format!(
                "--blob-bytes-max ({}) must leave 64 bytes of --frame-bytes-max ({}) for the \
                 message fields",
                self.engine.limits.blob_bytes_max, limits.frame_bytes_max
            ));
        }
        if limits.response_bytes_max < u64::from(self.engine.limits.blob_bytes_max) {
            return Err(format!(
                "--response-bytes-max ({}) must hold at least one blob of --blob-bytes-max ({})",
                limits.response_bytes_max, self.engine.limits.blob_bytes_max
            ));
        }
        // The payloads plus their turns' headers must fit one frame (at most 1 GiB).
        if limits.response_bytes_max > RESPONSE_BYTES_LIMIT {
            return Err(format!(
                "--response-bytes-max must be at most {RESPONSE_BYTES_LIMIT} (512 MiB)"
            ));
        }
        if limits.unwritten_bytes_max < UNWRITTEN_BYTES_MIN {
            return Err(format!(
                "--unwritten-bytes-max must be at least {UNWRITTEN_BYTES_MIN} (64 KiB)"
            ));
        }
        if limits.unwritten_bytes_total_max < limits.unwritten_bytes_max {
            return Err(format!(
                "--unwritten-bytes-total-max ({}) must be at least --unwritten-bytes-max ({})",
                limits.unwritten_bytes_total_max, limits.unwritten_bytes_max
            ));
        }
        Ok(())
    }
}

/// Floor of `unwritten_bytes_max`: below it, pipelining small requests stalls on every
/// response.
pub const UNWRITTEN_BYTES_MIN: u64 = 64 * 1024;

/// Parses a duration written like `10s`, `2m`, `500ms`, `1h 30m` (humantime's syntax, the
/// same as the load generator's).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|error| format!("{text:?} is not a duration like 10s, 2m, 500ms: {error}"))
}

/// Parses `HOST:PORT` where HOST is an IP address or a host name (resolved now; its first
/// address is used, like the CLI's `--addr`).
pub fn resolve_addr(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = text.trim().parse() {
        return Ok(addr);
    }
    let mut addrs = text.trim().to_socket_addrs().map_err(|error| {
        format!("{text:?} is not HOST:PORT with a host that resolves (like 127.0.0.1:7411 or localhost:7411): {error}")
    })?;
    addrs
        .next()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_accept_host_names() {
        assert_eq!(
            resolve_addr("127.0.0.1:7411"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 7411)))
        );
        assert!(resolve_addr("localhost:7411").unwrap().ip().is_loopback());
        assert!(resolve_addr("localhost").is_err(), "a port is required");
        assert!(resolve_addr("no-such-host.invalid:1").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("3").is_err(), "a duration names its unit");
        assert!(parse_duration("ten").is_err());
    }

    #[test]
    fn non_loopback_needs_a_token() {
        let mut config = ServerConfig::new("/tmp/x");
        config.validate().unwrap();
        config.listen = "0.0.0.0:7411".parse().unwrap();
        assert!(config.validate().unwrap_err().contains("without a token"));
        config.token = Some("s3cret".into());
        config.validate().unwrap();
    }

    #[test]
    fn non_loopback_metrics_need_the_explicit_flag() {
        let mut config = ServerConfig::new("/tmp/x");
        config.metrics_listen = Some("127.0.0.1:9411".parse().unwrap());
        config.validate().unwrap();
        config.metrics_listen = Some("0.0.0.0:9411".parse().unwrap());
        config.token = Some("s3cret".into());
        let error = config.validate().unwrap_err();
        assert!(error.contains("--metrics-allow-non-loopback"), "{error}");
        config.metrics_allow_non_loopback = true;
        config.validate().unwrap();
    }

    #[test]
    fn a_console_off_loopback_needs_a_token() {
        let mut config = ServerConfig::new("/tmp/x");
        config.console_listen = Some("127.0.0.1:9412".parse().unwrap());
        config.validate().unwrap();
        config.console_listen = Some("0.0.0.0:9412".parse().unwrap());
        let error = config.validate().unwrap_err();
        assert!(
            error.contains("console") && error.contains("--token-file"),
            "{error}"
        );
        config.token = Some("s3cret".into());
        config.validate().unwrap();
    }

    #[test]
    fn a_page_must_hold_one_blob_and_fit_a_frame() {
        let mut config = ServerConfig::new("/tmp/x");
        config.limits.response_bytes_max = u64::from(config.engine.limits.blob_bytes_max) - 1;
        assert!(config.validate().unwrap_err().contains("at least one blob"));
        config.limits.response_bytes_max = RESPONSE_BYTES_LIMIT + 1;
        assert!(config.validate().unwrap_err().contains("at most"));
        config.limits.response_bytes_max = RESPONSE_BYTES_LIMIT;
        config.validate().unwrap();
    }

    #[test]
    fn limits_the_protocol_imposes_are_checked_naming_the_flag() {
        let mut config = ServerConfig::new("/tmp/x");
        config.token = Some("t".repeat(ctxstore_protocol::TOKEN_BYTES_MAX));
        config.validate().unwrap();
        config.token = Some("t".repeat(ctxstore_protocol::TOKEN_BYTES_MAX + 1));
        assert!(config.validate().unwrap_err().contains("--token-file"));
        config.token = None;

        // A HAS_BLOBS of has_blobs_max hashes must fit a frame.
        config.limits.frame_bytes_max = 64 * 1024;
        config.engine.limits.blob_bytes_max = 64 * 1024 - 64;
        config.limits.has_blobs_max = 4096;
        assert!(config.validate().unwrap_err().contains("--has-blobs-max"));
        config.limits.has_blobs_max = 2000;
        config.validate().unwrap();

        config.engine.limits.blob_bytes_max = 64 * 1024;
        let error = config.validate().unwrap_err();
        assert!(error.contains("--blob-bytes-max") && error.contains("--frame-bytes-max"));
        config.engine.limits.blob_bytes_max = 1024;

        config.limits.unwritten_bytes_total_max = config.limits.unwritten_bytes_max - 1;
        assert!(
            config
                .validate()
                .unwrap_err()
                .contains("--unwritten-bytes-total-max")
        );
        config.limits.unwritten_bytes_total_max = config.limits.unwritten_bytes_max;
        config.limits.hello_timeout = Duration::ZERO;
        assert!(config.validate().unwrap_err().contains("--hello-timeout"));
    }
}
