/** The Vercel AI SDK chat example (examples/ai-sdk-chat.ts) against a real server, driven by
 * the AI SDK's own test model (`ai/test`): no LLM is reachable from the test machines. */

import { afterAll, beforeAll, expect, test } from "vitest";

import { ChatStore, respond, scriptedModel, textOf, userMessage } from "../examples/ai-sdk-chat.js";
import { Client, Conflict } from "../src/index.js";
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

const transcript = (messages: Array<Parameters<typeof textOf>[0]>): string[] => messages.map((m) => `${m.role}: ${textOf(m)}`);

test("persist UIMessages per chat; edit and regenerate are forks", async () => {
  const store = new ChatStore(client);
  const model = await scriptedModel(["Paris.", "Berlin.", "Rome, again.", "Madrid."]);
  await store.createChat("c1");
  let messages = await respond(model, [userMessage("capital of France?")]);
  await store.save("c1", messages);
  await store.save("c1", messages); // saved twice: nothing new
  messages = await respond(model, [...messages, userMessage("and Germany?")]);
  await store.save("c1", messages);
  expect(transcript(await store.load("c1"))).toEqual(["user: capital of France?", "assistant: Paris.", "user: and Germany?", "assistant: Berlin."]);

  // Regenerate the last answer: a sibling of it, the chat continues from the new one.
  const again = await respond(model, await store.rewindLastAnswer("c1"));
  await store.saveRegenerated("c1", again.at(-1)!);
  expect(transcript(await store.load("c1"))).toEqual(["user: capital of France?", "assistant: Paris.", "user: and Germany?", "assistant: Rome, again."]);

  // Edit the second question: the edited one forks from the first answer.
  const second = (await store.load("c1"))[2]!;
  const edited = await store.edit("c1", second.id, userMessage("and Spain?"));
  const answered = await respond(model, edited);
  await store.save("c1", answered);
  expect(transcript(await store.load("c1"))).toEqual(["user: capital of France?", "assistant: Paris.", "user: and Spain?", "assistant: Madrid."]);

  // Every branch is still there: 4 + 1 regenerated + 2 after the edit = 7 messages.
  const all = await store.allMessages("c1");
  expect(all.length).toBe(7);
  expect(transcript(all)).toContain("assistant: Berlin.");

  // A stale list (from before the edit) cannot be saved over the new branch.
  await expect(store.save("c1", messages)).rejects.toThrow(/edit or regenerate/);
});

test("two writers on one chat: the second save is refused, not interleaved", async () => {
  const store = new ChatStore(client);
  await store.createChat("c2");
  const first = [userMessage("one")];
  await store.save("c2", first);
  const a = [...first, userMessage("two from a")];
  const b = [...first, userMessage("two from b")];
  const results = await Promise.allSettled([store.save("c2", a), store.save("c2", b)]);
  const rejected = results.filter((r) => r.status === "rejected");
  expect(rejected.length).toBe(1);
  expect((rejected[0] as PromiseRejectedResult).reason).toBeInstanceOf(Conflict);
  expect((await store.load("c2")).length).toBe(2);
});
