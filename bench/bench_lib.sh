# Shared by the bench/*.sh scripts (sourced): run a command while measuring
# how much of the machine other processes used meanwhile.
# Needs $WORK (a scratch folder) and $NPROC set by the caller.

busy_jiffies() {  # non-idle CPU time of the whole machine, in USER_HZ ticks
  awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat
}
# CPU seconds used by this shell's finished children, into the variable $1.
# `times` must run in this shell itself: in a $(...) subshell it would report
# the subshell's children, not ours.
children_cpu() {
  times > "$WORK/times"
  printf -v "$1" '%s' "$(awk 'NR == 2 {
    s = 0
    for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); s += a[1] * 60 + a[2] }
    printf "%.3f", s }' "$WORK/times")"
}

# run_one NAME CMD...: runs CMD, keeps its last stdout line as NAME.json and
# its stderr as NAME.log, and writes NAME.meta with the run's wall time, its
# exit status and how much of the machine other processes used meanwhile.
run_one() {
  local name="$1"; shift
  local b0 c0 t0 b1 c1 t1 rc
  b0=$(busy_jiffies); children_cpu c0; t0=$(date +%s.%N)
  "$@" > "$WORK/$name.out" 2> "$WORK/$name.log"
  rc=$?
  b1=$(busy_jiffies); children_cpu c1; t1=$(date +%s.%N)
  tail -n 1 "$WORK/$name.out" > "$WORK/$name.json"
  awk -v b0="$b0" -v b1="$b1" -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" \
      -v n="$NPROC" -v hz="$(getconf CLK_TCK)" -v rc="$rc" 'BEGIN {
    wall = t1 - t0; other = (b1 - b0) / hz - (c1 - c0); if (other < 0) other = 0
    frac = wall > 0 ? other / (wall * n) : 0; if (frac > 1) frac = 1
    printf "{\"rc\": %d, \"wall\": %.3f, \"other_cpu_frac\": %.4f}\n", rc, wall, frac
  }' > "$WORK/$name.meta"
  if [ "$rc" != 0 ]; then
    echo "  -> exit status $rc; last lines of its log:" >&2
    tail -n 5 "$WORK/$name.log" | sed 's/^/     /' >&2
  fi
}
