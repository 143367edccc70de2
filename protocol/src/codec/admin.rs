//! HELLO, PING, STATS, STATS_EX, GC, BACKUP, REPLICATION_STATS, ROLE (version 4) and
//! TENANT_LIST, TENANT_DELETE and TENANT_ROTATE_KEY (version 5, `admin/tenant_list.rs`,
//! `admin/tenant_delete.rs`): the connection's handshake and the
//! messages about the server as a whole rather than one context. Layouts in docs/protocol.md.

mod tenant_delete;
mod tenant_list;

pub use tenant_delete::{
    TENANT_DELETED_BYTES, TenantDelete, TenantDeleted, TenantKeyRotated, TenantRotateKey,
    tenant_deleted_flags,
};

pub use tenant_list::{
    QuotasWire, TENANT_LIST_LIMIT, TENANTS_LISTED_BYTES_MAX, TenantList, TenantWire, TenantsListed,
    tenant_flags, tenant_rights,
};

use bytes::Bytes;

use super::answer::{AnswerLimits, ERROR_ANSWER_BYTES_MAX, FIXED_ANSWER_BYTES};
use super::check::{EncodeError, SHORT, within};
use super::cursor::Cursor;
use super::writer::{ChunkWriter, truncate_utf8};
use crate::error::DecodeError;
use crate::message::*;

/// The admin messages (`Family::of` in codec/mod.rs maps message types to them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Hello,
    Ping,
    Stats,
    StatsEx,
    Gc,
    Backup,
    ReplicationStats,
    Role,
    TenantList,
    TenantDelete,
    TenantRotateKey,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminRequest {
    Hello(Hello),
    Ping(Ping),
    Stats(Stats),
    StatsEx(StatsEx),
    Gc(Gc),
    Backup(Backup),
    ReplicationStats(ReplicationStats),
    Role(Role),
    TenantList(TenantList),
    TenantDelete(TenantDelete),
    TenantRotateKey(TenantRotateKey),
}

/// First message of every connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub min_version: u16,
    pub max_version: u16,
    pub token: Bytes,
    pub client_name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ping {
    pub nonce: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats;

/// STATS with the fields version 2 added (live and dead bytes, garbage collections).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatsEx;

/// Runs a garbage collection now and answers when it is done (GC_DONE). The body is
/// `gc_flags u32`, no bit defined yet (0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gc;

/// Writes a consistent copy of the store into `dir` (absolute, on the server's host;
/// absent or empty) while the server goes on serving.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backup {
    pub dir: String,
}

/// This server's side of its replica (version 3, issue 31): an empty body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationStats;

/// What this server is in its replica's failover now (version 4, decision 0031): an empty
/// body. A client asks it of every address it knows to find the primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Role;

/// ROLE's `role`: what this server is now. A decoder refuses any value past 6 (a new role
/// comes with a new protocol version).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ServerRole {
    /// The server does not replicate.
    #[default]
    Off = 0,
    /// It ships its store to the replica (`--replicate-to`, or a promoted standby).
    Primary = 1,
    /// It follows a replica (`--follow`) and takes no writes.
    Standby = 2,
    /// Another server took its replica's prefix with a later epoch: it takes no writes.
    Fenced = 3,
    /// A primary that holds the lease but cannot renew it: it takes no writes until it does.
    Lapsed = 4,
    /// A standby becoming the primary (promotion under way).
    TakingOver = 5,
    /// An old primary setting its diverged store aside to follow the new one.
    Rejoining = 6,
}

impl ServerRole {
    pub const ALL: [ServerRole; 7] = [
        ServerRole::Off,
        ServerRole::Primary,
        ServerRole::Standby,
        ServerRole::Fenced,
        ServerRole::Lapsed,
        ServerRole::TakingOver,
        ServerRole::Rejoining,
    ];

    /// As docs/protocol.md names it.
    pub fn name(self) -> &'static str {
        match self {
            ServerRole::Off => "off",
            ServerRole::Primary => "primary",
            ServerRole::Standby => "standby",
            ServerRole::Fenced => "fenced",
            ServerRole::Lapsed => "lapsed",
            ServerRole::TakingOver => "taking_over",
            ServerRole::Rejoining => "rejoining",
        }
    }
}

