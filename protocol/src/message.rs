//! The message types of protocol versions 1 to 7, their flags and limits, and the wire
//! structs several messages share. The messages themselves are values of their family's types
//! (`codec/`: `Request`, `Response`, `ReadsRequest`, …). Byte layouts: docs/protocol.md and
//! `codec/`. A response's type is its request's type with the high bit set; ERROR is
//! 0xFFFF. Version 2 (decision 0007) adds contexts by name, tags, listing and key-value, turns
//! for agent frameworks, retention, backup and garbage collection (GC, STATS_EX), overlays, and
//! payloads stored as chunks the server may already have (PUT_CHUNKED, issue 16). Version 4
//! (decision 0031) adds ROLE, the frame flag `ACK_AFTER` and two error codes; version 5
//! (decision 0032) TENANT_LIST, TENANT_DELETE, TENANT_ROTATE_KEY and QUOTA_EXCEEDED; version 6
//! (decision 0033) vector search; version 7 vectors on turns and the search over them.

use bytes::Bytes;

/// The message table: one row per message, its code, its name on the wire, its family (the
/// codec module that owns its body, `codec::Family`), the protocol version it arrived in and
/// its answer (the family's answer variant, and the type it carries when that is not the
/// struct of the same name). The request is the struct named after the message in the
/// family's module (`overlays::PatchTurn`). Everything a message type is elsewhere comes from
/// this row: `MessageType` and its `ALL`, `name`, `family`, `since_version`, the codec's
/// routing (`Family::of`), the pairing of request and answer (`codec::Ask`, so a call cannot
/// take another message's answer, and `From<request> for Request`), and the clients'
/// generated constants (`clients/python/ctxstore/_wire.py`, `clients/typescript/src/wire.ts`,
/// written from this table by `protocol/tests/generated_clients.rs`, which fails when they
/// are stale). Adding a message: docs/architecture.md, *Adding a message*.
macro_rules! message_table {
    ($($variant:ident = $code:literal, $name:literal, $family:ident($module:ident), $since:literal
        => $answer:ident $(($answer_type:ty))?;)*) => {
        /// Message types. Requests are 0x0001..=0x00FF; a response is `request | RESPONSE_BIT`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum MessageType {
            $($variant = $code,)*
        }

        impl MessageType {
            /// Every message type, in the table's order.
            pub const ALL: [MessageType; <[u16]>::len(&[$($code),*])] = [$(MessageType::$variant,)*];

            /// The name used in docs/protocol.md.
            pub fn name(self) -> &'static str {
                match self {
                    $(MessageType::$variant => $name,)*
                }
            }

            /// The family that owns the message's body (a module of `codec/`).
            pub fn family(self) -> &'static str {
                match self {
                    $(MessageType::$variant => stringify!($family),)*
                }
            }

            /// The protocol version that introduced this message: a connection that negotiated
            /// an older one answers it UNKNOWN_MESSAGE.
            pub fn since_version(self) -> u16 {
                match self {
                    $(MessageType::$variant => $since,)*
                }
            }
        }

        impl crate::codec::Family {
            /// Which family owns a message type, and which of its messages it is.
            pub(crate) fn of(message_type: MessageType) -> crate::codec::Family {
                match message_type {
                    $(MessageType::$variant => {
                        crate::codec::Family::$family(crate::codec::$module::Kind::$variant)
                    })*
                }
            }
        }

        $(
            impl crate::codec::Ask for crate::codec::$module::$variant {
                const MESSAGE_TYPE: MessageType = MessageType::$variant;
                type Answer = answer_type!($module, $answer $(, $answer_type)?);

                fn answer(
                    response: crate::codec::Response,
                ) -> Result<Self::Answer, crate::codec::Response> {
                    match response {
                        crate::codec::Response::$family(
                            crate::codec::$module::Answers::$answer(answer),
                        ) => Ok(answer),
                        other => Err(other),
                    }
                }

                fn respond(answer: Self::Answer) -> crate::codec::Response {
                    crate::codec::Response::$family(crate::codec::$module::Answers::$answer(answer))
                }
            }

            impl From<crate::codec::$module::$variant> for crate::codec::$module::Requests {
                fn from(request: crate::codec::$module::$variant) -> crate::codec::$module::Requests {
                    crate::codec::$module::Requests::$variant(request)
                }
            }

            impl From<crate::codec::$module::$variant> for crate::codec::Request {
                fn from(request: crate::codec::$module::$variant) -> crate::codec::Request {
                    crate::codec::Request::$family(request.into())
                }
            }
        )*
    };
}

