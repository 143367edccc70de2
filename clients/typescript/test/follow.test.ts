/**
 * STREAM_FOLLOW (protocol version 3, issue 32) from TypeScript: every frame of
 * protocol/tests/golden-v3-follow.txt both ways (the request encodes to its golden bytes and
 * its golden bytes read back to its fields; each answer frame decodes to its values and those
 * values encode back to its golden bytes), and against a real ctxstore-server `readStream`
 * with `follow`: bytes exactly once and in order while a writer appends, the sealed and
 * aborted ends, the idle end and the follow again, a reconnect mid-follow, a reader that stops
 * early, and the long-poll fallback when the server answers UNKNOWN_MESSAGE.
 */

import { afterAll, beforeAll, describe, expect, test } from "vitest";

import { Client, ConnectionLost, NotFound, ProtocolError, StreamEnded, UnknownMessage } from "../src/index.js";
import { parseAddr } from "../src/client.js";
import { Connection } from "../src/connection.js";
import { errorForCode } from "../src/errors.js";
import * as p from "../src/protocol.js";
import * as s from "../src/streams.js";
import { goldenFrames } from "./golden-frames.js";
import { Server } from "./server.js";

const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);
const text = (data: Uint8Array): string => new TextDecoder().decode(data);
const unique = (what: string): string => `${what}-${Date.now()}-${Math.floor(Math.random() * 1e9)}`;
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
/** Bytes of one STREAM_FOLLOW or STREAM_READ request frame (header and body). */
const READ_FRAME_BYTES = p.HEADER_BYTES + 24;
/** Bytes of the GET_TURN a reader sends at the seal (it checks the sealed turn's length). */
const GET_TURN_FRAME_BYTES = p.HEADER_BYTES + 8;
const hex = (data: Uint8Array): string => Buffer.from(data).toString("hex");

const GOLDEN = goldenFrames("golden-v3-follow.txt");
const PUSHED = s.streamsResponse(s.StreamsMsgType.STREAM_FOLLOW);

/** A STREAM_PUSHED frame as a server writes it: the test's side of "both ways". */
function pushedFrame(reqId: bigint, answer: s.StreamPushed): Uint8Array {
  const w = new p.Writer();
  w.u64(answer.streamId).u8(answer.state).u64(answer.turnId).u64(answer.offset).u64(answer.length).u32(answer.data.length).bytes(answer.data);
  const body = p.concat(w.finish());
  return p.concat([p.encodeHeader({ len: body.length, msgType: PUSHED, flags: answer.more ? p.MORE : 0, reqId }), body]);
}

function errorFrame(reqId: bigint, answer: p.ErrorAnswer): Uint8Array {
  const message = utf8(answer.message);
  const w = new p.Writer();
  w.u16(answer.code).u16(0).u32(message.length).u64(answer.detail).bytes(message);
  const body = p.concat(w.finish());
  return p.concat([p.encodeHeader({ len: body.length, msgType: p.ERROR_TYPE, flags: 0, reqId }), body]);
}

const FOLLOW = { streamId: 57, offset: 5, bytesMax: 64 * 1024, waitMs: 30_000 };
const FRAMES: Record<string, [bigint, s.StreamPushed]> = {
  stream_pushed_more: [50n, { streamId: 57, state: s.StreamState.OPEN, turnId: 0, offset: 5, length: 12, data: utf8(", world"), more: true }],
  stream_pushed_sealed: [50n, { streamId: 57, state: s.StreamState.SEALED, turnId: 42, offset: 12, length: 0, data: new Uint8Array(0), more: false }],
  stream_pushed_idle: [51n, { streamId: 58, state: s.StreamState.OPEN, turnId: 0, offset: 12, length: 12, data: new Uint8Array(0), more: false }],
};
const NOT_FOUND: p.ErrorAnswer = { code: 5, detail: 0, message: "stream 59 not found" };

