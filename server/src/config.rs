//! Server configuration: where to listen, who may connect, how many network cores and where
//! they run, and a limit on everything a client can make the server hold. Defaults are in
//! README.md#configuration and `ctxstore-server --help`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ctxstore_engine::EngineConfig;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// Required to listen anywhere but on loopback. Compared in constant time.
    pub token: Option<String>,
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
    /// How long shutdown waits for in-flight requests before closing connections anyway.
    pub drain_timeout: Duration,
    /// Raw payload bytes each network core keeps for hot reads (32 MiB; 0 disables). A
    /// payload larger than 1/16 of it is never cached.
    pub payload_cache_bytes_per_core: u64,
}

/// A limit on everything a client controls, unit last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Largest frame body a client may send (16 MiB).
    pub frame_bytes_max: u32,
    /// Requests of one connection being processed at once; at the limit the server stops
    /// reading that connection until one completes (1,024).
    pub requests_in_flight_max: u32,
    /// Open connections; one more gets OVERLOADED and is closed (1,024).
    pub connections_max: u32,
    /// A connection with no frame in progress and no request in flight for this long is
    /// closed (5 min).
    pub idle_timeout: Duration,
    /// A frame must arrive completely within this long of its first byte (10 s): slow
    /// senders cannot hold a connection open byte by byte.
    pub frame_timeout: Duration,
    /// Hashes in one HAS_BLOBS (4,096).
    pub has_blobs_max: u32,
    /// Payload bytes in one TURNS response; a page holds fewer turns than asked rather than
    /// more bytes (64 MiB). Follow the cursor for the rest.
    pub response_bytes_max: u64,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            frame_bytes_max: 16 * 1024 * 1024,
            requests_in_flight_max: 1024,
            connections_max: 1024,
            idle_timeout: Duration::from_secs(300),
            frame_timeout: Duration::from_secs(10),
            has_blobs_max: 4096,
            response_bytes_max: 64 * 1024 * 1024,
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
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !self.listen.ip().is_loopback() && self.token.as_deref().is_none_or(str::is_empty) {
            return Err(format!(
                "refusing to listen on {} without a token: anyone who can reach it could read \
                 and write every context. Pass --token-file, or listen on 127.0.0.1",
                self.listen
            ));
        }
        if self.network_cores == 0 || self.network_cores > 256 {
            return Err("network cores must be in 1..=256".into());
        }
        if let Some(cpus) = &self.network_core_cpus
            && cpus.len() != self.network_cores
        {
            return Err(format!(
                "{} CPUs given for {} network cores; give one per core",
                cpus.len(),
                self.network_cores
            ));
        }
        let limits = &self.limits;
        if limits.frame_bytes_max < 1024
            || limits.frame_bytes_max > ctxstore_protocol::frame::FRAME_BYTES_LIMIT
        {
            return Err("frame_bytes_max must be in 1 KiB..=1 GiB".into());
        }
        if limits.requests_in_flight_max == 0
            || limits.connections_max == 0
            || limits.has_blobs_max == 0
        {
            return Err(
                "requests in flight, connections and HAS_BLOBS hashes must be at least 1".into(),
            );
        }
        if limits.has_blobs_max > ctxstore_protocol::LIST_ITEMS_LIMIT {
            return Err(format!(
                "has_blobs_max must be at most {}",
                ctxstore_protocol::LIST_ITEMS_LIMIT
            ));
        }
        if limits.idle_timeout.is_zero() || limits.frame_timeout.is_zero() {
            return Err("timeouts must be positive".into());
        }
        // APPEND_TURN carries 40 bytes of fields before the payload.
        if u64::from(self.engine.limits.blob_bytes_max) + 64 > u64::from(limits.frame_bytes_max) {
            return Err(format!(
                "blob_bytes_max ({}) must leave 64 bytes of the frame ({}) for the message fields",
                self.engine.limits.blob_bytes_max, limits.frame_bytes_max
            ));
        }
        if limits.response_bytes_max < u64::from(self.engine.limits.blob_bytes_max) {
            return Err("response_bytes_max must hold at least one blob of blob_bytes_max".into());
        }
        // The payloads plus their turns' headers must fit one frame (at most 1 GiB).
        if limits.response_bytes_max > RESPONSE_BYTES_LIMIT {
            return Err(format!(
                "response_bytes_max must be at most {RESPONSE_BYTES_LIMIT} (512 MiB)"
            ));
        }
        self.engine.validate()
    }
}

/// Parses a duration written like `10s`, `2m`, `500ms`, `1h 30m` (humantime's syntax, the
/// same as the load generator's).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|error| format!("{text:?} is not a duration like 10s, 2m, 500ms: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_page_must_hold_one_blob_and_fit_a_frame() {
        let mut config = ServerConfig::new("/tmp/x");
        config.limits.response_bytes_max = u64::from(config.engine.limits.blob_bytes_max) - 1;
        assert!(config.validate().unwrap_err().contains("at least one blob"));
        config.limits.response_bytes_max = RESPONSE_BYTES_LIMIT + 1;
        assert!(config.validate().unwrap_err().contains("at most"));
        config.limits.response_bytes_max = RESPONSE_BYTES_LIMIT;
        config.validate().unwrap();
    }
}
