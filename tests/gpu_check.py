"""PLYGRAD_GPU_CHECK=1: every kernel the integration tests run on the CPU is also checked as CUDA, with no GPU.

CI has no GPU, so the CUDA path is checked by riding on the integration suite (docs/design.md §5, issue 8):

1. **Record.** While the tests run, the runtime's `plan.prepare_kernels` is wrapped: every kernel SINK that a
   C-rendering (CPU) backend lowered successfully is kept, deduplicated (UOps are hash-consed, so equal kernels are
   one object). Nothing else changes: the tests run as they would.
2. **Lower and compile.** When the check runs (the session's last test), each kernel is lowered for
   `Target.cuda("sm_80")` and `Target.cuda("sm_90")` (what plygrad-nv starts from) and all of them are compiled to
   cubins by nvcc, one translation unit per arch and chunk, the chunks side by side
   (packages/codegen/tests/cuda_emu.py). Compiling to SASS runs ptxas, which rejects what PTX text would accept.
3. **Run and compare.** The sm_90 programs are built into emulation libraries (cuda_emu.h: GPU threads as fibers,
   blocks in sequence, `__syncthreads` a barrier, `__shared__` per block) and each kernel runs on random inputs of its
   parameters' dtypes and sizes, beside the same kernel compiled by the CPU backend from the same bytes, on the same
   inputs. Integers and bools must match bit for bit, floats within a tolerance (reductions sum in another order on a
   GPU), NaN where NaN. Random inputs rather than the tests' own data: the kernels index only by their ranges (a
   gather is a one-hot compare), so any input is valid, and capturing every buffer of every launch would cost more
   than the whole suite. Variables take their largest value (the buffers are sized for it). Kernels past
   MAX_EMULATED_ELEMENTS / MAX_EMULATED_OPS (the 5*10^7-element sums of the scale tests) are compiled but not
   emulated: one core runs every GPU thread as an unoptimized fiber; the report counts them.
   Kernels that use tensor cores (a float16/bfloat16 matmul: the heuristic's TC, inline-PTX `mma.sync` through
   plygrad's helper) are emulated as they are too: cuda_emu.h supplies the helper as a warp-collective emulation
   with the PTX ISA's fragment layout, so a wrong layout or index is a wrong result. The report counts them.

The check itself is the test `tests/test_gpu_check.py::test_kernels_run_as_cuda`, which the plugin moves to the end
of the session: a failure is a test failure (one line per kernel), counted like any other; the terminal summary
names how many kernels were compiled and emulated. Without PLYGRAD_GPU_CHECK that test checks the kernels of a few
ops it runs itself. `PLYGRAD_GPU_CHECK_JOBS` caps the compiler processes (default: CPU count).

The same recorded kernels are then checked as Metal (tests/metal_check.py) and as HIP for AMD GPUs
(tests/amd_check.py: code objects for gfx90a, gfx942 and gfx1100 by clang-19, and the HIP emulation); their problems
are the check's problems, their summaries follow its own.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest

from plygrad.ir import GroupOp, Ops, Target, UOp, dtypes
from plygrad.ir.dtype import DType, DTypeKind

ENV: Final = "PLYGRAD_GPU_CHECK"
# the runtime's plan module calls the name it imported from plygrad.runtime.lowering: that is the name to wrap
HOOK: Final = "prepare_kernels"
CHECK_TEST: Final = "test_gpu_check.py::test_kernels_run_as_cuda"
ARCHS: Final = ("sm_80", "sm_90")
EMULATED_ARCH: Final = "sm_90"
CODEGEN_TESTS: Final = Path(__file__).resolve().parents[1] / "packages" / "codegen" / "tests"
# the cuda renderer's tensor-core helper (codegen/renderer/cuda_mma.py), which cuda_emu.h emulates
TENSOR_CORE_MARK: Final = "plygrad_mma_"
# kernels per compiler call: big enough that the compiler's start-up is paid rarely, small enough to spread chunks
# over the cores
CHUNK: Final = 150
# kernels bigger than this are compiled to cubins but not emulated: the emulator runs every GPU thread as a fiber on
# one core, unoptimized, so a 5*10^7-element sum (tests/test_reduce_scale.py) would take minutes; the same shapes of
# kernel at smaller sizes are emulated (the report counts the ones left out)
MAX_EMULATED_ELEMENTS: Final = 1 << 22  # elements over all of a kernel's buffers, and GPU threads launched
MAX_EMULATED_OPS: Final = 1 << 25  # ProgramInfo.ops: ALU operations times loop trips
# relative tolerance per float dtype (of the largest magnitude in the output): a GPU reduction sums in another order
TOLERANCE: Final[dict[DType, float]] = {dtypes.float64: 1e-9, dtypes.float32: 1e-4, dtypes.float16: 1e-2,
                                        dtypes.bfloat16: 2e-2}


def enabled() -> bool:
    return os.environ.get(ENV, "").strip() not in ("", "0")


def _cuda_emu() -> Any:
    """The harness module from plygrad-codegen's tests folder (test helpers are not installed with the package)."""
    if str(CODEGEN_TESTS) not in sys.path:
        sys.path.insert(0, str(CODEGEN_TESTS))
    import cuda_emu

    return cuda_emu


