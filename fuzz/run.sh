#!/usr/bin/env bash
# Builds the libFuzzer targets (build-fuzz/, clang, ASan + UBSan) and runs
# each for a while from its seed corpus, copied to a scratch directory so
# that the repository is never written. Fails on any crash, leak, timeout
# or broken invariant, printing the input that did it.
#
# Usage: fuzz/run.sh [seconds per target, default 20] [target...]
# Environment: SANDGATE_FUZZ_JOBS targets at once (default 2),
#              SANDGATE_FUZZ_BUILD build directory (default build-fuzz).
# A failing input is kept in build-fuzz/artifacts/<target>/; replay it with
#   build-fuzz/fuzz/<target> build-fuzz/artifacts/<target>/crash-...
# Seeds: fuzz/corpus/<target>/, written by fuzz/make_corpus.py; once a bug
# is fixed, its input goes there too. Each fuzz_*.c says what it checks.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
jobs=${SANDGATE_FUZZ_JOBS:-2}
build=${SANDGATE_FUZZ_BUILD:-build-fuzz}
log() { printf '%s fuzz: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

command -v clang >/dev/null || { log "clang is missing (deploy/install-deps.sh installs it)"; exit 1; }
cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSANDGATE_FUZZ=ON >/dev/null
cmake --build "$build" -j2 --target fuzz >/dev/null

if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < "$build/fuzz/targets.txt"
  # a target whose code is not in this tree yet (fuzz/CMakeLists.txt) is named
  for c in fuzz/fuzz_*.c; do
    t=${c##*/} t=${t%.c}
    grep -qx "$t" "$build/fuzz/targets.txt" || log "$t: not built here (its code is not in this tree; fuzz/CMakeLists.txt)"
  done
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/sgfuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

run_one() {
  local t=$1 dir="$scratch/$1"
  local -a dict=()
  mkdir -p "$dir/corpus" "$dir/tmp"
  cp fuzz/corpus/"$t"/* "$dir/corpus/" 2>/dev/null || true
  [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
  if TMPDIR="$dir/tmp" "$build/fuzz/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$dir/" -print_final_stats=1 "${dict[@]}" "$dir/corpus" >"$dir/log" 2>&1; then
    touch "$scratch/OK.$t"
    log "$t ok ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log" | grep -o '[0-9]*$') runs," \
        "$(grep -o 'cov: [0-9]*' "$dir/log" | tail -n 1))"
    return 0
  fi
  log "$t FAILED; its log ends:"
  tail -n 40 "$dir/log" >&2
  mkdir -p "$build/artifacts/$t"
  for a in "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-*; do
    [ -e "$a" ] || continue
    cp "$a" "$build/artifacts/$t/"
    log "$t: input kept as $build/artifacts/$t/${a##*/} ($(od -An -c "$a" | head -c 300 | tr -s ' \n' ' '))"
  done
  return 1
}

log "${#targets[@]} targets, ${secs}s each, $jobs at a time"
declare -A pids=()
for t in "${targets[@]}"; do
  [ -x "$build/fuzz/$t" ] || { log "no target $t"; exit 1; }
  while [ "${#pids[@]}" -ge "$jobs" ]; do
    wait -n || true
    for k in "${!pids[@]}"; do
      kill -0 "${pids[$k]}" 2>/dev/null || unset "pids[$k]"
    done
  done
  run_one "$t" &
  pids[$t]=$!
done
wait
# a target passed only if it says so (a failed one left its input under
# $build/artifacts/)
failed=0
for t in "${targets[@]}"; do
  [ -e "$scratch/OK.$t" ] || failed=1
done
[ "$failed" = 0 ] && log "all ${#targets[@]} targets ran ${secs}s without a failure" || log "FAILED"
exit "$failed"
