/** The LangGraph.js saver and the Agents JS session ride through a failover with no code of
 * their own (issue 47): each is built on all three addresses of a primary (`--replicate-to
 * file://...`) and two `--auto-promote` standbys (as failover.test.ts starts them), with
 * `idempotency: "auto"` among the options a user passes. Each test writes and reads back
 * through one adapter object, makes sure the standbys hold those writes (a remote-durable
 * append on the primary: the replica is one log), pauses the primary with a write of the
 * adapter in flight, kills it (SIGKILL) and goes on writing and reading through the same
 * object: everything written before the kill is read back, the write in flight and the writes
 * after it land, and nothing is there twice. */

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import type { AgentInputItem } from "@openai/agents-core";
import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import { emptyCheckpoint, type Checkpoint } from "@langchain/langgraph-checkpoint";
import { afterAll, expect, test } from "vitest";

import { CtxstoreSession, POP_TYPE } from "../src/agents.js";
import { AUTO_KEY_PREFIX, Client } from "../src/index.js";
import { contextName, CtxstoreSaver } from "../src/langgraph.js";
import { Server } from "./server.js";

const LEASE = ["--replicate-interval", "100ms", "--replica-lease", "4s"];
const FAILOVER_TIMEOUT_MS = 30_000;
const text = new TextEncoder();
const started: Server[] = [];
const dirs: string[] = [];

