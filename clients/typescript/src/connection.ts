/**
 * One TCP connection after HELLO: requests are pipelined (up to the server's in-flight limit
 * and the client's), each with its own `req_id`; answers come in completion order and are
 * matched by it. No call hangs: each has a deadline, a dropped connection fails every call in
 * flight with ConnectionLost, and a frame that breaks the protocol fails the connection with
 * ProtocolError (framing cannot be trusted after it). Every rejection is delivered to the
 * promise of a call that someone awaits; the connection itself never leaves a rejected
 * promise unobserved.
 *
 * A STREAM_FOLLOW is answered by several frames with its req_id (`follow`): its route queues
 * each frame (at most `followFramesQueuedMax` untaken; past them the connection stops
 * reading its socket) and ends at the frame without the flag MORE, or an ERROR.
 */

import net from "node:net";

import {
  ClientClosed,
  CONNECTION_CLOSING_CODES,
  ConnectError,
  ConnectionLost,
  ConnectTimeout,
  CtxstoreError,
  errorForCode,
  NotSupported,
  ProtocolError,
  RequestTimeout,
  TooLarge,
} from "./errors.js";
import {
  ACK_AFTER_MASK,
  ACK_AFTER_NAMES,
  ACK_AFTER_SHIFT,
  decodeBody,
  decodeError,
  decodeHeader,
  encodeRequest,
  ERROR_TYPE,
  FRAME_BYTES_LIMIT,
  HEADER_BYTES,
  hello,
  MORE,
  OVERLAYS,
  type Request,
  RESPONSE_BIT,
} from "./protocol.js";
import type { ServerInfo, VerifyPayloads } from "./types.js";

/** A request answered by one frame. */
interface Pending {
  kind: "once";
  request: Request<unknown>;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout | undefined;
}

/** A STREAM_FOLLOW: answered by frames until the one without MORE (or an ERROR). */
interface FollowRoute {
  kind: "follow";
  request: Request<unknown>;
  follow: Follow<{ more: boolean }>;
  decodeFrame: (flags: number, body: Uint8Array) => { more: boolean };
}

/** Where the answers to a req_id go. */
type Route = Pending | FollowRoute;

/**
 * Frames of one follow the connection holds that its caller has not taken (the default of
 * `followFramesQueuedMax`). Past them the connection stops reading its socket (every answer
 * waits, as in the Rust transport): TCP then pushes back on the server, which stops pushing
 * and drops nothing (the bytes wait in the stream, docs/protocol.md#stream_follow-0x0038),
 * rather than the client buffering without bound. 64 frames of up to `bytesMax` each, the
 * Rust client's FOLLOW_FRAMES_QUEUED_MAX.
 */
export const DEFAULT_FOLLOW_FRAMES_QUEUED_MAX = 64;

/** What the connection sees of a follow's queue. */
interface FollowQueue {
  readonly queued: number;
  readonly draining: boolean;
}

/** What a follow needs of its connection. */
interface FollowHost {
  /** Whether the connection has stopped reading its socket (some follow's queue is full). */
  readonly readingPaused: boolean;
  /** The caller took a frame (or stopped): the connection may read again. */
  taken(follow: FollowQueue): void;
  /** The follow timed out: its route and in-flight slot go; later frames are dropped. */
  forget(reqId: bigint): void;
}

/**
 * The frames of one STREAM_FOLLOW as they come (`next`), the last one without MORE; then
 * `undefined`. An ERROR answer, the connection's failure or a frame timeout is thrown by
 * `next` after the frames that came before it. `stop` when no more frames are wanted: the
 * connection then drops this follow's frames until the last one, which frees its in-flight
 * slot (the server counts the follow in flight until then too).
 */
