//! The serving flags (`ServeArgs`) into a `ServerConfig`: the token file read and checked,
//! the engine's, replication's and the network cores' settings.

use std::time::Duration;

use anyhow::Context;
use ctxstore_server::ServerConfig;

use crate::ServeArgs;
use crate::values::BaseInterval;

pub(crate) fn config(args: ServeArgs) -> anyhow::Result<ServerConfig> {
    let mut config = ServerConfig::new(&args.data);
    config.listen = args.listen;
    config.metrics_listen = args.metrics_listen;
    config.metrics_allow_non_loopback = args.metrics_allow_non_loopback;
    config.console_listen = args.console_listen;
    if let Some(path) = &args.token_file {
        warn_if_readable_by_others(path);
        let token = std::fs::read_to_string(path)
            .with_context(|| format!("reading the token file {}", path.display()))?;
        let token = token.trim().to_string();
        anyhow::ensure!(
            !token.is_empty(),
            "the token file {} is empty",
            path.display()
        );
        config.token = Some(token);
    }
    if let Some(path) = &args.tenants_file {
        // It may hold plain tokens (or only their hashes).
        warn_if_readable_by_others(path);
        config.tenants_file = Some(path.clone());
    }
    config.engine.master_key = master_key(&args)?;
    if let Some(cores) = args.network_cores {
        config.network_cores = cores;
    }
    if let Some(cpus) = &args.network_core_cpus {
        if args.network_cores.is_none() {
            config.network_cores = cpus.len();
        }
        config.network_core_cpus = Some(cpus.clone());
    }
    let existing = ctxstore_engine::store_dir::StoreDir::new(&args.data).existing_shard_count()?;
    let shards = args.shards.or(existing).unwrap_or(1);
    config.engine = config.engine.with_shards(shards);
    engine_settings(&args, &mut config.engine);
    replication_settings(&args, &mut config);
    anyhow::ensure!(
        args.ack_after == ctxstore_protocol::AckAfter::Local
            || config.replication.is_some()
            || config.follow.is_some(),
        "--ack-after remote needs --replicate-to URL (or --follow URL): a remote \
         acknowledgement waits until the object store holds the write"
    );
    anyhow::ensure!(
        !args.auto_promote || args.follow.is_some(),
        "--auto-promote needs --follow URL: only a standby takes a primary's prefix over"
    );
    anyhow::ensure!(
        !args.auto_promote || replica_lease(&args).is_some(),
        "--auto-promote needs --replica-lease D: a standby takes over a lease that lapsed, \
         and the primary it follows must hold one"
    );
    if let Some(lease) = replica_lease(&args) {
        anyhow::ensure!(
            lease >= args.replicate_interval * 3,
            "--replica-lease {lease:?} (10s unless given) is shorter than three \
             --replicate-interval ({:?}): a cut must ship within each renewal period; give a \
             longer lease, a shorter interval, or --replica-lease off (no automatic failover)",
            args.replicate_interval
        );
    }
    config.ack_after = args.ack_after;
    config.remote_ack_timeout = args.remote_ack_timeout;
    limit_settings(&args, &mut config);
    config.ready_file = args.ready_file;
    config.payload_cache_bytes_per_core = args.payload_cache_bytes;
    Ok(config)
}

/// The master key, and the keyring `--keyring-from` puts beside a backup before it opens.
fn master_key(
    args: &ServeArgs,
) -> anyhow::Result<Option<std::sync::Arc<ctxstore_engine::seal::MasterKey>>> {
    let master_key = super::master_key::read(
        args.master_key_file.as_deref(),
        args.master_key_command.as_deref(),
    )?;
    if let Some(from) = &args.keyring_from {
        super::master_key::keyring_from(&args.data, from, master_key.as_deref())?;
    }
    Ok(master_key)
}

