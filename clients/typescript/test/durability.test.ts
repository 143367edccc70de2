/**
 * `{ durability: "local" | "remote" }` (decision 0031 §11): on the wire the frame flag
 * ACK_AFTER (bits 3-4: 1 local, 2 remote) on exactly the writes that take it (append,
 * appendByHash, appendTurns, kvPut with and without a TTL, an openTurn's seal) and on nothing
 * else (reads, deltas); refused before sending on a version-3 server and for a value that is
 * neither; Unconfirmed names the turn. Against a real `ctxstore-server --replicate-to
 * file://…`: every remote write is counted as a remote acknowledgement and is in a restore of
 * the replica taken right after a SIGKILL; without a replica, remote is InvalidArgument and
 * nothing is written.
 */

import { execFileSync } from "node:child_process";
import { mkdtempSync, renameSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";

import { afterAll, beforeAll, expect, test } from "vitest";

import { Client, InvalidArgument, NotFound, NotSupported, Unconfirmed, type Durability } from "../src/index.js";
import { blobHash } from "../src/payload.js";
import * as p from "../src/protocol.js";
import { frame, helloAnswer } from "./fake_frames.js";
import { Server, serverBinary } from "./server.js";

const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);


function errorFrame(reqId: bigint, code: number, detail: bigint): Buffer {
  const message = utf8("fake");
  const w = new p.Writer();
  w.u16(code).u16(0).u32(message.length).u64(detail).bytes(message);
  return frame(p.ERROR_TYPE, reqId, p.concat(w.finish()));
}

/** A fake of `version` that records each request's header (after HELLO) and answers ERROR
 * `code` with `detail`. */
