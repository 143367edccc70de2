/**
 * The golden frames of protocol/tests/golden-v1.txt, -v2, -v3, -v4, -v5, -v6 and -v7, byte for byte:
 * every request frame this client encodes equals its golden bytes (header included), and every
 * answer frame decodes (strictly: every byte read, reserved bytes zero) to the documented
 * values. Every golden frame is covered: a frame added to the files fails the first test until
 * it is here.
 */

import { describe, expect, test } from "vitest";

import { errorForCode, QuotaExceeded } from "../src/errors.js";
import { blobHash } from "../src/payload.js";
import * as p from "../src/protocol.js";
import * as s from "../src/streams.js";
import { goldenFrames } from "./golden-frames.js";

const GOLDEN = goldenFrames("golden-v1.txt", "golden-v2.txt", "golden-v3.txt", "golden-v4.txt", "golden-v5.txt", "golden-v6.txt", "golden-v7.txt");
const HASH_A0 = Uint8Array.from({ length: 32 }, (_, i) => 0xa0 + i);
const HASH_00 = Uint8Array.from({ length: 32 }, (_, i) => i);
const range = (from: number, to: number): Uint8Array => Uint8Array.from({ length: to - from }, (_, i) => from + i);
const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);
const TURN: p.TurnRecord = {
  turnId: 42,
  parentTurnId: 41,
  contextId: 3,
  depth: 7,
  codec: 1,
  typeTag: 0x1122_3344_5566_7788n,
  payloadHash: HASH_A0,
  payloadLen: 5,
  flags: 0,
  createdAtUnixMs: 1_767_225_600_000,
};
const INFO_T1: p.ContextInfoRecord = {
  head: { contextId: 3, headTurnId: 42, headDepth: 7 },
  createdAtUnixMs: 1_767_225_600_000,
  updatedAtUnixMs: 1_767_225_601_000,
  name: "t-1",
  tags: [["status", "idle"]],
};
const NO_EXTRAS: p.ExtrasRecord = { key: new Uint8Array(0), labels: [], links: [] };
const RAW_HELLO: p.PayloadRecord = { encoding: p.PayloadEncoding.RAW, rawLen: 5, data: utf8("hello") };

/** VECTOR_INDEX_INFO of the version-6 golden answers. */
const MEMORIES: p.VectorIndexRecord = { indexId: 1, dims: 3, metric: p.VectorMetric.COSINE, efSearch: 128, vectors: 2, name: "memories" };
const VECTOR_SEARCH_FIELDS: p.VectorSearchFields = {
  context: 3, index: "m", vector: Float32Array.of(1), k: 1, offset: 0, exact: false, efSearch: 0, prefix: new Uint8Array(0), filter: new Uint8Array(0),
};

/** A TURN_SPEC's fields that the version-7 golden requests leave at their defaults. */
const SPEC_DEFAULTS = { parentKind: p.ParentKind.HEAD, parentTurnId: 0, codec: 0, summary: false, byHash: false } as const;
/** The version-7 golden VECTOR_SEARCH_TURNS. */
const VECTOR_SEARCH_TURNS_GOLDEN: p.VectorSearchTurnsFields = {
  index: "recall",
  vector: Float32Array.of(1, 0, 0),
  k: 5,
  offset: 0,
  exact: false,
  efSearch: 0,
  context: undefined,
  namePrefix: "user-42/",
  tags: [["project", "x"]],
  labels: [["role", "user"]],
  typeTag: 1n,
};

