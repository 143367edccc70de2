/**
 * Vector search (protocol version 6, issue 49, decision 0033) against a real server: indexes
 * created, listed and dropped (VECTOR_INDEX_CREATE, _LIST, _DROP), entries put with their
 * vectors (KV_PUT_VECTORS), searched (VECTOR_SEARCH) with exactly `k` hits under a selective
 * filter, an overwrite, a delete or an expiry taking an entry's vectors with it, and what is
 * refused: by the client before sending (RangeError, TypeError) and by the server when sent as
 * raw frames (InvalidArgument, TooLarge, NotFound; the connection stays open, nothing written).
 * Version 7: turns appended with their vectors (APPEND_TURNS_VECTORS) to named, tagged contexts
 * and searched (VECTOR_SEARCH_TURNS) by context, name prefix, tags, labels and type tag, with
 * exactly `k` after an offset, and the same refusals, nothing appended.
 */

import net from "node:net";

import { afterAll, beforeAll, describe, expect, test } from "vitest";

import { Client, InvalidArgument, NotFound, NotSupported, ProtocolError, TooLarge } from "../src/index.js";
import * as p from "../src/protocol.js";
import type { Turn, VectorMetricName, VectorTurnSpec } from "../src/types.js";
import { frame, helloAnswer } from "./fake_frames.js";
import { Server } from "./server.js";

const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);
const text = (data: Uint8Array): string => new TextDecoder().decode(data);

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

/** A deterministic vector of `dims` components for seed `i` (not normalized). */
function vectorFor(i: number, dims: number): number[] {
  let state = (i + 1) * 2654435761;
  return Array.from({ length: dims }, () => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return Math.fround(state / 0x1_0000_0000 - 0.5);
  });
}

function score(metric: VectorMetricName, a: readonly number[], b: readonly number[]): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  let l2 = 0;
  a.forEach((x, i) => {
    const y = b[i]!;
    dot += x * y;
    na += x * x;
    nb += y * y;
    l2 += (x - y) ** 2;
  });
  if (metric === "cosine") return na === 0 || nb === 0 ? 0 : dot / Math.sqrt(na * nb);
  if (metric === "inner_product") return dot;
  return -Math.sqrt(l2);
}

/** A fresh context for a test. */
async function context(name: string): Promise<string> {
  const unique = `${name}-${Date.now()}-${Math.floor(Math.random() * 1e9)}`;
  await client.openContext(unique, { getOrCreate: true });
  return unique;
}

function json(value: unknown): Uint8Array {
  return utf8(JSON.stringify(value));
}

test("HELLO negotiates version 7", async () => {
  expect((await client.serverInfo()).version).toBe(7);
  expect(p.PROTOCOL_VERSION).toBe(7);
});

describe("indexes", () => {
  test("create, create again, list in name order, drop, create anew", async () => {
    const created = await client.vectorIndexCreate("idx-b", 8);
    expect(created).toMatchObject({ name: "idx-b", dims: 8, metric: "cosine", vectors: 0 });
    expect(created.efSearch).toBe(128); // 0 asked: the server's default
    const ip = await client.vectorIndexCreate("idx-a", 3, { metric: "inner_product", efSearch: 64 });
    expect(ip).toMatchObject({ name: "idx-a", dims: 3, metric: "inner_product", efSearch: 64 });
    const l2 = await client.vectorIndexCreate("idx-c", 4096, { metric: "l2" });
    expect(l2.metric).toBe("l2");

    // The same parameters answer the index there is (efSearch 0 matches any).
    expect(await client.vectorIndexCreate("idx-b", 8, { metric: "cosine" })).toEqual(created);
    expect((await client.vectorIndexCreate("idx-a", 3, { metric: "inner_product" })).indexId).toBe(ip.indexId);
    // Another dimension or metric: InvalidArgument naming both; the connection stays open.
    const dims = await client.vectorIndexCreate("idx-b", 9).catch((e: unknown) => e);
    expect(dims).toBeInstanceOf(InvalidArgument);
    expect(String(dims)).toMatch(/8/);
    expect(String(dims)).toMatch(/9/);
    await expect(client.vectorIndexCreate("idx-b", 8, { metric: "l2" })).rejects.toBeInstanceOf(InvalidArgument);
    expect(client.connected).toBe(true);

    const names = (await client.vectorIndexes()).map((index) => index.name);
    expect(names.filter((name) => name.startsWith("idx-"))).toEqual(["idx-a", "idx-b", "idx-c"]);

    const dropped = await client.vectorIndexDrop("idx-b");
    expect(dropped).toEqual(created);
    expect((await client.vectorIndexes()).map((index) => index.name)).not.toContain("idx-b");
    await expect(client.vectorIndexDrop("idx-b")).rejects.toBeInstanceOf(NotFound);
    const again = await client.vectorIndexCreate("idx-b", 5, { metric: "l2" });
    expect(again.indexId).not.toBe(created.indexId);
    expect(again).toMatchObject({ dims: 5, metric: "l2", vectors: 0 });
    for (const name of ["idx-a", "idx-b", "idx-c"]) await client.vectorIndexDrop(name);
  });

  test("a dropped index answers no search; its entries keep their values; a new one starts empty", async () => {
    const ctx = await context("drop");
    await client.vectorIndexCreate("idx-drop", 4);
    await client.kvPutVectors(ctx, [{ key: "k1", value: json({ a: 1 }), vectors: [[1, 0, 0, 0]] }], "idx-drop");
    expect((await client.vectorIndexes()).find((i) => i.name === "idx-drop")?.vectors).toBe(1);
    expect((await client.vectorSearch(ctx, "idx-drop", [1, 0, 0, 0])).hits).toHaveLength(1);
    await client.vectorIndexDrop("idx-drop");
    await expect(client.vectorSearch(ctx, "idx-drop", [1, 0, 0, 0])).rejects.toBeInstanceOf(NotFound);
    expect(text((await client.kvGet(ctx, "k1"))!)).toBe('{"a":1}');
    const fresh = await client.vectorIndexCreate("idx-drop", 4);
    expect(fresh.vectors).toBe(0);
    expect((await client.vectorSearch(ctx, "idx-drop", [1, 0, 0, 0])).hits).toEqual([]);
    await client.vectorIndexDrop("idx-drop");
  });
});

