#!/usr/bin/env bash
# ResNet training throughput, Yoke against every peer at hand, in one run on
# this machine: ResNet-50 at 224x224 (MODEL=resnet50, the default) or the
# CIFAR ResNet-20 at 32x32 (MODEL=resnet20), the same network
# (bench/resnet50_torch.py and bench/peers/resnet_tf.py build the zoo's
# layout), batch, optimizer, threads and synthetic data (random images made
# before timing), alternating the frameworks RUNS times. Prints each run's
# samples/s over the steps after the first WARMUP (oneDNN, PyTorch and
# TensorFlow all set up their kernels, trace or compile in the first steps),
# the medians and their ratios, and each process's peak RSS.
#
#   bench/resnet50_vs_torch.sh [BUILD]   (MODEL=resnet50 RUNS=3 STEPS=12 WARMUP=2
#                                         THREADS=2; BATCH=16, or 128 for resnet20)
#
# The peers: PEERS, one "PYTHON KIND" a line, KIND one of nchw and nhwc
# (PyTorch eager, channels-last being oneDNN's preferred CPU layout),
# nhwc-compile (PyTorch 2's torch.compile; left out of the run, with the
# reason printed, when it fails) and keras (TensorFlow's Keras `fit`). By
# default Debian's python3-torch (PyTorch 1.13) in NCHW and, where the bench
# virtual environment exists (PyTorch 2.x and TensorFlow 2.21, from
# `scripts/install-deps.sh bench`; $BUILD/bench-venv or
# $ROOT/build/bench-venv), PyTorch 2 in NCHW, in NHWC and compiled, and
# Keras. Every run times Yoke and then each peer; the summary gives each
# one's median, Yoke's ratio to each, and the paired ratio to the fastest
# peer (the best peer by median: every peer measured competes).
#
# PRECISION=bf16 runs every framework in bf16 mixed precision: Yoke with
# training.precision: bf16 (oneDNN's AMX or AVX-512 BF16 convolutions, fp32
# everywhere else), PyTorch under torch.autocast(cpu, bfloat16), Keras under
# its mixed_bfloat16 policy. The default is fp32 for all.
#
# RECOMPUTE=both times Yoke twice in every run, as it keeps every activation
# and with training.recompute ("yoke recompute"); RECOMPUTE=1 only the
# latter. RECOMPUTE=bn times it with training.recompute_batch_norm ("yoke
# recompute_batch_norm") beside the default, RECOMPUTE=all all three. Each
# Yoke variant gets its own ratios.
#
# Checked before any figure is trusted: every framework's network has the
# same number of trainable parameters (23,528,522 for ResNet-50 and 272,474
# for ResNet-20, with 10 classes), every run ends with a finite loss, and
# Yoke ran the steps asked.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
MODEL=${MODEL:-resnet50}
case "$MODEL" in
  resnet50) SIZE=224 PARAMS=23528522 BATCH=${BATCH:-16} ;;
  resnet20) SIZE=32 PARAMS=272474 BATCH=${BATCH:-128} ;;
  *) echo "MODEL=$MODEL: resnet50 or resnet20" >&2; exit 2 ;;
esac
RUNS=${RUNS:-3}
STEPS=${STEPS:-12}
WARMUP=${WARMUP:-2}
THREADS=${THREADS:-2}
PRECISION=${PRECISION:-fp32}
RECOMPUTE=${RECOMPUTE:-0}
case "$RECOMPUTE" in 0) VARIANTS="plain" ;; 1) VARIANTS="recompute" ;;
  both) VARIANTS="plain recompute" ;; bn) VARIANTS="plain recompute_batch_norm" ;;
  all) VARIANTS="plain recompute recompute_batch_norm" ;;
  *) echo "RECOMPUTE=$RECOMPUTE: 0, 1, both, bn or all" >&2; exit 2 ;; esac
case "$PRECISION" in fp32 | bf16) ;; *) echo "PRECISION=$PRECISION: fp32 or bf16" >&2; exit 2 ;; esac
if [ -z "${PEERS:-}" ]; then
  PEERS="/usr/bin/python3 nchw"
  for venv in "$BUILD/bench-venv" "$ROOT/build/bench-venv"; do
    if [ -x "$venv/bin/python" ]; then
      for kind in nchw nhwc nhwc-compile keras; do PEERS+=$'\n'"$venv/bin/python $kind"; done
      break
    fi
  done
fi
WORK=$(mktemp -d /tmp/yoke-resnet50-bench-XXXXXX)
trap 'rm -rf "$WORK"' EXIT

cat > "$WORK/job.yaml" <<EOF
name: $MODEL-throughput
model: {zoo: $MODEL}
data:
  train: {format: synthetic, shape: [$SIZE, $SIZE, 3], num_classes: 10,
          num_examples: $((BATCH * STEPS)), seed: 1}
training:
  epochs: 1
  batch_size: $BATCH
  seed: 1
  threads: $THREADS
  log_every_steps: 1
  precision: $PRECISION
  KEEP_LINE
  optimizer: {type: sgd, lr: 0.01, momentum: 0.9}
EOF

