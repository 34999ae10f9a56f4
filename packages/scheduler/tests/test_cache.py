"""The structural schedule cache: the same graph over other buffers (or other variable values) is not rescheduled."""

from __future__ import annotations

from sched_helpers import assert_matches, buffer, const, expand_to, mov, random_buffers, reduce, sink

from plygrad.ir import Ops, UOp, dtypes
from plygrad.scheduler import ScheduleCache, schedule_uop
from plygrad.scheduler.schedule import schedule_uop as schedule_uncached


def graph(a_id: int, b_id: int, n: int = 3) -> UOp:
    a, b = buffer(a_id, (4, 3)), buffer(b_id, (4, 3))
    v = UOp.variable("n", 1, 9, dtypes.int32).bind(n)
    scale = expand_to(mov(v.cast(dtypes.float32), Ops.RESHAPE, (1, 1)), (4, 3))
    return sink(reduce(a * b * scale, Ops.ADD, (1,)), a + const(1.0, (4, 3)))


def test_same_structure_over_other_buffers_hits_and_substitutes_ids() -> None:
    cache = ScheduleCache()
    first = cache.schedule(graph(0, 1), schedule_uncached)
    second = cache.schedule(graph(5, 2, n=7), schedule_uncached)
    assert (cache.hits, cache.misses) == (1, 1)
    ids = {b.arg.id for c in second.src for b in c.src[1:] if b.op is Ops.BUFFER and b.arg.id >= 0}
    assert ids == {5, 2}
    assert second == schedule_uncached(graph(5, 2, n=7))
    assert first == schedule_uncached(graph(0, 1))
    g = graph(5, 2, n=7)
    assert_matches(g, second, random_buffers(g))


def test_different_structure_misses() -> None:
    cache = ScheduleCache()
    cache.schedule(graph(0, 1), schedule_uncached)
    cache.schedule(sink(buffer(0, (4, 3)) * const(2.0, (4, 3))), schedule_uncached)
    assert (cache.hits, cache.misses) == (0, 2)


def test_swapped_buffers_are_a_hit_with_ids_swapped() -> None:
    cache = ScheduleCache()
    cache.schedule(graph(0, 1), schedule_uncached)
    swapped = cache.schedule(graph(1, 0), schedule_uncached)
    assert cache.hits == 1
    assert swapped == schedule_uncached(graph(1, 0))


def test_default_scheduler_uses_its_cache() -> None:
    from plygrad.scheduler import DEFAULT_CACHE
    before = DEFAULT_CACHE.hits
    schedule_uop(graph(10, 11))
    schedule_uop(graph(12, 13))
    assert DEFAULT_CACHE.hits >= before + 1
