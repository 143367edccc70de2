//! Serving (no subcommand): the umask and open-files limit, the server started, signals
//! (drain, then close at once, then exit), a stalled standby's restart onto its fresh
//! restore, and a fenced primary's rejoin as a standby (`--rejoin standby`, decision 0031 §8:
//! `replica/src/rejoin.rs` sets its store aside; here the server restarts onto a fresh restore
//! as `--follow URL` on the same addresses).

use std::process::ExitCode;

use anyhow::Context;
use ctxstore_replica::ReplicaError;
use ctxstore_server::{Server, ServerConfig};

use super::server_config::config;
use crate::{Rejoin, ServeArgs};

/// Serves the store until SIGINT or SIGTERM, then drains it: exit 0, or 130 when a second
/// signal cut the drain short.
pub(crate) fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    // Before anything is created: the data may be private (conversations, tool output).
    rustix::process::umask(rustix::fs::Mode::from_bits_truncate(args.umask));
    warn_if_more_open_than_umask(&args.data, args.umask);
    let rejoin = args.rejoin;
    let config = config(args)?;
    raise_open_files_limit(config.limits.connections_max);
    let signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .context("installing signal handlers")?;
    let drain_timeout = config.drain_timeout;
    // A signal while the start waits (a standby waiting for its replica's first restore
    // point) ends the wait; the iterator above still sees it.
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, config.stop_waiting.clone())
            .context("installing signal handlers")?;
    }
    let Some((mut server, mut restart_config, set_aside_at_start)) = start(config, rejoin)? else {
        tracing::info!("stopped by a signal while waiting for the replica; nothing to drain");
        return Ok(ExitCode::SUCCESS);
    };
    let second_signal = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut signals = signals;
    let mut rejoining = RejoinWatch::new(rejoin);
    if set_aside_at_start {
        // Counted as a rejoin; what the store held past the fork point is not (it was never
        // opened here): `verify` or a server on it tells.
        rejoining.rejoins = 1;
        rejoining.publish(&server);
    }
    let signal = serve_until_signal(
        &mut server,
        &mut signals,
        &mut restart_config,
        &mut rejoining,
    )?;
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

/// Starts the server (after the start's part of a rejoin, `rejoin_at_start`). With `--rejoin
/// standby`, an old primary whose prefix another live primary holds (it renewed the lease
/// while this one watched) starts as that primary's standby instead of refusing (decision
/// 0031 §7): its store set aside, a fresh restore. Answers the server, the configuration it runs (kept
/// for a restart on the same addresses), and whether a store was set aside; `None` when a
/// signal stopped the start.
fn start(
    config: ServerConfig,
    rejoin: Rejoin,
) -> anyhow::Result<Option<(Server, ServerConfig, bool)>> {
    let set_aside = rejoin_at_start(&config, rejoin)?;
    let restart_config = config.clone();
    let error = match Server::start(config) {
        Ok(server) => return Ok(Some((server, restart_config, set_aside))),
        Err(error) => error,
    };
    if has_cause(&error, |error| matches!(error, ReplicaError::Stopped)) {
        return Ok(None);
    }
    let held = has_cause(&error, |error| {
        matches!(error, ReplicaError::LeaseHeld { .. })
    });
    // Only an old primary of this prefix (its store shipped there): a new or foreign store
    // pointed at a held prefix is a mistake to refuse, naming the holder.
    let old_primary = match (rejoin, &restart_config.replication) {
        (Rejoin::Standby, Some(ship)) if held => {
            let data_dir = absolute(&restart_config.engine.data_dir)?;
            ctxstore_replica::rejoin::shipped_itself(&data_dir, &ship.url)
                .unwrap_or(None)
                .is_some()
        }
        _ => false,
    };
    let Some(follow) = old_primary
        .then(|| follow_config(&restart_config))
        .flatten()
    else {
        return Err(error);
    };
    tracing::warn!(
        error = %format!("{error:#}"),
        "another primary holds the prefix: this server starts as its standby (--rejoin \
         standby), its store set aside"
    );
    let mut standby = restart_config;
    standby.replication = None;
    standby.engine.follower = true;
    standby.follow = Some(follow);
    let set_aside = rejoin_at_start(&standby, rejoin)? || set_aside;
    match Server::start(standby.clone()) {
        Ok(server) => Ok(Some((server, standby, set_aside))),
        Err(error) if has_cause(&error, |error| matches!(error, ReplicaError::Stopped)) => Ok(None),
        Err(error) => Err(error.context("starting as a standby of the primary holding the prefix")),
    }
}

