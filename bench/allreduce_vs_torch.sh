#!/usr/bin/env bash
# Allreduce: Yoke's Gloo communicator against torch.distributed gloo, 2 ranks
# as 2 processes on loopback, f32, sizes 1 KiB .. 64 MiB (x4), in one run:
#   (1) build/bin/allreduce_bench   (2) bench/allreduce_torch.py
# then a table of median latency, algbw and busbw per size and the
# yoke/torch busbw ratio. Both check their result once before timing.
#
#   bench/allreduce_vs_torch.sh [BUILD_DIR]      (default BUILD_DIR: build)
#
# Environment: RANKS=2, MAX_BYTES=67108864, REPEAT=1 (runs per side,
# alternating; the per-size median is the median over runs of each run's
# median), PYTHON=/usr/bin/python3 (Debian's, with python3-torch),
# BENCH_OUT=FILE (also write the report there). If torch cannot be imported
# the Yoke side still runs and the ratio column says so.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
PYTHON="${PYTHON:-/usr/bin/python3}"
RANKS="${RANKS:-2}"
MAX_BYTES="${MAX_BYTES:-67108864}"
REPEAT="${REPEAT:-1}"
BENCH="$BUILD/bin/allreduce_bench"
if [[ ! -x "$BENCH" ]]; then
  echo "error: $BENCH not built (ninja -C $BUILD allreduce_bench)" >&2
  exit 2
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
have_torch=1
"$PYTHON" -c 'import torch.distributed' 2>/dev/null || have_torch=0

for i in $(seq 1 "$REPEAT"); do
  "$BENCH" --ranks="$RANKS" --max_bytes="$MAX_BYTES" > "$TMP/yoke.$i" || { echo "allreduce_bench failed" >&2; cat "$TMP/yoke.$i" >&2; exit 3; }
  if [[ $have_torch == 1 ]]; then
    "$PYTHON" "$ROOT/bench/allreduce_torch.py" --ranks "$RANKS" --max-bytes "$MAX_BYTES" > "$TMP/torch.$i" || { echo "allreduce_torch.py failed" >&2; exit 3; }
  fi
done

"$PYTHON" - "$TMP" "$REPEAT" "$have_torch" "$RANKS" <<'PY' | tee "${BENCH_OUT:-/dev/null}"
import os, statistics, sys, platform, subprocess
tmp, repeat, have_torch, ranks = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])

def load(side):
    runs = []
    for i in range(1, repeat + 1):
        path = os.path.join(tmp, f"{side}.{i}")
        if not os.path.exists(path):
            return {}
        rows = {}
        for line in open(path):
            if line.startswith("RESULT"):
                _, b, us, alg, bus = line.split()
                rows[int(b)] = float(us)
        runs.append(rows)
    return {b: statistics.median(r[b] for r in runs) for b in runs[0]}

yoke, torch = load("yoke"), (load("torch") if have_torch else {})
load_avg = open("/proc/loadavg").read().split()[:3]
print(f"# allreduce, {ranks} ranks as processes on loopback, f32; {os.cpu_count()} cores; "
      f"load average {' '.join(load_avg)}; median of {repeat} run(s) per side")
if not have_torch:
    print("# torch not importable: Yoke only")
def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
hdr = f"{'size':>8} | {'yoke us':>9} {'algbw':>7} {'busbw':>7} | {'torch us':>9} {'algbw':>7} {'busbw':>7} | {'busbw ratio':>11}"
print(hdr)
print("-" * len(hdr))
f = 2.0 * (ranks - 1) / ranks
for b in sorted(yoke):
    y = yoke[b]; ya = b / y / 1e3
    line = f"{size(b):>8} | {y:9.1f} {ya:7.3f} {ya * f:7.3f} |"
    if b in torch:
        t = torch[b]; ta = b / t / 1e3
        line += f" {t:9.1f} {ta:7.3f} {ta * f:7.3f} | {ya / ta:10.2f}x"
    else:
        line += f" {'-':>9} {'-':>7} {'-':>7} | {'n/a':>11}"
    print(line)
print("# algbw, busbw in GB/s (1e9 B/s); busbw = algbw * 2(n-1)/n; ratio = yoke busbw / torch busbw")
PY
