"""Dropping a program that started OpenMP must not unload libgomp under its parked worker threads.

Run in a subprocess because the failure it guards against is a segfault that would take pytest down with it.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cpu_programs import ADD

from plygrad.backends.cpu.backend import CPUBackend
from plygrad.runtime import Device

SCRIPT = """
import gc, sys
sys.path.insert(0, sys.argv[1])
from cpu_programs import THREAD_IDS
from plygrad.runtime import Device
cpu = Device["CPU"]
binary = cpu.compiler.compile(THREAD_IDS)
for round in range(4):
    program = cpu.load("thread_ids", binary)
    ids, roots = cpu.allocator.alloc(4 * 65536), cpu.allocator.alloc(4 * 65536)
    program([ids, roots], (1, 1, 1), None, [])
    del program
    gc.collect()
    junk = [list(range(1000)) for _ in range(2000)]  # keep the interpreter busy while OpenMP threads idle
print("survived")
"""


def test_dropped_openmp_programs_do_not_crash_the_process() -> None:
    env = {**os.environ}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(Path(__file__).resolve().parent)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "survived" in proc.stdout, (proc.returncode, proc.stderr[-2000:])


def _mappings() -> int:
    with open("/proc/self/maps") as maps:
        return sum(1 for _ in maps)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="counts the process's mappings in /proc")
def test_a_loaded_program_takes_at_most_two_mappings() -> None:
    """Loaded programs stay loaded (backend.py), so each costs mappings of the 65530 a Linux process may hold: with
    the linker's default layout five (a long test session ran out of them after ~13000 programs), two with the
    flags compiler.py probes."""
    cpu = Device["CPU"]
    assert isinstance(cpu, CPUBackend)
    binary = cpu.compiler.compile(ADD)
    if not {"-Wl,-z,noseparate-code", "-Wl,-z,norelro"} <= set(cpu.compiler.toolchain.flags):
        pytest.skip("this linker takes neither -z noseparate-code nor -z norelro")
    gc.collect()
    before = _mappings()
    kept = [cpu.load("add", binary) for _ in range(200)]
    assert _mappings() - before <= 2 * len(kept) + 10