/** Requests: name → (req_id, the request this client encodes). */
const REQUESTS: Record<string, [number, p.Request<unknown>]> = {
  hello_request: [1, p.hello(1, 1, utf8("secret"), "cli")],
  ping_request: [2, p.ping(0xdeadbeefn)],
  ctx_create_empty: [3, p.ctxCreate(0)],
  ctx_fork: [4, p.ctxFork(42)],
  get_head: [5, p.getHead(3)],
  append_turn: [6, p.appendTurn(3, 41, 0x1122_3344_5566_7788n, 1, utf8("hello"))],
  append_turn_by_hash: [7, p.appendTurnByHash(3, undefined, 9n, 2, HASH_A0)],
  get_turn: [8, p.getTurn(42)],
  get_last_with_payloads: [9, p.getLast(3, 64, p.READ_WITH_PAYLOADS | p.READ_ACCEPT_ZSTD)],
  get_before: [10, p.getBefore(3, 42, 10, 0)],
  get_range_by_depth: [11, p.getRangeByDepth(3, 2, 5, 0)],
  get_chain: [12, p.getChain(42, 0, 100, p.READ_WITH_PAYLOADS)],
  get_blob: [13, p.getBlob(HASH_A0, 0)],
  has_blobs: [14, p.hasBlobs([HASH_A0, HASH_00])],
  stats: [15, p.stats()],
  hello_request_v2: [1, p.hello(1, 2, new Uint8Array(0), "py")],
  get_head_by_name: [2, p.getHead("t-1")],
  append_turn_by_name: [3, p.appendTurn("t-1", undefined, 1n, 0, utf8("hi"))],
  ctx_open: [4, p.ctxOpen({ baseTurnId: 0, getOrCreate: true, name: "t-1", tags: [["status", "idle"]] })],
  ctx_open_clone: [5, p.ctxOpen({ baseTurnId: 0, getOrCreate: false, cloneFrom: 3, name: "t-2", tags: [] })],
  ctx_show: [6, p.ctxShow("t-1")],
  ctx_tag: [7, p.ctxTag(3, 42, [["status", "done"]], ["owner"])],
  ctx_list: [8, p.ctxList({ tags: [["status", "idle"]], namePrefix: "t-", updatedAfterUnixMs: 1_767_225_600_000, cursor: "t-1", limit: 100 })],
  ctx_name: [9, p.ctxName(3, "t-3")],
  kv_put: [10, p.kvPut("t-1", true, [[utf8("k"), utf8("v1")]])],
  kv_get: [11, p.kvGet(3, utf8("k"), 0)],
  kv_delete: [12, p.kvDelete(3, [utf8("k")])],
  kv_list: [13, p.kvList(3, utf8("w:"), new Uint8Array(0), 1000)],
  kv_put_ex: [20, p.kvPutEx("lgs:default", p.KV_PUT_IF_ABSENT, 30_000, [[utf8("k"), utf8("v1")]])],
  kv_get_ex: [21, p.kvGetEx(3, utf8("k"), 0, p.KV_READ_REFRESH)],
  kv_list_ex: [22, p.kvListEx(3, utf8("w:"), new Uint8Array(0), 1000, 0)],
  kv_touch: [23, p.kvTouch(3, 0, [utf8("w:1"), utf8("gone")])],
  append_turns: [
    14,
    p.appendTurns("t-1", 42, [
      { parentKind: p.ParentKind.HEAD, parentTurnId: 0, typeTag: 1n, codec: 0, summary: false, extras: { key: utf8("cp-1"), labels: [["step", "1"]], links: [] }, payload: utf8("hi"), byHash: false },
      { parentKind: p.ParentKind.TURN, parentTurnId: 41, typeTag: 2n, codec: 0, summary: true, extras: { key: new Uint8Array(0), labels: [], links: [7] }, payload: HASH_A0, byHash: true },
    ]),
  ],
  get_turn_by_key: [15, p.getTurnByKey(3, utf8("cp-1"))],
  turn_log: [16, p.turnLog(3, [["run_id", "r1"]], { phase: 0, next: 41 }, 100, p.READ_WITH_PAYLOADS)],
  read_page_window: [17, p.readPage("t-1", p.PageKind.WINDOW, 0, 0, 64, p.READ_WITH_PAYLOADS | p.READ_ACCEPT_ZSTD)],
  find_turns: [18, p.findTurns("run_id", "r1", 0, 100)],
  ctx_delete: [19, p.ctxDelete("thread-1")],
  ctx_prune: [20, p.ctxPrune(3, 20)],
  ctx_ttl: [21, p.ctxTtl(3, true, 7 * 24 * 3600 * 1000)],
  backup: [22, p.backup("/var/backups/ctxstore-1")],
  gc: [23, p.gc()],
  stats_ex: [24, p.statsEx()],
  replication_stats: [24, p.replicationStats()],
  kv_get_many: [25, p.kvGetMany(3, 0, [utf8("k"), utf8("gone")])],
  // Version 4 (decision 0031): ROLE and the frame flag ACK_AFTER.
  hello_request_v4: [1, p.hello(1, 4, new Uint8Array(0), "py")],
  role: [60, p.role()],
  append_turn_ack_remote: [62, p.ackAfter(p.appendTurn(3, undefined, 1n, 0, utf8("hello")), "remote")],
  append_turn_by_name_ack_local: [63, p.ackAfter(p.appendTurn("t-1", undefined, 1n, 0, utf8("hi")), "local")],
  kv_put_ack_remote: [64, p.ackAfter(p.kvPut(3, false, [[utf8("k"), utf8("v1")]]), "remote")],
  stream_seal_ack_remote: [65, p.ackAfter(s.streamSeal(57), "remote")],
  // Version 5 (decision 0032 §3, §8): QUOTA_EXCEEDED, TENANT_LIST; HELLO offers 1..=5.
  hello_request_v5: [1, p.hello(1, 5, utf8("t0k"), "ts")],
  tenant_list: [71, p.tenantList("acme", 100)],
  // Version 5 (decision 0032 §6): TENANT_DELETE.
  tenant_delete: [72, p.tenantDelete("acme")],
  // Version 5 (decision 0032 §7): TENANT_ROTATE_KEY.
  tenant_rotate_key: [73, p.tenantRotateKey("globex")],
  // Version 6 (decision 0033): vector search.
  vector_index_create: [81, p.vectorIndexCreate("memories", 3, p.VectorMetric.COSINE, 0)],
  vector_index_drop: [82, p.vectorIndexDrop("memories")],
  vector_index_list: [83, p.vectorIndexList()],
  kv_put_vectors: [
    84,
    p.kvPutVectors("lgs:main", 0, 0, "memories", 3, [
      { key: utf8("i/a"), value: utf8('{"text":"hi"}'), vectors: [Float32Array.of(1, 0, -0.5), Float32Array.of(0.25, 0.5, 2)] },
      { key: utf8("i/b"), value: utf8("{}"), vectors: [] },
    ]),
  ],
  vector_search: [
    85,
    p.vectorSearch({
      context: 3,
      index: "memories",
      vector: Float32Array.of(1, 0, 0),
      k: 2,
      offset: 1,
      exact: true,
      efSearch: 0,
      prefix: utf8("i/"),
      filter: utf8('{"color":{"$ne":"red"}}'),
    }),
  ],
  // Version 7 (decision 0033): vectors on turns.
  append_turns_vectors: [
    86,
    p.appendTurnsVectors("thread-1", 42, "recall", 3, [
      { ...SPEC_DEFAULTS, typeTag: 1n, extras: { key: new Uint8Array(0), labels: [["role", "user"]], links: [] }, payload: utf8("hi"), vectors: [Float32Array.of(1, 0, -0.5)] },
      { ...SPEC_DEFAULTS, typeTag: 2n, extras: NO_EXTRAS, payload: utf8("ok"), vectors: [] },
    ]),
  ],
  vector_search_turns: [87, p.vectorSearchTurns(VECTOR_SEARCH_TURNS_GOLDEN)],
  patch_turn: [23, p.patchTurn(42, utf8("fixed"))],
  redact_turn: [24, p.redactTurn(42)],
  purge_blob: [25, p.purgeBlob(HASH_A0)],
  get_turn_as_of: [26, p.asOf(p.getTurn(42), 57, () => 1)],
  read_page_as_of_latest: [27, p.asOf(p.readPage("t-1", p.PageKind.LAST, 0, 0, 10, p.READ_WITH_PAYLOADS), 0, (a) => a.entries.length)],
  get_last_by_name_as_of: [28, p.asOf(p.getLast("t-1", 1, 0), 57, (a) => a.entries.length)],
  put_chunked: [
    29,
    p.putChunked(HASH_A0, [{ hash: range(0x10, 0x30), len: 4 }, { hash: range(0x40, 0x60), len: 3 }, { hash: range(0x70, 0x90), len: 5 }], [{ index: 1, data: utf8("new") }], undefined),
  ],
  put_chunked_with_base: [
    29,
    p.putChunked(range(0xc0, 0xe0), [{ hash: range(0x90, 0xb0), len: 6 }], [{ index: 0, data: utf8("grown!") }], { hash: HASH_A0, kept: 2 }),
  ],
};

