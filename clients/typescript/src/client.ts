/**
 * The ctxstore client: one persistent, pipelined connection (reconnected on the next call
 * after a failure), every message family of docs/protocol.md as a method. Concurrent calls
 * share the connection; their requests are pipelined and matched by `req_id`.
 *
 * Every answer is checked against what was asked where the protocol makes a promise (pair
 * checks, as the Rust and Python clients do): payload hashes and lengths (decision 0015), the
 * context and parent of an appended turn, the labels of a filtered page, a chain page's links,
 * cursors that advance. A broken promise is a ProtocolError (IntegrityError for bytes).
 */

import { randomBytes } from "node:crypto";

import {
  ClientClosed,
  ConnectError,
  ConnectionLost,
  ConnectTimeout,
  CtxstoreError,
  IntegrityError,
  NoPrimaryError,
  NotFound,
  NotPrimary,
  NotSupported,
  OutcomeUnknownError,
  ProtocolError,
  RequestTimeout,
  ShuttingDown,
  StreamEnded,
  Unconfirmed,
  UnknownMessage,
} from "./errors.js";
import { Connection, DEFAULT_FOLLOW_FRAMES_QUEUED_MAX, DEFAULT_FRAME_BYTES_MAX, type Follow } from "./connection.js";
import { CHUNK_AVG_BYTES, CHUNK_MAX_BYTES, CHUNK_MIN_BYTES, CHUNK_THRESHOLD_BYTES, cut, type ChunkSizes } from "./fastcdc.js";
import { blobHash, EMPTY_HASH, equalBytes, parseHash, payloadBytes, toHex } from "./payload.js";
import * as p from "./protocol.js";
import * as s from "./streams.js";
import { TurnStream } from "./streams.js";
import type {
  Appended,
  BackupReport,
  ChunkedStored,
  ContextHead,
  ContextInfo,
  ContextLike,
  ContextPage,
  Durability,
  FoundPage,
  GcReport,
  HashLike,
  Idempotency,
  KeyLike,
  KvItem,
  KvPage,
  KvValue,
  LogCursor,
  LogPage,
  Opened,
  Page,
  ParentLike,
  Patched,
  Purged,
  Redacted,
  ReplicationStats,
  Retention,
  Role,
  ServerInfo,
  Stats,
  Tenant,
  TenantDeleted,
  TenantKeyRotated,
  Turn,
  TurnInfo,
  TurnSearchResult,
  TurnSpec,
  VectorEntry,
  VectorIndex,
  VectorLike,
  VectorMetricName,
  VectorSearchResult,
  VectorTurnSpec,
  VerifyPayloads,
} from "./types.js";

export const DEFAULT_ADDR = "127.0.0.1:7411";
export const DEFAULT_TIMEOUT_MS = 30_000;
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
export const DEFAULT_CLIENT_NAME = "ctxstore-typescript";
/** Chunk lists remembered to name as PUT_CHUNKED bases (one per growing thread written). */
const RECENT_CHUNKED_MAX = 256;

/** How appends by value of large payloads travel (PUT_CHUNKED, decision 0013). */
export interface ChunkingOptions extends ChunkSizes {
  /** Payloads larger than this are chunked (default 16 KiB). */
  thresholdBytes: number;
}

export const DEFAULT_CHUNKING: ChunkingOptions = {
  thresholdBytes: CHUNK_THRESHOLD_BYTES,
  min: CHUNK_MIN_BYTES,
  avg: CHUNK_AVG_BYTES,
  max: CHUNK_MAX_BYTES,
};

export interface ClientOptions {
  /** The server's token (default: CTXSTORE_TOKEN). Surrounding whitespace is trimmed, as the
   * server trims its token file. */
  token?: string | Uint8Array | undefined;
  /** Each call's timeout (default 30 s); a call may give its own. */
  timeoutMs?: number;
  /** TCP connect and HELLO (default 10 s). */
  connectTimeoutMs?: number;
  clientName?: string;
  /**
   * Let the server send payloads as stored zstd bodies, inflated here (default false: the
   * server inflates; decision 0021 has the measurement — fzstd in JavaScript costs more CPU
   * than the bytes it saves on the connections this client is for).
   */
  acceptZstd?: boolean;
  /** Requests in flight at once on the connection (default 1024; the server's limit too). */
  maxInFlight?: number;
  /** Frames of one `readStream` follow held untaken before the connection stops reading its
   * socket, so that TCP pushes back on the server (default 64; each at most `bytesMax`). */
  followFramesQueuedMax?: number;
  /** The largest answer frame accepted (default 1 GiB, the protocol's ceiling). */
  maxResponseBytes?: number;
  /** Decision 0015 (default "when_remote"). */
  verifyPayloads?: VerifyPayloads;
  /** PUT_CHUNKED for large appends by value (default the engine's sizes; false: off). */
  chunking?: ChunkingOptions | false;
  /** With several addresses: how long a call looks for the primary (default 30 s). */
  failoverTimeoutMs?: number;
  /** `auto`: every append without a key gets a fresh one, sent again with every retry of that
   * append, so that it lands exactly once across a failover (default `off`; see
   * {@link Idempotency}). */
  idempotency?: Idempotency;
}

/** Per-call options. */
export interface CallOptions {
  timeoutMs?: number;
}

/** A write's options: when it is acknowledged (see {@link Durability}; protocol version 4). */
export interface WriteOptions extends CallOptions {
  durability?: Durability;
}

/** `request` with the frame flag ACK_AFTER of `durability` when it is a write that takes it
 * (as it is without one); a value other than local or remote is a TypeError, before sending. */
function durable<R>(request: p.Request<R>, durability: Durability | undefined): p.Request<R> {
  if (!checkedDurability(durability)) return request;
  return p.TAKES_ACK_AFTER.has(request.msgType) ? p.ackAfter(request, durability) : request;
}

/** Whether a write asks for a durability: false for undefined, a TypeError for a value other
 * than local or remote. */
function checkedDurability(durability: Durability | undefined): durability is Durability {
  if (durability === undefined) return false;
  if (durability !== "local" && durability !== "remote") {
    throw new TypeError(`durability is "local", "remote" or undefined, not ${JSON.stringify(durability)}`);
  }
  return true;
}

export interface ReadOptions extends CallOptions {
  /** Return each turn's payload (checked against its hash). */
  payloads?: boolean;
  /** The overlay view (decision 0012): 0 the latest, else as of that overlay sequence. */
  asOf?: number;
}

const utf8 = new TextEncoder();

function envAddr(): string {
  const value = process.env["CTXSTORE_ADDR"];
  return value !== undefined && value.trim() !== "" ? value.trim() : DEFAULT_ADDR;
}

/** Every address `addr` names: `"A,B,C"` (a primary and its standbys), a list, or one. */
export function parseAddrs(addr: string | readonly string[]): Array<{ host: string; port: number }> {
  const parts = (typeof addr === "string" ? addr.split(",") : [...addr]).filter((part) => part.trim() !== "");
  if (parts.length === 0) throw new RangeError(`no address in ${JSON.stringify(addr)}`);
  return parts.map(parseAddr);
}

const FAILOVER_TIMEOUT_MS = 30_000;
/** The prefix of the keys `idempotency: "auto"` makes (the Rust client's
 * `Idempotency::AUTO_KEY_PREFIX`). */
export const AUTO_KEY_PREFIX = "ctxstore-auto:";
/** The protocol version whose APPEND_TURNS carries a turn's key (decision 0009). */
const KEYS_SINCE_VERSION = 2;

/** A new key, unique across processes and calls: AUTO_KEY_PREFIX and 32 hex digits of 128
 * random bits. */
export function autoKey(): string {
  return AUTO_KEY_PREFIX + randomBytes(16).toString("hex");
}
const BACKOFF_MIN_MS = 100;
const BACKOFF_MAX_MS = 1_000;

/** Sent again safely when its outcome is unknown: reads, and writes that land once however
 * often they are sent (decision 0031 §11). */
const RESENT_SAFELY = new Set([
  "PING", "STATS", "STATS_EX", "GET_HEAD", "GET_TURN", "GET_LAST", "GET_BEFORE", "GET_RANGE_BY_DEPTH",
  "GET_CHAIN", "GET_BLOB", "HAS_BLOBS", "CTX_SHOW", "CTX_LIST", "KV_GET", "KV_LIST", "KV_GET_EX",
  "KV_LIST_EX", "KV_GET_MANY", "GET_TURN_BY_KEY", "TURN_LOG", "READ_PAGE", "FIND_TURNS",
  "REPLICATION_STATS", "ROLE", "STREAM_LIST", "STREAM_READ", "WATCH", "TENANT_LIST", "BACKUP", "GC",
  "CTX_OPEN", "KV_PUT", "KV_PUT_EX", "PUT_CHUNKED", "STREAM_SEAL", "TENANT_DELETE",
  "VECTOR_INDEX_LIST", "VECTOR_SEARCH", "VECTOR_INDEX_CREATE", "KV_PUT_VECTORS", "VECTOR_SEARCH_TURNS",
]);

function resendsSafely(request: p.Request<unknown>): boolean {
  return request.resendable === true || RESENT_SAFELY.has(request.name);
}

/** Whether `error` sends a client of several addresses looking for the primary: "refused"
 * (NOT_PRIMARY: nothing was written), "unknown" (the connection lost, no answer in time,
 * SHUTTING_DOWN or UNCONFIRMED: a write may have landed), else undefined (any other answer, as
 * CONFLICT or QUOTA_EXCEEDED: nothing was written, and the primary it came from is the right
 * server, so it is the caller's). */
function failoverTrouble(error: unknown): "refused" | "unknown" | undefined {
  if (error instanceof NotPrimary) return "refused";
  if (error instanceof ConnectionLost || error instanceof RequestTimeout || error instanceof ShuttingDown || error instanceof Unconfirmed) return "unknown";
  return undefined;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** `"host:port"` or `"[v6]:port"` as host and port. */
export function parseAddr(addr: string): { host: string; port: number } {
  const text = addr.trim();
  let host: string;
  let portText: string;
  if (text.startsWith("[")) {
    const end = text.indexOf("]");
    if (end < 0 || text[end + 1] !== ":") throw new RangeError(`address ${JSON.stringify(addr)} is not [HOST]:PORT`);
    host = text.slice(1, end);
    portText = text.slice(end + 2);
  } else {
    const colon = text.lastIndexOf(":");
    if (colon <= 0) throw new RangeError(`address ${JSON.stringify(addr)} is not HOST:PORT`);
    host = text.slice(0, colon);
    portText = text.slice(colon + 1);
  }
  if (!/^[0-9]+$/.test(portText)) throw new RangeError(`address ${JSON.stringify(addr)} has no numeric port`);
  const port = Number(portText);
  if (port < 1 || port > 65535) throw new RangeError(`address ${JSON.stringify(addr)}: port out of range`);
  return { host, port };
}

function tokenBytes(token: string | Uint8Array | undefined): Uint8Array {
  const given = token ?? process.env["CTXSTORE_TOKEN"];
  if (given === undefined) return new Uint8Array(0);
  const bytes = typeof given === "string" ? utf8.encode(given.trim()) : given;
  if (bytes.length > p.TOKEN_BYTES_MAX) throw new RangeError(`a token is at most ${p.TOKEN_BYTES_MAX} bytes`);
  return bytes;
}

function checkTimeout(value: number | undefined, fallback: number, what: string): number {
  const ms = value ?? fallback;
  if (!Number.isFinite(ms) || ms <= 0) throw new RangeError(`${what} must be a positive finite number of milliseconds, not ${value}`);
  return ms;
}

function u64(value: number, what: string): number {
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`${what} must be a non-negative integer, not ${value}`);
  return value;
}

function u32(value: number, what: string): number {
  if (!Number.isInteger(value) || value < 0 || value > p.U32_MAX) throw new RangeError(`${what} must be an integer in 0..2^32, not ${value}`);
  return value;
}

function typeTagOf(value: number | bigint | undefined): bigint {
  const tag = value === undefined ? 0n : typeof value === "bigint" ? value : BigInt(u64(value, "typeTag"));
  if (tag < 0n || tag > p.U64_MAX) throw new RangeError(`typeTag must be a u64, not ${value}`);
  return tag;
}

function contextRef(context: ContextLike, what = "context"): p.ContextRef {
  if (typeof context === "string") {
    if (context.length === 0) throw new RangeError(`${what}: a context name must not be empty`);
    return context;
  }
  if (typeof context !== "number") throw new TypeError(`${what} is a ContextID (number) or a name (string), not ${String(context)}`);
  return u64(context, what);
}

/** A key-value TTL as the wire carries it: undefined is none; else whole milliseconds, 1 ms to
 * 100 years. */
function ttlOf(ttlMs: number | undefined): number | undefined {
  if (ttlMs === undefined) return undefined;
  if (!Number.isInteger(ttlMs) || ttlMs < 1 || ttlMs > p.TTL_MS_MAX) {
    throw new RangeError(`ttlMs is a whole number of milliseconds, 1 to ${p.TTL_MS_MAX} (100 years); got ${ttlMs}`);
  }
  return ttlMs;
}

function keyBytes(key: KeyLike): Uint8Array {
  if (typeof key === "string") return utf8.encode(key);
  if (key instanceof Uint8Array) return key;
  throw new TypeError(`a key is a Uint8Array or a string, not ${String(key)}`);
}

function turnKey(key: KeyLike | undefined): Uint8Array {
  if (key === undefined) return new Uint8Array(0);
  const bytes = keyBytes(key);
  if (bytes.length === 0) throw new RangeError("a turn key must not be empty (leave it out for none)");
  if (bytes.length > p.TINY_BYTES_MAX) {
    throw new RangeError(`a turn key of ${bytes.length} bytes: the protocol carries at most ${p.TINY_BYTES_MAX} (the server allows 64)`);
  }
  return bytes;
}

function pairs(record: Record<string, string> | undefined, what: string): Array<[string, string]> {
  if (record === undefined) return [];
  return Object.entries(record).map(([key, value]) => {
    if (typeof value !== "string") throw new TypeError(`${what} ${key} must be a string, not ${String(value)}`);
    return [key, value];
  });
}

function readFlags(payloads: boolean, acceptZstd: boolean): number {
  if (!payloads) return 0;
  return p.READ_WITH_PAYLOADS | (acceptZstd ? p.READ_ACCEPT_ZSTD : 0);
}

function turnOf(record: p.TurnRecord, payload?: Uint8Array): Turn {
  const turn: Turn = {
    turnId: record.turnId,
    parentTurnId: record.parentTurnId,
    contextId: record.contextId,
    depth: record.depth,
    codec: record.codec,
    typeTag: record.typeTag,
    payloadHash: record.payloadHash,
    payloadLen: record.payloadLen,
    flags: record.flags,
    createdAtUnixMs: record.createdAtUnixMs,
  };
  if (payload !== undefined) turn.payload = payload;
  return turn;
}

function turnInfoOf(record: p.TurnRecord, extras: p.ExtrasRecord, payload?: Uint8Array): TurnInfo {
  const info: TurnInfo = { ...turnOf(record, payload), labels: Object.fromEntries(extras.labels), links: extras.links };
  if (extras.key.length > 0) info.key = extras.key;
  return info;
}

