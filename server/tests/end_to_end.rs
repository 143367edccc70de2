//! Every message through the client against a real server: fork semantics, dedup across
//! contexts, append by hash, CONFLICT, restarts; pipelining on one connection and many
//! connections at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use common::*;
use ctxstore_client::{BlobHash, ClientConfig, ClientError, ErrorCode};
use ctxstore_protocol::{AdminResponse, ReadsRequest, ReadsResponse};
use ctxstore_protocol::{admin, reads};

fn text(seed: u64, len: usize) -> Bytes {
    let mut text = format!("{{\"seed\":{seed},\"content\":\"");
    let words = [
        "tool", "call", "result", "the", "agent", "context", "file", "read", "answer",
    ];
    let mut rng = ctxstore_testsupport::SeededRng::new(seed);
    while text.len() < len {
        text.push_str(words[rng.below(words.len() as u64) as usize]);
        text.push(' ');
    }
    text.truncate(len);
    Bytes::from(text)
}

#[test]
fn every_message_through_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(config(dir.path()));
    let addr = server.local_addr();
    let runtime = runtime();
    let (main, fork_head, all_hashes) = runtime.block_on(async {
        let client = connect(addr).await;
        client.ping(77).await.unwrap();
        let limits = client.server_limits();
        assert_eq!(limits.frame_bytes_max, 16 << 20);
        assert!(limits.read_turns_max >= 64);

        let main = client.create_context().await.unwrap();
        assert_eq!((main.head_turn_id, main.head_depth), (0, 0));
        let mut turns = Vec::new();
        let mut hashes = Vec::new();
        for index in 0..6u64 {
            let payload = text(index, 10_240);
            let expected = turns
                .last()
                .map(|t: &ctxstore_client::Turn| t.turn_id)
                .or(Some(0));
            let appended = client
                .append(main.context_id, expected, 7, 1, payload.clone())
                .await
                .unwrap();
            assert!(!appended.deduped);
            assert_eq!(appended.turn.depth, index as u32);
            assert_eq!(appended.turn.payload_hash, BlobHash::of(&payload));
            hashes.push((appended.turn.payload_hash, payload));
            turns.push(appended.turn);
        }
        let head = client.head(main.context_id).await.unwrap();
        assert_eq!((head.head_turn_id, head.head_depth), (turns[5].turn_id, 5));

        // CONFLICT names the actual head.
        match client
            .append(
                main.context_id,
                Some(turns[2].turn_id),
                7,
                1,
                Bytes::from_static(b"late"),
            )
            .await
        {
            Err(ClientError::Server {
                code: ErrorCode::Conflict,
                detail,
                ..
            }) => assert_eq!(detail, turns[5].turn_id),
            other => panic!("expected CONFLICT, got {other:?}"),
        }

        // Reads, with and without payloads, zstd accepted or not.
        let last = client.last(main.context_id, 3, true).await.unwrap();
        assert_eq!(
            last.turns.iter().map(|t| t.turn_id).collect::<Vec<_>>(),
            turns[3..].iter().map(|t| t.turn_id).collect::<Vec<_>>()
        );
        assert_eq!(last.turns[0].payload.as_ref(), Some(&hashes[3].1));
        assert_eq!(last.next_before, turns[3].turn_id);
        assert_eq!(last.tip_depth, 5);
        // An empty page still names the head's depth (protocol.md, TURNS).
        let none = client.last(main.context_id, 0, false).await.unwrap();
        assert!(none.turns.is_empty());
        assert_eq!(none.tip_depth, 5);
        let raw_client = ctxstore_client::Client::connect(ClientConfig {
            accept_zstd: false,
            ..ClientConfig::new(addr.to_string())
        })
        .await
        .unwrap();
        assert_eq!(
            raw_client.last(main.context_id, 3, true).await.unwrap(),
            last
        );
        let before = client
            .before(main.context_id, last.next_before, 10, false)
            .await
            .unwrap();
        assert_eq!(before.turns.len(), 3);
        assert!(before.turns.iter().all(|t| t.payload.is_none()));
        assert_eq!(before.next_before, 0);
        let range = client.range(main.context_id, 1, 2, true).await.unwrap();
        assert_eq!(
            range.turns.iter().map(|t| t.depth).collect::<Vec<_>>(),
            vec![1, 2]
        );
        let chain = client.chain(turns[4].turn_id, 0, 100, false).await.unwrap();
        assert_eq!(chain.turns.len(), 5);
        assert_eq!(chain.tip_depth, 4);
        let replay = client.replay(turns[5].turn_id, true).await.unwrap();
        assert_eq!(replay.len(), 6);
        assert_eq!(replay[5].payload.as_ref(), Some(&hashes[5].1));
        let turn = client.turn(turns[2].turn_id).await.unwrap();
        assert_eq!(turn, turns[2]);
        assert_eq!(client.blob(hashes[1].0).await.unwrap(), hashes[1].1);
        assert_eq!(raw_client.blob(hashes[1].0).await.unwrap(), hashes[1].1);

        // Fork at depth 2: shared history, then divergence.
        let fork = client.fork(turns[2].turn_id).await.unwrap();
        assert_eq!((fork.head_turn_id, fork.head_depth), (turns[2].turn_id, 2));
        let branch = client
            .append(
                fork.context_id,
                None,
                7,
                1,
                Bytes::from_static(b"another future"),
            )
            .await
            .unwrap();
        assert_eq!(branch.turn.parent_turn_id, turns[2].turn_id);
        let fork_page = client.last(fork.context_id, 100, false).await.unwrap();
        assert_eq!(fork_page.turns.len(), 4);
        assert_eq!(
            fork_page.turns[..3]
                .iter()
                .map(|t| t.turn_id)
                .collect::<Vec<_>>(),
            turns[..3].iter().map(|t| t.turn_id).collect::<Vec<_>>()
        );
        let from = client.create_context_from(turns[1].turn_id).await.unwrap();
        assert_eq!(from.head_turn_id, turns[1].turn_id);

        // Dedup across contexts, append by hash, NOT_FOUND for an unknown hash.
        let other = client.create_context().await.unwrap();
        let again = client
            .append(other.context_id, None, 7, 1, hashes[0].1.clone())
            .await
            .unwrap();
        assert!(again.deduped);
        let by_hash = client
            .append_by_hash(other.context_id, None, 8, 2, hashes[1].0)
            .await
            .unwrap();
        assert!(by_hash.deduped);
        assert_eq!(by_hash.turn.payload_len, 10_240);
        let unknown = client
            .append_by_hash(other.context_id, None, 8, 2, BlobHash::of(b"never"))
            .await
            .unwrap_err();
        assert_eq!(unknown.code(), Some(ErrorCode::NotFound));
        assert_eq!(
            client
                .has_blobs(&[hashes[0].0, BlobHash::of(b"never")])
                .await
                .unwrap(),
            vec![true, false]
        );
        assert_eq!(
            client.head(999).await.unwrap_err().code(),
            Some(ErrorCode::NotFound)
        );
        assert_eq!(
            client
                .last(main.context_id, 1_000_000, false)
                .await
                .unwrap_err()
                .code(),
            Some(ErrorCode::TooLarge)
        );

        let stats = client.stats().await.unwrap();
        assert_eq!(stats.turns, 9);
        assert_eq!(stats.contexts, 4);
        // The refused append stored its blob too ("late"): blobs outlive failed appends.
        assert_eq!(stats.blobs, 8);
        assert_eq!(stats.dedup_hits, 2);
        assert!(stats.stored_bytes < stats.logical_bytes);
        assert!(stats.requests_total > 20);
        (main, fork, hashes)
    });

    // All data intact after a restart.
    server.stop();
    drop(server);
    let server = start(config(dir.path()));
    let addr = server.local_addr();
    runtime.block_on(async {
        let client = connect(addr).await;
        let page = client.last(main.context_id, 100, true).await.unwrap();
        assert_eq!(page.turns.len(), 6);
        for (turn, (hash, payload)) in page.turns.iter().zip(&all_hashes) {
            assert_eq!(turn.payload_hash, *hash);
            assert_eq!(turn.payload.as_ref(), Some(payload));
        }
        assert_eq!(
            client.head(fork_head.context_id).await.unwrap().head_depth,
            3
        );
        assert_eq!(client.stats().await.unwrap().turns, 9);
    });
}

