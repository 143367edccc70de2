//! `Engine::open`, in four steps: **recover** (the lock, the meta file, files shared with
//! another name made private, the disk reserve, every shard in parallel, incomplete manifests
//! dropped, the compacted base, `turns.log` replayed and its unacknowledged tail cut, a format
//! migration), **publish** (the views readers use, built from what recovery found), **start
//! the actors** (their bounded inboxes, the blob notices, one thread per placement), **start
//! the background work** (the TTL reaper, the collector and its scheduler). A step that fails
//! stops what the steps before it started.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::blob::recover::{RecoveredShard, ShardCursor, recover_shard};
use crate::blob::view::ShardView;
use crate::config::{Actor, EngineConfig};
use crate::engine::chunked::BaseHints;
use crate::engine::retention::Reaper;
use crate::engine::{Engine, Inner, stop_actors};
use crate::error::OpenError;
use crate::file::ReadFile;
use crate::format::meta::{Meta, STORE_FORMAT_SKIPS, STORE_FORMAT_VERSION};
use crate::gc::{Collector, Scheduler};
use crate::keys::{KeysFor, StoreKeys};
use crate::metrics::ActorMetrics;
use crate::model::Scope;
use crate::pipeline::{SequencerInbox, ShardRequest};
use crate::published::Published;
use crate::reserve::DiskReserve;
use crate::sequencer::log_base::LogBase;
use crate::sequencer::migrate::migrate_turn_log;
use crate::sequencer::recover::{RecoveredLog, recover_log};
use crate::sequencer::streams::StreamsView;
use crate::sequencer::view::{ContextsView, HeadTable, SequencerCounters, TurnsView};
use crate::sequencer::watch::{WatchLog, WatchView};
use crate::status::StoreStatus;
use crate::store_dir::{StoreDir, now_unix_ms};
use crate::threads::{ActorSeed, start_thread};

/// What recovery found: every file checked (and cut where a crash left a tail).
struct Recovered {
    keys: Arc<StoreKeys>,
    reserve: DiskReserve,
    views: Vec<ShardView>,
    cursors: Vec<ShardCursor>,
    base: Option<Arc<LogBase>>,
    log: RecoveredLog,
    log_path: PathBuf,
}

/// The running actors: their inboxes and threads.
struct Actors {
    sequencer: SequencerInbox,
    shards: Vec<flume::Sender<ShardRequest>>,
    threads: Vec<JoinHandle<()>>,
}

/// The engine's own background threads.
struct Background {
    reaper: Reaper,
    collector: Arc<Collector>,
    scheduler: Scheduler,
}

impl Engine {
    /// Opens (or creates) the store in `config.data_dir`: checks and recovers every file,
    /// then starts the actors on their threads. Blocks until the store is ready.
    pub fn open(config: EngineConfig) -> Result<Engine, OpenError> {
        config.validate().map_err(OpenError::Config)?;
        let started = std::time::Instant::now();
        let store = StoreDir::new(&config.data_dir);
        crate::file::ops::create_dir_all(&store.root)
            .map_err(|source| OpenError::io(&store.root, source))?;
        let lock = store.lock()?;
        let mut recovered = recover(&store, &config)?;
        let published = publish(&mut recovered)?;
        if !config.follower {
            // A standby's keys are its primary's, installed from the replica.
            crate::engine::give_registered_keys(&recovered.keys, &published)?;
        }
        if config.follower {
            // Before any actor runs: not one write slips in (`engine/follow.rs`).
            published.status.set_following(
                "this store is a standby following its replica; send writes to the primary".into(),
            );
        }
        tracing::info!(
            data = %store.root.display(),
            turns = recovered.log.turns,
            contexts = recovered.log.heads.count(),
            blobs = published.shards.iter().map(|s| s.counters.blobs.load(Ordering::Relaxed)).sum::<u64>(),
            recovery_ms = started.elapsed().as_millis() as u64,
            "store recovered"
        );
        let open_packs: Vec<u32> = recovered.cursors.iter().map(|c| c.pack_id).collect();
        let Recovered {
            reserve,
            cursors,
            log,
            ..
        } = recovered;
        let actors = start_graphs_and_actors(&config, &published, log, cursors)?;
        let background =
            match start_background(&config, &store, &published, &actors, open_packs, reserve) {
                Ok(background) => background,
                Err(error) => {
                    stop_actors(&actors.sequencer, &actors.shards, actors.threads);
                    published.vector_graphs.stop();
                    return Err(error);
                }
            };
        let vector_cache =
            crate::vector_search::VectorCache::new(config.limits.vector_cache_bytes_max);
        let engine = Engine {
            inner: Arc::new(Inner {
                published,
                sequencer: actors.sequencer,
                shards: actors.shards.into_boxed_slice(),
                config,
                closed: AtomicBool::new(false),
                collector: background.collector,
                gc_scheduler: Mutex::new(Some(background.scheduler)),
                threads: Mutex::new(actors.threads),
                lock: Mutex::new(Some(lock)),
                reaper: Mutex::new(Some(background.reaper)),
                base_hints: BaseHints::default(),
                vector_cache,
            }),
            scope: Scope::Store,
            addressing: crate::seal::Addressing::Plain,
        };
        if !engine.inner.config.follower {
            // A deletion the keyring records and the log does not: a restore to a point
            // before it, or a crash between its two steps.
            crate::engine::tenants::finish_erasures(&engine).map_err(|error| {
                OpenError::Config(format!("finishing a tenant's deletion: {error}"))
            })?;
        }
        Ok(engine)
    }
}

