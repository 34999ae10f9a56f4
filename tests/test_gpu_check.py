"""The CUDA path checked without a GPU (tests/gpu_check.py): lowered for sm_80/sm_90, compiled to cubins by nvcc,
run through the emulation header and compared with the CPU backend. Never skipped: a missing nvcc or g++ fails.

Under PLYGRAD_GPU_CHECK=1 (nox session `gpu-check`) this test runs last and checks every kernel the session ran;
otherwise it checks the kernels of a few ops that cover the GPU-shaped lowering (grouped reductions with shared
memory and barriers, float16, scans, a matmul).
"""

from __future__ import annotations

import numpy as np
import pytest
from gpu_check import GpuCheck

from plygrad.frontend import Tensor, dtypes


def _run_a_few_ops() -> None:
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((33, 300)).astype(np.float32))
    w = Tensor(rng.standard_normal((300, 20)).astype(np.float32))
    (x @ w).relu().sum(1).numpy()
    x.max(0).numpy()
    x.sum().numpy()
    (x.exp() / x.exp().sum(1, keepdim=True)).numpy()
    x.cast(dtypes.float16).mean(1).numpy()
    x.cumsum(1).numpy()
    (x.cast(dtypes.int32) // 3).numpy()


def test_kernels_run_as_cuda(request: pytest.FixtureRequest) -> None:
    plugin = request.config.pluginmanager.get_plugin("gpu_check")
    standalone = plugin is None
    if plugin is None:
        plugin = GpuCheck()
        plugin.install()
        try:
            _run_a_few_ops()
        finally:
            plugin.uninstall()
    report = plugin.check_recorded()
    print(report.summary())
    assert report.kernels > 0
    assert not report.problems, f"{len(report.problems)} problem(s):\n" + "\n".join(report.problems)
    # every kernel is compiled; every one is emulated but the few past the emulation's size limit (gpu_check.py)
    assert report.emulated + report.too_big == report.kernels
    assert report.too_big <= max(1, report.kernels // 100), "the size limit must leave out only a few giants"
    if standalone:
        assert report.cooperative > 0, "the ops here should include a reduction using shared memory and barriers"


def test_the_comparison_can_fail() -> None:
    """Integers bit for bit, floats within the dtype's tolerance of the output's scale, NaN only where NaN."""
    from gpu_check import _compare

    ints = np.arange(5, dtype=np.int32)
    assert _compare("k", 0, dtypes.int32, ints, ints.copy()) is None
    off = ints.copy()
    off[3] += 1
    assert "element 3 is 4" in str(_compare("k", 0, dtypes.int32, off, ints))
    floats = np.array([1.0, np.nan, 100.0], np.float32)
    assert _compare("k", 0, dtypes.float32, floats + np.float32(1e-3), floats) is None  # 1e-5 of the scale
    assert _compare("k", 0, dtypes.float32, floats + np.float32(0.1), floats) is not None
    assert _compare("k", 0, dtypes.float32, np.array([1.0, 0.0, 100.0], np.float32), floats) is not None
    # a float32 output the kernel rounded to float16 on the way may be one float16 ulp off after a GPU reduction
    float16_ulp_off = floats + np.float32(100.0 * 2.0**-10)
    assert _compare("k", 0, dtypes.float32, float16_ulp_off, floats) is not None
    assert _compare("k", 0, dtypes.float32, float16_ulp_off, floats, rounded_to=dtypes.float16) is None
    # a sum of 4096 values that cancels moves with the order of the additions, a wrong sum does not pass
    cancelled = np.array([-0.43338191], np.float32)
    assert _compare("k", 0, dtypes.float32, cancelled + np.float32(1.2e-4), cancelled) is not None
    assert _compare("k", 0, dtypes.float32, cancelled + np.float32(1.2e-4), cancelled, reduced=4096) is None
    assert _compare("k", 0, dtypes.float32, cancelled + np.float32(0.1), cancelled, reduced=4096) is not None


def test_a_fused_softmax_shares_its_output_loop_over_the_workgroup() -> None:
    """Softmax over rows is one kernel (docs/scheduler.md rule 4): on CUDA each row is a workgroup that groups the
    max and the sum, and its threads then take the row's outputs in turn (cuda.py `shared_over_group`) instead of
    every thread recomputing them for thread 0 to store; the emulation must still match the CPU backend."""
    from plygrad.codegen import lower_uop
    from plygrad.ir import Ops, Target

    x = Tensor(np.random.default_rng(1).standard_normal((40, 512)).astype(np.float32)).realize()
    calls = [c for c in x.softmax(-1).schedule().src if c.src[0].op is Ops.SINK]
    assert len(calls) == 1
    source = lower_uop(calls[0].src[0], Target.cuda("sm_90")).src[0].arg
    assert "+= 256) {" in source and "== 0) data0" not in source, source
    plugin = GpuCheck()
    plugin.install()
    try:
        x.softmax(-1).numpy()
        x.log_softmax(-1).numpy()
        x.layernorm().numpy()
    finally:
        plugin.uninstall()
    report = plugin.check_recorded()
    assert report.kernels >= 3 and report.cooperative >= 3 and not report.problems, report.problems


def test_a_store_under_an_empty_loop_never_runs_on_any_target() -> None:
    """A kernel whose outer output loop has end 0 writes nothing. The symbolic rules pin that loop's variable to 0
    (a RANGE of end 0 has bounds [0, 0]), so the store no longer depends on it; codegen must drop the store, not
    hoist it out of the empty loop (the GPU lowering used to write row 0: found by the schedule fuzzer's mutated
    loops, tests/test_schedule_fuzz.py)."""
    from plygrad.ir import Ops, UOp

    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
    linear = (x.pad(((1, 2), (0, 1))) + 1).schedule()
    body = next(c.src[0] for c in linear.src if c.src[0].op is Ops.SINK)
    outer = min((n for n in body.toposort if n.op is Ops.RANGE), key=lambda r: int(r.arg[0]))
    empty = body.substitute({outer: UOp.range(0, outer.arg[0], outer.arg[1])})
    report = GpuCheck().check([empty])
    assert report.emulated == 1 and not report.problems, report.problems
