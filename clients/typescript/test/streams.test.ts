/**
 * Streams (protocol version 3, issue 32) from TypeScript: every frame of
 * protocol/tests/golden-v3-streams.txt encoded and decoded byte for byte, and against a real
 * ctxstore-server `openTurn` (append, seal, abort), `streams`, `readStream` (now and
 * following; resumed exactly once across a server restart), `watch` (by context, prefix and
 * tag; resumed after a sequence number; lagged after a restart) and the typed errors
 * STREAM_ENDED, STREAM_NOT_OWNED, TOO_LARGE and CONFLICT.
 */

import { afterAll, beforeAll, describe, expect, test } from "vitest";

import { Client, Conflict, ConnectionLost, NotFound, StreamEnded, StreamNotOwned, TooLarge, WatchKind, type WatchEvent, type WatchLagged } from "../src/index.js";
import * as p from "../src/protocol.js";
import * as s from "../src/streams.js";
import { goldenFrames } from "./golden-frames.js";
import { Server } from "./server.js";

const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);
const text = (data: Uint8Array): string => new TextDecoder().decode(data);
const concat = (parts: Uint8Array[]): Uint8Array => Uint8Array.from(parts.flatMap((part) => [...part]));
const unique = (what: string): string => `${what}-${Date.now()}-${Math.floor(Math.random() * 1e9)}`;

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

// -- golden frames ----------------------------------------------------------------------------

const GOLDEN = goldenFrames("golden-v3-streams.txt");
const HASH_A0 = Uint8Array.from({ length: 32 }, (_, i) => 0xa0 + i);
const TURN: p.TurnRecord = {
  turnId: 42,
  parentTurnId: 41,
  contextId: 3,
  depth: 7,
  codec: 1,
  typeTag: 0x1122_3344_5566_7788n,
  payloadHash: HASH_A0,
  payloadLen: 5,
  flags: 0,
  createdAtUnixMs: 1_767_225_600_000,
};
const INFO_57: s.StreamInfo = { streamId: 57, contextId: 3, length: 11, typeTag: 2n, codec: 1, openedAtUnixMs: 1_767_225_600_000, updatedAtUnixMs: 1_767_225_601_000 };
const M = s.StreamsMsgType;

const REQUESTS: Record<string, [number, p.Request<unknown>]> = {
  hello_request_v3: [1, p.hello(1, 3, new Uint8Array(0), "py")],
  stream_open: [40, s.streamOpen({ context: "t-1", expectedHead: 42, parentKind: p.ParentKind.HEAD, parentTurnId: 0, typeTag: 2n, codec: 1, summary: false, extras: { key: utf8("a-1"), labels: [["role", "assistant"]], links: [] } })],
  stream_append: [41, s.streamAppend(57, undefined, utf8("Hello"))],
  stream_append_at_offset: [42, s.streamAppend(57, 5, utf8(", world"))],
  stream_seal: [43, s.streamSeal(57)],
  stream_abort: [44, s.streamAbort(58)],
  stream_list: [45, s.streamList(3, 0, 100)],
  stream_read_wait: [46, s.streamRead(57, 5, 64 * 1024, 30_000)],
  watch_tag: [48, s.watch({ tag: ["team", "a"] }, 41, 100, 30_000)],
};

