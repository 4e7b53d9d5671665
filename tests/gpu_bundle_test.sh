#!/usr/bin/env bash
# The GPU bundle (scripts/gpu_bundle.sh) runs where Debian's libraries are
# not: its CUDA test binaries start in a chroot that holds only the C and
# C++ runtime, NVIDIA's libraries and the bundle, as on the lent GPU machine.
# There, with no GPU, each binary's tests skip and it exits 0; a library the
# bundle forgot stops it with "error while loading shared libraries".
# Then scripts/gpu_check.py on this machine (no GPU) reports NO_GPU for
# stage 1, skips the rest, writes its JSON and exits 3.
#
#   gpu_bundle_test.sh SOURCE_DIR BUILD_DIR     (root: chroot; else exit 77)
set -euo pipefail
src=${1:?usage: gpu_bundle_test.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: gpu_bundle_test.sh SOURCE_DIR BUILD_DIR}
if [ "$(id -u)" != 0 ]; then
  echo "skipped: chroot needs root" >&2
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

"$src/scripts/gpu_bundle.sh" "$build" "$tmp/yoke-gpu.tar.gz"
root=$tmp/root
mkdir -p "$root/bundle" "$root/nvidia" "$root/lib64" "$root/lib" "$root/tmp" "$root/dev"
tar -C "$root/bundle" -xzf "$tmp/yoke-gpu.tar.gz"
[ -s "$root/bundle/MANIFEST" ] || fail "the bundle has no MANIFEST"

# The C and C++ runtime, as any Linux machine has it.
cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
ldconfig -p >"$tmp/ldcache"
for l in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libstdc++.so.6 libgcc_s.so.1; do
  p=$(awk -v n="$l" '$1 == n && /x86-64/ {print $NF; exit}' "$tmp/ldcache")
  [ -n "$p" ] && cp -L "$p" "$root/lib/"
done
# NVIDIA's libraries that the binaries load, as the GPU machine has them.
for b in "$root"/bundle/bin/* "$root"/bundle/tools/*; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /\/usr\/local\/cuda/ {print $3}' |
    while read -r p; do cp -nL "$p" "$root/nvidia/"; done
done

n=0
for b in "$root"/bundle/bin/*; do
  name=$(basename "$b")
  out=$(LD_LIBRARY_PATH=/lib:/bundle/lib:/nvidia chroot "$root" "/bundle/bin/$name" 2>&1) ||
    fail "$name in the chroot exited $?: $(echo "$out" | tail -5)"
  echo "$out" | grep -q "PASSED" || fail "$name printed no gtest result: $(echo "$out" | tail -5)"
  n=$((n + 1))
done
[ "$n" -gt 0 ] || fail "the bundle has no binaries"
for b in "$root"/bundle/tools/*; do
  name=$(basename "$b")
  out=$(LD_LIBRARY_PATH=/lib:/bundle/lib:/nvidia chroot "$root" "/bundle/tools/$name" --help 2>&1) ||
    fail "$name --help in the chroot exited $?: $(echo "$out" | tail -5)"
  n=$((n + 1))
done
echo "ok: $n bundled binaries start with only the bundle, the C/C++ runtime and NVIDIA's libraries"

# No GPU here: stage 1 says so, the others are skipped, exit 3.
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "this machine has a GPU: the no-GPU verdicts are not checked" >&2
  exit 0
fi
set +e
python3 "$src/scripts/gpu_check.py" --stages 1,2,3 --bundle "$tmp/yoke-gpu.tar.gz" \
  --out "$tmp/out" --work "$tmp/work" >"$tmp/check.txt" 2>&1
rc=$?
set -e
cat "$tmp/check.txt"
[ "$rc" = 3 ] || fail "gpu_check.py without a GPU exited $rc, not 3"
grep -q "^stage 1 env: NO_GPU" "$tmp/check.txt" || fail "stage 1 did not say NO_GPU"
grep -q "^stage 2 smoke: SKIPPED" "$tmp/check.txt" || fail "stage 2 was not skipped"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['verdict']=='NO_GPU', d" \
  "$tmp/out/stage1_env.json" || fail "stage1_env.json does not say NO_GPU"
if python3 "$src/scripts/gpu_check.py" --stages 7 --out "$tmp/out2" >/dev/null 2>&1; then
  fail "--stages 7 was accepted"
fi
echo "ok: gpu_check.py reports NO_GPU and exits 3 without a GPU"
