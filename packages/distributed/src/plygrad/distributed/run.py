"""The launcher: `python -m plygrad.distributed.run -n N [--timeout S] script.py args...`.

Runs `mpiexec -n N python -m plygrad.distributed._rank script.py args...` with the mpiexec of the MPI library
installed next to this Python (`pip install plygrad-distributed[mpi]` puts MPICH's there), so each rank aborts the
whole job on an uncaught exception, and returns the job's exit status. `--timeout` sets PLYGRAD_DIST_TIMEOUT (the
seconds a collective waits for the other ranks). N above the number of cores oversubscribes them, which is fine for
tests and slow for training.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from plygrad.distributed.config import PLYGRAD_DIST_TIMEOUT
from plygrad.distributed.errors import DistributedError
from plygrad.distributed.mpi import INSTALL_HINT


def find_mpiexec() -> str:
    """The mpiexec beside sys.executable (a virtualenv's MPICH wheel), else the first on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("mpiexec")
    if found is None:
        raise DistributedError(f"no mpiexec next to {sys.executable} nor on PATH; {INSTALL_HINT}")
    return found


def command(n: int, script: str, args: list[str]) -> list[str]:
    return [find_mpiexec(), "-n", str(n), sys.executable, "-m", "plygrad.distributed._rank", script, *args]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plygrad.distributed.run", description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--nproc", type=int, required=True, help="how many ranks (processes) to start")
    parser.add_argument("--timeout", type=float, default=None,
                        help=f"seconds a collective may wait (sets {PLYGRAD_DIST_TIMEOUT.name}; default "
                        f"{PLYGRAD_DIST_TIMEOUT.default:g})")
    parser.add_argument("script", help="the Python script every rank runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    options = parser.parse_args(argv)
    if options.nproc < 1:
        parser.error(f"-n must be at least 1, got {options.nproc}")
    env = dict(os.environ)
    if options.timeout is not None:
        if not options.timeout > 0:
            parser.error(f"--timeout must be positive, got {options.timeout}")
        env[PLYGRAD_DIST_TIMEOUT.name] = repr(options.timeout)
    try:
        cmd = command(options.nproc, options.script, options.args)
    except DistributedError as exc:
        sys.stderr.write(f"plygrad.distributed.run: {exc}\n")
        return 2
    return subprocess.run(cmd, env=env, check=False).returncode  # noqa: S603 (our own mpiexec and Python)


if __name__ == "__main__":
    sys.exit(main())
