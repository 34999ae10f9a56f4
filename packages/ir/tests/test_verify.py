"""`verify(uop, stage)`: every stage's example passes, and each rule, broken alone, is reported by name.

A rule test takes the valid example of a stage, changes one node (`edit`) and checks that the verifier names
that node's op and the rule. Hypothesis then throws random and randomly-mutated graphs at every stage: whatever
the input, the verifier answers or raises IRVerifyError, never anything else (it runs on untrusted bytes).
"""

from __future__ import annotations

import importlib
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ir_examples import EXAMPLES  # conftest.py puts this folder on sys.path

from plygrad.ir.dtype import AddrSpace, DType, dtypes
from plygrad.ir.errors import IRVerifyError
from plygrad.ir.ops import AxisType, Ops, OptOps
from plygrad.ir.records import BufferRef, KernelInfo, Opt, ParamInfo, ProgramInfo
from plygrad.ir.stage import Stage
from plygrad.ir.uop import UOp
from plygrad.ir.verify import NodeVerifyError, verify

F32, I32, IDX, VOID = dtypes.float32, dtypes.int32, dtypes.index, dtypes.void
T, S, K, P, G = Stage.TENSOR, Stage.SCHEDULE, Stage.KERNEL, Stage.PROGRAM, Stage.GRAPH
# "STAGE: OP #index (dtype) rule [at path]"
MESSAGE = re.compile(r"^(GRAPH|TENSOR|SCHEDULE|KERNEL|PROGRAM): (\w+) #\d+ \((\S+)\) (.+) \[at (.+)\]$", re.S)


# ---- building broken copies of the examples ----------------------------------------------------------------------
def pick(root: UOp, op: Ops, where: Callable[[UOp], bool] = lambda n: True) -> UOp:
    return next(n for n in root.toposort if n.op is op and where(n))


def swap(root: UOp, old: UOp, new: UOp) -> UOp:
    return new if old is root else root.substitute({old: new})


def edit(stage: Stage, find: Ops, where: Callable[[UOp], bool] = lambda n: True, /,
         **changes: Any) -> Callable[[], UOp]:
    """A builder of the stage's example with the first `op` node matching `where` changed. A change given as a
    function gets the node (e.g. `src=lambda n: n.src[:1]`)."""

    def build() -> UOp:
        root = EXAMPLES[stage]()
        node = pick(root, find, where)
        new = {k: v(node) if callable(v) and not isinstance(v, DType) else v for k, v in changes.items()}
        return swap(root, node, node.replace(**new))

    return build


def wrap_root(stage: Stage, make: Callable[[UOp], UOp]) -> Callable[[], UOp]:
    return lambda: make(EXAMPLES[stage]())


def arg_field(node: UOp, **fields: Any) -> Any:
    return type(node.arg)(**{**node.arg.__dict__, **fields})


def of(dtype: DType) -> Callable[[UOp], bool]:
    return lambda n: n.dtype is dtype


def is_param(index: int) -> Callable[[UOp], bool]:
    return lambda n: n.arg == index


def const(dtype: DType, value: Any) -> UOp:
    return UOp(Ops.CONST, dtype, (), value)  # raw: no truncation, so bad values can be built


def two_vars(n: UOp) -> UOp:  # the PROGRAM with a second variable "n" of another range
    return n.replace(src=(*n.src, UOp.variable("n", 0, 3)))


# ---- every stage's example is valid ----------------------------------------------------------------------------
@pytest.mark.parametrize("stage", list(Stage), ids=lambda s: s.name)
def test_example_passes_its_stage_and_graph_rules(stage: Stage) -> None:
    root = EXAMPLES[stage]()
    verify(root, stage)
    verify(root, Stage.GRAPH)  # every stage's rules include the GRAPH rules


@pytest.mark.parametrize("example", [T, S, K, P], ids=lambda s: s.name)
@pytest.mark.parametrize("stage", [T, S, K, P], ids=lambda s: s.name)
def test_example_fails_other_stages(example: Stage, stage: Stage) -> None:
    if example is stage:
        return
    with pytest.raises(IRVerifyError, match=f"^{stage.name}: "):
        verify(EXAMPLES[example](), stage)