/// The longest text of ROLE (`primary`, `holder`), in bytes.
pub const ROLE_TEXT_BYTES_MAX: usize = 1024;
/// ROLE's fixed part: `u8 role, u8 accepts_writes, u8 ack_after`, 5 reserved, `u64 epoch`,
/// `u32 lease_ms`, six u64, two u32.
pub const ROLE_FIXED_BYTES: usize = 8 + 8 + 4 + 7 * 8 + 2 * 4;
/// The largest ROLE answer body.
pub const ROLE_BYTES_MAX: usize = ROLE_FIXED_BYTES + 2 * (2 + ROLE_TEXT_BYTES_MAX);

/// The answer to ROLE (version 4, decision 0031 §10). Layout in docs/protocol.md#role. A
/// figure this server does not have yet is 0 (a lease time: no lease), a text empty
/// (unknown).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleAnswer {
    pub role: ServerRole,
    /// Whether a write sent here now would be taken.
    pub accepts_writes: bool,
    /// When a write that does not say is acknowledged (`--ack-after`).
    pub ack_after: AckAfter,
    /// The epoch this primary took (on a standby: the newest it knows); 0 without a replica.
    pub epoch: u64,
    /// The lease's length (0: no lease).
    pub lease_ms: u32,
    /// Since the holder's last renewal, as this server knows it (0: no lease).
    pub lease_age_ms: u64,
    /// A primary: how long its acknowledgements stay open without another renewal (else 0).
    pub ack_open_ms: u64,
    /// Failovers this server saw.
    pub failovers: u64,
    /// How long the last failover kept writes closed (0: none).
    pub last_failover_ms: u64,
    /// Writes waiting for a remote acknowledgement now.
    pub remote_waiting: u64,
    /// Remote acknowledgements sent, and those answered UNCONFIRMED instead.
    pub remote_acks_total: u64,
    pub remote_unconfirmed_total: u64,
    /// A remote acknowledgement's wait, median and 99th percentile, in microseconds.
    pub remote_ack_us_p50: u32,
    pub remote_ack_us_p99: u32,
    /// Where writes go: the primary's advertised HOST:PORT (empty: unknown).
    pub primary: String,
    /// Who holds the lease, `host:pid` (empty: unknown, or no lease).
    pub holder: String,
}
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminResponse {
    Negotiated(Negotiated),
    Pong(Pong),
    Stats(StatsWire),
    ExtendedStats(ExtendedStats),
    /// Answer to GC: what the collection did.
    GcDone(GcWire),
    /// Answer to BACKUP: what the copy holds and what it cost.
    BackedUp(BackupWire),
    /// Answer to REPLICATION_STATS (boxed: it would grow every response's size).
    ReplicationStats(Box<ReplicationStatsWire>),
    /// Answer to ROLE (boxed, as REPLICATION_STATS).
    RoleAnswer(Box<RoleAnswer>),
    /// Answer to TENANT_LIST.
    TenantsListed(TenantsListed),
    /// Answer to TENANT_DELETE.
    TenantDeleted(TenantDeleted),
    /// Answer to TENANT_ROTATE_KEY.
    TenantKeyRotated(TenantKeyRotated),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    pub version: u16,
    pub limits: ServerLimits,
    pub server_name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pong {
    pub nonce: u64,
}

/// Answer to STATS_EX: STATS' fields, then the garbage collector's (boxed: it would grow
/// every response's size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtendedStats {
    pub stats: Box<StatsWire>,
    pub gc: GcStatsWire,
}

/// The family's enums under the names the message table uses (`message_table!`).
pub type Requests = AdminRequest;
pub type Answers = AdminResponse;

impl AdminRequest {
    pub fn message_type(&self) -> MessageType {
        match self {
            AdminRequest::Hello(Hello { .. }) => MessageType::Hello,
            AdminRequest::Ping(Ping { .. }) => MessageType::Ping,
            AdminRequest::Stats(Stats) => MessageType::Stats,
            AdminRequest::StatsEx(StatsEx) => MessageType::StatsEx,
            AdminRequest::Gc(Gc) => MessageType::Gc,
            AdminRequest::Backup(Backup { .. }) => MessageType::Backup,
            AdminRequest::ReplicationStats(ReplicationStats) => MessageType::ReplicationStats,
            AdminRequest::Role(Role) => MessageType::Role,
            AdminRequest::TenantList(TenantList { .. }) => MessageType::TenantList,
            AdminRequest::TenantDelete(TenantDelete { .. }) => MessageType::TenantDelete,
            AdminRequest::TenantRotateKey(TenantRotateKey { .. }) => MessageType::TenantRotateKey,
        }
    }

