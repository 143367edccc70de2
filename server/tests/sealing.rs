//! Payloads sealed at rest through the binary (issue 48, decision 0032 §4–§5):
//! `--master-key-file` with a tenants file; a marker a tenant and the operator append is
//! nowhere in the data directory in plain text; `verify --master-key-file` opens every sealed
//! body; a wrong master key refuses the start, naming the check, and serves nothing;
//! `--master-key-command` reads the key from a command; sealing with replication is refused
//! until the keyring ships (decision 0032 step 4).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use ctxstore_client::{BlobHash, ClientConfig, blocking};
use ctxstore_testsupport::{ServerLaunch, TestServer, files_holding};

const SERVER: &str = env!("CARGO_BIN_EXE_ctxstore-server");
const OPERATOR: &str = "operator-token-0123456789";
const ACME: &str = "acme-token-0123456789abcdef";
const KEY: &str = "8f2a61c03e5d47b9a1c2d3e4f5061728394a5b6c7d8e9fa0b1c2d3e4f5a6b7c8";
const OTHER_KEY: &str = "08f2a61c03e5d47b9a1c2d3e4f5061728394a5b6c7d8e9fa0b1c2d3e4f5a6b7c";
const MARKER: &[u8] = b"SEALED-MARKER-9d41";

struct Files {
    data: std::path::PathBuf,
    tenants: String,
    key: String,
    other_key: String,
}

fn files(dir: &Path) -> Files {
    let tenants = dir.join("tenants.toml");
    std::fs::write(
        &tenants,
        format!(
            "[[tenant]]\nname = \"acme\"\ntokens = [\"{ACME}\"]\nrights = [\"read\", \"write\"]\n"
        ),
    )
    .unwrap();
    let key = dir.join("master.key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    let other_key = dir.join("other.key");
    std::fs::write(&other_key, OTHER_KEY).unwrap();
    Files {
        data: dir.join("data"),
        tenants: tenants.display().to_string(),
        key: key.display().to_string(),
        other_key: other_key.display().to_string(),
    }
}

fn launch(files: &Files, key_flags: &[&str]) -> ServerLaunch {
    let mut flags = vec!["--tenants-file", files.tenants.as_str()];
    flags.extend_from_slice(key_flags);
    ServerLaunch::new(SERVER)
        .data(&files.data)
        .token(Some(OPERATOR))
        .flags(&flags)
        .keep_log()
        .ready_timeout(Duration::from_secs(30))
}

fn client(server: &TestServer, token: &str) -> blocking::Client {
    let mut config = ClientConfig::new(server.addr.clone());
    config.token = Some(token.to_string());
    blocking::Client::connect(config).unwrap()
}

fn payload(seed: u8, len: usize) -> Bytes {
    let mut bytes: Vec<u8> = (0..len)
        .map(|index| b'a' + ((index + seed as usize) % 26) as u8)
        .collect();
    for at in (0..len.saturating_sub(MARKER.len())).step_by(331) {
        bytes[at..at + MARKER.len()].copy_from_slice(MARKER);
    }
    Bytes::from(bytes)
}

#[test]
fn a_tenants_and_the_operators_payloads_never_reach_the_disk_in_plain_text() {
    let dir = tempfile::tempdir().unwrap();
    let files = files(dir.path());
    let mut server = launch(&files, &["--master-key-file", &files.key]).start();
    let payloads: Vec<Bytes> = [(1, 300), (2, 6_000), (3, 100_000)]
        .into_iter()
        .map(|(seed, len)| payload(seed, len))
        .collect();
    for token in [ACME, OPERATOR] {
        let client = client(&server, token);
        let context = client.create_context().unwrap().context_id;
        for payload in &payloads {
            client.append(context, None, 0, 0, payload.clone()).unwrap();
        }
        for payload in &payloads {
            let read = client.blob(BlobHash::of(payload)).unwrap();
            assert_eq!(read, *payload);
        }
    }
    server.stop(Duration::from_secs(20)).unwrap();
    assert_eq!(files_holding(&files.data, MARKER), Vec::<String>::new());

    let verified = Command::new(SERVER)
        .args(["verify", "--master-key-file", &files.key, "--data"])
        .arg(&files.data)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&verified.stdout);
    assert!(verified.status.success(), "{stdout}");
    assert!(stdout.contains("sealed"), "{stdout}");

    // A wrong key: refused at start, naming the check; nothing served.
    let Err(refused) = launch(&files, &["--master-key-file", &files.other_key]).try_start() else {
        panic!("a wrong master key must refuse the start")
    };
    assert!(
        refused.to_string().contains("master-key check"),
        "{refused}"
    );
    // No key at all: refused, naming the flag.
    let Err(refused) = launch(&files, &[]).try_start() else {
        panic!("a sealing store must not start without its master key")
    };
    assert!(
        refused.to_string().contains("--master-key-file"),
        "{refused}"
    );

    // The key from a command (a secret manager's client).
    let command = format!("cat {}", files.key);
    let server = launch(&files, &["--master-key-command", &command]).start();
    let client = client(&server, ACME);
    for payload in &payloads {
        assert_eq!(client.blob(BlobHash::of(payload)).unwrap(), *payload);
    }
}

#[test]
fn sealing_with_replication_is_refused_until_the_keyring_ships() {
    let dir = tempfile::tempdir().unwrap();
    let files = files(dir.path());
    let Err(refused) = launch(
        &files,
        &[
            "--master-key-file",
            &files.key,
            "--replicate-to",
            "file:///nonexistent/replica",
        ],
    )
    .try_start() else {
        panic!("sealing with --replicate-to must be refused")
    };
    assert!(refused.to_string().contains("keyring"), "{refused}");
    let Err(refused) = launch(&files, &["--master-key-command", "exit 3"]).try_start() else {
        panic!("a failing key command must refuse the start")
    };
    assert!(
        refused.to_string().contains("--master-key-command"),
        "{refused}"
    );
}
