"""Tensor-op benchmarks: plygrad (frontend -> scheduler -> codegen -> CPU backend) beside NumPy, PyTorch (CPU)
and tinygrad (CPU device), all measured in the same run on the same machine.

Run: python bench/ops_bench.py [--runs N] [--quick] [--only CASE ...] [--json FILE] [--beam N] [--interleave
[--block K]]

Figures are medians of N timed runs after warm-up runs (at least WARMUP_RUNS, and at least WARMUP_S seconds of
them): the first compiles plygrad's and tinygrad's kernels, and the program caches serve the rest; the others let
the memory a library touches and its worker threads settle. On the 2-core virtual machines here a 64 MB sum took 3-7
ms on its first calls and settled at 1.4 ms (PyTorch) and 1.8 ms (plygrad) after tens of calls, in each library;
with one warm-up run the median measured that ramp. The libraries take turns case by case (every library runs a case
before the next case starts), so a machine that gets busier or quieter during the run shifts all of one case's
figures together and the ratios between libraries stay comparable. Each timed run includes building the lazy graph
and scheduling it, since that is what a user pays per call: `plygrad`'s `.realize()` and tinygrad's `.realize()`
return after the work is done on the CPU. Bandwidth counts the bytes each op must read and write once; matmul-shaped
cases count 2 flops per multiply-add. Eager overhead is one realized `x + 1` on a 16-element tensor.

The cases the CPU work (issue #9) tracks: matmul 1024/2048, a transformer's linear layer `x @ W` with x of
(8, 128, 384) and W of (384, 1536), its attention scores `q @ k^T` for 8 x 12 heads of (128, 64), layernorm of
4096 x 4096, and a 3x3 conv2d of a (32, 64, 56, 56) batch with 64 output channels (padding 1). `--json FILE` also
writes every figure as a list of `{"case", "unit", "lib", "median"}` (median: the figure in that unit, null where
the library has no such case or failed) so runs of different commits can be compared by a script. `--beam N`
runs plygrad's kernels with BEAM=N (each kernel searched once per machine, a minute at most by default, then read
from the program cache; the warm-up call pays for the search), NumPy, PyTorch and tinygrad as they are.
`--interleave` has the libraries take turns call by call within a case (every library's calls meet the same spells
of a machine whose memory bandwidth doubles and halves every few seconds; the 64 MB sum is the case that needs it).
It suits single-pass memory-bound cases: the previous library's worker threads (OpenBLAS after NumPy's matmul)
still spin when the next call starts, and every call meets caches the others evicted (torch's matmul 1024 read
76-82 GFLOP/s interleaved, ~190 in turns; x+1 25-73 us). `--block K` makes each turn K calls of one library and
times the last half of them: those follow the library's own calls, after the previous library's threads stopped
spinning (torch's and plygrad's OpenMP threads spin for milliseconds after a call; on a 2-core machine a call then
shares the cores with a third thread), while turns still alternate within tens of milliseconds.
No timing is asserted: this prints a table to read and compare.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

# tinygrad: use its CPU device (0.14 reads DEV; older releases CPU=1), read when tinygrad is imported
os.environ.setdefault("DEV", "CPU")
os.environ.setdefault("CPU", "1")

import numpy as np
from tinygrad_clang import ensure_clang  # bench/, this script's folder

from plygrad.frontend import Tensor

Runner = Callable[[], Any]
Arrays = dict[str, np.ndarray[Any, Any]]

MATMUL_SIZES = (512, 1024, 2048)
ELEMENTS = 16 * 1024 * 1024
SIDE = 4096
F32 = 4
LINEAR = (8, 128, 384, 1536)  # batch, tokens, features in, features out
HEADS, TOKENS, HEAD_DIM = 8 * 12, 128, 64
CONV = (32, 64, 56, 64, 3)  # batch, channels in, side, channels out, kernel side
# a pause before each library's turn: the previous one's worker threads (OpenMP, OpenBLAS) spin-wait for a while
# after their last parallel region, and would take cores from the next library's first runs
SETTLE_S = 0.2
# case -> (label, unit, amount of work per run in that unit's base: bytes for GB/s, flops for GFLOP/s, 1 for us)
WORK: dict[str, tuple[str, str, float]] = {
    "elementwise": ("relu((a+b)*c), 16M float32", "GB/s", 4 * ELEMENTS * F32),
    "sum": ("sum of 4096x4096 float32", "GB/s", SIDE * SIDE * F32),
    "softmax": ("softmax(axis=1) of 4096x4096", "GB/s", 2 * SIDE * SIDE * F32),
    "layernorm": ("layernorm(axis=1) of 4096x4096", "GB/s", 2 * SIDE * SIDE * F32),
    **{f"matmul{n}": (f"matmul {n}x{n} float32", "GFLOP/s", 2.0 * n**3) for n in MATMUL_SIZES},
    "linear": ("linear (8,128,384) @ (384,1536)", "GFLOP/s", 2.0 * LINEAR[0] * LINEAR[1] * LINEAR[2] * LINEAR[3]),
    "attention": ("q @ k^T, 96 heads of (128,64)", "GFLOP/s", 2.0 * HEADS * TOKENS * TOKENS * HEAD_DIM),
    "conv2d": ("conv2d 32x64x56^2, 64 out, 3x3, pad 1", "GFLOP/s",
               2.0 * CONV[0] * CONV[3] * CONV[2] ** 2 * CONV[1] * CONV[4] ** 2),
    "eager": ("one small realized op (x+1, 16 elements)", "us", 1.0),
}


def write_json(rows: list[dict[str, Any]], target: str) -> None:
    """The figures as JSON rows into `target` ('-': standard output), for comparing runs across commits."""
    text = json.dumps(rows, indent=1)
    if target == "-":
        print(text)
    else:
        with open(target, "w", encoding="utf-8") as f:
            f.write(text + "\n")


WARMUP_RUNS = 5
WARMUP_S = 0.5


def warm_up(fn: Runner) -> None:
    start = time.perf_counter()
    done = 0
    while done < WARMUP_RUNS or time.perf_counter() - start < WARMUP_S:  # compiles, fills caches, settles
        fn()
        done += 1


def median_seconds(fn: Runner, runs: int) -> float:
    warm_up(fn)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def make_arrays(sizes: tuple[int, ...]) -> Arrays:
    rng = np.random.default_rng(0)
    arrays = {k: rng.standard_normal(ELEMENTS, dtype=np.float32) for k in "abc"}
    arrays["big"] = rng.standard_normal((SIDE, SIDE), dtype=np.float32)
    arrays["small"] = rng.standard_normal(16, dtype=np.float32)
    for n in sizes:
        arrays[f"m{n}"] = rng.standard_normal((n, n), dtype=np.float32)
    batch, tokens, features, out = LINEAR
    arrays["x"] = rng.standard_normal((batch, tokens, features), dtype=np.float32)
    arrays["w"] = rng.standard_normal((features, out), dtype=np.float32)
    arrays["q"] = rng.standard_normal((HEADS, TOKENS, HEAD_DIM), dtype=np.float32)
    arrays["k"] = rng.standard_normal((HEADS, TOKENS, HEAD_DIM), dtype=np.float32)
    n, cin, side, cout, ks = CONV
    arrays["image"] = rng.standard_normal((n, cin, side, side), dtype=np.float32)
    arrays["kernel"] = rng.standard_normal((cout, cin, ks, ks), dtype=np.float32)
    return arrays


def numpy_cases(arrays: Arrays) -> dict[str, Runner]:
    a, b, c, big = arrays["a"], arrays["b"], arrays["c"], arrays["big"]

    def softmax() -> Any:
        e = np.exp(big - big.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    def layernorm() -> Any:
        mean = big.mean(1, keepdims=True)
        return (big - mean) / np.sqrt(big.var(1, keepdims=True) + 1e-5)

    cases: dict[str, Runner] = {
        "elementwise": lambda: np.maximum((a + b) * c, 0), "sum": big.sum, "softmax": softmax, "layernorm": layernorm,
        "linear": lambda: arrays["x"] @ arrays["w"], "attention": lambda: arrays["q"] @ arrays["k"].transpose(0, 2, 1),
        "eager": lambda: arrays["small"] + 1,
    }
    for n in MATMUL_SIZES:
        if f"m{n}" in arrays:
            cases[f"matmul{n}"] = lambda n=n: arrays[f"m{n}"] @ arrays[f"m{n}"]
    return cases  # no conv2d in NumPy


def torch_cases(arrays: Arrays) -> dict[str, Runner]:
    import torch

    t = {k: torch.from_numpy(v) for k, v in arrays.items()}
    cases: dict[str, Runner] = {
        "elementwise": lambda: torch.relu((t["a"] + t["b"]) * t["c"]), "sum": t["big"].sum,
        "softmax": lambda: torch.softmax(t["big"], 1),
        "layernorm": lambda: torch.nn.functional.layer_norm(t["big"], (SIDE,)),
        "linear": lambda: t["x"] @ t["w"], "attention": lambda: t["q"] @ t["k"].transpose(1, 2),
        "conv2d": lambda: torch.nn.functional.conv2d(t["image"], t["kernel"], padding=1),
        "eager": lambda: t["small"] + 1,
    }
    for n in MATMUL_SIZES:
        if f"m{n}" in t:
            cases[f"matmul{n}"] = lambda n=n: t[f"m{n}"] @ t[f"m{n}"]
    return cases


def lazy_tensor_cases(make: Callable[[np.ndarray[Any, Any]], Any]) -> Callable[[Arrays], dict[str, Runner]]:
    """The cases for a tinygrad-style lazy Tensor API (tinygrad's and plygrad's are the same by design): `make`
    turns an array into a realized tensor, every case ends in `.realize()`."""

    def cases_for(arrays: Arrays) -> dict[str, Runner]:
        t = {k: make(v) for k, v in arrays.items()}
        cases: dict[str, Runner] = {
            "elementwise": lambda: ((t["a"] + t["b"]) * t["c"]).relu().realize(),
            "sum": lambda: t["big"].sum().realize(),
            "softmax": lambda: t["big"].softmax(1).realize(),
            "layernorm": lambda: t["big"].layernorm(1).realize(),
            "linear": lambda: (t["x"] @ t["w"]).realize(),  # noqa: PLW0108 - a new graph each call
            "attention": lambda: (t["q"] @ t["k"].transpose(1, 2)).realize(),  # noqa: PLW0108
            "conv2d": lambda: t["image"].conv2d(t["kernel"], padding=1).realize(),
            "eager": lambda: (t["small"] + 1).realize(),  # noqa: PLW0108 - a new graph each call
        }
        for n in MATMUL_SIZES:
            if f"m{n}" in t:
                cases[f"matmul{n}"] = lambda n=n: (t[f"m{n}"] @ t[f"m{n}"]).realize()
        return cases

    return cases_for


def tinygrad_cases(arrays: Arrays) -> dict[str, Runner]:
    from tinygrad import Device
    from tinygrad import Tensor as TinyTensor

    if Device.DEFAULT != "CPU":
        raise ImportError(f"tinygrad picked device {Device.DEFAULT}, not CPU (set DEV=CPU)")
    return lazy_tensor_cases(lambda a: TinyTensor(a).realize())(arrays)


def plygrad_cases(arrays: Arrays) -> dict[str, Runner]:
    return lazy_tensor_cases(lambda a: Tensor(a).realize())(arrays)


def figure(case: str, seconds: float) -> float:
    unit, work = WORK[case][1], WORK[case][2]
    return seconds * 1e6 if unit == "us" else work / seconds / 1e9


LIBRARIES: dict[str, Callable[[Arrays], dict[str, Runner]]] = {
    "numpy": numpy_cases, "torch": torch_cases, "tinygrad": tinygrad_cases, "plygrad": plygrad_cases,
}


@contextlib.contextmanager
def plygrad_beam(width: int) -> Iterator[None]:
    """BEAM=width in the environment for the duration (plygrad reads it at each kernel's first lowering)."""
    if width <= 0:
        yield
        return
    before = os.environ.get("BEAM")
    os.environ["BEAM"] = str(width)
    try:
        yield
    finally:
        if before is None:
            del os.environ["BEAM"]
        else:
            os.environ["BEAM"] = before


def timed_runs(case: str, runs: int) -> int:
    """Timed runs of `case`: matmul 2048 at most 3 (seconds each in tinygrad), the eager op 20x (microseconds)."""
    n = max(1, runs if not case.startswith("matmul2048") else min(runs, 3))
    return n * 20 if case == "eager" else n


def failure(exc: Exception) -> str:
    """A table note for a library or case that failed: n/a and the error's first line."""
    return f"n/a ({f'{type(exc).__name__}: {exc}'.splitlines()[0][:200]})"


def make_runners(arrays: Arrays) -> tuple[dict[str, dict[str, Runner]], list[str]]:
    """Each library's cases over `arrays`, and notes on the libraries that cannot run here."""
    notes = [note for note in (ensure_clang(),) if note]
    runners: dict[str, dict[str, Runner]] = {}
    for lib, make in LIBRARIES.items():
        try:
            runners[lib] = make(arrays)
        except Exception as exc:  # a library that cannot run here (e.g. tinygrad's CPU device needs clang)
            notes.append(f"{lib}: {failure(exc)}")
    return runners, notes


def measure(cases: list[str], arrays: Arrays, runs: int,
            beam: int = 0) -> tuple[dict[str, dict[str, float | None]], list[str]]:
    """Every library's figure for every case (None: the library has no such case or it failed), case by case.
    `beam`: plygrad's BEAM width, set only while plygrad runs (tinygrad reads its own BEAM once, at import)."""
    results: dict[str, dict[str, float | None]] = {lib: dict.fromkeys(cases) for lib in LIBRARIES}
    runners, notes = make_runners(arrays)
    for case in cases:
        for lib, lib_runners in runners.items():
            if case not in lib_runners:
                continue
            time.sleep(SETTLE_S)
            n = timed_runs(case, runs)
            try:
                with plygrad_beam(beam if lib == "plygrad" else 0):
                    results[lib][case] = figure(case, median_seconds(lib_runners[case], n))
            except Exception as exc:
                notes.append(f"{lib} {case}: {failure(exc)}")
                continue
            print(f"  {lib:9s} {case:12s} {results[lib][case]:.2f}", file=sys.stderr, flush=True)
    return results, notes


def measure_interleaved(cases: list[str], arrays: Arrays, runs: int, beam: int = 0,
                        block: int = 1) -> tuple[dict[str, dict[str, float | None]], list[str]]:
    """As `measure`, but the libraries take turns within a case: each library warms up on it, then every timed round
    runs each library's call `block` times in a row, of which the last `timed_per_turn(block)` are timed. A machine
    whose memory bandwidth changes by 2x every few seconds (the virtual machines here) then slows every library's
    calls alike, where turns case by case let one library's whole figure land in a fast spell and the next one's in
    a slow one. With `block` 1 every call follows another library's; longer turns time the calls that follow the
    library's own, after the previous library's OpenMP threads stopped spinning (torch's and plygrad's spin for
    milliseconds after a call: a 2-core machine then runs three threads) and its caches were refilled."""
    results: dict[str, dict[str, float | None]] = {lib: dict.fromkeys(cases) for lib in LIBRARIES}
    runners, notes = make_runners(arrays)
    for case in cases:
        n = timed_runs(case, runs)
        taking = {}
        for lib, lib_runners in runners.items():
            if case not in lib_runners:
                continue
            try:
                with plygrad_beam(beam if lib == "plygrad" else 0):
                    warm_up(lib_runners[case])
                taking[lib] = lib_runners[case]
            except Exception as exc:
                notes.append(f"{lib} {case}: {failure(exc)}")
        times: dict[str, list[float]] = {lib: [] for lib in taking}
        for _ in range(n):
            for lib, fn in taking.items():
                with plygrad_beam(beam if lib == "plygrad" else 0):
                    for call in range(block):
                        start = time.perf_counter()
                        fn()
                        if call >= block - timed_per_turn(block):
                            times[lib].append(time.perf_counter() - start)
        for lib, seconds in times.items():
            results[lib][case] = figure(case, statistics.median(seconds))
            print(f"  {lib:9s} {case:12s} {results[lib][case]:.2f}", file=sys.stderr, flush=True)
    return results, notes


def timed_per_turn(block: int) -> int:
    """How many of a turn's `block` calls `measure_interleaved` times: the last half, the first call at least
    untimed when there are several (it follows the previous library's)."""
    return 1 if block == 1 else max(1, block // 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per figure (median)")
    parser.add_argument("--quick", action="store_true", help="skip matmul 2048 (slow on a small machine)")
    parser.add_argument("--only", nargs="+", choices=sorted(WORK), help="run only these cases")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE ('-': stdout)")
    parser.add_argument("--beam", type=int, default=0, metavar="N",
                        help="plygrad's kernels with BEAM=N (searched once per machine, then read from the cache); "
                             "the other libraries as they are")
    parser.add_argument("--interleave", action="store_true",
                        help="libraries take turns call by call, not case by case (measure_interleaved)")
    parser.add_argument("--block", type=int, default=1, metavar="K",
                        help="with --interleave: each turn is K calls of one library, the last half of them timed")
    args = parser.parse_args()
    sizes = MATMUL_SIZES[:-1] if args.quick else MATMUL_SIZES
    cases = [c for c in WORK if not c.startswith("matmul") or int(c[6:]) in sizes]
    if args.only:
        cases = [c for c in cases if c in args.only]
    arrays = make_arrays(tuple(int(c[6:]) for c in cases if c.startswith("matmul")))
    if args.block < 1 or (args.block > 1 and not args.interleave):
        parser.error("--block K takes K >= 1, with --interleave")
    if args.interleave:
        results, notes = measure_interleaved(cases, arrays, args.runs, args.beam, args.block)
    else:
        results, notes = measure(cases, arrays, args.runs, args.beam)

    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
          f"{platform.system()} {platform.release()}, Python {platform.python_version()}, NumPy {np.__version__}")
    print(f"medians of {args.runs} runs after >= {WARMUP_RUNS} warm-up runs and >= {WARMUP_S} s of them "
          f"(eager: {args.runs * 20} runs); higher is better except us"
          + (f"; plygrad with BEAM={args.beam}" if args.beam > 0 else "")
          + ("" if not args.interleave else "; libraries interleaved call by call" if args.block == 1 else
             f"; libraries interleaved in turns of {args.block} calls, the last {timed_per_turn(args.block)} timed"))
    print()
    print(f"| {'op':44s} | {'unit':7s} | " + " | ".join(f"{lib:>10s}" for lib in LIBRARIES) + " |")
    print("|" + "-" * 46 + "|" + "-" * 9 + "|" + "|".join("-" * 12 for _ in LIBRARIES) + "|")
    for case in cases:
        label, unit, _ = WORK[case]
        cells = [f"{'n/a':>10}" if results[lib][case] is None else f"{results[lib][case]:10.2f}" for lib in LIBRARIES]
        print(f"| {label:44s} | {unit:7s} | " + " | ".join(cells) + " |")
    for note in notes:
        print(f"note: {note}")
    if args.json:
        rows = [{"case": case, "unit": WORK[case][1], "lib": lib, "median": results[lib][case]}
                for case in cases for lib in LIBRARIES]
        write_json(rows, args.json)


if __name__ == "__main__":
    main()
