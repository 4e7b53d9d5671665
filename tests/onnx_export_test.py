#!/usr/bin/env python3
"""`yoke export --format onnx` checked by onnx and onnxruntime, against `yoke predict`.

One case per run (--case), each its own ctest entry (tests/CMakeLists.txt):
  mlp, cnn    the zoo models, trained briefly on Fashion-MNIST (its first 2,000
              training images; the test split capped at 1,000 images)
  resnet20    the zoo's CIFAR-style ResNet-20, trained 2 steps on synthetic
              32x32x3 data; 1,000 synthetic test inputs
  resnet50    the zoo's ResNet-50 at full width with 1,000 classes (25.6 M
              parameters; random weights: 1 step of SGD) on 64x64x3 inputs,
              which get the ImageNet stem (7x7/2 convolution, 3x3/2 max
              pool); 1,000 synthetic test inputs
  layers      a hand-written model with every layer type of job.proto
  images      an image_folder model (PNG files this script writes): class
              names and image settings in the metadata, `yoke predict` on a
              folder
Each case trains with `yoke train --output json`, then
  * `yoke predict` on the test split reaches exactly the test accuracy the
    training run reported, and writes its logits and preprocessed inputs;
  * `yoke export` writes a dynamic-batch model: onnx.checker.check_model
    (full_check) and strict shape inference pass; onnxruntime on the same
    inputs gives logits within a relative L2 of 1e-5 of Yoke's, with the same
    argmax for every input;
  * the metadata says the layout, the input shape and the preprocessing of
    the job's spec (and the class names for an image folder);
  * a fixed batch (--batch) and a softmax export (--softmax) run as well, on
    the first 200 inputs.
The measured relative L2 and the times are printed.

  tests/onnx_export_test.py --bin build/bin --case cnn

onnx and onnxruntime come from $YOKE_VENV (/opt/yoke/venv; scripts/install-deps.sh
installs them, pinned): the script re-runs itself with that venv's python.
Without them, or without Fashion-MNIST for mlp and cnn, it prints SKIP and exits
77 (ctest: SKIP_RETURN_CODE).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

SKIP = 77
REEXEC = "_YOKE_ONNX_EXPORT_TEST_REEXEC"
MAX_REL_L2 = 1e-5
FASHION = "/usr/share/datasets/fashion-mnist"

FASHION_DATA = f"""
data:
  train: {{format: idx, images: {FASHION}/train-images-idx3-ubyte.gz,
          labels: {FASHION}/train-labels-idx1-ubyte.gz, num_examples: 2000}}
  test: {{format: idx, images: {FASHION}/t10k-images-idx3-ubyte.gz,
         labels: {FASHION}/t10k-labels-idx1-ubyte.gz, num_examples: 1000}}
  transform: {{divisor: 255, mean: [0.286], std: [0.353]}}
"""


def synthetic(shape, classes, train, test):
    return f"""
data:
  train: {{format: synthetic, shape: {shape}, num_classes: {classes},
          num_examples: {train}, seed: 1}}
  test: {{format: synthetic, shape: {shape}, num_classes: {classes},
         num_examples: {test}, seed: 2}}
  transform: {{divisor: 2, mean: [0.1, 0.2, 0.3], std: [0.5, 1.5, 2.0]}}
"""


TRAINING = """
training:
  epochs: 1
  batch_size: {batch}
  max_steps: {steps}
  seed: 3
  optimizer: {{type: sgd, lr: 0.05, momentum: 0.9}}
logging: {{tensorboard_dir: "off"}}
"""

# Every layer type of proto/yoke/v1/job.proto, on every rank it takes.
LAYERS = """
model:
  layers:
    - {name: c1, conv2d: {filters: 6, kernel: 3}}
    - {name: bn1, batch_norm: {momentum: 0.5}}
    - {name: r1, relu: {}}
    - {name: c2, conv2d: {filters: 6, kernel: 3, stride: 2, no_bias: true}}
    - {name: g1, gelu: {}}
    - {name: c3, conv2d: {filters: 6, kernel: 1}, inputs: [r1]}
    - {name: mp, max_pool2d: {size: 3, stride: 2, padding: same}, inputs: [c3]}
    - {name: sum, add: {}, inputs: [g1, mp]}
    - {name: lr, leaky_relu: {alpha: 0.2}}
    - {name: ap, avg_pool2d: {size: 3, stride: 2, padding: same}}
    - {name: c4, conv2d: {filters: 4, kernel: 2, padding: valid}}
    - {name: sm, softmax: {}}
    - {name: th, tanh: {}}
    - {name: gap, global_avg_pool: {}, inputs: [sum]}
    - {name: fl, flatten: {}, inputs: [th]}
    - {name: d1, dense: {units: 16}}
    - {name: bn2, batch_norm: {momentum: 0.5, epsilon: 0.001}}
    - {name: sg, sigmoid: {}}
    - {name: dr, dropout: {rate: 0.3}}
    - {name: d2, dense: {units: 16, no_bias: true}, inputs: [gap]}
    - {name: d3, dense: {units: 16}, inputs: [gap]}
    - {name: s2, add: {}, inputs: [dr, d2, d3]}
    - {name: g2, gelu: {}}
    - {name: out, dense: {units: 5}}
