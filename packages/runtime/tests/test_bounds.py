"""The bounds check (bounds.py): a kernel whose accesses leave its buffers is refused before it is lowered.

Hand-built kernels cover each rule of the proof; a hypothesis test compares the check with brute-force enumeration
of every index an affine kernel touches; the plan tests run on the fake PY backend and show the error names the
kernel, the buffer and the producer, and that nothing was lowered.
"""

from __future__ import annotations

import functools
import itertools
import operator
from array import array
from collections.abc import Callable, Sequence

import pytest
import rt_fakes
from hypothesis import given
from hypothesis import strategies as st
from rt_schedules import buffer_node, call, linear, node

from plygrad.ir import AxisType, KernelInfo, Ops, Stage, UOp, dtypes, evaluate, serialize
from plygrad.ir.evaluate import env_key
from plygrad.runtime import Buffer, IndexBoundsError, ScheduleError, load_plan
from plygrad.runtime.bounds import find_violations, index_bounds, kernel_accesses

F32, IDX = dtypes.float32, dtypes.index


def param(index: int, size: int) -> UOp:
    return UOp(Ops.PARAM, F32.ptr(size), (), index)


def load(buf: UOp, idx: UOp, gate: UOp | None = None) -> UOp:
    src = (buf, idx) if gate is None else (buf, idx, gate)
    return UOp(Ops.LOAD, F32, (UOp(Ops.INDEX, buf.dtype, src),))


def kernel(out: UOp, out_idx: UOp, value: UOp, loops: Sequence[UOp], name: str = "k",
           gate: UOp | None = None) -> UOp:
    src = (out, out_idx) if gate is None else (out, out_idx, gate)
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, src), value))
    body = UOp(Ops.END, dtypes.void, (store, *loops)) if loops else store
    return UOp(Ops.SINK, dtypes.void, (body,), KernelInfo(name))


def rng(size: int | UOp, axis: int) -> UOp:
    return UOp.range(size, axis, AxisType.LOOP)


def copy_kernel(n_out: int, n_in: int, loop: int | UOp, read: Callable[[UOp], UOp] | None = None,
                gate: UOp | None = None) -> UOp:
    """out[i] = a[read(i)] for i < loop (read defaults to i), params (out[n_out], a[n_in])."""
    i = rng(loop, 0)
    return kernel(param(0, n_out), i, load(param(1, n_in), i if read is None else read(i), gate), [i])


# ---- the rules ------------------------------------------------------------------------------------------------------
def test_in_range_kernels_pass() -> None:
    assert find_violations(copy_kernel(8, 8, 8), [8, 8]) == []
    assert find_violations(copy_kernel(8, 20, 8), [8, 20]) == [], "a buffer larger than the loop is fine"


def test_a_loop_past_the_end_of_the_input_is_a_violation() -> None:
    [v] = find_violations(copy_kernel(100, 10, 100), [100, 10])
    assert (v.access.kind, v.access.param, v.size, v.bounds) == ("load", 1, 10, (0, 99))


def test_a_loop_past_the_end_of_the_output_is_a_violation() -> None:
    violations = find_violations(copy_kernel(10, 100, 100), [10, 100])
    assert [(v.access.kind, v.access.param, v.bounds) for v in violations] == [("store", 0, (0, 99))]


def test_a_negative_index_is_a_violation() -> None:
    [v] = find_violations(copy_kernel(8, 8, 8, read=lambda i: i - 1), [8, 8])
    assert v.bounds == (-1, 6)


def test_a_padded_load_is_proved_by_its_gate() -> None:
    """PAD's shape: out[i] = (0 < i < n+1) ? a[i-1] : 0 over i < n+2; the index leaves a[n] on both sides."""
    n = 5
    gated = copy_kernel(n + 2, n, n + 2, read=lambda i: i - 1, gate=None)
    assert len(find_violations(gated, [n + 2, n])) == 1, "ungated, i - 1 reads a[-1] and a[n]"
    i = rng(n + 2, 0)
    pad = kernel(param(0, n + 2), i, load(param(1, n), i - 1, (UOp.const(IDX, 0) < i) & (i < n + 1)), [i])
    assert find_violations(pad, [n + 2, n]) == []


