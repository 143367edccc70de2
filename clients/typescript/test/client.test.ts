/** The client against a real ctxstore-server: every message family, the pair checks, the
 * chunked append and its cut points against the engine's. */

import { afterAll, beforeAll, describe, expect, test } from "vitest";

import {
  AlreadyExists,
  Client,
  Conflict,
  cut,
  InvalidArgument,
  NotFound,
  toHex,
  TooLarge,
  Unauthorized,
} from "../src/index.js";
import { blobHash } from "../src/payload.js";
import { PROTOCOL_VERSION } from "../src/protocol.js";
import { Server } from "./server.js";

const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);
const text = (data: Uint8Array | undefined): string => new TextDecoder().decode(data);

/** Bytes that look like chat text but do not repeat (the Rust chunking tests' xorshift). */
function chatText(length: number, seed: number): Uint8Array {
  let state = BigInt(seed) | 1n;
  const alphabet = utf8('abcdefghij klmnopqrstuvwxyz,."{}');
  const out = new Uint8Array(length);
  const mask = (1n << 64n) - 1n;
  for (let i = 0; i < length; i++) {
    state ^= (state << 13n) & mask;
    state ^= state >> 7n;
    state ^= (state << 17n) & mask;
    out[i] = alphabet[Number(state % 32n)]!;
  }
  return out;
}

let server: Server;
let client: Client;

beforeAll(async () => {
  server = await Server.start();
  client = await Client.connect(server.addr);
});

afterAll(async () => {
  await client?.close();
  await server?.stop();
});

describe("version 1", () => {
  test("HELLO negotiates version 7, the newest, and tells the server's limits", async () => {
    const info = await client.serverInfo();
    expect([info.version, PROTOCOL_VERSION]).toEqual([7, 7]);
    expect(info.blobBytesMax).toBeGreaterThan(0);
    expect(info.readTurnsMax).toBeGreaterThan(0);
    await client.ping();
  });

  test("ROLE (version 4): a server without a replica is off, takes writes, acknowledges local", async () => {
    const role = await client.role();
    expect([role.role, role.acceptsWrites, role.ackAfter, role.epoch]).toEqual(["off", true, "local", 0]);
    expect([role.leaseMs, role.primary, role.holder]).toEqual([0, "", ""]);
  });

  test("TENANT_LIST (version 5): a server without a tenants file has no tenant", async () => {
    expect(await client.tenants()).toEqual([]);
  });

  test("append, read back with payloads, compare-and-set on the head", async () => {
    const ctx = await client.createContext();
    expect(ctx.headTurnId).toBe(0);
    const first = await client.append(ctx.contextId, utf8("hello"), { typeTag: 7, codec: 1, expectedHead: 0 });
    expect(first.turn.depth).toBe(0);
    expect(first.turn.typeTag).toBe(7n);
    expect(toHex(first.turn.payloadHash)).toBe(toHex(blobHash(utf8("hello"))));
    const second = await client.append(ctx.contextId, utf8("world"), { expectedHead: first.turn.turnId });
    expect(second.turn.parentTurnId).toBe(first.turn.turnId);
    const error = await client.append(ctx.contextId, utf8("late"), { expectedHead: first.turn.turnId }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Conflict);
    expect((error as Conflict).actualHead).toBe(second.turn.turnId);
    expect((error as Conflict).code).toBe(6);
    const page = await client.last(ctx.contextId, 10, { payloads: true });
    expect(page.turns.map((t) => text(t.payload))).toEqual(["hello", "world"]);
    expect(page.tipDepth).toBe(1);
    const head = await client.head(ctx.contextId);
    expect(head).toEqual({ contextId: ctx.contextId, headTurnId: second.turn.turnId, headDepth: 1 });
    const again = await client.append(ctx.contextId, utf8("hello"));
    expect(again.deduped).toBe(true);
    expect(text(await client.getBlob(first.turn.payloadHash))).toBe("hello");
    expect(await client.hasBlobs([first.turn.payloadHash, blobHash(utf8("never stored"))])).toEqual([true, false]);
    expect((await client.getTurn(second.turn.turnId)).payloadLen).toBe(5);
  });

  test("fork copies nothing; paging before, by depth, the chain and a replay", async () => {
    const ctx = await client.createContext();
    const ids: number[] = [];
    for (let i = 0; i < 10; i++) ids.push((await client.append(ctx.contextId, utf8(`turn ${i}`))).turn.turnId);
    const forked = await client.fork(ids[4]!);
    expect(forked.headDepth).toBe(4);
    await client.append(forked.contextId, utf8("branch"));
    const older = await client.before(ctx.contextId, ids[5]!, 3, { payloads: true });
    expect(older.turns.map((t) => text(t.payload))).toEqual(["turn 2", "turn 3", "turn 4"]);
    expect(older.nextBefore).toBe(ids[2]);
    const window = await client.rangeByDepth(ctx.contextId, 7, 5);
    expect(window.turns.map((t) => t.depth)).toEqual([7, 8, 9]);
    const replay = await client.replay((await client.head(forked.contextId)).headTurnId, { payloads: true, pageSize: 2 });
    expect(replay.map((t) => text(t.payload))).toEqual(["turn 0", "turn 1", "turn 2", "turn 3", "turn 4", "branch"]);
  });

  test("a thousand appends pipelined on one connection all land, in one chain", async () => {
    const ctx = await client.createContext();
    const many = await Promise.all(Array.from({ length: 200 }, (_, i) => client.append(ctx.contextId, utf8(`p${i}`))));
    expect(new Set(many.map((a) => a.turn.turnId)).size).toBe(200);
    expect((await client.head(ctx.contextId)).headDepth).toBe(199);
  });
});