/// Recover: the meta file (created for a new store), files written in place made private
/// (decision 0017), the disk reserve, every shard (in parallel), the compacted base, then
/// `turns.log` replayed against the shards' indexes, and a format migration if one is due.
fn recover(store: &StoreDir, config: &EngineConfig) -> Result<Recovered, OpenError> {
    let mut meta = store.open_or_create(config.shard_count, now_unix_ms())?;
    if meta.shard_count != config.shard_count {
        return Err(OpenError::Config(format!(
            "the store in {} has {} blob shards, the configuration says {}; start with the \
             store's shard count",
            store.root.display(),
            meta.shard_count,
            config.shard_count
        )));
    }
    // No store writes a byte another reads: a file it writes in place that shares its inode
    // with another name (a backup's or a copy's hard link) gets one of its own.
    let in_place = store
        .files_written_in_place(meta.shard_count)
        .map_err(|source| OpenError::io(&store.root, source))?;
    for path in in_place {
        crate::file::make_private(&path).map_err(|source| OpenError::io(&path, source))?;
    }
    // The keys first: a wrong master key is refused before a byte is read or cut.
    let purpose = if config.follower {
        KeysFor::Following
    } else {
        KeysFor::Serving
    };
    let keys = Arc::new(StoreKeys::open(
        &store.root,
        config.master_key.clone(),
        meta.seals,
        purpose,
    )?);
    if keys.seals() && !meta.seals && !config.follower {
        // The keyring is durable: from now on the store's copies say that they seal.
        meta.seals = true;
        store.write_meta(&meta)?;
    }
    // Taken before recovery and the prepared space can fill a nearly full disk.
    let reserve = DiskReserve::open(&store.root, config.disk_reserve_bytes)
        .map_err(|source| OpenError::io(&store.root, source))?;
    // Shards recover in parallel; the log's replay then checks every turn's blob.
    let (views, cursors): (Vec<_>, Vec<_>) = recover_shards(store, config, &keys)?
        .into_iter()
        .map(|RecoveredShard { view, cursor }| (view, cursor))
        .unzip();
    for incomplete in crate::chunks::drop_incomplete_manifests(&views) {
        tracing::warn!(
            blob = %incomplete.hash,
            reason = %incomplete.reason,
            "a chunked blob lacks part of itself (a backup's cut, or a collection cut between \
             two packs' rewrites); it is not used, and a live turn naming it fails the open below"
        );
    }
    let log_path = store.turns_log_path();
    // The compacted prefix of the log, if a collection wrote one (`log_compaction.rs`).
    let base = crate::log_compaction::open_base(store)?;
    if base.is_some() && meta.format_version < STORE_FORMAT_SKIPS {
        return Err(OpenError::Inconsistent(format!(
            "{} is of store format {} but has a compacted log ({}), which only formats {} \
             and later write",
            store.root.display(),
            meta.format_version,
            store.turns_base_path().display(),
            STORE_FORMAT_SKIPS
        )));
    }
    let log = recover_log(&log_path, base.as_ref(), &views, config.repair)?;
    if meta.format_version < STORE_FORMAT_VERSION {
        migrate_store(store, &meta, &log_path, log.next_record_id - 1)?;
    }
    Ok(Recovered {
        keys,
        reserve,
        views,
        cursors,
        base,
        log,
        log_path,
    })
}

