# shellcheck shell=bash
# Shared helpers for the deploy scripts. Source it; do not run it.

# shellcheck disable=SC2034 # used by the scripts that source this
SG_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1

sg_log()  { printf '[sandgate %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
sg_die()  { sg_log "ERROR: $*"; exit 1; }
sg_have() { command -v "$1" >/dev/null 2>&1; }

# sg_need_root WHAT: fail unless we are root (WHAT says why root is needed).
sg_need_root() {
  [ "$(id -u)" -eq 0 ] || sg_die "${1:-this step} needs root: run it as root, or with sudo"
}

# sg_docker_ping: true when the engine named by DOCKER_HOST (default: the
# local unix socket) answers GET /_ping within 3 s; a tcp:// engine over TLS
# as Docker's client reaches it (DOCKER_CERT_PATH, DOCKER_TLS_VERIFY).
sg_docker_ping() {
  local host=${DOCKER_HOST:-unix:///var/run/docker.sock} certs=${DOCKER_CERT_PATH:-}
  [ -n "$certs" ] || [ -z "${DOCKER_TLS_VERIFY:-}" ] || certs=$HOME/.docker
  case $host in
    unix://*) curl -fsS -m 3 --unix-socket "${host#unix://}" http://localhost/_ping ;;
    tcp://*)
      if [ -n "$certs" ]; then
        local verify=(--cacert "$certs/ca.pem")
        [ -n "${DOCKER_TLS_VERIFY:-}" ] || verify=(--insecure)
        curl -fsS -m 3 "${verify[@]}" --cert "$certs/cert.pem" --key "$certs/key.pem" "https://${host#tcp://}/_ping"
      else
        curl -fsS -m 3 "http://${host#tcp://}/_ping"
      fi ;;
    *)        return 1 ;;
  esac >/dev/null 2>&1
}

# sg_image_exists IMAGE
sg_image_exists() { docker image inspect "$1" >/dev/null 2>&1; }
