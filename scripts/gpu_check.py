#!/usr/bin/env python3
"""`make gpu-check`: the checks that need a GPU, run on a lent GPU machine.

Runs from the repository root there, on the bundle that scripts/gpu_bundle.sh
made on the development machine (`make gpu-bundle`), and writes one JSON file
per stage and a summary under --out ($OUT on the device machine), printing a
one-line verdict per stage last.

Stages, in this order (--stages picks some, e.g. 1,2):
  1 env      the card, its driver and compute capability, and the versions of
             CUDA, cuDNN, cuBLAS and NCCL the binaries will load;
  2 smoke    every CUDA test binary of the bundle under compute-sanitizer
             memcheck; a test that skips on a GPU machine fails the stage;
  3 ops      per-op parity against the CPU engine: every layer case, loss
             and optimizer of engine/cuda_parity/ (fp32, TF32 off), then
             the layer cases again at training.precision tf32 (named
             NAME@tf32: convolutions and dense layers within 5e-4, the rest
             unchanged); bf16 and fp16 are not built yet;
  4 model    model parity: ResNet-20 and the CNN trained against the CPU
             engine, a GPU checkpoint resumed on CPU and GPU, a repeated
             run bit for bit, and the steady-state counters; then the real
             trainer (tools/yoke-trainer-cuda) trains a CNN job on the GPU
             and on the CPU, and the epochs' losses must agree;
  5 speed    ResNet-50 training throughput at 224x224, batch 64, 1,000
             classes, SGD with momentum, synthetic images: Yoke
             (yoke-trainer-cuda at fp32 and tf32) against PyTorch eager on
             the same card (bench/resnet50_torch.py: fp32 with TF32 off in
             NCHW and NHWC, tf32 and bf16 autocast in NHWC), alternated over
             --speed-runs runs; medians, and each Yoke variant's paired
             ratio to each peer. Reported, not asserted: the stage fails
             only when a run fails or a result is wrong (a loss not finite,
             a parameter count unlike Yoke's);
  6 cluster  the daemons on the GPU machine: `yoke up` with one worker,
             which must list the card as a cuda device; the stage-4 job
             submitted on cuda and on the cpu must both succeed, the first
             placed on the card, and their epochs' losses agree.
Stages 3 and 4 write every check of the parity binaries as a JSON line
(stage3_ops.jsonl, stage4_model.jsonl) and sum them up in their JSON. A
binary that dies (a device fault is sticky for the process) is rerun one
test at a time, so one broken op does not hide the others.

Verdicts: PASS, FAIL, NO_GPU (stage 1 found no usable GPU: the later stages
are SKIPPED). Exit status: 0 when every stage asked for passed,
3 when there is no GPU, 1 otherwise.
"""
import argparse
import glob
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

STAGES = {1: "env", 2: "smoke", 3: "ops", 4: "model", 5: "speed", 6: "cluster"}
# The parity binaries of stages 3 and 4 (engine/cuda_parity/).
PARITY = {3: ["engine_op_parity_test", "engine_loss_optim_parity_test"],
          4: ["engine_model_parity_test"]}
# Tests of the no-GPU error paths, which skip where a GPU is present.
NO_DEVICE_ONLY = re.compile(r"NoDevice")
# Too slow under compute-sanitizer for stage 2; stage 4 runs it plainly.
NOT_SMOKE = {"engine_model_parity_test"}
# Stage 2 runs the op parity cases under memcheck at small shapes only (the
# large ones run plainly in stage 3), so that stages 1-4 fit in 5 minutes.
SMOKE_FILTER = {"engine_op_parity_test":
                "-*resnet20*:*cnn_3136*:*dropout_wide*:*conv_cnn_k5*:*batch_norm_chunks*"}


