//! What scripts rely on (issue 18, item 6): the CLI and the client library never hang on a
//! port that is not ctxstore (connect, HELLO and request timeouts); exit codes tell NOT_FOUND,
//! CONFLICT, UNAUTHORIZED and connection failures apart; `--json` errors are JSON on stderr;
//! an empty payload is refused without `--allow-empty`; a closed stdout is not an error;
//! `ping` and `--version` work. Deadlines here are generous and only catch hangs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use ctxstore_client::{ClientConfig, ClientError};
use ctxstore_protocol::PROTOCOL_VERSION;
use serde_json::Value;

mod common;

use common::CLI;

/// Far above every timeout a test sets: a CLI still running then is hanging.
const HANG_DEADLINE: Duration = Duration::from_secs(30);

use ctxstore_testsupport::{ScriptedServer, TestServer};

/// Runs the CLI against `addr` with `stdin`; kills it and fails if it runs past the deadline.
fn run(addr: &str, args: &[&str], stdin: &[u8]) -> (Output, Duration) {
    let started = Instant::now();
    let mut child = common::ctxstore()
        .args(["--addr", addr])
        .args(args)
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin);
    drop(input);
    // Read both pipes beside the wait, so that a full pipe cannot stall the CLI.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        bytes
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > HANG_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ctxstore {args:?} against {addr} still running after {HANG_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = started.elapsed();
    let output = Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    (output, elapsed)
}

/// The one JSON error object on stderr; checks its shape and the exit code it names.
fn json_error(output: &Output) -> Value {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line of JSON on stderr: {stderr}");
    let value: Value = serde_json::from_str(lines[0]).unwrap();
    let error = &value["error"];
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert_eq!(
        error["exit_code"].as_i64(),
        output.status.code().map(i64::from),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "an error wrote to stdout");
    error.clone()
}

fn stdout_json(output: &Output) -> Vec<Value> {
    common::json_lines(output, &[])
}

/// A port where the kernel completes the TCP handshake but no one ever answers.
fn silent_listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// A port whose server accepts, reads, writes `answer` and then holds the connection open.
fn answering_listener(answer: &'static [u8]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut stream in listener.incoming().flatten() {
            let mut buffer = [0u8; 256];
            let _ = stream.read(&mut buffer);
            let _ = stream.write_all(answer);
            held.push(stream);
        }
    });
    addr
}

/// A fake ctxstore: answers HELLO properly, then never answers anything else.
fn hello_then_silent_listener() -> String {
    ScriptedServer::new(PROTOCOL_VERSION).serve(|_| None).0
}

#[test]
fn a_silent_port_is_a_connection_failure_within_the_timeout() {
    let (_listener, addr) = silent_listener();
    let (output, elapsed) = run(&addr, &["--json", "--connect-timeout", "1s", "stats"], b"");
    assert_eq!(output.status.code(), Some(5));
    let error = json_error(&output);
    assert_eq!(error["code"], "HANDSHAKE_TIMEOUT");
    assert!(error["message"].as_str().unwrap().contains(&addr));
    assert!(
        elapsed >= Duration::from_secs(1),
        "gave up before the timeout"
    );
    // Without --json: the same code, a sentence on stderr.
    let (output, _) = run(&addr, &["--connect-timeout", "1s", "ping"], b"");
    assert_eq!(output.status.code(), Some(5));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is it a ctxstore server?"), "{stderr}");
    // The CLI's flag, not the library's field, with the wait it set.
    assert!(
        stderr.contains("HELLO within 1s") && stderr.contains("(--connect-timeout)"),
        "{stderr}"
    );
    assert!(!stderr.contains("ClientConfig"), "{stderr}");
}

