"""The op set of the IR, and the groups passes reason about.

The op set is a versioned contract (docs/ir.md): ops are serialized by *name*, so the order here is free, but a
name once released is never removed or renamed within a major opset version. Adding an op is a minor bump.
"""

from __future__ import annotations

import enum
from typing import Final


class Ops(enum.IntEnum):
    """Every operation a UOp can be. docs/ir.md gives each op's dtype, sources and argument per stage.

    An IntEnum only because its hash is then C-level fast (every UOp key holds one); the numbers are private to
    this process: serialization stores names.
    """

    # ---- graph structure -----------------------------------------------------------------------------------------
    SINK = enum.auto()  # the root: its sources are the outputs
    NOOP = enum.auto()
    # ---- memory and values ---------------------------------------------------------------------------------------
    BUFFER = enum.auto()  # runtime memory by id (arg: BufferRef)
    CONST = enum.auto()  # a scalar constant (arg: the value)
    DEFINE_VAR = enum.auto()  # a symbolic integer variable (arg: (name, min, max))
    BIND = enum.auto()  # a variable bound to a value: src=(DEFINE_VAR, CONST)
    # ---- movement (tensor stage only) ----------------------------------------------------------------------------
    RESHAPE = enum.auto()
    PERMUTE = enum.auto()
    EXPAND = enum.auto()
    PAD = enum.auto()
    SHRINK = enum.auto()
    FLIP = enum.auto()
    # ---- tensor-stage structure ----------------------------------------------------------------------------------
    CONTIGUOUS = enum.auto()  # realize into a contiguous buffer
    COPY = enum.auto()  # move between devices
    ASSIGN = enum.auto()  # write a value into an existing buffer (in place)
    ALLREDUCE = enum.auto()  # (opset 1.4) one tensor per device reduced, the result on one device (arg: (op, device))
    # ---- schedule stage ------------------------------------------------------------------------------------------
    LINEAR = enum.auto()  # an ordered list: CALLs in a schedule
    CALL = enum.auto()  # a kernel (or copy) applied to buffers
    # ---- kernel AST ----------------------------------------------------------------------------------------------
    PARAM = enum.auto()  # the i-th buffer argument of a kernel
    RANGE = enum.auto()  # a loop variable 0..end-1
    END = enum.auto()  # closes ranges after a store
    INDEX = enum.auto()  # pointer arithmetic: buffer + index (+ validity gate)
    LOAD = enum.auto()
    STORE = enum.auto()
    REDUCE = enum.auto()
    SPECIAL = enum.auto()  # a GPU thread/group index
    DEFINE_LOCAL = enum.auto()  # workgroup-shared memory
    DEFINE_REG = enum.auto()  # a register array (accumulators)
    BARRIER = enum.auto()
    IF = enum.auto()
    ENDIF = enum.auto()
    VECTORIZE = enum.auto()  # build a vector from scalars
    GEP = enum.auto()  # take lanes of a vector
    UNROLL = enum.auto()  # expand an axis into vector lanes (codegen)
    CONTRACT = enum.auto()  # fold lanes back into a vector (codegen)
    WMMA = enum.auto()  # a tensor-core matrix multiply-accumulate
    # ---- program stage -------------------------------------------------------------------------------------------
    PROGRAM = enum.auto()  # a compiled-to-source kernel (arg: ProgramInfo)
    SOURCE = enum.auto()  # rendered source text (arg: str)
    # ---- type conversion -----------------------------------------------------------------------------------------
    CAST = enum.auto()
    BITCAST = enum.auto()
    # ---- unary ALU -----------------------------------------------------------------------------------------------
    NEG = enum.auto()
    RECIPROCAL = enum.auto()
    SQRT = enum.auto()
    EXP2 = enum.auto()
    LOG2 = enum.auto()
    SIN = enum.auto()
    TRUNC = enum.auto()
    # ---- binary ALU ----------------------------------------------------------------------------------------------
    ADD = enum.auto()
    SUB = enum.auto()
    MUL = enum.auto()
    FDIV = enum.auto()  # float division
    IDIV = enum.auto()  # integer division, truncating toward zero (C semantics)
    MOD = enum.auto()  # integer remainder, sign of the dividend (C semantics)
    MAX = enum.auto()
    POW = enum.auto()
    CMPLT = enum.auto()
    CMPNE = enum.auto()
    CMPEQ = enum.auto()
    AND = enum.auto()
    OR = enum.auto()
    XOR = enum.auto()
    SHL = enum.auto()
    SHR = enum.auto()
    THREEFRY = enum.auto()  # the threefry2x32 counter-based random function on uint64
    # ---- ternary ALU ---------------------------------------------------------------------------------------------
    WHERE = enum.auto()
    MULACC = enum.auto()  # a*b+c

    def __repr__(self) -> str:
        return f"Ops.{self.name}"


class GroupOp:
    """Named sets of ops; passes and verifiers test membership instead of listing ops again."""

    Unary: Final = frozenset({Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC})
    Binary: Final = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.POW, Ops.CMPLT,
                               Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.THREEFRY})
    Ternary: Final = frozenset({Ops.WHERE, Ops.MULACC})
    ALU: Final = Unary | Binary | Ternary
    Movement: Final = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Comparison: Final = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
    # a op b == b op a
    Commutative: Final = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
    # (a op b) op c == a op (b op c) on integers (floats only approximately: never reassociate them)
    Associative: Final = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR, Ops.MAX})
    # the ops a REDUCE (and an ALLREDUCE) can reduce with
    ReduceOps: Final = frozenset({Ops.ADD, Ops.MUL, Ops.MAX})
    # ops defined only on integers (and bool for the bitwise ones)
    IntegerOnly: Final = frozenset({Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.THREEFRY})
    # ops defined only on floats
    FloatOnly: Final = frozenset({Ops.FDIV, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW})
    Cast: Final = frozenset({Ops.CAST, Ops.BITCAST})
    # ops whose result is an elementwise function of same-shaped inputs
    Elementwise: Final = ALU | Cast


class AxisType(enum.Enum):
    """What a RANGE loops over; codegen turns these into loops, thread indices or vector lanes."""

    GLOBAL = "global"  # one per output element; becomes a grid dimension on GPUs
    LOCAL = "local"  # a workgroup dimension
    LOOP = "loop"  # a plain serial loop
    REDUCE = "reduce"  # a reduction loop
    GROUP_REDUCE = "group_reduce"  # a reduction split across a workgroup
    UPCAST = "upcast"  # unrolled into vector lanes of an output axis
    UNROLL = "unroll"  # unrolled into vector lanes of a reduction axis
    THREAD = "thread"  # a CPU thread
    BLOCK = "block"  # (opset 1.1) a reduction's outer part, looped around the output loops (cache blocking)


class OptOps(enum.Enum):
    """The optimization actions codegen applies to a kernel (recorded in KernelInfo.opts)."""

    UPCAST = "upcast"
    UNROLL = "unroll"
    LOCAL = "local"
    GROUP = "group"
    GROUPTOP = "grouptop"
    NOLOCALS = "nolocals"
    PADTO = "padto"
    SWAP = "swap"
    TC = "tc"
    THREAD = "thread"
    BLOCK = "block"  # (opset 1.1) cache blocking of a reduce axis: its outer part loops around the output loops
    TILE = "tile"  # (opset 1.3) loop tiling of an output axis: its inner part loops inside the later output loops
