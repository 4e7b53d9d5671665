#!/usr/bin/env python3
"""TensorFlow 2 / Keras 3 peer for bench/resnet50_vs_torch.sh: ResNet training
steps with Keras `fit`.

The networks are the ones Yoke's zoo builds (engine/zoo/model_zoo_resnet.cc)
and bench/resnet50_torch.py writes out for PyTorch:
  resnet50  224x224: conv7x7/2 -> bn -> relu -> maxpool3x3/2, four stages of
            bottlenecks (3, 4, 6, 3; the stride on the 3x3, "ResNet v1.5"),
            a 1x1 conv + batch norm shortcut where the shape changes
  resnet20  32x32 (He et al. 2015, section 4.2): conv3x3 -> bn -> relu, three
            stages of three basic blocks (16, 32, 64 channels), the
            shortcuts that change shape 1x1 conv + batch norm (option B)
then global average pooling and a dense layer. Convolutions before a batch
norm have no bias; batch norm as PyTorch's (epsilon 1e-5, momentum 0.1).
The trainable parameter count is printed and checked by the caller against
Yoke's (23,528,522 and 272,474 with 10 classes).

Inputs are random images with random labels from a fixed seed, made before
timing, in channels-last (TensorFlow's native CPU layout); SGD with momentum
0.9 at lr 0.01, softmax cross-entropy, `fit` as a user writes it (Keras's
default jit_compile). Prints one JSON line with the field names of `yoke
train --output json`: steps, samples_per_second over the timed steps (the
first --warmup are left out: tracing and compilation), train_loss,
num_parameters, peak_memory_bytes (this process's peak RSS).
"""

import argparse
import json
import os
import resource
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def build(keras, model, classes):
    layers = keras.layers

    def conv_bn(x, filters, kernel, stride, relu):
        x = layers.Conv2D(filters, kernel, stride, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization(epsilon=1e-5, momentum=0.9)(x)
        return layers.ReLU()(x) if relu else x

    def block(x, planes, stride, bottleneck):
        out = planes * 4 if bottleneck else planes
        if bottleneck:
            y = conv_bn(x, planes, 1, 1, True)
            y = conv_bn(y, planes, 3, stride, True)
            y = conv_bn(y, out, 1, 1, False)
        else:
            y = conv_bn(x, planes, 3, stride, True)
            y = conv_bn(y, planes, 3, 1, False)
        shortcut = x
        if stride != 1 or x.shape[-1] != out:
            shortcut = conv_bn(x, out, 1, stride, False)
        return layers.ReLU()(layers.Add()([y, shortcut]))

    if model == "resnet50":
        size, width, blocks, bottleneck = 224, 64, [3, 4, 6, 3], True
    else:
        size, width, blocks, bottleneck = 32, 16, [3, 3, 3], False
    inp = keras.Input((size, size, 3))
    if model == "resnet50":
        x = conv_bn(inp, width, 7, 2, True)
        x = layers.MaxPooling2D(3, 2, padding="same")(x)
    else:
        x = conv_bn(inp, width, 3, 1, True)
    for stage, n in enumerate(blocks):
        for b in range(n):
            x = block(x, width << stage, 2 if stage > 0 and b == 0 else 1, bottleneck)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, layers.Dense(classes)(x)), size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50", choices=["resnet50", "resnet20"])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: Keras's mixed_bfloat16 policy (bf16 compute, fp32 variables)")
    args = ap.parse_args()
    if args.steps <= args.warmup:
        ap.error("--steps must exceed --warmup")

    import numpy as np
    import tensorflow as tf
    import keras

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    keras.utils.set_random_seed(1)
    if args.precision == "bf16":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model, size = build(keras, args.model, args.classes)
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(1)
    # One batch, repeated: the figure is the model's, not an input pipeline's.
    x = rng.random((args.batch, size, size, 3), dtype=np.float32)
    y = rng.integers(0, args.classes, args.batch).astype(np.int64)
    ds = tf.data.Dataset.from_tensors((x, y)).repeat(args.steps)

    class Timer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.t0 = None
            self.t1 = None
            self.loss = None

        def on_train_batch_begin(self, batch, logs=None):
            if batch == args.warmup:
                self.t0 = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.t1 = time.perf_counter()
            self.loss = float(logs["loss"]) if logs and "loss" in logs else self.loss

    timer = Timer()
    model.fit(ds, epochs=1, callbacks=[timer], verbose=0)
    timed = args.steps - args.warmup
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    print(json.dumps({
        "framework": f"tensorflow {tf.__version__} keras {keras.__version__} fit"
                     + (" bf16" if args.precision == "bf16" else "") + " nhwc",
        "steps": args.steps,
        "samples_per_second": timed * args.batch / (timer.t1 - timer.t0),
        "train_loss": timer.loss,
        "num_parameters": trainable,
        "peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }))


if __name__ == "__main__":
    main()
