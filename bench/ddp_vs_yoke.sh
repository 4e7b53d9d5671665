#!/usr/bin/env bash
# Synchronous data parallelism on one machine: Yoke against PyTorch DDP (gloo)
# on the Fashion-MNIST recipes (configs/fashion_mnist_{mlp,cnn}.yaml), in one
# run, with 2 replicas of 1 thread each and a global batch of 64:
#
#   pytorch DDP x2   bench/pytorch_ddp.py --nproc 2 --threads 1
#   pytorch x1       bench/pytorch_train.py --threads 1   (DDP's single replica)
#   yoke x2          `yoke up --workers 2` (1 cpu replica each), submit with
#                    distribution.workers=2, training.threads=1, watch to the end
#   yoke x1          yoke train --set training.threads=1  (Yoke's single replica)
#
# then a table of throughput and test accuracy, the yoke/DDP ratio of the
# 2-replica throughputs, and each framework's scaling efficiency
# (2-replica throughput / (2 x its single-replica throughput), both measured
# in this run).
#
#   bench/ddp_vs_yoke.sh [BUILD_DIR]              (default BUILD_DIR: build)
#
# Environment:
#   EPOCHS=1         epochs per run
#   REPEAT=1         runs per (config, variant); samples/s is the median
#   MODELS="mlp cnn" which configs
#   ACC_MIN=0.80     a run below this test accuracy is INVALID (after 1 epoch
#                    one process reaches ~0.83 (MLP) and ~0.85 (CNN))
#   MAX_STEPS=N      stop each run after N steps (development only; no
#                    accuracy check)
#   BENCH_OUT=FILE   also write the report to FILE
#   PYTHON=/usr/bin/python3   the interpreter with python3-torch
#
# Throughput is the same figure for every variant: training samples of all
# replicas / seconds rank 0 spent in its training loop (batch gather,
# forward, backward with the gradient allreduce, optimizer step; evaluation,
# data loading and start-up excluded), from each run's JSON result. A run
# that fails, runs a different number of steps than asked, or ends below
# ACC_MIN is INVALID and gets no ratio.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
YOKE="$BUILD/bin/yoke"
PYTHON="${PYTHON:-/usr/bin/python3}"
EPOCHS="${EPOCHS:-1}"
REPEAT="${REPEAT:-1}"
MODELS="${MODELS:-mlp cnn}"
MAX_STEPS="${MAX_STEPS:-0}"
if [ "$MAX_STEPS" -gt 0 ]; then ACC_MIN="${ACC_MIN:-0}"; else ACC_MIN="${ACC_MIN:-0.80}"; fi
NPROC="$(nproc)"
OPENBLAS_OMP_DIR=/usr/lib/x86_64-linux-gnu/openblas-openmp

die() { echo "ddp_vs_yoke: $*" >&2; exit 1; }
for v in EPOCHS REPEAT MAX_STEPS; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, got '${!v}'"
done
[ "$EPOCHS" -gt 0 ] && [ "$REPEAT" -gt 0 ] || die "EPOCHS and REPEAT must be > 0"
[ -x "$YOKE" ] || die "$YOKE not found; build first (ninja -C $BUILD yoke yoke-trainer yoke-coordinator yoke-worker)"
"$PYTHON" -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null ||
  die "$PYTHON cannot import torch with gloo (install python3-torch: scripts/install-deps.sh bench)"

# One thread per process; torch on the OpenMP OpenBLAS (bench/README.md).
TORCH_ENV=(env OMP_NUM_THREADS=1)
[ -d "$OPENBLAS_OMP_DIR" ] &&
  TORCH_ENV+=(LD_LIBRARY_PATH="$OPENBLAS_OMP_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")

WORK="$(mktemp -d "${TMPDIR:-/tmp}/yoke-ddp-bench.XXXXXX")"
REPORT="$WORK/report.txt"
say() { echo "$*" | tee -a "$REPORT"; }
# busy_jiffies, children_cpu and run_one NAME CMD... (see bench_lib.sh).
source "$ROOT/bench/bench_lib.sh"

CLUSTER="$WORK/cluster"
cleanup() { YOKE_STATE_DIR="$CLUSTER/state" "$YOKE" down --dir "$CLUSTER" >/dev/null 2>&1; }
trap cleanup EXIT

