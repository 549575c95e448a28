#!/usr/bin/python3
"""What --emulate costs: emulated workers inside one process against a one-process run.

For each worker count N, `mb-train-fmb --emulate N --threads T` (ps, virtual clock) for each T
of --threads and a one-process run at the same per-worker batch size and --threads 1 train in
alternating rounds; prints, a line per N and T, the samples computed per real second of each
(from the logs' wall_time, after a warm-up; medians over rounds), their ratio (the issue's
target: at least 0.9 at T = 1; T > 1 spreads the emulated workers over T threads), the emulated
run's start-up (its first step's wall_time minus the step's own duration, median over rounds)
and peak RSS (GNU time, the largest over rounds). The first line gives the machine's load
average when the benchmark started: rates on a loaded machine are lower bounds.

    /usr/bin/python3 tests/bench/compare_emulate.py [--workers 10,100,1000,10000]
        [--threads 1,2] [--rounds 3] [--batch-size 64] [--samples 200000] [--data fmnist.h5]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

try:
    import h5py
except ImportError as error:  # a conda, pyenv or venv python3 first on PATH may lack them
    raise SystemExit(f"compare_emulate.py: {error.name} is missing from {sys.executable}; run "
                     "this with /usr/bin/python3 (Debian: python3-h5py)")

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("MBKIT_BIN_DIR", os.path.join(SOURCE, "build", "bin"))
GNU_TIME = "/usr/bin/time"


def rate_and_start(log, warmup):
    """Samples per real second after `warmup` steps, and the real seconds before step 1 began."""
    with h5py.File(log, "r", swmr=True) as f:
        wall = f["steps/wall_time"][...]
        samples = f["steps/samples"][...]
    rate = samples[warmup:].sum() / (wall[-1] - wall[warmup - 1])
    first_step = wall[1] - wall[0] if len(wall) > 1 else 0.0
    return rate, wall[0] - first_step


def train(data, log, args, extra, threads=1):
    command = [os.path.join(BIN, "mb-train-fmb"), "--data", data, "--model", "mlp",
               "--threads", str(threads), "--batch-size", str(args.batch_size), "--clock", "virtual",
               "--compute-model", "0.0001,0.001", "--comm-model", "25e-6,1e-10",
               "--eval-every", "0", "--test-size", "100", "--log", log, "--force", "-q", *extra]
    if os.path.exists(GNU_TIME):
        command = [GNU_TIME, "-f", "peak-rss-kb %M", *command]
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    found = re.search(r"peak-rss-kb (\d+)", result.stderr)
    return int(found.group(1)) / 1024 if found else float("nan")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", default="10,100,1000,10000")
    parser.add_argument("--threads", default="1",
                        help="the emulated runs' --threads (comma-separated)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--samples", type=int, default=200000,
                        help="samples each run computes (both runs compute as many)")
    parser.add_argument("--data", default=None, help="dataset file (default: fetch Fashion-MNIST)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or os.path.join(tmp, "fmnist.h5")
        if not args.data:
            subprocess.run([os.path.join(BIN, "mb-dataset"), "-q", "fetch", "fashion-mnist", "-o",
                            data], check=True)
        with h5py.File(data, "r") as f:
            rows = len(f["train/labels"])
        threads = [int(t) for t in args.threads.split(",")]
        load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
        print(f"mlp, ps on the virtual clock, {args.rounds} rounds, CPU: {cpu_model()}, "
              f"{os.cpu_count()} cores, load average {load}")
        print(f"{'workers':>8} {'threads':>7} {'batch':>6} {'one process':>12} {'emulated':>10} "
              f"{'ratio':>6} {'start-up':>9} {'peak RSS':>9}")
        for workers in [int(w) for w in args.workers.split(",")]:
            batch = min(args.batch_size, rows // workers)  # a worker's slice may be smaller
            step_samples = batch * workers
            steps = max(4, args.samples // step_samples)
            single_steps = max(4, steps * workers)
            warmup = max(1, steps // 4)
            one_rates = []
            rates, starts, rss = ({t: [] for t in threads} for _ in range(3))
            for round_ in range(args.rounds):
                log = os.path.join(tmp, f"one-{workers}-{round_}.h5")
                args_one = argparse.Namespace(batch_size=batch)
                train(data, log, args_one, ["--steps", str(single_steps)])
                one_rates.append(rate_and_start(log, warmup * workers)[0])
                for t in threads:
                    log = os.path.join(tmp, f"emulated-{workers}-{t}-{round_}.h5")
                    rss[t].append(train(data, log, args_one, ["--steps", str(steps), "--emulate",
                                                              str(workers), "--comm", "ps"], t))
                    rate, start = rate_and_start(log, warmup)
                    rates[t].append(rate)
                    starts[t].append(start)
            one = statistics.median(one_rates)
            for t in threads:
                emulated = statistics.median(rates[t])
                print(f"{workers:>8} {t:>7} {batch:>6} {one:>10.0f}/s {emulated:>8.0f}/s "
                      f"{emulated / one:>6.2f} {statistics.median(starts[t]):>7.2f} s "
                      f"{max(rss[t]):>6.0f} MB", flush=True)


def cpu_model():
    fields = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    return (f"{fields.get('model name', '?')}, family {fields.get('cpu family', '?')} "
            f"model {fields.get('model', '?')}")


if __name__ == "__main__":
    main()
