// The console in a real browser (issue 37): Debian's Chromium, headless, driven by
// playwright-core, against a real ctxstore-server on a store seeded through the CLI. Open a
// context, see its branches, click through to a payload, follow a link, run a search;
// unknown contexts are 404 pages; hostile payloads stay text; the page breaks no rule of
// the Content-Security-Policy; with a token, the login form. A failing test leaves a
// screenshot in the artifacts directory (console/test-results, or CTXSTORE_ARTIFACTS_DIR);
// CTXSTORE_SCREENSHOTS=always keeps one of every test.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { artifactsDir, cli, launchBrowser, seedTree, startServer } from "./harness.mjs";

const PNG = Buffer.from(
  "89504e470d0a1a0a0000000d4948445200000001000000010806000000" +
    "1f15c4890000000d49444154789c63f8ffff3f0005fe02fea73581840000000049454e44ae426082",
  "hex",
);
const HOSTILE = '{"role":"user","content":"<img src=x onerror=\\"window.__pwned=1\\"><script>window.__pwned=2</script>"}';

let server;
let chromium;
let page;
const ids = {};
const cspViolations = [];
const dialogs = [];

/** Runs `body`; on failure (or always, with CTXSTORE_SCREENSHOTS=always) keeps a screenshot. */
async function step(name, body) {
  try {
    await body();
    if (process.env.CTXSTORE_SCREENSHOTS === "always") {
      await page.screenshot({ path: join(artifactsDir(), `${name}.png`), fullPage: true });
    }
  } catch (error) {
    const path = join(artifactsDir(), `FAILED-${name}.png`);
    await page.screenshot({ path, fullPage: true }).catch(() => {});
    console.error(`screenshot of the failure: ${path}`);
    throw error;
  }
}

function append(context, payload, flags = []) {
  return cli(server.addr, ["append", context, ...flags], { input: payload })[0].turn_id;
}

before(async () => {
  server = await startServer();
  const addr = server.addr;
  cli(addr, ["ctx", "create", "--name", "support-ticket", "--tag", "team=blue"]);
  ids.system = append("@support-ticket", '{"role":"system","content":"You are terse."}', [
    "--codec", "json", "--key", "system", "--label", "run_id=r7",
  ]);
  ids.question = append("@support-ticket", '{"role":"user","content":"where is my order?"}', [
    "--codec", "json", "--label", "run_id=r7",
  ]);
  ids.answer = append("@support-ticket", '{"role":"assistant","content":"It ships today."}', ["--codec", "json"]);
  // A retry after the system turn: a second branch, the head moves to it.
  ids.retry = append("@support-ticket", HOSTILE, ["--codec", "json", "--parent", String(ids.system)]);
  const fork = cli(addr, ["ctx", "fork", String(ids.question)])[0];
  ids.fork = fork.context_id;
  cli(addr, ["ctx", "create", "--name", "tool-calls"]);
  ids.tool = append("@tool-calls", '{"tool":"lookup_order","order":812}', [
    "--codec", "json", "--label", "run_id=r7", "--link", String(ids.answer),
  ]);
  ids.image = append("@tool-calls", PNG);
  ids.big = seedTree(addr, "long-run", 2000, 50);

  const launched = await launchBrowser();
  chromium = launched;
  page = await launched.newPage();
  page.on("console", (message) => {
    if (message.type() === "error" && /Content.Security.Policy/i.test(message.text())) cspViolations.push(message.text());
  });
  page.on("dialog", async (dialog) => {
    dialogs.push(dialog.message());
    await dialog.dismiss();
  });
});

after(async () => {
  await chromium?.close();
  await server?.stop();
});

