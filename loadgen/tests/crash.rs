//! Crash consistency: kill -9 the server under write load at random instants, restart it, and
//! check every acknowledged append: the turn exists with the same payload hash, parent and
//! context; its blob reads back and hashes right; each context's head is at or after its last
//! acknowledged turn. At the end `ctxstore-server verify` passes.
//!
//! `CTXSTORE_CRASH_CYCLES` (default 10) sets the cycles, `CTXSTORE_CRASH_SEED` the seed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ctxstore_client::{BlobHash, Client, ClientConfig};

mod common;

use common::{LOADGEN, server_binary};

#[derive(Clone, Debug)]
struct Acked {
    context: u64,
    turn: u64,
    parent: u64,
    depth: u32,
    hash: String,
}

// The child is returned to the caller, which kills and waits for it.
#[allow(clippy::zombie_processes)]
fn start_server(data: &Path, ready: &Path) -> (Child, String) {
    let _ = std::fs::remove_file(ready);
    let mut child = Command::new(server_binary())
        .arg("--data")
        .arg(data)
        .args(["--listen", "127.0.0.1:0", "--ready-file"])
        .arg(ready)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(addr) = std::fs::read_to_string(ready)
            && addr.ends_with('\n')
        {
            return (child, addr.trim().to_string());
        }
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server did not come up (after a crash, recovery must succeed)");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn kill_9(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-KILL", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

fn read_acks(path: &Path) -> Vec<Acked> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .map(|value| Acked {
            context: value["context_id"].as_u64().unwrap(),
            turn: value["turn_id"].as_u64().unwrap(),
            parent: value["parent_turn_id"].as_u64().unwrap(),
            depth: value["depth"].as_u64().unwrap() as u32,
            hash: value["payload_hash"].as_str().unwrap().to_string(),
        })
        .collect()
}

/// Every acknowledged append against the restarted server, pipelined.
async fn check(addr: &str, acked: &[Acked]) -> usize {
    let client = Client::connect(ClientConfig::new(addr)).await.unwrap();
    let mut checked = 0;
    for chunk in acked.chunks(512) {
        let tasks: Vec<_> = chunk
            .iter()
            .cloned()
            .map(|ack| {
                let client = client.clone();
                tokio::spawn(async move {
                    let turn = client.turn(ack.turn).await.unwrap_or_else(|error| {
                        panic!("acknowledged turn {} lost: {error}", ack.turn)
                    });
                    assert_eq!(turn.payload_hash.to_hex(), ack.hash, "turn {}", ack.turn);
                    assert_eq!(
                        (turn.parent_turn_id, turn.context_id, turn.depth),
                        (ack.parent, ack.context, ack.depth),
                        "turn {}",
                        ack.turn
                    );
                    // The client checks the payload against its hash.
                    let payload = client
                        .blob(BlobHash::from_hex(&ack.hash).unwrap())
                        .await
                        .unwrap();
                    assert_eq!(payload.len() as u32, turn.payload_len);
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
            checked += 1;
        }
    }
    // Heads: each context's last acknowledged turn is on its chain.
    let mut last: HashMap<u64, &Acked> = HashMap::new();
    for ack in acked {
        let entry = last.entry(ack.context).or_insert(ack);
        if ack.depth > entry.depth {
            *entry = ack;
        }
    }
    for (context, ack) in last {
        let head = client.head(context).await.unwrap();
        assert!(
            head.head_depth >= ack.depth,
            "context {context}: head depth {} < acknowledged {}",
            head.head_depth,
            ack.depth
        );
        let on_chain = client.range(context, ack.depth, 1, false).await.unwrap();
        assert_eq!(
            on_chain.turns.first().map(|turn| turn.turn_id),
            Some(ack.turn),
            "context {context} lost turn {}",
            ack.turn
        );
    }
    checked
}

#[test]
fn kill_9_under_load_loses_no_acknowledged_append() {
    let cycles: usize = std::env::var("CTXSTORE_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let seed: u64 = std::env::var("CTXSTORE_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed);
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let ready = dir.path().join("ready");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut acked: Vec<Acked> = Vec::new();
    let mut checked = 0;
    for cycle in 0..cycles {
        let (mut server, addr) = start_server(&data, &ready);
        let log = dir.path().join(format!("acks-{cycle}.jsonl"));
        let run_ms = rng.u64(600..2000);
        let mut loadgen = Command::new(LOADGEN)
            .args([
                "--addr",
                &addr,
                "--duration",
                &format!("{run_ms}ms"),
                "--warmup",
                "0s",
            ])
            .args([
                "--connections",
                "6",
                "--contexts",
                "12",
                "--mix",
                "append=85,fork=10,get_last=5",
            ])
            .args([
                "--payload-bytes",
                "4096",
                "--large-every",
                "40",
                "--dup-ratio",
                "0.2",
                "--read-turns",
                "8",
            ])
            .args([
                "--seed",
                &(seed + cycle as u64).to_string(),
                "--quiet",
                "--ack-log",
            ])
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Kill the server at a random instant while the appends are flowing.
        std::thread::sleep(Duration::from_millis(rng.u64(150..run_ms + 50)));
        kill_9(&mut server);
        let _ = loadgen.wait();
        let fresh = read_acks(&log);
        assert!(
            !fresh.is_empty() || cycle > 0,
            "cycle {cycle}: no append was acknowledged"
        );
        acked.extend(fresh);

        let (mut server, addr) = start_server(&data, &ready);
        checked += runtime.block_on(check(&addr, &acked));
        kill_9(&mut server);
    }

    let (mut server, _) = start_server(&data, &ready);
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    assert!(server.wait().unwrap().success());
    let output = Command::new(server_binary())
        .arg("verify")
        .arg("--data")
        .arg(&data)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{report}");
    println!(
        "crash harness: {cycles} cycles, {} acknowledged appends, {checked} checks against restarted servers, 0 lost\n{report}",
        acked.len()
    );
}
