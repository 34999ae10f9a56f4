"""Renderers by name: the built-in ones plus every `plygrad.renderers` entry point (third-party renderers).

`get_renderer(name)` is how lowering finds the renderer a `Target` asks for; an unknown name raises a
CodegenError listing every renderer it knows.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from plygrad.codegen.errors import CodegenError
from plygrad.codegen.renderer.base import KernelSource, Renderer

__all__ = ["KernelSource", "Renderer", "get_renderer", "known_renderers"]


def _builtin() -> dict[str, type[Renderer]]:
    from plygrad.codegen.renderer.c import CRenderer
    from plygrad.codegen.renderer.cuda import CudaRenderer
    from plygrad.codegen.renderer.hip import HipRenderer
    from plygrad.codegen.renderer.metal import MetalRenderer

    return {CRenderer.name: CRenderer, CudaRenderer.name: CudaRenderer, HipRenderer.name: HipRenderer,
            MetalRenderer.name: MetalRenderer}


def _scan() -> tuple[dict[str, type[Renderer]], list[str]]:
    """Every renderer by name (built-in first; an entry point may not shadow one) and the plugins that failed."""
    found = _builtin()
    broken: list[str] = []
    for ep in entry_points(group="plygrad.renderers"):
        if ep.name in found:
            continue
        try:
            cls = ep.load()
        except Exception as e:  # a broken plugin must not break the others; the error names it and why
            broken.append(f"{ep.name} ({type(e).__name__}: {e})")
            continue
        if isinstance(cls, type) and issubclass(cls, Renderer):
            found[ep.name] = cls
        else:
            broken.append(f"{ep.name} (entry point {ep.value} is not a Renderer subclass)")
    return found, broken


def known_renderers() -> dict[str, type[Renderer]]:
    """Every renderer codegen can use, by name."""
    return _scan()[0]


def get_renderer(name: str) -> type[Renderer]:
    """The renderer class registered as `name`; raises CodegenError listing the known ones."""
    renderers, broken = _scan()
    cls = renderers.get(name)
    if cls is None:
        extra = f"; plugins that failed to load: {', '.join(broken)}" if broken else ""
        raise CodegenError(f"unknown renderer {name!r} (Target.renderer); known renderers: "
                           f"{', '.join(sorted(renderers))}{extra}")
    return cls