describe("golden-v3-follow.txt", () => {
  test("every frame is covered", () => {
    expect(new Set(["stream_follow", "error_follow_not_found", ...Object.keys(FRAMES)])).toEqual(new Set(GOLDEN.keys()));
  });

  test("stream_follow encodes to its golden bytes, and they read back to its fields", () => {
    const request = s.streamFollow(FOLLOW.streamId, FOLLOW.offset, FOLLOW.bytesMax, FOLLOW.waitMs);
    expect(request.minVersion).toBe(3);
    const golden = GOLDEN.get("stream_follow")!;
    expect(hex(p.requestFrame(50n, request))).toBe(hex(golden));
    expect(p.decodeHeader(golden.subarray(0, p.HEADER_BYTES))).toEqual({ len: 24, msgType: s.StreamsMsgType.STREAM_FOLLOW, flags: 0, reqId: 50n });
    const fields = p.decodeBody("STREAM_FOLLOW", golden.subarray(p.HEADER_BYTES), (r) => ({
      streamId: r.u64("stream_id"),
      offset: r.u64("offset"),
      bytesMax: r.u32("bytes_max"),
      waitMs: r.u32("wait_ms"),
    }));
    expect(fields).toEqual(FOLLOW);
  });

  for (const [name, [reqId, expected]] of Object.entries(FRAMES)) {
    test(`${name} decodes to its values, which encode to its golden bytes`, () => {
      const golden = GOLDEN.get(name)!;
      const header = p.decodeHeader(golden.subarray(0, p.HEADER_BYTES));
      expect(header).toEqual({ len: golden.length - p.HEADER_BYTES, msgType: PUSHED, flags: expected.more ? p.MORE : 0, reqId });
      expect(s.decodeStreamPushed(header.flags, golden.subarray(p.HEADER_BYTES))).toEqual(expected);
      expect(hex(pushedFrame(reqId, expected))).toBe(hex(golden));
    });
  }

  test("error_follow_not_found decodes to NOT_FOUND, which encodes to its golden bytes", () => {
    const golden = GOLDEN.get("error_follow_not_found")!;
    expect(p.decodeHeader(golden.subarray(0, p.HEADER_BYTES))).toEqual({ len: golden.length - p.HEADER_BYTES, msgType: p.ERROR_TYPE, flags: 0, reqId: 52n });
    const answer = p.decodeBody("ERROR", golden.subarray(p.HEADER_BYTES), p.decodeError);
    expect(answer).toEqual(NOT_FOUND);
    expect(errorForCode(answer.code, answer.message, answer.detail)).toBeInstanceOf(NotFound);
    expect(hex(errorFrame(52n, NOT_FOUND))).toBe(hex(golden));
  });

  test("the decoder refuses what the layout forbids", () => {
    const body = (name: string): Uint8Array => GOLDEN.get(name)!.slice(p.HEADER_BYTES);
    // MORE on the last frame's kinds: a sealed stream, an empty frame.
    expect(() => s.decodeStreamPushed(p.MORE, body("stream_pushed_sealed"))).toThrow(ProtocolError);
    expect(() => s.decodeStreamPushed(p.MORE, body("stream_pushed_idle"))).toThrow(/MORE/);
    // Any other flag bit.
    expect(() => s.decodeStreamPushed(p.OVERLAYS, body("stream_pushed_idle"))).toThrow(/flags/);
    expect(() => s.decodeStreamPushed(p.MORE | 0x8, body("stream_pushed_more"))).toThrow(/flags/);
    // Bytes past the body, a body cut short.
    expect(() => s.decodeStreamPushed(0, p.concat([body("stream_pushed_idle"), new Uint8Array(1)]))).toThrow(ProtocolError);
    expect(() => s.decodeStreamPushed(p.MORE, body("stream_pushed_more").subarray(0, 40))).toThrow(ProtocolError);
    expect(() => s.streamFollow(1, 0, 0, 1000)).toThrow(RangeError);
    expect(() => s.streamFollow(1, 0, 1, s.STREAM_WAIT_MS_MAX + 1)).toThrow(RangeError);
    expect(() => new Client("127.0.0.1:1", { followFramesQueuedMax: 0 })).toThrow(/followFramesQueuedMax/);
    expect(errorForCode(2, "unknown message 0x0038", 0)).toBeInstanceOf(UnknownMessage);
  });
});

// -- against a real server ----------------------------------------------------------------------

let server: Server;
let writer: Client;

beforeAll(async () => {
  server = await Server.start();
  writer = await Client.connect(server.addr, { timeoutMs: 20_000 });
});

afterAll(async () => {
  await writer?.close();
  await server?.stop();
});

/** Reads `chunks` to its end (or its error) as text, with the error it ended with. */
async function drain(chunks: AsyncIterable<Uint8Array>): Promise<{ got: string; error: unknown }> {
  let got = "";
  try {
    for await (const chunk of chunks) got += text(chunk);
  } catch (error) {
    return { got, error };
  }
  return { got, error: undefined };
}

async function openStream(client: Client): Promise<Awaited<ReturnType<Client["openTurn"]>>> {
  const name = unique("follow");
  await client.openContext(name);
  return client.openTurn(name);
}