    /// The largest answer (see `codec/answer.rs`).
    pub fn answer_bytes_max(&self, limits: &AnswerLimits) -> u64 {
        match self {
            // As the server's table had it when the bounds moved here (its catch-all), though the
            // answer is 144 bytes: tightening it is a change of its own.
            AdminRequest::StatsEx(StatsEx) => limits.largest(),
            AdminRequest::ReplicationStats(ReplicationStats) => {
                REPLICATION_STATS_BYTES_MAX as u64 + ERROR_ANSWER_BYTES_MAX
            }
            AdminRequest::Role(Role) => ROLE_BYTES_MAX as u64 + ERROR_ANSWER_BYTES_MAX,
            AdminRequest::TenantList(TenantList { .. }) => {
                TENANTS_LISTED_BYTES_MAX as u64 + ERROR_ANSWER_BYTES_MAX
            }
            AdminRequest::Hello(Hello { .. })
            | AdminRequest::Ping(Ping { .. })
            | AdminRequest::Stats(Stats)
            | AdminRequest::Gc(Gc)
            | AdminRequest::Backup(Backup { .. })
            | AdminRequest::TenantDelete(TenantDelete { .. })
            | AdminRequest::TenantRotateKey(TenantRotateKey { .. }) => FIXED_ANSWER_BYTES,
        }
    }

    pub(super) fn read(kind: Kind, cursor: &mut Cursor) -> Result<AdminRequest, DecodeError> {
        Ok(match kind {
            Kind::Hello => read_hello(cursor)?,
            Kind::Ping => AdminRequest::Ping(Ping {
                nonce: cursor.u64()?,
            }),
            Kind::Stats => AdminRequest::Stats(Stats),
            Kind::StatsEx => AdminRequest::StatsEx(StatsEx),
            Kind::Gc => {
                cursor.flags(0, "gc_flags")?;
                AdminRequest::Gc(Gc)
            }
            Kind::Backup => {
                let dir = cursor.short_string("dir")?;
                // What the encoder refuses, the decoder refuses (found by fuzz/frame_decoder).
                if dir.is_empty() {
                    return Err(cursor.invalid("dir", "an empty backup directory"));
                }
                AdminRequest::Backup(Backup { dir })
            }
            Kind::ReplicationStats => AdminRequest::ReplicationStats(ReplicationStats),
            Kind::Role => AdminRequest::Role(Role),
            Kind::TenantList => AdminRequest::TenantList(tenant_list::read_request(cursor)?),
            Kind::TenantDelete => AdminRequest::TenantDelete(tenant_delete::read_request(cursor)?),
            Kind::TenantRotateKey => {
                AdminRequest::TenantRotateKey(tenant_delete::read_rotate_request(cursor)?)
            }
        })
    }

    /// What the wire cannot carry (`check_request`).
    pub(super) fn check(&self) -> Result<(), EncodeError> {
        match self {
            AdminRequest::Hello(Hello {
                token, client_name, ..
            }) => {
                within("token", token.len(), 0, TOKEN_BYTES_MAX as u64, "bytes")?;
                within(
                    "client_name",
                    client_name.len(),
                    0,
                    NAME_BYTES_MAX as u64,
                    "bytes",
                )
            }
            AdminRequest::Backup(Backup { dir }) => within("dir", dir.len(), 1, SHORT, "bytes"),
            AdminRequest::TenantList(list) => tenant_list::check_request(list),
            AdminRequest::TenantDelete(delete) => tenant_delete::check_request(delete),
            AdminRequest::TenantRotateKey(rotate) => tenant_delete::check_rotate_request(rotate),
            AdminRequest::Ping(Ping { .. })
            | AdminRequest::Stats(Stats)
            | AdminRequest::StatsEx(StatsEx)
            | AdminRequest::Gc(Gc)
            | AdminRequest::ReplicationStats(ReplicationStats)
            | AdminRequest::Role(Role) => Ok(()),
        }
    }

