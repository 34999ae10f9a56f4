"""Schedules that would run outside their buffers are refused before launch, on the real CPU backend.

- A LINEAR whose loop is larger than its buffer used to pass verification and segfault; now it raises
  IndexBoundsError (run in a child process, so a regression crashes the child, not the test run).
- A scheduler plugin that emits such a schedule is named in the error the frontend raises.
- Fuzzing: random affine kernels (loop sizes, strides, offsets, gates, buffer sizes) are refused exactly when
  brute-force enumeration finds an index outside the buffer, and the others give NumPy's result; random chains of
  movement ops through the real scheduler (PAD, SHRINK, FLIP, RESHAPE, PERMUTE, EXPAND; drawn by
  `plygrad.scheduler.random_graphs.random_view_chain`, the scheduler conformance suite's generator) are never
  refused, give NumPy's result, and every gated access's proved range holds every index it really touches.
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import random
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plygrad.frontend import Tensor
from plygrad.frontend.scheduling import SCHEDULERS, find_scheduler
from plygrad.ir import AxisType, KernelInfo, Ops, Stage, UOp, deserialize, dtypes, evaluate, serialize
from plygrad.ir.evaluate import env_key
from plygrad.runtime import Buffer, IndexBoundsError, run_linear
from plygrad.runtime.bounds import index_bounds, kernel_accesses
from plygrad.runtime.discovery import installed
from plygrad.scheduler.random_graphs import random_view_chain

F32, IDX = dtypes.float32, dtypes.index
Array = np.ndarray[Any, Any]
Shape = tuple[int, ...]


def _param(index: int, size: int) -> UOp:
    return UOp(Ops.PARAM, F32.ptr(size), (), index)


def _copy_kernel(loop: int, n_out: int, n_in: int, read: UOp | None = None, gate: UOp | None = None,
                 ranges: tuple[UOp, ...] | None = None) -> UOp:
    """out[flat(ranges)] = a[read] (a gated read loads 0 where the gate is false); params (out, a)."""
    loops = ranges if ranges is not None else (UOp.range(loop, 0, AxisType.LOOP),)
    flat = UOp.const(IDX, 0)
    stride = 1
    for r in reversed(loops):
        flat = flat + r * stride
        stride *= int(r.src[0].arg)
    a = _param(1, n_in)
    src = (a, flat if read is None else read) if gate is None else (a, flat if read is None else read, gate)
    value = UOp(Ops.LOAD, F32, (UOp(Ops.INDEX, a.dtype, src),))
    out = _param(0, n_out)
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, flat)), value))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (store, *loops)),), KernelInfo("fuzz"))


def _run_one(body: UOp, out: Buffer, src: Buffer) -> UOp:
    nodes = [UOp(Ops.BUFFER, b.dtype, (), b.ref()) for b in (out, src)]
    return UOp(Ops.LINEAR, dtypes.void, (UOp(Ops.CALL, dtypes.void, (body, *nodes), "fuzz"),), (out.id,))


# ---- no crash: a child process runs the schedule that used to segfault --------------------------------------------
_CHILD_PRELUDE = """
import json, sys
from array import array
from plygrad.ir import AxisType, KernelInfo, Ops, UOp, dtypes
from plygrad.runtime import Buffer, IndexBoundsError, run_linear

def report(fn):
    try:
        fn()
    except IndexBoundsError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc), "producer": exc.producer}))
    else:
        print(json.dumps({"error": None}))
"""

_OOB_LINEAR = _CHILD_PRELUDE + """
def run():
    F32, n, loop = dtypes.float32, 10, 1 << 26
    out, a = UOp(Ops.PARAM, F32.ptr(n), (), 0), UOp(Ops.PARAM, F32.ptr(n), (), 1)
    i = UOp.range(loop, 0, AxisType.LOOP)
    value = UOp(Ops.LOAD, F32, (UOp(Ops.INDEX, a.dtype, (a, i)),)) + 1.0
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, i)), value))
    sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (store, i)),), KernelInfo("past_the_end"))
    src, dst = Buffer("CPU", n, F32).copyin(array("f", range(n))), Buffer("CPU", n, F32)
    nodes = [UOp(Ops.BUFFER, F32, (), b.ref()) for b in (dst, src)]
    linear = UOp(Ops.LINEAR, dtypes.void, (UOp(Ops.CALL, dtypes.void, (sink, *nodes), None),), (dst.id,))
    run_linear(linear, {dst.id: dst, src.id: src})

report(run)
"""

_EVIL_SCHEDULER = _CHILD_PRELUDE + """
import numpy as np
from plygrad.frontend import Tensor
from plygrad.frontend.scheduling import SCHEDULERS, find_scheduler
from plygrad.ir import Stage, deserialize, serialize
from plygrad.runtime.discovery import installed

def evil(data):
    # the default scheduler's schedule, with every loop made 1000 times longer: it still verifies
    linear = deserialize(find_scheduler("default")(data), Stage.SCHEDULE)
    longer = {n: UOp.range(int(n.src[0].arg) * 1000, n.arg[0], n.arg[1])
              for call in linear.src for n in call.src[0].toposort if n.op is Ops.RANGE}
    return serialize(linear.substitute(longer), Stage.SCHEDULE)

