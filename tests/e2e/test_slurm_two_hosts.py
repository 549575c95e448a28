"""Across hosts, for real: two hosts made on this machine with network namespaces and a veth pair
(tests/e2e/slurmcluster.py, TwoHosts: h1 and h2, each with its own address and host name), each
running its own slurmd as its own SLURM node, the controller on h1. The share/mbkit/slurm
scripts are submitted with sbatch -N 2, so that Open MPI's messages between the hosts go over
the veth pair (TCP; each namespace has only its loopback and its end of the pair):

- mb-train-fmb --comm allreduce on 2 ranks, one per host: --allreduce auto takes MPI_Allreduce
  without timing (no memory is shared across hosts), and --allreduce shm is refused;
- mb-train-fmb --comm allreduce --bucket-mb on 4 ranks, two per host, and mb-train-amb --comm
  ps on 4 ranks: each the same model as the same run on one host (mpirun) with the same seed;
- bandwidth.sbatch: collectives and exchanges timed and checked between the hosts.

Needs root, slurm-wlm, munge and iproute2, and a kernel that lets it make network namespaces;
elsewhere it is reported skipped (status 77) with the reason. Everything is torn down at the
end, also when a check fails."""

import json
import os
import re
import shutil

import h5py
import numpy as np

import mbtest
import slurmcluster

SCRIPTS = os.path.join(mbtest.SOURCE_DIR, "share", "mbkit", "slurm")
MPIRUN = shutil.which("mpirun")
JOB_TIMEOUT = 120


def params_of(path):
    with h5py.File(path, "r") as f:
        return {name: f["params"][name][...] for name in f["params"]}


