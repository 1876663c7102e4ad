#!/usr/bin/env bash
# The README's run command, end to end: deploy/run.sh brings up redis, the
# proxy and the gateway, makes a first tenant and token, and prints a first
# request; that request, run exactly as printed, works; `run.sh stop` stops
# everything it started and leaves no container behind. In between, run.sh
# supervises what it started: the proxy killed with SIGKILL is started again
# (logged, with how it ended), Redis and the gateway untouched (same pids),
# the service answers again, and no container of the dead proxy stays unless
# the live proxy holds it as a session; the gateway killed is started again.
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

# ---- supervision ----
run_dir=$SANDGATE_DATA_DIR/run
token=$(cat "$run_dir/demo-token")
gw=http://127.0.0.1:$PORT
proxy=http://127.0.0.1:$SANDGATE_PROXY_PORT
pid_of() { cat "$run_dir/$1.pid" 2>/dev/null || true; }
# wait_for SECONDS WHAT COMMAND...: polls COMMAND every 0.2 s
wait_for() {
  local n=$(($1 * 5)) what=$2
  shift 2
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  fail "$what (within $n polls)"
}
new_session_works() {
  local sid out
  sid=$(curl -fsS -m 60 -X POST "$gw/sessions" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' -d '{"lang": "python"}' | jq -r .session_id)
  [ -n "$sid" ] && [ "$sid" != null ] || return 1
  out=$(curl -fsS -m 60 -X POST "$gw/sessions/$sid/execute" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' -d '{"code": "x = 6\nprint(x * 7)"}' | jq -r .stdout)
  [ "$out" = 42 ] || return 1
  echo "$sid"
}
differs() { local now; now=$(pid_of "$1"); [ -n "$now" ] && [ "$now" != "$2" ] && kill -0 "$now"; }
# every container of the proxy's id is either new (made by the live proxy) or
# a session the live proxy serves: none of the dead one's stays unclaimed
dead_ones_gone() {
  local live c
  live=$(curl -fsS -m 5 "$proxy/sessions" | jq -r '.sessions[]') || return 1
  for c in $old_containers; do
    docker inspect "$c" >/dev/null 2>&1 || continue
    grep -qx "$(docker inspect -f '{{index .Config.Labels "sandgate.session"}}' "$c")" <<<"$live" || return 1
  done
}

# the gateway reaches the proxy over its Unix socket, this user's only
sock=$run_dir/proxy.sock
[ -S "$sock" ] || fail "no proxy socket at $sock"
[ "$(stat -c '%a %u' "$sock")" = "600 $(id -u)" ] || fail "the proxy's socket is $(stat -c '%a %u' "$sock"), not 600 $(id -u)"
grep -q "proxy http://\[unix:$sock\]" "$run_dir/gateway.log" || fail "the gateway does not use the proxy's socket"

redis_pid=$(pid_of redis) gateway_pid=$(pid_of gateway) proxy_pid=$(pid_of proxy)
[ -n "$redis_pid" ] && [ -n "$gateway_pid" ] && [ -n "$proxy_pid" ] || fail "run.sh wrote no pid files"
new_session_works >/dev/null || fail "a session did not work before the kill"
old_containers=$(docker ps -aq --no-trunc --filter "label=sandgate.proxy=$SANDGATE_PROXY_ID")
kill -9 "$proxy_pid"
wait_for 30 "run.sh did not start the proxy again" differs proxy "$proxy_pid"
grep -q "run: proxy (pid $proxy_pid) ended after .*killed by signal 9 (KILL); restart 1" "$log" ||
  fail "the proxy's restart was not logged with its status"
wait_for 60 "the restarted proxy does not answer" curl -fsS -m 2 "$proxy/"
[ "$(pid_of redis)" = "$redis_pid" ] && kill -0 "$redis_pid" || fail "redis-server was touched"
# the socket the dead proxy left was taken over by the new one (the
# session below goes through it)
[ -S "$sock" ] || fail "no proxy socket after the proxy's restart"
[ "$(pid_of gateway)" = "$gateway_pid" ] && kill -0 "$gateway_pid" || fail "the gateway was touched"
wait_for 60 "no new session works after the proxy's restart" new_session_works
wait_for 60 "containers of the dead proxy stayed" dead_ones_gone
echo "test_run: the proxy killed with SIGKILL came back; redis and the gateway untouched"

kill -9 "$gateway_pid"
wait_for 30 "run.sh did not start the gateway again" differs gateway "$gateway_pid"
grep -q "run: gateway (pid $gateway_pid) ended after .*killed by signal 9 (KILL); restart 1" "$log" ||
  fail "the gateway's restart was not logged"
wait_for 30 "the restarted gateway does not answer" curl -fsS -m 2 "$gw/"
[ "$(pid_of redis)" = "$redis_pid" ] || fail "redis-server was touched"
wait_for 60 "no new session works after the gateway's restart" new_session_works
echo "test_run: the gateway killed with SIGKILL came back"

last_pids="$(pid_of redis) $(pid_of proxy) $(pid_of gateway)"
./deploy/run.sh stop
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "run.sh still runs 30 s after stop"
wait "$pid" 2>/dev/null || true
pid=
[ -z "$(docker ps -aq --filter "label=sandgate.proxy=$SANDGATE_PROXY_ID")" ] || fail "containers left after stop"
for p in $last_pids; do
  ! kill -0 "$p" 2>/dev/null || fail "pid $p (redis-server, the proxy or the gateway) still runs after stop"
done
[ ! -e "$sock" ] || fail "the proxy's socket is still there after stop"
for port in "$PORT" "$SANDGATE_PROXY_PORT" "$SANDGATE_REDIS_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then fail "port $port still answers after stop"; fi
done
echo "test_run: 3 passed, 0 failed"
