/** A client given several addresses follows the primary across a failover (decision 0031
 * §11), against real servers on a `file://` replica: a primary (`--replica-lease 4s
 * --replicate-interval 100ms`) and an `--auto-promote` standby, the standby listed first. The
 * client connects to the primary; the primary is paused with an unkeyed and a keyed append in
 * flight, then killed (SIGKILL): the unkeyed one fails with OutcomeUnknownError (never a
 * silent retry), the keyed one is sent again on the new primary and lands once (read back:
 * each key once, in order), a read after the kill is answered there. A list none of which
 * takes writes fails with NoPrimaryError within `failoverTimeoutMs`.
 *
 * With `idempotency: "auto"`, against three servers (a primary and two `--auto-promote`
 * standbys, one of which takes over while the other follows it): appends without keys in
 * flight when the primary is killed (`append`, `appendTurns`, `appendByHash`) carry keys made
 * by the client, are sent again with them on the new primary and land exactly once; none
 * rejects with OutcomeUnknownError. */

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { afterAll, expect, test } from "vitest";

import { AUTO_KEY_PREFIX, blobHash, Client, NoPrimaryError, OutcomeUnknownError, type Appended } from "../src/index.js";
import { Server } from "./server.js";

const LEASE = ["--replicate-interval", "100ms", "--replica-lease", "4s"];
const text = new TextEncoder();
const started: Server[] = [];
const dirs: string[] = [];

