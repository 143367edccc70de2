//! The client library's calls for turns for agent frameworks (issue 14, protocol version 2)
//! against a real `ctxstore-server`: appends after an explicit parent or as a new root, keys
//! that make retries idempotent (`existing`), labels, links and summaries read back by every
//! call, the turn log paged across branches and filtered by labels, windows from the latest
//! summary, a store-wide find by label, batch appends (all or none), turns by id with their
//! extras on and off their context's chain; and a version-1 server refusing all of it unsent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{
    AppendedTurn, ClientConfig, ClientError, ContextRef, ErrorCode, LogCursor, NewContext, NewTurn,
    PageKind, Parent, TurnInfo,
};
use ctxstore_protocol::admin;
use ctxstore_protocol::{AdminRequest, AdminResponse, Request, Response};

use ctxstore_testsupport::{ScriptedServer, TestServer};

fn connect(server: &TestServer) -> Client {
    Client::connect(ClientConfig::new(server.addr.clone())).unwrap()
}

fn name(name: &str) -> ContextRef {
    ContextRef::Name(name.into())
}

/// A named, empty context.
fn open(client: &Client, context: &str) -> u64 {
    client
        .open_context(NewContext::new().name(context))
        .unwrap()
        .context
        .context_id
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    labels(pairs).into_iter().collect()
}

fn text(payload: &str) -> NewTurn {
    NewTurn::bytes(Bytes::from(payload.to_string()))
}

fn append(client: &Client, context: &str, turn: NewTurn) -> AppendedTurn {
    client.append_turn(name(context), None, turn).unwrap()
}

fn ids(turns: &[TurnInfo]) -> Vec<u64> {
    turns.iter().map(|info| info.turn.turn_id).collect()
}

fn code(error: &ClientError) -> Option<ErrorCode> {
    error.code()
}

