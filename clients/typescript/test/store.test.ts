/**
 * CtxstoreStore, LangGraph.js's BaseStore on ctxstore (decisions 0022 and 0033), against a real
 * server: get, put, delete, search, listNamespaces and batch with LangGraph's semantics (the
 * cases of LangGraph's PostgresStore tests, `libs/checkpoint-postgres/tests/test_store.py`,
 * ported, and a sequence compared with InMemoryStore), the key layout the Python store shares,
 * and vector search (protocol version 6) with LangGraph's fake `CharacterEmbeddings`: the vector
 * cases of the same PostgresStore tests, for each distance type, and exactly `limit` items under
 * a selective filter.
 */

import { InMemoryStore, InvalidNamespaceError, type Item, type SearchItem } from "@langchain/langgraph-checkpoint";
import { afterAll, beforeAll, describe, expect, test } from "vitest";

import { Client, NotFound } from "../src/index.js";
import { CtxstoreStore, getTextAtPath, tokenizePath, type CtxstoreIndexConfig } from "../src/langgraph.js";
import type { VectorMetricName } from "../src/types.js";
import { CharacterEmbeddings } from "./embeddings.js";
import { Server } from "./server.js";

let server: Server;
let client: Client;
let counter = 0;

beforeAll(async () => {
  server = await Server.start();
  client = await Client.connect(server.addr);
});

afterAll(async () => {
  await client?.close();
  await server?.stop();
});

/** A fresh store (its own context, and index when `index` is given), removed afterwards. */
async function withStore(index: CtxstoreIndexConfig | undefined, body: (store: CtxstoreStore) => Promise<void>): Promise<void> {
  const name = `t${++counter}-${Math.floor(Math.random() * 1e9)}`;
  const store = new CtxstoreStore(client, index === undefined ? { name } : { name, index });
  await store.start();
  try {
    await body(store);
  } finally {
    if (store.vectorIndexName !== undefined) await client.vectorIndexDrop(store.vectorIndexName).catch(() => undefined);
    await client.deleteContext(`lgs:${name}`).catch((e: unknown) => {
      if (!(e instanceof NotFound)) throw e;
    });
  }
}

const plain = (body: (store: CtxstoreStore) => Promise<void>) => withStore(undefined, body);
const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);
const decode = (data: Uint8Array | undefined): string | undefined => (data === undefined ? undefined : new TextDecoder().decode(data));
const namespaces = (items: Item[]): Set<string> => new Set(items.map((item) => JSON.stringify(item.namespace)));
const set = (...values: string[][]): Set<string> => new Set(values.map((v) => JSON.stringify(v)));
/** Namespaces in this store's order: label by label (ASCII labels here), a namespace before its
 * children. */
const compareNamespaces = (a: string[], b: string[]): number => {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i]! < b[i]! ? -1 : 1;
  return a.length - b.length;
};

