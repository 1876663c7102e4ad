// Figures as the page shows them. Everything returned is text: the views put
// it in text nodes (Preact escapes), never in HTML.

export function duration(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return "–";
  if (s < 0) return "0 s";
  if (s < 1) return `${(s * 1000).toFixed(s < 0.01 ? 2 : 0)} ms`;
  if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  const h = Math.floor(m / 60);
  return `${h} h ${m % 60} min`;
}

// Whole seconds (ages and deadlines are unix seconds).
export function seconds(s) {
  if (!Number.isFinite(s)) return "–";
  s = Math.max(0, Math.floor(s));
  if (s < 60) return `${s} s`;
  return duration(s);
}

export function left(deadline, now) {
  if (!Number.isFinite(deadline) || deadline <= 0) return "–";
  return seconds(deadline - now);
}

export function clock(unix) {
  if (!Number.isFinite(unix)) return "–";
  return new Date(unix * 1000).toISOString().slice(11, 19) + "Z";
}

export function count(n) {
  return Number.isFinite(n) ? n.toLocaleString("en-US") : "–";
}

export function shortId(id) {
  return typeof id === "string" ? id.slice(0, 8) : "–";
}

export function pct(used, max) {
  if (!Number.isFinite(used) || !Number.isFinite(max) || max <= 0) return used > 0 ? 100 : 0;
  return Math.min(100, (100 * used) / max);
}
