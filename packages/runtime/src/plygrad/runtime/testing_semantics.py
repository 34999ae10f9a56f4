"""The conformance suite's IR-semantics checks: what a backend's compiler flags or math library can break.

A backend that compiles with `-ffast-math` (or a GPU compiler's equivalent) still adds, reduces and copies right,
so the basic kernel checks pass, yet `MAX(nan, 0)` gives 0 and `x != x` is false for NaN. These checks run
elementwise kernels whose inputs come from memory (so no compiler can fold them) over the edge cases docs/ir.md §5
defines: NaN and inf, no fused multiply-add where the IR has a MUL then an ADD, float16/bfloat16 rounding, integer
division (by zero, MIN / -1), wraparound, shifts by any amount, float->int casts of NaN/inf/out-of-range values,
sizes that are not a multiple of a vector width, size 1 and size 0.

The expected values come from `plygrad.ir.evaluate` (the IR's reference arithmetic) on the same expression with
the inputs as constants, and are compared bit for bit (any NaN matches any NaN).
"""

from __future__ import annotations

import math
import unittest
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from plygrad.ir.dtype import ConstType, DType, dtypes
from plygrad.ir.evaluate import evaluate
from plygrad.ir.ops import AxisType, Ops
from plygrad.ir.records import KernelInfo
from plygrad.ir.scalar import from_bytes, to_bytes, truncate
from plygrad.ir.uop import UOp
from plygrad.runtime.buffer import Buffer
from plygrad.runtime.device import Device
from plygrad.runtime.engine import run_linear
from plygrad.runtime.plugin import Backend

Expr = Callable[[Sequence[UOp]], UOp]
NAN, INF = math.nan, math.inf
F16, BF16, F32, F64 = dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64
I8, U8, I32, U32, I64 = dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint32, dtypes.int64


@dataclass(frozen=True)
class Column:
    """One input buffer of a semantics kernel: its dtype and values (one per element)."""

    dtype: DType
    values: tuple[ConstType, ...]


def _alu(op: Ops, *src: UOp) -> UOp:
    """An ALU node built as is (comparisons give bool): the check is about the op, not what folding makes of it."""
    dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else src[-1].dtype
    return UOp(op, dtype, tuple(src))


def binary(op: Ops) -> Expr:
    return lambda x: _alu(op, x[0], x[1])


def cast(to: DType, index: int = 0) -> Expr:
    return lambda x: UOp(Ops.CAST, to, (x[index],))


def _same(got: ConstType, want: ConstType, dtype: DType) -> bool:
    if dtype.is_float and isinstance(got, float) and isinstance(want, float) and math.isnan(want):
        return math.isnan(got)
    return to_bytes(got, dtype) == to_bytes(want, dtype)


def semantics_kernel(inputs: Sequence[Column], outputs: Sequence[tuple[str, Expr]], n: int) -> UOp:
    """out_k[i] = outputs[k](loads of every input at i), params (out_0, ..., out_{K-1}, in_0, ...)."""
    i = UOp.range(n, 0, AxisType.LOOP)
    loads = []
    for position, column in enumerate(inputs):
        param = UOp(Ops.PARAM, column.dtype.ptr(n), (), len(outputs) + position)
        loads.append(UOp(Ops.LOAD, column.dtype, (UOp(Ops.INDEX, param.dtype, (param, i)),)))
    stores = []
    for k, (_, expr) in enumerate(outputs):
        value = expr(loads)
        param = UOp(Ops.PARAM, value.dtype.ptr(n), (), k)
        stores.append(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, param.dtype, (param, i)), value)))
    body: tuple[UOp, ...] = (UOp(Ops.END, dtypes.void, (stores[0], i)),) if len(stores) == 1 else tuple(stores)
    return UOp(Ops.SINK, dtypes.void, body, KernelInfo("conformance_semantics"))