def run(cmd, timeout=60, env=None):
    """(exit status, stdout+stderr); status 127 when the program is missing."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout, env=env, check=False)
        return p.returncode, p.stdout
    except FileNotFoundError:
        return 127, f"{cmd[0]}: not found"
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out + f"\n(timed out after {timeout} s)"


def library_dirs():
    """Where NVIDIA's libraries are: the toolkit's, and those of the Python
    packages (nvidia-cudnn-cu13, nvidia-nccl-cu13, ...) beside PyTorch."""
    dirs = [d for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/lib") if os.path.isdir(d)]
    code, out = run([sys.executable, "-c",
                     "import nvidia, os; print('\\n'.join(os.path.join(p, d, 'lib') "
                     "for p in nvidia.__path__ for d in sorted(os.listdir(p))))"])
    if code == 0:
        dirs += [d for d in out.split() if os.path.isdir(d)]
    return dirs


def find_library(prefix, dirs):
    """The newest file named PREFIX.so.N[.M...] in `dirs` or the loader's cache."""
    found = []
    for d in dirs:
        found += glob.glob(os.path.join(d, prefix + ".so.*"))
    code, out = run(["ldconfig", "-p"])
    if code == 0:
        found += re.findall(r"=> (\S*/" + re.escape(prefix) + r"\.so\.\S+)", out)
    if not found:
        return None

    def version(path):
        return [int(x) for x in re.findall(r"\d+", path.rsplit(".so.", 1)[1])]
    return max(found, key=version)


def library_versions(found):
    """The full versions the libraries found report through their own calls
    (a file name such as libcudnn.so.9 names only the major version)."""
    import ctypes
    queries = {  # key: (function, how its number reads)
        "cudart": ("cudaRuntimeGetVersion", lambda v: f"{v // 1000}.{v % 1000 // 10}"),
        "cudnn": ("cudnnGetVersion", lambda v: f"{v // 10000}.{v % 10000 // 100}.{v % 100}"),
        "cublaslt": ("cublasLtGetVersion",
                     lambda v: f"{v // 10000}.{v % 10000 // 100}.{v % 100}"),
        "nccl": ("ncclGetVersion", lambda v: f"{v // 10000}.{v % 10000 // 100}.{v % 100}"),
    }
    out = {}
    for key, (fn, fmt) in queries.items():
        path = (found.get(key) or {}).get("path")
        if not path:
            continue
        try:
            lib = ctypes.CDLL(path)
            if key in ("cudart", "nccl"):
                v = ctypes.c_int(0)
                if getattr(lib, fn)(ctypes.byref(v)) != 0:
                    continue
                out[key] = fmt(v.value)
            else:
                f = getattr(lib, fn)
                f.restype = ctypes.c_size_t
                out[key] = fmt(f())
        except (OSError, AttributeError) as e:
            out[key] = f"unknown ({e})"
    try:
        drv = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(0)
        if drv.cuDriverGetVersion(ctypes.byref(v)) == 0:
            out["driver_api"] = f"{v.value // 1000}.{v.value % 1000 // 10}"
    except (OSError, AttributeError):
        pass
    return out


def stage_env(args, dirs):
    r = {"library_dirs": dirs}
    code, smi = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap,uuid",
                     "--format=csv,noheader"])
    gpus = [dict(zip(("name", "driver", "memory", "compute_capability", "uuid"),
                     (f.strip() for f in line.split(","))))
            for line in smi.splitlines() if code == 0 and line.count(",") == 4]
    r["gpus"] = gpus
    code, out = run(["nvcc", "--version"])
    m = re.search(r"release ([\d.]+)", out)
    r["cuda_toolkit"] = m.group(1) if m else None
    for lib, key in (("libcudart", "cudart"), ("libcudnn", "cudnn"), ("libcublas", "cublas"),
                     ("libcublasLt", "cublaslt"), ("libnccl", "nccl")):
        path = find_library(lib, dirs)
        r[key] = {"path": path, "version": path.rsplit(".so.", 1)[1] if path else None}
    r["versions"] = library_versions(r)
    r["compute_sanitizer"] = shutil.which("compute-sanitizer") or next(
        iter(glob.glob("/usr/local/cuda*/compute-sanitizer/compute-sanitizer")), None)
    if not gpus:
        r["verdict"] = "NO_GPU"
        r["why"] = "nvidia-smi lists no GPU: " + (smi.strip()[-300:] or f"exit status {code}")
        return r
    g = gpus[0]
    r["verdict"] = "PASS"
    v = r["versions"]
    r["line"] = (f"{g['name']}, driver {g['driver']}, sm {g['compute_capability']}, CUDA "
                 f"{r['cuda_toolkit']}, cuDNN {v.get('cudnn', r['cudnn']['version'])}, cuBLAS "
                 f"{r['cublas']['version']}, NCCL {v.get('nccl', r['nccl']['version'])}")
    return r


