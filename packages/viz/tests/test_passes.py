"""--passes: which kernel, the optimization list handed to the replay, and the diffs between passes (the replay
itself is codegen's, tested end to end in tests/test_viz.py)."""

from __future__ import annotations

import pytest
from viz_synthetic import three_kernel_trace

from plygrad.ir import Stage, deserialize
from plygrad.viz import parse
from plygrad.viz.passes import diff_text, find_kernel, kernel_passes


def test_find_kernel_by_name_or_number() -> None:
    trace = parse(three_kernel_trace())
    assert find_kernel(trace, "k1") == 1 and find_kernel(trace, "#2") == 2
    with pytest.raises(ValueError, match="no kernel 'k9' in the trace; its kernels: k0, k1, k2"):
        find_kernel(trace, "k9")


def test_the_replay_gets_the_recorded_ast_target_and_opts() -> None:
    seen: list[tuple[bytes, bytes, bytes | None]] = []

    def replay(kernel: bytes, target: bytes, opts: bytes | None) -> list[tuple[str, str]]:
        seen.append((kernel, target, opts))
        return [("input", "a")]

    data = three_kernel_trace()
    data["kernels"][0]["target"] = "AAAA"
    kernel_passes(parse(data), 0, replay)
    kernel, target, opts = seen[0]
    assert deserialize(kernel, Stage.KERNEL).arg.name == "k0" and target == b"\0\0\0"
    assert opts is not None
    listed = deserialize(opts, Stage.KERNEL).arg.opts
    assert [(o.op.name, o.axis, o.amount) for o in listed] == [("UPCAST", 0, 4)]


def test_a_kernel_without_its_target_is_refused() -> None:
    with pytest.raises(ValueError, match="its AST or Target was not recorded"):
        kernel_passes(parse(three_kernel_trace()), 0, lambda *args: [])


def test_diffs_between_passes() -> None:
    text = diff_text([("input", "x\ny"), ("a", "x\ny"), ("b", "x\nz")])
    assert text.splitlines() == ["=== input", "x", "y", "=== a: no change", "=== b", "--- after a", "+++ after b",
                                 "@@ -1,2 +1,2 @@", " x", "-y", "+z"]