test("a follower gets every byte exactly once, in order, while a writer appends, from one request; the seal ends it", async () => {
  const reader = await Client.connect(server.addr, { timeoutMs: 20_000 });
  const stream = await openStream(writer);
  await stream.append(utf8("before;"));
  const sentBefore = reader.bytesSent;
  const following = drain(reader.readStream(stream.streamId, { follow: true, waitMs: 10_000 }));
  const deltas = Array.from({ length: 200 }, (_, i) => `delta ${i};`);
  for (const delta of deltas) await stream.append(utf8(delta));
  await stream.seal();
  const { got, error } = await following;
  expect(error).toBeUndefined();
  expect(got).toBe(`before;${deltas.join("")}`);
  // Pushed, not polled: one STREAM_FOLLOW for 200 deltas (a long poll is one request a delta),
  // then the sealed turn's GET_TURN.
  expect(reader.bytesSent - sentBefore).toBe(READ_FRAME_BYTES + GET_TURN_FRAME_BYTES);
  // From an offset inside the stream, after the seal: the sealed turn's bytes from there.
  expect((await drain(reader.readStream(stream.streamId, { offset: 7, follow: true }))).got).toBe(deltas.join(""));
  await reader.close();
});

test("an aborted stream ends a follow with StreamEnded after its bytes; an unknown one with NotFound", async () => {
  const reader = await Client.connect(server.addr, { timeoutMs: 20_000 });
  const stream = await openStream(writer);
  const following = drain(reader.readStream(stream.streamId, { follow: true, waitMs: 10_000 }));
  await stream.append(utf8("partial "));
  await stream.append(utf8("answer"));
  await sleep(100);
  await stream.abort();
  const { got, error } = await following;
  expect(got).toBe("partial answer");
  expect(error).toBeInstanceOf(StreamEnded);
  expect((error as StreamEnded).detail).toBe(0);
  expect((await drain(reader.readStream(2 ** 52, { follow: true }))).error).toBeInstanceOf(NotFound);
  expect(await reader.ping()).toBeUndefined(); // the connection stays
  await reader.close();
});

test("a follow that ends idle (waitMs without a delta) is followed again from its offset", async () => {
  const reader = await Client.connect(server.addr, { timeoutMs: 20_000 });
  const stream = await openStream(writer);
  const sentBefore = reader.bytesSent;
  const following = drain(reader.readStream(stream.streamId, { follow: true, waitMs: 200 }));
  await stream.append(utf8("first;"));
  await sleep(700); // at least two idle ends
  await stream.append(utf8("second;"));
  await sleep(300);
  await stream.append(utf8("third"));
  await stream.seal();
  const { got, error } = await following;
  expect(error).toBeUndefined();
  expect(got).toBe("first;second;third");
  const follows = (reader.bytesSent - sentBefore - GET_TURN_FRAME_BYTES) / READ_FRAME_BYTES;
  expect(Number.isInteger(follows)).toBe(true);
  expect(follows).toBeGreaterThanOrEqual(3);
  await reader.close();
});

test("a follow cut by a server restart (kill -9) resumes from its offset: every byte exactly once", async () => {
  const own = await Server.start();
  try {
    const ownWriter = await Client.connect(own.addr, { timeoutMs: 20_000 });
    const reader = await Client.connect(own.addr, { timeoutMs: 20_000 });
    const stream = await openStream(ownWriter);
    const before = Array.from({ length: 10 }, (_, i) => `acknowledged ${i};`);
    for (const delta of before) await stream.append(utf8(delta));
    const chunks = reader.readStream(stream.streamId, { follow: true, waitMs: 10_000, bytesMax: 16 });
    let got = text((await chunks.next()).value as Uint8Array); // one frame taken, the rest held
    expect(got).toBe(before.join("").slice(0, 16));
    await own.kill();
    await own.launch();
    const after = Array.from({ length: 10 }, (_, i) => `after ${i};`);
    for (const delta of after) {
      for (;;) {
        try {
          await stream.append(utf8(delta)); // at the stream's length: a retry writes it once
          break;
        } catch (error) {
          if (!(error instanceof ConnectionLost)) throw error;
        }
      }
    }
    await stream.seal();
    for await (const chunk of chunks) got += text(chunk);
    expect(got).toBe(before.join("") + after.join(""));
    await ownWriter.close();
    await reader.close();
  } finally {
    await own.stop();
  }
});

test("a reader that leaves early stops its follow: its frames are dropped and its in-flight slot is free at the last one", async () => {
  // One request in flight at a time: the next call waits for the follow's slot.
  const reader = await Client.connect(server.addr, { timeoutMs: 20_000, maxInFlight: 1 });
  const stream = await openStream(writer);
  await stream.append(utf8("one;"));
  for await (const chunk of reader.readStream(stream.streamId, { follow: true, waitMs: 10_000 })) {
    expect(text(chunk)).toBe("one;");
    break;
  }
  for (let i = 0; i < 20; i++) await stream.append(utf8(`dropped ${i};`)); // frames of the stopped follow
  let pinged = false;
  const ping = reader.ping().then(() => {
    pinged = true;
  });
  await sleep(300);
  expect(pinged).toBe(false); // the server still runs the follow: its slot is held
  await stream.seal(); // its last frame
  await ping;
  expect(reader.connected).toBe(true);
  // The reader reads on: the whole stream, from its sealed turn.
  expect((await drain(reader.readStream(stream.streamId, { follow: true }))).got).toBe(`one;${Array.from({ length: 20 }, (_, i) => `dropped ${i};`).join("")}`);
  await reader.close();
});