/// Whether a replica error `wanted` is among the causes of `error`.
fn has_cause(error: &anyhow::Error, wanted: fn(&ReplicaError) -> bool) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<ReplicaError>().is_some_and(wanted))
}

/// Serves until a signal, and returns it; a stalled standby that restored its replica afresh
/// restarts onto it meanwhile (its connections closed; clients reconnect to the same
/// address), and so does a fenced primary that rejoins as a standby.
fn serve_until_signal(
    server: &mut Server,
    signals: &mut signal_hook::iterator::Signals,
    restart_config: &mut ServerConfig,
    rejoining: &mut RejoinWatch,
) -> anyhow::Result<i32> {
    loop {
        for signal in signals.pending() {
            if signal == signal_hook::consts::SIGHUP {
                server.reload_tenants();
                continue;
            }
            return Ok(signal);
        }
        if rejoining.due(server, restart_config) {
            rejoining.step(server, restart_config)?;
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

/// The start's part of a rejoin (decision 0031 §8), before the store opens: a set-aside a
/// crash cut short is finished whatever the flags (its intent is durable, and a store half
/// moved must never open); with `--follow` and `--rejoin standby`, a directory that shipped to
/// that replica itself (a primary's, or a promoted standby's: an old primary restarted as a
/// standby) is set aside; a standby whose store is set aside gets a fresh restore, which the
/// start puts in place (`fresh::swap_in`). Answers whether it set a store aside.
fn rejoin_at_start(config: &ServerConfig, rejoin: Rejoin) -> anyhow::Result<bool> {
    use ctxstore_replica::rejoin as store;
    let data_dir = absolute(&config.engine.data_dir)?;
    if !data_dir.exists() {
        return Ok(false);
    }
    let mut set_aside = store::finish(&data_dir)
        .with_context(|| format!("finishing the set-aside of {}", data_dir.display()))?
        .is_some();
    let Some(follow) = &config.follow else {
        return Ok(set_aside);
    };
    if rejoin == Rejoin::Standby
        && let Some(epoch) = store::shipped_itself(&data_dir, &follow.url)
            .with_context(|| format!("reading the replica state in {}", data_dir.display()))?
    {
        tracing::warn!(
            data = %data_dir.display(),
            epoch,
            url = %ctxstore_replica::stats::without_credentials(&follow.url),
            "this directory shipped to the replica itself (an old primary, or a promoted \
             standby): it is set aside and the standby starts from a fresh restore \
             (--rejoin standby)"
        );
        store::set_aside(&data_dir, epoch)
            .with_context(|| format!("setting the store in {} aside", data_dir.display()))?;
        set_aside = true;
    }
    if store::needs_restore(&data_dir) {
        store::restore_fresh(&data_dir, follow)
            .and_then(|_| ctxstore_replica::fresh::mark_complete(&data_dir))
            .with_context(|| {
                format!(
                    "restoring {} afresh into {} for the standby",
                    follow.url,
                    data_dir.display()
                )
            })?;
    }
    Ok(set_aside)
}

/// The rejoin's fresh restore, on its own thread.
type Restoring = std::thread::JoinHandle<
    Result<ctxstore_replica::restore::RestoreReport, ctxstore_replica::ReplicaError>,
>;

/// How long a fenced primary stays fenced before it rejoins, in leases (see
/// `RejoinWatch::due`).
const REJOIN_AFTER_LEASES: u32 = 2;

/// A fenced primary's way back as a standby (`--rejoin standby`, decision 0031 §8).
struct RejoinWatch {
    mode: Rejoin,
    /// When this process first saw the server fenced.
    fenced_since: Option<std::time::Instant>,
    /// A fresh restore that failed is tried again from then on.
    retry_at: Option<std::time::Instant>,
    /// The fresh restore under way, on its own thread: the serving loop goes on seeing
    /// signals meanwhile (a large store takes minutes).
    restoring: Option<Restoring>,
    /// This process's rejoins and the records their set-aside stores held past the fork
    /// point: carried into each restarted server's figures.
    rejoins: u64,
    diverged_records: u64,
}

impl RejoinWatch {
    fn new(mode: Rejoin) -> RejoinWatch {
        RejoinWatch {
            mode,
            fenced_since: None,
            retry_at: None,
            restoring: None,
            rejoins: 0,
            diverged_records: 0,
        }
    }

    /// Whether the fenced primary rejoins now: only with a lease (without one, decision
    /// 0019's fenced primary stays as it is, for an operator), and once it has answered
    /// NOT_PRIMARY, naming the new primary, for `REJOIN_AFTER_LEASES` leases: a taker opens
    /// writes L + m after its take, so by then the primary its clients are sent to takes
    /// them, and they learn where writes go before the restart closes their connections.
    fn due(&mut self, server: &Server, config: &ServerConfig) -> bool {
        let lease = config
            .replication
            .as_ref()
            .or(config.follow.as_ref().map(|follow| &follow.ship))
            .and_then(|ship| ship.lease);
        let (Rejoin::Standby, Some(lease)) = (self.mode, lease) else {
            return false;
        };
        let wait = lease.saturating_mul(REJOIN_AFTER_LEASES);
        if !server.fenced() {
            return false;
        }
        let now = std::time::Instant::now();
        let since = *self.fenced_since.get_or_insert_with(|| {
            tracing::warn!(
                rejoin_in = ?wait,
                "this primary is fenced: it refuses writes, naming the new primary, and \
                 rejoins as its standby (--rejoin standby; its store is set aside, never \
                 deleted)"
            );
            now
        });
        self.restoring.is_some()
            || (now.duration_since(since) >= wait && self.retry_at.is_none_or(|at| now >= at))
    }

    /// The rejoin's next step: the replica restored afresh on a thread while the fenced
    /// server still serves reads; once it is whole, the rejoin itself (`rejoin`). A failed
    /// restore is retried later, the server still fenced.
    fn step(&mut self, server: &mut Server, config: &mut ServerConfig) -> anyhow::Result<()> {
        let follow = follow_config(config).context("a fenced server without a replica")?;
        let data_dir = absolute(&config.engine.data_dir)?;
        let Some(restoring) = self.restoring.take() else {
            let thread = {
                let (data_dir, follow) = (data_dir.clone(), follow.clone());
                std::thread::Builder::new()
                    .name("ctxstore-rejoin".into())
                    .spawn(move || ctxstore_replica::rejoin::restore_fresh(&data_dir, &follow))
                    .context("starting the rejoin's restore thread")?
            };
            self.restoring = Some(thread);
            if let Some(stats) = server.replication() {
                stats
                    .rejoining
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            return Ok(());
        };
        if !restoring.is_finished() {
            self.restoring = Some(restoring);
            return Ok(());
        }
        let restored = match restoring.join() {
            Ok(restored) => restored.map_err(anyhow::Error::new),
            Err(_) => Err(anyhow::anyhow!("the rejoin's restore thread panicked")),
        };
        if let Err(error) = restored {
            let retry = ctxstore_replica::follow::FRESH_RESTORE_RETRY;
            tracing::warn!(error = %format!("{error:#}"), retry_in = ?retry, "the fenced primary's fresh restore failed; it stays fenced and tries again");
            self.retry_at = Some(std::time::Instant::now() + retry);
            return Ok(());
        }
        self.rejoin(server, config, &data_dir, follow)
    }

    /// With the fresh restore whole in `DIR/.fresh`: stops the server, sets its store aside
    /// and starts it again as a standby of the same replica on the same addresses
    /// (`--auto-promote` only if it was a promoted standby started with it). A failure after
    /// the stop ends the process (the next start finishes the set-aside and restores).
    fn rejoin(
        &mut self,
        server: &mut Server,
        config: &mut ServerConfig,
        data_dir: &std::path::Path,
        follow: ctxstore_replica::FollowConfig,
    ) -> anyhow::Result<()> {
        use ctxstore_replica::rejoin as store;
        let data_dir = data_dir.to_path_buf();
        let durable = server.engine().durable_records();
        let diverged = store::diverged_records(&data_dir, &follow, durable).unwrap_or_else(|error| {
            tracing::warn!(%error, "could not read the new lineage's fork point: the diverged records go uncounted");
            None
        });
        config.listen = server.local_addr();
        config.metrics_listen = server.metrics_addr().or(config.metrics_listen);
        config.console_listen = server.console_addr().or(config.console_listen);
        server.stop();
        let epoch = store::store_epoch(&data_dir)?;
        let aside = store::set_aside(&data_dir, epoch)
            .with_context(|| format!("setting the store in {} aside", data_dir.display()))?;
        ctxstore_replica::fresh::mark_complete(&data_dir)?;
        let count = diverged.as_ref().map(store::count);
        let diverged = diverged.filter(|range| !range.is_empty());
        tracing::warn!(
            set_aside = %aside.dir.display(),
            diverged_records = ?count,
            record_ids = ?diverged,
            "the fenced primary's store is set aside (records past the new lineage's fork \
             point: diverged_records); it restarts as a standby of {}",
            ctxstore_replica::stats::without_credentials(&follow.url)
        );
        config.replication = None;
        config.engine.follower = true;
        config.follow = Some(follow);
        *server =
            Server::start(config.clone()).context("restarting the fenced primary as a standby")?;
        self.rejoins += 1;
        self.diverged_records += count.unwrap_or(0);
        self.fenced_since = None;
        self.retry_at = None;
        self.publish(server);
        Ok(())
    }

    /// This process's rejoins into the (new) server's figures.
    fn publish(&self, server: &Server) {
        if let Some(stats) = server.replication() {
            use std::sync::atomic::Ordering;
            stats.rejoins.store(self.rejoins, Ordering::Relaxed);
            stats
                .diverged_records
                .store(self.diverged_records, Ordering::Relaxed);
        }
    }
}

/// How the server follows its replica after a rejoin: a promoted standby as it was started
/// (its URL, `--auto-promote`); a `--replicate-to` primary as a plain standby of the URL it
/// shipped to. Remote acknowledgements start afresh: the fenced primary's were closed for
/// good, and a later promotion must confirm again.
fn follow_config(config: &ServerConfig) -> Option<ctxstore_replica::FollowConfig> {
    let mut follow = match (&config.follow, &config.replication) {
        (Some(follow), _) => follow.clone(),
        (None, Some(ship)) => ctxstore_replica::FollowConfig {
            url: ship.url.clone(),
            s3: ship.s3.clone(),
            interval: ship.interval,
            ship: ship.clone(),
            auto_promote: false,
        },
        (None, None) => return None,
    };
    follow.ship.remote_acks = std::sync::Arc::default();
    Some(follow)
}

fn absolute(dir: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    if dir.is_absolute() {
        return Ok(dir.to_path_buf());
    }
    Ok(std::env::current_dir()
        .context("reading the current directory")?
        .join(dir))
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
        // SIGHUP reads the tenants file again; during a drain there is nothing to read it
        // for, and it is no request to hurry.
        let mut more = signals
            .forever()
            .filter(|signal| *signal != signal_hook::consts::SIGHUP);
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
