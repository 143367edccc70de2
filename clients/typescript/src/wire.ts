// Generated from the Rust message table (protocol/src/message.rs), the error codes
// (protocol/src/error.rs) and the shared limits (vocab/src/limits.rs) by
// protocol/tests/generated_clients.rs. Do not edit: change the Rust side, then run
// CTXSTORE_UPDATE_GENERATED=1 cargo test -p ctxstore-protocol --test generated_clients.

/** The wire's message codes, versions, error codes and shared limits. */

/** The newest protocol version spoken. */
export const PROTOCOL_VERSION = 7;
/** The oldest protocol version spoken. */
export const PROTOCOL_VERSION_MIN = 1;
/** Bytes of a frame header. */
export const HEADER_BYTES = 16;
/** Hard ceiling of any frame body. */
export const FRAME_BYTES_LIMIT = 1073741824;
/** A response's type is its request's with this bit. */
export const RESPONSE_BIT = 32768;
/** The message type of an ERROR answer. */
export const ERROR_TYPE = 65535;
/** Bytes of a HELLO token. */
export const TOKEN_BYTES_MAX = 1024;
/** Bytes of a name on the wire (a client's, a server's). */
export const NAME_BYTES_MAX = 256;
/** Bytes of an ERROR answer's message. */
export const MESSAGE_BYTES_MAX = 4096;
/** Hard ceiling of the items of any list in an answer. */
export const LIST_ITEMS_LIMIT = 1048576;
/** Bytes of a context's name. */
export const CONTEXT_NAME_BYTES_MAX = 256;
/** Tags a context may carry. */
export const TAGS_PER_CONTEXT_MAX = 32;
/** Bytes of a tag's key. */
export const TAG_KEY_BYTES_MAX = 64;
/** Bytes of a tag's value. */
export const TAG_VALUE_BYTES_MAX = 1024;
/** Bytes of a key-value key. */
export const KV_KEY_BYTES_MAX = 256;
/** Entries of one KV_PUT. */
export const KV_ENTRIES_PER_REQUEST_MAX = 128;
/** Keys of one KV_TOUCH. */
export const KV_TOUCH_KEYS_MAX = 128;
/** Entries of one KV_LIST page. */
export const KV_PAGE_MAX = 1000;
/** Contexts of one CTX_LIST page. */
export const CONTEXT_PAGE_MAX = 1000;
/** Bytes of a turn's key. */
export const TURN_KEY_BYTES_MAX = 64;
/** Labels of one turn. */
export const LABELS_PER_TURN_MAX = 16;
/** Bytes of a label's key. */
export const LABEL_KEY_BYTES_MAX = 64;
/** Bytes of a turn's labels together. */
export const LABELS_BYTES_MAX = 1024;
/** Links of one turn. */
export const LINKS_PER_TURN_MAX = 8;
/** Turns of one APPEND_TURNS. */
export const APPEND_BATCH_TURNS_MAX = 64;
/** Turns of one TURN_LOG page. */
export const LOG_PAGE_MAX = 1000;
/** Records one TURN_LOG scans. */
export const LOG_SCAN_MAX = 100000;
/** Turns of one FIND_TURNS page. */
export const FIND_PAGE_MAX = 1000;
/** Chunks of one PUT_CHUNKED payload. */
export const CHUNKS_PER_PAYLOAD_MAX = 65536;
/** Bytes of one chunk. */
export const CHUNK_BYTES_MAX = 1048576;
/** The longest time to live, in milliseconds (100 years). */
export const TTL_MS_MAX = 3153600000000;