/** Answers: name → (req_id, msg_type, flags, decoder, the documented value). */
type Answer = [number, number, number, (r: p.Reader) => unknown, unknown];
const T = p.MsgType;
const R = (type: number): number => type | p.RESPONSE_BIT;
const ANSWERS: Record<string, Answer> = {
  hello_response: [1, R(T.HELLO), 0, p.decodeHello, { version: 1, frameBytesMax: 16 << 20, requestsInFlightMax: 1024, blobBytesMax: 16 << 20, readTurnsMax: 10_000, hasBlobsMax: 4096, serverName: "ctxstore" }],
  pong_response: [2, R(T.PING), 0, (r) => r.u64Big("nonce"), 0xdeadbeefn],
  ctx_create_response: [3, R(T.CTX_CREATE), 0, (r) => r.contextHead(), { contextId: 3, headTurnId: 0, headDepth: 0 }],
  get_head_response: [5, R(T.GET_HEAD), 0, (r) => r.contextHead(), { contextId: 3, headTurnId: 42, headDepth: 7 }],
  appended_response: [6, R(T.APPEND_TURN), 0, p.decodeAppended, { turn: TURN, deduped: false }],
  turn_response: [8, R(T.GET_TURN), 0, (r) => r.turn(), TURN],
  turns_response: [9, R(T.GET_LAST), 0, p.decodeTurns, { nextBefore: 42, tipDepth: 7, entries: [{ turn: TURN, payload: RAW_HELLO }] }],
  blob_response: [13, R(T.GET_BLOB), 0, (r) => r.payload(), RAW_HELLO],
  has_blobs_response: [14, R(T.HAS_BLOBS), 0, p.decodeHasBlobs, [true, false]],
  stats_response: [15, R(T.STATS), 0, p.decodeStats, { turns: 10, contexts: 2, blobs: 8, logicalBytes: 1000, uniqueBytes: 800, storedBytes: 500, dedupHits: 2, connections: 1, requestsTotal: 20, errorsTotal: 1, uptimeMs: 5000, readOnly: false }],
  error_conflict: [6, p.ERROR_TYPE, 0, p.decodeError, { code: 6, detail: 42, message: "head moved" }],
  error_bad_frame: [0, p.ERROR_TYPE, 0, p.decodeError, { code: 1, detail: 0, message: "bad" }],
  opened_response: [4, R(T.CTX_OPEN), 0, p.decodeOpened, { info: INFO_T1, created: true }],
  context_info_response: [6, R(T.CTX_SHOW), 0, (r) => r.contextInfo(), INFO_T1],
  context_list_response: [8, R(T.CTX_LIST), 0, p.decodeContextList, { nextCursor: 3, contexts: [{ head: { contextId: 3, headTurnId: 42, headDepth: 7 }, createdAtUnixMs: 1_767_225_600_000, updatedAtUnixMs: 1_767_225_601_000, name: undefined, tags: [] }] }],
  kv_put_response: [10, R(T.KV_PUT), 0, () => undefined, undefined],
  kv_value_response: [11, R(T.KV_GET), 0, p.decodeKvValue, { valueHash: HASH_A0, payload: { encoding: p.PayloadEncoding.RAW, rawLen: 2, data: utf8("v1") } }],
  kv_list_response: [13, R(T.KV_LIST), 0, p.decodeKvList, [{ key: utf8("w:1"), valueHash: HASH_A0, valueLen: 2 }]],
  kv_put_ex_response: [20, R(T.KV_PUT_EX), 0, () => undefined, undefined],
  kv_value_ex_response: [21, R(T.KV_GET_EX), 0, p.decodeKvValueEx, { valueHash: HASH_A0, ttlMs: 30_000, expiresAtUnixMs: 1_800_000_030_000, payload: { encoding: p.PayloadEncoding.RAW, rawLen: 2, data: utf8("v1") } }],
  kv_list_ex_response: [22, R(T.KV_LIST_EX), 0, p.decodeKvListEx, [
    { key: utf8("w:1"), valueHash: HASH_A0, valueLen: 2, ttlMs: 30_000, expiresAtUnixMs: 1_800_000_030_000 },
    { key: utf8("w:2"), valueHash: HASH_A0, valueLen: 2, ttlMs: 0, expiresAtUnixMs: 0 },
  ]],
  kv_touched_response: [23, R(T.KV_TOUCH), 0, p.decodeKvListEx, [{ key: utf8("w:1"), valueHash: HASH_A0, valueLen: 2, ttlMs: 30_000, expiresAtUnixMs: 1_800_000_045_000 }]],
  error_already_exists: [4, p.ERROR_TYPE, 0, p.decodeError, { code: 15, detail: 3, message: "name taken" }],
  appended_turns_response: [14, R(T.APPEND_TURNS), 0, p.decodeAppendedTurns, [{ turn: TURN, deduped: false, existing: true }]],
  turn_info_response: [15, R(T.GET_TURN_BY_KEY), 0, p.decodeTurnInfo, { turn: TURN, extras: { key: utf8("cp-1"), labels: [["step", "1"]], links: [] } }],
  turn_log_response: [16, R(T.TURN_LOG), 0, p.decodeTurnLog, { nextCursor: undefined, entries: [{ turn: TURN, extras: NO_EXTRAS, payload: RAW_HELLO }] }],
  page_response: [17, R(T.READ_PAGE), 0, p.decodePage, { nextBefore: 0, tipDepth: 7, entries: [{ turn: TURN, extras: NO_EXTRAS, payload: { encoding: p.PayloadEncoding.ABSENT, rawLen: 0, data: new Uint8Array(0) } }] }],
  found_turns_response: [18, R(T.FIND_TURNS), 0, p.decodeFoundTurns, { nextBefore: 42, turns: [{ turn: TURN, extras: { key: new Uint8Array(0), labels: [["run_id", "r1"]], links: [] } }] }],
  ctx_prune_response: [20, R(T.CTX_PRUNE), 0, p.decodeRetention, { info: { ...INFO_T1, name: "thread-1", tags: [] }, floorDepth: 7, ttlMs: 604_800_000 }],
  backup_response: [22, R(T.BACKUP), 0, p.decodeBackedUp, { turns: 1000, blobs: 800, bytes: 2 ** 30, linkedBytes: 2 ** 29, durationMs: 1234, dir: "/var/backups/ctxstore-1" }],
  gc_done_response: [23, R(T.GC), 0, p.decodeGcDone, { turnsDead: 1500, blobsDead: 1200, bytesReclaimed: 12 << 20, packsCompacted: 3, liveBytes: 2 ** 30, deadBytes: 2 << 20, durationMs: 4321 }],
  stats_ex_response: [24, R(T.STATS_EX), 0, p.decodeStatsEx, {
    stats: { turns: 1000, contexts: 10, blobs: 800, logicalBytes: 10 << 20, uniqueBytes: 8 << 20, storedBytes: 4 << 20, dedupHits: 200, connections: 2, requestsTotal: 5000, errorsTotal: 1, uptimeMs: 60_000, readOnly: false },
    liveBytes: 3 << 20, deadBytes: 1 << 20, gcRuns: 2, bytesReclaimedTotal: 5 << 20,
  }],
  replication_stats_response: [24, R(T.REPLICATION_STATS), 0, p.decodeReplicationStats, {
    role: "standby", state: "following", reason: "", promoting: false, target: "s3://agents/ctx",
    primary: "the primary at 10.0.0.5:7411 (host a1)", epoch: 3, generation: 2, seq: 41, records: 1200,
    recordsUnixMs: 1_800_000_000_000, lagMs: 1500, lagBytes: 4096, objectsTotal: 42, bytesTotal: 1 << 20,
    lastSuccessUnixMs: 1_800_000_001_000, backlogObjects: 1, segmentBytesMax: 64 << 20, failures: { store: 2 },
  }],
  kv_values_response: [25, R(T.KV_GET_MANY), 0, p.decodeKvValues, [
    { valueHash: HASH_A0, ttlMs: 30_000, expiresAtUnixMs: 1_800_000_030_000, payload: { encoding: p.PayloadEncoding.RAW, rawLen: 2, data: utf8("v1") } },
    undefined,
  ]],
  patch_turn_response: [23, R(T.PATCH_TURN), 0, p.decodePatched, { turnId: 42, overlaySeq: 57, payloadHash: HASH_A0, payloadLen: 5 }],
  redact_turn_response: [24, R(T.REDACT_TURN), 0, p.decodeRedacted, { turnId: 42, overlaySeq: 58 }],
  purge_blob_response: [25, R(T.PURGE_BLOB), 0, p.decodePurged, { payloadHash: HASH_A0, turnsRedacted: 3, overlaySeq: 62 }],
  turn_overlaid_response: [26, R(T.GET_TURN), p.OVERLAYS, p.asOf(p.getTurn(42), 57, () => 1).decode, { answer: TURN, overlays: [{ overlaySeq: 57, redacted: false }] }],
  page_overlaid_response: [27, R(T.READ_PAGE), p.OVERLAYS, p.asOf(p.readPage("t-1", p.PageKind.LAST, 0, 0, 10, 1), 0, (a) => a.entries.length).decode, {
    answer: { nextBefore: 0, tipDepth: 7, entries: [{ turn: { ...TURN, payloadHash: blobHash(new Uint8Array(0)), payloadLen: 0 }, extras: NO_EXTRAS, payload: { encoding: p.PayloadEncoding.RAW, rawLen: 0, data: new Uint8Array(0) } }] },
    overlays: [{ overlaySeq: 58, redacted: true }],
  }],
  chunked_stored_response: [29, R(T.PUT_CHUNKED), 0, p.decodeChunkedStored, { payloadHash: HASH_A0, payloadLen: 12, alreadyStored: false }],
  error_hash_mismatch: [29, p.ERROR_TYPE, 0, p.decodeError, { code: 16, detail: 0, message: "chunk 1 does not hash to 404142\u2026" }],
  role_primary_response: [60, R(T.ROLE), 0, p.decodeRole, {
    role: "primary", acceptsWrites: true, ackAfter: "local", epoch: 3, leaseMs: 10_000, leaseAgeMs: 1_200, ackOpenMs: 7_500,
    failovers: 1, lastFailoverMs: 12_400, remoteWaiting: 2, remoteAcksTotal: 1_000, remoteUnconfirmedTotal: 1,
    remoteAckUsP50: 45_000, remoteAckUsP99: 180_000, primary: "10.0.0.5:7411", holder: "a1:4242",
  }],
  role_standby_response: [61, R(T.ROLE), 0, p.decodeRole, {
    role: "standby", acceptsWrites: false, ackAfter: "local", epoch: 3, leaseMs: 0, leaseAgeMs: 0, ackOpenMs: 0,
    failovers: 0, lastFailoverMs: 0, remoteWaiting: 0, remoteAcksTotal: 0, remoteUnconfirmedTotal: 0,
    remoteAckUsP50: 0, remoteAckUsP99: 0, primary: "", holder: "",
  }],
  error_not_primary: [62, p.ERROR_TYPE, 0, p.decodeError, { code: 19, detail: 3, message: "not the primary: this store is a standby; send writes to 10.0.0.5:7411" }],
  error_unconfirmed: [62, p.ERROR_TYPE, 0, p.decodeError, { code: 20, detail: 42, message: "turn 42 is durable here but the object store did not store it in time" }],
  error_quota_exceeded: [70, p.ERROR_TYPE, 0, p.decodeError, { code: 21, detail: 100, message: "tenant acme is at its quota_contexts: 100 of 100 contexts" }],
  tenants_listed: [71, R(T.TENANT_LIST), 0, p.decodeTenants, {
    tenants: [{
      tenantId: 2, flags: p.TENANT_IN_FILE | p.TENANT_REGISTERED, rights: 0b011, name: "globex",
      contexts: 12, streamsOpen: 1, storedBytes: 40960, connections: 3,
      quotaBytes: 1_000_000, quotaContexts: 100, quotaAppendsPerS: 0, quotaConnections: 8, quotaStreams: 0, refusals: 5,
    }],
    next: "globex",
  }],
  tenant_deleted: [72, R(T.TENANT_DELETE), 0, p.decodeTenantDeleted, {
    tenantId: 1, flags: p.TENANT_KEYS_DESTROYED | p.TENANT_REPLICA_UPDATED,
  }],
  tenant_key_rotated: [73, R(T.TENANT_ROTATE_KEY), 0, p.decodeTenantKeyRotated, { tenantId: 2, keyVersion: 3 }],
  vector_index: [81, R(T.VECTOR_INDEX_CREATE), 0, p.decodeVectorIndex, MEMORIES],
  vector_index_dropped: [82, R(T.VECTOR_INDEX_DROP), 0, p.decodeVectorIndex, MEMORIES],
  vector_indexes: [83, R(T.VECTOR_INDEX_LIST), 0, p.decodeVectorIndexes, [MEMORIES]],
  kv_put_vectors_stored: [84, R(T.KV_PUT_VECTORS), 0, () => undefined, undefined],
  vector_hits: [85, R(T.VECTOR_SEARCH), 0, p.decodeVectorHits, {
    method: 0, candidates: 4, hits: [{ key: utf8("i/a"), score: 0.875, valueHash: range(0x30, 0x50), valueLen: 13 }],
  }],
  turns_stored: [86, R(T.APPEND_TURNS_VECTORS), 0, p.decodeAppendedTurns, [{ turn: TURN, deduped: false, existing: false }]],
  turn_hits: [87, R(T.VECTOR_SEARCH_TURNS), 0, p.decodeTurnHits, { method: 1, candidates: 300, hits: [{ turn: TURN, score: 0.75 }] }],
};

