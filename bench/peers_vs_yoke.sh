#!/usr/bin/env bash
# Yoke against the current CPU training stacks, one table:
#   TensorFlow 2.21 / Keras 3: fit; MirroredStrategy (2 logical CPU devices);
#                              MultiWorkerMirroredStrategy (2 processes)
#   PyTorch 2.x:               eager; torch.compile; DDP (2 processes, gloo)
#   PyTorch 1.13 (Debian's python3-torch): bench/pytorch_train.py and
#                              bench/pytorch_ddp.py, as in the older benchmarks
# on four recipes: MLP and CNN (configs/fashion_mnist_{mlp,cnn}.yaml) in one
# process with THREADS threads, and with 2 ranks of 1 thread each (Yoke on a
# `yoke up --workers 2` cluster), global batch 64 everywhere.
#
#   bench/peers_vs_yoke.sh [BUILD_DIR]            (default BUILD_DIR: build)
#
# The peers run from the virtual environment that `make bench` makes
# (scripts/install-deps.sh bench, in BUILD_DIR/bench-venv).
#
# Environment:
#   EPOCHS=1        epochs per run (the configs' full recipe is 5)
#   RUNS=3          runs of every variant, interleaved (run 1 of everything,
#                   then run 2, ...); samples/s is the median
#   RECIPES="mlp1 cnn1 mlp2 cnn2"   which recipes
#   PEERS="..."     only these peers (names as in the table's first column,
#                   e.g. "tf-fit torch2-eager"); Yoke always runs
#   THREADS=2       threads of the one-process runs (2-rank runs: 1 per rank)
#   ACC_MIN=0.80    a run below this test accuracy is INVALID
#   MAX_STEPS=N     stop each run after N steps (development; no accuracy check)
#   TF_JIT=off      Keras jit_compile (XLA) for the TensorFlow peers: off|on|auto
#   TORCH_CL=0      1: the PyTorch 2 CNN in channels_last (NHWC) memory format
#   VENV=BUILD_DIR/bench-venv   the peers' virtual environment
#   PYTHON113=/usr/bin/python3  Debian's interpreter with python3-torch 1.13
#   BENCH_OUT=FILE  also write the report to FILE
#   REPORT_FROM=DIR tabulate again the runs kept in DIR by an earlier, e.g.
#                   interrupted, invocation (pass its EPOCHS, RUNS, MAX_STEPS)
#
# Every variant's samples/s is the same figure as `yoke train`'s: training
# samples of all ranks / rank 0's seconds in its training loop, every step
# counted (the first included, with the peers' tracing or compilation),
# test evaluation, data loading and start-up excluded. peak RSS is per
# process (per rank; a MirroredStrategy process holds both replicas). A run
# that fails, runs another number of steps than asked (938 per epoch) or
# ends below ACC_MIN is INVALID and gets no ratio; a run during which other
# processes used more than 10% of the machine is marked noisy (not measured
# for Yoke's cluster runs, whose trainers are not this script's children).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
YOKE="$BUILD/bin/yoke"
VENV="${VENV:-$BUILD/bench-venv}"
VPY="$VENV/bin/python3"
PYTHON113="${PYTHON113:-/usr/bin/python3}"
EPOCHS="${EPOCHS:-1}"
RUNS="${RUNS:-3}"
RECIPES="${RECIPES:-mlp1 cnn1 mlp2 cnn2}"
PEERS="${PEERS:-}"
THREADS="${THREADS:-2}"
MAX_STEPS="${MAX_STEPS:-0}"
TF_JIT="${TF_JIT:-off}"
TORCH_CL="${TORCH_CL:-0}"
if [ "$MAX_STEPS" -gt 0 ]; then ACC_MIN="${ACC_MIN:-0}"; else ACC_MIN="${ACC_MIN:-0.80}"; fi
NPROC="$(nproc)"
OPENBLAS_OMP_DIR=/usr/lib/x86_64-linux-gnu/openblas-openmp

