// Runs the official conformance suite (@modelcontextprotocol/conformance,
// server mode) against sandgate's /mcp. The suite has no way to send a
// token, so a loopback forwarder in this process adds
// "Authorization: Bearer TOKEN" to every request and passes everything else
// through unchanged (headers, Host, bodies, streamed replies).
// Usage: node conformance.mjs GATEWAY_URL TOKEN OUT_DIR [REVISION]
// Without REVISION, the suite's default ("active") scenarios with
// EXPECTED-FAILURES.yml as the baseline; with one (2026-07-28), exactly the
// scenarios that revision requires, with EXPECTED-FAILURES-REVISION.yml.
// Exit status: the suite's: a failure not in the baseline, or a listed one
// that passes, fails the run.
import http from "node:http";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import path from "node:path";

const [gateway, token, outDir, revision] = process.argv.slice(2);
const here = path.dirname(fileURLToPath(import.meta.url));
const target = new URL(gateway);

const forwarder = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${token}` };
  const up = http.request(
    { host: target.hostname, port: target.port, method: req.method, path: req.url, headers },
    (upRes) => {
      res.writeHead(upRes.statusCode, upRes.headers);
      upRes.pipe(res);
    });
  up.on("error", () => res.destroy());
  req.pipe(up);
  // a client that goes away takes the upstream request with it
  res.on("close", () => up.destroy());
});
await new Promise((r) => forwarder.listen(0, "127.0.0.1", r));
const url = `http://localhost:${forwarder.address().port}/mcp`;

const cli = path.join(here, "node_modules/@modelcontextprotocol/conformance/dist/index.js");
const extra = revision ? ["--requirements", revision] : [];
const baseline = path.join(here, revision ? `EXPECTED-FAILURES-${revision}.yml` : "EXPECTED-FAILURES.yml");
const args = [cli, "server", ...extra, "--url", url, "--expected-failures", baseline,
              "--timeout", "60000"];
if (outDir) args.push("-o", outDir);
const child = spawn(process.execPath, args, { stdio: "inherit" });
const code = await new Promise((r) => child.on("exit", (c, sig) => r(c ?? 1)));
forwarder.close();
process.exit(code);
