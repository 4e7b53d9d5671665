#!/usr/bin/env bash
# What watching a job costs it: the same 2-worker data-parallel MLP job with
# everything on (the coordinator's /metrics and dashboard, both workers'
# /metrics, TensorBoard event files, and a poller that scrapes all three
# /metrics every second and reads the dashboard's job API every 2 s, like
# Prometheus and an open browser tab, from one Python process on the same
# machine) and with everything off
# (--http-listen off, no --metrics-listen, logging.tensorboard_dir: off),
# alternating REPEAT times. Prints each run's samples/s (the trainer's own
# measure of its step loop) and the medians' ratio, and the CPU time the
# daemons (coordinator and workers, from /proc/PID/stat) and the trainers
# (the workers' waited-for children) used: on a 2-core machine shared with
# other work, wall time varies by tens of percent between runs, while CPU
# time is steadier and shows what serving the metrics costs directly.
# bench/observability_cost_bench times each piece alone.
#
#   bench/observability_overhead.sh [BUILD]   (REPEAT=5 STEPS=3000 LOG_EVERY=100 by default)
set -euo pipefail
BUILD=${1:-build}
REPEAT=${REPEAT:-5}
STEPS=${STEPS:-3000}
LOG_EVERY=${LOG_EVERY:-100}
BIN="$BUILD/bin"
CFG=configs/fashion_mnist_mlp.yaml

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_for() {  # FILE TEXT: until FILE contains TEXT (20 s)
  for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "timed out waiting for '$2' in $1" >&2; tail -5 "$1" >&2; return 1
}

run_once() {  # $1: on | off
  local dir; dir=$(mktemp -d /tmp/yoke-obs-bench-XXXXXX)
  local port; port=$(free_port)
  local http=off tb=off
  if [ "$1" = on ]; then http=127.0.0.1:$(free_port); tb="$dir/tb"; fi
  local pids=()
  "$BIN/yoke-coordinator" --insecure --listen "127.0.0.1:$port" --http-listen "$http" \
      --store "$dir/c.db" >"$dir/coordinator.log" 2>&1 &
  pids+=($!)
  wait_for "$dir/coordinator.log" "listening on"
  local metrics=()
  for w in 1 2; do
    local extra=()
    [ "$1" = on ] && extra=(--metrics-listen 127.0.0.1:0)
    "$BIN/yoke-worker" --insecure --coordinator "127.0.0.1:$port" --cpu-replicas 1 \
        --work-dir "$dir/w$w" "${extra[@]}" >"$dir/worker$w.log" 2>&1 &
    pids+=($!)
    wait_for "$dir/worker$w.log" "registered with"
    [ "$1" = on ] && metrics+=("$(grep -o 'metrics on [^ ]*' "$dir/worker$w.log" | cut -d' ' -f3)")
  done
  yoke() { "$BIN/yoke" "$@" --insecure --coordinator "127.0.0.1:$port"; }
  local id
  id=$(yoke submit "$CFG" --set distribution.workers=2 --set training.epochs=10 \
        --set training.max_steps="$STEPS" --set training.threads=1 \
        --set training.log_every_steps="$LOG_EVERY" \
        --set logging.tensorboard_dir="$tb" --set checkpoint.dir="$dir/ckpt")
  local poller=
  if [ "$1" = on ]; then
    # One Python process (as a Prometheus server and a browser tab would be
    # one process each, usually on other machines), not a curl per request.
    python3 - "$http" "$id" "${metrics[@]}" <<'PY' &
import sys, time, urllib.request
http, job, workers = sys.argv[1], sys.argv[2], sys.argv[3:]
i = 0
while True:
    for url in [f"http://{http}/metrics"] + [f"http://{w}/metrics" for w in workers] + (
            [f"http://{http}/api/job/{job}"] if i % 2 == 0 else []):
        try:
            urllib.request.urlopen(url, timeout=5).read()
        except Exception:
            pass
    i += 1
    time.sleep(1)
PY
    poller=$!
  fi
  yoke watch "$id" >/dev/null || true
  yoke get "$id" --output json >"$dir/job.json"
  [ -n "$poller" ] && kill "$poller" 2>/dev/null
  # utime+stime of each daemon, and cutime+cstime (its trainers, all
  # exited and waited for by now), in seconds.
  python3 - "${pids[@]}" >"$dir/cpu" <<'PY'
import os, sys
tick = os.sysconf("SC_CLK_TCK")
own = kids = 0
for pid in sys.argv[1:]:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    own += (int(f[11]) + int(f[12])) / tick
    kids += (int(f[13]) + int(f[14])) / tick
print(own, kids)
PY
  kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null || true
  python3 - "$dir/job.json" "$1" "$tb" <<'PY'
import json, os, sys
j = json.load(open(sys.argv[1]))
assert j["state"] == "JOB_SUCCEEDED", j.get("reason")
r = j["result"]
assert r["steps"] > 0
if sys.argv[2] == "on":  # the event file was written
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(sys.argv[3])), "no event file"
cpu = open(os.path.join(os.path.dirname(sys.argv[1]), "cpu")).read().split()
print(r["samples_per_second"], cpu[0], cpu[1], r["steps"], r["train_seconds"])
PY
  [ -n "${poller:-}" ] && wait "$poller" 2>/dev/null || true
  rm -rf "$dir"
}

