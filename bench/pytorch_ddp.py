#!/usr/bin/python3
"""PyTorch DistributedDataParallel peer for bench/ddp_vs_yoke.sh.

Trains the Fashion-MNIST MLP or CNN of bench/pytorch_train.py (same model,
data, init and recipe; imported from it) with DDP on the gloo backend:
--nproc processes on this machine, --threads threads each, one global batch
of --batch-size split evenly over the processes (rank r takes its slice of
every global batch of a per-epoch seeded permutation, so the global batches
are exactly the single-process ones). DDP averages gradients over the
processes, which for equal slices is the global batch mean.

Prints one JSON line on stdout (rank 0's view) with the field names of
`yoke train --output json`: samples_per_second is the global throughput,
all ranks' training samples / rank 0's seconds in the training loop (batch
gather, forward, backward with its allreduce, optimizer step); test
evaluation after each epoch (rank 0 only, the others wait at a barrier) is
excluded, as in Yoke.

Run it with Debian's /usr/bin/python3 (python3-torch).
"""

import argparse
import json
import os
import resource
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_train as pt  # noqa: E402  (the single-process peer's model and data code)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port, out_path):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.nproc)
    torch.manual_seed(args.seed)  # the same initial parameters everywhere (DDP also broadcasts)
    recipe = pt.RECIPES[args.model]
    x_train, y_train = pt.load_split(args.data_dir, "train")
    if rank == 0:
        x_test, y_test = pt.load_split(args.data_dir, "t10k")
    model = pt.Mlp() if args.model == "mlp" else pt.Cnn()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=recipe["lr"], momentum=recipe["momentum"])
    gen = torch.Generator().manual_seed(args.seed)
    n_train, bs, world = x_train.shape[0], args.batch_size, args.nproc
    if bs % world:
        raise SystemExit(f"--batch-size {bs} must be a multiple of --nproc {world}")
    local = bs // world

    steps, samples, train_seconds = 0, 0, 0.0
    history, epochs_done = [], 0
    train_loss = test_loss = test_acc = float("nan")
    wall_start = time.perf_counter()
    for epoch in range(args.epochs):
        perm = torch.randperm(n_train, generator=gen)  # identical on every rank
        batch_losses, epoch_n = [], 0
        dist.barrier()
        t0 = time.perf_counter()
        for i in range(0, n_train, bs):
            if args.max_steps and steps >= args.max_steps:
                break
            g = perm[i:i + bs]
            # This rank's share of the global batch (the last, partial global
            # batch of 32 is split 16/16).
            per = -(-g.shape[0] // world)
            idx = g[rank * per:(rank + 1) * per]
            xb, yb = x_train[idx], y_train[idx]
            loss = F.cross_entropy(ddp(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            batch_losses.append(loss.detach())
            epoch_n += g.shape[0]  # global samples
            steps += 1
        dt = time.perf_counter() - t0
        train_seconds += dt
        samples += epoch_n
        epochs_done += 1
        train_loss = pt.epoch_loss_mean(batch_losses, epoch_n, bs) if batch_losses else 0.0
        if rank == 0:
            test_loss, test_acc = pt.evaluate(model, x_test, y_test)
            sps = epoch_n / max(dt, 1e-9)
            history.append({"epoch": epoch + 1, "train_loss": train_loss, "test_loss": test_loss,
                            "test_accuracy": test_acc, "seconds": dt, "samples_per_second": sps})
            print(f"epoch {epoch + 1}/{args.epochs}: test acc {test_acc:.4f}, "
                  f"{sps:.0f} samples/s (global), {dt:.1f}s", file=sys.stderr)
        if args.max_steps and steps >= args.max_steps:
            break
    dist.barrier()
    if rank == 0:
        result = {
            "framework": "pytorch-ddp",
            "model": args.model,
            "test_accuracy": test_acc,
            "test_loss": test_loss,
            "epochs": epochs_done,
            "steps": steps,
            "samples_per_second": samples / max(train_seconds, 1e-9),
            "train_loss": train_loss,
            "train_seconds": train_seconds,
            "wall_seconds": time.perf_counter() - wall_start,
            "peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "history": history,
            "device": "cpu",
            "replicas": world,
            "threads": torch.get_num_threads(),
            "backend": "gloo",
            "torch_version": torch.__version__,
        }
        with open(out_path, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(pt.RECIPES), required=True)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="threads per process")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64, help="global batch")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--data-dir", default=pt.DATA_DIR)
    args = ap.parse_args()
    if min(args.nproc, args.threads, args.epochs, args.batch_size) <= 0 or args.max_steps < 0:
        ap.error("--nproc, --threads, --epochs and --batch-size must be > 0")
    out_path = f"/tmp/pytorch_ddp_{os.getpid()}.json"
    mp.spawn(worker, args=(args, free_port(), out_path), nprocs=args.nproc, join=True)
    with open(out_path) as f:
        result = json.load(f)
    os.unlink(out_path)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