/// Publish: the views readers use, from what recovery found (the shards' views move in).
fn publish(recovered: &mut Recovered) -> Result<Arc<Published>, OpenError> {
    let log = &recovered.log;
    let log_path = &recovered.log_path;
    let turns_file =
        ReadFile::open(log_path.clone()).map_err(|source| OpenError::io(log_path, source))?;
    let heads = HeadTable::new();
    for (context_id, head) in log.heads.iter() {
        heads.set_head(context_id, head.head_turn_id);
    }
    heads.publish_contexts(log.heads.count());
    let counters = SequencerCounters::default();
    counters.turns.store(log.turns, Ordering::Relaxed);
    counters.contexts.store(
        log.heads.count() - log.contexts.deleted_contexts - log.contexts.skipped_contexts,
        Ordering::Relaxed,
    );
    counters
        .logical_bytes
        .store(log.logical_bytes, Ordering::Relaxed);
    counters.dedup_hits.store(log.dedup_hits, Ordering::Relaxed);
    let views = std::mem::take(&mut recovered.views);
    // From the first published snapshot on, every change to an index's vectors is handed to
    // its graph (a failed batch restores this snapshot, and keeps feeding).
    recovered.log.contexts.vector_indexes.owners.start_feeding();
    let log = &recovered.log;
    Ok(Arc::new(Published {
        turns: TurnsView::new(
            turns_file,
            recovered.base.clone(),
            log.next_record_id - 1,
            log.dead.clone(),
        ),
        heads,
        contexts: ContextsView::new(log.contexts.clone()),
        streams: StreamsView::new(log.streams.clone()),
        watch: WatchView::new(WatchLog::starting_after(log.next_record_id - 1)),
        counters,
        shard_metrics: views.iter().map(|_| ActorMetrics::default()).collect(),
        shards: views.into_boxed_slice(),
        status: StoreStatus::default(),
        sequencer_metrics: ActorMetrics::default(),
        quotas: crate::quota::QuotaTable::default(),
        keys: recovered.keys.clone(),
        vector_graphs: crate::vector_graph::VectorGraphs::default(),
    }))
}

/// The vector graphs' writer (building from the recovered snapshot; the sequencer's batches
/// follow), then the actors.
fn start_graphs_and_actors(
    config: &EngineConfig,
    published: &Arc<Published>,
    log: RecoveredLog,
    cursors: Vec<ShardCursor>,
) -> Result<Actors, OpenError> {
    crate::vector_graph::writer::start(
        published,
        &config.data_dir,
        log.contexts.vector_indexes.clone(),
        config.limits.vector_graph_bytes_max,
    )
    .map_err(OpenError::Thread)?;
    start_actors(config, published, log, cursors).inspect_err(|_| published.vector_graphs.stop())
}