def expected(inputs: Sequence[Column], expr: Expr, i: int) -> tuple[DType, ConstType]:
    """The IR's answer for element `i`: the expression over constants, evaluated by the reference interpreter."""
    value = expr([UOp(Ops.CONST, c.dtype, (), truncate(c.dtype, c.values[i])) for c in inputs])
    return value.dtype, evaluate(value)


def run_semantics(device: str, what: str, inputs: Sequence[Column], outputs: Sequence[tuple[str, Expr]]) -> None:
    """Run one semantics kernel on `device` and raise AssertionError naming every element that differs."""
    n = len(inputs[0].values)
    assert all(len(c.values) == n for c in inputs), "every input column needs the same number of values"
    in_bufs = [Buffer(device, n, c.dtype).copyin(b"".join(to_bytes(v, c.dtype) for v in c.values)) for c in inputs]
    want = [[expected(inputs, expr, i) for i in range(n)] for _, expr in outputs]
    zeros = [UOp(Ops.CONST, c.dtype, (), truncate(c.dtype, 0)) for c in inputs]
    out_bufs = [Buffer(device, n, expr(zeros).dtype) for _, expr in outputs]
    bufs = [*out_bufs, *in_bufs]
    call = UOp(Ops.CALL, dtypes.void, (semantics_kernel(inputs, outputs, n),
                                       *(UOp(Ops.BUFFER, b.dtype, (), b.ref()) for b in bufs)), None)
    run_linear(UOp(Ops.LINEAR, dtypes.void, (call,), tuple(b.id for b in out_bufs)), {b.id: b for b in bufs})
    Device[device].synchronize()
    wrong = []
    for (label, _), buf, column in zip(outputs, out_bufs, want, strict=True):
        data, size = buf.copyout(), buf.dtype.itemsize
        for i, (dtype, value) in enumerate(column):
            got = from_bytes(data[i * size:(i + 1) * size], dtype)
            if not _same(got, value, dtype):
                args = ", ".join(repr(c.values[i]) for c in inputs)
                wrong.append(f"{label}({args}) = {got!r}, the IR says {value!r}")
    if wrong:
        raise AssertionError(f"{device} breaks IR semantics ({what}; docs/ir.md §5, and compiler flags such as "
                             "-ffast-math may not change them):\n  " + "\n  ".join(wrong))


# float32 edge cases in pairs: NaN on either side, infinities, signed zeros, and ordinary values
_FX = (NAN, 0.0, -INF, 1.0, -0.0, INF, NAN, 2.5, INF, 0.0, -3.0)
_FY = (0.0, NAN, 1.0, INF, 0.0, -INF, NAN, -1.5, INF, 0.0, 0.0)
# a*b+c where one rounding (a fused multiply-add) differs from two: (1+e)^2 - (1+2e) is e^2 exactly, 0 when rounded
_E32, _E64 = 2.0**-12, 2.0**-27
_FMA32 = ((1 + _E32, 1 + _E32, -(1 + 2 * _E32)), (1 - _E32, 1 + _E32, -1.0), (0.1, 10.0, -1.0), (3.0, 1 / 3, -1.0))
_FMA64 = ((1 + _E64, 1 + _E64, -(1 + 2 * _E64)), (1 - _E64, 1 + _E64, -1.0), (0.1, 10.0, -1.0), (3.0, 1 / 3, -1.0))
# values that round differently at half precision: ties to even, overflow to inf, subnormals, NaN
_HALF = (1.0, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 65504.0, 65520.0, 2.0**-24, 2.0**-25, -0.0, NAN, 1 + 2.0**-8,
         1 + 3 * 2.0**-8, 3.0e38, 0.1)
_INT_X = (7, -7, 7, -7, 5, -(2**31), -(2**31), 0, 2**31 - 1, -1, 123456)
_INT_Y = (2, 2, -2, -2, 0, -1, 1, 0, -1, 0, 1000)
_SHIFT_X = (1, -1, 0x12345678, -(2**31), 5, -5, 1, -8, 2**31 - 1)
_SHIFT_Y = (0, 1, 4, 31, 32, 33, -1, 100, 30)
_TO_INT = (NAN, INF, -INF, 3.0e9, -3.0e9, 2.7, -2.7, 1.0e20, -0.5, 255.9, 256.0, -129.0, 2.0**31, 2.0**63)


