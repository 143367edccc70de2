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
    FrameHeader, HEADER_BYTES, PROTOCOL_VERSION, Request, Response, decode_response, encode_request,
};
use ctxstore_server::{Server, ServerConfig};

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
        let request = Request::Hello {
            min_version: PROTOCOL_VERSION,
            max_version: PROTOCOL_VERSION,
            token: Bytes::copy_from_slice(token),
            client_name: "raw test".into(),
        };
        self.send(1, &request);
        self.receive().expect("hello response").1
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
