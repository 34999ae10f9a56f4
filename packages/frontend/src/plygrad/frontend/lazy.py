"""`LazyTensor`: the state every Tensor carries (a TENSOR-stage UOp, a device, the Buffers it reads).

A tensor is a node of a lazy graph: nothing runs until `realize()`. The graph names runtime memory only by
`BufferRef` id and the runtime tracks Buffers weakly, so each tensor also holds strong references to the Buffers its
graph reads (`inputs`): a buffer lives exactly as long as some tensor can still read it.

`Tensor` (tensor.py) is this class plus the ops, which are functions in modules by idea (elementwise.py, conv.py,
...) bound as its methods; docs/frontend.md has the map.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any, Final, Self, TypeAlias, TypeGuard, cast

import numpy as np

from plygrad.frontend.modes import ModeFlags
from plygrad.frontend.realize_state import STATE
from plygrad.frontend.symbolic import has_sym, split_symbolic
from plygrad.ir import (
    AxisError,
    ConstType,
    DType,
    DTypeError,
    GroupOp,
    Ops,
    ShapeError,
    SizeTypeError,
    UOp,
    broadcast_shapes,
    dtypes,
    strip_reshapes,
    written_buffer,
)
from plygrad.runtime import BackendError, Buffer, Device, canonical_device
from plygrad.runtime.config import PLYGRAD_DEVICE

if TYPE_CHECKING:
    from plygrad.frontend.tensor import Tensor

Scalar: TypeAlias = bool | int | float


def default_device() -> str:
    """PLYGRAD_DEVICE if set (no backend is opened to answer), else the runtime's highest-priority backend."""
    chosen = PLYGRAD_DEVICE.get()
    return canonical_device(chosen) if chosen else Device.DEFAULT


def resolve_device(device: str | None) -> str:
    """The canonical name of `device` (None: the default). A device named explicitly is checked against the backends
    installed, so a misspelt one fails where the tensor is made instead of silently computing somewhere else. The
    default (PLYGRAD_DEVICE, or the best backend) is not: naming it opens nothing, so graphs can be built where no
    backend is installed, and realizing on a missing one raises the registry's BackendError with its cause."""
    default = default_device()
    name = default if device is None else canonical_device(device)
    if name == default:  # e.g. `zeros_like` passing the default on
        return name
    backends = Device.records()
    base = name.partition(":")[0]
    if base not in backends:
        found = ", ".join(backends) or "none (pip install plygrad-cpu, or another plygrad backend)"
        raise BackendError(f"device {device!r}: no backend named {base!r} is installed; backends found: {found}")
    return name


def placed(uop: UOp, device: str, inputs: frozenset[Buffer]) -> UOp:
    """`uop` as a tensor to realize on `device`: a graph computed from constants alone names no device (it reads no
    BUFFER and has no COPY), so it is marked with a COPY to `device`, which the scheduler computes there directly
    (docs/ir.md §4.4). Without the mark a scheduler cannot know where `Tensor.rand(4, device="NV")` belongs."""
    if inputs or any(n.op in (Ops.BUFFER, Ops.COPY) for n in uop.toposort):
        return uop
    return UOp(Ops.COPY, uop.dtype, (uop,), device)


def movement(x: UOp, op: Ops, arg: Any) -> UOp:
    """A movement node over `x` (same dtype); the IR checks the argument against x's shape. A symbolic size in
    `arg` (a UOp) becomes an extra source (symbolic.py)."""
    if op in _PAIRS:
        plain = _JUST_INT.issuperset(map(type, chain.from_iterable(arg)))  # C-level: movement is hot
    else:
        plain = op is Ops.FLIP or _JUST_INT.issuperset(map(type, arg))
    if not plain and has_sym(arg):
        flat, extra = split_symbolic(op, arg)
        return UOp(op, x.dtype, (x, *extra), flat)
    return UOp(op, x.dtype, (x,), arg)


_PAIRS: Final = frozenset({Ops.PAD, Ops.SHRINK})


_JUST_INT: Final = frozenset({int})


def shape_of(x: UOp) -> tuple[int, ...]:
    shape = x.shape
    if shape is None:
        raise ShapeError(f"{x.op.name} node has no tensor shape")
    return shape


