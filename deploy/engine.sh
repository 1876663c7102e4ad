#!/usr/bin/env bash
# Make sure a Docker engine answers; start a local dockerd if none does.
set -euo pipefail
# shellcheck source=deploy/lib.sh
. "$(dirname "$0")/lib.sh"

LOG=${SANDGATE_DOCKERD_LOG:-/var/log/sandgate-dockerd.log}
PIDFILE=/var/run/docker.pid

engine_version() {
  sg_log "engine: Docker $(docker version -f '{{.Server.Version}} (API {{.Server.APIVersion}})')"
}

if sg_docker_ping; then engine_version; exit 0; fi

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
  sg_log "engine: starting dockerd (log: $LOG)"
  setsid nohup dockerd >>"$LOG" 2>&1 </dev/null &
  pid=$!
fi

for _ in $(seq 60); do
  if sg_docker_ping; then engine_version; exit 0; fi
  kill -0 "$pid" 2>/dev/null || { tail -n 20 "$LOG" >&2 2>/dev/null || true; sg_die "dockerd exited; see $LOG"; }
  sleep 1
done
tail -n 20 "$LOG" >&2 2>/dev/null || true
sg_die "dockerd (pid $pid) did not answer /_ping within 60 s; see $LOG"
