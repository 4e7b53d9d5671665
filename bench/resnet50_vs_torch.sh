#!/usr/bin/env bash
# ResNet-50 training throughput at 224x224, Yoke against PyTorch eager, in
# one run on this machine: the same network (bench/resnet50_torch.py builds
# torchvision's layout, as Yoke's zoo does), batch, optimizer, threads and
# synthetic data (random images made before timing), alternating the two
# frameworks RUNS times. Prints each run's samples/s over the steps after the
# first WARMUP (oneDNN and PyTorch both set up their kernels in the first
# steps), the medians and their ratio, and each process's peak RSS.
#
#   bench/resnet50_vs_torch.sh [BUILD]   (RUNS=3 BATCH=16 STEPS=12 WARMUP=2 THREADS=2)
#
# PYTHON is the interpreter with torch: the bench virtual environment's
# (PyTorch 2.x, from `make bench`) when it exists, else Debian's python3-torch.
#
# Checked before any figure is trusted: both frameworks' networks have the
# same number of parameters (23,528,522 with 10 classes), every run ends with
# a finite loss, and Yoke ran the steps asked.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
RUNS=${RUNS:-3}
BATCH=${BATCH:-16}
STEPS=${STEPS:-12}
WARMUP=${WARMUP:-2}
THREADS=${THREADS:-2}
if [ -z "${PYTHON:-}" ]; then
  PYTHON=/usr/bin/python3
  [ -x "$BUILD/bench-venv/bin/python" ] && PYTHON="$BUILD/bench-venv/bin/python"
fi
WORK=$(mktemp -d /tmp/yoke-resnet50-bench-XXXXXX)
trap 'rm -rf "$WORK"' EXIT

cat > "$WORK/job.yaml" <<EOF
name: resnet50-throughput
model: {zoo: resnet50}
data:
  train: {format: synthetic, shape: [224, 224, 3], num_classes: 10,
          num_examples: $((BATCH * STEPS)), seed: 1}
training:
  epochs: 1
  batch_size: $BATCH
  seed: 1
  threads: $THREADS
  log_every_steps: 1
  optimizer: {type: sgd, lr: 0.01, momentum: 0.9}
EOF

yoke_once() {  # -> JSON: samples/s after WARMUP steps, loss, parameters, RSS
  "$BUILD/bin/yoke" train "$WORK/job.yaml" --output events 2>"$WORK/yoke.log" >"$WORK/yoke.events"
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

torch_once() {
  OMP_NUM_THREADS="$THREADS" "$PYTHON" "$ROOT/bench/resnet50_torch.py" --batch "$BATCH" \
    --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" 2>"$WORK/torch.log"
}

echo "ResNet-50 224x224, batch $BATCH, $STEPS steps ($WARMUP untimed), $THREADS threads, $RUNS runs each"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
ys=(); ts=()
for i in $(seq "$RUNS"); do
  y=$(yoke_once); t=$(torch_once)
  ys+=("$y"); ts+=("$t")
  python3 - "$y" "$t" "$i" "$STEPS" <<'PY'
import json, math, sys
y, t, i, steps = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
for name, r in (("yoke", y), ("torch", t)):
    assert math.isfinite(r["train_loss"]), f"{name}: loss {r['train_loss']}"
    assert r["num_parameters"] == 23528522, f"{name}: {r['num_parameters']} parameters"
assert y["steps"] == steps, f"yoke ran {y['steps']} steps of {steps}"
print(f"run {i}: yoke {y['samples_per_second']:.2f} samples/s ({y['peak_memory_bytes']/2**20:.0f} MiB), "
      f"{t['framework']} {t['samples_per_second']:.2f} samples/s ({t['peak_memory_bytes']/2**20:.0f} MiB)")
PY
done
python3 - "$(printf '%s\n' "${ys[@]}")" "$(printf '%s\n' "${ts[@]}")" <<'PY'
import json, statistics, sys
ys = [json.loads(l) for l in sys.argv[1].splitlines()]
ts = [json.loads(l) for l in sys.argv[2].splitlines()]
my = statistics.median(r["samples_per_second"] for r in ys)
mt = statistics.median(r["samples_per_second"] for r in ts)
ry = statistics.median(r["peak_memory_bytes"] for r in ys) / 2**20
rt = statistics.median(r["peak_memory_bytes"] for r in ts) / 2**20
print(f"median samples/s: yoke {my:.2f}, {ts[0]['framework']} {mt:.2f}: yoke/torch {my/mt:.2f}x")
print(f"median peak RSS: yoke {ry:.0f} MiB, torch {rt:.0f} MiB")
PY
