#!/usr/bin/env bash
# integration.compose: the whole stack under docker-compose, as an operator
# runs it. Builds the images (deploy/compose-images.sh: quick when cached),
# starts a private project (name, proxy id, host port, admin token all unique
# to this run), makes a tenant and a token with sandgate-admin inside the
# gateway container, runs the seed 003 README example through the gateway,
# rotates the token, backs up the SQLite file, then `down -v` and checks that
# nothing is left: no project container, no sandbox container of this proxy
# id, no volume, no network. Cleans up on every path (trap).
#
# Needs root (or the docker group), a Docker engine, docker-compose (or the
# `docker compose` plugin), curl and jq. Runs from ctest or by hand.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NAME=sgtest-compose-$$
t_start=$SECONDS

# Everything docker-compose.yml reads: exported so that a .env file next to it
# cannot point this run at another port, proxy id or token.
export SANDGATE_PROXY_ID=$NAME
export SANDGATE_BIND=127.0.0.1 SANDGATE_PORT=0 # 0: the engine picks a free host port
SANDGATE_ADMIN_TOKEN=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
export SANDGATE_ADMIN_TOKEN
export SANDGATE_LOG_LEVEL=info
export SANDGATE_STORE_VOLUME= # no library installs here: no shared store volume is made
unset COMPOSE_FILE COMPOSE_PROJECT_NAME DOCKER_CONTEXT

# SANDGATE_COMPOSE picks the command; else the compose plugin when there is
# one (newer engines refuse docker-compose 1.29's old API version), else
# Debian's docker-compose.
if [ -n "${SANDGATE_COMPOSE:-}" ]; then
  read -ra COMPOSE <<<"$SANDGATE_COMPOSE"
elif docker compose version >/dev/null 2>&1; then
  COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
  COMPOSE=(docker-compose)
else
  echo "FAIL: neither docker-compose nor 'docker compose' is installed (deploy/install-deps.sh)" >&2
  exit 1
fi
for tool in docker curl jq; do
  command -v "$tool" >/dev/null 2>&1 || { echo "FAIL: $tool is not installed" >&2; exit 1; }
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/$NAME.XXXXXX")
passed=0 failed=0 started=0 finished=0

log() { printf '[%s %3ds] %s\n' "$NAME" "$((SECONDS - t_start))" "$*" >&2; }
dc() { "${COMPOSE[@]}" -p "$NAME" -f "$ROOT/docker-compose.yml" --project-directory "$ROOT" "$@"; }
ok() { passed=$((passed + 1)); printf 'ok %d - %s\n' "$((passed + failed))" "$1"; }
not_ok() {
  failed=$((failed + 1))
  printf 'not ok %d - %s\n' "$((passed + failed))" "$1"
  shift
  local line
  for line in "$@"; do printf '#   %s\n' "$line"; done
}
die() { not_ok "$@"; exit 1; }

# Our sandbox containers (label of this run's proxy id) and project objects.
sandboxes() { docker ps -aq --filter "label=sandgate.proxy=$NAME"; }
project_containers() { docker ps -aq --filter "label=com.docker.compose.project=$NAME"; }
project_volumes() { docker volume ls -q --filter "label=com.docker.compose.project=$NAME"; }
project_networks() { docker network ls -q --filter "label=com.docker.compose.project=$NAME"; }

# wait_gone WHAT FUNC SECONDS: poll until FUNC lists nothing; 0 when it does.
wait_gone() {
  local deadline=$((SECONDS + $3))
  while [ -n "$($2)" ]; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 1
  done
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "$started" = 1 ] && [ "$finished" = 0 ]; then
    log "cleaning up after a failure: logs, then down -v"
    {
      echo "--- docker-compose ps"
      dc ps 2>&1 || true
      echo "--- docker-compose logs (last 60 lines per service)"
      dc logs --no-color --tail=60 2>&1 || true
    } >&2
    dc down -v --remove-orphans -t 30 >"$TMP/down.log" 2>&1 || cat "$TMP/down.log" >&2
    # the proxy removes its sandboxes on SIGTERM; a SIGKILLed one cannot
    if ! wait_gone "sandbox containers" sandboxes 30; then
      log "removing sandbox containers the proxy left behind: $(sandboxes | tr '\n' ' ')"
      sandboxes | xargs -r docker rm -f >/dev/null 2>&1 || true
      rc=1
    fi
    # anything of this project that down missed (only ours: by project label)
    project_containers | xargs -r docker rm -f >/dev/null 2>&1 || true
    project_volumes | xargs -r docker volume rm >/dev/null 2>&1 || true
    project_networks | xargs -r docker network rm >/dev/null 2>&1 || true
  fi
  rm -rf "$TMP"
  [ "$rc" -eq 0 ] || [ "$failed" -gt 0 ] || failed=1
  log "$passed passed, $failed failed in $((SECONDS - t_start)) s"
  printf '%d passed, %d failed\n' "$passed" "$failed"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- the multi-host files (docs/deployment.md) ---------------------------------
