"""The C renderer: one self-contained C11 function per kernel (the C program contract in docs/codegen.md).

`void NAME(T0* restrict data0, const T1* restrict data1, ..., long long VAR0, ...)` runs every loop itself;
a THREAD range gets `#pragma omp parallel for`. ALU ops follow docs/ir.md §5 exactly: fixed-width integers wrap
(signed arithmetic goes through the unsigned type of the same width, since signed overflow is undefined in C),
IDIV/MOD are C's `/` and `%`, MAX propagates NaN, float16/bfloat16 compute in float and round after every op.
Where C leaves a result undefined, the IR defines one and the source computes it, guarded only where the operands'
bounds (`UOp.vmin/vmax`) do not already rule the case out: x / 0 = x % 0 = 0 (C traps), MIN / -1 wraps, shifts by
a negative amount or by >= the width shift every bit out, float -> int of NaN/inf is 0 and out of range wraps.
Vector values (vectorize.py) use GCC/Clang vector extensions: `plygrad_float8` is `float` x 8, loaded and stored
with `__builtin_memcpy` (never assuming alignment), a lane is `v[j]`, a VECTORIZE a compound literal.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, Final

from plygrad.codegen.errors import CodegenError
from plygrad.codegen.renderer.base import KernelSource, Renderer
from plygrad.codegen.renderer.c_math import EXP2F, vector_exp2, vector_fma, vector_keep, vector_sqrt
from plygrad.codegen.renderer.c_transpose import SHUFFLE_MACRO, transpose_helper
from plygrad.codegen.renderer.c_types import (
    HELPER_OF,
    HELPERS,
    PREAMBLE,
    STREAMED_BYTES,
    c_local,
    c_storage,
    literal,
    round_to,
    stream_helper,
    vector_type,
    vector_typedefs,
)
from plygrad.codegen.renderer.fp8 import FP8_DTYPES, from_storage_fn, to_storage_fn
from plygrad.codegen.renderer.rules import INFIX, LIBM, RULES, Call, Rule, Spelling, zero
from plygrad.ir import AxisType, DType, Ops, PtrDType, Target, UOp, dtypes

_TAKEN: Final = re.compile(r"(data|ridx|v|acc|local)[0-9]+|plygrad_.*|__.*")
# C keywords and the names the source itself uses: a variable named like one would not compile
_C_RESERVED: Final = frozenset({
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern",
    "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed",
    "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "_Bool",
    "_Complex", "_Imaginary", "_Alignas", "_Alignof", "_Atomic", "_Generic", "_Noreturn", "_Static_assert",
    "_Thread_local", "_Float16", "bool", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t",
    "uint32_t", "uint64_t", "NAN", "INFINITY", "signbit", "main", "exp2", "exp2f", "log2", "log2f", "sin", "sinf",
    "sqrt", "sqrtf", "trunc", "truncf", "pow", "powf", "fma",
})
_REJECTED_AXES: Final = {AxisType.LOCAL: "LOCAL", AxisType.GROUP_REDUCE: "GROUP_REDUCE"}


def _c_helper(name: str) -> str:
    return EXP2F if name == "exp2f" else HELPERS[name]


_C_ARITH: Final = {op: f"({{a}} {INFIX[op]} {{b}})" for op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV)}
# C11 with GCC/Clang vector extensions: libm's functions (float32 EXP2 the program's own, c_math.py), fmaf/fma
# (an instruction with -march=native on every x86-64 with FMA and every Arm64, libm's correctly rounded one elsewhere)
C_SPELLING: Final = Spelling(
    local=c_local, storage=c_storage, literal=literal, helper=_c_helper, arith=_C_ARITH, arith64=_C_ARITH,
    mad="({a} * {b} + {c})", fma={dtypes.float32: "fmaf({a}, {b}, {c})", dtypes.float64: "fma({a}, {b}, {c})"},
    math=LIBM, math32={Ops.EXP2: Call("plygrad_exp2f({0})", ("exp2f",))}, register_vectors=True)


class CRenderer(Renderer):
    """Renders a linearized kernel as one C function; see the module docstring."""

    name = "c"

    def render(self, kernel: KernelSource) -> str:
        return CFunction(kernel, stream_min_bytes=stream_threshold(self.target)).source()


def stream_threshold(target: Target) -> int:
    """The output size in bytes from which whole-vector stores bypass the caches (non-temporal stores): four times
    the L2 caches of the threads that run a kernel (1 MiB each where unknown). Such an output cannot stay in the
    cores' caches for the next kernel, and a streamed store skips reading each line before writing it: on the
    2-core dev VM an elementwise (a+b)*c of 16M floats went from 22-24 to 27-30 GB/s in a C harness."""
    l2 = target.cache_sizes[1] if len(target.cache_sizes) > 1 else 1 << 20
    return 4 * max(1, target.threads) * l2


# ---- statements: each emits (function, node); an op without an entry is a local holding its value -----------------
def assign(r: CFunction, node: UOp) -> None:
    name = f"v{len(r.names)}"
    expr = r.value(node)
    r.names[node] = name
    r.emit(f"{r.local_type(node.dtype)} {name} = {expr};")


def _open_loop(r: CFunction, node: UOp) -> None:
    axis, axis_type = node.arg
    if axis_type in _REJECTED_AXES:
        raise CodegenError(f"kernel {r.kernel.name}: RANGE axis {axis} is {_REJECTED_AXES[axis_type]}, but C runs "
                           "on a CPU without workgroups; don't apply LOCAL/GROUP for a target with has_local=False")
    if axis_type is AxisType.THREAD:
        # a local array filled inside the loop is each thread's own (pack.py); one filled before the loop is read by
        # every thread
        filled = r.private.get(node)
        r.emit(f"#pragma omp parallel for{f' private({filled})' if filled else ''}")
    var = r.ref(node)
    r.emit(f"for (long long {var} = 0; {var} < {r.ref(node.src[0])}; {var}++) {{")
    r.indent += 1


def close_block(r: CFunction, node: UOp) -> None:
    r.indent -= 1
    r.emit("}")
    r.transposed = {k: v for k, v in r.transposed.items() if v[1] <= r.indent}  # out of scope


def _open_if(r: CFunction, node: UOp) -> None:
    r.emit(f"if ({r.ref(node.src[0])}) {{")
    r.indent += 1


def _store(r: CFunction, node: UOp) -> None:
    r.store(node)


def _stack_array(r: CFunction, node: UOp) -> None:
    """A CPU workgroup is one thread: its scratch is an array on the stack."""
    ptr = node.dtype
    assert isinstance(ptr, PtrDType)
    r.emit(f"{r.storage_type(ptr.base)} local{node.arg}[{ptr.size}] __attribute__((aligned(64)));")


def _load(r: CFunction, node: UOp) -> None:
    if node.dtype.count > 1 and node.src[0].src[0].op is not Ops.DEFINE_REG:
        r.vector_load(node)
    else:
        assign(r, node)


def _lane(r: CFunction, node: UOp) -> None:
    if (len(node.arg) == 1 and node.dtype is not dtypes.bool and node.dtype is node.src[0].dtype.scalar()
            and r.spelling.register_vectors):
        # a lane of a named (immutable) float vector is read where it is used: a lane nothing reads (the rows of a
        # register transpose) then costs no statement the C compiler has to throw away. Not a lane of a
        # comparison's mask vector: that is -1 or 0, and only its _Bool local makes it 1 or 0
        r.names[node] = f"{r.ref(node.src[0])}[{node.arg[0]}]"
    else:
        assign(r, node)


Statement = Callable[["CFunction", UOp], None]
C_STATEMENTS: Final[dict[Ops, Statement]] = {
    Ops.RANGE: _open_loop, Ops.END: close_block, Ops.ENDIF: close_block, Ops.IF: _open_if, Ops.STORE: _store,
    Ops.DEFINE_LOCAL: _stack_array, Ops.LOAD: _load, Ops.GEP: _lane,
}


class CFunction:
    """The state of rendering one function: the names given to values and the helpers it used.

    The C-family renderers share it: a value's expression comes from `rules` (rules.py's one table, which the CUDA,
    HIP and Metal renderers extend with tables of their own) in the language's `spelling`; the CUDA renderer
    (cuda.py) subclasses it for the function frame (launch indices, shared memory, barriers)."""

    reserved: frozenset[str] = _C_RESERVED
    rules: ClassVar[Mapping[Ops, Rule]] = RULES
    spelling: ClassVar[Spelling] = C_SPELLING
    statements: ClassVar[Mapping[Ops, Statement]] = C_STATEMENTS

    def __init__(self, kernel: KernelSource, stream_min_bytes: int = 0) -> None:
        self.kernel = kernel
        # whole-vector stores into a global buffer of at least this many bytes are streamed (0: never)
        self.stream_min_bytes = stream_min_bytes
        self.streamed: set[DType] = set()
        # buffers the kernel also reads: a blocked reduction reloads its partial sums from the output, which a
        # streamed store would have sent to memory (matmul 2048, BLOCK 128: 16 round trips of the 16 MiB output)
        self.read_back = {n.src[0].src[0] for n in kernel.linear if n.op is Ops.LOAD and n.src[0].op is Ops.INDEX}
        # vector loads that two or more multiply-adds read (a matmul tile's B row): kept in a register
        # (c_math.vector_keep) rather than read again by each FMA
        self.kept_loads = _reused_by_mulacc(kernel.linear)
        self.vector_keep: set[DType] = set()
        self.names: dict[UOp, str] = {}
        self.declared_regs: set[int] = set()
        self.private = _written_in_threads(kernel.linear)  # THREAD range -> the local arrays it fills
        self.helpers: set[str] = set()
        self.vectors: set[DType] = set()
        self.vector_exp2: set[DType] = set()
        self.vector_fma: set[DType] = set()
        self.vector_sqrt: set[DType] = set()
        self.vector_transpose: set[DType] = set()
        # the rows of a register transpose -> (the array holding it, the indent it was declared at)
        self.transposed: dict[tuple[UOp, ...], tuple[str, int]] = {}
        self.lines: list[str] = []
        self.indent = 1

    # ---- the function ------------------------------------------------------------------------------------------
    def source(self) -> str:
        for node in self.kernel.linear:
            self.statement(node)
        params = [self.param_decl(p.index, p.dtype, p.writable) for p in self.kernel.params]
        params += [f"long long {self.variable_name(v)}" for v in self.kernel.variables]
        helpers = "".join(self.helper_source(h) for h in sorted(self.helpers))
        helpers += "".join(vector_typedefs(d) for d in sorted(self.vectors, key=lambda d: (d.itemsize, str(d))))
        helpers += "".join(vector_exp2(vector_type(d), d.count) for d in sorted(self.vector_exp2, key=str))
        helpers += "".join(vector_fma(vector_type(d), d.count, c_local(d.scalar()))
                           for d in sorted(self.vector_fma, key=str))
        helpers += "".join(vector_sqrt(vector_type(d), d.count, c_local(d.scalar()))
                           for d in sorted(self.vector_sqrt, key=str))
        helpers += "".join(vector_keep(vector_type(d), d.scalar().itemsize * d.count)
                           for d in sorted(self.vector_keep, key=str))
        helpers += "".join(stream_helper(vector_type(d), d.itemsize) for d in sorted(self.streamed, key=str))
        if self.streamed:  # the calling thread's streamed stores are visible when the call returns; OpenMP's
            # threads end the parallel loop in a barrier of locked instructions, which drain their stores too
            self.lines.append("  plygrad_sfence();")
        if self.vector_transpose:
            helpers += SHUFFLE_MACRO + "".join(transpose_helper(vector_type(d), d.count)
                                               for d in sorted(self.vector_transpose, key=str))
        signature = f"void {self.kernel.name}({', '.join(params) or 'void'})"
        return f"{PREAMBLE}{helpers}{signature} {{\n" + "\n".join(self.lines) + "\n}\n"

    def variable_name(self, var: UOp) -> str:
        """The variable's own name (the contract names the parameter by it), if C can use it without a clash."""
        name = str(var.arg[0])
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name in self.reserved or _TAKEN.fullmatch(name):
            raise CodegenError(f"kernel {self.kernel.name}: variable {name!r} cannot name a C parameter (not an "
                               "identifier, a C keyword or type, or one of the renderer's own names data<N>, "
                               "ridx<N>, v<N>, acc<N>, local<N>, plygrad_*); rename the variable")
        return name

    def param_decl(self, index: int, dtype: DType, writable: bool) -> str:
        const = "" if writable else "const "
        return f"{const}{self.storage_type(dtype)}* restrict data{index}"

    # ---- the language's spelling ------------------------------------------------------------------------------
    def ctype(self, dtype: DType) -> str:
        """The type of a scalar local of `dtype`."""
        return self.spelling.local(dtype)

    def unsigned_for(self, dtype: DType) -> str:
        """The unsigned type wrapping arithmetic of `dtype` goes through (32 bits at least: C promotes to int)."""
        return self.ctype(dtypes.uint64 if dtype.itemsize == 8 else dtypes.uint32)

    def literal(self, dtype: DType, value: object) -> str:
        return self.spelling.literal(dtype, value)

    def helper_source(self, name: str) -> str:
        return self.spelling.helper(name)

    def storage_type(self, dtype: DType) -> str:
        """The buffer element type of `dtype`, noting the helper that defines it or converts to it (float16,
        bfloat16)."""
        self.uses(dtype)
        return self.spelling.storage(dtype)

    def uses(self, dtype: DType) -> None:
        """The program touches values of `dtype`: include the helpers it needs, if any."""
        if dtype in HELPER_OF:
            self.helpers.add(HELPER_OF[dtype])

    def local_type(self, dtype: DType) -> str:
        """The C type of a local of `dtype`: `c_local`, or the vector type (declared once, with its helpers)."""
        if dtype.count > 1:
            if dtype.scalar() is dtypes.bool:  # lane masks of float32 comparisons: their int32 mask type
                self.vectors.add(dtypes.float32.vec(dtype.count))
                return f"{vector_type(dtypes.float32.vec(dtype.count))}_mask"
            name = vector_type(dtype)
            self.vectors.add(dtype)
            return name
        return self.ctype(dtype)

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.indent + line)

    # ---- statements --------------------------------------------------------------------------------------------
    def statement(self, node: UOp) -> None:
        """One statement: the language's form for its op (`statements`), else a local holding its value."""
        self.statements.get(node.op, assign)(self, node)

    def vector_load(self, node: UOp) -> None:
        """k consecutive elements from the lane-0 address, unaligned; a gated one reads zeros where it is false."""
        index = node.src[0]
        name = f"v{len(self.names)}"
        self.names[node] = name
        copy = f"__builtin_memcpy(&{name}, &{self.address(index)}, sizeof({name}));"
        if len(index.src) == 3:
            self.emit(f"{self.local_type(node.dtype)} {name} = {{0}};")
            self.emit(f"if ({self.ref(index.src[2])}) {copy}")
        elif len(index.src) > 3:  # a gate per lane (VectorForms.lane_gates): all at once where every gate holds
            gates = [self.ref(g) for g in index.src[2:]]
            nothing = self.literal(node.dtype.scalar(), zero(node.dtype.scalar()))
            start, buf = self.ref(index.src[1]), f"data{index.src[0].arg}"
            lanes = ", ".join(f"{g} ? {buf}[{start} + {j}] : {nothing}" for j, g in enumerate(gates))
            self.emit(f"{self.local_type(node.dtype)} {name};")
            self.emit(f"if ({' && '.join(gates)}) {copy}")
            self.emit(f"else {name} = ({self.local_type(node.dtype)}){{{lanes}}};")
        else:
            self.emit(f"{self.local_type(node.dtype)} {name};")
            self.emit(copy)
        if node in self.kept_loads:
            self.vector_keep.add(node.dtype)
            self.emit(f"{name} = plygrad_keep_{self.local_type(node.dtype)[8:]}({name});")

    def store(self, node: UOp) -> None:
        index, value = node.src[0], node.src[1]
        ptr = index.dtype
        assert isinstance(ptr, PtrDType)
        if index.src[0].op is Ops.DEFINE_REG:
            slot = int(index.src[0].arg)
            if slot in self.declared_regs:
                self.emit(f"acc{slot} = {self.ref(value)};")
            else:
                self.declared_regs.add(slot)
                self.emit(f"{self.local_type(ptr.base)} acc{slot} = {self.ref(value)};")
            return
        if value.dtype.count > 1:  # every lane from the lane-0 address on; the value is a named local
            self.local_type(value.dtype)
            if self.streams(index, value.dtype):
                self.streamed.add(value.dtype)
                short = vector_type(value.dtype).removeprefix("plygrad_")
                self.emit(f"plygrad_stream_{short}(&{self.address(index)}, {self.ref(value)});")
                return
            self.emit(f"__builtin_memcpy(&{self.address(index)}, &{self.ref(value)}, sizeof({self.ref(value)}));")
            return
        self.emit(f"{self.address(index)} = {self.to_storage(ptr.base, self.ref(value))};")

    def streams(self, index: UOp, value: DType) -> bool:
        """Whether a store of the vector `value` through `index` is streamed: a whole 16-, 32- or 64-byte vector
        into a global buffer of at least `stream_min_bytes` that the kernel never reads (the address is checked for
        alignment when it runs)."""
        ptr, buf = index.dtype, index.src[0]
        return (self.stream_min_bytes > 0 and buf.op is Ops.PARAM and buf not in self.read_back
                and isinstance(ptr, PtrDType) and ptr.size > 0
                and ptr.size * ptr.base.itemsize >= self.stream_min_bytes and value.itemsize in STREAMED_BYTES)

    # ---- expressions -------------------------------------------------------------------------------------------
    def ref(self, node: UOp) -> str:
        """How a statement refers to `node`: its local's name, or the inline form of an inline node."""
        if node in self.names:
            return self.names[node]
        if node.op is Ops.CONST:
            return self.literal(node.dtype, node.arg)
        if node.op is Ops.RANGE:
            return f"ridx{node.arg[0]}"
        if node.op is Ops.DEFINE_VAR:
            return self.variable_name(node)
        if node.op is Ops.INDEX and node.src[0].op is Ops.DEFINE_REG:
            return f"acc{node.src[0].arg}"
        raise CodegenError(f"kernel {self.kernel.name}: {node.op.name} ({node.dtype!r}) is used before it is "
                           "computed; this is a linearizer bug, please report it with the kernel")

    def address(self, index: UOp) -> str:
        buf = index.src[0]
        if buf.op is Ops.DEFINE_LOCAL:
            return f"local{buf.arg}[{self.ref(index.src[1])}]"
        if buf.op is not Ops.PARAM:
            raise CodegenError(f"kernel {self.kernel.name}: the C renderer indexes PARAM buffers, local buffers and "
                               f"accumulators, got INDEX into {buf.op.name}")
        return f"data{buf.arg}[{self.ref(index.src[1])}]"

    def from_storage(self, dtype: DType, expr: str) -> str:
        self.uses(dtype)
        if dtype is dtypes.float16:
            return f"plygrad_half_to_float({expr})"
        if dtype is dtypes.bfloat16:
            return f"plygrad_bf16_to_float({expr})"
        if dtype in FP8_DTYPES:
            return f"{from_storage_fn(dtype)}({expr})"
        return expr

    def to_storage(self, dtype: DType, expr: str) -> str:
        self.uses(dtype)
        if dtype is dtypes.float16:
            return f"plygrad_to_half({expr})"
        if dtype is dtypes.bfloat16:
            return f"plygrad_float_to_bf16({expr})"
        if dtype in FP8_DTYPES:
            return f"{to_storage_fn(dtype)}({expr})"
        return expr

    def rounded(self, dtype: DType, expr: str) -> str:
        self.uses(dtype)
        return round_to(dtype, expr)

    def value(self, node: UOp) -> str:
        """The expression computing a statement's value: the language's rule for its op."""
        rule = self.rules.get(node.op)
        if rule is None:
            raise CodegenError(f"kernel {self.kernel.name}: the C renderer cannot render {node.op.name} "
                               f"({node.dtype!r}); it renders loads, stores, casts and the ALU ops of docs/ir.md")
        return rule(self, node)

    def refs(self, node: UOp) -> list[str]:
        """How a statement refers to each of `node`'s operands."""
        return [self.ref(s) for s in node.src]

    def transposed_lane(self, node: UOp) -> str | None:
        """A VECTORIZE of lane kk of each of W vectors of W lanes (transpose.py) as row kk of their register
        transpose (renderer/c_transpose.py), the transpose made once where the first of them is; None for any
        other VECTORIZE, or where the vectors are not all of the renderer's vector dtype."""
        width = node.dtype.count
        if (not all(s.op is Ops.GEP and len(s.arg) == 1 for s in node.src)
                or len({int(s.arg[0]) for s in node.src}) != 1
                or any(s.src[0].dtype != node.dtype for s in node.src) or not self.spelling.register_vectors):
            return None
        rows = tuple(s.src[0] for s in node.src)
        if len(set(rows)) != width:
            return None
        found = self.transposed.get(rows)
        if found is None:
            name = f"t{len(self.transposed)}_{len(self.names)}"
            vec = self.local_type(node.dtype)
            self.vector_transpose.add(node.dtype)
            self.emit(f"{vec} {name}[{width}] = {{{', '.join(self.ref(r) for r in rows)}}};")
            self.emit(f"plygrad_transpose_{vec[len('plygrad_'):]}({name});")
            found = self.transposed[rows] = (name, self.indent)
        return f"{found[0]}[{int(node.src[0].arg[0])}]"


