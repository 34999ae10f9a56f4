"""Hypothesis strategies that build valid IR graphs of every stage, for any test that wants them.

Each strategy builds a graph the way its producer would (frontend, scheduler, runtime, codegen), following the
stage rules of docs/ir.md, so a test can assume `verify(graph, stage)` passes. `graphs()` draws a (graph, stage)
pair from all of them. `arg_values()` draws arbitrary argument values (nested tuples, awkward floats, records),
which only the structural encoders accept (no op takes every value), so use it with `verify=False`.

Import from a test file with `import ir_strategies` (conftest.py puts this folder on sys.path; the `ir_` prefix keeps
helper modules of different packages from clashing in one pytest process).
"""

from __future__ import annotations

import math
import struct
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from plygrad.ir.dtype import AddrSpace, DType, PtrDType, dtypes
from plygrad.ir.ops import AxisType, GroupOp, Ops, OptOps
from plygrad.ir.records import BufferRef, KernelInfo, Opt, ParamInfo, ProgramInfo
from plygrad.ir.scalar import truncate
from plygrad.ir.stage import Stage
from plygrad.ir.target import Target, TensorCore
from plygrad.ir.uop import UOp, arg_key

FLOAT_DTYPES = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
INT_DTYPES = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
              dtypes.uint64)
TENSOR_DTYPES = (dtypes.float32, dtypes.float16, dtypes.float64, dtypes.int32, dtypes.uint8, dtypes.int64)

# ---- scalar values ---------------------------------------------------------------------------------------------
_BITS = struct.Struct("<Q")
_DOUBLE = struct.Struct("<d")


def float_from_bits(bits: int) -> float:
    return float(_DOUBLE.unpack(_BITS.pack(bits))[0])


NAN_WITH_PAYLOAD = float_from_bits(0x7FF8000000000001)
NEGATIVE_NAN = float_from_bits(0xFFF8000000000000)
SIGNALING_NAN = float_from_bits(0x7FF0000000000001)

# every float64, with extra weight on the ones that break naive encoders: NaN payloads, -0.0, infinities
awkward_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(0, (1 << 64) - 1).map(float_from_bits),
    st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, NAN_WITH_PAYLOAD, NEGATIVE_NAN, SIGNALING_NAN,
                     5e-324, -1.7976931348623157e308]),
)
# every Python str, lone surrogates and astral characters included (the binary form uses UTF-8 surrogatepass)
any_text = st.text(st.characters(exclude_categories=()), max_size=12)
huge_ints = st.integers(-(1 << 4096) + 1, (1 << 4096) - 1) | st.sampled_from([(1 << 4096) - 1, -(1 << 4096) + 1,
                                                                             1 << 64, -(1 << 63) - 1])


@st.composite
def const_values(draw: st.DrawFn, dt: DType) -> Any:
    """A value as dtype `dt` stores it (what verify's CONST rule asks: truncate(dt, v) == v bit-exactly)."""
    if dt is dtypes.bool:
        return draw(st.booleans())
    if dt is dtypes.index:
        return draw(st.integers(-(1 << 70), 1 << 70) | huge_ints)
    if dt.is_int:
        return draw(st.integers(int(dt.min), int(dt.max)))
    value = truncate(dt, draw(awkward_floats))
    assume(arg_key(truncate(dt, value)) == arg_key(value))  # some NaN payloads change once more on re-rounding
    return value


def const(dt: DType, value: Any) -> UOp:
    return UOp(Ops.CONST, dt, (), value)


# ---- tensor stage ----------------------------------------------------------------------------------------------
_FLOAT_UNARY = (Ops.NEG, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.RECIPROCAL, Ops.TRUNC)
_FLOAT_BINARY = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.FDIV, Ops.POW)
_INT_BINARY = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR)