function contextInfoOf(record: p.ContextInfoRecord): ContextInfo {
  return {
    contextId: record.head.contextId,
    headTurnId: record.head.headTurnId,
    headDepth: record.head.headDepth,
    createdAtUnixMs: record.createdAtUnixMs,
    updatedAtUnixMs: record.updatedAtUnixMs,
    name: record.name,
    tags: Object.fromEntries(record.tags),
  };
}

function retentionOf(answer: p.RetentionAnswer): Retention {
  return { info: contextInfoOf(answer.info), floorDepth: answer.floorDepth, ttlMs: answer.ttlMs === 0 ? undefined : answer.ttlMs };
}

function checkName(info: ContextInfo, name: string | undefined, what: string): ContextInfo {
  if (name !== undefined && info.name !== name) {
    throw new ProtocolError(`${what} for the name ${JSON.stringify(name)} answered context ${info.contextId} named ${JSON.stringify(info.name)}`);
  }
  return info;
}

function headOf(record: p.ContextHeadRecord): ContextHead {
  return { contextId: record.contextId, headTurnId: record.headTurnId, headDepth: record.headDepth };
}

function withOverlay<T extends Turn>(turn: T, state: p.OverlayRecord): T {
  if (state.redacted && (turn.payloadLen !== 0 || !equalBytes(turn.payloadHash, EMPTY_HASH))) {
    throw new ProtocolError(`turn ${turn.turnId} is redacted but its TURN names ${turn.payloadLen} bytes`);
  }
  return { ...turn, redacted: state.redacted, overlaySeq: state.overlaySeq };
}

/** A turn spec as sent, with what its answer is checked against. */
interface SentTurn {
  record: p.TurnSpecRecord;
  digest: Uint8Array;
  /** undefined for a payload by hash (its length is the stored blob's). */
  payloadLen: number | undefined;
}

export class Client {
  private host: string;
  private port: number;
  /** Every address given; with several the client follows the primary among them. */
  private readonly addrList: Array<{ host: string; port: number }>;
  private readonly failoverTimeoutMs: number;
  private readonly idempotency: Idempotency;
  private readonly token: Uint8Array;
  private readonly timeoutMs: number;
  private readonly connectTimeoutMs: number;
  private readonly clientName: string;
  readonly acceptZstd: boolean;
  private readonly maxInFlight: number;
  private readonly followFramesQueuedMax: number;
  private readonly maxResponseBytes: number;
  private readonly verifyPayloads: VerifyPayloads;
  private readonly chunking: ChunkingOptions | false;
  private conn: Connection | undefined;
  private connecting: Promise<Connection> | undefined;
  private closed = false;
  /** Bytes written on connections this client has replaced. */
  private bytesSentBefore = 0;
  private bytesReceivedBefore = 0;
  /** Set once a version-2 server answered PUT_CHUNKED with UNKNOWN_MESSAGE. */
  private noPutChunked = false;
  /** Chunk lists of payloads stored as chunks lately, by first chunk's hash (hex). */
  private readonly recentChunked = new Map<string, { hash: Uint8Array; chunks: p.ChunkRecord[] }>();

  /** A client for `addr` (default CTXSTORE_ADDR, else 127.0.0.1:7411); no I/O until the first
   * call (or use {@link Client.connect}). */
  constructor(addr?: string | readonly string[], options: ClientOptions = {}) {
    this.addrList = parseAddrs(addr ?? envAddr());
    const first = this.addrList[0] ?? parseAddr(DEFAULT_ADDR);
    this.host = first.host;
    this.port = first.port;
    this.failoverTimeoutMs = checkTimeout(options.failoverTimeoutMs, FAILOVER_TIMEOUT_MS, "failoverTimeoutMs");
    const idempotency = options.idempotency ?? "off";
    if (idempotency !== "off" && idempotency !== "auto") throw new RangeError(`idempotency is "off" or "auto", not ${String(idempotency)}`);
    this.idempotency = idempotency;
    this.token = tokenBytes(options.token);
    this.timeoutMs = checkTimeout(options.timeoutMs, DEFAULT_TIMEOUT_MS, "timeoutMs");
    this.connectTimeoutMs = checkTimeout(options.connectTimeoutMs, DEFAULT_CONNECT_TIMEOUT_MS, "connectTimeoutMs");
    this.clientName = options.clientName ?? DEFAULT_CLIENT_NAME;
    if (utf8.encode(this.clientName).length > p.NAME_BYTES_MAX) throw new RangeError(`clientName is at most ${p.NAME_BYTES_MAX} bytes of UTF-8`);
    this.acceptZstd = options.acceptZstd ?? false;
    this.maxInFlight = Math.max(1, options.maxInFlight ?? 1024);
    const queued = options.followFramesQueuedMax ?? DEFAULT_FOLLOW_FRAMES_QUEUED_MAX;
    if (!Number.isInteger(queued) || queued < 1) throw new RangeError(`followFramesQueuedMax is a whole number of frames, at least 1, not ${queued}`);
    this.followFramesQueuedMax = queued;
    this.maxResponseBytes = Math.min(options.maxResponseBytes ?? DEFAULT_FRAME_BYTES_MAX, p.FRAME_BYTES_LIMIT);
    const verify = options.verifyPayloads ?? "when_remote";
    if (verify !== "when_remote" && verify !== "always") throw new RangeError(`verifyPayloads is "when_remote" or "always", not ${String(verify)}`);
    this.verifyPayloads = verify;
    this.chunking = options.chunking ?? DEFAULT_CHUNKING;
  }

  /** A client, connected (HELLO done) before it is returned. */
  static async connect(addr?: string | readonly string[], options: ClientOptions = {}): Promise<Client> {
    const client = new Client(addr, options);
    await client.serverInfo();
    return client;
  }

  /** The server's address as HOST:PORT. */
  get addr(): string {
    return this.host.includes(":") ? `[${this.host}]:${this.port}` : `${this.host}:${this.port}`;
  }

