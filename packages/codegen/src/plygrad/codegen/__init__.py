"""plygrad.codegen: kernel AST + Target -> PROGRAM (optimizations, linearization, renderers).

`lower(kernel_bytes, target_bytes, opts_bytes=None) -> program_bytes` is the `plygrad.codegen` entry point the
runtime calls (the optional third argument, written by `opts_to_bytes`, is the optimization list a search such as
the runtime's BEAM chose); `lower_uop` is the same in process; `apply_opts` drives the optimization stage alone, on
the kernel `optimizable` returns (whose axis ids the `Opt`s name).
"""

from plygrad.codegen.errors import CodegenError, OptError
from plygrad.codegen.heuristic import choose_opts
from plygrad.codegen.lower import PASSES, lower, lower_uop, optimizable, opts_from_bytes, opts_to_bytes
from plygrad.codegen.opts import apply_opts
from plygrad.codegen.renderer import KernelSource, Renderer, get_renderer, known_renderers

__all__ = ["PASSES", "CodegenError", "KernelSource", "OptError", "Renderer", "apply_opts", "choose_opts",
           "get_renderer", "known_renderers", "lower", "lower_uop", "optimizable", "opts_from_bytes", "opts_to_bytes"]
