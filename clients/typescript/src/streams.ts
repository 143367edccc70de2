/**
 * Streams (protocol version 3, issue 32, decision 0027): STREAM_OPEN … WATCH (0x0030-0x0036)
 * and STREAM_FOLLOW (0x0038, answered by STREAM_PUSHED frames, `MORE` on all but the last)
 * on the wire — every request built and every answer strictly decoded here, and nowhere else
 * (`protocol.ts` holds the frame and the shared records) — and the stream object `openTurn`
 * returns. Layouts in docs/protocol.md ("Streams"); golden frames in
 * protocol/tests/golden-v3-streams.txt and golden-v3-follow.txt.
 */

import { ProtocolError, StreamEnded } from "./errors.js";
import { decodeBody, MORE, ParentKind, request, RESPONSE_BIT, type ContextRef, type ExtrasRecord, type Reader, type Request, type TurnRecord, type Writer } from "./protocol.js";
import type { Appended } from "./types.js";
import { MessageType } from "./wire.js";

export const StreamsMsgType = {
  STREAM_OPEN: MessageType.STREAM_OPEN,
  STREAM_APPEND: MessageType.STREAM_APPEND,
  STREAM_SEAL: MessageType.STREAM_SEAL,
  STREAM_ABORT: MessageType.STREAM_ABORT,
  STREAM_LIST: MessageType.STREAM_LIST,
  STREAM_READ: MessageType.STREAM_READ,
  WATCH: MessageType.WATCH,
  STREAM_FOLLOW: MessageType.STREAM_FOLLOW,
} as const;

/** The response type of a streams request. */
export const streamsResponse = (msgType: number): number => msgType | RESPONSE_BIT;

/** STREAM_INFO: u64 stream_id, context_id, length, type_tag, u32 codec, u32 0, two times. */
export const STREAM_INFO_BYTES = 56;
/** WATCH_EVENT: u64 seq, u8 kind, u64 context_id, turn_id, stream_id. */
export const WATCH_EVENT_BYTES = 33;
/** One STREAM_APPEND's delta at most (1 MiB). */
export const STREAM_DELTA_BYTES_MAX = 1 << 20;
export const STREAM_LIST_MAX = 1024;
/** The longest wait of one STREAM_READ or WATCH (the server may cut it shorter). */
export const STREAM_WAIT_MS_MAX = 60_000;
export const WATCH_EVENTS_MAX = 1024;
/** `afterSeq` of a WATCH answered at once with no event and the current position. */
export const WATCH_FROM_NOW = (1n << 64n) - 1n;
export const OPEN_SUMMARY = 1 << 0;
export const OPEN_EXPECT_HEAD = 1 << 1;
export const APPEND_AT_OFFSET = 1 << 0;

export const StreamState = { OPEN: 0, SEALED: 1, ABORTED: 2 } as const;
export type StreamState = (typeof StreamState)[keyof typeof StreamState];
export const WatchKind = { HEAD: 1, STREAM_OPENED: 2, STREAM_SEALED: 3, STREAM_ABORTED: 4, TAGS: 5, DELETED: 6 } as const;
export type WatchKind = (typeof WatchKind)[keyof typeof WatchKind];

/** An open stream. */
export interface StreamInfo {
  streamId: number;
  contextId: number;
  /** Bytes acknowledged (durable) so far. */
  length: number;
  typeTag: bigint;
  codec: number;
  openedAtUnixMs: number;
  updatedAtUnixMs: number;
}

/** A STREAM_READ answer: `data` from `offset`; `length` the open stream's; `turnId` the turn a
 * sealed stream became (else 0). */
export interface StreamBytesAnswer {
  streamId: number;
  state: StreamState;
  turnId: number;
  offset: number;
  length: number;
  data: Uint8Array;
}

/** One event of a watch; `turnId` and `streamId` are 0 where its kind has none. */
export interface WatchEvent {
  type: "event";
  seq: number;
  kind: WatchKind;
  contextId: number;
  turnId: number;
  streamId: number;
}

/** The typed "lagged" outcome of a watch: the events after `afterSeq` are no longer kept (the
 * newest 65,536; none from before a restart). Re-read the state; the watch goes on after
 * `resumeAfter`. */