  /** Every address given, as HOST:PORT. */
  get addrs(): string[] {
    return this.addrList.map(({ host, port }) => (host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`));
  }

  /** Whether the client was given several addresses and follows the primary among them
   * (decision 0031 §11). */
  get followsPrimary(): boolean {
    return this.addrList.length > 1;
  }

  /** The settings a framework adapter passes on when it makes a client of its own. */
  get options(): ClientOptions {
    return {
      token: this.token,
      timeoutMs: this.timeoutMs,
      connectTimeoutMs: this.connectTimeoutMs,
      clientName: this.clientName,
      acceptZstd: this.acceptZstd,
      maxInFlight: this.maxInFlight,
      followFramesQueuedMax: this.followFramesQueuedMax,
      maxResponseBytes: this.maxResponseBytes,
      verifyPayloads: this.verifyPayloads,
      chunking: this.chunking,
      failoverTimeoutMs: this.failoverTimeoutMs,
      idempotency: this.idempotency,
    };
  }

  /** Bytes this client has written to its connections so far (frames and HELLOs): what the
   * chunked append saves shows here. */
  get bytesSent(): number {
    return this.bytesSentBefore + (this.conn?.bytesSent ?? 0);
  }

  /** Bytes this client has read from its connections so far. */
  get bytesReceived(): number {
    return this.bytesReceivedBefore + (this.conn?.bytesReceived ?? 0);
  }

  /** True while the client holds a live connection. */
  get connected(): boolean {
    return this.conn?.alive ?? false;
  }

  /** Whether RAW payloads read on the current connection are hashed (decision 0015); true
   * before the first connection. */
  get verifiesRawPayloads(): boolean {
    return this.conn?.hashesRaw ?? true;
  }

  /** Closes the connection; calls in flight and later calls fail with ClientClosed. */
  async close(): Promise<void> {
    this.closed = true;
    const conn = this.conn;
    this.conn = undefined;
    conn?.close(new ClientClosed());
    const connecting = this.connecting;
    if (connecting !== undefined) {
      try {
        (await connecting).close(new ClientClosed());
      } catch {
        // the connect attempt failed: nothing to close
      }
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private deadline(options: CallOptions | undefined): number {
    if (this.closed) throw new ClientClosed();
    return Date.now() + checkTimeout(options?.timeoutMs, this.timeoutMs, "timeoutMs");
  }

  private async connection(): Promise<Connection> {
    if (this.closed) throw new ClientClosed();
    const conn = this.conn;
    if (conn !== undefined && conn.alive) return conn;
    if (this.connecting === undefined) {
      const attempt = this.followsPrimary ? this.findPrimary() : this.open(this.host, this.port);
      this.connecting = attempt;
      attempt.then(
        (opened) => {
          if (this.connecting === attempt) this.connecting = undefined;
          if (this.conn !== undefined) {
            this.bytesSentBefore += this.conn.bytesSent;
            this.bytesReceivedBefore += this.conn.bytesReceived;
          }
          if (this.closed) opened.close(new ClientClosed());
          else this.conn = opened;
        },
        () => {
          if (this.connecting === attempt) this.connecting = undefined;
        },
      );
    }
    const opened = await this.connecting;
    if (this.closed) throw new ClientClosed();
    return opened;
  }

  private open(host: string, port: number): Promise<Connection> {
    return Connection.open({
      host,
      port,
      token: this.token,
      versions: p.SUPPORTED_VERSIONS,
      clientName: this.clientName,
      connectTimeoutMs: this.connectTimeoutMs,
      frameBytesMax: this.maxResponseBytes,
      maxInFlight: this.maxInFlight,
      verifyPayloads: this.verifyPayloads,
      followFramesQueuedMax: this.followFramesQueuedMax,
    });
  }

  /** A connection to the listed address that takes writes with the highest epoch (every
   * address asked at once: ROLE, or REPLICATION_STATS on version 3), looked for until
   * `failoverTimeoutMs` (then NoPrimaryError). No other address is ever used. */
  private async findPrimary(): Promise<Connection> {
    const until = Date.now() + this.failoverTimeoutMs;
    let backoff = BACKOFF_MIN_MS;
    for (;;) {
      const answers = await Promise.all(this.addrList.map((where) => this.probe(where.host, where.port)));
      let best: { epoch: number; conn: Connection; index: number } | undefined;
      const said: string[] = [];
      for (const [index, answer] of answers.entries()) {
        if (typeof answer === "string") {
          said.push(answer);
        } else if (answer.accepts && (best === undefined || answer.epoch > best.epoch)) {
          best?.conn.close(new ConnectionLost("a newer primary was found"));
          best = { epoch: answer.epoch, conn: answer.conn, index };
        } else {
          answer.conn.close(new ConnectionLost("not the primary"));
          said.push(`${this.addrs[index] ?? "?"}: takes no writes (epoch ${answer.epoch})`);
        }
      }
      if (best !== undefined) {
        const where = this.addrList[best.index];
        if (where !== undefined) {
          this.host = where.host;
          this.port = where.port;
        }
        return best.conn;
      }
      const left = until - Date.now();
      if (left <= 0) throw new NoPrimaryError(`no primary among ${this.addrs.join(",")} within ${this.failoverTimeoutMs} ms: ${said.join("; ")}`);
      await sleep(Math.min(backoff, left));
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
    }
  }

  /** A connection to one address, whether it takes writes and its epoch; else why not. */
  private async probe(host: string, port: number): Promise<{ accepts: boolean; epoch: number; conn: Connection } | string> {
    const where = host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
    let conn: Connection;
    try {
      conn = await this.open(host, port);
    } catch (error) {
      return `${where}: ${error instanceof Error ? error.message : String(error)}`;
    }
    const deadline = Date.now() + this.connectTimeoutMs;
    try {
      if (conn.info.version >= 4) {
        const role = await conn.call(p.role(), deadline);
        return { accepts: role.acceptsWrites, epoch: role.epoch, conn };
      }
      if (conn.info.version >= 3) {
        const stats = await conn.call(p.replicationStats(), deadline);
        const accepts = stats.role === "off" || (stats.role === "primary" && stats.state !== "fenced");
        return { accepts, epoch: stats.epoch, conn };
      }
      return { accepts: true, epoch: 0, conn };
    } catch (error) {
      conn.close(new ConnectionLost("asking what it is failed"));
      return `${where}: ${error instanceof Error ? error.message : String(error)}`;
    }
  }

  /** One request; its answer and whether the connection it came on hashes RAW payloads. */
  private async send<R>(request: p.Request<R>, options?: CallOptions): Promise<{ answer: R; hashesRaw: boolean }> {
    if (this.followsPrimary) return this.sendFollowing(request, options);
    const deadline = this.deadline(options);
    const conn = await this.connection();
    const answer = await conn.call(request, deadline);
    return { answer, hashesRaw: conn.hashesRaw };
  }

  /** `send` on the primary of several addresses: after an answer that says the primary went,
   * sent again on the new one when that is safe, else OutcomeUnknownError (decision 0031 §11). */
  private async sendFollowing<R>(request: p.Request<R>, options?: CallOptions): Promise<{ answer: R; hashesRaw: boolean }> {
    const until = Date.now() + this.failoverTimeoutMs;
    const safe = resendsSafely(request);
    let backoff = BACKOFF_MIN_MS;
    for (let tries = 0; ; tries++) {
      const deadline = this.deadline(options);
      const conn = await this.connection();
      try {
        const answer = await conn.call(request, deadline);
        return { answer, hashesRaw: conn.hashesRaw };
      } catch (error) {
        const trouble = failoverTrouble(error);
        if (trouble === undefined) throw error;
        if (trouble === "unknown" && !safe) {
          const reason = error instanceof Error ? error.message : String(error);
          throw new OutcomeUnknownError(`${request.name} may or may not have been written (${reason})`, error);
        }
        if (Date.now() >= until) throw error;
        conn.close(new ConnectionLost("looking for the primary"));
      }
      if (tries > 0) {
        await sleep(backoff);
        backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
      }
    }
  }

  /** Whether appends get keys made here: `idempotency: "auto"`, on a connection that carries
   * keys (version 2; no round trip once connected). */
  private async autoKeys(): Promise<boolean> {
    return this.idempotency === "auto" && (await this.serverInfo()).version >= KEYS_SINCE_VERSION;
  }

  private async run<R>(request: p.Request<R>, options?: CallOptions): Promise<R> {
    return (await this.send(request, options)).answer;
  }

  /** What HELLO told (connects if needed). */
  async serverInfo(): Promise<ServerInfo> {
    return (await this.connection()).info;
  }

  /** Any request of the protocol module; its decoded answer (an ERROR throws its error). */
  async request<R>(request: p.Request<R>, options?: CallOptions): Promise<R> {
    return this.run(request, options);
  }

  // -- version 1 ------------------------------------------------------------------------

  /** PING: a round trip; the PONG must echo the nonce. */
  async ping(options?: CallOptions): Promise<void> {
    const nonce = BigInt.asUintN(64, BigInt(Date.now()) * 2654435761n + BigInt(Math.floor(Math.random() * 2 ** 32)));
    const echoed = await this.run(p.ping(nonce), options);
    if (echoed !== nonce) throw new ProtocolError("PONG does not echo the PING's nonce");
  }

  /** A new context: empty, or with its head at `baseTurnId` (copies nothing). */
  async createContext(baseTurnId = 0, options?: CallOptions): Promise<ContextHead> {
    return headOf(await this.run(p.ctxCreate(u64(baseTurnId, "baseTurnId")), options));
  }

  /** A new context whose head is `turnId` (O(1)). */
  async fork(turnId: number, options?: CallOptions): Promise<ContextHead> {
    return headOf(await this.run(p.ctxFork(u64(turnId, "turnId")), options));
  }

  async head(context: ContextLike, options?: CallOptions): Promise<ContextHead> {
    return headOf(await this.run(p.getHead(contextRef(context)), options));
  }

  /**
   * Appends a turn; durable when it resolves. `expectedHead`: compare-and-set on the head (0:
   * the context must be empty); a moved head is Conflict with `actualHead`.
   *
   * A payload larger than the chunking threshold (16 KiB), on a version-2 connection, is
   * stored as chunks first, sending only those the server lacks (PUT_CHUNKED), then appended
   * by hash: three round trips instead of one, and the bytes the payload grew by instead of
   * all of it. `deduped` then says whether the payload was stored before this call.
   *
   * `durability` (version 4): `remote` resolves once the object store holds the turn too
   * (the chunks go as they are; the flag is on the append by hash, whose cut holds them),
   * `local` once it is on the server's disk; see {@link Durability}.
   */
  async append(
    context: ContextLike,
    payload: Uint8Array,
    options: WriteOptions & { typeTag?: number | bigint; codec?: number; expectedHead?: number } = {},
  ): Promise<Appended> {
    const target = contextRef(context);
    const typeTag = typeTagOf(options.typeTag);
    const codec = u32(options.codec ?? 0, "codec");
    const expected = options.expectedHead === undefined ? undefined : u64(options.expectedHead, "expectedHead");
    if (!(payload instanceof Uint8Array)) throw new TypeError("a payload is a Uint8Array");
    if (payload.length > p.U32_MAX) throw new RangeError("a payload is at most 4 GiB - 1 bytes");
    if (await this.autoKeys()) {
      // `idempotency: "auto"`: one turn with a key of its own, by APPEND_TURNS.
      const [appended] = await this.appendTurns(target, [{ payload, typeTag, codec }], { ...options, expectedHead: expected });
      return appended!;
    }
    const stored = await this.storeChunked(payload, options);
    if (stored !== undefined) {
      const appended = await this.appendByHash(target, stored.payloadHash, { ...options, typeTag, codec, expectedHead: expected });
      // The server answers an append by hash deduped (the blob was there): say instead
      // whether it was there before this call.
      return { ...appended, deduped: stored.alreadyStored };
    }
    const digest = blobHash(payload);
    const answer = await this.run(durable(p.appendTurn(target, expected, typeTag, codec, payload), options.durability), options);
    const record = answer.turn;
    if (!equalBytes(record.payloadHash, digest) || record.payloadLen !== payload.length) {
      throw new IntegrityError(
        `appended turn ${record.turnId} records payload ${toHex(record.payloadHash)} (${record.payloadLen} bytes), sent ${toHex(digest)} (${payload.length} bytes)`,
      );
    }
    if (typeof target === "number" && record.contextId !== target) {
      throw new ProtocolError(`appended turn ${record.turnId} is in context ${record.contextId}, not ${target}`);
    }
    return { turn: turnOf(record), deduped: answer.deduped, existing: false };
  }

  /** Appends a turn whose payload is a stored blob, by its hash (no upload; NotFound if the
   * server lacks it); `durability` as `append`'s. */
  async appendByHash(
    context: ContextLike,
    payloadHash: HashLike,
    options: WriteOptions & { typeTag?: number | bigint; codec?: number; expectedHead?: number } = {},
  ): Promise<Appended> {
    const digest = parseHash(payloadHash);
    const expected = options.expectedHead === undefined ? undefined : u64(options.expectedHead, "expectedHead");
    if (await this.autoKeys()) {
      const turn = { payloadHash: digest, typeTag: typeTagOf(options.typeTag), codec: u32(options.codec ?? 0, "codec") };
      const [appended] = await this.appendTurns(context, [turn], { ...options, expectedHead: expected });
      return appended!;
    }
    const answer = await this.run(
      durable(p.appendTurnByHash(contextRef(context), expected, typeTagOf(options.typeTag), u32(options.codec ?? 0, "codec"), digest), options.durability),
      options,
    );
    if (!equalBytes(answer.turn.payloadHash, digest)) {
      throw new IntegrityError(`appended turn ${answer.turn.turnId} records payload ${toHex(answer.turn.payloadHash)}, asked for ${toHex(digest)}`);
    }
    return { turn: turnOf(answer.turn), deduped: answer.deduped, existing: false };
  }

  async getTurn(turnId: number, options: CallOptions & { asOf?: number } = {}): Promise<Turn> {
    const read = p.getTurn(u64(turnId, "turnId"));
    if (options.asOf === undefined) return turnOf(await this.run(read, options));
    const { answer, overlays } = await this.run(p.asOf(read, u64(options.asOf, "asOf"), () => 1), options);
    return withOverlay(turnOf(answer), overlays[0]!);
  }

  private async pageOf(request: p.Request<p.TurnsAnswer>, options: ReadOptions): Promise<Page> {
    const payloads = options.payloads ?? false;
    if (options.asOf === undefined) {
      const { answer, hashesRaw } = await this.send(request, options);
      return this.finishPage(answer, payloads, hashesRaw);
    }
    const { answer, hashesRaw } = await this.send(p.asOf(request, u64(options.asOf, "asOf"), (a) => a.entries.length), options);
    const page = this.finishPage(answer.answer, payloads, hashesRaw);
    page.turns = page.turns.map((turn, i) => withOverlay(turn, answer.overlays[i]!));
    return page;
  }

  private finishPage(answer: p.TurnsAnswer, payloads: boolean, hashesRaw: boolean): Page {
    const turns = answer.entries.map((entry) => turnOf(entry.turn, this.entryPayload(entry, payloads, hashesRaw)));
    return { turns, nextBefore: answer.nextBefore, tipDepth: answer.tipDepth };
  }

  private entryPayload(entry: { turn: p.TurnRecord; payload: p.PayloadRecord }, payloads: boolean, hashesRaw: boolean): Uint8Array | undefined {
    const record = entry.turn;
    if (payloads) {
      return payloadBytes(entry.payload, record.payloadHash, record.payloadLen, this.acceptZstd, hashesRaw, `turn ${record.turnId}`);
    }
    if (entry.payload.encoding !== p.PayloadEncoding.ABSENT) {
      throw new ProtocolError(`turn ${record.turnId}: a payload was sent though none was requested`);
    }
    return undefined;
  }

  /** GET_LAST: the `limit` newest turns of the context, oldest first. */
  async last(context: ContextLike, limit: number, options: ReadOptions = {}): Promise<Page> {
    return this.pageOf(p.getLast(contextRef(context), u32(limit, "limit"), readFlags(options.payloads ?? false, this.acceptZstd)), options);
  }

  /** GET_BEFORE: the `limit` turns older than `beforeTurnId` (a previous page's nextBefore). */
  async before(context: ContextLike, beforeTurnId: number, limit: number, options: ReadOptions = {}): Promise<Page> {
    return this.pageOf(
      p.getBefore(contextRef(context), u64(beforeTurnId, "beforeTurnId"), u32(limit, "limit"), readFlags(options.payloads ?? false, this.acceptZstd)),
      options,
    );
  }

  /** GET_RANGE_BY_DEPTH: the turns with depth in fromDepth .. fromDepth + limit. */
  async rangeByDepth(context: ContextLike, fromDepth: number, limit: number, options: ReadOptions = {}): Promise<Page> {
    return this.pageOf(
      p.getRangeByDepth(contextRef(context), u32(fromDepth, "fromDepth"), u32(limit, "limit"), readFlags(options.payloads ?? false, this.acceptZstd)),
      options,
    );
  }

  /** GET_CHAIN: a window of the chain root → `turnId`. */
  async chain(turnId: number, fromDepth: number, limit: number, options: ReadOptions = {}): Promise<Page> {
    return this.pageOf(
      p.getChain(u64(turnId, "turnId"), u32(fromDepth, "fromDepth"), u32(limit, "limit"), readFlags(options.payloads ?? false, this.acceptZstd)),
      options,
    );
  }

  /** The whole chain root → `turnId` (from the floor up, for a pruned chain), in GET_CHAIN
   * pages of the server's `readTurnsMax`. */
  async replay(turnId: number, options: ReadOptions & { pageSize?: number } = {}): Promise<Turn[]> {
    const size = options.pageSize ?? ((await this.serverInfo()).readTurnsMax || 64);
    const turns: Turn[] = [];
    let fromDepth = 0;
    for (;;) {
      const page = await this.chain(turnId, fromDepth, size, options);
      if (page.turns.length === 0) {
        if (turns.length === 0 && fromDepth === 0) return turns;
        throw new ProtocolError(`GET_CHAIN of turn ${turnId} returned an empty page before its end`);
      }
      const first = page.turns[0]!.depth;
      const lastDepth = page.turns[page.turns.length - 1]!.depth;
      // A pruned chain starts at its floor: the first page may begin above depth 0.
      if ((turns.length > 0 && first !== fromDepth) || first < fromDepth || lastDepth < first) {
        throw new ProtocolError(`GET_CHAIN of turn ${turnId} from depth ${fromDepth} returned depths ${first}..${lastDepth}`);
      }
      turns.push(...page.turns);
      if (lastDepth >= page.tipDepth) return turns;
      fromDepth = lastDepth + 1;
    }
  }

  /** GET_BLOB: a payload by hash, checked against it. */
  async getBlob(payloadHash: HashLike, options?: CallOptions): Promise<Uint8Array> {
    const digest = parseHash(payloadHash);
    const { answer, hashesRaw } = await this.send(p.getBlob(digest, this.acceptZstd ? p.READ_ACCEPT_ZSTD : 0), options);
    return payloadBytes(answer, digest, undefined, this.acceptZstd, hashesRaw, `blob ${toHex(digest)}`);
  }

  /** HAS_BLOBS, split at the server's `hasBlobsMax` into pipelined requests. */
  async hasBlobs(hashes: readonly HashLike[], options?: CallOptions): Promise<boolean[]> {
    const parsed = hashes.map(parseHash);
    if (parsed.length === 0) return [];
    const size = Math.max(1, (await this.serverInfo()).hasBlobsMax);
    const groups: Uint8Array[][] = [];
    for (let i = 0; i < parsed.length; i += size) groups.push(parsed.slice(i, i + size));
    const answers = await Promise.all(
      groups.map(async (group) => {
        const present = await this.run(p.hasBlobs(group), options);
        if (present.length !== group.length) throw new ProtocolError(`HAS_BLOBS of ${group.length} hashes was answered with ${present.length} flags`);
        return present;
      }),
    );
    return answers.flat();
  }

  /** STATS_EX on a version-2 connection (the garbage collector's fields too), else STATS. */
  async stats(options?: CallOptions): Promise<Stats> {
    if ((await this.serverInfo()).version >= 2) {
      try {
        const answer = await this.run(p.statsEx(), options);
        return {
          ...answer.stats,
          liveBytes: answer.liveBytes,
          deadBytes: answer.deadBytes,
          gcRuns: answer.gcRuns,
          bytesReclaimedTotal: answer.bytesReclaimedTotal,
        };
      } catch (error) {
        if (!(error instanceof UnknownMessage)) throw error;
      }
    }
    return { ...(await this.run(p.stats(), options)) };
  }

  /** REPLICATION_STATS (protocol version 3, issue 31): this server's side of its replica —
   * role, state and why, target, epoch, generation, what shipped (or was applied) and when, the
   * lag, the backlog, failures by kind. A server that does not replicate says "off". */
  async replicationStats(options?: CallOptions): Promise<ReplicationStats> {
    return this.run(p.replicationStats(), options);
  }

  /** ROLE (protocol version 4, decision 0031): what this server is in its replica's failover
   * now — its role ("off", "primary", "standby", "fenced", ...), whether it takes writes, when
   * it acknowledges a write by default, the epoch, and the primary's address when it knows it.
   * NotSupported on a server older than version 4 (ask `replicationStats` there). */
  async role(options?: CallOptions): Promise<Role> {
    return this.run(p.role(), options);
  }

  /** TENANT_LIST (protocol version 5, decision 0032 §8): every tenant of the server, in name
   * order — its id, whether the tenants file names it, its rights, its usage (contexts, open
   * streams, stored bytes, connections), its quotas (undefined: no limit) and how often they
   * refused it. A tenant's token is answered its own entry only (its usage). Reads every page
   * (`pageSize` tenants each, 1 to 1000; `timeoutMs` per page). A server without a tenants
   * file has none. NotSupported on a server older than version 5. */
  async tenants(options: CallOptions & { pageSize?: number } = {}): Promise<Tenant[]> {
    const limit = options.pageSize ?? p.TENANT_LIST_LIMIT;
    if (!Number.isInteger(limit) || limit < 1 || limit > p.TENANT_LIST_LIMIT) {
      throw new RangeError(`pageSize is 1 to ${p.TENANT_LIST_LIMIT}, not ${limit}`);
    }
    const listed: Tenant[] = [];
    let after = "";
    for (;;) {
      const page = await this.run(p.tenantList(after, limit), options);
      checkTenantPage(page, after, limit);
      listed.push(...page.tenants.map(tenantOf));
      if (page.next.length === 0) return listed;
      after = page.next;
    }
  }

  /** TENANT_DELETE (protocol version 5, decision 0032 §6): deletes the tenant `name`, erasure by
   * forgetting its keys. The store destroys the tenant's keys (when it seals payloads) and
   * deletes every context of it; from then on its tokens are Unauthorized (open connections
   * included) and its name and id are never given again; the next collection gives its bytes
   * back. The operator's token only (a tenant's: Unauthorized). Idempotent: a tenant deleted
   * before answers as the first time did. A name the store never registered is
   * InvalidArgument; a standby answers NotPrimary; a server that replicates and whose object
   * store did not confirm the deletion in time Unconfirmed (deleted here; call again to wait
   * again). RangeError for an empty name or one over 64 bytes; NotSupported on a server older
   * than version 5. */
  async deleteTenant(name: string, options: CallOptions = {}): Promise<TenantDeleted> {
    const deleted = await this.run(p.tenantDelete(name), options);
    return {
      tenantId: deleted.tenantId,
      keysDestroyed: (deleted.flags & p.TENANT_KEYS_DESTROYED) !== 0,
      replicaUpdated: (deleted.flags & p.TENANT_REPLICA_UPDATED) !== 0,
    };
  }

  /** TENANT_ROTATE_KEY (protocol version 5, decision 0032 §7): a new version of the data key of
   * the tenant `name` (`"operator"`: the operator's own), durable in the store's keyring before
   * the answer. The tenant's new payloads are sealed under it; what it stored before keeps the
   * version it was sealed under and reads as before (nothing is rewritten). The operator's
   * token only (a tenant's: Unauthorized). Not idempotent: each call makes another version, so
   * it is never sent again behind the caller's back when its outcome is unknown. A server that
   * seals nothing (no master key), a name never registered, a deleted tenant and a tenant at
   * its last version are InvalidArgument; a standby answers NotPrimary. RangeError for an empty
   * name or one over 64 bytes; NotSupported on a server older than version 5. */
  async rotateTenantKey(name: string, options: CallOptions = {}): Promise<TenantKeyRotated> {
    const rotated = await this.run(p.tenantRotateKey(name), options);
    return { tenantId: rotated.tenantId, keyVersion: rotated.keyVersion };
  }

  // -- version 2: contexts, tags, key-value --------------------------------------------

  /** CTX_OPEN: a new context, empty or forked at `baseTurnId`, optionally named and tagged;
   * with `getOrCreate` a taken name answers its context. */
  async openContext(
    name?: string,
    options: CallOptions & { tags?: Record<string, string>; baseTurnId?: number; getOrCreate?: boolean } = {},
  ): Promise<Opened> {
    if (name !== undefined && name.length === 0) throw new RangeError("a context name must not be empty (leave it out for no name)");
    const answer = await this.run(
      p.ctxOpen({
        baseTurnId: u64(options.baseTurnId ?? 0, "baseTurnId"),
        getOrCreate: options.getOrCreate ?? false,
        name,
        tags: pairs(options.tags, "tag"),
      }),
      options,
    );
    return { info: checkName(contextInfoOf(answer.info), name, "CTX_OPEN"), created: answer.created };
  }

  /** CTX_OPEN with CLONE: a copy of `source` (head, tags, key-value entries), O(its
   * metadata), named `name`. */
  async cloneContext(source: ContextLike, name: string, options: CallOptions & { tags?: Record<string, string> } = {}): Promise<ContextInfo> {
    if (name.length === 0) throw new RangeError("a clone needs a name");
    const answer = await this.run(
      p.ctxOpen({ baseTurnId: 0, getOrCreate: false, cloneFrom: contextRef(source, "source"), name, tags: pairs(options.tags, "tag") }),
      options,
    );
    if (!answer.created) throw new ProtocolError("CTX_OPEN (clone) without GET_OR_CREATE answered created = 0");
    return checkName(contextInfoOf(answer.info), name, "CTX_OPEN (clone)");
  }

  async contextInfo(context: ContextLike, options?: CallOptions): Promise<ContextInfo> {
    return contextInfoOf(await this.run(p.ctxShow(contextRef(context)), options));
  }

  /** CTX_DELETE: the context as it was just before. */
  async deleteContext(context: ContextLike, options?: CallOptions): Promise<Retention> {
    return retentionOf(await this.run(p.ctxDelete(contextRef(context)), options));
  }

  /** CTX_PRUNE: keep the newest `keep` (>= 1) depths reachable through the context. */
  async pruneContext(context: ContextLike, keep: number, options?: CallOptions): Promise<Retention> {
    return retentionOf(await this.run(p.ctxPrune(contextRef(context), u32(keep, "keep")), options));
  }

  /** CTX_TTL: sets the context's time to live (undefined clears it). 0 is refused: on the
   * wire it would mean "none" (decision 0011). */
  async setContextTtl(context: ContextLike, ttlMs: number | undefined, options?: CallOptions): Promise<Retention> {
    if (ttlMs === 0) throw new RangeError("ttlMs 0 would mean no time to live: pass undefined to clear it");
    return retentionOf(await this.run(p.ctxTtl(contextRef(context), true, ttlMs === undefined ? 0 : u64(ttlMs, "ttlMs")), options));
  }

  /** CTX_TTL without SET: the context's retention settings. */
  async contextRetention(context: ContextLike, options?: CallOptions): Promise<Retention> {
    return retentionOf(await this.run(p.ctxTtl(contextRef(context), false, 0), options));
  }

  /** BACKUP into `dir`, an absolute path on the server's host (default timeout 24 h). */
  async backup(dir: string, options: CallOptions = {}): Promise<BackupReport> {
    if (!dir.startsWith("/")) throw new RangeError(`a backup directory is an absolute path on the server's host, not ${JSON.stringify(dir)}`);
    const answer = await this.run(p.backup(dir), { timeoutMs: options.timeoutMs ?? 86_400_000 });
    return { ...answer };
  }

  /** GC: a garbage collection now (default timeout 1 h). */
  async gc(options: CallOptions = {}): Promise<GcReport> {
    return { ...(await this.run(p.gc(), { timeoutMs: options.timeoutMs ?? 3_600_000 })) };
  }

  /** PATCH_TURN: the turn reads `payload` from now on (an overlay). */
  async patchTurn(turnId: number, payload: Uint8Array, options?: CallOptions): Promise<Patched> {
    const digest = blobHash(payload);
    const answer = await this.run(p.patchTurn(u64(turnId, "turnId"), payload), options);
    if (answer.turnId !== turnId || !equalBytes(answer.payloadHash, digest) || answer.payloadLen !== payload.length) {
      throw new ProtocolError(`PATCH_TURN of turn ${turnId} was answered for turn ${answer.turnId} (${answer.payloadLen} bytes, ${toHex(answer.payloadHash)})`);
    }
    return { ...answer };
  }

  /** REDACT_TURN: the turn's payload is taken away in every view. */
  async redactTurn(turnId: number, options?: CallOptions): Promise<Redacted> {
    const answer = await this.run(p.redactTurn(u64(turnId, "turnId")), options);
    if (answer.turnId !== turnId) throw new ProtocolError(`REDACT_TURN of turn ${turnId} was answered for ${answer.turnId}`);
    return { ...answer };
  }

  /** PURGE_BLOB: redacts every turn naming the blob; reads of it by hash fail from now on. */
  async purgeBlob(payloadHash: HashLike, options?: CallOptions): Promise<Purged> {
    const digest = parseHash(payloadHash);
    const answer = await this.run(p.purgeBlob(digest), options);
    if (!equalBytes(answer.payloadHash, digest)) throw new ProtocolError(`PURGE_BLOB of ${toHex(digest)} was answered for ${toHex(answer.payloadHash)}`);
    return { ...answer };
  }

  /**
   * PUT_CHUNKED: stores the payload `payloadHash` made of `chunks` (hash and length, in
   * order), carrying the bytes of the chunks in `sent` (index → bytes); every other chunk must
   * be stored already. With `base`, the payload starts with the base's first `kept` chunks.
   * `append` does all this by itself for large payloads.
   */
  async putChunked(
    payloadHash: HashLike,
    chunks: ReadonlyArray<{ hash: HashLike; len: number }>,
    sent: ReadonlyMap<number, Uint8Array> | ReadonlyArray<readonly [number, Uint8Array]> = [],
    options: CallOptions & { base?: { hash: HashLike; kept: number } } = {},
  ): Promise<ChunkedStored> {
    const digest = parseHash(payloadHash);
    const records = chunks.map((c, i) => ({ hash: parseHash(c.hash), len: u32(c.len, `chunk ${i}'s length`) }));
    const given = new Map<number, Uint8Array>();
    const pairs: Array<readonly [number, Uint8Array]> = sent instanceof Map ? [...(sent as ReadonlyMap<number, Uint8Array>).entries()] : [...(sent as ReadonlyArray<readonly [number, Uint8Array]>)];
    for (const [index, data] of pairs) {
      if (given.has(index)) throw new RangeError(`chunk ${index} is sent twice`);
      if (index >= records.length) throw new RangeError(`sent index ${index} is past the ${records.length} chunks`);
      given.set(index, data);
    }
    const sentRecords = [...given.entries()].sort((a, b) => a[0] - b[0]).map(([index, data]) => ({ index, data }));
    const base = options.base === undefined ? undefined : { hash: parseHash(options.base.hash), kept: u32(options.base.kept, "base kept") };
    const answer = await this.run(p.putChunked(digest, records, sentRecords, base), options);
    const total = records.reduce((sum, c) => sum + c.len, 0);
    if (!equalBytes(answer.payloadHash, digest) || (base === undefined && answer.payloadLen !== total)) {
      throw new ProtocolError(`PUT_CHUNKED of ${toHex(digest)} (${total} bytes) was answered for ${toHex(answer.payloadHash)} (${answer.payloadLen} bytes)`);
    }
    return { ...answer };
  }

  /**
   * The automatic path of an append by value (issue 16), as the Rust client takes it: cut the
   * payload (FastCDC 2020, the engine's sizes), HAS_BLOBS of the payload's hash and of each
   * distinct chunk after the prefix it shares with the payload this client stored last that
   * starts alike (its base), then PUT_CHUNKED with the bytes of the chunks the server lacks
   * (once more with every chunk and no base if a chunk or the base was collected between).
   * undefined: the payload travels whole (version 1, chunking off, at or below the threshold,
   * too many chunks, over the frame limit, or a server without PUT_CHUNKED).
   */
  private async storeChunked(payload: Uint8Array, options?: CallOptions): Promise<ChunkedStored | undefined> {
    const chunking = this.chunking;
    if (chunking === false || this.noPutChunked || payload.length <= chunking.thresholdBytes) return undefined;
    const info = await this.serverInfo();
    if (info.version < 2) return undefined;
    const cuts = cut(payload, chunking);
    if (cuts.length === 0 || cuts.length > p.CHUNKS_PER_PAYLOAD_MAX) return undefined;
    const pieces = cuts.map((c) => {
      const bytes = payload.subarray(c.offset, c.offset + c.length);
      return { record: { hash: blobHash(bytes), len: c.length }, bytes };
    });
    const payloadHash = blobHash(payload);
    const base = this.recentBase(pieces.map((piece) => piece.record));
    const kept = base?.kept ?? 0;
    const asked: Uint8Array[] = [payloadHash];
    const distinct = new Set<string>();
    for (const piece of pieces.slice(kept)) {
      const hex = toHex(piece.record.hash);
      if (!distinct.has(hex)) {
        distinct.add(hex);
        asked.push(piece.record.hash);
      }
    }
    const present = await this.hasBlobs(asked, options);
    if (present[0] === true) return { payloadHash, payloadLen: payload.length, alreadyStored: true };
    const stored = new Set<string>();
    asked.forEach((hash, i) => {
      if (present[i] === true) stored.add(toHex(hash));
    });
    const put = (from: number, withBase: typeof base, have: Set<string>): Promise<ChunkedStored | undefined> => {
      const rest = pieces.slice(from);
      const sent = rest.flatMap((piece, index) => (have.has(toHex(piece.record.hash)) ? [] : [{ index, data: piece.bytes }]));
      let bodyBytes = 32 + 36 + 4 + rest.length * p.CHUNK_ENTRY_BYTES + 4;
      for (const s of sent) bodyBytes += 8 + s.data.length;
      if (bodyBytes > info.frameBytesMax) return Promise.resolve(undefined);
      return this.run(p.putChunked(payloadHash, rest.map((piece) => piece.record), sent, withBase), options).then((answer) => {
        if (!equalBytes(answer.payloadHash, payloadHash) || answer.payloadLen !== payload.length) {
          throw new ProtocolError(`PUT_CHUNKED of ${toHex(payloadHash)} (${payload.length} bytes) was answered for ${toHex(answer.payloadHash)} (${answer.payloadLen} bytes)`);
        }
        return { ...answer };
      });
    };
    let outcome: ChunkedStored | undefined;
    try {
      try {
        outcome = await put(kept, base, stored);
      } catch (error) {
        if (!(error instanceof NotFound)) throw error;
        // A chunk or the base collected between HAS_BLOBS and the put: all of it again.
        outcome = await put(0, undefined, new Set());
      }
    } catch (error) {
      if (error instanceof UnknownMessage) {
        this.noPutChunked = true;
        return undefined;
      }
      throw error;
    }
    if (outcome !== undefined) this.rememberChunked(payloadHash, pieces.map((piece) => piece.record));
    return outcome;
  }

  private recentBase(records: p.ChunkRecord[]): p.ChunkBase | undefined {
    const first = records[0];
    if (first === undefined) return undefined;
    const recent = this.recentChunked.get(toHex(first.hash));
    if (recent === undefined) return undefined;
    let shared = 0;
    while (shared < recent.chunks.length && shared < records.length && equalBytes(recent.chunks[shared]!.hash, records[shared]!.hash) && recent.chunks[shared]!.len === records[shared]!.len) {
      shared++;
    }
    shared = Math.min(shared, records.length - 1); // a PUT_CHUNKED lists one chunk at least
    return shared > 0 ? { hash: recent.hash, kept: shared } : undefined;
  }

  private rememberChunked(hash: Uint8Array, records: p.ChunkRecord[]): void {
    const first = records[0];
    if (first === undefined) return;
    if (this.recentChunked.size >= RECENT_CHUNKED_MAX) this.recentChunked.clear();
    this.recentChunked.set(toHex(first.hash), { hash, chunks: records });
  }

  /** CTX_TAG: sets and removes tags atomically (with `expectedHead`, only if the head is it). */
  async tagContext(
    context: ContextLike,
    set: Record<string, string> = {},
    remove: readonly string[] = [],
    options: CallOptions & { expectedHead?: number } = {},
  ): Promise<ContextInfo> {
    const setPairs = pairs(set, "tag");
    const expected = options.expectedHead === undefined ? undefined : u64(options.expectedHead, "expectedHead");
    const info = contextInfoOf(await this.run(p.ctxTag(contextRef(context), expected, setPairs, remove), options));
    const wrong = setPairs.filter(([k, v]) => !remove.includes(k) && info.tags[k] !== v).map(([k]) => k);
    wrong.push(...remove.filter((k) => !setPairs.some(([s]) => s === k) && k in info.tags));
    if (wrong.length > 0) {
      throw new ProtocolError(`CTX_TAG of context ${info.contextId} answered tags ${JSON.stringify(info.tags)}, which do not reflect the change of ${wrong.join(", ")}`);
    }
    return info;
  }

  /** CTX_NAME: names a context that has no name yet. */
  async nameContext(context: ContextLike, name: string, options?: CallOptions): Promise<ContextInfo> {
    return checkName(contextInfoOf(await this.run(p.ctxName(contextRef(context), name), options)), name, "CTX_NAME");
  }

  /** CTX_LIST: one page of the contexts matching every condition. */
  async listContexts(
    filter: { tags?: Record<string, string>; namePrefix?: string; updatedAfterUnixMs?: number; updatedBeforeUnixMs?: number } = {},
    options: CallOptions & { cursor?: number | string; limit?: number } = {},
  ): Promise<ContextPage> {
    if (filter.namePrefix !== undefined && filter.namePrefix.length === 0) throw new RangeError("namePrefix must not be empty (leave it out for any name)");
    for (const bound of [filter.updatedAfterUnixMs, filter.updatedBeforeUnixMs]) {
      if (bound !== undefined && u64(bound, "a time bound") === 0) throw new RangeError("a time bound of 0 would mean no bound: leave it out");
    }
    const limit = u32(options.limit ?? 1000, "limit");
    if (limit === 0) throw new RangeError("limit must be at least 1");
    if (typeof options.cursor === "string" && options.cursor.length === 0) throw new RangeError("a name cursor must not be empty");
    const answer = await this.run(
      p.ctxList({
        tags: pairs(filter.tags, "tag"),
        namePrefix: filter.namePrefix,
        updatedAfterUnixMs: filter.updatedAfterUnixMs,
        updatedBeforeUnixMs: filter.updatedBeforeUnixMs,
        cursor: options.cursor,
        limit,
      }),
      options,
    );
    if (answer.contexts.length > limit) throw new ProtocolError(`CTX_LIST with limit ${limit} answered ${answer.contexts.length} contexts`);
    if (answer.nextCursor !== undefined && answer.nextCursor === options.cursor) {
      throw new ProtocolError(`CTX_LIST after ${String(options.cursor)} answered the same cursor`);
    }
    return { contexts: answer.contexts.map(contextInfoOf), nextCursor: answer.nextCursor };
  }

  /** Every matching context, following the pages' cursors. */
  async *iterContexts(
    filter: { tags?: Record<string, string>; namePrefix?: string; updatedAfterUnixMs?: number; updatedBeforeUnixMs?: number } = {},
    options: CallOptions & { pageSize?: number } = {},
  ): AsyncGenerator<ContextInfo> {
    let cursor: number | string | undefined;
    do {
      const page = await this.listContexts(filter, { ...options, cursor, limit: options.pageSize ?? 1000 });
      yield* page.contexts;
      cursor = page.nextCursor;
    } while (cursor !== undefined);
  }

  /** KV_PUT of every entry in one durable record (`ifAbsent`: keys present keep their values).
   * `ttlMs` (KV_PUT_EX, version 3): each entry expires that long after this put or its last
   * refresh; from then on no read sees it and the server removes it. `durability` as
   * `append`'s (a retry after Unconfirmed puts the same values again). */
  async kvPut(
    context: ContextLike,
    entries: ReadonlyMap<KeyLike, Uint8Array> | Record<string, Uint8Array>,
    options: WriteOptions & { ifAbsent?: boolean; ttlMs?: number } = {},
  ): Promise<void> {
    const ttlMs = ttlOf(options.ttlMs);
    const list: Array<[Uint8Array, Uint8Array]> = [];
    const source: Array<[KeyLike, Uint8Array]> =
      entries instanceof Map ? [...(entries as ReadonlyMap<KeyLike, Uint8Array>).entries()] : Object.entries(entries as Record<string, Uint8Array>);
    for (const [key, value] of source) {
      if (!(value instanceof Uint8Array)) throw new TypeError("a value is a Uint8Array");
      list.push([keyBytes(key), value]);
    }
    if (list.length === 0) return;
    if (ttlMs !== undefined) {
      const flags = options.ifAbsent === true ? p.KV_PUT_IF_ABSENT : 0;
      await this.run(durable(p.kvPutEx(contextRef(context), flags, ttlMs, list), options.durability), options);
      return;
    }
    await this.run(durable(p.kvPut(contextRef(context), options.ifAbsent ?? false, list), options.durability), options);
  }

  /** KV_GET: a key's value (checked against its hash), undefined for a missing or expired key;
   * NotFound for a missing context. `refresh` (KV_GET_EX, version 3): restart the entry's TTL
   * from now (a durable write when it has one). */
  async kvGet(context: ContextLike, key: KeyLike, options?: CallOptions & { refresh?: boolean }): Promise<Uint8Array | undefined> {
    if (options?.refresh === true) return (await this.kvGetEntry(context, key, options))?.value;
    const target = contextRef(context);
    const raw = keyBytes(key);
    try {
      const { answer, hashesRaw } = await this.send(p.kvGet(target, raw, this.acceptZstd ? p.READ_ACCEPT_ZSTD : 0), options);
      return payloadBytes(answer.payload, answer.valueHash, undefined, this.acceptZstd, hashesRaw, `value of key ${JSON.stringify(new TextDecoder().decode(raw))}`);
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
      if (error.detail === 1) return undefined; // the context exists, the key does not
      throw error;
    }
  }

  /** KV_GET_EX (version 3): the value with its TTL and expiry (`refresh`: restarted first),
   * undefined for a missing or expired key; NotFound for a missing context. */
  async kvGetEntry(context: ContextLike, key: KeyLike, options?: CallOptions & { refresh?: boolean }): Promise<KvValue | undefined> {
    const target = contextRef(context);
    const raw = keyBytes(key);
    const kvFlags = options?.refresh === true ? p.KV_READ_REFRESH : 0;
    try {
      const { answer, hashesRaw } = await this.send(p.kvGetEx(target, raw, this.acceptZstd ? p.READ_ACCEPT_ZSTD : 0, kvFlags), options);
      const what = `value of key ${JSON.stringify(new TextDecoder().decode(raw))}`;
      const value = payloadBytes(answer.payload, answer.valueHash, undefined, this.acceptZstd, hashesRaw, what);
      return { value, valueHash: answer.valueHash, ttlMs: answer.ttlMs, expiresAtUnixMs: answer.expiresAtUnixMs };
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
      if (error.detail === 1) return undefined; // the context exists, the key does not (or expired)
      throw error;
    }
  }

  /** KV_GET_MANY (version 3): the values of `keys` with their TTLs and expiries, in order,
   * undefined for a missing or expired key; NotFound for a missing context. One round trip per
   * 128 keys (more when the values pass the server's response budget); each reads one
   * snapshot. No keys: an empty list, nothing sent. */
  async kvGetMany(context: ContextLike, keys: readonly KeyLike[], options?: CallOptions): Promise<(KvValue | undefined)[]> {
    const target = contextRef(context);
    const raw = keys.map(keyBytes);
    const values: (KvValue | undefined)[] = [];
    while (values.length < raw.length) {
      const asked = raw.slice(values.length, values.length + p.KV_ENTRIES_PER_REQUEST_MAX);
      const { answer, hashesRaw } = await this.send(p.kvGetMany(target, this.acceptZstd ? p.READ_ACCEPT_ZSTD : 0, asked), options);
      // At least one value, at most one per key asked: else the loop would not end.
      if (answer.length === 0 || answer.length > asked.length) {
        throw new ProtocolError(`KV_GET_MANY of ${asked.length} keys answered ${answer.length}`);
      }
      answer.forEach((found, i) => {
        if (found === undefined) return void values.push(undefined);
        const what = `value of key ${JSON.stringify(new TextDecoder().decode(asked[i]))}`;
        const value = payloadBytes(found.payload, found.valueHash, undefined, this.acceptZstd, hashesRaw, what);
        values.push({ value, valueHash: found.valueHash, ttlMs: found.ttlMs, expiresAtUnixMs: found.expiresAtUnixMs });
      });
    }
    return values;
  }

  /** KV_TOUCH (version 3): restarts the TTL of each key from now, in one durable record:
   * `ttlMs` from now on (also for entries without one), else each entry's own. Absent and
   * expired keys are no error. The live entries among `keys`, as they are now. 1 to 128 keys. */
  async kvTouch(context: ContextLike, keys: readonly KeyLike[], options: CallOptions & { ttlMs?: number } = {}): Promise<KvItem[]> {
    if (keys.length === 0 || keys.length > p.KV_TOUCH_KEYS_MAX) throw new RangeError(`a touch takes 1 to ${p.KV_TOUCH_KEYS_MAX} keys; got ${keys.length}`);
    const raw = keys.map(keyBytes);
    const records = await this.run(p.kvTouch(contextRef(context), ttlOf(options.ttlMs) ?? 0, raw), options);
    const sent = new Set(raw.map((key) => toHex(key)));
    if (records.length > raw.length || records.some((record) => !sent.has(toHex(record.key)))) {
      throw new ProtocolError(`KV_TOUCH of ${raw.length} keys answered other entries`);
    }
    return records.map((r) => ({ ...r }));
  }

  /** KV_DELETE of every key in one request (absent keys are no error). */
  async kvDelete(context: ContextLike, keys: readonly KeyLike[], options?: CallOptions): Promise<void> {
    if (keys.length === 0) return;
    await this.run(p.kvDelete(contextRef(context), keys.map(keyBytes)), options);
  }

  /** KV_LIST: one page of the entries under `prefix`, in key order, after `after` (expired
   * entries are not listed). `withTtl` (KV_LIST_EX, version 3): each item's `ttlMs` and
   * `expiresAtUnixMs`; `refresh` (implies `withTtl`): every returned entry's TTL restarted. */
  async kvList(
    context: ContextLike,
    options: CallOptions & { prefix?: KeyLike; after?: KeyLike; limit?: number; withTtl?: boolean; refresh?: boolean } = {},
  ): Promise<KvPage> {
    const prefix = keyBytes(options.prefix ?? "");
    const after = keyBytes(options.after ?? "");
    const limit = u32(options.limit ?? 1000, "limit");
    if (limit === 0) throw new RangeError("limit must be at least 1");
    const target = contextRef(context);
    const records: p.KvItemRecord[] =
      options.refresh === true || options.withTtl === true
        ? await this.run(p.kvListEx(target, prefix, after, limit, options.refresh === true ? p.KV_READ_REFRESH : 0), options)
        : await this.run(p.kvList(target, prefix, after, limit), options);
    if (records.length > limit) throw new ProtocolError(`KV_LIST with limit ${limit} answered ${records.length} items`);
    let previous = after;
    for (const record of records) {
      if (!startsWith(record.key, prefix) || (previous.length > 0 && compareBytes(record.key, previous) <= 0)) {
        throw new ProtocolError(`KV_LIST answered a key out of order or outside the prefix`);
      }
      previous = record.key;
    }
    const items: KvItem[] = records.map((r) => ({ ...r }));
    return { items, nextAfter: items.length === limit ? items[items.length - 1]!.key : undefined };
  }

  /** Every entry under `prefix`, page after page (`withTtl`: as `kvList`). */
  async *iterKv(context: ContextLike, options: CallOptions & { prefix?: KeyLike; pageSize?: number; withTtl?: boolean } = {}): AsyncGenerator<KvItem> {
    let after: Uint8Array | undefined = new Uint8Array(0);
    while (after !== undefined) {
      const page: KvPage = await this.kvList(context, { ...options, after, limit: options.pageSize ?? 1000 });
      yield* page.items;
      after = page.nextAfter;
    }
  }

  // -- version 6: vector search (issue 49, decision 0033) --------------------------------

  /** VECTOR_INDEX_CREATE (protocol version 6): the vector index `name` (1 to 64 bytes of UTF-8)
   * of `dims` (1 to 4,096) and `metric` (default `cosine`), created in one durable record, or
   * the existing one of that name when its dimension and metric are these (so a start-up may
   * call it every time); another dimension or metric is InvalidArgument (so is an `efSearch`
   * other than 0 and the index's). `efSearch`: the graph's search breadth, 0 or absent for the
   * server's default (128), at most 4,096. At most 64 indexes per tenant (TooLarge). RangeError,
   * before sending, for what the server refuses. */
  async vectorIndexCreate(
    name: string,
    dims: number,
    options: CallOptions & { metric?: VectorMetricName; efSearch?: number } = {},
  ): Promise<VectorIndex> {
    const metric = metricCode(options.metric ?? "cosine");
    const created = vectorIndexOf(await this.run(p.vectorIndexCreate(name, dims, metric, options.efSearch ?? 0), options));
    if (created.name !== name || created.dims !== dims || created.metric !== (options.metric ?? "cosine")) {
      throw new ProtocolError(`VECTOR_INDEX_CREATE of ${JSON.stringify(name)} (${dims} dims, ${options.metric ?? "cosine"}) answered ${describeIndex(created)}`);
    }
    return created;
  }

  /** VECTOR_INDEX_DROP (protocol version 6; the `admin` right with tenants): drops the index
   * `name` in one durable record, and resolves to it as it was. Its vectors answer no search
   * from then on (entries keep their values); a new index of that name starts empty. NotFound
   * for an unknown name. */
  async vectorIndexDrop(name: string, options?: CallOptions): Promise<VectorIndex> {
    const dropped = vectorIndexOf(await this.run(p.vectorIndexDrop(name), options));
    if (dropped.name !== name) throw new ProtocolError(`VECTOR_INDEX_DROP of ${JSON.stringify(name)} answered ${describeIndex(dropped)}`);
    return dropped;
  }

  /** VECTOR_INDEX_LIST (protocol version 6): the connection's tenant's vector indexes, in name
   * order. */
  async vectorIndexes(options?: CallOptions): Promise<VectorIndex[]> {
    const indexes = (await this.run(p.vectorIndexList(), options)).map(vectorIndexOf);
    for (let i = 1; i < indexes.length; i++) {
      if (compareBytes(utf8.encode(indexes[i - 1]!.name), utf8.encode(indexes[i]!.name)) >= 0) {
        throw new ProtocolError(`VECTOR_INDEX_LIST answered ${JSON.stringify(indexes[i]!.name)} after ${JSON.stringify(indexes[i - 1]!.name)}: not in name order`);
      }
    }
    return indexes;
  }

  /**
   * KV_PUT_VECTORS (protocol version 6): `kvPut` whose entries carry vectors of the index
   * `index`, every value and vector in one durable record. Each entry has up to 64 vectors, all
   * of the index's dimension, every component finite as an f32; an entry without vectors is
   * stored without any (overwriting an entry, with or without vectors, replaces its vectors;
   * deleting it or its expiry removes them). `ifAbsent`, `ttlMs` and `durability` as `kvPut`'s.
   * 1 to 128 entries. RangeError or TypeError, before sending, for entries the server would
   * refuse (naming the entry and the vector); InvalidArgument from the server for a dimension
   * other than the index's, NotFound for an unknown index or context. `dims` is needed only
   * when no entry has a vector (else the index is looked up for it).
   */
  async kvPutVectors(
    context: ContextLike,
    entries: readonly VectorEntry[] | ReadonlyMap<KeyLike, Omit<VectorEntry, "key">>,
    index: string,
    options: WriteOptions & { ifAbsent?: boolean; ttlMs?: number; dims?: number } = {},
  ): Promise<void> {
    const ttlMs = ttlOf(options.ttlMs) ?? 0;
    const target = contextRef(context);
    const list: VectorEntry[] =
      entries instanceof Map
        ? [...(entries as ReadonlyMap<KeyLike, Omit<VectorEntry, "key">>).entries()].map(([key, entry]) => ({ ...entry, key }))
        : [...(entries as readonly VectorEntry[])];
    if (list.length < 1 || list.length > p.KV_ENTRIES_PER_REQUEST_MAX) {
      throw new RangeError(`kvPutVectors puts 1 to ${p.KV_ENTRIES_PER_REQUEST_MAX} entries (one durable record), not ${list.length}`);
    }
    let dims: number | undefined;
    const records: p.VectorEntryRecord[] = list.map((entry, i) => {
      if (typeof entry !== "object" || entry === null) throw new TypeError(`entry ${i} is { key, value, vectors }`);
      const key = keyBytes(entry.key);
      const what = `entry ${i} (key ${JSON.stringify(new TextDecoder().decode(key))})`;
      if (!(entry.value instanceof Uint8Array)) throw new TypeError(`${what}: a value is a Uint8Array`);
      const vectors = vectorsOf(entry.vectors, what, "an entry", p.VECTORS_PER_ENTRY_MAX, "put", dims);
      dims ??= vectors[0]?.length;
      return { key, value: entry.value, vectors };
    });
    if (dims === undefined) {
      dims = options.dims ?? (await this.vectorIndexes(options)).find((found) => found.name === index)?.dims;
      if (dims === undefined) throw new NotFound(`no vector index named ${JSON.stringify(index)} (none of the entries has a vector to tell its dimension)`);
    } else if (options.dims !== undefined && options.dims !== dims) {
      throw new RangeError(`dims is ${options.dims} but the vectors have ${dims} dimensions`);
    }
    const flags = options.ifAbsent === true ? p.KV_PUT_IF_ABSENT : 0;
    await this.run(durable(p.kvPutVectors(target, flags, ttlMs, index, dims, records), options.durability), options);
  }

  /**
   * VECTOR_SEARCH (protocol version 6): the `k` (default 10, 1 to 1,000) entries of `context`
   * nearest `vector` in the index `index`, best first, after `offset` (default 0; `k + offset` at
   * most 1,000), among those whose key starts with `prefix` and whose value (JSON) passes
   * `filter` (LangGraph's: `{ field: value }`, `{ field: { $gt: 3 } }`… with `$eq`, `$ne`,
   * `$gt`, `$gte`, `$lt`, `$lte`; sent as compact JSON, at most 65,536 bytes; an operator the
   * server does not know is InvalidArgument). Exactly `k` hits whenever `k + offset` entries or
   * more pass; an entry with several vectors counts once, with its best. It reads the snapshot a
   * `kvGet` would. `exact`: every candidate scanned, never the graph; `efSearch`: the graph's
   * breadth for this search (0: the index's). NotFound for an unknown context or index.
   */
  async vectorSearch(
    context: ContextLike,
    index: string,
    vector: VectorLike,
    options: CallOptions & { k?: number; offset?: number; prefix?: KeyLike; filter?: Record<string, unknown>; exact?: boolean; efSearch?: number } = {},
  ): Promise<VectorSearchResult> {
    const k = options.k ?? 10;
    const offset = options.offset ?? 0;
    const prefix = keyBytes(options.prefix ?? "");
    const query = vectorOf(vector, "the query vector");
    const answer = await this.run(
      p.vectorSearch({
        context: contextRef(context),
        index,
        vector: query,
        k,
        offset,
        exact: options.exact === true,
        efSearch: options.efSearch ?? 0,
        prefix,
        filter: filterBytes(options.filter),
      }),
      options,
    );
    checkHits(answer, k, prefix);
    return {
      method: p.VECTOR_SEARCH_METHODS[answer.method]!,
      candidates: answer.candidates,
      hits: answer.hits.map((hit) => ({ ...hit })),
    };
  }

  // -- version 7: vectors on turns (issue 49, decision 0033) -------------------------------

  /**
   * VECTOR_SEARCH_TURNS (protocol version 7): the `k` (default 10, 1 to 1,000) turns nearest
   * `vector` in the index `index` (their vectors written by `appendTurnsVectors`), best first,
   * after `offset` (default 0; `k + offset` at most 1,000). The turns searched are those of the
   * contexts named by `context`, `namePrefix` (the contexts whose name starts with it) and `tags`
   * (the contexts carrying every one, at most 32), each given one narrowing the others; none of
   * the three: every context of the connection's tenant. A context's turns are those a read of
   * it returns (a fork's inherited turns included, each turn once). Only turns carrying every
   * label of `labels` (at most 16) and, when given, of the type tag `typeTag`. Exactly `k` hits
   * whenever `k + offset` turns or more pass; a turn with several vectors counts once, with its
   * best. `exact`: every candidate scanned, never the graph; `efSearch`: the graph's breadth for
   * this search (0: the index's). NotFound for an unknown context or index; TooLarge when the
   * search names more than 10,000 contexts (narrow the prefix or the tags).
   */
  async vectorSearchTurns(
    index: string,
    vector: VectorLike,
    options: CallOptions & {
      k?: number;
      offset?: number;
      context?: ContextLike;
      namePrefix?: string;
      tags?: Record<string, string>;
      labels?: Record<string, string>;
      typeTag?: number | bigint;
      exact?: boolean;
      efSearch?: number;
    } = {},
  ): Promise<TurnSearchResult> {
    const k = options.k ?? 10;
    const offset = options.offset ?? 0;
    const query = vectorOf(vector, "the query vector");
    const namePrefix = options.namePrefix ?? "";
    if (typeof namePrefix !== "string") throw new TypeError(`namePrefix is a string, not ${typeof namePrefix}`);
    const typeTag = options.typeTag === undefined ? undefined : typeTagOf(options.typeTag);
    const answer = await this.run(
      p.vectorSearchTurns({
        index,
        vector: query,
        k,
        offset,
        exact: options.exact === true,
        efSearch: options.efSearch ?? 0,
        context: options.context === undefined ? undefined : contextRef(options.context),
        namePrefix,
        tags: pairs(options.tags, "tag"),
        labels: pairs(options.labels, "label"),
        typeTag,
      }),
      options,
    );
    checkTurnHits(answer, k, typeTag);
    const method = p.VECTOR_SEARCH_METHODS[answer.method]!;
    return {
      exact: method === "exact",
      method,
      candidates: answer.candidates,
      hits: answer.hits.map((hit) => ({ turn: turnOf(hit.turn), score: hit.score })),
    };
  }

  // -- version 2: turns for agent frameworks -------------------------------------------

  private async sentTurn(spec: TurnSpec, options?: CallOptions): Promise<SentTurn> {
    if ((spec.payload === undefined) === (spec.payloadHash === undefined)) {
      throw new RangeError("a TurnSpec has a payload or a payloadHash (exactly one)");
    }
    let parentKind: p.ParentKind = p.ParentKind.HEAD;
    let parentTurnId = 0;
    const parent: ParentLike = spec.parent;
    if (parent === "root") parentKind = p.ParentKind.ROOT;
    else if (parent !== undefined) {
      if (u64(parent, "parent") === 0) throw new RangeError('parent 0 is no turn: pass "root" for a new root');
      parentKind = p.ParentKind.TURN;
      parentTurnId = parent;
    }
    const extras: p.ExtrasRecord = {
      key: turnKey(spec.key),
      labels: pairs(spec.labels, "label"),
      links: (spec.links ?? []).map((link) => u64(link, "a link")),
    };
    const common = { parentKind, parentTurnId, typeTag: typeTagOf(spec.typeTag), codec: u32(spec.codec ?? 0, "codec"), summary: spec.summary ?? false, extras };
    if (spec.payloadHash !== undefined) {
      const digest = parseHash(spec.payloadHash);
      return { record: { ...common, payload: digest, byHash: true }, digest, payloadLen: undefined };
    }
    const payload = spec.payload!;
    if (!(payload instanceof Uint8Array)) throw new TypeError("a payload is a Uint8Array");
    // A large payload by value travels as chunks first, then by hash (as `append`).
    const stored = await this.storeChunked(payload, options);
    if (stored !== undefined) {
      return { record: { ...common, payload: stored.payloadHash, byHash: true }, digest: stored.payloadHash, payloadLen: payload.length };
    }
    return { record: { ...common, payload, byHash: false }, digest: blobHash(payload), payloadLen: payload.length };
  }

  /**
   * APPEND_TURNS: one or more turns (at most 64 with the default server) to one context, in
   * order, all or none, in one durable write; each turn's parent is the one before it unless
   * its spec says otherwise. A turn whose key the context has already is answered as that
   * turn with `existing` (nothing written: a retry is safe). `durability` as `append`'s, for
   * the whole batch.
   */
  async appendTurns(context: ContextLike, specs: readonly TurnSpec[], options: WriteOptions & { expectedHead?: number } = {}): Promise<Appended[]> {
    const target = contextRef(context);
    if (specs.length === 0) throw new RangeError("appendTurns needs at least one TurnSpec");
    return this.sendTurns(target, specs, options, undefined);
  }

  /**
   * APPEND_TURNS_VECTORS (protocol version 7): `appendTurns` whose turns carry vectors of the
   * vector index `index`, the turns and their vectors in one group commit, all or none. Each
   * turn has up to 16 vectors, all of the index's dimension, every component finite as an f32;
   * a turn without vectors is appended without any. The vectors live as long as their turn (a
   * redaction, the context's deletion, a prune below it take them); a turn whose key the
   * context has already is answered `existing` and writes nothing, its vectors included.
   * `vectorSearchTurns` finds them. Keys, parents, `expectedHead`, `durability` and the answer
   * as `appendTurns`'. RangeError or TypeError, before anything is sent, for turns the server
   * would refuse (naming the turn and the vector); InvalidArgument from the server for a
   * dimension other than the index's, NotFound for an unknown index or context. `dims` is
   * needed only when no turn has a vector (else the index is looked up for it).
   */
  async appendTurnsVectors(
    context: ContextLike,
    turns: readonly VectorTurnSpec[],
    options: WriteOptions & { index: string; dims?: number; expectedHead?: number },
  ): Promise<Appended[]> {
    const target = contextRef(context);
    if (typeof options !== "object" || options === null || typeof options.index !== "string") {
      throw new TypeError("appendTurnsVectors needs options.index, the vector index's name");
    }
    const index = options.index;
    if (turns.length === 0) throw new RangeError("appendTurnsVectors needs at least one turn");
    let dims: number | undefined;
    const vectors: Float32Array[][] = turns.map((turn, i) => {
      if (typeof turn !== "object" || turn === null) throw new TypeError(`turn ${i} is a TurnSpec with its vectors`);
      const converted = vectorsOf(turn.vectors, `turn ${i}`, "a turn", p.VECTORS_PER_TURN_MAX, "append", dims);
      dims ??= converted[0]?.length;
      return converted;
    });
    if (dims === undefined) {
      dims = options.dims ?? (await this.vectorIndexes(options)).find((found) => found.name === index)?.dims;
      if (dims === undefined) throw new NotFound(`no vector index named ${JSON.stringify(index)} (none of the turns has a vector to tell its dimension)`);
    } else if (options.dims !== undefined && options.dims !== dims) {
      throw new RangeError(`dims is ${options.dims} but the vectors have ${dims} dimensions`);
    }
    // The request's own checks (the index's name, dims) before anything is sent: a payload to
    // chunk is stored before the request is made.
    p.checkTurnVectors(index, dims, vectors);
    return this.sendTurns(target, turns, options, { index, dims, vectors });
  }

  /** APPEND_TURNS, or with `vectors` APPEND_TURNS_VECTORS: keys, chunked payloads, the answer's
   * checks. */
  private async sendTurns(
    target: p.ContextRef,
    specs: readonly TurnSpec[],
    options: WriteOptions & { expectedHead?: number },
    vectors: { index: string; dims: number; vectors: Float32Array[][] } | undefined,
  ): Promise<Appended[]> {
    // `idempotency: "auto"`: a key made here, once, for each turn without one; every resend of
    // the request after a failover carries the same keys.
    const keyed = specs.some((spec) => spec.key === undefined) && (await this.autoKeys()) ? specs.map((spec) => (spec.key === undefined ? { ...spec, key: autoKey() } : spec)) : specs;
    const sent = await Promise.all(keyed.map((spec) => this.sentTurn(spec, options)));
    const expected = options.expectedHead === undefined ? undefined : u64(options.expectedHead, "expectedHead");
    const records = sent.map((s) => s.record);
    const resendable = records.every((record) => record.extras.key.length > 0);
    const request =
      vectors === undefined
        ? p.appendTurns(target, expected, records)
        : p.appendTurnsVectors(target, expected, vectors.index, vectors.dims, records.map((record, i) => ({ ...record, vectors: vectors.vectors[i]! })));
    const answers = await this.run(durable({ ...request, resendable }, options.durability), options);
    if (answers.length !== sent.length) throw new ProtocolError(`${request.name} of ${sent.length} turns was answered with ${answers.length}`);
    let head: number | undefined = expected;
    answers.forEach((answer, i) => {
      checkAppended(target, sent[i]!, answer, head, request.name);
      head = answer.existing ? undefined : answer.turn.turnId;
    });
    return answers.map((a) => ({ turn: turnOf(a.turn), deduped: a.deduped, existing: a.existing }));
  }

  /** GET_TURN_BY_KEY: the turn of the context with `key` (its own or inherited), undefined
   * if none; NotFound for a missing context. */
  async turnByKey(context: ContextLike, key: KeyLike, options: CallOptions & { asOf?: number } = {}): Promise<TurnInfo | undefined> {
    const target = contextRef(context);
    const raw = turnKey(key);
    if (raw.length === 0) throw new RangeError("a turn key must not be empty");
    const read = p.getTurnByKey(target, raw);
    try {
      let info: TurnInfo;
      if (options.asOf === undefined) {
        const answer = await this.run(read, options);
        if (!equalBytes(answer.extras.key, raw)) throw new ProtocolError(`GET_TURN_BY_KEY answered turn ${answer.turn.turnId} with another key`);
        info = turnInfoOf(answer.turn, answer.extras);
      } else {
        const { answer, overlays } = await this.run(p.asOf(read, u64(options.asOf, "asOf"), () => 1), options);
        if (!equalBytes(answer.extras.key, raw)) throw new ProtocolError(`GET_TURN_BY_KEY answered turn ${answer.turn.turnId} with another key`);
        info = withOverlay(turnInfoOf(answer.turn, answer.extras), overlays[0]!);
      }
      return info;
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
    }
    // NOT_FOUND for a missing key and for a missing context alike: CTX_SHOW tells them apart.
    await this.contextInfo(target, options);
    return undefined;
  }

  private entries(entries: p.TurnExtrasEntry[], payloads: boolean, hashesRaw: boolean): TurnInfo[] {
    return entries.map((entry) => turnInfoOf(entry.turn, entry.extras, this.entryPayload(entry, payloads, hashesRaw)));
  }

  /** TURN_LOG: one page of the context's turns carrying every label of `labels`, newest first
   * across all its branches, then what it inherited. A page may be short (even empty) while
   * more match: follow `nextCursor`. */
  async turnLog(
    context: ContextLike,
    options: ReadOptions & { labels?: Record<string, string>; cursor?: LogCursor; limit?: number } = {},
  ): Promise<LogPage> {
    const wanted = pairs(options.labels, "label");
    const limit = u32(options.limit ?? 1000, "limit");
    if (limit === 0) throw new RangeError("limit must be at least 1");
    const cursor = options.cursor === undefined ? undefined : { phase: options.cursor.phase, next: options.cursor.next };
    const payloads = options.payloads ?? false;
    const request = p.turnLog(contextRef(context), wanted, cursor, limit, readFlags(payloads, this.acceptZstd));
    let answer: p.TurnLogAnswer;
    let overlays: p.OverlayRecord[] | undefined;
    let hashesRaw: boolean;
    if (options.asOf === undefined) {
      ({ answer, hashesRaw } = await this.send(request, options));
    } else {
      const sent = await this.send(p.asOf(request, u64(options.asOf, "asOf"), (a) => a.entries.length), options);
      ({ answer, overlays } = sent.answer);
      hashesRaw = sent.hashesRaw;
    }
    if (answer.entries.length > limit) throw new ProtocolError(`TURN_LOG with limit ${limit} answered ${answer.entries.length} turns`);
    for (const entry of answer.entries) {
      const have = new Map(entry.extras.labels);
      for (const [k, v] of wanted) {
        if (have.get(k) !== v) throw new ProtocolError(`TURN_LOG filtered by ${k}=${v} answered turn ${entry.turn.turnId} without it`);
      }
    }
    const next = answer.nextCursor;
    if (next !== undefined && cursor !== undefined && next.phase === cursor.phase && next.next === cursor.next) {
      throw new ProtocolError("TURN_LOG answered the cursor it was given");
    }
    let turns = this.entries(answer.entries, payloads, hashesRaw);
    if (overlays !== undefined) turns = turns.map((t, i) => withOverlay(t, overlays[i]!));
    return { turns, nextCursor: next };
  }

  /** The whole turn log, page after page. */
  async *iterTurnLog(context: ContextLike, options: ReadOptions & { labels?: Record<string, string>; pageSize?: number } = {}): AsyncGenerator<TurnInfo> {
    let cursor: LogCursor | undefined;
    do {
      const page: LogPage = await this.turnLog(context, { ...options, cursor, limit: options.pageSize ?? 1000 });
      yield* page.turns;
      cursor = page.nextCursor;
    } while (cursor !== undefined);
  }

  /** FIND_TURNS: one page of every context's turns labelled `key = value` (an indexed key:
   * run_id, thread_id, idx.*), newest first, older than `before`. */
  async findTurns(key: string, value: string, options: CallOptions & { before?: number; limit?: number } = {}): Promise<FoundPage> {
    if (key !== "run_id" && key !== "thread_id" && !key.startsWith("idx.")) {
      throw new RangeError(`findTurns needs an indexed label key (run_id, thread_id or idx.*), not ${JSON.stringify(key)}`);
    }
    const before = options.before === undefined ? 0 : u64(options.before, "before");
    if (options.before !== undefined && before === 0) throw new RangeError("before=0 would mean from the newest: leave it out");
    const limit = u32(options.limit ?? 1000, "limit");
    if (limit === 0 || limit > 1000) throw new RangeError("limit must be in 1..=1000");
    const answer = await this.run(p.findTurns(key, value, before, limit), options);
    if (answer.turns.length > limit) throw new ProtocolError(`FIND_TURNS with limit ${limit} answered ${answer.turns.length} turns`);
    let ceiling = before === 0 ? Number.POSITIVE_INFINITY : before;
    for (const { turn, extras } of answer.turns) {
      if (new Map(extras.labels).get(key) !== value) throw new ProtocolError(`FIND_TURNS ${key}=${value} answered turn ${turn.turnId} without the label`);
      if (turn.turnId >= ceiling) throw new ProtocolError(`FIND_TURNS answered turn ${turn.turnId} out of order`);
      ceiling = turn.turnId;
    }
    if (answer.nextBefore !== 0 && before !== 0 && answer.nextBefore >= before) throw new ProtocolError(`FIND_TURNS before ${before} did not advance`);
    return { turns: answer.turns.map((t) => turnInfoOf(t.turn, t.extras)), nextBefore: answer.nextBefore === 0 ? undefined : answer.nextBefore };
  }

  async *iterFindTurns(key: string, value: string, options: CallOptions & { pageSize?: number } = {}): AsyncGenerator<TurnInfo> {
    let before: number | undefined;
    do {
      const page: FoundPage = await this.findTurns(key, value, { ...options, before, limit: options.pageSize ?? 1000 });
      yield* page.turns;
      before = page.nextBefore;
    } while (before !== undefined);
  }

  /**
   * READ_PAGE: a page of the context's chain with each turn's extras, oldest first — the
   * newest `limit` (default), those before `before`, those from depth `fromDepth`, or (with
   * `window`) from the latest summary turn to the head.
   */
  async readPage(
    context: ContextLike,
    limit: number,
    options: ReadOptions & { before?: number; fromDepth?: number; window?: boolean } = {},
  ): Promise<Page<TurnInfo>> {
    let kind: p.PageKind = p.PageKind.LAST;
    let before = 0;
    let fromDepth = 0;
    const given = [options.before !== undefined, options.fromDepth !== undefined, options.window === true].filter(Boolean).length;
    if (given > 1) throw new RangeError("readPage takes before, fromDepth or window, one at most");
    if (options.before !== undefined) {
      if (u64(options.before, "before") === 0) throw new RangeError("before=0: the previous page reached the root; nothing is older");
      kind = p.PageKind.BEFORE;
      before = options.before;
    } else if (options.fromDepth !== undefined) {
      kind = p.PageKind.RANGE;
      fromDepth = u32(options.fromDepth, "fromDepth");
    } else if (options.window === true) {
      kind = p.PageKind.WINDOW;
    }
    const payloads = options.payloads ?? false;
    const request = p.readPage(contextRef(context), kind, before, fromDepth, u32(limit, "limit"), readFlags(payloads, this.acceptZstd));
    let answer: p.PageAnswer;
    let overlays: p.OverlayRecord[] | undefined;
    let hashesRaw: boolean;
    if (options.asOf === undefined) {
      ({ answer, hashesRaw } = await this.send(request, options));
    } else {
      const sent = await this.send(p.asOf(request, u64(options.asOf, "asOf"), (a) => a.entries.length), options);
      ({ answer, overlays } = sent.answer);
      hashesRaw = sent.hashesRaw;
    }
    if (answer.entries.length > limit) throw new ProtocolError(`READ_PAGE with limit ${limit} answered ${answer.entries.length} turns`);
    for (let i = 1; i < answer.entries.length; i++) {
      const older = answer.entries[i - 1]!.turn;
      const newer = answer.entries[i]!.turn;
      if (newer.parentTurnId !== older.turnId || newer.depth !== older.depth + 1) {
        throw new ProtocolError(`READ_PAGE: turn ${newer.turnId} (depth ${newer.depth}) does not follow turn ${older.turnId} (depth ${older.depth}) on one chain`);
      }
      if (kind === p.PageKind.WINDOW && (newer.flags & p.TURN_SUMMARY) !== 0) throw new ProtocolError("READ_PAGE: a summary turn after the start of the window");
    }
    let turns = this.entries(answer.entries, payloads, hashesRaw);
    if (overlays !== undefined) turns = turns.map((t, i) => withOverlay(t, overlays[i]!));
    return { turns, nextBefore: answer.nextBefore, tipDepth: answer.tipDepth };
  }

  /** The context's window: from its latest summary turn to the head, at most `limit` turns. */
  async window(context: ContextLike, limit: number, options: ReadOptions = {}): Promise<Page<TurnInfo>> {
    return this.readPage(context, limit, { ...options, window: true });
  }

  // -- version 3: streams, turns in the making (issue 32, decision 0027; src/streams.ts) ------

  /**
   * Opens a stream on the context: a turn in the making, with what `appendTurns` takes but
   * the payload (`expectedHead` is checked at the seal). Returns a {@link TurnStream}:
   * `append` deltas (each answered once durable, with the stream's length), then `seal` (one
   * ordinary turn) or `abort`. Only this client's connection writes it (StreamNotOwned for
   * others) until that connection closes. `durability`: of its seal, as `append`'s (the
   * deltas are answered as always).
   */
  async openTurn(context: ContextLike, options: WriteOptions & Omit<TurnSpec, "payload" | "payloadHash"> & { expectedHead?: number } = {}): Promise<TurnStream> {
    if (checkedDurability(options.durability)) {
      // Nothing is begun that could not end as asked: its seal needs version 4.
      const info = await this.serverInfo();
      if (info.version < 4) {
        throw new NotSupported(
          `openTurn with durability ${JSON.stringify(options.durability)} needs protocol version 4; the server ${JSON.stringify(info.serverName)} negotiated version ${info.version} (nothing was sent)`,
        );
      }
    }
    const target = contextRef(context);
    const { parentKind, parentTurnId } = parentOf(options.parent);
    const info = await this.run(
      s.streamOpen({
        context: target,
        ...(options.expectedHead === undefined ? {} : { expectedHead: u64(options.expectedHead, "expectedHead") }),
        parentKind,
        parentTurnId,
        typeTag: typeTagOf(options.typeTag),
        codec: u32(options.codec ?? 0, "codec"),
        summary: options.summary ?? false,
        extras: { key: turnKey(options.key), labels: pairs(options.labels, "label"), links: (options.links ?? []).map((link) => u64(link, "a link")) },
      }),
      options,
    );
    if (info.length !== 0 || (typeof target === "number" && info.contextId !== target)) {
      throw new ProtocolError(`STREAM_OPEN on ${String(target)} answered stream ${info.streamId} of context ${info.contextId} holding ${info.length} bytes`);
    }
    return this.streamObject(info, options);
  }

  /** An open stream of the context (by StreamID) as `openTurn`'s object at its acknowledged
   * length: a writer continues a stream another process opened. NotFound if it is not open. */
  async resumeTurn(context: ContextLike, streamId: number, options: WriteOptions = {}): Promise<TurnStream> {
    const info = (await this.streams(context, options)).find((open) => open.streamId === streamId);
    if (info === undefined) throw new NotFound(`stream ${streamId} is not open in context ${String(context)} (sealed, aborted, or never opened there)`);
    return this.streamObject(info, options);
  }

  /** The stream object of `info`; its seal (the one stream request of TAKES_ACK_AFTER) goes
   * with `options.durability`. */
  private streamObject(info: s.StreamInfo, options: WriteOptions): TurnStream {
    return new TurnStream(
      info,
      (request) => this.run(durable(request, options.durability), options),
      (answer) => ({ turn: turnOf(answer.turn), deduped: answer.deduped, existing: false }),
    );
  }

  /** The context's open streams by StreamID, each with its acknowledged `length`. */
  async streams(context: ContextLike, options: CallOptions = {}): Promise<s.StreamInfo[]> {
    const target = contextRef(context);
    const found: s.StreamInfo[] = [];
    let after = 0;
    for (;;) {
      const page = await this.run(s.streamList(target, after, s.STREAM_LIST_MAX), options);
      for (const info of page) {
        if (info.streamId <= after) throw new ProtocolError(`STREAM_LIST after stream ${after} answered stream ${info.streamId}`);
        after = info.streamId;
      }
      found.push(...page);
      if (page.length < s.STREAM_LIST_MAX) return found;
    }
  }

  /**
   * The stream's bytes from `offset` as chunks, acknowledged bytes only, in order. Without
   * `follow` it ends after what is there; with it, the server pushes the bytes as they become
   * durable (STREAM_FOLLOW, one request per `waitMs` without a delta, followed again from the
   * offset after each) until the seal; a server that answers UNKNOWN_MESSAGE (older than
   * STREAM_FOLLOW) is long-polled instead (STREAM_READ, up to `waitMs` each). The bytes of a
   * stream sealed while the reader was away come from its turn. An aborted stream throws
   * StreamEnded (detail 0). A lost connection (a server restart too) is retried for
   * `reconnectMs` from the offset after the last chunk yielded: every byte exactly once.
   * Leaving the loop early stops the follow (its remaining frames are dropped).
   */
  async *readStream(
    streamId: number,
    options: CallOptions & { offset?: number; follow?: boolean; bytesMax?: number; waitMs?: number; reconnectMs?: number } = {},
  ): AsyncGenerator<Uint8Array> {
    const id = u64(streamId, "streamId");
    let offset = u64(options.offset ?? 0, "offset");
    const follow = options.follow ?? false;
    const waitMs = follow ? (options.waitMs ?? 30_000) : 0;
    const bytesMax = u32(options.bytesMax ?? 1 << 20, "bytesMax");
    const reconnectMs = options.reconnectMs ?? 30_000;
    const call = this.longPoll(options, waitMs);
    // STREAM_FOLLOW while following, until the server says it does not know it.
    let push = follow;
    let frames: Follow<s.StreamPushed> | undefined;
    let lostAt: number | undefined;
    try {
      for (let round = 0; ; ) {
        let answer: s.StreamBytesAnswer;
        if (push) {
          try {
            frames ??= await this.openFollow(id, offset, bytesMax, waitMs, call);
            const frame = await frames.next();
            if (frame === undefined) throw new ProtocolError(`STREAM_FOLLOW of stream ${id} ended without its last frame`);
            if (!frame.more) frames = undefined; // the follow is over: the next starts at the new offset
            answer = frame;
            lostAt = undefined;
            round = 0;
          } catch (error) {
            frames = undefined;
            if (error instanceof UnknownMessage) {
              push = false;
              continue;
            }
            if (!isConnectionLoss(error)) throw error;
            lostAt ??= Date.now();
            if (Date.now() - lostAt >= reconnectMs) throw error;
            await backoff(round++);
            continue;
          }
        } else {
          answer = await this.retried(() => this.run(s.streamRead(id, offset, bytesMax, waitMs), call), reconnectMs);
        }
        const what = push ? "STREAM_FOLLOW" : "STREAM_READ";
        if (answer.streamId !== id || answer.offset !== offset) {
          throw new ProtocolError(`${what} of stream ${id} at ${offset} answered stream ${answer.streamId} at ${answer.offset}`);
        }
        if (answer.state === s.StreamState.OPEN) {
          if (offset + answer.data.length > answer.length) throw new ProtocolError(`${what} answered bytes past the stream's length ${answer.length}`);
          if (answer.data.length > 0) {
            offset += answer.data.length;
            yield answer.data;
          }
          if (!follow && offset >= answer.length) return;
          continue;
        }
        if (answer.state === s.StreamState.ABORTED) {
          throw new StreamEnded(`stream ${id} was aborted (read up to byte ${offset}); it never became a turn`, 0);
        }
        // Sealed: the rest from `offset` is the sealed turn's payload.
        const turn = await this.retried(() => this.getTurn(answer.turnId, options), reconnectMs);
        if (offset > turn.payloadLen) throw new ProtocolError(`stream ${id} was read to byte ${offset}, past its turn of ${turn.payloadLen} bytes`);
        if (offset < turn.payloadLen) {
          const payload = await this.retried(() => this.getBlob(turn.payloadHash, options), reconnectMs);
          yield payload.subarray(offset);
        }
        return;
      }
    } finally {
      frames?.stop(); // a reader that left early: the connection drops the rest of its frames
    }
  }

  /** The request a follow sends: STREAM_FOLLOW. (A subclass may send another: the tests send
   * a message the server does not know, to see the fallback a server older than STREAM_FOLLOW
   * causes.) */
  protected followRequest(streamId: number, offset: number, bytesMax: number, waitMs: number): p.Request<unknown> {
    return s.streamFollow(streamId, offset, bytesMax, waitMs);
  }

  /** Sends a STREAM_FOLLOW; its frames. Each may take the call's timeout (with the wait). */
  private async openFollow(streamId: number, offset: number, bytesMax: number, waitMs: number, call: CallOptions): Promise<Follow<s.StreamPushed>> {
    const deadline = this.deadline(call);
    const conn = await this.connection();
    return conn.follow(this.followRequest(streamId, offset, bytesMax, waitMs), s.decodeStreamPushed, deadline, deadline - Date.now());
  }

  /**
   * The events of one context, of the contexts whose name starts with `namePrefix`, or of
   * those tagged `tag` (exactly one), as an endless async iterator of {@link s.WatchEvent}s
   * (head moves, streams opened/sealed/aborted, tag changes, deletions) with their sequence
   * numbers; `afterSeq` resumes after one (undefined: from now). Where the server no longer
   * keeps the events after it, a {@link s.WatchLagged} comes instead: re-read the state, the
   * watch goes on. A lost connection is retried as `readStream`'s, from the last `seq` seen.
   */
  async *watch(
    target: s.WatchTarget,
    options: CallOptions & { afterSeq?: number; maxEvents?: number; waitMs?: number; reconnectMs?: number } = {},
  ): AsyncGenerator<s.WatchEvent | s.WatchLagged> {
    const checked = watchTargetOf(target);
    const waitMs = options.waitMs ?? 30_000;
    const maxEvents = options.maxEvents ?? s.WATCH_EVENTS_MAX;
    let position = options.afterSeq === undefined ? await this.watchPosition(target, options) : u64(options.afterSeq, "afterSeq");
    const call = this.longPoll(options, waitMs);
    for (;;) {
      const answer = await this.retried(() => this.run(s.watch(checked, position, maxEvents, waitMs), call), options.reconnectMs);
      if (answer.lagged) {
        yield { type: "lagged", afterSeq: position, resumeAfter: answer.resumeAfter };
        position = answer.resumeAfter;
        continue;
      }
      for (const event of answer.events) {
        if (event.seq <= position || event.seq > answer.resumeAfter) throw new ProtocolError(`WATCH after ${position} answered event ${event.seq}`);
        position = event.seq;
        yield event;
      }
      if (answer.resumeAfter < position) throw new ProtocolError(`WATCH after ${position} answered resume_after ${answer.resumeAfter}`);
      position = answer.resumeAfter;
    }
  }

  /** The sequence number a `watch` of `target` would start after now. To follow a state
   * without a gap: take the position, read the state, then watch `afterSeq` it. */
  async watchPosition(target: s.WatchTarget, options: CallOptions = {}): Promise<number> {
    const answer = await this.run(s.watch(watchTargetOf(target), s.WATCH_FROM_NOW, 1, 0), options);
    if (answer.lagged || answer.events.length > 0) throw new ProtocolError("WATCH from now was answered with events, or lagged");
    return answer.resumeAfter;
  }

  /** A long poll's call options: its timeout on top of its wait. */
  private longPoll(options: CallOptions, waitMs: number): CallOptions {
    return { ...options, timeoutMs: checkTimeout(options.timeoutMs, this.timeoutMs, "timeoutMs") + waitMs };
  }

  /** `attempt`, again on a new connection while the connection (not the request) fails, for
   * up to `reconnectMs` (30 s). */
  private async retried<R>(attempt: () => Promise<R>, reconnectMs = 30_000): Promise<R> {
    let lostAt: number | undefined;
    for (let round = 0; ; round++) {
      try {
        return await attempt();
      } catch (error) {
        if (!isConnectionLoss(error)) throw error;
        lostAt ??= Date.now();
        if (Date.now() - lostAt >= reconnectMs) throw error;
        await backoff(round);
      }
    }
  }
}

/** Whether `error` is the connection's (lost, refused, a server shutting down), not the
 * request's: the request may be sent again on a new connection. */
function isConnectionLoss(error: unknown): boolean {
  return error instanceof ConnectionLost || error instanceof ConnectError || error instanceof ConnectTimeout || error instanceof ShuttingDown;
}

/** The wait before reconnecting attempt `round` (from 0): 50 ms doubling, at most 1 s. */
function backoff(round: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.min(1000, 50 * 2 ** Math.min(round, 8))));
}

