/**
 * `ctxstore/langgraph`: a LangGraph.js checkpointer on ctxstore, {@link CtxstoreSaver}, and
 * LangGraph.js's long-term memory store, `CtxstoreStore` (`langgraph_store.ts`: decisions 0022
 * and 0033, the Python store's layout, with vector search).
 *
 * It maps LangGraph onto contexts exactly as the Python saver (`ctxstore.langgraph`) does, so
 * a thread written from one reads from the other (decision 0021):
 *
 * - a thread's namespace (`thread_id` + `checkpoint_ns`) is the context named
 *   `lg:<length of the thread id in code points>:<thread id>:<namespace>` (a name over 256
 *   bytes: `lg:#` and the BLAKE3 of it), tagged `lg.thread=<thread id>`, `lg.ns=<namespace>`
 *   (only when not empty) and `lg.fmt=2`, so that `ctxstore ctx list --tag lg.thread=t-1`
 *   finds a thread. A context without `lg.fmt` was written in format 1: its `lg.thread` and
 *   `lg.ns` values start with `=`, which is taken off when read, and a thread is listed by
 *   both values. A thread id that cannot be a tag value (empty, over 1,024 bytes) is refused
 *   before anything is written;
 * - a checkpoint is a turn keyed `cp/<checkpoint id>`, appended after its parent checkpoint's
 *   turn (a root when it has none), labelled `lg.cp=1` (the turn log's filter), `thread_id`,
 *   `run_id`, `m.source` and `m.step` (JSON, as Python's `json.dumps` writes it). Its payload
 *   is a JSON document: the serialized checkpoint without its channel values, the serialized
 *   metadata, the parent's id and, per channel, the serializer's type and the BLAKE3 of the
 *   value's bytes;
 * - each channel value is its own blob: a value the parent checkpoint does not have is a turn
 *   (`type_tag` 1) of the checkpoint's own APPEND_TURNS, before the checkpoint's turn (one
 *   durable write, all or none); an unchanged value is not sent again. A large value (a
 *   growing message list) travels as its new chunks only (PUT_CHUNKED);
 * - pending writes are key-value entries `w/<checkpoint id>/<task id>/<idx>`;
 * - `x/<checkpoint id>` entries (tombstones the Python saver's `delete_for_runs` and `prune`
 *   write) hide a checkpoint; `b/<hash>` entries hold values above a pruned floor.
 *
 * Values are serialized by the saver's `serde` (LangGraph's JsonPlusSerializer by default:
 * type `json`); values a Python saver wrote with type `msgpack` are read too (LangChain
 * messages become LangChain.js messages).
 */

import { decode as decodeMsgpack, ExtensionCodec } from "@msgpack/msgpack";
import type { RunnableConfig } from "@langchain/core/runnables";
import {
  BaseCheckpointSaver,
  compareWritesSortKeys,
  getCheckpointId,
  maxChannelVersion,
  TASKS,
  WRITES_IDX_MAP,
  writesSortKey,
  type ChannelVersions,
  type Checkpoint,
  type CheckpointListOptions,
  type CheckpointMetadata,
  type CheckpointPendingWrite,
  type CheckpointTuple,
  type PendingWrite,
  type SerializerProtocol,
} from "@langchain/langgraph-checkpoint";

import { Client, type ClientOptions } from "./client.js";

export { CtxstoreStore, getTextAtPath, tokenizePath, type CtxstoreIndexConfig, type CtxstoreStoreOptions } from "./langgraph_store.js";
import { InvalidArgument, NotFound } from "./errors.js";
import { blobHash, toHex } from "./payload.js";
import type { ContextInfo, KvItem, TurnInfo, TurnSpec } from "./types.js";
import { BlobCache } from "./blob_cache.js";

const NAME_PREFIX = "lg:";
const TAG_THREAD = "lg.thread";
const TAG_NS = "lg.ns";
const TAG_FMT = "lg.fmt";
/** The format of the contexts this saver writes: plain tag values. */
const FMT = "2";
const TAG_VALUE_MAX = 1024; // bytes of a tag value (the server's limit)
const CP = "cp/";
const WRITES = "w/";
const BLOBS = "b/";
const DEAD = "x/";
const KV_BATCH = 128; // entries per KV_PUT (the server's limit)
const PAGE = 1000; // items per listing page (the server's limit)
const LABEL_VALUE_MAX = 256;
const CP_LABEL = { "lg.cp": "1" } as const;
/** `typeTag` of a turn holding a channel value (the checkpoint turn's is 0). */
export const VALUE_TYPE = 1;
const BATCH_TURNS = 64; // turns per APPEND_TURNS (the server's limit)
const PARENTS_MAX = 4096;
const BLOB_CACHE_BYTES = 64 << 20;
const OPENED_MAX = 65_536;

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder();

