/**
 * Bad input from the other end: a server that is not ctxstore, one that says nothing, a
 * connection closed mid-frame, a frame over the limit, a payload whose hash does not match,
 * an answer to a request never sent, a paused server. Each is a typed error, within the
 * timeouts, and no unhandled rejection (vitest fails the run on one).
 */

import net from "node:net";

import { afterAll, beforeAll, describe, expect, test } from "vitest";

import {
  Client,
  ConnectError,
  ConnectionLost,
  ConnectTimeout,
  CtxstoreError,
  IntegrityError,
  NotSupported,
  ProtocolError,
  QuotaExceeded,
  RequestTimeout,
} from "../src/index.js";
import { blobHash } from "../src/payload.js";
import * as p from "../src/protocol.js";
import { frame, helloAnswer as fakeHello } from "./fake_frames.js";
import { Server } from "./server.js";

const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);

function helloAnswer(version = 2): Buffer {
  return fakeHello(version);
}

/** A TURNS answer of one turn whose TURN names `hash` and whose PAYLOAD is `payload`. */
function turnsAnswer(reqId: bigint, hash: Uint8Array, rawLen: number, encoding: number, data: Uint8Array): Buffer {
  const body = Buffer.alloc(16 + 88 + 16 + data.length);
  body.writeBigUInt64LE(0n, 0);
  body.writeUInt32LE(0, 8);
  body.writeUInt32LE(1, 12);
  body.writeBigUInt64LE(1n, 16); // turn_id
  body.writeBigUInt64LE(1n, 32); // context_id
  Buffer.from(hash).copy(body, 16 + 40);
  body.writeUInt32LE(rawLen, 16 + 72);
  body.writeUInt16LE(encoding, 104);
  body.writeUInt32LE(rawLen, 108);
  body.writeUInt32LE(data.length, 112);
  Buffer.from(data).copy(body, 120);
  return frame(p.MsgType.GET_LAST | p.RESPONSE_BIT, reqId, body);
}

/** A zstd frame holding `data` (under 256 bytes) as one raw block: a real zstd frame, made by
 * hand (RFC 8878) so that the test needs no compressor. */
function zstdRawFrame(data: Uint8Array): Uint8Array {
  const block = (data.length << 3) | 1; // raw block, last
  return Uint8Array.from([0x28, 0xb5, 0x2f, 0xfd, 0x20, data.length, block & 0xff, (block >> 8) & 0xff, (block >> 16) & 0xff, ...data]);
}

/** A scripted server: `onFrame` gets each request after HELLO (type, req_id) and the socket. */
async function fakeServer(
  onConnection: (socket: net.Socket) => void,
): Promise<{ addr: string; close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => undefined);
    socket.on("close", () => sockets.delete(socket));
    onConnection(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    addr: `127.0.0.1:${port}`,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** A fake that answers HELLO, then hands each request frame to `onRequest`. */
function scripted(onRequest: (socket: net.Socket, msgType: number, reqId: bigint) => void, version = 2) {
  return fakeServer((socket) => {
    let buffered = Buffer.alloc(0);
    let helloDone = false;
    socket.on("data", (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 16) {
        const len = buffered.readUInt32LE(0);
        if (buffered.length < 16 + len) return;
        const msgType = buffered.readUInt16LE(4);
        const reqId = buffered.readBigUInt64LE(8);
        buffered = buffered.subarray(16 + len);
        if (!helloDone) {
          helloDone = true;
          socket.write(helloAnswer(version));
        } else {
          onRequest(socket, msgType, reqId);
        }
      }
    });
  });
}