function parentOf(parent: ParentLike): { parentKind: p.ParentKind; parentTurnId: number } {
  if (parent === undefined) return { parentKind: p.ParentKind.HEAD, parentTurnId: 0 };
  if (parent === "root") return { parentKind: p.ParentKind.ROOT, parentTurnId: 0 };
  if (u64(parent, "parent") === 0) throw new RangeError('parent 0 is no turn: pass "root" for a new root');
  return { parentKind: p.ParentKind.TURN, parentTurnId: parent };
}

function watchTargetOf(target: s.WatchTarget): s.WatchTarget {
  const given = ["context", "namePrefix", "tag"].filter((key) => key in target).length;
  if (given !== 1) throw new RangeError("watch one context, one namePrefix or one tag (exactly one)");
  if ("context" in target) return { context: contextRef(target.context) };
  return target;
}

function checkAppended(context: p.ContextRef, sent: SentTurn, answer: p.AppendedTurnRecord, headBefore: number | undefined, message = "APPEND_TURNS"): void {
  const record = answer.turn;
  const what = `${message}: turn ${record.turnId}`;
  if (typeof context === "number" && record.contextId !== context && !answer.existing) {
    throw new ProtocolError(`${what} is in context ${record.contextId}, not ${context}`);
  }
  if (answer.existing) {
    if (sent.record.extras.key.length === 0) throw new ProtocolError(`${what} is answered as existing, but it was sent without a key`);
    return; // the earlier turn of that key: its payload and parent are its own
  }
  if (!equalBytes(record.payloadHash, sent.digest) || (sent.payloadLen !== undefined && record.payloadLen !== sent.payloadLen)) {
    throw new IntegrityError(`${what} records payload ${toHex(record.payloadHash)} (${record.payloadLen} bytes), sent ${toHex(sent.digest)}`);
  }
  if (((record.flags & p.TURN_SUMMARY) !== 0) !== sent.record.summary) throw new ProtocolError(`${what}: its SUMMARY flag is not what was asked`);
  const spec = sent.record;
  const expectedParent = spec.parentKind === p.ParentKind.ROOT ? 0 : spec.parentKind === p.ParentKind.TURN ? spec.parentTurnId : headBefore;
  if (expectedParent !== undefined && record.parentTurnId !== expectedParent) {
    throw new ProtocolError(`${what} hangs from turn ${record.parentTurnId}, asked ${expectedParent}`);
  }
  if (expectedParent === 0 && record.depth !== 0) throw new ProtocolError(`${what} is a root at depth ${record.depth}`);
}