#[test]
fn a_thousand_requests_in_flight_on_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(config(dir.path()));
    let runtime = runtime();
    runtime.block_on(async {
        let client = connect(server.local_addr()).await;
        let contexts: Vec<u64> = {
            let mut contexts = Vec::new();
            for _ in 0..8 {
                contexts.push(client.create_context().await.unwrap().context_id);
            }
            contexts
        };
        // 1,500 requests at once: appends and pings, answered in any order.
        let mut tasks = Vec::new();
        for index in 0..1500u64 {
            let client = client.clone();
            let context = contexts[(index % 8) as usize];
            tasks.push(tokio::spawn(async move {
                if index % 3 == 0 {
                    client.ping(index).await.unwrap();
                    (index, None)
                } else {
                    let payload = text(index, 200 + (index % 50) as usize);
                    let appended = client
                        .append(context, None, index, 0, payload.clone())
                        .await
                        .unwrap();
                    assert_eq!(
                        appended.turn.payload_hash,
                        BlobHash::of(&payload),
                        "answer matched to its request"
                    );
                    assert_eq!(appended.turn.type_tag, index);
                    assert_eq!(appended.turn.context_id, context);
                    (index, Some(appended.turn.turn_id))
                }
            }));
        }
        let mut turn_ids = HashSet::new();
        for task in tasks {
            if let (_, Some(turn_id)) = task.await.unwrap() {
                assert!(turn_ids.insert(turn_id));
            }
        }
        assert_eq!(turn_ids.len(), 1000);
        let stats = client.stats().await.unwrap();
        assert_eq!(stats.turns, 1000);
    });
}