def run():
    x = Tensor(np.arange(8, dtype=np.float32))
    with installed(SCHEDULERS, "evil", evil), Tensor.scheduler("evil"):
        (x * 2 + 1).numpy()

report(run)
"""


def _child(script: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"the child died (rc {done.returncode}): {done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_loop_past_the_end_of_its_buffer_is_refused_not_a_segfault() -> None:
    result = _child(_OOB_LINEAR)
    assert result["error"] == "IndexBoundsError"
    assert "kernel 'past_the_end'" in result["message"]
    assert "(10 x float32) at indices [0, 67108863], outside [0, 9]" in result["message"]


def test_the_error_names_the_scheduler_plugin_that_produced_the_schedule() -> None:
    result = _child(_EVIL_SCHEDULER)
    assert result["error"] == "IndexBoundsError"
    assert result["producer"] == "scheduler 'evil' (in-process __main__.evil)"  # entry point and where it lives
    assert "from scheduler 'evil'" in result["message"]


def test_the_same_tensor_runs_with_the_real_scheduler() -> None:
    """The control for the test above: only the plugin's stretched loops were refused."""
    x = Tensor(np.arange(8, dtype=np.float32))
    np.testing.assert_array_equal((x * 2 + 1).numpy(), np.arange(8, dtype=np.float32) * 2 + 1)


def test_a_refused_schedule_in_process_names_the_producer() -> None:
    def stretched(data: bytes) -> bytes:
        linear = deserialize(find_scheduler("default")(data), Stage.SCHEDULE)
        longer = {n: UOp.range(int(n.src[0].arg) + 1, n.arg[0], n.arg[1])
                  for call in linear.src for n in call.src[0].toposort if n.op is Ops.RANGE}
        return serialize(linear.substitute(longer), Stage.SCHEDULE)

    x = Tensor(np.arange(6, dtype=np.float32))
    with installed(SCHEDULERS, "stretched", stretched), Tensor.scheduler("stretched"), \
            pytest.raises(IndexBoundsError, match=r"from scheduler 'stretched'.*outside \[0, 5\]"):
        (x + 1).numpy()


# ---- fuzzing hand-built affine kernels on the CPU -----------------------------------------------------------------
@st.composite
def affine_cases(draw: st.DrawFn) -> dict[str, Any]:
    dims = draw(st.integers(1, 3))
    return {
        "sizes": [draw(st.integers(1, 4)) for _ in range(dims)],
        "strides": [draw(st.integers(-3, 3)) for _ in range(dims)],
        "offset": draw(st.integers(-6, 10)),
        "limits": [draw(st.none() | st.tuples(st.integers(0, 4), st.integers(0, 4))) for _ in range(dims)],
        "n_in": draw(st.integers(1, 24)),
    }


@settings(max_examples=12, deadline=None)
@given(case=affine_cases())
def test_random_affine_kernels_are_refused_exactly_when_out_of_range(case: dict[str, Any]) -> None:
    sizes, strides, offset, limits, n_in = case["sizes"], case["strides"], case["offset"], case["limits"], case["n_in"]
    ranges = tuple(UOp.range(s, axis, AxisType.LOOP) for axis, s in enumerate(sizes))
    read = functools.reduce(operator.add, (r * s for r, s in zip(ranges, strides, strict=True)),
                            UOp.const(IDX, offset))
    conds = [(UOp.const(IDX, lim[0] - 1) < r) & (r < lim[1] + 1)
             for r, lim in zip(ranges, limits, strict=True) if lim is not None]
    gate = functools.reduce(operator.and_, conds) if conds else None
    n_out = int(np.prod(sizes))
    body = _copy_kernel(0, n_out, n_in, read, gate, ranges)

    grid = np.indices(sizes)
    index = offset + sum(g * s for g, s in zip(grid, strides, strict=True))
    valid = np.ones(sizes, dtype=bool)
    for g, lim in zip(grid, limits, strict=True):
        if lim is not None:
            valid &= (g >= lim[0]) & (g <= lim[1])
    in_range = bool(np.all((index[valid] >= 0) & (index[valid] < n_in)))

    values = np.arange(1, n_in + 1, dtype=np.float32)
    src, out = Buffer("CPU", n_in, F32).copyin(values.tobytes()), Buffer("CPU", n_out, F32)
    if not in_range:
        with pytest.raises(IndexBoundsError, match="kernel 'fuzz'"):
            run_linear(_run_one(body, out, src), {out.id: out, src.id: src})
        return
    run_linear(_run_one(body, out, src), {out.id: out, src.id: src})
    expected = np.where(valid, values[np.clip(index, 0, n_in - 1)], 0).astype(np.float32).reshape(-1)
    np.testing.assert_array_equal(np.frombuffer(out.copyout(), dtype=np.float32), expected)