function metricCode(metric: VectorMetricName): p.VectorMetric {
  const code = p.VECTOR_METRIC_NAMES.indexOf(metric);
  if (code < 1) throw new RangeError(`a metric is "cosine", "inner_product" or "l2", not ${JSON.stringify(metric)}`);
  return code as p.VectorMetric;
}

function vectorIndexOf(record: p.VectorIndexRecord): VectorIndex {
  return {
    name: record.name,
    indexId: record.indexId,
    dims: record.dims,
    metric: p.VECTOR_METRIC_NAMES[record.metric],
    efSearch: record.efSearch,
    vectors: record.vectors,
  };
}

function describeIndex(index: VectorIndex): string {
  return `index ${JSON.stringify(index.name)} (${index.dims} dims, ${index.metric})`;
}

/** A vector as the wire carries it: its numbers as f32 (checked finite by the codec). */
/** The vectors of one entry or turn (`what`, e.g. `turn 3`; `kind`, e.g. `a turn`): an array
 * of at most `countMax` vectors, each converted (`vectorOf`) and of the request's dimension
 * `dims` (undefined: the first sets it; `request` names the call, "put" or "append"). */
function vectorsOf(
  given: unknown,
  what: string,
  kind: string,
  countMax: number,
  request: "put" | "append",
  dims: number | undefined,
): Float32Array[] {
  const list = given ?? [];
  if (!Array.isArray(list)) throw new TypeError(`${what}: vectors is an array of vectors`);
  if (list.length > countMax) {
    throw new RangeError(`${what} has ${list.length} vectors; ${kind} carries at most ${countMax}`);
  }
  const article = request === "put" ? "a" : "an";
  return list.map((vector: VectorLike, j) => {
    const converted = vectorOf(vector, `${what}, vector ${j}`);
    dims ??= converted.length;
    if (converted.length !== dims) {
      throw new RangeError(`${what}, vector ${j} has ${converted.length} dimensions, the ${request}'s first vector ${dims}: every vector of ${article} ${request} is of the index's dimension`);
    }
    return converted;
  });
}

