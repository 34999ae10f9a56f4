"""The renderer interface: what codegen hands a renderer and what it gets back.

A renderer turns the linearized statements of one kernel into source text for one language. Renderers are
found by `Target.renderer` name (renderer/__init__.py); a third-party backend can add one through the
`plygrad.renderers` entry-point group by pointing at a subclass of `Renderer`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from plygrad.ir import DType, Ops, ParamInfo, Target, UOp, dtypes


@dataclass(frozen=True)
class KernelSource:
    """Everything a renderer needs: the function name, its statements in order (linearize.py describes them),
    its buffer parameters (index order) and its variables (the order the function takes them)."""

    name: str
    linear: tuple[UOp, ...]
    params: tuple[ParamInfo, ...]
    variables: tuple[UOp, ...]


@dataclass(frozen=True)
class VectorForms:
    """Which vector values a renderer can express; vectorize.py asks before it makes one (docs/codegen.md §2.1).

    `alu`: dtypes whose ADD SUB MUL FDIV NEG MAX RECIPROCAL and REDUCE accumulators may be vector values (a CPU's SIMD
    registers). `memory`: dtypes that may be loaded and stored k elements at a time; a dtype here but not in `alu`
    has vectors only in memory: one vector load whose lanes are taken apart for scalar math, and scalar lanes packed
    into one vector store (a GPU's 16-byte accesses). `aligned`: a vector access must be aligned to its size in
    bytes (CUDA's `ld.global.v4`); codegen then makes one only where it proves the alignment, and smaller aligned
    pieces or single lanes elsewhere. `lane_gates`: a contiguous load whose gate differs per lane (a padded
    convolution's window at the border) may still be one vector LOAD, through `INDEX(buf, idx, gate_0, ...,
    gate_k-1)`: the renderer loads every lane at once where all gates hold and lane by lane elsewhere (C).
    `math`: unary ops beyond those that the `alu` dtypes also have as vector ops, lane for lane the scalar op's
    bits (C: float32 EXP2 and float32/float64 SQRT, renderer/c_math.py). `masks`: dtypes whose comparisons give a
    vector of lane masks (a `bool` vector) that the renderer can combine (AND OR XOR) and select by (WHERE of that
    dtype) lane by lane (C: float32, masks of int32 lanes). The widths themselves are the Target's
    (`Target.vector_widths_for`)."""

    alu: frozenset[DType]
    memory: frozenset[DType]
    aligned: bool = False
    lane_gates: bool = False
    math: frozenset[tuple[Ops, DType]] = frozenset()
    masks: frozenset[DType] = frozenset()


# what the C renderer has (GCC/Clang vector extensions): IEEE float ops in vectors, unaligned vector accesses
C_VECTOR_FORMS = VectorForms(alu=frozenset({dtypes.float32, dtypes.float64}),
                             memory=frozenset({dtypes.float32, dtypes.float64}), lane_gates=True,
                             math=frozenset({(Ops.EXP2, dtypes.float32), (Ops.SQRT, dtypes.float32),
                                             (Ops.SQRT, dtypes.float64)}), masks=frozenset({dtypes.float32}))


class Renderer(ABC):
    """Renders a linearized kernel for one target; subclasses set `name` and implement `render`, and
    `vector_forms` when their vectors differ from C's."""

    name: ClassVar[str] = ""
    vector_forms: ClassVar[VectorForms] = C_VECTOR_FORMS

    def __init__(self, target: Target) -> None:
        self.target = target

    @abstractmethod
    def render(self, kernel: KernelSource) -> str:
        """The program's source text. Raise CodegenError for anything the language cannot express."""

    def launch_dims(self, kernel: KernelSource) -> tuple[tuple[int, int, int], tuple[int, int, int] | None]:
        """(global_size, local_size) of one launch. A renderer whose function runs every loop itself (C) keeps
        the default: one invocation, no workgroups."""
        return (1, 1, 1), None