/** Request types; a response has `request | RESPONSE_BIT`, ERROR is ERROR_TYPE. */
export const MessageType = {
  HELLO: 0x0001,
  PING: 0x0002,
  CTX_CREATE: 0x0003,
  CTX_FORK: 0x0004,
  GET_HEAD: 0x0005,
  APPEND_TURN: 0x0006,
  APPEND_TURN_BY_HASH: 0x0007,
  GET_TURN: 0x0008,
  GET_LAST: 0x0009,
  GET_BEFORE: 0x000a,
  GET_RANGE_BY_DEPTH: 0x000b,
  GET_CHAIN: 0x000c,
  GET_BLOB: 0x000d,
  HAS_BLOBS: 0x000e,
  STATS: 0x000f,
  CTX_OPEN: 0x0010,
  CTX_SHOW: 0x0011,
  CTX_TAG: 0x0012,
  CTX_LIST: 0x0013,
  CTX_NAME: 0x0014,
  KV_PUT: 0x0015,
  KV_GET: 0x0016,
  KV_DELETE: 0x0017,
  KV_LIST: 0x0018,
  APPEND_TURNS: 0x0019,
  GET_TURN_BY_KEY: 0x001a,
  TURN_LOG: 0x001b,
  READ_PAGE: 0x001c,
  FIND_TURNS: 0x001d,
  CTX_DELETE: 0x001e,
  CTX_PRUNE: 0x001f,
  CTX_TTL: 0x0020,
  BACKUP: 0x0021,
  GC: 0x0022,
  STATS_EX: 0x0023,
  PATCH_TURN: 0x0024,
  REDACT_TURN: 0x0025,
  PURGE_BLOB: 0x0026,
  PUT_CHUNKED: 0x0027,
  KV_PUT_EX: 0x0028,
  KV_GET_EX: 0x0029,
  KV_LIST_EX: 0x002a,
  KV_TOUCH: 0x002b,
  KV_GET_MANY: 0x002c,
  STREAM_OPEN: 0x0030,
  STREAM_APPEND: 0x0031,
  STREAM_SEAL: 0x0032,
  STREAM_ABORT: 0x0033,
  STREAM_LIST: 0x0034,
  STREAM_READ: 0x0035,
  WATCH: 0x0036,
  REPLICATION_STATS: 0x0037,
  STREAM_FOLLOW: 0x0038,
  ROLE: 0x0039,
  TENANT_LIST: 0x003a,
  TENANT_DELETE: 0x003b,
  TENANT_ROTATE_KEY: 0x003c,
  VECTOR_INDEX_CREATE: 0x003d,
  VECTOR_INDEX_DROP: 0x003e,
  VECTOR_INDEX_LIST: 0x003f,
  VECTOR_SEARCH: 0x0040,
  KV_PUT_VECTORS: 0x0041,
  APPEND_TURNS_VECTORS: 0x0042,
  VECTOR_SEARCH_TURNS: 0x0043,
} as const;

/** The protocol version each message arrived in. */
export const SINCE_VERSION: ReadonlyMap<number, number> = new Map([
  [MessageType.HELLO, 1],
  [MessageType.PING, 1],
  [MessageType.CTX_CREATE, 1],
  [MessageType.CTX_FORK, 1],
  [MessageType.GET_HEAD, 1],
  [MessageType.APPEND_TURN, 1],
  [MessageType.APPEND_TURN_BY_HASH, 1],
  [MessageType.GET_TURN, 1],
  [MessageType.GET_LAST, 1],
  [MessageType.GET_BEFORE, 1],
  [MessageType.GET_RANGE_BY_DEPTH, 1],
  [MessageType.GET_CHAIN, 1],
  [MessageType.GET_BLOB, 1],
  [MessageType.HAS_BLOBS, 1],
  [MessageType.STATS, 1],
  [MessageType.CTX_OPEN, 2],
  [MessageType.CTX_SHOW, 2],
  [MessageType.CTX_TAG, 2],
  [MessageType.CTX_LIST, 2],
  [MessageType.CTX_NAME, 2],
  [MessageType.KV_PUT, 2],
  [MessageType.KV_GET, 2],
  [MessageType.KV_DELETE, 2],
  [MessageType.KV_LIST, 2],
  [MessageType.APPEND_TURNS, 2],
  [MessageType.GET_TURN_BY_KEY, 2],
  [MessageType.TURN_LOG, 2],
  [MessageType.READ_PAGE, 2],
  [MessageType.FIND_TURNS, 2],
  [MessageType.CTX_DELETE, 2],
  [MessageType.CTX_PRUNE, 2],
  [MessageType.CTX_TTL, 2],
  [MessageType.BACKUP, 2],
  [MessageType.GC, 2],
  [MessageType.STATS_EX, 2],
  [MessageType.PATCH_TURN, 2],
  [MessageType.REDACT_TURN, 2],
  [MessageType.PURGE_BLOB, 2],
  [MessageType.PUT_CHUNKED, 2],
  [MessageType.KV_PUT_EX, 3],
  [MessageType.KV_GET_EX, 3],
  [MessageType.KV_LIST_EX, 3],
  [MessageType.KV_TOUCH, 3],
  [MessageType.KV_GET_MANY, 3],
  [MessageType.STREAM_OPEN, 3],
  [MessageType.STREAM_APPEND, 3],
  [MessageType.STREAM_SEAL, 3],
  [MessageType.STREAM_ABORT, 3],
  [MessageType.STREAM_LIST, 3],
  [MessageType.STREAM_READ, 3],
  [MessageType.WATCH, 3],
  [MessageType.REPLICATION_STATS, 3],
  [MessageType.STREAM_FOLLOW, 3],
  [MessageType.ROLE, 4],
  [MessageType.TENANT_LIST, 5],
  [MessageType.TENANT_DELETE, 5],
  [MessageType.TENANT_ROTATE_KEY, 5],
  [MessageType.VECTOR_INDEX_CREATE, 6],
  [MessageType.VECTOR_INDEX_DROP, 6],
  [MessageType.VECTOR_INDEX_LIST, 6],
  [MessageType.VECTOR_SEARCH, 6],
  [MessageType.KV_PUT_VECTORS, 6],
  [MessageType.APPEND_TURNS_VECTORS, 7],
  [MessageType.VECTOR_SEARCH_TURNS, 7],
]);