test("the version-7 messages need version 7; APPEND_TURNS_VECTORS takes ACK_AFTER", () => {
  expect(p.PROTOCOL_VERSION).toBe(7);
  expect(p.SUPPORTED_VERSIONS).toEqual([1, 7]);
  expect(REQUESTS["vector_search_turns"]![1].minVersion).toBe(7);
  const append = p.ackAfter(REQUESTS["append_turns_vectors"]![1], "remote");
  expect([append.flags, append.minVersion]).toEqual([2 << p.ACK_AFTER_SHIFT, 7]);
  expect(() => p.ackAfter(p.vectorSearchTurns(VECTOR_SEARCH_TURNS_GOLDEN), "local")).toThrow(/ACK_AFTER/);
});

test("the version-6 messages need version 6; KV_PUT_VECTORS takes ACK_AFTER", () => {
  for (const request of [p.vectorIndexCreate("m", 3, p.VectorMetric.L2, 0), p.vectorIndexDrop("m"), p.vectorIndexList(), REQUESTS["vector_search"]![1]]) {
    expect(request.minVersion).toBe(6);
  }
  const put = p.ackAfter(REQUESTS["kv_put_vectors"]![1], "local");
  expect([put.flags, put.minVersion]).toEqual([1 << p.ACK_AFTER_SHIFT, 6]);
  expect(() => p.ackAfter(p.vectorSearch({ ...VECTOR_SEARCH_FIELDS }), "local")).toThrow(/ACK_AFTER/);
});