die() { echo "peers_vs_yoke: $*" >&2; exit 1; }
for v in EPOCHS RUNS THREADS MAX_STEPS; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, got '${!v}'"
done
[ "$EPOCHS" -gt 0 ] && [ "$RUNS" -gt 0 ] && [ "$THREADS" -gt 0 ] || die "EPOCHS, RUNS and THREADS must be > 0"
for r in $RECIPES; do
  case "$r" in mlp1|cnn1|mlp2|cnn2) ;; *) die "RECIPES: unknown recipe '$r' (mlp1 cnn1 mlp2 cnn2)" ;; esac
done
[ -x "$YOKE" ] || die "$YOKE not found; build first (make build)"

say() { echo "$*" | tee -a "$REPORT"; }
if [ -n "${REPORT_FROM:-}" ]; then
  # Tabulate again the runs an earlier (e.g. interrupted) invocation kept in
  # REPORT_FROM, with its header; runs it did not get to are left out.
  [ -f "$REPORT_FROM/report.txt" ] || die "REPORT_FROM: no report.txt in $REPORT_FROM"
  WORK="$REPORT_FROM"
  REPORT="$WORK/report-again.txt"
  sed '/^$/q' "$WORK/report.txt" > "$REPORT"
else
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/yoke-peers.XXXXXX")"
  REPORT="$WORK/report.txt"
fi
# busy_jiffies, children_cpu and run_one NAME CMD... (see bench_lib.sh).
source "$ROOT/bench/bench_lib.sh"

VARIANTS_RUN=""
if [ -z "${REPORT_FROM:-}" ]; then
# ---- which peers can run -----------------------------------------------------
HAVE_TF=0; HAVE_T2=0; HAVE_T113=0
TF_VER=""; T2_VER=""; T113_VER=""
if [ -x "$VPY" ]; then
  TF_VER="$(TF_CPP_MIN_LOG_LEVEL=3 "$VPY" -c 'import tensorflow as tf, keras; print(f"tensorflow {tf.__version__}, keras {keras.__version__}")' 2>/dev/null)" && HAVE_TF=1
  T2_VER="$("$VPY" -c 'import torch; c = torch.__config__.show(); print(f"torch {torch.__version__} (" + ", ".join(kv.strip() for kv in c.split("Build settings:")[-1].split(",") if kv.strip().split("=")[0] in ("BLAS_INFO", "USE_MKLDNN", "USE_OPENMP")) + ")")' 2>/dev/null)" && HAVE_T2=1
fi
T113_ENV=(env OMP_NUM_THREADS="$THREADS")
T113_ENV1=(env OMP_NUM_THREADS=1)
if [ -d "$OPENBLAS_OMP_DIR" ]; then
  T113_ENV+=(LD_LIBRARY_PATH="$OPENBLAS_OMP_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  T113_ENV1+=(LD_LIBRARY_PATH="$OPENBLAS_OMP_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
fi
if [ -x "$PYTHON113" ]; then
  T113_VER="$("$PYTHON113" -c 'import torch; print(f"torch {torch.__version__}")' 2>/dev/null)" && HAVE_T113=1
fi
want() {  # want PEER: whether PEER's framework is here and PEERS selects it
  local p="$1"
  case "$p" in
    tf-*) [ "$HAVE_TF" = 1 ] || return 1 ;;
    torch2-*) [ "$HAVE_T2" = 1 ] || return 1 ;;
    torch1.13*) [ "$HAVE_T113" = 1 ] || return 1 ;;
  esac
  [ -z "$PEERS" ] && return 0
  [[ " $PEERS " == *" $p "* ]]
}

