/**
 * Errors of the ctxstore client, the same family as the Python and Rust clients'.
 *
 * Every error derives from {@link CtxstoreError}, which carries `code` (the stable numeric
 * code of docs/protocol.md, or 0 for an error the client raises itself), `codeName`
 * (`"NOT_FOUND"`, or a short name of the client-side condition) and `detail` (the ERROR's
 * detail field: CONFLICT's actual head, ALREADY_EXISTS' ContextID, QUOTA_EXCEEDED's limit,
 * ...).
 *
 * - {@link ServerError} and its subclasses are ERROR answers of the server, one subclass per
 *   code; a code this client does not know yet is a plain ServerError carrying the number.
 * - The others come from the client: {@link ProtocolError} (the server broke the protocol),
 *   {@link IntegrityError} (a payload does not match its BLAKE3 hash or length),
 *   {@link ConnectError}, {@link ConnectionLost}, {@link ConnectTimeout},
 *   {@link RequestTimeout}, {@link ClientClosed}, {@link NotSupported}.
 */

import { ErrorCode } from "./wire.js";

export class CtxstoreError extends Error {
  /** The server's ERROR code, or 0 for an error raised by the client. */
  readonly code: number;
  /** The code's name in docs/protocol.md, or the client-side condition's. */
  readonly codeName: string;
  /** The ERROR's `detail` (CONFLICT: the actual head; ALREADY_EXISTS: the ContextID...), else 0. */
  readonly detail: number;

