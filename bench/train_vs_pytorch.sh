#!/usr/bin/env bash
# Yoke against PyTorch (CPU) on the same Fashion-MNIST recipes, in one run:
#   (1) Yoke MLP  (2) PyTorch MLP  (3) Yoke CNN  (4) PyTorch CNN
# then a table of samples/s, test accuracy and peak memory, and the
# yoke/pytorch throughput ratio per config.
#
#   bench/train_vs_pytorch.sh [BUILD_DIR]        (default BUILD_DIR: build)
#
# Environment:
#   EPOCHS=5        epochs per run (the configs' own value)
#   BENCH_QUICK=1   one epoch per run (a smoke test; timings still valid)
#   REPEAT=1        runs per (config, framework); samples/s is the median
#   THREADS=2       threads for both frameworks
#   MAX_STEPS=N     stop each run after N steps (development only; accuracy
#                   is then not checked unless ACC_MIN is given)
#   ACC_MIN=0.80    a run whose test accuracy is below this is INVALID
#   MODELS="mlp cnn"  which configs to run
#   BENCH_OUT=FILE  also write the report to FILE
#   PYTHON=/usr/bin/python3  the interpreter with python3-torch (Debian's)
#
# Fairness: both frameworks get the same data (decoded once into memory),
# the same recipe, init scheme, batch size and epoch count, and THREADS
# threads. PyTorch runs on the OpenMP build of OpenBLAS (libopenblas0-openmp):
# its directory is put first on LD_LIBRARY_PATH so libblas.so.3 resolves to
# it whatever update-alternatives says, and the header shows what the torch
# process really mapped. Debian's pthread OpenBLAS makes torch several times
# slower (its threads fight torch's OpenMP pool), which would flatter Yoke.
#
# Results are checked before timings are trusted: a run that fails, prints no
# JSON, runs a different number of steps than asked, or ends below ACC_MIN
# test accuracy is INVALID and gets no ratio. A run during which other
# processes used more than 10% of the machine is marked "noisy".
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
YOKE="$BUILD/bin/yoke"
PYTHON="${PYTHON:-/usr/bin/python3}"
THREADS="${THREADS:-2}"
REPEAT="${REPEAT:-1}"
MODELS="${MODELS:-mlp cnn}"
MAX_STEPS="${MAX_STEPS:-0}"
if [ -n "${BENCH_QUICK:-}" ] && [ "${BENCH_QUICK}" != 0 ]; then
  EPOCHS="${EPOCHS_QUICK:-1}"
else
  EPOCHS="${EPOCHS:-5}"
fi
if [ "$MAX_STEPS" -gt 0 ]; then ACC_MIN="${ACC_MIN:-0}"; else ACC_MIN="${ACC_MIN:-0.80}"; fi
OPENBLAS_OMP_DIR=/usr/lib/x86_64-linux-gnu/openblas-openmp
NPROC="$(nproc)"

die() { echo "train_vs_pytorch: $*" >&2; exit 1; }
for v in EPOCHS REPEAT THREADS MAX_STEPS; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, got '${!v}'"
done
[ "$EPOCHS" -gt 0 ] && [ "$REPEAT" -gt 0 ] && [ "$THREADS" -gt 0 ] ||
  die "EPOCHS, REPEAT and THREADS must be > 0"
[ -x "$YOKE" ] || die "$YOKE not found; build first (make build, or ninja -C $BUILD yoke yoke-trainer)"
for m in $MODELS; do
  [ -f "$ROOT/configs/fashion_mnist_$m.yaml" ] || die "MODELS: no config configs/fashion_mnist_$m.yaml"
done

# The torch process must see the OpenMP OpenBLAS first (see the header).
TORCH_ENV=(env OMP_NUM_THREADS="$THREADS")
if [ -d "$OPENBLAS_OMP_DIR" ]; then
  TORCH_ENV+=(LD_LIBRARY_PATH="$OPENBLAS_OMP_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/yoke-bench.XXXXXX")"
REPORT="$WORK/report.txt"
say() { echo "$*" | tee -a "$REPORT"; }

# ---- header: machine, build, torch and its BLAS ---------------------------
HAVE_TORCH=0
TORCH_PROBE=""
if [ -x "$PYTHON" ] && TORCH_PROBE="$("${TORCH_ENV[@]}" "$PYTHON" - "$THREADS" 2>&1 <<'EOF'
import ctypes, os, sys, torch
torch.set_num_threads(int(sys.argv[1]))
cfg = torch.__config__.show()
keep = [l.strip(" -") for l in cfg.splitlines()
        if any(k in l for k in ("MKL-DNN", "OpenMP", "LAPACK is", "CPU capability"))]
build = [kv.strip() for kv in cfg.split("Build settings:")[-1].split(",")
         if kv.strip().split("=")[0] in ("BLAS_INFO", "LAPACK_INFO", "USE_OPENMP", "USE_MKLDNN")]
