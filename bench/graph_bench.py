"""Time against graph size: a chain of n elementwise ops, and `cat` of n small tensors, realized once with a cold
program cache and again warm; plygrad beside PyTorch (CPU, eager) and tinygrad (CPU device), same run, same machine.

Run: python bench/graph_bench.py [--chain 500 1000 2000 5000] [--cat 100 500 1000] [--runs N]

Each cold figure runs in a fresh process with an empty program cache: plygrad's disk cache in a new temporary
folder (PLYGRAD_CACHE_DIR) and tinygrad's in a new cache database (CACHEDB), so every kernel is compiled. Before
the clock starts the process realizes one tiny op, so imports and the one-time C compiler probe are not counted:
the figure is what the graph itself costs, from building it to its values in NumPy. The warm figure is the median
of N more runs of the same graph in that process (kernels come from the in-memory cache). The chain cycles
through multiply, add, relu and subtract with a constant that changes every op, so no two kernels cut from it are
the same program; the cat pieces are `Tensor.ones(4) * i`. No timing is asserted: this prints a table to read.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from tinygrad_clang import ensure_clang  # bench/, this script's folder

# tinygrad: use its CPU device (0.14 reads DEV; older releases CPU=1), read when tinygrad is imported
os.environ.setdefault("DEV", "CPU")
os.environ.setdefault("CPU", "1")

Build = Callable[[int], Callable[[], Any]]


def chain_constant(i: int) -> float:
    return 1.0 + (i % 997) * 1e-6


def lazy_cases(tensor: Any) -> dict[str, Build]:
    """The cases for a tinygrad-style lazy Tensor class (tinygrad's and plygrad's share the API by design)."""
    import numpy as np

    data = np.random.default_rng(0).standard_normal(1024).astype(np.float32)

    def chain(n: int) -> Callable[[], Any]:
        def run() -> Any:
            y = tensor(data)
            for i in range(n):
                c, step = chain_constant(i), i % 4
                y = y * c if step == 0 else y + c if step == 1 else y.relu() if step == 2 else y - c
            return y.numpy()
        return run

    def cat(n: int) -> Callable[[], Any]:
        return lambda: tensor.cat(*[tensor.ones(4) * i for i in range(n)]).numpy()

    return {"chain": chain, "cat": cat}


def torch_cases() -> dict[str, Build]:
    import numpy as np
    import torch

    data = torch.from_numpy(np.random.default_rng(0).standard_normal(1024).astype(np.float32))

    def chain(n: int) -> Callable[[], Any]:
        def run() -> Any:
            y = data
            for i in range(n):
                c, step = chain_constant(i), i % 4
                y = y * c if step == 0 else y + c if step == 1 else torch.relu(y) if step == 2 else y - c
            return y.numpy()
        return run

    def cat(n: int) -> Callable[[], Any]:
        return lambda: torch.cat([torch.ones(4) * i for i in range(n)]).numpy()

    return {"chain": chain, "cat": cat}


def cases_for(lib: str) -> dict[str, Build]:
    if lib == "plygrad":
        from plygrad.frontend import Tensor

        return lazy_cases(Tensor)
    if lib == "tinygrad":
        from tinygrad import Device
        from tinygrad import Tensor as TinyTensor

        if Device.DEFAULT != "CPU":
            raise ImportError(f"tinygrad picked device {Device.DEFAULT}, not CPU (set DEV=CPU)")
        return lazy_cases(TinyTensor)
    return torch_cases()


def measure_here(lib: str, case: str, n: int, runs: int) -> dict[str, float]:
    """In this (fresh) process: one tiny op to warm up, then the cold run and the median of `runs` warm ones."""
    cases = cases_for(lib)
    cases["cat"](2)()  # imports, device and compiler set-up: not part of any graph's cost
    run = cases[case](n)
    start = time.perf_counter()
    run()
    cold = time.perf_counter() - start
    warm = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        warm.append(time.perf_counter() - start)
    return {"cold": cold, "warm": statistics.median(warm)}


def measure(lib: str, case: str, n: int, runs: int, timeout: float) -> dict[str, float] | str:
    """`measure_here` in a child process with empty program caches, or why it gave no figure."""
    with tempfile.TemporaryDirectory(prefix="plygrad-graph-bench-") as folder:
        env = dict(os.environ, PLYGRAD_CACHE_DIR=os.path.join(folder, "plygrad"),
                   CACHEDB=os.path.join(folder, "tinygrad.db"))
        command = [sys.executable, __file__, "--child", lib, case, str(n), "--runs", str(runs)]
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return f"over {timeout:.0f} s"
        if done.returncode != 0:
            lines = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()
            return lines[-1][:160]
        result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chain", type=int, nargs="*", default=[500, 1000, 2000, 5000], help="chain lengths")
    parser.add_argument("--cat", type=int, nargs="*", default=[100, 500, 1000], help="numbers of cat pieces")
    parser.add_argument("--runs", type=int, default=3, help="warm runs per figure (median)")
    parser.add_argument("--libs", nargs="*", default=["plygrad", "torch", "tinygrad"], help="libraries to run")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a figure is given up")
    parser.add_argument("--child", nargs=3, metavar=("LIB", "CASE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        lib, case, n = args.child
        print(json.dumps(measure_here(lib, case, int(n), args.runs)))
        return

    clang_note = ensure_clang()  # before the children start: they inherit PATH
    sizes = [("chain", n) for n in args.chain] + [("cat", n) for n in args.cat]
    results: dict[tuple[str, str, int], dict[str, float] | str] = {}
    for lib in args.libs:
        for case, n in sizes:
            results[lib, case, n] = figure = measure(lib, case, n, args.runs, args.timeout)
            shown = figure if isinstance(figure, str) else f"cold {figure['cold']:.3f} s, warm {figure['warm']:.3f} s"
            print(f"  {lib:9s} {case:6s} {n:6d}  {shown}", file=sys.stderr, flush=True)

    import numpy as np

    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
          f"{platform.system()} {platform.release()}, Python {platform.python_version()}, NumPy {np.__version__}")
    print(f"seconds, from building the graph to its values; cold: first run with empty program caches; warm: median "
          f"of {args.runs} more runs")
    if clang_note:
        print(f"note: {clang_note}")
    print()
    columns = " | ".join(f"{lib + ' cold':>15s} | {lib + ' warm':>15s}" for lib in args.libs)
    print(f"| {'graph':22s} | {columns} |")
    print("|" + "-" * 24 + "|" + "|".join("-" * 17 + "|" + "-" * 17 for _ in args.libs) + "|")
    notes: list[str] = []
    for case, n in sizes:
        label = f"{n} elementwise ops" if case == "chain" else f"cat of {n} x (4,)"
        cells = []
        for lib in args.libs:
            figure = results[lib, case, n]
            if isinstance(figure, str):
                cells += [f"{'n/a':>15s}", f"{'n/a':>15s}"]
                notes.append(f"{lib} {label}: {figure}")
            else:
                cells += [f"{figure['cold']:15.3f}", f"{figure['warm']:15.3f}"]
        print(f"| {label:22s} | " + " | ".join(cells) + " |")
    for note in notes:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
