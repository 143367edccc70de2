//! The listening socket through the real binary: restarts without resets or refusals once the
//! port answers, no socket left after exit, one owner per address, one owner per data
//! directory. No wall-clock assertions beyond generous deadlines.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ctxstore_client::{ClientConfig, blocking};
use ctxstore_protocol::admin;
use ctxstore_protocol::{AdminRequest, AdminResponse, Request, Response};

mod common;
use common::Raw;

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");
const RESTART_CYCLES: usize = 20;

/// The tests of this file one at a time. They pick a port, release it and expect it to stay
/// theirs (a restart on the same port, a connect that must be refused after a stop), and they
/// fork servers while another test holds a store's LOCK: run side by side, one test's server
/// took another's released port (the second server of a data directory then found no first
/// server holding it, and served), and a forked child held an in-process store's LOCK open.
/// Those are races between tests of one process, not behaviour of the server under test.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed (panicked holding the guard) must not fail the others too.
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A port nobody listens on right now, outside the kernel's ephemeral range: these tests bind
/// it again and assert it refused after a stop, and a kernel-picked port could meanwhile be
/// handed to another listener.
fn free_port() -> u16 {
    ctxstore_testsupport::fixed_port()
}

// The child is returned to the caller, which waits for it.
#[allow(clippy::zombie_processes)]
fn spawn_on(data: &Path, addr: SocketAddr) -> Child {
    Command::new(SERVER)
        .arg("--data")
        .arg(data)
        .args(["--listen", &addr.to_string(), "--network-cores", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
    }
    text
}

/// Connects as soon as the port answers: ECONNREFUSED before the first connect is the server
/// still starting and is retried; nothing else is.
fn connect_when_it_answers(addr: SocketAddr, child: &mut Child) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match TcpStream::connect(addr) {
            Ok(stream) => return stream,
            Err(error) if error.kind() == ErrorKind::ConnectionRefused => {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!(
                        "the server exited ({status}) before it answered: {}",
                        stderr_of(child)
                    );
                }
                assert!(Instant::now() < deadline, "the port never answered");
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(error) => panic!("connecting to {addr}: {error}"),
        }
    }
}

/// HELLO + PING on the first connection; `Err` names what went wrong (a reset, a close).
fn hello_and_ping(stream: TcpStream) -> Result<(), String> {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut raw = Raw::from_stream(stream);
    let request = Request::Admin(AdminRequest::Hello(admin::Hello {
        min_version: ctxstore_protocol::PROTOCOL_VERSION,
        max_version: ctxstore_protocol::PROTOCOL_VERSION,
        token: bytes::Bytes::new(),
        client_name: "restart loop".into(),
    }));
    raw.send(1, &request);
    match raw.receive() {
        Some((1, Response::Admin(AdminResponse::Negotiated(admin::Negotiated { .. })))) => {}
        other => return Err(format!("HELLO answered with {other:?}")),
    }
    raw.send(
        2,
        &Request::Admin(AdminRequest::Ping(admin::Ping { nonce: 7 })),
    );
    match raw.receive() {
        Some((2, Response::Admin(AdminResponse::Pong(admin::Pong { nonce: 7 })))) => Ok(()),
        other => Err(format!("PING answered with {other:?}")),
    }
}

