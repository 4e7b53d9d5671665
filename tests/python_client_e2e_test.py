#!/usr/bin/env python3
"""The Python client package against a real cluster: `yoke up --detach` with
mutual TLS (a coordinator config raising the per-submitter quotas), then,
through yoke_client:
  * Client() finds the cluster from its state file, as the CLI does;
  * a job submitted as a dict with overrides is watched to SUCCEEDED, with
    progress events, and its logs and the workers are read;
  * the same file submitted by the CLI with --set and by submit() with
    overrides gives the same stored spec;
  * 1,500 jobs wait behind a running one and list() pages through them all
    (they never train: the cluster is torn down with them pending);
  * a waiting job and a running one are cancelled;
  * errors carry the code and the server's message: a bad spec names its
    field, a viewer's submit and a revoked token are refused, saying why.
The cluster is always torn down (`yoke down`, then SIGKILL for stragglers).

  tests/python_client_e2e_test.py build/bin/yoke build/bin/yoke-coordinator \
      build/bin/yoke-worker build/bin/yoke-trainer   (re-runs itself with $YOKE_VENV's python)
"""

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_client_util as util  # noqa: E402

util.use_venv()
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
FLOOD = 1500

TINY = {"name": "py-tiny", "model": {"zoo": "mlp", "hidden": [8]},
        "data": {"train": {"format": "synthetic", "shape": [4, 4, 1], "num_classes": 2,
                           "num_examples": 64}},
        "training": {"epochs": 3, "batch_size": 8, "threads": 1,
                     "optimizer": {"type": "sgd", "lr": 0.1}}}
C = util.Checks()


class Cluster:
    def __init__(self, bin_dir, scratch):
        self.bin, self.dir = bin_dir, os.path.join(scratch, "cluster")
        self.env = dict(os.environ, YOKE_STATE_DIR=os.path.join(self.dir, "state"))
        for k in ("YOKE_COORDINATOR", "YOKE_TLS_DIR", "YOKE_TOKEN", "YOKE_INSECURE"):
            self.env.pop(k, None)
        cfg = os.path.join(scratch, "coordinator.yaml")
        with open(cfg, "w", encoding="utf-8") as f:
            f.write("max_pending_jobs_per_submitter: -1\n"
                    "max_submits_per_minute_per_submitter: -1\n"
                    "max_pending_spec_bytes_per_submitter: -1\n")
        self.state = {}
        r = self.yoke("up", "--detach", "--workers", "1", "--dir", self.dir,
                      "--coordinator-config", cfg)
        if r.returncode != 0:
            raise SystemExit(f"yoke up failed:\n{r.stdout}{r.stderr}")
        with open(os.path.join(self.env["YOKE_STATE_DIR"], "cluster.json"), encoding="utf-8") as f:
            self.state = json.load(f)

    def yoke(self, *args):
        return subprocess.run([os.path.join(self.bin, "yoke"), *args], env=self.env,
                              capture_output=True, text=True, timeout=120)

    def restart_coordinator(self):
        """SIGKILL, then the same command line (the same store and port, as
        coordinator/recorded_port.h keeps it); the state files get the new pid."""
        pid = self.state["coordinator_pid"]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode() for a in f.read().split(b"\0") if a]
        cwd = os.readlink(f"/proc/{pid}/cwd")
        os.kill(pid, signal.SIGKILL)
        while os.path.exists(f"/proc/{pid}") and "Z" not in _proc_state(pid):
            time.sleep(0.05)
        with open(os.path.join(self.dir, "coordinator.log"), "ab") as log:
            p = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=log, start_new_session=True)
        self.state["coordinator_pid"] = p.pid
        for path in (os.path.join(self.dir, "cluster.json"),
                     os.path.join(self.env["YOKE_STATE_DIR"], "cluster.json")):
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    st = json.load(f)
                st["coordinator_pid"] = p.pid
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(st, f)
        return p

    def down(self):
        self.yoke("down", "--grace", "5", "--dir", self.dir)
        for pid in [self.state.get("coordinator_pid", 0)] + self.state.get("worker_pids", []):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass


def _proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