class _TensorBuilder:
    """Builds tensor-stage nodes while tracking each node's shape (what the frontend knows when it builds them)."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.next_id = 0
        self.pool: list[tuple[UOp, tuple[int, ...]]] = []

    def buffer(self, dt: DType, shape: tuple[int, ...]) -> UOp:
        size = math.prod(shape)
        node = UOp(Ops.BUFFER, dt, (), BufferRef(self.next_id, "CPU", size))
        self.next_id += 1
        return node if shape == (size,) else UOp(Ops.RESHAPE, dt, (node,), shape)

    def broadcast_const(self, dt: DType, shape: tuple[int, ...]) -> UOp:
        node = const(dt, self.draw(const_values(dt)))
        if not shape:
            return node
        node = UOp(Ops.RESHAPE, dt, (node,), (1,) * len(shape))
        return node if all(n == 1 for n in shape) else UOp(Ops.EXPAND, dt, (node,), shape)

    def partner(self, like: UOp, shape: tuple[int, ...]) -> UOp:
        """Another operand of `like`'s dtype and shape: an existing node, a fresh buffer or a broadcast constant."""
        same = [u for u, s in self.pool if s == shape and u.dtype is like.dtype]
        choice = self.draw(st.integers(0, 2))
        if choice == 0 and same:
            return self.draw(st.sampled_from(same))
        return self.buffer(like.dtype, shape) if choice == 1 else self.broadcast_const(like.dtype, shape)

    def step(self) -> None:
        draw = self.draw
        x, shape = draw(st.sampled_from(self.pool))
        dt = x.dtype
        action = draw(st.sampled_from(["unary", "binary", "where", "movement", "reduce", "cast", "contiguous",
                                       "copy", "assign", "bitcast", "allreduce"]))
        new: UOp
        new_shape = shape
        if action == "unary":
            new = UOp(draw(st.sampled_from(_FLOAT_UNARY if dt.is_float else (Ops.NEG,))), dt, (x,))
        elif action == "binary":
            ops = _FLOAT_BINARY if dt.is_float else _INT_BINARY + ((Ops.THREEFRY,) if dt is dtypes.uint64 else ())
            new = UOp(draw(st.sampled_from(ops)), dt, (x, self.partner(x, shape)))
        elif action == "where":
            y = self.partner(x, shape)
            cond = UOp(draw(st.sampled_from(sorted(GroupOp.Comparison))), dtypes.bool, (x, y))
            new = UOp(Ops.WHERE, dt, (cond, x, self.partner(x, shape)))
        elif action == "movement":
            new, new_shape = self.movement(x, shape)
        elif action == "reduce" and shape:
            axes = tuple(sorted(draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
            new = UOp(Ops.REDUCE, dt, (x,), (draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.MAX])), axes))
            new_shape = tuple(1 if i in axes else n for i, n in enumerate(shape))
        elif action == "cast":
            new = UOp(Ops.CAST, draw(st.sampled_from(TENSOR_DTYPES)), (x,))
        elif action == "bitcast":
            same_size = [d for d in TENSOR_DTYPES if d.itemsize == dt.itemsize]
            new = UOp(Ops.BITCAST, draw(st.sampled_from(same_size)), (x,))
        elif action == "copy":
            new = UOp(Ops.COPY, dt, (x,), draw(st.sampled_from(["CPU", "CPU:1", "NV"])))
        elif action == "assign":
            new = UOp(Ops.ASSIGN, dt, (self.buffer(dt, shape), x))
        elif action == "allreduce" and not dt.is_bool:
            others = [self.partner(x, shape) for _ in range(draw(st.integers(0, 3)))]
            op = draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.MAX]))
            new = UOp(Ops.ALLREDUCE, dt, (x, *others), (op, draw(st.sampled_from(["CPU", "CPU:1", "NV:0"]))))
        else:
            new = UOp(Ops.CONTIGUOUS, dt, (x,))
        self.pool.append((new, new_shape))

    def movement(self, x: UOp, shape: tuple[int, ...]) -> tuple[UOp, tuple[int, ...]]:
        draw, dt, ndim = self.draw, x.dtype, len(shape)
        kind = draw(st.sampled_from(["reshape", "permute", "expand", "pad", "shrink", "flip"]))
        if kind == "permute" and ndim:
            perm = tuple(draw(st.permutations(range(ndim))))
            return UOp(Ops.PERMUTE, dt, (x,), perm), tuple(shape[a] for a in perm)
        if kind == "expand" and 1 in shape:
            new = tuple(draw(st.integers(1, 3)) if n == 1 else n for n in shape)
            return UOp(Ops.EXPAND, dt, (x,), new), new
        if kind == "pad" and ndim:
            pairs = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
            return UOp(Ops.PAD, dt, (x,), pairs), tuple(n + b + a for n, (b, a) in zip(shape, pairs, strict=True))
        if kind == "shrink" and ndim:
            bounds: list[tuple[int, int]] = []
            for n in shape:
                start = draw(st.integers(0, n))
                bounds.append((start, draw(st.integers(start, n))))
            return UOp(Ops.SHRINK, dt, (x,), tuple(bounds)), tuple(e - s for s, e in bounds)
        if kind == "flip" and ndim:
            return UOp(Ops.FLIP, dt, (x,), tuple(draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim)))), shape
        new = (math.prod(shape),) if ndim != 1 else (1, shape[0])
        return UOp(Ops.RESHAPE, dt, (x,), new), new


