#!/usr/bin/env bash
# The project's own C++ (.cc, .h, .cu outside third_party/) is formatted as
# .clang-format says (Google style, 100 columns). Fails listing each file
# clang-format would change, with the command that fixes it.
#
# Usage: format_check.sh [REPO_ROOT]
#        format_check.sh --self-test   proves the check fails on a planted file
set -uo pipefail
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}

check() {  # root
  local root=$1 bad=0 f
  cd "$root" || return 2
  local files
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files=$(git ls-files '*.cc' '*.h' '*.cu' | grep -v '^third_party/')
  else
    files=$(find . -path ./third_party -prune -o -path './build*' -prune -o \
              \( -name '*.cc' -o -name '*.h' -o -name '*.cu' \) -print | sed 's|^\./||')
  fi
  for f in $files; do
    if ! "$CLANG_FORMAT" --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then
      echo "$f: not formatted (run: clang-format -i $f)"
      bad=$((bad + 1))
    fi
  done
  if [ "$bad" -gt 0 ]; then
    echo "format_check: $bad file(s) differ from .clang-format"
    return 1
  fi
  echo "format_check: $(echo "$files" | wc -w) files match .clang-format"
}

if [ "${1:-}" = --self-test ]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
  cp "$here/.clang-format" "$t/"
  printf 'int f(int x) {\n  x += 2;\n  return x + 1;\n}\n' > "$t/good.cc"
  (check "$t") >/dev/null || { echo "self-test: a formatted file was refused"; exit 1; }
  printf 'int   f( int x ){ return x+1; }\n' > "$t/bad.cc"
  if (check "$t") >/dev/null; then echo "self-test: a badly formatted file passed"; exit 1; fi
  echo "format_check self-test: ok"
  exit 0
fi
check "${1:-$(cd "$(dirname "$0")/.." && pwd)}"
