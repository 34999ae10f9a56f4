"""One small, valid example graph per IR stage, for tests that need a real graph of a stage.

Each builder returns a fresh root built only with public constructors, and together they use every op a stage
allows, so a test can break one rule of one op by substituting a single node (see test_verify.py). They are
small on purpose: the same computation flows through the stages (a matrix-vector product plus a variable).

Import from a test with `from ir_examples import EXAMPLES` (conftest.py puts this folder on sys.path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from plygrad.ir.dtype import AddrSpace, DType, dtypes
from plygrad.ir.ops import AxisType, Ops, OptOps
from plygrad.ir.records import BufferRef, KernelInfo, Opt, ParamInfo, ProgramInfo
from plygrad.ir.stage import Stage
from plygrad.ir.target import TensorCore
from plygrad.ir.uop import UOp

F32 = dtypes.float32


def _buffer(buffer_id: int, size: int, dtype: DType = F32, device: str = "CPU") -> UOp:
    return UOp(Ops.BUFFER, dtype, (), BufferRef(buffer_id, device, size))


def _mov(x: UOp, op: Ops, arg: object) -> UOp:
    return UOp(op, x.dtype, (x,), arg)


def tensor_example() -> UOp:
    """A tensor SINK using every tensor-stage op: three realized tensors, one of them an in-place ASSIGN."""
    a = _mov(_buffer(0, 6), Ops.RESHAPE, (2, 3))
    b = _mov(_mov(_buffer(1, 3), Ops.RESHAPE, (1, 3)), Ops.EXPAND, (2, 3))
    two = _mov(_mov(UOp.const(F32, 2.0), Ops.RESHAPE, (1, 1)), Ops.EXPAND, (2, 3))
    s = (a + b) * two
    w = (a < b).where(s.maximum(a), s)  # CMPLT, WHERE, MAX
    p = _mov(w, Ops.PERMUTE, (1, 0))  # (3, 2)
    padded = _mov(p, Ops.PAD, ((0, 1), (0, 0)))  # (4, 2)
    shrunk = _mov(padded, Ops.SHRINK, ((1, 4), (0, 2)))  # (3, 2)
    flipped = _mov(shrunk, Ops.FLIP, (True, False))
    summed = UOp(Ops.REDUCE, F32, (flipped,), (Ops.ADD, (1,)))  # (3, 1)
    n = UOp.variable("n", 1, 8, dtypes.int32).bind(3)
    n_f = _mov(_mov(n.cast(F32), Ops.RESHAPE, (1, 1)), Ops.EXPAND, (3, 1))
    moved = UOp(Ops.COPY, F32, (UOp(Ops.CONTIGUOUS, F32, (summed + n_f,)),), "CPU:1")
    target = _mov(_buffer(2, 3), Ops.RESHAPE, (3, 1))
    assign = UOp(Ops.ASSIGN, F32, (target, summed))
    one = _mov(_mov(UOp.const(dtypes.int32, 1), Ops.RESHAPE, (1, 1)), Ops.EXPAND, (3, 1))
    bits = summed.bitcast(dtypes.int32).alu(Ops.SHR, one)
    return UOp(Ops.SINK, dtypes.void, (moved, assign, bits))


def kernel_example() -> UOp:
    """out[i] = sum_j a[i*4 + j] * b[j] + n, i < 3, j < 4: PARAMs, ranges, gated and plain loads, a reduce."""
    out = UOp(Ops.PARAM, F32.ptr(3), (), 0)
    a = UOp(Ops.PARAM, F32.ptr(12), (), 1)
    b = UOp(Ops.PARAM, F32.ptr(4), (), 2)
    i = UOp.range(3, 0, AxisType.GLOBAL)
    j = UOp.range(4, 1, AxisType.REDUCE)
    load_a = UOp(Ops.LOAD, F32, (UOp(Ops.INDEX, a.dtype, (a, i * 4 + j)),))
    load_b = UOp(Ops.LOAD, F32, (UOp(Ops.INDEX, b.dtype, (b, j, j < 4)),))
    acc = UOp(Ops.REDUCE, F32, (load_a * load_b, j), Ops.ADD)
    n = UOp.variable("n", 1, 8)
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, i)), acc + n.cast(F32)))
    end = UOp(Ops.END, dtypes.void, (store, i))
    return UOp(Ops.SINK, dtypes.void, (end,), KernelInfo("matvec", (Opt(OptOps.UPCAST, 0, 1),)))


def schedule_example() -> UOp:
    """A LINEAR running the kernel into a new buffer (-1), then copying it to another device (-2)."""
    body = kernel_example()
    var = next(n for n in body.toposort if n.op is Ops.DEFINE_VAR)
    out = _buffer(-1, 3)
    kernel = UOp(Ops.CALL, dtypes.void, (body, out, _buffer(0, 12), _buffer(1, 4), var.bind(3)), "matvec")
    copy = UOp(Ops.CALL, dtypes.void, (UOp(Ops.COPY, dtypes.void), _buffer(-2, 3, device="CPU:1"), out))
    return UOp(Ops.LINEAR, dtypes.void, (kernel, copy), (-2, 0))


def program_example() -> UOp:
    """The rendered matvec kernel: C source, launch sizes, parameters and the variable it takes."""
    params = (ParamInfo(0, F32, 3, True), ParamInfo(1, F32, 12, False), ParamInfo(2, F32, 4, False))
    info = ProgramInfo("matvec", (3, 1, 1), None, params, ops=27, mem=76, opts=(Opt(OptOps.UPCAST, 0, 1),))
    source = UOp(Ops.SOURCE, dtypes.void, (), "void matvec(float* out, float* a, float* b, long n) { /* ... */ }")
    return UOp(Ops.PROGRAM, dtypes.void, (source, UOp.variable("n", 1, 8)), info)


def graph_example() -> UOp:
    """A codegen-internal graph no boundary carries: vectors, locals, registers, thread indices, tensor cores.

    It only has to satisfy the GRAPH rules, and exists so the structural rules of codegen-only ops are tested.
    """
    gidx = UOp(Ops.SPECIAL, dtypes.index, (UOp.const(dtypes.index, 16),), "gidx0")
    local = UOp(Ops.DEFINE_LOCAL, F32.ptr(64, AddrSpace.LOCAL), (), 0)
    reg = UOp(Ops.DEFINE_REG, F32.ptr(4, AddrSpace.REG), (), 1)
    x = UOp(Ops.LOAD, F32, (UOp(Ops.INDEX, local.dtype, (local, gidx)),))
    vec = UOp(Ops.VECTORIZE, F32.vec(2), (x, x + 1.0))
    lanes = UOp(Ops.GEP, F32, (vec,), (1,))
    unrolled = UOp(Ops.UNROLL, F32.vec(2), (lanes,), ((0, 2),))
    contracted = UOp(Ops.CONTRACT, F32.vec(2), (unrolled,), ((0, 2),))
    tc = TensorCore((8, 8, 8), dtypes.float16, F32, 32)
    mma = UOp(Ops.WMMA, F32.vec(2), (contracted, contracted, vec), tc)
    barrier = UOp(Ops.BARRIER, dtypes.void, (UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, reg.dtype, (reg, gidx)),
                                                                             lanes)),))
    cond = UOp(Ops.IF, dtypes.void, (gidx < 8, barrier))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, local.dtype, (local, gidx)),
                                         UOp(Ops.GEP, F32, (mma,), (0,)).alu(Ops.MULACC, lanes, x)))
    noop = UOp(Ops.NOOP, F32, (x.alu(Ops.SQRT).alu(Ops.EXP2).alu(Ops.LOG2).alu(Ops.SIN).alu(Ops.RECIPROCAL),))
    return UOp(Ops.SINK, dtypes.void, (store, UOp(Ops.ENDIF, dtypes.void, (cond,)), noop))


EXAMPLES: Final[dict[Stage, Callable[[], UOp]]] = {
    Stage.GRAPH: graph_example,
    Stage.TENSOR: tensor_example,
    Stage.SCHEDULE: schedule_example,
    Stage.KERNEL: kernel_example,
    Stage.PROGRAM: program_example,
}
