/**
 * Tenants (issue 48, decision 0032): the client and the LangGraph.js saver work unchanged
 * with a tenant's token, and what one tenant saves is absent to another. The operator lists
 * the tenants with their usage, quotas and refusals (`tenants()`, TENANT_LIST, version 5),
 * deletes a tenant (`deleteTenant()`, TENANT_DELETE, version 5) and rotates a tenant's data key
 * (`rotateTenantKey()`, TENANT_ROTATE_KEY, version 5). Vector indexes (version 6) are a
 * tenant's own: another tenant's index of the same name is another index.
 */

import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { afterAll, beforeAll, expect, onTestFinished, test } from "vitest";
import { emptyCheckpoint } from "@langchain/langgraph-checkpoint";

import { Client, InvalidArgument, NotFound, QuotaExceeded, Unauthorized } from "../src/index.js";
import { CtxstoreSaver } from "../src/langgraph.js";
import { Server } from "./server.js";

const OPERATOR = "operator-token-0123456789";
const ACME = "acme-token-0123456789abcdef";
const GLOBEX = "globex-token-0123456789abcd";
/** A tenant of at most two contexts, which only the listing's test uses. */
const INITECH = "initech-token-0123456789abcde";
/** The master key of the server that seals payloads (64 hex digits). */
const MASTER_KEY = "8f2a61c03e5d47b9a1c2d3e4f5061728394a5b6c7d8e9fa0b1c2d3e4f5a6b7c8";

let server: Server;
/** The tenants file every server of these tests starts with. */
let tenantsFile: string;

beforeAll(async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "ctxstore-ts-tenants-"));
  const file = path.join(dir, "tenants.toml");
  tenantsFile = file;
  writeFileSync(
    file,
    `[[tenant]]\nname = "acme"\ntokens = ["${ACME}"]\nrights = ["read", "write"]\n` +
      `[[tenant]]\nname = "globex"\ntokens = ["${GLOBEX}"]\nrights = ["read", "write"]\n` +
      `[[tenant]]\nname = "initech"\ntokens = ["${INITECH}"]\nrights = ["read", "write", "admin"]\nquota_contexts = 2\n`,
  );
  server = await Server.start({ token: OPERATOR, args: ["--tenants-file", file] });
});

afterAll(async () => {
  await server?.stop();
  rmSync(path.dirname(tenantsFile), { recursive: true, force: true });
});

test("a tenant's saver keeps its threads; another tenant's finds none", async () => {
  const acme = CtxstoreSaver.fromAddr(server.addr, { token: ACME });
  const globex = CtxstoreSaver.fromAddr(server.addr, { token: GLOBEX });
  try {
    const config = { configurable: { thread_id: "shared-name", checkpoint_ns: "" } };
    const checkpoint = { ...emptyCheckpoint(), channel_values: { note: "acme's secret" }, channel_versions: { note: 1 } };
    await acme.put(config, checkpoint, { source: "input", step: 0, parents: {} }, { note: 1 });
    const mine = await acme.getTuple(config);
    expect(mine?.checkpoint.channel_values).toEqual({ note: "acme's secret" });
    expect(await globex.getTuple(config)).toBeUndefined();
    const listed = [];
    for await (const tuple of globex.list(config)) listed.push(tuple);
    expect(listed).toEqual([]);
  } finally {
    await acme.close();
    await globex.close();
  }
});

test("blobs, heads and store-wide messages per tenant", async () => {
  const acme = await Client.connect(server.addr, { token: ACME });
  const globex = await Client.connect(server.addr, { token: GLOBEX });
  try {
    const head = await acme.createContext();
    const payload = new TextEncoder().encode(`acme's payload ${Date.now()}`);
    const appended = await acme.append(head.contextId, payload);
    expect(await acme.getBlob(appended.turn.payloadHash)).toEqual(payload);
    await expect(globex.getBlob(appended.turn.payloadHash)).rejects.toBeInstanceOf(NotFound);
    await expect(globex.head(head.contextId)).rejects.toBeInstanceOf(NotFound);
    const theirs = await globex.append((await globex.createContext()).contextId, payload);
    expect(theirs.deduped).toBe(false);
    await expect(acme.stats()).rejects.toBeInstanceOf(Unauthorized);
  } finally {
    await acme.close();
    await globex.close();
  }
  await expect(Client.connect(server.addr, { token: "no-tenant-has-this-token" })).rejects.toBeInstanceOf(Unauthorized);
});