export class Follow<T extends { more: boolean }> implements FollowQueue {
  private readonly queue: T[] = [];
  private failure: Error | undefined;
  /** The last frame (or a failure) arrived: nothing more is queued. */
  private ended = false;
  private stopped = false;
  private waiter: { resolve: (frame: T | undefined) => void; reject: (error: Error) => void } | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly host: FollowHost,
    readonly reqId: bigint,
    private readonly name: string,
    /** How long the follow may go without a frame: the call's timeout plus its wait. */
    private readonly frameTimeoutMs: number,
  ) {
    this.arm();
  }

  /** Frames received and not yet taken. */
  get queued(): number {
    return this.queue.length;
  }

  /** Whether the caller no longer takes frames. */
  get draining(): boolean {
    return this.stopped;
  }

  /** The next frame, or `undefined` after the last one. */
  next(): Promise<T | undefined> {
    if (this.waiter !== undefined) return Promise.reject(new Error(`${this.name}: next() while an earlier next() is still pending`));
    const frame = this.queue.shift();
    if (frame !== undefined) {
      this.host.taken(this);
      return Promise.resolve(frame);
    }
    if (this.failure !== undefined) {
      const failure = this.failure;
      this.failure = undefined;
      return Promise.reject(failure);
    }
    if (this.ended || this.stopped) return Promise.resolve(undefined);
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
    });
  }

  /** Takes no more frames: the ones queued and to come are dropped. */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.queue.length = 0;
    this.failure = undefined;
    const waiter = this.waiter;
    this.waiter = undefined;
    waiter?.resolve(undefined);
    this.host.taken(this);
  }

  /** A frame for this follow (the connection's side). */
  push(frame: T): void {
    if (!frame.more) this.finish(undefined);
    else this.arm();
    if (this.stopped) return;
    const waiter = this.waiter;
    this.waiter = undefined;
    if (waiter !== undefined) waiter.resolve(frame);
    else this.queue.push(frame);
  }

  /** The follow ended without its last frame (`error`), or after it (the connection's side). */
  finish(error: Error | undefined): void {
    if (this.ended) return;
    this.ended = true;
    clearTimeout(this.timer);
    if (this.stopped || error === undefined) return;
    const waiter = this.waiter;
    this.waiter = undefined;
    if (waiter !== undefined) waiter.reject(error);
    else this.failure = error;
  }

  private arm(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      // Frames waiting for the caller, or a paused socket, are not the server's silence.
      if (this.queue.length > 0 || this.host.readingPaused) {
        this.arm();
        return;
      }
      this.host.forget(this.reqId);
      this.finish(new RequestTimeout(`${this.name}: no frame within ${this.frameTimeoutMs} ms (the call's timeout plus its wait)`));
    }, this.frameTimeoutMs);
  }
}

export interface ConnectOptions {
  host: string;
  port: number;
  token: Uint8Array;
  versions: readonly [number, number];
  clientName: string;
  connectTimeoutMs: number;
  /** The largest answer frame accepted (a larger header fails the connection). */
  frameBytesMax: number;
  maxInFlight: number;
  verifyPayloads: VerifyPayloads;
  /** Frames of one follow held untaken before the connection stops reading its socket. */
  followFramesQueuedMax: number;
}

/** Whether `address` (as `socket.remoteAddress` reports it) is a loopback address:
 * 127.0.0.0/8, ::1, or 127.0.0.0/8 mapped into IPv6. Anything else (a name, undefined) is not. */
export function isLoopback(address: string | undefined): boolean {
  if (address === undefined) return false;
  const v4 = address.startsWith("::ffff:") ? address.slice(7) : address;
  if (net.isIPv4(v4)) return v4.split(".")[0] === "127";
  return net.isIPv6(address) && (address === "::1" || address === "0:0:0:0:0:0:0:1");
}

/** Incoming bytes, kept as the chunks the socket gave, cut into frames without copying a
 * frame that lies within one chunk. */
class Inbox {
  private chunks: Uint8Array[] = [];
  private length = 0;

  push(chunk: Buffer): void {
    // A plain Uint8Array view: Buffer's slice() would share memory where a copy is meant.
    this.chunks.push(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    this.length += chunk.length;
  }

  get size(): number {
    return this.length;
  }

  /** The first `count` bytes, without consuming them. */
  peek(count: number): Uint8Array {
    const first = this.chunks[0]!;
    if (first.length >= count) return first.subarray(0, count);
    return this.gather(count, false);
  }

  /** Takes the first `count` bytes. */
  take(count: number): Uint8Array {
    const first = this.chunks[0];
    if (first !== undefined && first.length >= count) {
      const out = first.subarray(0, count);
      if (first.length === count) this.chunks.shift();
      else this.chunks[0] = first.subarray(count);
      this.length -= count;
      return out;
    }
    return this.gather(count, true);
  }

  private gather(count: number, consume: boolean): Uint8Array {
    const out = new Uint8Array(count);
    let at = 0;
    let index = 0;
    while (at < count) {
      const chunk = this.chunks[index]!;
      const part = Math.min(chunk.length, count - at);
      out.set(chunk.subarray(0, part), at);
      at += part;
      if (consume) {
        if (part === chunk.length) this.chunks.shift();
        else this.chunks[0] = chunk.subarray(part);
      } else {
        index++;
      }
    }
    if (consume) this.length -= count;
    return out;
  }
}

export class Connection {
  /** Whether RAW payloads read on this connection are hashed (decision 0015). */
  readonly hashesRaw: boolean;
  private readonly pending = new Map<bigint, Route>();
  /** Follows whose queue is full: while there is one, the socket is not read. */
  private readonly fullFollows = new Set<FollowQueue>();
  private pumping = false;
  private readonly inbox = new Inbox();
  private nextId = 2n; // 1 was HELLO
  private dead: CtxstoreError | undefined;
  private inFlight = 0;
  private readonly slotWaiters: Array<() => void> = [];
  private readonly slots: number;

