//! The failover campaign (issue 47 item 5, decision 0031 build plan step 9): real servers on
//! SeaweedFS, one primary (`--replicate-to URL --ack-after remote --replica-lease 4s`) and two
//! standbys (`--follow URL --auto-promote`), two load generators appending with idempotency
//! keys through the whole cluster's addresses (`--addr A,B,C`), one `--durability remote`, one
//! `local`, each acknowledgement in an ack log with its wall-clock time. Faults in turn:
//!
//! 1. kill -9 of the primary;
//! 2. SIGSTOP of the primary for longer than its lease, then SIGCONT (the partitioned
//!    primary): it must never acknowledge again;
//! 3. the object store unreachable for 20 s (a TCP proxy in front of SeaweedFS drops every
//!    connection and holds new ones: the servers see a store that stopped answering; the
//!    SeaweedFS that `.ci/run` starts is shared with other tests, so it is cut off, not
//!    stopped);
//! 4. kill -9 of the primary, then of the first standby seen taking over (mid-promotion or
//!    just promoted): the last member must take over;
//! 5. two failovers back to back: kill -9 of the primary, then of its successor as soon as it
//!    takes writes.
//!
//! At every poll at most one member takes writes. A lost member is replaced by a fresh
//! standby at the same address (a new host). At the end `ctxstore-loadgen check` judges every
//! ack log against the cluster and against a server started on a restore of the replica: every
//! `remote` acknowledgement present once with its exact payload on its context's chain; a
//! `local` one missing only as one of a fault's losses, which span less than L − m (decision
//! 0031 §9); no TurnID naming two turns; no payload twice. `verify` passes on every survivor and on the restore.
//!
//! `CTXSTORE_FAILOVER_ROUNDS` (default 1) repeats the five faults; the benchmark
//! (`benches/replication.sh campaign`) runs ten rounds: 50 fault cycles.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ctxstore_client::{ClientConfig, Role, ServerRole, blocking};
use ctxstore_testsupport::{ServerLaunch, TestServer};

use common::{LOADGEN, server_binary};

/// The lease: 4 s rather than the shortest (2 s), so that a loaded CI machine never lets a
/// renewal slip past it while nothing is wrong.
const LEASE: &str = "4s";
/// The lease less its margin (5 %): how long before a fault a `local` acknowledgement may be
/// lost (decision 0031 §9).
const LOSS_WINDOW: &str = "3800ms";
/// How long the object store is unreachable in the store fault.
const STORE_DOWN: Duration = Duration::from_secs(20);
/// How long the writers write before each fault.
const BEFORE_FAULT: Duration = Duration::from_secs(3);
/// A failover's deadline: the lease, its margin, a poll, the catch-up, on a loaded machine.
const FAILOVER_DEADLINE: Duration = Duration::from_secs(40);

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A TCP proxy in front of the object store that can be cut: while cut, every connection
/// through it is closed and new ones are accepted and held without an answer.
struct Proxy {
    addr: String,
    cut: Arc<AtomicBool>,
}

impl Proxy {
    fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let cut = Arc::new(AtomicBool::new(false));
        let shared = cut.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let (upstream, cut) = (upstream.clone(), shared.clone());
                std::thread::spawn(move || pipe_connection(client, &upstream, &cut));
            }
        });
        Proxy { addr, cut }
    }

    fn set_down(&self, down: bool) {
        self.cut.store(down, Ordering::SeqCst);
    }
}

