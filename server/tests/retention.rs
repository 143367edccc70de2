//! Retention through the protocol (issue 15): CTX_DELETE, CTX_PRUNE and CTX_TTL with their
//! typed errors, what a restart keeps, a version-1 connection that does not know them, and
//! the binary's `--context-ttl` deleting an idle context.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use ctxstore_protocol::{
    AppendsRequest, AppendsResponse, ContextInfoWire, ContextRef, ContextsRequest,
    ContextsResponse, ErrorCode, MessageType, ReadsRequest, ReadsResponse, Request, Response,
    RetentionRequest, RetentionResponse,
};
use ctxstore_protocol::{appends, contexts, reads};

fn named(name: &str) -> ContextRef {
    ContextRef::Name(name.into())
}

fn open(name: &str) -> Request {
    Request::Contexts(ContextsRequest::CtxOpen(contexts::CtxOpen {
        base_turn_id: 0,
        get_or_create: false,
        clone_from: None,
        name: Some(name.into()),
        tags: vec![],
    }))
}

fn append(context: ContextRef, payload: &'static [u8]) -> Request {
    Request::Appends(AppendsRequest::AppendTurn(appends::AppendTurn {
        context,
        expected_head: None,
        type_tag: 1,
        codec: 0,
        payload: Bytes::from_static(payload),
    }))
}

fn retention(response: Response, expected: MessageType) -> (ContextInfoWire, u32, u64) {
    match response {
        Response::Retention(RetentionResponse::Retention(
            ctxstore_protocol::retention::Retention {
                message_type,
                info,
                floor_depth,
                ttl_ms,
            },
        )) if message_type == expected => (info, floor_depth, ttl_ms),
        other => panic!("expected {}'s answer, got {other:?}", expected.name()),
    }
}

fn code(response: &Response) -> ErrorCode {
    error_code(response).unwrap_or_else(|| panic!("expected an ERROR, got {response:?}"))
}

