//! `ctxstore tree CTX` (issue 37) against a real `ctxstore-server`: a context with a branch
//! (a time travel with `--parent`) and a fork drawn as text and as JSON (every turn once,
//! edges between shown turns, the fork's head among the heads), `--depth` and `--since`
//! cutting it, and bad input refused with the README's exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use serde_json::Value;

mod common;

use common::{Cli, run_at};
use ctxstore_testsupport::TestServer;

fn id(value: &Value, name: &str) -> u64 {
    value[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in {value}"))
}

fn shown(tree: &Value) -> BTreeSet<u64> {
    tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| id(node, "turn_id"))
        .collect()
}

#[test]
fn a_branch_and_a_fork_drawn_as_text_and_json() {
    let server = TestServer::start(None);
    server.one(&["ctx", "create", "--name", "t"], b"");
    let first = id(&server.one(&["append", "@t"], b"hello"), "turn_id");
    let second = id(&server.one(&["append", "@t"], b"first answer"), "turn_id");
    let third = id(&server.one(&["append", "@t"], b"follow-up"), "turn_id");
    // A time travel: a sibling of `second`.
    let retry = id(
        &server.one(
            &["append", "@t", "--parent", &first.to_string()],
            b"second answer",
        ),
        "turn_id",
    );
    let fork = server.one(&["ctx", "fork", &second.to_string()], b"");
    let fork_id = id(&fork, "context_id");

    let tree = server.one(&["tree", "@t"], b"");
    assert_eq!(shown(&tree), BTreeSet::from([first, second, third, retry]));
    assert_eq!(id(&tree, "turns_total"), 4);
    let edges: BTreeSet<(u64, u64)> = tree["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|edge| (id(edge, "parent_turn_id"), id(edge, "turn_id")))
        .collect();
    assert_eq!(
        edges,
        BTreeSet::from([(first, second), (second, third), (first, retry)])
    );
    let heads: BTreeSet<u64> = tree["heads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|head| id(head, "context_id"))
        .collect();
    assert!(heads.contains(&fork_id), "the fork's head: {tree}");
    let previews: Vec<&str> = tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|node| node["preview"].as_str())
        .collect();
    assert!(
        previews
            .iter()
            .any(|preview| preview.contains("second answer"))
    );

    // The text form names every turn and its preview.
    let output = run_at(&server.addr, &["tree", "@t"], b"");
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    for turn in [first, second, third, retry] {
        assert!(text.contains(&turn.to_string()), "{turn} in:\n{text}");
    }
    assert!(text.contains("follow-up"), "{text}");

    // --depth 2: the first two levels; --since: one turn's subtree.
    let shallow = server.one(&["tree", "@t", "--depth", "2"], b"");
    assert_eq!(shown(&shallow), BTreeSet::from([first, second, retry]));
    let subtree = server.one(&["tree", "@t", "--since", &second.to_string()], b"");
    assert_eq!(shown(&subtree), BTreeSet::from([second, third]));
}

#[test]
fn bad_input_is_refused() {
    let server = TestServer::start(None);
    // An unknown context: NOT_FOUND's exit code; --depth 0: a usage error.
    let missing = server.fails(&["tree", "@nobody"], b"", 3);
    assert_eq!(missing["code"], "NOT_FOUND");
    server.fails(&["tree", "@nobody", "--depth", "0"], b"", 2);
}