# ---- one test per rule -----------------------------------------------------------------------------------------
C = pytest.param
RULES = [
    # GRAPH rules (every stage)
    C(T, edit(T, Ops.ADD, src=lambda n: (*n.src, n.src[0])), "ADD", "must have 2 sources, got 3", id="arity"),
    C(T, edit(T, Ops.CONTIGUOUS, arg=1), "CONTIGUOUS", "takes no argument", id="arg-none"),
    C(T, edit(T, Ops.CONST, of(F32), arg=2), "CONST", "needs a float value", id="const-int-for-float"),
    C(T, edit(T, Ops.CONST, of(I32), arg=True), "CONST", "needs an int value", id="const-bool-for-int"),
    C(T, edit(T, Ops.CONST, of(F32), arg=0.1), "CONST", "is not a float32 value", id="const-f32-rounding"),
    C(T, edit(T, Ops.CONST, of(I32), arg=2**31), "CONST", "is not a int32 value", id="const-int-wrap"),
    C(T, edit(T, Ops.CONST, of(F32), dtype=VOID), "CONST", "must have a value dtype", id="const-void"),
    C(T, edit(T, Ops.DEFINE_VAR, arg=("n", 9, 1)), "DEFINE_VAR", "empty range", id="var-empty-range"),
    C(T, edit(T, Ops.DEFINE_VAR, arg=("n", 1)), "DEFINE_VAR", "(name: non-empty str, min: int, max: int)",
      id="var-arg"),
    C(T, edit(T, Ops.DEFINE_VAR, arg=("n", 0, 2**40)), "DEFINE_VAR", "does not fit its dtype int32",
      id="var-range-dtype"),
    C(K, edit(K, Ops.DEFINE_VAR, dtype=F32), "DEFINE_VAR", "must have dtype index, int32 or int64", id="var-dtype"),
    C(T, edit(T, Ops.RESHAPE, arg=(2, "3")), "RESHAPE", "tuple of non-negative ints", id="reshape-arg"),
    C(T, edit(T, Ops.EXPAND, arg=(2, -3)), "EXPAND", "tuple of non-negative ints", id="expand-arg"),
    C(T, edit(T, Ops.PERMUTE, arg=(1.0, 0)), "PERMUTE", "tuple of axis ints", id="permute-arg"),
    C(T, edit(T, Ops.PAD, arg=((0, 1), 0)), "PAD", "(int, int) pairs", id="pad-arg"),
    C(T, edit(T, Ops.SHRINK, arg=((1, 4), (0, 2.0))), "SHRINK", "(int, int) pairs", id="shrink-arg"),
    C(T, edit(T, Ops.FLIP, arg=(1, 0)), "FLIP", "tuple of bools", id="flip-arg"),
    C(T, edit(T, Ops.PERMUTE, dtype=I32), "PERMUTE", "must have its source's dtype float32", id="movement-dtype"),
    C(T, edit(T, Ops.BUFFER, arg=(0, "CPU", 6)), "BUFFER", "needs a BufferRef", id="buffer-arg"),
    C(T, edit(T, Ops.BUFFER, arg=BufferRef(0, "CPU", -6)), "BUFFER", "size >= 0", id="buffer-size"),
    C(T, edit(T, Ops.BUFFER, arg=BufferRef(0, "", 6)), "BUFFER", "non-empty device", id="buffer-device"),
    C(T, edit(T, Ops.BUFFER, arg=BufferRef(True, "CPU", 6)), "BUFFER", "int buffer id", id="buffer-id-type"),
    C(T, edit(T, Ops.BUFFER, dtype=IDX), "BUFFER", "buffer element dtype", id="buffer-dtype"),
    C(T, edit(T, Ops.ADD, lambda n: n.dtype is F32, src=lambda n: (n.src[0], n.src[0].cast(I32))), "ADD",
      "needs operands of one dtype, got float32 and int32", id="alu-operands"),
    C(T, edit(T, Ops.CMPLT, dtype=F32), "CMPLT", "must have dtype bool", id="comparison-dtype"),
    C(T, edit(T, Ops.MUL, dtype=dtypes.float64), "MUL", "must have dtype float32", id="alu-result-dtype"),
    C(T, edit(T, Ops.MUL, op=Ops.IDIV), "IDIV", "only on integers", id="integer-only"),
    C(T, edit(T, Ops.MUL, op=Ops.XOR), "XOR", "only on integers and bool", id="bitwise-on-float"),
    C(T, edit(T, Ops.SHR, op=Ops.POW), "POW", "only on floats", id="float-only"),
    C(T, edit(T, Ops.SHR, op=Ops.THREEFRY), "THREEFRY", "only on uint64", id="threefry-dtype"),
    C(T, edit(T, Ops.WHERE, src=lambda n: (n.src[1], n.src[1], n.src[2])), "WHERE", "bool condition",
      id="where-condition"),
    C(T, edit(T, Ops.CMPLT, op=Ops.AND, src=lambda n: (UOp(Ops.CMPNE, dtypes.bool, n.src),) * 2), "AND", None,
      id="bool-and-is-fine"),
    C(T, edit(T, Ops.SHR, op=Ops.NEG, dtype=dtypes.bool, src=lambda n: (n.src[0].cast(dtypes.bool),)), "NEG",
      "is not defined on bool", id="bool-neg"),
    C(T, edit(T, Ops.CAST, dtype=VOID), "CAST", "converts values", id="cast-void"),
    C(T, edit(T, Ops.BITCAST, dtype=dtypes.int16), "BITCAST", "one itemsize", id="bitcast-size"),
    C(T, edit(T, Ops.REDUCE, arg=(Ops.SUB, (1,))), "REDUCE", "needs Ops.ADD, Ops.MUL or Ops.MAX", id="reduce-op"),
    C(T, edit(T, Ops.COPY, arg=None), "COPY", "target device name", id="copy-device"),
    C(T, edit(T, Ops.ASSIGN, dtype=I32), "ASSIGN", "its source's dtype", id="assign-dtype"),
    C(T, edit(T, Ops.SINK, dtype=F32), "SINK", "must have dtype void", id="sink-void"),
    C(K, edit(K, Ops.SINK, arg="matvec"), "SINK", "KernelInfo", id="sink-arg"),
    C(K, edit(K, Ops.SINK, arg=KernelInfo("matvec", ("UPCAST",))),  # type: ignore[arg-type]
      "SINK", "is not an Opt", id="kernel-info-opts"),
    C(K, edit(K, Ops.SINK, arg=KernelInfo("m", (Opt(OptOps.UPCAST, 0.5, 1),))),  # type: ignore[arg-type]
      "SINK", "int axis", id="opt-fields"),
    C(K, edit(K, Ops.RANGE, arg=(0, "global")), "RANGE", "(axis: int, AxisType)", id="range-arg"),
    C(K, edit(K, Ops.RANGE, dtype=F32), "RANGE", "integer dtype", id="range-dtype"),
    C(K, edit(K, Ops.PARAM, arg=-1), "PARAM", "parameter index", id="param-arg"),
    C(K, edit(K, Ops.PARAM, is_param(1), dtype=F32), "PARAM", "pointer dtype in global memory", id="param-dtype"),
    C(K, edit(K, Ops.PARAM, is_param(1), dtype=F32.ptr(12, AddrSpace.LOCAL)), "PARAM", "in global memory",
      id="param-addrspace"),
    C(K, edit(K, Ops.INDEX, dtype=I32.ptr(3)), "INDEX", "its buffer's pointer dtype", id="index-dtype"),
    C(K, edit(K, Ops.INDEX, src=lambda n: (n.src[0], n.src[1].cast(F32))), "INDEX", "integer index",
      id="index-float"),
    C(K, edit(K, Ops.INDEX, lambda n: len(n.src) == 3, src=lambda n: (*n.src[:2], n.src[1])), "INDEX", "bool gate",
      id="index-gate"),
    C(K, edit(K, Ops.LOAD, dtype=I32), "LOAD", "pointer's element dtype float32", id="load-dtype"),
    C(K, edit(K, Ops.STORE, src=lambda n: (n.src[0], n.src[1].cast(I32))), "STORE", "CAST the value",
      id="store-dtype"),
    C(K, edit(K, Ops.STORE, dtype=F32), "STORE", "must have dtype void", id="store-void"),
    C(P, edit(P, Ops.SOURCE, arg=""), "SOURCE", "non-empty str", id="source-arg"),
    C(S, edit(S, Ops.CALL, lambda n: n.arg == "matvec", arg=3), "CALL", "takes None or a name", id="call-arg"),
    C(S, edit(S, Ops.LINEAR, arg=(-2, "0")), "LINEAR", "tuple of buffer ids", id="linear-arg"),
    # GRAPH rules of codegen-internal ops
    C(G, edit(G, Ops.VECTORIZE, dtype=F32.vec(4)), "VECTORIZE", "must have dtype float32x2", id="vectorize-dtype"),
    C(G, edit(G, Ops.GEP, arg=(2,)), "GEP", "lane numbers 0..1", id="gep-lane"),
    C(G, edit(G, Ops.DEFINE_LOCAL, dtype=F32.ptr(64)), "DEFINE_LOCAL", "in local memory", id="local-addrspace"),
    C(G, edit(G, Ops.DEFINE_REG, arg="r"), "DEFINE_REG", "int slot", id="reg-arg"),
    C(G, edit(G, Ops.SPECIAL, arg=""), "SPECIAL", "non-empty str", id="special-arg"),
    C(G, edit(G, Ops.IF, src=lambda n: (n.src[0].src[0], n.src[1])), "IF", "bool condition", id="if-condition"),
    C(G, edit(G, Ops.ENDIF, src=lambda n: n.src[0].src[1:]), "ENDIF", "must close an IF", id="endif-source"),
    C(G, edit(G, Ops.WMMA, arg=(8, 8, 8)), "WMMA", "TensorCore", id="wmma-arg"),
    C(G, edit(G, Ops.UNROLL, arg=(0, 2)), "UNROLL", "(int, int) pairs", id="unroll-arg"),
    C(G, edit(G, Ops.NOOP, dtype=I32), "NOOP", "its source's dtype", id="noop-dtype"),
    C(G, edit(G, Ops.MULACC, src=lambda n: n.src[:2]), "MULACC", "must have 3 sources, got 2", id="ternary-arity"),
    # TENSOR
    C(T, edit(T, Ops.SINK, arg=KernelInfo()), "SINK", "of a tensor graph takes no argument", id="tensor-sink-arg"),
    C(T, edit(T, Ops.CONST, of(F32), dtype=F32.vec(2)), "CONST", "must have a scalar dtype",
      id="tensor-vector"),
    C(T, edit(T, Ops.BUFFER, arg=BufferRef(-1, "CPU", 6)), "BUFFER", "id >= 0", id="tensor-buffer-id"),
    C(T, edit(T, Ops.BIND, src=lambda n: (n.src[0], n.src[0])), "BIND", "src must be (DEFINE_VAR, CONST)",
      id="bind-sources"),
    C(T, edit(T, Ops.BIND, src=lambda n: (n.src[0], const(I32, 9))), "BIND", "outside its range [1, 8]",
      id="bind-range"),
    C(T, edit(T, Ops.REDUCE, arg=Ops.ADD), "REDUCE", "(reduce op, axes)", id="tensor-reduce-arg"),
    C(T, edit(T, Ops.REDUCE, src=lambda n: (n.src[0], n.src[0])), "REDUCE", "must have 1 source",
      id="tensor-reduce-src"),
    C(T, edit(T, Ops.ASSIGN, src=lambda n: (n.src[1], n.src[1])), "ASSIGN", "must write into a BUFFER",
      id="assign-target"),
    C(T, edit(T, Ops.RESHAPE, lambda n: n.arg == (2, 3), arg=(4, 2)), "RESHAPE", "sizes 6 and 8 differ",
      id="shape-reshape"),
    C(T, edit(T, Ops.EXPAND, lambda n: n.arg == (3, 1), arg=(3, 2)), "ADD", "elementwise ops need equal shapes",
      id="shape-elementwise"),
    C(T, edit(T, Ops.EXPAND, lambda n: n.arg == (2, 3), arg=(2, 6)), "EXPAND", "only size 1 can expand",
      id="shape-expand"),
    C(T, edit(T, Ops.PERMUTE, arg=(0, 0)), "PERMUTE", "needs a permutation", id="shape-permute"),
    C(T, edit(T, Ops.SHRINK, arg=((1, 5), (0, 2))), "SHRINK", "is outside 0..4", id="shape-shrink"),
    C(T, edit(T, Ops.PAD, arg=((0, -1), (0, 0))), "PAD", "must be non-negative", id="shape-pad"),
    C(T, edit(T, Ops.FLIP, arg=(True,)), "FLIP", "one bool per axis", id="shape-flip"),
    C(T, edit(T, Ops.REDUCE, arg=(Ops.ADD, (2,))), "REDUCE", "must be distinct axes 0..1", id="shape-reduce"),
    C(T, edit(T, Ops.BITCAST, src=lambda n: (UOp(Ops.DEFINE_VAR, F32, (), ("x", 0, 1)),)), "DEFINE_VAR",
      "must have dtype index", id="tensor-var-dtype"),
    C(T, edit(T, Ops.CONST, lambda n: n.dtype is I32 and n.arg == 1, op=Ops.DEFINE_VAR, arg=("n", 0, 5)), "DEFINE_VAR",
      "redefines variable 'n'", id="tensor-var-names"),
    C(T, edit(T, Ops.CONTIGUOUS, op=Ops.LOAD), "LOAD", "does not belong in a TENSOR graph", id="tensor-op"),
    C(T, edit(T, Ops.CONTIGUOUS, op=Ops.SINK, dtype=VOID), "SINK", "may only be the root", id="tensor-inner-sink"),
    # KERNEL
    C(K, edit(K, Ops.SINK, src=lambda n: (n.src[0].src[0].src[1],)), "SINK", "got a ADD as src[0]",
      id="kernel-outputs"),
    C(K, edit(K, Ops.RANGE, lambda n: n.arg[0] == 0, dtype=I32, src=(const(I32, 3),)), "RANGE",
      "must have dtype index", id="kernel-range-dtype"),
    C(K, edit(K, Ops.INDEX, lambda n: len(n.src) == 2, src=lambda n: (n.src[1], n.src[1])), "INDEX",
      "must index a pointer", id="index-non-pointer"),
    C(K, edit(K, Ops.INDEX, lambda n: len(n.src) == 2, src=lambda n: (n.src[0], n.src[1].cast(I32))), "INDEX",
      "index of dtype index", id="kernel-index-dtype"),
    C(K, edit(K, Ops.LOAD, src=lambda n: (n.src[0].src[0],)), "LOAD", "must load from an INDEX, got a PARAM",
      id="load-from-index"),
    C(K, edit(K, Ops.LOAD, src=lambda n: (n.src[0], n.src[0])), "LOAD", "must have 1 source, got 2",
      id="kernel-load-arity"),
    C(K, edit(K, Ops.STORE, src=lambda n: (n.src[0].src[0], n.src[1])), "STORE", "must store to an INDEX",
      id="store-to-index"),
    C(K, edit(K, Ops.RANGE, lambda n: n.arg[0] == 1, arg=(1, AxisType.LOOP)), "REDUCE", "AxisType.REDUCE",
      id="reduce-axis-type"),
    C(K, edit(K, Ops.REDUCE, src=lambda n: (n.src[0], n.src[0])), "REDUCE", "src[1] is a MUL", id="reduce-ranges"),
    C(K, edit(K, Ops.REDUCE, arg=(Ops.ADD, (0,))), "REDUCE", "of a kernel takes Ops.ADD", id="kernel-reduce-arg"),
    C(K, edit(K, Ops.END, src=lambda n: (n.src[1], n.src[0])), "END", "src[0] must be a STORE", id="end-store"),
    C(K, edit(K, Ops.END, src=lambda n: (n.src[0], n.src[0])), "END", "closes RANGEs", id="end-ranges"),
    C(K, edit(K, Ops.PARAM, is_param(2), arg=1), "PARAM", "one PARAM per buffer",
      id="kernel-param-unique"),
    C(K, edit(K, Ops.CONST, lambda n: n.arg == 4, dtype=IDX.vec(2)), "CONST", "scalar dtype", id="kernel-vector"),
    C(K, edit(K, Ops.PARAM, is_param(0), dtype=F32.vec(3).ptr()), "PARAM", "scalar dtype", id="kernel-vector-param"),
    C(K, edit(K, Ops.PARAM, is_param(1), op=Ops.BUFFER, dtype=F32, arg=BufferRef(0, "CPU", 12)), "BUFFER",
      "does not belong in a KERNEL graph", id="kernel-op"),
    # SCHEDULE
    C(S, edit(S, Ops.LINEAR, arg=None), "LINEAR", "output buffer ids", id="linear-outputs-arg"),
    C(S, edit(S, Ops.LINEAR, src=lambda n: (*n.src, n.src[0].src[1])), "LINEAR", "lists CALLs", id="linear-src"),
    C(S, edit(S, Ops.CALL, lambda n: n.arg is None, src=lambda n: (n.src[1], *n.src[1:])), "CALL",
      "calls a kernel SINK or a COPY", id="call-body"),
    C(S, edit(S, Ops.CALL, lambda n: n.arg == "matvec", src=lambda n: (*n.src[:2], n.src[4], *n.src[2:4])), "CALL",
      "takes (body, *BUFFERs, *BINDs)", id="call-order"),
    C(S, edit(S, Ops.CALL, lambda n: n.arg == "matvec", src=lambda n: (*n.src[:3], n.src[4])), "CALL",
      "passes 2 buffers, but its kernel reads PARAM 2", id="call-missing-buffer"),
    C(S, edit(S, Ops.BUFFER, lambda n: n.arg.id == 1, dtype=I32), "CALL", "passes a int32 BUFFER as PARAM 2",
      id="call-buffer-dtype"),
    C(S, edit(S, Ops.CALL, lambda n: n.arg == "matvec", src=lambda n: n.src[:4]), "CALL", "unbound",
      id="call-unbound"),
    C(S, edit(S, Ops.CALL, lambda n: n.arg == "matvec",
              src=lambda n: (*n.src, UOp.variable("m", 0, 4).bind(1))), "CALL", "does not use", id="call-extra-bind"),
    C(S, edit(S, Ops.CALL, lambda n: n.arg is None, src=lambda n: (*n.src, n.src[1])), "CALL",
      "exactly two BUFFERs", id="copy-buffers"),
    C(S, edit(S, Ops.BUFFER, lambda n: n.arg.id == -2, arg=BufferRef(-2, "CPU:1", 4)), "CALL",
      "one dtype and size", id="copy-size"),
    C(S, edit(S, Ops.LOAD, lambda n: n.src[0].src[0].arg == 2, src=lambda n: (n.src[0].src[0],)), "SINK",
      "must be a valid kernel: KERNEL: LOAD #", id="call-kernel-body"),
    C(S, edit(S, Ops.COPY, src=lambda n: (pick(EXAMPLES[S](), Ops.BUFFER),)), "COPY", "must have 0 sources",
      id="schedule-copy-form"),
    C(S, edit(S, Ops.BUFFER, lambda n: n.arg.id == -2, arg=BufferRef(-1, "CPU:1", 3)), "BUFFER",
      "one id, one buffer", id="buffer-id-meaning"),
    C(S, edit(S, Ops.LINEAR, arg=(-3,)), "LINEAR", "output buffer -3, which no CALL declares", id="linear-outputs"),
    # PROGRAM
    C(P, edit(P, Ops.PROGRAM, src=lambda n: n.src[::-1]), "PROGRAM", "src[0] must be the SOURCE",
      id="program-source"),
    C(P, edit(P, Ops.PROGRAM, src=lambda n: (n.src[0], n.src[0])), "PROGRAM", "src[1] is a SOURCE",
      id="program-vars"),
    C(P, edit(P, Ops.PROGRAM, src=lambda n: (n.src[0], UOp.variable("n", 0, 3), n.src[1])), "DEFINE_VAR",
      "redefines variable 'n'", id="program-var-names"),
    C(P, edit(P, Ops.PROGRAM, arg=lambda n: arg_field(n, name="1matvec")), "PROGRAM", "C identifier",
      id="program-name"),
    C(P, edit(P, Ops.PROGRAM, arg=lambda n: arg_field(n, global_size=(3, 0, 1))), "PROGRAM", "global_size",
      id="program-global"),
    C(P, edit(P, Ops.PROGRAM, arg=lambda n: arg_field(n, local_size=(1, 1))), "PROGRAM", "local_size",
      id="program-local"),
    C(P, edit(P, Ops.PROGRAM, arg=lambda n: arg_field(n, params=n.arg.params[::-1])), "PROGRAM",
      "indices 0..n-1 in order", id="program-param-order"),
    C(P, edit(P, Ops.PROGRAM, arg=lambda n: arg_field(n, params=(ParamInfo(0, F32, -1, True),))), "PROGRAM",
      "size >= 0", id="program-param-size"),
    C(P, edit(P, Ops.PROGRAM, arg=lambda n: arg_field(n, params=(ParamInfo(0, IDX, 3, True),))), "PROGRAM",
      "buffer dtype", id="program-param-dtype"),
    C(P, edit(P, Ops.PROGRAM, arg=lambda n: arg_field(n, ops=-1)), "PROGRAM", "ops >= 0", id="program-ops"),
    C(P, edit(P, Ops.PROGRAM, arg=lambda n: arg_field(n, mem=1.5)), "PROGRAM", "mem >= 0", id="program-mem"),
    C(P, edit(P, Ops.SOURCE, op=Ops.CONST, dtype=I32, arg=1), "CONST", "does not belong in a PROGRAM graph",
      id="program-op"),
]


