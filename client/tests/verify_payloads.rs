//! Which payloads the client hashes (decision 0015): zstd ones always; raw ones — which the
//! server hashed when it read them — only from a server that is not on loopback, unless
//! `VerifyPayloads::Always`. A scripted fake answers reads with damaged payloads so that each
//! check is seen catching (or, by decision, not looking at) the damage; a real server on
//! loopback reads back exact bytes with the default.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};

use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{BlobHash, ClientConfig, ClientError, VerifyPayloads};
use ctxstore_protocol::{
    BlobsRequest, BlobsResponse, MessageType, PayloadEncoding, PayloadWire, ReadsResponse, Request,
    Response, ServerLimits, TurnEntry, TurnWire,
};
use ctxstore_protocol::{blobs, reads};

use ctxstore_testsupport::{TestServer, scripted_server};

const PAYLOAD: &[u8] = b"the agent calls a tool and reads the result back";

/// A version-1 fake on `ip` that answers every GET_LAST with one turn naming `PAYLOAD`'s hash
/// and length but carrying `payload`, and every GET_BLOB with `payload`.
fn fake_server(ip: IpAddr, payload: PayloadWire) -> String {
    let (addr, _) = scripted_server(
        ip,
        1,
        ServerLimits::default(),
        move |request| match request {
            Request::Blobs(BlobsRequest::GetBlob(blobs::GetBlob { .. })) => {
                Response::Blobs(BlobsResponse::Blob(payload.clone()))
            }
            _ => Response::Reads(ReadsResponse::Turns(reads::Turns {
                message_type: MessageType::GetLast,
                next_before: 0,
                tip_depth: 0,
                entries: vec![TurnEntry {
                    turn: turn_wire(),
                    payload: payload.clone(),
                }],
            })),
        },
    );
    addr
}

fn turn_wire() -> TurnWire {
    TurnWire {
        turn_id: 1,
        parent_turn_id: 0,
        context_id: 1,
        depth: 0,
        codec: 0,
        type_tag: 1,
        payload_hash: BlobHash(BlobHash::of(PAYLOAD).0),
        payload_len: PAYLOAD.len() as u32,
        flags: 0,
        created_at_unix_ms: 1,
    }
}

/// `PAYLOAD` with its first byte changed: the right length, the wrong hash.
fn flipped() -> Bytes {
    let mut bytes = PAYLOAD.to_vec();
    bytes[0] ^= 0x20;
    Bytes::from(bytes)
}

fn connect(addr: &str, verify_payloads: VerifyPayloads) -> Client {
    Client::connect(ClientConfig::new(addr).with_verify_payloads(verify_payloads)).unwrap()
}

/// What reading the fake's one turn and its blob gives: the bytes, or the error's name.
fn read_both(client: &Client) -> [Result<Bytes, &'static str>; 2] {
    let last = client
        .last(1, 1, true)
        .map(|page| page.turns[0].payload.clone().unwrap());
    let blob = client.blob(BlobHash::of(PAYLOAD));
    [last, blob].map(|result| result.map_err(|error: ClientError| error.name()))
}

#[test]
fn on_loopback_raw_payloads_are_trusted_by_default_and_hashed_when_asked() {
    let damaged = PayloadWire::raw(flipped());
    let addr = fake_server(IpAddr::V4(Ipv4Addr::LOCALHOST), damaged.clone());
    let default = connect(&addr, VerifyPayloads::default());
    assert!(!default.verifies_raw_payloads());
    // By decision: on loopback the bytes never crossed anything but the kernel's memory, and
    // the server hashed them when it read them, so a second hash here pays for nothing. The
    // fake's damage is its own lie, which only `Always` catches.
    assert_eq!(read_both(&default), [Ok(flipped()), Ok(flipped())]);

    let addr = fake_server(IpAddr::V4(Ipv4Addr::LOCALHOST), damaged);
    let always = connect(&addr, VerifyPayloads::Always);
    assert!(always.verifies_raw_payloads());
    assert_eq!(
        read_both(&always),
        [Err("CORRUPT_PAYLOAD"), Err("CORRUPT_PAYLOAD")]
    );
}