describe("LangGraph's PostgresStore cases", () => {
  test("batch order: reads see the store before the batch's writes", () =>
    plain(async (store) => {
      await store.put(["test", "foo"], "key1", { data: "value1" });
      await store.put(["test", "bar"], "key2", { data: "value2" });
      const results: unknown[] = await store.batch([
        { namespace: ["test", "foo"], key: "key1" },
        { namespace: ["test", "bar"], key: "key2", value: { data: "value2" } },
        { namespacePrefix: ["test"], filter: { data: "value1" }, limit: 10, offset: 0 },
        { matchConditions: undefined, maxDepth: undefined, limit: 10, offset: 0 },
        { namespace: ["test"], key: "key3" },
      ]);
      expect(results).toHaveLength(5);
      expect(results[0]).toMatchObject({ value: { data: "value1" }, key: "key1", namespace: ["test", "foo"] });
      expect(results[1]).toBeUndefined();
      expect(results[2]).toHaveLength(1);
      expect((results[3] as string[][]).length).toBeGreaterThan(0);
      expect(results[4]).toBeNull();

      const reordered: unknown[] = await store.batch([
        { namespacePrefix: ["test"], filter: undefined, limit: 5, offset: 0 },
        { namespace: ["test", "bar"], key: "key2" },
        { matchConditions: undefined, maxDepth: undefined, limit: 5, offset: 0 },
        { namespace: ["test"], key: "key3", value: { data: "value3" } },
        { namespace: ["test", "foo"], key: "key1" },
        { namespace: ["test"], key: "key3" }, // the put of this batch is not seen yet
      ]);
      expect((reordered[0] as SearchItem[]).length).toBeGreaterThanOrEqual(2);
      expect(reordered[1]).toMatchObject({ value: { data: "value2" }, key: "key2" });
      expect(reordered[3]).toBeUndefined();
      expect(reordered[4]).toMatchObject({ value: { data: "value1" }, key: "key1" });
      expect(reordered[5]).toBeNull();
      expect((await store.get(["test"], "key3"))?.value).toEqual({ data: "value3" });
    }));

  test("batch gets, puts and deletes", () =>
    plain(async (store) => {
      await store.put(["test"], "key1", { data: "value1" });
      await store.put(["test"], "key2", { data: "value2" });
      const got = await store.batch([
        { namespace: ["test"], key: "key1" },
        { namespace: ["test"], key: "key2" },
        { namespace: ["test"], key: "key3" },
      ]);
      expect(got.map((item) => item?.key ?? null)).toEqual(["key1", "key2", null]);
      const put = await store.batch([
        { namespace: ["test"], key: "key1", value: { data: "value1" } },
        { namespace: ["test"], key: "key2", value: { data: "value2" } },
        { namespace: ["test"], key: "key2", value: null }, // the last write to an item wins
        { namespace: ["test"], key: "key3", value: null },
      ]);
      expect(put.every((result) => result === undefined)).toBe(true);
      expect((await store.get(["test"], "key1"))?.value).toEqual({ data: "value1" });
      expect(await store.get(["test"], "key2")).toBeNull();
      expect(await store.get(["test"], "key3")).toBeNull();
    }));

  test("batch searches and namespace listings", () =>
    plain(async (store) => {
      await store.put(["test", "foo"], "key1", { data: "value1", tag: "a" });
      await store.put(["test", "bar"], "key2", { data: "value2", tag: "a" });
      await store.put(["test", "baz"], "key3", { data: "value3", tag: "b" });
      const searched: unknown[] = await store.batch([
        { namespacePrefix: ["test"], filter: { tag: "a" }, limit: 10, offset: 0 },
        { namespacePrefix: ["test"], filter: undefined, limit: 2, offset: 0 },
        { namespacePrefix: ["test", "foo"], filter: undefined, limit: 10, offset: 0 },
      ]);
      const [tagged, two, foo] = searched as [SearchItem[], SearchItem[], SearchItem[]];
      expect(tagged.map((item) => item.key)).toEqual(["key2", "key1"]); // namespace order: bar, foo
      expect(two).toHaveLength(2);
      expect(foo.map((item) => item.namespace)).toEqual([["test", "foo"]]);

      for (const [ns, key] of [[["test", "documents", "public"], "doc1"], [["test", "documents", "private"], "doc2"], [["test", "images", "public"], "img1"], [["prod", "documents", "public"], "doc3"]] as const) {
        await store.put([...ns], key, { content: key });
      }
      const listedAll: unknown[] = await store.batch([
        { matchConditions: undefined, maxDepth: undefined, limit: 10, offset: 0 },
        { matchConditions: undefined, maxDepth: 2, limit: 10, offset: 0 },
        { matchConditions: [{ matchType: "suffix", path: ["public"] }], maxDepth: undefined, limit: 10, offset: 0 },
      ]);
      const [all, depth2, pub] = listedAll as [string[][], string[][], string[][]];
      expect(all).toHaveLength(7);
      expect(depth2.every((ns) => ns.length <= 2)).toBe(true);
      expect(depth2).toEqual([["prod", "documents"], ["test", "bar"], ["test", "baz"], ["test", "documents"], ["test", "foo"], ["test", "images"]]);
      expect(pub).toEqual([["prod", "documents", "public"], ["test", "documents", "public"], ["test", "images", "public"]]);
    }));

  test("basic operations: put, get, update, delete", () =>
    plain(async (store) => {
      const namespace = ["test", "documents"];
      await store.put(namespace, "doc1", { title: "Test Document", content: "Hello, World!" });
      const item = (await store.get(namespace, "doc1"))!;
      expect(item).toMatchObject({ namespace, key: "doc1", value: { title: "Test Document", content: "Hello, World!" } });
      expect(item.createdAt).toBeInstanceOf(Date);
      expect(item.createdAt.getTime()).toBe(item.updatedAt.getTime());
      await new Promise((resolve) => setTimeout(resolve, 5));
      await store.put(namespace, "doc1", { title: "Updated Document", content: "Hello, Updated!" });
      const updated = (await store.get(namespace, "doc1"))!;
      expect(updated.value).toEqual({ title: "Updated Document", content: "Hello, Updated!" });
      expect(updated.updatedAt.getTime()).toBeGreaterThan(item.updatedAt.getTime());
      expect(updated.createdAt.getTime()).toBe(item.createdAt.getTime()); // kept by the update
      expect(await store.get(["test", "other_documents"], "doc1")).toBeNull();
      await store.delete(namespace, "doc1");
      expect(await store.get(namespace, "doc1")).toBeNull();
    }));

  test("listNamespaces: prefix, suffix, depth, pages", () =>
    plain(async (store) => {
      const all = [
        ["test", "documents", "public"],
        ["test", "documents", "private"],
        ["test", "images", "public"],
        ["test", "images", "private"],
        ["prod", "documents", "public"],
        ["prod", "documents", "private"],
      ];
      for (const ns of all) await store.put(ns, "dummy", { content: "dummy" });
      expect(await store.listNamespaces()).toHaveLength(all.length);
      const test_ = await store.listNamespaces({ prefix: ["test"] });
      expect(test_).toHaveLength(4);
      expect(test_.every((ns) => ns[0] === "test")).toBe(true);
      const pub = await store.listNamespaces({ suffix: ["public"] });
      expect(pub).toHaveLength(3);
      expect(pub.every((ns) => ns.at(-1) === "public")).toBe(true);
      expect((await store.listNamespaces({ maxDepth: 2 })).every((ns) => ns.length <= 2)).toBe(true);
      expect(await store.listNamespaces({ limit: 3 })).toHaveLength(3);
      expect(await store.listNamespaces({ limit: 3, offset: 2 })).toEqual((await store.listNamespaces()).slice(2, 5));
      for (const ns of all) await store.delete(ns, "dummy");
      expect(await store.listNamespaces()).toEqual([]); // a namespace whose items all went is not listed
    }));

  test("search and listNamespaces stop at namespace segment boundaries", () =>
    plain(async (store) => {
      for (const ns of [["foo"], ["foo", "child"], ["foo", "child", "deep"], ["foobar"], ["foobar", "baz"], ["foo2"]]) await store.put(ns, "k", { v: 1 });
      const under = async (prefix: string[]) => namespaces(await store.search(prefix, { limit: 100 }));
      expect(await under(["foo"])).toEqual(set(["foo"], ["foo", "child"], ["foo", "child", "deep"]));
      expect(await under(["foobar"])).toEqual(set(["foobar"], ["foobar", "baz"]));
      expect(await under(["foo", "child"])).toEqual(set(["foo", "child"], ["foo", "child", "deep"]));
      expect(await under(["foo2"])).toEqual(set(["foo2"]));
      expect(await under(["fo"])).toEqual(set());
      expect(await under([])).toEqual(set(["foo"], ["foo", "child"], ["foo", "child", "deep"], ["foobar"], ["foobar", "baz"], ["foo2"]));
      for (const ns of [["user_1"], ["user_1", "child"], ["userX1"], ["a%b"], ["axxb"]]) await store.put(ns, "k", { v: 1 });
      expect(await under(["user_1"])).toEqual(set(["user_1"], ["user_1", "child"]));
      expect(await under(["a%b"])).toEqual(set(["a%b"]));

      for (const ns of [["uid", "users", "alice"], ["uid", "users", "malice"], ["uid", "a", "b", "alice"]]) await store.put(ns, "k", { v: 1 });
      const listed = async (options: Parameters<CtxstoreStore["listNamespaces"]>[0]) => new Set((await store.listNamespaces({ ...options, limit: 100 })).map((ns) => JSON.stringify(ns)));
      expect(await listed({ prefix: ["foo"] })).toEqual(set(["foo"], ["foo", "child"], ["foo", "child", "deep"]));
      expect(await listed({ suffix: ["alice"] })).toEqual(set(["uid", "users", "alice"], ["uid", "a", "b", "alice"]));
      expect(await listed({ prefix: ["uid", "*", "alice"] })).toEqual(set(["uid", "users", "alice"]));
      expect(await listed({ prefix: ["uid"] })).toEqual(set(["uid", "users", "alice"], ["uid", "users", "malice"], ["uid", "a", "b", "alice"]));
    }));

  test("search: namespaces, filters, pages", () =>
    plain(async (store) => {
      const data: Array<[string[], string, Record<string, unknown>]> = [
        [["test", "docs"], "doc1", { title: "First Doc", author: "Alice", tags: ["important"], score: 4.5 }],
        [["test", "docs"], "doc2", { title: "Second Doc", author: "Bob", tags: ["draft"], score: 3 }],
        [["test", "images"], "img1", { title: "Image 1", author: "Alice", tags: ["final"], meta: { w: 2 } }],
      ];
      for (const [ns, key, value] of data) await store.put(ns, key, value);
      expect(await store.search(["test"])).toHaveLength(3);
      const docs = await store.search(["test", "docs"]);
      expect(docs.map((item) => item.key)).toEqual(["doc1", "doc2"]);
      expect(docs.every((item) => item.score === undefined)).toBe(true);
      const alice = await store.search(["test"], { filter: { author: "Alice" } });
      expect(alice.map((item) => item.key)).toEqual(["doc1", "img1"]);
      expect(await store.search(["test"], { limit: 2 })).toHaveLength(2);
      expect((await store.search(["test"], { offset: 2 })).map((item) => item.key)).toEqual(["img1"]);
      const keys = async (filter: Record<string, unknown>) => (await store.search(["test"], { filter })).map((item) => item.key);
      expect(await keys({ score: { $gt: 3.2 } })).toEqual(["doc1"]);
      expect(await keys({ score: { $gte: 3, $lt: 4 } })).toEqual(["doc2"]);
      expect(await keys({ author: { $ne: "Alice" } })).toEqual(["doc2"]);
      expect(await keys({ tags: ["draft"] })).toEqual(["doc2"]);
      expect(await keys({ meta: { w: 2 } })).toEqual(["img1"]);
      expect(await keys({ author: "Alice", score: { $eq: 4.5 } })).toEqual(["doc1"]);
      await expect(store.search(["test"], { filter: { score: { $foo: 1 } } })).rejects.toThrow(/unsupported filter operator/);
      // A query on a store without an index filters without ranking.
      expect((await store.search(["test"], { query: "anything" })).map((item) => item.key)).toEqual(["doc1", "doc2", "img1"]);
    }));

  test("non-ASCII namespaces, keys and values; keys with NUL and 0x01", () =>
    plain(async (store) => {
      const ns = ["用户", "mémoires"];
      for (const key of ["1", "a\u0000b", "a\u0001b", "a", "ab", "日本"]) await store.put(ns, key, { text: `这是 ${key}` });
      expect((await store.get(ns, "a\u0000b"))?.value).toEqual({ text: "这是 a\u0000b" });
      // byte order of the escaped keys: "1" < "a" < "a\u0000b" < "a\u0001b" < "ab" < "日本"
      expect((await store.search(["用户"])).map((item) => item.key)).toEqual(["1", "a", "a\u0000b", "a\u0001b", "ab", "日本"]);
      expect(await store.listNamespaces({ prefix: ["用户"] })).toEqual([ns]);
    }));

  test("refused before anything is written: bad namespaces, values that are not objects, keys too long", () =>
    plain(async (store) => {
      await expect(store.put([], "k", { a: 1 })).rejects.toBeInstanceOf(InvalidNamespaceError);
      await expect(store.put(["a.b"], "k", { a: 1 })).rejects.toBeInstanceOf(InvalidNamespaceError);
      await expect(store.put(["langgraph"], "k", { a: 1 })).rejects.toBeInstanceOf(InvalidNamespaceError);
      await expect(store.batch([{ namespace: ["ok"], key: "k", value: [1, 2] as unknown as Record<string, unknown> }])).rejects.toThrow(TypeError);
      await expect(store.batch([{ namespace: ["ok"], key: "k", value: { big: 1n } }])).rejects.toThrow(TypeError);
      await expect(store.put(["ok"], "k".repeat(250), { a: 1 })).rejects.toThrow(/at most 256/);
      await expect(
        store.batch([
          { namespace: ["ok"], key: "first", value: { a: 1 } },
          { namespace: ["ok"], key: "k".repeat(300), value: { a: 1 } },
        ]),
      ).rejects.toThrow(RangeError);
      expect(await store.get(["ok"], "first")).toBeNull();
      expect(() => new CtxstoreStore(client, { name: "" })).toThrow(RangeError);
      expect(() => new CtxstoreStore(client, { name: "n".repeat(300) })).toThrow(RangeError);
      // The index of a store whose name is long: as the Python store names it.
      expect(new CtxstoreStore(client, { name: "n".repeat(60), index: { dims: 4, embeddings: new CharacterEmbeddings(4) } }).vectorIndexName).toBe(`lgs:${"n".repeat(60)}`);
      expect(new CtxstoreStore(client, { name: "n".repeat(61), index: { dims: 4, embeddings: new CharacterEmbeddings(4) } }).vectorIndexName).toBe(
        "lgs#27767efd40eced02105e8eaafd435bd12dd6d5c9d1d8f84283614d1564c5",
      );
      expect(() => new CtxstoreStore(client, { index: { dims: 0, embeddings: new CharacterEmbeddings(4) } })).toThrow(RangeError);
      expect(() => new CtxstoreStore(client, { index: { dims: 4, embeddings: new CharacterEmbeddings(4), distanceType: "hamming" as VectorMetricName } })).toThrow(RangeError);
    }));
});