def const_uop(dtype: DType, value: ConstType, shape: tuple[int, ...]) -> UOp:
    """A constant of `shape`: a CONST (shape ()) reshaped to all-ones and EXPANDed, the broadcast the IR spells out.
    Kept in `_CONSTS` by (dtype, type, value, shape) where the value is its own key (an int, a bool, a float other
    than a zero, whose sign == ignores, and NaN, which equals nothing): models repeat the same scalars (scales,
    epsilons) every call."""
    key = (dtype, type(value), value, shape)
    found = _CONSTS.get(key)
    if found is not None:
        return found
    node = UOp.const(dtype, value)
    if shape:
        node = movement(movement(node, Ops.RESHAPE, (1,) * len(shape)), Ops.EXPAND, shape)
    kind = type(value)
    if kind is int or kind is bool or (kind is float and not math.isnan(value) and value != 0.0):
        if len(_CONSTS) >= MAX_CONSTS_KEPT:
            _CONSTS.clear()
        _CONSTS[key] = node
    return node


# `const_uop`'s recent answers (held strongly: a few small nodes each). Emptied when full: a plain dict, so threads
# may share it without a lock.
MAX_CONSTS_KEPT: Final = 4096
_CONSTS: Final[dict[tuple[Any, ...], UOp]] = {}


def buffer_view(buf: Buffer, shape: tuple[int, ...]) -> UOp:
    """A tensor reading all of `buf` as `shape`: its BUFFER node RESHAPEd."""
    return movement(UOp(Ops.BUFFER, buf.dtype, (), buf.ref()), Ops.RESHAPE, shape)


def output_view(buf: Buffer, shape: tuple[int, ...]) -> UOp:
    """A realized tensor of `shape` in the buffer a schedule gave it: `buffer_view`, except that a buffer sized for a
    symbolic tensor's maxima holds a concrete view of that tensor as its first elements (a SHRINK first).

    The views of small buffers are kept (`_VIEWS`, by buffer id and shape): a plan hands the same small Buffer to
    the next run once its tensor died (runtime `ExecPlan.bind`), and the kept view is then the tensor's graph again,
    instead of two new nodes built, and dropped when the tensor dies, on every call. A buffer id is never reused,
    so a kept view only ever names its own buffer."""
    if _JUST_INT.issuperset(map(type, shape)):  # C-level: every realize makes one of these
        key = (buf.id, shape)
        found = _VIEWS.get(key)
        if found is not None:
            return found
        node = UOp(Ops.BUFFER, buf.dtype, (), buf.ref())
        if math.prod(shape) < buf.size:
            node = UOp(Ops.SHRINK, buf.dtype, (node,), ((0, math.prod(shape)),))
        node = UOp(Ops.RESHAPE, buf.dtype, (node,), shape)
        if buf.nbytes <= MAX_VIEW_BYTES:
            if len(_VIEWS) >= MAX_VIEWS_KEPT:
                _VIEWS.clear()
            _VIEWS[key] = node
        return node
    return buffer_view(buf, shape)


# `output_view`'s recent answers for buffers of at most MAX_VIEW_BYTES (a plan keeps its fresh buffers up to the
# runtime's SPARE_MAX_BYTES for the next run); a plain dict emptied when full, safe to share between threads
MAX_VIEWS_KEPT: Final = 1024
MAX_VIEW_BYTES: Final = 1 << 20
_VIEWS: Final[dict[tuple[int, tuple[int, ...]], UOp]] = {}


# Gradient stops: identity RESHAPEs made by `stop_gradient`. The frontend's movement ops never build an identity
# view (reshape to the same shape returns the tensor itself) and the scheduler strips them for free, so such a node
# costs nothing at run time while giving `detach()` and no_grad results a node of their own that autograd does not
# walk through. Kept weakly: a stop lives exactly as long as some graph holds it.
_STOPS: Final[weakref.WeakSet[UOp]] = weakref.WeakSet()


def stop_gradient(x: UOp) -> UOp:
    """`x` unchanged in value, but a node autograd does not differentiate through (see `is_gradient_stop`)."""
    node = movement(x, Ops.RESHAPE, shape_of(x))
    _STOPS.add(node)
    return node


def is_gradient_stop(node: UOp) -> bool:
    return node.op is Ops.RESHAPE and node in _STOPS


