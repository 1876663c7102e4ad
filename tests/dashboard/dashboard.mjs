// The ops dashboard in a real browser: Debian's chromium driven by
// playwright-core, against a gateway, proxy and Docker engine that
// test_dashboard.c started. Every wait has a deadline; a step that does not
// happen in time fails the run (exit 1) with what the page showed.
//
// Environment (set by test_dashboard.c):
//   GATEWAY_URL    http://127.0.0.1:PORT
//   ADMIN_TOKEN    the gateway's admin token
//   TENANT_TOKEN   a new tenant's API token (max_sessions=1), TENANT_NAME its name
//   PROXY_ID       the proxy's id (its containers' sandgate.proxy label)
//   SHOT_DIR       where the screenshots go (created)
//   RESULT_FILE    where the session id is written for the driver
//   RUN_LABEL      "redis" or "memory": prefixes the screenshots' names
//   CONTROL_DIR    (with Redis) where this script asks the driver to kill
//                  redis-server and to start it again, by files
import { chromium } from "playwright-core";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const GW = env("GATEWAY_URL");
const ADMIN = env("ADMIN_TOKEN");
const TOKEN = env("TENANT_TOKEN");
const TENANT = env("TENANT_NAME");
const PROXY_ID = env("PROXY_ID");
const SHOTS = env("SHOT_DIR");
const RESULT = env("RESULT_FILE");
const LABEL = env("RUN_LABEL");
const CONTROL = process.env.CONTROL_DIR || ""; // set: Redis is killed and restarted on request (see below)
const STEP_MS = 20000; // each awaited change of the page

mkdirSync(SHOTS, { recursive: true });
// this run's screenshots only: an earlier run's (a failure's among them) go
for (const f of readdirSync(SHOTS)) if (f.startsWith(`${LABEL}-`) && f.endsWith(".png")) rmSync(join(SHOTS, f));
const shots = [];
let step = 0;

function fail(msg) {
  throw new Error(msg);
}

async function shot(page, name) {
  step += 1;
  const path = join(SHOTS, `${LABEL}-${String(step).padStart(2, "0")}-${name}.png`);
  await page.screenshot({ path, fullPage: true });
  shots.push(path);
  console.log(`screenshot: ${path}`);
}

