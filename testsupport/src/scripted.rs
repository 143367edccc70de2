//! The one scripted fake ctxstore server, for client and CLI tests: HELLO answered with the
//! protocol version and limits the test chooses, every other request answered by the test's
//! closure (or not at all) and recorded. For the client's own steps (what it sends, in which
//! order), for servers of other versions, and for answers a real server never gives (damaged
//! payloads, silence after HELLO, a slow collection).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use ctxstore_protocol::admin;
use ctxstore_protocol::{
    AdminRequest, AdminResponse, FrameReader, Request, Response, ServerLimits, decode_request,
    encode_response,
};

/// Requests the fake saw after HELLO, in the order it answered them (every connection).
pub type Seen = Arc<Mutex<Vec<Request>>>;

/// What the fake answers a request with; `None`: nothing (the request waits for ever).
type Answer = dyn FnMut(&Request) -> Option<Response> + Send;

/// A fake server's HELLO: where it listens, the version it chooses, the limits it tells.
#[derive(Debug, Clone)]
pub struct ScriptedServer {
    ip: IpAddr,
    version: u16,
    limits: ServerLimits,
}

impl ScriptedServer {
    /// On loopback, choosing `version`, with default (zero) limits.
    pub fn new(version: u16) -> ScriptedServer {
        ScriptedServer {
            ip: Ipv4Addr::LOCALHOST.into(),
            version,
            limits: ServerLimits::default(),
        }
    }

    /// Listens on `ip` (decision 0015 tells loopback apart).
    pub fn ip(mut self, ip: IpAddr) -> ScriptedServer {
        self.ip = ip;
        self
    }

    pub fn limits(mut self, limits: ServerLimits) -> ScriptedServer {
        self.limits = limits;
        self
    }

    /// Listens (port chosen by the system) and serves every connection on a thread of its
    /// own: HELLO gets the version and limits, any other request `answer(&request)`, one
    /// request at a time across connections. Returns the address to connect to and the
    /// requests seen. A connection ends when its client goes or sends what does not decode.
    pub fn serve(
        self,
        answer: impl FnMut(&Request) -> Option<Response> + Send + 'static,
    ) -> (String, Seen) {
        let listener = match TcpListener::bind((self.ip, 0)) {
            Ok(listener) => listener,
            Err(error) => panic!("a fake server on {}: {error}", self.ip),
        };
        let addr = match listener.local_addr() {
            Ok(addr) => addr.to_string(),
            Err(error) => panic!("a fake server's address: {error}"),
        };
        let seen = Seen::default();
        let recorded = seen.clone();
        let answer: Arc<Mutex<Box<Answer>>> = Arc::new(Mutex::new(Box::new(answer)));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (script, answer, recorded) = (self.clone(), answer.clone(), recorded.clone());
                std::thread::spawn(move || script.converse(stream, &answer, &recorded));
            }
        });
        (addr, seen)
    }

    /// One connection, until its client goes.
    fn converse(
        &self,
        mut stream: TcpStream,
        answer: &Mutex<Box<Answer>>,
        seen: &Mutex<Vec<Request>>,
    ) {
        let mut frames = FrameReader::new(64 << 20);
        loop {
            while let Ok(Some((header, body))) = frames.next_frame() {
                let Ok(request) = decode_request(&header, body) else {
                    return;
                };
                let response =
                    if let Request::Admin(AdminRequest::Hello(admin::Hello { .. })) = request {
                        Some(Response::Admin(AdminResponse::Negotiated(
                            admin::Negotiated {
                                version: self.version,
                                limits: self.limits,
                                server_name: "fake".into(),
                            },
                        )))
                    } else {
                        let mut answer = answer
                            .lock()
                            .unwrap_or_else(|poisoned| poisoned.into_inner());
                        let response = answer(&request);
                        seen.lock()
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                            .push(request);
                        response
                    };
                for chunk in response
                    .iter()
                    .flat_map(|response| encode_response(header.req_id, response))
                {
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
    }
}

/// A fake server on `ip` choosing `version` and telling `limits`, answering every request
/// after HELLO with `answer`: `ScriptedServer::serve` for a closure that always answers.
pub fn scripted_server(
    ip: IpAddr,
    version: u16,
    limits: ServerLimits,
    mut answer: impl FnMut(&Request) -> Response + Send + 'static,
) -> (String, Seen) {
    ScriptedServer::new(version)
        .ip(ip)
        .limits(limits)
        .serve(move |request| Some(answer(request)))
}