# ---- fuzzing the real scheduler: views are never refused and their proved ranges are sound ---------------------------
def _apply_numpy(x: Array, op: Ops, arg: Any) -> Array:
    if op is Ops.PAD:
        return np.pad(x, arg)
    if op is Ops.SHRINK:
        return x[tuple(slice(s, e) for s, e in arg)]
    if op is Ops.FLIP:
        return np.flip(x, tuple(i for i, f in enumerate(arg) if f))
    if op is Ops.RESHAPE:
        return x.reshape(arg)
    if op is Ops.PERMUTE:
        return x.transpose(arg)
    return np.broadcast_to(x, arg)


def _apply_tensor(x: Tensor, op: Ops, arg: Any) -> Tensor:
    if op is Ops.PAD:
        return x.pad(arg)
    if op is Ops.SHRINK:
        return x.shrink(arg)
    if op is Ops.FLIP:
        return x.flip(tuple(i for i, f in enumerate(arg) if f))
    if op is Ops.RESHAPE:
        return x.reshape(arg)
    if op is Ops.PERMUTE:
        return x.permute(arg)
    return x.expand(arg)


def _touched(index: UOp, gate: UOp | None) -> list[int]:
    """Every value `index` takes where `gate` holds (brute force over its loop variables)."""
    leaves = sorted({n for n in (*index.toposort, *(gate.toposort if gate is not None else ())) if n.op is Ops.RANGE},
                    key=lambda n: int(n.arg[0]))
    values = []
    for point in itertools.product(*(range(int(r.src[0].arg)) for r in leaves)):
        env = {env_key(r): v for r, v in zip(leaves, point, strict=True)}
        if gate is None or evaluate(gate, env):
            values.append(int(evaluate(index, env)))
    return values


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_views_from_the_scheduler_are_never_refused(seed: int) -> None:
    """Chains of up to five movement ops from the scheduler's own generator (`random_graphs.random_view_chain`,
    the one its conformance suite uses) on a small shape."""
    rng = random.Random(seed)
    shape = tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 3)))
    data = np.arange(1, int(np.prod(shape)) + 1, dtype=np.float32).reshape(shape)
    x, expected = Tensor(data), data
    for op, arg in random_view_chain(rng, shape):
        x, expected = _apply_tensor(x, op, arg), _apply_numpy(expected, op, arg)
    y = x + 1
    for call in y.schedule().src:
        if call.src[0].op is Ops.SINK:
            for access in kernel_accesses(call.src[0]):
                touched = _touched(access.index, access.gate)
                bounds = index_bounds(access.index, access.gate)
                assert bounds is not None or not touched
                if bounds is not None and touched:
                    assert bounds[0] <= min(touched) and max(touched) <= bounds[1], "an unsound proved range"
    np.testing.assert_array_equal(y.numpy(), expected + 1)


# ---- fuzzing real schedules with one loop stretched or shrunk -----------------------------------------------------
def _programs() -> list[Tensor]:
    """Small programs whose kernels have gated (padded), strided, flipped and reduced accesses."""
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
    img = Tensor(np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)).realize()
    w = Tensor(np.ones((1, 1, 3, 3), np.float32)).realize()
    return [x.pad(((1, 2), (0, 1))) + 1, x.flip(1).reshape(4, 3).permute(1, 0).pad(((1, 1), (2, 0))) * 2, x.sum(1),
            x.reshape(2, 6).pad(((0, 0), (1, 1))).shrink(((0, 2), (1, 7))).reshape(12) - 1, img.conv2d(w, padding=1)]


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_real_schedules_with_a_mutated_loop_are_refused_exactly_when_out_of_range(data: st.DataObject) -> None:
    """A scheduler's own schedules with one RANGE's end changed: refused exactly when some access leaves its
    buffer (brute force), and otherwise they run on the CPU (to whatever values, but without a crash)."""
    program = data.draw(st.sampled_from(_programs()))
    linear = program.schedule()
    kernels = [i for i, c in enumerate(linear.src) if c.src[0].op is Ops.SINK]
    position = data.draw(st.sampled_from(kernels))
    body = linear.src[position].src[0]
    ranges = [n for n in body.toposort if n.op is Ops.RANGE]
    target = data.draw(st.sampled_from(ranges))
    end = data.draw(st.integers(0, 2 * int(target.src[0].arg)))
    original = linear.src[position]
    call = original.replace(src=(body.substitute({target: UOp.range(end, target.arg[0], target.arg[1])}),
                                 *original.src[1:]))
    mutated = linear.replace(src=tuple(call if i == position else c for i, c in enumerate(linear.src)))
    sizes = [s.arg.size for s in call.src[1:] if s.op is Ops.BUFFER]
    outside = any(not 0 <= i < sizes[a.param] for a in kernel_accesses(call.src[0]) for i in _touched(a.index, a.gate))
    if outside:
        with pytest.raises(IndexBoundsError, match=f"CALL {position} of the LINEAR"):
            run_linear(mutated)
    else:
        run_linear(mutated)
