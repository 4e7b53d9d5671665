"""Client: the coordinator's Coordinator service, typed and with the CLI's
conventions (address and credentials, `--set` overrides, watch reconnects).
docs/python.md describes every call."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, List, Mapping, Optional, Union

import grpc

from . import _config
from ._proto.yoke.v1 import coordinator_pb2 as pb
from ._proto.yoke.v1 import coordinator_pb2_grpc as pb_grpc
from ._version import MIN_COORDINATOR_VERSION, VERSION
from .errors import VersionSkewError, YokeError, error_for, from_rpc_error, rpc_status

log = logging.getLogger("yoke_client")

Job = pb.Job
Worker = pb.Worker
LogLine = pb.LogLine
SpecLike = Union[str, "os.PathLike[str]", Mapping[str, Any]]

TERMINAL = (pb.JOB_SUCCEEDED, pb.JOB_FAILED, pb.JOB_CANCELLED)
# Stream failures worth reconnecting after (client/commands.cc Transient).
_TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN,
              grpc.StatusCode.INTERNAL)


def state_name(state: int) -> str:
    """"RUNNING" for JOB_RUNNING, and so on."""
    return pb.JobState.Name(state).removeprefix("JOB_")


@dataclass(frozen=True)
class JobEvent:
    """One update of a watched job: the job after the change (its state and
    its latest progress) and the coordinator's note ("scheduled on w-1")."""

    job: pb.Job
    message: str

    @property
    def state(self) -> str:
        return state_name(self.job.state)

    @property
    def terminal(self) -> bool:
        return self.job.state in TERMINAL


def _version_tuple(v: str) -> "tuple[int, ...]":
    try:
        return tuple(int(p) for p in v.split("."))
    except ValueError:
        return (0,)


def _override_text(path: str, value: Any) -> str:
    """One overrides item as the `--set` argument the CLI would take. A str
    is the text after '=' as typed on a command line; other values are
    written as YAML flow (JSON is YAML): 3, 0.5, true, null, [16, 8]."""
    if isinstance(value, str):
        return f"{path}={value}"
    return f"{path}={json.dumps(value)}"


def _spec_text(spec: SpecLike) -> "tuple[str, str]":
    """(YAML text, the name error messages give it)."""
    if isinstance(spec, Mapping):
        return json.dumps(spec), "<dict>"
    if isinstance(spec, os.PathLike):
        path = os.fspath(spec)
    elif "\n" not in spec and (spec.endswith((".yaml", ".yml")) or os.path.isfile(spec)):
        path = spec
    else:
        return spec, "<string>"
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    except OSError as e:
        raise error_for(grpc.StatusCode.NOT_FOUND, f"cannot read the job file {path}: {e.strerror}")


