// LangGraph.js checkpointers side by side, and the TypeScript client's 64-turn read, on one
// machine in one run (benches/langgraph_js_bench.sh starts the servers and calls this).
//
// 1. Savers: ctxstore's CtxstoreSaver vs @langchain/langgraph-checkpoint-postgres vs
//    @langchain/langgraph-checkpoint-sqlite on the same graph — the agent loop of
//    benches/langgraph_bench.py: one node appends a ~1 KiB assistant message (chat-like text)
//    to a growing message list and loops back for SUPERSTEPS supersteps, each checkpointed
//    before the next starts (durability "sync"). Per backend, RUNS runs, each on a fresh store:
//    time per superstep (the gaps between the supersteps `graph.stream` yields, p50/p99),
//    getState of the finished thread (p50), bytes on disk at the end of the run (one thread):
//    ctxstore's data directory, the SQLite file with its WAL (allocated blocks), PostgreSQL's
//    checkpoint tables (pg_total_relation_size).
// 2. Reads: 64 turns of 10 KiB chat-like payloads read back with their payloads, READS times:
//    wall p50 and the client's CPU per read (process.cpuUsage), ctxstore raw (the default), raw
//    with the server's payload cache off (the server inflates its zstd), zstd (cache off, this
//    client inflates with fzstd and hashes), each also with verifyPayloads "always"; the peers:
//    PostgreSQL (64 bytea rows, pg) and SQLite (64 rows, better-sqlite3, in process).
//
// Durability is alike: ctxstore fsyncs every acknowledged write, PostgreSQL runs
// synchronous_commit=on, SQLite WAL with synchronous=FULL.

import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";

import { AIMessage, HumanMessage } from "@langchain/core/messages";
import { END, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { PostgresSaver } from "@langchain/langgraph-checkpoint-postgres";
import { SqliteSaver } from "@langchain/langgraph-checkpoint-sqlite";
import Database from "better-sqlite3";
import { Client } from "@ctxstore/client";
import { CtxstoreSaver } from "@ctxstore/client/langgraph";
import pg from "pg";

const args = Object.fromEntries(
  process.argv.slice(2).map((arg) => {
    const [k, v] = arg.replace(/^--/, "").split("=");
    return [k, v ?? "1"];
  }),
);
const SERVER_BIN = args["server-bin"];
const PG_DSN = args["pg-dsn"];
const WORK = args["dir"] ?? mkdtempSync(path.join(os.tmpdir(), "lgjs-bench-"));
const RUNS = Number(args["runs"] ?? 3);
const SUPERSTEPS = Number(args["supersteps"] ?? 200);
const GETS = Number(args["gets"] ?? 50);
const READS = Number(args["reads"] ?? 300);
const MESSAGE_BYTES = 1024;

const WORDS = (
  "the a to of and in is that for it on with as was be this are by at from or an have " +
  "not you can will which tool call result search query agent model context answer " +
  "message user assistant function returns value list file data step plan next think " +
  "error retry found page text summary request response token json field name id time " +
  "first then after before when because however also more less each every other some " +
  "weather report city temperature forecast price order customer account invoice " +
  "document section paragraph code test build deploy server client database table row"
).split(" ");

function rng(seed) {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return state / 4294967296;
  };
}

function chatText(random, size) {
  const words = [];
  let length = 0;
  while (length < size) {
    const word = WORDS[Math.floor(random() * WORDS.length)];
    words.push(word);
    length += word.length + 1;
  }
  return words.join(" ").slice(0, size);
}

function pct(samples, q) {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((q / 100) * sorted.length))];
}

function median(values) {
  return pct(values, 50);
}

/** Blocks allocated under `dir`, without ctxstore's RESERVE file: disk the server keeps
 * allocated for garbage collection alone (--disk-reserve, 64 MiB by default), not data. */
function allocatedBytes(dir) {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === "RESERVE") continue;
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) total += allocatedBytes(full);
    else if (entry.isFile()) total += statSync(full).blocks * 512;
  }
  return total;
}

