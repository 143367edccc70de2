//! Protocol version 6's vector search (decision 0033) end to end: an index created, listed and
//! dropped; entries put with their vectors through the Rust client (blocking twin), searched
//! with a JSON filter (LangGraph's operators) and answered exactly k; every refusal typed,
//! with nothing written and the connection open: an unknown metric, a NaN or an infinity, a
//! dimension the index has not, a filter the server cannot evaluate, k out of range; the
//! indexes and vectors kept across a restart; a version-5 connection finds the messages
//! unknown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use bytes::Bytes;
use common::*;
use ctxstore_client::{ClientError, ContextRef as ClientRef, Metric, VectorEntry, VectorQuery};
use ctxstore_protocol::{ContextRef, ErrorCode, Request, Response, vectors};

fn entry(key: &str, value: &str, vectors: Vec<Vec<f32>>) -> VectorEntry {
    VectorEntry {
        key: Bytes::copy_from_slice(key.as_bytes()),
        value: Bytes::copy_from_slice(value.as_bytes()),
        vectors,
    }
}

fn keys(hits: &ctxstore_client::VectorHits) -> Vec<String> {
    hits.hits
        .iter()
        .map(|hit| String::from_utf8(hit.key.to_vec()).unwrap())
        .collect()
}

fn server_code(error: &ClientError) -> Option<ErrorCode> {
    match error {
        ClientError::Server { code, .. } => Some(*code),
        _ => None,
    }
}

