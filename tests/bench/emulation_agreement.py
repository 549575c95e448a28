#!/usr/bin/python3
"""Real runs against their emulations, setting 1 of issue V: one host, 1 master + 1 worker under
mpirun (one core each), FMB, AMB and asynchronous FMB with --induce delays slept for real on
the wall clock, against the same runs on --clock virtual with the compute model that
mb-bench-partitions --fit measures on this machine (the message model measured at start, as
--clock virtual does by default). Prints mb-report --compare's table for each method, then a
summary: per-step time error (median, p95), time to --target and its error against the
emulator's goals (5%, 10%, 5%), and the order of the methods in time to target, real and
emulated. Not a CI test: the numbers are this machine's, under its load.

Setting 3 (--settings 3): the worker slowed for real, its rank in a cgroup v1 cpu controller
with a CFS quota of 1/FACTOR of a core (--slow-factor, default 2) for each CFS period of
--cfs-periods (microseconds: the throttling's granularity), against --slowdown 1=FACTOR on the
virtual clock; skipped, with the reason, where the cgroup cannot be made (no cgroup v1 cpu
controller, not writable).

    /usr/bin/python3 tests/bench/emulation_agreement.py [--settings 1,3] [--steps 200]
        [--batch-size 256] [--induce 0.05:0.01:1] [--target 0.6] [--data FILE] [--keep DIR]
        [--slow-factor 2] [--cfs-periods 100000,10000,2000] [--compute-fit min|median]
"""

import argparse
import json
import os
import shlex
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


