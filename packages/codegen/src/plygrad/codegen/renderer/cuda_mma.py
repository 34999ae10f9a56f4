"""Tensor-core statements for the cuda renderer: a WMMA (codegen/tensor_core.py) as one call of an inline-PTX helper.

The helper (`MMA_HELPERS`, listed in cuda_types.HELPERS) takes the four float32 accumulators in place and the lane's
A and B fragments as 16-bit patterns, packs them into the 32-bit registers `mma.sync` takes and runs
`mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32` (or `.bf16`). It is defined under `#ifndef` of its own name, so
the CPU emulation (tests/cuda_emu.h) can supply its own. `MmaStatements` renders the statements around the call
(fragment VECTORIZEs and loads folded into it, the result's lanes read from the array); `warp_lanes` finds each
WMMA's lane range, which the launch makes `threadIdx.x`. docs/codegen.md §5.1 shows the rendered statements.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from plygrad.codegen.errors import CodegenError
from plygrad.codegen.renderer.c import CFunction
from plygrad.ir import AxisType, DType, Ops, TensorCore, UOp, dtypes

_PTX_TYPES: Final[dict[DType, str]] = {dtypes.float16: "f16", dtypes.bfloat16: "bf16", dtypes.float32: "f32"}


def helper_name(tc: TensorCore) -> str:
    """`plygrad_mma_m16n8k16_f32_f16`: shape, accumulator type, input type."""
    m, n, k = tc.dims
    return f"plygrad_mma_m{m}n{n}k{k}_{_PTX_TYPES[tc.dtype_out]}_{_PTX_TYPES[tc.dtype_in]}"


def _helper_source(dtype_in: DType) -> str:
    tc = TensorCore((16, 8, 16), dtype_in, dtypes.float32, 32)
    name, ptx = helper_name(tc), _PTX_TYPES[dtype_in]
    a = ", ".join(f"unsigned short a{i}" for i in range(8))
    b = ", ".join(f"unsigned short b{i}" for i in range(4))
    packed = "; ".join(f"unsigned {x}{i}{i + 1} = (unsigned){x}{i} | ((unsigned){x}{i + 1} << 16)"
                       for x, count in (("a", 8), ("b", 4)) for i in range(0, count, 2))
    return f"""#ifndef {name}
/* D = A * B + D on one 16x8x16 tile: all 32 lanes of the warp call it together with their fragments (PTX ISA,
   mma.m16n8k16 fragments: a0..a7, b0..b3 as {ptx} bits, d0..d3); a host that emulates it defines the name first */