  private constructor(
    private readonly socket: net.Socket,
    readonly info: ServerInfo,
    private readonly frameBytesMax: number,
    maxInFlight: number,
    verifyPayloads: VerifyPayloads,
    private readonly followFramesQueuedMax: number,
  ) {
    this.hashesRaw = verifyPayloads === "always" || !isLoopback(socket.remoteAddress);
    this.slots = Math.max(1, Math.min(maxInFlight, info.requestsInFlightMax || 1));
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("close", () => this.fail(new ConnectionLost("the server closed the connection")));
    socket.on("error", (error: Error) => this.fail(new ConnectionLost(`connection error: ${error.message}`, error)));
    socket.on("drain", () => this.onDrain());
  }

  get alive(): boolean {
    return this.dead === undefined;
  }

  /** Bytes read from the socket so far (HELLO's answer included). */
  get bytesReceived(): number {
    return this.socket.bytesRead;
  }

  /** Bytes written to the socket so far (HELLO included). */
  get bytesSent(): number {
    return this.socket.bytesWritten;
  }

  /** Connects and says HELLO before the connect timeout. */
  static open(options: ConnectOptions): Promise<Connection> {
    return new Promise<Connection>((resolve, reject) => {
      const where = `${options.host}:${options.port}`;
      const socket = net.connect({ host: options.host, port: options.port, noDelay: true });
      let settled = false;
      const inbox = new Inbox();
      const finish = (error: CtxstoreError | undefined, info?: ServerInfo): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        socket.removeAllListeners();
        if (error !== undefined) {
          socket.on("error", () => undefined); // a late error of a socket given up on
          socket.destroy();
          reject(error);
        } else {
          resolve(new Connection(socket, info!, options.frameBytesMax, options.maxInFlight, options.verifyPayloads, options.followFramesQueuedMax));
        }
      };
      const timer = setTimeout(() => {
        finish(new ConnectTimeout(`connecting to ${where} (TCP and HELLO) timed out after ${options.connectTimeoutMs} ms`));
      }, options.connectTimeoutMs);
      socket.on("error", (error: Error) => {
        finish(new ConnectError(`cannot connect to ${where}: ${error.message}`, error));
      });
      socket.on("close", () => {
        finish(new ConnectError(`the server ${where} closed the connection during HELLO (is it a ctxstore server?)`));
      });
      const request = hello(options.versions[0], options.versions[1], options.token, options.clientName);
      socket.on("connect", () => {
        // A refusing server (OVERLOADED) may close before reading this: its ERROR is read all
        // the same (an EPIPE only ends the write).
        for (const chunk of encodeRequest(1n, request)) socket.write(chunk);
      });
      socket.on("data", (chunk: Buffer) => {
        inbox.push(chunk);
        if (inbox.size < HEADER_BYTES) return;
        let header;
        try {
          header = decodeHeader(inbox.peek(HEADER_BYTES));
          if (header.len > Math.min(options.frameBytesMax, 1 << 20)) {
            throw new ProtocolError(`the answer to HELLO is a frame of ${header.len} bytes: ${where} does not speak the ctxstore protocol`);
          }
          if (header.flags !== 0) throw new ProtocolError(`the answer to HELLO has frame flags 0x${header.flags.toString(16)}`);
        } catch (error) {
          finish(asConnectError(error, where));
          return;
        }
        if (inbox.size < HEADER_BYTES + header.len) return;
        inbox.take(HEADER_BYTES);
        const body = inbox.take(header.len);
        try {
          if (header.msgType === ERROR_TYPE) {
            const answer = decodeBody("ERROR", body, decodeError);
            throw errorForCode(answer.code, answer.message, answer.detail);
          }
          if (header.reqId !== 1n) throw new ProtocolError(`HELLO was answered with req_id ${header.reqId}`);
          if (header.msgType !== request.msgType + RESPONSE_BIT) {
            throw new ProtocolError(`HELLO was answered with message type 0x${header.msgType.toString(16)}: ${where} does not speak the ctxstore protocol`);
          }
          const answer = decodeBody("HELLO response", body, request.decode);
          if (answer.version < options.versions[0] || answer.version > options.versions[1]) {
            throw new ProtocolError(
              `the server chose protocol version ${answer.version}, outside the offered ${options.versions[0]}..=${options.versions[1]}`,
            );
          }
          if (inbox.size > 0) throw new ProtocolError("the server sent bytes after its HELLO answer before any request");
          const info: ServerInfo = {
            version: answer.version,
            serverName: answer.serverName,
            frameBytesMax: answer.frameBytesMax,
            requestsInFlightMax: answer.requestsInFlightMax,
            blobBytesMax: answer.blobBytesMax,
            readTurnsMax: answer.readTurnsMax,
            hasBlobsMax: answer.hasBlobsMax,
          };
          finish(undefined, info);
        } catch (error) {
          finish(asConnectError(error, where));
        }
      });
    });
  }