@st.composite
def tensor_graphs(draw: st.DrawFn, max_steps: int = 10) -> UOp:
    """A tensor-stage SINK: buffers and constants through movement, ALU, reduce, cast, copy and assign ops."""
    builder = _TensorBuilder(draw)
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
    dt = draw(st.sampled_from(TENSOR_DTYPES))
    builder.pool.append((builder.buffer(dt, shape) if shape else builder.broadcast_const(dt, shape), shape))
    for _ in range(draw(st.integers(1, max_steps))):
        builder.step()
    outputs = draw(st.lists(st.sampled_from([u for u, _ in builder.pool]), min_size=1, max_size=3, unique=True))
    return UOp(Ops.SINK, dtypes.void, (builder.pool[-1][0], *outputs))


# ---- kernel stage ----------------------------------------------------------------------------------------------
def _index_const(n: int) -> UOp:
    return const(dtypes.index, n)


@st.composite
def kernel_graphs(draw: st.DrawFn) -> UOp:
    """A kernel-stage SINK: out[i] = f(in_1[...], ..., in_k[...]) over a RANGE, optionally reducing over a second
    RANGE and gating a load, as the scheduler lowers elementwise and reduce kernels. Every index is in bounds."""
    size = draw(st.integers(1, 64))
    red = draw(st.integers(0, 8))  # 0: no reduction
    out_dt = draw(st.sampled_from(TENSOR_DTYPES))
    in_dts = draw(st.lists(st.sampled_from(TENSOR_DTYPES), min_size=1, max_size=3))
    out_param = UOp(Ops.PARAM, out_dt.ptr(size), (), 0)
    loop = UOp(Ops.RANGE, dtypes.index, (_index_const(size),), (0, AxisType.LOOP))
    reduce_range = UOp(Ops.RANGE, dtypes.index, (_index_const(red),), (1, AxisType.REDUCE)) if red else None
    value: UOp | None = None
    for i, dt in enumerate(in_dts, 1):
        if reduce_range is not None:
            param = UOp(Ops.PARAM, dt.ptr(size * red), (), i)
            idx = loop * red + reduce_range
        else:
            param = UOp(Ops.PARAM, dt.ptr(size), (), i)
            idx = loop
        gate = UOp(Ops.CMPLT, dtypes.bool, (loop, _index_const(draw(st.integers(0, size))))) \
            if draw(st.booleans()) else None
        index = UOp(Ops.INDEX, param.dtype, (param, idx) if gate is None else (param, idx, gate))
        loaded = UOp(Ops.LOAD, dt, (index,)).cast(out_dt)
        if value is None:
            value = loaded
        else:
            ops = _FLOAT_BINARY[:4] if out_dt.is_float else _INT_BINARY[:4]
            value = UOp(draw(st.sampled_from(ops)), out_dt, (value, loaded))
    assert value is not None
    if out_dt.is_float and draw(st.booleans()):
        value = UOp(draw(st.sampled_from(_FLOAT_UNARY)), out_dt, (value,))
    if reduce_range is not None:
        value = UOp(Ops.REDUCE, out_dt, (value, reduce_range), draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.MAX])))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out_param.dtype, (out_param, loop)), value))
    info = draw(st.none() | st.builds(KernelInfo, st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True),
                                      st.lists(opts(), max_size=2).map(tuple)))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (store, loop)),), info)


def opts() -> st.SearchStrategy[Opt]:
    return st.builds(Opt, st.sampled_from(list(OptOps)), st.integers(0, 7), st.integers(0, 32))


