"""pass_texts: every pass of lower.PASSES replayed on one kernel, each leaving text; the last is lower's source."""

from __future__ import annotations

import pytest
from cg_kernels import matmul, reduce_rows

from plygrad.codegen import CodegenError, lower, opts_to_bytes
from plygrad.codegen.lower import PASSES
from plygrad.codegen.pass_trace import pass_texts
from plygrad.ir import Ops, Opt, OptOps, Stage, Target, UOp, deserialize, dtypes, serialize

CPU4 = Target("CPU", "c", threads=4)


@pytest.mark.parametrize("opts", [None, opts_to_bytes((Opt(OptOps.UPCAST, 0, 4),))], ids=["heuristic", "given"])
@pytest.mark.parametrize("kernel", [matmul(8, 16, 8), reduce_rows(Ops.ADD, dtypes.float32, 4, 32)],
                         ids=["matmul", "row_sum"])
def test_each_pass_leaves_text_and_the_last_is_the_source(kernel: UOp, opts: bytes | None) -> None:
    args = (serialize(kernel, Stage.KERNEL), CPU4.to_bytes())
    texts = pass_texts(*args, opts)
    assert [name for name, _ in texts] == ["input"] + [name for name, _ in PASSES]
    program = deserialize(lower(*args, *(() if opts is None else (opts,))), Stage.PROGRAM)
    assert texts[-1][1] == program.src[0].arg
    assert texts[0][1] != dict(texts)["optimize"], "optimizing changes the kernel"


def test_bad_bytes_are_refused() -> None:
    with pytest.raises(CodegenError, match="pass_texts needs KERNEL-stage graph bytes and Target bytes"):
        pass_texts(b"nonsense", CPU4.to_bytes())
