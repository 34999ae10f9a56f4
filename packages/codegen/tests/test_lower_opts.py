"""The entry point's optional third argument: an optimization list in bytes (what the runtime's BEAM hands over)."""

from __future__ import annotations

import pytest
from cg_kernels import matmul, reduce_rows

from plygrad.codegen import CodegenError, OptError, choose_opts, lower, lower_uop, opts_from_bytes, opts_to_bytes
from plygrad.ir import Ops, Opt, OptOps, Stage, Target, UOp, deserialize, dtypes, serialize

CPU4 = Target("CPU", "c", threads=4)
KERNEL = matmul(8, 16, 8)
OPTS = (Opt(OptOps.UNROLL, 2, 4), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.THREAD, 0, 4))


def program_of(opts: bytes | None) -> UOp:
    args = (serialize(KERNEL, Stage.KERNEL), CPU4.to_bytes()) + (() if opts is None else (opts,))
    return deserialize(lower(*args), Stage.PROGRAM)


def test_opts_round_trip_through_bytes() -> None:
    assert opts_from_bytes(opts_to_bytes(OPTS)) == OPTS
    assert opts_from_bytes(opts_to_bytes(())) == ()


@pytest.mark.parametrize("opts", [OPTS, (), (Opt(OptOps.UPCAST, 0, 2),)], ids=["three", "none", "one"])
def test_given_opts_replace_the_heuristic(opts: tuple[Opt, ...]) -> None:
    program = program_of(opts_to_bytes(opts))
    assert program.arg.opts == opts
    assert program is lower_uop(KERNEL, CPU4, list(opts)), "the bytes entry and lower_uop agree"


def test_without_opts_the_heuristic_chooses() -> None:
    assert program_of(None).arg.opts == tuple(choose_opts(KERNEL, CPU4))


def test_an_opt_that_does_not_apply_raises_opt_error() -> None:
    with pytest.raises(OptError, match="divides"):
        program_of(opts_to_bytes((Opt(OptOps.UPCAST, 0, 3),)))


@pytest.mark.parametrize("data", [b"junk", serialize(reduce_rows(Ops.ADD, dtypes.float32, 2, 2), Stage.KERNEL),
                                  serialize(UOp(Ops.SINK, dtypes.void, ()), Stage.KERNEL)],
                         ids=["not IR", "a kernel with stores", "no KernelInfo"])
def test_opts_bytes_that_are_not_an_opt_list_raise(data: bytes) -> None:
    with pytest.raises(CodegenError, match="opts argument"):
        program_of(data)


def test_a_reduction_the_unrolled_axis_does_not_touch_keeps_one_accumulator() -> None:
    """softmax: the row max feeds the unrolled sum of exps but does not depend on its axis; unrolling the sum by 4
    must not compute the max 4 times (one accumulator for the max, one for the sum)."""
    from cg_kernels import softmax_like

    program = lower_uop(softmax_like(4, 16), Target("CPU", "c"), [Opt(OptOps.UNROLL, 2, 4)])
    source = program.src[0].arg
    assert source.count("acc0 =") >= 1 and "acc2" not in source, source
