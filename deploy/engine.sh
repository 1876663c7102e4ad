#!/usr/bin/env bash
# Make sure a Docker engine answers, and that it offers gVisor's runtime
# "runsc" (sandboxes run under it: README "Sandboxes"). Starts a local
# dockerd if none answers, with a daemon configuration of the project's own
# ($SANDGATE_DOCKERD_CONFIG) that registers runsc with --network=none:
# sandboxes have no network, and with runsc's default network mode a
# NetworkMode "none" container does not start.
set -euo pipefail
# shellcheck source=deploy/lib.sh
. "$(dirname "$0")/lib.sh"

LOG=${SANDGATE_DOCKERD_LOG:-/var/log/sandgate-dockerd.log}
CONFIG=${SANDGATE_DOCKERD_CONFIG:-/etc/sandgate/dockerd.json}
PIDFILE=/var/run/docker.pid
RUNSC=$(command -v runsc || true)

engine_version() {
  sg_log "engine: Docker $(docker version -f '{{.Server.Version}} (API {{.Server.APIVersion}})')"
}

engine_has_runsc() {
  docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' 2>/dev/null | tr ' ' '\n' | grep -qx runsc
}

# write_config FILE: the daemon configuration of the project's own: the
# runsc runtime entry when runsc is installed, else nothing.
write_config() {
  mkdir -p "$(dirname "$1")"
  if [ -n "$RUNSC" ]; then
    printf '{"runtimes":{"runsc":{"path":"%s","runtimeArgs":["--network=none"]}}}\n' "$RUNSC" >"$1.tmp"
  else
    printf '{}\n' >"$1.tmp"
  fi
  mv -f "$1.tmp" "$1"
}

lacks_runsc() {
  sg_log "engine: WARNING: the engine does not offer runsc ($*); sandboxes run on runc, the host's kernel" \
         "(the proxy says so in its log and GET /health). See README \"Sandboxes\" for what the engine needs."
}

# An engine that answers: add runsc to it without restarting it, where that
# is safe: only a dockerd this project started (its output goes to $LOG),
# through the configuration file it reads, and SIGHUP (dockerd re-reads its
# runtimes then; running containers are not touched).
ensure_runsc() {
  if engine_has_runsc; then sg_log "engine: offers runsc (gVisor)"; return 0; fi
  [ -n "$RUNSC" ] || { lacks_runsc "runsc is not installed: run deploy/install-deps.sh"; return 0; }
  case ${DOCKER_HOST:-unix:///var/run/docker.sock} in
    unix:///var/run/docker.sock) ;;
    *) lacks_runsc "DOCKER_HOST=$DOCKER_HOST is not the local engine"; return 0 ;;
  esac
  local pid file args=()
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  if [ -z "$pid" ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != dockerd ]; then
    lacks_runsc "no local dockerd in $PIDFILE"; return 0
  fi
  if [ "$(id -u)" -ne 0 ] || [ "$(readlink "/proc/$pid/fd/1" 2>/dev/null)" != "$(readlink -f "$LOG")" ]; then
    lacks_runsc "dockerd (pid $pid) was not started by deploy/engine.sh, or we are not root: not reconfiguring it"
    return 0
  fi
  mapfile -d '' args <"/proc/$pid/cmdline"
  file=
  for i in "${!args[@]}"; do
    case ${args[$i]} in
      --config-file=*) file=${args[$i]#--config-file=} ;;
      --config-file) file=${args[$((i + 1))]:-} ;;
    esac
  done
  if [ "$file" = "$CONFIG" ]; then
    write_config "$CONFIG"
  elif [ -z "$file" ] && [ ${#args[@]} -eq 1 ] && [ ! -e /etc/docker/daemon.json ]; then
    # started as plain `dockerd` by an earlier engine.sh: it reads the
    # default file, which does not exist, so nothing else is in it
    sg_log "engine: dockerd (pid $pid) has no configuration file: writing /etc/docker/daemon.json (runsc only)"
    write_config /etc/docker/daemon.json
  else
    lacks_runsc "dockerd (pid $pid) reads ${file:-/etc/docker/daemon.json}, a configuration not the project's own"
    return 0
  fi
  sg_log "engine: adding the runsc runtime to dockerd (pid $pid) with SIGHUP"
  kill -HUP "$pid"
  for _ in $(seq 20); do
    if engine_has_runsc; then sg_log "engine: offers runsc (gVisor)"; return 0; fi
    sleep 0.5
  done
  lacks_runsc "dockerd (pid $pid) did not take the runtime; see $LOG"
}

if sg_docker_ping; then engine_version; ensure_runsc; exit 0; fi

case ${DOCKER_HOST:-unix:///var/run/docker.sock} in
  unix:///var/run/docker.sock) ;;
  *) sg_die "DOCKER_HOST=$DOCKER_HOST does not answer (not starting a local dockerd for it)" ;;
esac
sg_need_root "starting dockerd"
sg_have dockerd || sg_die "dockerd not installed (run deploy/install-deps.sh)"

# A pid file naming a live dockerd means one is (still) starting: wait for it.
# Any other pid file is stale (its process is gone) and would stop dockerd.
pid=$(cat "$PIDFILE" 2>/dev/null || true)
if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
  sg_log "engine: dockerd (pid $pid) is running but not answering yet; waiting"
else
  rm -f "$PIDFILE"
  write_config "$CONFIG"
  sg_log "engine: starting dockerd (configuration: $CONFIG, log: $LOG)"
  setsid nohup dockerd --config-file "$CONFIG" >>"$LOG" 2>&1 </dev/null &
  pid=$!
fi

for _ in $(seq 60); do
  if sg_docker_ping; then engine_version; ensure_runsc; exit 0; fi
  kill -0 "$pid" 2>/dev/null || { tail -n 20 "$LOG" >&2 2>/dev/null || true; sg_die "dockerd exited; see $LOG"; }
  sleep 1
done
tail -n 20 "$LOG" >&2 2>/dev/null || true
sg_die "dockerd (pid $pid) did not answer /_ping within 60 s; see $LOG"