/// Copies both ways until either side closes or the store is cut.
fn pipe_connection(client: TcpStream, upstream: &str, cut: &Arc<AtomicBool>) {
    while cut.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let Ok(server) = TcpStream::connect(upstream) else {
        return;
    };
    let (Ok(client_reader), Ok(server_reader)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let pipes = [(client_reader, server), (server_reader, client)].map(|(mut from, mut to)| {
        let cut = cut.clone();
        std::thread::spawn(move || {
            let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
            let mut buffer = vec![0u8; 64 * 1024];
            while !cut.load(Ordering::SeqCst) {
                match from.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(n) if to.write_all(&buffer[..n]).is_err() => break,
                    Ok(_) => {}
                    Err(error)
                        if matches!(
                            error.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
        })
    });
    for pipe in pipes {
        let _ = pipe.join();
    }
}

/// The tests of this file one at a time: each runs three servers and two writers, which is
/// all a two-core machine should carry at once.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The cluster: three fixed addresses, each served by one member at a time.
struct Cluster {
    root: PathBuf,
    url: String,
    env: Vec<(String, String)>,
    addrs: Vec<String>,
    members: Vec<Option<TestServer>>,
    /// Every data directory a member used, for `verify` at the end.
    dirs: Vec<PathBuf>,
    started: AtomicU64,
}

impl Cluster {
    fn new(root: &Path, url: String, env: Vec<(String, String)>) -> Cluster {
        Cluster {
            root: root.to_path_buf(),
            url,
            env,
            addrs: three_addresses(),
            members: vec![None, None, None],
            dirs: Vec::new(),
            started: AtomicU64::new(0),
        }
    }

    /// A primary at the first address (with `primary_env`), then two standbys once it has
    /// shipped a restore point (a remote append); answers the primary's slot.
    fn start_three(&mut self, primary_env: &[(String, String)]) -> usize {
        self.start_member_env(0, true, primary_env);
        let primary = self.await_writer(&[], "the first primary");
        self.await_standbys(primary);
        self.start_member(1, false);
        self.start_member(2, false);
        self.await_standbys(primary);
        primary
    }

    fn common_flags(&self) -> Vec<String> {
        ["--replicate-interval", "200ms", "--replica-lease", LEASE]
            .iter()
            .map(|flag| flag.to_string())
            .collect()
    }

    fn start_member(&mut self, slot: usize, primary: bool) {
        self.start_member_env(slot, primary, &[]);
    }

    /// `start_member` with more environment (libfaketime's, for the clock test).
    fn start_member_env(&mut self, slot: usize, primary: bool, extra: &[(String, String)]) {
        let n = self.started.fetch_add(1, Ordering::Relaxed);
        let data = self.root.join(format!("member-{slot}-{n}"));
        let mut flags = if primary {
            vec![
                "--replicate-to".to_string(),
                self.url.clone(),
                "--ack-after".into(),
                "remote".into(),
            ]
        } else {
            vec![
                "--follow".to_string(),
                self.url.clone(),
                "--auto-promote".into(),
            ]
        };
        flags.extend(self.common_flags());
        let server = ServerLaunch::new(server_binary())
            .data(&data)
            .listen(&self.addrs[slot])
            .flags(&flags)
            .envs(&self.env)
            .envs(extra)
            .keep_log()
            .ready_timeout(Duration::from_secs(60))
            .start();
        self.dirs.push(data);
        self.members[slot] = Some(server);
    }

    fn addr_list(&self) -> String {
        self.addrs.join(",")
    }

    /// The members' roles (None: no answer within half a second).
    fn roles(&self) -> Vec<Option<Role>> {
        self.addrs
            .iter()
            .enumerate()
            .map(|(slot, addr)| {
                self.members[slot].as_ref()?;
                role_of(addr)
            })
            .collect()
    }

    /// The one member taking writes, asserting there is never more than one.
    fn writer(&self) -> Option<usize> {
        let writers: Vec<usize> = self
            .roles()
            .iter()
            .enumerate()
            .filter(|(_, role)| {
                role.as_ref()
                    .is_some_and(|role| role.role == ServerRole::Primary && role.accepts_writes)
            })
            .map(|(slot, _)| slot)
            .collect();
        assert!(writers.len() <= 1, "two primaries take writes: {writers:?}");
        writers.first().copied()
    }

    /// Waits for a member other than `not` to take writes.
    fn await_writer(&self, not: &[usize], what: &str) -> usize {
        let deadline = Instant::now() + FAILOVER_DEADLINE;
        loop {
            if let Some(slot) = self.writer()
                && !not.contains(&slot)
            {
                return slot;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: no member took over:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Until every member follows the writer: a probe appended (remote) on the writer is
    /// on every standby.
    fn await_standbys(&self, writer: usize) {
        let client =
            blocking::Client::connect(ClientConfig::new(self.addrs[writer].clone())).unwrap();
        let context = client.create_context().unwrap().context_id;
        let probe = client
            .append(context, None, 0, 0, bytes::Bytes::from_static(b"probe"))
            .unwrap()
            .turn
            .turn_id;
        let deadline = Instant::now() + Duration::from_secs(60);
        for (slot, addr) in self.addrs.iter().enumerate() {
            if slot == writer || self.members[slot].is_none() {
                continue;
            }
            loop {
                let seen = blocking::Client::connect(quick(addr))
                    .and_then(|standby| standby.head(context))
                    .is_ok_and(|head| head.head_turn_id == probe);
                if seen {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "member {slot} never followed member {writer}:\n{}",
                    self.logs()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    fn kill(&mut self, slot: usize) {
        if let Some(mut server) = self.members[slot].take() {
            server.kill();
        }
    }

    /// Stops the members that neither write nor follow: an old primary fenced or lapsed (one
    /// the store fault left behind) leaves its address to a fresh standby. One rejoining by
    /// itself is left to it.
    fn retire_fenced(&mut self) {
        for slot in 0..self.members.len() {
            let stuck = role_of(&self.addrs[slot])
                .is_some_and(|role| matches!(role.role, ServerRole::Fenced | ServerRole::Lapsed));
            if stuck && self.members[slot].is_some() {
                self.kill(slot);
            }
        }
    }

    /// A fresh standby at every address without a member.
    fn replace_lost(&mut self) {
        for slot in 0..self.members.len() {
            if self.members[slot].is_none() {
                self.start_member(slot, false);
            }
        }
    }

    fn logs(&self) -> String {
        self.members
            .iter()
            .enumerate()
            .filter_map(|(slot, member)| {
                let log = member.as_ref()?.log();
                let tail: String = log
                    .lines()
                    .rev()
                    .take(30)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                Some(format!("--- member {slot}\n{tail}"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A client configuration that gives up quickly (a paused member never answers).
fn quick(addr: &str) -> ClientConfig {
    ClientConfig::new(addr.to_string())
        .with_connect_timeout(Duration::from_millis(500))
        .with_hello_timeout(Duration::from_millis(500))
        .with_request_timeout(Some(Duration::from_millis(500)))
}

fn role_of(addr: &str) -> Option<Role> {
    blocking::Client::connect(quick(addr)).ok()?.role().ok()
}

/// Ports for the three addresses, outside the kernel's ephemeral range: members bind them
/// again after each fault, and a kernel-picked port could meanwhile be handed to a connect.
fn three_addresses() -> Vec<String> {
    (0..3)
        .map(|_| format!("127.0.0.1:{}", ctxstore_testsupport::fixed_port()))
        .collect()
}

/// A load generator appending through every address for `run`, acknowledgements in `log`.
fn spawn_writer(
    addrs: &str,
    durability: &str,
    run: Duration,
    seed: u64,
    log: &Path,
) -> std::process::Child {
    Command::new(LOADGEN)
        .args([
            "--addr",
            addrs,
            "--duration",
            &format!("{}ms", run.as_millis()),
        ])
        .args(["--warmup", "0s", "--connections", "4", "--contexts", "8"])
        .args([
            "--mix",
            "append=100",
            "--payload-bytes",
            "300",
            "--dup-ratio",
            "0",
        ])
        .args(["--durability", durability, "--idempotency-keys", "--quiet"])
        .args(["--seed", &seed.to_string()])
        .arg("--ack-log")
        .arg(log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    KillPrimary,
    PausePrimary,
    StoreDown,
    KillTakerMidPromotion,
    BackToBack,
}

const FAULTS: [Fault; 5] = [
    Fault::KillPrimary,
    Fault::PausePrimary,
    Fault::StoreDown,
    Fault::KillTakerMidPromotion,
    Fault::BackToBack,
];

/// How long the writers write in a cycle of `fault`: before it, through it, and after the
/// new primary takes writes.
fn writing_time(fault: Fault) -> Duration {
    let after = match fault {
        Fault::KillPrimary => 10,
        Fault::PausePrimary => 13,
        Fault::StoreDown => 28,
        Fault::KillTakerMidPromotion => 16,
        Fault::BackToBack => 18,
    };
    BEFORE_FAULT + Duration::from_secs(after)
}

/// Injects `fault` on the cluster whose writer is `primary`; answers the fault instants.
fn inject(cluster: &mut Cluster, proxy: &Proxy, fault: Fault, primary: usize) -> Vec<u64> {
    match fault {
        Fault::KillPrimary => {
            let at = unix_ms();
            cluster.kill(primary);
            cluster.await_writer(&[primary], "kill -9 of the primary");
            vec![at]
        }
        Fault::PausePrimary => {
            let at = unix_ms();
            cluster.members[primary].as_ref().unwrap().signal("STOP");
            cluster.await_writer(&[primary], "the primary paused");
            cluster.members[primary].as_ref().unwrap().signal("CONT");
            // Resumed, it never takes writes again (`writer` asserts one writer at most).
            let until = Instant::now() + Duration::from_secs(3);
            while Instant::now() < until {
                let role = role_of(&cluster.addrs[primary]);
                assert!(
                    !role.as_ref().is_some_and(|role| role.accepts_writes),
                    "the resumed primary takes writes: {role:?}"
                );
                cluster.writer();
                std::thread::sleep(Duration::from_millis(100));
            }
            cluster.kill(primary);
            vec![at]
        }
        Fault::StoreDown => {
            let at = unix_ms();
            proxy.set_down(true);
            let until = Instant::now() + STORE_DOWN;
            while Instant::now() < until {
                cluster.writer();
                std::thread::sleep(Duration::from_millis(200));
            }
            proxy.set_down(false);
            // The primary renews again, or a standby takes over: either way one writer.
            cluster.await_writer(&[], "after the object store came back");
            vec![at, unix_ms()]
        }
        Fault::KillTakerMidPromotion => {
            let at = unix_ms();
            cluster.kill(primary);
            let deadline = Instant::now() + FAILOVER_DEADLINE;
            let taker = loop {
                let roles = cluster.roles();
                let taker = roles.iter().position(|role| {
                    role.as_ref().is_some_and(|role| {
                        matches!(role.role, ServerRole::TakingOver | ServerRole::Primary)
                    })
                });
                if let Some(taker) = taker {
                    break taker;
                }
                assert!(Instant::now() < deadline, "no taker:\n{}", cluster.logs());
                std::thread::sleep(Duration::from_millis(5));
            };
            let second = unix_ms();
            cluster.kill(taker);
            cluster.await_writer(&[primary, taker], "the taker killed mid-promotion");
            vec![at, second]
        }
        Fault::BackToBack => {
            let at = unix_ms();
            cluster.kill(primary);
            let first = cluster.await_writer(&[primary], "the first of two failovers");
            let second = unix_ms();
            cluster.kill(first);
            cluster.await_writer(&[primary, first], "the second of two failovers");
            vec![at, second]
        }
    }
}

/// `ctxstore-loadgen check` of every ack log against `addr`.
fn check(addr: &str, logs: &[PathBuf], faults: &[u64], json: &Path) -> serde_json::Value {
    let mut command = Command::new(LOADGEN);
    command.args(["check", "--addr", addr, "--loss-window", LOSS_WINDOW]);
    command.arg("--json").arg(json);
    for log in logs {
        command.arg("--ack-log").arg(log);
    }
    for fault in faults {
        command.args(["--fault-unix-ms", &fault.to_string()]);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "check failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

fn verify(data: &Path) {
    let output = Command::new(server_binary())
        .arg("verify")
        .arg("--data")
        .arg(data)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "verify {}:\n{}{}",
        data.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The replica's URL and the servers' `AWS_*` variables.
type Replica = (String, Vec<(String, String)>);

/// The SeaweedFS `.ci/run` starts, behind a proxy that can be cut; None (skipped) without it.
fn object_store(root: &Path) -> Option<(Proxy, Replica)> {
    let Ok(endpoint) = std::env::var("CTXSTORE_S3_TEST_ENDPOINT") else {
        eprintln!("skipped: CTXSTORE_S3_TEST_ENDPOINT is not set (.ci/run sets it)");
        return None;
    };
    let upstream = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let proxy = Proxy::start(upstream);
    let bucket =
        std::env::var("CTXSTORE_S3_TEST_BUCKET").unwrap_or_else(|_| "ctxstore-test".into());
    let name = root.file_name().unwrap().to_string_lossy().into_owned();
    let url = format!("s3://{bucket}/failover-{}-{name}", std::process::id());
    let env = vec![
        ("AWS_ENDPOINT".to_string(), format!("http://{}", proxy.addr)),
        ("AWS_ALLOW_HTTP".to_string(), "true".to_string()),
        ("AWS_REGION".to_string(), "us-east-1".to_string()),
        (
            "AWS_ACCESS_KEY_ID".to_string(),
            std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "ctxstore".into()),
        ),
        (
            "AWS_SECRET_ACCESS_KEY".to_string(),
            std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|_| "ctxstore".into()),
        ),
    ];
    Some((proxy, (url, env)))
}

#[test]
fn failovers_under_load_lose_no_remote_acknowledgement_and_local_ones_only_inside_the_window() {
    let rounds: usize = std::env::var("CTXSTORE_FAILOVER_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(1);
    let _serial = one_at_a_time();
    let root = tempfile::tempdir().unwrap();
    let Some((proxy, (url, env))) = object_store(root.path()) else {
        return;
    };
    let mut cluster = Cluster::new(root.path(), url, env);
    let mut primary = cluster.start_three(&[]);

    let mut logs = Vec::new();
    let mut faults = Vec::new();
    for (cycle, fault) in (0..rounds).flat_map(|_| FAULTS).enumerate() {
        let run = writing_time(fault);
        let remote_log = root.path().join(format!("remote-{cycle}.jsonl"));
        let local_log = root.path().join(format!("local-{cycle}.jsonl"));
        let seed = 1000 + cycle as u64 * 2;
        let writers = [
            spawn_writer(&cluster.addr_list(), "remote", run, seed, &remote_log),
            spawn_writer(&cluster.addr_list(), "local", run, seed + 1, &local_log),
        ];
        std::thread::sleep(BEFORE_FAULT);
        let started = Instant::now();
        faults.extend(inject(&mut cluster, &proxy, fault, primary));
        eprintln!(
            "cycle {cycle}: {fault:?}, a writer again after {:?}",
            started.elapsed()
        );
        for writer in writers {
            let output = writer.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success(),
                "a writer failed in cycle {cycle} ({fault:?}):\n{stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        logs.push(remote_log);
        logs.push(local_log);
        cluster.retire_fenced();
        cluster.replace_lost();
        primary = cluster.await_writer(&[], "after the cycle");
        cluster.await_standbys(primary);
        if (cycle + 1) % FAULTS.len() == 0 && cycle + 1 < rounds * FAULTS.len() {
            // A verdict after each round of a long run, so that a stop midway still says
            // what held.
            let json = root.path().join(format!("check-{cycle}.json"));
            let verdict = check(&cluster.addr_list(), &logs, &faults, &json);
            eprintln!("after cycle {cycle}: {verdict}");
        }
    }

    let verdict = check(
        &cluster.addr_list(),
        &logs,
        &faults,
        &root.path().join("check.json"),
    );
    // Takeovers of the prefix, as its lease counts them: the denominator of the local
    // acknowledgements lost per failover.
    let failovers = cluster
        .writer()
        .and_then(|slot| role_of(&cluster.addrs[slot]))
        .map_or(0, |role| role.failovers);
    eprintln!("cluster: {verdict}; failovers {failovers}");
    assert!(
        verdict["remote"]["acked"].as_u64().unwrap() > 0,
        "{verdict}"
    );
    assert!(verdict["local"]["acked"].as_u64().unwrap() > 0, "{verdict}");

    // A planned stop of the primary ships everything; a restore of the replica holds every
    // acknowledgement the cluster holds.
    let mut members: Vec<TestServer> = cluster
        .members
        .iter_mut()
        .filter_map(Option::take)
        .collect();
    members.sort_by_key(|member| {
        role_of(&member.addr).is_some_and(|role| role.role == ServerRole::Primary)
    });
    for member in &mut members {
        member.stop(Duration::from_secs(120)).unwrap();
    }
    for member in &members {
        verify(&member.data);
    }
    let restored = root.path().join("restored");
    let mut restore = Command::new(server_binary());
    restore
        .args(["restore", "--from", &cluster.url, "--to"])
        .arg(&restored)
        .envs(cluster.env.iter().map(|(key, value)| (key, value)));
    let output = restore.output().unwrap();
    assert!(
        output.status.success(),
        "restore:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    verify(&restored);
    let server = ServerLaunch::new(server_binary()).data(&restored).start();
    let from_replica = check(
        &server.addr,
        &logs,
        &faults,
        &root.path().join("restored.json"),
    );
    eprintln!("restore of the replica: {from_replica}");
}

/// libfaketime, where `.ci/run` installs it (Debian's `faketime`).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Clock jumps (issue 47, "bad input and failures"): the primary's wall clock, moved under
/// libfaketime while it writes, by +5 min and −5 min (inside SigV4's skew: nothing changes, no
/// failover) and then by +1 h (its signed requests may be refused as skewed: it cannot renew,
/// its gate closes, and at most one standby takes over). At every poll at most one member
/// takes writes; the ack log checks clean. The lease's deadlines run on CLOCK_BOOTTIME, which
/// the jump does not move.
#[test]
fn a_primary_whose_wall_clock_jumps_never_makes_two_primaries() {
    if !Path::new(LIBFAKETIME).exists() {
        eprintln!("skipped: {LIBFAKETIME} is missing (.ci/run installs faketime)");
        return;
    }
    let _serial = one_at_a_time();
    let root = tempfile::tempdir().unwrap();
    let Some((_proxy, (url, env))) = object_store(root.path()) else {
        return;
    };
    let offset = root.path().join("faketime");
    std::fs::write(&offset, "+0\n").unwrap();
    let faked = vec![
        ("LD_PRELOAD".to_string(), LIBFAKETIME.to_string()),
        (
            "FAKETIME_TIMESTAMP_FILE".to_string(),
            offset.display().to_string(),
        ),
        ("FAKETIME_NO_CACHE".to_string(), "1".to_string()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".to_string(), "1".to_string()),
    ];
    let mut cluster = Cluster::new(root.path(), url, env);
    let primary = cluster.start_three(&faked);
    let log = root.path().join("remote.jsonl");
    let run = Duration::from_secs(30);
    let writer = spawn_writer(&cluster.addr_list(), "remote", run, 7, &log);
    let started = Instant::now();
    let watch = |cluster: &Cluster, until: Duration| -> Vec<usize> {
        let mut writers = Vec::new();
        while started.elapsed() < until {
            writers.extend(cluster.writer());
            std::thread::sleep(Duration::from_millis(100));
        }
        writers
    };
    watch(&cluster, Duration::from_secs(2));
    std::fs::write(&offset, "+5m\n").unwrap();
    let mut seen = watch(&cluster, Duration::from_secs(7));
    std::fs::write(&offset, "-5m\n").unwrap();
    seen.extend(watch(&cluster, Duration::from_secs(12)));
    assert!(
        seen.iter().all(|slot| *slot == primary),
        "a failover while the clock moved 5 minutes: writers {seen:?}\n{}",
        cluster.logs()
    );
    let jumped = unix_ms();
    std::fs::write(&offset, "+1h\n").unwrap();
    let after = watch(&cluster, run + Duration::from_secs(2));
    let output = writer.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let taken_over = after.iter().any(|slot| *slot != primary);
    eprintln!(
        "after +1 h: {}",
        if taken_over {
            "a standby took over"
        } else {
            "the primary kept the lease (the store accepted its skewed signatures)"
        }
    );
    let verdict = check(
        &cluster.addr_list(),
        &[log],
        &[jumped],
        &root.path().join("check.json"),
    );
    assert!(
        verdict["remote"]["acked"].as_u64().unwrap() > 0,
        "{verdict}"
    );
}