function vectorOf(vector: VectorLike, what: string): Float32Array {
  if (vector instanceof Float32Array) return vector;
  if (typeof vector !== "object" || vector === null || typeof vector.length !== "number") {
    throw new TypeError(`${what} is an array of numbers or a Float32Array, not ${vector === null ? "null" : typeof vector}`);
  }
  const out = new Float32Array(vector.length);
  for (let i = 0; i < vector.length; i++) {
    const component: unknown = vector[i];
    if (typeof component !== "number") throw new TypeError(`${what}: component ${i} is a ${typeof component}, not a number`);
    out[i] = component;
    if (!Number.isFinite(out[i])) {
      throw new RangeError(`${what}: component ${i} is ${component}${Number.isFinite(component) ? ", beyond the f32 range" : ""} (a component is a finite number)`);
    }
  }
  return out;
}

/** A search filter as the wire carries it: compact JSON of an object (none: no bytes). */
function filterBytes(filter: Record<string, unknown> | undefined): Uint8Array {
  if (filter === undefined) return new Uint8Array(0);
  if (typeof filter !== "object" || filter === null || Array.isArray(filter)) {
    throw new TypeError(`a filter is an object ({ field: condition }), not ${Array.isArray(filter) ? "an array" : filter === null ? "null" : typeof filter}`);
  }
  const text = JSON.stringify(filter);
  const bytes = utf8.encode(text);
  if (bytes.length > p.VECTOR_FILTER_BYTES_MAX) {
    throw new RangeError(`a filter is at most ${p.VECTOR_FILTER_BYTES_MAX} bytes of JSON; this one is ${bytes.length}`);
  }
  return bytes;
}