test("ACK_AFTER goes only on the writes that take it, and needs version 4", () => {
  expect(() => p.ackAfter(p.getHead(3), "local")).toThrow(/ACK_AFTER/);
  const write = p.ackAfter(p.appendTurn(3, undefined, 1n, 0, utf8("x")), "remote");
  expect([write.flags, write.minVersion]).toEqual([2 << p.ACK_AFTER_SHIFT, 4]);
  expect(() => p.ackAfter(write, "local")).toThrow(/ACK_AFTER/);
  expect(p.role().minVersion).toBe(4);
});

test("every golden frame is covered", () => {
  expect(new Set([...Object.keys(REQUESTS), ...Object.keys(ANSWERS)])).toEqual(new Set(GOLDEN.keys()));
});

test("QUOTA_EXCEEDED (version 5) is QuotaExceeded, its limit the detail", () => {
  const frame = GOLDEN.get("error_quota_exceeded")!;
  const answer = p.decodeBody("ERROR", frame.subarray(p.HEADER_BYTES), p.decodeError);
  const error = errorForCode(answer.code, answer.message, answer.detail);
  expect(error).toBeInstanceOf(QuotaExceeded);
  expect([error.code, error.codeName, (error as QuotaExceeded).limit, error.detail]).toEqual([21, "QUOTA_EXCEEDED", 100, 100]);
  expect(error.message).toBe("QUOTA_EXCEEDED (21): tenant acme is at its quota_contexts: 100 of 100 contexts");
});

