// The console's page-load figure (issue 37, benches/results/HISTORY.md): a context of TURNS turns
// (a branch every BRANCH_EVERY), opened RUNS times in headless Chromium; each run's time
// from navigation start to the tree drawn (the `ctxstore:tree-ready` mark), to the tree's
// JSON received, and the tree request's own duration; the medians (the first run, which
// warms caches, not counted).
//
//   CTXSTORE_SERVER_BIN=… node tests/bench-tree.mjs [TURNS] [BRANCH_EVERY] [RUNS]
import { launchBrowser, seedTree, startServer } from "./harness.mjs";

const turns = Number(process.argv[2] ?? 10_000);
const branchEvery = Number(process.argv[3] ?? 20);
const runs = Number(process.argv[4] ?? 11);
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

const server = await startServer();
const chromium = await launchBrowser();
try {
  const seeded = seedTree(server.addr, "bench", turns, branchEvery);
  const ready = [];
  const api = [];
  const request = [];
  let drawn = 0;
  for (let run = 0; run < runs; run += 1) {
    const page = await chromium.newPage();
    await page.goto(`${server.console}/contexts/${seeded.context_id}`);
    await page.waitForSelector("[data-testid=graph][data-ready=true]", { timeout: 60_000 });
    const timing = await page.evaluate(() => ({
      ready: performance.getEntriesByName("ctxstore:tree-ready")[0].startTime,
      api: performance.getEntriesByType("resource").find((entry) => entry.name.endsWith("/tree"))?.responseEnd ?? 0,
      request: performance.getEntriesByType("resource").find((entry) => entry.name.endsWith("/tree"))?.duration ?? 0,
      drawn: Number(document.querySelector("[data-testid=graph]").getAttribute("data-nodes")),
    }));
    await page.close();
    // The first run warms the server's caches and the browser's: not counted.
    if (run === 0) continue;
    ready.push(timing.ready);
    api.push(timing.api);
    request.push(timing.request);
    drawn = timing.drawn;
  }
  console.log(
    JSON.stringify({
      turns,
      branch_every: branchEvery,
      runs: ready.length,
      drawn_nodes: drawn,
      tree_request_ms_median: Math.round(median(request)),
      tree_json_ms_median: Math.round(median(api)),
      tree_ready_ms_median: Math.round(median(ready)),
      tree_ready_ms_min: Math.round(Math.min(...ready)),
      tree_ready_ms_max: Math.round(Math.max(...ready)),
    }),
  );
} finally {
  await chromium.close();
  await server.stop();
}
