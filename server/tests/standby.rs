//! The standby through the binary (issue 31 item 6): `ctxstore-server --follow URL` restores
//! an empty directory, serves every read from what the primary shipped (appends, forks, names,
//! tags, key-value entries, deletes, chunked payloads, a collection's rounds; vector searches
//! answered as the primary answers them, before and after its restart and its promotion),
//! refuses writes
//! with NOT_PRIMARY (READ_ONLY to protocol versions 1–3) naming the primary, survives kill -9
//! and resumes without restoring again; `ctxstore-server promote` seals the old primary's
//! generation and fences the old primary (it reports `fenced`; only the promoted
//! store ships), the promoted store takes writes and ships them as a new generation, and a
//! restore from the prefix afterwards holds them and verifies clean. REPLICATION_STATS says
//! each side's role: the standby what it applied and the primary it names, the fenced
//! primary why, the promoted one shipping. On a `file://` replica,
//! and on SeaweedFS when `.ci/run` names it (`CTXSTORE_S3_TEST_ENDPOINT`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::{
    ClientConfig, ClientError, ErrorCode, Metric, ReplicationRole, ReplicationState, VectorEntry,
    VectorQuery, blocking,
};
use ctxstore_testsupport::{ServerLaunch, TestServer, verified};

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");
/// How long a standby may take to show what the primary acknowledged (many intervals).
const CATCH_UP: Duration = Duration::from_secs(30);

fn spawn(data: &Path, flags: &[&str], env: &[(String, String)]) -> TestServer {
    ServerLaunch::new(SERVER)
        .data(data)
        .flags(flags)
        .envs(env)
        .keep_log()
        .start()
}

fn client(server: &TestServer) -> blocking::Client {
    blocking::Client::connect(ClientConfig::new(server.addr.clone())).unwrap()
}