describe("the console", () => {
  test("the first page lists contexts by name; one opens to its branch tree", async () => {
    await step("contexts", async () => {
      await page.goto(server.console);
      const table = page.getByTestId("contexts");
      await table.getByRole("link", { name: "support-ticket" }).waitFor();
      for (const name of ["support-ticket", "tool-calls", "long-run"]) {
        assert.equal(await table.getByRole("link", { name }).count(), 1, name);
      }
      await table.getByRole("link", { name: "support-ticket" }).click();
      await page.waitForURL(/\/contexts\/\d+$/);
      await page.getByTestId("graph").and(page.locator("[data-ready=true]")).waitFor();
      assert.equal(await page.getByTestId("context-title").textContent(), "@support-ticket");
      // Two branches after the system turn (the answered one and the retry): two tips.
      assert.equal(await page.getByTestId("branch-count").textContent(), "2 branches");
      for (const turn of [ids.system, ids.question, ids.answer, ids.retry]) {
        await page.locator(`[data-testid=node][data-turn-id="${turn}"]`).waitFor();
      }
      // The fork's head points at the question.
      const heads = await page.getByTestId("other-heads").textContent();
      assert.match(heads, new RegExp(`context ${ids.fork} at turn ${ids.question}`));
    });
  });

  test("a click on a turn shows its payload, hostile markup as text", async () => {
    await step("payload", async () => {
      await page.locator(`[data-testid=node][data-turn-id="${ids.retry}"]`).click();
      const details = page.getByTestId("turn");
      await details.and(page.locator(`[data-turn-id="${ids.retry}"]`)).waitFor();
      const shown = await page.getByTestId("payload").locator("pre").textContent();
      assert.match(shown, /<script>window.__pwned=2<\/script>/);
      assert.match(shown, /\n {2}"role": "user"/, "JSON is pretty-printed");
      assert.equal(await page.evaluate(() => window.__pwned), undefined);
      assert.equal(await page.locator("img[src=x]").count(), 0);
      await page.locator(`[data-testid=node][data-turn-id="${ids.system}"]`).click();
      await page.locator(`[data-testid=turn][data-turn-id="${ids.system}"]`).waitFor();
      assert.equal(await page.getByTestId("turn-key").textContent(), "system");
    });
  });

  test("compare two turns", async () => {
    await step("compare", async () => {
      await page.getByTestId("compare-from").click();
      await page.locator(`[data-testid=node][data-turn-id="${ids.answer}"]`).click();
      await page.waitForURL(new RegExp(`/compare/${ids.system}/${ids.answer}$`));
      const diff = page.getByTestId("diff");
      await diff.locator(".removed").first().waitFor();
      assert.match(await diff.locator(".removed").first().textContent(), /- {3}"role": "system"/);
      assert.match(await diff.locator(".added").first().textContent(), /\+ {3}"role": "assistant"/);
    });
  });

  test("a link leads to a turn of another context; an image is shown as one", async () => {
    await step("link", async () => {
      await page.goto(`${server.console}/contexts/@tool-calls`);
      await page.locator(`[data-testid=node][data-turn-id="${ids.tool}"]`).click();
      const link = page.getByTestId("links").getByRole("link");
      assert.equal(await link.textContent(), `turn ${ids.answer} in @support-ticket`);
      await link.click();
      await page.waitForURL(new RegExp(`/turns/${ids.answer}$`));
      await page.locator(`[data-testid=turn][data-turn-id="${ids.answer}"]`).waitFor();
      assert.match(await page.getByTestId("payload").textContent(), /It ships today/);
      await page.goto(`${server.console}/turns/${ids.image}`);
      const image = page.getByTestId("payload").locator("img");
      await image.waitFor();
      await page.waitForFunction(() => document.querySelector("[data-testid=payload] img")?.complete);
      assert.equal(await image.evaluate((element) => element.naturalWidth), 1);
    });
  });

  test("the store-wide find by label", async () => {
    await step("find", async () => {
      await page.goto(`${server.console}/find`);
      await page.getByTestId("find-search").locator("input").fill("run_id=r7");
      await page.getByTestId("find-search").getByRole("button").click();
      await page.waitForURL(/\/find\?label=run_id%3Dr7$/);
      const rows = page.getByTestId("found").locator("tbody tr");
      await rows.first().waitFor();
      const found = await rows.locator("td:first-child").allTextContents();
      assert.deepEqual(found.map(Number), [ids.tool, ids.question, ids.system]);
      await rows.first().getByRole("link").first().click();
      await page.waitForURL(new RegExp(`/turns/${ids.tool}$`));
    });
  });

  test("unknown contexts and turns are 404 pages", async () => {
    await step("not-found", async () => {
      for (const path of ["/contexts/9999", "/contexts/@nobody", "/turns/999999", "/no/such/page"]) {
        const response = await page.goto(`${server.console}${path}`);
        assert.equal(response.status(), 404, path);
        await page.getByTestId("not-found").waitFor();
      }
    });
  });

  test("a long tree folds its runs, unfolds one on a click, and zooms", async () => {
    await step("long-tree", async () => {
      await page.goto(`${server.console}/contexts/@long-run`);
      const graph = page.getByTestId("graph");
      await graph.and(page.locator("[data-ready=true]")).waitFor();
      const drawn = Number(await graph.getAttribute("data-nodes"));
      assert.ok(drawn < 2000, `${drawn} nodes drawn for 2,000 turns: runs are folded`);
      const run = page.getByTestId("run").first();
      await run.click();
      await page.waitForFunction(
        (before) => Number(document.querySelector("[data-testid=graph]").getAttribute("data-nodes")) > before,
        drawn,
      );
      await graph.hover();
      await page.mouse.wheel(0, 800);
    });
  });

  test("the store page shows the store's figures", async () => {
    await step("store", async () => {
      await page.goto(`${server.console}/store`);
      const figures = await page.getByTestId("store").textContent();
      assert.match(figures, /Turns\d+/);
      assert.match(figures, /Contexts4/);
    });
  });

  test("nothing broke the Content-Security-Policy and no payload opened a dialog", () => {
    assert.deepEqual(cspViolations, []);
    assert.deepEqual(dialogs, []);
  });
});

