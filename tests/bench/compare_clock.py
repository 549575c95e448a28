#!/usr/bin/python3
"""Wall clock against virtual clock where every worker has a core of its own: 1 master + 1
worker (2 ranks on 2 cores) train the same run with --clock wall and --clock virtual, in
alternating rounds; prints steps per second of each (after a warm-up) and their ratio, which
the virtual clock should keep within 10% of 1.

    /usr/bin/python3 tests/bench/compare_clock.py [--rounds 3] [--model mlp] [--steps 400]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

try:
    import h5py
except ImportError as error:  # a conda, pyenv or venv python3 first on PATH may lack them
    raise SystemExit(f"compare_clock.py: {error.name} is missing from {sys.executable}; run this with "
                     "/usr/bin/python3 (Debian: python3-h5py)")

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("MBKIT_BIN_DIR", os.path.join(SOURCE, "build", "bin"))


def steps_per_second(log, warmup):
    with h5py.File(log, "r", swmr=True) as f:
        time = f["steps/time"][...]
    return (len(time) - warmup) / (time[-1] - time[warmup - 1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--data", default=None, help="dataset file (default: fetch Fashion-MNIST)")
    args = parser.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or os.path.join(tmp, "fmnist.h5")
        if not args.data:
            subprocess.run([os.path.join(BIN, "mb-dataset"), "-q", "fetch", "fashion-mnist", "-o",
                            data], check=True)
        rates = {"wall": [], "virtual": []}
        warmup = args.steps // 8
        for round_ in range(args.rounds):
            for clock in ("wall", "virtual"):
                log = os.path.join(tmp, f"{clock}-{round_}.h5")
                subprocess.run(["mpirun", "--oversubscribe", "-n", "2",
                                os.path.join(BIN, "mb-train-fmb"), "--data", data, "--model",
                                args.model, "--batch-size", str(args.batch_size), "--steps",
                                str(args.steps), "--threads", "1", "--test-size", "100",
                                "--clock", clock, "--log", log, "-q"], check=True, env=env)
                rates[clock].append(steps_per_second(log, warmup))
        print(f"{args.model}, batch {args.batch_size}, 1 master + 1 worker, {args.steps} steps "
              f"({warmup} of warm-up left out), {args.rounds} rounds")
        print(f"{'clock':<8} {'steps/s (median)':>16} {'range':>20}")
        for clock, values in rates.items():
            print(f"{clock:<8} {statistics.median(values):>16.1f} "
                  f"{min(values):>9.1f} - {max(values):<9.1f}")
        ratios = [v / w for v, w in zip(rates["virtual"], rates["wall"])]
        print(f"virtual / wall: median {statistics.median(ratios):.3f} "
              f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    sys.exit(main())
