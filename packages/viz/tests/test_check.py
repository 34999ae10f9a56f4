"""--check on a synthetic trace: the add kernel run again by the scheduler's NumPy executor on recorded inputs."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest
from viz_synthetic import three_kernel_trace

from plygrad.viz import parse
from plygrad.viz.check import check


def _b64(a: np.ndarray[Any, Any]) -> str:
    return base64.b64encode(a.astype(np.float32).tobytes()).decode()


def _with_contents(outputs: list[np.ndarray[Any, Any]]) -> dict[str, Any]:
    """Launches 0 and 1 recorded with inputs x, y and the given outputs (the kernels compute x + y)."""
    data = three_kernel_trace()
    x, y = np.arange(4, dtype=np.float32), np.full(4, 0.5, np.float32)
    data["contents"] = [{"launch": n, "vals": [], "before": [_b64(np.zeros(4)), _b64(x), _b64(y)],
                         "after": [_b64(out), None, None]} for n, out in enumerate(outputs)]
    return data


def test_agreeing_launches_pass() -> None:
    x_plus_y = np.arange(4) + 0.5
    result = check(parse(_with_contents([x_plus_y, x_plus_y])))
    assert result.checked == 2 and result.mismatch is None


@pytest.mark.parametrize("wrong", [1e-3, float("nan")])
def test_the_first_differing_launch_is_named(wrong: float) -> None:
    bad = np.arange(4) + 0.5
    bad[2] += wrong
    result = check(parse(_with_contents([np.arange(4) + 0.5, bad])))
    assert result.mismatch is not None
    assert (result.mismatch.launch, result.mismatch.kernel, result.mismatch.index) == (1, "k1", 2)
    assert result.mismatch.site == "script.py:3" and result.mismatch.expected == 2.5


def test_within_the_tolerance_is_equal() -> None:
    near = np.arange(4) + 0.5 + 1e-6
    assert check(parse(_with_contents([near]))).mismatch is None
