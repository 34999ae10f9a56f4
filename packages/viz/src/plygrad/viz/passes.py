"""`python -m plygrad.viz TRACE --passes KERNEL`: codegen's passes replayed offline on a recorded kernel's AST and
Target, with the recorded optimizations, shown as text diffs from one pass to the next (docs/viz.md).

The replay is codegen's (`plygrad.codegen.pass_trace.pass_texts`), found through the `plygrad.kernel_passes`
entry point: plygrad-viz may not import codegen, and the recording paid nothing for it.
"""

from __future__ import annotations

import base64
import difflib
import itertools
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Final

from plygrad.ir.dtype import dtypes
from plygrad.ir.ops import Ops, OptOps
from plygrad.ir.records import KernelInfo, Opt
from plygrad.ir.serialize import deserialize, serialize
from plygrad.ir.stage import Stage
from plygrad.ir.uop import UOp
from plygrad.viz.model import Trace

PASSES_GROUP: Final = "plygrad.kernel_passes"
Replay = Callable[[bytes, bytes, bytes | None], list[tuple[str, str]]]


def replayer() -> Replay:
    """The `default` plugin of `plygrad.kernel_passes` (ImportError saying what to install when missing)."""
    found = [ep for ep in entry_points(group=PASSES_GROUP) if ep.name == "default"]
    if not found:
        raise ImportError(f"--passes needs plygrad-codegen (it registers the `{PASSES_GROUP}` entry point "
                          "`default`): pip install plygrad-codegen")
    replay: Replay = found[0].load()
    return replay


def find_kernel(trace: Trace, which: str) -> int:
    """The index of the kernel named `which` (the first of that name), or `#n` for kernel n; ValueError listing
    the names otherwise."""
    if which.startswith("#") and which[1:].isdigit() and int(which[1:]) < len(trace.kernels):
        return int(which[1:])
    for i, kernel in enumerate(trace.kernels):
        if kernel["name"] == which:
            return i
    names = sorted({k["name"] for k in trace.kernels})
    raise ValueError(f"no kernel {which!r} in the trace; its kernels: {', '.join(names) or 'none'} (or #0..#"
                     f"{len(trace.kernels) - 1})")


def kernel_passes(trace: Trace, index: int, replay: Replay | None = None) -> list[tuple[str, str]]:
    """(pass, text after it) for recorded kernel `index`, optimized with the list its program recorded."""
    kernel: dict[str, Any] = trace.kernels[index]
    if not kernel.get("ast") or not kernel.get("target"):
        raise ValueError(f"kernel {kernel['name']!r}: its AST or Target was not recorded")
    ast = base64.b64decode(kernel["ast"])
    info = deserialize(ast, Stage.KERNEL).arg
    already = len(info.opts) if isinstance(info, KernelInfo) else 0  # opts the AST carried: applied, not chosen
    opts = tuple(Opt(OptOps[name], axis, amount) for name, axis, amount in kernel.get("opts", []))[already:]
    opts_bytes = serialize(UOp(Ops.SINK, dtypes.void, (), KernelInfo("", opts)), Stage.KERNEL)
    return (replay or replayer())(ast, base64.b64decode(kernel["target"]), opts_bytes)


def diff_text(passes: list[tuple[str, str]]) -> str:
    """The input's text, then for each pass a unified diff against the text before it (or "no change")."""
    out = [f"=== input\n{passes[0][1]}"]
    for (before_name, before), (name, after) in itertools.pairwise(passes):
        if before == after:
            out.append(f"=== {name}: no change")
            continue
        diff = difflib.unified_diff(before.splitlines(), after.splitlines(), f"after {before_name}",
                                    f"after {name}", lineterm="", n=2)
        out.append(f"=== {name}\n" + "\n".join(diff))
    return "\n".join(out)
