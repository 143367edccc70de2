//! Issue 14's protocol half end to end: APPEND_TURNS (keys and retries, explicit parents,
//! labels, links, summaries, batches all or none), GET_TURN_BY_KEY, TURN_LOG with a label
//! filter and paging, READ_PAGE windows with extras; and that it all survives a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use ctxstore_protocol::{
    AppendsRequest, AppendsResponse, ContextRef, ContextsRequest, ContextsResponse, ErrorCode,
    ExtrasWire, LogCursorWire, PageKind, ParentWire, PayloadSpec, ReadsRequest, ReadsResponse,
    Request, Response, TurnSpec, TurnWire, read_flags,
};
use ctxstore_protocol::{appends, contexts, reads};

fn spec(payload: &'static str, key: &str, labels: &[(&str, &str)]) -> TurnSpec {
    TurnSpec {
        parent: ParentWire::Head,
        type_tag: 1,
        codec: 0,
        summary: false,
        extras: ExtrasWire {
            key: Bytes::from(key.to_string()),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            links: vec![],
        },
        payload: PayloadSpec::Bytes(Bytes::from_static(payload.as_bytes())),
    }
}

fn append(raw: &mut Raw, req_id: u64, context: &str, turns: Vec<TurnSpec>) -> Response {
    raw.call(
        req_id,
        &Request::Appends(AppendsRequest::AppendTurns(appends::AppendTurns {
            context: ContextRef::Name(context.into()),
            expected_head: None,
            turns,
        })),
    )
}

fn appended(response: Response) -> Vec<(TurnWire, bool)> {
    match response {
        Response::Appends(AppendsResponse::AppendedTurns(appends::AppendedTurns { turns })) => {
            turns.into_iter().map(|t| (t.turn, t.existing)).collect()
        }
        other => panic!("expected APPEND_TURNS' answer, got {other:?}"),
    }
}

fn log_ids(raw: &mut Raw, req_id: u64, labels: &[(&str, &str)]) -> Vec<u64> {
    let mut ids = Vec::new();
    let mut cursor: Option<LogCursorWire> = None;
    for page in 0.. {
        let response = raw.call(
            req_id + page,
            &Request::Reads(ReadsRequest::TurnLog(reads::TurnLog {
                context: ContextRef::Name("thread".into()),
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                cursor,
                limit: 2,
                read_flags: read_flags::WITH_PAYLOADS,
            })),
        );
        let Response::Reads(ReadsResponse::TurnLogPage(reads::TurnLogPage {
            next_cursor,
            entries,
        })) = response
        else {
            panic!("expected TURN_LOG's answer, got {response:?}");
        };
        for entry in &entries {
            assert_eq!(entry.payload.data.len() as u32, entry.turn.payload_len);
        }
        ids.extend(entries.iter().map(|entry| entry.turn.turn_id));
        match next_cursor {
            Some(next) => cursor = Some(next),
            None => return ids,
        }
    }
    unreachable!()
}

