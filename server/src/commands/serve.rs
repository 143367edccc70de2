//! Serving (no subcommand): the umask and open-files limit, the server started, signals
//! (drain, then close at once, then exit), a stalled standby's restart onto its fresh
//! restore.

use std::process::ExitCode;

use anyhow::Context;
use ctxstore_server::{Server, ServerConfig};

use super::server_config::config;
use crate::ServeArgs;

/// Serves the store until SIGINT or SIGTERM, then drains it: exit 0, or 130 when a second
/// signal cut the drain short.
pub(crate) fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    // Before anything is created: the data may be private (conversations, tool output).
    rustix::process::umask(rustix::fs::Mode::from_bits_truncate(args.umask));
    warn_if_more_open_than_umask(&args.data, args.umask);
    let config = config(args)?;
    raise_open_files_limit(config.limits.connections_max);
    let signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .context("installing signal handlers")?;
    let drain_timeout = config.drain_timeout;
    // A signal while the start waits (a standby waiting for its replica's first restore
    // point) ends the wait; the iterator above still sees it.
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, config.stop_waiting.clone())
            .context("installing signal handlers")?;
    }
    // Kept for a standby's restart onto a fresh restore (the same addresses once bound).
    let mut restart_config = config.clone();
    let mut server = match Server::start(config) {
        Ok(server) => server,
        Err(error)
            if error.chain().any(|cause| {
                matches!(
                    cause.downcast_ref::<ctxstore_replica::ReplicaError>(),
                    Some(ctxstore_replica::ReplicaError::Stopped)
                )
            }) =>
        {
            tracing::info!("stopped by a signal while waiting for the replica; nothing to drain");
            return Ok(ExitCode::SUCCESS);
        }
        Err(error) => return Err(error),
    };
    let second_signal = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut signals = signals;
    let signal = serve_until_signal(&mut server, &mut signals, &mut restart_config)?;
    tracing::info!(
        signal,
        ?drain_timeout,
        "shutting down: no new connections, answering and writing what is in flight"
    );
    let handle = signals.handle();
    watch_later_signals(signals, server.hurry_handle(), second_signal.clone());
    server.stop();
    handle.close();
    Ok(if second_signal.load(std::sync::atomic::Ordering::SeqCst) {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

/// Serves until a signal, and returns it; a stalled standby that restored its replica afresh
/// restarts onto it meanwhile (its connections closed; clients reconnect to the same
/// address).
fn serve_until_signal(
    server: &mut Server,
    signals: &mut signal_hook::iterator::Signals,
    restart_config: &mut ServerConfig,
) -> anyhow::Result<i32> {
    loop {
        if let Some(signal) = signals.pending().next() {
            return Ok(signal);
        }
        if server.fresh_restore_ready() {
            tracing::warn!(
                "the stalled standby restarts onto its fresh restore: its connections close, \
                 it answers again on the same address once the fresh store is open"
            );
            restart_config.listen = server.local_addr();
            restart_config.metrics_listen = server.metrics_addr().or(restart_config.metrics_listen);
            restart_config.console_listen = server.console_addr().or(restart_config.console_listen);
            server.stop();
            *server = Server::start(restart_config.clone())
                .context("restarting the standby onto its fresh restore")?;
            continue;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A second signal while draining closes every connection at once (and raises
/// `second_signal`); the engine still finishes its queues and syncs. A third exits without
/// waiting for anything (recovery at the next start handles whatever was not synced; nothing
/// acknowledged is lost).
fn watch_later_signals(
    signals: signal_hook::iterator::Signals,
    hurry: ctxstore_server::HurryHandle,
    second_signal: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let mut signals = signals;
    std::thread::spawn(move || {
        let mut more = signals.forever();
        if more.next().is_some() {
            second_signal.store(true, std::sync::atomic::Ordering::SeqCst);
            eprintln!("ctxstore-server: second signal, closing every connection now");
            hurry.hurry();
        }
        if more.next().is_some() {
            eprintln!("ctxstore-server: third signal, exiting without waiting");
            std::process::exit(130);
        }
    });
}

/// File descriptors the server needs besides one per connection and one per pack: the
/// store's other files, listeners, io_uring instances, wakers and the runtimes' own.
const FDS_BESIDES_CONNECTIONS_AND_PACKS: u64 = 64;

/// Raises the soft limit on open files to the hard limit: the server holds one descriptor
/// per connection and per pack, and the usual soft limit (1,024) is below the default
/// `--connections-max` plus a store's packs. Warns when the hard limit is still too low,
/// because then accepting connections or opening a new pack fails with EMFILE at run time.
fn raise_open_files_limit(connections_max: u32) {
    let wanted = u64::from(connections_max) + FDS_BESIDES_CONNECTIONS_AND_PACKS;
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < wanted => tracing::warn!(
            open_files_max = limit,
            wanted,
            "the open-files limit is below --connections-max plus the store's own; \
             raise it (ulimit -n / LimitNOFILE=) or lower --connections-max"
        ),
        Ok(limit) => tracing::info!(open_files_max = limit, "open-files limit"),
        Err(error) => tracing::warn!(%error, "could not read or raise the open-files limit"),
    }
}

/// A store created before `--umask` (0755, files 0644) stays as open as it was: say so, once,
/// at start. Only bits the mask would have removed count, so `--umask 027` accepts a
/// group-readable store.
fn warn_if_more_open_than_umask(data: &std::path::Path, umask: u32) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(data) {
        let mode = metadata.permissions().mode() & 0o777;
        if mode & umask != 0 {
            tracing::warn!(
                data = %data.display(),
                mode = format_args!("{mode:o}"),
                umask = format_args!("{umask:03o}"),
                "the data directory is more open than --umask allows (files created before \
                 keep their modes); chmod -R go-rwx it to make the store private"
            );
        }
    }
}