describe("the console with a token", () => {
  test("asks for it, refuses a wrong one, and lets the right one in", async () => {
    const guarded = await startServer({ token: "correct horse" });
    try {
      await step("login", async () => {
        await page.goto(guarded.console);
        await page.waitForURL(/\/login$/);
        await page.locator("#token").fill("wrong");
        await page.getByRole("button", { name: "Log in" }).click();
        await page.getByRole("alert").waitFor();
        assert.match(await page.getByRole("alert").textContent(), /not the server's token/);
        await page.locator("#token").fill("correct horse");
        await page.getByRole("button", { name: "Log in" }).click();
        await page.waitForURL(`${guarded.console}/`);
        await page.getByTestId("contexts").waitFor();
      });
    } finally {
      await guarded.stop();
    }
  });
});

describe("a tenant's console", () => {
  test("shows the tenant its own contexts and usage; the operator, every tenant", async () => {
    // Decision 0032 §2: a tenant's token logs in to its own data only.
    const dir = mkdtempSync(join(tmpdir(), "ctxstore-console-tenants-"));
    const tenantsFile = join(dir, "tenants.toml");
    writeFileSync(
      tenantsFile,
      '[[tenant]]\nname = "acme"\ntokens = ["acme-token-0123456789abcdef"]\nrights = ["read", "write"]\n' +
        'quota_contexts = 5\n\n[[tenant]]\nname = "globex"\ntokens = ["globex-token-0123456789abcd"]\n' +
        'rights = ["read", "write"]\n',
    );
    const operatorToken = "operator-token-0123456789";
    const server = await startServer({ token: operatorToken, flags: ["--tenants-file", tenantsFile] });
    try {
      const as = (token, args, input) => cli(server.addr, args, { token, input });
      as("acme-token-0123456789abcdef", ["ctx", "create", "--name", "acme-thread"]);
      as("acme-token-0123456789abcdef", ["append", "@acme-thread"], "acme's own turn");
      as("globex-token-0123456789abcd", ["ctx", "create", "--name", "globex-thread"]);
      await step("tenant-console", async () => {
        await page.context().clearCookies();
        await page.goto(`${server.console}/login`);
        await page.locator("#token").fill("acme-token-0123456789abcdef");
        await page.getByRole("button", { name: "Log in" }).click();
        await page.waitForURL(`${server.console}/`);
        await page.getByTestId("contexts").waitFor();
        assert.equal(await page.getByTestId("viewer").textContent(), "tenant acme");
        const listed = await page.getByTestId("contexts").textContent();
        assert.match(listed, /acme-thread/);
        assert.doesNotMatch(listed, /globex/);
        await page.getByRole("link", { name: "Usage" }).click();
        const usage = await page.getByTestId("usage").textContent();
        assert.match(usage, /Tenantacme \(id \d+\)/);
        assert.match(usage, /Contexts1 of 5/);
      });
      await step("operator-tenants", async () => {
        await page.context().clearCookies();
        await page.goto(`${server.console}/login`);
        await page.locator("#token").fill(operatorToken);
        await page.getByRole("button", { name: "Log in" }).click();
        await page.waitForURL(`${server.console}/`);
        await page.goto(`${server.console}/store`);
        const table = page.getByTestId("tenants");
        await table.waitFor();
        const cells = (name) => table.locator("tr", { hasText: name }).locator("td").allTextContents();
        const [acme, globex] = [await cells("acme"), await cells("globex")];
        assert.deepEqual([acme[0], acme[2], acme[7]], ["acme", "1 of 5", "active"]);
        assert.deepEqual([globex[0], globex[2], globex[7]], ["globex", "1", "active"]);
        assert.equal(await page.getByTestId("viewer").count(), 0);
      });
    } finally {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("the console of a primary that replicates", () => {
  test("the store page shows its role, lease, acknowledgements and failovers", async () => {
    // Decision 0031: a primary on a file:// replica with a lease, acknowledging after the
    // object store; the metrics share the console's socket (the remote acknowledgements'
    // figures come from there).
    const primary = await startServer({
      flags: [
        "--replicate-to", "file://{dir}/replica",
        "--replicate-interval", "50ms",
        "--replica-lease", "4s",
        "--ack-after", "remote",
        "--metrics-listen", "127.0.0.1:0",
      ],
    });
    try {
      cli(primary.addr, ["ctx", "create", "--name", "replicated"]);
      cli(primary.addr, ["append", "@replicated"], { input: "shipped before it was acknowledged" });
      await step("store-replication", async () => {
        await page.goto(`${primary.console}/store`);
        const cards = page.getByTestId("replication");
        await cards.waitFor();
        const text = await cards.textContent();
        assert.match(text, /Roleprimary, epoch [1-9]\d*/);
        assert.match(text, /Shippingshipping, lag /);
        assert.match(text, /Lease.+, renewed \d+(\.\d)? m?s ago \(of 4\.0 s\)/);
        assert.match(text, /Acknowledgements(open .+ more|closed)/);
        assert.match(text, /Failovers0/);
        assert.match(text, /Remote acks waiting0 \(1 confirmed, 0 unconfirmed\)/);
        assert.match(text, /Remote ack latencyp50 \d+(\.\d)? [µm]?s, p99 \d+(\.\d)? [µm]?s/);
        assert.match(await page.getByTestId("store").textContent(), /Replicationprimary, shipping/);
      });
    } finally {
      await primary.stop();
    }
  });
});