describe("the layout the Python store shares (decision 0022)", () => {
  test("three entries an item, canonical JSON, ISO times, the namespace registry", () =>
    plain(async (store) => {
      await store.put(["users", "u1"], "k\u0000\u0001", { z: 1, a: [1.5, 1e-7, true, null], "é": "ü", nested: { b: 2, a: 1 } });
      const context = `lgs:${store.storeName}`;
      const info = await client.contextInfo(context);
      expect(info.tags).toEqual({ "lg.store": store.storeName, "lg.fmt": "1" });
      const base = "i/users\u0000u1\u0000\u0000k\u0001\u0001\u0001\u0002";
      const entries = (await client.kvList(context)).items.map((item) => decode(item.key));
      expect(entries).toEqual([`${base}\u0000c`, `${base}\u0000u`, `${base}\u0000v`, "n/users\u0000u1\u0000\u0000"]);
      expect(decode(await client.kvGet(context, utf8(`${base}\u0000v`)))).toBe('{"a":[1.5,1e-07,true,null],"nested":{"a":1,"b":2},"z":1,"é":"ü"}');
      const created = decode(await client.kvGet(context, utf8(`${base}\u0000c`)))!;
      expect(created).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$/);
      expect(decode(await client.kvGet(context, utf8(`${base}\u0000u`)))).toBe(created);
      expect(await client.kvGet(context, utf8("n/users\u0000u1\u0000\u0000"))).toEqual(new Uint8Array(0));
    }));

  test("items written as the Python store writes them read back, times with microseconds", () =>
    plain(async (store) => {
      await store.put(["seed"], "x", { s: 1 }); // the context
      const context = `lgs:${store.storeName}`;
      const base = "i/py\u0000\u0000item";
      await client.kvPut(
        context,
        new Map([
          [utf8(`${base}\u0000v`), utf8('{"from":"python","n":2}')],
          [utf8(`${base}\u0000c`), utf8("2026-12-01T10:00:00.123456+00:00")],
          [utf8(`${base}\u0000u`), utf8("2026-12-02T11:30:00+00:00")],
          [utf8("n/py\u0000\u0000"), new Uint8Array(0)],
        ]),
      );
      const item = (await store.get(["py"], "item"))!;
      expect(item.value).toEqual({ from: "python", n: 2 });
      expect(item.createdAt.toISOString()).toBe("2026-12-01T10:00:00.123Z");
      expect(item.updatedAt.toISOString()).toBe("2026-12-02T11:30:00.000Z");
      expect((await store.search(["py"]))[0]?.updatedAt.toISOString()).toBe("2026-12-02T11:30:00.000Z");
      expect(await store.listNamespaces()).toEqual([["py"], ["seed"]]);
    }));
});