test("a follower that does not take its frames holds a bounded queue and loses nothing", async () => {
  const reader = await Client.connect(server.addr, { timeoutMs: 20_000, followFramesQueuedMax: 8 });
  const stream = await openStream(writer);
  await stream.append(utf8("x"));
  const chunks = reader.readStream(stream.streamId, { follow: true, waitMs: 10_000, bytesMax: 8 });
  let got = text((await chunks.next()).value as Uint8Array);
  // 4,000 bytes in frames of 8 bytes at most: 500 frames or more, past the 8 the connection queues.
  const deltas = Array.from({ length: 400 }, (_, i) => `d${String(i).padStart(8, "0")}`);
  for (const delta of deltas) await stream.append(utf8(delta));
  await sleep(200);
  await stream.seal();
  for await (const chunk of chunks) {
    expect(chunk.length).toBeLessThanOrEqual(8);
    got += text(chunk);
  }
  expect(got).toBe(`x${deltas.join("")}`);
  await reader.close();
});

test("the connection queues at most followFramesQueuedMax frames of a follow, then stops reading its socket until they are taken", async () => {
  const QUEUED_MAX = 16;
  const stream = await openStream(writer);
  const conn = await Connection.open({
    ...parseAddr(server.addr),
    token: new Uint8Array(0),
    versions: p.SUPPORTED_VERSIONS,
    clientName: "follow-test",
    connectTimeoutMs: 10_000,
    frameBytesMax: p.FRAME_BYTES_LIMIT,
    maxInFlight: 16,
    verifyPayloads: "when_remote",
    followFramesQueuedMax: QUEUED_MAX,
  });
  try {
    const follow = await conn.follow(s.streamFollow(stream.streamId, 0, 4, 10_000), s.decodeStreamPushed, Date.now() + 10_000, 20_000);
    // 100 deltas of 4 bytes, one frame each at most 4 bytes: up to 100 frames, none taken.
    const deltas = Array.from({ length: 100 }, (_, i) => String(i).padStart(4, "0"));
    for (const delta of deltas) await stream.append(utf8(delta));
    for (let waited = 0; follow.queued < QUEUED_MAX && waited < 5_000; waited += 20) await sleep(20);
    await sleep(200);
    expect(follow.queued).toBe(QUEUED_MAX);
    expect(conn.readingPaused).toBe(true);
    await stream.seal();
    let got = "";
    for (;;) {
      const frame = await follow.next();
      if (frame === undefined) break;
      expect(follow.queued).toBeLessThanOrEqual(QUEUED_MAX);
      got += text(frame.data);
      if (!frame.more) expect(frame.state).toBe(s.StreamState.SEALED);
    }
    expect(got).toBe(deltas.join(""));
    expect(conn.readingPaused).toBe(false);
    expect(conn.alive).toBe(true);
  } finally {
    conn.close();
  }
});

/** A client whose follows send a message type the server does not know, so that the server
 * answers UNKNOWN_MESSAGE as one older than STREAM_FOLLOW does: the real server's answer,
 * the client's real fallback. */
class PreFollowClient extends Client {
  static readonly UNKNOWN_TYPE = 0x00fe;
  protected override followRequest(streamId: number, offset: number, bytesMax: number, waitMs: number): p.Request<unknown> {
    return { ...super.followRequest(streamId, offset, bytesMax, waitMs), name: "STREAM_FOLLOW as 0x00FE", msgType: PreFollowClient.UNKNOWN_TYPE };
  }
}

test("a server that answers STREAM_FOLLOW with UNKNOWN_MESSAGE is long-polled with STREAM_READ", async () => {
  const reader = new PreFollowClient(server.addr, { timeoutMs: 20_000 });
  await reader.ping();
  const stream = await openStream(writer);
  const sentBefore = reader.bytesSent;
  const following = drain(reader.readStream(stream.streamId, { follow: true, waitMs: 10_000 }));
  const deltas = Array.from({ length: 20 }, (_, i) => `polled ${i};`);
  for (const delta of deltas) {
    await stream.append(utf8(delta));
    await sleep(20); // each delta on its own: a long poll answers it
  }
  await stream.seal();
  const { got, error } = await following;
  expect(error).toBeUndefined();
  expect(got).toBe(deltas.join(""));
  // One refused follow, then long polls: about one request a delta.
  const requests = (reader.bytesSent - sentBefore - GET_TURN_FRAME_BYTES) / READ_FRAME_BYTES;
  expect(requests).toBeGreaterThan(5);
  expect(reader.connected).toBe(true);
  await reader.close();
});