def stage_smoke(args, dirs, env_result):
    bundle = unpack(args)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join([os.path.join(bundle, "lib")] + dirs)
    sanitizer = env_result.get("compute_sanitizer")
    binaries = sorted(b for b in glob.glob(os.path.join(bundle, "bin", "*"))
                      if os.path.basename(b) not in NOT_SMOKE)
    results, ok = [], bool(binaries)
    for b in binaries:
        cmd = [b, "--gtest_brief=0"]
        if os.path.basename(b) in SMOKE_FILTER:
            cmd.append("--gtest_filter=" + SMOKE_FILTER[os.path.basename(b)])
        if sanitizer:
            # API errors are not reported: a test that provokes one (an
            # out-of-memory) checks the status itself, and NCCL probes kernel
            # images its library lacks for this card and handles the error.
            cmd = [sanitizer, "--tool", "memcheck", "--error-exitcode", "99",
                   "--report-api-errors", "no", "--print-limit", "20"] + cmd
        t0 = time.monotonic()
        code, out = run(cmd, timeout=args.test_timeout, env=env)
        skipped = len([t for t in re.findall(r"^\[  SKIPPED \] (\S+) \(", out, re.M)
                       if not NO_DEVICE_ONLY.search(t)])
        passed = code == 0 and skipped == 0
        ok = ok and passed
        name = os.path.basename(b)
        with open(os.path.join(args.out, f"smoke_{name}.log"), "w") as f:
            f.write(out)
        results.append({"binary": name, "exit": code, "skipped": skipped, "passed": passed,
                        "seconds": round(time.monotonic() - t0, 2)})
    r = {"binaries": results, "sanitizer": sanitizer}
    if not sanitizer:
        ok = False
        r["why"] = "compute-sanitizer not found: the binaries ran without memcheck"
    r["verdict"] = "PASS" if ok else "FAIL"
    r["line"] = ", ".join(f"{x['binary']} {'ok' if x['passed'] else 'FAILED'}" for x in results) \
        or "the bundle has no binaries"
    return r


def run_tests_of(binary, log, args, env, tag=""):
    """Runs a gtest binary with YOKE_PARITY_LOG=log; if it dies (not a
    plain test failure), reruns it one test at a time. Returns a list of
    {test, exit, skipped} for what ran."""
    env = dict(env, YOKE_PARITY_LOG=log)
    code, out = run([binary, "--gtest_brief=0"], timeout=args.test_timeout, env=env)
    name = os.path.basename(binary)
    with open(log.replace(".jsonl", f"_{name}{tag.replace('@', '_')}.log"), "w") as f:
        f.write(out)
    skipped = len(re.findall(r"^\[  SKIPPED \]", out, re.M))
    if code in (0, 1):
        return [{"test": name + tag, "exit": code, "skipped": skipped}]
    # Died: start the log again and run each test in its own process.
    open(log, "w").close()
    _, listing = run([binary, "--gtest_list_tests"], env=env)
    tests, suite = [], ""
    for line in listing.splitlines():
        if not line.startswith(" ") and line.endswith("."):
            suite = line.strip()
        elif line.startswith("  ") and suite:
            tests.append(suite + line.split()[0])
    results = []
    for t in tests:
        c, o = run([binary, f"--gtest_filter={t}"], timeout=args.test_timeout, env=env)
        results.append({"test": f"{name} {t}", "exit": c,
                        "skipped": len(re.findall(r"^\[  SKIPPED \]", o, re.M))})
        if c not in (0, 1):
            with open(log, "a") as f:
                f.write(json.dumps({"op": t, "check": "process", "exit": c, "pass": False,
                                    "output_tail": o[-2000:]}) + "\n")
    return results


# Stage 4's trainer job: the CNN on synthetic images, two epochs.
TRAINER_JOB = """name: gpu-check-cnn
model: {zoo: cnn}
data:
  transform: {divisor: 255}
  train: {format: synthetic, num_examples: 256, shape: [28, 28, 1], num_classes: 10}
training:
  epochs: 2
  batch_size: 32
  seed: 3
  optimizer: {type: sgd, lr: 0.01, momentum: 0.9}
  clip_grad_norm: 5
"""