def broadcast_uop(x: UOp, shape: tuple[int, ...]) -> UOp:
    """`x` broadcast to `shape` (NumPy rules): RESHAPE to add leading axes, then EXPAND the size-1 ones."""
    have = shape_of(x)
    if have == shape:
        return x
    broadcast_shapes(have, shape)  # raises ShapeError naming both shapes when they do not broadcast
    if len(have) > len(shape):
        raise ShapeError(f"cannot broadcast shape {have} to the smaller rank shape {shape}")
    padded = (1,) * (len(shape) - len(have)) + have
    if any(h not in (1, n) for h, n in zip(padded, shape, strict=True)):
        raise ShapeError(f"cannot broadcast shape {have} to {shape}")
    if padded != have:
        x = movement(x, Ops.RESHAPE, padded)
    return movement(x, Ops.EXPAND, shape) if padded != shape else x


def is_tensor(obj: object) -> TypeGuard[Tensor]:
    """Whether `obj` is a Tensor: the op modules ask this without importing tensor.py, which imports them (every
    LazyTensor is made through Tensor, so the two are one test)."""
    return isinstance(obj, LazyTensor)


def _is_host_data(value: object) -> bool:
    """Data `Tensor()` takes that is not a tensor or a scalar (what `assign` converts; a plain bool, not a TypeGuard:
    `assign`'s annotation names only what its callers pass most)."""
    return isinstance(value, np.ndarray | list | tuple)


