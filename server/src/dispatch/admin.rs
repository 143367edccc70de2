//! The admin family: PING, STATS, STATS_EX, BACKUP, GC, REPLICATION_STATS, ROLE (HELLO is the
//! connection's, answered before any request reaches a dispatcher). STATS and STATS_EX come
//! from one `Engine::stats`; REPLICATION_STATS and ROLE from the replicator's (or the
//! standby's) `ReplicationStats`, the figures `/metrics` reads (ROLE's lease and remote
//! acknowledgement figures are 0 until decision 0031 builds them); BACKUP and GC run the engine's blocking
//! `backup` and `gc` on a thread of their own (`ctxstore-backup`, `ctxstore-gc-req`) and await
//! the answer, so the core serves on meanwhile.

use std::sync::atomic::Ordering;

use ctxstore_engine::EngineError;
use ctxstore_protocol::admin::{self, RoleAnswer, ServerRole};
use ctxstore_protocol::{
    AdminRequest, AdminResponse, BackupWire, ErrorCode, GcStatsWire, GcWire,
    REPLICATION_FAILURE_KINDS_MAX, ReplicationRoleWire, ReplicationStateWire, ReplicationStatsWire,
    Response, StatsWire,
};
use ctxstore_replica::{ReplicationRole, ReplicationState};

use super::{Scoped, engine_error, error};

// The replica's figures fit the wire as they are: every failure kind, each text's bound.
const _: () =
    assert!(ctxstore_replica::stats::FAILURE_KINDS.len() <= REPLICATION_FAILURE_KINDS_MAX);
const _: () = assert!(
    ctxstore_replica::stats::REPLICATION_TEXT_BYTES_MAX
        == ctxstore_protocol::REPLICATION_TEXT_BYTES_MAX
);

