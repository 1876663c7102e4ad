#!/usr/bin/env bash
# The run command: installs what is missing, starts Docker if no engine
# answers, builds sandgate and its sandbox images, then runs the whole
# service: redis-server, sandgate-proxy and sandgate-gateway. Creates a first
# tenant and token when there are none and prints a first request.
# Each of them runs under a supervisor of its own: one that dies (a crash,
# kill -9) is started again after a backoff (0.5 s, doubling up to 30 s,
# back to 0.5 s once it stayed up 60 s), each restart logged with how it
# ended; the others go on untouched. Its pid is in $SANDGATE_DATA_DIR/run/
# <name>.pid. Ctrl-C (or `./deploy/run.sh stop` from another shell) stops
# everything it started; the proxy removes its containers as it stops.
#
# Usage, as root: ./deploy/run.sh [stop]   (as another user: sudo ./deploy/run.sh)
# Settings: HOST/PORT of the gateway (0.0.0.0:3000), SANDGATE_* (README).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/lib.sh
. deploy/lib.sh

export SANDGATE_DATA_DIR=${SANDGATE_DATA_DIR:-$SG_ROOT/data}
run_dir=$SANDGATE_DATA_DIR/run
if [ "${1:-}" = stop ]; then
  [ -f "$run_dir/run.pid" ] || sg_die "run: nothing is running (no $run_dir/run.pid)"
  kill -TERM "$(cat "$run_dir/run.pid")"
  sg_log "run: asked pid $(cat "$run_dir/run.pid") to stop"
  exit 0
fi

./deploy/install-deps.sh
./deploy/engine.sh
./deploy/base-image.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 >/dev/null
./deploy/build-images.sh build
./deploy/www-docs.sh build/www   # GET /docs
# the ops dashboard's page, served by the gateway from $SANDGATE_WWW_DIR/dashboard
./dashboard/build.sh build/www/dashboard >/dev/null
export SANDGATE_WWW_DIR=${SANDGATE_WWW_DIR:-$SG_ROOT/build/www}

