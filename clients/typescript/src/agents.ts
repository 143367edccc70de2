/**
 * `ctxstore/agents`: an OpenAI Agents JS `Session` on ctxstore, {@link CtxstoreSession}.
 *
 * The same mapping as the Python `ctxstore.agents.CtxstoreSession`, so a session written from
 * one reads from the other:
 *
 * - a session is the context named `agents:<session id>` (a name over 256 bytes: `agents:#`
 *   and the BLAKE3 of the id), tagged `agents.session` (`=` and the id), created at its first
 *   write (get-or-create);
 * - each item is one turn (its JSON, `typeTag` 1); `addItems` appends a call's items in one
 *   APPEND_TURNS (64 a batch) after the head;
 * - `getItems(limit)` reads the chain back from the head: the newest `limit` items, oldest
 *   first;
 * - `popItem` takes the newest item off with a compare-and-set on the head: the protocol has
 *   no request that moves a head back, so it appends a pop marker (`typeTag` 2) hanging from
 *   the popped item's parent, expecting the head it read; a concurrent pop or add makes it
 *   CONFLICT and it reads again. The next `addItems` hangs from the marker's parent;
 * - `clearSession` deletes the context (the next write creates a new one).
 */

import type { AgentInputItem, Session } from "@openai/agents-core";

import { Client, type ClientOptions } from "./client.js";
import { Conflict, NotFound } from "./errors.js";
import { blobHash, toHex } from "./payload.js";
import type { TurnInfo, TurnSpec } from "./types.js";

/** `typeTag` of a turn holding one session item (its JSON). */
export const ITEM_TYPE = 1n;
/** `typeTag` of a pop marker: the item before it on the chain was popped. */
export const POP_TYPE = 2n;

const NAME_PREFIX = "agents:";
const TAG_SESSION = "agents.session";
const BATCH = 64; // turns per APPEND_TURNS (the server's limit)
const POP_RETRIES = 1000;
const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder();

/** The context of a session (a name over 256 bytes is replaced by its hash). */
export function sessionContextName(sessionId: string): string {
  const name = NAME_PREFIX + sessionId;
  if (utf8.encode(name).length > 256) return `${NAME_PREFIX}#${toHex(blobHash(utf8.encode(sessionId)))}`;
  return name;
}

export interface CtxstoreSessionOptions extends ClientOptions {
  /** The server (default CTXSTORE_ADDR, else 127.0.0.1:7411), or a primary and its standbys
   * (`"A,B,C"` or an array: the client follows the primary across a failover; with
   * `idempotency: "auto"` among the options every item and pop marker carries a key, so one
   * in flight at a failover lands exactly once); ignored with `client`. */
  addr?: string | readonly string[];
  /** A client to share between sessions (this session does not close it). */
  client?: Client;
}

/** A session of the OpenAI Agents SDK stored in a ctxstore server. */
export class CtxstoreSession implements Session {
  readonly sessionId: string;
  readonly contextName: string;
  readonly client: Client;
  private readonly ownsClient: boolean;
  private opened = false;

  constructor(sessionId: string, options: CtxstoreSessionOptions = {}) {
    if (typeof sessionId !== "string" || sessionId.length === 0) throw new RangeError("a session id is a non-empty string");
    if (utf8.encode(`=${sessionId}`).length > 1024) throw new RangeError("a session id is at most 1,023 bytes of UTF-8 (it is a tag value)");
    this.sessionId = sessionId;
    this.contextName = sessionContextName(sessionId);
    const { addr, client, ...clientOptions } = options;
    this.client = client ?? new Client(addr, clientOptions);
    this.ownsClient = client === undefined;
  }

  /** Closes the client if this session made it. */
  async close(): Promise<void> {
    if (this.ownsClient) await this.client.close();
  }

  getSessionId(): Promise<string> {
    return Promise.resolve(this.sessionId);
  }

  private async open(force = false): Promise<void> {
    if (force || !this.opened) {
      await this.client.openContext(this.contextName, { tags: { [TAG_SESSION]: `=${this.sessionId}` }, getOrCreate: true });
      this.opened = true;
    }
  }

  private async pageSize(): Promise<number> {
    const info = await this.client.serverInfo();
    return Math.max(2, Math.min(1000, info.readTurnsMax || 64));
  }