@pytest.mark.parametrize(("stage", "build", "op", "rule"), RULES)
def test_rule_is_reported(stage: Stage, build: Callable[[], UOp], op: str, rule: str | None) -> None:
    if rule is None:  # a control: the edit alone is legal
        verify(build(), stage)
        return
    with pytest.raises(IRVerifyError) as info:
        verify(build(), stage)
    message = str(info.value)
    assert isinstance(info.value, NodeVerifyError) and info.value.node.op.name == op  # readers point at the node
    found = MESSAGE.match(message)
    assert found is not None, f"message not in the 'STAGE: OP #i (dtype) rule [at path]' form: {message}"
    assert (found[1], found[2]) == (stage.name, op), message
    assert rule in message


# ---- structural errors outside the per-op rules ----------------------------------------------------------------
@pytest.mark.parametrize(("stage", "root_op"), [(T, "SINK"), (S, "LINEAR"), (K, "SINK"), (P, "PROGRAM")])
def test_root_must_be_the_stage_root(stage: Stage, root_op: str) -> None:
    with pytest.raises(IRVerifyError, match=f"^{stage.name}: the root must be a {root_op}, got CONST"):
        verify(UOp.const(F32, 1.0), stage)


@pytest.mark.parametrize("bad", [("src", (1, 2)), ("src", None), ("dtype", "float32"), ("op", "ADD")])
def test_malformed_fields_are_reported(bad: tuple[str, Any]) -> None:
    x = UOp.const(F32, 1.0)
    fields: dict[str, Any] = {"op": Ops.ADD, "dtype": F32, "src": (x, x), "arg": None}
    fields[bad[0]] = bad[1]
    node = UOp(fields["op"], fields["dtype"], fields["src"], fields["arg"])
    for stage in (G, T, K):  # the stages whose root is a SINK
        with pytest.raises(IRVerifyError, match=bad[0] if bad[0] != "op" else "not an Ops member"):
            verify(UOp(Ops.SINK, VOID, (node, x + x)), stage)
    with pytest.raises(IRVerifyError):
        verify(UOp(Ops.LINEAR, VOID, (node,), ()), S)