"""

# name -> (spec without the checkpoint, max_steps, batch size)
CASES = {
    "mlp": ("model: {zoo: mlp, dropout: 0.2}" + FASHION_DATA, 30, 64),
    "cnn": ("model: {zoo: cnn, dropout: 0.2}" + FASHION_DATA, 30, 64),
    "resnet20": ("model: {zoo: resnet20}" + synthetic([32, 32, 3], 10, 64, 1000), 2, 32),
    "resnet50": ("model: {zoo: resnet50}" + synthetic([64, 64, 3], 1000, 8, 1000), 1, 8),
    "layers": (LAYERS + synthetic([11, 11, 3], 5, 512, 1000), 16, 32),
    "images": ("""
model:
  layers:
    - {conv2d: {filters: 4, kernel: 3}}
    - {batch_norm: {}}
    - {relu: {}}
    - {global_avg_pool: {}}
    - {dense: {units: 3}}
data:
  train: {format: image_folder, root: ROOT, image_size: [10, 10], channels: 3,
          crop: random, crop_size: [8, 8]}
  test: {format: image_folder, root: ROOT, image_size: [10, 10], channels: 3,
         crop: center, crop_size: [8, 8]}
  transform: {divisor: 255}
""", 4, 8),
}


def fail(msg):
    print(f"onnx_export_test: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def import_or_reexec():
    try:
        import numpy  # noqa: F401
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
        return
    except ImportError:
        pass
    venv = os.environ.get("YOKE_VENV", "/opt/yoke/venv")
    python = os.path.join(venv, "bin", "python3")
    if os.environ.get(REEXEC) != "1" and os.access(python, os.X_OK):
        os.environ[REEXEC] = "1"
        os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])
    print(f"SKIP: numpy, onnx or onnxruntime is not installed (looked in {sys.executable} "
          f"and {python}); run scripts/install-deps.sh")
    sys.exit(SKIP)


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return p


def write_images(root):
    """Three classes of 8 PNG files each; the class shows in the colour."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(5)
    for c, name in enumerate(["cat", "dog", "émeu"]):
        os.makedirs(os.path.join(root, name))
        for i in range(8):
            img = rng.integers(0, 120, size=(12, 12, 3), dtype=np.uint8)
            img[:, :, c] += 120
            Image.fromarray(img).save(os.path.join(root, name, f"{i}.png"))


def check_metadata(meta, spec_text, case):
    for key in ["yoke.input_layout", "yoke.input_shape", "yoke.transform.divisor",
                "yoke.transform.mean", "yoke.transform.std", "yoke.preprocessing", "yoke.output"]:
        if key not in meta:
            fail(f"{case}: metadata has no {key}: {meta}")
    want = re.search(r"transform: \{divisor: ([0-9.]+)(?:, mean: (\[[^]]*\]), std: (\[[^]]*\]))?",
                     spec_text)
    if float(meta["yoke.transform.divisor"]) != float(want.group(1)):
        fail(f"{case}: divisor {meta['yoke.transform.divisor']}, the spec says {want.group(1)}")
    import numpy as np
    for i, key in [(2, "yoke.transform.mean"), (3, "yoke.transform.std")]:
        expect = np.float32(json.loads(want.group(i))) if want.group(i) else np.float32([])
        if not np.array_equal(np.float32(json.loads(meta[key])), expect):
            fail(f"{case}: {key} is {meta[key]}, the spec says {want.group(i)}")
    if case == "images":
        if json.loads(meta.get("yoke.class_names", "null")) != ["cat", "dog", "émeu"]:
            fail(f"images: class names in the metadata: {meta.get('yoke.class_names')}")
        image = json.loads(meta["yoke.image"])
        if image["crop"] != "center" or image["crop_size"] != [8, 8]:
            fail(f"images: yoke.image says {image}")


def onnx_outputs(path, x, batch=None):
    import numpy as np
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    s = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    if batch is None:
        return s.run(None, {"input": x})[0]
    return np.concatenate([s.run(None, {"input": x[i:i + batch]})[0]
                           for i in range(0, len(x), batch)])


