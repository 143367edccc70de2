/**
 * Python <-> TypeScript: a LangGraph thread and an Agents session written from one client read
 * and continue from the other, on one real server. The Python side is the repository's
 * clients/python, in the virtualenv run-tests.sh prepares ($CTXSTORE_PYTHON: its python),
 * driven as child processes (test/interop/driver.py).
 */

import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";

import { AIMessage, HumanMessage, type BaseMessage } from "@langchain/core/messages";
import { Annotation, END, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { afterAll, beforeAll, expect, test } from "vitest";

import { CtxstoreSession } from "../src/agents.js";
import { Client } from "../src/index.js";
import { contextName, CtxstoreSaver } from "../src/langgraph.js";
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
