#!/usr/bin/env python3
"""Submit a job to a Yoke coordinator and follow it to the end.

    pip install ./python
    yoke up                                   # or set YOKE_COORDINATOR, YOKE_TLS_DIR
    python3 examples/python/submit_and_watch.py configs/fashion_mnist_mlp.yaml \
        --set training.epochs=1

Exits 0 when the job succeeded, 1 when it failed or was cancelled, 2 when
the coordinator refused it (the message names the field of a bad spec).
"""

import argparse
import sys
from typing import Dict, List, Optional

from yoke_client import Client, YokeError


def parse_sets(sets: List[str]) -> Dict[str, str]:
    """--set path=value, as the CLI takes it: the value is YAML text."""
    out: Dict[str, str] = {}
    for s in sets:
        path, eq, value = s.partition("=")
        if not eq:
            raise SystemExit(f"--set {s}: expected path=value, e.g. training.epochs=1")
        out[path.strip()] = value
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("job", help="a job file (YAML)")
    ap.add_argument("--set", action="append", default=[], metavar="PATH=VALUE")
    ap.add_argument("--coordinator", help="host:port (default: as the yoke CLI finds it)")
    args = ap.parse_args(argv)
    try:
        with Client(address=args.coordinator) as client:
            job_id = client.submit(args.job, overrides=parse_sets(args.set))
            print(f"submitted {job_id} to {client.address}")
            last = None
            for event in client.watch(job_id):
                p = event.job.progress
                print(f"{event.state:<10} epoch {p.epoch + 1}/{p.epochs} step {p.step}  {event.message}")
                last = event
            if last is not None and last.state == "SUCCEEDED":
                r = last.job.result
                print(f"test accuracy {r.test_accuracy:.4f} after {r.epochs} epochs")
                return 0
            reason = last.job.reason if last is not None else "no events"
            print(f"job {job_id} ended {last.state if last else '?'}: {reason}", file=sys.stderr)
            return 1
    except YokeError as e:
        print(f"submit_and_watch: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
