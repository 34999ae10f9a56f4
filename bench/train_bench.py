"""Training benchmarks: an MLP training step (with and without TinyJit) and a conv2d forward, plygrad beside
PyTorch (CPU) and tinygrad (CPU device), all measured in the same run on the same machine.

Run: python bench/train_bench.py [--runs N]

- MLP step: 784-512-512-10 (ReLU), batch 128, cross-entropy (log_softmax of the logits against one-hot labels),
  backward, Adam (lr 1e-3). A step ends with the loss read back to the host (`.numpy()` / `.item()`), which is what
  a training loop waits for. "jit" is the same step under the library's TinyJit (PyTorch: n/a, it runs eagerly).
- conv2d forward: batch 32, 64 -> 64 channels, 56x56, 3x3, padding 1, float32, realized.

Figures are medians of N timed runs after warm-up runs (which compile kernels and, for the jit, record the step).
No timing is asserted: this prints a table to read and compare.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("DEV", "CPU")  # tinygrad 0.14 reads DEV (older releases CPU=1) when it is imported
os.environ.setdefault("CPU", "1")
os.environ.setdefault("TRAINING", "1")  # tinygrad 0.14's optimizers refuse to step unless its TRAINING flag is on

import numpy as np
from tinygrad_clang import ensure_clang  # bench/, this script's folder

Runner = Callable[[], Any]
BATCH, SIZES, CLASSES = 128, (784, 512, 512, 10), 10
CONV = (32, 64, 64, 56, 3)  # batch, in channels, out channels, side, kernel
WARMUP = 3


def median_ms(fn: Runner, runs: int) -> float:
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _data() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(0)
    weights = {}
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(SIZES)):
        bound = 1 / np.sqrt(fan_in)
        weights[f"w{i}"] = rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32)
        weights[f"b{i}"] = rng.uniform(-bound, bound, fan_out).astype(np.float32)
    labels = rng.integers(0, CLASSES, BATCH)
    return {
        **weights, "x": rng.standard_normal((BATCH, SIZES[0]), dtype=np.float32),
        "onehot": np.eye(CLASSES, dtype=np.float32)[labels],
        "img": rng.standard_normal((CONV[0], CONV[1], CONV[3], CONV[3]), dtype=np.float32),
        "kernel": (rng.standard_normal((CONV[2], CONV[1], CONV[4], CONV[4]), dtype=np.float32) * 0.05),
    }


def lazy_cases(tensor: Any, adam: Any, jit: Any, data: dict[str, np.ndarray[Any, Any]]) -> dict[str, Runner]:
    """The cases for a tinygrad-style Tensor API (plygrad's and tinygrad's are the same by design)."""
    params = [tensor(data[k]).realize() for k in ("w0", "b0", "w1", "b1", "w2", "b2")]
    for p in params:  # the attribute both APIs have (tinygrad 0.14's constructor takes no requires_grad)
        p.requires_grad = True
    opt = adam(params, lr=1e-3)
    x, onehot = tensor(data["x"]).realize(), tensor(data["onehot"]).realize()

    def step(x: Any, onehot: Any) -> Any:
        tensor.training = True  # the class flag both APIs have (tinygrad 0.14 has no Tensor.train context)
        opt.zero_grad()
        h = x
        for i in range(0, len(params), 2):
            h = h.linear(params[i].T, params[i + 1])
            h = h.relu() if i < len(params) - 2 else h
        loss = -(h.log_softmax(1) * onehot).sum(1).mean()
        loss.backward()
        opt.step()
        return loss.realize()

    jitted = jit(step)
    img, kernel = tensor(data["img"]).realize(), tensor(data["kernel"]).realize()
    return {
        "mlp": lambda: step(x, onehot).numpy(),
        "mlp_jit": lambda: jitted(x, onehot).numpy(),
        "conv": lambda: img.conv2d(kernel, padding=1).realize(),
    }


def plygrad_cases(data: dict[str, np.ndarray[Any, Any]]) -> dict[str, Runner]:
    from plygrad.frontend import Tensor
    from plygrad.frontend.jit import TinyJit
    from plygrad.frontend.nn.optim import Adam

    return lazy_cases(Tensor, Adam, TinyJit, data)


def tinygrad_cases(data: dict[str, np.ndarray[Any, Any]]) -> dict[str, Runner]:
    from tinygrad import Device, Tensor, TinyJit
    from tinygrad.nn.optim import Adam

    if Device.DEFAULT != "CPU":
        raise ImportError(f"tinygrad picked device {Device.DEFAULT}, not CPU (set DEV=CPU)")
    try:
        (Tensor([1.0]) + 1).numpy()
    except Exception as exc:
        cause = "needs clang" if shutil.which("clang") is None else f"{type(exc).__name__}: {exc}"
        raise ImportError(f"n/a ({cause})") from exc
    return lazy_cases(Tensor, Adam, TinyJit, data)


def torch_cases(data: dict[str, np.ndarray[Any, Any]]) -> dict[str, Runner]:
    import torch

    params = [torch.from_numpy(data[k].copy()).requires_grad_() for k in ("w0", "b0", "w1", "b1", "w2", "b2")]
    opt = torch.optim.Adam(params, lr=1e-3)
    x, onehot = torch.from_numpy(data["x"]), torch.from_numpy(data["onehot"])
    img, kernel = torch.from_numpy(data["img"]), torch.from_numpy(data["kernel"])

    def step() -> float:
        opt.zero_grad()
        h = x
        for i in range(0, len(params), 2):
            h = torch.nn.functional.linear(h, params[i], params[i + 1])
            h = h.relu() if i < len(params) - 2 else h
        loss = -(h.log_softmax(1) * onehot).sum(1).mean()
        loss.backward()
        opt.step()
        return loss.item()

    def conv() -> Any:
        with torch.no_grad():
            return torch.nn.functional.conv2d(img, kernel, padding=1)

    return {"mlp": step, "conv": conv}


CASES = {
    "mlp": "MLP 784-512-512-10 step, batch 128, Adam",
    "mlp_jit": "the same step under TinyJit",
    "conv": "conv2d fwd 32x64x56x56, 64 out, 3x3",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per figure (median)")
    args = parser.parse_args()
    data = _data()
    libraries = {"torch": torch_cases, "tinygrad": tinygrad_cases, "plygrad": plygrad_cases}
    results = {lib: {case: f"{'n/a':>10}" for case in CASES} for lib in libraries}
    notes = [note for note in (ensure_clang(),) if note]
    for lib, make in libraries.items():
        try:
            runners = make(data)
        except Exception as exc:  # a library that cannot run here (tinygrad's CPU device needs clang)
            notes.append(f"{lib}: {str(exc).splitlines()[0][:200]}")
            continue
        for case, runner in runners.items():
            try:
                results[lib][case] = f"{median_ms(runner, args.runs):10.2f}"
            except Exception as exc:
                notes.append(f"{lib} {case}: n/a ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})")
            print(f"  {lib:9s} {case:8s} {results[lib][case].strip()}", file=sys.stderr, flush=True)

    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
          f"{platform.system()} {platform.release()}, Python {platform.python_version()}, NumPy {np.__version__}")
    print(f"medians of {args.runs} runs after {WARMUP} warm-up runs, in ms (lower is better)")
    print()
    print(f"| {'case':44s} | " + " | ".join(f"{lib:>10s}" for lib in libraries) + " |")
    print("|" + "-" * 46 + "|" + "|".join("-" * 12 for _ in libraries) + "|")
    for case, label in CASES.items():
        print(f"| {label:44s} | " + " | ".join(results[lib][case] for lib in libraries) + " |")
    for note in notes:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
