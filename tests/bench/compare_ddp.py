#!/usr/bin/python3
"""Weak scaling of mb-train-fmb --comm allreduce against PyTorch DDP and raw MPI_Allreduce, side by side.

For each batch size per rank (default 64 and 256) it trains the mlp (784-256-10, 203,530 parameters,
814,120 bytes of gradient) on Fashion-MNIST with one thread per rank and measures:

  ours   mb-train-fmb --comm allreduce under mpirun, 1 rank and 2 ranks (--oversubscribe). Both run
         under mpirun, so both get Open MPI's default binding of a rank to a core. The 2-rank run
         is made three times, the order rotating by round: with the default (--allreduce auto,
         which times both sums at start and keeps the faster; which one it kept is counted), with
         --allreduce shm (the shared-memory sum; rows shm_*) and with --allreduce mpi (one
         MPI_Allreduce; rows mpi_*). auto/mpi says whether auto is ever slower than MPI_Allreduce
         (target >= 0.97: paired runs of one sum differ by a few percent); auto_chose_shm is 1 in a
         round where auto kept the shared-memory sum. Throughput is
         sum(/steps/samples) / sum(/steps/step_time) over the steps after the warm-up (--warmup, 200);
         the exchange time is the median of /workers/send_time (a worker's one MPI_Allreduce of
         the gradients and the step's small values, logged on its next step) over both ranks' rows after the
         warm-up, in the 2-rank run.
  DDP    ../shared/anchors/torch_ddp_bench.py (PyTorch DistributedDataParallel, gloo, loopback), world
         1 and 2, same batch per rank and steps; it reports total samples/s.
  raw    ../shared/anchors/mpi_allreduce.c (compiled with mpicc -O2 into a temporary folder) on 2
         ranks: MPI_Allreduce time of float buffers of 4 KiB x 4^k. The time for the mlp's 814,120
         bytes is interpolated log-log between the two bracketing sizes (256 KiB and 1 MiB). It
         runs right before and right after each 2-rank run of ours, and the mean of the two is
         that run's reference: on these virtual machines the speed of memory traffic between the
         two cores drifts by up to 3x over seconds (the host's load), and a reference taken a
         minute away compares two different machines.

Weak-scaling efficiency = 2-rank throughput / (2 x 1-rank throughput). Two things bound it. The
machine: two 1-rank runs side by side (each its own mpirun -n 1, one bound to each core, started
together) share the memory system and whatever else the host runs, and each computes slower than
one alone; side_by_side = their summed throughput / (2 x 1-rank), the efficiency of two ranks that
never exchange anything. The exchange: without overlap, bound = t1 / (t1 + raw), t1 being the 1-rank step time (batch / 1-rank samples/s): a step that
computes as fast as one rank alone and then pays exactly the raw MPI_Allreduce (the shared-memory
sum, faster than that, can pass it). The mlp cannot
overlap its exchange (its big gradient, fc1's, is the last one the backward pass computes), so
efficiency / bound says how close the run came to what MPI_Allreduce allows on that machine, and
efficiency / (side_by_side x bound) how close it came to both limits together. The runs alternate (for each
round: for each batch size: ours 1, ours 2 (shm and mpi, in turn first, between two anchor runs),
ours 1 again (the mean of the two 1-rank runs is the round's reference), DDP 1, DDP 2), so that all see the
same machine; ratios are taken within a round (efficiencies, ours/DDP, exchange/raw), and the
table gives the median over rounds and the range (min-max). Targets: efficiency >= 0.90 at 256
samples per rank and >= 0.75 at 64; exchange time within 10 % of the raw MPI_Allreduce of the same
bytes. DDP reaches about 0.62 (256) and 0.44 (64) against its own single rank. DDP runs only on
a PyTorch whose dense layers use OpenBLAS (libopenblas0-pthread; torch_blas.py says why): the
script refuses to start otherwise, and its header names the BLAS.

    /usr/bin/python3 tests/bench/compare_ddp.py [--build build] [--anchors ../shared/anchors]
        [--data FM.h5] [--rounds 3] [--batches 64,256] [--steps-64 2000] [--steps-256 800]
        [--steps-scale 1.0] [--warmup 200] [--no-ddp]

Output lines starting with '#' are headers; the tables are whitespace-separated.
"""

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

import torch_blas

try:
    import h5py
    import numpy as np