async function recording(version: number, code = 5, detail = 0n): Promise<{ addr: string; seen: p.FrameHeader[]; close: () => Promise<void> }> {
  const seen: p.FrameHeader[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => undefined);
    let buffered = Buffer.alloc(0);
    let helloDone = false;
    socket.on("data", (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= p.HEADER_BYTES) {
        const header = p.decodeHeader(buffered.subarray(0, p.HEADER_BYTES));
        if (buffered.length < p.HEADER_BYTES + header.len) return;
        buffered = buffered.subarray(p.HEADER_BYTES + header.len);
        if (!helloDone) {
          helloDone = true;
          socket.write(helloAnswer(version));
        } else {
          seen.push(header);
          socket.write(errorFrame(header.reqId, code, detail));
        }
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    addr: `127.0.0.1:${port}`,
    seen,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

const WRITES = 5;

test.each([
  ["remote", 2],
  ["local", 1],
  [undefined, 0],
] as const)("durability %s is ACK_AFTER %i on exactly the writes that take it", async (durability: Durability | undefined, bits: number) => {
  const fake = await recording(4);
  const client = await Client.connect(fake.addr);
  try {
    const o = durability === undefined ? {} : { durability };
    const calls: Array<() => Promise<unknown>> = [
      () => client.append(7, utf8("small"), o),
      () => client.appendByHash(7, blobHash(utf8("x")), o),
      () => client.appendTurns(7, [{ payload: utf8("t"), key: "k" }], o),
      () => client.kvPut(7, { k: utf8("v") }, o),
      () => client.kvPut(7, { k: utf8("v") }, { ...o, ttlMs: 1000 }),
      () => client.head(7),
      () => client.getTurn(7),
    ];
    for (const call of calls) await expect(call()).rejects.toBeInstanceOf(NotFound);
  } finally {
    await client.close();
    await fake.close();
  }
  expect(fake.seen.length).toBe(WRITES + 2);
  for (const header of fake.seen.slice(0, WRITES)) {
    expect(p.TAKES_ACK_AFTER.has(header.msgType)).toBe(true);
    expect((header.flags & p.ACK_AFTER_MASK) >> p.ACK_AFTER_SHIFT, JSON.stringify(header, (_, v: unknown) => (typeof v === "bigint" ? String(v) : v))).toBe(bits);
  }
  for (const header of fake.seen.slice(WRITES)) expect(header.flags & p.ACK_AFTER_MASK).toBe(0);
});

test("a version-3 server is sent nothing, and a value that is neither is refused", async () => {
  const fake = await recording(3);
  const client = await Client.connect(fake.addr);
  try {
    await expect(client.append(7, utf8("x"), { durability: "remote" })).rejects.toThrow(NotSupported);
    await expect(client.kvPut(7, { k: utf8("v") }, { durability: "local" })).rejects.toThrow(/durability "local" \(ACK_AFTER\) needs protocol version 4/);
    await expect(client.append(7, utf8("x"), { durability: "everywhere" as Durability })).rejects.toThrow(TypeError);
    await expect(client.openTurn(7, { durability: "everywhere" as Durability })).rejects.toThrow(TypeError);
    await expect(client.openTurn(7, { durability: "remote" })).rejects.toThrow(/openTurn with durability "remote" needs protocol version 4/);
    expect(fake.seen).toEqual([]);
    await expect(client.append(7, utf8("x"))).rejects.toBeInstanceOf(NotFound);
    expect(fake.seen.length).toBe(1);
  } finally {
    await client.close();
    await fake.close();
  }
});

test("Unconfirmed names the write's turn", async () => {
  const fake = await recording(4, 20, 42n);
  const client = await Client.connect(fake.addr);
  try {
    const error = await client.append(7, utf8("x"), { durability: "remote" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Unconfirmed);
    expect((error as Unconfirmed).turnId).toBe(42);
  } finally {
    await client.close();
    await fake.close();
  }
});

let replica: string;
let replicating: Server;
let plain: Server;

beforeAll(async () => {
  replica = mkdtempSync(path.join(tmpdir(), "ctxstore-ts-durability-"));
  replicating = await Server.start({ args: ["--replicate-to", `file://${replica}/r`, "--replicate-interval", "1h", "--replica-lease", "off"] });
  plain = await Server.start();
});

afterAll(async () => {
  await replicating?.stop();
  await plain?.stop();
  rmSync(replica, { recursive: true, force: true });
});

test("remote writes are in a restore of the replica", async () => {
  const client = await Client.connect(replicating.addr);
  const written: Array<[number, string]> = [];
  try {
    const { contextId } = await client.createContext();
    await client.openContext("mem");
    const first = await client.append(contextId, utf8("remote one"), { durability: "remote" });
    written.push([first.turn.turnId, "remote one"]);
    const byHash = await client.appendByHash(contextId, first.turn.payloadHash, { durability: "remote" });
    written.push([byHash.turn.turnId, "remote one"]);
    const batch = await client.appendTurns(contextId, [{ payload: utf8("a"), key: "k-a" }, { payload: utf8("b") }], { durability: "remote" });
    written.push([batch[0]!.turn.turnId, "a"], [batch[1]!.turn.turnId, "b"]);
    await client.kvPut("mem", { fact: utf8("blue") }, { durability: "remote" });
    const stream = await client.openTurn(contextId, { durability: "remote" });
    await stream.append(utf8("streamed"));
    const sealed = await stream.seal();
    written.push([sealed.turn.turnId, "streamed"]);
    const role = await client.role();
    expect(role.ackAfter).toBe("local");
    expect(role.remoteAcksTotal).toBe(5);
    expect(role.remoteUnconfirmedTotal).toBe(0);
  } finally {
    await client.close();
  }
  await replicating.kill();

  const restored = await Server.start();
  await restored.kill();
  const into = path.join(replica, "restored");
  execFileSync(serverBinary(), ["restore", "--from", `file://${replica}/r`, "--to", into], { stdio: "pipe" });
  rmSync(restored.dataDir, { recursive: true, force: true });
  renameSync(into, restored.dataDir);
  await restored.launch();
  const reader = await Client.connect(restored.addr);
  try {
    for (const [turnId, payload] of written) {
      const turn = await reader.getTurn(turnId);
      expect(new TextDecoder().decode(await reader.getBlob(turn.payloadHash))).toBe(payload);
    }
    expect(new TextDecoder().decode(await reader.kvGet("mem", "fact"))).toBe("blue");
  } finally {
    await reader.close();
    await restored.stop();
  }
});

test("remote without a replica is InvalidArgument and writes nothing", async () => {
  const client = await Client.connect(plain.addr);
  try {
    const { contextId } = await client.createContext();
    await expect(client.append(contextId, utf8("nowhere"), { durability: "remote" })).rejects.toBeInstanceOf(InvalidArgument);
    await expect(client.kvPut(contextId, { k: utf8("v") }, { durability: "remote" })).rejects.toBeInstanceOf(InvalidArgument);
    expect((await client.head(contextId)).headTurnId).toBe(0);
    expect(await client.kvGet(contextId, "k")).toBeUndefined();
    const appended = await client.append(contextId, utf8("here"), { durability: "local" });
    expect((await client.head(contextId)).headTurnId).toBe(appended.turn.turnId);
  } finally {
    await client.close();
  }
});