export interface WatchLagged {
  type: "lagged";
  afterSeq: number;
  resumeAfter: number;
}

export interface WatchedAnswer {
  lagged: boolean;
  resumeAfter: number;
  events: WatchEvent[];
}

/** What a WATCH follows: one context, the contexts whose name starts with a prefix, or those
 * with a tag (exactly one). */
export type WatchTarget = { context: ContextRef } | { namePrefix: string } | { tag: readonly [string, string] };

function streamInfo(r: Reader): StreamInfo {
  const streamId = r.u64("stream_id");
  const contextId = r.u64("context_id");
  const length = r.u64("length");
  const typeTag = r.u64Big("type_tag");
  const codec = r.u32("codec");
  r.zero(4, "stream_info reserved");
  return { streamId, contextId, length, typeTag, codec, openedAtUnixMs: r.u64("opened_at_unix_ms"), updatedAtUnixMs: r.u64("updated_at_unix_ms") };
}

export function decodeStreamInfo(r: Reader): StreamInfo {
  return streamInfo(r);
}

export function decodeStreamAppended(r: Reader): { streamId: number; length: number } {
  return { streamId: r.u64("stream_id"), length: r.u64("length") };
}

/** STREAM_SEAL's answer: TURN, u8 deduped (no reserved bytes after). */
export function decodeStreamSealed(r: Reader): { turn: TurnRecord; deduped: boolean } {
  return { turn: r.turn(), deduped: r.boolean("deduped") };
}

export function decodeStreamAborted(r: Reader): number {
  return r.u64("stream_id");
}

export function decodeStreamList(r: Reader): StreamInfo[] {
  const count = r.limit(r.u32("count"), STREAM_LIST_MAX, "count");
  r.count(count, STREAM_INFO_BYTES, "streams");
  return Array.from({ length: count }, () => streamInfo(r));
}

export function decodeStreamBytes(r: Reader): StreamBytesAnswer {
  const streamId = r.u64("stream_id");
  const state = r.u8("state");
  const turnId = r.u64("turn_id");
  if (state > 2 || (state === StreamState.SEALED) !== (turnId !== 0)) throw r.error("state", "unknown, or a turn where none goes");
  const offset = r.u64("offset");
  const length = r.u64("length");
  const data = r.take(r.u32("len"), "bytes");
  if (state !== StreamState.OPEN && data.length > 0) throw r.error("bytes", "an ended stream's answer carries none");
  return { streamId, state: state as StreamState, turnId, offset, length, data };
}

/** One STREAM_PUSHED frame of a STREAM_FOLLOW: STREAM_READ's answer, and whether more frames
 * follow (the frame flag MORE). */
export interface StreamPushed extends StreamBytesAnswer {
  more: boolean;
}

/**
 * A STREAM_PUSHED frame from its frame flags and body. Every frame but the last carries MORE,
 * is of an open stream and holds at least one byte (docs/protocol.md#stream_follow-0x0038);
 * a frame that breaks that is a ProtocolError, as a broken body is.
 */
export function decodeStreamPushed(flags: number, body: Uint8Array): StreamPushed {
  if ((flags & ~MORE) !== 0) throw new ProtocolError(`STREAM_PUSHED has frame flags 0x${flags.toString(16)}; only MORE (0x${MORE.toString(16)}) goes there`);
  const answer = decodeBody("STREAM_PUSHED", body, decodeStreamBytes);
  const more = (flags & MORE) !== 0;
  if (more && (answer.state !== StreamState.OPEN || answer.data.length === 0)) {
    throw new ProtocolError(`STREAM_PUSHED of stream ${answer.streamId} at ${answer.offset} carries MORE with ${answer.data.length} bytes in state ${answer.state}: a frame with MORE is an open stream's and holds bytes`);
  }
  return { ...answer, more };
}

