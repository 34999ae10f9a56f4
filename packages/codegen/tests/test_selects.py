"""relu's select becomes a MAX (selects.py) with the select's value for every input, NaN and signed zeros included,
and so takes the vector form; a negative-zero constant keeps the select."""

from __future__ import annotations

import numpy as np
import pytest
from cg_kernels import load, loop, param, sink, store
from cg_run import run_program

from plygrad.codegen import lower_uop
from plygrad.ir import Ops, Target, UOp, dtypes

N = 64


def relu_like(c: float) -> UOp:
    """out[i] = (a[i] <= c) ? c : a[i], spelled as the frontend spells `le`: (a < c) | (a == c)."""
    out, a = param(0, dtypes.float32, N), param(1, dtypes.float32, N)
    i = loop(N, 0)
    x, const = load(a, i), UOp.const(dtypes.float32, c)
    cond = x.alu(Ops.CMPLT, const).alu(Ops.OR, x.alu(Ops.CMPEQ, const))
    return sink(UOp(Ops.END, dtypes.void, (store(out, i, cond.alu(Ops.WHERE, const, x)), i)))


@pytest.mark.parametrize("c", [0.0, 1.5, -2.0, -0.0])
def test_relu_select_as_max_keeps_every_value(c: float) -> None:
    program = lower_uop(relu_like(c), Target("CPU", "c"))
    source = program.src[0].arg
    assert ("= plygrad_max_float" in source) == (c != 0 or np.copysign(1, c) > 0), source
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    x[:8] = [0.0, -0.0, np.nan, -np.inf, np.inf, c, -c, 1e-45]
    out = np.zeros(N, np.float32)
    run_program(program, [out, x])
    want = np.where((x < c) | (x == c), np.float32(c), x)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(out), nan)
    assert np.array_equal(out[~nan].view(np.uint32), want[~nan].view(np.uint32))  # signed zeros included