    /// The body (`check` passed).
    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            AdminRequest::Hello(Hello {
                min_version,
                max_version,
                token,
                client_name,
            }) => {
                w.u16(*min_version);
                w.u16(*max_version);
                w.u16(token.len() as u16);
                w.u16(client_name.len() as u16);
                w.slice(token);
                w.slice(client_name.as_bytes());
            }
            AdminRequest::Ping(Ping { nonce }) => w.u64(*nonce),
            AdminRequest::Stats(Stats)
            | AdminRequest::StatsEx(StatsEx)
            | AdminRequest::ReplicationStats(ReplicationStats)
            | AdminRequest::Role(Role) => {}
            AdminRequest::Gc(Gc) => w.u32(0),
            AdminRequest::Backup(Backup { dir }) => w.short(dir.as_bytes()),
            AdminRequest::TenantList(list) => tenant_list::write_request(w, list),
            AdminRequest::TenantDelete(delete) => tenant_delete::write_request(w, delete),
            AdminRequest::TenantRotateKey(rotate) => {
                tenant_delete::write_rotate_request(w, rotate);
            }
        }
    }
}

/// HELLO: `u16 min_version, u16 max_version, u16 token_len, u16 client_name_len`, the token,
/// the client's name.
fn read_hello(cursor: &mut Cursor) -> Result<AdminRequest, DecodeError> {
    let min_version = cursor.u16()?;
    let max_version = cursor.u16()?;
    if min_version > max_version || min_version == 0 {
        return Err(cursor.invalid("version range", "min is 0 or above max"));
    }
    let token_len = usize::from(cursor.u16()?);
    if token_len > TOKEN_BYTES_MAX {
        return Err(cursor.too_large("token_len", token_len as u64, TOKEN_BYTES_MAX as u64));
    }
    let name_len = usize::from(cursor.u16()?);
    if name_len > NAME_BYTES_MAX {
        return Err(cursor.too_large("client_name_len", name_len as u64, NAME_BYTES_MAX as u64));
    }
    let token = cursor.bytes(token_len)?;
    let client_name = cursor.string(name_len, "client_name")?;
    Ok(AdminRequest::Hello(Hello {
        min_version,
        max_version,
        token,
        client_name,
    }))
}

impl AdminResponse {
    /// The request type this answers.
    pub fn message_type(&self) -> MessageType {
        match self {
            AdminResponse::Negotiated(Negotiated { .. }) => MessageType::Hello,
            AdminResponse::Pong(Pong { .. }) => MessageType::Ping,
            AdminResponse::Stats(_) => MessageType::Stats,
            AdminResponse::ExtendedStats(ExtendedStats { .. }) => MessageType::StatsEx,
            AdminResponse::GcDone(_) => MessageType::Gc,
            AdminResponse::BackedUp(_) => MessageType::Backup,
            AdminResponse::ReplicationStats(_) => MessageType::ReplicationStats,
            AdminResponse::RoleAnswer(_) => MessageType::Role,
            AdminResponse::TenantsListed(_) => MessageType::TenantList,
            AdminResponse::TenantDeleted(_) => MessageType::TenantDelete,
            AdminResponse::TenantKeyRotated(_) => MessageType::TenantRotateKey,
        }
    }