def test_unknown_stage_and_non_uop_raise_verify_errors() -> None:
    with pytest.raises(IRVerifyError, match="unknown IR stage 7"):
        verify(UOp(Ops.SINK), 7)  # type: ignore[arg-type]
    with pytest.raises(IRVerifyError, match="checks a UOp, got int"):
        verify(3, Stage.GRAPH)  # type: ignore[arg-type]


def test_error_path_names_the_route_from_the_root() -> None:
    broken = edit(K, Ops.LOAD, lambda n: n.src[0].src[0].arg == 2, src=lambda n: (n.src[0].src[0],))()
    with pytest.raises(IRVerifyError) as info:
        verify(broken, K)
    assert str(info.value).endswith("[at SINK.src[0] > END.src[0] > STORE.src[1] > ADD.src[0] > REDUCE.src[0] > "
                                    "MUL.src[1] > LOAD]")


# ---- deep graphs -----------------------------------------------------------------------------------------------
DEPTH = 100_000


def test_deep_chains_verify_without_recursion() -> None:
    x = UOp(Ops.RESHAPE, F32, (UOp(Ops.BUFFER, F32, (), BufferRef(0, "CPU", 4)),), (2, 2))
    one = UOp(Ops.EXPAND, F32, (UOp(Ops.RESHAPE, F32, (UOp.const(F32, 1.0),), (1, 1)),), (2, 2))
    for _ in range(DEPTH):
        x = x + one
    verify(UOp(Ops.SINK, VOID, (x,)), T)
    # a rule broken at the bottom of the chain is still found, with a path cut to a readable length
    bottom = UOp(Ops.RESHAPE, F32, (UOp(Ops.BUFFER, F32, (), BufferRef(0, "CPU", 4)),), (4, 2))
    hops = DEPTH + 1  # SINK.src[0], then one ADD.src[0] per link; the message keeps the first 3 and the last 4
    with pytest.raises(IRVerifyError, match=r"RESHAPE #1 .* \[at SINK.src\[0\] > ADD.src\[0\] > ADD.src\[0\] > "
                                            rf"\.\.\. {hops - 7} more > (ADD.src\[0\] > ){{4}}RESHAPE\]$"):
        verify(UOp(Ops.SINK, VOID, (x,)).substitute({_bottom(x): bottom}), T)


