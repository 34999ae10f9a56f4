"""NVCompiler without a GPU: hand-written CUDA C to SASS cubins for sm_80 and sm_90, with every toolchain found here
(NVRTC from the wheel, nvcc from the CUDA toolkit). CI has at least one of them, so none of this skips."""

from __future__ import annotations

import struct

import pytest

from plygrad.backends.nv.compiler import (
    SEMANTIC_FLAGS,
    NVCompiler,
    Toolchain,
    find_nvrtc_library,
    find_toolchain,
    installed_toolchains,
)
from plygrad.runtime.errors import BackendError, CompileError

TOOLCHAINS = installed_toolchains()
ARCHS = ("sm_80", "sm_90")

SAXPY = """\
#include <cuda_fp16.h>
extern "C" __global__ void __launch_bounds__(128) saxpy(float* data0, const float* data1, const __half* data2,
                                                         long long n) {
  long long i = (long long)blockIdx.x * 128 + threadIdx.x;
  if (i < n) data0[i] = data1[i] * 2.0f + __half2float(data2[i]);
}
"""
SHARED_SUM = """\
extern "C" __global__ void __launch_bounds__(256) block_sum(float* data0, const float* data1) {
  __shared__ float partial[256];
  partial[threadIdx.x] = data1[blockIdx.x * 256 + threadIdx.x];
  __syncthreads();
  for (int stride = 128; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) data0[blockIdx.x] = partial[0];
}
"""
# PTX text takes this misspelt mma shape; only ptxas (compiling to SASS) rejects it
BAD_MMA = """\
extern "C" __global__ void bad_mma(float* data0) {
  unsigned a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0;
  float c0 = 0.f, c1 = 0.f, c2 = 0.f, c3 = 0.f;
  asm volatile("mma.sync.aligned.m16n8k17.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};" : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  data0[threadIdx.x] = c0 + c1 + c2 + c3;
}
"""


def cubin_arch(binary: bytes) -> int:
    """The SM version an ELF cubin holds SASS for (e_machine EM_CUDA = 190; the arch is in e_flags, bits 8-15
    since ELF ABI version 8, bits 0-7 before)."""
    assert binary.startswith(b"\x7fELF"), "a cubin is an ELF file (SASS), not PTX text"
    assert struct.unpack_from("<H", binary, 18)[0] == 190, "not an NVIDIA CUDA ELF (e_machine != EM_CUDA)"
    flags: int = struct.unpack_from("<I", binary, 48)[0]
    return (flags >> 8) & 0xFF if binary[8] >= 8 else flags & 0xFF


def test_a_cuda_compiler_is_available_here() -> None:
    assert TOOLCHAINS, ("neither NVRTC (pip install plygrad-nv[nvrtc]) nor nvcc (the CUDA toolkit) is installed: "
                        "the NV compile checks need one of them")


@pytest.fixture(params=TOOLCHAINS)
def toolchain(request: pytest.FixtureRequest) -> Toolchain:
    return find_toolchain(request.param)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", [SAXPY, SHARED_SUM], ids=["fp16-header", "shared-memory"])
def test_compiles_to_a_cubin_for_the_arch(toolchain: Toolchain, arch: str, source: str) -> None:
    assert cubin_arch(NVCompiler(arch, toolchain).compile(source)) == int(arch[3:])


def test_the_cubins_differ_per_arch(toolchain: Toolchain) -> None:
    assert NVCompiler("sm_80", toolchain).compile(SHARED_SUM) != NVCompiler("sm_90", toolchain).compile(SHARED_SUM)


def test_a_syntax_error_names_the_line(toolchain: Toolchain) -> None:
    broken = SHARED_SUM.replace("partial[0];", "partial[0] +* oops;")
    with pytest.raises(CompileError) as caught:
        NVCompiler("sm_90", toolchain).compile(broken)
    error = caught.value
    assert error.line == 9 and error.source_line == "if (threadIdx.x == 0) data0[blockIdx.x] = partial[0] +* oops;"
    assert "at line 9: `if (threadIdx.x == 0)" in str(error) and 'identifier "oops" is undefined' in str(error)


def test_garbage_is_a_compile_error(toolchain: Toolchain) -> None:
    with pytest.raises(CompileError):
        NVCompiler("sm_90", toolchain).compile("this is not a program in any language {{{\n")


def test_compiling_to_sass_catches_what_ptx_text_accepts(toolchain: Toolchain) -> None:
    with pytest.raises(CompileError, match=r"m16n8k17"):
        NVCompiler("sm_90", toolchain).compile(BAD_MMA)


def test_cache_key_names_the_compiler_version_arch_and_flags(toolchain: Toolchain) -> None:
    key = NVCompiler("sm_80", toolchain).cache_key
    assert toolchain.describe() in key and "--gpu-architecture=sm_80" in key
    assert all(flag in key for flag in SEMANTIC_FLAGS), "flags that change the binary must be in the key"
    assert key != NVCompiler("sm_90", toolchain).cache_key


def test_nvrtc_comes_from_the_wheel_when_installed() -> None:
    library = find_nvrtc_library()
    if library is None:
        assert "nvrtc" not in TOOLCHAINS
    else:
        assert "nvidia" in library.parts and find_toolchain("nvrtc").describe().startswith("nvrtc ")


def test_standalone_default_needs_no_gpu() -> None:
    assert cubin_arch(NVCompiler(arch="sm_90").compile(SHARED_SUM)) == 90


@pytest.mark.parametrize("arch", ["90", "compute_90", "sm90", ""])
def test_an_arch_that_is_not_sm_xx_is_refused(arch: str) -> None:
    with pytest.raises(BackendError, match="must look like 'sm_90'"):
        NVCompiler(arch)


def test_an_unknown_toolchain_kind_is_refused() -> None:
    with pytest.raises(BackendError, match="unknown CUDA compiler 'clang'"):
        find_toolchain("clang")