#[test]
fn explicit_parents_roots_and_idempotent_keys() {
    let server = TestServer::start(None);
    let client = connect(&server);
    let thread = open(&client, "thread");

    let first = append(
        &client,
        "thread",
        text("a").key("cp-1").label("run_id", "r1"),
    );
    assert!(!first.existing && !first.deduped);
    assert_eq!(
        (first.turn.turn.depth, first.turn.turn.parent_turn_id),
        (0, 0)
    );
    assert_eq!(first.turn.turn.context_id, thread);
    let second = append(&client, "thread", text("b").key("cp-2"));
    assert_eq!(second.turn.turn.parent_turn_id, first.turn.turn.turn_id);

    // A retry of the first append (other payload and labels, same key): nothing written, the
    // first turn answered with the extras it was stored with.
    let retry = append(
        &client,
        "thread",
        text("a, again").key("cp-1").label("run_id", "other"),
    );
    assert!(retry.existing);
    assert_eq!(retry.turn, first.turn);
    assert_eq!(retry.turn.labels, labels(&[("run_id", "r1")]));
    let head = client.head(thread).unwrap();
    assert_eq!(
        head.head_turn_id, second.turn.turn.turn_id,
        "the head stays"
    );

    // Time travel: a child of the first turn; the head moves to it.
    let branch = append(
        &client,
        "thread",
        text("c").parent(Parent::Turn(first.turn.turn.turn_id)),
    );
    assert_eq!(
        branch.turn.turn.parent_turn_id, first.turn.turn.turn_id,
        "explicit parent"
    );
    assert_eq!(branch.turn.turn.depth, 1);
    assert_eq!(
        client.head(name("thread")).unwrap().head_turn_id,
        branch.turn.turn.turn_id
    );
    // A new root.
    let root = append(&client, "thread", text("d").parent(Parent::Root));
    assert_eq!(
        (root.turn.turn.depth, root.turn.turn.parent_turn_id),
        (0, 0)
    );
    assert_eq!(
        client.head(thread).unwrap().head_turn_id,
        root.turn.turn.turn_id
    );
    // Keys answer whatever branch their turn is on, by name and by id.
    let by_key = client.turn_by_key(name("thread"), "cp-2").unwrap().unwrap();
    assert_eq!(by_key, second.turn);
    assert_eq!(client.turn_by_key(thread, "cp-2").unwrap(), Some(by_key));
    assert_eq!(client.turn_by_key(thread, "nope").unwrap(), None);
    let missing = client.turn_by_key(name("nobody"), "cp-1").unwrap_err();
    assert_eq!(code(&missing), Some(ErrorCode::NotFound));

    // A parent the context does not own, a parent that does not exist: typed errors, nothing
    // written.
    open(&client, "other");
    let foreign = append(&client, "other", text("x"));
    let not_owned = client
        .append_turn(
            thread,
            None,
            text("y").parent(Parent::Turn(foreign.turn.turn.turn_id)),
        )
        .unwrap_err();
    assert_eq!(
        code(&not_owned),
        Some(ErrorCode::InvalidArgument),
        "{not_owned}"
    );
    let nowhere = client
        .append_turn(thread, None, text("y").parent(Parent::Turn(1 << 40)))
        .unwrap_err();
    assert_eq!(code(&nowhere), Some(ErrorCode::NotFound), "{nowhere}");
    assert_eq!(
        client.head(thread).unwrap().head_turn_id,
        root.turn.turn.turn_id
    );
    // The head compare-and-set applies to appends with options too.
    let moved = client
        .append_turn(thread, Some(first.turn.turn.turn_id), text("z").key("cp-9"))
        .unwrap_err();
    assert_eq!(code(&moved), Some(ErrorCode::Conflict));
    assert_eq!(client.turn_by_key(thread, "cp-9").unwrap(), None);

    // A fork sees the keys it inherited; a key appended to it stays its own.
    let fork = client.fork(second.turn.turn.turn_id).unwrap().context_id;
    let inherited = client.turn_by_key(fork, "cp-1").unwrap().unwrap();
    assert_eq!(inherited.turn.turn_id, first.turn.turn.turn_id);
    let again = client
        .append_turn(fork, None, text("e").key("cp-1"))
        .unwrap();
    assert!(again.existing, "an inherited key is the fork's too");
    let own = client
        .append_turn(fork, None, text("e").key("fork-1"))
        .unwrap();
    assert!(!own.existing);
    assert_eq!(client.turn_by_key(thread, "fork-1").unwrap(), None);

    // Over-limit keys, labels and links: TOO_LARGE naming the limit.
    let long_key = client
        .append_turn(thread, None, text("k").key("k".repeat(65)))
        .unwrap_err();
    assert_eq!(code(&long_key), Some(ErrorCode::TooLarge), "{long_key}");
    let mut many_labels = text("l");
    for index in 0..17 {
        many_labels = many_labels.label(format!("k{index}"), "v");
    }
    let too_many = client.append_turn(thread, None, many_labels).unwrap_err();
    assert_eq!(code(&too_many), Some(ErrorCode::TooLarge), "{too_many}");
    assert!(too_many.to_string().contains("16"), "{too_many}");
    let mut many_links = text("m");
    for _ in 0..9 {
        many_links = many_links.link(first.turn.turn.turn_id);
    }
    let too_many = client.append_turn(thread, None, many_links).unwrap_err();
    assert_eq!(code(&too_many), Some(ErrorCode::TooLarge), "{too_many}");
    for missing in [1 << 40, 0] {
        let dangling = client
            .append_turn(thread, None, text("n").link(missing))
            .unwrap_err();
        assert_eq!(code(&dangling), Some(ErrorCode::NotFound), "{dangling}");
    }
    // A parent of turn 0 is refused before sending (the wire has no such parent).
    let zero = client
        .append_turn(thread, None, text("o").parent(Parent::Turn(0)))
        .unwrap_err();
    assert!(matches!(zero, ClientError::InvalidArgument(_)), "{zero}");
    assert_eq!(
        client.head(thread).unwrap().head_turn_id,
        root.turn.turn.turn_id
    );
}