yoke_once() {  # VARIANT (plain|recompute|recompute_batch_norm) -> JSON: samples/s after WARMUP steps, loss, parameters, RSS
  local keep="recompute: false"
  [ "$1" = plain ] || keep="$1: true"
  sed "s/KEEP_LINE/$keep/" "$WORK/job.yaml" >"$WORK/job-$1.yaml"
  "$BUILD/bin/yoke" train "$WORK/job-$1.yaml" --output events 2>"$WORK/yoke.log" >"$WORK/yoke.events"
  python3 - "$WORK/yoke.events" "$WARMUP" "$BATCH" <<'PY'
import json, math, sys
warmup, batch = int(sys.argv[2]), int(sys.argv[3])
steps, seconds, result = 0, 0.0, None
for line in open(sys.argv[1]):
    e = json.loads(line)
    if "step" in e:
        p = e["step"]
        if int(p["step"]) > warmup:  # one step per report (log_every_steps: 1)
            steps += int(p["window_steps"])
            seconds += float(p["step_seconds"])
    elif "result" in e:
        result = e["result"]
assert result is not None, "no result from yoke train"
assert steps > 0, "no timed steps"
print(json.dumps({"steps": int(result["steps"]), "samples_per_second": steps * batch / seconds,
                  "train_loss": float(result["train_loss"]),
                  "num_parameters": int(result["num_parameters"]),
                  "peak_memory_bytes": float(result["peak_memory_bytes"])}))
PY
}

peer_once() {  # PYTHON KIND -> JSON, or nothing (the reason in $WORK/peer.log)
  local script="$ROOT/bench/resnet50_torch.py" args=(--layout "${2%-compile}" --precision "$PRECISION")
  case "$2" in
    keras) script="$ROOT/bench/peers/resnet_tf.py" args=(--precision "$PRECISION") ;;
    *-compile) args+=(--compile) ;;
  esac
  OMP_NUM_THREADS="$THREADS" "$1" "$script" --model "$MODEL" --batch "$BATCH" \
    --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" "${args[@]}" 2>"$WORK/peer.log" ||
    { echo "peer $1 $2 failed, left out of this run: $(tail -1 "$WORK/peer.log")" >&2; return 0; }
}

echo "$MODEL ${SIZE}x${SIZE}, batch $BATCH, $PRECISION, $STEPS steps ($WARMUP untimed), $THREADS threads, $RUNS runs each"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
: >"$WORK/runs.jsonl"
for i in $(seq "$RUNS"); do
  for v in $VARIANTS; do
    y=$(yoke_once "$v")
    who=yoke
    [ "$v" = plain ] || who="yoke $v"
    echo "{\"run\": $i, \"who\": \"$who\", \"r\": $y}" >>"$WORK/runs.jsonl"
  done
  while read -r py kind; do
    [ -n "$py" ] || continue
    t=$(peer_once "$py" "$kind")
    [ -n "$t" ] || continue
    echo "{\"run\": $i, \"who\": \"peer\", \"r\": $t}" >>"$WORK/runs.jsonl"
  done <<<"$PEERS"
  python3 - "$WORK/runs.jsonl" "$i" "$STEPS" "$PARAMS" <<'PY'
import json, math, sys
i, steps, params = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["run"] == i]
parts = []
for row in rows:
    r = row["r"]
    name = row["who"] if row["who"] != "peer" else r["framework"]
    assert math.isfinite(r["train_loss"]), f"{name}: loss {r['train_loss']}"
    assert r["num_parameters"] == params, f"{name}: {r['num_parameters']} parameters, not {params}"
    if row["who"] != "peer":
        assert r["steps"] == steps, f"yoke ran {r['steps']} steps of {steps}"
    parts.append(f"{name} {r['samples_per_second']:.2f} samples/s ({r['peak_memory_bytes']/2**20:.0f} MiB)")
print(f"run {i}: " + ", ".join(parts))
PY
done
python3 - "$WORK/runs.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def name(row):
    return row["who"] if row["who"] != "peer" else row["r"]["framework"]
names = list(dict.fromkeys(name(r) for r in rows))
by = {n: [r["r"] for r in rows if name(r) == n] for n in names}
runs = sorted({r["run"] for r in rows})
med = {n: statistics.median(x["samples_per_second"] for x in by[n]) for n in names}
rss = {n: statistics.median(x["peak_memory_bytes"] for x in by[n]) / 2**20 for n in names}
yokes = [n for n in names if n.startswith("yoke")]
peers = [n for n in names if not n.startswith("yoke")]
for n in names:
    print(f"median {n}: {med[n]:.2f} samples/s, peak RSS {rss[n]:.0f} MiB")
    for y in ([] if n in yokes else yokes):
        print(f"  {y}/this {med[y] / med[n]:.2f}x speed, {rss[y] / rss[n]:.2f}x memory")
best = max(peers, key=lambda n: med[n])
lightest = min(peers, key=lambda n: rss[n])
def run_of(n, k):
    return next((r["r"] for r in rows if name(r) == n and r["run"] == k), None)
for y in yokes:
    paired = [run_of(y, k)["samples_per_second"] / run_of(best, k)["samples_per_second"]
              for k in runs if run_of(best, k) is not None and run_of(y, k) is not None]
    print(f"best peer: {best}; {y}/best paired ratios {', '.join(f'{p:.2f}' for p in paired)}, "
          f"median {statistics.median(paired):.2f}x; memory {rss[y] / rss[lightest]:.2f}x "
          f"the lightest peer ({lightest})")
PY
