/**
 * The ctxstore wire protocol, versions 1 to 7, byte for byte as docs/protocol.md defines it
 * (the reference is the Rust crate `protocol/`; the Python client's `_protocol.py` is a second
 * reading of the same contract). No I/O: request bodies to bytes, response bodies from bytes.
 *
 * Decoding is strict, as every ctxstore decoder is: every field must be present, a body must
 * end exactly where its message ends, reserved fields and unknown flag bits must be zero, enums
 * must hold a known value, strings must be UTF-8, counts must fit the body. Any violation
 * throws {@link ProtocolError}; nothing else escapes a decoder. Encoders throw `RangeError` for
 * what the layout cannot carry (a field over its length prefix); the semantic limits (a name of
 * at most 256 bytes, 32 tags...) are the server's to enforce, answered TOO_LARGE.
 *
 * Integers: a u64 that names something (TurnID, ContextID, a count of bytes) is a JS `number`,
 * checked to be at most 2^53 - 1 when decoded (a server allocates TurnIDs one by one; a value
 * beyond that is a broken frame, not a silent rounding). A turn's `typeTag` is the caller's
 * arbitrary u64 and is a `bigint`.
 */

import { ProtocolError } from "./errors.js";
import type { ReplicationStats, Role } from "./types.js";
import { HEADER_BYTES, KV_ENTRIES_PER_REQUEST_MAX, KV_KEY_BYTES_MAX, LIST_ITEMS_LIMIT, MESSAGE_BYTES_MAX, MessageType, NAME_BYTES_MAX, PROTOCOL_VERSION, PROTOCOL_VERSION_MIN, TOKEN_BYTES_MAX } from "./wire.js";

export { ERROR_TYPE, FRAME_BYTES_LIMIT, HEADER_BYTES, KV_ENTRIES_PER_REQUEST_MAX, KV_TOUCH_KEYS_MAX, LIST_ITEMS_LIMIT, MESSAGE_BYTES_MAX, NAME_BYTES_MAX, PROTOCOL_VERSION, RESPONSE_BIT, TOKEN_BYTES_MAX } from "./wire.js";
/** The range of versions offered in HELLO (min, max). */
export const SUPPORTED_VERSIONS: readonly [number, number] = [PROTOCOL_VERSION_MIN, PROTOCOL_VERSION];
export const HASH_BYTES = 32;
export const TURN_BYTES = 88;
export const CONTEXT_HEAD_BYTES = 24;
export const PAYLOAD_HEADER_BYTES = 16;
export const OVERLAY_BYTES = 16;
/** The smallest CONTEXT_INFO: head (24), two times (16), no name (2), no tags (2). */
export const CONTEXT_INFO_BYTES_MIN = 44;
/** The smallest KV_LIST item: key_len (2), hash (32), value_len (4). */
export const KV_ITEM_BYTES_MIN = 38;
/** The smallest KV_ITEM_EX (version 3): a KV_LIST item, then ttl_ms (8), expires_at (8). */
export const KV_ITEM_EX_BYTES_MIN = 54;
/** KV_PUT_EX put_flags bit 0: keys the context has (live) keep their values and TTLs. */
export const KV_PUT_IF_ABSENT = 1 << 0;
/** KV_GET_EX / KV_LIST_EX kv_flags bit 0: restart the TTL of each entry returned. */
export const KV_READ_REFRESH = 1 << 0;
/** The longest time to live the server takes: 100 years in milliseconds. */
export const TTL_MS_MAX = 100 * 365 * 24 * 3600 * 1000;
/** The smallest EXTRAS: three zero counts. */
export const EXTRAS_BYTES_MIN = 3;
/** The smallest entry of a version-2 page: TURN, EXTRAS, an absent PAYLOAD. */
export const TURN_EXTRAS_ENTRY_BYTES_MIN = TURN_BYTES + EXTRAS_BYTES_MIN + PAYLOAD_HEADER_BYTES;
/** One turn of APPEND_TURNS' answer: TURN, deduped, existing. */
export const APPENDED_TURN_BYTES = 90;
/** Most chunks one PUT_CHUNKED names. */
export const CHUNKS_PER_PAYLOAD_MAX = 65_536;
/** Largest chunk of a PUT_CHUNKED. */
export const CHUNK_BYTES_MAX = 1 << 20;
export const CHUNK_ENTRY_BYTES = 36;
export const TINY_BYTES_MAX = 0xff;
export const U16_MAX = 0xffff;
export const U32_MAX = 0xffff_ffff;
export const U64_MAX = (1n << 64n) - 1n;

export const READ_WITH_PAYLOADS = 1 << 0;
export const READ_ACCEPT_ZSTD = 1 << 1;
export const READ_FLAGS_KNOWN = READ_WITH_PAYLOADS | READ_ACCEPT_ZSTD;
export const APPEND_EXPECT_HEAD = 1 << 0;
/** Frame flag bit 0 (version 2): a leading `context_id u64` is replaced by a name. */
export const CTX_BY_NAME = 1 << 0;
/** Frame flag bit 1 (version 2, decision 0012): the overlay view of a read. */
export const OVERLAYS = 1 << 1;
/** Frame flag bit 2 (version 3, answers only; issue 32): more frames answer this req_id. Only a
 * STREAM_FOLLOW's answer frames carry it, every one but the last; on any other frame it is a
 * protocol error. */
export const MORE = 1 << 2;
/** Frame flag bits 3-4 (version 4, decision 0031; requests only): when a write is acknowledged
 * (`ackAfter`): 0 the server's default, 1 local, 2 remote, 3 a bad frame. */
export const ACK_AFTER_SHIFT = 3;
export const ACK_AFTER_MASK = 0b11 << ACK_AFTER_SHIFT;
/** ACK_AFTER and ROLE's `ack_after` values, by code. */
export const ACK_AFTER = { local: 1, remote: 2 } as const;
export const ACK_AFTER_NAMES = ["", "local", "remote"] as const;
export const OVERLAY_REDACTED = 1 << 0;
export const OPEN_GET_OR_CREATE = 1 << 0;
export const OPEN_CLONE = 1 << 1;
export const TAG_EXPECT_HEAD = 1 << 0;
export const TURN_SUMMARY = 1 << 0;
export const TURN_FLAGS_KNOWN = TURN_SUMMARY;
export const TURN_SPEC_SUMMARY = 1 << 0;
export const TURN_SPEC_BY_HASH = 1 << 1;
export const TTL_SET = 1 << 0;

/** Payloads at least this large travel as separate chunks of a request (not copied). */
const COPY_BYTES_MAX = 4096;

/** Request types (generated from the Rust message table, `wire.ts`); a response has
 * `request | 0x8000`, ERROR is 0xFFFF. */
export const MsgType = MessageType;

/** The writes that may carry the frame flag ACK_AFTER (version 4). */
export const TAKES_ACK_AFTER: ReadonlySet<number> = new Set([
  MsgType.APPEND_TURN,
  MsgType.APPEND_TURN_BY_HASH,
  MsgType.APPEND_TURNS,
  MsgType.STREAM_SEAL,
  MsgType.KV_PUT,
  MsgType.KV_PUT_EX,
  MsgType.KV_PUT_VECTORS,
  MsgType.APPEND_TURNS_VECTORS,
]);

/** The reads that may be sent with the frame flag OVERLAYS (every read answering TURNs). */
export const TAKES_OVERLAYS: ReadonlySet<number> = new Set([
  MsgType.GET_TURN,
  MsgType.GET_LAST,
  MsgType.GET_BEFORE,
  MsgType.GET_RANGE_BY_DEPTH,
  MsgType.GET_CHAIN,
  MsgType.GET_TURN_BY_KEY,
  MsgType.TURN_LOG,
  MsgType.READ_PAGE,
  MsgType.FIND_TURNS,
]);

export const PayloadEncoding = { ABSENT: 0, RAW: 1, ZSTD: 2 } as const;
export type PayloadEncoding = (typeof PayloadEncoding)[keyof typeof PayloadEncoding];
export const ParentKind = { HEAD: 0, ROOT: 1, TURN: 2 } as const;
export type ParentKind = (typeof ParentKind)[keyof typeof ParentKind];
export const PageKind = { LAST: 0, BEFORE: 1, RANGE: 2, WINDOW: 3 } as const;
export type PageKind = (typeof PageKind)[keyof typeof PageKind];

/** A context in a request: its ContextID (`number`) or its name (`string`, version 2). */
export type ContextRef = number | string;
/** Where a CTX_LIST page ended: a ContextID, or a name (with a name prefix). */
export type ListCursor = number | string;

const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder("utf-8", { fatal: true });

// -------------------------------------------------------------------------------------------
// Frames

/** The 16-byte frame header. */
export interface FrameHeader {
  len: number;
  msgType: number;
  flags: number;
  reqId: bigint;
}

export function encodeHeader(header: FrameHeader): Uint8Array {
  const out = new Uint8Array(HEADER_BYTES);
  const view = new DataView(out.buffer);
  view.setUint32(0, header.len, true);
  view.setUint16(4, header.msgType, true);
  view.setUint16(6, header.flags, true);
  view.setBigUint64(8, header.reqId, true);
  return out;
}

export function decodeHeader(data: Uint8Array): FrameHeader {
  if (data.length !== HEADER_BYTES) {
    throw new ProtocolError(`a frame header is ${HEADER_BYTES} bytes, got ${data.length}`);
  }
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  return {
    len: view.getUint32(0, true),
    msgType: view.getUint16(4, true),
    flags: view.getUint16(6, true),
    reqId: view.getBigUint64(8, true),
  };
}

// -------------------------------------------------------------------------------------------
// Writing bodies

/**
 * Builds a body as a list of chunks: small fields are gathered in one growing buffer, large
 * payloads are referenced as chunks of their own (a 10 KiB payload is not copied into the
 * request before the socket copies it anyway).
 */
export class Writer {
  private readonly parts: Uint8Array[] = [];
  private buf = new Uint8Array(256);
  private view = new DataView(this.buf.buffer);
  private pos = 0;

  private room(count: number): void {
    if (this.pos + count <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.pos + count) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.pos));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }

  u8(value: number): this {
    checkUint(value, 0xff, "u8");
    this.room(1);
    this.buf[this.pos++] = value;
    return this;
  }

  u16(value: number): this {
    checkUint(value, U16_MAX, "u16");
    this.room(2);
    this.view.setUint16(this.pos, value, true);
    this.pos += 2;
    return this;
  }

  u32(value: number): this {
    checkUint(value, U32_MAX, "u32");
    this.room(4);
    this.view.setUint32(this.pos, value, true);
    this.pos += 4;
    return this;
  }

  u64(value: number | bigint): this {
    const big = typeof value === "bigint" ? value : BigInt(checkSafe(value, "u64"));
    if (big < 0n || big > U64_MAX) throw new RangeError(`u64 out of range: ${value}`);
    this.room(8);
    this.view.setBigUint64(this.pos, big, true);
    this.pos += 8;
    return this;
  }

  /** A VECTOR (version 6): each component as an `f32` little endian. The caller checked that
   * each is finite as an f32 (the codec carries what it is given). */
  f32s(vector: Float32Array): this {
    this.room(4 * vector.length);
    for (const component of vector) {
      this.view.setFloat32(this.pos, component, true);
      this.pos += 4;
    }
    return this;
  }

  bytes(data: Uint8Array): this {
    if (data.length >= COPY_BYTES_MAX) {
      this.flush();
      this.parts.push(data);
      return this;
    }
    this.room(data.length);
    this.buf.set(data, this.pos);
    this.pos += data.length;
    return this;
  }

  zeros(count: number): this {
    this.room(count);
    this.buf.fill(0, this.pos, this.pos + count);
    this.pos += count;
    return this;
  }

  hash(value: Uint8Array): this {
    if (value.length !== HASH_BYTES) {
      throw new RangeError(`a hash is ${HASH_BYTES} bytes, got ${value.length}`);
    }
    return this.bytes(value);
  }

  /** `u16 len`, then the bytes. */
  short(data: Uint8Array, field: string): this {
    if (data.length > U16_MAX) {
      throw new RangeError(`${field} is ${data.length} bytes; the protocol carries at most ${U16_MAX}`);
    }
    return this.u16(data.length).bytes(data);
  }

  shortStr(text: string, field: string): this {
    return this.short(utf8.encode(text), field);
  }

  /** `u8 len`, then the bytes. */
  tiny(data: Uint8Array, field: string): this {
    if (data.length > TINY_BYTES_MAX) {
      throw new RangeError(`${field} is ${data.length} bytes; the protocol carries at most ${TINY_BYTES_MAX}`);
    }
    return this.u8(data.length).bytes(data);
  }

  /** A short string that must not be empty (an empty one means "none" or "by id"). */
  name(name: string, field: string): this {
    if (name.length === 0) throw new RangeError(`${field} must not be empty (an empty one means none)`);
    return this.shortStr(name, field);
  }

  optionalName(name: string | undefined, field: string): this {
    return name === undefined ? this.u16(0) : this.name(name, field);
  }

  /** A version-2 inline CONTEXT_REF. */
  contextRef(context: ContextRef): this {
    if (typeof context === "string") return this.name(context, "context name");
    return this.u16(0).u64(context);
  }

  /** The leading context of a version-1 layout (a name goes with CTX_BY_NAME). */
  leadingContext(context: ContextRef): this {
    if (typeof context === "string") return this.name(context, "context name");
    return this.u64(context);
  }

  tags(tags: ReadonlyArray<readonly [string, string]>, field = "tags"): this {
    this.count16(tags.length, field);
    for (const [key, value] of tags) this.shortStr(key, `${field} key`).shortStr(value, `${field} value`);
    return this;
  }

  count16(count: number, field: string): this {
    if (count > U16_MAX) throw new RangeError(`${field}: ${count} items; the protocol carries at most ${U16_MAX}`);
    return this.u16(count);
  }

  count8(count: number, field: string): this {
    if (count > TINY_BYTES_MAX) {
      throw new RangeError(`${field}: ${count} items; the protocol carries at most ${TINY_BYTES_MAX}`);
    }
    return this.u8(count);
  }

  labels(labels: ReadonlyArray<readonly [string, string]>): this {
    this.count8(labels.length, "labels");
    for (const [key, value] of labels) this.tiny(utf8.encode(key), "label key").shortStr(value, "label value");
    return this;
  }

  extras(extras: ExtrasRecord): this {
    this.tiny(extras.key, "key").labels(extras.labels).count8(extras.links.length, "links");
    for (const link of extras.links) this.u64(link);
    return this;
  }

  listCursor(cursor: ListCursor | undefined): this {
    if (cursor === undefined) return this.u8(0);
    if (typeof cursor === "string") return this.u8(2).name(cursor, "cursor name");
    return this.u8(1).u64(cursor);
  }

  logCursor(cursor: LogCursor | undefined): this {
    if (cursor === undefined) return this.u8(0);
    return this.u8(1).u32(cursor.phase).u64(cursor.next);
  }

  private flush(): void {
    if (this.pos > 0) {
      this.parts.push(this.buf.slice(0, this.pos));
      this.pos = 0;
    }
  }

  /** The body's chunks (at least one, maybe empty). */
  finish(): Uint8Array[] {
    this.flush();
    if (this.parts.length === 0) this.parts.push(new Uint8Array(0));
    return this.parts;
  }
}

