#!/bin/sh
# make demo: a local cluster (a coordinator and two workers on loopback),
# the Fashion-MNIST CNN submitted to it and watched to the end, then the
# cluster torn down, whatever happened. Exits with `yoke watch`'s status:
# 0 when the job succeeded.
#
#   scripts/demo.sh [BUILD_DIR] [extra `yoke submit` args, e.g. --set training.epochs=1]
set -u
BUILD=${1:-build}
[ $# -gt 0 ] && shift
YOKE="$BUILD/bin/yoke"
if [ ! -x "$YOKE" ]; then
  echo "demo: $YOKE not found; run \`make build\` first" >&2
  exit 2
fi

# A state directory of our own, so the demo never touches (or stops) a
# cluster the user started with `yoke up`.
STATE_DIR=$(mktemp -d /tmp/yoke-demo-XXXXXX)
export YOKE_STATE_DIR="$STATE_DIR/state"
CLUSTER_DIR="$STATE_DIR/cluster"

teardown() {
  "$YOKE" down --dir "$CLUSTER_DIR" >/dev/null 2>&1 || true
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$YOKE" up --workers 2 --detach --dir "$CLUSTER_DIR" || exit 1
# Commands below find the coordinator through the state file of `yoke up`.
"$YOKE" workers
"$YOKE" submit configs/fashion_mnist_cnn.yaml --watch "$@"
status=$?
"$YOKE" jobs
exit $status
