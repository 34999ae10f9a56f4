"""A NumPy executor of schedules, and a NumPy evaluator of tensor graphs: the scheduler checked without a runtime.

The scheduler may not import the runtime (docs/design.md §1), so `run_schedule` runs a SCHEDULE-stage LINEAR on
NumPy arrays and `reference` evaluates the TENSOR-stage graph it came from with NumPy's own view operations; a
schedule is right when the two agree. `run_kernel` interprets one kernel vectorised, one NumPy axis per RANGE; new
buffers start as garbage and every index is bounds-checked (`ExecutionError`). Values follow the IR's scalar
semantics where NumPy's differ (docs/ir.md §5); what still differs, and why comparisons use a tolerance, is in
docs/scheduler.md, "The conformance suite". NumPy is not a dependency of plygrad-scheduler: it comes with the
`conformance` and `test` extras, and only this module imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import numpy as np

from plygrad.ir import DType, GroupOp, KernelInfo, Ops, Stage, UOp, dtypes, evaluate, verify
from plygrad.ir.scalar import threefry2x32

Array = np.ndarray[Any, Any]
GARBAGE: Final = 77  # what a new buffer holds before any kernel writes it


class ExecutionError(Exception):
    """A schedule that cannot run as written: an index outside its buffer, a buffer id used with two sizes or
    dtypes, an op no kernel may hold. The message names the kernel (CALL number) and what it touched."""


def np_dtype(dt: DType) -> np.dtype[Any]:
    """The NumPy dtype holding `dt`'s values (`index` is int64)."""
    return np.dtype(np.int64) if dt is dtypes.index else np.dtype(dt.name)


# ---- the ALU with the IR's semantics -------------------------------------------------------------------------
def _idiv(a: Array, b: Array) -> Array:
    # NumPy floors; truncating is flooring plus one where the signs differ and the division is inexact. Not via
    # abs(): abs(MIN) overflows. x // 0 is 0 under errstate("ignore"), as the IR defines it; MIN // -1 wraps to MIN.
    q = np.floor_divide(a, b)
    inexact = (b != 0) & (a - q * b != 0) & ((a < 0) != (b < 0))
    return np.asarray(q + inexact.astype(q.dtype)).astype(a.dtype)


def _mod(a: Array, b: Array) -> Array:
    return np.where(b == 0, np.zeros((), a.dtype), a - b * _idiv(a, b)).astype(a.dtype)


def _threefry(counter: Array, key: Array) -> Array:
    """Threefry-2x32 elementwise on uint64 words: the IR's own scalar function (plygrad.ir.scalar), one element at a
    time (the conformance graphs are small; one definition of the cipher, not a second vectorized copy)."""
    pairs = np.broadcast_arrays(np.asarray(counter, np.uint64), np.asarray(key, np.uint64))
    out = [threefry2x32(int(c), int(k)) for c, k in zip(pairs[0].ravel(), pairs[1].ravel(), strict=True)]
    return np.array(out, np.uint64).reshape(pairs[0].shape)


_ALU: Final[dict[Ops, Callable[..., Any]]] = {
    Ops.NEG: np.negative, Ops.RECIPROCAL: np.reciprocal, Ops.SQRT: np.sqrt, Ops.EXP2: np.exp2,
    Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.TRUNC: np.trunc, Ops.ADD: np.add, Ops.SUB: np.subtract,
    Ops.MUL: np.multiply, Ops.FDIV: np.divide, Ops.IDIV: _idiv, Ops.MOD: _mod, Ops.MAX: np.maximum,
    Ops.POW: np.power, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal, Ops.AND: np.bitwise_and,
    Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor, Ops.SHL: np.left_shift, Ops.SHR: np.right_shift,
    Ops.MULACC: lambda a, b, c: a * b + c, Ops.THREEFRY: _threefry,
}
_BOOL_ALU: Final[dict[Ops, Callable[..., Any]]] = {Ops.ADD: np.logical_or, Ops.MAX: np.logical_or,
                                                   Ops.MUL: np.logical_and}