describe("requests encode to their golden bytes", () => {
  for (const [name, [reqId, request]] of Object.entries(REQUESTS)) {
    test(name, () => {
      expect(Buffer.from(p.requestFrame(BigInt(reqId), request)).toString("hex")).toBe(Buffer.from(GOLDEN.get(name)!).toString("hex"));
    });
  }
});

describe("answers decode to their documented values", () => {
  for (const [name, [reqId, msgType, flags, decode, expected]] of Object.entries(ANSWERS)) {
    test(name, () => {
      const frame = GOLDEN.get(name)!;
      const header = p.decodeHeader(frame.subarray(0, p.HEADER_BYTES));
      expect(header).toEqual({ len: frame.length - p.HEADER_BYTES, msgType, flags, reqId: BigInt(reqId) });
      expect(p.decodeBody(name, frame.subarray(p.HEADER_BYTES), decode)).toEqual(expected);
    });
  }
});

test("a decoder refuses a body one byte short or one byte long", () => {
  const frame = GOLDEN.get("turns_response")!;
  const body = frame.subarray(p.HEADER_BYTES);
  expect(() => p.decodeBody("TURNS", body.subarray(0, body.length - 1), p.decodeTurns)).toThrow(/too short/);
  const longer = new Uint8Array(body.length + 1);
  longer.set(body);
  expect(() => p.decodeBody("TURNS", longer, p.decodeTurns)).toThrow(/after its end/);
  const reserved = body.slice();
  reserved[16 + 88 + 2] = 1; // the PAYLOAD's reserved u16
  expect(() => p.decodeBody("TURNS", reserved, p.decodeTurns)).toThrow(/reserved/);
});