def test_a_gate_that_does_not_keep_the_index_inside_is_a_violation() -> None:
    n = 5
    i = rng(n + 2, 0)
    loose = kernel(param(0, n + 2), i, load(param(1, n), i - 1, (UOp.const(IDX, 0) < i) & (i < n + 2)), [i])
    [v] = find_violations(loose, [n + 2, n])
    assert v.bounds == (0, n)


def test_a_gate_on_a_sum_of_loops_bounds_the_sum() -> None:
    """A PAD seen through a RESHAPE: flat = 4*r0 + r1 over (2, 4), gated 0 < flat < 7, reads a[flat - 1]."""
    r0, r1 = rng(2, 0), rng(4, 1)
    flat = r0 * 4 + r1
    body = kernel(param(0, 8), flat, load(param(1, 6), flat - 1, (UOp.const(IDX, 0) < flat) & (flat < 7)), [r0, r1])
    assert find_violations(body, [8, 6]) == []
    [v] = find_violations(body, [8, 5])
    assert v.bounds == (0, 5)


def test_gated_idiv_and_mod_terms_are_bounded_through_the_gate() -> None:
    """A (2, 3) buffer padded by 1 on each side, read as 20 flat elements: index 3*(r//5) + r%5 - 4."""
    r = rng(20, 0)
    row, col = r // 5, r % 5
    zero = UOp.const(IDX, 0)
    gate = (zero < row) & (row < 3) & (zero < col) & (col < 4)
    body = kernel(param(0, 20), r, load(param(1, 6), row * 3 + col - 4, gate), [r])
    assert find_violations(body, [20, 6]) == []


def test_a_gated_store_is_proved_by_its_gate() -> None:
    i = rng(10, 0)
    body = kernel(param(0, 4), i, load(param(1, 10), i), [i], gate=i < 4)
    assert find_violations(body, [4, 10]) == []
    assert find_violations(body.substitute({param(0, 4): param(0, 3)}), [3, 10]) != []


def test_accesses_that_never_run_pass() -> None:
    assert find_violations(copy_kernel(0, 0, 0), [0, 0]) == [], "an empty loop touches nothing"
    never = copy_kernel(4, 1, 4, read=lambda i: i + 100, gate=UOp.const(dtypes.bool, False))
    assert find_violations(never, [4, 1]) == []
    i = rng(4, 0)
    contradiction = kernel(param(0, 4), i, load(param(1, 1), i + 100, (i < 2) & (UOp.const(IDX, 2) < i)), [i])
    assert find_violations(contradiction, [4, 1]) == []
    assert index_bounds(i + 100, (i < 2) & (UOp.const(IDX, 2) < i)) is None


def test_accesses_under_an_empty_loop_they_do_not_index_pass() -> None:
    """An empty tensor's loop nest (a range of size 0 around the store, absent from its index: the gradient of
    `x[1:, []]`) runs nothing, whatever the index names; with the range of size 1 it is a violation again."""
    for size, violations in ((0, 0), (1, 1)):
        empty, j = rng(size, 0), rng(2, 1)
        assert len(find_violations(kernel(param(0, 0), j, load(param(1, 2), j), [empty, j]), [0, 2])) == violations
    empty, j, r = rng(2, 0), rng(2, 1), UOp.range(0, 2, AxisType.REDUCE)
    summed = UOp(Ops.REDUCE, F32, (load(param(1, 0), j + r), r), Ops.ADD)  # reads nothing: its loop is empty
    assert find_violations(kernel(param(0, 4), empty * 2 + j, summed, [empty, j]), [4, 0]) == []


def test_a_variable_loop_bound_is_checked_at_its_maximum() -> None:
    """The bound must hold for every value the variable may take, not only the one bound today (a replay may
    give another)."""
    k = UOp.variable("k", 1, 100)
    assert find_violations(copy_kernel(100, 100, k), [100, 100]) == []
    [v] = find_violations(copy_kernel(100, 50, k), [100, 50])
    assert v.bounds == (0, 99)