def trainer_check(tools, env, log, args):
    """Trains TRAINER_JOB with yoke-trainer-cuda on cuda (cpu in a
    self-test) and on the cpu; appends its checks to `log`."""
    trainer = os.path.join(tools, "yoke-trainer-cuda")
    job = os.path.join(args.work, "trainer_job.yaml")
    os.makedirs(args.work, exist_ok=True)
    with open(job, "w") as f:
        f.write(TRAINER_JOB)
    results = {}
    for device in ("cuda", "cpu"):
        dev = "cpu" if args.self_test else device
        code, out = run([trainer, job, "--output", "json", "--set",
                         f"distribution.device={dev}"], timeout=args.test_timeout, env=env)
        with open(log.replace(".jsonl", f"_trainer_{device}.log"), "w") as f:
            f.write(out)
        lines = [l for l in out.splitlines() if l.startswith("{")]
        results[device] = json.loads(lines[-1]) if code == 0 and lines else None
    checks = []
    gpu, cpu = results["cuda"], results["cpu"]
    ran = gpu is not None and cpu is not None
    checks.append({"op": "trainer", "check": "runs", "pass": ran,
                   "device": gpu.get("device") if gpu else None})
    if ran:
        for hg, hc in zip(gpu["history"], cpu["history"]):
            rel = abs(hg["train_loss"] - hc["train_loss"]) / max(abs(hc["train_loss"]), 1e-30)
            checks.append({"op": "trainer", "check": f"epoch{hg['epoch']}_loss", "rel_l2": rel,
                           "bound": 1e-3, "pass": rel <= 1e-3})
        want = "cpu" if args.self_test else "cuda"
        checks.append({"op": "trainer", "check": "device", "pass": gpu.get("device") == want})
    with open(log, "a") as f:
        for c in checks:
            f.write(json.dumps(c) + "\n")


def binaries(args, dirs):
    """(the test binaries' folder, the tools' folder, their environment):
    --bin-dir's, or the unpacked bundle's with its libraries and NVIDIA's
    on LD_LIBRARY_PATH."""
    if args.bin_dir:
        return args.bin_dir, args.bin_dir, dict(os.environ)
    bundle = unpack(args)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join([os.path.join(bundle, "lib")] + dirs)
    return os.path.join(bundle, "bin"), os.path.join(bundle, "tools"), env


# Stage 5: ResNet-50 as bench/resnet50_vs_torch.sh runs it, at GPU sizes.
SPEED_BATCH, SPEED_STEPS, SPEED_WARMUP = 64, 25, 5
SPEED_JOB = """name: gpu-check-resnet50
model: {{zoo: resnet50}}
data:
  train: {{format: synthetic, shape: [224, 224, 3], num_classes: 1000,
          num_examples: {examples}, seed: 1}}
training:
  epochs: 1
  batch_size: {batch}
  seed: 1
  log_every_steps: 1
  precision: {precision}
  optimizer: {{type: sgd, lr: 0.01, momentum: 0.9}}
distribution: {{device: {device}}}
"""
SPEED_YOKE = ["fp32", "tf32"]
SPEED_PEERS = [("fp32", "nchw"), ("fp32", "nhwc"), ("tf32", "nhwc"), ("bf16", "nhwc")]


def speed_sizes(args):
    """(batch, steps, warm-up steps): tiny in a self-test, which proves the
    stage's plumbing on a CPU."""
    return (2, 3, 1) if args.self_test else (SPEED_BATCH, SPEED_STEPS, SPEED_WARMUP)


def speed_yoke(tools, env, args, device, precision):
    """One Yoke run: samples/s over the steps after the warm-up, and the
    result's loss and parameter count."""
    batch, n, warmup = speed_sizes(args)
    job = os.path.join(args.work, "speed_job.yaml")
    with open(job, "w") as f:
        f.write(SPEED_JOB.format(examples=batch * n, batch=batch, device=device,
                                 precision=precision))
    code, out = run([os.path.join(tools, "yoke-trainer-cuda"), job, "--output", "events"],
                    timeout=args.test_timeout, env=env)
    steps, seconds, result = 0, 0.0, None
    for line in out.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if "step" in e and int(e["step"]["step"]) > warmup:
            steps += int(e["step"]["window_steps"])
            seconds += float(e["step"]["step_seconds"])
        elif "result" in e:
            result = e["result"]
    if code != 0 or result is None or steps == 0:
        return {"error": f"exit {code}: {out[-800:]}"}
    return {"samples_per_second": steps * batch / seconds,
            "train_loss": float(result["train_loss"]),
            "num_parameters": int(result["num_parameters"])}