describe("servers that are not ctxstore, or break the protocol", () => {
  test("an HTTP server: ConnectError/ProtocolError at HELLO, at once", async () => {
    const fake = await fakeServer((socket) => {
      socket.once("data", () => socket.end("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"));
    });
    const client = new Client(fake.addr, { connectTimeoutMs: 5000 });
    const started = Date.now();
    const error = await client.ping().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProtocolError);
    expect(String(error)).toMatch(/does not speak the ctxstore protocol/);
    expect(Date.now() - started).toBeLessThan(4000);
    await client.close();
    await fake.close();
  });

  test("a server that says nothing: ConnectTimeout", async () => {
    const fake = await fakeServer(() => undefined);
    const client = new Client(fake.addr, { connectTimeoutMs: 300 });
    await expect(client.ping()).rejects.toBeInstanceOf(ConnectTimeout);
    await client.close();
    await fake.close();
  });

  test("a server that closes after half an answer: ConnectionLost for every call in flight; the next call reconnects", async () => {
    let connections = 0;
    const fake = await scripted((socket, msgType, reqId) => {
      if (connections === 1) {
        const whole = frame(msgType | p.RESPONSE_BIT, reqId, Buffer.alloc(8));
        socket.end(whole.subarray(0, 12)); // inside the header, then close
      } else {
        socket.write(frame(msgType | p.RESPONSE_BIT, reqId, p.concat(p.ping(0n).body)));
      }
    });
    const client = new Client(fake.addr, { timeoutMs: 5000 });
    connections = 1;
    const results = await Promise.allSettled([client.createContext(), client.createContext(), client.createContext()]);
    for (const result of results) {
      expect(result.status).toBe("rejected");
      expect((result as PromiseRejectedResult).reason).toBeInstanceOf(ConnectionLost);
    }
    expect(client.connected).toBe(false);
    connections = 2;
    await expect(client.request(p.raw(p.MsgType.PING, new Uint8Array(8)))).resolves.toBeInstanceOf(Uint8Array);
    await client.close();
    await fake.close();
  });

  test("a frame over the client's limit: ProtocolError, the connection closes", async () => {
    const fake = await scripted((socket, msgType, reqId) => {
      socket.write(p.encodeHeader({ len: 64 << 20, msgType: msgType | p.RESPONSE_BIT, flags: 0, reqId }));
    });
    const client = new Client(fake.addr, { maxResponseBytes: 1 << 20 });
    const error = await client.last(1, 10).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProtocolError);
    expect(String(error)).toMatch(/exceeds the limit/);
    expect(client.connected).toBe(false);
    await client.close();
    await fake.close();
  });

  test("a payload whose hash does not match: IntegrityError, the connection stays", async () => {
    const good = utf8("the real payload");
    const fake = await scripted((socket, msgType, reqId) => {
      if (msgType === p.MsgType.GET_LAST) {
        socket.write(turnsAnswer(reqId, blobHash(good), good.length, p.PayloadEncoding.RAW, utf8("the fake payload")));
      } else {
        socket.write(frame(msgType | p.RESPONSE_BIT, reqId, Buffer.alloc(8)));
      }
    });
    const always = new Client(fake.addr, { verifyPayloads: "always" });
    await expect(always.last(1, 1, { payloads: true })).rejects.toBeInstanceOf(IntegrityError);
    expect(always.connected).toBe(true);
    await always.close();
    // On loopback with "when_remote" a RAW payload's length is still checked, not its hash.
    const trusting = new Client(fake.addr);
    const page = await trusting.last(1, 1, { payloads: true });
    expect(new TextDecoder().decode(page.turns[0]!.payload)).toBe("the fake payload");
    await trusting.close();
    await fake.close();
  });

  test("a zstd payload is always inflated and hashed: a wrong one is IntegrityError even on loopback", async () => {
    const good = utf8("zstd payload that the server claims");
    const fake = await scripted((socket, _msgType, reqId) => {
      const lie = utf8("zstd payload that the server sends!");
      socket.write(turnsAnswer(reqId, blobHash(good), lie.length, p.PayloadEncoding.ZSTD, zstdRawFrame(lie)));
    });
    const client = new Client(fake.addr, { acceptZstd: true });
    await expect(client.last(1, 1, { payloads: true })).rejects.toBeInstanceOf(IntegrityError);
    await client.close();
    // The same frame with the right bytes inflates and passes.
    const honest = await scripted((socket, _msgType, reqId) => {
      socket.write(turnsAnswer(reqId, blobHash(good), good.length, p.PayloadEncoding.ZSTD, zstdRawFrame(good)));
    });
    const ok = new Client(honest.addr, { acceptZstd: true });
    expect((await ok.last(1, 1, { payloads: true })).turns[0]!.payload).toEqual(good);
    await ok.close();
    await fake.close();
    await honest.close();
  });

  test("an answer to a request never sent: ProtocolError", async () => {
    const fake = await scripted((socket, msgType, reqId) => {
      socket.write(frame(msgType | p.RESPONSE_BIT, reqId + 1000n, Buffer.alloc(24)));
    });
    const client = new Client(fake.addr);
    await expect(client.createContext()).rejects.toBeInstanceOf(ProtocolError);
    await client.close();
    await fake.close();
  });

  test("the frame flag MORE on an answer that is not a follow's, or on an ERROR: ProtocolError", async () => {
    // A PONG with MORE (only STREAM_FOLLOW's frames may carry it).
    const pong = await scripted((socket, msgType, reqId) => {
      socket.write(frame(msgType | p.RESPONSE_BIT, reqId, Buffer.alloc(8), p.MORE));
    });
    const client = new Client(pong.addr);
    await expect(client.ping()).rejects.toThrow(/flags 0x4/);
    await client.close();
    await pong.close();
    // An ERROR with MORE to a follow (an ERROR is always the last answer).
    const error = await scripted((socket, _msgType, reqId) => {
      const body = Buffer.alloc(16);
      body.writeUInt16LE(5, 0);
      socket.write(frame(p.ERROR_TYPE, reqId, body, p.MORE));
    }, 3);
    const reader = new Client(error.addr);
    await expect(reader.readStream(57, { follow: true, waitMs: 100 }).next()).rejects.toThrow(/ERROR .*MORE/);
    await reader.close();
    await error.close();
  });

  test("QUOTA_EXCEEDED (version 5): QuotaExceeded with the quota's limit; the connection stays", async () => {
    const message = utf8("tenant acme is at its quota_contexts: 100 of 100 contexts");
    const sockets = new Set<net.Socket>();
    const fake = await scripted((socket, _msgType, reqId) => {
      sockets.add(socket);
      const body = Buffer.alloc(16 + message.length);
      body.writeUInt16LE(21, 0);
      body.writeUInt32LE(message.length, 4);
      body.writeBigUInt64LE(100n, 8);
      Buffer.from(message).copy(body, 16);
      socket.write(frame(p.ERROR_TYPE, reqId, body));
    }, 5);
    const client = new Client(fake.addr);
    expect((await client.serverInfo()).version).toBe(5);
    for (let i = 0; i < 2; i++) {
      const error = await client.createContext().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(QuotaExceeded);
      expect([(error as QuotaExceeded).code, (error as QuotaExceeded).limit]).toEqual([21, 100]);
      expect(String(error)).toMatch(/QUOTA_EXCEEDED \(21\): tenant acme is at its quota_contexts/);
      expect(client.connected).toBe(true);
    }
    expect(sockets.size).toBe(1);
    await client.close();
    await fake.close();
  });

  test("a version-1 server: a version-2 call is NotSupported, nothing is sent", async () => {
    let requests = 0;
    const fake = await scripted(() => {
      requests++;
    }, 1);
    const client = new Client(fake.addr);
    await expect(client.openContext("x")).rejects.toBeInstanceOf(NotSupported);
    await expect(client.head("by-name")).rejects.toBeInstanceOf(NotSupported);
    expect(requests).toBe(0);
    await client.close();
    await fake.close();
  });

  test("a version-4 server: tenants() is NotSupported, nothing is sent", async () => {
    let requests = 0;
    const fake = await scripted(() => {
      requests++;
    }, 4);
    const client = new Client(fake.addr);
    await expect(client.tenants()).rejects.toThrow(/TENANT_LIST needs protocol version 5/);
    await expect(client.tenants()).rejects.toBeInstanceOf(NotSupported);
    await expect(client.deleteTenant("acme")).rejects.toThrow(/TENANT_DELETE needs protocol version 5/);
    await expect(client.rotateTenantKey("acme")).rejects.toThrow(/TENANT_ROTATE_KEY needs protocol version 5/);
    expect(requests).toBe(0);
    await client.close();
    await fake.close();
  });

  test("TENANT_DELETED (version 5): its flags as booleans; an unknown flag bit is a ProtocolError", async () => {
    const answers = [3, 0, 4];
    const fake = await scripted((socket, msgType, reqId) => {
      const body = Buffer.alloc(8);
      body.writeUInt32LE(9, 0);
      body.writeUInt32LE(answers.shift()!, 4);
      socket.write(frame(msgType | p.RESPONSE_BIT, reqId, body));
    }, 5);
    const client = new Client(fake.addr);
    expect(await client.deleteTenant("acme")).toEqual({ tenantId: 9, keysDestroyed: true, replicaUpdated: true });
    expect(await client.deleteTenant("acme")).toEqual({ tenantId: 9, keysDestroyed: false, replicaUpdated: false });
    await expect(client.deleteTenant("acme")).rejects.toBeInstanceOf(ProtocolError);
    await expect(client.deleteTenant("")).rejects.toBeInstanceOf(RangeError);
    await client.close();
    await fake.close();
  });

  test("TENANT_KEY_ROTATED (version 5): tenant and version; a version 0 or reserved bits are a ProtocolError", async () => {
    const answers: Array<[number, number, number]> = [[4, 1, 0], [0, 2, 0], [4, 0, 0], [4, 3, 1]];
    let sent = 0;
    const fake = await scripted((socket, msgType, reqId) => {
      sent++;
      const [tenantId, keyVersion, reserved] = answers.shift()!;
      const body = Buffer.alloc(8);
      body.writeUInt32LE(tenantId, 0);
      body.writeUInt16LE(keyVersion, 4);
      body.writeUInt16LE(reserved, 6);
      socket.write(frame(msgType | p.RESPONSE_BIT, reqId, body));
    }, 5);
    const client = new Client(fake.addr);
    expect(await client.rotateTenantKey("acme")).toEqual({ tenantId: 4, keyVersion: 1 });
    expect(await client.rotateTenantKey("operator")).toEqual({ tenantId: 0, keyVersion: 2 });
    await expect(client.rotateTenantKey("acme")).rejects.toThrow(/key_version/);
    await expect(client.rotateTenantKey("")).rejects.toBeInstanceOf(RangeError);
    await expect(client.rotateTenantKey("x".repeat(65))).rejects.toBeInstanceOf(RangeError);
    await client.close();
    const another = new Client(fake.addr);
    await expect(another.rotateTenantKey("acme")).rejects.toBeInstanceOf(ProtocolError);
    await another.close();
    expect(sent).toBe(4);
    await fake.close();
  });

  test("nothing listening: ConnectError", async () => {
    const fake = await fakeServer(() => undefined);
    const addr = fake.addr;
    await fake.close();
    const client = new Client(addr);
    await expect(client.ping()).rejects.toBeInstanceOf(ConnectError);
    await client.close();
  });
});

describe("a real server that stops answering", () => {
  let server: Server;
  beforeAll(async () => {
    server = await Server.start();
  });
  afterAll(async () => {
    server.resume();
    await server.stop();
  });

  test("RequestTimeout when paused; the late answer is dropped; calls go on after", async () => {
    const client = await Client.connect(server.addr, { timeoutMs: 300 });
    const ctx = await client.createContext();
    server.pause();
    const error = await client.append(ctx.contextId, utf8("x")).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RequestTimeout);
    expect(error).toBeInstanceOf(CtxstoreError);
    server.resume();
    // The late answer of the timed-out append arrives and is discarded; the next call works.
    await client.append(ctx.contextId, utf8("y"), { timeoutMs: 10_000 });
    expect((await client.head(ctx.contextId)).headDepth).toBe(1);
    await client.close();
  });

  test("a closed client fails its calls with ClientClosed", async () => {
    const client = await Client.connect(server.addr);
    await client.close();
    await expect(client.ping()).rejects.toMatchObject({ codeName: "CLIENT_CLOSED" });
  });
});
