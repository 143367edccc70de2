/**
 * LangGraph.js's long-term memory on ctxstore: {@link CtxstoreStore}, a `BaseStore`
 * (decisions 0022 and 0033), exported by `@ctxstore/client/langgraph`.
 *
 * It keeps items exactly as the Python `ctxstore.langgraph.CtxstoreStore` does, so a store
 * written from one language reads from the other:
 *
 * - a store is one context, `lgs:<name>` (tagged `lg.store=<name>`, `lg.fmt=1`), created at the
 *   first write;
 * - an item is three key-value entries of it, adjacent in key order: `i/` + NS + KEY + `\0v`
 *   (the value as canonical JSON: sorted keys, no spaces, UTF-8, as Python's `json.dumps(...,
 *   sort_keys=True, separators=(",", ":"), ensure_ascii=False)` writes it, so equal values are
 *   one blob whatever item or language wrote them), `\0c` (its creation time, ISO 8601 UTC,
 *   written only if absent) and `\0u` (its last put's time);
 * - NS is each label as UTF-8 followed by a NUL, then one more NUL; KEY is the key's UTF-8 with
 *   0x01 → 0x01 0x02 and NUL → 0x01 0x01, so a namespace prefix is a byte prefix and `search` and
 *   `listNamespaces` answer in (namespace, key) order;
 * - `n/` + NS (empty value) marks a namespace that once held an item; `listNamespaces` scans
 *   them and skips the namespaces with no item left.
 *
 * Vector search (protocol version 6, decision 0033), with `index: { dims, embeddings, fields }`:
 * the store has one vector index, named `lgs:<name>` too (`lgs#` and the first 60 hex digits of
 * the name's BLAKE3 when that passes 64 bytes), created at {@link CtxstoreStore.start}
 * (or before the first write or search that needs it). A put embeds the texts at the configured
 * fields (or the put's own `index` paths; `index: false` embeds nothing) with the embeddings'
 * `embedDocuments`, one vector per text (a path with `[*]` gives one per element, as
 * LangGraph's `get_text_at_path`), and writes them on the item's `\0v` entry with its value
 * (KV_PUT_VECTORS, one durable record). A search with a `query` embeds it (`embedQuery`) and the
 * server answers the nearest items (VECTOR_SEARCH) under the namespace prefix that pass the
 * filter, which the server evaluates: exactly `limit` items whenever that many pass, each with
 * its `score` (the best of its vectors; cosine similarity by default, as PostgresStore's).
 * Items without vectors are not answered by a query (as PostgresStore). Overwriting or deleting
 * an item drops its vectors.
 *
 * LangGraph.js's `BaseStore` has no TTL; items a Python store wrote with one expire as the
 * server says (gone from every read at once).
 */

import type { EmbeddingsInterface } from "@langchain/core/embeddings";
import {
  BaseStore,
  validateNamespace,
  type GetOperation,
  type Item,
  type ListNamespacesOperation,
  type MatchCondition,
  type Operation,
  type OperationResults,
  type PutOperation,
  type SearchItem,
  type SearchOperation,
} from "@langchain/langgraph-checkpoint";

import { Client, type ClientOptions } from "./client.js";
import { NotFound } from "./errors.js";
import { blobHash, toHex } from "./payload.js";
import type { KvItem, KvValue, VectorMetricName } from "./types.js";
import { BlobCache } from "./blob_cache.js";
import { concat } from "./protocol.js";

const NAME_PREFIX = "lgs:";
const TAG_STORE = "lg.store";
const TAG_FMT = "lg.fmt";
const FMT = "1";
const ITEMS = Uint8Array.of(0x69, 0x2f); // "i/"
const NAMESPACES = Uint8Array.of(0x6e, 0x2f); // "n/"
const VALUE = Uint8Array.of(0, 0x76); // "\0v"
const CREATED = Uint8Array.of(0, 0x63); // "\0c"
const UPDATED = Uint8Array.of(0, 0x75); // "\0u"
const KEY_BYTES_MAX = 256; // a key-value key (the server's limit)
const PAGE = 1000; // entries per KV_LIST page (the server's limit)
const GET_MANY_KEYS = 128; // keys per KV_GET_MANY (the server's limit)
const VECTORS_PER_ITEM_MAX = 64; // vectors per key-value entry (the server's limit)
const SEARCH_MAX = 1000; // limit + offset of one vector search (the server's limit)
const VECTOR_PREFIX_BYTES_MAX = 256;
const INDEX_NAME_BYTES_MAX = 64;
const CONTEXT_NAME_BYTES_MAX = 256;
const VALUE_CACHE_BYTES = 32 << 20;

const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder("utf-8", { fatal: true });

/** The store's vector search: LangGraph.js's `IndexConfig` (`dims`, `embeddings`, `fields`,
 * default `["$"]`: the whole value as one text), with PostgresStore's `distanceType` (default
 * `cosine`) and the graph's search breadth `efSearch` (0 or absent: the server's default, 128,
 * or whatever the index has). Every store of one name shares the index: their `dims`,
 * `distanceType` and (when not 0) `efSearch` must agree with it, else InvalidArgument at
 * `start()` or the first write (the Python store creates it with `efSearch` 0). */
export interface CtxstoreIndexConfig {
  dims: number;
  embeddings: EmbeddingsInterface;
  fields?: string[];
  distanceType?: VectorMetricName;
  efSearch?: number;
}

export interface CtxstoreStoreOptions {
  /** The store's name (default `default`): the context `lgs:<name>`. */
  name?: string;
  /** Vector search (protocol version 6): see {@link CtxstoreIndexConfig}. */
  index?: CtxstoreIndexConfig;
  /** Close the client at {@link CtxstoreStore.close} (the default when `fromAddr` made it). */
  ownsClient?: boolean;
}