def test_an_index_read_from_memory_cannot_be_proved() -> None:
    i = rng(4, 0)
    where = UOp(Ops.LOAD, dtypes.int32, (UOp(Ops.INDEX, dtypes.int32.ptr(4), (UOp(Ops.PARAM, dtypes.int32.ptr(4), (),
                                                                                    2), i)),))
    body = kernel(param(0, 4), i, load(param(1, 4), where.cast(IDX)), [i])
    [v] = find_violations(body, [4, 4, 4])
    assert v.bounds == (dtypes.int32.min, dtypes.int32.max)


def test_a_where_is_not_a_gate() -> None:
    """The renderer may compute both operands of a WHERE, so the load under it is not protected by it."""
    i = rng(6, 0)
    value = (i < 5).where(load(param(1, 5), i), 0.0)
    assert len(find_violations(kernel(param(0, 6), i, value, [i]), [6, 5])) == 1


def test_loads_under_a_reduce_are_checked() -> None:
    r, c = rng(3, 0), UOp.range(4, 1, AxisType.REDUCE)
    acc = UOp(Ops.REDUCE, F32, (load(param(1, 12), r * 4 + c), c), Ops.ADD)
    body = kernel(param(0, 3), r, acc, [r])
    assert find_violations(body, [3, 12]) == []
    [v] = find_violations(body, [3, 11])
    assert v.bounds == (0, 11)


def test_a_deep_gated_index_falls_back_to_its_plain_interval() -> None:
    """Thousands of nested ADDs overflow the prover's recursion: the check still answers (conservatively)."""
    i = rng(10, 0)
    deep = i
    for _ in range(5000):
        deep = deep + 1
    deep = deep - 5001
    body = kernel(param(0, 10), i, load(param(1, 9), deep, UOp.const(IDX, 0) < i), [i])
    [v] = find_violations(body, [10, 9])
    assert v.bounds == (-1, 8)


def test_kernel_accesses_lists_loads_and_stores() -> None:
    kinds = [(a.kind, a.param) for a in kernel_accesses(copy_kernel(4, 4, 4))]
    assert kinds == [("load", 1), ("store", 0)]


# ---- the fuzzer: the check against brute force ----------------------------------------------------------------------
@st.composite
def affine_kernels(draw: st.DrawFn) -> tuple[UOp, list[int], set[int], set[int]]:
    """A kernel out[o + sum so_i*r_i] = a[x + sum sa_i*r_i], each access optionally gated per loop, with random
    buffer sizes; returns it with the sizes and every index it stores to / loads from (by enumeration)."""
    dims = draw(st.integers(1, 3))
    sizes = [draw(st.integers(1, 5)) for _ in range(dims)]
    ranges = [rng(s, axis) for axis, s in enumerate(sizes)]
    accesses = []
    for _ in range(2):
        strides = [draw(st.integers(-4, 4)) for _ in range(dims)]
        offset = draw(st.integers(-8, 12))
        limits = [draw(st.none() | st.tuples(st.integers(-1, 5), st.integers(-1, 5))) for _ in range(dims)]
        accesses.append((strides, offset, limits))

    def index(strides: list[int], offset: int) -> UOp:
        total = UOp.const(IDX, offset)
        for r, s in zip(ranges, strides, strict=True):
            total = total + r * s
        return total

    def gate(limits: list[tuple[int, int] | None]) -> UOp | None:
        conds = [(UOp.const(IDX, lim[0] - 1) < r) & (r < lim[1] + 1)
                 for r, lim in zip(ranges, limits, strict=True) if lim is not None]
        return functools.reduce(operator.and_, conds) if conds else None

    (s_store, o_store, g_store), (s_load, o_load, g_load) = accesses
    store_idx, load_idx = index(s_store, o_store), index(s_load, o_load)
    store_gate, load_gate = gate(g_store), gate(g_load)
    sizes_out = [draw(st.integers(0, 30)), draw(st.integers(0, 30))]
    body = kernel(param(0, sizes_out[0]), store_idx, load(param(1, sizes_out[1]), load_idx, load_gate), ranges,
                  gate=store_gate)
    stored: set[int] = set()
    loaded: set[int] = set()
    for point in itertools.product(*(range(s) for s in sizes)):
        env = {env_key(r): v for r, v in zip(ranges, point, strict=True)}
        if store_gate is None or evaluate(store_gate, env):
            stored.add(int(evaluate(store_idx, env)))
        if load_gate is None or evaluate(load_gate, env):
            loaded.add(int(evaluate(load_idx, env)))
    return body, sizes_out, stored, loaded


