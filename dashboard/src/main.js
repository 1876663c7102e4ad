// sandgate's ops dashboard: live sessions, tenants against their quotas,
// executions per second and latency, recent executions, health — all read
// from the admin API (docs/dashboard.md) once a second.
import { h, render } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import htm from "htm";
import { admin, ApiError, clearToken, getToken, setToken, takeTokenFromFragment } from "./api.js";
import { Chart } from "./chart.js";
import { clock, count, duration, left, pct, seconds, shortId } from "./format.js";
import "./style.css";

const html = htm.bind(h);
const POLL_MS = 1000;
const CHART_SECONDS = 600;
const RECENT = 25;

// ---- login and the refusal page ---------------------------------------------------------

function Login({ onToken, message }) {
  const [value, setValue] = useState("");
  const submit = (e) => {
    e.preventDefault();
    if (value.trim() !== "") onToken(value.trim());
  };
  return html`<main class="login" data-testid="login">
    <h1>sandgate — ops dashboard</h1>
    ${message ? html`<p class="error">${message}</p>` : null}
    <form onSubmit=${submit}>
      <label for="token">Admin token</label>
      <input id="token" name="token" type="password" autocomplete="off" value=${value}
        onInput=${(e) => setValue(e.currentTarget.value)} />
      <button type="submit">Sign in</button>
    </form>
    <p class="hint">Or open <code>/dashboard/#token=…</code>: the fragment never leaves the browser; it is moved into
      this tab's session storage and cleared from the address bar.</p>
  </main>`;
}

function Unauthorized({ status, detail, onRetry }) {
  return html`<main class="refused" data-testid="unauthorized">
    <h1>${status === 429 ? "429 Too Many Requests" : "401 Unauthorized"}</h1>
    <p>The gateway refused the admin token: ${detail}</p>
    <button onClick=${onRetry}>Sign in again</button>
  </main>`;
}

// ---- health -------------------------------------------------------------------------------

function Badge({ ok, children, testid }) {
  return html`<div class=${"badge " + (ok ? "ok" : "bad")} data-testid=${testid}>${children}</div>`;
}

function Health({ health }) {
  if (!health) return html`<section class="health"><h2>Health</h2><p>…</p></section>`;
  const p = health.proxy || {};
  const d = health.docker || {};
  const st = health.state || {};
  const sq = health.sqlite || {};
  const pools = Object.entries(health.pools || {});
  return html`<section class="health" data-testid="health">
    <h2>Health <span class=${"status " + health.status}>${health.status}</span></h2>
    <div class="badges">
      <${Badge} ok=${p.reachable} testid="health-proxy">
        <b>proxy</b> ${p.reachable ? `${p.status || "?"} · ${p.runtime || "?"} · ${count(p.containers)}/${count(p.max_containers)} containers` : p.detail}
      <//>
      <${Badge} ok=${d.ok} testid="health-docker">
        <b>Docker engine</b> ${d.ok ? `${d.docker_version} (API ${d.api_version})` : d.detail || "unreachable"}
      <//>
      <${Badge} ok=${st.available} testid="health-state">
        <b>state</b> ${st.backend}${st.backend === "redis" ? (st.available ? " · up" : " · down") : " (in the gateway)"}
      <//>
      <${Badge} ok=${sq.ok} testid="health-sqlite">
        <b>SQLite</b> ${sq.ok ? `${sq.ms} ms` : sq.detail}
      <//>
    </div>
    <div class="pools" data-testid="health-pools">
      <b>warm pools</b>
      ${pools.length === 0 ? " none reported" : pools.map(([lang, n]) => html`<span class="pool">${lang}: ${n}${Number.isFinite(p.pool_size) ? `/${p.pool_size}` : ""}</span>`)}
    </div>
  </section>`;
}

// ---- sessions -------------------------------------------------------------------------------

function CloseButton({ sid, onClose }) {
  const [armed, setArmed] = useState(false);
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState("");
  useEffect(() => {
    if (!armed) return undefined;
    const t = setTimeout(() => setArmed(false), 4000);
    return () => clearTimeout(t);
  }, [armed]);
  const click = async () => {
    if (!armed) {
      setArmed(true);
      return;
    }
    setBusy(true);
    setErr("");
    try {
      await onClose(sid);
    } catch (e) {
      setErr(e.message);
      setBusy(false);
      setArmed(false);
    }
  };
  return html`<button class=${armed ? "danger" : ""} disabled=${busy} data-testid="force-close" onClick=${click}
      title="force-close: removes the container, frees the tenant's slot">
      ${busy ? "closing…" : armed ? "confirm close" : "force-close"}</button>${err ? html`<span class="error">${err}</span>` : null}`;
}

