#!/usr/bin/env python3
"""PyTorch peer for bench/resnet50_vs_torch.sh: ResNet-50 (or ResNet-20) training steps.

The network is the one Yoke's zoo builds for `zoo: resnet50` (torchvision's
layout, "ResNet v1.5": the stride on the bottleneck's 3x3; convolutions
before a batch norm have no bias; a 1x1 conv + batch norm shortcut where the
shape changes), written out here because Debian has no torchvision. The
parameter count is printed and checked by the caller against Yoke's
(23,528,522 with 10 classes).

Inputs are random 224x224x3 images with random labels from a fixed seed,
made before timing, as Yoke's `format: synthetic` makes them: the figure is
the model's training throughput, not a decoder's. SGD with momentum 0.9,
softmax cross-entropy, the batch in channels-last (NHWC) memory format,
oneDNN's preferred layout on the CPU. Prints one JSON line with the field
names of `yoke train --output json`: steps, samples_per_second over the
timed steps (the first --warmup are left out), train_loss, num_parameters.
--model resnet20 is the CIFAR network of Yoke's `zoo: resnet20` on 32x32
inputs (the class below); --compile runs it through torch.compile, whose
compilation falls in the warm-up steps.

On a GPU (--device cuda, for `make gpu-check` stage 5) the images and labels
are made on the device, the clock is read after a device synchronisation,
--precision picks fp32 (TF32 off: Yoke's CUDA engine's arithmetic), tf32, or
bf16 (autocast, the usual mixed precision), --layout nchw or nhwc, and the
peak is the device's (torch.cuda.max_memory_allocated).
"""

import argparse
import json
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Bottleneck(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        out = planes * 4
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.down = None
        if stride != 1 or cin != out:
            self.down = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False),
                                      nn.BatchNorm2d(out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class Basic(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.down = None
        if stride != 1 or cin != planes:
            self.down = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False),
                                      nn.BatchNorm2d(planes))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet20(nn.Module):
    """He et al. 2015, section 4.2, with Yoke's option-B shortcuts (a 1x1
    conv + batch norm where the shape changes): 272,474 parameters with 10
    classes."""

    def __init__(self, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        blocks, cin = [], 16
        for stage in range(3):
            planes = 16 << stage
            for b in range(3):
                blocks.append(Basic(cin, planes, 2 if stage > 0 and b == 0 else 1))
                cin = planes
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class ResNet50(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        blocks, cin = [], 64
        for stage, n in enumerate([3, 4, 6, 3]):
            planes = 64 << stage
            for b in range(n):
                blocks.append(Bottleneck(cin, planes, 2 if stage > 0 and b == 0 else 1))
                cin = planes * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.blocks(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50", choices=["resnet50", "resnet20"])
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model (Inductor); the warm-up steps take the compile")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"])
    ap.add_argument("--layout", default="nhwc", choices=["nchw", "nhwc"])
    args = ap.parse_args()
    if args.steps <= args.warmup:
        ap.error("--steps must exceed --warmup")
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        tf32 = args.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = True
    fmt = torch.channels_last if args.layout == "nhwc" else torch.contiguous_format
    net = (ResNet50 if args.model == "resnet50" else ResNet20)(args.classes)
    size = 224 if args.model == "resnet50" else 32
    model = net.to(dev, memory_format=fmt)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if args.compile:
        model = torch.compile(model)
    x = torch.rand(args.batch, 3, size, size, device=dev).to(memory_format=fmt)
    y = torch.randint(0, args.classes, (args.batch,), device=dev)
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    loss = None
    t0 = None
    for step in range(args.steps):
        if step == args.warmup:
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    timed = args.steps - args.warmup
    name = f"pytorch {torch.__version__} {'compile' if args.compile else 'eager'}"
    name += f" {args.precision} {args.layout}" if cuda or args.precision == "bf16" else f" {args.layout}"
    print(json.dumps({
        "framework": name,
        "steps": args.steps,
        "samples_per_second": timed * args.batch / seconds,
        "train_loss": float(loss),
        "num_parameters": sum(p.numel() for p in net.parameters()),
        "peak_memory_bytes": (torch.cuda.max_memory_allocated() if cuda else
                              resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024),
    }))


if __name__ == "__main__":
    main()
