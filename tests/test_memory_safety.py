"""Buffers freed by Python's cyclic garbage collector (issue #32): the shared repro, and many small programs that
drop tensors in reference cycles in one process, each in a fresh interpreter so a regression (freed memory handed
to the next tensor) fails the test instead of corrupting the heap of the test process."""

from __future__ import annotations

import subprocess
import sys

import pytest

REPRO = """
import faulthandler, gc
import numpy as np
from plygrad.frontend import Tensor
faulthandler.enable()
faulthandler.dump_traceback_later(90, exit=True)
SHAPE = (128, 128)  # float32: 64 KiB, the smallest size the CPU allocator keeps for reuse once freed
for i in range(50):
    t = Tensor(np.ones(SHAPE, dtype=np.float32)).realize()
    cycle = [t]
    cycle.append(cycle)
    del t, cycle
    gc.collect()
    other = bytearray(np.zeros(SHAPE, np.float32).nbytes)
    a = Tensor(np.full(SHAPE, 7.0, dtype=np.float32)).realize()
    a.assign(a + 1).realize()
    assert (a.numpy() == 8).all(), f"round {i}: tensor has wrong values"
    assert not any(other), f"round {i}: plygrad wrote tensor data into an unrelated bytearray"
print("clean")
"""

# assign, setitem and TinyJit programs of sizes the allocator keeps, some of their tensors left in cycles that only
# the collector frees (at whatever point it runs), the results checked against NumPy as they go
PROGRAMS = """
import faulthandler, gc
import numpy as np
from plygrad.frontend import Tensor
from plygrad.frontend.jit import TinyJit
faulthandler.enable()
faulthandler.dump_traceback_later(150, exit=True)
rng = np.random.default_rng(0)
gc.set_threshold(50, 5, 5)  # collections in the middle of realizes, not only at the explicit ones
graveyard = []

@TinyJit
def step(x, w):
    return (x @ w).relu().sum(axis=0).realize()

for i in range(60):
    n = int(rng.choice([128, 160, 256]))
    a_np = rng.standard_normal((n, n)).astype(np.float32)
    a = Tensor(a_np).realize()
    b = (a * 2).realize()
    a.assign(a + b).realize()
    a_np = a_np + 2 * a_np
    a[1:5] = Tensor(np.full((4, n), float(i), np.float32))
    a_np[1:5] = i
    cycle = [b, a.detach() + 1]
    cycle.append(cycle)
    graveyard.append(cycle)
    if i % 3 == 0:
        graveyard.clear()
    w_np = rng.standard_normal((n, 64)).astype(np.float32)
    out = step(Tensor(rng.standard_normal((128, n)).astype(np.float32)), Tensor(w_np)) if n == 128 else None
    unrelated = bytearray(n * n * 4)
    assert np.allclose(a.numpy(), a_np, atol=1e-4), f"program {i}: wrong values"
    assert not any(unrelated), f"program {i}: tensor data landed in an unrelated bytearray"
    del out
print("clean")
"""


@pytest.mark.parametrize("script", [REPRO, PROGRAMS], ids=["shared-repro", "assign-setitem-jit-programs"])
def test_tensors_freed_in_reference_cycles_never_hand_out_freed_memory(script: str) -> None:
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0 and done.stdout.strip().endswith("clean"), (done.returncode, done.stderr[-3000:])