// --- the key layout (the Python store's, byte for byte) --------------------------------------

/** The store's vector index, as the Python store names it: `lgs:` and the store's name, or
 * (past 64 bytes) `lgs#` and the first 60 hex digits of the name's BLAKE3. */
export function vectorIndexNameOf(storeName: string): string {
  const name = `${NAME_PREFIX}${storeName}`;
  if (utf8.encode(name).length <= INDEX_NAME_BYTES_MAX) return name;
  return `lgs#${toHex(blobHash(utf8.encode(storeName))).slice(0, INDEX_NAME_BYTES_MAX - 4)}`;
}

/** `parts` one after another (the protocol module's `concat`). */
function concatBytes(...parts: Uint8Array[]): Uint8Array {
  return concat(parts);
}

/** The labels of a namespace (or of a namespace prefix), each followed by a NUL. */
function labelBytes(namespace: readonly string[]): Uint8Array {
  return concatBytes(...namespace.map((label) => concatBytes(utf8.encode(label), Uint8Array.of(0))));
}

/** A whole namespace: its labels, then one more NUL. */
function namespaceBytes(namespace: readonly string[]): Uint8Array {
  return concatBytes(labelBytes(namespace), Uint8Array.of(0));
}

/** An item's key with no NUL left (0x01 → 0x01 0x02, then NUL → 0x01 0x01; order kept). */
function itemKeyBytes(key: string): Uint8Array {
  const out: number[] = [];
  for (const byte of utf8.encode(key)) {
    if (byte === 1) out.push(1, 2);
    else if (byte === 0) out.push(1, 1);
    else out.push(byte);
  }
  return Uint8Array.from(out);
}

function unkey(raw: Uint8Array): string {
  const out: number[] = [];
  for (let i = 0; i < raw.length; i++) {
    const byte = raw[i]!;
    if (byte === 1 && i + 1 < raw.length) {
      out.push(raw[i + 1] === 1 ? 0 : 1);
      i++;
    } else out.push(byte);
  }
  return utf8Strict.decode(Uint8Array.from(out));
}

/** What the three entries of an item start with; RangeError past the key limit. */
function itemPrefix(namespace: readonly string[], key: string): Uint8Array {
  const prefix = concatBytes(ITEMS, namespaceBytes(namespace), itemKeyBytes(key));
  if (prefix.length + VALUE.length > KEY_BYTES_MAX) {
    throw new RangeError(
      `namespace ${JSON.stringify(namespace)} and key ${JSON.stringify(key)} are ${prefix.length + VALUE.length} bytes as a ctxstore key-value key; together they are at most ${KEY_BYTES_MAX}`,
    );
  }
  return prefix;
}

function startsWith(data: Uint8Array, prefix: Uint8Array): boolean {
  if (prefix.length > data.length) return false;
  for (let i = 0; i < prefix.length; i++) if (data[i] !== prefix[i]) return false;
  return true;
}

function endsWith(data: Uint8Array, suffix: Uint8Array): boolean {
  if (suffix.length > data.length) return false;
  const at = data.length - suffix.length;
  for (let i = 0; i < suffix.length; i++) if (data[at + i] !== suffix[i]) return false;
  return true;
}

/** [namespace, key, suffix] of an item's entry key. */
function splitEntry(entryKey: Uint8Array): [string[], string, Uint8Array] {
  const body = entryKey.subarray(ITEMS.length, entryKey.length - 2);
  const suffix = entryKey.subarray(entryKey.length - 2);
  let cut = -1;
  for (let i = 0; i + 1 < body.length; i++) {
    if (body[i] === 0 && body[i + 1] === 0) {
      cut = i;
      break;
    }
  }
  if (cut < 0 || !startsWith(entryKey, ITEMS)) throw new Error(`not an item entry of a CtxstoreStore: ${toHex(entryKey)}`);
  const labels = utf8Strict.decode(body.subarray(0, cut)).split("\0");
  return [labels, unkey(body.subarray(cut + 2)), suffix];
}

/** The namespace of a registry entry `n/` + labels + NUL. */
function namespaceOfEntry(entryKey: Uint8Array): string[] {
  return utf8Strict.decode(entryKey.subarray(NAMESPACES.length, entryKey.length - 2)).split("\0");
}

/** An item's identity as a map key: its entry key without the suffix. */
function itemId(entryKey: Uint8Array): string {
  return toHex(entryKey.subarray(0, entryKey.length - 2));
}

// --- JSON as Python writes it ------------------------------------------------------------------

