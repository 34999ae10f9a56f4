"""The renderer interface: what codegen hands a renderer and what it gets back.

A renderer turns the linearized statements of one kernel into source text for one language. Renderers are
found by `Target.renderer` name (renderer/__init__.py); a third-party backend can add one through the
`plygrad.renderers` entry-point group by pointing at a subclass of `Renderer`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from plygrad.ir import ParamInfo, Target, UOp


@dataclass(frozen=True)
class KernelSource:
    """Everything a renderer needs: the function name, its statements in order (linearize.py describes them),
    its buffer parameters (index order) and its variables (the order the function takes them)."""

    name: str
    linear: tuple[UOp, ...]
    params: tuple[ParamInfo, ...]
    variables: tuple[UOp, ...]


class Renderer(ABC):
    """Renders a linearized kernel for one target; subclasses set `name` and implement `render`."""

    name: ClassVar[str] = ""

    def __init__(self, target: Target) -> None:
        self.target = target

    @abstractmethod
    def render(self, kernel: KernelSource) -> str:
        """The program's source text. Raise CodegenError for anything the language cannot express."""

    def launch_dims(self, kernel: KernelSource) -> tuple[tuple[int, int, int], tuple[int, int, int] | None]:
        """(global_size, local_size) of one launch. A renderer whose function runs every loop itself (C) keeps
        the default: one invocation, no workgroups."""
        return (1, 1, 1), None