describe("search", () => {
  const DIMS = 16;
  const COUNT = 300;
  let ctx: string;
  const vectors = new Map<string, number[]>();
  const values = new Map<string, Record<string, unknown>>();

  beforeAll(async () => {
    ctx = await context("search");
    await client.vectorIndexCreate("idx-search", DIMS);
    const entries = [];
    for (let i = 0; i < COUNT; i++) {
      const key = `doc/${String(i).padStart(4, "0")}`;
      const value = { n: i, color: i % 75 === 7 ? "red" : "blue", group: i < 150 ? "low" : "high", nested: { even: i % 2 === 0 } };
      const vector = vectorFor(i, DIMS);
      vectors.set(key, vector);
      values.set(key, value);
      entries.push({ key, value: json(value), vectors: [vector] });
    }
    for (let i = 0; i < entries.length; i += 128) await client.kvPutVectors(ctx, entries.slice(i, i + 128), "idx-search");
  });

  afterAll(async () => {
    await client.vectorIndexDrop("idx-search");
  });

  /** The keys passing `keep`, best first by cosine as computed here (equal scores in key order). */
  function expected(query: number[], keep: (key: string, value: Record<string, unknown>) => boolean): Array<[string, number]> {
    return [...vectors]
      .filter(([key]) => keep(key, values.get(key)!))
      .map(([key, vector]): [string, number] => [key, score("cosine", query, vector)])
      .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  }

  test("the k nearest, best first, with the scores of the metric", async () => {
    const query = vectorFor(1000, DIMS);
    const found = await client.vectorSearch(ctx, "idx-search", query, { k: 10 });
    expect(found.hits).toHaveLength(10);
    const want = expected(query, () => true).slice(0, 10);
    expect(found.hits.map((hit) => text(hit.key))).toEqual(want.map(([key]) => key));
    found.hits.forEach((hit, i) => expect(hit.score).toBeCloseTo(want[i]![1], 4));
    for (const hit of found.hits) {
      const value = (await client.kvGetEntry(ctx, hit.key))!;
      expect(hit.valueHash).toEqual(value.valueHash);
      expect(hit.valueLen).toBe(value.value.length);
    }
    const exact = await client.vectorSearch(ctx, "idx-search", query, { k: 10, exact: true });
    expect(exact.method).toBe("exact");
    expect(exact.candidates).toBeGreaterThanOrEqual(COUNT);
    expect(exact.hits.map((hit) => text(hit.key))).toEqual(want.map(([key]) => key));
  });

  test("exactly k with a selective filter; fewer only when fewer pass", async () => {
    const query = vectorFor(2000, DIMS);
    const red = expected(query, (_, value) => value["color"] === "red");
    expect(red).toHaveLength(4);
    const three = await client.vectorSearch(ctx, "idx-search", query, { k: 3, filter: { color: "red" } });
    expect(three.hits.map((hit) => text(hit.key))).toEqual(red.slice(0, 3).map(([key]) => key));
    const all = await client.vectorSearch(ctx, "idx-search", query, { k: 10, filter: { color: { $eq: "red" } } });
    expect(all.hits.map((hit) => text(hit.key))).toEqual(red.map(([key]) => key));

    // Operators, several fields ANDed, an object matched field by field.
    const band = (value: Record<string, unknown>): boolean => (value["n"] as number) >= 100 && (value["n"] as number) < 110;
    const filtered = await client.vectorSearch(ctx, "idx-search", query, { k: 5, filter: { n: { $gte: 100, $lt: 110 }, nested: { even: true } } });
    const want = expected(query, (_, value) => band(value) && (value["n"] as number) % 2 === 0);
    expect(filtered.hits.map((hit) => text(hit.key))).toEqual(want.map(([key]) => key));
    expect(want).toHaveLength(5);
    const ne = await client.vectorSearch(ctx, "idx-search", query, { k: 20, filter: { color: { $ne: "blue" }, group: "low" } });
    expect(ne.hits.map((hit) => text(hit.key))).toEqual(expected(query, (_, v) => v["color"] !== "blue" && v["group"] === "low").map(([key]) => key));
    // A filter that passes nothing, and one on a missing field.
    expect((await client.vectorSearch(ctx, "idx-search", query, { k: 5, filter: { color: "green" } })).hits).toEqual([]);
    expect((await client.vectorSearch(ctx, "idx-search", query, { k: 5, filter: { missing: { $gt: 1 } } })).hits).toEqual([]);
  });

  test("offset pages through the ranking; a prefix narrows it", async () => {
    const query = vectorFor(3000, DIMS);
    const first = await client.vectorSearch(ctx, "idx-search", query, { k: 30 });
    const page = await client.vectorSearch(ctx, "idx-search", query, { k: 10, offset: 10 });
    expect(page.hits.map((hit) => text(hit.key))).toEqual(first.hits.slice(10, 20).map((hit) => text(hit.key)));
    const near = await client.vectorSearch(ctx, "idx-search", query, { k: 1000, offset: 0, exact: true });
    expect(near.hits).toHaveLength(COUNT);
    const last = await client.vectorSearch(ctx, "idx-search", query, { k: 10, offset: COUNT - 4 });
    expect(last.hits).toHaveLength(4);

    const prefixed = await client.vectorSearch(ctx, "idx-search", query, { k: 5, prefix: "doc/01" });
    expect(prefixed.hits.map((hit) => text(hit.key))).toEqual(expected(query, (key) => key.startsWith("doc/01")).slice(0, 5).map(([key]) => key));
    expect((await client.vectorSearch(ctx, "idx-search", query, { k: 5, prefix: "nothing/" })).hits).toEqual([]);
  });
});

describe("an entry's vectors", () => {
  test("several vectors count once, with the best; inner product and L2 score as documented", async () => {
    for (const metric of ["cosine", "inner_product", "l2"] as const) {
      const ctx = await context(`multi-${metric}`);
      const index = `idx-multi-${metric}`;
      await client.vectorIndexCreate(index, 3, { metric });
      await client.kvPutVectors(
        ctx,
        new Map([
          ["a", { value: json({ k: "a" }), vectors: [[1, 0, 0], [0, 1, 0], [0, 0, 2]] }],
          ["b", { value: json({ k: "b" }), vectors: [[0.5, 0.5, 0]] }],
          ["c", { value: json({ k: "c" }) }], // no vector: never a hit
        ]),
        index,
      );
      const query = [0, 0.9, 0.1];
      const found = await client.vectorSearch(ctx, index, query, { k: 10 });
      expect(found.hits.map((hit) => text(hit.key)).sort()).toEqual(["a", "b"]);
      const best = (vs: number[][]) => Math.max(...vs.map((v) => score(metric, query, v)));
      const want = { a: best([[1, 0, 0], [0, 1, 0], [0, 0, 2]]), b: best([[0.5, 0.5, 0]]) };
      for (const hit of found.hits) expect(hit.score).toBeCloseTo(want[text(hit.key) as "a" | "b"], 5);
      expect(found.hits[0]!.score).toBeGreaterThanOrEqual(found.hits[1]!.score);
      expect(text((await client.kvGet(ctx, "c"))!)).toBe('{"k":"c"}');
      await client.vectorIndexDrop(index);
    }
  });

  test("a zero vector scores 0 under cosine", async () => {
    const ctx = await context("zero");
    await client.vectorIndexCreate("idx-zero", 2);
    await client.kvPutVectors(ctx, [{ key: "z", value: json({}), vectors: [[0, 0]] }], "idx-zero");
    const found = await client.vectorSearch(ctx, "idx-zero", [1, 1]);
    expect(found.hits.map((hit) => [text(hit.key), hit.score])).toEqual([["z", 0]]);
    await client.vectorIndexDrop("idx-zero");
  });

  test("an overwrite without vectors, a delete and an expiry take the vectors with them", async () => {
    const ctx = await context("overwrite");
    await client.vectorIndexCreate("idx-over", 2);
    const put = (key: string, vector: number[], ttlMs?: number) =>
      client.kvPutVectors(ctx, [{ key, value: json({ key }), vectors: [vector] }], "idx-over", ttlMs === undefined ? {} : { ttlMs });
    const keys = async () => (await client.vectorSearch(ctx, "idx-over", [1, 0], { k: 100 })).hits.map((hit) => text(hit.key)).sort();
    await put("kv-put", [1, 0]);
    await put("put-vectors-none", [1, 0.1]);
    await put("deleted", [1, 0.2]);
    await put("expires", [1, 0.3], 300);
    await put("stays", [1, 0.4]);
    await put("replaced", [1, 0.5]);
    expect(await keys()).toEqual(["deleted", "expires", "kv-put", "put-vectors-none", "replaced", "stays"]);

    await client.kvPut(ctx, { "kv-put": json({ plain: true }) }); // KV_PUT: no vectors any more
    await client.kvPutVectors(ctx, [{ key: "put-vectors-none", value: json({ none: true }) }], "idx-over");
    await client.kvDelete(ctx, ["deleted"]);
    await client.kvPutVectors(ctx, [{ key: "replaced", value: json({ again: true }), vectors: [[-1, 0]] }], "idx-over");
    const after = await client.vectorSearch(ctx, "idx-over", [1, 0], { k: 100 });
    expect(after.hits.map((hit) => text(hit.key)).sort()).toEqual(["expires", "replaced", "stays"]);
    expect(after.hits.find((hit) => text(hit.key) === "replaced")!.score).toBeCloseTo(-1, 5); // its new vector
    expect(text((await client.kvGet(ctx, "kv-put"))!)).toBe('{"plain":true}');

    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(await client.kvGet(ctx, "expires")).toBeUndefined();
    expect(await keys()).toEqual(["replaced", "stays"]);
    await client.vectorIndexDrop("idx-over");
  });

  test("ifAbsent keeps an entry and its vectors; durability local acknowledges", async () => {
    const ctx = await context("absent");
    await client.vectorIndexCreate("idx-absent", 2);
    await client.kvPutVectors(ctx, [{ key: "k", value: json({ v: 1 }), vectors: [[1, 0]] }], "idx-absent", { durability: "local" });
    await client.kvPutVectors(ctx, [{ key: "k", value: json({ v: 2 }), vectors: [[0, 1]] }], "idx-absent", { ifAbsent: true });
    expect(text((await client.kvGet(ctx, "k"))!)).toBe('{"v":1}');
    expect((await client.vectorSearch(ctx, "idx-absent", [1, 0])).hits[0]!.score).toBeCloseTo(1, 5);
    await client.vectorIndexDrop("idx-absent");
  });

  test("a put without any vector needs the index's dimension: given, or looked up", async () => {
    const ctx = await context("nodims");
    await client.vectorIndexCreate("idx-nodims", 3);
    await client.kvPutVectors(ctx, [{ key: "a", value: json({}) }], "idx-nodims");
    await client.kvPutVectors(ctx, [{ key: "b", value: json({}) }], "idx-nodims", { dims: 3 });
    await expect(client.kvPutVectors(ctx, [{ key: "c", value: json({}) }], "no-such-index")).rejects.toBeInstanceOf(NotFound);
    expect(await client.kvGet(ctx, "b")).toBeDefined();
    await client.vectorIndexDrop("idx-nodims");
  });
});

