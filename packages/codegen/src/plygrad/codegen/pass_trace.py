"""Every pass of `lower.PASSES` replayed on one kernel, with what it left behind as text: the kernel's IR text after
each rewriting pass, the linearized ops after `linearize`, the source after `render`. plygrad-viz shows the
differences (`python -m plygrad.viz TRACE --passes NAME`, docs/viz.md); registered as the `plygrad.kernel_passes`
entry point `default`, so a recording costs nothing at run time and the replay happens offline on its bytes.
"""

from __future__ import annotations

from plygrad.codegen.errors import CodegenError
from plygrad.codegen.lower import PASSES, Lowering, opts_from_bytes
from plygrad.ir.errors import IRError
from plygrad.ir.serialize import deserialize
from plygrad.ir.stage import Stage
from plygrad.ir.target import Target
from plygrad.ir.text import to_text
from plygrad.ir.uop import UOp


def _linear_text(linear: list[UOp]) -> str:
    index = {u: i for i, u in enumerate(linear)}
    lines = []
    for i, u in enumerate(linear):
        srcs = ", ".join(f"%{index[s]}" if s in index else s.op.name for s in u.src)
        lines.append(f"%{i} = {u.op.name} {u.dtype} ({srcs}) {u.arg!r}")
    return "\n".join(lines)


def pass_texts(kernel: bytes, target: bytes, opts: bytes | None = None) -> list[tuple[str, str]]:
    """(pass name, text after it) for each pass, after ("input", the kernel's text). `opts` as `lower` takes them
    (`opts_to_bytes`: the list the recorded program was optimized with); None lets the heuristic choose."""
    try:
        graph = deserialize(kernel, Stage.KERNEL)
        tgt = Target.from_bytes(target)
    except IRError as e:
        raise CodegenError(f"pass_texts needs KERNEL-stage graph bytes and Target bytes: {e}") from e
    state = Lowering(graph, tgt, None if opts is None else opts_from_bytes(opts))
    out = [("input", to_text(graph))]
    for name, run in PASSES:
        state = run(state)
        if state.program is not None:
            out.append((name, str(state.program.src[0].arg)))
        elif name == "linearize":
            out.append((name, _linear_text(state.linear)))
        else:
            out.append((name, to_text(state.kernel)))
    return out
