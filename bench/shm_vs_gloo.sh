#!/usr/bin/env bash
# The 2-rank CNN on one host with the shared-memory path against plain Gloo,
# interleaved (shm run, Gloo run, shm run, ...): two `yoke up --workers 2`
# clusters, the second started with YOKE_SHM=0, which its workers' trainers
# inherit. Prints each run's samples/s and losses (the two paths must agree to
# the bit, so the losses must be equal), then the medians and their ratio.
#
#   bench/shm_vs_gloo.sh [BUILD_DIR]      (default BUILD_DIR: build)
#
# Environment: REPS=4 (pairs), STEPS=400 (steps of the global batch 64 per run).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
Y="$BUILD/bin/yoke"
STEPS="${STEPS:-400}"
REPS="${REPS:-4}"
[ -x "$Y" ] || { echo "shm_vs_gloo: $Y not found; build first (make build)" >&2; exit 1; }
W="$(mktemp -d "${TMPDIR:-/tmp}/yoke-shm-gloo.XXXXXX")"
cleanup() {
  for m in shm gloo; do
    [ -f "$W/$m/cluster.json" ] && YOKE_STATE_DIR="$W/$m/state" "$Y" down --dir "$W/$m" >/dev/null 2>&1
  done
}
trap cleanup EXIT
for m in shm gloo; do
  mkdir -p "$W/$m"
  shm=1; [ "$m" = gloo ] && shm=0
  YOKE_SHM=$shm YOKE_STATE_DIR="$W/$m/state" "$Y" up --detach --workers 2 --dir "$W/$m" \
    > "$W/$m/up.log" 2>&1 || { echo "shm_vs_gloo: yoke up failed:" >&2; tail -3 "$W/$m/up.log" >&2; exit 1; }
done
echo "date: $(date -u '+%F %H:%M') UTC; $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //');" \
     "load $(cut -d' ' -f1-3 /proc/loadavg); git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
echo "CNN (configs/fashion_mnist_cnn.yaml), 2 ranks x 1 thread on one host, $STEPS steps of the global batch 64, $REPS pairs"
for rep in $(seq "$REPS"); do
  for m in shm gloo; do
    addr="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["address"])' "$W/$m/cluster.json")"
    export YOKE_STATE_DIR="$W/$m/state"
    id="$("$Y" submit "$ROOT/configs/fashion_mnist_cnn.yaml" --set training.epochs=1 \
          --set training.max_steps="$STEPS" --set training.threads=1 --set distribution.workers=2 \
          --coordinator "$addr")" || exit 1
    "$Y" watch "$id" --coordinator "$addr" > "$W/$m/$rep.watch" 2>&1 || { echo "job $id failed:" >&2; tail -3 "$W/$m/$rep.watch" >&2; exit 1; }
    "$Y" get "$id" --output json --coordinator "$addr" > "$W/$m/$rep.json" || exit 1
  done
done
python3 - "$W" "$REPS" "$STEPS" <<'PY'
import json, statistics, sys
w, reps, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rate = {"shm": [], "gloo": []}
losses = set()
ok = True
for rep in range(1, reps + 1):
    for m in ("shm", "gloo"):
        r = json.load(open(f"{w}/{m}/{rep}.json")).get("result", {})
        if r.get("steps") != steps:
            print(f"INVALID: run {rep} {m} ran {r.get('steps')} steps, not {steps}"); ok = False
        rate[m].append(r.get("samples_per_second", 0.0))
        losses.add((r.get("train_loss"), r.get("test_loss")))
        print(f"pair {rep} {m:4s} samples/s {rate[m][-1]:8.1f}  train loss {r.get('train_loss')!r}  test loss {r.get('test_loss')!r}")
    print(f"pair {rep} shm/gloo {rate['shm'][-1] / rate['gloo'][-1]:.2f}x")
ms, mg = statistics.median(rate["shm"]), statistics.median(rate["gloo"])
print(f"median samples/s: shm {ms:.1f}, gloo {mg:.1f}; shm/gloo {ms / mg:.2f}x")
if len(losses) != 1:
    print("MISMATCH: the shm and Gloo runs ended with different losses"); ok = False
else:
    print("losses: equal in every run (shm and Gloo agree to the bit)")
sys.exit(0 if ok else 3)
PY