#[test]
fn labels_links_and_summaries_read_back_everywhere() {
    let server = TestServer::start(None);
    let client = connect(&server);
    let thread = open(&client, "thread");
    let callee = open(&client, "callee");
    let called = append(&client, "callee", text("callee's first turn"));

    let asked = text("tool call")
        .type_tag(3)
        .codec(1)
        .key("step-1")
        // Out of order on purpose: the server stores them sorted.
        .label("step", "1")
        .label("run_id", "r1")
        .link(called.turn.turn.turn_id);
    let appended = append(&client, "thread", asked);
    let expected = labels(&[("run_id", "r1"), ("step", "1")]);
    assert_eq!(appended.turn.key.as_deref(), Some(&b"step-1"[..]));
    assert_eq!(appended.turn.labels, expected);
    assert_eq!(appended.turn.links, [called.turn.turn.turn_id]);
    assert!(!appended.turn.turn.summary());
    let summary = append(&client, "thread", text("summary").summary(true));
    assert!(summary.turn.turn.summary());
    assert_eq!(summary.turn.key, None);

    let id = appended.turn.turn.turn_id;
    let without_payload = |info: &TurnInfo| TurnInfo {
        turn: ctxstore_client::Turn {
            payload: None,
            ..info.turn.clone()
        },
        ..info.clone()
    };
    let read_back = [
        client.turn_by_key(thread, "step-1").unwrap().unwrap(),
        client.turn_info(id).unwrap(),
        client
            .read_page(thread, PageKind::Last, 2, true)
            .unwrap()
            .turns[0]
            .clone(),
        client
            .read_page(thread, PageKind::Range { from_depth: 0 }, 1, false)
            .unwrap()
            .turns[0]
            .clone(),
        client.turn_log_all(thread, &[], None, false).unwrap()[1].clone(),
        client
            .find_all_turns(&pairs(&[("run_id", "r1")]), None)
            .unwrap()[0]
            .clone(),
        client
            .replay_info(summary.turn.turn.turn_id, false)
            .unwrap()[0]
            .clone(),
    ];
    for info in &read_back {
        assert_eq!(without_payload(info), appended.turn, "{info:?}");
        assert_eq!(info.turn.context_id, thread);
        assert_eq!((info.turn.type_tag, info.turn.codec), (3, 1));
    }
    // Payloads, when asked for, are verified and there.
    assert_eq!(
        read_back[2].turn.payload.as_deref(),
        Some(&b"tool call"[..])
    );
    let page = client.read_page(thread, PageKind::Last, 2, false).unwrap();
    assert!(page.turns[1].turn.summary());
    assert_eq!(page.tip_depth, 1);
    // The callee's turn keeps no trace of the link (links point one way).
    assert!(
        client
            .turn_info(called.turn.turn.turn_id)
            .unwrap()
            .links
            .is_empty()
    );
    assert_ne!(callee, thread);
}

#[test]
fn turns_by_id_carry_their_extras_off_their_contexts_chain() {
    // Short pages: the look-ups of `turn_info` and `replay_info` take several.
    let server = TestServer::start_with(None, &["--read-turns-max", "4"]);
    let client = connect(&server);
    let thread = open(&client, "thread");
    let mut chain = Vec::new();
    for step in 0..10 {
        let turn = text(&format!("turn {step}"))
            .key(format!("k{step}"))
            .label("step", step.to_string());
        chain.push(append(&client, "thread", turn).turn);
    }
    // On the chain: one page per read_turns_max depths.
    let replayed = client.replay_info(chain[9].turn.turn_id, true).unwrap();
    assert_eq!(ids(&replayed), ids(&chain));
    for (read, appended) in replayed.iter().zip(&chain) {
        assert_eq!(read.labels, appended.labels);
        assert_eq!(read.key, appended.key);
        assert!(read.turn.payload.is_some());
    }
    // A new root moves the head off that chain: the extras come from the turn log.
    append(&client, "thread", text("elsewhere").parent(Parent::Root));
    for appended in &chain {
        let read = client.turn_info(appended.turn.turn_id).unwrap();
        assert_eq!(&read, appended);
    }
    let replayed = client.replay_info(chain[6].turn.turn_id, false).unwrap();
    assert_eq!(ids(&replayed), ids(&chain[..7]));
    assert_eq!(replayed[6].key.as_deref(), Some(&b"k6"[..]));
    // A fork's turn, whose ancestors the fork inherited from another context.
    let fork = client.fork(chain[4].turn.turn_id).unwrap().context_id;
    let forked = client
        .append_turn(fork, None, text("forked").label("step", "fork"))
        .unwrap();
    let replayed = client.replay_info(forked.turn.turn.turn_id, false).unwrap();
    assert_eq!(replayed.len(), 6);
    assert_eq!(ids(&replayed[..5]), ids(&chain[..5]));
    assert_eq!(replayed[5], forked.turn);
    assert_eq!(replayed[3].labels, labels(&[("step", "3")]));
    assert_eq!(
        client.turn_info(1 << 40).unwrap_err().code(),
        Some(ErrorCode::NotFound)
    );
    assert_ne!(thread, fork);
}

