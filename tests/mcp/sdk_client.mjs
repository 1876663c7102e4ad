// The official TypeScript SDK's client (@modelcontextprotocol/sdk, Streamable
// HTTP) against sandgate's POST /mcp: create_session -> execute_code (x = 41)
// -> execute_code (x + 1 is 42: the state is kept) -> a failing program is an
// error result with its traceback -> close_session, then the MCP session ends.
// Usage: node sdk_client.mjs URL TOKEN. Exit status 0 only if every check held.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
if (!url || !token) {
  console.error("usage: node sdk_client.mjs URL TOKEN");
  process.exit(2);
}

function check(cond, what, detail) {
  if (!cond) {
    console.error(`FAIL: ${what}${detail !== undefined ? ": " + JSON.stringify(detail) : ""}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "sandgate-sdk-test", version: "1.0.0" });
await client.connect(transport);
check(typeof transport.sessionId === "string" && transport.sessionId.length > 0, "initialize gave an MCP session id");
check(client.getServerVersion()?.name === "sandgate", "server info", client.getServerVersion());

const { tools } = await client.listTools();
const names = tools.map((t) => t.name).sort();
for (const want of ["close_session", "create_session", "execute_code", "execute_python", "install_library",
                    "list_sessions", "pip_install", "read_file", "run_command", "write_file"])
  check(names.includes(want), `tools/list has ${want}`, names);
check(tools.every((t) => t.inputSchema?.type === "object" && t.outputSchema?.type === "object"),
      "every tool has input and output schemas");

// callTool validates structuredContent against the tool's outputSchema
const created = await client.callTool({ name: "create_session", arguments: { lang: "python" } });
check(!created.isError, "create_session", created);
const sid = created.structuredContent.session_id;
check(/^[0-9a-f-]{36}$/.test(sid), "create_session gave a session_id", sid);
check(JSON.parse(created.content[0].text).session_id === sid, "its text copy says the same");

const first = await client.callTool({ name: "execute_code", arguments: { session_id: sid, code: "x = 41" } });
check(!first.isError && first.structuredContent.exit_code === 0, "execute_code x = 41", first);
const second = await client.callTool({ name: "execute_code", arguments: { session_id: sid, code: "print(x + 1)" } });
check(!second.isError && second.structuredContent.stdout === "42\n", "state kept: x + 1 is 42", second);

const bad = await client.callTool({ name: "execute_code", arguments: { session_id: sid, code: "1/0" } });
check(bad.isError === true && /ZeroDivisionError/.test(bad.structuredContent.stderr) &&
      /Traceback/.test(bad.content[0].text), "a failing program is an error result with its traceback", bad);

const listed = await client.callTool({ name: "list_sessions", arguments: {} });
check(listed.structuredContent.sessions.includes(sid), "list_sessions lists it", listed);

const closed = await client.callTool({ name: "close_session", arguments: { session_id: sid } });
check(!closed.isError && closed.structuredContent.status === "closed", "close_session", closed);
const after = await client.callTool({ name: "execute_code", arguments: { session_id: sid, code: "print(x)" } });
check(after.isError === true && /no_such_session/.test(after.content[0].text), "a closed session is gone", after);

await transport.terminateSession();
check(transport.sessionId === undefined, "DELETE ended the MCP session");
await client.close();
console.log("all checks passed");
