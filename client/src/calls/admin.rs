//! The admin family's calls: PING, STATS (STATS_EX on version 2, STATS after an
//! UNKNOWN_MESSAGE from a server that predates it, remembered per connection), GC and BACKUP
//! (each on its own timeout, `ClientConfig::gc_timeout` and `backup_timeout`, instead of the
//! per-request one; a relative backup directory is refused before sending),
//! REPLICATION_STATS (version 3), ROLE (version 4), TENANT_LIST, TENANT_DELETE and
//! TENANT_ROTATE_KEY (version 5).

use std::sync::atomic::Ordering;

use ctxstore_client_macros::blocking_twin;
use ctxstore_protocol::admin::{
    Backup, Gc, Ping, ReplicationStats, Role, RoleAnswer, Stats as StatsRequest, StatsEx,
    TENANT_LIST_LIMIT, TenantDelete, TenantDeleted, TenantKeyRotated, TenantList, TenantRotateKey,
    TenantWire,
};
use ctxstore_protocol::{ErrorCode, MessageType, ReplicationStatsWire};

use crate::client::{Client, check_pair};
use crate::error::ClientError;
use crate::types::{BackupReport, GcReport, Stats};

#[blocking_twin(crate::blocking::Client)]
impl Client {
    pub async fn ping(&self, nonce: u64) -> Result<(), ClientError> {
        let pong = self.ask(Ping { nonce }).await?;
        check_pair(MessageType::Ping, pong.nonce == nonce)
    }

    /// The store's and the server's figures. On a version-2 server (STATS_EX) with the
    /// garbage collector's: `live_bytes`, `dead_bytes`, `gc_runs`, `bytes_reclaimed_total`;
    /// `None` on a server that does not have them (version 1, or older than garbage
    /// collection: then one STATS_EX answered UNKNOWN_MESSAGE, and STATS is asked instead).
    pub async fn stats(&self) -> Result<Stats, ClientError> {
        if self.protocol_version() >= 2 && !self.shared.no_stats_ex.load(Ordering::Relaxed) {
            match self.ask(StatsEx).await {
                Ok(answer) => return Ok(Stats::from_wire(*answer.stats, Some(answer.gc))),
                Err(ClientError::Server {
                    code: ErrorCode::UnknownMessage,
                    ..
                }) => self.shared.no_stats_ex.store(true, Ordering::Relaxed),
                Err(error) => return Err(error),
            }
        }
        let stats = self.ask(StatsRequest).await?;
        Ok(Stats::from_wire(stats, None))
    }

    /// Runs a garbage collection on the server now (GC, protocol version 2) and returns what
    /// it did: the turns and blobs nothing live reaches any more are collected (a collected
    /// turn is `ErrorCode::NotFound` from then on), and packs whose dead share passes the
    /// server's `--gc-pack-dead-percent` are rewritten. One collection or backup at a time:
    /// while one runs (the server's schedule included) this is `ErrorCode::InvalidArgument`.
    ///
    /// Waits up to `ClientConfig::gc_timeout` (default 1 h), not `request_timeout`. A
    /// collection the client stops waiting for goes on on the server.
    pub async fn gc(&self) -> Result<GcReport, ClientError> {
        let timeout = self.shared.config.gc_timeout;
        let report = self
            .ask_within(Gc, timeout, "ClientConfig::gc_timeout")
            .await?;
        Ok(report.into())
    }

    /// Has the server write a consistent copy of its store into `dir` while it goes on
    /// serving (BACKUP, protocol version 2): everything acknowledged before the backup
    /// started is in it; the copy opens with `ctxstore-server --data DIR` and passes
    /// `ctxstore-server verify`. `dir` is a path **on the server's host**: absolute (else
    /// `ClientError::InvalidArgument`, before sending), and absent or an empty directory
    /// outside the store (else the server's `ErrorCode::InvalidArgument`). Sealed packs are
    /// hard-linked when the copy is on the store's file system.
    ///
    /// Waits up to `ClientConfig::backup_timeout` (default 24 h), not `request_timeout`: the
    /// server answers when the copy is complete. A backup the client stops waiting for goes on
    /// on the server.
    pub async fn backup(&self, dir: impl Into<String>) -> Result<BackupReport, ClientError> {
        let dir = dir.into();
        if !std::path::Path::new(&dir).is_absolute() {
            return Err(ClientError::InvalidArgument(format!(
                "backup directory {dir:?} is not an absolute path (a path on the server's host)"
            )));
        }
        let timeout = self.shared.config.backup_timeout;
        let report = self
            .ask_within(Backup { dir }, timeout, "ClientConfig::backup_timeout")
            .await?;
        Ok(report.into())
    }