def speed_torch(args, device, precision, layout):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench",
                          "resnet50_torch.py")
    batch, n, warmup = speed_sizes(args)
    code, out = run([sys.executable, script, "--device", device, "--precision", precision,
                     "--layout", layout, "--batch", str(batch), "--classes", "1000",
                     "--steps", str(n), "--warmup", str(warmup)],
                    timeout=args.test_timeout)
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if code != 0 or not lines:
        return {"error": f"exit {code}: {out[-800:]}"}
    return json.loads(lines[-1])


def stage_speed(args, dirs):
    """Stage 5 (see the module doc)."""
    _, tools, env = binaries(args, dirs)
    os.makedirs(args.work, exist_ok=True)
    device = "cpu" if args.self_test else "cuda"
    # The self-test's CPU has no tf32.
    yokes = ["fp32"] if args.self_test else SPEED_YOKE
    mine = [f"yoke {p}" for p in yokes]
    names = mine + [f"pytorch {p} {l}" for p, l in SPEED_PEERS]
    runs = {n: [] for n in names}
    for _ in range(args.speed_runs):  # alternated, so drift hits every one alike
        for p in yokes:
            runs[f"yoke {p}"].append(speed_yoke(tools, env, args, device, p))
        for p, l in SPEED_PEERS:
            runs[f"pytorch {p} {l}"].append(speed_torch(args, device, p, l))
    batch, n, warmup = speed_sizes(args)
    r = {"batch": batch, "steps": n, "warmup": warmup, "runs": runs}
    wrong = []
    params = {x.get("num_parameters") for n in names for x in runs[n] if "error" not in x}
    for n in names:
        for x in runs[n]:
            if "error" in x:
                wrong.append(f"{n}: {x['error'][-300:]}")
            elif not math.isfinite(x["train_loss"]):
                wrong.append(f"{n}: loss {x['train_loss']}")
    if len(params) > 1:
        wrong.append(f"the parameter counts differ: {sorted(params)}")
    if wrong:
        return dict(r, verdict="FAIL", why="; ".join(wrong), line="; ".join(wrong)[:400])
    med = {n: statistics.median(x["samples_per_second"] for x in runs[n]) for n in names}
    peers = names[len(mine):]
    # Paired ratios: run i of each Yoke variant against run i of each peer.
    ratio = {y: {n: statistics.median(a["samples_per_second"] / b["samples_per_second"]
                                      for a, b in zip(runs[y], runs[n])) for n in peers}
             for y in mine}
    best = max(peers, key=lambda n: med[n])
    fastest = max(mine, key=lambda n: med[n])
    r.update(median_samples_per_second=med, yoke_over_peer=ratio, best_peer=best)
    r["verdict"] = "PASS"
    r["line"] = (f"samples/s (median of {args.speed_runs}): "
                 + ", ".join(f"{n} {med[n]:.0f}" for n in names)
                 + f"; {fastest}/best peer ({best}) {ratio[fastest][best]:.2f}x")
    return r


def yoke_cli(tools, env, args, *cmd, timeout=None):
    return run([os.path.join(tools, "yoke"), *cmd], timeout=timeout or args.test_timeout, env=env)


