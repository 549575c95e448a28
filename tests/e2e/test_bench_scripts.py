"""The PyTorch comparisons of tests/bench refuse to measure against a PyTorch whose dense layers
run on any BLAS but OpenBLAS (Debian's python3-torch uses whatever libblas.so.3 is selected: on a
fresh machine the reference BLAS, about 8x slower), say so on one line naming what was found,
and name the BLAS in their output. What PyTorch maps is stood in for by fake interpreters that
print it; the scripts themselves are run only as far as that check (--blas-only): no benchmark
runs here."""

import os
import subprocess
import sys
import unittest

import mbtest

BENCH_DIR = os.path.join(mbtest.SOURCE_DIR, "tests", "bench")
sys.path.insert(0, BENCH_DIR)
import torch_blas  # noqa: E402  (tests/bench/torch_blas.py)


class TorchBlas(mbtest.ToolTestCase):
    def fake_python(self, name, script):
        """An 'interpreter' that ignores its arguments and runs `script` (sh)."""
        path = self.path(name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + script + "\n")
        os.chmod(path, 0o755)
        return path

    def test_the_reference_blas_is_refused_naming_it(self):
        python = self.fake_python("reference", "echo /usr/lib/x86_64-linux-gnu/blas/libblas.so.3")
        with self.assertRaises(SystemExit) as refused:
            torch_blas.require_openblas("compare_torch.py", python=python)
        message = str(refused.exception.code)
        self.assertTrue(message.startswith("compare_torch.py: PyTorch runs its dense layers on "
                                           "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"), message)
        self.assertIn("not OpenBLAS", message)
        self.assertIn("apt-get install libopenblas0-pthread", message)
        self.assertNotIn("\n", message)

    def test_no_blas_at_all_and_no_pytorch_are_refused(self):
        python = self.fake_python("none", "true")
        with self.assertRaises(SystemExit) as refused:
            torch_blas.require_openblas("compare_ddp.py", python=python)
        self.assertIn("on no BLAS library", str(refused.exception.code))
        python = self.fake_python("missing", "echo \"ModuleNotFoundError: No module named 'torch'\" >&2; exit 1")
        with self.assertRaises(SystemExit) as refused:
            torch_blas.require_openblas("compare_ddp.py", python=python)
        self.assertEqual(str(refused.exception.code),
                         f"compare_ddp.py: PyTorch does not run in {python} (python3-torch): "
                         "ModuleNotFoundError: No module named 'torch'")

    def test_openblas_is_accepted_and_named(self):
        library = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas64_.so.0"
        python = self.fake_python("openblas", f"echo /usr/lib/x86_64-linux-gnu/libgfortran.so.5; "
                                              f"echo {library}")
        self.assertEqual(torch_blas.require_openblas("compare_torch.py", python=python),
                         f"OpenBLAS: {os.path.realpath(library)}")

    def test_compare_torch_checks_before_it_measures(self):
        # Here: refused where this machine's PyTorch is not on OpenBLAS (or absent), with one
        # line and nothing measured; accepted and named where it is.
        paths, error = torch_blas.loaded_blas()
        on_openblas = error is None and any(torch_blas.is_openblas(p) for p in paths)
        completed = subprocess.run(["/usr/bin/python3", os.path.join(BENCH_DIR, "compare_torch.py"),
                                    "--blas-only"], capture_output=True, text=True, timeout=300)
        if on_openblas:
            self.assertEqual(completed.returncode, 0, completed.stderr)
            self.assertIn("# PyTorch's BLAS (its dense layers): OpenBLAS: ", completed.stdout)
        else:
            self.assertEqual(completed.returncode, 1, completed.stderr)
            self.assertEqual(completed.stdout, "")
            lines = completed.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, completed.stderr)
            self.assertTrue(lines[0].startswith("compare_torch.py: PyTorch "), lines[0])


if __name__ == "__main__":
    mbtest.main()