  constructor(message: string, options: { code?: number; codeName?: string; detail?: number; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = options.code ?? 0;
    this.codeName = options.codeName ?? "CLIENT_ERROR";
    this.detail = options.detail ?? 0;
    this.name = new.target.name;
  }
}

/** An ERROR answer of the server (a subclass per known code). */
export class ServerError extends CtxstoreError {
  constructor(message: string, code: number, detail = 0, codeName = "SERVER_ERROR") {
    super(`${codeName} (${code}): ${message}`, { code, codeName, detail });
  }
}

function serverError(code: number, codeName: string) {
  return class extends ServerError {
    static readonly CODE = code;
    constructor(message: string, detail = 0) {
      super(message, code, detail, codeName);
    }
  };
}

/** BAD_FRAME (1): the server could not parse a frame or body; it closed the connection. */
export class BadFrame extends serverError(ErrorCode.BAD_FRAME, "BAD_FRAME") {}
/** UNKNOWN_MESSAGE (2): the server does not know this message type; the connection stays open. */
export class UnknownMessage extends serverError(ErrorCode.UNKNOWN_MESSAGE, "UNKNOWN_MESSAGE") {}
/** TOO_LARGE (3): a frame, payload, limit or list over the server's limit (also raised by the
 * client, before sending, for a frame the server would refuse). */
export class TooLarge extends serverError(ErrorCode.TOO_LARGE, "TOO_LARGE") {}
/** UNAUTHORIZED (4): a missing or wrong token (or no HELLO first); the connection closed. */
export class Unauthorized extends serverError(ErrorCode.UNAUTHORIZED, "UNAUTHORIZED") {}
/** NOT_FOUND (5): no such context, turn, key or blob. */
export class NotFound extends serverError(ErrorCode.NOT_FOUND, "NOT_FOUND") {}
/** CONFLICT (6): the context's head is not the expected one; `actualHead` is. */
export class Conflict extends serverError(ErrorCode.CONFLICT, "CONFLICT") {
  /** The context's actual head turn (0: the context is empty). */
  get actualHead(): number {
    return this.detail;
  }
}
/** READ_ONLY (7): the store refuses writes (a failed fsync, a standby, a fenced primary, or for
 * now a primary too far ahead of its replica: the message says which); reads go on. */
export class ReadOnly extends serverError(ErrorCode.READ_ONLY, "READ_ONLY") {}
/** NO_SPACE (8): the server's disk is full; reads go on. */
export class NoSpace extends serverError(ErrorCode.NO_SPACE, "NO_SPACE") {}
/** OVERLOADED (9): too many connections; the server closed this one. */
export class Overloaded extends serverError(ErrorCode.OVERLOADED, "OVERLOADED") {}
/** INTERNAL (10): an I/O error or a bug in the server. */
export class Internal extends serverError(ErrorCode.INTERNAL, "INTERNAL") {}
/** INVALID_ARGUMENT (11): a well-formed request the store cannot honour. */
export class InvalidArgument extends serverError(ErrorCode.INVALID_ARGUMENT, "INVALID_ARGUMENT") {}
/** UNSUPPORTED_VERSION (12): no common protocol version; `serverVersion` is the server's. */
export class UnsupportedVersion extends serverError(ErrorCode.UNSUPPORTED_VERSION, "UNSUPPORTED_VERSION") {
  get serverVersion(): number {
    return this.detail;
  }
}
/** SHUTTING_DOWN (13): the server is stopping and takes no new work. */
export class ShuttingDown extends serverError(ErrorCode.SHUTTING_DOWN, "SHUTTING_DOWN") {}
/** CORRUPT (14): stored data failed its checksum; the message names file and offset. */
export class Corrupt extends serverError(ErrorCode.CORRUPT, "CORRUPT") {}
/** ALREADY_EXISTS (15, version 2): the name belongs to another context, `contextId`. */
export class AlreadyExists extends serverError(ErrorCode.ALREADY_EXISTS, "ALREADY_EXISTS") {
  get contextId(): number {
    return this.detail;
  }
}
/** HASH_MISMATCH (16, version 2): bytes sent do not hash to the BlobHash they claim. */
export class HashMismatch extends serverError(ErrorCode.HASH_MISMATCH, "HASH_MISMATCH") {}
/** STREAM_ENDED (17, version 3): the stream was sealed or aborted; takes no more deltas. */
export class StreamEnded extends serverError(ErrorCode.STREAM_ENDED, "STREAM_ENDED") {}
/** STREAM_NOT_OWNED (18, version 3): another connection holds the stream. */
export class StreamNotOwned extends serverError(ErrorCode.STREAM_NOT_OWNED, "STREAM_NOT_OWNED") {}
/** NOT_PRIMARY (19, version 4, decision 0031): this server takes no writes now (a standby, or a
 * primary another took the replica from); nothing was written; the message names the primary's
 * address when known, `epoch` the newest epoch it knows. Send the write to the primary
 * (`role()` says which server is). A server answers a client of version 3 READ_ONLY instead. */
export class NotPrimary extends serverError(ErrorCode.NOT_PRIMARY, "NOT_PRIMARY") {
  get epoch(): number {
    return this.detail;
  }
}
/** UNCONFIRMED (20, version 4, decision 0031): the write is durable on the server but was not
 * acknowledged as it asked (remote); it may or may not survive a failover (`detail`: its TurnID
 * when it has one). Retry with the same idempotency key. Version 3 answers INTERNAL instead. */
export class Unconfirmed extends serverError(ErrorCode.UNCONFIRMED, "UNCONFIRMED") {
  /** The write's TurnID, durable on the server (undefined: the write names none, as a
   * `kvPut`). */
  get turnId(): number | undefined {
    return this.detail === 0 ? undefined : this.detail;
  }
}
/** QUOTA_EXCEEDED (21, version 5, decision 0032): the write would take the connection's tenant
 * past one of its quotas; nothing of it was written and the connection stays open (at HELLO,
 * `quota_connections`, the server closes it). The message names the quota, its limit and the
 * usage (`tenant acme is at its quota_contexts: 100 of 100 contexts`); `limit` is the limit.
 * Retrying does not help until the tenant's usage falls or the operator raises the quota,
 * except for `quota_appends_per_s`, which refills each second. Versions 1–4 answer OVERLOADED
 * instead. */
export class QuotaExceeded extends serverError(ErrorCode.QUOTA_EXCEEDED, "QUOTA_EXCEEDED") {
  /** The quota's limit (the ERROR's `detail`). */
  get limit(): number {
    return this.detail;
  }
}

const ERROR_CLASSES = new Map<number, new (message: string, detail?: number) => ServerError>([
  [1, BadFrame],
  [2, UnknownMessage],
  [3, TooLarge],
  [4, Unauthorized],
  [5, NotFound],
  [6, Conflict],
  [7, ReadOnly],
  [8, NoSpace],
  [9, Overloaded],
  [10, Internal],
  [11, InvalidArgument],
  [12, UnsupportedVersion],
  [13, ShuttingDown],
  [14, Corrupt],
  [15, AlreadyExists],
  [16, HashMismatch],
  [17, StreamEnded],
  [18, StreamNotOwned],
  [19, NotPrimary],
  [20, Unconfirmed],
  [21, QuotaExceeded],
]);

/** Codes after which the server always closes the connection. */
export const CONNECTION_CLOSING_CODES: ReadonlySet<number> = new Set([1, 4, 9, 12]);

/** The error of an ERROR answer: its class by code, ServerError for a code not known yet. */
export function errorForCode(code: number, message: string, detail = 0): ServerError {
  const cls = ERROR_CLASSES.get(code);
  return cls === undefined ? new ServerError(message, code, detail) : new cls(message, detail);
}

/** The server sent bytes that break the protocol; the connection is closed (the next call
 * reconnects). */
export class ProtocolError extends CtxstoreError {
  constructor(message: string, options: { codeName?: string; cause?: unknown } = {}) {
    super(message, { codeName: options.codeName ?? "PROTOCOL_ERROR", cause: options.cause });
  }
}

/** A payload does not match its BLAKE3 hash or length, or its zstd body does not inflate to
 * it. Only the call that read it fails; the connection stays open. */
export class IntegrityError extends ProtocolError {
  constructor(message: string) {
    super(message, { codeName: "INTEGRITY_ERROR" });
  }
}

/** The client could not open a connection (refused, unreachable, closed during HELLO, or the
 * peer is not a ctxstore server). */
export class ConnectError extends CtxstoreError {
  constructor(message: string, cause?: unknown) {
    super(message, { codeName: "CONNECT_ERROR", cause });
  }
}

/** The connection dropped while the call was in flight. The call may or may not have taken
 * effect; the next call reconnects. */
export class ConnectionLost extends CtxstoreError {
  constructor(message: string, cause?: unknown) {
    super(message, { codeName: "CONNECTION_LOST", cause });
  }
}

/** A deadline passed (base of ConnectTimeout and RequestTimeout). */
export class Timeout extends CtxstoreError {}

/** Connecting (TCP and HELLO) took longer than `connectTimeoutMs`. */
export class ConnectTimeout extends Timeout {
  constructor(message: string) {
    super(message, { codeName: "CONNECT_TIMEOUT" });
  }
}

/** No answer within the call's timeout; the request may still run on the server and its late
 * answer is discarded. */
export class RequestTimeout extends Timeout {
  constructor(message: string) {
    super(message, { codeName: "REQUEST_TIMEOUT" });
  }
}

/** The client was closed; create a new one. */
export class ClientClosed extends CtxstoreError {
  constructor(message = "the client was closed") {
    super(message, { codeName: "CLIENT_CLOSED" });
  }
}

/** The request needs a newer protocol version than the one negotiated; nothing was sent. */
export class NotSupported extends CtxstoreError {
  constructor(message: string) {
    super(message, { codeName: "NOT_SUPPORTED" });
  }
}

/** A client of several addresses lost the primary (the connection, no answer in time,
 * SHUTTING_DOWN or UNCONFIRMED) while a write without an idempotency key was in flight
 * (decision 0031 §11): the write **may or may not have landed**, and it is not sent again
 * (that could write it twice). Read back to see; a turn with a `key`, a KV put or a seal is
 * sent again on the new primary instead and lands exactly once. */
export class OutcomeUnknownError extends CtxstoreError {
  constructor(message: string, cause?: unknown) {
    super(message, { codeName: "OUTCOME_UNKNOWN", cause });
  }
}

/** A client of several addresses found none of them taking writes within its
 * `failoverTimeoutMs`. */
export class NoPrimaryError extends CtxstoreError {
  constructor(message: string) {
    super(message, { codeName: "NO_PRIMARY" });
  }
}