#[test]
fn entries_are_found_by_meaning_exactly_k_through_a_filter_and_kept_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn_binary(dir.path(), &[]);
    let client = blocking_client(&server);
    let created = client
        .vector_index_create("notes", 2, Metric::Cosine, 0)
        .unwrap();
    assert_eq!(
        (created.index_id, created.ef_search, created.vectors),
        (1, 128, 0)
    );
    let context = client.create_context().unwrap().context_id;
    let context = ClientRef::Id(context);
    // 100 items around the unit circle; a colour on every tenth.
    let mut entries = Vec::new();
    for i in 0..100 {
        let angle = i as f32 * std::f32::consts::TAU / 100.0;
        let colour = if i % 10 == 3 { "red" } else { "blue" };
        let value = format!("{{\"colour\":\"{colour}\",\"n\":{i}}}");
        entries.push(entry(
            &format!("i/{i:03}"),
            &value,
            vec![vec![angle.cos(), angle.sin()]],
        ));
    }
    client
        .kv_put_vectors(context.clone(), "notes", 2, entries, false, None)
        .unwrap();
    assert_eq!(client.vector_indexes().unwrap()[0].vectors, 100);
    // Nearest to a hair above angle 0: items 0, 1, 99, 2, 98 … (a query at angle 0 exactly
    // would tie items 1 and 99 up to f32 rounding).
    let hits = client
        .vector_search(
            context.clone(),
            VectorQuery::new("notes", vec![1.0, 0.01], 3),
        )
        .unwrap();
    assert_eq!(keys(&hits), ["i/000", "i/001", "i/099"]);
    assert_eq!(hits.method, vectors::vector_search_method::EXACT);
    assert_eq!(hits.candidates, 100);
    assert!((hits.hits[0].score - 1.0).abs() < 1e-3, "{hits:?}");
    // A filter passing one in ten still answers exactly k, nearest first.
    let mut query = VectorQuery::new("notes", vec![1.0, 0.01], 5);
    query.filter = Bytes::from_static(br#"{"colour": "red", "n": {"$lt": 90}}"#);
    let hits = client
        .vector_search(context.clone(), query.clone())
        .unwrap();
    assert_eq!(keys(&hits), ["i/003", "i/013", "i/083", "i/023", "i/073"]);
    query.offset = 8;
    let hits = client.vector_search(context.clone(), query).unwrap();
    assert_eq!(keys(&hits), ["i/053"], "fewer than k pass: all of them");

    // Refusals: typed, the connection open, nothing written.
    let refused = |result: Result<(), ClientError>, code: ErrorCode, says: &str| {
        let error = result.unwrap_err();
        assert_eq!(server_code(&error), Some(code), "{error}");
        assert!(
            error.to_string().contains(says),
            "{error} should say {says}"
        );
    };
    let wrong_dims = vec![entry("i/x", "{}", vec![vec![1.0, 0.0, 0.0]])];
    refused(
        client.kv_put_vectors(context.clone(), "notes", 3, wrong_dims, false, None),
        ErrorCode::InvalidArgument,
        "3 dimensions",
    );
    refused(
        client
            .vector_index_create("notes", 3, Metric::Cosine, 0)
            .map(drop),
        ErrorCode::InvalidArgument,
        "2 dimensions",
    );
    let mut bad = VectorQuery::new("notes", vec![1.0, 0.0], 5);
    bad.filter = Bytes::from_static(br#"{"colour": {"$regex": "r.d"}}"#);
    refused(
        client.vector_search(context.clone(), bad).map(drop),
        ErrorCode::InvalidArgument,
        "$regex",
    );
    let absent = VectorQuery::new("absent", vec![1.0, 0.0], 5);
    refused(
        client.vector_search(context.clone(), absent).map(drop),
        ErrorCode::NotFound,
        "\"absent\"",
    );
    let too_many = VectorQuery::new("notes", vec![1.0, 0.0], 1001);
    refused(
        client.vector_search(context.clone(), too_many).map(drop),
        ErrorCode::TooLarge,
        "k + offset",
    );
    assert!(
        client
            .kv_get(context.clone(), Bytes::from_static(b"i/x"))
            .unwrap()
            .is_none()
    );
    drop(client);
    drop(server);

    // Restarted: the index, its count and the answers, from the log.
    let server = spawn_binary(dir.path(), &[]);
    let client = blocking_client(&server);
    assert_eq!(client.vector_indexes().unwrap()[0].vectors, 100);
    let hits = client
        .vector_search(
            context.clone(),
            VectorQuery::new("notes", vec![0.0, 1.0], 1),
        )
        .unwrap();
    assert_eq!(keys(&hits), ["i/025"]);
    let dropped = client.vector_index_drop("notes").unwrap();
    assert_eq!(dropped.vectors, 100);
    let error = client.vector_index_drop("notes").unwrap_err();
    assert_eq!(server_code(&error), Some(ErrorCode::NotFound), "{error}");
}

/// What the Rust client refuses before sending, sent raw: the server refuses it too, typed,
/// and keeps the connection.
#[test]
fn the_server_refuses_what_it_cannot_store_or_evaluate() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(config(dir.path()));
    let mut raw = Raw::connect(server.local_addr());
    raw.hello(b"");
    let create = |metric: u8, dims: u16| {
        Request::from(vectors::VectorIndexCreate {
            name: "m".into(),
            dims,
            metric,
            ef_search: 0,
        })
    };
    let code = |response: &Response| error_code(response);
    assert_eq!(
        code(&raw.call(1, &create(7, 3))),
        Some(ErrorCode::InvalidArgument)
    );
    assert_eq!(
        code(&raw.call(2, &create(1, 0))),
        Some(ErrorCode::InvalidArgument)
    );
    assert_eq!(
        code(&raw.call(3, &create(1, 5000))),
        Some(ErrorCode::InvalidArgument)
    );
    assert_eq!(code(&raw.call(4, &create(2, 3))), None);
    let opened = raw.call(
        5,
        &Request::from(ctxstore_protocol::contexts::CtxOpen {
            base_turn_id: 0,
            get_or_create: true,
            clone_from: None,
            name: Some("mem".into()),
            tags: vec![],
        }),
    );
    assert_eq!(code(&opened), None, "{opened:?}");
    let put = |component: f32| {
        Request::from(vectors::KvPutVectors {
            context: ContextRef::Name("mem".into()),
            put_flags: 0,
            ttl_ms: 0,
            index: "m".into(),
            dims: 3,
            entries: vec![vectors::VectorEntryWire {
                key: Bytes::from_static(b"k"),
                value: Bytes::from_static(b"v"),
                vectors: vec![vec![1.0, component, 0.0]],
            }],
        })
    };
    for (req_id, bad) in [(6, f32::NAN), (7, f32::INFINITY), (8, f32::NEG_INFINITY)] {
        let refused = raw.call(req_id, &put(bad));
        assert_eq!(
            code(&refused),
            Some(ErrorCode::InvalidArgument),
            "{refused:?}"
        );
    }
    let search = |vector: Vec<f32>, k: u16, filter: &'static [u8]| {
        Request::from(vectors::VectorSearch {
            context: ContextRef::Name("mem".into()),
            index: "m".into(),
            vector,
            k,
            offset: 0,
            search_flags: 0,
            ef_search: 0,
            prefix: Bytes::new(),
            filter: Bytes::from_static(filter),
        })
    };
    let nothing = raw.call(9, &search(vec![1.0, 0.0, 0.0], 5, b""));
    assert!(
        format!("{nothing:?}").contains("hits: []"),
        "nothing written: {nothing:?}"
    );
    for (req_id, request, expected) in [
        (
            10,
            search(vec![f32::NAN, 0.0, 0.0], 5, b""),
            ErrorCode::InvalidArgument,
        ),
        (
            11,
            search(vec![1.0, 0.0], 5, b""),
            ErrorCode::InvalidArgument,
        ),
        (
            12,
            search(vec![1.0, 0.0, 0.0], 0, b""),
            ErrorCode::InvalidArgument,
        ),
        (
            13,
            search(vec![1.0, 0.0, 0.0], 5, b"[1]"),
            ErrorCode::InvalidArgument,
        ),
        (
            14,
            search(vec![1.0, 0.0, 0.0], 5, b"{\"a\":"),
            ErrorCode::InvalidArgument,
        ),
        (
            15,
            search(vec![1.0, 0.0, 0.0], 2000, b""),
            ErrorCode::TooLarge,
        ),
    ] {
        let refused = raw.call(req_id, &request);
        assert_eq!(code(&refused), Some(expected), "{req_id}: {refused:?}");
    }
    let filter = vec![b' '; 70_000];
    let mut large = search(vec![1.0, 0.0, 0.0], 5, b"");
    if let Request::Vectors(ctxstore_protocol::VectorsRequest::VectorSearch(search)) = &mut large {
        search.filter = Bytes::from(filter);
    }
    assert_eq!(code(&raw.call(16, &large)), Some(ErrorCode::TooLarge));
    // Still open, and the good put lands.
    assert_eq!(code(&raw.call(17, &put(0.5))), None);
    let found = raw.call(18, &search(vec![1.0, 0.0, 0.0], 5, b""));
    assert!(format!("{found:?}").contains("candidates: 1"), "{found:?}");

    // A connection of version 5 does not know the messages.
    let mut old = Raw::connect(server.local_addr());
    old.hello_versions(b"", 1, 5);
    let unknown = old.call(1, &create(1, 3));
    assert_eq!(
        code(&unknown),
        Some(ErrorCode::UnknownMessage),
        "{unknown:?}"
    );
    drop(server);
}