/// The answer column's type: the struct of the same name in the family's module, or the type
/// a tuple answer carries (`Turn(TurnWire)`).
macro_rules! answer_type {
    ($module:ident, $answer:ident) => {
        crate::codec::$module::$answer
    };
    ($module:ident, $answer:ident, $answer_type:ty) => {
        $answer_type
    };
}

message_table! {
    Hello = 0x0001, "HELLO", Admin(admin), 1 => Negotiated;
    Ping = 0x0002, "PING", Admin(admin), 1 => Pong;
    CtxCreate = 0x0003, "CTX_CREATE", Contexts(contexts), 1 => Context;
    CtxFork = 0x0004, "CTX_FORK", Contexts(contexts), 1 => Context;
    GetHead = 0x0005, "GET_HEAD", Contexts(contexts), 1 => Context;
    AppendTurn = 0x0006, "APPEND_TURN", Appends(appends), 1 => Appended;
    AppendTurnByHash = 0x0007, "APPEND_TURN_BY_HASH", Appends(appends), 1 => Appended;
    GetTurn = 0x0008, "GET_TURN", Reads(reads), 1 => Turn(TurnWire);
    GetLast = 0x0009, "GET_LAST", Reads(reads), 1 => Turns;
    GetBefore = 0x000A, "GET_BEFORE", Reads(reads), 1 => Turns;
    GetRangeByDepth = 0x000B, "GET_RANGE_BY_DEPTH", Reads(reads), 1 => Turns;
    GetChain = 0x000C, "GET_CHAIN", Reads(reads), 1 => Turns;
    GetBlob = 0x000D, "GET_BLOB", Blobs(blobs), 1 => Blob(PayloadWire);
    HasBlobs = 0x000E, "HAS_BLOBS", Blobs(blobs), 1 => BlobsHeld;
    Stats = 0x000F, "STATS", Admin(admin), 1 => Stats(StatsWire);
    // Version 2: contexts as agent threads (decision 0007).
    CtxOpen = 0x0010, "CTX_OPEN", Contexts(contexts), 2 => Opened;
    CtxShow = 0x0011, "CTX_SHOW", Contexts(contexts), 2 => ContextInfo;
    CtxTag = 0x0012, "CTX_TAG", Contexts(contexts), 2 => ContextInfo;
    CtxList = 0x0013, "CTX_LIST", Contexts(contexts), 2 => ContextList;
    CtxName = 0x0014, "CTX_NAME", Contexts(contexts), 2 => ContextInfo;
    KvPut = 0x0015, "KV_PUT", Kv(kv), 2 => Done;
    KvGet = 0x0016, "KV_GET", Kv(kv), 2 => KvValue;
    KvDelete = 0x0017, "KV_DELETE", Kv(kv), 2 => Done;
    KvList = 0x0018, "KV_LIST", Kv(kv), 2 => KvListed;
    // Version 2: turns for agent frameworks (decision 0009).
    AppendTurns = 0x0019, "APPEND_TURNS", Appends(appends), 2 => AppendedTurns;
    GetTurnByKey = 0x001A, "GET_TURN_BY_KEY", Reads(reads), 2 => TurnInfo;
    TurnLog = 0x001B, "TURN_LOG", Reads(reads), 2 => TurnLogPage;
    ReadPage = 0x001C, "READ_PAGE", Reads(reads), 2 => Page;
    FindTurns = 0x001D, "FIND_TURNS", Reads(reads), 2 => FoundTurns;
    // Version 2: retention (issue 15), backup (issue 18), garbage collection (issue 15).
    CtxDelete = 0x001E, "CTX_DELETE", Retention(retention), 2 => Retention;
    CtxPrune = 0x001F, "CTX_PRUNE", Retention(retention), 2 => Retention;
    CtxTtl = 0x0020, "CTX_TTL", Retention(retention), 2 => Retention;
    Backup = 0x0021, "BACKUP", Admin(admin), 2 => BackedUp(BackupWire);
    Gc = 0x0022, "GC", Admin(admin), 2 => GcDone(GcWire);
    StatsEx = 0x0023, "STATS_EX", Admin(admin), 2 => ExtendedStats;
    // Version 2: overlays and redaction (issue 15, decision 0012); sub-blob dedup (issue 16).
    PatchTurn = 0x0024, "PATCH_TURN", Overlays(overlays), 2 => Patched;
    RedactTurn = 0x0025, "REDACT_TURN", Overlays(overlays), 2 => Redacted;
    PurgeBlob = 0x0026, "PURGE_BLOB", Overlays(overlays), 2 => Purged;
    PutChunked = 0x0027, "PUT_CHUNKED", Blobs(blobs), 2 => ChunkedStored;
    // Version 3: key-value entries with a time to live (issue 34, decision 0028).
    KvPutEx = 0x0028, "KV_PUT_EX", Kv(kv), 3 => Done;
    KvGetEx = 0x0029, "KV_GET_EX", Kv(kv), 3 => KvValueEx;
    KvListEx = 0x002A, "KV_LIST_EX", Kv(kv), 3 => KvListedEx;
    KvTouch = 0x002B, "KV_TOUCH", Kv(kv), 3 => KvTouched;
    KvGetMany = 0x002C, "KV_GET_MANY", Kv(kv), 3 => KvValues;
    // Version 3: streams (issue 32, decision 0027), replication's figures (issue 31).
    StreamOpen = 0x0030, "STREAM_OPEN", Streams(streams), 3 => Opened;
    StreamAppend = 0x0031, "STREAM_APPEND", Streams(streams), 3 => Appended;
    StreamSeal = 0x0032, "STREAM_SEAL", Streams(streams), 3 => Sealed;
    StreamAbort = 0x0033, "STREAM_ABORT", Streams(streams), 3 => Aborted;
    StreamList = 0x0034, "STREAM_LIST", Streams(streams), 3 => Listed;
    StreamRead = 0x0035, "STREAM_READ", Streams(streams), 3 => Read;
    Watch = 0x0036, "WATCH", Streams(streams), 3 => Watched;
    ReplicationStats = 0x0037, "REPLICATION_STATS", Admin(admin), 3 => ReplicationStats(Box<ReplicationStatsWire>);
    StreamFollow = 0x0038, "STREAM_FOLLOW", Streams(streams), 3 => Pushed;
    // Version 4: failover on the object store (issue 47, decision 0031).
    Role = 0x0039, "ROLE", Admin(admin), 4 => RoleAnswer(Box<crate::codec::admin::RoleAnswer>);
    // Version 5: tenants (issue 48, decision 0032).
    TenantList = 0x003A, "TENANT_LIST", Admin(admin), 5 => TenantsListed;
    TenantDelete = 0x003B, "TENANT_DELETE", Admin(admin), 5 => TenantDeleted;
    TenantRotateKey = 0x003C, "TENANT_ROTATE_KEY", Admin(admin), 5 => TenantKeyRotated;
    // Version 6: vector search (issue 49, decision 0033).
    VectorIndexCreate = 0x003D, "VECTOR_INDEX_CREATE", Vectors(vectors), 6 => VectorIndex(crate::codec::vectors::VectorIndexWire);
    VectorIndexDrop = 0x003E, "VECTOR_INDEX_DROP", Vectors(vectors), 6 => VectorIndexDropped(crate::codec::vectors::VectorIndexWire);
    VectorIndexList = 0x003F, "VECTOR_INDEX_LIST", Vectors(vectors), 6 => VectorIndexes;
    VectorSearch = 0x0040, "VECTOR_SEARCH", Vectors(vectors), 6 => VectorHits;
    KvPutVectors = 0x0041, "KV_PUT_VECTORS", Vectors(vectors), 6 => Stored;
    // Version 7: vectors on turns and the search over them (issue 49, decision 0033).
    AppendTurnsVectors = 0x0042, "APPEND_TURNS_VECTORS", Vectors(vectors), 7 => TurnsStored(crate::codec::appends::AppendedTurns);
    VectorSearchTurns = 0x0043, "VECTOR_SEARCH_TURNS", Vectors(vectors), 7 => TurnHits;
}