impl Scoped<'_> {
    pub(super) async fn answer_admin(
        &self,
        request: AdminRequest,
    ) -> Result<AdminResponse, Response> {
        // Each message's function returns its own answer: the variant that wraps it is the
        // only one that type-checks.
        match request {
            // The connection answers HELLO itself, and a second one closes it: one here is a
            // framing error all the same.
            AdminRequest::Hello(admin::Hello { .. }) => Err(error(
                ErrorCode::BadFrame,
                "HELLO may only be sent once, first",
            )),
            AdminRequest::Ping(ping) => Ok(AdminResponse::Pong(pong(ping))),
            AdminRequest::Stats(admin::Stats) => Ok(AdminResponse::Stats(self.stats().0)),
            AdminRequest::StatsEx(admin::StatsEx) => {
                Ok(AdminResponse::ExtendedStats(self.extended_stats()))
            }
            AdminRequest::Backup(backup) => self.backup(backup).await.map(AdminResponse::BackedUp),
            AdminRequest::Gc(admin::Gc) => self.gc().await.map(AdminResponse::GcDone),
            AdminRequest::ReplicationStats(admin::ReplicationStats) => {
                Ok(AdminResponse::ReplicationStats(self.replication_stats()))
            }
            AdminRequest::Role(admin::Role) => Ok(AdminResponse::RoleAnswer(self.role())),
            AdminRequest::TenantList(list) => {
                Ok(AdminResponse::TenantsListed(self.tenant_list(&list)))
            }
            AdminRequest::TenantDelete(delete) => self
                .tenant_delete(&delete)
                .await
                .map(AdminResponse::TenantDeleted),
            AdminRequest::TenantRotateKey(rotate) => {
                let (tenant_id, key_version) =
                    (self.store.rotate_tenant_key(&rotate.name)).map_err(engine_error)?;
                Ok(AdminResponse::TenantKeyRotated(admin::TenantKeyRotated {
                    tenant_id: tenant_id.0,
                    key_version,
                }))
            }
        }
    }

    /// TENANT_DELETE (decision 0032 §6): the engine destroys the tenant's keys and deletes its
    /// contexts (the store-wide handle: the operator's session sees TenantId 0 only); then,
    /// when the server replicates, the wait of a remote acknowledgement: its ticket is taken
    /// after the keyring changed, so the cut it waits for was read with the tombstone, and
    /// the shipper replaces the replica's `keyring` object before it ships that cut.
    async fn tenant_delete(
        &self,
        delete: &admin::TenantDelete,
    ) -> Result<admin::TenantDeleted, Response> {
        use admin::tenant_deleted_flags::{KEYS_DESTROYED, REPLICA_UPDATED};
        let tenant_id = (self.store.delete_tenant(&delete.name).await).map_err(engine_error)?;
        let mut flags = if self.store.tenant_erased(tenant_id) {
            KEYS_DESTROYED
        } else {
            0
        };
        if self.remote_acks.acks().is_some() {
            self.remote_acks
                .wait(0)
                .await
                .map_err(|refused| match refused {
                    Response::Error { code, .. } => error(
                        code,
                        format!(
                            "tenant {} is deleted on this server (its keys destroyed, its contexts \
                         deleted), but the object store did not confirm the deletion within \
                         --remote-ack-timeout; the next cut takes it there: send TENANT_DELETE \
                         again to wait for it",
                            delete.name
                        ),
                    ),
                    other => other,
                })?;
            flags |= REPLICA_UPDATED;
        }
        tracing::warn!(tenant = %delete.name, tenant_id = tenant_id.0, flags, "TENANT_DELETE answered");
        Ok(admin::TenantDeleted {
            tenant_id: tenant_id.0,
            flags,
        })
    }

    /// TENANT_LIST (decision 0032 §8): a page of `Tenants::reports`, in name order, after the
    /// cursor. A server without a tenants file has no tenant to list. A tenant's session sees
    /// its own entry only (its own usage is its STATS; another tenant's name, usage or
    /// existence is none of its business).
    fn tenant_list(&self, list: &admin::TenantList) -> admin::TenantsListed {
        let Some(tenants) = &self.tenants else {
            return admin::TenantsListed::default();
        };
        let limit = list.limit as usize;
        let reports = if self.session.is_operator() {
            tenants.reports(&self.store)
        } else {
            let own = tenants.report_of(&self.store, &self.session.tenant_name);
            own.into_iter().collect()
        };
        let mut page: Vec<admin::TenantWire> = reports
            .into_iter()
            .filter(|report| list.after.is_empty() || report.name.as_str() > list.after.as_str())
            .take(limit + 1)
            .map(tenant_wire)
            .collect();
        let next = if page.len() > limit {
            page.truncate(limit);
            page.last()
                .map(|last| last.name.clone())
                .unwrap_or_default()
        } else {
            String::new()
        };
        admin::TenantsListed {
            tenants: page,
            next,
        }
    }

    /// ROLE (decision 0031 §10) from what this server knows: its role (`server_role`),
    /// whether the engine takes writes, the epoch, the default acknowledgement
    /// (`--ack-after`), the lease, the failovers and the remote acknowledgements' figures (0
    /// without a replica). `primary` is this server's advertised address while it is the
    /// primary; a standby's or a fenced primary's primary is only known as
    /// REPLICATION_STATS' text, so it is empty here (unknown) rather than a guess.
    fn role(&self) -> Box<RoleAnswer> {
        let accepts_writes = self.engine.accepts_writes();
        let (role, epoch) = match &self.replication {
            None => (ServerRole::Off, 0),
            Some(stats) => {
                let now = ctxstore_replica::stats::now_unix_ms();
                let snapshot = stats.snapshot(now);
                (
                    server_role(stats, &snapshot, now, accepts_writes),
                    snapshot.epoch,
                )
            }
        };
        let primary = if role == ServerRole::Primary && accepts_writes {
            self.advertise.clone()
        } else {
            String::new()
        };
        let stat = |read: fn(&ctxstore_replica::ReplicationStats) -> u64| {
            self.replication.as_ref().map_or(0, |stats| read(stats))
        };
        let remote = self.remote_acks.acks();
        let figure =
            |read: fn(&ctxstore_replica::RemoteAcks) -> u64| remote.map_or(0, |acks| read(acks));
        let quantile = |q: f64| {
            let us = remote.map_or(0, |acks| acks.latency_quantile_us(q));
            u32::try_from(us).unwrap_or(u32::MAX)
        };
        let (lease_ms, lease_age_ms) = self.replication.as_ref().map_or((0, 0), |stats| {
            let lease_ms = stats.lease_ms.load(Ordering::Relaxed);
            let renewed = stats.lease_renewed_unix_ms.load(Ordering::Relaxed);
            let age = if lease_ms == 0 || renewed == 0 {
                0
            } else {
                ctxstore_replica::stats::now_unix_ms().saturating_sub(renewed)
            };
            (lease_ms, age)
        });
        Box::new(RoleAnswer {
            role,
            accepts_writes,
            ack_after: self.remote_acks.default_ack_after(),
            epoch,
            lease_ms: u32::try_from(lease_ms).unwrap_or(u32::MAX),
            lease_age_ms,
            ack_open_ms: self.engine.ack_open_ms_left().unwrap_or(0),
            failovers: stat(|stats| stats.failovers.load(Ordering::Relaxed)),
            last_failover_ms: stat(|stats| stats.last_failover_ms.load(Ordering::Relaxed)),
            remote_waiting: figure(|acks| acks.waiting.load(Ordering::Relaxed)),
            remote_acks_total: figure(|acks| acks.acks_total.load(Ordering::Relaxed)),
            remote_unconfirmed_total: figure(|acks| acks.unconfirmed_total.load(Ordering::Relaxed)),
            remote_ack_us_p50: quantile(0.5),
            remote_ack_us_p99: quantile(0.99),
            primary,
            holder: self
                .replication
                .as_ref()
                .map(|stats| stats.lease_holder())
                .unwrap_or_default(),
        })
    }

    /// STATS_EX: STATS' fields and the garbage collector's.
    fn extended_stats(&self) -> admin::ExtendedStats {
        let (stats, gc) = self.stats();
        let stats = Box::new(stats);
        admin::ExtendedStats { stats, gc }
    }

    /// REPLICATION_STATS: one snapshot of the figures (all zero on a server that does not
    /// replicate).
    fn replication_stats(&self) -> Box<ReplicationStatsWire> {
        let Some(stats) = &self.replication else {
            return Box::default();
        };
        let snapshot = stats.snapshot(ctxstore_replica::stats::now_unix_ms());
        let role = match snapshot.role {
            None => ReplicationRoleWire::Off,
            Some(ReplicationRole::Primary) => ReplicationRoleWire::Primary,
            Some(ReplicationRole::Standby) => ReplicationRoleWire::Standby,
        };
        let state = match snapshot.state {
            ReplicationState::Shipping => ReplicationStateWire::Shipping,
            ReplicationState::Failing => ReplicationStateWire::Failing,
            ReplicationState::Fenced => ReplicationStateWire::Fenced,
            ReplicationState::Stopped => ReplicationStateWire::Stopped,
            ReplicationState::Following => ReplicationStateWire::Following,
            ReplicationState::Stalled => ReplicationStateWire::Stalled,
            ReplicationState::Waiting => ReplicationStateWire::Waiting,
        };
        Box::new(ReplicationStatsWire {
            role,
            state,
            promoting: snapshot.promoting,
            generation: snapshot.generation,
            epoch: snapshot.epoch,
            seq: snapshot.seq,
            records: snapshot.records,
            records_unix_ms: snapshot.records_unix_ms,
            lag_ms: snapshot.lag_ms,
            lag_bytes: snapshot.lag_bytes,
            objects_total: snapshot.objects_total,
            bytes_total: snapshot.bytes_total,
            last_success_unix_ms: snapshot.last_success_unix_ms,
            backlog_objects: snapshot.backlog_objects,
            segment_bytes_max: snapshot.segment_bytes_max,
            target: snapshot.target,
            primary: snapshot.primary,
            reason: snapshot.reason,
            // Every kind, zeros included: a reader sees which kinds exist.
            failures: snapshot
                .failures
                .iter()
                .map(|(kind, count)| ((*kind).to_string(), *count))
                .collect(),
        })
    }

    /// STATS' fields and the garbage collector's (STATS_EX), from one look at the engine.
    fn stats(&self) -> (StatsWire, GcStatsWire) {
        let store = self.engine.stats();
        let counters = &self.counters;
        let gc = GcStatsWire {
            live_bytes: store.live_bytes,
            dead_bytes: store.dead_bytes,
            gc_runs: store.gc_runs,
            bytes_reclaimed_total: store.bytes_reclaimed_total,
        };
        let stats = StatsWire {
            turns: store.turns,
            contexts: store.contexts,
            blobs: store.blobs,
            logical_bytes: store.logical_bytes,
            unique_bytes: store.unique_bytes,
            stored_bytes: store.stored_bytes,
            dedup_hits: store.dedup_hits,
            read_only: store.read_only,
            connections: counters.connections.load(Ordering::Relaxed),
            requests_total: counters.requests.load(Ordering::Relaxed),
            errors_total: counters.errors.load(Ordering::Relaxed),
            uptime_ms: counters.started.elapsed().as_millis() as u64,
        };
        (stats, gc)
    }

    /// BACKUP: the engine copies files for as long as the store is large, so it runs on a
    /// thread of its own; this core only awaits its answer.
    async fn backup(&self, backup: admin::Backup) -> Result<BackupWire, Response> {
        let admin::Backup { dir } = backup;
        let engine = self.engine.clone();
        let report = on_own_thread("ctxstore-backup", "backup", move || {
            engine.backup(std::path::Path::new(&dir))
        })
        .await?;
        Ok(BackupWire {
            turns: report.turns,
            blobs: report.blobs,
            bytes: report.bytes,
            linked_bytes: report.linked_bytes,
            duration_ms: report.duration_ms,
            dir: report.dir.display().to_string(),
        })
    }

    /// GC: a collection reads the log and the indexes and rewrites packs (blocking file I/O),
    /// so it runs on a thread of its own, like BACKUP; this core only awaits its answer.
    async fn gc(&self) -> Result<GcWire, Response> {
        let engine = self.engine.clone();
        let report =
            on_own_thread("ctxstore-gc-req", "garbage collection", move || engine.gc()).await?;
        Ok(GcWire {
            turns_dead: report.turns_dead,
            blobs_dead: report.blobs_dead,
            bytes_reclaimed: report.bytes_reclaimed,
            packs_compacted: report.packs_compacted,
            live_bytes: report.live_bytes,
            dead_bytes: report.dead_bytes,
            duration_ms: report.duration_ms,
        })
    }
}

