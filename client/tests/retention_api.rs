//! The client library's retention and backup calls (protocol version 2, issues 15 and 18)
//! against a real `ctxstore-server`: delete, prune, time to live and its read, each by id and
//! by name with its typed errors; a TTL the server enforces; an online backup that
//! `ctxstore-server verify` accepts; BACKUP waiting on its own timeout, not the request
//! timeout; and a version-1 server getting none of these requests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxstore_client::blocking::Client;
use ctxstore_client::{ClientConfig, ClientError, ContextRef, ErrorCode, NewContext};
use ctxstore_protocol::admin;
use ctxstore_protocol::{AdminRequest, AdminResponse, BackupWire, Request, Response};

use ctxstore_testsupport::{ScriptedServer, TestServer};

fn connect(server: &TestServer) -> Client {
    Client::connect(ClientConfig::new(server.addr.clone())).unwrap()
}

fn name(name: &str) -> ContextRef {
    ContextRef::Name(name.into())
}

/// A named context with `turns` turns (depths 0..turns); returns its ContextID.
fn thread(client: &Client, context: &str, turns: u32) -> u64 {
    let info = client
        .open_context(NewContext::new().name(context))
        .unwrap()
        .context;
    for turn in 0..turns {
        let payload = Bytes::from(format!("{context} turn {turn}"));
        client.append(name(context), None, 1, 0, payload).unwrap();
    }
    info.context_id
}

fn depths(client: &Client, context: impl Into<ContextRef>) -> Vec<u32> {
    let page = client.last(context, 100, false).unwrap();
    page.turns.iter().map(|turn| turn.depth).collect()
}

#[test]
fn delete_answers_the_context_as_it_was_and_frees_its_name() {
    let server = TestServer::start(None);
    let client = connect(&server);
    let id = thread(&client, "doomed", 3);
    let tagged = client
        .tag_context(id, [("status", "done")], [] as [&str; 0], None)
        .unwrap();
    // A fork shares the history and outlives the context.
    let fork = client.fork(tagged.head_turn_id).unwrap();

    let deleted = client.delete_context(name("doomed")).unwrap();
    assert_eq!(deleted.context, tagged, "the context as it was just before");
    assert_eq!((deleted.floor_depth, deleted.ttl_ms), (0, None));

    for error in [
        client.context_info(id).map(drop).unwrap_err(),
        client.context_retention(id).map(drop).unwrap_err(),
        client.head(name("doomed")).map(drop).unwrap_err(),
        client.last(id, 10, false).map(drop).unwrap_err(),
        client.delete_context(id).map(drop).unwrap_err(),
        client.prune_context(id, 1).map(drop).unwrap_err(),
        client.set_context_ttl(id, None).map(drop).unwrap_err(),
    ] {
        assert_eq!(error.code(), Some(ErrorCode::NotFound), "{error}");
    }
    assert_eq!(depths(&client, fork.context_id), vec![0, 1, 2]);
    // The name is free again; the ContextID is not reused.
    let again = client
        .open_context(NewContext::new().name("doomed"))
        .unwrap()
        .context;
    assert!(again.context_id > fork.context_id);
    assert_eq!(depths(&client, name("doomed")), Vec::<u32>::new());
}

#[test]
fn prune_raises_the_floor_and_never_lowers_it() {
    let server = TestServer::start(None);
    let client = connect(&server);
    let id = thread(&client, "long", 6);

    let pruned = client.prune_context(name("long"), 2).unwrap();
    assert_eq!(pruned.context.context_id, id);
    assert_eq!(pruned.context.head_depth, 5);
    assert_eq!(pruned.floor_depth, 4, "head depth + 1 - keep");
    assert_eq!(depths(&client, id), vec![4, 5]);
    assert_eq!(client.context_retention(id).unwrap(), pruned);

    // Keeping more than is left changes nothing: the floor never moves down.
    let wider = client.prune_context(id, 100).unwrap();
    assert_eq!(wider.floor_depth, 4);
    assert_eq!(depths(&client, id), vec![4, 5]);

    // 0 is the server's INVALID_ARGUMENT (deleting is another call); the context is intact.
    let error = client.prune_context(id, 0).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
    assert_eq!(client.context_retention(id).unwrap().floor_depth, 4);

    // Appends go on above the floor.
    client
        .append(id, None, 1, 0, Bytes::from_static(b"after"))
        .unwrap();
    assert_eq!(depths(&client, id), vec![4, 5, 6]);
    let error = client.prune_context(name("nobody"), 1).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::NotFound), "{error}");
}

