"""Tensor-op benchmarks: plygrad (frontend -> scheduler -> codegen -> CPU backend) beside NumPy, PyTorch (CPU)
and tinygrad (CPU device), all measured in the same run on the same machine.

Run: python bench/ops_bench.py [--runs N] [--quick]

Figures are medians of N timed runs after one warm-up run (which compiles plygrad's and tinygrad's kernels; the
program caches serve the timed runs). Each timed run includes building the lazy graph and scheduling it, since that
is what a user pays per call: `plygrad`'s `.realize()` and tinygrad's `.realize()` return after the work is done on
the CPU. Bandwidth counts the bytes each op must read and write once; matmul counts 2*n^3 flops. Eager overhead is
one realized `x + 1` on a 16-element tensor. No timing is asserted: this prints a table to read and compare.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

# tinygrad: use its CPU device (0.14 reads DEV; older releases CPU=1), read when tinygrad is imported
os.environ.setdefault("DEV", "CPU")
os.environ.setdefault("CPU", "1")

import numpy as np

from plygrad.frontend import Tensor

Runner = Callable[[], Any]


def median_seconds(fn: Runner, runs: int) -> float:
    fn()  # warm-up: compiles, fills caches
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def numpy_cases(arrays: dict[str, np.ndarray[Any, Any]]) -> dict[str, Runner]:
    a, b, c, big = arrays["a"], arrays["b"], arrays["c"], arrays["big"]

    def softmax() -> Any:
        e = np.exp(big - big.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    cases: dict[str, Runner] = {
        "elementwise": lambda: np.maximum((a + b) * c, 0), "sum": big.sum, "softmax": softmax,
        "eager": lambda: arrays["small"] + 1,
    }
    for n in MATMUL_SIZES:
        cases[f"matmul{n}"] = lambda n=n: arrays[f"m{n}"] @ arrays[f"m{n}"]
    return cases


def torch_cases(arrays: dict[str, np.ndarray[Any, Any]]) -> dict[str, Runner]:
    import torch

    t = {k: torch.from_numpy(v) for k, v in arrays.items()}
    cases: dict[str, Runner] = {
        "elementwise": lambda: torch.relu((t["a"] + t["b"]) * t["c"]), "sum": t["big"].sum,
        "softmax": lambda: torch.softmax(t["big"], 1), "eager": lambda: t["small"] + 1,
    }
    for n in MATMUL_SIZES:
        cases[f"matmul{n}"] = lambda n=n: t[f"m{n}"] @ t[f"m{n}"]
    return cases


def lazy_tensor_cases(make: Callable[[np.ndarray[Any, Any]], Any]) -> Callable[..., dict[str, Runner]]:
    """The cases for a tinygrad-style lazy Tensor API (tinygrad's and plygrad's are the same by design): `make`
    turns an array into a realized tensor, every case ends in `.realize()`."""

    def cases_for(arrays: dict[str, np.ndarray[Any, Any]]) -> dict[str, Runner]:
        t = {k: make(v) for k, v in arrays.items()}
        cases: dict[str, Runner] = {
            "elementwise": lambda: ((t["a"] + t["b"]) * t["c"]).relu().realize(),
            "sum": lambda: t["big"].sum().realize(),
            "softmax": lambda: t["big"].softmax(1).realize(),
            "eager": lambda: (t["small"] + 1).realize(),  # noqa: PLW0108 - a new graph each call
        }
        for n in MATMUL_SIZES:
            cases[f"matmul{n}"] = lambda n=n: (t[f"m{n}"] @ t[f"m{n}"]).realize()
        return cases

    return cases_for


def tinygrad_cases(arrays: dict[str, np.ndarray[Any, Any]]) -> dict[str, Runner]:
    from tinygrad import Device
    from tinygrad import Tensor as TinyTensor

    if Device.DEFAULT != "CPU":
        raise ImportError(f"tinygrad picked device {Device.DEFAULT}, not CPU (set DEV=CPU)")
    return lazy_tensor_cases(lambda a: TinyTensor(a).realize())(arrays)


def plygrad_cases(arrays: dict[str, np.ndarray[Any, Any]]) -> dict[str, Runner]:
    return lazy_tensor_cases(lambda a: Tensor(a).realize())(arrays)


MATMUL_SIZES = (512, 1024, 2048)
ELEMENTS = 16 * 1024 * 1024
SIDE = 4096
F32 = 4
# case -> (label, unit, amount of work per run in that unit's base: bytes for GB/s, flops for GFLOP/s, 1 for us)
WORK: dict[str, tuple[str, str, float]] = {
    "elementwise": ("relu((a+b)*c), 16M float32", "GB/s", 4 * ELEMENTS * F32),
    "sum": ("sum of 4096x4096 float32", "GB/s", SIDE * SIDE * F32),
    "softmax": ("softmax(axis=1) of 4096x4096", "GB/s", 2 * SIDE * SIDE * F32),
    **{f"matmul{n}": (f"matmul {n}x{n} float32", "GFLOP/s", 2.0 * n**3) for n in MATMUL_SIZES},
    "eager": ("one small realized op (x+1, 16 elements)", "us", 1.0),
}


def figure(case: str, seconds: float) -> str:
    unit, work = WORK[case][1], WORK[case][2]
    if unit == "us":
        return f"{seconds * 1e6:10.1f}"
    return f"{work / seconds / 1e9:10.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per figure (median)")
    parser.add_argument("--quick", action="store_true", help="skip matmul 2048 (slow on a small machine)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    arrays = {k: rng.standard_normal(ELEMENTS, dtype=np.float32) for k in "abc"}
    arrays["big"] = rng.standard_normal((SIDE, SIDE), dtype=np.float32)
    arrays["small"] = rng.standard_normal(16, dtype=np.float32)
    sizes = MATMUL_SIZES[:-1] if args.quick else MATMUL_SIZES
    for n in sizes:
        arrays[f"m{n}"] = rng.standard_normal((n, n), dtype=np.float32)
    cases = [c for c in WORK if not c.startswith("matmul") or int(c[6:]) in sizes]

    libraries: dict[str, Callable[[dict[str, np.ndarray[Any, Any]]], dict[str, Runner]]] = {
        "numpy": numpy_cases, "torch": torch_cases, "tinygrad": tinygrad_cases, "plygrad": plygrad_cases,
    }
    results: dict[str, dict[str, str]] = {}
    notes: list[str] = []
    for lib, make in libraries.items():
        results[lib] = {c: f"{'n/a':>10}" for c in cases}
        try:
            runners = make(arrays)
            for case in cases:
                runs = max(1, args.runs if not case.startswith("matmul2048") else min(args.runs, 3))
                runs = runs * 20 if case == "eager" else runs
                results[lib][case] = figure(case, median_seconds(runners[case], runs))
                print(f"  {lib:9s} {case:12s} {results[lib][case].strip()}", file=sys.stderr, flush=True)
        except Exception as exc:  # a library that cannot run here (e.g. tinygrad's CPU device needs clang)
            cause = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            notes.append(f"{lib}: n/a from here on ({cause})")

    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
          f"{platform.system()} {platform.release()}, Python {platform.python_version()}, NumPy {np.__version__}")
    print(f"medians of {args.runs} runs after a warm-up (eager: {args.runs * 20} runs); higher is better except us")
    print()
    header = f"| {'op':44s} | {'unit':7s} | " + " | ".join(f"{lib:>10s}" for lib in libraries) + " |"
    print(header)
    print("|" + "-" * 46 + "|" + "-" * 9 + "|" + "|".join("-" * 12 for _ in libraries) + "|")
    for case in cases:
        label, unit, _ = WORK[case]
        print(f"| {label:44s} | {unit:7s} | " + " | ".join(results[lib][case] for lib in libraries) + " |")
    for note in notes:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