async function startServer(dir, extra = []) {
  const ready = path.join(dir, "ready");
  const data = path.join(dir, "data");
  mkdirSync(dir, { recursive: true });
  const child = spawn(SERVER_BIN, ["--data", data, "--listen", "127.0.0.1:0", "--ready-file", ready, "--no-preallocate", ...extra], {
    stdio: ["ignore", "ignore", "inherit"],
  });
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    if (existsSync(ready) && readFileSync(ready, "utf8").trim() !== "") {
      const text = readFileSync(ready, "utf8").trim();
      return { addr: `127.0.0.1:${text.slice(text.lastIndexOf(":") + 1)}`, data, stop: () => new Promise((r) => { child.once("exit", r); child.kill("SIGTERM"); }) };
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  child.kill("SIGKILL");
  throw new Error("ctxstore-server did not start");
}

function buildGraph(checkpointer, seed) {
  const random = rng(seed);
  return new StateGraph(MessagesAnnotation)
    .addNode("agent", () => ({ messages: [new AIMessage(chatText(random, MESSAGE_BYTES))] }))
    .addEdge(START, "agent")
    .addConditionalEdges("agent", (state) => (state.messages.length > SUPERSTEPS ? END : "agent"))
    .compile({ checkpointer });
}

async function runGraph(checkpointer, seed) {
  const graph = buildGraph(checkpointer, seed);
  const config = { configurable: { thread_id: `bench-${seed}` }, recursionLimit: SUPERSTEPS + 10, durability: "sync", streamMode: "updates" };
  const random = rng(seed + 1);
  const gaps = [];
  const started = performance.now();
  let last = started;
  for await (const _ of await graph.stream({ messages: [new HumanMessage(chatText(random, 300))] }, config)) {
    const now = performance.now();
    gaps.push(now - last);
    last = now;
  }
  const whole = performance.now() - started;
  const gets = [];
  let messages = 0;
  for (let i = 0; i < GETS; i++) {
    const t0 = performance.now();
    const state = await graph.getState({ configurable: { thread_id: `bench-${seed}` } });
    gets.push(performance.now() - t0);
    messages = state.values.messages.length;
  }
  if (messages !== SUPERSTEPS + 1) throw new Error(`the thread has ${messages} messages, expected ${SUPERSTEPS + 1}`);
  return { gaps, gets, whole };
}

const backends = {
  async ctxstore(run) {
    const dir = path.join(WORK, `ctxstore-${run}`);
    const server = await startServer(dir);
    const saver = CtxstoreSaver.fromAddr(server.addr);
    try {
      const result = await runGraph(saver, 1000 + run);
      return { ...result, bytes: allocatedBytes(server.data) };
    } finally {
      await saver.close();
      await server.stop();
    }
  },
  async postgres(run) {
    const pool = new pg.Pool({ connectionString: PG_DSN });
    const schema = `lgjs_${run}_${process.pid}`;
    await pool.query(`CREATE SCHEMA ${schema}`);
    await pool.end();
    const saver = PostgresSaver.fromConnString(PG_DSN, { schema });
    await saver.setup();
    try {
      const result = await runGraph(saver, 1000 + run);
      const sizes = new pg.Pool({ connectionString: PG_DSN });
      const { rows } = await sizes.query(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint AS bytes FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'",
        [schema],
      );
      await sizes.end();
      return { ...result, bytes: Number(rows[0].bytes) };
    } finally {
      await saver.end();
    }
  },
  async sqlite(run) {
    const dir = path.join(WORK, `sqlite-${run}`);
    mkdirSync(dir, { recursive: true });
    const db = new Database(path.join(dir, "checkpoints.db"));
    const saver = new SqliteSaver(db);
    // Durability like the others: WAL (the saver's), synchronous=FULL (an fsync per commit).
    db.pragma("journal_mode=WAL");
    db.pragma("synchronous=FULL");
    try {
      const result = await runGraph(saver, 1000 + run);
      db.pragma("wal_checkpoint(PASSIVE)");
      return { ...result, bytes: allocatedBytes(dir) };
    } finally {
      db.close();
    }
  },
};

function fmtMs(v) {
  return v < 10 ? v.toFixed(2) : v.toFixed(1);
}

async function saverTable() {
  const rows = [];
  for (const [name, backend] of Object.entries(backends)) {
    if (name === "postgres" && !PG_DSN) continue;
    const perRun = [];
    for (let run = 0; run < RUNS; run++) perRun.push(await backend(run));
    rows.push({
      name,
      superstepP50: median(perRun.map((r) => pct(r.gaps, 50))),
      superstepP99: median(perRun.map((r) => pct(r.gaps, 99))),
      getP50: median(perRun.map((r) => pct(r.gets, 50))),
      wholeMs: median(perRun.map((r) => r.whole)),
      bytes: median(perRun.map((r) => r.bytes)),
    });
  }
  return rows;
}

async function measureReads(read, count) {
  for (let i = 0; i < 20; i++) await read(); // warm up
  const walls = [];
  const cpu0 = process.cpuUsage();
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    await read();
    walls.push(performance.now() - t0);
  }
  const cpu = process.cpuUsage(cpu0);
  return { p50: pct(walls, 50), p99: pct(walls, 99), cpuUs: (cpu.user + cpu.system) / count };
}