say "== Data parallel: Yoke vs PyTorch DDP (gloo), Fashion-MNIST, 2 replicas x 1 thread =="
say "date:      $(date -u '+%Y-%m-%d %H:%M UTC')"
say "machine:   $NPROC cores (nproc), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
say "yoke:      $YOKE (git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ', dirty tree'))"
say "torch:     $("$PYTHON" -c 'import torch; print(torch.__version__)')"
say "settings:  $EPOCHS epoch(s), global batch 64, REPEAT=$REPEAT$([ "$MAX_STEPS" -gt 0 ] && echo ", MAX_STEPS=$MAX_STEPS"), ACC_MIN=$ACC_MIN"
say "load:      $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) before starting"
say ""

# A local cluster of 2 workers with 1 cpu replica each, idle between runs.
mkdir -p "$CLUSTER"
YOKE_STATE_DIR="$CLUSTER/state" "$YOKE" up --detach --workers 2 --dir "$CLUSTER" > "$WORK/up.log" 2>&1 ||
  die "yoke up failed: $(tail -3 "$WORK/up.log")"
ADDR="$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["address"])' \
        "$CLUSTER/cluster.json")" || die "no coordinator address in $CLUSTER/cluster.json"

# yoke_cluster_run CONFIG SETS...: submit, watch to the end, print the job's
# result as one JSON line (what run_one keeps).
yoke_cluster_run() {
  local cfg="$1"; shift
  local id
  # The CLI finds the local cluster's credentials in its state directory.
  local -x YOKE_STATE_DIR="$CLUSTER/state"
  id="$("$YOKE" submit "$cfg" "$@" --coordinator "$ADDR")" || return 1
  "$YOKE" watch "$id" --coordinator "$ADDR" >&2 || return 1
  "$YOKE" get "$id" --output json --coordinator "$ADDR" |
    "$PYTHON" -c 'import json, sys; j = json.load(sys.stdin); r = j.get("result", {}); r["job"] = j["id"]; print(json.dumps(r))'
}

SETS=(--set "training.epochs=$EPOCHS" --set training.threads=1)
TORCH_ARGS=(--epochs "$EPOCHS" --threads 1)
if [ "$MAX_STEPS" -gt 0 ]; then
  SETS+=(--set "training.max_steps=$MAX_STEPS")
  TORCH_ARGS+=(--max-steps "$MAX_STEPS")
fi

for m in $MODELS; do
  cfg="$ROOT/configs/fashion_mnist_$m.yaml"
  for r in $(seq 1 "$REPEAT"); do
    echo "[$m, run $r/$REPEAT] pytorch DDP x2 ..." >&2
    run_one "${m}_ddp2_$r" "${TORCH_ENV[@]}" "$PYTHON" "$ROOT/bench/pytorch_ddp.py" \
      --model "$m" --nproc 2 "${TORCH_ARGS[@]}"
    echo "[$m, run $r/$REPEAT] yoke x2 (2 workers) ..." >&2
    # The trainers are the cluster's children, not ours: run_one's "other
    # processes" figure would count them, so it is not used for this run.
    run_one "${m}_yoke2_$r" yoke_cluster_run "$cfg" "${SETS[@]}" --set distribution.workers=2
    echo "[$m, run $r/$REPEAT] pytorch x1 ..." >&2
    run_one "${m}_torch1_$r" "${TORCH_ENV[@]}" "$PYTHON" "$ROOT/bench/pytorch_train.py" \
      --model "$m" "${TORCH_ARGS[@]}"
    echo "[$m, run $r/$REPEAT] yoke x1 ..." >&2
    run_one "${m}_yoke1_$r" env OMP_NUM_THREADS=1 "$YOKE" train "$cfg" "${SETS[@]}" --output json
  done
done

"$PYTHON" - "$WORK" "$MODELS" "$REPEAT" "$EPOCHS" "$MAX_STEPS" "$ACC_MIN" >> "$REPORT" <<'EOF'
import json, math, os, statistics, sys

work, models, repeat, epochs, max_steps, acc_min = sys.argv[1:]
models, repeat, epochs, max_steps, acc_min = (models.split(), int(repeat), int(epochs),
                                              int(max_steps), float(acc_min))
