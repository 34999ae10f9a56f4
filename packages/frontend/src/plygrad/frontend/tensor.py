"""`Tensor`: creation, realization and reading results back, on top of the op layers.

`realize()` is the only place work happens: the graphs of the tensors are put under one SINK, serialized at the
TENSOR stage, handed to the scheduler plugin (bytes in, bytes out) and the schedule is run by plygrad.runtime. Each
realized tensor then points at its output Buffer (a BUFFER + RESHAPE node) and holds that Buffer alive.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from plygrad.frontend import (
    activations,
    attention,
    autograd,
    casts,
    compat,
    conv,
    creation,
    disk,
    elementwise,
    host,
    indexing,
    losses,
    movement,
    norm,
    pool,
    realization,
    reduce,
    resample,
    scan,
    scheduling,
    setitem,
    transcendental,
    view_write,
)
from plygrad.frontend import gather as gather_ops  # the modules named like one of their methods
from plygrad.frontend import linear as linear_ops
from plygrad.frontend import sort as sort_ops
from plygrad.frontend.lazy import (
    LazyTensor,
    Scalar,
    placed,
    resolve_device,
    stop_gradient,
)
from plygrad.frontend.modes import grad_mode, training_mode
from plygrad.frontend.randomness import draws, keyed
from plygrad.frontend.realize_state import STATE
from plygrad.frontend.symbolic import symbolic_text
from plygrad.ir import (
    DType,
    DTypeError,
    DTypeLike,
    Ops,
    ShapeError,
    UOp,
    written_buffer,
)
from plygrad.ir.shape import is_symbolic
from plygrad.runtime import Buffer

if TYPE_CHECKING:
    from plygrad.frontend.multi import MultiTensor


class Tensor(LazyTensor):
    """A lazy n-dimensional array. `Tensor([[1, 2], [3, 4]])`, `Tensor(np_array)`, `Tensor.rand(3, 4)`."""

    __slots__ = ()

    # `Tensor.no_grad` (no gradients recorded) and `Tensor.training` (dropout, batch norm) are per-thread flags that
    # read and assign like class attributes: see plygrad.frontend.modes and docs/threads.md
    grad: Tensor | None

    def __init__(self, data: host.Data | Tensor, dtype: DTypeLike | None = None, device: str | None = None,
                 requires_grad: bool | None = None) -> None:
        self._requires_grad, self.grad = None, None
        host.init_data(self, data, dtype, device)
        if requires_grad is not None:
            self.requires_grad_(requires_grad)

    @staticmethod
    def scheduler(name: str) -> AbstractContextManager[None]:
        """`with Tensor.scheduler("unfused"):` realizes with that `plygrad.schedulers` entry point in the block."""
        return scheduling.use_scheduler(name)

    # ---- running ----------------------------------------------------------------------------------------------
    def schedule(self, *others: Tensor) -> UOp:
        """The SCHEDULE-stage LINEAR that would realize this tensor (and `others`), without running it."""
        return scheduling.schedule_uop([placed(t.uop, t.device, t.inputs) for t in (self, *others)])

    def realize(self, *others: Tensor) -> Tensor:
        """Compute this tensor (and `others`) in one schedule; afterwards each reads its own output Buffer
        (realization.py)."""
        tensors = (self, *others)
        for t in tensors:
            if disk.is_disk(t.device):  # no schedule for those: a disk tensor is a view of its file (disk.py)
                for d in tensors:
                    if disk.is_disk(d.device):
                        disk.realize(d)
                tensors = tuple(d for d in tensors if not disk.is_disk(d.device))
                break
        if tensors:
            realization.realize(tensors)
        return self

    def assign(self, value: LazyTensor | Scalar) -> Tensor:
        """Write `value` into this tensor in place and return it (LazyTensor.assign; into a disk tensor the bytes
        go into its file at once, disk.py)."""
        if disk.is_disk(self.device):
            return disk.write(self, value)
        return super().assign(value)

    @overload
    def to(self, device: str) -> Tensor: ...
    @overload
    def to(self, device: tuple[str, ...] | list[str]) -> MultiTensor: ...

    def to(self, device: str | tuple[str, ...] | list[str]) -> Tensor | MultiTensor:
        """This tensor on `device` (a COPY when it is another device; to or from DISK, disk.py). A tuple of devices
        gives a MultiTensor holding a full copy on each (replicated, multi.py)."""
        if isinstance(device, (tuple, list)):
            return self.shard(tuple(device), None)
        target = resolve_device(device)
        if target == self.device:
            return self
        if disk.is_disk(target) or disk.is_disk(self.device):
            return disk.to_device(self, target)
        uop, requires_grad = self._derived_grad(UOp(Ops.COPY, self.dtype, (self.uop,), target), self)
        return Tensor._make(uop, target, self.inputs, requires_grad)

    def shard(self, devices: tuple[str, ...], axis: int | None = None) -> MultiTensor:
        """A MultiTensor (multi.py): this tensor split along `axis` over `devices` in pieces of ceil(size / n),
        the last one smaller (tinygrad's split), or copied whole to each device when axis is None."""
        from plygrad.frontend import multi  # imports this module

        return multi.shard(self, devices, axis)

    def shard_like(self, like: MultiTensor | Tensor) -> MultiTensor | Tensor:
        """This tensor laid out like `like`: a MultiTensor on its devices and axis, or a Tensor on its device."""
        from plygrad.frontend import multi  # imports this module

        return multi.shard_like(self, like)

    def _buffer(self) -> Buffer:
        if disk.is_disk(self.device):  # read through a copy: DISK computes nothing, not even a strided view
            return disk.to_device(self, disk.compute_device()).realize()._buffer()
        self.realize()
        if not self._is_realized():  # a view written by an assign stays a view: read it through a copy
            return self._make(self.uop, self.device, self.inputs).realize()._buffer()
        (buf,) = self.inputs
        return buf

    def numpy(self) -> np.ndarray[Any, Any]:
        """The values as a NumPy array (realizing first); bfloat16 and the fp8s come back as float32."""
        return host.to_numpy(self, self._buffer())

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Scalar:
        if self.numel() != 1:
            raise ShapeError(f"item() needs a tensor of exactly one element, got shape {self.shape}")
        value: Scalar = self.numpy().reshape(()).item()
        return value

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous; use .any()/.all() "
                             "or compare elements")
        return bool(self.item())

    def __iter__(self) -> Iterator[Tensor]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        state = "realized" if self._is_realized() else f"lazy {self.uop.op.name}"
        shape = str(self.shape) if not is_symbolic(self.shape) else symbolic_text(self.shape)
        return f"<Tensor shape={shape} dtype={self.dtype.name} device={self.device} {state}>"

    # ---- autograd -----------------------------------------------------------------------------------------------
    def _set_requires_grad(self, value: bool | None) -> None:
        if value and not self.dtype.is_float:
            raise DTypeError(f"requires_grad: only floating-point tensors can require gradients, got a "
                             f"{self.dtype.name} tensor of shape {self.shape}; cast it with .float() first")
        if not value and self.requires_grad and not autograd.is_leaf(self):
            raise RuntimeError("requires_grad: this tensor is computed from tensors that require grad, so it cannot "
                               "stop requiring it; use .detach() for a copy that does not")
        if not value:
            self._requires_grad = value
            autograd.LEAVES.pop(id(self), None)
            return
        if self._requires_grad:  # a leaf already, or computed from leaves (then it is no leaf, as in PyTorch)
            return
        if not self._is_realized():
            self.realize()
        self._requires_grad = True
        autograd.LEAVES[id(self)] = self

    def _is_grad_leaf(self) -> bool:
        return bool(self._requires_grad) and autograd.is_leaf(self)

    def _record_write(self, chain: Any, value_uop: UOp, value: LazyTensor) -> tuple[UOp, UOp, bool] | None:
        """The node the written tensor is read through after this write, made over the buffer's base view: with a
        graph for autograd when gradients are recorded and the value or the old contents need one
        (autograd.record_write), else plain. The tensors that are that base view read the new node from now on,
        and require grad when the value does (PyTorch: `o[1:2] = v` makes o require grad). Leaves keep their node
        (it is what gradients are asked for). Returns (base, new node, whether autograd recorded it), or None for a
        write of a whole tensor that autograd need not record (it becomes the ASSIGN itself: graphs built after it
        hold it)."""
        recorded = None
        if not type(self).no_grad and not self._is_grad_leaf():
            recorded = autograd.record_write(chain, value_uop, value.inputs, bool(value._requires_grad),
                                             bool(self._requires_grad))
        if recorded is not None:
            base, version = recorded
        else:
            found = view_write.base_view(chain, lambda n: STATE.is_version(n) or n in autograd.REALIZED)
            if found is None or not found[0]:  # a whole tensor written: it is the ASSIGN itself
                return None
            base = found[1]
            settled = STATE.settled_base(base)
            version = view_write.new_version(settled, base if settled is not base else None)
            history = autograd.REALIZED.get(base)
            if history is not None:  # a write autograd does not record (no_grad) leaves the graph as it was
                autograd.REALIZED[version] = history
        over = version.src[0].src[0]
        written = written_buffer(base).arg.id
        for t in (t for buf in self.inputs if buf.id == written for t in STATE.holders(buf)):
            if (t.uop is base or t.uop is over) and not (isinstance(t, Tensor) and autograd.is_leaf(t)):
                t.uop = version
                if recorded is not None and value._requires_grad:
                    t._requires_grad = True
        return base, version, recorded is not None

    @property
    def is_leaf(self) -> bool:
        """Like PyTorch: tensors that do not require grad, and those whose requires_grad the user set."""
        return not self.requires_grad or autograd.is_leaf(self)

    def detach(self) -> Tensor:
        """The same values, cut from the graph: no gradient flows through the result (it shares this tensor's
        memory when realized, like PyTorch's)."""
        uop = self.uop if self._requires_grad is False else stop_gradient(self.uop)
        return self._make(uop, self.device, self.inputs, False)

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """The gradients of this tensor with respect to `targets` (zeros for a target it does not depend on), as
        lazy tensors built from the graph (tinygrad's `gradient`, PyTorch's `torch.autograd.grad`). Without
        `gradient` this tensor must have one element. The results require grad when this tensor does, so a
        gradient can be differentiated again."""
        for t in targets:
            if not t.dtype.is_float:
                raise DTypeError(f"gradient: a gradient with respect to a {t.dtype.name} tensor (shape {t.shape}) is "
                                 "not defined; only floating-point tensors have gradients")
        root, inputs = autograd.unrealized(self.uop)
        seed, seed_inputs = self._seed(gradient)
        keys = {t: tuple(dict.fromkeys((t.uop, autograd.unrealized(t.uop)[0]))) for t in targets}
        grads = autograd.compute_gradient(root, seed, {k for ks in keys.values() for k in ks})
        all_inputs = self.inputs | inputs | seed_inputs
        requires_grad = None if self._requires_grad is None else bool(self._requires_grad)
        requires_grad = False if type(self).no_grad else requires_grad
        out: list[Tensor] = []
        for t in targets:
            found = [grads[k] for k in keys[t] if k in grads]
            if not found:
                out.append(t.zeros_like())
                continue
            uop = found[0] if len(found) == 1 else found[0].alu(Ops.ADD, found[1])
            out.append(Tensor._make(uop, t.device, all_inputs | t.inputs, requires_grad))
        return out

    def _seed(self, gradient: Tensor | None) -> tuple[UOp, frozenset[Buffer]]:
        if gradient is None:
            if self.numel() != 1:
                raise ShapeError(f"backward: a gradient can be implied only for a tensor of one element, got shape "
                                 f"{self.shape}; pass gradient= a tensor of that shape")
            if not self.dtype.is_float:
                raise DTypeError(f"backward of a {self.dtype.name} tensor: only floating-point tensors have gradients")
            return autograd.seed_gradient(self.dtype, self.shape), frozenset()
        if gradient.shape != self.shape:
            raise ShapeError(f"backward: gradient of shape {gradient.shape} for a tensor of shape {self.shape}; "
                             "they must match")
        return gradient.cast(self.dtype).uop, gradient.inputs

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Accumulate d self / d leaf into `.grad` of the leaves this tensor depends on (`.grad` adds up across
        calls until reset to None). Lazy: the gradients are graphs that run when realized (an optimizer step
        realizes them). Without `gradient` this tensor needs one element.

        Which leaves: when this tensor requires grad (some tensor on its path has requires_grad=True), exactly the
        leaves that asked, as in PyTorch (an input batch left undecided gets no gradient, so a training step does not
        compute one). When it is undecided (requires_grad None: nothing on its path asked, not everything opted
        out), every realized floating-point tensor on its path that is undecided too, as tinygrad's backward does
        (`x = Tensor([1., -2.]); (x * x).sum().backward(); x.grad`). A constant (nothing on its path can get a
        gradient) raises RuntimeError."""
        if self._requires_grad is False:
            raise RuntimeError(f"backward: this tensor (shape {self.shape}) is a constant for autograd: every tensor "
                               "it is computed from has requires_grad=False (or it was computed under no_grad, or it "
                               "is not floating point); it does not require grad")
        root, _ = autograd.unrealized(self.uop)
        nodes = set(root.sparents())
        # valuerefs() copies the table in one step: iterating it while another thread makes a leaf would raise
        if self._requires_grad:
            found = (ref() for ref in autograd.LEAVES.valuerefs())
            leaves = [t for t in found if isinstance(t, Tensor) and t._requires_grad and t.uop in nodes]
        else:
            once = {id(t): t for t in autograd.UNDECIDED.live()}.values()  # a tensor realized twice is listed twice
            leaves = [t for t in once if isinstance(t, Tensor) and t._requires_grad is None and t._is_realized()
                      and t.dtype.is_float and t.uop in nodes]
            if not leaves:
                raise RuntimeError(f"backward: this tensor (shape {self.shape}) does not require grad and no realized "
                                   "tensor it is computed from can get a gradient (it is computed from constants or "
                                   "unrealized tensors only); create the inputs with requires_grad=True")
        if not leaves:
            self._seed(gradient)  # the same argument errors as when there are leaves
            return self
        with no_grad():
            grads = self.gradient(*leaves, gradient=gradient)
            for t, g in zip(leaves, grads, strict=True):
                t.grad = g if t.grad is None else t.grad + g
        return self

    @staticmethod
    def train(mode: bool = True) -> AbstractContextManager[None]:
        """`with Tensor.train():` (or `@Tensor.train()`) sets this thread's Tensor.training inside the block."""
        return training_mode(mode)

    @staticmethod
    def test(mode: bool = True) -> AbstractContextManager[None]:
        """`with Tensor.test():` turns this thread's gradient recording off inside the block (no_grad = mode)."""
        return grad_mode(mode)

    # ---- in-place operators ---------------------------------------------------------------------------------------
    def _inplace(self, op: str, result: Tensor) -> Tensor:
        """PyTorch's in-place rules: the result keeps this tensor's shape and a dtype of at least its kind, and a
        leaf that requires grad cannot be changed in place while gradients are recorded."""
        if self._is_grad_leaf() and not type(self).no_grad:
            raise RuntimeError(f"{op}: a leaf tensor that requires grad (shape {self.shape}) cannot be changed in "
                               "place; do it under `with no_grad():`, or on a .detach()ed copy")
        if result.shape != self.shape:
            raise ShapeError(f"{op}: the result has shape {result.shape}, which does not fit in place into a tensor "
                             f"of shape {self.shape}")
        if _kind_rank(result.dtype) > _kind_rank(self.dtype):
            raise DTypeError(f"{op}: the result is {result.dtype.name}, which cannot be stored in place into a "
                             f"{self.dtype.name} tensor; cast the tensor first")
        return self.assign(result.cast(self.dtype))

    def __iadd__(self, x: Tensor | Scalar) -> Tensor: return self._inplace("+=", self.add(x))
    def __isub__(self, x: Tensor | Scalar) -> Tensor: return self._inplace("-=", self.sub(x))
    def __imul__(self, x: Tensor | Scalar) -> Tensor: return self._inplace("*=", self.mul(x))
    def __itruediv__(self, x: Tensor | Scalar) -> Tensor: return self._inplace("/=", self.div(x))
    def __ifloordiv__(self, x: Tensor | Scalar) -> Tensor: return self._inplace("//=", self.floordiv(x))
    def __imod__(self, x: Tensor | Scalar) -> Tensor: return self._inplace("%=", self.mod(x))
    def __ipow__(self, x: Tensor | Scalar) -> Tensor: return self._inplace("**=", self.pow(x))
    def __iand__(self, x: Tensor | Scalar) -> Tensor: return self._inplace("&=", self.bitwise_and(x))
    def __ior__(self, x: Tensor | Scalar) -> Tensor: return self._inplace("|=", self.bitwise_or(x))
    def __ixor__(self, x: Tensor | Scalar) -> Tensor: return self._inplace("^=", self.bitwise_xor(x))
    def __imatmul__(self, x: Tensor) -> Tensor: return self._inplace("@=", self.matmul(x))

    @property
    def max_shape(self) -> tuple[int, ...]:
        """tinygrad's shape with each symbolic size at its maximum. plygrad's tensor shapes are always ints (a
        TinyJit varies sizes by capturing again), so this is `shape`."""
        return self.shape

    @property
    def T(self) -> Tensor:  # noqa: N802 - NumPy's and PyTorch's spelling
        """The axes reversed (a matrix transposed)."""
        return self.permute(tuple(range(self.ndim))[::-1])

    # ---- operators ------------------------------------------------------------------------------------------
    def __matmul__(self, other: Tensor) -> Tensor:
        return self.matmul(other)
    def __rmatmul__(self, other: Tensor) -> Tensor:
        return other.matmul(self)
    def __add__(self, x: Tensor | Scalar) -> Tensor: return self.add(x)
    def __radd__(self, x: Tensor | Scalar) -> Tensor: return self.add(x, True)
    def __sub__(self, x: Tensor | Scalar) -> Tensor: return self.sub(x)
    def __rsub__(self, x: Tensor | Scalar) -> Tensor: return self.sub(x, True)
    def __mul__(self, x: Tensor | Scalar) -> Tensor: return self.mul(x)
    def __rmul__(self, x: Tensor | Scalar) -> Tensor: return self.mul(x, True)
    def __truediv__(self, x: Tensor | Scalar) -> Tensor: return self.div(x)
    def __rtruediv__(self, x: Tensor | Scalar) -> Tensor: return self.div(x, True)
    def __floordiv__(self, x: Tensor | Scalar) -> Tensor: return self.floordiv(x)
    def __rfloordiv__(self, x: Tensor | Scalar) -> Tensor: return self.floordiv(x, True)
    def __mod__(self, x: Tensor | Scalar) -> Tensor: return self.mod(x)
    def __rmod__(self, x: Tensor | Scalar) -> Tensor: return self.mod(x, True)
    def __pow__(self, x: Tensor | Scalar) -> Tensor: return self.pow(x)
    def __rpow__(self, x: Tensor | Scalar) -> Tensor: return self.pow(x, True)
    def __neg__(self) -> Tensor: return self.neg()
    def __abs__(self) -> Tensor: return self.abs()
    def __lt__(self, x: Tensor | Scalar) -> Tensor: return self.lt(x)
    def __gt__(self, x: Tensor | Scalar) -> Tensor: return self.gt(x)
    def __le__(self, x: Tensor | Scalar) -> Tensor: return self.le(x)
    def __ge__(self, x: Tensor | Scalar) -> Tensor: return self.ge(x)
    def __eq__(self, x: Tensor | Scalar) -> Tensor: return self.eq(x)  # type: ignore[override]
    def __ne__(self, x: Tensor | Scalar) -> Tensor: return self.ne(x)  # type: ignore[override]
    def __and__(self, x: Tensor | Scalar) -> Tensor: return self.bitwise_and(x)
    def __rand__(self, x: Tensor | Scalar) -> Tensor: return self.bitwise_and(x, True)
    def __or__(self, x: Tensor | Scalar) -> Tensor: return self.bitwise_or(x)
    def __ror__(self, x: Tensor | Scalar) -> Tensor: return self.bitwise_or(x, True)
    def __xor__(self, x: Tensor | Scalar) -> Tensor: return self.bitwise_xor(x)
    def __rxor__(self, x: Tensor | Scalar) -> Tensor: return self.bitwise_xor(x, True)
    def __lshift__(self, x: Tensor | int) -> Tensor: return self.lshift(x)
    def __rlshift__(self, x: Tensor | int) -> Tensor: return self.lshift(x, True)
    def __rshift__(self, x: Tensor | int) -> Tensor: return self.rshift(x)
    def __rrshift__(self, x: Tensor | int) -> Tensor: return self.rshift(x, True)
    def __invert__(self) -> Tensor: return self.bitwise_not()
    __getitem__, __setitem__ = indexing.getitem, setitem.setitem
    __hash__ = LazyTensor.__hash__  # tensors stay usable in sets and dicts (by identity) despite __eq__

    # ---- the ops, bound as methods from the modules of their idea -------------------------------------------
    # elementwise.py
    div, fmod, add, sub, mul = elementwise.div, elementwise.fmod, elementwise.add, elementwise.sub, elementwise.mul
    floordiv, mod, pow = elementwise.floordiv, elementwise.mod, elementwise.pow
    round_half_away, neg, maximum = elementwise.round_half_away, elementwise.neg, elementwise.maximum
    minimum, where, lt, gt, le = elementwise.minimum, elementwise.where, elementwise.lt, elementwise.gt, elementwise.le
    ge, eq, ne, logical_and = elementwise.ge, elementwise.eq, elementwise.ne, elementwise.logical_and
    logical_or, logical_not, bitwise_and = elementwise.logical_or, elementwise.logical_not, elementwise.bitwise_and
    bitwise_or, bitwise_xor, bitwise_not = elementwise.bitwise_or, elementwise.bitwise_xor, elementwise.bitwise_not
    lshift, rshift, bitcast = elementwise.lshift, elementwise.rshift, elementwise.bitcast
    reciprocal, trunc, floor, ceil = elementwise.reciprocal, elementwise.trunc, elementwise.floor, elementwise.ceil
    round, abs, sign, copysign = elementwise.round, elementwise.abs, elementwise.sign, elementwise.copysign
    lerp, clamp, clip, isnan = elementwise.lerp, elementwise.clamp, elementwise.clip, elementwise.isnan
    isinf, isfinite, isclose, square = elementwise.isinf, elementwise.isfinite, elementwise.isclose, elementwise.square
    cast, allclose = elementwise.cast, elementwise.allclose
    # transcendental.py
    exp, exp2, expm1, log = transcendental.exp, transcendental.exp2, transcendental.expm1, transcendental.log
    log2, log10, log1p, sqrt = transcendental.log2, transcendental.log10, transcendental.log1p, transcendental.sqrt
    rsqrt, logaddexp, sin, cos = transcendental.rsqrt, transcendental.logaddexp, transcendental.sin, transcendental.cos
    tan, atan, asin, acos = transcendental.tan, transcendental.atan, transcendental.asin, transcendental.acos
    atan2, sinh, cosh, tanh = transcendental.atan2, transcendental.sinh, transcendental.cosh, transcendental.tanh
    asinh, acosh, atanh, erf = transcendental.asinh, transcendental.acosh, transcendental.atanh, transcendental.erf
    # activations.py
    hardtanh, relu6, leaky_relu, elu = activations.hardtanh, activations.relu6, activations.leaky_relu, activations.elu
    celu, selu, gelu, quick_gelu = activations.celu, activations.selu, activations.gelu, activations.quick_gelu
    hardsigmoid, hardswish, silu = activations.hardsigmoid, activations.hardswish, activations.silu
    swish, softplus, mish, softsign = activations.swish, activations.softplus, activations.mish, activations.softsign
    logsigmoid, softmin = activations.logsigmoid, activations.softmin
    relu, sigmoid = activations.relu, activations.sigmoid
    # movement.py
    reshape, view, permute, expand = movement.reshape, movement.view, movement.permute, movement.expand
    pad, shrink, flip, transpose = movement.pad, movement.shrink, movement.flip, movement.transpose
    flatten, squeeze, unsqueeze, unflatten = movement.flatten, movement.squeeze, movement.unsqueeze, movement.unflatten
    repeat, repeat_interleave, roll, cat = movement.repeat, movement.repeat_interleave, movement.roll, movement.cat
    stack, split, chunk, meshgrid = movement.stack, movement.split, movement.chunk, movement.meshgrid
    diag, diagonal, pad_to, shrink_to = movement.diag, movement.diagonal, movement.pad_to, movement.shrink_to
    # reduce.py
    var, std, var_mean, std_mean, logsumexp = reduce.var, reduce.std, reduce.var_mean, reduce.std_mean, reduce.logsumexp
    any, all, argmax, argmin, sum, prod = reduce.any, reduce.all, reduce.argmax, reduce.argmin, reduce.sum, reduce.prod
    max, min, mean, softmax, log_softmax = reduce.max, reduce.min, reduce.mean, reduce.softmax, reduce.log_softmax
    # scan.py
    cumsum, cumprod, cummax, cummin = scan.cumsum, scan.cumprod, scan.cummax, scan.cummin
    logcumsumexp = scan.logcumsumexp
    # sort.py
    sort, argsort, topk = sort_ops.sort, sort_ops.argsort, sort_ops.topk
    # linear.py
    linear, einsum, matmul, dot = linear_ops.linear, staticmethod(linear_ops.einsum), linear_ops.matmul, linear_ops.dot
    # gather.py
    masked_select, gather, take_along_dim = gather_ops.masked_select, gather_ops.gather, gather_ops.take_along_dim
    index_select, scatter, scatter_reduce = gather_ops.index_select, gather_ops.scatter, gather_ops.scatter_reduce
    masked_fill, nonzero, one_hot = gather_ops.masked_fill, gather_ops.nonzero, gather_ops.one_hot
    # creation.py
    full, zeros, ones = classmethod(creation.full), classmethod(creation.zeros), classmethod(creation.ones)
    empty, arange, linspace = classmethod(creation.empty), classmethod(creation.arange), classmethod(creation.linspace)
    eye, full_like, zeros_like = classmethod(creation.eye), creation.full_like, creation.zeros_like
    ones_like, empty_like, triu, tril = creation.ones_like, creation.empty_like, creation.triu, creation.tril
    # randomness/draws.py
    rand_like, randn_like = draws.rand_like, draws.randn_like
    manual_seed, rand = staticmethod(draws.manual_seed), classmethod(draws.rand)
    randn, randint = classmethod(draws.randn), classmethod(draws.randint)
    uniform, normal = classmethod(draws.uniform), classmethod(draws.normal)
    scaled_uniform, glorot_uniform = classmethod(draws.scaled_uniform), classmethod(draws.glorot_uniform)
    kaiming_uniform, kaiming_normal = classmethod(draws.kaiming_uniform), classmethod(draws.kaiming_normal)
    randperm, multinomial, dropout = classmethod(draws.randperm), draws.multinomial, draws.dropout
    # conv.py
    conv2d, conv1d, conv3d, conv_transpose2d = conv.conv2d, conv.conv1d, conv.conv3d, conv.conv_transpose2d
    conv_transpose1d = conv.conv_transpose1d
    # pool.py
    max_unpool2d, max_pool2d, max_pool1d = pool.max_unpool2d, pool.max_pool2d, pool.max_pool1d
    avg_pool2d, avg_pool1d, unfold = pool.avg_pool2d, pool.avg_pool1d, pool.unfold
    # resample.py
    interpolate = resample.interpolate
    # norm.py
    normalize, layernorm, batchnorm = norm.normalize, norm.layernorm, norm.batchnorm
    # attention.py
    scaled_dot_product_attention = attention.scaled_dot_product_attention
    # losses.py
    cross_entropy, nll_loss = losses.cross_entropy, losses.nll_loss
    sparse_categorical_crossentropy = losses.sparse_categorical_crossentropy
    binary_crossentropy, binary_crossentropy_logits = losses.binary_crossentropy, losses.binary_crossentropy_logits
    # casts.py
    float, half, double, bfloat16, int = casts.float, casts.half, casts.double, casts.bfloat16, casts.int
    long, short, bool = casts.long, casts.short, casts.bool
    # compat.py
    size, element_size, nbytes = compat.size, compat.element_size, compat.nbytes
    is_floating_point = compat.is_floating_point
    rearrange, qr, svd = compat.rearrange, compat.qr, compat.svd
    newton_schulz, sequential, const_like = compat.newton_schulz, compat.sequential, compat.const_like
    data, clone, replace = compat.data, compat.clone, compat.replace
    random_bits = classmethod(keyed.random_bits)  # randomness/keyed.py
    to_, from_blob, from_url = compat.to_, classmethod(compat.from_blob), staticmethod(compat.from_url)
    const, ufix, usum, uprod = staticmethod(compat.const), compat.ufix, compat.usum, compat.uprod
    threefry, contiguous_backward, max_numel = compat.threefry, compat.contiguous_backward, compat.max_numel
    schedule_linear = compat.schedule_linear


def _kind_rank(dtype: DType) -> int:
    """bool < integers < floats: an in-place result may not move up this order (PyTorch's can_cast)."""
    return 0 if dtype.is_bool else 2 if dtype.is_float else 1


def no_grad() -> AbstractContextManager[None]:
    """`with no_grad():` (or `@no_grad()`): results computed inside record no gradient, like torch.no_grad (for the
    calling thread only, as in PyTorch)."""
    return grad_mode(True)


def enable_grad() -> AbstractContextManager[None]:
    """`with enable_grad():` records gradients again inside a no_grad block, like torch.enable_grad."""
    return grad_mode(False)