describe("version 2", () => {
  test("contexts by name, tags, listing, get-or-create and clone", async () => {
    const opened = await client.openContext("thread-a", { tags: { status: "idle", owner: "me" } });
    expect(opened.created).toBe(true);
    expect(opened.info.tags).toEqual({ owner: "me", status: "idle" });
    const again = await client.openContext("thread-a", { getOrCreate: true });
    expect(again).toMatchObject({ created: false, info: { contextId: opened.info.contextId } });
    const taken = await client.openContext("thread-a").catch((e: unknown) => e);
    expect(taken).toBeInstanceOf(AlreadyExists);
    expect((taken as AlreadyExists).contextId).toBe(opened.info.contextId);
    await client.append("thread-a", utf8("by name"));
    const tagged = await client.tagContext("thread-a", { status: "done" }, ["owner"]);
    expect(tagged.tags).toEqual({ status: "done" });
    const found = [];
    for await (const info of client.iterContexts({ tags: { status: "done" } }, { pageSize: 1 })) found.push(info.name);
    expect(found).toContain("thread-a");
    const clone = await client.cloneContext("thread-a", "thread-a-copy", { tags: { copy: "1" } });
    expect(clone.contextId).not.toBe(opened.info.contextId);
    expect(clone.headTurnId).toBe((await client.head("thread-a")).headTurnId);
    expect(clone.tags).toEqual({ copy: "1", status: "done" });
    const unnamed = await client.createContext();
    expect((await client.nameContext(unnamed.contextId, "named-later")).name).toBe("named-later");
    expect(await client.contextInfo("named-later")).toMatchObject({ contextId: unnamed.contextId });
    await expect(client.contextInfo("no-such-context")).rejects.toBeInstanceOf(NotFound);
  });

  test("key-value entries: put, if-absent, get, list in pages, delete", async () => {
    await client.openContext("kv-ctx");
    const entries = new Map<string, Uint8Array>();
    for (let i = 0; i < 5; i++) entries.set(`w:${i}`, utf8(`value ${i}`));
    entries.set("big", chatText(20_000, 5));
    await client.kvPut("kv-ctx", entries);
    await client.kvPut("kv-ctx", { "w:0": utf8("other") }, { ifAbsent: true });
    expect(text(await client.kvGet("kv-ctx", "w:0"))).toBe("value 0");
    expect(await client.kvGet("kv-ctx", "absent")).toBeUndefined();
    await expect(client.kvGet("no-such-ctx", "k")).rejects.toBeInstanceOf(NotFound);
    const keys = [];
    for await (const item of client.iterKv("kv-ctx", { prefix: "w:", pageSize: 2 })) keys.push(text(item.key));
    expect(keys).toEqual(["w:0", "w:1", "w:2", "w:3", "w:4"]);
    expect(await client.kvGet("kv-ctx", "big")).toEqual(chatText(20_000, 5));
    await client.kvDelete("kv-ctx", ["w:1", "w:9"]);
    expect((await client.kvList("kv-ctx", { prefix: "w:" })).items.length).toBe(4);
  });

  test("key-value TTL (version 3): put with a TTL, refresh on get and list, touch, expiry", async () => {
    await client.openContext("kv-ttl");
    const before = Date.now();
    await client.kvPut("kv-ttl", { fact: utf8("blue") }, { ttlMs: 3_600_000 });
    await client.kvPut("kv-ttl", { short: utf8("s") }, { ttlMs: 300 });
    await client.kvPut("kv-ttl", { plain: utf8("p") });
    await client.kvPut("kv-ttl", { fact: utf8("red") }, { ifAbsent: true, ttlMs: 5 });
    const fact = await client.kvGetEntry("kv-ttl", "fact");
    expect(text(fact?.value)).toBe("blue");
    expect(fact?.ttlMs).toBe(3_600_000);
    expect(fact!.expiresAtUnixMs).toBeGreaterThanOrEqual(before + 3_600_000);
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(text(await client.kvGet("kv-ttl", "fact", { refresh: true }))).toBe("blue");
    const refreshed = await client.kvGetEntry("kv-ttl", "fact");
    expect(refreshed!.expiresAtUnixMs).toBeGreaterThanOrEqual(fact!.expiresAtUnixMs + 20);
    const listed = (await client.kvList("kv-ttl", { withTtl: true })).items;
    expect(listed.map((i) => [text(i.key), i.ttlMs])).toEqual([["fact", 3_600_000], ["plain", 0], ["short", 300]]);
    expect(listed[0]!.expiresAtUnixMs).toBe(refreshed!.expiresAtUnixMs);
    expect((await client.kvList("kv-ttl")).items[0]!.ttlMs).toBeUndefined();
    await new Promise((resolve) => setTimeout(resolve, 20));
    const again = (await client.kvList("kv-ttl", { prefix: "fact", refresh: true })).items;
    expect(again[0]!.expiresAtUnixMs).toBeGreaterThanOrEqual(refreshed!.expiresAtUnixMs + 20);
    const touched = await client.kvTouch("kv-ttl", ["plain", "absent"], { ttlMs: 7_200_000 });
    expect(touched.map((i) => [text(i.key), i.ttlMs])).toEqual([["plain", 7_200_000]]);
    expect((await client.kvTouch("kv-ttl", ["fact"])).map((i) => i.ttlMs)).toEqual([3_600_000]);
    const deadline = Date.now() + 10_000;
    while ((await client.kvGet("kv-ttl", "short")) !== undefined) {
      expect(Date.now()).toBeLessThan(deadline);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect(await client.kvGetEntry("kv-ttl", "short")).toBeUndefined();
    expect((await client.kvList("kv-ttl")).items.map((i) => text(i.key))).toEqual(["fact", "plain"]);
    await expect(client.kvGetEntry("no-such-ctx", "k")).rejects.toBeInstanceOf(NotFound);
    // Refused before sending.
    for (const bad of [0, -1, 1.5, 100 * 365 * 24 * 3600 * 1000 + 1]) {
      await expect(client.kvPut("kv-ttl", { k: utf8("v") }, { ttlMs: bad })).rejects.toBeInstanceOf(RangeError);
    }
    await expect(client.kvTouch("kv-ttl", [])).rejects.toBeInstanceOf(RangeError);
    await expect(client.kvTouch("kv-ttl", Array.from({ length: 129 }, (_, i) => `k${i}`))).rejects.toBeInstanceOf(RangeError);
  });

  test("KV_GET_MANY (version 3): values in the keys' order across requests of 128 keys", async () => {
    await client.openContext("kv-many");
    const keys: string[] = [];
    for (const start of [0, 100]) {
      const entries: Record<string, Uint8Array> = {};
      for (let i = start; i < start + 100; i++) entries[`k${String(i).padStart(3, "0")}`] = utf8(String(i));
      await client.kvPut("kv-many", entries, { ttlMs: 60_000 });
      keys.push(...Object.keys(entries));
    }
    keys.push("absent");
    const values = await client.kvGetMany("kv-many", keys);
    expect(values.length).toBe(201);
    expect(values[200]).toBeUndefined();
    expect(values.slice(0, 200).map((v) => [text(v?.value), v?.ttlMs])).toEqual(Array.from({ length: 200 }, (_, i) => [String(i), 60_000]));
    expect(await client.kvGetMany("kv-many", [])).toEqual([]);
    await expect(client.kvGetMany("no-such-ctx", ["k"])).rejects.toBeInstanceOf(NotFound);
  });

  test("APPEND_TURNS with keys, labels, links and a summary; by key, turn log, find, window", async () => {
    await client.openContext("frames");
    const run = `run-${Date.now()}`;
    const [a, b] = await client.appendTurns("frames", [
      { payload: utf8("one"), key: "cp/1", labels: { run_id: run, step: "1" } },
      { payload: utf8("two"), key: "cp/2", labels: { run_id: run, step: "2" }, typeTag: 3 },
    ]);
    expect(b!.turn.parentTurnId).toBe(a!.turn.turnId);
    const retry = await client.appendTurns("frames", [{ payload: utf8("one"), key: "cp/1" }]);
    expect(retry[0]!.existing).toBe(true);
    expect(retry[0]!.turn.turnId).toBe(a!.turn.turnId);
    const summary = await client.appendTurns("frames", [{ payload: utf8("summary"), summary: true, links: [a!.turn.turnId] }]);
    await client.appendTurns("frames", [{ payload: utf8("after") }]);
    const byKey = await client.turnByKey("frames", "cp/2");
    expect(byKey).toMatchObject({ turnId: b!.turn.turnId, labels: { run_id: run, step: "2" } });
    expect(await client.turnByKey("frames", "cp/none")).toBeUndefined();
    const log = [];
    for await (const t of client.iterTurnLog("frames", { labels: { run_id: run }, payloads: true, pageSize: 1 })) log.push(text(t.payload));
    expect(log).toEqual(["two", "one"]);
    const foundPage = await client.findTurns("run_id", run);
    expect(foundPage.turns.map((t) => t.turnId)).toEqual([b!.turn.turnId, a!.turn.turnId]);
    const window = await client.window("frames", 10, { payloads: true });
    expect(window.turns.map((t) => text(t.payload))).toEqual(["summary", "after"]);
    expect(window.turns[0]!.links).toEqual([a!.turn.turnId]);
    expect(summary[0]!.turn.flags & 1).toBe(1);
    const roots = await client.appendTurns("frames", [{ payload: utf8("new root"), parent: "root" }]);
    expect(roots[0]!.turn).toMatchObject({ parentTurnId: 0, depth: 0 });
  });

  test("retention: prune, time to live, delete", async () => {
    await client.openContext("retained");
    for (let i = 0; i < 6; i++) await client.append("retained", utf8(`r${i}`));
    const pruned = await client.pruneContext("retained", 2);
    expect(pruned.floorDepth).toBe(4);
    const page = await client.last("retained", 10, { payloads: true });
    expect(page.turns.map((t) => text(t.payload))).toEqual(["r4", "r5"]);
    expect((await client.replay(page.turns[1]!.turnId)).length).toBe(6); // GET_CHAIN by TurnID is not floored
    expect((await client.setContextTtl("retained", 3_600_000)).ttlMs).toBe(3_600_000);
    expect((await client.contextRetention("retained")).ttlMs).toBe(3_600_000);
    await expect(client.setContextTtl("retained", 0)).rejects.toBeInstanceOf(RangeError);
    await expect(client.pruneContext("retained", 0)).rejects.toBeInstanceOf(InvalidArgument);
    const gone = await client.deleteContext("retained");
    expect(gone.info.name).toBe("retained");
    await expect(client.head("retained")).rejects.toBeInstanceOf(NotFound);
  });

  test("overlays: patch and redact, read as of an overlay; purge; gc; stats; backup", async () => {
    const ctx = await client.openContext("overlaid");
    const turn = (await client.append("overlaid", utf8("secret"))).turn;
    const patched = await client.patchTurn(turn.turnId, utf8("fixed"));
    const latest = await client.last("overlaid", 1, { payloads: true, asOf: 0 });
    expect(text(latest.turns[0]!.payload)).toBe("fixed");
    expect(latest.turns[0]!.overlaySeq).toBe(patched.overlaySeq);
    const before = await client.getTurn(turn.turnId, { asOf: patched.overlaySeq - 1 });
    expect(toHex(before.payloadHash)).toBe(toHex(blobHash(utf8("secret"))));
    const redacted = await client.redactTurn(turn.turnId);
    const view = await client.readPage(ctx.info.contextId, 1, { payloads: true, asOf: 0 });
    expect(view.turns[0]).toMatchObject({ redacted: true, overlaySeq: redacted.overlaySeq, payloadLen: 0 });
    const other = (await client.append("overlaid", utf8("purge me"))).turn;
    const purged = await client.purgeBlob(other.payloadHash);
    expect(purged.turnsRedacted).toBe(1);
    await expect(client.getBlob(other.payloadHash)).rejects.toBeInstanceOf(NotFound);
    const report = await client.gc();
    expect(report.turnsDead).toBeGreaterThanOrEqual(0);
    const stats = await client.stats();
    expect(stats.turns).toBeGreaterThan(0);
    expect(stats.gcRuns).toBeGreaterThanOrEqual(1);
    const dir = `${server.dir}/backup-1`;
    const backup = await client.backup(dir);
    expect(backup.dir).toBe(dir);
    expect(backup.turns).toBeGreaterThan(0);
  });
});

describe("the chunked append (PUT_CHUNKED)", () => {
  test("the client's cut points are the engine's: every chunk of a payload the server stored whole is stored", async () => {
    const whole = new Client(server.addr, { chunking: false });
    try {
      const ctx = await whole.createContext();
      const payload = chatText(120_000, 11);
      await whole.append(ctx.contextId, payload); // by value: the engine cuts it
      const cuts = cut(payload);
      expect(cuts.length).toBeGreaterThan(50);
      expect(cuts.reduce((n, c) => n + c.length, 0)).toBe(payload.length);
      const hashes = cuts.map((c) => blobHash(payload.subarray(c.offset, c.offset + c.length)));
      expect(await whole.hasBlobs(hashes)).toEqual(hashes.map(() => true));
      // The check can fail: cut points shifted by one byte are chunks the server never saw.
      const shifted = cuts.slice(1, 6).map((c) => blobHash(payload.subarray(c.offset + 1, c.offset + c.length + 1)));
      expect(await whole.hasBlobs(shifted)).toEqual(shifted.map(() => false));
    } finally {
      await whole.close();
    }
  });

  test("a growing state sends what it grew by; it reads back whole from any client", async () => {
    const ctx = await client.openContext("growing");
    let state = chatText(40_000, 21);
    const first = await client.append("growing", state);
    expect(first.deduped).toBe(false);
    const statsBefore = await client.stats();
    for (let step = 0; step < 5; step++) {
      const grown = new Uint8Array(state.length + 1000);
      grown.set(state);
      grown.set(chatText(1000, 100 + step), state.length);
      state = grown;
      const appended = await client.append("growing", state);
      expect(appended.turn.payloadLen).toBe(state.length);
    }
    const again = await client.append("growing", state);
    expect(again.deduped).toBe(true);
    const whole = new Client(server.addr, { chunking: false, verifyPayloads: "always" });
    try {
      const page = await whole.last(ctx.info.contextId, 1, { payloads: true });
      expect(page.turns[0]!.payload).toEqual(state);
    } finally {
      await whole.close();
    }
    const statsAfter = await client.stats();
    // Five states of ~45 KB each stored as their new chunks: far less than 5 x 45 KB.
    expect(statsAfter.uniqueBytes - statsBefore.uniqueBytes).toBeLessThan(5 * 45_000);
  });

  test("APPEND_TURNS of a large payload by value goes as chunks and by hash", async () => {
    await client.openContext("big-turns");
    const payload = chatText(50_000, 31);
    const [appended] = await client.appendTurns("big-turns", [{ payload, key: "big" }]);
    expect(appended!.turn.payloadLen).toBe(payload.length);
    expect((await client.last("big-turns", 1, { payloads: true })).turns[0]!.payload).toEqual(payload);
  });
});

describe("limits", () => {
  test("a request over the server's frame limit is refused before sending; the connection stays", async () => {
    const whole = await Client.connect(server.addr, { chunking: false });
    try {
      const ctx = await whole.createContext();
      const { frameBytesMax } = await whole.serverInfo();
      const error = await whole.append(ctx.contextId, new Uint8Array(frameBytesMax + 1)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TooLarge);
      expect(String(error)).toMatch(/checked by the client, not sent/);
      expect(whole.connected).toBe(true);
      await whole.ping();
    } finally {
      await whole.close();
    }
  });

  test("a read over the server's read_turns_max is TOO_LARGE from the server; the connection stays", async () => {
    const { readTurnsMax } = await client.serverInfo();
    const ctx = await client.createContext();
    await expect(client.last(ctx.contextId, readTurnsMax + 1)).rejects.toBeInstanceOf(TooLarge);
    await client.ping();
  });
});

describe("connection settings", () => {
  test("CTXSTORE_ADDR is the default address", async () => {
    const saved = process.env["CTXSTORE_ADDR"];
    process.env["CTXSTORE_ADDR"] = server.addr;
    try {
      const fromEnv = new Client();
      expect(fromEnv.addr).toBe(server.addr);
      await fromEnv.ping();
      await fromEnv.close();
    } finally {
      if (saved === undefined) delete process.env["CTXSTORE_ADDR"];
      else process.env["CTXSTORE_ADDR"] = saved;
    }
  });

  test("a server with a token refuses a wrong one (UNAUTHORIZED) and accepts CTXSTORE_TOKEN", async () => {
    const guarded = await Server.start({ token: "s3cret" });
    try {
      const wrong = new Client(guarded.addr, { token: "nope" });
      await expect(wrong.ping()).rejects.toBeInstanceOf(Unauthorized);
      await wrong.close();
      process.env["CTXSTORE_TOKEN"] = " s3cret\n";
      const right = new Client(guarded.addr);
      delete process.env["CTXSTORE_TOKEN"];
      await right.ping();
      await right.close();
    } finally {
      await guarded.stop();
    }
  });

  test("verifiesRawPayloads follows decision 0015", async () => {
    expect(client.verifiesRawPayloads).toBe(false); // loopback, when_remote
    const always = await Client.connect(server.addr, { verifyPayloads: "always" });
    expect(always.verifiesRawPayloads).toBe(true);
    await always.close();
  });

  test("zstd payloads (acceptZstd) inflate and check", async () => {
    const zstd = await Client.connect(server.addr, { acceptZstd: true, chunking: false });
    try {
      const ctx = await zstd.createContext();
      const payloads = Array.from({ length: 8 }, (_, i) => chatText(10_240, 200 + i));
      for (const payload of payloads) await zstd.append(ctx.contextId, payload);
      // A fresh server process has them in its cache (sent raw); both encodings must read back.
      const page = await zstd.last(ctx.contextId, 8, { payloads: true });
      expect(page.turns.map((t) => t.payload)).toEqual(payloads);
    } finally {
      await zstd.close();
    }
  });
});
