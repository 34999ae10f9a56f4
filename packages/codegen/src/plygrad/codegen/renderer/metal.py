"""The metal renderer: one self-contained Metal Shading Language `kernel` per program (docs/codegen.md §5.2).

A Metal kernel is a CUDA kernel in other words: this is the cuda renderer's frame (`CudaFunction`, the same
`launch_plan` over `gid`/`lid`, `threadgroup` arrays and barriers) with Metal's signature (buffers bound in parameter
order, variables as `constant long&`; past 31 bindings one `plygrad_args` struct of addresses and values), and the
C family's op table (rules.py) in `METAL_SPELLING` (metal_types.py; `metal::precise::` division and math, no
float64) and `METAL_RULES` (float MULACC is `fma`, BITCAST `as_type<T>`, float -> int a float-only `plygrad_f2i`).
Scalar code only: no vector loads yet (Target.metal has no vector widths) and no simdgroup-matrix tensor cores yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import ClassVar, Final

from plygrad.codegen.errors import CodegenError
from plygrad.codegen.renderer.base import KernelSource, VectorForms
from plygrad.codegen.renderer.c import C_SPELLING, CFunction
from plygrad.codegen.renderer.cuda import CUDA_RULES, CUDA_SPELLING, CudaFunction, CudaRenderer
from plygrad.codegen.renderer.metal_types import HELPERS, PREAMBLE, metal_literal, metal_local, metal_storage
from plygrad.codegen.renderer.rules import Call, Rule, Spelling, cast, mulacc
from plygrad.ir import DType, DTypeKind, Ops, PtrDType, Target, UOp, dtypes

_MATH: Final[dict[Ops, str]] = {Ops.SQRT: "metal::precise::sqrt", Ops.EXP2: "metal::precise::exp2",
                                Ops.LOG2: "metal::precise::log2", Ops.SIN: "metal::precise::sin",
                                Ops.POW: "metal::precise::pow", Ops.TRUNC: "trunc"}
# `/` is not correctly rounded in every math mode; the other operators are IEEE, never contracted (module docstring)
_ARITH: Final = {**{op: C_SPELLING.arith[op] for op in (Ops.ADD, Ops.SUB, Ops.MUL)},
                 Ops.FDIV: "metal::precise::divide({a}, {b})"}
METAL_SPELLING: Final = replace(
    CUDA_SPELLING, local=metal_local, storage=metal_storage, literal=metal_literal, helper=HELPERS.__getitem__,
    arith=_ARITH, arith64=_ARITH, mad=C_SPELLING.mad, fma={},  # no float64; float MULACC: METAL_RULES
    math={op: (Call(f"{name}({{0}}, {{1}})" if op is Ops.POW else f"{name}({{0}})"),) * 2
          for op, name in _MATH.items()})
# Metal's buffer argument table has 31 entries (indices 0-30) for buffers and setBytes values together; a kernel with
# more takes one struct of 8-byte fields instead (GPU addresses and values), which setBytes passes (4 KiB at most)
MAX_BINDINGS: Final = 31
MAX_ARGUMENT_FIELDS: Final = 4096 // 8
_METAL_RESERVED: Final = frozenset({
    "kernel", "vertex", "fragment", "device", "constant", "threadgroup", "thread", "threadgroup_imageblock",
    "ray_data", "object_data", "half", "bfloat", "uchar", "ushort", "uint", "ulong", "metal", "precise", "fast",
    "as_type", "gid", "lid", "args", "threadgroup_barrier", "mem_flags", "fma", "simd_sum", "size_t", "ptrdiff_t",
})


def metal_position(ids: str, dim: int) -> str:
    """The 64-bit index of a launch dimension: `gid` (the threadgroup) where CUDA says blockIdx, `lid` (the thread in
    it) where CUDA says threadIdx."""
    name = {"blockIdx": "gid", "threadIdx": "lid"}[ids]
    return f"(long){name}.{'xyz'[dim]}"


# ---- Metal's rules: where its value of an op differs from cuda.CUDA_RULES -----------------------------------------
def _mulacc(r: CFunction, node: UOp) -> str:
    if node.dtype.kind is DTypeKind.FLOAT:  # one rounding in float (docs/ir.md §5)
        a, b, c = r.refs(node)
        return r.rounded(node.dtype, f"fma({a}, {b}, {c})")
    return mulacc(r, node)


def _cast(r: CFunction, node: UOp) -> str:
    x, dtype = node.src[0], node.dtype
    if x.dtype.kind is DTypeKind.FLOAT and dtype.kind in (DTypeKind.SIGNED, DTypeKind.UNSIGNED):
        r.helpers.add("f2i")  # truncate, wrap to the width; NaN and inf give 0 (a float-only helper)
        return f"(({r.ctype(dtype)})plygrad_f2i({r.ref(x)}))"
    return cast(r, node)


def _bitcast(r: CFunction, node: UOp) -> str:
    """The source's storage bits as an unsigned integer of its width (`as_type` for float32 and half), then the
    destination's storage value from those bits; bool and bfloat16 (ushort bits) convert as integers."""
    x, dtype = node.src[0], node.dtype
    if x.dtype.itemsize != dtype.itemsize:
        raise CodegenError(f"kernel {r.kernel.name}: BITCAST {x.dtype!r} -> {dtype!r} changes the size")
    unsigned = r.ctype({1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[dtype.itemsize])
    stored = r.to_storage(x.dtype, r.ref(x))
    if x.dtype in (dtypes.float32, dtypes.float16):
        bits = f"as_type<{unsigned}>({stored})"
    else:
        bits = f"(({unsigned})({stored}))"
    if dtype in (dtypes.float32, dtypes.float16):
        value = f"as_type<{r.storage_type(dtype)}>({bits})"
    elif dtype is dtypes.bool:
        value = f"({bits} != 0)"
    elif dtype is dtypes.bfloat16:
        value = bits
    else:
        value = f"(({r.ctype(dtype)})({bits}))"
    return r.from_storage(dtype, value)


METAL_RULES: Final[dict[Ops, Rule]] = {**CUDA_RULES, Ops.MULACC: _mulacc, Ops.CAST: _cast, Ops.BITCAST: _bitcast}


class MetalRenderer(CudaRenderer):
    """Renders a linearized kernel as one Metal kernel; launched like CUDA's (`launch_dims`: threadgroups per grid,
    threads per threadgroup). See the module docstring."""

    name = "metal"
    vector_forms = VectorForms(alu=frozenset(), memory=frozenset())  # scalar code, for now

    def render(self, kernel: KernelSource) -> str:
        return MetalFunction(kernel, self.target).source()


class MetalFunction(CudaFunction):
    """The CUDA renderer's function state with Metal's spelling, frame and threadgroup memory."""

    reserved = CudaFunction.reserved | _METAL_RESERVED
    rules: ClassVar[Mapping[Ops, Rule]] = METAL_RULES
    spelling: ClassVar[Spelling] = METAL_SPELLING
    barrier = "threadgroup_barrier(mem_flags::mem_threadgroup);"
    position = staticmethod(metal_position)

    def __init__(self, kernel: KernelSource, target: Target) -> None:
        super().__init__(kernel, target)
        self.threadgroup_arrays: list[str] = []  # declared first in the kernel body

    # ---- the function ------------------------------------------------------------------------------------------
    def source(self) -> str:
        for node in self.kernel.linear:
            self.statement(node)
        if self.shared_bytes > self.target.shared_max:
            raise CodegenError(f"kernel {self.kernel.name}: its workgroup reductions need {self.shared_bytes} bytes "
                               f"of threadgroup memory, the target has {self.target.shared_max} (Target.shared_max); "
                               "use smaller GROUP amounts")
        decls = [self.param_decl(p.index, p.dtype, p.writable) for p in self.kernel.params]
        decls += [f"long {self.variable_name(v)}" for v in self.kernel.variables]
        helpers = "".join(self.helper_source(h) for h in sorted(self.helpers))
        positions = ["uint3 gid [[threadgroup_position_in_grid]]", "uint3 lid [[thread_position_in_threadgroup]]"]
        prologue: list[str] = []
        if len(decls) <= MAX_BINDINGS:  # each buffer and variable its own binding
            params = [f"{decl} [[buffer({slot})]]" for slot, decl in enumerate(decls[:len(self.kernel.params)])]
            params += [f"constant {decl.replace(' ', '& ', 1)} [[buffer({len(params) + k})]]"
                       for k, decl in enumerate(decls[len(self.kernel.params):])]
        elif len(decls) <= MAX_ARGUMENT_FIELDS:  # one argument struct of GPU addresses and values, at binding 0
            helpers += "struct plygrad_args {\n" + "".join(f"  {decl};\n" for decl in decls) + "};\n"
            params = ["constant plygrad_args& args [[buffer(0)]]"]
            prologue = [f"{decl} = args.{decl.rsplit(' ', 1)[1]};" for decl in decls]
        else:
            raise CodegenError(f"kernel {self.kernel.name}: {len(self.kernel.params)} buffers and "
                               f"{len(self.kernel.variables)} variables need {len(decls)} fields of 8 bytes, more than "
                               f"the {MAX_ARGUMENT_FIELDS} one setBytes argument struct holds; split the kernel")
        body = ["  " + line for line in [*self.threadgroup_arrays, *prologue]] + self.lines
        signature = f"kernel void {self.kernel.name}({', '.join([*params, *positions])})"
        return f"{PREAMBLE}{helpers}{signature} {{\n" + "\n".join(body) + "\n}\n"

    def param_decl(self, index: int, dtype: DType, writable: bool) -> str:
        const = "" if writable else "const "
        return f"{const}device {self.storage_type(dtype)}* data{index}"

    # ---- types -------------------------------------------------------------------------------------------------
    def local_type(self, dtype: DType) -> str:
        if dtype.count > 1:
            raise CodegenError(f"kernel {self.kernel.name}: the metal renderer renders scalar code, got a "
                               f"{dtype!r} value; keep vector widths out of a metal Target")
        return self.ctype(dtype)

    # ---- statements --------------------------------------------------------------------------------------------
    def statement(self, node: UOp) -> None:
        if node.op is Ops.DEFINE_LOCAL:
            ptr = node.dtype
            assert isinstance(ptr, PtrDType)
            local = self.ctype(ptr.base)  # 16-bit floats are float locals here too
            self.shared_bytes += ptr.size * (4 if local == "float" else ptr.base.itemsize)
            self.threadgroup_arrays.append(f"threadgroup {local} smem{node.arg}[{ptr.size}];")
            return
        super().statement(node)
