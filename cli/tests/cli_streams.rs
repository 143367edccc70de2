//! The CLI's streams (issue 32) against a real server: `stream CTX` sends stdin as deltas as
//! it arrives (one `--json` line per acknowledged delta with stream_id and length, then the
//! sealed turn's line), `streams CTX` lists it while open, `stream-read --follow` on another
//! process prints every byte once and ends at the seal, `stream-read --from` resumes, also
//! after the seal (the rest from the sealed turn, issue 44); an aborted stream is an error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

use base64::prelude::{BASE64_STANDARD, Engine as _};
use serde_json::Value;

mod common;

use common::Cli;
use ctxstore_testsupport::TestServer;

#[test]
fn stdin_streams_into_one_turn_while_another_process_follows_it() {
    let server = TestServer::start(None);
    let context = server.one(&["ctx", "create"], b"");
    let context_id = context["context_id"].as_u64().unwrap().to_string();

    let mut writer = common::ctxstore()
        .args([
            "--addr",
            &server.addr,
            "--json",
            "stream",
            &context_id,
            "--type",
            "3",
            "--codec",
            "json",
        ])
        .spawn()
        .unwrap();
    let mut stdin = writer.stdin.take().unwrap();
    let mut acks = BufReader::new(writer.stdout.take().unwrap());
    let mut line = String::new();
    stdin.write_all(b"Hello").unwrap();
    stdin.flush().unwrap();
    acks.read_line(&mut line).unwrap();
    let first: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(first["length"], 5);
    let stream_id = first["stream_id"].as_u64().unwrap().to_string();

    // Listed while open, with its length.
    let listed = server.json(&["streams", &context_id], b"");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0]["stream_id"].as_u64().unwrap().to_string(),
        stream_id
    );
    assert_eq!(listed[0]["length"], 5);
    // The codec by name, as turns print it.
    assert_eq!(listed[0]["codec"], "json");

    let follower = common::ctxstore()
        .args([
            "--addr",
            &server.addr,
            "stream-read",
            &stream_id,
            "--follow",
        ])
        .spawn()
        .unwrap();
    let mut expected = b"Hello".to_vec();
    for piece in [&b", world"[..], b"!\n", b"tokens arrive one by one"] {
        std::thread::sleep(Duration::from_millis(30));
        stdin.write_all(piece).unwrap();
        stdin.flush().unwrap();
        expected.extend_from_slice(piece);
        line.clear();
        acks.read_line(&mut line).unwrap();
        let ack: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(ack["length"], expected.len() as u64, "{line}");
    }
    // Resume from an offset, without following: the bytes acknowledged so far.
    let resumed = server.run(&["stream-read", &stream_id, "--from", "7"], b"");
    assert!(resumed.status.success());
    assert_eq!(resumed.stdout, &expected[7..]);
    drop(stdin);
    line.clear();
    acks.read_line(&mut line).unwrap();
    let sealed: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(sealed["stream_id"].as_u64().unwrap().to_string(), stream_id);
    assert_eq!(sealed["payload_len"], expected.len() as u64);
    assert!(writer.wait().unwrap().success());
    let followed = follower.wait_with_output().unwrap();
    assert!(followed.status.success());
    assert_eq!(followed.stdout, expected);

    // The sealed turn is the context's head, its payload the stream's bytes.
    let last = server.json(&["last", &context_id, "--payloads"], b"");
    assert_eq!(last.len(), 1);
    assert_eq!(last[0]["turn_id"], sealed["turn_id"]);
    assert_eq!(last[0]["type_tag"], 3);
    let payload = BASE64_STANDARD
        .decode(last[0]["payload_b64"].as_str().unwrap())
        .unwrap();
    assert_eq!(payload, expected);
    assert!(server.json(&["streams", &context_id], b"").is_empty());
    assert_eq!(last[0]["codec"], "json");
}

/// `ctxstore stream-read ID --from N [--follow]`, each way, exits 0 with exactly `expected`.
fn read_prints(server: &TestServer, stream_id: &str, from: usize, follow: bool, expected: &[u8]) {
    let from_text = from.to_string();
    let mut args = vec!["stream-read", stream_id, "--from", &from_text];
    if follow {
        args.push("--follow");
    }
    let output = server.run(&args, b"");
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.stdout == expected,
        "{args:?} printed {:?}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn a_sealed_stream_reads_from_its_turn_with_and_without_follow() {
    const WHOLE: &[u8] = b"Hello, sealed world!\n";
    let server = TestServer::start(None);
    let context = server.one(&["ctx", "create"], b"");
    let context_id = context["context_id"].as_u64().unwrap().to_string();
    let streamed = server.json(&["stream", &context_id], WHOLE);
    let sealed = streamed.last().unwrap();
    let stream_id = sealed["stream_id"].as_u64().unwrap().to_string();
    let turn_id = sealed["turn_id"].as_u64().unwrap().to_string();
    assert_eq!(sealed["payload_len"], WHOLE.len() as u64);

    for follow in [false, true] {
        for from in [0, 3, WHOLE.len()] {
            read_prints(&server, &stream_id, from, follow, &WHOLE[from..]);
        }
        // Past the end: an error naming the turn, nothing printed.
        let past = (WHOLE.len() + 1).to_string();
        let mut args = vec!["stream-read", stream_id.as_str(), "--from", &past];
        if follow {
            args.push("--follow");
        }
        let error = server.fails(&args, b"", 1);
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("turn {turn_id}")) && message.contains("past its end"),
            "{message}"
        );
    }

    // A patch changes what the turn reads, not the stream's bytes: they are the turn's as
    // sealed, never a splice of two payloads.
    server.one(&["patch", &turn_id], b"a patched, different payload");
    for follow in [false, true] {
        read_prints(&server, &stream_id, 3, follow, &WHOLE[3..]);
    }
    // Redacted: the bytes are gone; the error says where they were.
    server.one(&["redact", &turn_id], b"");
    let error = server.fails(&["stream-read", &stream_id, "--from", "3"], b"", 1);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("sealed into turn {turn_id}")) && message.contains("redacted"),
        "{message}"
    );
}

