#!/usr/bin/env python3
"""Training throughput of mbkit against the PyTorch anchor, measured side by side.

Runs ../shared/anchors/torch_bench.py (PyTorch, Debian's python3-torch) and build/bin/bench_train
(mbkit) on the same workloads, alternating between them for several rounds so that both see the
same machine, and prints the median samples/s of each with their ratio. Also measures the peak
memory (RSS) of training the mlp on Fashion-MNIST with mb-train-fmb and with the anchor.

The mlp's target is its bound, not PyTorch: bench_train's bound/mlp_sgemm times only the
dnnl_sgemm calls one mlp step makes (at the dense layers' shapes and transposes), in the same
rounds; mbkit/bound should be at least 0.90. bound/mlp_sgemm_update adds the step's optimizer
update (momentum over the flat buffers), a second row without a target, and a last line gives
their ratio: the most that any engine whose update is a pass of its own can reach against the
first bound (the update streams about 4 MB and is bound by memory: 0.86-0.88 of the products' time
on a Zen 5 EPYC). The bounds run under the same environment, so ONEDNN_MAX_CPU_ISA caps them as it
caps mbkit.

    /usr/bin/python3 tests/bench/compare_torch.py [--build build] [--anchors ../shared/anchors]
                                                   [--rounds 3] [--isa AVX2] [--workloads mlp]
                                                   [--no-rss] [--blas-only]

--workloads takes a comma-separated list of models (mlp, lenet, resnet20) and runs only their
rows (the mlp alone takes about a minute, resnet20 several); --no-rss leaves out the peak-memory
run at the end.

--isa LEVEL emulates an older CPU for both: it sets ONEDNN_MAX_CPU_ISA=LEVEL for bench_train and
for PyTorch (which links the same oneDNN), and PyTorch's own kernels' ATEN_CPU_CAPABILITY (avx2 at
AVX2, default at SSE41 and AVX). The default is the machine's full level. The header names the
CPU, its vector extensions, the levels in use, and the BLAS Debian's PyTorch runs its dense
layers on (libblas.so.3 as the alternatives system selects it). That must be OpenBLAS
(libopenblas0-pthread): on the reference BLAS, libblas3, a fresh machine's, PyTorch's mlp runs
about 8x slower and every ratio would flatter mbkit, so the script refuses to run on any other
(torch_blas.py; its convolutions run on oneDNN either way). --blas-only checks and prints it,
and stops.

Output lines starting with '#' are headers; the table is whitespace-separated. The 2-thread rows
need the machine's 2 cores to themselves: on a loaded machine they say little.
"""

import argparse
import csv
import os
import re
import statistics
import subprocess
import tempfile

import torch_blas

# --isa: oneDNN's names of instruction set levels (ONEDNN_MAX_CPU_ISA), and the matching
# ATEN_CPU_CAPABILITY for PyTorch's own kernels (None: PyTorch's default, its best).
ISA_LEVELS = {
    "ALL": None,
    "AVX512_CORE_AMX": None,
    "AVX512_CORE_BF16": None,
    "AVX512_CORE_VNNI": None,
    "AVX512_CORE": None,
    "AVX2_VNNI": "avx2",
    "AVX2": "avx2",
    "AVX": "default",
    "SSE41": "default",
}
# The vector extensions the header lists, of those /proc/cpuinfo's flags name.
CPU_FLAGS = ["sse4_1", "avx", "avx2", "fma", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
             "avx512_vnni", "avx512_bf16", "amx_tile"]

# (anchor model, batch, threads, torch steps, mbkit benchmark name, target ratio against PyTorch)
WORKLOADS = [
    ("mlp", 64, 1, 2000, "mlp/batch:64/threads:1", None),
    ("lenet", 64, 1, 60, "lenet/batch:64/threads:1", 1.3),
    ("resnet20", 128, 1, 15, "resnet20/batch:128/threads:1", 1.5),
    ("resnet20", 128, 2, 15, "resnet20/batch:128/threads:2", None),
]
# (anchor model, batch, target speed-up of mbkit's 2 threads over its 1): rows of WORKLOADS
SCALING = [("resnet20", 128, 1.7)]

# mbkit benchmark -> its bounds: (a bench_train benchmark timing only what limits it, the target
# mbkit/bound or None). The mlp's second bound adds the optimizer update, which streams its
# parameters, gradients and momentum through memory once a step (about 4 MB): what is left
# between it and mbkit is the engine's own overhead.
BOUNDS = {
    "mlp/batch:64/threads:1": [("bound/mlp_sgemm/batch:64/threads:1", 0.90),
                               ("bound/mlp_sgemm_update/batch:64/threads:1", None)],
}


