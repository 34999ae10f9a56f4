"""Benchmarks of the plygrad IR: serialization round trip, UOp build rate, and `graph_rewrite` + `symbolic`
throughput on realistic index math, side by side with tinygrad 0.14.0 when it is importable.

Run: python bench/ir_bench.py [--runs N] [--exprs M]

Every figure is the median of N runs; each run starts from freshly built nodes (built outside the timed region for
the rewrite figures), so per-node caches (bounds, hash-consing hits) do not flatter later runs. No timing is
asserted: this prints a table to read and compare.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

# the IR package is importable after `pip install -e packages/ir`; fall back to the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "packages", "ir", "src"))

from plygrad.ir.dtype import dtypes
from plygrad.ir.ops import Ops
from plygrad.ir.rewrite import PatternMatcher, UPat, graph_rewrite
from plygrad.ir.symbolic import symbolic
from plygrad.ir.uop import UOp

# one rule that is tried on every ADD and never fires: measures the engine itself (walk, dispatch, rebuild)
PLYGRAD_NEVER_FIRES = PatternMatcher([(UPat.var("a") + UPat.var("a") * 0, lambda a: a)], name="never_fires")

# ranges of a 4-d output (sizes of a conv-like kernel) as bounded variables
RANGE_SIZES = (4, 16, 32, 32)


class Lib:
    """What the expression builder needs from a UOp library."""

    name: str

    def variable(self, name: str, lo: int, hi: int) -> Any: ...
    def sink(self, srcs: list[Any]) -> Any: ...
    def rewrite(self, sink: Any) -> Any: ...
    def walk(self, sink: Any) -> Any: ...
    def count(self, root: Any) -> int: ...


class Plygrad(Lib):
    name = "plygrad"

    def variable(self, name: str, lo: int, hi: int) -> Any:
        return UOp.variable(name, lo, hi, dtypes.index)

    def sink(self, srcs: list[Any]) -> Any:
        return UOp(Ops.SINK, dtypes.void, tuple(srcs))

    def rewrite(self, sink: Any) -> Any:
        return graph_rewrite(sink, symbolic)

    def walk(self, sink: Any) -> Any:
        return graph_rewrite(sink, PLYGRAD_NEVER_FIRES)

    def count(self, root: Any) -> int:
        return sum(1 for _ in root.sparents())


class Tinygrad(Lib):
    name = "tinygrad"

    def __init__(self) -> None:
        from tinygrad.uop.ops import PatternMatcher as TPatternMatcher
        from tinygrad.uop.ops import UOp as TUOp
        from tinygrad.uop.ops import UPat as TUPat
        from tinygrad.uop.ops import graph_rewrite as tgraph_rewrite
        from tinygrad.uop.symbolic import symbolic as tsymbolic

        self.uop, self.graph_rewrite, self.symbolic = TUOp, tgraph_rewrite, tsymbolic
        # the same never-firing rule as PLYGRAD_NEVER_FIRES: the engine's walk, dispatch and one match per ADD
        self.never_fires = TPatternMatcher([(TUPat.var("a") + TUPat.var("a") * 0, lambda a: a)])

    def variable(self, name: str, lo: int, hi: int) -> Any:
        return self.uop.variable(name, lo, hi)

    def sink(self, srcs: list[Any]) -> Any:
        return self.uop.sink(*srcs)

    def rewrite(self, sink: Any) -> Any:
        return self.graph_rewrite(sink, self.symbolic)

    def walk(self, sink: Any) -> Any:
        return self.graph_rewrite(sink, self.never_fires)

    def count(self, root: Any) -> int:
        return len(root.toposort())


def build_index_math(lib: Lib, exprs: int) -> Any:
    """A SINK of `exprs` index expressions of the shape movement ops lower to: a flat index over 4 ranges, then
    chains of (a*stride + b) // c % d through reshapes/permutes/pads, with validity comparisons."""
    r = [lib.variable(f"r{i}", 0, n - 1) for i, n in enumerate(RANGE_SIZES)]
    outs = []
    for j in range(exprs):
        flat = r[0] * (16 * 32 * 32) + r[1] * (32 * 32) + r[2] * 32 + r[3] + j * 32  # a shifted view per expression
        e = flat
        for level in range(3):
            stride = 1 + (j + level) % 5
            c = (2, 4, 8, 16, 32)[(j * 3 + level) % 5]
            d = (3, 5, 7, 9, 11, 64)[(j + 2 * level) % 6]
            e = ((e * stride + r[level + 1] * c) // c) % d + (e // (c * 4)) * d
        valid = (e < (j % 97) + 50)
        outs.append(valid.where(e * 4 + (j % 13), (j % 11) - 3))
    return lib.sink(outs)


def exprs_for_nodes(target: int) -> int:
    """The fewest expressions whose graph has at least `target` nodes."""
    lib = Plygrad()
    lo, hi = 1, 1
    while lib.count(build_index_math(lib, hi)) < target:
        lo, hi = hi, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        if lib.count(build_index_math(lib, mid)) < target:
            lo = mid + 1
        else:
            hi = mid
    return hi


def median_ms(fn: Callable[[], object], runs: int, setup: Callable[[], object] | None = None) -> float:
    times = []
    for _ in range(runs):
        if setup is not None:
            setup()
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def bench_build(lib: Lib, exprs: int, runs: int) -> tuple[int, float]:
    nodes = lib.count(build_index_math(lib, exprs))
    gc.collect()
    return nodes, median_ms(lambda: build_index_math(lib, exprs), runs)


def bench_rewrite(lib: Lib, exprs: int, runs: int, walk_only: bool = False) -> tuple[int, int, float]:
    state: dict[str, Any] = {}

    def setup() -> None:
        state.clear()
        gc.collect()
        state["sink"] = build_index_math(lib, exprs)

    def run() -> None:
        state["out"] = lib.walk(state["sink"]) if walk_only else lib.rewrite(state["sink"])

    setup()
    nodes = lib.count(state["sink"])
    run()
    out_nodes = lib.count(state["out"])
    ms = median_ms(run, runs, setup)
    return nodes, out_nodes, ms


def check_plygrad_result(exprs: int, points: int = 20) -> str:
    """The simplified graph must compute what the input computes: compared with the reference interpreter."""
    import random

    from plygrad.ir.evaluate import evaluate

    rng = random.Random(0)
    sink = build_index_math(Plygrad(), exprs)
    out = Plygrad().rewrite(sink)
    for _ in range(points):
        env = {f"r{i}": rng.randrange(n) for i, n in enumerate(RANGE_SIZES)}
        j = rng.randrange(len(sink.src))
        if evaluate(out.src[j], env) != evaluate(sink.src[j], env):
            return f"MISMATCH at expr {j}, {env}"
    return f"ok ({points} points)"


def bench_serialize(exprs: int, runs: int) -> list[tuple[str, str]]:
    try:
        from plygrad.ir.serialize import deserialize, serialize
        from plygrad.ir.stage import Stage
    except ImportError as e:
        return [("serialize round trip", f"skipped: plygrad.ir.serialize not importable ({e})")]
    rows: list[tuple[str, str]] = []
    sink = build_index_math(Plygrad(), exprs)
    nodes = Plygrad().count(sink)
    data = serialize(sink, stage=Stage.GRAPH)
    ser_ms = median_ms(lambda: serialize(sink, stage=Stage.GRAPH), runs)
    de_alive_ms = median_ms(lambda: deserialize(data), runs)
    de_alive_nv_ms = median_ms(lambda: deserialize(data, verify=False), runs)
    del sink
    gc.collect()
    fresh_ms = median_ms(lambda: deserialize(data), runs)  # no node of the graph exists: every node is built
    rows.append((f"serialize, {nodes} nodes ({len(data)} bytes)", f"{ser_ms:.2f} ms"))
    rows.append(("deserialize+verify, graph alive (hash-cons hits)", f"{de_alive_ms:.2f} ms"))
    rows.append(("deserialize, verify=False, graph alive", f"{de_alive_nv_ms:.2f} ms"))
    rows.append(("deserialize+verify, fresh process-like (nodes built)", f"{fresh_ms:.2f} ms"))
    rows.append(("round trip (serialize + fresh deserialize)", f"{ser_ms + fresh_ms:.2f} ms"))
    try:
        from plygrad.ir.text import from_text, to_text

        sink = build_index_math(Plygrad(), exprs)
        text = to_text(sink)
        text_ms = median_ms(lambda: from_text(to_text(sink)), runs)
        rows.append((f"text round trip ({len(text)} chars)", f"{text_ms:.2f} ms"))
    except ImportError as e:
        rows.append(("text round trip", f"skipped: plygrad.ir.text not importable ({e})"))
    return rows


def tinygrad_pickle_round_trip(lib: Tinygrad, exprs: int, runs: int) -> str:
    import pickle

    sink = build_index_math(lib, exprs)
    try:
        data = pickle.dumps(sink)
    except Exception as e:
        return f"n/a ({type(e).__name__})"
    del sink
    gc.collect()
    ms = median_ms(lambda: pickle.loads(pickle.dumps(pickle.loads(data))), runs)
    return f"{ms:.2f} ms (pickle, {len(data)} bytes)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per figure (the median is printed)")
    parser.add_argument("--exprs", type=int, default=1000, help="index expressions in the rewrite graph")
    parser.add_argument("--ser-exprs", type=int, default=0, help="expressions of the serialization graph "
                        "(default: chosen to give about 10,000 nodes)")
    args = parser.parse_args()

    libs: list[Lib] = [Plygrad()]
    tinygrad_note = ""
    try:
        import tinygrad

        version = getattr(tinygrad, "__version__", None)
        if version is None:
            from importlib.metadata import version as dist_version

            version = dist_version("tinygrad")
        libs.append(Tinygrad())
        tinygrad_note = f"tinygrad {version}"
        if version != "0.14.0":
            tinygrad_note += " (not the 0.14.0 this bench targets)"
    except ImportError as e:
        tinygrad_note = f"tinygrad not importable ({e}); `pip install tinygrad==0.14.0` adds its column"

    print(f"command : python bench/ir_bench.py --runs {args.runs} --exprs {args.exprs}"
          + (f" --ser-exprs {args.ser_exprs}" if args.ser_exprs else ""))
    print(f"machine : {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()} ({platform.python_implementation()})")
    print(f"compare : {tinygrad_note}")
    print(f"figures : median of {args.runs} runs\n")

    header = f"{'measure':<58}" + "".join(f"{lib.name:>24}" for lib in libs)
    print(header)
    print("-" * len(header))
    build = [bench_build(lib, args.exprs, args.runs) for lib in libs]
    print(f"{'UOp build: nodes':<58}" + "".join(f"{n:>24}" for n, _ in build))
    print(f"{'UOp build: ms':<58}" + "".join(f"{ms:>24.1f}" for _, ms in build))
    print(f"{'UOp build: nodes/s':<58}" + "".join(f"{n / ms * 1000:>24,.0f}" for n, ms in build))
    rewrite = [bench_rewrite(lib, args.exprs, args.runs) for lib in libs]
    print(f"{'graph_rewrite(symbolic): nodes in -> out':<58}"
          + "".join(f"{f'{n} -> {o}':>24}" for n, o, _ in rewrite))
    print(f"{'graph_rewrite(symbolic): ms':<58}" + "".join(f"{ms:>24.1f}" for _, _, ms in rewrite))
    print(f"{'graph_rewrite(symbolic): input nodes/s':<58}"
          + "".join(f"{n / ms * 1000:>24,.0f}" for n, _, ms in rewrite))

    print(f"{'check: plygrad result == input (evaluate, random points)':<58}{check_plygrad_result(args.exprs):>24}")
    walk = [bench_rewrite(lib, args.exprs, args.runs, walk_only=True) for lib in libs]
    print(f"{'graph_rewrite(1 rule on ADD, never fires): ms':<58}" + "".join(f"{ms:>24.1f}" for _, _, ms in walk))
    print(f"{'graph_rewrite(1 rule on ADD, never fires): nodes/s':<58}"
          + "".join(f"{n / ms * 1000:>24,.0f}" for n, _, ms in walk))

    # serialization: a graph of about 10,000 nodes
    ser_exprs = args.ser_exprs or exprs_for_nodes(10_000)
    print(f"\nserialization (plygrad.ir.serialize) of the same kind of graph, {ser_exprs} expressions:")
    for label, value in bench_serialize(ser_exprs, args.runs):
        print(f"  {label:<56}{value:>24}")
    for lib in libs:
        if isinstance(lib, Tinygrad):
            print(f"  {'tinygrad: pickle round trip of the same graph':<56}"
                  f"{tinygrad_pickle_round_trip(lib, ser_exprs, args.runs):>24}")


if __name__ == "__main__":
    main()