function checkUint(value: number, max: number, what: string): void {
  if (!Number.isInteger(value) || value < 0 || value > max) {
    throw new RangeError(`${what} out of range: ${value}`);
  }
}

function checkSafe(value: number, what: string): number {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`${what} must be a non-negative safe integer, not ${value}`);
  }
  return value;
}

// -------------------------------------------------------------------------------------------
// Reading bodies

/** A bounds-checked reader over one message body; every failure is a ProtocolError naming the
 * message and the field. */
export class Reader {
  private pos = 0;
  private readonly view: DataView;

  constructor(
    private readonly body: Uint8Array,
    private readonly message: string,
  ) {
    this.view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  }

  get remaining(): number {
    return this.body.length - this.pos;
  }

  error(field: string, reason: string): ProtocolError {
    return new ProtocolError(`${this.message}: ${field} is invalid (${reason})`);
  }

  private need(count: number, field: string): number {
    const start = this.pos;
    if (count < 0 || start + count > this.body.length) {
      throw new ProtocolError(
        `${this.message}: body of ${this.body.length} bytes is too short for ${field} (needs ${start + Math.max(count, 0)})`,
      );
    }
    this.pos = start + count;
    return start;
  }

  /** The next `count` bytes (a view into the body, not a copy). */
  take(count: number, field = "bytes"): Uint8Array {
    const start = this.need(count, field);
    return this.body.subarray(start, start + count);
  }

  u8(field: string): number {
    return this.body[this.need(1, field)]!;
  }

  u16(field: string): number {
    return this.view.getUint16(this.need(2, field), true);
  }

  u32(field: string): number {
    return this.view.getUint32(this.need(4, field), true);
  }

  /** An `f32` little endian (a vector search's score). */
  f32(field: string): number {
    return this.view.getFloat32(this.need(4, field), true);
  }

  /** A u64 as a bigint. */
  u64Big(field: string): bigint {
    return this.view.getBigUint64(this.need(8, field), true);
  }

  /** A u64 that must be a safe integer (ids, counts, times). */
  u64(field: string): number {
    const value = this.u64Big(field);
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw this.error(field, `${value} is beyond 2^53 - 1, which this client does not represent`);
    }
    return Number(value);
  }

  boolean(field: string): boolean {
    const value = this.u8(field);
    if (value > 1) throw this.error(field, "not 0 or 1");
    return value === 1;
  }

  hash(field = "hash"): Uint8Array {
    return this.take(HASH_BYTES, field).slice();
  }

  zero(count: number, field = "reserved"): void {
    const data = this.take(count, field);
    for (const byte of data) if (byte !== 0) throw this.error(field, "reserved bytes must be zero");
  }

  flags(known: number, field: string): number {
    const value = this.u32(field);
    if ((value & ~known) !== 0) throw this.error(field, "unknown flag bits");
    return value;
  }

  string(count: number, field: string): string {
    const data = this.take(count, field);
    try {
      return utf8Strict.decode(data);
    } catch {
      throw this.error(field, "not UTF-8");
    }
  }

  limit(value: number, maximum: number, field: string): number {
    if (value > maximum) throw new ProtocolError(`${this.message}: ${field} is ${value}, above the limit of ${maximum}`);
    return value;
  }

  /** `count` items of at least `itemBytesMin` bytes each, if the rest of the body can hold
   * them (a huge count in a short body fails at once, not after allocating). */
  count(count: number, itemBytesMin: number, field: string): number {
    if (count * itemBytesMin > this.remaining) {
      throw new ProtocolError(
        `${this.message}: body too short for ${count} ${field} (at least ${itemBytesMin} bytes each)`,
      );
    }
    return count;
  }

  shortBytes(field: string): Uint8Array {
    return this.take(this.u16(`${field} length`), field).slice();
  }

  shortString(field: string): string {
    return this.string(this.u16(`${field} length`), field);
  }

  optionalName(field: string): string | undefined {
    const name = this.shortString(field);
    return name.length > 0 ? name : undefined;
  }

  tinyBytes(field: string): Uint8Array {
    return this.take(this.u8(`${field} length`), field).slice();
  }

  tinyString(field: string): string {
    return this.string(this.u8(`${field} length`), field);
  }

  tags(field = "tags"): Array<[string, string]> {
    const count = this.count(this.u16(`${field} count`), 4, field);
    const tags: Array<[string, string]> = [];
    for (let i = 0; i < count; i++) tags.push([this.shortString(`${field} key`), this.shortString(`${field} value`)]);
    return tags;
  }

  listCursor(): ListCursor | undefined {
    const kind = this.u8("cursor_kind");
    if (kind === 0) return undefined;
    if (kind === 1) return this.u64("cursor context_id");
    if (kind === 2) {
      const name = this.optionalName("cursor name");
      if (name === undefined) throw this.error("cursor name", "empty");
      return name;
    }
    throw this.error("cursor_kind", `unknown value ${kind}`);
  }

  contextHead(): ContextHeadRecord {
    const contextId = this.u64("context_id");
    const headTurnId = this.u64("head_turn_id");
    const headDepth = this.u32("head_depth");
    this.zero(4, "context head reserved");
    return { contextId, headTurnId, headDepth };
  }

  contextInfo(): ContextInfoRecord {
    const head = this.contextHead();
    const createdAtUnixMs = this.u64("created_at_unix_ms");
    const updatedAtUnixMs = this.u64("updated_at_unix_ms");
    const name = this.optionalName("name");
    return { head, createdAtUnixMs, updatedAtUnixMs, name, tags: this.tags() };
  }

  turn(): TurnRecord {
    const turnId = this.u64("turn_id");
    const parentTurnId = this.u64("parent_turn_id");
    const contextId = this.u64("context_id");
    const depth = this.u32("depth");
    const codec = this.u32("codec");
    const typeTag = this.u64Big("type_tag");
    const payloadHash = this.hash("payload_hash");
    const payloadLen = this.u32("payload_len");
    const flags = this.u32("turn flags");
    if ((flags & ~TURN_FLAGS_KNOWN) !== 0) throw this.error("turn flags", `unknown bits in 0x${flags.toString(16)}`);
    const createdAtUnixMs = this.u64("created_at_unix_ms");
    return { turnId, parentTurnId, contextId, depth, codec, typeTag, payloadHash, payloadLen, flags, createdAtUnixMs };
  }

  payload(): PayloadRecord {
    const encoding = this.u16("payload encoding");
    this.zero(2, "payload reserved");
    const rawLen = this.u32("raw_len");
    const dataLen = this.u32("data_len");
    this.zero(4, "payload reserved");
    if (encoding > PayloadEncoding.ZSTD) throw this.error("payload encoding", `unknown value ${encoding}`);
    const data = this.take(dataLen, "payload data");
    if (encoding === PayloadEncoding.ABSENT && (rawLen !== 0 || dataLen !== 0)) {
      throw this.error("payload", "an absent payload has no bytes");
    }
    if (encoding === PayloadEncoding.RAW && rawLen !== dataLen) {
      throw this.error("payload", "raw payload length differs from raw_len");
    }
    return { encoding: encoding as PayloadEncoding, rawLen, data };
  }

  labels(): Array<[string, string]> {
    const count = this.count(this.u8("label count"), 3, "labels");
    const labels: Array<[string, string]> = [];
    for (let i = 0; i < count; i++) labels.push([this.tinyString("label key"), this.shortString("label value")]);
    return labels;
  }

  extras(): ExtrasRecord {
    const key = this.tinyBytes("key");
    const labels = this.labels();
    const count = this.count(this.u8("link count"), 8, "links");
    const links: number[] = [];
    for (let i = 0; i < count; i++) links.push(this.u64("link"));
    return { key, labels, links };
  }

  logCursor(): LogCursor | undefined {
    if (!this.boolean("cursor present")) return undefined;
    return { phase: this.u32("cursor phase"), next: this.u64("cursor next") };
  }

  turnExtrasEntries(): TurnExtrasEntry[] {
    const count = this.limit(this.u32("count"), LIST_ITEMS_LIMIT, "count");
    this.count(count, TURN_EXTRAS_ENTRY_BYTES_MIN, "turns");
    const entries: TurnExtrasEntry[] = [];
    for (let i = 0; i < count; i++) entries.push({ turn: this.turn(), extras: this.extras(), payload: this.payload() });
    return entries;
  }

  /** Checks that the whole body was read. */
  finish(): void {
    const extra = this.body.length - this.pos;
    if (extra !== 0) throw new ProtocolError(`${this.message} body has ${extra} bytes after its end`);
  }
}

// -------------------------------------------------------------------------------------------
// Shared structures

/** TURN on the wire (88 bytes). */
export interface TurnRecord {
  turnId: number;
  parentTurnId: number;
  contextId: number;
  depth: number;
  codec: number;
  typeTag: bigint;
  payloadHash: Uint8Array;
  payloadLen: number;
  flags: number;
  createdAtUnixMs: number;
}

export interface ContextHeadRecord {
  contextId: number;
  headTurnId: number;
  headDepth: number;
}

export interface PayloadRecord {
  encoding: PayloadEncoding;
  rawLen: number;
  data: Uint8Array;
}

export interface ContextInfoRecord {
  head: ContextHeadRecord;
  createdAtUnixMs: number;
  updatedAtUnixMs: number;
  name: string | undefined;
  tags: Array<[string, string]>;
}

export interface KvItemRecord {
  key: Uint8Array;
  valueHash: Uint8Array;
  valueLen: number;
}

/** KV_ITEM_EX (version 3): a KV_LIST item with its TTL (0: none) and expiry (0: never). */
export interface KvItemExRecord extends KvItemRecord {
  ttlMs: number;
  expiresAtUnixMs: number;
}

/** Where a TURN_LOG page ended: opaque, pass it back as it came. */
export interface LogCursor {
  phase: number;
  next: number;
}

/** EXTRAS: a turn's key (empty: none), labels (as stored) and links. */
export interface ExtrasRecord {
  key: Uint8Array;
  labels: Array<readonly [string, string]>;
  links: number[];
}

export interface TurnEntry {
  turn: TurnRecord;
  payload: PayloadRecord;
}

export interface TurnExtrasEntry {
  turn: TurnRecord;
  extras: ExtrasRecord;
  payload: PayloadRecord;
}

/** One TURN_SPEC of APPEND_TURNS. */
export interface TurnSpecRecord {
  parentKind: ParentKind;
  parentTurnId: number;
  typeTag: bigint;
  codec: number;
  summary: boolean;
  extras: ExtrasRecord;
  /** The payload's bytes, or (with `byHash`) its 32-byte hash. */
  payload: Uint8Array;
  byHash: boolean;
}