def _repeat(values: tuple[ConstType, ...], n: int) -> tuple[ConstType, ...]:
    return tuple(values[i % len(values)] for i in range(n))


class IRSemanticsChecks:
    """The semantics half of `BackendConformance` (mixed into it): each check is one kernel of several outputs."""

    device: str
    semantics_checks: bool = True  # a test lowering that only knows the basic kernels turns these off

    def backend(self) -> Backend:
        raise NotImplementedError

    def require_codegen(self) -> None:
        raise NotImplementedError

    def _semantics(self, what: str, inputs: Sequence[Column], outputs: Sequence[tuple[str, Expr]]) -> None:
        if not self.semantics_checks:
            raise unittest.SkipTest("IR-semantics checks are turned off for this class (semantics_checks = False)")
        self.backend()
        self.require_codegen()
        run_semantics(self.device, what, inputs, outputs)

    def test_nan_and_inf_propagate(self) -> None:
        x, y = Column(F32, _FX), Column(F32, _FY)
        self._semantics("NaN and inf", [x, y], [
            ("MAX", binary(Ops.MAX)), ("ADD", binary(Ops.ADD)), ("SUB", binary(Ops.SUB)), ("MUL", binary(Ops.MUL)),
            ("FDIV", binary(Ops.FDIV)), ("CMPLT", binary(Ops.CMPLT)), ("CMPEQ", binary(Ops.CMPEQ)),
            ("isnan as x CMPNE x", lambda v: _alu(Ops.CMPNE, v[0], v[0])),
            ("WHERE(x CMPNE x, y, x)", lambda v: _alu(Ops.WHERE, _alu(Ops.CMPNE, v[0], v[0]), v[1], v[0])),
            ("SQRT", lambda v: _alu(Ops.SQRT, v[0])), ("RECIPROCAL", lambda v: _alu(Ops.RECIPROCAL, v[1])),
        ])

    def _supports(self, dtype: DType) -> bool:
        """Whether the backend's Target has `dtype` (Metal has no float64: checks of it do not apply there)."""
        return dtype in self.backend().target.supported_dtypes

    def test_nan_and_inf_in_float64(self) -> None:
        if not self._supports(F64):
            raise unittest.SkipTest(f"{self.device}'s Target has no float64 (Target.supported_dtypes)")
        x, y = Column(F64, _FX), Column(F64, _FY)
        self._semantics("NaN and inf, float64", [x, y], [
            ("MAX", binary(Ops.MAX)), ("isnan as x CMPNE x", lambda v: _alu(Ops.CMPNE, v[0], v[0])),
            ("MUL", binary(Ops.MUL)),
        ])

    def test_no_fused_multiply_add(self) -> None:
        def mul_add(v: Sequence[UOp]) -> UOp:
            return _alu(Ops.ADD, _alu(Ops.MUL, v[0], v[1]), v[2])

        for dtype, rows in ((F32, _FMA32), (F64, _FMA64)):
            if not self._supports(dtype):
                continue
            columns = [Column(dtype, tuple(r[k] for r in rows)) for k in range(3)]
            self._semantics(f"a*b+c rounds twice in {dtype.name}", columns, [("MUL then ADD", mul_add)])

    def test_half_precision_rounding(self) -> None:
        wide = Column(F32, _HALF)
        self._semantics("float32 -> float16/bfloat16 casts", [wide], [
            ("CAST float16", cast(F16)), ("CAST bfloat16", cast(BF16)),
        ])
        for dtype in (F16, BF16):
            a = Column(dtype, tuple(float(to_bytes_round(v, dtype)) for v in _HALF))
            b = Column(dtype, tuple(float(to_bytes_round(v, dtype)) for v in reversed(_HALF)))
            self._semantics(f"{dtype.name} arithmetic", [a, b], [
                ("ADD", binary(Ops.ADD)), ("MUL", binary(Ops.MUL)), ("FDIV", binary(Ops.FDIV)),
                ("MAX", binary(Ops.MAX)), ("CAST float32", cast(F32)),
            ])

    def test_integer_division(self) -> None:
        for dtype in (I32, I64):
            low = dtype.min
            xs = tuple(low if v == -(2**31) else v for v in _INT_X)
            x, y = Column(dtype, xs), Column(dtype, _INT_Y)
            self._semantics(f"{dtype.name} IDIV/MOD", [x, y], [("IDIV", binary(Ops.IDIV)), ("MOD", binary(Ops.MOD))])
        x, y = Column(U32, (7, 2**32 - 1, 5, 0, 100)), Column(U32, (2, 2, 0, 0, 7))
        self._semantics("uint32 IDIV/MOD", [x, y], [("IDIV", binary(Ops.IDIV)), ("MOD", binary(Ops.MOD))])

    def test_integer_overflow_wraps(self) -> None:
        for dtype in (I8, U8, I32, I64):
            span = dtype.max
            xs = (dtype.max, dtype.min, dtype.max, dtype.min, 3, span // 2 + 1)
            ys = (1, 1, dtype.max, -1 if dtype is not U8 else 255, 5, 2)
            x, y = Column(dtype, xs), Column(dtype, ys)
            outputs = [("ADD", binary(Ops.ADD)), ("SUB", binary(Ops.SUB)), ("MUL", binary(Ops.MUL))]
            if dtype is not U8:
                outputs.append(("NEG", lambda v: _alu(Ops.NEG, v[0])))
            self._semantics(f"{dtype.name} wraparound", [x, y], outputs)

    def test_shifts_by_any_amount(self) -> None:
        for dtype in (I32, U32, I64):
            xs = tuple(v % 2**32 if dtype is U32 else v for v in _SHIFT_X)
            ys = tuple(v % 2**32 if dtype is U32 else v for v in _SHIFT_Y)
            x, y = Column(dtype, xs), Column(dtype, ys)
            self._semantics(f"{dtype.name} shifts", [x, y], [("SHL", binary(Ops.SHL)), ("SHR", binary(Ops.SHR))])

    def test_float_to_int_casts(self) -> None:
        for src in (F32, F64) if self._supports(F64) else (F32,):
            x = Column(src, _TO_INT)
            self._semantics(f"{src.name} -> integer casts", [x], [
                (f"CAST {to.name}", cast(to)) for to in (I32, I64, U8, U32, dtypes.bool)
            ])
        big = Column(I64, (2**53 + 1, -(2**63), 2**24 + 1, 16777217, -3))
        wide = [("CAST float64", cast(F64))] if self._supports(F64) else []
        self._semantics("int64 -> float casts", [big], [("CAST float32", cast(F32)), *wide])

    def test_sizes_around_vector_widths(self) -> None:
        for n in (1, 3, 5, 7, 17, 33, 1031):
            xs = Column(F32, tuple(i * 0.25 - 3.0 for i in range(n)))
            ys = Column(F32, tuple(float((i * 7) % 13) for i in range(n)))
            self._semantics(f"{n} elements", [xs, ys], [("x * y + x", lambda v: _alu(Ops.ADD, _alu(
                Ops.MUL, v[0], v[1]), v[0]))])

    def test_zero_size_buffers(self) -> None:
        self._semantics("0 elements", [Column(F32, ()), Column(F32, ())], [("ADD", binary(Ops.ADD))])


def to_bytes_round(value: float, dtype: DType) -> ConstType:
    """`value` as `dtype` stores it (rounded to nearest even), so an input column holds exactly what it says."""
    return from_bytes(to_bytes(value, dtype), dtype)
