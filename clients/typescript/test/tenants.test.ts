/**
 * Tenants (issue 48, decision 0032): the client and the LangGraph.js saver work unchanged
 * with a tenant's token, and what one tenant saves is absent to another.
 */

import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { afterAll, beforeAll, expect, test } from "vitest";
import { emptyCheckpoint } from "@langchain/langgraph-checkpoint";

import { Client, NotFound, Unauthorized } from "../src/index.js";
import { CtxstoreSaver } from "../src/langgraph.js";
import { Server } from "./server.js";

const OPERATOR = "operator-token-0123456789";
const ACME = "acme-token-0123456789abcdef";
const GLOBEX = "globex-token-0123456789abcd";

let server: Server;

beforeAll(async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "ctxstore-ts-tenants-"));
  const file = path.join(dir, "tenants.toml");
  writeFileSync(
    file,
    `[[tenant]]\nname = "acme"\ntokens = ["${ACME}"]\nrights = ["read", "write"]\n` +
      `[[tenant]]\nname = "globex"\ntokens = ["${GLOBEX}"]\nrights = ["read", "write"]\n`,
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
