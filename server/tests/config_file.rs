//! Settings through the real binary: command line > CTXSTORE_<FLAG> > --config file >
//! default, as `--print-config` reports it and as a started server uses it; unknown keys and
//! bad values name the file line; `--version`; `--log-format json`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use ctxstore_testsupport::wait_ready;

/// The server binary with no CTXSTORE_* variable of the test's own environment.
fn server() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ctxstore-server"));
    for (name, _) in std::env::vars() {
        if name.starts_with("CTXSTORE_") {
            command.env_remove(name);
        }
    }
    command
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The line of `--print-config` output for `key`.
fn line<'a>(printed: &'a str, key: &str) -> &'a str {
    printed
        .lines()
        .find(|line| line.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in\n{printed}"))
}

/// What `--print-config` prints when given its own printout as the config file (which must
/// start).
fn reprinted(dir: &Path, printed: &str) -> String {
    let file = write(dir, "printed.toml", printed);
    let output = server()
        .arg("--config")
        .arg(&file)
        .arg("--print-config")
        .output()
        .unwrap();
    let (again, stderr) = text(&output);
    assert!(output.status.success(), "{again}{stderr}");
    again
}

fn write(dir: &Path, name: &str, contents: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

#[test]
fn flag_beats_environment_beats_file_beats_default() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "server.toml",
        "# ctxstore\n\
         network-cores = 1\n\
         zstd-level = 3\n\
         idle-timeout = \"2m\"\n\
         listen = \"localhost:7500\"\n\
         network-core-cpus = [0]\n",
    );
    let output = server()
        .arg("--config")
        .arg(&file)
        .args(["--zstd-level", "5", "--print-config"])
        .env("CTXSTORE_NETWORK_CORES", "1")
        .env("CTXSTORE_ZSTD_LEVEL", "4")
        .env("CTXSTORE_HAS_BLOBS_MAX", "100")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}{stderr}");
    let file = file.display();
    // Flag over env over file.
    assert!(
        line(&stdout, "zstd-level").ends_with("# command line"),
        "{stdout}"
    );
    assert!(line(&stdout, "zstd-level").starts_with("zstd-level = 5 "));
    // Env over file.
    assert!(line(&stdout, "network-cores").starts_with("network-cores = 1 "));
    assert!(line(&stdout, "network-cores").ends_with("# environment CTXSTORE_NETWORK_CORES"));
    // Env over default.
    assert!(line(&stdout, "has-blobs-max").starts_with("has-blobs-max = 100 "));
    // File over default, with its line.
    assert!(line(&stdout, "idle-timeout").starts_with("idle-timeout = \"2m\" "));
    assert!(
        line(&stdout, "idle-timeout").ends_with(&format!("# {file}:4")),
        "{stdout}"
    );
    assert!(line(&stdout, "listen").ends_with(&format!("# {file}:5")));
    assert!(line(&stdout, "network-core-cpus").starts_with("network-core-cpus = [0] "));
    // Default.
    assert!(line(&stdout, "frame-bytes-max").ends_with("# default"));
    assert!(
        stdout.contains("# token-file ="),
        "unset settings are listed too"
    );
    // Settings worked out at start show the value the server uses, as comments (issue 29).
    assert!(
        line(&stdout, "# shards").starts_with("# shards = 1 "),
        "{stdout}"
    );
    assert!(
        line(&stdout, "# shards").contains("# not set: "),
        "{stdout}"
    );
    assert!(line(&stdout, "# placement").starts_with("# placement = \"seq|s0\" "));
    assert!(
        line(&stdout, "# connections-unauthenticated-max")
            .starts_with("# connections-unauthenticated-max = 256 "),
        "{stdout}"
    );

    // The printed configuration is itself a config file that gives the same result.
    let again = reprinted(dir.path(), &stdout);
    assert!(line(&again, "zstd-level").starts_with("zstd-level = 5 "));
    assert!(line(&again, "has-blobs-max").starts_with("has-blobs-max = 100 "));
}

