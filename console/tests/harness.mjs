// What the browser tests and the page-load figure share: a real ctxstore-server on a
// temporary store with its console, the ctxstore CLI and the seed_tree example to fill it,
// and Debian's Chromium driven by playwright-core.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const here = dirname(new URL(import.meta.url).pathname);
export const repository = resolve(here, "../..");

/** The binaries: CTXSTORE_SERVER_BIN (default target/debug), the CLI and example beside it. */
export function binaries() {
  const server = process.env.CTXSTORE_SERVER_BIN ?? join(repository, "target/debug/ctxstore-server");
  const bin = dirname(server);
  return {
    server,
    cli: process.env.CTXSTORE_CLI_BIN ?? join(bin, "ctxstore"),
    seedTree: process.env.CTXSTORE_SEED_TREE_BIN ?? join(bin, "examples/seed_tree"),
  };
}

/** `path`, which must exist (built by cargo test, or cargo build --bins --examples). */
function built(what, path) {
  if (!existsSync(path)) {
    throw new Error(`${what} not found at ${path}: run cargo test (or cargo build --bins --examples) first`);
  }
  return path;
}

/**
 * Starts ctxstore-server on a fresh store with --console-listen on a free loopback port;
 * resolves once both listen: { addr, console (http://…), dir, stop() }. `flags`: more of the
 * server's flags; each `{dir}` in them is the server's scratch directory.
 */
export async function startServer({ token, serverBin, flags = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "ctxstore-console-"));
  const args = [
    "--data", join(dir, "data"),
    "--listen", "127.0.0.1:0",
    "--console-listen", "127.0.0.1:0",
    "--log-format", "json",
    "--network-cores", "1",
    ...flags.map((flag) => flag.replaceAll("{dir}", dir)),
  ];
  if (token) {
    writeFileSync(join(dir, "token"), token, { mode: 0o600 });
    args.push("--token-file", join(dir, "token"));
  }
  const child = spawn(built("ctxstore-server (CTXSTORE_SERVER_BIN)", serverBin ?? binaries().server), args, { stdio: ["ignore", "ignore", "pipe"] });
  const lines = createInterface({ input: child.stderr });
  let addr = null;
  let console = null;
  const log = [];
  await new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => reject(new Error(`the server did not start:\n${log.join("\n")}`)), 30_000);
    child.on("exit", (code) => reject(new Error(`the server exited (${code}):\n${log.join("\n")}`)));
    lines.on("line", (line) => {
      log.push(line);
      let fields = {};
      try {
        fields = JSON.parse(line).fields ?? {};
      } catch {
        return;
      }
      if (fields.console) console = fields.console;
      if (fields.listen) addr = fields.listen;
      if (addr && console) {
        clearTimeout(timer);
        resolvePromise();
      }
    });
  });
  return {
    addr,
    console: `http://${console}`,
    dir,
    log,
    async stop() {
      child.kill("SIGTERM");
      await new Promise((done) => (child.exitCode !== null ? done() : child.on("exit", done)));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Runs the CLI against `addr` (with --json); returns the parsed lines. */
export function cli(addr, args, { input, token } = {}) {
  const global = ["--addr", addr, "--json"];
  if (token) global.push("--token", token);
  const result = spawnSync(built("ctxstore (CTXSTORE_CLI_BIN)", binaries().cli), [...global, ...args], { input, encoding: "utf8" });
  if (result.status !== 0) throw new Error(`ctxstore ${args.join(" ")} failed (${result.status}): ${result.stderr}`);
  return result.stdout
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line));
}

/** Seeds a context of `turns` turns with a branch every `branchEvery` (the seed_tree example). */
export function seedTree(addr, name, turns, branchEvery) {
  const result = spawnSync(built("the seed_tree example (CTXSTORE_SEED_TREE_BIN)", binaries().seedTree), [addr, name, String(turns), String(branchEvery)], { encoding: "utf8" });
  if (result.status !== 0) throw new Error(`seed_tree failed (${result.status}): ${result.stderr}`);
  return JSON.parse(result.stdout);
}

/** Debian's Chromium, headless, on a fresh profile: { newPage(options), close() }. */
export async function launchBrowser() {
  const profile = mkdtempSync(join(tmpdir(), "ctxstore-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM_BIN ?? "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1400, height: 900 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  return {
    newPage: () => context.newPage(),
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Where screenshots go: CTXSTORE_ARTIFACTS_DIR, else console/test-results. */
export function artifactsDir() {
  const dir = process.env.CTXSTORE_ARTIFACTS_DIR ?? join(repository, "console/test-results");
  mkdirSync(dir, { recursive: true });
  return dir;
}