export interface AppendedTurnRecord {
  turn: TurnRecord;
  deduped: boolean;
  existing: boolean;
}

export interface OverlayRecord {
  overlaySeq: number;
  redacted: boolean;
}

export interface ChunkRecord {
  hash: Uint8Array;
  len: number;
}

export interface SentChunkRecord {
  index: number;
  data: Uint8Array;
}

// -------------------------------------------------------------------------------------------
// Requests

/**
 * One request: its frame type and flags, the protocol version it needs, its body (chunks),
 * and the decoder of its answer. The connection checks the answer's type, decodes it with
 * `decode`, and checks that the decoder read the whole body.
 */
export interface Request<R> {
  /** Sent again safely when its outcome is unknown (a client of several addresses, decision
   * 0031 §11): set on an APPEND_TURNS whose every turn has a key. */
  readonly resendable?: boolean;
  readonly name: string;
  readonly msgType: number;
  readonly flags: number;
  readonly minVersion: number;
  readonly body: Uint8Array[];
  readonly decode: (reader: Reader) => R;
}

export function request<R>(
  name: string,
  msgType: number,
  minVersion: number,
  write: (w: Writer) => void,
  decode: (reader: Reader) => R,
  flags = 0,
): Request<R> {
  const writer = new Writer();
  write(writer);
  return { name, msgType, flags, minVersion, body: writer.finish(), decode };
}

/** A version-1 layout that leads with its context: a name needs CTX_BY_NAME and version 2. */
function leading<R>(
  name: string,
  msgType: number,
  context: ContextRef,
  write: (w: Writer) => void,
  decode: (reader: Reader) => R,
): Request<R> {
  const byName = typeof context === "string";
  return request(
    name,
    msgType,
    byName ? 2 : 1,
    (w) => {
      w.leadingContext(context);
      write(w);
    },
    decode,
    byName ? CTX_BY_NAME : 0,
  );
}

// --- response decoders (exported: the golden tests and test servers use them) ------------

export interface HelloAnswer {
  version: number;
  frameBytesMax: number;
  requestsInFlightMax: number;
  blobBytesMax: number;
  readTurnsMax: number;
  hasBlobsMax: number;
  serverName: string;
}

export function decodeHello(r: Reader): HelloAnswer {
  const version = r.u16("version");
  const nameLen = r.limit(r.u16("server_name_len"), NAME_BYTES_MAX, "server_name_len");
  const frameBytesMax = r.u32("frame_bytes_max");
  const requestsInFlightMax = r.u32("requests_in_flight_max");
  const blobBytesMax = r.u32("blob_bytes_max");
  const readTurnsMax = r.u32("read_turns_max");
  const hasBlobsMax = r.u32("has_blobs_max");
  r.zero(4);
  const serverName = r.string(nameLen, "server_name");
  return { version, frameBytesMax, requestsInFlightMax, blobBytesMax, readTurnsMax, hasBlobsMax, serverName };
}

export interface TurnsAnswer {
  nextBefore: number;
  tipDepth: number;
  entries: TurnEntry[];
}

export function decodeTurns(r: Reader): TurnsAnswer {
  const nextBefore = r.u64("next_before");
  const tipDepth = r.u32("tip_depth");
  const count = r.limit(r.u32("count"), LIST_ITEMS_LIMIT, "count");
  r.count(count, TURN_BYTES + PAYLOAD_HEADER_BYTES, "turns");
  const entries: TurnEntry[] = [];
  for (let i = 0; i < count; i++) entries.push({ turn: r.turn(), payload: r.payload() });
  return { nextBefore, tipDepth, entries };
}

export interface AppendedAnswer {
  turn: TurnRecord;
  deduped: boolean;
}

export function decodeAppended(r: Reader): AppendedAnswer {
  const turn = r.turn();
  const deduped = r.boolean("deduped");
  r.zero(7);
  return { turn, deduped };
}

export function decodeHasBlobs(r: Reader): boolean[] {
  const count = r.limit(r.u32("count"), LIST_ITEMS_LIMIT, "count");
  r.zero(4);
  const flags = r.take(count, "present");
  const present: boolean[] = [];
  for (const byte of flags) {
    if (byte > 1) throw r.error("present", "not 0 or 1");
    present.push(byte === 1);
  }
  return present;
}

export interface StatsAnswer {
  turns: number;
  contexts: number;
  blobs: number;
  logicalBytes: number;
  uniqueBytes: number;
  storedBytes: number;
  dedupHits: number;
  connections: number;
  requestsTotal: number;
  errorsTotal: number;
  uptimeMs: number;
  readOnly: boolean;
}

export function decodeStats(r: Reader): StatsAnswer {
  const turns = r.u64("turns");
  const contexts = r.u64("contexts");
  const blobs = r.u64("blobs");
  const logicalBytes = r.u64("logical_bytes");
  const uniqueBytes = r.u64("unique_bytes");
  const storedBytes = r.u64("stored_bytes");
  const dedupHits = r.u64("dedup_hits");
  const connections = r.u64("connections");
  const requestsTotal = r.u64("requests_total");
  const errorsTotal = r.u64("errors_total");
  const uptimeMs = r.u64("uptime_ms");
  const readOnly = r.boolean("read_only");
  r.zero(7);
  return {
    turns, contexts, blobs, logicalBytes, uniqueBytes, storedBytes, dedupHits, connections, requestsTotal,
    errorsTotal, uptimeMs, readOnly,
  };
}

export interface StatsExAnswer {
  stats: StatsAnswer;
  liveBytes: number;
  deadBytes: number;
  gcRuns: number;
  bytesReclaimedTotal: number;
}

export function decodeStatsEx(r: Reader): StatsExAnswer {
  const stats = decodeStats(r);
  return {
    stats,
    liveBytes: r.u64("live_bytes"),
    deadBytes: r.u64("dead_bytes"),
    gcRuns: r.u64("gc_runs"),
    bytesReclaimedTotal: r.u64("bytes_reclaimed_total"),
  };
}

/** ROLE's `role` codes, by index (a decoder refuses any past 6). */
export const SERVER_ROLES = ["off", "primary", "standby", "fenced", "lapsed", "taking_over", "rejoining"] as const;
export const ROLE_TEXT_BYTES_MAX = 1024;

/** ROLE's answer: `u8 role, u8 accepts_writes, u8 ack_after` (1 local, 2 remote), 5 reserved,
 * `u64 epoch, u32 lease_ms`, seven u64 (lease_age_ms, ack_open_ms, failovers, last_failover_ms,
 * remote_waiting, remote_acks_total, remote_unconfirmed_total), `u32 remote_ack_us_p50, u32
 * remote_ack_us_p99`, two `u16 len, UTF-8` texts (≤ 1024 bytes: primary, holder). */
export function decodeRole(r: Reader): Role {
  const role = SERVER_ROLES[r.u8("role")];
  if (role === undefined) throw r.error("role", "not a role (0..=6)");
  const acceptsWrites = r.boolean("accepts_writes");
  const code = r.u8("ack_after");
  if (code !== 1 && code !== 2) throw r.error("ack_after", "not 1 (local) or 2 (remote)");
  r.zero(5);
  const epoch = r.u64("epoch");
  const leaseMs = r.u32("lease_ms");
  const leaseAgeMs = r.u64("lease_age_ms");
  const ackOpenMs = r.u64("ack_open_ms");
  const failovers = r.u64("failovers");
  const lastFailoverMs = r.u64("last_failover_ms");
  const remoteWaiting = r.u64("remote_waiting");
  const remoteAcksTotal = r.u64("remote_acks_total");
  const remoteUnconfirmedTotal = r.u64("remote_unconfirmed_total");
  const remoteAckUsP50 = r.u32("remote_ack_us_p50");
  const remoteAckUsP99 = r.u32("remote_ack_us_p99");
  const text = (field: string): string => r.string(r.limit(r.u16(field), ROLE_TEXT_BYTES_MAX, field), field);
  const primary = text("primary");
  const holder = text("holder");
  return {
    role,
    acceptsWrites,
    ackAfter: code === 1 ? "local" : "remote",
    epoch,
    leaseMs,
    leaseAgeMs,
    ackOpenMs,
    failovers,
    lastFailoverMs,
    remoteWaiting,
    remoteAcksTotal,
    remoteUnconfirmedTotal,
    remoteAckUsP50,
    remoteAckUsP99,
    primary,
    holder,
  };
}

/** The longest tenant name (bytes of UTF-8), and so TENANT_LIST's `after` and `next`. */
export const TENANT_NAME_BYTES_MAX = 64;
/** The most tenants one TENANT_LIST page holds (`limit` is 1 to this). */
export const TENANT_LIST_LIMIT = 1000;
/** TENANTS `flags` bit 0: the tenants file in force names the tenant. */
export const TENANT_IN_FILE = 1 << 0;
/** TENANTS `flags` bit 1: the store has its tenant record (it has a TenantId). */
export const TENANT_REGISTERED = 1 << 1;
/** TENANTS `flags` bit 2: deleted (TENANT_DELETE): its contexts are gone, its tokens refused,
 * its id and name never given again. */
export const TENANT_DELETED = 1 << 2;
export const TENANT_FLAGS_KNOWN = TENANT_IN_FILE | TENANT_REGISTERED | TENANT_DELETED;
/** TENANTS `rights` bits, by index: bit 0 read, bit 1 write, bit 2 admin. */
export const TENANT_RIGHTS = ["read", "write", "admin"] as const;
export const TENANT_RIGHTS_KNOWN = (1 << TENANT_RIGHTS.length) - 1;
/** The smallest tenant of a TENANTS answer: id, flags, rights, a 1-byte name, ten u64. */
export const TENANT_BYTES_MIN = 4 + 1 + 1 + 2 + 1 + 10 * 8;

/** One tenant of a TENANTS answer, as on the wire (0: none, for the id and the quotas). */
export interface TenantRecord {
  /** 0 while the store has not registered the name. */
  tenantId: number;
  /** TENANT_IN_FILE, TENANT_REGISTERED, TENANT_DELETED. */
  flags: number;
  /** Bits of TENANT_RIGHTS (0 when the file does not name it). */
  rights: number;
  name: string;
  contexts: number;
  streamsOpen: number;
  storedBytes: number;
  connections: number;
  quotaBytes: number;
  quotaContexts: number;
  quotaAppendsPerS: number;
  quotaConnections: number;
  quotaStreams: number;
  /** QUOTA_EXCEEDED answers since the server started. */
  refusals: number;
}

/** TENANTS, TENANT_LIST's answer: the page, and the name to send as `after` for the next one
 * ("": the last page). */
export interface TenantsAnswer {
  tenants: TenantRecord[];
  next: string;
}

/** A `u16 len`-prefixed tenant name (or cursor) of at most 64 bytes. */
function tenantName(r: Reader, field: string): string {
  return r.string(r.limit(r.u16(`${field} length`), TENANT_NAME_BYTES_MAX, field), field);
}

/** TENANTS (version 5, decision 0032 §8): `u32 count` (≤ 1000), per tenant `u32 tenant_id, u8
 * flags, u8 rights, u16 name_len, name` (1..=64 bytes), ten u64 (contexts, streams_open,
 * stored_bytes, connections, quota_bytes, quota_contexts, quota_appends_per_s,
 * quota_connections, quota_streams, refusals), then `u16 next_len, next` (≤ 64 bytes). Unknown
 * flag or right bits and empty names are refused. */
export function decodeTenants(r: Reader): TenantsAnswer {
  const count = r.limit(r.u32("count"), TENANT_LIST_LIMIT, "count");
  r.count(count, TENANT_BYTES_MIN, "tenants");
  const tenants: TenantRecord[] = [];
  for (let i = 0; i < count; i++) {
    const tenantId = r.u32("tenant_id");
    const flags = r.u8("flags");
    if ((flags & ~TENANT_FLAGS_KNOWN) !== 0) throw r.error("flags", `unknown bits in 0x${flags.toString(16)}`);
    const rights = r.u8("rights");
    if ((rights & ~TENANT_RIGHTS_KNOWN) !== 0) throw r.error("rights", `unknown bits in 0x${rights.toString(16)}`);
    const name = tenantName(r, "name");
    if (name.length === 0) throw r.error("name", "empty");
    tenants.push({
      tenantId,
      flags,
      rights,
      name,
      contexts: r.u64("contexts"),
      streamsOpen: r.u64("streams_open"),
      storedBytes: r.u64("stored_bytes"),
      connections: r.u64("connections"),
      quotaBytes: r.u64("quota_bytes"),
      quotaContexts: r.u64("quota_contexts"),
      quotaAppendsPerS: r.u64("quota_appends_per_s"),
      quotaConnections: r.u64("quota_connections"),
      quotaStreams: r.u64("quota_streams"),
      refusals: r.u64("refusals"),
    });
  }
  return { tenants, next: tenantName(r, "next") };
}