describe("turns with vectors (version 7)", () => {
  const INDEX = "idx-turns";
  /** Degrees between two turns of a context; B's turns sit half a step after A's. */
  const STEP = 4;
  /** The query: just before A's first turn on the circle, so A0, B0, A1, B1… is the order. */
  const QUERY_DEGREES = -1;
  interface Known {
    turn: Turn;
    context: "a" | "b";
    i: number;
    degrees: number[];
    role: string;
    typeTag: bigint;
  }
  const known: Known[] = [];
  const plain: Turn[] = [];
  let base: string;
  let nameA: string;
  let nameB: string;
  let idA: number;

  const at = (degrees: number): number[] => [Math.cos((degrees * Math.PI) / 180), Math.sin((degrees * Math.PI) / 180)];
  const query = at(QUERY_DEGREES);

  /** The turns passing `keep`, best first by cosine (each turn with its best vector). */
  function expected(keep: (turn: Known) => boolean): Array<[Known, number]> {
    return known
      .filter(keep)
      .map((turn): [Known, number] => [turn, Math.max(...turn.degrees.map((d) => score("cosine", query, at(d))))])
      .sort((x, y) => y[1] - x[1] || x[0].turn.turnId - y[0].turn.turnId);
  }
  const names = (hits: Array<{ turn: Turn }>): string[] =>
    hits.map((hit) => {
      const found = known.find((turn) => turn.turn.turnId === hit.turn.turnId);
      return found === undefined ? `turn ${hit.turn.turnId}` : `${found.context}${found.i}`;
    });
  const want = (keep: (turn: Known) => boolean, from = 0, to?: number): string[] =>
    expected(keep)
      .slice(from, to)
      .map(([turn]) => `${turn.context}${turn.i}`);

  beforeAll(async () => {
    base = `turns-${Date.now()}-${Math.floor(Math.random() * 1e9)}`;
    nameA = `${base}/a`;
    nameB = `${base}/b`;
    await client.vectorIndexCreate(INDEX, 2);
    idA = (await client.openContext(nameA, { tags: { project: "x", team: "t" } })).info.contextId;
    await client.openContext(nameB, { tags: { project: "y", team: "t" } });
    for (const [context, name, start] of [["a", nameA, 0], ["b", nameB, STEP / 2]] as const) {
      const specs: VectorTurnSpec[] = [];
      const meta: Array<Omit<Known, "turn">> = [];
      for (let i = 0; i < 10; i++) {
        // A's last turn has a second vector, far off: it counts once, with its best.
        const degrees = context === "a" && i === 9 ? [start + i * STEP, 200] : [start + i * STEP];
        const role = i % 2 === 0 ? "user" : "assistant";
        const typeTag = i < 5 ? 10n : 20n;
        specs.push({ payload: utf8(`${context}/${i}`), key: `${context}-${i}`, typeTag, labels: { role }, vectors: degrees.map(at) });
        meta.push({ context, i, degrees, role, typeTag });
      }
      specs.push({ payload: utf8(`${context}/plain`), labels: { role: "user" }, typeTag: 10n }); // no vector: never a hit
      const appended = await client.appendTurnsVectors(name, specs, { index: INDEX });
      expect(appended).toHaveLength(11);
      meta.forEach((m, i) => known.push({ ...m, turn: appended[i]!.turn }));
      plain.push(appended[10]!.turn);
      // Each turn hangs from the one before it, as appendTurns'.
      appended.slice(1).forEach((turn, i) => expect(turn.turn.parentTurnId).toBe(appended[i]!.turn.turnId));
    }
    expect((await client.vectorIndexes()).find((index) => index.name === INDEX)?.vectors).toBe(21);
  });

  afterAll(async () => {
    await client.vectorIndexDrop(INDEX);
  });

  test("every context of the tenant: the k nearest turns, best first, with their scores", async () => {
    const found = await client.vectorSearchTurns(INDEX, query, { k: 6 });
    expect(names(found.hits)).toEqual(["a0", "b0", "a1", "b1", "a2", "b2"]);
    expect(names(found.hits)).toEqual(want(() => true, 0, 6));
    const best = expected(() => true);
    found.hits.forEach((hit, i) => {
      expect(hit.score).toBeCloseTo(best[i]![1], 5);
      expect(hit.turn).toEqual(best[i]![0].turn); // the TURN as the append answered it
    });
    expect(typeof found.exact).toBe("boolean");
    expect(found.method).toBe(found.exact ? "exact" : "graph");

    const exact = await client.vectorSearchTurns(INDEX, Float32Array.from(query), { k: 1000, exact: true });
    expect([exact.exact, exact.method]).toEqual([true, "exact"]);
    expect(exact.candidates).toBeGreaterThanOrEqual(21);
    expect(names(exact.hits)).toEqual(want(() => true)); // all twenty, each once; the plain turns never
    expect(exact.hits.some((hit) => plain.some((turn) => turn.turnId === hit.turn.turnId))).toBe(false);
    // A query far from everything else finds A9 by its second vector, scored by it.
    const far = await client.vectorSearchTurns(INDEX, at(200), { k: 1 });
    expect(names(far.hits)).toEqual(["a9"]);
    expect(far.hits[0]!.score).toBeCloseTo(1, 5);
  });

  test("by context (id or name), by name prefix, by tags: each given narrows the others", async () => {
    const search = async (options: Parameters<Client["vectorSearchTurns"]>[2]) => names((await client.vectorSearchTurns(INDEX, query, options)).hits);
    expect(await search({ k: 3, context: idA })).toEqual(want((t) => t.context === "a", 0, 3));
    expect(await search({ k: 3, context: nameB })).toEqual(["b0", "b1", "b2"]);
    // Exactly k whenever k pass; fewer only when fewer pass.
    expect(await search({ k: 20, namePrefix: `${base}/` })).toEqual(want(() => true));
    expect(await search({ k: 25, namePrefix: `${base}/` })).toHaveLength(20);
    expect(await search({ k: 4, namePrefix: nameB })).toEqual(want((t) => t.context === "b", 0, 4));
    expect(await search({ k: 10, namePrefix: `${base}/nobody` })).toEqual([]);
    expect(await search({ k: 20, tags: { project: "x" } })).toEqual(want((t) => t.context === "a"));
    expect(await search({ k: 20, tags: { team: "t", project: "y" } })).toEqual(want((t) => t.context === "b"));
    expect(await search({ k: 5, tags: { team: "t" }, namePrefix: `${base}/` })).toEqual(want(() => true, 0, 5));
    expect(await search({ k: 5, context: idA, tags: { project: "x" } })).toEqual(want((t) => t.context === "a", 0, 5));
    expect(await search({ k: 5, context: idA, namePrefix: nameB })).toEqual([]);
    expect(await search({ k: 5, context: nameA, tags: { project: "y" } })).toEqual([]);
  });

  test("labels and type tag; exactly k after an offset", async () => {
    const search = async (options: Parameters<Client["vectorSearchTurns"]>[2]) => (await client.vectorSearchTurns(INDEX, query, options)).hits;
    const assistants = (t: Known) => t.role === "assistant";
    expect(names(await search({ k: 3, offset: 1, labels: { role: "assistant" } }))).toEqual(want(assistants, 1, 4));
    expect(names(await search({ k: 3, offset: 1, labels: { role: "assistant" } }))).toEqual(["b1", "a3", "b3"]);
    expect(names(await search({ k: 100, labels: { role: "assistant" } }))).toHaveLength(10);
    const typed = await search({ k: 100, typeTag: 20n });
    expect(names(typed)).toEqual(want((t) => t.typeTag === 20n));
    expect(typed).toHaveLength(10);
    expect(typed.every((hit) => hit.turn.typeTag === 20n)).toBe(true);
    expect(names(await search({ k: 100, typeTag: 10 }))).toEqual(want((t) => t.typeTag === 10n)); // a number tag too
    expect(await search({ k: 5, typeTag: 30n })).toEqual([]);
    // Everything at once: B's user turns of type 10 (0, 2, 4) after the first.
    expect(names(await search({ k: 5, offset: 1, tags: { project: "y" }, labels: { role: "user" }, typeTag: 10n }))).toEqual(["b2", "b4"]);
    // Offsets page through the ranking; past the end, fewer.
    const ten = names(await search({ k: 10, namePrefix: `${base}/` }));
    const first = names(await search({ k: 5, offset: 0, namePrefix: `${base}/` }));
    const second = names(await search({ k: 5, offset: 5, namePrefix: `${base}/` }));
    expect([...first, ...second]).toEqual(ten);
    expect(names(await search({ k: 10, offset: 18, namePrefix: `${base}/` }))).toEqual(want(() => true, 18));
    expect(await search({ k: 10, offset: 20, namePrefix: `${base}/` })).toEqual([]);
  });

  test("a fork finds what it inherited; a retry by key writes nothing, vectors included", async () => {
    const a4 = known.find((t) => t.context === "a" && t.i === 4)!.turn;
    const fork = await client.fork(a4.turnId);
    const inherited = await client.vectorSearchTurns(INDEX, query, { k: 10, context: fork.contextId });
    expect(names(inherited.hits)).toEqual(want((t) => t.context === "a" && t.i <= 4));

    const again = await client.appendTurnsVectors(nameA, [{ payload: utf8("a/0"), key: "a-0", vectors: [at(QUERY_DEGREES)] }], { index: INDEX, durability: "local" });
    expect(again[0]!.existing).toBe(true);
    expect(again[0]!.turn.turnId).toBe(known[0]!.turn.turnId);
    expect((await client.vectorIndexes()).find((index) => index.name === INDEX)?.vectors).toBe(21);
    const top = await client.vectorSearchTurns(INDEX, query, { k: 1, context: nameA });
    expect(top.hits[0]!.score).toBeCloseTo(score("cosine", query, at(0)), 5); // its old vector, not the new one
  });

  test("a redacted turn is never a hit; a turn without vectors needs dims, given or looked up", async () => {
    const ctx = await context("turns-redact");
    await client.vectorIndexCreate("idx-turns-redact", 3);
    const appended = await client.appendTurnsVectors(
      ctx,
      [
        { payload: utf8("one"), vectors: [[1, 0, 0]] },
        { payload: utf8("two"), vectors: [[0, 1, 0], [0, 0, 1]] },
      ],
      { index: "idx-turns-redact", expectedHead: 0 },
    );
    const ids = appended.map((turn) => turn.turn.turnId);
    const hits = async () => (await client.vectorSearchTurns("idx-turns-redact", [1, 1, 0], { k: 10, context: ctx, exact: true })).hits.map((hit) => hit.turn.turnId);
    expect((await hits()).sort()).toEqual([...ids].sort());
    await client.redactTurn(ids[0]!);
    expect(await hits()).toEqual([ids[1]]);

    // No vector in the request: the dimension from `dims`, else from the index list.
    const bare = await client.appendTurnsVectors(ctx, [{ payload: utf8("three") }], { index: "idx-turns-redact" });
    const given = await client.appendTurnsVectors(ctx, [{ payload: utf8("four"), vectors: [] }], { index: "idx-turns-redact", dims: 3 });
    expect(given[0]!.turn.parentTurnId).toBe(bare[0]!.turn.turnId);
    await expect(client.appendTurnsVectors(ctx, [{ payload: utf8("five") }], { index: "no-such-index" })).rejects.toBeInstanceOf(NotFound);
    expect((await client.head(ctx)).headTurnId).toBe(given[0]!.turn.turnId);
    expect(await hits()).toEqual([ids[1]]);
    await client.vectorIndexDrop("idx-turns-redact");
  });

  describe("refused, nothing appended", () => {
    let ctx: string;
    let headBefore: number;
    const vectorsIn = async (index: string) => (await client.vectorIndexes()).find((found) => found.name === index)?.vectors;

    beforeAll(async () => {
      ctx = await context("turns-refused");
      await client.vectorIndexCreate("idx-turns-refused", 4);
      const [first] = await client.appendTurnsVectors(ctx, [{ payload: utf8("kept"), vectors: [[1, 0, 0, 0]] }], { index: "idx-turns-refused" });
      headBefore = first!.turn.turnId;
    });

    afterAll(async () => {
      await client.vectorIndexDrop("idx-turns-refused");
    });

    test("by the client, before sending: dimensions, NaN, more than 16 vectors, names, counts, k", async () => {
      const append = (vectors: unknown[][], options: Partial<Parameters<Client["appendTurnsVectors"]>[2]> = {}) =>
        client.appendTurnsVectors(
          ctx,
          vectors.map((list, i) => ({ payload: utf8(`bad-${i}`), vectors: list as number[][] })),
          { index: "idx-turns-refused", ...options },
        );
      await expect(append([[[1, 0, 0, 0]], [[1, 0, 0]]])).rejects.toThrow(/turn 1, vector 0 has 3 dimensions/);
      await expect(append([[[1, Number.NaN, 0, 0]]])).rejects.toThrow(/turn 0, vector 0: component 1 is NaN/);
      await expect(append([[[1, 0, Number.NEGATIVE_INFINITY, 0]]])).rejects.toThrow(RangeError);
      await expect(append([[[1, 0, 0, 1e39]]])).rejects.toThrow(/beyond the f32 range/);
      await expect(append([[[1, 0, "0", 0]]])).rejects.toThrow(TypeError);
      await expect(append([[], Array.from({ length: 17 }, () => [1, 0, 0, 0])])).rejects.toThrow(/turn 1 has 17 vectors; a turn carries at most 16/);
      await expect(append([[[1, 0, 0, 0]]], { dims: 3 })).rejects.toThrow(/dims is 3 but the vectors have 4/);
      await expect(append([[[1, 0, 0, 0]]], { index: "" })).rejects.toThrow(RangeError);
      await expect(append([[[1, 0, 0, 0]]], { index: "x".repeat(65) })).rejects.toThrow(RangeError);
      await expect(append([[]], { dims: 0 })).rejects.toThrow(RangeError);
      await expect(client.appendTurnsVectors(ctx, [], { index: "idx-turns-refused" })).rejects.toThrow(RangeError);
      await expect(client.appendTurnsVectors(ctx, [{ payload: utf8("x") }], undefined as never)).rejects.toThrow(TypeError);

      const search = (vector: unknown, options: Parameters<Client["vectorSearchTurns"]>[2] = {}) =>
        client.vectorSearchTurns("idx-turns-refused", vector as number[], options);
      await expect(search([1, Number.NaN, 0, 0])).rejects.toThrow(/query vector: component 1 is NaN/);
      await expect(search([])).rejects.toThrow(RangeError);
      await expect(search([1, 0, 0, 0], { k: 0 })).rejects.toThrow(/k is 1 to 1000/);
      await expect(search([1, 0, 0, 0], { k: 10, offset: 991 })).rejects.toThrow(/k \+ offset at most 1000/);
      await expect(search([1, 0, 0, 0], { efSearch: 4097 })).rejects.toThrow(RangeError);
      const many = (count: number) => Object.fromEntries(Array.from({ length: count }, (_, i) => [`k${i}`, "v"]));
      await expect(search([1, 0, 0, 0], { tags: many(33) })).rejects.toThrow(/at most 32 tags/);
      await expect(search([1, 0, 0, 0], { labels: many(17) })).rejects.toThrow(/at most 16 labels/);
      await expect(search([1, 0, 0, 0], { typeTag: -1 })).rejects.toThrow(RangeError);
      await expect(search([1, 0, 0, 0], { typeTag: 1n << 64n })).rejects.toThrow(RangeError);
      await expect(search([1, 0, 0, 0], { context: "" })).rejects.toThrow(RangeError);
    });

    test("by the server: another dimension, NaN, more than 16 vectors, an unknown index or context", async () => {
      // Through the client: consistent vectors of another dimension, an index it does not have.
      const dims = await client.appendTurnsVectors(ctx, [{ payload: utf8("d"), vectors: [[1, 0, 0]] }], { index: "idx-turns-refused" }).catch((e: unknown) => e);
      expect(dims).toBeInstanceOf(InvalidArgument);
      expect(String(dims)).toMatch(/3/);
      expect(String(dims)).toMatch(/4/);
      await expect(client.appendTurnsVectors(ctx, [{ payload: utf8("i"), vectors: [[1, 0, 0, 0]] }], { index: "no-such-index" })).rejects.toBeInstanceOf(NotFound);
      await expect(
        client.appendTurnsVectors(`no-such-context-${Date.now()}`, [{ payload: utf8("c"), vectors: [[1, 0, 0, 0]] }], { index: "idx-turns-refused" }),
      ).rejects.toBeInstanceOf(NotFound);

      // As raw frames, past the client's checks.
      const appendFrame = (count: number, components: number[], index = "idx-turns-refused") => {
        const w = new p.Writer().contextRef(ctx).u32(0).u64(0).shortStr(index, "index").u16(components.length).u16(1);
        w.u8(p.ParentKind.HEAD).u64(0).u64(0).u32(0).u8(0).extras({ key: new Uint8Array(0), labels: [], links: [] });
        w.u32(3).bytes(utf8("raw")).u8(count);
        for (let i = 0; i < count; i++) w.f32s(Float32Array.from(components));
        return p.raw(p.MsgType.APPEND_TURNS_VECTORS, p.concat(w.finish()), 7);
      };
      await expect(client.request(appendFrame(1, [1, Number.NaN, 0, 0]))).rejects.toBeInstanceOf(InvalidArgument);
      await expect(client.request(appendFrame(1, [1, Number.POSITIVE_INFINITY, 0, 0]))).rejects.toBeInstanceOf(InvalidArgument);
      const crowded = await client.request(appendFrame(17, [1, 0, 0, 0])).catch((e: unknown) => e);
      expect(crowded).toBeInstanceOf(TooLarge);
      expect(String(crowded)).toMatch(/vectors per turn/);
      await expect(client.request(appendFrame(1, [1, 0, 0, 0], "no-such-index"))).rejects.toBeInstanceOf(NotFound);
      expect(client.connected).toBe(true);

      const search = (options: Parameters<Client["vectorSearchTurns"]>[2], index = "idx-turns-refused", vector = [1, 0, 0, 0]) =>
        client.vectorSearchTurns(index, vector, options);
      await expect(search({}, "no-such-index")).rejects.toBeInstanceOf(NotFound);
      await expect(search({}, "idx-turns-refused", [1, 0, 0])).rejects.toBeInstanceOf(InvalidArgument);
      await expect(search({ context: `no-such-context-${Date.now()}` })).rejects.toBeInstanceOf(NotFound);
      const searchFrame = (k: number, offset: number, vector: number[]) => {
        const w = new p.Writer().shortStr("idx-turns-refused", "index").u16(vector.length).f32s(Float32Array.from(vector));
        w.u16(k).u16(offset).u8(0).u8(0).u16(0).contextRef(0).u16(0).u16(0).u16(0).u64(0);
        return p.raw(p.MsgType.VECTOR_SEARCH_TURNS, p.concat(w.finish()), 7);
      };
      await expect(client.request(searchFrame(1, 0, [Number.NaN, 0, 0, 0]))).rejects.toBeInstanceOf(InvalidArgument);
      await expect(client.request(searchFrame(0, 0, [1, 0, 0, 0]))).rejects.toBeInstanceOf(InvalidArgument);
      await expect(client.request(searchFrame(10, 991, [1, 0, 0, 0]))).rejects.toBeInstanceOf(TooLarge);
      expect(client.connected).toBe(true);
    });

    test("nothing was appended: the head and the index's vectors are as they were", async () => {
      expect((await client.head(ctx)).headTurnId).toBe(headBefore);
      expect(await vectorsIn("idx-turns-refused")).toBe(1);
      const found = await client.vectorSearchTurns("idx-turns-refused", [1, 0, 0, 0], { k: 10, context: ctx, exact: true });
      expect(found.hits.map((hit) => hit.turn.turnId)).toEqual([headBefore]);
    });
  });
});

