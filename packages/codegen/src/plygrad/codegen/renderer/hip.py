"""The HIP renderer: one header-free `extern "C" __attribute__((global))` kernel per program, for AMD GPUs
(docs/codegen.md §5.3).

HIP is CUDA's programming model, so this is the cuda renderer's frame (`CudaFunction`: the launch plan, GROUP
reductions, memory-only vectors, tensor-core statements) with clang's builtins where CUDA's words need a header:
launch indices, barriers between workgroup fences, `static __attribute__((shared))` memory. Values go through the
C family's op table (rules.py) in `HIP_SPELLING` (plain IEEE operators under `#pragma clang fp contract(off)`,
builtins or the program's own math helpers, hip_math.py) and `HIP_RULES` (BITCAST is `__builtin_bit_cast`);
tensor cores are WMMA or MFMA helpers (hip_mma.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import ClassVar, Final

from plygrad.codegen.errors import CodegenError
from plygrad.codegen.renderer.base import KernelSource
from plygrad.codegen.renderer.c import C_SPELLING, CFunction
from plygrad.codegen.renderer.cuda import CUDA_RULES, CUDA_SPELLING, CudaFunction, CudaRenderer
from plygrad.codegen.renderer.hip_math import MATH_HELPERS, MATH_NEEDS
from plygrad.codegen.renderer.hip_mma import MMA_HELPERS, HipMmaStatements
from plygrad.codegen.renderer.hip_types import BITS, PRELUDE, helper_source, hip_literal, hip_vector_source
from plygrad.codegen.renderer.rules import MATH_OPS, Call, Rule, Spelling
from plygrad.ir import DType, Ops, Target, UOp, dtypes

# clang's builtins by (block, thread) and dimension
_BUILTIN_IDS: Final = {"blockIdx": "__builtin_amdgcn_workgroup_id_{}()",
                       "threadIdx": "__builtin_amdgcn_workitem_id_{}()"}
_HIP_RESERVED: Final = frozenset({"static_cast", "reinterpret_cast", "const_cast", "dynamic_cast", "register",
                                  "alignas", "alignof", "static_assert", "thread_local", "typeid", "char16_t",
                                  "char32_t", "wchar_t", "noexcept", "requires", "concept", "co_await"})
# a float builtin each op has where the AMDGPU backend lowers it accurately (hip_math.py says which and why)
_FLOAT32_BUILTINS: Final = {Ops.SQRT: "__builtin_sqrtf", Ops.TRUNC: "__builtin_truncf", Ops.EXP2: "__builtin_exp2f",
                            Ops.LOG2: "__builtin_log2f"}
_FLOAT64_BUILTINS: Final = {Ops.SQRT: "__builtin_sqrt", Ops.TRUNC: "__builtin_trunc"}
# the rest: the program's own helpers, computed in double
_MATH_HELPER: Final = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.POW: "pow"}


def _math_call(op: Ops, float64: bool) -> Call:
    """`op` on float locals (or float64): the builtin where there is an accurate one, else the helper in double."""
    args = ("{0}", "{1}") if op is Ops.POW else ("{0}",)
    builtin = (_FLOAT64_BUILTINS if float64 else _FLOAT32_BUILTINS).get(op)
    if builtin is not None:
        return Call(f"{builtin}({', '.join(args)})")
    helper = _MATH_HELPER[op]
    needs = (helper, *MATH_NEEDS[helper])
    if float64:
        return Call(f"plygrad_{helper}({', '.join(args)})", needs)
    return Call(f"(float)plygrad_{helper}({', '.join(f'(double){a}' for a in args)})", needs)  # one rounding


def _hip_helper(name: str) -> str:
    if name in MATH_HELPERS:
        return MATH_HELPERS[name]
    if name in MMA_HELPERS:
        return MMA_HELPERS[name]
    return helper_source(name)


# CUDA's spelling where it needs no header: plain IEEE operators (the prelude forbids contraction), clang's builtins
HIP_SPELLING: Final = replace(
    CUDA_SPELLING, literal=hip_literal, helper=_hip_helper, arith=C_SPELLING.arith, arith64=C_SPELLING.arith64,
    mad=C_SPELLING.mad,
    fma={dtypes.float32: "__builtin_fmaf({a}, {b}, {c})", dtypes.float64: "__builtin_fma({a}, {b}, {c})"},
    math={op: (_math_call(op, False), _math_call(op, True)) for op in MATH_OPS})


def _bitcast(r: CFunction, node: UOp) -> str:
    """Through the storage bits with `__builtin_bit_cast` (bool: any nonzero byte is true)."""
    x, dtype = node.src[0], node.dtype
    if x.dtype.itemsize != dtype.itemsize:
        raise CodegenError(f"kernel {r.kernel.name}: BITCAST {x.dtype!r} -> {dtype!r} changes the size")
    source_type, dest_type = r.storage_type(x.dtype), r.storage_type(dtype)
    stored = f"({source_type})({r.to_storage(x.dtype, r.ref(x))})"
    if dtype is dtypes.bool:
        return f"(__builtin_bit_cast(unsigned char, {stored}) != 0)"
    bits = stored if source_type == dest_type else f"__builtin_bit_cast({dest_type}, {stored})"
    return r.from_storage(dtype, bits)


HIP_RULES: Final[dict[Ops, Rule]] = {**CUDA_RULES, Ops.BITCAST: _bitcast}


def hip_position(ids: str, dim: int) -> str:
    """The 64-bit index of launch dimension `dim` of `ids` ("blockIdx" or "threadIdx") as a clang builtin."""
    return f"(long long){_BUILTIN_IDS[ids].format('xyz'[dim])}"


class HipRenderer(CudaRenderer):
    """Renders a linearized kernel as one HIP kernel for `Target.hip(arch)`; launches like the cuda renderer's
    (`global_size` in workgroups, `local_size` in work-items)."""

    name = "hip"

    def render(self, kernel: KernelSource) -> str:
        return HipFunction(kernel, self.target).source()


class HipFunction(CudaFunction):
    """The CUDA renderer's function state with HIP's header-free spelling (module docstring)."""

    reserved = CudaFunction.reserved | _HIP_RESERVED
    rules: ClassVar[Mapping[Ops, Rule]] = HIP_RULES
    spelling: ClassVar[Spelling] = HIP_SPELLING
    barrier = ('__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); '
               '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");')
    position = staticmethod(hip_position)

    def __init__(self, kernel: KernelSource, target: Target) -> None:
        super().__init__(kernel, target)
        self.mma = HipMmaStatements(self)

    # ---- the frame ---------------------------------------------------------------------------------------------
    def prelude(self) -> str:
        """The pragmas, and the bit helpers when a respelled CUDA helper calls them."""
        respelled = any(h not in MATH_HELPERS and h not in MMA_HELPERS for h in self.helpers)
        return PRELUDE + (BITS if respelled else "")

    def signature(self, params: list[str]) -> str:
        return (f'extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(1, '
                f"{self.plan.threads}))) void {self.kernel.name}({', '.join(params)})")

    def vector_helpers(self, dtype: DType) -> str:
        return hip_vector_source(dtype)

    def shared_array(self, dtype: DType, number: int, size: int) -> str:
        return f"static __attribute__((shared)) {self.ctype(dtype)} smem{number}[{size}];"
