/** CtxstoreSession against a real server: the Session contract, concurrent pops, and a real
 * Agents SDK run that keeps its history in the session. No LLM is reachable from the test
 * machines: the run's model is a scripted Model (the SDK's own interface) that answers with
 * what it was given, so the test sees the history the session fed it. */

import { Agent, run, Usage, type AgentInputItem, type Model, type ModelRequest, type ModelResponse } from "@openai/agents-core";
import { afterAll, beforeAll, expect, test } from "vitest";

import { CtxstoreSession, sessionContextName } from "../src/agents.js";
import { Client } from "../src/index.js";
import { Server } from "./server.js";

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

const user = (content: string): AgentInputItem => ({ role: "user", content });

test("items in order, limits, pop, clear", async () => {
  const session = new CtxstoreSession("s-1", { client });
  expect(await session.getSessionId()).toBe("s-1");
  expect(await session.getItems()).toEqual([]);
  expect(await session.popItem()).toBeUndefined();
  await session.addItems([user("a"), user("b")]);
  await session.addItems([user("c")]);
  expect(await session.getItems()).toEqual([user("a"), user("b"), user("c")]);
  expect(await session.getItems(2)).toEqual([user("b"), user("c")]);
  expect(await session.getItems(0)).toEqual([]);
  expect(await session.popItem()).toEqual(user("c"));
  expect(await session.popItem()).toEqual(user("b"));
  await session.addItems([user("d")]);
  expect(await session.getItems()).toEqual([user("a"), user("d")]);
  expect(await session.getItems(1)).toEqual([user("d")]);
  await session.clearSession();
  expect(await session.getItems()).toEqual([]);
  await session.addItems([user("again")]);
  expect(await session.getItems()).toEqual([user("again")]);
  // The context is where the Python session looks for it, tagged as it tags it.
  const info = await client.contextInfo(sessionContextName("s-1"));
  expect(info.tags).toEqual({ "agents.session": "=s-1" });
});

test("more than one batch of items, and concurrent pops take distinct items", async () => {
  const session = new CtxstoreSession("s-2", { addr: server.addr });
  try {
    const items = Array.from({ length: 150 }, (_, i) => user(`m${i}`));
    await session.addItems(items);
    expect(await session.getItems()).toEqual(items);
    const popped = await Promise.all(Array.from({ length: 10 }, () => session.popItem()));
    expect(new Set(popped.map((item) => JSON.stringify(item))).size).toBe(10);
    expect(await session.getItems()).toEqual(items.slice(0, 140));
  } finally {
    await session.close();
  }
});

/** A scripted Model: answers "seen N: <last user text>" with the N input items it was given. */
class ScriptedModel implements Model {
  seen: number[] = [];
  getResponse(request: ModelRequest): Promise<ModelResponse> {
    const input = Array.isArray(request.input) ? request.input : [user(request.input)];
    this.seen.push(input.length);
    const last = input.filter((i) => "role" in i && i.role === "user").at(-1) as { content: string } | undefined;
    return Promise.resolve({
      usage: new Usage(),
      output: [
        {
          type: "message",
          role: "assistant",
          status: "completed",
          content: [{ type: "output_text", text: `seen ${input.length}: ${String(last?.content)}` }],
        },
      ],
    });
  }
  getStreamedResponse(): AsyncIterable<never> {
    throw new Error("the scripted model does not stream");
  }
}

test("an Agents SDK run keeps its history in the session", async () => {
  const model = new ScriptedModel();
  const agent = new Agent({ name: "echo", instructions: "echo", model });
  const session = new CtxstoreSession("run-1", { client });
  const first = await run(agent, "hello", { session });
  expect(first.finalOutput).toBe("seen 1: hello");
  // A new session object (another process) on the same id sees the history.
  const again = await run(agent, "and again", { session: new CtxstoreSession("run-1", { client }) });
  expect(again.finalOutput).toBe("seen 3: and again");
  expect(model.seen).toEqual([1, 3]);
  const items = await session.getItems();
  expect(items.length).toBe(4);
});