/** TENANT_DELETED `flags` bit 0: the store seals payloads and the tenant's keys are destroyed
 * in its keyring, so what it stored opens nowhere any more. */
export const TENANT_KEYS_DESTROYED = 1 << 0;
/** TENANT_DELETED `flags` bit 1: the server replicates and the object store holds the deletion
 * (the replica's keyring and a cut with the tenant-deleted record). */
export const TENANT_REPLICA_UPDATED = 1 << 1;
export const TENANT_DELETE_FLAGS_KNOWN = TENANT_KEYS_DESTROYED | TENANT_REPLICA_UPDATED;

/** TENANT_DELETED, TENANT_DELETE's answer, as on the wire. */
export interface TenantDeletedAnswer {
  /** The deleted tenant's TenantId (never 0). */
  tenantId: number;
  /** TENANT_KEYS_DESTROYED, TENANT_REPLICA_UPDATED. */
  flags: number;
}

/** TENANT_DELETED (version 5, decision 0032 §6): `u32 tenant_id` (never 0), `u32 flags`
 * (TENANT_KEYS_DESTROYED, TENANT_REPLICA_UPDATED; unknown bits refused). */
export function decodeTenantDeleted(r: Reader): TenantDeletedAnswer {
  const tenantId = r.u32("tenant_id");
  if (tenantId === 0) throw r.error("tenant_id", "0 (the operator is never deleted)");
  return { tenantId, flags: r.flags(TENANT_DELETE_FLAGS_KNOWN, "flags") };
}

/** TENANT_KEY_ROTATED, TENANT_ROTATE_KEY's answer, as on the wire (its reserved u16 checked). */
export interface TenantKeyRotatedAnswer {
  /** The tenant's TenantId (0: the operator's own data key). */
  tenantId: number;
  /** The new version, 1 or more (a tenant's first key is version 0). */
  keyVersion: number;
}

/** TENANT_KEY_ROTATED (version 5, decision 0032 §7; 8 bytes): `u32 tenant_id` (0: the
 * operator), `u16 key_version` (never 0), `u16` reserved 0. */
export function decodeTenantKeyRotated(r: Reader): TenantKeyRotatedAnswer {
  const tenantId = r.u32("tenant_id");
  const keyVersion = r.u16("key_version");
  if (keyVersion === 0) throw r.error("key_version", "0 (a rotation makes version 1 or later)");
  r.zero(2);
  return { tenantId, keyVersion };
}

/** REPLICATION_STATS' role and state codes, by index. */
export const REPLICATION_ROLES = ["off", "primary", "standby"] as const;
export const REPLICATION_STATES = ["off", "shipping", "failing", "fenced", "stopped", "following", "stalled", "waiting"] as const;
export const REPLICATION_TEXT_BYTES_MAX = 1024;
export const REPLICATION_FAILURE_KINDS_MAX = 32;
export const REPLICATION_FAILURE_KIND_BYTES_MAX = 32;

/** REPLICATION_STATS' answer: `u8 role, u8 state, u8 promoting, 5 reserved`, twelve u64, three
 * `u16 len, UTF-8` texts (≤ 1024 bytes: target, primary, reason), `u16 failure_count` (≤ 32),
 * each `u8 kind_len (1..=32), kind, u64 count` (docs/protocol.md). */
export function decodeReplicationStats(r: Reader): ReplicationStats {
  const role = REPLICATION_ROLES[r.u8("role")];
  if (role === undefined) throw r.error("role", "not 0 (off), 1 (primary) or 2 (standby)");
  const state = REPLICATION_STATES[r.u8("state")];
  if (state === undefined) throw r.error("state", "not a replication state (0..=7)");
  const promoting = r.boolean("promoting");
  r.zero(5);
  const generation = r.u64("generation");
  const epoch = r.u64("epoch");
  const seq = r.u64("seq");
  const records = r.u64("records");
  const recordsUnixMs = r.u64("records_unix_ms");
  const lagMs = r.u64("lag_ms");
  const lagBytes = r.u64("lag_bytes");
  const objectsTotal = r.u64("objects_total");
  const bytesTotal = r.u64("bytes_total");
  const lastSuccessUnixMs = r.u64("last_success_unix_ms");
  const backlogObjects = r.u64("backlog_objects");
  const segmentBytesMax = r.u64("segment_bytes_max");
  const text = (field: string): string => r.string(r.limit(r.u16(field), REPLICATION_TEXT_BYTES_MAX, field), field);
  const target = text("target");
  const primary = text("primary");
  const reason = text("reason");
  const count = r.limit(r.u16("failure_count"), REPLICATION_FAILURE_KINDS_MAX, "failure_count");
  const failures: Record<string, number> = {};
  for (let i = 0; i < count; i++) {
    const kindLen = r.u8("failure kind");
    if (kindLen === 0 || kindLen > REPLICATION_FAILURE_KIND_BYTES_MAX) throw r.error("failure kind", "empty or longer than 32 bytes");
    const kind = r.string(kindLen, "failure kind");
    if (Object.hasOwn(failures, kind)) throw r.error("failure kind", "named twice");
    failures[kind] = r.u64("failure count");
  }
  return {
    role, state, reason, promoting, target, primary, epoch, generation, seq, records, recordsUnixMs, lagMs, lagBytes,
    objectsTotal, bytesTotal, lastSuccessUnixMs, backlogObjects, segmentBytesMax, failures,
  };
}

export interface OpenedAnswer {
  info: ContextInfoRecord;
  created: boolean;
}

export function decodeOpened(r: Reader): OpenedAnswer {
  return { info: r.contextInfo(), created: r.boolean("created") };
}

export interface ContextListAnswer {
  nextCursor: ListCursor | undefined;
  contexts: ContextInfoRecord[];
}

export function decodeContextList(r: Reader): ContextListAnswer {
  const nextCursor = r.listCursor();
  const count = r.limit(r.u32("count"), LIST_ITEMS_LIMIT, "count");
  r.count(count, CONTEXT_INFO_BYTES_MIN, "contexts");
  const contexts: ContextInfoRecord[] = [];
  for (let i = 0; i < count; i++) contexts.push(r.contextInfo());
  return { nextCursor, contexts };
}

export interface KvValueAnswer {
  valueHash: Uint8Array;
  payload: PayloadRecord;
}

export function decodeKvValue(r: Reader): KvValueAnswer {
  return { valueHash: r.hash("value_hash"), payload: r.payload() };
}

export interface KvValueExAnswer extends KvValueAnswer {
  ttlMs: number;
  expiresAtUnixMs: number;
}

export function decodeKvValueEx(r: Reader): KvValueExAnswer {
  const valueHash = r.hash("value_hash");
  const ttlMs = r.u64("ttl_ms");
  const expiresAtUnixMs = r.u64("expires_at_unix_ms");
  return { valueHash, ttlMs, expiresAtUnixMs, payload: r.payload() };
}

/** KV_VALUES (KV_GET_MANY, version 3): per key asked, in order, its value with TTL and expiry,
 * or undefined (no such key, or expired); fewer than asked when the rest passed the response
 * budget. */
export function decodeKvValues(r: Reader): (KvValueExAnswer | undefined)[] {
  const count = r.count(r.u16("count"), 1, "values");
  const values: (KvValueExAnswer | undefined)[] = [];
  for (let i = 0; i < count; i++) {
    const found = r.u8("found");
    if (found > 1) throw r.error("found", `${found} is not 0 (no such key) or 1`);
    values.push(found === 1 ? decodeKvValueEx(r) : undefined);
  }
  return values;
}

export function decodeKvListEx(r: Reader): KvItemExRecord[] {
  const count = r.limit(r.u32("count"), LIST_ITEMS_LIMIT, "count");
  r.count(count, KV_ITEM_EX_BYTES_MIN, "items");
  const items: KvItemExRecord[] = [];
  for (let i = 0; i < count; i++) {
    items.push({
      key: r.shortBytes("key"),
      valueHash: r.hash("value_hash"),
      valueLen: r.u32("value_len"),
      ttlMs: r.u64("ttl_ms"),
      expiresAtUnixMs: r.u64("expires_at_unix_ms"),
    });
  }
  return items;
}

export function decodeKvList(r: Reader): KvItemRecord[] {
  const count = r.limit(r.u32("count"), LIST_ITEMS_LIMIT, "count");
  r.count(count, KV_ITEM_BYTES_MIN, "items");
  const items: KvItemRecord[] = [];
  for (let i = 0; i < count; i++) {
    items.push({ key: r.shortBytes("key"), valueHash: r.hash("value_hash"), valueLen: r.u32("value_len") });
  }
  return items;
}

export function decodeAppendedTurns(r: Reader): AppendedTurnRecord[] {
  const count = r.limit(r.u32("count"), LIST_ITEMS_LIMIT, "count");
  r.count(count, APPENDED_TURN_BYTES, "turns");
  const turns: AppendedTurnRecord[] = [];
  for (let i = 0; i < count; i++) {
    turns.push({ turn: r.turn(), deduped: r.boolean("deduped"), existing: r.boolean("existing") });
  }
  return turns;
}

export interface TurnInfoAnswer {
  turn: TurnRecord;
  extras: ExtrasRecord;
}

export function decodeTurnInfo(r: Reader): TurnInfoAnswer {
  return { turn: r.turn(), extras: r.extras() };
}

export interface TurnLogAnswer {
  nextCursor: LogCursor | undefined;
  entries: TurnExtrasEntry[];
}

export function decodeTurnLog(r: Reader): TurnLogAnswer {
  return { nextCursor: r.logCursor(), entries: r.turnExtrasEntries() };
}

export interface PageAnswer {
  nextBefore: number;
  tipDepth: number;
  entries: TurnExtrasEntry[];
}

export function decodePage(r: Reader): PageAnswer {
  const nextBefore = r.u64("next_before");
  const tipDepth = r.u32("tip_depth");
  return { nextBefore, tipDepth, entries: r.turnExtrasEntries() };
}

export interface FoundTurnsAnswer {
  nextBefore: number;
  turns: TurnInfoAnswer[];
}

export function decodeFoundTurns(r: Reader): FoundTurnsAnswer {
  const nextBefore = r.u64("next_before");
  const count = r.limit(r.u32("count"), LIST_ITEMS_LIMIT, "count");
  r.count(count, TURN_BYTES + EXTRAS_BYTES_MIN, "turns");
  const turns: TurnInfoAnswer[] = [];
  for (let i = 0; i < count; i++) turns.push({ turn: r.turn(), extras: r.extras() });
  return { nextBefore, turns };
}

export interface RetentionAnswer {
  info: ContextInfoRecord;
  floorDepth: number;
  ttlMs: number;
}

export function decodeRetention(r: Reader): RetentionAnswer {
  return { info: r.contextInfo(), floorDepth: r.u32("floor_depth"), ttlMs: r.u64("ttl_ms") };
}

export interface BackedUpAnswer {
  turns: number;
  blobs: number;
  bytes: number;
  linkedBytes: number;
  durationMs: number;
  dir: string;
}

export function decodeBackedUp(r: Reader): BackedUpAnswer {
  return {
    turns: r.u64("turns"),
    blobs: r.u64("blobs"),
    bytes: r.u64("bytes"),
    linkedBytes: r.u64("linked_bytes"),
    durationMs: r.u64("duration_ms"),
    dir: r.shortString("dir"),
  };
}

export interface GcDoneAnswer {
  turnsDead: number;
  blobsDead: number;
  bytesReclaimed: number;
  packsCompacted: number;
  liveBytes: number;
  deadBytes: number;
  durationMs: number;
}

export function decodeGcDone(r: Reader): GcDoneAnswer {
  const turnsDead = r.u64("turns_dead");
  const blobsDead = r.u64("blobs_dead");
  const bytesReclaimed = r.u64("bytes_reclaimed");
  const packsCompacted = r.u32("packs_compacted");
  r.zero(4);
  return {
    turnsDead, blobsDead, bytesReclaimed, packsCompacted,
    liveBytes: r.u64("live_bytes"), deadBytes: r.u64("dead_bytes"), durationMs: r.u64("duration_ms"),
  };
}

export interface PatchedAnswer {
  turnId: number;
  overlaySeq: number;
  payloadHash: Uint8Array;
  payloadLen: number;
}

export function decodePatched(r: Reader): PatchedAnswer {
  const turnId = r.u64("turn_id");
  const overlaySeq = r.u64("overlay_seq");
  const payloadHash = r.hash("payload_hash");
  const payloadLen = r.u32("payload_len");
  r.zero(4);
  return { turnId, overlaySeq, payloadHash, payloadLen };
}

export interface RedactedAnswer {
  turnId: number;
  overlaySeq: number;
}

export function decodeRedacted(r: Reader): RedactedAnswer {
  return { turnId: r.u64("turn_id"), overlaySeq: r.u64("overlay_seq") };
}

export interface PurgedAnswer {
  payloadHash: Uint8Array;
  turnsRedacted: number;
  overlaySeq: number;
}

