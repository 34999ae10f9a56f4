"""`Tensor`: creation, realization and reading results back, on top of the op layers.

`realize()` is the only place work happens: the graphs of the tensors are put under one SINK, serialized at the
TENSOR stage, handed to the scheduler plugin (bytes in, bytes out) and the schedule is run by plygrad.runtime. Each
realized tensor then points at its output Buffer (a BUFFER + RESHAPE node) and holds that Buffer alive.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Self, TypeAlias

import numpy as np

from plygrad.frontend import autograd, scheduling
from plygrad.frontend.compat import CompatOps
from plygrad.frontend.host_fp8 import fp8_bytes, fp8_values, is_fp8
from plygrad.frontend.lazy import (
    DONE_ASSIGNS,
    PENDING_ASSIGNS,
    READERS,
    READERS_LOCK,
    Scalar,
    buffer_view,
    placed,
    resolve_device,
    stop_gradient,
)
from plygrad.frontend.modes import grad_mode, training_mode
from plygrad.ir import (
    DType,
    DTypeError,
    DTypeLike,
    Ops,
    ShapeError,
    UOp,
    dtypes,
    strip_reshapes,
    to_dtype,
    written_buffer,
)
from plygrad.runtime import Buffer

Data: TypeAlias = "Scalar | bytes | Sequence[Any] | np.ndarray[Any, Any]"


def _numpy_dtype(dtype: DType) -> np.dtype[Any]:
    """The NumPy dtype holding `dtype`'s bytes (bfloat16 and the fp8s, which NumPy lacks, travel as their bits)."""
    if is_fp8(dtype):
        return np.dtype(np.uint8)
    return np.dtype(np.uint16) if dtype is dtypes.bfloat16 else np.dtype(dtype.numpy_name)


def _plygrad_dtype(array: np.ndarray[Any, Any]) -> DType:
    try:
        return dtypes.from_numpy_name(str(array.dtype))
    except KeyError:
        raise DTypeError(f"NumPy dtype {array.dtype} has no plygrad dtype; convert the array first "
                         f"(plygrad dtypes: {', '.join(d.name for d in dtypes.all())})") from None


