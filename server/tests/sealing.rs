//! Payloads sealed at rest through the binary (issue 48, decision 0032 §4–§5):
//! `--master-key-file` with a tenants file; a marker a tenant and the operator append is
//! nowhere in the data directory in plain text; `verify --master-key-file` opens every sealed
//! body; a wrong master key refuses the start, naming the check, and serves nothing;
//! `--master-key-command` reads the key from a command. With replication (decision 0032 §5):
//! the replica's objects and a standby's directory hold no marker either; the keyring goes to
//! the replica (`PREFIX/keyring`), a standby installs it (a tenant added later is readable
//! there too), and a restore writes it, so the restored store opens under the master key.
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

#[derive(Clone)]
struct Files {
    data: std::path::PathBuf,
    tenants: String,
    key: String,
    other_key: String,
    /// The object store's settings (SeaweedFS's; none for a `file://` replica).
    env: Vec<(String, String)>,
}

impl Files {
    /// The same tenants file and keys, another store.
    fn at(&self, data: std::path::PathBuf) -> Files {
        Files {
            data,
            ..self.clone()
        }
    }
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
        env: Vec::new(),
    }
}

fn launch(files: &Files, key_flags: &[&str]) -> ServerLaunch {
    let mut flags = vec!["--tenants-file", files.tenants.as_str()];
    flags.extend_from_slice(key_flags);
    ServerLaunch::new(SERVER)
        .data(&files.data)
        .token(Some(OPERATOR))
        .flags(&flags)
        .envs(&files.env)
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

    // A backup holds no key: it starts beside the live store's keyring (--keyring-from).
    let copy = dir.path().join("backup");
    let backed_up = Command::new(SERVER)
        .args(["backup", "--master-key-file", &files.key, "--data"])
        .arg(&files.data)
        .arg("--to")
        .arg(&copy)
        .output()
        .unwrap();
    assert!(backed_up.status.success(), "{backed_up:?}");
    let backup_files = files.at(copy.clone());
    let Err(refused) = launch(&backup_files, &["--master-key-file", &files.key]).try_start() else {
        panic!("a backup must not start without its keyring")
    };
    assert!(refused.to_string().contains("keyring"), "{refused}");
    let live_keyring = files.data.join("keyring").display().to_string();
    let mut from = vec!["--master-key-file", files.key.as_str()];
    from.extend(["--keyring-from", live_keyring.as_str()]);
    let restored = launch(&backup_files, &from).start();
    let operator = client(&restored, OPERATOR);
    for payload in &payloads {
        assert_eq!(operator.blob(BlobHash::of(payload)).unwrap(), *payload);
    }
    drop((operator, restored));
    // A file that is no keyring under the key: refused, nothing copied.
    std::fs::write(copy.join("keyring.other"), b"not a keyring").unwrap();
    let other = copy.join("keyring.other").display().to_string();
    let mut from = vec!["--master-key-file", files.key.as_str()];
    from.extend(["--keyring-from", other.as_str()]);
    assert!(launch(&backup_files, &from).try_start().is_err());

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
    let mut server = launch(&files, &["--master-key-command", &command]).start();
    let acme = client(&server, ACME);
    for payload in &payloads {
        assert_eq!(acme.blob(BlobHash::of(payload)).unwrap(), *payload);
    }
    // A tenant's data key rotated: what it stored before reads as before, and so does
    // what it stores after.
    let operator = client(&server, OPERATOR);
    let rotated = operator.rotate_tenant_key("acme").unwrap();
    assert_eq!(rotated.key_version, 1);
    assert_eq!(operator.rotate_tenant_key("operator").unwrap().tenant_id, 0);
    assert!(
        acme.rotate_tenant_key("acme").is_err(),
        "the operator's only"
    );
    let context = acme.create_context().unwrap().context_id;
    let after = payload(9, 5_000);
    acme.append(context, None, 0, 0, after.clone()).unwrap();
    for payload in payloads.iter().chain([&after]) {
        assert_eq!(acme.blob(BlobHash::of(payload)).unwrap(), *payload);
    }
    drop((acme, operator));
    server.stop(Duration::from_secs(20)).unwrap();

    // The master key rotated: the new key first, the old one second; the start rewraps the
    // keyring, and from then on the new key alone opens the store and the old one does not.
    std::fs::write(&files.key, format!("{OTHER_KEY}\n{KEY}\n")).unwrap();
    let mut server = launch(&files, &["--master-key-file", &files.key]).start();
    server.stop(Duration::from_secs(20)).unwrap();
    std::fs::write(&files.key, format!("{OTHER_KEY}\n")).unwrap();
    let server = launch(&files, &["--master-key-file", &files.key]).start();
    let acme = client(&server, ACME);
    for payload in payloads.iter().chain([&after]) {
        assert_eq!(acme.blob(BlobHash::of(payload)).unwrap(), *payload);
    }
    drop(acme);
    drop(server);
    std::fs::write(&files.key, format!("{KEY}\n")).unwrap();
    let Err(refused) = launch(&files, &["--master-key-file", &files.key]).try_start() else {
        panic!("the old master key must open nothing after a rotation")
    };
    assert!(
        refused.to_string().contains("master-key check"),
        "{refused}"
    );
}

