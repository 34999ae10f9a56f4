"""`python -m plygrad.viz --check TRACE`: every launch recorded with its buffer contents (VIZ=2, or
`record(..., check=True)`) run again on its recorded inputs by a reference executor, and the first launch whose
outputs differ beyond a tolerance named, with the user's line that ran it (docs/viz.md, "Where does it go wrong?").

The executor is the scheduler's NumPy interpreter of kernel ASTs, found through the `plygrad.reference_kernels`
entry point (plygrad-viz may not import the scheduler); it and NumPy come with `pip install plygrad-viz[check]`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Final

from plygrad.ir.dtype import DType, dtypes
from plygrad.ir.serialize import deserialize
from plygrad.ir.stage import Stage
from plygrad.viz.model import Trace

REFERENCE_GROUP: Final = "plygrad.reference_kernels"
Executor = Callable[[Any, list[Any], Mapping[str, int], str], None]


@dataclass(frozen=True)
class Mismatch:
    """The first launch whose output differs: which, where it came from, and by how much."""

    launch: int
    kernel: str
    run: int
    site: str | None
    param: int
    index: int  # the first differing element
    got: float
    expected: float
    max_error: float
    differing: int  # elements outside the tolerance

    def describe(self) -> str:
        return (f"launch {self.launch} of kernel {self.kernel!r} (run {self.run}, from {self.site or '?'}) differs "
                f"from the reference in output param {self.param}: {self.differing} elements, first at "
                f"[{self.index}]: got {self.got!r}, expected {self.expected!r} (largest error {self.max_error:.3g})")


@dataclass(frozen=True)
class CheckResult:
    checked: int  # launches run again and compared
    skipped: list[str]  # why each launch that could not be checked was not
    mismatch: Mismatch | None


def reference_executor() -> Executor:
    """The `numpy` plugin of `plygrad.reference_kernels` (ImportError saying what to install when missing)."""
    found = [ep for ep in entry_points(group=REFERENCE_GROUP) if ep.name == "numpy"]
    if not found:
        raise ImportError("--check needs a reference executor of kernel ASTs: pip install plygrad-viz[check] "
                          f"(plygrad-scheduler registers one as the `{REFERENCE_GROUP}` entry point `numpy`)")
    executor: Executor = found[0].load()
    return executor


def check(trace: Trace, rtol: float = 1e-4, atol: float = 1e-5, executor: Executor | None = None) -> CheckResult:
    """Run each recorded launch again by `executor` (default: the reference) and compare its written outputs with
    the recorded ones; floats within `atol + rtol * |expected|` (NaN equals NaN), integers and booleans exactly."""
    import numpy as np

    run_kernel = executor or reference_executor()
    runs = trace.table("runs")
    skipped: list[str] = []
    checked = 0
    for entry in trace.table("contents"):
        n = int(entry["launch"])
        launch = trace.launches[n]
        kernel = trace.kernels[launch[0]]
        name = kernel["name"]
        if kernel.get("ast") is None:
            skipped.append(f"launch {n} ({name}): its kernel AST was not recorded")
            continue
        dtypes_of = [_dtype(p[1]) for p in kernel["params"]]
        if None in dtypes_of or any(b is None for b in entry["before"]):
            skipped.append(f"launch {n} ({name}): a buffer past the size cap or of a dtype NumPy lacks")
            continue
        arrays = [np.frombuffer(base64.b64decode(b), np.dtype(dt.name)).copy()
                  for b, dt in zip(entry["before"], dtypes_of, strict=True) if dt is not None]
        body = deserialize(base64.b64decode(kernel["ast"]), Stage.KERNEL)
        variables = dict(zip(kernel.get("vars", []), entry.get("vals", []), strict=True))
        run_kernel(body, arrays, variables, f"kernel {name!r} (launch {n})")
        checked += 1
        for param, after in enumerate(entry["after"]):
            if after is None:
                continue
            got = np.frombuffer(base64.b64decode(after), arrays[param].dtype)
            found = _compare(got, arrays[param], rtol, atol)
            if found is not None:
                run = int(launch[1])
                site = runs[run][3] if 0 <= run < len(runs) else None
                index, count, error = found
                return CheckResult(checked, skipped, Mismatch(n, name, run, site, param, index, got[index].item(),
                                                              arrays[param][index].item(), error, count))
    return CheckResult(checked, skipped, None)


def _dtype(name: str) -> DType | None:
    """The IR dtype of a recorded parameter, None where NumPy has no dtype of that name (bfloat16, fp8)."""
    import numpy as np

    try:
        dt = dtypes.from_name(name)
        np.dtype(dt.name)
    except (KeyError, TypeError):
        return None
    return dt


def _compare(got: Any, expected: Any, rtol: float, atol: float) -> tuple[int, int, float] | None:
    """(first differing index, how many differ, largest error) of two arrays, or None when they agree."""
    import numpy as np

    if got.dtype.kind == "f":
        close = np.isclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
        error = float(np.nanmax(np.abs(got.astype(np.float64) - expected), initial=0.0))
    else:
        close = got == expected
        error = float(np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64)), initial=0.0))
    bad = np.flatnonzero(~close)
    if not bad.size:
        return None
    return int(bad[0]), int(bad.size), error
