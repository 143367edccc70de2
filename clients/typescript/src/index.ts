/**
 * `@ctxstore/client`: the TypeScript client of ctxstore (protocol versions 1 to 7).
 *
 * ```ts
 * import { Client } from "@ctxstore/client";
 * const client = await Client.connect("127.0.0.1:7411");
 * ```
 *
 * The LangGraph.js checkpointer and store are `@ctxstore/client/langgraph` (`CtxstoreSaver`,
 * `CtxstoreStore`), the OpenAI Agents JS session `@ctxstore/client/agents` (`CtxstoreSession`).
 */

export {
  AUTO_KEY_PREFIX,
  Client,
  DEFAULT_ADDR,
  DEFAULT_CHUNKING,
  DEFAULT_CLIENT_NAME,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_TIMEOUT_MS,
  parseAddr,
  type CallOptions,
  type ChunkingOptions,
  type ClientOptions,
  type ReadOptions,
  type WriteOptions,
} from "./client.js";
export { DEFAULT_FOLLOW_FRAMES_QUEUED_MAX, isLoopback } from "./connection.js";
export * from "./errors.js";
export { CHUNK_AVG_BYTES, CHUNK_MAX_BYTES, CHUNK_MIN_BYTES, CHUNK_THRESHOLD_BYTES, cut, type ChunkCut, type ChunkSizes } from "./fastcdc.js";
export { blobHash, EMPTY_HASH, inflate, parseHash, toHex } from "./payload.js";
export * as protocol from "./protocol.js";
export {
  StreamState,
  TurnStream,
  WatchKind,
  type StreamInfo,
  type WatchEvent,
  type WatchLagged,
  type WatchTarget,
} from "./streams.js";
export * as streamsProtocol from "./streams.js";
export type * from "./types.js";