CPU_MODEL="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
say "== Yoke vs TensorFlow 2 / PyTorch 2 / PyTorch 1.13 (CPU), Fashion-MNIST =="
say "date:      $(date -u '+%Y-%m-%d %H:%M UTC')"
say "machine:   $NPROC cores (nproc), ${CPU_MODEL:-unknown CPU}, $(awk '/MemTotal/ {printf "%.1f GiB RAM", $2/1048576}' /proc/meminfo)"
say "yoke:      git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- . ':!bench' 2>/dev/null || echo ' (dirty tree outside bench/)')"
say "peers:     ${TF_VER:-TensorFlow NOT AVAILABLE (make bench installs it)}; ${T2_VER:-PyTorch 2 NOT AVAILABLE}; ${T113_VER:-PyTorch 1.13 NOT AVAILABLE} (Debian)"
say "settings:  $EPOCHS epoch(s), batch 64, RUNS=$RUNS interleaved, 1 process x $THREADS threads / 2 ranks x 1 thread, TF jit_compile=$TF_JIT, torch2 channels_last=$TORCH_CL$([ "$MAX_STEPS" -gt 0 ] && echo ", MAX_STEPS=$MAX_STEPS"), ACC_MIN=$ACC_MIN"
say "load:      $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) before starting"
say ""

# ---- the Yoke cluster for the 2-rank recipes ----------------------------------
CLUSTER="$WORK/cluster"
# The cluster `yoke up` records there (address and admin credentials) is the
# one the submit, watch and get commands below use.
export YOKE_STATE_DIR="$CLUSTER/state"
ADDR=""
cleanup() { [ -n "$ADDR" ] && "$YOKE" down --dir "$CLUSTER" >/dev/null 2>&1; }
trap cleanup EXIT
if [[ " $RECIPES " == *"2 "* ]]; then
  mkdir -p "$CLUSTER"
  "$YOKE" up --detach --workers 2 --dir "$CLUSTER" > "$WORK/up.log" 2>&1 ||
    die "yoke up failed: $(tail -3 "$WORK/up.log")"
  ADDR="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["address"])' \
          "$CLUSTER/cluster.json")" || die "no coordinator address in $CLUSTER/cluster.json"
fi

# peak VmHWM of every yoke-trainer process while the job runs (the trainers
# are the workers' children, so getrusage cannot see them), as
# "pid bytes" lines into $1.
trainer_rss_poll() {
  local out="$1" pid ppid kb
  declare -A hwm
  while :; do
    # VmHWM is the kernel's own high-water mark, so a read every second
    # misses at most the last second of a trainer's life.
    for pid in $(pgrep -x yoke-trainer); do
      # Only this cluster's trainers (children of its workers, whose
      # --work-dir is under $CLUSTER), not those of other jobs on the machine.
      ppid="$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null)" || continue
      tr '\0' ' ' < "/proc/$ppid/cmdline" 2>/dev/null | grep -qF "$CLUSTER" || continue
      kb="$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null)"
      [ -n "$kb" ] && [ "$kb" -gt "${hwm[$pid]:-0}" ] && hwm[$pid]="$kb"
    done
    : > "$out.tmp"
    for pid in "${!hwm[@]}"; do echo "$pid $((hwm[$pid] * 1024))" >> "$out.tmp"; done
    mv "$out.tmp" "$out"
    sleep 1
  done
}

# yoke_cluster_run CONFIG SETS...: submit, watch to the end, print the job's
# result as one JSON line with every trainer's peak RSS added.
yoke_cluster_run() {
  local cfg="$1"; shift
  local id rss="$WORK/trainer_rss.$RANDOM" poller
  id="$("$YOKE" submit "$cfg" "$@" --coordinator "$ADDR")" || return 1
  trainer_rss_poll "$rss" & poller=$!
  "$YOKE" watch "$id" --coordinator "$ADDR" >&2; local rc=$?
  kill "$poller" 2>/dev/null; wait "$poller" 2>/dev/null
  [ "$rc" = 0 ] || return 1
  "$YOKE" get "$id" --output json --coordinator "$ADDR" | python3 -c '
import json, sys
j = json.load(sys.stdin); r = j.get("result", {}); r["job"] = j["id"]
try:
    per = sorted(int(l.split()[1]) for l in open(sys.argv[1]) if l.strip())
except OSError:
    per = []
if per:
    r["peak_memory_bytes_per_rank"] = per
    r["peak_memory_bytes"] = max(per)
print(json.dumps(r))' "$rss"
}

