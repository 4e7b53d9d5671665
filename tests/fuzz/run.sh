#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS from a copy of its seed corpus
# (tests/fuzz/corpus/<target>, without the _fuzz suffix) and prints how many
# inputs it executed. Exits 1 if any target found a crash, a leak or a
# timeout; the input that did it is kept in build-fuzz/findings/.
# FUZZ_JOBS targets run at a time (default: the number of cores), each a
# single libFuzzer process on a core of its own, so every target still gets
# SECONDS of one core; on CI's 2 cores the five targets take 3 rounds
# instead of 5.
#   [FUZZ_JOBS=N] tests/fuzz/run.sh BIN_DIR SECONDS TARGET...
set -uo pipefail
bin=$1 seconds=$2
shift 2
jobs=${FUZZ_JOBS:-$(nproc)}
here=$(cd "$(dirname "$0")" && pwd)
out=$(dirname "$bin")/findings
mkdir -p "$out"

# One target: its verdict goes to $out/<target>.verdict.
fuzz_one() {
  local t=$1 name=${1%_fuzz} work log rc execs corpus
  work=$(mktemp -d)
  [ -d "$here/corpus/$name" ] && cp -r "$here/corpus/$name/." "$work/"
  log="$out/$t.log"
  "$bin/$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$out/$t-" "$work" >"$log" 2>&1
  rc=$?
  execs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  corpus=$(ls "$work" | wc -l)
  if [ $rc -eq 0 ]; then
    echo "fuzz: $t: ${execs:-?} inputs in ${seconds}s, corpus $corpus, no findings" \
      >"$out/$t.verdict"
  else
    { echo "fuzz: $t: FAILED (exit $rc) after ${execs:-?} inputs; see $log"
      # The sanitizer's or libFuzzer's own lines (==PID== ERROR, SUMMARY),
      # not the libraries' log lines (libprotobuf ERROR on invalid UTF-8).
      grep -aE "^==[0-9]+==|^SUMMARY|^(MS|artifact_prefix)" "$log" | head -5; } >"$out/$t.verdict"
  fi
  rm -rf "$work"
}

for t in "$@"; do
  [ -x "$bin/$t" ] || { echo "fuzz: $bin/$t: no such target (build it first)" >&2; exit 1; }
  rm -f "$out/$t.verdict"
done
for t in "$@"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  fuzz_one "$t" &
done
wait
# The verdicts, in the order the targets were named.
failed=0
for t in "$@"; do
  if [ ! -s "$out/$t.verdict" ]; then
    echo "fuzz: $t: no verdict (the runner itself failed)" >&2
    failed=1
  elif grep -q "FAILED" "$out/$t.verdict"; then
    cat "$out/$t.verdict" >&2
    failed=1
  else
    cat "$out/$t.verdict"
  fi
done
exit $failed