export function decodePurged(r: Reader): PurgedAnswer {
  return { payloadHash: r.hash("payload_hash"), turnsRedacted: r.u64("turns_redacted"), overlaySeq: r.u64("overlay_seq") };
}

export interface ChunkedStoredAnswer {
  payloadHash: Uint8Array;
  payloadLen: number;
  alreadyStored: boolean;
}

export function decodeChunkedStored(r: Reader): ChunkedStoredAnswer {
  const payloadHash = r.hash("payload_hash");
  const payloadLen = r.u64("payload_len");
  const alreadyStored = r.boolean("already_stored");
  r.zero(7);
  return { payloadHash, payloadLen, alreadyStored };
}

export interface ErrorAnswer {
  code: number;
  detail: number;
  message: string;
}

export function decodeError(r: Reader): ErrorAnswer {
  const code = r.u16("code");
  if (code === 0) throw r.error("code", "0 is not an error code");
  r.zero(2);
  const messageLen = r.limit(r.u32("message_len"), MESSAGE_BYTES_MAX, "message_len");
  const detail = r.u64("detail");
  return { code, detail, message: r.string(messageLen, "message") };
}

const done = (): undefined => undefined;

/** Decodes a whole body with `decode`, checking that it ends where the message ends. */
export function decodeBody<R>(name: string, body: Uint8Array, decode: (r: Reader) => R): R {
  const reader = new Reader(body, name);
  const value = decode(reader);
  reader.finish();
  return value;
}

// --- version 1 requests -------------------------------------------------------------------

export function hello(minVersion: number, maxVersion: number, token: Uint8Array, clientName: string): Request<HelloAnswer> {
  const name = utf8.encode(clientName);
  if (token.length > TOKEN_BYTES_MAX) throw new RangeError(`a token is at most ${TOKEN_BYTES_MAX} bytes`);
  if (name.length > NAME_BYTES_MAX) throw new RangeError(`a client name is at most ${NAME_BYTES_MAX} bytes of UTF-8`);
  return request("HELLO", MsgType.HELLO, 1, (w) => {
    w.u16(minVersion).u16(maxVersion).u16(token.length).u16(name.length).bytes(token).bytes(name);
  }, decodeHello);
}

export function ping(nonce: bigint): Request<bigint> {
  return request("PING", MsgType.PING, 1, (w) => w.u64(nonce), (r) => r.u64Big("nonce"));
}

export function ctxCreate(baseTurnId: number): Request<ContextHeadRecord> {
  return request("CTX_CREATE", MsgType.CTX_CREATE, 1, (w) => w.u64(baseTurnId), (r) => r.contextHead());
}

export function ctxFork(turnId: number): Request<ContextHeadRecord> {
  return request("CTX_FORK", MsgType.CTX_FORK, 1, (w) => w.u64(turnId), (r) => r.contextHead());
}

export function getHead(context: ContextRef): Request<ContextHeadRecord> {
  return leading("GET_HEAD", MsgType.GET_HEAD, context, () => undefined, (r) => r.contextHead());
}

function appendFields(w: Writer, expectedHead: number | undefined, typeTag: bigint, codec: number): void {
  w.u64(expectedHead ?? 0).u64(typeTag).u32(codec).u32(expectedHead === undefined ? 0 : APPEND_EXPECT_HEAD);
}

/** APPEND_TURN (`expectedHead` undefined: no compare-and-set; 0: the context must be empty). */
export function appendTurn(
  context: ContextRef,
  expectedHead: number | undefined,
  typeTag: bigint,
  codec: number,
  payload: Uint8Array,
): Request<AppendedAnswer> {
  return leading("APPEND_TURN", MsgType.APPEND_TURN, context, (w) => {
    appendFields(w, expectedHead, typeTag, codec);
    w.u32(payload.length).u32(0).bytes(payload);
  }, decodeAppended);
}

export function appendTurnByHash(
  context: ContextRef,
  expectedHead: number | undefined,
  typeTag: bigint,
  codec: number,
  payloadHash: Uint8Array,
): Request<AppendedAnswer> {
  return leading("APPEND_TURN_BY_HASH", MsgType.APPEND_TURN_BY_HASH, context, (w) => {
    appendFields(w, expectedHead, typeTag, codec);
    w.hash(payloadHash);
  }, decodeAppended);
}

export function getTurn(turnId: number): Request<TurnRecord> {
  return request("GET_TURN", MsgType.GET_TURN, 1, (w) => w.u64(turnId), (r) => r.turn());
}

export function getLast(context: ContextRef, limit: number, readFlags: number): Request<TurnsAnswer> {
  return leading("GET_LAST", MsgType.GET_LAST, context, (w) => w.u32(limit).u32(readFlags), decodeTurns);
}

export function getBefore(context: ContextRef, beforeTurnId: number, limit: number, readFlags: number): Request<TurnsAnswer> {
  return leading("GET_BEFORE", MsgType.GET_BEFORE, context, (w) => w.u64(beforeTurnId).u32(limit).u32(readFlags), decodeTurns);
}

export function getRangeByDepth(context: ContextRef, fromDepth: number, limit: number, readFlags: number): Request<TurnsAnswer> {
  return leading("GET_RANGE_BY_DEPTH", MsgType.GET_RANGE_BY_DEPTH, context, (w) => {
    w.u32(fromDepth).u32(limit).u32(readFlags).u32(0);
  }, decodeTurns);
}

export function getChain(turnId: number, fromDepth: number, limit: number, readFlags: number): Request<TurnsAnswer> {
  return request("GET_CHAIN", MsgType.GET_CHAIN, 1, (w) => {
    w.u64(turnId).u32(fromDepth).u32(limit).u32(readFlags).u32(0);
  }, decodeTurns);
}

export function getBlob(payloadHash: Uint8Array, readFlags: number): Request<PayloadRecord> {
  return request("GET_BLOB", MsgType.GET_BLOB, 1, (w) => w.hash(payloadHash).u32(readFlags).u32(0), (r) => r.payload());
}

export function hasBlobs(hashes: readonly Uint8Array[]): Request<boolean[]> {
  return request("HAS_BLOBS", MsgType.HAS_BLOBS, 1, (w) => {
    w.u32(hashes.length).u32(0);
    for (const h of hashes) w.hash(h);
  }, decodeHasBlobs);
}

export function stats(): Request<StatsAnswer> {
  return request("STATS", MsgType.STATS, 1, () => undefined, decodeStats);
}

// --- version 2 requests -------------------------------------------------------------------

function expectedHeadFields(w: Writer, bit: number, expectedHead: number | undefined): void {
  if (expectedHead === undefined) w.u32(0).u64(0);
  else w.u32(bit).u64(expectedHead);
}

export interface CtxOpenFields {
  baseTurnId: number;
  getOrCreate: boolean;
  cloneFrom?: ContextRef | undefined;
  name?: string | undefined;
  tags: ReadonlyArray<readonly [string, string]>;
}

export function ctxOpen(fields: CtxOpenFields): Request<OpenedAnswer> {
  return request("CTX_OPEN", MsgType.CTX_OPEN, 2, (w) => {
    const flags = (fields.getOrCreate ? OPEN_GET_OR_CREATE : 0) | (fields.cloneFrom === undefined ? 0 : OPEN_CLONE);
    w.u64(fields.baseTurnId).u8(flags).u8(0);
    if (fields.cloneFrom !== undefined) w.contextRef(fields.cloneFrom);
    w.optionalName(fields.name, "name").tags(fields.tags);
  }, decodeOpened);
}

export function ctxShow(context: ContextRef): Request<ContextInfoRecord> {
  return request("CTX_SHOW", MsgType.CTX_SHOW, 2, (w) => w.contextRef(context), (r) => r.contextInfo());
}

export function ctxTag(
  context: ContextRef,
  expectedHead: number | undefined,
  set: ReadonlyArray<readonly [string, string]>,
  remove: readonly string[],
): Request<ContextInfoRecord> {
  return request("CTX_TAG", MsgType.CTX_TAG, 2, (w) => {
    w.contextRef(context);
    expectedHeadFields(w, TAG_EXPECT_HEAD, expectedHead);
    w.tags(set).count16(remove.length, "removed tags");
    for (const key of remove) w.shortStr(key, "tag key");
  }, (r) => r.contextInfo());
}

export interface CtxListFields {
  tags: ReadonlyArray<readonly [string, string]>;
  namePrefix?: string | undefined;
  updatedAfterUnixMs?: number | undefined;
  updatedBeforeUnixMs?: number | undefined;
  cursor?: ListCursor | undefined;
  limit: number;
}

export function ctxList(fields: CtxListFields): Request<ContextListAnswer> {
  return request("CTX_LIST", MsgType.CTX_LIST, 2, (w) => {
    w.tags(fields.tags).optionalName(fields.namePrefix, "name_prefix");
    w.u64(fields.updatedAfterUnixMs ?? 0).u64(fields.updatedBeforeUnixMs ?? 0);
    w.listCursor(fields.cursor).u32(fields.limit);
  }, decodeContextList);
}

export function ctxName(context: ContextRef, name: string): Request<ContextInfoRecord> {
  return request("CTX_NAME", MsgType.CTX_NAME, 2, (w) => w.contextRef(context).shortStr(name, "name"), (r) => r.contextInfo());
}

export function kvPut(context: ContextRef, ifAbsent: boolean, entries: ReadonlyArray<readonly [Uint8Array, Uint8Array]>): Request<undefined> {
  return request("KV_PUT", MsgType.KV_PUT, 2, (w) => {
    w.contextRef(context).u8(ifAbsent ? 1 : 0).count16(entries.length, "entries");
    for (const [key, value] of entries) w.short(key, "key").u32(value.length).bytes(value);
  }, done);
}

export function kvGet(context: ContextRef, key: Uint8Array, readFlags: number): Request<KvValueAnswer> {
  return request("KV_GET", MsgType.KV_GET, 2, (w) => w.contextRef(context).short(key, "key").u32(readFlags), decodeKvValue);
}

export function kvDelete(context: ContextRef, keys: readonly Uint8Array[]): Request<undefined> {
  return request("KV_DELETE", MsgType.KV_DELETE, 2, (w) => {
    w.contextRef(context).count16(keys.length, "keys");
    for (const key of keys) w.short(key, "key");
  }, done);
}

export function kvList(context: ContextRef, prefix: Uint8Array, after: Uint8Array, limit: number): Request<KvItemRecord[]> {
  return request("KV_LIST", MsgType.KV_LIST, 2, (w) => {
    w.contextRef(context).short(prefix, "prefix").short(after, "after").u32(limit);
  }, decodeKvList);
}

/** KV_PUT_EX (version 3): KV_PUT whose entries expire `ttlMs` after it (0: never). */
export function kvPutEx(context: ContextRef, putFlags: number, ttlMs: number, entries: ReadonlyArray<readonly [Uint8Array, Uint8Array]>): Request<undefined> {
  return request("KV_PUT_EX", MsgType.KV_PUT_EX, 3, (w) => {
    w.contextRef(context).u8(putFlags).u64(ttlMs).count16(entries.length, "entries");
    for (const [key, value] of entries) w.short(key, "key").u32(value.length).bytes(value);
  }, done);
}

/** KV_GET_EX (version 3): the value with its TTL and expiry; REFRESH restarts the TTL. */
export function kvGetEx(context: ContextRef, key: Uint8Array, readFlags: number, kvFlags: number): Request<KvValueExAnswer> {
  return request("KV_GET_EX", MsgType.KV_GET_EX, 3, (w) => w.contextRef(context).short(key, "key").u32(readFlags).u8(kvFlags), decodeKvValueEx);
}

/** KV_LIST_EX (version 3): KV_LIST with each entry's TTL and expiry; REFRESH restarts them. */
export function kvListEx(context: ContextRef, prefix: Uint8Array, after: Uint8Array, limit: number, kvFlags: number): Request<KvItemExRecord[]> {
  return request("KV_LIST_EX", MsgType.KV_LIST_EX, 3, (w) => {
    w.contextRef(context).short(prefix, "prefix").short(after, "after").u32(limit).u8(kvFlags);
  }, decodeKvListEx);
}

/** KV_GET_MANY (version 3): the values of 1 to 128 keys from one snapshot. */
export function kvGetMany(context: ContextRef, readFlags: number, keys: readonly Uint8Array[]): Request<(KvValueExAnswer | undefined)[]> {
  return request("KV_GET_MANY", MsgType.KV_GET_MANY, 3, (w) => {
    w.contextRef(context).u32(readFlags).count16(keys.length, "keys");
    for (const key of keys) w.short(key, "key");
  }, decodeKvValues);
}

/** KV_TOUCH (version 3): each key's TTL restarted (`ttlMs`, or 0: each entry's own). */
export function kvTouch(context: ContextRef, ttlMs: number, keys: readonly Uint8Array[]): Request<KvItemExRecord[]> {
  return request("KV_TOUCH", MsgType.KV_TOUCH, 3, (w) => {
    w.contextRef(context).u64(ttlMs).count16(keys.length, "keys");
    for (const key of keys) w.short(key, "key");
  }, decodeKvListEx);
}

