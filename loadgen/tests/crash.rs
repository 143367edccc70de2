//! Crash consistency: kill -9 the server under write load at random instants, restart it, and
//! check every acknowledged append: the turn exists with the same payload hash, parent and
//! context; its blob reads back and hashes right; each context's head is at or after its last
//! acknowledged turn. Beside the load generator, a metadata writer creates named, tagged
//! contexts, changes tags, puts and deletes key-value entries and clones contexts, one request
//! at a time: after each restart every name, tag and key-value entry is exactly as
//! acknowledged (the one request in flight at the kill may or may not have landed, whole).
//! It also appends keyed turns (a checkpoint id each): every acknowledged key names its turn
//! after the restart, and the keyed append in flight at the kill, retried on the restarted
//! server, lands exactly once (answered `existing` when it had landed).
//! At the end `ctxstore-server verify` passes.
//!
//! `CTXSTORE_CRASH_CYCLES` (default 10) sets the cycles, `CTXSTORE_CRASH_SEED` the seed.
//! The same under garbage collection (`collections_under_kill_9_…`, issue 15):
//! `CTXSTORE_GC_CRASH_CYCLES` (default 6). And with large growing states stored as chunks
//! (`growing_chunked_states_…`, issue 16): `CTXSTORE_CHUNK_CRASH_CYCLES` (default 6).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::{BlobHash, Client, ClientConfig, VerifyPayloads};
use ctxstore_protocol::{
    AdminRequest, AdminResponse, AppendsRequest, AppendsResponse, ContextRef, ContextsRequest,
    ContextsResponse, ExtrasWire, KvRequest, KvResponse, ParentWire, PayloadSpec, ReadsRequest,
    ReadsResponse, Request, Response, RetentionRequest, TurnSpec,
};
use ctxstore_protocol::{admin, appends, contexts, reads, retention};

mod common;

use common::{LOADGEN, server_binary};
use ctxstore_testsupport::{ServerLaunch, TestServer, noise};

#[derive(Clone, Debug)]
struct Acked {
    context: u64,
    turn: u64,
    parent: u64,
    depth: u32,
    hash: String,
}

/// Server flags of the crash loops under garbage collection: a round every 200 ms, every pack
/// with a tenth dead compacted, `turns.log` compacted whenever a collected record can go, no
/// rate limit.
const GC_EVERY_200_MS: [&str; 8] = [
    "--gc-interval",
    "200ms",
    "--gc-pack-dead-percent",
    "10",
    "--gc-log-dead-bytes-min",
    "0",
    "--gc-rate-max",
    "off",
];

/// A setting of the harness from the environment (cycles, seed), else `default`.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// The runtime the harness's clients run on.
fn test_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn start_server(data: &Path) -> (TestServer, String) {
    start_server_with(data, &[])
}

/// A server on `data` (after a crash, recovery must succeed: 60 s to come up).
fn start_server_with(data: &Path, flags: &[&str]) -> (TestServer, String) {
    start_server_env(data, flags, &[])
}

/// `start_server_with`, the server's environment extended by `env` (the AWS_* variables).
fn start_server_env(data: &Path, flags: &[&str], env: &[(String, String)]) -> (TestServer, String) {
    let server = ServerLaunch::new(server_binary())
        .data(data)
        .flags(flags)
        .envs(env)
        .ready_timeout(Duration::from_secs(60))
        .start();
    let addr = server.addr.clone();
    (server, addr)
}

/// SIGTERM, and the server must exit cleanly.
fn stop(server: &mut TestServer) {
    if let Err(error) = server.stop(Duration::from_secs(300)) {
        panic!("{error}");
    }
}

/// `ctxstore-server verify` of a stopped store must pass; its report.
fn verify(data: &Path) -> String {
    let output = Command::new(server_binary())
        .arg("verify")
        .arg("--data")
        .arg(data)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{report}");
    report
}