#[test]
fn ttl_is_set_read_and_cleared_in_milliseconds() {
    let server = TestServer::start(None);
    let client = connect(&server);
    let id = thread(&client, "kept", 1);

    let fresh = client.context_retention(name("kept")).unwrap();
    assert_eq!(fresh.context, client.context_info(id).unwrap());
    assert_eq!(
        (fresh.floor_depth, fresh.ttl_ms, fresh.ttl()),
        (0, None, None)
    );

    let week = Duration::from_secs(7 * 24 * 3600);
    let set = client.set_context_ttl(name("kept"), Some(week)).unwrap();
    assert_eq!(set.ttl_ms, Some(604_800_000));
    assert_eq!(set.ttl(), Some(week));
    assert_eq!(
        client.context_retention(id).unwrap().ttl_ms,
        Some(604_800_000)
    );

    // A finer remainder is dropped: whole milliseconds.
    let odd = Duration::from_micros(1_500);
    assert_eq!(
        client.set_context_ttl(id, Some(odd)).unwrap().ttl_ms,
        Some(1)
    );
    let cleared = client.set_context_ttl(id, None).unwrap();
    assert_eq!(cleared.ttl_ms, None);
    assert_eq!(client.context_retention(id).unwrap().ttl_ms, None);

    // Under 1 ms is refused here (None clears); over 100 years by the server.
    for tiny in [Duration::ZERO, Duration::from_micros(999)] {
        let error = client.set_context_ttl(id, Some(tiny)).unwrap_err();
        assert!(matches!(error, ClientError::InvalidArgument(_)), "{error}");
    }
    let century = Duration::from_secs(101 * 365 * 24 * 3600);
    let error = client.set_context_ttl(id, Some(century)).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
    let error = client.context_retention(name("nobody")).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::NotFound), "{error}");
}