print(f"torch {torch.__version__} ({torch.__file__.rsplit('/', 2)[0]})")
print("  config: " + "; ".join(keep + build))
par = torch.__config__.parallel_info()
print("  parallel: " + "; ".join(l.strip() for l in par.splitlines()
      if "get_num_threads" in l or "parallel backend" in l))
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if ".so" in l})
blas = [p for p in libs if "blas" in os.path.basename(p) or "lapack" in os.path.basename(p)]
print("  mapped BLAS: " + ", ".join(blas))
mode = "not OpenBLAS"
for p in blas:
    if "openblas" in os.path.basename(p):
        lib = ctypes.CDLL(p)
        lib.openblas_get_config.restype = ctypes.c_char_p
        mode = {0: "sequential", 1: "pthread", 2: "openmp"}.get(lib.openblas_get_parallel(), "?")
        print(f"  openblas: {lib.openblas_get_config().decode()}; threading {mode}, "
              f"{lib.openblas_get_num_threads()} threads")
print(f"OPENBLAS_MODE={mode}")
EOF
)"; then
  HAVE_TORCH=1
fi

CPU_MODEL="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
say "== Yoke vs PyTorch (CPU), Fashion-MNIST =="
say "date:      $(date -u '+%Y-%m-%d %H:%M UTC')"
say "machine:   $NPROC cores (nproc), ${CPU_MODEL:-unknown CPU}, $(awk '/MemTotal/ {printf "%.1f GiB RAM", $2/1048576}' /proc/meminfo)"
say "yoke:      $YOKE (git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ', dirty tree'))"
say "settings:  $EPOCHS epoch(s), batch 64, $THREADS threads, REPEAT=$REPEAT$([ "$MAX_STEPS" -gt 0 ] && echo ", MAX_STEPS=$MAX_STEPS"), ACC_MIN=$ACC_MIN"
say "load:      $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) before starting"
OPENBLAS_MODE=""
if [ "$HAVE_TORCH" = 1 ]; then
  OPENBLAS_MODE="$(sed -n 's/^OPENBLAS_MODE=//p' <<<"$TORCH_PROBE")"
  grep -v '^OPENBLAS_MODE=' <<<"$TORCH_PROBE" | while IFS= read -r l; do say "$l"; done
  if [ "$OPENBLAS_MODE" != openmp ]; then
    say "WARNING: torch's BLAS is '$OPENBLAS_MODE', not the OpenMP OpenBLAS this benchmark's"
    say "         fairness settings call for (install libopenblas0-openmp:"
    say "         scripts/install-deps.sh bench); PyTorch figures will be pessimistic."
  fi
else
  say "pytorch:   NOT AVAILABLE ($PYTHON cannot import torch; install python3-torch with"
  say "           scripts/install-deps.sh bench). Running Yoke only."
  [ -n "$TORCH_PROBE" ] && say "           ($(tail -1 <<<"$TORCH_PROBE"))"
fi
say ""

# ---- runs --------------------------------------------------------------------
# busy_jiffies, children_cpu and run_one NAME CMD... (see bench_lib.sh).
source "$ROOT/bench/bench_lib.sh"

YOKE_SETS=(--set "training.epochs=$EPOCHS" --set "training.threads=$THREADS")
TORCH_ARGS=(--epochs "$EPOCHS" --threads "$THREADS")
if [ "$MAX_STEPS" -gt 0 ]; then
  YOKE_SETS+=(--set "training.max_steps=$MAX_STEPS")
  TORCH_ARGS+=(--max-steps "$MAX_STEPS")
fi

for m in $MODELS; do
  for r in $(seq 1 "$REPEAT"); do
    echo "[$m, run $r/$REPEAT] yoke ..." >&2
    run_one "${m}_yoke_$r" env OMP_NUM_THREADS="$THREADS" "$YOKE" train \
      "$ROOT/configs/fashion_mnist_$m.yaml" "${YOKE_SETS[@]}" --output json
    if [ "$HAVE_TORCH" = 1 ]; then
      echo "[$m, run $r/$REPEAT] pytorch ..." >&2
      run_one "${m}_pytorch_$r" "${TORCH_ENV[@]}" "$PYTHON" "$ROOT/bench/pytorch_train.py" \
        --model "$m" "${TORCH_ARGS[@]}"
    fi
  done
done

# ---- checks, table, ratio ----------------------------------------------------
AGG_PY="$PYTHON"; [ -x "$AGG_PY" ] || AGG_PY=python3
"$AGG_PY" - "$WORK" "$MODELS" "$REPEAT" "$EPOCHS" "$MAX_STEPS" "$ACC_MIN" "$HAVE_TORCH" \
  >> "$REPORT" <<'EOF'
import json, math, os, statistics, sys