except ImportError as error:  # a conda, pyenv or venv python3 first on PATH may lack them
    raise SystemExit(f"compare_ddp.py: {error.name} is missing from {sys.executable}; run this with "
                     "/usr/bin/python3 (Debian: python3-h5py python3-numpy)")

GRADIENT_BYTES = 203_530 * 4  # the mlp's float parameters
EFFICIENCY_TARGETS = {64: 0.75, 256: 0.90}
DDP_EFFICIENCY_SEEN = {64: 0.44, 256: 0.62}
EXCHANGE_TARGET = 1.10  # our exchange time / raw MPI_Allreduce of the same bytes
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, env=MPI_ENV, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {result.returncode}:\n{result.stdout}{result.stderr}")
    return result.stdout


def mpirun(ranks):
    return ["mpirun", "-n", "1"] if ranks == 1 else ["mpirun", "--oversubscribe", "-n", str(ranks)]


def ours(build, data, log, ranks, batch, steps, warmup, allreduce="auto"):
    """(samples/s, median exchange seconds or None, the sum that ran) of one mb-train-fmb run."""
    run(mpirun(ranks) + [os.path.join(build, "bin", "mb-train-fmb"), "--data", data, "--model", "mlp",
                         "--comm", "allreduce", "--allreduce", allreduce, "--threads", "1", "--batch-size",
                         str(batch), "--steps", str(steps), "--test-size", "100", "-q", "--log", log, "-f"])
    with h5py.File(log, "r") as f:
        after = f["steps/step"][:] > warmup
        rate = f["steps/samples"][:][after].sum() / f["steps/step_time"][:][after].sum()
        exchange = None
        used = json.loads(f.attrs["config"]).get("allreduce")
        if ranks > 1:
            after = f["workers/step"][:] > warmup
            exchange = float(np.median(f["workers/send_time"][:][after]))
    return float(rate), exchange, used


def side_by_side(build, data, work, batch, steps, warmup):
    """Summed samples/s of two 1-rank runs at once, one on each of cores 0 and 1."""
    processes, logs = [], []
    for core in (0, 1):
        log = os.path.join(work, f"side{core}.h5")
        logs.append(log)
        command = ["mpirun", "-n", "1", "--cpu-set", str(core), "--bind-to", "core",
                   os.path.join(build, "bin", "mb-train-fmb"), "--data", data, "--model", "mlp",
                   "--threads", "1", "--batch-size", str(batch), "--steps", str(steps),
                   "--test-size", "100", "-q", "--log", log, "-f"]
        processes.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=MPI_ENV))
    total = 0.0
    for process, log in zip(processes, logs):
        out, err = process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"side-by-side run exited with {process.returncode}:\n{out}{err}")
        with h5py.File(log, "r") as f:
            after = f["steps/step"][:] > warmup
            total += float(f["steps/samples"][:][after].sum() / f["steps/step_time"][:][after].sum())
    return total


def ddp(anchors, batch, world, steps):
    out = run(["/usr/bin/python3", os.path.join(anchors, "torch_ddp_bench.py"), "mlp", str(batch), str(world),
               str(steps)])
    return float(re.search(r"samples_per_s=([0-9.]+)", out).group(1))


def raw_allreduce(binary):
    """{bytes: seconds} of MPI_Allreduce on 2 ranks."""
    out = run(mpirun(2) + [binary])
    return {int(b): float(t) * 1e-6 for b, t in re.findall(r"np=2 bytes=(\d+) time_us=([0-9.]+)", out)}


def bracket(times, size):
    below = max(b for b in times if b <= size)
    above = min(b for b in times if b >= size)
    return below, above


def interpolate(times, size):
    """Time for size bytes, log-log between the bracketing measured sizes."""
    below, above = bracket(times, size)
    if below == above:
        return times[below]
    x = (math.log(size) - math.log(below)) / (math.log(above) - math.log(below))
    return math.exp(math.log(times[below]) + x * (math.log(times[above]) - math.log(times[below])))


def bound(batch, r):
    """Efficiency of a step that computes as fast as 1 rank alone, then pays the raw allreduce."""
    alone = batch / r["ours1"]
    return alone / (alone + r["raw"])


