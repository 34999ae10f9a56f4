"""Check rendered HIP kernels without an AMD GPU: compile them to AMDGPU code objects, run them on the CPU.

Two checks, batched like cuda_emu.py's (many kernels per compiler call, each in its own namespace):

- `compile_code_objects(kernels, archs)`: one translation unit per arch compiled by Debian's clang-19 in HIP mode
  for that arch, device code only, no headers and no device library (`-x hip --offload-arch=gfx1100
  --cuda-device-only -nogpulib -nogpuinc --no-gpu-bundle-output -O3`), linked by lld into a real code object (an
  ELF for the AMDGPU HSA ABI, what `hipModuleLoadData` loads). The AMDGPU backend runs in full: an instruction it
  cannot select, a builtin the arch lacks (WMMA on gfx90a), a library call that does not link, all fail here. An
  error names the kernel and the line in its own source.
- `HipEmuLibrary(kernels)`: the kernels built against `hip_emu.h` (the clang builtins and attributes of the hip
  renderer mapped onto cuda_emu.h's fibers, barriers and shared memory; the WMMA/MFMA helpers emulated with the
  ISA's lane layouts) into one shared library; `run` launches one on NumPy arrays exactly as cuda_emu.EmuLibrary
  does (guarded buffers, 256-byte aligned, the alignment check).

Neither check skips: no clang-19/ld.lld-19 or no g++ is an `EmulationError` saying what to install
(`scripts/setup-system.sh` installs them). `HIP_CLANG` names another clang that knows the AMDGPU target.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from cuda_emu import HEADER, CudaKernel, EmulationError, EmuLibrary, _errors, _unit, cache_dir

from plygrad.ir import Ops, UOp

HIP_HEADER: Final = Path(__file__).resolve().parent / "hip_emu.h"
CLANG_CANDIDATES: Final = ("clang-19",)
# what the hip renderer's programs are compiled with: device code only, no headers, no device library, no
# contraction (the source says so too), IEEE division/sqrt and denormals (clang's HIP defaults, spelt out)
CLANG_FLAGS: Final = ("-x", "hip", "--cuda-device-only", "-nogpulib", "-nogpuinc", "--no-gpu-bundle-output", "-O3",
                      "-ffp-contract=off", "-fhip-fp32-correctly-rounded-divide-sqrt",
                      "-fno-gpu-flush-denormals-to-zero", "-w")
EM_AMDGPU: Final = 224
# the e_flags machine numbers (EF_AMDGPU_MACH_AMDGCN_*) of the archs the checks compile for
MACH: Final = {"gfx90a": 0x3F, "gfx942": 0x4C, "gfx1100": 0x41}
_TIMEOUT_S: Final = 600


class HipKernel(CudaKernel):
    """One rendered HIP program (the same record as a CUDA one; the cooperative test knows HIP's words)."""

    @staticmethod
    def from_program(program: UOp) -> HipKernel:
        if program.op is not Ops.PROGRAM:
            raise EmulationError(f"expected a PROGRAM UOp, got {program.op.name}")
        var_names = tuple(str(v.arg[0]) for v in program.src[1:] if v.op is Ops.DEFINE_VAR)
        return HipKernel(program.src[0].arg, program.arg, var_names)

    @property
    def cooperative(self) -> bool:
        """Barriers, or the wavefront-collective matrix-core helpers (emulated with barriers)."""
        return "__builtin_amdgcn_s_barrier" in self.source or re.search(r"plygrad_[wm][mf]ma_", self.source) is not None


class HipEmuLibrary(EmuLibrary):
    """HIP kernels built against hip_emu.h (which includes cuda_emu.h)."""

    headers = (HEADER, HIP_HEADER)
    stub_headers = ()


def clang() -> str:
    """A clang that compiles HIP for AMDGPU offline: `HIP_CLANG`, else clang-19 on PATH."""
    for candidate in (os.environ.get("HIP_CLANG", ""), *CLANG_CANDIDATES):
        if candidate and (path := shutil.which(candidate)):
            return path
    raise EmulationError("clang-19 not found (HIP_CLANG, PATH): the AMD code-object check compiles every kernel with "
                         "Debian's clang-19 and lld-19 (apt-get install clang-19 lld-19, or scripts/setup-system.sh); "
                         "it must not be skipped")


def compile_code_objects(kernels: Sequence[CudaKernel], archs: Sequence[str] = ("gfx90a", "gfx942", "gfx1100"),
                         ) -> dict[str, bytes]:
    """Compile every kernel to one code object per arch, one clang call per arch (cached by content); arch -> the
    ELF. Raises `EmulationError` with clang's errors (kernel and line in its own source) when one fails."""
    if not kernels:
        return {}
    unit = _unit(kernels, "", launchers=False)
    compiler = clang()
    folder = cache_dir()
    out: dict[str, bytes] = {}
    for arch in archs:
        flags = [*CLANG_FLAGS, f"--offload-arch={arch}"]
        key = hashlib.sha256("\0".join([unit.text, compiler, *flags]).encode()).hexdigest()[:24]
        code_object = folder / f"{arch}-{key}.co"
        if not code_object.exists():
            work = Path(tempfile.mkdtemp(prefix=f"hip-{key}-", dir=folder))
            source = work / "unit.hip"
            source.write_text(unit.text, encoding="utf-8")
            cmd = [compiler, *flags, "-o", str(work / "unit.co"), str(source)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=_TIMEOUT_S)
            if done.returncode != 0:
                raise EmulationError(f"clang failed for {arch} on {len(unit.names)} kernel(s) ({' '.join(cmd)}):\n"
                                     f"{_errors(done.stdout + done.stderr, unit, str(source))}")
            os.replace(work / "unit.co", code_object)
            shutil.rmtree(work, ignore_errors=True)
        out[arch] = code_object.read_bytes()
    return out


def code_object_kernels(code_object: bytes) -> set[str]:
    """The kernels a code object defines: every AMDGPU kernel has a `<name>.kd` kernel-descriptor symbol."""
    return {m.decode() for m in re.findall(rb"(?<![A-Za-z0-9_.])([A-Za-z_][A-Za-z0-9_]*)\.kd\x00", code_object)}


def code_object_arch(code_object: bytes) -> int:
    """The EF_AMDGPU_MACH number of an AMDGPU ELF (MACH maps arch names to it); raises if it is not one."""
    if not code_object.startswith(b"\x7fELF") or struct.unpack_from("<H", code_object, 18)[0] != EM_AMDGPU:
        raise EmulationError("not an AMDGPU ELF code object (e_machine != EM_AMDGPU)")
    return int(struct.unpack_from("<I", code_object, 48)[0]) & 0xFF