/// A short TTL set through the client is enforced by the server: the context goes (polled,
/// with a generous deadline: the reaper looks once a second).
#[test]
fn a_context_past_its_ttl_is_deleted_by_the_server() {
    let server = TestServer::start(None);
    let client = connect(&server);
    let id = thread(&client, "brief", 1);
    let kept = thread(&client, "durable", 1);
    client
        .set_context_ttl(name("brief"), Some(Duration::from_millis(1)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match client.context_info(id) {
            Err(error) if error.code() == Some(ErrorCode::NotFound) => break,
            Ok(_) => {}
            Err(error) => panic!("{error}"),
        }
        assert!(Instant::now() < deadline, "the context outlived its TTL");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(client.context_info(kept).unwrap().context_id, kept);
}

#[test]
fn backup_writes_a_copy_that_verifies() {
    let server = TestServer::start(None);
    let client = connect(&server);
    thread(&client, "a", 4);
    thread(&client, "b", 3);
    // The same payload twice: one blob.
    client
        .append(name("b"), None, 1, 0, Bytes::from_static(b"a turn 0"))
        .unwrap();
    let target = tempfile::tempdir().unwrap();
    let dir = target.path().join("copy");
    let dir_text = dir.to_str().unwrap().to_string();

    let report = client.backup(dir_text.clone()).unwrap();
    assert_eq!(report.backup_dir, dir_text);
    assert_eq!(report.turns, 8, "everything acknowledged before it");
    assert_eq!(report.blobs, 7);
    assert!(report.bytes > 0);
    assert!(report.linked_bytes <= report.bytes);

    ctxstore_testsupport::verified(&ctxstore_testsupport::server_binary(), &dir);

    // Into a directory that is not empty: the server's INVALID_ARGUMENT.
    let error = client.backup(dir_text).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
    // A relative path names no place on the server's host: refused before sending.
    for relative in ["copy", "", "./copy"] {
        let error = client.backup(relative).unwrap_err();
        assert!(matches!(error, ClientError::InvalidArgument(_)), "{error}");
        assert!(error.to_string().contains("server's host"), "{error}");
    }
    // The connection is still fine.
    client.ping(7).unwrap();
}

/// A fake version-2 server that answers HELLO at once and BACKUP after `backup_delay`, and
/// nothing else.
fn slow_backup_server(backup_delay: Duration) -> String {
    let (addr, _) = ScriptedServer::new(2).serve(move |request| match request {
        Request::Admin(AdminRequest::Backup(admin::Backup { dir })) => {
            std::thread::sleep(backup_delay);
            Some(Response::Admin(AdminResponse::BackedUp(BackupWire {
                turns: 1,
                dir: dir.clone(),
                ..BackupWire::default()
            })))
        }
        _ => None,
    });
    addr
}

/// BACKUP waits on `backup_timeout`, not on `request_timeout`: a backup slower than the
/// request timeout is answered; one slower than the backup timeout is a `Timeout` naming it.
#[test]
fn backup_waits_on_its_own_timeout() {
    assert_eq!(
        ClientConfig::new("127.0.0.1:7411").backup_timeout,
        Some(ClientConfig::BACKUP_TIMEOUT_DEFAULT)
    );
    let addr = slow_backup_server(Duration::from_millis(600));
    let patient = Client::connect(
        ClientConfig::new(addr.clone())
            .with_request_timeout(Some(Duration::from_millis(100)))
            .with_backup_timeout(Some(Duration::from_secs(60))),
    )
    .unwrap();
    let report = patient.backup("/srv/backups/one").unwrap();
    assert_eq!(
        (report.backup_dir.as_str(), report.turns),
        ("/srv/backups/one", 1)
    );

    let hasty = Client::connect(
        ClientConfig::new(addr)
            .with_request_timeout(Some(Duration::from_secs(60)))
            .with_backup_timeout(Some(Duration::from_millis(100))),
    )
    .unwrap();
    let error = hasty.backup("/srv/backups/two").unwrap_err();
    assert!(
        matches!(
            error,
            ClientError::Timeout {
                request: "BACKUP",
                setting: "ClientConfig::backup_timeout",
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("backup_timeout"), "{error}");
}

/// A fake server that negotiates version 1 and answers nothing after HELLO: every retention
/// call and BACKUP must be refused before it is sent (else it would time out here).
#[test]
fn a_version_1_server_gets_no_retention_or_backup_requests() {
    let (addr, _) = ScriptedServer::new(1).serve(|_| None);
    let client = Client::connect(
        ClientConfig::new(addr)
            .with_request_timeout(Some(Duration::from_secs(30)))
            .with_backup_timeout(Some(Duration::from_secs(30))),
    )
    .unwrap();
    assert_eq!(client.protocol_version(), 1);
    let refusals = [
        client.delete_context(1).map(drop).unwrap_err(),
        client.prune_context(1, 1).map(drop).unwrap_err(),
        client
            .set_context_ttl(1, Some(Duration::from_secs(60)))
            .map(drop)
            .unwrap_err(),
        client.set_context_ttl(1, None).map(drop).unwrap_err(),
        client.context_retention(name("x")).map(drop).unwrap_err(),
        client.backup("/srv/backups/x").map(drop).unwrap_err(),
    ];
    // Each is refused at once: a request sent to this silent fake would wait 30 s and end
    // as a Timeout, not as Unsupported.
    for error in &refusals {
        common::assert_refused_for_version_1(error);
    }
}