def default_steps(batch, args):
    steps = {64: args.steps_64, 256: args.steps_256}.get(batch)
    if steps is None:  # about the same number of samples per run as at 64
        steps = max(2 * args.warmup, round(args.steps_64 * 64 / batch))
    return max(args.warmup + 1, round(steps * args.steps_scale))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    source = os.path.dirname(os.path.dirname(here))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(source, "build"))
    parser.add_argument("--anchors", default=os.path.join(source, "..", "shared", "anchors"))
    parser.add_argument("--data", help="Fashion-MNIST HDF5 file (default: made with mb-dataset in a temporary folder)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", default="64,256", help="batch sizes per rank, comma-separated")
    parser.add_argument("--steps-64", type=int, default=2000, help="steps at batch 64 (ours and DDP)")
    parser.add_argument("--steps-256", type=int, default=800, help="steps at batch 256 (ours and DDP)")
    parser.add_argument("--steps-scale", type=float, default=1.0, help="factor on all step counts")
    parser.add_argument("--warmup", type=int, default=200, help="steps of ours left out of the measures")
    parser.add_argument("--no-ddp", action="store_true", help="leave PyTorch DDP out")
    args = parser.parse_args()
    # Before anything is timed: DDP's mlp on the reference BLAS (a fresh Debian's libblas.so.3)
    # runs about 8x slower than on OpenBLAS, and ours/DDP would say nothing.
    blas = None if args.no_ddp else torch_blas.require_openblas("compare_ddp.py")
    batches = [int(b) for b in args.batches.split(",")]
    steps = {b: default_steps(b, args) for b in batches}

    with tempfile.TemporaryDirectory() as work:
        data = args.data
        if data is None:
            data = os.path.join(work, "fmnist.h5")
            run([os.path.join(args.build, "bin", "mb-dataset"), "-q", "fetch", "fashion-mnist", "-o", data])
        binary = os.path.join(work, "mpi_allreduce")
        run(["mpicc", "-O2", os.path.join(args.anchors, "mpi_allreduce.c"), "-o", binary])
        log = os.path.join(work, "log.h5")

        results = {b: [] for b in batches}  # per round: dict of measures
        raws = []  # every anchor run, for the header
        for round_index in range(args.rounds):
            for b in batches:
                r = {}

                def two_ranks():
                    before = raw_allreduce(binary)
                    vias = ["auto", "shm", "mpi"]
                    vias = vias[round_index % 3:] + vias[:round_index % 3]
                    for via in vias:
                        key = "ours2" if via == "auto" else f"ours2_{via}"
                        r[key], r[key + "_exchange"], used = ours(args.build, data, log, 2, b, steps[b],
                                                                  args.warmup, via)
                        if via == "auto":
                            r["auto_chose"] = used
                    r["exchange"] = r["ours2_exchange"]
                    after = raw_allreduce(binary)
                    raws.extend([before, after])
                    r["raw"] = (interpolate(before, GRADIENT_BYTES) + interpolate(after, GRADIENT_BYTES)) / 2

                # The 1-rank run before and after the 2-rank runs: their mean is the round's
                # single-rank reference, as the anchor's is for the exchange.
                alone = [ours(args.build, data, log, 1, b, steps[b], args.warmup)[0]]
                two_ranks()
                alone.append(ours(args.build, data, log, 1, b, steps[b], args.warmup)[0])
                r["ours1"] = sum(alone) / 2
                r["side"] = side_by_side(args.build, data, work, b, steps[b], args.warmup)
                if not args.no_ddp:
                    r["ddp1"] = ddp(args.anchors, b, 1, steps[b])
                    r["ddp2"] = ddp(args.anchors, b, 2, steps[b])
                results[b].append(r)

    below, above = bracket(raws[0], GRADIENT_BYTES)
    print(f"# mb-train-fmb --comm allreduce vs PyTorch DDP (gloo) vs raw MPI_Allreduce: mlp on Fashion-MNIST, "
          f"1 thread per rank, {args.rounds} alternating rounds: medians, and the ranges over rounds")
    print(f"# PyTorch's BLAS (DDP's dense layers): {blas or 'not run (--no-ddp)'}")
    print(f"# raw MPI_Allreduce of {GRADIENT_BYTES:,} bytes on 2 ranks, around each 2-rank run of ours: "
          f"interpolated log-log between {below:,} B (median {statistics.median(t[below] for t in raws) * 1e6:.1f} us, "
          f"range {min(t[below] for t in raws) * 1e6:.0f}-{max(t[below] for t in raws) * 1e6:.0f}) and "
          f"{above:,} B (median {statistics.median(t[above] for t in raws) * 1e6:.1f} us, "
          f"range {min(t[above] for t in raws) * 1e6:.0f}-{max(t[above] for t in raws) * 1e6:.0f})")
    print("# efficiency = 2-rank samples/s / (2 x 1-rank samples/s); ratios are taken within each round")
    for b in batches:
        rs = results[b]
        rows = [
            ("ours_1rank_samples/s", [r["ours1"] for r in rs], "{:.0f}", None),
            ("ours_2rank_samples/s", [r["ours2"] for r in rs], "{:.0f}", None),
            ("ours_efficiency", [r["ours2"] / (2 * r["ours1"]) for r in rs], "{:.3f}",
             (">=", EFFICIENCY_TARGETS.get(b))),
            ("shm_2rank_samples/s", [r["ours2_shm"] for r in rs], "{:.0f}", None),
            ("shm_efficiency", [r["ours2_shm"] / (2 * r["ours1"]) for r in rs], "{:.3f}", None),
            ("mpi_2rank_samples/s", [r["ours2_mpi"] for r in rs], "{:.0f}", None),
            ("mpi_efficiency", [r["ours2_mpi"] / (2 * r["ours1"]) for r in rs], "{:.3f}", None),
            ("auto_chose_shm", [1.0 if r["auto_chose"] == "shm" else 0.0 for r in rs], "{:.0f}", None),
            ("auto/mpi_samples/s", [r["ours2"] / r["ours2_mpi"] for r in rs], "{:.3f}", (">=", 0.97)),
        ]
        if not args.no_ddp:
            rows += [
                ("ddp_1rank_samples/s", [r["ddp1"] for r in rs], "{:.0f}", None),
                ("ddp_2rank_samples/s", [r["ddp2"] for r in rs], "{:.0f}", None),
                ("ddp_efficiency", [r["ddp2"] / (2 * r["ddp1"]) for r in rs], "{:.3f}", None),
                ("ours_2rank/ddp_2rank", [r["ours2"] / r["ddp2"] for r in rs], "{:.2f}", None),
            ]
        rows += [
            ("side_by_side", [r["side"] / (2 * r["ours1"]) for r in rs], "{:.3f}", None),
            ("bound_no_overlap", [bound(b, r) for r in rs], "{:.3f}", None),
            ("efficiency/bound", [r["ours2"] / (2 * r["ours1"]) / bound(b, r) for r in rs], "{:.3f}", None),
            ("side_by_side*bound", [r["side"] / (2 * r["ours1"]) * bound(b, r) for r in rs], "{:.3f}", None),
            ("eff/(side*bound)", [r["ours2"] / r["side"] / bound(b, r) for r in rs], "{:.3f}", None),
            ("ours_exchange_us", [r["exchange"] * 1e6 for r in rs], "{:.1f}", None),
            ("raw_allreduce_us", [r["raw"] * 1e6 for r in rs], "{:.1f}", None),
            ("exchange/raw", [r["exchange"] / r["raw"] for r in rs], "{:.3f}", ("<=", EXCHANGE_TARGET)),
            ("mpi_exchange_us", [r["ours2_mpi_exchange"] * 1e6 for r in rs], "{:.1f}", None),
            ("mpi_exchange/raw", [r["ours2_mpi_exchange"] / r["raw"] for r in rs], "{:.3f}", None),
            ("exchange/mpi_exchange", [r["exchange"] / r["ours2_mpi_exchange"] for r in rs], "{:.3f}", None),
            ("shm_exchange/mpi_exch", [r["ours2_shm_exchange"] / r["ours2_mpi_exchange"] for r in rs], "{:.3f}",
             None),
        ]
        seen = DDP_EFFICIENCY_SEEN.get(b)
        print(f"# batch {b} per rank, {steps[b]} steps (ours: first {args.warmup} left out)"
              + (f"; DDP efficiency seen before: about {seen}" if seen else ""))
        print(f"# {'measure':<22} {'median':>9} {'range':>19} {'target':>7} {'verdict':>7}")
        for name, values, fmt, target in rows:
            median = statistics.median(values)
            spread = f"{fmt.format(min(values))}-{fmt.format(max(values))}"
            if target is None or target[1] is None:
                goal, verdict = "-", "-"
            else:
                op, limit = target
                goal = f"{op}{limit:.2f}"
                verdict = "PASS" if (median >= limit if op == ">=" else median <= limit) else "FAIL"
            print(f"  {name:<22} {fmt.format(median):>9} {spread:>19} {goal:>7} {verdict:>7}")


if __name__ == "__main__":
    main()
