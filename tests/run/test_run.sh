#!/usr/bin/env bash
# The README's run command, end to end: deploy/run.sh brings up redis, the
# proxy and the gateway, makes a first tenant and token, and prints a first
# request; that request, run exactly as printed, works; `run.sh stop` stops
# everything it started and leaves no container behind.
# Ports, the data directory and the proxy id are this test's own, so a real
# sandgate on the same machine is never touched.
set -euo pipefail
cd "$(dirname "$0")/../.."

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

export SANDGATE_DATA_DIR; SANDGATE_DATA_DIR=$(mktemp -d /tmp/sgtest-run.XXXXXX)
export SANDGATE_PROXY_ID=sgtest-run-$$ SANDGATE_POOL_SIZE=1 SANDGATE_STORE_VOLUME=
export PORT HOST=127.0.0.1 SANDGATE_PROXY_PORT SANDGATE_REDIS_PORT
PORT=$(free_port) SANDGATE_PROXY_PORT=$(free_port) SANDGATE_REDIS_PORT=$(free_port)
log=$(dirname "$SANDGATE_DATA_DIR")/$(basename "$SANDGATE_DATA_DIR").log
pid=

fail() { echo "test_run: FAILED: $*" >&2; tail -n 40 "$log" >&2 || true; exit 1; }
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; fi
  ids=$(docker ps -aq --filter "label=sandgate.proxy=$SANDGATE_PROXY_ID")
  # shellcheck disable=SC2086
  [ -z "$ids" ] || docker rm -f $ids >/dev/null
  rm -rf "$SANDGATE_DATA_DIR" "$log"
}
trap cleanup EXIT

./deploy/run.sh > "$log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -q "sandgate is up" "$log" && break
  kill -0 "$pid" 2>/dev/null || fail "run.sh exited before the service was up"
  sleep 0.2
done
grep -q "sandgate is up" "$log" || fail "the service was not up within 120 s"

# the first request, exactly as printed (two lines joined by the backslash)
request=$(sed -n '/A first request:/,/^Admin API token/p' "$log" | sed '1d;$d')
[ -n "$request" ] || fail "no first request printed"
reply=$(bash -c "$request")
echo "test_run: first request replied $reply"
[ "$(jq -r .stdout <<<"$reply")" = "42" ] || fail "the printed request did not print 42"
[ "$(jq -r .success <<<"$reply")" = "true" ] || fail "the printed request did not succeed"
[ -n "$(docker ps -q --filter "label=sandgate.proxy=$SANDGATE_PROXY_ID")" ] || fail "no sandbox container while running"
# the documentation it names: the page, from the www directory run.sh built
docs=$(sed -n 's/^API documentation: \([^ ]*\) .*/\1/p' "$log")
[ -n "$docs" ] || fail "no documentation URL printed"
curl -fsS -m 5 "$docs" | grep -q '/openapi.json' || fail "$docs is not the page that loads /openapi.json"
# the ops dashboard's address as printed: the page, and its token opens the admin API
dash=$(grep -o 'http://[^ ]*/dashboard/#token=[^ ]*' "$log" | head -n 1)
[ -n "$dash" ] || fail "no dashboard address printed"
curl -fsS "${dash%%#*}" | grep -q '<script type="module"' || fail "$dash does not serve the dashboard"
curl -fsS -H "Authorization: Bearer ${dash#*#token=}" "${dash%%/dashboard/*}/admin/overview" | jq -e '.tenants[0].name' >/dev/null ||
  fail "the dashboard's token does not open GET /admin/overview"

./deploy/run.sh stop
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "run.sh still runs 30 s after stop"
wait "$pid" 2>/dev/null || true
pid=
[ -z "$(docker ps -aq --filter "label=sandgate.proxy=$SANDGATE_PROXY_ID")" ] || fail "containers left after stop"
for port in "$PORT" "$SANDGATE_PROXY_PORT" "$SANDGATE_REDIS_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then fail "port $port still answers after stop"; fi
done
echo "test_run: 1 passed, 0 failed"