def _bottom(x: UOp) -> UOp:
    while x.op is Ops.ADD:
        x = x.src[0]
    return x


def test_deep_kernel_verifies() -> None:
    out = UOp(Ops.PARAM, F32.ptr(1), (), 0)
    value = UOp.const(F32, 0.0)
    for i in range(DEPTH // 4):
        value = value + UOp.const(F32, float(i % 7))
    index = UOp(Ops.INDEX, out.dtype, (out, UOp.const(IDX, 0)))
    verify(UOp(Ops.SINK, VOID, (UOp(Ops.STORE, VOID, (index, value)),)), K)


def test_ten_thousand_nodes_verify_fast() -> None:
    """A guard against accidentally quadratic rules, not a benchmark (bench/ measures): 10k nodes well under 0.25 s
    even on a loaded machine, where a few milliseconds is typical."""
    out = UOp(Ops.PARAM, F32.ptr(16), (), 0)
    r = UOp.range(16, 0, AxisType.GLOBAL)
    index = UOp(Ops.INDEX, out.dtype, (out, r))
    value = UOp(Ops.LOAD, F32, (index,))
    for i in range(5_000):
        value = value * UOp.const(F32, float(i)) if i % 2 else value + UOp.const(F32, float(i))
    root = UOp(Ops.SINK, VOID, (UOp(Ops.END, VOID, (UOp(Ops.STORE, VOID, (index, value)), r)),))
    assert len(root.toposort) >= 10_000
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        verify(root, K)
        best = min(best, time.perf_counter() - start)
    assert best < 0.25


# ---- constants agree with NumPy on what a dtype holds ----------------------------------------------------------
NUMPY_FLOATS = {dtypes.float16: np.float16, dtypes.bfloat16: ml_dtypes.bfloat16, dtypes.float32: np.float32,
                dtypes.float64: np.float64}


@given(st.sampled_from(sorted(NUMPY_FLOATS, key=lambda d: d.itemsize)),
       st.floats(allow_nan=False) | st.sampled_from([65504.0, 65520.0, 3.4e38, 2.0**-149, 2.0**-150, 0.1, 1 / 3]))
def test_float_constant_is_valid_iff_numpy_holds_it_exactly(dt: DType, value: float) -> None:
    with np.errstate(over="ignore"):
        held = float(np.array(value).astype(NUMPY_FLOATS[dt]))
    exact = held == value and math.copysign(1.0, held) == math.copysign(1.0, value)
    assert _const_ok(dt, value) == exact


@given(st.sampled_from([d for d in dtypes.all() if d.is_int]), st.integers(-(2**65), 2**65))
def test_int_constant_is_valid_iff_numpy_range_holds_it(dt: DType, value: int) -> None:
    info = np.iinfo(dt.name)  # NumPy's integer names are plygrad's
    assert _const_ok(dt, value) == (int(info.min) <= value <= int(info.max))


def _const_ok(dt: DType, value: Any) -> bool:
    try:
        verify(UOp(Ops.SINK, VOID, (const(dt, value),)), T)
    except IRVerifyError:
        return False
    return True


# ---- whatever the graph, only IRVerifyError ------------------------------------------------------------------------
DTYPES = st.sampled_from([*dtypes.all(), VOID, IDX, F32.vec(4), dtypes.bool.vec(2), IDX.vec(2), F32.ptr(8),
                          I32.ptr(-1), F32.ptr(4, AddrSpace.LOCAL), F32.ptr(4, AddrSpace.REG)])
SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=4)
           | st.sampled_from(list(Ops)) | st.sampled_from(list(AxisType)) | st.sampled_from(list(OptOps)) | DTYPES)