# ---- schedule stage --------------------------------------------------------------------------------------------
@st.composite
def schedule_graphs(draw: st.DrawFn) -> UOp:
    """A LINEAR of kernel CALLs (each PARAM bound to a BUFFER of its dtype and size) and copy CALLs. Outputs of
    kernels are buffers the schedule declares (negative ids); inputs are buffers the runtime holds (ids >= 0)."""
    calls: list[UOp] = []
    declared: list[int] = []
    next_input, next_declared = 0, -1
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()) and calls:  # a copy of an earlier kernel's output into a new buffer
            src_buf = draw(st.sampled_from([b for c in calls for b in c.src[1:] if b.op is Ops.BUFFER]))
            dst_buf = UOp(Ops.BUFFER, src_buf.dtype, (), BufferRef(next_declared, "CPU:1", src_buf.arg.size))
            declared.append(next_declared)
            next_declared -= 1
            calls.append(UOp(Ops.CALL, dtypes.void, (UOp(Ops.COPY, dtypes.void, (), None), dst_buf, src_buf)))
            continue
        kernel = draw(kernel_graphs())
        params = sorted((u for u in kernel.toposort if u.op is Ops.PARAM), key=lambda u: u.arg)
        buffers = []
        for p in params:
            ptr = p.dtype
            assert isinstance(ptr, PtrDType)
            if p.arg == 0:
                ref = BufferRef(next_declared, "CPU", ptr.size)
                declared.append(next_declared)
                next_declared -= 1
            else:
                ref = BufferRef(next_input, "CPU", ptr.size)
                next_input += 1
            buffers.append(UOp(Ops.BUFFER, ptr.base, (), ref))
        name = draw(st.none() | st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True))
        calls.append(UOp(Ops.CALL, dtypes.void, (kernel, *buffers), name))
    outputs = tuple(draw(st.lists(st.sampled_from(declared), min_size=1, max_size=2)))
    return UOp(Ops.LINEAR, dtypes.void, tuple(calls), outputs)


# ---- program stage ---------------------------------------------------------------------------------------------
positive_triples = st.tuples(st.integers(1, 1 << 16), st.integers(1, 1024), st.integers(1, 64))


@st.composite
def program_info(draw: st.DrawFn) -> ProgramInfo:
    dts = draw(st.lists(st.sampled_from(dtypes.all()), max_size=4))
    params = tuple(ParamInfo(i, dt, draw(st.integers(0, 1 << 40)), draw(st.booleans())) for i, dt in enumerate(dts))
    return ProgramInfo(draw(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)), draw(positive_triples),
                       draw(st.none() | positive_triples), params, draw(st.integers(0, 1 << 50)),
                       draw(st.integers(0, 1 << 50)), tuple(draw(st.lists(opts(), max_size=2))))


@st.composite
def program_graphs(draw: st.DrawFn) -> UOp:
    """A PROGRAM: rendered source (any text), the variables it takes, and its launch information."""
    source = UOp(Ops.SOURCE, dtypes.void, (), draw(any_text.filter(bool)))
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), max_size=3, unique=True))
    variables = []
    for name in names:
        lo = draw(st.integers(-(1 << 31), (1 << 31) - 1))
        variables.append(UOp(Ops.DEFINE_VAR, dtypes.int32, (), (name, lo, draw(st.integers(lo, (1 << 31) - 1)))))
    return UOp(Ops.PROGRAM, dtypes.void, (source, *variables), draw(program_info()))


