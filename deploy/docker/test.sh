#!/usr/bin/env bash
# make docker-test: builds deploy/docker/Dockerfile for real, with no
# registry, and trains on containers of the image.
#
#  1. dockerd: the running one if `docker info` reaches it, else one of our
#     own (data root in the cache, so images and layers survive the run;
#     socket, pidfile and exec root in /run/yoke-docker-test), stopped at the
#     end.
#  2. The base image: a `debootstrap --variant=minbase bookworm` tree,
#     imported with `docker import` as yoke-base:bookworm. Both stages of the
#     Dockerfile start from it (BUILD_IMAGE, RUNTIME_IMAGE). The tree and the
#     image are cached, so only the first run pays for them.
#  3. `docker build` from the files git knows (tracked and untracked, not
#     ignored: build/ stays out of the context), tagged yoke:docker-test (and
#     its build stage yoke:docker-test-build, the next run's cache). Its size
#     is printed.
#  4. On a user-defined network: a coordinator (the image's default command)
#     and two workers, each with a read-only root (its work_dir on the
#     image's /var/lib/yoke volume), a shared checkpoint volume
#     (as the ReadWriteMany claim in deploy/k8s) and its own container IP in
#     YOKE_ADVERTISE_ADDRESS (as the pod IP in deploy/k8s/base/worker.yaml).
#     A 1-worker job, then a 2-worker job, each must reach SUCCEEDED.
#
# Everything it starts (containers, network, volumes, its own dockerd) is
# removed when it exits, whatever happened. Exit status 0: both jobs
# succeeded. Each job's output and log stay in $YOKE_DOCKER_CACHE/logs until
# the next run, with every container's full log when a job failed.
#
# An image whose worker does not know its advertised address (before issue
# 16, part 1: `yoke-worker --advertise-address`) has trainers listening on
# 127.0.0.1, so a job's ranks cannot reach each other across containers;
# then the 2-worker job is skipped, loudly, and only the 1-worker job must
# succeed.
#
# Environment: YOKE_DOCKER_CACHE (default /var/cache/yoke-docker-test),
# DOCKER (the CLI, default Debian's /usr/bin/docker), YOKE_DOCKER_TEST_RUNS
# (how many times to run each job, default 1), YOKE_DOCKER_BINARIES (a
# directory holding yoke, yoke-coordinator, yoke-worker and yoke-trainer built
# on this Debian 12 machine without CUDA: the Dockerfile's build stage is
# replaced by those binaries, and every other line of it is built as written.
# CI sets it to `make test`'s build/bin, which saves compiling the daemons a
# second time; unset, the image is built from source as a user builds it).
set -euo pipefail
# One compound command, read whole before it runs: editing this file during
# a run cannot change the run.
{
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${YOKE_DOCKER_CACHE:-/var/cache/yoke-docker-test}
RUN_DIR=/run/yoke-docker-test
DOCKER=${DOCKER:-/usr/bin/docker}
command -v "$DOCKER" >/dev/null || DOCKER=docker
BASE=yoke-base:bookworm
IMAGE=yoke:docker-test
NAME=yoke-dt-$$
# The job: an MLP on synthetic 28x28 images, no dataset files needed.
JOB_TIMEOUT_S=600

log() { echo "docker-test: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (dockerd, debootstrap)"
mkdir -p "$CACHE" "$RUN_DIR"
TMP=$(mktemp -d /tmp/yoke-docker-test-XXXXXX)
LOGS=$CACHE/logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
OWN_DOCKERD=0

cleanup() {
  local rc=$?
  set +e
  if [ -n "${DOCKER_READY:-}" ]; then
    for c in coordinator w1 w2 cli; do "$DOCKER" rm -f -v "$NAME-$c" >/dev/null 2>&1; done
    "$DOCKER" network rm "$NAME" >/dev/null 2>&1
    "$DOCKER" volume rm "$NAME-checkpoints" >/dev/null 2>&1
    # Untagged leftovers of earlier builds (only in our own daemon: a shared
    # one's images are not ours to prune). The latest build stage is tagged
    # (yoke:docker-test-build), so the cache for the next run stays.
    [ "$OWN_DOCKERD" = 1 ] && "$DOCKER" image prune -f >/dev/null 2>&1
  fi
  if [ "$OWN_DOCKERD" = 1 ]; then
    local pid
    pid=$(cat "$RUN_DIR/dockerd.pid" 2>/dev/null)
    if [ -n "$pid" ]; then
      kill "$pid" 2>/dev/null
      for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    fi
  fi
  rm -rf "$TMP"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 1. dockerd.
if ! "$DOCKER" info >/dev/null 2>&1; then
  export DOCKER_HOST=unix://$RUN_DIR/docker.sock
  if ! "$DOCKER" info >/dev/null 2>&1; then
    log "starting dockerd (data root $CACHE/docker, log $CACHE/dockerd.log)"
    # Niced: the build compiles on cores others share.
    nice -n 10 dockerd --data-root "$CACHE/docker" --exec-root "$RUN_DIR/exec" \
      --pidfile "$RUN_DIR/dockerd.pid" --host "$DOCKER_HOST" \
      >"$CACHE/dockerd.log" 2>&1 &
    OWN_DOCKERD=1
    for _ in $(seq 60); do "$DOCKER" info >/dev/null 2>&1 && break; sleep 0.5; done
    "$DOCKER" info >/dev/null 2>&1 || fail "dockerd did not start: $(tail -5 "$CACHE/dockerd.log")"
  fi
fi
DOCKER_READY=1

# 2. The base image.
if ! "$DOCKER" image inspect "$BASE" >/dev/null 2>&1; then
  if [ ! -f "$CACHE/rootfs/etc/debian_version" ]; then
    log "debootstrap --variant=minbase bookworm (once; cached in $CACHE/rootfs)"
    rm -rf "$CACHE/rootfs.tmp"
    debootstrap --variant=minbase bookworm "$CACHE/rootfs.tmp" >"$CACHE/debootstrap.log" 2>&1 ||
      fail "debootstrap failed: $(tail -5 "$CACHE/debootstrap.log")"
    rm -f "$CACHE"/rootfs.tmp/var/cache/apt/archives/*.deb
    mv "$CACHE/rootfs.tmp" "$CACHE/rootfs"
  fi
  log "docker import $CACHE/rootfs as $BASE"
  tar -C "$CACHE/rootfs" -c . | "$DOCKER" import - "$BASE" >/dev/null
fi

# 3. The image, from the files git knows.
log "docker build -f deploy/docker/Dockerfile (log $CACHE/build.log)"
(cd "$SRC" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar -c --null -T -) >"$TMP/context.tar"
start=$(date +%s)
DOCKERFILE=deploy/docker/Dockerfile
BINARIES=(yoke yoke-coordinator yoke-worker yoke-trainer yoke-model)
if [ -n "${YOKE_DOCKER_BINARIES:-}" ]; then
  # The build stage becomes a copy of the prebuilt binaries (stripped, as the
  # Dockerfile strips its own), and COPY --from=build reads them from there.
  mkdir -p "$TMP/prebuilt/prebuilt"
  for b in "${BINARIES[@]}"; do
    [ -x "$YOKE_DOCKER_BINARIES/$b" ] || fail "YOKE_DOCKER_BINARIES: no $YOKE_DOCKER_BINARIES/$b"
    if ldd "$YOKE_DOCKER_BINARIES/$b" | grep -q -E 'libcuda|libnccl|libcudnn|libcublas'; then
      fail "YOKE_DOCKER_BINARIES: $b links CUDA libraries; the image is a CPU build"
    fi
    strip -o "$TMP/prebuilt/prebuilt/$b" "$YOKE_DOCKER_BINARIES/$b"
  done
  tar -C "$TMP/prebuilt" -rf "$TMP/context.tar" prebuilt
  DOCKERFILE=deploy/docker/Dockerfile.prebuilt
  awk '/^FROM .* AS build$/ { print "FROM ${BUILD_IMAGE} AS build"; print "COPY prebuilt /build/bin";
                              skip = 1; next }
       /^FROM / { skip = 0 }
       !skip' "$SRC/deploy/docker/Dockerfile" >"$TMP/prebuilt/Dockerfile.prebuilt"
  grep -q '^COPY prebuilt /build/bin$' "$TMP/prebuilt/Dockerfile.prebuilt" ||
    fail "deploy/docker/Dockerfile has no 'FROM ... AS build' stage to replace"
  tar -C "$TMP/prebuilt" --transform 's,^,deploy/docker/,' -rf "$TMP/context.tar" \
    Dockerfile.prebuilt
  log "the build stage replaced by the binaries in $YOKE_DOCKER_BINARIES"
fi
build() {  # build ARGS...: docker build of the context, appending to build.log
  DOCKER_BUILDKIT=0 "$DOCKER" build -f "$DOCKERFILE" "$@" \
    --build-arg BUILD_IMAGE="$BASE" --build-arg RUNTIME_IMAGE="$BASE" \
    - <"$TMP/context.tar" >>"$CACHE/build.log" 2>&1 ||
    fail "docker build failed: $(tail -20 "$CACHE/build.log")"
}
: >"$CACHE/build.log"
# The build stage tagged too: the layer cache of the next run (an untagged
# stage would be pruned as dangling at the end).
[ -n "${YOKE_DOCKER_BINARIES:-}" ] || build --target build -t "$IMAGE-build"
build -t "$IMAGE"
size=$("$DOCKER" image inspect -f '{{.Size}}' "$IMAGE")
log "built $IMAGE in $(($(date +%s) - start)) s: $((size / 1000000)) MB ($size bytes)"

# 4. The cluster's credentials, made by the image's own `yoke certs` as an
# operator would: a CA, the coordinator's certificate for the name the others
# dial, one per worker and the admin's for the CLI.
mkdir -p "$TMP/tls" && chmod 777 "$TMP/tls"
certs() { "$DOCKER" run --rm -v "$TMP/tls:/tls" "$IMAGE" yoke certs "$@" >/dev/null ||
  fail "yoke certs $* failed"; }
certs init /tls/ca
certs issue --ca /tls/ca --role coordinator --name coordinator --host coordinator --out /tls/coordinator
certs issue --ca /tls/ca --role admin --name admin --out /tls/admin
for w in w-1 w-2; do certs issue --ca /tls/ca --role worker --name "$w" --out "/tls/$w"; done

# 5. A coordinator and two workers on a network of their own.
"$DOCKER" network create "$NAME" >/dev/null
"$DOCKER" volume create "$NAME-checkpoints" >/dev/null
"$DOCKER" run -d --name "$NAME-coordinator" --network "$NAME" --network-alias coordinator \
  --read-only --tmpfs /tmp -v "$TMP/tls/coordinator:/etc/yoke-tls:ro" "$IMAGE" >/dev/null
# The container's own IP, as the downward API's status.podIP in Kubernetes.
for w in w1 w2; do
  "$DOCKER" run -d --name "$NAME-$w" --network "$NAME" --read-only --tmpfs /tmp \
    -v "$NAME-checkpoints:/checkpoints" -v "$TMP/tls/w-${w#w}:/etc/yoke-tls:ro" "$IMAGE" sh -c \
    'export YOKE_ADVERTISE_ADDRESS=$(hostname -i); exec yoke-worker --coordinator coordinator:7070 \
       --work-dir /var/lib/yoke/work --no-cuda --tls-dir /etc/yoke-tls' >/dev/null
done

# The CLI runs in a container on the same network too.
cat >"$TMP/job.yaml" <<'EOF'
name: docker-test-mlp
model: {zoo: mlp, hidden: [32]}
data:
  train: {format: synthetic, shape: [28, 28, 1], num_classes: 10, num_examples: 512, seed: 1}
training:
  epochs: 1
  batch_size: 64
  seed: 1
  optimizer: {type: sgd, lr: 0.05}
checkpoint: {dir: /checkpoints/docker-test}
EOF
# The image's user reads it.
chmod 755 "$TMP"
chmod 644 "$TMP/job.yaml"
yoke() {  # yoke ARGS...: the CLI in a container (named, so cleanup stops it)
  "$DOCKER" run --rm --name "$NAME-cli" --network "$NAME" -v "$TMP:/job:ro" "$IMAGE" \
    yoke "$@" --coordinator coordinator:7070 --tls-dir /job/tls/admin
}

# Each job's output (`yoke submit --watch`, `yoke logs`) and, when one
# fails, every container's full log: in $LOGS, kept until the next run.
logs() {
  for c in coordinator w1 w2; do
    "$DOCKER" logs -t "$NAME-$c" >"$LOGS/$c.log" 2>&1
    echo "==== $c (last 30 lines; all of it in $LOGS/$c.log)" >&2
    tail -n 30 "$LOGS/$c.log" >&2
  done
}

log "waiting for both workers to register"
for _ in $(seq 60); do
  out=$(yoke workers --output json 2>/dev/null || true)
  if grep -q '"w-1"' <<<"$out" && grep -q '"w-2"' <<<"$out"; then break; fi
  sleep 1
done
grep -q '"w-2"' <<<"$out" || { logs; fail "workers did not register: $out"; }

advertise=0
help=$("$DOCKER" run --rm --name "$NAME-cli" "$IMAGE" yoke-worker --help 2>&1 || true)
if grep -q -- --advertise-address <<<"$help"; then
  advertise=1
  # Each worker registered the IP of its own container.
  for w in w1 w2; do
    ip=$("$DOCKER" inspect -f "{{(index .NetworkSettings.Networks \"$NAME\").IPAddress}}" \
      "$NAME-$w")
    grep -q "\"$ip[\":]" <<<"$out" || fail "$w's address $ip is not in \`yoke workers\`: $out"
  done
fi

run_job() {  # run_job WORKERS RUN
  log "submitting a $1-worker job"
  local start=$SECONDS out="$LOGS/job-$1-$2" rc=0
  timeout "$JOB_TIMEOUT_S" bash -c "$(declare -f yoke); $(declare -p DOCKER NAME TMP IMAGE);
    yoke submit /job/job.yaml --set distribution.workers=$1 \
      --set checkpoint.dir=/checkpoints/w$1-$2 --watch" >"$out.watch" 2>&1 || rc=$?
  # The job's log as the coordinator keeps it (every rank's lines); the
  # watch's first line is "<job id> <state>".
  local id
  id=$(awk 'NR == 1 && /^job-/ {print $1}' "$out.watch")
  [ -z "$id" ] || yoke logs "$id" >"$out.log" 2>&1 || true
  if [ "$rc" != 0 ] || ! grep -q SUCCEEDED "$out.watch"; then
    cat "$out.watch" >&2
    echo "==== yoke logs $id (all of it in $out.log)" >&2
    tail -n 60 "$out.log" >&2
    logs
    fail "the $1-worker job did not succeed (exit status $rc)"
  fi
  log "the $1-worker job SUCCEEDED in $((SECONDS - start)) s"
}

# YOKE_DOCKER_TEST_RUNS: how many times to run each job (to catch a flaky one).
for run in $(seq "${YOKE_DOCKER_TEST_RUNS:-1}"); do
  run_job 1 "$run"
done
if [ "$advertise" = 1 ]; then
  for run in $(seq "${YOKE_DOCKER_TEST_RUNS:-1}"); do
    run_job 2 "$run"
  done
else
  log "SKIP the 2-worker job: this yoke-worker has no --advertise-address (issue 16," \
    "part 1), so its trainers listen on 127.0.0.1 and cannot reach each other across" \
    "containers"
fi
log "PASS"
exit 0
}