def alu(op: Ops, dt: DType, xs: list[Array]) -> Array:
    """ALU `op` on arrays; `dt` is the result dtype (for a comparison: the operands' dtype)."""
    with np.errstate(all="ignore"):
        if op is Ops.WHERE:
            return np.where(xs[0], xs[1], xs[2]).astype(np_dtype(dt))
        if dt is dtypes.bool and op in _BOOL_ALU:
            return np.asarray(_BOOL_ALU[op](*xs))
        out = np.asarray(_ALU[op](*xs))
        return out if op in GroupOp.Comparison else out.astype(np_dtype(dt))


_VALUE_OPS: Final = GroupOp.ALU | {Ops.CAST, Ops.BITCAST}


def value_op(n: UOp, vals: dict[UOp, Array]) -> Array:
    """An ALU op, CAST or BITCAST of `n`'s sources' arrays (the same in the reference and in a kernel)."""
    if n.op is Ops.CAST:
        return cast(vals[n.src[0]], n.dtype)
    if n.op is Ops.BITCAST:
        return bitcast(vals[n.src[0]], n.dtype)
    return alu(n.op, n.src[0].dtype if n.op in GroupOp.Comparison else n.dtype, [vals[s] for s in n.src])


def cast(x: Array, to: DType) -> Array:
    """CAST with the IR's semantics: float -> int truncates toward zero, NaN and ±inf become 0, the result wraps."""
    target = np_dtype(to)
    if x.dtype.kind != "f" or target.kind not in "iu":
        with np.errstate(all="ignore"):
            return x.astype(target)
    wide = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        t = np.where(np.isfinite(wide), np.trunc(wide), 0.0)
        t = np.fmod(t, 2.0**64)  # exact; now (-2**64, 2**64), shifted into int64's range below (also exact)
        t = np.where(t >= 2.0**63, t - 2.0**64, np.where(t < -(2.0**63), t + 2.0**64, t))
        return t.astype(np.int64).astype(target)


def bitcast(x: Array, to: DType) -> Array:
    return np.ascontiguousarray(x).view(np_dtype(to))


def reduce_axes(op: Ops, x: Array, axes: tuple[int, ...], dt: DType) -> Array:
    """REDUCE `op` over `axes`, keeping them (size 1)."""
    if dt is dtypes.bool:
        return np.asarray((np.any if op in (Ops.ADD, Ops.MAX) else np.all)(x, axis=axes, keepdims=True))
    if op is Ops.MAX and any(x.shape[a] == 0 for a in axes):
        shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
        lowest = -np.inf if np_dtype(dt).kind == "f" else np.iinfo(np_dtype(dt)).min
        return np.full(shape, lowest, np_dtype(dt))
    reducers: dict[Ops, Callable[..., Any]] = {Ops.ADD: np.sum, Ops.MUL: np.prod, Ops.MAX: np.max}
    with np.errstate(all="ignore"):
        return np.asarray(reducers[op](x, axis=axes, keepdims=True)).astype(np_dtype(dt))


def view(x: Array, op: Ops, arg: Any) -> Array:
    """Movement op `op(arg)` of an array, with NumPy's own view operations."""
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
    if op is Ops.FLIP:
        return x[tuple(slice(None, None, -1) if f else slice(None) for f in arg)]
    raise ExecutionError(f"{op!r} is not a movement op")