export function appendTurns(context: ContextRef, expectedHead: number | undefined, turns: readonly TurnSpecRecord[]): Request<AppendedTurnRecord[]> {
  if (turns.length === 0) throw new RangeError("APPEND_TURNS carries at least one turn");
  return request("APPEND_TURNS", MsgType.APPEND_TURNS, 2, (w) => {
    w.contextRef(context);
    expectedHeadFields(w, APPEND_EXPECT_HEAD, expectedHead);
    w.count16(turns.length, "turns");
    for (const spec of turns) turnSpec(w, spec);
  }, decodeAppendedTurns);
}

/** One TURN_SPEC (APPEND_TURNS, APPEND_TURNS_VECTORS). */
function turnSpec(w: Writer, spec: TurnSpecRecord): void {
  if ((spec.parentKind === ParentKind.TURN) !== (spec.parentTurnId !== 0)) {
    throw new RangeError("parentTurnId is set with parent kind TURN only (and 0 is no turn)");
  }
  const flags = (spec.summary ? TURN_SPEC_SUMMARY : 0) | (spec.byHash ? TURN_SPEC_BY_HASH : 0);
  w.u8(spec.parentKind).u64(spec.parentTurnId).u64(spec.typeTag).u32(spec.codec).u8(flags).extras(spec.extras);
  if (spec.byHash) w.hash(spec.payload);
  else w.u32(spec.payload.length).bytes(spec.payload);
}

export function getTurnByKey(context: ContextRef, key: Uint8Array): Request<TurnInfoAnswer> {
  return request("GET_TURN_BY_KEY", MsgType.GET_TURN_BY_KEY, 2, (w) => w.contextRef(context).tiny(key, "key"), decodeTurnInfo);
}

export function turnLog(
  context: ContextRef,
  labels: ReadonlyArray<readonly [string, string]>,
  cursor: LogCursor | undefined,
  limit: number,
  readFlags: number,
): Request<TurnLogAnswer> {
  return request("TURN_LOG", MsgType.TURN_LOG, 2, (w) => {
    w.contextRef(context).labels(labels).logCursor(cursor).u32(limit).u32(readFlags);
  }, decodeTurnLog);
}

export function readPage(
  context: ContextRef,
  kind: PageKind,
  beforeTurnId: number,
  fromDepth: number,
  limit: number,
  readFlags: number,
): Request<PageAnswer> {
  if (beforeTurnId !== 0 && kind !== PageKind.BEFORE) throw new RangeError("beforeTurnId is for a BEFORE page only");
  if (fromDepth !== 0 && kind !== PageKind.RANGE) throw new RangeError("fromDepth is for a RANGE page only");
  return request("READ_PAGE", MsgType.READ_PAGE, 2, (w) => {
    w.contextRef(context).u8(kind).u64(beforeTurnId).u32(fromDepth).u32(limit).u32(readFlags);
  }, decodePage);
}

export function findTurns(key: string, value: string, beforeTurnId: number, limit: number): Request<FoundTurnsAnswer> {
  return request("FIND_TURNS", MsgType.FIND_TURNS, 2, (w) => {
    w.tiny(utf8.encode(key), "label key").shortStr(value, "label value").u64(beforeTurnId).u32(limit);
  }, decodeFoundTurns);
}

export function ctxDelete(context: ContextRef): Request<RetentionAnswer> {
  return request("CTX_DELETE", MsgType.CTX_DELETE, 2, (w) => w.contextRef(context), decodeRetention);
}

export function ctxPrune(context: ContextRef, keep: number): Request<RetentionAnswer> {
  return request("CTX_PRUNE", MsgType.CTX_PRUNE, 2, (w) => w.contextRef(context).u32(keep), decodeRetention);
}

export function ctxTtl(context: ContextRef, set: boolean, ttlMs: number): Request<RetentionAnswer> {
  if (!set && ttlMs !== 0) throw new RangeError("ttlMs is 0 when CTX_TTL only reads");
  return request("CTX_TTL", MsgType.CTX_TTL, 2, (w) => w.contextRef(context).u8(set ? TTL_SET : 0).u64(ttlMs), decodeRetention);
}

export function backup(dir: string): Request<BackedUpAnswer> {
  if (dir.length === 0) throw new RangeError("a backup directory is needed");
  return request("BACKUP", MsgType.BACKUP, 2, (w) => w.shortStr(dir, "dir"), decodeBackedUp);
}

export function gc(): Request<GcDoneAnswer> {
  return request("GC", MsgType.GC, 2, (w) => w.u32(0), decodeGcDone);
}

export function statsEx(): Request<StatsExAnswer> {
  return request("STATS_EX", MsgType.STATS_EX, 2, () => undefined, decodeStatsEx);
}

export function replicationStats(): Request<ReplicationStats> {
  return request("REPLICATION_STATS", MsgType.REPLICATION_STATS, 3, () => undefined, decodeReplicationStats);
}

/** ROLE (version 4, decision 0031): what the server is in its replica's failover now. */
export function role(): Request<Role> {
  return request("ROLE", MsgType.ROLE, 4, () => undefined, decodeRole);
}

/** TENANT_LIST (version 5, decision 0032 §8; a tenant's token: its own entry only): a page of at most
 * `limit` (1..=1000) tenants whose names sort after `after` ("": from the first; at most 64
 * bytes). RangeError for what the codec refuses. */
export function tenantList(after: string, limit: number): Request<TenantsAnswer> {
  const name = utf8.encode(after);
  if (name.length > TENANT_NAME_BYTES_MAX) {
    throw new RangeError(`after is ${name.length} bytes; a tenant name is at most ${TENANT_NAME_BYTES_MAX}`);
  }
  if (!Number.isInteger(limit) || limit < 1 || limit > TENANT_LIST_LIMIT) {
    throw new RangeError(`a TENANT_LIST limit is 1 to ${TENANT_LIST_LIMIT} tenants, not ${limit}`);
  }
  return request("TENANT_LIST", MsgType.TENANT_LIST, 5, (w) => w.short(name, "after").u32(limit), decodeTenants);
}

/** A tenant's name as TENANT_DELETE and TENANT_ROTATE_KEY send it: 1..=64 bytes of UTF-8
 * (RangeError otherwise). */
function tenantNameBytes(name: string): Uint8Array {
  const bytes = utf8.encode(name);
  if (bytes.length === 0) throw new RangeError("a tenant name must not be empty");
  if (bytes.length > TENANT_NAME_BYTES_MAX) {
    throw new RangeError(`name is ${bytes.length} bytes; a tenant name is at most ${TENANT_NAME_BYTES_MAX}`);
  }
  return bytes;
}

/** TENANT_DELETE (version 5, decision 0032 §6; the operator's token only): the tenant `name`
 * (1..=64 bytes of UTF-8) deleted — its keys destroyed, its contexts deleted, its tokens refused;
 * sent again, it answers as the first time did. RangeError for what the codec refuses. */
export function tenantDelete(name: string): Request<TenantDeletedAnswer> {
  const bytes = tenantNameBytes(name);
  return request("TENANT_DELETE", MsgType.TENANT_DELETE, 5, (w) => w.short(bytes, "name"), decodeTenantDeleted);
}

/** TENANT_ROTATE_KEY (version 5, decision 0032 §7; the operator's token only): a new version of
 * the data key of the tenant `name` (1..=64 bytes of UTF-8; `operator`: the operator's own),
 * TENANT_DELETE's body. Not idempotent: sent again, it makes another version. RangeError for
 * what the codec refuses. */
export function tenantRotateKey(name: string): Request<TenantKeyRotatedAnswer> {
  const bytes = tenantNameBytes(name);
  return request("TENANT_ROTATE_KEY", MsgType.TENANT_ROTATE_KEY, 5, (w) => w.short(bytes, "name"), decodeTenantKeyRotated);
}

// --- version 6: vector search (issue 49, decision 0033) -----------------------------------

/** A vector index's metric, as VECTOR_INDEX_CREATE and VECTOR_INDEX_INFO carry it (version 6).
 * Every score is higher for nearer: COSINE the cosine similarity (1 − cosine distance; a zero
 * vector scores 0), INNER_PRODUCT the dot product, L2 minus the Euclidean distance. */
export const VectorMetric = { COSINE: 1, INNER_PRODUCT: 2, L2: 3 } as const;
export type VectorMetric = (typeof VectorMetric)[keyof typeof VectorMetric];
/** The metrics by code (0 is none). */
export const VECTOR_METRIC_NAMES = ["", "cosine", "inner_product", "l2"] as const;
/** VECTOR_HITS `method`: 0 EXACT (every candidate compared), 1 GRAPH. */
export const VECTOR_SEARCH_METHODS = ["exact", "graph"] as const;
/** Bytes of a vector index's name (UTF-8, not empty). */
export const VECTOR_INDEX_NAME_BYTES_MAX = 64;
/** Indexes of one tenant (VECTOR_INDEXES answers at most this many). */
export const VECTOR_INDEXES_MAX = 64;
/** The largest dimension of an index. */
export const VECTOR_DIMS_MAX = 4096;
/** Vectors of one key-value entry. */
export const VECTORS_PER_ENTRY_MAX = 64;
/** `k + offset` of one VECTOR_SEARCH. */
export const VECTOR_K_MAX = 1000;
/** A search's (and an index's) `ef_search`. */
export const VECTOR_EF_SEARCH_MAX = 4096;
/** Bytes of a VECTOR_SEARCH key prefix. */
export const VECTOR_PREFIX_BYTES_MAX = 256;
/** Bytes of a VECTOR_SEARCH filter (JSON). */
export const VECTOR_FILTER_BYTES_MAX = 65_536;
/** VECTOR_SEARCH `search_flags` bit 0: scan every candidate exactly, never the graph. */
export const VECTOR_SEARCH_EXACT = 1 << 0;
/** VECTOR_INDEX_INFO without its name: index_id, dims, metric, reserved, ef_search, vectors,
 * name_len. */
export const VECTOR_INDEX_INFO_BYTES = 20;
/** The smallest hit of VECTOR_HITS: key_len (2), score (4), value_hash (32), value_len (4). */
export const VECTOR_HIT_BYTES_MIN = 42;

/** VECTOR_INDEX_INFO (version 6), as on the wire. */
export interface VectorIndexRecord {
  /** The tenant's id of the index (a dropped name created again gets a new one). */
  indexId: number;
  dims: number;
  metric: VectorMetric;
  /** The graph's search breadth. */
  efSearch: number;
  /** Live vectors in it now. */
  vectors: number;
  name: string;
}

/** One hit of VECTOR_HITS: the entry's key, its best vector's score, its value's hash and
 * length. */
export interface VectorHitRecord {
  key: Uint8Array;
  score: number;
  valueHash: Uint8Array;
  valueLen: number;
}

/** VECTOR_HITS (version 6): how the search ran (0 EXACT, 1 GRAPH), the vectors compared, the
 * hits best first. */
export interface VectorHitsAnswer {
  method: number;
  candidates: number;
  hits: VectorHitRecord[];
}

/** VECTOR_INDEX_INFO: `u32 index_id, u16 dims, u8 metric, u8 reserved, u16 ef_search, u64
 * vectors, u16 name_len, name` (1..=64 bytes of UTF-8). A metric other than 1..=3, a dimension
 * outside 1..=4,096, an `ef_search` over 4,096 or an empty name is refused. */
function vectorIndexInfo(r: Reader): VectorIndexRecord {
  const indexId = r.u32("index_id");
  const dims = r.u16("dims");
  if (dims < 1 || dims > VECTOR_DIMS_MAX) throw r.error("dims", `${dims} is outside 1..=${VECTOR_DIMS_MAX}`);
  const metric = r.u8("metric");
  if (metric < VectorMetric.COSINE || metric > VectorMetric.L2) throw r.error("metric", `unknown value ${metric}`);
  r.zero(1);
  const efSearch = r.limit(r.u16("ef_search"), VECTOR_EF_SEARCH_MAX, "ef_search");
  const vectors = r.u64("vectors");
  const name = r.string(r.limit(r.u16("name_len"), VECTOR_INDEX_NAME_BYTES_MAX, "name_len"), "name");
  if (name.length === 0) throw r.error("name", "empty");
  return { indexId, dims, metric: metric as VectorMetric, efSearch, vectors, name };
}

/** VECTOR_INDEX (VECTOR_INDEX_CREATE's answer) and VECTOR_INDEX_DROPPED: one VECTOR_INDEX_INFO. */
export function decodeVectorIndex(r: Reader): VectorIndexRecord {
  return vectorIndexInfo(r);
}

/** VECTOR_INDEXES: `u16 count` (≤ 64), `count` × VECTOR_INDEX_INFO. */
export function decodeVectorIndexes(r: Reader): VectorIndexRecord[] {
  const count = r.limit(r.u16("count"), VECTOR_INDEXES_MAX, "count");
  r.count(count, VECTOR_INDEX_INFO_BYTES + 1, "indexes");
  const indexes: VectorIndexRecord[] = [];
  for (let i = 0; i < count; i++) indexes.push(vectorIndexInfo(r));
  return indexes;
}