    pub(super) fn read(kind: Kind, cursor: &mut Cursor) -> Result<AdminResponse, DecodeError> {
        Ok(match kind {
            Kind::Hello => read_hello_answer(cursor)?,
            Kind::Ping => AdminResponse::Pong(Pong {
                nonce: cursor.u64()?,
            }),
            Kind::Stats => AdminResponse::Stats(cursor.stats()?),
            Kind::StatsEx => AdminResponse::ExtendedStats(ExtendedStats {
                stats: Box::new(cursor.stats()?),
                gc: GcStatsWire {
                    live_bytes: cursor.u64()?,
                    dead_bytes: cursor.u64()?,
                    gc_runs: cursor.u64()?,
                    bytes_reclaimed_total: cursor.u64()?,
                },
            }),
            Kind::Gc => {
                let turns_dead = cursor.u64()?;
                let blobs_dead = cursor.u64()?;
                let bytes_reclaimed = cursor.u64()?;
                let packs_compacted = cursor.u32()?;
                cursor.zero(4, "reserved")?;
                AdminResponse::GcDone(GcWire {
                    turns_dead,
                    blobs_dead,
                    bytes_reclaimed,
                    packs_compacted,
                    live_bytes: cursor.u64()?,
                    dead_bytes: cursor.u64()?,
                    duration_ms: cursor.u64()?,
                })
            }
            Kind::Backup => AdminResponse::BackedUp(BackupWire {
                turns: cursor.u64()?,
                blobs: cursor.u64()?,
                bytes: cursor.u64()?,
                linked_bytes: cursor.u64()?,
                duration_ms: cursor.u64()?,
                dir: cursor.short_string("dir")?,
            }),
            Kind::ReplicationStats => {
                AdminResponse::ReplicationStats(Box::new(read_replication_stats(cursor)?))
            }
            Kind::Role => AdminResponse::RoleAnswer(Box::new(read_role(cursor)?)),
            Kind::TenantList => AdminResponse::TenantsListed(tenant_list::read_answer(cursor)?),
            Kind::TenantDelete => AdminResponse::TenantDeleted(tenant_delete::read_answer(cursor)?),
            Kind::TenantRotateKey => {
                AdminResponse::TenantKeyRotated(tenant_delete::read_rotated(cursor)?)
            }
        })
    }

    pub(super) fn write(&self, w: &mut ChunkWriter) {
        match self {
            AdminResponse::Negotiated(Negotiated {
                version,
                limits,
                server_name,
            }) => {
                let name = truncate_utf8(server_name, NAME_BYTES_MAX);
                w.u16(*version);
                w.u16(name.len() as u16);
                w.u32(limits.frame_bytes_max);
                w.u32(limits.requests_in_flight_max);
                w.u32(limits.blob_bytes_max);
                w.u32(limits.read_turns_max);
                w.u32(limits.has_blobs_max);
                w.zero(4);
                w.slice(name.as_bytes());
            }
            AdminResponse::Pong(Pong { nonce }) => w.u64(*nonce),
            AdminResponse::Stats(stats) => w.stats(stats),
            AdminResponse::ExtendedStats(ExtendedStats { stats, gc }) => {
                w.stats(stats);
                w.u64(gc.live_bytes);
                w.u64(gc.dead_bytes);
                w.u64(gc.gc_runs);
                w.u64(gc.bytes_reclaimed_total);
            }
            AdminResponse::GcDone(gc) => {
                w.u64(gc.turns_dead);
                w.u64(gc.blobs_dead);
                w.u64(gc.bytes_reclaimed);
                w.u32(gc.packs_compacted);
                w.zero(4);
                w.u64(gc.live_bytes);
                w.u64(gc.dead_bytes);
                w.u64(gc.duration_ms);
            }
            AdminResponse::BackedUp(backup) => {
                w.u64(backup.turns);
                w.u64(backup.blobs);
                w.u64(backup.bytes);
                w.u64(backup.linked_bytes);
                w.u64(backup.duration_ms);
                w.short(backup.dir.as_bytes());
            }
            AdminResponse::ReplicationStats(stats) => write_replication_stats(w, stats),
            AdminResponse::RoleAnswer(role) => write_role(w, role),
            AdminResponse::TenantsListed(listed) => tenant_list::write_answer(w, listed),
            AdminResponse::TenantDeleted(deleted) => tenant_delete::write_answer(w, deleted),
            AdminResponse::TenantKeyRotated(rotated) => tenant_delete::write_rotated(w, rotated),
        }
    }
}