/// Protocol version 7: turns appended with their vectors (APPEND_TURNS_VECTORS) and found by
/// meaning (VECTOR_SEARCH_TURNS) among one context's chain, the contexts under a name prefix
/// or with a tag, by label and type; refusals typed with nothing written; the same answers
/// after a restart; a version-6 connection finds the messages unknown.
#[test]
fn turns_are_found_by_meaning_across_contexts_and_kept_across_a_restart() {
    use ctxstore_client::{NewContext, NewTurn, TurnVectorQuery};
    let dir = tempfile::tempdir().unwrap();
    let server = spawn_binary(dir.path(), &[]);
    let client = blocking_client(&server);
    client
        .vector_index_create("recall", 2, Metric::Cosine, 0)
        .unwrap();
    let open = |name: &str, user: &str| {
        let new = NewContext::new().name(name).tag("user", user);
        client.open_context(new).unwrap().context.context_id
    };
    let (a, b, c) = (open("u42/a", "42"), open("u42/b", "42"), open("u7/c", "7"));
    // Ten turns per context around the unit circle, each context a third of a turn on;
    // roles alternate, and so do the types.
    let mut ids = std::collections::HashMap::new();
    for (offset, context) in [(0.0f32, a), (0.33, b), (0.66, c)] {
        let turns = (0..10)
            .map(|i| {
                let angle = (offset + i as f32 * 0.01) * std::f32::consts::TAU;
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                let turn = NewTurn::bytes(format!("{context}/{i}"))
                    .type_tag(1 + i % 2)
                    .label("role", role);
                (turn, vec![vec![angle.cos(), angle.sin()]])
            })
            .collect();
        let appended = client
            .append_turns_vectors(ClientRef::Id(context), None, "recall", 2, turns)
            .unwrap();
        for (i, turn) in appended.iter().enumerate() {
            ids.insert(turn.turn.turn.turn_id, (context, i));
        }
    }
    assert_eq!(client.vector_indexes().unwrap()[0].vectors, 30);
    let found = |query: TurnVectorQuery| -> Vec<(u64, usize)> {
        let hits = client.vector_search_turns(query).unwrap();
        hits.hits.iter().map(|hit| ids[&hit.turn.turn_id]).collect()
    };
    let near_a = vec![1.0, 0.001];
    // Every context: A's turns are nearest.
    let everything = found(TurnVectorQuery::new("recall", near_a.clone(), 3));
    assert_eq!(everything, [(a, 0), (a, 1), (a, 2)]);
    // Only B's chain, then the u42 contexts without their first, then user 7's tag.
    let mut only_b = TurnVectorQuery::new("recall", near_a.clone(), 2);
    only_b.context = Some(ClientRef::Id(b));
    assert_eq!(found(only_b), [(b, 0), (b, 1)]);
    let mut by_prefix = TurnVectorQuery::new("recall", near_a.clone(), 12);
    by_prefix.name_prefix = "u42/".into();
    assert_eq!(found(by_prefix).len(), 12);
    let mut by_tag = TurnVectorQuery::new("recall", near_a.clone(), 20);
    by_tag.tags = vec![("user".into(), "7".into())];
    let sevens = found(by_tag);
    assert_eq!(sevens.len(), 10, "exactly the ten that pass");
    assert!(sevens.iter().all(|(context, _)| *context == c));
    // Labels and the type: exactly k of those that pass, with an offset.
    let mut assistants = TurnVectorQuery::new("recall", near_a.clone(), 3);
    assistants.labels = vec![("role".into(), "assistant".into())];
    assistants.offset = 1;
    assert_eq!(found(assistants), [(a, 3), (a, 5), (a, 7)]);
    let mut typed = TurnVectorQuery::new("recall", near_a.clone(), 30);
    typed.type_tag = Some(1);
    assert_eq!(found(typed).len(), 15);

    // Refused, typed, nothing written.
    let refused = |error: ClientError, code: ErrorCode, says: &str| {
        assert_eq!(server_code(&error), Some(code), "{error}");
        assert!(
            error.to_string().contains(says),
            "{error} should say {says}"
        );
    };
    let wrong = vec![(NewTurn::bytes("x"), vec![vec![1.0, 0.0, 0.0]])];
    refused(
        client
            .append_turns_vectors(ClientRef::Id(a), None, "recall", 3, wrong)
            .unwrap_err(),
        ErrorCode::InvalidArgument,
        "3 dimensions",
    );
    let crowded = vec![(NewTurn::bytes("x"), vec![vec![1.0, 0.0]; 17])];
    refused(
        client
            .append_turns_vectors(ClientRef::Id(a), None, "recall", 2, crowded)
            .unwrap_err(),
        ErrorCode::TooLarge,
        "vectors per turn",
    );
    let absent = vec![(NewTurn::bytes("x"), vec![vec![1.0, 0.0]])];
    refused(
        client
            .append_turns_vectors(ClientRef::Id(a), None, "absent", 2, absent)
            .unwrap_err(),
        ErrorCode::NotFound,
        "absent",
    );
    let bare = vec![(NewTurn::bytes("x"), vec![])];
    refused(
        client
            .append_turns_vectors(ClientRef::Id(a), None, "absent", 2, bare)
            .unwrap_err(),
        ErrorCode::NotFound,
        "absent",
    );
    assert_eq!(client.vector_indexes().unwrap()[0].vectors, 30);
    let head_a = client.head(ClientRef::Id(a)).unwrap();
    assert_eq!(ids[&head_a.head_turn_id], (a, 9), "nothing was appended");
    drop(client);
    drop(server);

    // Restarted: the same answers, from the log.
    let server = spawn_binary(dir.path(), &[]);
    let client = blocking_client(&server);
    assert_eq!(client.vector_indexes().unwrap()[0].vectors, 30);
    let hits = client
        .vector_search_turns(TurnVectorQuery::new("recall", near_a, 3))
        .unwrap();
    let again: Vec<_> = hits.hits.iter().map(|hit| ids[&hit.turn.turn_id]).collect();
    assert_eq!(again, everything);
    assert!(hits.exact);

    // A connection of version 6 does not know the messages.
    let mut old = Raw::connect(server.addr.parse().unwrap());
    old.hello_versions(b"", 1, 6);
    let search = Request::from(vectors::VectorSearchTurns {
        index: "recall".into(),
        vector: vec![1.0, 0.0],
        k: 1,
        offset: 0,
        search_flags: 0,
        ef_search: 0,
        context: ContextRef::Id(0),
        name_prefix: String::new(),
        tags: vec![],
        labels: vec![],
        type_tag: 0,
    });
    let unknown = old.call(1, &search);
    assert_eq!(
        error_code(&unknown),
        Some(ErrorCode::UnknownMessage),
        "{unknown:?}"
    );
}