class SlurmTwoHosts(mbtest.ToolTestCase):
    @classmethod
    def setUpClass(cls):
        cls.hosts = slurmcluster.TwoHosts()
        cls.addClassCleanup(cls.hosts.close)
        h1, h2 = cls.hosts.hosts
        cls.cluster = slurmcluster.SlurmCluster(nodes=[("n1", h1), ("n2", h2)], controller=h1,
                                                cpus=2)
        cls.cluster.__enter__()
        cls.addClassCleanup(cls.cluster.stop)  # runs before the namespaces go

    def setUp(self):
        super().setUp()
        os.chmod(self.dir, 0o755)
        self.env["PATH"] = mbtest.BIN_DIR + os.pathsep + self.env.get("PATH", "")
        result = self.mb_dataset("synth", "toy", "--learnable", "--train", "96", "--test", "60",
                                 "-o", self.path("toy.h5"))
        self.assertSucceeded(result)

    def submit(self, script, nodes, tasks, **variables):
        env = dict(self.env, OUT=self.dir, DATA=self.path("toy.h5"), **variables)
        return self.cluster.sbatch(["-N", str(nodes), "-n", str(tasks), "--overcommit",
                                    "--chdir", self.dir,
                                    "--output", self.path(f"{variables['NAME']}-%j.out"),
                                    os.path.join(SCRIPTS, script)], env=env)

    def finish(self, job, name, state="COMPLETED", exit_code="0:0"):
        fields = self.cluster.wait(job, JOB_TIMEOUT)
        with open(self.path(f"{name}-{job}.out")) as f:
            out = f.read()
        self.assertEqual((fields["JobState"], fields["ExitCode"]), (state, exit_code), msg=out)
        self.assertEqual(fields["NodeList"], "n[1-2]", msg=out)
        return out

    def one_host(self, tool, ranks, *args):
        command = [MPIRUN, "--oversubscribe", "-n", str(ranks), mbtest.tool(tool),
                   "--data", self.path("toy.h5"), "--model", "mlp", "--threads", "1", *args]
        result = mbtest.run(command, cwd=self.dir, env=self.env)
        self.assertSucceeded(result)

    def assertSameParams(self, a, b):
        pa, pb = params_of(self.path(a)), params_of(self.path(b))
        self.assertEqual(sorted(pa), sorted(pb))
        for name in pa:
            np.testing.assert_allclose(pa[name], pb[name], rtol=2e-5, atol=2e-6, err_msg=name)

    def config(self, log):
        with h5py.File(self.path(log), "r", swmr=True) as f:
            return json.loads(mbtest.text_attrs(f)["config"])

    def test_auto_allreduce_takes_mpi_across_hosts(self):
        common = "--hidden 16 --optimizer momentum --lr 0.05"
        auto = self.submit("fmb.sbatch", 2, 2, NAME="auto", COMM="allreduce", BATCH="48",
                           STOP="--steps 4", OPTIONS=common)
        shm = self.submit("fmb.sbatch", 2, 2, NAME="shm", COMM="allreduce", BATCH="48",
                          STOP="--steps 4", OPTIONS=common + " --allreduce shm")
        out = self.finish(auto, "auto")
        self.assertIn("workers    2 (allreduce with MPI_Allreduce), ranks 0 on h1; 1 on h2", out)
        config = self.config("auto.h5")
        self.assertEqual(config["allreduce"], "mpi")
        self.assertNotIn("allreduce_trial", config)
        out = self.finish(shm, "shm", state="FAILED", exit_code="2:0")
        self.assertIn("--allreduce shm: only 1 of the 2 ranks run on h", out)

    def test_buckets_and_ps_across_hosts_match_one_host(self):
        fmb_args = ["--comm", "allreduce", "--hidden", "32,16", "--batch-size", "24", "--steps",
                    "6", "--seed", "3", "--bucket-mb", "0.0005", "--optimizer", "momentum",
                    "--lr", "0.05"]
        amb_args = ["--comm", "ps", "--hidden", "16", "--batch-size", "64", "--partitions", "8",
                    "--time-limit", "0.035", "--steps", "5", "--seed", "3", "--clock", "virtual",
                    "--comm-model", "1e-3,0", "--compute-model", "1e-3,2e-3", "--optimizer",
                    "momentum", "--lr", "0.05"]
        fmb = self.submit("fmb.sbatch", 2, 4, NAME="fmb", COMM="allreduce", BATCH="24",
                          STOP="--steps 6", SEED="3",
                          OPTIONS="--hidden 32,16 --bucket-mb 0.0005 --optimizer momentum "
                                  "--lr 0.05")
        amb = self.submit("amb.sbatch", 2, 4, NAME="amb", COMM="ps", BATCH="64", PARTITIONS="8",
                          TIME_LIMIT="0.035", STOP="--steps 5", SEED="3",
                          OPTIONS="--hidden 16 --clock virtual --comm-model 1e-3,0 "
                                  "--compute-model 1e-3,2e-3 --optimizer momentum --lr 0.05 -q")
        # The same runs on this host alone, meanwhile.
        self.one_host("mb-train-fmb", 4, *fmb_args, "-q", "--checkpoint", "fmb-one.h5")
        self.one_host("mb-train-amb", 4, *amb_args, "-q", "--checkpoint", "amb-one.h5")

        out = self.finish(fmb, "fmb")
        self.assertIn("workers    4 (allreduce with MPI_Iallreduce in buckets of 0.0005 MiB during "
                      "the backward pass), ranks 0-1 on h1; 2-3 on h2", out)
        self.assertEqual(self.config("fmb.h5")["allreduce"], "mpi")
        self.assertEqual(self.config("fmb.h5")["bucket_mb"], 0.0005)
        self.assertSameParams("fmb-checkpoint.h5", "fmb-one.h5")

        self.finish(amb, "amb")
        with h5py.File(self.path("amb.h5"), "r", swmr=True) as log:
            self.assertEqual(list(log["workers/rank"][...]), [1, 2, 3] * 5)
            self.assertEqual(list(log["workers/micro_batches"][...]), [4] * 15)
            self.assertEqual(list(log["steps/samples"][...]), [96] * 5)
        self.assertSameParams("amb-checkpoint.h5", "amb-one.h5")

    def test_bandwidth_script_across_hosts(self):
        job = self.submit("bandwidth.sbatch", 2, 2, NAME="bw", RESULTS=self.path("bw.h5"),
                          OPS="allreduce,exchange", MIN_BYTES="8K", MAX_BYTES="64K",
                          STEP_FACTOR="8", ITERS="5")
        self.finish(job, "bw")
        with h5py.File(self.path("bw.h5"), "r") as f:
            self.assertEqual(mbtest.text_attrs(f)["format"], "mbkit-bandwidth")
            self.assertEqual(sorted(f["np2"]), ["allreduce", "exchange"])
            for op in ("allreduce", "exchange"):
                run = f["np2"][op]
                self.assertEqual(mbtest.text_attrs(run)["hosts"], "h1, h2")
                self.assertTrue(np.all(run["wrong"][...] == 0))
                self.assertTrue(np.all(run["time_us"][...] > 0))
            self.assertEqual(sorted(set(run["bytes"][...])), [8192, 65536])
            modes = {m.decode() if isinstance(m, bytes) else m for m in run["mode"][...]}
            # The shared-memory sum exists only when every rank is on one host.
            self.assertIn("exchange-allreduce-mpi", modes)
            self.assertIn("exchange-ps", modes)
            self.assertNotIn("exchange-allreduce-shm", modes)


if __name__ == "__main__":
    reason = slurmcluster.two_hosts_skip_reason()
    if reason:
        mbtest.skip_file_unless_ci(reason)
    mbtest.main()
