"""The SLURM job scripts of share/mbkit/slurm/ on a real single-node SLURM cluster brought up from
Debian's packages (slurm-wlm, munge; tests/e2e/slurmcluster.py): fmb.sbatch, amb.sbatch and
dbsl.sbatch submitted with sbatch -n 3 on a small dataset, the logs and checkpoints checked with h5py
against runs outside SLURM, and a job whose worker is killed (kill -9) ending as mbkit(7)
documents for srun --kill-on-bad-exit=1: srun's status 137 naming the task, the other ranks'
status 4 within their 10 s grace.

Needs root and the packages; elsewhere it is reported skipped (status 77) with the reason. The
cluster, its daemons and its jobs are torn down at the end, also when a check fails."""

import json
import os
import re
import signal
import time

import h5py
import numpy as np

import mbtest
import slurmcluster

SCRIPTS = os.path.join(mbtest.SOURCE_DIR, "share", "mbkit", "slurm")
JOB_TIMEOUT = 120  # seconds a job may take before the test gives up on it


def params_of(path):
    with h5py.File(path, "r") as f:
        return {name: f["params"][name][...] for name in f["params"]}


class SlurmSingleNode(mbtest.ToolTestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = slurmcluster.SlurmCluster(cpus=2)
        cls.cluster.__enter__()
        cls.addClassCleanup(cls.cluster.stop)

    def setUp(self):
        super().setUp()
        os.chmod(self.dir, 0o755)
        self.env["PATH"] = mbtest.BIN_DIR + os.pathsep + self.env.get("PATH", "")

    def toy(self, train, test=60):
        result = self.mb_dataset("synth", "toy", "--learnable", "--train", str(train), "--test",
                                 str(test), "-o", self.path("toy.h5"))
        self.assertSucceeded(result)
        return self.path("toy.h5")

    def submit(self, script, tasks, **variables):
        """sbatch -n TASKS of a share/mbkit/slurm script, its variables set through the
        environment, as the scripts' heads say. --overcommit: more tasks than the node's 2 CPUs."""
        env = dict(self.env, OUT=self.dir, **variables)
        return self.cluster.sbatch(["-n", str(tasks), "--overcommit", "--chdir", self.dir,
                                    "--output", self.path(f"{variables['NAME']}-%j.out"),
                                    os.path.join(SCRIPTS, script)], env=env)

    def output(self, name, job):
        with open(self.path(f"{name}-{job}.out")) as f:
            return f.read()

    def assertJobSucceeded(self, job, name):
        fields = self.cluster.wait(job, JOB_TIMEOUT)
        self.assertEqual((fields["JobState"], fields["ExitCode"]), ("COMPLETED", "0:0"),
                         msg=self.output(name, job))

    def test_fmb_and_amb_scripts(self):
        data = self.toy(96)
        quiet = "--hidden 16 --optimizer momentum --lr 0.05 -q"
        # FMB, the script's default exchange (ps): a master and 2 workers of 48 samples, every
        # step the 96 rows. AMB on the virtual clock: micro-batches of 8 cost 8 x 1 ms + 2 ms,
        # so each worker does 4 in its 35 ms (AMB's own e2e test has the arithmetic).
        fmb = self.submit("fmb.sbatch", 3, NAME="fmb", DATA=data, BATCH="48",
                          STOP="--steps 6", SEED="3", OPTIONS=quiet)
        amb = self.submit("amb.sbatch", 3, NAME="amb", DATA=data, BATCH="64", PARTITIONS="8",
                          TIME_LIMIT="0.035", STOP="--steps 5", SEED="3",
                          OPTIONS=quiet + " --clock virtual --comm-model 1e-3,0 "
                                          "--compute-model 1e-3,2e-3")
        started = time.time()
        self.assertJobSucceeded(fmb, "fmb")
        self.assertJobSucceeded(amb, "amb")
        print(f"both jobs done {time.time() - started:.1f} s after submission", flush=True)

        with h5py.File(self.path("fmb.h5"), "r", swmr=True) as log:
            attrs = mbtest.text_attrs(log)
            self.assertEqual((attrs["tool"], int(attrs["world_size"])), ("mb-train-fmb", 3))
            self.assertEqual(json.loads(attrs["config"])["comm"], "ps")
            self.assertEqual(list(log["steps/samples"][...]), [96] * 6)
            self.assertEqual(sorted(set(log["workers/rank"][...])), [1, 2])
        # The same model as one process with the global batch, outside SLURM.
        single = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", data, "--model", "mlp",
                             *quiet.split(), "--batch-size", "96", "--steps", "6", "--seed", "3",
                             "--threads", "1", "--checkpoint", self.path("single.h5")],
                            cwd=self.dir, env=self.env)
        self.assertSucceeded(single)
        ours, theirs = params_of(self.path("fmb-checkpoint.h5")), params_of(self.path("single.h5"))
        self.assertEqual(sorted(ours), sorted(theirs))
        for name in ours:
            np.testing.assert_allclose(ours[name], theirs[name], rtol=2e-5, atol=2e-6,
                                       err_msg=name)

        with h5py.File(self.path("amb.h5"), "r", swmr=True) as log:
            attrs = mbtest.text_attrs(log)
            self.assertEqual((attrs["tool"], int(attrs["world_size"])), ("mb-train-amb", 3))
            self.assertEqual(list(log["workers/rank"][...]), [1, 2] * 5)
            self.assertEqual(list(log["workers/micro_batches"][...]), [4] * 10)
            self.assertEqual(list(log["steps/samples"][...]), [64] * 5)
            self.assertEqual(json.loads(attrs["config"])["time_limit"], 0.035)
        with h5py.File(self.path("amb-checkpoint.h5"), "r") as ckpt:
            self.assertEqual(int(mbtest.text_attrs(ckpt)["step"]), 5)

    def test_dbsl_script(self):
        # A server and 2 workers, the second small, on the virtual clock: the plan gives the
        # large worker 165 samples at batch 32 and the small one 135 at 23, and the pushes
        # alternate (mb-train-dbsl --plan). The same model as the same run under mpirun.
        data = self.toy(300)
        common = "--hidden 16 --eval-every 1 -q --clock virtual --compute-model 0.0001,0.005"
        job = self.submit("dbsl.sbatch", 3, NAME="dbsl", DATA=data, MODEL="mlp", BASE_BATCH="32",
                          EXTRA_TIME="1.1", SMALL_WORKERS="1", EPOCHS="2",
                          TIME_MODEL="0.0001,0.005", OPTIONS=common)
        one_host = mbtest.run(
            ["mpirun", "--oversubscribe", "-n", "3", mbtest.tool("mb-train-dbsl"), "--data", data,
             "--model", "mlp", "--base-batch", "32", "--extra-time", "1.1", "--small-workers",
             "1", "--epochs", "2", "--time-model-ab", "0.0001,0.005", "--seed", "1",
             "--threads", "1", *common.split(), "--checkpoint", self.path("mpirun.h5")],
            cwd=self.dir, env=self.env)
        self.assertSucceeded(one_host)
        self.assertJobSucceeded(job, "dbsl")
        with h5py.File(self.path("dbsl.h5"), "r", swmr=True) as log:
            attrs = mbtest.text_attrs(log)
            self.assertEqual((attrs["tool"], int(attrs["world_size"])), ("mb-train-dbsl", 3))
            self.assertEqual(list(log["workers/rank"][...]), [2, 1, 2, 1])
            self.assertEqual(list(log["workers/samples"][...]), [135, 165, 135, 165])
        ours, theirs = params_of(self.path("dbsl-checkpoint.h5")), params_of(self.path("mpirun.h5"))
        for name in ours:
            np.testing.assert_allclose(ours[name], theirs[name], rtol=2e-5, atol=2e-6,
                                       err_msg=name)

    def rank_pid(self, job, rank, timeout=60):
        """PID of the job's training process of `rank` (SLURM_PROCID in its environment; job
        ids start at 1 in every test cluster, so the cluster's SLURM_CONF is compared too)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        if not f.read().split(b"\0")[0].endswith(b"mb-train-fmb"):
                            continue
                    with open(f"/proc/{entry}/environ", "rb") as f:
                        environ = dict(item.split(b"=", 1) for item in f.read().split(b"\0")
                                       if b"=" in item)
                except OSError:
                    continue
                if (environ.get(b"SLURM_CONF") == self.cluster.conf.encode()  # not another test's
                        and environ.get(b"SLURM_JOB_ID") == job.encode()
                        and environ.get(b"SLURM_PROCID") == str(rank).encode()):
                    return int(entry)
            time.sleep(0.2)
        self.fail(f"rank {rank} of job {job} did not start")

    def test_killed_worker_ends_the_job_naming_it(self):
        data = self.toy(3000)
        job = self.submit("fmb.sbatch", 3, NAME="kill", DATA=data, BATCH="8",
                          STOP="--epochs 1000",
                          OPTIONS="--hidden 16 --flush-interval 0.2 --print-every 1000000")
        self.wait_for_steps(self.path("kill.h5"), 20)
        os.kill(self.rank_pid(job, 2), signal.SIGKILL)
        killed = time.time()
        fields = self.cluster.wait(job, 60)
        took = time.time() - killed
        out = self.output("kill", job)
        print(f"the job ended {took:.1f} s after the kill", flush=True)
        # As under mpirun (mbkit(7), EXIT STATUS), the launcher decides the status of a job one
        # of whose processes was killed, and names it: srun says "task 2: Killed" (task = rank)
        # and ends with 137 (128 + SIGKILL, the killed task's) or 4 (the others'): over runs of
        # this test slurm-wlm 22.05 gave both. The other ranks, sent SIGTERM by
        # --kill-on-bad-exit=1, wait at most 10 s for the dead rank and exit with 4, naming the
        # rank that does not answer or, when they were inside a collective with it, the call.
        self.assertEqual(fields["JobState"], "FAILED", msg=out)
        self.assertIn(fields["ExitCode"], ("137:0", "4:0"), msg=out)
        self.assertLess(took, 30, msg=out)
        self.assertRegex(out, r"srun: error: \S+: task 2: Killed", msg=out)
        exited_4 = set()
        for tasks in re.findall(r"srun: error: \S+: tasks? ([0-9,-]+): Exited with exit code 4$",
                                out, re.M):
            for part in tasks.split(","):
                first, _, last = part.partition("-")
                exited_4.update(range(int(first), int(last or first) + 1))
        self.assertEqual(exited_4, {0, 1}, msg=out)
        errors = re.findall(r"^mb-train-fmb: .*error: .*$", out, re.M)
        self.assertTrue(errors, msg=out)
        for line in errors:
            named = re.search(r"ranks? ([0-9, and]+) do(?:es)? not answer", line)
            if named:
                self.assertIn("2", re.split(r", | and ", named.group(1)), msg=out)
            else:
                self.assertRegex(line, r"MPI_\w+ did not complete within 10 s \(after a stop "
                                       r"signal\)", msg=out)

if __name__ == "__main__":
    reason = slurmcluster.skip_reason()
    if reason:
        mbtest.skip_file_unless_ci(reason)
    mbtest.main()