test("TENANT_LIST (version 5) refuses what its layout forbids, both ways", () => {
  expect(p.tenantList("", 1000).minVersion).toBe(5);
  expect(p.requestFrame(1n, p.tenantList("x".repeat(64), 1000)).length).toBe(16 + 2 + 64 + 4);
  expect(() => p.tenantList("x".repeat(65), 1)).toThrow(RangeError);
  expect(() => p.tenantList("", 0)).toThrow(RangeError);
  expect(() => p.tenantList("", 1001)).toThrow(RangeError);
  // count (4), tenant_id (4), flags (1), rights (1), name_len (2) and "globex", ten u64,
  // next_len (2) and "globex".
  const body = GOLDEN.get("tenants_listed")!.subarray(p.HEADER_BYTES);
  const nameEnd = 4 + 4 + 1 + 1 + 2 + 6;
  const u16 = (value: number): Uint8Array => Uint8Array.of(value & 0xff, value >> 8);
  const u32 = (value: number): Uint8Array => Uint8Array.of(value & 0xff, (value >> 8) & 0xff, 0, 0);
  const broken: Record<string, [Uint8Array, RegExp]> = {
    flags: [p.concat([body.subarray(0, 8), Uint8Array.of(0x0b), body.subarray(9)]), /flags/],
    rights: [p.concat([body.subarray(0, 9), Uint8Array.of(0x0b), body.subarray(10)]), /rights/],
    "empty name": [p.concat([body.subarray(0, 10), u16(0), body.subarray(nameEnd)]), /name/],
    "name over 64": [p.concat([body.subarray(0, 10), u16(65), utf8("g".repeat(65)), body.subarray(nameEnd)]), /name/],
    "count over 1000": [p.concat([u32(1001), body.subarray(4)]), /count/],
    "next over 64": [p.concat([body.subarray(0, body.length - 8), u16(65), utf8("z".repeat(65))]), /next/],
    "trailing byte": [p.concat([body, Uint8Array.of(0)]), /after its end/],
    "one byte short": [body.subarray(0, body.length - 1), /too short/],
  };
  for (const [, [bytes, message]] of Object.entries(broken)) {
    expect(() => p.decodeBody("TENANTS", bytes, p.decodeTenants)).toThrow(message);
  }
  // Bit 2, DELETED (TENANT_DELETE), is known.
  const deleted = p.concat([body.subarray(0, 8), Uint8Array.of(p.TENANT_REGISTERED | p.TENANT_DELETED), body.subarray(9)]);
  expect(p.decodeBody("TENANTS", deleted, p.decodeTenants).tenants[0]!.flags).toBe(0b110);
});

