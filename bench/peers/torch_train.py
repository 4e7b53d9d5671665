#!/usr/bin/env python3
"""PyTorch 2.x peer for bench/peers_vs_yoke.sh: eager, torch.compile, and DDP.

Trains the Fashion-MNIST MLP or CNN of bench/pytorch_train.py (the same
model classes, IDX reader, initialisation and recipe, imported from it, so
the PyTorch 1.13 peer and this one train the same thing) and prints one JSON
line on stdout with the field names of `yoke train --output json`.

  --compile         torch.compile the model (TorchInductor; on the CPU it
                    generates C++/OpenMP kernels, compiled with the system g++)
  --channels-last   the CNN in torch.channels_last memory format (NHWC),
                    oneDNN's preferred layout on the CPU
  --nproc N         DistributedDataParallel on gloo, N processes on loopback,
                    --threads each; the global batch of 64 split evenly (as
                    bench/pytorch_ddp.py does)

samples_per_second counts every training step (with --compile, the first
step's compilation included), as `yoke train` does: training samples of all
ranks / rank 0's seconds in the training loop (batch gather, forward,
backward with its allreduce, optimizer step); test evaluation after each
epoch is excluded. samples_per_second_after_warmup leaves out the first 20
steps; first_step_seconds shows what compilation cost.
"""

import argparse
import json
import os
import socket
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import common  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import pytorch_train as pt  # noqa: E402  (model, data and evaluation code of the 1.13 peer)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(pt.RECIPES), required=True)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="threads per process")
    ap.add_argument("--nproc", type=int, default=1, help="DDP processes (1: no DDP)")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--compile-mode", default=None,
                    help="torch.compile mode (default, max-autotune-no-cudagraphs, ...)")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--data-dir", default=pt.DATA_DIR)
    args = ap.parse_args()
    if min(args.epochs, args.threads, args.nproc) <= 0 or args.max_steps < 0:
        ap.error("--epochs, --threads and --nproc must be > 0, --max-steps >= 0")
    if common.BATCH % args.nproc:
        ap.error(f"--nproc must divide the batch of {common.BATCH}")
    return args


def run(rank, args, port, out_dir):
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(args.threads)
    except RuntimeError:
        pass  # already set in this process
    world = args.nproc
    if world > 1:
        import torch.distributed as dist
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(args.seed)
    recipe = pt.RECIPES[args.model]
    x_train, y_train = pt.load_split(args.data_dir, "train")
    x_test, y_test = pt.load_split(args.data_dir, "t10k")
    model = pt.Mlp() if args.model == "mlp" else pt.Cnn()
    fmt = torch.contiguous_format
    if args.channels_last and args.model == "cnn":
        fmt = torch.channels_last
        model = model.to(memory_format=fmt)
        x_train = x_train.contiguous(memory_format=fmt)
        x_test = x_test.contiguous(memory_format=fmt)
    net = model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(model)
    if args.compile:
        kw = {"mode": args.compile_mode} if args.compile_mode else {}
        net = torch.compile(net, **kw)
    opt = torch.optim.SGD(model.parameters(), lr=recipe["lr"], momentum=recipe["momentum"])
    gen = torch.Generator().manual_seed(args.seed)
    n_train, bs = x_train.shape[0], common.BATCH
    if rank == 0:
        common.log(f"torch {torch.__version__}: {args.model}, {world} process(es) x "
                   f"{args.threads} threads, compile {args.compile}, channels_last "
                   f"{fmt is torch.channels_last}")

    steps, samples, train_seconds = 0, 0, 0.0
    first_step_seconds, warm_t, warm_seconds = None, None, 0.0
    history, epochs_done = [], 0
    train_loss = test_loss = test_acc = float("nan")
    wall_start = time.perf_counter()
    for epoch in range(args.epochs):
        perm = torch.randperm(n_train, generator=gen)  # identical on every rank
        batch_losses, epoch_n = [], 0
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        for i in range(0, n_train, bs):
            if args.max_steps and steps >= args.max_steps:
                break
            g = perm[i:i + bs]
            per = -(-g.shape[0] // world)
            idx = g[rank * per:(rank + 1) * per]
            xb, yb = x_train[idx], y_train[idx]
            loss = F.cross_entropy(net(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            batch_losses.append(loss.detach())
            epoch_n += g.shape[0]  # global samples
            steps += 1
            if steps == 1:
                first_step_seconds = time.perf_counter() - t0
            if steps == common.WARMUP_STEPS:
                warm_t = time.perf_counter()
        t1 = time.perf_counter()
        dt = t1 - t0
        train_seconds += dt
        if warm_t is not None:
            warm_seconds += t1 - max(warm_t, t0)
        samples += epoch_n
        epochs_done += 1
        train_loss = pt.epoch_loss_mean(batch_losses, epoch_n, bs) if batch_losses else 0.0
        if rank == 0:
            # Eager module (shares the parameters): evaluation is not timed,
            # and compiling it too would only add wall time.
            test_loss, test_acc = pt.evaluate(model, x_test, y_test)
            history.append({"epoch": epoch + 1, "train_loss": train_loss, "test_loss": test_loss,
                            "test_accuracy": test_acc, "seconds": dt,
                            "samples_per_second": epoch_n / max(dt, 1e-9)})
            common.log(f"epoch {epoch + 1}/{args.epochs}: test acc {test_acc:.4f}, "
                       f"{epoch_n / dt:.0f} samples/s, {dt:.1f}s")
        if world > 1:
            dist.barrier()
        if args.max_steps and steps >= args.max_steps:
            break
    warm_samples = samples - common.WARMUP_STEPS * bs
    result = {
        "framework": "pytorch2" + ("-compile" if args.compile else "") + ("-ddp" if world > 1 else ""),
        "model": args.model,
        "test_accuracy": test_acc,
        "test_loss": test_loss,
        "epochs": epochs_done,
        "steps": steps,
        "samples_per_second": samples / max(train_seconds, 1e-9),
        "samples_per_second_after_warmup": warm_samples / warm_seconds if warm_seconds > 0 else None,
        "first_step_seconds": first_step_seconds,
        "train_loss": train_loss,
        "train_seconds": train_seconds,
        "wall_seconds": time.perf_counter() - wall_start,
        "peak_memory_bytes": common.peak_rss_bytes(),
        "history": history,
        "replicas": world,
        "threads": torch.get_num_threads(),
        "channels_last": fmt is torch.channels_last,
        "compile": bool(args.compile),
        "torch_version": torch.__version__,
        "torch_config": {kv.split("=")[0].strip(): kv.split("=", 1)[1].strip()
                         for kv in torch.__config__.show().split("Build settings:")[-1].split(",")
                         if "=" in kv and kv.split("=")[0].strip() in
                         ("BLAS_INFO", "USE_MKLDNN", "USE_OPENMP", "CXX_COMPILER")},
    }
    if world > 1:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


def main():
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="torch-peer.") as out_dir:
        if args.nproc == 1:
            run(0, args, 0, out_dir)
        else:
            import torch.multiprocessing as mp
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            mp.spawn(run, args=(args, port, out_dir), nprocs=args.nproc, join=True)
        results = []
        for r in range(args.nproc):
            with open(os.path.join(out_dir, f"rank{r}.json")) as f:
                results.append(json.load(f))
    res = results[0]
    res["peak_memory_bytes_per_rank"] = [r["peak_memory_bytes"] for r in results]
    res["peak_memory_bytes"] = max(res["peak_memory_bytes_per_rank"])
    common.emit(res)


if __name__ == "__main__":
    main()
