//! TENANT_DELETE (version 5, decision 0032 §6): erasure of a tenant by forgetting its keys;
//! and TENANT_ROTATE_KEY (§7): a new version of a tenant's data key. The operator's only.
//! Layouts in docs/protocol.md#tenant_delete and #tenant_rotate_key.

use super::super::check::{EncodeError, within};
use super::super::cursor::Cursor;
use super::super::writer::ChunkWriter;
use crate::error::DecodeError;
use ctxstore_vocab::limits::TENANT_NAME_BYTES_MAX;

/// Deletes the tenant named `name` (1..=`TENANT_NAME_BYTES_MAX` bytes): its keys destroyed,
/// its contexts deleted, its tokens refused from then on. Sent again, it answers as the first
/// time did (and waits again for the replica).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantDelete {
    pub name: String,
}

/// `TenantDeleted::flags` bits.
pub mod tenant_deleted_flags {
    /// The store seals payloads: the tenant's keys are destroyed in its keyring, so what it
    /// stored opens nowhere any more.
    pub const KEYS_DESTROYED: u32 = 1 << 0;
    /// The server replicates and the object store holds the deletion (the replica's keyring
    /// and a cut with the tenant-deleted record): no restore brings the tenant back.
    pub const REPLICA_UPDATED: u32 = 1 << 1;
    pub const KNOWN: u32 = KEYS_DESTROYED | REPLICA_UPDATED;
}

/// Answer to TENANT_DELETE: `u32 tenant_id, u32 flags`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TenantDeleted {
    pub tenant_id: u32,
    pub flags: u32,
}

/// The answer's body.
pub const TENANT_DELETED_BYTES: usize = 8;

pub(super) fn read_request(cursor: &mut Cursor) -> Result<TenantDelete, DecodeError> {
    let name = cursor.short_string("name")?;
    if name.is_empty() {
        return Err(cursor.invalid("name", "empty"));
    }
    if name.len() > TENANT_NAME_BYTES_MAX {
        return Err(cursor.too_large("name", name.len() as u64, TENANT_NAME_BYTES_MAX as u64));
    }
    Ok(TenantDelete { name })
}

pub(super) fn check_request(request: &TenantDelete) -> Result<(), EncodeError> {
    check_name(&request.name)
}

pub(super) fn write_request(w: &mut ChunkWriter, request: &TenantDelete) {
    w.short(request.name.as_bytes());
}

/// What the wire cannot carry of a tenant's name (TENANT_DELETE's and TENANT_ROTATE_KEY's).
fn check_name(name: &str) -> Result<(), EncodeError> {
    within("name", name.len(), 1, TENANT_NAME_BYTES_MAX as u64, "bytes")
}

pub(super) fn read_answer(cursor: &mut Cursor) -> Result<TenantDeleted, DecodeError> {
    let tenant_id = cursor.u32()?;
    if tenant_id == 0 {
        return Err(cursor.invalid("tenant_id", "0 (the operator is never deleted)"));
    }
    let flags = cursor.flags(tenant_deleted_flags::KNOWN, "flags")?;
    Ok(TenantDeleted { tenant_id, flags })
}

pub(super) fn write_answer(w: &mut ChunkWriter, deleted: &TenantDeleted) {
    assert!(deleted.tenant_id != 0, "the operator is never deleted");
    assert_eq!(deleted.flags & !tenant_deleted_flags::KNOWN, 0);
    w.u32(deleted.tenant_id);
    w.u32(deleted.flags);
}

/// A new version of the data key of the tenant named `name` (`operator`: the operator's own):
/// TENANT_ROTATE_KEY (version 5, decision 0032 §7), the operator's only. The request's body
/// is TENANT_DELETE's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantRotateKey {
    pub name: String,
}

/// Answer to TENANT_ROTATE_KEY: `u32 tenant_id, u16 key_version, u16 reserved (0)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TenantKeyRotated {
    pub tenant_id: u32,
    /// The new version: new payloads are sealed under it (1 and up: version 0 is the first).
    pub key_version: u16,
}

pub(super) fn read_rotate_request(cursor: &mut Cursor) -> Result<TenantRotateKey, DecodeError> {
    read_request(cursor).map(|TenantDelete { name }| TenantRotateKey { name })
}

pub(super) fn check_rotate_request(request: &TenantRotateKey) -> Result<(), EncodeError> {
    check_name(&request.name)
}

pub(super) fn write_rotate_request(w: &mut ChunkWriter, request: &TenantRotateKey) {
    w.short(request.name.as_bytes());
}

pub(super) fn read_rotated(cursor: &mut Cursor) -> Result<TenantKeyRotated, DecodeError> {
    let tenant_id = cursor.u32()?;
    let key_version = cursor.u16()?;
    if key_version == 0 {
        return Err(cursor.invalid("key_version", "0 (a rotation makes version 1 or later)"));
    }
    cursor.zero(2, "reserved")?;
    Ok(TenantKeyRotated {
        tenant_id,
        key_version,
    })
}

pub(super) fn write_rotated(w: &mut ChunkWriter, rotated: &TenantKeyRotated) {
    assert!(
        rotated.key_version > 0,
        "a rotation makes version 1 or later"
    );
    w.u32(rotated.tenant_id);
    w.u16(rotated.key_version);
    w.u16(0);
}
