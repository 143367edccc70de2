//! The `ctxstore` CLI on odd input: whatever it is given — arguments, files, server errors —
//! it prints a result or an error and exits 0..=7; it never panics (exit 101). A token
//! longer than HELLO carries used to panic in the protocol crate's encoder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::process::Output;

use proptest::prelude::*;

mod common;

use ctxstore_testsupport::TestServer;

/// Runs the CLI against `server` (unless the arguments name another `--addr`).
fn run(server: &TestServer, args: &[OsString], stdin: &[u8]) -> Output {
    common::run(
        common::ctxstore()
            .env("CTXSTORE_ADDR", &server.addr)
            .args(args),
        stdin,
    )
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// Exit 0 (a result), 1..=7 (an error; the table in `ctxstore --help`) or 2 (a command
/// line that does not parse); never a panic (101) or a signal.
fn assert_no_panic(args: &[OsString], output: &Output) -> i32 {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let code = output.status.code();
    assert!(
        matches!(code, Some(0..=7)) && !stderr.contains("panicked"),
        "{args:?} exited {code:?}: {stderr}"
    );
    code.unwrap_or_default()
}

#[test]
fn odd_arguments_get_errors_not_panics() {
    let server = TestServer::start(None);
    let long_token = "x".repeat(1025);
    let long_utf8_token = "é".repeat(600);
    let not_hex = "g".repeat(64);
    let unicode_hash = "é".repeat(32);
    let zero_hash = "0".repeat(64);
    let missing = server.dir.path().join("missing");
    let directory = server.dir.path().to_str().unwrap().to_string();
    let long_at_name = format!("@{}", "n".repeat(300));
    let huge_at_name = format!("@{}", "n".repeat(70_000));
    let long_name = "n".repeat(257);
    let long_turn_key = "k".repeat(65);
    let big = server.dir.path().join("big");
    // One byte over the server's default frame limit.
    std::fs::write(&big, vec![7u8; (16 << 20) + 1]).unwrap();
    let cases: Vec<(Vec<OsString>, i32, &str)> = vec![
        (
            os(&["--token", &long_token, "stats"]),
            1,
            "token is 1025 bytes",
        ),
        (
            os(&["--token", &long_utf8_token, "stats"]),
            1,
            "token is 1200 bytes",
        ),
        (os(&["blob", "zz"]), 1, "64 hex digits"),
        (os(&["blob", &not_hex]), 1, "64 hex digits"),
        (os(&["blob", &unicode_hash]), 1, "64 hex digits"),
        (os(&["blob", &zero_hash]), 3, "NOT_FOUND"),
        (os(&["append", "1", "--codec", "nonsense"]), 2, "codec"),
        (os(&["append", "18446744073709551615"]), 3, "NOT_FOUND"),
        (
            os(&["append", "1", "--file", missing.to_str().unwrap()]),
            1,
            "reading",
        ),
        (os(&["append", "1", "--file", &directory]), 1, "reading"),
        (
            os(&["append", "1", "--file", big.to_str().unwrap()]),
            1,
            "over the server's frame limit",
        ),
        (os(&["last", "1", "-n", "4294967295"]), 1, "TOO_LARGE"),
        (os(&["last", "1", "-n", "-1"]), 2, ""),
        (os(&["last", "1", "-n", "4294967296"]), 2, ""),
        (os(&["page", "1", "--before", "0"]), 3, "NOT_FOUND"),
        (
            os(&["range", "1", "--from-depth", "4294967295"]),
            3,
            "NOT_FOUND",
        ),
        (os(&["replay", "0"]), 3, "NOT_FOUND"),
        (os(&["turn", "0"]), 3, "NOT_FOUND"),
        (os(&["ctx", "fork", "0"]), 1, ""),
        (os(&["ctx", "create", "--from", "999999"]), 3, "NOT_FOUND"),
        (os(&["head", "@nobody"]), 3, "NOT_FOUND"),
        (os(&["head", "@"]), 2, ""),
        (os(&["head", &long_at_name]), 1, "TOO_LARGE"),
        (os(&["head", &huge_at_name]), 1, "context name"),
        (os(&["ctx", "create", "--name", &long_name]), 1, "TOO_LARGE"),
        (os(&["ctx", "create", "--name", ""]), 1, ""),
        (os(&["kv", "get", "@nobody", "k"]), 3, "NOT_FOUND"),
        (os(&["append", "1", "--label", "novalue"]), 2, "KEY=VALUE"),
        (os(&["append", "1", "--parent", "1", "--root"]), 2, "--root"),
        (os(&["append", "1", "--parent", "0"]), 2, "0"),
        (os(&["append", "1", "--key", ""]), 2, "empty"),
        (os(&["append", "@nobody", "--key", "k"]), 3, "NOT_FOUND"),
        (
            os(&["append", "@nobody", "--key", &long_turn_key]),
            3,
            "NOT_FOUND",
        ),
        (os(&["turn", "@a"]), 2, "--key"),
        (os(&["turn", "@nobody", "--key", "k"]), 3, "NOT_FOUND"),
        (
            os(&["turn", "@nobody", "--key", &long_turn_key]),
            3,
            "NOT_FOUND",
        ),
        (os(&["log", "@nobody"]), 3, "NOT_FOUND"),
        (os(&["log", "1", "-n", "4294967295"]), 3, "NOT_FOUND"),
        (os(&["window", "@nobody"]), 3, "NOT_FOUND"),
        (os(&["window", "1", "-n", "4294967295"]), 3, "NOT_FOUND"),
        (os(&["find", "--label", "k=v"]), 1, "INVALID_ARGUMENT"),
        (
            os(&["find", "--label", "run_id=x", "-n", "4294967295"]),
            0,
            "",
        ),
        (os(&["find"]), 2, "--label"),
        (os(&["ctx", "delete", "@nobody"]), 3, "NOT_FOUND"),
        (
            os(&["ctx", "prune", "@nobody", "--keep", "0"]),
            1,
            "INVALID_ARGUMENT",
        ),
        (
            os(&["ctx", "prune", "@nobody", "--keep", "1"]),
            3,
            "NOT_FOUND",
        ),
        (os(&["ctx", "prune", "1"]), 2, "--keep"),
        (
            os(&["ctx", "ttl", "@nobody", "1000000years"]),
            1,
            "100 years",
        ),
        (os(&["ctx", "ttl", "@nobody", "1h"]), 3, "NOT_FOUND"),
        (os(&["ctx", "ttl", "1", "soon"]), 2, "duration"),
        (os(&["backup", "--to", &directory]), 1, "not empty"),
        (os(&["backup", "--to", ""]), 2, ""),
        (os(&["ctx", "list", "--limit", "1001"]), 0, ""),
        (os(&["--addr", "not an address", "stats"]), 5, "connecting"),
        (os(&["--addr", "127.0.0.1:0", "stats"]), 5, "connecting"),
        (os(&["--addr", "[::1", "stats"]), 5, "connecting"),
        (os(&["--addr", "", "stats"]), 5, "connecting"),
        (os(&[]), 2, ""),
        (os(&["--json"]), 2, ""),
        (os(&["bogus"]), 2, ""),
        (vec![OsString::from_vec(vec![0xff, 0xfe])], 2, ""),
        (
            vec![OsString::from("blob"), OsString::from_vec(vec![0xff; 64])],
            2,
            "",
        ),
    ];
    for (args, expected, says) in cases {
        let output = run(&server, &args, b"payload");
        let code = assert_no_panic(&args, &output);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(code, expected, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // The server took no harm: a normal command still works.
    let output = run(&server, &os(&["ctx", "create"]), b"");
    assert_eq!(assert_no_panic(&[], &output), 0);
}

/// A word of a command line: commands, flags, numbers at and past their types' edges, hashes,
/// bytes that are not UTF-8.
fn word() -> impl Strategy<Value = OsString> {
    let fixed = prop::sample::select(vec![
        "ctx",
        "create",
        "fork",
        "head",
        "append",
        "turn",
        "last",
        "page",
        "range",
        "replay",
        "blob",
        "stats",
        "show",
        "tag",
        "list",
        "clone",
        "kv",
        "put",
        "get",
        "rm",
        "log",
        "find",
        "window",
        "delete",
        "prune",
        "--keep",
        "ttl",
        "7d",
        "none",
        "backup",
        "--parent",
        "--root",
        "--key",
        "--label",
        "--link",
        "--summary",
        "run_id=r",
        "@",
        "@a",
        "@thread",
        "a=b",
        "=",
        "--name",
        "--tag",
        "--remove",
        "--get-or-create",
        "--name-prefix",
        "--updated-before",
        "--limit",
        "--prefix",
        "--if-absent",
        "--json",
        "--token",
        "--from",
        "--type",
        "--codec",
        "--expect-head",
        "--before",
        "--from-depth",
        "--payloads",
        "-n",
        "-o",
        "0",
        "1",
        "-1",
        "4294967295",
        "4294967296",
        "18446744073709551615",
        "18446744073709551616",
        "1e3",
        "json",
        "",
        "--",
    ])
    .prop_map(OsString::from);
    prop_oneof![
        6 => fixed,
        1 => "[0-9a-fA-F]{60,68}".prop_map(OsString::from),
        // Any bytes but NUL, which no argument can hold.
        1 => prop::collection::vec(1u8..=255, 0..40).prop_map(OsString::from_vec),
        1 => "x{1020,1030}".prop_map(OsString::from),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn any_command_line_gets_an_answer_not_a_panic(
        args in prop::collection::vec(word(), 0..6),
        stdin in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        thread_local! {
            static SERVER: TestServer = TestServer::start(None);
        }
        // -o writes a file: keep it inside a temp directory.
        let dir = tempfile::tempdir().unwrap();
        let output = SERVER.with(|server| {
            common::run(
                common::ctxstore()
                    .current_dir(dir.path())
                    .env("CTXSTORE_ADDR", &server.addr)
                    .args(&args),
                &stdin,
            )
        });
        assert_no_panic(&args, &output);
    }
}