#[test]
fn unknown_keys_and_bad_values_are_errors_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let unknown = write(
        dir.path(),
        "unknown.toml",
        "listen = \"127.0.0.1:7411\"\n\nnetwork_cores = 2\n",
    );
    let output = server().arg("--config").arg(&unknown).output().unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "config file {}, line 3: unknown setting `network_cores`",
            unknown.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("did you mean network-cores?"), "{stderr}");

    let bad = write(dir.path(), "bad.toml", "idle-timeout = \"soon\"\n");
    let output = server().arg("--config").arg(&bad).output().unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("line 1: `idle-timeout`"), "{stderr}");
    assert!(stderr.contains("soon"), "{stderr}");

    let missing = dir.path().join("missing.toml");
    let output = server().arg("--config").arg(&missing).output().unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot read the config file"), "{stderr}");

    // A valid file with an invalid combination: --print-config says so and exits 1.
    let open = write(dir.path(), "open.toml", "listen = \"0.0.0.0:7411\"\n");
    let output = server()
        .arg("--config")
        .arg(&open)
        .arg("--print-config")
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("without a token"), "{stderr}");
}

#[test]
fn a_server_started_from_a_config_file_uses_it_and_logs_json() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let config = write(
        dir.path(),
        "server.toml",
        &format!(
            "data = {:?}\nlisten = \"localhost:0\"\nready-file = {:?}\nlog-format = \"json\"\n",
            dir.path().join("data").display().to_string(),
            ready.display().to_string()
        ),
    );
    let log = std::fs::File::create(dir.path().join("log")).unwrap();
    let mut child = server()
        .arg("--config")
        .arg(&config)
        .stderr(log)
        .spawn()
        .unwrap();
    let addr = wait_ready(&ready, &mut child, Duration::from_secs(30), None);
    let addr: std::net::SocketAddr = addr.unwrap().parse().unwrap();
    assert!(addr.ip().is_loopback(), "localhost resolved to {addr}");
    std::net::TcpStream::connect(addr).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
    let first = log.lines().next().expect("a log line");
    let parsed: serde_json::Value = serde_json::from_str(first).unwrap();
    assert!(parsed["level"].is_string() && parsed["fields"]["message"].is_string());
}

#[test]
fn version_is_printed() {
    let output = server().arg("--version").output().unwrap();
    let (stdout, _) = text(&output);
    assert!(output.status.success());
    assert_eq!(
        stdout.trim(),
        format!("ctxstore-server {}", env!("CARGO_PKG_VERSION"))
    );
}

/// Byte sizes take units (`32MiB`) on the command line, in the environment and in the file,
/// and plain integers still; `--print-config` shows them as given, a reprint is a valid config
/// file, a 32-bit size past 4 GiB names its key and line, and a server starts with them.
#[test]
fn byte_sizes_take_units_in_every_layer() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "sizes.toml",
        "frame-bytes-max = \"32MiB\"\n\
         pack-bytes-max = 268435456\n",
    );
    let output = server()
        .arg("--config")
        .arg(&file)
        .args(["--payload-cache-bytes", "32MiB", "--print-config"])
        .env("CTXSTORE_RESPONSE_BYTES_MAX", "32MiB")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(
        line(&stdout, "payload-cache-bytes").starts_with("payload-cache-bytes = \"32MiB\" "),
        "{stdout}"
    );
    assert!(line(&stdout, "payload-cache-bytes").ends_with("# command line"));
    assert!(line(&stdout, "response-bytes-max").starts_with("response-bytes-max = \"32MiB\" "));
    assert!(line(&stdout, "frame-bytes-max").starts_with("frame-bytes-max = \"32MiB\" "));
    assert!(line(&stdout, "pack-bytes-max").starts_with("pack-bytes-max = 268435456 "));
    assert!(
        line(&stdout, "shard-batch-bytes-max").starts_with("shard-batch-bytes-max = \"64MiB\" "),
        "{stdout}"
    );
    let again = reprinted(dir.path(), &stdout);
    assert!(line(&again, "payload-cache-bytes").starts_with("payload-cache-bytes = \"32MiB\" "));

    let big = write(dir.path(), "big.toml", "\nblob-bytes-max = \"5GiB\"\n");
    let output = server().arg("--config").arg(&big).output().unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("line 2: `blob-bytes-max`"), "{stderr}");
    assert!(stderr.contains("over 4 GiB"), "{stderr}");

    // A server starts with a size in units.
    let ready = dir.path().join("ready");
    let mut child = server()
        .arg("--data")
        .arg(dir.path().join("data"))
        .args(["--listen", "127.0.0.1:0", "--payload-cache-bytes", "32MiB"])
        .arg("--ready-file")
        .arg(&ready)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&ready).is_ok_and(|text| text.ends_with('\n')) {
        if std::time::Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!(
                "no server with --payload-cache-bytes 32MiB: {:?}",
                child.wait()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