#[test]
fn the_turn_log_pages_newest_first_across_branches_with_label_filters() {
    let server = TestServer::start(None);
    let client = connect(&server);
    let thread = open(&client, "thread");
    // A trunk of 8, a branch of 5 from its third turn, a new root with 3: 16 turns; every
    // other one labelled even=yes, every turn with its run.
    let mut appended: Vec<TurnInfo> = Vec::new();
    let add = |turn: NewTurn, appended: &mut Vec<TurnInfo>| {
        let index = appended.len();
        let turn = turn
            .label("run_id", if index < 8 { "trunk" } else { "later" })
            .label("even", if index.is_multiple_of(2) { "yes" } else { "no" });
        appended.push(append(&client, "thread", turn).turn);
    };
    for step in 0..8 {
        add(text(&format!("trunk {step}")), &mut appended);
    }
    let fork_point = appended[2].turn.turn_id;
    add(
        text("branch 0").parent(Parent::Turn(fork_point)),
        &mut appended,
    );
    for step in 1..5 {
        add(text(&format!("branch {step}")), &mut appended);
    }
    add(text("root 0").parent(Parent::Root), &mut appended);
    for step in 1..3 {
        add(text(&format!("root {step}")), &mut appended);
    }
    let newest_first: Vec<u64> = ids(&appended).into_iter().rev().collect();

    // The documented cursor loop, 3 turns a page.
    let mut seen = Vec::new();
    let mut cursor: Option<LogCursor> = None;
    let mut pages = 0;
    loop {
        let page = client
            .turn_log(name("thread"), &[], cursor, 3, false)
            .unwrap();
        assert!(page.turns.len() <= 3);
        seen.extend(ids(&page.turns));
        pages += 1;
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, newest_first, "every branch, newest first, each once");
    assert!(pages >= 6);
    assert_eq!(
        client.turn_log_all(thread, &[], None, false).unwrap().len(),
        16
    );
    assert_eq!(
        ids(&client.turn_log_all(thread, &[], Some(5), false).unwrap()),
        newest_first[..5]
    );

    // Label filters hold on the server: one label, and a conjunction, paged 2 at a time.
    let even = client
        .turn_log_all(thread, &pairs(&[("even", "yes")]), None, true)
        .unwrap();
    let expected: Vec<u64> = appended
        .iter()
        .rev()
        .filter(|info| info.has_label("even", "yes"))
        .map(|info| info.turn.turn_id)
        .collect();
    assert_eq!(ids(&even), expected);
    assert!(even.iter().all(|info| info.turn.payload.is_some()));
    let both = pairs(&[("even", "yes"), ("run_id", "later")]);
    let mut filtered = Vec::new();
    let mut cursor = None;
    loop {
        let page = client.turn_log(thread, &both, cursor, 2, false).unwrap();
        filtered.extend(page.turns);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(filtered.len(), 4);
    assert!(
        filtered
            .iter()
            .all(|info| info.has_label("run_id", "later"))
    );
    assert!(
        client
            .turn_log_all(thread, &pairs(&[("even", "maybe")]), None, false)
            .unwrap()
            .is_empty()
    );

    // A fork lists its own turns, then the base chain it inherited (not the other branches).
    let fork = client.fork(appended[4].turn.turn_id).unwrap().context_id;
    let own = client.append_turn(fork, None, text("fork's own")).unwrap();
    let log = client.turn_log_all(fork, &[], None, false).unwrap();
    let mut expected = vec![own.turn.turn.turn_id];
    expected.extend(ids(&appended[..5]).into_iter().rev());
    assert_eq!(ids(&log), expected);
    // Limits: a page of 0 or over 1,000 turns is TOO_LARGE; an unknown context NOT_FOUND.
    for limit in [0, 1001] {
        let error = client
            .turn_log(thread, &[], None, limit, false)
            .unwrap_err();
        assert_eq!(code(&error), Some(ErrorCode::TooLarge), "{error}");
    }
    let error = client
        .turn_log(name("nobody"), &[], None, 3, false)
        .unwrap_err();
    assert_eq!(code(&error), Some(ErrorCode::NotFound));
}

#[test]
fn windows_start_at_the_latest_summary() {
    let server = TestServer::start_with(None, &["--read-turns-max", "4"]);
    let client = connect(&server);
    let thread = open(&client, "thread");
    assert!(client.window_all(thread, None, false).unwrap().is_empty());
    let mut chain = Vec::new();
    for step in 0..6 {
        chain.push(append(&client, "thread", text(&format!("turn {step}"))).turn);
    }
    // No summary: the whole chain, oldest first, across pages of 4.
    assert_eq!(
        ids(&client.window_all(thread, None, true).unwrap()),
        ids(&chain)
    );
    let page = client.window(thread, 4, false).unwrap();
    assert_eq!(ids(&page.turns), ids(&chain[2..]));
    assert_eq!(page.next_before, chain[2].turn.turn_id);

    // Two summaries: the window starts at the latest.
    chain.push(append(&client, "thread", text("summary 1").summary(true)).turn);
    chain.push(append(&client, "thread", text("turn 7")).turn);
    chain.push(append(&client, "thread", text("summary 2").summary(true)).turn);
    for step in 9..14 {
        chain.push(append(&client, "thread", text(&format!("turn {step}"))).turn);
    }
    let window = client.window_all(name("thread"), None, true).unwrap();
    assert_eq!(
        ids(&window),
        ids(&chain[8..]),
        "from summary 2, over two pages"
    );
    assert!(window[0].turn.summary());
    assert_eq!(window[0].turn.payload.as_deref(), Some(&b"summary 2"[..]));
    // The newest N of it.
    assert_eq!(
        ids(&client.window_all(thread, Some(3), false).unwrap()),
        ids(&chain[11..])
    );
    assert_eq!(
        ids(&client.window_all(thread, Some(5), false).unwrap()),
        ids(&chain[9..])
    );
    // A branch from before the summaries has none: its window is its whole chain.
    let branch = append(
        &client,
        "thread",
        text("branch").parent(Parent::Turn(chain[5].turn.turn_id)),
    );
    let window = client.window_all(thread, None, false).unwrap();
    let mut expected = ids(&chain[..6]);
    expected.push(branch.turn.turn.turn_id);
    assert_eq!(ids(&window), expected);
    // A summary as the newest turn: a window of one.
    let last = append(&client, "thread", text("summary 3").summary(true));
    assert_eq!(
        ids(&client.window_all(thread, None, false).unwrap()),
        [last.turn.turn.turn_id]
    );
}

#[test]
fn find_turns_by_label_across_contexts() {
    let server = TestServer::start(None);
    let client = connect(&server);
    let mut expected = Vec::new();
    for (index, context) in ["a", "b", "c"].into_iter().enumerate() {
        open(&client, context);
        for step in 0..3 {
            let turn = text(&format!("{context} {step}"))
                .label("run_id", "r7")
                .label("idx.kind", if step == 1 { "tool" } else { "message" })
                .label("step", step.to_string());
            expected.push(append(&client, context, turn).turn);
        }
        append(
            &client,
            context,
            text("another run").label("run_id", format!("r{index}")),
        );
    }
    expected.reverse();

    // Page by page, 4 at a time, newest first.
    let mut found = Vec::new();
    let mut before = 0;
    loop {
        let page = client.find_turns("run_id", "r7", before, 4).unwrap();
        assert!(page.turns.len() <= 4);
        found.extend(page.turns);
        if page.next_before == 0 {
            break;
        }
        before = page.next_before;
    }
    assert_eq!(found, expected);
    let contexts: BTreeSet<u64> = found.iter().map(|info| info.turn.context_id).collect();
    assert_eq!(contexts.len(), 3);
    // More labels: the indexed one is looked up, the others checked by the client.
    let tools = client
        .find_all_turns(&pairs(&[("step", "1"), ("run_id", "r7")]), None)
        .unwrap();
    assert_eq!(tools.len(), 3);
    assert!(tools.iter().all(|info| info.has_label("step", "1")));
    let tools_by_idx = client
        .find_all_turns(&pairs(&[("idx.kind", "tool")]), Some(2))
        .unwrap();
    assert_eq!(ids(&tools_by_idx), ids(&tools[..2]));
    assert!(
        client
            .find_all_turns(&pairs(&[("run_id", "none")]), None)
            .unwrap()
            .is_empty()
    );
    // A key that is not indexed: the server says which are.
    let error = client
        .find_all_turns(&pairs(&[("step", "1")]), None)
        .unwrap_err();
    assert_eq!(code(&error), Some(ErrorCode::InvalidArgument));
    assert!(error.to_string().contains("run_id"), "{error}");
    assert!(matches!(
        client.find_all_turns(&[], None),
        Err(ClientError::InvalidArgument(_))
    ));
}

#[test]
fn batch_appends_are_all_or_none() {
    let server = TestServer::start(None);
    let client = connect(&server);
    let thread = open(&client, "thread");
    let first = append(&client, "thread", text("user message").key("m-1"));

    // An agent step: tool call, tool result, message, in one request.
    let step = client
        .append_turns(
            name("thread"),
            Some(first.turn.turn.turn_id),
            vec![
                text("tool call").key("call-1").label("run_id", "r1"),
                text("tool result").label("run_id", "r1"),
                text("assistant message").key("m-2").summary(true),
            ],
        )
        .unwrap();
    assert_eq!(step.len(), 3);
    let depths: Vec<u32> = step.iter().map(|a| a.turn.turn.depth).collect();
    assert_eq!(depths, [1, 2, 3]);
    assert_eq!(step[0].turn.turn.parent_turn_id, first.turn.turn.turn_id);
    assert_eq!(step[1].turn.turn.parent_turn_id, step[0].turn.turn.turn_id);
    assert_eq!(step[2].turn.turn.parent_turn_id, step[1].turn.turn.turn_id);
    assert!(step[2].turn.turn.summary());
    assert_eq!(
        client.head(thread).unwrap().head_turn_id,
        step[2].turn.turn.turn_id
    );

    // A retried step: every keyed turn answered as it is, the unkeyed one written again.
    let retried = client
        .append_turns(
            thread,
            None,
            vec![
                text("tool call").key("call-1"),
                text("tool result, new"),
                text("assistant message").key("m-2"),
            ],
        )
        .unwrap();
    let existing: Vec<bool> = retried.iter().map(|a| a.existing).collect();
    assert_eq!(existing, [true, false, true]);
    assert_eq!(retried[0].turn, step[0].turn);
    assert_eq!(retried[2].turn, step[2].turn);

    // One bad turn (a link to nothing) and nothing of the batch is written.
    let before = client.turn_log_all(thread, &[], None, false).unwrap();
    let error = client
        .append_turns(
            thread,
            None,
            vec![
                text("ok").key("never-1"),
                text("ok too"),
                text("bad").link(1 << 40),
            ],
        )
        .unwrap_err();
    assert_eq!(code(&error), Some(ErrorCode::NotFound), "{error}");
    assert_eq!(
        client.turn_log_all(thread, &[], None, false).unwrap(),
        before
    );
    assert_eq!(client.turn_by_key(thread, "never-1").unwrap(), None);
    // A moved head: CONFLICT with the actual head, nothing written.
    let error = client
        .append_turns(thread, Some(first.turn.turn.turn_id), vec![text("late")])
        .unwrap_err();
    assert!(
        matches!(&error, ClientError::Server { code: ErrorCode::Conflict, detail, .. }
            if *detail == before[0].turn.turn_id),
        "{error}"
    );
    // Explicit parents inside a batch: two children of the first turn.
    let siblings = client
        .append_turns(
            thread,
            None,
            vec![
                text("left").parent(Parent::Turn(first.turn.turn.turn_id)),
                text("right").parent(Parent::Turn(first.turn.turn.turn_id)),
            ],
        )
        .unwrap();
    assert!(
        siblings
            .iter()
            .all(|a| a.turn.turn.parent_turn_id == first.turn.turn.turn_id)
    );
    // 64 turns is one batch; 65 or none is TOO_LARGE.
    let full: Vec<NewTurn> = (0..ctxstore_client::APPEND_BATCH_TURNS_MAX)
        .map(|index| text(&format!("bulk {index}")))
        .collect();
    assert_eq!(client.append_turns(thread, None, full).unwrap().len(), 64);
    for count in [0, 65] {
        let turns: Vec<NewTurn> = (0..count)
            .map(|index| text(&format!("over {index}")))
            .collect();
        let error = client.append_turns(thread, None, turns).unwrap_err();
        assert!(
            matches!(code(&error), Some(ErrorCode::TooLarge))
                || matches!(error, ClientError::InvalidArgument(_)),
            "{count}: {error}"
        );
    }
    // By hash: a payload already stored, nothing uploaded.
    let by_hash = client
        .append_turn(
            thread,
            None,
            NewTurn::by_hash(first.turn.turn.payload_hash).key("by-hash"),
        )
        .unwrap();
    assert!(by_hash.deduped);
    assert_eq!(by_hash.turn.turn.payload_hash, first.turn.turn.payload_hash);
}

/// A fake server of protocol version 1: answers HELLO and PING, counts every request after
/// HELLO.
fn version_1_server() -> (String, Arc<AtomicU64>) {
    let others = Arc::new(AtomicU64::new(0));
    let counted = others.clone();
    let (addr, _) = ScriptedServer::new(1).serve(move |request| {
        counted.fetch_add(1, Ordering::Relaxed);
        match request {
            Request::Admin(AdminRequest::Ping(admin::Ping { nonce })) => {
                Some(Response::Admin(AdminResponse::Pong(admin::Pong {
                    nonce: *nonce,
                })))
            }
            _ => None,
        }
    });
    (addr, others)
}

#[test]
fn a_version_1_server_gets_no_turn_requests() {
    let (addr, others) = version_1_server();
    let client =
        Client::connect(ClientConfig::new(addr).with_request_timeout(Some(Duration::from_secs(5))))
            .unwrap();
    assert_eq!(client.protocol_version(), 1);
    let refusals = [
        client
            .append_turn(7, None, text("x"))
            .map(drop)
            .unwrap_err(),
        client
            .append_turns(7, None, vec![text("x"), text("y")])
            .map(drop)
            .unwrap_err(),
        client.turn_by_key(7, "k").map(drop).unwrap_err(),
        client.turn_info(7).map(drop).unwrap_err(),
        client.replay_info(7, false).map(drop).unwrap_err(),
        client
            .turn_log(7, &[], None, 10, false)
            .map(drop)
            .unwrap_err(),
        client
            .turn_log_all(7, &[], None, false)
            .map(drop)
            .unwrap_err(),
        client
            .read_page(7, PageKind::Last, 10, false)
            .map(drop)
            .unwrap_err(),
        client.window(7, 10, false).map(drop).unwrap_err(),
        client.window_all(7, None, false).map(drop).unwrap_err(),
        client
            .find_turns("run_id", "r", 0, 10)
            .map(drop)
            .unwrap_err(),
        client
            .find_all_turns(&pairs(&[("run_id", "r")]), None)
            .map(drop)
            .unwrap_err(),
    ];
    for error in &refusals {
        common::assert_refused_for_version_1(error);
    }
    // Nothing reached the server: the ping after them is the first request it counted (it
    // answers in order, so every earlier frame was read before the pong).
    client.ping(1).unwrap();
    assert_eq!(others.load(Ordering::Relaxed), 1);
}