test("a sequence of operations answers as InMemoryStore does (in this store's order)", () =>
  plain(async (store) => {
    const memory = new InMemoryStore();
    let seed = 7;
    const rand = (n: number) => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed % n;
    };
    const spaces = [["a"], ["a", "b"], ["a", "b", "c"], ["b"], ["b", "a"], ["c", "x", "y"]];
    const sortItems = (items: Item[]) =>
      [...items].sort((x, y) => compareNamespaces(x.namespace, y.namespace) || (x.key < y.key ? -1 : x.key > y.key ? 1 : 0)).map((i) => [i.namespace, i.key, i.value]);
    for (let step = 0; step < 200; step++) {
      const ns = spaces[rand(spaces.length)]!;
      const key = `k${rand(6)}`;
      const action = rand(10);
      if (action < 6) {
        const value = { n: rand(5), tag: ["x", "y", "z"][rand(3)]!, deep: { v: rand(2) } };
        await store.put(ns, key, value);
        await memory.put(ns, key, value);
      } else if (action < 8) {
        await store.delete(ns, key);
        await memory.delete(ns, key);
      } else {
        expect((await store.get(ns, key))?.value ?? null).toEqual((await memory.get(ns, key))?.value ?? null);
      }
      if (step % 20 === 19) {
        for (const prefix of [[], ["a"], ["a", "b"], ["b"], ["c"]]) {
          for (const filter of [undefined, { tag: "x" }, { n: { $gte: 2 } }, { n: { $lt: 3 }, tag: { $ne: "y" } }]) {
            const ours = await store.search(prefix, { filter, limit: 1000 });
            const theirs = await memory.search(prefix, { filter, limit: 1000 });
            expect(sortItems(ours)).toEqual(sortItems(theirs));
            // This store's order: namespace, then key, by bytes.
            expect(ours.map((i) => [i.namespace, i.key])).toEqual(sortItems(ours).map((i) => i.slice(0, 2)));
          }
        }
        // InMemoryStore lists namespaces whose items were all deleted; this store does not.
        const live = new Set((await memory.search([], { limit: 1000 })).map((i) => JSON.stringify(i.namespace)));
        const listed = await store.listNamespaces({ limit: 1000 });
        expect(new Set(listed.map((ns) => JSON.stringify(ns)))).toEqual(live);
        expect(listed).toEqual([...listed].sort(compareNamespaces));
        const truncated = [...new Set([...live].map((ns) => JSON.parse(ns) as string[]).filter((ns) => ns[0] === "a").map((ns) => JSON.stringify(ns.slice(0, 2))))];
        expect(await store.listNamespaces({ prefix: ["a"], maxDepth: 2, limit: 1000 })).toEqual(truncated.map((ns) => JSON.parse(ns) as string[]).sort(compareNamespaces));
      }
    }
  }));