/// The engine's settings: placement, checks at open, expiry, streams, garbage collection,
/// chunking and its own limits.
fn engine_settings(args: &ServeArgs, engine: &mut ctxstore_engine::EngineConfig) {
    if let Some(placement) = &args.placement {
        engine.placement = placement.clone();
    }
    engine.zstd_level = args.zstd_level;
    engine.open_check = args.open_check;
    engine.repair = args.repair;
    engine.preallocate = !args.no_preallocate;
    engine.context_ttl_default_ms = args.context_ttl.as_millis() as u64;
    engine.stream_idle_timeout_ms = args.stream_idle_timeout.as_millis() as u64;
    engine.limits.streams_open_max = args.streams_open_max;
    engine.limits.vector_cache_bytes_max = args.vector_cache_bytes_max;
    engine.limits.vector_scan_max = args.vector_scan_max;
    engine.limits.vector_exact_max = args.vector_exact_max;
    engine.limits.vector_graph_bytes_max = args.vector_graph_bytes_max;
    engine.backup_bytes_per_s_max = args.backup_rate_max;
    engine.gc_interval_ms = args.gc_interval.as_millis() as u64;
    engine.gc_deleted_bytes_trigger = args.gc_deleted_bytes_trigger;
    engine.gc_log_dead_bytes_min = args.gc_log_dead_bytes_min;
    engine.disk_reserve_bytes = args.disk_reserve;
    engine.gc_pack_dead_percent = args.gc_pack_dead_percent;
    engine.gc_bytes_per_s_max = args.gc_rate_max;
    // parse_chunk_bytes bounds each to u32; the engine's validation checks the rest.
    engine.chunking = ctxstore_engine::ChunkingConfig {
        threshold_bytes: args.chunk_threshold as u32,
        chunk_bytes_min: args.chunk_min as u32,
        chunk_bytes_avg: args.chunk_avg as u32,
        chunk_bytes_max: args.chunk_max as u32,
    };
    engine.limits.blob_bytes_max = args.blob_bytes_max;
    engine.limits.read_turns_max = args.read_turns_max;
    engine.limits.pack_bytes_max = args.pack_bytes_max;
    engine.limits.queue_depth_max = args.queue_depth_max;
    engine.limits.sequencer_batch_records_max = args.sequencer_batch_records_max;
    engine.limits.shard_batch_records_max = args.shard_batch_records_max;
    engine.limits.shard_batch_bytes_max = args.shard_batch_bytes_max;
    engine.limits.batch_wait_us_max = args.batch_wait_us_max;
}

/// Shipping to a replica (`--replicate-to`) or following one as a standby (`--follow`).
fn replication_settings(args: &ServeArgs, config: &mut ServerConfig) {
    // Empty: the server writes the address it bound (`Server::start`).
    let advertise = args.replica_advertise.clone().unwrap_or_default();
    if let Some(url) = &args.replicate_to {
        let mut replication = ctxstore_replica::ShipConfig::new(url);
        replication.s3 = args.replica_s3.settings();
        replication.interval = args.replicate_interval;
        match args.replica_base_interval {
            BaseInterval::Time(interval) => {
                replication.checkpoint_interval = interval;
                replication.checkpoint_bytes = 0;
            }
            BaseInterval::Bytes(bytes) => {
                replication.checkpoint_interval = Duration::from_secs(u64::MAX / 4);
                replication.checkpoint_bytes = bytes;
            }
        }
        replication.retention =
            (!args.replica_retention.is_zero()).then_some(args.replica_retention);
        replication.segment_bytes_max = args.replica_segment_bytes_max;
        replication.start_anyway = args.replicate_start_anyway;
        replication.priority = args.replica_nice;
        replication.advertise = advertise.clone();
        replication.lease = replica_lease(args);
        config.replication = Some(replication);
    }
    if let Some(url) = &args.follow {
        // A standby ships, once promoted, with the --replicate-* settings given.
        let mut ship = ctxstore_replica::ShipConfig::new(url);
        ship.s3 = args.replica_s3.settings();
        ship.interval = args.replicate_interval;
        ship.retention = (!args.replica_retention.is_zero()).then_some(args.replica_retention);
        ship.segment_bytes_max = args.replica_segment_bytes_max;
        ship.priority = args.replica_nice;
        ship.advertise = advertise;
        ship.lease = replica_lease(args);
        config.engine.follower = true;
        config.follow = Some(ctxstore_replica::FollowConfig {
            url: url.clone(),
            s3: args.replica_s3.settings(),
            interval: args.replicate_interval,
            ship,
            auto_promote: args.auto_promote,
        });
    }
}

/// `--replica-lease`: `None` when `off`.
fn replica_lease(args: &ServeArgs) -> Option<Duration> {
    (!args.replica_lease.is_zero()).then_some(args.replica_lease)
}

/// The network cores' limits: frames, requests, connections, unwritten bytes, timeouts,
/// streams, the drain.
fn limit_settings(args: &ServeArgs, config: &mut ServerConfig) {
    config.limits.stream_wait_ms_max = args.stream_wait_ms_max;
    config.limits.streams_per_connection_max = args.streams_per_connection_max;
    config.limits.response_bytes_max = args.response_bytes_max;
    config.limits.frame_bytes_max = args.frame_bytes_max;
    config.limits.requests_in_flight_max = args.requests_in_flight_max;
    config.limits.connections_max = args.connections_max;
    config.limits.connections_unauthenticated_max = args
        .connections_unauthenticated_max
        .unwrap_or((args.connections_max / 4).max(1));
    config.limits.hello_timeout = args.hello_timeout;
    config.limits.unwritten_bytes_max = args.unwritten_bytes_max;
    config.limits.unwritten_bytes_total_max = args.unwritten_bytes_total_max;
    config.drain_timeout = args.drain_timeout;
    config.limits.has_blobs_max = args.has_blobs_max;
    config.limits.idle_timeout = args.idle_timeout;
    config.limits.frame_timeout = args.frame_timeout;
}

/// The token is a password: say so when others than the server's user may read its file.
pub(crate) fn warn_if_readable_by_others(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(path) {
        let mode = metadata.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format_args!("{:o}", mode & 0o777),
                "the token file is readable or writable by group or others; chmod 600 it"
            );
        }
    }
}
