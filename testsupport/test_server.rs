//! A real `ctxstore-server` on a temporary directory and a free loopback port, for the
//! end-to-end tests of packages that cannot depend on the server (the client's CLI tests).
//! Shared by `#[path]`, next to `server_binary.rs` (declare both: this module uses it).
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct TestServer {
    child: Child,
    pub addr: String,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    /// Starts the server found beside `exe` (see `server_binary`), with a token file when
    /// `token` is given, and waits (30 s at most) until it names its address.
    pub fn start_beside(exe: &str, token: Option<&str>) -> TestServer {
        TestServer::start_beside_with(exe, token, &[])
    }

    /// `start_beside` with more server flags (like `--read-turns-max 4`, to make pages short).
    pub fn start_beside_with(exe: &str, token: Option<&str>, flags: &[&str]) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let mut command = Command::new(super::server_binary::server_binary_beside(exe));
        command
            .arg("--data")
            .arg(dir.path().join("data"))
            .args(["--listen", "127.0.0.1:0", "--ready-file"])
            .arg(&ready)
            .args(flags)
            .stderr(Stdio::null());
        if let Some(token) = token {
            let file = dir.path().join("token");
            std::fs::write(&file, token).unwrap();
            command.arg("--token-file").arg(&file);
        }
        let child = command.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = loop {
            if let Ok(addr) = std::fs::read_to_string(&ready)
                && addr.ends_with('\n')
            {
                break addr.trim().to_string();
            }
            assert!(Instant::now() < deadline, "server did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        TestServer { child, addr, dir }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
