/**
 * LangGraph.js's own checkpointer contract, `@langchain/langgraph-checkpoint-validation`, run
 * unmodified from its package against CtxstoreSaver on a real server. Its suites list across
 * all threads, so each checkpointer it creates gets a fresh server (its CLI crashes on import
 * in 1.1.1, so its `validate()` is called here, as its README's programmatic use).
 */

import { validate } from "@langchain/langgraph-checkpoint-validation";

import { CtxstoreSaver } from "../src/langgraph.js";
import { Server } from "./server.js";

const servers = new Map<CtxstoreSaver, Server>();

validate<CtxstoreSaver>({
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
});