/// PING: the nonce back.
fn pong(ping: admin::Ping) -> admin::Pong {
    admin::Pong { nonce: ping.nonce }
}

/// Runs a blocking engine call on a new thread named `thread` and awaits its answer, so the
/// core serves on meanwhile; `what` names the work in the error if the thread cannot start.
async fn on_own_thread<T: Send + 'static>(
    thread: &str,
    what: &str,
    work: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, Response> {
    let (done, answer) = flume::bounded(1);
    let spawned = std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || {
            let _ = done.send(work());
        });
    if let Err(error) = spawned {
        return Err(Response::Error {
            code: ErrorCode::Internal,
            detail: 0,
            message: format!("could not start the {what} thread: {error}"),
        });
    }
    answer
        .recv_async()
        .await
        .map_err(|_| engine_error(EngineError::ShutDown))?
        .map_err(engine_error)
}

/// ROLE's role from replication's figures (decision 0031 §10), for ROLE and the console
/// alike: none, off; a primary, fenced once its shipper is (rejoining while it restores the
/// new primary's replica), lapsed while it holds a lease it has not renewed within the lease
/// and takes no writes; a standby, taking over while it promotes.
pub(crate) fn server_role(
    stats: &ctxstore_replica::ReplicationStats,
    snapshot: &ctxstore_replica::stats::ReplicationSnapshot,
    now_unix_ms: u64,
    accepts_writes: bool,
) -> ServerRole {
    match snapshot.role {
        None => ServerRole::Off,
        Some(ReplicationRole::Primary) => match snapshot.state {
            ReplicationState::Fenced if snapshot.rejoining => ServerRole::Rejoining,
            ReplicationState::Fenced => ServerRole::Fenced,
            _ if !accepts_writes && lease_lapsed(stats, now_unix_ms) => ServerRole::Lapsed,
            _ => ServerRole::Primary,
        },
        Some(ReplicationRole::Standby) if snapshot.promoting => ServerRole::TakingOver,
        Some(ReplicationRole::Standby) => ServerRole::Standby,
    }
}