# ---- runs ----------------------------------------------------------------------
PEER_ARGS=(--epochs "$EPOCHS")
YOKE_SETS=(--set "training.epochs=$EPOCHS")
if [ "$MAX_STEPS" -gt 0 ]; then
  PEER_ARGS+=(--max-steps "$MAX_STEPS")
  YOKE_SETS+=(--set "training.max_steps=$MAX_STEPS")
fi
T="$THREADS"
variants_for() {  # the variant names of recipe $1, Yoke first
  case "$1" in
    *1) echo "yoke torch1.13 torch2-eager torch2-compile tf-fit" ;;
    *2) echo "yoke torch1.13-ddp torch2-ddp tf-mirrored tf-mwms" ;;
  esac
}
run_variant() {  # run_variant RECIPE VARIANT NAME
  local rec="$1" v="$2" name="$3" m="${1%[12]}"
  local cfg="$ROOT/configs/fashion_mnist_$m.yaml"
  local cl=(); [ "$m" = cnn ] && [ "$TORCH_CL" = 1 ] && cl=(--channels-last)
  case "$rec:$v" in
    *1:yoke) run_one "$name" env OMP_NUM_THREADS="$T" "$YOKE" train "$cfg" "${YOKE_SETS[@]}" \
               --set "training.threads=$T" --output json ;;
    *2:yoke) run_one "$name" yoke_cluster_run "$cfg" "${YOKE_SETS[@]}" --set training.threads=1 \
               --set distribution.workers=2 ;;
    *:torch1.13) run_one "$name" "${T113_ENV[@]}" "$PYTHON113" "$ROOT/bench/pytorch_train.py" \
               --model "$m" --threads "$T" "${PEER_ARGS[@]}" ;;
    *:torch1.13-ddp) run_one "$name" "${T113_ENV1[@]}" "$PYTHON113" "$ROOT/bench/pytorch_ddp.py" \
               --model "$m" --nproc 2 --threads 1 "${PEER_ARGS[@]}" ;;
    *:torch2-eager) run_one "$name" env OMP_NUM_THREADS="$T" "$VPY" "$ROOT/bench/peers/torch_train.py" \
               --model "$m" --threads "$T" "${cl[@]}" "${PEER_ARGS[@]}" ;;
    *:torch2-compile) run_one "$name" env OMP_NUM_THREADS="$T" "$VPY" "$ROOT/bench/peers/torch_train.py" \
               --model "$m" --threads "$T" --compile "${cl[@]}" "${PEER_ARGS[@]}" ;;
    *:torch2-ddp) run_one "$name" env OMP_NUM_THREADS=1 "$VPY" "$ROOT/bench/peers/torch_train.py" \
               --model "$m" --nproc 2 --threads 1 "${cl[@]}" "${PEER_ARGS[@]}" ;;
    *:tf-fit) run_one "$name" env OMP_NUM_THREADS="$T" "$VPY" "$ROOT/bench/peers/tf_train.py" \
               --model "$m" --mode fit --threads "$T" --jit "$TF_JIT" "${PEER_ARGS[@]}" ;;
    *:tf-mirrored) run_one "$name" env OMP_NUM_THREADS=1 "$VPY" "$ROOT/bench/peers/tf_train.py" \
               --model "$m" --mode mirrored --nproc 2 --threads 1 --jit "$TF_JIT" "${PEER_ARGS[@]}" ;;
    *:tf-mwms) run_one "$name" env OMP_NUM_THREADS=1 "$VPY" "$ROOT/bench/peers/tf_train.py" \
               --model "$m" --mode mwms --nproc 2 --threads 1 --jit "$TF_JIT" "${PEER_ARGS[@]}" ;;
  esac
}

