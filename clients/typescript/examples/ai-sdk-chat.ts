/**
 * A chat with the Vercel AI SDK, persisted in ctxstore: each chat is a context, each
 * `UIMessage` a turn keyed by its id; editing a message or regenerating an answer is a fork —
 * the new message hangs from the same parent as the old one and the chat's head moves to it,
 * while the old branch stays in the context (O(1), nothing copied) and can be listed or
 * returned to.
 *
 * The server side of an AI SDK chat route, as its docs write it:
 *
 * ```ts
 * const result = streamText({ model, messages: await convertToModelMessages(messages) });
 * return result.toUIMessageStreamResponse({ originalMessages: messages, onFinish: ({ messages }) => store.save(chatId, messages) });
 * ```
 *
 * Run it: `npx tsx examples/ai-sdk-chat.ts` (CTXSTORE_ADDR, default 127.0.0.1:7411). No LLM is
 * reachable from the machines this project is built on, so `main` drives the chat with the AI
 * SDK's own test model (`MockLanguageModelV3` from `ai/test`) answering from a script; pass a
 * real model (`openai("gpt-4o")`...) to `respond` in an application.
 */

import { convertToModelMessages, streamText, type LanguageModel, type UIMessage } from "ai";

import { Client, NotFound, type TurnInfo } from "../src/index.js";

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder();
/** `typeTag` of a turn holding one UIMessage (its JSON). */
const MESSAGE_TYPE = 1n;

/** The chat's context name. */
export function chatContext(chatId: string): string {
  return `aisdk:${chatId}`;
}

function messageOf(turn: TurnInfo): UIMessage {
  return JSON.parse(utf8Decoder.decode(turn.payload)) as UIMessage;
}

/** Chats of UIMessages in ctxstore. */
export class ChatStore {
  constructor(readonly client: Client) {}

  /** A new, empty chat. */
  async createChat(chatId: string): Promise<void> {
    await this.client.openContext(chatContext(chatId), { tags: { "aisdk.chat": chatId } });
  }

  /** The turns of the chat's current branch, oldest first. */
  private async branchTurns(chatId: string): Promise<TurnInfo[]> {
    const turns: TurnInfo[] = [];
    let page = await this.client.readPage(chatContext(chatId), 1000, { payloads: true });
    for (;;) {
      turns.unshift(...page.turns);
      if (page.nextBefore === 0) return turns;
      page = await this.client.readPage(chatContext(chatId), 1000, { payloads: true, before: page.nextBefore });
    }
  }

  /** The chat's messages on its current branch (what `useChat` shows). */
  async load(chatId: string): Promise<UIMessage[]> {
    return (await this.branchTurns(chatId)).map(messageOf);
  }

  /**
   * Saves the chat as the AI SDK hands it over (`onFinish({ messages })`: the whole list):
   * the messages after those the current branch has already are appended, in one write. A
   * message is keyed by its id, so saving the same list twice writes nothing the second time.
   */
  async save(chatId: string, messages: UIMessage[]): Promise<void> {
    const stored = await this.branchTurns(chatId);
    const known = stored.length;
    for (let i = 0; i < Math.min(known, messages.length); i++) {
      if (messageOf(stored[i]!).id !== messages[i]!.id) {
        throw new Error(`chat ${chatId}: message ${i} is ${messages[i]!.id}, the stored branch has ${messageOf(stored[i]!).id}: edit or regenerate to branch`);
      }
    }
    const fresh = messages.slice(known);
    if (fresh.length === 0) return;
    const head = stored.at(-1)?.turnId;
    await this.client.appendTurns(
      chatContext(chatId),
      fresh.map((message) => ({ payload: utf8.encode(JSON.stringify(message)), key: `m/${message.id}`, typeTag: MESSAGE_TYPE, labels: { role: message.role } })),
      // Only if no one else moved the chat meanwhile (0: an empty chat).
      { expectedHead: head ?? 0 },
    );
  }

  /**
   * Edits a message: the edited one hangs from the same parent as the original, and the chat
   * continues from it (the messages after the original stay on the old branch).
   */
  async edit(chatId: string, messageId: string, edited: UIMessage): Promise<UIMessage[]> {
    const original = await this.client.turnByKey(chatContext(chatId), `m/${messageId}`);
    if (original === undefined) throw new NotFound(`chat ${chatId} has no message ${messageId}`);
    await this.client.appendTurns(chatContext(chatId), [
      { payload: utf8.encode(JSON.stringify(edited)), key: `m/${edited.id}`, typeTag: MESSAGE_TYPE, labels: { role: edited.role }, parent: original.parentTurnId === 0 ? "root" : original.parentTurnId },
    ]);
    return this.load(chatId);
  }

