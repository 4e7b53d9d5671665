#!/usr/bin/env bash
# Installs the Debian packages Yoke builds, tests and demos with.
# Idempotent and quiet: when everything is present it prints nothing.
#   scripts/install-deps.sh          build + test + demo packages
#   scripts/install-deps.sh build    only what compiling the binaries needs
#                                    (the Docker image's build stage)
#   scripts/install-deps.sh bench    also the peers for bench/: Debian's PyTorch
#                                    1.13, and TensorFlow 2.21 (Keras 3) and
#                                    PyTorch 2.x from PyPI in their own virtual
#                                    environment, $BENCH_VENV (build/bench-venv)
#   scripts/install-deps.sh bazel    also Bazel (for the Bazel build)
#   scripts/install-deps.sh docker   also dockerd and debootstrap (make docker-test)
# The tests also need kubectl (Debian's kubernetes-client, unless a kubectl is
# already installed) and the Python packages kubernetes-validate and
# tensorboard, and what builds and checks the Python client (grpcio-tools,
# setuptools, mypy), which pip installs into their own virtual environment,
# $YOKE_VENV (/opt/yoke/venv).
set -euo pipefail

YOKE_VENV=${YOKE_VENV:-/opt/yoke/venv}
# The bench/peers/ frameworks (bench/README.md). Never installed by a plain
# install-deps.sh (make test), only by `bench`. $BENCH_TORCH_PIP_ARGS is
# passed to pip for torch alone, e.g. an --index-url of PyTorch's CPU-only
# wheels where that index is reachable; without it pip takes PyPI's torch.
BENCH_VENV=${BENCH_VENV:-build/bench-venv}
BENCH_TF='tensorflow-cpu==2.21.*'
BENCH_TORCH='torch>=2,<3'
# The schema validator tests/k8s_manifests_test.sh runs (pinned: its bundled
# schemas are what the test validates against).
KUBERNETES_VALIDATE=kubernetes-validate==1.37.0
# The real reader of the event files telemetry/tensorboard.cc writes
# (tests/tensorboard_read_test.py); pinned so the test reads with one known
# parser.
TENSORBOARD=tensorboard==2.21.0
# The Python client package (python/; tests/python_client_*_test.py):
# grpcio-tools generates its stubs when it is built, setuptools builds it,
# mypy and the stub packages check its types. grpcio and protobuf come with
# tensorboard.
GRPCIO_TOOLS=grpcio-tools==1.85.1
SETUPTOOLS=setuptools==84.2.1
MYPY=mypy==1.19.1
TYPES_PROTOBUF=types-protobuf==7.35.1.20260906
TYPES_GRPCIO=types-grpcio==1.85.0.20261028
# The ONNX checker and runtime that tests/onnx_export_test.py checks `yoke export`
# with (docs/export.md); onnx's release is the one third_party/onnx vendors.
ONNX=onnx==1.23.1
ONNXRUNTIME=onnxruntime==1.30.0
# The cuDNN frontend's C++ headers (header-only; the wheel's include/
# folder), which the CUDA backend's convolutions are built with
# (engine/kernels/cuda/conv_graph.cc; engine/CMakeLists.txt finds them in
# this venv). Only CMake builds with YOKE_WITH_CUDA need them: the Docker
# image and Bazel build no CUDA code.
CUDNN_FRONTEND=nvidia-cudnn-frontend==1.32.0

build_pkgs=(
  build-essential cmake ninja-build pkg-config
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev
  libabsl-dev libspdlog-dev libyaml-cpp-dev libsqlite3-dev zlib1g-dev libssl-dev
  libdnnl-dev libgloo-dev
  # The daemons' HTTP port (/metrics, the dashboard) and the dashboard's
  # charts, which the coordinator serves from /usr/share/javascript.
  prometheus-cpp-dev libmicrohttpd-dev libjs-chart.js
  # dnnl-config.cmake calls find_package(OpenCL) (Debian builds oneDNN with
  # its OpenCL GPU runtime); libdnnl-dev only recommends it, and we install
  # without recommends.
  ocl-icd-opencl-dev
  # JPEG and PNG decoders for format: image_folder (data/image_decode.cc).
  libturbojpeg0-dev libspng-dev
)
test_pkgs=(
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist
  python3-venv
  # tests/parity: the step-by-step comparison with PyTorch (about a minute
  # to install). OpenBLAS replaces the reference BLAS that python3-torch
  # pulls in: the CNN parity runs took 4.4 minutes each with it, 1-2 without.
  python3-torch python3-numpy libopenblas0-openmp
  # tests/multihost_e2e_test: firewalled hosts (the data-plane port range).
  iptables
  # tests/observability_e2e_test: a real Prometheus (and promtool) scraping
  # the daemons, and a headless Chromium loading the dashboard.
  prometheus chromium curl
  # tests/format_check.sh: the project's C++ against .clang-format.
  clang-format
)
command -v kubectl >/dev/null || test_pkgs+=(kubernetes-client)