test("the operator lists the tenants with their usage and quotas, every page", async () => {
  const initech = await Client.connect(server.addr, { token: INITECH });
  const operator = await Client.connect(server.addr, { token: OPERATOR });
  try {
    for (let i = 0; i < 2; i++) await initech.createContext();
    const refused = await initech.createContext().catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(QuotaExceeded);
    expect((refused as QuotaExceeded).limit).toBe(2);
    const listed = await operator.tenants();
    expect(listed.map((tenant) => [tenant.name, tenant.rights, tenant.inTenantsFile])).toEqual([
      ["acme", ["read", "write"], true],
      ["globex", ["read", "write"], true],
      ["initech", ["read", "write", "admin"], true],
    ]);
    const mine = listed[2]!;
    expect(mine).toMatchObject({
      registered: true,
      contexts: 2,
      streamsOpen: 0,
      connections: 1,
      quotaBytes: undefined,
      quotaContexts: 2,
      quotaAppendsPerS: undefined,
      quotaConnections: undefined,
      quotaStreams: undefined,
      quotaRefusals: 1,
    });
    expect(mine.tenantId).toBeGreaterThan(0);
    // One tenant a page: the same tenants, every page read.
    const paged = await operator.tenants({ pageSize: 1 });
    expect(paged.map((tenant) => tenant.name)).toEqual(["acme", "globex", "initech"]);
    expect(paged[2]).toMatchObject({ contexts: 2, quotaContexts: 2, quotaRefusals: 1 });
    await expect(operator.tenants({ pageSize: 0 })).rejects.toBeInstanceOf(RangeError);
  } finally {
    await initech.close();
    await operator.close();
  }
});

test("a tenant lists only itself; the store's figures stay the operator's", async () => {
  const acme = await Client.connect(server.addr, { token: ACME });
  try {
    const own = await acme.tenants({ pageSize: 1 });
    expect(own.map((tenant) => tenant.name)).toEqual(["acme"]);
    expect(own[0]?.tenantId).toBeGreaterThan(0);
    await expect(acme.stats()).rejects.toBeInstanceOf(Unauthorized);
    await acme.ping(); // the connection stays open
  } finally {
    await acme.close();
  }
});

test("the operator deletes a tenant: its token refused, listed deleted, idempotent", async () => {
  // A server of its own: the deleted tenant is gone for good.
  const own = await Server.start({ token: OPERATOR, args: ["--tenants-file", tenantsFile] });
  try {
    const globex = await Client.connect(own.addr, { token: GLOBEX });
    const operator = await Client.connect(own.addr, { token: OPERATOR });
    try {
      const head = await globex.createContext();
      await globex.append(head.contextId, new TextEncoder().encode("globex's turn"));
      const before = await operator.tenants();
      expect(before.map((tenant) => tenant.deleted)).toEqual([false, false, false]);
      const deleted = await operator.deleteTenant("globex");
      // No master key (the store does not seal) and no replica: neither flag.
      expect(deleted).toEqual({ tenantId: before[1]!.tenantId, keysDestroyed: false, replicaUpdated: false });
      expect(deleted.tenantId).toBeGreaterThan(0);
      // (a) Its token is refused from then on, on its open connection too.
      await expect(Client.connect(own.addr, { token: GLOBEX })).rejects.toBeInstanceOf(Unauthorized);
      await expect(globex.ping()).rejects.toBeInstanceOf(Unauthorized);
      // (b) Listed, deleted; the others are not.
      const after = await operator.tenants();
      expect(after.map((tenant) => [tenant.name, tenant.deleted])).toEqual([
        ["acme", false],
        ["globex", true],
        ["initech", false],
      ]);
      // Every context of it deleted.
      expect(after[1]).toMatchObject({ tenantId: deleted.tenantId, registered: true, deleted: true, contexts: 0 });
      // (c) Idempotent: the same answer again.
      expect(await operator.deleteTenant("globex")).toEqual(deleted);
      // (d) A name the store never registered.
      await expect(operator.deleteTenant("no-such-tenant")).rejects.toBeInstanceOf(InvalidArgument);
      await operator.ping(); // the connection stays open
      await expect(operator.deleteTenant("")).rejects.toBeInstanceOf(RangeError);
      await expect(operator.deleteTenant("x".repeat(65))).rejects.toBeInstanceOf(RangeError);
    } finally {
      await globex.close();
      await operator.close();
    }
    // (e) A tenant's token, even one with the admin right, may not delete a tenant.
    const initech = await Client.connect(own.addr, { token: INITECH });
    try {
      await expect(initech.deleteTenant("acme")).rejects.toBeInstanceOf(Unauthorized);
      await initech.ping(); // the connection stays open
    } finally {
      await initech.close();
    }
  } finally {
    await own.stop();
  }
});

