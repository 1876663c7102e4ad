#!/usr/bin/env bash
# ctest openapi.validate: gateway/openapi/openapi.json (what GET /openapi.json
# serves) is a valid OpenAPI 3.1 document, checked by a validator from npm
# (tests/openapi/package.json; deploy/test.sh runs `npm ci` here).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -d "$here/node_modules/@seriousme/openapi-schema-validator" ]; then
  echo "tests/openapi: the validator is not installed: run (cd tests/openapi && npm ci)" >&2
  exit 1
fi
exec node "$here/validate.mjs" "$here/../../gateway/openapi/openapi.json"
