"""The Metal half of PLYGRAD_GPU_CHECK: every kernel the integration tests run on the CPU, checked as Metal on Linux.

Nothing on Linux compiles or runs Metal Shading Language, so this is the strongest check available here (docs/design.md
§5), run by tests/gpu_check.py after its CUDA check, on the same recorded kernels:

1. **Lower** each kernel for `Target.metal("apple7")` (what plygrad-metal starts from). A kernel touching float64
   is counted as unsupported, not lowered: Metal has no float64, and codegen refuses it on that target (the frontend
   user gets that error); likewise the fp8 types (`Target.metal`'s supported_dtypes). Any other lowering error is a
   problem.
2. **Lint** every program (packages/codegen/tests/metal_emu.py: no `double`, `long long`, CUDA words; the buffer
   bindings the launcher makes) and **syntax-check** the distinct sources with clang++ `-fsyntax-only` against
   metal_syntax.h, which declares only the Metal built-ins the renderer uses, with Metal's address spaces as clang
   address spaces. Chunks of kernels per compiler call, side by side with the emulation builds.
3. **Emulate** each program through metal_emu.h (GPU threads as fibers, threadgroups in turn, a real barrier) on
   random inputs, beside the CPU backend on the same inputs, compared as the CUDA check compares (gpu_check.py:
   integers bit for bit, floats within the dtype's tolerance of the output's scale, NaN where NaN). The same size
   limit leaves out the few giant kernels (compile-checked only, counted).

What it proves and does not: docs/backends.md, "Metal". In short: the source is C++ that uses only Metal's
declared built-ins and address spaces correctly, and it computes the right thing when run with C++ semantics and
IEEE host arithmetic; not that Apple's compiler accepts it, nor how an Apple GPU rounds, flushes or schedules.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

import numpy as np

from plygrad.ir import PtrDType, Target, UOp, dtypes

METAL_ARCH: Final = "apple7"  # the oldest family plygrad-metal targets: what runs there runs on every later one


def metal_target() -> Target:
    """What plygrad-metal lowers for before a device narrows the limits (`Target.metal`)."""
    return Target.metal(METAL_ARCH)


@dataclass
class MetalReport:
    """What the Metal check found: problems (one line each) and counts for the summary."""

    kernels: int = 0
    unsupported: int = 0  # kernels touching float64 or an fp8 type, which Metal does not have
    syntax_checked: int = 0  # distinct sources through clang's syntax check
    emulated: int = 0
    cooperative: int = 0  # emulated kernels with threadgroup barriers
    too_big: int = 0  # syntax-checked, not emulated (gpu_check.MAX_EMULATED_*)
    compiler: str = ""
    problems: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        phases = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in self.seconds.items())
        return (f"Metal: {self.kernels - self.unsupported} kernels lowered ({self.unsupported} use float64 or fp8, "
                f"which Metal lacks), {self.syntax_checked} distinct sources syntax-checked by "
                f"{self.compiler or 'nothing'}, "
                f"{self.emulated} emulated and matching the CPU backend ({self.cooperative} with barriers), "
                f"{self.too_big} too big to emulate{'; ' + phases if phases else ''}")


def _uses_unsupported(kernel: UOp) -> bool:
    """Whether the kernel touches a dtype Metal lacks (float64, the fp8s: `Target.metal`'s supported_dtypes)."""
    supported = set(metal_target().supported_dtypes)
    scalars = {(n.dtype.base if isinstance(n.dtype, PtrDType) else n.dtype).scalar() for n in kernel.toposort}
    return any(d not in supported for d in scalars - {dtypes.void, dtypes.index})


def check_metal(kernels: Sequence[UOp], seed: int = 0) -> MetalReport:
    """Lower, lint, syntax-check and emulate `kernels` for Metal; see the module docstring."""
    import gpu_check

    from plygrad.codegen import lower_uop

    gpu_check._cuda_emu()  # puts packages/codegen/tests on sys.path
    import metal_emu

    report = MetalReport(kernels=len(kernels))
    started = time.perf_counter()
    lowered: list[tuple[UOp, Any]] = []
    for kernel in kernels:
        if _uses_unsupported(kernel):
            report.unsupported += 1
            continue
        name = str(getattr(kernel.arg, "name", "") or "kernel")
        try:
            program = metal_emu.MetalKernel.from_program(lower_uop(kernel, metal_target()))
        except Exception as exc:
            report.problems.append(f"{name}: lowering for Metal failed: {type(exc).__name__}: {exc}")
            continue
        report.problems.extend(metal_emu.lint(program))
        lowered.append((kernel, program))
    report.seconds["lower"] = time.perf_counter() - started

    started = time.perf_counter()
    distinct = list({program.source: program for _, program in lowered}.values())
    syntax_chunks = gpu_check._chunks(distinct)
    emu_chunks = gpu_check._chunks([program for _, program in lowered])
    jobs: list[Callable[[], Any]] = [partial(metal_emu.check_syntax, chunk) for chunk in syntax_chunks]
    jobs += [partial(metal_emu.MetalEmuLibrary, chunk) for chunk in emu_chunks]
    results = gpu_check._parallel(jobs)
    for chunk, result in zip(syntax_chunks, results, strict=False):
        if isinstance(result, Exception):
            report.problems.append(f"Metal syntax check: {result}")
        else:
            report.compiler = str(result)
            report.syntax_checked += len(chunk)
    libraries: dict[Any, Any] = {}
    for chunk, result in zip(emu_chunks, results[len(syntax_chunks):], strict=True):
        if isinstance(result, Exception):
            report.problems.append(f"Metal emulation build: {result}")
            continue
        libraries.update((program, result) for program in chunk)
    report.seconds["compile"] = time.perf_counter() - started

    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    for kernel, program in lowered:
        info = program.info
        threads = math.prod(info.global_size) * math.prod(info.local_size or (1, 1, 1))
        if (sum(p.size for p in info.params) > gpu_check.MAX_EMULATED_ELEMENTS
                or info.ops > gpu_check.MAX_EMULATED_OPS or threads > gpu_check.MAX_EMULATED_ELEMENTS):
            report.too_big += 1
            continue
        if program not in libraries:
            continue  # its library failed to build: reported above
        problem = gpu_check.GpuCheck._run_one(kernel, program, libraries[program], rng)
        if problem is None:
            report.emulated += 1
            report.cooperative += int(program.cooperative)
        else:
            report.problems.append(f"Metal {problem}")
    report.seconds["run"] = time.perf_counter() - started
    if not report.problems and report.emulated + report.too_big + report.unsupported != report.kernels:
        report.problems.append(f"Metal: {report.kernels} kernels, but only {report.emulated} emulated, "
                               f"{report.too_big} too big and {report.unsupported} unsupported")
    if report.too_big > max(1, report.kernels // 100):
        report.problems.append(f"Metal: {report.too_big} kernels too big to emulate; the size limit must leave out "
                               "only a few giants")
    return report