/** VECTOR_HITS keeps its promises: at most `k` hits, each under the prefix and once, best first
 * (equal scores in key order). */
function checkHits(answer: p.VectorHitsAnswer, k: number, prefix: Uint8Array): void {
  if (answer.hits.length > k) throw new ProtocolError(`VECTOR_SEARCH with k ${k} answered ${answer.hits.length} hits`);
  let previous: p.VectorHitRecord | undefined;
  for (const hit of answer.hits) {
    if (!startsWith(hit.key, prefix)) throw new ProtocolError(`VECTOR_SEARCH answered key ${toHex(hit.key)} outside the prefix ${toHex(prefix)}`);
    if (previous !== undefined) {
      const order = compareBytes(previous.key, hit.key);
      if (order === 0) throw new ProtocolError(`VECTOR_SEARCH answered key ${toHex(hit.key)} twice`);
      if (hit.score > previous.score || (hit.score === previous.score && order > 0)) {
        throw new ProtocolError(`VECTOR_SEARCH answered key ${toHex(hit.key)} (score ${hit.score}) after ${toHex(previous.key)} (score ${previous.score}): not best first`);
      }
    }
    previous = hit;
  }
}

/** TURN_HITS keeps its promises: at most `k` hits, each turn once, best first (equal scores in
 * TurnID order), each of the type asked for. */
