//! The server's one listening socket and the thread that accepts on it.
//!
//! - **One owner per address.** The socket is bound without SO_REUSEPORT (SO_REUSEADDR only,
//!   for TIME_WAIT), so a second process on the same address fails to bind instead of
//!   splitting new connections with this one.
//! - **Connections live on one core.** The acceptor thread accepts with a blocking `accept`
//!   and hands each `std::net::TcpStream` to a network core over that core's channel, round
//!   robin; the core registers it on its own runtime (`compio::net::TcpStream::from_std`).
//! - **Handed over once** (a standby that waited for its replica, issue 44): `route_to`
//!   sends the connections accepted from then on to another set of cores; the socket stays
//!   open throughout, so a connect is never refused in between.
//! - **Lifetime.** The socket is not in any io_uring: this thread and `Acceptor` hold its only
//!   descriptors. `Acceptor::stop` shuts it down (the kernel takes it out of the listening
//!   table: a connect is refused from then on, and the blocked `accept` returns), joins the
//!   thread and closes the descriptor. When `stop` returns the socket no longer exists.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;

/// Connections the kernel may queue while the acceptor hands the previous ones over.
const LISTEN_BACKLOG: i32 = 1024;

/// Binds `addr` exclusively (no SO_REUSEPORT). A blocking socket: only the acceptor thread
/// accepts on it.
pub fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let bound = || -> std::io::Result<TcpListener> {
        let domain = socket2::Domain::for_address(addr);
        let socket =
            socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.bind(&addr.into())?;
        socket.listen(LISTEN_BACKLOG)?;
        Ok(socket.into())
    };
    match bound() {
        Ok(listener) => Ok(listener),
        Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => {
            Err(anyhow::Error::new(error).context(format!(
                "listening on {addr}: the address is already served by another process \
             (another ctxstore-server?); stop it or choose another --listen address"
            )))
        }
        Err(error) => Err(anyhow::Error::new(error).context(format!("listening on {addr}"))),
    }
}

/// The channels of the network cores that take the connections accepted.
type Cores = Vec<flume::Sender<(TcpStream, SocketAddr)>>;

/// The running acceptor thread.
#[derive(Debug)]
pub struct Acceptor {
    listener: Arc<TcpListener>,
    stopping: Arc<AtomicBool>,
    /// Locked once per accepted connection (by the acceptor thread alone, but for `route_to`).
    cores: Arc<Mutex<Cores>>,
    thread: JoinHandle<()>,
}

impl Acceptor {
    /// Starts accepting on `listener`, handing connections to `cores` round robin.
    pub fn start(listener: TcpListener, cores: Cores) -> anyhow::Result<Acceptor> {
        assert!(!cores.is_empty(), "at least one network core");
        let listener = Arc::new(listener);
        let stopping = Arc::new(AtomicBool::new(false));
        let cores = Arc::new(Mutex::new(cores));
        let thread = {
            let (listener, stopping, cores) = (listener.clone(), stopping.clone(), cores.clone());
            std::thread::Builder::new()
                .name("ctxstore-accept".to_string())
                .spawn(move || accept_loop(&listener, &stopping, &cores))
                .context("starting the acceptor thread")?
        };
        Ok(Acceptor {
            listener,
            stopping,
            cores,
            thread,
        })
    }

    /// Hands every connection accepted from now on to `cores` instead (round robin); the
    /// previous cores keep the ones they have. The socket stays open.
    pub fn route_to(&self, cores: Cores) {
        assert!(!cores.is_empty(), "at least one network core");
        // The lock holds only channel sends: a panic under it leaves the list whole.
        *self.cores.lock().unwrap_or_else(PoisonError::into_inner) = cores;
    }

    /// Closes the listening socket: connects are refused from the moment this is called;
    /// when it returns, the descriptor is closed.
    pub fn stop(self) {
        self.stopping.store(true, Ordering::Release);
        // On a listening socket, shutdown takes it out of the kernel's listening table and
        // wakes the blocked accept (EINVAL).
        if let Err(error) =
            socket2::SockRef::from(&*self.listener).shutdown(std::net::Shutdown::Both)
        {
            tracing::warn!(%error, "shutting the listening socket down");
        }
        let _ = self.thread.join();
        // The thread's reference is gone with it: this drop closes the descriptor.
        debug_assert_eq!(Arc::strong_count(&self.listener), 1);
        drop(self.listener);
    }
}

fn accept_loop(listener: &TcpListener, stopping: &AtomicBool, cores: &Mutex<Cores>) {
    let mut next = 0usize;
    loop {
        let accepted = listener.accept();
        let cores = cores.lock().unwrap_or_else(PoisonError::into_inner);
        // The cores may have changed (`route_to`): a count from the previous ones starts over.
        if next >= cores.len() {
            next = 0;
        }
        if stopping.load(Ordering::Acquire) {
            // Accepted while the stop began: the connection still goes to a core, which
            // serves it through the drain (never a reset).
            if let Ok(accepted) = accepted {
                let _ = cores[next].send(accepted);
            }
            return;
        }
        match accepted {
            Ok(accepted) => {
                // A core that is gone (stopping) drops the connection; try the others.
                let mut connection = Some(accepted);
                for _ in 0..cores.len() {
                    let core = &cores[next];
                    next = (next + 1) % cores.len();
                    match connection.take().map(|c| core.send(c)) {
                        Some(Err(flume::SendError(back))) => connection = Some(back),
                        _ => break,
                    }
                }
            }
            Err(error) => {
                drop(cores);
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(%error, "accept failed");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}
