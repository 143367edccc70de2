//! TENANT_LIST (version 5, decision 0032 §8): a page of the server's tenants, in name order,
//! each with its usage, its quotas and its refusals (a tenant's token: its own only). Layout in
//! docs/protocol.md#tenant_list.

use super::super::check::{EncodeError, within};
use super::super::cursor::Cursor;
use super::super::writer::ChunkWriter;
use crate::error::DecodeError;
use ctxstore_vocab::limits::TENANT_NAME_BYTES_MAX;

/// The most tenants one page holds.
pub const TENANT_LIST_LIMIT: u32 = 1_000;

/// A page of tenants whose names sort after `after` (`""`: from the first), at most `limit`
/// (1..=`TENANT_LIST_LIMIT`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantList {
    pub after: String,
    pub limit: u32,
}

/// `TenantWire::flags` bits.
pub mod tenant_flags {
    /// The server's tenants file names it.
    pub const IN_FILE: u8 = 1 << 0;
    /// The store has registered its name (a tenant record): it has a TenantId.
    pub const REGISTERED: u8 = 1 << 1;
    /// Deleted (TENANT_DELETE): its contexts are gone, its tokens refused, its id and name
    /// never given again.
    pub const DELETED: u8 = 1 << 2;
    pub const KNOWN: u8 = IN_FILE | REGISTERED | DELETED;
}

/// `TenantWire::rights` bits (its tokens' rights; 0 when the file does not name it).
pub mod tenant_rights {
    pub const READ: u8 = 1 << 0;
    pub const WRITE: u8 = 1 << 1;
    pub const ADMIN: u8 = 1 << 2;
    pub const KNOWN: u8 = READ | WRITE | ADMIN;
}

/// A tenant's limits as TENANT_LIST answers them; 0: no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuotasWire {
    pub bytes: u64,
    pub contexts: u64,
    pub appends_per_s: u64,
    pub connections: u64,
    pub streams: u64,
}

/// One tenant: who it is, what it uses, what it may use, how often it was refused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantWire {
    /// 0 while the store has not registered it (a standby that has not seen its record yet).
    pub tenant_id: u32,
    pub flags: u8,
    pub rights: u8,
    pub name: String,
    pub contexts: u64,
    pub streams_open: u64,
    pub stored_bytes: u64,
    pub connections: u64,
    pub quotas: QuotasWire,
    /// Requests refused with QUOTA_EXCEEDED since the server started.
    pub refusals: u64,
}

/// Answer to TENANT_LIST: the page, and the name to continue after (`""`: the last page).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantsListed {
    pub tenants: Vec<TenantWire>,
    pub next: String,
}

/// `u32 tenant_id, u8 flags, u8 rights, u16 name_len`, the name, then the usage, the quotas
/// and the refusals (10 × u64); the name's bytes come on top.
const TENANT_FIXED_BYTES: usize = 4 + 1 + 1 + 2 + 10 * 8;

/// The largest answer: `u32 count`, the tenants, `u16 next_len` and the name.
pub const TENANTS_LISTED_BYTES_MAX: usize = 4
    + TENANT_LIST_LIMIT as usize * (TENANT_FIXED_BYTES + TENANT_NAME_BYTES_MAX)
    + 2
    + TENANT_NAME_BYTES_MAX;

pub(super) fn read_request(cursor: &mut Cursor) -> Result<TenantList, DecodeError> {
    let after = cursor.short_string("after")?;
    if after.len() > TENANT_NAME_BYTES_MAX {
        return Err(cursor.too_large("after", after.len() as u64, TENANT_NAME_BYTES_MAX as u64));
    }
    let limit = cursor.u32()?;
    if limit == 0 {
        return Err(cursor.invalid("limit", "0 (at least one tenant a page)"));
    }
    if limit > TENANT_LIST_LIMIT {
        return Err(cursor.too_large("limit", u64::from(limit), u64::from(TENANT_LIST_LIMIT)));
    }
    Ok(TenantList { after, limit })
}