/** VECTOR_HITS: `u8 method` (0 EXACT, 1 GRAPH), `u8 reserved`, `u32 candidates`, `u16 count`
 * (≤ 1,000), `count` × (`u16 key_len, key` (≤ 256 bytes), `f32 score`, `[32] value_hash`,
 * `u32 value_len`). */
export function decodeVectorHits(r: Reader): VectorHitsAnswer {
  const method = r.u8("method");
  if (method >= VECTOR_SEARCH_METHODS.length) throw r.error("method", `unknown value ${method}`);
  r.zero(1);
  const candidates = r.u32("candidates");
  const count = r.limit(r.u16("count"), VECTOR_K_MAX, "count");
  r.count(count, VECTOR_HIT_BYTES_MIN, "hits");
  const hits: VectorHitRecord[] = [];
  for (let i = 0; i < count; i++) {
    const key = r.take(r.limit(r.u16("key_len"), KV_KEY_BYTES_MAX, "key_len"), "key").slice();
    hits.push({ key, score: r.f32("score"), valueHash: r.hash("value_hash"), valueLen: r.u32("value_len") });
  }
  return { method, candidates, hits };
}

/** A vector index's name as the wire carries it: 1..=64 bytes of UTF-8 (RangeError otherwise). */
function vectorIndexNameBytes(name: string, what = "a vector index name"): Uint8Array {
  if (typeof name !== "string") throw new TypeError(`${what} is a string, not ${typeof name}`);
  const bytes = utf8.encode(name);
  if (bytes.length === 0) throw new RangeError(`${what} must not be empty`);
  if (bytes.length > VECTOR_INDEX_NAME_BYTES_MAX) {
    throw new RangeError(`${what} is ${bytes.length} bytes of UTF-8; at most ${VECTOR_INDEX_NAME_BYTES_MAX}`);
  }
  return bytes;
}

function checkDims(dims: number, what: string): number {
  if (!Number.isInteger(dims) || dims < 1 || dims > VECTOR_DIMS_MAX) {
    throw new RangeError(`${what} is 1 to ${VECTOR_DIMS_MAX}, not ${dims}`);
  }
  return dims;
}

function checkEfSearch(efSearch: number): number {
  if (!Number.isInteger(efSearch) || efSearch < 0 || efSearch > VECTOR_EF_SEARCH_MAX) {
    throw new RangeError(`efSearch is 0 (the default) to ${VECTOR_EF_SEARCH_MAX}, not ${efSearch}`);
  }
  return efSearch;
}

/** A vector the wire can carry: `dims` components, each finite as an f32 (a NaN, an infinity
 * or a number beyond the f32 range is refused, RangeError naming `what`). */
export function checkVector(vector: Float32Array, dims: number, what: string): Float32Array {
  if (!(vector instanceof Float32Array)) throw new TypeError(`${what} is a Float32Array`);
  if (vector.length !== dims) throw new RangeError(`${what} has ${vector.length} dimensions; the index has ${dims}`);
  for (let i = 0; i < vector.length; i++) {
    if (!Number.isFinite(vector[i])) throw new RangeError(`${what}: component ${i} is ${vector[i]} as an f32 (a component is a finite number)`);
  }
  return vector;
}

/** VECTOR_INDEX_CREATE (version 6): the index `name` (1..=64 bytes of UTF-8) of `dims`
 * (1..=4,096) and `metric`, or the one of that name when its dimension and metric are these;
 * `efSearch` 0 (the server's default, 128) to 4,096. RangeError for what the server refuses. */
export function vectorIndexCreate(name: string, dims: number, metric: VectorMetric, efSearch: number): Request<VectorIndexRecord> {
  const bytes = vectorIndexNameBytes(name);
  checkDims(dims, "dims");
  if (metric !== VectorMetric.COSINE && metric !== VectorMetric.INNER_PRODUCT && metric !== VectorMetric.L2) {
    throw new RangeError(`a metric is 1 (cosine), 2 (inner product) or 3 (L2), not ${String(metric)}`);
  }
  checkEfSearch(efSearch);
  return request("VECTOR_INDEX_CREATE", MsgType.VECTOR_INDEX_CREATE, 6, (w) => {
    w.short(bytes, "name").u16(dims).u8(metric).u8(0).u16(efSearch);
  }, decodeVectorIndex);
}

/** VECTOR_INDEX_DROP (version 6): drops the index `name`; its answer is the index as it was. */
export function vectorIndexDrop(name: string): Request<VectorIndexRecord> {
  const bytes = vectorIndexNameBytes(name);
  return request("VECTOR_INDEX_DROP", MsgType.VECTOR_INDEX_DROP, 6, (w) => w.short(bytes, "name"), decodeVectorIndex);
}

/** VECTOR_INDEX_LIST (version 6): the connection's tenant's indexes, in name order. */
export function vectorIndexList(): Request<VectorIndexRecord[]> {
  return request("VECTOR_INDEX_LIST", MsgType.VECTOR_INDEX_LIST, 6, () => undefined, decodeVectorIndexes);
}

/** VECTOR_SEARCH's fields. */
export interface VectorSearchFields {
  context: ContextRef;
  index: string;
  /** The query; its length is the `dims` sent. */
  vector: Float32Array;
  /** 1..=1,000. */
  k: number;
  /** Hits skipped before the `k` answered; `k + offset` ≤ 1,000. */
  offset: number;
  /** EXACT: every candidate scanned, never the graph. */
  exact: boolean;
  /** The graph's breadth for this search, 0 (the index's) to 4,096. */
  efSearch: number;
  /** Only entries whose key starts with it (≤ 256 bytes; empty: all). */
  prefix: Uint8Array;
  /** A JSON object over the entry's value, as UTF-8 (≤ 65,536 bytes; empty: none). */
  filter: Uint8Array;
}

/** VECTOR_SEARCH (version 6): the `k` entries of a context nearest `vector` that pass the
 * prefix and the filter, best first. RangeError for what the server refuses (a vector not finite
 * as f32, `k` outside 1..=1,000, `k + offset` over 1,000, a prefix over 256 bytes, a filter over
 * 65,536 bytes, `efSearch` over 4,096). */
export function vectorSearch(fields: VectorSearchFields): Request<VectorHitsAnswer> {
  const name = vectorIndexNameBytes(fields.index, "index");
  const dims = checkDims(fields.vector.length, "a query vector's dimension");
  checkVector(fields.vector, dims, "the query vector");
  if (!Number.isInteger(fields.k) || fields.k < 1 || fields.k > VECTOR_K_MAX) throw new RangeError(`k is 1 to ${VECTOR_K_MAX}, not ${fields.k}`);
  if (!Number.isInteger(fields.offset) || fields.offset < 0 || fields.k + fields.offset > VECTOR_K_MAX) {
    throw new RangeError(`offset is a whole number with k + offset at most ${VECTOR_K_MAX}, not ${fields.offset} (k ${fields.k})`);
  }
  checkEfSearch(fields.efSearch);
  if (fields.prefix.length > VECTOR_PREFIX_BYTES_MAX) {
    throw new RangeError(`a search prefix is at most ${VECTOR_PREFIX_BYTES_MAX} bytes, not ${fields.prefix.length}`);
  }
  if (fields.filter.length > VECTOR_FILTER_BYTES_MAX) {
    throw new RangeError(`a search filter is at most ${VECTOR_FILTER_BYTES_MAX} bytes of JSON, not ${fields.filter.length}`);
  }
  return request("VECTOR_SEARCH", MsgType.VECTOR_SEARCH, 6, (w) => {
    w.contextRef(fields.context).short(name, "index").u16(dims).f32s(fields.vector);
    w.u16(fields.k).u16(fields.offset).u8(fields.exact ? VECTOR_SEARCH_EXACT : 0).u8(0).u16(fields.efSearch);
    w.short(fields.prefix, "prefix").u32(fields.filter.length).bytes(fields.filter);
  }, decodeVectorHits);
}

/** One entry of KV_PUT_VECTORS: its key, value and vectors (none: stored without any). */
export interface VectorEntryRecord {
  key: Uint8Array;
  value: Uint8Array;
  vectors: readonly Float32Array[];
}

/**
 * KV_PUT_VECTORS (version 6): KV_PUT_EX with vectors, every entry's value and vectors in one
 * durable record (`putFlags` KV_PUT_IF_ABSENT, `ttlMs` 0: never expire). Every vector is of the
 * index `index` and of its dimension `dims`. RangeError for what the server refuses: 1..=128
 * entries, at most 64 vectors each, each of `dims` components finite as f32, naming the entry
 * and the vector.
 */
export function kvPutVectors(
  context: ContextRef,
  putFlags: number,
  ttlMs: number,
  index: string,
  dims: number,
  entries: readonly VectorEntryRecord[],
): Request<undefined> {
  const name = vectorIndexNameBytes(index, "index");
  checkDims(dims, "dims");
  if (entries.length < 1 || entries.length > KV_ENTRIES_PER_REQUEST_MAX) {
    throw new RangeError(`KV_PUT_VECTORS carries 1 to ${KV_ENTRIES_PER_REQUEST_MAX} entries, not ${entries.length}`);
  }
  entries.forEach((entry, i) => checkVectorList(entry.vectors, dims, `entry ${i}`, "an entry", VECTORS_PER_ENTRY_MAX));
  return request("KV_PUT_VECTORS", MsgType.KV_PUT_VECTORS, 6, (w) => {
    w.contextRef(context).u8(putFlags).u64(ttlMs).short(name, "index").u16(dims).count16(entries.length, "entries");
    for (const entry of entries) {
      w.short(entry.key, "key").u32(entry.value.length).bytes(entry.value).count8(entry.vectors.length, "vectors");
      for (const vector of entry.vectors) w.f32s(vector);
    }
  }, done);
}

// --- version 7: vectors on turns (issue 49, decision 0033) --------------------------------

/** Vectors of one turn (APPEND_TURNS_VECTORS). */
export const VECTORS_PER_TURN_MAX = 16;
/** VECTOR_SEARCH_TURNS `search_flags` bit 1: only turns of `type_tag`. */
export const VECTOR_SEARCH_TYPE_TAG = 1 << 1;
/** VECTOR_SEARCH_TURNS' known `search_flags`. */
export const VECTOR_SEARCH_TURNS_FLAGS_KNOWN = VECTOR_SEARCH_EXACT | VECTOR_SEARCH_TYPE_TAG;
/** Tags of one VECTOR_SEARCH_TURNS (a context carries at most 32). */
export const TURN_SEARCH_TAGS_MAX = 32;
/** Labels of one VECTOR_SEARCH_TURNS (a turn carries at most 16). */
export const TURN_SEARCH_LABELS_MAX = 16;
/** One hit of TURN_HITS: TURN, score. */
export const TURN_HIT_BYTES = TURN_BYTES + 4;

/** One turn of APPEND_TURNS_VECTORS: its TURN_SPEC and its vectors (none: appended without
 * any). */
export interface VectorTurnSpecRecord extends TurnSpecRecord {
  vectors: readonly Float32Array[];
}

/** The vectors of APPEND_TURNS_VECTORS' turns as the server takes them (RangeError otherwise,
 * naming the turn and the vector): the index's name 1..=64 bytes of UTF-8, `dims` 1..=4,096, at
 * most 16 vectors a turn, each of `dims` components finite as f32. The index's name as bytes. */
export function checkTurnVectors(index: string, dims: number, vectors: ReadonlyArray<readonly Float32Array[]>): Uint8Array {
  const name = vectorIndexNameBytes(index, "index");
  checkDims(dims, "dims");
  vectors.forEach((list, i) => checkVectorList(list, dims, `turn ${i}`, "a turn", VECTORS_PER_TURN_MAX));
  return name;
}

/** One entry's or turn's vectors (`what`, e.g. `turn 3`; `kind`, e.g. `a turn`): at most
 * `countMax`, each of `dims` components finite as f32 (RangeError naming the vector). */
function checkVectorList(list: readonly Float32Array[], dims: number, what: string, kind: string, countMax: number): void {
  if (list.length > countMax) {
    throw new RangeError(`${what} has ${list.length} vectors; ${kind} carries at most ${countMax}`);
  }
  list.forEach((vector, j) => checkVector(vector, dims, `${what}, vector ${j}`));
}

/**
 * APPEND_TURNS_VECTORS (version 7): APPEND_TURNS with each turn's vectors, the turns and their
 * vectors in one group commit, all or none. Every vector is of the index `index` and of its
 * dimension `dims`. Answered as APPEND_TURNS. RangeError for what the server refuses: at least
 * one turn, at most 16 vectors each, each of `dims` components finite as f32, naming the turn
 * and the vector.
 */
