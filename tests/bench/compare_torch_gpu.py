#!/usr/bin/env python3
"""GPU training throughput of mbkit against PyTorch eager, measured side by side.

Trains resnet20 and resnet18 (CIFAR shapes 3x32x32, 10 classes, batch 128) and resnet50
(3x224x224, 1000 classes, batch 64) in PyTorch eager on the GPU, with the models written below
layer for layer as mbkit's zoo builds them (libcore/src/models/zoo.cpp), and the same models with
mbkit (build/bin/bench_train --device=cuda) on the same GPU, in alternating rounds: one step is
forward, backward and SGD with momentum 0.9 (lr 0.01) on a batch already in host memory (mbkit
copies it to the GPU each step, as a training run does; PyTorch's batches are already on the GPU,
which favours PyTorch). Prints a table of the median samples/s of each with the range over rounds,
the ratio mbkit / PyTorch and the issue's targets (resnet20 >= 1.5x, resnet50 >= 1.0x). mbkit
replays its training step as a CUDA graph (--cuda-graphs, bench_train's default on a GPU);
--eager-too adds a column of mbkit without graphs and the graphs' gain.

    python3 tests/bench/compare_torch_gpu.py [--build build] [--rounds 5] [--workloads resnet20]
    tests/gpu/run-bench                       (the same, with the GPU machine's libraries found)
    /usr/bin/python3 tests/bench/compare_torch_gpu.py --device cpu    (a dry run, no GPU needed)

Needs a python3 with torch built with CUDA. With no GPU visible it says so and exits 77.
`--device cpu` is a dry run of the whole script on the CPU with tiny batches and step counts
(the table, the ratios and the targets' verdicts are exercised; the figures mean nothing).
Lines starting with '#' are headers; the table is whitespace-separated (nccl-tests style).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# (name, mbkit zoo model, channels/height/width, classes, batch, target mbkit / PyTorch)
WORKLOADS = [
    ("resnet20", (3, 32, 32), 10, 128, 1.5),
    ("resnet18", (3, 32, 32), 10, 128, None),
    ("resnet50", (3, 224, 224), 1000, 64, 1.0),
]
SKIPPED = 77  # ctest's and automake's "skipped"


def torch_models(nn):
    """The zoo's ResNets in PyTorch: convolutions without bias, each followed by batch norm
    (eps 1e-5, momentum 0.1); a 1x1 projection shortcut where the shape changes."""

    def conv_bn(cin, cout, kernel, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False),
                             nn.BatchNorm2d(cout))

    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.one = conv_bn(cin, cout, 3, stride)
            self.two = conv_bn(cout, cout, 3, 1)
            self.shortcut = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

        def forward(self, x):
            y = self.two(nn.functional.relu(self.one(x)))
            return nn.functional.relu(y + (self.shortcut(x) if self.shortcut else x))

    class Bottleneck(nn.Module):
        def __init__(self, cin, channels, stride):
            super().__init__()
            cout = channels * 4
            self.one = conv_bn(cin, channels, 1, 1)
            self.two = conv_bn(channels, channels, 3, stride)  # the stride on the 3x3 (v1.5)
            self.three = conv_bn(channels, cout, 1, 1)
            self.shortcut = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

        def forward(self, x):
            y = nn.functional.relu(self.one(x))
            y = self.three(nn.functional.relu(self.two(y)))
            return nn.functional.relu(y + (self.shortcut(x) if self.shortcut else x))

    def stages(block, cin, widths, blocks, expansion):
        layers = []
        for stage, (width, count) in enumerate(zip(widths, blocks)):
            for index in range(count):
                layers.append(block(cin, width, 2 if stage > 0 and index == 0 else 1))
                cin = width * expansion
        return layers, cin

    def resnet(stem, block, widths, blocks, expansion, classes, pool=None):
        body, features = stages(block, widths[0] if block is Basic else 64, widths, blocks,
                                expansion)
        head = [stem, nn.ReLU()] + ([pool] if pool else [])
        return nn.Sequential(*head, *body, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(features, classes))

    return {
        # cifar_resnet(n = 3): a 3x3 stem of 16 channels, three stages of 16, 32, 64.
        "resnet20": lambda classes: resnet(conv_bn(3, 16, 3, 1), Basic, [16, 32, 64], [3, 3, 3],
                                           1, classes),
        # resnet18 on CIFAR shapes: a 3x3 stem of 64 channels, no max pool.
        "resnet18": lambda classes: resnet(conv_bn(3, 64, 3, 1), Basic, [64, 128, 256, 512],
                                           [2, 2, 2, 2], 1, classes),
        # resnet50: torchvision's stem (7x7 stride 2, 3x3 max pool stride 2 padding 1).
        "resnet50": lambda classes: resnet(conv_bn(3, 64, 7, 2), Bottleneck, [64, 128, 256, 512],
                                           [3, 4, 6, 3], 4, classes, nn.MaxPool2d(3, 2, 1)),
    }


def torch_rate(torch, models, name, dims, classes, batch, device, warmup, steps):
    """Samples/s of `steps` PyTorch eager training steps after `warmup` (cuDNN's autotuner on, as
    a user tuning PyTorch would have it)."""
    torch.manual_seed(0)
    model = models[name](classes).to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    # Eight batches cycled through, as bench_train does.
    images = torch.randn(8, batch, *dims, device=device)
    labels = torch.randint(0, classes, (8, batch), device=device)

    def step(i):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images[i % 8]), labels[i % 8])
        loss.backward()
        optimizer.step()

    for i in range(warmup):
        step(i)
    synchronize(torch, device)
    start = time.perf_counter()
    for i in range(steps):
        step(i)
    synchronize(torch, device)
    return steps * batch / (time.perf_counter() - start)


def synchronize(torch, device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def mbkit_rate(build, name, batch, device, min_time, extra):
    """Samples/s of bench_train's gpu/<name> (its own warm-up of 10 steps first)."""
    command = [os.path.join(build, "bin", "bench_train"), f"--device={device}", "--set=gpu",
               f"--benchmark_filter=^gpu/{name}/", f"--benchmark_min_time={min_time}",
               "--benchmark_format=json"] + extra
    if device == "cpu":
        command += [f"--batch={batch}", "--resnet50-size=32"]
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"compare_torch_gpu: {' '.join(command)} failed ({out.returncode}):\n{out.stderr}")
    for bench in json.loads(out.stdout)["benchmarks"]:
        if bench.get("error_occurred"):
            sys.exit(f"compare_torch_gpu: bench_train {name}: {bench.get('error_message')}")
        return bench["items_per_second"]
    sys.exit(f"compare_torch_gpu: bench_train ran no benchmark gpu/{name}")