export function decodeWatched(r: Reader): WatchedAnswer {
  const lagged = r.boolean("lagged");
  const resumeAfter = r.u64("resume_after");
  const count = r.limit(r.u32("count"), WATCH_EVENTS_MAX, "count");
  r.count(count, WATCH_EVENT_BYTES, "events");
  const events: WatchEvent[] = [];
  for (let i = 0; i < count; i++) {
    const seq = r.u64("seq");
    const kind = r.u8("kind");
    if (kind < 1 || kind > 6) throw r.error("kind", `unknown watch event kind ${kind}`);
    events.push({ type: "event", seq, kind: kind as WatchKind, contextId: r.u64("context_id"), turnId: r.u64("turn_id"), streamId: r.u64("stream_id") });
  }
  if (lagged && events.length > 0) throw r.error("lagged", "a lagged answer carries no events");
  return { lagged, resumeAfter, events };
}

export interface StreamOpenFields {
  context: ContextRef;
  expectedHead?: number;
  parentKind: ParentKind;
  parentTurnId: number;
  typeTag: bigint;
  codec: number;
  summary: boolean;
  extras: ExtrasRecord;
}

export function streamOpen(fields: StreamOpenFields): Request<StreamInfo> {
  if ((fields.parentKind === ParentKind.TURN) !== (fields.parentTurnId !== 0)) throw new RangeError("parentTurnId is set with parent kind TURN only (and 0 is no turn)");
  return request("STREAM_OPEN", StreamsMsgType.STREAM_OPEN, 3, (w) => {
    const flags = (fields.summary ? OPEN_SUMMARY : 0) | (fields.expectedHead === undefined ? 0 : OPEN_EXPECT_HEAD);
    w.contextRef(fields.context).u8(flags).u64(fields.expectedHead ?? 0).u8(fields.parentKind).u64(fields.parentTurnId).u64(fields.typeTag).u32(fields.codec).extras(fields.extras);
  }, decodeStreamInfo);
}

/** STREAM_APPEND: 1 byte to 1 MiB; `offset`: only there (AT_OFFSET). */
export function streamAppend(streamId: number, offset: number | undefined, data: Uint8Array): Request<{ streamId: number; length: number }> {
  if (data.length < 1 || data.length > STREAM_DELTA_BYTES_MAX) throw new RangeError(`a delta is 1 to ${STREAM_DELTA_BYTES_MAX} bytes, not ${data.length}`);
  return request("STREAM_APPEND", StreamsMsgType.STREAM_APPEND, 3, (w) => {
    w.u64(streamId).u8(offset === undefined ? 0 : APPEND_AT_OFFSET).u64(offset ?? 0).u32(data.length).bytes(data);
  }, decodeStreamAppended);
}

export function streamSeal(streamId: number): Request<{ turn: TurnRecord; deduped: boolean }> {
  return request("STREAM_SEAL", StreamsMsgType.STREAM_SEAL, 3, (w) => w.u64(streamId), decodeStreamSealed);
}

export function streamAbort(streamId: number): Request<number> {
  return request("STREAM_ABORT", StreamsMsgType.STREAM_ABORT, 3, (w) => w.u64(streamId), decodeStreamAborted);
}

export function streamList(context: ContextRef, afterStreamId: number, limit: number): Request<StreamInfo[]> {
  if (limit < 1 || limit > STREAM_LIST_MAX) throw new RangeError(`limit is 1 to ${STREAM_LIST_MAX}, not ${limit}`);
  return request("STREAM_LIST", StreamsMsgType.STREAM_LIST, 3, (w) => w.contextRef(context).u64(afterStreamId).u32(limit), decodeStreamList);
}

function checkWait(waitMs: number): void {
  if (!Number.isInteger(waitMs) || waitMs < 0 || waitMs > STREAM_WAIT_MS_MAX) throw new RangeError(`waitMs is 0 to ${STREAM_WAIT_MS_MAX}, not ${waitMs}`);
}

export function streamRead(streamId: number, offset: number, bytesMax: number, waitMs: number): Request<StreamBytesAnswer> {
  if (bytesMax < 1) throw new RangeError(`bytesMax is at least 1, not ${bytesMax}`);
  checkWait(waitMs);
  return request("STREAM_READ", StreamsMsgType.STREAM_READ, 3, (w) => w.u64(streamId).u64(offset).u32(bytesMax).u32(waitMs), decodeStreamBytes);
}

