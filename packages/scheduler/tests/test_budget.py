"""The kernel size budget (budget.py) and wide concatenations written slice by slice (concat.py), each schedule
run on NumPy against the tensor graph's own evaluation."""

from __future__ import annotations

from sched_helpers import assert_matches, buffer, check, const, kernel_count, mov, random_buffers, sink

from plygrad.ir import GroupOp, Ops, UOp, dtypes
from plygrad.scheduler import schedule_uop
from plygrad.scheduler.budget import KERNEL_NODE_BUDGET, split_oversized
from plygrad.scheduler.concat import CONCAT_MIN_PIECES
from plygrad.scheduler.fusion import plan_fusion, users_of
from plygrad.scheduler.schedule import OWN_KERNEL_ELEMENTS


def value_ops(linear: UOp) -> list[int]:
    """Per kernel: its ALU ops on values (not index math) and loads, what the budget bounds."""
    counts = []
    for call in linear.src:
        if call.src[0].op is Ops.SINK:
            counts.append(sum(1 for n in call.src[0].toposort
                              if (n.op in GroupOp.ALU and n.dtype is not dtypes.index) or n.op is Ops.LOAD))
    return counts


def stores(linear: UOp) -> int:
    return sum(1 for call in linear.src for n in call.src[0].toposort if n.op is Ops.STORE)


def padded_pieces(lengths: list[int], starts: list[int], total: int, rows: int = 1) -> tuple[UOp, list[UOp]]:
    """The sum of buffers of shape (rows, length) zero-PADded along axis 1 to start there: a concatenation along
    axis 1 when the intervals tile, with gaps or overlaps otherwise. (One row by default: the NumPy executor gives
    every loop of a kernel an array axis, and NumPy stops at 32.)"""
    pieces = [buffer(i, (rows, n)) for i, n in enumerate(lengths)]
    padded = [mov(p, Ops.PAD, ((0, 0), (s, total - s - n))) for p, s, n in zip(pieces, starts, lengths, strict=True)]
    out = padded[0]
    for p in padded[1:]:
        out = out + p
    return out, pieces


def test_a_long_elementwise_chain_is_cut_into_kernels_within_the_budget() -> None:
    x = buffer(0, (3, 4))
    y: UOp = x
    for i in range(1500):
        y = y * const(1.0 + i % 7 * 1e-3, (3, 4)) + x
    fused, unfused = check(sink(y))
    ops = value_ops(fused)
    assert len(ops) > 1
    assert max(ops) <= KERNEL_NODE_BUDGET
    assert kernel_count(unfused) == 3000  # one kernel per op, the budget does not apply


def test_a_value_read_twice_is_counted_once() -> None:
    # y*(y+c): a tree count doubles each step and would cut every few ops; distinct nodes grow by 3 a step
    x = buffer(0, (8,))
    y: UOp = x
    for _ in range(300):
        y = y * (y + const(1e-3, (8,))) * const(0.999, (8,))
    roots = plan_fusion(sink(y), fuse=True).roots
    assert len(roots) <= 3 * 300 // (KERNEL_NODE_BUDGET // 2)


def test_a_cut_lands_under_movement_ops_never_on_a_view() -> None:
    x = buffer(0, (4, 4))
    y: UOp = x
    for _ in range(600):
        y = mov(y, Ops.PERMUTE, (1, 0)) + x
    plan = plan_fusion(sink(y), fuse=True)
    assert len(plan.roots) > 1
    assert all(r.op not in GroupOp.Movement for r in plan.roots)
    fused = schedule_uop(sink(y))
    assert_matches(sink(y), fused, random_buffers(sink(y)))


def test_split_oversized_leaves_a_graph_within_the_budget_alone() -> None:
    x = buffer(0, (4,))
    y = (x + const(1.0, (4,))) * x
    graph = sink(y)
    order = graph.toposort
    roots = {y}
    split_oversized(order, roots, users_of(order))
    assert roots == {y}


def test_a_wide_concatenation_writes_each_piece_into_its_slice() -> None:
    n = CONCAT_MIN_PIECES + 2
    lengths = [1 + i % 3 for i in range(n)]
    starts = [sum(lengths[:i]) for i in range(n)]
    cat, _ = padded_pieces(lengths, starts, sum(lengths))
    fused, _ = check(sink(cat))
    assert kernel_count(fused) == 1
    assert stores(fused) == n  # one STORE per piece, no gated loads
    assert all(len(n.src[0].src) == 2 for call in fused.src for n in call.src[0].toposort if n.op is Ops.LOAD)


def test_gaps_between_pieces_are_written_as_zeros() -> None:
    n = CONCAT_MIN_PIECES
    lengths = [2] * n
    starts = [1 + 2 * i + (3 if i >= n // 2 else 0) for i in range(n)]  # gaps: 1 first, 3 halfway, 2 at the end
    cat, _ = padded_pieces(lengths, starts, 2 * n + 6)
    fused, _ = check(sink(cat))  # new buffers start as garbage in the executor: an unwritten gap would show
    assert stores(fused) == n + 3


def test_overlapping_pads_are_a_sum_not_a_concatenation() -> None:
    n = CONCAT_MIN_PIECES
    cat, _ = padded_pieces([3] * n, [2 * i for i in range(n)], 2 * n + 1)
    plan = plan_fusion(sink(cat), fuse=True)
    assert not plan.concats
    check(sink(cat))


def test_a_narrow_concatenation_still_fuses_into_its_consumer() -> None:
    n = CONCAT_MIN_PIECES - 1
    cat, _ = padded_pieces([2] * n, [2 * i for i in range(n)], 2 * n)
    fused, _ = check(sink(cat * const(2.0, (1, 2 * n))))
    assert kernel_count(fused) == 1


def test_a_wide_concatenation_read_by_a_consumer_is_realized_first() -> None:
    n = CONCAT_MIN_PIECES
    cat, _ = padded_pieces([2] * n, [2 * i for i in range(n)], 2 * n)
    fused, _ = check(sink((cat * const(2.0, (1, 2 * n))).alu(Ops.EXP2)))
    assert kernel_count(fused) == 2


def test_a_partial_sum_read_elsewhere_stops_the_concatenation() -> None:
    n = CONCAT_MIN_PIECES
    starts = [2 * i for i in range(n)]
    pieces = [buffer(i, (1, 2)) for i in range(n)]
    padded = [mov(p, Ops.PAD, ((0, 0), (s, 2 * n - s - 2))) for p, s in zip(pieces, starts, strict=True)]
    partial = padded[0]
    for p in padded[1:4]:
        partial = partial + p
    total = partial
    for p in padded[4:]:
        total = total + p
    graph = sink(total, partial * const(3.0, (1, 2 * n)))
    # the intervals tile: only the shared partial sum keeps this from being one concatenation
    assert not plan_fusion(graph, fuse=True).concats
    check(graph)


def test_a_large_piece_gets_a_kernel_of_its_own() -> None:
    n = CONCAT_MIN_PIECES
    lengths = [1] * (n - 1) + [OWN_KERNEL_ELEMENTS]
    starts = [sum(lengths[:i]) for i in range(n)]
    cat, _ = padded_pieces(lengths, starts, sum(lengths))
    fused, _ = check(sink(cat))
    assert kernel_count(fused) == 2