def _to_bfloat16_bits(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """float32 values rounded to nearest-even bfloat16, as uint16 bit patterns."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(array, dtype=np.float32))
    return np.where(nan, 0x7FC0, rounded).astype(np.uint16)


def _fits(array: np.ndarray[Any, Any], dtype: DType) -> bool:
    return array.size == 0 or (dtype.min <= int(array.min()) and int(array.max()) <= dtype.max)


class Tensor(CompatOps):
    """A lazy n-dimensional array. `Tensor([[1, 2], [3, 4]])`, `Tensor(np_array)`, `Tensor.rand(3, 4)`."""

    __slots__ = ()

    # `Tensor.no_grad` (no gradients recorded) and `Tensor.training` (dropout, batch norm) are per-thread flags that
    # read and assign like class attributes: see plygrad.frontend.modes and docs/threads.md
    grad: Tensor | None

    def __init__(self, data: Data | Tensor, dtype: DTypeLike | None = None, device: str | None = None,
                 requires_grad: bool | None = None) -> None:
        self._requires_grad, self.grad = None, None
        self._init_data(data, dtype, device)
        if requires_grad is not None:
            self.requires_grad_(requires_grad)

    def _init_data(self, data: Data | Tensor, dtype_like: DTypeLike | None, device: str | None) -> None:
        dtype = None if dtype_like is None else to_dtype(dtype_like)  # a name fails here, at the call
        if isinstance(data, Tensor):
            moved = data.to(device) if device is not None else data
            moved = moved.cast(dtype) if dtype is not None else moved
            self.uop, self.device, self.inputs = moved.uop, moved.device, moved.inputs
            return
        self.device = resolve_device(device)
        if isinstance(data, (bytes, bytearray, memoryview)):
            self._init_bytes(bytes(data), dtype or dtypes.uint8)
            return
        if isinstance(data, np.ndarray) and data.dtype.kind == "S":  # fixed-size byte strings: their bytes, as uint8
            data = np.ascontiguousarray(data).view(np.uint8).reshape(*data.shape, data.dtype.itemsize)
        if isinstance(data, (bool, int, float)):
            self.uop, self.inputs = UOp.const(dtypes.from_py(data) if dtype is None else dtype, data), frozenset()
            return
        array = data if isinstance(data, np.ndarray) else np.array(data)
        # Python lists follow PyTorch's defaults, not NumPy's 64-bit ones; with a dtype given they go straight to it
        # (through the defaults first, -2**63 as int64 or 1e19 as float64 would arrive wrong)
        if not isinstance(data, np.ndarray) and dtype is None:
            if array.dtype.kind == "f":
                array = array.astype(_numpy_dtype(dtypes.default_float))
            elif array.dtype.kind in "iu" and _fits(array, dtypes.default_int):  # else int64, never wrapped
                array = array.astype(_numpy_dtype(dtypes.default_int))
        dt = _plygrad_dtype(array) if dtype is None else dtype
        if is_fp8(dt):
            host = fp8_bytes(array, dt)
        else:
            host = _to_bfloat16_bits(array) if dt is dtypes.bfloat16 else array.astype(_numpy_dtype(dt), copy=False)
        buf = Buffer(self.device, int(array.size), dt)
        scheduling.stage_host_data(buf, np.ascontiguousarray(host).tobytes())
        self.uop, self.inputs = buffer_view(buf, tuple(array.shape)), frozenset((buf,))
        autograd.record_undecided(self)

    def _init_bytes(self, raw: bytes, dtype: DType) -> None:
        """Raw bytes as a 1-d tensor, reinterpreted as `dtype` (uint8 by default), as tinygrad's `Tensor(bytes)`."""
        if len(raw) % dtype.itemsize:
            raise ValueError(f"Tensor(bytes): {len(raw)} bytes are not a whole number of {dtype.name} elements "
                             f"({dtype.itemsize} bytes each); pass dtype=dtypes.uint8 or trim the data")
        buf = Buffer(self.device, len(raw) // dtype.itemsize, dtype)
        scheduling.stage_host_data(buf, raw)
        self.uop, self.inputs = buffer_view(buf, (buf.size,)), frozenset((buf,))
        autograd.record_undecided(self)

    @staticmethod
    def scheduler(name: str) -> AbstractContextManager[None]:
        """`with Tensor.scheduler("unfused"):` realizes with that `plygrad.schedulers` entry point in the block."""
        return scheduling.use_scheduler(name)

    # ---- running ----------------------------------------------------------------------------------------------
    def schedule(self, *others: Tensor) -> UOp:
        """The SCHEDULE-stage LINEAR that would realize this tensor (and `others`), without running it."""
        return scheduling.schedule_uop([placed(t.uop, t.device, t.inputs) for t in (self, *others)])

    def realize(self, *others: Tensor) -> Self:
        """Compute this tensor (and `others`) in one schedule; afterwards each reads its own output Buffer."""
        tensors: tuple[Tensor, ...] = (self, *others)
        _run_pending_assigns(tensors)
        if DONE_ASSIGNS:
            for t in tensors:
                _drop_done_assigns(t)
        pending = [t for t in tensors if not t._is_realized()]
        computed = [t for t in pending if t.numel() > 0]
        computed += _old_value_readers(computed)
        for t in pending:
            if t.numel() == 0:  # nothing to compute: an empty buffer of the right dtype
                t._point_at(Buffer(t.device, 0, t.dtype))
        if computed:
            inputs = sorted(frozenset[Buffer]().union(*(t.inputs for t in computed)), key=lambda b: b.id)
            outputs = scheduling.run([placed(t.uop, t.device, t.inputs) for t in computed], inputs)
            claimed: set[int] = set()
            for t, out in zip(computed, outputs, strict=True):
                own = out
                if out.id in claimed and strip_reshapes(t.uop).op is not Ops.ASSIGN:
                    # identical graphs are one hash-consed node, computed once; separate tensors still get
                    # separate memory, or an assign into one would change the other
                    own = Buffer(out.device, out.size, out.dtype).copyin(out.copyout())
                claimed.add(own.id)
                t._point_at(own)
        scheduling.flush_host_data(sorted(frozenset[Buffer]().union(*(t.inputs for t in tensors)), key=lambda b: b.id))
        return self

    def _point_at(self, buf: Buffer) -> None:
        """Read the realized values from `buf` from now on. A pending ASSIGN becomes its target view (the write is
        done, and the target may be a view of part of `buf`). A tensor that requires grad (and is not a leaf) leaves
        its graph with autograd, which differentiates through it (`loss.item(); loss.backward()`)."""
        graph, inputs = self.uop, self.inputs
        base = strip_reshapes(self.uop)
        if base.op is Ops.ASSIGN:
            DONE_ASSIGNS[base] = base.src[0]
            waiting = PENDING_ASSIGNS.get(written_buffer(base.src[0]).arg.id, [])
            waiting[:] = [t for t in waiting if t is not self]
            self.uop = self.uop.substitute({base: base.src[0]})
        else:
            self.uop = buffer_view(buf, self.shape)
            if self._requires_grad and not autograd.is_leaf(self):
                autograd.record_realized(self.uop, graph, inputs)
            autograd.record_undecided(self)  # a realized undecided tensor is a leaf for tinygrad-style backward()
        self.inputs = frozenset((buf,))

    def to(self, device: str) -> Tensor:
        """This tensor on `device` (a COPY when it is another device)."""
        target = resolve_device(device)
        if target == self.device:
            return self
        uop, requires_grad = self._derived_grad(UOp(Ops.COPY, self.dtype, (self.uop,), target), self)
        return Tensor._make(uop, target, self.inputs, requires_grad)

    def _buffer(self) -> Buffer:
        self.realize()
        if not self._is_realized():  # a view written by an assign stays a view: read it through a copy
            return self._make(self.uop, self.device, self.inputs).realize()._buffer()
        (buf,) = self.inputs
        return buf

    def numpy(self) -> np.ndarray[Any, Any]:
        """The values as a NumPy array (realizing first); bfloat16 and the fp8s come back as float32."""
        buf = self._buffer()
        array = np.frombuffer(buf.copyout(), dtype=_numpy_dtype(self.dtype)).reshape(self.shape)
        if self.dtype is dtypes.bfloat16:
            return (array.astype(np.uint32) << 16).view(np.float32)
        if is_fp8(self.dtype):
            return fp8_values(array, self.dtype)
        return array.copy()

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
        return f"<Tensor shape={self.shape} dtype={self.dtype.name} device={self.device} {state}>"

    # ---- autograd -----------------------------------------------------------------------------------------------
    def _set_requires_grad(self, value: bool | None) -> None:
        if value and not self.dtype.is_float:
            raise DTypeError(f"requires_grad: only floating-point tensors can require gradients, got a "
                             f"{self.dtype.name} tensor of shape {self.shape}; cast it with .float() first")
        if not value and self._requires_grad and not autograd.is_leaf(self):
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

    @property
    def is_leaf(self) -> bool:
        """Like PyTorch: tensors that do not require grad, and those whose requires_grad the user set."""
        return not self._requires_grad or autograd.is_leaf(self)

    def detach(self) -> Self:
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

    def backward(self, gradient: Tensor | None = None) -> Self:
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
            found = (ref() for ref in autograd.UNDECIDED.valuerefs())
            leaves = [t for t in found if isinstance(t, Tensor) and t._requires_grad is None and t._is_realized()
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
    def _inplace(self, op: str, result: Self) -> Self:
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

    def __iadd__(self, x: Self | Scalar) -> Self: return self._inplace("+=", self.add(x))
    def __isub__(self, x: Self | Scalar) -> Self: return self._inplace("-=", self.sub(x))
    def __imul__(self, x: Self | Scalar) -> Self: return self._inplace("*=", self.mul(x))
    def __itruediv__(self, x: Self | Scalar) -> Self: return self._inplace("/=", self.div(x))
    def __ifloordiv__(self, x: Self | Scalar) -> Self: return self._inplace("//=", self.floordiv(x))
    def __imod__(self, x: Self | Scalar) -> Self: return self._inplace("%=", self.mod(x))
    def __ipow__(self, x: Self | Scalar) -> Self: return self._inplace("**=", self.pow(x))
    def __iand__(self, x: Self | Scalar) -> Self: return self._inplace("&=", self.bitwise_and(x))
    def __ior__(self, x: Self | Scalar) -> Self: return self._inplace("|=", self.bitwise_or(x))
    def __ixor__(self, x: Self | Scalar) -> Self: return self._inplace("^=", self.bitwise_xor(x))
    def __imatmul__(self, x: Self) -> Self: return self._inplace("@=", self.matmul(x))


def _run_pending_assigns(tensors: Sequence[Tensor]) -> None:
    """Run the pending assigns into buffers these tensors read (other than their own), so that they read the
    written values, each write once."""
    ids = {buf.id for t in tensors for buf in t.inputs}
    todo: list[Tensor] = []
    for buf_id in sorted(ids & PENDING_ASSIGNS.keys()):
        waiting = PENDING_ASSIGNS.pop(buf_id)
        todo.extend(t for t in waiting if isinstance(t, Tensor) and not any(t is u for u in (*tensors, *todo)))
    for t in todo:  # one at a time: two writes into one buffer must run in the order they were made
        t.realize()


def _old_value_readers(computed: Sequence[Tensor]) -> list[Tensor]:
    """The live unrealized tensors that read, raw, a buffer one of `computed` assigns into (lazy.READERS): computed
    in the same schedule, before the write, they keep the values they were built from."""
    written = {written_buffer(base.src[0]).arg.id for base in (strip_reshapes(t.uop) for t in computed)
               if base.op is Ops.ASSIGN}
    if not written:
        return []
    found: list[Tensor] = []
    with READERS_LOCK:
        readers = list(READERS)
    for reader in readers:
        if (not isinstance(reader, Tensor) or any(reader is t for t in computed) or reader._is_realized()
                or reader.numel() == 0 or not any(buf.id in written for buf in reader.inputs)):
            continue
        # a graph that contains an ASSIGN into the buffer reads the written values: it runs after the write
        if any(node.op is Ops.ASSIGN and written_buffer(node.src[0]).arg.id in written
               for node in reader.uop.sparents()):
            continue
        found.append(reader)
    return found


def _drop_done_assigns(t: Tensor) -> None:
    """Replace ASSIGN nodes already run by their target views in t's graph."""
    done = {node: DONE_ASSIGNS[node] for node in t.uop.sparents() if node.op is Ops.ASSIGN and node in DONE_ASSIGNS}
    if done:
        t.uop = t.uop.substitute(done)


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