fn metrics(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

fn free_addr() -> String {
    // Outside the ephemeral range: nothing else is handed it before the server binds it.
    format!("127.0.0.1:{}", ctxstore_testsupport::fixed_port())
}

/// What a reader sees of some contexts: info (name, tags, head), every turn with its payload's
/// BLAKE3 (of the bytes read), key-value entries' values the same; an error's code where the
/// read is refused.
type Seen = BTreeMap<u64, Result<(String, Vec<(u64, u64, u32, String)>, Vec<String>), String>>;

fn seen(client: &blocking::Client, contexts: &[u64], keys: &[&[u8]]) -> Seen {
    let code = |error: ClientError| format!("{:?}", error.code());
    contexts
        .iter()
        .map(|&context| {
            let read = || -> Result<_, ClientError> {
                let info = client.context_info(context)?;
                let page = client.last(context, 1000, true)?;
                let turns = page
                    .turns
                    .iter()
                    .map(|turn| {
                        (
                            turn.turn_id,
                            turn.parent_turn_id,
                            turn.depth,
                            blake3::hash(turn.payload.as_ref().unwrap())
                                .to_hex()
                                .to_string(),
                        )
                    })
                    .collect();
                let mut values = Vec::new();
                for key in keys {
                    if let Some((_, value)) = client.kv_get(context, Bytes::copy_from_slice(key))? {
                        values.push(blake3::hash(&value).to_hex().to_string());
                    }
                }
                let info = format!(
                    "{:?} {:?} {} {}",
                    info.name, info.tags, info.head_turn_id, info.head_depth
                );
                Ok((info, turns, values))
            };
            (context, read().map_err(code))
        })
        .collect()
}

/// Waits until the standby sees what the primary sees.
fn caught_up(
    primary: &blocking::Client,
    standby: &blocking::Client,
    contexts: &[u64],
    keys: &[&[u8]],
    log: impl Fn() -> String,
) {
    let want = seen(primary, contexts, keys);
    let started = Instant::now();
    loop {
        let got = seen(standby, contexts, keys);
        if got == want {
            return;
        }
        assert!(
            started.elapsed() < CATCH_UP,
            "the standby did not catch up in {CATCH_UP:?}\nwant {want:?}\ngot {got:?}\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn payload(seed: u32, len: usize) -> Bytes {
    // Incompressible, and different per seed.
    ctxstore_testsupport::noise(u64::from(seed), len).into()
}

fn a_standby_follows_and_is_promoted(url: &str, env: &[(&str, &str)]) {
    let root = tempfile::tempdir().unwrap();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .chain([("RUST_LOG".to_string(), "info".to_string())])
        .collect();
    let primary_metrics = free_addr();
    let primary_data = root.path().join("primary");
    let primary_flags = [
        "--replicate-to",
        url,
        "--replicate-interval",
        "100ms",
        "--gc-interval",
        "off",
        "--metrics-listen",
        primary_metrics.as_str(),
    ];
    let mut primary = spawn(&primary_data, &primary_flags, &env);
    let writer = client(&primary);

    // Before the standby starts: a base to restore.
    let first = writer.create_context().unwrap().context_id;
    let mut last_turn = 0;
    for i in 0..20u32 {
        last_turn = writer
            .append(first, None, 0, 0, payload(i, 9000))
            .unwrap()
            .turn
            .turn_id;
    }
    std::thread::sleep(Duration::from_millis(400));

    let standby_data = root.path().join("standby");
    let standby_flags = ["--follow", url, "--replicate-interval", "100ms"];
    let mut standby = spawn(&standby_data, &standby_flags, &env);
    let reader = client(&standby);
    let keys: [&[u8]; 2] = [b"plan", b"step"];
    let mut contexts = vec![first];
    caught_up(&writer, &reader, &contexts, &keys, || standby.log());

    // While it follows: forks, names, tags, key-value, a chunked payload, a delete.
    let fork = writer.fork(last_turn - 5).unwrap().context_id;
    writer
        .append(fork, None, 0, 0, payload(100, 200_000))
        .unwrap();
    writer.name_context(fork, "the-fork").unwrap();
    writer
        .tag_context(fork, [("team", "blue")], Vec::<String>::new(), None)
        .unwrap();
    writer
        .kv_put(
            fork,
            vec![(Bytes::from_static(b"plan"), payload(7, 3000))],
            false,
        )
        .unwrap();
    // Vectors (decision 0033): the index record and the vectors blobs ship like the rest.
    writer
        .vector_index_create("memories", 2, Metric::Cosine, 0)
        .unwrap();
    let memories = [
        ("mem/east", [1.0, 0.0]),
        ("mem/north", [0.0, 1.0]),
        ("mem/ne", [0.7, 0.7]),
    ];
    let entries = memories
        .iter()
        .map(|(key, vector)| VectorEntry {
            key: Bytes::from_static(key.as_bytes()),
            value: Bytes::from_static(b"{}"),
            vectors: vec![vector.to_vec()],
        })
        .collect();
    writer
        .kv_put_vectors(fork, "memories", 2, entries, false, None)
        .unwrap();
    // And turns with theirs (protocol version 7).
    let recalled = vec![
        (
            ctxstore_client::NewTurn::bytes("east"),
            vec![vec![1.0, 0.1]],
        ),
        (
            ctxstore_client::NewTurn::bytes("west"),
            vec![vec![-1.0, 0.0]],
        ),
    ];
    writer
        .append_turns_vectors(fork, None, "memories", 2, recalled)
        .unwrap();
    let doomed = writer.create_context().unwrap().context_id;
    writer
        .append(doomed, None, 0, 0, payload(200, 5000))
        .unwrap();
    contexts.extend([fork, doomed]);
    caught_up(&writer, &reader, &contexts, &keys, || standby.log());
    writer.delete_context(doomed).unwrap();
    caught_up(&writer, &reader, &contexts, &keys, || standby.log());
    assert_eq!(
        seen(&reader, &[doomed], &keys)[&doomed],
        Err(format!("{:?}", Some(ErrorCode::NotFound)))
    );

    // A collection's round (the deleted context's turns and blobs go) and appends after it.
    writer.gc().unwrap();
    for i in 0..10u32 {
        writer
            .append(first, None, 0, 0, payload(300 + i, 9000))
            .unwrap();
    }
    caught_up(&writer, &reader, &contexts, &keys, || standby.log());

    // The standby answers searches as the primary does.
    let nearest = |client: &blocking::Client| {
        let query = VectorQuery::new("memories", vec![0.9, 0.2], 3);
        let hits = client.vector_search(fork, query).unwrap();
        hits.hits
            .iter()
            .map(|hit| (hit.key.clone(), hit.score.to_bits()))
            .collect::<Vec<_>>()
    };
    let on_primary = nearest(&writer);
    assert_eq!(on_primary.len(), 3);
    assert_eq!(nearest(&reader), on_primary);
    assert_eq!(reader.vector_indexes().unwrap()[0].vectors, 5);
    let recall = |client: &blocking::Client| {
        let mut query = ctxstore_client::TurnVectorQuery::new("memories", vec![0.9, 0.2], 2);
        query.context = Some(fork.into());
        let hits = client.vector_search_turns(query).unwrap();
        hits.hits
            .iter()
            .map(|hit| (hit.turn.turn_id, hit.score.to_bits()))
            .collect::<Vec<_>>()
    };
    assert_eq!(recall(&writer).len(), 2);
    assert_eq!(recall(&reader), recall(&writer), "turn searches too");

    // The standby's figures: what it applied (the primary's shipped records, once both
    // settle), the primary it names.
    let started = Instant::now();
    let (shipped, applied) = loop {
        let shipped = writer.replication_stats().unwrap();
        let applied = reader.replication_stats().unwrap();
        if shipped.lag_bytes == 0 && applied.records == shipped.records && applied.lag_bytes == 0 {
            break (shipped, applied);
        }
        assert!(
            started.elapsed() < CATCH_UP,
            "{shipped:?}\n{applied:?}\n{}",
            standby.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        (shipped.role, shipped.state),
        (ReplicationRole::Primary, ReplicationState::Shipping),
        "{shipped:?}"
    );
    assert_eq!(
        (applied.role, applied.state),
        (ReplicationRole::Standby, ReplicationState::Following),
        "{applied:?}"
    );
    assert!(applied.records > 0, "{applied:?}");
    assert_eq!(applied.target, url);
    assert_eq!(
        (applied.generation, applied.epoch),
        (shipped.generation, shipped.epoch),
        "{applied:?}"
    );
    assert!(
        applied.primary.contains(&primary.addr),
        "the standby names its primary: {applied:?}"
    );
    assert!(applied.records_unix_ms > 0 && applied.last_success_unix_ms > 0);

    // Writes are refused, naming the primary.
    let refused = reader
        .append(first, None, 0, 0, payload(9, 100))
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::NotPrimary), "{refused}");
    let message = refused.to_string();
    assert!(message.contains(&primary.addr), "{message}");
    assert!(message.contains("standby"), "{message}");
    assert_eq!(
        reader.create_context().unwrap_err().code(),
        Some(ErrorCode::NotPrimary)
    );

    // kill -9, more appends meanwhile, and a restart that resumes (no restore again).
    drop(reader);
    let first_log = standby.log();
    standby.kill();
    for i in 0..10u32 {
        writer
            .append(fork, None, 0, 0, payload(400 + i, 9000))
            .unwrap();
    }
    let mut standby = spawn(&standby_data, &standby_flags, &env);
    let reader = client(&standby);
    caught_up(&writer, &reader, &contexts, &keys, || {
        format!("{first_log}\n--- after kill -9 ---\n{}", standby.log())
    });
    assert!(
        !standby
            .log()
            .contains("standby restored its starting point"),
        "a restarted standby resumes: {}",
        standby.log()
    );
    assert_eq!(nearest(&reader), on_primary, "after the standby's restart");

    // Promotion: the old primary is fenced, the standby takes writes.
    let output = Command::new(SERVER)
        .args(["promote", "--data"])
        .arg(&standby_data)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // It waits for the standby's answer (issue 46): once it exits the standby is the primary.
    assert!(
        String::from_utf8_lossy(&output.stdout).starts_with("promoted: "),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let started = Instant::now();
    let promoted_turn = loop {
        match reader.append(first, None, 0, 0, payload(500, 4000)) {
            Ok(appended) => break appended.turn.turn_id,
            Err(error) => {
                assert_eq!(error.code(), Some(ErrorCode::NotPrimary), "{error}");
                assert!(
                    started.elapsed() < CATCH_UP,
                    "not promoted: {}",
                    standby.log()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    // The promoted standby searches and takes vectors at once.
    assert_eq!(nearest(&reader), on_primary, "after the promotion");
    let entry = VectorEntry {
        key: Bytes::from_static(b"mem/promoted"),
        value: Bytes::from_static(b"{}"),
        vectors: vec![vec![0.9, 0.2]],
    };
    reader
        .kv_put_vectors(fork, "memories", 2, vec![entry], false, None)
        .unwrap();
    assert_eq!(nearest(&reader)[0].0, Bytes::from_static(b"mem/promoted"));
    // The old primary stops shipping within an interval or so, and says so.
    let started = Instant::now();
    while !metrics(&primary_metrics).contains("ctxstore_replication_state{state=\"fenced\"} 1") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            primary.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Both say so: the old primary fenced (and why), the promoted one shipping a new
    // generation under the newer epoch.
    let fenced = writer.replication_stats().unwrap();
    assert_eq!(
        (fenced.role, fenced.state),
        (ReplicationRole::Primary, ReplicationState::Fenced),
        "{fenced:?}"
    );
    assert!(fenced.reason.contains("epoch"), "{fenced:?}");
    // The safe advice (issue 44): never "restart it", which would fence the promoted one.
    assert!(
        fenced
            .reason
            .contains("do not restart it with --replicate-to")
            && fenced.reason.contains("--follow"),
        "{fenced:?}"
    );
    assert!(
        primary
            .log()
            .contains("do not restart it with --replicate-to"),
        "the fenced primary's log gives the safe advice: {}",
        primary.log()
    );
    assert!(!fenced.primary.is_empty(), "who fenced it: {fenced:?}");
    assert!(
        fenced
            .failures
            .iter()
            .any(|(kind, count)| kind == "fenced" && *count > 0),
        "{fenced:?}"
    );
    let started = Instant::now();
    let promoted = loop {
        let promoted = reader.replication_stats().unwrap();
        if promoted.state == ReplicationState::Shipping {
            break promoted;
        }
        assert!(started.elapsed() < CATCH_UP, "{promoted:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(promoted.role, ReplicationRole::Primary, "{promoted:?}");
    assert!(!promoted.promoting, "{promoted:?}");
    assert!(
        promoted.epoch > fenced.epoch && promoted.generation > fenced.generation,
        "{promoted:?}\n{fenced:?}"
    );

    // The fenced primary refuses writes from the moment it knows (issue 46: it went on
    // acknowledging writes that no restore point would ever hold), naming who holds the
    // prefix now; reads go on.
    let refused = writer
        .append(first, None, 0, 0, payload(600, 4000))
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::NotPrimary), "{refused}");
    assert!(
        refused.to_string().contains("fenced") && refused.to_string().contains(&fenced.primary),
        "{refused}"
    );
    let refused = writer.create_context().unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::NotPrimary), "{refused}");
    assert!(
        writer.head(first).is_ok(),
        "reads go on on a fenced primary"
    );
    drop(writer);
    primary.signal("TERM");
    assert!(primary.child.wait().unwrap().success(), "{}", primary.log());
    drop(reader);
    standby.signal("TERM");
    assert!(standby.child.wait().unwrap().success(), "{}", standby.log());

    // A restore of the prefix holds the promoted store's writes, not the fenced one's.
    let restored = root.path().join("restored");
    let mut command = Command::new(SERVER);
    command
        .args(["restore", "--from", url, "--to"])
        .arg(&restored);
    for (key, value) in &env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // `verified` fails the test unless verify exits 0.
    verified(Path::new(SERVER), &restored);
    let server = spawn(&restored, &[] as &[&str], &[]);
    let check = client(&server);
    let turn = check.turn(promoted_turn).unwrap();
    assert_eq!(turn.payload_hash, blake3_of(&payload(500, 4000)));
    // No turn holds the payload the fenced primary refused.
    let last = check.last(first, 64, false).unwrap();
    assert!(
        last.turns
            .iter()
            .all(|turn| turn.payload_hash != blake3_of(&payload(600, 4000))),
        "{last:?}"
    );
}

fn blake3_of(bytes: &[u8]) -> ctxstore_client::BlobHash {
    ctxstore_client::BlobHash::of(bytes)
}

#[test]
fn a_standby_on_a_directory_follows_refuses_writes_resumes_and_is_promoted() {
    let replica = tempfile::tempdir().unwrap();
    let url = format!("file://{}", replica.path().display());
    a_standby_follows_and_is_promoted(&url, &[]);
}

#[test]
fn a_standby_on_seaweedfs_follows_refuses_writes_resumes_and_is_promoted() {
    let Some((url, env)) = common::seaweedfs("standby") else {
        return;
    };
    let env: Vec<(&str, &str)> = env
        .iter()
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect();
    a_standby_follows_and_is_promoted(&url, &env);
}

#[test]
fn a_standby_refuses_a_directory_holding_another_store() {
    let root = tempfile::tempdir().unwrap();
    let replica = root.path().join("replica");
    let url = format!("file://{}", replica.display());
    let primary = spawn(
        &root.path().join("primary"),
        &[
            "--replicate-to",
            url.as_str(),
            "--replicate-interval",
            "50ms",
        ],
        &[],
    );
    std::thread::sleep(Duration::from_millis(300));
    let mut primary = primary;
    primary.signal("TERM");
    assert!(primary.child.wait().unwrap().success());
    // A store of its own (never restored from the replica) is not a standby's.
    let other = root.path().join("other");
    let server = spawn(&other, &[] as &[&str], &[]);
    drop(server);
    let output = Command::new(SERVER)
        .arg("--data")
        .arg(&other)
        .args(["--listen", "127.0.0.1:0", "--follow", &url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("never restored from a replica"), "{stderr}");
}

/// Every file under `dir` that holds `needle` (a purged payload's bytes).
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|window| window == needle)
            {
                found.push(path);
            }
        }
    }
    found
}

/// Waits until no file under `dir` holds `needle` (the standby applied the primary's rewrite).
fn gone_from(dir: &Path, needle: &[u8], log: impl Fn() -> String) {
    let started = Instant::now();
    loop {
        let holding = files_holding(dir, needle);
        if holding.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < CATCH_UP,
            "the standby still holds the bytes in {holding:?}\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A delete and a collection on the primary rewrite the pack that held a payload only the
/// deleted context named, then a purge does the same to a live context's payload; the standby
/// installs each rewritten pack (after the cut's gc-dead and purge records), so the collected
/// and the purged bytes leave its disk too, and it serves and verifies as before (decision
/// 0019).
#[test]
fn a_collection_or_a_purge_on_the_primary_leaves_no_such_bytes_on_the_standby() {
    let root = tempfile::tempdir().unwrap();
    let replica = root.path().join("replica");
    let url = format!("file://{}", replica.display());
    let env = [("RUST_LOG".to_string(), "info".to_string())];
    let primary_data = root.path().join("primary");
    let primary = spawn(
        &primary_data,
        &[
            "--replicate-to",
            url.as_str(),
            "--replicate-interval",
            "100ms",
            "--gc-interval",
            "off",
            "--gc-pack-dead-percent",
            "1",
        ],
        &env,
    );
    let writer = client(&primary);
    let context = writer.create_context().unwrap().context_id;
    let doomed = writer.create_context().unwrap().context_id;
    // Incompressible, so its bytes lie in the pack as they are.
    let secret = payload(4242, 6000);
    writer.append(doomed, None, 0, 0, secret.clone()).unwrap();
    let mut live = Vec::new();
    for i in 0..8u32 {
        live.push(
            writer
                .append(context, None, 0, 0, payload(5000 + i, 3000))
                .unwrap()
                .turn,
        );
    }
    std::thread::sleep(Duration::from_millis(400));
    let standby_data = root.path().join("standby");
    let mut standby = spawn(
        &standby_data,
        &["--follow", url.as_str(), "--replicate-interval", "100ms"],
        &env,
    );
    let reader = client(&standby);
    caught_up(&writer, &reader, &[context, doomed], &[], || standby.log());
    let needle = &secret[1000..1064];
    assert!(
        !files_holding(&standby_data, needle).is_empty(),
        "the standby holds the payload before the collection (else this test proves nothing)"
    );

    writer.delete_context(doomed).unwrap();
    let report = writer.gc().unwrap();
    assert!(report.packs_compacted >= 1, "{report:?}");
    assert!(
        files_holding(&primary_data, needle).is_empty(),
        "the primary's collection removed the bytes"
    );
    gone_from(&standby_data, needle, || standby.log());
    assert!(
        standby
            .log()
            .contains("installed the primary's rewritten pack"),
        "{}",
        standby.log()
    );
    // Reads are the primary's: the deleted context gone, the other whole.
    caught_up(&writer, &reader, &[context, doomed], &[], || standby.log());

    // A purge of a live turn's payload (its turn redacted), then a collection.
    let purged = &live[3];
    let purged_bytes = payload(5003, 3000);
    let needle = &purged_bytes[100..164];
    assert!(!files_holding(&standby_data, needle).is_empty());
    writer.purge_blob(purged.payload_hash).unwrap();
    writer.gc().unwrap();
    assert!(files_holding(&primary_data, needle).is_empty());
    gone_from(&standby_data, needle, || standby.log());
    let started = Instant::now();
    while reader.turn(purged.turn_id).unwrap().payload_len != 0 {
        assert!(started.elapsed() < CATCH_UP, "{}", standby.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        reader.turn(live[4].turn_id).unwrap().payload_hash,
        live[4].payload_hash
    );

    // The standby's store opens again and verifies clean.
    drop(reader);
    standby.signal("TERM");
    assert!(standby.child.wait().unwrap().success(), "{}", standby.log());
    verified(Path::new(SERVER), &standby_data);
    drop(writer);
    let mut primary = primary;
    primary.signal("TERM");
    assert!(primary.child.wait().unwrap().success(), "{}", primary.log());
}

/// A standby that cannot apply what its primary shipped restores the replica afresh,
/// restarts onto it on the same address and follows again (issue 46: it stalled for good,
/// serving stale data). Made to stall by zeroing the last record of its `turns.log` while it
/// is down (recovery takes it for a torn tail): the next segment then does not follow its log.
#[test]
fn a_stalled_standby_restores_afresh_and_follows_again() {
    let root = tempfile::tempdir().unwrap();
    let replica = root.path().join("replica");
    let url = format!("file://{}", replica.display());
    let env = [("RUST_LOG".to_string(), "info".to_string())];
    let primary_flags = [
        "--replicate-to",
        url.as_str(),
        "--replicate-interval",
        "100ms",
        "--gc-interval",
        "off",
    ];
    let primary = spawn(&root.path().join("primary"), &primary_flags, &env);
    let writer = client(&primary);
    let context = writer.create_context().unwrap().context_id;
    for i in 0..5 {
        writer
            .append(context, None, 0, 0, payload(i, 4000))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(400));
    let standby_data = root.path().join("standby");
    let standby_flags = ["--follow", url.as_str(), "--replicate-interval", "100ms"];
    let mut standby = spawn(&standby_data, &standby_flags, &env);
    let reader = client(&standby);
    caught_up(&writer, &reader, &[context], &[], || standby.log());
    let records = reader.replication_stats().unwrap().records;
    drop(reader);
    standby.kill();
    {
        use std::os::unix::fs::FileExt;
        let log = std::fs::OpenOptions::new()
            .write(true)
            .open(standby_data.join("turns.log"))
            .unwrap();
        log.write_all_at(&[0u8; 128], (records - 1) * 128).unwrap();
        log.sync_all().unwrap();
    }
    for i in 5..10 {
        writer
            .append(context, None, 0, 0, payload(i, 4000))
            .unwrap();
    }

    // It stalls, restores afresh and follows again on the same address.
    let mut standby = spawn(&standby_data, &standby_flags, &env);
    let address = standby.addr.clone();
    let started = Instant::now();
    while !standby.log().contains("fresh restore is in place") {
        assert!(
            started.elapsed() < CATCH_UP,
            "no fresh restore: {}",
            standby.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let reader = loop {
        if let Ok(reader) = blocking::Client::connect(ClientConfig::new(address.clone()))
            && reader
                .replication_stats()
                .is_ok_and(|stats| stats.state == ReplicationState::Following)
        {
            break reader;
        }
        assert!(
            started.elapsed() < CATCH_UP,
            "not following again ({:?}): {}",
            blocking::Client::connect(ClientConfig::new(address.clone()))
                .map(|reader| reader.replication_stats()),
            standby.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    caught_up(&writer, &reader, &[context], &[], || standby.log());
    let log = standby.log();
    assert!(
        log.contains("cannot apply what its primary shipped"),
        "{log}"
    );
    drop(reader);
    standby.stop(Duration::from_secs(30)).unwrap();
    for leftover in [".fresh", ".fresh.complete", ".stalled", ".stalled.done"] {
        assert!(!standby_data.join(leftover).exists(), "{leftover} is left");
    }
}