class LazyTensor(metaclass=ModeFlags):
    """The lazy graph node behind a Tensor; the ops are bound onto Tensor from their modules.

    Autograd state lives here too, so every op propagates it through `_new`: `requires_grad` (None: not
    decided, the default of new tensors; True: gradients flow to this tensor; False: they do not) and `grad` (filled
    by `backward()`).
    """

    __slots__ = ("__weakref__", "_requires_grad", "device", "grad", "inputs", "uop")

    uop: UOp
    device: str
    inputs: frozenset[Buffer]
    _requires_grad: bool | None
    grad: LazyTensor | None

    # `no_grad` and `training` are the calling thread's flags, class attributes through the metaclass (modes.py):
    # ops read them as `type(self).no_grad`, so `Tensor.no_grad = True` takes effect for this thread only

    @classmethod
    def _make(cls, uop: UOp, device: str, inputs: Iterable[Buffer] = (), requires_grad: bool | None = None) -> Self:
        obj = object.__new__(cls)
        obj.uop, obj.device, obj.inputs = uop, device, frozenset(inputs)
        obj._requires_grad, obj.grad = requires_grad, None
        if obj.inputs:
            STATE.add_reader(obj)
        return obj

    def _new(self, uop: UOp, *others: LazyTensor) -> Self:
        """A tensor computed from this one (and `others`): it keeps every Buffer they read alive, and requires grad
        when one of them does (unless `no_grad` is on, or the result is not floating point, like PyTorch)."""
        inputs = self.inputs.union(*(o.inputs for o in others)) if others else self.inputs
        uop, requires_grad = self._derived_grad(uop, self, *others)
        return self._make(uop, self.device, inputs, requires_grad)

    def _derived_grad(self, uop: UOp, *parents: LazyTensor) -> tuple[UOp, bool | None]:
        """The node and requires_grad of a result computed from `parents`: True when one of them requires grad,
        None (undecided, tinygrad's default) when none does but one that reads memory did not opt out (undecided
        realized tensors are what tinygrad-style backward() differentiates; a constant or random graph reads none),
        False otherwise. Under no_grad a floating-point result computed from tensors that could get a gradient is
        wrapped in a gradient stop: its graph still contains theirs, and autograd must not see through it when the
        result is later used beside them. A result that is not floating point (a comparison, argmax) follows the same
        rule, as in tinygrad: no gradient flows through it, but a float computed from it (sign, a mask cast to
        float, where's condition) still depends on the tensors that asked, and backward() gives those zeros, not a
        "constant" error. Its public `requires_grad` is False (PyTorch's)."""
        if len(parents) == 1:  # most ops: no generator
            single = parents[0]._requires_grad
            if not single and (single is not None or not parents[0].inputs):
                return uop, False
        elif not any(p._requires_grad or (p._requires_grad is None and p.inputs) for p in parents):
            return uop, False
        if type(self).no_grad:
            return (stop_gradient(uop) if uop.dtype.is_float else uop), False
        return uop, True if any(p._requires_grad for p in parents) else None

    # ---- autograd state -----------------------------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool | None:
        """True, False or None (undecided); False for a tensor that is not floating point, as in PyTorch (its
        `_requires_grad` still says whether it was computed from tensors that require grad: `_derived_grad`)."""
        return self._requires_grad if self.dtype.is_float else False

    @requires_grad.setter
    def requires_grad(self, value: bool | None) -> None:
        self._set_requires_grad(value)

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        """Make this tensor a leaf that gradients flow to (or stop them: False). Only floating-point tensors can
        require grad. A leaf needs a graph node of its own, so one that is not already a buffer is realized here
        (two `Tensor.zeros(3)` are one hash-consed graph node until then)."""
        self._set_requires_grad(requires_grad)
        return self

    def _set_requires_grad(self, value: bool | None) -> None:
        """Overridden by Tensor, which also makes the tensor a leaf with a node of its own."""
        self._requires_grad = value

    def assign(self, value: LazyTensor | Scalar) -> Self:
        """Write `value` into this tensor in place and return it (PyTorch's `copy_`, tinygrad's `assign`).

        When this tensor is a view of a Buffer (through any movement ops but EXPAND, possibly over a pending
        assign) the result is an ASSIGN node: realizing it writes into that memory, so every view of the buffer sees
        the new values (view_write.py says where a view with padding writes). A lazy tensor (a graph with no memory
        of its own) just takes `value`'s graph; a *view* of a lazy tensor cannot write into it and raises. `value`
        must have this tensor's dtype and device and broadcast to its shape; a Python scalar is broadcast. The write
        is recorded for autograd (gradients flow to `value` where it was written, and to the old contents elsewhere,
        through every later read of the buffer), except into a leaf that requires grad, which stays a leaf.
        """
        if _is_host_data(value):  # tinygrad's assign takes what Tensor() takes, as its dtype
            constructor: Any = type(self)
            value = constructor(value, dtype=self.dtype, device=self.device)
        if isinstance(value, LazyTensor):
            if value.device != self.device:
                raise ValueError(f"assign: the value is on {value.device} but the tensor is on {self.device}; move "
                                 "it with .to(device) first")
            if value.dtype is not self.dtype:
                raise DTypeError(f"assign: a {value.dtype.name} value into a {self.dtype.name} tensor; cast it "
                                 f"with .cast(dtypes.{self.dtype.name}) first")
            if value.shape != self.shape:
                try:
                    value = value._broadcast_to(self.shape)
                except ShapeError:
                    raise ShapeError(f"assign: a value of shape {value.shape} into a tensor of shape {self.shape}; "
                                     "it must broadcast to the tensor's shape") from None
        elif isinstance(value, (bool, int, float)):
            value = self._const(value)
        else:
            raise TypeError(f"assign: unsupported value type {type(value).__name__} (use a Tensor, a NumPy array, a "
                            "list or a Python scalar)")
        if value.uop is self.uop:
            return self
        from plygrad.frontend import view_write  # imports this module

        requires_grad: bool | None
        if self._is_grad_leaf():  # a leaf keeps its identity: the value's history does not flow into it
            new_uop, requires_grad = (stop_gradient(value.uop) if value._requires_grad else value.uop), True
        else:
            new_uop, requires_grad = self._derived_grad(value.uop, value)
            if self._requires_grad and not type(self).no_grad:  # overwritten, it still requires grad (PyTorch)
                requires_grad = True
            elif not requires_grad and self._requires_grad is None:
                requires_grad = None
        chain = view_write.view_chain(self.uop)
        if chain is not None and chain.base.op is Ops.ASSIGN:
            # a view of a tensor whose own write has not run: that write goes first (an ASSIGN cannot store
            # through another), then this one is a write into the buffer like any other
            from plygrad.frontend import realization  # imports this module

            realization.run_pending_writes(self)
            chain = view_write.view_chain(self.uop)
        if chain is None:
            if self.uop.op in GroupOp.Movement and not view_write.is_movement_of_constant(self.uop):
                raise RuntimeError(f"assign: this tensor (shape {self.shape}) is a view of a tensor that is not "
                                   "realized, so it has no memory to write into and the write would be lost; "
                                   "realize() the tensor it is a view of first, or write with `t[index] = value`")
            self.uop, self.inputs = new_uop, value.inputs
        else:
            version = self._record_write(chain, new_uop, value)  # may rebind this tensor's node too
            if version is not None:  # this tensor and the write's target read the version after the write
                base, node, _ = version
                chain = view_write.view_chain(chain.top.substitute({base: node, node.src[0].src[0]: node}))
                assert chain is not None
            above, target = view_write.split_writable(chain)
            if above:
                # a view with padding: the blend is written below it, now (this tensor stays that view, which reads
                # the written memory); running it here keeps the write in program order with those around it
                from plygrad.frontend import realization  # imports this module

                blended = view_write.blend(new_uop, above, target)
                writer = self._make(UOp(Ops.ASSIGN, self.dtype, (target, blended)), self.device,
                                    self.inputs | value.inputs)
                STATE.record_assign(written_buffer(target).arg.id, writer)
                if version is not None:
                    STATE.record_version(written_buffer(target).arg.id, writer, version[1],
                                         None if version[2] else version[1].src[0].src[0])
                realization.realize([cast("Tensor", writer)])
                self.uop = chain.top
            else:
                self.uop = UOp(Ops.ASSIGN, self.dtype, (target, new_uop))
                self.inputs = self.inputs | value.inputs
                STATE.record_assign(written_buffer(target).arg.id, self)
                if version is not None:
                    STATE.record_version(written_buffer(target).arg.id, self, version[1],
                                         None if version[2] else version[1].src[0].src[0])
                    if version[2]:  # autograd reads this write through the version's graph
                        from plygrad.frontend import autograd  # imports this module

                        autograd.WHOLE_WRITES[self.uop] = version[1]
        self._requires_grad = requires_grad
        return self

    def _record_write(self, chain: Any, value_uop: UOp, value: LazyTensor) -> tuple[UOp, UOp, bool] | None:
        """Overridden by Tensor: the node the written tensor is read through after this write (view_write.py)."""
        return None

    def _is_grad_leaf(self) -> bool:
        """Overridden by Tensor (autograd keeps the registry of leaves)."""
        return False

    # ---- properties -------------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        shape = self.uop.shape  # shape_of inlined: ops read shapes more than anything else
        if shape is None:
            raise ShapeError(f"{self.uop.op.name} node has no tensor shape")
        return shape

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def _axis(self, axis: int, op: str, ndim: int | None = None) -> int:
        """`axis` (negative counts from the end) as 0..ndim-1; AxisError (a ShapeError and an IndexError, as
        PyTorch's "Dimension out of range") naming `op` otherwise."""
        n = self.ndim if ndim is None else ndim
        low, high = (-n, n - 1) if n else (-1, 0)  # a 0-d tensor accepts axis 0 or -1, like PyTorch
        if type(axis) is not int:
            raise SizeTypeError(f"{op}: an axis must be an int, got {type(axis).__name__} {axis!r} (tensor of shape "
                                f"{self.shape})")
        if not low <= axis <= high:
            raise AxisError(f"{op}: axis {axis!r} is out of range for a tensor of shape {self.shape} "
                            f"(valid: {low}..{high})")
        return axis % n if n else 0

    def _axes(self, axis: int | Sequence[int] | None, op: str) -> tuple[int, ...]:
        """Normalized, sorted, distinct axes; None means every axis."""
        if axis is None:
            return tuple(range(self.ndim))
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        found = tuple(sorted({self._axis(a, op) for a in axes}))
        if len(found) != len(axes):
            raise ShapeError(f"{op}: axes {axes} of a tensor of shape {self.shape} repeat an axis")
        return found if self.ndim else ()

    def _const(self, value: Scalar, dtype: DType | None = None, shape: tuple[int, ...] | None = None) -> Self:
        """A constant tensor on this tensor's device."""
        dt = self.dtype if dtype is None else dtype
        return self._make(const_uop(dt, value, self.shape if shape is None else shape), self.device)

    def _broadcast_to(self, shape: tuple[int, ...]) -> Self:
        # the same shape is this tensor: every binary op broadcasts both operands, most of them to their own shape
        return self if shape == self.shape else self._new(broadcast_uop(self.uop, shape))

    def _cast_to(self, dtype: DType) -> Self:
        return self if dtype is self.dtype else self._new(UOp(Ops.CAST, dtype, (self.uop,)))

    def _is_realized(self) -> bool:
        """Is this tensor a plain view of one Buffer (nothing to compute)?"""
        return strip_reshapes(self.uop).op is Ops.BUFFER

    def contiguous(self) -> Self:
        """A tensor stored in its own buffer in row-major order (a fusion boundary for the scheduler)."""
        return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))


FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