def cuda_target(arch: str) -> Target:
    """What plygrad-nv lowers for before a device narrows the limits (`Target.cuda`): the kernels CI can check."""
    return Target.cuda(arch)


@dataclass
class Report:
    """What the check found: problems (one line each) and counts for the summary."""

    kernels: int = 0
    compiled: dict[str, int] = field(default_factory=dict)
    emulated: int = 0
    cooperative: int = 0  # emulated kernels with barriers (their threads run as fibers)
    tensor_core: int = 0  # kernels using tensor cores (compiled and emulated like the others)
    too_big: int = 0  # compiled, not emulated (MAX_EMULATED_ELEMENTS / MAX_EMULATED_OPS)
    problems: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # per phase, for the summary line
    metal: Any = None  # the Metal check's report (metal_check.py), whose problems are in `problems` too
    amd: Any = None  # the AMD check's report (amd_check.py), likewise

    def summary(self) -> str:
        compiled = ", ".join(f"{arch}: {n}" for arch, n in sorted(self.compiled.items())) or "none"
        phases = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in self.seconds.items())
        return (f"{self.kernels} distinct kernels; compiled to cubins ({compiled}); {self.emulated} emulated and "
                f"matching the CPU backend ({self.cooperative} with barriers), {self.too_big} too big to emulate "
                f"(compile-checked only); {self.tensor_core} use tensor cores (emulated with them)"
                f"{'; ' + phases if phases else ''}"
                f"{chr(10) + self.metal.summary() if self.metal is not None else ''}"
                f"{chr(10) + self.amd.summary() if self.amd is not None else ''}")


def _chunks(items: Sequence[Any]) -> list[Sequence[Any]]:
    return [items[i:i + CHUNK] for i in range(0, len(items), CHUNK)]