def gpu_name(torch, device):
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return torch.cuda.get_device_name(torch.device(device))


def verdict(ratio, target):
    if target is None:
        return "-"
    return f">={target:.1f}x {'met' if ratio >= target else 'MISSED'}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                        "build"))
    parser.add_argument("--device", default="cuda",
                        help="cuda, cuda:N, or cpu for a dry run with tiny batches")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=0,
                        help="PyTorch steps timed per round (default 100 on a GPU, 2 on the CPU)")
    parser.add_argument("--warmup", type=int, default=0,
                        help="PyTorch warm-up steps per round (default 20, 1 on the CPU)")
    parser.add_argument("--min-time", type=float, default=0,
                        help="bench_train's --benchmark_min_time (default 2 s, 0.01 on the CPU)")
    parser.add_argument("--workloads", default=",".join(w[0] for w in WORKLOADS))
    parser.add_argument("--bench-arg", action="append", default=[],
                        help="an extra bench_train argument (e.g. --cuda-graphs=off)")
    parser.add_argument("--eager-too", action="store_true",
                        help="also time mbkit without CUDA graphs (a column of its own: what the "
                             "graphs gain)")
    args = parser.parse_args()
    dry = args.device == "cpu"
    steps = args.steps or (2 if dry else 100)
    warmup = args.warmup or (1 if dry else 20)
    min_time = args.min_time or (0.01 if dry else 2.0)
    chosen = args.workloads.split(",")
    unknown = [w for w in chosen if w not in [x[0] for x in WORKLOADS]]
    if unknown or args.rounds < 1:
        parser.error(f"--workloads: unknown {', '.join(unknown)}" if unknown else
                     "--rounds: at least 1")

    try:
        import torch
    except ImportError as error:
        if dry:
            sys.exit(f"compare_torch_gpu: no torch in {sys.executable}: {error}")
        print(f"compare_torch_gpu: no torch in {sys.executable} ({error}): no GPU comparison "
              "possible here; skipped", file=sys.stderr)
        return SKIPPED
    if not dry and not torch.cuda.is_available():
        print("compare_torch_gpu: no GPU visible to PyTorch (torch.cuda.is_available() is False"
              f"; CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): "
              "skipped", file=sys.stderr)
        return SKIPPED
    if dry:
        torch.set_num_threads(1)  # as bench_train's GPU set: one host thread
    else:
        torch.backends.cudnn.benchmark = True
    models = torch_models(torch.nn)

    print(f"# mbkit against PyTorch {torch.__version__} eager, {time.strftime('%Y-%m-%d %H:%M')}")
    if dry:
        print("# DRY RUN on the CPU (--device cpu): tiny batches and step counts, figures "
              "meaningless")
    else:
        print(f"# GPU: {gpu_name(torch, args.device)}; CUDA {torch.version.cuda}, cuDNN "
              f"{torch.backends.cudnn.version()}")
    print(f"# {args.rounds} rounds, alternating; PyTorch {warmup} warm-up + {steps} timed steps, "
          f"bench_train min time {min_time} s; SGD momentum 0.9, lr 0.01, fp32")
    rows = []
    for name, dims, classes, batch, target in WORKLOADS:
        if name not in chosen:
            continue
        if dry:  # tiny shapes: resnet50 at 32x32, two samples a batch
            batch = 2
            dims = (3, 32, 32)
        torch_rates, mbkit_rates, eager_rates = [], [], []
        for _ in range(args.rounds):
            torch_rates.append(torch_rate(torch, models, name, dims, classes, batch, args.device,
                                          warmup, steps))
            mbkit_rates.append(mbkit_rate(args.build, name, batch, args.device, min_time,
                                          args.bench_arg))
            if args.eager_too:
                eager_rates.append(mbkit_rate(args.build, name, batch, args.device, min_time,
                                              args.bench_arg + ["--cuda-graphs=off"]))
        rows.append((name, dims, batch, torch_rates, mbkit_rates, eager_rates, target))

    header = (f"{'model':>9} {'input':>10} {'batch':>5} {'torch samples/s':>15} {'range':>17} "
              f"{'mbkit samples/s':>15} {'range':>17} {'mbkit/torch':>11}  target")
    if args.eager_too:
        header += f"  {'mbkit eager':>11} {'graphs/eager':>12}"
    print(header)
    missed = 0
    for name, dims, batch, torch_rates, mbkit_rates, eager_rates, target in rows:
        t, m = statistics.median(torch_rates), statistics.median(mbkit_rates)
        ratio = m / t
        missed += target is not None and ratio < target
        shape = "x".join(str(d) for d in dims)
        print(f"{name:>9} {shape:>10} {batch:>5} {t:15.1f} "
              f"{min(torch_rates):8.1f}-{max(torch_rates):<8.1f} {m:15.1f} "
              f"{min(mbkit_rates):8.1f}-{max(mbkit_rates):<8.1f} {ratio:11.2f}  "
              f"{verdict(ratio, target)}" +
              (f"  {statistics.median(eager_rates):11.1f} "
               f"{m / statistics.median(eager_rates):12.2f}" if eager_rates else ""))
    print(f"# ratio: median mbkit / median PyTorch; {missed} target(s) missed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
