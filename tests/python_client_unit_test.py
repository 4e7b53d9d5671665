#!/usr/bin/env python3
"""The Python client package (python/) without a cluster: it builds with
`pip install ./python` (stubs generated from proto/), mypy --strict passes
over it and examples/python/submit_and_watch.py, and against fake
coordinators (in-process gRPC servers) it
  * says clearly when it is too old or too new for the coordinator,
  * reconnects a watch across a coordinator restart on the same address,
  * resolves address and credentials as the CLI does ($YOKE_COORDINATOR, the
    `yoke up` state file, $YOKE_TLS_DIR) and never shows a token in a repr,
  * turns overrides into the CLI's `--set` text.
The cluster tests are tests/python_client_e2e_test.py.

  tests/python_client_unit_test.py   (re-runs itself with $YOKE_VENV's python;
                                      $YOKE_MYPY_CACHE: a lasting mypy cache)
"""

import json
import os
import shutil
import sys
import threading
import time
import traceback
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_client_util as util  # noqa: E402

util.use_venv()
SCRATCH = util.scratch_dir("yoke_pyclient_unit_")
SITE = util.install_package(SCRATCH)

import grpc  # noqa: E402
import yoke_client as yc  # noqa: E402
from yoke_client import client as yclient  # noqa: E402
from yoke_client._proto.yoke.v1 import coordinator_pb2 as pb  # noqa: E402
from yoke_client._proto.yoke.v1 import coordinator_pb2_grpc as pb_grpc  # noqa: E402

C = util.Checks()


class Fake(pb_grpc.CoordinatorServicer):
    """A coordinator that reports `version` (None: predates GetVersion) and
    streams one job: RUNNING, then, once `finish` is set, SUCCEEDED."""

    def __init__(self, version="0.1.0", min_client="0.1.0", hang_after_first=False):
        self.version, self.min_client = version, min_client
        self.hang_after_first = hang_after_first
        self.finish = threading.Event()
        self.stop = threading.Event()

    def GetVersion(self, request, context):
        if self.version is None:
            return super().GetVersion(request, context)
        return pb.GetVersionResponse(version=self.version, min_client_version=self.min_client)

    def GetJob(self, request, context):
        state = pb.JOB_SUCCEEDED if self.finish.is_set() else pb.JOB_RUNNING
        return pb.Job(id=request.job_id, state=state)

    def WatchJob(self, request, context):
        yield pb.JobEvent(job=pb.Job(id=request.job_id, state=pb.JOB_RUNNING),
                          message="current state")
        if self.hang_after_first:
            self.stop.wait(30)  # until the server goes away under it
            return
        self.finish.wait(30)
        yield pb.JobEvent(job=pb.Job(id=request.job_id, state=pb.JOB_SUCCEEDED),
                          message="succeeded")


def serve(servicer, port=0):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_CoordinatorServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server, bound


def expect_error(fn, cls, *needles):
    try:
        fn()
    except cls as e:
        ok = all(n in str(e) for n in needles)
        C.check(ok, f"{cls.__name__} should mention {needles}: {e}")
        return e
    except Exception as e:  # noqa: BLE001
        C.check(False, f"expected {cls.__name__}, got {type(e).__name__}: {e}")
        return None
    C.check(False, f"expected {cls.__name__}, the call succeeded")
    return None


def test_version_skew():
    cases = [
        (Fake(version="0.1.0"), None, ()),
        (Fake(version="0.0.9"), yc.VersionSkewError, ("too new", "0.0.9", "upgrade the coordinator")),
        (Fake(version="9.0.0", min_client="9.0.0"), yc.VersionSkewError, ("too old", "9.0.0")),
        (Fake(version=None), yc.VersionSkewError, ("too new", "does not report its version")),
    ]
    for servicer, err, needles in cases:
        server, port = serve(servicer)
        try:
            c = yc.Client(f"127.0.0.1:{port}", insecure=True)
            if err is None:
                C.check(c.server_version() == "0.1.0", "server_version() of a 0.1.0 coordinator")
                C.check(c.get("j").state == pb.JOB_RUNNING, "a call after the version check")
            else:
                e = expect_error(lambda: c.get("j"), err, *needles)
                C.check(e is None or e.code == grpc.StatusCode.FAILED_PRECONDITION,
                        "a version skew is FAILED_PRECONDITION")
        finally:
            server.stop(0)