# ---- any stage: structurally valid nodes carrying awkward arguments ---------------------------------------------
@st.composite
def awkward_graphs(draw: st.DrawFn) -> UOp:
    """A GRAPH-stage SINK over nodes whose arguments stress the encoders: every dtype's constants (NaN payloads,
    -0.0, infinities, huge index ints), unicode names and sources, enum members, every record type, pointer and
    vector dtypes, nested int pairs."""
    nodes: list[UOp] = []
    for dt in draw(st.lists(st.sampled_from((*dtypes.all(), dtypes.index)), min_size=1, max_size=4)):
        nodes.append(const(dt, draw(const_values(dt))))
    lo = draw(huge_ints)
    nodes.append(UOp(Ops.DEFINE_VAR, dtypes.index, (), (draw(any_text.filter(bool)), lo, draw(huge_ints.filter(
        lambda hi: hi >= lo)))))
    nodes.append(UOp(Ops.BUFFER, draw(st.sampled_from(dtypes.all())), (),
                     BufferRef(draw(huge_ints), draw(any_text.filter(bool)), draw(st.integers(0, 1 << 62)))))
    nodes.append(UOp(Ops.SOURCE, dtypes.void, (), draw(any_text.filter(bool))))
    end = const(dtypes.index, draw(st.integers(1, 1 << 40)))
    rng = UOp(Ops.RANGE, dtypes.index, (end,), (draw(st.integers(-5, 5)), draw(st.sampled_from(list(AxisType)))))
    f32 = const(dtypes.float32, draw(const_values(dtypes.float32)))
    nodes.append(UOp(Ops.REDUCE, dtypes.float32, (f32, rng), draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.MAX]))))
    base = draw(st.sampled_from(dtypes.all()))
    space, op = draw(st.sampled_from([(AddrSpace.GLOBAL, Ops.PARAM), (AddrSpace.LOCAL, Ops.DEFINE_LOCAL),
                                      (AddrSpace.REG, Ops.DEFINE_REG)]))
    nodes.append(UOp(op, base.ptr(draw(st.integers(-1, 1 << 40)), space), (), draw(st.integers(0, 1000))))
    lanes = draw(st.integers(2, 8))
    vec = UOp(Ops.VECTORIZE, dtypes.float32.vec(lanes), (f32,) * lanes)
    picked = tuple(draw(st.lists(st.integers(0, lanes - 1), min_size=1, max_size=4)))
    nodes.append(UOp(Ops.GEP, dtypes.float32.vec(len(picked)) if len(picked) > 1 else dtypes.float32, (vec,), picked))
    pairs = tuple(draw(st.lists(st.tuples(huge_ints, huge_ints), max_size=3)))
    nodes.append(UOp(draw(st.sampled_from([Ops.UNROLL, Ops.CONTRACT])), dtypes.float32, (f32,), pairs))
    tc = TensorCore(draw(positive_triples), draw(st.sampled_from(FLOAT_DTYPES)), dtypes.float32,
                    draw(st.integers(1, 64)))
    nodes.append(UOp(Ops.WMMA, dtypes.float32, (f32, f32, f32), tc))
    nodes.append(draw(program_graphs()))
    draw(st.randoms()).shuffle(nodes)
    info = draw(st.none() | st.builds(KernelInfo, any_text, st.lists(opts(), max_size=3).map(tuple)))
    return UOp(Ops.SINK, dtypes.void, tuple(nodes), info)


def graphs() -> st.SearchStrategy[tuple[UOp, Stage]]:
    """A valid graph of any stage, with its stage."""
    return st.one_of(tensor_graphs().map(lambda u: (u, Stage.TENSOR)),
                     schedule_graphs().map(lambda u: (u, Stage.SCHEDULE)),
                     kernel_graphs().map(lambda u: (u, Stage.KERNEL)),
                     program_graphs().map(lambda u: (u, Stage.PROGRAM)),
                     awkward_graphs().map(lambda u: (u, Stage.GRAPH)))


# ---- targets and raw argument values ---------------------------------------------------------------------------
@st.composite
def targets(draw: st.DrawFn) -> Target:
    widths = st.lists(st.integers(2, 16), min_size=1, max_size=3).map(tuple)
    return Target(
        device=draw(any_text.filter(bool)), renderer=draw(st.sampled_from(["c", "cuda", "hip", "metal"])),
        arch=draw(any_text), has_local=draw(st.booleans()), has_shared=draw(st.booleans()),
        global_max=draw(positive_triples), local_max=draw(positive_triples),
        max_threads_per_group=draw(st.integers(1, 4096)), shared_max=draw(st.integers(0, 1 << 20)),
        vector_widths=tuple(draw(st.lists(st.tuples(st.sampled_from(dtypes.all()), widths), max_size=3))),
        supported_dtypes=tuple(draw(st.lists(st.sampled_from(dtypes.all()), unique=True))),
        tensor_cores=tuple(draw(st.lists(st.builds(TensorCore, positive_triples, st.sampled_from(FLOAT_DTYPES),
                                                   st.sampled_from(FLOAT_DTYPES), st.integers(1, 64)), max_size=2))),
        threads=draw(st.integers(1, 256)))


_any_dtype = st.sampled_from((*dtypes.all(), dtypes.index, dtypes.void)) | st.builds(
    lambda dt, n: dt.vec(n), st.sampled_from(dtypes.all()), st.integers(2, 16)) | st.builds(
    lambda dt, n, s: dt.ptr(n, s), st.sampled_from(dtypes.all()), st.integers(-1, 1 << 40), st.sampled_from(AddrSpace))
_records = opts() | st.builds(BufferRef, st.integers(), any_text, st.integers())
_scalars = st.none() | st.booleans() | huge_ints | st.integers(-300, 300) | awkward_floats | any_text | _any_dtype \
    | st.sampled_from([*Ops, *AxisType, *OptOps]) | _records


def arg_values(max_leaves: int = 20) -> st.SearchStrategy[Any]:
    """Any value the encoders accept: scalars, dtypes, enum members, records, and tuples nested a few deep."""
    return st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=max_leaves)