/** STREAM_FOLLOW: STREAM_READ's request, answered by STREAM_PUSHED frames (each decoded with
 * {@link decodeStreamPushed}: the connection hands each frame's flags and body to the caller).
 * `bytesMax` is per frame; `waitMs` (0 to 60,000) is how long the follow lasts without a delta. */
export function streamFollow(streamId: number, offset: number, bytesMax: number, waitMs: number): Request<StreamBytesAnswer> {
  if (bytesMax < 1) throw new RangeError(`bytesMax is at least 1, not ${bytesMax}`);
  checkWait(waitMs);
  return request("STREAM_FOLLOW", StreamsMsgType.STREAM_FOLLOW, 3, (w) => w.u64(streamId).u64(offset).u32(bytesMax).u32(waitMs), decodeStreamBytes);
}

function watchTarget(w: Writer, target: WatchTarget): void {
  if ("context" in target) w.u8(0).contextRef(target.context);
  else if ("namePrefix" in target) w.u8(1).shortStr(target.namePrefix, "name prefix");
  else w.u8(2).shortStr(target.tag[0], "tag key").shortStr(target.tag[1], "tag value");
}

export function watch(target: WatchTarget, afterSeq: number | bigint, maxEvents: number, waitMs: number): Request<WatchedAnswer> {
  if (maxEvents < 1 || maxEvents > WATCH_EVENTS_MAX) throw new RangeError(`maxEvents is 1 to ${WATCH_EVENTS_MAX}, not ${maxEvents}`);
  checkWait(waitMs);
  return request("WATCH", StreamsMsgType.WATCH, 3, (w) => {
    watchTarget(w, target);
    w.u64(afterSeq).u32(maxEvents).u32(waitMs);
  }, decodeWatched);
}

/** How a stream object runs its requests (the client's connection and timeout). */
export type RunRequest = <R>(request: Request<R>) => Promise<R>;

/**
 * An open stream (`Client.openTurn`): `append` deltas, then `seal` (one ordinary turn) or
 * `abort`. Each delta is sent at the stream's length (AT_OFFSET), so an `append` that threw
 * ConnectionLost may be repeated as it is: the delta is written once (the next connection
 * takes the stream over).
 */
export class TurnStream {
  /** Bytes acknowledged (durable) so far. */
  length: number;
  status: "open" | "sealed" | "aborted" = "open";
  /** The turn, once `seal` returned. */
  sealed: Appended | undefined;

  constructor(
    readonly info: StreamInfo,
    private readonly run: RunRequest,
    private readonly finishSeal: (answer: { turn: TurnRecord; deduped: boolean }) => Appended,
  ) {
    this.length = info.length;
  }

  get streamId(): number {
    return this.info.streamId;
  }

  private checkOpen(what: string): void {
    if (this.status !== "open") {
      throw new StreamEnded(`${what}: stream ${this.streamId} was ${this.status} by this object`, this.sealed?.turn.turnId ?? 0);
    }
  }

  /** Appends a delta (1 byte to 1 MiB); the stream's length once it is durable. */
  async append(data: Uint8Array): Promise<number> {
    this.checkOpen("append");
    const offset = this.length;
    const answer = await this.run(streamAppend(this.streamId, offset, data));
    if (answer.streamId !== this.streamId || answer.length !== offset + data.length) {
      throw new ProtocolError(`STREAM_APPEND to stream ${this.streamId} at ${offset} was answered: stream ${answer.streamId}, length ${answer.length}`);
    }
    this.length = answer.length;
    return this.length;
  }

  /** Seals the stream into one turn; Conflict on a stale expected head (it stays open). */
  async seal(): Promise<Appended> {
    this.checkOpen("seal");
    const appended = this.finishSeal(await this.run(streamSeal(this.streamId)));
    this.sealed = appended;
    this.status = "sealed";
    return appended;
  }

  /** Aborts the stream: it never becomes a turn. */
  async abort(): Promise<void> {
    this.checkOpen("abort");
    await this.run(streamAbort(this.streamId));
    this.status = "aborted";
  }
}
