"""The BLAS Debian's PyTorch runs its dense layers on, and the refusal to compare against any but
OpenBLAS.

Debian's python3-torch calls whatever libblas.so.3 the alternatives system selects
(update-alternatives --display libblas.so.3-x86_64-linux-gnu). On a fresh machine that is the
reference BLAS (libblas3), and PyTorch's dense layers run about 8x slower than on OpenBLAS (mlp
at batch 64: 4.6k against 36.4k samples/s): a ratio against that PyTorch says nothing about
mbkit. The scripts of tests/bench that time PyTorch on the CPU therefore require OpenBLAS
(libopenblas0-pthread, which selects itself when installed) and print which BLAS PyTorch loaded.
What PyTorch loaded is read from the memory map of a process that imported it and multiplied two
matrices, not from the alternatives' link alone (LD_LIBRARY_PATH and the like can override it)."""

import os
import subprocess

ALTERNATIVE = "libblas.so.3-x86_64-linux-gnu"
OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"
HOW_TO_FIX = (f"apt-get install libopenblas0-pthread (it selects itself), or update-alternatives "
              f"--set {ALTERNATIVE} {OPENBLAS}")

# Runs in the interpreter that runs PyTorch: the BLAS libraries mapped once a matrix product ran.
PROBE = """
import torch
torch.mm(torch.ones(64, 64), torch.ones(64, 64))
with open("/proc/self/maps") as maps:
    paths = {line.split()[-1] for line in maps if len(line.split()) >= 6}
for path in sorted(paths):
    name = path.rsplit("/", 1)[-1]
    if "blas" in name.lower():
        print(path)
"""


def loaded_blas(python="/usr/bin/python3", env=None):
    """The BLAS libraries PyTorch maps (the real files), or an error text where it cannot run."""
    try:
        probe = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, env=env,
                               timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"cannot run {python}: {error}"
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no message"])[-1]
        return None, f"PyTorch does not run in {python} (python3-torch): {last}"
    return [os.path.realpath(path) for path in probe.stdout.split()], None


def is_openblas(path):
    return "openblas" in path.lower()


def require_openblas(program, python="/usr/bin/python3", env=None):
    """The line that says which BLAS PyTorch used ('OpenBLAS: PATH'); ends the program with a
    message (status 1) where PyTorch runs on another BLAS, or does not run."""
    paths, error = loaded_blas(python, env)
    if error is not None:
        raise SystemExit(f"{program}: {error}")
    openblas = [path for path in paths if is_openblas(path)]
    if not openblas:
        found = ", ".join(paths) if paths else "no BLAS library"
        raise SystemExit(
            f"{program}: PyTorch runs its dense layers on {found} ({ALTERNATIVE} as the "
            f"alternatives system selects it), not OpenBLAS: its figures would be several times "
            f"too low (the reference BLAS: about 8x on the mlp). Install OpenBLAS: {HOW_TO_FIX}")
    return f"OpenBLAS: {', '.join(openblas)}"
