"""--emulate N under mpirun -n R, the asynchronous master and DBSL's asynchronous server: a rank
hosting workers computes their started rounds while it waits for another rank's broadcast,
keeping the results not yet taken within a bound (512 MiB), past which a round is computed when
it is taken. Early or at its take, a round's result is the same: with the bound at zero (every
round at its take) and at one and a half results (one computed ahead at a time, the others at
their take) every R gives the one process's bits. The bound is set through
MBKIT_EMULATE_AHEAD_BYTES, an environment variable for tests (mb-train-fmb(1), ENVIRONMENT).
"""

import os
import shutil
import unittest

import mbtest
from test_emulate import AMB, COMMON, SameBits, ToyData, arrays
from test_emulate_dbsl import COMMON as DBSL

MPIRUN = shutil.which("mpirun")


@unittest.skipIf(MPIRUN is None, "mpirun is not installed")
class EmulateAhead(ToyData, SameBits, mbtest.ToolTestCase):

    def train(self, name, tool, args, ranks=0, common=COMMON, bound=None):
        command = [mbtest.tool(tool), "--data", "toy.h5", *common, *args,
                   "--log", f"{name}-log.h5", "--checkpoint", f"{name}.h5"]
        env = dict(self.env)
        if bound is not None:
            env["MBKIT_EMULATE_AHEAD_BYTES"] = str(bound)
        if ranks > 0:
            exported = ["-x", "MBKIT_EMULATE_AHEAD_BYTES"] if bound is not None else []
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *exported, *command]
            env["TMPDIR"] = self.path(f"tmp-{name}")  # mpiruns at once: a session dir each
            os.makedirs(env["TMPDIR"], exist_ok=True)
        self.assertSucceeded(mbtest.run(command, cwd=self.dir, env=env, timeout=300))

    def one_and_a_half_results(self, name):
        """Bytes of one and a half rounds' results (gradients and state in floats, the model
        pushed by DBSL) of the one-process run NAME's model: a bound that keeps one ahead."""
        floats = sum(array.size for key, array in arrays(self.path(f"{name}.h5"), False).items()
                     if key.startswith(("params/", "state/")))
        self.assertGreater(floats, 0)
        return floats * 4 * 3 // 2

    def test_rounds_computed_ahead_or_at_their_take_give_the_one_process_s_bits(self):
        cases = [
            # K-async's held gradients and message delays: rounds taken out of start order.
            ("kasync", "mb-train-fmb", ["--comm", "ps", "--async", "--emulate", "7",
                                        "--k-async", "2", "--async-delay-std", "0.01"],
             COMMON, 3),
            ("amb", "mb-train-amb", [*AMB, "--comm", "ps", "--async", "--emulate", "5"],
             COMMON, 2),
            ("dbsl", "mb-train-dbsl", ["--small-workers", "2", "--steps", "16", "--optimizer",
                                       "momentum", "--keep-optimizer-state", "--emulate", "7"],
             DBSL, 3),
        ]
        self.together(*[lambda case=case: self.train(f"{case[0]}-one", case[1], case[2],
                                                     common=case[3]) for case in cases])
        runs = []
        for name, tool, args, common, ranks in cases:
            for label, bound in (("take", 0), ("one", self.one_and_a_half_results(f"{name}-one"))):
                runs.append((f"{name}-{label}-r{ranks}", tool, args, ranks, common, bound))
        self.together(*[lambda run=run: self.train(*run) for run in runs])
        for run in runs:
            with self.subTest(run=run[0]):
                self.assert_same_bits(run[0], run[0].split("-")[0] + "-one")

    def test_a_bound_that_is_not_a_count_of_bytes_is_refused(self):
        command = [mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *COMMON, "--comm", "ps",
                   "--async", "--emulate", "3"]
        result = mbtest.run(command, cwd=self.dir,
                            env=dict(self.env, MBKIT_EMULATE_AHEAD_BYTES="1e6"), timeout=120)
        self.assertUsageError(result, "MBKIT_EMULATE_AHEAD_BYTES: '1e6'")


if __name__ == "__main__":
    mbtest.main()
