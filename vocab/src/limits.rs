//! Limits every party enforces or respects, defined once (issue 30): the engine refuses what
//! passes them (TOO_LARGE naming the limit), the protocol's codec refuses to encode it, and
//! clients check before they send. Counts are `_MAX` of items, sizes `_BYTES_MAX` of bytes.
//! Server settings that an operator tunes (frame size, blob size, pages of turns) are not
//! here: they are configuration, announced in HELLO.

/// A context's name: 1..=256 bytes of UTF-8.
pub const CONTEXT_NAME_BYTES_MAX: usize = 256;
/// Tags of one context.
pub const TAGS_PER_CONTEXT_MAX: usize = 32;
/// A tag's key: 1..=64 bytes.
pub const TAG_KEY_BYTES_MAX: usize = 64;
/// A tag's value: 1..=1,024 bytes.
pub const TAG_VALUE_BYTES_MAX: usize = 1024;
/// A key-value entry's key: 1..=256 bytes.
pub const KV_KEY_BYTES_MAX: usize = 256;
/// Key-value entries one put or delete may carry (one record, one group commit).
pub const KV_ENTRIES_PER_REQUEST_MAX: usize = 128;
/// Key-value entries one KV_TOUCH may refresh (one record, one group commit; like a put).
pub const KV_TOUCH_KEYS_MAX: usize = 128;
/// Key-value entries one listing page may return.
pub const KV_PAGE_MAX: u32 = 1000;
/// Contexts one listing page may return.
pub const CONTEXT_PAGE_MAX: u32 = 1000;

/// A turn's key: 1..=64 bytes, unique in its context.
pub const TURN_KEY_BYTES_MAX: usize = 64;
/// Labels of one turn.
pub const LABELS_PER_TURN_MAX: usize = 16;
/// A label's key: 1..=64 bytes.
pub const LABEL_KEY_BYTES_MAX: usize = 64;
/// Label keys and values of one turn, together.
pub const LABELS_BYTES_MAX: usize = 1024;
/// Links of one turn to turns of any context.
pub const LINKS_PER_TURN_MAX: usize = 8;

/// Turns one batch append (APPEND_TURNS) may carry: one request, one group commit.
pub const APPEND_BATCH_TURNS_MAX: usize = 64;
/// Turns one turn-log page may return.
pub const LOG_PAGE_MAX: u32 = 1000;
/// Turns one turn-log page may look at (a selective label filter may match few): past it
/// the page ends early with a cursor.
pub const LOG_SCAN_MAX: u32 = 100_000;
/// Turns one store-wide find page may return.
pub const FIND_PAGE_MAX: u32 = 1000;

/// Chunks one chunked payload may name.
pub const CHUNKS_PER_PAYLOAD_MAX: u32 = 65_536;
/// Largest chunk (chunkers cut at 8 KiB by default; this bounds what one entry can make the
/// server hash and hold).
pub const CHUNK_BYTES_MAX: u32 = 1 << 20;

/// A HELLO token.
pub const TOKEN_BYTES_MAX: usize = 1024;
/// A time to live: at most 100 years, in milliseconds.
pub const TTL_MS_MAX: u64 = 100 * 365 * 24 * 3600 * 1000;

/// A tenant's name (decision 0032): 1 to this many bytes of `[a-z0-9_-]`, the same in the
/// tenants file and the keyring.
pub const TENANT_NAME_BYTES_MAX: usize = 64;

/// Whether `name` is a tenant name: 1 to [`TENANT_NAME_BYTES_MAX`] bytes of `[a-z0-9_-]`.
pub fn is_tenant_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= TENANT_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"_-".contains(&byte))
}