  /** The messages a regeneration answers again: the current branch without its last answer
   * (which stays stored; `saveRegenerated` makes the new answer its sibling). */
  async rewindLastAnswer(chatId: string): Promise<UIMessage[]> {
    const turns = await this.branchTurns(chatId);
    const last = turns.at(-1);
    if (last === undefined || messageOf(last).role !== "assistant") throw new Error(`chat ${chatId}: its last message is not an answer`);
    return turns.slice(0, -1).map(messageOf);
  }

  /** Every message the chat ever had, on every branch (newest first). */
  async allMessages(chatId: string): Promise<UIMessage[]> {
    const out: UIMessage[] = [];
    for await (const turn of this.client.iterTurnLog(chatContext(chatId), { payloads: true })) out.push(messageOf(turn));
    return out;
  }

  /** The answer of a regeneration: saved as a sibling of the answer it replaces (same parent),
   * and the chat continues from it. */
  async saveRegenerated(chatId: string, answer: UIMessage): Promise<void> {
    const turns = await this.branchTurns(chatId);
    const replaced = turns.at(-1);
    if (replaced === undefined) throw new Error(`chat ${chatId} is empty`);
    await this.client.appendTurns(chatContext(chatId), [
      { payload: utf8.encode(JSON.stringify(answer)), key: `m/${answer.id}`, typeTag: MESSAGE_TYPE, labels: { role: answer.role }, parent: replaced.parentTurnId === 0 ? "root" : replaced.parentTurnId },
    ]);
  }
}

let nextId = 0;
/** Message ids as an application would generate them (here: a counter with the time). */
export function newMessageId(): string {
  nextId++;
  return `msg-${Date.now().toString(36)}-${nextId}`;
}

/**
 * One turn of the chat route: the model answers `messages` (streamed, as the AI SDK does),
 * and `onFinish` hands the updated list over. Returns the updated list.
 */
export async function respond(model: LanguageModel, messages: UIMessage[]): Promise<UIMessage[]> {
  const result = streamText({ model, messages: await convertToModelMessages(messages) });
  let finished: UIMessage[] | undefined;
  const stream = result.toUIMessageStream({
    originalMessages: messages,
    generateMessageId: newMessageId,
    onFinish: ({ messages: updated }) => {
      finished = updated;
    },
  });
  // The route would return the stream to the browser; here it is read to its end.
  for await (const _chunk of stream) {
    // each chunk is a UI message part on its way to useChat
  }
  if (finished === undefined) throw new Error("the UI message stream ended without onFinish");
  return finished;
}

export function userMessage(text: string): UIMessage {
  return { id: newMessageId(), role: "user", parts: [{ type: "text", text }] };
}

export function textOf(message: UIMessage): string {
  return message.parts.map((part) => (part.type === "text" ? part.text : "")).join("");
}

/** The AI SDK's own test model, answering each call with the next line of `script`. */
export async function scriptedModel(script: string[]): Promise<LanguageModel> {
  const { MockLanguageModelV3, simulateReadableStream } = await import("ai/test");
  let call = 0;
  return new MockLanguageModelV3({
    doStream: () => {
      const text = script[call++ % script.length]!;
      return Promise.resolve({
        stream: simulateReadableStream({
          chunks: [
            { type: "text-start", id: "t" },
            ...text.split(" ").map((word, i) => ({ type: "text-delta" as const, id: "t", delta: i === 0 ? word : ` ${word}` })),
            { type: "text-end", id: "t" },
            {
              type: "finish",
              finishReason: { unified: "stop", raw: "stop" },
              usage: {
                inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
                outputTokens: { total: 5, text: 5, reasoning: undefined },
              },
            },
          ],
        }),
      });
    },
  });
}

async function main(): Promise<void> {
  const client = await Client.connect(process.env["CTXSTORE_ADDR"]);
  const store = new ChatStore(client);
  const chatId = `demo-${Date.now()}`;
  const model = await scriptedModel(["Paris is the capital of France.", "Lyon is the third largest city.", "It is Paris."]);
  await store.createChat(chatId);
  let messages = await respond(model, [userMessage("What is the capital of France?")]);
  await store.save(chatId, messages);
  console.log((await store.load(chatId)).map((m) => `${m.role}: ${textOf(m)}`).join("\n"));
  const regenerate = await store.rewindLastAnswer(chatId);
  messages = await respond(model, regenerate);
  await store.saveRegenerated(chatId, messages.at(-1)!);
  console.log("-- regenerated:\n" + (await store.load(chatId)).map((m) => `${m.role}: ${textOf(m)}`).join("\n"));
  await client.close();
}

if (process.argv[1] !== undefined && import.meta.url === `file://${process.argv[1]}`) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