work, models, repeat, epochs, max_steps, acc_min, have_torch = sys.argv[1:]
models, repeat, epochs, max_steps = models.split(), int(repeat), int(epochs), int(max_steps)
acc_min = float(acc_min)
frameworks = ["yoke"] + (["pytorch"] if have_torch == "1" else [])
TRAIN_N, BATCH = 60000, 64
steps_per_epoch = -(-TRAIN_N // BATCH)
want_steps = min(epochs * steps_per_epoch, max_steps) if max_steps else epochs * steps_per_epoch
NOISY = 0.10     # share of the machine other processes may use
ACC_TOL = 0.03   # accuracy gap between the frameworks worth a warning

def load(name):
    run = {"problems": []}
    try:
        meta = json.load(open(os.path.join(work, name + ".meta")))
    except (OSError, ValueError):
        meta = {"rc": -1, "wall": 0, "other_cpu_frac": 0}
    run["meta"] = meta
    if meta["rc"] != 0:
        run["problems"].append(f"exit status {meta['rc']}")
    try:
        r = json.load(open(os.path.join(work, name + ".json")))
    except (OSError, ValueError):
        run["problems"].append("no JSON result on stdout")
        return run
    run["r"] = r
    sps, acc = r.get("samples_per_second", 0), r.get("test_accuracy", 0)
    if int(r.get("steps", 0)) != want_steps:
        run["problems"].append(f"ran {r.get('steps')} steps, expected {want_steps}")
    if not (isinstance(sps, (int, float)) and math.isfinite(sps) and sps > 0):
        run["problems"].append(f"samples_per_second {sps}")
    if not (isinstance(acc, (int, float)) and acc >= acc_min):
        run["problems"].append(f"test accuracy {acc:.4f} < {acc_min:.2f}")
    return run

rows, notes, medians = [], [], {}
for m in models:
    for fw in frameworks:
        runs = [load(f"{m}_{fw}_{i}") for i in range(1, repeat + 1)]
        bad = [(i + 1, p) for i, run in enumerate(runs) for p in run["problems"]]
        for i, p in bad:
            notes.append(f"INVALID {m}/{fw} run {i}: {p} (log: {work}/{m}_{fw}_{i}.log)")
        ok = [run for run in runs if "r" in run]
        noisy = [run for run in ok if run["meta"]["other_cpu_frac"] > NOISY]
        for run in noisy:
            notes.append(f"noisy {m}/{fw}: other processes used "
                         f"{100 * run['meta']['other_cpu_frac']:.0f}% of the machine during the run")
        if not ok:
            rows.append([m.upper(), fw, "-", "-", "-", "-", "INVALID"])
            continue
        sps = [run["r"]["samples_per_second"] for run in ok]
        med = statistics.median(sps)
        last = ok[-1]["r"]
        status = "INVALID" if bad else ("noisy" if noisy else "ok")
        if not bad:
            medians[(m, fw)] = (med, last.get("test_accuracy", 0))
        spread = f" ({min(sps):,.0f}..{max(sps):,.0f})" if len(sps) > 1 else ""
        rows.append([m.upper(), fw, f"{med:,.0f}{spread}", f"{last.get('test_accuracy', 0):.4f}",
                     f"{last.get('peak_memory_bytes', 0) / 2**20:,.0f}",
                     f"{statistics.median(run['r'].get('train_seconds', 0) for run in ok):.1f}",
                     status])

head = ["config", "framework", "samples/s" + (" (median, min..max)" if repeat > 1 else ""),
        "test acc", "peak MiB", "train s", "check"]
widths = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
fmt = lambda row: " | ".join(str(c).ljust(w) if i < 2 or i == 6 else str(c).rjust(w)
                             for i, (c, w) in enumerate(zip(row, widths)))
print(fmt(head))
print("-+-".join("-" * w for w in widths))
for row in rows:
    print(fmt(row))
print()
if "pytorch" in frameworks:
    parts = []
    for m in models:
        y, p = medians.get((m, "yoke")), medians.get((m, "pytorch"))
        if y and p:
            parts.append(f"{m.upper()} {y[0] / p[0]:.2f}x")
            # Seeds differ between frameworks, so only a full run is expected
            # to land close; a short one is too early in training to compare.
            if not max_steps and abs(y[1] - p[1]) > ACC_TOL:
                notes.append(f"check {m}: test accuracies differ by {abs(y[1] - p[1]):.3f} "
                             f"(same recipe; expected within {ACC_TOL})")
        else:
            parts.append(f"{m.upper()} n/a (invalid run)")
    print("yoke/pytorch samples/s: " + ", ".join(parts))
else:
    print("yoke/pytorch samples/s: n/a (PyTorch not available)")
for n in notes:
    print(n)
print(f"raw results and logs: {work}")
EOF
AGG_RC=$?
sed -n '/^config /,$p' "$REPORT"
[ -n "${BENCH_OUT:-}" ] && cp "$REPORT" "$BENCH_OUT" && echo "report written to $BENCH_OUT"
[ "$AGG_RC" = 0 ] || die "could not summarise the results (see $WORK)"
if grep -q '^INVALID' "$REPORT"; then exit 3; fi
exit 0
