#!/usr/bin/env bash
# Installs the Debian packages Yoke builds, tests and demos with.
# Idempotent and quiet: when everything is present it prints nothing.
#   scripts/install-deps.sh          build + test + demo packages
#   scripts/install-deps.sh bench    also the PyTorch peer for bench/
#   scripts/install-deps.sh bazel    also Bazel (for the Bazel build)
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build pkg-config
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev
  libabsl-dev libspdlog-dev libyaml-cpp-dev libsqlite3-dev zlib1g-dev libssl-dev
  libdnnl-dev libgloo-dev
  # dnnl-config.cmake calls find_package(OpenCL) (Debian builds oneDNN with
  # its OpenCL GPU runtime); libdnnl-dev only recommends it, and we install
  # without recommends.
  ocl-icd-opencl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist
)
for extra in "$@"; do
  case "$extra" in
    bench) pkgs+=(python3-torch libopenblas0-openmp python3-numpy) ;;
    bazel) pkgs+=(bazel-bootstrap) ;;
    *) echo "install-deps: unknown extra '$extra' (known: bench, bazel)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done" >&2