type Answer = [number, number, (r: p.Reader) => unknown, unknown];
const ANSWERS: Record<string, Answer> = {
  stream_opened_response: [40, s.streamsResponse(M.STREAM_OPEN), s.decodeStreamInfo, INFO_57],
  stream_appended_response: [42, s.streamsResponse(M.STREAM_APPEND), s.decodeStreamAppended, { streamId: 57, length: 12 }],
  stream_sealed_response: [43, s.streamsResponse(M.STREAM_SEAL), s.decodeStreamSealed, { turn: TURN, deduped: false }],
  stream_aborted_response: [44, s.streamsResponse(M.STREAM_ABORT), s.decodeStreamAborted, 58],
  stream_listed_response: [45, s.streamsResponse(M.STREAM_LIST), s.decodeStreamList, [INFO_57]],
  stream_read_response: [46, s.streamsResponse(M.STREAM_READ), s.decodeStreamBytes, { streamId: 57, state: s.StreamState.OPEN, turnId: 0, offset: 5, length: 12, data: utf8(", world") }],
  stream_read_sealed_response: [47, s.streamsResponse(M.STREAM_READ), s.decodeStreamBytes, { streamId: 57, state: s.StreamState.SEALED, turnId: 42, offset: 12, length: 0, data: new Uint8Array(0) }],
  watched_response: [48, s.streamsResponse(M.WATCH), s.decodeWatched, {
    lagged: false,
    resumeAfter: 58,
    events: [
      { type: "event", seq: 42, kind: WatchKind.HEAD, contextId: 3, turnId: 42, streamId: 0 },
      { type: "event", seq: 58, kind: WatchKind.STREAM_SEALED, contextId: 3, turnId: 42, streamId: 57 },
    ],
  }],
  watch_lagged_response: [49, s.streamsResponse(M.WATCH), s.decodeWatched, { lagged: true, resumeAfter: 90_000, events: [] }],
  error_stream_ended: [41, p.ERROR_TYPE, p.decodeError, { code: 17, detail: 42, message: "stream 57 was sealed into turn 42" }],
};

describe("golden-v3-streams.txt", () => {
  test("every frame is covered", () => {
    expect(new Set([...Object.keys(REQUESTS), ...Object.keys(ANSWERS)])).toEqual(new Set(GOLDEN.keys()));
  });
  for (const [name, [reqId, request]] of Object.entries(REQUESTS)) {
    test(`${name} encodes to its golden bytes`, () => {
      expect(request.minVersion).toBe(name === "hello_request_v3" ? 1 : 3);
      expect(Buffer.from(p.requestFrame(BigInt(reqId), request)).toString("hex")).toBe(Buffer.from(GOLDEN.get(name)!).toString("hex"));
    });
  }
  for (const [name, [reqId, msgType, decode, expected]] of Object.entries(ANSWERS)) {
    test(`${name} decodes`, () => {
      const frame = GOLDEN.get(name)!;
      expect(p.decodeHeader(frame.subarray(0, p.HEADER_BYTES))).toEqual({ len: frame.length - p.HEADER_BYTES, msgType, flags: 0, reqId: BigInt(reqId) });
      expect(p.decodeBody(name, frame.subarray(p.HEADER_BYTES), decode)).toEqual(expected);
    });
  }
  test("the decoders refuse what the layouts forbid", () => {
    const body = (name: string): Uint8Array => GOLDEN.get(name)!.slice(p.HEADER_BYTES);
    const sealed = body("stream_read_sealed_response");
    sealed[9] = 0; // sealed into turn 0
    expect(() => p.decodeBody("STREAM_BYTES", sealed, s.decodeStreamBytes)).toThrow(/state/);
    const lagged = body("watched_response");
    lagged[0] = 1; // lagged, with events
    expect(() => p.decodeBody("WATCHED", lagged, s.decodeWatched)).toThrow(/lagged/);
    const kind = body("watched_response");
    kind[21] = 9;
    expect(() => p.decodeBody("WATCHED", kind, s.decodeWatched)).toThrow(/kind/);
    expect(() => s.streamAppend(1, undefined, new Uint8Array(0))).toThrow(RangeError);
    expect(() => s.streamRead(1, 0, 1, s.STREAM_WAIT_MS_MAX + 1)).toThrow(RangeError);
  });
});

// -- against a real server ----------------------------------------------------------------------

let server: Server;
let client: Client;

beforeAll(async () => {
  server = await Server.start();
  client = await Client.connect(server.addr, { timeoutMs: 20_000 });
});

afterAll(async () => {
  await client?.close();
  await server?.stop();
});

