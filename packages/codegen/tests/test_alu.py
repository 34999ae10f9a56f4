"""Every ALU op, CAST and BITCAST rendered to C agrees with plygrad.ir's reference semantics (`exec_alu`,
`cast_value`, `bitcast_value`, docs/ir.md §5) on awkward values: wraparound, -0.0, inf, NaN, MIN / -1, division
by zero, shifts by negative or too large amounts, float -> int of NaN, inf and out-of-range values: every case C
leaves undefined has the IR's defined result, never a trap.

One kernel per dtype computes every applicable op as a separate output, so a dtype costs one compile.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from cg_kernels import load, loop, param, sink, store
from cg_run import run_program

from plygrad.codegen import lower_uop
from plygrad.ir import (
    ConstType,
    DType,
    DTypeKind,
    Ops,
    Target,
    bitcast_value,
    cast_value,
    dtypes,
    exec_alu,
    truncate,
)

CPU = Target("CPU", "c", threads=1)
INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32,
        dtypes.uint64]
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
TRANSCENDENTAL = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW}
RTOL = {dtypes.float16: 2e-3, dtypes.bfloat16: 1.6e-2, dtypes.float32: 3e-7, dtypes.float64: 1e-15}


def np_dtype(dt: DType) -> np.dtype[Any]:
    return np.dtype(ml_dtypes.bfloat16) if dt is dtypes.bfloat16 else np.dtype(dt.name)


def sample(dt: DType) -> list[ConstType]:
    if dt is dtypes.bool:
        return [False, True]
    if dt.kind is DTypeKind.FLOAT:
        raw = [0.0, -0.0, 1.0, -1.5, 2.5, 0.1, -7.25, 1000.0, 0.5, math.inf, -math.inf, math.nan]
        return [truncate(dt, v) for v in raw]
    raw_ints = [0, 1, -1, 7, -7, 3, 100, -100, dt.min, dt.max, dt.min + 1, 13]
    return list(dict.fromkeys(truncate(dt, v) for v in raw_ints))


def binary_ops(dt: DType) -> list[Ops]:
    ops = [Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ]
    if dt is dtypes.bool:
        return [*ops, Ops.AND, Ops.OR, Ops.XOR]
    ops.append(Ops.SUB)
    if dt.kind is DTypeKind.FLOAT:
        return [*ops, Ops.FDIV, Ops.POW]
    return [*ops, Ops.AND, Ops.OR, Ops.XOR, Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR]


def unary_ops(dt: DType) -> list[Ops]:
    if dt is dtypes.bool:
        return []
    if dt.kind is DTypeKind.FLOAT:
        return [Ops.NEG, Ops.TRUNC, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN]
    return [Ops.NEG, Ops.TRUNC]


def to_array(values: list[ConstType], dt: DType) -> np.ndarray:
    if dt.kind is DTypeKind.FLOAT:  # through float64: every value is exact there, and bfloat16 has no literal form
        with np.errstate(invalid="ignore"):  # NaN into bfloat16 warns, but is exactly what is wanted
            return np.array(values, dtype=np.float64).astype(np_dtype(dt))
    return np.array(values, dtype=np_dtype(dt))


def assert_same(got: np.ndarray, expected: list[ConstType], dt: DType, what: str, approx: bool) -> None:
    want = to_array(expected, dt)
    if dt.kind is not DTypeKind.FLOAT:
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{what}: NaN positions")
    ok = ~np.isnan(w)
    if approx:
        np.testing.assert_allclose(g[ok], w[ok], rtol=RTOL[dt], atol=0, err_msg=what)
    else:
        np.testing.assert_array_equal(g[ok], w[ok], err_msg=what)
        np.testing.assert_array_equal(np.signbit(g[ok]), np.signbit(w[ok]), err_msg=f"{what}: signs of zeros")


@pytest.mark.parametrize("dt", [dtypes.bool, *INTS, *FLOATS], ids=lambda d: d.name)
def test_alu_ops_match_exec_alu(dt: DType) -> None:
    pairs = list(itertools.product(sample(dt), repeat=2))
    n = len(pairs)
    bin_ops, un_ops = binary_ops(dt), unary_ops(dt)
    outs = [(op, dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt) for op in [*bin_ops, *un_ops]]
    out_params = [param(k, odt, n) for k, (_, odt) in enumerate(outs)]
    a, b = param(len(outs), dt, n), param(len(outs) + 1, dt, n)
    i = loop(n, 0)
    x = load(a, i)
    stores = []
    for buf, (op, _) in zip(out_params, outs, strict=True):
        if op in bin_ops:
            y = load(b, i)
            stores.append(store(buf, i, x.alu(op, y)))
        else:
            stores.append(store(buf, i, x.alu(op)))
    program = lower_uop(sink(*stores), CPU, [])
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    inputs = [to_array(xs, dt), to_array(ys, dt)]
    results = [np.zeros(n, np_dtype(odt)) for _, odt in outs]
    run_program(program, [*results, *inputs])
    for got, (op, odt) in zip(results, outs, strict=True):
        operands: list[tuple[ConstType, ...]] = list(pairs) if op in bin_ops else [(xv,) for xv, _ in pairs]
        expected = [exec_alu(op, odt if odt is not dtypes.bool else dt, ops) for ops in operands]
        assert_same(got, expected, odt, f"{op.name} on {dt.name}", approx=op in TRANSCENDENTAL)


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.uint8, *FLOATS], ids=lambda d: d.name)
def test_where_and_mulacc(dt: DType) -> None:
    triples = list(itertools.product(sample(dt)[:7], repeat=3))
    n = len(triples)
    out_w, out_m = param(0, dt, n), param(1, dt, n)
    a, b, c = param(2, dt, n), param(3, dt, n), param(4, dt, n)
    i = loop(n, 0)
    x, y, z = load(a, i), load(b, i), load(c, i)
    program = lower_uop(sink(store(out_w, i, (x < y).where(y, z)), store(out_m, i, x.alu(Ops.MULACC, y, z))), CPU, [])
    got_w, got_m = np.zeros(n, np_dtype(dt)), np.zeros(n, np_dtype(dt))
    run_program(program, [got_w, got_m, *(to_array([t[k] for t in triples], dt) for k in range(3))])
    assert_same(got_w, [t[1] if t[0] < t[1] else t[2] for t in triples], dt, "WHERE", approx=False)
    assert_same(got_m, [exec_alu(Ops.MULACC, dt, t) for t in triples], dt, "MULACC",
                approx=dt is dtypes.bfloat16)


@pytest.mark.parametrize("src", [dtypes.bool, *INTS, *FLOATS], ids=lambda d: d.name)
def test_casts_match_cast_value(src: DType) -> None:
    if src.kind is DTypeKind.FLOAT:  # in range, out of every integer's range (wraps), NaN and inf (give 0)
        raw = (0.0, -0.0, 1.5, -1.9, 2.7, 100.3, -100.5, 127.9, 300.7, -40000.5, 3e9, -3e9, 1e19, -1e19, 2.0**63,
               -(2.0**63), 2.0**64, 1e30, -1e30, 65504.0, math.inf, -math.inf, math.nan)
        values: list[ConstType] = [truncate(src, v) for v in raw]
    else:
        values = sample(src)
    n = len(values)
    targets = [dtypes.bool, *INTS, *FLOATS]
    a = param(len(targets), src, n)
    i = loop(n, 0)
    stores = [store(param(k, dt, n), i, load(a, i).cast(dt)) for k, dt in enumerate(targets)]
    program = lower_uop(sink(*stores), CPU, [])
    results = [np.zeros(n, np_dtype(dt)) for dt in targets]
    run_program(program, [*results, to_array(values, src)])
    for got, dt in zip(results, targets, strict=True):
        double_rounding = dt is dtypes.bfloat16 and src.itemsize > 4  # via float: within one bf16 ulp
        assert_same(got, [cast_value(v, dt) for v in values], dt, f"CAST {src.name} -> {dt.name}",
                    approx=double_rounding)


@pytest.mark.parametrize("src", [*INTS, *FLOATS], ids=lambda d: d.name)
def test_bitcasts_match_bitcast_value(src: DType) -> None:
    values = [v for v in sample(src) if not (isinstance(v, float) and math.isnan(v))]
    n = len(values)
    targets = [dt for dt in [*INTS, *FLOATS] if dt.itemsize == src.itemsize and dt is not src]
    a = param(len(targets), src, n)
    i = loop(n, 0)
    stores = [store(param(k, dt, n), i, load(a, i).bitcast(dt)) for k, dt in enumerate(targets)]
    program = lower_uop(sink(*stores), CPU, [])
    results = [np.zeros(n, np_dtype(dt)) for dt in targets]
    run_program(program, [*results, to_array(values, src)])
    for got, dt in zip(results, targets, strict=True):
        expected = [bitcast_value(v, src, dt) for v in values]
        # NaN results compare as NaN: values pass through float locals, which quiet signaling NaNs
        assert_same(got, expected, dt, f"BITCAST {src.name} -> {dt.name}", approx=False)


def test_threefry_matches_reference() -> None:
    rng = np.random.default_rng(1)
    counters = rng.integers(0, 2**63, 16, dtype=np.uint64) * np.uint64(2)
    keys = rng.integers(0, 2**63, 16, dtype=np.uint64)
    out, c, k = param(0, dtypes.uint64, 16), param(1, dtypes.uint64, 16), param(2, dtypes.uint64, 16)
    i = loop(16, 0)
    program = lower_uop(sink(store(out, i, load(c, i).alu(Ops.THREEFRY, load(k, i)))), CPU, [])
    got = np.zeros(16, np.uint64)
    run_program(program, [got, counters, keys])
    expected = [exec_alu(Ops.THREEFRY, dtypes.uint64, (int(x), int(y))) for x, y in zip(counters, keys, strict=True)]
    np.testing.assert_array_equal(got, np.array(expected, dtype=np.uint64))


