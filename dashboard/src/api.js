// The admin token and the calls to the admin API.
//
// The token comes from the URL fragment (#token=…), which browsers never send
// to the server, or from the login form. It is kept in sessionStorage (gone
// when the tab closes) and the fragment is cleared at once, so it stays out of
// the address bar, the history and any Referer. Every call sends it as
// Authorization: Bearer, to this origin only.

const KEY = "sandgate.adminToken";

export function takeTokenFromFragment() {
  const hash = window.location.hash;
  if (!hash || hash.length < 2) return;
  const params = new URLSearchParams(hash.slice(1));
  const token = params.get("token");
  if (token !== null) {
    if (token !== "") sessionStorage.setItem(KEY, token);
    // drop the fragment from the address bar and the history entry
    history.replaceState(null, "", window.location.pathname + window.location.search);
  }
}

export function getToken() {
  return sessionStorage.getItem(KEY);
}

export function setToken(token) {
  sessionStorage.setItem(KEY, token);
}

export function clearToken() {
  sessionStorage.removeItem(KEY);
}

// An error of the admin API: status and the machine code of its JSON body.
export class ApiError extends Error {
  constructor(status, code, detail) {
    super(detail || `HTTP ${status}`);
    this.status = status;
    this.code = code || "";
  }
}

// fetch path of the admin API with the token; the JSON reply, or ApiError.
export async function admin(path, method = "GET") {
  const token = getToken();
  if (!token) throw new ApiError(401, "unauthorized", "no admin token");
  let res;
  try {
    res = await fetch(path, {
      method,
      headers: { Authorization: `Bearer ${token}`, Accept: "application/json" },
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    });
  } catch (e) {
    throw new ApiError(0, "network", "the gateway does not answer");
  }
  let body = null;
  try {
    body = await res.json();
  } catch (e) {
    body = null;
  }
  if (!res.ok) {
    const code = body && typeof body.code === "string" ? body.code : "";
    const detail = body && typeof body.detail === "string" ? body.detail : `HTTP ${res.status}`;
    throw new ApiError(res.status, code, detail);
  }
  return body;
}