describe("refused", () => {
  let ctx: string;

  beforeAll(async () => {
    ctx = await context("refused");
    await client.vectorIndexCreate("idx-refused", 4);
  });

  afterAll(async () => {
    await client.vectorIndexDrop("idx-refused");
  });

  test("by the client, before sending: bad dimensions, NaN, infinities, counts, k", async () => {
    const put = (vectors: unknown[], key = "bad") =>
      client.kvPutVectors(ctx, [{ key, value: json({}), vectors: vectors as number[][] }], "idx-refused");
    await expect(put([[1, 2, 3, 4], [1, 2, 3]])).rejects.toThrow(/vector 1 has 3 dimensions/);
    await expect(put([[1, Number.NaN, 3, 4]])).rejects.toThrow(/entry 0 \(key "bad"\), vector 0: component 1 is NaN/);
    await expect(put([[1, 2, Number.POSITIVE_INFINITY, 4]])).rejects.toThrow(RangeError);
    await expect(put([[1, 2, 3, 1e39]])).rejects.toThrow(/beyond the f32 range/);
    await expect(put([[1, 2, "3", 4]])).rejects.toThrow(TypeError);
    await expect(put(Array.from({ length: 65 }, () => [1, 0, 0, 0]))).rejects.toThrow(/65 vectors; an entry carries at most 64/);
    await expect(client.kvPutVectors(ctx, [], "idx-refused")).rejects.toThrow(RangeError);
    const many = Array.from({ length: 129 }, (_, i) => ({ key: `m${i}`, value: json({}), vectors: [[1, 0, 0, 0]] }));
    await expect(client.kvPutVectors(ctx, many, "idx-refused")).rejects.toThrow(/1 to 128 entries/);
    await expect(client.kvPutVectors(ctx, [{ key: "k", value: json({}), vectors: [[1, 0, 0, 0]] }], "")).rejects.toThrow(RangeError);
    await expect(client.kvPutVectors(ctx, [{ key: "k", value: json({}), vectors: [[1, 0, 0, 0]] }], "x".repeat(65))).rejects.toThrow(RangeError);
    expect(await client.kvGet(ctx, "bad")).toBeUndefined();

    const search = (vector: unknown, options = {}) => client.vectorSearch(ctx, "idx-refused", vector as number[], options);
    await expect(search([1, Number.NaN, 0, 0])).rejects.toThrow(/query vector: component 1 is NaN/);
    await expect(search([])).rejects.toThrow(RangeError);
    await expect(search([1, 0, 0, 0], { k: 0 })).rejects.toThrow(/k is 1 to 1000/);
    await expect(search([1, 0, 0, 0], { k: 1001 })).rejects.toThrow(RangeError);
    await expect(search([1, 0, 0, 0], { k: 10, offset: 991 })).rejects.toThrow(/k \+ offset at most 1000/);
    await expect(search([1, 0, 0, 0], { efSearch: 4097 })).rejects.toThrow(RangeError);
    await expect(search([1, 0, 0, 0], { prefix: "p".repeat(257) })).rejects.toThrow(RangeError);
    await expect(search([1, 0, 0, 0], { filter: ["a"] })).rejects.toThrow(TypeError);
    await expect(search([1, 0, 0, 0], { filter: { big: "x".repeat(70_000) } })).rejects.toThrow(/at most 65536 bytes/);
    await expect(client.vectorIndexCreate("x", 0)).rejects.toThrow(RangeError);
    await expect(client.vectorIndexCreate("x", 4097)).rejects.toThrow(RangeError);
    await expect(client.vectorIndexCreate("x", 4, { metric: "hamming" as VectorMetricName })).rejects.toThrow(RangeError);
    expect((await client.vectorIndexes()).map((i) => i.name)).not.toContain("x");
  });

  test("by the server: another dimension, a non-finite component, an unknown metric, limits", async () => {
    const putFrame = (dims: number, components: number[], count = 1) => {
      const w = new p.Writer().contextRef(ctx).u8(0).u64(0).shortStr("idx-refused", "index").u16(dims).u16(1);
      w.short(utf8("raw"), "key").u32(2).bytes(utf8("{}")).u8(count);
      for (let i = 0; i < count; i++) w.f32s(Float32Array.from(components));
      return p.concat(w.finish());
    };
    const send = (body: Uint8Array, msgType: number = p.MsgType.KV_PUT_VECTORS) => client.request(p.raw(msgType, body, 6));
    const wrongDims = await send(putFrame(3, [1, 0, 0])).catch((e: unknown) => e);
    expect(wrongDims).toBeInstanceOf(InvalidArgument);
    expect(String(wrongDims)).toMatch(/3/);
    expect(String(wrongDims)).toMatch(/4/);
    await expect(send(putFrame(4, [1, Number.NaN, 0, 0]))).rejects.toBeInstanceOf(InvalidArgument);
    await expect(send(putFrame(4, [1, Number.POSITIVE_INFINITY, 0, 0]))).rejects.toBeInstanceOf(InvalidArgument);
    await expect(send(putFrame(4, [1, 0, 0, 0], 65))).rejects.toBeInstanceOf(TooLarge);
    expect(await client.kvGet(ctx, "raw")).toBeUndefined(); // nothing written
    expect(client.connected).toBe(true);

    const create = (dims: number, metric: number, efSearch = 0) =>
      send(p.concat(new p.Writer().shortStr("idx-raw", "name").u16(dims).u8(metric).u8(0).u16(efSearch).finish()), p.MsgType.VECTOR_INDEX_CREATE);
    const metric = await create(4, 9).catch((e: unknown) => e);
    expect(metric).toBeInstanceOf(InvalidArgument);
    expect(String(metric)).toMatch(/9/);
    await expect(create(0, 1)).rejects.toBeInstanceOf(InvalidArgument);
    await expect(create(4097, 1)).rejects.toBeInstanceOf(InvalidArgument);
    // ef_search over 4,096 and a name over 64 bytes: docs/protocol.md names no code for them.
    const refusedEither = (e: unknown) => e instanceof InvalidArgument || e instanceof TooLarge;
    expect(refusedEither(await create(4, 1, 4097).catch((e: unknown) => e))).toBe(true);
    const longName = p.concat(new p.Writer().shortStr("n".repeat(65), "name").u16(4).u8(1).u8(0).u16(0).finish());
    expect(refusedEither(await send(longName, p.MsgType.VECTOR_INDEX_CREATE).catch((e: unknown) => e))).toBe(true);
    await expect(send(p.concat(new p.Writer().u16(0).u16(4).u8(1).u8(0).u16(0).finish()), p.MsgType.VECTOR_INDEX_CREATE)).rejects.toBeInstanceOf(
      InvalidArgument,
    );
    expect((await client.vectorIndexes()).map((i) => i.name)).not.toContain("idx-raw");

    const searchFrame = (k: number, offset: number, vector = [1, 0, 0, 0]) => {
      const w = new p.Writer().contextRef(ctx).shortStr("idx-refused", "index").u16(vector.length).f32s(Float32Array.from(vector));
      return p.concat(w.u16(k).u16(offset).u8(0).u8(0).u16(0).u16(0).u32(0).finish());
    };
    await expect(send(searchFrame(0, 0), p.MsgType.VECTOR_SEARCH)).rejects.toBeInstanceOf(InvalidArgument);
    await expect(send(searchFrame(1001, 0), p.MsgType.VECTOR_SEARCH)).rejects.toBeInstanceOf(TooLarge);
    await expect(send(searchFrame(10, 991), p.MsgType.VECTOR_SEARCH)).rejects.toBeInstanceOf(TooLarge);
    await expect(send(searchFrame(10, 0, [1, 0, 0]), p.MsgType.VECTOR_SEARCH)).rejects.toBeInstanceOf(InvalidArgument);
    await expect(send(searchFrame(10, 0, [Number.NaN, 0, 0, 0]), p.MsgType.VECTOR_SEARCH)).rejects.toBeInstanceOf(InvalidArgument);
    expect(client.connected).toBe(true);
  });

  test("by the server: filters it cannot evaluate, unknown indexes and contexts", async () => {
    const search = (options: Parameters<Client["vectorSearch"]>[3], index = "idx-refused", context: string = ctx) =>
      client.vectorSearch(context, index, [1, 0, 0, 0], options);
    const op = await search({ filter: { n: { $in: [1, 2] } } }).catch((e: unknown) => e);
    expect(op).toBeInstanceOf(InvalidArgument);
    expect(String(op)).toMatch(/\$in/);
    const raw = (filter: string) => {
      const w = new p.Writer().contextRef(ctx).shortStr("idx-refused", "index").u16(4).f32s(Float32Array.of(1, 0, 0, 0));
      const bytes = utf8(filter);
      return client.request(p.raw(p.MsgType.VECTOR_SEARCH, p.concat(w.u16(1).u16(0).u8(0).u8(0).u16(0).u16(0).u32(bytes.length).bytes(bytes).finish()), 6));
    };
    await expect(raw("{not json")).rejects.toBeInstanceOf(InvalidArgument);
    await expect(raw("[1,2]")).rejects.toBeInstanceOf(InvalidArgument);
    await expect(search({}, "no-such-index")).rejects.toBeInstanceOf(NotFound);
    await expect(search({}, "idx-refused", `no-such-context-${Date.now()}`)).rejects.toBeInstanceOf(NotFound);
    await expect(
      client.kvPutVectors(`no-such-context-${Date.now()}`, [{ key: "k", value: json({}), vectors: [[1, 0, 0, 0]] }], "idx-refused"),
    ).rejects.toBeInstanceOf(NotFound);
    await expect(client.kvPutVectors(ctx, [{ key: "k", value: json({}), vectors: [[1, 0, 0, 0]] }], "no-such-index")).rejects.toBeInstanceOf(NotFound);
    expect(client.connected).toBe(true);
  });
});