afterAll(async () => {
  for (const server of started) await server.stop();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** Waits until `client` has written more than `before` bytes to its connection. */
async function untilSent(client: Client, before: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (client.bytesSent <= before) {
    expect(Date.now(), "the append was never written").toBeLessThan(deadline);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

test("a client of two addresses follows the primary through a kill", async () => {
  const replica = mkdtempSync(path.join(tmpdir(), "ctxstore-ts-failover-"));
  dirs.push(replica);
  const url = `file://${replica}`;
  const primary = await Server.start({ args: ["--replicate-to", url, ...LEASE] });
  started.push(primary);
  const first = await Client.connect(primary.addr);
  const { contextId } = await first.createContext();
  const head = (await first.appendTurns(contextId, [{ payload: text.encode("before"), key: "key-000" }], { durability: "remote" }))[0]?.turn.turnId;
  await first.close();
  const standby = await Server.start({ args: ["--follow", url, "--auto-promote", ...LEASE] });
  started.push(standby);
  const follower = await Client.connect(standby.addr);
  const deadline = Date.now() + 30_000;
  while ((await follower.head(contextId)).headTurnId !== head) {
    expect(Date.now(), standby.log()).toBeLessThan(deadline);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await follower.close();

  const client = await Client.connect(`${standby.addr},${primary.addr}`, { failoverTimeoutMs: 30_000 });
  expect(client.followsPrimary).toBe(true);
  expect((await client.role()).role).toBe("primary");
  expect(client.addr).toBe(primary.addr);
  primary.pause();
  const sentBefore = client.bytesSent;
  const unkeyed = client.append(contextId, text.encode("unkeyed in flight"), { durability: "remote" });
  const unkeyedOutcome = unkeyed.then(
    () => undefined,
    (error: unknown) => error,
  );
  // In flight means written to the paused primary's socket: on a loaded machine the write can
  // come after a fixed sleep, and an append the kill found unsent is rightly sent again on the
  // new primary (seen once in CI).
  await untilSent(client, sentBefore);
  const keyed = client.appendTurns(contextId, [{ payload: text.encode("keyed 1"), key: "key-001" }], { durability: "remote" });
  await new Promise((resolve) => setTimeout(resolve, 300));
  await primary.kill();
  expect(await unkeyedOutcome).toBeInstanceOf(OutcomeUnknownError);
  await keyed;
  expect((await client.head(contextId)).headTurnId).toBeGreaterThan(0);
  expect(client.addr).toBe(standby.addr);
  await client.appendTurns(contextId, [{ payload: text.encode("keyed 2"), key: "key-002" }], { durability: "remote" });
  const again = await client.appendTurns(contextId, [{ payload: text.encode("keyed 2"), key: "key-002" }], { durability: "remote" });
  expect(again[0]?.existing).toBe(true);
  const keys: string[] = [];
  for await (const turn of client.iterTurnLog(contextId)) {
    if (turn.key !== undefined) keys.unshift(new TextDecoder().decode(turn.key));
  }
  expect(keys).toEqual(["key-000", "key-001", "key-002"]);
  await client.close();
});

test("a list without a primary fails with NoPrimaryError; a list is also an array", async () => {
  const plain = await Server.start();
  started.push(plain);
  const two = await Client.connect([plain.addr, plain.addr]);
  expect(two.addrs).toEqual([plain.addr, plain.addr]);
  await two.ping();
  await two.close();
  const begun = Date.now();
  await expect(Client.connect("127.0.0.1:1,127.0.0.1:2", { failoverTimeoutMs: 500 })).rejects.toBeInstanceOf(NoPrimaryError);
  expect(Date.now() - begun).toBeLessThan(10_000);
});

/** A primary whose context holds one remote write (key-000) and `standbys` caught-up
 * `--auto-promote` standbys; the context. */
async function replicated(standbys: number): Promise<{ primary: Server; followers: Server[]; contextId: number }> {
  const replica = mkdtempSync(path.join(tmpdir(), "ctxstore-ts-failover-"));
  dirs.push(replica);
  const url = `file://${replica}`;
  const primary = await Server.start({ args: ["--replicate-to", url, ...LEASE] });
  started.push(primary);
  const first = await Client.connect(primary.addr);
  const { contextId } = await first.createContext();
  const head = (await first.appendTurns(contextId, [{ payload: text.encode("before"), key: "key-000" }], { durability: "remote" }))[0]?.turn.turnId;
  await first.close();
  const followers: Server[] = [];
  for (let i = 0; i < standbys; i++) {
    const standby = await Server.start({ args: ["--follow", url, "--auto-promote", ...LEASE] });
    started.push(standby);
    followers.push(standby);
    const follower = await Client.connect(standby.addr);
    const deadline = Date.now() + 30_000;
    while ((await follower.head(contextId)).headTurnId !== head) {
      expect(Date.now(), standby.log()).toBeLessThan(deadline);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await follower.close();
  }
  return { primary, followers, contextId };
}

test("idempotency auto: appends in flight at a kill land exactly once, none outcome unknown", async () => {
  expect(() => new Client("127.0.0.1:1", { idempotency: "always" as "auto" })).toThrow(RangeError);
  const { primary, followers, contextId } = await replicated(2);
  const client = await Client.connect([...followers.map((server) => server.addr), primary.addr], { failoverTimeoutMs: 30_000, idempotency: "auto" });
  expect(client.addr).toBe(primary.addr);
  expect(client.options.idempotency).toBe("auto");
  const stored = text.encode("by hash");
  await client.append((await client.createContext()).contextId, stored); // the blob, stored
  const before = await client.append(contextId, text.encode("auto 0"), { durability: "remote" });
  primary.pause();
  const inFlight: Promise<Appended[]>[] = [
    client.append(contextId, text.encode("auto 1"), { durability: "remote" }).then((a) => [a]),
    client.append(contextId, text.encode("auto 2"), { durability: "remote" }).then((a) => [a]),
    client.appendTurns(contextId, [{ payload: text.encode("auto 3a") }, { payload: text.encode("auto 3b") }], { durability: "remote" }),
    client.appendByHash(contextId, blobHash(stored), { durability: "remote" }).then((a) => [a]),
  ];
  const settled = Promise.allSettled(inFlight);
  await new Promise((resolve) => setTimeout(resolve, 300));
  await primary.kill();
  const outcomes = await settled;
  const failures = outcomes.flatMap((outcome) => (outcome.status === "rejected" ? [outcome.reason as unknown] : []));
  expect(failures.some((error) => error instanceof OutcomeUnknownError)).toBe(false);
  expect(failures).toEqual([]);
  const appended = outcomes.flatMap((outcome) => (outcome.status === "fulfilled" ? outcome.value : []));
  expect(followers.map((server) => server.addr)).toContain(client.addr);
  expect((await client.role()).role).toBe("primary");
  const after = await client.append(contextId, text.encode("auto after"), { durability: "remote" });
  const turns: { turnId: number; key: string | undefined }[] = [];
  for await (const turn of client.iterTurnLog(contextId)) {
    turns.unshift({ turnId: turn.turnId, key: turn.key === undefined ? undefined : new TextDecoder().decode(turn.key) });
  }
  // key-000, then "auto 0", the 5 turns in flight and "auto after": each once, each keyed here.
  expect(turns[0]?.key).toBe("key-000");
  const later = turns.slice(1);
  expect(later).toHaveLength(1 + 5 + 1);
  for (const { key } of later) expect(key).toMatch(new RegExp(`^${AUTO_KEY_PREFIX}[0-9a-f]{32}$`));
  expect(new Set(later.map(({ key }) => key)).size).toBe(later.length);
  const answered = [before, ...appended, after].map((a) => a.turn.turnId).sort((a, b) => a - b);
  expect(later.map(({ turnId }) => turnId).sort((a, b) => a - b)).toEqual(answered);
  await client.close();
}, 120_000);