afterAll(async () => {
  for (const server of started) await server.stop();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A primary and two caught-up `--auto-promote` standbys on one `file://` replica (the
 * standbys listed first: the clients find the primary among them). */
class Cluster {
  private constructor(
    readonly primary: Server,
    readonly standbys: Server[],
    private readonly fenceContext: number,
  ) {}

  static async start(): Promise<Cluster> {
    const replica = mkdtempSync(path.join(tmpdir(), "ctxstore-ts-failover-adapters-"));
    dirs.push(replica);
    const url = `file://${replica}`;
    const primary = await Server.start({ args: ["--replicate-to", url, ...LEASE] });
    started.push(primary);
    const first = await Client.connect(primary.addr);
    const { contextId } = await first.createContext();
    const head = (await first.appendTurns(contextId, [{ payload: text.encode("before"), key: "key-000" }], { durability: "remote" }))[0]?.turn.turnId;
    await first.close();
    const standbys: Server[] = [];
    for (let i = 0; i < 2; i++) {
      const standby = await Server.start({ args: ["--follow", url, "--auto-promote", ...LEASE] });
      started.push(standby);
      standbys.push(standby);
      const follower = await Client.connect(standby.addr);
      const deadline = Date.now() + 30_000;
      while ((await follower.head(contextId)).headTurnId !== head) {
        expect(Date.now(), standby.log()).toBeLessThan(deadline);
        await sleep(50);
      }
      await follower.close();
    }
    return new Cluster(primary, standbys, contextId);
  }

  get addrs(): string {
    return [...this.standbys, this.primary].map((server) => server.addr).join(",");
  }

  /** A remote-durable append on the primary: every write acknowledged before it is in the
   * replica, which a standby reads to its end before it takes over. */
  async fence(): Promise<void> {
    const client = await Client.connect(this.primary.addr);
    await client.append(this.fenceContext, text.encode("fence"), { durability: "remote" });
    await client.close();
  }

  /** Pauses the primary, starts `inFlight` (its request stuck on the paused server), kills the
   * primary; what `inFlight` resolved to (it rejects with what it rejected with). */
  async killWith<T>(inFlight: () => Promise<T>): Promise<T> {
    await this.fence();
    this.primary.pause();
    const settled = inFlight().then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    );
    await sleep(300);
    await this.primary.kill();
    const outcome = await settled;
    if ("error" in outcome) throw outcome.error;
    return outcome.value;
  }

  expectPromoted(addr: string): void {
    expect(this.standbys.map((server) => server.addr)).toContain(addr);
  }
}

/** The keys of a context's turns (every turn, every branch), each once. */
async function keysOnce(client: Client, context: string): Promise<string[]> {
  const keys: string[] = [];
  for await (const turn of client.iterTurnLog(context)) {
    if (turn.key !== undefined) keys.push(new TextDecoder().decode(turn.key));
  }
  expect(new Set(keys).size).toBe(keys.length);
  return keys;
}

const Log = Annotation.Root({
  log: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

function expectedLog(runs: number): string[] {
  const log: string[] = [];
  for (let i = 0; i < runs; i++) {
    log.push(`in ${i}`);
    log.push(`step ${log.length}`);
  }
  return log;
}

function directCheckpoint(n: number): Checkpoint {
  const checkpoint = emptyCheckpoint();
  checkpoint.channel_values = { value: `direct ${n}`, big: "x".repeat(1000 * (n + 1)) };
  checkpoint.channel_versions = { value: n + 1, big: n + 1 };
  return checkpoint;
}

test("the LangGraph.js saver rides through a kill", async () => {
  const cluster = await Cluster.start();
  const saver = CtxstoreSaver.fromAddr(cluster.addrs, { idempotency: "auto", failoverTimeoutMs: FAILOVER_TIMEOUT_MS });
  try {
    const graph = new StateGraph(Log)
      .addNode("step", (state) => ({ log: [`step ${state.log.length}`] }))
      .addEdge(START, "step")
      .addEdge("step", END)
      .compile({ checkpointer: saver });
    const thread = { configurable: { thread_id: `t-${Date.now()}` } };
    let runs = 0;
    for (; runs < 2; runs++) await graph.invoke({ log: [`in ${runs}`] }, thread);
    expect((await graph.getState(thread)).values.log).toEqual(expectedLog(runs));
    const countCheckpoints = async (config: object): Promise<string[]> => {
      const ids: string[] = [];
      for await (const item of saver.list(config)) ids.push(item.checkpoint.id);
      return ids;
    };
    const perRun = (await countCheckpoints(thread)).length / runs;
    expect(perRun).toBeGreaterThanOrEqual(2);

    // A checkpoint of its own thread, with new channel values (turns of its batch that carry
    // no key of the saver's), in flight when the primary is killed.
    const direct = { configurable: { thread_id: `d-${Date.now()}`, checkpoint_ns: "" } };
    const first = await saver.put(direct, directCheckpoint(0), { source: "input", step: 0, parents: {} }, { value: 1, big: 1 });
    const secondCp = directCheckpoint(1);
    const second = await cluster.killWith(() => saver.put(first, secondCp, { source: "loop", step: 1, parents: {} }, { value: 2, big: 2 }));
    cluster.expectPromoted(saver.client.addr);

    for (; runs < 4; runs++) await graph.invoke({ log: [`in ${runs}`] }, thread);
    expect((await graph.getState(thread)).values.log).toEqual(expectedLog(runs));
    const ids = await countCheckpoints(thread);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toHaveLength(perRun * runs);

    const got = await saver.getTuple(second);
    expect(got?.checkpoint.id).toBe(secondCp.id);
    expect(got?.checkpoint.channel_values).toEqual({ value: "direct 1", big: "x".repeat(2000) });
    expect(got?.parentConfig?.configurable?.checkpoint_id).toBe(first.configurable?.checkpoint_id);
    expect(await countCheckpoints(direct)).toHaveLength(2);
    // Nothing twice: every checkpoint's turn (cp/<id>) and every value turn (a key the client
    // made) once.
    const keys = await keysOnce(saver.client, contextName(direct.configurable.thread_id, ""));
    expect(keys.filter((key) => key.startsWith("cp/"))).toHaveLength(2);
    expect(keys.filter((key) => key.startsWith(AUTO_KEY_PREFIX))).toHaveLength(4);
    const threadKeys = await keysOnce(saver.client, contextName(thread.configurable.thread_id, ""));
    expect(threadKeys.filter((key) => key.startsWith("cp/"))).toHaveLength(perRun * runs);
  } finally {
    await saver.close();
  }
}, 120_000);

const msg = (content: string): AgentInputItem => ({ role: "user", content });

test("the Agents JS session rides through a kill", async () => {
  const cluster = await Cluster.start();
  const session = new CtxstoreSession(`s-${Date.now()}`, { addr: cluster.addrs, idempotency: "auto", failoverTimeoutMs: FAILOVER_TIMEOUT_MS });
  try {
    await session.addItems([msg("m0"), msg("m1")]);
    await session.addItems([msg("m2")]);
    expect(await session.getItems()).toEqual([0, 1, 2].map((i) => msg(`m${i}`)));

    // Two items in flight (one batch, no key of the session's own) at the kill.
    await cluster.killWith(() => session.addItems([msg("m3"), msg("m4")]));
    cluster.expectPromoted(session.client.addr);
    await session.addItems([msg("m5")]);
    expect(await session.popItem()).toEqual(msg("m5"));
    await session.addItems([msg("m6")]);

    const expected = [0, 1, 2, 3, 4, 6].map((i) => msg(`m${i}`));
    expect(await session.getItems()).toEqual(expected);
    expect(await session.getItems(2)).toEqual(expected.slice(-2));
    // Nothing twice: the context holds the seven items and one pop marker.
    let pops = 0;
    let turns = 0;
    for await (const turn of session.client.iterTurnLog(session.contextName)) {
      turns++;
      if (turn.typeTag === POP_TYPE) pops++;
    }
    expect(pops).toBe(1);
    expect(turns).toBe(8);
    expect(await keysOnce(session.client, session.contextName)).toHaveLength(8);
  } finally {
    await session.close();
  }
}, 120_000);
