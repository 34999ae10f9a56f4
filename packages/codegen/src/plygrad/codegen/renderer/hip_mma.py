"""Matrix-core statements for the hip renderer: a WMMA (codegen/tensor_core.py) as one call of a helper around
clang's AMDGPU builtin.

The statements are the cuda renderer's (cuda_mma.MmaStatements); only the call differs: the helper packs the
fragments into clang vector types and calls `__builtin_amdgcn_wmma_f32_16x16x16_f16_w32` (RDNA3) or
`__builtin_amdgcn_mfma_f32_16x16x16f16` (CDNA; `..bf16_1k` for bfloat16) with the accumulators as C and D. It is
defined under `#ifndef` of its own name, so the CPU emulation (packages/codegen/tests/hip_emu.h) can supply its own.
docs/codegen.md §5.3 gives the lane layouts and the calls.
"""

from __future__ import annotations

from typing import Final

from plygrad.codegen.errors import CodegenError
from plygrad.codegen.renderer.cuda_mma import MmaStatements
from plygrad.codegen.renderer.hip_types import DEVICE
from plygrad.ir import DType, Ops, TensorCore, UOp, dtypes

_SHORT: Final[dict[DType, str]] = {dtypes.float16: "f16", dtypes.bfloat16: "bf16"}
# (lanes) -> (instruction family, A/B elements per lane, accumulators per lane)
_FAMILIES: Final[dict[int, tuple[str, int, int]]] = {32: ("wmma", 16, 8), 64: ("mfma", 4, 4)}


def helper_name(tc: TensorCore) -> str:
    """`plygrad_wmma_f32_16x16x16_f16_w32` (RDNA3, 32 lanes) or `plygrad_mfma_f32_16x16x16_bf16` (CDNA, 64)."""
    family = _FAMILIES[tc.threads][0]
    m, n, k = tc.dims
    suffix = "_w32" if family == "wmma" else ""
    return f"plygrad_{family}_f32_{m}x{n}x{k}_{_SHORT[tc.dtype_in]}{suffix}"


def _helper_source(tc: TensorCore) -> str:
    family, elements, accumulators = _FAMILIES[tc.threads]
    name, short = helper_name(tc), _SHORT[tc.dtype_in]
    lane, convert = ("_Float16", "__builtin_bit_cast(_Float16, {})") if short == "f16" else ("short", "(short){}")
    if family == "wmma":
        builtin = f"__builtin_amdgcn_wmma_f32_16x16x16_{short}_w32(a, b, c)"
        layout = "a lane holds row lane%16 of A, column lane%16 of B and D elements (2i + lane/16, lane%16)"
    else:
        builtin = f"__builtin_amdgcn_mfma_f32_16x16x16{short}{'_1k' if short == 'bf16' else ''}(a, b, c, 0, 0, 0)"
        layout = ("a lane holds A elements (lane%16, 4*(lane/16) + i), B elements (4*(lane/16) + i, lane%16) and D "
                  "elements (4*(lane/16) + i, lane%16)")
    a = ", ".join(f"unsigned short a{i}" for i in range(elements))
    b = ", ".join(f"unsigned short b{i}" for i in range(elements))
    a_lanes = ", ".join(convert.format(f"a{i}") for i in range(elements))
    b_lanes = ", ".join(convert.format(f"b{i}") for i in range(elements))
    d_lanes = ", ".join(f"d[{i}]" for i in range(accumulators))
    stores = " ".join(f"d[{i}] = c[{i}];" for i in range(accumulators))
    return f"""#ifndef {name}
/* D = A * B + D on one 16x16 tile: all {tc.threads} lanes of a wavefront call it together ({layout}; bits of
   {tc.dtype_in.name} in, float32 accumulators in and out); a host that emulates it defines the name first */
{DEVICE} void {name}(float* d, {a}, {b}) {{
  typedef {lane} fragment __attribute__((ext_vector_type({elements})));
  typedef float accumulators __attribute__((ext_vector_type({accumulators})));
  fragment a = {{{a_lanes}}}, b = {{{b_lanes}}};
  accumulators c = {{{d_lanes}}};
  c = {builtin};
  {stores}
}}
#endif
"""


MMA_HELPERS: Final[dict[str, str]] = {
    helper_name(tc): _helper_source(tc)
    for tc in (TensorCore((16, 16, 16), dt, dtypes.float32, lanes) for lanes in _FAMILIES
               for dt in (dtypes.float16, dtypes.bfloat16))
}


class HipMmaStatements(MmaStatements):
    """The cuda renderer's tensor-core statements with AMD's helpers (module docstring)."""

    def _wmma(self, node: UOp) -> None:
        fn, tc = self.fn, node.arg
        assert isinstance(tc, TensorCore)
        a, b, acc = node.src
        family = _FAMILIES.get(tc.threads)
        name = helper_name(tc) if family is not None and tc.dtype_in in _SHORT else ""
        if name not in MMA_HELPERS or tc.dtype_out is not dtypes.float32:
            raise CodegenError(f"kernel {fn.kernel.name}: the hip renderer has no matrix-core helper for tensor core "
                               f"{tc.dims} {tc.dtype_in!r} -> {tc.dtype_out!r} with {tc.threads} lanes; it has "
                               f"{sorted(MMA_HELPERS)}")
        assert family is not None
        _, elements, accumulators = family
        for operand, dtype, count, what in ((a, tc.dtype_in, elements, "A"), (b, tc.dtype_in, elements, "B"),
                                            (acc, tc.dtype_out, accumulators, "C")):
            if operand.op is not Ops.VECTORIZE or operand.dtype.scalar() is not dtype or len(operand.src) != count:
                raise CodegenError(f"kernel {fn.kernel.name}: the {what} operand of a {tc.threads}-lane WMMA must be "
                                   f"a VECTORIZE of {count} {dtype!r} lanes (codegen/tensor_core.py builds it so), "
                                   f"got {operand.op.name} {operand.dtype!r}")
        fn.helpers.add(name)
        result = f"v{len(fn.names)}"
        fn.names[node] = result
        fn.emit(f"float {result}[{accumulators}] = {{{', '.join(fn.ref(s) for s in acc.src)}}};")
        bits = [self._bits(x, tc.dtype_in) for x in (*a.src, *b.src)]
        fn.emit(f"{name}({result}, {', '.join(bits)});")