async function api(method, path, body) {
  const res = await fetch(GW + path, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch (e) {
    json = null;
  }
  return { status: res.status, json, text };
}

// The containers of session sid on the engine (docker CLI, labels).
function containers(sid) {
  const out = execFileSync(
    "docker",
    ["ps", "-a", "-q", "--filter", `label=sandgate.proxy=${PROXY_ID}`, "--filter", `label=sandgate.session=${sid}`],
    { encoding: "utf8" },
  );
  return out.split("\n").filter((l) => l.trim() !== "");
}

async function until(what, fn, ms = STEP_MS) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) fail(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function main() {
  const profile = mkdtempSync(join(tmpdir(), "sgdash-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    viewport: { width: 1400, height: 1000 },
  });
  const problems = [];
  const requests = [];
  const responses = [];
  let current = null; // the tab in use, for a screenshot of a failure
  try {
    const page = context.pages()[0] || (await context.newPage());
    current = page;
    page.on("console", (m) => {
      if (m.type() === "error" && !/status of 40[14]/.test(m.text())) problems.push(`console: ${m.text()}`);
    });
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    const watch = (p) => {
      p.on("request", (r) => requests.push({ url: r.url(), auth: r.headers()["authorization"] || "" }));
      p.on("response", (r) => responses.push({ url: r.url(), status: r.status(), auth: r.request().headers()["authorization"] || "" }));
    };
    watch(page);

    // ---- 1. log in with the token in the fragment ----
    const resp = await page.goto(`${GW}/dashboard#token=${encodeURIComponent(ADMIN)}`);
    const csp = resp.headers()["content-security-policy"] || "";
    if (!/script-src 'self'/.test(csp) || /unsafe-inline/.test(csp)) fail(`the page's CSP is "${csp}"`);
    await page.waitForSelector('[data-testid="dashboard"]', { timeout: STEP_MS });
    await page.waitForSelector('[data-testid="health"]', { timeout: STEP_MS });
    const where = await page.evaluate(() => ({
      hash: window.location.hash,
      href: window.location.href,
      stored: sessionStorage.getItem("sandgate.adminToken"),
    }));
    if (where.hash !== "" || where.href.includes(ADMIN)) fail(`the token stayed in the address bar: ${where.href}`);
    if (where.stored !== ADMIN) fail("the token is not in sessionStorage");
    await until("the health line to show the Docker engine and SQLite up", () =>
      page.evaluate(
        () =>
          document.querySelector('[data-testid="health-docker"]')?.classList.contains("ok") &&
          document.querySelector('[data-testid="health-sqlite"]')?.classList.contains("ok") &&
          document.querySelector('[data-testid="health-proxy"]')?.classList.contains("ok"),
      ),
    );
    await shot(page, "logged-in");

    // ---- 2. a session made through the public API appears, with its tenant ----
    const created = await api("POST", "/sessions", { lang: "python" });
    if (created.status !== 200 || !created.json?.session_id) fail(`POST /sessions: ${created.status} ${created.text}`);
    const sid = created.json.session_id;
    writeFileSync(RESULT, `${sid}\n`);
    const row = `tr.session-row[data-sid="${sid}"]`;
    await page.waitForSelector(row, { timeout: STEP_MS });
    const cells = await page.$$eval(`${row} td`, (tds) => tds.map((td) => td.textContent));
    if (cells[0] !== sid || cells[1] !== TENANT || cells[2] !== "python")
      fail(`the session's row reads ${JSON.stringify(cells)}`);
    if (containers(sid).length !== 1) fail(`session ${sid} should have one container: ${containers(sid)}`);
    await shot(page, "session-live");

    // ---- 3. its execution shows in the recent list, and in its row ----
    const ex = await api("POST", `/sessions/${sid}/execute`, { code: "print(6 * 7)" });
    if (ex.status !== 200 || ex.json?.stdout !== "42\n") fail(`execute: ${ex.status} ${ex.text}`);
    const execRow = `tr.exec-row[data-sid="${sid}"]`;
    await page.waitForSelector(execRow, { timeout: STEP_MS });
    const execCells = await page.$$eval(`${execRow} td`, (tds) => tds.map((td) => td.textContent));
    if (execCells[1] !== TENANT || execCells[3] !== "python" || execCells[5] !== "success" || execCells[6] !== "0")
      fail(`the execution's row reads ${JSON.stringify(execCells)}`);
    await until("the session's row to count its execution", async () =>
      (await page.$eval(`${row} td:nth-child(8)`, (td) => td.textContent)) === "1",
    );
    await until("the tenant's row to count today's execution", () =>
      page.evaluate((t) => {
        const tr = [...document.querySelectorAll("tr[data-tenant]")].find((r) => r.dataset.tenant === t);
        return tr && /^1 \//.test(tr.children[2].textContent) && /^1 \//.test(tr.children[1].textContent);
      }, TENANT),
    );
    await until("the executions chart to count it", () =>
      page.evaluate(() => {
        const h2 = document.querySelector(".charts h2 .count");
        return h2 && Number(h2.textContent.replace(/,/g, "")) >= 1 && document.querySelectorAll(".chart canvas").length === 2;
      }),
    );
    // a second session is past the tenant's max_sessions of 1: its 429 shows as a rejection
    const refused = await api("POST", "/sessions", { lang: "python" });
    if (refused.status !== 429 || refused.json?.code !== "quota_exceeded") fail(`a second session: ${refused.status} ${refused.text}`);
    await until("the tenant's row to count the rejection", () =>
      page.evaluate((t) => {
        const tr = [...document.querySelectorAll("tr[data-tenant]")].find((r) => r.dataset.tenant === t);
        return tr && tr.children[4].textContent === "1 (sessions 1)";
      }, TENANT),
    );
    await shot(page, "execution");

    // ---- 4. force-close: the row goes, the session is gone, its container too ----
    await page.click(`${row} [data-testid="force-close"]`);
    await page.waitForSelector(`${row} button.danger`, { timeout: STEP_MS });
    await page.click(`${row} [data-testid="force-close"]`);
    await page.waitForSelector(row, { state: "detached", timeout: STEP_MS });
    const after = await api("GET", `/sessions/${sid}`);
    if (after.status !== 404) fail(`GET /sessions/${sid} after the force-close: ${after.status} ${after.text}`);
    await until(`no container of session ${sid} on the engine`, () => containers(sid).length === 0);
    await shot(page, "force-closed");

    // ---- 4b. Redis goes away while the page is open, and comes back ----
    if (CONTROL) {
      const stateBadge = () =>
        page.evaluate(() => {
          const b = document.querySelector('[data-testid="health-state"]');
          const c = document.querySelector('[data-testid="sessions"] h2 .count');
          return { ok: b?.classList.contains("ok"), text: b?.textContent, count: c?.textContent };
        });
      mkdirSync(CONTROL, { recursive: true });
      writeFileSync(join(CONTROL, "want-redis-down"), "");
      await until("the driver to kill redis-server", () => existsSync(join(CONTROL, "redis-down")));
      await until("the page to say Redis is down", async () => {
        const b = await stateBadge();
        return !b.ok && /redis · down/.test(b.text) && b.count === "state unavailable";
      });
      await page.waitForSelector('[data-testid="recent"] tr.exec-row', { timeout: STEP_MS });
      await shot(page, "redis-down");
      writeFileSync(join(CONTROL, "want-redis-up"), "");
      await until("the driver to start redis-server again", () => existsSync(join(CONTROL, "redis-up")));
      await until("the page to say Redis is back", async () => {
        const b = await stateBadge();
        return b.ok && /redis · up/.test(b.text) && /^[0-9]+$/.test(b.count);
      });
      await shot(page, "redis-back");
    }

    // every call of the page carried the token as a bearer, none in its URL
    const adminCalls = requests.filter((r) => new URL(r.url).pathname.startsWith("/admin/"));
    if (adminCalls.length === 0) fail("the page made no admin call");
    for (const r of requests) if (r.url.includes(encodeURIComponent(ADMIN))) fail(`the token went out in a URL: ${r.url}`);
    for (const r of adminCalls) if (r.auth !== `Bearer ${ADMIN}`) fail(`${r.url} went without the bearer token`);

    // ---- 5. a wrong token (a new tab: nothing stored): the 401 page; then the login form ----
    const wrong = `wrong-${Date.now()}`;
    await page.close();
    const tab = await context.newPage();
    current = tab;
    watch(tab);
    await tab.goto(`${GW}/dashboard/#token=${wrong}`);
    await tab.waitForSelector('[data-testid="unauthorized"]', { timeout: STEP_MS });
    const refusal = await tab.textContent('[data-testid="unauthorized"] h1');
    if (!refusal.startsWith("401")) fail(`the refusal page says "${refusal}"`);
    if (!responses.some((r) => r.auth === `Bearer ${wrong}` && r.status === 401 && new URL(r.url).pathname.startsWith("/admin/")))
      fail("the gateway never answered the wrong token with a 401");
    if ((await tab.evaluate(() => sessionStorage.getItem("sandgate.adminToken"))) !== null)
      fail("a refused token stayed in sessionStorage");
    await shot(tab, "unauthorized");
    await tab.click('[data-testid="unauthorized"] button');
    await tab.waitForSelector('[data-testid="login"]', { timeout: STEP_MS });
    await tab.fill("#token", ADMIN);
    await shot(tab, "login-form");
    await tab.click('[data-testid="login"] button[type="submit"]');
    await tab.waitForSelector('[data-testid="health"]', { timeout: STEP_MS });
    await shot(tab, "logged-in-by-form");

    if (problems.length) fail(`the page reported: ${problems.join(" | ")}`);
  } catch (e) {
    if (current) {
      const path = join(SHOTS, `${LABEL}-FAILED.png`);
      await current.screenshot({ path, fullPage: true }).then(() => console.error(`screenshot of the failure: ${path}`), () => {});
    }
    throw e;
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
  console.log(`dashboard (${LABEL}): ok; ${shots.length} screenshots in ${SHOTS}`);
}

main().catch((e) => {
  console.error(`dashboard (${LABEL}): FAILED: ${e.message}`);
  for (const s of shots) console.error(`screenshot so far: ${s}`);
  process.exit(1);
});