/// One scrape of `/metrics` at `addr`: each sample's value by its series (name and labels);
/// `None` while the endpoint is not up.
fn scrape(addr: &str) -> Option<std::collections::HashMap<String, f64>> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (_, body) = response.split_once("\r\n\r\n")?;
    Some(
        body.lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                Some((series.to_string(), value.parse().ok()?))
            })
            .collect(),
    )
}

/// `/metrics` sums the graphs of every index: their vectors once the writer applied them, no
/// pending, memory, no rebuild; a dropped index leaves none.
#[test]
fn the_graphs_figures_are_on_the_metrics_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = format!("127.0.0.1:{}", ctxstore_testsupport::fixed_port());
    let server = spawn_binary(dir.path(), &["--metrics-listen", &metrics]);
    let client = blocking_client(&server);
    client
        .vector_index_create("notes", 2, Metric::Cosine, 0)
        .unwrap();
    let context = ClientRef::Id(client.create_context().unwrap().context_id);
    let entries = (0..50)
        .map(|i| {
            let angle = i as f32 * 0.1;
            entry(
                &format!("i/{i}"),
                "{}",
                vec![vec![angle.cos(), angle.sin()]],
            )
        })
        .collect();
    client
        .kv_put_vectors(context, "notes", 2, entries, false, None)
        .unwrap();
    let figures = |wanted: &dyn Fn(&std::collections::HashMap<String, f64>) -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let seen = scrape(&metrics);
            if let Some(seen) = seen.as_ref().filter(|seen| wanted(seen)) {
                return seen.clone();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the figures never came: {seen:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let seen = figures(&|seen| seen.get("ctxstore_vector_graph_vectors") == Some(&50.0));
    assert_eq!(seen["ctxstore_vector_indexes"], 1.0);
    assert_eq!(seen["ctxstore_vector_graphs_not_ready"], 0.0);
    assert_eq!(seen["ctxstore_vector_graph_pending"], 0.0);
    assert!(seen["ctxstore_vector_graph_memory_bytes"] > 0.0);
    assert_eq!(seen["ctxstore_vector_graph_rebuilds_total"], 0.0);
    assert_eq!(seen["ctxstore_vector_graph_rebuilding"], 0.0);
    client.vector_index_drop("notes").unwrap();
    let seen = figures(&|seen| seen.get("ctxstore_vector_indexes") == Some(&0.0));
    assert_eq!(seen["ctxstore_vector_graph_vectors"], 0.0);
    assert_eq!(seen["ctxstore_vector_graph_memory_bytes"], 0.0);
}
