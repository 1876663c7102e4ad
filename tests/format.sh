#!/usr/bin/env bash
# The format check: every C source and header in the tree is as clang-format
# (the repository's .clang-format) writes it. Run by ctest (style.format).
# To fix: git ls-files '*.c' '*.h' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "clang-format is not installed (deploy/install-deps.sh)"; exit 1; }
mapfile -t files < <(git ls-files '*.c' '*.h' 2>/dev/null || find common gateway proxy tests fuzz -name '*.[ch]')
[ "${#files[@]}" -gt 0 ] || { echo "no sources found"; exit 1; }
clang-format --dry-run --Werror "${files[@]}"
echo "format: ${#files[@]} files as clang-format writes them"
