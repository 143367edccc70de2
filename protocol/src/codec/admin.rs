//! HELLO, PING, STATS, STATS_EX, GC, BACKUP and REPLICATION_STATS: the connection's handshake
//! and the messages about the server as a whole rather than one context. Layouts in
//! docs/protocol.md.

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
            AdminRequest::Hello(Hello { .. })
            | AdminRequest::Ping(Ping { .. })
            | AdminRequest::Stats(Stats)
            | AdminRequest::Gc(Gc)
            | AdminRequest::Backup(Backup { .. }) => FIXED_ANSWER_BYTES,
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
            AdminRequest::Ping(Ping { .. })
            | AdminRequest::Stats(Stats)
            | AdminRequest::StatsEx(StatsEx)
            | AdminRequest::Gc(Gc)
            | AdminRequest::ReplicationStats(ReplicationStats) => Ok(()),
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
            | AdminRequest::ReplicationStats(ReplicationStats) => {}
            AdminRequest::Gc(Gc) => w.u32(0),
            AdminRequest::Backup(Backup { dir }) => w.short(dir.as_bytes()),
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
        }
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
