"""Random user programs at real sizes, run through plygrad and PyTorch and compared (issue #32, "a fuzzer of user
programs").

A program is a small random DAG (2-8 steps) of public Tensor API calls drawn from a seed: elementwise unary and
broadcasting binary ops, movement (reshape, permute, transpose, expand, pad, strided slicing, flip, contiguous),
reductions over random axes (sum, mean, max, var, std, logsumexp; transposed inputs through permute), matmul and
linear, conv2d, gather and tensor indexing, setitem / assign into strided views under autograd, softmax,
log_softmax and layernorm. Shapes are drawn from the sizes where plygrad's block, tile, thread and vector widths
change (1, primes, 15/16/17, ..., 1023/1024) and from flat sizes past 2^20, capped so each program stays cheap.

Each step is one entry of the OPS table: a name, how it reads in plygrad and in torch (two source templates), and
its rule (which values it applies to, the shape and dtype it makes, what it draws). The program is *Python source*:
what runs is exactly what a failure prints, so a repro is the seed plus lines a developer can paste. float32
programs are compared with torch in float64 (the truth, not torch's own float32 rounding), forward and, through a
random upstream gradient, every input's gradient; float16 and int32 programs forward only.

A plygrad exception where torch succeeds is a failure; a program torch refuses is counted as invalid (the generator
should make none). Many programs run in one process on purpose: state one program leaves can break the next.

    python tests/user_programs.py --programs 2000 --seed 0     # a long run; prints each failure and a summary
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# sizes where BLOCK, TILE, THREAD and vector widths change, primes, and 1
SIZES = (1, 2, 3, 5, 7, 13, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1023,
         1024)
# flat sizes for reductions and broadcast gradients past 2^20 elements
BIG = (35000, 65537, 1 << 20, (1 << 20) + 1, 1 << 21)
MATMUL = (1, 16, 17, 32, 64, 65, 128, 176, 256, 384, 512, 768)

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Limits:
    """How big a program may get: elements of any one value, and multiply-adds of one matmul or conv."""

    # 2^21 elements keeps the flat sizes past 2^20 and a program at about a second on a CPU core
    elements: int = 1 << 21
    flops: int = 1 << 25


SHORT = Limits(elements=1 << 15, flops=1 << 20)  # CI's short mode: every kernel is also compiled for 3 GPU targets


@dataclass(frozen=True)
class Value:
    name: str
    shape: Shape
    kind: str  # "f32", "f16" or "i32"
    grad: bool  # carries a gradient back to some input
    distinct: bool  # no two elements equal (max's gradient at ties differs between libraries by design)


@dataclass(frozen=True)
class Input:
    name: str
    shape: Shape
    kind: str  # "f32", "f16", "i32" or "index" (int64 in [0, bound))
    bound: int = 0
    grad: bool = False


@dataclass(frozen=True)
class Step:
    op: str
    pg: str  # plygrad source, may span lines
    torch: str
    out: Value
    deps: tuple[str, ...]


@dataclass
class Program:
    seed: int
    kind: str
    inputs: list[Input] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    loss: str = "weights"  # "sum", "mean" or "weights" (backward)

    def _needed(self) -> set[str]:
        need = set(self.outputs)
        for step in reversed(self.steps):
            if step.out.name in need:
                need.update(step.deps)
        return need

    def prelude(self) -> str:
        lines = [f"rng = np.random.default_rng({self.seed})"]
        for x in self.inputs:
            shape = repr(x.shape)
            if x.kind == "index":
                lines.append(f"{x.name}_np = rng.integers(0, {x.bound}, {shape}).astype(np.int64)")
            elif x.kind == "i32":
                lines.append(f"{x.name}_np = rng.integers(-4, 5, {shape}).astype(np.int32)")
            else:
                np_dtype = "float16" if x.kind == "f16" else "float32"
                lines.append(f"{x.name}_np = rng.standard_normal({shape}).astype(np.{np_dtype})")
        return "\n".join(lines)

    def source(self, lib: str) -> str:
        need = self._needed()
        lines = []
        for x in self.inputs:
            if x.name not in need:
                continue
            if lib == "plygrad":
                lines.append(f"{x.name} = Tensor({x.name}_np{', requires_grad=True' if x.grad else ''})")
            else:
                cast = ".double()" if self.kind == "f32" and x.kind != "index" else ""
                cast = ".float()" if x.kind == "f16" else cast
                lines.append(f"{x.name} = torch.from_numpy({x.name}_np){cast}"
                             f"{'.requires_grad_()' if x.grad else ''}")
        lines += [s.pg if lib == "plygrad" else s.torch for s in self.steps if s.out.name in need]
        return "\n".join(lines)

    def value(self, name: str) -> Value:
        return next(s.out for s in self.steps if s.out.name == name)

    def ops(self) -> list[str]:
        need = self._needed()
        return [s.op for s in self.steps if s.out.name in need]

    def grads(self) -> bool:
        return self.kind == "f32" and any(self.value(o).grad for o in self.outputs)

    def backward(self, lib: str) -> str:
        """The loss: the outputs' sum or mean, as users write it (an upstream gradient of ones, which the backward
        graph broadcasts), or each output times a random upstream gradient (a transposed one cannot cancel out)."""
        if self.loss in ("sum", "mean"):
            terms = [f"{o}.{self.loss}()" for o in self.outputs if self.value(o).grad]
            return "\n".join(["loss = " + " + ".join(terms), "loss.backward()"])
        lines = [f"rng = np.random.default_rng({self.seed + 1})"]
        terms = []
        for o in self.outputs:
            lines.append(f"w_{o} = np.asarray(rng.standard_normal({self.value(o).shape!r}))")
            if self.value(o).grad:
                w = f"Tensor(w_{o}.astype(np.float32))" if lib == "plygrad" else f"torch.from_numpy(w_{o})"
                terms.append(f"({o} * {w}).sum()")
        return "\n".join([*lines, "loss = " + " + ".join(terms), "loss.backward()"])

    def with_output(self, name: str) -> Program:
        return Program(self.seed, self.kind, self.inputs, self.steps, [name], self.loss)

    def repro(self) -> str:
        back = {lib: "\n" + self.backward(lib) if self.grads() else "" for lib in ("plygrad", "torch")}
        return (f"# seed {self.seed} ({self.kind}); outputs {', '.join(self.outputs)}\n"
                "import numpy as np\nfrom plygrad.frontend import Tensor, dtypes\n" + self.prelude() + "\n"
                + self.source("plygrad") + back["plygrad"] + "\n# torch, in float64 for float32 programs:\n"
                + self.source("torch") + back["torch"])


# ---- drawing ---------------------------------------------------------------------------------------------------------
class Draw:
    """The generator's state: the program so far, its random source and limits."""

    def __init__(self, seed: int, limits: Limits) -> None:
        self.rng = np.random.default_rng(seed)
        self.limits = limits
        kind = self.rng.choice(["f32", "f16", "i32"], p=[0.75, 0.15, 0.1])
        self.program = Program(seed, str(kind))
        self.values: list[Value] = []
        self.counter = 0

    def pick(self, seq: Any) -> Any:
        return seq[int(self.rng.integers(len(seq)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def size(self, room: int, big: bool = False) -> int:
        pool = [s for s in (SIZES + BIG if big else SIZES) if s <= room]
        return int(self.pick(pool)) if pool else 1

    def shape(self, ndim: int | None = None) -> Shape:
        ndim = int(self.pick((1, 1, 2, 2, 2, 3, 3, 4))) if ndim is None else ndim
        if ndim == 1 and self.chance(0.3):
            return (self.size(self.limits.elements, big=True),)
        if ndim == 2 and self.chance(0.35):  # tall: a flat size past 2^15 by a small one, either way round
            small = int(self.pick((2, 2, 3, 4, 16)))
            tall = self.size(self.limits.elements // small, big=True)
            return (tall, small) if self.chance(0.5) else (small, tall)
        dims: list[int] = []
        room = self.limits.elements
        for _ in range(ndim):
            d = self.size(max(1, room // 4) if len(dims) < ndim - 1 else room)
            dims.append(d)
            room = max(1, room // d)
        order = self.rng.permutation(ndim)
        return tuple(dims[i] for i in order)

    def input(self, shape: Shape, kind: str | None = None, grad: bool | None = None, bound: int = 0) -> Input:
        kind = self.program.kind if kind is None else kind
        g = (kind == "f32") if grad is None else grad and kind == "f32"
        x = Input(self.name("x"), shape, kind, bound, g)
        self.program.inputs.append(x)
        return x

    def input_value(self, shape: Shape) -> Value:
        x = self.input(shape)
        return Value(x.name, shape, x.kind, x.grad, x.kind != "i32")

    def fits(self, shape: Shape) -> bool:
        return 0 < math.prod(shape) <= self.limits.elements


OpRule = Callable[[Draw, Value], Step | None]


def _step(d: Draw, op: str, v: Value, shape: Shape, pg: str, torch: str | None = None, *, deps: tuple[str, ...] = (),
          kind: str | None = None, grad: bool | None = None, distinct: bool | None = None) -> Step | None:
    if not d.fits(shape):
        return None
    out = Value(d.name("v"), shape, v.kind if kind is None else kind, v.grad if grad is None else grad,
                v.distinct if distinct is None else distinct)
    fill = {"a": v.name, "o": out.name}
    return Step(op, f"{out.name} = " + pg.format(**fill), f"{out.name} = " + (pg if torch is None else torch)
                .format(**fill), out, (v.name, *deps))


def _bcast_shape(d: Draw, shape: Shape) -> Shape:
    """A shape that broadcasts against `shape`: some axes 1, maybe fewer leading axes."""
    out = tuple(1 if d.chance(0.4) else s for s in shape)
    return out[int(d.rng.integers(len(out) + 1)) if d.chance(0.3) else 0:] or (1,)


# ---- the op table's rules -------------------------------------------------------------------------------------------
UNARY_F = {"relu": ("{a}.relu()", "{a}.relu()", False), "tanh": ("{a}.tanh()", "{a}.tanh()", True),
           "sigmoid": ("{a}.sigmoid()", "{a}.sigmoid()", True), "square": ("{a}.square()", "{a}.square()", False),
           "exp": ("({a} * 0.25).exp()", "({a} * 0.25).exp()", True),
           "log": ("({a}.abs() + 1).log()", "({a}.abs() + 1).log()", False),
           "sqrt": ("({a}.abs() + 0.5).sqrt()", "({a}.abs() + 0.5).sqrt()", False),
           "neg": ("-{a}", "-{a}", True)}


def unary(d: Draw, v: Value) -> Step | None:
    if v.kind == "i32":
        return _step(d, "unary", v, v.shape, "-{a} * 2 + 1", distinct=v.distinct)
    name = str(d.pick(sorted(UNARY_F)))
    pg, torch, keeps = UNARY_F[name]
    return _step(d, name, v, v.shape, pg, torch, distinct=v.distinct and keeps)


BINARY = {"add": ("{a} + {b}",) * 2, "sub": ("{b} - {a}",) * 2, "mul": ("{a} * {b}",) * 2,
          "div": ("{a} / ({b}.abs() + 1)",) * 2,
          "where": ("({a} > {b}).where({a}, {b})", "torch.where({a} > {b}, {a}, {b})")}


def binary(d: Draw, v: Value) -> Step | None:
    name = str(d.pick(sorted(BINARY)))
    if v.kind == "i32" and name == "div":
        name = "mul"
    same = [w for w in d.values if w.shape == v.shape and w.name != v.name and w.kind == v.kind]
    if same and d.chance(0.3):
        other = d.pick(same)
        b, shape, grad = other.name, v.shape, v.grad or other.grad
    elif d.chance(0.3):  # the new operand is the bigger one: v broadcasts up (its gradient sums)
        bigger = tuple(d.size(d.limits.elements // max(1, math.prod(v.shape))) if s == 1 else s for s in v.shape)
        if not d.fits(bigger):
            return None
        x = d.input(bigger)
        b, shape, grad = x.name, bigger, v.grad or x.grad
    else:
        x = d.input(_bcast_shape(d, v.shape))
        b, shape, grad = x.name, v.shape, v.grad or x.grad
    pg, torch = (t.replace("{b}", b) for t in BINARY[name])
    return _step(d, name, v, shape, pg, torch, deps=(b,), grad=grad, distinct=False)


def reshape(d: Draw, v: Value) -> Step | None:
    s = list(v.shape)
    choice = int(d.rng.integers(3))
    if choice == 0 and len(s) >= 2:  # merge two neighbours
        i = int(d.rng.integers(len(s) - 1))
        s[i:i + 2] = [s[i] * s[i + 1]]
    elif choice == 1:  # split one axis by a divisor
        i = int(d.rng.integers(len(s)))
        divs = [k for k in (2, 3, 4, 8, 16, 32, 64) if s[i] % k == 0 and s[i] > k]
        if not divs or len(s) >= 5:
            return None
        k = int(d.pick(divs))
        s[i:i + 1] = [s[i] // k, k]
    else:
        if len(s) >= 5:
            return None
        s.insert(int(d.rng.integers(len(s) + 1)), 1)
    return _step(d, "reshape", v, tuple(s), "{a}.reshape(" + repr(tuple(s)) + ")")


def permute(d: Draw, v: Value) -> Step | None:
    if len(v.shape) < 2:
        return None
    if d.chance(0.4):
        return _step(d, "transpose", v, (*v.shape[:-2], v.shape[-1], v.shape[-2]), "{a}.transpose(-1, -2)")
    order = tuple(int(i) for i in d.rng.permutation(len(v.shape)))
    return _step(d, "permute", v, tuple(v.shape[i] for i in order), "{a}.permute(" + repr(order) + ")")


def expand(d: Draw, v: Value) -> Step | None:
    shape, pre = list(v.shape), ""
    ones = [i for i, s in enumerate(shape) if s == 1]
    if not ones or d.chance(0.3):
        if len(shape) >= 4:
            return None
        i = int(d.rng.integers(len(shape) + 1))
        shape.insert(i, 1)
        pre, ones = f".reshape({tuple(shape)!r})", [i]
    i = int(d.pick(ones))
    room = d.limits.elements // max(1, math.prod(shape))
    big = [b for b in BIG if b <= room]
    shape[i] = int(d.pick(big)) if big and d.chance(0.35) else d.size(room)
    text = "{a}" + pre + f".expand({tuple(shape)!r})" + (".contiguous()" if d.chance(0.5) else "")
    return _step(d, "expand", v, tuple(shape), text, distinct=v.distinct and shape[i] == 1)


def pad(d: Draw, v: Value) -> Step | None:
    axes = min(len(v.shape), int(d.rng.integers(1, 3)))
    flat = tuple(int(p) for p in d.rng.integers(0, 4, 2 * axes))
    shape = list(v.shape)
    for j in range(axes):
        shape[-1 - j] += flat[2 * j] + flat[2 * j + 1]
    return _step(d, "pad", v, tuple(shape), "{a}.pad(" + repr(flat) + ")", "F.pad({a}, " + repr(flat) + ")",
                 distinct=False)


def _random_slice(d: Draw, s: int, whole: float, steps: tuple[int, ...]) -> tuple[str, int]:
    """One axis of a basic index: `:` with probability `whole`, else start:stop[:step]; its text and length."""
    if d.chance(whole):
        return ":", s
    start = int(d.rng.integers(s))
    stop = int(d.rng.integers(start + 1, s + 1))
    step = int(d.pick(steps))
    return f"{start}:{stop}" + (f":{step}" if step > 1 else ""), len(range(start, stop, step))


def slicing(d: Draw, v: Value) -> Step | None:
    parts, shape = [], []
    for s in v.shape:
        if s > 1 and d.chance(0.15) and len(v.shape) > 1 and len(shape) + 1 < len(v.shape):
            parts.append(str(int(d.rng.integers(s))))  # an integer index drops the axis
            continue
        part, size = _random_slice(d, s, 0.4, (1, 1, 2, 3))
        parts.append(part)
        shape.append(size)
    return _step(d, "slice", v, tuple(shape) or (), "{a}[" + ", ".join(parts) + "]")


def flip(d: Draw, v: Value) -> Step | None:
    axes = tuple(sorted({int(a) for a in d.rng.integers(0, len(v.shape), int(d.rng.integers(1, 3)))}))
    return _step(d, "flip", v, v.shape, "{a}.flip(" + repr(axes) + ")")


REDUCE = {"sum": "{a}.sum({ax})", "mean": "{a}.mean({ax})", "max": "{a}.max({ax})", "var": "{a}.var({ax})",
          "std": "{a}.std({ax})", "logsumexp": "{a}.logsumexp({ax})"}
TORCH_REDUCE = {**REDUCE, "max": "{a}.amax({ax})"}  # torch's max(dim) also returns the indices


def reduce(d: Draw, v: Value) -> Step | None:
    names = ["sum", "max"] if v.kind == "i32" else sorted(REDUCE)
    if not v.distinct and v.grad:
        names = [n for n in names if n != "max"]
    name = str(d.pick(names))
    nd = len(v.shape)
    keep = d.chance(0.4)
    if nd == 0:
        return None
    if name in ("logsumexp",) or d.chance(0.6):
        axes: tuple[int, ...] = (int(d.rng.integers(nd)),)
    elif d.chance(0.5) and name != "logsumexp":
        axes = tuple(sorted({int(a) for a in d.rng.integers(0, nd, 2)}))
    else:
        axes = tuple(range(nd))
    if max(v.shape) >= BIG[0] and nd > 1 and d.chance(0.5):  # a tall value: its whole-tensor reductions split
        axes = tuple(range(nd))
    if name in ("var", "std") and math.prod(v.shape[a] for a in axes) < 2:
        return None
    if name == "logsumexp" and v.kind == "f16":
        return None
    full = axes == tuple(range(nd)) and not keep
    ax = "" if full and name != "logsumexp" else (str(axes[0]) if len(axes) == 1 else repr(axes))
    if name == "logsumexp" and full:
        ax = repr(axes) if len(axes) > 1 else str(axes[0])
    if ax and keep:
        ax += ", keepdim=True"
    shape = tuple(1 if i in axes else s for i, s in enumerate(v.shape)) if keep else \
        tuple(s for i, s in enumerate(v.shape) if i not in axes)
    text, ttext = REDUCE[name].replace("{ax}", ax), TORCH_REDUCE[name].replace("{ax}", ax)
    return _step(d, name, v, shape, text, ttext, distinct=name in ("sum", "mean", "var", "std", "logsumexp") and
                 v.kind != "i32" and v.distinct)


def matmul(d: Draw, v: Value) -> Step | None:
    if v.kind != "f32" or len(v.shape) > 3:
        return None
    k = v.shape[-1]
    m = int(d.pick(MATMUL))
    rows = math.prod(v.shape[:-1])
    if rows * k * m > d.limits.flops or rows * m > d.limits.elements:
        m = 1
        if rows * k > d.limits.flops:
            return None
    if d.chance(0.3):  # linear: tinygrad's weight layout (k, m) is torch's transposed
        w, b = d.input((k, m)), d.input((m,))
        return _step(d, "linear", v, (*v.shape[:-1], m), "{a}.linear(" + f"{w.name}, {b.name})",
                     "F.linear({a}, " + f"{w.name}.T, {b.name})", deps=(w.name, b.name), grad=True, distinct=True)
    w = d.input((k, m))
    if len(v.shape) == 2 and d.chance(0.3):  # v on the right: (n, rows) @ (rows, k)
        n = int(d.pick(MATMUL))
        if n * v.shape[0] * v.shape[1] > d.limits.flops:
            n = 1
        left = d.input((n, v.shape[0]))
        return _step(d, "matmul", v, (n, v.shape[1]), f"{left.name} @ " + "{a}", deps=(left.name,),
                     grad=v.grad or left.grad, distinct=True)
    return _step(d, "matmul", v, (*v.shape[:-1], m), "{a} @ " + w.name, deps=(w.name,), grad=v.grad or w.grad,
                 distinct=True)


def conv2d(d: Draw, v: Value) -> Step | None:
    if v.kind != "f32" or len(v.shape) != 4 or v.shape[1] > 64:
        return None
    b, c, h, wd = v.shape
    kh = int(d.pick((1, 3, 5)))
    stride, padding = int(d.pick((1, 2))), int(d.pick((0, 1, 2)))
    if h + 2 * padding < kh or wd + 2 * padding < kh:
        return None
    groups = int(d.pick([g for g in (1, 2, 4) if c % g == 0]))
    cout = groups * int(d.pick((1, 2, 3, 8)))
    oh, ow = (h + 2 * padding - kh) // stride + 1, (wd + 2 * padding - kh) // stride + 1
    if b * cout * oh * ow * (c // groups) * kh * kh > d.limits.flops:
        return None
    w = d.input((cout, c // groups, kh, kh))
    args = f"{w.name}, groups={groups}, stride={stride}, padding={padding}"
    return _step(d, "conv2d", v, (b, cout, oh, ow), "{a}.conv2d(" + args + ")", "F.conv2d({a}, " + args + ")",
                 deps=(w.name,), grad=True, distinct=True)


def gather(d: Draw, v: Value) -> Step | None:
    if not v.shape:
        return None
    dim = int(d.rng.integers(len(v.shape)))
    if d.chance(0.5):  # x[idx] along axis 0: duplicates accumulate in the gradient
        n = d.size(max(1, d.limits.elements // max(1, math.prod(v.shape[1:]))))
        idx = d.input((n,), "index", bound=v.shape[0])
        shape: Shape = (n, *v.shape[1:])
        return _step(d, "index", v, shape, "{a}[Tensor(" + idx.name + "_np)]",
                     "{a}[torch.from_numpy(" + idx.name + "_np)]", distinct=False)
    n = d.size(max(1, d.limits.elements // max(1, math.prod(v.shape) // v.shape[dim])))
    shape = tuple(n if i == dim else s for i, s in enumerate(v.shape))
    idx = d.input(shape, "index", bound=v.shape[dim])
    return _step(d, "gather", v, shape, "{a}.gather(" + f"{dim}, Tensor({idx.name}_np))",
                 "{a}.gather(" + f"{dim}, torch.from_numpy({idx.name}_np))", distinct=False)


def setitem(d: Draw, v: Value) -> Step | None:
    """o = a.clone(); o[view] = value (a strided slice, a broadcast value or a scalar), under autograd."""
    if not v.shape:
        return None
    parts, view = [], []
    for s in v.shape:
        part, size = _random_slice(d, s, 0.35, (1, 2, 3))
        parts.append(part)
        view.append(size)
    index = "[" + ", ".join(parts) + "]"
    if d.chance(0.25):
        val, deps, grad = ("3" if v.kind == "i32" else "0.5"), (), v.grad
    else:
        x = d.input(_bcast_shape(d, tuple(view)))
        val, deps, grad = x.name, (x.name,), v.grad or x.grad
    assign = d.chance(0.5)
    # Tensor.assign writes into memory, so its target must be realized (plygrad says so, as tinygrad needs it);
    # `o[view] = value` works on a lazy clone too
    realize = ".realize()" if assign or d.chance(0.5) else ""
    # assign takes a value of the view's own shape (tinygrad's rule; plygrad refuses to broadcast it, clearly), so the
    # program expands it first; `o[view] = value` broadcasts, as in torch
    pg_val = f"{val}.expand({tuple(view)!r})" if assign and deps else val
    pg_write = f"{{o}}{index}.assign({pg_val})" if assign else f"{{o}}{index} = {val}"
    return _step(d, "assign" if assign else "setitem", v, v.shape, "{a}.clone()" + realize + "; " + pg_write,
                 "{a}.clone(); {o}" + index + f" = {val}", deps=deps, grad=grad, distinct=False)


def softmax(d: Draw, v: Value) -> Step | None:
    if v.kind == "i32" or not v.shape:
        return None
    name = str(d.pick(("softmax", "log_softmax", "layernorm")))
    if name == "layernorm":
        if v.shape[-1] < 2:
            return None
        return _step(d, name, v, v.shape, "{a}.layernorm()", "F.layer_norm({a}, ({a}.shape[-1],))", distinct=False)
    axis = int(d.rng.integers(-len(v.shape), 0))
    return _step(d, name, v, v.shape, "{a}." + f"{name}({axis})", distinct=False)


def contiguous(d: Draw, v: Value) -> Step | None:
    return _step(d, "contiguous", v, v.shape, "{a}.contiguous()")


# name -> (rule, weight); a rule returns None where it does not apply to the value, and the generator draws again
OPS: dict[str, tuple[OpRule, float]] = {
    "unary": (unary, 2), "binary": (binary, 3), "reshape": (reshape, 1.5), "permute": (permute, 1.5),
    "expand": (expand, 1.5), "pad": (pad, 1), "slice": (slicing, 1.5), "flip": (flip, 0.7), "reduce": (reduce, 3),
    "matmul": (matmul, 2), "conv2d": (conv2d, 1), "gather": (gather, 1), "setitem": (setitem, 1.5),
    "softmax": (softmax, 1.5), "contiguous": (contiguous, 0.5)}


def generate(seed: int, limits: Limits = Limits()) -> Program:
    d = Draw(seed, limits)
    names = sorted(OPS)
    weights = np.array([OPS[n][1] for n in names])
    weights /= weights.sum()
    first = d.input_value(d.shape(4 if d.chance(0.1) else None))
    d.values.append(first)
    n_steps = int(d.rng.integers(2, 9))
    for _ in range(n_steps * 4):
        if len(d.program.steps) >= n_steps:
            break
        v = d.values[-1] if d.chance(0.6) else d.pick(d.values)
        if not v.shape:
            v = d.values[0]
        step = OPS[str(d.rng.choice(names, p=weights))][0](d, v)
        if step is not None:
            d.program.steps.append(step)
            d.values.append(step.out)
    outs = [d.values[-1].name]
    if len(d.values) > 2 and d.chance(0.3):
        outs.append(d.pick(d.values[1:-1]).name)
    d.program.outputs = [o for o in outs if o != first.name] or [first.name]
    if d.program.outputs == [first.name]:
        d.program.steps.append(_step(d, "contiguous", first, first.shape, "{a} + 0") or Step("", "", "", first, ()))
        d.program.outputs = [d.program.steps[-1].out.name]
    d.program.loss = str(d.pick(("sum", "mean", "weights", "weights")))  # drawn last: the steps a seed drew stay
    if d.chance(0.2):  # after the loss, so a seed's program stays the same with one output more
        tall_reduction(d)
    return d.program


def tall_reduction(d: Draw) -> None:
    """A reduction of a new tall input, (past 2^15, 2-4) either way round, as one more output: float16's 16-lane
    blocked reductions of such inputs read past their buffer (issue #32's half var) and few programs drew one."""
    small = int(d.pick((2, 3, 4)))
    pool = [s for s in BIG if s * small <= d.limits.elements]
    if not pool:
        return
    tall = int(d.pick(pool))
    x = d.input_value((tall, small) if d.chance(0.75) else (small, tall))
    step = reduce(d, x)
    if step is not None:
        d.program.steps.append(step)
        d.program.outputs.append(step.out.name)


# ---- running and comparing ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Failure:
    program: Program
    kind: str  # "error", "forward" or "gradient"
    detail: str

    def key(self) -> str:
        """What tells distinct failures apart: an error's type and message with its numbers blanked; a wrong value's
        kind and the ops of its (minimized) program."""
        if self.kind != "error":
            return f"{self.kind}: " + " ".join(self.program.ops())
        return "error: " + re.sub(r"\d+", "N", self.detail.splitlines()[0] if self.detail else "")[:160]

    def report(self) -> str:
        return f"FAIL [{self.kind}] {self.detail}\n{self.program.repro()}"


class Invalid(Exception):
    """torch refused the program: the generator made something that is not a valid user program."""


TOL = {"f32": (1e-4, 1e-4, 1e-3), "f16": (2e-2, 2e-2, 0.0), "i32": (0.0, 0.0, 0.0)}  # rtol, atol, gradient rtol


def _exec(program: Program, lib: str, data: dict[str, Any]) -> dict[str, Any]:
    ns = dict(data)
    if lib == "plygrad":
        from plygrad.frontend import Tensor, dtypes

        ns.update(Tensor=Tensor, dtypes=dtypes)
    else:
        import torch
        import torch.nn.functional as F

        ns.update(torch=torch, F=F)
    exec(program.source(lib), ns)  # the program is source on purpose: what runs is what a failure prints
    return ns


def _close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, what: str) -> str | None:
    if got.shape != want.shape:
        return f"{what}: shape {got.shape}, torch {want.shape}"
    if rtol == 0:
        if not np.array_equal(got.astype(np.int64), want.astype(np.int64)):
            return f"{what}: {int((got != want).sum())} of {got.size} elements differ"
        return None
    g, w = got.astype(np.float64), want.astype(np.float64)
    scale = max(1.0, float(np.abs(w).max())) if w.size else 1.0
    bad = ~np.isclose(g, w, rtol=rtol, atol=atol * scale, equal_nan=True)
    if bad.any():
        i = np.unravel_index(int(np.argmax(bad)), bad.shape)
        return (f"{what}: {int(bad.sum())} of {bad.size} elements differ (max abs diff "
                f"{float(np.nanmax(np.abs(g - w))):.3g}, scale {scale:.3g}); at {tuple(int(j) for j in i)} "
                f"{float(g[i]):.6g} vs torch {float(w[i]):.6g}")
    return None


def run(program: Program) -> Failure | None:
    """Run `program` through torch and plygrad; the first difference as a Failure, None if they agree."""


    data: dict[str, Any] = {"np": np}
    exec(program.prelude(), data)
    grads = program.grads()
    try:
        tns = _exec(program, "torch", data)
        t_out = [tns[o] for o in program.outputs]
        if grads:
            exec(program.backward("torch"), tns)
    except Exception as exc:
        raise Invalid(f"{type(exc).__name__}: {exc}") from exc
    if program.kind == "f32" and [t.requires_grad for t in t_out] != [program.value(o).grad for o in program.outputs]:
        raise Invalid("the generator's gradient flags differ from torch's requires_grad")
    rtol, atol, grtol = TOL[program.kind]
    stage = "forward"
    try:
        pns = _exec(program, "plygrad", data)
        p_out = [pns[o] for o in program.outputs]
        for name, p, t in zip(program.outputs, p_out, t_out, strict=True):
            if (problem := _close(p.numpy(), t.detach().numpy(), rtol, atol, f"output {name}")) is not None:
                return Failure(program, "forward", problem)
        if not grads:
            return None
        stage = "backward"
        exec(program.backward("plygrad"), pns)
        for x in program.inputs:
            if not x.grad or x.name not in tns:
                continue
            tg = tns[x.name].grad
            want = np.zeros(x.shape) if tg is None else tg.numpy()
            pg = pns[x.name].grad
            got = np.zeros(x.shape) if pg is None else pg.numpy()
            if (problem := _close(got, want, grtol, grtol, f"gradient of {x.name}")) is not None:
                return Failure(program, "gradient", problem)
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        message = str(exc).splitlines()[0][:300] if str(exc) else ""
        return Failure(program, "error", f"{type(exc).__name__} in {stage}: {message}"
                       f" (raised at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})")
    return None


def minimize(failure: Failure) -> Failure:
    """The shortest prefix of the program (one output, only the steps it needs) that still fails the same way."""
    program = failure.program
    for step in program.steps:
        if step.out.name in program.outputs and len(program.outputs) == 1:
            break
        candidate = program.with_output(step.out.name)
        try:
            found = run(candidate)
        except Invalid:
            continue
        if found is not None and found.kind == failure.kind:
            return found
    return failure


def fuzz(seeds: Iterable[int], limits: Limits = Limits(), log: Callable[[str], None] | None = None,
         reduce_failures: bool = True) -> tuple[list[Failure], int]:
    """Run the programs of `seeds` in this one process; the failures (minimized) and how many were invalid."""
    failures: list[Failure] = []
    invalid = 0
    for seed in seeds:
        program = generate(seed, limits)
        if log is not None:
            log(f"seed {seed}: {' '.join(s.op for s in program.steps)}")
        try:
            found = run(program)
        except Invalid as exc:
            invalid += 1
            if log is not None:
                log(f"  invalid: {exc}")
            continue
        if found is not None:
            failures.append(minimize(found) if reduce_failures else found)
            if log is not None:
                log(failures[-1].report())
    return failures, invalid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0, help="the first seed; programs use seed, seed+1, ...")
    parser.add_argument("--short", action="store_true", help="CI's small limits")
    args = parser.parse_args(argv)
    start = time.time()

    def log(line: str) -> None:
        print(line, flush=True)  # flushed: a crash still leaves the seed that caused it in the log

    failures, invalid = fuzz(range(args.seed, args.seed + args.programs), SHORT if args.short else Limits(), log)
    groups: dict[str, list[Failure]] = {}
    for f in failures:
        groups.setdefault(f.key(), []).append(f)
    print(f"\n{args.programs} programs, {invalid} invalid, {len(failures)} failed, {len(groups)} distinct, "
          f"{time.time() - start:.0f} s")
    for key, fs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"\n== {len(fs)}x {key}\n   seeds {[f.program.seed for f in fs][:20]}\n{fs[0].program.repro()}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