/// ROLE's answer: `u8 role` (0..=6), `u8 accepts_writes` (0 or 1), `u8 ack_after` (1 local,
/// 2 remote), 5 reserved, `u64 epoch`, `u32 lease_ms`, `u64 lease_age_ms`, `u64 ack_open_ms`,
/// `u64 failovers`, `u64 last_failover_ms`, `u64 remote_waiting`, `u64 remote_acks_total`,
/// `u64 remote_unconfirmed_total`, `u32 remote_ack_us_p50`, `u32 remote_ack_us_p99`, then two
/// short strings, `primary` and `holder` (each ≤ 1024 bytes). docs/protocol.md#role.
fn read_role(cursor: &mut Cursor) -> Result<RoleAnswer, DecodeError> {
    let role = *ServerRole::ALL
        .get(usize::from(cursor.u8()?))
        .ok_or_else(|| cursor.invalid("role", "not a role (0..=6)"))?;
    let accepts_writes = cursor.bool("accepts_writes")?;
    let ack_after = AckAfter::from_code(cursor.u8()?)
        .ok_or_else(|| cursor.invalid("ack_after", "not 1 (local) or 2 (remote)"))?;
    cursor.zero(5, "reserved")?;
    let mut role = RoleAnswer {
        role,
        accepts_writes,
        ack_after,
        epoch: cursor.u64()?,
        lease_ms: cursor.u32()?,
        lease_age_ms: cursor.u64()?,
        ack_open_ms: cursor.u64()?,
        failovers: cursor.u64()?,
        last_failover_ms: cursor.u64()?,
        remote_waiting: cursor.u64()?,
        remote_acks_total: cursor.u64()?,
        remote_unconfirmed_total: cursor.u64()?,
        remote_ack_us_p50: cursor.u32()?,
        remote_ack_us_p99: cursor.u32()?,
        primary: String::new(),
        holder: String::new(),
    };
    for (field, text) in [("primary", &mut role.primary), ("holder", &mut role.holder)] {
        let len = usize::from(cursor.u16()?);
        if len > ROLE_TEXT_BYTES_MAX {
            return Err(cursor.too_large(field, len as u64, ROLE_TEXT_BYTES_MAX as u64));
        }
        *text = cursor.string(len, field)?;
    }
    Ok(role)
}

/// See `read_role`; a text over 1024 bytes is cut at a character boundary.
fn write_role(w: &mut ChunkWriter, role: &RoleAnswer) {
    w.u8(role.role as u8);
    w.u8(u8::from(role.accepts_writes));
    w.u8(role.ack_after as u8);
    w.zero(5);
    w.u64(role.epoch);
    w.u32(role.lease_ms);
    for value in [
        role.lease_age_ms,
        role.ack_open_ms,
        role.failovers,
        role.last_failover_ms,
        role.remote_waiting,
        role.remote_acks_total,
        role.remote_unconfirmed_total,
    ] {
        w.u64(value);
    }
    w.u32(role.remote_ack_us_p50);
    w.u32(role.remote_ack_us_p99);
    for text in [&role.primary, &role.holder] {
        w.short(truncate_utf8(text, ROLE_TEXT_BYTES_MAX).as_bytes());
    }
}