/// Waits until `read` answers `Some`, or fails after a while naming `what`.
fn eventually<T>(what: &str, mut read: impl FnMut() -> Option<T>) -> T {
    let started = std::time::Instant::now();
    loop {
        if let Some(value) = read() {
            return value;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never saw {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Everything acknowledged has shipped: the primary's replication figures say so.
fn shipped(server: &TestServer, records_min: u64) {
    let operator = client(server, OPERATOR);
    eventually("everything shipped", || {
        let stats = operator.replication_stats().unwrap();
        (stats.lag_bytes == 0 && stats.records >= records_min).then_some(())
    });
}

/// A sealing primary shipping to `url` every 50 ms.
fn shipping(files: &Files, url: &str) -> TestServer {
    let flags = [
        "--master-key-file",
        files.key.as_str(),
        "--replicate-to",
        url,
        "--replicate-interval",
        "50ms",
    ];
    launch(files, &flags).start()
}

#[test]
fn the_replica_a_standby_and_a_restore_hold_sealed_bytes_and_open_them_with_the_keyring() {
    let dir = tempfile::tempdir().unwrap();
    let replica = dir.path().join("replica");
    let url = format!("file://{}", replica.display());
    sealed_replication(dir.path(), &url, Vec::new(), Some(&replica));
}

/// The same on SeaweedFS (`.ci/run` starts it): the keyring object's conditional writes on a
/// real S3 server. Its objects are not grepped here (the `file://` case greps its files).
#[test]
fn the_keyring_travels_through_seaweedfs() {
    let Some((url, env)) = common::seaweedfs("sealing") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    sealed_replication(dir.path(), &url, env, None);
}

/// A sealing primary ships to `url`; a standby under the same key serves what it shipped, a
/// tenant added later included; a restore with the key serves it, one without is refused.
/// `replica`: the replica's directory, when it is one, grepped for the marker.
fn sealed_replication(dir: &Path, url: &str, env: Vec<(String, String)>, replica: Option<&Path>) {
    let files = Files { env, ..files(dir) };
    let primary = shipping(&files, url);
    let acme = client(&primary, ACME);
    let context = acme.create_context().unwrap().context_id;
    let payloads: Vec<Bytes> = [(4, 700), (5, 40_000)]
        .into_iter()
        .map(|(seed, len)| payload(seed, len))
        .collect();
    for payload in &payloads {
        acme.append(context, None, 0, 0, payload.clone()).unwrap();
    }
    // An open stream's deltas ship as log records: sealed there too.
    let stream = acme
        .open_stream(context, ctxstore_client::NewStream::new(1, 0))
        .unwrap();
    let delta = Bytes::from([MARKER, b" streamed"].concat());
    acme.append_delta(stream.stream_id, None, delta.clone())
        .unwrap();
    shipped(&primary, 4);
    if let Some(replica) = replica {
        assert!(
            replica.join("keyring").exists(),
            "the keyring went to the replica"
        );
        assert_eq!(files_holding(replica, MARKER), Vec::<String>::new());
    }

    // A standby with the same key installs the keyring and serves acme's data.
    let standby_data = dir.join("standby");
    let follow = ["--follow", url, "--replicate-interval", "50ms"];
    let mut standby_flags = vec!["--master-key-file", files.key.as_str()];
    standby_flags.extend_from_slice(&follow);
    let standby_files = files.at(standby_data.clone());
    let standby = launch(&standby_files, &standby_flags).start();
    let on_standby = client(&standby, ACME);
    for payload in &payloads {
        let hash = BlobHash::of(payload);
        let read = eventually("acme's payload on the standby", || {
            on_standby.blob(hash).ok()
        });
        assert_eq!(read, *payload);
    }
    let chunk = eventually("the stream on the standby", || {
        on_standby
            .read_stream(stream.stream_id, 0, 1 << 20, None)
            .ok()
            .filter(|chunk| chunk.bytes.len() == delta.len())
    });
    assert_eq!(chunk.bytes, delta);

    // A tenant added now gets new keys; the standby installs the replaced keyring.
    let globex_token = "globex-token-0123456789abcd";
    let tenants = std::fs::read_to_string(&files.tenants).unwrap()
        + &format!(
            "\n[[tenant]]\nname = \"globex\"\ntokens = [\"{globex_token}\"]\nrights = \
             [\"read\", \"write\"]\n"
        );
    std::fs::write(&files.tenants, tenants).unwrap();
    // Both read the file again (it is the same file here).
    primary.signal("HUP");
    standby.signal("HUP");
    let globex = eventually("globex let in", || {
        let mut config = ClientConfig::new(primary.addr.clone());
        config.token = Some(globex_token.to_string());
        blocking::Client::connect(config).ok()
    });
    let theirs = globex.create_context().unwrap().context_id;
    let secret = payload(6, 3_000);
    globex.append(theirs, None, 0, 0, secret.clone()).unwrap();
    let globex_on_standby = eventually("globex on the standby", || {
        let mut config = ClientConfig::new(standby.addr.clone());
        config.token = Some(globex_token.to_string());
        blocking::Client::connect(config).ok()
    });
    let read = eventually("globex's payload on the standby", || {
        globex_on_standby.blob(BlobHash::of(&secret)).ok()
    });
    assert_eq!(read, secret);
    shipped(&primary, 7);
    drop((acme, globex, on_standby, globex_on_standby));
    drop(standby);
    drop(primary);
    if let Some(replica) = replica {
        assert_eq!(files_holding(replica, MARKER), Vec::<String>::new());
    }
    assert_eq!(files_holding(&standby_data, MARKER), Vec::<String>::new());

    // A restore writes the replica's keyring and opens under the key; without the key it
    // refuses, naming the flag.
    let restore = |to: &Path, key: &[&str]| {
        Command::new(SERVER)
            .args(["restore", "--from", url, "--to"])
            .arg(to)
            .args(key)
            .envs(files.env.iter().cloned())
            .output()
            .unwrap()
    };
    let keyless = restore(&dir.join("keyless"), &[]);
    assert!(!keyless.status.success());
    let stderr = String::from_utf8_lossy(&keyless.stderr);
    assert!(stderr.contains("--master-key-file"), "{stderr}");
    let restored = dir.join("restored");
    let output = restore(&restored, &["--master-key-file", &files.key]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(files_holding(&restored, MARKER), Vec::<String>::new());
    let restored_files = files.at(restored);
    let server = launch(&restored_files, &["--master-key-file", &files.key]).start();
    let acme = client(&server, ACME);
    for payload in &payloads {
        assert_eq!(acme.blob(BlobHash::of(payload)).unwrap(), *payload);
    }
}

#[test]
fn a_standby_with_another_master_key_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let files = files(dir.path());
    let url = format!("file://{}", dir.path().join("replica").display());
    let primary = shipping(&files, &url);
    let acme = client(&primary, ACME);
    let context = acme.create_context().unwrap().context_id;
    acme.append(context, None, 0, 0, payload(7, 500)).unwrap();
    shipped(&primary, 2);
    let standby_files = files.at(dir.path().join("standby"));
    let follow = [
        "--master-key-file",
        files.other_key.as_str(),
        "--follow",
        url.as_str(),
    ];
    let Err(refused) = launch(&standby_files, &follow).try_start() else {
        panic!("a standby under another master key must not start")
    };
    assert!(
        refused.to_string().contains("master-key check"),
        "{refused}"
    );
    let Err(refused) = launch(&standby_files, &["--follow", url.as_str()]).try_start() else {
        panic!("a standby without the master key must not start")
    };
    assert!(
        refused.to_string().contains("--master-key-file"),
        "{refused}"
    );
}

#[test]
fn deleting_a_tenant_erases_it_on_the_standby_and_at_every_restore_point() {
    let dir = tempfile::tempdir().unwrap();
    let replica = dir.path().join("replica");
    let url = format!("file://{}", replica.display());
    erasure(dir.path(), &url, Vec::new(), Some(&replica));
}

/// The same on SeaweedFS: the replica's `keyring` object replaced on a real S3 server.
#[test]
fn a_tenants_deletion_reaches_seaweedfs() {
    let Some((url, env)) = common::seaweedfs("erasure") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    erasure(dir.path(), &url, env, None);
}

/// Whether `keyring` (a keyring file's bytes) holds live keys of tenant `tenant_id`.
fn holds_keys_of(keyring: &[u8], tenant_id: u32) -> bool {
    let master = ctxstore_engine::seal::MasterKey::from_hex(KEY).unwrap();
    let keyring = ctxstore_engine::seal::Keyring::decode(keyring, &master).unwrap();
    matches!(
        keyring.tenant(tenant_id),
        Some(ctxstore_engine::seal::TenantKeys::Live { .. })
    )
}

/// Erasure (decision 0032 §6) through the binary: TENANT_DELETE on a sealing primary that
/// replicates answers once the object store holds the deletion; the tenant's open connection
/// and its token are refused; the standby drops its keys and refuses its token; a restore of
/// a point before the deletion does not bring it back (its keys are not in the replica's
/// keyring, the restored store finishes the deletion); the operator's data is untouched.
fn erasure(dir: &Path, url: &str, env: Vec<(String, String)>, replica: Option<&Path>) {
    use ctxstore_client::tenant_deleted_flags::{KEYS_DESTROYED, REPLICA_UPDATED};
    let files = Files { env, ..files(dir) };
    let primary = shipping(&files, url);
    let acme = client(&primary, ACME);
    let context = acme.create_context().unwrap().context_id;
    let secret = payload(7, 20_000);
    acme.append(context, None, 0, 0, secret.clone()).unwrap();
    let stream = acme
        .open_stream(context, ctxstore_client::NewStream::new(1, 0))
        .unwrap();
    let delta = Bytes::from([MARKER, b" streamed"].concat());
    acme.append_delta(stream.stream_id, None, delta).unwrap();
    let operator = client(&primary, OPERATOR);
    let ours = operator.create_context().unwrap().context_id;
    let kept = payload(8, 3_000);
    let before = operator.append(ours, None, 0, 0, kept.clone()).unwrap();
    shipped(&primary, 5);

    let standby_data = dir.join("standby");
    let follow = ["--follow", url, "--replicate-interval", "50ms"];
    let mut standby_flags = vec!["--master-key-file", files.key.as_str()];
    standby_flags.extend_from_slice(&follow);
    let standby = launch(&files.at(standby_data.clone()), &standby_flags).start();
    let on_standby = client(&standby, ACME);
    let read = eventually("acme's payload on the standby", || {
        on_standby.blob(BlobHash::of(&secret)).ok()
    });
    assert_eq!(read, secret);
    let acme_id = eventually("acme's id", || {
        let tenants = operator.tenants().ok()?;
        let acme = tenants.iter().find(|tenant| tenant.name == "acme")?;
        Some(acme.tenant_id)
    });

    let deleted = operator.delete_tenant("acme").unwrap();
    assert_eq!(deleted.tenant_id, acme_id);
    assert_eq!(deleted.flags, KEYS_DESTROYED | REPLICA_UPDATED);
    assert_eq!(operator.delete_tenant("acme").unwrap().tenant_id, acme_id);
    assert!(operator.delete_tenant("nobody").is_err());
    // The connection it still holds is refused; so is its token on a new one.
    let refused = acme.blob(BlobHash::of(&secret)).unwrap_err();
    assert!(refused.to_string().contains("deleted"), "{refused}");
    let mut config = ClientConfig::new(primary.addr.clone());
    config.token = Some(ACME.to_string());
    assert!(blocking::Client::connect(config).is_err());
    let listed = operator.tenants().unwrap();
    let acme_listed = listed.iter().find(|tenant| tenant.name == "acme").unwrap();
    assert_ne!(
        acme_listed.flags & ctxstore_client::tenant_flags::DELETED,
        0
    );
    assert!(!holds_keys_of(
        &std::fs::read(files.data.join("keyring")).unwrap(),
        acme_id
    ));
    if let Some(replica) = replica {
        let object = std::fs::read(replica.join("keyring")).unwrap();
        assert!(
            !holds_keys_of(&object, acme_id),
            "the replica's keyring forgot acme"
        );
    }

    // The standby installs the keyring without acme's keys and refuses its token.
    eventually("acme refused on the standby", || {
        let keyring = std::fs::read(standby_data.join("keyring")).ok()?;
        (!holds_keys_of(&keyring, acme_id)).then_some(())
    });
    assert!(on_standby.blob(BlobHash::of(&secret)).is_err());
    let mut config = ClientConfig::new(standby.addr.clone());
    config.token = Some(ACME.to_string());
    assert!(blocking::Client::connect(config).is_err());
    drop((acme, on_standby, operator));
    drop(standby);
    drop(primary);
    if let Some(replica) = replica {
        assert_eq!(files_holding(replica, MARKER), Vec::<String>::new());
    }

    // A point before the deletion: acme's records are in it, its keys are not.
    let restored = dir.join("restored");
    let output = Command::new(SERVER)
        .args(["restore", "--from", url, "--to"])
        .arg(&restored)
        .args(["--at-seq", &before.turn.turn_id.to_string()])
        .args(["--master-key-file", &files.key])
        .envs(files.env.iter().cloned())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let server = launch(&files.at(restored), &["--master-key-file", &files.key]).start();
    let mut config = ClientConfig::new(server.addr.clone());
    config.token = Some(ACME.to_string());
    assert!(
        blocking::Client::connect(config).is_err(),
        "acme never comes back"
    );
    let operator = client(&server, OPERATOR);
    assert_eq!(operator.blob(BlobHash::of(&kept)).unwrap(), kept);
    let listed = operator.tenants().unwrap();
    let acme_listed = listed.iter().find(|tenant| tenant.name == "acme").unwrap();
    assert_ne!(
        acme_listed.flags & ctxstore_client::tenant_flags::DELETED,
        0
    );
    assert_eq!(acme_listed.contexts, 0);
}
