/**
 * LangGraph.js's own checkpointer contract, `@langchain/langgraph-checkpoint-validation`, run
 * unmodified from its package against CtxstoreSaver on a real server. Its suites list across
 * all threads, so each checkpointer it creates gets a fresh server (its CLI crashes on import
 * in 1.1.1, so its `validate()` is called here, as its README's programmatic use).
 */

import { deltaChannelHistoryTests, validate, type CheckpointSaverTestInitializer } from "@langchain/langgraph-checkpoint-validation";

import { describe } from "vitest";

import { CtxstoreSaver } from "../src/langgraph.js";
import { Server } from "./server.js";

const servers = new Map<CtxstoreSaver, Server>();

const initializer: CheckpointSaverTestInitializer<CtxstoreSaver> = {
  checkpointerName: "CtxstoreSaver",
  async createCheckpointer() {
    const server = await Server.start();
    const saver = CtxstoreSaver.fromAddr(server.addr);
    servers.set(saver, server);
    return saver;
  },
  async destroyCheckpointer(saver) {
    await saver.close();
    await servers.get(saver)?.stop();
    servers.delete(saver);
  },
};

validate(initializer);
// The delta-channel history (getDeltaChannelHistory) has its own suite in the package, not
// part of validate(): run as well.
describe("CtxstoreSaver", () => deltaChannelHistoryTests(initializer));
