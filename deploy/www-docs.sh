#!/usr/bin/env bash
# Builds GET /docs: Swagger UI's distribution files (npm swagger-ui-dist,
# pinned in deploy/www-docs/package.json + package-lock.json) and the page
# that points them at /openapi.json, into OUT/docs/ (default build/www/docs/),
# which the gateway serves from SANDGATE_WWW_DIR with h2o's file handler.
# Run at install time (deploy/run.sh, deploy/test.sh, deploy/compose-images.sh),
# never at request time; the page loads nothing from elsewhere.
# Quick no-op when the package is installed already.
#
# Usage: deploy/www-docs.sh [OUT]   (OUT: the www directory, default build/www)
set -euo pipefail
# shellcheck source=deploy/lib.sh
. "$(dirname "$0")/lib.sh"

out=${1:-$SG_ROOT/build/www}
src=$SG_ROOT/deploy/www-docs
dist=$src/node_modules/swagger-ui-dist
want=$(sed -n 's/.*"swagger-ui-dist": *"\([^"]*\)".*/\1/p' "$src/package.json")

command -v npm >/dev/null || sg_die "www-docs: npm is missing (deploy/install-deps.sh installs it)"
if [ "$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$dist/package.json" 2>/dev/null | head -n 1)" != "$want" ]; then
  sg_log "www-docs: npm ci (swagger-ui-dist $want)"
  (cd "$src" && npm ci --no-audit --no-fund --ignore-scripts >/dev/null)
fi
mkdir -p "$out/docs.new"
cp "$dist/swagger-ui-bundle.js" "$dist/swagger-ui.css" "$dist/favicon-32x32.png" "$dist/LICENSE" "$out/docs.new/"
cp "$src/index.html" "$src/docs.js" "$out/docs.new/"
chmod -R a+rX "$out/docs.new"
rm -rf "$out/docs"
mv "$out/docs.new" "$out/docs"
sg_log "www-docs: $out/docs (swagger-ui-dist $want)"
