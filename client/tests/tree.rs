//! `ctxstore_client::tree` (issue 37, `ctxstore tree CTX`) against a real `ctxstore-server`:
//! the drawing of a context with branches, a time travel, a summary, a redaction, links, a
//! hostile payload and a payload too large to preview, with every other context's head that
//! points into it; `--depth` and `--since`; the JSON form; and a 100,000-turn context drawn
//! by reading only the shown turns' payloads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use ctxstore_client::tree::{self, TreeOptions};
use ctxstore_client::{Client, ClientConfig, ContextRef, NewContext, NewTurn, Parent};

use ctxstore_testsupport::TestServer;

async fn connect(server: &TestServer) -> Client {
    Client::connect(ClientConfig::new(server.addr.clone()))
        .await
        .unwrap()
}

async fn append(client: &Client, context: &str, turn: NewTurn) -> u64 {
    client
        .append_turn(ContextRef::Name(context.into()), None, turn)
        .await
        .unwrap()
        .turn
        .turn
        .turn_id
}

fn json(text: &str) -> NewTurn {
    NewTurn::bytes(Bytes::copy_from_slice(text.as_bytes())).codec(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_with_branches_heads_and_every_kind_of_payload() {
    let server = TestServer::start(None);
    let client = connect(&server).await;
    let agent = client
        .open_context(NewContext::new().name("agent"))
        .await
        .unwrap()
        .context
        .context_id;
    let system = append(
        &client,
        "agent",
        json("{\n  \"role\": \"system\",\n  \"content\": \"be terse\"\n}")
            .key("s")
            .label("run_id", "r1"),
    )
    .await;
    let hello = append(
        &client,
        "agent",
        NewTurn::bytes(Bytes::from_static(b"hello\nworld")).codec(5),
    )
    .await;
    let binary = append(
        &client,
        "agent",
        NewTurn::bytes(Bytes::from_static(b"\x00\x01\x02\xff")),
    )
    .await;
    // Time travel: a second branch after the system turn; the head moves to it.
    let retry = append(
        &client,
        "agent",
        json("{\"summary\":\"the user said hello\"}")
            .parent(Parent::Turn(system))
            .summary(true)
            .link(hello),
    )
    .await;
    let hostile = append(
        &client,
        "agent",
        NewTurn::bytes(Bytes::from_static(b"\x1b]0;owned\x07\x1b[31mred\x1b[0m")).codec(5),
    )
    .await;
    let large = format!("{{\"blob\":\"{}\"}}", "x".repeat(100 * 1024));
    let large = append(&client, "agent", json(&large)).await;
    let secret = append(&client, "agent", json("{\"secret\":1}")).await;
    client.redact_turn(secret).await.unwrap();
    // Another context's head on the first branch: marked; a fork that moved on: not.
    let fork = client.fork(hello).await.unwrap().context_id;
    let moved = client.fork(binary).await.unwrap().context_id;
    client
        .append_turn(moved, None, json("{\"elsewhere\":true}"))
        .await
        .unwrap();

    let drawn = tree::fetch(&client, ContextRef::Id(agent), &TreeOptions::default())
        .await
        .unwrap();
    let expected = format!(
        "context {agent} @agent · head {secret} · 7 turns\n\
         ● {system}  key=s  run_id=r1  {{ \"role\": \"system\", \"content\": \"be terse\" }}\n\
         ├─ ● {hello}  ◀ head of {fork}  hello world\n\
         │  ● {binary}  binary raw, 4 B\n\
         └─ ● {retry}  → {hello}  [summary]  {{\"summary\":\"the user said hello\"}}\n\
         \x20  ● {hostile}  \\u{{1b}}]0;owned\\u{{7}}\\u{{1b}}[31mred\\u{{1b}}[0m\n\
         \x20  ● {large}  json, 100.0 KiB (not previewed)\n\
         \x20  ● {secret}  [redacted]  ◀ head  (redacted)\n"
    );
    assert_eq!(drawn.render_text(), expected);
    // Each distinct small payload once; the large one and the redacted one never.
    assert_eq!(drawn.cost.payloads_read, 5);
    assert_eq!(drawn.cost.log_pages, 1);
    let heads: Vec<u64> = drawn.heads.iter().map(|head| head.context_id).collect();
    assert_eq!(heads, vec![agent, fork]);

    // JSON: nodes with turn_id and parent_turn_id, edges, heads.
    let value = drawn.to_json();
    let nodes = value["nodes"].as_array().unwrap();
    let pairs: Vec<(u64, u64)> = nodes
        .iter()
        .map(|node| {
            (
                node["turn_id"].as_u64().unwrap(),
                node["parent_turn_id"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        vec![
            (system, 0),
            (hello, system),
            (binary, hello),
            (retry, system),
            (hostile, retry),
            (large, hostile),
            (secret, large)
        ]
    );
    assert_eq!(value["edges"].as_array().unwrap().len(), 6);
    assert_eq!(value["edges"][0]["parent_turn_id"], system);
    assert_eq!(value["heads"][1]["context_id"], fork);
    assert_eq!(value["heads"][1]["head_turn_id"], hello);
    assert_eq!(nodes[0]["key"], "s");
    assert_eq!(nodes[0]["labels"]["run_id"], "r1");
    assert_eq!(nodes[0]["payload_kind"], "json");
    assert_eq!(nodes[2]["payload_kind"], "binary");
    assert_eq!(nodes[3]["summary"], true);
    assert_eq!(nodes[3]["links"][0], hello);
    assert_eq!(nodes[6]["redacted"], true);
    assert_eq!(value["turns_total"], 7);

    // --since: one branch; --depth: the top levels, with what they hide counted.
    let since = TreeOptions {
        since: Some(retry),
        ..TreeOptions::default()
    };
    let drawn = tree::fetch(&client, ContextRef::Id(agent), &since)
        .await
        .unwrap();
    let shown: Vec<u64> = drawn.nodes.iter().map(|n| n.info.turn.turn_id).collect();
    assert_eq!(shown, vec![retry, hostile, large, secret]);
    let depth = TreeOptions {
        depth_max: Some(2),
        ..TreeOptions::default()
    };
    let drawn = tree::fetch(&client, ContextRef::Id(agent), &depth)
        .await
        .unwrap();
    let text = drawn.render_text();
    assert!(text.starts_with(&format!(
        "context {agent} @agent · head {secret} · 7 turns (3 shown)\n"
    )));
    assert!(text.contains(&format!(
        "● {hello}  ◀ head of {fork}  hello world  (+1 below)"
    )));
    assert!(text.contains("(+3 below)"), "{text}");
    assert_eq!(drawn.cost.payloads_read, 3);

    // A patch shows its overlay and the patched payload.
    let patched = client.patch_turn(hello, &b"hello again"[..]).await.unwrap();
    let drawn = tree::fetch(&client, ContextRef::Id(agent), &TreeOptions::default())
        .await
        .unwrap();
    let text = drawn.render_text();
    let line = format!(
        "├─ ● {hello}  [patched @{}]  ◀ head of {fork}  hello again\n",
        patched.overlay_seq
    );
    assert!(text.contains(&line), "{text}");

    // A turn that is not in the tree, and a context that does not exist.
    let elsewhere = TreeOptions {
        since: Some(999_999),
        ..TreeOptions::default()
    };
    let error = tree::fetch(&client, ContextRef::Id(agent), &elsewhere)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("not in the tree"), "{error}");
    let error = tree::fetch(&client, ContextRef::Id(4242), &TreeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some(ctxstore_client::ErrorCode::NotFound));
}

/// The blocking client's shell draws what the async call draws.
#[test]
fn the_blocking_client_draws_the_same_tree() {
    let server = TestServer::start(None);
    let client =
        ctxstore_client::blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let context = client.create_context().unwrap().context_id;
    let first = client
        .append(context, None, 1, 1, Bytes::from_static(b"{\"a\":1}"))
        .unwrap()
        .turn
        .turn_id;
    let second = client
        .append(context, None, 1, 5, Bytes::from_static(b"two"))
        .unwrap()
        .turn
        .turn_id;
    let drawn = client
        .tree(ContextRef::Id(context), &TreeOptions::default())
        .unwrap();
    assert_eq!(
        drawn.render_text(),
        format!(
            "context {context} · head {second} · 2 turns\n● {first}  {{\"a\":1}}\n● {second}  ◀ head  two\n"
        )
    );
}

/// 100,000 turns (a chain with a branch every 10,000): the whole turn log is read without
/// payloads, and only the shown turns' payloads are read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_turns_read_only_what_is_shown() {
    const TURNS: u64 = 100_000;
    const BATCH: u64 = 64;
    let server = TestServer::start(None);
    let client = connect(&server).await;
    let context = client.create_context().await.unwrap().context_id;
    let mut first = 0;
    let mut step = 0u64;
    while step < TURNS {
        let count = BATCH.min(TURNS - step);
        let batch: Vec<NewTurn> = (step..step + count)
            .map(|index| {
                let turn = json(&format!("{{\"step\":{index}}}"));
                // A branch off the first turn every 10,000 turns.
                if index % 10_000 == 0 && index > 0 {
                    turn.parent(Parent::Turn(first))
                } else {
                    turn
                }
            })
            .collect();
        let appended = client.append_turns(context, None, batch).await.unwrap();
        if step == 0 {
            first = appended[0].turn.turn.turn_id;
        }
        step += count;
    }
    let options = TreeOptions {
        depth_max: Some(3),
        ..TreeOptions::default()
    };
    let drawn = tree::fetch(&client, ContextRef::Id(context), &options)
        .await
        .unwrap();
    assert_eq!(drawn.turns_total, TURNS as usize);
    assert_eq!(drawn.cost.log_pages, 100);
    // The root, its 10 children (the chain's next turn and 9 branches), and the turn after
    // each of those.
    assert_eq!(drawn.nodes.len(), 1 + 10 + 10);
    assert_eq!(drawn.cost.payloads_read, drawn.nodes.len());
    let hidden: usize = drawn.nodes.iter().map(|node| node.hidden_below).sum();
    assert_eq!(hidden + drawn.nodes.len(), TURNS as usize);
    let text = drawn.render_text();
    assert_eq!(text.lines().count(), 1 + drawn.nodes.len());
    assert!(text.contains("{\"step\":0}"), "{text}");

    // The whole tree drawn without previews of anything over 0 bytes: every line is there,
    // the chain does not drift right.
    let no_previews = TreeOptions {
        preview_fetch_bytes_max: 0,
        ..TreeOptions::default()
    };
    let drawn = tree::fetch(&client, ContextRef::Id(context), &no_previews)
        .await
        .unwrap();
    assert_eq!(drawn.cost.payloads_read, 0);
    let text = drawn.render_text();
    assert_eq!(text.lines().count(), 1 + TURNS as usize);
    let widest = text.lines().map(|line| line.chars().count()).max().unwrap();
    assert!(widest < 80, "a line of {widest} characters");
}
