/**
 * Frames a scripted fake server answers with, for the tests that need a server older or
 * stranger than the real one: a frame, and HELLO's answer negotiating `version`.
 */

import * as p from "../src/protocol.js";

export function frame(msgType: number, reqId: bigint, body: Uint8Array, flags = 0): Buffer {
  return Buffer.concat([p.encodeHeader({ len: body.length, msgType, flags, reqId }), body]);
}

/** HELLO's answer: `version`, the server name "fake" and the real server's default limits. */
export function helloAnswer(version: number, reqId = 1n): Buffer {
  const name = new TextEncoder().encode("fake");
  const body = Buffer.alloc(28 + name.length);
  body.writeUInt16LE(version, 0);
  body.writeUInt16LE(name.length, 2);
  body.writeUInt32LE(16 << 20, 4);
  body.writeUInt32LE(1024, 8);
  body.writeUInt32LE(16 << 20, 12);
  body.writeUInt32LE(10_000, 16);
  body.writeUInt32LE(4096, 20);
  Buffer.from(name).copy(body, 28);
  return frame(p.MsgType.HELLO | p.RESPONSE_BIT, reqId, body);
}