/// Start the actors: one bounded inbox each (backpressure on callers), the shards' notices
/// channel (decision 0014), then a thread per placement with the actors it hosts.
fn start_actors(
    config: &EngineConfig,
    published: &Arc<Published>,
    log: RecoveredLog,
    cursors: Vec<ShardCursor>,
) -> Result<Actors, OpenError> {
    let queue_depth = config.limits.queue_depth_max as usize;
    let (sequencer_sender, sequencer_inbox) = flume::bounded(queue_depth);
    let sequencer = SequencerInbox(sequencer_sender);
    // Shards tell the sequencer which of their batches are durable (decision 0014); only the
    // shards hold a sender, so the sequencer learns when they are all gone.
    let (notices, notices_inbox) = flume::unbounded();
    let mut sequencer_seed = Some(ActorSeed::Sequencer(
        Box::new(log),
        sequencer_inbox,
        notices_inbox,
    ));
    let mut shards = Vec::new();
    let mut shard_seeds: Vec<Option<ActorSeed>> = Vec::new();
    for cursor in cursors {
        let (sender, inbox) = flume::bounded(queue_depth);
        shards.push(sender);
        let seed = ActorSeed::Shard(cursor, inbox, sequencer.clone(), notices.clone());
        shard_seeds.push(Some(seed));
    }
    drop(notices);
    let mut threads = Vec::new();
    for (index, placement) in config.placement.threads.iter().enumerate() {
        let seeds = placement
            .actors
            .iter()
            .filter_map(|actor| match actor {
                Actor::Sequencer => sequencer_seed.take(),
                Actor::Shard(shard) => shard_seeds.get_mut(usize::from(*shard))?.take(),
            })
            .collect();
        let started = start_thread(
            index,
            placement,
            seeds,
            published.clone(),
            config.limits,
            config.preallocate,
        );
        match started {
            Ok(handle) => threads.push(handle),
            Err(error) => {
                // Dropping the senders stops the actors already started — those in the seeds
                // of threads not started yet too: a shard's seed holds a sender to the
                // sequencer, which would otherwise wait for it forever (the power-loss
                // campaign's second finding: a failed shard start hung the open).
                drop(sequencer);
                drop(shards);
                drop(sequencer_seed);
                drop(shard_seeds);
                for handle in threads {
                    let _ = handle.join();
                }
                return Err(error);
            }
        }
    }
    assert!(sequencer_seed.is_none() && shard_seeds.iter().all(Option::is_none));
    Ok(Actors {
        sequencer,
        shards,
        threads,
    })
}

/// Start the background work: the TTL reaper, then the collector and its scheduler thread.
fn start_background(
    config: &EngineConfig,
    store: &StoreDir,
    published: &Arc<Published>,
    actors: &Actors,
    open_packs: Vec<u32>,
    reserve: DiskReserve,
) -> Result<Background, OpenError> {
    let reaper = Reaper::start(
        published.clone(),
        actors.sequencer.clone(),
        config.context_ttl_default_ms,
        config.stream_idle_timeout_ms,
        std::time::Duration::from_millis(config.reaper_interval_ms),
    )
    .map_err(|error| OpenError::Thread(format!("ctxstore-reaper: {error}")))?;
    let collector = Arc::new(Collector::new(
        published.clone(),
        actors.sequencer.clone(),
        actors.shards.clone().into_boxed_slice(),
        store.clone(),
        config,
        open_packs,
        reserve,
    ));
    let scheduler = Scheduler::start(
        collector.clone(),
        std::time::Duration::from_millis(config.gc_interval_ms),
        config.gc_deleted_bytes_trigger,
    );
    match scheduler {
        Ok(scheduler) => Ok(Background {
            reaper,
            collector,
            scheduler,
        }),
        Err(error) => {
            reaper.stop();
            Err(OpenError::Thread(format!("ctxstore-gc: {error}")))
        }
    }
}

/// Store format migrations, once, at open, after recovery: format 1 → 2 writes `turns.log`
/// anew with skip pointers and context chains (`sequencer::migrate`); 2 → 3 changes no
/// record (every context of a format-2 log is the operator's). Then the meta file, last: a
/// crash before it redoes the migration at the next open.
fn migrate_store(
    store: &StoreDir,
    meta: &Meta,
    log_path: &std::path::Path,
    records: u64,
) -> Result<(), OpenError> {
    let started = std::time::Instant::now();
    tracing::info!(
        data = %store.root.display(),
        from = meta.format_version,
        to = STORE_FORMAT_VERSION,
        records,
        "migrating the store format (once)"
    );
    let turns = if meta.format_version < STORE_FORMAT_SKIPS {
        migrate_turn_log(log_path, records)?
    } else {
        0
    };
    store.write_meta(&Meta {
        format_version: STORE_FORMAT_VERSION,
        ..*meta
    })?;
    tracing::info!(
        turns,
        migration_ms = started.elapsed().as_millis() as u64,
        "store format migrated"
    );
    Ok(())
}

fn recover_shards(
    store: &StoreDir,
    config: &EngineConfig,
    keys: &Arc<StoreKeys>,
) -> Result<Vec<RecoveredShard>, OpenError> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..config.shard_count)
            .map(|shard| {
                scope.spawn(move || {
                    recover_shard(store, shard, config.open_check, config.repair, keys)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle.join().unwrap_or_else(|_| {
                    Err(OpenError::Thread("a shard recovery thread panicked".into()))
                })
            })
            .collect()
    })
}