def stage_cluster(args, dirs, env_result):
    """Stage 6: the GPU through the daemons (see the module doc)."""
    _, tools, env = binaries(args, dirs)
    cluster = os.path.join(args.work, "cluster")
    os.makedirs(args.work, exist_ok=True)
    env["YOKE_STATE_DIR"] = os.path.join(cluster, "state")
    for k in ("YOKE_COORDINATOR", "YOKE_TLS_DIR", "YOKE_TOKEN"):
        env.pop(k, None)
    want = "cpu" if args.self_test else "cuda"
    checks, r = [], {}
    code, out = yoke_cli(tools, env, args, "up", "--workers", "1", "--dir", cluster, "--detach",
                         timeout=120)
    r["up"] = out[-2000:]
    try:
        if code != 0:
            return {"verdict": "FAIL", "why": f"yoke up failed ({code}): {out[-500:]}"}
        code, out = yoke_cli(tools, env, args, "workers", "--output", "json")
        workers = json.loads(out) if code == 0 else []
        r["workers"] = workers
        devices = [d for w in workers for d in w.get("devices", [])]
        gpu_name = (env_result.get("gpus") or [{}])[0].get("name", "")
        listed = [d for d in devices if d.get("kind") == want
                  and (args.self_test or gpu_name in d.get("name", ""))]
        checks.append({"check": "worker_lists_the_card", "pass": bool(listed),
                       "devices": devices})
        job = os.path.join(args.work, "cluster_job.yaml")
        with open(job, "w") as f:
            f.write(TRAINER_JOB)
        results = {}
        for device in ("cuda", "cpu"):
            dev = "cpu" if args.self_test else device
            code, out = yoke_cli(tools, env, args, "submit", job, "--set",
                                 f"distribution.device={dev}")
            job_id = out.strip().splitlines()[-1] if code == 0 and out.strip() else None
            if job_id:
                code, _ = yoke_cli(tools, env, args, "watch", job_id)
                _, got = yoke_cli(tools, env, args, "get", job_id, "--output", "json")
                try:
                    results[device] = json.loads(got)
                except ValueError:
                    results[device] = {"unparsed": got[-1000:]}
            checks.append({"check": f"{device}_job_succeeded", "pass": bool(job_id) and code == 0,
                           "job": job_id, "submit": out[-500:] if not job_id else ""})
        r["jobs"] = results
        gpu_job, cpu_job = results.get("cuda", {}), results.get("cpu", {})
        checks.append({"check": "placed_on_the_card",
                       "pass": (gpu_job.get("result") or {}).get("device") == want,
                       "assignments": [a.get("assignments") for a in gpu_job.get("attempts", [])]})
        hist = zip((gpu_job.get("result") or {}).get("history", []),
                   (cpu_job.get("result") or {}).get("history", []))
        n = 0
        for hg, hc in hist:
            rel = abs(hg["train_loss"] - hc["train_loss"]) / max(abs(hc["train_loss"]), 1e-30)
            checks.append({"check": f"epoch{hg['epoch']}_loss", "rel_l2": rel, "bound": 1e-3,
                           "pass": rel <= 1e-3})
            n += 1
        checks.append({"check": "epochs_compared", "pass": n == 2, "count": n})
    finally:
        code, out = yoke_cli(tools, env, args, "down", "--dir", cluster, timeout=60)
        r["down"] = out[-500:]
    failed = [c["check"] for c in checks if not c["pass"]]
    r["checks"] = checks
    r["verdict"] = "PASS" if not failed else "FAIL"
    r["line"] = (f"{len(checks)} checks, {len(failed)} failed"
                 + (f": {', '.join(failed)}" if failed else ""))
    return r


def stage_parity(args, dirs, stage):
    bin_dir, tools, env = binaries(args, dirs)
    if args.self_test:
        env["YOKE_PARITY_SELF_TEST"] = "1"
    log = os.path.abspath(os.path.join(args.out, f"stage{stage}_{STAGES[stage]}.jsonl"))
    open(log, "w").close()
    runs = []
    for name in PARITY[stage]:
        binary = os.path.join(bin_dir, name)
        if not os.path.isfile(binary):
            return {"verdict": "FAIL", "why": f"{name} is not in the bundle (make gpu-bundle)"}
        runs += run_tests_of(binary, log, args, env)
    if stage == 3:  # the products again at training.precision: tf32, logged apart
        tf32_log = log.replace(".jsonl", "_tf32.jsonl")
        open(tf32_log, "w").close()
        runs += run_tests_of(os.path.join(bin_dir, "engine_op_parity_test"), tf32_log, args,
                             dict(env, YOKE_PARITY_PRECISION="tf32"), tag="@tf32")
        with open(tf32_log) as f, open(log, "a") as out:
            out.write(f.read())
    if stage == 4:
        trainer_check(tools, env, log, args)
    lines = [json.loads(line) for line in open(log) if line.strip()]
    checks = [c for c in lines if not c.get("info")]
    failed = [c for c in checks if not c.get("pass")]
    ok = (bool(checks) and not failed and all(r["exit"] == 0 and r["skipped"] == 0 for r in runs))
    r = {"runs": runs, "checks": len(checks), "failed": failed,
         "reported": [c for c in lines if c.get("info")],
         "worst": sorted((c for c in checks if "rel_l2" in c),
                         key=lambda c: -c["rel_l2"])[:10]}
    if stage == 3:
        r["precisions"] = {"fp32": "run", "tf32": "run", "bf16": "not built",
                           "fp16": "not built"}
    r["verdict"] = "PASS" if ok else "FAIL"
    bad = ", ".join(f"{c['op']}/{c['check']}" for c in failed[:6])
    r["line"] = (f"{len(checks)} checks, {len(failed)} failed" + (f": {bad}" if bad else "")
                 + ("" if all(x["skipped"] == 0 for x in runs) else "; tests skipped"))
    return r


