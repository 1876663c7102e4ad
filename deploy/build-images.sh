#!/usr/bin/env bash
# Build the sandbox language images sandgate/<lang>:latest from
# deploy/images/<lang>/ plus the static agent, offline (local base image only).
# SANDGATE_IMAGE_PREFIX (the proxy's setting, default "sandgate/") names them
# otherwise, so a work tree can test its own agent beside the shared images.
# Usage: build-images.sh [BUILD_DIR [LANG...]]   (or SANDGATE_LANGS="python ...")
# An image is rebuilt only when its inputs changed (label sandgate.build-hash).
set -euo pipefail
# shellcheck source=deploy/lib.sh
. "$(dirname "$0")/lib.sh"

BUILD_DIR=${1:-$SG_ROOT/build}
shift || true
IMAGES_DIR=$SG_ROOT/deploy/images
AGENT=$BUILD_DIR/proxy/sandgate-agent
[ -x "$AGENT" ] || sg_die "agent binary $AGENT missing: build it first (cmake --build ${BUILD_DIR#"$SG_ROOT"/})"

if [ $# -gt 0 ]; then langs=("$@")
elif [ -n "${SANDGATE_LANGS:-}" ]; then read -ra langs <<<"$SANDGATE_LANGS"
else langs=(); for f in "$IMAGES_DIR"/*/Dockerfile; do langs+=("$(basename "$(dirname "$f")")"); done
fi

# Inputs of an image: every file of its directory, the agent, and the IDs of
# the images it is built FROM (so a re-made base image means a rebuild).
input_hash() {
  local dir=$1
  {
    (cd "$dir" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
    sha256sum <"$AGENT"
    awk 'toupper($1) == "FROM" { for (i = 2; i <= NF; i++) if ($i !~ /^--/) { print $i; break } }' \
        "$dir/Dockerfile" | while read -r from; do
      docker image inspect -f '{{.Id}}' "$from" 2>/dev/null || echo "missing $from"
    done
  } | sha256sum | cut -c1-64
}

CTX=$(mktemp -d "${TMPDIR:-/tmp}/sandgate-ctx.XXXXXX")
trap 'rm -rf "$CTX"' EXIT

build_one() {
  local lang=$1 dir=$IMAGES_DIR/$1 tag=${SANDGATE_IMAGE_PREFIX:-sandgate/}$1:latest hash old ctx start
  hash=$(input_hash "$dir")
  old=$(docker image inspect -f '{{.Id}} {{index .Config.Labels "sandgate.build-hash"}}' "$tag" 2>/dev/null || true)
  if [ "${old#* }" = "$hash" ]; then
    sg_log "images: $tag up to date"
    return 0
  fi
  ctx=$CTX/$lang
  mkdir "$ctx" && cp -a "$dir"/. "$ctx"/ && cp "$AGENT" "$ctx"/sandgate-agent
  start=$SECONDS
  if ! docker build --force-rm --label "sandgate.build-hash=$hash" -t "$tag" "$ctx" >"$CTX/$lang.log" 2>&1; then
    tail -n 30 "$CTX/$lang.log" >&2
    sg_log "images: building $tag failed"
    return 1
  fi
  sg_log "images: built $tag in $((SECONDS - start)) s"
  # Drop the image this one replaces (fails harmlessly while containers use it).
  if [ -n "$old" ]; then docker image rm "${old%% *}" >/dev/null 2>&1 || true; fi
}

# Builds run SANDGATE_BUILD_JOBS at a time (default 2): most of a cold build
# is apt downloading and unpacking, which overlaps well.
jobs=${SANDGATE_BUILD_JOBS:-2} running=0 failed=0
for lang in "${langs[@]}"; do
  [ -f "$IMAGES_DIR/$lang/Dockerfile" ] || sg_die "no image for language '$lang' ($IMAGES_DIR/$lang/Dockerfile)"
done
for lang in "${langs[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  build_one "$lang" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
[ "$failed" -eq 0 ] || sg_die "images: some builds failed (see above)"
