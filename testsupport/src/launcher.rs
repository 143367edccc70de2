//! The one server launcher: `ctxstore-server` on a temporary directory and a free loopback port
//! (`--listen 127.0.0.1:0`), its address read from the `--ready-file` it writes once it serves.
//! For the end-to-end tests of every package and for `ctxstore-loadgen --spawn-server`.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Why a server did not start or stop as asked.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("starting {binary}: {source}")]
    Spawn {
        binary: PathBuf,
        source: std::io::Error,
    },
    #[error("ctxstore-server exited ({status}) before it was ready; its log:\n{log}")]
    Exited { status: ExitStatus, log: String },
    #[error(
        "ctxstore-server did not write its ready file {ready} within {timeout:?}; its log:\n{log}"
    )]
    NotReady {
        ready: PathBuf,
        timeout: Duration,
        log: String,
    },
    #[error("ctxstore-server stopped with {status} after SIGTERM; its log is in {dir}")]
    Stopped { status: ExitStatus, dir: PathBuf },
    #[error("ctxstore-server did not stop within {timeout:?} of SIGTERM")]
    StillRunning { timeout: Duration },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LaunchError {
    let what = what.into();
    move |source| LaunchError::Io { what, source }
}

/// How to start a server: `ServerLaunch::new(binary)`, then what differs from the defaults
/// (its own data directory in the temporary directory, no token, its log discarded, 30 s to
/// become ready), then `start`.
#[derive(Debug, Clone)]
pub struct ServerLaunch {
    binary: PathBuf,
    data: Option<PathBuf>,
    flags: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    token: Option<String>,
    keep_log: bool,
    ready_timeout: Duration,
    temp_prefix: String,
    /// `--listen`: `127.0.0.1:0` (a free port) unless a test needs a fixed one.
    listen: String,
}

impl ServerLaunch {
    pub fn new(binary: impl Into<PathBuf>) -> ServerLaunch {
        ServerLaunch {
            binary: binary.into(),
            data: None,
            flags: Vec::new(),
            env: Vec::new(),
            token: None,
            keep_log: false,
            ready_timeout: Duration::from_secs(30),
            temp_prefix: "ctxstore-test-".into(),
            listen: "127.0.0.1:0".into(),
        }
    }

    /// Listen on `addr` (`127.0.0.1:PORT`) instead of a free port: a member that replaces a
    /// lost one at the address its clients already know.
    pub fn listen(mut self, addr: &str) -> ServerLaunch {
        self.listen = addr.to_string();
        self
    }

    /// Serve the store in `data` (kept after the server goes), not a fresh one.
    pub fn data(mut self, data: &Path) -> ServerLaunch {
        self.data = Some(data.to_path_buf());
        self
    }

    /// More flags after `--data`, `--listen` and `--ready-file` (e.g. `--read-turns-max 4`).
    pub fn flags<S: AsRef<std::ffi::OsStr>>(mut self, flags: &[S]) -> ServerLaunch {
        self.flags
            .extend(flags.iter().map(|flag| flag.as_ref().to_os_string()));
        self
    }

    /// More environment for the server (`AWS_*` for a replica on an object store, `RUST_LOG`).
    pub fn envs<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
        mut self,
        env: &[(K, V)],
    ) -> ServerLaunch {
        self.env.extend(
            env.iter()
                .map(|(key, value)| (key.as_ref().to_os_string(), value.as_ref().to_os_string())),
        );
        self
    }

    /// Require this token (`--token-file`, written in the temporary directory).
    pub fn token(mut self, token: Option<&str>) -> ServerLaunch {
        self.token = token.map(str::to_string);
        self
    }

    /// Keep the server's log (stderr) in `server.log` of the temporary directory
    /// (`TestServer::log`); without, it is discarded.
    pub fn keep_log(mut self) -> ServerLaunch {
        self.keep_log = true;
        self
    }

    /// How long the server may take to write its ready file.
    pub fn ready_timeout(mut self, timeout: Duration) -> ServerLaunch {
        self.ready_timeout = timeout;
        self
    }

    /// The name the temporary directory starts with.
    pub fn temp_prefix(mut self, prefix: &str) -> ServerLaunch {
        self.temp_prefix = prefix.to_string();
        self
    }

    /// Starts the server and waits until it is ready (or exits, or the ready timeout passes).
    pub fn try_start(self) -> Result<TestServer, LaunchError> {
        let dir = tempfile::Builder::new()
            .prefix(&self.temp_prefix)
            .tempdir()
            .map_err(io("creating a temporary directory"))?;
        let data = self.data.unwrap_or_else(|| dir.path().join("data"));
        let ready = dir.path().join("ready");
        let log = dir.path().join("server.log");
        let mut command = Command::new(&self.binary);
        command
            .arg("--data")
            .arg(&data)
            .arg("--listen")
            .arg(&self.listen)
            .arg("--ready-file")
            .arg(&ready)
            .args(&self.flags)
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .stdout(Stdio::null());
        if self.keep_log {
            let file = std::fs::File::create(&log).map_err(io(log.display().to_string()))?;
            command.stderr(file);
        } else {
            command.stderr(Stdio::null());
        }
        if let Some(token) = &self.token {
            let file = dir.path().join("token");
            std::fs::write(&file, token).map_err(io(file.display().to_string()))?;
            command.arg("--token-file").arg(&file);
        }
        let mut child = command.spawn().map_err(|source| LaunchError::Spawn {
            binary: self.binary.clone(),
            source,
        })?;
        let kept = self.keep_log.then_some(log.as_path());
        match wait_ready(&ready, &mut child, self.ready_timeout, kept) {
            Ok(addr) => Ok(TestServer {
                child,
                addr,
                data,
                dir,
            }),
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(error)
            }
        }
    }

    /// `try_start` for a test: a server that does not start fails the test, saying why.
    pub fn start(self) -> TestServer {
        match self.try_start() {
            Ok(server) => server,
            Err(error) => panic!("{error}"),
        }
    }
}