export function appendTurnsVectors(
  context: ContextRef,
  expectedHead: number | undefined,
  index: string,
  dims: number,
  turns: readonly VectorTurnSpecRecord[],
): Request<AppendedTurnRecord[]> {
  if (turns.length === 0) throw new RangeError("APPEND_TURNS_VECTORS carries at least one turn");
  const name = checkTurnVectors(index, dims, turns.map((turn) => turn.vectors));
  return request("APPEND_TURNS_VECTORS", MsgType.APPEND_TURNS_VECTORS, 7, (w) => {
    w.contextRef(context);
    expectedHeadFields(w, APPEND_EXPECT_HEAD, expectedHead);
    w.short(name, "index").u16(dims).count16(turns.length, "turns");
    for (const turn of turns) {
      turnSpec(w, turn);
      w.count8(turn.vectors.length, "vectors");
      for (const vector of turn.vectors) w.f32s(vector);
    }
  }, decodeAppendedTurns);
}

/** VECTOR_SEARCH_TURNS' fields. */
export interface VectorSearchTurnsFields {
  index: string;
  /** The query; its length is the `dims` sent. */
  vector: Float32Array;
  /** 1..=1,000. */
  k: number;
  /** Hits skipped before the `k` answered; `k + offset` ≤ 1,000. */
  offset: number;
  /** EXACT: every candidate scanned, never the graph. */
  exact: boolean;
  /** The graph's breadth for this search, 0 (the index's) to 4,096. */
  efSearch: number;
  /** One context (undefined: none). */
  context: ContextRef | undefined;
  /** The contexts whose name starts with it (empty: none). */
  namePrefix: string;
  /** The contexts carrying every one (≤ 32). */
  tags: ReadonlyArray<readonly [string, string]>;
  /** Only turns carrying every one of these labels (≤ 16). */
  labels: ReadonlyArray<readonly [string, string]>;
  /** Only turns of this type tag (TYPE_TAG); undefined: any. */
  typeTag: bigint | undefined;
}

/** One hit of TURN_HITS: the turn and its best vector's score. */
export interface TurnHitRecord {
  turn: TurnRecord;
  score: number;
}

/** TURN_HITS (version 7): how the search ran (0 EXACT, 1 GRAPH), the vectors compared, the hits
 * best first. */
export interface TurnHitsAnswer {
  method: number;
  candidates: number;
  hits: TurnHitRecord[];
}

/** TURN_HITS: `u8 method` (0 EXACT, 1 GRAPH), `u8 reserved`, `u32 candidates`, `u16 count`
 * (≤ 1,000), `count` × (TURN, `f32 score`). */
export function decodeTurnHits(r: Reader): TurnHitsAnswer {
  const method = r.u8("method");
  if (method >= VECTOR_SEARCH_METHODS.length) throw r.error("method", `unknown value ${method}`);
  r.zero(1);
  const candidates = r.u32("candidates");
  const count = r.limit(r.u16("count"), VECTOR_K_MAX, "count");
  r.count(count, TURN_HIT_BYTES, "hits");
  const hits: TurnHitRecord[] = [];
  for (let i = 0; i < count; i++) hits.push({ turn: r.turn(), score: r.f32("score") });
  return { method, candidates, hits };
}

/**
 * VECTOR_SEARCH_TURNS (version 7): the `k` turns nearest `vector` among the turns of the
 * contexts named (the context, the name prefix and the tags given, each narrowing; none of the
 * three: every context of the tenant) that carry every label and, with a type tag, are of it;
 * best first. RangeError for what the server refuses (a vector not finite as f32, `k` outside
 * 1..=1,000, `k + offset` over 1,000, `efSearch` over 4,096, more than 32 tags or 16 labels).
 */
export function vectorSearchTurns(fields: VectorSearchTurnsFields): Request<TurnHitsAnswer> {
  const name = vectorIndexNameBytes(fields.index, "index");
  const dims = checkDims(fields.vector.length, "a query vector's dimension");
  checkVector(fields.vector, dims, "the query vector");
  if (!Number.isInteger(fields.k) || fields.k < 1 || fields.k > VECTOR_K_MAX) throw new RangeError(`k is 1 to ${VECTOR_K_MAX}, not ${fields.k}`);
  if (!Number.isInteger(fields.offset) || fields.offset < 0 || fields.k + fields.offset > VECTOR_K_MAX) {
    throw new RangeError(`offset is a whole number with k + offset at most ${VECTOR_K_MAX}, not ${fields.offset} (k ${fields.k})`);
  }
  checkEfSearch(fields.efSearch);
  if (fields.tags.length > TURN_SEARCH_TAGS_MAX) throw new RangeError(`a turn search names at most ${TURN_SEARCH_TAGS_MAX} tags, not ${fields.tags.length}`);
  if (fields.labels.length > TURN_SEARCH_LABELS_MAX) {
    throw new RangeError(`a turn search names at most ${TURN_SEARCH_LABELS_MAX} labels, not ${fields.labels.length}`);
  }
  if (fields.context === 0 || fields.context === "") throw new RangeError("context 0 (or an empty name) is no context: leave it undefined");
  const typeTag = fields.typeTag;
  if (typeTag !== undefined && (typeof typeTag !== "bigint" || typeTag < 0n || typeTag > U64_MAX)) {
    throw new RangeError(`a type tag is a u64 (a bigint), not ${String(typeTag)}`);
  }
  const flags = (fields.exact ? VECTOR_SEARCH_EXACT : 0) | (typeTag === undefined ? 0 : VECTOR_SEARCH_TYPE_TAG);
  return request("VECTOR_SEARCH_TURNS", MsgType.VECTOR_SEARCH_TURNS, 7, (w) => {
    w.short(name, "index").u16(dims).f32s(fields.vector);
    w.u16(fields.k).u16(fields.offset).u8(flags).u8(0).u16(fields.efSearch);
    w.contextRef(fields.context ?? 0).shortStr(fields.namePrefix, "name prefix").tags(fields.tags).tags(fields.labels, "labels");
    w.u64(typeTag ?? 0n);
  }, decodeTurnHits);
}

/** A write of TAKES_ACK_AFTER sent with the frame flag ACK_AFTER (version 4): acknowledged once
 * durable on the server's disk (`local`) or once the object store holds it too (`remote`). */
export function ackAfter<R>(write: Request<R>, after: "local" | "remote"): Request<R> {
  if (!TAKES_ACK_AFTER.has(write.msgType) || (write.flags & ACK_AFTER_MASK) !== 0) {
    throw new TypeError(`${write.name} is not a write that takes ACK_AFTER`);
  }
  return { ...write, flags: write.flags | (ACK_AFTER[after] << ACK_AFTER_SHIFT), minVersion: Math.max(4, write.minVersion) };
}

export function patchTurn(turnId: number, payload: Uint8Array): Request<PatchedAnswer> {
  return request("PATCH_TURN", MsgType.PATCH_TURN, 2, (w) => w.u64(turnId).u32(payload.length).u32(0).bytes(payload), decodePatched);
}

export function redactTurn(turnId: number): Request<RedactedAnswer> {
  return request("REDACT_TURN", MsgType.REDACT_TURN, 2, (w) => w.u64(turnId), decodeRedacted);
}

export function purgeBlob(payloadHash: Uint8Array): Request<PurgedAnswer> {
  return request("PURGE_BLOB", MsgType.PURGE_BLOB, 2, (w) => w.hash(payloadHash), decodePurged);
}

/** PUT_CHUNKED's base: the payload starts with the first `kept` chunks of the stored chunked
 * payload `hash`. */
export interface ChunkBase {
  hash: Uint8Array;
  kept: number;
}

/**
 * PUT_CHUNKED. The codec's limits (the server closes the connection for them) are refused
 * here with RangeError, as the Rust and Python encoders do: 1..=65,536 chunks (with the
 * base's), each 1..=1 MiB, SENT indexes strictly increasing and below the chunk count, a
 * SENT's bytes exactly its chunk's length.
 */
export function putChunked(
  payloadHash: Uint8Array,
  chunks: readonly ChunkRecord[],
  sent: readonly SentChunkRecord[],
  base: ChunkBase | undefined,
): Request<ChunkedStoredAnswer> {
  const kept = base?.kept ?? 0;
  if (base !== undefined && (kept < 1 || base.hash.every((b) => b === 0))) {
    throw new RangeError("a PUT_CHUNKED base is a stored payload's hash keeping 1 or more chunks");
  }
  if (chunks.length < 1 || chunks.length > CHUNKS_PER_PAYLOAD_MAX - kept) {
    throw new RangeError(`PUT_CHUNKED names 1 to ${CHUNKS_PER_PAYLOAD_MAX} chunks, not ${chunks.length}`);
  }
  if (sent.length > chunks.length) throw new RangeError(`${sent.length} chunks sent of ${chunks.length}: at most one per chunk`);
  return request("PUT_CHUNKED", MsgType.PUT_CHUNKED, 2, (w) => {
    w.hash(payloadHash);
    if (base === undefined) w.zeros(36);
    else w.hash(base.hash).u32(kept);
    w.u32(chunks.length);
    for (const chunk of chunks) {
      if (chunk.len < 1 || chunk.len > CHUNK_BYTES_MAX) throw new RangeError(`a chunk is 1 to ${CHUNK_BYTES_MAX} bytes, not ${chunk.len}`);
      w.hash(chunk.hash).u32(chunk.len);
    }
    w.u32(sent.length);
    let indexMin = 0;
    for (const s of sent) {
      if (!Number.isInteger(s.index) || s.index < indexMin || s.index >= chunks.length) {
        throw new RangeError(`sent index ${s.index}: indexes strictly increase and are below the chunk count ${chunks.length}`);
      }
      const length = chunks[s.index]!.len;
      if (s.data.length !== length) throw new RangeError(`sent chunk ${s.index} has ${s.data.length} bytes; its entry says ${length}`);
      w.u32(s.index).u32(length).bytes(s.data);
      indexMin = s.index + 1;
    }
  }, decodeChunkedStored);
}

/** The number of TURNs an answer carries, in wire order (for the OVERLAY entries). */
export type TurnCounter<R> = (answer: R) => number;

/** An answer read in an overlay view: the read's answer and one overlay state per TURN. */
export interface Overlaid<R> {
  answer: R;
  overlays: OverlayRecord[];
}

/** A read of TAKES_OVERLAYS in the overlay view `asOf` (0: the latest; decision 0012): the read
 * with the frame flag OVERLAYS and `u64 as_of` after its body; its answer ends with the
 * overlay states. */
export function asOf<R>(read: Request<R>, view: number, turnCount: TurnCounter<R>): Request<Overlaid<R>> {
  if (!TAKES_OVERLAYS.has(read.msgType) || (read.flags & OVERLAYS) !== 0) {
    throw new RangeError(`${read.name} returns no turns: it has no overlay view`);
  }
  const tail = new Writer().u64(view).finish();
  return {
    name: read.name,
    msgType: read.msgType,
    flags: read.flags | OVERLAYS,
    minVersion: 2,
    body: [...read.body, ...tail],
    decode: (r) => {
      const answer = read.decode(r);
      const count = r.u32("overlay count");
      if (count !== turnCount(answer)) throw r.error("overlay count", "not one per TURN of the answer");
      r.count(count, OVERLAY_BYTES, "overlays");
      const overlays: OverlayRecord[] = [];
      for (let i = 0; i < count; i++) {
        const overlaySeq = r.u64("overlay_seq");
        const flags = r.u8("overlay_flags");
        if ((flags & ~OVERLAY_REDACTED) !== 0) throw r.error("overlay_flags", "unknown flag bits");
        r.zero(7);
        overlays.push({ overlaySeq, redacted: (flags & OVERLAY_REDACTED) !== 0 });
      }
      return { answer, overlays };
    },
  };
}

/** Any frame, as bytes: for messages this module does not define (and for tests). */
export function raw(msgType: number, body: Uint8Array, minVersion = 1, flags = 0): Request<Uint8Array> {
  return {
    name: `RAW 0x${msgType.toString(16).padStart(4, "0")}`,
    msgType,
    flags,
    minVersion,
    body: [body],
    decode: (r) => r.take(r.remaining).slice(),
  };
}

/** A request frame as chunks: the header joined to the body's first chunk, then the rest. */
export function encodeRequest(reqId: bigint, req: Request<unknown>): Uint8Array[] {
  let length = 0;
  for (const chunk of req.body) length += chunk.length;
  const header = encodeHeader({ len: length, msgType: req.msgType, flags: req.flags, reqId });
  const first = req.body[0]!;
  const joined = new Uint8Array(HEADER_BYTES + first.length);
  joined.set(header);
  joined.set(first, HEADER_BYTES);
  return [joined, ...req.body.slice(1)];
}

/** The whole frame of a request as one buffer (tests, golden vectors). */
export function requestFrame(reqId: bigint, req: Request<unknown>): Uint8Array {
  return concat(encodeRequest(reqId, req));
}

export function concat(parts: readonly Uint8Array[]): Uint8Array {
  let total = 0;
  for (const part of parts) total += part.length;
  const out = new Uint8Array(total);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}