def check_model(path, case):
    import onnx
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the folder of yoke and yoke-model")
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    args = ap.parse_args()
    import_or_reexec()
    import numpy as np
    case = args.case
    if case in ("mlp", "cnn") and not os.path.isdir(FASHION):
        print(f"SKIP: {FASHION} is missing (package dataset-fashion-mnist)")
        sys.exit(SKIP)
    yoke = os.path.join(os.path.abspath(args.bin), "yoke")
    env = dict(os.environ, OMP_NUM_THREADS="2")
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="onnx_export_test.") as tmp:
        spec_text, steps, batch = CASES[case]
        if case == "images":
            write_images(os.path.join(tmp, "images"))
            spec_text = spec_text.replace("ROOT", os.path.join(tmp, "images"))
        spec_text += TRAINING.format(batch=batch, steps=steps)
        spec_text += f"checkpoint: {{dir: {tmp}/ckpt}}\n"
        job = os.path.join(tmp, "job.yaml")
        with open(job, "w", encoding="utf-8") as f:
            f.write(f"name: onnx-{case}\n" + spec_text)
        result = json.loads(run([yoke, "train", job, "--output", "json"], env=env)
                            .stdout.strip().splitlines()[-1])
        t_train = time.time() - t0

        ckpt = os.path.join(tmp, "ckpt")
        logits_f, inputs_f = os.path.join(tmp, "logits"), os.path.join(tmp, "inputs")
        p = run([yoke, "predict", ckpt, "--top-k", "3", "-o", os.path.join(tmp, "pred.csv"),
                 "--logits", logits_f, "--inputs", inputs_f], env=env)
        m = re.search(r"accuracy ([0-9.]+) \((\d+) of (\d+) labelled", p.stderr)
        if not m:
            fail(f"{case}: yoke predict printed no accuracy:\n{p.stderr}")
        correct, n = int(m.group(2)), int(m.group(3))
        reported = result["test_accuracy"]
        if abs(correct / n - reported) > 1e-12:
            fail(f"{case}: yoke predict's accuracy {correct}/{n} is not the reported {reported}")
        with open(os.path.join(tmp, "pred.csv"), encoding="utf-8") as f:
            rows = f.read().splitlines()
        if len(rows) != n + 1 or not rows[0].startswith("index,label,class1,probability1"):
            fail(f"{case}: pred.csv has {len(rows)} lines, header {rows[0]!r}")

        onnx_path = os.path.join(tmp, "model.onnx")
        t1 = time.time()
        run([yoke, "export", ckpt, "--format", "onnx", "-o", onnx_path], env=env)
        model = check_model(onnx_path, case)
        meta = {e.key: e.value for e in model.metadata_props}
        check_metadata(meta, spec_text, case)
        shape = json.loads(meta["yoke.input_shape"])
        x = np.fromfile(inputs_f, np.float32).reshape([-1] + shape)
        z = np.fromfile(logits_f, np.float32).reshape(len(x), -1)
        if len(x) != n:
            fail(f"{case}: {len(x)} inputs written for {n} examples")
        o = onnx_outputs(onnx_path, x)
        rel = float(np.linalg.norm(o - z) / np.linalg.norm(z))
        same_argmax = bool((o.argmax(1) == z.argmax(1)).all())
        onnx_acc = float((o.argmax(1) == z.argmax(1)).mean())
        print(f"{case}: {n} inputs, relative L2 {rel:.3e}, argmax equal: {same_argmax}, "
              f"accuracy yoke {correct / n:.4f} reported {reported:.4f}")
        if not rel <= MAX_REL_L2:
            fail(f"{case}: onnxruntime's logits differ from Yoke's: relative L2 {rel:.3e}")
        if not same_argmax:
            fail(f"{case}: argmax differs for {int((1 - onnx_acc) * n)} of {n} inputs")

        # A fixed batch, and probabilities instead of logits.
        fixed, fb = os.path.join(tmp, "fixed.onnx"), min(50, n)
        run([yoke, "export", ckpt, "--format", "onnx", "-o", fixed, "--batch", str(fb),
             "--softmax"], env=env)
        fm = check_model(fixed, case)
        dims = [d.dim_value for d in fm.graph.input[0].type.tensor_type.shape.dim]
        if dims != [fb] + shape or fm.graph.output[0].name != "probabilities":
            fail(f"{case}: --batch {fb} --softmax gave input dims {dims}, "
                 f"output {fm.graph.output[0].name}")
        k = (min(len(x), 200) // fb) * fb  # the first 200 inputs are enough here
        probs = onnx_outputs(fixed, x[:k], batch=fb)
        e = np.exp(z[:k] - z[:k].max(1, keepdims=True))
        if not np.allclose(probs, e / e.sum(1, keepdims=True), atol=1e-6):
            fail(f"{case}: --softmax outputs are not the softmax of Yoke's logits")
        t_export = time.time() - t1

        if case == "images":
            p = run([yoke, "predict", ckpt, "--data", os.path.join(tmp, "images")], env=env)
            if f"accuracy {reported:.6f}" not in p.stderr or "émeu" not in p.stdout:
                fail(f"images: yoke predict on the folder:\n{p.stdout[:500]}\n{p.stderr}")
    print(f"onnx_export_test {case}: PASS (train {t_train:.1f} s, export and checks "
          f"{t_export:.1f} s, total {time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()