# valid as written, and refusing to run without the settings they require
hostfile() { env -u SANDGATE_PROXY_ID "$@" "${COMPOSE[@]}" -p "$NAME" -f "$ROOT/deploy/compose/$HOSTFILE" \
  --project-directory "$ROOT" config; }
HOSTFILE=proxy-host.yml
hostfile SANDGATE_PROXY_ID=h1 SANDGATE_PROXY_BIND=10.0.0.11 >"$TMP/proxy-host.yml" 2>&1 ||
  die "deploy/compose/proxy-host.yml is valid" "$(cat "$TMP/proxy-host.yml")"
grep -q '10.0.0.11' "$TMP/proxy-host.yml" || die "proxy-host.yml publishes the proxy on SANDGATE_PROXY_BIND"
! hostfile SANDGATE_PROXY_BIND=10.0.0.11 >/dev/null 2>&1 || die "proxy-host.yml refuses to run without SANDGATE_PROXY_ID"
! hostfile SANDGATE_PROXY_ID=h1 env -u SANDGATE_PROXY_BIND >/dev/null 2>&1 ||
  die "proxy-host.yml refuses to publish the proxy without SANDGATE_PROXY_BIND"
HOSTFILE=gateway-host.yml
hostfile SANDGATE_PROXY_URL=http://10.0.0.11:8000,http://10.0.0.12:8000 >"$TMP/gateway-host.yml" 2>&1 ||
  die "deploy/compose/gateway-host.yml is valid" "$(cat "$TMP/gateway-host.yml")"
grep -q 'http://10.0.0.11:8000,http://10.0.0.12:8000' "$TMP/gateway-host.yml" ||
  die "gateway-host.yml hands SANDGATE_PROXY_URL to the gateway"
! hostfile env -u SANDGATE_PROXY_URL >/dev/null 2>&1 || die "gateway-host.yml refuses to run without SANDGATE_PROXY_URL"
ok "deploy/compose/proxy-host.yml and gateway-host.yml are valid and require their settings"

# --- images -------------------------------------------------------------------
log "building images (deploy/compose-images.sh python)"
t0=$SECONDS
if ! "$ROOT/deploy/compose-images.sh" python >"$TMP/images.log" 2>&1; then
  tail -n 40 "$TMP/images.log" >&2
  die "deploy/compose-images.sh builds the images"
fi
sed 's/^/#   /' "$TMP/images.log"
ok "deploy/compose-images.sh builds the images ($((SECONDS - t0)) s)"

# --- up ------------------------------------------------------------------------
log "docker-compose up -d"
started=1
t0=$SECONDS
if ! dc up -d --no-build >"$TMP/up.log" 2>&1; then
  cat "$TMP/up.log" >&2
  die "docker-compose up -d"
fi
port=$(dc port gateway 3000 2>/dev/null | tail -n 1 | sed 's/.*://')
[[ "$port" =~ ^[0-9]+$ ]] || die "the gateway's port is published" "docker-compose port gateway 3000: '$port'"
BASE=http://127.0.0.1:$port

deadline=$((SECONDS + 120))
until [ "$(curl -sS -m 2 "$BASE/" 2>/dev/null | jq -r .status 2>/dev/null)" = ok ]; do
  [ "$SECONDS" -lt "$deadline" ] || die "the gateway answers GET / within 120 s" "on $BASE"
  sleep 0.5
done
ok "stack up, gateway answers on $BASE ($((SECONDS - t0)) s)"

gw_id=$(dc ps -q gateway)
deadline=$((SECONDS + 60))
until [ "$(docker inspect -f '{{.State.Health.Status}}' "$gw_id")" = healthy ]; do
  [ "$SECONDS" -lt "$deadline" ] || die "the gateway's healthcheck reports healthy within 60 s"
  sleep 1
