#!/usr/bin/env bash
# ctest integration.docs_render: GET /docs renders in a real browser. Starts
# the gateway (SANDGATE_GATEWAY_BIN) with SANDGATE_WWW_DIR at the pages
# deploy/www-docs.sh built (build/www), lets headless Debian chromium load
# /docs/ (Swagger UI, which fetches /openapi.json), and checks that the page
# it rendered shows every path of the document. No proxy is needed: the
# page and the document are the gateway's own.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
www=${SANDGATE_WWW_DIR:-$root/build/www}
gw_bin=${SANDGATE_GATEWAY_BIN:?set by ctest}
browser=$(command -v chromium || true)
[ -n "$browser" ] || { echo "docs_render: chromium is missing (deploy/install-deps.sh installs it)" >&2; exit 1; }
[ -r "$www/docs/index.html" ] || { echo "docs_render: $www/docs is missing: run deploy/www-docs.sh" >&2; exit 1; }

tmp=$(mktemp -d /tmp/sgtest-docs.XXXXXX)
gw_pid=
cleanup() {
  if [ -n "$gw_pid" ]; then kill -TERM "$gw_pid" 2>/dev/null || true; wait "$gw_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
HOST=127.0.0.1 PORT=$port SANDGATE_DATA_DIR=$tmp SANDGATE_WWW_DIR=$www SANDGATE_PROXY_URL=http://127.0.0.1:9 \
  SANDGATE_REDIS_URL= ASAN_OPTIONS=detect_leaks=0 "$gw_bin" >"$tmp/gateway.log" 2>&1 &
gw_pid=$!
for _ in $(seq 100); do curl -fsS -m 1 "http://127.0.0.1:$port/" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsS -m 1 "http://127.0.0.1:$port/" >/dev/null || { cat "$tmp/gateway.log" >&2; exit 1; }

curl -fsS "http://127.0.0.1:$port/openapi.json" -o "$tmp/openapi.json"
# a profile of its own; virtual time lets the page's scripts and its fetch finish
timeout 90 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$tmp/profile" \
  --virtual-time-budget=10000 --dump-dom "http://127.0.0.1:$port/docs/" >"$tmp/dom.html" 2>"$tmp/chromium.log" || {
  tail -n 20 "$tmp/chromium.log" >&2
  exit 1
}
missing=0 total=0
while IFS= read -r path; do
  total=$((total + 1))
  grep -qF "data-path=\"$path\"" "$tmp/dom.html" || { echo "docs_render: /docs does not show $path" >&2; missing=$((missing + 1)); }
done < <(jq -r '.paths | keys[]' "$tmp/openapi.json")
[ "$total" -gt 20 ] || { echo "docs_render: only $total paths in /openapi.json" >&2; exit 1; }
if [ "$missing" -ne 0 ]; then
  echo "docs_render: $missing of $total paths not rendered; the page's DOM was $(wc -c <"$tmp/dom.html") bytes" >&2
  exit 1
fi
echo "docs_render: /docs rendered all $total paths of /openapi.json in headless chromium"
