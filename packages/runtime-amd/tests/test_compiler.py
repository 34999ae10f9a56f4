"""AMDCompiler without a GPU: hand-written header-free HIP to AMDGPU code objects for gfx90a, gfx942 and gfx1100
with every toolchain found here (clang-19 + lld-19 from Debian, which CI installs; hiprtc where ROCm 6 is), the arch
read back from the ELF header. None of this skips."""

from __future__ import annotations

import ctypes
import struct

import pytest

from plygrad.backends.amd import compiler as compiler_module
from plygrad.backends.amd.compiler import SEMANTIC_FLAGS, AMDCompiler, Toolchain, find_toolchain, installed_toolchains
from plygrad.runtime.errors import BackendError, CompileError

TOOLCHAINS = installed_toolchains()
# EF_AMDGPU_MACH_AMDGCN_* of each arch
MACH = {"gfx90a": 0x3F, "gfx942": 0x4C, "gfx1100": 0x41}

SAXPY = """\
#pragma clang fp contract(off)
extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(1, 128)))
void saxpy(float* __restrict__ data0, const float* __restrict__ data1, long long n) {
  long long i = (long long)__builtin_amdgcn_workgroup_id_x() * 128 + __builtin_amdgcn_workitem_id_x();
  if (i < n) data0[i] = data1[i] * 2.0f + 1.0f;
}
"""
SHARED_SUM = """\
extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(1, 256)))
void block_sum(float* __restrict__ data0, const float* __restrict__ data1) {
  static __attribute__((shared)) float partial[256];
  unsigned t = __builtin_amdgcn_workitem_id_x();
  partial[t] = data1[__builtin_amdgcn_workgroup_id_x() * 256 + t];
  for (unsigned stride = 128; stride > 0; stride >>= 1) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
    if (t < stride) partial[t] += partial[t + stride];
  }
  if (t == 0) data0[__builtin_amdgcn_workgroup_id_x()] = partial[0];
}
"""
# gfx11's WMMA: the AMDGPU backend rejects it for CDNA (a compile check the source text alone would pass)
WMMA = """\
typedef _Float16 half16 __attribute__((ext_vector_type(16)));
typedef float float8 __attribute__((ext_vector_type(8)));
extern "C" __attribute__((global)) void wmma(float* data0, const half16* data1) {
  float8 c = {};
  c = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(data1[0], data1[1], c);
  data0[__builtin_amdgcn_workitem_id_x()] = c[0];
}
"""


def code_object_mach(binary: bytes) -> int:
    """The EF_AMDGPU_MACH of an AMDGPU ELF code object (e_machine EM_AMDGPU = 224)."""
    assert binary.startswith(b"\x7fELF"), "a code object is an ELF file"
    assert struct.unpack_from("<H", binary, 18)[0] == 224, "not an AMDGPU ELF (e_machine != EM_AMDGPU)"
    return int(struct.unpack_from("<I", binary, 48)[0]) & 0xFF


def test_a_hip_compiler_is_available_here() -> None:
    assert TOOLCHAINS, ("neither hiprtc (ROCm 6+) nor clang-19 with lld-19 (apt-get install clang-19 lld-19, or "
                        "scripts/setup-system.sh) is installed: the AMD compile checks need one of them")


@pytest.fixture(params=TOOLCHAINS)
def toolchain(request: pytest.FixtureRequest) -> Toolchain:
    return find_toolchain(request.param)


@pytest.mark.parametrize("arch", list(MACH))
@pytest.mark.parametrize("source", [SAXPY, SHARED_SUM], ids=["saxpy", "shared-memory"])
def test_compiles_to_a_code_object_for_the_arch(toolchain: Toolchain, arch: str, source: str) -> None:
    binary = AMDCompiler(arch, toolchain).compile(source)
    assert code_object_mach(binary) == MACH[arch]
    assert b"saxpy.kd" in binary or b"block_sum.kd" in binary, "every kernel has a kernel descriptor symbol"


def test_an_instruction_the_arch_lacks_is_a_compile_error(toolchain: Toolchain) -> None:
    assert code_object_mach(AMDCompiler("gfx1100", toolchain).compile(WMMA)) == MACH["gfx1100"]
    with pytest.raises(CompileError, match="wmma"):
        AMDCompiler("gfx90a", toolchain).compile(WMMA)


def test_a_syntax_error_names_the_line(toolchain: Toolchain) -> None:
    broken = SHARED_SUM.replace("partial[0];", "partial[0] +* oops;")
    with pytest.raises(CompileError) as caught:
        AMDCompiler("gfx942", toolchain).compile(broken)
    error = caught.value
    assert error.line == 11 and error.source_line.startswith("if (t == 0) data0[")
    assert "at line 11: `if (t == 0)" in str(error) and "use of undeclared identifier 'oops'" in str(error)


def test_garbage_is_a_compile_error(toolchain: Toolchain) -> None:
    with pytest.raises(CompileError):
        AMDCompiler("gfx1100", toolchain).compile("this is not a program in any language {{{\n")


def test_cache_key_names_the_compiler_version_arch_and_flags(toolchain: Toolchain) -> None:
    key = AMDCompiler("gfx90a", toolchain).cache_key
    assert toolchain.describe() in key and "--offload-arch=gfx90a" in key
    assert all(flag in key for flag in SEMANTIC_FLAGS), "flags that change the binary must be in the key"
    assert "-ffp-contract=off" in key
    assert key != AMDCompiler("gfx1100", toolchain).cache_key


def test_clang_is_named_with_its_version_and_linker() -> None:
    if "clang" not in TOOLCHAINS:
        pytest.fail("clang-19 with lld-19 must be installed where the AMD checks run (scripts/setup-system.sh)")
    described = find_toolchain("clang").describe()
    assert "clang version" in described and "LLD" in described


def test_hiprtc_before_rocm_6_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """ROCm 5's hiprtc crashes the process for gfx94x and gfx11: a library reporting 5.x is passed over."""

    class OldHiprtc:
        def __init__(self, lib: object, library: str) -> None:
            self.version = (5, 2)

    real_cdll = ctypes.CDLL
    monkeypatch.setattr(compiler_module, "HIPRTC", OldHiprtc)
    monkeypatch.setattr(compiler_module.ctypes, "CDLL", lambda name: real_cdll(None))  # "libhiprtc.so" loads
    assert compiler_module._open_toolchain("hiprtc") is None


@pytest.mark.parametrize("arch", ["90a", "sm_90", "gfx90a:xnack-", ""])
def test_an_arch_that_is_not_a_gfx_name_is_refused(arch: str) -> None:
    with pytest.raises(BackendError, match="must look like 'gfx90a'"):
        AMDCompiler(arch)


def test_an_unknown_toolchain_kind_is_refused() -> None:
    with pytest.raises(BackendError, match="unknown HIP compiler 'nvcc'"):
        find_toolchain("nvcc")