test("TENANT_DELETE (version 5) refuses what its layout forbids, both ways", () => {
  expect(p.tenantDelete("acme").minVersion).toBe(5);
  expect(p.requestFrame(1n, p.tenantDelete("x".repeat(64))).length).toBe(16 + 2 + 64);
  expect(p.requestFrame(1n, p.tenantDelete("é".repeat(32))).length).toBe(16 + 2 + 64);
  for (const name of ["", "x".repeat(65), "é".repeat(33)]) {
    expect(() => p.tenantDelete(name)).toThrow(RangeError);
  }
  // tenant_id (4, never 0), flags (4: bits 0 and 1 only).
  const body = GOLDEN.get("tenant_deleted")!.subarray(p.HEADER_BYTES);
  const u32 = (value: number): Uint8Array => {
    const bytes = new Uint8Array(4);
    new DataView(bytes.buffer).setUint32(0, value, true);
    return bytes;
  };
  const broken: Record<string, [Uint8Array, RegExp]> = {
    "tenant_id 0": [p.concat([u32(0), body.subarray(4)]), /tenant_id/],
    "flags bit 2": [p.concat([body.subarray(0, 4), u32(0b111)]), /flags/],
    "flags bit 31": [p.concat([body.subarray(0, 4), u32(0x8000_0001)]), /flags/],
    "trailing byte": [p.concat([body, Uint8Array.of(0)]), /after its end/],
    "one byte short": [body.subarray(0, body.length - 1), /too short/],
  };
  for (const [, [bytes, message]] of Object.entries(broken)) {
    expect(() => p.decodeBody("TENANT_DELETED", bytes, p.decodeTenantDeleted)).toThrow(message);
  }
  for (const flags of [0, 1, 2, 3]) {
    expect(p.decodeBody("TENANT_DELETED", p.concat([u32(7), u32(flags)]), p.decodeTenantDeleted)).toEqual({ tenantId: 7, flags });
  }
});

test("TENANT_ROTATE_KEY (version 5) refuses what its layout forbids, both ways", () => {
  expect(p.tenantRotateKey("globex").minVersion).toBe(5);
  expect(p.tenantRotateKey("globex").name).toBe("TENANT_ROTATE_KEY");
  // TENANT_DELETE's body: u16 len, the name.
  expect(Buffer.from(GOLDEN.get("tenant_rotate_key")!.subarray(p.HEADER_BYTES)).toString("hex")).toBe("0600676c6f626578");
  expect(p.requestFrame(1n, p.tenantRotateKey("x".repeat(64))).length).toBe(16 + 2 + 64);
  expect(p.requestFrame(1n, p.tenantRotateKey("é".repeat(32))).length).toBe(16 + 2 + 64);
  for (const name of ["", "x".repeat(65), "é".repeat(33)]) {
    expect(() => p.tenantRotateKey(name)).toThrow(RangeError);
  }
  // tenant_id (4, 0 allowed: the operator), key_version (2, never 0), reserved (2, zero).
  const body = GOLDEN.get("tenant_key_rotated")!.subarray(p.HEADER_BYTES);
  expect(body.length).toBe(8);
  const broken: Record<string, [Uint8Array, RegExp]> = {
    "key_version 0": [p.concat([body.subarray(0, 4), Uint8Array.of(0, 0), body.subarray(6)]), /key_version/],
    "reserved 1": [p.concat([body.subarray(0, 6), Uint8Array.of(1, 0)]), /reserved/],
    "reserved bit 15": [p.concat([body.subarray(0, 6), Uint8Array.of(0, 0x80)]), /reserved/],
    "trailing byte": [p.concat([body, Uint8Array.of(0)]), /after its end/],
    "one byte short": [body.subarray(0, body.length - 1), /too short/],
    "no reserved": [body.subarray(0, 6), /too short/],
    "twelve bytes": [p.concat([body, new Uint8Array(4)]), /after its end/],
  };
  for (const [, [bytes, message]] of Object.entries(broken)) {
    expect(() => p.decodeBody("TENANT_KEY_ROTATED", bytes, p.decodeTenantKeyRotated)).toThrow(message);
  }
  const answer = (tenantId: number, keyVersion: number): Uint8Array => {
    const bytes = new Uint8Array(8);
    const view = new DataView(bytes.buffer);
    view.setUint32(0, tenantId, true);
    view.setUint16(4, keyVersion, true);
    return bytes;
  };
  for (const [tenantId, keyVersion] of [[0, 1], [7, 64], [0xffff_ffff, 0xffff]] as const) {
    expect(p.decodeBody("TENANT_KEY_ROTATED", answer(tenantId, keyVersion), p.decodeTenantKeyRotated)).toEqual({ tenantId, keyVersion });
  }
});