function Sessions({ overview, onClose }) {
  if (!overview) return null;
  const now = overview.now;
  const list = overview.sessions || [];
  const unavailable = overview.state && !overview.state.available;
  return html`<section data-testid="sessions">
    <h2>Live sessions <span class="count">${unavailable ? "state unavailable" : count(overview.sessions_total)}</span></h2>
    ${unavailable ? html`<p class="error">Redis does not answer: live sessions cannot be listed.</p>` : null}
    <table>
      <thead><tr><th>session</th><th>tenant</th><th>language</th><th>runtime</th><th>age</th><th>idle left</th>
        <th>lifetime left</th><th>executions</th><th></th></tr></thead>
      <tbody>
        ${list.length === 0
          ? html`<tr><td colspan="9" class="empty">${unavailable ? "unknown while the state is unavailable" : "no live session"}</td></tr>`
          : null}
        ${list.map((s) => html`<tr key=${s.session_id} data-sid=${s.session_id} class="session-row">
          <td class="mono" title=${s.session_id}>${s.session_id}</td>
          <td class="tenant">${s.tenant ?? `#${s.tenant_id}`}</td>
          <td>${s.lang}</td>
          <td>${s.runtime ?? "–"}</td>
          <td>${seconds(now - s.created_at)}</td>
          <td>${left(s.idle_deadline, now)}</td>
          <td>${left(s.lifetime_deadline, now)}</td>
          <td class="num">${count(s.executions)}</td>
          <td><${CloseButton} sid=${s.session_id} onClose=${onClose} /></td>
        </tr>`)}
      </tbody>
    </table>
  </section>`;
}

// ---- tenants -------------------------------------------------------------------------------

function Meter({ used, max, text }) {
  return html`<div class="meter" title=${text}>
    <div class="fill" style=${{ width: `${pct(used, max)}%` }}></div><span>${text}</span></div>`;
}

function Tenants({ overview }) {
  if (!overview) return null;
  const list = overview.tenants || [];
  return html`<section data-testid="tenants">
    <h2>Tenants <span class="count">${count(overview.tenants_total)}</span></h2>
    <table>
      <thead><tr><th>tenant</th><th>live sessions</th><th>executions today</th><th>execution seconds today</th>
        <th>rejections since ${clock(overview.rejections_since)}</th></tr></thead>
      <tbody>
        ${list.map((t) => {
          const rej = Object.entries(t.rejections || {}).filter(([, n]) => n > 0);
          return html`<tr key=${t.id} data-tenant=${t.name}>
            <td class="tenant">${t.name}${t.disabled ? html` <span class="tag">disabled</span>` : null}</td>
            <td><${Meter} used=${t.live_sessions} max=${t.max_sessions} text=${`${t.live_sessions ?? "?"} / ${t.max_sessions}`} /></td>
            <td><${Meter} used=${t.executions_today} max=${t.execs_per_day} text=${`${count(t.executions_today)} / ${count(t.execs_per_day)}`} /></td>
            <td><${Meter} used=${t.exec_seconds_today} max=${t.exec_seconds_per_day} text=${`${duration(t.exec_seconds_today)} / ${duration(t.exec_seconds_per_day)}`} /></td>
            <td class="num">${count(t.rejections_total)}${rej.length ? html` <span class="detail">(${rej.map(([k, n]) => `${k} ${n}`).join(", ")})</span>` : null}</td>
          </tr>`;
        })}
      </tbody>
    </table>
  </section>`;
}

// ---- recent executions ------------------------------------------------------------------

function Recent({ rows }) {
  if (!rows) return null;
  return html`<section data-testid="recent">
    <h2>Recent executions</h2>
    <table>
      <thead><tr><th>time</th><th>tenant</th><th>session</th><th>language</th><th>kind</th><th>outcome</th>
        <th>exit</th><th>duration</th></tr></thead>
      <tbody>
        ${rows.length === 0 ? html`<tr><td colspan="8" class="empty">no execution yet</td></tr>` : null}
        ${rows.map((r, i) => html`<tr key=${i} data-sid=${r.session_id ?? ""} class="exec-row">
          <td>${clock(r.started_at)}</td>
          <td class="tenant">${r.tenant ?? `#${r.tenant_id}`}</td>
          <td class="mono" title=${r.session_id ?? "one-shot"}>${r.session_id ? shortId(r.session_id) : "one-shot"}</td>
          <td>${r.lang}</td>
          <td>${r.kind}</td>
          <td><span class=${"outcome " + r.outcome}>${r.outcome}</span></td>
          <td class="num">${r.exit_code}</td>
          <td class="num">${duration(r.duration)}</td>
        </tr>`)}
      </tbody>
    </table>
  </section>`;
}

