#!/usr/bin/env bash
# scripts/gpu_check.py's parity stages (3 and 4) and its cluster stage (6) on
# a machine without a GPU:
# with --self-test the parity binaries run every case CPU against CPU. The
# stages must pass with every check read from the binaries' logs, and a
# difference injected into one op (YOKE_PARITY_INJECT) must fail stage 3
# and be named in its verdict.
#   tests/gpu_check_self_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
src=${1:?usage: gpu_check_self_test.sh SOURCE_DIR BIN_DIR}
bin=${2:?usage: gpu_check_self_test.sh SOURCE_DIR BIN_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

check() {  # out-dir [env...]
  local out=$1
  shift
  env "$@" /usr/bin/python3 "$src/scripts/gpu_check.py" --self-test --stages 3,4,6 \
    --bin-dir "$bin" --out "$out" --work "$tmp/work" > "$out.txt" 2>&1
}

check "$tmp/clean" || { cat "$tmp/clean.txt"; fail "the self-test run failed"; }
grep -q '^stage 3 ops: PASS: [0-9]* checks, 0 failed' "$tmp/clean.txt" || fail "stage 3: $(cat "$tmp/clean.txt")"
grep -q '^stage 4 model: PASS: [0-9]* checks, 0 failed' "$tmp/clean.txt" || fail "stage 4: $(cat "$tmp/clean.txt")"
grep -q '^stage 6 cluster: PASS: [0-9]* checks, 0 failed' "$tmp/clean.txt" || fail "stage 6: $(cat "$tmp/clean.txt")"
n=$(grep -c '"pass": true' "$tmp/clean/stage3_ops.jsonl")
[ "$n" -ge 90 ] || fail "stage 3 logged only $n passing checks"

if check "$tmp/injected" YOKE_PARITY_INJECT=conv_k3s2_same_asym; then
  fail "an injected difference passed"
fi
grep -q '^stage 3 ops: FAIL: .*conv_k3s2_same_asym/forward' "$tmp/injected.txt" \
  || fail "the injected difference is not named: $(cat "$tmp/injected.txt")"
grep -q '^stage 4 model: PASS' "$tmp/injected.txt" || fail "stage 4 failed without a fault"
echo "ok: gpu_check.py's parity stages pass CPU against CPU ($n checks) and report an injected difference"