pub const RESPONSE_BIT: u16 = 0x8000;
pub const ERROR_TYPE: u16 = 0xFFFF;

impl MessageType {
    pub fn code(self) -> u16 {
        self as u16
    }

    pub fn response_code(self) -> u16 {
        self as u16 | RESPONSE_BIT
    }

    pub fn from_code(code: u16) -> Option<MessageType> {
        MessageType::ALL
            .into_iter()
            .find(|candidate| candidate.code() == code)
    }

    /// Whether the request's body starts with a `context_id u64` that the frame flag
    /// `CTX_BY_NAME` replaces by a name (version 2).
    pub fn takes_context(self) -> bool {
        matches!(
            self,
            MessageType::GetHead
                | MessageType::AppendTurn
                | MessageType::AppendTurnByHash
                | MessageType::GetLast
                | MessageType::GetBefore
                | MessageType::GetRangeByDepth
        )
    }

    /// Whether a write may say when it is acknowledged (frame flag `ACK_AFTER`, version 4,
    /// decision 0031): the appends, a stream's seal (it appends the turn) and the key-value
    /// puts. Everything else is BAD_FRAME with the flag set.
    pub fn takes_ack_after(self) -> bool {
        matches!(
            self,
            MessageType::AppendTurn
                | MessageType::AppendTurnByHash
                | MessageType::AppendTurns
                | MessageType::AppendTurnsVectors
                | MessageType::StreamSeal
                | MessageType::KvPut
                | MessageType::KvPutEx
                | MessageType::KvPutVectors
        )
    }

