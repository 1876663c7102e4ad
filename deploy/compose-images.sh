#!/usr/bin/env bash
# Build every image docker-compose.yml needs, offline (FROM the local
# debian:bookworm-slim; packages from the Debian mirror inside the builds):
#   sandgate-redis, sandgate-proxy, sandgate-gateway   deploy/docker/Dockerfile
#   sandgate/<lang>:latest (the sandbox images)         deploy/build-images.sh
# The sandbox images get the sandgate-agent compiled in the same build as the
# proxy image (copied out of it), so proxy and agent always match, and the
# host needs no compiler: docker (and docker-compose) is enough.
# The gateway image serves the ops dashboard (GET /dashboard): its page is
# built here first, with the host's npm (dashboard/build.sh into
# build/www/dashboard, which the image copies with the rest of build/www).
# Unchanged inputs make this quick: Docker's layer cache for the service
# images, build-images.sh's input hash for the sandbox images and the page.
#
# Usage: sudo deploy/compose-images.sh [LANG...]
#   languages: the arguments, else $SANDGATE_LANGS, else every deploy/images/<lang>
#   SANDGATE_COMPOSE_SERVICES="redis proxy gateway" limits the service images.
set -euo pipefail
# shellcheck source=deploy/lib.sh
. "$(dirname "$0")/lib.sh"

"$SG_ROOT"/deploy/engine.sh
"$SG_ROOT"/deploy/base-image.sh

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sandgate-compose.XXXXXX")
cid=
cleanup() {
  if [ -n "$cid" ]; then docker rm -f "$cid" >/dev/null 2>&1 || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT

# build_service TARGET: deploy/docker/Dockerfile --target TARGET -> sandgate-TARGET:latest
build_service() {
  local target=$1 tag=sandgate-$1:latest old new start=$SECONDS
  old=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
  if ! docker build --force-rm -f "$SG_ROOT/deploy/docker/Dockerfile" --target "$target" \
       -t "$tag" "$SG_ROOT" >"$TMP/$target.log" 2>&1; then
    tail -n 40 "$TMP/$target.log" >&2
    sg_die "compose: building $tag failed"
  fi
  new=$(docker image inspect -f '{{.Id}}' "$tag")
  if [ "$old" = "$new" ]; then
    sg_log "compose: $tag up to date"
  else
    sg_log "compose: built $tag ${new:7:12} in $((SECONDS - start)) s"
    # drop the image this one replaces (fails harmlessly while a container uses it)
    if [ -n "$old" ]; then docker image rm "$old" >/dev/null 2>&1 || true; fi
  fi
}

# GET /docs: the gateway image copies build/www/ (deploy/docker/Dockerfile)
"$SG_ROOT"/deploy/www-docs.sh "$SG_ROOT/build/www"

read -ra services <<<"${SANDGATE_COMPOSE_SERVICES:-redis proxy gateway}"
case " ${services[*]} " in *" gateway "*) "$SG_ROOT"/dashboard/build.sh "$SG_ROOT/build/www/dashboard" ;; esac
for s in "${services[@]}"; do
  case $s in redis|proxy|gateway) build_service "$s" ;; *) sg_die "compose: unknown service image '$s'" ;; esac
done

# Each build whose sources changed leaves its builder stage behind as an
# untagged image (~750 MB, labelled sandgate.stage=builder in the Dockerfile):
# keep the newest, the next build's cache, and remove the older ones.
docker images -f dangling=true -f label=sandgate.stage=builder -q | tail -n +2 |
  while read -r id; do docker image rm "$id" >/dev/null 2>&1 || true; done

# The sandbox images, with the agent of the proxy image (build-images.sh wants
# it at BUILD_DIR/proxy/sandgate-agent).
mkdir -p "$TMP/build/proxy"
cid=$(docker create sandgate-proxy:latest)
docker cp "$cid:/usr/local/lib/sandgate/sandgate-agent" "$TMP/build/proxy/sandgate-agent"
docker rm -f "$cid" >/dev/null
cid=
chmod 0755 "$TMP/build/proxy/sandgate-agent"
"$SG_ROOT"/deploy/build-images.sh "$TMP/build" "$@"