test("a stream is appended, listed, read and sealed into one turn", async () => {
  const name = unique("stream");
  await client.openContext(name);
  const first = await client.append(name, utf8("the question"));
  const stream = await client.openTurn(name, { typeTag: 2, codec: 1, key: "a-1", labels: { role: "assistant" } });
  const deltas = ["Hel", "lo", ", ", "world", "!".repeat(1000)].map(utf8);
  const lengths = [];
  for (const delta of deltas) lengths.push(await stream.append(delta));
  const whole = concat(deltas);
  expect(lengths).toEqual([3, 5, 7, 12, whole.length]);
  const [listed] = await client.streams(name);
  expect([listed!.streamId, listed!.length, listed!.typeTag, listed!.codec]).toEqual([stream.streamId, whole.length, 2n, 1]);
  expect(concat(await collect(client.readStream(stream.streamId)))).toEqual(whole);
  expect(concat(await collect(client.readStream(stream.streamId, { offset: 7, bytesMax: 2 })))).toEqual(whole.subarray(7));
  expect((await client.head(name)).headTurnId).toBe(first.turn.turnId);

  const sealed = await stream.seal();
  expect(sealed.turn.parentTurnId).toBe(first.turn.turnId);
  expect(sealed.turn.payloadLen).toBe(whole.length);
  expect(await client.getBlob(sealed.turn.payloadHash)).toEqual(whole);
  expect((await client.head(name)).headTurnId).toBe(sealed.turn.turnId);
  expect(await client.streams(name)).toEqual([]);
  expect(concat(await collect(client.readStream(stream.streamId, { offset: 5, follow: true })))).toEqual(whole.subarray(5));

  const ended = await client.request(s.streamAppend(stream.streamId, undefined, utf8("late"))).catch((error: unknown) => error);
  expect(ended).toBeInstanceOf(StreamEnded);
  expect((ended as StreamEnded).detail).toBe(sealed.turn.turnId);
  await expect(stream.append(utf8("late"))).rejects.toThrow(StreamEnded);
  await expect(collect(client.readStream(2 ** 52))).rejects.toThrow(NotFound);
});

test("abort, ownership, the blob limit and a stale expected head are typed errors", async () => {
  const name = unique("errors");
  await client.openContext(name);
  const aborted = await client.openTurn(name);
  await aborted.append(utf8("partial"));
  await aborted.abort();
  await expect(collect(client.readStream(aborted.streamId))).rejects.toThrow(StreamEnded);

  const other = await Client.connect(server.addr);
  const owned = await client.openTurn(name);
  await owned.append(utf8("mine"));
  await expect(other.request(s.streamAppend(owned.streamId, 4, utf8("theirs")))).rejects.toThrow(StreamNotOwned);
  await other.close();

  const head = (await client.head(name)).headTurnId;
  const cas = await client.openTurn(name, { expectedHead: head });
  await cas.append(utf8("answer"));
  const moved = await client.append(name, utf8("moved"));
  const conflict = await cas.seal().catch((error: unknown) => error);
  expect(conflict).toBeInstanceOf(Conflict);
  expect((conflict as Conflict).detail).toBe(moved.turn.turnId);
  expect(cas.status).toBe("open");
  await cas.abort();
  await owned.abort();

  const small = await Server.start({ args: ["--blob-bytes-max", String(64 * 1024)] });
  try {
    const limited = await Client.connect(small.addr);
    const ctx = await limited.createContext();
    const big = await limited.openTurn(ctx.contextId);
    await big.append(new Uint8Array(60 * 1024));
    await expect(big.append(new Uint8Array(8 * 1024))).rejects.toThrow(TooLarge);
    expect(big.length).toBe(60 * 1024);
    expect(await big.append(new Uint8Array(4 * 1024))).toBe(64 * 1024);
    await limited.close();
  } finally {
    await small.stop();
  }
});