done
for svc in redis proxy gateway; do
  id=$(dc ps -q "$svc")
  st=$(docker inspect -f '{{.State.Status}} {{.State.Health.Status}} {{.RestartCount}}' "$id")
  [ "$st" = "running healthy 0" ] || die "service $svc is running and healthy, never restarted" "state: $st"
done
ok "redis, proxy and gateway healthy, none restarted"
if [ -n "$(docker port "$(dc ps -q proxy)")" ]; then die "the proxy publishes no port"; fi
ok "the proxy publishes no port"

# --- tenant and token with sandgate-admin inside the gateway container ---------
if ! dc exec -T gateway sandgate-admin tenant create t1 >"$TMP/out" 2>&1; then
  die "sandgate-admin tenant create t1" "$(cat "$TMP/out")"
fi
TOKEN=$(dc exec -T gateway sandgate-admin token create t1 --label compose-test 2>"$TMP/err") ||
  die "sandgate-admin token create t1" "$(cat "$TMP/err")"
TOKEN=${TOKEN%$'\r'}
[[ "$TOKEN" =~ ^[A-Za-z0-9_-]{20,}$ ]] || die "token create prints the token alone" "stdout: '$TOKEN'"
ok "sandgate-admin: tenant t1 and a token"

# api METHOD PATH [JSON]: sets $code and $body (token: $TOKEN)
api() {
  local args=(-sS -m 120 -o "$TMP/body" -w '%{http_code}' -X "$1")
  [ -z "${TOKEN:-}" ] || args+=(-H "Authorization: Bearer $TOKEN")
  [ $# -lt 3 ] || args+=(-H 'Content-Type: application/json' --data-binary "$3")
  code=$(curl "${args[@]}" "$BASE$2" 2>"$TMP/curl.err") || code="000 ($(cat "$TMP/curl.err"))"
  body=$(cat "$TMP/body" 2>/dev/null || true)
}
# check DESCRIPTION STATUS JQ_FILTER: the last reply has STATUS and the filter is true
check() {
  if [ "$code" = "$2" ] && jq -e "$3" <<<"$body" >/dev/null 2>&1; then
    ok "$1"
  else
    not_ok "$1" "expected HTTP $2 and: $3" "got HTTP $code: $body"
  fi
}

TOKEN='' api GET /
check "GET / without a token" 200 '.status == "ok"'
TOKEN='' api GET /dashboard/
if [ "$code" = 200 ] && grep -q '<script type="module"' "$TMP/body"; then ok "GET /dashboard/ serves the ops page"
else not_ok "GET /dashboard/ serves the ops page" "expected HTTP 200 and the page" "got HTTP $code"; fi
TOKEN='' api GET /sessions
check "GET /sessions without a token is 401 with detail and code" 401 '(.detail | type) == "string" and (.code | type) == "string"'

TOKEN='' api GET /health
check "GET /health: the proxy and the Docker engine answer" 200 '.status == "ok" and .proxy and .docker and .state.backend == "redis"'
TOKEN='' api GET /docs/
if [ "$code" = 200 ] && grep -q '/openapi.json' "$TMP/body"; then ok "GET /docs/ serves the page that loads /openapi.json"
else not_ok "GET /docs/ serves the page that loads /openapi.json" "got HTTP $code"; fi

# --- seed 003 README, session-based execution ---------------------------------
api POST /sessions '{"lang": "python"}'
check "POST /sessions" 200 '(.session_id | type) == "string" and (.session_id | length) > 0 and .status == "active"'
SID=$(jq -r '.session_id // empty' <<<"$body" 2>/dev/null || true)
[ -n "$SID" ] || die "a session id to go on with"

api POST "/sessions/$SID/execute" '{"code": "import numpy as np\nprint(np.array([1,2,3]).mean())", "libraries": ["numpy"]}'
check "execute numpy mean in the session" 200 \
  '.stdout == "2.0\n" and .stderr == "" and .exit_code == 0 and .success == true and .timed_out == false
   and .truncated == false and (.execution_time | type) == "number"'

api POST "/sessions/$SID/execute" '{"code": "print(\"Previous imports are still available\")\nprint(np.__version__)"}'
check "execute again: state is kept (np still imported)" 200 \
  '(.stdout | test("^Previous imports are still available\n[0-9]+\\.[0-9]+")) and .exit_code == 0'

# --- ephemeral execution and the error example ---------------------------------
api POST /execute '{"code": "import sys\nprint(f\"Python {sys.version}\")", "lang": "python"}'
check "POST /execute (ephemeral)" 200 '(.stdout | startswith("Python 3.")) and .exit_code == 0 and .success == true'

api POST /execute '{"code": "print(undefined_variable)", "lang": "python"}'
check "POST /execute with an error" 200 \
  '.stdout == "" and (.stderr | contains("NameError: name '"'"'undefined_variable'"'"' is not defined")) and .exit_code == 1 and .success == false'

# --- list, delete ---------------------------------------------------------------
api GET /sessions
check "GET /sessions lists the session" 200 ".sessions | index(\"$SID\") != null"

# the admin API (SANDGATE_ADMIN_TOKEN reached the gateway; same SQLite file as sandgate-admin)
TOKEN=$SANDGATE_ADMIN_TOKEN api GET /admin/tenants
check "admin API lists tenant t1 made by sandgate-admin" 200 '[.tenants[] | select(.name == "t1")] | length == 1'

n_sandboxes=$(sandboxes | wc -l)
if [ "$n_sandboxes" -gt 0 ]; then ok "the proxy runs $n_sandboxes sandbox container(s) labelled sandgate.proxy=$NAME"
else not_ok "the proxy runs sandbox containers labelled sandgate.proxy=$NAME"; fi

api DELETE "/sessions/$SID"
check "DELETE /sessions/{id}" 200 '.status == "closed"'
api GET /sessions
check "GET /sessions no longer lists it" 200 ".sessions | index(\"$SID\") == null"

# --- token rotation inside compose -------------------------------------------
OLD=$TOKEN
NEW=$(dc exec -T gateway sandgate-admin token create t1 --label rotated 2>/dev/null) || die "token create (rotation)"
NEW=${NEW%$'\r'}
if dc exec -T gateway sandgate-admin token revoke "$OLD" >"$TMP/out" 2>&1; then ok "token revoke (old token)"
else not_ok "token revoke (old token)" "$(cat "$TMP/out")"; fi
TOKEN=$OLD api GET /sessions
check "the revoked token is refused" 401 '.code | type == "string"'
TOKEN=$NEW api GET /sessions
check "the new token works" 200 '.sessions | type == "array"'

# --- backup of the SQLite file while running (WAL: sqlite3 .backup) ------------
# shellcheck disable=SC2016 # expanded inside the container
if dc exec -T gateway sh -c 'sqlite3 "$SANDGATE_DATA_DIR/sandgate.db" ".backup /tmp/backup.db" && cat /tmp/backup.db && rm -f /tmp/backup.db' \
     >"$TMP/backup.db" 2>"$TMP/err" &&
   [ "$(head -c 15 "$TMP/backup.db")" = "SQLite format 3" ]; then
  ok "online backup with sqlite3 .backup ($(wc -c <"$TMP/backup.db") bytes)"
else
  not_ok "online backup with sqlite3 .backup" "$(cat "$TMP/err")" "$(head -c 64 "$TMP/backup.db" | od -c | head -n 2)"
fi

# --- down -v: nothing of ours is left -------------------------------------------
[ "$failed" -eq 0 ] || exit 1 # keep the logs: the trap prints them, then downs
log "docker-compose down -v"
t0=$SECONDS
if ! dc down -v -t 30 >"$TMP/down.log" 2>&1; then
  cat "$TMP/down.log" >&2
  die "docker-compose down -v"
fi
finished=1
ok "docker-compose down -v ($((SECONDS - t0)) s)"
if [ -z "$(project_containers)" ]; then ok "no container of project $NAME remains"
else not_ok "no container of project $NAME remains" "$(project_containers | tr '\n' ' ')"; fi
if wait_gone "sandbox containers" sandboxes 30; then ok "no sandbox container labelled sandgate.proxy=$NAME remains"
else
  not_ok "no sandbox container labelled sandgate.proxy=$NAME remains (30 s)" "$(sandboxes | tr '\n' ' ')"
  sandboxes | xargs -r docker rm -f >/dev/null 2>&1 || true
fi
if [ -z "$(project_volumes)" ]; then ok "the project's volumes are removed"
else
  not_ok "the project's volumes are removed" "$(project_volumes | tr '\n' ' ')"
  project_volumes | xargs -r docker volume rm >/dev/null 2>&1 || true
fi
if [ -z "$(project_networks)" ]; then ok "the project's network is removed"
else
  not_ok "the project's network is removed" "$(project_networks | tr '\n' ' ')"
  project_networks | xargs -r docker network rm >/dev/null 2>&1 || true
fi
[ "$failed" -eq 0 ]