#[test]
fn sixty_four_connections_append_at_once_and_every_ack_is_readable() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(config(dir.path()));
    let addr = server.local_addr();
    let runtime = runtime();
    let acked: Vec<(u64, Vec<(u64, Bytes)>)> = runtime.block_on(async move {
        let mut tasks = Vec::new();
        for connection in 0..64u64 {
            tasks.push(tokio::spawn(async move {
                let client = connect(addr).await;
                let context = client.create_context().await.unwrap().context_id;
                let mut acked = Vec::new();
                for index in 0..20 {
                    let payload = text(connection * 100 + index, 2048);
                    let appended = client
                        .append(context, None, 0, 1, payload.clone())
                        .await
                        .unwrap();
                    acked.push((appended.turn.turn_id, payload));
                }
                (context, acked)
            }));
        }
        let mut all = Vec::new();
        for task in tasks {
            all.push(task.await.unwrap());
        }
        all
    });
    runtime.block_on(async {
        let client = connect(addr).await;
        let mut seen = HashMap::new();
        for (context, turns) in &acked {
            let page = client.last(*context, 100, true).await.unwrap();
            assert_eq!(page.turns.len(), turns.len());
            for (turn, (turn_id, payload)) in page.turns.iter().zip(turns) {
                assert_eq!(turn.turn_id, *turn_id);
                assert_eq!(turn.payload.as_ref(), Some(payload));
                assert!(
                    seen.insert(turn.turn_id, *context).is_none(),
                    "TurnIDs unique"
                );
            }
        }
        assert_eq!(seen.len(), 64 * 20);
    });
}

