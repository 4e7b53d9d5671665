#!/usr/bin/env python3
"""torch.distributed gloo allreduce, the peer of allreduce_bench.

N ranks as N processes on loopback (torch.multiprocessing), f32 tensors.
For each size (min_bytes, x4, ..., max_bytes) it checks the result once
(integer-valued floats, exact), warms up, then times `iters` synchronous
dist.all_reduce calls one at a time and prints, from rank 0:
    RESULT <bytes> <median_us> <algbw_GBps> <busbw_GBps>
the same line format and iteration counts as allreduce_bench.cc.

    /usr/bin/python3 bench/allreduce_torch.py [--ranks 2] [--min-bytes 1024] [--max-bytes 67108864]
Exits 2 (with a message) if torch cannot be imported.
"""
import argparse
import os
import socket
import statistics
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:  # pragma: no cover
    print(f"# torch not available ({e}); skipping the torch.distributed peer")
    sys.exit(2)


def iters(nbytes):
    if nbytes <= (64 << 10):
        return 400
    if nbytes <= (1 << 20):
        return 100
    if nbytes <= (4 << 20):
        return 40
    return 15


def run(rank, n, port, min_bytes, max_bytes):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
    nbytes = min_bytes
    while nbytes <= max_bytes:
        count = nbytes // 4
        idx = torch.arange(count, dtype=torch.int64)
        buf = ((idx + rank) % 17).to(torch.float32)
        dist.all_reduce(buf)
        want = sum(((idx + r) % 17).to(torch.float32) for r in range(n))
        if not torch.equal(buf, want):
            print(f"rank {rank}: check failed at {nbytes} bytes", file=sys.stderr)
            sys.exit(1)
        it = iters(nbytes)
        for _ in range(max(3, it // 10)):
            dist.all_reduce(buf)
        us = []
        for _ in range(it):
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            us.append((time.perf_counter() - t0) * 1e6)
        med = statistics.median_high(us)
        algbw = nbytes / med / 1e3
        busbw = algbw * 2.0 * (n - 1) / n
        if rank == 0:
            print(f"RESULT {nbytes} {med:.1f} {algbw:.3f} {busbw:.3f}", flush=True)
        nbytes *= 4
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--min-bytes", type=int, default=1024)
    p.add_argument("--max-bytes", type=int, default=64 << 20)
    a = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(f"# torch {torch.__version__} distributed gloo allreduce, {a.ranks} ranks (processes) "
          f"on loopback, f32 tensors", flush=True)
    mp.spawn(run, args=(a.ranks, port, a.min_bytes, a.max_bytes), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    main()