def unpack(args):
    dest = os.path.join(args.work, "bundle")
    if not os.path.isdir(dest):
        if not os.path.isfile(args.bundle):
            raise SystemExit(f"gpu_check: no bundle at {args.bundle} (make gpu-bundle, and carry it)")
        os.makedirs(dest)
        with tarfile.open(args.bundle) as t:
            t.extractall(dest)
    return dest


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stages", default="1,2,3,4", help="comma-separated stage numbers")
    p.add_argument("--bundle", default="gpu-bundle/yoke-gpu.tar.gz")
    p.add_argument("--out", default=os.environ.get("OUT") or "gpu-check-out")
    p.add_argument("--work", default="/tmp/yoke-gpu-check")
    p.add_argument("--test-timeout", type=int, default=240)
    p.add_argument("--speed-runs", type=int, default=3, help="stage 5's runs of each")
    p.add_argument("--bin-dir", help="run stages 3 and 4 from this folder's binaries (a build "
                   "tree's bin/) instead of the bundle")
    p.add_argument("--self-test", action="store_true",
                   help="run stages 3 and 4 CPU against CPU (YOKE_PARITY_SELF_TEST=1), to check "
                   "the cases and this script on a machine without a GPU")
    args = p.parse_args()
    try:
        stages = sorted({int(s) for s in args.stages.split(",") if s})
    except ValueError:
        p.error(f"--stages: expected numbers 1-6, got {args.stages!r}")
    if not stages or any(s not in STAGES for s in stages):
        p.error(f"--stages: expected numbers 1-6, got {args.stages!r}")
    os.makedirs(args.out, exist_ok=True)
    shutil.rmtree(args.work, ignore_errors=True)
    dirs = library_dirs()
    env_result = stage_env(args, dirs)  # every stage needs to know the machine
    summary = {}
    for s in stages:
        run_stage = {2: lambda: stage_smoke(args, dirs, env_result),
                     3: lambda: stage_parity(args, dirs, 3), 4: lambda: stage_parity(args, dirs, 4),
                     5: lambda: stage_speed(args, dirs),
                     6: lambda: stage_cluster(args, dirs, env_result)}
        if s == 1:
            r = env_result
        elif env_result["verdict"] == "NO_GPU" and not (args.self_test and s != 2):
            r = {"verdict": "SKIPPED", "why": "no GPU (stage 1)"}
        else:  # a self-test runs stages 3-6 CPU against CPU
            r = run_stage[s]()
        r["stage"] = s
        with open(os.path.join(args.out, f"stage{s}_{STAGES[s]}.json"), "w") as f:
            json.dump(r, f, indent=2)
        summary[s] = r["verdict"]
    with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
        json.dump({"stages": {f"{s} {STAGES[s]}": v for s, v in summary.items()},
                   "env": env_result}, f, indent=2)
    for s in stages:
        r = json.load(open(os.path.join(args.out, f"stage{s}_{STAGES[s]}.json")))
        print(f"stage {s} {STAGES[s]}: {r['verdict']}: {r.get('line') or r.get('why', '')}")
    if env_result["verdict"] == "NO_GPU" and not args.self_test:
        return 3
    if args.self_test:
        return 0 if all(summary[s] == "PASS" for s in stages if s >= 3) else 1
    return 0 if all(v == "PASS" for v in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