def isa_environment(level):
    """The environment both sides run in at --isa `level`."""
    env = dict(os.environ)
    for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY"):
        env.pop(name, None)
    if level != "ALL":
        env["ONEDNN_MAX_CPU_ISA"] = level
        env["DNNL_MAX_CPU_ISA"] = level  # the name of oneDNN before 2.5
    if ISA_LEVELS[level] is not None:
        env["ATEN_CPU_CAPABILITY"] = ISA_LEVELS[level]
    return env


def cpu_description():
    """'model name' of /proc/cpuinfo, family and model, and the vector extensions present."""
    fields = {}
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if not line.strip():
                break  # the first processor is enough
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    flags = set(fields.get("flags", "").split())
    present = [flag for flag in CPU_FLAGS if flag in flags]
    return (f"{fields.get('model name', 'unknown')} (family {fields.get('cpu family', '?')}, model "
            f"{fields.get('model', '?')}), {os.cpu_count()} CPUs; {' '.join(present)}")


def torch_capability(env):
    """PyTorch's report of the level its own kernels run at ('CPU capability usage: AVX2')."""
    out = subprocess.run(["/usr/bin/python3", "-c", "import torch; print(torch.__config__.show())"],
                         capture_output=True, text=True, check=True, env=env).stdout
    found = re.search(r"CPU capability usage: (.+)", out)
    return found.group(1) if found else "unknown"


def onednn_level(build, env):
    """The level oneDNN runs at in bench_train, from its verbose header ('isa:Intel AVX2')."""
    out = subprocess.run([os.path.join(build, "bin", "bench_train"),
                          "--benchmark_filter=^lenet/batch:64/threads:1/",
                          "--benchmark_min_time=0.001"], capture_output=True, text=True, check=True,
                         env=dict(env, ONEDNN_VERBOSE="1")).stdout
    found = re.search(r"onednn_verbose,info,cpu,isa:(.*)", out)
    return found.group(1).strip() if found else "unknown"


def torch_rate(anchors, model, batch, threads, steps, env):
    out = subprocess.run(["/usr/bin/python3", os.path.join(anchors, "torch_bench.py"), model, str(batch), str(threads),
                          str(steps)], capture_output=True, text=True, check=True, env=env).stdout
    return float(re.search(r"samples_per_s=([0-9.]+)", out).group(1))


