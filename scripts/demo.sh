#!/bin/sh
# make demo: a local cluster (a coordinator and two workers on loopback),
# the Fashion-MNIST CNN submitted to it and watched to the end, then the
# cluster torn down, whatever happened. Once the job has succeeded, its last
# checkpoint is exported to ONNX (`yoke export`) and run by onnxruntime on
# the test set (`yoke predict` preprocesses it), which must reach the test
# accuracy Yoke reported to the fourth digit (scripts/onnx_demo_check.py;
# skipped where the venv lacks onnxruntime). Exits with `yoke watch`'s
# status: 0 when the job succeeded, 1 when the ONNX check fails.
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
CKPT="$STATE_DIR/checkpoints"
"$YOKE" submit configs/fashion_mnist_cnn.yaml --watch --set "checkpoint.dir=$CKPT" "$@"
status=$?
"$YOKE" jobs
[ $status -eq 0 ] || exit $status

"$YOKE" predict "$CKPT" -o "$STATE_DIR/predictions.csv" --inputs "$STATE_DIR/inputs.f32" \
  2>"$STATE_DIR/predict.txt" || { cat "$STATE_DIR/predict.txt" >&2; exit 1; }
cat "$STATE_DIR/predict.txt"
"$YOKE" export "$CKPT" --format onnx -o "$STATE_DIR/model.onnx" || exit 1
accuracy=$(sed -n 's/^yoke predict: the training run reported test accuracy \([0-9.]*\).*/\1/p' \
  "$STATE_DIR/predict.txt")
"${YOKE_VENV:-/opt/yoke/venv}/bin/python3" scripts/onnx_demo_check.py "$STATE_DIR/model.onnx" \
  "$STATE_DIR/inputs.f32" "$STATE_DIR/predictions.csv" "$accuracy"
check=$?
rm -f "$STATE_DIR/inputs.f32"  # 31 MB of preprocessed test images
echo "demo: the model is in $STATE_DIR (checkpoints/, model.onnx)"
case $check in
  0 | 77) exit 0 ;;
  *) exit 1 ;;
esac
