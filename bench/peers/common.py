"""Shared by the bench/peers/ scripts: the Fashion-MNIST data, the recipes of
configs/fashion_mnist_{mlp,cnn}.yaml, peak RSS and the JSON result line.

numpy only (no framework import), so a TensorFlow peer does not map torch
and a torch peer does not map TensorFlow: each process's peak RSS is its own
framework's.
"""

import gzip
import json
import os
import resource
import sys

import numpy as np

DATA_DIR = "/usr/share/datasets/fashion-mnist"
TRAIN_N, BATCH = 60000, 64
# configs/fashion_mnist_{mlp,cnn}.yaml (and bench/pytorch_train.py's RECIPES).
RECIPES = {
    "mlp": {"lr": 0.05, "momentum": 0.9},
    "cnn": {"lr": 0.01, "momentum": 0.9},
}
# Steps left out of the informational "after warm-up" figure (tracing,
# compilation, first-touch allocations). The headline samples_per_second
# counts every step, as `yoke train` does.
WARMUP_STEPS = 20


def read_idx(path):
    """Decodes a gzipped unsigned-byte IDX file into a numpy array of its dims."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {raw[:4].hex()})")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    offset = 4 + 4 * ndim
    count = int(np.prod(dims))
    if len(raw) - offset != count:
        raise ValueError(f"{path}: header says {dims}, file has {len(raw) - offset} data bytes")
    return np.frombuffer(raw, dtype=np.uint8, offset=offset).reshape(dims)


def load_split(prefix, data_dir=DATA_DIR, layout="nhwc"):
    """float32 images / 255 in `layout` (nhwc: (N, 28, 28, 1); nchw: (N, 1, 28, 28)),
    int64 labels."""
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{prefix}: {images.shape[0]} images but {labels.shape[0]} labels")
    x = images.astype(np.float32) / 255.0
    x = x[:, :, :, None] if layout == "nhwc" else x[:, None, :, :]
    return np.ascontiguousarray(x), labels.astype(np.int64)


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def emit(result):
    """The result as the last line of stdout (what bench/bench_lib.sh keeps)."""
    sys.stdout.flush()
    print(json.dumps(result), flush=True)


def log(msg):
    print(msg, file=sys.stderr, flush=True)
