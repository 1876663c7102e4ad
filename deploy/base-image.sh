#!/usr/bin/env bash
# Make sure the base image of the language images exists locally. Pulls it
# when a registry answers quickly; otherwise builds it with debootstrap from
# the Debian mirror and `docker import`s it (no registry needed).
set -euo pipefail
# shellcheck source=deploy/lib.sh
. "$(dirname "$0")/lib.sh"

IMAGE=${SANDGATE_BASE_IMAGE:-debian:bookworm-slim}
MIRROR=${SANDGATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm

if sg_image_exists "$IMAGE"; then
  sg_log "base: $IMAGE present"
  exit 0
fi

if [ "${SANDGATE_NO_PULL:-0}" != 1 ] && timeout 20 docker pull -q "$IMAGE" >/dev/null 2>&1 \
   && sg_image_exists "$IMAGE"; then
  sg_log "base: pulled $IMAGE"
  exit 0
fi

sg_need_root "debootstrap"
sg_have debootstrap || sg_die "debootstrap not installed (run deploy/install-deps.sh)"
DIR=$(mktemp -d "${TMPDIR:-/var/tmp}/sandgate-rootfs.XXXXXX")
cleanup() {
  # debootstrap mounts proc/sys inside the target; never delete through them.
  awk -v d="$DIR/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l
  rm -rf --one-file-system "$DIR" "$DIR.log"
}
trap cleanup EXIT
sg_log "base: no registry; debootstrap $SUITE from $MIRROR"
start=$SECONDS
if ! debootstrap --variant=minbase "$SUITE" "$DIR" "$MIRROR" >"$DIR.log" 2>&1; then
  tail -n 20 "$DIR.log" >&2
  sg_die "debootstrap failed"
fi
rm -rf "$DIR"/var/cache/apt/archives/*.deb "$DIR"/var/lib/apt/lists/*
id=$(tar -C "$DIR" -c . | docker import -c 'CMD ["bash"]' - "$IMAGE")
sg_log "base: imported $IMAGE ${id:7:12} in $((SECONDS - start)) s"