#[test]
fn a_port_answering_garbage_is_a_connection_failure() {
    // An HTTP server: not a frame this client accepts, refused at once.
    let http = answering_listener(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    let (output, _) = run(&http, &["--json", "--connect-timeout", "2s", "stats"], b"");
    assert_eq!(output.status.code(), Some(5));
    assert_eq!(json_error(&output)["code"], "NOT_CTXSTORE");
    // An SSH banner: a frame header whose flags are not 0, refused at once.
    let ssh = answering_listener(b"SSH-2.0-OpenSSH_9.6\r\n");
    let (output, _) = run(&ssh, &["--json", "--connect-timeout", "2s", "stats"], b"");
    assert_eq!(output.status.code(), Some(5));
    assert_eq!(json_error(&output)["code"], "NOT_CTXSTORE");
    // A short greeting, less than a frame header, then silence: waited for, then timed out.
    let short = answering_listener(b"+OK\r\n");
    let (output, elapsed) = run(&short, &["--json", "--connect-timeout", "1s", "stats"], b"");
    assert_eq!(output.status.code(), Some(5));
    assert_eq!(json_error(&output)["code"], "HANDSHAKE_TIMEOUT");
    assert!(elapsed >= Duration::from_secs(1));
    // A peer that closes at once.
    let closing = TcpListener::bind("127.0.0.1:0").unwrap();
    let closing_addr = closing.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in closing.incoming().flatten() {
            drop(stream);
        }
    });
    let (output, _) = run(&closing_addr, &["--json", "stats"], b"");
    assert_eq!(output.status.code(), Some(5));
    assert_eq!(json_error(&output)["code"], "NOT_CTXSTORE");
}

#[test]
fn a_request_without_a_response_times_out() {
    let addr = hello_then_silent_listener();
    let (output, elapsed) = run(&addr, &["--json", "--timeout", "1s", "stats"], b"");
    assert_eq!(output.status.code(), Some(5));
    let error = json_error(&output);
    assert_eq!(error["code"], "TIMEOUT");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("STATS"), "{message}");
    assert!(
        message.contains("within 1s (--timeout)") && !message.contains("ClientConfig"),
        "{message}"
    );
    assert!(elapsed >= Duration::from_secs(1));
}

#[test]
fn a_refused_port_is_a_connection_failure() {
    let (listener, addr) = silent_listener();
    drop(listener);
    let (output, _) = run(&addr, &["--json", "ping"], b"");
    assert_eq!(output.status.code(), Some(5));
    let error = json_error(&output);
    assert_eq!(error["code"], "CONNECT_FAILED");
    // The OS's reason is said once, not twice.
    let message = error["message"].as_str().unwrap();
    assert_eq!(message.matches("refused").count(), 1, "{message}");
}

