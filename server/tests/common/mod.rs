//! Helpers for the server's end-to-end tests: a real server on an ephemeral port and a temp
//! directory, clients, raw sockets.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ctxstore_client::{Client, ClientConfig};
use ctxstore_protocol::{
    AdminRequest, BlobsRequest, FrameHeader, HEADER_BYTES, PROTOCOL_VERSION, Request, Response,
    decode_response, encode_request,
};
use ctxstore_protocol::{admin, blobs};
use ctxstore_server::{Server, ServerConfig};
use ctxstore_testsupport::ServerLaunch;
pub use ctxstore_testsupport::TestServer;

/// A server configuration for tests: ephemeral port, small engine files, 2 network cores.
pub fn config(dir: &Path) -> ServerConfig {
    let mut config = ServerConfig::new(dir);
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.network_cores = 2;
    config.engine.limits.pack_bytes_max = 64 << 20;
    config.engine.limits.log_preallocate_bytes = 64 * 1024;
    config
}

pub fn start(config: ServerConfig) -> Server {
    Server::start(config).expect("start server")
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub async fn connect(addr: SocketAddr) -> Client {
    Client::connect(ClientConfig::new(addr.to_string()))
        .await
        .expect("connect")
}

/// A raw connection for hostile-input tests.
pub struct Raw {
    pub stream: TcpStream,
    buffer: BytesMut,
}

impl Raw {
    pub fn from_stream(stream: TcpStream) -> Raw {
        Raw {
            stream,
            buffer: BytesMut::new(),
        }
    }

    pub fn connect(addr: SocketAddr) -> Raw {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Raw {
            stream,
            buffer: BytesMut::new(),
        }
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes);
    }

    pub fn send(&mut self, req_id: u64, request: &Request) {
        let mut bytes = BytesMut::new();
        encode_request(req_id, request, &mut bytes).unwrap();
        self.send_bytes(&bytes);
    }

    pub fn hello(&mut self, token: &[u8]) -> Response {
        self.hello_versions(token, PROTOCOL_VERSION, PROTOCOL_VERSION)
    }

    pub fn hello_versions(&mut self, token: &[u8], min_version: u16, max_version: u16) -> Response {
        let request = Request::Admin(AdminRequest::Hello(admin::Hello {
            min_version,
            max_version,
            token: Bytes::copy_from_slice(token),
            client_name: "raw test".into(),
        }));
        self.send(1, &request);
        self.receive().expect("hello response").1
    }

    /// Sends one request and returns its response (req_id checked).
    pub fn call(&mut self, req_id: u64, request: &Request) -> Response {
        self.send(req_id, request);
        let (answered, response) = self.receive().expect("a response");
        assert_eq!(answered, req_id);
        response
    }

    /// The next response frame, or `None` when the server closed the connection.
    pub fn receive(&mut self) -> Option<(u64, Response)> {
        loop {
            if self.buffer.len() >= HEADER_BYTES {
                let mut header = [0u8; HEADER_BYTES];
                header.copy_from_slice(&self.buffer[..HEADER_BYTES]);
                let header = FrameHeader::decode(&header);
                let total = HEADER_BYTES + header.len as usize;
                if self.buffer.len() >= total {
                    let frame = self.buffer.split_to(total).freeze();
                    let response = decode_response(&header, frame.slice(HEADER_BYTES..))
                        .expect("valid response");
                    return Some((header.req_id, response));
                }
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(read) => self.buffer.extend_from_slice(&chunk[..read]),
            }
        }
    }

    /// True once the server has closed the connection (reads EOF or a reset).
    pub fn closed(&mut self) -> bool {
        let mut chunk = [0u8; 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return true,
                Ok(_) => continue,
            }
        }
    }
}

pub fn error_code(response: &Response) -> Option<ctxstore_protocol::ErrorCode> {
    match response {
        Response::Error { code, .. } => Some(*code),
        _ => None,
    }
}

/// Incompressible bytes (xorshift), so that a blob's stored size is its payload size.
pub fn incompressible(len: usize, seed: u64) -> Bytes {
    ctxstore_testsupport::noise(seed, len).into()
}

