"""GPU benchmarks: plygrad on its NV backend beside PyTorch CUDA, measured in the same run on the same GPU.

Run: python bench/gpu_bench.py [--runs N] [--device NV]

Where no GPU opens (no NVIDIA driver, or plygrad-nv not installed) it prints "no GPU" with the reason and exits 0.
Cases: an elementwise op (GB/s, beside a plain device-to-device copy in PyTorch, the bandwidth ceiling a kernel can
reach), a full sum and a row sum, softmax over rows, float32 and float16 matmul 4096 (TFLOP/s, beside cuBLAS through
PyTorch), and one MLP training step (784-512-512-10, batch 256, Adam). Figures are medians of N runs after a warm-up
(which compiles plygrad's kernels); every timed run ends with a synchronize (plygrad: `.realize()` then the device's
`synchronize`; PyTorch: `torch.cuda.synchronize()`). No timing is asserted anywhere: this prints a table to read.
Targets on an H100 (issue 8): elementwise >= 85% of PyTorch's copy bandwidth, float16 matmul >= 70% of cuBLAS.
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

import numpy as np

Runner = Callable[[], Any]
ELEMENTS = 1 << 26  # 64M float32 elements: 256 MiB per operand, far past any cache
ROWS, COLS = 8192, 8192
MATMUL = 4096


def median_seconds(fn: Runner, sync: Runner, runs: int) -> float:
    fn()
    sync()  # warm-up: compiles, fills caches
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def open_plygrad(device: str) -> tuple[Any, Any] | str:
    """(Tensor class, backend) on `device`, or why it cannot run there."""
    try:
        from plygrad.frontend import Tensor
        from plygrad.runtime import BackendError, Device
    except ImportError as exc:
        return f"plygrad is not installed ({exc})"
    try:
        return Tensor, Device[device]
    except BackendError as exc:
        return str(exc)


def open_torch() -> Any | str:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return torch


def plygrad_cases(tensor: Any, device: str) -> dict[str, tuple[Runner, float]]:
    """name -> (runner, work units per run: bytes for GB/s cases, flops for TFLOP/s cases)."""
    from plygrad.frontend import dtypes, nn

    rng = np.random.default_rng(0)
    a, b = (tensor(rng.random(ELEMENTS, dtype=np.float32), device=device).realize() for _ in range(2))
    big = tensor(rng.random((ROWS, COLS), dtype=np.float32), device=device).realize()
    m32 = tensor(rng.random((MATMUL, MATMUL), dtype=np.float32), device=device).realize()
    m16 = m32.cast(dtypes.float16).realize()
    cases: dict[str, tuple[Runner, float]] = {
        "elementwise": (lambda: ((a + b) * 2.0).relu().realize(), 3 * 4 * ELEMENTS),
        "sum": (lambda: big.sum().realize(), 4 * ROWS * COLS),
        "row sum": (lambda: big.sum(1).realize(), 4 * ROWS * COLS),
        "softmax": (lambda: big.softmax(1).realize(), 2 * 4 * ROWS * COLS),
        # a lambda, not a bound method: each run must build (and so compute) the product again
        "matmul fp32": (lambda: (m32 @ m32).realize(), 2 * MATMUL**3),  # noqa: PLW0108
        "matmul fp16": (lambda: (m16 @ m16).realize(), 2 * MATMUL**3),  # noqa: PLW0108
    }

    class MLP:
        def __init__(self) -> None:
            self.l1, self.l2, self.l3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

        def __call__(self, x: Any) -> Any:
            return self.l3(self.l2(self.l1(x).relu()).relu())

    model = MLP()  # its weights are made on the default device, which main() sets to the measured one
    opt = nn.optim.Adam(nn.state.get_parameters(model), lr=1e-3)
    x = tensor(rng.random((256, 784), dtype=np.float32), device=device)
    y = tensor(rng.integers(0, 10, 256).astype(np.int32), device=device)

    def step() -> Any:
        with tensor.train():
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y)
            loss.backward()
            opt.step()
            return loss.realize()

    cases["MLP step"] = (step, 0.0)
    return cases


def torch_cases(torch: Any) -> dict[str, tuple[Runner, float]]:
    dev = "cuda"
    a, b = torch.rand(ELEMENTS, device=dev), torch.rand(ELEMENTS, device=dev)
    out = torch.empty_like(a)
    big = torch.rand(ROWS, COLS, device=dev)
    m32 = torch.rand(MATMUL, MATMUL, device=dev)
    m16 = m32.half()
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.rand(256, 784, device=dev), torch.randint(0, 10, (256,), device=dev)

    def step() -> Any:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return {
        "copy (ceiling)": (lambda: out.copy_(a), 2 * 4 * ELEMENTS),
        "elementwise": (lambda: torch.relu((a + b) * 2.0), 3 * 4 * ELEMENTS),
        "sum": (big.sum, 4 * ROWS * COLS),
        "row sum": (lambda: big.sum(1), 4 * ROWS * COLS),
        "softmax": (lambda: big.softmax(1), 2 * 4 * ROWS * COLS),
        "matmul fp32": (lambda: m32 @ m32, 2 * MATMUL**3),
        "matmul fp16": (lambda: m16 @ m16, 2 * MATMUL**3),
        "MLP step": (step, 0.0),
    }


def figure(name: str, seconds: float, work: float) -> str:
    if name.startswith("matmul"):
        return f"{work / seconds / 1e12:.2f} TFLOP/s"
    if work:
        return f"{work / seconds / 1e9:.1f} GB/s"
    return f"{seconds * 1e3:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--device", default="NV", help="the plygrad device to measure (default NV)")
    args = parser.parse_args()
    os.environ["PLYGRAD_DEVICE"] = args.device  # every tensor the cases make (model weights too) lives there
    opened = open_plygrad(args.device)
    if isinstance(opened, str):
        print(f"no GPU: plygrad cannot open {args.device}: {opened}")
        sys.exit(0)
    tensor, backend = opened
    torch = open_torch()
    results: dict[str, dict[str, str]] = {}
    ours = plygrad_cases(tensor, args.device)
    for name, (fn, work) in ours.items():
        try:
            results.setdefault(name, {})["plygrad"] = figure(name, median_seconds(fn, backend.synchronize,
                                                                                  args.runs), work)
        except Exception as exc:  # a case plygrad cannot run yet is reported, not fatal
            results.setdefault(name, {})["plygrad"] = f"failed: {type(exc).__name__}: {str(exc)[:60]}"
    if isinstance(torch, str):
        print(f"note: {torch}; PyTorch columns are n/a")
    else:
        for name, (fn, work) in torch_cases(torch).items():
            results.setdefault(name, {})["torch"] = figure(name, median_seconds(fn, torch.cuda.synchronize,
                                                                                args.runs), work)
    print(f"command: python bench/gpu_bench.py --runs {args.runs} --device {args.device}")
    print(f"machine: {platform.machine()}, {backend.name}: {getattr(backend, 'device_name', '?')}, Python "
          f"{platform.python_version()}")
    print(f"medians of {args.runs} runs after a warm-up\n")
    print(f"| {'case':<16} | {'plygrad':>24} | {'torch':>16} |")
    print(f"|{'-' * 18}|{'-' * 26}|{'-' * 18}|")
    for name, row in results.items():
        print(f"| {name:<16} | {row.get('plygrad', 'n/a'):>24} | {row.get('torch', 'n/a'):>16} |")


if __name__ == "__main__":
    main()