redis_port=${SANDGATE_REDIS_PORT:-6380}
proxy_port=${SANDGATE_PROXY_PORT:-8000}
export SANDGATE_REDIS_URL=${SANDGATE_REDIS_URL-redis://127.0.0.1:$redis_port}
# the gateway reaches the proxy over the proxy's Unix socket (0600: this
# user only; cheaper than TCP over loopback); the port stays for operators
# and the benchmark. SANDGATE_PROXY_SOCKET= (empty) leaves the socket out.
export SANDGATE_PROXY_SOCKET=${SANDGATE_PROXY_SOCKET-$run_dir/proxy.sock}
if [ ${#SANDGATE_PROXY_SOCKET} -gt 107 ]; then # a socket's path holds 107 bytes
  sg_log "run: $SANDGATE_PROXY_SOCKET is too long a path for a socket: the gateway reaches the proxy over TCP"
  SANDGATE_PROXY_SOCKET=
fi
if [ -n "$SANDGATE_PROXY_SOCKET" ]; then proxy_default_url="http://[unix:$SANDGATE_PROXY_SOCKET]"
else proxy_default_url=http://127.0.0.1:$proxy_port; fi
export SANDGATE_PROXY_URL=${SANDGATE_PROXY_URL:-$proxy_default_url}
# where the proxy keeps what lets a restarted proxy take its sessions back
export SANDGATE_PROXY_STATE_DIR=${SANDGATE_PROXY_STATE_DIR:-$SANDGATE_DATA_DIR/proxy}
mkdir -p "$run_dir"
if [ -z "${SANDGATE_ADMIN_TOKEN:-}" ]; then
  # one admin token per data dir, made once, readable by root only
  [ -s "$run_dir/admin-token" ] || (umask 077; head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$run_dir/admin-token")
  SANDGATE_ADMIN_TOKEN=$(cat "$run_dir/admin-token")
fi
export SANDGATE_ADMIN_TOKEN

supervisors=()
stop_children() {
  trap - EXIT INT TERM
  if [ ${#supervisors[@]} -ne 0 ]; then
    sg_log "run: stopping redis-server, sandgate-proxy, sandgate-gateway"
    kill -TERM "${supervisors[@]}" 2>/dev/null || true
    wait "${supervisors[@]}" 2>/dev/null || true
  fi
  rm -f "$run_dir/run.pid"
}
trap stop_children EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
echo $$ > "$run_dir/run.pid"

# how a wait status reads: "exit status 1", "killed by signal 9 (KILL)"
describe_status() {
  if [ "$1" -gt 128 ]; then echo "killed by signal $(($1 - 128)) ($(kill -l $(($1 - 128)) 2>/dev/null || echo ?))"
  else echo "exit status $1"; fi
}

# supervise NAME COMMAND...: runs COMMAND (output appended to
# $run_dir/NAME.log, pid in $run_dir/NAME.pid) and starts it again whenever
# it ends, until the supervisor gets SIGTERM, which it passes on to COMMAND
# before waiting for it to end.
supervise() {
  local name=$1
  shift
  (
    set +e
    stopping=0 pid='' sleeper='' delay_ms=500 restarts=0
    trap 'stopping=1; kill -TERM $pid $sleeper 2>/dev/null' TERM
    while :; do
      started=$SECONDS
      "$@" >> "$run_dir/$name.log" 2>&1 &
      pid=$!
      echo "$pid" > "$run_dir/$name.pid"
      [ "$restarts" -eq 0 ] || sg_log "run: $name started again (pid $pid)"
      # a trapped signal interrupts wait: wait again until the child is gone
      while :; do
        wait "$pid"
        st=$?
        kill -0 "$pid" 2>/dev/null || break
      done
      [ "$stopping" -eq 0 ] || break
      [ $((SECONDS - started)) -lt 60 ] || delay_ms=500
      restarts=$((restarts + 1))
      sg_log "run: $name (pid $pid) ended after $((SECONDS - started)) s, $(describe_status "$st");" \
        "restart $restarts in $((delay_ms / 1000)).$(printf %03d $((delay_ms % 1000))) s"
      sleep "$((delay_ms / 1000)).$(printf %03d $((delay_ms % 1000)))" &
      sleeper=$!
      wait "$sleeper"
      sleeper=''
      [ "$stopping" -eq 0 ] || break
      delay_ms=$((delay_ms * 2 > 30000 ? 30000 : delay_ms * 2))
    done
    rm -f "$run_dir/$name.pid"
  ) &
  supervisors+=($!)
}

# wait_http URL WHAT: poll until URL answers, or fail.
wait_http() {
  for _ in $(seq 100); do
    curl -fsS -m 1 "$1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  sg_die "run: $2 did not come up (see $run_dir/*.log)"
}

if [ -n "$SANDGATE_REDIS_URL" ] && [ -z "${SANDGATE_REDIS_EXTERNAL:-}" ]; then
  supervise redis redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$SANDGATE_DATA_DIR" \
    --appendonly yes --save '' --daemonize no
  for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 || sg_die "run: redis-server did not come up"
  sg_log "run: redis-server on 127.0.0.1:$redis_port"
fi

supervise proxy env HOST=127.0.0.1 PORT="$proxy_port" build/proxy/sandgate-proxy
wait_http "http://127.0.0.1:$proxy_port/" "sandgate-proxy"
sg_log "run: sandgate-proxy on 127.0.0.1:$proxy_port${SANDGATE_PROXY_SOCKET:+ and $SANDGATE_PROXY_SOCKET}"

supervise gateway env HOST="${HOST:-0.0.0.0}" PORT="${PORT:-3000}" build/gateway/sandgate-gateway
gw="http://127.0.0.1:${PORT:-3000}"
wait_http "$gw/" "sandgate-gateway"
sg_log "run: sandgate-gateway on ${HOST:-0.0.0.0}:${PORT:-3000}"

admin=build/gateway/sandgate-admin
if [ -z "$($admin tenant list)" ]; then
  $admin tenant create demo >/dev/null
  (umask 077; $admin token create demo --label first > "$run_dir/demo-token")
  sg_log "run: created tenant demo; its token is in $run_dir/demo-token"
fi
token_hint='<a token: build/gateway/sandgate-admin token create TENANT>'
[ -s "$run_dir/demo-token" ] && token_hint=$(cat "$run_dir/demo-token")

cat <<EOF

sandgate is up. A first request:

  curl -s -X POST $gw/execute -H 'Authorization: Bearer $token_hint' \\
    -H 'Content-Type: application/json' -d '{"code": "print(6 * 7)", "lang": "python"}'

Admin API token: $run_dir/admin-token. Logs: $run_dir/*.log. Stop: Ctrl-C or ./deploy/run.sh stop
API documentation: $gw/docs/ (the document: $gw/openapi.json). Health: $gw/health

Watch it live on the ops dashboard (the token in the #fragment never leaves the browser):

  $gw/dashboard/#token=$SANDGATE_ADMIN_TOKEN
EOF

# run until we are told to stop (the supervisors restart what dies)
wait -n "${supervisors[@]}" || true
sg_log "run: a supervisor exited; stopping the rest"
exit 1