RECORDS = (st.builds(BufferRef, SCALARS, SCALARS, SCALARS) | st.builds(BufferRef, st.integers(-3, 3),
           st.just("CPU"), st.integers(-1, 8)) | st.builds(KernelInfo, SCALARS, st.tuples(SCALARS))
           | st.builds(Opt, SCALARS, SCALARS, SCALARS)
           | st.builds(ProgramInfo, SCALARS, SCALARS, SCALARS, st.tuples(st.builds(ParamInfo, SCALARS, SCALARS,
                                                                                      SCALARS, SCALARS))))
ARGS = st.recursive(SCALARS | RECORDS, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=6)
OPS = st.sampled_from(list(Ops))


def _verify_only_raises_verify_errors(root: UOp) -> None:
    for stage in Stage:
        try:
            verify(root, stage)
        except IRVerifyError as e:
            assert "internal verifier error" not in str(e), str(e)


@given(st.data())
def test_random_graphs_raise_only_verify_errors(data: st.DataObject) -> None:
    nodes: list[UOp] = []
    for _ in range(data.draw(st.integers(1, 12))):
        srcs = data.draw(st.lists(st.sampled_from(nodes), max_size=4)) if nodes else []
        nodes.append(UOp(data.draw(OPS), data.draw(DTYPES), tuple(srcs), data.draw(ARGS)))
    root_op = data.draw(st.sampled_from([Ops.SINK, Ops.LINEAR, Ops.PROGRAM, Ops.CALL]))
    _verify_only_raises_verify_errors(UOp(root_op, VOID, tuple(nodes[-3:]), data.draw(ARGS)))


