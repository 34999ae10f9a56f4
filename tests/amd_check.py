"""The AMD half of PLYGRAD_GPU_CHECK: every kernel the integration tests run on the CPU, checked as HIP for AMD GPUs.

CI has no AMD GPU (docs/design.md §5). tests/gpu_check.py runs this after its CUDA check, on the same recorded kernels:

1. **Lower** each kernel for `Target.hip("gfx1100")` (RDNA3, WMMA matrix cores) and, where that program uses a
   matrix core, again for `Target.hip("gfx942")` (CDNA3, MFMA). The three targets differ in nothing but the arch
   and the matrix cores' lane count (`_targets` checks it), and the heuristic picks TC on the same kernels for both
   kinds, so a kernel without one renders the same source for all three: it is lowered once.
2. **Compile** the distinct sources to AMDGPU code objects for gfx90a, gfx942 and gfx1100 with Debian's clang-19
   and lld-19 (packages/codegen/tests/hip_emu.py: device code only, no headers, no device library, -O3), many kernels
   per clang call, the calls side by side with the emulation builds. The AMDGPU backend runs in full, so an
   instruction the arch lacks, a builtin it does not have or a library call that cannot link fails here.
3. **Emulate** every gfx1100 program, and the gfx942 programs with MFMA, through hip_emu.h (cuda_emu.h's fibers,
   barriers and shared memory; the WMMA/MFMA helpers emulated from AMD's lane layouts) on random inputs, beside the
   CPU backend on the same inputs, compared as the CUDA check compares (integers bit for bit, floats within the
   dtype's tolerance of the output's scale, NaN where NaN). The same size limit leaves out the few giant kernels.

What it proves and what it does not: docs/backends.md, "AMD".
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

import numpy as np

from plygrad.ir import Target, UOp

ARCHS: Final = ("gfx90a", "gfx942", "gfx1100")
WMMA_ARCH: Final = "gfx1100"
MFMA_ARCHS: Final = ("gfx90a", "gfx942")  # the same program for both: lowered for the first of them
MATRIX_CORE_MARKS: Final = ("plygrad_wmma_", "plygrad_mfma_")


@dataclass
class AmdReport:
    """What the AMD check found: problems (one line each) and counts for the summary."""

    kernels: int = 0
    compiled: dict[str, int] = field(default_factory=dict)  # distinct sources per arch
    emulated: int = 0  # gfx1100 programs emulated and matching the CPU backend
    emulated_mfma: int = 0  # gfx942 programs with MFMA, emulated too
    cooperative: int = 0
    matrix_cores: int = 0  # kernels whose gfx1100 program uses WMMA
    too_big: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        compiled = ", ".join(f"{arch}: {n}" for arch, n in sorted(self.compiled.items())) or "none"
        phases = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in self.seconds.items())
        return (f"AMD: {self.kernels} kernels as HIP; distinct sources compiled to code objects ({compiled}); "
                f"{self.emulated} gfx1100 programs emulated and matching the CPU backend ({self.cooperative} with "
                f"barriers, {self.matrix_cores} with WMMA), {self.emulated_mfma} gfx942 programs with MFMA emulated, "
                f"{self.too_big} too big to emulate{'; ' + phases if phases else ''}")


def _targets() -> dict[str, Target]:
    """The three targets, after checking they differ only in arch and matrix cores (what reusing programs needs)."""
    targets = {arch: Target.hip(arch) for arch in ARCHS}
    wmma = targets[WMMA_ARCH]
    for arch in MFMA_ARCHS:
        same_but = dataclasses.replace(wmma, arch=arch, tensor_cores=targets[arch].tensor_cores)
        if same_but != targets[arch]:
            raise AssertionError(f"Target.hip({arch!r}) differs from Target.hip({WMMA_ARCH!r}) in more than the arch "
                                 "and matrix cores: amd_check.py must lower for it separately")
    if targets["gfx90a"].tensor_cores != targets["gfx942"].tensor_cores:
        raise AssertionError("gfx90a and gfx942 must share their MFMA tensor cores to share programs")
    return targets


def _too_big(program: Any) -> bool:
    import gpu_check

    info = program.info
    threads = math.prod(info.global_size) * math.prod(info.local_size or (1, 1, 1))
    return (sum(p.size for p in info.params) > gpu_check.MAX_EMULATED_ELEMENTS
            or info.ops > gpu_check.MAX_EMULATED_OPS or threads > gpu_check.MAX_EMULATED_ELEMENTS)


def check_amd(kernels: Sequence[UOp], seed: int = 0) -> AmdReport:
    """Lower, compile and emulate `kernels` as HIP; see the module docstring."""
    import gpu_check

    from plygrad.codegen import lower_uop

    gpu_check._cuda_emu()  # puts packages/codegen/tests on sys.path
    import hip_emu

    targets = _targets()
    report = AmdReport(kernels=len(kernels))
    started = time.perf_counter()
    wmma_programs: list[tuple[UOp, Any]] = []
    mfma_programs: list[tuple[UOp, Any]] = []  # only those that differ from the gfx1100 program
    mfma_sources: list[Any] = []  # every kernel's program for gfx90a/gfx942
    for kernel in kernels:
        name = str(getattr(kernel.arg, "name", "") or "kernel")
        try:
            program = hip_emu.HipKernel.from_program(lower_uop(kernel, targets[WMMA_ARCH]))
            mfma = program
            if any(mark in program.source for mark in MATRIX_CORE_MARKS):
                report.matrix_cores += 1
                mfma = hip_emu.HipKernel.from_program(lower_uop(kernel, targets[MFMA_ARCHS[0]]))
                mfma_programs.append((kernel, mfma))
        except Exception as exc:
            report.problems.append(f"{name}: lowering for HIP failed: {type(exc).__name__}: {exc}")
            continue
        wmma_programs.append((kernel, program))
        mfma_sources.append(mfma)
    report.seconds["lower"] = time.perf_counter() - started

    started = time.perf_counter()
    distinct = {WMMA_ARCH: list({p.source: p for _, p in wmma_programs}.values()),
                **{arch: list({p.source: p for p in mfma_sources}.values()) for arch in MFMA_ARCHS}}
    jobs: list[Callable[[], Any]] = []
    labels: list[tuple[str, int]] = []
    for arch in ARCHS:
        for chunk in gpu_check._chunks(distinct[arch]):
            jobs.append(partial(hip_emu.compile_code_objects, chunk, (arch,)))
            labels.append((arch, len(chunk)))
    emulated = [(kernel, p) for kernel, p in wmma_programs + mfma_programs if not _too_big(p)]
    report.too_big = len(wmma_programs) - sum(1 for _, p in wmma_programs if not _too_big(p))
    emu_chunks = gpu_check._chunks(list(dict.fromkeys(p for _, p in emulated)))
    jobs += [partial(hip_emu.HipEmuLibrary, chunk) for chunk in emu_chunks]
    results = gpu_check._parallel(jobs)
    for (arch, count), result in zip(labels, results, strict=False):
        if isinstance(result, Exception):
            report.problems.append(f"clang {arch}: {result}")
        else:
            report.compiled[arch] = report.compiled.get(arch, 0) + count
    libraries: dict[Any, Any] = {}
    for chunk, result in zip(emu_chunks, results[len(labels):], strict=True):
        if isinstance(result, Exception):
            report.problems.append(f"HIP emulation build: {result}")
            continue
        libraries.update((program, result) for program in chunk)
    report.seconds["compile"] = time.perf_counter() - started

    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    mfma_set = {p for _, p in mfma_programs}
    for kernel, program in emulated:
        if program not in libraries:
            continue  # its library failed to build: reported above
        problem = gpu_check.GpuCheck._run_one(kernel, program, libraries[program], rng)
        if problem is not None:
            report.problems.append(f"HIP {'gfx942' if program in mfma_set else WMMA_ARCH} {problem}")
        elif program in mfma_set:
            report.emulated_mfma += 1
        else:
            report.emulated += 1
            report.cooperative += int(program.cooperative)
    report.seconds["run"] = time.perf_counter() - started
    if not report.problems and report.emulated + report.too_big != report.kernels:
        report.problems.append(f"AMD: {report.kernels} kernels, but only {report.emulated} emulated and "
                               f"{report.too_big} too big")
    if report.too_big > max(1, report.kernels // 100):
        report.problems.append(f"AMD: {report.too_big} kernels too big to emulate; the size limit must leave out "
                               "only a few giants")
    return report
