/**
 * A real LangGraph.js graph on CtxstoreSaver and a real server: interrupt and resume, time
 * travel (a fork from an old checkpoint), a subgraph (its own checkpoint namespace),
 * updateState, thread deletion, a message list that grows by chunks on the wire.
 */

import { AIMessage, HumanMessage, type BaseMessage } from "@langchain/core/messages";
import { Annotation, BaseCheckpointSaver, Command, END, interrupt, MemorySaver, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { afterAll, beforeAll, expect, test } from "vitest";

import { Client } from "../src/index.js";
import { contextName, CtxstoreSaver } from "../src/langgraph.js";
import { Server } from "./server.js";

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

const Counter = Annotation.Root({
  steps: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
  approved: Annotation<string | undefined>(),
});

function approvalGraph() {
  return new StateGraph(Counter)
    .addNode("draft", () => ({ steps: ["draft"] }))
    .addNode("review", () => {
      const answer = interrupt<string, string>("approve the draft?");
      return { steps: ["review"], approved: answer };
    })
    .addNode("publish", () => ({ steps: ["publish"] }))
    .addEdge(START, "draft")
    .addEdge("draft", "review")
    .addEdge("review", "publish")
    .addEdge("publish", END)
    .compile({ checkpointer: saver });
}

test("interrupt and resume, across savers (the state lives in the server)", async () => {
  const graph = approvalGraph();
  const config = { configurable: { thread_id: "approval-1" } };
  const first = await graph.invoke({ steps: ["start"] }, config);
  expect(first.steps).toEqual(["start", "draft"]);
  const paused = await graph.getState(config);
  expect(paused.next).toEqual(["review"]);
  expect(paused.tasks[0]!.interrupts[0]!.value).toBe("approve the draft?");
  // A second process (another saver, another connection) resumes the thread.
  const other = CtxstoreSaver.fromAddr(server.addr);
  try {
    const resumed = await approvalGraph().withConfig({}).invoke(new Command({ resume: "yes" }), config);
    expect(resumed).toMatchObject({ steps: ["start", "draft", "review", "publish"], approved: "yes" });
    const done = await (new StateGraph(Counter)
      .addNode("draft", () => ({}))
      .addEdge(START, "draft")
      .compile({ checkpointer: other })).getState(config);
    expect(done.values).toMatchObject({ approved: "yes" });
  } finally {
    await other.close();
  }
});

test("time travel: a fork from an old checkpoint leaves the original history as it was", async () => {
  const graph = new StateGraph(Counter)
    .addNode("a", () => ({ steps: ["a"] }))
    .addNode("b", () => ({ steps: ["b"] }))
    .addEdge(START, "a")
    .addEdge("a", "b")
    .addEdge("b", END)
    .compile({ checkpointer: saver });
  const config = { configurable: { thread_id: "travel-1" } };
  await graph.invoke({ steps: ["x"] }, config);
  const history = [];
  for await (const snapshot of graph.getStateHistory(config)) history.push(snapshot);
  expect(history[0]!.values.steps).toEqual(["x", "a", "b"]);
  const afterA = history.find((s) => s.next.length === 1 && s.next[0] === "b")!;
  expect(afterA.values.steps).toEqual(["x", "a"]);
  // Replay from the checkpoint after "a" with an edited state: a new branch.
  const forkConfig = await graph.updateState(afterA.config, { steps: ["edited"] });
  const forked = await graph.invoke(null, forkConfig);
  expect(forked.steps).toEqual(["x", "a", "edited", "b"]);
  const newHistory = [];
  for await (const snapshot of graph.getStateHistory(config)) newHistory.push(snapshot);
  expect(newHistory[0]!.values.steps).toEqual(["x", "a", "edited", "b"]);
  // The original final checkpoint is still there, by its id.
  const original = await graph.getState(history[0]!.config);
  expect(original.values.steps).toEqual(["x", "a", "b"]);
  expect(newHistory.length).toBe(history.length + 2);
});

test("a subgraph keeps its checkpoints in its own namespace, and runs as on LangGraph's MemorySaver", async () => {
  const Inner = Annotation.Root({ steps: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }) });
  const build = (checkpointer: BaseCheckpointSaver) => {
    const inner = new StateGraph(Inner)
      .addNode("inner_1", () => ({ steps: ["inner_1"] }))
      .addNode("inner_ask", () => ({ steps: [`inner_ask:${interrupt<string, string>("more?")}`] }))
      .addEdge(START, "inner_1")
      .addEdge("inner_1", "inner_ask")
      .addEdge("inner_ask", END)
      .compile();
    return new StateGraph(Inner)
      .addNode("before", () => ({ steps: ["before"] }))
      .addNode("child", inner)
      .addNode("after", () => ({ steps: ["after"] }))
      .addEdge(START, "before")
      .addEdge("before", "child")
      .addEdge("child", "after")
      .addEdge("after", END)
      .compile({ checkpointer });
  };
  const config = { configurable: { thread_id: "nested-1" } };
  const runs: Array<{ paused: string[]; result: string[]; history: number }> = [];
  for (const checkpointer of [saver, new MemorySaver()]) {
    const outer = build(checkpointer);
    await outer.invoke({ steps: [] }, config);
    const paused = await outer.getState(config, { subgraphs: true });
    const childState = paused.tasks[0]!.state as { values: { steps: string[] } };
    const result = await outer.invoke(new Command({ resume: "ok" }), config);
    let history = 0;
    for await (const _ of outer.getStateHistory(config)) history++;
    runs.push({ paused: childState.values.steps, result: result.steps, history });
  }
  expect(runs[0]!.result).toContain("inner_ask:ok");
  expect(runs[0]!.paused).toContain("inner_1");
  expect(runs[0]).toEqual(runs[1]);
  // The subgraph's namespace is a context of its own, tagged with the thread.
  const client = await Client.connect(server.addr);
  try {
    const contexts = [];
    for await (const info of client.iterContexts({ tags: { "lg.thread": "nested-1" } })) contexts.push(info);
    expect(contexts.length).toBe(2);
    const namespaces = contexts.map((c) => c.tags["lg.ns"] ?? "").sort();
    expect(namespaces[0]).toBe("");
    expect(namespaces[1]).toMatch(/^child:/);
    for (const info of contexts) expect(info.tags["lg.fmt"]).toBe("2");
  } finally {
    await client.close();
  }
});