test("a server that seals nothing rotates no key; a tenant's token may not rotate one", async () => {
  const operator = await Client.connect(server.addr, { token: OPERATOR });
  try {
    // No --master-key-file: there is no data key to rotate, the operator's included.
    for (const name of ["acme", "operator", "no-such-tenant"]) {
      await expect(operator.rotateTenantKey(name)).rejects.toBeInstanceOf(InvalidArgument);
    }
    await operator.ping(); // the connection stays open
    await expect(operator.rotateTenantKey("")).rejects.toBeInstanceOf(RangeError);
    await expect(operator.rotateTenantKey("x".repeat(65))).rejects.toBeInstanceOf(RangeError);
  } finally {
    await operator.close();
  }
  // Even a tenant with the admin right.
  for (const token of [ACME, INITECH]) {
    const tenant = await Client.connect(server.addr, { token });
    try {
      await expect(tenant.rotateTenantKey("acme")).rejects.toBeInstanceOf(Unauthorized);
      await tenant.ping(); // the connection stays open
    } finally {
      await tenant.close();
    }
  }
});

test("the operator rotates a tenant's key on a server that seals: what was stored reads as before", async () => {
  const keyDir = mkdtempSync(path.join(tmpdir(), "ctxstore-ts-master-key-"));
  const keyFile = path.join(keyDir, "master.key");
  writeFileSync(keyFile, `${MASTER_KEY}\n`, { mode: 0o600 });
  onTestFinished(() => rmSync(keyDir, { recursive: true, force: true }));
  const own = await Server.start({ token: OPERATOR, args: ["--tenants-file", tenantsFile, "--master-key-file", keyFile] });
  try {
    const beforePayload = new TextEncoder().encode(`sealed under version 0 ${"abc".repeat(2000)}`);
    const afterPayload = new TextEncoder().encode(`sealed under version 2 ${"xyz".repeat(2000)}`);
    let acme = await Client.connect(own.addr, { token: ACME });
    let operator = await Client.connect(own.addr, { token: OPERATOR });
    let stored, later;
    let acmeId: number;
    try {
      const head = await acme.createContext();
      stored = await acme.append(head.contextId, beforePayload);
      const listed = await operator.tenants();
      acmeId = listed.find((tenant) => tenant.name === "acme")!.tenantId!;
      expect(acmeId).toBeGreaterThan(0);
      expect(await operator.rotateTenantKey("acme")).toEqual({ tenantId: acmeId, keyVersion: 1 });
      // Not idempotent: each call makes another version.
      expect(await operator.rotateTenantKey("acme")).toEqual({ tenantId: acmeId, keyVersion: 2 });
      // The operator's own data key: tenant 0, its first rotation.
      expect(await operator.rotateTenantKey("operator")).toEqual({ tenantId: 0, keyVersion: 1 });
      // What acme stored before reads as before, byte-exact; what it stores now too.
      expect(Buffer.from(await acme.getBlob(stored.turn.payloadHash)).equals(beforePayload)).toBe(true);
      later = await acme.append(head.contextId, afterPayload);
      expect(Buffer.from(await acme.getBlob(later.turn.payloadHash)).equals(afterPayload)).toBe(true);
      const page = await acme.last(head.contextId, 10, { payloads: true });
      expect(page.turns.map((turn) => Buffer.from(turn.payload!).toString())).toEqual([
        Buffer.from(beforePayload).toString(),
        Buffer.from(afterPayload).toString(),
      ]);
      // A tenant's token may not rotate a key, not even its own.
      await expect(acme.rotateTenantKey("acme")).rejects.toBeInstanceOf(Unauthorized);
      // A name never registered, and a deleted tenant: InvalidArgument.
      await expect(operator.rotateTenantKey("no-such-tenant")).rejects.toBeInstanceOf(InvalidArgument);
      const globex = await Client.connect(own.addr, { token: GLOBEX });
      await globex.createContext();
      await globex.close();
      expect((await operator.deleteTenant("globex")).keysDestroyed).toBe(true);
      await expect(operator.rotateTenantKey("globex")).rejects.toBeInstanceOf(InvalidArgument);
      await operator.ping(); // the connection stays open
    } finally {
      await acme.close();
      await operator.close();
    }
    // The keyring is durable: after a restart both payloads still read, the versions go on.
    await own.kill();
    await own.launch();
    acme = await Client.connect(own.addr, { token: ACME });
    operator = await Client.connect(own.addr, { token: OPERATOR });
    try {
      expect(Buffer.from(await acme.getBlob(stored.turn.payloadHash)).equals(beforePayload)).toBe(true);
      expect(Buffer.from(await acme.getBlob(later.turn.payloadHash)).equals(afterPayload)).toBe(true);
      expect(await operator.rotateTenantKey("acme")).toEqual({ tenantId: acmeId, keyVersion: 3 });
      expect(await operator.rotateTenantKey("operator")).toEqual({ tenantId: 0, keyVersion: 2 });
    } finally {
      await acme.close();
      await operator.close();
    }
  } finally {
    await own.stop();
  }
});

