"""tinygrad 0.14's CPU device compiles with a program named `clang`. Debian installs clang as `clang-19`
(scripts/setup-system.sh), with no plain `clang`; the benches then put a link named `clang` to the newest versioned
one in a folder of their own at the front of PATH, so tinygrad's column is measured instead of reading n/a.

Call `ensure_clang()` before tinygrad compiles anything (it only reads PATH when it runs the compiler).

The link is also on plygrad's PATH. plygrad's CPU backend takes the first of clang, gcc, cc that builds OpenMP
programs, and Debian's clang-19 has no libomp here, so plygrad keeps gcc. Before that rule, plygrad picked this
clang and every plygrad column of these benches ran its kernels on one core (matmul 1024: 73-99 instead of
150-200 GFLOP/s)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

VERSIONS = range(30, 13, -1)  # clang-30 ... clang-14, newest first


def ensure_clang() -> str | None:
    """Make `clang` runnable for tinygrad; a note saying what was done (None when `clang` already was, or when no
    versioned clang exists either: tinygrad's column then says why it is n/a)."""
    if shutil.which("clang"):
        return None
    found = next((path for v in VERSIONS if (path := shutil.which(f"clang-{v}"))), None)
    if found is None:
        return None
    folder = Path(tempfile.mkdtemp(prefix="bench-clang-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    (folder / "clang").symlink_to(found)
    os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
    return f"tinygrad compiles with {Path(found).name} (no `clang` on PATH: a link to it, for this run)"