/** Strings in code point order, as Python sorts them. */
function compareCodePoints(a: string, b: string): number {
  const x = [...a];
  const y = [...b];
  const n = Math.min(x.length, y.length);
  for (let i = 0; i < n; i++) {
    const d = x[i]!.codePointAt(0)! - y[i]!.codePointAt(0)!;
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

/** A number as Python's `json.dumps` writes it: a whole number as an int, else as `repr` of a
 * float (`1.5e-07`). */
function pythonNumber(value: number): string {
  if (Number.isInteger(value)) return BigInt(value).toString();
  const [mantissa, power] = value.toExponential().split("e") as [string, string];
  // repr: positional from 1e-4 on (a number that is not whole is below 2^53, so below 1e16)
  if (Number(power) >= -4) return String(value);
  return `${mantissa}e-${power.slice(1).padStart(2, "0")}`;
}

/** `value` (plain JSON data) as Python's `json.dumps(value, sort_keys=True,
 * ensure_ascii=False, separators=…)` writes it. */
function pythonJson(value: unknown, itemSep: string, keySep: string): string {
  if (value === null) return "null";
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "boolean") return value ? "true" : "false";
  if (typeof value === "number") return Number.isFinite(value) ? pythonNumber(value) : "null";
  if (Array.isArray(value)) return `[${value.map((v) => pythonJson(v, itemSep, keySep)).join(itemSep)}]`;
  if (typeof value === "object") {
    const keys = Object.keys(value).sort(compareCodePoints);
    const record = value as Record<string, unknown>;
    return `{${keys.map((k) => `${JSON.stringify(k)}${keySep}${pythonJson(record[k], itemSep, keySep)}`).join(itemSep)}}`;
  }
  throw new TypeError(`not JSON data: ${typeof value}`);
}

/** `value` as plain JSON data (toJSON applied, undefined members dropped: what JSON.stringify
 * keeps). TypeError for what JSON cannot hold (a bigint, a cycle). */
function plainJson(value: unknown): unknown {
  const text = JSON.stringify(value);
  return text === undefined ? null : JSON.parse(text);
}

/** A store value as canonical JSON (an object; TypeError otherwise): equal values are equal
 * bytes, the Python store's bytes. */
function valueBytes(value: unknown): Uint8Array {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError(`a store value is an object, not ${value === null ? "null" : Array.isArray(value) ? "an array" : typeof value}`);
  }
  return utf8.encode(pythonJson(plainJson(value), ",", ":"));
}

/** Now as Python's `datetime.now(timezone.utc).isoformat()` writes it. */
function nowBytes(): Uint8Array {
  const iso = new Date().toISOString(); // 2026-12-07T10:11:12.123Z
  return utf8.encode(`${iso.slice(0, 23)}000+00:00`);
}

function timeOf(raw: Uint8Array | undefined, fallback: Date): Date {
  if (raw === undefined) return fallback;
  const when = new Date(utf8Strict.decode(raw));
  return Number.isNaN(when.getTime()) ? fallback : when;
}

// --- the texts a put embeds (LangGraph's get_text_at_path, Python's) ---------------------------