/// Waits until `child` has written its address to `ready` (a line ending in a newline: the
/// server writes the file whole, then renames it), and answers the address. An exit first,
/// or `timeout` passing, is an error with the server's log if it is kept in `log`. For tests
/// that start a server their own way (another listen address, a config file).
pub fn wait_ready(
    ready: &Path,
    child: &mut Child,
    timeout: Duration,
    log: Option<&Path>,
) -> Result<String, LaunchError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(addr) = std::fs::read_to_string(ready)
            && addr.ends_with('\n')
        {
            return Ok(addr.trim().to_string());
        }
        let log = || {
            log.and_then(|log| std::fs::read_to_string(log).ok())
                .unwrap_or_default()
        };
        if let Some(status) = child
            .try_wait()
            .map_err(io("waiting for ctxstore-server"))?
        {
            return Err(LaunchError::Exited { status, log: log() });
        }
        if Instant::now() > deadline {
            return Err(LaunchError::NotReady {
                ready: ready.to_path_buf(),
                timeout,
                log: log(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running server, killed (SIGKILL) when dropped if it still runs.
#[derive(Debug)]
pub struct TestServer {
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The store it serves.
    pub data: PathBuf,
    /// Its temporary directory: the ready file, the token file, its log, and its store unless
    /// one was given.
    pub dir: tempfile::TempDir,
}

impl TestServer {
    /// The workspace's server (`server_binary`) on a fresh store, with a token when given:
    /// what the client's and the CLI's tests start.
    pub fn start(token: Option<&str>) -> TestServer {
        TestServer::start_with(token, &[])
    }

    /// `start` with more server flags (like `--read-turns-max 4`, to make pages short).
    pub fn start_with(token: Option<&str>, flags: &[&str]) -> TestServer {
        ServerLaunch::new(crate::server_binary())
            .token(token)
            .flags(flags)
            .start()
    }

    /// The address as a socket address.
    pub fn socket_addr(&self) -> SocketAddr {
        match self.addr.parse() {
            Ok(addr) => addr,
            Err(error) => panic!("the server's ready file holds {:?}: {error}", self.addr),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends the signal `name` (`TERM`, `INT`, `KILL`, …) with `kill`.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status();
        assert!(
            status.is_ok_and(|status| status.success()),
            "kill -{name} {}",
            self.pid()
        );
    }

    /// SIGSTOP, and waits until every thread of the server has stopped. A stop is
    /// asynchronous: `kill` returns once the signal is queued, and a thread that is running
    /// or not yet scheduled goes on until it next enters the kernel — long enough, on a busy
    /// machine, to answer a request sent right after. Tests that need a request stuck on a
    /// paused server send it only once this returns.
    pub fn pause(&self) {
        self.signal("STOP");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !all_threads_stopped(self.pid()) {
            assert!(
                Instant::now() < deadline,
                "the server (pid {}) did not stop within 10 s of SIGSTOP",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits for the process to exit, at most `limit`; `None` if it is still running.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the server logged (`ServerLaunch::keep_log`).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// SIGTERM, then up to `timeout` for the graceful stop, which must succeed.
    pub fn stop(&mut self, timeout: Duration) -> Result<(), LaunchError> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        match self.wait_exit(timeout) {
            Some(status) if status.success() => Ok(()),
            Some(status) => Err(LaunchError::Stopped {
                status,
                dir: self.dir.path().to_path_buf(),
            }),
            None => Err(LaunchError::StillRunning { timeout }),
        }
    }

    /// Kills the server (SIGKILL: a crash, nothing flushed) and waits for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// `ctxstore-server verify --data DATA` (`binary`), which must pass; its report.
pub fn verified(binary: &Path, data: &Path) -> String {
    let output = Command::new(binary)
        .arg("verify")
        .arg("--data")
        .arg(data)
        .output();
    let output = match output {
        Ok(output) => output,
        Err(error) => panic!("running {} verify: {error}", binary.display()),
    };
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "verify of {}: {report}{}",
        data.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    report
}

/// Whether every thread of process `pid` is in the stopped state (`T`, or `t` when traced),
/// from `/proc/PID/task/*/stat`: the state is the first field after the command's `)`.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut seen = 0_usize;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue; // the thread exited meanwhile
        };
        let state = stat
            .rfind(") ")
            .and_then(|end| stat[end + 2..].chars().next());
        if !matches!(state, Some('T' | 't')) {
            return false;
        }
        seen += 1;
    }
    seen > 0
}