  /** The chain's newest `wanted` item turns (every one for undefined), oldest first. */
  private async newest(wanted: number | undefined): Promise<TurnInfo[]> {
    let size = await this.pageSize();
    if (wanted !== undefined) size = Math.min(size, wanted + 1); // the head may be a pop marker
    const found: TurnInfo[] = [];
    let page;
    try {
      page = await this.client.readPage(this.contextName, size, { payloads: true });
    } catch (error) {
      if (error instanceof NotFound) return [];
      throw error;
    }
    for (;;) {
      found.unshift(...page.turns.filter((t) => t.typeTag !== POP_TYPE));
      if ((wanted !== undefined && found.length >= wanted) || page.nextBefore === 0) break;
      page = await this.client.readPage(this.contextName, size, { before: page.nextBefore, payloads: true });
    }
    return wanted === undefined ? found : found.slice(Math.max(0, found.length - wanted));
  }

  private static item(turn: TurnInfo): AgentInputItem {
    return JSON.parse(utf8Decoder.decode(turn.payload)) as AgentInputItem;
  }

  /** The session's items in chronological order: the newest `limit` (every one without). */
  async getItems(limit?: number): Promise<AgentInputItem[]> {
    if (limit !== undefined && limit <= 0) return [];
    return (await this.newest(limit)).map((turn) => CtxstoreSession.item(turn));
  }

  /** Appends `items`, one turn each (in batches of 64, each all or none). */
  async addItems(items: AgentInputItem[]): Promise<void> {
    if (items.length === 0) return;
    const payloads = items.map((item) => utf8.encode(JSON.stringify(item)));
    for (let start = 0; start < payloads.length; start += BATCH) await this.append(payloads.slice(start, start + BATCH));
  }

  private async append(payloads: Uint8Array[]): Promise<void> {
    for (let attempt = 0; attempt < POP_RETRIES; attempt++) {
      await this.open();
      try {
        const head = await this.client.readPage(this.contextName, 1);
        let parent: TurnSpec["parent"];
        let expected: number | undefined;
        const top = head.turns[head.turns.length - 1];
        if (top !== undefined && top.typeTag === POP_TYPE) {
          // After a pop: hang from the marker's parent, if the head is still the marker.
          parent = top.parentTurnId === 0 ? "root" : top.parentTurnId;
          expected = top.turnId;
        }
        const specs: TurnSpec[] = payloads.map((payload, i) => ({ payload, typeTag: ITEM_TYPE, parent: i === 0 ? parent : undefined }));
        await this.client.appendTurns(this.contextName, specs, expected === undefined ? {} : { expectedHead: expected });
        return;
      } catch (error) {
        if (error instanceof NotFound) this.opened = false; // cleared meanwhile: create it again
        else if (!(error instanceof Conflict)) throw error; // a pop or an add moved the head: read again
      }
    }
    throw new Conflict("addItems: the head kept moving");
  }

  /** Takes the newest item off the session and returns it (undefined if it has none): a
   * compare-and-set on the head, retried while other writers move it. */
  async popItem(): Promise<AgentInputItem | undefined> {
    let size = 2;
    for (let attempt = 0; attempt < POP_RETRIES; attempt++) {
      let page;
      try {
        page = await this.client.readPage(this.contextName, size, { payloads: true });
      } catch (error) {
        if (error instanceof NotFound) return undefined;
        throw error;
      }
      const head = page.turns[page.turns.length - 1];
      if (head === undefined) return undefined;
      const items = page.turns.filter((t) => t.typeTag !== POP_TYPE);
      const top = items[items.length - 1];
      if (top === undefined) {
        if (page.nextBefore === 0) return undefined; // only pop markers: empty
        size = Math.min(size * 2, await this.pageSize());
        continue;
      }
      const marker: TurnSpec = {
        payload: utf8.encode(JSON.stringify({ popped: top.turnId })),
        parent: top.parentTurnId === 0 ? "root" : top.parentTurnId,
        typeTag: POP_TYPE,
      };
      try {
        await this.client.appendTurns(this.contextName, [marker], { expectedHead: head.turnId });
      } catch (error) {
        if (error instanceof Conflict) continue; // another pop or add came first: read again
        if (error instanceof NotFound) return undefined; // cleared meanwhile
        throw error;
      }
      return CtxstoreSession.item(top);
    }
    throw new Conflict("popItem: the head kept moving");
  }

  /** Deletes the session's context (its items are gone; the next write starts anew). */
  async clearSession(): Promise<void> {
    this.opened = false;
    try {
      await this.client.deleteContext(this.contextName);
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
    }
  }
}