/// Restart on one fixed port and data directory, connecting the moment the port answers:
/// every first connection and the one after it is served (no reset, no refusal), and once the
/// process exited after SIGTERM the port refuses connections (no socket outlives it).
#[test]
fn restart_loop_serves_the_first_connection_and_leaves_no_listener_behind() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut failures = Vec::new();
    for cycle in 0..RESTART_CYCLES {
        let mut child = spawn_on(&data, addr);
        let probe = connect_when_it_answers(addr, &mut child);
        if let Err(error) = hello_and_ping(probe) {
            failures.push(format!("cycle {cycle}, first connection: {error}"));
        }
        // The next client, as a reconnect loop would be.
        let next = blocking::Client::connect(ClientConfig::new(addr.to_string()))
            .map_err(|error| error.to_string())
            .and_then(|client| client.ping(cycle as u64).map_err(|error| error.to_string()));
        if let Err(error) = next {
            failures.push(format!("cycle {cycle}, second connection: {error}"));
        }
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let status = wait_exit(&mut child, Duration::from_secs(60));
        assert!(
            status.success(),
            "cycle {cycle}: exit {status}: {}",
            stderr_of(&mut child)
        );
        match TcpStream::connect(addr) {
            Err(error) if error.kind() == ErrorKind::ConnectionRefused => {}
            other => failures.push(format!(
                "cycle {cycle}: after exit a connect gave {other:?}, not a refusal"
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures in {RESTART_CYCLES} cycles: {failures:#?}",
        failures.len()
    );
}

/// A second server on an address already served (another data directory) does not start: it
/// exits non-zero naming the address, and the first goes on serving every new connection.
#[test]
fn a_second_server_on_a_served_address_fails_and_the_first_keeps_serving() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut first = spawn_on(&dir.path().join("first"), addr);
    drop(connect_when_it_answers(addr, &mut first));

    let mut second = spawn_on(&dir.path().join("second"), addr);
    let status = wait_exit(&mut second, Duration::from_secs(60));
    let stderr = stderr_of(&mut second);
    assert!(!status.success(), "the second server started: {stderr}");
    assert!(
        stderr.contains(&addr.to_string()),
        "the error names the address: {stderr}"
    );
    // It failed on the address before it touched a data directory.
    assert!(
        !dir.path().join("second").exists(),
        "the second server created its data directory before it failed on the address"
    );

    // Every new connection reaches the first server's store (a context created on each lands
    // in one store: ids keep growing from one sequence).
    let mut ids = Vec::new();
    for _ in 0..8 {
        let client = blocking::Client::connect(ClientConfig::new(addr.to_string())).unwrap();
        client.ping(1).unwrap();
        ids.push(client.create_context().unwrap().context_id);
    }
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        ids.len(),
        "one store hands out distinct ids: {ids:?}"
    );

    let _ = Command::new("kill")
        .args(["-TERM", &first.id().to_string()])
        .status();
    assert!(wait_exit(&mut first, Duration::from_secs(60)).success());
}

/// The data directory has one owner too: a second server on it refuses to start.
#[test]
fn a_second_server_on_a_served_data_directory_fails() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut first = spawn_on(&data, addr);
    drop(connect_when_it_answers(addr, &mut first));
    let other: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut second = spawn_on(&data, other);
    let status = wait_exit(&mut second, Duration::from_secs(60));
    let stderr = stderr_of(&mut second);
    assert!(!status.success(), "the second server started: {stderr}");
    assert!(
        stderr.contains(&data.display().to_string()),
        "the error names the directory: {stderr}"
    );
    let client = blocking::Client::connect(ClientConfig::new(addr.to_string())).unwrap();
    client.ping(1).unwrap();
    let _ = Command::new("kill")
        .args(["-TERM", &first.id().to_string()])
        .status();
    assert!(wait_exit(&mut first, Duration::from_secs(60)).success());
}

/// In one process: when `Server::stop` returns, its listening socket is gone (a connect is
/// refused at once), and the next `Server::start` on the same port serves its first client.
#[test]
fn in_process_stop_leaves_no_listener_and_the_next_start_serves() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut failures = Vec::new();
    for cycle in 0..RESTART_CYCLES {
        let mut config = common::config(dir.path());
        config.listen = addr;
        let mut server = common::start(config);
        let served = TcpStream::connect(addr)
            .map_err(|error| error.to_string())
            .and_then(hello_and_ping);
        if let Err(error) = served {
            failures.push(format!("cycle {cycle}: first connection: {error}"));
        }
        server.stop();
        match TcpStream::connect(addr) {
            Err(error) if error.kind() == ErrorKind::ConnectionRefused => {}
            other => failures.push(format!(
                "cycle {cycle}: after stop a connect gave {other:?}, not a refusal"
            )),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
