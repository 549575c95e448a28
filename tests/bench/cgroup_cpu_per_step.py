#!/usr/bin/env python3
"""The real worker's CPU a step and its throttling under a CFS quota, start-up excluded.

Setting 3 of emulation_agreement.py (1 master + 1 worker, mlp, batch 256, mpirun -n 2, the
worker, rank 1, in a cgroup v1 cpu group and a cpuacct group): for each of no quota and half a
core at CFS periods of 2, 10 and 100 ms, a 40-step and a LONG-step run; the difference of their
cpuacct.usage and cpu.stat over LONG - 40 steps is the steps' CPU and throttled time, the
start-up (loading the data, MPI) cancelled. Needs root (cgroups). Usage (from the source tree):
    /usr/bin/python3 tests/bench/cgroup_cpu_per_step.py DATA.h5 [LONG [ROUNDS [DIR]]]"""
import os, subprocess, sys, shlex, tempfile, h5py, numpy as np
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("MBKIT_BIN_DIR", os.path.join(SOURCE, "build", "bin"))
data = sys.argv[1]
D = sys.argv[4] if len(sys.argv) > 4 else tempfile.mkdtemp(prefix="cgroup-cpu-")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
def run_one(period, quota, steps, tag):
    name = f"q3-{os.getpid()}-{tag}"
    cpu = f"/sys/fs/cgroup/cpu/{name}"; acct = f"/sys/fs/cgroup/cpuacct/{name}"
    os.mkdir(cpu); os.mkdir(acct)
    open(f"{cpu}/cpu.cfs_period_us", "w").write(str(period))
    open(f"{cpu}/cpu.cfs_quota_us", "w").write(str(quota))
    log = f"{D}/{tag}.h5"
    cmd = [f"{BIN}/mb-train-fmb", "--data", data, "--model", "mlp", "--batch-size", "256",
           "--steps", str(steps), "--threads", "1", "--eval-every", "20", "--test-size", "1000",
           "--test-sample", "fixed", "--seed", "1", "-q", "-f", "--clock", "wall", "--log", log]
    line = " ".join(shlex.quote(c) for c in cmd)
    sh = (f'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then echo $$ > {cpu}/tasks; echo $$ > {acct}/tasks; '
          f'fi; exec {line}')
    subprocess.run(["mpirun", "--oversubscribe", "-n", "2", "sh", "-c", sh], check=True, env=ENV)
    stat = {k: int(v) for k, v in (l.split() for l in open(f"{cpu}/cpu.stat") if l.strip())}
    usage = int(open(f"{acct}/cpuacct.usage").read()) / 1e9
    os.rmdir(cpu); os.rmdir(acct)
    with h5py.File(log) as f:
        st = f["steps/step_time"][...]
    return usage, stat["nr_periods"], stat["nr_throttled"], stat["throttled_time"] / 1e9, st.sum(), np.median(st)
configs = [("unthrottled", 100000, -1), ("2ms", 2000, 1000), ("10ms", 10000, 5000), ("100ms", 100000, 50000)]
short, long_ = 40, int(sys.argv[2]) if len(sys.argv) > 2 else 440
for rep in range(int(sys.argv[3]) if len(sys.argv) > 3 else 1):
    for name, period, quota in configs:
        a = run_one(period, quota, short, f"{name}-{short}-{rep}")
        b = run_one(period, quota, long_, f"{name}-{long_}-{rep}")
        n = long_ - short
        print(f"{name:12s} rep {rep}: CPU/step {(b[0]-a[0])/n*1e3:.3f} ms; steps' time/step {(b[4]-a[4])/n*1e3:.3f} ms, median step {b[5]*1e3:.3f} ms; "
              f"throttled/step {(b[3]-a[3])/n*1e3:.3f} ms, throttled {b[2]-a[2]} of {b[1]-a[1]} periods more; "
              f"long run: CPU {b[0]:.3f} s, throttled {b[3]:.3f} s in {b[2]}/{b[1]}; load {os.getloadavg()[0]:.1f}", flush=True)
