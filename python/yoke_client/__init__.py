"""yoke_client: a typed Python client of the Yoke coordinator.

    from yoke_client import Client
    c = Client()                      # as the yoke CLI: env, then `yoke up`
    job_id = c.submit("configs/fashion_mnist_mlp.yaml", overrides={"training.epochs": 1})
    for ev in c.watch(job_id):
        print(ev.state, ev.message)

docs/python.md describes every call, the errors and version skew.
"""

from ._version import MIN_COORDINATOR_VERSION, VERSION
from .client import TERMINAL, Client, Job, JobEvent, LogLine, Worker, state_name
from .errors import (InvalidArgumentError, NotFoundError, PermissionDeniedError,
                     ResourceExhaustedError, UnauthenticatedError, UnavailableError,
                     VersionSkewError, YokeError)

__version__ = VERSION

__all__ = [
    "Client", "JobEvent", "Job", "Worker", "LogLine", "TERMINAL", "state_name",
    "YokeError", "InvalidArgumentError", "NotFoundError", "PermissionDeniedError",
    "UnauthenticatedError", "UnavailableError", "ResourceExhaustedError", "VersionSkewError",
    "VERSION", "MIN_COORDINATOR_VERSION", "__version__",
]