/// A connection whose kernel receive buffer is as small as the kernel allows (about 4 KiB):
/// a client that does not read then holds almost nothing of what the server sends.
pub fn connect_with_small_receive_buffer(addr: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&addr.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// Frames that ask for the same blob `count` times, with req_ids `first_req_id..`.
pub fn get_blob_frames(hash: [u8; 32], first_req_id: u64, count: u64) -> Vec<u8> {
    let mut bytes = BytesMut::new();
    for req_id in first_req_id..first_req_id + count {
        let request = Request::Blobs(BlobsRequest::GetBlob(blobs::GetBlob {
            hash: ctxstore_protocol::BlobHash(hash),
            read_flags: 0,
        }));
        encode_request(req_id, &request, &mut bytes).unwrap();
    }
    bytes.to_vec()
}

/// Writes `frames` from a thread until they are all written or the peer stops taking them;
/// the counter shows how many bytes went out (it stops growing once the server stops
/// reading).
pub fn write_from_thread(
    mut stream: TcpStream,
    frames: Vec<u8>,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicU64>,
    std::thread::JoinHandle<()>,
) {
    let written = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = written.clone();
    let thread = std::thread::spawn(move || {
        for chunk in frames.chunks(4096) {
            if stream.write_all(chunk).is_err() {
                return;
            }
            counter.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
    });
    (written, thread)
}

/// Waits until `counter` has not moved for `quiet` (the writer is blocked: the server stopped
/// reading), or `deadline` passes. Returns whether it went quiet.
pub fn wait_until_still(
    counter: &std::sync::atomic::AtomicU64,
    quiet: Duration,
    deadline: Duration,
) -> bool {
    let started = std::time::Instant::now();
    let mut last = counter.load(std::sync::atomic::Ordering::Relaxed);
    let mut since = std::time::Instant::now();
    while started.elapsed() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        let now = counter.load(std::sync::atomic::Ordering::Relaxed);
        if now != last {
            last = now;
            since = std::time::Instant::now();
        } else if since.elapsed() >= quiet {
            return true;
        }
    }
    false
}

/// A field of /proc/PID/status in KiB (VmRSS, VmHWM).
pub fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// The `ctxstore-server` binary on a temp directory with more `flags`, killed when dropped;
/// its log in `server.log` there (`TestServer::log`).
pub fn server_process(flags: &[&str]) -> TestServer {
    ServerLaunch::new(env!("CARGO_BIN_EXE_ctxstore-server"))
        .flags(flags)
        .keep_log()
        .start()
}

/// The SeaweedFS replica `.ci/run` starts (`CTXSTORE_S3_TEST_ENDPOINT`): a fresh `s3://` URL
/// under `name` and the `AWS_*` variables a server needs for it; `None` (the test skips) when
/// it is not set.
pub fn seaweedfs(name: &str) -> Option<(String, Vec<(String, String)>)> {
    let Ok(endpoint) = std::env::var("CTXSTORE_S3_TEST_ENDPOINT") else {
        eprintln!("skipped: CTXSTORE_S3_TEST_ENDPOINT is not set (.ci/run sets it)");
        return None;
    };
    let bucket =
        std::env::var("CTXSTORE_S3_TEST_BUCKET").unwrap_or_else(|_| "ctxstore-test".into());
    let url = format!("s3://{bucket}/{name}-{}", std::process::id());
    // SeaweedFS takes any credentials (none configured); without them the S3 client would
    // ask the instance metadata service.
    let key = std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "ctxstore".into());
    let secret = std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|_| "ctxstore".into());
    let env = [
        ("AWS_ENDPOINT", endpoint),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID", key),
        ("AWS_SECRET_ACCESS_KEY", secret),
    ];
    Some((
        url,
        env.into_iter()
            .map(|(key, value)| (key.to_string(), value))
            .collect(),
    ))
}

/// `ctxstore-server restore --from URL --to DIR` with `extra` flags and `env`: its output.
pub fn restore_cli<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
    server: &str,
    url: &str,
    to: &Path,
    extra: &[&str],
    env: &[(K, V)],
) -> std::process::Output {
    let mut command = std::process::Command::new(server);
    command
        .args(["restore", "--from", url, "--to"])
        .arg(to)
        .args(extra);
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

/// The value of the `name value` line of a command's output.
pub fn output_field<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} line in\n{stdout}"))
}

/// The `ctxstore-server` binary on `data` with more `flags`, its log kept, ready.
pub fn spawn_binary(data: &Path, flags: &[&str]) -> TestServer {
    ServerLaunch::new(env!("CARGO_BIN_EXE_ctxstore-server"))
        .data(data)
        .flags(flags)
        .keep_log()
        .start()
}

/// A blocking client of `server`.
pub fn blocking_client(server: &TestServer) -> ctxstore_client::blocking::Client {
    ctxstore_client::blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap()
}

/// STREAM_OPEN on `context` at its head: type 1, raw, no extras.
pub fn stream_open(context: u64) -> ctxstore_protocol::streams::StreamOpen {
    ctxstore_protocol::streams::StreamOpen {
        context: ctxstore_protocol::ContextRef::Id(context),
        expected_head: None,
        parent: ctxstore_protocol::ParentWire::Head,
        type_tag: 1,
        codec: 0,
        summary: false,
        extras: ctxstore_protocol::ExtrasWire::default(),
    }
}
