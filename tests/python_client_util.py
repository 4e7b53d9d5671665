"""Helpers the Python client's tests share (tests/python_client_*_test.py).

use_venv(): re-runs the calling script with $YOKE_VENV's python (/opt/yoke/venv,
  scripts/install-deps.sh), or exits 77 (ctest: skipped) when that venv lacks
  what building and checking the package needs.
install_package(): `pip install ./python` into a scratch directory (no network:
  --no-deps --no-build-isolation, the venv has grpcio-tools and setuptools),
  from a copy of python/ beside symlinks to proto/ and common/, so the build
  leaves nothing in the checkout; puts the result first on sys.path.
"""

import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEEDED = ("grpc", "grpc_tools", "mypy", "setuptools")


def use_venv():
    venv = os.environ.get("YOKE_VENV", "/opt/yoke/venv")
    py = os.path.join(venv, "bin", "python3")
    if os.path.realpath(sys.prefix) != os.path.realpath(venv):
        if not os.access(py, os.X_OK):
            print(f"SKIP: no virtual environment at {venv} (scripts/install-deps.sh makes it)")
            sys.exit(77)
        os.execv(py, [py] + sys.argv)
    import importlib.util
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:
        print(f"SKIP: {venv} lacks {', '.join(missing)} (run scripts/install-deps.sh)")
        sys.exit(77)


def install_package(scratch):
    """Builds and installs python/ into scratch/site; returns that path."""
    src = os.path.join(scratch, "src")
    os.makedirs(src)
    shutil.copytree(os.path.join(REPO, "python"), os.path.join(src, "python"),
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    for d in ("proto", "common"):
        os.symlink(os.path.join(REPO, d), os.path.join(src, d))
    site = os.path.join(scratch, "site")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--no-deps", "--no-build-isolation", "--target", site,
                        os.path.join(src, "python")], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"pip install ./python failed:\n{r.stdout}{r.stderr}")
    generated = os.path.join(site, "yoke_client", "_proto", "yoke", "v1", "coordinator_pb2.py")
    if not os.path.isfile(generated):
        raise SystemExit(f"the build generated no stubs ({generated} is missing)")
    sys.path.insert(0, site)
    return site


def run_mypy(site, extra_files=(), cache_dir=None):
    """mypy (strict, python/pyproject.toml's settings) over the installed
    package and `extra_files`; returns (ok, output). A lasting `cache_dir`
    keeps the typeshed and stub packages' analysis between runs."""
    cfg = os.path.join(REPO, "python", "pyproject.toml")
    env = dict(os.environ, MYPYPATH=site)
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", cfg,
                        "--cache-dir", cache_dir or os.path.join(os.path.dirname(site), "mypy-cache"),
                        os.path.join(site, "yoke_client"), *extra_files],
                       capture_output=True, text=True, cwd=site, env=env)
    return r.returncode == 0, r.stdout + r.stderr


class Checks:
    """Collects failures so one run reports all of them."""

    def __init__(self):
        self.failures = []

    def check(self, cond, what):
        if not cond:
            self.failures.append(what)
            print(f"FAIL: {what}", flush=True)
        return cond

    def finish(self, name):
        if self.failures:
            print(f"{name}: {len(self.failures)} check(s) failed")
            return 1
        print(f"{name}: all checks passed")
        return 0


def scratch_dir(prefix):
    return tempfile.mkdtemp(prefix=prefix)