/** The JSON document of a checkpoint turn (format shared with the Python saver). */
interface CheckpointDoc {
  v: number;
  id: string;
  parent: string | null;
  checkpoint: [string, string];
  metadata: [string, string];
  channels: Record<string, [string, string]>;
}

function byteLength(text: string): number {
  return utf8.encode(text).length;
}

/** The context of a thread's namespace: unambiguous (the thread id's length in code points,
 * as Python's `len`, first); a name over 256 bytes is replaced by its hash. */
export function contextName(threadId: string, checkpointNs: string): string {
  const name = `${NAME_PREFIX}${[...threadId].length}:${threadId}:${checkpointNs}`;
  if (byteLength(name) > 256) return `${NAME_PREFIX}#${toHex(blobHash(utf8.encode(name)))}`;
  return name;
}

/** A thread id as a string (LangGraph allows any value; contexts are named by its String). */
function threadOf(configurable: Record<string, unknown> | undefined, what: string): string {
  const value: unknown = configurable?.["thread_id"];
  if (value === undefined || value === null) {
    throw new Error(`${what}: the config has no configurable.thread_id (a checkpointer needs one to know which thread to store)`);
  }
  // LangGraph allows any thread id (a UUID, a number); contexts are named by its string.
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "bigint" || typeof value === "boolean") return String(value);
  throw new TypeError(`${what}: configurable.thread_id is a string (or a number), not ${typeof value}`);
}

/** A thread id and namespace this saver can write: the thread id 1 to 1,024 bytes of UTF-8
 * and the namespace at most that (each is a tag value); else RangeError before anything is
 * written. */
function checkedSpace(threadId: string, checkpointNs: string): void {
  const size = byteLength(threadId);
  if (size < 1 || size > TAG_VALUE_MAX) {
    throw new RangeError(
      `a thread id is 1 to ${TAG_VALUE_MAX} bytes of UTF-8 (it is the ${TAG_THREAD} tag of its contexts), not ${size}: nothing was written`,
    );
  }
  if (typeof checkpointNs !== "string") throw new TypeError("checkpoint_ns is a string");
  if (byteLength(checkpointNs) > TAG_VALUE_MAX) {
    throw new RangeError(`a checkpoint_ns is at most ${TAG_VALUE_MAX} bytes of UTF-8 (it is the ${TAG_NS} tag of its context): nothing was written`);
  }
}

function tagsOf(threadId: string, checkpointNs: string): Record<string, string> {
  const tags: Record<string, string> = { [TAG_THREAD]: threadId, [TAG_FMT]: FMT };
  if (checkpointNs !== "") tags[TAG_NS] = checkpointNs;
  return tags;
}

/** The `lg.thread` values a thread's contexts may carry: plain (format 2) and with the `=` of
 * format 1, each only where it can be a tag value. */
function threadTagValues(threadId: string): string[] {
  return [threadId, `=${threadId}`].filter((v) => byteLength(v) >= 1 && byteLength(v) <= TAG_VALUE_MAX);
}

function isSaverContext(info: ContextInfo): boolean {
  return info.name !== undefined && info.name.startsWith(NAME_PREFIX) && TAG_THREAD in info.tags;
}

/** [context name, thread id, namespace] of a saver's context, by its format. */
function spaceOf(info: ContextInfo): [string, string, string] {
  const tags = info.tags;
  if (TAG_FMT in tags) return [info.name!, tags[TAG_THREAD]!, tags[TAG_NS] ?? ""];
  return [info.name!, tags[TAG_THREAD]!.slice(1), (tags[TAG_NS] ?? "=").slice(1)];
}

/** JSON as Python's `json.dumps` writes it (ASCII only: other characters as \uXXXX), so that
 * a label written by either saver matches a filter built by the other. */