test("vector indexes (version 6) are the tenant's: same name, another index; dropping one needs admin", async () => {
  const acme = await Client.connect(server.addr, { token: ACME });
  const globex = await Client.connect(server.addr, { token: GLOBEX });
  const initech = await Client.connect(server.addr, { token: INITECH });
  const operator = await Client.connect(server.addr, { token: OPERATOR });
  try {
    const mine = await acme.vectorIndexCreate("shared-index", 2);
    const theirs = await globex.vectorIndexCreate("shared-index", 3, { metric: "l2" }); // not acme's: no conflict
    expect(theirs).toMatchObject({ dims: 3, metric: "l2" });
    expect((await acme.vectorIndexes()).map((i) => [i.name, i.dims])).toEqual([["shared-index", 2]]);
    expect((await globex.vectorIndexes()).map((i) => [i.name, i.dims])).toEqual([["shared-index", 3]]);
    expect((await operator.vectorIndexes()).map((i) => i.name)).not.toContain("shared-index");

    const { info } = await acme.openContext(`acme-vectors-${Date.now()}`);
    const value = new TextEncoder().encode('{"secret":true}');
    await acme.kvPutVectors(info.contextId, [{ key: "k", value, vectors: [[1, 0]] }], "shared-index");
    const hits = await acme.vectorSearch(info.contextId, "shared-index", [1, 0]);
    expect(hits.hits.map((hit) => new TextDecoder().decode(hit.key))).toEqual(["k"]);
    expect((await acme.vectorIndexes())[0]!.vectors).toBe(1);
    // Another tenant neither finds the context nor puts into it.
    await expect(globex.vectorSearch(info.contextId, "shared-index", [1, 0, 0])).rejects.toBeInstanceOf(NotFound);
    await expect(globex.kvPutVectors(info.contextId, [{ key: "k", value, vectors: [[1, 0, 0]] }], "shared-index")).rejects.toBeInstanceOf(NotFound);

    // VECTOR_INDEX_DROP needs the admin right (acme's token has read and write only).
    const refused = await acme.vectorIndexDrop("shared-index").catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(Unauthorized);
    await acme.ping(); // the connection stays open
    await initech.vectorIndexCreate("initech-index", 4);
    expect((await initech.vectorIndexDrop("initech-index")).dims).toBe(4);
    expect(mine.name).toBe("shared-index");
  } finally {
    await acme.close();
    await globex.close();
    await initech.close();
    await operator.close();
  }
});