fn last_depths(raw: &mut Raw, req_id: u64, context: ContextRef) -> Vec<u32> {
    match raw.call(
        req_id,
        &Request::Reads(ReadsRequest::GetLast(reads::GetLast {
            context,
            limit: 100,
            read_flags: 0,
        })),
    ) {
        Response::Reads(ReadsResponse::Turns(reads::Turns { entries, .. })) => {
            entries.iter().map(|e| e.turn.depth).collect()
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn delete_prune_and_ttl_through_the_protocol_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(config(dir.path()));
    let mut raw = Raw::connect(server.local_addr());
    raw.hello(b"");
    assert!(matches!(
        raw.call(2, &open("gone")),
        Response::Contexts(ContextsResponse::Opened(contexts::Opened { .. }))
    ));
    assert!(matches!(
        raw.call(3, &open("kept")),
        Response::Contexts(ContextsResponse::Opened(contexts::Opened { .. }))
    ));
    for (req_id, payload) in [(4, &b"a"[..]), (5, b"b"), (6, b"c"), (7, b"d"), (8, b"e")] {
        let payload: &'static [u8] = payload;
        assert!(matches!(
            raw.call(req_id, &append(named("kept"), payload)),
            Response::Appends(AppendsResponse::Appended(appends::Appended { .. }))
        ));
    }
    assert!(matches!(
        raw.call(9, &append(named("gone"), b"x")),
        Response::Appends(AppendsResponse::Appended(appends::Appended { .. }))
    ));

    // CTX_DELETE answers the context as it was; then it is NOT_FOUND, by name and by id.
    let (before, _, _) = retention(
        raw.call(
            10,
            &Request::Retention(RetentionRequest::CtxDelete(
                ctxstore_protocol::retention::CtxDelete {
                    context: named("gone"),
                },
            )),
        ),
        MessageType::CtxDelete,
    );
    assert_eq!(before.name.as_deref(), Some("gone"));
    let gone = ContextRef::Id(before.head.context_id);
    assert_eq!(
        code(&raw.call(11, &append(gone.clone(), b"late"))),
        ErrorCode::NotFound
    );
    assert_eq!(
        code(&raw.call(
            12,
            &Request::Contexts(ContextsRequest::CtxShow(contexts::CtxShow {
                context: gone
            }))
        )),
        ErrorCode::NotFound
    );
    assert_eq!(
        code(&raw.call(
            13,
            &Request::Retention(RetentionRequest::CtxDelete(
                ctxstore_protocol::retention::CtxDelete {
                    context: named("gone")
                }
            ))
        )),
        ErrorCode::NotFound
    );

    // CTX_PRUNE: keep 0 is a typed error on an open connection; keep 2 floors at depth 3.
    assert_eq!(
        code(&raw.call(
            14,
            &Request::Retention(RetentionRequest::CtxPrune(
                ctxstore_protocol::retention::CtxPrune {
                    context: named("kept"),
                    keep: 0
                }
            ))
        )),
        ErrorCode::InvalidArgument
    );
    let (_, floor, _) = retention(
        raw.call(
            15,
            &Request::Retention(RetentionRequest::CtxPrune(
                ctxstore_protocol::retention::CtxPrune {
                    context: named("kept"),
                    keep: 2,
                },
            )),
        ),
        MessageType::CtxPrune,
    );
    assert_eq!(floor, 3);
    assert_eq!(last_depths(&mut raw, 16, named("kept")), [3, 4]);

    // CTX_TTL sets, reads (without `set`) and clears.
    let ttl = |req_id, set, ttl_ms| {
        (
            req_id,
            Request::Retention(RetentionRequest::CtxTtl(
                ctxstore_protocol::retention::CtxTtl {
                    context: named("kept"),
                    set,
                    ttl_ms,
                },
            )),
        )
    };
    let (req_id, request) = ttl(17, true, 86_400_000);
    let (info, floor, ttl_ms) = retention(raw.call(req_id, &request), MessageType::CtxTtl);
    assert_eq!(
        (info.name.as_deref(), floor, ttl_ms),
        (Some("kept"), 3, 86_400_000)
    );
    let (req_id, request) = ttl(18, true, u64::MAX);
    assert_eq!(
        code(&raw.call(req_id, &request)),
        ErrorCode::InvalidArgument
    );
    server.stop();

    let mut server = start(config(dir.path()));
    let mut raw = Raw::connect(server.local_addr());
    raw.hello(b"");
    let (req_id, request) = ttl(2, false, 0);
    let (_, floor, ttl_ms) = retention(raw.call(req_id, &request), MessageType::CtxTtl);
    assert_eq!((floor, ttl_ms), (3, 86_400_000));
    assert_eq!(last_depths(&mut raw, 3, named("kept")), [3, 4]);
    assert_eq!(
        code(&raw.call(
            4,
            &Request::Contexts(ContextsRequest::GetHead(contexts::GetHead {
                context: named("gone")
            }))
        )),
        ErrorCode::NotFound
    );
    let (req_id, request) = ttl(5, true, 0);
    let (_, _, ttl_ms) = retention(raw.call(req_id, &request), MessageType::CtxTtl);
    assert_eq!(ttl_ms, 0);

    // A version-1 connection does not know these messages.
    let mut v1 = Raw::connect(server.local_addr());
    v1.hello_versions(b"", 1, 1);
    assert_eq!(
        code(&v1.call(
            2,
            &Request::Retention(RetentionRequest::CtxDelete(
                ctxstore_protocol::retention::CtxDelete {
                    context: named("kept")
                }
            ))
        )),
        ErrorCode::UnknownMessage
    );
    server.stop();
}

#[test]
fn the_servers_context_ttl_deletes_an_idle_context() {
    let server = server_process(&["--context-ttl", "200ms"]);
    let mut raw = Raw::connect(server.socket_addr());
    raw.hello(b"");
    assert!(matches!(
        raw.call(2, &open("idle")),
        Response::Contexts(ContextsResponse::Opened(contexts::Opened { .. }))
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut req_id = 3;
    loop {
        let show = raw.call(
            req_id,
            &Request::Contexts(ContextsRequest::CtxShow(contexts::CtxShow {
                context: named("idle"),
            })),
        );
        if error_code(&show) == Some(ErrorCode::NotFound) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the idle context outlived its TTL: {show:?}\n{}",
            server.log()
        );
        req_id += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
}
