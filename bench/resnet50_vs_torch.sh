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
# The peers, each an interpreter with torch and a layout (nchw, or nhwc:
# channels-last, oneDNN's preferred one on the CPU): PEERS, one "PYTHON
# LAYOUT" a line; by default Debian's python3-torch (PyTorch 1.13) in NCHW,
# and, where the bench virtual environment exists (PyTorch 2.x, from `make
# bench`; $BUILD/bench-venv or $ROOT/build/bench-venv), PyTorch 2 in NCHW and
# in NHWC. Every run times Yoke and then each peer; the summary gives each
# one's median, Yoke's ratio to each, and the paired ratio to the fastest
# peer (the best peer by median).
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
if [ -z "${PEERS:-}" ]; then
  PEERS="/usr/bin/python3 nchw"
  for venv in "$BUILD/bench-venv" "$ROOT/build/bench-venv"; do
    if [ -x "$venv/bin/python" ]; then
      PEERS+=$'\n'"$venv/bin/python nchw"$'\n'"$venv/bin/python nhwc"
      break
    fi
  done
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

torch_once() {  # PYTHON LAYOUT -> JSON
  OMP_NUM_THREADS="$THREADS" "$1" "$ROOT/bench/resnet50_torch.py" --batch "$BATCH" \
    --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" --layout "$2" 2>"$WORK/torch.log"
}

echo "ResNet-50 224x224, batch $BATCH, $STEPS steps ($WARMUP untimed), $THREADS threads, $RUNS runs each"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
: >"$WORK/runs.jsonl"
for i in $(seq "$RUNS"); do
  y=$(yoke_once)
  echo "{\"run\": $i, \"who\": \"yoke\", \"r\": $y}" >>"$WORK/runs.jsonl"
  while read -r py layout; do
    [ -n "$py" ] || continue
    t=$(torch_once "$py" "$layout")
    echo "{\"run\": $i, \"who\": \"peer\", \"r\": $t}" >>"$WORK/runs.jsonl"
  done <<<"$PEERS"
  python3 - "$WORK/runs.jsonl" "$i" "$STEPS" <<'PY'
import json, math, sys
i, steps = int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["run"] == i]
parts = []
for row in rows:
    r = row["r"]
    name = "yoke" if row["who"] == "yoke" else r["framework"]
    assert math.isfinite(r["train_loss"]), f"{name}: loss {r['train_loss']}"
    assert r["num_parameters"] == 23528522, f"{name}: {r['num_parameters']} parameters"
    if row["who"] == "yoke":
        assert r["steps"] == steps, f"yoke ran {r['steps']} steps of {steps}"
    parts.append(f"{name} {r['samples_per_second']:.2f} samples/s ({r['peak_memory_bytes']/2**20:.0f} MiB)")
print(f"run {i}: " + ", ".join(parts))
PY
done
python3 - "$WORK/runs.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def name(row):
    return "yoke" if row["who"] == "yoke" else row["r"]["framework"]
names = list(dict.fromkeys(name(r) for r in rows))
by = {n: [r["r"] for r in rows if name(r) == n] for n in names}
runs = sorted({r["run"] for r in rows})
med = {n: statistics.median(x["samples_per_second"] for x in by[n]) for n in names}
rss = {n: statistics.median(x["peak_memory_bytes"] for x in by[n]) / 2**20 for n in names}
for n in names:
    ratio = "" if n == "yoke" else f"; yoke/this {med['yoke'] / med[n]:.2f}x speed, {rss['yoke'] / rss[n]:.2f}x memory"
    print(f"median {n}: {med[n]:.2f} samples/s, peak RSS {rss[n]:.0f} MiB{ratio}")
peers = [n for n in names if n != "yoke"]
best = max(peers, key=lambda n: med[n])
paired = [by["yoke"][k]["samples_per_second"] / by[best][k]["samples_per_second"] for k in range(len(runs))]
print(f"best peer: {best}; yoke/best paired ratios {', '.join(f'{p:.2f}' for p in paired)}, "
      f"median {statistics.median(paired):.2f}x")
PY