function checkTurnHits(answer: p.TurnHitsAnswer, k: number, typeTag: bigint | undefined): void {
  if (answer.hits.length > k) throw new ProtocolError(`VECTOR_SEARCH_TURNS with k ${k} answered ${answer.hits.length} hits`);
  const seen = new Set<number>();
  let previous: p.TurnHitRecord | undefined;
  for (const hit of answer.hits) {
    const id = hit.turn.turnId;
    if (seen.has(id)) throw new ProtocolError(`VECTOR_SEARCH_TURNS answered turn ${id} twice`);
    seen.add(id);
    if (typeTag !== undefined && hit.turn.typeTag !== typeTag) {
      throw new ProtocolError(`VECTOR_SEARCH_TURNS for type tag ${typeTag} answered turn ${id} of type tag ${hit.turn.typeTag}`);
    }
    if (previous !== undefined && (hit.score > previous.score || (hit.score === previous.score && id < previous.turn.turnId))) {
      throw new ProtocolError(`VECTOR_SEARCH_TURNS answered turn ${id} (score ${hit.score}) after turn ${previous.turn.turnId} (score ${previous.score}): not best first`);
    }
    previous = hit;
  }
}

function startsWith(data: Uint8Array, prefix: Uint8Array): boolean {
  if (prefix.length > data.length) return false;
  for (let i = 0; i < prefix.length; i++) if (data[i] !== prefix[i]) return false;
  return true;
}

/** A TENANTS page answers at most `limit` tenants, in name order after `after`, and a `next`
 * that advances (names compared as UTF-8 bytes, as the server sorts them). */
function checkTenantPage(page: p.TenantsAnswer, after: string, limit: number): void {
  if (page.tenants.length > limit) throw new ProtocolError(`TENANT_LIST with limit ${limit} answered ${page.tenants.length} tenants`);
  let previous = utf8.encode(after);
  for (const tenant of page.tenants) {
    const name = utf8.encode(tenant.name);
    if (compareBytes(name, previous) <= 0) {
      throw new ProtocolError(`TENANT_LIST after ${JSON.stringify(after)} answered tenant ${JSON.stringify(tenant.name)}: not in name order`);
    }
    previous = name;
  }
  if (page.next.length > 0) {
    const next = utf8.encode(page.next);
    if (compareBytes(next, previous) < 0 || page.next === after) {
      throw new ProtocolError(`TENANT_LIST after ${JSON.stringify(after)} answered next ${JSON.stringify(page.next)}, which does not advance`);
    }
  }
}

function tenantOf(record: p.TenantRecord): Tenant {
  const quota = (value: number): number | undefined => (value === 0 ? undefined : value);
  return {
    name: record.name,
    tenantId: record.tenantId === 0 ? undefined : record.tenantId,
    inTenantsFile: (record.flags & p.TENANT_IN_FILE) !== 0,
    registered: (record.flags & p.TENANT_REGISTERED) !== 0,
    deleted: (record.flags & p.TENANT_DELETED) !== 0,
    rights: p.TENANT_RIGHTS.filter((_, bit) => (record.rights & (1 << bit)) !== 0),
    contexts: record.contexts,
    streamsOpen: record.streamsOpen,
    storedBytes: record.storedBytes,
    connections: record.connections,
    quotaBytes: quota(record.quotaBytes),
    quotaContexts: quota(record.quotaContexts),
    quotaAppendsPerS: quota(record.quotaAppendsPerS),
    quotaConnections: quota(record.quotaConnections),
    quotaStreams: quota(record.quotaStreams),
    quotaRefusals: record.refusals,
  };
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

export { ConnectionLost, CtxstoreError };