test("a follower gets every delta; watches report every change in order and resume", async () => {
  const prefix = unique("w");
  const name = `${prefix}-1`;
  await client.openContext(name, { tags: { team: prefix } });
  const position = await client.watchPosition({ context: name });
  const reader = await Client.connect(server.addr);
  const watched = (target: s.WatchTarget, last: WatchKind): Promise<Array<WatchEvent | WatchLagged>> =>
    (async () => {
      const out: Array<WatchEvent | WatchLagged> = [];
      for await (const event of reader.watch(target, { afterSeq: position, waitMs: 5_000 })) {
        out.push(event);
        if (event.type === "event" && event.kind === last) return out;
      }
      return out;
    })();
  const byId = watched({ context: name }, WatchKind.DELETED);
  const byPrefix = watched({ namePrefix: prefix }, WatchKind.TAGS);
  const byTag = watched({ tag: ["team", prefix] }, WatchKind.TAGS);

  const stream = await client.openTurn(name);
  const following = collect(reader.readStream(stream.streamId, { follow: true, waitMs: 5_000 }));
  const deltas = Array.from({ length: 30 }, (_, i) => utf8(`token ${i} `));
  for (const delta of deltas) await stream.append(delta);
  const sealed = await stream.seal();
  expect(concat(await following)).toEqual(concat(deltas));
  await client.tagContext(name, { status: "done" });
  await client.deleteContext(name);

  const events = (await byId).filter((e): e is WatchEvent => e.type === "event");
  expect(events.map((e) => [e.kind, e.turnId, e.streamId])).toEqual([
    [WatchKind.STREAM_OPENED, 0, stream.streamId],
    [WatchKind.HEAD, sealed.turn.turnId, 0],
    [WatchKind.STREAM_SEALED, sealed.turn.turnId, stream.streamId],
    [WatchKind.TAGS, 0, 0],
    [WatchKind.DELETED, 0, 0],
  ]);
  expect(await byPrefix).toEqual(events.slice(0, -1));
  expect(await byTag).toEqual(events.slice(0, -1));
  // Resumed after a sequence number: exactly the events after it.
  const again: WatchEvent[] = [];
  for await (const event of reader.watch({ context: events[0]!.contextId }, { afterSeq: events[1]!.seq, waitMs: 1_000 })) {
    again.push(event as WatchEvent);
    if (again.length === 3) break;
  }
  expect(again).toEqual(events.slice(2));
  await reader.close();
  await expect(client.watch({} as s.WatchTarget).next()).rejects.toThrow(/exactly one/);
});

test("a reader resumes exactly once across a server restart; a watcher is told it lagged", async () => {
  const own = await Server.start();
  try {
    const writer = await Client.connect(own.addr, { timeoutMs: 20_000 });
    const reader = await Client.connect(own.addr, { timeoutMs: 20_000 });
    const name = unique("restart");
    await writer.openContext(name);
    const stream = await writer.openTurn(name);
    const before = Array.from({ length: 20 }, (_, i) => utf8(`acknowledged ${i};`));
    for (const delta of before) await stream.append(delta);
    const chunks = reader.readStream(stream.streamId, { follow: true, waitMs: 2_000 });
    const got = [(await chunks.next()).value as Uint8Array];
    expect(got[0]).toEqual(concat(before));
    const watch = reader.watch({ context: name }, { afterSeq: 0, waitMs: 1_000 });
    const seen = (await watch.next()).value as WatchEvent;
    expect(seen.type).toBe("event");

    await own.kill(); // kill -9: the acknowledged deltas are durable
    await own.launch();

    const after = Array.from({ length: 20 }, (_, i) => utf8(`after ${i};`));
    for (const delta of after) {
      for (;;) {
        try {
          await stream.append(delta); // at the stream's length: a retry writes it once
          break;
        } catch (error) {
          if (!(error instanceof ConnectionLost)) throw error;
        }
      }
    }
    const resumed = await writer.resumeTurn(name, stream.streamId);
    expect(resumed.length).toBe(concat([...before, ...after]).length);
    await stream.seal();
    for await (const chunk of chunks) got.push(chunk);
    expect(text(concat(got))).toBe(text(concat([...before, ...after])));

    const lagged = (await watch.next()).value as WatchLagged;
    expect(lagged.type).toBe("lagged");
    expect(lagged.afterSeq).toBe(seen.seq);
    expect(lagged.resumeAfter).toBeGreaterThan(seen.seq);
    await watch.return(undefined);
    await writer.close();
    await reader.close();
  } finally {
    await own.stop();
  }
});