/// The load of the collection and backup cycles: 4 connections over 8 contexts appending
/// 4 KiB payloads (a fifth of them duplicates) among forks and reads, for `run_ms`, every
/// acknowledgement in `log`.
fn spawn_mixed_load(addr: &str, run_ms: u64, seed: u64, log: &Path) -> std::process::Child {
    Command::new(LOADGEN)
        .args(["--addr", addr, "--duration", &format!("{run_ms}ms")])
        .args(["--warmup", "0s", "--connections", "4", "--contexts", "8"])
        .args(["--mix", "append=90,fork=5,get_last=5"])
        .args(["--payload-bytes", "4096", "--dup-ratio", "0.2"])
        .args(["--read-turns", "8", "--quiet", "--seed", &seed.to_string()])
        .arg("--ack-log")
        .arg(log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn kill_9(server: &mut TestServer) {
    server.kill();
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
    let client =
        Client::connect(ClientConfig::new(addr).with_verify_payloads(VerifyPayloads::Always))
            .await
            .unwrap();
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

/// A named context's metadata as acknowledged: its id (None for a create whose answer was
/// lost), tags, key-value entries (key → BLAKE3 of the value, hex), and keyed turns (turn
/// key → TurnID; checked apart, not compared with `observe`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Meta {
    id: Option<u64>,
    tags: BTreeMap<String, String>,
    kv: BTreeMap<Vec<u8>, String>,
    turn_keys: BTreeMap<String, u64>,
}

/// Names → metadata, as the metadata writer saw them acknowledged.
type MetaModel = BTreeMap<String, Meta>;

/// One metadata request and its effect on the model.
#[derive(Clone, Debug)]
enum MetaOp {
    Create {
        name: String,
        tag: (String, String),
    },
    Tag {
        name: String,
        set: (String, String),
        remove: String,
    },
    KvPut {
        name: String,
        entries: Vec<(Vec<u8>, Bytes)>,
    },
    KvDelete {
        name: String,
        key: Vec<u8>,
    },
    Clone {
        source: String,
        name: String,
    },
    KeyedAppend {
        name: String,
        key: String,
    },
    /// Issue 15: the name is NOT_FOUND from then on (its clones keep what they inherited).
    Delete {
        name: String,
    },
}

impl MetaOp {
    fn request(&self) -> Request {
        let by_name = |name: &String| ContextRef::Name(name.clone());
        match self {
            MetaOp::Create { name, tag } => {
                Request::Contexts(ContextsRequest::CtxOpen(contexts::CtxOpen {
                    base_turn_id: 0,
                    get_or_create: false,
                    clone_from: None,
                    name: Some(name.clone()),
                    tags: vec![tag.clone()],
                }))
            }
            MetaOp::Tag { name, set, remove } => {
                Request::Contexts(ContextsRequest::CtxTag(contexts::CtxTag {
                    context: by_name(name),
                    expected_head: None,
                    set: vec![set.clone()],
                    remove: vec![remove.clone()],
                }))
            }
            MetaOp::KvPut { name, entries } => {
                Request::Kv(KvRequest::KvPut(ctxstore_protocol::kv::KvPut {
                    context: by_name(name),
                    if_absent: false,
                    entries: entries
                        .iter()
                        .map(|(key, value)| (Bytes::from(key.clone()), value.clone()))
                        .collect(),
                }))
            }
            MetaOp::KvDelete { name, key } => {
                Request::Kv(KvRequest::KvDelete(ctxstore_protocol::kv::KvDelete {
                    context: by_name(name),
                    keys: vec![Bytes::from(key.clone())],
                }))
            }
            MetaOp::Clone { source, name } => {
                Request::Contexts(ContextsRequest::CtxOpen(contexts::CtxOpen {
                    base_turn_id: 0,
                    get_or_create: false,
                    clone_from: Some(by_name(source)),
                    name: Some(name.clone()),
                    tags: vec![],
                }))
            }
            MetaOp::KeyedAppend { name, key } => {
                Request::Appends(AppendsRequest::AppendTurns(appends::AppendTurns {
                    context: by_name(name),
                    expected_head: None,
                    turns: vec![TurnSpec {
                        parent: ParentWire::Head,
                        type_tag: 3,
                        codec: 0,
                        summary: false,
                        extras: ExtrasWire {
                            key: Bytes::from(key.clone()),
                            labels: vec![("kind".into(), "checkpoint".into())],
                            links: vec![],
                        },
                        payload: PayloadSpec::Bytes(Bytes::from(format!("checkpoint {key}"))),
                    }],
                }))
            }
            MetaOp::Delete { name } => {
                Request::Retention(RetentionRequest::CtxDelete(retention::CtxDelete {
                    context: by_name(name),
                }))
            }
        }
    }

    /// The model after this op; `new_id` is the created context's id when known.
    fn apply(&self, model: &mut MetaModel, new_id: Option<u64>) {
        match self {
            MetaOp::Create { name, tag } => {
                let mut meta = Meta {
                    id: new_id,
                    ..Meta::default()
                };
                meta.tags.insert(tag.0.clone(), tag.1.clone());
                model.insert(name.clone(), meta);
            }
            MetaOp::Tag { name, set, remove } => {
                let tags = &mut model.get_mut(name).unwrap().tags;
                tags.insert(set.0.clone(), set.1.clone());
                tags.remove(remove);
            }
            MetaOp::KvPut { name, entries } => {
                let kv = &mut model.get_mut(name).unwrap().kv;
                for (key, value) in entries {
                    kv.insert(key.clone(), blake3::hash(value).to_hex().to_string());
                }
            }
            MetaOp::KvDelete { name, key } => {
                model.get_mut(name).unwrap().kv.remove(key);
            }
            MetaOp::Clone { source, name } => {
                let mut meta = model[source].clone();
                meta.id = new_id;
                // A clone inherits its source's keyed turns (found through it by key).
                model.insert(name.clone(), meta);
            }
            MetaOp::Delete { name } => {
                model.remove(name);
            }
            MetaOp::KeyedAppend { name, key } => {
                if let Some(turn_id) = new_id {
                    model
                        .get_mut(name)
                        .unwrap()
                        .turn_keys
                        .insert(key.clone(), turn_id);
                }
            }
        }
    }
}

/// Sends random metadata requests one at a time until one fails (the kill); answers the ops
/// acknowledged (with the created context's id) and the one left in flight.
async fn write_metadata(
    addr: String,
    cycle: usize,
    mut model: MetaModel,
    seed: u64,
) -> (MetaModel, Option<MetaOp>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let Ok(client) =
        Client::connect(ClientConfig::new(addr).with_verify_payloads(VerifyPayloads::Always)).await
    else {
        return (model, None);
    };
    for index in 0.. {
        let names: Vec<String> = model.keys().cloned().collect();
        let pick = |rng: &mut fastrand::Rng| names[rng.usize(..names.len())].clone();
        let new_name = format!("crash-{cycle}-{index}");
        let op = match rng.u8(..11) {
            _ if names.is_empty() => MetaOp::Create {
                name: new_name,
                tag: ("status".into(), "idle".into()),
            },
            0 | 1 => MetaOp::Create {
                name: new_name,
                tag: ("status".into(), "idle".into()),
            },
            2 | 3 => {
                let set = rng.u8(..4);
                MetaOp::Tag {
                    name: pick(&mut rng),
                    set: (format!("k{set}"), format!("v{index}")),
                    remove: format!("k{}", (set + rng.u8(1..4)) % 4),
                }
            }
            4..=6 => MetaOp::KvPut {
                name: pick(&mut rng),
                entries: (0..rng.usize(1..4))
                    .map(|_| {
                        let key = format!("w:{}", rng.u8(..6)).into_bytes();
                        let value = Bytes::from(format!("value {index} {}", rng.u64(..)));
                        (key, value)
                    })
                    .collect(),
            },
            7 => MetaOp::KvDelete {
                name: pick(&mut rng),
                key: format!("w:{}", rng.u8(..6)).into_bytes(),
            },
            8 => MetaOp::KeyedAppend {
                name: pick(&mut rng),
                key: format!("cp-{cycle}-{index}"),
            },
            9 => MetaOp::Clone {
                source: pick(&mut rng),
                name: new_name,
            },
            _ => MetaOp::Delete {
                name: pick(&mut rng),
            },
        };
        match client.request(op.request()).await {
            Ok(Response::Contexts(ContextsResponse::Opened(contexts::Opened { info, .. }))) => {
                op.apply(&mut model, Some(info.head.context_id))
            }
            Ok(Response::Appends(AppendsResponse::AppendedTurns(appends::AppendedTurns {
                turns,
            }))) => {
                assert!(!turns[0].existing, "{op:?}: a new key was there already");
                op.apply(&mut model, Some(turns[0].turn.turn_id));
            }
            Ok(_) => op.apply(&mut model, None),
            Err(error @ ctxstore_client::ClientError::Server { .. }) => {
                panic!("{op:?} refused: {error}")
            }
            // The server was killed: this op may or may not have landed.
            Err(_) => return (model, Some(op)),
        }
    }
    unreachable!("the loop returns")
}

/// The metadata of `names` as the restarted server has it (`None` for a name it lacks).
async fn observe(client: &Client, names: &[String]) -> BTreeMap<String, Option<Meta>> {
    let mut observed = BTreeMap::new();
    for name in names {
        let context = ContextRef::Name(name.clone());
        let info = match client
            .request(Request::Contexts(ContextsRequest::CtxShow(
                contexts::CtxShow {
                    context: context.clone(),
                },
            )))
            .await
        {
            Ok(Response::Contexts(ContextsResponse::ContextInfo(contexts::ContextInfo {
                info,
                ..
            }))) => info,
            Err(ctxstore_client::ClientError::Server {
                code: ctxstore_client::ErrorCode::NotFound,
                ..
            }) => {
                observed.insert(name.clone(), None);
                continue;
            }
            other => panic!("CTX_SHOW {name}: {other:?}"),
        };
        let mut meta = Meta {
            id: Some(info.head.context_id),
            tags: info.tags.into_iter().collect(),
            kv: BTreeMap::new(),
            turn_keys: BTreeMap::new(),
        };
        let list = Request::Kv(KvRequest::KvList(ctxstore_protocol::kv::KvList {
            context: context.clone(),
            prefix: Bytes::new(),
            after: Bytes::new(),
            limit: 1000,
        }));
        let Ok(Response::Kv(KvResponse::KvListed(ctxstore_protocol::kv::KvListed { items }))) =
            client.request(list).await
        else {
            panic!("KV_LIST {name}");
        };
        for item in items {
            let get = Request::Kv(KvRequest::KvGet(ctxstore_protocol::kv::KvGet {
                context: context.clone(),
                key: item.key.clone(),
                read_flags: 0,
            }));
            let Ok(Response::Kv(KvResponse::KvValue(ctxstore_protocol::kv::KvValue {
                value_hash,
                payload,
            }))) = client.request(get).await
            else {
                panic!("KV_GET {name}");
            };
            assert_eq!(value_hash, item.value_hash);
            assert_eq!(
                blake3::hash(&payload.data).as_bytes(),
                &value_hash.0,
                "{name}: value bytes"
            );
            meta.kv.insert(
                item.key.to_vec(),
                blake3::Hash::from(value_hash.0).to_hex().to_string(),
            );
        }
        observed.insert(name.clone(), Some(meta));
    }
    observed
}

/// Every acknowledged name, tag and key-value entry is on the restarted server; the op in
/// flight at the kill landed whole or not at all. Answers the model to go on with.
async fn check_metadata(
    addr: &str,
    model: MetaModel,
    in_flight: Option<MetaOp>,
) -> (MetaModel, usize) {
    let client =
        Client::connect(ClientConfig::new(addr).with_verify_payloads(VerifyPayloads::Always))
            .await
            .unwrap();
    let mut landed = model.clone();
    if let Some(op) = &in_flight {
        op.apply(&mut landed, None);
    }
    // Both sides' names: a delete in flight leaves a name in one of them only.
    let names: Vec<String> = landed
        .keys()
        .chain(model.keys())
        .cloned()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let observed = observe(&client, &names).await;
    // Ids of contexts whose create was in flight are unknown: compare them without the id.
    let matches = |expected: &MetaModel| {
        names
            .iter()
            .all(|name| match (expected.get(name), &observed[name]) {
                (None, None) => true,
                (Some(want), Some(got)) => {
                    want.tags == got.tags
                        && want.kv == got.kv
                        && want.id.is_none_or(|id| Some(id) == got.id)
                }
                _ => false,
            })
    };
    let next = if matches(&model) {
        model
    } else if in_flight.is_some() && matches(&landed) {
        landed
    } else {
        panic!(
            "metadata differs from what was acknowledged\nacknowledged: {model:#?}\nin flight: {in_flight:#?}\nobserved: {observed:#?}"
        );
    };
    // Learn the ids of contexts created by an op whose answer was lost.
    let mut next: MetaModel = next
        .into_iter()
        .map(|(name, mut meta)| {
            meta.id = observed[&name].as_ref().and_then(|got| got.id).or(meta.id);
            (name, meta)
        })
        .collect();
    // Every acknowledged key names its turn (in its context, and through clones).
    let mut keys_checked = 0;
    for (name, meta) in &next {
        for (key, turn_id) in &meta.turn_keys {
            assert_eq!(
                turn_by_key(&client, name, key).await,
                Some(*turn_id),
                "{name} {key}"
            );
            keys_checked += 1;
        }
    }
    // The keyed append in flight at the kill, retried: it lands exactly once.
    if let Some(op @ MetaOp::KeyedAppend { name, key }) = &in_flight
        && next.contains_key(name)
    {
        let found_before = turn_by_key(&client, name, key).await;
        let Ok(Response::Appends(AppendsResponse::AppendedTurns(appends::AppendedTurns { turns }))) =
            client.request(op.request()).await
        else {
            panic!("retrying {op:?}");
        };
        let retried = turns[0];
        assert_eq!(retried.existing, found_before.is_some(), "{op:?}");
        if let Some(turn_id) = found_before {
            assert_eq!(retried.turn.turn_id, turn_id);
        }
        assert_eq!(
            turn_by_key(&client, name, key).await,
            Some(retried.turn.turn_id)
        );
        next.get_mut(name)
            .unwrap()
            .turn_keys
            .insert(key.clone(), retried.turn.turn_id);
        keys_checked += 1;
    }
    (next, names.len() + keys_checked)
}

async fn turn_by_key(client: &Client, name: &str, key: &str) -> Option<u64> {
    let request = Request::Reads(ReadsRequest::GetTurnByKey(reads::GetTurnByKey {
        context: ContextRef::Name(name.into()),
        key: Bytes::from(key.to_string()),
    }));
    match client.request(request).await {
        Ok(Response::Reads(ReadsResponse::TurnInfo(reads::TurnInfo { turn, .. }))) => {
            Some(turn.turn_id)
        }
        Err(ctxstore_client::ClientError::Server {
            code: ctxstore_client::ErrorCode::NotFound,
            ..
        }) => None,
        other => panic!("GET_TURN_BY_KEY {name} {key}: {other:?}"),
    }
}

#[test]
fn kill_9_under_load_loses_no_acknowledged_append() {
    let cycles: usize = env_or("CTXSTORE_CRASH_CYCLES", 10);
    let seed: u64 = env_or("CTXSTORE_CRASH_SEED", 0x5eed);
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let runtime = test_runtime();
    let mut acked: Vec<Acked> = Vec::new();
    let mut checked = 0;
    let mut meta_model = MetaModel::new();
    let mut meta_checked = 0;
    for cycle in 0..cycles {
        let (mut server, addr) = start_server(&data);
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
        let writer = runtime.spawn(write_metadata(
            addr.clone(),
            cycle,
            std::mem::take(&mut meta_model),
            seed ^ cycle as u64,
        ));
        // Kill the server at a random instant while the appends are flowing.
        std::thread::sleep(Duration::from_millis(rng.u64(150..run_ms + 50)));
        kill_9(&mut server);
        let _ = loadgen.wait();
        let (model, in_flight) = runtime.block_on(writer).unwrap();
        let fresh = read_acks(&log);
        assert!(
            !fresh.is_empty() || cycle > 0,
            "cycle {cycle}: no append was acknowledged"
        );
        acked.extend(fresh);

        let (mut server, addr) = start_server(&data);
        checked += runtime.block_on(check(&addr, &acked));
        let (model, names) = runtime.block_on(check_metadata(&addr, model, in_flight));
        meta_model = model;
        meta_checked += names;
        kill_9(&mut server);
    }

    let (mut server, _) = start_server(&data);
    stop(&mut server);
    let report = verify(&data);
    assert!(
        meta_model.len() > 1,
        "the metadata writer made too few contexts to test"
    );
    println!(
        "crash harness: {cycles} cycles, {} acknowledged appends, {checked} checks against restarted servers, 0 lost; \
         {} named contexts, {meta_checked} metadata checks, 0 differences\n{report}",
        acked.len(),
        meta_model.len()
    );
}

/// Online backup (issue 18 item 5) under the same load: every append acknowledged before
/// BACKUP was sent is in the copy, the copy passes `verify`, and a server starts on it.
#[test]
fn a_backup_under_load_holds_every_append_acknowledged_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let copy = dir.path().join("backup");
    let runtime = test_runtime();
    let (mut server, addr) = start_server(&data);
    let log = dir.path().join("acks.jsonl");
    let mut loadgen = Command::new(LOADGEN)
        .args(["--addr", &addr, "--duration", "3s", "--warmup", "0s"])
        .args(["--connections", "6", "--contexts", "12"])
        .args(["--mix", "append=85,fork=10,get_last=5"])
        .args(["--payload-bytes", "4096", "--large-every", "40"])
        .args(["--dup-ratio", "0.2", "--read-turns", "8", "--quiet"])
        .arg("--ack-log")
        .arg(&log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    // Lines in the log now were acknowledged before the backup is asked for.
    let before = read_acks(&log);
    assert!(!before.is_empty(), "no append was acknowledged");
    let report = runtime.block_on(async {
        let client = Client::connect(
            ClientConfig::new(addr.clone()).with_verify_payloads(VerifyPayloads::Always),
        )
        .await
        .unwrap();
        let request = Request::Admin(AdminRequest::Backup(admin::Backup {
            dir: copy.display().to_string(),
        }));
        match client.request(request).await {
            Ok(Response::Admin(AdminResponse::BackedUp(report))) => report,
            other => panic!("BACKUP: {other:?}"),
        }
    });
    assert_eq!(report.dir, copy.display().to_string());
    assert!(report.turns >= before.len() as u64, "{report:?}");
    let _ = loadgen.wait();
    stop(&mut server);
    verify(&copy);
    let (mut server, addr) = start_server(&copy);
    let checked = runtime.block_on(check(&addr, &before));
    kill_9(&mut server);
    println!(
        "backup under load: {} appends acknowledged before it, all in the copy ({checked} checks); \
         copy of {} turns, {} blobs, {} bytes in {} ms",
        before.len(),
        report.turns,
        report.blobs,
        report.bytes,
        report.duration_ms
    );
}

/// Collections on a 200 ms schedule (packs ≥ 10% dead compacted, no rate limit) while the
/// load generator appends to contexts nobody deletes and a churn task makes contexts, appends
/// to them (unique payloads and payloads from a small pool, so dedup hits condemned blobs) and
/// deletes them, keeping some pool payloads in a keeper context; kill -9 at random instants.
/// After every restart every acknowledged live append is intact; at the end `verify` passes
/// and, after a collection, no more than 10% of the packs is garbage (disk use converges).
#[test]
fn collections_under_kill_9_keep_every_live_acknowledged_turn() {
    let cycles: usize = env_or("CTXSTORE_GC_CRASH_CYCLES", 6);
    let seed: u64 = env_or("CTXSTORE_CRASH_SEED", 0x6c);
    let gc_flags = GC_EVERY_200_MS;
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let runtime = test_runtime();
    let mut acked: Vec<Acked> = Vec::new();
    let mut kept: Vec<(u64, String)> = Vec::new();
    let mut checked = 0;
    let mut churned = 0;
    for cycle in 0..cycles {
        let (mut server, addr) = start_server_with(&data, &gc_flags);
        let log = dir.path().join(format!("gc-acks-{cycle}.jsonl"));
        let run_ms = rng.u64(800..2500);
        let mut loadgen = spawn_mixed_load(&addr, run_ms, seed + cycle as u64, &log);
        let churn = runtime.spawn(churn(addr.clone(), seed ^ (cycle as u64) << 8));
        std::thread::sleep(Duration::from_millis(rng.u64(300..run_ms + 50)));
        kill_9(&mut server);
        let _ = loadgen.wait();
        let (contexts, keeper_acks) = runtime.block_on(churn).unwrap();
        churned += contexts;
        kept.extend(keeper_acks);
        acked.extend(read_acks(&log));

        let (mut server, addr) = start_server_with(&data, &gc_flags);
        checked += runtime.block_on(check(&addr, &acked));
        runtime.block_on(async {
            let client = Client::connect(
                ClientConfig::new(&addr).with_verify_payloads(VerifyPayloads::Always),
            )
            .await
            .unwrap();
            for (turn_id, hash) in &kept {
                let turn = client.turn(*turn_id).await.unwrap_or_else(|error| {
                    panic!("kept turn {turn_id} lost: {error}");
                });
                assert_eq!(&turn.payload_hash.to_hex(), hash, "turn {turn_id}");
                client
                    .blob(BlobHash::from_hex(hash).unwrap())
                    .await
                    .unwrap();
            }
        });
        kill_9(&mut server);
    }
    assert!(churned > 0, "the churn made no context to collect");

    let (mut server, addr) = start_server_with(&data, &gc_flags);
    let stats = runtime.block_on(async {
        let client =
            Client::connect(ClientConfig::new(&addr).with_verify_payloads(VerifyPayloads::Always))
                .await
                .unwrap();
        client.gc().await.unwrap();
        client.stats().await.unwrap()
    });
    let live = stats.live_bytes.unwrap();
    let dead = stats.dead_bytes.unwrap();
    assert!(stats.gc_runs.unwrap() >= 1);
    assert!(
        dead * 100 <= 10 * (live + dead),
        "after a collection {dead} of {} pack bytes are garbage",
        live + dead
    );
    stop(&mut server);
    let report = verify(&data);
    println!(
        "gc crash harness: {cycles} cycles, {} acknowledged appends + {} kept churn turns, \
         {checked} checks, 0 lost; {churned} contexts churned; live {live} B, garbage {dead} B \
         after a collection\n{report}",
        acked.len(),
        kept.len()
    );
}

/// Small packs (sealed every 256 KiB, so that backups hard-link some) for the loop below.
const SMALL_PACKS: [&str; 8] = [
    "--pack-bytes-max",
    "262144",
    "--shard-batch-bytes-max",
    "262144",
    "--blob-bytes-max",
    "131072",
    "--frame-bytes-max",
    "262144",
];

/// Issue 29 item 1: online backups written to the data directory's own file system (so sealed
/// packs are hard-linked, not copied) under collections every 200 ms, churn and kill -9. Every
/// cycle takes a backup mid-load; every other cycle also serves the newest backup with the same
/// collections and churn, then kills it. After every restart every acknowledged append of the
/// store is intact, and every backup taken so far passes `verify` (a collection on either side
/// never empties the other's packs); at the end a server on each backup serves every append
/// acknowledged before that backup was asked for. `CTXSTORE_BACKUP_CRASH_CYCLES` (default 5).
#[test]
fn backups_on_the_data_file_system_survive_collections_and_kill_9_on_either_side() {
    let cycles: usize = env_or("CTXSTORE_BACKUP_CRASH_CYCLES", 5);
    let seed: u64 = env_or("CTXSTORE_CRASH_SEED", 0xb4);
    let flags: Vec<&str> = GC_EVERY_200_MS
        .iter()
        .chain(&SMALL_PACKS)
        .copied()
        .collect();
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let runtime = test_runtime();
    let mut acked: Vec<Acked> = Vec::new();
    let mut backups: Vec<(std::path::PathBuf, Vec<Acked>)> = Vec::new();
    let mut linked_bytes = 0;
    let mut checked = 0;
    for cycle in 0..cycles {
        let (mut server, addr) = start_server_with(&data, &flags);
        let log = dir.path().join(format!("backup-acks-{cycle}.jsonl"));
        let run_ms = rng.u64(1500..2500);
        let mut loadgen = spawn_mixed_load(&addr, run_ms, seed + cycle as u64, &log);
        let churning = runtime.spawn(churn(addr.clone(), seed ^ (cycle as u64) << 8));
        std::thread::sleep(Duration::from_millis(rng.u64(400..900)));
        // Acknowledged before the backup is asked for: in the copy.
        let mut before = acked.clone();
        before.extend(read_acks(&log));
        let copy = dir.path().join(format!("backup-{cycle}"));
        let report = runtime.block_on(async {
            let client = Client::connect(ClientConfig::new(addr.clone()))
                .await
                .unwrap();
            let request = Request::Admin(AdminRequest::Backup(admin::Backup {
                dir: copy.display().to_string(),
            }));
            match client.request(request).await {
                Ok(Response::Admin(AdminResponse::BackedUp(report))) => report,
                other => panic!("BACKUP: {other:?}"),
            }
        });
        linked_bytes += report.linked_bytes;
        backups.push((copy, before));
        std::thread::sleep(Duration::from_millis(
            rng.u64(200..run_ms.saturating_sub(800)),
        ));
        kill_9(&mut server);
        let _ = loadgen.wait();
        let _ = runtime.block_on(churning);
        acked.extend(read_acks(&log));

        if cycle % 2 == 1 {
            // The README's "serve the copy", with the same collections and churn, killed.
            let (newest, _) = backups.last().unwrap();
            let (mut served, addr) = start_server_with(newest, &flags);
            let churning = runtime.spawn(churn(addr, seed ^ 0xbac));
            std::thread::sleep(Duration::from_millis(rng.u64(600..1200)));
            kill_9(&mut served);
            let _ = runtime.block_on(churning);
        }
        let (mut server, addr) = start_server_with(&data, &flags);
        checked += runtime.block_on(check(&addr, &acked));
        kill_9(&mut server);
        for (copy, _) in &backups {
            verify(copy);
        }
    }
    assert!(
        linked_bytes > 0,
        "no backup hard-linked a sealed pack: the loop tested copies only"
    );
    let (mut server, _) = start_server_with(&data, &flags);
    stop(&mut server);
    let report = verify(&data);
    for (copy, before) in &backups {
        let (mut server, addr) = start_server_with(copy, &[]);
        checked += runtime.block_on(check(&addr, before));
        stop(&mut server);
    }
    println!(
        "backup crash harness: {cycles} cycles, {} backups on the data file system ({linked_bytes} \
         bytes hard-linked), {} acknowledged appends, {checked} checks, 0 lost\n{report}",
        backups.len(),
        acked.len()
    );
}

/// Issue 31, the RPO: the load generator appends at a fixed rate while the server ships to its
/// replica every second; at a random instant the server is killed (-9) and its data directory
/// deleted (the host is lost); the store restored from the replica holds every append
/// acknowledged 2 s or more before the kill, with its exact payload, and verifies. On SeaweedFS
/// when `.ci/run` names it, else on a `file://` replica. `CTXSTORE_RPO_CYCLES` (default 3; the
/// benchmark runs 10 of 5 minutes each, docs/benchmarks.md).
#[test]
fn the_replica_holds_every_append_acknowledged_two_seconds_before_the_host_was_lost() {
    let cycles: usize = env_or("CTXSTORE_RPO_CYCLES", 3);
    let seed: u64 = env_or("CTXSTORE_CRASH_SEED", 0x31);
    let run_s: u64 = env_or("CTXSTORE_RPO_SECONDS", 8);
    let rate: u64 = env_or("CTXSTORE_RPO_RATE", 500);
    let mut rng = fastrand::Rng::with_seed(seed);
    let runtime = test_runtime();
    let mut checked_total = 0;
    for cycle in 0..cycles {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let (url, env) = match std::env::var("CTXSTORE_S3_TEST_ENDPOINT") {
            Ok(endpoint) => {
                let bucket = std::env::var("CTXSTORE_S3_TEST_BUCKET")
                    .unwrap_or_else(|_| "ctxstore-test".into());
                let prefix = format!("rpo-{}-{cycle}-{}", std::process::id(), rng.u64(..));
                (
                    format!("s3://{bucket}/{prefix}"),
                    vec![
                        ("AWS_ENDPOINT".to_string(), endpoint),
                        ("AWS_ALLOW_HTTP".to_string(), "true".to_string()),
                        ("AWS_REGION".to_string(), "us-east-1".to_string()),
                        (
                            "AWS_ACCESS_KEY_ID".to_string(),
                            std::env::var("AWS_ACCESS_KEY_ID")
                                .unwrap_or_else(|_| "ctxstore".into()),
                        ),
                        (
                            "AWS_SECRET_ACCESS_KEY".to_string(),
                            std::env::var("AWS_SECRET_ACCESS_KEY")
                                .unwrap_or_else(|_| "ctxstore".into()),
                        ),
                    ],
                )
            }
            Err(_) => (
                format!("file://{}", dir.path().join("replica").display()),
                Vec::new(),
            ),
        };
        let flags = ["--replicate-to", url.as_str(), "--replicate-interval", "1s"];
        let (mut server, addr) = start_server_env(&data, &flags, &env);
        let log = dir.path().join("acks.jsonl");
        let mut loadgen = Command::new(LOADGEN)
            .args([
                "--addr",
                &addr,
                "--duration",
                &format!("{run_s}s"),
                "--warmup",
                "0s",
            ])
            .args([
                "--rate",
                &rate.to_string(),
                "--connections",
                "4",
                "--contexts",
                "16",
            ])
            .args(["--mix", "append=100", "--payload-bytes", "4096", "--quiet"])
            .args(["--seed", &(seed + cycle as u64).to_string(), "--ack-log"])
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // (when, acks in the log by then): lines appear after their acknowledgement, so this
        // counts at most what was acknowledged by `when`.
        let started = Instant::now();
        let kill_after = Duration::from_millis(rng.u64(3000..(run_s * 1000 - 500)));
        let mut seen: Vec<(Instant, usize)> = Vec::new();
        while started.elapsed() < kill_after {
            seen.push((Instant::now(), read_acks(&log).len()));
            std::thread::sleep(Duration::from_millis(50));
        }
        kill_9(&mut server);
        let killed = Instant::now();
        let _ = loadgen.kill();
        let _ = loadgen.wait();
        std::fs::remove_dir_all(&data).unwrap();
        let before = seen
            .iter()
            .rev()
            .find(|(when, _)| *when + Duration::from_secs(2) <= killed)
            .map_or(0, |(_, count)| *count);
        let acked = read_acks(&log);
        let must = &acked[..before.min(acked.len())];
        assert!(
            !must.is_empty() || cycle > 0,
            "no append was acknowledged 2 s before the kill"
        );

        let restored = dir.path().join("restored");
        let output = Command::new(server_binary())
            .args(["restore", "--from", &url, "--to"])
            .arg(&restored)
            .envs(
                env.iter()
                    .map(|(key, value)| (key.as_str(), value.as_str())),
            )
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "restore: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let (mut server, addr) = start_server(&restored);
        checked_total += runtime.block_on(check(&addr, must));
        stop(&mut server);
        verify(&restored);
        println!(
            "rpo cycle {cycle}: killed after {} ms, {} acknowledged, {} of them 2 s before the \
             kill, all restored",
            kill_after.as_millis(),
            acked.len(),
            must.len()
        );
    }
    println!("rpo harness: {cycles} cycles, {checked_total} checks, 0 lost");
}

/// Issue 31, point in time: under open-loop load (appends and forks), the server ships every
/// 200 ms; then restores at random records (`--at-seq N`) each hold exactly
/// the acknowledged turns with ids up to N — every one of them, with its payload, and none
/// after. `CTXSTORE_PIT_POINTS` (default 4; the benchmark runs 20, docs/benchmarks.md).
#[test]
fn restores_at_random_records_hold_exactly_what_was_acknowledged_up_to_them() {
    let points: usize = env_or("CTXSTORE_PIT_POINTS", 4);
    let seed: u64 = env_or("CTXSTORE_CRASH_SEED", 0x317);
    let mut rng = fastrand::Rng::with_seed(seed);
    let runtime = test_runtime();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let url = format!("file://{}", dir.path().join("replica").display());
    let flags = [
        "--replicate-to",
        url.as_str(),
        "--replicate-interval",
        "200ms",
    ];
    let (mut server, addr) = start_server_with(&data, &flags);
    let log = dir.path().join("acks.jsonl");
    let status = Command::new(LOADGEN)
        .args(["--addr", &addr, "--duration", "5s", "--warmup", "0s"])
        .args(["--rate", "400", "--connections", "4", "--contexts", "8"])
        .args([
            "--mix",
            "append=90,fork=10",
            "--payload-bytes",
            "4096",
            "--quiet",
        ])
        .args(["--seed", &seed.to_string(), "--ack-log"])
        .arg(&log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    // Everything shipped: SIGTERM ships once more.
    stop(&mut server);
    let acked = read_acks(&log);
    assert!(acked.len() > 100, "{} acknowledged", acked.len());
    let mut ids: Vec<u64> = acked.iter().map(|ack| ack.turn).collect();
    ids.sort_unstable();
    let mut checked = 0;
    for point in 0..points {
        let record = ids[rng.usize(..ids.len())];
        let target = dir.path().join(format!("at-{point}"));
        let output = Command::new(server_binary())
            .args(["restore", "--from", &url, "--to"])
            .arg(&target)
            .args(["--at-seq", &record.to_string()])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "restore --at-seq {record}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let (kept, after): (Vec<Acked>, Vec<Acked>) =
            acked.iter().cloned().partition(|ack| ack.turn <= record);
        let (mut restored, addr) = start_server(&target);
        checked += runtime.block_on(check(&addr, &kept));
        // Nothing after the point: every later acknowledged turn is NOT_FOUND.
        runtime.block_on(async {
            let client = Client::connect(ClientConfig::new(&addr)).await.unwrap();
            for ack in &after {
                let error = client.turn(ack.turn).await.unwrap_err();
                assert_eq!(
                    error.code(),
                    Some(ctxstore_protocol::ErrorCode::NotFound),
                    "turn {} after point {record}",
                    ack.turn
                );
            }
        });
        stop(&mut restored);
        verify(&target);
        println!(
            "point {point}: record {record}: {} acknowledged turns up to it, all there; {} after, none there",
            kept.len(),
            after.len()
        );
    }
    println!("pit harness: {points} points, {checked} checks");
}

/// Makes contexts, appends to them, deletes them, until the server goes away. Every few
/// rounds a pool payload also goes to a keeper context (acknowledged: it must survive).
/// Returns the contexts deleted and the keeper's acknowledged turns (TurnID, hash).
async fn churn(addr: String, seed: u64) -> (usize, Vec<(u64, String)>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let pool: Vec<Bytes> = (0..16)
        .map(|i| Bytes::from(noise(0xC0FFEE + i, 6 << 10)))
        .collect();
    let mut kept = Vec::new();
    let Ok(client) =
        Client::connect(ClientConfig::new(addr).with_verify_payloads(VerifyPayloads::Always)).await
    else {
        return (0, kept);
    };
    let Ok(keeper) = client.create_context().await else {
        return (0, kept);
    };
    let mut deleted = 0;
    for round in 0u64.. {
        let Ok(context) = client.create_context().await else {
            break;
        };
        for i in 0..6u64 {
            let payload = if i % 2 == 0 {
                pool[rng.usize(..pool.len())].clone()
            } else {
                Bytes::from(noise(seed ^ (round << 8) ^ i, 8 << 10))
            };
            if client
                .append(context.context_id, None, 3, 0, payload)
                .await
                .is_err()
            {
                return (deleted, kept);
            }
        }
        if client.delete_context(context.context_id).await.is_err() {
            break;
        }
        deleted += 1;
        if round % 4 == 3 {
            let payload = pool[rng.usize(..pool.len())].clone();
            match client.append(keeper.context_id, None, 3, 0, payload).await {
                Ok(appended) => {
                    kept.push((appended.turn.turn_id, appended.turn.payload_hash.to_hex()))
                }
                Err(_) => break,
            }
        }
    }
    (deleted, kept)
}

/// Issue 16: agents append growing JSON states (each the previous one plus a message, up to
/// ~150 KB: stored as chunks and delta manifests) while garbage collection runs every 200 ms
/// and a churn appends the same states to contexts it deletes (so chunks are condemned while
/// new manifests dedup against them); kill -9 at random instants. After every restart every
/// acknowledged turn reads back whole (the client checks each payload's BLAKE3) and each
/// agent's head is at or after its last acknowledged turn; at the end `verify` passes.
#[test]
fn growing_chunked_states_under_kill_9_lose_nothing_acknowledged() {
    let cycles: usize = env_or("CTXSTORE_CHUNK_CRASH_CYCLES", 6);
    let seed: u64 = env_or("CTXSTORE_CRASH_SEED", 0x16);
    let flags = GC_EVERY_200_MS;
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let runtime = test_runtime();
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Acked>::new()));
    let mut blobs = 0;
    for cycle in 0..cycles as u64 {
        let (mut server, addr) = start_server_with(&data, &flags);
        let mut agents = Vec::new();
        for agent in 0..3u64 {
            let (addr, acked) = (addr.clone(), acked.clone());
            // The same agent seed every cycle: new states share their opening with the
            // chunks of states stored (and maybe collected) before the crash.
            let seeds = (seed ^ agent, seed ^ agent ^ (cycle << 40));
            agents.push(runtime.spawn(grow(addr, seeds, acked, agent == 2)));
        }
        std::thread::sleep(Duration::from_millis(rng.u64(400..2000)));
        kill_9(&mut server);
        for agent in agents {
            runtime.block_on(agent).unwrap();
        }

        let (mut server, addr) = start_server_with(&data, &flags);
        let acked_now = acked.lock().unwrap().clone();
        runtime.block_on(check(&addr, &acked_now));
        blobs = runtime.block_on(async {
            let client = Client::connect(
                ClientConfig::new(&addr).with_verify_payloads(VerifyPayloads::Always),
            )
            .await
            .unwrap();
            client.gc().await.unwrap();
            client.stats().await.unwrap().blobs
        });
        kill_9(&mut server);
    }
    let acked = acked.lock().unwrap().clone();
    let (mut server, addr) = start_server_with(&data, &flags);
    let checked = runtime.block_on(check(&addr, &acked));
    stop(&mut server);
    let report = verify(&data);
    println!(
        "chunk crash harness: {cycles} cycles, {} acknowledged growing states, {checked} \
         checks, 0 lost; {blobs} blobs (chunks and manifests)\n{report}",
        acked.len()
    );
}

/// One agent: a new context, then states of its thread appended one after the other (a
/// state is the previous one plus a 600–1,600 byte message) until the server goes away.
/// With `churn`, every 8 states the context is deleted and a new one starts from the first
/// state again (its turns are not recorded: they go with the delete).
async fn grow(
    addr: String,
    (seed, cycle_seed): (u64, u64),
    acked: std::sync::Arc<std::sync::Mutex<Vec<Acked>>>,
    churn: bool,
) {
    let Ok(client) =
        Client::connect(ClientConfig::new(addr).with_verify_payloads(VerifyPayloads::Always)).await
    else {
        return;
    };
    let mut rng = fastrand::Rng::with_seed(cycle_seed);
    // The first 12 messages are the same in every context of this agent (a shared opening:
    // their chunks dedup, also against states stored before the last crash); the rest are new
    // in each context, so most states are new payloads made of old and new chunks.
    let shared: Vec<Vec<u8>> = (0..12u64)
        .map(|step| noise(seed ^ (step << 16), 600 + (step as usize * 97) % 1000))
        .collect();
    'contexts: loop {
        let Ok(context) = client.create_context().await else {
            return;
        };
        let thread = rng.u64(..);
        let mut state = b"{\"messages\":[".to_vec();
        for step in 0..120u64 {
            let message = match shared.get(step as usize) {
                Some(message) => message.clone(),
                None => noise(thread ^ (step << 16), rng.usize(600..1600)),
            };
            if step > 0 {
                state.push(b',');
            }
            state.extend_from_slice(&message);
            let mut payload = state.clone();
            payload.extend_from_slice(b"]}");
            let Ok(appended) = client
                .append(context.context_id, None, 5, 0, Bytes::from(payload))
                .await
            else {
                return;
            };
            if !churn {
                acked.lock().unwrap().push(Acked {
                    context: appended.turn.context_id,
                    turn: appended.turn.turn_id,
                    parent: appended.turn.parent_turn_id,
                    depth: appended.turn.depth,
                    hash: appended.turn.payload_hash.to_hex(),
                });
            } else if step % 8 == 7 {
                if client.delete_context(context.context_id).await.is_err() {
                    return;
                }
                continue 'contexts;
            }
        }
    }
}