  private onData(chunk: Buffer): void {
    if (this.dead !== undefined) return;
    this.inbox.push(chunk);
    this.pump();
  }

  /** Whether the socket is not read: a follow's queue is full. */
  get readingPaused(): boolean {
    return this.fullFollows.size > 0;
  }

  /** Dispatches the whole frames in the inbox, until a follow's queue is full. */
  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.dead === undefined && !this.readingPaused && this.inbox.size >= HEADER_BYTES) {
        const header = decodeHeader(this.inbox.peek(HEADER_BYTES));
        const limit = Math.min(this.frameBytesMax, FRAME_BYTES_LIMIT);
        if (header.len > limit) throw new ProtocolError(`a frame of ${header.len} bytes exceeds the limit of ${limit} bytes`);
        // MORE is checked where the route is known: only a follow's frames may carry it.
        if ((header.flags & ~(OVERLAYS | MORE)) !== 0) {
          throw new ProtocolError(`frame flags 0x${header.flags.toString(16)} have bits an answer cannot carry`);
        }
        if (this.inbox.size < HEADER_BYTES + header.len) return;
        this.inbox.take(HEADER_BYTES);
        const body = this.inbox.take(header.len);
        this.dispatch(header.msgType, header.flags, header.reqId, body);
      }
    } catch (error) {
      this.fail(error instanceof CtxstoreError ? error : new ProtocolError(String(error)));
    } finally {
      this.pumping = false;
    }
  }

  /** A follow's caller took a frame or stopped: read again once no queue is full. */
  taken(follow: FollowQueue): void {
    if (follow.queued >= this.followFramesQueuedMax && !follow.draining) return;
    if (!this.fullFollows.delete(follow) || this.readingPaused || this.dead !== undefined) return;
    this.socket.resume();
    this.pump();
  }

  /** Forgets a follow's route (it timed out): its slot is free, late frames are dropped. */
  forget(reqId: bigint): void {
    const entry = this.pending.get(reqId);
    if (entry === undefined) return;
    this.pending.delete(reqId);
    this.release(entry);
  }

  private dispatch(msgType: number, flags: number, reqId: bigint, body: Uint8Array): void {
    if (msgType === ERROR_TYPE && (flags & MORE) !== 0) throw new ProtocolError(`an ERROR (req_id ${reqId}) with the frame flag MORE: an ERROR is always the last answer`);
    const entry = this.pending.get(reqId);
    if (entry === undefined) {
      if (reqId === 0n && msgType === ERROR_TYPE) {
        const answer = decodeBody("ERROR", body, decodeError);
        throw errorForCode(answer.code, answer.message, answer.detail);
      }
      if (reqId > 0n && reqId < this.nextId) return; // the late answer to a call that gave up
      throw new ProtocolError(`an answer to req_id ${reqId}, which was never sent`);
    }
    if (entry.kind === "follow") {
      this.dispatchFollow(entry, msgType, flags, reqId, body);
      return;
    }
    this.pending.delete(reqId);
    this.release(entry);
    const { request } = entry;
    if (msgType === ERROR_TYPE) {
      this.answerError(body, entry.reject);
      return;
    }
    if (msgType !== (request.msgType | RESPONSE_BIT) || (flags & ~request.flags) !== 0) {
      const error = new ProtocolError(
        `${request.name} (req_id ${reqId}) was answered with message type 0x${msgType.toString(16)} and flags 0x${flags.toString(16)}`,
      );
      entry.reject(error);
      throw error;
    }
    if ((request.flags & OVERLAYS) !== 0 && (flags & OVERLAYS) === 0) {
      const error = new ProtocolError(`${request.name} asked for an overlay view; its answer has none`);
      entry.reject(error);
      throw error;
    }
    let answer: unknown;
    try {
      answer = decodeBody(`${request.name} answer`, body, request.decode);
    } catch (error) {
      entry.reject(error as Error);
      throw error;
    }
    entry.resolve(answer);
  }

  /** An ERROR answering a request: its typed error to `end` (a broken body is a
   * ProtocolError, thrown too: it fails the connection); a code that closes the connection
   * fails it. */
  private answerError(body: Uint8Array, end: (error: Error) => void): void {
    let answer;
    try {
      answer = decodeBody("ERROR", body, decodeError);
    } catch (error) {
      end(error as Error);
      throw error;
    }
    const error = errorForCode(answer.code, answer.message, answer.detail);
    end(error);
    if (CONNECTION_CLOSING_CODES.has(answer.code)) this.fail(error);
  }

  /** A frame of a follow: queued (dropped once its caller stopped); the route and the
   * in-flight slot end with the frame without MORE, or an ERROR. */
  private dispatchFollow(entry: FollowRoute, msgType: number, flags: number, reqId: bigint, body: Uint8Array): void {
    const { request, follow } = entry;
    const last = msgType === ERROR_TYPE || (flags & MORE) === 0;
    if (last) {
      this.pending.delete(reqId);
      this.release(entry);
    }
    if (msgType === ERROR_TYPE) {
      this.answerError(body, (error) => follow.finish(error));
      return;
    }
    let frame;
    try {
      if (msgType !== (request.msgType | RESPONSE_BIT)) {
        throw new ProtocolError(`${request.name} (req_id ${reqId}) was answered with message type 0x${msgType.toString(16)} and flags 0x${flags.toString(16)}`);
      }
      frame = entry.decodeFrame(flags, body);
    } catch (error) {
      follow.finish(error as Error);
      throw error;
    }
    follow.push(frame);
    if (follow.queued >= this.followFramesQueuedMax) {
      this.fullFollows.add(follow);
      this.socket.pause();
    }
  }

  private release(entry: Route): void {
    if (entry.kind === "once" && entry.timer !== undefined) clearTimeout(entry.timer);
    this.inFlight--;
    this.slotWaiters.shift()?.();
  }

  private drainWaiters: Array<() => void> = [];

  private onDrain(): void {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const wake of waiters) wake();
  }

  /** Ends the connection: every call in flight fails with `reason` (as ConnectionLost unless
   * it already says why: a server error that closes, a protocol error, the client's close). */
  fail(reason: CtxstoreError): void {
    if (this.dead !== undefined) return;
    this.dead = reason;
    this.socket.destroy();
    const lost = reason instanceof ConnectionLost || reason instanceof ClientClosed || reason instanceof ProtocolError
      ? reason
      : new ConnectionLost(`the connection ended: ${reason.message}`, reason);
    for (const entry of this.pending.values()) {
      if (entry.kind === "follow") {
        entry.follow.finish(lost); // after the frames it holds: they came before the loss
        continue;
      }
      if (entry.timer !== undefined) clearTimeout(entry.timer);
      entry.reject(lost);
    }
    this.pending.clear();
    this.fullFollows.clear();
    for (const wake of this.slotWaiters.splice(0)) wake();
    this.onDrain();
  }

  /** Sends `request` and waits for its answer until `deadline` (Date.now() milliseconds). */
  async call<R>(request: Request<R>, deadline: number): Promise<R> {
    const { reqId, chunks } = await this.begin(request, deadline);
    const answer = new Promise<R>((resolve, reject) => {
      const remaining = Math.max(0, deadline - Date.now());
      const timer = setTimeout(() => {
        const entry = this.pending.get(reqId);
        if (entry === undefined) return;
        this.pending.delete(reqId);
        this.release(entry);
        reject(new RequestTimeout(`${request.name}: no answer within the call's timeout`));
      }, remaining);
      this.pending.set(reqId, { kind: "once", request, resolve: resolve as (v: unknown) => void, reject, timer });
    });
    if (!this.write(chunks) && this.dead === undefined) {
      // Backpressure: the kernel's buffer is full; wait for it (the answer may come first).
      await Promise.race([answer.then(() => undefined, () => undefined), new Promise<void>((wake) => this.drainWaiters.push(wake))]);
    }
    return answer;
  }

  /**
   * Sends a STREAM_FOLLOW (`request`, sent by `deadline`) and returns its frames, each decoded
   * by `decodeFrame` from its flags and body; the follow ends at the frame without MORE. It
   * holds an in-flight slot until that frame (or an ERROR, the connection's end, or
   * `frameTimeoutMs` without a frame).
   */
  async follow<T extends { more: boolean }>(
    request: Request<unknown>,
    decodeFrame: (flags: number, body: Uint8Array) => T,
    deadline: number,
    frameTimeoutMs: number,
  ): Promise<Follow<T>> {
    const { reqId, chunks } = await this.begin(request, deadline);
    const follow = new Follow<T>(this, reqId, request.name, frameTimeoutMs);
    // Stored with its frame type erased: the route only hands `decodeFrame`'s frames to it.
    this.pending.set(reqId, { kind: "follow", request, follow: follow as unknown as Follow<{ more: boolean }>, decodeFrame });
    if (!this.write(chunks) && this.dead === undefined) {
      await new Promise<void>((wake) => this.drainWaiters.push(wake)); // fail() wakes it too
    }
    return follow;
  }

  private write(chunks: Uint8Array[]): boolean {
    let flushed = true;
    if (chunks.length > 1) this.socket.cork();
    for (const chunk of chunks) flushed = this.socket.write(chunk);
    if (chunks.length > 1) this.socket.uncork();
    return flushed;
  }

  /** Checks `request` against the connection, takes an in-flight slot and a req_id, and
   * encodes the frame: what is left is to route its answer and write it. */
  private async begin(request: Request<unknown>, deadline: number): Promise<{ reqId: bigint; chunks: Uint8Array[] }> {
    if (request.minVersion > this.info.version) {
      const acked = (request.flags & ACK_AFTER_MASK) >> ACK_AFTER_SHIFT;
      const durability = acked !== 0 ? ` with durability ${JSON.stringify(ACK_AFTER_NAMES[acked])} (ACK_AFTER)` : "";
      throw new NotSupported(
        `${request.name}${(request.flags & 1) !== 0 ? " of a context by name" : ""}${durability} needs protocol version ${request.minVersion}; ` +
          `the server ${JSON.stringify(this.info.serverName)} negotiated version ${this.info.version} (nothing was sent)`,
      );
    }
    let bodyBytes = 0;
    for (const chunk of request.body) bodyBytes += chunk.length;
    if (bodyBytes > this.info.frameBytesMax) {
      throw new TooLarge(
        `${request.name} frame of ${bodyBytes} bytes is over the server's frame limit of ${this.info.frameBytesMax} bytes (checked by the client, not sent)`,
      );
    }
    await this.slot(request, deadline);
    if (this.dead !== undefined) {
      this.inFlight--;
      this.slotWaiters.shift()?.();
      throw this.dead instanceof ClientClosed ? this.dead : new ConnectionLost(`the connection ended: ${this.dead.message}`, this.dead);
    }
    const reqId = this.nextId++;
    // Encoded before the answer's promise exists: nothing can leave that promise unobserved.
    let chunks: Uint8Array[];
    try {
      chunks = encodeRequest(reqId, request);
    } catch (error) {
      this.inFlight--;
      this.slotWaiters.shift()?.();
      throw error;
    }
    return { reqId, chunks };
  }

  private slot(request: Request<unknown>, deadline: number): Promise<void> {
    if (this.inFlight < this.slots) {
      this.inFlight++;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const wake = (): void => {
        clearTimeout(timer);
        this.inFlight++;
        resolve();
      };
      const timer = setTimeout(() => {
        const index = this.slotWaiters.indexOf(wake);
        if (index >= 0) this.slotWaiters.splice(index, 1);
        reject(new RequestTimeout(`${request.name}: no free in-flight slot before the deadline (${this.slots} requests in flight)`));
      }, Math.max(0, deadline - Date.now()));
      this.slotWaiters.push(wake);
    });
  }

  close(reason: CtxstoreError = new ClientClosed()): void {
    this.fail(reason);
  }
}

function asConnectError(error: unknown, where: string): CtxstoreError {
  if (error instanceof CtxstoreError) return error;
  return new ConnectError(`HELLO with ${where} failed: ${String(error)}`, error);
}

export const DEFAULT_FRAME_BYTES_MAX = FRAME_BYTES_LIMIT;