class Captured(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_watch_across_restart(c, cluster):
    """`yoke watch`'s promise, through the client: a coordinator killed and
    restarted mid-job does not end the watch."""
    captured = Captured()
    logging.getLogger("yoke_client").addHandler(captured)
    # A few seconds of training: the worker trains on while the coordinator
    # is away; the job's end (or the rest of it) comes after the restart.
    job_id = c.submit(TINY, overrides={"training.epochs": 300, "name": "py-restart"})
    states, restarted = [], None
    for ev in c.watch(job_id):
        states.append(ev.state)
        if not ev.terminal and restarted is None:
            restarted = cluster.restart_coordinator()
    logging.getLogger("yoke_client").removeHandler(captured)
    C.check(restarted is not None, f"the job ran: {states}")
    C.check(states[-1:] == ["SUCCEEDED"], f"the watch went on to SUCCEEDED: {states}")
    C.check(any("lost the coordinator" in m for m in captured.messages),
            f"the watch saw the coordinator go: {captured.messages}")


def expect_error(fn, cls, code, *needles):
    try:
        fn()
    except yc.YokeError as e:
        C.check(isinstance(e, cls) and e.code == code,
                f"expected {cls.__name__} {code.name}, got {e!r}")
        C.check(all(n in e.message for n in needles), f"{e.message!r} should say {needles}")
        return e
    C.check(False, f"expected {cls.__name__}, the call succeeded")
    return None


def test_submit_watch_logs(c):
    job_id = c.submit(TINY, overrides={"training.epochs": 1, "name": "py-watched"})
    events = list(c.watch(job_id))
    states = [e.state for e in events]
    C.check(states and states[-1] == "SUCCEEDED", f"watch ends SUCCEEDED: {states}")
    C.check(all(e.job.id == job_id for e in events), "every event is of the watched job")
    job = c.get(job_id)
    C.check(job.spec.training.epochs == 1 and job.spec.name == "py-watched",
            f"the overrides reached the stored spec: {job.spec.training.epochs} {job.spec.name}")
    C.check(job.result.epochs == 1 and job.result.steps == 8, f"the result: {job.result}")
    lines = [line.text for line in c.logs(job_id)]
    C.check(any(t.startswith("finished:") for t in lines), f"logs end with the summary: {lines}")
    ws = c.workers()
    C.check(len(ws) == 1 and ws[0].alive, f"one live worker: {ws}")


def test_example(cluster, scratch):
    """examples/python/submit_and_watch.py runs a job to the end (exit 0)."""
    path = os.path.join(scratch, "example.yaml")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(TINY, f)
    example = os.path.join(util.REPO, "examples", "python", "submit_and_watch.py")
    env = dict(cluster.env, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, example, path, "--set", "training.epochs=1"], env=env,
                       capture_output=True, text=True, timeout=120)
    C.check(r.returncode == 0 and "SUCCEEDED" in r.stdout and "test accuracy" in r.stdout,
            f"the example: exit {r.returncode}\n{r.stdout}{r.stderr}")


def test_cli_parity(c, cluster, scratch):
    """The same file with the same overrides, by the CLI and by the client."""
    path = os.path.join(scratch, "job.yaml")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(TINY, f)  # JSON is YAML
    sets = {"training.epochs": 2, "model.hidden": [16, 4], "training.optimizer.lr": "0.05",
            "name": "parity"}
    cli_sets = ["training.epochs=2", "model.hidden=[16,4]", "training.optimizer.lr=0.05",
                "name=parity"]  # as typed on a command line
    r = cluster.yoke("submit", path, *[a for s in cli_sets for a in ("--set", s)])
    if not C.check(r.returncode == 0, f"yoke submit: {r.stderr}"):
        return []
    cli_id = r.stdout.strip()
    py_id = c.submit(path, overrides=sets)
    a, b = c.get(cli_id).spec, c.get(py_id).spec
    C.check(a == b and abs(a.training.optimizer.lr - 0.05) < 1e-6,
            f"CLI --set and overrides give the same spec:\n{a}\nvs\n{b}")
    return [cli_id, py_id]


