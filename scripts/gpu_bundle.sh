#!/usr/bin/env bash
# Packs what `make gpu-check` runs on a lent GPU machine into one tarball:
# the CUDA test binaries of a build tree (the ctest tests labelled `gpu`)
# and every shared library they load that such a machine lacks.
#
#   scripts/gpu_bundle.sh BUILD_DIR OUT.tar.gz
#
# The GPU machine's image is not Debian 12: it has CUDA (the toolkit, cuDNN,
# cuBLAS, NCCL), a C and C++ runtime and Python, but not Debian's Abseil,
# protobuf, spdlog, fmt or oneDNN. So every library a binary loads goes into
# lib/ except the C runtime (glibc's libraries and the dynamic loader), the
# C++ runtime (libstdc++, libgcc_s: a newer one there runs our binaries) and
# NVIDIA's libraries (the machine's own must match its driver).
#
# The tarball holds bin/ (the test binaries), tools/ (yoke-trainer-cuda, which
# stage 4 trains a job with on the GPU and on the CPU, and the CLI, daemons
# and trainer that stage 6 runs a cluster with), lib/ and MANIFEST
# (each binary, each library and where it came from). It fails when a library cannot be found here, and when
# the tarball passes the size limit (YOKE_GPU_BUNDLE_MAX_BYTES, default
# 48 MiB: the device tool carries 64 MiB in all, the repository included).
set -euo pipefail

build=${1:?usage: gpu_bundle.sh BUILD_DIR OUT.tar.gz}
out=${2:?usage: gpu_bundle.sh BUILD_DIR OUT.tar.gz}
max_bytes=${YOKE_GPU_BUNDLE_MAX_BYTES:-$((48 << 20))}

# The gpu-labelled tests, as ctest lists them ("  Test #12: engine_x_test").
mapfile -t tests < <(cd "$build" && ctest -N -L '^gpu$' | sed -n 's/^ *Test *#[0-9]*: *//p')
if [ ${#tests[@]} -eq 0 ]; then
  echo "gpu_bundle: $build has no tests labelled gpu (configured with YOKE_WITH_CUDA=ON?)" >&2
  exit 1
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
: >"$stage/MANIFEST"

# True for the libraries the GPU machine brings itself.
provided() {
  case "$1" in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) return 0 ;;
    libstdc++.so.* | libgcc_s.so.*) return 0 ;;
    libcuda.so.* | libcudart.so.* | libcublas*.so.* | libcudnn*.so.* | libnccl.so.*) return 0 ;;
    libnvrtc*.so.* | libnvJitLink.so.* | libcufft*.so.* | libcurand.so.* | libnvidia-*) return 0 ;;
  esac
  return 1
}

# Copies binary $1 into $stage/$2/ with every library it loads that the GPU
# machine lacks.
pack() {
  local bin=$1 dir=$2 t
  t=$(basename "$bin")
  mkdir -p "$stage/$dir"
  cp "$bin" "$stage/$dir/"
  echo "$dir $t" >>"$stage/MANIFEST"
  # ldd lists the whole closure; "not found" fails the bundle, except for a
  # library the GPU machine provides (libcuda.so.1 exists only with a driver).
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if provided "$name"; then continue; fi
    if [ "$path" = "not" ]; then
      echo "gpu_bundle: $t needs $name, which this machine does not have" >&2
      exit 1
    fi
    if [ ! -e "$stage/lib/$name" ]; then
      cp -L "$path" "$stage/lib/$name"
      echo "lib $name $path" >>"$stage/MANIFEST"
    fi
  done < <(ldd "$bin")
}

for t in "${tests[@]}"; do
  bin="$build/bin/$t"
  if [ ! -x "$bin" ]; then
    echo "gpu_bundle: $bin is not built (ninja -C $build $t)" >&2
    exit 1
  fi
  pack "$bin" bin
done
for t in yoke-trainer-cuda yoke-trainer yoke-worker yoke-coordinator yoke; do
  if [ ! -x "$build/bin/$t" ]; then
    echo "gpu_bundle: $build/bin/$t is not built (ninja -C $build $t)" >&2
    exit 1
  fi
  pack "$build/bin/$t" tools
done

mkdir -p "$(dirname "$out")"
tar -C "$stage" -czf "$out" bin tools lib MANIFEST
size=$(stat -c %s "$out")
echo "gpu_bundle: $out: ${#tests[@]} test binaries, $(grep -c '^lib ' "$stage/MANIFEST") libraries, $((size >> 20)) MiB"
if [ "$size" -gt "$max_bytes" ]; then
  echo "gpu_bundle: $out is $size bytes, over the limit of $max_bytes" >&2
  exit 1
fi