    /// Whether a read may ask for the overlay view (frame flag `OVERLAYS`, decision 0012):
    /// every message whose answer carries TURNs, the reads family (`ReadsRequest`).
    pub fn takes_overlays(self) -> bool {
        matches!(
            crate::codec::Family::of(self),
            crate::codec::Family::Reads(_)
        )
    }
}

/// Bits of the frame header's `flags` (version 2; version 1 requires 0).
pub mod frame_flags {
    use super::AckAfter;

    /// The request's leading `context_id u64` is replaced by `u16 name_len, name` (UTF-8,
    /// 1..=256 bytes): the context is named by its name. Only on messages that take a context
    /// (`MessageType::takes_context`).
    pub const CTX_BY_NAME: u16 = 1 << 0;
    /// Overlay view (decision 0012). On a read (`MessageType::takes_overlays`): the body ends
    /// with `u64 as_of` (0: the latest view). On its answer: the body ends with `u32 count`
    /// and one OVERLAY (16 bytes) per TURN of the answer, in order.
    pub const OVERLAYS: u16 = 1 << 1;
    /// More frames answer this req_id (version 3, answers only): every STREAM_FOLLOW answer
    /// frame but the last (docs/protocol.md#stream_follow). A request carrying it is refused.
    pub const MORE: u16 = 1 << 2;
    /// Bits 3–4, when a write is acknowledged (version 4, decision 0031, requests only): 0
    /// the server's default (`--ack-after`), 1 `local`, 2 `remote`, 3 BAD_FRAME. Only on the
    /// writes of `MessageType::takes_ack_after`; decoded into `Request::AckAfter`.
    pub const ACK_AFTER: u16 = 0b11 << ACK_AFTER_SHIFT;
    /// Where `ACK_AFTER`'s two bits start.
    pub const ACK_AFTER_SHIFT: u16 = 3;

    /// `ACK_AFTER`'s bits for `after`.
    pub const fn ack_after(after: AckAfter) -> u16 {
        (after as u16) << ACK_AFTER_SHIFT
    }

    /// The bits a request may carry (a `FrameReader` of requests refuses any other).
    pub const KNOWN: u16 = CTX_BY_NAME | OVERLAYS | ACK_AFTER;
    /// The bits an answer frame may carry (`FrameReader::for_answers`; which answer may
    /// carry which is `decode_response`'s to check).
    pub const ANSWER_KNOWN: u16 = CTX_BY_NAME | OVERLAYS | MORE;
}

/// When a write is acknowledged (version 4, decision 0031): the frame flag `ACK_AFTER` of a
/// write, and ROLE's `ack_after` (the server's default). On the wire 1 and 2; 0 in the flag
/// is "the server's default" (no `Request::AckAfter`), 3 is BAD_FRAME.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AckAfter {
    /// Once it is durable on this server's disk (fdatasync): what every version-1..3 write
    /// gets.
    Local = 1,
    /// Once the object store holds it too (the segment that holds it was stored).
    Remote = 2,
}

impl AckAfter {
    pub const ALL: [AckAfter; 2] = [AckAfter::Local, AckAfter::Remote];

    /// From its wire value (1 or 2); `None` for any other.
    pub fn from_code(code: u8) -> Option<AckAfter> {
        match code {
            1 => Some(AckAfter::Local),
            2 => Some(AckAfter::Remote),
            _ => None,
        }
    }

    /// As docs/protocol.md and `--ack-after` name it.
    pub fn name(self) -> &'static str {
        match self {
            AckAfter::Local => "local",
            AckAfter::Remote => "remote",
        }
    }
}

/// Bits of an OVERLAY's `overlay_flags`.
pub mod overlay_flags {
    /// The turn is redacted: no payload (its TURN says BLAKE3 of no bytes, length 0).
    pub const REDACTED: u8 = 1 << 0;
    pub const KNOWN: u8 = REDACTED;
}

/// A turn's overlay state (16 bytes: `u64 overlay_seq, u8 overlay_flags, 7 reserved`): the
/// sequence number of the overlay its TURN shows (0: as appended), and whether it is
/// redacted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct OverlayWire {
    pub overlay_seq: u64,
    pub redacted: bool,
}

/// Bytes of an `OverlayWire`.
pub const OVERLAY_WIRE_BYTES: usize = 16;

/// A context named in a request: by its ContextID, or (version 2) by its unique name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ContextRef {
    Id(u64),
    /// 1..=`CONTEXT_NAME_BYTES_MAX` bytes of UTF-8.
    Name(String),
}