def _parallel(jobs: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run compiler jobs side by side (each spends its time in a subprocess); exceptions are returned, not raised."""
    workers = int(os.environ.get("PLYGRAD_GPU_CHECK_JOBS", "0")) or os.cpu_count() or 1

    def attempt(job: Callable[[], Any]) -> Any:
        try:
            return job()
        except Exception as exc:  # collected as the kernel chunk's problem
            return exc

    with ThreadPoolExecutor(max(1, min(workers, len(jobs)))) as pool:
        return list(pool.map(attempt, jobs))


def _random_input(dtype: DType, size: int, rng: np.random.Generator) -> np.ndarray:
    name = dtype.numpy_name
    if name is None:
        raise TypeError(f"no NumPy dtype holds {dtype}")
    if name == "bfloat16":
        import ml_dtypes

        np_dtype: Any = ml_dtypes.bfloat16
    else:
        np_dtype = np.dtype(name)
    if dtype.kind is DTypeKind.FLOAT:
        return rng.uniform(-3.0, 3.0, size).astype(np_dtype)
    if dtype.kind is DTypeKind.BOOL:
        return rng.integers(0, 2, size).astype(np.bool_)
    low = 0 if dtype.kind is DTypeKind.UNSIGNED else -20
    return rng.integers(low, 20, size).astype(np_dtype)


def _narrowest_rounding(kernel: UOp) -> DType | None:
    """The float dtype of TOLERANCE with the widest tolerance that the kernel rounds values to (a CAST or an ALU op
    of that dtype): a float32 layernorm of float16 values rounds to float16 on the way, so another summation order
    on the GPU can move an output by one float16 ulp."""
    rounded = {n.dtype for n in kernel.toposort if n.dtype in TOLERANCE and (n.op is Ops.CAST or n.op in GroupOp.ALU)}
    return max(rounded, key=lambda d: TOLERANCE[d], default=None)


def _reduced_length(kernel: UOp) -> int:
    """How many values the longest reduction of the kernel adds up (the product of its constant REDUCE ranges)."""
    longest = 1
    for node in kernel.toposort:
        if node.op is Ops.REDUCE:
            sizes = [r.src[0].arg for r in node.src[1:] if r.op is Ops.RANGE and r.src and r.src[0].op is Ops.CONST]
            longest = max(longest, math.prod(int(n) for n in sizes))
    return longest


def _compare(name: str, index: int, dtype: DType, got: np.ndarray, want: np.ndarray,
             rounded_to: DType | None = None, reduced: int = 1) -> str | None:
    """None if `got` matches the CPU backend's `want`, else a one-line description of the first mismatch. Floats
    compare within the tolerance of their dtype, or of `rounded_to` (`_narrowest_rounding`) where that is wider,
    times sqrt(`reduced`) for a kernel that sums that many values (`_reduced_length`): the GPU adds them in another
    order, and a sum that cancels (4096 random values summing to -0.43) moved by 1.2e-4 between the two."""
    if got.size == 0:
        return None
    if dtype.kind is not DTypeKind.FLOAT:
        bad = np.flatnonzero(got.view(np.uint8).reshape(got.size, -1) != want.view(np.uint8).reshape(want.size, -1))
        if bad.size == 0:
            return None
        i = int(bad[0]) // max(1, dtype.itemsize)
        return f"{name}: output data{index} ({dtype}) element {i} is {got[i]}, the CPU backend gives {want[i]}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(w)
    scale = float(np.max(np.abs(w[finite]))) if finite.any() else 1.0
    tol = max(TOLERANCE.get(dtype, 1e-4), TOLERANCE.get(rounded_to, 0.0) if rounded_to else 0.0) * max(1.0, scale)
    tol *= math.sqrt(reduced)
    with np.errstate(invalid="ignore"):  # inf - inf
        same = (np.isnan(g) & np.isnan(w)) | (g == w) | (np.abs(g - w) <= tol)
    if same.all():
        return None
    i = int(np.flatnonzero(~same)[0])
    return (f"{name}: output data{index} ({dtype}) element {i} is {g[i]!r}, the CPU backend gives {w[i]!r} "
            f"(tolerance {tol:.3g}; {int((~same).sum())} of {same.size} differ)")


def _variable_values(kernel: UOp, sizes: list[int]) -> dict[str, int]:
    """Each variable at its largest value, except a symbolic size (a variable an address depends on): the largest
    value at which every access stays inside the parameters' sizes (a view of an input sized for one bound value is
    valid only up to that value)."""
    from plygrad.runtime.bounds import find_violations, size_variables

    variables = {str(v.arg[0]): int(v.arg[2]) for v in kernel.toposort if v.op is Ops.DEFINE_VAR}
    named = {str(v.arg[0]): v for v in kernel.toposort if v.op is Ops.DEFINE_VAR}
    sized = size_variables(kernel)
    while sized:
        fixed = kernel.substitute({named[n]: UOp.const(named[n].dtype, variables[n]) for n in sized})
        if not find_violations(fixed, sizes) or all(variables[n] <= int(named[n].arg[1]) for n in sized):
            break
        for n in sized:
            variables[n] = max(variables[n] - 1, int(named[n].arg[1]))
    return variables


class GpuCheck:
    """The pytest plugin: records kernels during the session; its last test checks them (see the module docstring)."""

    def __init__(self) -> None:
        self.kernels: dict[UOp, str] = {}  # in recording order -> the test that first ran it
        self.report: Report | None = None
        self._restore: Callable[[], None] | None = None

    # ---- recording -----------------------------------------------------------------------------------------------
    def install(self) -> None:
        from plygrad.runtime import plan

        original: Callable[[Sequence[tuple[Any, UOp, str]]], Any] = getattr(plan, HOOK)

        def recording(kernels: Sequence[tuple[Any, UOp, str]]) -> Any:
            loaded = original(kernels)  # only kernels the CPU backend lowered and compiled are worth checking
            for backend, body, _name in kernels:
                if backend.target.renderer == "c":
                    self.kernels.setdefault(body, os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0])
            return loaded

        setattr(plan, HOOK, recording)

        def restore() -> None:
            setattr(plan, HOOK, original)

        self._restore = restore

    def uninstall(self) -> None:
        if self._restore is not None:
            self._restore()
            self._restore = None

    # ---- checking ------------------------------------------------------------------------------------------------
    def check(self, kernels: Sequence[UOp], seed: int = 0) -> Report:
        """Lower, compile and emulate `kernels`; see the module docstring."""
        from plygrad.codegen import lower_uop

        emu = _cuda_emu()
        report = Report(kernels=len(kernels))
        started = time.perf_counter()
        programs: dict[str, list[Any]] = {arch: [] for arch in ARCHS}
        emulated: list[tuple[UOp, Any]] = []
        for kernel in kernels:
            name = str(getattr(kernel.arg, "name", "") or "kernel")
            try:
                lowered = {arch: emu.CudaKernel.from_program(lower_uop(kernel, cuda_target(arch))) for arch in ARCHS}
            except Exception as exc:
                report.problems.append(f"{name}: lowering for CUDA failed: {type(exc).__name__}: {exc}")
                continue
            for arch in ARCHS:
                programs[arch].append(lowered[arch])
            chosen = lowered[EMULATED_ARCH]
            report.tensor_core += int(TENSOR_CORE_MARK in chosen.source)
            emulated.append((kernel, chosen))

        report.seconds["lower"] = time.perf_counter() - started
        started = time.perf_counter()
        jobs: list[Callable[[], Any]] = []
        labels: list[tuple[str, int]] = []
        for arch in ARCHS:
            for chunk in _chunks(programs[arch]):
                jobs.append(partial(emu.compile_cubins, chunk, (arch,)))
                labels.append((arch, len(chunk)))
        emu_chunks = _chunks([k for _, k in emulated])
        jobs.extend(partial(emu.EmuLibrary, chunk) for chunk in emu_chunks)
        results = _parallel(jobs)
        for (arch, count), result in zip(labels, results, strict=False):
            if isinstance(result, Exception):
                report.problems.append(f"nvcc {arch}: {result}")
            else:
                report.compiled[arch] = report.compiled.get(arch, 0) + count
        libraries: dict[Any, Any] = {}
        for chunk, result in zip(emu_chunks, results[len(labels):], strict=True):
            if isinstance(result, Exception):
                report.problems.append(f"emulation build: {result}")
                continue
            for kernel in chunk:
                libraries[kernel] = result
        report.seconds["compile"] = time.perf_counter() - started
        started = time.perf_counter()
        rng = np.random.default_rng(seed)
        for kernel, program in emulated:
            info = program.info
            threads = math.prod(info.global_size) * math.prod(info.local_size or (1, 1, 1))
            if (sum(p.size for p in info.params) > MAX_EMULATED_ELEMENTS or info.ops > MAX_EMULATED_OPS
                    or threads > MAX_EMULATED_ELEMENTS):
                report.too_big += 1
                continue
            if program in libraries:
                problem = self._run_one(kernel, program, libraries[program], rng)
                if problem is None:
                    report.emulated += 1
                    report.cooperative += int(program.cooperative)
                else:
                    origin = self.kernels.get(kernel)
                    report.problems.append(problem + (f" [kernel of {origin}]" if origin else ""))
        report.seconds["run"] = time.perf_counter() - started
        from metal_check import check_metal  # the same kernels as Metal (lint, clang syntax check, emulation)

        report.metal = check_metal(kernels, seed)
        report.problems.extend(report.metal.problems)
        from amd_check import check_amd  # the same kernels as HIP (code objects for three archs, emulation)

        report.amd = check_amd(kernels, seed)
        report.problems.extend(report.amd.problems)
        return report

    @staticmethod
    def _run_one(kernel: UOp, program: Any, library: Any, rng: np.random.Generator) -> str | None:
        """Run one kernel on the emulator and on the CPU backend with the same random inputs; None if they agree."""
        from plygrad.runtime import Buffer, Device, prepare_kernel

        info = program.info
        variables = _variable_values(kernel, [p.size for p in info.params])
        inputs = {p.index: _random_input(p.dtype, p.size, rng) for p in info.params}
        emu_buffers = [inputs[p.index].copy() for p in info.params]
        try:
            library.run(program, emu_buffers, variables)
        except Exception as exc:
            return f"{info.name}: emulation failed: {type(exc).__name__}: {exc}"
        backend = Device["CPU"]
        loaded = prepare_kernel(backend, kernel, info.name)
        by_index = {p.index: p for p in loaded.info.params}
        buffers = {i: Buffer("CPU", by_index[i].size, by_index[i].dtype).copyin(inputs[i].tobytes()) for i in inputs}
        handles = [buffers[p.index].handle for p in loaded.info.params]
        loaded.program(handles, loaded.info.global_size, loaded.info.local_size,
                       [variables[n] for n in loaded.var_names], wait=True)
        backend.synchronize()
        for param, got in zip(info.params, emu_buffers, strict=True):
            if not param.writable:
                continue
            want = np.frombuffer(buffers[param.index].copyout(), dtype=got.dtype)
            problem = _compare(info.name, param.index, param.dtype, got, want, _narrowest_rounding(kernel),
                               _reduced_length(kernel))
            if problem is not None:
                return problem
        return None

    def check_recorded(self) -> Report:
        """Stop recording and check every kernel recorded so far (the suite's last test calls this)."""
        self.uninstall()
        if not self.kernels:
            self.report = Report(problems=["no kernel was recorded: the tests ran no kernel on the CPU backend, or "
                                           "plygrad.runtime.plan.prepare_kernels is no longer the lowering hook"])
        else:
            self.report = self.check(list(self.kernels))
        return self.report

    # ---- pytest hooks --------------------------------------------------------------------------------------------
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.install()

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """The check runs as the last test, after every kernel of the session was recorded."""
        last = [item for item in items if item.nodeid.endswith(CHECK_TEST)]
        items[:] = [item for item in items if not item.nodeid.endswith(CHECK_TEST)] + last

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.uninstall()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        report = self.report
        if report is None:
            return
        terminalreporter.section("GPU check (CUDA without a GPU)")
        terminalreporter.write_line(report.summary())
        for problem in report.problems:
            terminalreporter.write_line(f"FAILED {problem}", red=True)