/// A lease held (`--replica-lease`) and not renewed for at least its length.
fn lease_lapsed(stats: &ctxstore_replica::ReplicationStats, now_unix_ms: u64) -> bool {
    let lease_ms = stats.lease_ms.load(Ordering::Relaxed);
    let renewed = stats.lease_renewed_unix_ms.load(Ordering::Relaxed);
    lease_ms > 0 && renewed > 0 && now_unix_ms.saturating_sub(renewed) >= lease_ms
}

/// A tenant's report as TENANT_LIST carries it (a limit of 0: none).
fn tenant_wire(report: crate::tenancy::TenantReport) -> admin::TenantWire {
    use admin::{tenant_flags, tenant_rights};
    use ctxstore_engine::quota::Quota;
    let limit = |quota: Quota| report.limits[quota.index()].unwrap_or(0);
    let flag = |set: bool, bit: u8| if set { bit } else { 0 };
    admin::TenantWire {
        tenant_id: report.tenant_id.map_or(0, |tenant_id| tenant_id.0),
        flags: flag(report.in_file, tenant_flags::IN_FILE)
            | flag(report.tenant_id.is_some(), tenant_flags::REGISTERED)
            | flag(report.deleted, tenant_flags::DELETED),
        rights: flag(report.rights.read, tenant_rights::READ)
            | flag(report.rights.write, tenant_rights::WRITE)
            | flag(report.rights.admin, tenant_rights::ADMIN),
        quotas: admin::QuotasWire {
            bytes: limit(Quota::Bytes),
            contexts: limit(Quota::Contexts),
            appends_per_s: limit(Quota::AppendsPerS),
            connections: limit(Quota::Connections),
            streams: limit(Quota::Streams),
        },
        refusals: report.refused.iter().sum(),
        contexts: report.contexts,
        streams_open: report.streams_open,
        stored_bytes: report.stored_bytes,
        connections: report.connections,
        name: report.name,
    }
}