describe("the codec and the answer's promises", () => {
  test("VECTOR_HITS and VECTOR_INDEX_INFO decode strictly", () => {
    const hits = (method: number, reserved = 0) =>
      p.concat(new p.Writer().u8(method).u8(reserved).u32(7).u16(1).short(utf8("k"), "key").f32s(Float32Array.of(0.5)).hash(new Uint8Array(32)).u32(2).finish());
    expect(p.decodeBody("VECTOR_HITS", hits(1), p.decodeVectorHits)).toEqual({
      method: 1,
      candidates: 7,
      hits: [{ key: utf8("k"), score: 0.5, valueHash: new Uint8Array(32), valueLen: 2 }],
    });
    expect(() => p.decodeBody("VECTOR_HITS", hits(2), p.decodeVectorHits)).toThrow(ProtocolError);
    expect(() => p.decodeBody("VECTOR_HITS", hits(0, 1), p.decodeVectorHits)).toThrow(ProtocolError);
    const info = (metric: number, dims = 4, name = "i") =>
      p.concat(new p.Writer().u32(3).u16(dims).u8(metric).u8(0).u16(128).u64(9).shortStr(name, "name").finish());
    expect(p.decodeBody("VECTOR_INDEX", info(3), p.decodeVectorIndex)).toEqual({ indexId: 3, dims: 4, metric: 3, efSearch: 128, vectors: 9, name: "i" });
    expect(() => p.decodeBody("VECTOR_INDEX", info(4), p.decodeVectorIndex)).toThrow(ProtocolError);
    expect(() => p.decodeBody("VECTOR_INDEX", info(1, 0), p.decodeVectorIndex)).toThrow(ProtocolError);
    expect(() => p.decodeBody("VECTOR_INDEX", info(1, 4, ""), p.decodeVectorIndex)).toThrow(ProtocolError);
    expect(p.kvPutVectors(1, 0, 0, "i", 2, [{ key: utf8("k"), value: utf8("v"), vectors: [Float32Array.of(1, 2)] }]).minVersion).toBe(6);
    expect(p.TAKES_ACK_AFTER.has(p.MsgType.KV_PUT_VECTORS)).toBe(true);
  });

  test("TURN_HITS decodes strictly; APPEND_TURNS_VECTORS and VECTOR_SEARCH_TURNS need version 7", () => {
    const turn = (turnId: number, typeTag = 1n) =>
      new p.Writer().u64(turnId).u64(0).u64(3).u32(0).u32(0).u64(typeTag).hash(new Uint8Array(32)).u32(0).u32(0).u64(1_767_225_600_000).finish();
    const hits = (method: number, reserved = 0, count = 1) =>
      p.concat([...new p.Writer().u8(method).u8(reserved).u32(9).u16(count).finish(), ...turn(42), ...new p.Writer().f32s(Float32Array.of(0.5)).finish()]);
    const decoded = p.decodeBody("TURN_HITS", hits(0), p.decodeTurnHits);
    expect([decoded.method, decoded.candidates, decoded.hits.length, decoded.hits[0]!.turn.turnId, decoded.hits[0]!.score]).toEqual([0, 9, 1, 42, 0.5]);
    expect(() => p.decodeBody("TURN_HITS", hits(2), p.decodeTurnHits)).toThrow(ProtocolError);
    expect(() => p.decodeBody("TURN_HITS", hits(1, 1), p.decodeTurnHits)).toThrow(ProtocolError);
    expect(() => p.decodeBody("TURN_HITS", hits(1, 0, 2), p.decodeTurnHits)).toThrow(ProtocolError);
    expect(() => p.decodeBody("TURN_HITS", hits(1).subarray(0, 8 + 88 + 3), p.decodeTurnHits)).toThrow(/too short/);

    const spec: p.VectorTurnSpecRecord = {
      parentKind: p.ParentKind.HEAD, parentTurnId: 0, typeTag: 0n, codec: 0, summary: false,
      extras: { key: new Uint8Array(0), labels: [], links: [] }, payload: utf8("x"), byHash: false, vectors: [Float32Array.of(1, 2)],
    };
    expect(p.appendTurnsVectors(1, undefined, "i", 2, [spec]).minVersion).toBe(7);
    expect(p.TAKES_ACK_AFTER.has(p.MsgType.APPEND_TURNS_VECTORS)).toBe(true);
    expect(() => p.appendTurnsVectors(1, undefined, "i", 3, [spec])).toThrow(/turn 0, vector 0 has 2 dimensions; the index has 3/);
    expect(() => p.appendTurnsVectors(1, undefined, "i", 2, [{ ...spec, vectors: Array.from({ length: 17 }, () => Float32Array.of(1, 2)) }])).toThrow(/at most 16/);
    expect(() => p.appendTurnsVectors(1, undefined, "i", 2, [])).toThrow(RangeError);
    // Without TYPE_TAG the type tag is 0; CONTEXT_REF u16 0, u64 0 when no context is named.
    const search = p.vectorSearchTurns({
      index: "i", vector: Float32Array.of(1), k: 1, offset: 0, exact: true, efSearch: 0, context: undefined, namePrefix: "", tags: [], labels: [], typeTag: undefined,
    });
    expect(search.minVersion).toBe(7);
    expect(Buffer.from(p.concat(search.body)).toString("hex")).toBe("0100690100" + "0000803f" + "0100" + "0000" + "01" + "00" + "0000" + "0000" + "0000000000000000" + "0000" + "0000" + "0000" + "0000000000000000");
  });

  test("a version-5 server is sent nothing (a version-6 one nothing of version 7); hits out of order or outside the prefix are a ProtocolError", async () => {
    let answer: (reqId: bigint) => Buffer = () => Buffer.alloc(0);
    let requests = 0;
    const fake = await scripted(5, (socket, reqId) => {
      requests++;
      socket.write(answer(reqId));
    });
    try {
      const v5 = new Client(fake.addr);
      expect((await v5.serverInfo()).version).toBe(5);
      await expect(v5.vectorIndexes()).rejects.toBeInstanceOf(NotSupported);
      await expect(v5.vectorSearch("c", "i", [1])).rejects.toBeInstanceOf(NotSupported);
      await expect(v5.kvPutVectors("c", [{ key: "k", value: json({}), vectors: [[1]] }], "i")).rejects.toBeInstanceOf(NotSupported);
      await expect(v5.vectorSearchTurns("i", [1])).rejects.toBeInstanceOf(NotSupported);
      await expect(v5.appendTurnsVectors("c", [{ payload: utf8("x"), vectors: [[1]] }], { index: "i" })).rejects.toBeInstanceOf(NotSupported);
      expect(requests).toBe(0);
      await v5.close();
    } finally {
      await fake.close();
    }

    const hitsBody = (entries: Array<[string, number]>) => {
      const w = new p.Writer().u8(0).u8(0).u32(entries.length).u16(entries.length);
      for (const [key, s] of entries) w.short(utf8(key), "key").f32s(Float32Array.of(s)).hash(new Uint8Array(32)).u32(0);
      return p.concat(w.finish());
    };
    const fake6 = await scripted(6, (socket, reqId) => socket.write(answer(reqId)));
    try {
      const v6 = new Client(fake6.addr);
      for (const [entries, message] of [
        [[["a", 0.5], ["b", 0.9]], /not best first/],
        [[["b", 0.5], ["a", 0.5]], /not best first/],
        [[["a", 0.5], ["a", 0.4]], /twice/],
        [[["q", 0.5]], /outside the prefix/],
      ] as Array<[Array<[string, number]>, RegExp]>) {
        answer = (reqId) => frame(p.MsgType.VECTOR_SEARCH | p.RESPONSE_BIT, reqId, hitsBody(entries));
        await expect(v6.vectorSearch("c", "i", [1], { prefix: entries[0]![0] === "q" ? "p" : "" })).rejects.toThrow(message);
      }
      answer = (reqId) => frame(p.MsgType.VECTOR_SEARCH | p.RESPONSE_BIT, reqId, hitsBody([["a", 0.5], ["b", 0.5], ["c", 0.1]]));
      await expect(v6.vectorSearch("c", "i", [1], { k: 2 })).rejects.toThrow(/k 2 answered 3 hits/);
      // Version 7's messages: NotSupported, nothing sent (the answer would be a broken frame).
      answer = () => Buffer.from("not a frame");
      await expect(v6.vectorSearchTurns("i", [1])).rejects.toBeInstanceOf(NotSupported);
      await expect(v6.appendTurnsVectors("c", [{ payload: utf8("x"), vectors: [[1]] }], { index: "i", durability: "local" })).rejects.toBeInstanceOf(NotSupported);
      expect(v6.connected).toBe(true);
      await v6.close();
    } finally {
      await fake6.close();
    }

    // TURN_HITS that break VECTOR_SEARCH_TURNS' promises.
    const turnHitsBody = (entries: Array<[number, number, bigint?]>) => {
      const w = new p.Writer().u8(1).u8(0).u32(entries.length).u16(entries.length);
      for (const [turnId, s, typeTag] of entries) {
        w.u64(turnId).u64(0).u64(3).u32(0).u32(0).u64(typeTag ?? 1n).hash(new Uint8Array(32)).u32(0).u32(0).u64(1_767_225_600_000).f32s(Float32Array.of(s));
      }
      return p.concat(w.finish());
    };
    const fake7 = await scripted(7, (socket, reqId) => socket.write(answer(reqId)));
    try {
      const v7 = new Client(fake7.addr);
      for (const [entries, options, message] of [
        [[[1, 0.5], [2, 0.9]], {}, /not best first/],
        [[[2, 0.5], [1, 0.5]], {}, /not best first/],
        [[[1, 0.5], [1, 0.4]], {}, /twice/],
        [[[1, 0.5, 2n]], { typeTag: 1 }, /type tag 1 answered turn 1 of type tag 2/],
        [[[1, 0.5], [2, 0.4], [3, 0.3]], { k: 2 }, /k 2 answered 3 hits/],
      ] as Array<[Array<[number, number, bigint?]>, Parameters<Client["vectorSearchTurns"]>[2], RegExp]>) {
        answer = (reqId) => frame(p.MsgType.VECTOR_SEARCH_TURNS | p.RESPONSE_BIT, reqId, turnHitsBody(entries));
        await expect(v7.vectorSearchTurns("i", [1], options)).rejects.toThrow(message);
      }
      answer = (reqId) => frame(p.MsgType.VECTOR_SEARCH_TURNS | p.RESPONSE_BIT, reqId, turnHitsBody([[1, 0.5], [2, 0.5], [3, 0.25]]));
      const found = await v7.vectorSearchTurns("i", [1], { k: 3 });
      expect([found.exact, found.method, found.candidates]).toEqual([false, "graph", 3]);
      expect(found.hits.map((hit) => [hit.turn.turnId, hit.score])).toEqual([[1, 0.5], [2, 0.5], [3, 0.25]]);
      await v7.close();
    } finally {
      await fake7.close();
    }
  });
});

/** A scripted server of protocol `version`: HELLO answered, then `onRequest` for each frame. */
async function scripted(version: number, onRequest: (socket: net.Socket, reqId: bigint) => void): Promise<{ addr: string; close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const listener = net.createServer((socket) => {
    sockets.add(socket);
    let buffered = Buffer.alloc(0);
    let helloDone = false;
    socket.on("error", () => undefined);
    socket.on("data", (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 16) {
        const len = buffered.readUInt32LE(0);
        if (buffered.length < 16 + len) return;
        const reqId = buffered.readBigUInt64LE(8);
        buffered = buffered.subarray(16 + len);
        if (helloDone) {
          onRequest(socket, reqId);
          continue;
        }
        helloDone = true;
        socket.write(helloAnswer(version, reqId));
      }
    });
  });
  await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
  const port = (listener.address() as net.AddressInfo).port;
  return {
    addr: `127.0.0.1:${port}`,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => listener.close(() => resolve()));
    },
  };
}
