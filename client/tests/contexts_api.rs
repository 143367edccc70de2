//! The client library's calls for contexts as agent threads (protocol version 2) against a
//! real `ctxstore-server`: open/clone/show/tag/name, listing page by page (each matching
//! context at most once while tags change underneath), key-value entries with values checked
//! against their hashes (raw and zstd), and a version-1 server refusing v2 calls up front.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{
    BlobHash, ClientConfig, ClientError, ContextQuery, ContextRef, ErrorCode, NewContext,
};
use ctxstore_protocol::kv;
use ctxstore_protocol::{KvRequest, KvResponse, PayloadEncoding, Request, Response, read_flags};

use ctxstore_testsupport::{ScriptedServer, TestServer};

fn connect(server: &TestServer) -> Client {
    Client::connect(ClientConfig::new(server.addr.clone())).unwrap()
}

fn name(name: &str) -> ContextRef {
    ContextRef::Name(name.into())
}

fn code(error: &ClientError) -> Option<ErrorCode> {
    error.code()
}

#[test]
fn open_show_tag_name_and_clone() {
    let server = TestServer::start(None);
    let client = connect(&server);
    assert_eq!(
        client.protocol_version(),
        ctxstore_protocol::PROTOCOL_VERSION
    );

    let opened = client
        .open_context(
            NewContext::new()
                .name("thread-1")
                .tag("status", "idle")
                .tag("user", "ann"),
        )
        .unwrap();
    assert!(opened.created);
    let info = opened.context;
    assert_eq!(info.name.as_deref(), Some("thread-1"));
    let tags: BTreeMap<String, String> = [("status", "idle"), ("user", "ann")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(info.tags, tags);
    assert_eq!((info.head_turn_id, info.head_depth), (0, 0));
    assert!(info.created_at_unix_ms > 0);
    assert_eq!(client.context_info(info.context_id).unwrap(), info);
    assert_eq!(client.context_info(name("thread-1")).unwrap(), info);

    // get_or_create answers the owner, unchanged; without it ALREADY_EXISTS with the owner.
    let again = client
        .open_context(
            NewContext::new()
                .name("thread-1")
                .tag("status", "changed")
                .get_or_create(true),
        )
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.context, info);
    let error = client
        .open_context(NewContext::new().name("thread-1"))
        .unwrap_err();
    assert_eq!(code(&error), Some(ErrorCode::AlreadyExists));
    assert!(matches!(error, ClientError::Server { detail, .. } if detail == info.context_id));

    // Turns by name; tags with a compare-and-set on the head.
    let appended = client
        .append(name("thread-1"), Some(0), 1, 0, Bytes::from_static(b"one"))
        .unwrap();
    let head = appended.turn.turn_id;
    let tagged = client
        .tag_context(
            name("thread-1"),
            [("status", "running")],
            ["user"],
            Some(head),
        )
        .unwrap();
    assert_eq!(tagged.head_turn_id, head);
    assert_eq!(tagged.tags.len(), 1);
    assert_eq!(tagged.tags["status"], "running");
    assert!(tagged.updated_at_unix_ms >= info.updated_at_unix_ms);
    let error = client
        .tag_context(
            name("thread-1"),
            [("status", "done")],
            [] as [&str; 0],
            Some(0),
        )
        .unwrap_err();
    assert_eq!(code(&error), Some(ErrorCode::Conflict));
    assert!(matches!(error, ClientError::Server { detail, .. } if detail == head));
    assert_eq!(client.context_info(name("thread-1")).unwrap(), tagged);

    // A fork at a turn, named later.
    let fork = client
        .open_context(NewContext::new().from_turn(head))
        .unwrap()
        .context;
    assert_eq!((fork.head_turn_id, fork.name.clone()), (head, None));
    let named = client.name_context(fork.context_id, "fork-1").unwrap();
    assert_eq!(named.name.as_deref(), Some("fork-1"));
    assert_eq!(client.head(name("fork-1")).unwrap(), fork.head());
    // Names do not change; a taken name is ALREADY_EXISTS for a context without one.
    let error = client.name_context(name("fork-1"), "thread-1").unwrap_err();
    assert_eq!(code(&error), Some(ErrorCode::InvalidArgument));
    let unnamed = client
        .open_context(NewContext::new().from_turn(head))
        .unwrap()
        .context;
    let error = client
        .name_context(unnamed.context_id, "thread-1")
        .unwrap_err();
    assert_eq!(code(&error), Some(ErrorCode::AlreadyExists));

    // Clone: the head, tags and entries; its own from then on.
    client
        .kv_put(
            name("thread-1"),
            vec![
                (Bytes::from_static(b"a"), Bytes::from_static(b"1")),
                (Bytes::from_static(b"b"), Bytes::from_static(b"2")),
            ],
            false,
        )
        .unwrap();
    let source = client.context_info(name("thread-1")).unwrap();
    let copy = client.clone_context(name("thread-1"), "copy").unwrap();
    assert_ne!(copy.context_id, source.context_id);
    assert_eq!(copy.name.as_deref(), Some("copy"));
    assert_eq!(
        (copy.head_turn_id, copy.head_depth),
        (source.head_turn_id, source.head_depth)
    );
    assert_eq!(copy.tags, source.tags);
    assert_eq!(
        client.kv_list_all(name("copy"), b"").unwrap(),
        client.kv_list_all(name("thread-1"), b"").unwrap()
    );
    client
        .append(name("copy"), Some(head), 1, 0, Bytes::from_static(b"two"))
        .unwrap();
    assert_eq!(client.head(name("thread-1")).unwrap().head_turn_id, head);
    let error = client.clone_context(name("thread-1"), "copy").unwrap_err();
    assert_eq!(code(&error), Some(ErrorCode::AlreadyExists));
    let error = client.clone_context(name("nope"), "copy-2").unwrap_err();
    assert_eq!(code(&error), Some(ErrorCode::NotFound));

    // Unknown contexts: NOT_FOUND, by id and by name.
    for context in [ContextRef::Id(999_999), name("nope")] {
        let error = client.context_info(context.clone()).unwrap_err();
        assert_eq!(code(&error), Some(ErrorCode::NotFound), "{context}");
        let error = client.head(context.clone()).unwrap_err();
        assert_eq!(code(&error), Some(ErrorCode::NotFound), "{context}");
    }
}