    /// This server's side of its replica (REPLICATION_STATS, protocol version 3, issue 31):
    /// role (primary, standby or off), state (shipping, failing, fenced, stopped, following,
    /// stalled) and why, target, epoch, generation, what shipped (or was applied) and when,
    /// the lag, the backlog, failures by kind. A server that does not replicate answers role
    /// and state `Off` and zeros. `ClientError::Unsupported` before version 3.
    pub async fn replication_stats(&self) -> Result<ReplicationStatsWire, ClientError> {
        let version = self.protocol_version();
        if version < 3 {
            return Err(ClientError::Unsupported {
                request: "REPLICATION_STATS",
                needed: 3,
                version,
            });
        }
        Ok(*self.ask(ReplicationStats).await?)
    }

    /// What this server is in its replica's failover now (ROLE, protocol version 4, decision
    /// 0031): its role (off, primary, standby, fenced, …), whether it takes writes, when it
    /// acknowledges a write by default, the epoch, and where the primary is when it knows
    /// (`primary`, HOST:PORT; empty: unknown). Lease and remote acknowledgement figures are 0
    /// on a server that has none. `ClientError::Unsupported` before version 4 (ask
    /// `replication_stats` there).
    pub async fn role(&self) -> Result<RoleAnswer, ClientError> {
        let version = self.protocol_version();
        if version < 4 {
            return Err(ClientError::Unsupported {
                request: "ROLE",
                needed: 4,
                version,
            });
        }
        Ok(*self.ask(Role).await?)
    }

    /// Every tenant the server knows (TENANT_LIST, protocol version 5, decision 0032 §8): the
    /// tenants file's and those the store registered, in name order, each with its usage, its
    /// quotas and its refusals, read page by page. A tenant's token is answered its own entry
    /// only (its usage); none on a server without a tenants file. `ClientError::Unsupported`
    /// before version 5 (the message table's version, checked as every request's is).
    pub async fn tenants(&self) -> Result<Vec<TenantWire>, ClientError> {
        let mut tenants = Vec::new();
        let mut after = String::new();
        loop {
            let list = TenantList {
                after: after.clone(),
                limit: TENANT_LIST_LIMIT,
            };
            let page = self.ask(list).await?;
            // The page goes on from the cursor, in name order.
            let ordered = page
                .tenants
                .iter()
                .all(|tenant| after.is_empty() || tenant.name > after)
                && page
                    .tenants
                    .windows(2)
                    .all(|pair| pair[0].name < pair[1].name);
            check_pair(MessageType::TenantList, ordered)?;
            tenants.extend(page.tenants);
            if page.next.is_empty() {
                return Ok(tenants);
            }
            check_pair(MessageType::TenantList, page.next > after)?;
            after = page.next;
        }
    }

    /// Deletes the tenant named `name` (TENANT_DELETE, protocol version 5, decision 0032
    /// §6): its keys destroyed (when the store seals), its contexts deleted, its tokens
    /// refused from then on; when the server replicates, answered once the object store holds
    /// the deletion. Sent again, it answers as the first time did. The operator's token only.
    pub async fn delete_tenant(&self, name: &str) -> Result<TenantDeleted, ClientError> {
        let deleted = self
            .ask(TenantDelete {
                name: name.to_owned(),
            })
            .await?;
        check_pair(MessageType::TenantDelete, deleted.tenant_id != 0)?;
        Ok(deleted)
    }

    /// A new version of the data key of the tenant named `name` (`operator`: the operator's
    /// own; TENANT_ROTATE_KEY, protocol version 5, decision 0032 §7): its new payloads are
    /// sealed under it, its older ones keep theirs. The operator's token only; a server that
    /// seals nothing answers INVALID_ARGUMENT.
    pub async fn rotate_tenant_key(&self, name: &str) -> Result<TenantKeyRotated, ClientError> {
        let rotated = self
            .ask(TenantRotateKey {
                name: name.to_owned(),
            })
            .await?;
        check_pair(MessageType::TenantRotateKey, rotated.key_version > 0)?;
        Ok(rotated)
    }
}