pub(super) fn check_request(request: &TenantList) -> Result<(), EncodeError> {
    within(
        "after",
        request.after.len(),
        0,
        TENANT_NAME_BYTES_MAX as u64,
        "bytes",
    )?;
    within(
        "limit",
        request.limit as usize,
        1,
        u64::from(TENANT_LIST_LIMIT),
        "tenants",
    )
}

pub(super) fn write_request(w: &mut ChunkWriter, request: &TenantList) {
    w.short(request.after.as_bytes());
    w.u32(request.limit);
}

pub(super) fn read_answer(cursor: &mut Cursor) -> Result<TenantsListed, DecodeError> {
    let count = cursor.list_count()?;
    if count > TENANT_LIST_LIMIT {
        return Err(cursor.too_large("count", u64::from(count), u64::from(TENANT_LIST_LIMIT)));
    }
    let capacity = cursor.list_capacity(count as usize, TENANT_FIXED_BYTES);
    let mut tenants = Vec::with_capacity(capacity);
    for _ in 0..count {
        tenants.push(read_tenant(cursor)?);
    }
    let next = read_name(cursor, "next")?;
    Ok(TenantsListed { tenants, next })
}

fn read_tenant(cursor: &mut Cursor) -> Result<TenantWire, DecodeError> {
    let tenant_id = cursor.u32()?;
    let flags = cursor.flags_u8(tenant_flags::KNOWN, "flags")?;
    let rights = cursor.flags_u8(tenant_rights::KNOWN, "rights")?;
    let name = read_name(cursor, "name")?;
    if name.is_empty() {
        return Err(cursor.invalid("name", "empty"));
    }
    Ok(TenantWire {
        tenant_id,
        flags,
        rights,
        name,
        contexts: cursor.u64()?,
        streams_open: cursor.u64()?,
        stored_bytes: cursor.u64()?,
        connections: cursor.u64()?,
        quotas: QuotasWire {
            bytes: cursor.u64()?,
            contexts: cursor.u64()?,
            appends_per_s: cursor.u64()?,
            connections: cursor.u64()?,
            streams: cursor.u64()?,
        },
        refusals: cursor.u64()?,
    })
}

/// `u16 len`, a tenant name's bytes (at most `TENANT_NAME_BYTES_MAX`).
fn read_name(cursor: &mut Cursor, field: &'static str) -> Result<String, DecodeError> {
    let name = cursor.short_string(field)?;
    if name.len() > TENANT_NAME_BYTES_MAX {
        return Err(cursor.too_large(field, name.len() as u64, TENANT_NAME_BYTES_MAX as u64));
    }
    Ok(name)
}

/// The answer (the server built it within the limits: names of tenant names, a page of at
/// most `TENANT_LIST_LIMIT`).
pub(super) fn write_answer(w: &mut ChunkWriter, listed: &TenantsListed) {
    assert!(listed.tenants.len() <= TENANT_LIST_LIMIT as usize);
    w.u32(listed.tenants.len() as u32);
    for tenant in &listed.tenants {
        assert!(tenant.name.len() <= TENANT_NAME_BYTES_MAX);
        w.u32(tenant.tenant_id);
        w.u8(tenant.flags);
        w.u8(tenant.rights);
        w.short(tenant.name.as_bytes());
        for value in [
            tenant.contexts,
            tenant.streams_open,
            tenant.stored_bytes,
            tenant.connections,
            tenant.quotas.bytes,
            tenant.quotas.contexts,
            tenant.quotas.appends_per_s,
            tenant.quotas.connections,
            tenant.quotas.streams,
            tenant.refusals,
        ] {
            w.u64(value);
        }
    }
    assert!(listed.next.len() <= TENANT_NAME_BYTES_MAX);
    w.short(listed.next.as_bytes());
}
