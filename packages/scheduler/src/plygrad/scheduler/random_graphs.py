"""Random tensor graphs (stage TENSOR) for differential tests of schedulers, from a seed.

Built from plain `plygrad.ir` UOps (no frontend, no NumPy) driven by a `random.Random`, so a seed gives the same
graph on any machine and a failing graph is reproduced by its seed alone. A graph grows from a pool of input
BUFFERs, one of the `KINDS` per step (unary, binary, reduce, views, broadcast, gather); the SINK holds one to
three pool tensors and, with probability `ASSIGN_CHANCE`, an ASSIGN into an input buffer that the graph also
reads. `RandomGraph.inputs` carries the data (gather indices must lie in range). docs/scheduler.md,
"The conformance suite", lists what each kind adds.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Final

from plygrad.ir import BufferRef, DType, Ops, UOp, dtypes

Shape = tuple[int, ...]
ViewOp = tuple[Ops, object]
Value = float | int | bool

KINDS: Final = ("unary", "binary", "reduce", "views", "broadcast", "gather")
ASSIGN_CHANCE: Final = 0.25
MAX_ELEMENTS: Final = 256  # keeps every tensor small, so a graph runs in milliseconds


@dataclass(frozen=True)
class RandomGraph:
    """A tensor SINK and the data of each input BUFFER it reads (by buffer id, in the BUFFER's dtype)."""

    seed: int
    sink: UOp
    inputs: dict[int, tuple[DType, list[Value]]]

    @property
    def buffers(self) -> dict[int, UOp]:
        """The BUFFER node of every input id."""
        return {n.arg.id: n for n in self.sink.toposort if n.op is Ops.BUFFER}


# ---- small builders -------------------------------------------------------------------------------------------
def view(x: UOp, op: Ops, arg: object) -> UOp:
    """The movement op `op(arg)` of `x`."""
    return UOp(op, x.dtype, (x,), arg)


def filled(value: Value, shape: Shape, dtype: DType = dtypes.float32) -> UOp:
    """A constant broadcast to `shape` (the IR never broadcasts implicitly)."""
    c = UOp.const(dtype, value)
    return c if not shape else view(view(c, Ops.RESHAPE, (1,) * len(shape)), Ops.EXPAND, shape)


def positions(n: int, dtype: DType = dtypes.int32) -> UOp:
    """The values 0..n-1 as a shape (n,) graph without a buffer: each bit of the position is a constant PADded
    to `(0, 2**b)` and EXPANDed over the other bits' axes, and the bits are added up."""
    if n <= 1:
        return filled(0, (n,), dtype)
    bits = (n - 1).bit_length()
    total: UOp | None = None
    for axis in range(bits):
        weight = view(view(UOp.const(dtype, 1 << (bits - 1 - axis)), Ops.RESHAPE, (1,)), Ops.PAD, ((1, 0),))
        shape = tuple(2 if i == axis else 1 for i in range(bits))
        term = view(view(weight, Ops.RESHAPE, shape), Ops.EXPAND, (2,) * bits)
        total = term if total is None else total + term
    assert total is not None
    flat = view(total, Ops.RESHAPE, (1 << bits,))
    return flat if n == 1 << bits else view(flat, Ops.SHRINK, ((0, n),))


def _shape(x: UOp) -> Shape:
    shape = x.shape
    assert shape is not None, f"{x.op.name} has no shape"
    return shape


# ---- movement chains ------------------------------------------------------------------------------------------
def random_view_chain(rng: random.Random, shape: Shape, max_ops: int = 5) -> list[ViewOp]:
    """One to `max_ops` movement ops that apply, in order, to a tensor of `shape` (an EXPAND that needs a size-1
    axis gets a RESHAPE adding one in front of it). Each is `(op, arg)` with the tensor-stage argument."""
    chain: list[ViewOp] = []
    current = shape
    for _ in range(rng.randint(1, max_ops)):
        op = rng.choice((Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND))
        arg: object
        if op is Ops.PAD:
            pads = tuple((rng.randint(0, 2), rng.randint(0, 2)) for _ in current)
            arg, current = pads, tuple(n + b + a for n, (b, a) in zip(current, pads, strict=True))
        elif op is Ops.SHRINK:
            bounds = []
            for n in current:
                start = rng.randint(0, n - 1)
                bounds.append((start, rng.randint(start + 1, n)))
            arg, current = tuple(bounds), tuple(e - s for s, e in bounds)
        elif op is Ops.FLIP:
            arg = tuple(rng.random() < 0.5 for _ in current)
            if not any(arg):
                arg = (True, *arg[1:])
        elif op is Ops.RESHAPE:
            total = math.prod(current)
            first = rng.choice([d for d in range(1, total + 1) if total % d == 0])
            arg = current = (first, total // first) if rng.random() < 0.5 else (total,)
        elif op is Ops.PERMUTE:
            order = list(range(len(current)))
            rng.shuffle(order)
            arg, current = tuple(order), tuple(current[i] for i in order)
        else:
            if 1 not in current:
                current = (1, *current)
                chain.append((Ops.RESHAPE, current))
            arg = current = tuple(3 if n == 1 else n for n in current)
        if math.prod(current) > MAX_ELEMENTS:
            break
        chain.append((op, arg))
    return chain


def apply_view_chain(x: UOp, chain: list[ViewOp]) -> UOp:
    for op, arg in chain:
        x = view(x, op, arg)
    return x


# ---- the graph generator ----------------------------------------------------------------------------------------
class _Builder:
    """The pool of tensors and the input buffers of one graph being grown."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.inputs: dict[int, tuple[DType, list[Value]]] = {}
        self.buffers: dict[int, UOp] = {}
        self.pool: list[UOp] = []

    def new_buffer(self, shape: Shape, dtype: DType = dtypes.float32, values: list[Value] | None = None) -> UOp:
        buffer_id = len(self.inputs)
        size = math.prod(shape)
        data: list[Value] = values if values is not None else [round(self.rng.gauss(0, 1), 3) for _ in range(size)]
        self.inputs[buffer_id] = (dtype, data)
        base = UOp(Ops.BUFFER, dtype, (), BufferRef(buffer_id, "CPU", size))
        self.buffers[buffer_id] = base
        return base if shape == (size,) else view(base, Ops.RESHAPE, shape)

    def pick(self) -> UOp:
        return self.rng.choice(self.pool)

    def grow(self, kind: str) -> UOp | None:
        x = self.pick()
        shape = _shape(x)
        rng = self.rng
        if kind == "unary":
            choice = rng.randrange(5)
            if choice == 0:
                return -x
            if choice == 1:
                return x * filled(round(rng.uniform(-2, 2), 2), shape)
            if choice == 2:
                return x.alu(Ops.MAX, filled(0.0, shape))
            if choice == 3:
                return (x < filled(0.0, shape)).where(x, filled(1.0, shape))
            return x.cast(dtypes.int32).cast(dtypes.float32)
        if kind == "binary":
            partners = [p for p in self.pool if _shape(p) == shape]
            return x.alu(rng.choice((Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX)), rng.choice(partners))
        if kind == "reduce":
            if not shape:
                return None
            axes = tuple(sorted(rng.sample(range(len(shape)), rng.randint(1, len(shape)))))
            reduced = UOp(Ops.REDUCE, x.dtype, (x,), (rng.choice((Ops.ADD, Ops.MAX)), axes))
            back = view(reduced, Ops.EXPAND, shape) if _shape(reduced) != shape else reduced
            return back + x if rng.random() < 0.5 else back
        if kind == "views":
            return apply_view_chain(x, random_view_chain(rng, shape)) if shape else None
        if kind == "broadcast":
            if math.prod(shape) * 3 > MAX_ELEMENTS:
                return None
            return view(view(x, Ops.RESHAPE, (1, *shape)), Ops.EXPAND, (rng.randint(2, 3), *shape))
        return self.gather(x, shape)

    def gather(self, x: UOp, shape: Shape) -> UOp | None:
        """`x[idx]` along axis 0 of a 2-D view of `x`: out[i, c] = sum_m x[m, c] * (idx[i] == m)."""
        if len(shape) != 2:
            return None
        n, cols = shape
        m = self.rng.randint(1, 4)
        idx = self.new_buffer((m,), dtypes.int32, [self.rng.randrange(n) for _ in range(m)])
        full = (m, cols, n)
        hit = view(view(idx, Ops.RESHAPE, (m, 1, 1)), Ops.EXPAND, full).eq(
            view(view(positions(n), Ops.RESHAPE, (1, 1, n)), Ops.EXPAND, full))
        values = view(view(view(x, Ops.PERMUTE, (1, 0)), Ops.RESHAPE, (1, cols, n)), Ops.EXPAND, full)
        picked = UOp(Ops.REDUCE, x.dtype, (hit.where(values, filled(0.0, full)),), (Ops.ADD, (2,)))
        return view(picked, Ops.RESHAPE, (m, cols))


def random_graph(seed: int, max_steps: int = 8) -> RandomGraph:
    """The random tensor graph of `seed` (see the module docstring); it passes `verify(sink, Stage.TENSOR)`."""
    rng = random.Random(seed)  # noqa: S311 -- reproducible test data, not secrets
    builder = _Builder(rng)
    shape = tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 3)))
    builder.pool = [builder.new_buffer(shape) for _ in range(rng.randint(1, 3))]
    for _ in range(rng.randint(1, max_steps)):
        grown = builder.grow(rng.choice(KINDS))
        if grown is not None and math.prod(_shape(grown)) <= MAX_ELEMENTS:
            builder.pool.append(grown)
    computed = builder.pool[len(builder.buffers):] or builder.pool
    outputs = [rng.choice(computed) for _ in range(rng.randint(1, 3))]
    if rng.random() < ASSIGN_CHANCE:
        target_id = rng.choice([i for i, (dt, _) in builder.inputs.items() if dt is dtypes.float32])
        target = builder.buffers[target_id]
        fitting = [p for p in computed if p.dtype is target.dtype and math.prod(_shape(p)) == target.arg.size]
        if fitting:
            value = rng.choice(fitting)
            viewed = target if _shape(value) == _shape(target) else view(target, Ops.RESHAPE, _shape(value))
            outputs.append(UOp(Ops.ASSIGN, target.dtype, (viewed, value)))
    return RandomGraph(seed, UOp(Ops.SINK, dtypes.void, tuple(outputs)), builder.inputs)