def test_flood_and_cancel(c):
    blocker = c.submit(TINY, overrides={"training.epochs": 1000000, "name": "py-blocker"})
    for ev in c.watch(blocker):
        if ev.state == "RUNNING" or ev.terminal:
            break
    C.check(yc.state_name(c.get(blocker).state) == "RUNNING", "the blocker runs")
    before = {j.id for j in c.list(summary=True)}
    t0 = time.monotonic()
    with futures.ThreadPoolExecutor(max_workers=4) as pool:
        ids = list(pool.map(lambda i: c.submit(TINY, overrides={"name": f"flood-{i}"}),
                            range(FLOOD)))
    print(f"submitted {FLOOD} jobs in {time.monotonic() - t0:.1f}s", flush=True)
    t0 = time.monotonic()
    listed = c.list()
    print(f"listed {len(listed)} jobs in {time.monotonic() - t0:.2f}s", flush=True)
    got = [j.id for j in listed]
    C.check(len(got) == len(set(got)), "list() has no job twice")
    C.check(set(ids) <= set(got) and len(got) == len(before) + FLOOD,
            f"list() has all {FLOOD} new jobs and the {len(before)} older: {len(got)} listed")
    C.check([j.create_time_ms for j in listed] == sorted((j.create_time_ms for j in listed),
                                                        reverse=True), "newest first")
    small = c.list(states=["pending"], summary=True, page_size=128)
    C.check({j.id for j in small} >= set(ids) and all(yc.state_name(j.state) == "PENDING" for j in small),
            f"12 pages of pending jobs hold every flood job: {len(small)}")
    cancelled = c.cancel(ids[FLOOD // 2])
    C.check(yc.state_name(cancelled.state) == "CANCELLED", f"a waiting job cancelled: {cancelled}")
    c.cancel(blocker)
    final = list(c.watch(blocker))[-1]
    C.check(final.state == "CANCELLED", f"the running job cancelled: {final.state}")
    return ids


def test_errors(c, cluster, scratch):
    expect_error(lambda: c.submit(TINY, overrides={"training.batch_size": -8}),
                 yc.InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT, "training.batch_size")
    bad = dict(TINY, trainig={"epochs": 1})
    expect_error(lambda: c.submit(bad), yc.InvalidArgumentError,
                 grpc.StatusCode.INVALID_ARGUMENT, "trainig: unknown field")
    expect_error(lambda: c.get("no-such-job"), yc.NotFoundError, grpc.StatusCode.NOT_FOUND)

    # Token holders with only the cluster's CA: no client certificate.
    ca_only = os.path.join(scratch, "ca-only")
    os.makedirs(ca_only)
    shutil.copy(os.path.join(cluster.state["tls_dir"], "ca.crt"), ca_only)
    r = cluster.yoke("token", "create", "--role", "viewer", "--name", "py-viewer")
    viewer_token = r.stdout.strip()
    if C.check(r.returncode == 0 and viewer_token, f"yoke token create: {r.stderr}"):
        v = yc.Client(tls_dir=ca_only, token=viewer_token)
        C.check(viewer_token not in repr(v), f"no token in the repr: {v!r}")
        C.check(len(v.list(summary=True)) > 0, "a viewer lists jobs")
        e = expect_error(lambda: v.submit(TINY), yc.PermissionDeniedError,
                         grpc.StatusCode.PERMISSION_DENIED, "SubmitJob", "viewer 'py-viewer'")
        C.check(e is None or viewer_token not in str(e), "no token in the error")
    r = cluster.yoke("token", "create", "--role", "submitter", "--name", "py-revoked")
    token = r.stdout.strip()
    if C.check(r.returncode == 0 and token, f"yoke token create: {r.stderr}"):
        s = yc.Client(tls_dir=ca_only, token=token)
        C.check(s.get(s.submit(TINY, overrides={"name": "by-token"})).owner == "py-revoked",
                "a submitter token submits as its name")
        r = cluster.yoke("token", "revoke", token)
        C.check(r.returncode == 0, f"yoke token revoke: {r.stderr}")
        e = expect_error(lambda: yc.Client(tls_dir=ca_only, token=token).list(),
                         yc.UnauthenticatedError, grpc.StatusCode.UNAUTHENTICATED, "revoked")
        C.check(e is None or token.split(".")[-1] not in str(e), "no secret in the error")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binaries", nargs="+", metavar="BIN",
                    help="yoke, then the daemons it starts (all in one folder)")
    args = ap.parse_args()
    bin_dir = os.path.dirname(os.path.abspath(args.binaries[0]))
    for b in args.binaries:
        if not os.access(b, os.X_OK):
            raise SystemExit(f"{b}: not an executable (build it first)")
    scratch = util.scratch_dir("yoke_pyclient_e2e_")
    t_all = time.monotonic()
    util.install_package(scratch)
    global yc, grpc
    import grpc  # noqa: F401
    import yoke_client as yc
    cluster = None
    try:
        cluster = Cluster(bin_dir, scratch)
        os.environ["YOKE_STATE_DIR"] = cluster.env["YOKE_STATE_DIR"]
        for k in ("YOKE_COORDINATOR", "YOKE_TLS_DIR", "YOKE_TOKEN", "YOKE_INSECURE"):
            os.environ.pop(k, None)
        c = yc.Client()  # from the state file, as the CLI
        C.check(c.address == cluster.state["address"], f"the state file's address: {c!r}")
        C.check(c.server_version() == yc.VERSION, "the coordinator's version is ours")
        for name, test in (("submit_watch_logs", lambda: test_submit_watch_logs(c)),
                           ("watch_across_restart", lambda: test_watch_across_restart(c, cluster)),
                           ("example", lambda: test_example(cluster, scratch)),
                           ("cli_parity", lambda: test_cli_parity(c, cluster, scratch)),
                           ("flood_and_cancel", lambda: test_flood_and_cancel(c)),
                           ("errors", lambda: test_errors(c, cluster, scratch))):
            t = time.monotonic()
            try:
                test()
            except Exception:  # noqa: BLE001  (a failed check; the others still run)
                C.check(False, f"{name} raised:\n{traceback.format_exc()}")
            print(f"{name}: {time.monotonic() - t:.1f}s", flush=True)
    finally:
        if cluster is not None:
            t = time.monotonic()
            cluster.down()
            print(f"down: {time.monotonic() - t:.1f}s")
        if not C.failures:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            print(f"kept for inspection: {scratch}")
    print(f"total {time.monotonic() - t_all:.1f}s")
    return C.finish("python_client_e2e_test")


if __name__ == "__main__":
    sys.exit(main())