test("updateState as a node, and deleteThread removes every namespace", async () => {
  const chat = new StateGraph(MessagesAnnotation)
    .addNode("bot", (state: { messages: BaseMessage[] }) => ({ messages: [new AIMessage(`echo: ${state.messages.at(-1)!.text}`)] }))
    .addEdge(START, "bot")
    .addEdge("bot", END)
    .compile({ checkpointer: saver });
  const config = { configurable: { thread_id: "chat-1" } };
  await chat.invoke({ messages: [new HumanMessage("hi")] }, config);
  await chat.updateState(config, { messages: [new AIMessage("a correction")] }, "bot");
  const state = await chat.getState(config);
  expect(state.values.messages.map((m: BaseMessage) => m.content)).toEqual(["hi", "echo: hi", "a correction"]);
  expect(state.values.messages[2]).toBeInstanceOf(AIMessage);
  expect(state.metadata?.source).toBe("update");
  await saver.deleteThread("chat-1");
  const gone = await chat.getState(config);
  expect(gone.values).toEqual({});
  const client = await Client.connect(server.addr);
  try {
    await expect(client.head(contextName("chat-1", ""))).rejects.toMatchObject({ codeName: "NOT_FOUND" });
  } finally {
    await client.close();
  }
});

test("a long conversation: the state grows by its new chunks on the wire, and reads back whole", async () => {
  const words = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do", "eiusmod", "tempor"];
  let seed = 7;
  const sentence = (count: number): string =>
    Array.from({ length: count }, () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return words[seed % words.length];
    }).join(" ");
  const chat = new StateGraph(MessagesAnnotation)
    .addNode("bot", () => ({ messages: [new AIMessage(sentence(150))] }))
    .addEdge(START, "bot")
    .addEdge("bot", END);
  const own = CtxstoreSaver.fromAddr(server.addr);
  const config = { configurable: { thread_id: "long-1" } };
  try {
    const graph = chat.compile({ checkpointer: own });
    const before = await own.client.stats();
    const sentBefore = own.client.bytesSent;
    for (let i = 0; i < 30; i++) await graph.invoke({ messages: [new HumanMessage(sentence(80))] }, config);
    const sent = own.client.bytesSent - sentBefore;
    const after = await own.client.stats();
    const state = await graph.getState(config);
    expect(state.values.messages.length).toBe(60);
    expect(state.values.messages[59].content).toBe((await chat.compile({ checkpointer: saver }).getState(config)).values.messages[59].content);
    // Every step stores the whole message list (logical bytes); the wire carries about what
    // it grew by: far less than the states' sum.
    const logical = after.logicalBytes - before.logicalBytes;
    expect(logical).toBeGreaterThan(1_000_000);
    expect(sent).toBeLessThan(logical / 3);
  } finally {
    await own.close();
  }
});