#[test]
fn turns_for_agent_frameworks_through_the_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(config(dir.path()));
    let mut raw = Raw::connect(server.local_addr());
    raw.hello(b"");
    let open = Request::Contexts(ContextsRequest::CtxOpen(contexts::CtxOpen {
        base_turn_id: 0,
        get_or_create: false,
        clone_from: None,
        name: Some("thread".into()),
        tags: vec![],
    }));
    assert!(matches!(
        raw.call(2, &open),
        Response::Contexts(ContextsResponse::Opened(contexts::Opened { .. }))
    ));

    // A step of three turns in one request; then a retry of its first turn.
    let step = vec![
        spec("call", "cp-1", &[("run_id", "r1")]),
        spec("result", "", &[("run_id", "r1")]),
        spec("message", "cp-2", &[("run_id", "r2")]),
    ];
    let turns = appended(append(&mut raw, 3, "thread", step));
    assert_eq!(
        turns.iter().map(|(t, _)| t.depth).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert!(turns.iter().all(|(_, existing)| !existing));
    let retry = appended(append(
        &mut raw,
        4,
        "thread",
        vec![spec("call", "cp-1", &[])],
    ));
    assert_eq!(retry, [(turns[0].0, true)]);

    // Time travel: a turn after the first one; the head moves there.
    let mut after_first = spec("branch", "cp-3", &[("run_id", "r2")]);
    after_first.parent = ParentWire::Turn(turns[0].0.turn_id);
    after_first.extras.links = vec![turns[2].0.turn_id];
    let branch = appended(append(&mut raw, 5, "thread", vec![after_first]))[0].0;
    assert_eq!(
        (branch.parent_turn_id, branch.depth),
        (turns[0].0.turn_id, 1)
    );

    // Look-up by key with the extras.
    let by_key = raw.call(
        6,
        &Request::Reads(ReadsRequest::GetTurnByKey(reads::GetTurnByKey {
            context: ContextRef::Name("thread".into()),
            key: Bytes::from_static(b"cp-3"),
        })),
    );
    let Response::Reads(ReadsResponse::TurnInfo(reads::TurnInfo { turn, extras })) = by_key else {
        panic!("{by_key:?}");
    };
    assert_eq!(turn.turn_id, branch.turn_id);
    assert_eq!(extras.labels, [("run_id".to_string(), "r2".to_string())]);
    assert_eq!(extras.links, [turns[2].0.turn_id]);
    let missing = raw.call(
        7,
        &Request::Reads(ReadsRequest::GetTurnByKey(reads::GetTurnByKey {
            context: ContextRef::Name("thread".into()),
            key: Bytes::from_static(b"nope"),
        })),
    );
    assert_eq!(error_code(&missing), Some(ErrorCode::NotFound));

    // The log across both branches, newest first, paged two at a time; filtered by label.
    let all = log_ids(&mut raw, 10, &[]);
    let expected: Vec<u64> = [branch, turns[2].0, turns[1].0, turns[0].0]
        .iter()
        .map(|turn| turn.turn_id)
        .collect();
    assert_eq!(all, expected);
    assert_eq!(
        log_ids(&mut raw, 20, &[("run_id", "r2")]),
        [branch.turn_id, turns[2].0.turn_id]
    );

    // A batch with one bad turn writes nothing; a foreign parent is refused.
    let before = log_ids(&mut raw, 30, &[]);
    let bad = vec![spec("ok", "", &[]), spec("bad", &"k".repeat(65), &[])];
    let refused = append(&mut raw, 40, "thread", bad);
    assert_eq!(error_code(&refused), Some(ErrorCode::TooLarge));
    assert_eq!(log_ids(&mut raw, 41, &[]), before);
    let mut foreign = spec("x", "", &[]);
    foreign.parent = ParentWire::Turn(999_999);
    let refused = append(&mut raw, 50, "thread", vec![foreign]);
    assert_eq!(error_code(&refused), Some(ErrorCode::NotFound));

    // A summary, then the window starts there.
    let mut summary = spec("summary", "", &[]);
    summary.summary = true;
    let summary = appended(append(&mut raw, 60, "thread", vec![summary]))[0].0;
    appended(append(&mut raw, 61, "thread", vec![spec("after", "", &[])]));
    let window = raw.call(
        62,
        &Request::Reads(ReadsRequest::ReadPage(reads::ReadPage {
            context: ContextRef::Name("thread".into()),
            kind: PageKind::Window,
            limit: 100,
            read_flags: read_flags::WITH_PAYLOADS,
        })),
    );
    let Response::Reads(ReadsResponse::Page(reads::Page { entries, .. })) = window else {
        panic!("{window:?}");
    };
    let payloads: Vec<&[u8]> = entries.iter().map(|e| &e.payload.data[..]).collect();
    assert_eq!(payloads, [&b"summary"[..], &b"after"[..]]);
    assert_eq!(entries[0].turn.turn_id, summary.turn_id);
    drop(raw);

    // All of it survives a restart.
    let config = config(dir.path());
    server.stop();
    let server = start(config);
    let mut raw = Raw::connect(server.local_addr());
    raw.hello(b"");
    assert_eq!(
        log_ids(&mut raw, 2, &[("run_id", "r2")]),
        [branch.turn_id, turns[2].0.turn_id]
    );
    let retry = appended(append(
        &mut raw,
        20,
        "thread",
        vec![spec("call", "cp-1", &[])],
    ));
    assert_eq!(retry, [(turns[0].0, true)]);
}