#[test]
fn the_library_has_the_same_timeouts() {
    let (_listener, addr) = silent_listener();
    let started = Instant::now();
    let error = ctxstore_client::blocking::Client::connect(
        ClientConfig::new(addr.clone()).with_hello_timeout(Duration::from_millis(300)),
    )
    .unwrap_err();
    assert!(
        matches!(&error, ClientError::HandshakeTimeout { addr: named, .. } if *named == addr),
        "{error}"
    );
    assert!(error.is_connection_failure());
    // The library names its own setting (the CLI words it as its flag).
    assert!(
        error.to_string().contains("ClientConfig::hello_timeout"),
        "{error}"
    );
    assert!(started.elapsed() < HANG_DEADLINE);

    let fake = hello_then_silent_listener();
    let client = ctxstore_client::blocking::Client::connect(
        ClientConfig::new(fake).with_request_timeout(Some(Duration::from_millis(300))),
    )
    .unwrap();
    // On a version-2 connection `stats` asks STATS_EX (with the garbage collector's fields).
    let error = client.stats().unwrap_err();
    assert!(
        matches!(
            error,
            ClientError::Timeout {
                request: "STATS_EX",
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(error.name(), "TIMEOUT");
    // The connection stays usable after a timeout (and times out again here).
    assert!(matches!(client.ping(1), Err(ClientError::Timeout { .. })));

    let defaults = ClientConfig::new("127.0.0.1:7411");
    assert_eq!(defaults.connect_timeout, Duration::from_secs(5));
    assert_eq!(defaults.hello_timeout, Duration::from_secs(5));
    assert_eq!(defaults.request_timeout, Some(Duration::from_secs(30)));
    assert_eq!(defaults.gc_timeout, Some(Duration::from_secs(3600)));
}

#[test]
fn exit_codes_tell_failures_apart() {
    let server = TestServer::start(None);
    let addr = server.addr.as_str();
    let created = &stdout_json(&run(addr, &["--json", "ctx", "create"], b"").0)[0];
    let context = created["context_id"].as_u64().unwrap().to_string();
    let appended = &stdout_json(&run(addr, &["--json", "append", &context], b"one").0)[0];
    let head = appended["turn_id"].as_u64().unwrap();

    for args in [
        vec!["head", "999999"],
        vec!["turn", "999999"],
        vec!["ctx", "fork", "999999"],
    ] {
        let (output, _) = run(addr, &args, b"");
        assert_eq!(output.status.code(), Some(3), "{args:?}");
        let mut with_json = vec!["--json"];
        with_json.extend(&args);
        let (output, _) = run(addr, &with_json, b"");
        assert_eq!(output.status.code(), Some(3), "{args:?}");
        assert_eq!(json_error(&output)["code"], "NOT_FOUND", "{args:?}");
    }
    let blob = "00".repeat(32);
    let (output, _) = run(addr, &["--json", "blob", &blob], b"");
    assert_eq!(output.status.code(), Some(3));

    // CONFLICT, with the actual head in `detail` for a retry.
    let (output, _) = run(
        addr,
        &["--json", "append", &context, "--expect-head", "0"],
        b"two",
    );
    assert_eq!(output.status.code(), Some(4));
    let error = json_error(&output);
    assert_eq!(error["code"], "CONFLICT");
    assert_eq!(error["detail"].as_u64(), Some(head));
    let (output, _) = run(addr, &["append", &context, "--expect-head", "0"], b"two");
    assert_eq!(output.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&output.stderr).starts_with("ctxstore: "));

    // Other errors: 1. Usage: 2, as JSON with --json.
    let (output, _) = run(addr, &["--json", "blob", "not-hex"], b"");
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(json_error(&output)["code"], "INVALID_ARGUMENT");
    let (output, _) = run(addr, &["--json", "bogus"], b"");
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(json_error(&output)["code"], "USAGE");
    let (output, _) = run(addr, &["--timeout", "soon", "stats"], b"");
    assert_eq!(output.status.code(), Some(2));

    // The head did not move through any of it.
    let now = &stdout_json(&run(addr, &["--json", "head", &context], b"").0)[0];
    assert_eq!(now["head_turn_id"].as_u64(), Some(head));
}

#[test]
fn a_wrong_token_is_unauthorized() {
    let server = TestServer::start(Some("s3cret"));
    let (output, _) = run(&server.addr, &["--json", "--token", "wrong", "stats"], b"");
    assert_eq!(output.status.code(), Some(6));
    assert_eq!(json_error(&output)["code"], "UNAUTHORIZED");
    let (output, _) = run(&server.addr, &["--token", "s3cret", "stats"], b"");
    assert_eq!(output.status.code(), Some(0));
    // A token read from a file keeps its newline: trimmed, as the server trims its file.
    let (output, _) = run(&server.addr, &["--token", "s3cret\n", "stats"], b"");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    // No token at all is told apart from a wrong one.
    let (output, _) = run(&server.addr, &["--json", "stats"], b"");
    assert_eq!(output.status.code(), Some(6));
    let message = json_error(&output)["message"].as_str().unwrap().to_string();
    assert!(message.contains("none was given"), "{message}");
}

#[test]
fn a_token_file_gives_the_token() {
    let server = TestServer::start(Some("s3cret"));
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, contents: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        path.to_str().unwrap().to_string()
    };
    // As the server's own token file: written with its trailing newline.
    let good = write("token", "s3cret\n");
    let wrong = write("wrong", "wrong\n");
    let blank = write("blank", " \n");
    let missing = dir.path().join("absent").to_str().unwrap().to_string();
    let with_env = |env: &[(&str, &str)], args: &[&str]| {
        let mut command = common::ctxstore();
        command
            .envs(env.iter().copied())
            .args(["--addr", &server.addr]);
        common::run(command.args(args), b"")
    };

    let output = with_env(&[], &["--token-file", &good, "stats"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    // A global flag: after the command too.
    let output = with_env(&[], &["stats", "--token-file", &good]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let output = with_env(&[("CTXSTORE_TOKEN_FILE", &good)], &["stats"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let output = with_env(&[], &["--json", "--token-file", &wrong, "stats"]);
    assert_eq!(json_error(&output)["code"], "UNAUTHORIZED");

    // A file that cannot be read, or holds no token: an error naming it, before connecting.
    let output = with_env(&[], &["--json", "--token-file", &missing, "stats"]);
    let error = json_error(&output);
    assert_eq!(error["exit_code"], 1);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("reading the token file {missing} (--token-file)")),
        "{message}"
    );
    let output = with_env(&[], &["--json", "--token-file", &blank, "stats"]);
    let message = json_error(&output)["message"].as_str().unwrap().to_string();
    assert!(message.contains("is empty"), "{message}");

    // Not both on the command line, nor both in the environment: usage errors. A flag wins
    // over the other's variable.
    let output = with_env(
        &[],
        &[
            "--json",
            "--token",
            "s3cret",
            "--token-file",
            &good,
            "stats",
        ],
    );
    let error = json_error(&output);
    assert_eq!(
        (error["code"].as_str(), error["exit_code"].as_i64()),
        (Some("USAGE"), Some(2))
    );
    assert!(error["message"].as_str().unwrap().contains("--token-file"));
    let both = [
        ("CTXSTORE_TOKEN", "s3cret"),
        ("CTXSTORE_TOKEN_FILE", good.as_str()),
    ];
    let output = with_env(&both, &["--json", "stats"]);
    let error = json_error(&output);
    assert_eq!(error["exit_code"], 2);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("CTXSTORE_TOKEN_FILE"),
        "{error}"
    );
    let output = with_env(
        &[("CTXSTORE_TOKEN", "wrong")],
        &["--token-file", &good, "stats"],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let output = with_env(
        &[("CTXSTORE_TOKEN_FILE", &wrong)],
        &["--token", "s3cret", "stats"],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

#[test]
fn an_empty_payload_needs_allow_empty() {
    let server = TestServer::start(None);
    let addr = server.addr.as_str();
    let created = &stdout_json(&run(addr, &["--json", "ctx", "create"], b"").0)[0];
    let context = created["context_id"].as_u64().unwrap().to_string();

    let (output, _) = run(addr, &["--json", "append", &context], b"");
    assert_eq!(output.status.code(), Some(1));
    let error = json_error(&output);
    assert_eq!(error["code"], "EMPTY_PAYLOAD");
    assert!(error["message"].as_str().unwrap().contains("--allow-empty"));
    let empty = tempfile::NamedTempFile::new().unwrap();
    let path = empty.path().to_str().unwrap();
    let (output, _) = run(addr, &["append", &context, "--file", path], b"");
    assert_eq!(output.status.code(), Some(1));
    // Nothing was appended.
    let head = &stdout_json(&run(addr, &["--json", "head", &context], b"").0)[0];
    assert_eq!(head["head_turn_id"].as_u64(), Some(0));

    let appended =
        &stdout_json(&run(addr, &["--json", "append", &context, "--allow-empty"], b"").0)[0];
    let turn = appended["turn_id"].as_u64().unwrap().to_string();
    let shown = &stdout_json(&run(addr, &["--json", "turn", &turn], b"").0)[0];
    assert_eq!(shown["payload_len"].as_u64(), Some(0));
    let (output, _) = run(
        addr,
        &["append", &context, "--file", path, "--allow-empty"],
        b"",
    );
    assert_eq!(output.status.code(), Some(0));
}

/// The reader of stdout is gone before the CLI writes (what `| head -c 10` does to a long
/// output): exit 0, nothing on stderr.
fn run_with_closed_stdout(addr: &str, args: &[&str]) -> Output {
    let mut child = Command::new(CLI)
        .env_remove("CTXSTORE_TOKEN")
        .args(["--addr", addr])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > HANG_DEADLINE {
            let _ = child.kill();
            panic!("{args:?} hangs with a closed stdout");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_closed_stdout_is_not_an_error() {
    let server = TestServer::start(None);
    let addr = server.addr.as_str();
    let created = &stdout_json(&run(addr, &["--json", "ctx", "create"], b"").0)[0];
    let context = created["context_id"].as_u64().unwrap().to_string();
    let appended = &stdout_json(&run(addr, &["--json", "append", &context], b"payload").0)[0];
    let hash = appended["payload_hash"].as_str().unwrap().to_string();
    for args in [
        vec!["last", context.as_str(), "--payloads"],
        vec!["--json", "last", context.as_str()],
        vec!["blob", hash.as_str()],
        vec!["stats"],
        vec!["--help"],
    ] {
        let output = run_with_closed_stdout(addr, &args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
    // A real error still fails with a closed stdout.
    let output = run_with_closed_stdout(addr, &["head", "999999"]);
    assert_eq!(output.status.code(), Some(3));
}

#[test]
fn ping_and_version() {
    let server = TestServer::start(None);
    let pings = stdout_json(&run(&server.addr, &["--json", "ping"], b"").0);
    assert_eq!(pings.len(), 1);
    let rtt_us = pings[0]["rtt_us"].as_u64().unwrap();
    assert!(rtt_us < HANG_DEADLINE.as_micros() as u64);
    let (output, _) = run(&server.addr, &["ping"], b"");
    assert_eq!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stdout).contains("µs"));

    let output = Command::new(CLI).arg("--version").output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(output.stdout).unwrap().trim(),
        format!("ctxstore {}", env!("CARGO_PKG_VERSION"))
    );
    // The exit-code table is in --help.
    let output = Command::new(CLI).arg("--help").output().unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    for line in [
        "3  NOT_FOUND",
        "4  CONFLICT",
        "5  connection failure",
        "6  UNAUTHORIZED",
        "7  ALREADY_EXISTS",
    ] {
        assert!(help.contains(line), "{line} missing in --help");
    }
}

/// A tenant at its quota: exit 10, `QUOTA_EXCEEDED` with the limit in `detail` (decision 0032
/// §3); the operator's token is held to no quota.
#[test]
fn a_write_past_a_tenants_quota_exits_10() {
    let dir = tempfile::tempdir().unwrap();
    let tenants = dir.path().join("tenants.toml");
    std::fs::write(
        &tenants,
        "[[tenant]]\nname = \"acme\"\ntokens = [\"acme-token-0123456789abcdef\"]\nrights = \
         [\"read\", \"write\"]\nquota_contexts = 1\n",
    )
    .unwrap();
    let server = TestServer::start_with(
        Some("operator-token-0123456789"),
        &["--tenants-file", tenants.to_str().unwrap()],
    );
    let as_acme = ["--json", "--token", "acme-token-0123456789abcdef"];
    let create = |token_args: &[&str]| {
        let mut args = token_args.to_vec();
        args.extend(["ctx", "create"]);
        run(&server.addr, &args, b"").0
    };
    assert_eq!(create(&as_acme).status.code(), Some(0));
    let output = create(&as_acme);
    assert_eq!(output.status.code(), Some(10), "{output:?}");
    let error = json_error(&output);
    assert_eq!(error["code"], "QUOTA_EXCEEDED");
    assert_eq!(error["detail"].as_u64(), Some(1));
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("quota_contexts")
    );
    let operator = ["--token", "operator-token-0123456789"];
    assert_eq!(create(&operator).status.code(), Some(0));

    // The operator lists the tenants with their usage, quotas and refusals.
    let as_operator = |args: &[&str]| {
        let mut all = operator.to_vec();
        all.extend(args);
        run(&server.addr, &all, b"").0
    };
    let listed = as_operator(&["--json", "tenant", "list"]);
    let tenants = stdout_json(&listed);
    assert_eq!(tenants.len(), 1, "{listed:?}");
    let acme = &tenants[0];
    assert_eq!(acme["name"], "acme");
    assert_eq!(acme["tenant_id"], 1);
    assert_eq!(acme["contexts"], 1);
    assert_eq!(acme["quota_contexts"], 1);
    assert_eq!(acme["quota_bytes"], Value::Null);
    assert_eq!(acme["quota_refusals"], 1);
    assert_eq!(acme["rights"], serde_json::json!(["read", "write"]));
    // `stats` carries each tenant's usage too.
    let stats = as_operator(&["--json", "stats"]);
    let stats = &stdout_json(&stats)[0];
    assert_eq!(stats["tenants"]["acme"]["contexts"], 1, "{stats}");
    assert_eq!(stats["tenants"]["acme"]["deleted"], false);
    let shown = as_operator(&["tenant", "show", "acme"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("quota_contexts") && text.contains("acme"),
        "{text}"
    );
    let table = as_operator(&["tenant", "list"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.starts_with("NAME") && text.contains("acme  1   1/1"),
        "{text}"
    );
    // A tenant's token lists its own entry; its `stats` is that entry (STATS is the store's,
    // the operator's); an unknown name is an error.
    let as_tenant = |args: &[&str]| {
        let mut all = as_acme.to_vec();
        all.extend(args);
        run(&server.addr, &all, b"").0
    };
    let own = stdout_json(&as_tenant(&["tenant", "list"]));
    assert_eq!(own.len(), 1, "{own:?}");
    assert_eq!(
        (&own[0]["name"], &own[0]["contexts"]),
        (&acme["name"], &acme["contexts"])
    );
    let stats = as_tenant(&["stats"]);
    assert_eq!(stats.status.code(), Some(0), "{stats:?}");
    let stats = &stdout_json(&stats)[0];
    assert_eq!(stats["tenants"]["acme"]["contexts"], 1, "{stats}");
    assert!(stats.get("turns").is_none(), "{stats}");
    let mut text_stats = vec!["--token", "acme-token-0123456789abcdef", "stats"];
    let text = run(&server.addr, &text_stats, b"").0;
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.starts_with("tenants.acme.") && text.contains("tenants.acme.contexts "),
        "{text}"
    );
    text_stats[1] = "not-a-token-of-anyone";
    assert_eq!(run(&server.addr, &text_stats, b"").0.status.code(), Some(6));
    let unknown = as_operator(&["tenant", "show", "initech"]);
    assert_eq!(unknown.status.code(), Some(1));

    // A tenant may not delete itself; the operator deletes it, and its token is refused.
    let mut refused = as_acme.to_vec();
    refused.extend(["tenant", "delete", "acme"]);
    assert_eq!(run(&server.addr, &refused, b"").0.status.code(), Some(6));
    let deleted = as_operator(&["--json", "tenant", "delete", "acme"]);
    let answer = &stdout_json(&deleted)[0];
    assert_eq!(answer["tenant_id"], 1, "{deleted:?}");
    assert_eq!(answer["keys_destroyed"], false);
    assert_eq!(answer["replica_updated"], false);
    let again = as_operator(&["tenant", "delete", "acme"]);
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(text.contains("tenant acme (id 1) is deleted"), "{again:?}");
    assert_ne!(create(&as_acme).status.code(), Some(0));
    let listed = as_operator(&["--json", "tenant", "list"]);
    assert_eq!(stdout_json(&listed)[0]["deleted"], true);
    let unknown = as_operator(&["tenant", "delete", "initech"]);
    assert_ne!(unknown.status.code(), Some(0));
    // A server without a master key has no data key to rotate.
    let rotate = as_operator(&["tenant", "rotate-key", "operator"]);
    assert_ne!(rotate.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&rotate.stderr);
    assert!(stderr.contains("seals nothing"), "{stderr}");
}

/// `tenant create` and `tenant quota` (decision 0032 §8) edit the server's tenants file on its
/// host, keeping its comments; with --reload-pid the server takes the edit at once: the new
/// token connects, the new quota holds. A name given twice, a bad name and a quota edit of an
/// absent tenant change nothing.
#[test]
fn tenant_create_and_quota_edit_the_tenants_file_and_the_server_takes_them() {
    let dir = tempfile::tempdir().unwrap();
    let tenants = dir.path().join("tenants.toml");
    let original = "# the first tenant\n[[tenant]]\nname = \"acme\"\ntokens = \
                    [\"acme-token-0123456789abcdef\"]\nrights = [\"read\"]\n";
    std::fs::write(&tenants, original).unwrap();
    let file = tenants.to_str().unwrap();
    let server =
        TestServer::start_with(Some("operator-token-0123456789"), &["--tenants-file", file]);
    let pid = server.pid().to_string();
    let edit = |args: &[&str]| {
        let mut all = vec!["--json"];
        all.extend(args);
        all.extend(["--tenants-file", file, "--reload-pid", &pid]);
        run(&server.addr, &all, b"").0
    };
    let created = edit(&["tenant", "create", "globex", "--quota-contexts", "1"]);
    assert_eq!(created.status.code(), Some(0), "{created:?}");
    let token = stdout_json(&created)[0]["token"]
        .as_str()
        .unwrap()
        .to_string();
    let text = std::fs::read_to_string(&tenants).unwrap();
    assert!(
        text.starts_with(original),
        "the file kept what it had: {text}"
    );
    assert!(
        !text.contains(&token),
        "the file holds the token's digest only"
    );
    for refused in [
        edit(&["tenant", "create", "globex"]),
        edit(&["tenant", "create", "Not-A-Name"]),
        edit(&["tenant", "create", "operator"]),
        edit(&["tenant", "quota", "initech", "--quota-bytes", "5"]),
        edit(&["tenant", "quota", "globex"]),
    ] {
        assert_ne!(refused.status.code(), Some(0), "{refused:?}");
    }
    assert_eq!(std::fs::read_to_string(&tenants).unwrap(), text);

    // The server read the file again: the new token connects, its quota holds.
    let as_globex = ["--json", "--token", token.as_str()];
    let create = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["ctx", "create"]);
        run(&server.addr, &all, b"").0
    };
    let first = eventually_ok(|| create(&as_globex));
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    assert_eq!(
        create(&as_globex).status.code(),
        Some(10),
        "quota_contexts = 1"
    );
    let lifted = edit(&["tenant", "quota", "globex", "--quota-contexts", "none"]);
    assert_eq!(
        stdout_json(&lifted)[0]["quotas"]["quota_contexts"],
        Value::Null
    );
    let second = eventually_ok(|| create(&as_globex));
    assert_eq!(second.status.code(), Some(0), "{second:?}");
}

/// `attempt` until it exits 0 (a SIGHUP is applied by the server a moment after it is sent),
/// for a few seconds; the last output either way.
fn eventually_ok(mut attempt: impl FnMut() -> Output) -> Output {
    let started = Instant::now();
    loop {
        let output = attempt();
        if output.status.success() || started.elapsed() > Duration::from_secs(10) {
            return output;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
