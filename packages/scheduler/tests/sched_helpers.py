"""Test helpers: build tensor graphs, run a schedule on NumPy arrays, and evaluate a tensor graph with NumPy.

`run_schedule` is an executor written for the tests: it interprets each kernel AST vectorised over its RANGEs
(every RANGE gets its own NumPy axis; REDUCE reduces over its ranges' axes; a gated INDEX loads 0; a STORE
scatters), so a schedule's results can be compared against `reference`, a NumPy interpreter of the tensor stage
that knows nothing about kernels.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from plygrad.ir import AxisType, DType, GroupOp, Ops, Stage, UOp, dtypes, verify
from plygrad.ir.records import BufferRef

F32 = dtypes.float32
Array = np.ndarray[Any, Any]


def np_dtype(dt: DType) -> np.dtype[Any]:
    return np.dtype(np.int64) if dt is dtypes.index else np.dtype(dt.name)


# ---- building tensor graphs ----------------------------------------------------------------------------------
def buffer(buf_id: int, shape: tuple[int, ...], dtype: DType = F32, device: str = "CPU") -> UOp:
    """A BUFFER viewed at `shape` (a RESHAPE unless the shape is already flat)."""
    base = UOp(Ops.BUFFER, dtype, (), BufferRef(buf_id, device, math.prod(shape)))
    return base if shape == (math.prod(shape),) else mov(base, Ops.RESHAPE, shape)


def mov(x: UOp, op: Ops, arg: Any) -> UOp:
    return UOp(op, x.dtype, (x,), arg)


def const(value: Any, shape: tuple[int, ...], dtype: DType = F32) -> UOp:
    c = UOp.const(dtype, value)
    return c if not shape else mov(mov(c, Ops.RESHAPE, (1,) * len(shape)), Ops.EXPAND, shape)


def expand_to(x: UOp, shape: tuple[int, ...]) -> UOp:
    assert x.shape is not None
    return x if x.shape == shape else mov(x, Ops.EXPAND, shape)


def reduce(x: UOp, op: Ops, axes: tuple[int, ...]) -> UOp:
    return UOp(Ops.REDUCE, x.dtype, (x,), (op, axes))


def sink(*xs: UOp) -> UOp:
    return UOp(Ops.SINK, dtypes.void, xs)


# ---- NumPy semantics of the ALU ------------------------------------------------------------------------------
def _idiv(a: Array, b: Array) -> Array:
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)


def alu(op: Ops, dt: DType, xs: list[Array]) -> Array:
    ndt = np_dtype(dt)
    with np.errstate(all="ignore"):
        if op is Ops.WHERE:
            return np.where(xs[0], xs[1], xs[2]).astype(ndt)
        fns: dict[Ops, Any] = {
            Ops.NEG: np.negative, Ops.RECIPROCAL: np.reciprocal, Ops.SQRT: np.sqrt, Ops.EXP2: np.exp2,
            Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.TRUNC: np.trunc, Ops.ADD: np.add, Ops.SUB: np.subtract,
            Ops.MUL: np.multiply, Ops.FDIV: np.divide, Ops.IDIV: _idiv, Ops.MOD: lambda a, b: a - b * _idiv(a, b),
            Ops.MAX: np.maximum, Ops.POW: np.power, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal,
            Ops.CMPEQ: np.equal, Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor,
            Ops.SHL: np.left_shift, Ops.SHR: np.right_shift, Ops.MULACC: lambda a, b, c: a * b + c,
        }
        if dt is dtypes.bool and op in (Ops.ADD, Ops.MAX):
            return np.logical_or(*xs)
        if dt is dtypes.bool and op is Ops.MUL:
            return np.logical_and(*xs)
        out = np.asarray(fns[op](*xs))
        return out if op in GroupOp.Comparison else out.astype(ndt)


REDUCERS: dict[Ops, Any] = {Ops.ADD: np.sum, Ops.MUL: np.prod, Ops.MAX: np.max}


def _reduce_np(op: Ops, x: Array, axes: tuple[int, ...], dt: DType) -> Array:
    if dt is dtypes.bool:
        return (np.any if op in (Ops.ADD, Ops.MAX) else np.all)(x, axis=axes, keepdims=True)
    if op is Ops.MAX and any(x.shape[a] == 0 for a in axes):
        shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
        return np.full(shape, -np.inf if dt.kind.name == "FLOAT" else np.iinfo(np_dtype(dt)).min, np_dtype(dt))
    return np.asarray(REDUCERS[op](x, axis=axes, keepdims=True)).astype(np_dtype(dt))


# ---- the reference: the tensor graph evaluated by NumPy ------------------------------------------------------
def _view(x: Array, op: Ops, arg: Any) -> Array:
    if op is Ops.RESHAPE:
        return x.reshape(arg)
    if op is Ops.PERMUTE:
        return x.transpose(arg)
    if op is Ops.EXPAND:
        return np.broadcast_to(x, arg)
    if op is Ops.PAD:
        return np.pad(x, arg)
    if op is Ops.SHRINK:
        return x[tuple(slice(s, e) for s, e in arg)]
    return x[tuple(slice(None, None, -1) if f else slice(None) for f in arg)]


def reference(graph: UOp, buffers: dict[int, Array]) -> tuple[list[Array], dict[int, Array]]:
    """Evaluate a tensor SINK with NumPy: its tensors, and the buffers after its ASSIGNs."""
    verify(graph, Stage.TENSOR)
    bufs = {k: v.copy() for k, v in buffers.items()}
    vals: dict[UOp, Array] = {}
    assigns: list[tuple[UOp, Array]] = []
    for n in graph.toposort:
        op = n.op
        if op is Ops.SINK:
            continue
        if op is Ops.BUFFER:
            vals[n] = buffers[n.arg.id].copy()
        elif op is Ops.CONST:
            vals[n] = np.array(n.arg, np_dtype(n.dtype))
        elif op is Ops.BIND:
            vals[n] = np.array(n.src[1].arg, np_dtype(n.dtype))
        elif op is Ops.DEFINE_VAR:
            bound = [b.src[1].arg for b in graph.toposort if b.op is Ops.BIND and b.src[0] is n]
            vals[n] = np.array(bound[0], np_dtype(n.dtype))
        elif op in GroupOp.Movement:
            vals[n] = _view(vals[n.src[0]], op, n.arg)
        elif op in GroupOp.ALU:
            vals[n] = alu(op, n.src[0].dtype if op in GroupOp.Comparison else n.dtype, [vals[s] for s in n.src])
        elif op is Ops.CAST:
            vals[n] = vals[n.src[0]].astype(np_dtype(n.dtype))
        elif op is Ops.BITCAST:
            vals[n] = np.ascontiguousarray(vals[n.src[0]]).view(np_dtype(n.dtype))
        elif op is Ops.REDUCE:
            vals[n] = _reduce_np(n.arg[0], vals[n.src[0]], n.arg[1], n.dtype)
        elif op in (Ops.CONTIGUOUS, Ops.COPY):
            vals[n] = vals[n.src[0]]
        elif op is Ops.ASSIGN:
            vals[n] = vals[n.src[1]]
            assigns.append((n, vals[n.src[1]]))
    for node, value in assigns:  # write through the target's view: map the view over the buffer's addresses
        target = node.src[0]
        chain = []
        while target.op is not Ops.BUFFER:
            chain.append(target)
            target = target.src[0]
        addresses = np.arange(target.arg.size)
        for m in reversed(chain):
            addresses = _view(addresses, m.op, m.arg)
        bufs[target.arg.id][addresses.reshape(-1)] = np.broadcast_to(value, addresses.shape).reshape(-1)
    return [np.broadcast_to(vals[s], s.shape or ()) for s in graph.src], bufs


# ---- the executor: a schedule run on NumPy arrays ------------------------------------------------------------
def run_kernel(body: UOp, arrays: list[Array], variables: dict[str, int]) -> None:
    """Interpret a kernel AST, vectorised: RANGE axis k is NumPy axis position k (all ranges of the kernel)."""
    ranges = sorted({n.arg[0]: n for n in body.toposort if n.op is Ops.RANGE}.items())
    axis_of = {r: i for i, (_, r) in enumerate(ranges)}
    nd = len(ranges)
    sizes = [int(r.src[0].arg) for _, r in ranges]
    vals: dict[UOp, Array] = {}
    for n in body.toposort:
        op = n.op
        if op is Ops.CONST:
            vals[n] = np.array(n.arg, np_dtype(n.dtype)).reshape((1,) * nd)
        elif op is Ops.RANGE:
            shape = [1] * nd
            shape[axis_of[n]] = sizes[axis_of[n]]
            vals[n] = np.arange(sizes[axis_of[n]], dtype=np.int64).reshape(shape)
        elif op is Ops.DEFINE_VAR:
            vals[n] = np.array(variables[n.arg[0]], np_dtype(n.dtype)).reshape((1,) * nd)
        elif op in GroupOp.ALU:
            vals[n] = alu(op, n.src[0].dtype if op in GroupOp.Comparison else n.dtype, [vals[s] for s in n.src])
        elif op is Ops.CAST:
            vals[n] = vals[n.src[0]].astype(np_dtype(n.dtype))
        elif op is Ops.BITCAST:
            vals[n] = np.ascontiguousarray(vals[n.src[0]]).view(np_dtype(n.dtype))
        elif op is Ops.LOAD:
            index = n.src[0]
            buf, idx = arrays[index.src[0].arg], vals[index.src[1]]
            gate = vals[index.src[2]] if len(index.src) == 3 else np.ones_like(idx, dtype=bool)
            idx, gate = np.broadcast_arrays(idx, gate)
            assert np.all((idx[gate] >= 0) & (idx[gate] < buf.size)), "kernel reads out of bounds"
            vals[n] = np.where(gate, buf[np.where(gate, idx, 0)], np.zeros((), buf.dtype)) if buf.size else \
                np.zeros(idx.shape, buf.dtype)
        elif op is Ops.REDUCE:
            axes = tuple(axis_of[r] for r in n.src[1:])
            full = [1] * nd
            for a in axes:
                full[a] = sizes[a]
            value = np.broadcast_to(vals[n.src[0]], np.broadcast_shapes(vals[n.src[0]].shape, tuple(full)))
            vals[n] = _reduce_np(n.arg, value, axes, n.dtype)
        elif op is Ops.STORE:
            index = n.src[0]
            buf = arrays[index.src[0].arg]
            parts = [vals[index.src[1]], vals[n.src[1]]] + ([vals[index.src[2]]] if len(index.src) == 3 else [])
            parts = list(np.broadcast_arrays(*parts, np.zeros(sizes, bool)))[:len(parts)] if nd else parts
            idx, value = parts[0].reshape(-1), parts[1].reshape(-1)
            keep = parts[2].reshape(-1) if len(parts) == 3 else np.ones(idx.shape, bool)
            assert np.all((idx[keep] >= 0) & (idx[keep] < buf.size)), "kernel writes out of bounds"
            buf[idx[keep]] = value[keep]
        elif op in (Ops.PARAM, Ops.INDEX, Ops.END, Ops.SINK):
            continue
        else:
            raise AssertionError(f"executor: unexpected {op!r} in a kernel")


def run_schedule(linear: UOp, buffers: dict[int, Array]) -> tuple[list[Array], dict[int, Array]]:
    """Run a LINEAR on copies of `buffers`: the arrays of its outputs (flat) and every buffer afterwards."""
    verify(linear, Stage.SCHEDULE)
    mem = {k: v.copy() for k, v in buffers.items()}
    for call in linear.src:
        bufs = [s for s in call.src[1:] if s.op is Ops.BUFFER]
        for b in bufs:
            if b.arg.id not in mem:
                mem[b.arg.id] = np.full(b.arg.size, 77, np_dtype(b.dtype))  # garbage: kernels must write it all
        arrays = [mem[b.arg.id] for b in bufs]
        if call.src[0].op is Ops.COPY:
            arrays[0][:] = arrays[1]
            continue
        variables = {s.src[0].arg[0]: s.src[1].arg for s in call.src[1:] if s.op is Ops.BIND}
        run_kernel(call.src[0], arrays, variables)
    return [mem[i] for i in linear.arg], mem


def check(graph: UOp, seed: int = 0) -> tuple[UOp, UOp]:
    """Schedule `graph` with both schedulers, check each against NumPy; return (default, unfused) schedules."""
    from plygrad.scheduler import schedule_unfused_uop, schedule_uop

    buffers = random_buffers(graph, seed)
    fused, unfused = schedule_uop(graph), schedule_unfused_uop(graph)
    check_conventions(fused)
    check_conventions(unfused)
    assert_matches(graph, fused, buffers)
    assert_matches(graph, unfused, buffers)
    return fused, unfused


def check_conventions(linear: UOp) -> None:
    """The kernel conventions on top of the verifier (the contract between scheduler, runtime and codegen)."""
    for call in linear.src:
        body = call.src[0]
        if body.op is Ops.COPY:
            continue
        nodes = body.toposort
        stores = [n for n in nodes if n.op is Ops.STORE]
        stored = {s.src[0].src[0].arg for s in stores}
        assert stored == set(range(len(stored))), f"outputs are PARAMs 0..n_out-1, got {sorted(stored)}"
        ranges = [n for n in nodes if n.op is Ops.RANGE]
        assert len({r.arg[0] for r in ranges}) == len(ranges), "every RANGE has a distinct axis id"
        reduce_ranges = {r for n in nodes if n.op is Ops.REDUCE for r in n.src[1:]}
        for r in ranges:
            assert r.arg[1] is (AxisType.REDUCE if r in reduce_ranges else AxisType.LOOP), f"{r.arg} has the wrong type"


def kernel_count(linear: UOp) -> int:
    return sum(1 for c in linear.src if c.src[0].op is Ops.SINK)


def _strip_reshapes(x: UOp) -> UOp:
    while x.op is Ops.RESHAPE:
        x = x.src[0]
    return x


def assert_matches(graph: UOp, linear: UOp, buffers: dict[int, Array]) -> None:
    """The schedule's outputs and buffers equal NumPy's evaluation of the tensor graph."""
    expected, expected_bufs = reference(graph, buffers)
    got, got_bufs = run_schedule(linear, buffers)
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        if _strip_reshapes(graph.src[i]).op is Ops.ASSIGN:
            continue  # an ASSIGN's result is its whole target buffer, compared below
        flat = np.ascontiguousarray(e).reshape(-1)
        assert g.shape == flat.shape, f"output {i}: {g.shape} != {flat.shape}"
        np.testing.assert_allclose(g, flat, rtol=1e-5, atol=1e-6, err_msg=f"output {i}")
    for k, v in expected_bufs.items():
        np.testing.assert_allclose(got_bufs[k], v, rtol=1e-5, atol=1e-6, err_msg=f"buffer {k}")


def random_buffers(graph: UOp, seed: int = 0) -> dict[int, Array]:
    rng = np.random.default_rng(seed)
    out: dict[int, Array] = {}
    for n in graph.toposort:
        if n.op is Ops.BUFFER and n.arg.id not in out:
            dt = np_dtype(n.dtype)
            if dt == np.bool_:
                out[n.arg.id] = rng.random(n.arg.size) < 0.5
            elif np.issubdtype(dt, np.integer):
                out[n.arg.id] = rng.integers(-20, 20, n.arg.size).astype(dt)
            else:
                out[n.arg.id] = rng.standard_normal(n.arg.size).astype(dt)
    return out

