#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS from a copy of its seed corpus
# (tests/fuzz/corpus/<target>, without the _fuzz suffix) and prints how many
# inputs it executed. Exits 1 if any target found a crash, a leak or a
# timeout; the input that did it is kept in build-fuzz/findings/.
#   tests/fuzz/run.sh BIN_DIR SECONDS TARGET...
set -uo pipefail
bin=$1 seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
out=$(dirname "$bin")/findings
mkdir -p "$out"
failed=0
for t in "$@"; do
  name=${t%_fuzz}
  work=$(mktemp -d)
  [ -d "$here/corpus/$name" ] && cp -r "$here/corpus/$name/." "$work/"
  log="$out/$t.log"
  "$bin/$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$out/$t-" "$work" >"$log" 2>&1
  rc=$?
  execs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  corpus=$(ls "$work" | wc -l)
  if [ $rc -eq 0 ]; then
    echo "fuzz: $t: ${execs:-?} inputs in ${seconds}s, corpus $corpus, no findings"
  else
    echo "fuzz: $t: FAILED (exit $rc) after ${execs:-?} inputs; see $log" >&2
    grep -aE "ERROR|SUMMARY" "$log" | head -5 >&2
    failed=1
  fi
  rm -rf "$work"
done
exit $failed