__device__ inline void {name}(float* d, {a}, {b}) {{
  {packed};
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, "
               "{{%8, %9}}, {{%0, %1, %2, %3}};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a01), "r"(a23), "r"(a45), "r"(a67), "r"(b01), "r"(b23));
}}
#endif
"""


# by helper name, for cuda_types.HELPERS (a program includes the ones it calls)
MMA_HELPERS: Final[dict[str, str]] = {
    helper_name(TensorCore((16, 8, 16), dt, dtypes.float32, 32)): _helper_source(dt)
    for dt in (dtypes.float16, dtypes.bfloat16)
}


def warp_lanes(linear: Sequence[UOp]) -> set[UOp]:
    """The lane range of every WMMA in `linear`: the LOCAL range of the tensor core's thread count that both of its
    fragments depend on. Raises CodegenError when that is not exactly one range (a batch axis split by LOCAL into
    as many threads as a warp has would be a second one)."""
    lanes: set[UOp] = set()
    for node in linear:
        if node.op is not Ops.WMMA:
            continue
        tc: TensorCore = node.arg

        def local_ranges(x: UOp, tc: TensorCore = tc) -> set[UOp]:
            return {r for r in x.toposort if r.op is Ops.RANGE and r.arg[1] is AxisType.LOCAL
                    and r.src[0].op is Ops.CONST and int(r.src[0].arg) == tc.threads}

        found = local_ranges(node.src[0]) & local_ranges(node.src[1])
        if len(found) != 1:
            raise CodegenError(f"a tensor-core tile needs one LOCAL range of {tc.threads} lanes both fragments read, "
                               f"found axes {sorted(int(r.arg[0]) for r in found)}; don't split a batch axis into "
                               f"{tc.threads} LOCAL threads in a TC kernel")
        lanes |= found
    if len(lanes) > 1:
        raise CodegenError("the tensor-core tiles of one kernel use different lane ranges "
                           f"{sorted(int(r.arg[0]) for r in lanes)}: apply TC once")
    return lanes


class MmaStatements:
    """The statements of one program that belong to its WMMAs (docs/codegen.md §5.1), rendered into `fn`'s lines."""

    def __init__(self, fn: CFunction) -> None:
        self.fn = fn
        users: dict[UOp, list[UOp]] = {}
        for node in fn.kernel.linear:
            for s in node.src:
                users.setdefault(s, []).append(node)
        wmmas = [n for n in fn.kernel.linear if n.op is Ops.WMMA]
        self.fragments = {s for w in wmmas for s in w.src
                          if s.op is Ops.VECTORIZE and all(u.op is Ops.WMMA for u in users.get(s, ()))}
        self.loads = {x for v in self.fragments for x in v.src if self._bits_in_memory(x)
                      and all(u in self.fragments for u in users.get(x, ()))}
        self.lanes = {n for n in fn.kernel.linear if n.op is Ops.GEP and n.src[0].op is Ops.WMMA}

    def owns(self, node: UOp) -> bool:
        return node.op is Ops.WMMA or node in self.fragments or node in self.loads or node in self.lanes

    def statement(self, node: UOp) -> None:
        fn = self.fn
        if node.op is Ops.WMMA:
            self._wmma(node)
        elif node in self.lanes:
            name = f"v{len(fn.names)}"
            fn.names[node] = name
            fn.emit(f"float {name} = {fn.ref(node.src[0])}[{node.arg[0]}];")
        # fragments and their loads render inside the call

    def _wmma(self, node: UOp) -> None:
        fn, tc = self.fn, node.arg
        assert isinstance(tc, TensorCore)
        name = helper_name(tc)
        a, b, acc = node.src
        for operand, dtype, what in ((a, tc.dtype_in, "A"), (b, tc.dtype_in, "B"), (acc, tc.dtype_out, "C")):
            if operand.op is not Ops.VECTORIZE or operand.dtype.scalar() is not dtype:
                raise CodegenError(f"kernel {fn.kernel.name}: the {what} operand of a tensor-core WMMA must be a "
                                   f"VECTORIZE of {dtype!r} lanes (codegen/tensor_core.py builds it so), got "
                                   f"{operand.op.name} {operand.dtype!r}")
        if tc.dtype_out is not dtypes.float32 or len(acc.src) != 4 or name not in MMA_HELPERS:
            raise CodegenError(f"kernel {fn.kernel.name}: the cuda renderer has no mma helper for tensor core "
                               f"{tc.dims} {tc.dtype_in!r} -> {tc.dtype_out!r}; it has {sorted(MMA_HELPERS)}")
        fn.helpers.add(name)
        result = f"v{len(fn.names)}"
        fn.names[node] = result
        fn.emit(f"float {result}[4] = {{{', '.join(fn.ref(s) for s in acc.src)}}};")
        bits = [self._bits(x, tc.dtype_in) for x in (*a.src, *b.src)]
        fn.emit(f"{name}({result}, {', '.join(bits)});")

    @staticmethod
    def _bits_in_memory(x: UOp) -> bool:
        """A fragment element read from a buffer, whose 16-bit pattern the call can take from memory."""
        return x.op is Ops.LOAD and len(x.src) == 1 and x.src[0].op is Ops.INDEX and x.src[0].src[0].op is Ops.PARAM

    def _bits(self, x: UOp, dtype: DType) -> str:
        """The 16-bit pattern of fragment element `x` (its dtype is `dtype`, float16 or bfloat16)."""
        fn = self.fn
        if self._bits_in_memory(x):
            index = x.src[0]
            bits = fn.address(index)
            return bits if len(index.src) == 2 else f"({fn.ref(index.src[2])} ? {bits} : (unsigned short)0)"
        return fn.to_storage(dtype, fn.ref(x))  # a float local holding a value of `dtype`: converted exactly