/** A path as LangGraph's `tokenize_path` splits it: fields, `[index]`, `{a,b}`. */
export function tokenizePath(path: string): string[] {
  const tokens: string[] = [];
  let current = "";
  let i = 0;
  while (i < path.length) {
    const char = path[i]!;
    if (char === "[" || char === "{") {
      const close = char === "[" ? "]" : "}";
      if (current !== "") tokens.push(current);
      current = "";
      let depth = 1;
      let token = char;
      i++;
      while (i < path.length && depth > 0) {
        if (path[i] === char) depth++;
        else if (path[i] === close) depth--;
        token += path[i];
        i++;
      }
      tokens.push(token);
      continue;
    }
    if (char === ".") {
      if (current !== "") tokens.push(current);
      current = "";
    } else current += char;
    i++;
  }
  if (current !== "") tokens.push(current);
  return tokens;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A scalar or a structure as text, as Python's `str` and `json.dumps(sort_keys=True,
 * ensure_ascii=False)` give it. */
function textOf(value: unknown): string[] {
  if (typeof value === "string") return [value];
  if (typeof value === "boolean") return [value ? "True" : "False"];
  if (typeof value === "number") return [pythonNumber(value)];
  if (value === null || value === undefined) return [];
  if (typeof value === "object") return [pythonJson(value, ", ", ": ")];
  return [];
}

/** The texts at `path` in `value`, as LangGraph's `get_text_at_path` (Python) finds them:
 * `$` the whole value, `a.b`, `a[0]`, `a[-1]`, `a[*].b` (one text per element), `*`, `{a,b.c}`. */
export function getTextAtPath(value: unknown, path: string | string[]): string[] {
  if (path.length === 0 || path === "$") return [pythonJson(value, ", ", ": ")];
  const tokens = typeof path === "string" ? tokenizePath(path) : path;
  const walk = (obj: unknown, pos: number): string[] => {
    if (pos >= tokens.length) return textOf(obj);
    const token = tokens[pos]!;
    const found: string[] = [];
    if (token.startsWith("[") && token.endsWith("]")) {
      if (!Array.isArray(obj)) return [];
      const index = token.slice(1, -1);
      if (index === "*") {
        for (const element of obj) found.push(...walk(element, pos + 1));
      } else {
        if (!/^\s*[+-]?\d+\s*$/.test(index)) return [];
        let at = Number.parseInt(index, 10);
        if (at < 0) at += obj.length;
        if (at >= 0 && at < obj.length) found.push(...walk(obj[at], pos + 1));
      }
    } else if (token.startsWith("{") && token.endsWith("}")) {
      if (!isObject(obj)) return [];
      for (const field of token.slice(1, -1).split(",").map((f) => f.trim())) {
        let current: unknown = obj;
        for (const part of tokenizePath(field)) {
          if (isObject(current) && Object.hasOwn(current, part)) current = current[part];
          else {
            current = undefined;
            break;
          }
        }
        if (current !== undefined && current !== null) found.push(...textOf(current));
      }
    } else if (token === "*") {
      const children = Array.isArray(obj) ? obj : isObject(obj) ? Object.values(obj) : [];
      for (const child of children) found.push(...walk(child, pos + 1));
    } else if (isObject(obj) && Object.hasOwn(obj, token)) {
      found.push(...walk(obj[token], pos + 1));
    }
    return found;
  };
  return walk(value, 0);
}

// --- LangGraph's filters, as the server evaluates them -----------------------------------------

function jsonEqual(a: unknown, b: unknown): boolean {
  const x = a === undefined ? null : a;
  const y = b === undefined ? null : b;
  if (Array.isArray(x) || Array.isArray(y)) {
    return Array.isArray(x) && Array.isArray(y) && x.length === y.length && x.every((v, i) => jsonEqual(v, y[i]));
  }
  if (isObject(x) || isObject(y)) {
    if (!isObject(x) || !isObject(y)) return false;
    const keys = Object.keys(x);
    return keys.length === Object.keys(y).length && keys.every((k) => Object.hasOwn(y, k) && jsonEqual(x[k], y[k]));
  }
  return x === y;
}

function compare(value: unknown, operator: string, operand: unknown): boolean {
  switch (operator) {
    case "$eq":
      return jsonEqual(value, operand);
    case "$ne":
      return !jsonEqual(value, operand);
    case "$gt":
    case "$gte":
    case "$lt":
    case "$lte": {
      if (typeof operand !== "number") throw new TypeError(`the operand of ${operator} is a number, not ${JSON.stringify(operand)}`);
      if (typeof value !== "number") return false;
      if (operator === "$gt") return value > operand;
      if (operator === "$gte") return value >= operand;
      if (operator === "$lt") return value < operand;
      return value <= operand;
    }
    default:
      throw new RangeError(`unsupported filter operator: ${operator} (the operators are $eq, $ne, $gt, $gte, $lt, $lte)`);
  }
}

/** LangGraph's filter semantics (its PostgresStore and the server's): an object of operators
 * compares, an object without operators matches an object field by field, an array element by
 * element, anything else is equality. */
function matches(value: unknown, condition: unknown): boolean {
  if (isObject(condition)) {
    const keys = Object.keys(condition);
    if (keys.some((k) => k.startsWith("$"))) return keys.every((op) => compare(value, op, condition[op]));
    return isObject(value) && keys.every((k) => matches(value[k], condition[k]));
  }
  if (Array.isArray(condition)) {
    return Array.isArray(value) && value.length === condition.length && condition.every((c, i) => matches(value[i], c));
  }
  return jsonEqual(value, condition);
}

function passes(value: Record<string, unknown>, filter: Record<string, unknown> | undefined): boolean {
  if (filter === undefined) return true;
  return Object.entries(filter).every(([field, condition]) => matches(value[field], condition));
}

/** Whether a namespace meets a prefix or suffix condition (`*` matches any label). */
function fits(condition: MatchCondition, namespace: readonly string[]): boolean {
  const path = condition.path;
  if (namespace.length < path.length) return false;
  if (condition.matchType === "prefix") return path.every((want, i) => want === "*" || namespace[i] === want);
  if (condition.matchType === "suffix") {
    const at = namespace.length - path.length;
    return path.every((want, i) => want === "*" || namespace[at + i] === want);
  }
  throw new RangeError(`unsupported match type: ${String(condition.matchType)}`);
}

// --- the store -------------------------------------------------------------------------------

/** An item's entries as a listing found them (the hashes of their values). */
interface ListedItem {
  namespace: string[];
  key: string;
  value?: Uint8Array;
  created?: Uint8Array;
  updated?: Uint8Array;
}

/** A put as the batch writes it. */
interface PlannedPut {
  op: PutOperation;
  prefix: Uint8Array;
  value: Uint8Array;
  /** The texts to embed (none: no vectors). */
  texts: string[];
  vectors: Float32Array[];
}


function isGet(op: Operation): op is GetOperation {
  return "key" in op && "namespace" in op && !("value" in op);
}

function isSearch(op: Operation): op is SearchOperation {
  return "namespacePrefix" in op;
}

function isPut(op: Operation): op is PutOperation {
  return "value" in op && "namespace" in op && "key" in op;
}

function isListNamespaces(op: Operation): op is ListNamespacesOperation {
  return "matchConditions" in op || ("limit" in op && "offset" in op && !("namespacePrefix" in op));
}

/**
 * LangGraph.js's long-term memory (`BaseStore`) in a ctxstore server: namespaces of items,
 * `get`, `put`, `delete`, `search` (LangGraph's filters, limit and offset; with a `query` and an
 * `index` config, vector search ranked by the server), `listNamespaces` (prefix, suffix,
 * `maxDepth`, limit, offset) and `batch` — the Python `CtxstoreStore`'s layout, so either
 * language reads what the other wrote (the module's doc has the mapping).
 */
export class CtxstoreStore extends BaseStore {
  readonly client: Client;
  /** The store's name; its context (and vector index) is `lgs:<name>`. */
  readonly storeName: string;
  private readonly contextName: string;
  private readonly indexName: string;
  private readonly ownsClient: boolean;
  private readonly index: (CtxstoreIndexConfig & { fields: string[]; tokenized: Array<[string, string[] | "$"]> }) | undefined;
  private readonly values = new BlobCache(VALUE_CACHE_BYTES, VALUE_CACHE_BYTES / 16);
  private opened: Promise<void> | undefined;
  private indexed: Promise<void> | undefined;

  /** A store on `client` (shared: {@link close} leaves it open unless `ownsClient`). */
  constructor(client: Client, options: CtxstoreStoreOptions = {}) {
    super();
    const name = options.name ?? "default";
    if (typeof name !== "string" || name.length === 0) throw new RangeError("a store name is a non-empty string");
    const context = `${NAME_PREFIX}${name}`;
    if (utf8.encode(context).length > CONTEXT_NAME_BYTES_MAX || utf8.encode(name).length > 1024) {
      throw new RangeError(`a store name is at most ${CONTEXT_NAME_BYTES_MAX - NAME_PREFIX.length} bytes of UTF-8`);
    }
    this.client = client;
    this.storeName = name;
    this.contextName = context;
    this.indexName = vectorIndexNameOf(name);
    this.ownsClient = options.ownsClient ?? false;
    const index = options.index;
    if (index !== undefined) {
      if (!Number.isInteger(index.dims) || index.dims < 1 || index.dims > 4096) {
        throw new RangeError(`index.dims is 1 to 4096, not ${index.dims}`);
      }
      const embeddings: unknown = index.embeddings;
      if (typeof embeddings !== "object" || embeddings === null || !("embedDocuments" in embeddings) || !("embedQuery" in embeddings)) {
        throw new TypeError("index.embeddings is an Embeddings (embedDocuments and embedQuery)");
      }
      const distance = index.distanceType ?? "cosine";
      if (distance !== "cosine" && distance !== "inner_product" && distance !== "l2") {
        throw new RangeError(`index.distanceType is "cosine", "inner_product" or "l2", not ${JSON.stringify(distance)}`);
      }
      const fields = index.fields ?? ["$"];
      if (!Array.isArray(fields) || fields.some((f) => typeof f !== "string")) throw new TypeError("index.fields is an array of paths");
      this.index = {
        ...index,
        distanceType: distance,
        fields,
        tokenized: fields.map((path) => [path, path === "$" ? "$" : tokenizePath(path)]),
      };
    }
  }

  /** A store with its own client for `addr` (default CTXSTORE_ADDR, else 127.0.0.1:7411),
   * connected at its first call; {@link close} closes it. The other options are the client's. */
  static fromAddr(addr?: string | readonly string[], options: ClientOptions & Omit<CtxstoreStoreOptions, "ownsClient"> = {}): CtxstoreStore {
    const { name, index, ...clientOptions } = options;
    const storeOptions: CtxstoreStoreOptions = { ownsClient: true };
    if (name !== undefined) storeOptions.name = name;
    if (index !== undefined) storeOptions.index = index;
    return new CtxstoreStore(new Client(addr, clientOptions), storeOptions);
  }

  /** The index config (`dims`, `embeddings`, `fields`, `distanceType`), if the store has one. */
  get indexConfig(): CtxstoreIndexConfig | undefined {
    if (this.index === undefined) return undefined;
    const { tokenized: _tokenized, ...config } = this.index;
    return config;
  }

  /** The store's vector index name (`lgs:<name>`, or `lgs#` and a hash past 64 bytes), when it
   * has an index. */
  get vectorIndexName(): string | undefined {
    return this.index === undefined ? undefined : this.indexName;
  }

  /** Creates the store's vector index when it has an index config (VECTOR_INDEX_CREATE: the
   * existing one when its dimension and metric are these, else InvalidArgument). Writes and
   * searches do it on their own when this was not called. */
  override async start(): Promise<void> {
    await this.ensureIndex();
  }

  /** Closes the client if this store made it. */
  override async stop(): Promise<void> {
    await this.close();
  }

  /** Closes the client if this store made it. */
  async close(): Promise<void> {
    if (this.ownsClient) await this.client.close();
  }

  private ensureIndex(force = false): Promise<void> {
    const index = this.index;
    if (index === undefined) return Promise.resolve();
    if (force || this.indexed === undefined) {
      const attempt = this.client
        .vectorIndexCreate(this.indexName, index.dims, { metric: index.distanceType ?? "cosine", efSearch: index.efSearch ?? 0 })
        .then(() => undefined);
      this.indexed = attempt;
      attempt.catch(() => {
        if (this.indexed === attempt) this.indexed = undefined;
      });
    }
    return this.indexed;
  }

  private ensureContext(force = false): Promise<void> {
    if (force || this.opened === undefined) {
      const attempt = this.client
        .openContext(this.contextName, { tags: { [TAG_STORE]: this.storeName, [TAG_FMT]: FMT }, getOrCreate: true })
        .then(() => undefined);
      this.opened = attempt;
      attempt.catch(() => {
        if (this.opened === attempt) this.opened = undefined;
      });
    }
    return this.opened;
  }

  /** LangGraph's batch: every read sees the store as it was before the batch's writes (as
   * InMemoryStore), the writes to one item the last of them. Results in the operations' order.
   * Everything is checked and embedded before anything is sent. */
  async batch<Op extends Operation[]>(operations: Op): Promise<OperationResults<Op>> {
    const results: unknown[] = new Array<unknown>(operations.length).fill(undefined);
    const writes = new Map<string, PutOperation>();
    const reads: Array<Promise<void>> = [];
    const gets: Array<[number, GetOperation]> = [];
    const searches: Array<[number, SearchOperation]> = [];
    const listings: Array<[number, ListNamespacesOperation]> = [];
    operations.forEach((op, position) => {
      if (isPut(op)) {
        if (op.value !== null) {
          validateNamespace(op.namespace);
          valueBytes(op.value); // refused before anything is sent
        } else validateNamespace(op.namespace, { allowEmpty: true, allowReservedRoot: true });
        itemPrefix(op.namespace, op.key);
        writes.set(toHex(itemPrefix(op.namespace, op.key)), op);
      } else if (isGet(op)) {
        validateNamespace(op.namespace, { allowEmpty: true, allowReservedRoot: true });
        gets.push([position, op]);
      } else if (isSearch(op)) {
        validateNamespace(op.namespacePrefix, { allowEmpty: true, allowReservedRoot: true });
        searches.push([position, op]);
      } else if (isListNamespaces(op)) {
        listings.push([position, op]);
      } else {
        throw new TypeError(`unknown store operation: ${JSON.stringify(op)}`);
      }
    });
    const puts = [...writes.values()].map((op) => this.plan(op));
    // Embed first: a failing embedding writes nothing.
    const queries = new Map<string, Float32Array>();
    if (this.index !== undefined) {
      const asked = [...new Set(searches.map(([, op]) => op.query).filter((q): q is string => typeof q === "string" && q !== ""))];
      const embedded = await Promise.all(asked.map((q) => this.index!.embeddings.embedQuery(q)));
      asked.forEach((q, i) => queries.set(q, this.vectorOf(embedded[i], `the embedding of the query ${JSON.stringify(q)}`)));
      await this.embed(puts);
    }
    if (gets.length > 0) {
      reads.push(
        this.getAll(gets.map(([, op]) => op)).then((items) => gets.forEach(([position], i) => void (results[position] = items[i]))),
      );
    }
    for (const [position, op] of searches) {
      const query = typeof op.query === "string" && op.query !== "" ? queries.get(op.query) : undefined;
      reads.push((query !== undefined ? this.vectorSearch(op, query) : this.search_(op)).then((items) => void (results[position] = items)));
    }
    for (const [position, op] of listings) reads.push(this.listNamespaces_(op).then((namespaces) => void (results[position] = namespaces)));
    await Promise.all(reads);
    if (puts.length > 0) await this.write(puts);
    return results as OperationResults<Op>;
  }

  // -- puts and deletes -------------------------------------------------------------------------

  private plan(op: PutOperation): PlannedPut {
    const prefix = itemPrefix(op.namespace, op.key);
    if (op.value === null) return { op, prefix, value: new Uint8Array(0), texts: [], vectors: [] };
    const value = valueBytes(op.value);
    const texts: string[] = [];
    if (this.index !== undefined && op.index !== false) {
      const paths: Array<string | string[]> =
        op.index === undefined || op.index === null ? this.index.tokenized.map(([, tokens]) => tokens) : op.index.map((path) => (path === "$" ? "$" : tokenizePath(path)));
      const data = plainJson(op.value);
      for (const path of paths) texts.push(...getTextAtPath(data, path));
      if (texts.length > VECTORS_PER_ITEM_MAX) {
        throw new RangeError(
          `item ${JSON.stringify(op.key)} in ${JSON.stringify(op.namespace)} has ${texts.length} texts to embed; ctxstore keeps at most ${VECTORS_PER_ITEM_MAX} vectors per item (nothing was written)`,
        );
      }
    }
    return { op, prefix, value, texts, vectors: [] };
  }

  private vectorOf(embedding: unknown, what: string): Float32Array {
    const dims = this.index!.dims;
    if (!Array.isArray(embedding) && !(embedding instanceof Float32Array)) throw new TypeError(`${what} is not an array of numbers`);
    const vector = Float32Array.from(embedding as ArrayLike<number>);
    if (vector.length !== dims) throw new RangeError(`${what} has ${vector.length} dimensions; the store's index has ${dims} (index.dims)`);
    for (let i = 0; i < vector.length; i++) {
      if (!Number.isFinite(vector[i])) throw new RangeError(`${what}: component ${i} is ${vector[i]}, not a finite number`);
    }
    return vector;
  }

  /** Each put's vectors: its texts embedded, each distinct text once (`embedDocuments`). */
  private async embed(puts: PlannedPut[]): Promise<void> {
    const distinct = [...new Set(puts.flatMap((put) => put.texts))];
    if (distinct.length === 0) return;
    const embedded = await this.index!.embeddings.embedDocuments(distinct);
    if (!Array.isArray(embedded) || embedded.length !== distinct.length) {
      throw new RangeError(`embedDocuments of ${distinct.length} texts answered ${Array.isArray(embedded) ? embedded.length : "no"} embeddings`);
    }
    const byText = new Map(distinct.map((text, i) => [text, this.vectorOf(embedded[i], `the embedding of ${JSON.stringify(text.slice(0, 80))}`)]));
    for (const put of puts) put.vectors = put.texts.map((text) => byText.get(text)!);
  }

  /** Per put: its creation time if absent, then its value (with its vectors), update time and
   * namespace entry in one durable record; per delete, one KV_DELETE of its entries; all
   * pipelined. A context (or index) missing is made once and the writes sent again. */
  private async write(puts: PlannedPut[]): Promise<void> {
    const send = (): Array<Promise<void>> => {
      const requests: Array<Promise<void>> = [];
      for (const put of puts) {
        const keys = [CREATED, UPDATED, VALUE].map((suffix) => concatBytes(put.prefix, suffix));
        if (put.op.value === null) {
          requests.push(this.client.kvDelete(this.contextName, keys));
          continue;
        }
        const now = nowBytes();
        const namespaceKey = concatBytes(NAMESPACES, namespaceBytes(put.op.namespace));
        requests.push(this.client.kvPut(this.contextName, new Map([[keys[0]!, now]]), { ifAbsent: true }));
        if (put.vectors.length > 0) {
          requests.push(
            this.client.kvPutVectors(
              this.contextName,
              [
                { key: keys[2]!, value: put.value, vectors: put.vectors },
                { key: keys[1]!, value: now },
                { key: namespaceKey, value: new Uint8Array(0) },
              ],
              this.indexName,
            ),
          );
        } else {
          requests.push(this.client.kvPut(this.contextName, new Map([[keys[2]!, put.value], [keys[1]!, now], [namespaceKey, new Uint8Array(0)]])));
        }
      }
      return requests;
    };
    const vectors = puts.some((put) => put.vectors.length > 0);
    for (const again of [false, true]) {
      await Promise.all([this.ensureContext(again), vectors ? this.ensureIndex(again) : undefined]);
      const outcomes = await Promise.allSettled(send());
      const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === "rejected");
      if (failed === undefined) return;
      if (!(failed.reason instanceof NotFound) || again) throw failed.reason;
      // the context (or the index) went between the open and the writes: once more
    }
  }

  // -- reads -------------------------------------------------------------------------------------

  /** The items of `gets`: their three entries each, read from one snapshot per 128 keys
   * (KV_GET_MANY), pipelined; an item without its value is null. */
  private async getAll(gets: GetOperation[]): Promise<Array<Item | null>> {
    const keys: Uint8Array[] = [];
    for (const op of gets) {
      const prefix = itemPrefix(op.namespace, op.key);
      for (const suffix of [VALUE, CREATED, UPDATED]) keys.push(concatBytes(prefix, suffix));
    }
    const groups: Uint8Array[][] = [];
    // An item's three entries stay in one group (one snapshot): 126 keys a request.
    for (let i = 0; i < keys.length; i += GET_MANY_KEYS - (GET_MANY_KEYS % 3)) groups.push(keys.slice(i, i + GET_MANY_KEYS - (GET_MANY_KEYS % 3)));
    let values: Array<KvValue | undefined>;
    try {
      values = (await Promise.all(groups.map((group) => this.client.kvGetMany(this.contextName, group)))).flat();
    } catch (error) {
      if (error instanceof NotFound) return gets.map(() => null); // no item was ever put in this store
      throw error;
    }
    return gets.map((op, i) => {
      const [value, created, updated] = [values[3 * i], values[3 * i + 1], values[3 * i + 2]];
      if (value === undefined) return null;
      const updatedAt = timeOf(updated?.value, new Date());
      return {
        value: JSON.parse(utf8Strict.decode(value.value)) as Record<string, unknown>,
        key: op.key,
        namespace: [...op.namespace],
        createdAt: timeOf(created?.value, updatedAt),
        updatedAt,
      };
    });
  }

  /** The blobs of `hashes` (values and times are immutable under their hash): from the cache,
   * the others fetched pipelined; a hash no longer stored is left out. */
  private async blobs(hashes: Iterable<Uint8Array>): Promise<Map<string, Uint8Array>> {
    const found = new Map<string, Uint8Array>();
    const missing = new Map<string, Uint8Array>();
    for (const hash of hashes) {
      const hex = toHex(hash);
      const cached = this.values.get(hex);
      if (cached !== undefined) found.set(hex, cached);
      else missing.set(hex, hash);
    }
    await Promise.all(
      [...missing].map(async ([hex, hash]) => {
        try {
          const data = await this.client.getBlob(hash);
          this.values.set(hex, data);
          found.set(hex, data);
        } catch (error) {
          if (!(error instanceof NotFound)) throw error; // else: overwritten and collected meanwhile
        }
      }),
    );
    return found;
  }

  /** Items under the namespace prefix whose value passes the filter, in namespace then key
   * order, `offset` skipped, at most `limit`: KV_LIST pages of the prefix's range (sized to what
   * is asked), each page's values fetched pipelined. */
  private async search_(op: SearchOperation): Promise<SearchItem[]> {
    const limit = op.limit ?? 10;
    const offset = op.offset ?? 0;
    if (limit <= 0) return [];
    const filter = this.filterOf(op.filter);
    const prefix = concatBytes(ITEMS, labelBytes(op.namespacePrefix));
    let size = Math.min(PAGE, Math.max(3 * (offset + limit), 3) + 3);
    let after: Uint8Array = new Uint8Array(0);
    const matched: SearchItem[] = [];
    let skipped = 0;
    for (;;) {
      let page;
      try {
        page = await this.client.kvList(this.contextName, { prefix, after, limit: size });
      } catch (error) {
        if (error instanceof NotFound) return []; // no item was ever put in this store
        throw error;
      }
      let entries = page.items;
      if (page.nextAfter !== undefined) {
        // An item cut by the page's end is read whole from the next page.
        const last = itemId(entries[entries.length - 1]!.key);
        while (entries.length > 0 && itemId(entries[entries.length - 1]!.key) === last) entries = entries.slice(0, -1);
        if (entries.length === 0) throw new Error(`a CtxstoreStore item has more than ${size} entries`);
        after = entries[entries.length - 1]!.key;
      }
      const items = listedItems(entries);
      const values = await this.blobs(items.flatMap((item) => [item.value, item.created, item.updated].filter((h): h is Uint8Array => h !== undefined)));
      for (const item of items) {
        const raw = values.get(toHex(item.value!));
        if (raw === undefined) continue;
        const value = JSON.parse(utf8Strict.decode(raw)) as Record<string, unknown>;
        if (!passes(value, filter)) continue;
        if (skipped < offset) {
          skipped++;
          continue;
        }
        const updatedAt = timeOf(item.updated && values.get(toHex(item.updated)), new Date());
        matched.push({
          namespace: item.namespace,
          key: item.key,
          value,
          createdAt: timeOf(item.created && values.get(toHex(item.created)), updatedAt),
          updatedAt,
        });
        if (matched.length >= limit) break;
      }
      if (matched.length >= limit || page.nextAfter === undefined) return matched;
      size = PAGE;
    }
  }

  private filterOf(filter: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
    if (filter === undefined || filter === null) return undefined;
    if (!isObject(filter)) throw new TypeError("a search filter is an object ({ field: condition })");
    return Object.keys(filter).length > 0 ? filter : undefined;
  }

  /** The `limit` items nearest `query` under the namespace prefix that pass the filter, after
   * `offset`, best first with their `score`: one VECTOR_SEARCH (the server evaluates the filter),
   * then the hits' values (by hash, cached) and times (KV_GET_MANY), pipelined. */
  private async vectorSearch(op: SearchOperation, query: Float32Array): Promise<SearchItem[]> {
    const limit = op.limit ?? 10;
    const offset = op.offset ?? 0;
    if (limit <= 0) return [];
    if (!Number.isInteger(limit) || !Number.isInteger(offset) || offset < 0 || limit + offset > SEARCH_MAX) {
      throw new RangeError(`a vector search answers at most ${SEARCH_MAX} items: limit + offset is at most ${SEARCH_MAX} (limit ${limit}, offset ${offset})`);
    }
    const filter = this.filterOf(op.filter);
    const prefix = concatBytes(ITEMS, labelBytes(op.namespacePrefix));
    if (prefix.length > VECTOR_PREFIX_BYTES_MAX) return []; // no item key is that long
    const search = () =>
      this.client.vectorSearch(this.contextName, this.indexName, query, filter === undefined ? { k: limit, offset, prefix } : { k: limit, offset, prefix, filter });
    let found;
    await this.ensureIndex();
    try {
      found = await search();
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
      // An unknown context (nothing was ever put) or index (dropped meanwhile): the index again.
      await this.ensureIndex(true);
      try {
        found = await search();
      } catch (again) {
        if (again instanceof NotFound) return [];
        throw again;
      }
    }
    const hits = found.hits.filter((hit) => endsWith(hit.key, VALUE) && startsWith(hit.key, ITEMS));
    const timeKeys = hits.flatMap((hit) => {
      const base = hit.key.subarray(0, hit.key.length - VALUE.length);
      return [concatBytes(base, CREATED), concatBytes(base, UPDATED)];
    });
    const [values, times] = await Promise.all([
      this.blobs(hits.map((hit) => hit.valueHash)),
      timeKeys.length === 0 ? Promise.resolve([]) : this.timesOf(timeKeys),
    ]);
    const items: SearchItem[] = [];
    hits.forEach((hit, i) => {
      const raw = values.get(toHex(hit.valueHash));
      if (raw === undefined) return; // overwritten and collected since the search
      const [namespace, key] = splitEntry(hit.key);
      const updatedAt = timeOf(times[2 * i + 1]?.value, new Date());
      items.push({
        namespace,
        key,
        value: JSON.parse(utf8Strict.decode(raw)) as Record<string, unknown>,
        createdAt: timeOf(times[2 * i]?.value, updatedAt),
        updatedAt,
        score: hit.score,
      });
    });
    return items;
  }

  private async timesOf(keys: Uint8Array[]): Promise<Array<KvValue | undefined>> {
    const groups: Uint8Array[][] = [];
    for (let i = 0; i < keys.length; i += GET_MANY_KEYS) groups.push(keys.slice(i, i + GET_MANY_KEYS));
    try {
      return (await Promise.all(groups.map((group) => this.client.kvGetMany(this.contextName, group)))).flat();
    } catch (error) {
      if (error instanceof NotFound) return keys.map(() => undefined);
      throw error;
    }
  }

  /** The namespaces holding items that meet every condition, truncated to `maxDepth` (each
   * once), in order, `offset` skipped, at most `limit`: the `n/` entries scanned from the
   * longest literal prefix of the conditions, each page's namespaces checked for an item
   * pipelined. */
  private async listNamespaces_(op: ListNamespacesOperation): Promise<string[][]> {
    const limit = op.limit ?? 100;
    const offset = op.offset ?? 0;
    if (limit <= 0) return [];
    const conditions = op.matchConditions ?? [];
    const literal: string[] = [];
    const first = conditions.find((c) => c.matchType === "prefix");
    if (first !== undefined) {
      for (const label of first.path) {
        if (label === "*") break;
        literal.push(label);
      }
    }
    const prefix = concatBytes(NAMESPACES, labelBytes(literal));
    let after: Uint8Array = new Uint8Array(0);
    const found: string[][] = [];
    let skipped = 0;
    let previous: string | undefined; // the last namespace shown or skipped
    for (;;) {
      let page;
      try {
        page = await this.client.kvList(this.contextName, { prefix, after, limit: PAGE });
      } catch (error) {
        if (error instanceof NotFound) return [];
        throw error;
      }
      const candidates = page.items.map((entry) => namespaceOfEntry(entry.key)).filter((ns) => conditions.every((c) => fits(c, ns)));
      const held = await Promise.all(
        candidates.map((ns) => this.client.kvList(this.contextName, { prefix: concatBytes(ITEMS, namespaceBytes(ns)), limit: 1 })),
      );
      for (const [i, ns] of candidates.entries()) {
        if (held[i]!.items.length === 0) continue; // every item of it was deleted
        const shown = op.maxDepth === undefined ? ns : ns.slice(0, op.maxDepth);
        const id = JSON.stringify(shown);
        if (id === previous) continue; // truncated to one already counted (the entries are sorted)
        previous = id;
        if (skipped < offset) {
          skipped++;
          continue;
        }
        found.push(shown);
        if (found.length >= limit) return found;
      }
      if (page.nextAfter === undefined) return found;
      after = page.nextAfter;
    }
  }
}

/** The items of a listing's entries (their entries' hashes), in order; an item without its
 * value entry (a put or a delete half done) is left out. */
function listedItems(entries: readonly KvItem[]): ListedItem[] {
  const items = new Map<string, ListedItem>();
  for (const entry of entries) {
    const id = itemId(entry.key);
    let item = items.get(id);
    if (item === undefined) {
      const [namespace, key] = splitEntry(entry.key);
      item = { namespace, key };
      items.set(id, item);
    }
    const suffix = entry.key.subarray(entry.key.length - 2);
    if (suffix[1] === VALUE[1]) item.value = entry.valueHash;
    else if (suffix[1] === CREATED[1]) item.created = entry.valueHash;
    else if (suffix[1] === UPDATED[1]) item.updated = entry.valueHash;
  }
  return [...items.values()].filter((item) => item.value !== undefined);
}
