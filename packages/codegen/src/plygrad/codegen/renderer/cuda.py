"""The CUDA renderer: one self-contained `extern "C" __global__` kernel per program (docs/codegen.md §5).

It writes values through the C family's op table (rules.py, with CUDA's `CUDA_SPELLING` and `CUDA_RULES`: float
arithmetic as the never-contracted `__f*_rn` intrinsics, 16-bit floats as `unsigned short` bits, vector structs) and
owns the frame: GLOBAL ranges are block indices, LOCAL and GROUP_REDUCE ranges thread indices (`launch_plan`; more
than three of a kind share a dimension), workgroup reductions use `__shared__` arrays and `__syncthreads()`, and a
global store outside the GROUP_REDUCE block is made by the group's thread 0 only. Vectors are memory-only
(`vector_forms`): one aligned `plygrad_load_float4` into a struct whose lanes are scalar locals, and back.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Final

from plygrad.codegen.errors import CodegenError
from plygrad.codegen.renderer.base import KernelSource, Renderer, VectorForms
from plygrad.codegen.renderer.c import CFunction
from plygrad.codegen.renderer.cuda_mma import MmaStatements, warp_lanes
from plygrad.codegen.renderer.cuda_types import (
    HELPERS,
    VECTOR_DTYPES,
    cuda_literal,
    cuda_local,
    cuda_storage,
    vector_source,
    vector_type,
)
from plygrad.codegen.renderer.rules import LIBM, RULES, Call, Rule, Spelling
from plygrad.codegen.vectorize import lane_stride
from plygrad.ir import AxisType, DType, DTypeKind, Ops, PtrDType, Target, UOp, dtypes

_RN: Final[dict[Ops, str]] = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.FDIV: "div"}
# float ADD/SUB/MUL/FDIV/MULACC as the round-to-nearest intrinsics, which are never contracted (module docstring);
# SQRT of float locals correctly rounded whatever -prec-sqrt says, the rest CUDA's libdevice (sqrt(double) is
# always correctly rounded)
CUDA_SPELLING: Final = Spelling(
    local=cuda_local, storage=cuda_storage, literal=cuda_literal, helper=HELPERS.__getitem__,
    arith={op: f"__f{name}_rn({{a}}, {{b}})" for op, name in _RN.items()},
    arith64={op: f"__d{name}_rn({{a}}, {{b}})" for op, name in _RN.items()},
    mad="__dadd_rn(__dmul_rn({a}, {b}), {c})",
    fma={dtypes.float32: "__fmaf_rn({a}, {b}, {c})", dtypes.float64: "__fma_rn({a}, {b}, {c})"},
    math={**LIBM, Ops.SQRT: (Call("__fsqrt_rn({0})"), LIBM[Ops.SQRT][1])}, math32={},
    register_vectors=False)  # vectors here are memory-only (float4 loads): a VECTORIZE of lanes is a constructor
_THREAD_AXES: Final = frozenset({AxisType.LOCAL, AxisType.GROUP_REDUCE})
_LAUNCH_AXES: Final = _THREAD_AXES | {AxisType.GLOBAL}
_CUDA_RESERVED: Final = frozenset({
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "bool", "true", "false", "class", "new", "delete",
    "this", "template", "typename", "namespace", "operator", "private", "public", "protected", "virtual", "friend",
    "using", "try", "catch", "throw", "explicit", "mutable", "export", "nullptr", "decltype", "constexpr", "asm",
    "and", "or", "not", "xor", "fmod", "isnan", "isinf", "max", "min", "half", "float2", "float4", "dim3", "uint3",
})
_CUDA_TAKEN: Final = re.compile(r"smem[0-9]+")


@dataclass(frozen=True)
class LaunchPlan:
    """How a kernel's launch ranges map to CUDA's indices, and the launch sizes that follow.

    `index[r]` is the C++ expression of range `r`'s value in a thread; `guard[r]` the size a GROUP_REDUCE range
    smaller than its thread dimension must test; `group_index` the expression of the GROUP_REDUCE dimension (None
    when the kernel has no workgroup reduction)."""

    global_size: tuple[int, int, int]
    local_size: tuple[int, int, int]
    index: dict[UOp, str] = field(default_factory=dict)
    guard: dict[UOp, int] = field(default_factory=dict)
    group_index: str | None = None

    @property
    def threads(self) -> int:
        return self.local_size[0] * self.local_size[1] * self.local_size[2]


def _pack(items: list[tuple[tuple[UOp, ...], int]], maxes: tuple[int, int, int], what: str,
          name: str) -> list[list[tuple[tuple[UOp, ...], int, int]]]:
    """Items (ranges sharing one index, size), innermost first, into at most three dimensions within `maxes`: one
    dimension each when they fit, else consecutive items multiplied into one. Each dimension lists
    (ranges, size, stride)."""
    if len(items) <= 3 and all(size <= maxes[d] for d, (_, size) in enumerate(items)):
        return [[(rs, size, 1)] for rs, size in items]
    dims: list[list[tuple[tuple[UOp, ...], int, int]]] = [[]]
    product = 1
    for rs, size in items:
        if dims[-1] and product * size > maxes[len(dims) - 1]:
            if len(dims) == 3:
                break
            dims.append([])
            product = 1
        if size > maxes[len(dims) - 1]:
            break
        dims[-1].append((rs, size, product))
        product *= size
    else:
        return dims
    sizes = [size for _, size in items]
    raise CodegenError(f"kernel {name}: {what} of sizes {sizes} (innermost first) do not fit three dimensions of at "
                       f"most {maxes}; split the axes differently")


def cuda_position(ids: str, dim: int) -> str:
    """The 64-bit index of launch dimension `dim` of `ids` ("blockIdx" or "threadIdx"), as CUDA spells it."""
    return f"(long long){ids}.{'xyz'[dim]}"


def launch_plan(kernel: KernelSource, target: Target,
                position: Callable[[str, int], str] = cuda_position) -> LaunchPlan:
    """The launch of `kernel`: GLOBAL ranges are blocks, LOCAL ranges threads, every GROUP_REDUCE range the one
    thread dimension after the LOCAL ones (sized by the largest; smaller ones guard). The range with the smallest
    stride in the stored indices comes first, so it is `x`: neighbouring threads store neighbouring elements."""
    ranges = list(dict.fromkeys(n for n in kernel.linear if n.op is Ops.RANGE and n.arg[1] in _LAUNCH_AXES))
    for r in ranges:
        if r.src[0].op is not Ops.CONST:
            raise CodegenError(f"kernel {kernel.name}: {r.arg[1].name} axis {r.arg[0]} has a symbolic size; a "
                               "launch size must be a number (gpu_dims keeps such an axis a loop)")

    stored = [n.src[0].src[1] for n in kernel.linear if n.op is Ops.STORE and n.src[0].src[0].op is Ops.PARAM]

    lanes = warp_lanes(kernel.linear)  # a tensor core's lanes come first: a warp is threadIdx.x 0..31

    def innermost_first(r: UOp) -> tuple[bool, float, int]:
        """The smallest stride the range has in a stored index (neighbouring threads, neighbouring elements)."""
        strides = [abs(s) for s in (lane_stride(index, r) for index in stored) if s]
        return (r not in lanes, min(strides, default=math.inf), -int(r.arg[0]))

    def by_axis(axis_type: AxisType) -> list[UOp]:
        return sorted((r for r in ranges if r.arg[1] is axis_type), key=innermost_first)

    blocks: list[tuple[tuple[UOp, ...], int]] = [((r,), int(r.src[0].arg)) for r in by_axis(AxisType.GLOBAL)]
    threads: list[tuple[tuple[UOp, ...], int]] = [((r,), int(r.src[0].arg)) for r in by_axis(AxisType.LOCAL)]
    groups = by_axis(AxisType.GROUP_REDUCE)
    group_size = max((int(g.src[0].arg) for g in groups), default=0)
    if groups:
        threads.append((tuple(groups), group_size))
    index: dict[UOp, str] = {}
    group_index: str | None = None
    sizes: list[tuple[int, int, int]] = []
    for items, maxes, ids, what in ((blocks, target.global_max, "blockIdx", "GLOBAL axes"),
                                    (threads, target.local_max, "threadIdx", "LOCAL/GROUP axes")):
        totals = [1, 1, 1]
        for d, members in enumerate(_pack(items, maxes, what, kernel.name)):
            totals[d] = math.prod(size for _, size, _ in members)
            for rs, size, stride in members:
                expr = position(ids, d)
                if stride > 1:
                    expr = f"({expr} / {stride})"
                if stride * size < totals[d]:
                    expr = f"({expr} % {size})"
                index.update((r, expr) for r in rs)
                if rs[0].arg[1] is AxisType.GROUP_REDUCE:
                    group_index = expr
        sizes.append((totals[0], totals[1], totals[2]))
    guard = {g: int(g.src[0].arg) for g in groups if int(g.src[0].arg) < group_size}
    plan = LaunchPlan(sizes[0], sizes[1], index, guard, group_index)
    if plan.threads > target.max_threads_per_group:
        raise CodegenError(f"kernel {kernel.name}: a workgroup of {plan.local_size} = {plan.threads} threads exceeds "
                           f"the target's max_threads_per_group {target.max_threads_per_group}; use smaller "
                           "LOCAL/GROUP amounts")
    return plan


# ---- CUDA's rules: where its value of an op differs from rules.RULES ------------------------------------------------
def _load(r: CFunction, node: UOp) -> str:
    index = node.src[0]
    if index.src[0].op is Ops.DEFINE_LOCAL:
        return f"smem{index.src[0].arg}[{r.ref(index.src[1])}]"
    return RULES[Ops.LOAD](r, node)


def _gep(r: CFunction, node: UOp) -> str:
    """A lane of a vector struct, in storage form."""
    return r.from_storage(node.dtype, f"{r.ref(node.src[0])}.v[{node.arg[0]}]")


def _vectorize(r: CFunction, node: UOp) -> str:
    lanes = ", ".join(r.to_storage(s.dtype, r.ref(s)) for s in node.src)
    return f"{r.local_type(node.dtype)}{{{{{lanes}}}}}"


def _bitcast(r: CFunction, node: UOp) -> str:
    """Through the bits: the source's storage value as an unsigned integer of its width, then the destination's
    storage type from those bits (CUDA's `__float_as_uint` family; no unions or memcpy)."""
    x, dtype = node.src[0], node.dtype
    if x.dtype.itemsize != dtype.itemsize:
        raise CodegenError(f"kernel {r.kernel.name}: BITCAST {x.dtype!r} -> {dtype!r} changes the size")
    stored = r.to_storage(x.dtype, r.ref(x))
    bits = _to_bits(x.dtype, stored)
    return r.from_storage(dtype, _from_bits(dtype, bits))


CUDA_RULES: Final[dict[Ops, Rule]] = {**RULES, Ops.LOAD: _load, Ops.GEP: _gep, Ops.VECTORIZE: _vectorize,
                                      Ops.BITCAST: _bitcast}


class CudaRenderer(Renderer):
    """Renders a linearized kernel as one CUDA kernel; see the module docstring and docs/codegen.md §5."""

    name = "cuda"
    # a GPU thread's arithmetic is scalar; its loads and stores move up to 16 aligned bytes at once
    vector_forms = VectorForms(alu=frozenset(), memory=VECTOR_DTYPES, aligned=True)

    def render(self, kernel: KernelSource) -> str:
        return CudaFunction(kernel, self.target).source()

    def launch_dims(self, kernel: KernelSource) -> tuple[tuple[int, int, int], tuple[int, int, int] | None]:
        """(blocks per grid, threads per block): `global_size` counts blocks, as CUDA's gridDim does."""
        plan = launch_plan(kernel, self.target)
        return plan.global_size, plan.local_size


class CudaFunction(CFunction):
    """The C renderer's function state with CUDA's spelling, launch indices and shared memory."""

    reserved = CFunction.reserved | _CUDA_RESERVED
    rules: ClassVar[Mapping[Ops, Rule]] = CUDA_RULES
    spelling: ClassVar[Spelling] = CUDA_SPELLING
    # spelling hooks of the frame a subclass (the metal renderer) changes: a workgroup barrier statement, and the
    # expression of a launch index (launch_plan)
    barrier = "__syncthreads();"
    position = staticmethod(cuda_position)

    def __init__(self, kernel: KernelSource, target: Target) -> None:
        super().__init__(kernel)
        self.target = target
        self.plan = launch_plan(kernel, target, self.position)
        self.closers: list[tuple[UOp, str, bool]] = []  # per open range: its closing text, whether a GROUP block
        self.group_depth = 0
        self.shared_bytes = 0
        self.barrier_loops = _loops_around_barriers(kernel.linear, self.plan)
        self.mma = MmaStatements(self)
        # the threads of a workgroup reduction share the output loops after it (`shared_over_group`)
        self.group_size = max((int(n.src[0].arg) for n in kernel.linear
                               if n.op is Ops.RANGE and n.arg[1] is AxisType.GROUP_REDUCE), default=0)
        self.shared_loop: UOp | None = None  # the open loop whose iterations the group's threads take in turn

    # ---- the function ------------------------------------------------------------------------------------------
    def source(self) -> str:
        for node in self.kernel.linear:
            self.statement(node)
        if self.shared_bytes > self.target.shared_max:
            raise CodegenError(f"kernel {self.kernel.name}: its workgroup reductions need {self.shared_bytes} bytes "
                               f"of shared memory, the target has {self.target.shared_max} (Target.shared_max); "
                               "use smaller GROUP amounts")
        params = [self.param_decl(p.index, p.dtype, p.writable) for p in self.kernel.params]
        params += [f"long long {self.variable_name(v)}" for v in self.kernel.variables]
        helpers = "".join(self.helper_source(h) for h in sorted(self.helpers))
        helpers += "".join(self.vector_helpers(d) for d in sorted(self.vectors, key=lambda d: (d.itemsize, str(d))))
        return f"{self.prelude()}{helpers}{self.signature(params)} {{\n" + "\n".join(self.lines) + "\n}\n"

    # ---- the frame's spelling (the hip renderer respells it) --------------------------------------------------
    def prelude(self) -> str:
        """Text before the helpers: none for CUDA."""
        return ""

    def signature(self, params: list[str]) -> str:
        return (f'extern "C" __global__ void __launch_bounds__({self.plan.threads}) '
                f"{self.kernel.name}({', '.join(params)})")

    def vector_helpers(self, dtype: DType) -> str:
        """The struct of a vector dtype and its aligned load/store helpers."""
        return vector_source(dtype)

    def shared_array(self, dtype: DType, number: int, size: int) -> str:
        """The declaration of shared array `smem<number>` of `size` elements of scalar `dtype`."""
        return f"__shared__ {self.ctype(dtype)} smem{number}[{size}];"

    def variable_name(self, var: UOp) -> str:
        name = str(var.arg[0])
        if _CUDA_TAKEN.fullmatch(name):
            raise CodegenError(f"kernel {self.kernel.name}: variable {name!r} cannot name a CUDA parameter (smem<N> "
                               "names the renderer's shared arrays); rename the variable")
        return super().variable_name(var)

    def param_decl(self, index: int, dtype: DType, writable: bool) -> str:
        const = "" if writable else "const "
        return f"{const}{self.storage_type(dtype)}* __restrict__ data{index}"

    # ---- types -------------------------------------------------------------------------------------------------
    def local_type(self, dtype: DType) -> str:
        if dtype.count > 1:  # a memory-only vector: the struct its load gives and its store takes
            self.vectors.add(dtype)
            return vector_type(dtype)
        return self.ctype(dtype)

    # ---- statements --------------------------------------------------------------------------------------------
    def statement(self, node: UOp) -> None:
        op = node.op
        if op is Ops.RANGE:
            self.open_range(node)
        elif op is Ops.END:
            self.close_range(node.src[0])
        elif op is Ops.BARRIER:
            self.emit(self.barrier)
        elif op is Ops.DEFINE_LOCAL:
            ptr = node.dtype
            assert isinstance(ptr, PtrDType)
            self.shared_bytes += ptr.size * _local_bytes(ptr.base)
            self.emit(self.shared_array(ptr.base, int(node.arg), ptr.size))
        elif self.mma.owns(node):  # a tensor-core tile and the statements feeding it (cuda_mma.py)
            self.mma.statement(node)
        else:
            super().statement(node)

    def open_range(self, node: UOp) -> None:
        axis, axis_type = node.arg
        var = self.ref(node)
        if node in self.plan.index:
            self.emit("{")
            self.indent += 1
            self.emit(f"{self.ctype(dtypes.index)} {var} = {self.plan.index[node]};")
            closer = "}"
            if node in self.plan.guard:  # a GROUP_REDUCE range smaller than the group dimension
                self.emit(f"if ({var} < {self.plan.guard[node]}) {{")
                self.indent += 1
                closer = "}}"
            group = axis_type is AxisType.GROUP_REDUCE
            self.group_depth += int(group)
            self.closers.append((node, closer, group))
            return
        if axis_type in _LAUNCH_AXES or axis_type is AxisType.THREAD:
            raise CodegenError(f"kernel {self.kernel.name}: RANGE axis {axis} is {axis_type.name}, which the cuda "
                               "renderer cannot place (THREAD is for CPU targets)")
        if self.shared_over_group(node):
            # every thread of the group holds the reduction's result: they take the loop's iterations in turn
            # instead of each running all of them for thread 0 alone to store
            self.emit(f"for ({self.ctype(dtypes.index)} {var} = {self.plan.group_index}; {var} < "
                      f"{self.ref(node.src[0])}; {var} += {self.group_size}) {{")
            self.shared_loop = node
            self.indent += 1
            self.closers.append((node, "}", False))
            return
        self.emit(f"for ({self.ctype(dtypes.index)} {var} = 0; {var} < {self.ref(node.src[0])}; {var}++) {{")
        self.indent += 1
        self.closers.append((node, "}", False))

    def shared_over_group(self, node: UOp) -> bool:
        """An output loop outside every GROUP block of a kernel with a workgroup reduction, not inside another such
        loop, with no barrier in it (its iterations write distinct outputs and need nothing from each other): the
        loop a fused row statistic leaves serial in each thread (gpu.shared_output_ranges), e.g. softmax's
        outputs after its max and sum."""
        return (self.plan.group_index is not None and self.group_size > 1 and self.group_depth == 0
                and self.shared_loop is None and node.arg[1] is AxisType.LOOP and node not in self.barrier_loops)

    def close_range(self, node: UOp) -> None:
        opened, closer, group = self.closers.pop()
        assert opened is node, "linearized ranges must nest"
        if node is self.shared_loop:
            self.shared_loop = None
        if node in self.barrier_loops:  # the next iteration's writes wait for every thread's reads of this one
            self.emit(self.barrier)
        for _ in closer:
            self.indent -= 1
            self.emit("}")
        self.group_depth -= int(group)

    def store(self, node: UOp) -> None:
        index, value = node.src[0], node.src[1]
        buf = index.src[0]
        if buf.op is Ops.DEFINE_LOCAL:
            self.emit(f"smem{buf.arg}[{self.ref(index.src[1])}] = {self.ref(value)};")
            return
        if buf.op is not Ops.PARAM:
            super().store(node)
            return
        ptr = index.dtype
        assert isinstance(ptr, PtrDType)
        if value.dtype.count > 1:  # every lane from this (aligned) address on
            text = f"plygrad_store_{self.local_type(value.dtype)[8:]}(&{self.address(index)}, {self.ref(value)});"
        else:
            text = f"{self.address(index)} = {self.to_storage(ptr.base, self.ref(value))};"
        if self.plan.group_index is not None and self.group_depth == 0 and self.shared_loop is None:
            text = f"if ({self.plan.group_index} == 0) {text}"
        self.emit(text)

    def vector_load(self, node: UOp) -> None:
        """The lanes from this (aligned) address on, as one struct; a gated one is zeros where the gate is false."""
        index = node.src[0]
        struct = self.local_type(node.dtype)
        name = f"v{len(self.names)}"
        self.names[node] = name
        load = f"plygrad_load_{struct[8:]}(&{self.address(index)})"
        if len(index.src) == 3:
            load = f"({self.ref(index.src[2])} ? {load} : {struct}{{}})"
        self.emit(f"{struct} {name} = {load};")


def _local_bytes(dtype: DType) -> int:
    # 16-bit floats and fp8s are float locals
    return 4 if dtype in (dtypes.float16, dtypes.bfloat16, *dtypes.fp8s) else dtype.itemsize


def _unsigned_of(itemsize: int) -> str:
    return {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}[itemsize]


def _to_bits(dtype: DType, stored: str) -> str:
    if dtype is dtypes.float32:
        return f"__float_as_uint({stored})"
    if dtype is dtypes.float64:
        return f"((unsigned long long)__double_as_longlong({stored}))"
    return f"(({_unsigned_of(dtype.itemsize)})({stored}))"  # integers and the 16-bit floats' storage bits


def _from_bits(dtype: DType, bits: str) -> str:
    if dtype is dtypes.float32:
        return f"__uint_as_float({bits})"
    if dtype is dtypes.float64:
        return f"__longlong_as_double((long long)({bits}))"
    if dtype is dtypes.bool:
        return f"({bits} != 0)"
    if dtype.kind is DTypeKind.FLOAT:
        return bits  # float16/bfloat16 storage is the bits themselves
    return f"(({cuda_local(dtype)})({bits}))"


def _loops_around_barriers(linear: tuple[UOp, ...], plan: LaunchPlan) -> set[UOp]:
    """The serial loops (not launch ranges) with a BARRIER in their body."""
    open_loops: list[UOp] = []
    found: set[UOp] = set()
    for node in linear:
        if node.op is Ops.RANGE:
            open_loops.append(node)
        elif node.op is Ops.END:
            open_loops.pop()
        elif node.op is Ops.BARRIER:
            found.update(r for r in open_loops if r not in plan.index)
    return found
