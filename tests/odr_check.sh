#!/bin/bash
# One definition per symbol across the project's libraries.
#
#   odr_check.sh LIB.a...      fails (exit 1) listing every strong external
#                              symbol that two or more of the libraries define
#                              (other files, such as Bazel's .so, are skipped)
#   odr_check.sh --self-test   proves the check can fail: builds two tiny
#                              archives that define the same function (and the
#                              same inline one), expects the first reported
#                              and the second not, and a clean pair to pass
#
# Strong means nm's T, D, B, R, G and S (text, data, bss, read-only, small
# data): the definitions the linker takes from whichever archive it reads
# first, silently, when two libraries both have one. Weak and unique symbols
# (W, V, u: inline functions, templates, vtables of classes without a key
# function) are meant to be defined in many objects and are ignored, as are
# duplicates inside one library (the linker reports those itself).
#
# Environment: NM (default nm), CXX (default c++; self-test only).
set -euo pipefail

NM=${NM:-nm}

# Prints "mangled-symbol<TAB>library" for each strong symbol each library
# defines, once per pair.
strong_symbols() {
  local lib name
  for lib in "$@"; do
    if [[ ! -f "$lib" ]]; then
      echo "odr_check: no such library: $lib" >&2
      return 2
    fi
    # Bazel hands over each library as .a/.lo (PIC: .pic.a/.pic.lo) and .so:
    # the archives are the library, once, under one name.
    case "$lib" in
      *.a | *.lo) ;;
      *) continue ;;
    esac
    name=$(basename "$lib")
    name=${name%.a}
    name=${name%.lo}
    name=${name%.pic}.a
    "$NM" --defined-only --extern-only --format=posix "$lib" |
      awk -v lib="$name" 'NF >= 2 && $2 ~ /^[TDBRGS]$/ { print $1 "\t" lib }'
  done | sort -u
}

check() {
  local symbols dups
  symbols=$(strong_symbols "$@")
  dups=$(printf '%s\n' "$symbols" | awk -F'\t' '
    NF == 2 { if (n[$1]++) libs[$1] = libs[$1] ", " $2; else libs[$1] = $2 }
    END { for (s in n) if (n[s] > 1) print s "\t" libs[s] }' | sort)
  if [[ -z "$dups" ]]; then
    echo "odr_check: no strong symbol is defined in two of the $# libraries"
    return 0
  fi
  echo "odr_check: $(printf '%s\n' "$dups" | wc -l) strong symbol(s) defined in more than" \
       "one library (the linker keeps one and drops the others silently):"
  local sym libs
  while IFS=$'\t' read -r sym libs; do
    printf '  %s\n      (%s) in %s\n' "$(c++filt "$sym")" "$sym" "$libs"
  done <<<"$dups"
  return 1
}

self_test() {
  local cxx=${CXX:-c++} dir out status
  dir=$(mktemp -d "${TMPDIR:-/tmp}/odr_check.XXXXXX")
  trap 'rm -rf "$dir"' RETURN
  mkdir -p "$dir/a" "$dir/b"
  # Both libraries define yoke_odr_probe (strong: must be reported) and an
  # inline function (weak: must not be); a third defines only its own name.
  for x in a b; do
    cat >"$dir/$x/probe.cc" <<EOF
namespace yoke::odr_self_test {
int Probe() { return 1; }
inline int Shared() { return 2; }
int Use_$x() { return Shared(); }
}  // namespace yoke::odr_self_test
EOF
    "$cxx" -c -O0 "$dir/$x/probe.cc" -o "$dir/$x/probe.o"
    ar rcs "$dir/lib$x.a" "$dir/$x/probe.o"
  done
  cat >"$dir/c.cc" <<'EOF'
namespace yoke::odr_self_test { int OnlyInC() { return 3; } }
EOF
  "$cxx" -c -O0 "$dir/c.cc" -o "$dir/c.o"
  ar rcs "$dir/libc.a" "$dir/c.o"

  status=0
  out=$(check "$dir/liba.a" "$dir/libb.a" "$dir/libc.a") || status=$?
  printf '%s\n' "$out"
  if [[ $status -ne 1 ]]; then
    echo "odr_check self-test FAILED: a function defined in liba.a and libb.a was not reported" >&2
    return 1
  fi
  if ! grep -q 'yoke::odr_self_test::Probe() *$' <<<"$out" ||
     ! grep -q 'in liba.a, libb.a' <<<"$out"; then
    echo "odr_check self-test FAILED: the report does not name Probe() in liba.a, libb.a" >&2
    return 1
  fi
  if grep -q 'Shared()' <<<"$out"; then
    echo "odr_check self-test FAILED: an inline (weak) function was reported" >&2
    return 1
  fi
  status=0
  out=$(check "$dir/liba.a" "$dir/libc.a") || status=$?
  printf '%s\n' "$out"
  if [[ $status -ne 0 ]]; then
    echo "odr_check self-test FAILED: liba.a and libc.a share no strong symbol," \
         "but were reported" >&2
    return 1
  fi
  echo "odr_check self-test passed"
}

if [[ $# -eq 0 ]]; then
  echo "usage: $0 LIB.a... | --self-test" >&2
  exit 2
fi
if [[ $1 == --self-test ]]; then
  self_test
else
  check "$@"
fi