on=(); off=()
for i in $(seq "$REPEAT"); do
  a=$(run_once on); b=$(run_once off)
  on+=("$a"); off+=("$b")
  read -r sa da ta _ _ <<<"$a"; read -r sb db tb _ _ <<<"$b"
  printf "run %d: all on %.0f samples/s (CPU: daemons %.2f s, trainers %.1f s), all off %.0f samples/s (daemons %.2f s, trainers %.1f s)\n" \
    "$i" "$sa" "$da" "$ta" "$sb" "$db" "$tb"
done
TMP_STEP=$(mktemp)
(python3 - "$(printf '%s\n' "${on[@]}")" "$(printf '%s\n' "${off[@]}")" <<'PY'
import statistics, sys
runs_on = [[float(v) for v in l.split()] for l in sys.argv[1].splitlines()]
runs_off = [[float(v) for v in l.split()] for l in sys.argv[2].splitlines()]
a = [r[0] for r in runs_on]
b = [r[0] for r in runs_off]
ma, mb = statistics.median(a), statistics.median(b)
# Each "on" run next to the "off" run after it: the machine's drift cancels
# in the pair, so the median of the pairs' ratios is the steadier figure.
pairs = statistics.median(x / y for x, y in zip(a, b))
spread = (max(b) - min(b)) / mb
print(f"median samples/s: all on {ma:.0f}, all off {mb:.0f}; on/off {ma/mb:.3f} "
      f"(step time {100*(mb/ma-1):+.1f}% with metrics, event files and dashboard)")
print(f"median of the {len(a)} paired ratios on/off: {pairs:.3f} (step time "
      f"{100*(1/pairs-1):+.1f}%); the off runs alone spread {100*spread:.0f}% of their median")
# CPU: the daemons' extra seconds per second of training (what serving the
# metrics, the dashboard and the scrapes cost, on top of the control plane),
# and the trainers' CPU per step (event files and step accounting included).
d_on = statistics.median(r[1] / r[4] for r in runs_on)
d_off = statistics.median(r[1] / r[4] for r in runs_off)
t_on = statistics.median(r[2] / r[3] for r in runs_on)
t_off = statistics.median(r[2] / r[3] for r in runs_off)
print(f"daemons' CPU per second of training: all on {1000*d_on:.1f} ms, all off {1000*d_off:.1f} ms: "
      f"{1000*(d_on-d_off):+.1f} ms/s = {100*(d_on-d_off)/2:+.2f}% of the job's 2 cores (2 ranks x 1 thread)")
t_pairs = statistics.median((x[2] / x[3]) / (y[2] / y[3]) for x, y in zip(runs_on, runs_off))
t_spread = (max(r[2] / r[3] for r in runs_off) - min(r[2] / r[3] for r in runs_off)) / t_off
print(f"trainers' CPU per step (both ranks): all on {1000*t_on:.2f} ms, all off {1000*t_off:.2f} ms "
      f"({100*(t_on/t_off-1):+.1f}%); median of the paired ratios {100*(t_pairs-1):+.1f}%; "
      f"the off runs alone spread {100*t_spread:.0f}%")
step_ms = 1000 * statistics.median(r[4] / r[3] for r in runs_off)
open("/dev/fd/3", "w").write(f"{step_ms:.3f}\n")
PY
) 3>"$TMP_STEP"
step_ms=$(cat "$TMP_STEP"); rm -f "$TMP_STEP"
# Each piece alone, for a job with this run's step time and log interval,
# scraped every second by the worker it runs on (4 ranks, as a 2x2 job).
echo "each piece timed alone (bench/observability_cost_bench, step ${step_ms} ms):"
"$BIN/observability_cost_bench" --step_ms "$step_ms" --log_every "$LOG_EVERY" --ranks 4 --scrape_seconds 1