impl From<u64> for ContextRef {
    fn from(context_id: u64) -> ContextRef {
        ContextRef::Id(context_id)
    }
}

impl std::fmt::Display for ContextRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ContextRef::Id(context_id) => write!(f, "{context_id}"),
            ContextRef::Name(name) => write!(f, "@{name}"),
        }
    }
}

/// A context's head, name, tags and times (CONTEXT_INFO, version 2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextInfoWire {
    pub head: ContextHeadWire,
    pub created_at_unix_ms: u64,
    pub updated_at_unix_ms: u64,
    /// `None` on the wire is `name_len = 0`.
    pub name: Option<String>,
    /// Sorted by key, keys unique.
    pub tags: Vec<(String, String)>,
}

/// Where a CTX_LIST page ended: the last context returned, by ContextID or (with a name
/// prefix) by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListCursorWire {
    Id(u64),
    Name(String),
}

/// A key-value entry as KV_LIST returns it (the value is read with KV_GET or GET_BLOB).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvItemWire {
    pub key: Bytes,
    pub value_hash: BlobHash,
    pub value_len: u32,
}

/// A key-value entry as KV_LIST_EX, KV_TOUCH and (without its key) KV_GET_EX return it:
/// KV_LIST's item and its time to live (version 3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvItemExWire {
    pub key: Bytes,
    pub value_hash: BlobHash,
    pub value_len: u32,
    /// Milliseconds the entry lives after its put or last refresh (0: for ever).
    pub ttl_ms: u64,
    /// When it expires (unix ms; 0: never).
    pub expires_at_unix_ms: u64,
}

/// Bits of `put_flags` in KV_PUT_EX (version 3).
pub mod kv_put_flags {
    /// Keys the context has (live) keep their values.
    pub const IF_ABSENT: u8 = 1 << 0;
    pub const KNOWN: u8 = IF_ABSENT;
}

/// Bits of `kv_flags` in KV_GET_EX and KV_LIST_EX (version 3).
pub mod kv_read_flags {
    /// Restart the TTL of each entry returned (that has one) from now: a durable write.
    pub const REFRESH: u8 = 1 << 0;
    pub const KNOWN: u8 = REFRESH;
}

/// Bits of `open_flags` in CTX_OPEN.
pub mod open_flags {
    /// A name that exists answers its context (`created = 0`) instead of ALREADY_EXISTS.
    pub const GET_OR_CREATE: u8 = 1 << 0;
    /// A context ref follows: copy that context (head, tags, key-value entries).
    pub const CLONE: u8 = 1 << 1;
    pub const KNOWN: u8 = GET_OR_CREATE | CLONE;
}

/// A turn's key, labels and links on the wire (version 2): `u8 key_len, key, u8 label_count,
/// label_count × (u8 key_len, key, u16 value_len, value), u8 link_count, link_count × u64`.
/// Empty: three zero bytes.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ExtrasWire {
    pub key: Bytes,
    pub labels: Vec<(String, String)>,
    pub links: Vec<u64>,
}

/// Where a new turn hangs (APPEND_TURNS): `u8 kind` (0 the head, 1 a new root, 2 a turn),
/// then `u64 turn_id` (0 unless kind 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ParentWire {
    #[default]
    Head,
    Root,
    Turn(u64),
}

/// A turn's payload in APPEND_TURNS: its bytes, the hash of a stored blob, or (version 3) its
/// bytes as one zstd frame the client compressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PayloadSpec {
    Bytes(Bytes),
    Hash(BlobHash),
    /// A zstd frame that inflates to `raw_len` bytes hashing to `hash` (the server checks it
    /// before storing; a blob it has under `hash` is not inflated at all).
    Zstd {
        hash: BlobHash,
        raw_len: u32,
        frame: Bytes,
    },
}

/// One turn of APPEND_TURNS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnSpec {
    pub parent: ParentWire,
    pub type_tag: u64,
    pub codec: u32,
    /// Everything before this turn is summarised in its payload.
    pub summary: bool,
    pub extras: ExtrasWire,
    pub payload: PayloadSpec,
}

/// Bits of `turn_flags` in a TURN_SPEC.
pub mod turn_spec_flags {
    pub const SUMMARY: u8 = 1 << 0;
    /// The payload is the hash of a stored blob (32 bytes), not bytes.
    pub const BY_HASH: u8 = 1 << 1;
    /// The payload is `hash [32]u8`, `raw_len u32`, `frame_len u32` and a zstd frame of
    /// `frame_len` bytes (version 3; not with BY_HASH).
    pub const ZSTD: u8 = 1 << 2;
    pub const KNOWN: u8 = SUMMARY | BY_HASH | ZSTD;
}

