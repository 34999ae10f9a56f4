"""A process that runs many distinct programs (issue #32: a long test session failed to load its next program,
"cannot apply additional memory protection after relocation", once ~13000 libraries held the process's 65530
memory mappings). Each distinct program is loaded once; the CPU backend keeps every library it loaded (backend.py
says why) at two mappings each, and a plan evicted from the plan cache runs again without loading anew."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from plygrad.frontend import Tensor
from plygrad.runtime import plan

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="counts the process's mappings")


def _mappings() -> int:
    with open("/proc/self/maps") as maps:
        return sum(1 for _ in maps)


def test_distinct_programs_do_not_accumulate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan, "MAX_PLANS", 8)
    data = np.linspace(-1, 1, 4096, dtype=np.float32)
    x = Tensor(data)

    def program(i: int) -> tuple[Tensor, np.ndarray]:  # a constant of its own: one new kernel per i
        scale = np.float32(i + 0.25)
        return (x * float(scale)).sin().sum(), np.sin(data * scale, dtype=np.float32).sum(dtype=np.float64)

    for i in range(20):  # fill the caches to their (lowered) bounds first
        program(i)[0].realize()
    gc.collect()
    before = _mappings()
    for i in range(20, 220):
        got, want = program(i)
        np.testing.assert_allclose(got.item(), want, rtol=1e-4, atol=1e-3)
    gc.collect()
    # each program's library stays loaded: two mappings (five with the linker's default layout), plus a few
    # buffers and allocator pages that come and go
    assert _mappings() - before < 2 * 200 + 100
    got, want = program(3)  # dropped long ago: lowered, loaded and run again
    np.testing.assert_allclose(got.item(), want, rtol=1e-4, atol=1e-3)
