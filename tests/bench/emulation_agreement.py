#!/usr/bin/python3
"""Real runs against their emulations, setting 1 of issue V: one host, 1 master + 1 worker under
mpirun (one core each), FMB, AMB and asynchronous FMB with --induce delays slept for real on
the wall clock, against the same runs on --clock virtual with the compute model that
mb-bench-partitions --fit measures on this machine (the message model measured at start, as
--clock virtual does by default). Prints mb-report --compare's table for each method, then a
summary: per-step time error (median, p95), time to --target and its error against the
emulator's goals (5%, 10%, 5%), and the order of the methods in time to target, real and
emulated. Not a CI test: the numbers are this machine's, under its load.

    /usr/bin/python3 tests/bench/emulation_agreement.py [--steps 200] [--batch-size 256]
        [--induce 0.05:0.01:1] [--target 0.6] [--data FILE] [--keep DIR]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import h5py
except ImportError as error:  # a conda, pyenv or venv python3 first on PATH may lack it
    raise SystemExit(f"emulation_agreement.py: {error.name} is missing from {sys.executable}; "
                     "run this with /usr/bin/python3 (Debian: python3-h5py)")

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("MBKIT_BIN_DIR", os.path.join(SOURCE, "build", "bin"))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def tool(name):
    return os.path.join(BIN, name)


def run(command, **kwargs):
    return subprocess.run([str(c) for c in command], check=True, env=ENV, text=True, **kwargs)


def fit_compute_model(data, model, batch_size, directory):
    """a (s per sample) and b (s per step) of t(B) = a B + b, as mb-bench-partitions --fit
    measures them on one core, over batch sizes around the run's."""
    sizes = sorted({max(8, batch_size // 4), max(8, batch_size // 2), batch_size, 2 * batch_size})
    path = os.path.join(directory, "time-model.h5")
    run([tool("mb-bench-partitions"), "--data", data, "--model", model, "--batch-sizes",
         ",".join(map(str, sizes)), "--threads", "1", "--steps", "20", "--fit", "--time-model",
         path, "-q", "-f"], stdout=subprocess.DEVNULL)
    with h5py.File(path, "r") as f:
        attrs = f["devices/0"].attrs
        return float(attrs["a"]), float(attrs["b"]), float(attrs["r_squared"])


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown CPU"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--induce", default="0.05:0.01:1",
                        help="--induce of every run (default: the issue's 0.05:0.01:1)")
    parser.add_argument("--target", type=float, default=0.6, help="test accuracy to reach")
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--amb-partitions", type=int, default=8)
    parser.add_argument("--amb-time-limit", type=float, default=None,
                        help="AMB's --time-limit (default: the mean induced delay plus 3/4 of "
                             "the fitted full-batch time)")
    parser.add_argument("--data", default=None, help="dataset file (default: Fashion-MNIST)")
    parser.add_argument("--keep", default=None, help="keep the logs and figures in this directory")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        directory = args.keep or tmp
        os.makedirs(directory, exist_ok=True)
        data = args.data or os.path.join(directory, "fmnist.h5")
        if not args.data and not os.path.exists(data):
            run([tool("mb-dataset"), "-q", "fetch", "fashion-mnist", "-o", data])
        a, b, r2 = fit_compute_model(data, args.model, args.batch_size, directory)
        time_limit = args.amb_time_limit
        if time_limit is None:
            mean_delay = float(args.induce.split(":")[0])
            time_limit = mean_delay + 0.75 * (a * args.batch_size + b)
        methods = [("FMB", "mb-train-fmb", []),
                   ("AMB", "mb-train-amb", ["--time-limit", f"{time_limit:.6g}", "--partitions",
                                            str(args.amb_partitions)]),
                   ("async", "mb-train-fmb", ["--async"])]
        print(f"# CPU: {cpu_model()}; {args.model}, batch {args.batch_size}, {args.steps} steps, "
              f"1 master + 1 worker (mpirun -n 2, 1 thread each), --induce {args.induce}")
        print(f"# compute model (mb-bench-partitions --fit, 1 thread): a = {a:.4g} s/sample, "
              f"b = {b:.4g} s, r^2 = {r2:.3f}; AMB --time-limit {time_limit:.4g} s, "
              f"--partitions {args.amb_partitions}")
        summary = []
        for name, trainer, extra in methods:
            logs = {}
            for clock in ("wall", "virtual"):
                log = os.path.join(directory, f"{name}-{clock}.h5")
                models = ["--compute-model", f"{a!r},{b!r}"] if clock == "virtual" else []
                run(["mpirun", "--oversubscribe", "-n", "2", tool(trainer), "--data", data,
                     "--model", args.model, "--batch-size", str(args.batch_size), "--steps",
                     str(args.steps), "--threads", "1", "--eval-every", str(args.eval_every),
                     "--test-size", "1000", "--test-sample", "fixed", "--induce", args.induce,
                     "--seed", "1", "-q", "--clock", clock, *models, *extra, "--log", log, "-f"])
                logs[clock] = log
            compare = [tool("mb-report"), "--compare", logs["wall"], logs["virtual"], "--target",
                       str(args.target)]
            print(f"\n## {name}")
            print(run(compare, capture_output=True).stdout, end="")
            report = json.loads(run([*compare, "--json"], capture_output=True).stdout)
            summary.append((name, report))
            if args.keep:
                run([tool("mb-plot"), "--type", "clock-compare", logs["wall"], logs["virtual"],
                     "--target", str(args.target), "-o",
                     os.path.join(directory, f"{name}-clock-compare.png"), "-f", "-q"])

        def percent(value):
            return "-" if value is None else f"{100 * value:.1f}"

        def seconds(run_):
            return "not reached" if run_["time_to_target"] is None else \
                f"{run_['time_to_target']:.2f}"

        print(f"\n# summary: errors in %, goals median <= 5, p95 <= 10, time to "
              f"{100 * args.target:g}% <= 5")
        print(f"# {'method':<7} {'median':>7} {'p95':>7} {'real (s)':>12} {'emulated (s)':>13} "
              f"{'error':>6}  goals met")
        for name, report in summary:
            error = report["step_time_error"]
            print(f"  {name:<7} {percent(error['median']):>7} {percent(error['p95']):>7} "
                  f"{seconds(report['real']):>12} {seconds(report['emulated']):>13} "
                  f"{percent(report['time_to_target_error']):>6}  "
                  f"{report['goals_met']} of {report['goals_checked']}")

        def order(which):
            reached = [(r[which]["time_to_target"], n) for n, r in summary
                       if r[which]["time_to_target"] is not None]
            return " < ".join(n for _, n in sorted(reached)) or "none reached"

        print(f"# order in time to target: real {order('real')}; emulated {order('emulated')}")


if __name__ == "__main__":
    main()
