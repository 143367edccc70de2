//! What the encoder cannot write, refused before a byte is written: a length outside what its
//! field's width carries (`u8`, `u16`), an empty name where 0 means "none". Each family's
//! `check_request` is made of these checks; the decoders refuse the same, so whatever decodes
//! encodes back.

use crate::frame::FRAME_BYTES_LIMIT;
use crate::message::*;

/// A request the protocol cannot carry: a field longer (or shorter) than the wire allows.
/// Nothing was encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} is {len} {unit}; the protocol carries {min} to {max} {unit}")]
pub struct EncodeError {
    /// What does not fit: `token`, `client_name`, `payload`, `hashes`, `context name`, …
    pub field: &'static str,
    pub len: u64,
    pub min: u64,
    pub max: u64,
    pub unit: &'static str,
}

/// Largest payload one APPEND_TURN can carry: a frame of the protocol's ceiling, less the
/// message's fields (no server accepts more).
pub const APPEND_PAYLOAD_BYTES_LIMIT: u64 = FRAME_BYTES_LIMIT as u64 - 48;

/// Most a `u16`-counted field carries.
pub(super) const SHORT: u64 = u16::MAX as u64;
/// Most a `u8`-counted field carries.
pub(super) const TINY: u64 = u8::MAX as u64;

/// `len` (in `unit`s) is within `min..=max`, else the `EncodeError` naming `field`.
pub(super) fn within(
    field: &'static str,
    len: usize,
    min: u64,
    max: u64,
    unit: &'static str,
) -> Result<(), EncodeError> {
    let len = len as u64;
    if (min..=max).contains(&len) {
        Ok(())
    } else {
        Err(EncodeError {
            field,
            len,
            min,
            max,
            unit,
        })
    }
}

/// A CONTEXT_REF: a name of 1 or more bytes (`name_len = 0` means an id follows).
pub(super) fn context(context: &ContextRef) -> Result<(), EncodeError> {
    match context {
        ContextRef::Id(_) => Ok(()),
        ContextRef::Name(name) => within("context name", name.len(), 1, SHORT, "bytes"),
    }
}

/// TAGS: a `u16` count of `u16`-counted keys and values.
pub(super) fn tags(tags: &[(String, String)]) -> Result<(), EncodeError> {
    within("tags", tags.len(), 0, SHORT, "tags")?;
    tags.iter().try_for_each(|(key, value)| {
        within("tag key", key.len(), 0, SHORT, "bytes")?;
        within("tag value", value.len(), 0, SHORT, "bytes")
    })
}

/// EXTRAS: a `u8`-counted key, labels (`u8` keys, `u16` values) and links.
pub(super) fn extras(extras: &ExtrasWire) -> Result<(), EncodeError> {
    within("key", extras.key.len(), 0, TINY, "bytes")?;
    within("labels", extras.labels.len(), 0, TINY, "labels")?;
    within("links", extras.links.len(), 0, TINY, "links")?;
    extras.labels.iter().try_for_each(|(key, value)| {
        within("label key", key.len(), 0, TINY, "bytes")?;
        within("label value", value.len(), 0, SHORT, "bytes")
    })
}

/// A `u16`-counted name where `len = 0` means none: a name that is there has 1 or more bytes.
pub(super) fn optional_name(field: &'static str, name: &Option<String>) -> Result<(), EncodeError> {
    match name {
        None => Ok(()),
        Some(name) => within(field, name.len(), 1, SHORT, "bytes"),
    }
}
