#!/usr/bin/env python3
"""Training throughput of mbkit against the PyTorch anchor, measured side by side.

Runs ../shared/anchors/torch_bench.py (PyTorch, Debian's python3-torch) and build/bin/bench_train
(mbkit) on the same workloads, alternating between them for several rounds so that both see the
same machine, and prints the median samples/s of each with their ratio. Also measures the peak
memory (RSS) of training the mlp on Fashion-MNIST with mb-train-fmb and with the anchor.

The mlp's target is its bound, not PyTorch: bench_train's bound/mlp_sgemm times only the
dnnl_sgemm calls one mlp step makes (at the dense layers' shapes and transposes), in the same
rounds; mbkit/bound should be at least 0.90. The bound runs under the same environment, so
ONEDNN_MAX_CPU_ISA caps it as it caps mbkit.

    /usr/bin/python3 tests/bench/compare_torch.py [--build build] [--anchors ../shared/anchors]
                                                   [--rounds 3]

Output lines starting with '#' are headers; the table is whitespace-separated.
"""

import argparse
import csv
import os
import re
import statistics
import subprocess
import tempfile

# (anchor model, batch, threads, torch steps, mbkit benchmark name, target ratio against PyTorch)
WORKLOADS = [
    ("mlp", 64, 1, 2000, "mlp/batch:64/threads:1", None),
    ("lenet", 64, 1, 60, "lenet/batch:64/threads:1", 1.3),
    ("resnet20", 128, 1, 15, "resnet20/batch:128/threads:1", 1.5),
    ("resnet20", 128, 2, 15, "resnet20/batch:128/threads:2", None),
]

# mbkit benchmark -> (its bound: a bench_train benchmark timing only what limits it, the target
# mbkit/bound)
BOUNDS = {
    "mlp/batch:64/threads:1": ("bound/mlp_sgemm/batch:64/threads:1", 0.90),
}


def torch_rate(anchors, model, batch, threads, steps):
    out = subprocess.run(["/usr/bin/python3", os.path.join(anchors, "torch_bench.py"), model, str(batch), str(threads),
                          str(steps)], capture_output=True, text=True, check=True).stdout
    return float(re.search(r"samples_per_s=([0-9.]+)", out).group(1))


def mbkit_rate(build, name):
    out = subprocess.run([os.path.join(build, "bin", "bench_train"),
                          f"--benchmark_filter=^{re.escape(name)}/", "--benchmark_min_time=2",
                          "--benchmark_format=csv"],
                         capture_output=True, text=True, check=True).stdout
    # Google Benchmark's CSV: a header line, then one line per benchmark ("name/real_time", ...).
    rows = list(csv.reader(out[out.index("name,iterations"):].splitlines()))
    column = rows[0].index("items_per_second")
    for row in rows[1:]:
        if row[0] == f"{name}/real_time":
            return float(row[column])
    raise RuntimeError(f"no result for {name}:\n{out}")


def peak_rss_mb(command):
    """Peak resident set of one child process (not of all children so far), in MB."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {process.returncode}")
    return usage.ru_maxrss / 1024.0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    source = os.path.dirname(os.path.dirname(here))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(source, "build"))
    parser.add_argument("--anchors", default=os.path.join(source, "..", "shared", "anchors"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    print(f"# mbkit vs PyTorch, training throughput (samples/s), {args.rounds} alternating rounds:"
          " medians, and the ranges over rounds")
    print(f"# {'workload':<10} {'batch':>5} {'threads':>7} {'torch':>7} {'torch range':>13} "
          f"{'mbkit':>7} {'mbkit range':>13} {'ratio':>6} {'best/best':>9} {'target':>7}")
    rates = {}
    bound_lines = []
    for model, batch, threads, steps, name, target in WORKLOADS:
        torch, ours, bound = [], [], []
        for _ in range(args.rounds):
            torch.append(torch_rate(args.anchors, model, batch, threads, steps))
            ours.append(mbkit_rate(args.build, name))
            if name in BOUNDS:
                bound.append(mbkit_rate(args.build, BOUNDS[name][0]))
        t, m = statistics.median(torch), statistics.median(ours)
        rates[(model, threads)] = m
        print(f"  {model:<10} {batch:>5} {threads:>7} {t:>7.0f} "
              f"{f'{min(torch):.0f}-{max(torch):.0f}':>13} {m:>7.0f} "
              f"{f'{min(ours):.0f}-{max(ours):.0f}':>13} {m / t:>6.2f} "
              f"{max(ours) / max(torch):>9.2f} {'' if target is None else f'>={target}':>7}")
        if bound:
            b = statistics.median(bound)
            per_round = [o / r for o, r in zip(ours, bound)]
            bound_lines.append(
                f"  {model:<10} {batch:>5} {threads:>7} {b:>7.0f} {f'{min(bound):.0f}-{max(bound):.0f}':>13} "
                f"{m / b:>11.2f} {f'{min(per_round):.2f}-{max(per_round):.2f}':>11} "
                f"{f'>={BOUNDS[name][1]:.2f}':>7}  ({BOUNDS[name][0]})")
    if bound_lines:
        print("# mbkit against its bound (samples/s of the bound; mbkit/bound of the medians, and"
              " its range over rounds)")
        print(f"# {'workload':<10} {'batch':>5} {'threads':>7} {'bound':>7} {'bound range':>13} "
              f"{'mbkit/bound':>11} {'range':>11} {'target':>7}")
        for line in bound_lines:
            print(line)
    scaling = rates[("resnet20", 2)] / rates[("resnet20", 1)]
    print(f"# resnet20 batch 128, mbkit 2 threads / 1 thread: {scaling:.2f} (target >= 1.7)")

    # Peak memory of a real run: the mlp on Fashion-MNIST for one epoch.
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "fmnist.h5")
        subprocess.run([os.path.join(args.build, "bin", "mb-dataset"), "-q", "fetch",
                        "fashion-mnist", "-o", data], check=True)
        ours = peak_rss_mb([os.path.join(args.build, "bin", "mb-train-fmb"), "--data", data,
                            "--epochs", "1", "--threads", "1", "-q"])
    torch = peak_rss_mb(["/usr/bin/python3", os.path.join(args.anchors, "torch_bench.py"), "mlp",
                         "64", "1", "1000"])
    print(f"# peak RSS, mlp on Fashion-MNIST: mbkit {ours:.0f} MB (one epoch; target <= 200 MB), "
          f"PyTorch anchor {torch:.0f} MB")


if __name__ == "__main__":
    main()