#[test]
fn list_pages_follow_the_cursor() {
    let server = TestServer::start(None);
    let client = connect(&server);
    let mut by_name = BTreeMap::new();
    for index in 0..23 {
        let tag = if index % 3 == 0 { "b" } else { "a" };
        let new = NewContext::new()
            .name(format!("t-{index:02}"))
            .tag("group", tag);
        let info = client.open_context(new).unwrap().context;
        by_name.insert(info.name.clone().unwrap(), (info.context_id, tag));
    }
    // Unnamed ones too, between.
    let unnamed = client
        .open_context(NewContext::new().tag("group", "a"))
        .unwrap()
        .context
        .context_id;

    for (query, expected) in [
        (
            ContextQuery::new().tag("group", "a"),
            by_name
                .values()
                .filter(|(_, tag)| *tag == "a")
                .map(|(id, _)| *id)
                .chain([unnamed])
                .collect::<Vec<_>>(),
        ),
        (
            ContextQuery::new().name_prefix("t-1"),
            by_name
                .iter()
                .filter(|(name, _)| name.starts_with("t-1"))
                .map(|(_, (id, _))| *id)
                .collect(),
        ),
        (
            ContextQuery::new().name_prefix("t-").tag("group", "b"),
            by_name
                .values()
                .filter(|(_, tag)| *tag == "b")
                .map(|(id, _)| *id)
                .collect(),
        ),
        (
            ContextQuery::new(),
            by_name
                .values()
                .map(|(id, _)| *id)
                .chain([unnamed])
                .collect(),
        ),
    ] {
        for page_limit in [1, 2, 5, 1000] {
            let query = query.clone().page_limit(page_limit);
            // By hand, page by page: no page over the limit, the cursor moves.
            let mut seen = Vec::new();
            let mut cursor = None;
            let mut pages = 0;
            loop {
                let page = client.list_contexts(&query, cursor.as_ref()).unwrap();
                assert!(page.contexts.len() <= page_limit as usize);
                seen.extend(page.contexts.iter().map(|info| info.context_id));
                pages += 1;
                assert!(pages <= expected.len() + 1, "the cursor does not end");
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            assert_eq!(seen, expected, "{query:?}");
            // The convenience that follows the cursor agrees, and stops at a count.
            let all = client.list_all_contexts(&query, None).unwrap();
            let ids: Vec<u64> = all.iter().map(|info| info.context_id).collect();
            assert_eq!(ids, expected, "{query:?}");
            let first_three = client.list_all_contexts(&query, Some(3)).unwrap();
            assert_eq!(first_three.len(), expected.len().min(3));
            assert_eq!(first_three[..], all[..first_three.len()]);
        }
    }
    // Over the server's page limit: TOO_LARGE.
    let error = client
        .list_contexts(&ContextQuery::new().page_limit(1001), None)
        .unwrap_err();
    assert_eq!(code(&error), Some(ErrorCode::TooLarge));
}

/// Issue 13: list paging with concurrent tag changes returns each matching context at most
/// once. Writers move other contexts in and out of the listed tag, and change other tags of
/// the listed ones (each change moves `updated_at`), while readers page through with small
/// pages. Every context that matches throughout is listed exactly once; none twice.
#[test]
fn list_paging_under_concurrent_tag_changes_lists_each_context_at_most_once() {
    let server = TestServer::start(None);
    let client = connect(&server);
    let mut stable = BTreeSet::new();
    let mut moving = Vec::new();
    for index in 0..60 {
        let new = NewContext::new()
            .name(format!("c-{index:02}"))
            .tag("group", "listed")
            .tag("round", "0");
        let context_id = client.open_context(new).unwrap().context.context_id;
        if index % 2 == 0 {
            stable.insert(context_id);
        } else {
            moving.push(context_id);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let rounds_done = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2)
        .map(|writer| {
            let client = connect(&server);
            let stable: Vec<u64> = stable.iter().copied().collect();
            let moving = moving.clone();
            let stop = stop.clone();
            let rounds_done = rounds_done.clone();
            std::thread::spawn(move || {
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    for (index, &context) in moving.iter().enumerate() {
                        if index % 2 != writer {
                            continue;
                        }
                        // In and out of the listing.
                        if round.is_multiple_of(2) {
                            client
                                .tag_context(context, [("group", "listed")], [] as [&str; 0], None)
                                .unwrap();
                        } else {
                            client
                                .tag_context(context, [] as [(&str, &str); 0], ["group"], None)
                                .unwrap();
                        }
                    }
                    // Matching all along, but changed.
                    for &context in stable.iter().skip(writer).step_by(2) {
                        let value = round.to_string();
                        client
                            .tag_context(
                                context,
                                [("round", value.as_str())],
                                [] as [&str; 0],
                                None,
                            )
                            .unwrap();
                    }
                    rounds_done.fetch_add(1, Ordering::Relaxed);
                }
                round
            })
        })
        .collect();

    let queries = [
        ContextQuery::new().tag("group", "listed"),
        ContextQuery::new().name_prefix("c-").tag("group", "listed"),
        ContextQuery::new().name_prefix("c-"),
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut listings = 0;
    // At least 30 listings, and while they ran, at least 3 rounds of each writer.
    while (listings < 30 || rounds_done.load(Ordering::Relaxed) < 6) && Instant::now() < deadline {
        for query in &queries {
            for page_limit in [1, 4, 7] {
                let query = query.clone().page_limit(page_limit);
                let mut seen = BTreeSet::new();
                let mut cursor = None;
                loop {
                    let page = client.list_contexts(&query, cursor.as_ref()).unwrap();
                    for info in &page.contexts {
                        assert!(
                            seen.insert(info.context_id),
                            "context {} listed twice by {query:?}",
                            info.context_id
                        );
                        if !query.tags.is_empty() {
                            // What is returned matched when its page was read.
                            assert_eq!(info.tags.get("group").map(String::as_str), Some("listed"));
                        }
                    }
                    match page.next_cursor {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
                let missing: Vec<_> = stable.difference(&seen).collect();
                assert!(missing.is_empty(), "{query:?} missed {missing:?}");
                listings += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let rounds: Vec<u64> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    // The writers did write while the listings ran.
    assert!(rounds.iter().all(|&round| round >= 3), "{rounds:?}");
}

#[test]
fn kv_values_round_trip_verified() {
    // Chunking off: a chunked blob (issue 16) is rebuilt and served raw; this test is about
    // a stored zstd body reaching the client as it is.
    let server = TestServer::start_with(None, &["--chunk-threshold", "off"]);
    let client = connect(&server);
    let context = client
        .open_context(NewContext::new().name("kv"))
        .unwrap()
        .context
        .context_id;
    let binary: Bytes = (0..=255u8).cycle().take(1000).collect::<Vec<u8>>().into();
    // Larger than the server's payload-cache entries (2 MiB by default) and compressible: a
    // client that accepts zstd gets the stored (compressed) body and inflates it.
    let large: Bytes = "ctxstore keeps agent threads; "
        .repeat(100_000)
        .into_bytes()
        .into();
    client
        .kv_put(
            name("kv"),
            vec![
                (Bytes::from_static(b"bin"), binary.clone()),
                (Bytes::from_static(b"large"), large.clone()),
                (Bytes::from_static(b"same"), binary.clone()),
            ],
            false,
        )
        .unwrap();
    let plain = Client::connect(ClientConfig {
        accept_zstd: false,
        ..ClientConfig::new(server.addr.clone())
    })
    .unwrap();
    for reader in [&client, &plain] {
        for (key, value) in [("bin", &binary), ("large", &large), ("same", &binary)] {
            let (hash, got) = reader
                .kv_get(context, key.as_bytes().to_vec())
                .unwrap()
                .unwrap();
            assert_eq!(hash, BlobHash::of(value), "{key}");
            assert!(got == *value, "{key}: {} bytes back", got.len());
        }
    }
    // The large value really came compressed to the client that accepts zstd.
    let raw = client
        .request(Request::Kv(KvRequest::KvGet(kv::KvGet {
            context: ContextRef::Id(context),
            key: Bytes::from_static(b"large"),
            read_flags: read_flags::ACCEPT_ZSTD,
        })))
        .unwrap();
    match raw {
        Response::Kv(KvResponse::KvValue(kv::KvValue { payload, .. })) => {
            assert_eq!(payload.encoding, PayloadEncoding::Zstd);
            assert!(payload.data.len() < large.len() / 10);
        }
        other => panic!("{other:?}"),
    }
    // Equal values are one blob.
    assert_eq!(client.blob(BlobHash::of(&binary)).unwrap(), binary);

    // A missing key is None; a missing context is NOT_FOUND.
    assert_eq!(client.kv_get(name("kv"), "nope").unwrap(), None);
    let error = client.kv_get(name("no-such"), "bin").unwrap_err();
    assert_eq!(code(&error), Some(ErrorCode::NotFound));
    let error = client.kv_get(999_999, "bin").unwrap_err();
    assert_eq!(code(&error), Some(ErrorCode::NotFound));

    // if_absent keeps what is there.
    client
        .kv_put(
            context,
            vec![
                (Bytes::from_static(b"bin"), Bytes::from_static(b"other")),
                (Bytes::from_static(b"fresh"), Bytes::from_static(b"new")),
            ],
            true,
        )
        .unwrap();
    assert_eq!(client.kv_get(context, "bin").unwrap().unwrap().1, binary);
    assert_eq!(
        client.kv_get(context, "fresh").unwrap().unwrap().1,
        Bytes::from_static(b"new")
    );

    // Delete: gone; absent keys are no error.
    client
        .kv_delete(
            context,
            vec![Bytes::from_static(b"same"), Bytes::from_static(b"never")],
        )
        .unwrap();
    assert_eq!(client.kv_get(context, "same").unwrap(), None);
    let keys: Vec<Bytes> = client
        .kv_list_all(context, b"")
        .unwrap()
        .into_iter()
        .map(|item| item.key)
        .collect();
    assert_eq!(
        keys,
        ["bin", "fresh", "large"].map(|k| Bytes::from_static(k.as_bytes()))
    );

    // Limits: TOO_LARGE, nothing written.
    let too_many: Vec<(Bytes, Bytes)> = (0..129)
        .map(|i| (Bytes::from(format!("k{i}")), Bytes::from_static(b"v")))
        .collect();
    let error = client.kv_put(context, too_many, false).unwrap_err();
    assert_eq!(code(&error), Some(ErrorCode::TooLarge));
    let error = client
        .kv_put(
            context,
            vec![(Bytes::from(vec![b'k'; 257]), Bytes::new())],
            false,
        )
        .unwrap_err();
    assert_eq!(code(&error), Some(ErrorCode::TooLarge));
    assert_eq!(client.kv_list_all(context, b"").unwrap().len(), 3);
}

#[test]
fn kv_lists_page_by_key() {
    let server = TestServer::start(None);
    let client = connect(&server);
    let context = client
        .open_context(NewContext::new())
        .unwrap()
        .context
        .context_id;
    // 1,100 entries in batches of 100: more than one page of 1,000.
    let mut expected = BTreeMap::new();
    for batch in 0..11 {
        let entries: Vec<(Bytes, Bytes)> = (0..100)
            .map(|i| {
                let n = batch * 100 + i;
                let key = if n % 2 == 0 {
                    format!("even/{n:04}")
                } else {
                    format!("odd/{n:04}")
                };
                (Bytes::from(key), Bytes::from(format!("value {n}")))
            })
            .collect();
        for (key, value) in &entries {
            expected.insert(key.clone(), value.clone());
        }
        client.kv_put(context, entries, false).unwrap();
    }
    let all = client.kv_list_all(context, b"").unwrap();
    assert_eq!(all.len(), 1100);
    for (item, (key, value)) in all.iter().zip(&expected) {
        assert_eq!(&item.key, key);
        assert_eq!(item.value_hash, BlobHash::of(value));
        assert_eq!(item.value_len as usize, value.len());
    }
    let odd = client.kv_list_all(context, b"odd/").unwrap();
    assert_eq!(odd.len(), 550);
    assert!(odd.iter().all(|item| item.key.starts_with(b"odd/")));
    // By hand: pages after a key.
    let first = client.kv_list(context, b"even/", b"", 3).unwrap();
    let keys: Vec<&[u8]> = first.iter().map(|item| &item.key[..]).collect();
    assert_eq!(keys, [&b"even/0000"[..], b"even/0002", b"even/0004"]);
    let next = client.kv_list(context, b"even/", &first[2].key, 2).unwrap();
    assert_eq!(&next[0].key[..], b"even/0006");
    // A cursor before the prefix starts at the prefix.
    let from_prefix = client.kv_list(context, b"odd/", b"a", 1).unwrap();
    assert_eq!(&from_prefix[0].key[..], b"odd/0001");
}

/// A fake server that negotiates version 1 and then answers nothing: a version-2 call must
/// be refused by the client before it is sent (else it would time out here).
#[test]
fn a_version_1_server_gets_no_version_2_requests() {
    let (addr, _) = ScriptedServer::new(1).serve(|_| None);
    let client = Client::connect(
        ClientConfig::new(addr).with_request_timeout(Some(Duration::from_millis(500))),
    )
    .unwrap();
    assert_eq!(client.protocol_version(), 1);
    let started = Instant::now();
    let refusals = [
        client
            .open_context(NewContext::new())
            .map(drop)
            .unwrap_err(),
        client.context_info(1).map(drop).unwrap_err(),
        client
            .list_contexts(&ContextQuery::new(), None)
            .map(drop)
            .unwrap_err(),
        client.kv_get(1, "k").map(drop).unwrap_err(),
        client.kv_list_all(1, b"").map(drop).unwrap_err(),
        // A version-1 message, but naming the context needs version 2.
        client.head(name("thread")).map(drop).unwrap_err(),
        client
            .append(name("thread"), None, 0, 0, Bytes::from_static(b"x"))
            .map(drop)
            .unwrap_err(),
    ];
    for error in &refusals {
        common::assert_refused_for_version_1(error);
        assert!(error.to_string().contains("version 2"), "{error}");
    }
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "a request was sent"
    );
    // A version-1 call by id is sent (and times out against this silent fake).
    assert!(matches!(client.head(1), Err(ClientError::Timeout { .. })));
}
