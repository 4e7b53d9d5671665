#!/usr/bin/env bash
# Test accuracy of Yoke and PyTorch over several seeds, same recipes:
# the MLP for 5 epochs and the CNN for 2 (configs/fashion_mnist_{mlp,cnn}.yaml
# and bench/pytorch_train.py). Prints, per recipe and framework, each seed's
# accuracy, the mean, the sample standard deviation and the standard error of
# the mean, then the gap (Yoke - PyTorch) in standard errors of the
# difference. Goal (issue 14): Yoke's mean not below PyTorch's by more than
# one standard error.
#
#   bench/accuracy_seeds.sh [BUILD_DIR]          (default BUILD_DIR: build)
#
# Environment: SEEDS="1 2 3 4 5", MLP_EPOCHS=5, CNN_EPOCHS=2, THREADS=2,
#   MODELS="mlp cnn", BENCH_OUT=FILE (also write the report there),
#   PYTHON=/usr/bin/python3 (Debian's, with python3-torch).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
YOKE="$BUILD/bin/yoke"
PYTHON="${PYTHON:-/usr/bin/python3}"
SEEDS="${SEEDS:-1 2 3 4 5}"
THREADS="${THREADS:-2}"
MODELS="${MODELS:-mlp cnn}"
OPENBLAS_OMP_DIR=/usr/lib/x86_64-linux-gnu/openblas-openmp

die() { echo "accuracy_seeds: $*" >&2; exit 1; }
[ -x "$YOKE" ] || die "$YOKE not found; build first (make build)"
"$PYTHON" -c "import torch" 2>/dev/null ||
  die "$PYTHON has no torch (scripts/install-deps.sh bench installs python3-torch)"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

for m in $MODELS; do
  case "$m" in
    mlp) epochs="${MLP_EPOCHS:-5}" ;;
    cnn) epochs="${CNN_EPOCHS:-2}" ;;
    *) die "unknown model '$m' (mlp, cnn)" ;;
  esac
  for s in $SEEDS; do
    echo "[$m seed $s] yoke, $epochs epochs ..." >&2
    OMP_NUM_THREADS="$THREADS" "$YOKE" train "$ROOT/configs/fashion_mnist_$m.yaml" \
      --set "training.epochs=$epochs" --set "training.seed=$s" \
      --set "training.threads=$THREADS" --output json 2>"$WORK/log" | tail -n 1 \
      >"$WORK/${m}_yoke_$s.json" || { tail -5 "$WORK/log" >&2; die "yoke $m seed $s failed"; }
    echo "[$m seed $s] pytorch, $epochs epochs ..." >&2
    LD_LIBRARY_PATH="$OPENBLAS_OMP_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      OMP_NUM_THREADS="$THREADS" "$PYTHON" "$ROOT/bench/pytorch_train.py" --model "$m" \
      --epochs "$epochs" --seed "$s" --threads "$THREADS" 2>"$WORK/log" | tail -n 1 \
      >"$WORK/${m}_pytorch_$s.json" || { tail -5 "$WORK/log" >&2; die "pytorch $m seed $s failed"; }
  done
done

"$PYTHON" - "$WORK" "$MODELS" "$SEEDS" <<'EOF' | tee ${BENCH_OUT:+"$BENCH_OUT"}
import json, math, statistics, sys

work, models, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
print("Test accuracy over seeds " + ", ".join(seeds) + " (same recipe, same epochs)")
print()
print(f"| recipe | framework | {' | '.join('seed ' + s for s in seeds)} | mean | std | s.e. |")
print("|---|---|" + "---|" * (len(seeds) + 3))
verdicts = []
for m in models:
    stats = {}
    for fw in ("yoke", "pytorch"):
        accs = []
        for s in seeds:
            with open(f"{work}/{m}_{fw}_{s}.json") as f:
                accs.append(float(json.load(f)["test_accuracy"]))
        mean = statistics.mean(accs)
        std = statistics.stdev(accs) if len(accs) > 1 else 0.0
        se = std / math.sqrt(len(accs))
        stats[fw] = (mean, std, se)
        print(f"| {m.upper()} | {fw} | {' | '.join(f'{a:.4f}' for a in accs)} | "
              f"{mean:.4f} | {std:.4f} | {se:.4f} |")
    (my, sy, ey), (mt, st, et) = stats["yoke"], stats["pytorch"]
    gap = my - mt
    se_diff = math.sqrt(ey * ey + et * et)
    ok = gap >= -max(et, 1e-12)
    verdicts.append(f"{m.upper()}: Yoke - PyTorch = {gap * 100:+.2f} points "
                    f"({gap / se_diff if se_diff > 0 else 0:+.1f} s.e. of the difference); "
                    f"goal (not below by more than PyTorch's s.e. {et * 100:.2f}): "
                    f"{'met' if ok else 'NOT met'}")
print()
for v in verdicts:
    print(v)
EOF