@given(affine_kernels())
def test_the_check_accepts_exactly_the_in_range_affine_kernels(case: tuple[UOp, list[int], set[int],
                                                                           set[int]]) -> None:
    body, (n_out, n_in), stored, loaded = case
    flagged = {(v.access.kind, v.access.param) for v in find_violations(body, [n_out, n_in])}
    expected = set()
    if any(not 0 <= i < n_out for i in stored):
        expected.add(("store", 0))
    if any(not 0 <= i < n_in for i in loaded):
        expected.add(("load", 1))
    assert flagged == expected


@given(affine_kernels())
def test_proved_bounds_contain_every_index_touched(case: tuple[UOp, list[int], set[int], set[int]]) -> None:
    """Soundness on its own: the proved interval holds every index the enumeration finds (none when it never
    runs), so an in-range verdict is never a guess."""
    body, _, stored, loaded = case
    for access in kernel_accesses(body):
        touched = stored if access.kind == "store" else loaded
        bounds = index_bounds(access.index, access.gate)
        if bounds is None:
            assert not touched
        else:
            assert all(bounds[0] <= i <= bounds[1] for i in touched)


# ---- in a plan: refused before lowering, with every name the reader needs -------------------------------------------
def _oob_schedule(loop: int, n: int) -> UOp:
    """One CALL that copies `loop` elements out of a buffer of `n` (float32), into a fresh buffer of `loop`."""
    body = copy_kernel(loop, n, loop)
    schedule: UOp = linear(call(body, buffer_node(-1, loop), buffer_node(-2, n), name="copy"), outputs=(-1,))
    return schedule


def test_a_plan_refuses_an_out_of_range_kernel_before_lowering(fakes: None) -> None:
    rt_fakes.LOWER_CALLS.clear()
    data = serialize(_oob_schedule(100, 10), Stage.SCHEDULE)
    with pytest.raises(IndexBoundsError) as info:
        load_plan(data, producer="scheduler 'evil'")
    err = info.value
    assert isinstance(err, ScheduleError)
    assert (err.kernel, err.position, err.param, err.buffer_id, err.size, err.dtype, err.bounds, err.producer) == \
        ("k", 0, 1, -2, 10, F32, (0, 99), "scheduler 'evil'")
    message = str(err)
    for part in ("kernel 'k'", "CALL 0", "scheduler 'evil'", "load PARAM 1", "buffer -2 (10 x float32)",
                 "[0, 99]", "outside [0, 9]"):
        assert part in message, f"{part!r} missing from: {message}"
    assert rt_fakes.LOWER_CALLS == [], "nothing was lowered for a refused schedule"


def test_an_unnamed_producer_is_said_so(fakes: None) -> None:
    with pytest.raises(IndexBoundsError, match="unnamed producer"):
        load_plan(_oob_schedule(12, 11))


def test_a_refused_schedule_is_not_cached(fakes: None) -> None:
    data = serialize(_oob_schedule(3, 2), Stage.SCHEDULE)
    for _ in range(2):
        with pytest.raises(IndexBoundsError):
            load_plan(data)


def test_an_in_range_schedule_still_runs(fakes: None) -> None:
    values = array("f", [1.0, 2.0, 3.0, 4.0, 5.0])
    src = Buffer("PY", 5, F32).copyin(values)
    body = copy_kernel(4, 5, 4)
    schedule = linear(call(body, buffer_node(-1, 4), node(src), name="copy"), outputs=(-1,))
    out = load_plan(schedule, producer="test").run()[-1]
    assert array("f", out.copyout()).tolist() == values.tolist()[:4]
