#!/usr/bin/env bash
# deploy/k8s against the Kubernetes API schemas, offline: every kustomization
# (the base and each overlay) is rendered with `kubectl kustomize` and each
# object it yields is validated with kubernetes-validate for Kubernetes
# $K8S_VERSION in strict mode, so an unknown or misspelt field fails as well
# as a missing required one or a wrong type.
#
# Before that, a self-check proves the validator can fail here: the rendered
# base with one field misspelt, and with one required field removed, must
# each be rejected.
#
#   tests/k8s_manifests_test.sh [SOURCE_DIR]
#
# kubectl: the one on PATH (Debian's kubernetes-client). kubernetes-validate:
# $KUBERNETES_VALIDATE, else the one on PATH, else $YOKE_VENV (/opt/yoke/venv,
# where scripts/install-deps.sh installs it).
set -euo pipefail

# The oldest Kubernetes release still maintained upstream when this was
# written; the manifests use nothing newer (gRPC probes are GA since 1.27).
K8S_VERSION=1.30.0

if [ $# -ge 1 ]; then
  SRC=$1
elif [ -n "${TEST_SRCDIR:-}" ]; then  # Bazel
  SRC=$TEST_SRCDIR/${TEST_WORKSPACE:-yoke}
else
  SRC=$(cd "$(dirname "$0")/.." && pwd)
fi

fail() { echo "k8s_manifests_test: FAIL: $*" >&2; exit 1; }

KV=${KUBERNETES_VALIDATE:-$(command -v kubernetes-validate || echo "${YOKE_VENV:-/opt/yoke/venv}/bin/kubernetes-validate")}
[ -x "$KV" ] || fail "kubernetes-validate not found ($KV); run scripts/install-deps.sh"
command -v kubectl >/dev/null || fail "kubectl not found; run scripts/install-deps.sh"

TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/k8s_manifests_test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# A real copy: kustomize refuses files that resolve outside the
# kustomization's directory, which symlinked trees (Bazel's runfiles) do.
cp -rL "$SRC/deploy/k8s" "$TMP/k8s"

validate() {  # validate FILE: kubernetes-validate's status; its report in FILE.out
  "$KV" --kubernetes-version "$K8S_VERSION" --strict "$1" >"$1.out" 2>&1
}

render() {  # render DIR OUT
  kubectl kustomize "$1" >"$2" 2>"$2.err" || fail "kubectl kustomize $1: $(cat "$2.err")"
}

# Self-check: the validator rejects what it must.
render "$TMP/k8s/base" "$TMP/self.yaml"
grep -q 'runAsNonRoot:' "$TMP/self.yaml" || fail "self-check: the base has no runAsNonRoot field"
sed '0,/runAsNonRoot:/s//runAsNonRot:/' "$TMP/self.yaml" >"$TMP/typo.yaml"
if validate "$TMP/typo.yaml"; then
  fail "self-check: a misspelt field (runAsNonRot) passed: $(cat "$TMP/typo.yaml.out")"
fi
grep -q 'runAsNonRot' "$TMP/typo.yaml.out" ||
  fail "self-check: the rejection does not name the misspelt field: $(cat "$TMP/typo.yaml.out")"
grep -v 'containerPort:' "$TMP/self.yaml" >"$TMP/missing.yaml"
if validate "$TMP/missing.yaml"; then
  fail "self-check: a port without containerPort passed: $(cat "$TMP/missing.yaml.out")"
fi
echo "self-check: a misspelt field and a missing required field are rejected"

# Every kustomization, base and overlays.
mapfile -t dirs < <(cd "$TMP/k8s" && find . -name kustomization.yaml -printf '%h\n' | sort)
[ "${#dirs[@]}" -ge 2 ] || fail "expected the base and at least one overlay, found: ${dirs[*]}"
for d in "${dirs[@]}"; do
  d=${d#./}
  out="$TMP/$(echo "$d" | tr / _).yaml"
  render "$TMP/k8s/$d" "$out"
  objects=$(grep -c '^kind:' "$out" || true)
  [ "$objects" -ge 1 ] || fail "$d renders no objects"
  validate "$out" || fail "$d does not validate against Kubernetes $K8S_VERSION:
$(cat "$out.out")"
  # Every object was checked against a schema (none skipped as unknown).
  checked=$(grep -c 'passed for resource' "$out.out" || true)
  [ "$checked" = "$objects" ] ||
    fail "$d: $objects objects rendered, $checked validated: $(cat "$out.out")"
  echo "$d: $objects objects valid for Kubernetes $K8S_VERSION (strict)"
done
