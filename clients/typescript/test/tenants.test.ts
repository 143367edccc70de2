/**
 * Tenants (issue 48, decision 0032): the client and the LangGraph.js saver work unchanged
 * with a tenant's token, and what one tenant saves is absent to another. The operator lists
 * the tenants with their usage, quotas and refusals (`tenants()`, TENANT_LIST, version 5) and
 * deletes a tenant (`deleteTenant()`, TENANT_DELETE, version 5).
 */

import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { afterAll, beforeAll, expect, test } from "vitest";
import { emptyCheckpoint } from "@langchain/langgraph-checkpoint";

import { Client, InvalidArgument, NotFound, QuotaExceeded, Unauthorized } from "../src/index.js";
import { CtxstoreSaver } from "../src/langgraph.js";
import { Server } from "./server.js";

const OPERATOR = "operator-token-0123456789";
const ACME = "acme-token-0123456789abcdef";
const GLOBEX = "globex-token-0123456789abcd";
/** A tenant of at most two contexts, which only the listing's test uses. */
const INITECH = "initech-token-0123456789abcde";

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

test("only the operator lists the tenants", async () => {
  const acme = await Client.connect(server.addr, { token: ACME });
  try {
    await expect(acme.tenants()).rejects.toBeInstanceOf(Unauthorized);
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
