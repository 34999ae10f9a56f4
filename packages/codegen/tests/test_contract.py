"""The codegen contract: bytes in and out, the entry points, the renderer registry, ProgramInfo, and errors."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import numpy as np
import pytest
from cg_kernels import elementwise_add, matmul, multi_output, scaled_by_var
from cg_run import run_program

import plygrad.codegen.renderer as renderer_registry
from plygrad.codegen import PASSES, CodegenError, KernelSource, Renderer, get_renderer, lower, lower_uop
from plygrad.codegen.renderer.c import CRenderer
from plygrad.ir import Ops, Opt, OptOps, ProgramInfo, Stage, Target, deserialize, dtypes, serialize, verify

CPU = Target("CPU", "c", arch="x86-64", threads=1)


def test_lower_bytes_matches_lower_uop() -> None:
    kernel = matmul(4, 8, 4)
    program = deserialize(lower(serialize(kernel, Stage.KERNEL), CPU.to_bytes()), Stage.PROGRAM)
    assert program is lower_uop(kernel, CPU)
    verify(program, Stage.PROGRAM)


def test_entry_point_is_lower() -> None:
    (ep,) = [ep for ep in entry_points(group="plygrad.codegen") if ep.name == "default"]
    assert ep.load() is lower


def test_non_kernel_bytes_are_rejected() -> None:
    program_bytes = lower(serialize(matmul(4, 8, 4), Stage.KERNEL), CPU.to_bytes())
    with pytest.raises(CodegenError, match="KERNEL"):
        lower(program_bytes, CPU.to_bytes())
    with pytest.raises(CodegenError, match="KERNEL"):
        lower(b"not a graph", CPU.to_bytes())
    with pytest.raises(CodegenError, match="Target"):
        lower(serialize(matmul(4, 8, 4), Stage.KERNEL), b"\x89PLYIR\r\n junk")


def test_lower_uop_verifies_its_input() -> None:
    bad = matmul(4, 8, 4).replace(src=())  # a SINK with no stores is no kernel
    with pytest.raises(CodegenError, match="KERNEL"):
        lower_uop(bad.replace(op=Ops.NOOP), CPU)


def test_unknown_renderer_lists_the_known_ones() -> None:
    with pytest.raises(CodegenError, match=r"unknown renderer 'nope'.*known renderers: .*\bc\b"):
        lower_uop(matmul(4, 8, 4), Target("CPU", "nope"))


class _EntryPoint:
    def __init__(self, name: str, value: Any) -> None:
        self.name, self.value = name, "fake_module:Renderer"
        self._value = value

    def load(self) -> Any:
        if isinstance(self._value, Exception):
            raise self._value
        return self._value


class UpperCRenderer(CRenderer):
    """A 'third-party' renderer: C with a marker comment."""

    name = "marked"

    def render(self, kernel: KernelSource) -> str:
        return "/* marked */\n" + super().render(kernel)


def test_third_party_renderers_come_from_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = [_EntryPoint("marked", UpperCRenderer), _EntryPoint("broken", ImportError("no such module"))]
    monkeypatch.setattr(renderer_registry, "entry_points", lambda group: fakes)
    assert get_renderer("marked") is UpperCRenderer
    program = lower_uop(elementwise_add(dtypes.float32, 8), Target("CPU", "marked"))
    assert program.src[0].arg.startswith("/* marked */")
    with pytest.raises(CodegenError, match=r"broken \(ImportError: no such module\)"):
        get_renderer("missing")


def test_renderer_base_is_abstract() -> None:
    assert issubclass(CRenderer, Renderer)
    with pytest.raises(TypeError):
        Renderer(CPU)  # type: ignore[abstract]


def test_program_info() -> None:
    n = 64
    program = lower_uop(multi_output(n), CPU, [Opt(OptOps.UPCAST, 0, 4)])
    info: ProgramInfo = program.arg
    assert info.global_size == (1, 1, 1) and info.local_size is None
    assert [(p.index, p.dtype, p.size, p.writable) for p in info.params] == [
        (0, dtypes.float32, n, True), (1, dtypes.float32, n, True), (2, dtypes.float32, n, False),
        (3, dtypes.float32, n, False)]
    assert info.opts == (Opt(OptOps.UPCAST, 0, 4),)
    assert info.ops == 2 * n  # one ADD and one MUL per element
    assert info.mem == 4 * n * 4  # two loads and two stores of float32 per element
    assert info.name.isidentifier()


def test_program_names() -> None:
    assert lower_uop(matmul(4, 8, 4), CPU).arg.name == "matmul"  # KernelInfo.name wins
    assert lower_uop(elementwise_add(dtypes.float32, 8), CPU, []).arg.name == "E_8"


def test_variables_follow_the_buffers() -> None:
    program = lower_uop(scaled_by_var(16), CPU)
    assert [v.arg[0] for v in program.src[1:]] == ["n"]
    assert "long long n)" in program.src[0].arg
    out, a = np.zeros(16, np.float32), np.arange(16, dtype=np.float32)
    run_program(program, [out, a], {"n": 3})
    np.testing.assert_array_equal(out[:4], [0, 3, 6, 0])


def test_inputs_are_const_restrict_pointers() -> None:
    source = lower_uop(elementwise_add(dtypes.float16, 8), CPU).src[0].arg
    params = "plygrad_half* restrict data0, const plygrad_half* restrict data1, const plygrad_half* restrict data2"
    assert f"void E_8({params})" in source


def test_float16_storage_block_only_when_float16_is_used() -> None:
    half = lower_uop(elementwise_add(dtypes.float16, 8), CPU).src[0].arg
    assert "#ifdef __FLT16_MANT_DIG__\ntypedef _Float16 plygrad_half;" in half
    assert half.count("_Float16") == 2  # the typedef and the conversion, both inside the #ifdef
    single = lower_uop(elementwise_add(dtypes.float32, 8), CPU).src[0].arg
    assert "plygrad_half" not in single and "FLT16" not in single


def test_pass_order_is_one_list() -> None:
    assert [name for name, _ in PASSES] == ["verify", "merge_axes", "split_ranges", "simplify", "unshare_ranges",
                                            "gather", "optimize", "gpu_dims", "expand_upcast", "group_reduce",
                                            "lower_reduce", "fuse_wmma", "pack_panels", "transpose_gathers",
                                            "simplify_lowered", "linearize", "render"]


def test_c_family_renderers_share_one_op_table() -> None:
    """CUDA, HIP and Metal replace entries of the C family's op table (renderer/rules.py), and drop none."""
    from plygrad.codegen.renderer.c import CFunction
    from plygrad.codegen.renderer.cuda import CudaFunction
    from plygrad.codegen.renderer.hip import HipFunction
    from plygrad.codegen.renderer.metal import MetalFunction
    from plygrad.codegen.renderer.rules import RULES

    for function in (CFunction, CudaFunction, HipFunction, MetalFunction):
        assert function.rules.keys() == RULES.keys(), function.__name__
    assert CudaFunction.rules[Ops.ADD] is RULES[Ops.ADD]  # the ALU rules are written once
    assert CudaFunction.spelling.arith[Ops.ADD] != CFunction.spelling.arith[Ops.ADD]  # their spelling differs


def test_unsupported_dtype_is_rejected() -> None:
    target = Target("CPU", "c", supported_dtypes=(dtypes.float32, dtypes.int32, dtypes.bool))
    lower_uop(elementwise_add(dtypes.float32, 8), target)
    with pytest.raises(CodegenError, match=r"float64.*supported_dtypes"):
        lower_uop(elementwise_add(dtypes.float64, 8), target)


@pytest.mark.parametrize("name", ["v0", "acc1", "data0", "int", "for", "bad name"])
def test_variable_names_that_clash_in_c_are_rejected(name: str) -> None:
    from plygrad.ir import UOp

    kernel = scaled_by_var(16)
    var = next(n for n in kernel.toposort if n.op is Ops.DEFINE_VAR)
    renamed = kernel.substitute({var: UOp.variable(name, 1, 16)})
    with pytest.raises(CodegenError, match="rename the variable"):
        lower_uop(renamed, CPU)