// ---- charts --------------------------------------------------------------------------------

function Charts({ stats }) {
  if (!stats) return null;
  const xs = stats.executions.map((_, i) => stats.start + i);
  return html`<section class="charts">
    <h2>Executions, last ${Math.round(stats.seconds / 60)} minutes <span class="count">${count(stats.executions_total)}</span></h2>
    <div class="chart-row">
      <${Chart} testid="chart-rate" title="executions per second" unit="exec/s" data=${[xs, stats.executions]}
        series=${[{ label: "executions/s", color: "#2b6cb0", fill: "rgba(43,108,176,0.15)" }]} />
      <${Chart} testid="chart-latency" title="latency (gateway to proxy and back)" unit="ms" data=${[xs, stats.p50_ms, stats.p99_ms]}
        series=${[{ label: "p50 ms", color: "#2f855a" }, { label: "p99 ms", color: "#c05621" }]} />
    </div>
  </section>`;
}

// ---- the page ------------------------------------------------------------------------------

function App() {
  const [token, setTok] = useState(getToken());
  const [refused, setRefused] = useState(null);
  const [overview, setOverview] = useState(null);
  const [stats, setStats] = useState(null);
  const [recent, setRecent] = useState(null);
  const [health, setHealth] = useState(null);
  const [updated, setUpdated] = useState(null);
  const [problem, setProblem] = useState("");
  const live = useRef(true);

  const refuse = (e) => {
    clearToken();
    setTok(null);
    setRefused({ status: e.status, detail: e.message });
  };

  const poll = useCallback(async () => {
    const results = await Promise.allSettled([
      admin("/admin/overview"),
      admin(`/admin/stats?seconds=${CHART_SECONDS}`),
      admin(`/admin/executions?limit=${RECENT}`),
      admin("/admin/health"),
    ]);
    const denied = results.find(
      (r) => r.status === "rejected" && r.reason instanceof ApiError && (r.reason.status === 401 || r.reason.status === 429),
    );
    if (denied) {
      refuse(denied.reason);
      return false;
    }
    const [o, s, x, hl] = results;
    if (o.status === "fulfilled") setOverview(o.value);
    if (s.status === "fulfilled") setStats(s.value);
    if (x.status === "fulfilled") setRecent(x.value.executions);
    if (hl.status === "fulfilled") setHealth(hl.value);
    const failed = results.filter((r) => r.status === "rejected").map((r) => r.reason.message);
    setProblem(failed.length ? failed[0] : "");
    setUpdated(new Date());
    return true;
  }, []);

  useEffect(() => {
    if (!token) return undefined;
    live.current = true;
    let timer = null;
    const loop = async () => {
      const go = await poll();
      if (go && live.current) timer = setTimeout(loop, POLL_MS);
    };
    loop();
    return () => {
      live.current = false;
      clearTimeout(timer);
    };
  }, [token, poll]);

  // a token put in the fragment of an open page (#token=…) takes over
  useEffect(() => {
    const onHash = () => {
      takeTokenFromFragment();
      setRefused(null);
      setTok(getToken());
    };
    window.addEventListener("hashchange", onHash);
    return () => window.removeEventListener("hashchange", onHash);
  }, []);

  const forceClose = async (sid) => {
    try {
      await admin(`/admin/sessions/${encodeURIComponent(sid)}`, "DELETE");
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) refuse(e);
      throw e;
    }
    await poll();
  };

  const signIn = (t) => {
    setToken(t);
    setRefused(null);
    setTok(t);
  };
  const signOut = () => {
    clearToken();
    setTok(null);
    setOverview(null);
  };

  if (refused) return html`<${Unauthorized} status=${refused.status} detail=${refused.detail} onRetry=${() => setRefused(null)} />`;
  if (!token) return html`<${Login} onToken=${signIn} />`;
  return html`<div class="page" data-testid="dashboard">
    <header>
      <h1>sandgate <span>ops</span></h1>
      <span class="updated" data-testid="updated">${updated ? `updated ${updated.toISOString().slice(11, 19)}Z` : "loading…"}</span>
      ${problem ? html`<span class="error" data-testid="problem">${problem}</span>` : null}
      <button class="signout" onClick=${signOut}>sign out</button>
    </header>
    <${Health} health=${health} />
    <${Sessions} overview=${overview} onClose=${forceClose} />
    <${Charts} stats=${stats} />
    <${Tenants} overview=${overview} />
    <${Recent} rows=${recent} />
  </div>`;
}

takeTokenFromFragment();
render(html`<${App} />`, document.getElementById("app"));
