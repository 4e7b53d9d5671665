#!/usr/bin/python3
"""PyTorch peer for bench/train_vs_pytorch.sh.

Trains the Fashion-MNIST MLP or CNN with the same recipe as
configs/fashion_mnist_{mlp,cnn}.yaml and prints one JSON line on stdout with
the same field names as `yoke train --output json` (samples_per_second,
test_accuracy, test_loss, epochs, steps, peak_memory_bytes, train_seconds, ...).
Progress goes to stderr.

What is matched with Yoke, so that throughput is comparable:
  - data: the same IDX .gz files, decoded once into one float32 tensor in
    memory, pixels / 255, no augmentation;
  - init: PyTorch's default (U(+-1/sqrt(fan_in)) for weights and biases),
    which is also what Yoke uses;
  - batches of 64 drawn from a per-epoch seeded permutation, the last
    partial batch kept (60000 = 937 * 64 + 32, so 938 steps per epoch);
  - softmax cross-entropy averaged over the batch, SGD with momentum;
  - throughput counts the training loop only (batch gather, forward,
    backward, optimizer step); the test evaluation after each epoch is
    excluded, as in Yoke;
  - torch.set_num_threads(--threads); the caller picks the BLAS (see
    train_vs_pytorch.sh).

Run it with Debian's /usr/bin/python3 (python3-torch); a pyenv python3 on
PATH has no torch.
"""

import argparse
import ctypes
import gzip
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA_DIR = "/usr/share/datasets/fashion-mnist"

# Recipes from configs/fashion_mnist_{mlp,cnn}.yaml.
RECIPES = {
    "mlp": {"lr": 0.05, "momentum": 0.9},
    "cnn": {"lr": 0.01, "momentum": 0.9},
}


