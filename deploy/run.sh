#!/usr/bin/env bash
# The run command: installs what is missing, starts Docker, builds sandgate
# and its images, then runs the proxy in the foreground.
# Usage: sudo ./deploy/run.sh   (HOST, PORT and SANDGATE_* from the environment)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/lib.sh
. deploy/lib.sh

./deploy/install-deps.sh
./deploy/engine.sh
./deploy/base-image.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 >/dev/null
./deploy/build-images.sh build

export HOST=${HOST:-127.0.0.1} PORT=${PORT:-8000}

# Services started in the background (redis, gateway: later) go through
# start_bg, and are stopped when this script ends or is interrupted.
children=()
start_bg() { "$@" & children+=($!); sg_log "run: started $1 (pid $!)"; }
stop_children() { [ ${#children[@]} -eq 0 ] || { kill "${children[@]}" 2>/dev/null; wait; } || true; }
trap stop_children EXIT
trap 'exit 130' INT; trap 'exit 143' TERM

sg_log "run: proxy on $HOST:$PORT; try:"
echo "  curl -s -X POST localhost:$PORT/sessions -H 'Content-Type: application/json' -d '{\"lang\":\"python\"}'"
if [ ${#children[@]} -eq 0 ]; then
  exec build/proxy/sandgate-proxy
fi
build/proxy/sandgate-proxy & children+=($!)
wait -n