/// One turn of APPEND_TURNS' answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendedWire {
    pub turn: TurnWire,
    pub deduped: bool,
    /// The key was there already: `turn` is that earlier turn; nothing was written.
    pub existing: bool,
}

/// A turn with its extras and payload, in version-2 pages (READ_PAGE, TURN_LOG).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnEntryV2 {
    pub turn: TurnWire,
    pub extras: ExtrasWire,
    pub payload: PayloadWire,
}

/// Where a TURN_LOG page ended: `u8 present`, then `u32 phase, u64 next_turn_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogCursorWire {
    pub phase: u32,
    pub next: u64,
}

/// Which page READ_PAGE reads: `u8 kind` (0 LAST, 1 BEFORE, 2 RANGE, 3 WINDOW), then
/// `u64 before_turn_id` (BEFORE; else 0), `u32 from_depth` (RANGE; else 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    Last,
    Before {
        before_turn_id: u64,
    },
    Range {
        from_depth: u32,
    },
    /// From the latest summary turn of the chain to the head (decision 0009).
    Window,
}

/// Bits of `tag_flags` in CTX_TAG.
pub mod tag_flags {
    /// `expected_head` is set: change the tags only if the context's head is that turn.
    pub const EXPECT_HEAD: u32 = 1 << 0;
    pub const KNOWN: u32 = EXPECT_HEAD;
}

/// A BLAKE3-256 hash on the wire: 32 bytes, the one hash type of `ctxstore-vocab`.
pub use ctxstore_vocab::BlobHash;

/// Bits of `read_flags` in read requests.
pub mod read_flags {
    /// Return each turn's payload.
    pub const WITH_PAYLOADS: u32 = 1 << 0;
    /// The client inflates zstd itself: the server may ship stored (compressed) bodies, and the
    /// client checks each payload against its hash.
    pub const ACCEPT_ZSTD: u32 = 1 << 1;
    pub const KNOWN: u32 = WITH_PAYLOADS | ACCEPT_ZSTD;
}

/// Bits of `append_flags` in append requests.
pub mod append_flags {
    /// `expected_head` is set: append only if the context's head is that turn.
    pub const EXPECT_HEAD: u32 = 1 << 0;
    pub const KNOWN: u32 = EXPECT_HEAD;
}

/// The limits the engine enforces too, defined once (`ctxstore-vocab`).
pub use ctxstore_vocab::limits::{
    CHUNK_BYTES_MAX, CHUNKS_PER_PAYLOAD_MAX, CONTEXT_NAME_BYTES_MAX, TOKEN_BYTES_MAX,
};
/// A client's name in HELLO.
pub const NAME_BYTES_MAX: usize = 256;
pub const MESSAGE_BYTES_MAX: usize = 4096;
/// Hard ceiling of HAS_BLOBS hashes and of turns in one TURNS response.
pub const LIST_ITEMS_LIMIT: u32 = 1 << 20;

/// Bytes of a chunk entry of PUT_CHUNKED: `hash 32, u32 len`.
pub const CHUNK_ENTRY_BYTES: usize = 36;
/// Bytes of CHUNKED_STORED: `hash 32, u64 payload_len, u8 already_stored, 7 reserved`.
pub const CHUNKED_STORED_BYTES: usize = 48;

/// One chunk of a payload in PUT_CHUNKED: its BLAKE3 hash and length (1..=`CHUNK_BYTES_MAX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkWire {
    pub hash: BlobHash,
    pub len: u32,
}

/// PUT_CHUNKED's base: the payload's first `kept` chunks (≥ 1) are the first `kept` chunks of
/// the chunked blob `hash` the server stores; the request's `chunks` follow them. A growing
/// state names the previous one, so a step sends only the chunks after the shared prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkBaseWire {
    pub hash: BlobHash,
    pub kept: u32,
}

/// The bytes of one chunk PUT_CHUNKED sends: `index` into its chunks; `bytes` as long as that
/// chunk's `len` (a zero-copy slice of the frame when decoded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentChunkWire {
    pub index: u32,
    pub bytes: Bytes,
}

/// Bytes of a `TurnWire` on the wire.
pub const TURN_WIRE_BYTES: usize = 88;
/// Bytes of a `ContextHeadWire` on the wire.
pub const CONTEXT_HEAD_BYTES: usize = 24;

/// One turn on the wire (88 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnWire {
    pub turn_id: u64,
    pub parent_turn_id: u64,
    pub context_id: u64,
    pub depth: u32,
    pub codec: u32,
    pub type_tag: u64,
    pub payload_hash: BlobHash,
    pub payload_len: u32,
    pub flags: u32,
    pub created_at_unix_ms: u64,
}