describe("texts to embed: LangGraph's get_text_at_path (Python)", () => {
  test("paths", () => {
    const doc = { a: { b: "x", n: 2, t: true, f: 1.5 }, list: [{ c: "1" }, { c: "2" }, { d: 3 }], s: "str", arr: ["p", "q"] };
    expect(tokenizePath("a.b")).toEqual(["a", "b"]);
    expect(tokenizePath("list[*].c")).toEqual(["list", "[*]", "c"]);
    expect(tokenizePath("{a.b,s}")).toEqual(["{a.b,s}"]);
    expect(getTextAtPath(doc, "a.b")).toEqual(["x"]);
    expect(getTextAtPath(doc, "a.n")).toEqual(["2"]);
    expect(getTextAtPath(doc, "a.t")).toEqual(["True"]);
    expect(getTextAtPath(doc, "a.f")).toEqual(["1.5"]);
    expect(getTextAtPath(doc, "list[*].c")).toEqual(["1", "2"]);
    expect(getTextAtPath(doc, "list[-1].d")).toEqual(["3"]);
    expect(getTextAtPath(doc, "list[5].c")).toEqual([]);
    expect(getTextAtPath(doc, "arr[*]")).toEqual(["p", "q"]);
    expect(getTextAtPath(doc, "{a.b,s,missing}")).toEqual(["x", "str"]);
    expect(getTextAtPath(doc, "a")).toEqual(['{"b": "x", "f": 1.5, "n": 2, "t": true}']);
    expect(getTextAtPath({ z: 1, a: "é" }, "$")).toEqual(['{"a": "é", "z": 1}']);
    expect(getTextAtPath(doc, "missing.x")).toEqual([]);
  });
});

