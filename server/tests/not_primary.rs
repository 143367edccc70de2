//! NOT_PRIMARY and ROLE (protocol version 4, decision 0031 §10), through the binary on a
//! `file://` replica: a standby refuses a write with NOT_PRIMARY to a connection of version 4
//! (the message says it is a standby and names its primary; `detail` is the epoch) and with
//! READ_ONLY to a connection of version 3, byte for byte the frame version 3 always sent
//! (`store is read-only: …`, detail 0); nothing is written either way. ROLE says what each
//! server is: off without a replica, the primary taking writes (its advertised address, its
//! epoch), the standby taking none (the same epoch, the primary unknown to ROLE); a version-3
//! connection does not know ROLE.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Raw, config, start};
use ctxstore_client::{ClientConfig, blocking};
use ctxstore_protocol::admin::{self, RoleAnswer, ServerRole};
use ctxstore_protocol::{
    AckAfter, AdminResponse, AppendsRequest, ContextRef, ContextsRequest, ErrorCode, Request,
    Response, appends, contexts, encode_response,
};
use ctxstore_testsupport::{ServerLaunch, TestServer};

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");
const CATCH_UP: Duration = Duration::from_secs(30);

fn spawn(data: &Path, flags: &[&str]) -> TestServer {
    ServerLaunch::new(SERVER)
        .data(data)
        .flags(flags)
        .envs(&[("RUST_LOG", "info")])
        .keep_log()
        .start()
}

/// A raw connection that negotiated exactly `version`.
fn raw(server: &TestServer, version: u16) -> Raw {
    let mut raw = Raw::connect(server.socket_addr());
    match raw.hello_versions(b"", version, version) {
        Response::Admin(AdminResponse::Negotiated(admin::Negotiated {
            version: negotiated,
            ..
        })) => assert_eq!(negotiated, version),
        other => panic!("HELLO of version {version}: {other:?}"),
    }
    raw
}

fn role(raw: &mut Raw) -> RoleAnswer {
    match raw.call(90, &Request::Admin(admin::Role.into())) {
        Response::Admin(AdminResponse::RoleAnswer(role)) => *role,
        other => panic!("ROLE answered {other:?}"),
    }
}

fn append(context: u64) -> Request {
    Request::Appends(AppendsRequest::AppendTurn(appends::AppendTurn {
        context: ContextRef::Id(context),
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: Bytes::from_static(b"a write the standby must refuse"),
    }))
}

fn create() -> Request {
    Request::Contexts(ContextsRequest::CtxCreate(contexts::CtxCreate {
        base_turn_id: 0,
    }))
}

#[test]
fn a_server_without_a_replica_is_off_and_takes_writes() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(config(dir.path()));
    let mut raw = Raw::connect(server.local_addr());
    raw.hello(b"");
    let off = role(&mut raw);
    assert_eq!(
        (off.role, off.accepts_writes, off.ack_after, off.epoch),
        (ServerRole::Off, true, AckAfter::Local, 0),
        "{off:?}"
    );
    assert_eq!((off.lease_ms, off.lease_age_ms, off.ack_open_ms), (0, 0, 0));
    assert!(off.primary.is_empty() && off.holder.is_empty(), "{off:?}");
}

#[test]
fn a_standby_answers_not_primary_to_version_4_and_read_only_to_version_3() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    let primary_flags = [
        "--replicate-to",
        url.as_str(),
        "--replicate-interval",
        "100ms",
    ];
    let primary = spawn(&root.path().join("primary"), &primary_flags);
    let writer = blocking::Client::connect(ClientConfig::new(primary.addr.clone())).unwrap();
    assert_eq!(
        writer.protocol_version(),
        ctxstore_protocol::PROTOCOL_VERSION
    );
    let context = writer.create_context().unwrap().context_id;
    let head = writer
        .append(context, None, 0, 0, Bytes::from_static(b"shipped"))
        .unwrap()
        .turn
        .turn_id;

    // The primary: takes writes, says where it is and its epoch.
    let shipping = writer.role().unwrap();
    assert_eq!(
        (shipping.role, shipping.accepts_writes, shipping.ack_after),
        (ServerRole::Primary, true, AckAfter::Local),
        "{shipping:?}"
    );
    assert!(shipping.epoch > 0, "{shipping:?}");
    assert_eq!(shipping.primary, primary.addr, "{shipping:?}");

    let standby_flags = ["--follow", url.as_str(), "--replicate-interval", "100ms"];
    let standby = spawn(&root.path().join("standby"), &standby_flags);
    let reader = blocking::Client::connect(ClientConfig::new(standby.addr.clone())).unwrap();
    let started = Instant::now();
    while reader.head(context).map(|head| head.head_turn_id).ok() != Some(head) {
        assert!(started.elapsed() < CATCH_UP, "{}", standby.log());
        std::thread::sleep(Duration::from_millis(50));
    }

    // Version 4: ROLE, then NOT_PRIMARY naming the primary, the epoch in `detail`.
    let mut v4 = raw(&standby, 4);
    let following = role(&mut v4);
    assert_eq!(
        (following.role, following.accepts_writes, following.epoch),
        (ServerRole::Standby, false, shipping.epoch),
        "{following:?}"
    );
    assert!(following.primary.is_empty(), "{following:?}");
    let refused = v4.call(2, &append(context));
    let Response::Error {
        code: ErrorCode::NotPrimary,
        detail,
        message,
    } = &refused
    else {
        panic!("a standby's answer to a version-4 write: {refused:?}");
    };
    assert_eq!(*detail, shipping.epoch, "{refused:?}");
    assert!(
        message.starts_with("not the primary: this store is a standby following")
            && message.contains(&primary.addr),
        "{message}"
    );
    let reason = message.strip_prefix("not the primary: ").unwrap();
    let created = v4.call(3, &create());
    assert!(
        matches!(
            created,
            Response::Error {
                code: ErrorCode::NotPrimary,
                ..
            }
        ),
        "{created:?}"
    );

    // Version 3: READ_ONLY, the frame version 3 always sent; ROLE is unknown there.
    let mut v3 = raw(&standby, 3);
    let refused = v3.call(2, &append(context));
    let read_only = Response::Error {
        code: ErrorCode::ReadOnly,
        detail: 0,
        message: format!("store is read-only: {reason}"),
    };
    assert_eq!(refused, read_only);
    let frame = |response: &Response| -> Vec<u8> {
        encode_response(2, response)
            .iter()
            .flat_map(|chunk| chunk.to_vec())
            .collect()
    };
    assert_eq!(frame(&refused), frame(&read_only));
    assert!(matches!(
        v3.call(3, &create()),
        Response::Error {
            code: ErrorCode::ReadOnly,
            ..
        }
    ));
    assert!(matches!(
        v3.call(4, &Request::Admin(admin::Role.into())),
        Response::Error {
            code: ErrorCode::UnknownMessage,
            ..
        }
    ));

    // Nothing was written: the head is the primary's.
    assert_eq!(reader.head(context).unwrap().head_turn_id, head);
    assert_eq!(writer.head(context).unwrap().head_turn_id, head);
}