def read_idx(path):
    """Decodes a gzipped IDX file into a numpy uint8 array of its dims."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {raw[:4].hex()})")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    offset = 4 + 4 * ndim
    count = int(np.prod(dims))
    if len(raw) - offset != count:
        raise ValueError(f"{path}: header says {dims} ({count} bytes), file has "
                         f"{len(raw) - offset} bytes of data")
    return np.frombuffer(raw, dtype=np.uint8, offset=offset).reshape(dims)


def load_split(data_dir, prefix):
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{prefix}: {images.shape[0]} images but {labels.shape[0]} labels")
    # (N, 28, 28) -> (N, 1, 28, 28): PyTorch's native NCHW layout (Yoke is
    # channels-last; each framework gets its own preferred layout).
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1).contiguous()
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


class Mlp(nn.Module):
    # x: (N, 1, 28, 28) -> logits: (N, 10)
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class Cnn(nn.Module):
    # x: (N, 1, 28, 28) -> conv5x5x32 same -> relu -> pool2 -> (N, 32, 14, 14)
    #   -> conv5x5x64 same -> relu -> pool2 -> (N, 64, 7, 7) -> dense 1024
    #   -> relu -> dense 10 -> logits: (N, 10)
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(7 * 7 * 64, 1024)
        self.fc2 = nn.Linear(1024, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return self.fc2(x)


def blas_info():
    """Which BLAS the process actually mapped, and OpenBLAS's threading mode.

    Reads /proc/self/maps rather than trusting update-alternatives, because
    LD_LIBRARY_PATH / LD_PRELOAD can override the alternatives symlinks.
    """
    info = {"libraries": []}
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if ".so" in line}
        info["libraries"] = sorted(p for p in libs
                                   if any(k in os.path.basename(p)
                                          for k in ("blas", "lapack", "gomp", "dnnl", "mkl")))
    except OSError:
        pass
    for p in info["libraries"]:
        if "openblas" in os.path.basename(p):
            try:
                lib = ctypes.CDLL(p)
                # 0 = sequential, 1 = pthreads, 2 = OpenMP.
                mode = lib.openblas_get_parallel()
                info["openblas_parallel"] = {0: "sequential", 1: "pthread",
                                             2: "openmp"}.get(mode, str(mode))
                info["openblas_threads"] = lib.openblas_get_num_threads()
                lib.openblas_get_config.restype = ctypes.c_char_p
                info["openblas_config"] = lib.openblas_get_config().decode()
            except (OSError, AttributeError):
                pass
            break
    return info


def epoch_loss_mean(batch_losses, n, bs):
    """Mean loss per example over an epoch from its per-batch means; every
    batch holds bs examples except possibly the last."""
    if not batch_losses:
        return 0.0
    means = torch.stack(batch_losses)
    last_n = n - bs * (len(batch_losses) - 1)
    return (means[:-1].sum().item() * bs + means[-1].item() * last_n) / n


def evaluate(model, x, y, batch=1000):
    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            logits = model(x[i:i + batch])
            t = y[i:i + batch]
            loss_sum += F.cross_entropy(logits, t, reduction="sum").item()
            correct += (logits.argmax(1) == t).sum().item()
    model.train()
    n = max(x.shape[0], 1)
    return loss_sum / n, correct / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(RECIPES), required=True)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0,
                    help="stop after this many training steps (0 = off)")
    ap.add_argument("--data-dir", default=DATA_DIR)
    args = ap.parse_args()
    if args.epochs <= 0 or args.threads <= 0 or args.batch_size <= 0 or args.max_steps < 0:
        ap.error("--epochs, --threads and --batch-size must be > 0, --max-steps >= 0")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    recipe = RECIPES[args.model]

    x_train, y_train = load_split(args.data_dir, "train")
    x_test, y_test = load_split(args.data_dir, "t10k")
    model = Mlp() if args.model == "mlp" else Cnn()
    opt = torch.optim.SGD(model.parameters(), lr=recipe["lr"], momentum=recipe["momentum"])
    gen = torch.Generator().manual_seed(args.seed)
    n_train = x_train.shape[0]
    bs = args.batch_size
    num_params = sum(p.numel() for p in model.parameters())
    print(f"pytorch {torch.__version__}: {args.model}, {num_params} parameters, "
          f"{args.threads} threads, train {n_train}, test {x_test.shape[0]}",
          file=sys.stderr)

    steps, samples, train_seconds = 0, 0, 0.0
    history = []
    epochs_done = 0
    test_loss = test_acc = float("nan")
    train_loss = 0.0
    stopped_mid_epoch = False
    wall_start = time.perf_counter()
    for epoch in range(args.epochs):
        perm = torch.randperm(n_train, generator=gen)
        batch_losses = []  # detached batch means, summed once per epoch
        epoch_n = 0
        t0 = time.perf_counter()
        for i in range(0, n_train, bs):
            if args.max_steps and steps >= args.max_steps:
                stopped_mid_epoch = True
                break
            idx = perm[i:i + bs]
            xb, yb = x_train[idx], y_train[idx]
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            # Keep the detached mean and sum once per epoch: cheaper per step
            # than .item() or an in-loop running sum.
            batch_losses.append(loss.detach())
            epoch_n += yb.shape[0]
            steps += 1
        dt = time.perf_counter() - t0
        train_seconds += dt
        samples += epoch_n
        if stopped_mid_epoch:
            break
        epochs_done += 1
        train_loss = epoch_loss_mean(batch_losses, epoch_n, bs)
        test_loss, test_acc = evaluate(model, x_test, y_test)
        sps = epoch_n / max(dt, 1e-9)
        history.append({"epoch": epoch + 1, "train_loss": train_loss, "test_loss": test_loss,
                        "test_accuracy": test_acc, "seconds": dt, "samples_per_second": sps})
        print(f"epoch {epoch + 1}/{args.epochs}: train loss {train_loss:.4f}, "
              f"test loss {test_loss:.4f}, test acc {test_acc:.4f}, {sps:.0f} samples/s, "
              f"{dt:.1f}s", file=sys.stderr)
    if stopped_mid_epoch or not history:
        # Stopped early (--max-steps): report the model as it is now, and the
        # training loss of the partial epoch, as Yoke does.
        test_loss, test_acc = evaluate(model, x_test, y_test)
        if epoch_n:
            train_loss = epoch_loss_mean(batch_losses, epoch_n, bs)

    result = {
        "framework": "pytorch",
        "model": args.model,
        "test_accuracy": test_acc,
        "test_loss": test_loss,
        "epochs": epochs_done,
        "steps": steps,
        "samples_per_second": samples / max(train_seconds, 1e-9),
        "train_loss": train_loss,
        "train_seconds": train_seconds,
        "wall_seconds": time.perf_counter() - wall_start,
        # ru_maxrss is KiB on Linux.
        "peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "num_parameters": num_params,
        "history": history,
        "device": "cpu",
        "threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "blas": blas_info(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