def fit_compute_model(data, model, batch_size, directory, statistic):
    """a (s per sample) and b (s per step) of t(B) = a B + b on one core, over batch sizes
    around the run's. statistic "median": mb-bench-partitions --fit's own fit (to the median
    step); "min": a least-squares fit to its fastest steps. Its steps run back to back: on a
    loaded machine the scheduler shares the core among them and the others', and the median
    step is several times the compute of a worker that sleeps between rounds (its --induce
    delay, its wait for the master), which the scheduler runs at once when it wakes."""
    sizes = sorted({max(8, batch_size // 4), max(8, batch_size // 2), batch_size, 2 * batch_size})
    path = os.path.join(directory, "time-model.h5")
    out = run([tool("mb-bench-partitions"), "--data", data, "--model", model, "--batch-sizes",
               ",".join(map(str, sizes)), "--threads", "1", "--steps", "20", "--fit",
               "--time-model", path, "-f"], capture_output=True).stdout
    if statistic == "median":
        with h5py.File(path, "r") as f:
            attrs = f["devices/0"].attrs
            return float(attrs["a"]), float(attrs["b"]), float(attrs["r_squared"])
    header, rows = None, []
    for line in out.splitlines():
        fields = line.lstrip("# ").split()
        if line.startswith("#") and "step_ms_min" in fields:
            header = fields
        elif header and not line.startswith("#") and len(line.split()) == len(header):
            row = dict(zip(header, line.split()))
            rows.append((float(row["batch"]), float(row["step_ms_min"]) / 1e3))
    if len(rows) < 2:
        raise SystemExit("emulation_agreement.py: mb-bench-partitions printed no table to fit")
    n = len(rows)
    mean_x = sum(x for x, _ in rows) / n
    mean_y = sum(y for _, y in rows) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in rows)
    a = max(0.0, sum((x - mean_x) * (y - mean_y) for x, y in rows) / sxx)
    b = max(0.0, mean_y - a * mean_x)
    total = sum((y - mean_y) ** 2 for _, y in rows)
    residual = sum((y - a * x - b) ** 2 for x, y in rows)
    return a, b, 1 - residual / total if total > 0 else 1.0


CGROUP_CPU = "/sys/fs/cgroup/cpu"


class SlowCgroup:
    """A cgroup v1 cpu controller group with a CFS quota of period / factor: a process in it
    gets at most 1/factor of a core, throttled every `period` microseconds."""

    def __init__(self, factor, period):
        self.path = os.path.join(CGROUP_CPU, f"mbkit-agreement-{os.getpid()}-{period}")
        self.factor, self.period = factor, period

    def __enter__(self):
        os.mkdir(self.path)
        try:
            for name, value in (("cpu.cfs_period_us", self.period),
                                ("cpu.cfs_quota_us", int(round(self.period / self.factor)))):
                with open(os.path.join(self.path, name), "w") as f:
                    f.write(str(value))
        except OSError:
            os.rmdir(self.path)
            raise
        return self

    def __exit__(self, *exc):
        os.rmdir(self.path)  # its processes ended with the run

    def wrap(self, command, rank):
        """`command` run by each mpirun rank, rank `rank` inside the group (threads too)."""
        tasks = shlex.quote(os.path.join(self.path, "tasks"))
        line = " ".join(shlex.quote(str(c)) for c in command)
        return ["sh", "-c", f'if [ "$OMPI_COMM_WORLD_RANK" = {rank} ]; then echo $$ > {tasks}; '
                            f"fi; exec {line}"]


def cgroup_unavailable():
    """Why setting 3 cannot run here, or None."""
    probe = os.path.join(CGROUP_CPU, f"mbkit-agreement-probe-{os.getpid()}")
    if not os.path.isfile(os.path.join(CGROUP_CPU, "cpu.cfs_quota_us")):
        return f"no cgroup v1 cpu controller at {CGROUP_CPU}"
    try:
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError as error:
        return f"cannot make a cgroup in {CGROUP_CPU}: {error.strerror}"
    return None


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown CPU"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def percent(value):
    return "-" if value is None else f"{100 * value:.1f}"


def seconds(run_):
    return "not reached" if run_["time_to_target"] is None else f"{run_['time_to_target']:.2f}"


def print_summary(title, summary, target):
    print(f"\n# {title}: errors in %, goals median <= 5, p95 <= 10, time to "
          f"{100 * target:g}% <= 5")
    print(f"# {'run':<16} {'median':>7} {'p95':>7} {'real (s)':>12} {'emulated (s)':>13} "
          f"{'error':>6}  goals met")
    for name, report in summary:
        error = report["step_time_error"]
        print(f"  {name:<16} {percent(error['median']):>7} {percent(error['p95']):>7} "
              f"{seconds(report['real']):>12} {seconds(report['emulated']):>13} "
              f"{percent(report['time_to_target_error']):>6}  "
              f"{report['goals_met']} of {report['goals_checked']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="1", help="1, 3 or 1,3 (default 1)")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--induce", default="0.05:0.01:1",
                        help="--induce of every run of setting 1 (default: the issue's "
                             "0.05:0.01:1)")
    parser.add_argument("--target", type=float, default=0.6, help="test accuracy to reach")
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--amb-partitions", type=int, default=8)
    parser.add_argument("--amb-time-limit", type=float, default=None,
                        help="AMB's --time-limit (default: the mean induced delay plus 3/4 of "
                             "the fitted full-batch time)")
    parser.add_argument("--slow-factor", type=float, default=2.0,
                        help="setting 3: the slow worker's factor (default 2: half a core)")
    parser.add_argument("--cfs-periods", default="100000,10000,2000",
                        help="setting 3: CFS periods to throttle with, in microseconds")
    parser.add_argument("--compute-fit", choices=("min", "median"), default="min",
                        help="fit the compute model to mb-bench-partitions' fastest steps "
                             "(default) or its median ones (its own --fit)")
    parser.add_argument("--data", default=None, help="dataset file (default: Fashion-MNIST)")
    parser.add_argument("--keep", default=None, help="keep the logs and figures in this directory")
    args = parser.parse_args()
    settings = {int(x) for x in args.settings.split(",")}

    with tempfile.TemporaryDirectory() as tmp:
        directory = args.keep or tmp
        os.makedirs(directory, exist_ok=True)
        data = args.data or os.path.join(directory, "fmnist.h5")
        if not args.data and not os.path.exists(data):
            run([tool("mb-dataset"), "-q", "fetch", "fashion-mnist", "-o", data])
        a, b, r2 = fit_compute_model(data, args.model, args.batch_size, directory,
                                     args.compute_fit)
        common = ["--data", data, "--model", args.model, "--batch-size", str(args.batch_size),
                  "--steps", str(args.steps), "--threads", "1", "--eval-every",
                  str(args.eval_every), "--test-size", "1000", "--test-sample", "fixed",
                  "--seed", "1", "-q", "-f"]
        models = ["--compute-model", f"{a!r},{b!r}"]

        def trainer_command(trainer, clock, log, extra, wrap=None):
            command = [tool(trainer), *common, "--clock", clock, *extra, "--log", log]
            return ["mpirun", "--oversubscribe", "-n", "2",
                    *(wrap(command) if wrap else command)]

        def compare(name, real_log, emulated_log):
            command = [tool("mb-report"), "--compare", real_log, emulated_log, "--target",
                       str(args.target)]
            print(f"\n## {name}")
            print(run(command, capture_output=True).stdout, end="")
            if args.keep:
                run([tool("mb-plot"), "--type", "clock-compare", real_log, emulated_log,
                     "--target", str(args.target), "-o",
                     os.path.join(directory, f"{name}-clock-compare.png"), "-f", "-q"])
            return json.loads(run([*command, "--json"], capture_output=True).stdout)

        print(f"# CPU: {cpu_model()}; {args.model}, batch {args.batch_size}, {args.steps} steps, "
              f"1 master + 1 worker (mpirun -n 2, 1 thread each); load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the start")
        print(f"# compute model (mb-bench-partitions, 1 thread, fit to its {args.compute_fit} "
              f"steps): a = {a:.4g} s/sample, "
              f"b = {b:.4g} s, r^2 = {r2:.3f}")
        if 1 in settings:
            time_limit = args.amb_time_limit
            if time_limit is None:
                mean_delay = float(args.induce.split(":")[0])
                time_limit = mean_delay + 0.75 * (a * args.batch_size + b)
            methods = [("FMB", "mb-train-fmb", []),
                       ("AMB", "mb-train-amb", ["--time-limit", f"{time_limit:.6g}",
                                                "--partitions", str(args.amb_partitions)]),
                       ("async", "mb-train-fmb", ["--async"])]
            print(f"# setting 1: --induce {args.induce} slept for real, added on the virtual "
                  f"clock; AMB --time-limit {time_limit:.4g} s, --partitions "
                  f"{args.amb_partitions}")
            summary = []
            for name, trainer, extra in methods:
                induce = ["--induce", args.induce, *extra]
                real_log = os.path.join(directory, f"{name}-wall.h5")
                emulated_log = os.path.join(directory, f"{name}-virtual.h5")
                run(trainer_command(trainer, "wall", real_log, induce))
                run(trainer_command(trainer, "virtual", emulated_log, [*induce, *models]))
                summary.append((name, compare(name, real_log, emulated_log)))
            print_summary("setting 1", summary, args.target)

            def order(which):
                reached = [(r[which]["time_to_target"], n) for n, r in summary
                           if r[which]["time_to_target"] is not None]
                return " < ".join(n for _, n in sorted(reached)) or "none reached"

            print(f"# order in time to target: real {order('real')}; emulated "
                  f"{order('emulated')}")
        if 3 in settings:
            reason = cgroup_unavailable()
            if reason:
                print(f"\n# setting 3 skipped: {reason}")
                return
            factor = args.slow_factor
            print(f"\n# setting 3: the worker (rank 1) in a cgroup with a CFS quota of 1/"
                  f"{factor:g} of a core, against --slowdown 1={factor:g} on the virtual clock "
                  f"(no --induce)")
            emulated_log = os.path.join(directory, "slow-virtual.h5")
            run(trainer_command("mb-train-fmb", "virtual", emulated_log,
                                ["--slowdown", f"1={factor:g}", *models]))
            summary = []
            for period in (int(x) for x in args.cfs_periods.split(",")):
                name = f"slow-period-{period // 1000}ms" if period >= 1000 else \
                    f"slow-period-{period}us"
                real_log = os.path.join(directory, f"{name}-wall.h5")
                with SlowCgroup(factor, period) as group:
                    run(trainer_command("mb-train-fmb", "wall", real_log, [],
                                        wrap=lambda c: group.wrap(c, 1)))
                summary.append((name, compare(name, real_log, emulated_log)))
            print_summary("setting 3", summary, args.target)


if __name__ == "__main__":
    main()