/** The family (codec module) of each message. */
export const FAMILY: ReadonlyMap<number, string> = new Map([
  [MessageType.HELLO, "Admin"],
  [MessageType.PING, "Admin"],
  [MessageType.CTX_CREATE, "Contexts"],
  [MessageType.CTX_FORK, "Contexts"],
  [MessageType.GET_HEAD, "Contexts"],
  [MessageType.APPEND_TURN, "Appends"],
  [MessageType.APPEND_TURN_BY_HASH, "Appends"],
  [MessageType.GET_TURN, "Reads"],
  [MessageType.GET_LAST, "Reads"],
  [MessageType.GET_BEFORE, "Reads"],
  [MessageType.GET_RANGE_BY_DEPTH, "Reads"],
  [MessageType.GET_CHAIN, "Reads"],
  [MessageType.GET_BLOB, "Blobs"],
  [MessageType.HAS_BLOBS, "Blobs"],
  [MessageType.STATS, "Admin"],
  [MessageType.CTX_OPEN, "Contexts"],
  [MessageType.CTX_SHOW, "Contexts"],
  [MessageType.CTX_TAG, "Contexts"],
  [MessageType.CTX_LIST, "Contexts"],
  [MessageType.CTX_NAME, "Contexts"],
  [MessageType.KV_PUT, "Kv"],
  [MessageType.KV_GET, "Kv"],
  [MessageType.KV_DELETE, "Kv"],
  [MessageType.KV_LIST, "Kv"],
  [MessageType.APPEND_TURNS, "Appends"],
  [MessageType.GET_TURN_BY_KEY, "Reads"],
  [MessageType.TURN_LOG, "Reads"],
  [MessageType.READ_PAGE, "Reads"],
  [MessageType.FIND_TURNS, "Reads"],
  [MessageType.CTX_DELETE, "Retention"],
  [MessageType.CTX_PRUNE, "Retention"],
  [MessageType.CTX_TTL, "Retention"],
  [MessageType.BACKUP, "Admin"],
  [MessageType.GC, "Admin"],
  [MessageType.STATS_EX, "Admin"],
  [MessageType.PATCH_TURN, "Overlays"],
  [MessageType.REDACT_TURN, "Overlays"],
  [MessageType.PURGE_BLOB, "Overlays"],
  [MessageType.PUT_CHUNKED, "Blobs"],
  [MessageType.KV_PUT_EX, "Kv"],
  [MessageType.KV_GET_EX, "Kv"],
  [MessageType.KV_LIST_EX, "Kv"],
  [MessageType.KV_TOUCH, "Kv"],
  [MessageType.KV_GET_MANY, "Kv"],
  [MessageType.STREAM_OPEN, "Streams"],
  [MessageType.STREAM_APPEND, "Streams"],
  [MessageType.STREAM_SEAL, "Streams"],
  [MessageType.STREAM_ABORT, "Streams"],
  [MessageType.STREAM_LIST, "Streams"],
  [MessageType.STREAM_READ, "Streams"],
  [MessageType.WATCH, "Streams"],
  [MessageType.REPLICATION_STATS, "Admin"],
  [MessageType.STREAM_FOLLOW, "Streams"],
  [MessageType.ROLE, "Admin"],
  [MessageType.TENANT_LIST, "Admin"],
  [MessageType.TENANT_DELETE, "Admin"],
  [MessageType.TENANT_ROTATE_KEY, "Admin"],
  [MessageType.VECTOR_INDEX_CREATE, "Vectors"],
  [MessageType.VECTOR_INDEX_DROP, "Vectors"],
  [MessageType.VECTOR_INDEX_LIST, "Vectors"],
  [MessageType.VECTOR_SEARCH, "Vectors"],
  [MessageType.KV_PUT_VECTORS, "Vectors"],
  [MessageType.APPEND_TURNS_VECTORS, "Vectors"],
  [MessageType.VECTOR_SEARCH_TURNS, "Vectors"],
]);

/** The ERROR answer's stable codes. */
export const ErrorCode = {
  BAD_FRAME: 1,
  UNKNOWN_MESSAGE: 2,
  TOO_LARGE: 3,
  UNAUTHORIZED: 4,
  NOT_FOUND: 5,
  CONFLICT: 6,
  READ_ONLY: 7,
  NO_SPACE: 8,
  OVERLOADED: 9,
  INTERNAL: 10,
  INVALID_ARGUMENT: 11,
  UNSUPPORTED_VERSION: 12,
  SHUTTING_DOWN: 13,
  CORRUPT: 14,
  ALREADY_EXISTS: 15,
  HASH_MISMATCH: 16,
  STREAM_ENDED: 17,
  STREAM_NOT_OWNED: 18,
  NOT_PRIMARY: 19,
  UNCONFIRMED: 20,
  QUOTA_EXCEEDED: 21,
} as const;
