#!/usr/bin/env bash
# The test command: installs what is missing, starts Docker, builds sandgate
# and its images, then runs the unit and integration tests under ASan/UBSan,
# then every libFuzzer target in fuzz/ for 20 s (fuzz/run.sh).
# Usage, as root: ./deploy/test.sh   (as another user: sudo ./deploy/test.sh; from anywhere; CI runs it via .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=deploy/lib.sh
. deploy/lib.sh
exec </dev/null

./deploy/install-deps.sh
./deploy/engine.sh
./deploy/base-image.sh

# tests/mcp: MCP clients nobody here wrote (the TypeScript SDK, the
# conformance suite, the Node.js 22 they run on), pinned by its lock file
if ! command -v npm >/dev/null; then
  sg_log "test: installing Debian's npm"
  apt-get update -qq && apt-get install -y -qq npm >/dev/null
fi
sg_log "test: npm ci in tests/mcp"
(cd tests/mcp && npm ci --no-audit --no-fund --loglevel=error)

sg_log "test: build/ (RelWithDebInfo)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2
./deploy/build-images.sh build
# the static pages the gateway serves from build/www (SANDGATE_WWW_DIR in the
# tests): GET /docs (Swagger UI, npm), and the ops dashboard (npm ci from its
# lock file, then Vite), as the run command builds them
./deploy/www-docs.sh build/www
./dashboard/build.sh build/www/dashboard >/dev/null
sg_log "test: npm ci in tests/openapi (the OpenAPI validator)"
(cd tests/openapi && npm ci --no-audit --no-fund --ignore-scripts >/dev/null)

sg_log "test: build-asan/ (ASan + UBSan)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSANDGATE_SANITIZE=ON >/dev/null
cmake --build build-asan -j2

# the dashboard's browser test's driver (playwright-core, pinned)
sg_log "test: the dashboard's browser test's packages"
(cd tests/dashboard && npm ci --no-audit --no-fund --loglevel=error)

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
sg_log "test: ctest --test-dir build-asan"
t0=$(date +%s) rc=0
ctest --test-dir build-asan --output-on-failure | tee build-asan/ctest.log || rc=$?

# The tests check for leaked containers themselves; this only cleans up after
# a crashed test: containers of test proxies (SANDGATE_PROXY_ID sgtest-*)
# created during this run. Older ones may belong to another run on this
# engine: only listed.
leftovers() {
  docker ps -a --filter label=sandgate.proxy \
    --format '{{.ID}} {{.Label "sandgate.proxy"}} {{.Label "sandgate.created"}}' |
    awk -v t0="$t0" -v mine="$1" '$2 ~ /^sgtest-/ && (($3 >= t0) == mine) {print $1}' | tr '\n' ' '
}
leaked=$(leftovers 1) older=$(leftovers 0)
if [ -n "$leaked" ]; then
  sg_log "WARNING: removing leftover test containers: $leaked"
  # shellcheck disable=SC2086
  docker rm -f $leaked >/dev/null || true
fi
[ -z "$older" ] || sg_log "note: sgtest-* containers from before this run (not touched): $older"

sg_log "test: fuzz/run.sh (each libFuzzer target 20 s from its seed corpus)"
frc=0
./fuzz/run.sh 20 || frc=$?

sg_log "test: $(grep -E 'tests passed|No tests were found' build-asan/ctest.log | tail -n 1 || echo "ctest exit $rc")"
[ "$frc" = 0 ] && sg_log "test: fuzz targets passed" || sg_log "test: fuzz targets FAILED (fuzz/run.sh exit $frc)"
[ "$rc" != 0 ] || rc=$frc
exit "$rc"