async function readTable() {
  const random = rng(77);
  const payloads = Array.from({ length: 64 }, () => new TextEncoder().encode(chatText(random, 10_240)));
  const rows = [];
  for (const [label, serverArgs] of [["cache on", []], ["cache off", ["--payload-cache-bytes", "0"]]]) {
    const server = await startServer(path.join(WORK, `reads-${label.replace(" ", "-")}`), serverArgs);
    try {
      const writer = await Client.connect(server.addr, { chunking: false });
      const ctx = await writer.createContext();
      for (const payload of payloads) await writer.append(ctx.contextId, payload);
      await writer.close();
      const variants = label === "cache on"
        ? [["raw", { acceptZstd: false }], ["raw, verify always", { acceptZstd: false, verifyPayloads: "always" }]]
        : [["raw (server inflates)", { acceptZstd: false }], ["zstd (client inflates)", { acceptZstd: true }], ["raw, verify always", { acceptZstd: false, verifyPayloads: "always" }]];
      for (const [variant, options] of variants) {
        const client = await Client.connect(server.addr, options);
        const before = client.bytesReceived;
        const check = await client.last(ctx.contextId, 64, { payloads: true });
        if (check.turns.length !== 64 || check.turns.some((t, i) => t.payload.length !== payloads[i].length)) throw new Error("bad read");
        const wire = client.bytesReceived - before;
        const m = await measureReads(() => client.last(ctx.contextId, 64, { payloads: true }), READS);
        rows.push({ name: `ctxstore, ${label}: ${variant}`, ...m, wire });
        await client.close();
      }
    } finally {
      await server.stop();
    }
  }
  if (PG_DSN) {
    const client = new pg.Client({ connectionString: PG_DSN });
    await client.connect();
    await client.query("CREATE TEMP TABLE turns (ctx int, depth int, payload bytea, PRIMARY KEY (ctx, depth))");
    for (let i = 0; i < 64; i++) await client.query("INSERT INTO turns VALUES (1, $1, $2)", [i, Buffer.from(payloads[i])]);
    const m = await measureReads(async () => {
      const { rows: got } = await client.query("SELECT depth, payload FROM turns WHERE ctx = 1 ORDER BY depth DESC LIMIT 64");
      if (got.length !== 64) throw new Error("bad read");
    }, READS);
    rows.push({ name: "PostgreSQL 15 (pg, 64 bytea rows)", ...m, wire: undefined });
    await client.end();
  }
  const db = new Database(path.join(WORK, "reads.db"));
  db.pragma("journal_mode=WAL");
  db.exec("CREATE TABLE turns (ctx INTEGER, depth INTEGER, payload BLOB, PRIMARY KEY (ctx, depth))");
  const insert = db.prepare("INSERT INTO turns VALUES (1, ?, ?)");
  payloads.forEach((payload, i) => insert.run(i, Buffer.from(payload)));
  const select = db.prepare("SELECT depth, payload FROM turns WHERE ctx = 1 ORDER BY depth DESC LIMIT 64");
  const m = await measureReads(async () => {
    if (select.all().length !== 64) throw new Error("bad read");
  }, READS);
  rows.push({ name: "SQLite (better-sqlite3, in process)", ...m, wire: undefined });
  db.close();
  return rows;
}

const savers = await saverTable();
const reads = await readTable();
const load = readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
console.log(`\n${os.cpus().length} CPUs (${os.cpus()[0].model}), Node ${process.version}, load after the run ${load}`);
console.log(`\nLangGraph.js savers, ${SUPERSTEPS} supersteps of a ~1 KiB message, median of ${RUNS} runs:\n`);
console.log("| checkpointer | superstep p50 | superstep p99 | getState p50 | whole run | bytes on disk (one thread) |");
console.log("|---|---:|---:|---:|---:|---:|");
for (const r of savers) {
  console.log(`| ${r.name} | ${fmtMs(r.superstepP50)} ms | ${fmtMs(r.superstepP99)} ms | ${fmtMs(r.getP50)} ms | ${(r.wholeMs / 1000).toFixed(2)} s | ${(r.bytes / 1024).toFixed(0)} KiB |`);
}
console.log(`\n64-turn read of 10 KiB chat-like payloads, ${READS} reads each:\n`);
console.log("| reader | p50 | p99 | client CPU per read | bytes received per read |");
console.log("|---|---:|---:|---:|---:|");
for (const r of reads) {
  console.log(`| ${r.name} | ${fmtMs(r.p50)} ms | ${fmtMs(r.p99)} ms | ${Math.round(r.cpuUs)} µs | ${r.wire === undefined ? "—" : `${(r.wire / 1024).toFixed(0)} KiB`} |`);
}
if (args["json"]) {
  const { writeFileSync } = await import("node:fs");
  writeFileSync(args["json"], JSON.stringify({ savers, reads, supersteps: SUPERSTEPS, runs: RUNS, load }, null, 2));
}
