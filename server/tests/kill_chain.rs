//! kill -9, restore, start again: a chain of primaries on one replica prefix (issue 46, the
//! campaign's kill -9 half). Each round a primary started on the store the previous round
//! restored (its own generation) takes seeded writes from one client, then is killed with
//! SIGKILL at a random moment, some of its acknowledged writes not yet shipped. The store
//! `ctxstore-server restore` builds from the prefix must hold a prefix of what was
//! acknowledged, byte for byte (everything up to the last point shipped, nothing that was not
//! acknowledged), verify, and hand out no TurnID or ContextID any earlier primary handed out.
//! Seeded and reproducible: `KILL_CHAIN_ROUNDS` (default 3), `KILL_CHAIN_SEED` (default 1);
//! on a directory and, with CI's server, SeaweedFS.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::{ClientConfig, blocking};
use ctxstore_testsupport::{SeededRng, ServerLaunch, TestServer};

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");

/// Every acknowledged turn, in the order it was acknowledged (one client, one at a time: the
/// order of the log), with its context and payload; and every id ever handed out.
#[derive(Default)]
struct Truth {
    turns: Vec<(u64, u64, Vec<u8>)>,
    contexts: Vec<u64>,
    turn_ids_ever: BTreeSet<u64>,
    context_ids_ever: BTreeSet<u64>,
}

fn spawn(data: &Path, url: &str, env: &[(String, String)]) -> TestServer {
    ServerLaunch::new(SERVER)
        .data(data)
        .flags(&["--replicate-to", url, "--replicate-interval", "100ms"])
        .envs(env)
        .keep_log()
        .start()
}

/// One round: writes until the kill, then the restore checked against the truth. Answers the
/// restored store's directory.
fn round(
    rng: &mut SeededRng,
    truth: &mut Truth,
    data: &Path,
    url: &str,
    env: &[(String, String)],
    next_dir: PathBuf,
) -> PathBuf {
    let mut server = spawn(data, url, env);
    let client = blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let ops = 20 + rng.below(60);
    // Everything up to one op is waited for on the replica (a restore point exists), the
    // pause before the kill comes after it.
    let shipped_at = rng.below(ops / 2);
    let kill_at = shipped_at + rng.below(ops - shipped_at);
    for op in 0..ops {
        if truth.contexts.is_empty() || rng.below(6) == 0 {
            let context = client.create_context().unwrap().context_id;
            assert!(
                truth.context_ids_ever.insert(context),
                "ContextID {context} handed out again"
            );
            truth.contexts.push(context);
        }
        let context = truth.contexts[rng.below(truth.contexts.len() as u64) as usize];
        let len = 1 + rng.below(3000) as usize;
        let payload: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
        let turn = client
            .append(context, None, 0, 0, Bytes::from(payload.clone()))
            .unwrap()
            .turn
            .turn_id;
        assert!(
            truth.turn_ids_ever.insert(turn),
            "TurnID {turn} handed out again"
        );
        truth.turns.push((turn, context, payload));
        if op == shipped_at {
            let deadline = Instant::now() + Duration::from_secs(30);
            while client.replication_stats().unwrap().records < turn {
                assert!(Instant::now() < deadline, "turn {turn} never shipped");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if op == kill_at {
            // Sometimes after a pause long enough for a cut to ship, sometimes at once.
            std::thread::sleep(Duration::from_millis(rng.below(250)));
        }
    }
    drop(client);
    server.signal("KILL");
    let _ = server.child.wait();

    let output = common::restore_cli(SERVER, url, &next_dir, &[], env);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let next_turn: u64 = common::output_field(&stdout, "next_turn_id")
        .parse()
        .unwrap();
    let next_context: u64 = common::output_field(&stdout, "next_context_id")
        .parse()
        .unwrap();
    assert!(
        truth.turn_ids_ever.iter().all(|id| *id < next_turn),
        "{stdout}"
    );
    assert!(
        truth.context_ids_ever.iter().all(|id| *id < next_context),
        "{stdout}"
    );

    // What the restored store holds: a prefix of the acknowledged turns, byte for byte.
    let server = ServerLaunch::new(SERVER).data(&next_dir).start();
    let client = blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let mut held: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut live_contexts = Vec::new();
    for &context in &truth.contexts {
        let Ok(page) = client.last(context, 10_000, true) else {
            continue; // created after the last point shipped
        };
        live_contexts.push(context);
        for turn in page.turns {
            held.insert(turn.turn_id, turn.payload.unwrap().to_vec());
        }
    }
    let kept = truth
        .turns
        .iter()
        .take_while(|(turn, _, _)| held.contains_key(turn))
        .count();
    assert_eq!(
        kept,
        held.len(),
        "the restore holds turns that are not a prefix of the acknowledged ones"
    );
    for (turn, _, payload) in &truth.turns[..kept] {
        assert!(held[turn] == *payload, "turn {turn} reads other bytes");
    }
    drop(client);
    drop(server);
    let report = ctxstore_engine::verify(&next_dir).unwrap();
    assert!(report.is_ok(), "{report}");
    eprintln!(
        "kill chain: {} of {} acknowledged turns restored, next ids {next_turn}/{next_context}",
        kept,
        truth.turns.len()
    );
    // The writes lost with the killed primary are gone; its ids stay taken.
    truth.turns.truncate(kept);
    truth.contexts = live_contexts;
    next_dir
}

fn chain(root: &Path, url: &str, env: &[(String, String)], seed: u64, rounds: u64) {
    let mut rng = SeededRng::new(seed);
    let mut truth = Truth::default();
    let mut data = root.join("round0");
    let started = Instant::now();
    for index in 1..=rounds {
        data = round(
            &mut rng,
            &mut truth,
            &data,
            url,
            env,
            root.join(format!("round{index}")),
        );
    }
    eprintln!(
        "kill chain seed {seed}: {rounds} rounds, {} ids handed out, {:?}",
        truth.turn_ids_ever.len(),
        started.elapsed()
    );
}

#[test]
fn primaries_killed_and_restored_in_a_chain_lose_only_the_unshipped_and_reuse_no_id() {
    let rounds: u64 = std::env::var("KILL_CHAIN_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("KILL_CHAIN_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(1);
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}", root.path().join("replica").display());
    chain(root.path(), &url, &[], seed, rounds);
    if let Some((url, env)) = common::seaweedfs("kill-chain") {
        let root = tempfile::tempdir().unwrap();
        chain(root.path(), &url, &env, seed, rounds.min(2));
    }
}