/// A context's head on the wire (24 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextHeadWire {
    pub context_id: u64,
    pub head_turn_id: u64,
    pub head_depth: u32,
}

/// How payload bytes travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum PayloadEncoding {
    /// Not requested: no bytes.
    Absent = 0,
    /// The payload as it was appended.
    Raw = 1,
    /// A zstd frame that inflates to `raw_len` bytes (only if the request set ACCEPT_ZSTD).
    Zstd = 2,
}

impl PayloadEncoding {
    pub fn from_code(code: u16) -> Option<PayloadEncoding> {
        match code {
            0 => Some(PayloadEncoding::Absent),
            1 => Some(PayloadEncoding::Raw),
            2 => Some(PayloadEncoding::Zstd),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadWire {
    pub encoding: PayloadEncoding,
    pub raw_len: u32,
    pub data: Bytes,
}

impl PayloadWire {
    pub fn absent() -> Self {
        PayloadWire {
            encoding: PayloadEncoding::Absent,
            raw_len: 0,
            data: Bytes::new(),
        }
    }

    pub fn raw(data: Bytes) -> Self {
        PayloadWire {
            encoding: PayloadEncoding::Raw,
            raw_len: data.len() as u32,
            data,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnEntry {
    pub turn: TurnWire,
    pub payload: PayloadWire,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StatsWire {
    pub turns: u64,
    pub contexts: u64,
    pub blobs: u64,
    pub logical_bytes: u64,
    pub unique_bytes: u64,
    pub stored_bytes: u64,
    pub dedup_hits: u64,
    pub read_only: bool,
    pub connections: u64,
    pub requests_total: u64,
    pub errors_total: u64,
    pub uptime_ms: u64,
}

/// BACKED_UP: a finished backup.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct BackupWire {
    /// Turn records in the copy (everything acknowledged before the backup started, and
    /// possibly more).
    pub turns: u64,
    /// Blob records in the copy.
    pub blobs: u64,
    /// Bytes of the copy: written plus hard-linked.
    pub bytes: u64,
    /// Of `bytes`, those hard-linked (sealed packs on the same file system).
    pub linked_bytes: u64,
    pub duration_ms: u64,
    /// Where the copy is.
    pub dir: String,
}

/// GC_DONE: what one garbage collection did (56 bytes on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GcWire {
    /// Turns found unreachable and recorded as collected in this round.
    pub turns_dead: u64,
    /// Blobs removed from the store.
    pub blobs_dead: u64,
    /// Bytes the pack files shrank by.
    pub bytes_reclaimed: u64,
    /// Packs rewritten with only their live records.
    pub packs_compacted: u32,
    /// Pack bytes of reachable blobs after the round.
    pub live_bytes: u64,
    /// Pack bytes of unreachable blobs left on disk (packs under the compaction threshold).
    pub dead_bytes: u64,
    pub duration_ms: u64,
}

/// The fields STATS_EX adds after STATS' 96 bytes (32 bytes on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GcStatsWire {
    /// Pack bytes of blobs the last garbage collection found reachable (0 before the first
    /// collection since the server started).
    pub live_bytes: u64,
    /// Pack bytes of unreachable blobs still on disk, as of the last collection.
    pub dead_bytes: u64,
    /// Garbage collections completed since the server started.
    pub gc_runs: u64,
    /// Bytes garbage collection gave back to the file system since the server started.
    pub bytes_reclaimed_total: u64,
}

/// Which side of a replica a server is (REPLICATION_STATS `role`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReplicationRoleWire {
    /// The server does not replicate.
    #[default]
    Off = 0,
    /// It ships its store (`--replicate-to`, or a promoted standby).
    Primary = 1,
    /// It follows a replica (`--follow`).
    Standby = 2,
}

/// What replication is doing (REPLICATION_STATS `state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReplicationStateWire {
    #[default]
    Off = 0,
    /// The last cycle shipped (or found nothing new).
    Shipping = 1,
    /// The last cycle (or poll) failed; the next one retries (`reason` says why).
    Failing = 2,
    /// Another primary took the prefix: this one ships nothing more (`primary` names it).
    Fenced = 3,
    /// Replication stopped (the server is shutting down).
    Stopped = 4,
    /// A standby applying what its primary ships.
    Following = 5,
    /// A standby that met a segment it cannot apply: it serves what it has (`reason`).
    Stalled = 6,
    /// A standby whose replica has no restore point yet: it answers as an empty store and
    /// restores the first point its primary ships (`reason` says what it waits for).
    Waiting = 7,
}

impl ReplicationRoleWire {
    pub const ALL: [ReplicationRoleWire; 3] = [
        ReplicationRoleWire::Off,
        ReplicationRoleWire::Primary,
        ReplicationRoleWire::Standby,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReplicationRoleWire::Off => "off",
            ReplicationRoleWire::Primary => "primary",
            ReplicationRoleWire::Standby => "standby",
        }
    }
}

impl ReplicationStateWire {
    pub const ALL: [ReplicationStateWire; 8] = [
        ReplicationStateWire::Off,
        ReplicationStateWire::Shipping,
        ReplicationStateWire::Failing,
        ReplicationStateWire::Fenced,
        ReplicationStateWire::Stopped,
        ReplicationStateWire::Following,
        ReplicationStateWire::Stalled,
        ReplicationStateWire::Waiting,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReplicationStateWire::Off => "off",
            ReplicationStateWire::Shipping => "shipping",
            ReplicationStateWire::Failing => "failing",
            ReplicationStateWire::Fenced => "fenced",
            ReplicationStateWire::Stopped => "stopped",
            ReplicationStateWire::Following => "following",
            ReplicationStateWire::Stalled => "stalled",
            ReplicationStateWire::Waiting => "waiting",
        }
    }
}

