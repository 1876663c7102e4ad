#!/usr/bin/env bash
# Install the Debian packages sandgate needs to build, test and run.
# Quick no-op when all are present.
set -euo pipefail
# shellcheck source=deploy/lib.sh
. "$(dirname "$0")/lib.sh"

PKGS=(build-essential cmake pkg-config libh2o-evloop-dev libssl-dev
      libcurl4-openssl-dev libjson-c-dev libhiredis-dev libsqlite3-dev
      libcmocka-dev redis-server docker.io docker-compose debootstrap curl jq
      ca-certificates sqlite3
      socat openssl  # the TLS engine test: a TLS listener before the engine's socket, its certificates
      zlib1g-dev  # the rich-result tests inflate the PNGs a sandbox sends back
      clang libclang-rt-14-dev  # fuzz/: clang's libFuzzer and sanitizer runtimes
      clang-format  # the format check (tests/format.sh)
      python3-prometheus-client  # the Prometheus client library's parser reads each /metrics (tests/support/sggw_api.c)
      runsc  # gVisor: the engine runs every sandbox under it (deploy/engine.sh)
      python3 nodejs  # the agent's unit tests run the kernels on the host
      chromium)  # GET /docs and the ops dashboard in a real browser (tests/openapi/, tests/dashboard/)
# npm: GET /docs (deploy/www-docs.sh), the dashboard (dashboard/build.sh) and
# the test suites' npm packages; the machine's own node/npm when present,
# else Debian's
command -v npm >/dev/null || PKGS+=(npm)

missing=()
for p in "${PKGS[@]}"; do
  [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" = "ii " ] || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  sg_log "deps: all ${#PKGS[@]} packages present"
  exit 0
fi

sg_need_root "installing ${missing[*]}"
sg_log "deps: installing ${missing[*]}"
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
sg_log "deps: done"
