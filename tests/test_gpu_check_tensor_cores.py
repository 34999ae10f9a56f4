"""Tensor cores end to end: float16/bfloat16 matmuls written with the frontend (`a @ b`, `x @ w.T + bias`, a batched
matmul, bfloat16 casts fused into the matmul) run on the CPU backend against NumPy, and every kernel they ran goes
through the GPU check (tests/gpu_check.py): lowered for sm_80 and sm_90, where the GPU heuristic gives the matmuls
tensor cores (TC), compiled to cubins by nvcc, and run in the CUDA emulation, whose mma follows the PTX ISA's fragment
layout, against the CPU backend. Never skipped: a missing nvcc or g++ fails.
"""

from __future__ import annotations

import numpy as np
from gpu_check import GpuCheck

from plygrad.frontend import Tensor, dtypes


def _run_matmuls() -> int:
    """Run the matmuls, check them against NumPy, and return how many there were."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, (64, 48)).astype(np.float16)
    w = rng.uniform(-2, 2, (32, 48)).astype(np.float16)
    bias = rng.uniform(-2, 2, 32).astype(np.float16)
    batch_a = rng.uniform(-2, 2, (3, 32, 48)).astype(np.float16)
    batch_b = rng.uniform(-2, 2, (3, 48, 16)).astype(np.float16)
    f32 = np.float32
    cases = [
        (Tensor(x) @ Tensor(w.T.copy()), x.astype(f32) @ w.T.astype(f32)),
        (Tensor(x) @ Tensor(w).T + Tensor(bias), x.astype(f32) @ w.T.astype(f32) + bias.astype(f32)),
        (Tensor(batch_a) @ Tensor(batch_b), batch_a.astype(f32) @ batch_b.astype(f32)),
        ((Tensor(x).cast(dtypes.bfloat16) @ Tensor(w).T.cast(dtypes.bfloat16)).cast(dtypes.float32),
         x.astype(f32) @ w.T.astype(f32)),
    ]
    for got, want in cases:  # float16 results round at the scale of the largest (about 30 here)
        np.testing.assert_allclose(got.numpy().astype(f32), want, rtol=2e-2, atol=1e-2 * np.abs(want).max())
    return len(cases)


def test_frontend_16_bit_matmuls_use_tensor_cores_and_match_as_cuda() -> None:
    plugin = GpuCheck()  # its own recorder: only these kernels, also under PLYGRAD_GPU_CHECK=1
    plugin.install()
    try:
        matmuls = _run_matmuls()
    finally:
        plugin.uninstall()
    report = plugin.check_recorded()
    print(report.summary())
    assert not report.problems, f"{len(report.problems)} problem(s):\n" + "\n".join(report.problems)
    assert report.tensor_core == matmuls, "every matmul here fits the tensor cores (sizes are tile multiples)"
    assert report.emulated == report.kernels and report.cooperative >= matmuls