# ---- the reference: the tensor graph evaluated by NumPy ------------------------------------------------------
def reference(graph: UOp, buffers: Mapping[int, Array]) -> tuple[list[Array], dict[int, Array]]:
    """Evaluate a tensor SINK with NumPy: the value of each of its sources (in its shape), and every buffer after
    the graph's ASSIGNs. `buffers` (by buffer id) is not modified."""
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
            vals[n] = view(vals[n.src[0]], op, n.arg)
        elif op in _VALUE_OPS:
            vals[n] = value_op(n, vals)
        elif op is Ops.REDUCE:
            vals[n] = reduce_axes(n.arg[0], vals[n.src[0]], n.arg[1], n.dtype)
        elif op in (Ops.CONTIGUOUS, Ops.COPY):
            vals[n] = vals[n.src[0]]
        elif op is Ops.ALLREDUCE:  # the sources folded in order with the op's ALU semantics (devices play no part)
            acc = n.src[0]
            for src in n.src[1:]:
                acc = UOp(n.arg[0], n.dtype, (acc, src))
                vals[acc] = value_op(acc, vals)
            vals[n] = vals[acc]
        elif op is Ops.ASSIGN:
            vals[n] = vals[n.src[1]]
            assigns.append((n, vals[n.src[1]]))
        else:
            raise ExecutionError(f"the NumPy reference does not evaluate {op!r}")
    for node, value in assigns:  # write through the target's view: map the view over the buffer's addresses
        target = node.src[0]
        chain = []
        while target.op is not Ops.BUFFER:
            chain.append(target)
            target = target.src[0]
        addresses = np.arange(target.arg.size)
        for m in reversed(chain):
            addresses = view(addresses, m.op, m.arg)
        bufs[target.arg.id][addresses.reshape(-1)] = np.broadcast_to(value, addresses.shape).reshape(-1)
    return [np.broadcast_to(vals[s], s.shape or ()) for s in graph.src], bufs


# ---- the executor: a schedule run on NumPy arrays ------------------------------------------------------------
def _check_bounds(idx: Array, used: Array, buf: Array, what: str, where: str) -> None:
    bad = used & ((idx < 0) | (idx >= buf.size))
    if np.any(bad):
        raise ExecutionError(f"{where} {what} index {int(idx[bad].reshape(-1)[0])} of a buffer of {buf.size} "
                             "elements: the kernel would touch memory outside it")


def run_kernel(body: UOp, arrays: list[Array], variables: Mapping[str, int], where: str = "the kernel") -> None:
    """Interpret a kernel AST over `arrays` (PARAM `i` is `arrays[i]`, written in place), vectorised: RANGE `k` by
    axis id is NumPy axis `k`. `where` names the kernel in errors."""
    ranges = sorted({n.arg[0]: n for n in body.toposort if n.op is Ops.RANGE}.items())
    axis_of = {r: i for i, (_, r) in enumerate(ranges)}
    nd = len(ranges)
    # a loop end is a constant, or an expression of the kernel's variables (a symbolic size)
    sizes = [int(r.src[0].arg) if r.src[0].op is Ops.CONST else int(evaluate(r.src[0], variables)) for _, r in ranges]
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
        elif op in _VALUE_OPS:
            vals[n] = value_op(n, vals)
        elif op is Ops.LOAD:
            index = n.src[0]
            param = index.src[0].arg
            buf, idx = arrays[param], vals[index.src[1]]
            gate = vals[index.src[2]] if len(index.src) == 3 else np.ones_like(idx, dtype=bool)
            idx, gate = np.broadcast_arrays(idx, gate)
            _check_bounds(idx, gate, buf, f"reads PARAM {param} at", where)
            vals[n] = np.where(gate, buf[np.where(gate, idx, 0)], np.zeros((), buf.dtype)) if buf.size else \
                np.zeros(idx.shape, buf.dtype)
        elif op is Ops.REDUCE:
            axes = tuple(axis_of[r] for r in n.src[1:])
            full = [1] * nd
            for a in axes:
                full[a] = sizes[a]
            value = np.broadcast_to(vals[n.src[0]], np.broadcast_shapes(vals[n.src[0]].shape, tuple(full)))
            vals[n] = reduce_axes(n.arg, value, axes, n.dtype)
        elif op is Ops.STORE:
            index = n.src[0]
            param = index.src[0].arg
            buf = arrays[param]
            parts = [vals[index.src[1]], vals[n.src[1]]] + ([vals[index.src[2]]] if len(index.src) == 3 else [])
            parts = list(np.broadcast_arrays(*parts, np.zeros(sizes, bool)))[:len(parts)] if nd else parts
            idx, value = parts[0].reshape(-1), parts[1].reshape(-1)
            keep = parts[2].reshape(-1) if len(parts) == 3 else np.ones(idx.shape, bool)
            _check_bounds(idx, keep, buf, f"writes PARAM {param} at", where)
            buf[idx[keep]] = value[keep]
        elif op in (Ops.PARAM, Ops.INDEX, Ops.END, Ops.SINK):
            continue
        else:
            raise ExecutionError(f"{where} holds {op!r}, which the NumPy executor does not run (not a kernel op)")