/// REPLICATION_STATS' answer: `u8 role, u8 state, u8 promoting, 5 reserved`, twelve u64
/// (generation, epoch, seq, records, records_unix_ms, lag_ms, lag_bytes, objects_total,
/// bytes_total, last_success_unix_ms, backlog_objects, segment_bytes_max), three short
/// strings (target, primary, reason; each ≤ 1024 bytes), `u16 failure_count`, each failure
/// `u8 kind_len, kind, u64 count`. Layout in docs/protocol.md#replication_stats.
fn read_replication_stats(cursor: &mut Cursor) -> Result<ReplicationStatsWire, DecodeError> {
    let role_code = cursor.u8()?;
    let role = *ReplicationRoleWire::ALL
        .get(usize::from(role_code))
        .ok_or_else(|| cursor.invalid("role", "not 0 (off), 1 (primary) or 2 (standby)"))?;
    let state_code = cursor.u8()?;
    let state = *ReplicationStateWire::ALL
        .get(usize::from(state_code))
        .ok_or_else(|| cursor.invalid("state", "not a replication state (0..=7)"))?;
    let promoting = cursor.bool("promoting")?;
    cursor.zero(5, "reserved")?;
    let mut stats = ReplicationStatsWire {
        role,
        state,
        promoting,
        generation: cursor.u64()?,
        epoch: cursor.u64()?,
        seq: cursor.u64()?,
        records: cursor.u64()?,
        records_unix_ms: cursor.u64()?,
        lag_ms: cursor.u64()?,
        lag_bytes: cursor.u64()?,
        objects_total: cursor.u64()?,
        bytes_total: cursor.u64()?,
        last_success_unix_ms: cursor.u64()?,
        backlog_objects: cursor.u64()?,
        segment_bytes_max: cursor.u64()?,
        ..ReplicationStatsWire::default()
    };
    for (field, text) in [
        ("target", &mut stats.target),
        ("primary", &mut stats.primary),
        ("reason", &mut stats.reason),
    ] {
        let len = usize::from(cursor.u16()?);
        if len > REPLICATION_TEXT_BYTES_MAX {
            return Err(cursor.too_large(field, len as u64, REPLICATION_TEXT_BYTES_MAX as u64));
        }
        *text = cursor.string(len, field)?;
    }
    let count = usize::from(cursor.u16()?);
    if count > REPLICATION_FAILURE_KINDS_MAX {
        return Err(cursor.too_large(
            "failure_count",
            count as u64,
            REPLICATION_FAILURE_KINDS_MAX as u64,
        ));
    }
    stats.failures.reserve(cursor.list_capacity(count, 9));
    for _ in 0..count {
        let len = usize::from(cursor.u8()?);
        if len == 0 || len > REPLICATION_FAILURE_KIND_BYTES_MAX {
            return Err(cursor.invalid("failure kind", "empty or longer than 32 bytes"));
        }
        let kind = cursor.string(len, "failure kind")?;
        if stats.failures.iter().any(|(known, _)| *known == kind) {
            return Err(cursor.invalid("failure kind", "named twice"));
        }
        stats.failures.push((kind, cursor.u64()?));
    }
    Ok(stats)
}

/// See `read_replication_stats`. The server builds the answer within the limits (texts cut
/// at a character boundary, at most 32 kinds); the assertions keep a builder honest.
fn write_replication_stats(w: &mut ChunkWriter, stats: &ReplicationStatsWire) {
    w.u8(stats.role as u8);
    w.u8(stats.state as u8);
    w.u8(u8::from(stats.promoting));
    w.zero(5);
    for value in [
        stats.generation,
        stats.epoch,
        stats.seq,
        stats.records,
        stats.records_unix_ms,
        stats.lag_ms,
        stats.lag_bytes,
        stats.objects_total,
        stats.bytes_total,
        stats.last_success_unix_ms,
        stats.backlog_objects,
        stats.segment_bytes_max,
    ] {
        w.u64(value);
    }
    for text in [&stats.target, &stats.primary, &stats.reason] {
        w.short(truncate_utf8(text, REPLICATION_TEXT_BYTES_MAX).as_bytes());
    }
    assert!(
        stats.failures.len() <= REPLICATION_FAILURE_KINDS_MAX,
        "{} failure kinds",
        stats.failures.len()
    );
    w.u16(stats.failures.len() as u16);
    for (kind, count) in &stats.failures {
        assert!(
            !kind.is_empty() && kind.len() <= REPLICATION_FAILURE_KIND_BYTES_MAX,
            "failure kind {kind:?}"
        );
        w.tiny(kind.as_bytes());
        w.u64(*count);
    }
}

/// HELLO's answer: `u16 version, u16 server_name_len`, the limits, 4 reserved, the name.
fn read_hello_answer(cursor: &mut Cursor) -> Result<AdminResponse, DecodeError> {
    let version = cursor.u16()?;
    let name_len = usize::from(cursor.u16()?);
    if name_len > NAME_BYTES_MAX {
        return Err(cursor.too_large("server_name_len", name_len as u64, NAME_BYTES_MAX as u64));
    }
    let limits = ServerLimits {
        frame_bytes_max: cursor.u32()?,
        requests_in_flight_max: cursor.u32()?,
        blob_bytes_max: cursor.u32()?,
        read_turns_max: cursor.u32()?,
        has_blobs_max: cursor.u32()?,
    };
    cursor.zero(4, "reserved")?;
    let server_name = cursor.string(name_len, "server_name")?;
    Ok(AdminResponse::Negotiated(Negotiated {
        version,
        limits,
        server_name,
    }))
}