def _written_in_threads(linear: Sequence[UOp]) -> dict[UOp, str]:
    """For each THREAD range of the statement list, the local arrays (DEFINE_LOCAL) stored to inside its loop, as
    an OpenMP clause list."""
    open_threads: list[UOp] = []
    written: dict[UOp, list[str]] = {}
    for node in linear:
        if node.op is Ops.RANGE and node.arg[1] is AxisType.THREAD:
            open_threads.append(node)
            written[node] = []
        elif node.op is Ops.END and open_threads and node.src[0] is open_threads[-1]:
            open_threads.pop()
        elif node.op is Ops.STORE and node.src[0].src[0].op is Ops.DEFINE_LOCAL:
            name = f"local{node.src[0].src[0].arg}"
            for thread in open_threads:
                if name not in written[thread]:
                    written[thread].append(name)
    return {r: ", ".join(names) for r, names in written.items() if names}


def _reused_by_mulacc(linear: Sequence[UOp]) -> set[UOp]:
    """The vector LOADs of the statement list that two or more MULACCs read."""
    readers: dict[UOp, int] = {}
    for node in linear:
        if node.op is Ops.MULACC:
            for src in set(node.src):
                if src.op is Ops.LOAD and src.dtype.count > 1:
                    readers[src] = readers.get(src, 0) + 1
    return {load for load, count in readers.items() if count > 1}