#[test]
fn an_aborted_stream_is_an_error() {
    use ctxstore_client::blocking::Client;
    use ctxstore_client::{ClientConfig, NewStream};

    let server = TestServer::start(None);
    let client = Client::connect(ClientConfig::new(server.addr.clone())).unwrap();
    let context = client.create_context().unwrap().context_id;
    let stream = client
        .open_stream(context, NewStream::new(1, 0))
        .unwrap()
        .stream_id;
    client
        .append_delta(stream, None, bytes::Bytes::from_static(b"half an answer"))
        .unwrap();
    client.abort_stream(stream).unwrap();
    let stream_id = stream.to_string();
    for follow in [false, true] {
        let mut args = vec!["stream-read", stream_id.as_str()];
        if follow {
            args.push("--follow");
        }
        let output = server.run(&args, b"");
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        // An aborted stream's bytes are gone: nothing to print, and the end is an error.
        assert!(output.stdout.is_empty(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!("stream {stream_id} was aborted")),
            "{stderr}"
        );
    }
}

#[test]
fn streams_name_an_unknown_codec_as_turns_do() {
    let server = TestServer::start(None);
    let context = server.one(&["ctx", "create"], b"");
    let context_id = context["context_id"].as_u64().unwrap().to_string();
    let mut writer = common::ctxstore()
        .args([
            "--addr",
            &server.addr,
            "--json",
            "stream",
            &context_id,
            "--codec",
            "77",
        ])
        .spawn()
        .unwrap();
    let mut stdin = writer.stdin.take().unwrap();
    let mut acks = BufReader::new(writer.stdout.take().unwrap());
    stdin.write_all(b"x").unwrap();
    stdin.flush().unwrap();
    let mut line = String::new();
    acks.read_line(&mut line).unwrap();
    let listed = server.json(&["streams", &context_id], b"");
    drop(stdin);
    assert!(writer.wait().unwrap().success());
    let last = server.json(&["last", &context_id], b"");
    assert_eq!(listed[0]["codec"], "77");
    assert_eq!(listed[0]["codec"], last[0]["codec"]);
}

#[test]
fn follow_prints_each_event_as_it_happens() {
    let server = TestServer::start(None);
    let context = server.one(&["ctx", "create"], b"");
    let context_id = context["context_id"].as_u64().unwrap().to_string();
    let mut follower = common::ctxstore()
        .args(["--addr", &server.addr, "--json", "follow", &context_id])
        .spawn()
        .unwrap();
    let mut events = BufReader::new(follower.stdout.take().unwrap());
    // The follower starts from now: wait until it is watching, then act.
    std::thread::sleep(Duration::from_millis(300));
    let appended = server.one(&["append", &context_id], b"a turn");
    let streamed = server.json(&["stream", &context_id], b"streamed bytes");
    let mut line = String::new();
    let mut seen: Vec<Value> = Vec::new();
    while seen.len() < 4 {
        line.clear();
        events.read_line(&mut line).unwrap();
        seen.push(serde_json::from_str(&line).unwrap());
    }
    let names: Vec<&str> = seen.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(names, ["head", "stream_opened", "head", "stream_sealed"]);
    assert_eq!(seen[0]["turn_id"], appended["turn_id"]);
    let sealed = streamed.last().unwrap();
    assert_eq!(seen[3]["turn_id"], sealed["turn_id"]);
    assert_eq!(seen[3]["stream_id"], sealed["stream_id"]);
    assert!(
        seen.windows(2)
            .all(|p| p[0]["seq"].as_u64() < p[1]["seq"].as_u64())
    );
    // The context's deletion is its last event: follow ends.
    server.one(&["ctx", "delete", &context_id], b"");
    line.clear();
    events.read_line(&mut line).unwrap();
    let deleted: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(deleted["event"], "deleted");
    assert!(follower.wait().unwrap().success());
}
