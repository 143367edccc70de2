/** replicationStats() against a real ctxstore-server (issue 31): a server shipping to a
 * `file://` replica says what shipped (role, state, target, epoch, generation, records, lag,
 * backlog, failures by kind); a server that does not replicate says "off"; a waiting standby's
 * state (issue 44) reads as "waiting". */

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { afterAll, beforeAll, expect, test } from "vitest";

import { Client } from "../src/index.js";
import { decodeReplicationStats, Reader } from "../src/protocol.js";
import { Server } from "./server.js";

let replica: string;
let replicating: Server;
let plain: Server;

beforeAll(async () => {
  replica = mkdtempSync(path.join(tmpdir(), "ctxstore-ts-replica-"));
  replicating = await Server.start({ args: ["--replicate-to", `file://${replica}`, "--replicate-interval", "50ms"] });
  plain = await Server.start();
});

afterAll(async () => {
  await replicating?.stop();
  await plain?.stop();
  rmSync(replica, { recursive: true, force: true });
});

test("a replicating server says what shipped", async () => {
  const client = await Client.connect(replicating.addr);
  try {
    const { contextId } = await client.createContext();
    await client.append(contextId, new TextEncoder().encode("a turn worth shipping"));
    const deadline = Date.now() + 30_000;
    let stats = await client.replicationStats();
    while (!(stats.records === 2 && stats.lagBytes === 0)) {
      expect(Date.now(), JSON.stringify(stats)).toBeLessThan(deadline);
      await new Promise((resolve) => setTimeout(resolve, 50));
      stats = await client.replicationStats();
    }
    expect([stats.role, stats.state, stats.reason, stats.promoting]).toEqual(["primary", "shipping", "", false]);
    expect(stats.target).toBe(`file://${replica}`);
    expect([stats.epoch, stats.generation]).toEqual([1, 1]);
    expect(stats.seq).toBeGreaterThanOrEqual(1);
    expect(stats.objectsTotal).toBeGreaterThanOrEqual(stats.seq);
    expect(stats.bytesTotal).toBeGreaterThanOrEqual(2 * 128);
    expect(stats.recordsUnixMs).toBeGreaterThan(0);
    expect(stats.lastSuccessUnixMs).toBeGreaterThan(0);
    expect([stats.lagMs, stats.backlogObjects, stats.segmentBytesMax]).toEqual([0, 0, 64 << 20]);
    expect(stats.failures["store"]).toBe(0);
    expect(stats.failures["fenced"]).toBe(0);
    expect(Object.keys(stats.failures).length).toBeGreaterThanOrEqual(12);
  } finally {
    await client.close();
  }
});

test("a server that does not replicate says off", async () => {
  const client = await Client.connect(plain.addr);
  try {
    const stats = await client.replicationStats();
    expect([stats.role, stats.state, stats.target, stats.records]).toEqual(["off", "off", "", 0]);
    expect(stats.failures).toEqual({});
  } finally {
    await client.close();
  }
});

test("a waiting standby's state reads as waiting, and 8 is no state", () => {
  // role 2 (standby), state 7, not promoting, 5 reserved, twelve u64 zeros, target "t",
  // primary and reason empty, no failure kinds (the server's test is standby_waits.rs).
  const body = new Uint8Array(8 + 12 * 8 + 3 + 2 + 2 + 2);
  body.set([2, 7]);
  body.set([1, 0, "t".charCodeAt(0)], 8 + 12 * 8);
  const stats = decodeReplicationStats(new Reader(body, "REPLICATION_STATS response"));
  expect([stats.role, stats.state, stats.target]).toEqual(["standby", "waiting", "t"]);
  body[1] = 8;
  expect(() => decodeReplicationStats(new Reader(body, "REPLICATION_STATS response"))).toThrow("0..=7");
});