def test_watch_reconnects():
    first = Fake(hang_after_first=True)
    server, port = serve(first)
    c = yc.Client(f"127.0.0.1:{port}", insecure=True, reconnect_for=30)
    events = c.watch("job-1")
    seen = [next(events).state]
    # The coordinator restarts on the same address while the watch is open.
    server.stop(0)
    first.stop.set()
    second = Fake()
    restarted = threading.Timer(1.5, lambda: holder.append(serve(second, port)[0]))
    holder = []
    restarted.start()
    threading.Timer(3.0, second.finish.set).start()
    try:
        t0 = time.monotonic()
        for ev in events:
            seen.append(ev.state)
        C.check(seen[0] == "RUNNING" and seen[-1] == "SUCCEEDED",
                f"watch across a restart: events {seen}")
        C.check(time.monotonic() - t0 < 20, "the watch reconnected within seconds")
    except yc.YokeError as e:
        C.check(False, f"watch across a restart raised {e!r} after events {seen}")
    finally:
        restarted.join()
        for s in holder:
            s.stop(0)


def test_resolution_and_secrets():
    state_dir = os.path.join(SCRATCH, "state")
    tls = os.path.join(SCRATCH, "tls")
    os.makedirs(state_dir)
    os.makedirs(tls)
    with open(os.path.join(state_dir, "cluster.json"), "w", encoding="utf-8") as f:
        json.dump({"address": "127.0.0.1:4567", "tls_dir": "", "coordinator_pid": 42,
                   "worker_pids": [43]}, f)
    saved = dict(os.environ)
    try:
        for k in ("YOKE_COORDINATOR", "YOKE_TLS_DIR", "YOKE_TOKEN", "YOKE_INSECURE"):
            os.environ.pop(k, None)
        os.environ["YOKE_STATE_DIR"] = state_dir
        c = yc.Client()
        C.check(c.address == "127.0.0.1:4567", f"address from the state file: {c!r}")
        C.check("insecure" in repr(c), f"a --insecure cluster's state means plaintext: {c!r}")
        os.environ["YOKE_COORDINATOR"] = "10.1.2.3:7070"
        C.check(yc.Client().address == "10.1.2.3:7070", "$YOKE_COORDINATOR beats the state file")
        C.check(yc.Client("h:1", insecure=True).address == "h:1", "the argument beats both")
        os.environ["YOKE_STATE_DIR"] = os.path.join(SCRATCH, "nowhere")
        expect_error(lambda: yc.Client(), yc.YokeError, "no credentials", "tls_dir")
        shutil.copy(os.path.join(util.REPO, "README.md"), os.path.join(tls, "ca.crt"))
        secret = "yoke_0123456789abcdef.s3cr3t-never-shown"
        os.environ["YOKE_TLS_DIR"] = tls
        os.environ["YOKE_TOKEN"] = secret
        c = yc.Client()
        C.check(secret not in repr(c) and "token=<set>" in repr(c),
                f"the token is not in the repr: {c!r}")
        C.check(secret not in str(vars(c)), "the token is not kept in an attribute")
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_overrides_text():
    cases = [("training.epochs", 3, "training.epochs=3"),
             ("model.hidden", [16, 8], "model.hidden=[16, 8]"),
             ("training.optimizer.lr", 0.5, "training.optimizer.lr=0.5"),
             ("name", "my job", "name=my job"),
             ("checkpoint", None, "checkpoint=null"),
             ("data.train.shuffle", True, "data.train.shuffle=true")]
    for path, value, want in cases:
        got = yclient._override_text(path, value)
        C.check(got == want, f"override {path}={value!r}: got {got!r}, want {want!r}")


def test_mypy():
    example = os.path.join(util.REPO, "examples", "python", "submit_and_watch.py")
    ok, out = util.run_mypy(SITE, [example], os.environ.get("YOKE_MYPY_CACHE"))
    C.check(ok, "mypy --strict over yoke_client and the example:\n" + out)


def main():
    t0 = time.monotonic()
    try:
        for test in (test_overrides_text, test_resolution_and_secrets, test_version_skew,
                     test_watch_reconnects, test_mypy):
            t = time.monotonic()
            try:
                test()
            except Exception:  # noqa: BLE001  (a failed check; the others still run)
                C.check(False, f"{test.__name__} raised:\n{traceback.format_exc()}")
            print(f"{test.__name__}: {time.monotonic() - t:.1f}s", flush=True)
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)
    print(f"total {time.monotonic() - t0:.1f}s")
    return C.finish("python_client_unit_test")


if __name__ == "__main__":
    sys.exit(main())