// --- vector search: the vector cases of LangGraph's PostgresStore tests ------------------------

const DISTANCES: VectorMetricName[] = ["l2", "inner_product", "cosine"];

/** A store with CharacterEmbeddings(500), as the PostgresStore tests' `vector_store`. */
function vectorStore(distanceType: VectorMetricName, body: (store: CtxstoreStore, embeddings: CharacterEmbeddings) => Promise<void>, fields?: string[]) {
  const embeddings = new CharacterEmbeddings(500);
  const index: CtxstoreIndexConfig = { dims: embeddings.dims, embeddings, distanceType };
  if (fields !== undefined) index.fields = fields;
  return withStore(index, (store) => body(store, embeddings));
}

describe.each(DISTANCES)("vector search, %s", (distanceType) => {
  test("initialization: the index config, the index", () =>
    vectorStore(distanceType, async (store, embeddings) => {
      expect(store.indexConfig?.dims).toBe(embeddings.dims);
      expect(store.indexConfig?.embeddings).toBe(embeddings);
      const index = (await client.vectorIndexes()).find((i) => i.name === store.vectorIndexName);
      expect(index).toMatchObject({ dims: 500, metric: distanceType });
    }));

  test("insert with auto-embedding", () =>
    vectorStore(distanceType, async (store) => {
      const docs: Array<[string, Record<string, string>]> = [
        ["doc1", { text: "short text" }],
        ["doc2", { text: "longer text document" }],
        ["doc3", { text: "longest text document here" }],
        ["doc4", { description: "text in description field" }],
        ["doc5", { content: "text in content field" }],
        ["doc6", { body: "text in body field" }],
      ];
      for (const [key, value] of docs) await store.put(["test"], key, value);
      const results = await store.search(["test"], { query: "long text" });
      expect(results.length).toBeGreaterThan(0);
      const order = results.map((r) => r.key);
      expect(order).toContain("doc2");
      expect(order).toContain("doc3");
      expect(results.every((r) => typeof r.score === "number")).toBe(true);
    }));

  test("an update re-embeds; index: false stores no vector", () =>
    vectorStore(distanceType, async (store) => {
      await store.put(["test"], "doc1", { text: "zany zebra Xerxes" });
      await store.put(["test"], "doc2", { text: "something about dogs" });
      await store.put(["test"], "doc3", { text: "text about birds" });
      const initial = await store.search(["test"], { query: "Zany Xerxes" });
      expect(initial[0]?.key).toBe("doc1");
      const initialScore = initial[0]!.score!;
      await store.put(["test"], "doc1", { text: "new text about dogs" });
      const after = await store.search(["test"], { query: "Zany Xerxes" });
      const afterScore = after.find((r) => r.key === "doc1")?.score ?? 0;
      expect(afterScore).toBeLessThan(initialScore);
      for (const r of await store.search(["test"], { query: "new text about dogs" })) {
        if (r.key === "doc1") expect(r.score!).toBeGreaterThan(afterScore);
      }
      await store.put(["test"], "doc4", { text: "new text about dogs" }, false);
      const withoutIndex = await store.search(["test"], { query: "new text about dogs", limit: 3 });
      expect(withoutIndex.some((r) => r.key === "doc4")).toBe(false);
      // An indexed item put again with index: false, and a deleted one, leave the search.
      await store.put(["test"], "doc2", { text: "something about dogs" }, false);
      await store.delete(["test"], "doc3");
      expect((await store.search(["test"], { query: "dogs" })).map((r) => r.key)).toEqual(["doc1"]);
      expect((await store.get(["test"], "doc2"))?.value).toEqual({ text: "something about dogs" });
    }));

  test("vector search with filters", () =>
    vectorStore(distanceType, async (store) => {
      const docs: Array<[string, Record<string, unknown>]> = [
        ["doc1", { text: "red apple", color: "red", score: 4.5 }],
        ["doc2", { text: "red car", color: "red", score: 3.0 }],
        ["doc3", { text: "green apple", color: "green", score: 4.0 }],
        ["doc4", { text: "blue car", color: "blue", score: 3.5 }],
      ];
      for (const [key, value] of docs) await store.put(["test"], key, value);
      let results = await store.search(["test"], { query: "apple", filter: { color: "red" } });
      expect(results).toHaveLength(2);
      expect(results[0]!.key).toBe("doc1");
      results = await store.search(["test"], { query: "car", filter: { color: "red" } });
      expect(results).toHaveLength(2);
      expect(results[0]!.key).toBe("doc2");
      results = await store.search(["test"], { query: "bbbbluuu", filter: { score: { $gt: 3.2 } } });
      expect(results).toHaveLength(3);
      expect(results[0]!.key).toBe("doc4");
      results = await store.search(["test"], { query: "apple", filter: { score: { $gte: 4.0 }, color: "green" } });
      expect(results.map((r) => r.key)).toEqual(["doc3"]);
    }));

  test("pagination", () =>
    vectorStore(distanceType, async (store) => {
      for (let i = 0; i < 5; i++) await store.put(["test"], `doc${i}`, { text: `test document number ${i}` });
      const page1 = await store.search(["test"], { query: "test", limit: 2 });
      const page2 = await store.search(["test"], { query: "test", limit: 2, offset: 2 });
      expect(page1).toHaveLength(2);
      expect(page2).toHaveLength(2);
      expect(page1[0]!.key).not.toBe(page2[0]!.key);
      const all = await store.search(["test"], { query: "test", limit: 10 });
      expect(all).toHaveLength(5);
      expect(all.slice(2, 4).map((r) => r.key)).toEqual(page2.map((r) => r.key));
      for (let i = 1; i < all.length; i++) expect(all[i - 1]!.score!).toBeGreaterThanOrEqual(all[i]!.score!);
    }));

  test("edge cases: empty, missing, long and odd queries", () =>
    vectorStore(distanceType, async (store) => {
      await store.put(["test"], "doc1", { text: "test document" });
      expect(await store.search(["test"], { query: "" })).toHaveLength(1);
      expect(await store.search(["test"], {})).toHaveLength(1);
      expect(await store.search(["test"], { query: "test ".repeat(100) })).toHaveLength(1);
      expect(await store.search(["test"], { query: "test!@#$%^&*()" })).toHaveLength(1);
      expect(await store.search(["nothing"], { query: "test" })).toEqual([]);
    }));

  test("exactly limit items under a selective filter", () =>
    vectorStore(distanceType, async (store) => {
      const ops = Array.from({ length: 120 }, (_, i) => ({
        namespace: ["docs", i % 2 === 0 ? "even" : "odd"],
        key: `d${i}`,
        value: { text: `document ${i} about ${i % 3 === 0 ? "apples" : "cars"}`, rare: i % 40 === 3 },
      }));
      await store.batch(ops);
      const rare = await store.search(["docs"], { query: "apples", filter: { rare: true }, limit: 2 });
      expect(rare).toHaveLength(2);
      expect(rare.every((r) => r.value["rare"] === true)).toBe(true);
      expect(await store.search(["docs"], { query: "apples", filter: { rare: true }, limit: 10 })).toHaveLength(3);
      const odd = await store.search(["docs", "odd"], { query: "cars", limit: 100 });
      expect(odd).toHaveLength(60);
      expect(odd.every((r) => r.namespace[1] === "odd")).toBe(true);
      await expect(store.search(["docs"], { query: "x", limit: 1001 })).rejects.toThrow(/at most 1000/);
    }));

  test("a store opened again finds the vectors; another dimension is refused", () =>
    vectorStore(distanceType, async (store, embeddings) => {
      await store.put(["a"], "k", { text: "hello there" });
      const again = new CtxstoreStore(client, { name: store.storeName, index: { dims: 500, embeddings, distanceType } });
      expect((await again.search(["a"], { query: "hello there" }))[0]?.key).toBe("k");
      const other = new CtxstoreStore(client, { name: store.storeName, index: { dims: 499, embeddings: new CharacterEmbeddings(499), distanceType } });
      await expect(other.start()).rejects.toThrow(/INVALID_ARGUMENT/);
      const wrong = new CtxstoreStore(client, { name: `${store.storeName}-w`, index: { dims: 3, embeddings, distanceType } });
      await expect(wrong.put(["a"], "k", { text: "x" })).rejects.toThrow(/500 dimensions; the store's index has 3/);
      await client.vectorIndexDrop(wrong.vectorIndexName!).catch(() => undefined);
    }));
});

describe.each(["cosine", "inner_product"] as VectorMetricName[])("embedding paths, %s", (distanceType) => {
  test("embed with the index's fields", () =>
    vectorStore(
      distanceType,
      async (store) => {
        await store.put(["test"], "doc1", { key1: "xxx", key2: "yyy", key3: "zzz" }); // 2 vectors
        await store.put(["test"], "doc2", { key0: "uuu", key1: "vvv", key2: "www", key3: "xxx" }); // 3 vectors
        let results = await store.search(["test"], { query: "xxx" });
        expect(results).toHaveLength(2);
        expect(results[0]!.key).not.toBe(results[1]!.key);
        const ascore = results[0]!.score!;
        expect(Math.abs(ascore - results[1]!.score!)).toBeLessThan(1e-3);
        results = await store.search(["test"], { query: "uuu" });
        expect(results).toHaveLength(2);
        expect(results[0]!.key).toBe("doc2");
        expect(results[0]!.score!).toBeGreaterThan(results[1]!.score!);
        expect(Math.abs(ascore - results[0]!.score!)).toBeLessThan(1e-3);
        results = await store.search(["test"], { query: "zzz" });
        expect(results[0]!.key).toBe("doc1");
        expect(results[0]!.score!).toBeGreaterThan(results[1]!.score!);
        expect(Math.abs(ascore - results[0]!.score!)).toBeLessThan(1e-3);
        results = await store.search(["test"], { query: "www" }); // not indexed
        expect(results).toHaveLength(2);
        expect(results.every((r) => r.score! < ascore)).toBe(true);
      },
      ["key0", "key1", "key3"],
    ));

  test("embed with each put's own paths; index: false", () =>
    vectorStore(
      distanceType,
      async (store) => {
        await store.put(["test"], "doc3", { key0: "aaa", key1: "bbb", key2: "ccc", key3: "ddd" }, ["key0", "key1"]);
        await store.put(["test"], "doc4", { key0: "eee", key1: "bbb", key2: "fff", key3: "ggg" }, ["key1", "key3"]);
        let results = await store.search(["test"], { query: "aaa" });
        expect(results).toHaveLength(2);
        expect(results[0]!.key).toBe("doc3");
        expect(results[0]!.score!).toBeGreaterThan(results[1]!.score!);
        results = await store.search(["test"], { query: "ggg" });
        expect(results[0]!.key).toBe("doc4");
        expect(results[0]!.score!).toBeGreaterThan(results[1]!.score!);
        results = await store.search(["test"], { query: "bbb" });
        expect(results).toHaveLength(2);
        expect(Math.abs(results[0]!.score! - results[1]!.score!)).toBeLessThan(1e-3);
        results = await store.search(["test"], { query: "ccc" });
        expect(results.every((r) => r.score! < 0.9)).toBe(true);
        await store.put(["test"], "doc5", { key0: "hhh", key1: "iii" }, false);
        results = await store.search(["test"]);
        expect(results).toHaveLength(3);
        expect(results.every((r) => r.score === undefined)).toBe(true);
        expect(results.some((r) => r.key === "doc5")).toBe(true);
        expect((await store.search(["test"], { query: "hhh" })).some((r) => r.key === "doc5")).toBe(false);
      },
      ["key17"],
    ));

  test("non-ASCII", () =>
    vectorStore(distanceType, async (store) => {
      const texts = ["这是中文", "これは日本語です", "이건 한국어야", "Это русский", "यह रूसी है"];
      for (const [i, text] of texts.entries()) await store.put(["user_123", "memories"], String(i + 1), { text });
      for (const [i, text] of texts.entries()) expect((await store.search(["user_123", "memories"], { query: text }))[0]?.key).toBe(String(i + 1));
    }));
});

describe.each(["cosine", "inner_product", "l2"] as VectorMetricName[])("scores, %s", (distanceType) => {
  test.each(["aaa", "bbb", "ccc", "abcd", "poisson"])("query %s", (query) =>
    vectorStore(
      distanceType,
      async (store, embeddings) => {
        await store.put(["test"], "doc", { key0: "aaa" }, ["key0", "key1"]);
        const results = await store.search([], { query });
        const vec0 = embeddings.embedOne("aaa");
        const vec1 = embeddings.embedOne(query);
        let want: number;
        const dot = vec0.reduce((sum, x, i) => sum + x * vec1[i]!, 0);
        if (distanceType === "cosine") {
          const n0 = Math.sqrt(vec0.reduce((s, x) => s + x * x, 0));
          const n1 = Math.sqrt(vec1.reduce((s, x) => s + x * x, 0));
          want = n0 > 0 && n1 > 0 ? dot / (n0 * n1) : 0;
        } else if (distanceType === "inner_product") want = dot;
        else want = -Math.sqrt(vec0.reduce((s, x, i) => s + (x - vec1[i]!) ** 2, 0));
        expect(results).toHaveLength(1);
        expect(Math.abs(results[0]!.score! - want)).toBeLessThan(1e-3);
      },
      ["key0"],
    ),
  );
});
