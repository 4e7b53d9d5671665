#!/usr/bin/env bash
# Two Yoke builds against each other on the Fashion-MNIST recipes, to show
# that a change did not slow them down (issue 33's "no regression" row):
#
#   bench/yoke_ab.sh BASE_YOKE NEW_YOKE
#
# BASE_YOKE and NEW_YOKE are `yoke` binaries (build/bin/yoke of two
# checkouts). Each of RUNS rounds trains each recipe once with each binary,
# the order alternating between rounds, in one process with THREADS threads
# (`yoke train`, as bench/peers_vs_yoke.sh's one-process rows). A run is
# checked before it counts: it must exit 0, run every step of its epochs and
# reach ACC_MIN test accuracy. The figure is `yoke train`'s own samples/s
# (training samples over the training loop's seconds); the report gives each
# round's ratio NEW/BASE and their median, which is the number to quote.
#
# Environment:
#   RUNS=5            rounds (the median of at least 5 paired ratios)
#   RECIPES="mlp cnn" configs/fashion_mnist_<recipe>.yaml
#   EPOCHS=1          epochs per run
#   THREADS=2
#   ACC_MIN=0.80
#   BENCH_OUT=FILE    also write the report to FILE
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "yoke_ab: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: bench/yoke_ab.sh BASE_YOKE NEW_YOKE"
BASE="$1" NEW="$2"
for b in "$BASE" "$NEW"; do [ -x "$b" ] || die "$b is not an executable yoke binary"; done
RUNS="${RUNS:-5}"
RECIPES="${RECIPES:-mlp cnn}"
EPOCHS="${EPOCHS:-1}"
THREADS="${THREADS:-2}"
ACC_MIN="${ACC_MIN:-0.80}"
WORK="$(mktemp -d /tmp/yoke-ab.XXXXXX)"
for rec in $RECIPES; do
  [ -f "$ROOT/configs/fashion_mnist_$rec.yaml" ] || die "no configs/fashion_mnist_$rec.yaml"
done

for r in $(seq 1 "$RUNS"); do
  for rec in $RECIPES; do
    order="base new"; [ $((r % 2)) -eq 0 ] && order="new base"
    for v in $order; do
      bin="$BASE"; [ "$v" = new ] && bin="$NEW"
      echo "[round $r/$RUNS] $rec $v ..." >&2
      OMP_NUM_THREADS="$THREADS" "$bin" train "$ROOT/configs/fashion_mnist_$rec.yaml" \
        --set "training.epochs=$EPOCHS" --set "training.threads=$THREADS" --output json \
        > "$WORK/${rec}_${v}_$r.json" 2> "$WORK/${rec}_${v}_$r.log"
      echo $? > "$WORK/${rec}_${v}_$r.rc"
    done
  done
done

python3 - "$WORK" "$RUNS" "$RECIPES" "$EPOCHS" "$ACC_MIN" "$BASE" "$NEW" <<'PY' | tee "${BENCH_OUT:-/dev/null}"
import json, os, statistics, sys
work, runs, recipes, epochs, acc_min, base, new = sys.argv[1:]
runs, epochs, acc_min = int(runs), int(epochs), float(acc_min)
want_steps = 938 * epochs  # 60,000 images at batch 64, the last batch partial

def load(rec, v, i):
    stem = os.path.join(work, f"{rec}_{v}_{i}")
    rc = int(open(stem + ".rc").read().strip() or -1)
    if rc != 0:
        return None, f"exit status {rc} (log: {stem}.log)"
    try:
        # The result is the last JSON object on stdout.
        lines = [l for l in open(stem + ".json").read().splitlines() if l.startswith("{")]
        r = json.loads(lines[-1])
    except (OSError, ValueError, IndexError):
        return None, f"no JSON result (log: {stem}.log)"
    if int(r.get("steps", 0)) != want_steps:
        return None, f"ran {r.get('steps')} steps, expected {want_steps}"
    if float(r.get("test_accuracy", 0) or 0) < acc_min:
        return None, f"test accuracy {r.get('test_accuracy')} < {acc_min}"
    sps = float(r.get("samples_per_second", 0) or 0)
    if sps <= 0:
        return None, "no samples_per_second"
    return sps, None

print(f"# bench/yoke_ab.sh: base {base}, new {new}")
print(f"# {runs} rounds, {epochs} epoch(s) each, order alternating; samples/s of yoke train")
bad = False
for rec in recipes.split():
    ratios, bs, ns = [], [], []
    for i in range(1, runs + 1):
        b, eb = load(rec, "base", i)
        n, en = load(rec, "new", i)
        for e, v in ((eb, "base"), (en, "new")):
            if e:
                print(f"INVALID {rec} round {i} {v}: {e}")
                bad = True
        if b and n:
            bs.append(b); ns.append(n); ratios.append(n / b)
            print(f"{rec} round {i}: base {b:,.0f}, new {n:,.0f} samples/s, new/base {n / b:.3f}")
    if ratios:
        print(f"{rec}: median base {statistics.median(bs):,.0f}, new {statistics.median(ns):,.0f} "
              f"samples/s; paired new/base {', '.join(f'{x:.3f}' for x in ratios)}: "
              f"median {statistics.median(ratios):.3f}x over {len(ratios)} rounds")
sys.exit(1 if bad else 0)
PY