TRAIN_N, BATCH = 60000, 64
per_epoch = -(-TRAIN_N // BATCH)
want_steps = min(epochs * per_epoch, max_steps) if max_steps else epochs * per_epoch
samples = TRAIN_N * epochs if want_steps == epochs * per_epoch else want_steps * BATCH
VARIANTS = [("ddp2", "pytorch DDP", 2), ("yoke2", "yoke", 2), ("torch1", "pytorch", 1),
            ("yoke1", "yoke", 1)]
NOISY = 0.10

def load(name):
    run, problems = {}, []
    try:
        meta = json.load(open(os.path.join(work, name + ".meta")))
    except (OSError, ValueError):
        meta = {"rc": -1, "other_cpu_frac": 0}
    if meta["rc"] != 0:
        problems.append(f"exit status {meta['rc']}")
    try:
        r = json.load(open(os.path.join(work, name + ".json")))
    except (OSError, ValueError):
        return None, problems + ["no JSON result"], meta
    if int(r.get("steps", 0)) != want_steps:
        problems.append(f"ran {r.get('steps')} steps, expected {want_steps}")
    secs = float(r.get("train_seconds", 0) or 0)
    if not (math.isfinite(secs) and secs > 0):
        problems.append(f"train_seconds {secs}")
    acc = float(r.get("test_accuracy", 0) or 0)
    if acc < acc_min:
        problems.append(f"test accuracy {acc:.4f} < {acc_min:.2f}")
    r["global_sps"] = samples / secs if secs > 0 else 0
    return r, problems, meta

rows, notes, med = [], [], {}
for m in models:
    for key, fw, n in VARIANTS:
        runs = [(i + 1,) + load(f"{m}_{key}_{i + 1}") for i in range(repeat)]
        good = []
        for i, r, problems, meta in runs:
            for p in problems:
                notes.append(f"INVALID {m}/{key} run {i}: {p} (log: {work}/{m}_{key}_{i}.log)")
            if key != "yoke2" and meta.get("other_cpu_frac", 0) > NOISY:
                notes.append(f"noisy {m}/{key} run {i}: other processes used "
                             f"{100 * meta['other_cpu_frac']:.0f}% of the machine")
            if r is not None and not problems:
                good.append(r)
        if not good:
            rows.append([m.upper(), fw, f"{n} x 1", "-", "-", "-", "INVALID"])
            continue
        sps = [r["global_sps"] for r in good]
        med[(m, key)] = statistics.median(sps)
        spread = f" ({min(sps):,.0f}..{max(sps):,.0f})" if len(sps) > 1 else ""
        rows.append([m.upper(), fw, f"{n} x 1", f"{med[(m, key)]:,.0f}{spread}",
                     f"{good[-1].get('test_accuracy', 0):.4f}",
                     f"{statistics.median(r['train_seconds'] for r in good):.1f}",
                     "ok" if len(good) == repeat else "partly INVALID"])

head = ["config", "framework", "replicas", "samples/s" + (" (median, min..max)" if repeat > 1 else ""),
        "test acc", "train s", "check"]
w = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
fmt = lambda row: " | ".join(str(c).ljust(w[i]) if i in (0, 1, 2, 6) else str(c).rjust(w[i])
                             for i, c in enumerate(row))
print(fmt(head))
print("-+-".join("-" * x for x in w))
for row in rows:
    print(fmt(row))
print()
for m in models:
    y2, d2, y1, t1 = (med.get((m, k)) for k in ("yoke2", "ddp2", "yoke1", "torch1"))
    parts = [f"{m.upper()}: yoke/DDP (2 replicas) " + (f"{y2 / d2:.2f}x" if y2 and d2 else "n/a")]
    parts.append("scaling efficiency yoke " + (f"{y2 / (2 * y1):.0%}" if y2 and y1 else "n/a"))
    parts.append("DDP " + (f"{d2 / (2 * t1):.0%}" if d2 and t1 else "n/a"))
    print(", ".join(parts))
for n in notes:
    print(n)
print(f"raw results and logs: {work}")
EOF
AGG_RC=$?
sed -n '/^config /,$p' "$REPORT"
[ -n "${BENCH_OUT:-}" ] && cp "$REPORT" "$BENCH_OUT" && echo "report written to $BENCH_OUT"
[ "$AGG_RC" = 0 ] || die "could not summarise the results (see $WORK)"
grep -q '^INVALID' "$REPORT" && exit 3
exit 0