class Client:
    """A connection to one coordinator.

    Client(address=None, tls_dir=None, token=None) finds the coordinator and
    its credentials as the yoke CLI does ($YOKE_COORDINATOR, $YOKE_TLS_DIR,
    $YOKE_TOKEN, then the `yoke up` cluster's state file). The first call
    checks the coordinator's version (VersionSkewError when they do not fit).
    Every failed call raises a YokeError subclass with the gRPC code and the
    coordinator's message. Safe to share between threads.
    """

    def __init__(self, address: Optional[str] = None, tls_dir: Optional[str] = None,
                 token: Optional[str] = None, *, insecure: bool = False,
                 timeout: float = 10.0, reconnect_for: float = 120.0) -> None:
        self.address = _config.resolve_address(address)
        creds, self._resolved = _config.resolve_credentials(tls_dir, token, insecure)
        self.timeout = timeout
        self.reconnect_for = reconnect_for
        options = [("grpc.max_receive_message_length", 64 << 20),
                   ("grpc.initial_reconnect_backoff_ms", 200),
                   ("grpc.max_reconnect_backoff_ms", 1000)]
        if creds is None:
            self._channel = grpc.insecure_channel(self.address, options=options)
        else:
            self._channel = grpc.secure_channel(self.address, creds, options=options)
        self._stub: Any = pb_grpc.CoordinatorStub(self._channel)  # type: ignore[no-untyped-call]
        self._server_version: Optional[str] = None

    def __repr__(self) -> str:
        # Never the token or the key: only whether there is one.
        how = f"tls_dir={self._resolved.tls_dir!r}" if self._resolved.tls_dir else "insecure"
        token = ", token=<set>" if self._resolved.has_token else ""
        return f"Client(address={self.address!r}, {how}{token})"

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ plumbing

    def _call(self, method: str, request: Any, timeout: Optional[float] = None) -> Any:
        try:
            return getattr(self._stub, method)(request, timeout=timeout or self.timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.address) from None

    def _checked(self, method: str, request: Any) -> Any:
        self.check_version()
        return self._call(method, request)

    def server_version(self) -> str:
        """The coordinator's version ("0.1.0"). UNIMPLEMENTED from a
        coordinator older than version reporting becomes VersionSkewError."""
        if self._server_version is not None:
            return self._server_version
        try:
            resp = self._stub.GetVersion(pb.GetVersionRequest(), timeout=self.timeout)
        except grpc.RpcError as e:
            if rpc_status(e)[0] == grpc.StatusCode.UNIMPLEMENTED:
                raise VersionSkewError(
                    f"yoke-client {VERSION} is too new for the coordinator at {self.address}: "
                    f"it does not report its version, so it predates "
                    f"{MIN_COORDINATOR_VERSION}, the oldest this client works with; upgrade "
                    f"the coordinator, or install the client from its release",
                    self.address) from None
            raise from_rpc_error(e, self.address) from None
        self._check_skew(resp.version, resp.min_client_version)
        self._server_version = str(resp.version)
        return self._server_version

    def _check_skew(self, server: str, min_client: str) -> None:
        if _version_tuple(VERSION) < _version_tuple(min_client or "0"):
            raise VersionSkewError(
                f"yoke-client {VERSION} is too old for the coordinator at {self.address} "
                f"(version {server}, which serves clients from {min_client} on): install the "
                f"client of the coordinator's release (pip install ./python from it)",
                self.address)
        if _version_tuple(server) < _version_tuple(MIN_COORDINATOR_VERSION):
            raise VersionSkewError(
                f"yoke-client {VERSION} is too new for the coordinator at {self.address} "
                f"(version {server}; this client needs {MIN_COORDINATOR_VERSION} or later): "
                f"upgrade the coordinator, or install the client from its release",
                self.address)

    def check_version(self) -> None:
        """Raises VersionSkewError unless this client and the coordinator fit."""
        self.server_version()

    # ------------------------------------------------------------ jobs

    def submit(self, spec: SpecLike, overrides: Optional[Mapping[str, Any]] = None,
               priority: int = 0) -> str:
        """Submits a job; returns its id.

        `spec` is a path to a job file (a str ending in .yaml/.yml or naming
        an existing file, or a PathLike), YAML text, or a dict shaped like a
        job file. `overrides` are applied in order exactly as the CLI's
        `--set path=value` (the coordinator runs the CLI's parser on the
        text): {"training.epochs": 3, "model.layers[0].dense.units": 16}.
        """
        text, name = _spec_text(spec)
        req = pb.SubmitJobRequest(spec_yaml=text, spec_yaml_name=name, priority=priority,
                                  overrides=[_override_text(k, v)
                                             for k, v in (overrides or {}).items()])
        return str(self._checked("SubmitJob", req).job_id)

    def get(self, job_id: str) -> pb.Job:
        """The job: spec, state, attempts, progress, history and result."""
        job: pb.Job = self._checked("GetJob", pb.GetJobRequest(job_id=job_id))
        return job

    def list(self, states: Iterable[Union[str, int]] = (), summary: bool = False,
             page_size: int = 1000) -> List[pb.Job]:
        """Every job in `states` ("RUNNING", "pending", pb.JOB_FAILED...; all
        when empty), newest first, following the pages. With `summary` each
        spec carries only its name."""
        self.check_version()
        wanted: List[Any] = [self._state_value(s) for s in states]
        jobs: List[pb.Job] = []
        token = ""
        while True:
            req = pb.ListJobsRequest(states=wanted, page_size=page_size, page_token=token,
                                     summary=summary)
            resp = self._call("ListJobs", req)
            jobs.extend(resp.jobs)
            if not resp.next_page_token or resp.next_page_token == token:
                return jobs
            token = resp.next_page_token

    @staticmethod
    def _state_value(s: Union[str, int]) -> int:
        if isinstance(s, int):
            return s
        name = s.upper()
        try:
            return int(pb.JobState.Value(name if name.startswith("JOB_") else "JOB_" + name))
        except ValueError:
            raise error_for(grpc.StatusCode.INVALID_ARGUMENT,
                            f"states: not a job state: {s!r} (pending, scheduled, running, "
                            f"succeeded, failed, cancelled)") from None

    def cancel(self, job_id: str) -> pb.Job:
        """Stops the job's trainers and marks it CANCELLED; a finished job is
        returned unchanged."""
        job: pb.Job = self._checked("CancelJob", pb.CancelJobRequest(job_id=job_id))
        return job

    def workers(self) -> List[pb.Worker]:
        """The registered workers."""
        return list(self._checked("ListWorkers", pb.ListWorkersRequest()).workers)

    # ------------------------------------------------------------ streams

    def _lost(self, err: YokeError, connected: bool, lost_since: Optional[float],
              what: str) -> float:
        """After a failed stream or call: raises `err` unless it is worth
        reconnecting (the stream had delivered something and the failure is
        transient, client/commands.cc Transient) and reconnect_for has not
        run out; else waits a second and returns when the loss began."""
        if not (connected and err.code in _TRANSIENT):
            raise err
        now = time.monotonic()
        if lost_since is None:
            lost_since = now
            log.warning("%s: lost the coordinator (%s); reconnecting", what, err.message)
        elif now - lost_since > self.reconnect_for:
            raise err
        time.sleep(1.0)
        return lost_since

    def watch(self, job_id: str) -> Iterator[JobEvent]:
        """Yields the job's events, the first its current state, then one per
        change of state or progress, until one carries a terminal state
        (SUCCEEDED, FAILED, CANCELLED). When the coordinator goes away (a
        restart), it reconnects every second for up to reconnect_for seconds
        and goes on, as `yoke watch` does."""
        self.check_version()
        connected = False
        lost_since: Optional[float] = None
        what = f"watch {job_id}"
        while True:
            stream: Any = None
            try:
                last: Optional[pb.Job] = None
                stream = self._stub.WatchJob(pb.WatchJobRequest(job_id=job_id))
                for ev in stream:
                    if lost_since is not None:
                        log.info("%s: reconnected to the coordinator at %s", what, self.address)
                    connected, lost_since, last = True, None, ev.job
                    yield JobEvent(job=ev.job, message=ev.message)
                if last is not None and last.state in TERMINAL:
                    return
                # The stream ended without a terminal event: ask directly.
                job: pb.Job = self._call("GetJob", pb.GetJobRequest(job_id=job_id))
                if job.state in TERMINAL:
                    yield JobEvent(job=job, message="final state")
                    return
                time.sleep(1.0)
            except grpc.RpcError as e:
                lost_since = self._lost(from_rpc_error(e, self.address), connected, lost_since,
                                        what)
            except YokeError as e:
                lost_since = self._lost(e, connected, lost_since, what)
            finally:
                if stream is not None:
                    stream.cancel()

    def logs(self, job_id: str, follow: bool = False, since_seq: int = 0) -> Iterator[pb.LogLine]:
        """Yields the job's log lines with seq > since_seq; with `follow`,
        keeps yielding new lines until the job has ended, reconnecting across
        a coordinator restart without repeating a line (`yoke logs -f`)."""
        self.check_version()
        last_seq = since_seq
        connected = False
        lost_since: Optional[float] = None
        what = f"logs {job_id}"
        while True:
            stream: Any = None
            try:
                req = pb.GetJobLogsRequest(job_id=job_id, follow=follow, since_seq=last_seq)
                stream = self._stub.GetJobLogs(req, timeout=None if follow else self.timeout)
                for line in stream:
                    connected, lost_since = True, None
                    if line.seq <= last_seq:
                        continue  # sent again after a reconnect
                    last_seq = line.seq
                    yield line
                if not follow:
                    return
                job: pb.Job = self._call("GetJob", pb.GetJobRequest(job_id=job_id))
                if job.state in TERMINAL:
                    return
            except grpc.RpcError as e:
                err = from_rpc_error(e, self.address)
                lost_since = self._lost(err, connected and follow, lost_since, what)
            except YokeError as e:
                lost_since = self._lost(e, connected and follow, lost_since, what)
            finally:
                if stream is not None:
                    stream.cancel()


__all__ = ["Client", "JobEvent", "Job", "Worker", "LogLine", "TERMINAL", "state_name",
           "YokeError"]


