/**
 * A real ctxstore-server for the tests, on a temporary data directory and a free loopback port
 * (no mocks). The binary: $CTXSTORE_SERVER_BIN, else the repository's target/debug or
 * target/release build. A test that needs a server fails with a clear message when there is
 * none; it is never skipped.
 */

import { spawn, type ChildProcess } from "node:child_process";
import { accessSync, constants, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const PACKAGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const REPO_ROOT = path.resolve(PACKAGE_DIR, "..", "..");

export function serverBinary(): string {
  const configured = process.env["CTXSTORE_SERVER_BIN"];
  if (configured !== undefined && configured !== "") {
    try {
      accessSync(configured, constants.X_OK);
    } catch {
      throw new Error(`CTXSTORE_SERVER_BIN=${configured} is not an executable file`);
    }
    return configured;
  }
  for (const candidate of ["debug", "release"].map((kind) => path.join(REPO_ROOT, "target", kind, "ctxstore-server"))) {
    if (existsSync(candidate)) return candidate;
  }
  throw new Error("no ctxstore-server binary: set CTXSTORE_SERVER_BIN or build it (cargo build -p ctxstore-server)");
}

export class Server {
  readonly dir: string;
  private process: ChildProcess | undefined;
  port = 0;

  private constructor(readonly token: string | undefined, readonly extraArgs: string[]) {
    this.dir = mkdtempSync(path.join(tmpdir(), "ctxstore-ts-"));
  }

  get addr(): string {
    return `127.0.0.1:${this.port}`;
  }

  get dataDir(): string {
    return path.join(this.dir, "data");
  }

  /** Starts a server (on a free port the first time, the same one on a restart). */
  static async start(options: { token?: string; args?: string[] } = {}): Promise<Server> {
    const server = new Server(options.token, options.args ?? []);
    await server.launch();
    return server;
  }

  async launch(): Promise<void> {
    const ready = path.join(this.dir, "ready");
    rmSync(ready, { force: true });
    const args = [
      "--data", this.dataDir,
      "--listen", `127.0.0.1:${this.port}`,
      "--ready-file", ready,
      "--network-cores", "1",
      "--no-preallocate",
      ...this.extraArgs,
    ];
    if (this.token !== undefined) {
      const tokenFile = path.join(this.dir, "token");
      writeFileSync(tokenFile, `${this.token}\n`);
      args.push("--token-file", tokenFile);
    }
    const deadline = Date.now() + 20_000;
    const log = path.join(this.dir, "server.log");
    for (;;) {
      const { openSync } = await import("node:fs");
      const fd = openSync(log, "a");
      const child = spawn(serverBinary(), args, { stdio: ["ignore", fd, fd] });
      this.process = child;
      let exited = false;
      child.on("exit", () => {
        exited = true;
      });
      while (Date.now() < deadline && !exited) {
        if (existsSync(ready)) {
          const text = readFileSync(ready, "utf8").trim();
          if (text !== "") {
            this.port = Number(text.slice(text.lastIndexOf(":") + 1));
            return;
          }
        }
        await new Promise((r) => setTimeout(r, 20));
      }
      if (!exited || Date.now() >= deadline) {
        await this.kill();
        throw new Error(`ctxstore-server did not start; log: ${this.log()}`);
      }
      await new Promise((r) => setTimeout(r, 200)); // the port may still be held: retry
    }
  }

  log(): string {
    try {
      return readFileSync(path.join(this.dir, "server.log"), "utf8").slice(-4096);
    } catch {
      return "(no log)";
    }
  }

  /** SIGSTOP: the server keeps its sockets but answers nothing. Returns once every thread of
   * the server has stopped: a stop is asynchronous, and a thread not yet stopped can answer a
   * request sent right after the signal (on a busy machine it did). */
  pause(): void {
    const pid = this.process?.pid;
    if (pid === undefined) throw new Error("pause: the server is not running");
    this.process?.kill("SIGSTOP");
    const deadline = Date.now() + 10_000;
    const tick = new Int32Array(new SharedArrayBuffer(4));
    while (!allThreadsStopped(pid)) {
      if (Date.now() > deadline) throw new Error(`the server (pid ${pid}) did not stop within 10 s of SIGSTOP`);
      Atomics.wait(tick, 0, 0, 1); // 1 ms
    }
  }

  resume(): void {
    this.process?.kill("SIGCONT");
  }

  async kill(): Promise<void> {
    const child = this.process;
    this.process = undefined;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await gone;
  }

  /** Kills the server and removes its directory. */
  async stop(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Whether every thread of process `pid` is stopped (`T`, or `t` when traced), from
 * /proc/PID/task/TID/stat: the state is the first field after the command's ")". */
function allThreadsStopped(pid: number): boolean {
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return false;
  }
  let seen = 0;
  for (const task of tasks) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/task/${task}/stat`, "utf8");
    } catch {
      continue; // the thread exited meanwhile
    }
    const state = stat.slice(stat.lastIndexOf(") ") + 2, stat.lastIndexOf(") ") + 3);
    if (state !== "T" && state !== "t") return false;
    seen++;
  }
  return seen > 0;
}
