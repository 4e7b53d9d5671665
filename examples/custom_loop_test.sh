#!/bin/bash
# Runs examples/custom_loop as the suite's check of the C++ API:
#   custom_loop_test.sh BINARY 1   one process
#   custom_loop_test.sh BINARY 2   two ranks in two processes, through a
#                                  file rendezvous in a fresh directory
# Each rank must exit 0 with a `final` line whose test_accuracy is >= 0.85;
# with 2 ranks both must also end with the same parameter checksum.
# Every process runs under `timeout`, and the trap kills any still running
# and removes the temporary directory on every exit.
set -u
bin=$1
ranks=$2
shift 2
min_accuracy=0.85
per_rank_timeout=${CUSTOM_LOOP_TIMEOUT_S:-300}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/yoke_custom_loop.XXXXXX") || exit 1
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

start=$(date +%s)
for ((r = 0; r < ranks; r++)); do
  # Two processes share the cores: one OpenMP thread each.
  threads=$(( ranks > 1 ? 1 : ${OMP_NUM_THREADS:-2} ))
  YOKE_RANK=$r YOKE_WORLD_SIZE=$ranks YOKE_RENDEZVOUS="file:$tmp/rendezvous" \
    YOKE_TIMEOUT_S=120 OMP_NUM_THREADS=$threads \
    timeout "$per_rank_timeout" "$bin" "$@" >"$tmp/rank$r.log" 2>&1 &
  pids+=($!)
done

failed=0
for ((r = 0; r < ranks; r++)); do
  if ! wait "${pids[$r]}"; then
    echo "rank $r failed (exit $?, 124 = timed out after ${per_rank_timeout}s):"
    failed=1
  fi
  sed "s/^/[rank $r] /" "$tmp/rank$r.log"
done
echo "wall time: $(( $(date +%s) - start )) s for $ranks rank(s)"
[ "$failed" = 0 ] || exit 1

checksums=()
for ((r = 0; r < ranks; r++)); do
  line=$(grep '^final ' "$tmp/rank$r.log")
  if [ -z "$line" ]; then
    echo "rank $r printed no 'final' line"
    exit 1
  fi
  accuracy=$(sed -n 's/.* test_accuracy=\([0-9.]*\).*/\1/p' <<<"$line")
  checksums+=("$(sed -n 's/.* params_checksum=\([0-9a-f]*\).*/\1/p' <<<"$line")")
  if ! awk -v a="$accuracy" -v m="$min_accuracy" 'BEGIN { exit !(a >= m) }'; then
    echo "rank $r: test accuracy $accuracy is below $min_accuracy"
    exit 1
  fi
done
for ((r = 1; r < ranks; r++)); do
  if [ "${checksums[$r]}" != "${checksums[0]}" ]; then
    echo "rank $r ends with parameters ${checksums[$r]}, rank 0 with ${checksums[0]}"
    exit 1
  fi
done
echo "PASS: $ranks rank(s), test accuracy >= $min_accuracy, parameters ${checksums[0]}"