/// The longest text of REPLICATION_STATS (target, primary, reason), in bytes.
pub const REPLICATION_TEXT_BYTES_MAX: usize = 1024;
/// The most failure kinds REPLICATION_STATS carries, and the longest kind's name in bytes.
pub const REPLICATION_FAILURE_KINDS_MAX: usize = 32;
pub const REPLICATION_FAILURE_KIND_BYTES_MAX: usize = 32;
/// REPLICATION_STATS' fixed part: 8 bytes of role, state, promoting and reserved, 12 × u64.
pub const REPLICATION_STATS_FIXED_BYTES: usize = 8 + 12 * 8;
/// The largest REPLICATION_STATS answer body.
pub const REPLICATION_STATS_BYTES_MAX: usize = REPLICATION_STATS_FIXED_BYTES
    + 3 * (2 + REPLICATION_TEXT_BYTES_MAX)
    + 2
    + REPLICATION_FAILURE_KINDS_MAX * (1 + REPLICATION_FAILURE_KIND_BYTES_MAX + 8);

/// The answer to REPLICATION_STATS (version 3): this server's side of its replica (issue 31).
/// Layout in docs/protocol.md#replication_stats. Every figure is 0 (and every text empty)
/// on a server that does not replicate.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ReplicationStatsWire {
    pub role: ReplicationRoleWire,
    pub state: ReplicationStateWire,
    /// A standby found the promote request and is becoming the primary.
    pub promoting: bool,
    /// The replica generation shipped (or followed).
    pub generation: u64,
    /// The epoch this primary took (or, on a standby, the newest one seen).
    pub epoch: u64,
    /// The last segment shipped (or applied).
    pub seq: u64,
    /// The record id of the last turn record shipped (or applied): every record up to it is
    /// in the replica (on a standby: in its store).
    pub records: u64,
    /// When the cut holding `records` was taken on the primary (unix ms; 0: none yet).
    pub records_unix_ms: u64,
    /// How old the newest durable but unshipped (on a standby: unapplied) data may be.
    pub lag_ms: u64,
    /// Bytes durable but not shipped (on a standby: listed segments not applied yet): the
    /// backlog's bytes.
    pub lag_bytes: u64,
    /// Objects uploaded (on a standby: fetched) since the server started.
    pub objects_total: u64,
    pub bytes_total: u64,
    /// When the last cycle (or poll) ended well (unix ms; 0: never).
    pub last_success_unix_ms: u64,
    /// Objects the backlog needs (files whole and segments; on a standby: segments listed).
    pub backlog_objects: u64,
    /// The most bytes one segment carries: the backlog's only bound (decision 0019: it is the
    /// store's own files), the size of each PUT it ships in.
    pub segment_bytes_max: u64,
    /// The replica's URL, without credentials (≤ `REPLICATION_TEXT_BYTES_MAX` bytes).
    pub target: String,
    /// A standby: the primary it names (where writes go). A fenced primary: who fenced it.
    pub primary: String,
    /// Why the state is not healthy (failing, fenced, stalled): the last error; else empty.
    pub reason: String,
    /// Failed cycles (or polls) by kind, each kind once (≤ `REPLICATION_FAILURE_KINDS_MAX`).
    pub failures: Vec<(String, u64)>,
}

/// What the server limits, told to the client in the HELLO response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ServerLimits {
    pub frame_bytes_max: u32,
    pub requests_in_flight_max: u32,
    pub blob_bytes_max: u32,
    pub read_turns_max: u32,
    pub has_blobs_max: u32,
}