def mbkit_rate(build, name, env):
    out = subprocess.run([os.path.join(build, "bin", "bench_train"),
                          f"--benchmark_filter=^{re.escape(name)}/", "--benchmark_min_time=2",
                          "--benchmark_format=csv"],
                         capture_output=True, text=True, check=True, env=env).stdout
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
    parser.add_argument("--isa", default="ALL", type=str.upper, choices=list(ISA_LEVELS),
                        help="instruction set level to emulate (ONEDNN_MAX_CPU_ISA); default: all "
                        "the machine has")
    models = sorted({workload[0] for workload in WORKLOADS})
    parser.add_argument("--workloads", default=",".join(models),
                        help=f"comma-separated models to run (of {', '.join(models)}); default: all")
    parser.add_argument("--no-rss", action="store_true",
                        help="leave out the peak memory of a real mlp run")
    parser.add_argument("--blas-only", action="store_true",
                        help="only check the BLAS PyTorch runs on (OpenBLAS or a refusal), and "
                        "print it")
    args = parser.parse_args()
    chosen = args.workloads.split(",")
    unknown = [model for model in chosen if model not in models]
    if unknown:
        parser.error(f"--workloads: unknown model {unknown[0]!r} (known: {', '.join(models)})")
    env = isa_environment(args.isa)
    # Before anything is timed: a PyTorch on the reference BLAS makes every ratio meaningless.
    blas = torch_blas.require_openblas("compare_torch.py", env=env)
    if args.blas_only:
        print(f"# PyTorch's BLAS (its dense layers): {blas}")
        return

    print(f"# mbkit vs PyTorch, training throughput (samples/s), {args.rounds} alternating rounds:"
          " medians, and the ranges over rounds")
    print(f"# CPU: {cpu_description()}")
    print(f"# ISA level: {args.isa} (ONEDNN_MAX_CPU_ISA={env.get('ONEDNN_MAX_CPU_ISA', 'unset')}, "
          f"ATEN_CPU_CAPABILITY={env.get('ATEN_CPU_CAPABILITY', 'unset')}): oneDNN runs at "
          f"{onednn_level(args.build, env)}, PyTorch's own kernels at {torch_capability(env)}")
    print(f"# PyTorch's BLAS (its dense layers): {blas}")
    print(f"# {'workload':<10} {'batch':>5} {'threads':>7} {'torch':>7} {'torch range':>13} "
          f"{'mbkit':>7} {'mbkit range':>13} {'ratio':>6} {'best/best':>9} {'target':>7}")
    rates = {}
    bound_lines = []
    ceilings = []
    for model, batch, threads, steps, name, target in WORKLOADS:
        if model not in chosen:
            continue
        torch, ours = [], []
        bounds = {bound_name: [] for bound_name, _ in BOUNDS.get(name, [])}
        for _ in range(args.rounds):
            torch.append(torch_rate(args.anchors, model, batch, threads, steps, env))
            ours.append(mbkit_rate(args.build, name, env))
            for bound_name, rates_of_bound in bounds.items():
                rates_of_bound.append(mbkit_rate(args.build, bound_name, env))
        t, m = statistics.median(torch), statistics.median(ours)
        rates[(model, threads)] = (torch, ours)
        print(f"  {model:<10} {batch:>5} {threads:>7} {t:>7.0f} "
              f"{f'{min(torch):.0f}-{max(torch):.0f}':>13} {m:>7.0f} "
              f"{f'{min(ours):.0f}-{max(ours):.0f}':>13} {m / t:>6.2f} "
              f"{max(ours) / max(torch):>9.2f} {'' if target is None else f'>={target}':>7}")
        for bound_name, bound_target in BOUNDS.get(name, []):
            bound = bounds[bound_name]
            b = statistics.median(bound)
            per_round = [o / r for o, r in zip(ours, bound)]
            bound_lines.append(
                f"  {model:<10} {batch:>5} {threads:>7} {b:>7.0f} {f'{min(bound):.0f}-{max(bound):.0f}':>13} "
                f"{m / b:>11.2f} {f'{min(per_round):.2f}-{max(per_round):.2f}':>11} "
                f"{'' if bound_target is None else f'>={bound_target:.2f}':>7}  ({bound_name})")
        # What the first bound's target leaves to the engine: a step must also update the
        # parameters, so an engine adding nothing to the products and the update reaches
        # (products + update) / (products) of the first bound, and no more.
        named = BOUNDS.get(name, [])
        if len(named) == 2 and named[0][1] is not None:
            first, second = (statistics.median(bounds[bound_name]) for bound_name, _ in named)
            ceilings.append(f"# {model} {batch} {threads}: {named[1][0].split('/')[1]} / "
                            f"{named[0][0].split('/')[1]} = {second / first:.2f}: the most any "
                            f"engine with its own update pass reaches against the "
                            f"{named[0][1]:.2f} target")
    # Thread scaling: 2 threads against 1 for each side, the ratio of medians (ranges: the
    # ratios of the same rounds); the ratio column compares mbkit's scaling with PyTorch's.
    for model, batch, target in SCALING:
        if (model, 1) not in rates or (model, 2) not in rates:
            continue
        (torch1, ours1), (torch2, ours2) = rates[(model, 1)], rates[(model, 2)]
        t = statistics.median(torch2) / statistics.median(torch1)
        m = statistics.median(ours2) / statistics.median(ours1)
        t_rounds = [b / a for a, b in zip(torch1, torch2)]
        m_rounds = [b / a for a, b in zip(ours1, ours2)]
        print(f"  {model:<10} {batch:>5} {'2/1':>7} {t:>7.2f} "
              f"{f'{min(t_rounds):.2f}-{max(t_rounds):.2f}':>13} {m:>7.2f} "
              f"{f'{min(m_rounds):.2f}-{max(m_rounds):.2f}':>13} {m / t:>6.2f} {'':>9} "
              f"{f'>={target}':>7}")
    print("# threads 2/1: the speed-up of 2 threads over 1 (torch and mbkit columns); its target "
          "is mbkit's own")
    if bound_lines:
        print("# mbkit against its bound (samples/s of the bound; mbkit/bound of the medians, and"
              " its range over rounds)")
        print(f"# {'workload':<10} {'batch':>5} {'threads':>7} {'bound':>7} {'bound range':>13} "
              f"{'mbkit/bound':>11} {'range':>11} {'target':>7}")
        for line in bound_lines:
            print(line)
        for line in ceilings:
            print(line)

    if args.no_rss:
        return
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