#[test]
fn a_turns_payload_length_is_checked_whatever_the_policy() {
    let short = PayloadWire::raw(Bytes::from_static(&PAYLOAD[1..]));
    for policy in [VerifyPayloads::WhenRemote, VerifyPayloads::Always] {
        let addr = fake_server(IpAddr::V4(Ipv4Addr::LOCALHOST), short.clone());
        let client = connect(&addr, policy);
        let error = client.last(1, 1, true).unwrap_err();
        assert_eq!(error.name(), "CORRUPT_PAYLOAD", "{policy:?}: {error}");
        assert!(error.to_string().contains("the turn says"), "{error}");
    }
}

#[test]
fn zstd_payloads_are_hashed_whatever_the_policy() {
    let compressed = zstd::bulk::compress(&flipped(), 1).unwrap();
    let zstd = PayloadWire {
        encoding: PayloadEncoding::Zstd,
        raw_len: PAYLOAD.len() as u32,
        data: Bytes::from(compressed),
    };
    for policy in [VerifyPayloads::WhenRemote, VerifyPayloads::Always] {
        let addr = fake_server(IpAddr::V4(Ipv4Addr::LOCALHOST), zstd.clone());
        let client = connect(&addr, policy);
        let both = read_both(&client);
        assert_eq!(
            both,
            [Err("CORRUPT_PAYLOAD"), Err("CORRUPT_PAYLOAD")],
            "{policy:?}"
        );
    }
}

#[test]
fn the_policy_tells_loopback_from_remote_addresses() {
    let loopback: [IpAddr; 4] = [
        Ipv4Addr::new(127, 0, 0, 1).into(),
        Ipv4Addr::new(127, 1, 2, 3).into(),
        Ipv6Addr::LOCALHOST.into(),
        Ipv4Addr::new(127, 0, 0, 1).to_ipv6_mapped().into(),
    ];
    let remote: [IpAddr; 4] = [
        Ipv4Addr::new(10, 0, 0, 1).into(),
        Ipv4Addr::new(192, 168, 1, 1).into(),
        Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped().into(),
        "2001:db8::1".parse::<Ipv6Addr>().unwrap().into(),
    ];
    for ip in loopback {
        assert!(!VerifyPayloads::WhenRemote.hashes_raw_from(ip), "{ip}");
        assert!(VerifyPayloads::Always.hashes_raw_from(ip), "{ip}");
    }
    for ip in remote {
        assert!(VerifyPayloads::WhenRemote.hashes_raw_from(ip), "{ip}");
        assert!(VerifyPayloads::Always.hashes_raw_from(ip), "{ip}");
    }
    assert_eq!("always".parse(), Ok(VerifyPayloads::Always));
    assert_eq!("when-remote".parse(), Ok(VerifyPayloads::WhenRemote));
    assert!("never".parse::<VerifyPayloads>().is_err());
}

/// This machine's address on its default route, if it has one that is not loopback (a UDP
/// connect sends nothing; it only picks the route).
fn non_loopback_ip() -> Option<IpAddr> {
    let socket = UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("10.255.255.255:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[test]
fn from_a_server_that_is_not_on_loopback_raw_payloads_are_hashed_by_default() {
    let Some(ip) = non_loopback_ip() else {
        eprintln!("no address but loopback on this machine: the remote case is not exercised");
        return;
    };
    let addr = fake_server(ip, PayloadWire::raw(flipped()));
    let client = connect(&addr, VerifyPayloads::default());
    assert!(client.verifies_raw_payloads(), "{addr}");
    assert_eq!(
        read_both(&client),
        [Err("CORRUPT_PAYLOAD"), Err("CORRUPT_PAYLOAD")]
    );
}

#[test]
fn a_real_server_on_loopback_reads_back_exact_bytes_without_the_second_hash() {
    let server = TestServer::start(None);
    let client = connect(&server.addr, VerifyPayloads::default());
    assert!(!client.verifies_raw_payloads());
    let context = client.create_context().unwrap().context_id;
    let payloads: Vec<Bytes> = (0..40u32)
        .map(|i| Bytes::from(format!("turn {i}: {}", "x".repeat(i as usize * 997))))
        .collect();
    for payload in &payloads {
        client.append(context, None, 1, 1, payload.clone()).unwrap();
    }
    let page = client.last(context, 40, true).unwrap();
    let read: Vec<Bytes> = page
        .turns
        .iter()
        .map(|turn| turn.payload.clone().unwrap())
        .collect();
    assert_eq!(read, payloads);
}
