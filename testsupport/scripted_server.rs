//! A scripted fake ctxstore server for client tests: one connection, HELLO answered with the
//! version and limits the test chooses, every other request answered by the test's closure and
//! recorded. For the client's own steps (what it sends, in which order) and for answers a real
//! server never gives (damaged payloads). Shared by `#[path]`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener};
use std::sync::{Arc, Mutex};

use ctxstore_protocol::{
    AdminRequest, AdminResponse, FrameReader, Request, Response, ServerLimits, decode_request,
    encode_response,
};

/// Requests the fake saw after HELLO, in order.
pub type Seen = Arc<Mutex<Vec<Request>>>;

/// Listens on `ip` (port chosen by the system) and serves the first connection on a thread of
/// its own: HELLO gets `version` and `limits`, any other request `answer(&request)`. Returns the
/// address to connect to and the requests seen. The thread ends when the client goes.
pub fn scripted_server(
    ip: IpAddr,
    version: u16,
    limits: ServerLimits,
    answer: impl FnMut(&Request) -> Response + Send + 'static,
) -> (String, Seen) {
    let listener = TcpListener::bind((ip, 0)).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = Seen::default();
    let recorded = seen.clone();
    std::thread::spawn(move || {
        let mut answer = answer;
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        let mut frames = FrameReader::new(64 << 20);
        loop {
            while let Ok(Some((header, body))) = frames.next_frame() {
                let request = decode_request(&header, body).unwrap();
                let response = if let Request::Admin(AdminRequest::Hello { .. }) = request {
                    Response::Admin(AdminResponse::Hello {
                        version,
                        limits,
                        server_name: "fake".into(),
                    })
                } else {
                    let response = answer(&request);
                    recorded.lock().unwrap().push(request);
                    response
                };
                for chunk in encode_response(header.req_id, &response) {
                    if stream.write_all(&chunk).is_err() {
                        return;
                    }
                }
            }
            let mut chunk = vec![0u8; 64 << 10];
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(read) => frames.buffer().extend_from_slice(&chunk[..read]),
            }
        }
    });
    (addr, seen)
}