@given(st.sampled_from(list(Stage)), st.data())
def test_mutated_examples_raise_only_verify_errors(stage: Stage, data: st.DataObject) -> None:
    """Random graphs rarely get past the first rules; one changed field of a valid graph reaches the deep ones."""
    root = EXAMPLES[stage]()
    order = list(root.toposort) if stage is not S else [*root.toposort, *pick(root, Ops.SINK).toposort]
    node = data.draw(st.sampled_from(order))
    field = data.draw(st.sampled_from(["op", "dtype", "arg", "src", "src-item"]))
    if field == "op":
        new = node.replace(op=data.draw(OPS))
    elif field == "dtype":
        new = node.replace(dtype=data.draw(DTYPES))
    elif field == "arg":
        new = node.replace(arg=data.draw(ARGS))
    elif field == "src":
        new = node.replace(src=tuple(data.draw(st.lists(st.sampled_from(order), max_size=4))))
    else:
        others = [n for n in order if n is not node and node not in n.toposort]
        new = node.replace(src=(*node.src, data.draw(st.sampled_from(others)))) if others else node
    _verify_only_raises_verify_errors(swap(root, node, new))


def test_a_verifier_bug_still_surfaces_as_a_verify_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The safety net for untrusted input: a check that crashes reports an internal error, never a TypeError."""
    # the package exports the function `verify`, which shadows the module of the same name as an attribute
    verify_module = importlib.import_module("plygrad.ir.verify")

    def crashing(node: UOp) -> str | None:
        raise TypeError("boom")

    compiled = verify_module._COMPILED[K]
    rows = {**compiled.rows, Ops.CONST: compiled.rows[Ops.CONST]._replace(checks=(crashing,))}
    monkeypatch.setitem(verify_module._COMPILED, K, compiled._replace(rows=rows))
    with pytest.raises(IRVerifyError, match="KERNEL: internal verifier error TypeError: boom"):
        verify(EXAMPLES[K](), K)


# ---- the reference document covers the whole op set -------------------------------------------------------------
IR_DOC = Path(__file__).resolve().parents[3] / "docs" / "ir.md"


@pytest.mark.skipif(not IR_DOC.exists(), reason="docs/ir.md is in the repository, not in an installed package")
def test_docs_describe_every_op_and_stage() -> None:
    text = IR_DOC.read_text(encoding="utf-8")
    missing = [op.name for op in Ops if f"`{op.name}`" not in text]
    assert not missing, f"docs/ir.md does not describe {missing}"
    assert all(f"`{stage.name}`" in text for stage in Stage)