#[test]
fn backpressure_at_the_in_flight_limit_answers_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.requests_in_flight_max = 4;
    let server = start(config);
    runtime().block_on(async {
        let client = connect(server.local_addr()).await;
        let context = client.create_context().await.unwrap().context_id;
        let tasks: Vec<_> = (0..300u64)
            .map(|index| {
                let client = client.clone();
                tokio::spawn(async move {
                    client
                        .append(context, None, index, 0, text(index, 100))
                        .await
                        .unwrap()
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(client.head(context).await.unwrap().head_depth, 299);
    });
}

/// Reads a page over a raw connection and checks how each payload travels: raw bytes must
/// hash to the turn's payload hash; zstd bodies must be smaller than what they inflate to.
/// Returns the encodings, oldest turn first.
fn raw_last_encodings(
    addr: std::net::SocketAddr,
    context_id: u64,
    limit: u32,
) -> Vec<ctxstore_protocol::PayloadEncoding> {
    use ctxstore_protocol::{ContextRef, PayloadEncoding, Request, Response, read_flags};
    let mut raw = Raw::connect(addr);
    assert!(matches!(
        raw.hello(b""),
        Response::Admin(AdminResponse::Negotiated(admin::Negotiated { .. }))
    ));
    raw.send(
        2,
        &Request::Reads(ReadsRequest::GetLast(reads::GetLast {
            context: ContextRef::Id(context_id),
            limit,
            read_flags: read_flags::WITH_PAYLOADS | read_flags::ACCEPT_ZSTD,
        })),
    );
    let Some((2, Response::Reads(ReadsResponse::Turns(reads::Turns { entries, .. })))) =
        raw.receive()
    else {
        panic!("GET_LAST did not return its turns");
    };
    assert_eq!(entries.len(), limit as usize);
    entries
        .into_iter()
        .map(|entry| {
            let payload = entry.payload;
            match payload.encoding {
                PayloadEncoding::Raw => assert_eq!(
                    BlobHash::of(&payload.data).0,
                    entry.turn.payload_hash.0,
                    "a raw payload must be the turn's own bytes"
                ),
                PayloadEncoding::Zstd => assert!(payload.data.len() < payload.raw_len as usize),
                PayloadEncoding::Absent => panic!("payload requested but absent"),
            }
            payload.encoding
        })
        .collect()
}

#[test]
fn hot_payloads_come_raw_from_the_core_cache_across_evictions_and_restarts() {
    use ctxstore_protocol::PayloadEncoding::{Raw as RawBody, Zstd};
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    // One core, so that the appending and the reading connection share a cache; 64 KiB, so
    // that 40 payloads of 3 KiB evict, and the 10 KiB one (over 1/16 of it) is never cached.
    config.network_cores = 1;
    config.payload_cache_bytes_per_core = 64 * 1024;
    let mut server = start(config.clone());
    let runtime = runtime();
    let mut payloads: Vec<Bytes> = (0..40).map(|seed| text(seed, 3 * 1024)).collect();
    payloads.push(text(1000, 10 * 1024));
    let context_id = runtime.block_on(async {
        let client = connect(server.local_addr()).await;
        let context = client.create_context().await.unwrap();
        for payload in &payloads {
            client
                .append(context.context_id, None, 1, 0, payload.clone())
                .await
                .unwrap();
        }
        context.context_id
    });

    let mut expected = vec![RawBody; 40];
    expected.push(Zstd);
    // Cold after the appends evicted the oldest, warm after; the same bytes every time,
    // through the client (which inflates and verifies) and on the wire.
    for round in 0..3 {
        assert_eq!(
            raw_last_encodings(server.local_addr(), context_id, 41),
            expected,
            "round {round}"
        );
        runtime.block_on(async {
            let client = connect(server.local_addr()).await;
            let page = client.last(context_id, 41, true).await.unwrap();
            let read: Vec<Bytes> = page.turns.into_iter().map(|t| t.payload.unwrap()).collect();
            assert_eq!(read, payloads);
            for payload in &payloads {
                assert_eq!(&client.blob(BlobHash::of(payload)).await.unwrap(), payload);
            }
        });
        if round == 1 {
            server.stop();
            server = start(config.clone());
        }
    }
    server.stop();

    // Without a cache, a client that inflates gets the stored zstd bodies.
    config.payload_cache_bytes_per_core = 0;
    let mut server = start(config);
    assert_eq!(
        raw_last_encodings(server.local_addr(), context_id, 41),
        vec![Zstd; 41]
    );
    server.stop();
}
