"""A dropped program's library is closed (a process can map only so many), and closing one that started OpenMP
must not unload libgomp under its parked worker threads.

The OpenMP case runs in a subprocess because the failure it guards against is a segfault that would take pytest
down with it.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cpu_programs import ADD

from plygrad.backends.cpu.backend import CPUBackend, CPUProgram
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
def test_dropped_programs_release_their_mappings() -> None:
    """Each load maps the library anew; 3000 loads kept would take about 6000-15000 mappings of the 65530 a Linux
    process may hold by default (a long test session ran out of them), dropped ones must take none."""
    cpu = Device["CPU"]
    assert isinstance(cpu, CPUBackend)
    binary = cpu.compiler.compile(ADD)
    a, b = np.arange(64, dtype=np.float32), np.full(64, 0.5, dtype=np.float32)
    handles = [cpu.allocator.alloc(256) for _ in range(3)]
    cpu.allocator.copyin(handles[1], memoryview(a.tobytes()))
    cpu.allocator.copyin(handles[2], memoryview(b.tobytes()))
    gc.collect()
    before = _mappings()
    for _ in range(3000):
        program = cpu.load("add", binary)
        program(handles, (1, 1, 1), None, [64])
        del program
    assert _mappings() - before < 50
    out = bytearray(256)
    cpu.allocator.copyout(memoryview(out), handles[0])
    assert (np.frombuffer(out, dtype=np.float32) == a + b).all()
    kept = CPUProgram("add", binary)  # not loaded by the backend (the batch dispatcher's own): it stays loaded
    lib = kept.lib
    kept.__del__()
    assert kept.lib is lib and kept.entry is not None
