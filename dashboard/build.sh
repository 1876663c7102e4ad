#!/usr/bin/env bash
# Builds the ops dashboard (GET /dashboard) into OUT (default
# <repo>/build/www/dashboard), from the pinned packages of package-lock.json
# (npm ci; the npm registry, or npm's cache). Run by deploy/run.sh,
# deploy/test.sh and the gateway's compose image; never at request time.
# Skips the work when the sources and the lock file are unchanged since the
# last build of OUT (their hash is kept beside OUT, not in it: all of OUT is served).
#
# Usage: dashboard/build.sh [OUT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../build/www/dashboard}
mkdir -p "$out"
out=$(cd "$out" && pwd)
stamp=$(dirname "$out")/.$(basename "$out").inputs

command -v npm >/dev/null || { echo "dashboard/build.sh: npm is missing (deploy/install-deps.sh installs it)" >&2; exit 1; }
# Vite 8 runs on Node.js 20.19 and later (docs/dashboard.md)
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)'; then
  echo "dashboard/build.sh: Node.js $(node --version) is too old: Vite needs 20.19 or later" >&2
  exit 1
fi

inputs=$(cd "$here" && find build.sh index.html package.json package-lock.json vite.config.js src -type f -print0 \
  | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
if [ -f "$out/index.html" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$inputs" ]; then
  echo "dashboard: $out up to date"
  exit 0
fi

cd "$here"
# node_modules only when the lock file changed (npm ci wipes and reinstalls)
if [ ! -f node_modules/.package-lock.json ] || ! cmp -s package-lock.json node_modules/.sandgate-lock; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.sandgate-lock
fi
DASHBOARD_OUT="$out" npx --no-install vite build --logLevel warn
echo "$inputs" >"$stamp"
echo "dashboard: built $out"