pkgs=("${build_pkgs[@]}" "${test_pkgs[@]}")
want_venv=1
want_bench_venv=0
for extra in "$@"; do
  if [ "$extra" = build ]; then pkgs=("${build_pkgs[@]}"); want_venv=0; fi
done
for extra in "$@"; do
  case "$extra" in
    build) ;;
    bench) pkgs+=(python3-torch libopenblas0-openmp python3-numpy python3-venv python3-dev)
           want_bench_venv=1 ;;
    bazel) pkgs+=(bazel-bootstrap) ;;
    docker) pkgs+=(docker.io debootstrap) ;;
    fuzz) pkgs+=(clang libclang-rt-14-dev) ;;
    *) echo "install-deps: unknown extra '$extra' (known: build, bench, bazel, docker, fuzz)" >&2
       exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

# kubernetes-validate and tensorboard in their own virtual environment
# (Debian's Python is externally managed, so pip may not install into it).
# Only what is missing, or present at another version, is installed.
install_venv() {
  [ "$want_venv" = 1 ] || return 0
  local want=() spec have
  # What the venv holds, as NAME==VERSION lines (one pip call, not one per
  # package); names compared in lower case.
  # No venv yet (a fresh machine) lists nothing; under pipefail the missing
  # interpreter must not end the script.
  have=$({ "$YOKE_VENV/bin/python3" -m pip list --format=freeze --disable-pip-version-check \
             2>/dev/null || true; } | tr 'A-Z_' 'a-z-')
  for spec in "$KUBERNETES_VALIDATE" "$TENSORBOARD" \
              "$GRPCIO_TOOLS" "$SETUPTOOLS" "$MYPY" "$TYPES_PROTOBUF" "$TYPES_GRPCIO" \
              "$ONNX" "$ONNXRUNTIME" "$CUDNN_FRONTEND"; do
    grep -qxF "$(echo "$spec" | tr 'A-Z_' 'a-z-')" <<<"$have" || want+=("$spec")
  done
  [ ${#want[@]} -eq 0 ] && return 0
  echo "install-deps: installing ${want[*]} into $YOKE_VENV" >&2
  [ -x "$YOKE_VENV/bin/python3" ] || $SUDO /usr/bin/python3 -m venv "$YOKE_VENV"
  $SUDO "$YOKE_VENV/bin/python3" -m pip install -q --disable-pip-version-check \
    "${want[@]}" >/dev/null
}

# TensorFlow and PyTorch 2 for bench/peers/, when missing (a few minutes and
# about 5 GiB: PyPI's torch wheel brings its CUDA libraries along).
install_bench_venv() {
  [ "$want_bench_venv" = 1 ] || return 0
  local py="$BENCH_VENV/bin/python3"
  if [ -x "$py" ] && "$py" - <<'PY' 2>/dev/null
import importlib.metadata as m
assert m.version("tensorflow-cpu").startswith("2.21.")
assert m.version("torch").split(".")[0] == "2"
PY
  then return 0; fi
  echo "install-deps: installing $BENCH_TF and $BENCH_TORCH into $BENCH_VENV" >&2
  [ -x "$py" ] || /usr/bin/python3 -m venv "$BENCH_VENV"
  # shellcheck disable=SC2086  # BENCH_TORCH_PIP_ARGS is a list of pip options
  "$py" -m pip install -q --disable-pip-version-check ${BENCH_TORCH_PIP_ARGS:-} "$BENCH_TORCH" numpy >/dev/null
  "$py" -m pip install -q --disable-pip-version-check "$BENCH_TF" >/dev/null
}

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  install_venv
  install_bench_venv
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
if [ "$(id -u)" != 0 ] && [ -z "$SUDO" ]; then
  echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_venv
install_bench_venv
echo "install-deps: done" >&2