function pythonJson(value: unknown): string {
  return JSON.stringify(value).replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** A scalar metadata value as a label (JSON), or undefined when it is none or too long. */
function labelValue(value: unknown): string | undefined {
  if (value === null || typeof value === "string" || typeof value === "boolean" || (typeof value === "number" && Number.isFinite(value))) {
    const text = pythonJson(value);
    if (text.length > 0 && byteLength(text) <= LABEL_VALUE_MAX) return text;
  }
  return undefined;
}

function runLabel(runId: unknown): string | undefined {
  return typeof runId === "string" && runId.length > 0 && byteLength(runId) <= LABEL_VALUE_MAX ? runId : undefined;
}

function checkpointIdOf(turn: TurnInfo): string | undefined {
  if (turn.key === undefined) return undefined;
  const key = utf8Decoder.decode(turn.key);
  return key.startsWith(CP) ? key.slice(CP.length) : undefined;
}

function b64(data: Uint8Array): string {
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("base64");
}

function unb64(text: string): Uint8Array {
  const buffer = Buffer.from(text, "base64");
  return new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
}

function chunked<T>(items: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

// --- values a Python saver wrote as msgpack ------------------------------------------------

// langgraph's jsonplus extension types (langgraph/checkpoint/serde/jsonplus.py).
const EXT_CONSTRUCTOR_SINGLE_ARG = 0;
const EXT_CONSTRUCTOR_POS_ARGS = 1;
const EXT_CONSTRUCTOR_KW_ARGS = 2;
const EXT_METHOD_SINGLE_ARG = 3;
const EXT_PYDANTIC_V1 = 4;
const EXT_PYDANTIC_V2 = 5;

const pythonExtensions = new ExtensionCodec();
for (const type of [EXT_CONSTRUCTOR_SINGLE_ARG, EXT_CONSTRUCTOR_POS_ARGS, EXT_CONSTRUCTOR_KW_ARGS, EXT_METHOD_SINGLE_ARG, EXT_PYDANTIC_V1, EXT_PYDANTIC_V2]) {
  pythonExtensions.register({
    type,
    encode: () => null,
    decode: (data: Uint8Array) => {
      const fields = decodeMsgpack(data, { extensionCodec: pythonExtensions }) as unknown[];
      const [module, name, arg] = fields as [string, string, unknown];
      // A LangChain message (a pydantic model of langchain_core.messages): the LangChain
      // serialized form, which the serde's JSON reviver turns into a LangChain.js message.
      if ((type === EXT_PYDANTIC_V2 || type === EXT_PYDANTIC_V1) && typeof module === "string" && module.startsWith("langchain_core.messages")) {
        return { lc: 1, type: "constructor", id: ["langchain_core", "messages", name], kwargs: arg };
      }
      // Anything else as its plain data: a datetime as its ISO text, a UUID as its hex, a set
      // as its items, a dataclass or model as its fields.
      return arg;
    },
  });
}

/** The saver's serde, reading the `msgpack` values a Python saver writes as well. */
async function loadsTyped(serde: SerializerProtocol, type: string, data: Uint8Array): Promise<unknown> {
  if (type === "msgpack") {
    const value = decodeMsgpack(data, { extensionCodec: pythonExtensions, useBigInt64: false });
    return serde.loadsTyped("json", JSON.stringify(value));
  }
  if (type === "null") return null;
  if (type === "empty") return undefined;
  return serde.loadsTyped(type, data);
}


/** A LangGraph.js checkpoint saver storing threads in a ctxstore server. */
export class CtxstoreSaver extends BaseCheckpointSaver {
  readonly client: Client;
  private readonly ownsClient: boolean;
  private readonly blobs = new BlobCache(BLOB_CACHE_BYTES, BLOB_CACHE_BYTES / 8);
  private readonly opened = new Set<string>();
  /** (context name, checkpoint id) → [its turn, its channels]: the next put's parent. */
  private readonly parents = new Map<string, [number, Record<string, [string, string]>]>();

  /** A saver on `client` (shared: {@link close} leaves it open unless `ownsClient`). */
  constructor(client: Client, options: { serde?: SerializerProtocol; ownsClient?: boolean } = {}) {
    super(options.serde);
    this.client = client;
    this.ownsClient = options.ownsClient ?? false;
  }

  /** A saver with its own client for `addr` (default CTXSTORE_ADDR, else 127.0.0.1:7411),
   * connected at its first call; {@link close} closes it. `addr` may name a primary and its
   * standbys (`"A,B,C"` or an array): the client follows the primary across a failover. The
   * options are the client's: with `idempotency: "auto"` every turn of a checkpoint's batch
   * carries a key, so one in flight at a failover lands exactly once. */
  static fromAddr(addr?: string | readonly string[], options: ClientOptions & { serde?: SerializerProtocol } = {}): CtxstoreSaver {
    const { serde, ...clientOptions } = options;
    return new CtxstoreSaver(new Client(addr, clientOptions), serde === undefined ? { ownsClient: true } : { serde, ownsClient: true });
  }

  /** Closes the client if this saver made it. */
  async close(): Promise<void> {
    if (this.ownsClient) await this.client.close();
  }

  // -- building blocks ----------------------------------------------------------------------

  /** The blobs of `hexes`: from the cache, the others fetched pipelined. */
  private async fetchBlobs(hexes: Iterable<string>): Promise<Map<string, Uint8Array>> {
    const found = new Map<string, Uint8Array>();
    const missing: string[] = [];
    for (const hex of new Set(hexes)) {
      const data = this.blobs.get(hex);
      if (data === undefined) missing.push(hex);
      else found.set(hex, data);
    }
    const fetched = await Promise.all(missing.map((hex) => this.client.getBlob(hex)));
    missing.forEach((hex, i) => {
      found.set(hex, fetched[i]!);
      this.blobs.set(hex, fetched[i]!);
    });
    return found;
  }

  /** The checkpoint documents of checkpoint turns, in order. */
  private async docs(turns: TurnInfo[]): Promise<CheckpointDoc[]> {
    const blobs = await this.fetchBlobs(turns.filter((t) => t.payload === undefined).map((t) => toHex(t.payloadHash)));
    return turns.map((t) => JSON.parse(utf8Decoder.decode(t.payload ?? blobs.get(toHex(t.payloadHash))!)) as CheckpointDoc);
  }

  /** The name of the namespace's context, created (get-or-create) unless this saver knows it
   * exists. A context of format 1 stays as it is (its tags are read as such). */
  private async open(threadId: string, checkpointNs: string, force: boolean): Promise<string> {
    checkedSpace(threadId, checkpointNs);
    const name = contextName(threadId, checkpointNs);
    if (force || !this.opened.has(name)) {
      await this.client.openContext(name, { tags: tagsOf(threadId, checkpointNs), getOrCreate: true });
      if (this.opened.size >= OPENED_MAX) this.opened.clear();
      this.opened.add(name);
    }
    return name;
  }

  private forget(name: string): void {
    this.opened.delete(name);
    for (const key of [...this.parents.keys()]) if (key.startsWith(`${name}\u0000`)) this.parents.delete(key);
  }

  /** The tombstoned checkpoint ids of a context. */
  private async dead(name: string): Promise<Set<string>> {
    const ids = new Set<string>();
    for await (const item of this.client.iterKv(name, { prefix: DEAD, pageSize: PAGE })) ids.add(utf8Decoder.decode(item.key).slice(DEAD.length));
    return ids;
  }

  private async isDead(name: string, checkpointId: string): Promise<boolean> {
    const page = await this.client.kvList(name, { prefix: DEAD + checkpointId, limit: 1 });
    return page.items.some((item) => utf8Decoder.decode(item.key) === DEAD + checkpointId);
  }

  /** The newest checkpoint turn that is not tombstoned. */
  private async latest(name: string, dead: Set<string>): Promise<TurnInfo | undefined> {
    let size = 1;
    let cursor;
    for (;;) {
      const page = await this.client.turnLog(name, { labels: CP_LABEL, cursor, limit: size, payloads: true });
      for (const turn of page.turns) {
        const id = checkpointIdOf(turn);
        if (id !== undefined && !dead.has(id)) return turn;
      }
      if (page.nextCursor === undefined) return undefined;
      cursor = page.nextCursor;
      size = Math.min(PAGE, size * 8);
    }
  }

  /** The contexts of every namespace of a thread, of both formats: listed by the plain
   * `lg.thread` value and by format 1's `=`-prefixed one, each kept once and only if its own
   * format reads as this thread. */
  private async namespaces(threadId: string): Promise<ContextInfo[]> {
    const found = new Map<number, ContextInfo>();
    await Promise.all(
      threadTagValues(threadId).map(async (value) => {
        for await (const info of this.client.iterContexts({ tags: { [TAG_THREAD]: value } }, { pageSize: PAGE })) {
          if (isSaverContext(info) && spaceOf(info)[1] === threadId && !found.has(info.contextId)) found.set(info.contextId, info);
        }
      }),
    );
    return [...found.values()];
  }

  /** The CheckpointTuples of checkpoint documents: channel values and pending writes fetched
   * pipelined, for all at once. */
  private async tuples(entries: Array<[string, string, string, CheckpointDoc]>): Promise<CheckpointTuple[]> {
    if (entries.length === 0) return [];
    const digests = entries.flatMap(([, , , doc]) => Object.values(doc.channels).map(([, hex]) => hex));
    const [values, writeItems] = await Promise.all([
      this.fetchBlobs(digests),
      Promise.all(
        entries.map(async ([name, , , doc]) => {
          const items: KvItem[] = [];
          try {
            for await (const item of this.client.iterKv(name, { prefix: `${WRITES}${doc.id}/`, pageSize: PAGE })) items.push(item);
          } catch (error) {
            if (!(error instanceof NotFound)) throw error; // deleted meanwhile: no writes
          }
          return items;
        }),
      ),
    ]);
    const writeValues = await this.fetchBlobs(writeItems.flat().map((item) => toHex(item.valueHash)));
    return Promise.all(entries.map(([name, thread, ns, doc], i) => this.tuple(name, thread, ns, doc, values, writeItems[i]!, writeValues)));
  }

  /** The pending writes stored for a checkpoint, in `writesSortKey` order. */
  private async pendingWrites(items: KvItem[], writeValues: Map<string, Uint8Array>): Promise<CheckpointPendingWrite[]> {
    const stored: Array<[ReturnType<typeof writesSortKey>, CheckpointPendingWrite]> = [];
    for (const item of items) {
      const entry = writeValues.get(toHex(item.valueHash))!;
      const newline = entry.indexOf(0x0a);
      const head = JSON.parse(utf8Decoder.decode(entry.subarray(0, newline))) as { task_id: string; channel: string; type: string; path?: string; idx: number };
      const value = await loadsTyped(this.serde, head.type, entry.subarray(newline + 1));
      stored.push([writesSortKey(head.path ?? "", head.task_id, head.idx), [head.task_id, head.channel, value]]);
    }
    stored.sort((a, b) => compareWritesSortKeys(a[0], b[0]));
    return stored.map(([, write]) => write);
  }

  /** A checkpoint of format v < 4 kept its pending sends as the parent's TASKS writes: they
   * become its TASKS channel, as LangGraph's own savers migrate them. */
  private async migratePendingSends(name: string, checkpoint: Checkpoint, parentId: string): Promise<void> {
    const items: KvItem[] = [];
    try {
      for await (const item of this.client.iterKv(name, { prefix: `${WRITES}${parentId}/`, pageSize: PAGE })) items.push(item);
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
    }
    const values = await this.fetchBlobs(items.map((item) => toHex(item.valueHash)));
    const sends = (await this.pendingWrites(items, values)).filter(([, channel]) => channel === TASKS).map(([, , value]) => value);
    checkpoint.channel_values ??= {};
    (checkpoint.channel_values)[TASKS] = sends;
    checkpoint.channel_versions ??= {};
    const versions = Object.values(checkpoint.channel_versions);
    checkpoint.channel_versions[TASKS] = versions.length > 0 ? maxChannelVersion(...versions) : this.getNextVersion(undefined);
  }

  private async tuple(
    name: string,
    threadId: string,
    checkpointNs: string,
    doc: CheckpointDoc,
    values: Map<string, Uint8Array>,
    writeItems: KvItem[],
    writeValues: Map<string, Uint8Array>,
  ): Promise<CheckpointTuple> {
    const checkpoint = (await loadsTyped(this.serde, doc.checkpoint[0], unb64(doc.checkpoint[1]))) as Checkpoint;
    const channelValues: Record<string, unknown> = {};
    for (const [channel, [type, hex]] of Object.entries(doc.channels)) {
      channelValues[channel] = await loadsTyped(this.serde, type, values.get(hex)!);
    }
    checkpoint.channel_values = channelValues;
    const metadata = (await loadsTyped(this.serde, doc.metadata[0], unb64(doc.metadata[1]))) as CheckpointMetadata;
    if (checkpoint.v < 4 && doc.parent) await this.migratePendingSends(name, checkpoint, doc.parent);
    const tuple: CheckpointTuple = {
      config: { configurable: { thread_id: threadId, checkpoint_ns: checkpointNs, checkpoint_id: doc.id } },
      checkpoint,
      metadata,
      pendingWrites: await this.pendingWrites(writeItems, writeValues),
    };
    if (doc.parent) tuple.parentConfig = { configurable: { thread_id: threadId, checkpoint_ns: checkpointNs, checkpoint_id: doc.parent } };
    return tuple;
  }

  // -- BaseCheckpointSaver ------------------------------------------------------------------

  /** The checkpoint of `config` (its checkpoint_id, else the namespace's newest), with its
   * pending writes; undefined if there is none (or it was deleted). */
  async getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined> {
    if (config.configurable?.["thread_id"] === undefined) return undefined;
    const threadId = threadOf(config.configurable, "getTuple");
    const checkpointNs = (config.configurable?.["checkpoint_ns"] as string | undefined) ?? "";
    const name = contextName(threadId, checkpointNs);
    const checkpointId = getCheckpointId(config);
    let doc: CheckpointDoc;
    try {
      if (checkpointId) {
        const [turn, dead] = await Promise.all([this.client.turnByKey(name, CP + checkpointId), this.isDead(name, checkpointId)]);
        if (turn === undefined || dead) return undefined;
        doc = (await this.docs([turn]))[0]!;
      } else {
        const turn = await this.latest(name, await this.dead(name));
        if (turn === undefined) return undefined;
        doc = (await this.docs([turn]))[0]!;
      }
    } catch (error) {
      if (error instanceof NotFound) return undefined;
      throw error;
    }
    return (await this.tuples([[name, threadId, checkpointNs, doc]]))[0];
  }

  /** Checkpoints newest first (by checkpoint id): of the config's thread (and namespace, when
   * it names one; one checkpoint when it names one), else of every thread (of the namespace
   * when it names one); only those whose metadata has every `filter` item, older than
   * `before`, at most `limit`. */
  async *list(config: RunnableConfig, options: CheckpointListOptions = {}): AsyncGenerator<CheckpointTuple> {
    const { limit, before, filter } = options;
    if (limit !== undefined && limit <= 0) return;
    const configurable = config.configurable;
    const ns = configurable?.["checkpoint_ns"] as string | undefined;
    const onlyId = configurable?.["checkpoint_id"] as string | undefined;
    const spaces: Array<[string, string, string]> = [];
    if (configurable?.["thread_id"] !== undefined) {
      const threadId = threadOf(configurable, "list");
      if (ns !== undefined) spaces.push([contextName(threadId, ns), threadId, ns]);
      else for (const info of await this.namespaces(threadId)) spaces.push(spaceOf(info));
    } else {
      for await (const info of this.client.iterContexts({ namePrefix: NAME_PREFIX }, { pageSize: PAGE })) {
        if (!isSaverContext(info)) continue;
        const space = spaceOf(info);
        if (ns === undefined || space[2] === ns) spaces.push(space);
      }
    }
    const beforeId = before === undefined ? undefined : getCheckpointId(before) || undefined;
    // The server filters by the labels it has; every filter item is checked here too.
    const labels: Record<string, string> = { ...CP_LABEL };
    for (const [key, value] of Object.entries(filter ?? {})) {
      if (key === "run_id" && runLabel(value) !== undefined) labels["run_id"] = value as string;
      else if ((key === "source" || key === "step") && (typeof value === "string" || Number.isInteger(value))) {
        const label = labelValue(value);
        if (label !== undefined) labels[`m.${key}`] = label;
      }
    }
    const candidates: Array<[string, string, string, CheckpointDoc]> = [];
    await Promise.all(
      spaces.map(async ([name, threadId, spaceNs]) => {
        let turns: TurnInfo[];
        try {
          if (onlyId) {
            const [turn, dead] = await Promise.all([this.client.turnByKey(name, CP + onlyId), this.isDead(name, onlyId)]);
            turns = turn === undefined || dead ? [] : [turn];
          } else {
            const [dead, all] = await Promise.all([
              this.dead(name),
              (async () => {
                const found: TurnInfo[] = [];
                for await (const turn of this.client.iterTurnLog(name, { labels, payloads: true, pageSize: PAGE })) found.push(turn);
                return found;
              })(),
            ]);
            turns = all.filter((t) => {
              const id = checkpointIdOf(t);
              return id !== undefined && !dead.has(id);
            });
          }
        } catch (error) {
          if (error instanceof NotFound) return;
          throw error;
        }
        turns = turns.filter((t) => beforeId === undefined || (checkpointIdOf(t) ?? "") < beforeId);
        for (const doc of await this.docs(turns)) candidates.push([name, threadId, spaceNs, doc]);
      }),
    );
    candidates.sort((a, b) => (a[3].id < b[3].id ? 1 : a[3].id > b[3].id ? -1 : 0));
    const chosen: Array<[string, string, string, CheckpointDoc]> = [];
    for (const candidate of candidates) {
      if (filter !== undefined && Object.keys(filter).length > 0) {
        const metadata = (await loadsTyped(this.serde, candidate[3].metadata[0], unb64(candidate[3].metadata[1]))) as Record<string, unknown>;
        if (!Object.entries(filter).every(([key, value]) => metadata[key] === value)) continue;
      }
      chosen.push(candidate);
      if (limit !== undefined && chosen.length >= limit) break;
    }
    for (const tuple of await this.tuples(chosen)) yield tuple;
  }

  /** Stores `checkpoint` as a turn after its parent's (the config's checkpoint_id), each
   * channel value as its own blob; returns the config naming it. */
  async put(config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, newVersions: ChannelVersions): Promise<RunnableConfig> {
    try {
      return await this.putOnce(config, checkpoint, metadata, newVersions, false);
    } catch (error) {
      if (!(error instanceof NotFound) && !(error instanceof InvalidArgument)) throw error;
      // The context was deleted (or pruned) since this saver last saw it: look the parent up
      // again (create the context again), once.
      return this.putOnce(config, checkpoint, metadata, newVersions, true);
    }
  }

  private async putOnce(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    newVersions: ChannelVersions,
    again: boolean,
  ): Promise<RunnableConfig> {
    const threadId = threadOf(config.configurable, "put");
    const checkpointNs = (config.configurable?.["checkpoint_ns"] as string | undefined) ?? "";
    const parentId = config.configurable?.["checkpoint_id"] as string | undefined;
    checkedSpace(threadId, checkpointNs);

    const { channel_values: values, ...body } = checkpoint;
    const channels: Record<string, [string, string]> = {};
    const blobs = new Map<string, Uint8Array>();
    const missing: string[] = [];
    // A channel of newVersions is stored with this checkpoint; the others did not change since
    // the parent, whose value they keep (LangGraph's contract: a saver stores what changed).
    for (const channel of Object.keys(checkpoint.channel_versions ?? {})) {
      if (channel in newVersions && values !== undefined && channel in values) {
        const [type, data] = await this.serde.dumpsTyped((values)[channel]);
        const hex = toHex(blobHash(data));
        channels[channel] = [type, hex];
        blobs.set(hex, data);
      } else if (!(channel in newVersions)) {
        missing.push(channel); // the parent's value, if it has one
      }
    }
    const [[cpType, cpBytes], [metaType, metaBytes]] = await Promise.all([this.serde.dumpsTyped(body), this.serde.dumpsTyped(metadata)]);

    const name = await this.open(threadId, checkpointNs, again);
    let parentTurnId: number | undefined;
    let parentChannels: Record<string, [string, string]> = {};
    if (parentId) {
      const known = again ? undefined : this.parents.get(`${name}\u0000${parentId}`);
      if (known !== undefined) {
        [parentTurnId, parentChannels] = known;
      } else {
        const parentTurn = await this.client.turnByKey(name, CP + parentId);
        if (parentTurn !== undefined) {
          parentTurnId = parentTurn.turnId;
          parentChannels = (await this.docs([parentTurn]))[0]!.channels;
        }
      }
    }
    // Unchanged channels the checkpoint does not carry: the parent's blobs.
    for (const channel of missing) if (channel in parentChannels) channels[channel] = parentChannels[channel]!;
    // A value the parent has is held already (by its turn, or b/<hash>); the new ones become
    // turns of the checkpoint's own batch: one durable write, all or none. Past the batch's
    // room, the rest are held by b/<hash> entries, written before it.
    const held = new Set(Object.values(parentChannels).map(([, hex]) => hex));
    const fresh = [...blobs.entries()].filter(([hex]) => !held.has(hex));
    const asTurns = fresh.slice(0, BATCH_TURNS - 1);
    const overflow = fresh.slice(BATCH_TURNS - 1);
    if (overflow.length > 0) {
      await Promise.all(chunked(overflow, KV_BATCH).map((part) => this.client.kvPut(name, new Map(part.map(([hex, data]) => [BLOBS + hex, data])), { ifAbsent: true })));
    }

    const doc: CheckpointDoc = {
      v: 1,
      id: checkpoint.id,
      parent: parentId ?? null,
      checkpoint: [cpType, b64(cpBytes)],
      metadata: [metaType, b64(metaBytes)],
      channels,
    };
    const labels: Record<string, string> = { ...CP_LABEL };
    if (byteLength(threadId) <= LABEL_VALUE_MAX) labels["thread_id"] = threadId; // a label is at most 1 KiB with its key
    const meta = metadata as Record<string, unknown>;
    const runId = runLabel(meta["run_id"]);
    if (runId !== undefined) labels["run_id"] = runId;
    for (const key of ["source", "step"]) {
      if (key in meta) {
        const label = labelValue(meta[key]);
        if (label !== undefined) labels[`m.${key}`] = label;
      }
    }
    const parent = parentTurnId ?? "root";
    const specs: TurnSpec[] = asTurns.map(([, data], i) => ({ payload: data, parent: i === 0 ? parent : undefined, typeTag: VALUE_TYPE }));
    specs.push({
      payload: utf8.encode(JSON.stringify(doc)),
      parent: specs.length > 0 ? undefined : parent,
      key: CP + checkpoint.id,
      labels,
    });
    const appended = await this.client.appendTurns(name, specs);
    const cpTurn = appended[appended.length - 1]!.turn;
    if (this.parents.size >= PARENTS_MAX) this.parents.delete(this.parents.keys().next().value!);
    this.parents.set(`${name}\u0000${checkpoint.id}`, [cpTurn.turnId, channels]);
    return { configurable: { thread_id: threadId, checkpoint_ns: checkpointNs, checkpoint_id: checkpoint.id } };
  }

  /** Stores a task's writes for the config's checkpoint (key-value entries); a write stored
   * before keeps its value, except the special channels' (errors, interrupts...). */
  async putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath = ""): Promise<void> {
    const threadId = threadOf(config.configurable, "putWrites");
    const checkpointNs = (config.configurable?.["checkpoint_ns"] as string | undefined) ?? "";
    const checkpointId = config.configurable?.["checkpoint_id"] as string | undefined;
    if (checkpointId === undefined) throw new Error("putWrites: the config has no configurable.checkpoint_id");
    const keep = new Map<string, Uint8Array>();
    const replace = new Map<string, Uint8Array>();
    await Promise.all(
      writes.map(async ([channel, value], idx) => {
        const writeIdx = WRITES_IDX_MAP[channel] ?? idx;
        const [type, data] = await this.serde.dumpsTyped(value);
        const head = utf8.encode(JSON.stringify({ task_id: taskId, channel, type, path: taskPath, idx: writeIdx }) + "\n");
        const entry = new Uint8Array(head.length + data.length);
        entry.set(head);
        entry.set(data, head.length);
        (writeIdx >= 0 ? keep : replace).set(`${WRITES}${checkpointId}/${taskId}/${writeIdx}`, entry);
      }),
    );
    for (const attempt of [false, true]) {
      const name = await this.open(threadId, checkpointNs, attempt);
      const batch = [
        ...chunked([...keep.entries()], KV_BATCH).map((part) => this.client.kvPut(name, new Map(part), { ifAbsent: true })),
        ...chunked([...replace.entries()], KV_BATCH).map((part) => this.client.kvPut(name, new Map(part))),
      ];
      try {
        await Promise.all(batch);
        return;
      } catch (error) {
        if (!(error instanceof NotFound) || attempt) throw error;
      }
    }
  }

  /** Deletes every namespace's context of the thread (nothing if it has none). */
  async deleteThread(threadId: string): Promise<void> {
    const thread = typeof threadId === "string" ? threadId : String(threadId);
    const infos = await this.namespaces(thread);
    for (const info of infos) this.forget(info.name!);
    await Promise.all(
      infos.map(async (info) => {
        try {
          await this.client.deleteContext(info.contextId);
        } catch (error) {
          if (!(error instanceof NotFound)) throw error;
        }
      }),
    );
  }
}

