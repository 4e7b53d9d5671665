#!/usr/bin/env bash
# What mutual TLS costs a training job: the same 2-worker data-parallel MLP
# job on a `yoke up` cluster with TLS (the default) and with --insecure,
# alternating REPEAT times, printing each run's samples/s (the trainer's own
# measure of its step loop) and the medians' ratio. Only the control plane
# (heartbeats, rendezvous) changes; the Gloo data plane is plaintext in both.
#
#   bench/tls_step_time.sh [BUILD]   (REPEAT=5 STEPS=4000 by default)
set -euo pipefail
BUILD=${1:-build}
REPEAT=${REPEAT:-5}
STEPS=${STEPS:-4000}
YOKE="$BUILD/bin/yoke"
CFG=configs/fashion_mnist_mlp.yaml

# Result: samples/s of the job's final result, after checking it succeeded.
run_once() {  # $1: "" or --insecure
  local dir; dir=$(mktemp -d /tmp/yoke-tls-bench-XXXXXX)
  export YOKE_STATE_DIR="$dir/state"
  "$YOKE" up --workers 2 --detach --dir "$dir/cluster" $1 >/dev/null
  local id
  id=$("$YOKE" submit "$CFG" --set distribution.workers=2 --set training.epochs=10 \
        --set training.max_steps="$STEPS" --set training.threads=1)
  "$YOKE" watch "$id" >/dev/null
  "$YOKE" get "$id" --output json >"$dir/job.json"
  "$YOKE" down --dir "$dir/cluster" >/dev/null 2>&1 || true
  python3 - "$dir/job.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["state"] == "JOB_SUCCEEDED", j.get("reason")
assert j["result"]["steps"] > 0
print(j["result"]["samplesPerSecond"] if "samplesPerSecond" in j["result"] else j["result"]["samples_per_second"])
PY
  rm -rf "$dir"
}

tls=(); plain=()
for i in $(seq "$REPEAT"); do
  t=$(run_once ""); p=$(run_once --insecure)
  tls+=("$t"); plain+=("$p")
  printf "run %d: tls %.0f samples/s, insecure %.0f samples/s\n" "$i" "$t" "$p"
done
python3 - "${tls[*]}" "${plain[*]}" <<'PY'
import statistics, sys
t = [float(x) for x in sys.argv[1].split()]
p = [float(x) for x in sys.argv[2].split()]
mt, mp = statistics.median(t), statistics.median(p)
print(f"median samples/s: tls {mt:.0f}, insecure {mp:.0f}; tls/insecure {mt/mp:.3f} "
      f"(step time {100*(mp/mt-1):+.1f}% with TLS)")
PY
