#!/usr/bin/env python3
"""TensorFlow 2 / Keras 3 peer for bench/peers_vs_yoke.sh.

Trains the Fashion-MNIST MLP or CNN of configs/fashion_mnist_{mlp,cnn}.yaml
with Keras `fit` and prints one JSON line on stdout with the field names of
`yoke train --output json` (samples_per_second, test_accuracy, steps,
train_seconds, peak_memory_bytes, ...). Progress goes to stderr.

  --mode fit        one process, --threads intra-op and inter-op threads
  --mode mirrored   tf.distribute.MirroredStrategy over --nproc logical CPU
                    devices of one process (threads: --threads x --nproc)
  --mode mwms       tf.distribute.MultiWorkerMirroredStrategy, --nproc
                    processes on loopback (TF_CONFIG), --threads each,
                    collectives on the RING (gRPC) implementation

The recipe, as in Yoke: the same IDX files decoded once into memory, pixels
/ 255, batches of 64 (the global batch: the strategies split it over the
replicas) from a seeded per-epoch shuffle with the last partial batch of 32
kept (938 steps per epoch), softmax cross-entropy averaged over the batch,
SGD with momentum 0.9 (Keras's v = m v - lr g; w += v is PyTorch's rule for a
constant lr), PyTorch's initialisation U(+-1/sqrt(fan_in)) for weights and
biases, channels-last (TensorFlow's native CPU layout).

samples_per_second counts every training step (the first, with tf.function
tracing, included), as `yoke train` does: training samples of all replicas /
seconds from the start to the end of each epoch's training loop, test
evaluation excluded. samples_per_second_after_warmup leaves out the first
20 steps.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(common.RECIPES), required=True)
    ap.add_argument("--mode", choices=["fit", "mirrored", "mwms"], default="fit")
    ap.add_argument("--nproc", type=int, default=2, help="replicas (mirrored, mwms)")
    ap.add_argument("--threads", type=int, default=2, help="threads per replica")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (development)")
    ap.add_argument("--jit", choices=["auto", "on", "off"], default="off",
                    help="Keras compile(jit_compile=...): XLA on or off (bench/README: off is faster here)")
    ap.add_argument("--data-dir", default=common.DATA_DIR)
    ap.add_argument("--worker-index", type=int, default=-1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if min(args.nproc, args.threads, args.epochs) <= 0 or args.max_steps < 0:
        ap.error("--nproc, --threads and --epochs must be > 0, --max-steps >= 0")
    return args


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def launch_mwms(args):
    """Starts --nproc workers of this script with TF_CONFIG, waits for all,
    and prints worker 0's result with every worker's peak RSS."""
    ports = free_ports(args.nproc)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for i in range(args.nproc):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster,
                                                     "task": {"type": "worker", "index": i}}))
        cmd = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + ["--worker-index", str(i)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    outs, rcs = [], []
    for p in procs:
        out, _ = p.communicate()
        outs.append(out)
        rcs.append(p.returncode)
    if any(rcs):
        common.log(f"tf_train mwms: worker exit statuses {rcs}")
        sys.exit(1)
    results = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    r = results[0]
    r["peak_memory_bytes_per_rank"] = [x["peak_memory_bytes"] for x in results]
    r["peak_memory_bytes"] = max(r["peak_memory_bytes_per_rank"])
    common.emit(r)


def make_custom_loop(tf, keras, strategy, model, ds, timer):
    """One epoch of training per call, with the Timer's bookkeeping."""
    dist_ds = strategy.experimental_distribute_dataset(ds)
    opt = model.optimizer
    replicas = strategy.num_replicas_in_sync

    @tf.function(reduce_retracing=True)
    def train_step(x, y):
        def step_fn(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                per = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                # The global batch is split evenly (32 -> 16 + 16 for the last one).
                global_n = tf.cast(tf.shape(y)[0] * replicas, tf.float32)
                loss = tf.reduce_sum(per) / global_n
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return strategy.reduce("SUM", strategy.run(step_fn, args=(x, y)), axis=None)

    def sync():  # a collective of both workers: neither times the other's start-up
        return float(strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None))

    def epoch_fn(epoch):
        sync()
        timer.on_epoch_begin(epoch)
        loss = None
        for x, y in dist_ds:
            loss = train_step(x, y)
            timer.on_train_batch_end(timer.steps)
        timer.on_epoch_end(epoch, {"loss": float(loss) if loss is not None else None})


    epoch_fn.sync = sync  # for the end: no worker leaves while the other still evaluates
    return epoch_fn