for r in $(seq 1 "$RUNS"); do
  for rec in $RECIPES; do
    for v in $(variants_for "$rec"); do
      [ "$v" = yoke ] || want "$v" || continue
      echo "[run $r/$RUNS] $rec $v ..." >&2
      run_variant "$rec" "$v" "${rec}_${v}_$r"
      VARIANTS_RUN+=" $rec:$v"
    done
  done
done

else
  for f in "$WORK"/*_1.meta "$WORK"/*_1.json; do
    [ -e "$f" ] || continue
    f="${f##*/}"; f="${f%_1.*}"
    VARIANTS_RUN+=" ${f%%_*}:${f#*_}"
  done
fi

# ---- the table ---------------------------------------------------------------
python3 - "$WORK" "$RECIPES" "$RUNS" "$EPOCHS" "$MAX_STEPS" "$ACC_MIN" "$VARIANTS_RUN" \
  >> "$REPORT" <<'EOF'
import json, math, os, statistics, sys

work, recipes, runs, epochs, max_steps, acc_min, ran = sys.argv[1:]
recipes, runs, epochs, max_steps, acc_min = (recipes.split(), int(runs), int(epochs),
                                             int(max_steps), float(acc_min))
ran = list(dict.fromkeys(ran.split()))
TRAIN_N, BATCH = 60000, 64
per_epoch = -(-TRAIN_N // BATCH)
want_steps = min(epochs * per_epoch, max_steps) if max_steps else epochs * per_epoch
samples = TRAIN_N * epochs if want_steps == epochs * per_epoch else want_steps * BATCH
NOISY = 0.10
LABEL = {"mlp1": "MLP, 1 process", "cnn1": "CNN, 1 process",
         "mlp2": "MLP, 2 ranks", "cnn2": "CNN, 2 ranks"}
NAME = {"yoke": "Yoke", "torch1.13": "PyTorch 1.13 eager", "torch2-eager": "PyTorch 2 eager",
        "torch2-compile": "PyTorch 2 torch.compile", "tf-fit": "TF 2 / Keras 3 fit",
        "torch1.13-ddp": "PyTorch 1.13 DDP (gloo)", "torch2-ddp": "PyTorch 2 DDP (gloo)",
        "tf-mirrored": "TF MirroredStrategy (1 proc)", "tf-mwms": "TF MultiWorkerMirrored"}
# Every peer measured competes for "best peer", PyTorch 1.13 included: on the
# one-process MLP it is the fastest peer.

def load(name, check_noise):
    problems = []
    try:
        meta = json.load(open(os.path.join(work, name + ".meta")))
    except (OSError, ValueError):
        meta = {"rc": -1, "other_cpu_frac": 0}
    if meta["rc"] != 0:
        problems.append(f"exit status {meta['rc']}")
    try:
        r = json.load(open(os.path.join(work, name + ".json")))
    except (OSError, ValueError):
        return None, problems + ["no JSON result"], False
    if int(r.get("steps", 0)) != want_steps:
        problems.append(f"ran {r.get('steps')} steps, expected {want_steps}")
    secs = float(r.get("train_seconds", 0) or 0)
    if not (math.isfinite(secs) and secs > 0):
        problems.append(f"train_seconds {secs}")
    acc = float(r.get("test_accuracy", 0) or 0)
    if not acc >= acc_min:
        problems.append(f"test accuracy {acc:.4f} < {acc_min:.2f}")
    r["sps"] = samples / secs if secs > 0 else 0
    noisy = check_noise and meta.get("other_cpu_frac", 0) > NOISY
    return r, problems, noisy

def mib(b):
    return f"{b / 2**20:,.0f}"

rows, notes, summary = [], [], []
for rec in recipes:
    vs = sorted((v.split(":")[1] for v in ran if v.split(":")[0] == rec),
                key=lambda v: list(NAME).index(v) if v in NAME else len(NAME))
    med, accs, done_runs = {}, {}, {}
    for v in vs:
        good, n_noisy = [], 0
        for i in range(1, runs + 1):
            name = f"{rec}_{v}_{i}"
            if not os.path.exists(os.path.join(work, name + ".meta")):
                continue  # not run, or still running (tabulated with REPORT_FROM)
            done_runs[v] = done_runs.get(v, 0) + 1
            # A Yoke cluster run's trainers are not our children, so bench_lib's
            # "other processes" share would count them: not used there.
            r, problems, noisy = load(name, not (rec.endswith("2") and v == "yoke"))
            for p in problems:
                notes.append(f"INVALID {rec}/{v} run {i}: {p} (log: {work}/{rec}_{v}_{i}.log)")
            if r is not None and not problems:
                good.append(r)
                n_noisy += noisy
        if not good:
            rows.append([LABEL[rec], NAME[v], "-", "", "-", "-", "-", "INVALID"])
            continue
        sps = [r["sps"] for r in good]
        med[v] = statistics.median(sps)
        rss = [r.get("peak_memory_bytes_per_rank") or [r.get("peak_memory_bytes", 0)] for r in good]
        rss_max = max(max(x) for x in rss)
        nranks = max(len(x) for x in rss)
        warm = [r["samples_per_second_after_warmup"] for r in good
                if r.get("samples_per_second_after_warmup")]
        warm_s = f"{statistics.median(warm):,.0f}" if warm else "-"
        acc = statistics.median(r.get("test_accuracy", 0) for r in good)
        accs[v] = acc
        done = done_runs.get(v, 0)
        check = "ok" if len(good) == done else f"{done - len(good)} INVALID"
        if done < runs:
            check += f" ({done} of {runs} runs)"
        if n_noisy:
            check += f", {n_noisy} noisy"
        rows.append([LABEL[rec], NAME[v], f"{med[v]:,.0f} ({min(sps):,.0f}..{max(sps):,.0f})", v, warm_s,
                     mib(rss_max) + ("" if nranks > 1 or not rec.endswith("2") else
                                     " (1 proc, 2 replicas)" if v == "tf-mirrored" else " (rank 0)"),
                     f"{acc:.4f}", check])
    y = med.get("yoke")
    for row in rows:
        if row[0] == LABEL[rec] and row[3] in med:
            v = row[3]
            row[3] = "-" if v == "yoke" else (f"{y / med[v]:.2f}x" if y else "n/a")
    peers = {v: s for v, s in med.items() if v != "yoke"}
    if peers:
        best = max(peers, key=peers.get)
        summary.append(f"{LABEL[rec]}: best peer {NAME[best]} {peers[best]:,.0f} samples/s; "
                       + (f"Yoke/best {y / peers[best]:.2f}x" if y else "Yoke n/a"))

head = ["recipe", "framework", f"samples/s median (min..max)", "Yoke/peer",
        "after warm-up", "peak RSS MiB per rank", "test acc", "check"]
w = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
fmt = lambda row: " | ".join(str(c).ljust(w[i]) if i in (0, 1, 7) else str(c).rjust(w[i])
                             for i, c in enumerate(row))
print(fmt(head))
print("-+-".join("-" * x for x in w))
prev = None
for row in rows:
    print(fmt(row if row[0] != prev else [""] + row[1:]))
    prev = row[0]
print()
for s in summary:
    print(s)
for n in notes:
    print(n)
print(f"raw results and logs: {work}")
EOF
AGG_RC=$?
sed -n '/^recipe /,$p' "$REPORT"
[ -n "${BENCH_OUT:-}" ] && cp "$REPORT" "$BENCH_OUT" && echo "report written to $BENCH_OUT"
[ "$AGG_RC" = 0 ] || die "could not summarise the results (see $WORK)"
grep -q '^INVALID' "$REPORT" && exit 3
exit 0