def _buffer_table(linear: UOp, buffers: Mapping[int, Array]) -> dict[int, tuple[DType, int]]:
    """The dtype and size of every buffer id the schedule names, checked to be one per id and to fit the given
    arrays (a schedule naming buffer 3 as float32[12] while the caller's buffer 3 holds 10 int32 is refused)."""
    table: dict[int, tuple[DType, int]] = {}
    for k, call in enumerate(linear.src):
        for b in call.src[1:]:
            if b.op is not Ops.BUFFER:
                continue
            ref, seen = b.arg, table.setdefault(b.arg.id, (b.dtype, b.arg.size))
            if seen != (b.dtype, ref.size):
                raise ExecutionError(f"CALL {k} names buffer {ref.id} as {b.dtype.name}[{ref.size}], an earlier "
                                     f"CALL as {seen[0].name}[{seen[1]}]: one id is one buffer")
            given = buffers.get(ref.id)
            if given is not None and (given.size, given.dtype) != (ref.size, np_dtype(b.dtype)):
                raise ExecutionError(f"CALL {k} names buffer {ref.id} as {b.dtype.name}[{ref.size}], but the graph's "
                                     f"buffer {ref.id} holds {given.size} {given.dtype}")
    return table


def _kernel_name(body: UOp) -> str:
    info = body.arg
    return info.name if isinstance(info, KernelInfo) and info.name else "kernel"


def run_schedule(linear: UOp, buffers: Mapping[int, Array]) -> tuple[list[Array], dict[int, Array]]:
    """Run a LINEAR on copies of `buffers` (by buffer id): the flat array of each output (`LINEAR.arg`) and every
    buffer afterwards. New buffers start as garbage (`GARBAGE`); see the module docstring for the checks."""
    verify(linear, Stage.SCHEDULE)
    mem = {k: v.copy() for k, v in buffers.items()}
    for buf_id, (dtype, size) in _buffer_table(linear, buffers).items():
        if buf_id not in mem:
            mem[buf_id] = np.full(size, GARBAGE, np_dtype(dtype))
    for k, call in enumerate(linear.src):
        arrays = [mem[s.arg.id] for s in call.src[1:] if s.op is Ops.BUFFER]
        if call.src[0].op is Ops.COPY:
            arrays[0][:] = arrays[1]
            continue
        variables = {s.src[0].arg[0]: s.src[1].arg for s in call.src[1:] if s.op is Ops.BIND}
        run_kernel(call.src[0], arrays, variables, f"CALL {k} ({_kernel_name(call.src[0])})")
    missing = [i for i in linear.arg if i not in mem]
    if missing:
        raise ExecutionError(f"LINEAR.arg names buffers {missing} that no CALL uses and the graph does not have")
    return [mem[i] for i in linear.arg], mem


def kernel_count(linear: UOp) -> int:
    """The kernels of a schedule (CALLs of a SINK; a COPY is not a kernel)."""
    return sum(1 for c in linear.src if c.src[0].op is Ops.SINK)