def main():
    args = parse_args()
    if args.mode == "mwms" and args.worker_index < 0:
        return launch_mwms(args)

    # Best CPU settings: oneDNN on (the default on x86 Linux since 2.9; set so
    # it cannot depend on the environment), quiet logs.
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf
    import keras
    keras.config.disable_traceback_filtering()  # whole tracebacks in the logs

    replicas = 1 if args.mode == "fit" else args.nproc
    per_process = args.threads * (args.nproc if args.mode == "mirrored" else 1)
    tf.config.threading.set_intra_op_parallelism_threads(per_process)
    tf.config.threading.set_inter_op_parallelism_threads(per_process)

    if args.mode == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(args.nproc)])
        devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        strategy = tf.distribute.MirroredStrategy(devices)
    elif args.mode == "mwms":
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=tf.distribute.experimental.CommunicationImplementation.RING))
    else:
        strategy = tf.distribute.get_strategy()  # the default (no distribution)

    keras.utils.set_random_seed(args.seed)
    recipe = common.RECIPES[args.model]
    x_train, y_train = common.load_split("train", args.data_dir, "nhwc")
    x_test, y_test = common.load_split("t10k", args.data_dir, "nhwc")
    n_train = x_train.shape[0]

    def torch_init(fan_in):
        lim = 1.0 / np.sqrt(fan_in)
        return (keras.initializers.RandomUniform(-lim, lim),
                keras.initializers.RandomUniform(-lim, lim))

    def dense(units, fan_in, act=None):
        k, b = torch_init(fan_in)
        return keras.layers.Dense(units, activation=act, kernel_initializer=k, bias_initializer=b)

    def conv(filters, cin):
        k, b = torch_init(cin * 25)
        return keras.layers.Conv2D(filters, 5, padding="same", activation="relu",
                                   kernel_initializer=k, bias_initializer=b)

    with strategy.scope():
        if args.model == "mlp":
            model = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Flatten(),
                                      dense(256, 784, "relu"), dense(128, 256, "relu"),
                                      dense(10, 128)])
        else:
            model = keras.Sequential([keras.Input((28, 28, 1)), conv(32, 1),
                                      keras.layers.MaxPooling2D(2), conv(64, 32),
                                      keras.layers.MaxPooling2D(2), keras.layers.Flatten(),
                                      dense(1024, 7 * 7 * 64, "relu"), dense(10, 1024)])
        jit = {"auto": "auto", "on": True, "off": False}[args.jit]
        model.compile(optimizer=keras.optimizers.SGD(recipe["lr"], momentum=recipe["momentum"]),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=jit)

    ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
    ds = ds.shuffle(n_train, seed=args.seed, reshuffle_each_iteration=True)
    ds = ds.batch(common.BATCH).prefetch(2)  # Yoke: one producer thread, prefetch 2
    if args.max_steps:
        ds = ds.take(args.max_steps)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = ds.with_options(opts)

    class Timer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.steps = 0
            self.seconds = 0.0
            self.warm_t = None
            self.warm_seconds = 0.0

        def on_epoch_begin(self, epoch, logs=None):
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if self.steps == common.WARMUP_STEPS:
                self.warm_t = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            t = time.perf_counter()
            self.seconds += t - self.t0
            if self.warm_t is not None:
                self.warm_seconds += t - max(self.warm_t, self.t0)
            self.last_loss = (logs or {}).get("loss")

    def evaluate():
        loss_sum, correct = 0.0, 0
        for i in range(0, x_test.shape[0], 1000):
            logits = np.asarray(model(x_test[i:i + 1000], training=False), dtype=np.float64)
            t = y_test[i:i + 1000]
            m = logits.max(1, keepdims=True)
            lse = np.log(np.exp(logits - m).sum(1)) + m[:, 0]
            loss_sum += float((lse - logits[np.arange(len(t)), t]).sum())
            correct += int((logits.argmax(1) == t).sum())
        return loss_sum / x_test.shape[0], correct / x_test.shape[0]

    common.log(f"tensorflow {tf.__version__} keras {keras.__version__}: {args.model}, mode "
               f"{args.mode}, {replicas} replica(s), {per_process} threads per process, "
               f"jit_compile {args.jit}")
    timer = Timer()
    history, samples, epochs_done = [], 0, 0
    wall_start = time.perf_counter()
    test_loss = test_acc = float("nan")
    custom = None
    if args.mode == "mwms":
        # Keras 3.15's fit() does not run under MultiWorkerMirroredStrategy
        # (bench/README.md has both errors), so this mode trains with the
        # custom loop of TensorFlow's MWMS tutorial: strategy.run of a
        # tf.function step, the Keras optimizer all-reducing (summing) the
        # replicas' gradients of sum(loss) / global batch.
        custom = make_custom_loop(tf, keras, strategy, model, ds, timer)
    for epoch in range(args.epochs):
        s0, t0 = timer.steps, timer.seconds
        if custom:
            custom(epoch)
        else:
            model.fit(ds, epochs=epoch + 1, initial_epoch=epoch, callbacks=[timer], verbose=0,
                      shuffle=False)  # the dataset shuffles itself
        steps = timer.steps - s0
        dt = timer.seconds - t0
        n = n_train if not args.max_steps else min(steps * common.BATCH, n_train)
        samples += n
        epochs_done += 1
        test_loss, test_acc = evaluate()
        history.append({"epoch": epoch + 1, "train_loss": timer.last_loss, "test_loss": test_loss,
                        "test_accuracy": test_acc, "seconds": dt, "samples_per_second": n / dt})
        common.log(f"epoch {epoch + 1}/{args.epochs}: {steps} steps, test acc {test_acc:.4f}, "
                   f"{n / dt:.0f} samples/s, {dt:.1f}s")
        if args.max_steps:
            break
    if custom:
        custom.sync()
    warm_samples = samples - common.WARMUP_STEPS * common.BATCH
    common.emit({
        "framework": f"tensorflow-{args.mode}",
        "model": args.model,
        "test_accuracy": test_acc,
        "test_loss": test_loss,
        "epochs": epochs_done,
        "steps": timer.steps,
        "samples_per_second": samples / max(timer.seconds, 1e-9),
        "samples_per_second_after_warmup": (warm_samples / timer.warm_seconds
                                            if timer.warm_seconds > 0 else None),
        "train_seconds": timer.seconds,
        "wall_seconds": time.perf_counter() - wall_start,
        "peak_memory_bytes": common.peak_rss_bytes(),
        "num_parameters": int(model.count_params()),
        "history": history,
        "replicas": replicas,
        "threads": per_process,
        "jit_compile": str(getattr(model, "jit_compile", args.jit)),
        "tensorflow_version": tf.__version__,
        "keras_version": keras.__version__,
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
    })


if __name__ == "__main__":
    main()
