/**
 * Python <-> TypeScript: a LangGraph thread, a LangGraph store and an Agents session written
 * from one client read and continue from the other, on one real server. The Python side is the
 * repository's clients/python, in the virtualenv run-tests.sh prepares ($CTXSTORE_PYTHON: its
 * python), driven as child processes (test/interop/driver.py).
 */

import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";

import { AIMessage, HumanMessage, type BaseMessage } from "@langchain/core/messages";
import { Annotation, END, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { afterAll, beforeAll, expect, test } from "vitest";

import { CtxstoreSession } from "../src/agents.js";
import { Client } from "../src/index.js";
import { contextName, CtxstoreSaver, CtxstoreStore } from "../src/langgraph.js";
import { CharacterEmbeddings } from "./embeddings.js";
import { PACKAGE_DIR, Server } from "./server.js";

const run = promisify(execFile);

function python(): string {
  const configured = process.env["CTXSTORE_PYTHON"];
  if (configured === undefined || configured === "") {
    throw new Error("CTXSTORE_PYTHON is not set: run the tests with clients/typescript/run-tests.sh, which prepares a virtualenv with clients/python");
  }
  return configured;
}

async function driver(...args: string[]): Promise<unknown> {
  const { stdout } = await run(python(), [path.join(PACKAGE_DIR, "test", "interop", "driver.py"), ...args], { timeout: 60_000 });
  return JSON.parse(stdout.trim().split("\n").at(-1)!);
}

let server: Server;
let saver: CtxstoreSaver;

beforeAll(async () => {
  server = await Server.start();
  saver = CtxstoreSaver.fromAddr(server.addr);
});

afterAll(async () => {
  await saver?.close();
  await server?.stop();
});

/** The TypeScript twin of the driver's Python graph: same channels, same node. */
function tsGraph(checkpointer: CtxstoreSaver) {
  const State = Annotation.Root({ ...MessagesAnnotation.spec, count: Annotation<number>() });
  return new StateGraph(State)
    .addNode("bot", (state: { messages: BaseMessage[]; count?: number }) => ({
      messages: [new AIMessage(`ts: ${state.messages.at(-1)!.text}`)],
      count: (state.count ?? 0) + 1,
    }))
    .addEdge(START, "bot")
    .addEdge("bot", END)
    .compile({ checkpointer });
}

interface PyState {
  messages: Array<[string, string]>;
  count: number;
  checkpoints: string[];
}

test("a thread written by Python reads and continues in TypeScript, and back", async () => {
  const thread = "interop-thread-1";
  const fromPy = (await driver("lg-run", server.addr, thread, "hello from python")) as PyState;
  expect(fromPy.messages).toEqual([["human", "hello from python"], ["ai", "py: hello from python"]]);

  const graph = tsGraph(saver);
  const config = { configurable: { thread_id: thread } };
  const state = await graph.getState(config);
  expect(state.values.messages.map((m: BaseMessage) => [m.getType(), m.content])).toEqual(fromPy.messages);
  expect(state.values.messages[0]).toBeInstanceOf(HumanMessage);
  expect(state.values.count).toBe(1);
  const ids: string[] = [];
  for await (const tuple of saver.list(config)) ids.push(tuple.config.configurable!["checkpoint_id"] as string);
  expect(ids).toEqual(fromPy.checkpoints);

  await graph.invoke({ messages: [new HumanMessage("hello from typescript")] }, config);
  const back = (await driver("lg-run", server.addr, thread, "python again")) as PyState;
  expect(back.messages).toEqual([
    ["human", "hello from python"],
    ["ai", "py: hello from python"],
    ["human", "hello from typescript"],
    ["ai", "ts: hello from typescript"],
    ["human", "python again"],
    ["ai", "py: python again"],
  ]);
  expect(back.count).toBe(3);
  const after: string[] = [];
  for await (const tuple of saver.list(config)) after.push(tuple.config.configurable!["checkpoint_id"] as string);
  expect(after).toEqual(back.checkpoints);
});

test("a thread written by TypeScript reads in Python; both find it by its plain lg.thread tag", async () => {
  const thread = "interop-thread-2";
  const graph = tsGraph(saver);
  const config = { configurable: { thread_id: thread } };
  await graph.invoke({ messages: [new HumanMessage("first")] }, config);
  await graph.invoke({ messages: [new HumanMessage("second")] }, config);
  const read = (await driver("lg-read", server.addr, thread)) as PyState;
  expect(read.messages).toEqual([["human", "first"], ["ai", "ts: first"], ["human", "second"], ["ai", "ts: second"]]);
  expect(read.count).toBe(2);
  const ids: string[] = [];
  for await (const tuple of saver.list(config)) ids.push(tuple.config.configurable!["checkpoint_id"] as string);
  expect(ids.length).toBeGreaterThan(2);
  // Listing a thread finds its namespaces by their lg.thread tag: a Python saver of format 1
  // (before branch pylg) looks for the "="-prefixed value only, so it lists none of format 2;
  // from format 2 on it lists both.
  const pythonFormat = (await driver("lg-format", "-", "-")) as number;
  expect(read.checkpoints).toEqual(pythonFormat >= 2 ? ids : []);
  const client = await Client.connect(server.addr);
  try {
    const found = [];
    for await (const info of client.iterContexts({ tags: { "lg.thread": thread } })) found.push(info);
    expect(found.map((info) => info.name)).toEqual([contextName(thread, "")]);
    expect(found[0]!.tags).toEqual({ "lg.thread": thread, "lg.fmt": "2" });
  } finally {
    await client.close();
  }
});

test("a thread id outside the BMP names the same context in both clients (its length in code points)", async () => {
  // "é" is one UTF-16 unit and one code point, each emoji two units and one code point: a
  // length in UTF-16 units would name another context than Python's len() does.
  const thread = "t-\u{1F600}\u00e9\u{1F680}";
  expect(contextName(thread, "")).toBe(`lg:5:${thread}:`);
  await driver("lg-run", server.addr, thread, "from python");
  const client = await Client.connect(server.addr);
  try {
    const found = [];
    for await (const info of client.iterContexts({ tags: { "lg.thread": thread } })) found.push(info.name);
    expect(found).toEqual([contextName(thread, "")]);
  } finally {
    await client.close();
  }
  const read = (await saver.getTuple({ configurable: { thread_id: thread } }))!;
  expect((read.checkpoint.channel_values["messages"] as BaseMessage[]).map((m) => m.text)).toEqual(["from python", "py: from python"]);
});

test("a context of format 1 (tags with '=', no lg.fmt) is read and listed by its thread", async () => {
  const thread = "old-format";
  const client = await Client.connect(server.addr);
  try {
    // What the Python saver before format 2 created for a thread's root namespace.
    await client.openContext(contextName(thread, ""), { tags: { "lg.thread": `=${thread}`, "lg.ns": "=" } });
    const graph = tsGraph(saver);
    const config = { configurable: { thread_id: thread } };
    await graph.invoke({ messages: [new HumanMessage("kept")] }, config);
    const tuples = [];
    for await (const tuple of saver.list(config)) tuples.push(tuple);
    expect(tuples.length).toBeGreaterThan(0);
    for (const tuple of tuples) expect(tuple.config.configurable).toMatchObject({ thread_id: thread, checkpoint_ns: "" });
    expect((await client.contextInfo(contextName(thread, ""))).tags).toEqual({ "lg.thread": `=${thread}`, "lg.ns": "=" });
    const read = (await driver("lg-read", server.addr, thread)) as PyState;
    expect(read.messages).toEqual([["human", "kept"], ["ai", "ts: kept"]]);
    await saver.deleteThread(thread);
    await expect(client.head(contextName(thread, ""))).rejects.toMatchObject({ codeName: "NOT_FOUND" });
  } finally {
    await client.close();
  }
});

test("a thread id that cannot be a tag value is refused before anything is written", async () => {
  const graph = tsGraph(saver);
  await expect(graph.invoke({ messages: [new HumanMessage("x")] }, { configurable: { thread_id: "t".repeat(1025) } })).rejects.toThrow(/1 to 1024 bytes/);
  await expect(graph.invoke({ messages: [new HumanMessage("x")] }, { configurable: { thread_id: "" } })).rejects.toThrow();
  const client = await Client.connect(server.addr);
  try {
    const page = await client.listContexts({ namePrefix: `lg:1025:` });
    expect(page.contexts).toEqual([]);
  } finally {
    await client.close();
  }
});

test("an Agents session written by Python reads, pops and grows in TypeScript, and back", async () => {
  const id = "interop-session-1";
  await driver("agents-add", server.addr, id, JSON.stringify([{ role: "user", content: "py 1" }, { role: "assistant", content: "py 2" }]));
  const session = new CtxstoreSession(id, { addr: server.addr });
  try {
    expect(await session.getItems()).toEqual([{ role: "user", content: "py 1" }, { role: "assistant", content: "py 2" }]);
    expect(await session.popItem()).toEqual({ role: "assistant", content: "py 2" });
    await session.addItems([{ role: "user", content: "ts 3" }]);
    expect(await driver("agents-get", server.addr, id)).toEqual([{ role: "user", content: "py 1" }, { role: "user", content: "ts 3" }]);
    expect(await driver("agents-pop", server.addr, id)).toEqual({ role: "user", content: "ts 3" });
    await driver("agents-add", server.addr, id, JSON.stringify([{ role: "user", content: "py 4" }]));
    expect(await session.getItems()).toEqual([{ role: "user", content: "py 1" }, { role: "user", content: "py 4" }]);
  } finally {
    await session.close();
  }
});

interface PyStoreDump {
  items: Array<[string[], string, Record<string, unknown>, string, string]>;
  gets: Array<Record<string, unknown> | null>;
  namespaces: string[][];
}

test("a LangGraph store written by Python reads in TypeScript, and back (decision 0022's layout)", async () => {
  const name = `interop-store-${Date.now()}`;
  const ops: Array<[string[], string, Record<string, unknown> | null]> = [
    [["users", "u1"], "prefs", { theme: "dark", size: 3, tags: ["a", "b"], nested: { z: 1, a: 0.5 } }],
    [["users", "u1"], "k\u0000\u0001é", { text: "这是中文" }],
    [["users", "u2"], "prefs", { theme: "light", size: 1e-7 }],
    [["users", "u2", "deep"], "x", { x: true }],
    [["gone"], "k", { v: 1 }],
    [["gone"], "k", null],
  ];
  await driver("store-put", server.addr, name, JSON.stringify(ops));
  const client = await Client.connect(server.addr);
  const store = new CtxstoreStore(client, { name });
  try {
    expect((await store.get(["users", "u1"], "prefs"))?.value).toEqual(ops[0]![2]);
    expect((await store.get(["users", "u1"], "k\u0000\u0001é"))?.value).toEqual({ text: "这是中文" });
    expect(await store.get(["gone"], "k")).toBeNull();
    const items = await store.search(["users"], { limit: 100 });
    expect(items.map((i) => [i.namespace, i.key])).toEqual([
      [["users", "u1"], "k\u0000\u0001é"],
      [["users", "u1"], "prefs"],
      [["users", "u2"], "prefs"],
      [["users", "u2", "deep"], "x"],
    ]);
    expect(await store.listNamespaces()).toEqual([["users", "u1"], ["users", "u2"], ["users", "u2", "deep"]]);
    expect((await store.search(["users"], { filter: { theme: "light" } })).map((i) => i.key)).toEqual(["prefs"]);

    // TypeScript writes: an update keeps Python's creation time; new items and a delete.
    const before = (await store.get(["users", "u1"], "prefs"))!;
    await store.put(["users", "u1"], "prefs", { theme: "blue", size: 4 });
    await store.put(["ts"], "t1", { from: "ts", n: [1, 2.5] });
    await store.delete(["users", "u2", "deep"], "x");
    const dump = (await driver("store-dump", server.addr, name)) as PyStoreDump;
    expect(dump.items.map(([ns, key, value]) => [ns, key, value])).toEqual([
      [["ts"], "t1", { from: "ts", n: [1, 2.5] }],
      [["users", "u1"], "k\u0000\u0001é", { text: "这是中文" }],
      [["users", "u1"], "prefs", { theme: "blue", size: 4 }],
      [["users", "u2"], "prefs", { theme: "light", size: 1e-7 }],
    ]);
    expect(dump.gets).toEqual(dump.items.map(([, , value]) => value));
    expect(dump.namespaces).toEqual([["ts"], ["users", "u1"], ["users", "u2"]]);
    const prefs = dump.items[2]!;
    expect(new Date(prefs[3]).getTime()).toBe(before.createdAt.getTime());
    expect(new Date(prefs[4]).getTime()).toBeGreaterThanOrEqual(before.updatedAt.getTime());

    // Equal values are equal bytes whichever language wrote them: one value hash.
    await driver("store-put", server.addr, name, JSON.stringify([[["py"], "same", { b: [1, { d: "é" }], a: 2.5 }]]));
    await store.put(["ts"], "same", { a: 2.5, b: [1, { d: "é" }] });
    const entries = (await client.kvList(`lgs:${name}`, { limit: 1000 })).items;
    const hashOf = (key: string) => entries.find((e) => new TextDecoder().decode(e.key) === key)?.valueHash;
    expect(hashOf("i/py\u0000\u0000same\u0000v")).toBeDefined();
    expect(hashOf("i/py\u0000\u0000same\u0000v")).toEqual(hashOf("i/ts\u0000\u0000same\u0000v"));
  } finally {
    await client.close();
  }
});

test("a store's vectors written by Python are searched from TypeScript, and back (decision 0033)", async () => {
  // Both sides embed with LangGraph's CharacterEmbeddings (64 dimensions), the projections of
  // WARM drawn first: a text of those characters embeds the same in both languages.
  const WARM = "abcdefghijklmnopqrstuvwxyz ";
  const embeddings = new CharacterEmbeddings(64);
  embeddings.embedOne(WARM);
  const cosine = (a: number[], b: number[]) => a.reduce((s, x, i) => s + x * b[i]!, 0) / Math.sqrt(a.reduce((s, x) => s + x * x, 0) * b.reduce((s, x) => s + x * x, 0));
  const name = `interop-vstore-${Date.now()}`;
  const texts: Record<string, string> = { apple: "red apple pie", car: "fast blue car", tea: "green tea leaves" };
  await driver(
    "store-vput",
    server.addr,
    name,
    JSON.stringify([
      [["docs"], "apple", { text: texts["apple"] }],
      [["docs"], "car", { text: texts["car"] }],
      [["docs", "x"], "tea", { text: texts["tea"], kind: "drink" }],
      [["docs"], "raw", { other: "no text field" }],
    ]),
  );
  const client = await Client.connect(server.addr);
  const store = new CtxstoreStore(client, { name, index: { dims: 64, embeddings, fields: ["text"] } });
  const ranked = (query: string) =>
    Object.entries(texts)
      .map(([key, text]): [string, number] => [key, cosine(embeddings.embedOne(query), embeddings.embedOne(text))])
      .sort((a, b) => b[1] - a[1]);
  try {
    const found = await store.search(["docs"], { query: "apple pie", limit: 10 });
    const want = ranked("apple pie");
    expect(found.map((item) => item.key)).toEqual(want.map(([key]) => key)); // "raw" has no vector
    found.forEach((item, i) => expect(item.score).toBeCloseTo(want[i]![1], 4)); // Python stored what this side embeds
    expect((await store.search(["docs"], { query: "tea", filter: { kind: "drink" } })).map((item) => item.key)).toEqual(["tea"]);

    // TypeScript writes (a new item, an overwrite that re-embeds); Python searches.
    await store.put(["docs"], "boat", { text: "slow red boat" });
    await store.put(["docs"], "apple", { text: "yellow banana" });
    texts["boat"] = "slow red boat";
    texts["apple"] = "yellow banana";
    const fromPy = (await driver("store-vsearch", server.addr, name, JSON.stringify({ prefix: ["docs"], query: "red boat", limit: 10 }))) as Array<[string[], string, number]>;
    const wantPy = ranked("red boat");
    expect(fromPy.map(([, key]) => key)).toEqual(wantPy.map(([key]) => key));
    fromPy.forEach(([, , score], i) => expect(score).toBeCloseTo(wantPy[i]![1], 4));
    const filtered = (await driver("store-vsearch", server.addr, name, JSON.stringify({ prefix: ["docs"], query: "red boat", filter: { kind: "drink" }, limit: 10 }))) as Array<[string[], string, number]>;
    expect(filtered.map(([ns, key]) => [ns, key])).toEqual([[["docs", "x"], "tea"]]);
  } finally {
    await client.vectorIndexDrop(store.vectorIndexName!).catch(() => undefined);
    await client.close();
  }
});
